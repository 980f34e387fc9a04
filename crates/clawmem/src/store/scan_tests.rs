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
