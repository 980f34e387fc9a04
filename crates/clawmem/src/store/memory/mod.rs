//! Long-term memory on flash: items, tombstones, access deltas and the
//! compacted index.
//!
//! Memory is a chain of records rooted at the newest *memory index*:
//!
//! - `MEM_PUT`: one item (its own batch, so it can be scrubbed alone);
//!   a put of an id that exists replaces it (merges, relocation copies);
//!   `MEM_PUT_PLAIN` is the same without the lineage words, for an item
//!   that replaced none (most of them);
//! - `MEM_FORGET`: a tombstone;
//! - `MEM_ACCESS`: the ids a recall returned, whose access counts grow by
//!   one without the items being rewritten; `MEM_ACCESS_PACKED` holds the
//!   same with the ids packed (what this version writes);
//! - `MEM_INDEX`: compaction's result, a list of the active items with their
//!   applied access counts (16 bytes an item), pointing at their puts where
//!   they are. It replaces everything before it.
//!
//! The active set is the index's entries with the chain after it applied in
//! order. RAM keeps only the chain's ends and counters ([`MemState`]).
//!
//! Power loss: each operation is one batch (an update is a put that names the
//! item it replaces, then a tombstone; a cut between them leaves both items,
//! and the replaced one is forgotten by the next compaction through the
//! lineage); compaction and relocation commit with the new index.
//!
//! The files: this one holds the records' layout and the types;
//! `read.rs` reads records and builds the active set, `write.rs` appends
//! records and compacts, `api.rs` is the public memory API, `json.rs` writes
//! the JSON replies of ESP-Claw's recall and list tools, and `scrub.rs`
//! removes an item's copies from flash. Working buffers are in [`Work`].

#[cfg(feature = "memory")]
mod api;
#[cfg(feature = "memory")]
mod json;
#[cfg(feature = "memory")]
mod ops;
#[cfg(feature = "memory")]
mod read;
#[cfg(feature = "memory")]
mod replay;
#[cfg(feature = "memory")]
mod scrub;
#[cfg(all(test, feature = "memory"))]
mod tests;
#[cfg(feature = "memory")]
mod write;

use crate::layout::NO_ADDR;
use crate::memory::{Item, LabelLimit, MAX_ACTIVE_ITEMS};

// What the memory operations use, for `ops.rs` and the files beside it.
#[cfg(feature = "memory")]
use {
    super::work::{GC, MERGED, OP},
    super::{Priority, Store, Work},
    crate::error::{fail, Error, Fail, Kind, UnknownLabelError},
    crate::layout::{u32_at, CHUNK_HEADER_LEN},
    crate::log::{Io, Payload},
    crate::memory::{
        conflicts_for_replace, merge_same_key_into, ItemId, ItemInput, ItemRank,
        ITEM_ENCODED_MAX_BYTES, LONG_TERM_PREAMBLE,
    },
    crate::naming::fnv1a32,
    core::borrow::BorrowMut,
    core::fmt,
    embedded_storage::nor_flash::{MultiwriteNorFlash, NorFlash},
    heapless::Vec,
    ops::*,
};

// The record kinds of long-term memory, in class `CLASS_MEMORY` of
// `layout::kind` (`docs/FORMAT.md`, "Kinds").
/// A long-term memory item.
pub(crate) const MEM_PUT: u8 = 0x30;
/// A long-term memory tombstone.
pub(crate) const MEM_FORGET: u8 = 0x31;
/// The ids a recall returned (access count deltas).
pub(crate) const MEM_ACCESS: u8 = 0x32;
/// The compacted index of active memory items.
pub(crate) const MEM_INDEX: u8 = 0x33;
/// A long-term memory item with no lineage (format version 7 on): `prev`
/// and the item, without the two lineage words of [`MEM_PUT`], which is
/// written only for an item that replaced another.
pub(crate) const MEM_PUT_PLAIN: u8 = 0x34;
/// The ids a recall returned, packed (format version 7 on): `prev`, the
/// time, then the ids as variable-length differences ([`IdCoder`]), where
/// [`MEM_ACCESS`] spends four bytes on each.
pub(crate) const MEM_ACCESS_PACKED: u8 = 0x35;
const _: () = {
    use crate::layout::kind::{defined_in, CLASS_MEMORY};
    assert!(defined_in(MEM_PUT, CLASS_MEMORY) && defined_in(MEM_FORGET, CLASS_MEMORY));
    assert!(defined_in(MEM_ACCESS, CLASS_MEMORY) && defined_in(MEM_INDEX, CLASS_MEMORY));
    assert!(defined_in(MEM_PUT_PLAIN, CLASS_MEMORY) && defined_in(MEM_ACCESS_PACKED, CLASS_MEMORY));
};

