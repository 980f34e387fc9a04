//! Power-loss campaigns (`clawmem-sim torture`).
//!
//! A campaign replays a trace's operations through clawmem (behind the
//! replayer's [`ClawmemDriver`]) on a [`SimFlash`], once cleanly to count the
//! program and erase calls (the *cut points*) and to record, after every
//! operation, what a fresh mount of the flash shows; then once per chosen cut
//! point and tear pattern with a power cut armed at that call. After each cut
//! the flash is mounted afresh (never reusing engine RAM) and checked:
//!
//! - durability and no resurrection: the recovered state (every session's
//!   history, every active memory item, every profile document) equals the
//!   state after the last acknowledged operation, or after the operation in
//!   flight (all-or-nothing); the one documented exception is
//!   `memory_update`, whose new item and tombstone of the old item are two
//!   batches: a cut between them may leave both active;
//! - the clean run's states agree with a reference model of the trace:
//!   histories in acknowledged order minus ESP-Claw's documented turn-aware
//!   compaction, the active items, the profiles written;
//! - a second mount gives the same answer;
//! - `Store::check()` passes;
//! - a new write that fits succeeds after recovery.
//!
//! With `double`, each cut is followed by a second cut at every program and
//! erase call of the recovery (the mount, any repair it makes, and the next
//! write with the garbage collection it owes), each time on a copy of the
//! flash as the first cut left it; the flash is then mounted again and
//! checked the same way.
//!
//! With `idle`, idle-time maintenance ([`Driver::maintain`]) runs where
//! `replay --idle` calls it, in the clean run and every cut run, so that cut
//! points fall inside it too. With `fill`, the operations are the fill
//! workload's ([`crate::fill`]), computed once on a clean run
//! ([`fill_op_list`]), and every first cut is followed by the capacity
//! check: on the flash as the cut left it, mounted afresh, the next writes
//! the uncut store took must not answer `Full` (`capacity_violations`).
//!
//! With `image`, the campaign starts from a flash image instead of a blank
//! partition: the clean run and every cut run mount it (`ExistingOnly`),
//! the reference model starts from what it holds, and the operations run on
//! top. On a golden image of an older format (`tests/images/`) this cuts
//! power at every call of the in-place upgrade that the first write starts
//! and of the writes after it (the report gives the format versions in the
//! sector headers before and after the clean run).
//!
//! Every run is reproducible from its replay string,
//! `--seed S --cut K --tear T` (plus `--fill`, `--idle`, `--ops N` and
//! `--double` when used):
//! the tear's randomness (of both cuts) derives from the seed, the cut index
//! and the tear pattern.

use std::cell::RefCell;
use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::fmt;
use std::rc::Rc;
use std::str::FromStr;
use std::time::Instant;

use clawmem::profile::ProfileDoc;
use clawmem::turns::{PlanBuilder, COMPACT_TOOL_TURNS};
use clawmem::{BackendFormat, Config, MountMode, Record, RecordType, Store};
use embedded_storage::nor_flash::{ErrorType, NorFlash, ReadNorFlash};
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;
use serde::Serialize;

use crate::fault::{CutPoint, PowerCut, Tear};
use crate::flash::SimFlash;
use crate::latency::idle_after;
use crate::model::{Model, Preset};
use crate::nor::{
    Esp32EncryptedFlash, Esp32Flash, GenericFlash, Nrf52Flash, Stm32h7Flash, Stm32l4Flash,
};
use crate::replay::{
    fit_config_for, AppendOutcome, ClawmemDriver, Driver, EngineInfo, HistoryRecord, ItemHandle,
    MemoryChange, MemoryItem, MemoryStored, OpError, OpResult, ReplayError, ReplayOptions,
    SimBacked, MAX_SESSIONS,
};

/// The session tables `--sessions` offers besides [`MAX_SESSIONS`] (each
/// is its own build of the store).
pub use crate::fill::SESSION_TABLES;
use crate::trace::{Op, ProfileName, Trace, TraceRecord};

/// Session the progress write after a recovery appends to.
pub const AFTER_SESSION: &str = "torture:after";
const AFTER_BODY: &[u8] = b"{\"torture\":\"write after recovery\"}";

/// A tear pattern of the campaign: how the call in flight is torn.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum TearKind {
    /// A prefix of the call lands; its length is drawn from the run's seed
    /// (0, a few bytes, a few hundred bytes, or the whole call).
    Prefix,
    /// A random subset of the intended bits lands ([`Tear::Bits`]).
    Bits,
    /// The words in flight take random values ([`Tear::Random`]).
    Random,
    /// Exhaustive: a prefix ending at every word of the program call in
    /// flight (an erase: nothing, half and all of it), then 8 random
    /// partial-bit patterns. Not in `all`; many runs per cut point.
    Words,
}

impl TearKind {
    /// Every pattern, in `--tear all` order.
    pub const ALL: [TearKind; 3] = [TearKind::Prefix, TearKind::Bits, TearKind::Random];

    /// The name the CLI uses.
    pub fn name(self) -> &'static str {
        match self {
            TearKind::Prefix => "prefix",
            TearKind::Words => "words",
            TearKind::Bits => "bits",
            TearKind::Random => "random",
        }
    }

    /// Parses `prefix`, `bits`, `random` or `all`.
    pub fn parse_list(s: &str) -> Result<Vec<TearKind>, String> {
        if s == "all" {
            Ok(Self::ALL.to_vec())
        } else {
            Ok(vec![s.parse()?])
        }
    }

    fn index(self) -> u64 {
        match self {
            TearKind::Prefix => 0,
            TearKind::Bits => 1,
            TearKind::Random => 2,
            TearKind::Words => 3,
        }
    }

    /// The concrete tear of a run seeded with `seed`.
    fn tear(self, seed: u64) -> Tear {
        match self {
            TearKind::Bits | TearKind::Words => Tear::Bits,
            TearKind::Random => Tear::Random,
            TearKind::Prefix => {
                let mut rng = ChaCha8Rng::seed_from_u64(seed ^ 0x7ea2);
                Tear::Prefix(match rng.random_range(0..4u8) {
                    0 => 0,
                    1 => rng.random_range(1..=32),
                    2 => rng.random_range(33..=1024),
                    _ => 1 << 30,
                })
            }
        }
    }
}

impl fmt::Display for TearKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

impl FromStr for TearKind {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        match s {
            "prefix" => Ok(TearKind::Prefix),
            "words" => Ok(TearKind::Words),
            "bits" => Ok(TearKind::Bits),
            "random" => Ok(TearKind::Random),
            _ => Err(format!(
                "tear {s:?} is not prefix, bits, random, words or all"
            )),
        }
    }
}

/// Which cut points a campaign takes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Cuts {
    /// Every program and erase call.
    All,
    /// This many distinct calls, drawn with the seed (all if there are fewer).
    Sample(u64),
    /// Exactly this call (a replay).
    Only(u64),
}

/// A campaign's set-up.
#[derive(Clone, Debug, PartialEq)]
pub struct TortureOptions {
    /// Flash part.
    pub preset: Preset,
    /// Partition size; the preset's default if `None`.
    pub size_bytes: Option<usize>,
    /// Cut points to take.
    pub cuts: Cuts,
    /// Tear patterns; every cut point is run once with each.
    pub tears: Vec<TearKind>,
    /// Also cut at every program and erase call of the recovery that
    /// follows each cut.
    pub double: bool,
    /// `(i, n)`: of the chosen cut points (in call order), take every n-th
    /// starting at the i-th.
    pub shard: Option<(u64, u64)>,
    /// Seed of the sampling and of every tear.
    pub seed: u64,
    /// Replay only the first N operations of the trace.
    pub ops: Option<usize>,
    /// Idle-time maintenance (`--idle`): call [`Driver::maintain`] where
    /// `replay --idle` does ([`idle_after`]), in the clean run and in every
    /// cut run, so that cuts fall inside maintenance too.
    pub idle: bool,
    /// The fill workload's operations (`--fill`, [`crate::fill`]) instead of
    /// the trace's, computed once on a clean run; adds the capacity check.
    pub fill: bool,
    /// clawmem's session table (`Store<_, N>`): [`MAX_SESSIONS`] if `None`,
    /// else one of [`SESSION_TABLES`] (`--sessions`, for `--fill` on
    /// partitions that keep more sessions live before they fill).
    pub sessions: Option<usize>,
    /// Start from this flash image (`--image`, a file of the preset's
    /// sector size) instead of a blank partition; its size is the
    /// partition's. Not with `fill`, whose workload starts blank.
    pub image: Option<std::path::PathBuf>,
    /// Test hook, to show the checker is not vacuous: after every cut, flip
    /// one bit in every copy on flash of the body of an acknowledged record
    /// before the remount. Every run should then report a violation.
    pub sabotage: bool,
}

