//! Trace replay: runs a [`Trace`] through a storage engine on a simulated
//! flash, checks what it reads back, and measures what the flash did.
//!
//! The replayer ([`replay`]) is engine-independent: it talks to an engine
//! through a [`Driver`], one method per trace operation, and keeps the
//! bookkeeping that `traces/FORMAT.md` asks of every replayer:
//!
//! - a model of every live session: the records appended since its last
//!   delete, minus what ESP-Claw's turn-aware compaction removed (applied with
//!   [`clawmem::turns`] whenever the engine reports `compacted`); every
//!   `history` is compared with it;
//! - memory targets: store number K names the item the engine returned for
//!   it (or the existing item a duplicate names), follows its lineage through
//!   updates, and is skipped once the engine says the item was evicted;
//! - blocked sessions: an append refused as blocked is counted, the session
//!   is deleted as the warning tells the user to, and the replay goes on
//!   (the refused batch is dropped);
//! - rounds (`repeat`): round 0 replays the trace as it is; round k >= 1
//!   suffixes every session id with `#k` and numbers memory targets afresh.
//!   Round k deletes each session of round k-1 just before it first touches
//!   the same base id, so that by the end of round k no session of round k-1
//!   is left. (Deleting them all only at the end of round k would keep two
//!   rounds live at once: 2 x 90 sessions and 2 x 256 KB for
//!   `bfcl-multi-turn.jsonl`, more than a 128-session table and a 1 MiB
//!   partition hold next to the 150 KiB limit's reserves.) A long run thus
//!   reaches a steady state of one round's data.
//!
//! [`ClawmemDriver`] is the driver of clawmem's public API, generic over the
//! preset flash types; [`replay_clawmem`] picks the type from the preset at run
//! time. Operations the engine does not offer yet answer
//! [`OpError::Unsupported`] and are counted under `unsupported_ops`, never as
//! successes.
//!
//! Everything runs in RAM (or on an image file); no power is cut here.

use std::collections::{HashMap, HashSet};
use std::fmt;
use std::path::PathBuf;

use clawmem::memory::{ItemId, ItemInput};
use clawmem::profile::ProfileDoc;
use clawmem::turns::{PlanBuilder, COMPACT_TOOL_TURNS};
use clawmem::{BackendFormat, Config, MountMode, Record, RecordType, Store};
use embedded_storage::nor_flash::NorFlash;
use serde::Serialize;

use crate::flash::{SimError, SimFlash};
use crate::latency::{idle_after, LatencyReport, Timed};
use crate::model::{Geometry, Model, ModelError, Preset};
use crate::nor::{
    Esp32EncryptedFlash, Esp32Flash, GenericFlash, Nor, Nrf52Flash, Stm32h7Flash, Stm32l4Flash,
};
use crate::trace::{Format, MemorySource, Op, ProfileName, RecordKind, Trace, TraceRecord};

// ---- the driver interface ------------------------------------------------

/// Why an engine did not carry out an operation.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum OpError {
    /// The engine does not offer this operation (yet). Counted under
    /// `unsupported_ops`; never a success, never an error.
    Unsupported,
    /// The session is blocked after compaction: the append was refused.
    /// Counted under `blocked`.
    Blocked,
    /// The memory item no longer exists: the engine evicted it for capacity.
    /// Counted under `skipped`.
    Evicted,
    /// The engine is out of space for this write (clawmem's
    /// `Error::Full`, a peer's no-space error). Counted under `errors` as
    /// any failure; the fill workload ([`crate::fill`]) acts on it.
    Full(String),
    /// Anything else; counted under `errors`, the first one kept whole.
    Failed(String),
}

impl fmt::Display for OpError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            OpError::Unsupported => f.write_str("not supported by the engine"),
            OpError::Blocked => f.write_str("session blocked"),
            OpError::Evicted => f.write_str("memory item evicted"),
            OpError::Full(e) | OpError::Failed(e) => f.write_str(e),
        }
    }
}

/// What a [`Driver`] call returns.
pub type OpResult<T> = Result<T, OpError>;

/// An engine's handle of a memory item (its id, whatever form it takes).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize)]
pub struct ItemHandle(pub u64);

/// What an append did besides storing the records.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct AppendOutcome {
    /// Turn-aware compaction ran and dropped records.
    pub compacted: bool,
    /// The session is now blocked: the next append will be refused.
    pub blocked: bool,
}

/// One record of a history, as the engine returned it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct HistoryRecord {
    /// Record type.
    pub kind: RecordKind,
    /// Backend format.
    pub format: Format,
    /// Body bytes.
    pub body: Vec<u8>,
}

/// A new memory item, as a `memory_store` gives it.
#[derive(Clone, Copy, Debug)]
pub struct MemoryItem<'a> {
    /// The text.
    pub content: &'a str,
    /// Tags.
    pub tags: &'a [String],
    /// Keywords.
    pub keywords: &'a [String],
    /// Who created it.
    pub source: MemorySource,
}

/// A `memory_update`'s changes; `None` keeps the old value.
#[derive(Clone, Copy, Debug)]
pub struct MemoryChange<'a> {
    /// New content.
    pub content: Option<&'a str>,
    /// New tags (replace the old ones).
    pub tags: Option<&'a [String]>,
    /// New keywords (replace the old ones).
    pub keywords: Option<&'a [String]>,
}

/// What a `memory_store` did.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct MemoryStored {
    /// The new item, or the existing item it duplicates.
    pub item: ItemHandle,
    /// Whether the engine found it a duplicate of an existing item.
    pub duplicate: bool,
}

/// Facts about an engine set up for a replay, for the report.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct EngineInfo {
    /// Name of the engine.
    pub engine: String,
    /// RAM the engine keeps besides the flash driver, in bytes.
    pub state_bytes: usize,
    /// Session size limit that triggers compaction, if the engine has one.
    pub session_limit_bytes: Option<u64>,
    /// Whether that limit was scaled down to fit the partition.
    pub session_limit_scaled: bool,
    /// Anything a reader of the figures should know.
    pub notes: Vec<String>,
}

/// A storage engine on a [`SimFlash`], seen by the replayer: one method per
/// trace operation (`traces/FORMAT.md`).
///
/// Session ids are the trace's, suffixed per round. A method that the
/// engine cannot carry out returns [`OpError::Unsupported`]; wiring it later
/// means replacing that line by the engine call and mapping its errors.
pub trait Driver {
    /// Name, session limit and state size, for the report.
    fn info(&self) -> EngineInfo;
    /// The flash under the engine, for its counters.
    fn flash(&self) -> &SimFlash;
    /// Bytes read from flash by each mount so far, the initial format or
    /// mount included.
    fn mount_read_bytes(&self) -> &[u64];

