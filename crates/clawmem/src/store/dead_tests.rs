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
use super::objects::OBJECT;
use super::test_workload::{assert_reads_back, user, Workload, S};
use crate::cursor::Records;
use crate::profile::ProfileDoc;
use crate::session::{SESSION_BASE, SESSION_BATCH};
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

/// The oracle's dead bytes by sector: the objects', sessions' batches and
/// bases that nothing live reaches (every other kind counts as live).
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
        if ![OBJECT, SESSION_BATCH, SESSION_BASE].contains(&b.kind) || live.contains(at) {
            continue;
        }
        for &(c, size) in &b.chunks {
            *dead.entry(geo.sector_of(c)).or_insert(0) += size;
        }
    }
    dead
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
    while !w.done() {
        let (id, body) = w.next();
        let n = w.n;
        match w.store.append(&id, &[user(&body)], false) {
            Ok(_) => {
                refused = 0;
                w.took(&id, body);
            }
            Err(Error::Full { .. }) => {
                refused += 1;
                assert!(refused < 50, "fifty appends refused in a row");
                if let Some(old) = w.retire_oldest() {
                    w.store.delete_session(&old).unwrap();
                }
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
        }
        // Halfway, the store goes on from a fresh mount: the counts start
        // again from nothing and stay true.
        if !remounted && w.done_fraction() >= 0.5 {
            remounted = true;
            let sim = w.store.flash_mut().flash_mut().snapshot();
            w.store = S::mount(
                Esp32Flash::new(sim).unwrap(),
                Config::default(),
                MountMode::ExistingOnly,
            )
            .unwrap();
            let (c, _) = check_counts(&mut w.store);
            assert_eq!(c, 0, "a mount starts every count at 0");
        }
    }
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