impl Default for TortureOptions {
    fn default() -> Self {
        TortureOptions {
            preset: Preset::Esp32,
            size_bytes: None,
            cuts: Cuts::Sample(100),
            tears: TearKind::ALL.to_vec(),
            double: false,
            shard: None,
            seed: 0,
            ops: None,
            idle: false,
            fill: false,
            sessions: None,
            image: None,
            sabotage: false,
        }
    }
}

/// What a campaign found. `--json` prints it as one object.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct TortureReport {
    /// Trace file.
    pub trace: String,
    /// Flash preset.
    pub preset: String,
    /// Operations replayed.
    pub ops: usize,
    /// Program and erase calls of the clean run: the cut points available.
    pub total_cut_points: u64,
    /// Cut points taken (after sampling and sharding).
    pub cut_points: u64,
    /// Tear patterns each cut point was run with.
    pub tear_patterns: Vec<String>,
    /// Whether a second cut was armed during each recovery.
    pub double: bool,
    /// Second cuts armed (with `double`).
    pub second_cuts: u64,
    /// Runs: cut points times tear patterns.
    pub runs: u64,
    /// Fresh mounts after a cut.
    pub remounts: u64,
    /// Recoveries whose progress write failed for want of space that the
    /// clean run lacked too (the partition was full): not violations.
    pub progress_full: u64,
    /// Violations found (several can come from one run).
    pub violations: u64,
    /// Replay string of the first violation, or `null`.
    pub first_violation: Option<String>,
    /// The first violations, each with its replay string.
    pub violation_messages: Vec<String>,
    /// Operations the engine refused in the clean run (not violations).
    pub clean_op_errors: u64,
    /// clawmem's session table (`Store<_, N>`).
    pub session_table: usize,
    /// Whether idle-time maintenance ran (`--idle`).
    pub idle: bool,
    /// `maintain` calls of the clean run.
    pub maintain_calls: u64,
    /// Program and erase calls the clean run made inside `maintain`.
    pub maintain_cut_points: u64,
    /// Cut points taken that fall inside a `maintain` call.
    pub maintain_cuts: u64,
    /// The fill workload's figures (`--fill`), or `null`.
    pub fill: Option<FillSummary>,
    /// Recoveries whose next writes were compared with the clean run's
    /// (`--fill`).
    pub capacity_checks: u64,
    /// Violations (also in `violations`) where the recovered store answered
    /// `Full` to a write the uncut store took at that point of the run.
    pub capacity_violations: u64,
    /// The image the campaign started from (`--image`), if any.
    pub image: Option<String>,
    /// The format versions in the sector headers (erased sectors left out)
    /// of the flash before the clean run and after it: with an image of an
    /// older format, the upgrade shows as a current version after.
    pub format_versions_before: Vec<u16>,
    /// See [`TortureReport::format_versions_before`].
    pub format_versions_after: Vec<u16>,
    /// Wall-clock time of the campaign in seconds.
    pub seconds: f64,
}

impl fmt::Display for TortureReport {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        writeln!(f, "trace            {}", self.trace)?;
        writeln!(f, "preset           {}", self.preset)?;
        if let Some(img) = &self.image {
            writeln!(f, "image            {img}")?;
        }
        writeln!(
            f,
            "format versions  {:?} before, {:?} after the clean run",
            self.format_versions_before, self.format_versions_after
        )?;
        writeln!(f, "ops              {}", self.ops)?;
        writeln!(
            f,
            "cut points       {} of {}",
            self.cut_points, self.total_cut_points
        )?;
        writeln!(f, "tear patterns    {}", self.tear_patterns.join(", "))?;
        if self.double {
            writeln!(f, "second cuts      {}", self.second_cuts)?;
        }
        writeln!(f, "runs             {}", self.runs)?;
        writeln!(f, "remounts         {}", self.remounts)?;
        writeln!(f, "session table    {}", self.session_table)?;
        writeln!(f, "clean op errors  {}", self.clean_op_errors)?;
        if self.idle {
            writeln!(
                f,
                "maintain         {} calls, {} cut points inside, {} taken",
                self.maintain_calls, self.maintain_cut_points, self.maintain_cuts
            )?;
        }
        if let Some(x) = &self.fill {
            writeln!(
                f,
                "fill             {} ops from {} trace ops, {} refused with Full, {} oldest-session deletes",
                x.ops, x.trace_ops, x.full_refusals, x.oldest_session_deletes
            )?;
            match (&x.first_full, x.first_full_op) {
                (Some(at), Some(i)) => writeln!(f, "first Full       op {i}: {at}")?,
                (Some(at), None) => writeln!(f, "first Full       {at}")?,
                _ => writeln!(f, "first Full       never (the partition did not fill)")?,
            }
            writeln!(f, "capacity checks  {}", self.capacity_checks)?;
            writeln!(f, "capacity viol.   {}", self.capacity_violations)?;
        }
        writeln!(f, "progress full    {}", self.progress_full)?;
        writeln!(f, "violations       {}", self.violations)?;
        if let Some(v) = &self.first_violation {
            writeln!(f, "first violation  {v}")?;
        }
        for m in &self.violation_messages {
            writeln!(f, "  {m}")?;
        }
        writeln!(f, "time             {:.2} s", self.seconds)
    }
}

/// The op list of `--fill`, as the clean run computed it.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct FillSummary {
    /// Operations of the list (the trace's rounds, the refused appends,
    /// the oldest-session deletes and their retries).
    pub ops: usize,
    /// Trace operations the fill workload replayed to make it.
    pub trace_ops: u64,
    /// Whether the engine answered `Full` during the list.
    pub reached_full: bool,
    /// Where the first `Full` came (the fill workload's words).
    pub first_full: Option<String>,
    /// Index in the op list of the first operation refused with `Full`.
    pub first_full_op: Option<usize>,
    /// Operations of the list refused with `Full` in the clean run.
    pub full_refusals: u64,
    /// Oldest sessions deleted to make room for a refused append.
    pub oldest_session_deletes: u64,
}

/// What a fresh mount shows: every session's history, the damaged records
/// of each, every active memory item (content, tags, keywords) and every
/// profile document.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct State {
    /// Session id to history.
    pub sessions: BTreeMap<String, Vec<HistoryRecord>>,
    /// Session id to damaged records, for sessions with any.
    pub damaged: BTreeMap<String, u32>,
    /// Item id to (content, tags, keywords).
    pub memory: BTreeMap<u32, (String, String, String)>,
    /// The four profile documents, in [`ProfileDoc::ALL`] order.
    pub profiles: Vec<Vec<u8>>,
}

impl State {
    /// A short description of the first difference from `other`.
    pub fn diff(&self, other: &State) -> String {
        let mut out = Vec::new();
        let ids: BTreeSet<&String> = self.sessions.keys().chain(other.sessions.keys()).collect();
        for id in ids {
            let (a, b) = (self.sessions.get(id), other.sessions.get(id));
            if a != b {
                out.push(format!(
                    "session {id}: {} vs {} records",
                    a.map_or(0, Vec::len),
                    b.map_or(0, Vec::len)
                ));
            }
        }
        if self.damaged != other.damaged {
            out.push(format!("damaged {:?} vs {:?}", self.damaged, other.damaged));
        }
        if self.memory != other.memory {
            out.push(format!(
                "memory items {:?} vs {:?}",
                self.memory.keys().collect::<Vec<_>>(),
                other.memory.keys().collect::<Vec<_>>()
            ));
        }
        if self.profiles != other.profiles {
            out.push("profiles differ".into());
        }
        out.join("; ")
    }
}

/// A session's history (empty if it does not exist) and its damaged
/// records.
pub(crate) fn history_of<F: NorFlash, const N: usize>(
    store: &mut Store<F, N>,
    id: &str,
) -> Result<(Vec<HistoryRecord>, u32), String> {
    let mut buf = vec![0u8; 16 * 1024];
    loop {
        let len = buf.len();
        let needed = match store.history(id, BackendFormat::Unknown, &mut buf) {
            Ok(h) => {
                let records = h
                    .iter()
                    .map(|r| HistoryRecord {
                        kind: r.kind.into(),
                        format: r.format.into(),
                        body: r.body.to_vec(),
                    })
                    .collect();
                return Ok((records, h.damaged_records()));
            }
            Err(clawmem::Error::NotFound) => return Ok((Vec::new(), 0)),
            Err(clawmem::Error::BufferTooSmall { needed }) if needed > len => needed,
            Err(e) => return Err(format!("history of {id}: {e:?}")),
        };
        buf.resize(needed, 0);
    }
}

