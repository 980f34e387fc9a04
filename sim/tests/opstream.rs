//! Op streams for the QEMU firmware: the stream decodes to what the trace
//! says, and the checker of the firmware's results agrees with `replay`
//! (run here through `opstream::execute`, the firmware's loop on the host)
//! and fails on a wrong result.

use std::process::Command;

use clawmem_sim::opstream::{
    check, decode_results, decode_stream, encode_result, encode_stream, encode_summary, execute,
    expand, CheckOptions, QemuReport, StreamOptions, TAG_HISTORY,
};
use clawmem_sim::replay::{ClawmemDriver, ReplayOptions, Report, RunOptions};
use clawmem_sim::trace::Trace;
use clawmem_sim::{replay_clawmem, Esp32Flash, Preset, SimFlash};

fn load(name: &str) -> Trace {
    let path = format!("{}/../traces/{name}", env!("CARGO_MANIFEST_DIR"));
    Trace::from_path(path).unwrap_or_else(|e| panic!("{e}"))
}

/// The trace cut to its first `n` ops, as `--ops n` does.
fn cut(trace: &Trace, n: usize) -> Trace {
    let mut t = trace.clone();
    t.ops.truncate(n);
    t
}

/// Results of the host executor for `trace` with `opts`.
fn results(trace: &Trace, opts: &StreamOptions) -> Vec<u8> {
    let enc = encode_stream(trace, opts).unwrap_or_else(|e| panic!("{e}"));
    let model = opts.preset.model(opts.size_bytes).unwrap();
    let mut driver = ClawmemDriver::<Esp32Flash>::format(SimFlash::new(model)).unwrap();
    execute(&enc.bytes, &mut driver).unwrap_or_else(|e| panic!("{e}"))
}

fn replayed(trace: &Trace, opts: &StreamOptions) -> Report {
    let ropts = ReplayOptions {
        preset: opts.preset,
        size_bytes: Some(opts.size_bytes),
        image: None,
        run: RunOptions {
            repeat: opts.repeat,
            ..RunOptions::default()
        },
    };
    replay_clawmem(trace, &ropts, &mut |_, _| {}).unwrap_or_else(|e| panic!("{e}"))
}

/// The checker's figures equal replay's.
fn assert_agrees(q: &QemuReport, r: &Report) {
    let ours = (
        q.ops,
        q.turns,
        q.user_bytes,
        q.history_checks,
        q.history_mismatches,
        q.errors,
        q.compactions,
        q.blocked,
        q.skipped,
        q.cleanup_deletes,
        q.memory_clears,
    );
    let theirs = (
        r.ops,
        r.turns,
        r.user_bytes,
        r.history_checks,
        r.history_mismatches,
        r.errors,
        r.compactions,
        r.blocked,
        r.skipped,
        r.cleanup_deletes,
        r.memory_clears,
    );
    assert_eq!(
        ours, theirs,
        "first error {:?} / {:?}",
        q.first_error, r.first_error
    );
    assert_eq!(
        (q.erases, q.programmed_bytes, q.erased_bytes),
        (r.erases, r.programmed_bytes, r.erased_bytes)
    );
    let counts: Vec<u64> = q.erase_counts.iter().map(|c| u64::from(*c)).collect();
    assert_eq!(counts, r.erase_counts);
}

fn checked(trace: &Trace, opts: &StreamOptions) -> QemuReport {
    let res = results(trace, opts);
    check(trace, opts, &res, &CheckOptions::default()).unwrap_or_else(|e| panic!("{e}"))
}

#[test]
fn the_stream_decodes_to_the_expanded_trace() {
    let trace = load("smoke.jsonl");
    let opts = StreamOptions {
        repeat: 2,
        ..StreamOptions::default()
    };
    let enc = encode_stream(&trace, &opts).unwrap();
    let (header, ops) = decode_stream(&enc.bytes).unwrap();
    let (steps, slots, stores) = expand(&trace, &opts);
    let wires: Vec<_> = steps.iter().map(|s| s.wire.clone()).collect();
    assert_eq!(ops, wires);
    assert_eq!(header.op_count as usize, steps.len());
    assert_eq!((header.session_slots, header.store_slots), (slots, stores));
    assert_eq!(header.partition_bytes, 1024 * 1024);
    assert_eq!((header.write_size, header.erase_size), (4, 4096));
    assert_eq!(enc.trace_ops, 2 * trace.ops.len() as u64);
    // A flipped byte in the ops is refused.
    let mut bad = enc.bytes.clone();
    let n = bad.len();
    bad[n - 10] ^= 1;
    assert!(decode_stream(&bad).is_err());
}

