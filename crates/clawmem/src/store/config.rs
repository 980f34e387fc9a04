//! A store's configuration: [`Config`], [`MountMode`], and the check that a
//! configuration fits the flash.
//!
//! Invariant: a [`Store`] exists only with a configuration that
//! [`check_config`](Store::check_config) accepted: the partition holds a
//! session at the size limit, with its index and its compaction's index,
//! beside the fixed parts of the reserves (sectors kept free for garbage
//! collection, and for maintenance on top of that), two checkpoints and the
//! room kept for memory and profiles. The rest of the reserves follows what
//! the store holds (`Store::reserve_for`).
//!
//! Pure: nothing here reads or writes flash, so a power cut has nothing to
//! leave.

use core::borrow::BorrowMut;

use embedded_storage::nor_flash::NorFlash;

use super::checkpoint::{CKPT_FIXED, CKPT_WASTE};
use super::{MemoryConfig, Store, Work};
use crate::error::Error;
pub use crate::layout::FlashUnits;
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
    /// Room session history leaves for long-term memory and profiles, so
    /// that a store filled with chat history still takes memory stores and
    /// profile writes (ESP-Claw#128: profiles that could not be written on
    /// a full FAT stopped the device booting). Appends leave this much free
    /// beyond the reserve, less what profiles and chat maps already hold;
    /// memory, profiles and chat maps may use it. `None`: enough for the
    /// memory cap at its largest items and the four profiles at their size
    /// limit, at most a sixteenth of the partition, none under 128 KiB
    /// ([`Config::knowledge_reserve`]).
    pub knowledge_reserve_bytes: Option<u32>,
    /// The program and erase units the store uses instead of the flash
    /// type's `WRITE_SIZE` and `ERASE_SIZE`, each a multiple of the type's:
    /// for a driver whose geometry is known only at run time (the C API's
    /// flash, whose type says 1 and 1), or to program in coarser blocks
    /// than the driver asks (ESP32 flash encryption writes 16-byte blocks).
    /// `None`: the type's. Every mount of a store must use the units it was
    /// formatted with.
    pub flash_units: Option<FlashUnits>,
}

impl Default for Config {
    fn default() -> Self {
        Config {
            session_size_limit_bytes: crate::turns::SESSION_SIZE_LIMIT as u32,
            max_session_id_bytes: MAX_SESSION_ID_BYTES,
            checkpoint_interval_bytes: 28 * 1024,
            profile_max_bytes: crate::profile::DEFAULT_MAX_BYTES,
            memory: MemoryConfig::default(),
            knowledge_reserve_bytes: None,
            flash_units: None,
        }
    }
}

impl Config {
    /// The room session history leaves for memory and profiles on a
    /// partition of `capacity` bytes: [`knowledge_reserve_bytes`] if set,
    /// else 128 items at their largest and four profiles at
    /// `profile_max_bytes`, with their framing, at most `capacity / 16`, and
    /// none on a partition under 128 KiB.
    ///
    /// [`knowledge_reserve_bytes`]: Config::knowledge_reserve_bytes
    pub fn knowledge_reserve(&self, capacity: u32) -> u32 {
        if let Some(b) = self.knowledge_reserve_bytes {
            return b;
        }
        // Below 128 KiB a partition holds a session or two at most: there
        // is nothing to set aside.
        if capacity < 128 * 1024 {
            return 0;
        }
        // Saturating: a configuration from a C caller may hold any value.
        let items = crate::memory::MAX_ACTIVE_ITEMS * (crate::memory::ITEM_ENCODED_MAX_BYTES + 40);
        let profiles = self.profile_max_bytes.saturating_add(64).saturating_mul(4);
        let both = u32::try_from(items.saturating_add(profiles)).unwrap_or(u32::MAX);
        both.min(capacity / 16)
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
    ) -> Result<(u32, u32), Error<F::Error>> {
        if config.max_session_id_bytes == 0 || config.max_session_id_bytes > MAX_SESSION_ID_BYTES {
            return Err(Error::Config("max_session_id_bytes must be 1 to 255"));
        }
        if config.session_size_limit_bytes < 64 {
            return Err(Error::Config(
                "session_size_limit_bytes must be at least 64",
            ));
        }
        let space = geo.sector_payload_space() - CHUNK_HEADER_LEN;
        let limit = config.session_size_limit_bytes;
        // The fixed parts of the reserves: garbage collection keeps a
        // sector for its copies and one for a chunk that does not fit the
        // head's rest; maintenance a sector for its small records. The
        // rest follows what the store holds (`Store::reserve_for`).
        let gc = 2;
        let maintenance = 1;
        // The partition must hold, beside them, a session at the size
        // limit with its index (at ESP-Claw's typical record, an entry and
        // a CRC a 128 body bytes are a tenth more), its compaction's index,
        // two full checkpoints (one a collection writes, one due) and the
        // room kept for memory and profiles.
        // (The checkpoints of the one session: the reserve grows with the
        // sessions a store holds, and a store that cannot keep it for
        // another answers `Full`.)
        // In u64: a limit or reserve near u32::MAX (a C caller's) must be
        // refused, not wrap round to a size that fits.
        let ckpt = (CKPT_FIXED + CKPT_WASTE + SESSION_ENCODED) as u64;
        // (Format 10: a full checkpoint records the sector table and the
        // dead bytes too.)
        #[cfg(feature = "sector-table")]
        let ckpt = ckpt + 8 + 2 * u64::from(geo.count) + 4 + u64::from(geo.count.div_ceil(2));
        let limit = u64::from(limit);
        let session = limit + limit / 8 + u64::from(BASE_FIXED) + MAX_SESSION_ID_BYTES as u64;
        let knowledge = u64::from(config.knowledge_reserve(geo.capacity()));
        let bytes = 2 * ckpt + session + limit / 8 + knowledge;
        let needed = u64::from(gc + maintenance) + bytes.div_ceil(u64::from(space)) + 1;
        if needed > u64::from(geo.count) {
            return Err(Error::Config("partition too small for the session size limit: needs room for a session at the limit beside the reserves and the room kept for memory and profiles"));
        }
        Ok((gc, maintenance))
    }
}
