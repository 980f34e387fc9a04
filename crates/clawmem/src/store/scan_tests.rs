//! A mount that finds no sound checkpoint scans the whole ring: every
//! session must come back, those whose root is a base (relocated by the
//! ring's collection, their first batch long collected) included.

extern crate std;

use std::collections::BTreeMap;
use std::format;
use std::string::String;
use std::vec::Vec;

use clawmem_sim::{Esp32Flash, Preset, SimFlash};

use super::*;
use crate::{BackendFormat, Config, Error, MountMode, Record, RecordType};

type S = Store<Esp32Flash, 8>;

fn user(body: &[u8]) -> Record<'_> {
    Record {
        kind: RecordType::User,
        format: BackendFormat::OpenAiCompatible,
        body,
    }
}

#[test]
fn a_mount_without_a_sound_checkpoint_finds_the_sessions_whose_root_is_a_base() {
    let flash = Esp32Flash::new(SimFlash::new(Preset::Esp32.model(64 * 4096).unwrap())).unwrap();
    let mut store = S::format(flash, Config::default()).unwrap();
    let count = store.log.geo().count as usize;
    let mut model: BTreeMap<String, Vec<Vec<u8>>> = BTreeMap::new();
    let mut sizes: BTreeMap<String, usize> = BTreeMap::new();
    let (mut next_id, mut written, mut n) = (0u32, 0usize, 0usize);
    let mut live: Vec<String> = Vec::new();
    // Short sessions turn the ring over six times; one more, appended to
    // every tenth time and never deleted, is relocated by the collection
    // of the tail as it goes round.
    while written < 6 * count * 4096 {
        n += 1;
        if live.len() < 6 {
            live.push(format!("chat:h{next_id}"));
            next_id += 1;
        }
        let id = match n % 10 {
            0 => String::from("chat:keep"),
            _ => live[n % live.len()].clone(),
        };
        let body: Vec<u8> = (0..200 + (n * 37) % 1400)
            .map(|i| b'a' + ((i * 7 + n) % 26) as u8)
            .collect();
        match store.append(&id, &[user(&body)], false) {
            Ok(_) => {
                written += body.len();
                *sizes.entry(id.clone()).or_default() += body.len();
                model.entry(id.clone()).or_default().push(body);
            }
            Err(Error::Full { .. }) if live.len() > 1 => {
                let old = live.remove(0);
                if model.remove(&old).is_some() {
                    store.delete_session(&old).unwrap();
                }
                sizes.remove(&old);
                continue;
            }
            Err(e) => panic!("append {n}: {e:?}"),
        }
        if id != "chat:keep" && sizes[&id] > 40 * 1024 {
            live.retain(|s| *s != id);
            store.delete_session(&id).unwrap();
            model.remove(&id);
            sizes.remove(&id);
        }
    }
    assert!(
        store.sessions.iter().any(|s| s.root_is_base),
        "no session was relocated"
    );
    // One bit of the newest full checkpoint, on which every delta after it
    // builds: no checkpoint loads, and the mount scans the ring.
    let mut sim = store.flash_mut().flash_mut().snapshot();
    sim.flip_bit(store.full_checkpoint as usize + 40, 1)
        .unwrap();
    let flash = Esp32Flash::new(sim).unwrap();
    let mut again = S::mount(flash, Config::default(), MountMode::ExistingOnly).unwrap();
    assert!(!again.mount_report().from_checkpoint);
    let mut buf = std::vec![0u8; 512 * 1024];
    for (id, bodies) in &model {
        let h = again
            .history(id, BackendFormat::Unknown, &mut buf)
            .unwrap_or_else(|e| panic!("{id}: {e:?}"));
        let got: Vec<&[u8]> = h.iter().map(|r| r.body).collect();
        assert_eq!(h.damaged_records(), 0, "{id}");
        assert_eq!(got.len(), bodies.len(), "{id}");
        assert!(got.iter().zip(bodies).all(|(g, b)| g == b), "{id}");
    }
    again.check().unwrap();
}

/// A store whose collection cannot make room (a session near the limit
/// at the tail of a small partition: `docs/DESIGN.md`, "Known gap") still
/// takes deletions, every session reads back, and once the session that
/// holds the tail back is deleted, the store takes appends again.
#[test]
fn a_store_whose_collection_is_stuck_still_takes_deletions() {
    let flash = Esp32Flash::new(SimFlash::new(Preset::Esp32.model(64 * 4096).unwrap())).unwrap();
    let mut store = S::format(flash, Config::default()).unwrap();
    let count = store.log.geo().count as usize;
    let mut model: BTreeMap<String, Vec<Vec<u8>>> = BTreeMap::new();
    let (mut next_id, mut written, mut n) = (0u32, 0usize, 0usize);
    let mut live: Vec<String> = Vec::new();
    // Deletions taken with less free than maintenance leaves; appends
    // refused in a row.
    let (mut stuck_deletions, mut refused) = (0, 0);
    // The workload above, the kept session appended to every 7th time: it
    // nears the session limit and the collection meets it at the tail.
    while written < 6 * count * 4096 {
        n += 1;
        if live.len() < 6 {
            live.push(format!("chat:h{next_id}"));
            next_id += 1;
        }
        let id = match n % 7 {
            0 => String::from("chat:keep"),
            _ => live[n % live.len()].clone(),
        };
        let body: Vec<u8> = (0..200 + (n * 37) % 1400)
            .map(|i| b'a' + ((i * 7 + n) % 26) as u8)
            .collect();
        match store.append(&id, &[user(&body)], false) {
            Ok(_) => {
                refused = 0;
                written += body.len();
                model.entry(id.clone()).or_default().push(body);
            }
            Err(Error::Full { .. }) if live.len() > 1 && refused < 50 => {
                refused += 1;
                // The oldest session the run appends to goes.
                let old = live.remove(0);
                if model.remove(&old).is_some() {
                    let short = store.log.free_sectors()
                        < store.reserve_for(super::gc::Priority::Maintenance);
                    store.delete_session(&old).unwrap();
                    stuck_deletions += usize::from(short);
                }
                continue;
            }
            // Fifty refused in a row, whatever was deleted: the collection
            // is stuck.
            Err(Error::Full { .. }) => break,
            Err(e) => panic!("append {n}: {e:?}"),
        }
        if id != "chat:keep" && model[&id].iter().map(Vec::len).sum::<usize>() > 40 * 1024 {
            live.retain(|s| *s != id);
            store.delete_session(&id).unwrap();
            model.remove(&id);
        }
    }
    assert!(stuck_deletions > 0, "no deletion met a stuck collection");
    let mut buf = std::vec![0u8; 256 * 1024];
    for (id, bodies) in &model {
        let h = store.history(id, BackendFormat::Unknown, &mut buf).unwrap();
        let got: Vec<&[u8]> = h.iter().map(|r| r.body).collect();
        assert_eq!(got.len(), bodies.len(), "{id}");
        assert!(got.iter().zip(bodies).all(|(g, b)| g == b), "{id}");
    }
    // The kept session goes: the tail holds nothing live, and the store
    // takes appends again.
    store.delete_session("chat:keep").unwrap();
    for k in 0..20 {
        let body = std::vec![b'z'; 1000];
        store.append("chat:after", &[user(&body)], false).unwrap();
        assert_eq!(
            store
                .history("chat:after", BackendFormat::Unknown, &mut buf)
                .unwrap()
                .len(),
            k + 1
        );
    }
}
