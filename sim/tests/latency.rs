//! Modelled device time per operation kind (`latency_ms`,
//! `appends_with_erase`) and the idle work of `--idle` (`maintain`), in
//! `replay` and `compare`.

use std::collections::BTreeMap;
use std::process::Command;

use clawmem_sim::compare::{compare, Engine};
use clawmem_sim::latency::{idle_after, OpLatency};
use clawmem_sim::replay::{
    replay, AppendOutcome, Driver, EngineInfo, HistoryRecord, ItemHandle, MemoryChange, MemoryItem,
    MemoryStored, OpResult, ReplayOptions, Report, RunOptions,
};
use clawmem_sim::trace::{ProfileName, Trace, TraceRecord};
use clawmem_sim::{replay_clawmem, Preset, SimFlash};

fn trace_path(name: &str) -> String {
    format!("{}/../traces/{name}", env!("CARGO_MANIFEST_DIR"))
}

fn load(name: &str) -> Trace {
    Trace::from_path(trace_path(name)).unwrap_or_else(|e| panic!("{e}"))
}

fn run(trace: &Trace, size: Option<usize>, repeat: u32, idle: bool) -> Report {
    let opts = ReplayOptions {
        size_bytes: size,
        run: RunOptions {
            repeat,
            idle,
            ..RunOptions::default()
        },
        ..ReplayOptions::default()
    };
    replay_clawmem(trace, &opts, &mut |_, _| {}).unwrap_or_else(|e| panic!("{e}"))
}

fn assert_clean(r: &Report) {
    assert_eq!(
        (r.history_mismatches, r.errors),
        (0, 0),
        "first mismatch: {:?}, first error: {:?}",
        r.first_mismatch,
        r.first_error
    );
}

/// Trace operations by the latency kind that measures them, over `rounds`.
fn ops_by_kind(trace: &Trace, rounds: u32) -> BTreeMap<String, u64> {
    let mut m = BTreeMap::new();
    for o in &trace.ops {
        let kind = match o.op.name() {
            "remount" => "mount",
            k => k,
        };
        *m.entry(kind.to_string()).or_insert(0) += u64::from(rounds);
    }
    m
}

/// Operations after which `--idle` calls `maintain`, over `rounds`.
fn idle_points(trace: &Trace, rounds: u32) -> u64 {
    trace.ops.iter().filter(|o| idle_after(&o.op)).count() as u64 * u64::from(rounds)
}

fn assert_ordered(kind: &str, l: &OpLatency) {
    assert!(l.count > 0, "{kind}: no calls");
    assert!(
        0.0 <= l.p50 && l.p50 <= l.p99 && l.p99 <= l.max,
        "{kind}: {l:?}"
    );
    assert!(l.max <= l.total + 1e-9, "{kind}: {l:?}");
    assert!(l.with_erase <= l.count, "{kind}: {l:?}");
}

/// Every microsecond of device time lands in exactly one place: a kind
/// (the format included) or the idle work.
fn assert_time_accounted(r: &Report) {
    let kinds: f64 = r.latency.latency_ms.values().map(|l| l.total).sum();
    let sum = kinds + r.latency.maintain_ms;
    assert!(
        (sum - r.device_time_ms).abs() <= 1e-3 * r.device_time_ms.max(1.0),
        "kinds {kinds} ms + maintain {} ms != device time {} ms",
        r.latency.maintain_ms,
        r.device_time_ms
    );
}

/// The count of each kind is the number of calls the replayer made: the
/// trace's operations, plus its own deletes and memory clears, plus the
/// format.
fn assert_counts(r: &Report, trace: &Trace, rounds: u32) {
    let mut want = ops_by_kind(trace, rounds);
    *want.entry("session_delete".into()).or_insert(0) += r.cleanup_deletes + r.blocked;
    if r.memory_clears > 0 {
        want.insert("memory_clear".into(), r.memory_clears);
    }
    want.insert("format".into(), 1);
    let got: BTreeMap<String, u64> = r
        .latency
        .latency_ms
        .iter()
        .map(|(k, l)| (k.clone(), l.count))
        .collect();
    assert_eq!(r.skipped, 0, "skipped targets make fewer calls");
    assert_eq!(got, want);
    for (k, l) in &r.latency.latency_ms {
        assert_ordered(k, l);
    }
}