    /// Appends a batch to a session, creating it on first use.
    fn append(
        &mut self,
        session: &str,
        records: &[TraceRecord],
        turn_completed: bool,
    ) -> OpResult<AppendOutcome>;
    /// The whole history of a session, oldest first, without any
    /// backend filtering; empty for a session never written or deleted.
    fn history(&mut self, session: &str) -> OpResult<Vec<HistoryRecord>>;
    /// Deletes a session; deleting one that does not exist is not an error.
    fn session_delete(&mut self, session: &str) -> OpResult<()>;
    /// Stores a memory item.
    fn memory_store(&mut self, item: &MemoryItem<'_>) -> OpResult<MemoryStored>;
    /// Items carrying any of `labels`, at most `limit`.
    fn memory_recall(&mut self, labels: &[String], limit: u32) -> OpResult<Vec<ItemHandle>>;
    /// Updates an item; returns the handle of its newest version.
    fn memory_update(
        &mut self,
        item: ItemHandle,
        change: &MemoryChange<'_>,
    ) -> OpResult<ItemHandle>;
    /// Forgets an item.
    fn memory_forget(&mut self, item: ItemHandle) -> OpResult<()>;
    /// Every active item.
    fn memory_list(&mut self) -> OpResult<Vec<ItemHandle>>;
    /// Replaces a profile document.
    fn profile_write(&mut self, name: ProfileName, body: &str) -> OpResult<()>;
    /// Reads a profile document (`None` if it was never written).
    fn profile_read(&mut self, name: ProfileName) -> OpResult<Option<Vec<u8>>>;
    /// Clean power cycle: drops the engine's RAM state and mounts again.
    fn remount(&mut self) -> OpResult<()>;
    /// Forgets all long-term memory (between `--repeat` rounds).
    fn memory_clear(&mut self) -> OpResult<()> {
        Err(OpError::Unsupported)
    }
    /// Idle work between requests (`--idle`; when it is called:
    /// [`crate::latency::idle_after`]). The default does nothing: the
    /// peers have no idle work, everything they do happens inside the
    /// operations.
    fn maintain(&mut self) -> OpResult<()> {
        Ok(())
    }
    /// Bytes the engine wrote, by what they hold, if it can tell.
    fn written_by_kind(&self) -> Vec<(String, u64)> {
        Vec::new()
    }
    /// Dead bytes per sector that the mounts so far took back from the
    /// checkpoints they went from, summed over the mounts (clawmem with the
    /// feature `sector-table`; `None` for an engine that counts none).
    fn dead_carried_bytes(&self) -> Option<u64> {
        None
    }
    /// How the engine divides the partition now, if it can tell.
    fn partition(&self) -> Option<PartitionUse> {
        None
    }
    /// What collecting the tail cost so far, summed over the mounts
    /// (clawmem with the feature `sector-table`, `Store::cleaning`; `None`
    /// for an engine that does not tell).
    fn cleaning(&self) -> Option<CleaningCounts> {
        None
    }
}

/// What collecting the tail cost (clawmem's `Store::cleaning`, summed over
/// the mounts): the sectors released, the bytes live in them then, and
/// what the relocations copied from later sectors and indexed beside.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize)]
pub struct CleaningCounts {
    /// Tail sectors a collection released.
    pub tail_releases: u64,
    /// Their payload space.
    pub tail_payload_bytes: u64,
    /// Bytes live in them when released (session bodies and objects).
    pub tail_live_bytes: u64,
    /// Session bodies copied from later sectors with them.
    pub ahead_bytes: u64,
    /// The relocations' indexes.
    pub index_bytes: u64,
    /// Moves records written instead of a base (20 B each beside the
    /// bodies they moved, which count in `tail_live_bytes`).
    pub moves_records: u64,
}

impl CleaningCounts {
    /// The counts from `earlier` to `self`.
    pub fn since(&self, earlier: &CleaningCounts) -> CleaningCounts {
        CleaningCounts {
            tail_releases: self.tail_releases - earlier.tail_releases,
            tail_payload_bytes: self.tail_payload_bytes - earlier.tail_payload_bytes,
            tail_live_bytes: self.tail_live_bytes - earlier.tail_live_bytes,
            ahead_bytes: self.ahead_bytes - earlier.ahead_bytes,
            index_bytes: self.index_bytes - earlier.index_bytes,
            moves_records: self.moves_records - earlier.moves_records,
        }
    }

    #[cfg(feature = "sector-table")]
    fn add(&mut self, c: &clawmem::Cleaning) {
        self.tail_releases += c.tail_releases;
        self.tail_payload_bytes += c.tail_payload_bytes;
        self.tail_live_bytes += c.tail_live_bytes;
        self.ahead_bytes += c.ahead_bytes;
        self.index_bytes += c.index_bytes;
        self.moves_records += c.moves_records;
    }
}

/// How an engine divides its partition at one moment (clawmem's
/// `Store::space`): the sectors in use, and the free sectors that session
/// appends must leave.
#[derive(Clone, Copy, Debug, Default, PartialEq, Serialize)]
pub struct PartitionUse {
    /// Sectors in the partition.
    pub sectors: u32,
    /// Sector size.
    pub sector_bytes: u32,
    /// Sectors from the tail to the head: everything written and not yet
    /// collected, live or not.
    pub used_sectors: u32,
    /// Free sectors that session appends leave: for collection,
    /// maintenance, and the room kept for memory and profiles.
    pub reserve_sectors: u32,
    /// The room kept for memory and profiles that the reserve includes, as
    /// configured (`Config::knowledge_reserve`; what profiles and chat maps
    /// hold comes off it).
    pub knowledge_reserve_bytes: u32,
    /// Dead bytes the store counted in the sectors in use: what its last
    /// mount took back from a checkpoint and what died since (feature
    /// `sector-table`, `Store::dead_space`; null without it): never more
    /// than there are.
    pub dead_bytes: Option<u64>,
    /// Sectors in use at least half of whose bytes it counted dead.
    pub half_dead_sectors: Option<u32>,
    /// Dead bytes it counted in the 8 oldest sectors in use, the next the
    /// tail's collection meets (`DeadSpace::tail_dead_bytes`).
    pub tail_dead_bytes: Option<u64>,
}

// ---- the report ------------------------------------------------------------

/// Everything a replay measured. `--json` prints it as one object with
/// these keys ([`Report::KEYS`]); [`fmt::Display`] prints a table.
///
/// Flash counters cover the whole run, the initial format included.
/// `user_bytes` is the payload the engine acknowledged: the bodies of
/// records appended, the contents of memory items stored or updated, and
/// the bodies of profile documents written, counting only operations that
/// succeeded (ids, tags, keywords and record types are not counted).
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct Report {
    /// Engine name.
    pub engine: String,
    /// Trace file.
    pub trace: String,
    /// Flash preset (model name).
    pub preset: String,
    /// Flash geometry.
    pub geometry: Geometry,
    /// Partition size in bytes.
    pub capacity_bytes: u64,
    /// The engine's session size limit, if it has one.
    pub session_limit_bytes: Option<u64>,
    /// Whether the limit was scaled down to fit the partition.
    pub session_limit_scaled: bool,
    /// RAM state of the engine besides the flash driver, in bytes.
    pub engine_state_bytes: usize,
    /// Rounds replayed (`--repeat`).
    pub rounds: u32,
    /// Trace operations replayed (all rounds).
    pub ops: u64,
    /// Completed turns replayed: appends with `turn_completed`.
    pub turns: u64,
    /// Payload acknowledged by the engine (see the type's docs).
    pub user_bytes: u64,
    /// Bytes programmed.
    pub programmed_bytes: u64,
    /// Bytes erased.
    pub erased_bytes: u64,
    /// Bytes read.
    pub read_bytes: u64,
    /// Sector erases.
    pub erases: u64,
    /// `programmed_bytes / user_bytes` (null without user bytes).
    pub program_wa: Option<f64>,
    /// `erased_bytes / user_bytes` (null without user bytes).
    pub erase_wa: Option<f64>,
    /// Erases of the most-erased sector.
    pub erase_count_max: u64,
    /// Mean erases per sector.
    pub erase_count_mean: f64,
    /// Mounts, the initial format included.
    pub mounts: u64,
    /// Most bytes read by one mount (or the initial format).
    pub mount_read_bytes_max: u64,
    /// Dead bytes per sector the mounts took back from their checkpoints,
    /// summed over the mounts (clawmem with the feature `sector-table`,
    /// `Store::dead_space` right after each mount; null otherwise).
    pub dead_carried_bytes: Option<u64>,
    /// `history` results compared with the model.
    pub history_checks: u64,
    /// `history` results that differed from the model.
    pub history_mismatches: u64,
    /// The first difference, with its line and round.
    pub first_mismatch: Option<String>,
    /// Operations the engine failed.
    pub errors: u64,
    /// The first failure, with its line and round.
    pub first_error: Option<String>,
    /// Appends after which the engine reported turn-aware compaction.
    pub compactions: u64,
    /// Appends refused because the session was blocked.
    pub blocked: u64,
    /// Memory targets skipped because their item was evicted (or forgotten,
    /// or its store failed).
    pub skipped: u64,
    /// Operations the engine does not support, and memory targets whose
    /// store it did not support.
    pub unsupported_ops: u64,
    /// Sessions of the previous round deleted by the replayer (`--repeat`).
    pub cleanup_deletes: u64,
    /// Times long-term memory was cleared between rounds.
    pub memory_clears: u64,
    /// Bytes the engine wrote, by what they hold (engine-specific).
    pub written_by_kind: Vec<(String, u64)>,
    /// Modelled device time of all flash work, in milliseconds.
    pub device_time_ms: f64,
    /// Turns per day assumed for the lifetime.
    pub turns_per_day: f64,
    /// Erase cycles a sector is rated for.
    pub endurance_cycles: u64,
    /// Erases of the busiest sector during the replay (the initial format
    /// excluded): the basis of the lifetime.
    pub replay_erase_count_max: u64,
    /// Years until the busiest sector reaches its rated cycles at
    /// `turns_per_day` turns a day: `endurance_cycles` over
    /// `replay_erase_count_max / (turns / turns_per_day)` erases a day, over
    /// 365.25; null if nothing was erased or no turn was replayed.
    pub lifetime_years: Option<f64>,
    /// Notes on the set-up (a scaled session limit, ...).
    pub notes: Vec<String>,
    /// Erase count of every sector at the end.
    pub erase_counts: Vec<u64>,
    /// Device time per operation kind and the idle work (its keys are
    /// flattened into the report: `latency_ms`, `appends_with_erase`,
    /// `idle`, `maintain_calls`, `maintain_ms`, `maintain_erases`).
    #[serde(flatten)]
    pub latency: LatencyReport,
}

impl Report {
    /// The keys every JSON report has (`geometry` is an object with
    /// `write_size`, `erase_size` and `sector_count`).
    pub const KEYS: [&'static str; 48] = [
        "engine",
        "trace",
        "preset",
        "geometry",
        "capacity_bytes",
        "session_limit_bytes",
        "session_limit_scaled",
        "engine_state_bytes",
        "rounds",
        "ops",
        "turns",
        "user_bytes",
        "programmed_bytes",
        "erased_bytes",
        "read_bytes",
        "erases",
        "program_wa",
        "erase_wa",
        "erase_count_max",
        "erase_count_mean",
        "mounts",
        "mount_read_bytes_max",
        "dead_carried_bytes",
        "history_checks",
        "history_mismatches",
        "first_mismatch",
        "errors",
        "first_error",
        "compactions",
        "blocked",
        "skipped",
        "unsupported_ops",
        "cleanup_deletes",
        "memory_clears",
        "written_by_kind",
        "device_time_ms",
        "turns_per_day",
        "endurance_cycles",
        "replay_erase_count_max",
        "lifetime_years",
        "notes",
        "erase_counts",
        "latency_ms",
        "appends_with_erase",
        "idle",
        "maintain_calls",
        "maintain_ms",
        "maintain_erases",
    ];

