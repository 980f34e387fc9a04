//! `torture`: a quick power-loss campaign on the smoke trace, and proof that
//! the checker is not vacuous.

use std::path::PathBuf;
use std::process::Command;

use clawmem_sim::torture::{fill_op_list, torture, Cuts, TearKind, TortureOptions};
use clawmem_sim::Trace;

fn smoke() -> Trace {
    let path = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../traces/smoke.jsonl");
    Trace::from_path(path).expect("smoke trace parses")
}

fn quick() -> TortureOptions {
    TortureOptions {
        size_bytes: Some(64 * 1024),
        cuts: Cuts::Sample(12),
        ops: Some(30),
        seed: 7,
        ..TortureOptions::default()
    }
}

#[test]
fn smoke_prefix_has_no_violation() {
    let mut calls = 0;
    let report = torture(&smoke(), &quick(), &mut |_, _| calls += 1).unwrap();
    assert!(report.cut_points > 0, "{report}");
    assert!(report.remounts > 0, "{report}");
    assert_eq!(report.tear_patterns.len(), 3);
    assert_eq!(report.runs, report.cut_points * 3);
    assert_eq!(calls, report.runs);
    assert_eq!(report.violations, 0, "{report}");
    assert_eq!(report.first_violation, None);
}

#[test]
fn double_cuts_and_shards() {
    let opts = TortureOptions {
        double: true,
        tears: vec![TearKind::Random],
        ..quick()
    };
    let report = torture(&smoke(), &opts, &mut |_, _| {}).unwrap();
    assert_eq!(report.violations, 0, "{report}");
    assert!(report.second_cuts > 0, "{report}");
    // Two shards cover the cut points exactly once.
    let total: u64 = (0..2)
        .map(|i| {
            let opts = TortureOptions {
                shard: Some((i, 2)),
                tears: vec![TearKind::Bits],
                ..quick()
            };
            torture(&smoke(), &opts, &mut |_, _| {}).unwrap().cut_points
        })
        .sum();
    assert_eq!(total, 12);
}

#[test]
fn sabotage_is_caught() {
    let opts = TortureOptions {
        sabotage: true,
        tears: vec![TearKind::Prefix],
        ..quick()
    };
    let report = torture(&smoke(), &opts, &mut |_, _| {}).unwrap();
    assert!(report.violations > 0, "{report}");
    let first = report.first_violation.expect("a replay string");
    assert!(first.contains("--seed 7 --cut "), "{first}");
    assert!(first.contains("--tear prefix"), "{first}");
}

#[test]
fn cli_json_and_exit_code() {
    let out = Command::new(env!("CARGO_BIN_EXE_clawmem-sim"))
        .current_dir(concat!(env!("CARGO_MANIFEST_DIR"), "/.."))
        .args([
            "torture",
            "traces/smoke.jsonl",
            "--ops",
            "25",
            "--cuts",
            "8",
            "--tear",
            "bits",
            "--size",
            "64K",
            "--json",
        ])
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    for key in [
        "cut_points",
        "tear_patterns",
        "remounts",
        "violations",
        "first_violation",
    ] {
        assert!(v.get(key).is_some(), "missing {key}: {v}");
    }
    assert_eq!(v["violations"], 0);
    assert!(v["first_violation"].is_null());
    assert_eq!(v["tear_patterns"], serde_json::json!(["bits"]));
}

#[test]
fn idle_cuts_fall_inside_maintain() {
    // Every cut point: maintenance erases ahead only as far as the writes
    // between idle calls reach, so on smoke few calls fall inside it.
    let opts = TortureOptions {
        idle: true,
        cuts: Cuts::All,
        ..quick()
    };
    let report = torture(&smoke(), &opts, &mut |_, _| {}).unwrap();
    assert!(report.idle, "{report}");
    assert!(report.maintain_calls > 0, "{report}");
    // The clean run's maintain calls programmed or erased ...
    assert!(report.maintain_cut_points > 0, "{report}");
    // ... and some of the sampled cut points land inside them.
    assert!(report.maintain_cuts > 0, "{report}");
    assert!(report.maintain_cuts <= report.cut_points, "{report}");
    assert_eq!(report.violations, 0, "{report}");
    assert_eq!(
        report.capacity_checks, 0,
        "no capacity check without --fill"
    );
    assert!(report.fill.is_none());
    // The calls maintain makes are cut points besides the operations'
    // (an erase it takes ahead is one an append no longer makes).
    let plain = torture(&smoke(), &quick(), &mut |_, _| {}).unwrap();
    assert!(report.total_cut_points >= plain.total_cut_points);
}