/// Reads everything a mounted store holds (see [`State`]). Reading a profile
/// never written stores its default, as clawmem does.
pub fn read_state<F: NorFlash, const N: usize>(store: &mut Store<F, N>) -> Result<State, String> {
    let mut state = State::default();
    let mut ids = Vec::new();
    store
        .for_each_session(|id, _| ids.push(id.to_string()))
        .map_err(|e| format!("session list: {e:?}"))?;
    for id in ids {
        let (records, damaged) = history_of(store, &id)?;
        if damaged > 0 {
            state.damaged.insert(id.clone(), damaged);
        }
        state.sessions.insert(id, records);
    }
    store
        .memory_list(|i| {
            state.memory.insert(
                i.id().get(),
                (
                    i.content().to_string(),
                    i.tags().to_string(),
                    i.keywords().to_string(),
                ),
            );
        })
        .map_err(|e| format!("memory list: {e:?}"))?;
    for doc in ProfileDoc::ALL {
        let len = store
            .profile_len(doc)
            .map_err(|e| format!("profile length of {doc:?}: {e:?}"))?;
        let mut buf = vec![0u8; len];
        match store.profile_read(doc, &mut buf) {
            Ok(n) => buf.truncate(n),
            // A document never written on a full partition: its default
            // cannot be stored, but it is what the document holds.
            Err(clawmem::Error::Full { .. }) => buf = doc.default_contents().as_bytes().to_vec(),
            Err(e) => return Err(format!("profile {doc:?}: {e:?}")),
        }
        state.profiles.push(buf);
    }
    Ok(state)
}

// ---- a flash shared with the caller ------------------------------------------

/// A flash the caller keeps a handle on, so that what a mount that fails
/// (for instance because power failed during it) wrote is not lost with it.
struct Shared<F>(Rc<RefCell<F>>);

impl<F: ErrorType> ErrorType for Shared<F> {
    type Error = F::Error;
}

impl<F: ReadNorFlash> ReadNorFlash for Shared<F> {
    const READ_SIZE: usize = F::READ_SIZE;

    fn read(&mut self, offset: u32, bytes: &mut [u8]) -> Result<(), Self::Error> {
        self.0.borrow_mut().read(offset, bytes)
    }

    fn capacity(&self) -> usize {
        self.0.borrow().capacity()
    }
}

impl<F: NorFlash> NorFlash for Shared<F> {
    const WRITE_SIZE: usize = F::WRITE_SIZE;
    const ERASE_SIZE: usize = F::ERASE_SIZE;

    fn erase(&mut self, from: u32, to: u32) -> Result<(), Self::Error> {
        self.0.borrow_mut().erase(from, to)
    }

    fn write(&mut self, offset: u32, bytes: &[u8]) -> Result<(), Self::Error> {
        self.0.borrow_mut().write(offset, bytes)
    }
}

// ---- the reference model ----------------------------------------------------

fn profile_index(name: ProfileName) -> usize {
    match name {
        ProfileName::Soul => 0,
        ProfileName::Identity => 1,
        ProfileName::User => 2,
        ProfileName::Agents => 3,
    }
}

/// What the acknowledged operations imply.
#[derive(Clone, Default)]
struct Reference {
    sessions: HashMap<String, Vec<TraceRecord>>,
    targets: Vec<Option<ItemHandle>>,
    active: BTreeSet<u64>,
    profiles: [Option<String>; 4],
}

/// ESP-Claw's turn-aware compaction over a modelled session (as the
/// replayer applies it when an append reports `compacted`).
fn compact_model(records: &mut Vec<TraceRecord>) {
    let mut plan = PlanBuilder::<COMPACT_TOOL_TURNS>::new();
    for r in records.iter() {
        plan.push(RecordType::from(r.kind), r.body.len() as u64);
    }
    let plan = plan.finish();
    let mut keep = plan.cursor();
    records.retain(|r| keep.keep_next(RecordType::from(r.kind)));
}

impl Reference {
    /// A model holding what `state` (a mounted image) holds.
    fn from_state(state: &State) -> Result<Reference, String> {
        let mut r = Reference::default();
        for (id, h) in &state.sessions {
            let records = h
                .iter()
                .map(|x| {
                    Ok(TraceRecord {
                        kind: x.kind,
                        format: x.format,
                        body: String::from_utf8(x.body.clone()).map_err(|_| {
                            format!("session {id}: a record body is not UTF-8 text")
                        })?,
                    })
                })
                .collect::<Result<Vec<_>, String>>()?;
            r.sessions.insert(id.clone(), records);
        }
        r.active = state.memory.keys().map(|&k| u64::from(k)).collect();
        for (slot, body) in r.profiles.iter_mut().zip(&state.profiles) {
            *slot = Some(
                String::from_utf8(body.clone())
                    .map_err(|_| "a profile document is not UTF-8 text".to_string())?,
            );
        }
        Ok(r)
    }

    fn target(&self, k: usize) -> Option<ItemHandle> {
        self.targets.get(k).copied().flatten()
    }

    fn retarget(&mut self, old: ItemHandle, new: Option<ItemHandle>) {
        for t in self.targets.iter_mut() {
            if *t == Some(old) {
                *t = new;
            }
        }
    }

    /// Where the state `got` of a fresh mount disagrees with the model.
    fn disagreement(&self, got: &State) -> Option<String> {
        for (id, want) in &self.sessions {
            let have = got.sessions.get(id).map_or(&[][..], Vec::as_slice);
            let same = want.len() == have.len()
                && want.iter().zip(have).all(|(w, h)| {
                    w.kind == h.kind && w.format == h.format && w.body.as_bytes() == h.body
                });
            if !same {
                return Some(format!(
                    "session {id}: the model holds {} records, the flash {}",
                    want.len(),
                    have.len()
                ));
            }
        }
        for (id, have) in &got.sessions {
            if !have.is_empty() && !self.sessions.contains_key(id) {
                return Some(format!("session {id} should not exist (resurrected?)"));
            }
        }
        let items: BTreeSet<u64> = got.memory.keys().map(|&k| u64::from(k)).collect();
        if items != self.active {
            return Some(format!(
                "active memory items {items:?}, the model expects {:?}",
                self.active
            ));
        }
        for (i, p) in self.profiles.iter().enumerate() {
            if let Some(p) = p {
                if got.profiles.get(i).map(Vec::as_slice) != Some(p.as_bytes()) {
                    return Some(format!("profile {i} is not the last one written"));
                }
            }
        }
        None
    }
}

/// Runs one trace operation; on success updates `r`.
fn run_op<D: Driver>(d: &mut D, op: &Op, r: &mut Reference) -> Result<(), OpError> {
    match op {
        Op::Append {
            session,
            records,
            turn_completed,
        } => {
            let out = d.append(session, records, *turn_completed)?;
            let model = r.sessions.entry(session.clone()).or_default();
            model.extend(records.iter().cloned());
            if out.compacted {
                compact_model(model);
            }
        }
        Op::History { session } => {
            d.history(session)?;
        }
        Op::SessionDelete { session } => {
            d.session_delete(session)?;
            r.sessions.remove(session);
        }
        Op::MemoryStore {
            content,
            tags,
            keywords,
            source,
        } => {
            let item = MemoryItem {
                content,
                tags,
                keywords,
                source: *source,
            };
            match d.memory_store(&item) {
                Ok(s) => {
                    r.active.insert(s.item.0);
                    r.targets.push(Some(s.item));
                }
                Err(e) => {
                    r.targets.push(None);
                    return Err(e);
                }
            }
        }
        Op::MemoryRecall { labels, limit } => {
            d.memory_recall(labels, *limit)?;
        }
        Op::MemoryUpdate {
            target,
            content,
            tags,
            keywords,
        } => {
            if let Some(old) = r.target(*target) {
                let change = MemoryChange {
                    content: content.as_deref(),
                    tags: tags.as_deref(),
                    keywords: keywords.as_deref(),
                };
                match d.memory_update(old, &change) {
                    Ok(new) => {
                        r.active.remove(&old.0);
                        r.active.insert(new.0);
                        r.retarget(old, Some(new));
                    }
                    Err(OpError::Evicted) => {
                        r.active.remove(&old.0);
                        r.retarget(old, None);
                    }
                    Err(e) => return Err(e),
                }
            }
        }
        Op::MemoryForget { target } => {
            if let Some(old) = r.target(*target) {
                match d.memory_forget(old) {
                    Ok(()) | Err(OpError::Evicted) => {
                        r.active.remove(&old.0);
                        r.retarget(old, None);
                    }
                    Err(e) => return Err(e),
                }
            }
        }
        Op::MemoryList {} => {
            d.memory_list()?;
        }
        Op::ProfileWrite { name, body } => {
            d.profile_write(*name, body)?;
            r.profiles[profile_index(*name)] = Some(body.clone());
        }
        Op::ProfileRead { name } => {
            d.profile_read(*name)?;
        }
        Op::Remount {} => d.remount()?,
    }
    Ok(())
}

// ---- steps: operations and idle-time maintenance ------------------------------

/// One step of a campaign: an operation, or (with `--idle`) the idle-time
/// maintenance after one.
#[derive(Clone, Debug)]
enum Step {
    Op(Op),
    Maintain,
}

