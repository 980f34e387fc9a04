//! The store over a ring with holes (feature `sector-table`, format 10
//! stage 1): sectors released out of ring order, in RAM only, as stage 2's
//! release will on flash. Every layer's walk must then go by the table:
//! history reads across a reopened hole, the relocation that decides which
//! bodies a new base carries by their sector's sequence, the chain rescan,
//! the dry run of a collection and `Store::check`'s walk. Nothing here
//! remounts: a mount of format 9 does not know the holes yet.

extern crate std;

use std::collections::BTreeMap;
use std::format;
use std::string::String;
use std::vec::Vec;

use clawmem_sim::{Esp32Flash, Preset, SimFlash};

use super::gc::Priority;
use super::test_workload::{assert_reads_back, user, Workload, S};
use crate::{BackendFormat, Config, Error, MountMode};

/// Releases sector `index`, in use and neither the head nor the tail, out
/// of ring order: what has a byte in it moves as a memory scrub moves it,
/// a full checkpoint follows, and the log releases it (RAM only). `false`
/// if there was no room to move it.
fn release_middle(store: &mut S, index: u32) -> bool {
    try_release(store, index).unwrap()
}

/// [`release_middle`], its flash failing as it may under a power cut.
fn try_release(store: &mut S, index: u32) -> Result<bool, crate::error::Fail> {
    let seq = store.log.seq_of_sector(index).unwrap();
    assert!(index != store.log.head() && seq != store.log.tail_seq());
    let sector = store.log.geo().sector;
    match store.ensure_room(sector * 2, Priority::Maintenance) {
        Err(f) if f.kind() == crate::error::Kind::Full => return Ok(false),
        r => r?,
    }
    // Making room may have released it (it was the tail then).
    if store.log.seq_of_sector(index) != Some(seq) || index == store.log.head() {
        return Ok(false);
    }
    store.in_gc = true;
    let moved = store.relocate(seq, Some(index));
    store.in_gc = false;
    if !moved? {
        return Ok(false);
    }
    if index == store.log.head() || store.log.seq_of_sector(index) != Some(seq) {
        return Ok(false);
    }
    // Held until the full checkpoint that records it commits.
    store.log.release_sector(index)?;
    assert!(store.log.holds_release());
    store.write_full_checkpoint(Priority::Gc)?;
    assert!(!store.log.holds_release());
    Ok(true)
}

/// A store mounted afresh from a copy of `store`'s flash.
fn remounted(store: &mut S) -> S {
    let flash = Esp32Flash::new(store.flash_mut().flash_mut().snapshot()).unwrap();
    S::mount(flash, Config::default(), MountMode::ExistingOnly).unwrap()
}

/// Mounted afresh, the store finds the same sectors in use with the same
/// sequences (the holes a full checkpoint recorded, the sectors opened
/// since from their headers, the tail moved on past what was collected
/// since), and every session reads back.
fn remount_and_verify(store: &mut S, model: &BTreeMap<String, Vec<Vec<u8>>>) -> S {
    let mut again = remounted(store);
    let count = store.log.geo().count;
    // The mount read each header's first bytes once, and whole only the
    // headers of sectors opened since the full checkpoint it merged (it
    // read every header twice when the ring had holes).
    let report = again.mount_report();
    assert!(report.from_checkpoint);
    assert!(
        report.sector_headers < count + count / 8,
        "{} headers read",
        report.sector_headers
    );
    // (The mount may move the tail on past sectors that hold nothing live
    // any more, which the running store has not collected yet.)
    let tail = again.log.tail_seq();
    assert!(tail >= store.log.tail_seq());
    for i in 0..count {
        match (store.log.seq_of_sector(i), again.log.seq_of_sector(i)) {
            (Some(a), Some(b)) => assert_eq!(a, b, "sector {i} after a remount"),
            (Some(a), None) => assert!(a < tail, "sector {i} ({a}) lost at a remount"),
            (None, Some(b)) => panic!("sector {i}, free, in use ({b}) after a remount"),
            (None, None) => {}
        }
    }
    assert_eq!(again.log.head_seq(), store.log.head_seq());
    verify(&mut again, model);
    again
}

