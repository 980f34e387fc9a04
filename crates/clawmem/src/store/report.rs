//! What the store's functions report: [`Appended`], [`Gate`],
//! [`SessionInfo`], [`Space`], [`WrittenBytes`], [`MountReport`], and
//! [`History`], a session history read into the caller's buffer.
//!
//! Plain values: nothing here reads or writes flash, so a power cut has
//! nothing to leave. A [`History`] borrows the caller's buffer and holds only
//! records whose checksums held when they were read.

use core::fmt;

use crate::chdx::{BackendFormat, RecordType};
use crate::layout::u32_at;
use crate::session::Record;

/// What an append did besides storing the records.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Appended {
    /// Turn-aware compaction ran and dropped records.
    pub compacted: bool,
    /// The session is now blocked (still over its limit after compaction).
    pub blocked: bool,
}

/// The request gate's answer.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Gate {
    /// The request may go on.
    Pass,
    /// The session is blocked; send this warning to the user, whole.
    Blocked(&'static str),
}

/// Facts about one session.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SessionInfo {
    /// Records in the history.
    pub records: u32,
    /// ESP-Claw `.log` size: bodies plus one newline each.
    pub size_bytes: u32,
    /// Whether appends are refused until the session is deleted.
    pub blocked: bool,
}

/// What [`Store::maintain`](super::Store::maintain) did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Maintenance {
    /// Steps taken (a checkpoint, a collection of the tail sector, or a
    /// sector erased ahead).
    pub steps: u32,
    /// Nothing more is due: appends will not erase or collect until more is
    /// written.
    pub done: bool,
}

/// Space in the partition, in sectors.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Space {
    /// Sectors in the partition.
    pub sectors: u32,
    /// Sectors from the tail to the head.
    pub used_sectors: u32,
    /// Sectors appends leave free: for garbage collection, maintenance, and
    /// the room kept for memory and profiles. It follows what the store
    /// holds (a checkpoint of its sessions, its largest index).
    pub reserve_sectors: u32,
    /// Sector size.
    pub sector_bytes: u32,
}

/// What the sectors in use hold dead, as far as the store knows (feature
/// `sector-table`; see [`Store::dead_space`](super::Store::dead_space)):
/// never more than they do.
#[cfg(feature = "sector-table")]
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct DeadSpace {
    /// Dead bytes counted in the sectors in use.
    pub dead_bytes: u64,
    /// Sectors in use at least half of whose bytes are counted dead: what
    /// a cleaner that picks its victims could take for half a copy each.
    pub half_dead_sectors: u32,
    /// The dead bytes in those sectors.
    pub half_dead_bytes: u64,
    /// Dead bytes counted in the oldest sectors in use, the next ones the
    /// tail's collection meets ([`DeadSpace::TAIL_SECTORS`] of them, or all
    /// if fewer are in use).
    pub tail_dead_bytes: u64,
}

#[cfg(feature = "sector-table")]
impl DeadSpace {
    /// The oldest sectors in use that [`tail_dead_bytes`](Self::tail_dead_bytes) covers.
    pub const TAIL_SECTORS: u32 = 8;
}

/// What collecting the tail cost since mount (feature `sector-table`; see
/// [`Store::cleaning`](super::Store::cleaning)): how live the sectors it
/// released were, and what it copied beside what lived in them.
#[cfg(feature = "sector-table")]
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Cleaning {
    /// Tail sectors released by a collection, or found to hold nothing
    /// live by a write short of room (a mount's release of such sectors
    /// is not counted).
    pub tail_releases: u64,
    /// Their payload space (a sector less its header, each).
    pub tail_payload_bytes: u64,
    /// Bytes live in them when they were released: the session bodies
    /// starting there and the objects there, which the collection copied
    /// out (memory items are not counted).
    pub tail_live_bytes: u64,
    /// Session bodies a collection copied from later sectors, relocating
    /// a session whole or up to a reach past the tail.
    pub ahead_bytes: u64,
    /// The indexes of the bases those relocations wrote (the fixed part,
    /// the id, the CHDX header, and an entry and a CRC a record).
    pub index_bytes: u64,
    /// Moves records written instead of a base (format 10's stage 4): each
    /// costs its fixed part, 20 bytes, beside the bodies it moved out of
    /// the tail (counted in `tail_live_bytes`).
    pub moves_records: u64,
}

