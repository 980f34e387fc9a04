//! Trace parsing, the replayer's bookkeeping, clawmem replays of the shipped
//! traces, and the `replay` subcommand.

use std::collections::HashMap;
use std::process::Command;

use clawmem_sim::replay::{
    replay, AppendOutcome, ClawmemDriver, Driver, EngineInfo, HistoryRecord, ItemHandle,
    MemoryChange, MemoryItem, MemoryStored, OpError, OpResult, ReplayOptions, Report, RunOptions,
};
use clawmem_sim::trace::{Format, Op, ProfileName, RecordKind, Trace, TraceRecord};
use clawmem_sim::{replay_clawmem, Esp32Flash, Preset, SimFlash};

fn trace_path(name: &str) -> String {
    format!("{}/../traces/{name}", env!("CARGO_MANIFEST_DIR"))
}

fn load(name: &str) -> Trace {
    Trace::from_path(trace_path(name)).unwrap_or_else(|e| panic!("{e}"))
}

const HEADER: &str = r#"{"trace":"clawmem-trace","version":1}"#;

fn parse(lines: &[&str]) -> Result<Trace, clawmem_sim::TraceError> {
    Trace::parse("t.jsonl", &lines.join("\n"))
}

fn run(trace: &Trace, opts: &ReplayOptions) -> Report {
    replay_clawmem(trace, opts, &mut |_, _| {}).unwrap_or_else(|e| panic!("{e}"))
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

/// Memory and profile operations of a trace (clawmem does not offer them yet).
fn memory_and_profile_ops(trace: &Trace) -> u64 {
    trace
        .ops
        .iter()
        .filter(|o| o.op.name().starts_with("memory_") || o.op.name().starts_with("profile_"))
        .count() as u64
}

// ---- parsing ----------------------------------------------------------------

#[test]
fn parse_errors_name_the_file_and_line() {
    let append = r#"{"op":"append","session":"s","records":[{"type":"user","format":"openai","body":"hi"}],"turn_completed":false}"#;
    let cases: [(&[&str], usize, &str); 9] = [
        (&[HEADER, append, r#"{"op":"frobnicate"}"#], 3, "frobnicate"),
        (&[HEADER, r#"{"op":"history","session":"s""#], 2, "EOF"),
        (
            &[
                HEADER,
                r#"{"op":"append","session":"s","turn_completed":true}"#,
            ],
            2,
            "records",
        ),
        (&[HEADER, r#"{"op":"history"}"#], 2, "session"),
        (
            &[HEADER, r#"{"op":"memory_recall","labels":["a"],"limit":0}"#],
            2,
            "limit 0",
        ),
        (
            &[HEADER, r#"{"op":"memory_forget","target":0}"#],
            2,
            "target 0",
        ),
        (
            &[r#"{"trace":"other","version":1}"#],
            1,
            "not a clawmem trace",
        ),
        (
            &[r#"{"trace":"clawmem-trace","version":2}"#],
            1,
            "version 2",
        ),
        (&[""], 1, "empty trace"),
    ];
    for (lines, line, needle) in cases {
        let e = parse(lines).expect_err(needle);
        assert_eq!(e.line, line, "{e}");
        let text = e.to_string();
        assert!(text.starts_with(&format!("t.jsonl:{line}: ")), "{text}");
        assert!(text.contains(needle), "{text} should mention {needle}");
    }
    // A bad record type inside an append.
    let bad = r#"{"op":"append","session":"s","records":[{"type":"robot","format":"openai","body":"x"}],"turn_completed":false}"#;
    let e = parse(&[HEADER, append, "", bad]).unwrap_err();
    assert_eq!(e.line, 4);
    assert!(e.to_string().contains("robot"), "{e}");
}

#[test]
fn parse_errors_of_a_file_name_its_path() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("bad.jsonl");
    std::fs::write(
        &path,
        format!("{HEADER}\n{{\"op\":\"remount\"}}\nnot json\n"),
    )
    .unwrap();
    let e = Trace::from_path(&path).unwrap_err();
    assert_eq!(e.line, 3);
    assert!(
        e.to_string()
            .starts_with(&format!("{}:3: ", path.display())),
        "{e}"
    );
    let missing = dir.path().join("missing.jsonl");
    let e = Trace::from_path(&missing).unwrap_err();
    assert_eq!(e.line, 0);
    assert!(e.to_string().contains("missing.jsonl"), "{e}");
}

#[test]
fn unknown_fields_are_ignored() {
    let t = parse(&[
        r#"{"trace":"clawmem-trace","version":1,"source":"s","generator":{"name":"x"},"extra":[1,2]}"#,
        r#"{"op":"append","session":"a","records":[{"type":"tool_result","format":"openai_responses","body":"[]","tokens":12}],"turn_completed":true,"latency_ms":5}"#,
        r#"{"op":"remount","reason":"test"}"#,
        r#"{"op":"memory_list","verbose":true}"#,
        r#"{"op":"memory_store","content":"c","tags":["t"],"keywords":[],"source":"auto_llm","ts":1}"#,
        r#"{"op":"memory_update","target":0,"content":"d","why":"x"}"#,
        r#"{"op":"profile_read","name":"agents","cache":false}"#,
        "",
    ])
    .unwrap();
    assert_eq!(t.header.source.as_deref(), Some("s"));
    let ops: Vec<&Op> = t.ops.iter().map(|o| &o.op).collect();
    assert_eq!(
        ops[0],
        &Op::Append {
            session: "a".into(),
            records: vec![TraceRecord {
                kind: RecordKind::ToolResult,
                format: Format::OpenaiResponses,
                body: "[]".into()
            }],
            turn_completed: true
        }
    );
    assert_eq!(ops[1], &Op::Remount {});
    assert_eq!(ops[2], &Op::MemoryList {});
    assert_eq!(
        ops[4],
        &Op::MemoryUpdate {
            target: 0,
            content: Some("d".into()),
            tags: None,
            keywords: None
        }
    );
    assert_eq!(
        ops[5],
        &Op::ProfileRead {
            name: ProfileName::Agents
        }
    );
    assert_eq!(
        t.ops.iter().map(|o| o.line).collect::<Vec<_>>(),
        [2, 3, 4, 5, 6, 7]
    );
}

#[test]
fn shipped_traces_parse_with_every_op() {
    let smoke = load("smoke.jsonl");
    let mut names: Vec<&str> = smoke.ops.iter().map(|o| o.op.name()).collect();
    names.sort_unstable();
    names.dedup();
    assert_eq!(names.len(), 11, "smoke has every op: {names:?}");
    for name in ["bfcl-multi-turn.jsonl", "bfcl-memory.jsonl"] {
        let t = load(name);
        assert!(t.ops.len() > 1000, "{name}");
        assert!(t.turn_count() > 250, "{name}");
    }
}

// ---- the replayer's bookkeeping, on a fake engine -------------------------

/// An engine in RAM that records the calls the replayer makes, with
/// scripted answers.
struct Fake {
    flash: SimFlash,
    sessions: HashMap<String, Vec<HistoryRecord>>,
    next_item: u64,
    /// Contents of live items.
    items: HashMap<u64, String>,
    /// Items that vanish before their next use (capacity eviction).
    evict: Vec<u64>,
    /// The append (0-based, counting every append call) refused as
    /// blocked.
    refuse_append: Option<usize>,
    appends: usize,
    calls: Vec<String>,
    mounts: Vec<u64>,
}

impl Fake {
    fn new() -> Self {
        Fake {
            flash: SimFlash::new(Preset::Generic.model(64 * 1024).unwrap()),
            sessions: HashMap::new(),
            next_item: 100,
            items: HashMap::new(),
            evict: Vec::new(),
            refuse_append: None,
            appends: 0,
            calls: Vec::new(),
            mounts: vec![0],
        }
    }

    fn live(&mut self, item: ItemHandle) -> OpResult<()> {
        if let Some(i) = self.evict.iter().position(|e| *e == item.0) {
            self.evict.remove(i);
            self.items.remove(&item.0);
        }
        if self.items.contains_key(&item.0) {
            Ok(())
        } else {
            Err(OpError::Evicted)
        }
    }
}

impl Driver for Fake {
    fn info(&self) -> EngineInfo {
        EngineInfo {
            engine: "fake".into(),
            ..EngineInfo::default()
        }
    }

    fn flash(&self) -> &SimFlash {
        &self.flash
    }

    fn mount_read_bytes(&self) -> &[u64] {
        &self.mounts
    }

    fn append(&mut self, s: &str, records: &[TraceRecord], _tc: bool) -> OpResult<AppendOutcome> {
        self.calls.push(format!("append {s}"));
        self.appends += 1;
        if self.refuse_append == Some(self.appends - 1) {
            return Err(OpError::Blocked);
        }
        let h = self.sessions.entry(s.to_string()).or_default();
        h.extend(records.iter().map(|r| HistoryRecord {
            kind: r.kind,
            format: r.format,
            body: r.body.as_bytes().to_vec(),
        }));
        Ok(AppendOutcome::default())
    }

    fn history(&mut self, s: &str) -> OpResult<Vec<HistoryRecord>> {
        Ok(self.sessions.get(s).cloned().unwrap_or_default())
    }

    fn session_delete(&mut self, s: &str) -> OpResult<()> {
        self.calls.push(format!("delete {s}"));
        self.sessions.remove(s);
        Ok(())
    }

    fn memory_store(&mut self, item: &MemoryItem<'_>) -> OpResult<MemoryStored> {
        self.calls.push(format!("store {}", item.content));
        if let Some((id, _)) = self.items.iter().find(|(_, c)| *c == item.content) {
            return Ok(MemoryStored {
                item: ItemHandle(*id),
                duplicate: true,
            });
        }
        self.next_item += 1;
        self.items.insert(self.next_item, item.content.to_string());
        Ok(MemoryStored {
            item: ItemHandle(self.next_item),
            duplicate: false,
        })
    }

    fn memory_recall(&mut self, _labels: &[String], _limit: u32) -> OpResult<Vec<ItemHandle>> {
        Ok(self.items.keys().map(|k| ItemHandle(*k)).collect())
    }

    fn memory_update(&mut self, item: ItemHandle, c: &MemoryChange<'_>) -> OpResult<ItemHandle> {
        self.calls.push(format!("update {}", item.0));
        self.live(item)?;
        // New id for the new version, as an engine may do.
        let old = self.items.remove(&item.0).unwrap_or_default();
        self.next_item += 1;
        let content = c.content.map_or(old, str::to_string);
        self.items.insert(self.next_item, content);
        Ok(ItemHandle(self.next_item))
    }

    fn memory_forget(&mut self, item: ItemHandle) -> OpResult<()> {
        self.calls.push(format!("forget {}", item.0));
        self.live(item)?;
        self.items.remove(&item.0);
        Ok(())
    }

    fn memory_list(&mut self) -> OpResult<Vec<ItemHandle>> {
        Ok(self.items.keys().map(|k| ItemHandle(*k)).collect())
    }

    fn profile_write(&mut self, _name: ProfileName, _body: &str) -> OpResult<()> {
        Err(OpError::Failed("profiles are read-only here".into()))
    }

    fn profile_read(&mut self, _name: ProfileName) -> OpResult<Option<Vec<u8>>> {
        Err(OpError::Unsupported)
    }

    fn remount(&mut self) -> OpResult<()> {
        self.mounts.push(0);
        Ok(())
    }
}

fn store(content: &str) -> String {
    format!(
        r#"{{"op":"memory_store","content":"{content}","tags":["t"],"keywords":[],"source":"manual"}}"#
    )
}

fn append(session: &str, kind: &str, body_len: usize, done: bool) -> String {
    format!(
        r#"{{"op":"append","session":"{session}","records":[{{"type":"{kind}","format":"openai","body":"{}"}}],"turn_completed":{done}}}"#,
        "b".repeat(body_len)
    )
}

#[test]
fn memory_targets_follow_duplicates_lineage_and_evictions() {
    let lines = [
        HEADER.to_string(),
        store("alpha"), // target 0 -> 101
        store("beta"),  // target 1 -> 102
        store("alpha"), // target 2: duplicate of 101
        r#"{"op":"memory_update","target":0,"content":"alpha2"}"#.into(), // 101 -> 103
        r#"{"op":"memory_forget","target":2}"#.into(), // names 103 now
        r#"{"op":"memory_update","target":0}"#.into(), // forgotten: skipped
        r#"{"op":"memory_forget","target":1}"#.into(), // 102, evicted: skipped
        r#"{"op":"memory_update","target":1}"#.into(), // evicted: skipped, no call
        r#"{"op":"profile_write","name":"soul","body":"x"}"#.into(), // error
        r#"{"op":"profile_read","name":"soul"}"#.into(), // unsupported
        r#"{"op":"memory_recall","labels":["t"],"limit":8}"#.into(),
    ];
    let trace = Trace::parse("m.jsonl", &lines.join("\n")).unwrap();
    let mut fake = Fake::new();
    fake.evict.push(102);
    let r = replay(&mut fake, &trace, &RunOptions::default(), &mut |_, _| {});
    assert_eq!(
        fake.calls,
        [
            "store alpha",
            "store beta",
            "store alpha",
            "update 101",
            "forget 103",
            "forget 102",
        ]
    );
    assert_eq!(r.skipped, 3);
    assert_eq!(r.unsupported_ops, 1);
    assert_eq!(r.errors, 1);
    let first = r.first_error.unwrap();
    assert!(
        first.starts_with("m.jsonl:10 (round 0) profile_write: "),
        "{first}"
    );
    // Contents of the three acknowledged stores and the update.
    assert_eq!(r.user_bytes, 5 + 4 + 5 + 6);
}

#[test]
fn blocked_sessions_are_counted_deleted_and_restarted() {
    let lines = [
        HEADER.to_string(),
        append("s", "user", 10, false),
        append("s", "assistant_final", 20, true),
        append("s", "user", 30, false), // refused: blocked
        r#"{"op":"history","session":"s"}"#.into(),
        append("s", "user", 40, false), // a fresh session
        r#"{"op":"history","session":"s"}"#.into(),
    ];
    let trace = Trace::parse("b.jsonl", &lines.join("\n")).unwrap();
    let mut fake = Fake::new();
    fake.refuse_append = Some(2);
    let r = replay(&mut fake, &trace, &RunOptions::default(), &mut |_, _| {});
    assert_clean(&r);
    assert_eq!(r.blocked, 1);
    assert_eq!(r.history_checks, 2);
    assert_eq!(
        fake.calls,
        ["append s", "append s", "append s", "delete s", "append s"]
    );
    // Only acknowledged bodies count.
    assert_eq!(r.user_bytes, 10 + 20 + 40);
}

#[test]
fn rounds_suffix_session_ids_and_retire_the_previous_round() {
    let lines = [
        HEADER.to_string(),
        append("a", "user", 5, false),
        append("b", "user", 5, false),
        r#"{"op":"history","session":"a"}"#.into(),
        append("a", "assistant_final", 5, true),
    ];
    let trace = Trace::parse("r.jsonl", &lines.join("\n")).unwrap();
    let mut fake = Fake::new();
    let opts = RunOptions {
        repeat: 3,
        turns_per_day: 10.0,
        ..RunOptions::default()
    };
    let mut seen = Vec::new();
    let r = replay(&mut fake, &trace, &opts, &mut |done, total| {
        seen.push((done, total))
    });
    assert_clean(&r);
    assert_eq!(seen.last(), Some(&(12, 12)));
    assert_eq!(
        fake.calls,
        [
            "append a",
            "append b",
            "append a",
            "delete a",
            "append a#1",
            "delete b",
            "append b#1",
            "append a#1",
            "delete a#1",
            "append a#2",
            "delete b#1",
            "append b#2",
            "append a#2",
        ]
    );
    assert_eq!(r.cleanup_deletes, 4);
    assert_eq!((r.rounds, r.ops, r.turns, r.history_checks), (3, 12, 3, 3));
    let mut live: Vec<_> = fake.sessions.keys().cloned().collect();
    live.sort();
    assert_eq!(live, ["a#2", "b#2"]);
}

// ---- clawmem --------------------------------------------------------------

#[test]
fn smoke_trace_replays_cleanly() {
    let trace = load("smoke.jsonl");
    let r = run(&trace, &ReplayOptions::default());
    assert_clean(&r);
    assert_eq!(r.engine, "clawmem");
    assert_eq!(r.history_checks, 12);
    assert_eq!(r.mounts, 4, "the format and three remounts");
    assert!(memory_and_profile_ops(&trace) > 0);
    assert_eq!(
        r.unsupported_ops, 0,
        "memory and profile ops run on clawmem"
    );
    assert_eq!(r.capacity_bytes, 1024 * 1024);
    assert_eq!(r.session_limit_bytes, Some(150 * 1024));
    assert!(!r.session_limit_scaled);
    assert!(r.engine_state_bytes > 0 && r.engine_state_bytes < 16 * 1024);
    assert!(r.programmed_bytes >= r.user_bytes);
}

#[test]
fn bfcl_multi_turn_replays_cleanly() {
    let trace = load("bfcl-multi-turn.jsonl");
    let r = run(&trace, &ReplayOptions::default());
    assert_clean(&r);
    assert_eq!(r.history_checks, 330);
}

/// A new session's first batch whose meta (fixed part, id, record lengths)
/// straddles a sector boundary reads back, before and after a remount (a
/// clawmem bug that `bfcl-multi-turn.jsonl` found).
#[test]
fn new_session_batch_across_a_sector_boundary() {
    // A filler record moves the second session's first batch across the
    // end of sector 0, a few bytes at a time.
    for filler in 3900..4096 {
        let lines = [
            HEADER.to_string(),
            append("a", "user", filler, false),
            append("chat:telegram:55:default_01", "user", 211, false),
            r#"{"op":"history","session":"chat:telegram:55:default_01"}"#.into(),
            r#"{"op":"remount"}"#.into(),
            r#"{"op":"history","session":"chat:telegram:55:default_01"}"#.into(),
        ];
        let trace = Trace::parse(&format!("filler {filler}"), &lines.join("\n")).unwrap();
        assert_clean(&run(&trace, &ReplayOptions::default()));
    }
}

#[test]
fn bfcl_memory_replays_cleanly_with_memory_and_profiles() {
    let trace = load("bfcl-memory.jsonl");
    let r = run(&trace, &ReplayOptions::default());
    assert_clean(&r);
    assert_eq!(r.history_checks, 271);
    assert!(memory_and_profile_ops(&trace) > 300);
    assert_eq!(r.unsupported_ops, 0);
    assert_eq!(r.skipped, 0);
}

#[test]
fn compaction_and_blocking_follow_esp_claw() {
    // Session "tools": turns of 10 KiB of tool records, compacted whenever
    // it passes 150 KiB (twice in 35 turns). Session "talk": turns of 19 KiB of plain text, which
    // compaction cannot shrink: blocked, then deleted and restarted.
    let mut lines = vec![HEADER.to_string()];
    for turn in 0..35 {
        lines.push(append("tools", "user", 100, false));
        lines.push(append("tools", "assistant_tool", 5000, false));
        lines.push(append("tools", "tool_result", 5000, false));
        lines.push(append("tools", "assistant_final", 100, true));
        lines.push(r#"{"op":"history","session":"tools"}"#.into());
        if turn < 10 {
            lines.push(append("talk", "user", 9500, false));
            lines.push(append("talk", "assistant_final", 9500, true));
            lines.push(r#"{"op":"history","session":"talk"}"#.into());
        }
    }
    let trace = Trace::parse("compaction.jsonl", &lines.join("\n")).unwrap();
    let r = run(&trace, &ReplayOptions::default());
    assert_clean(&r);
    assert_eq!(r.compactions, 2);
    assert_eq!(r.blocked, 1);
    assert_eq!(r.history_checks, 45);
}

#[test]
fn repeat_deletes_the_sessions_of_earlier_rounds() {
    let trace = load("smoke.jsonl");
    let model = Preset::Esp32.default_model();
    let live = |rounds: u32| {
        let mut d = ClawmemDriver::<Esp32Flash>::format(SimFlash::new(model.clone())).unwrap();
        let opts = RunOptions {
            repeat: rounds,
            turns_per_day: 200.0,
            ..RunOptions::default()
        };
        let r = replay(&mut d, &trace, &opts, &mut |_, _| {});
        let mut ids = Vec::new();
        d.store_mut()
            .unwrap()
            .for_each_session(|id, _| ids.push(id.to_string()))
            .unwrap();
        ids.sort();
        (r, ids)
    };
    let (one, ids_one) = live(1);
    let (three, ids_three) = live(3);
    assert_clean(&three);
    assert_eq!(three.rounds, 3);
    assert_eq!(three.ops, 3 * one.ops);
    assert_eq!(three.history_checks, 3 * one.history_checks);
    assert!(three.cleanup_deletes > 0);
    let expected: Vec<String> = ids_one.iter().map(|id| format!("{id}#2")).collect();
    assert!(!expected.is_empty());
    assert_eq!(
        ids_three, expected,
        "only the last round's sessions are left"
    );
}

#[test]
fn repeated_bfcl_multi_turn_reaches_a_steady_state() {
    let trace = load("bfcl-multi-turn.jsonl");
    let opts = ReplayOptions {
        run: RunOptions {
            repeat: 3,
            turns_per_day: 200.0,
            ..RunOptions::default()
        },
        ..ReplayOptions::default()
    };
    let one = run(&trace, &ReplayOptions::default());
    let r = run(&trace, &opts);
    assert_clean(&r);
    assert_eq!(r.history_checks, 3 * one.history_checks);
    // 90 sessions are live at the end of each round; rounds 1 and 2 retire
    // those of the round before.
    assert_eq!(r.cleanup_deletes, 2 * 90);
    assert!(r.erases > one.erases);
    assert!(r.lifetime_years.is_some());
}

#[test]
fn small_partitions_scale_the_session_limit_down() {
    let trace = load("smoke.jsonl");
    let (preset, size) = (Preset::Esp32, Some(128 * 1024));
    let opts = ReplayOptions {
        preset,
        size_bytes: size,
        ..ReplayOptions::default()
    };
    let r = run(&trace, &opts);
    assert_clean(&r);
    assert!(r.session_limit_scaled, "{preset}");
    let limit = r.session_limit_bytes.unwrap();
    assert!(limit < 150 * 1024 && limit.is_multiple_of(1024), "{limit}");
    assert!(
        r.notes.iter().any(|n| n.contains("scaled down")),
        "{:?}",
        r.notes
    );
}

#[test]
fn every_preset_replays_the_smoke_trace() {
    let trace = load("smoke.jsonl");
    for preset in Preset::ALL {
        let opts = ReplayOptions {
            preset,
            ..ReplayOptions::default()
        };
        let r = run(&trace, &opts);
        assert_clean(&r);
        assert_eq!(r.preset, preset.name());
    }
}

#[test]
fn json_report_has_every_key() {
    let r = run(&load("smoke.jsonl"), &ReplayOptions::default());
    let v = r.to_json();
    let o = v.as_object().unwrap();
    // The issue's list, spelled out rather than taken from Report::KEYS.
    for key in [
        "engine",
        "ops",
        "user_bytes",
        "programmed_bytes",
        "erased_bytes",
        "read_bytes",
        "erases",
        "program_wa",
        "erase_wa",
        "erase_count_max",
        "erase_count_mean",
        "mount_read_bytes_max",
        "history_checks",
        "history_mismatches",
        "errors",
        "blocked",
        "skipped",
        "unsupported_ops",
        "device_time_ms",
        "lifetime_years",
        "geometry",
        "session_limit_bytes",
        "engine_state_bytes",
    ] {
        assert!(o.contains_key(key), "missing {key}");
    }
    let mut keys: Vec<&str> = o.keys().map(String::as_str).collect();
    let mut documented = Report::KEYS.to_vec();
    keys.sort_unstable();
    documented.sort_unstable();
    assert_eq!(keys, documented, "Report::KEYS lists exactly the keys");
    let g = o["geometry"].as_object().unwrap();
    assert_eq!(g["erase_size"], 4096);
    assert_eq!(g["write_size"], 4);
    assert_eq!(g["sector_count"], 256);
    assert_eq!(o["engine"], "clawmem");
    // Figures that follow from the others.
    let user = r.user_bytes as f64;
    assert!((r.program_wa.unwrap() - r.programmed_bytes as f64 / user).abs() < 1e-9);
    assert!((r.erase_wa.unwrap() - r.erased_bytes as f64 / user).abs() < 1e-9);
    let days = r.turns as f64 / r.turns_per_day;
    let years = r.endurance_cycles as f64 / (r.replay_erase_count_max as f64 / days) / 365.25;
    assert!((r.lifetime_years.unwrap() - years).abs() < 1e-9);
    assert_eq!(r.erase_counts.len(), 256);
    assert_eq!(r.erase_count_max, *r.erase_counts.iter().max().unwrap());
}

// ---- the command line -----------------------------------------------------

fn cli(args: &[&str]) -> std::process::Output {
    Command::new(env!("CARGO_BIN_EXE_clawmem-sim"))
        .args(args)
        .output()
        .expect("run clawmem-sim")
}

#[test]
fn cli_replay_json_parses() {
    let dir = tempfile::tempdir().unwrap();
    let image = dir.path().join("flash.img");
    let svg = dir.path().join("wear.svg");
    let smoke = trace_path("smoke.jsonl");
    let out = cli(&[
        "replay",
        &smoke,
        "--json",
        "--repeat",
        "2",
        "--turns-per-day",
        "50",
        "--image",
        image.to_str().unwrap(),
        "--heatmap",
        svg.to_str().unwrap(),
    ]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).expect("stdout is JSON");
    for key in Report::KEYS {
        assert!(v.get(key).is_some(), "missing {key}");
    }
    assert_eq!(v["rounds"], 2);
    assert_eq!(v["turns_per_day"], 50.0);
    assert_eq!(v["history_mismatches"], 0);
    assert_eq!(v["errors"], 0);
    // The image holds the flash, and it mounts.
    let bytes = std::fs::read(&image).unwrap();
    assert_eq!(bytes.len(), 1024 * 1024);
    let flash = SimFlash::from_image(&Preset::Esp32.default_model(), &bytes).unwrap();
    let mut store = clawmem::Store::<Esp32Flash, 128>::mount(
        Esp32Flash::new(flash).unwrap(),
        clawmem::Config::default(),
        clawmem::MountMode::ExistingOnly,
    )
    .unwrap();
    assert!(store.session_count() > 0);
    store.check().unwrap();
    let svg = std::fs::read_to_string(&svg).unwrap();
    assert!(svg.contains("<svg") && svg.contains("<rect"), "not an SVG");
}

#[test]
fn cli_replay_prints_a_table_and_names_bad_lines() {
    let smoke = trace_path("smoke.jsonl");
    let out = cli(&["replay", &smoke, "--preset", "nrf52", "--size", "512K"]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let text = String::from_utf8(out.stdout).unwrap();
    for needle in [
        "history checks",
        "nrf52: 128 sectors of 4096 B",
        "unsupported ops",
    ] {
        assert!(text.contains(needle), "{needle} missing in:\n{text}");
    }

    let dir = tempfile::tempdir().unwrap();
    let bad = dir.path().join("bad.jsonl");
    std::fs::write(&bad, format!("{HEADER}\n{{\"op\":\"teleport\"}}\n")).unwrap();
    let out = cli(&["replay", bad.to_str().unwrap()]);
    assert!(!out.status.success());
    let err = String::from_utf8(out.stderr).unwrap();
    assert!(
        err.contains("bad.jsonl:2:") && err.contains("teleport"),
        "{err}"
    );

    let out = cli(&["replay", &smoke, "--preset", "z80"]);
    assert!(!out.status.success());
    let out = cli(&["replay", &smoke, "--repeat", "0"]);
    assert!(!out.status.success());
}

/// A trace with one 200 KiB batch, on ESP32's 1 MiB with ESP-Claw's 150 KiB
/// limit: the batch is stored and read back whole, its completed turn blocks
/// the session (ESP-Claw's rules, esp-claw#161), the next append is refused
/// as blocked, and the session is deleted and starts again as the warning
/// asks; other sessions go on.
#[test]
fn a_single_200_kib_batch_is_stored_then_blocks_its_session() {
    let lines = [
        HEADER.to_string(),
        append("chat:a", "user", 100, false),
        append("chat:a", "assistant_final", 200 * 1024, true),
        r#"{"op":"history","session":"chat:a"}"#.into(),
        append("chat:b", "user", 300, true),
        r#"{"op":"remount"}"#.into(),
        r#"{"op":"history","session":"chat:a"}"#.into(),
        append("chat:a", "user", 50, false), // refused: blocked
        append("chat:a", "user", 60, true),  // a fresh session
        r#"{"op":"history","session":"chat:a"}"#.into(),
        r#"{"op":"history","session":"chat:b"}"#.into(),
    ];
    let trace = Trace::parse("big.jsonl", &lines.join("\n")).unwrap();
    let r = run(&trace, &ReplayOptions::default());
    assert_clean(&r);
    assert_eq!(r.blocked, 1);
    assert_eq!(r.history_checks, 4);
    assert_eq!(r.user_bytes, 100 + 200 * 1024 + 300 + 60);
}

/// Issue 13 (item 1, "done when"): ESP-Claw's long session ids. The first
/// 400 ops of bfcl-multi-turn with every session id padded to 200 bytes
/// (what a Feishu chat key, an alias and a subagent suffix reach) replay
/// clean on ESP32's 1 MiB; `export` writes each session under the file
/// name ESP-Claw's `claw_memory_session_path_dup` gives its id
/// (`naming::session_stem`) and the ids beside them, and `import` of that
/// directory then `export` again gives the same files.
#[test]
fn claw_memory_session_path_dup_names_200_byte_ids_on_replay_and_export() {
    use clawmem_sim::espfiles::{export_image, import_to_image, ImportOptions, IDS_FILE};
    let pad = |id: &str| {
        let mut long = format!("{id}:");
        while long.len() < 200 {
            long.push('x');
        }
        long
    };
    let text = std::fs::read_to_string(trace_path("bfcl-multi-turn.jsonl")).unwrap();
    let mut lines = Vec::new();
    for line in text.lines().take(401) {
        let mut v: serde_json::Value = serde_json::from_str(line).unwrap();
        if let Some(s) = v.get("session").and_then(|s| s.as_str()).map(pad) {
            v["session"] = s.into();
        }
        lines.push(v.to_string());
    }
    let trace = Trace::parse("long-ids.jsonl", &lines.join("\n")).unwrap();
    let tmp = tempfile::tempdir().unwrap();
    let image = tmp.path().join("long.img");
    let opts = ReplayOptions {
        image: Some(image.clone()),
        ..ReplayOptions::default()
    };
    let r = run(&trace, &opts);
    assert_clean(&r);
    assert!(r.history_checks > 50, "{}", r.history_checks);
    let (out1, out2) = (tmp.path().join("out1"), tmp.path().join("out2"));
    export_image(&image, Preset::Esp32, &out1).unwrap();
    let ids = std::fs::read_to_string(out1.join(IDS_FILE)).unwrap();
    let ids: Vec<&str> = ids.lines().collect();
    assert!(!ids.is_empty());
    for id in &ids {
        assert_eq!(id.len(), 200, "{id}");
        let stem = clawmem::naming::session_stem(id);
        for suffix in [".log", ".log.idx"] {
            assert!(
                out1.join(format!("sessions/{stem}{suffix}")).is_file(),
                "{stem}{suffix}"
            );
        }
    }
    let image2 = tmp.path().join("again.img");
    let r = import_to_image(
        &out1,
        &image2,
        Preset::Esp32,
        None,
        &ImportOptions::default(),
    )
    .unwrap();
    assert!(r.fallback_ids.is_empty(), "{:?}", r.fallback_ids);
    export_image(&image2, Preset::Esp32, &out2).unwrap();
    for id in &ids {
        let stem = clawmem::naming::session_stem(id);
        for suffix in [".log", ".log.idx"] {
            let name = format!("sessions/{stem}{suffix}");
            assert_eq!(
                std::fs::read(out1.join(&name)).unwrap(),
                std::fs::read(out2.join(&name)).unwrap(),
                "{name}"
            );
        }
    }
}
