//! A mount that finds no sound checkpoint scans the whole ring: every
//! session must come back, those whose root is a base (relocated by the
//! ring's collection, their first batch long collected) included.

extern crate std;

use clawmem_sim::Esp32Flash;

use super::test_workload::{assert_reads_back, user, Workload, S};
use crate::{BackendFormat, Config, Error, MountMode};

#[test]
fn a_mount_without_a_sound_checkpoint_finds_the_sessions_whose_root_is_a_base() {
    // (The kept session appended to every 11th time: at every 10th, the
    // larger full checkpoints of format 10 put this workload into *A
    // session near the limit at the tail* (`docs/DESIGN.md`).)
    let mut w = Workload::new(Some(11));
    let mut refused = 0;
    while !w.done() {
        match w.append_next() {
            Ok(()) => refused = 0,
            Err(Error::Full { .. }) => {
                refused += 1;
                assert!(refused < 50, "fifty appends refused in a row at {}", w.n);
                if let Some(old) = w.retire_oldest() {
                    w.store.delete_session(&old).unwrap();
                }
            }
            Err(e) => panic!("append {}: {e:?}", w.n),
        }
    }
    let store = &mut w.store;
    assert!(
        store.sessions.iter().any(|s| s.root_is_base),
        "no session was relocated"
    );
    // One bit of every checkpoint on flash, full or delta: none loads,
    // and the mount scans the ring.
    let geo = store.log.geo();
    let mut rotted = std::vec::Vec::new();
    for sector in 0..geo.count {
        let end = geo.sector_start(sector) + geo.sector;
        let mut at = geo.first_chunk(sector);
        while end - at >= crate::layout::CHUNK_HEADER_LEN {
            let Some(h) = store.log.io().chunk_header(at).unwrap() else {
                break;
            };
            let size = geo.chunk_size(h.len);
            if size > end - at {
                break;
            }
            if h.kind == crate::layout::kind::CHECKPOINT && h.is_first() {
                rotted.push(at + crate::layout::CHUNK_HEADER_LEN + 8);
            }
            at += size;
        }
    }
    assert!(rotted.contains(&(store.full_checkpoint + crate::layout::CHUNK_HEADER_LEN + 8)));
    let mut sim = store.flash_mut().flash_mut().snapshot();
    for at in rotted {
        sim.flip_bit(at as usize, 1).unwrap();
    }
    let flash = Esp32Flash::new(sim).unwrap();
    let mut again = S::mount(flash, Config::default(), MountMode::ExistingOnly).unwrap();
    assert!(!again.mount_report().from_checkpoint);
    assert_reads_back(&mut again, &w.model);
    again.check().unwrap();
}

/// A store whose collection cannot make room (a session near the limit
/// at the tail of a small partition: `docs/DESIGN.md`, "Known gap")
/// refuses appends having written and erased nothing, in both builds,
/// still takes deletions, every session reads back, and once the session
/// that holds the tail back is deleted, the store takes appends again.
/// The kept session is appended to every 5th to 10th time: it nears the
/// session limit and the collection meets it at the tail (at every 5th to
/// 9th time the store gets stuck).
#[test]
fn a_store_whose_collection_is_stuck_refuses_appends_at_no_cost() {
    let mut stuck = 0;
    for nth in 5..=10 {
        stuck += usize::from(stuck_variant(nth));
    }
    assert!(stuck >= 3, "{stuck} variants got stuck");
}

