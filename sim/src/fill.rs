//! The fill workload (`replay --fill`, `compare --fill`): how much of the
//! partition an engine lets an agent use, and what writing costs once it is
//! full.
//!
//! - **Fill phase.** Rounds of the trace are replayed one after another
//!   *without* retiring earlier rounds: no cleanup deletes of the previous
//!   round's sessions and no memory clear between rounds (session ids of
//!   round k are [`round_session_id`]'s `id#k`; memory targets are numbered
//!   afresh each round, as in `replay`). The phase ends with the first
//!   operation that the engine answers [`OpError::Full`] (an append, a
//!   memory store or update, a profile write). Its batch or item is dropped.
//! - **Full phase.** The rounds go on for as many operations again as the
//!   fill phase took. Whenever an append is refused with `Full`, the oldest
//!   live session (by its first append; the session being appended to last)
//!   is deleted, as a user following the warning would, and the append is
//!   tried again, until it lands or no other session is left.
//!
//! Every `history` is checked against the model of live sessions as in
//! `replay`; the fill workload acts on `Full` instead of counting it as an
//! error: the report's `errors` are the other failures, plus appends that
//! found no session left to delete. Memory stores, updates and profile writes
//! refused with `Full` are counted per phase (`other_full`).
//!
//! Live user bytes are the bodies of the model's live session records (after
//! compaction), the contents of the live memory items (the items the engine
//! lists at the first `Full`; during the run, the items the model knows),
//! and the current profile bodies. `capacity_fraction` is what they were at
//! the first `Full`, over the partition size.
//!
//! clawmem's session table in RAM is a working set over the sessions on
//! flash, sized at build time: a fill of a 1 MiB to 4 MiB partition with
//! `bfcl-multi-turn.jsonl` holds hundreds to about 1,500 live sessions,
//! whatever the table. The fill workload uses a `Store<_, 4096>`
//! ([`FILL_SESSIONS`], as the figures of earlier releases did; `--sessions`
//! picks another of [`SESSION_TABLES`], 32 as the firmware example keeps).
//! `TooManySessions` stays an error, never `Full`.

use std::collections::{BTreeMap, HashMap};
use std::fmt;
use std::path::Path;

use plotters::prelude::*;
use serde::Serialize;

use crate::compare::{Engine, Skipped, PALETTE};
use crate::flash::SimFlash;
use crate::model::Preset;
use crate::nor::{
    Esp32EncryptedFlash, Esp32Flash, GenericFlash, Nrf52Flash, Stm32h7Flash, Stm32l4Flash,
};
use crate::peers;
use crate::replay::{
    build_report, compact_model, compare as diff, round_session_id, At, ClawmemDriver,
    CleaningCounts, Driver, ItemHandle, MemoryChange, MemoryItem, OpError, PartitionUse,
    ReplayError, ReplayOptions, Report, SimBacked, Tally,
};
use crate::trace::{Op, ProfileName, Trace, TraceRecord};

/// clawmem's session table in the fill workload.
pub const FILL_SESSIONS: usize = 4096;

/// The session tables `--sessions` offers (each is its own build of the
/// store).
pub const SESSION_TABLES: [usize; 5] = [32, 512, 1024, 2048, 4096];

/// Fullness step of the fill phase's WA windows (2% of the partition).
const FILL_WINDOW: f64 = 0.02;
/// Windows of the full phase (each `fill ops / FULL_WINDOWS` operations).
const FULL_WINDOWS: u64 = 50;
/// Rounds in a row that may end without more live data before the run
/// gives up on filling the partition.
const STALL_ROUNDS: u32 = 3;

/// What the flash did in one phase.
#[derive(Clone, Copy, Debug, Default, PartialEq, Serialize)]
pub struct PhaseStats {
    /// Trace operations replayed.
    pub ops: u64,
    /// Payload acknowledged (as the report's `user_bytes`).
    pub user_bytes: u64,
    /// Bytes programmed.
    pub programmed_bytes: u64,
    /// `programmed_bytes / user_bytes` (null without user bytes).
    pub program_wa: Option<f64>,
    /// Sector erases.
    pub erases: u64,
    /// Bytes erased.
    pub erased_bytes: u64,
    /// Appends refused with `Full` (each try counts).
    pub refused_appends: u64,
    /// Memory stores and updates, profile writes and deletes refused with
    /// `Full`.
    pub other_full: u64,
    /// The live user bytes over the partition size after each operation,
    /// averaged over the phase (the full phase only: how full the engine
    /// keeps the partition while the oldest sessions are deleted to make
    /// room; null in the fill phase).
    pub mean_live_fraction: Option<f64>,
    /// The least of them.
    pub min_live_fraction: Option<f64>,
}

/// What appends refused with `Full` cost, each measured around the refused
/// call alone (before any delete and retry).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize)]
pub struct RefusedCost {
    /// Refused appends, both phases.
    pub count: u64,
    /// Bytes they programmed, in total.
    pub programmed_bytes_total: u64,
    /// Most bytes one of them programmed.
    pub programmed_bytes_max: u64,
    /// Sectors they erased, in total.
    pub erases_total: u64,
    /// Most sectors one of them erased.
    pub erases_max: u64,
}

/// One point of the WA-against-fullness curve.
#[derive(Clone, Copy, Debug, PartialEq, Serialize)]
pub struct CurvePoint {
    /// `"fill"` or `"full"`.
    pub phase: &'static str,
    /// Live user bytes over the partition size at the window's end.
    pub fullness: f64,
    /// Program WA of the window.
    pub program_wa: f64,
    /// Operations in the window.
    pub ops: u64,
}

