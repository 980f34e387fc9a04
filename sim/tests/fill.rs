//! The fill workload (`clawmem_sim::fill`): a driver with a byte budget shows
//! the phases and the oldest-first deletes exactly; clawmem and the peers
//! fill a small partition; the CLI's `--fill` output and its errors.

use std::collections::HashMap;
use std::process::Command;

use clawmem_sim::compare::Engine;
use clawmem_sim::fill::{compare_fill, fill, fill_clawmem, FillOptions, FillRun};
use clawmem_sim::replay::{
    AppendOutcome, Driver, EngineInfo, HistoryRecord, ItemHandle, MemoryChange, MemoryItem,
    MemoryStored, OpError, OpResult, ReplayOptions, Report,
};
use clawmem_sim::trace::{ProfileName, Trace, TraceRecord};
use clawmem_sim::{Preset, SimFlash};

fn trace_path(name: &str) -> String {
    format!("{}/../traces/{name}", env!("CARGO_MANIFEST_DIR"))
}

fn load(name: &str) -> Trace {
    Trace::from_path(trace_path(name)).unwrap_or_else(|e| panic!("{e}"))
}

fn opts(size: usize) -> ReplayOptions {
    ReplayOptions {
        preset: Preset::Esp32,
        size_bytes: Some(size),
        ..ReplayOptions::default()
    }
}

/// A driver that holds at most `budget` body bytes of sessions and answers
/// `Full` beyond; it programs one byte per body byte so that WA is 1.
struct Budget {
    flash: SimFlash,
    budget: usize,
    sessions: HashMap<String, Vec<HistoryRecord>>,
    deleted: Vec<String>,
    mounts: Vec<u64>,
}

impl Budget {
    fn used(&self) -> usize {
        self.sessions
            .values()
            .flat_map(|s| s.iter())
            .map(|r| r.body.len())
            .sum()
    }
}

impl Driver for Budget {
    fn info(&self) -> EngineInfo {
        EngineInfo {
            engine: "budget".into(),
            ..EngineInfo::default()
        }
    }
    fn flash(&self) -> &SimFlash {
        &self.flash
    }
    fn mount_read_bytes(&self) -> &[u64] {
        &self.mounts
    }
    fn append(
        &mut self,
        session: &str,
        records: &[TraceRecord],
        _: bool,
    ) -> OpResult<AppendOutcome> {
        let n: usize = records.iter().map(|r| r.body.len()).sum();
        if self.used() + n > self.budget {
            return Err(OpError::Full(format!("{n} B do not fit")));
        }
        self.sessions
            .entry(session.into())
            .or_default()
            .extend(records.iter().map(|r| HistoryRecord {
                kind: r.kind,
                format: r.format,
                body: r.body.as_bytes().to_vec(),
            }));
        // One programmed byte per body byte (the esp32 preset takes any
        // number of writes to a word).
        let mut left = n;
        while left > 0 {
            let k = left.min(4096);
            self.flash.program(0, &vec![0u8; k]).unwrap();
            left -= k;
        }
        Ok(AppendOutcome::default())
    }
    fn history(&mut self, session: &str) -> OpResult<Vec<HistoryRecord>> {
        Ok(self.sessions.get(session).cloned().unwrap_or_default())
    }
    fn session_delete(&mut self, session: &str) -> OpResult<()> {
        if self.sessions.remove(session).is_some() {
            self.deleted.push(session.into());
        }
        Ok(())
    }
    fn memory_store(&mut self, _: &MemoryItem<'_>) -> OpResult<MemoryStored> {
        Err(OpError::Unsupported)
    }
    fn memory_recall(&mut self, _: &[String], _: u32) -> OpResult<Vec<ItemHandle>> {
        Err(OpError::Unsupported)
    }
    fn memory_update(&mut self, _: ItemHandle, _: &MemoryChange<'_>) -> OpResult<ItemHandle> {
        Err(OpError::Unsupported)
    }
    fn memory_forget(&mut self, _: ItemHandle) -> OpResult<()> {
        Err(OpError::Unsupported)
    }
    fn memory_list(&mut self) -> OpResult<Vec<ItemHandle>> {
        Err(OpError::Unsupported)
    }
    fn profile_write(&mut self, _: ProfileName, _: &str) -> OpResult<()> {
        Err(OpError::Unsupported)
    }
    fn profile_read(&mut self, _: ProfileName) -> OpResult<Option<Vec<u8>>> {
        Err(OpError::Unsupported)
    }
    fn remount(&mut self) -> OpResult<()> {
        Ok(())
    }
}

