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

/// The workload both tests run on a 256 KiB partition: six short sessions
/// at a time, each deleted once it passes 40 KiB, turn the ring over six
/// times; one more, `chat:keep`, is appended to every `keep_every`-th time
/// and never deleted, so the collection of the tail meets it as it goes
/// round.
struct Workload {
    store: S,
    /// Every session's bodies, as appended.
    model: BTreeMap<String, Vec<Vec<u8>>>,
    /// The short sessions being appended to, oldest first.
    live: Vec<String>,
    next_id: u32,
    /// Appends tried, and user bytes taken.
    n: usize,
    written: usize,
    keep_every: usize,
}

impl Workload {
    fn new(keep_every: usize) -> Self {
        let flash =
            Esp32Flash::new(SimFlash::new(Preset::Esp32.model(64 * 4096).unwrap())).unwrap();
        Workload {
            store: S::format(flash, Config::default()).unwrap(),
            model: BTreeMap::new(),
            live: Vec::new(),
            next_id: 0,
            n: 0,
            written: 0,
            keep_every,
        }
    }

    /// True once the ring has turned over six times.
    fn done(&self) -> bool {
        self.written >= 6 * self.store.log.geo().count as usize * 4096
    }

    /// The next append: its session and its body.
    fn next(&mut self) -> (String, Vec<u8>) {
        self.n += 1;
        let n = self.n;
        if self.live.len() < 6 {
            self.live.push(format!("chat:h{}", self.next_id));
            self.next_id += 1;
        }
        let id = match n % self.keep_every {
            0 => String::from("chat:keep"),
            _ => self.live[n % self.live.len()].clone(),
        };
        let body = (0..200 + (n * 37) % 1400)
            .map(|i| b'a' + ((i * 7 + n) % 26) as u8)
            .collect();
        (id, body)
    }

    /// The store took `body` into `id`: a short session past 40 KiB then
    /// goes.
    fn took(&mut self, id: &str, body: Vec<u8>) {
        self.written += body.len();
        let bodies = self.model.entry(String::from(id)).or_default();
        bodies.push(body);
        if id != "chat:keep" && bodies.iter().map(Vec::len).sum::<usize>() > 40 * 1024 {
            self.live.retain(|s| s != id);
            self.store.delete_session(id).unwrap();
            self.model.remove(id);
        }
    }

    /// The oldest short session leaves the run; it is returned if the
    /// store holds it (the caller deletes it), `None` if it never took a
    /// record.
    fn retire_oldest(&mut self) -> Option<String> {
        let old = self.live.remove(0);
        self.model.remove(&old).map(|_| old)
    }
}

/// Every session of `model` reads back from `store`, whole and undamaged.
fn assert_reads_back(store: &mut S, model: &BTreeMap<String, Vec<Vec<u8>>>) {
    let mut buf = std::vec![0u8; 256 * 1024];
    for (id, bodies) in model {
        let h = store
            .history(id, BackendFormat::Unknown, &mut buf)
            .unwrap_or_else(|e| panic!("{id}: {e:?}"));
        let got: Vec<&[u8]> = h.iter().map(|r| r.body).collect();
        assert_eq!(h.damaged_records(), 0, "{id}");
        assert_eq!(got.len(), bodies.len(), "{id}");
        assert!(got.iter().zip(bodies).all(|(g, b)| g == b), "{id}");
    }
}

#[test]
fn a_mount_without_a_sound_checkpoint_finds_the_sessions_whose_root_is_a_base() {
    let mut w = Workload::new(10);
    while !w.done() {
        let (id, body) = w.next();
        match w.store.append(&id, &[user(&body)], false) {
            Ok(_) => w.took(&id, body),
            Err(Error::Full { .. }) if w.live.len() > 1 => {
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
    // One bit of the newest full checkpoint, on which every delta after it
    // builds: no checkpoint loads, and the mount scans the ring.
    let mut sim = store.flash_mut().flash_mut().snapshot();
    sim.flip_bit(store.full_checkpoint as usize + 40, 1)
        .unwrap();
    let flash = Esp32Flash::new(sim).unwrap();
    let mut again = S::mount(flash, Config::default(), MountMode::ExistingOnly).unwrap();
    assert!(!again.mount_report().from_checkpoint);
    assert_reads_back(&mut again, &w.model);
    again.check().unwrap();
}

/// A store whose collection cannot make room (a session near the limit
/// at the tail of a small partition: `docs/DESIGN.md`, "Known gap") still
/// takes deletions, every session reads back, and once the session that
/// holds the tail back is deleted, the store takes appends again.
#[test]
fn a_store_whose_collection_is_stuck_still_takes_deletions() {
    // The kept session appended to every 7th time nears the session limit
    // and the collection meets it at the tail.
    let mut w = Workload::new(7);
    // Deletions taken with less free than maintenance leaves; appends
    // refused in a row.
    let (mut stuck_deletions, mut refused) = (0, 0);
    while !w.done() {
        let (id, body) = w.next();
        match w.store.append(&id, &[user(&body)], false) {
            Ok(_) => {
                refused = 0;
                w.took(&id, body);
            }
            Err(Error::Full { .. }) if w.live.len() > 1 && refused < 50 => {
                refused += 1;
                if let Some(old) = w.retire_oldest() {
                    let short = w.store.log.free_sectors()
                        < w.store.reserve_for(super::gc::Priority::Maintenance);
                    w.store.delete_session(&old).unwrap();
                    stuck_deletions += usize::from(short);
                }
            }
            // Fifty refused in a row, whatever was deleted: the collection
            // is stuck.
            Err(Error::Full { .. }) => break,
            Err(e) => panic!("append {}: {e:?}", w.n),
        }
    }
    assert!(stuck_deletions > 0, "no deletion met a stuck collection");
    let store = &mut w.store;
    assert_reads_back(store, &w.model);
    // The kept session goes: the tail holds nothing live, and the store
    // takes appends again.
    store.delete_session("chat:keep").unwrap();
    let mut buf = std::vec![0u8; 256 * 1024];
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