/// The fill workload's figures for one engine (the `fill` object of the
/// report).
#[derive(Clone, Debug, Default, PartialEq, Serialize)]
pub struct FillReport {
    /// clawmem's session table (null for the peers).
    pub session_table: Option<usize>,
    /// Whether the engine answered `Full` at all.
    pub reached_full: bool,
    /// Where the first `Full` came, and what the engine said.
    pub first_full: Option<String>,
    /// Why the fill stopped without a `Full`, if it did.
    pub not_full_reason: Option<String>,
    /// Live user bytes at the first `Full` over the partition size.
    pub capacity_fraction: Option<f64>,
    /// How the engine divided the partition at the first `Full`, if it can
    /// tell (clawmem): what the capacity fraction leaves out is there.
    pub partition_at_full: Option<PartitionUse>,
    /// Live user bytes at the first `Full`.
    pub live_bytes: u64,
    /// Of which session record bodies.
    pub live_session_bytes: u64,
    /// Of which memory item contents.
    pub live_memory_bytes: u64,
    /// Of which profile bodies.
    pub live_profile_bytes: u64,
    /// Live sessions at the first `Full`.
    pub live_sessions: u64,
    /// Rounds started.
    pub rounds: u32,
    /// The fill phase, up to and with the first `Full` (the format not
    /// included).
    pub fill_phase: PhaseStats,
    /// The full phase.
    pub full_phase: PhaseStats,
    /// What refused appends cost.
    pub refused_appends: RefusedCost,
    /// Oldest sessions deleted to make room for a refused append.
    pub oldest_session_deletes: u64,
    /// Appends still refused with no other session left to delete.
    pub unplaced_appends: u64,
    /// Program WA against fullness: per 2% of fullness in the fill phase,
    /// per 1/50 of the fill phase's operations in the full phase.
    pub curve: Vec<CurvePoint>,
    /// What collecting the tail cost in the full phase, against what the
    /// live fraction of the sectors it cleaned forces (clawmem with the
    /// feature `sector-table`; null otherwise).
    pub full_phase_cleaning: Option<CleaningFigures>,
    /// Where the dead bytes the engine counted were when it refused an
    /// append in the full phase (clawmem with the feature `sector-table`;
    /// null otherwise).
    pub full_phase_dead_at_refusals: Option<DeadAtRefusals>,
}

/// The dead bytes an engine counted at the full phase's refused appends,
/// averaged over them: in the sectors in use, and in the 8 oldest, which
/// the tail's collection meets next. Lower bounds (the counts never
/// overstate).
#[derive(Clone, Copy, Debug, Default, PartialEq, Serialize)]
pub struct DeadAtRefusals {
    /// Refused appends sampled.
    pub refusals: u64,
    /// Dead bytes over the bytes of the sectors in use, averaged.
    pub mean_dead_fraction: f64,
    /// Dead bytes over the bytes of the 8 oldest sectors in use, averaged.
    pub mean_tail_dead_fraction: f64,
}

/// The sums [`DeadAtRefusals`] averages, gathered refusal by refusal.
#[derive(Default)]
struct RefusalSums {
    refusals: u64,
    dead_fraction: f64,
    tail_dead_fraction: f64,
}

impl RefusalSums {
    /// Samples how the engine divides its partition at a refusal, if it
    /// counts dead bytes.
    fn add(&mut self, p: &PartitionUse) {
        let (Some(dead), Some(tail)) = (p.dead_bytes, p.tail_dead_bytes) else {
            return;
        };
        let bytes = |sectors: u32| (u64::from(sectors) * u64::from(p.sector_bytes)).max(1) as f64;
        self.refusals += 1;
        self.dead_fraction += dead as f64 / bytes(p.used_sectors);
        self.tail_dead_fraction += tail as f64 / bytes(p.used_sectors.min(8));
    }

    /// The means, if any refusal was sampled.
    fn means(&self) -> Option<DeadAtRefusals> {
        let n = self.refusals as f64;
        (self.refusals > 0).then(|| DeadAtRefusals {
            refusals: self.refusals,
            mean_dead_fraction: self.dead_fraction / n,
            mean_tail_dead_fraction: self.tail_dead_fraction / n,
        })
    }
}

/// The full phase's cleaning against its bound (issue 12: "at most the
/// cleaning cost the live fraction allows, 1/(1 - live fraction of the
/// cleaned sectors), plus framing").
#[derive(Clone, Copy, Debug, Default, PartialEq, Serialize)]
pub struct CleaningFigures {
    /// The engine's counts over the phase.
    #[serde(flatten)]
    pub counts: CleaningCounts,
    /// `tail_live_bytes` over the payload of the sectors released.
    pub tail_live_fraction: Option<f64>,
    /// `1 / (1 - tail_live_fraction)`, plus the framing the fill phase
    /// paid (its program WA less 1): the program WA the full phase would
    /// show if cleaning copied only what lived in the sectors it cleaned.
    pub bound_program_wa: Option<f64>,
}

impl CleaningFigures {
    fn of(counts: CleaningCounts, fill_wa: Option<f64>) -> CleaningFigures {
        let live = ratio(counts.tail_live_bytes, counts.tail_payload_bytes);
        let bound = match (live, fill_wa) {
            (Some(l), Some(w)) if l < 1.0 => Some(1.0 / (1.0 - l) + (w - 1.0)),
            _ => None,
        };
        CleaningFigures {
            counts,
            tail_live_fraction: live,
            bound_program_wa: bound,
        }
    }
}

/// A fill run: the replay report (its keys at the top level) and the fill
/// figures under `fill`.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct FillRun {
    /// The report of the whole run, as `replay` gives it.
    #[serde(flatten)]
    pub report: Report,
    /// The fill workload's figures.
    pub fill: FillReport,
}

/// How to run the fill workload.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct FillOptions {
    /// clawmem's session table (one of [`SESSION_TABLES`]).
    pub sessions: usize,
    /// Stop after this many rounds if the engine has not answered `Full`
    /// by then (`--fill --rounds N`; `compare_fill` stops every engine so):
    /// every round's sessions kept, a workload of N times the trace's
    /// sessions on a large partition.
    pub max_rounds: Option<u32>,
}

impl Default for FillOptions {
    fn default() -> Self {
        FillOptions {
            sessions: FILL_SESSIONS,
            max_rounds: None,
        }
    }
}

// ---- flash counters ------------------------------------------------------------

#[derive(Clone, Copy, Debug, Default)]
struct Counters {
    programmed: u64,
    erases: u64,
    erased: u64,
}

fn counters<D: Driver>(d: &D) -> Counters {
    let s = d.flash().stats();
    Counters {
        programmed: s.programmed_bytes,
        erases: s.erases,
        erased: s.erased_bytes,
    }
}