/// Three sessions of 100-byte records, one append each, then a history
/// of each.
fn three_sessions() -> Trace {
    let body = "x".repeat(100);
    let mut lines = vec![r#"{"trace":"clawmem-trace","version":1}"#.to_string()];
    for s in ["a", "b", "c"] {
        lines.push(format!(
            r#"{{"op":"append","session":"{s}","records":[{{"type":"user","format":"openai","body":"{body}"}}],"turn_completed":false}}"#
        ));
    }
    for s in ["a", "b", "c"] {
        lines.push(format!(r#"{{"op":"history","session":"{s}"}}"#));
    }
    Trace::parse("three.jsonl", &lines.join("\n")).unwrap()
}

#[test]
fn the_phases_and_the_oldest_first_deletes_are_exact() {
    let trace = three_sessions();
    let flash = SimFlash::new(Preset::Esp32.model(64 * 1024).unwrap());
    // Room for 10 records of 100 B: rounds 0-2 (9 records) fit, round 3's
    // second append is the first Full.
    let mut d = Budget {
        flash,
        budget: 1000,
        sessions: HashMap::new(),
        deleted: Vec::new(),
        mounts: vec![0],
    };
    let run = fill(&mut d, &trace, &opts(64 * 1024), &mut |_, _| {});
    let f = &run.fill;
    assert!(f.reached_full, "{f:?}");
    assert!(
        f.first_full
            .as_deref()
            .unwrap()
            .contains(":3 (round 3) append"),
        "{:?}",
        f.first_full
    );
    // 3 rounds of 6 ops, then round 3's first two appends.
    assert_eq!(f.fill_phase.ops, 20);
    assert_eq!(f.full_phase.ops, 20);
    assert_eq!(f.rounds, 7);
    assert_eq!(f.live_bytes, 1000);
    assert_eq!(f.live_sessions, 10);
    assert_eq!(f.capacity_fraction, Some(1000.0 / 65536.0));
    assert_eq!(f.fill_phase.user_bytes, 1000);
    assert_eq!(f.fill_phase.refused_appends, 1);
    // The full phase: every append past the first makes room by deleting
    // the oldest session, in the order of first appends.
    assert_eq!(&d.deleted[..3], ["a", "b", "c"]);
    assert_eq!(&d.deleted[3..5], ["a#1", "b#1"]);
    assert_eq!(d.deleted.len(), 10);
    assert_eq!(d.deleted[9], "a#3");
    assert_eq!(f.oldest_session_deletes, 10);
    assert_eq!(f.refused_appends.count, f.oldest_session_deletes + 1);
    assert_eq!(f.refused_appends.programmed_bytes_max, 0);
    assert_eq!(f.unplaced_appends, 0);
    assert!(d.used() <= 1000);
    let r = &run.report;
    assert!(r.history_checks > 0);
    assert_eq!(
        (r.history_mismatches, r.errors),
        (0, 0),
        "{:?}",
        r.first_error
    );
    // The full phase held the budget after every operation: each append
    // deleted the oldest session (a record of 100 B) and took its place.
    let full = 1000.0 / 65536.0;
    assert_eq!(f.full_phase.min_live_fraction, Some(full));
    assert_eq!(f.full_phase.mean_live_fraction, Some(full));
    assert_eq!(f.fill_phase.mean_live_fraction, None);
    // The fill phase programmed 1,000 B of bodies (word-rounded).
    assert_eq!(f.fill_phase.program_wa, Some(1.0));
    assert!(f.curve.iter().any(|p| p.phase == "full"));
}

#[test]
fn a_trace_that_never_fills_says_why() {
    let mut lines = vec![r#"{"trace":"clawmem-trace","version":1}"#.to_string()];
    lines.push(r#"{"op":"append","session":"a","records":[{"type":"user","format":"openai","body":"hiya"}],"turn_completed":false}"#.into());
    lines.push(r#"{"op":"session_delete","session":"a"}"#.into());
    let trace = Trace::parse("t.jsonl", &lines.join("\n")).unwrap();
    let mut d = Budget {
        flash: SimFlash::new(Preset::Esp32.model(64 * 1024).unwrap()),
        budget: 1000,
        sessions: HashMap::new(),
        deleted: Vec::new(),
        mounts: vec![0],
    };
    let run = fill(&mut d, &trace, &opts(64 * 1024), &mut |_, _| {});
    assert!(!run.fill.reached_full);
    assert_eq!(run.fill.capacity_fraction, None);
    assert!(
        run.fill
            .not_full_reason
            .as_deref()
            .unwrap()
            .contains("no more live data"),
        "{:?}",
        run.fill.not_full_reason
    );
}

fn check_filled(run: &FillRun) {
    let (r, f) = (&run.report, &run.fill);
    assert!(f.reached_full, "{}: {:?}", r.engine, f.not_full_reason);
    let c = f.capacity_fraction.unwrap();
    assert!(c > 0.0 && c <= 1.0, "{}: capacity {c}", r.engine);
    assert_eq!(f.live_bytes as f64 / r.capacity_bytes as f64, c);
    assert!(r.history_checks > 0);
    assert_eq!(
        r.history_mismatches, 0,
        "{}: {:?}",
        r.engine, r.first_mismatch
    );
    assert_eq!(f.full_phase.ops, f.fill_phase.ops, "{}", r.engine);
    assert!(f.fill_phase.programmed_bytes > 0 && f.fill_phase.program_wa.unwrap() > 0.0);
}

/// clawmem's fill run of `bfcl-multi-turn.jsonl` on 256 KiB, default options.
fn fill_bfcl_256k() -> FillRun {
    let trace = load("bfcl-multi-turn.jsonl");
    fill_clawmem(
        &trace,
        &opts(256 * 1024),
        &FillOptions::default(),
        &mut |_, _| {},
    )
    .unwrap()
}

#[test]
fn clawmem_fills_256k_and_deletes_oldest_sessions_when_full() {
    let run = fill_bfcl_256k();
    check_filled(&run);
    let (r, f) = (&run.report, &run.fill);
    assert_eq!(f.session_table, Some(4096));
    assert!(
        f.first_full.as_deref().unwrap().contains("store full"),
        "{:?}",
        f.first_full
    );
    assert!(f.oldest_session_deletes > 0, "{f:?}");
    assert!(f.full_phase.refused_appends > 0);
    // What the full phase held: never more than the partition, at least
    // something, the least no more than the mean.
    let (mean, min) = (
        f.full_phase.mean_live_fraction.unwrap(),
        f.full_phase.min_live_fraction.unwrap(),
    );
    assert!(0.0 < min && min <= mean && mean < 1.0, "{mean} {min}");
    std::println!("full phase held {mean:.3} on average, {min:.3} at least");
    assert_eq!(
        f.refused_appends.count,
        f.fill_phase.refused_appends + f.full_phase.refused_appends
    );
    assert_eq!(r.errors, 0, "{:?}", r.first_error);
    assert_eq!(f.unplaced_appends, 0);
    assert!(r.notes.iter().any(|n| n.contains("session table of 4096")));
    // Where the partition was at the first Full: the ring holds the live
    // bytes and more (framing), and what is free is the reserve and less
    // than one more sector beside it (the append that was refused did not
    // fit), a sixteenth of 256 KiB of it kept for memory and profiles.
    let p = f
        .partition_at_full
        .expect("clawmem says how it divides its partition");
    assert_eq!((p.sectors, p.sector_bytes), (64, 4096));
    assert!(
        u64::from(p.used_sectors * p.sector_bytes) > f.live_bytes,
        "{p:?}"
    );
    let free = p.sectors - p.used_sectors;
    assert!(
        free >= p.reserve_sectors && free <= p.reserve_sectors + 1,
        "{p:?}"
    );
    assert_eq!(p.knowledge_reserve_bytes, 256 * 1024 / 16);
    assert!(
        p.reserve_sectors > p.knowledge_reserve_bytes / p.sector_bytes,
        "{p:?}"
    );
}

#[test]
fn an_unbuilt_session_table_is_a_clear_error() {
    let trace = load("smoke.jsonl");
    let e = fill_clawmem(
        &trace,
        &opts(256 * 1024),
        &FillOptions {
            sessions: 100,
            ..FillOptions::default()
        },
        &mut |_, _| {},
    )
    .unwrap_err();
    assert!(e.0.contains("not built in"), "{e}");
}

#[test]
fn compare_fill_runs_every_engine_on_512k() {
    let trace = load("bfcl-multi-turn.jsonl");
    let cmp = compare_fill(
        &trace,
        &opts(512 * 1024),
        &FillOptions::default(),
        &Engine::ALL,
        &mut |_, _, _| {},
    )
    .unwrap();
    let names: Vec<&str> = cmp
        .engines
        .iter()
        .map(|r| r.report.engine.as_str())
        .collect();
    let skipped: Vec<&str> = cmp.skipped.iter().map(|s| s.engine.as_str()).collect();
    // littlefs runs only with its feature, and only on 1 MiB of 4 KiB blocks.
    assert_eq!(
        names,
        ["clawmem", "esp-claw-fat", "sequential-storage"],
        "{skipped:?}"
    );
    assert_eq!(skipped, ["esp-claw-littlefs"]);
    for run in &cmp.engines {
        check_filled(run);
        // Only clawmem says how it divides its partition.
        let clawmem = run.report.engine == "clawmem";
        assert_eq!(
            run.fill.partition_at_full.is_some(),
            clawmem,
            "{}",
            run.report.engine
        );
    }
    let fat = &cmp.engines[1].fill;
    assert!(
        fat.first_full
            .as_deref()
            .unwrap()
            .contains("no free FAT cluster"),
        "{:?}",
        fat.first_full
    );
    // FAT erases a sector for each one written: a refused append costs.
    assert!(fat.refused_appends.count > 0 && fat.refused_appends.erases_total > 0);
    let seq = &cmp.engines[2].fill;
    assert!(seq
        .first_full
        .as_deref()
        .unwrap()
        .contains("session queues are in use"));
    assert!(seq.oldest_session_deletes > 0);
    let text = cmp.to_string();
    assert!(
        text.contains("capacity") && text.contains("esp-claw-littlefs: skipped"),
        "{text}"
    );
}

fn sim(args: &[&str]) -> std::process::Output {
    Command::new(env!("CARGO_BIN_EXE_clawmem-sim"))
        .args(args)
        .output()
        .unwrap()
}

#[test]
fn replay_fill_json_has_the_fill_object_and_the_plot_is_drawn() {
    let dir = tempfile::tempdir().unwrap();
    let svg = dir.path().join("fill.svg");
    let trace = trace_path("bfcl-multi-turn.jsonl");
    let out = sim(&[
        "replay",
        &trace,
        "--fill",
        "--size",
        "256K",
        "--plot",
        svg.to_str().unwrap(),
        "--json",
    ]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    for k in Report::KEYS {
        assert!(v.get(k).is_some(), "report key {k} missing");
    }
    let f = &v["fill"];
    for k in [
        "session_table",
        "reached_full",
        "first_full",
        "capacity_fraction",
        "partition_at_full",
        "live_bytes",
        "fill_phase",
        "full_phase",
        "refused_appends",
        "oldest_session_deletes",
        "curve",
    ] {
        assert!(f.get(k).is_some(), "fill key {k} missing: {f}");
    }
    for phase in ["fill_phase", "full_phase"] {
        for k in [
            "ops",
            "user_bytes",
            "programmed_bytes",
            "program_wa",
            "erases",
            "erased_bytes",
        ] {
            assert!(f[phase].get(k).is_some(), "{phase}.{k} missing");
        }
    }
    for k in [
        "count",
        "programmed_bytes_total",
        "programmed_bytes_max",
        "erases_total",
        "erases_max",
    ] {
        assert!(
            f["refused_appends"].get(k).is_some(),
            "refused_appends.{k} missing"
        );
    }
    let c = f["capacity_fraction"].as_f64().unwrap();
    assert!(c > 0.0 && c <= 1.0);
    assert!(f["oldest_session_deletes"].as_u64().unwrap() > 0);
    assert_eq!(v["history_mismatches"], 0);
    let svg = std::fs::read_to_string(&svg).unwrap();
    assert!(svg.contains("program WA against fullness") && svg.contains("clawmem: capacity"));
}

#[test]
fn fill_options_refuse_bad_input() {
    let trace = trace_path("smoke.jsonl");
    for (args, want) in [
        (
            vec!["replay", &trace, "--fill", "--sessions", "100"],
            "session table is one of",
        ),
        (
            vec!["replay", &trace, "--fill", "--repeat", "2"],
            "cannot be used with",
        ),
        (vec!["replay", &trace, "--plot", "x.svg"], "--fill"),
        (vec!["replay", &trace, "--rounds", "2"], "--fill"),
        (vec!["compare", &trace, "--rounds", "2"], "--fill"),
        (
            vec!["replay", &trace, "--fill", "--rounds", "0"],
            "not in 1..",
        ),
        (vec!["compare", &trace, "--sessions", "512"], "--fill"),
    ] {
        let out = sim(&args);
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(
            !out.status.success() && err.contains(want),
            "{args:?}: {err}"
        );
    }
}

/// `--rounds N` (`FillOptions::max_rounds`): on a partition that does not
/// fill, the workload stops after N rounds with every round's sessions
/// kept (issue 15's large partitions: 6 rounds of the BFCL trace are 540
/// live sessions), and says why it stopped; histories all check out and
/// every operation is timed, mounts included.
#[test]
fn rounds_stop_a_fill_that_does_not_fill() {
    let trace = load("bfcl-multi-turn.jsonl");
    let run = fill_clawmem(
        &trace,
        &opts(4 * 1024 * 1024),
        &FillOptions {
            sessions: 512,
            max_rounds: Some(2),
        },
        &mut |_, _| {},
    )
    .unwrap();
    let (r, f) = (&run.report, &run.fill);
    assert!(!f.reached_full);
    assert_eq!(f.rounds, 2);
    let why = f.not_full_reason.as_deref().unwrap();
    assert!(why.contains("stopped after 2 rounds"), "{why}");
    // Both rounds' sessions are live: none was retired or deleted.
    assert_eq!(r.cleanup_deletes, 0);
    assert_eq!(f.oldest_session_deletes, 0);
    assert_eq!(r.ops, 2 * trace.ops.len() as u64);
    assert_eq!(
        (r.history_mismatches, r.errors),
        (0, 0),
        "{:?}",
        r.first_error
    );
    assert!(r.latency.kinds().any(|(k, l)| k == "mount" && l.count > 0));
    assert!(r
        .latency
        .kinds()
        .any(|(k, l)| k == "history" && l.count > 0));
}

/// Issue 15 item 3: with 540 sessions kept (six rounds of the BFCL trace),
/// a mount reads under 1% of a 4 MiB and of a 16 MiB partition
/// (`docs/TESTING.md`, "Large partitions": 40,594 B and 98,304 B), and a
/// history read costs no more on 16 MiB than on 4 MiB.
#[test]
fn a_mount_reads_under_one_percent_of_large_partitions() {
    let trace = load("bfcl-multi-turn.jsonl");
    let mut history_max = Vec::new();
    for size in [4 << 20, 16 << 20] {
        let run = fill_clawmem(
            &trace,
            &opts(size),
            &FillOptions {
                sessions: 1024,
                max_rounds: Some(6),
            },
            &mut |_, _| {},
        )
        .unwrap();
        let r = &run.report;
        assert!(!run.fill.reached_full, "{size}");
        assert!(r.mounts >= 6, "{}", r.mounts);
        assert_eq!(
            (r.history_mismatches, r.errors),
            (0, 0),
            "{:?}",
            r.first_error
        );
        assert!(
            r.mount_read_bytes_max * 100 < size as u64,
            "{size}: a mount read {} B",
            r.mount_read_bytes_max
        );
        let (_, h) = r.latency.kinds().find(|(k, _)| *k == "history").unwrap();
        history_max.push(h.max);
    }
    assert!(history_max[1] <= history_max[0] * 1.01, "{history_max:?}");
}

/// Issue 15 item 2: the session table is a working set over sessions on
/// flash. With a table of 32 (`Store<_, 32>`, 3,080 B of engine state), two
/// rounds of the BFCL trace kept (200 sessions) replay on 4 MiB without
/// "too many sessions", every history read matching; a mount still reads
/// under 1% of the partition. Filled until `Full` on 1 MiB (262 sessions
/// live), the table of 32 holds what a table of 512 holds, and a refused
/// append still writes nothing.
#[test]
fn a_table_of_32_holds_every_session() {
    let trace = load("bfcl-multi-turn.jsonl");
    let run = fill_clawmem(
        &trace,
        &opts(4 << 20),
        &FillOptions {
            sessions: 32,
            max_rounds: Some(2),
        },
        &mut |_, _| {},
    )
    .unwrap();
    let r = &run.report;
    assert_eq!(
        (r.history_mismatches, r.errors),
        (0, 0),
        "{:?}",
        r.first_error
    );
    assert!(r.history_checks > 100, "{}", r.history_checks);
    assert!(r.engine_state_bytes <= 4096, "{}", r.engine_state_bytes);
    assert!(
        r.mount_read_bytes_max * 100 < 4 << 20,
        "a mount read {} B",
        r.mount_read_bytes_max
    );
    let full = |sessions| {
        fill_clawmem(
            &trace,
            &opts(1 << 20),
            &FillOptions {
                sessions,
                max_rounds: None,
            },
            &mut |_, _| {},
        )
        .unwrap()
    };
    let (small, large) = (full(32), full(512));
    let f = &small.fill;
    assert!(
        f.reached_full && f.live_sessions > 200,
        "{}",
        f.live_sessions
    );
    assert_eq!(
        (small.report.history_mismatches, small.report.errors),
        (0, 0),
        "{:?}",
        small.report.first_error
    );
    assert_eq!(
        (
            f.refused_appends.programmed_bytes_total,
            f.refused_appends.erases_total
        ),
        (0, 0),
        "a refused append wrote nothing"
    );
    let (a, b) = (
        f.capacity_fraction.unwrap(),
        large.fill.capacity_fraction.unwrap(),
    );
    assert!(a >= b - 0.01, "capacity {a} with 32, {b} with 512");
}

/// `dead_carried_bytes`: with the sector table, the mounts of the fill
/// workload (the trace remounts, and sessions die as the full phase
/// deletes the oldest) take dead bytes back from the full checkpoints they
/// go from; without it the report says none is counted (null). A mount that
/// started every count at 0 again would report 0.
#[test]
fn the_report_sums_the_dead_bytes_the_mounts_take_back() {
    let run = fill_bfcl_256k();
    let r = &run.report;
    assert!(r.mounts > 5, "{}", r.mounts);
    let json = r.to_json();
    if cfg!(feature = "sector-table") {
        let carried = r.dead_carried_bytes.expect("counted with the table");
        assert!(carried > 0, "no mount took dead bytes back");
        assert_eq!(json["dead_carried_bytes"], carried);
        assert!(r.to_string().contains("dead bytes taken back"));
    } else {
        assert_eq!(r.dead_carried_bytes, None);
        assert!(json["dead_carried_bytes"].is_null());
    }
}

/// With the feature `sector-table`, the fill report sets the full phase's
/// cleaning against what the live fraction of the sectors it cleaned
/// forces (issue 12's bound): the tail sectors released and their payload,
/// the bytes live in them, what the relocations copied from later sectors
/// and their indexes, all parts of what the run wrote as session bases and
/// objects. Without the feature the engine does not tell (null).
#[test]
fn the_report_sets_full_phase_cleaning_against_its_bound() {
    let run = fill_bfcl_256k();
    let f = &run.fill;
    let json = serde_json::to_value(&run).unwrap();
    let text = f.to_string();
    if !cfg!(feature = "sector-table") {
        assert!(json["fill"]["full_phase_cleaning"].is_null());
        assert!(json["fill"]["full_phase_dead_at_refusals"].is_null());
        assert_eq!(f.full_phase_cleaning, None);
        assert!(!text.contains("full-phase cleaning"));
        return;
    }
    let c = f.full_phase_cleaning.expect("told with the table");
    let n = c.counts;
    assert!(n.tail_releases > 0, "{n:?}");
    // ESP32 sectors: 4096 B less the 24 B header.
    assert_eq!(n.tail_payload_bytes, n.tail_releases * 4072, "{n:?}");
    assert!(
        n.tail_live_bytes > 0 && n.tail_live_bytes < n.tail_payload_bytes,
        "{n:?}"
    );
    assert!(n.index_bytes > 0, "{n:?}");
    // Every byte counted was written as a session base or an object.
    let written = |k: &str| {
        run.report
            .written_by_kind
            .iter()
            .find(|(name, _)| name == k)
            .map(|(_, b)| *b)
            .unwrap()
    };
    let copied = n.tail_live_bytes + n.ahead_bytes + n.index_bytes;
    assert!(
        copied <= written("session_bases") + written("objects"),
        "{n:?} against {:?}",
        run.report.written_by_kind
    );
    let live = n.tail_live_bytes as f64 / n.tail_payload_bytes as f64;
    assert_eq!(c.tail_live_fraction, Some(live));
    let framing = f.fill_phase.program_wa.unwrap() - 1.0;
    let bound = c.bound_program_wa.unwrap();
    assert!((bound - (1.0 / (1.0 - live) + framing)).abs() < 1e-9);
    assert!(
        bound > 1.0 && bound < f.full_phase.program_wa.unwrap(),
        "{c:?}"
    );
    assert!(text.contains("full-phase cleaning"), "{text}");
    // Where the dead bytes were when the full phase refused an append:
    // every refusal sampled, fractions of the sectors in use and of the 8
    // oldest.
    let d = f
        .full_phase_dead_at_refusals
        .expect("sampled with the table");
    assert_eq!(d.refusals, f.full_phase.refused_appends);
    for x in [d.mean_dead_fraction, d.mean_tail_dead_fraction] {
        assert!((0.0..1.0).contains(&x), "{d:?}");
    }
    assert!(d.mean_dead_fraction > 0.0, "{d:?}");
    assert!(text.contains("full-phase refusals"), "{text}");
    assert_eq!(
        json["fill"]["full_phase_dead_at_refusals"]["refusals"],
        d.refusals
    );
    let j = &json["fill"]["full_phase_cleaning"];
    assert_eq!(j["tail_releases"], n.tail_releases);
    assert_eq!(j["tail_live_bytes"], n.tail_live_bytes);
    assert_eq!(j["bound_program_wa"], bound);
}