    /// The report as a JSON object.
    pub fn to_json(&self) -> serde_json::Value {
        serde_json::to_value(self).expect("report serializes")
    }
}

fn opt_f64(v: Option<f64>, decimals: usize) -> String {
    v.map_or_else(|| "-".into(), |x| format!("{x:.decimals$}"))
}

impl fmt::Display for Report {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let g = self.geometry;
        let limit = match (self.session_limit_bytes, self.session_limit_scaled) {
            (Some(l), true) => format!("{l} B (scaled down to fit)"),
            (Some(l), false) => format!("{l} B"),
            (None, _) => "-".into(),
        };
        let lifetime = match self.lifetime_years {
            Some(y) => format!(
                "{y:.1} years at {} turns/day ({} cycles, busiest sector erased {} times in the replay)",
                self.turns_per_day, self.endurance_cycles, self.replay_erase_count_max
            ),
            None => "- (nothing erased or no turn replayed)".into(),
        };
        let rows: [(&str, String); 22] = [
            ("engine", self.engine.clone()),
            ("trace", self.trace.clone()),
            (
                "flash",
                format!(
                    "{}: {} sectors of {} B = {} KiB, {} B words",
                    self.preset,
                    g.sector_count,
                    g.erase_size,
                    self.capacity_bytes / 1024,
                    g.write_size
                ),
            ),
            ("session limit", limit),
            ("engine state", format!("{} B", self.engine_state_bytes)),
            (
                "replayed",
                format!(
                    "{} ops in {} round(s), {} turns",
                    self.ops, self.rounds, self.turns
                ),
            ),
            ("user bytes", format!("{} B", self.user_bytes)),
            (
                "programmed",
                format!(
                    "{} B  (program WA {})",
                    self.programmed_bytes,
                    opt_f64(self.program_wa, 2)
                ),
            ),
            (
                "erased",
                format!(
                    "{} B in {} erases  (erase WA {})",
                    self.erased_bytes,
                    self.erases,
                    opt_f64(self.erase_wa, 2)
                ),
            ),
            ("read", format!("{} B", self.read_bytes)),
            (
                "erases per sector",
                format!(
                    "max {}, mean {:.2}",
                    self.erase_count_max, self.erase_count_mean
                ),
            ),
            (
                "mounts",
                format!(
                    "{}, at most {} B read by one{}",
                    self.mounts,
                    self.mount_read_bytes_max,
                    match self.dead_carried_bytes {
                        Some(d) => format!("; {d} dead bytes taken back from checkpoints, summed"),
                        None => String::new(),
                    }
                ),
            ),
            (
                "history checks",
                format!(
                    "{}, {} mismatches",
                    self.history_checks, self.history_mismatches
                ),
            ),
            ("errors", self.errors.to_string()),
            ("compactions", self.compactions.to_string()),
            ("blocked", self.blocked.to_string()),
            ("skipped", self.skipped.to_string()),
            ("unsupported ops", self.unsupported_ops.to_string()),
            ("cleanup deletes", self.cleanup_deletes.to_string()),
            ("memory clears", self.memory_clears.to_string()),
            ("device time", format!("{:.1} ms", self.device_time_ms)),
            ("lifetime", lifetime),
        ];
        let width = rows.iter().map(|(k, _)| k.len()).max().unwrap_or(0);
        for (k, v) in &rows {
            writeln!(f, "{k:<width$}  {v}")?;
        }
        if let Some(m) = &self.first_mismatch {
            writeln!(f, "first mismatch: {m}")?;
        }
        if let Some(e) = &self.first_error {
            writeln!(f, "first error: {e}")?;
        }
        for n in &self.notes {
            writeln!(f, "note: {n}")?;
        }
        write!(f, "{}", self.latency)
    }
}

// ---- the replayer ------------------------------------------------------------

/// How to replay a trace through a driver.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct RunOptions {
    /// Rounds (at least 1).
    pub repeat: u32,
    /// Completed turns a day, for the lifetime estimate.
    pub turns_per_day: f64,
    /// Call [`Driver::maintain`] between requests (`--idle`).
    pub idle: bool,
}

impl Default for RunOptions {
    fn default() -> Self {
        RunOptions {
            repeat: 1,
            turns_per_day: 200.0,
            idle: false,
        }
    }
}

/// What a memory target names.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Target {
    /// The newest version of this item.
    Live(ItemHandle),
    /// Forgotten by the trace.
    Forgotten,
    /// Evicted by the engine.
    Evicted,
    /// The store was not supported by the engine.
    Unsupported,
    /// The store failed.
    Failed,
}

#[derive(Default)]
pub(crate) struct Tally {
    pub(crate) ops: u64,
    pub(crate) turns: u64,
    pub(crate) user_bytes: u64,
    pub(crate) history_checks: u64,
    pub(crate) history_mismatches: u64,
    pub(crate) first_mismatch: Option<String>,
    pub(crate) errors: u64,
    pub(crate) first_error: Option<String>,
    pub(crate) compactions: u64,
    pub(crate) blocked: u64,
    pub(crate) skipped: u64,
    pub(crate) unsupported_ops: u64,
    pub(crate) cleanup_deletes: u64,
    pub(crate) memory_clears: u64,
}