fn ratio(num: u64, den: u64) -> Option<f64> {
    (den > 0).then(|| num as f64 / den as f64)
}

// ---- the live data -----------------------------------------------------------

/// What the engine should hold: the model of sessions (with their order of
/// first append), memory items and profiles.
#[derive(Default)]
struct Live<'t> {
    sessions: HashMap<String, Vec<&'t TraceRecord>>,
    session_bytes: u64,
    /// First-append sequence -> session, oldest first.
    order: BTreeMap<u64, String>,
    seq_of: HashMap<String, u64>,
    next_seq: u64,
    /// Live item -> content bytes.
    items: HashMap<ItemHandle, u64>,
    profiles: [u64; 4],
}

fn profile_slot(name: ProfileName) -> usize {
    match name {
        ProfileName::Soul => 0,
        ProfileName::Identity => 1,
        ProfileName::User => 2,
        ProfileName::Agents => 3,
    }
}

fn body_bytes(records: &[&TraceRecord]) -> u64 {
    records.iter().map(|r| r.body.len() as u64).sum()
}

impl<'t> Live<'t> {
    fn memory_bytes(&self) -> u64 {
        self.items.values().sum()
    }

    fn profile_bytes(&self) -> u64 {
        self.profiles.iter().sum()
    }

    fn total(&self) -> u64 {
        self.session_bytes + self.memory_bytes() + self.profile_bytes()
    }

    /// An acknowledged append (compacted afterwards if `compacted`).
    fn appended(&mut self, id: &str, records: &'t [TraceRecord], compacted: bool) {
        if !self.sessions.contains_key(id) {
            let seq = self.next_seq;
            self.next_seq += 1;
            self.order.insert(seq, id.to_string());
            self.seq_of.insert(id.to_string(), seq);
        }
        let model = self.sessions.entry(id.to_string()).or_default();
        let before = body_bytes(model);
        model.extend(records.iter());
        if compacted {
            compact_model(model);
        }
        let after = body_bytes(model);
        self.session_bytes = self.session_bytes + after - before;
    }

    fn deleted(&mut self, id: &str) {
        if let Some(model) = self.sessions.remove(id) {
            self.session_bytes -= body_bytes(&model);
        }
        if let Some(seq) = self.seq_of.remove(id) {
            self.order.remove(&seq);
        }
    }

    /// The oldest live session other than `except`, else `except` itself
    /// if it is live.
    fn oldest(&self, except: &str) -> Option<String> {
        self.order
            .values()
            .find(|s| *s != except)
            .or_else(|| self.order.values().find(|s| *s == except))
            .cloned()
    }
}

/// What a memory target names (as the replayer's).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Target {
    Live(ItemHandle),
    Gone,
    Unsupported,
}

fn retarget(targets: &mut [Target], item: ItemHandle, now: Target) {
    for x in targets.iter_mut().filter(|x| **x == Target::Live(item)) {
        *x = now;
    }
}

// ---- the run ---------------------------------------------------------------------

#[derive(Clone, Copy, PartialEq, Eq)]
enum Phase {
    Fill,
    Full,
}

struct Filler<'a, 't, D: Driver> {
    driver: &'a mut D,
    t: Tally,
    live: Live<'t>,
    phase: Phase,
    /// Stats of the phase under way.
    cur: PhaseStats,
    refused: RefusedCost,
    /// Where the dead bytes were at the full phase's refused appends.
    at_refusals: RefusalSums,
    deletes: u64,
    unplaced: u64,
    /// The first `Full` of the run (where, what).
    first_full: Option<String>,
}

