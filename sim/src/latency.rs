//! Modelled device time per operation, and the idle work of `--idle`.
//!
//! [`Timed`] wraps the [`Driver`] that [`replay`](crate::replay::replay)
//! drives and reads the [`SimFlash`] counters before and after every call:
//! the difference of `device_time_us` is the time the flash was busy for
//! that operation under the preset's timing model (reads, programs and
//! erases; the engine's CPU time is not modelled), and the difference of
//! `erases` says whether the operation waited on an erase. Both are
//! deterministic. Samples are kept per kind of operation ([`Kind`]) and
//! summarised as count, p50, p99 and max in milliseconds
//! ([`LatencyReport`]).
//!
//! - Every call the replayer makes is counted under its kind, including
//!   the deletes the replayer makes itself (retiring the previous round, a
//!   blocked session) and the memory clears between rounds. A call that
//!   answers [`OpError::Unsupported`] did nothing and is not counted.
//! - `mount` is a [`Driver::remount`] (a clean power cycle), `format` the
//!   set-up before the replay: the device time already on the flash's
//!   counters when the replay starts, since every driver here formats (or
//!   first mounts) a blank flash just before (absent if that is zero).
//! - [`Driver::maintain`] calls (`--idle`) are not counted under any kind:
//!   they are idle time, summed apart (`maintain_calls`, `maintain_ms`,
//!   `maintain_erases`).
//!
//! When the harness is idle, with `--idle` ([`idle_after`]): an agent
//! sends the model its request right after reading the history, and waits
//! again after it stored what the model said (a final answer, which ends
//! the turn, or a tool call, while the tool runs). So the replayer calls
//! `maintain` once after every `history` operation, and once after every
//! `append` whose last record is an assistant record (`assistant_final` or
//! `assistant_tool`) or whose `turn_completed` is set; never after any other
//! operation. The call is made whether or not the operation succeeded.

use std::collections::BTreeMap;
use std::fmt;

use serde::Serialize;

use crate::flash::SimFlash;
use crate::replay::{
    AppendOutcome, Driver, EngineInfo, HistoryRecord, ItemHandle, MemoryChange, MemoryItem,
    MemoryStored, OpError, OpResult,
};
use crate::trace::{Op, ProfileName, RecordKind, TraceRecord};

/// The kinds of operation whose device time is measured.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Kind {
    /// [`Driver::append`].
    Append,
    /// [`Driver::history`].
    History,
    /// [`Driver::session_delete`].
    SessionDelete,
    /// [`Driver::memory_store`].
    MemoryStore,
    /// [`Driver::memory_recall`].
    MemoryRecall,
    /// [`Driver::memory_update`].
    MemoryUpdate,
    /// [`Driver::memory_forget`].
    MemoryForget,
    /// [`Driver::memory_list`].
    MemoryList,
    /// [`Driver::memory_clear`] (between rounds).
    MemoryClear,
    /// [`Driver::profile_write`].
    ProfileWrite,
    /// [`Driver::profile_read`].
    ProfileRead,
    /// [`Driver::remount`].
    Mount,
    /// The format (or first mount) before the replay.
    Format,
}

impl Kind {
    /// Every kind, in the order reports list them.
    pub const ALL: [Kind; 13] = [
        Kind::Append,
        Kind::History,
        Kind::SessionDelete,
        Kind::MemoryStore,
        Kind::MemoryRecall,
        Kind::MemoryUpdate,
        Kind::MemoryForget,
        Kind::MemoryList,
        Kind::MemoryClear,
        Kind::ProfileWrite,
        Kind::ProfileRead,
        Kind::Mount,
        Kind::Format,
    ];

    /// The kind's key in `latency_ms`.
    pub fn name(self) -> &'static str {
        match self {
            Kind::Append => "append",
            Kind::History => "history",
            Kind::SessionDelete => "session_delete",
            Kind::MemoryStore => "memory_store",
            Kind::MemoryRecall => "memory_recall",
            Kind::MemoryUpdate => "memory_update",
            Kind::MemoryForget => "memory_forget",
            Kind::MemoryList => "memory_list",
            Kind::MemoryClear => "memory_clear",
            Kind::ProfileWrite => "profile_write",
            Kind::ProfileRead => "profile_read",
            Kind::Mount => "mount",
            Kind::Format => "format",
        }
    }

    /// The position of a key in [`Kind::ALL`] (unknown keys last), for
    /// listing a `latency_ms` map in report order.
    pub fn rank(name: &str) -> usize {
        Kind::ALL
            .iter()
            .position(|k| k.name() == name)
            .unwrap_or(Kind::ALL.len())
    }
}

