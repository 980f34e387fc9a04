//! The engine fuzz targets' logic as normal tests: seeded random inputs, a
//! few hand-made runs, the committed minimized corpora under `seeds/`, and
//! every input a local fuzzing run saved under `corpus/` or `artifacts/`.

use arbitrary::{Arbitrary, Unstructured};
use clawmem_fuzz::engine::{
    flip_bits, mount_image, reference, run_ops, FlipInput, GeometryChoice, ImageInput, Op,
    OpsInput, OpsTally,
};
use clawmem_fuzz::sim_flash_ops::seeded_bytes;

/// Replays every saved input of `target` through `run`.
fn saved<T: for<'a> Arbitrary<'a> + std::fmt::Debug>(target: &str, run: impl Fn(&T)) -> usize {
    let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR"));
    let mut n = 0;
    for dir in ["seeds", "corpus", "artifacts"] {
        let Ok(entries) = std::fs::read_dir(root.join(dir).join(target)) else {
            continue;
        };
        for entry in entries.flatten() {
            let bytes = std::fs::read(entry.path()).unwrap_or_default();
            let Ok(input) = T::arbitrary_take_rest(Unstructured::new(&bytes)) else {
                continue;
            };
            if let Err(e) = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| run(&input))) {
                eprintln!("replay: {} -> {input:?}", entry.path().display());
                std::panic::resume_unwind(e);
            }
            n += 1;
        }
    }
    n
}

fn seeded<T: for<'a> Arbitrary<'a> + std::fmt::Debug>(count: u64, run: impl Fn(&T)) {
    for seed in 0..count {
        let bytes = seeded_bytes(seed ^ 0xC1A5_0000);
        let Ok(input) = T::arbitrary_take_rest(Unstructured::new(&bytes)) else {
            continue;
        };
        if let Err(e) = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| run(&input))) {
            eprintln!("replay: seeded_bytes({seed} ^ 0xC1A5_0000) -> {input:?}");
            std::panic::resume_unwind(e);
        }
    }
}

/// A long hand-made run on every part: the ring wraps, cuts land in every
/// kind of write (appends, garbage collection, checkpoints, memory,
/// profiles), and each one is recovered from.
#[test]
fn hand_made_runs_wrap_the_ring_and_recover_from_cuts() {
    for geometry in [
        GeometryChoice::Esp32,
        GeometryChoice::Tiny,
        GeometryChoice::WriteOnce,
        GeometryChoice::Esp32Encrypted,
    ] {
        let mut ops = Vec::new();
        for i in 0..90u8 {
            ops.push(match i % 9 {
                0 => Op::Cut {
                    after: i % 5,
                    tear: i,
                    seed: i.wrapping_mul(37),
                },
                1 => Op::MemStore { len: i },
                2 if i % 4 == 2 => Op::MemForget { pick: i },
                3 => Op::Profile { version: i },
                4 if i % 18 == 4 => Op::Delete { s: i / 9 },
                5 if i % 27 == 5 => Op::Remount,
                _ => Op::Append {
                    s: i % 4,
                    len: i.wrapping_mul(13) % 60,
                    final_: i % 2 == 1,
                },
            });
        }
        let t: OpsTally = run_ops(&OpsInput { geometry, ops });
        eprintln!("{geometry:?}: {t:?}");
        assert!(t.cuts >= 5, "{geometry:?}: too few cuts fired: {t:?}");
        assert!(t.acked >= 40, "{geometry:?}: {t:?}");
    }
}

/// A run of 40 to 95 operations drawn with the weights of an agent: mostly
/// appends, some memory and profile writes, deletes, remounts, and a power
/// cut armed within the next few writes every few operations.
fn random_ops(seed: u64) -> OpsInput {
    let mut x = seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1;
    let mut rnd = move |m: u64| {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        x % m
    };
    let geometry = match seed % 4 {
        0 => GeometryChoice::Esp32,
        1 => GeometryChoice::Tiny,
        2 => GeometryChoice::WriteOnce,
        _ => GeometryChoice::Esp32Encrypted,
    };
    let n = 40 + rnd(56);
    let ops = (0..n)
        .map(|_| match rnd(20) {
            0..=2 => Op::Cut {
                after: rnd(12) as u8,
                tear: rnd(4) as u8,
                seed: rnd(256) as u8,
            },
            3 | 4 => Op::MemStore {
                len: rnd(120) as u8,
            },
            5 => Op::MemForget {
                pick: rnd(256) as u8,
            },
            6 => Op::Profile {
                version: rnd(256) as u8,
            },
            7 => Op::Delete { s: rnd(4) as u8 },
            8 => Op::Remount,
            _ => Op::Append {
                s: rnd(4) as u8,
                len: rnd(80) as u8,
                final_: rnd(2) == 0,
            },
        })
        .collect();
    OpsInput { geometry, ops }
}

#[test]
fn engine_ops_seeded_and_saved() {
    // Random bytes rarely make long runs, so the seeded runs are built
    // from a generator with realistic weights; libFuzzer explores the rest.
    let mut total = OpsTally::default();
    for seed in 0..120u64 {
        let input = random_ops(seed);
        let t = match std::panic::catch_unwind(|| run_ops(&input)) {
            Ok(t) => t,
            Err(e) => {
                eprintln!("replay: random_ops({seed})");
                std::panic::resume_unwind(e);
            }
        };
        total.cuts += t.cuts;
        total.remounts += t.remounts;
        total.acked += t.acked;
        total.refused += t.refused;
    }
    seeded::<OpsInput>(100, |i| {
        run_ops(i);
    });
    eprintln!("engine_ops seeded: {total:?}");
    assert!(total.cuts >= 50 && total.acked >= 500, "{total:?}");
    let n = saved::<OpsInput>("engine_ops", |i| {
        run_ops(i);
    });
    eprintln!("engine_ops: {n} saved inputs replayed");
}

#[test]
fn mount_image_seeded_and_saved() {
    seeded::<ImageInput>(150, mount_image);
    // The edge cases by hand: erased, all zero, headers over erased bytes.
    for geometry in [
        GeometryChoice::Esp32,
        GeometryChoice::Tiny,
        GeometryChoice::WriteOnce,
        GeometryChoice::Esp32Encrypted,
    ] {
        for (valid_headers, bytes) in [
            (false, vec![]),
            (false, vec![0]),
            (true, vec![]),
            (true, vec![0x5A; 3]),
        ] {
            mount_image(&ImageInput {
                geometry,
                valid_headers,
                bytes,
            });
        }
    }
    let n = saved::<ImageInput>("mount_image", mount_image);
    eprintln!("mount_image: {n} saved inputs replayed");
}

#[test]
fn bit_flips_seeded_and_saved() {
    let r = reference();
    assert!(r.used > 4096, "the reference image must span sectors");
    // One flip in each of the first bytes of every chunk region, then random
    // sets of flips.
    let mut lost_any = false;
    for at in (0..r.used).step_by(97) {
        let lost = flip_bits(&FlipInput {
            flips: vec![(at as u16, (at % 8) as u8)],
        });
        lost_any |= lost > 0;
    }
    assert!(lost_any, "no flip was ever detected: the check is vacuous");
    seeded::<FlipInput>(200, |i| {
        flip_bits(i);
    });
    let n = saved::<FlipInput>("bit_flips", |i| {
        flip_bits(i);
    });
    eprintln!("bit_flips: {n} saved inputs replayed");
}
