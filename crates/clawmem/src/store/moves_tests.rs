//! Moves records (feature `sector-table`, stage 4 of format 10;
//! `store/moves.rs`): the shared workload with a session that is never
//! deleted, so that the collection of the tail meets its bodies again and
//! again after its first relocation in part. Every session reads back from
//! the running store and from one mounted afresh; a power cut at every
//! program of a collection that writes a moves record leaves a store that
//! mounts with every session as before the append or after it; and a bit
//! rotted in a moves record costs the records it holds, never a wrong one.

extern crate std;

use std::collections::BTreeMap;
use std::string::String;
use std::vec::Vec;

use clawmem_sim::fault::{CutPoint, PowerCut, Tear};
use clawmem_sim::Esp32Flash;

use super::test_workload::{assert_reads_back, user, Workload, S};
use crate::cursor::Records;
use crate::session::{MOVES_FIXED, MOVES_MAX, SESSION_MOVES};
use crate::{BackendFormat, Config, Error, MountMode};

type Model = BTreeMap<String, Vec<Vec<u8>>>;

/// A store mounted afresh from a copy of `store`'s flash.
fn remounted(store: &mut S) -> S {
    let flash = Esp32Flash::new(store.flash_mut().flash_mut().snapshot()).unwrap();
    S::mount(flash, Config::default(), MountMode::ExistingOnly).unwrap()
}

/// The moves records in the chain of each session in the table: the most
/// any has, and the address of one that holds a body (the newest met).
fn moves_in_chains(store: &mut S) -> (usize, Option<u32>) {
    let (mut most, mut one) = (0, None);
    for i in 0..store.sessions.len() {
        let s = store.sessions[i];
        let mut recs = Records::EMPTY;
        recs.start(&mut store.log.io(), &s, None).unwrap();
        let chain = recs.chain();
        assert!(chain.moves_len <= MOVES_MAX);
        most = most.max(chain.moves_len);
        // (One that holds a body, a record may move none to say where the
        // session's oldest byte is now, and whose released sector is in
        // use again: the bodies it moved are nowhere else.)
        let mut holding = chain.moves[..chain.moves_len].iter().rev();
        let reused = |sector: u32| store.log.seq_of_sector(sector).is_some();
        if let Some(m) = holding.find(|m| m.len > MOVES_FIXED + 8 && reused(m.sector)) {
            one = Some(chain.addrs[m.segment]);
        }
    }
    (most, one)
}

/// The next append of `w`, refusals answered as the workload does
/// (`Workload::make_room`; `refused` counts them in a row).
fn step(w: &mut Workload, refused: &mut u32) {
    let (id, body) = w.next();
    match w.store.append(&id, &[user(&body)], false) {
        Ok(_) => {
            *refused = 0;
            w.took(&id, body);
        }
        Err(Error::Full { .. }) => {
            *refused += 1;
            w.make_room(*refused);
        }
        Err(e) => panic!("append {}: {e:?}", w.n),
    }
}

#[test]
fn moves_records_carry_bodies_out_of_the_tail_and_read_back_after_a_mount() {
    let mut w = Workload::new(Some(5));
    let (mut most, mut refused) = (0, 0);
    while !w.done() {
        step(&mut w, &mut refused);
        if w.n.is_multiple_of(50) {
            w.store.check().unwrap();
            assert_reads_back(&mut w.store, &w.model);
            most = most.max(moves_in_chains(&mut w.store).0);
            // The mount replays the moves records written since the
            // checkpoint: the chain and the oldest sector as the running
            // store has them (`check` holds the table to the chains).
            let mut again = remounted(&mut w.store);
            again.check().unwrap();
            assert_reads_back(&mut again, &w.model);
            for s in w.store.sessions.iter() {
                let t = again.sessions.iter().find(|t| t.uid == s.uid).unwrap();
                assert_eq!((t.head, t.chain, t.oldest), (s.head, s.chain, s.oldest));
            }
        }
    }
    let moves = w.store.cleaning().moves_records;
    assert!(moves >= 20, "{moves} moves records");
    // Chains held several, and none more than the limit (a base folds
    // them in then).
    assert!(most >= 2, "at most {most} moves records in a chain");
}

/// Whether every session of `model` reads back from `store`, whole.
fn reads_back(store: &mut S, model: &Model) -> bool {
    let mut buf = std::vec![0u8; 256 * 1024];
    model.iter().all(|(id, bodies)| {
        let Ok(h) = store.history(id, BackendFormat::Unknown, &mut buf) else {
            return false;
        };
        h.damaged_records() == 0
            && h.iter()
                .map(|r| r.body)
                .eq(bodies.iter().map(Vec::as_slice))
    })
}