/// Where an operation sits, for messages.
pub(crate) struct At<'a> {
    pub(crate) file: &'a str,
    pub(crate) line: usize,
    pub(crate) round: u32,
    pub(crate) op: &'static str,
}

impl fmt::Display for At<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{}:{} (round {}) {}",
            self.file, self.line, self.round, self.op
        )
    }
}

impl Tally {
    /// Counts a failed operation under its key.
    pub(crate) fn failed(&mut self, at: &At<'_>, e: OpError) {
        match e {
            OpError::Unsupported => self.unsupported_ops += 1,
            OpError::Evicted => self.skipped += 1,
            OpError::Blocked | OpError::Full(_) | OpError::Failed(_) => {
                self.errors += 1;
                if self.first_error.is_none() {
                    self.first_error = Some(format!("{at}: {e}"));
                }
            }
        }
    }
}

/// A session id in round `round`: as is in round 0, `id#k` after.
pub fn round_session_id(id: &str, round: u32) -> String {
    if round == 0 {
        id.to_string()
    } else {
        format!("{id}#{round}")
    }
}

/// Applies ESP-Claw's turn-aware compaction to a modelled session, as
/// clawmem does when an append reports `compacted`: a [`PlanBuilder`] over
/// the records, then its `KeepCursor`.
pub(crate) fn compact_model(records: &mut Vec<&TraceRecord>) {
    let mut plan = PlanBuilder::<COMPACT_TOOL_TURNS>::new();
    for r in records.iter() {
        plan.push(RecordType::from(r.kind), r.body.len() as u64);
    }
    let plan = plan.finish();
    let mut keep = plan.cursor();
    records.retain(|r| keep.keep_next(RecordType::from(r.kind)));
}

/// The first difference between the model and a history, if any.
pub(crate) fn compare(want: &[&TraceRecord], got: &[HistoryRecord]) -> Option<String> {
    for (i, (w, g)) in want.iter().zip(got).enumerate() {
        if w.kind != g.kind || w.format != g.format || w.body.as_bytes() != g.body.as_slice() {
            return Some(format!(
                "record {i} differs: expected {:?}/{:?} of {} B, got {:?}/{:?} of {} B",
                w.kind,
                w.format,
                w.body.len(),
                g.kind,
                g.format,
                g.body.len()
            ));
        }
    }
    (want.len() != got.len()).then(|| format!("expected {} records, got {}", want.len(), got.len()))
}

/// The item a target names, or `None` after counting why not.
fn live_target(targets: &[Target], k: usize, t: &mut Tally) -> Option<ItemHandle> {
    match targets.get(k) {
        Some(Target::Live(h)) => Some(*h),
        Some(Target::Unsupported) => {
            t.unsupported_ops += 1;
            None
        }
        // Evicted, forgotten, a failed store, or (in a trace that skipped the
        // parser's check) no such store.
        _ => {
            t.skipped += 1;
            None
        }
    }
}

/// Makes every target that names `item` name `now` instead.
fn retarget(targets: &mut [Target], item: ItemHandle, now: Target) {
    for x in targets.iter_mut().filter(|x| **x == Target::Live(item)) {
        *x = now;
    }
}

/// Replays `trace` through `driver` (already formatted or mounted) and
/// reports. `progress` is called after every operation with (done, total).
pub fn replay<D: Driver>(
    driver: &mut D,
    trace: &Trace,
    opts: &RunOptions,
    progress: &mut dyn FnMut(u64, u64),
) -> Report {
    let rounds = opts.repeat.max(1);
    let total = trace.ops.len() as u64 * u64::from(rounds);
    // Every call below goes through the timer (`crate::latency`).
    let mut timed = Timed::new(driver, opts.idle);
    let driver = &mut timed;
    let wear_before = driver.flash().stats().erase_counts.clone();
    let mut t = Tally::default();
    // Live sessions as the engine should hold them.
    let mut sessions: HashMap<String, Vec<&TraceRecord>> = HashMap::new();
    for round in 0..rounds {
        let mut targets: Vec<Target> = Vec::with_capacity(trace.store_count());
        let mut touched: HashSet<&str> = HashSet::new();
        // Memory targets are per round: a round starts from empty long-term
        // memory, as its sessions start fresh, so that its recalls name the
        // labels its own stores created (the trace's promise).
        if round > 0 && trace.store_count() > 0 {
            match driver.memory_clear() {
                Ok(()) => t.memory_clears += 1,
                Err(OpError::Unsupported) => {}
                Err(e) => t.failed(
                    &At {
                        file: &trace.file,
                        line: 0,
                        round,
                        op: "memory_clear",
                    },
                    e,
                ),
            }
        }
        for top in &trace.ops {
            let at = At {
                file: &trace.file,
                line: top.line,
                round,
                op: top.op.name(),
            };
            t.ops += 1;
            // Round k >= 1 retires the previous round's session first.
            if let Some(base) = top.op.session() {
                if round > 0 && touched.insert(base) {
                    let old = round_session_id(base, round - 1);
                    if sessions.remove(&old).is_some() {
                        t.cleanup_deletes += 1;
                        if let Err(e) = driver.session_delete(&old) {
                            t.failed(&at, e);
                        }
                    }
                }
            }
            step(
                driver,
                &top.op,
                round,
                &at,
                &mut t,
                &mut sessions,
                &mut targets,
            );
            if opts.idle && idle_after(&top.op) {
                if let Err(e) = driver.maintain() {
                    t.failed(
                        &At {
                            op: "maintain",
                            ..at
                        },
                        e,
                    );
                }
            }
            progress(t.ops, total);
        }
    }
    let mut report = build_report(driver, trace, opts, rounds, &wear_before, t);
    report.latency = timed.report();
    report
}