impl<'t, D: Driver> Filler<'_, 't, D> {
    fn full(&mut self, at: &At<'_>, e: &OpError) {
        if self.first_full.is_none() {
            self.first_full = Some(format!("{at}: {e}"));
        }
    }

    /// An append, with the full phase's delete and retry.
    fn append(&mut self, at: &At<'_>, id: &str, records: &'t [TraceRecord], turn_completed: bool) {
        loop {
            let before = counters(self.driver);
            let result = self.driver.append(id, records, turn_completed);
            match result {
                Ok(out) => {
                    self.t.user_bytes += records.iter().map(|r| r.body.len() as u64).sum::<u64>();
                    if out.compacted {
                        self.t.compactions += 1;
                    }
                    self.live.appended(id, records, out.compacted);
                    return;
                }
                Err(OpError::Blocked) => {
                    self.t.blocked += 1;
                    self.live.deleted(id);
                    if let Err(e) = self.driver.session_delete(id) {
                        self.t.failed(at, e);
                    }
                    return;
                }
                Err(e @ OpError::Full(_)) => {
                    let after = counters(self.driver);
                    let (p, x) = (
                        after.programmed - before.programmed,
                        after.erases - before.erases,
                    );
                    let r = &mut self.refused;
                    r.count += 1;
                    r.programmed_bytes_total += p;
                    r.programmed_bytes_max = r.programmed_bytes_max.max(p);
                    r.erases_total += x;
                    r.erases_max = r.erases_max.max(x);
                    self.cur.refused_appends += 1;
                    self.full(at, &e);
                    if self.phase == Phase::Full {
                        if let Some(p) = self.driver.partition() {
                            self.at_refusals.add(&p);
                        }
                    }
                    if self.phase == Phase::Fill {
                        // The batch is dropped; the fill phase ends here.
                        return;
                    }
                    let Some(victim) = self.live.oldest(id) else {
                        self.unplaced += 1;
                        self.t.failed(
                            at,
                            OpError::Failed(format!("{e}, and no session is left to delete")),
                        );
                        return;
                    };
                    self.deletes += 1;
                    self.live.deleted(&victim);
                    if let Err(e) = self.driver.session_delete(&victim) {
                        self.t.failed(at, e);
                        return;
                    }
                }
                Err(e) => {
                    self.t.failed(at, e);
                    return;
                }
            }
        }
    }

    /// A failure of any other write: `Full` is counted, the rest as the
    /// replayer does.
    fn write_failed(&mut self, at: &At<'_>, e: OpError) {
        if matches!(e, OpError::Full(_)) {
            self.cur.other_full += 1;
            self.full(at, &e);
        } else {
            self.t.failed(at, e);
        }
    }

    fn step(&mut self, op: &'t Op, round: u32, at: &At<'_>, targets: &mut Vec<Target>) {
        match op {
            Op::Append {
                session,
                records,
                turn_completed,
            } => {
                if *turn_completed {
                    self.t.turns += 1;
                }
                let id = round_session_id(session, round);
                self.append(at, &id, records, *turn_completed);
            }
            Op::History { session } => {
                let id = round_session_id(session, round);
                match self.driver.history(&id) {
                    Ok(got) => {
                        self.t.history_checks += 1;
                        let want = self
                            .live
                            .sessions
                            .get(&id)
                            .map_or(&[][..], |v| v.as_slice());
                        if let Some(d) = diff(want, &got) {
                            self.t.history_mismatches += 1;
                            if self.t.first_mismatch.is_none() {
                                self.t.first_mismatch = Some(format!("{at} {id}: {d}"));
                            }
                        }
                    }
                    Err(e) => self.t.failed(at, e),
                }
            }
            Op::SessionDelete { session } => {
                let id = round_session_id(session, round);
                match self.driver.session_delete(&id) {
                    Ok(()) => self.live.deleted(&id),
                    Err(e) => self.write_failed(at, e),
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
                let target = match self.driver.memory_store(&item) {
                    Ok(stored) => {
                        self.t.user_bytes += content.len() as u64;
                        if !stored.duplicate {
                            self.live.items.insert(stored.item, content.len() as u64);
                        }
                        Target::Live(stored.item)
                    }
                    Err(OpError::Unsupported) => {
                        self.t.unsupported_ops += 1;
                        Target::Unsupported
                    }
                    Err(e) => {
                        self.write_failed(at, e);
                        Target::Gone
                    }
                };
                targets.push(target);
            }
            Op::MemoryRecall { labels, limit } => {
                if let Err(e) = self.driver.memory_recall(labels, *limit) {
                    self.t.failed(at, e);
                }
            }
            Op::MemoryUpdate {
                target,
                content,
                tags,
                keywords,
            } => {
                let Some(item) = self.live_target(targets, *target) else {
                    return;
                };
                let change = MemoryChange {
                    content: content.as_deref(),
                    tags: tags.as_deref(),
                    keywords: keywords.as_deref(),
                };
                match self.driver.memory_update(item, &change) {
                    Ok(newest) => {
                        self.t.user_bytes += content.as_ref().map_or(0, |c| c.len() as u64);
                        if newest != item {
                            let old = self.live.items.remove(&item).unwrap_or(0);
                            let len = content.as_ref().map_or(old, |c| c.len() as u64);
                            // A duplicate keeps its own content.
                            self.live.items.entry(newest).or_insert(len);
                        } else if let Some(c) = content {
                            self.live.items.insert(item, c.len() as u64);
                        }
                        retarget(targets, item, Target::Live(newest));
                    }
                    Err(OpError::Evicted) => {
                        self.t.skipped += 1;
                        self.live.items.remove(&item);
                        retarget(targets, item, Target::Gone);
                    }
                    Err(e) => self.write_failed(at, e),
                }
            }
            Op::MemoryForget { target } => {
                let Some(item) = self.live_target(targets, *target) else {
                    return;
                };
                match self.driver.memory_forget(item) {
                    Ok(()) => {
                        self.live.items.remove(&item);
                        retarget(targets, item, Target::Gone);
                    }
                    Err(OpError::Evicted) => {
                        self.t.skipped += 1;
                        self.live.items.remove(&item);
                        retarget(targets, item, Target::Gone);
                    }
                    Err(e) => self.write_failed(at, e),
                }
            }
            Op::MemoryList {} => {
                if let Err(e) = self.driver.memory_list() {
                    self.t.failed(at, e);
                }
            }
            Op::ProfileWrite { name, body } => match self.driver.profile_write(*name, body) {
                Ok(()) => {
                    self.t.user_bytes += body.len() as u64;
                    self.live.profiles[profile_slot(*name)] = body.len() as u64;
                }
                Err(e) => self.write_failed(at, e),
            },
            Op::ProfileRead { name } => {
                if let Err(e) = self.driver.profile_read(*name) {
                    self.t.failed(at, e);
                }
            }
            Op::Remount {} => {
                if let Err(e) = self.driver.remount() {
                    self.t.failed(at, e);
                }
            }
        }
    }

    fn live_target(&mut self, targets: &[Target], k: usize) -> Option<ItemHandle> {
        match targets.get(k) {
            Some(Target::Live(h)) => Some(*h),
            Some(Target::Unsupported) => {
                self.t.unsupported_ops += 1;
                None
            }
            _ => {
                self.t.skipped += 1;
                None
            }
        }
    }

    /// Keeps only the items the engine lists (it may have evicted some).
    fn prune_items(&mut self) {
        if let Ok(listed) = self.driver.memory_list() {
            self.live.items.retain(|h, _| listed.contains(h));
        }
    }

    fn fullness(&self, capacity: u64) -> f64 {
        self.live.total() as f64 / capacity as f64
    }
}

/// Where a window of the curve started.
#[derive(Clone, Copy)]
struct Window {
    user: u64,
    programmed: u64,
    ops: u64,
}

impl Window {
    /// Ends the window at (`user`, `programmed`, `ops`): its program WA
    /// becomes a point of the curve at `fullness`, and the next window
    /// starts there.
    fn close(
        &mut self,
        curve: &mut Vec<CurvePoint>,
        phase: &'static str,
        fullness: f64,
        (user, programmed, ops): (u64, u64, u64),
    ) {
        if let Some(wa) = ratio(programmed - self.programmed, user - self.user) {
            curve.push(CurvePoint {
                phase,
                fullness,
                program_wa: wa,
                ops: ops - self.ops,
            });
        }
        *self = Window {
            user,
            programmed,
            ops,
        };
    }
}

/// The full phase's [`CleaningFigures`], from the counts at its start and
/// end (`None` if the engine does not tell).
fn cleaning_figures(
    start: Option<CleaningCounts>,
    end: Option<CleaningCounts>,
    fill_wa: Option<f64>,
) -> Option<CleaningFigures> {
    Some(CleaningFigures::of(end?.since(&start?), fill_wa))
}

