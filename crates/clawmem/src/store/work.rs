//! The engine's working RAM: the buffers an operation needs for a moment
//! but that are too large for a firmware task's stack.
//!
//! Owns: the active sets of long-term memory (one for the public operation
//! in progress, one for a compaction that garbage collection starts under
//! it), a scratch area, the buffer an item's put is read into or encoded
//! in, three item slots, and what a session base being written walks (its
//! chain and three sweeps; no base is written while another is).
//!
//! Invariants: nothing in it outlives the operation that filled it; every
//! reader fills what it reads first. The operation level ([`OP`]) is never
//! touched by a compaction, so a public operation may keep its active set
//! across a write that collects garbage. The scratch area is never held
//! across a write that may collect garbage, except by a compaction itself,
//! which runs with no collection nested in it. The item slots follow the
//! scratch area's rule: a compaction holds them across its own writes; any
//! other reader fills one and is done with it before its next write.
//!
//! Power loss: it is RAM only and holds nothing that a mount needs.

use heapless::Vec;

use super::base::BaseWork;
use super::memory::{Active, ACTIVE_CAP, PUT_FIXED, SCRATCH_BYTES};
use crate::memory::{Item, ITEM_ENCODED_MAX_BYTES};

/// The active set of a public memory operation.
pub(crate) const OP: usize = 0;
/// The item slot of a public operation's merge (no compaction uses it).
pub(crate) const MERGED: usize = 2;
/// The active set of a memory compaction (a public one, or one that garbage
/// collection starts under another operation).
pub(crate) const GC: usize = 1;

/// The engine's working RAM (about 9 KiB), kept apart from the stack.
///
/// A [`Store`](crate::Store) owns one by default; a firmware that wants the
/// `Store` itself small, or the work area in a particular RAM, lends one
/// instead (see [`Store::mount_in`](crate::Store::mount_in)). Its contents
/// matter only during a call.
pub struct Work {
    pub(crate) active: [Vec<Active, ACTIVE_CAP>; 2],
    pub(crate) scratch: [u8; SCRATCH_BYTES],
    pub(crate) enc: [u8; PUT_FIXED as usize + ITEM_ENCODED_MAX_BYTES],
    /// Items being read: slots 0 and 1 by a compaction (two at a merge),
    /// or for a moment by a read that holds none across a write; slot
    /// [`MERGED`] by a public operation's merge, across the compaction its
    /// write may start.
    pub(crate) items: [Item; 3],
    /// The session chain and the three sweeps of a base being written.
    pub(crate) base: BaseWork,
}

impl Work {
    /// An empty work area (usable in a `static`).
    pub const fn new() -> Self {
        Work {
            active: [Vec::new(), Vec::new()],
            scratch: [0; SCRATCH_BYTES],
            enc: [0; PUT_FIXED as usize + ITEM_ENCODED_MAX_BYTES],
            items: [Item::empty(), Item::empty(), Item::empty()],
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
