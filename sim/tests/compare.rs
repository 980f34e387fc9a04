//! `compare` on the smoke trace: every engine stores and reads back the
//! trace faithfully, and FAT on wear levelling erases more than clawmem.

use std::path::PathBuf;
use std::process::Command;

use clawmem_sim::compare::{compare, Comparison, Engine};
use clawmem_sim::{ReplayOptions, RunOptions, Trace};

fn smoke() -> Trace {
    let path = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../traces/smoke.jsonl");
    Trace::from_path(path).expect("smoke trace parses")
}

fn run(repeat: u32) -> Comparison {
    let opts = ReplayOptions {
        run: RunOptions {
            repeat,
            ..RunOptions::default()
        },
        ..ReplayOptions::default()
    };
    compare(&smoke(), &opts, &Engine::ALL, &mut |_, _, _| {}).expect("compare runs")
}

/// The engines this build runs: littlefs only with the `littlefs` feature.
fn expected_engines() -> Vec<&'static str> {
    let mut v = vec!["clawmem", "esp-claw-fat"];
    if cfg!(feature = "littlefs") {
        v.push("esp-claw-littlefs");
    }
    v.push("sequential-storage");
    v
}

#[test]
fn every_engine_reads_back_what_it_stored() {
    let cmp = run(2);
    let names: Vec<&str> = cmp.engines.iter().map(|r| r.engine.as_str()).collect();
    assert_eq!(names, expected_engines(), "skipped: {:?}", cmp.skipped);
    if !cfg!(feature = "littlefs") {
        assert_eq!(cmp.skipped.len(), 1);
        assert_eq!(cmp.skipped[0].engine, "esp-claw-littlefs");
        assert!(cmp.skipped[0].reason.contains("libclang"));
    }
    for r in &cmp.engines {
        assert!(r.history_checks > 0, "{}: no history checked", r.engine);
        assert_eq!(
            r.history_mismatches, 0,
            "{}: {:?}",
            r.engine, r.first_mismatch
        );
        assert_eq!(r.errors, 0, "{}: {:?}", r.engine, r.first_error);
        assert_eq!(r.unsupported_ops, 0, "{}", r.engine);
        assert!(r.user_bytes > 0 && r.programmed_bytes >= r.user_bytes);
    }
    // Same trace, same work acknowledged.
    let claw = cmp.get("clawmem").unwrap();
    let fat = cmp.get("esp-claw-fat").unwrap();
    assert_eq!(claw.ops, fat.ops);
    assert_eq!(claw.history_checks, fat.history_checks);
}

#[test]
fn fat_on_wear_levelling_erases_more_than_clawmem() {
    let cmp = run(1);
    let claw = cmp.get("clawmem").unwrap();
    let fat = cmp.get("esp-claw-fat").unwrap();
    assert!(
        fat.erases > claw.erases,
        "fat {} vs clawmem {}",
        fat.erases,
        claw.erases
    );
    // Counted by the simulator: the per-sector counts add up to the total.
    assert_eq!(fat.erase_counts.iter().sum::<u64>(), fat.erases);
    assert_eq!(fat.erased_bytes, fat.erases * 4096);
    assert!(cmp.erase_ratio(fat).unwrap() > 1.0);
    assert_eq!(cmp.erases_vs_clawmem[0], ("clawmem".to_string(), Some(1.0)));
    if let Some(lfs) = cmp.get("esp-claw-littlefs") {
        assert_eq!(lfs.erase_counts.iter().sum::<u64>(), lfs.erases);
        assert!(lfs.erases > claw.erases, "littlefs {}", lfs.erases);
    }
}

#[test]
fn the_cli_prints_json_with_replays_keys_and_a_plot() {
    let dir = tempfile::tempdir().unwrap();
    let svg = dir.path().join("wear.svg");
    let trace = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../traces/smoke.jsonl");
    let out = Command::new(env!("CARGO_BIN_EXE_clawmem-sim"))
        .arg("compare")
        .arg(&trace)
        .arg("--json")
        .arg("--plot")
        .arg(&svg)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let engines = v["engines"].as_array().unwrap();
    let names: Vec<&str> = engines
        .iter()
        .map(|e| e["engine"].as_str().unwrap())
        .collect();
    assert_eq!(names, expected_engines());
    for e in engines {
        for key in clawmem_sim::Report::KEYS {
            assert!(e.get(key).is_some(), "{key} missing");
        }
        assert_eq!(e["history_mismatches"], 0);
        assert_eq!(e["errors"], 0);
    }
    let svg = std::fs::read_to_string(&svg).unwrap();
    assert!(svg.contains("<svg") && svg.contains("esp-claw-fat"));

    // The table names the ratio.
    let out = Command::new(env!("CARGO_BIN_EXE_clawmem-sim"))
        .arg("compare")
        .arg(&trace)
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(text.contains("fewer erases than esp-claw-fat"), "{text}");
}