fn close_phase(s: &mut PhaseStats, start: Counters, end: Counters, user: u64, ops: u64) {
    s.ops = ops;
    s.user_bytes = user;
    s.programmed_bytes = end.programmed - start.programmed;
    s.erases = end.erases - start.erases;
    s.erased_bytes = end.erased - start.erased;
    s.program_wa = ratio(s.programmed_bytes, user);
}

/// Runs the fill workload of `trace` through `driver` (formatted, empty) and
/// reports. `progress` is called after every operation with (done, an
/// estimate of the total: twice the fill phase).
pub fn fill<D: Driver>(
    driver: &mut D,
    trace: &Trace,
    opts: &ReplayOptions,
    progress: &mut dyn FnMut(u64, u64),
) -> FillRun {
    fill_rounds(driver, trace, opts, None, progress)
}

/// [`fill`], stopped after `max_rounds` rounds if the engine has not
/// answered `Full` by then (the report's `not_full_reason` says so).
pub fn fill_rounds<D: Driver>(
    driver: &mut D,
    trace: &Trace,
    opts: &ReplayOptions,
    max_rounds: Option<u32>,
    progress: &mut dyn FnMut(u64, u64),
) -> FillRun {
    // Every call goes through the timer, as in `replay` (`crate::latency`).
    let mut timed = crate::latency::Timed::new(driver, opts.run.idle);
    let driver = &mut timed;
    let capacity = driver.flash().model().geometry.capacity() as u64;
    let wear_before = driver.flash().stats().erase_counts.clone();
    let mut f = Filler {
        driver,
        t: Tally::default(),
        live: Live::default(),
        phase: Phase::Fill,
        cur: PhaseStats::default(),
        refused: RefusedCost::default(),
        at_refusals: RefusalSums::default(),
        deletes: 0,
        unplaced: 0,
        first_full: None,
    };
    let mut rep = FillReport::default();
    let mut phase_start = counters(f.driver);
    let mut cleaning_start = f.driver.cleaning();
    // The live fraction after each operation of the full phase.
    let (mut live_sum, mut live_min) = (0f64, f64::INFINITY);
    let mut phase_user = 0u64;
    let mut phase_ops = 0u64;
    let mut fill_ops = 0u64;
    let mut win = Window {
        user: 0,
        programmed: phase_start.programmed,
        ops: 0,
    };
    let mut next_mark = FILL_WINDOW;
    let mut round = 0u32;
    let mut stalled = 0u32;
    let has_append = trace.ops.iter().any(|o| matches!(o.op, Op::Append { .. }));
    if !has_append {
        rep.not_full_reason = Some("the trace has no append".into());
    }
    'rounds: loop {
        if !has_append {
            break;
        }
        rep.rounds = round + 1;
        let live_at_start = f.live.total();
        let mut targets: Vec<Target> = Vec::with_capacity(trace.store_count());
        for top in &trace.ops {
            let at = At {
                file: &trace.file,
                line: top.line,
                round,
                op: top.op.name(),
            };
            let user_before = f.t.user_bytes;
            f.t.ops += 1;
            phase_ops += 1;
            f.step(&top.op, round, &at, &mut targets);
            phase_user += f.t.user_bytes - user_before;
            let now = counters(f.driver);
            match f.phase {
                Phase::Fill => {
                    let fullness = f.fullness(capacity);
                    let hit = f.first_full.is_some();
                    if fullness >= next_mark || hit {
                        let at = (f.t.user_bytes, now.programmed, phase_ops);
                        win.close(&mut rep.curve, "fill", fullness, at);
                        next_mark = ((fullness / FILL_WINDOW).floor() + 1.0) * FILL_WINDOW;
                    }
                    if hit {
                        f.prune_items();
                        let now = counters(f.driver);
                        rep.reached_full = true;
                        rep.first_full = f.first_full.clone();
                        rep.live_session_bytes = f.live.session_bytes;
                        rep.live_memory_bytes = f.live.memory_bytes();
                        rep.live_profile_bytes = f.live.profile_bytes();
                        rep.live_bytes = f.live.total();
                        rep.live_sessions = f.live.sessions.len() as u64;
                        rep.capacity_fraction = Some(rep.live_bytes as f64 / capacity as f64);
                        rep.partition_at_full = f.driver.partition();
                        cleaning_start = f.driver.cleaning();
                        close_phase(&mut f.cur, phase_start, now, phase_user, phase_ops);
                        rep.fill_phase = f.cur;
                        fill_ops = phase_ops;
                        f.phase = Phase::Full;
                        f.cur = PhaseStats::default();
                        phase_start = now;
                        phase_user = 0;
                        phase_ops = 0;
                        win = Window {
                            user: f.t.user_bytes,
                            programmed: now.programmed,
                            ops: 0,
                        };
                    }
                    progress(f.t.ops, f.t.ops * 2);
                }
                Phase::Full => {
                    let held = f.fullness(capacity);
                    live_sum += held;
                    live_min = live_min.min(held);
                    let every = (fill_ops / FULL_WINDOWS).max(1);
                    if phase_ops - win.ops >= every || phase_ops >= fill_ops {
                        let at = (f.t.user_bytes, now.programmed, phase_ops);
                        win.close(&mut rep.curve, "full", f.fullness(capacity), at);
                    }
                    progress(f.t.ops, fill_ops * 2);
                    if phase_ops >= fill_ops {
                        close_phase(&mut f.cur, phase_start, now, phase_user, phase_ops);
                        f.cur.mean_live_fraction = Some(live_sum / phase_ops as f64);
                        f.cur.min_live_fraction = Some(live_min);
                        rep.full_phase = f.cur;
                        rep.full_phase_cleaning = cleaning_figures(
                            cleaning_start,
                            f.driver.cleaning(),
                            rep.fill_phase.program_wa,
                        );
                        break 'rounds;
                    }
                }
            }
        }
        if f.phase == Phase::Fill {
            if f.live.total() <= live_at_start {
                stalled += 1;
                if stalled >= STALL_ROUNDS {
                    rep.not_full_reason = Some(format!(
                        "{STALL_ROUNDS} rounds in a row left no more live data ({} B live after round {round}) and the engine never answered Full",
                        f.live.total()
                    ));
                    break;
                }
            } else {
                stalled = 0;
            }
            if max_rounds.is_some_and(|m| round + 1 >= m) {
                rep.not_full_reason = Some(format!(
                    "stopped after {} rounds (--rounds) with {} sessions live",
                    round + 1,
                    f.live.sessions.len()
                ));
                break;
            }
        }
        round += 1;
    }
    if !rep.reached_full {
        let now = counters(f.driver);
        close_phase(&mut f.cur, phase_start, now, phase_user, phase_ops);
        rep.fill_phase = f.cur;
    }
    rep.refused_appends = f.refused;
    rep.full_phase_dead_at_refusals = f.at_refusals.means();
    rep.oldest_session_deletes = f.deletes;
    rep.unplaced_appends = f.unplaced;
    let t = std::mem::take(&mut f.t);
    let mut report = build_report(f.driver, trace, &opts.run, rep.rounds, &wear_before, t);
    report.latency = f.driver.report();
    FillRun { report, fill: rep }
}