/// Whether `--idle` calls [`Driver::maintain`] after `op` (the rule is in
/// the module's docs).
pub fn idle_after(op: &Op) -> bool {
    match op {
        Op::History { .. } => true,
        Op::Append {
            records,
            turn_completed,
            ..
        } => {
            *turn_completed
                || records.last().is_some_and(|r| {
                    matches!(
                        r.kind,
                        RecordKind::AssistantFinal | RecordKind::AssistantTool
                    )
                })
        }
        _ => false,
    }
}

/// One kind's device times, in milliseconds.
#[derive(Clone, Copy, Debug, Default, PartialEq, Serialize)]
pub struct OpLatency {
    /// Calls measured.
    pub count: u64,
    /// Median (nearest rank).
    pub p50: f64,
    /// 99th percentile (nearest rank).
    pub p99: f64,
    /// Longest.
    pub max: f64,
    /// Sum of all calls.
    pub total: f64,
    /// Calls during which the flash erased at least one sector.
    pub with_erase: u64,
}

impl OpLatency {
    /// Summarises samples (device time in microseconds, any order).
    /// `with_erase` is left at 0.
    pub fn of(samples_us: &[f64]) -> OpLatency {
        let mut s: Vec<f64> = samples_us.to_vec();
        s.sort_by(f64::total_cmp);
        OpLatency {
            count: s.len() as u64,
            p50: ms(nearest_rank(&s, 0.50)),
            p99: ms(nearest_rank(&s, 0.99)),
            max: ms(s.last().copied().unwrap_or(0.0)),
            total: ms(s.iter().sum::<f64>()),
            with_erase: 0,
        }
    }
}

/// Microseconds as milliseconds, rounded to 0.1 us (the counters are sums
/// of floats; the rounding drops their noise, not the model's resolution).
fn ms(us: f64) -> f64 {
    (us * 10.0).round() / 10_000.0
}

/// The `q` quantile of sorted samples by the nearest-rank method: the
/// smallest sample with at least `q` of all samples at or below it (0
/// without samples).
fn nearest_rank(sorted: &[f64], q: f64) -> f64 {
    if sorted.is_empty() {
        return 0.0;
    }
    let rank = (q * sorted.len() as f64).ceil() as usize;
    sorted[rank.clamp(1, sorted.len()) - 1]
}

/// What a replay measured of device time; flattened into
/// [`Report`](crate::replay::Report)'s JSON.
#[derive(Clone, Debug, Default, PartialEq, Serialize)]
pub struct LatencyReport {
    /// Per kind of operation (the keys of [`Kind::name`]; a kind never
    /// called is absent).
    pub latency_ms: BTreeMap<String, OpLatency>,
    /// Appends during which the flash erased at least one sector.
    pub appends_with_erase: u64,
    /// Whether the replayer called `maintain` between requests (`--idle`).
    pub idle: bool,
    /// `maintain` calls made.
    pub maintain_calls: u64,
    /// Device time spent in them, in milliseconds (in no kind's figures).
    pub maintain_ms: f64,
    /// Sectors erased in them.
    pub maintain_erases: u64,
}

impl LatencyReport {
    /// The kinds measured, in report order.
    pub fn kinds(&self) -> impl Iterator<Item = (&str, &OpLatency)> {
        let mut v: Vec<(&str, &OpLatency)> = self
            .latency_ms
            .iter()
            .map(|(k, l)| (k.as_str(), l))
            .collect();
        v.sort_by_key(|(k, _)| Kind::rank(k));
        v.into_iter()
    }
}

impl fmt::Display for LatencyReport {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        writeln!(
            f,
            "device time per op (ms, modelled): {:>8} {:>9} {:>9} {:>9} {:>10}",
            "count", "p50", "p99", "max", "w/ erase"
        )?;
        for (k, l) in self.kinds() {
            writeln!(
                f,
                "  {k:<33} {:>8} {:>9.3} {:>9.3} {:>9.3} {:>10}",
                l.count, l.p50, l.p99, l.max, l.with_erase
            )?;
        }
        writeln!(f, "appends with erase  {}", self.appends_with_erase)?;
        if self.idle {
            writeln!(
                f,
                "maintain (--idle)   {} calls, {:.1} ms, {} erases (in no op's time)",
                self.maintain_calls, self.maintain_ms, self.maintain_erases
            )?;
        }
        Ok(())
    }
}

