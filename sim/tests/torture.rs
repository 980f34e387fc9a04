//! `torture`: a quick power-loss campaign on the smoke trace, and proof that
//! the checker is not vacuous.

use std::path::PathBuf;
use std::process::Command;

use clawmem_sim::torture::{torture, Cuts, TearKind, TortureOptions};
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
