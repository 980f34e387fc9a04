//! Golden images: every released on-flash format mounts with this engine,
//! reads back exactly what it held, and is upgraded in place by writing.
//!
//! `tests/images/v<N>/` holds, per preset, an image that the engine of
//! format version N wrote (`scripts/golden-images.sh`, which names the
//! commit in `SOURCE`) and what it must read back: the ESP-Claw files that
//! `clawmem-sim export` wrote from it with that engine. CI never rebuilds
//! them. Each image here is:
//! - exported by this engine, read only: the same files, byte for byte, and
//!   the image file unchanged;
//! - written to (a new session), which (for an older version) moves its
//!   ring onto this engine's version sector by sector, then mounted afresh: everything it held is
//!   still there, and the new session too;
//! - cut at every flash call of that first write, with every tear, and
//!   mounted afresh: it mounts, and everything it held is there;
//! - the start of a `torture` campaign (`torture --image`): the smoke
//!   trace's operations on top of it, power cut at every call of them (the
//!   upgrade the first write makes and every write after it) with all three
//!   tears, each cut mounted afresh and checked against what the image held
//!   plus what was acknowledged (older versions only);
//! - named by `inspect` with its version and the upgrade it will get (none
//!   for the current version's images).
//!
//! Every version from `MIN_FORMAT_VERSION` to `FORMAT_VERSION` has its
//! directory: a format change without golden images fails here.

use std::collections::BTreeMap;
use std::fs;
use std::path::{Path, PathBuf};

use clawmem::{BackendFormat, MountMode, Record, RecordType, Store, FORMAT_VERSION};
use clawmem_sim::espfiles::export_image;
use clawmem_sim::replay::{fit_config, SimBacked};
use clawmem_sim::{
    CutPoint, Esp32EncryptedFlash, Esp32Flash, Nrf52Flash, PowerCut, Preset, SimFlash,
    Stm32h7Flash, Stm32l4Flash, Tear,
};

fn images_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../tests/images")
}

/// Every file under `dir`, by path relative to it.
fn files(dir: &Path) -> BTreeMap<String, Vec<u8>> {
    fn walk(root: &Path, dir: &Path, out: &mut BTreeMap<String, Vec<u8>>) {
        for e in fs::read_dir(dir).unwrap() {
            let p = e.unwrap().path();
            if p.is_dir() {
                walk(root, &p, out);
            } else {
                let rel = p.strip_prefix(root).unwrap().to_string_lossy().into_owned();
                out.insert(rel, fs::read(&p).unwrap());
            }
        }
    }
    let mut out = BTreeMap::new();
    walk(dir, dir, &mut out);
    out
}

/// Exports `bytes` (an image of `preset`) into a fresh directory.
fn export(bytes: &[u8], preset: Preset) -> BTreeMap<String, Vec<u8>> {
    let tmp = tempfile::tempdir().unwrap();
    let img = tmp.path().join("image.img");
    fs::write(&img, bytes).unwrap();
    let out = tmp.path().join("out");
    export_image(&img, preset, &out).unwrap_or_else(|e| panic!("{}", e.0));
    assert_eq!(fs::read(&img).unwrap(), bytes, "export changed the image");
    files(&out)
}

/// The versions in the sector headers of `bytes` that are not erased, read
/// by hand (no CRC check): an oracle apart from `inspect`, which is checked
/// against it.
fn header_versions(bytes: &[u8], sector: usize) -> Vec<u16> {
    let mut v: Vec<u16> = bytes
        .chunks(sector)
        .filter(|s| s[0..4] != [0xFF; 4])
        .map(|s| u16::from_le_bytes([s[4], s[5]]))
        .collect();
    v.sort_unstable();
    v.dedup();
    v
}

/// The preset an image is named after: `<trace>-<preset>.img`, where
/// both names may hold '-' (`bfcl-memory500-esp32-encrypted`); the longest
/// preset name that ends the stem.
fn preset_of(stem: &str) -> Preset {
    Preset::ALL
        .into_iter()
        .filter(|p| stem.ends_with(&format!("-{}", p.name())))
        .max_by_key(|p| p.name().len())
        .unwrap_or_else(|| panic!("{stem}: names no preset"))
}

const NEW: &str = "golden:upgraded";

/// The list of session ids export writes: it gains the new session's line.
const ID_LIST: &str = "clawmem-session-ids.txt";