/// Releases sector `index` as [`release_middle`] does with power cut at
/// each program or erase of it in turn, each on a copy of the flash,
/// until one finishes uncut. Mounted afresh, every cut store reads every
/// session back and checks out, and holds the sector either in use with
/// its old sequence or free. Returns the cuts made (none if a mount
/// already lets the sector go, having moved the tail past it).
fn release_cut_everywhere(
    store: &mut S,
    index: u32,
    model: &BTreeMap<String, Vec<Vec<u8>>>,
) -> u32 {
    use clawmem_sim::fault::{CutPoint, PowerCut, Tear};
    let seq = store.log.seq_of_sector(index).unwrap();
    for k in 0..10_000u64 {
        let mut copy = remounted(store);
        // A mount moves the tail on past sectors that hold nothing live
        // (`remount_and_verify`): one that took this sector leaves no
        // release to cut.
        if copy.log.seq_of_sector(index) != Some(seq) {
            assert!(
                seq < copy.log.tail_seq(),
                "sector {index} lost at a remount"
            );
            return k as u32;
        }
        copy.flash_mut().flash_mut().arm_power_cut(PowerCut {
            seed: k,
            at: CutPoint::Op(k),
            tear: if k % 2 == 0 {
                Tear::Bits
            } else {
                Tear::Prefix(0)
            },
        });
        let released = try_release(&mut copy, index);
        let sim = copy.flash_mut().flash_mut();
        if sim.is_powered() {
            // Uncut: the release ran to its end (or was refused).
            sim.clear_faults();
            released.unwrap();
            return k as u32;
        }
        let _ = released;
        sim.restore_power();
        let mut after = remounted(&mut copy);
        verify(&mut after, model);
        let now = after.log.seq_of_sector(index);
        assert!(
            now == Some(seq) || now.is_none(),
            "cut at op {k}: sector {index} carries {now:?}, was {seq}"
        );
    }
    panic!("the release never finished");
}

/// A store mounted afresh from a copy of `store`'s flash in which the
/// newest full checkpoint (of format 10) has the top bit of its table
/// entry for sector `victim` flipped at rest: a sequence past the head's,
/// free as read, and the checkpoint's CRC fails at its end.
fn mounted_with_table_entry_rotted(store: &mut S, victim: u32) -> S {
    mounted_with_checkpoint_rotted(store, Some(victim))
}

/// [`mounted_with_table_entry_rotted`], or with `None`, the top bit of the
/// checkpoint's version byte flipped instead (a version no engine wrote:
/// no checkpoint, found before its table is read).
fn mounted_with_checkpoint_rotted(store: &mut S, victim: Option<u32>) -> S {
    let start = store.full_checkpoint + crate::layout::CHUNK_HEADER_LEN;
    let mut fixed = [0u8; 16];
    store.log.io().read_stream(start, &mut fixed).unwrap();
    assert_eq!(fixed[0], 9, "a full checkpoint of format 10 with the table");
    let (objects, sessions) = (fixed[1] as u32, crate::layout::u16_at(&fixed, 2) as u32);
    // (Fixed part, cut waste, sessions, objects, memory, the table's fixed
    // part, then a u16 a sector: its high byte.)
    let at = match victim {
        Some(v) => 16 + 8 + 32 * sessions + 20 * objects + 24 + 8 + 2 * v + 1,
        None => 0,
    };
    let entry = store.log.io().stream_advance(start, at);
    let mut sim = store.flash_mut().flash_mut().snapshot();
    sim.flip_bit(entry as usize, 7).unwrap();
    S::mount(
        Esp32Flash::new(sim).unwrap(),
        Config::default(),
        MountMode::ExistingOnly,
    )
    .unwrap()
}

