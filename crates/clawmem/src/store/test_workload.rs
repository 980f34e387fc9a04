//! The workload the store's scan and holes tests share (`scan_tests.rs`,
//! `tests.rs`): short sessions that turn a small ring over, the model of
//! what was appended, and the check that every session reads back.

extern crate std;

use std::collections::BTreeMap;
use std::format;
use std::string::String;
use std::vec::Vec;

use clawmem_sim::{Esp32Flash, Preset, SimFlash};

use super::*;
use crate::{BackendFormat, Config, Record, RecordType};

pub(super) type S = Store<Esp32Flash, 8>;

pub(super) fn user(body: &[u8]) -> Record<'_> {
    Record {
        kind: RecordType::User,
        format: BackendFormat::OpenAiCompatible,
        body,
    }
}

/// The workload of `scan_tests.rs` and of the holes test (`tests.rs`), on
/// a 256 KiB partition: six short sessions at a time, each deleted once it
/// passes 40 KiB, turn the ring over six times; with `keep_every`, one
/// more, `chat:keep`, is appended to every `keep_every`-th time and never
/// deleted, so the collection of the tail meets it as it goes round.
pub(super) struct Workload {
    pub store: S,
    /// Every session's bodies, as appended.
    pub model: BTreeMap<String, Vec<Vec<u8>>>,
    /// The short sessions being appended to, oldest first.
    pub live: Vec<String>,
    next_id: u32,
    /// Appends tried, and user bytes taken.
    pub n: usize,
    written: usize,
    keep_every: Option<usize>,
}

impl Workload {
    pub fn new(keep_every: Option<usize>) -> Self {
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
    pub fn done(&self) -> bool {
        self.done_fraction() >= 1.0
    }

    /// How far the run is, from 0 to 1 ([`done`](Self::done) at 1).
    pub fn done_fraction(&self) -> f64 {
        self.written as f64 / (6 * self.store.log.geo().count as usize * 4096) as f64
    }

    /// The next append: its session and its body.
    pub fn next(&mut self) -> (String, Vec<u8>) {
        self.n += 1;
        let n = self.n;
        if self.live.len() < 6 {
            self.live.push(format!("chat:h{}", self.next_id));
            self.next_id += 1;
        }
        let id = match self.keep_every {
            Some(k) if n.is_multiple_of(k) => String::from("chat:keep"),
            _ => self.live[n % self.live.len()].clone(),
        };
        let body = (0..200 + (n * 37) % 1400)
            .map(|i| b'a' + ((i * 7 + n) % 26) as u8)
            .collect();
        (id, body)
    }

    /// The store took `body` into `id`: a short session past 40 KiB then
    /// goes.
    pub fn took(&mut self, id: &str, body: Vec<u8>) {
        self.written += body.len();
        let bodies = self.model.entry(String::from(id)).or_default();
        bodies.push(body);
        if id != "chat:keep" && bodies.iter().map(Vec::len).sum::<usize>() > 40 * 1024 {
            self.live.retain(|s| s != id);
            self.store.delete_session(id).unwrap();
            self.model.remove(id);
        }
    }

    /// Appends the next record ([`next`](Self::next)) to the store, and
    /// takes it into the model ([`took`](Self::took)) if the store took
    /// it; [`n`](Self::n) numbers it.
    pub fn append_next(
        &mut self,
    ) -> Result<(), Error<<Esp32Flash as embedded_storage::nor_flash::ErrorType>::Error>> {
        let (id, body) = self.next();
        self.store.append(&id, &[user(&body)], false)?;
        self.took(&id, body);
        Ok(())
    }

    /// The oldest short session leaves the run; it is returned if the
    /// store holds it (the caller deletes it), `None` if it never took a
    /// record.
    pub fn retire_oldest(&mut self) -> Option<String> {
        let old = self.live.remove(0);
        self.model.remove(&old).map(|_| old)
    }

    /// The store answered `Full` to an append, the `refused`th in a row
    /// (from 1): the oldest short session goes, as ESP-Claw's warning
    /// asks, and after every ten in a row the kept session too, which near
    /// the session limit can hold the tail back for good (`docs/DESIGN.md`,
    /// "Known gap: a session near the limit at the tail of a small
    /// partition"). Returns whether the kept session went. Panics at fifty
    /// in a row: the run would never end.
    #[cfg(feature = "sector-table")] // the dead bytes' oracle test
    pub fn make_room(&mut self, refused: u32) -> bool {
        assert!(refused < 50, "fifty appends refused in a row at {}", self.n);
        if let Some(old) = self.retire_oldest() {
            self.store.delete_session(&old).unwrap();
        }
        if refused.is_multiple_of(10) && self.model.remove("chat:keep").is_some() {
            self.store.delete_session("chat:keep").unwrap();
            return true;
        }
        false
    }
}

/// Every session of `model` reads back from `store`, whole and undamaged.
pub(super) fn assert_reads_back(store: &mut S, model: &BTreeMap<String, Vec<Vec<u8>>>) {
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