/// Per-kind samples while a replay runs.
#[derive(Clone, Debug, Default)]
struct Samples {
    us: Vec<f64>,
    with_erase: u64,
}

/// A [`Driver`] that measures the device time of every call of the driver
/// it wraps (see the module's docs) and otherwise passes everything on.
pub struct Timed<'a, D: Driver> {
    inner: &'a mut D,
    samples: BTreeMap<Kind, Samples>,
    idle: bool,
    maintain_calls: u64,
    maintain_us: f64,
    maintain_erases: u64,
}

impl<'a, D: Driver> Timed<'a, D> {
    /// Wraps `inner`; the device time already on its flash's counters is
    /// taken as the `format` before the replay. `idle`: whether the
    /// replayer will call `maintain` (for the report).
    pub fn new(inner: &'a mut D, idle: bool) -> Self {
        let mut samples = BTreeMap::new();
        let stats = inner.flash().stats();
        if stats.device_time_us > 0.0 {
            samples.insert(
                Kind::Format,
                Samples {
                    us: vec![stats.device_time_us],
                    with_erase: u64::from(stats.erases > 0),
                },
            );
        }
        Timed {
            inner,
            samples,
            idle,
            maintain_calls: 0,
            maintain_us: 0.0,
            maintain_erases: 0,
        }
    }

    fn counters(&self) -> (f64, u64) {
        let s = self.inner.flash().stats();
        (s.device_time_us, s.erases)
    }

    /// Runs `call` on the inner driver and files its device time under
    /// `kind`, unless it answered `Unsupported`.
    fn timed<T>(&mut self, kind: Kind, call: impl FnOnce(&mut D) -> OpResult<T>) -> OpResult<T> {
        let (t0, e0) = self.counters();
        let out = call(self.inner);
        if !matches!(out, Err(OpError::Unsupported)) {
            let (t1, e1) = self.counters();
            let s = self.samples.entry(kind).or_default();
            s.us.push((t1 - t0).max(0.0));
            s.with_erase += u64::from(e1 > e0);
        }
        out
    }

    /// The summary of everything measured so far.
    pub fn report(&self) -> LatencyReport {
        let latency_ms = self
            .samples
            .iter()
            .map(|(k, s)| {
                let l = OpLatency {
                    with_erase: s.with_erase,
                    ..OpLatency::of(&s.us)
                };
                (k.name().to_string(), l)
            })
            .collect();
        LatencyReport {
            latency_ms,
            appends_with_erase: self.samples.get(&Kind::Append).map_or(0, |s| s.with_erase),
            idle: self.idle,
            maintain_calls: self.maintain_calls,
            maintain_ms: ms(self.maintain_us),
            maintain_erases: self.maintain_erases,
        }
    }
}