impl Step {
    fn name(&self) -> &'static str {
        match self {
            Step::Op(op) => op.name(),
            Step::Maintain => "maintain",
        }
    }

    fn op(&self) -> Option<&Op> {
        match self {
            Step::Op(op) => Some(op),
            Step::Maintain => None,
        }
    }

    /// Whether the step is a write whose refusal the capacity check
    /// compares.
    fn is_write(&self) -> bool {
        matches!(
            self,
            Step::Op(
                Op::Append { .. }
                    | Op::SessionDelete { .. }
                    | Op::MemoryStore { .. }
                    | Op::MemoryUpdate { .. }
                    | Op::MemoryForget { .. }
                    | Op::ProfileWrite { .. }
            )
        )
    }
}

/// The steps of `ops`: each op, followed by a [`Step::Maintain`] where
/// `replay --idle` calls it ([`idle_after`]) when `idle`.
fn steps_of(ops: Vec<Op>, idle: bool) -> Vec<Step> {
    let mut steps = Vec::with_capacity(ops.len());
    for op in ops {
        let maintain = idle && idle_after(&op);
        steps.push(Step::Op(op));
        if maintain {
            steps.push(Step::Maintain);
        }
    }
    steps
}

fn run_step<D: Driver>(d: &mut D, step: &Step, r: &mut Reference) -> Result<(), OpError> {
    match step {
        Step::Op(op) => run_op(d, op, r),
        Step::Maintain => d.maintain(),
    }
}

/// How a step ended, as the capacity check compares it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Outcome {
    Done,
    Full,
    Refused,
}

fn outcome(r: &Result<(), OpError>) -> Outcome {
    match r {
        Ok(()) => Outcome::Done,
        Err(OpError::Full(_)) => Outcome::Full,
        Err(_) => Outcome::Refused,
    }
}

// ---- the fill workload's op list -----------------------------------------------

/// A [`Driver`] that passes every call on and writes it down as a trace
/// [`Op`], memory items named by store number as [`Reference`] resolves
/// them, so that replaying the list through [`run_op`] makes the same calls.
/// With `idle` it calls `maintain` after each recorded op where
/// [`steps_of`] puts one.
struct Recorder<'d, D: Driver> {
    inner: &'d mut D,
    idle: bool,
    ops: Vec<Op>,
    /// How each op ended.
    outcomes: Vec<Outcome>,
    /// As [`Reference::targets`].
    targets: Vec<Option<ItemHandle>>,
    /// A call the list cannot express, if any.
    unexpressible: Option<String>,
}

impl<D: Driver> Recorder<'_, D> {
    fn push<T>(&mut self, op: Op, r: &OpResult<T>) {
        let maintain = self.idle && idle_after(&op);
        self.outcomes.push(match r {
            Ok(_) => Outcome::Done,
            Err(OpError::Full(_)) => Outcome::Full,
            Err(_) => Outcome::Refused,
        });
        self.ops.push(op);
        if maintain {
            let _ = self.inner.maintain();
        }
    }

    fn target_of(&mut self, item: ItemHandle) -> Option<usize> {
        let k = self.targets.iter().position(|t| *t == Some(item));
        if k.is_none() && self.unexpressible.is_none() {
            self.unexpressible = Some(format!(
                "the fill workload named memory item {} that no store of the list returned",
                item.0
            ));
        }
        k
    }

    fn retarget(&mut self, old: ItemHandle, new: Option<ItemHandle>) {
        for t in self.targets.iter_mut().filter(|t| **t == Some(old)) {
            *t = new;
        }
    }

    fn refuse(&mut self, what: &str) -> OpError {
        if self.unexpressible.is_none() {
            self.unexpressible = Some(format!("the fill workload called {what}"));
        }
        OpError::Failed(format!("{what} is not recorded"))
    }
}

impl<D: Driver> Driver for Recorder<'_, D> {
    fn info(&self) -> EngineInfo {
        self.inner.info()
    }

    fn flash(&self) -> &SimFlash {
        self.inner.flash()
    }

    fn mount_read_bytes(&self) -> &[u64] {
        self.inner.mount_read_bytes()
    }

    fn dead_carried_bytes(&self) -> Option<u64> {
        self.inner.dead_carried_bytes()
    }

    fn append(
        &mut self,
        session: &str,
        records: &[TraceRecord],
        turn_completed: bool,
    ) -> OpResult<AppendOutcome> {
        let r = self.inner.append(session, records, turn_completed);
        self.push(
            Op::Append {
                session: session.into(),
                records: records.to_vec(),
                turn_completed,
            },
            &r,
        );
        r
    }

    fn history(&mut self, session: &str) -> OpResult<Vec<HistoryRecord>> {
        let r = self.inner.history(session);
        self.push(
            Op::History {
                session: session.into(),
            },
            &r,
        );
        r
    }

    fn session_delete(&mut self, session: &str) -> OpResult<()> {
        let r = self.inner.session_delete(session);
        self.push(
            Op::SessionDelete {
                session: session.into(),
            },
            &r,
        );
        r
    }

    fn memory_store(&mut self, item: &MemoryItem<'_>) -> OpResult<MemoryStored> {
        let r = self.inner.memory_store(item);
        self.targets.push(r.as_ref().ok().map(|s| s.item));
        self.push(
            Op::MemoryStore {
                content: item.content.into(),
                tags: item.tags.to_vec(),
                keywords: item.keywords.to_vec(),
                source: item.source,
            },
            &r,
        );
        r
    }

    fn memory_recall(&mut self, labels: &[String], limit: u32) -> OpResult<Vec<ItemHandle>> {
        let r = self.inner.memory_recall(labels, limit);
        self.push(
            Op::MemoryRecall {
                labels: labels.to_vec(),
                limit,
            },
            &r,
        );
        r
    }

    fn memory_update(
        &mut self,
        item: ItemHandle,
        change: &MemoryChange<'_>,
    ) -> OpResult<ItemHandle> {
        let Some(target) = self.target_of(item) else {
            return Err(OpError::Failed("memory item not in the list".into()));
        };
        let r = self.inner.memory_update(item, change);
        match &r {
            Ok(new) => self.retarget(item, Some(*new)),
            Err(OpError::Evicted) => self.retarget(item, None),
            Err(_) => {}
        }
        self.push(
            Op::MemoryUpdate {
                target,
                content: change.content.map(String::from),
                tags: change.tags.map(<[String]>::to_vec),
                keywords: change.keywords.map(<[String]>::to_vec),
            },
            &r,
        );
        r
    }

    fn memory_forget(&mut self, item: ItemHandle) -> OpResult<()> {
        let Some(target) = self.target_of(item) else {
            return Err(OpError::Failed("memory item not in the list".into()));
        };
        let r = self.inner.memory_forget(item);
        if matches!(r, Ok(()) | Err(OpError::Evicted)) {
            self.retarget(item, None);
        }
        self.push(Op::MemoryForget { target }, &r);
        r
    }

    fn memory_list(&mut self) -> OpResult<Vec<ItemHandle>> {
        let r = self.inner.memory_list();
        self.push(Op::MemoryList {}, &r);
        r
    }

    fn profile_write(&mut self, name: ProfileName, body: &str) -> OpResult<()> {
        let r = self.inner.profile_write(name, body);
        self.push(
            Op::ProfileWrite {
                name,
                body: body.into(),
            },
            &r,
        );
        r
    }

    fn profile_read(&mut self, name: ProfileName) -> OpResult<Option<Vec<u8>>> {
        let r = self.inner.profile_read(name);
        self.push(Op::ProfileRead { name }, &r);
        r
    }

    fn remount(&mut self) -> OpResult<()> {
        let r = self.inner.remount();
        self.push(Op::Remount {}, &r);
        r
    }

    fn memory_clear(&mut self) -> OpResult<()> {
        Err(self.refuse("memory_clear"))
    }

    fn maintain(&mut self) -> OpResult<()> {
        Err(self.refuse("maintain"))
    }

    fn written_by_kind(&self) -> Vec<(String, u64)> {
        self.inner.written_by_kind()
    }

    fn partition(&self) -> Option<crate::replay::PartitionUse> {
        self.inner.partition()
    }

    fn cleaning(&self) -> Option<crate::replay::CleaningCounts> {
        self.inner.cleaning()
    }
}