#[test]
fn every_kind_is_measured_on_smoke() {
    let trace = load("smoke.jsonl");
    let r = run(&trace, None, 1, false);
    assert_clean(&r);
    assert_counts(&r, &trace, 1);
    assert_time_accounted(&r);
    for k in [
        "append",
        "history",
        "memory_store",
        "memory_recall",
        "profile_write",
        "profile_read",
        "session_delete",
        "mount",
        "format",
    ] {
        assert!(r.latency.latency_ms.contains_key(k), "missing {k}");
    }
    let l = &r.latency;
    assert_eq!(l.appends_with_erase, l.latency_ms["append"].with_erase);
    assert!(!l.idle);
    assert_eq!((l.maintain_calls, l.maintain_ms), (0, 0.0));
    // The format erases the partition.
    assert!(l.latency_ms["format"].with_erase == 1);
    // A mount only reads.
    assert_eq!(l.latency_ms["mount"].with_erase, 0);

    let v = r.to_json();
    let append = &v["latency_ms"]["append"];
    for key in ["count", "p50", "p99", "max", "total", "with_erase"] {
        assert!(append.get(key).is_some(), "latency_ms.append.{key} missing");
    }
    assert_eq!(append["count"], l.latency_ms["append"].count);
    assert_eq!(v["appends_with_erase"], l.appends_with_erase);
    assert_eq!(v["idle"], false);

    let text = r.to_string();
    assert!(text.contains("device time per op"), "{text}");
    assert!(text.contains("appends with erase"), "{text}");
}

#[test]
fn a_wrapping_ring_has_appends_that_wait_on_an_erase() {
    let trace = load("smoke.jsonl");
    let rounds = 20;
    let r = run(&trace, Some(64 * 1024), rounds, false);
    assert_clean(&r);
    // Every sector was erased again after the format: the ring went round.
    assert!(
        r.erase_counts.iter().all(|&c| c >= 2),
        "{:?}",
        r.erase_counts
    );
    assert_counts(&r, &trace, rounds);
    assert_time_accounted(&r);
    let l = &r.latency;
    assert!(l.appends_with_erase > 0);
    assert_eq!(l.appends_with_erase, l.latency_ms["append"].with_erase);
    // An append that waits on an erase takes at least the erase.
    assert!(
        l.latency_ms["append"].max >= 45.0,
        "{:?}",
        l.latency_ms["append"]
    );
}

// ---- --idle ---------------------------------------------------------------

/// A driver whose appends program 256 B and whose idle work erases one
/// sector: the erase must show up in `maintain_ms`, never in an append's
/// time.
struct Idler {
    flash: SimFlash,
    next: u32,
    erased: u32,
    mounts: Vec<u64>,
}

