//! Dead bytes per sector (feature `sector-table`, stage 3 of format 10;
//! `store/dead.rs`, `log/dead.rs`) against an oracle: every batch in the
//! sectors in use, read from flash chunk by chunk, and what the store's
//! live structures still reach (the objects, every session's chain and the
//! batches its base's entries name). The counts must never exceed the
//! bytes of the batches nothing reaches, in any sector, and must find
//! most of them.

extern crate std;

use std::collections::BTreeMap;
use std::vec::Vec;

use clawmem_sim::Esp32Flash;

use super::directory::ColdCursor;
use super::gc::Priority;
use super::objects::OBJECT;
use super::test_workload::{assert_reads_back, user, Workload, S};
use crate::cursor::Records;
use crate::profile::ProfileDoc;
use crate::session::{SESSION_BASE, SESSION_BATCH, SESSION_MOVES};
use crate::{Config, Error, MountMode};

/// A batch on flash: its kind and its chunks (address, framed bytes).
struct Batch {
    kind: u8,
    chunks: Vec<(u32, u32)>,
}

/// Every batch with a chunk in the sectors in use, by its first chunk's
/// address (a sector's first chunk, if it goes on a batch from a sector
/// not in use), walked tail to head by sequence: a batch goes on in the
/// sector of the next sequence, if one is in use.
fn batches(store: &mut S) -> BTreeMap<u32, Batch> {
    let geo = store.log.geo();
    let mut out: BTreeMap<u32, Batch> = BTreeMap::new();
    let mut open: Option<u32> = None;
    for seq in store.log.tail_seq()..=store.log.head_seq() {
        // (A stream that went on into a hole is dead.)
        let Some(sector) = store.log.sector_of_seq(seq) else {
            open = None;
            continue;
        };
        let end = geo.sector_start(sector) + geo.sector;
        let mut at = geo.first_chunk(sector);
        let mut first_in_sector = true;
        while end - at >= crate::layout::CHUNK_HEADER_LEN {
            let Some(h) = store.log.io().chunk_header(at).unwrap() else {
                break;
            };
            let size = geo.chunk_size(h.len);
            if size > end - at {
                break;
            }
            match open.filter(|_| first_in_sector && !h.is_first()) {
                Some(o) => out.get_mut(&o).unwrap().chunks.push((at, size)),
                // A batch, or the rest of one that began in a sector not
                // in use: a batch of its own for the oracle.
                None if h.is_first() || first_in_sector => {
                    let chunks = std::vec![(at, size)];
                    out.insert(
                        at,
                        Batch {
                            kind: h.kind,
                            chunks,
                        },
                    );
                    open = Some(at);
                }
                None => {}
            }
            open = if h.is_last() { None } else { open };
            first_in_sector = false;
            at += size;
        }
        // A batch goes on only into the next sector's first chunk.
        if first_in_sector {
            open = None;
        }
    }
    out
}

/// The oracle's dead bytes by sector: the objects', sessions' batches,
/// bases and moves records that nothing live reaches (every other kind
/// counts as live).
fn oracle(store: &mut S) -> BTreeMap<u32, u32> {
    let all = batches(store);
    let geo = store.log.geo();
    let holding = |addr: u32| {
        all.iter()
            .find(|(_, b)| {
                b.chunks
                    .iter()
                    .any(|&(at, size)| addr >= at + 12 && addr < at + size)
            })
            .map(|(&at, _)| at)
    };
    let mut live: Vec<u32> = store.objects.iter().map(|o| o.addr).collect();
    let (mut i, mut cold) = (0, ColdCursor::new(&store.dir));
    while store.next_session_word(&mut i, &mut cold).unwrap() != 0 {
        let s = cold.cur;
        let mut recs = Records::EMPTY;
        recs.start(&mut store.log.io(), &s, None).unwrap();
        let chain = recs.chain();
        live.extend_from_slice(&chain.addrs[..chain.len]);
        while let Some(r) = recs.next(&mut store.log.io()).unwrap() {
            assert!(!r.damaged);
            live.push(holding(r.addr).expect("a body outside every batch"));
        }
    }
    let mut dead = BTreeMap::new();
    for (at, b) in &all {
        if ![OBJECT, SESSION_BATCH, SESSION_BASE, SESSION_MOVES].contains(&b.kind)
            || live.contains(at)
        {
            continue;
        }
        for &(c, size) in &b.chunks {
            *dead.entry(geo.sector_of(c)).or_insert(0) += size;
        }
    }
    dead
}