fn tiny_fill() -> TortureOptions {
    TortureOptions {
        size_bytes: Some(32 * 1024),
        cuts: Cuts::Sample(12),
        tears: vec![TearKind::Prefix],
        fill: true,
        seed: 3,
        ..TortureOptions::default()
    }
}

#[test]
fn fill_replays_one_op_list_and_counts_capacity() {
    let trace = smoke();
    let opts = tiny_fill();
    let list = fill_op_list(&trace, &opts).unwrap();
    assert_eq!(
        list,
        fill_op_list(&trace, &opts).unwrap(),
        "the list is fixed"
    );
    // Round 0 is the trace itself, up to the first Full.
    let first: Vec<_> = trace.ops.iter().map(|o| o.op.clone()).collect();
    assert_eq!(list[..10], first[..10]);
    assert!(
        list.len() > trace.ops.len(),
        "a 32 KiB store fills after round 0"
    );

    let report = torture(&trace, &opts, &mut |_, _| {}).unwrap();
    let fill = report.fill.clone().expect("a fill summary");
    assert_eq!(fill.ops, list.len());
    assert_eq!(report.ops, list.len());
    assert!(fill.reached_full, "{report}");
    assert!(fill.full_refusals > 0, "{report}");
    assert!(fill.oldest_session_deletes > 0, "{report}");
    assert!(report.capacity_checks > 0, "{report}");
    assert!(report.capacity_violations <= report.violations, "{report}");
    // Every run replays the same list: each reached its cut and the clean
    // run made the fill workload's calls.
    for m in &report.violation_messages {
        assert!(!m.contains("did not meet the cut"), "{m}");
        assert!(!m.contains("fill workload's run"), "{m}");
        assert!(!m.contains("past the workload"), "{m}");
    }
    // The same campaign gives the same findings, and a violation's replay
    // string reproduces it on its own.
    let again = torture(&trace, &opts, &mut |_, _| {}).unwrap();
    assert_eq!(again.violation_messages, report.violation_messages);
    assert_eq!(again.capacity_violations, report.capacity_violations);
    println!(
        "torture --fill on smoke, 32 KiB: {} runs, {} capacity checks, {} capacity violations, {} violations",
        report.runs, report.capacity_checks, report.capacity_violations, report.violations
    );
    if let Some(first) = &report.first_violation {
        let cut: u64 = first
            .split("--cut ")
            .nth(1)
            .and_then(|r| r.split(' ').next())
            .and_then(|c| c.parse().ok())
            .expect("a cut in the replay string");
        let one = TortureOptions {
            cuts: Cuts::Only(cut),
            ..tiny_fill()
        };
        let replayed = torture(&trace, &one, &mut |_, _| {}).unwrap();
        assert_eq!(replayed.first_violation.as_deref(), Some(first.as_str()));
        assert_eq!(replayed.violation_messages[0], report.violation_messages[0]);
    }
}

#[test]
fn fill_with_idle_runs() {
    let opts = TortureOptions {
        idle: true,
        cuts: Cuts::Sample(6),
        ..tiny_fill()
    };
    let report = torture(&smoke(), &opts, &mut |_, _| {}).unwrap();
    assert!(report.maintain_calls > 0, "{report}");
    assert!(report.fill.as_ref().is_some_and(|f| f.reached_full));
    assert!(report.capacity_checks > 0, "{report}");
    let list = fill_op_list(&smoke(), &opts).unwrap();
    assert_eq!(report.ops, list.len());
}

