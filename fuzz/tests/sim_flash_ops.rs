//! The `sim_flash_ops` fuzz target's logic as a normal test: random inputs
//! from a fixed seed, a few hand-made ones that cover every tear, and every
//! input saved under `corpus/` or `artifacts/` by a fuzzing run.

use arbitrary::{Arbitrary, Unstructured};
use clawmem_fuzz::sim_flash_ops::{
    run, seeded_bytes, Addr, Cut, EraseEnd, Fill, Input, KindChoice, Len, Op, PresetChoice,
    SectorAddr, Tally, TearChoice,
};

/// Inputs generated from the seed; change the count, not the generator, to
/// keep failures replayable by seed.
const RANDOM_INPUTS: u64 = 3000;

/// Seeded random inputs agree with the model and, together, reach every
/// outcome the harness knows (every error, every tear of both calls).
#[test]
fn random_inputs() {
    let mut total = Tally::default();
    for seed in 0..RANDOM_INPUTS {
        let bytes = seeded_bytes(seed);
        let Ok(input) = Input::arbitrary_take_rest(Unstructured::new(&bytes)) else {
            continue;
        };
        match std::panic::catch_unwind(|| run(&input)) {
            Ok(tally) => total.add(&tally),
            Err(e) => {
                eprintln!("replay: seeded_bytes({seed}) -> {input:?}");
                std::panic::resume_unwind(e);
            }
        }
    }
    eprintln!("{total:?}");
    assert_eq!(total.missing(), Vec::<&str>::new(), "{total:?}");
}

fn program(word: u16, words: u8, fill: Fill) -> Op {
    Op::Program {
        at: Addr::Word(word),
        len: Len::Many(words),
        fill,
        via_trait: false,
    }
}

fn erase(from: u8, sectors: u8) -> Op {
    Op::Erase {
        from: SectorAddr::Sector(from),
        to: EraseEnd::Sectors(sectors),
        via_trait: true,
    }
}

fn arm(at: Cut, tear: TearChoice) -> Op {
    Op::ArmPowerCut { seed: 7, at, tear }
}

/// Every preset, every tear, on programs and erases over programmed data.
#[test]
fn every_tear_on_every_preset() {
    let presets = [
        PresetChoice::Esp32,
        PresetChoice::Nrf52,
        PresetChoice::Stm32l4,
        PresetChoice::Stm32h7,
        PresetChoice::Generic,
    ];
    let tears = [
        TearChoice::Prefix(0),
        TearChoice::Prefix(5),
        TearChoice::Prefix(40),
        TearChoice::PrefixFar(4096 + 3000),
        TearChoice::PrefixFar(128 * 1024 + 100),
        TearChoice::Bits,
        TearChoice::Random,
    ];
    for preset in presets {
        for tear in tears {
            for at in [Cut::Op(1), Cut::Byte(70)] {
                let ops = vec![
                    program(0, 16, Fill::Seeded(1)),
                    Op::Snapshot,
                    arm(at, tear),
                    program(32, 24, Fill::Byte(0x5A)),
                    program(0, 16, Fill::Zeros),
                    Op::Read {
                        at: Addr::Word(0),
                        len: Len::Many(64),
                        via_trait: true,
                    },
                    Op::RestorePower,
                    program(1000, 100, Fill::Seeded(2)),
                    arm(Cut::Op(0), tear),
                    erase(0, 2),
                    Op::RestorePower,
                    Op::InjectError {
                        op: KindChoice::Erase,
                        at_call: 0,
                        persistent: false,
                    },
                    erase(0, 1),
                    erase(0, 1),
                    Op::FlipRandomBits { count: 4, seed: 3 },
                    Op::Rewind { index: 0 },
                    program(0, 16, Fill::Zeros),
                ];
                let _ = run(&Input {
                    preset,
                    sectors: 1,
                    ops,
                });
            }
        }
    }
}

/// Replays what `cargo fuzz` saved, when it has run here.
#[test]
fn saved_inputs() {
    let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR"));
    for dir in ["corpus/sim_flash_ops", "artifacts/sim_flash_ops"] {
        let Ok(entries) = std::fs::read_dir(root.join(dir)) else {
            continue;
        };
        for entry in entries.flatten() {
            let bytes = std::fs::read(entry.path()).unwrap_or_default();
            let Ok(input) = Input::arbitrary_take_rest(Unstructured::new(&bytes)) else {
                continue;
            };
            if let Err(e) = std::panic::catch_unwind(|| run(&input)) {
                eprintln!("replay: {}", entry.path().display());
                std::panic::resume_unwind(e);
            }
        }
    }
}