// ---- the engines -----------------------------------------------------------------

fn fill_clawmem_n<F: SimBacked, const N: usize>(
    flash: SimFlash,
    trace: &Trace,
    opts: &ReplayOptions,
    max_rounds: Option<u32>,
    progress: &mut dyn FnMut(u64, u64),
) -> Result<FillRun, ReplayError> {
    let mut driver = ClawmemDriver::<F, N>::format(flash)?;
    let mut run = fill_rounds(&mut driver, trace, opts, max_rounds, progress);
    driver.flush()?;
    run.fill.session_table = Some(N);
    run.report.notes.push(format!(
        "fill workload: a session table of {N} (Store<_, {N}>), a working set over the sessions on flash; the full checkpoint lists every session ({} B at 32 B a session when it filled), which the reserve keeps room for",
        run.fill.live_sessions * 32
    ));
    Ok(run)
}

fn fill_clawmem_on<F: SimBacked>(
    flash: SimFlash,
    trace: &Trace,
    opts: &ReplayOptions,
    fopts: &FillOptions,
    progress: &mut dyn FnMut(u64, u64),
) -> Result<FillRun, ReplayError> {
    match fopts.sessions {
        32 => fill_clawmem_n::<F, 32>(flash, trace, opts, fopts.max_rounds, progress),
        512 => fill_clawmem_n::<F, 512>(flash, trace, opts, fopts.max_rounds, progress),
        1024 => fill_clawmem_n::<F, 1024>(flash, trace, opts, fopts.max_rounds, progress),
        2048 => fill_clawmem_n::<F, 2048>(flash, trace, opts, fopts.max_rounds, progress),
        4096 => fill_clawmem_n::<F, 4096>(flash, trace, opts, fopts.max_rounds, progress),
        n => Err(ReplayError(format!(
            "a session table of {n} is not built in; choose one of {SESSION_TABLES:?}"
        ))),
    }
}

/// Formats a fresh flash for `opts` and runs the fill workload through
/// clawmem (`Store<_, fopts.sessions>`).
pub fn fill_clawmem(
    trace: &Trace,
    opts: &ReplayOptions,
    fopts: &FillOptions,
    progress: &mut dyn FnMut(u64, u64),
) -> Result<FillRun, ReplayError> {
    let p = opts.preset;
    let model = p.model(opts.size_bytes.unwrap_or_else(|| p.default_capacity()))?;
    let flash = match &opts.image {
        Some(path) => SimFlash::create_file(model, path)?,
        None => SimFlash::new(model),
    };
    match p {
        Preset::Esp32 => fill_clawmem_on::<Esp32Flash>(flash, trace, opts, fopts, progress),
        Preset::Nrf52 => fill_clawmem_on::<Nrf52Flash>(flash, trace, opts, fopts, progress),
        Preset::Stm32l4 => fill_clawmem_on::<Stm32l4Flash>(flash, trace, opts, fopts, progress),
        Preset::Stm32h7 => fill_clawmem_on::<Stm32h7Flash>(flash, trace, opts, fopts, progress),
        Preset::Esp32Encrypted => {
            fill_clawmem_on::<Esp32EncryptedFlash>(flash, trace, opts, fopts, progress)
        }
        Preset::Generic => fill_clawmem_on::<GenericFlash>(flash, trace, opts, fopts, progress),
    }
}

fn fill_seqstore<F: SimBacked + embedded_storage::nor_flash::MultiwriteNorFlash>(
    flash: SimFlash,
    trace: &Trace,
    opts: &ReplayOptions,
    rounds: Option<u32>,
    progress: &mut dyn FnMut(u64, u64),
) -> Result<FillRun, String> {
    let mut d = peers::seqstore::SeqStorageDriver::<F>::new(flash)?;
    let mut run = fill_rounds(&mut d, trace, opts, rounds, progress);
    run.report.notes.push(
        "fill workload: a new session finding every session queue in use counts as Full".into(),
    );
    Ok(run)
}

/// The outcome of `compare --fill`: one [`FillRun`] per engine that ran.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct FillComparison {
    /// Runs, clawmem first.
    pub engines: Vec<FillRun>,
    /// Engines that could not run on this flash (or in this build).
    pub skipped: Vec<Skipped>,
}