/// The newest full checkpoint, of format 10 with the sector table, has
/// its version byte rot while the headers are out of ring order (the table
/// is laid out from their first bytes, unchecked): the checkpoint is refused
/// before its table is read (a flipped bit elsewhere is found by the CRC at
/// its end, after the table was merged: `mounted_with_table_entry_rotted`),
/// so no full checkpoint of format 10 decides the table, and the mount
/// reads every header whole, tries the checkpoints again and scans, with
/// the same sectors in use. `false`, with nothing checked, if opening a
/// sector after the checkpoint (so that every checkpoint the mount may try
/// builds on it) put the headers back in order.
fn rotted_version_rereads_the_headers(
    store: &mut S,
    model: &mut BTreeMap<String, Vec<Vec<u8>>>,
) -> bool {
    let count = store.log.geo().count;
    store.write_full_checkpoint(Priority::Maintenance).unwrap();
    let (full, head) = (store.full_checkpoint, store.log.head_seq());
    append_until_head(store, model, "chat:pin", b'p', head + 1);
    if store.full_checkpoint != full || headers_in_ring_order(store) {
        return false;
    }
    let mut damaged = mounted_with_checkpoint_rotted(store, None);
    let report = damaged.mount_report();
    assert!(!report.from_checkpoint);
    assert!(
        report.sector_headers >= 2 * count,
        "{}",
        report.sector_headers
    );
    for i in 0..count {
        if let Some(seq) = store.log.seq_of_sector(i) {
            assert_eq!(damaged.log.seq_of_sector(i), Some(seq), "sector {i}");
        }
    }
    verify(&mut damaged, model);
    true
}

/// Whether the sector headers on `store`'s flash (free sectors' old ones
/// too) carry format 9's ring order: one sequence less index, modulo the
/// sectors, and all within a turn of the ring (`log/open.rs`, the first
/// pass).
fn headers_in_ring_order(store: &mut S) -> bool {
    let count = store.log.geo().count;
    let (mut residue, mut span) = (None, (u32::MAX, 0u32));
    for i in 0..count {
        if let crate::layout::SectorHeader::Valid { seq, .. } =
            store.log.io().sector_header(i).unwrap()
        {
            let r = (seq % count + count - i) % count;
            if residue.is_some_and(|x| x != r) {
                return false;
            }
            residue = Some(r);
            span = (span.0.min(seq), span.1.max(seq));
        }
    }
    span.1.saturating_sub(span.0) < count
}

/// Appends records of 1,000 bytes of `fill` to session `id` until the
/// head's sequence reaches `head_seq`, deleting another session of `model`
/// whenever the store answers `Full`; what the store takes goes in `model`.
fn append_until_head(
    store: &mut S,
    model: &mut BTreeMap<String, Vec<Vec<u8>>>,
    id: &str,
    fill: u8,
    head_seq: u32,
) {
    let body = std::vec![fill; 1000];
    while store.log.head_seq() < head_seq {
        match store.append(id, &[user(&body)], false) {
            Ok(_) => model
                .entry(String::from(id))
                .or_default()
                .push(body.clone()),
            Err(Error::Full { .. }) => {
                let old = model.keys().find(|k| k.as_str() != id).unwrap().clone();
                store.delete_session(&old).unwrap();
                model.remove(&old);
            }
            Err(e) => panic!("{e:?}"),
        }
    }
}

/// Every session of `model` reads back exactly, and the store checks out.
fn verify(store: &mut S, model: &BTreeMap<String, Vec<Vec<u8>>>) {
    store.check().unwrap();
    assert_reads_back(store, model);
}

