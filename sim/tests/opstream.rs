//! Op streams for the QEMU firmware: the stream decodes to what the trace
//! says, and the checker of the firmware's results agrees with `replay`
//! (run here through `opstream::execute`, the firmware's loop on the host)
//! and fails on a wrong result.

use std::process::Command;

use clawmem_sim::opstream::{
    check, decode_results, decode_stream, encode_result, encode_stream, encode_summary, execute,
    expand, CheckOptions, QemuReport, StreamOptions, TourExpect, WireOp, WireResult, ST_FAILED,
    ST_OK, ST_REFUSED, TAG_HISTORY, TAG_TOUR, TOUR,
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

/// The firmware's results for smoke with the API tour: the host executor's
/// results for the trace, then one tour result per call of `TOUR` (each
/// with its expected outcome, stack 1000 + its index), changed by `edit`,
/// then the summary of a stream made with the tour.
fn toured(edit: impl FnOnce(&mut Vec<WireResult>), copts: &CheckOptions) -> QemuReport {
    let trace = load("smoke.jsonl");
    let (mut res, summary) = decode_results(&results(&trace, &StreamOptions::default())).unwrap();
    let mut tour: Vec<WireResult> = TOUR
        .iter()
        .enumerate()
        .map(|(i, (op, case, expect))| WireResult {
            tag: TAG_TOUR,
            status: match expect {
                TourExpect::Ok => ST_OK,
                TourExpect::Refused => ST_REFUSED,
            },
            stack: 1000 + i as u32,
            message: (*expect == TourExpect::Refused).then(|| "not found".to_string()),
            appended: None,
            digest: None,
            item: None,
            ids: None,
            tour: Some((op.to_string(), case.to_string())),
            value: (*expect == TourExpect::Ok).then_some(i as u32),
        })
        .collect();
    edit(&mut tour);
    res.extend(tour);
    let opts = StreamOptions {
        tour: true,
        ..StreamOptions::default()
    };
    let mut summary = summary.unwrap();
    summary.ops_crc = encode_stream(&trace, &opts).unwrap().ops_crc;
    let mut bytes: Vec<u8> = res.iter().flat_map(encode_result).collect();
    bytes.extend(encode_summary(&summary));
    // The tour's results survive the wire.
    let (back, _) = decode_results(&bytes).unwrap();
    assert_eq!(back, res);
    check(&trace, &opts, &bytes, copts).unwrap()
}

#[test]
fn the_tour_is_the_streams_last_op_and_the_host_executor_refuses_it() {
    let trace = load("smoke.jsonl");
    let opts = StreamOptions {
        tour: true,
        ..StreamOptions::default()
    };
    let enc = encode_stream(&trace, &opts).unwrap();
    let (header, ops) = decode_stream(&enc.bytes).unwrap();
    assert_eq!(ops.last(), Some(&WireOp::Tour));
    assert_eq!(ops.iter().filter(|o| **o == WireOp::Tour).count(), 1);
    let plain = encode_stream(&trace, &StreamOptions::default()).unwrap();
    assert_eq!(header.op_count, plain.op_count + 1);
    assert_ne!(enc.ops_crc, plain.ops_crc);
    let model = opts.preset.model(opts.size_bytes).unwrap();
    let mut driver = ClawmemDriver::<Esp32Flash>::format(SimFlash::new(model)).unwrap();
    assert!(execute(&enc.bytes, &mut driver).is_err());
}

#[test]
fn tour_results_are_checked_and_reported_under_their_own_names() {
    let q = toured(|_| {}, &CheckOptions::default());
    assert!(q.ok && q.errors == 0, "{:?}", q.first_error);
    assert!(q.tour);
    // The trace's checks are those of a run without the tour.
    let plain = checked(&load("smoke.jsonl"), &StreamOptions::default());
    assert_eq!(
        (q.history_checks, q.profile_checks, q.ops),
        (plain.history_checks, plain.profile_checks, plain.ops)
    );
    // No host comparison of the flash work with the tour.
    assert_eq!(q.same_flash_work_as_host, None);
    assert_eq!(q.tour_calls.len(), TOUR.len());
    for (i, (c, (op, case, expect))) in q.tour_calls.iter().zip(TOUR).enumerate() {
        assert_eq!((c.op.as_str(), c.case.as_str()), (*op, *case));
        assert_eq!(c.stack_bytes, 1000 + i as u64);
        let want = if *expect == TourExpect::Ok {
            "ok"
        } else {
            "refused"
        };
        assert_eq!(c.outcome, want);
    }
    // Each op's figure is its deepest call. The last call, `mount_in`,
    // returns the store by value: it is reported apart, outside the peak
    // (and the budget), which the call before it sets.
    let last = TOUR.len() as u64 - 1;
    assert_eq!(TOUR[last as usize].0, "mount_in");
    assert_eq!(q.by_value_stack_by_op["mount_in"], 1000 + last);
    assert!(!q.peak_stack_by_op.contains_key("mount_in"));
    let gate = TOUR.iter().rposition(|t| t.0 == "gate").unwrap() as u64;
    assert_eq!(q.peak_stack_by_op["gate"], 1000 + gate);
    assert_eq!(q.peak_stack_bytes, 1000 + last - 1);
    let before = TOUR[last as usize - 1].0;
    assert!(q.peak_stack_at.unwrap().contains(before));
    for (op, _, _) in TOUR {
        let reported =
            q.peak_stack_by_op.contains_key(*op) || q.by_value_stack_by_op.contains_key(*op);
        assert!(reported, "{op}");
    }
}

#[test]
fn a_tour_call_with_an_unexpected_outcome_is_an_error() {
    let copts = CheckOptions::default();
    // A failure.
    let q = toured(
        |t| {
            t[3].status = ST_FAILED;
            t[3].value = None;
            t[3].message = Some("flash error".into());
        },
        &copts,
    );
    assert!(!q.ok && q.errors == 1, "{q:?}");
    assert!(q.first_error.unwrap().contains("flash error"));
    assert_eq!(q.tour_calls[3].outcome, "failed");
    // A success where a refusal is documented (a missing id found).
    let refused = TOUR
        .iter()
        .position(|t| t.2 == TourExpect::Refused)
        .unwrap();
    let q = toured(
        |t| {
            t[refused].status = ST_OK;
            t[refused].message = None;
            t[refused].value = Some(7);
        },
        &copts,
    );
    assert!(!q.ok && q.errors == 1, "{q:?}");
    // A refusal where success is expected.
    let q = toured(
        |t| {
            t[0].status = ST_REFUSED;
            t[0].value = None;
            t[0].message = Some("not found".into());
        },
        &copts,
    );
    assert!(!q.ok && q.errors == 1, "{q:?}");
    // A call left out, calls out of order, or the last call missing.
    let q = toured(|t| drop(t.remove(5)), &copts);
    assert!(!q.ok && q.errors > 0);
    let q = toured(|t| t.swap(1, 2), &copts);
    assert!(!q.ok && q.errors > 0);
    let q = toured(|t| drop(t.pop()), &copts);
    assert!(!q.ok && q.errors > 0);
    // A call over the stack budget.
    let budget = CheckOptions {
        stack_budget: Some(4096),
        ..CheckOptions::default()
    };
    let q = toured(|t| t[10].stack = 5000, &budget);
    assert!(q.over_stack_budget && !q.ok && q.errors == 0);
    assert_eq!(q.peak_stack_by_op[TOUR[10].0], 5000);
}