/// Runs the fill workload of `trace` through every engine of `engines` on
/// a fresh flash of `opts`' preset and size. `progress` is called with the
/// engine's name, operations done and the estimated total.
pub fn compare_fill(
    trace: &Trace,
    opts: &ReplayOptions,
    fopts: &FillOptions,
    engines: &[Engine],
    progress: &mut dyn FnMut(&str, u64, u64),
) -> Result<FillComparison, ReplayError> {
    let mut out = FillComparison {
        engines: Vec::new(),
        skipped: Vec::new(),
    };
    let rounds = fopts.max_rounds;
    let p = opts.preset;
    let model = p.model(opts.size_bytes.unwrap_or_else(|| p.default_capacity()))?;
    for &engine in engines {
        let name = engine.name();
        let mut tick = |done, total| progress(name, done, total);
        let skip = |reason: String| Skipped {
            engine: name.into(),
            reason,
        };
        match engine {
            Engine::Clawmem => {
                let o = ReplayOptions {
                    image: None,
                    ..opts.clone()
                };
                out.engines.push(fill_clawmem(trace, &o, fopts, &mut tick)?);
            }
            Engine::EspClawFat => match peers::fat::driver(SimFlash::new(model.clone())) {
                Ok(mut d) => out
                    .engines
                    .push(fill_rounds(&mut d, trace, opts, rounds, &mut tick)),
                Err(reason) => out.skipped.push(skip(reason)),
            },
            #[cfg(feature = "littlefs")]
            Engine::EspClawLittlefs => {
                match peers::littlefs::driver(SimFlash::new(model.clone())) {
                    Ok(mut d) => out
                        .engines
                        .push(fill_rounds(&mut d, trace, opts, rounds, &mut tick)),
                    Err(reason) => out.skipped.push(skip(reason)),
                }
            }
            #[cfg(not(feature = "littlefs"))]
            Engine::EspClawLittlefs => out.skipped.push(skip(
                "built without the `littlefs` feature (littlefs2 needs libclang: \
                 apt-get install libclang-dev, then cargo build --features littlefs)"
                    .into(),
            )),
            Engine::SequentialStorage => {
                let flash = SimFlash::new(model.clone());
                let r = match p {
                    Preset::Esp32 => {
                        fill_seqstore::<Esp32Flash>(flash, trace, opts, rounds, &mut tick)
                    }
                    Preset::Nrf52 => {
                        fill_seqstore::<Nrf52Flash>(flash, trace, opts, rounds, &mut tick)
                    }
                    Preset::Generic => {
                        fill_seqstore::<GenericFlash>(flash, trace, opts, rounds, &mut tick)
                    }
                    Preset::Stm32l4 | Preset::Stm32h7 | Preset::Esp32Encrypted => Err(format!(
                        "the {} flash does not allow rewriting a word, and sequential-storage's \
                         queue pop and map remove need MultiwriteNorFlash",
                        model.name
                    )),
                };
                match r {
                    Ok(run) => out.engines.push(run),
                    Err(reason) => out.skipped.push(skip(reason)),
                }
            }
        }
    }
    Ok(out)
}

// ---- display -------------------------------------------------------------------

fn f2(v: Option<f64>) -> String {
    v.map_or_else(|| "-".into(), |v| format!("{v:.2}"))
}

fn f3(v: Option<f64>) -> String {
    v.map_or_else(|| "-".into(), |v| format!("{v:.3}"))
}

impl FillReport {
    fn phase_line(name: &str, s: &PhaseStats) -> String {
        format!(
            "{name}: {} ops, {} user B, {} B programmed (program WA {}), {} erases ({} B), {} appends refused, {} other writes refused",
            s.ops,
            s.user_bytes,
            s.programmed_bytes,
            f2(s.program_wa),
            s.erases,
            s.erased_bytes,
            s.refused_appends,
            s.other_full
        ) + &match (s.mean_live_fraction, s.min_live_fraction) {
            (Some(mean), Some(min)) => {
                format!("; live user bytes held {mean:.3} of the partition on average, {min:.3} at least")
            }
            _ => String::new(),
        }
    }
}

impl fmt::Display for FillReport {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        writeln!(f, "fill workload ({} rounds started)", self.rounds)?;
        if let Some(n) = self.session_table {
            writeln!(f, "  session table     {n}")?;
        }
        match &self.first_full {
            Some(at) => writeln!(f, "  first Full        {at}")?,
            None => writeln!(
                f,
                "  first Full        never: {}",
                self.not_full_reason.as_deref().unwrap_or("-")
            )?,
        }
        writeln!(
            f,
            "  capacity          {} of the partition: {} live user B ({} sessions: {} B, memory {} B, profiles {} B)",
            f3(self.capacity_fraction),
            self.live_bytes,
            self.live_sessions,
            self.live_session_bytes,
            self.live_memory_bytes,
            self.live_profile_bytes
        )?;
        if let Some(p) = &self.partition_at_full {
            let used = u64::from(p.used_sectors) * u64::from(p.sector_bytes);
            writeln!(
                f,
                "  partition at Full {} sectors of {} B: {} in use, {:.1}% of their bytes live user bytes (the rest framing, indexes, checkpoints, and deleted records not collected yet); {} free, {} of them reserved ({} B for memory and profiles)",
                p.sectors,
                p.sector_bytes,
                p.used_sectors,
                100.0 * self.live_bytes as f64 / used.max(1) as f64,
                p.sectors.saturating_sub(p.used_sectors),
                p.reserve_sectors,
                p.knowledge_reserve_bytes
            )?;
            if let (Some(dead), Some(half)) = (p.dead_bytes, p.half_dead_sectors) {
                writeln!(
                    f,
                    "  dead at Full (counted since the last mount, and what its checkpoints carried: a lower bound): {dead} B, {:.1}% of the sectors in use; {half} sectors at least half dead",
                    100.0 * dead as f64 / used.max(1) as f64
                )?;
            }
        }
        writeln!(f, "  {}", Self::phase_line("fill phase", &self.fill_phase))?;
        writeln!(f, "  {}", Self::phase_line("full phase", &self.full_phase))?;
        if let Some(d) = &self.full_phase_dead_at_refusals {
            writeln!(
                f,
                "  full-phase refusals {} sampled: {:.1}% of the sectors in use counted dead on average, {:.1}% of the 8 oldest (lower bounds)",
                d.refusals,
                100.0 * d.mean_dead_fraction,
                100.0 * d.mean_tail_dead_fraction
            )?;
        }
        if let Some(c) = &self.full_phase_cleaning {
            let n = &c.counts;
            writeln!(
                f,
                "  full-phase cleaning {} tail sectors released, {} live in them ({} B, bodies and objects); {} B more copied from later sectors, {} B of indexes, {} moves records; 1/(1 - live) + framing = {} against program WA {}",
                n.tail_releases,
                c.tail_live_fraction.map_or_else(|| "-".into(), |l| format!("{:.1}%", 100.0 * l)),
                n.tail_live_bytes,
                n.ahead_bytes,
                n.index_bytes,
                n.moves_records,
                f2(c.bound_program_wa),
                f2(self.full_phase.program_wa)
            )?;
        }
        let r = &self.refused_appends;
        writeln!(
            f,
            "  refused appends   {}: {} B programmed (max {} B), {} erases (max {})",
            r.count, r.programmed_bytes_total, r.programmed_bytes_max, r.erases_total, r.erases_max
        )?;
        writeln!(
            f,
            "  oldest deletes    {} ({} appends found no session left to delete)",
            self.oldest_session_deletes, self.unplaced_appends
        )
    }
}

