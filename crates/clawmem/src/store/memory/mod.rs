//! Long-term memory on flash: items, tombstones, access deltas and the
//! compacted index.
//!
//! Memory is a chain of records rooted at the newest *memory index*:
//!
//! - `MEM_PUT`: one item (its own batch, so it can be scrubbed alone);
//!   a put of an id that exists replaces it (merges, relocation copies);
//! - `MEM_FORGET`: a tombstone;
//! - `MEM_ACCESS`: the ids a recall returned, whose access counts grow by
//!   one without the items being rewritten;
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
//! records and compacts, `api.rs` is the public memory API and `scrub.rs`
//! removes an item's copies from flash. Working buffers are in [`Work`].

#[cfg(feature = "memory")]
mod api;
#[cfg(feature = "memory")]
mod read;
#[cfg(feature = "memory")]
mod scrub;
#[cfg(feature = "memory")]
mod write;

use core::borrow::BorrowMut;
use core::fmt;

use embedded_storage::nor_flash::{MultiwriteNorFlash, NorFlash};
use heapless::Vec;

use super::work::{GC, MERGED, OP};
use super::{Priority, Store, Work};
use crate::error::{Error, Fail, UnknownLabelError};
use crate::layout::{kind, u16_at, u32_at, CHUNK_HEADER_LEN, NO_ADDR};
use crate::log::{Io, Payload};
use crate::memory::{
    conflicts_for_replace, merge_same_key_into, Item, ItemId, ItemInput, ItemRank, LabelLimit,
    ITEM_ENCODED_MAX_BYTES, LONG_TERM_PREAMBLE, MAX_ACTIVE_ITEMS,
};
use crate::naming::fnv1a32;

/// The `prev` of a put outside the chain (a merge or a relocation copy).
pub(crate) const UNCHAINED: u32 = 0xFFFF_FFFE;

/// Most records in the memory chain before it is compacted regardless.
pub(crate) const MEM_CHAIN_MAX: usize = 32;
/// Most active items between two compactions.
pub(crate) const ACTIVE_CAP: usize = MAX_ACTIVE_ITEMS + MEM_CHAIN_MAX;
/// Bytes of a label delta in the scratch area: hash u32, put address u32,
/// change i16, used u8, zero u8.
const DELTA_BYTES: usize = 12;
/// Most label deltas a catalog read tracks: the chain's records changed
/// at most three labels each, on both sides of a replacement.
const DELTAS_MAX: usize = 6 * MEM_CHAIN_MAX;
/// Bytes of the work area's scratch: the largest of a catalog read's label
/// deltas or label hashes, a compaction's keys (4 B an item) or catalog,
/// a recall's access record, and a chat's session map.
pub(crate) const SCRATCH_BYTES: usize = DELTA_BYTES * DELTAS_MAX;
const _: () = assert!(
    SCRATCH_BYTES >= CATALOG_MAX
        && SCRATCH_BYTES >= 4 * ACTIVE_CAP * crate::memory::MAX_SUMMARY_LABELS
        && SCRATCH_BYTES >= 8 + 4 * MAX_ACTIVE_ITEMS
        && SCRATCH_BYTES >= crate::chat::MAP_ENCODED_MAX_BYTES
);

/// One bit per active-set entry, on the stack (20 bytes).
#[derive(Clone, Copy)]
struct Marks([u32; ACTIVE_CAP.div_ceil(32)]);

impl Marks {
    const NONE: Marks = Marks([0; ACTIVE_CAP.div_ceil(32)]);
    fn set(&mut self, k: usize) {
        if let Some(w) = self.0.get_mut(k / 32) {
            *w |= 1 << (k % 32);
        }
    }
    fn get(&self, k: usize) -> bool {
        self.0.get(k / 32).is_some_and(|w| w & (1 << (k % 32)) != 0)
    }
}

/// The `k`th `u32` of a scratch area used as a list of words.
fn word(b: &[u8], k: usize) -> u32 {
    u32_at(b, 4 * k)
}

fn set_word(b: &mut [u8], k: usize, v: u32) {
    b[4 * k..4 * k + 4].copy_from_slice(&v.to_le_bytes());
}