/// Every sector of `store`'s partition.
fn sectors(store: &S) -> core::ops::Range<u32> {
    0..store.log.geo().count
}

/// A store mounted afresh from a copy of `store`'s flash.
fn mounted_copy(store: &mut S) -> S {
    mounted(store.flash_mut().flash_mut().snapshot())
}

/// A store mounted afresh from a copy of `store`'s flash with bit `bit`
/// of the byte at `addr` flipped.
fn mounted_flipped(store: &mut S, addr: u32, bit: u8) -> S {
    let mut sim = store.flash_mut().flash_mut().snapshot();
    sim.flip_bit(addr as usize, bit).unwrap();
    mounted(sim)
}

/// A store mounted from `sim`.
fn mounted(sim: clawmem_sim::SimFlash) -> S {
    S::mount(
        Esp32Flash::new(sim).unwrap(),
        Config::default(),
        MountMode::ExistingOnly,
    )
    .unwrap()
}

/// Checks the counts of every sector in use against the oracle; returns
/// (counted, the oracle's) over all of them.
pub(super) fn check_counts(store: &mut S) -> (u64, u64) {
    let truth = oracle(store);
    let (mut counted, mut dead) = (0u64, 0u64);
    for seq in store.log.tail_seq()..=store.log.head_seq() {
        let Some(sector) = store.log.sector_of_seq(seq) else {
            continue;
        };
        let c = store.log.dead_bytes(sector);
        let t = truth.get(&sector).copied().unwrap_or(0);
        assert!(
            c <= t,
            "sector {sector} (sequence {seq}): {c} B counted dead, {t} B are"
        );
        counted += u64::from(c);
        dead += u64::from(t);
    }
    (counted, dead)
}

/// The shared workload run until `fraction` of it is done (the oldest
/// session deleted whenever an append is refused), then a full checkpoint.
fn run_to_full_checkpoint(fraction: f64) -> Workload {
    let mut w = Workload::new(None);
    while w.done_fraction() < fraction {
        match w.append_next() {
            Ok(()) => {}
            Err(Error::Full { .. }) => {
                if let Some(old) = w.retire_oldest() {
                    w.store.delete_session(&old).unwrap();
                }
            }
            Err(e) => panic!("{e:?}"),
        }
    }
    w.store
        .write_full_checkpoint(Priority::Maintenance)
        .unwrap();
    w
}

/// A profile document of `n` bytes that names `tag`.
fn profile(tag: usize, n: usize) -> std::string::String {
    (0..n)
        .map(|i| (b'a' + ((i + tag) % 26) as u8) as char)
        .collect()
}

