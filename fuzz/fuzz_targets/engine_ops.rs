//! Invariants checked:
//!
//! - Durability: after every power cut and every remount (a fresh mount of
//!   the flash, never the engine's RAM state), every acknowledged append,
//!   delete, memory store and forget, and profile write is visible.
//! - Atomicity: the operation in flight when power failed is all or nothing
//!   (an append may also have compacted its session, keeping an ordered
//!   subsequence that ends with the new record), and a second mount reads
//!   the same state.
//! - No resurrection: a deleted session or a forgotten item never comes back.
//! - Structure and progress: mount after a cut succeeds, `check()` passes,
//!   an operation refused without a cut changes nothing, and no word is
//!   programmed beyond its budget.
//!
//! The logic is `clawmem_fuzz::engine::run_ops`, which `cargo test` here also
//! runs on seeded random inputs and on every saved input.
#![no_main]

use clawmem_fuzz::engine::{run_ops, OpsInput};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|input: OpsInput| {
    run_ops(&input);
});