/// The record kinds of the memory chain after its index.
fn is_chain_kind(k: u8) -> bool {
    matches!(k, kind::MEM_PUT | kind::MEM_FORGET | kind::MEM_ACCESS)
}
/// A put's payload before the item: prev u32, origin u32 (the id it
/// replaces), root u32 (the first id of its lineage).
pub(crate) const PUT_FIXED: u32 = 12;
/// An index's payload before its entries: prev, next id, count, oldest,
/// catalog length (`NO_ADDR`: no catalog, it did not fit).
pub(crate) const INDEX_FIXED: u32 = 20;
/// Most bytes of label catalog an index carries.
pub(crate) const CATALOG_MAX: usize = 1024;
/// One index entry: id u32, put address u32, updated_at u32, access u16,
/// label bloom u16.
pub(crate) const INDEX_ENTRY: u32 = 16;
/// Most merges one compaction does (the rest wait for the next).
const MAX_MERGES: usize = 8;

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

    pub fn encode(&self, b: &mut [u8; MEM_STATE_ENCODED]) {
        b[0..4].copy_from_slice(&self.root.to_le_bytes());
        b[4..8].copy_from_slice(&self.head.to_le_bytes());
        b[8..10].copy_from_slice(&self.chain.to_le_bytes());
        b[10..12].copy_from_slice(&self.changes.to_le_bytes());
        b[12..16].copy_from_slice(&self.bytes.to_le_bytes());
        b[16..20].copy_from_slice(&self.oldest.to_le_bytes());
        b[20..24].copy_from_slice(&self.next_id.to_le_bytes());
    }

    pub fn decode(b: &[u8; MEM_STATE_ENCODED]) -> Option<MemState> {
        let s = MemState {
            root: u32_at(b, 0),
            head: u32_at(b, 4),
            chain: u16_at(b, 8),
            changes: u16_at(b, 10),
            bytes: u32_at(b, 12),
            oldest: u32_at(b, 16),
            next_id: u32_at(b, 20),
        };
        (s.chain as usize <= MEM_CHAIN_MAX && s.next_id >= 1).then_some(s)
    }
}

/// A label's change in references since the index was written, as kept in
/// the scratch area ([`DELTA_BYTES`] each).
#[derive(Clone, Copy)]
struct LabelDelta {
    hash: u32,
    change: i16,
    /// A put that carries the label.
    addr: u32,
    /// Whether the index's catalog has the label.
    used: bool,
}

impl LabelDelta {
    fn load(b: &[u8], k: usize) -> LabelDelta {
        let at = k * DELTA_BYTES;
        LabelDelta {
            hash: u32_at(b, at),
            addr: u32_at(b, at + 4),
            change: u16_at(b, at + 8) as i16,
            used: b[at + 10] != 0,
        }
    }

    fn store(&self, b: &mut [u8], k: usize) {
        let at = k * DELTA_BYTES;
        b[at..at + 4].copy_from_slice(&self.hash.to_le_bytes());
        b[at + 4..at + 8].copy_from_slice(&self.addr.to_le_bytes());
        b[at + 8..at + 10].copy_from_slice(&self.change.to_le_bytes());
        b[at + 10] = u8::from(self.used);
        b[at + 11] = 0;
    }
}

/// Adds one reference to `label` in the catalog encoded in `buf[..len]`;
/// the new length, or `None` if it does not fit.
fn catalog_add(buf: &mut [u8], len: usize, label: &str) -> Option<usize> {
    let mut p = 0;
    while p < len {
        let n = buf[p] as usize;
        if &buf[p + 1..p + 1 + n] == label.as_bytes() {
            let refs = u16::from_le_bytes([buf[p + 1 + n], buf[p + 2 + n]]).saturating_add(1);
            buf[p + 1 + n..p + 3 + n].copy_from_slice(&refs.to_le_bytes());
            return Some(len);
        }
        p += 3 + n;
    }
    let need = 3 + label.len();
    if len + need > CATALOG_MAX || label.len() > u8::MAX as usize {
        return None;
    }
    buf[len] = label.len() as u8;
    buf[len + 1..len + 1 + label.len()].copy_from_slice(label.as_bytes());
    buf[len + 1 + label.len()..len + need].copy_from_slice(&1u16.to_le_bytes());
    Some(len + need)
}

/// The payload length of a put of `item`.
fn put_len<E>(item: &Item) -> Result<u32, Fail<E>> {
    let n = item.encoded_len();
    if n > ITEM_ENCODED_MAX_BYTES {
        return Err(Error::LogicBug("item larger than its encoding"));
    }
    Ok(PUT_FIXED + n as u32)
}

/// Encodes a put of `item` (after `prev` and its lineage `origin`) into
/// `enc`; returns its length.
fn put_encode<E>(
    enc: &mut [u8],
    prev: u32,
    origin: (u32, u32),
    item: &Item,
) -> Result<u32, Fail<E>> {
    let len = put_len(item)?;
    enc[0..4].copy_from_slice(&prev.to_le_bytes());
    enc[4..8].copy_from_slice(&origin.0.to_le_bytes());
    enc[8..12].copy_from_slice(&origin.1.to_le_bytes());
    let out = enc
        .get_mut(PUT_FIXED as usize..)
        .ok_or(Error::LogicBug("put buffer too small"))?;
    item.encode(out)
        .map_err(|_| Error::LogicBug("item larger than its encoding"))?;
    Ok(len)
}

