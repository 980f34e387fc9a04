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
use crate::layout::{u32_at, CHUNK_HEADER_LEN, NO_ADDR};
use crate::log::{Io, Payload};
use crate::memory::{
    conflicts_for_replace, merge_same_key_into, Item, ItemId, ItemInput, ItemRank, LabelLimit,
    ITEM_ENCODED_MAX_BYTES, LONG_TERM_PREAMBLE, MAX_ACTIVE_ITEMS,
};
use crate::naming::fnv1a32;

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
const _: () = {
    use crate::layout::kind::{defined_in, CLASS_MEMORY};
    assert!(defined_in(MEM_PUT, CLASS_MEMORY) && defined_in(MEM_FORGET, CLASS_MEMORY));
    assert!(defined_in(MEM_ACCESS, CLASS_MEMORY) && defined_in(MEM_INDEX, CLASS_MEMORY));
};

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

    /// Keeps, in order, the entries of `set` whose mark is `keep`.
    #[inline(never)]
    fn retain(&self, set: &mut Vec<Active, ACTIVE_CAP>, keep: bool) {
        let mut kept = 0;
        for k in 0..set.len() {
            if self.get(k) == keep {
                set[kept] = set[k];
                kept += 1;
            }
        }
        set.truncate(kept);
    }
}

/// The `k`th `u32` of a scratch area used as a list of words.
fn word(b: &[u8], k: usize) -> u32 {
    let mut w = [0u8; 4];
    w.copy_from_slice(&b[4 * k..4 * k + 4]);
    u32::from_le_bytes(w)
}

fn set_word(b: &mut [u8], k: usize, v: u32) {
    b[4 * k..4 * k + 4].copy_from_slice(&v.to_le_bytes());
}

/// The record kinds of the memory chain after its index.
fn is_chain_kind(k: u8) -> bool {
    matches!(k, MEM_PUT | MEM_FORGET | MEM_ACCESS)
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

    // As six words: root, head, chain (low half) and changes, bytes,
    // oldest, next_id.
    pub fn encode(&self, b: &mut [u8; MEM_STATE_ENCODED]) {
        let counts = u32::from(self.chain) | u32::from(self.changes) << 16;
        let words = [
            self.root,
            self.head,
            counts,
            self.bytes,
            self.oldest,
            self.next_id,
        ];
        for (k, v) in words.into_iter().enumerate() {
            set_word(b, k, v);
        }
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
    // As words: hash, addr, then change (low half) and used (bit 16),
    // which is the byte layout [`DELTA_BYTES`] describes.
    fn load(b: &[u8], k: usize) -> LabelDelta {
        let flags = word(b, 3 * k + 2);
        LabelDelta {
            hash: word(b, 3 * k),
            addr: word(b, 3 * k + 1),
            change: flags as u16 as i16,
            used: flags >> 16 != 0,
        }
    }

    fn store(&self, b: &mut [u8], k: usize) {
        set_word(b, 3 * k, self.hash);
        set_word(b, 3 * k + 1, self.addr);
        set_word(
            b,
            3 * k + 2,
            u32::from(self.change as u16) | u32::from(self.used) << 16,
        );
    }

    /// The one of the first `n` deltas in `b` for label hash `h`.
    fn find(b: &[u8], n: usize, h: u32) -> Option<usize> {
        (0..n).find(|&d| word(b, 3 * d) == h)
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
    for (k, v) in [prev, origin.0, origin.1].into_iter().enumerate() {
        set_word(enc, k, v);
    }
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

/// Where item `id` is in an active set (one search, compiled once).
#[inline(never)]
fn position_of(set: &[Active], id: u32) -> Option<usize> {
    set.iter().position(|x| x.id == id)
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

/// An index's payload before its entries ([`INDEX_FIXED`] bytes): no prev,
/// then these words.
fn index_fixed(next_id: u32, count: u32, oldest: u32, catalog: u32) -> [u8; INDEX_FIXED as usize] {
    let mut fixed = [0u8; INDEX_FIXED as usize];
    for (k, v) in [NO_ADDR, next_id, count, oldest, catalog]
        .into_iter()
        .enumerate()
    {
        set_word(&mut fixed, k, v);
    }
    fixed
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
        let catalog_at = INDEX_FIXED as usize + INDEX_ENTRY as usize * self.entries.len();
        for (i, b) in out.iter_mut().enumerate() {
            let p = offset as usize + i;
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
                // The entry's words, little-endian: id, addr, updated_at,
                // then access and bloom.
                let w = match j / 4 {
                    0 => e.id,
                    1 => e.addr,
                    2 => e.updated_at,
                    _ => u32::from(e.access) | u32::from(e.bloom) << 16,
                };
                (w >> (8 * (j % 4))) as u8
            };
        }
        Ok(())
    }
}