#[cfg(feature = "memory")]
/// The `prev` of a put outside the chain (a merge or a relocation copy).
pub(crate) const UNCHAINED: u32 = 0xFFFF_FFFE;

/// Most records in the memory chain before it is compacted regardless
/// (format version 7 on; 32 before). The index costs 16 bytes an item, so
/// the longer the chain, the less of what memory writes is index
/// (`memory_other` in a replay's `written_by_kind`). A read applies the
/// chain to the index, so it reads at most this many records after it.
pub(crate) const MEM_CHAIN_MAX: usize = 128;
#[cfg(feature = "memory")]
/// Most active items: an index holds at most [`MAX_ACTIVE_ITEMS`], and a
/// store or an update that finds the set nearly this full compacts before
/// its put (`Store::mem_room_for_one`), whatever the chain's length.
pub(crate) const ACTIVE_CAP: usize = MAX_ACTIVE_ITEMS + 32;
#[cfg(feature = "memory")]
/// Bytes of a label delta in the scratch area: hash u32, put address u32,
/// change i16, used u8, zero u8.
const DELTA_BYTES: usize = 12;
#[cfg(feature = "memory")]
/// Most label deltas a catalog read tracks (the labels the chain's records
/// changed, three at most each, on both sides of a replacement); a chain
/// that changed more has its catalog counted from the items instead.
const DELTAS_MAX: usize = 192;
/// Bytes of the work area's scratch: the largest of a catalog read's label
/// deltas or label hashes, a compaction's keys (4 B an item) or catalog,
/// a recall's access record, and a chat's session map.
#[cfg(feature = "memory")]
pub(crate) const SCRATCH_BYTES: usize = DELTA_BYTES * DELTAS_MAX;
/// Without memory, the scratch holds a chat map being read or written.
#[cfg(all(not(feature = "memory"), any(feature = "chat", feature = "profiles")))]
pub(crate) const SCRATCH_BYTES: usize = crate::chat::MAP_ENCODED_MAX_BYTES;
#[cfg(feature = "memory")]
/// Where in the scratch area a recall builds its access record, after the
/// matched ids as words (at most [`ACTIVE_CAP`] of them, after two words).
pub(crate) const ACCESS_AT: usize = 8 + 4 * ACTIVE_CAP;
#[cfg(feature = "memory")]
const _: () = assert!(
    SCRATCH_BYTES >= CATALOG_MAX
        && SCRATCH_BYTES >= 4 * ACTIVE_CAP * crate::memory::MAX_SUMMARY_LABELS
        && SCRATCH_BYTES >= ACCESS_AT + 8 + ops::PACKED_ID_MAX * ACTIVE_CAP
        && SCRATCH_BYTES >= crate::chat::MAP_ENCODED_MAX_BYTES
);

/// The `k`th `u32` of a scratch area used as a list of words.
fn word(b: &[u8], k: usize) -> u32 {
    crate::layout::u32_at(b, 4 * k)
}

#[cfg(feature = "memory")]
/// The first of the `n` words `stride` words apart from the start of `b`
/// that is `v`: its place among them (one search, compiled once).
#[inline(never)]
fn find_word(b: &[u8], n: usize, stride: usize, v: u32) -> Option<usize> {
    (0..n).find(|&k| word(b, stride * k) == v)
}

