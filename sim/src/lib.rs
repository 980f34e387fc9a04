//! `clawmem-sim`: a NOR-flash simulator that measures wear and injects faults.
//!
//! - [`model`]: geometry, per-word write rules, timings and the presets of the
//!   parts clawmem targets (`esp32`, `nrf52`, `stm32l4`, `stm32h7`, `generic`).
//! - [`flash`]: [`SimFlash`], the flash itself: NOR semantics, counters,
//!   RAM or file backing, cheap snapshots.
//! - [`fault`]: power cuts with torn programs and erases, injected errors, and
//!   their replay strings.
//! - [`nor`]: [`Nor`], the `embedded-storage` 0.3 trait implementation.
//! - [`trace`]: agent traces (`traces/FORMAT.md`) parsed into typed
//!   operations.
//! - [`replay`](mod@replay): runs a trace through an engine behind a [`Driver`], checks
//!   every history and measures the flash; [`ClawmemDriver`] drives clawmem.
//! - [`latency`]: modelled device time per operation kind, and the idle
//!   work (`maintain`) of `--idle`.
//! - [`heatmap`]: an SVG of the erase count of every sector.
//! - [`peers`]: the engines clawmem is compared with (ESP-Claw's files on
//!   FAT over ESP-IDF-style wear levelling), and [`compare`](mod@compare),
//!   which runs a trace through all of them.
//! - [`fill`]: the fill workload: rounds kept until the engine is full, then
//!   as many operations again with the oldest session deleted on `Full`.
//! - [`inspect`](mod@inspect): a readable dump of a flash image, damage
//!   reported rather than fatal.
//! - [`espfiles`]: export to and import from ESP-Claw's file layout;
//!   [`espclaw`]: ESP-Claw's own rules for those files (labels, the memory
//!   index, the session manager's chat and subagent maps).
//! - [`opstream`]: traces converted into the binary op stream of the QEMU
//!   firmware (`examples/qemu`), and the checker of its results.
//! - [`torture`]: power-loss campaigns over a trace, with fresh mounts and
//!   invariant checks after every cut.
#![forbid(unsafe_code)]
#![deny(missing_docs)]

pub mod compare;
pub mod espclaw;
pub mod espfiles;
pub mod fault;
pub mod fill;
pub mod flash;
pub mod heatmap;
pub mod inspect;
pub mod latency;
pub mod model;
pub mod nor;
pub mod opstream;
pub mod peers;
pub mod replay;
pub mod torture;
pub mod trace;

pub use fault::{CutPoint, InjectedError, OpKind, PowerCut, Tear};
pub use flash::{SimError, SimFlash, Stats};
pub use model::{Geometry, Model, ModelError, Preset, Timings, WriteRule};
pub use nor::{
    Esp32EncryptedFlash, Esp32Flash, GenericFlash, Nor, Nrf52Flash, Stm32h7Flash, Stm32l4Flash,
};
pub use replay::{
    replay, replay_clawmem, ClawmemDriver, Driver, OpError, ReplayError, ReplayOptions, Report,
    RunOptions,
};
pub use trace::{Op, Trace, TraceError};