/// Replays one operation.
fn step<'t, D: Driver>(
    driver: &mut D,
    op: &'t Op,
    round: u32,
    at: &At<'_>,
    t: &mut Tally,
    sessions: &mut HashMap<String, Vec<&'t TraceRecord>>,
    targets: &mut Vec<Target>,
) {
    match op {
        Op::Append {
            session,
            records,
            turn_completed,
        } => {
            if *turn_completed {
                t.turns += 1;
            }
            let id = round_session_id(session, round);
            match driver.append(&id, records, *turn_completed) {
                Ok(out) => {
                    t.user_bytes += records.iter().map(|r| r.body.len() as u64).sum::<u64>();
                    let model = sessions.entry(id).or_default();
                    model.extend(records.iter());
                    if out.compacted {
                        t.compactions += 1;
                        compact_model(model);
                    }
                    // `out.blocked`: the next append is refused, see below.
                }
                Err(OpError::Blocked) => {
                    t.blocked += 1;
                    sessions.remove(&id);
                    if let Err(e) = driver.session_delete(&id) {
                        t.failed(at, e);
                    }
                }
                Err(e) => t.failed(at, e),
            }
        }
        Op::History { session } => {
            let id = round_session_id(session, round);
            match driver.history(&id) {
                Ok(got) => {
                    t.history_checks += 1;
                    let want = sessions.get(&id).map_or(&[][..], |v| v.as_slice());
                    if let Some(diff) = compare(want, &got) {
                        t.history_mismatches += 1;
                        if t.first_mismatch.is_none() {
                            t.first_mismatch = Some(format!("{at} {id}: {diff}"));
                        }
                    }
                }
                Err(e) => t.failed(at, e),
            }
        }
        Op::SessionDelete { session } => {
            let id = round_session_id(session, round);
            match driver.session_delete(&id) {
                Ok(()) => {
                    sessions.remove(&id);
                }
                Err(e) => t.failed(at, e),
            }
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
            let target = match driver.memory_store(&item) {
                Ok(stored) => {
                    t.user_bytes += content.len() as u64;
                    Target::Live(stored.item)
                }
                Err(OpError::Unsupported) => {
                    t.unsupported_ops += 1;
                    Target::Unsupported
                }
                Err(e) => {
                    t.failed(at, e);
                    Target::Failed
                }
            };
            targets.push(target);
        }
        Op::MemoryRecall { labels, limit } => {
            if let Err(e) = driver.memory_recall(labels, *limit) {
                t.failed(at, e);
            }
        }
        Op::MemoryUpdate {
            target,
            content,
            tags,
            keywords,
        } => {
            let Some(item) = live_target(targets, *target, t) else {
                return;
            };
            let change = MemoryChange {
                content: content.as_deref(),
                tags: tags.as_deref(),
                keywords: keywords.as_deref(),
            };
            match driver.memory_update(item, &change) {
                Ok(newest) => {
                    t.user_bytes += content.as_ref().map_or(0, |c| c.len() as u64);
                    // Every target naming the item follows its lineage.
                    retarget(targets, item, Target::Live(newest));
                }
                Err(OpError::Evicted) => {
                    t.skipped += 1;
                    retarget(targets, item, Target::Evicted);
                }
                Err(e) => t.failed(at, e),
            }
        }
        Op::MemoryForget { target } => {
            let Some(item) = live_target(targets, *target, t) else {
                return;
            };
            match driver.memory_forget(item) {
                Ok(()) => retarget(targets, item, Target::Forgotten),
                Err(OpError::Evicted) => {
                    t.skipped += 1;
                    retarget(targets, item, Target::Evicted);
                }
                Err(e) => t.failed(at, e),
            }
        }
        Op::MemoryList {} => {
            if let Err(e) = driver.memory_list() {
                t.failed(at, e);
            }
        }
        Op::ProfileWrite { name, body } => match driver.profile_write(*name, body) {
            Ok(()) => t.user_bytes += body.len() as u64,
            Err(e) => t.failed(at, e),
        },
        Op::ProfileRead { name } => {
            if let Err(e) = driver.profile_read(*name) {
                t.failed(at, e);
            }
        }
        Op::Remount {} => {
            if let Err(e) = driver.remount() {
                t.failed(at, e);
            }
        }
    }
}

pub(crate) fn build_report<D: Driver>(
    driver: &D,
    trace: &Trace,
    opts: &RunOptions,
    rounds: u32,
    wear_before: &[u64],
    t: Tally,
) -> Report {
    let info = driver.info();
    let flash = driver.flash();
    let model = flash.model();
    let stats = flash.stats();
    let ratio = |x: u64| (t.user_bytes > 0).then(|| x as f64 / t.user_bytes as f64);
    let replay_erase_count_max = stats
        .erase_counts
        .iter()
        .zip(wear_before.iter().chain(std::iter::repeat(&0)))
        .map(|(after, before)| after.saturating_sub(*before))
        .max()
        .unwrap_or(0);
    let endurance = model.timings.endurance_cycles;
    let lifetime_years = (replay_erase_count_max > 0 && t.turns > 0 && opts.turns_per_day > 0.0)
        .then(|| {
            let days = t.turns as f64 / opts.turns_per_day;
            let erases_per_day = replay_erase_count_max as f64 / days;
            endurance as f64 / erases_per_day / 365.25
        });
    let mounts = driver.mount_read_bytes();
    Report {
        engine: info.engine,
        trace: trace.file.clone(),
        preset: model.name.clone(),
        geometry: model.geometry,
        capacity_bytes: model.geometry.capacity() as u64,
        session_limit_bytes: info.session_limit_bytes,
        session_limit_scaled: info.session_limit_scaled,
        engine_state_bytes: info.state_bytes,
        rounds,
        ops: t.ops,
        turns: t.turns,
        user_bytes: t.user_bytes,
        programmed_bytes: stats.programmed_bytes,
        erased_bytes: stats.erased_bytes,
        read_bytes: stats.read_bytes,
        erases: stats.erases,
        program_wa: ratio(stats.programmed_bytes),
        erase_wa: ratio(stats.erased_bytes),
        erase_count_max: stats.erase_count_max(),
        erase_count_mean: stats.erase_count_mean(),
        mounts: mounts.len() as u64,
        mount_read_bytes_max: mounts.iter().copied().max().unwrap_or(0),
        dead_carried_bytes: driver.dead_carried_bytes(),
        history_checks: t.history_checks,
        history_mismatches: t.history_mismatches,
        first_mismatch: t.first_mismatch,
        errors: t.errors,
        first_error: t.first_error,
        compactions: t.compactions,
        blocked: t.blocked,
        skipped: t.skipped,
        unsupported_ops: t.unsupported_ops,
        cleanup_deletes: t.cleanup_deletes,
        memory_clears: t.memory_clears,
        written_by_kind: driver.written_by_kind(),
        device_time_ms: stats.device_time_us / 1000.0,
        turns_per_day: opts.turns_per_day,
        endurance_cycles: endurance,
        replay_erase_count_max,
        lifetime_years,
        notes: info.notes,
        erase_counts: stats.erase_counts.clone(),
        latency: LatencyReport::default(),
    }
}

// ---- clawmem -------------------------------------------------------------

/// Session table size of the replayed store: 100+ live sessions fit.
pub const MAX_SESSIONS: usize = 128;

/// A flash type of the simulator that an engine can run on: an
/// `embedded-storage` view of a [`SimFlash`].
pub trait SimBacked: NorFlash<Error = SimError> + Sized {
    /// Wraps a simulator, if its model fits this type.
    fn wrap(flash: SimFlash) -> Result<Self, ModelError>;
    /// The simulator.
    fn sim(&self) -> &SimFlash;
    /// The simulator, mutably.
    fn sim_mut(&mut self) -> &mut SimFlash;
    /// Unwraps the simulator.
    fn into_sim(self) -> SimFlash;
}

impl<const W: usize, const E: usize, const M: bool> SimBacked for Nor<W, E, M> {
    fn wrap(flash: SimFlash) -> Result<Self, ModelError> {
        Nor::new(flash)
    }

    fn sim(&self) -> &SimFlash {
        self.flash()
    }

    fn sim_mut(&mut self) -> &mut SimFlash {
        self.flash_mut()
    }

    fn into_sim(self) -> SimFlash {
        self.into_inner()
    }
}

/// A replay that could not start or finish: a flash that does not fit, an
/// image file that cannot be written, a format that failed.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ReplayError(pub String);

impl fmt::Display for ReplayError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for ReplayError {}

impl From<ModelError> for ReplayError {
    fn from(e: ModelError) -> Self {
        ReplayError(e.0)
    }
}

impl From<SimError> for ReplayError {
    fn from(e: SimError) -> Self {
        ReplayError(e.to_string())
    }
}

impl From<RecordKind> for RecordType {
    fn from(k: RecordKind) -> Self {
        match k {
            RecordKind::User => RecordType::User,
            RecordKind::AssistantFinal => RecordType::AssistantFinal,
            RecordKind::AssistantTool => RecordType::AssistantTool,
            RecordKind::ToolResult => RecordType::ToolResult,
        }
    }
}

impl From<RecordType> for RecordKind {
    fn from(k: RecordType) -> Self {
        match k {
            RecordType::User => RecordKind::User,
            RecordType::AssistantFinal => RecordKind::AssistantFinal,
            RecordType::AssistantTool => RecordKind::AssistantTool,
            RecordType::ToolResult => RecordKind::ToolResult,
        }
    }
}

impl From<Format> for BackendFormat {
    fn from(f: Format) -> Self {
        match f {
            Format::Unknown => BackendFormat::Unknown,
            Format::Openai => BackendFormat::OpenAiCompatible,
            Format::Anthropic => BackendFormat::AnthropicCompatible,
            Format::OpenaiResponses => BackendFormat::OpenAiResponses,
        }
    }
}