#[cfg(feature = "memory")]
fn set_word(b: &mut [u8], k: usize, v: u32) {
    crate::layout::put_u32(b, 4 * k, v);
}

#[cfg(feature = "memory")]
/// A put's payload before the item: prev u32, origin u32 (the id it
/// replaces), root u32 (the first id of its lineage); a plain put
/// ([`MEM_PUT_PLAIN`]) holds only prev ([`PLAIN_FIXED`]).
pub(crate) const PUT_FIXED: u32 = 12;
#[cfg(feature = "memory")]
/// A plain put's payload before the item: prev u32.
pub(crate) const PLAIN_FIXED: u32 = 4;

#[cfg(feature = "memory")]
/// The bytes before the item in a put of kind `k` (either kind of put),
/// `None` for any other kind.
pub(crate) fn put_fixed(k: u8) -> Option<u32> {
    match k {
        MEM_PUT => Some(PUT_FIXED),
        MEM_PUT_PLAIN => Some(PLAIN_FIXED),
        _ => None,
    }
}
#[cfg(feature = "memory")]
/// An index's payload before its entries: prev, next id, count, oldest,
/// catalog length (`NO_ADDR`: no catalog, it did not fit).
pub(crate) const INDEX_FIXED: u32 = 20;
#[cfg(feature = "memory")]
/// Most bytes of label catalog an index carries.
pub(crate) const CATALOG_MAX: usize = 1024;
#[cfg(feature = "memory")]
/// One index entry: id u32, put address u32, updated_at u32, access u16,
/// label bloom u16.
pub(crate) const INDEX_ENTRY: u32 = 16;

/// Long-term memory tunables. [`MemoryConfig::default`] follows ESP-Claw.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct MemoryConfig {
    /// Compact after this many stores, updates and forgets (ESP-Claw: 5).
    pub compact_after_changes: u16,
    /// Compact after this many bytes of memory records (ESP-Claw: 32 KiB).
    pub compact_after_bytes: u32,
    /// Most active items kept by compaction (ESP-Claw: 128, the maximum).
    pub max_items: usize,
    /// How summary labels are cut from tags.
    pub label_limit: LabelLimit,
}

impl Default for MemoryConfig {
    fn default() -> Self {
        MemoryConfig {
            compact_after_changes: 5,
            compact_after_bytes: 32 * 1024,
            max_items: MAX_ACTIVE_ITEMS,
            label_limit: LabelLimit::DEFAULT,
        }
    }
}

/// The memory chain's state in RAM (and in checkpoints).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct MemState {
    /// The newest index, or none.
    pub root: u32,
    /// The newest memory record (the root if none follows it).
    pub head: u32,
    /// Records after the root.
    pub chain: u16,
    /// Stores, updates and forgets since the root.
    pub changes: u16,
    /// Payload bytes of records since the root.
    pub bytes: u32,
    /// Sector sequence of the oldest sector holding live memory bytes
    /// (`u32::MAX`: none).
    pub oldest: u32,
    /// The next item id; ids never repeat.
    pub next_id: u32,
}

/// Bytes of [`MemState`] in a checkpoint.
pub(crate) const MEM_STATE_ENCODED: usize = 24;

impl MemState {
    pub const EMPTY: MemState = MemState {
        root: NO_ADDR,
        head: NO_ADDR,
        chain: 0,
        changes: 0,
        bytes: 0,
        oldest: u32::MAX,
        next_id: 1,
    };

    #[cfg(feature = "memory")]
    /// The state right after an index at `addr`: the chain is the index
    /// alone, nothing changed since; `oldest` and `next_id` as given.
    pub fn rooted_at(addr: u32, oldest: u32, next_id: u32) -> MemState {
        MemState {
            root: addr,
            head: addr,
            chain: 0,
            changes: 0,
            bytes: 0,
            oldest,
            next_id,
        }
    }

