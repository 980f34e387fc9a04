//! `inspect`: dumps of replayed images, and files that are not images.

use std::path::PathBuf;
use std::process::Command;

use clawmem_sim::inspect::{crc32, decode_sector, inspect_bytes, inspect_file};
use clawmem_sim::{replay_clawmem, Preset, ReplayOptions, Trace};
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;

fn smoke() -> Trace {
    let path = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../traces/smoke.jsonl");
    Trace::from_path(path).expect("smoke trace parses")
}

/// Replays the smoke trace onto an image file of `size` bytes.
fn smoke_image(dir: &tempfile::TempDir, preset: Preset, size: usize) -> PathBuf {
    let path = dir.path().join(format!("{}-{size}.img", preset.name()));
    let opts = ReplayOptions {
        preset,
        size_bytes: Some(size),
        image: Some(path.clone()),
        ..ReplayOptions::default()
    };
    replay_clawmem(&smoke(), &opts, &mut |_, _| {}).unwrap();
    path
}

#[test]
fn crc_is_zlibs() {
    assert_eq!(crc32(b"123456789"), 0xCBF4_3926);
}

#[test]
fn lists_the_sessions_the_trace_created() {
    let dir = tempfile::tempdir().unwrap();
    for (preset, size) in [(Preset::Esp32, 64 * 1024), (Preset::Nrf52, 64 * 1024)] {
        let path = smoke_image(&dir, preset, size);
        let r = inspect_file(&path, preset).unwrap();
        assert_eq!(r.mount_error, None, "{r}");
        assert!(r.damage.is_empty(), "{r}");
        let ids: Vec<&str> = r.sessions.iter().map(|s| s.id.as_str()).collect();
        // traces/smoke.jsonl: this session ends with 2 records; the deleted
        // one is gone.
        let s = r
            .sessions
            .iter()
            .find(|s| s.id == "chat:telegram:0:default_01")
            .unwrap_or_else(|| panic!("sessions {ids:?}"));
        assert_eq!(s.records, 2);
        assert!(!ids.contains(&"chat:telegram:1:default_01"), "{ids:?}");
        assert_eq!(r.memory.len(), 3, "{r}");
        assert_eq!(r.profiles.len(), 4);
        assert!(r.check.as_deref().unwrap().starts_with("ok"), "{r}");
        assert!(r.head.is_some());
        assert!(r.sectors.iter().any(|s| s.state == "valid"));
        assert!(r.sectors.iter().any(|s| s.state == "erased"));
        let text = r.to_string();
        assert!(text.contains("chat:telegram:0:default_01"), "{text}");
    }
}

#[test]
fn damaged_header_is_reported_not_fatal() {
    let dir = tempfile::tempdir().unwrap();
    let path = smoke_image(&dir, Preset::Esp32, 64 * 1024);
    let mut bytes = std::fs::read(&path).unwrap();
    bytes[8] ^= 0x10; // sequence number of sector 0: the header CRC fails
    let r = inspect_bytes("damaged", &bytes, Preset::Esp32).unwrap();
    assert_eq!(r.sectors[0].state, "invalid");
    assert!(!r.damage.is_empty(), "{r}");
    let _ = r.to_string();
}

/// A bit flipped in a session's name, in its first batch: the session is
/// still listed under its name, and the damage is reported.
#[test]
fn a_rotten_session_name_is_recovered_and_reported() {
    let dir = tempfile::tempdir().unwrap();
    let path = smoke_image(&dir, Preset::Esp32, 64 * 1024);
    let mut bytes = std::fs::read(&path).unwrap();
    let id = b"chat:telegram:0:default_01";
    let at = bytes
        .windows(id.len())
        .position(|w| w == id)
        .expect("the name is on flash");
    bytes[at + 3] ^= 0x04;
    let r = inspect_bytes("rotten name", &bytes, Preset::Esp32).unwrap();
    assert_eq!(r.mount_error, None, "{r}");
    assert!(
        r.sessions
            .iter()
            .any(|s| s.id == "chat:telegram:0:default_01"),
        "{r}"
    );
    assert!(
        r.damage
            .iter()
            .any(|d| d.contains("session name(s) recovered")),
        "{r}"
    );
}

#[test]
fn never_panics_on_junk() {
    let mut rng = ChaCha8Rng::seed_from_u64(3);
    let dir = tempfile::tempdir().unwrap();
    let good = std::fs::read(smoke_image(&dir, Preset::Esp32, 64 * 1024)).unwrap();
    let mut inputs: Vec<Vec<u8>> = vec![
        vec![0xFF; 64 * 1024],
        vec![0x00; 64 * 1024],
        vec![0xFF; 100],
        good[..1000].to_vec(),
        good[..5 * 4096 + 17].to_vec(),
        good[..3 * 4096].to_vec(),
    ];
    for len in [1usize, 4095, 4096, 16 * 4096, 70_000] {
        inputs.push((0..len).map(|_| rng.random::<u8>()).collect());
    }
    // The good image with random bytes scribbled over it.
    for _ in 0..8 {
        let mut b = good.clone();
        for _ in 0..64 {
            let i = rng.random_range(0..b.len());
            b[i] = rng.random();
        }
        inputs.push(b);
    }
    for (i, bytes) in inputs.iter().enumerate() {
        for preset in [Preset::Esp32, Preset::Stm32h7] {
            let r = inspect_bytes(&format!("input {i}"), bytes, preset).unwrap();
            let _ = r.to_string();
            serde_json::to_string(&r).unwrap();
        }
    }
    assert!(inspect_bytes("empty", &[], Preset::Esp32).is_err());
    let random = inspect_bytes("random", &inputs[9], Preset::Esp32).unwrap();
    assert!(random.mount_error.is_some(), "{random}");
    assert!(random.sectors.iter().all(|s| s.state == "foreign"));
    let s = decode_sector(0, 0, &[0xFF; 10]);
    assert_eq!(s.state, "erased");
}

#[test]
fn cli_on_files() {
    let dir = tempfile::tempdir().unwrap();
    let image = smoke_image(&dir, Preset::Esp32, 64 * 1024);
    let run = |path: &PathBuf, json: bool| {
        let mut c = Command::new(env!("CARGO_BIN_EXE_clawmem-sim"));
        c.arg("inspect").arg(path);
        if json {
            c.arg("--json");
        }
        c.output().unwrap()
    };
    let out = run(&image, true);
    assert!(out.status.success());
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert!(v["sessions"].as_array().unwrap().len() >= 2);
    let out = run(&image, false);
    assert!(String::from_utf8_lossy(&out.stdout).contains("chat:telegram:0:default_01"));

    let junk = dir.path().join("junk.img");
    std::fs::write(&junk, vec![0x5Au8; 12_345]).unwrap();
    let out = run(&junk, false);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(String::from_utf8_lossy(&out.stdout).contains("mount: FAILED"));

    let empty = dir.path().join("empty.img");
    std::fs::write(&empty, b"").unwrap();
    let out = run(&empty, false);
    assert!(!out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr).contains("empty"));
    assert!(!run(&dir.path().join("missing.img"), false).status.success());
}
