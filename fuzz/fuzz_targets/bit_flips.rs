//! Invariants checked:
//!
//! - Up to 64 bit flips anywhere in the written part of a reference image
//!   (three sessions, eight memory items, a profile), then a fresh mount and
//!   everything read back: no panic, no hang, and never a wrong value (a
//!   record outside its session's written order, a memory item never
//!   stored, a profile never written).
//!
//! The logic is `clawmem_fuzz::engine::flip_bits`, which `cargo test` here
//! also runs on seeded random inputs and on every saved input.
#![no_main]

use clawmem_fuzz::engine::{flip_bits, FlipInput};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|input: FlipInput| {
    flip_bits(&input);
});
