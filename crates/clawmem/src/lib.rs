//! clawmem: an AI agent's memory on raw NOR flash.
//!
//! Per-session chat history, long-term memory items and profile documents,
//! written straight onto any [`embedded_storage::nor_flash::NorFlash`] so that
//! they survive power loss. The crate is `no_std`, allocates nothing and
//! contains no `unsafe` code.
//!
//! The behaviour follows ESP-Claw's memory system (session logs with a binary
//! `CHDX` index, turn-aware compaction, tombstoned long-term memory, profile
//! documents); the storage under it is a log-structured store with CRC-framed
//! records instead of FAT. See `docs/DESIGN.md` and `docs/FORMAT.md`.
#![no_std]
#![forbid(unsafe_code)]
#![deny(missing_docs)]

pub mod backend;
pub mod chat;
pub mod chdx;
pub mod memory;
pub mod naming;
pub mod profile;
#[cfg(feature = "rebuild")]
pub mod rebuild;
pub mod text;
pub mod turns;

mod cursor;
mod error;
mod layout;
mod log;
mod session;
mod store;
#[cfg(test)]
mod testing;

pub use chdx::{BackendFormat, RecordType};
pub use error::{Error, NoLabel};
pub use layout::{FORMAT_VERSION, MIN_FORMAT_VERSION};
pub use session::{Record, MAX_RECORDS_PER_APPEND, MAX_SESSION_ID_BYTES};
pub use store::{
    Appended, Config, FlashUnits, Gate, History, HistoryStream, Maintenance, MemoryConfig,
    MountMode, MountReport, SessionInfo, Space, Store, Stored, UnknownLabelError, Work,
    WrittenBytes,
};
#[cfg(feature = "sector-table")]
pub use store::{Cleaning, DeadSpace};
