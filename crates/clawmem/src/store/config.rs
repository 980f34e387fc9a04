//! A store's configuration: [`Config`], [`MountMode`], and the check that a
//! configuration fits the flash.
//!
//! Invariant: a [`Store`] exists only with a configuration that
//! [`check_config`](Store::check_config) accepted, so the reserves it
//! computes (sectors kept free for garbage collection, and for maintenance
//! on top of that) leave room to relocate and compact the largest session
//! the size limit allows.
//!
//! Pure: nothing here reads or writes flash, so a power cut has nothing to
//! leave.

use core::borrow::BorrowMut;

use embedded_storage::nor_flash::NorFlash;

use super::checkpoint::CKPT_FIXED;
use super::{MemoryConfig, Store, Work};
use crate::error::{Error, Fail};
use crate::layout::CHUNK_HEADER_LEN;
use crate::session::{BASE_FIXED, MAX_SESSION_ID_BYTES, SESSION_ENCODED};

/// Tunables of a store. [`Config::default`] follows ESP-Claw.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Config {
    /// A session whose ESP-Claw `.log` size (bodies plus one newline each)
    /// exceeds this after a completed turn is compacted; if it is still over,
    /// it is blocked. ESP-Claw: 150 KiB.
    pub session_size_limit_bytes: u32,
    /// Longest session id, at most [`MAX_SESSION_ID_BYTES`].
    pub max_session_id_bytes: usize,
    /// Payload bytes between two checkpoints (at least 24 checkpoints' worth
    /// is used). Mount reads the chunk headers written since the newest
    /// checkpoint, so this bounds mount cost.
    pub checkpoint_interval_bytes: u32,
    /// Largest profile document. ESP-Claw sets none; 8 KiB by default.
    pub profile_max_bytes: usize,
    /// Long-term memory tunables.
    pub memory: MemoryConfig,
}

impl Default for Config {
    fn default() -> Self {
        Config {
            session_size_limit_bytes: crate::turns::SESSION_SIZE_LIMIT as u32,
            max_session_id_bytes: MAX_SESSION_ID_BYTES,
            checkpoint_interval_bytes: 28 * 1024,
            profile_max_bytes: crate::profile::DEFAULT_MAX_BYTES,
            memory: MemoryConfig::default(),
        }
    }
}

/// What to do when mounting finds no store.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum MountMode {
    /// Refuse with [`Error::NotFormatted`].
    ExistingOnly,
    /// Format a partition that is entirely erased (never a foreign one).
    FormatIfBlank,
}

impl<F: NorFlash, const MAX_SESSIONS: usize, W: BorrowMut<Work>> Store<F, MAX_SESSIONS, W> {
    /// Checks `config` against the geometry and returns the reserves it
    /// needs, in sectors: (garbage collection, maintenance).
    pub(super) fn check_config(
        geo: &crate::layout::Geometry,
        config: &Config,
    ) -> Result<(u32, u32), Fail<F::Error>> {
        if config.max_session_id_bytes == 0 || config.max_session_id_bytes > MAX_SESSION_ID_BYTES {
            return Err(Error::Config("max_session_id_bytes must be 1 to 64"));
        }
        if config.session_size_limit_bytes < 64 {
            return Err(Error::Config(
                "session_size_limit_bytes must be at least 64",
            ));
        }
        let space = geo.sector_payload_space() - CHUNK_HEADER_LEN;
        let limit = config.session_size_limit_bytes;
        // Relocating the largest session: its bodies plus at most 15 index
        // bytes per 16 body bytes, its id, and one chunk header per sector.
        let session_max = limit + limit / 16 * 15 + BASE_FIXED + 64 + 8 + 1024;
        let gc = session_max.div_ceil(space) + 2;
        let ckpt = (CKPT_FIXED + MAX_SESSIONS * SESSION_ENCODED) as u32;
        let maintenance = (limit / 16 * 15 + ckpt + 1024).div_ceil(space) + 1;
        if gc + maintenance + 2 > geo.count {
            return Err(Error::Config(
                "partition too small for the session size limit: needs room to relocate and compact the largest session",
            ));
        }
        Ok((gc, maintenance))
    }
}
