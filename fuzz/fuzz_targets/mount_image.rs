//! Invariants checked:
//!
//! - Any image (arbitrary bytes, optionally behind valid sector headers) on
//!   three parts is mounted in both modes and then used through every
//!   reading call and a few writes: no panic, no hang.
//! - An erased partition mounted with `ExistingOnly` answers `NotFormatted`.
//!
//! The logic is `clawmem_fuzz::engine::mount_image`, which `cargo test` here
//! also runs on seeded random inputs and on every saved input.
#![no_main]

use clawmem_fuzz::engine::{mount_image, ImageInput};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|input: ImageInput| {
    mount_image(&input);
});