#[test]
fn sessions_read_back_while_holes_open_and_are_reopened_round_the_ring() {
    let mut w = Workload::new(None);
    let count = w.store.log.geo().count;
    // (sector, the sequence it had when released)
    let mut holes: Vec<(u32, u32)> = Vec::new();
    // Holes the head took back, newest last.
    let mut back: Vec<u32> = Vec::new();
    let (mut released, mut reopened, mut refused) = (0u32, 0u32, 0u32);
    let mut cuts = 0u32;
    let mut dead_counted = 0u64;
    while !w.done() {
        let r = w.append_next();
        let n = w.n;
        match r {
            // (A session past 40 KB is deleted: the ring turns over.)
            Ok(()) => {}
            Err(Error::Full { .. }) => {
                // Delete the oldest session, as a user following the
                // warning would.
                if let Some(old) = w.retire_oldest() {
                    w.store.delete_session(&old).unwrap();
                }
                continue;
            }
            Err(e) => panic!("append {n}: {e:?}"),
        }
        let (store, model) = (&mut w.store, &w.model);
        // Holes the head has since reopened.
        holes.retain(|&(index, seq)| match store.log.seq_of_sector(index) {
            Some(now) if now > seq => {
                reopened += 1;
                back.push(index);
                false
            }
            _ => true,
        });
        if n.is_multiple_of(40) {
            // A sector halfway between the tail and the head, if one in use
            // carries that sequence; every other time, the hole the head
            // reopened last, if it is still in use (a stream from a sector
            // before it in physical order went on into it out of order).
            let ring = store.log.ring();
            let mid = ring.tail_seq + (ring.head_seq - ring.tail_seq) / 2;
            let pick = match back.pop().filter(|_| n.is_multiple_of(80)) {
                Some(index) => store.log.seq_of_sector(index).map(|seq| (index, seq)),
                None => store.log.sector_of_seq(mid).map(|index| (index, mid)),
            };
            match pick {
                Some((index, seq))
                    if index != ring.head && seq != ring.tail_seq && seq + 1 < ring.head_seq =>
                {
                    if released % 8 == 3 {
                        cuts += release_cut_everywhere(store, index, model);
                    }
                    if release_middle(store, index) {
                        assert_eq!(store.log.seq_of_sector(index), None);
                        holes.push((index, seq));
                        released += 1;
                        // Every other time, the store goes on mounted
                        // afresh: the rest runs on the table a mount built.
                        let again = remount_and_verify(store, model);
                        if released % 2 == 0 {
                            *store = again;
                        }
                    } else {
                        refused += 1;
                    }
                }
                _ => {}
            }
            verify(store, model);
            // The dead bytes counted stay true across releases and the
            // reopened holes (`store/dead_tests.rs`).
            dead_counted += super::dead_tests::check_counts(store).0;
        }
    }
    assert!(dead_counted > 0);
    let Workload {
        mut store,
        mut model,
        ..
    } = w;
    verify(&mut store, &model);
    rotted_header_of_a_sector_opened_since_the_full_checkpoint(&mut store, &model);
    // The entry of the newest full checkpoint's sector table for a sector
    // in use before the checkpoint's own flips its top bit at rest (a
    // sequence past the head's: free as read). A mount merges the entries
    // as it reads them and finds the checkpoint damaged at its end; it
    // reads the table from the headers again and falls back to a scan,
    // after which every sector the running store has in use is in use
    // with its sequence, and every session reads back. Every checkpoint
    // the mount may try builds on that full one: it is written now, and
    // the head opens a sector after it, whose header names it or a delta
    // on it. (Without the second read of the table the merged entry
    // stands, and the sector is free to the scan; when the head's header
    // named a checkpoint on an older full one, that one's table put the
    // entry back.)
    store.write_full_checkpoint(Priority::Maintenance).unwrap();
    let (full, head) = (store.full_checkpoint, store.log.head_seq());
    append_until_head(&mut store, &mut model, "chat:pin", b'p', head + 1);
    assert_eq!(store.full_checkpoint, full, "a full checkpoint since");
    let ck = store.seq_at(store.full_checkpoint).unwrap();
    // (The first such sector: its entry is merged before the read that
    // reaches the checkpoint's end finds the damage.)
    let victim = (0..count)
        .find(|&i| store.log.seq_of_sector(i).is_some_and(|q| q < ck))
        .unwrap();
    assert!(victim + 16 < count);
    let mut damaged = mounted_with_table_entry_rotted(&mut store, victim);
    assert!(!damaged.mount_report().from_checkpoint);
    // (Without a checkpoint, every sector whose header is sound is in use:
    // those the running store let go too.)
    for i in 0..count {
        if let Some(seq) = store.log.seq_of_sector(i) {
            assert_eq!(damaged.log.seq_of_sector(i), Some(seq), "sector {i}");
        }
    }
    verify(&mut damaged, &model);
    // A full checkpoint that rots while the headers are out of ring
    // order: holes released in the middle of the ring, one after another,
    // until the head passes over sectors in use to reopen one.
    let mut rot_checked = false;
    for _ in 0..64 {
        if !headers_in_ring_order(&mut store)
            && rotted_version_rereads_the_headers(&mut store, &mut model)
        {
            rot_checked = true;
            break;
        }
        let ring = store.log.ring();
        let mid = ring.tail_seq + (ring.head_seq - ring.tail_seq) / 2;
        if let Some(index) = store.log.sector_of_seq(mid) {
            if index != ring.head && mid != ring.tail_seq && mid + 1 < ring.head_seq {
                release_middle(&mut store, index);
            }
        }
        let head = store.log.head_seq();
        append_until_head(&mut store, &mut model, "chat:holes", b'h', head + 1);
    }
    assert!(rot_checked, "the headers never went out of ring order");
    // The session with the longest chain has its newest batch's "previous"
    // pointer damaged: the read finds the chain again by scanning the ring
    // by sequence, past the holes, and loses only that batch's record.
    // (Format 9's walk of the physical sectors behind the head would find
    // the same here: it covers every sector in use once the sequences span
    // the ring, so this holds the rescan to working over holes, not to
    // its order.)
    // (A session of its own with a chain of batches: collection may have
    // relocated the others into bases, which starts a chain anew.)
    for _ in 0..5 {
        let body = std::vec![b'c'; 200];
        store.append("chat:chain", &[user(&body)], false).unwrap();
        model
            .entry(String::from("chat:chain"))
            .or_default()
            .push(body);
    }
    let (id, s) = model
        .keys()
        .filter_map(|id| {
            let hash = crate::naming::fnv1a32(id.as_bytes());
            let s = *store.sessions.iter().find(|s| s.id_hash == hash)?;
            Some((id.clone(), s))
        })
        .max_by_key(|(_, s)| s.chain)
        .unwrap();
    assert!(s.chain >= 4, "{id}: {} batches after its root", s.chain);
    let prev = s.head as usize + crate::layout::CHUNK_HEADER_LEN as usize + 4;
    store.flash_mut().flash_mut().flip_bit(prev + 1, 3).unwrap();
    let mut buf = std::vec![0u8; 64 * 1024];
    let h = store
        .history(&id, BackendFormat::Unknown, &mut buf)
        .unwrap();
    let bodies = &model[&id];
    let got: Vec<&[u8]> = h.iter().map(|r| r.body).collect();
    assert_eq!(h.damaged_records(), 1, "{id}");
    assert_eq!(got.len(), bodies.len() - 1, "{id}");
    assert!(got.iter().zip(bodies).all(|(g, b)| g == b), "{id}");
    // The ring turned over several times, holes were made and the head
    // took them back in its turn.
    assert!(released >= 20, "{released} released, {refused} refused");
    assert!(reopened >= 10, "{reopened} of {released} holes reopened");
    assert!(cuts >= 20, "{cuts} power cuts inside releases");
}