#[test]
fn dead_bytes_never_overstate_and_find_most_of_the_dead() {
    let mut w = Workload::new(Some(10));
    let docs = [ProfileDoc::Soul, ProfileDoc::User, ProfileDoc::Identity];
    let (mut counted, mut dead, mut checks) = (0u64, 0u64, 0u32);
    let mut remounted = false;
    let mut refused = 0;
    let mut carried = 0u64;
    let mut kept_deleted = 0;
    while !w.done() {
        let r = w.append_next();
        let n = w.n;
        match r {
            Ok(()) => refused = 0,
            Err(Error::Full { .. }) => {
                refused += 1;
                kept_deleted += u32::from(w.make_room(refused));
                continue;
            }
            Err(e) => panic!("append {n}: {e:?}"),
        }
        if n.is_multiple_of(11) {
            let doc = docs[n % docs.len()];
            w.store
                .profile_write(doc, &profile(n, 300 + n % 1500))
                .unwrap();
        }
        if n.is_multiple_of(25) {
            let (c, d) = check_counts(&mut w.store);
            counted += c;
            dead += d;
            checks += 1;
            // A copy mounted afresh takes the counts of the newest full
            // checkpoint back for the sectors opened before it, which
            // stay true.
            let (c, _) = check_counts(&mut mounted_copy(&mut w.store));
            carried += c;
        }
        // Halfway, the store goes on from a fresh mount, right after a
        // full checkpoint: it has every count back, in 16ths of a sector
        // rounded down.
        if !remounted && w.done_fraction() >= 0.5 {
            remounted = true;
            w.store
                .write_full_checkpoint(Priority::Maintenance)
                .unwrap();
            let before: Vec<u32> = sectors(&w.store)
                .map(|i| w.store.log.dead_bytes(i))
                .collect();
            let old = w.store.log.tail_seq();
            w.store = mounted_copy(&mut w.store);
            // (Sectors the mount let go at the tail hold nothing live.)
            let tail = w.store.log.tail_seq();
            let unit = crate::log::dead_unit(w.store.log.geo().sector);
            let rounded: Vec<u32> = sectors(&w.store)
                .map(|i| match w.store.log.seq_of_sector(i) {
                    Some(_) => (before[i as usize] / unit).min(15) * unit,
                    None => 0,
                })
                .collect();
            let after: Vec<u32> = sectors(&w.store)
                .map(|i| w.store.log.dead_bytes(i))
                .collect();
            assert_eq!(
                after, rounded,
                "the counts a mount takes back (tail {old}, now {tail})"
            );
            assert!(after.iter().sum::<u32>() > 0);
            check_counts(&mut w.store);
        }
    }
    std::println!(
        "dead bytes carried over a mount {carried}; kept session deleted {kept_deleted} times"
    );
    assert!(
        kept_deleted <= 4,
        "the kept session deleted {kept_deleted} times"
    );
    assert!(carried > 0);
    assert!(remounted && checks >= 40, "{checks} checks");
    assert_reads_back(&mut w.store, &w.model);
    std::println!("dead bytes counted {counted} of {dead} ({checks} checks)");
    assert!(dead > 0);
    // Most of what dies is counted: deleted sessions and relocated ones,
    // superseded profiles.
    assert!(
        counted * 10 >= dead * 6,
        "{counted} of {dead} dead bytes counted"
    );
}

#[test]
fn each_death_is_counted_where_it_happens_and_once() {
    let mut store = Workload::new(None).store;
    assert_eq!(check_counts(&mut store), (0, 0));
    // A profile written over: its old version, two chunks long (it
    // crosses from one sector into the next), is dead, all of it.
    store
        .profile_write(ProfileDoc::Soul, &profile(1, 3000))
        .unwrap();
    store
        .profile_write(ProfileDoc::Soul, &profile(2, 3000))
        .unwrap();
    let (counted, dead) = check_counts(&mut store);
    assert!(dead >= 3000, "{dead}");
    assert_eq!(counted, dead);
    // A session deleted: every batch of its chain.
    for k in 0..12 {
        let body = profile(k, 100 + 90 * k);
        store
            .append("chat:x", &[user(body.as_bytes())], false)
            .unwrap();
    }
    let before = check_counts(&mut store);
    store.delete_session("chat:x").unwrap();
    let after = check_counts(&mut store);
    assert!(after.1 > before.1 + 6000, "{before:?} {after:?}");
    assert_eq!(after.0, after.1);
    // A session whose base references its first bodies in place (a
    // consolidation: more batches than a chain may have), deleted: the
    // bodies its base names die too, counted without their batches'
    // framing (a chunk header, the batch's meta, padding: under 40 B for
    // each of the 32 batches).
    for k in 0..40 {
        let body = profile(k, 120);
        store
            .append("chat:y", &[user(body.as_bytes())], false)
            .unwrap();
    }
    let i = store
        .sessions
        .iter()
        .position(|s| s.id_len == 6 && s.root_is_base);
    assert!(i.is_some(), "no base was written");
    let before = check_counts(&mut store);
    store.delete_session("chat:y").unwrap();
    let (counted, dead) = check_counts(&mut store);
    // (What `Store::dead_space` reports: the same total, and the sectors
    // at least half dead among them.)
    let space = store.dead_space();
    assert_eq!(space.dead_bytes, counted);
    let geo = store.log.geo();
    let half: Vec<u32> = (0..geo.count)
        .filter(|&i| store.log.seq_of_sector(i).is_some())
        .map(|i| store.log.dead_bytes(i))
        .filter(|&d| 2 * d >= geo.sector)
        .collect();
    assert!(!half.is_empty());
    assert_eq!(space.half_dead_sectors as usize, half.len());
    assert_eq!(
        space.half_dead_bytes,
        half.iter().map(|&d| u64::from(d)).sum::<u64>()
    );
    assert!(dead > before.1 + 40 * 120, "{before:?} {dead}");
    assert!(dead - counted <= 32 * 40, "{counted} of {dead}");
    // Nothing died twice: a profile written over again counts only its
    // newest old version.
    let before = check_counts(&mut store);
    store
        .profile_write(ProfileDoc::Soul, &profile(3, 10))
        .unwrap();
    let after = check_counts(&mut store);
    assert_eq!(after.0 - before.0, after.1 - before.1);
    assert!(after.1 - before.1 >= 3000);
}