/// Every file of `want` is in `got` unchanged; the id list keeps every line.
fn kept(want: &BTreeMap<String, Vec<u8>>, got: &BTreeMap<String, Vec<u8>>, ctx: &str) {
    for (k, v) in want {
        let Some(g) = got.get(k) else {
            panic!("{ctx}: {k} lost");
        };
        if k == ID_LIST {
            let g = String::from_utf8_lossy(g);
            for line in String::from_utf8_lossy(v).lines() {
                assert!(g.lines().any(|l| l == line), "{ctx}: {k} lost {line:?}");
            }
        } else {
            assert!(g == v, "{ctx}: {k} changed");
        }
    }
}

/// Mounts `sim`, appends to a new session and returns the flash.
fn write_once<F: SimBacked>(sim: SimFlash) -> (SimFlash, Result<(), String>) {
    let (config, _) = fit_config::<F>(sim.model()).unwrap();
    let mut store = Store::<F, 128>::mount(F::wrap(sim).unwrap(), config, MountMode::ExistingOnly)
        .unwrap_or_else(|e| panic!("the golden image does not mount: {e}"));
    let rec = Record {
        kind: RecordType::User,
        format: BackendFormat::Unknown,
        body: b"{\"role\":\"user\",\"content\":\"after the upgrade\"}",
    };
    let r = store.append(NEW, &[rec], true);
    let sim = store.into_flash().into_sim();
    (sim, r.map(|_| ()).map_err(|e| format!("{e}")))
}

fn check<F: SimBacked>(img: &Path, version: u16, preset: Preset, expected: &Path) {
    let name = img.display().to_string();
    let bytes = fs::read(img).unwrap();
    let want = files(expected);
    assert!(!want.is_empty(), "{name}: nothing expected");
    // Read only: the same files, and nothing written.
    let got = export(&bytes, preset);
    assert_eq!(
        got.keys().collect::<Vec<_>>(),
        want.keys().collect::<Vec<_>>(),
        "{name}: the files"
    );
    for (k, v) in &want {
        assert!(got[k] == *v, "{name}: {k} differs");
    }
    let model = preset.model(bytes.len()).unwrap();
    let sector = model.geometry.erase_size;
    let old = header_versions(&bytes, sector);
    // The images of the current format are written by this version; every
    // other image is of an older one and gets upgraded.
    let current = version == FORMAT_VERSION;
    assert!(
        version <= FORMAT_VERSION,
        "{name}: an image of version {version}"
    );
    assert_eq!(old.last(), Some(&version), "{name}: {old:?}");
    assert!(old.iter().all(|v| *v <= version), "{name}: {old:?}");
    // `inspect` names the version and says whether it will be upgraded.
    let r = clawmem_sim::inspect::inspect_bytes(&name, &bytes, preset).unwrap();
    assert_eq!(r.format_versions, old, "{name}");
    assert_eq!(
        r.format.contains("upgrades it in place"),
        !current,
        "{name}: {}",
        r.format
    );
    assert!(r.mount_error.is_none(), "{name}: {:?}", r.mount_error);
    // Written: upgraded in place (or, if current, written as usual),
    // everything kept.
    let sim = SimFlash::from_image(&model, &bytes).unwrap();
    let (sim, r) = write_once::<F>(sim);
    r.unwrap_or_else(|e| panic!("{name}: the write: {e}"));
    let after = sim.image();
    assert!(
        header_versions(&after, sector).contains(&FORMAT_VERSION),
        "{name}: no sector of the current version after a write"
    );
    let got = export(&after, preset);
    kept(&want, &got, &format!("{name}: after the upgrade"));
    assert!(
        got.len() > want.len(),
        "{name}: the new session is not exported"
    );
    // Cut anywhere in that first write: the image mounts, nothing is lost.
    let calls = {
        let mut sim = SimFlash::from_image(&model, &bytes).unwrap();
        sim.arm_power_cut(PowerCut {
            seed: 0,
            at: CutPoint::Op(u64::MAX),
            tear: Tear::Prefix(0),
        });
        let (sim, r) = write_once::<F>(sim);
        r.unwrap_or_else(|e| panic!("{name}: {e}"));
        sim.ops_since_arm()
    };
    // An upgrade opens a sector (an erase, then programs); a write to an
    // image of the current version may take a single program.
    assert!(
        calls >= if current { 1 } else { 2 },
        "{name}: {calls} calls"
    );
    for k in 0..calls {
        for tear in [Tear::Prefix(4), Tear::Bits] {
            let mut sim = SimFlash::from_image(&model, &bytes).unwrap();
            sim.arm_power_cut(PowerCut {
                seed: k,
                at: CutPoint::Op(k),
                tear,
            });
            let (mut sim, _) = write_once::<F>(sim);
            sim.restore_power();
            let got = export(&sim.image(), preset);
            kept(
                &want,
                &got,
                &format!("{name}: cut at call {k} of {calls} ({tear:?})"),
            );
        }
    }
}