#[test]
fn smoke_agrees_with_replay() {
    let trace = load("smoke.jsonl");
    let opts = StreamOptions::default();
    let q = checked(&trace, &opts);
    assert!(q.ok, "{q:?}");
    assert!(q.profile_checks > 0);
    assert_agrees(&q, &replayed(&trace, &opts));
}

#[test]
fn rounds_and_a_prefix_agree_with_replay() {
    let trace = cut(&load("bfcl-multi-turn.jsonl"), 150);
    let opts = StreamOptions {
        ops: Some(150),
        repeat: 3,
        size_bytes: 512 * 1024,
        ..StreamOptions::default()
    };
    let q = checked(&load("bfcl-multi-turn.jsonl"), &opts);
    assert!(q.ok, "{q:?}");
    assert!(q.cleanup_deletes > 0);
    let mut r = replayed(&trace, &opts);
    r.trace.clone_from(&q.trace);
    assert_agrees(&q, &r);
}

const HEADER: &str = r#"{"trace":"clawmem-trace","version":1}"#;

fn append(session: &str, kind: &str, body_len: usize, done: bool) -> String {
    format!(
        r#"{{"op":"append","session":"{session}","records":[{{"type":"{kind}","format":"openai","body":"{}"}}],"turn_completed":{done}}}"#,
        "b".repeat(body_len)
    )
}