impl<D: Driver> Driver for Timed<'_, D> {
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
        self.timed(Kind::Append, |d| d.append(session, records, turn_completed))
    }

    fn history(&mut self, session: &str) -> OpResult<Vec<HistoryRecord>> {
        self.timed(Kind::History, |d| d.history(session))
    }

    fn session_delete(&mut self, session: &str) -> OpResult<()> {
        self.timed(Kind::SessionDelete, |d| d.session_delete(session))
    }

    fn memory_store(&mut self, item: &MemoryItem<'_>) -> OpResult<MemoryStored> {
        self.timed(Kind::MemoryStore, |d| d.memory_store(item))
    }

    fn memory_recall(&mut self, labels: &[String], limit: u32) -> OpResult<Vec<ItemHandle>> {
        self.timed(Kind::MemoryRecall, |d| d.memory_recall(labels, limit))
    }

    fn memory_update(
        &mut self,
        item: ItemHandle,
        change: &MemoryChange<'_>,
    ) -> OpResult<ItemHandle> {
        self.timed(Kind::MemoryUpdate, |d| d.memory_update(item, change))
    }

    fn memory_forget(&mut self, item: ItemHandle) -> OpResult<()> {
        self.timed(Kind::MemoryForget, |d| d.memory_forget(item))
    }

    fn memory_list(&mut self) -> OpResult<Vec<ItemHandle>> {
        self.timed(Kind::MemoryList, |d| d.memory_list())
    }

    fn profile_write(&mut self, name: ProfileName, body: &str) -> OpResult<()> {
        self.timed(Kind::ProfileWrite, |d| d.profile_write(name, body))
    }

    fn profile_read(&mut self, name: ProfileName) -> OpResult<Option<Vec<u8>>> {
        self.timed(Kind::ProfileRead, |d| d.profile_read(name))
    }

    fn remount(&mut self) -> OpResult<()> {
        self.timed(Kind::Mount, |d| d.remount())
    }

    fn memory_clear(&mut self) -> OpResult<()> {
        self.timed(Kind::MemoryClear, |d| d.memory_clear())
    }

    fn maintain(&mut self) -> OpResult<()> {
        let (t0, e0) = self.counters();
        let out = self.inner.maintain();
        let (t1, e1) = self.counters();
        self.maintain_calls += 1;
        self.maintain_us += (t1 - t0).max(0.0);
        self.maintain_erases += e1.saturating_sub(e0);
        out
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

/// The latency part of a comparison: one row per kind, one column per
/// engine (`p50/p99/max` in ms; the count follows each cell when the
/// engines' counts differ), then the appends that waited on an erase and
/// the idle work.
pub fn write_comparison_table(
    f: &mut fmt::Formatter<'_>,
    engines: &[(&str, &LatencyReport)],
) -> fmt::Result {
    if engines.is_empty() {
        return Ok(());
    }
    let mut kinds: Vec<&str> = engines
        .iter()
        .flat_map(|(_, r)| r.latency_ms.keys().map(String::as_str))
        .collect();
    kinds.sort_by_key(|k| (Kind::rank(k), *k));
    kinds.dedup();
    const CELL: usize = 26;
    writeln!(
        f,
        "modelled device time per op, ms: p50/p99/max (op count in brackets)"
    )?;
    write!(f, "{:<24}", "op")?;
    for (name, _) in engines {
        write!(f, " {name:>CELL$}")?;
    }
    writeln!(f)?;
    for k in kinds {
        let counts: Vec<u64> = engines
            .iter()
            .map(|(_, r)| r.latency_ms.get(k).map_or(0, |l| l.count))
            .collect();
        let same = counts.windows(2).all(|w| w[0] == w[1]);
        let label = if same {
            format!("{k} ({})", counts[0])
        } else {
            k.to_string()
        };
        write!(f, "{label:<24}")?;
        for (_, r) in engines {
            let cell = match r.latency_ms.get(k) {
                Some(l) if same => format!("{:.2}/{:.2}/{:.2}", l.p50, l.p99, l.max),
                Some(l) => format!("{:.2}/{:.2}/{:.2} ({})", l.p50, l.p99, l.max, l.count),
                None => "-".into(),
            };
            write!(f, " {cell:>CELL$}")?;
        }
        writeln!(f)?;
    }
    write!(f, "{:<24}", "appends with erase")?;
    for (_, r) in engines {
        write!(f, " {:>CELL$}", r.appends_with_erase)?;
    }
    writeln!(f)?;
    if engines.iter().any(|(_, r)| r.idle) {
        write!(f, "{:<24}", "maintain: calls, ms")?;
        for (_, r) in engines {
            let cell = format!("{}, {:.1}", r.maintain_calls, r.maintain_ms);
            write!(f, " {cell:>CELL$}")?;
        }
        writeln!(f)?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn nearest_rank_percentiles() {
        let s: Vec<f64> = (1..=100).map(|i| f64::from(i) * 1000.0).collect();
        let l = OpLatency::of(&s);
        assert_eq!((l.count, l.p50, l.p99, l.max), (100, 50.0, 99.0, 100.0));
        assert_eq!(l.total, 5050.0);
        let one = OpLatency::of(&[2500.0]);
        assert_eq!((one.p50, one.p99, one.max), (2.5, 2.5, 2.5));
        let none = OpLatency::of(&[]);
        assert_eq!((none.count, none.p50, none.max), (0, 0.0, 0.0));
        // Order does not matter.
        let l = OpLatency::of(&[3000.0, 1000.0, 2000.0]);
        assert_eq!((l.p50, l.p99, l.max), (2.0, 3.0, 3.0));
    }
}