/// The fill workload of `trace` through clawmem on a fresh flash of
/// `model` (the campaign's `Store<_, N>`), as an op list, with
/// the fill report.
fn fill_ops<F: SimBacked, const N: usize>(
    trace: &Trace,
    model: &Model,
    idle: bool,
) -> Result<(Vec<Op>, Vec<Outcome>, crate::fill::FillRun), ReplayError> {
    let mut driver = ClawmemDriver::<F, N>::format(SimFlash::new(model.clone()))?;
    let mut rec = Recorder {
        inner: &mut driver,
        idle,
        ops: Vec::new(),
        outcomes: Vec::new(),
        targets: Vec::new(),
        unexpressible: None,
    };
    let run = crate::fill::fill(&mut rec, trace, &ReplayOptions::default(), &mut |_, _| {});
    if let Some(e) = rec.unexpressible {
        return Err(ReplayError(format!("--fill: {e}")));
    }
    Ok((rec.ops, rec.outcomes, run))
}

// ---- the campaign ---------------------------------------------------------

fn mix(seed: u64, cut: u64, tear: TearKind, phase: u64) -> u64 {
    let mut x =
        seed ^ cut.wrapping_mul(0x9E37_79B9_7F4A_7C15) ^ (tear.index() << 56) ^ (phase << 60);
    x ^= x >> 31;
    x = x.wrapping_mul(0xBF58_476D_1CE4_E5B9);
    x ^ (x >> 29)
}

struct Tally {
    remounts: u64,
    progress_full: u64,
    second_cuts: u64,
    violations: u64,
    capacity_checks: u64,
    capacity_violations: u64,
    first: Option<String>,
    messages: Vec<String>,
}

impl Tally {
    /// A tally whose findings are thrown away.
    fn quiet() -> Tally {
        Tally {
            remounts: 0,
            progress_full: 0,
            second_cuts: 0,
            violations: 0,
            capacity_checks: 0,
            capacity_violations: 0,
            first: None,
            messages: Vec::new(),
        }
    }

    fn capacity_violation(&mut self, replay: &str, what: String) {
        self.capacity_violations += 1;
        self.violation(replay, format!("capacity: {what}"));
    }

    fn violation(&mut self, replay: &str, what: String) {
        self.violations += 1;
        if self.first.is_none() {
            self.first = Some(replay.to_string());
        }
        if self.messages.len() < 20 {
            self.messages.push(format!("{replay}: {what}"));
        }
    }
}

struct Campaign {
    model: Model,
    config: Config,
    steps: Vec<Step>,
    /// Cut-point index range of every step of the clean run.
    calls: Vec<(u64, u64)>,
    /// `states[0]`: after the format; `states[i + 1]`: after step `i`.
    states: Vec<Rc<State>>,
    /// The clean run's flash at each state.
    flashes: Vec<SimFlash>,
    /// How each step ended in the clean run.
    outcomes: Vec<Outcome>,
    /// The driver's clock before each step of the clean run.
    clocks: Vec<u32>,
    /// The memory targets before each step of the clean run.
    targets: Vec<Rc<Vec<Option<ItemHandle>>>>,
    /// Run the capacity check after each first cut (`--fill`).
    capacity: bool,
    replay_prefix: String,
    /// The image every run starts from (`--image`); a blank partition,
    /// formatted, if `None`.
    image: Option<Rc<Vec<u8>>>,
}

/// The driver a run starts with: `image` mounted as a fresh boot would
/// (with `config`, the clean run's, or the default one fitted to `model`
/// when there is none yet), or a blank flash of `model` formatted.
fn start_driver<F: SimBacked, const N: usize>(
    model: &Model,
    image: Option<&[u8]>,
    config: Option<Config>,
) -> Result<ClawmemDriver<F, N>, ReplayError> {
    match image {
        None => ClawmemDriver::<F, N>::format(SimFlash::new(model.clone())),
        Some(bytes) => {
            let config = match config {
                Some(c) => c,
                None => fit_config_for::<F, N>(model)?.0,
            };
            ClawmemDriver::<F, N>::mount(SimFlash::from_image(model, bytes)?, config)
                .map_err(|e| ReplayError(format!("--image: {}", e.0)))
        }
    }
}

/// The format versions of the sound sector headers of `flash`, as
/// `inspect` reads them (sorted, each once).
fn header_versions(flash: &SimFlash, preset: Preset) -> Result<Vec<u16>, ReplayError> {
    crate::inspect::inspect_bytes("the campaign's flash", &flash.image(), preset)
        .map(|r| r.format_versions)
        .map_err(|e| ReplayError(format!("inspect: {e}")))
}

/// Accepted writes of the clean run after the cut that the capacity check
/// replays on the recovered store.
const CAPACITY_WRITES: usize = 4;

/// A fresh store on `flash` after power came back.
fn mount_shared<F: SimBacked, const N: usize>(
    flash: &Rc<RefCell<F>>,
    config: Config,
) -> Result<Store<Shared<F>, N>, String> {
    Store::<_, N>::mount(Shared(flash.clone()), config, MountMode::ExistingOnly)
        .map_err(|e| format!("mount failed: {e:?}"))
}

fn progress_write<G: NorFlash, const N: usize>(store: &mut Store<G, N>) -> Result<(), String>
where
    G::Error: fmt::Debug,
{
    store
        .append(
            AFTER_SESSION,
            &[Record {
                kind: RecordType::User,
                format: BackendFormat::Unknown,
                body: AFTER_BODY,
            }],
            false,
        )
        .map(|_| ())
        .map_err(|e| format!("{e:?}"))
}

impl Campaign {
    /// The step whose calls hold cut point `cut`.
    fn step_of(&self, cut: u64) -> Option<usize> {
        let k = self.calls.partition_point(|&(_, b)| b <= cut);
        (k < self.calls.len() && self.calls[k].0 <= cut).then_some(k)
    }

    fn driver<F: SimBacked, const N: usize>(&self) -> Result<ClawmemDriver<F, N>, ReplayError> {
        start_driver::<F, N>(
            &self.model,
            self.image.as_deref().map(Vec::as_slice),
            Some(self.config),
        )
    }

    /// Checks a flash after power came back, the step in flight being `k`
    /// (state before: `states[k]`, after: `states[k + 1]`). With `tolerate_after`,
    /// the progress session may hold one extra progress record or not.
    /// Returns the step the recovered state resumes the run at (`k` if it
    /// is the state before and the step a write, else `k + 1`), or `None`
    /// if it is neither state.
    fn check_recovery<F: SimBacked, const N: usize>(
        &self,
        flash: SimFlash,
        k: usize,
        tolerate_after: bool,
        replay: &str,
        t: &mut Tally,
    ) -> Option<usize> {
        let after_k = (k + 1).min(self.flashes.len() - 1);
        // A cut that left the flash as the clean run had it before or
        // after the step (it fell on an erase of a blank sector, or after
        // the step's last program landed whole) cost nothing: the
        // recovered store is that store, and is held to it alone.
        let exact = [after_k, k]
            .into_iter()
            .find(|&i| flash.same_contents(&self.flashes[i]));
        let flash = match F::wrap(flash) {
            Ok(f) => Rc::new(RefCell::new(f)),
            Err(e) => {
                t.violation(replay, e.0);
                return None;
            }
        };
        t.remounts += 1;
        let mut store = match mount_shared::<F, N>(&flash, self.config) {
            Ok(s) => s,
            Err(e) => {
                t.violation(replay, e);
                return None;
            }
        };
        let mut got = match read_state(&mut store) {
            Ok(s) => s,
            Err(e) => {
                t.violation(replay, format!("after the cut: {e}"));
                return None;
            }
        };
        if tolerate_after {
            if let Some(h) = got.sessions.remove(AFTER_SESSION) {
                if h.len() > 1 || h.iter().any(|r| r.body != AFTER_BODY) {
                    t.violation(
                        replay,
                        format!("progress session holds {} unexpected records", h.len()),
                    );
                }
            }
        }
        let (before, after) = (
            &*self.states[k],
            &*self.states[(k + 1).min(self.states.len() - 1)],
        );
        // Documented (`Store::memory_update`): the new item and the old
        // one's tombstone are two batches; a cut between them leaves both.
        let middle = matches!(self.steps[k].op(), Some(Op::MemoryUpdate { .. })).then(|| {
            let mut m = after.clone();
            for (id, item) in &before.memory {
                m.memory.entry(*id).or_insert_with(|| item.clone());
            }
            m
        });
        let resume = if got == *before && (got != *after || self.steps[k].is_write()) {
            Some(k)
        } else if got == *after || Some(&got) == middle.as_ref() {
            Some(k + 1)
        } else {
            t.violation(
                replay,
                format!(
                    "state after the cut in step {k} ({}) is neither before ({}) nor after ({})",
                    self.steps[k].name(),
                    got.diff(before),
                    got.diff(after)
                ),
            );
            None
        };
        if let Err(e) = store.check() {
            t.violation(replay, format!("check() after the cut: {e:?}"));
        }
        // A second mount gives the same answer.
        drop(store);
        t.remounts += 1;
        let mut store = match mount_shared::<F, N>(&flash, self.config) {
            Ok(s) => s,
            Err(e) => {
                t.violation(replay, format!("second {e}"));
                return resume;
            }
        };
        match read_state(&mut store) {
            Ok(mut again) => {
                if tolerate_after {
                    again.sessions.remove(AFTER_SESSION);
                }
                if again != got {
                    t.violation(
                        replay,
                        format!("the second mount differs: {}", again.diff(&got)),
                    );
                }
            }
            Err(e) => t.violation(replay, format!("second mount: {e}")),
        }
        // Progress: a write that fits succeeds and reads back. It fits if
        // it succeeds on the clean run's flash in the state the recovery
        // holds: before the op or after it (either, when the two are alike
        // or the recovery holds an update's middle state), or the one whose
        // flash the cut left exactly (`exact`).
        if let Err(e) = progress_write(&mut store) {
            let same = (got == *before, got == *after);
            let candidates: &[usize] = match (exact, same) {
                (Some(i), _) => &[i],
                (None, (true, false)) => &[k],
                (None, (false, true)) => &[after_k],
                _ => &[k, after_k],
            };
            let fits = candidates.iter().any(|&i| {
                F::wrap(self.flashes[i].clone()).is_ok_and(|f| {
                    let f = Rc::new(RefCell::new(f));
                    mount_shared::<F, N>(&f, self.config).is_ok_and(|mut s| {
                        // As above: the dump stores default profiles first.
                        let _ = read_state(&mut s);
                        progress_write(&mut s).is_ok()
                    })
                })
            });
            if fits {
                t.violation(replay, format!("write after recovery failed: {e}"));
            } else {
                t.progress_full += 1;
            }
            return resume;
        }
        match history_of(&mut store, AFTER_SESSION) {
            Ok((h, _)) if h.last().map(|r| r.body.as_slice()) == Some(AFTER_BODY) => {}
            Ok(_) => t.violation(replay, "the write after recovery does not read back".into()),
            Err(e) => t.violation(replay, e),
        }
        resume
    }

