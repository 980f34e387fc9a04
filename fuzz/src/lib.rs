//! Shared logic of clawmem's fuzz targets, kept out of the target files so
//! that `cargo test` in this directory runs it too, on stable, without
//! libFuzzer.
//!
//! - [`sim_flash_ops`]: drives a small `SimFlash` through arbitrary calls and
//!   faults, against a reference model of NOR flash written here.
#![forbid(unsafe_code)]
#![deny(missing_docs)]

pub mod sim_flash_ops;
