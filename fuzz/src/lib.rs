//! Shared logic of clawmem's fuzz targets, kept out of the target files so
//! that `cargo test` in this directory runs it too, on stable, without
//! libFuzzer.
//!
//! - [`engine`]: the clawmem engine under arbitrary operations with power
//!   cuts and fresh remounts (`engine_ops`), arbitrary images (`mount_image`)
//!   and bit flips of a reference image (`bit_flips`).
//! - [`sim_flash_ops`]: drives a small `SimFlash` through arbitrary calls and
//!   faults, against a reference model of NOR flash written here.
#![forbid(unsafe_code)]
#![deny(missing_docs)]

pub mod engine;
pub mod sim_flash_ops;