    /// The capacity check (`--fill`): on `flash` as the cut left it, mounted
    /// afresh, the run goes on from step `from` for the next
    /// [`CAPACITY_WRITES`] writes the clean run accepted; a step the clean
    /// run took that now answers `Full` is a capacity violation, any other
    /// refusal of it a violation. The check stops where the two runs part
    /// (a step the clean run refused that now succeeds).
    fn capacity_check<F: SimBacked, const N: usize>(
        &self,
        flash: SimFlash,
        from: usize,
        replay: &str,
        t: &mut Tally,
    ) {
        if from >= self.steps.len() {
            return;
        }
        let mut driver = match ClawmemDriver::<F, N>::mount(flash, self.config) {
            Ok(d) => d,
            Err(e) => return t.violation(replay, format!("capacity check: {}", e.0)),
        };
        t.capacity_checks += 1;
        if let Some((j, e)) = self.capacity_window(&mut driver, from, t, replay) {
            // Is it the cut, or would a fresh mount of the uncut flash at
            // that point refuse it too?
            let remounted =
                match ClawmemDriver::<F, N>::mount(self.flashes[from].clone(), self.config) {
                    Ok(mut d) => {
                        match self.capacity_window(&mut d, from, &mut Tally::quiet(), "") {
                            Some((i, _)) if i == j => "refuses it too",
                            Some(_) => "refuses another of these writes",
                            None => "takes it",
                        }
                    }
                    Err(_) => "does not mount",
                };
            t.capacity_violation(
                replay,
                format!(
                    "step {j} ({}) answered {e} after recovery; the uncut store took it (a fresh mount of the uncut flash at step {from} {remounted})",
                    self.steps[j].name()
                ),
            );
        }
    }

    /// Runs the steps from `from` on `driver` for the next
    /// [`CAPACITY_WRITES`] accepted writes of the clean run; returns the
    /// first the clean run took that `driver` answered `Full`, with the
    /// error. Any other refusal of such a step is a violation.
    fn capacity_window<F: SimBacked, const N: usize>(
        &self,
        driver: &mut ClawmemDriver<F, N>,
        from: usize,
        t: &mut Tally,
        replay: &str,
    ) -> Option<(usize, OpError)> {
        driver.set_clock(self.clocks[from]);
        let mut r = Reference {
            targets: (*self.targets[from]).clone(),
            ..Reference::default()
        };
        let mut writes = 0;
        for (j, step) in self.steps.iter().enumerate().skip(from) {
            if writes >= CAPACITY_WRITES {
                break;
            }
            let result = run_step(driver, step, &mut r);
            let (want, got) = (self.outcomes[j], outcome(&result));
            match (want, result) {
                (Outcome::Done, Err(e @ OpError::Full(_))) => return Some((j, e)),
                (Outcome::Done, Err(e)) => {
                    t.violation(
                        replay,
                        format!(
                            "step {j} ({}) failed after recovery ({e}); the uncut store took it",
                            step.name()
                        ),
                    );
                    return None;
                }
                _ if want != got => return None,
                _ => {}
            }
            if want == Outcome::Done && step.is_write() {
                writes += 1;
            }
        }
        None
    }

    /// One run: cut `cut` torn by `kind`, then the checks (and the second cut).
    fn run<F: SimBacked, const N: usize>(
        &self,
        cut: u64,
        kind: TearKind,
        opts: &TortureOptions,
        t: &mut Tally,
    ) {
        let mut replay = format!(
            "{}--seed {} --cut {cut} --tear {kind}",
            self.replay_prefix, opts.seed
        );
        if opts.double {
            replay += " --double";
        }
        let Some(k) = self.step_of(cut) else {
            return t.violation(&replay, format!("cut {cut} is past the workload"));
        };
        let driver = match self.driver::<F, N>() {
            Ok(d) => d,
            Err(e) => return t.violation(&replay, e.0),
        };
        let seed = mix(opts.seed, cut, kind, 1);
        let power_cut = PowerCut {
            seed,
            at: CutPoint::Op(cut),
            tear: kind.tear(seed),
        };
        self.run_with::<F, N>(driver, k, cut, kind, power_cut, replay, opts, t);
    }

    /// Every tear of one call ([`TearKind::Words`]); returns the runs made.
    fn run_words<F: SimBacked, const N: usize>(
        &self,
        cut: u64,
        opts: &TortureOptions,
        t: &mut Tally,
    ) -> u64 {
        let Some(k) = self.step_of(cut) else {
            t.violation(
                &format!("--cut {cut} --tear words"),
                format!("cut {cut} is past the workload"),
            );
            return 0;
        };
        let run = |tear: Tear, seed: u64, t: &mut Tally| -> Option<(u64, u64)> {
            let driver = self.driver::<F, N>().ok()?;
            let replay = format!(
                "{}--seed {} --cut {cut} --tear words ({tear}, seed {seed})",
                self.replay_prefix, opts.seed
            );
            let power_cut = PowerCut {
                seed,
                at: CutPoint::Op(cut),
                tear,
            };
            Some(self.run_with::<F, N>(driver, k, cut, TearKind::Words, power_cut, replay, opts, t))
        };
        // The call's length: what a whole call lands beyond an empty one.
        let Some((programmed_none, erased_none)) = run(Tear::Prefix(0), 0, t) else {
            return 0;
        };
        let Some((programmed_all, erased_all)) = run(Tear::Prefix(1 << 30), 0, t) else {
            return 1;
        };
        let mut runs = 2;
        let word = self.model.geometry.write_size;
        let prefixes: Vec<usize> = if erased_all > erased_none {
            let len = (erased_all - erased_none) as usize;
            vec![len / 2]
        } else {
            let len = (programmed_all - programmed_none) as usize;
            (1..len.div_ceil(word)).map(|w| w * word).collect()
        };
        for p in prefixes {
            run(Tear::Prefix(p), 0, t);
            runs += 1;
        }
        for i in 0..8 {
            run(Tear::Bits, mix(opts.seed, cut, TearKind::Words, 10 + i), t);
            runs += 1;
        }
        runs
    }