/// On a copy of `store` (a ring with holes the head reopened): the header
/// of a sector the head opened after the newest full checkpoint rots at
/// rest. The checkpoint records that sector free, or in use with the
/// sequence it had before, and its header no longer says otherwise; a
/// mount places it by its first chunk, newer than the checkpoint, at the
/// sequence no sound header carries, and every session reads back
/// (without that, the mount took the sector for free, and the batches in
/// it were lost).
fn rotted_header_of_a_sector_opened_since_the_full_checkpoint(
    store: &mut S,
    model: &BTreeMap<String, Vec<Vec<u8>>>,
) {
    let mut copy = remounted(store);
    let mut model = model.clone();
    copy.write_full_checkpoint(Priority::Gc).unwrap();
    let full = copy.full_checkpoint;
    let opened = copy.log.head_seq();
    append_until_head(&mut copy, &mut model, "chat:rot", b'r', opened + 3);
    assert_eq!(copy.full_checkpoint, full, "a full checkpoint since");
    let victim = copy.log.sector_of_seq(opened + 1).unwrap();
    assert!(copy.log.table_reordered());
    // (Its erase count: the first 12 bytes still read as they were.)
    let at = copy.log.geo().sector_start(victim) as usize + 12;
    let mut sim = copy.flash_mut().flash_mut().snapshot();
    sim.flip_bit(at, 0).unwrap();
    let mut again = S::mount(
        Esp32Flash::new(sim).unwrap(),
        Config::default(),
        MountMode::ExistingOnly,
    )
    .unwrap();
    assert!(again.mount_report().from_checkpoint);
    assert_eq!(again.log.seq_of_sector(victim), Some(opened + 1));
    // (`check` refuses a damaged header; the sector is kept, and collected
    // in its turn, as in format 9.)
    assert_reads_back(&mut again, &model);
    // The sequence in its first 12 bytes rots too: the same.
    let mut sim = again.flash_mut().flash_mut().snapshot();
    sim.flip_bit(at - 4, 2).unwrap();
    let mut again = S::mount(
        Esp32Flash::new(sim).unwrap(),
        Config::default(),
        MountMode::ExistingOnly,
    )
    .unwrap();
    assert_eq!(again.log.seq_of_sector(victim), Some(opened + 1));
    assert_eq!(again.mount_report().damaged_headers, 1);
    assert_reads_back(&mut again, &model);
    // The store goes on: the head opens none of its sectors in use, and
    // what is appended reads back.
    let head = again.log.head_seq();
    append_until_head(&mut again, &mut model, "chat:rot", b's', head + 4);
    assert_eq!(again.log.seq_of_sector(victim), Some(opened + 1));
    assert_reads_back(&mut again, &model);
}

