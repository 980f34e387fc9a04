//! `clawmem-sim`: a NOR-flash simulator that measures wear and injects faults.
//!
//! - [`model`]: geometry, per-word write rules, timings and the presets of the
//!   parts clawmem targets (`esp32`, `nrf52`, `stm32l4`, `stm32h7`, `generic`).
//! - [`flash`]: [`SimFlash`], the flash itself: NOR semantics, counters,
//!   RAM or file backing, cheap snapshots.
//! - [`fault`]: power cuts with torn programs and erases, injected errors, and
//!   their replay strings.
//! - [`nor`]: [`Nor`], the `embedded-storage` 0.3 trait implementation.
#![forbid(unsafe_code)]
#![deny(missing_docs)]

pub mod fault;
pub mod flash;
pub mod model;
pub mod nor;

pub use fault::{CutPoint, InjectedError, OpKind, PowerCut, Tear};
pub use flash::{SimError, SimFlash, Stats};
pub use model::{Geometry, Model, ModelError, Preset, Timings, WriteRule};
pub use nor::{Esp32Flash, GenericFlash, Nor, Nrf52Flash, Stm32h7Flash, Stm32l4Flash};