    /// One run on a fresh `driver`: the cut armed, the ops up to `k`
    /// replayed, then the checks (and the second cut). Returns the bytes
    /// programmed and erased by the time power failed.
    #[allow(clippy::too_many_arguments)]
    fn run_with<F: SimBacked, const N: usize>(
        &self,
        mut driver: ClawmemDriver<F, N>,
        k: usize,
        cut: u64,
        kind: TearKind,
        power_cut: PowerCut,
        replay: String,
        opts: &TortureOptions,
        t: &mut Tally,
    ) -> (u64, u64) {
        if let Some(s) = driver.store_mut() {
            s.flash_mut().sim_mut().arm_power_cut(power_cut);
        }
        let mut scratch = Reference::default();
        for step in &self.steps[..k] {
            let _ = run_step(&mut driver, step, &mut scratch);
        }
        let in_flight = run_step(&mut driver, &self.steps[k], &mut scratch);
        let mut flash = driver.into_flash();
        let landed = (flash.stats().programmed_bytes, flash.stats().erased_bytes);
        if flash.is_powered() && !matches!(self.steps[k].op(), Some(Op::Remount {})) {
            t.violation(
                &replay,
                format!(
                    "step {k} ({}) did not meet the cut (answered {in_flight:?})",
                    self.steps[k].name()
                ),
            );
        }
        if in_flight.is_ok() && !flash.is_powered() {
            // Acknowledged although power failed inside it: must be durable.
            // The after-state check below covers it; nothing more here.
        }
        if flash.stats().write_budget_violations > 0 {
            t.violation(&replay, "the engine broke a word's write budget".into());
        }
        flash.restore_power();
        if opts.sabotage {
            sabotage(&mut flash, &self.states[k]);
        }
        let recovery = opts.double.then(|| flash.clone());
        // The capacity check mounts the flash as the cut left it, before
        // the checks below write to it (default profiles, the progress
        // write).
        let raw = self.capacity.then(|| flash.clone());
        let resume = self.check_recovery::<F, N>(flash, k, false, &replay, t);
        if let (Some(raw), Some(from)) = (raw, resume) {
            self.capacity_check::<F, N>(raw, from, &replay, t);
        }
        if let Some(flash) = recovery {
            self.second_cut::<F, N>(flash, cut, kind, k, opts, &replay, t);
        }
        landed
    }

    /// `--double`: a second cut at every program and erase call of the
    /// recovery (the mount, any repair it makes, and the next write with
    /// the garbage collection it owes), each on a copy of the flash as the
    /// first cut left it, then the checks again.
    #[allow(clippy::too_many_arguments)]
    fn second_cut<F: SimBacked, const N: usize>(
        &self,
        flash: SimFlash,
        cut: u64,
        kind: TearKind,
        k: usize,
        opts: &TortureOptions,
        replay: &str,
        t: &mut Tally,
    ) {
        // Count the recovery's calls on a copy.
        let Ok(copy) = F::wrap(flash.clone()) else {
            return;
        };
        let copy = Rc::new(RefCell::new(copy));
        copy.borrow_mut().sim_mut().arm_power_cut(PowerCut {
            seed: 0,
            at: CutPoint::Op(u64::MAX),
            tear: Tear::Prefix(0),
        });
        if let Ok(mut s) = mount_shared::<F, N>(&copy, self.config) {
            let _ = progress_write(&mut s);
        }
        let calls = copy.borrow().sim().ops_since_arm();
        for second in 0..calls {
            let seed = mix(opts.seed, cut, kind, 2) ^ second.wrapping_mul(0xA24B_AED4_963E_E407);
            let Ok(f) = F::wrap(flash.clone()) else {
                return;
            };
            let f = Rc::new(RefCell::new(f));
            f.borrow_mut().sim_mut().arm_power_cut(PowerCut {
                seed,
                at: CutPoint::Op(second),
                tear: kind.tear(seed),
            });
            t.second_cuts += 1;
            t.remounts += 1;
            if let Ok(mut s) = mount_shared::<F, N>(&f, self.config) {
                let _ = progress_write(&mut s);
            }
            if f.borrow().sim().is_powered() {
                t.violation(
                    replay,
                    format!("recovery call {second} of {calls} did not meet the second cut"),
                );
            }
            f.borrow_mut().sim_mut().restore_power();
            let flash = match Rc::try_unwrap(f) {
                Ok(cell) => cell.into_inner().into_sim(),
                Err(rc) => rc.borrow().sim().clone(),
            };
            let replay = format!("{replay} (second cut at recovery call {second} of {calls})");
            self.check_recovery::<F, N>(flash, k, true, &replay, t);
        }
    }
}

/// Flips one bit in every copy on flash of the body of an acknowledged
/// record of `state` (the longest one), the sabotage test hook.
fn sabotage(flash: &mut SimFlash, state: &State) {
    let Some(body) = state
        .sessions
        .values()
        .flatten()
        .map(|r| &r.body)
        .filter(|b| b.len() >= 16)
        .max_by_key(|b| b.len())
    else {
        return;
    };
    let needle = &body[..16.min(body.len())];
    let image = flash.image();
    let hits: Vec<usize> = image
        .windows(needle.len())
        .enumerate()
        .filter(|(_, w)| *w == needle)
        .map(|(i, _)| i)
        .collect();
    for at in hits {
        let _ = flash.flip_bit(at + 8, 3);
    }
}

/// Runs a campaign over `trace` on flash type `F`. `progress` gets (runs
/// done, runs in all).
pub fn torture_on<F: SimBacked>(
    trace: &Trace,
    opts: &TortureOptions,
    progress: &mut dyn FnMut(u64, u64),
) -> Result<TortureReport, ReplayError> {
    match opts.sessions {
        None | Some(MAX_SESSIONS) => torture_n::<F, MAX_SESSIONS>(trace, opts, progress),
        Some(32) => torture_n::<F, 32>(trace, opts, progress),
        Some(512) => torture_n::<F, 512>(trace, opts, progress),
        Some(1024) => torture_n::<F, 1024>(trace, opts, progress),
        Some(2048) => torture_n::<F, 2048>(trace, opts, progress),
        Some(4096) => torture_n::<F, 4096>(trace, opts, progress),
        Some(n) => Err(ReplayError(format!(
            "a session table of {n} is not built in; choose {MAX_SESSIONS} or one of {SESSION_TABLES:?}"
        ))),
    }
}

