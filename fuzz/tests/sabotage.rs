//! The harness must fail on a wrong flash: each deliberately broken model
//! must diverge from the simulator on some of the seeded random inputs.

use arbitrary::{Arbitrary, Unstructured};
use clawmem_fuzz::sim_flash_ops::{run_with, seeded_bytes, Input, Sabotage};

#[test]
fn every_sabotage_is_caught() {
    // Quiet: the divergences below are expected panics.
    std::panic::set_hook(Box::new(|_| {}));
    let missed: Vec<Sabotage> = [
        Sabotage::ProgramOverwrites,
        Sabotage::BudgetIgnored,
        Sabotage::EraseKeepsBudget,
        Sabotage::EraseNotCounted,
    ]
    .into_iter()
    .filter(|sabotage| {
        !(0..2000).any(|seed| {
            let bytes = seeded_bytes(seed);
            let Ok(input) = Input::arbitrary_take_rest(Unstructured::new(&bytes)) else {
                return false;
            };
            std::panic::catch_unwind(|| run_with(&input, *sabotage)).is_err()
        })
    })
    .collect();
    let _ = std::panic::take_hook();
    assert!(missed.is_empty(), "not caught: {missed:?}");
}