#[test]
fn cli_fill_json_and_bad_input() {
    let run = |args: &[&str]| {
        Command::new(env!("CARGO_BIN_EXE_clawmem-sim"))
            .current_dir(concat!(env!("CARGO_MANIFEST_DIR"), "/.."))
            .args(args)
            .output()
            .unwrap()
    };
    let out = run(&[
        "torture",
        "traces/smoke.jsonl",
        "--fill",
        "--idle",
        "--size",
        "32K",
        "--cuts",
        "4",
        "--tear",
        "prefix",
        "--json",
    ]);
    let v: serde_json::Value = serde_json::from_slice(&out.stdout)
        .unwrap_or_else(|e| panic!("{e}: {}", String::from_utf8_lossy(&out.stderr)));
    for key in [
        "capacity_checks",
        "capacity_violations",
        "fill",
        "maintain_calls",
        "maintain_cut_points",
        "maintain_cuts",
        "idle",
    ] {
        assert!(v.get(key).is_some(), "missing {key}: {v}");
    }
    assert_eq!(v["idle"], true);
    assert!(v["fill"]["ops"].as_u64().unwrap() > 0);
    // The exit code follows the violations, capacity ones included.
    assert_eq!(
        out.status.success(),
        v["violations"] == 0,
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    // A trace with no append has no fill workload: a clear error.
    let dir = std::env::temp_dir().join(format!("clawmem-torture-fill-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join("reads.jsonl");
    let header = std::fs::read_to_string(
        PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../traces/smoke.jsonl"),
    )
    .unwrap()
    .lines()
    .next()
    .unwrap()
    .to_string();
    std::fs::write(
        &path,
        format!("{header}\n{{\"op\":\"history\",\"session\":\"s\"}}\n"),
    )
    .unwrap();
    let out = run(&["torture", path.to_str().unwrap(), "--fill", "--size", "32K"]);
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success());
    assert!(err.contains("--fill") && err.contains("no append"), "{err}");
    assert!(!err.contains("panicked"), "{err}");
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn a_larger_session_table_and_a_bad_one() {
    let opts = TortureOptions {
        sessions: Some(512),
        size_bytes: Some(128 * 1024),
        cuts: Cuts::Sample(4),
        ..tiny_fill()
    };
    let report = torture(&smoke(), &opts, &mut |_, _| {}).unwrap();
    assert_eq!(report.session_table, 512);
    assert!(report.capacity_checks > 0, "{report}");
    assert_eq!(report.ops, fill_op_list(&smoke(), &opts).unwrap().len());
    let bad = TortureOptions {
        sessions: Some(7),
        ..quick()
    };
    let err = torture(&smoke(), &bad, &mut |_, _| {}).unwrap_err();
    assert!(err.0.contains("session table of 7"), "{err}");
    assert!(fill_op_list(&smoke(), &TortureOptions { fill: true, ..bad }).is_err());
}

fn golden(name: &str) -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("../tests/images")
        .join(name)
}

/// `--image`: every run starts from a golden image of format 2, the model
/// holds what the image holds (a model starting empty would call its
/// sessions resurrected), and the cuts fall inside the in-place upgrade
/// that the first write makes.
#[test]
fn a_campaign_from_a_golden_image_cuts_inside_its_upgrade() {
    let opts = TortureOptions {
        image: Some(golden("v2/smoke-esp32.img")),
        size_bytes: None,
        cuts: Cuts::All,
        ops: Some(20),
        seed: 3,
        ..TortureOptions::default()
    };
    let report = torture(&smoke(), &opts, &mut |_, _| {}).unwrap();
    assert_eq!(report.violations, 0, "{report}");
    assert_eq!(report.clean_op_errors, 0, "{report}");
    assert_eq!(report.cut_points, report.total_cut_points);
    assert!(report.cut_points > 10, "{report}");
    assert_eq!(report.format_versions_before, vec![2], "{report}");
    assert!(
        report
            .format_versions_after
            .contains(&clawmem::FORMAT_VERSION),
        "{report}"
    );
    assert!(report
        .image
        .as_deref()
        .unwrap()
        .ends_with("smoke-esp32.img"));
    // The checker is not vacuous on an image either.
    let bad = TortureOptions {
        sabotage: true,
        cuts: Cuts::Sample(4),
        tears: vec![TearKind::Prefix],
        ..opts.clone()
    };
    let report = torture(&smoke(), &bad, &mut |_, _| {}).unwrap();
    assert!(report.violations > 0, "{report}");
    let first = report.first_violation.expect("a replay string");
    assert!(first.contains("--image "), "{first}");
}

#[test]
fn image_campaigns_refuse_what_they_cannot_run() {
    let image = Some(golden("v2/smoke-esp32.img"));
    let err = |opts: TortureOptions| torture(&smoke(), &opts, &mut |_, _| {}).unwrap_err().0;
    let e = err(TortureOptions {
        image: image.clone(),
        size_bytes: Some(64 * 1024),
        ..TortureOptions::default()
    });
    assert!(
        e.contains("holds 262144 B, but --size asks for 65536 B"),
        "{e}"
    );
    let e = err(TortureOptions {
        image: image.clone(),
        fill: true,
        ..TortureOptions::default()
    });
    assert!(e.contains("--fill"), "{e}");
    let e = err(TortureOptions {
        image: Some(golden("v2/no-such.img")),
        ..TortureOptions::default()
    });
    assert!(e.contains("no-such.img"), "{e}");
}