/// The first release out of order writes the first full checkpoint that
/// records the table (those before it record only the dead bytes:
/// asserted, a full checkpoint's version byte);
/// its entry for a sector in use, older than the release, rots to a
/// sequence past the head's (free, as read). A mount merges the entries as
/// it reads them and finds the checkpoint damaged at its end; it loads the
/// checkpoint the head's header names, one without the table, and the sector is in
/// use with its sequence, the store checks out and every session reads
/// back. (This does not pin the second read of the table from the
/// headers, which the holes test does: the headers here are still format
/// 9's arithmetic, and the tail the older checkpoint gives lays the table
/// out by it again.)
#[test]
fn a_damaged_first_table_falls_back_to_a_checkpoint_without_it() {
    let flash = Esp32Flash::new(SimFlash::new(Preset::Esp32.model(64 * 4096).unwrap())).unwrap();
    let mut store = S::format(flash, Config::default()).unwrap();
    let mut model: BTreeMap<String, Vec<Vec<u8>>> = BTreeMap::new();
    let mut n = 0usize;
    while store.log.head_seq() < 24 {
        n += 1;
        let id = format!("chat:s{}", n % 5);
        let body: Vec<u8> = (0..200 + (n * 37) % 1400)
            .map(|i| b'a' + ((i * 7 + n) % 26) as u8)
            .collect();
        store.append(&id, &[user(&body)], false).unwrap();
        model.entry(id).or_default().push(body);
    }
    let ring = store.log.ring();
    let mid = ring.tail_seq + (ring.head_seq - ring.tail_seq) / 2;
    let index = store.log.sector_of_seq(mid).unwrap();
    // (The version byte of the newest full checkpoint.)
    let version = |store: &mut S| {
        let mut v = [0u8; 1];
        let start = store.full_checkpoint + crate::layout::CHUNK_HEADER_LEN;
        store.log.io().read_stream(start, &mut v).unwrap();
        v[0]
    };
    // Before any release, a full checkpoint records the dead bytes but no
    // table (7).
    store.write_full_checkpoint(Priority::Maintenance).unwrap();
    assert_eq!(
        version(&mut store),
        7,
        "a full checkpoint without the table"
    );
    assert!(release_middle(&mut store, index));
    verify(&mut store, &model);
    assert_eq!(version(&mut store), 9, "a full checkpoint with the table");
    let victim = (0..store.log.geo().count)
        .find(|&i| i != index && store.log.seq_of_sector(i).is_some_and(|q| q < mid))
        .unwrap();
    let seq = store.log.seq_of_sector(victim).unwrap();
    let mut again = mounted_with_table_entry_rotted(&mut store, victim);
    assert!(again.mount_report().from_checkpoint);
    assert_eq!(
        again.log.seq_of_sector(victim),
        Some(seq),
        "sector {victim}"
    );
    verify(&mut again, &model);
}