impl Driver for Idler {
    fn info(&self) -> EngineInfo {
        EngineInfo {
            engine: "idler".into(),
            ..EngineInfo::default()
        }
    }
    fn flash(&self) -> &SimFlash {
        &self.flash
    }
    fn mount_read_bytes(&self) -> &[u64] {
        &self.mounts
    }
    fn append(&mut self, _: &str, _: &[TraceRecord], _: bool) -> OpResult<AppendOutcome> {
        self.flash.program(self.next, &[0u8; 256]).unwrap();
        self.next += 256;
        Ok(AppendOutcome::default())
    }
    fn history(&mut self, _: &str) -> OpResult<Vec<HistoryRecord>> {
        Ok(Vec::new())
    }
    fn session_delete(&mut self, _: &str) -> OpResult<()> {
        Ok(())
    }
    fn memory_store(&mut self, _: &MemoryItem<'_>) -> OpResult<MemoryStored> {
        Ok(MemoryStored {
            item: ItemHandle(1),
            duplicate: false,
        })
    }
    fn memory_recall(&mut self, _: &[String], _: u32) -> OpResult<Vec<ItemHandle>> {
        Ok(Vec::new())
    }
    fn memory_update(&mut self, i: ItemHandle, _: &MemoryChange<'_>) -> OpResult<ItemHandle> {
        Ok(i)
    }
    fn memory_forget(&mut self, _: ItemHandle) -> OpResult<()> {
        Ok(())
    }
    fn memory_list(&mut self) -> OpResult<Vec<ItemHandle>> {
        Ok(Vec::new())
    }
    fn profile_write(&mut self, _: ProfileName, _: &str) -> OpResult<()> {
        Ok(())
    }
    fn profile_read(&mut self, _: ProfileName) -> OpResult<Option<Vec<u8>>> {
        Ok(None)
    }
    fn remount(&mut self) -> OpResult<()> {
        Ok(())
    }
    fn maintain(&mut self) -> OpResult<()> {
        let s = 4096 * (15 - self.erased % 8);
        self.flash.erase(s, s + 4096).unwrap();
        self.erased += 1;
        Ok(())
    }
}

const HEADER: &str = r#"{"trace":"clawmem-trace","version":1}"#;

fn append(kind: &str, done: bool) -> String {
    format!(
        r#"{{"op":"append","session":"s","records":[{{"type":"user","format":"openai","body":"q"}},{{"type":"{kind}","format":"openai","body":"a"}}],"turn_completed":{done}}}"#
    )
}

#[test]
fn idle_work_runs_at_the_documented_points_and_is_timed_apart() {
    let lines = [
        HEADER.to_string(),
        append("user", false),                      // no
        r#"{"op":"history","session":"s"}"#.into(), // yes
        append("assistant_tool", false),            // yes: the tool runs
        append("tool_result", false),               // no
        r#"{"op":"history","session":"s"}"#.into(), // yes
        append("assistant_final", true),            // yes
        append("tool_result", true),                // yes: the turn completed
        r#"{"op":"memory_list"}"#.into(),           // no
    ];
    let trace = Trace::parse("i.jsonl", &lines.join("\n")).unwrap();
    assert_eq!(idle_points(&trace, 1), 5);
    for idle in [false, true] {
        let mut d = Idler {
            flash: SimFlash::new(Preset::Generic.model(64 * 1024).unwrap()),
            next: 0,
            erased: 0,
            mounts: vec![0],
        };
        let opts = RunOptions {
            repeat: 2,
            idle,
            ..RunOptions::default()
        };
        let r = replay(&mut d, &trace, &opts, &mut |_, _| {});
        let l = &r.latency;
        assert_eq!(l.idle, idle);
        let calls = if idle { 10 } else { 0 };
        assert_eq!((l.maintain_calls, l.maintain_erases), (calls, calls));
        assert_eq!(d.erased as u64, calls);
        assert_eq!(l.maintain_ms, calls as f64 * 45.0);
        // The appends only programmed; none waited on an erase.
        assert_eq!(l.appends_with_erase, 0);
        let a = l.latency_ms["append"];
        assert_eq!((a.count, a.p50, a.max), (10, 0.4, 0.4));
        // No format time on a flash the driver never formatted.
        assert!(!l.latency_ms.contains_key("format"));
        assert_time_accounted(&r);
        assert_eq!(r.errors, 0);
    }
}