    /// Its encoding in a checkpoint, as six little-endian words: root,
    /// head, chain (low half) and changes, bytes, oldest, next_id (the
    /// checkpoint's payload takes the bytes of each in turn).
    pub fn words(&self) -> [u32; MEM_STATE_ENCODED / 4] {
        let counts = u32::from(self.chain) | u32::from(self.changes) << 16;
        [
            self.root,
            self.head,
            counts,
            self.bytes,
            self.oldest,
            self.next_id,
        ]
    }

    pub fn decode(b: &[u8; MEM_STATE_ENCODED]) -> Option<MemState> {
        let counts = word(b, 2);
        let s = MemState {
            root: word(b, 0),
            head: word(b, 1),
            chain: counts as u16,
            changes: (counts >> 16) as u16,
            bytes: word(b, 3),
            oldest: word(b, 4),
            next_id: word(b, 5),
        };
        (s.chain as usize <= MEM_CHAIN_MAX && s.next_id >= 1).then_some(s)
    }
}

#[cfg(feature = "memory")]
/// The memory chain after the root as a read walks it (the work area's, so
/// that a long chain costs no stack): each record's address and kind.
/// One more than [`MEM_CHAIN_MAX`] fits, so a chain longer than a sound one
/// is seen for the damage it is.
pub(crate) struct ChainList {
    addr: [u32; MEM_CHAIN_MAX + 1],
    kind: [u8; MEM_CHAIN_MAX + 1],
    /// Records listed.
    pub len: usize,
}

#[cfg(feature = "memory")]
impl ChainList {
    pub const EMPTY: ChainList = ChainList {
        addr: [0; MEM_CHAIN_MAX + 1],
        kind: [0; MEM_CHAIN_MAX + 1],
        len: 0,
    };

    pub fn clear(&mut self) {
        self.len = 0;
    }

    /// Lists a record; `false` if the list is full.
    pub fn push(&mut self, addr: u32, kind: u8) -> bool {
        let Some(slot) = self.addr.get_mut(self.len) else {
            return false;
        };
        *slot = addr;
        self.kind[self.len] = kind;
        self.len += 1;
        true
    }

    /// Records listed, as a bound the compiler sees (`len` never passes
    /// it): indexing below it needs no check.
    pub fn count(&self) -> usize {
        self.len.min(MEM_CHAIN_MAX + 1)
    }

    /// The `i`th record listed: address and kind.
    pub fn get(&self, i: usize) -> (u32, u8) {
        (self.addr[i], self.kind[i])
    }
}

#[cfg(feature = "memory")]
/// An active item as the index knows it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Active {
    pub id: u32,
    /// First chunk of its put.
    pub addr: u32,
    pub updated_at: u32,
    pub access: u16,
    /// A 16-bit Bloom filter of its labels, to skip items a recall cannot match.
    pub bloom: u16,
}

/// What a store did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Stored {
    /// The new item, or the existing item it duplicates.
    pub item: Item,
    /// `false` if it was a duplicate and nothing was written.
    pub changed: bool,
    /// Items forgotten by the `replace` intent.
    pub replaced: u16,
}

#[cfg(feature = "memory")]
impl Stored {
    /// A store's answer before it is made: an empty item, changed, nothing
    /// replaced (filled in place).
    pub(crate) const fn fresh() -> Stored {
        Stored {
            item: Item::empty(),
            changed: true,
            replaced: 0,
        }
    }
}

/// Without the `memory` feature, a memory record met at mount only marks
/// the chain as not empty, and mount then refuses the store before writing
/// anything (`mount.rs`): only a build with memory can collect it.
#[cfg(not(feature = "memory"))]
impl<
        F: embedded_storage::nor_flash::NorFlash,
        const MAX_SESSIONS: usize,
        W: core::borrow::BorrowMut<super::Work>,
    > super::Store<F, MAX_SESSIONS, W>
{
    pub(in crate::store) fn mem_apply(
        &mut self,
        addr: u32,
        _h: &crate::layout::ChunkHeader,
        _sector_seq: u32,
    ) -> Result<(), super::replay::Skip> {
        self.mem.head = addr;
        Ok(())
    }
}
