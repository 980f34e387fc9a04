//! The engine's working RAM: the buffers an operation needs for a moment
//! but that are too large for a firmware task's stack.
//!
//! Owns: the active sets of long-term memory (one for the public operation
//! in progress, one for a compaction that garbage collection starts under
//! it), a scratch area, the buffer an item's put is read into or encoded
//! in, three item slots, the memory chain a read walks, and what a session
//! base being written walks (its chain and three sweeps; no base is written
//! while another is).
//!
//! Invariants: nothing in it outlives the operation that filled it; every
//! reader fills what it reads first. The operation level ([`OP`]) is never
//! touched by a compaction, so a public operation may keep its active set
//! across a write that collects garbage. The scratch area is never held
//! across a write that may collect garbage, except by a compaction itself,
//! which runs with no collection nested in it. The item slots follow the
//! scratch area's rule (a compaction holds them across its own writes; any
//! other reader fills one and is done with it before its next write), but
//! for slot `MERGED`: a public operation's put or merge holds its item
//! there across the compaction and collection its write may start, which
//! never use that slot.
//!
//! Power loss: it is RAM only and holds nothing that a mount needs.

#[cfg(feature = "memory")]
use heapless::Vec;

use super::base::BaseWork;
#[cfg(any(feature = "memory", feature = "chat", feature = "profiles"))]
use super::memory::SCRATCH_BYTES;
#[cfg(feature = "memory")]
use super::memory::{Active, ChainList, ACTIVE_CAP, PUT_FIXED};
#[cfg(feature = "memory")]
use crate::memory::{Item, ITEM_ENCODED_MAX_BYTES};

#[cfg(feature = "memory")]
/// The active set of a public memory operation.
pub(crate) const OP: usize = 0;
#[cfg(feature = "memory")]
/// The item slot of a public operation's put or merge (no compaction uses
/// it).
pub(crate) const MERGED: usize = 2;
#[cfg(feature = "memory")]
/// The active set of a memory compaction (a public one, or one that garbage
/// collection starts under another operation).
pub(crate) const GC: usize = 1;

/// The engine's working RAM, kept apart from the stack: about 11 KiB with
/// the `memory` feature, which needs the most of it, and the base being
/// written (a few hundred bytes) with none of the optional features.
///
/// A [`Store`](crate::Store) owns one by default; a firmware that wants the
/// `Store` itself small, or the work area in a particular RAM, lends one
/// instead (see [`Store::mount_into`](crate::Store::mount_into)). Its contents
/// matter only during a call.
pub struct Work {
    #[cfg(feature = "memory")]
    pub(crate) active: [Vec<Active, ACTIVE_CAP>; 2],
    #[cfg(any(feature = "memory", feature = "chat", feature = "profiles"))]
    pub(crate) scratch: [u8; SCRATCH_BYTES],
    #[cfg(feature = "memory")]
    pub(crate) enc: [u8; PUT_FIXED as usize + ITEM_ENCODED_MAX_BYTES],
    /// Items being read: slots 0 and 1 by a compaction (two at a merge),
    /// or for a moment by a read that holds none across a write; slot
    /// [`MERGED`] by a public operation's put or merge, across the
    /// compaction its write may start.
    #[cfg(feature = "memory")]
    pub(crate) items: [Item; 3],
    /// The memory chain a read of the active set walks.
    #[cfg(feature = "memory")]
    pub(crate) chain: ChainList,
    /// The session chain and the three sweeps of a base being written.
    pub(crate) base: BaseWork,
}

impl Work {
    /// An empty work area (usable in a `static`).
    pub const fn new() -> Self {
        Work {
            #[cfg(feature = "memory")]
            active: [Vec::new(), Vec::new()],
            #[cfg(any(feature = "memory", feature = "chat", feature = "profiles"))]
            scratch: [0; SCRATCH_BYTES],
            #[cfg(feature = "memory")]
            enc: [0; PUT_FIXED as usize + ITEM_ENCODED_MAX_BYTES],
            #[cfg(feature = "memory")]
            items: [Item::empty(), Item::empty(), Item::empty()],
            #[cfg(feature = "memory")]
            chain: ChainList::EMPTY,
            base: BaseWork::EMPTY,
        }
    }
}

impl Default for Work {
    fn default() -> Self {
        Self::new()
    }
}

impl core::fmt::Debug for Work {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.write_str("Work")
    }
}