#[test]
fn peers_have_no_idle_work_and_every_engine_reports_latency() {
    let trace = load("smoke.jsonl");
    let opts = ReplayOptions {
        run: RunOptions {
            idle: true,
            ..RunOptions::default()
        },
        ..ReplayOptions::default()
    };
    let cmp = compare(&trace, &opts, &Engine::ALL, &mut |_, _, _| {}).unwrap();
    assert!(cmp.engines.len() >= 3, "{:?}", cmp.skipped);
    let points = idle_points(&trace, 1);
    for r in &cmp.engines {
        assert_clean(r);
        let l = &r.latency;
        assert!(l.idle);
        assert_eq!(l.maintain_calls, points, "{}", r.engine);
        if r.engine != Engine::Clawmem.name() {
            assert_eq!((l.maintain_ms, l.maintain_erases), (0.0, 0), "{}", r.engine);
        }
        let a = &l.latency_ms["append"];
        assert_eq!(a.count, ops_by_kind(&trace, 1)["append"], "{}", r.engine);
        assert_ordered(&format!("{} append", r.engine), a);
        assert_eq!(l.appends_with_erase, a.with_erase);
        assert_time_accounted(r);
    }
    // FAT rewrites sectors in place: its appends erase.
    let fat = cmp.get(Engine::EspClawFat.name()).unwrap();
    assert!(fat.latency.appends_with_erase > 0);

    let text = cmp.to_string();
    assert!(text.contains("modelled device time per op"), "{text}");
    assert!(text.contains("appends with erase"), "{text}");
    assert!(text.contains("maintain: calls, ms"), "{text}");
    let v = serde_json::to_value(&cmp).unwrap();
    for e in v["engines"].as_array().unwrap() {
        assert!(e["latency_ms"]["append"]["p99"].is_number(), "{e}");
        assert!(e["appends_with_erase"].is_number());
        assert!(e["maintain_ms"].is_number());
    }
}

#[test]
fn the_cli_takes_idle_for_replay_and_compare() {
    for cmd in ["replay", "compare"] {
        let out = Command::new(env!("CARGO_BIN_EXE_clawmem-sim"))
            .args([cmd, &trace_path("smoke.jsonl"), "--idle", "--json"])
            .output()
            .unwrap();
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
        let reports = match cmd {
            "replay" => vec![v],
            _ => v["engines"].as_array().unwrap().clone(),
        };
        for r in reports {
            assert_eq!(r["idle"], true, "{cmd}");
            assert!(r["maintain_calls"].as_u64().unwrap() > 0, "{cmd}");
            assert!(r["latency_ms"]["append"]["count"].as_u64().unwrap() > 0);
        }
    }
}

#[test]
fn with_idle_work_clawmem_appends_never_wait_on_an_erase() {
    let trace = load("smoke.jsonl");
    let rounds = 20;
    let r = run(&trace, Some(64 * 1024), rounds, true);
    assert_clean(&r);
    // The ring still goes round, its sectors erased in idle time.
    assert!(
        r.erase_counts.iter().all(|&c| c >= 2),
        "{:?}",
        r.erase_counts
    );
    assert_counts(&r, &trace, rounds);
    assert_time_accounted(&r);
    let l = &r.latency;
    assert!(l.idle);
    assert_eq!(l.maintain_calls, idle_points(&trace, rounds));
    assert!(l.maintain_erases > 0);
    assert_eq!(l.appends_with_erase, 0, "{:?}", l.latency_ms["append"]);
    assert!(
        l.latency_ms["append"].max < 45.0,
        "{:?}",
        l.latency_ms["append"]
    );
}

/// Idle work costs almost no erase of its own across remounts (format 8):
/// a sector erased ahead is said to be on flash, and a remount opens it
/// without erasing it again. `bfcl-multi-turn.jsonl` remounts eight times a
/// round and wraps the ring. 40 rounds: 3,214 erases with idle work against
/// 3,190 without (the rest are sectors a chunk could not say, as no chunk
/// fits after it to take it back); 3,513 before format 8, 3,253 without the
/// header-only chunk, 3,397 with the mount's trust dropped before the tail
/// was known.
#[test]
fn idle_work_erases_no_more_than_appends_would_across_remounts() {
    let trace = load("bfcl-multi-turn.jsonl");
    let plain = run(&trace, None, 40, false);
    let idle = run(&trace, None, 40, true);
    assert_clean(&plain);
    assert_clean(&idle);
    assert!(idle.mounts >= 300, "{} remounts", idle.mounts);
    assert_eq!(idle.latency.appends_with_erase, 0);
    assert!(
        idle.erases <= plain.erases + plain.erases / 100,
        "idle work erased {} sectors against {} without it",
        idle.erases,
        plain.erases
    );
}