impl From<BackendFormat> for Format {
    fn from(f: BackendFormat) -> Self {
        match f {
            BackendFormat::Unknown => Format::Unknown,
            BackendFormat::OpenAiCompatible => Format::Openai,
            BackendFormat::AnthropicCompatible => Format::Anthropic,
            BackendFormat::OpenAiResponses => Format::OpenaiResponses,
        }
    }
}

enum State<F: SimBacked, const N: usize> {
    Mounted(Box<Store<F, N>>),
    /// A remount failed: the store is gone; the flash (a snapshot taken
    /// before the mount) is kept for its counters.
    Lost(F, String),
}

/// [`Driver`] of clawmem's public API on flash type `F`: a
/// `Store<F, N>` (`N` = [`MAX_SESSIONS`] unless chosen; the fill workload
/// takes a larger table) with [`Config::default`], its session limit scaled
/// down if the partition is too small for it.
///
/// Memory items and profiles are not in clawmem's API yet: those
/// operations answer [`OpError::Unsupported`].
pub struct ClawmemDriver<F: SimBacked, const N: usize = MAX_SESSIONS> {
    /// Always `Some` except inside [`Driver::remount`].
    state: Option<State<F, N>>,
    config: Config,
    limit_scaled: bool,
    notes: Vec<String>,
    mount_reads: Vec<u64>,
    /// Dead bytes the mounts took back ([`Driver::dead_carried_bytes`]).
    #[cfg(feature = "sector-table")]
    dead_carried: u64,
    /// What earlier mounts' collections cost ([`Driver::cleaning`]).
    #[cfg(feature = "sector-table")]
    cleaned: CleaningCounts,
    /// History buffer, grown on demand.
    buf: Vec<u8>,
    /// The replay's clock for memory timestamps: traces carry none, so
    /// every memory operation advances a synthetic clock by one minute.
    clock: u32,
    /// Bytes written by earlier mounts, by kind.
    written: clawmem::WrittenBytes,
    /// Called with the store after each write that succeeded
    /// ([`ClawmemDriver::after_each_write`]).
    after_write: Option<AfterWrite<F, N>>,
}

/// A check [`ClawmemDriver`] runs on its store after each write.
pub type AfterWrite<F, const N: usize> = Box<dyn FnMut(&Store<F, N>)>;

/// The default config, its session limit scaled down (in whole KiB) until
/// clawmem accepts the partition, with a note saying so. Each try formats a
/// scratch RAM flash of the same model.
pub fn fit_config<F: SimBacked>(model: &Model) -> Result<(Config, Option<String>), ReplayError> {
    fit_config_for::<F, MAX_SESSIONS>(model)
}

/// [`fit_config`] for a session table of `N`.
pub(crate) fn fit_config_for<F: SimBacked, const N: usize>(
    model: &Model,
) -> Result<(Config, Option<String>), ReplayError> {
    let fits = |limit: u32| -> Result<bool, ReplayError> {
        let probe = F::wrap(SimFlash::new(model.clone()))?;
        let config = Config {
            session_size_limit_bytes: limit,
            ..Config::default()
        };
        match Store::<F, N>::format(probe, config) {
            Ok(_) => Ok(true),
            Err(clawmem::Error::Config(_)) => Ok(false),
            Err(e) => Err(ReplayError(format!("format failed: {e}"))),
        }
    };
    let default = Config::default();
    let limit = default.session_size_limit_bytes;
    if fits(limit)? {
        return Ok((default, None));
    }
    // The largest whole number of KiB that fits: `lo` fits (0: none does),
    // `hi` does not.
    let (mut lo, mut hi) = (0u32, limit / 1024);
    while hi - lo > 1 {
        let mid = (lo + hi) / 2;
        if fits(mid * 1024)? {
            lo = mid;
        } else {
            hi = mid;
        }
    }
    let g = model.geometry;
    if lo == 0 {
        return Err(ReplayError(format!(
            "the partition ({} sectors of {} B) is too small for clawmem even with a 1 KiB session limit",
            g.sector_count, g.erase_size
        )));
    }
    let note = format!(
        "session limit scaled down from {limit} B to {} B: {} sectors of {} B cannot hold a {} KiB session with its index beside the reserves",
        lo * 1024,
        g.sector_count,
        g.erase_size,
        limit / 1024
    );
    let config = Config {
        session_size_limit_bytes: lo * 1024,
        ..default
    };
    Ok((config, Some(note)))
}

fn add_written(total: &mut clawmem::WrittenBytes, w: &clawmem::WrittenBytes) {
    total.checkpoints += w.checkpoints;
    total.delta_checkpoints += w.delta_checkpoints;
    total.session_batches += w.session_batches;
    total.session_bases += w.session_bases;
    total.session_other += w.session_other;
    total.objects += w.objects;
    total.memory_items += w.memory_items;
    total.memory_other += w.memory_other;
}

fn profile_doc(name: ProfileName) -> ProfileDoc {
    match name {
        ProfileName::Soul => ProfileDoc::Soul,
        ProfileName::Identity => ProfileDoc::Identity,
        ProfileName::User => ProfileDoc::User,
        ProfileName::Agents => ProfileDoc::Agents,
    }
}

fn failed(e: clawmem::Error<SimError>) -> OpError {
    match e {
        clawmem::Error::Blocked => OpError::Blocked,
        e @ clawmem::Error::Full { .. } => OpError::Full(e.to_string()),
        e => OpError::Failed(e.to_string()),
    }
}

impl<F: SimBacked, const N: usize> ClawmemDriver<F, N> {
    /// Formats `flash` (whose model must match `F`'s units) with the
    /// default config, scaled down if need be.
    pub fn format(flash: SimFlash) -> Result<Self, ReplayError> {
        let (config, note) = fit_config_for::<F, N>(flash.model())?;
        let flash = F::wrap(flash)?;
        let before = flash.sim().stats().read_bytes;
        let store = Store::<F, N>::format(flash, config)
            .map_err(|e| ReplayError(format!("format failed: {e}")))?;
        let read = store.flash().sim().stats().read_bytes - before;
        Ok(ClawmemDriver {
            state: Some(State::Mounted(Box::new(store))),
            config,
            limit_scaled: note.is_some(),
            notes: note.into_iter().collect(),
            mount_reads: vec![read],
            #[cfg(feature = "sector-table")]
            dead_carried: 0,
            #[cfg(feature = "sector-table")]
            cleaned: CleaningCounts::default(),
            buf: vec![0; 64 * 1024],
            clock: 0,
            written: clawmem::WrittenBytes::default(),
            after_write: None,
        })
    }

    /// Mounts `flash` (already formatted with `config`), as a fresh boot
    /// would: no RAM state is kept from anywhere. The clock starts at 0.
    pub fn mount(flash: SimFlash, config: Config) -> Result<Self, ReplayError> {
        let flash = F::wrap(flash)?;
        let before = flash.sim().stats().read_bytes;
        let store = Store::<F, N>::mount(flash, config, MountMode::ExistingOnly)
            .map_err(|e| ReplayError(format!("mount failed: {e}")))?;
        let read = store.flash().sim().stats().read_bytes - before;
        #[cfg(feature = "sector-table")]
        let dead_carried = store.dead_space().dead_bytes;
        Ok(ClawmemDriver {
            state: Some(State::Mounted(Box::new(store))),
            config,
            limit_scaled: false,
            notes: Vec::new(),
            mount_reads: vec![read],
            #[cfg(feature = "sector-table")]
            dead_carried,
            #[cfg(feature = "sector-table")]
            cleaned: CleaningCounts::default(),
            buf: vec![0; 64 * 1024],
            clock: 0,
            written: clawmem::WrittenBytes::default(),
            after_write: None,
        })
    }

    /// The synthetic clock of memory timestamps (seconds since the last
    /// reading's base; see [`ClawmemDriver::set_clock`]).
    pub fn clock(&self) -> u32 {
        self.clock
    }