/// [`a_store_whose_collection_is_stuck_refuses_appends_at_no_cost`] with
/// the kept session appended to every `nth` time: whether fifty appends in
/// a row were refused.
fn stuck_variant(nth: usize) -> bool {
    let mut w = Workload::new(Some(nth));
    let (mut stuck_deletions, mut refused, mut stuck) = (0, 0, false);
    // What the refused appends wrote and erased: nothing, as the dry run
    // lets only a collection that completes start.
    let (mut refusals, mut written, mut erased) = (0, 0, 0);
    while !w.done() {
        let (id, body) = w.next();
        let before = w.store.flash_mut().flash_mut().stats().clone();
        match w.store.append(&id, &[user(&body)], false) {
            Ok(_) => {
                refused = 0;
                w.took(&id, body);
            }
            Err(Error::Full { .. }) if w.live.len() > 1 && refused < 50 => {
                let after = w.store.flash_mut().flash_mut().stats();
                written += after.programmed_bytes - before.programmed_bytes;
                erased += after.erases - before.erases;
                refusals += 1;
                refused += 1;
                if let Some(old) = w.retire_oldest() {
                    let short = w.store.log.free_sectors()
                        < w.store.reserve_for(super::gc::Priority::Maintenance);
                    w.store
                        .delete_session(&old)
                        .unwrap_or_else(|e| panic!("every {nth}th: delete at {}: {e:?}", w.n));
                    stuck_deletions += usize::from(short);
                }
            }
            // Fifty refused in a row, whatever was deleted: the collection
            // is stuck.
            Err(Error::Full { .. }) => {
                stuck = true;
                break;
            }
            Err(e) => panic!("every {nth}th: append {}: {e:?}", w.n),
        }
    }
    std::println!(
        "every {nth}th: {} at append {}, {stuck_deletions} deletions with less free than maintenance leaves; {refusals} appends refused before, which wrote {written} B and erased {erased} sectors",
        if stuck { "stuck" } else { "ran to its end" },
        w.n
    );
    assert_eq!(
        (written, erased),
        (0, 0),
        "every {nth}th: refused appends wrote"
    );
    let store = &mut w.store;
    assert_reads_back(store, &w.model);
    // The kept session goes: the tail holds nothing live, and the store
    // takes appends again.
    store.delete_session("chat:keep").unwrap();
    let mut buf = std::vec![0u8; 256 * 1024];
    for k in 0..20 {
        let body = std::vec![b'z'; 1000];
        store
            .append("chat:after", &[user(&body)], false)
            .unwrap_or_else(|e| panic!("every {nth}th: append {k} after: {e:?}"));
        assert_eq!(
            store
                .history("chat:after", BackendFormat::Unknown, &mut buf)
                .unwrap()
                .len(),
            k + 1
        );
    }
    stuck
}

/// A store full of what lives (the shared workload with the kept session
/// appended to every 5th time, nothing deleted once appends are refused)
/// whose free sectors have fallen below what maintenance leaves (full
/// checkpoints written in the room garbage collection works in, beyond
/// the collection's reach: it cannot make room past the live tail) still
/// takes deletions. A deletion that the collection cannot make room for
/// at maintenance's priority goes where maintenance's room is kept
/// (`Priority::Deletion`; `docs/DESIGN.md`, "Deletions are taken even
/// so"); every session left reads back, and a remount finds the deleted
/// ones gone. Without that fallback the first deletion answers `Full`.
#[test]
fn a_full_store_short_of_maintenance_room_takes_deletions() {
    use super::gc::Priority;
    let mut w = Workload::new(Some(5));
    let mut refused = 0;
    // (Nothing deleted: ten refused in a row, and the store is full of
    // what lives.)
    while refused < 10 {
        assert!(!w.done(), "the store never filled");
        match w.append_next() {
            Ok(()) => refused = 0,
            Err(Error::Full { .. }) => refused += 1,
            Err(e) => panic!("append {}: {e:?}", w.n),
        }
    }
    let store = &mut w.store;
    let maintenance = store.reserve_for(Priority::Maintenance);
    while store.log.free_sectors() >= maintenance {
        store.write_full_checkpoint(Priority::Gc).unwrap();
    }
    // Maintenance's own write cannot be taken: the collection cannot make
    // the room.
    assert!(matches!(
        store.write_full_checkpoint(Priority::Maintenance),
        Err(f) if f.kind() == crate::error::Kind::Full
    ));
    let short: std::vec::Vec<_> = w
        .model
        .keys()
        .filter(|k| *k != "chat:keep")
        .cloned()
        .collect();
    assert!(short.len() >= 2, "{} short sessions to delete", short.len());
    for id in &short {
        store.delete_session(id).unwrap();
        w.model.remove(id);
    }
    assert!(w.model.contains_key("chat:keep"));
    assert_reads_back(store, &w.model);
    store.check().unwrap();
    let flash = Esp32Flash::new(store.flash_mut().flash_mut().snapshot()).unwrap();
    let mut again = S::mount(flash, Config::default(), MountMode::ExistingOnly).unwrap();
    assert_reads_back(&mut again, &w.model);
    for id in &short {
        assert!(
            matches!(
                again.history(id, BackendFormat::Unknown, &mut [0u8; 64]),
                Err(Error::NotFound)
            ),
            "{id} is back"
        );
    }
    again.check().unwrap();
}