/// Flash bytes written since mount, by what they hold (see
/// [`Store::written_bytes`](super::Store::written_bytes)).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct WrittenBytes {
    /// Full checkpoints, and the header-only chunks that say which sectors
    /// are erased ahead (idle-time maintenance).
    pub checkpoints: u64,
    /// Delta checkpoints.
    pub delta_checkpoints: u64,
    /// Session batches (appends).
    pub session_batches: u64,
    /// Session bases: compaction, consolidation and relocation.
    pub session_bases: u64,
    /// Session deletes and blocks.
    pub session_other: u64,
    /// Profile documents and chat session maps.
    pub objects: u64,
    /// Long-term memory items (stores, updates, merges, relocation copies).
    pub memory_items: u64,
    /// Long-term memory tombstones, access records and indexes.
    pub memory_other: u64,
}

/// Counters of what mount did.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct MountReport {
    /// Sector headers read.
    pub sector_headers: u32,
    /// Chunks applied after the checkpoint.
    pub chunks_scanned: u32,
    /// Whether a checkpoint was found (else the whole ring was scanned).
    pub from_checkpoint: bool,
    /// Whether the head sector held damage (a torn write) and was sealed.
    pub sealed_head: bool,
    /// Whether the head sector's last chunk was torn and writing goes on
    /// after it, in the same sector (its end was known).
    pub resumed_head: bool,
    /// Batches found damaged or uncommitted and ignored.
    pub ignored_batches: u32,
    /// Sectors inside the ring whose header is damaged but whose contents
    /// check out: kept as they are.
    pub damaged_headers: u32,
    /// Sessions whose first batch (the only copy of their name) is damaged
    /// at rest, found again from the name's own CRC or by correcting one
    /// flipped bit; the records of that batch are lost, the rest kept.
    pub recovered_names: u32,
    /// Memory rests on an index damaged at rest, found again through the
    /// chain after it: its entries are kept where the puts they name confirm
    /// them, and the mount compacts memory to write a sound index.
    pub salvaged_memory_index: bool,
}

/// A session history read into a caller buffer: each record is a 6-byte
/// header (type u8, format u8, body length u32 LE) and the body.
pub struct History<'b> {
    pub(super) buf: &'b [u8],
    pub(super) records: u32,
    pub(super) damaged: u32,
}

impl<'b> History<'b> {
    /// Records returned.
    pub fn len(&self) -> usize {
        self.records as usize
    }

    /// Whether there are no records (never true for a returned history).
    pub fn is_empty(&self) -> bool {
        self.records == 0
    }

    /// Records that were damaged on flash and left out.
    pub fn damaged_records(&self) -> u32 {
        self.damaged
    }

    /// Bytes of the buffer used.
    pub fn used_bytes(&self) -> usize {
        self.buf.len()
    }

    /// The records, oldest first.
    pub fn iter(&self) -> impl Iterator<Item = Record<'b>> + 'b {
        let buf = self.buf;
        let mut at = 0usize;
        core::iter::from_fn(move || {
            let (record, next) = Self::record_at(buf, at)?;
            at = next;
            Some(record)
        })
    }

    /// The bytes the history took of the caller's buffer (its first
    /// [`used_bytes`](Self::used_bytes)), to keep and walk later with
    /// [`record_at`](Self::record_at), as the C API does.
    pub fn bytes(&self) -> &'b [u8] {
        self.buf
    }

    /// The record at byte offset `at` of a history's [`bytes`](Self::bytes)
    /// and the offset of the next one; `None` at the end (or at an offset
    /// that is not a record's start in those bytes).
    pub fn record_at(bytes: &'b [u8], at: usize) -> Option<(Record<'b>, usize)> {
        let h = bytes.get(at..at.checked_add(HIST_HEADER)?)?;
        let kind = RecordType::try_from(h[0]).ok()?;
        let format = BackendFormat::try_from(h[1]).ok()?;
        let len = u32_at(h, 2) as usize;
        let end = (at + HIST_HEADER).checked_add(len)?;
        let body = bytes.get(at + HIST_HEADER..end)?;
        Some((Record { kind, format, body }, end))
    }
}

impl fmt::Debug for History<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("History")
            .field("records", &self.records)
            .field("damaged", &self.damaged)
            .finish()
    }
}

/// Bytes of a record's header in a [`History`] buffer.
pub(super) const HIST_HEADER: usize = 6;