/// Every golden image: `(version, image, its preset)`, by version, then
/// by name.
fn golden_images() -> Vec<(u16, PathBuf, Preset)> {
    let mut versions: Vec<_> = fs::read_dir(images_dir())
        .expect("tests/images")
        .map(|e| e.unwrap().path())
        .filter(|p| p.is_dir())
        .collect();
    versions.sort();
    let mut out = Vec::new();
    for dir in versions {
        let version: u16 = dir
            .file_name()
            .and_then(|n| n.to_str())
            .and_then(|n| n.strip_prefix('v'))
            .and_then(|n| n.parse().ok())
            .unwrap_or_else(|| panic!("{}: not a version directory (v<N>)", dir.display()));
        let mut imgs: Vec<_> = fs::read_dir(&dir)
            .unwrap()
            .map(|e| e.unwrap().path())
            .filter(|p| p.extension().is_some_and(|x| x == "img"))
            .collect();
        assert!(!imgs.is_empty(), "{}: no images", dir.display());
        imgs.sort();
        for img in imgs {
            let preset = preset_of(&img.file_stem().unwrap().to_string_lossy());
            out.push((version, img, preset));
        }
    }
    out
}

#[test]
fn every_golden_image_mounts_reads_back_and_upgrades_in_place() {
    let mut checked = 0;
    let mut seen = Vec::new();
    for (version, img, preset) in golden_images() {
        seen.push(version);
        let stem = img.file_stem().unwrap().to_string_lossy().into_owned();
        let expected = img.with_file_name(format!("{stem}.expected"));
        match preset {
            Preset::Esp32 => check::<Esp32Flash>(&img, version, preset, &expected),
            Preset::Nrf52 => check::<Nrf52Flash>(&img, version, preset, &expected),
            Preset::Stm32l4 => check::<Stm32l4Flash>(&img, version, preset, &expected),
            Preset::Stm32h7 => check::<Stm32h7Flash>(&img, version, preset, &expected),
            Preset::Esp32Encrypted => {
                check::<Esp32EncryptedFlash>(&img, version, preset, &expected)
            }
            Preset::Generic => panic!("{}: no generic golden images", img.display()),
        }
        checked += 1;
    }
    // Every format since the first one promised, the current one included.
    seen.sort_unstable();
    seen.dedup();
    let want: Vec<u16> = (clawmem::MIN_FORMAT_VERSION..=FORMAT_VERSION).collect();
    assert_eq!(seen, want, "the golden image versions");
    assert!(checked >= 4, "{checked} golden images");
    println!("{checked} golden images mounted, read back and upgraded");
}

/// Every golden image of an older format, as the start of a power-loss
/// campaign: `torture --image IMG --all` with the smoke trace finds nothing,
/// and its clean run leaves a sector of the current version.
#[test]
fn power_cuts_at_every_call_of_the_upgrade_of_every_older_image() {
    use clawmem_sim::torture::{torture, Cuts, TearKind, TortureOptions};
    let trace = clawmem_sim::Trace::from_path(
        Path::new(env!("CARGO_MANIFEST_DIR")).join("../traces/smoke.jsonl"),
    )
    .unwrap();
    let mut presets = std::collections::BTreeSet::new();
    for (version, img, preset) in golden_images() {
        if version == FORMAT_VERSION {
            continue;
        }
        let opts = TortureOptions {
            preset,
            image: Some(img.clone()),
            cuts: Cuts::All,
            tears: TearKind::ALL.to_vec(),
            ..TortureOptions::default()
        };
        let r = torture(&trace, &opts, &mut |_, _| {}).unwrap();
        let name = img.display();
        assert_eq!(r.violations, 0, "{name}: {r}");
        assert_eq!(r.clean_op_errors, 0, "{name}: {r}");
        assert_eq!(r.cut_points, r.total_cut_points, "{name}");
        assert!(r.cut_points >= 50, "{name}: {r}");
        assert_eq!(
            r.format_versions_before.last(),
            Some(&version),
            "{name}: {r}"
        );
        assert!(
            r.format_versions_after.contains(&FORMAT_VERSION),
            "{name}: {r}"
        );
        println!(
            "{name}: {} cut points, {} runs, versions {:?} -> {:?}",
            r.cut_points, r.runs, r.format_versions_before, r.format_versions_after
        );
        presets.insert(preset.to_string());
    }
    // All five presets: version 4 on has esp32-encrypted images too.
    assert_eq!(presets.len(), 5, "{presets:?}");
}