#[test]
fn a_power_cut_anywhere_in_a_collection_that_writes_moves_records_loses_nothing() {
    let mut w = Workload::new(Some(5));
    let (mut campaigns, mut cuts, mut refused) = (0, 0u64, 0);
    while !w.done() && campaigns < 3 {
        let snap = w.store.flash_mut().flash_mut().snapshot();
        let (before, model) = (w.store.cleaning().moves_records, w.model.clone());
        let (id, body) = w.next();
        match w.store.append(&id, &[user(&body)], false) {
            Ok(_) => {
                refused = 0;
                w.took(&id, body.clone());
            }
            Err(Error::Full { .. }) => {
                refused += 1;
                w.make_room(refused);
                continue;
            }
            Err(e) => panic!("append {}: {e:?}", w.n),
        }
        if w.store.cleaning().moves_records == before {
            continue;
        }
        // The append collected the tail and wrote a moves record: cut at
        // each of its flash operations in turn, on the flash as it was
        // before (mounted afresh, which must decide as the running store
        // did: checked once uncut).
        let mut with = model.clone();
        with.entry(id.clone()).or_default().push(body.clone());
        let mount = |k: Option<u64>| {
            let mut copy = S::mount(
                Esp32Flash::new(snap.clone()).unwrap(),
                Config::default(),
                MountMode::ExistingOnly,
            )
            .unwrap();
            if let Some(k) = k {
                copy.flash_mut().flash_mut().arm_power_cut(PowerCut {
                    seed: k,
                    at: CutPoint::Op(k),
                    tear: if k % 2 == 0 {
                        Tear::Bits
                    } else {
                        Tear::Prefix(0)
                    },
                });
            }
            copy
        };
        let mut uncut = mount(None);
        uncut.append(&id, &[user(&body)], false).unwrap();
        if uncut.cleaning().moves_records == 0 {
            continue;
        }
        campaigns += 1;
        for k in 0..10_000u64 {
            let mut copy = mount(Some(k));
            let r = copy.append(&id, &[user(&body)], false);
            let sim = copy.flash_mut().flash_mut();
            if sim.is_powered() {
                sim.clear_faults();
                r.unwrap();
                break;
            }
            sim.restore_power();
            cuts += 1;
            let mut after = remounted(&mut copy);
            after.check().unwrap();
            assert!(
                reads_back(&mut after, &model) || reads_back(&mut after, &with),
                "cut at op {k} of a collection writing moves records"
            );
        }
    }
    assert_eq!(campaigns, 3, "collections that wrote moves records");
    assert!(cuts >= 30, "{cuts} cuts");
}

#[test]
fn a_bit_rotted_in_a_moves_record_costs_its_records_never_a_wrong_one() {
    let mut w = Workload::new(Some(5));
    let mut refused = 0;
    let addr = loop {
        assert!(!w.done(), "no moves record written");
        step(&mut w, &mut refused);
        if let (_, Some(addr)) = moves_in_chains(&mut w.store) {
            break addr;
        }
    };
    let h = w.store.log.io().chunk_header(addr).unwrap().unwrap();
    assert_eq!(h.kind, SESSION_MOVES);
    // (The mount then goes from a checkpoint after the record, and reads
    // it as a chain element, not replaying it.)
    w.store
        .write_full_checkpoint(super::gc::Priority::Maintenance)
        .unwrap();
    let payload = addr + crate::layout::CHUNK_HEADER_LEN;
    // A byte of a body it holds, and a byte of its fixed part (the
    // sector it emptied).
    for at in [MOVES_FIXED + 3, 9] {
        let byte = w.store.log.io().stream_advance(payload, at);
        let mut sim = w.store.flash_mut().flash_mut().snapshot();
        sim.flip_bit(byte as usize, 2).unwrap();
        let flash = Esp32Flash::new(sim).unwrap();
        let mut rotten = S::mount(flash, Config::default(), MountMode::ExistingOnly).unwrap();
        let mut buf = std::vec![0u8; 256 * 1024];
        let (mut damaged, mut whole) = (0, true);
        for (id, bodies) in &w.model {
            let h = rotten
                .history(id, BackendFormat::Unknown, &mut buf)
                .unwrap_or_else(|e| panic!("{id}: {e:?}"));
            // What comes back is the model's records in order, some left
            // out: never a body that was not appended.
            let mut want = bodies.iter();
            for r in h.iter() {
                assert!(
                    want.any(|b| b.as_slice() == r.body),
                    "{id}: a record read back that was not appended"
                );
            }
            damaged += h.damaged_records();
            whole &= h.len() == bodies.len();
        }
        // A body's CRC finds the rot in it. Rot in the fixed part makes the
        // record no element of the chain: the bodies it moved are read
        // where they were, if the sector released still held them; here it
        // is in use again, and their CRCs fail there. Either way a record
        // is never lost unseen.
        assert!(
            damaged >= 1,
            "a rotten byte at {at} of the record cost nothing"
        );
        assert!(!whole, "a rotten byte at {at}: every record read back");
    }
}