/// Compaction and blocked sessions (over the 150 KiB limit): the checker
/// applies the firmware's decisions as replay applies the engine's.
#[test]
fn compaction_and_blocked_sessions_agree_with_replay() {
    let mut lines = vec![HEADER.to_string()];
    for _ in 0..20 {
        lines.push(append("c", "user", 300, false));
        lines.push(append("c", "assistant_tool", 4000, false));
        lines.push(append("c", "tool_result", 4000, false));
        lines.push(append("c", "assistant_final", 300, true));
        lines.push(r#"{"op":"history","session":"c"}"#.into());
    }
    lines.push(append("z", "user", 80_000, false));
    lines.push(append("z", "assistant_final", 80_000, true));
    lines.push(append("z", "user", 10, false));
    lines.push(r#"{"op":"history","session":"z"}"#.into());
    lines.push(append("z", "user", 20, false));
    lines.push(r#"{"op":"history","session":"z"}"#.into());
    lines.push(r#"{"op":"remount"}"#.into());
    lines.push(r#"{"op":"history","session":"c"}"#.into());
    let trace = Trace::parse("cb.jsonl", &lines.join("\n")).unwrap();
    let opts = StreamOptions::default();
    let q = checked(&trace, &opts);
    assert!(q.ok, "{q:?}");
    assert!(q.compactions > 0, "{q:?}");
    assert_eq!(q.blocked, 1, "{q:?}");
    assert_agrees(&q, &replayed(&trace, &opts));
}

#[test]
fn a_wrong_history_digest_is_a_mismatch() {
    let trace = load("smoke.jsonl");
    let opts = StreamOptions::default();
    let res = results(&trace, &opts);
    // Flip one bit of the first history's CRC in the results file.
    let (mut decoded, summary) = decode_results(&res).unwrap();
    let first = decoded
        .iter()
        .position(|r| r.tag == TAG_HISTORY && r.digest.is_some_and(|d| d.count > 0))
        .expect("smoke reads a non-empty history");
    decoded[first].digest.as_mut().unwrap().crc32 ^= 1;
    let mut bad: Vec<u8> = decoded.iter().flat_map(encode_result).collect();
    bad.extend(encode_summary(&summary.unwrap()));
    let q = check(&trace, &opts, &bad, &CheckOptions::default()).unwrap();
    assert_eq!(q.history_mismatches, 1);
    assert!(!q.ok);
    assert!(q.first_mismatch.unwrap().contains("history"));
    // The self-test corrupts the expectation instead: caught as well.
    let copts = CheckOptions {
        selftest_mismatch: true,
        ..CheckOptions::default()
    };
    let q = check(&trace, &opts, &res, &copts).unwrap();
    assert_eq!(q.history_mismatches, 1);
    assert!(!q.ok);
}

#[test]
fn a_truncated_results_file_is_an_error() {
    let trace = load("smoke.jsonl");
    let opts = StreamOptions::default();
    let res = results(&trace, &opts);
    let (decoded, _) = decode_results(&res).unwrap();
    let half: Vec<u8> = decoded[..decoded.len() / 2]
        .iter()
        .flat_map(encode_result)
        .collect();
    let q = check(&trace, &opts, &half, &CheckOptions::default()).unwrap();
    assert!(q.errors > 0 && !q.ok, "{q:?}");
}

#[test]
fn the_stack_budget_is_enforced_when_given() {
    let trace = load("smoke.jsonl");
    let opts = StreamOptions::default();
    let res = results(&trace, &opts);
    let (mut decoded, summary) = decode_results(&res).unwrap();
    decoded[1].stack = 5000;
    let mut with_stack: Vec<u8> = decoded.iter().flat_map(encode_result).collect();
    with_stack.extend(encode_summary(&summary.unwrap()));
    let q = check(&trace, &opts, &with_stack, &CheckOptions::default()).unwrap();
    assert!(q.ok && q.peak_stack_bytes == 5000 && !q.over_stack_budget);
    let budget = CheckOptions {
        stack_budget: Some(4096),
        ..CheckOptions::default()
    };
    let q = check(&trace, &opts, &with_stack, &budget).unwrap();
    assert!(q.over_stack_budget && !q.ok);
}

#[test]
fn non_esp32_presets_and_oversized_partitions_are_refused() {
    let trace = load("smoke.jsonl");
    let opts = StreamOptions {
        preset: Preset::Stm32h7,
        ..StreamOptions::default()
    };
    assert!(encode_stream(&trace, &opts).is_err());
    let opts = StreamOptions {
        size_bytes: 64 * 1024 * 1024,
        ..StreamOptions::default()
    };
    assert!(encode_stream(&trace, &opts).is_err());
}

#[test]
fn the_cli_writes_a_stream_and_checks_results() {
    let dir = tempfile::tempdir().unwrap();
    let trace = format!("{}/../traces/smoke.jsonl", env!("CARGO_MANIFEST_DIR"));
    let stream = dir.path().join("ops.bin");
    let bin = env!("CARGO_BIN_EXE_clawmem-sim");
    let out = Command::new(bin)
        .args(["opstream", &trace])
        .arg(&stream)
        .args(["--size", "512K"])
        .output()
        .unwrap();
    assert!(out.status.success(), "{out:?}");
    let bytes = std::fs::read(&stream).unwrap();
    let opts = StreamOptions {
        size_bytes: 512 * 1024,
        ..StreamOptions::default()
    };
    assert_eq!(
        bytes,
        encode_stream(&load("smoke.jsonl"), &opts).unwrap().bytes
    );
    // Results from the host executor pass `opcheck`, one JSON line out.
    let model = Preset::Esp32.model(512 * 1024).unwrap();
    let mut driver = ClawmemDriver::<Esp32Flash>::format(SimFlash::new(model)).unwrap();
    let res = execute(&bytes, &mut driver).unwrap();
    let res_path = dir.path().join("results.bin");
    std::fs::write(&res_path, &res).unwrap();
    let check_cmd = |extra: &[&str]| {
        Command::new(bin)
            .args(["opcheck", &trace])
            .arg(&res_path)
            .args(["--size", "512K"])
            .args(extra)
            .output()
            .unwrap()
    };
    let out = check_cmd(&[]);
    assert!(out.status.success(), "{out:?}");
    let text = String::from_utf8(out.stdout).unwrap();
    let json: serde_json::Value = serde_json::from_str(text.trim()).unwrap();
    for key in [
        "ops",
        "history_mismatches",
        "errors",
        "peak_stack_bytes",
        "peak_stack_by_op",
        "partition_bytes",
        "preset",
        "geometry",
        "trace",
        "erases",
        "ring_wrapped",
    ] {
        assert!(json.get(key).is_some(), "no {key} in {text}");
    }
    // --selftest-mismatch must make it fail.
    let out = check_cmd(&["--selftest-mismatch"]);
    assert!(!out.status.success(), "{out:?}");
}