    /// Sets the synthetic clock, so that a driver mounted on a copy of a
    /// run's flash stamps memory operations as the run's own driver would.
    pub fn set_clock(&mut self, clock: u32) {
        self.clock = clock;
    }

    /// The config in use.
    pub fn config(&self) -> &Config {
        &self.config
    }

    /// The store, unless a remount failed.
    pub fn store(&self) -> Option<&Store<F, N>> {
        match &self.state {
            Some(State::Mounted(s)) => Some(s),
            _ => None,
        }
    }

    /// The store, mutably, unless a remount failed.
    pub fn store_mut(&mut self) -> Option<&mut Store<F, N>> {
        match &mut self.state {
            Some(State::Mounted(s)) => Some(s),
            _ => None,
        }
    }

    /// Flushes the image file, if the flash has one.
    pub fn flush(&mut self) -> Result<(), SimError> {
        match &mut self.state {
            Some(State::Mounted(s)) => s.flash_mut().sim_mut().flush(),
            Some(State::Lost(f, _)) => f.sim_mut().flush(),
            None => Ok(()),
        }
    }

    /// Unmounts and returns the simulator.
    pub fn into_flash(self) -> SimFlash {
        match self.state {
            Some(State::Mounted(s)) => (*s).into_flash().into_sim(),
            Some(State::Lost(f, _)) => f.into_sim(),
            None => unreachable!("the state is only taken inside remount"),
        }
    }

    /// The synthetic clock's next reading (seconds since the epoch).
    fn tick(&mut self) -> u32 {
        self.clock = self.clock.wrapping_add(60);
        1_700_000_000u32.wrapping_add(self.clock)
    }

    /// Has `check` called with the store after each write that succeeds
    /// (an append, a session delete, a memory or profile write, a memory
    /// clear, idle-time maintenance), for a test that inspects the store
    /// as a workload runs, such as mounting a copy of its flash.
    pub fn after_each_write(&mut self, check: AfterWrite<F, N>) {
        self.after_write = Some(check);
    }

    /// `r`, after running the after-write check if `r` is a success.
    fn wrote<T>(&mut self, r: OpResult<T>) -> OpResult<T> {
        if let (Ok(_), Some(check), Some(State::Mounted(s))) =
            (&r, self.after_write.as_mut(), &self.state)
        {
            check(s);
        }
        r
    }

    fn mounted(&mut self) -> OpResult<&mut Store<F, N>> {
        match &mut self.state {
            Some(State::Mounted(s)) => Ok(s),
            Some(State::Lost(_, why)) => Err(OpError::Failed(format!("store lost: {why}"))),
            None => Err(OpError::Failed("store lost".into())),
        }
    }

    /// Reads a history through `buf`, growing it as needed.
    fn history_into(&mut self, session: &str, buf: &mut Vec<u8>) -> OpResult<Vec<HistoryRecord>> {
        let store = self.mounted()?;
        loop {
            // `Unknown` as the current backend: no mixed-backend filtering,
            // the history comes back as stored.
            let needed = match store.history(session, BackendFormat::Unknown, buf) {
                Ok(h) => {
                    return Ok(h
                        .iter()
                        .map(|r| HistoryRecord {
                            kind: r.kind.into(),
                            format: r.format.into(),
                            body: r.body.to_vec(),
                        })
                        .collect())
                }
                Err(clawmem::Error::NotFound) => return Ok(Vec::new()),
                Err(clawmem::Error::BufferTooSmall { needed }) => needed,
                Err(e) => return Err(failed(e)),
            };
            if needed <= buf.len() {
                return Err(OpError::Failed(format!(
                    "history asked for a {needed} B buffer but had {} B",
                    buf.len()
                )));
            }
            buf.resize(needed, 0);
        }
    }
}

impl<F: SimBacked, const N: usize> Driver for ClawmemDriver<F, N> {
    fn info(&self) -> EngineInfo {
        EngineInfo {
            engine: "clawmem".into(),
            // The state a firmware keeps: the store with its work area lent.
            state_bytes: core::mem::size_of::<Store<F, N, &'static mut clawmem::Work>>()
                - core::mem::size_of::<F>(),
            session_limit_bytes: Some(u64::from(self.config.session_size_limit_bytes)),
            session_limit_scaled: self.limit_scaled,
            notes: self.notes.clone(),
        }
    }

    fn flash(&self) -> &SimFlash {
        match &self.state {
            Some(State::Mounted(s)) => s.flash().sim(),
            Some(State::Lost(f, _)) => f.sim(),
            None => unreachable!("the state is only taken inside remount"),
        }
    }

    fn mount_read_bytes(&self) -> &[u64] {
        &self.mount_reads
    }

    #[cfg(feature = "sector-table")]
    fn dead_carried_bytes(&self) -> Option<u64> {
        Some(self.dead_carried)
    }

    #[cfg(feature = "sector-table")]
    fn cleaning(&self) -> Option<CleaningCounts> {
        let mut c = self.cleaned;
        if let Some(State::Mounted(s)) = &self.state {
            c.add(&s.cleaning());
        }
        Some(c)
    }

    fn append(
        &mut self,
        session: &str,
        records: &[TraceRecord],
        turn_completed: bool,
    ) -> OpResult<AppendOutcome> {
        let records: Vec<Record<'_>> = records
            .iter()
            .map(|r| Record {
                kind: r.kind.into(),
                format: r.format.into(),
                body: r.body.as_bytes(),
            })
            .collect();
        let r = self
            .mounted()?
            .append(session, &records, turn_completed)
            .map_err(failed)
            .map(|out| AppendOutcome {
                compacted: out.compacted,
                blocked: out.blocked,
            });
        self.wrote(r)
    }

    fn history(&mut self, session: &str) -> OpResult<Vec<HistoryRecord>> {
        let mut buf = std::mem::take(&mut self.buf);
        let result = self.history_into(session, &mut buf);
        self.buf = buf;
        result
    }

    fn session_delete(&mut self, session: &str) -> OpResult<()> {
        let r = match self.mounted()?.delete_session(session) {
            Ok(()) | Err(clawmem::Error::NotFound) => Ok(()),
            Err(e) => Err(failed(e)),
        };
        self.wrote(r)
    }

    fn memory_store(&mut self, item: &MemoryItem<'_>) -> OpResult<MemoryStored> {
        let tags = item.tags.join(",");
        let keywords = item.keywords.join(",");
        let source = match item.source {
            MemorySource::Manual => clawmem::memory::SOURCE_MANUAL,
            MemorySource::AutoLlm => clawmem::memory::SOURCE_AUTO_LLM,
        };
        let input = ItemInput::new(item.content)
            .tags(&tags)
            .keywords(&keywords)
            .source(source);
        let now = self.tick();
        let stored = self
            .mounted()?
            .memory_store(&input, now, false)
            .map_err(failed)?;
        self.wrote(Ok(MemoryStored {
            item: ItemHandle(u64::from(stored.item.id().get())),
            duplicate: !stored.changed,
        }))
    }

    fn memory_recall(&mut self, labels: &[String], limit: u32) -> OpResult<Vec<ItemHandle>> {
        let labels: Vec<&str> = labels.iter().map(String::as_str).collect();
        let now = self.tick();
        let mut out = Vec::new();
        self.mounted()?
            .memory_recall(&labels, limit as usize, now, |i| {
                out.push(ItemHandle(u64::from(i.id().get())))
            })
            .map_err(failed)?;
        Ok(out)
    }