impl fmt::Display for FillRun {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}", self.report)?;
        write!(f, "{}", self.fill)
    }
}

impl fmt::Display for FillComparison {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if let Some(r) = self.engines.first() {
            writeln!(
                f,
                "fill: trace {}  preset {}  {} KiB",
                r.report.trace,
                r.report.preset,
                r.report.capacity_bytes / 1024
            )?;
        }
        writeln!(
            f,
            "{:<18} {:>8} {:>7} {:>8} {:>7} {:>7} {:>8} {:>7} {:>11} {:>7} {:>8} {:>10} {:>9} {:>8} {:>7} {:>6} {:>6}",
            "engine",
            "capacity",
            "fill op",
            "fill WA",
            "fill er",
            "full op",
            "full WA",
            "full er",
            "full held",
            "refused",
            "ref B",
            "ref B max",
            "ref er",
            "ref emax",
            "deletes",
            "mism.",
            "errors"
        )?;
        for run in &self.engines {
            let (r, x) = (&run.report, &run.fill);
            let c = &x.refused_appends;
            writeln!(
                f,
                "{:<18} {:>8} {:>7} {:>8} {:>7} {:>7} {:>8} {:>7} {:>11} {:>7} {:>8} {:>10} {:>9} {:>8} {:>7} {:>6} {:>6}",
                r.engine,
                f3(x.capacity_fraction),
                x.fill_phase.ops,
                f2(x.fill_phase.program_wa),
                x.fill_phase.erases,
                x.full_phase.ops,
                f2(x.full_phase.program_wa),
                x.full_phase.erases,
                format!(
                    "{}/{}",
                    f2(x.full_phase.mean_live_fraction),
                    f2(x.full_phase.min_live_fraction)
                ),
                c.count,
                c.programmed_bytes_total,
                c.programmed_bytes_max,
                c.erases_total,
                c.erases_max,
                x.oldest_session_deletes,
                r.history_mismatches,
                r.errors
            )?;
        }
        for run in &self.engines {
            let (r, x) = (&run.report, &run.fill);
            match &x.first_full {
                Some(at) => writeln!(f, "{}: first Full at {at}", r.engine)?,
                None => writeln!(
                    f,
                    "{}: never Full: {}",
                    r.engine,
                    x.not_full_reason.as_deref().unwrap_or("-")
                )?,
            }
            if x.full_phase.other_full + x.fill_phase.other_full > 0 {
                writeln!(
                    f,
                    "{}: {} memory/profile writes refused with Full",
                    r.engine,
                    x.full_phase.other_full + x.fill_phase.other_full
                )?;
            }
            if let Some(m) = &r.first_mismatch {
                writeln!(f, "{}: first mismatch: {m}", r.engine)?;
            }
            if let Some(e) = &r.first_error {
                writeln!(f, "{}: first error: {e}", r.engine)?;
            }
        }
        for s in &self.skipped {
            writeln!(f, "{}: skipped: {}", s.engine, s.reason)?;
        }
        Ok(())
    }
}

// ---- the plot ---------------------------------------------------------------------

/// Writes an SVG of program WA against fullness (live user bytes over the
/// partition size), one line per run on a logarithmic WA axis: the fill
/// phase's windows joined, the full phase's windows as dots.
pub fn write_fill_plot(path: &Path, runs: &[&FillRun], title: &str) -> Result<(), String> {
    draw(path, runs, title).map_err(|e| format!("{}: {e}", path.display()))
}

fn draw(path: &Path, runs: &[&FillRun], title: &str) -> Result<(), Box<dyn std::error::Error>> {
    let ymax = runs
        .iter()
        .flat_map(|r| r.fill.curve.iter().map(|p| p.program_wa))
        .filter(|w| w.is_finite())
        .fold(1.0f64, f64::max);
    let root = SVGBackend::new(path, (960, 480)).into_drawing_area();
    root.fill(&WHITE)?;
    let mut chart = ChartBuilder::on(&root)
        .caption(
            format!("{title}: program WA against fullness"),
            ("sans-serif", 16),
        )
        .margin(12)
        .x_label_area_size(36)
        .y_label_area_size(60)
        .build_cartesian_2d(0f64..1f64, (0.5f64..ymax * 1.5).log_scale())?;
    chart
        .configure_mesh()
        .x_desc("live user bytes / partition size")
        .y_desc("program WA of the window (log)")
        .draw()?;
    for (i, run) in runs.iter().enumerate() {
        let color = PALETTE[i % PALETTE.len()];
        let x = &run.fill;
        let label = format!(
            "{}: capacity {}, WA fill {} / full {}",
            run.report.engine,
            f3(x.capacity_fraction),
            f2(x.fill_phase.program_wa),
            f2(x.full_phase.program_wa)
        );
        let pts = |phase: &'static str| {
            x.curve
                .iter()
                .filter(move |p| p.phase == phase && p.program_wa.is_finite())
                .map(|p| (p.fullness.min(1.0), p.program_wa))
        };
        chart
            .draw_series(LineSeries::new(pts("fill"), color.stroke_width(2)))?
            .label(label)
            .legend(move |(x, y)| {
                PathElement::new(vec![(x, y), (x + 20, y)], color.stroke_width(2))
            });
        chart.draw_series(pts("full").map(|p| Circle::new(p, 3, color.filled())))?;
    }
    chart
        .configure_series_labels()
        .background_style(WHITE.mix(0.8))
        .border_style(BLACK)
        .position(SeriesLabelPosition::UpperLeft)
        .draw()?;
    root.present()?;
    Ok(())
}