/// A compaction (ESP-Claw's: the tool calls of every turn but the newest
/// dropped) counts the batches of the session's chain that it leaves no
/// body in; the batches its old base named in place are not counted
/// (`store/dead.rs`), which understates and stays true.
#[test]
fn a_compaction_counts_the_batches_of_its_chain_it_leaves_no_body_in() {
    use crate::RecordType::{AssistantFinal, AssistantTool, ToolResult, User};
    use clawmem_sim::{Preset, SimFlash};
    let flash = Esp32Flash::new(SimFlash::new(Preset::Esp32.model(64 * 4096).unwrap())).unwrap();
    let config = Config {
        session_size_limit_bytes: 4000,
        ..Config::default()
    };
    let mut store = S::format(flash, config).unwrap();
    let (mut compactions, mut counting) = (0, 0);
    let mut counted = 0;
    for k in 0..40 {
        // A turn in three appends (a question, a tool call and its
        // result, an answer), each its own batch; short questions and
        // answers, long tool calls, so that a compaction leaves room for
        // a few turns before the next.
        let (short, long) = (profile(k, 40), profile(k, 600));
        let rec = |kind, text: &str| {
            let body: &'static [u8] = std::boxed::Box::leak(text.as_bytes().into());
            crate::Record { kind, ..user(body) }
        };
        match store.append("chat:z", &[rec(User, &short)], false) {
            // (Its questions and answers alone pass the limit.)
            Err(Error::Blocked) => break,
            r => r.unwrap(),
        };
        let tool = [rec(AssistantTool, &long), rec(ToolResult, &long)];
        store.append("chat:z", &tool, false).unwrap();
        let a = store
            .append("chat:z", &[rec(AssistantFinal, &short)], true)
            .unwrap();
        let (c, _) = check_counts(&mut store);
        if a.compacted {
            compactions += 1;
            counting += u32::from(c > counted);
        } else {
            assert_eq!(c, counted, "counted dead without a death");
        }
        counted = c;
    }
    std::println!("{counting} of {compactions} compactions counted dead bytes, {counted} B in all");
    assert!(compactions >= 10, "{compactions} compactions");
    assert!(
        counting >= 3,
        "{counting} of {compactions} compactions counted"
    );
}