/// [`torture_on`] with a `Store<_, N>`.
fn torture_n<F: SimBacked, const N: usize>(
    trace: &Trace,
    opts: &TortureOptions,
    progress: &mut dyn FnMut(u64, u64),
) -> Result<TortureReport, ReplayError> {
    let start = Instant::now();
    let p = opts.preset;
    let image = match &opts.image {
        None => None,
        Some(_) if opts.fill => {
            return Err(ReplayError(
                "--image and --fill: the fill workload starts from a blank partition".into(),
            ))
        }
        Some(path) => {
            let bytes = std::fs::read(path)
                .map_err(|e| ReplayError(format!("--image {}: {e}", path.display())))?;
            if let Some(size) = opts.size_bytes.filter(|&s| s != bytes.len()) {
                return Err(ReplayError(format!(
                    "--image {} holds {} B, but --size asks for {size} B",
                    path.display(),
                    bytes.len()
                )));
            }
            Some(Rc::new(bytes))
        }
    };
    let size = match &image {
        Some(bytes) => bytes.len(),
        None => opts.size_bytes.unwrap_or_else(|| p.default_capacity()),
    };
    let model = p.model(size)?;
    // The operations: the trace's, or the fill workload's list.
    let (mut ops, fill_outcomes, fill_run): (Vec<Op>, Vec<Outcome>, _) = if opts.fill {
        let (ops, outcomes, run) = fill_ops::<F, N>(trace, &model, opts.idle)?;
        (ops, outcomes, Some(run))
    } else {
        (
            trace.ops.iter().map(|o| o.op.clone()).collect(),
            Vec::new(),
            None,
        )
    };
    if opts.fill && ops.is_empty() {
        return Err(ReplayError(format!(
            "--fill: the trace {} made no operation (it has no append)",
            trace.file
        )));
    }
    let n = opts.ops.unwrap_or(ops.len()).min(ops.len());
    ops.truncate(n);
    let steps = steps_of(ops, opts.idle);
    let mut tally = Tally::quiet();
    let mut replay_prefix = String::new();
    if opts.fill {
        replay_prefix += "--fill ";
    }
    if opts.idle {
        replay_prefix += "--idle ";
    }
    if let Some(n) = opts.ops {
        replay_prefix += &format!("--ops {n} ");
    }
    if let Some(path) = &opts.image {
        replay_prefix += &format!("--image {} ", path.display());
    }

    // The clean run: cut points per step, and what a fresh mount shows after
    // every step, checked against the reference model.
    let mut driver = start_driver::<F, N>(&model, image.as_deref().map(Vec::as_slice), None)?;
    let config = *driver.config();
    let format_versions_before = header_versions(driver.flash(), p)?;
    let arm = |d: &mut ClawmemDriver<F, N>| {
        if let Some(s) = d.store_mut() {
            s.flash_mut().sim_mut().arm_power_cut(PowerCut {
                seed: 0,
                at: CutPoint::Op(u64::MAX),
                tear: Tear::Prefix(0),
            });
        }
    };
    arm(&mut driver);
    let snapshot_state = |flash: &SimFlash| -> Result<State, String> {
        let f = F::wrap(flash.clone()).map_err(|e| e.0)?;
        let mut store = Store::<F, N>::mount(f, config, MountMode::ExistingOnly)
            .map_err(|e| format!("mount failed: {e:?}"))?;
        read_state(&mut store)
    };
    let clean = format!("{replay_prefix}--seed {} (clean run)", opts.seed);
    let mut calls = Vec::with_capacity(steps.len());
    let mut states: Vec<Rc<State>> = Vec::with_capacity(steps.len() + 1);
    let mut flashes = vec![driver.flash().clone()];
    let mut outcomes = Vec::with_capacity(steps.len());
    let mut clocks = Vec::with_capacity(steps.len() + 1);
    let mut targets: Vec<Rc<Vec<Option<ItemHandle>>>> = vec![Rc::new(Vec::new())];
    let mut clean_op_errors = 0;
    let (mut maintain_calls, mut maintain_cut_points) = (0u64, 0u64);
    states.push(Rc::new(
        snapshot_state(driver.flash()).map_err(ReplayError)?,
    ));
    // What the operations start from: nothing, or what the image holds.
    let mut reference =
        Reference::from_state(&states[0]).map_err(|e| ReplayError(format!("--image: {e}")))?;
    for (i, step) in steps.iter().enumerate() {
        clocks.push(driver.clock());
        let a = driver.flash().ops_since_arm();
        let result = run_step(&mut driver, step, &mut reference);
        if result.is_err() {
            clean_op_errors += 1;
        }
        outcomes.push(outcome(&result));
        let b = driver.flash().ops_since_arm();
        calls.push((a, b));
        if matches!(step, Step::Maintain) {
            maintain_calls += 1;
            maintain_cut_points += b - a;
        }
        let last = targets.last().cloned().unwrap_or_default();
        targets.push(if *last == reference.targets {
            last
        } else {
            Rc::new(reference.targets.clone())
        });
        flashes.push(driver.flash().clone());
        let prev = states.last().cloned().unwrap_or_default();
        match snapshot_state(driver.flash()) {
            Ok(s) => {
                if let Some(d) = reference.disagreement(&s) {
                    tally.violation(&clean, format!("after step {i} ({}): {d}", step.name()));
                }
                states.push(if s == *prev { prev } else { Rc::new(s) });
            }
            Err(e) => {
                tally.violation(&clean, format!("after step {i} ({}): {e}", step.name()));
                states.push(prev);
            }
        }
    }
    clocks.push(driver.clock());
    let format_versions_after = header_versions(driver.flash(), p)?;
    let total = calls.last().map_or(0, |c| c.1);
    // The clean run makes the fill workload's calls: each op ends as it
    // did there.
    let op_outcomes = steps
        .iter()
        .zip(&outcomes)
        .filter(|(s, _)| s.op().is_some());
    for (i, ((_, got), want)) in op_outcomes.zip(&fill_outcomes).enumerate() {
        if got != want {
            tally.violation(
                &clean,
                format!("op {i} ended {got:?} here but {want:?} in the fill workload's run"),
            );
            break;
        }
    }

    // The cut points.
    let mut chosen: Vec<u64> = match opts.cuts {
        Cuts::All => (0..total).collect(),
        Cuts::Only(k) => vec![k],
        Cuts::Sample(m) if m >= total => (0..total).collect(),
        Cuts::Sample(m) => {
            let mut rng = ChaCha8Rng::seed_from_u64(opts.seed);
            let mut v: Vec<u64> = rand::seq::index::sample(&mut rng, total as usize, m as usize)
                .into_iter()
                .map(|i| i as u64)
                .collect();
            v.sort_unstable();
            v
        }
    };
    if let Some((i, every)) = opts.shard {
        chosen = chosen
            .into_iter()
            .skip(i as usize)
            .step_by(every.max(1) as usize)
            .collect();
    }
    let fill = fill_run.map(|run| FillSummary {
        ops: n,
        trace_ops: run.report.ops,
        reached_full: outcomes.contains(&Outcome::Full),
        first_full: run.fill.first_full.clone(),
        first_full_op: steps
            .iter()
            .zip(&outcomes)
            .filter(|(s, _)| s.op().is_some())
            .position(|(_, o)| *o == Outcome::Full),
        full_refusals: outcomes.iter().filter(|o| **o == Outcome::Full).count() as u64,
        oldest_session_deletes: run.fill.oldest_session_deletes,
    });
    let campaign = Campaign {
        model: model.clone(),
        config,
        steps,
        calls,
        states,
        flashes,
        outcomes,
        clocks,
        targets,
        capacity: opts.fill,
        replay_prefix,
        image,
    };
    let maintain_cuts = chosen
        .iter()
        .filter(|&&c| {
            campaign
                .step_of(c)
                .is_some_and(|k| matches!(campaign.steps[k], Step::Maintain))
        })
        .count() as u64;
    let estimate = chosen.len() as u64 * opts.tears.len() as u64;
    let mut runs = 0;
    let mut done = 0;
    for &cut in &chosen {
        for &kind in &opts.tears {
            runs += if kind == TearKind::Words {
                campaign.run_words::<F, N>(cut, opts, &mut tally)
            } else {
                campaign.run::<F, N>(cut, kind, opts, &mut tally);
                1
            };
            done += 1;
            progress(done, estimate);
        }
    }
    Ok(TortureReport {
        trace: trace.file.clone(),
        preset: model.name.to_string(),
        ops: n,
        total_cut_points: total,
        cut_points: chosen.len() as u64,
        tear_patterns: opts.tears.iter().map(|t| t.name().to_string()).collect(),
        double: opts.double,
        second_cuts: tally.second_cuts,
        runs,
        remounts: tally.remounts,
        progress_full: tally.progress_full,
        violations: tally.violations,
        first_violation: tally.first,
        violation_messages: tally.messages,
        clean_op_errors,
        session_table: N,
        idle: opts.idle,
        maintain_calls,
        maintain_cut_points,
        maintain_cuts,
        fill,
        capacity_checks: tally.capacity_checks,
        capacity_violations: tally.capacity_violations,
        image: opts.image.as_ref().map(|p| p.display().to_string()),
        format_versions_before,
        format_versions_after,
        seconds: start.elapsed().as_secs_f64(),
    })
}

/// The op list `torture --fill` replays for `opts` (preset, size, `idle`,
/// `ops`): the fill workload's calls on a clean run, as trace operations.
/// Every run of the campaign replays this list.
pub fn fill_op_list(trace: &Trace, opts: &TortureOptions) -> Result<Vec<Op>, ReplayError> {
    let p = opts.preset;
    let model = p.model(opts.size_bytes.unwrap_or_else(|| p.default_capacity()))?;
    fn list<F: SimBacked>(
        trace: &Trace,
        model: &Model,
        opts: &TortureOptions,
    ) -> Result<Vec<Op>, ReplayError> {
        let idle = opts.idle;
        Ok(match opts.sessions {
            None | Some(MAX_SESSIONS) => fill_ops::<F, MAX_SESSIONS>(trace, model, idle)?.0,
            Some(32) => fill_ops::<F, 32>(trace, model, idle)?.0,
            Some(512) => fill_ops::<F, 512>(trace, model, idle)?.0,
            Some(1024) => fill_ops::<F, 1024>(trace, model, idle)?.0,
            Some(2048) => fill_ops::<F, 2048>(trace, model, idle)?.0,
            Some(4096) => fill_ops::<F, 4096>(trace, model, idle)?.0,
            Some(n) => {
                return Err(ReplayError(format!(
                    "a session table of {n} is not built in; choose {MAX_SESSIONS} or one of {SESSION_TABLES:?}"
                )))
            }
        })
    }
    let mut ops = match p {
        Preset::Esp32 => list::<Esp32Flash>(trace, &model, opts)?,
        Preset::Nrf52 => list::<Nrf52Flash>(trace, &model, opts)?,
        Preset::Stm32l4 => list::<Stm32l4Flash>(trace, &model, opts)?,
        Preset::Stm32h7 => list::<Stm32h7Flash>(trace, &model, opts)?,
        Preset::Esp32Encrypted => list::<Esp32EncryptedFlash>(trace, &model, opts)?,
        Preset::Generic => list::<GenericFlash>(trace, &model, opts)?,
    };
    if let Some(n) = opts.ops {
        ops.truncate(n);
    }
    Ok(ops)
}

/// Runs a campaign, choosing the flash type from the preset.
pub fn torture(
    trace: &Trace,
    opts: &TortureOptions,
    progress: &mut dyn FnMut(u64, u64),
) -> Result<TortureReport, ReplayError> {
    match opts.preset {
        Preset::Esp32 => torture_on::<Esp32Flash>(trace, opts, progress),
        Preset::Nrf52 => torture_on::<Nrf52Flash>(trace, opts, progress),
        Preset::Stm32l4 => torture_on::<Stm32l4Flash>(trace, opts, progress),
        Preset::Stm32h7 => torture_on::<Stm32h7Flash>(trace, opts, progress),
        Preset::Esp32Encrypted => torture_on::<Esp32EncryptedFlash>(trace, opts, progress),
        Preset::Generic => torture_on::<GenericFlash>(trace, opts, progress),
    }
}
