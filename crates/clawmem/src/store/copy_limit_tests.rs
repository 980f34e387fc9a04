//! The copy limit of relocation in part (feature `sector-table`;
//! `ROOM_PER_COPY`, `store/gc.rs`): a collection that would copy more
//! than a quarter of the room it makes from sessions not in use is not
//! started, and the append is refused having written and erased nothing,
//! in the running store and in one mounted afresh; once the caller deletes
//! what held the tail, the append is taken. A quiet session in a ring
//! mostly dead is carried past: the dead sectors after it pay for it.
//! Sessions in use are not held to it: a session appended to all along is
//! cleaned at the tail, never refused until it is deleted.

extern crate std;

use std::format;

use clawmem_sim::Esp32Flash;

use super::test_workload::{assert_reads_back, user, Workload, S};
use crate::{Config, Error, MountMode};

/// A store mounted afresh from a copy of `store`'s flash.
fn remounted(store: &mut S) -> S {
    let flash = Esp32Flash::new(store.flash_mut().flash_mut().snapshot()).unwrap();
    S::mount(flash, Config::default(), MountMode::ExistingOnly).unwrap()
}

/// What `store` has programmed and erased so far.
fn wear(store: &mut S) -> (u64, u64) {
    let stats = store.flash_mut().flash_mut().stats();
    (stats.programmed_bytes, stats.erases)
}

/// A session that went quiet holds half of every tail sector (its
/// neighbour deleted): releasing them would copy a byte for every two of
/// room, so the store refuses rather than clean it, in a remounted copy
/// too, and takes the append once the session is deleted. Without the
/// limit the collection copies it and the first append is taken.
#[test]
fn a_quiet_session_holding_the_tail_is_not_copied_the_store_is_full() {
    let mut w = Workload::new(None);
    let body = |n: usize| std::vec![b'a' + (n % 26) as u8; 1000];
    // Half the ring: the quiet session's records between another's,
    // which then goes.
    for n in 0..60 {
        for id in ["chat:quiet", "chat:pad"] {
            w.store.append(id, &[user(&body(n))], false).unwrap();
        }
        w.model
            .entry("chat:quiet".into())
            .or_default()
            .push(body(n));
    }
    w.store.delete_session("chat:pad").unwrap();
    // New sessions, 20 records each, until the first refusal.
    let mut n = 0;
    let id = loop {
        assert!(n < 1000, "never refused");
        let id = format!("chat:new{}", n / 20);
        let before = wear(&mut w.store);
        match w.store.append(&id, &[user(&body(n))], false) {
            Ok(_) => w.model.entry(id).or_default().push(body(n)),
            Err(Error::Full { .. }) => {
                assert_eq!(wear(&mut w.store), before, "a refused append wrote");
                break id;
            }
            Err(e) => panic!("append {n}: {e:?}"),
        }
        n += 1;
    };
    // The tail holds the quiet session's bodies. (While what it appended
    // was in the newer half of the ring, the first releases copied what
    // it had in their sectors.)
    let quiet = w.store.sessions.iter().find(|s| s.records == 60).unwrap();
    assert_eq!(
        quiet.oldest,
        w.store.log.tail_seq(),
        "the quiet session at the tail"
    );
    assert!(n * 1000 > 100 * 1024, "refused after {n} appends");
    assert_reads_back(&mut w.store, &w.model);
    // A store mounted afresh decides alike.
    let mut again = remounted(&mut w.store);
    let before = wear(&mut again);
    assert!(matches!(
        again.append(&id, &[user(&body(n))], false),
        Err(Error::Full { .. })
    ));
    assert_eq!(
        wear(&mut again),
        before,
        "a refused append wrote, remounted"
    );
    // The caller deletes the quiet session: the tail is dead, and the
    // append is taken.
    w.store.delete_session("chat:quiet").unwrap();
    w.model.remove("chat:quiet");
    w.store.append(&id, &[user(&body(n))], false).unwrap();
    w.model.entry(id).or_default().push(body(n));
    assert_reads_back(&mut w.store, &w.model);
    w.store.check().unwrap();
}

/// A quiet session of 40 KiB, every one of its sectors live, in a ring
/// that short sessions turn over three times, deleting themselves: the
/// collection that meets it copies it whole, which no stretch up to the
/// needed room pays for, but the dead sectors after it do (the run walks
/// on, `completes`). No append is refused. Without the walk on, the first
/// collection to meet it is refused, with three quarters of the partition
/// dead.
#[test]
fn a_quiet_session_in_a_ring_mostly_dead_is_carried_past() {
    let mut w = Workload::new(None);
    for n in 0..40 {
        let body = std::vec![b'q'; 1000 + n];
        w.store.append("chat:quiet", &[user(&body)], false).unwrap();
        w.model.entry("chat:quiet".into()).or_default().push(body);
    }
    let mut written = 0;
    let mut n = 0usize;
    while written < 3 * 256 * 1024 {
        let id = format!("chat:b{}", n % 6);
        let body = std::vec![b'a' + (n % 26) as u8; 600];
        w.store
            .append(&id, &[user(&body)], false)
            .unwrap_or_else(|e| panic!("append {n}: {e:?}"));
        written += body.len();
        if n % 12 == 11 {
            w.store
                .delete_session(&format!("chat:b{}", (n / 12) % 6))
                .unwrap();
        }
        n += 1;
    }
    // It was carried round the ring.
    assert!(w.store.log.tail_seq() > 64, "the ring turned");
    assert_reads_back(&mut w.store, &w.model);
    w.store.check().unwrap();
    let mut again = remounted(&mut w.store);
    assert_reads_back(&mut again, &w.model);
}

/// A session appended to every 10th time, never deleted, with short
/// sessions turning the ring over six times around it (deleted when the
/// store refuses, oldest first): its bodies are at the tail at every turn,
/// and the store cleans them rather than refuse. It never refuses ten
/// appends in a row, which the workload would answer by deleting it
/// (`Workload::make_room`); with the limit held to its copies too, it is
/// deleted seven times.
#[test]
fn a_session_in_use_at_the_tail_is_copied_not_refused() {
    let mut w = Workload::new(Some(10));
    let (mut refused, mut most) = (0u32, 0u32);
    while !w.done() {
        match w.append_next() {
            Ok(()) => refused = 0,
            Err(Error::Full { .. }) => {
                refused += 1;
                most = most.max(refused);
                assert!(!w.make_room(refused), "the session in use deleted");
            }
            Err(e) => panic!("append {}: {e:?}", w.n),
        }
    }
    assert!(most < 10, "{most} refused in a row");
    // Its bodies were carried out of the tail, more than once round.
    let moves = w.store.cleaning().moves_records;
    assert!(moves >= 10, "{moves} moves records");
    assert!(w.model["chat:keep"].len() > 150);
    assert_reads_back(&mut w.store, &w.model);
    let mut again = remounted(&mut w.store);
    assert_reads_back(&mut again, &w.model);
}