/// A full checkpoint whose dead bytes part rots (a count raised by 8
/// 16ths of a sector) fails its CRC: the mount goes from another
/// checkpoint, or a scan, and the counts stay true. A sound full
/// checkpoint followed by two deltas, the first rotted, gives its counts
/// as the mount reads it on the way to the second, and the mount drops
/// them with the chain: the checkpoint it goes from instead gives them
/// again (kept, they count twice: `sector 44 (sequence 109): 4864 B
/// counted dead, 3116 B are`).
#[test]
fn counts_from_a_damaged_checkpoint_are_dropped() {
    let mut w = run_to_full_checkpoint(0.3);
    let store = &mut w.store;
    let start = store.full_checkpoint + crate::layout::CHUNK_HEADER_LEN;
    let mut fixed = [0u8; 16];
    store.log.io().read_stream(start, &mut fixed).unwrap();
    assert_eq!(fixed[0], 7, "a full checkpoint with the dead bytes");
    let unit = crate::log::dead_unit(store.log.geo().sector);
    // The sector whose count is largest below 8 units.
    let victim = sectors(store)
        .filter(|&i| store.log.seq_of_sector(i).is_some())
        .filter(|&i| store.log.dead_bytes(i) / unit < 8)
        .max_by_key(|&i| store.log.dead_bytes(i))
        .unwrap();
    assert!(store.log.dead_bytes(victim) > 0);
    let (objects, sessions) = (fixed[1] as u32, crate::layout::u16_at(&fixed, 2) as u32);
    // (Fixed part, cut waste, sessions, objects, memory, the dead part's
    // newest sequence, then half a byte a sector.)
    let at = 16 + 8 + 32 * sessions + 20 * objects + 24 + 4 + victim / 2;
    let byte = store.log.io().stream_advance(start, at);
    let mut again = mounted_flipped(store, byte, 4 * (victim % 2) as u8 + 3);
    check_counts(&mut again);
    assert_reads_back(&mut again, &w.model);

    // Two deltas after the full checkpoint, the first rotted: the mount
    // reads the full checkpoint on its way to the second. They go in a
    // sector opened after the full checkpoint, whose header names it: the
    // checkpoint the mount goes from instead (a header naming the rotted
    // delta would leave it none, and a scan counts nothing). The short
    // sessions go first, and a full checkpoint after: the tail they leave
    // dead is released without copies at the head that would push the
    // second delta into the next sector.
    while let Some(old) = w.live.first().cloned() {
        if w.retire_oldest().is_some() {
            w.store.delete_session(&old).unwrap();
        }
    }
    let store = &mut w.store;
    store.write_full_checkpoint(Priority::Maintenance).unwrap();
    let full_seq = store.seq_at(store.full_checkpoint).unwrap();
    let mut append = |store: &mut S, k: usize| {
        let body = std::vec![b'x'; 300 + k];
        store.append("chat:delta", &[user(&body)], false).unwrap();
        w.model
            .entry(std::string::String::from("chat:delta"))
            .or_default()
            .push(body);
    };
    while store.log.head_seq() == full_seq {
        append(store, 0);
    }
    let mut deltas = [0u32; 2];
    for d in &mut deltas {
        for k in 0..3 {
            append(store, k);
        }
        store.write_checkpoint().unwrap();
        *d = store.log.checkpoint();
        assert_ne!(*d, store.full_checkpoint, "a delta");
    }
    assert_eq!(
        store.log.head_seq(),
        full_seq + 1,
        "the deltas in one sector"
    );
    let byte = store
        .log
        .io()
        .stream_advance(deltas[0] + crate::layout::CHUNK_HEADER_LEN, 20);
    let mut again = mounted_flipped(store, byte, 7);
    check_counts(&mut again);
    assert!(sectors(&again).any(|i| again.log.dead_bytes(i) > 0));
    assert_reads_back(&mut again, &w.model);
}