    fn memory_update(
        &mut self,
        item: ItemHandle,
        change: &MemoryChange<'_>,
    ) -> OpResult<ItemHandle> {
        let tags = change.tags.map(|t| t.join(",")).unwrap_or_default();
        let keywords = change.keywords.map(|k| k.join(",")).unwrap_or_default();
        let patch = ItemInput::new(change.content.unwrap_or(""))
            .tags(&tags)
            .keywords(&keywords);
        let id = ItemId::new(item.0 as u32);
        let now = self.tick();
        let r = match self.mounted()?.memory_update(id, &patch, now) {
            Ok(Some(stored)) => Ok(ItemHandle(u64::from(stored.item.id().get()))),
            Ok(None) => Ok(item),
            Err(clawmem::Error::NotFound) => Err(OpError::Evicted),
            Err(e) => Err(failed(e)),
        };
        self.wrote(r)
    }

    fn memory_forget(&mut self, item: ItemHandle) -> OpResult<()> {
        let r = match self.mounted()?.memory_forget(ItemId::new(item.0 as u32)) {
            Ok(_) => Ok(()),
            Err(clawmem::Error::NotFound) => Err(OpError::Evicted),
            Err(e) => Err(failed(e)),
        };
        self.wrote(r)
    }

    fn memory_list(&mut self) -> OpResult<Vec<ItemHandle>> {
        let mut out = Vec::new();
        self.mounted()?
            .memory_list(|i| out.push(ItemHandle(u64::from(i.id().get()))))
            .map_err(failed)?;
        Ok(out)
    }

    fn profile_write(&mut self, name: ProfileName, body: &str) -> OpResult<()> {
        let r = self
            .mounted()?
            .profile_write(profile_doc(name), body)
            .map_err(failed);
        self.wrote(r)
    }

    fn profile_read(&mut self, name: ProfileName) -> OpResult<Option<Vec<u8>>> {
        let doc = profile_doc(name);
        let store = self.mounted()?;
        let len = store.profile_len(doc).map_err(failed)?;
        let mut buf = vec![0u8; len];
        let n = store.profile_read(doc, &mut buf).map_err(failed)?;
        buf.truncate(n);
        Ok(Some(buf))
    }

    fn memory_clear(&mut self) -> OpResult<()> {
        let r = self.mounted()?.memory_clear().map_err(failed);
        self.wrote(r)
    }

    /// `Store::maintain(16)`: up to 16 steps of idle work (a due
    /// checkpoint, a tail collection, a sector erased ahead of the head).
    fn maintain(&mut self) -> OpResult<()> {
        let r = self.mounted()?.maintain(16).map(|_| ()).map_err(failed);
        self.wrote(r)
    }

    fn written_by_kind(&self) -> Vec<(String, u64)> {
        let mut w = self.written;
        if let Some(State::Mounted(s)) = &self.state {
            add_written(&mut w, &s.written_bytes());
        }
        vec![
            ("checkpoints".into(), w.checkpoints),
            ("delta_checkpoints".into(), w.delta_checkpoints),
            ("session_batches".into(), w.session_batches),
            ("session_bases".into(), w.session_bases),
            ("session_other".into(), w.session_other),
            ("objects".into(), w.objects),
            ("memory_items".into(), w.memory_items),
            ("memory_other".into(), w.memory_other),
        ]
    }

    fn partition(&self) -> Option<PartitionUse> {
        let Some(State::Mounted(s)) = &self.state else {
            return None;
        };
        let space = s.space();
        #[cfg(feature = "sector-table")]
        let dead = s.dead_space();
        Some(PartitionUse {
            sectors: space.sectors,
            sector_bytes: space.sector_bytes,
            used_sectors: space.used_sectors,
            reserve_sectors: space.reserve_sectors,
            knowledge_reserve_bytes: self
                .config
                .knowledge_reserve(space.sectors * space.sector_bytes),
            #[cfg(feature = "sector-table")]
            dead_bytes: Some(dead.dead_bytes),
            #[cfg(feature = "sector-table")]
            half_dead_sectors: Some(dead.half_dead_sectors),
            #[cfg(feature = "sector-table")]
            tail_dead_bytes: Some(dead.tail_dead_bytes),
            #[cfg(not(feature = "sector-table"))]
            dead_bytes: None,
            #[cfg(not(feature = "sector-table"))]
            half_dead_sectors: None,
            #[cfg(not(feature = "sector-table"))]
            tail_dead_bytes: None,
        })
    }

    fn remount(&mut self) -> OpResult<()> {
        if let Some(State::Mounted(s)) = &self.state {
            let w = s.written_bytes();
            add_written(&mut self.written, &w);
            #[cfg(feature = "sector-table")]
            self.cleaned.add(&s.cleaning());
        }
        let flash = match self.state.take() {
            Some(State::Mounted(s)) => (*s).into_flash(),
            other => {
                self.state = other;
                return self.mounted().map(|_| ());
            }
        };
        // Kept in case the mount fails, for the counters (sectors are copied
        // on write, so this is cheap).
        let snapshot = flash.sim().clone();
        let before = flash.sim().stats().read_bytes;
        match Store::<F, N>::mount(flash, self.config, MountMode::ExistingOnly) {
            Ok(store) => {
                let read = store.flash().sim().stats().read_bytes - before;
                self.mount_reads.push(read);
                #[cfg(feature = "sector-table")]
                {
                    self.dead_carried += store.dead_space().dead_bytes;
                }
                self.state = Some(State::Mounted(Box::new(store)));
                Ok(())
            }
            Err(e) => {
                let why = format!("mount failed: {e}");
                let flash = F::wrap(snapshot).expect("a snapshot has the flash's own model");
                self.state = Some(State::Lost(flash, why.clone()));
                Err(OpError::Failed(why))
            }
        }
    }
}

// ---- the whole run ---------------------------------------------------------

/// A replay's set-up, as the CLI takes it.
#[derive(Clone, Debug, PartialEq)]
pub struct ReplayOptions {
    /// Flash part.
    pub preset: Preset,
    /// Partition size; the preset's default (1 MiB) if `None`.
    pub size_bytes: Option<usize>,
    /// Keep the flash in this file (created or truncated) instead of RAM.
    pub image: Option<PathBuf>,
    /// Rounds and lifetime assumptions.
    pub run: RunOptions,
}

impl Default for ReplayOptions {
    fn default() -> Self {
        ReplayOptions {
            preset: Preset::Esp32,
            size_bytes: None,
            image: None,
            run: RunOptions::default(),
        }
    }
}

/// Formats a fresh flash for `opts` and replays `trace` through clawmem,
/// choosing the flash type from the preset.
pub fn replay_clawmem(
    trace: &Trace,
    opts: &ReplayOptions,
    progress: &mut dyn FnMut(u64, u64),
) -> Result<Report, ReplayError> {
    let p = opts.preset;
    let model = p.model(opts.size_bytes.unwrap_or_else(|| p.default_capacity()))?;
    let flash = match &opts.image {
        Some(path) => SimFlash::create_file(model, path)?,
        None => SimFlash::new(model),
    };
    let run = &opts.run;
    match p {
        Preset::Esp32 => replay_clawmem_on::<Esp32Flash>(flash, trace, run, progress),
        Preset::Nrf52 => replay_clawmem_on::<Nrf52Flash>(flash, trace, run, progress),
        Preset::Stm32l4 => replay_clawmem_on::<Stm32l4Flash>(flash, trace, run, progress),
        Preset::Stm32h7 => replay_clawmem_on::<Stm32h7Flash>(flash, trace, run, progress),
        Preset::Esp32Encrypted => {
            replay_clawmem_on::<Esp32EncryptedFlash>(flash, trace, run, progress)
        }
        Preset::Generic => replay_clawmem_on::<GenericFlash>(flash, trace, run, progress),
    }
}

/// Formats `flash` as flash type `F` and replays `trace` through clawmem.
pub fn replay_clawmem_on<F: SimBacked>(
    flash: SimFlash,
    trace: &Trace,
    run: &RunOptions,
    progress: &mut dyn FnMut(u64, u64),
) -> Result<Report, ReplayError> {
    let mut driver = ClawmemDriver::<F>::format(flash)?;
    let report = replay(&mut driver, trace, run, progress);
    driver.flush()?;
    Ok(report)
}