/// An item's lineage: the id it replaced and the first id of its lineage
/// (0: none).
type Lineage = (u32, u32);

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

/// Sorts an active set by `before` (a total order, so the result is the
/// one any sort gives): one insertion sort for every order, compiled once
/// (code size); the set holds at most [`ACTIVE_CAP`] entries.
#[inline(never)]
fn sort_active(set: &mut [Active], before: &dyn Fn(&Active, &Active) -> bool) {
    for i in 1..set.len() {
        let mut j = i;
        while j > 0 && before(&set[j], &set[j - 1]) {
            set.swap(j, j - 1);
            j -= 1;
        }
    }
}

/// Recall order: [`ItemRank::recall_cmp`].
fn by_recall(a: &Active, b: &Active) -> bool {
    a.rank().recall_cmp(&b.rank()) == core::cmp::Ordering::Less
}

/// Id order.
fn by_id(a: &Active, b: &Active) -> bool {
    a.id < b.id
}

impl Active {
    /// The entry of `item`, put at `addr`.
    fn of(item: &Item, addr: u32) -> Active {
        Active {
            id: item.id().get(),
            addr,
            updated_at: item.updated_at(),
            access: item.access_count(),
            bloom: item_bloom(item),
        }
    }

    fn rank(&self) -> ItemRank {
        ItemRank {
            id: ItemId::new(self.id),
            access_count: self.access,
            updated_at: self.updated_at,
        }
    }
}

fn label_bloom(label: &str) -> u16 {
    let h = fnv1a32(label.as_bytes());
    (1u16 << (h & 15)) | (1u16 << ((h >> 4) & 15))
}

fn item_bloom(item: &Item) -> u16 {
    item.labels().iter().fold(0, |b, l| b | label_bloom(l))
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

fn push_str<const N: usize>(s: &mut heapless::String<N>, t: &str) {
    for c in t.chars() {
        if s.push(c).is_err() {
            return;
        }
    }
}

struct IndexPayload<'a> {
    fixed: [u8; INDEX_FIXED as usize],
    entries: &'a [Active],
    /// The label catalog: `u8 length`, label, `u16 refs`, repeated.
    catalog: &'a [u8],
}

impl<F: NorFlash> Payload<F> for IndexPayload<'_> {
    fn len(&self) -> u32 {
        INDEX_FIXED + INDEX_ENTRY * self.entries.len() as u32 + self.catalog.len() as u32
    }
    fn fill(
        &mut self,
        _io: &mut Io<'_, F>,
        offset: u32,
        out: &mut [u8],
    ) -> Result<(), Fail<F::Error>> {
        for (i, b) in out.iter_mut().enumerate() {
            let p = offset as usize + i;
            let catalog_at = INDEX_FIXED as usize + INDEX_ENTRY as usize * self.entries.len();
            *b = if p < INDEX_FIXED as usize {
                self.fixed[p]
            } else if p >= catalog_at {
                *self
                    .catalog
                    .get(p - catalog_at)
                    .ok_or(Error::LogicBug("index payload overrun"))?
            } else {
                let k = (p - INDEX_FIXED as usize) / INDEX_ENTRY as usize;
                let j = (p - INDEX_FIXED as usize) % INDEX_ENTRY as usize;
                let e = self
                    .entries
                    .get(k)
                    .ok_or(Error::LogicBug("index payload overrun"))?;
                let mut enc = [0u8; INDEX_ENTRY as usize];
                enc[0..4].copy_from_slice(&e.id.to_le_bytes());
                enc[4..8].copy_from_slice(&e.addr.to_le_bytes());
                enc[8..12].copy_from_slice(&e.updated_at.to_le_bytes());
                enc[12..14].copy_from_slice(&e.access.to_le_bytes());
                enc[14..16].copy_from_slice(&e.bloom.to_le_bytes());
                enc[j]
            };
        }
        Ok(())
    }
}

trait CloneCorrupted {
    fn clone_corrupted(&self) -> Self;
}

impl<E, L> CloneCorrupted for Error<E, L> {
    fn clone_corrupted(&self) -> Self {
        match self {
            Error::Corrupted { address, what } => Error::Corrupted {
                address: *address,
                what,
            },
            _ => Error::LogicBug("clone of a non-corruption error"),
        }
    }
}