/// What died since the full checkpoint is carried by the deltas after it
/// (`CKPT_DELTA_DEAD`, `docs/FORMAT.md`): a mount from the chain counts,
/// in every sector, the full checkpoint's count rounded down plus every
/// byte the running store counted since, and never more than the oracle.
/// Each delta carries only what died since the checkpoint before it, and
/// after a mount nothing is pending (carried twice, a count would pass
/// what the running store counted).
#[test]
fn deltas_carry_what_died_since_the_full_checkpoint() {
    let mut w = run_to_full_checkpoint(0.2);
    let unit = crate::log::dead_unit(w.store.log.geo().sector);
    let counts =
        |store: &S| -> Vec<u32> { sectors(store).map(|i| store.log.dead_bytes(i)).collect() };
    // The running store's counts when the chain's full checkpoint was
    // written, and what a mount takes back from it.
    let at_full = counts(&w.store);
    let mut taken: Vec<u32> = at_full.iter().map(|&d| d / unit * unit).collect();
    let mut since_full = at_full.clone();
    for round in 0..3 {
        // A session deleted, then a delta.
        let old = w.retire_oldest().unwrap();
        w.store.delete_session(&old).unwrap();
        let store = &mut w.store;
        // (Within the sectors a delta carries: past them, a mount counts
        // less, which `check_counts` allows.)
        assert!(store.log.dead_pending().len() < crate::log::DEAD_PENDING);
        store.write_checkpoint().unwrap();
        let delta = store.log.checkpoint();
        assert_ne!(delta, store.full_checkpoint, "a delta");
        let mut version = [0u8; 1];
        let start = delta + crate::layout::CHUNK_HEADER_LEN;
        store.log.io().read_stream(start, &mut version).unwrap();
        assert_eq!(version[0], 8, "a delta with its dead bytes");
        let mut again = mounted_copy(store);
        check_counts(&mut again);
        let mut carried = 0;
        for i in sectors(store) {
            // (A sector the mount lets go, nothing in it live, has no
            // count: the mount's tail may be past the running store's.)
            if again.log.seq_of_sector(i).is_none() {
                continue;
            }
            let k = i as usize;
            let now = store.log.dead_bytes(i);
            assert_eq!(
                again.log.dead_bytes(i),
                taken[k] + (now - since_full[k]),
                "round {round}, sector {i}: {} B dead at the full checkpoint, {now} B now",
                since_full[k]
            );
            carried += now - since_full[k];
        }
        assert!(carried > 1000, "round {round}: {carried} B carried");
        assert_reads_back(&mut again, &w.model);
        if round == 1 {
            // Go on from the mounted store: its chain is the same, and
            // its counts are what it took back.
            w.store = again;
            taken = counts(&w.store);
            since_full = taken.clone();
        }
    }
}

/// A power cut anywhere in a delta that carries dead bytes leaves counts
/// that stay true: mounted afresh, no sector's count exceeds the oracle's
/// and every session reads back. Each cut is made on a store mounted from
/// the same flash, right after a full checkpoint, which deletes the same
/// session (its dead bytes pending) and writes the delta with power cut
/// after its 4k-th byte, until one finishes uncut; that one's mount takes
/// back what the deletion counted.
#[test]
fn a_delta_cut_anywhere_leaves_counts_that_stay_true() {
    use clawmem_sim::fault::{CutPoint, PowerCut, Tear};
    let mut w = run_to_full_checkpoint(0.2);
    let victim = w.retire_oldest().unwrap();
    for (cuts, k) in (0..10_000u64).enumerate() {
        let mut copy = mounted_copy(&mut w.store);
        let before = copy.dead_space().dead_bytes;
        copy.delete_session(&victim).unwrap();
        let pending = copy.dead_space().dead_bytes - before;
        assert!(pending > 1000, "{pending} B died");
        // (Cut after every 4th byte the delta programs.)
        copy.flash_mut().flash_mut().arm_power_cut(PowerCut {
            seed: k,
            at: CutPoint::Byte(4 * k),
            tear: Tear::Prefix(0),
        });
        let wrote = copy.write_checkpoint();
        let sim = copy.flash_mut().flash_mut();
        if sim.is_powered() {
            // Uncut: a delta with its dead bytes, which a mount takes.
            sim.clear_faults();
            wrote.unwrap();
            let start = copy.log.checkpoint() + crate::layout::CHUNK_HEADER_LEN;
            let mut version = [0u8; 1];
            copy.log.io().read_stream(start, &mut version).unwrap();
            assert_eq!(version[0], 8, "a delta with its dead bytes");
            let mut again = mounted_copy(&mut copy);
            check_counts(&mut again);
            // (Every sector the mount keeps in use: the full checkpoint's
            // counts, as the copy took them, and the deletion's.)
            for i in sectors(&again).filter(|&i| again.log.seq_of_sector(i).is_some()) {
                assert_eq!(
                    again.log.dead_bytes(i),
                    copy.log.dead_bytes(i),
                    "sector {i}"
                );
            }
            assert_reads_back(&mut again, &w.model);
            std::println!("{cuts} cuts inside the delta");
            assert!(cuts >= 20, "{cuts} cuts");
            return;
        }
        let _ = wrote;
        sim.restore_power();
        let mut again = mounted_copy(&mut copy);
        check_counts(&mut again);
        assert_reads_back(&mut again, &w.model);
    }
    panic!("the delta never finished");
}

/// The session bodies that start in each sector and the objects there, by
/// sector: what a release of that sector must copy out of it.
fn live_by_sector(store: &mut S) -> BTreeMap<u32, u64> {
    let geo = store.log.geo();
    let mut out = BTreeMap::new();
    for o in store.objects.iter() {
        *out.entry(geo.sector_of(o.addr)).or_insert(0) += u64::from(o.len);
    }
    let (mut i, mut cold) = (0, ColdCursor::new(&store.dir));
    while store.next_session_word(&mut i, &mut cold).unwrap() != 0 {
        let s = cold.cur;
        let mut recs = Records::EMPTY;
        recs.start(&mut store.log.io(), &s, None).unwrap();
        while let Some(r) = recs.next(&mut store.log.io()).unwrap() {
            *out.entry(geo.sector_of(r.addr)).or_insert(0) += u64::from(r.len);
        }
    }
    out
}

/// `Store::cleaning` against what lived in the sectors a write released:
/// before each append and profile write, the bodies and objects in every
/// sector are read from the live structures; if the write released `k`
/// tail sectors, the bytes counted live in them are at most what lived in
/// those `k` oldest sectors, and with what the relocations copied from
/// later sectors at least that (a body copied with its session while an
/// earlier sector was released is counted there); with one release, they
/// are exactly it.
#[test]
fn cleaning_counts_what_lived_in_the_sectors_it_released() {
    let mut w = Workload::new(Some(10));
    let docs = [ProfileDoc::Soul, ProfileDoc::User, ProfileDoc::Identity];
    let payload = u64::from(w.store.log.geo().sector_payload_space());
    let (mut releases, mut single, mut exact, mut live_total) = (0u64, 0u64, 0u64, 0u64);
    let mut refused = 0;
    while !w.done() {
        let (id, body) = w.next();
        let n = w.n;
        for op in 0..2 {
            if op == 1 && !n.is_multiple_of(11) {
                break;
            }
            let before = w.store.cleaning();
            let live = live_by_sector(&mut w.store);
            let oldest: Vec<u32> = (w.store.log.tail_seq()..=w.store.log.head_seq())
                .filter_map(|q| w.store.log.sector_of_seq(q))
                .collect();
            if op == 0 {
                match w.store.append(&id, &[user(&body)], false) {
                    Ok(_) => {
                        refused = 0;
                        w.took(&id, body.clone());
                    }
                    Err(Error::Full { .. }) => {
                        // (Nothing written: nothing released.)
                        assert_eq!(w.store.cleaning(), before);
                        refused += 1;
                        w.make_room(refused);
                        break;
                    }
                    Err(e) => panic!("append {n}: {e:?}"),
                }
            } else {
                let doc = docs[n % docs.len()];
                w.store
                    .profile_write(doc, &profile(n, 300 + n % 1500))
                    .unwrap();
            }
            let after = w.store.cleaning();
            let k = after.tail_releases - before.tail_releases;
            assert_eq!(
                after.tail_payload_bytes - before.tail_payload_bytes,
                k * payload
            );
            if k == 0 {
                assert_eq!(after, before, "counted with nothing released");
                continue;
            }
            let truth: u64 = oldest[..k as usize]
                .iter()
                .map(|s| live.get(s).copied().unwrap_or(0))
                .sum();
            let counted = after.tail_live_bytes - before.tail_live_bytes;
            let ahead = after.ahead_bytes - before.ahead_bytes;
            assert!(
                counted <= truth && truth <= counted + ahead,
                "write {n}: {k} released holding {truth} B live; counted {counted} B, and {ahead} B ahead"
            );
            if k == 1 {
                single += 1;
                exact += u64::from(counted == truth);
            }
            releases += k;
            live_total += truth;
        }
    }
    std::println!(
        "{releases} tail sectors released holding {live_total} B live; {exact} of {single} single releases counted exactly"
    );
    assert!(releases >= 100 && live_total > 0, "{releases} releases");
    assert_eq!(exact, single);
    assert_reads_back(&mut w.store, &w.model);
}
