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

use core::borrow::BorrowMut;

use super::Work;

use core::fmt;

use embedded_storage::nor_flash::{MultiwriteNorFlash, NorFlash};
use heapless::Vec;

use super::work::{GC, OP};
use super::{Priority, Store};
use crate::error::{Error, UnknownLabelError};
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
/// and a recall's access record.
pub(crate) const SCRATCH_BYTES: usize = DELTA_BYTES * DELTAS_MAX;
const _: () = assert!(
    SCRATCH_BYTES >= CATALOG_MAX
        && SCRATCH_BYTES >= 4 * ACTIVE_CAP * crate::memory::MAX_SUMMARY_LABELS
        && SCRATCH_BYTES >= 8 + 4 * MAX_ACTIVE_ITEMS
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
fn put_len<E>(item: &Item) -> Result<u32, Error<E>> {
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
) -> Result<u32, Error<E>> {
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
    ) -> Result<(), Error<F::Error>> {
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

impl<F: NorFlash, const MAX_SESSIONS: usize, W: BorrowMut<Work>> Store<F, MAX_SESSIONS, W> {
    // ---- reading -----------------------------------------------------------

    /// Checks the memory record at `addr` (its kind, and the CRC of the
    /// whole batch); returns its payload length.
    fn mem_check(&mut self, addr: u32, want: u8) -> Result<usize, Error<F::Error>> {
        let h = self.log.io().chunk_header(addr)?;
        let bad = Error::Corrupted {
            address: addr,
            what: "a memory record is damaged",
        };
        if h.is_none_or(|h| h.kind != want || !h.is_first()) {
            return Err(bad);
        }
        Ok(self.log.verify(addr)?.ok_or(bad)? as usize)
    }

    /// Reads a memory record's payload (CRC checked) into `buf`; returns its
    /// length.
    fn mem_record(
        &mut self,
        addr: u32,
        want: u8,
        buf: &mut [u8],
    ) -> Result<usize, Error<F::Error>> {
        let len = self.mem_check(addr, want)?;
        let n = len.min(buf.len());
        self.log
            .io()
            .read_stream(addr + CHUNK_HEADER_LEN, &mut buf[..n])?;
        Ok(len)
    }

    /// Reads the item put at `addr` into the work area's item slot `slot`,
    /// and returns its lineage: the id it replaced and the first id of its
    /// lineage (0: none). The put is read into the work area, not onto the
    /// stack.
    #[inline(never)]
    fn mem_read(&mut self, addr: u32, slot: usize) -> Result<Lineage, Error<F::Error>> {
        let len = self.mem_check(addr, kind::MEM_PUT)?;
        let w: &mut Work = self.work.borrow_mut();
        let n = len.min(w.enc.len());
        self.log
            .io()
            .read_stream(addr + CHUNK_HEADER_LEN, &mut w.enc[..n])?;
        let bad = Error::Corrupted {
            address: addr,
            what: "a memory item does not decode",
        };
        let body = w
            .enc
            .get(PUT_FIXED as usize..len)
            .ok_or(bad.clone_corrupted())?;
        w.items[slot].decode_from(body).map_err(|_| bad)?;
        Ok((u32_at(&w.enc, 4), u32_at(&w.enc, 8)))
    }

    /// The item in the work area's slot `slot`.
    fn slot(&self, slot: usize) -> &Item {
        &self.work.borrow().items[slot]
    }

    /// The memory chain after the root, oldest first.
    // Out of line: its buffers stay off every caller's stack frame.
    #[inline(never)]
    fn mem_chain(&mut self) -> Result<Vec<(u32, u8), { MEM_CHAIN_MAX + 1 }>, Error<F::Error>> {
        let mut out: Vec<(u32, u8), { MEM_CHAIN_MAX + 1 }> = Vec::new();
        let mut at = self.mem.head;
        // Bounded: each step either records a link or crosses a damaged
        // one, and the chain holds at most `MEM_CHAIN_MAX` records.
        for _ in 0..2 * (MEM_CHAIN_MAX + 1) {
            if at == self.mem.root || at == NO_ADDR {
                break;
            }
            let h = self.log.io().chunk_header(at);
            let sound = match self.mem_tolerate(h)? {
                Some(Some(h)) if is_chain_kind(h.kind) && h.is_first() => Some(h),
                _ => None,
            };
            let prev = match self.mem_links.iter().find(|l| l.0 == at) {
                // A link the mount repaired: the one on flash rotted.
                Some(&(_, before)) => Some(before),
                None => self.mem_prev_of(at)?,
            };
            match sound {
                Some(h) => {
                    if out.push((at, h.kind)).is_err() {
                        self.mem_damaged = self.mem_damaged.saturating_add(1);
                        break;
                    }
                }
                None => {
                    // Damage at rest in a record's header: the record is
                    // lost, but its link may still be good. Follow it only
                    // to a sound record (or the index); otherwise the
                    // records older than this one are lost.
                    self.mem_damaged = self.mem_damaged.saturating_add(1);
                    let Some(prev) = prev else { break };
                    if prev != self.mem.root && !self.mem_sound(prev)? {
                        break;
                    }
                }
            }
            match prev {
                Some(p) => at = p,
                None => break,
            }
        }
        out.reverse();
        Ok(out)
    }

    /// The active items of a memory index that fails its checksum (damage
    /// at rest): each entry names an item and the put that holds it, so an
    /// entry is kept when that put checks out and holds that id. The item's
    /// time and access count are the put's: the recalls the index had
    /// counted since are lost, and nothing is taken from the damaged bytes
    /// but the id and the address, which the put confirms. Entries are read
    /// up to the count the index states or its length allows, whichever is
    /// more (a damaged count), and at most `ACTIVE_CAP`.
    #[inline(never)]
    fn mem_salvage_index(&mut self, root: u32, lvl: usize) -> Result<(), Error<F::Error>> {
        let mut fixed = [0u8; INDEX_FIXED as usize];
        let r = self
            .log
            .io()
            .read_stream(root + CHUNK_HEADER_LEN, &mut fixed);
        if self.mem_tolerate(r)?.is_none() {
            return Ok(());
        }
        let by_len = match self.log.io().chunk_header(root) {
            Ok(Some(h)) => {
                let r = crate::cursor::batch_len(&mut self.log.io(), root, &h);
                match self.mem_tolerate(r)? {
                    Some(len) if len != u32::MAX => {
                        (len.saturating_sub(INDEX_FIXED) / INDEX_ENTRY) as usize
                    }
                    _ => 0,
                }
            }
            _ => 0,
        };
        let count = (u32_at(&fixed, 8) as usize).max(by_len).min(ACTIVE_CAP);
        let capacity = self.log.geo.capacity();
        for k in 0..count {
            let mut e = [0u8; INDEX_ENTRY as usize];
            let at = self.log.io().stream_advance(
                root + CHUNK_HEADER_LEN,
                INDEX_FIXED + INDEX_ENTRY * k as u32,
            );
            let r = self.log.io().read_stream(at, &mut e);
            if self.mem_tolerate(r)?.is_none() {
                break;
            }
            let (id, addr) = (u32_at(&e, 0), u32_at(&e, 4));
            if addr >= capacity
                || self.work.borrow_mut().active[lvl]
                    .iter()
                    .any(|x| x.id == id)
            {
                continue;
            }
            // A garbage entry past the real ones names no sound put: that
            // is not damage met, so it is not counted.
            match self.mem_read(addr, 0) {
                Ok(_) => {}
                Err(Error::Corrupted { .. }) => continue,
                Err(e) => return Err(e),
            }
            let w: &mut Work = self.work.borrow_mut();
            if w.items[0].id().get() != id {
                continue;
            }
            let _ = w.active[lvl].push(Active::of(&w.items[0], addr));
        }
        Ok(())
    }

    /// The link (the previous record's address) at the start of the
    /// memory record at `at`, `None` if it cannot be read.
    fn mem_prev_of(&mut self, at: u32) -> Result<Option<u32>, Error<F::Error>> {
        let mut prev = [0u8; 4];
        let r = self.log.io().read_stream(at + CHUNK_HEADER_LEN, &mut prev);
        Ok(self.mem_tolerate(r)?.map(|()| u32::from_le_bytes(prev)))
    }

    /// Whether a sound memory chain record (header and CRC) starts at `at`.
    fn mem_sound(&mut self, at: u32) -> Result<bool, Error<F::Error>> {
        let h = self.log.io().chunk_header(at);
        match self.mem_tolerate(h)? {
            Some(Some(h)) if is_chain_kind(h.kind) && h.is_first() => {
                let v = self.log.verify(at);
                Ok(matches!(self.mem_tolerate(v)?, Some(Some(_))))
            }
            _ => Ok(false),
        }
    }

    /// The active items, into the work area's active set `lvl` ([`OP`] or
    /// [`GC`]): the index's entries with the chain applied.
    #[inline(never)]
    pub(crate) fn mem_active(&mut self, lvl: usize) -> Result<(), Error<F::Error>> {
        self.work.borrow_mut().active[lvl].clear();
        let mut fixed = [0u8; INDEX_FIXED as usize];
        let root = self.mem.root;
        let index = if root == NO_ADDR {
            None
        } else {
            let r = self.mem_record(root, kind::MEM_INDEX, &mut fixed);
            self.mem_tolerate(r)?
        };
        if let Some(len) = index {
            let count = u32_at(&fixed, 8) as usize;
            let catalog = match u32_at(&fixed, 16) {
                NO_ADDR => 0,
                n => n as usize,
            };
            if len != (INDEX_FIXED + INDEX_ENTRY * count as u32) as usize + catalog
                || count > ACTIVE_CAP
                || catalog > CATALOG_MAX
            {
                return Err(Error::Corrupted {
                    address: root,
                    what: "the memory index has a bad length",
                });
            }
            for k in 0..count {
                let mut e = [0u8; INDEX_ENTRY as usize];
                let at = self.log.io().stream_advance(
                    root + CHUNK_HEADER_LEN,
                    INDEX_FIXED + INDEX_ENTRY * k as u32,
                );
                self.log.io().read_stream(at, &mut e)?;
                let _ = self.work.borrow_mut().active[lvl].push(Active {
                    id: u32_at(&e, 0),
                    addr: u32_at(&e, 4),
                    updated_at: u32_at(&e, 8),
                    access: u16_at(&e, 12),
                    bloom: u16_at(&e, 14),
                });
            }
        } else if root != NO_ADDR {
            self.mem_salvage_index(root, lvl)?;
        }
        for (addr, k) in self.mem_chain()? {
            match k {
                kind::MEM_PUT => {
                    let r = self.mem_read(addr, 0);
                    if self.mem_tolerate(r)?.is_none() {
                        continue;
                    }
                    let w: &mut Work = self.work.borrow_mut();
                    let a = Active::of(&w.items[0], addr);
                    let out = &mut w.active[lvl];
                    match out.iter_mut().find(|x| x.id == a.id) {
                        Some(x) => *x = a,
                        None => out
                            .push(a)
                            .map_err(|_| Error::LogicBug("active set overflow"))?,
                    }
                }
                kind::MEM_FORGET => {
                    let mut b = [0u8; 8];
                    let r = self.mem_record(addr, kind::MEM_FORGET, &mut b);
                    if self.mem_tolerate(r)?.is_none() {
                        continue;
                    }
                    let id = u32_at(&b, 4);
                    let out = &mut self.work.borrow_mut().active[lvl];
                    if let Some(i) = out.iter().position(|x| x.id == id) {
                        out.remove(i);
                    }
                }
                _ => {
                    // Checked whole, then read a few ids at a time.
                    let r = self.mem_check(addr, kind::MEM_ACCESS);
                    let Some(len) = self.mem_tolerate(r)? else {
                        continue;
                    };
                    let len = len.min(8 + 4 * MAX_ACTIVE_ITEMS) as u32;
                    let start = addr + CHUNK_HEADER_LEN;
                    let mut b = [0u8; 64];
                    let mut pos = 4;
                    let mut now = 0;
                    while pos + 4 <= len {
                        let n = (len - pos).min(b.len() as u32) / 4 * 4;
                        let at = self.log.io().stream_advance(start, pos);
                        self.log.io().read_stream(at, &mut b[..n as usize])?;
                        let mut ids = b[..n as usize].chunks_exact(4);
                        if pos == 4 {
                            now = ids.next().map_or(0, |t| u32_at(t, 0));
                        }
                        let out = &mut self.work.borrow_mut().active[lvl];
                        for id in ids {
                            let id = u32_at(id, 0);
                            if let Some(x) = out.iter_mut().find(|x| x.id == id) {
                                x.access = x.access.saturating_add(1);
                                x.updated_at = x.updated_at.max(now);
                            }
                        }
                        pos += n;
                    }
                }
            }
        }
        Ok(())
    }

    /// The item with the applied access count and update time, into slot
    /// `slot`; returns its lineage.
    fn mem_load_in(&mut self, a: &Active, slot: usize) -> Result<Lineage, Error<F::Error>> {
        let lineage = self.mem_read(a.addr, slot)?;
        let item = &mut self.work.borrow_mut().items[slot];
        item.set_access_count(a.access);
        item.set_updated_at(a.updated_at);
        Ok(lineage)
    }

    /// [`mem_load_in`](Self::mem_load_in), `false` for a damaged item.
    fn mem_load_ok_in(&mut self, a: &Active, slot: usize) -> Result<bool, Error<F::Error>> {
        let r = self.mem_load_in(a, slot);
        Ok(self.mem_tolerate(r)?.is_some())
    }

    /// The item with the applied access count and update time, onto the
    /// caller's stack.
    fn mem_load(&mut self, a: &Active) -> Result<Item, Error<F::Error>> {
        self.mem_load_in(a, 0)?;
        Ok(self.slot(0).clone())
    }

    /// Damage at rest confined to the record it hit: `Ok(None)` (counted)
    /// where `r` failed a checksum; flash errors pass through.
    fn mem_tolerate<T>(
        &mut self,
        r: Result<T, Error<F::Error>>,
    ) -> Result<Option<T>, Error<F::Error>> {
        match r {
            Ok(v) => Ok(Some(v)),
            Err(Error::Corrupted { .. }) => {
                self.mem_damaged = self.mem_damaged.saturating_add(1);
                Ok(None)
            }
            Err(e) => Err(e),
        }
    }

    /// Memory records that failed their checksum (damage at rest) and were
    /// left out of a read since the mount. Each read that meets one counts
    /// it again; 0 means no memory read has met damage.
    pub fn memory_damaged_reads(&self) -> u32 {
        self.mem_damaged
    }

    // ---- writing -----------------------------------------------------------

    /// Makes room in the chain for one more record.
    fn mem_before_write(&mut self, p: Priority) -> Result<(), Error<F::Error>> {
        if self.mem.chain as usize >= MEM_CHAIN_MAX {
            self.mem_compact_with(None, p)?;
        }
        Ok(())
    }

    /// Appends a record to the memory chain. The caller built `payload`
    /// with `prev` = the chain's head after [`Store::prepare_write`].
    fn mem_write<P: Payload<F>>(
        &mut self,
        k: u8,
        payload: &mut P,
        changes: u16,
    ) -> Result<u32, Error<F::Error>> {
        let len = payload.len();
        let addr = self.write_prepared(k, payload)?;
        self.mem_written(addr, len, changes);
        Ok(addr)
    }

    /// The chain's state after a record of `len` payload bytes at `addr`.
    fn mem_written(&mut self, addr: u32, len: u32, changes: u16) {
        let seq = self.log.head_seq_of(addr);
        self.mem.head = addr;
        self.mem.chain += 1;
        self.mem.changes = self.mem.changes.saturating_add(changes);
        self.mem.bytes = self.mem.bytes.saturating_add(len);
        self.mem.oldest = self.mem.oldest.min(seq);
    }

    /// Writes a put. A chained put extends the memory chain; an unchained
    /// one (a merge or a relocation copy, `prev` none) is reachable only from
    /// the index written after it, and is garbage if that index never lands.
    /// The item is encoded into the work area once room is made (making
    /// room may read other items there).
    fn mem_put(
        &mut self,
        item: &Item,
        origin: (u32, u32),
        chained: bool,
        p: Priority,
    ) -> Result<u32, Error<F::Error>> {
        if chained {
            self.mem_before_write(p)?;
        }
        self.prepare_write(put_len(item)?, p)?;
        let prev = if chained { self.mem_prev() } else { UNCHAINED };
        let len = put_encode(&mut self.work.borrow_mut().enc, prev, origin, item)?;
        self.mem_put_encoded(len, chained)
    }

    /// An unchained put of the item in the work area's slot `slot`: a
    /// compaction's merge or relocation copy. No collection runs inside a
    /// compaction, so the encoding made before room is made stays.
    fn mem_put_slot(
        &mut self,
        slot: usize,
        origin: (u32, u32),
        p: Priority,
    ) -> Result<u32, Error<F::Error>> {
        if !self.in_gc {
            return Err(Error::LogicBug("an unchained put outside a compaction"));
        }
        let w: &mut Work = self.work.borrow_mut();
        let len = put_encode(&mut w.enc, UNCHAINED, origin, &w.items[slot])?;
        self.prepare_write(len, p)?;
        self.mem_put_encoded(len, false)
    }

    /// Writes the put encoded in the work area, `len` bytes.
    fn mem_put_encoded(&mut self, len: u32, chained: bool) -> Result<u32, Error<F::Error>> {
        let mut payload = crate::log::Slices([&self.work.borrow().enc[..len as usize]]);
        let (addr, _) = self.log.write_batch(kind::MEM_PUT, &mut payload)?;
        self.bytes_since_checkpoint = self.bytes_since_checkpoint.saturating_add(len);
        if chained {
            self.mem_written(addr, len, 1);
        } else {
            self.mem.oldest = self.mem.oldest.min(self.log.head_seq_of(addr));
        }
        Ok(addr)
    }

    fn mem_prev(&self) -> u32 {
        self.mem.head
    }

    fn mem_forget_record(&mut self, id: u32, p: Priority) -> Result<(), Error<F::Error>> {
        self.mem_before_write(p)?;
        self.prepare_write(8, p)?;
        let mut b = [0u8; 8];
        b[4..8].copy_from_slice(&id.to_le_bytes());
        b[0..4].copy_from_slice(&self.mem_prev().to_le_bytes());
        let mut payload = crate::log::Slices([&b[..]]);
        self.mem_write(kind::MEM_FORGET, &mut payload, 1)?;
        Ok(())
    }

    /// ESP-Claw's compaction trigger (after so many changes or bytes).
    ///
    /// The compaction's effects are applied at once: items with the same key
    /// are merged (the merged item is put, the other forgotten) and items
    /// beyond the limit evicted (forgotten, lowest score first); access
    /// deltas and tombstones already read as applied. The physical
    /// consolidation, a new index, is written only when the chain reaches
    /// [`MEM_CHAIN_MAX`] records, so the index (16 bytes an item) is not
    /// rewritten every five changes.
    #[inline(never)]
    fn mem_maybe_compact(&mut self) -> Result<(), Error<F::Error>> {
        let c = self.config.memory;
        if self.mem.changes < c.compact_after_changes && self.mem.bytes < c.compact_after_bytes {
            return Ok(());
        }
        let p = Priority::Maintenance;
        self.mem_active(OP)?;
        // Merges. The keys live in the scratch area, which a write may
        // reuse: after each merge the active set and keys are read again
        // (they then hold what the merge wrote).
        self.mem_keys(OP)?;
        let mut merges = 0;
        let mut i = 0;
        while i < self.work.borrow_mut().active[OP].len() {
            let mut j = i + 1;
            while j < self.work.borrow_mut().active[OP].len() {
                let (ki, kj) = (
                    word(&self.work.borrow_mut().scratch, i),
                    word(&self.work.borrow_mut().scratch, j),
                );
                if ki != 0 && ki == kj && merges < MAX_MERGES {
                    let (ai, aj) = (
                        self.work.borrow_mut().active[OP][i],
                        self.work.borrow_mut().active[OP][j],
                    );
                    // Both in the work area's slots; the merged item goes to
                    // the stack, since writing it may compact (which uses
                    // the slots).
                    if !self.mem_load_ok_in(&ai, 0)? || !self.mem_load_ok_in(&aj, 1)? {
                        j += 1;
                        continue;
                    }
                    let w: &mut Work = self.work.borrow_mut();
                    let [a, b] = &mut w.items;
                    let (a_id, b_id) = (a.id(), b.id());
                    if merge_same_key_into(a, b) {
                        merges += 1;
                        let kept_i = a.id() == a_id;
                        let other = if kept_i { b_id } else { a_id };
                        let m = a.clone();
                        self.mem_put(&m, (0, 0), true, p)?;
                        self.mem_forget_record(other.get(), p)?;
                        self.mem_active(OP)?;
                        self.mem_keys(OP)?;
                        if !kept_i {
                            break;
                        }
                        continue;
                    }
                }
                j += 1;
            }
            i += 1;
        }
        // Evictions, lowest score first: each is taken out of the active
        // set, which no write below reuses.
        let max = self.config.memory.max_items.min(MAX_ACTIVE_ITEMS);
        while self.work.borrow_mut().active[OP].len() > max {
            let Some(k) = self.mem_lowest(OP) else { break };
            let id = self.work.borrow_mut().active[OP].remove(k).id;
            self.mem_forget_record(id, p)?;
        }
        self.mem.changes = 0;
        self.mem.bytes = 0;
        Ok(())
    }

    /// The entry of active set `lvl` to evict first (lowest score, then id).
    fn mem_lowest(&self, lvl: usize) -> Option<usize> {
        let set = &self.work.borrow().active[lvl];
        (0..set.len()).min_by(|&x, &y| set[x].rank().eviction_cmp(&set[y].rank()))
    }

    /// Compacts: applies access deltas, drops tombstones, merges items with
    /// the same key, evicts beyond the item limit, and writes a new index.
    /// With `relocate`, items whose puts start in sectors up to that sector
    /// sequence are first copied to the head (garbage collection).
    ///
    /// Power loss: the new index commits atomically; before that the old
    /// index and chain stand (merge and relocation puts written before it
    /// replace items by the same id, so they are harmless either way).
    pub(crate) fn mem_compact_with(
        &mut self,
        relocate: Option<u32>,
        p: Priority,
    ) -> Result<bool, Error<F::Error>> {
        if self.in_gc {
            return self.mem_compact_now(relocate, p);
        }
        // Room first: collecting garbage may itself move memory, so the
        // need is measured, room made, and measured again until no
        // collection is needed.
        let mut need = 0;
        for _ in 0..3 {
            self.mem_active(GC)?;
            let merges = self.mem_merge_count(GC)?;
            need = INDEX_FIXED
                + INDEX_ENTRY * self.work.borrow_mut().active[GC].len() as u32
                + merges * (PUT_FIXED + ITEM_ENCODED_MAX_BYTES as u32 + 16);
            let (_, opens) = self.log.plan(need);
            if self.log.free_sectors() >= opens + self.reserve_for(p) {
                break;
            }
            self.ensure_room(need, p)?;
        }
        self.in_gc = true;
        let result = self.mem_compact_now(relocate, p);
        self.in_gc = false;
        match result {
            Ok(false) => Err(Error::Full {
                needed_bytes: need,
                available_bytes: 0,
            }),
            r => r,
        }
    }

    /// The hash of each entry's dedup key in active set `lvl` (0 for an
    /// empty key, which matches nothing), into the scratch area as words in
    /// the order of the set.
    #[inline(never)]
    fn mem_keys(&mut self, lvl: usize) -> Result<(), Error<F::Error>> {
        for k in 0..self.work.borrow_mut().active[lvl].len() {
            let a = self.work.borrow_mut().active[lvl][k];
            // A damaged item has no key: it merges with nothing.
            let key = match self.mem_load_ok_in(&a, 0)? {
                true if !self.slot(0).key().is_empty() => fnv1a32(self.slot(0).key().as_bytes()),
                _ => 0,
            };
            set_word(&mut self.work.borrow_mut().scratch, k, key);
        }
        Ok(())
    }

    /// How many merges a compaction of active set `lvl` would write (at
    /// most [`MAX_MERGES`]).
    fn mem_merge_count(&mut self, lvl: usize) -> Result<u32, Error<F::Error>> {
        self.mem_keys(lvl)?;
        let work: &Work = self.work.borrow();
        let keys = &work.scratch;
        let mut merges = 0;
        for i in 0..work.active[lvl].len() {
            let ki = word(keys, i);
            if ki != 0 && (0..i).any(|j| word(keys, j) == ki) {
                merges += 1;
            }
        }
        Ok(merges.min(MAX_MERGES as u32))
    }

    #[inline(never)]
    fn mem_compact_now(
        &mut self,
        relocate: Option<u32>,
        p: Priority,
    ) -> Result<bool, Error<F::Error>> {
        self.mem_active(GC)?;
        // A cut inside an update, between the new item and the old one's
        // tombstone, leaves both active: the new item's lineage names the
        // item it replaced, which is forgotten here (as `memory_update`
        // documents).
        // Items that fail their checksum are dropped: they cannot be read
        // back, and the new index must not keep them.
        let mut replaced = Marks::NONE;
        for k in 0..self.work.borrow_mut().active[GC].len() {
            let a = self.work.borrow_mut().active[GC][k];
            let r = self.mem_read(a.addr, 0);
            match self.mem_tolerate(r)? {
                Some((origin, _)) => {
                    if origin != 0 && origin != a.id {
                        if let Some(o) = self.work.borrow_mut().active[GC]
                            .iter()
                            .position(|x| x.id == origin)
                        {
                            replaced.set(o);
                        }
                    }
                }
                None => replaced.set(k),
            }
        }
        let set = &mut self.work.borrow_mut().active[GC];
        let mut kept = 0;
        for k in 0..set.len() {
            if !replaced.get(k) {
                set[kept] = set[k];
                kept += 1;
            }
        }
        set.truncate(kept);
        // Merge items with the same key (rare: stores refuse same-key
        // duplicates, so only updates can create them). No collection runs
        // inside a compaction, so the keys stay in the scratch area.
        self.mem_keys(GC)?;
        let mut i = 0;
        let mut merges = 0;
        while i < self.work.borrow_mut().active[GC].len() {
            let mut j = i + 1;
            while j < self.work.borrow_mut().active[GC].len() {
                let (ki, kj) = (
                    word(&self.work.borrow_mut().scratch, i),
                    word(&self.work.borrow_mut().scratch, j),
                );
                if ki != 0 && ki == kj && merges < MAX_MERGES {
                    merges += 1;
                    let (ai, aj) = (
                        self.work.borrow_mut().active[GC][i],
                        self.work.borrow_mut().active[GC][j],
                    );
                    if !self.mem_load_ok_in(&ai, 0)? || !self.mem_load_ok_in(&aj, 1)? {
                        j += 1;
                        continue;
                    }
                    let w: &mut Work = self.work.borrow_mut();
                    let [a, b] = &mut w.items;
                    if merge_same_key_into(a, b) {
                        let addr = self.mem_put_slot(0, (0, 0), p)?;
                        let work: &mut Work = self.work.borrow_mut();
                        let merged = Active::of(&work.items[0], addr);
                        let set = &mut work.active[GC];
                        set[i] = merged;
                        set.remove(j);
                        let keys = &mut work.scratch;
                        for k in j..set.len() {
                            let next = word(keys, k + 1);
                            set_word(keys, k, next);
                        }
                        continue;
                    }
                }
                j += 1;
            }
            i += 1;
        }
        // Evict beyond the limit: lowest access*3 + updated_at/3600 first.
        let max = self.config.memory.max_items.min(MAX_ACTIVE_ITEMS);
        while self.work.borrow_mut().active[GC].len() > max {
            let Some(k) = self.mem_lowest(GC) else { break };
            self.work.borrow_mut().active[GC].remove(k);
        }
        // Relocation: copy the items in the sectors about to be released.
        if let Some(upto) = relocate {
            for k in 0..self.work.borrow_mut().active[GC].len() {
                let a = self.work.borrow_mut().active[GC][k];
                if self.log.head_seq_of(a.addr) <= upto {
                    let origin = self.mem_load_in(&a, 0)?;
                    let addr = self.mem_put_slot(0, origin, p)?;
                    self.work.borrow_mut().active[GC][k].addr = addr;
                }
            }
        }
        // The label catalog, in id order, if it fits (the keys are done
        // with: the scratch area holds the catalog now).
        let mut catalog_len = Some(0usize);
        let mut last = None;
        while let Some(k) = self.mem_next_by_id(GC, last) {
            let a = self.work.borrow_mut().active[GC][k];
            last = Some(a.id);
            self.mem_load_in(&a, 0)?;
            let w: &mut Work = self.work.borrow_mut();
            for l in w.items[0].labels() {
                if let Some(n) = catalog_len {
                    catalog_len = catalog_add(&mut w.scratch, n, l);
                }
            }
        }
        let catalog_bytes = catalog_len.unwrap_or(0);
        // The new index.
        let count = self.work.borrow_mut().active[GC].len() as u32;
        let len = INDEX_FIXED + INDEX_ENTRY * count + catalog_bytes as u32;
        let (_, opens) = self.log.plan(len);
        if opens > self.log.free_sectors() {
            return Ok(false);
        }
        let (start, _) = self.log.plan(len);
        let index_seq = if self.log.geo.sector_of(start) == self.log.head {
            self.log.head_seq
        } else {
            self.log.head_seq + 1
        };
        let oldest = self.work.borrow_mut().active[GC]
            .iter()
            .map(|a| self.log.head_seq_of(a.addr))
            .min()
            .unwrap_or(index_seq)
            .min(index_seq);
        let mut fixed = [0u8; INDEX_FIXED as usize];
        fixed[0..4].copy_from_slice(&NO_ADDR.to_le_bytes());
        fixed[4..8].copy_from_slice(&self.mem.next_id.to_le_bytes());
        fixed[8..12].copy_from_slice(&count.to_le_bytes());
        fixed[12..16].copy_from_slice(&oldest.to_le_bytes());
        let catalog_field = if catalog_len.is_some() {
            catalog_bytes as u32
        } else {
            NO_ADDR
        };
        fixed[16..20].copy_from_slice(&catalog_field.to_le_bytes());
        let work: &Work = self.work.borrow();
        let mut payload = IndexPayload {
            fixed,
            entries: &work.active[GC],
            catalog: &work.scratch[..catalog_bytes],
        };
        let (addr, _) = self.log.write_batch(kind::MEM_INDEX, &mut payload)?;
        self.bytes_since_checkpoint = self.bytes_since_checkpoint.saturating_add(len);
        self.mem_links.clear();
        self.mem = MemState {
            root: addr,
            head: addr,
            chain: 0,
            changes: 0,
            bytes: 0,
            oldest,
            next_id: self.mem.next_id,
        };
        Ok(true)
    }

    /// The entry of active set `lvl` with the smallest id above `after`
    /// (any id for `None`): walks the set in id order without sorting it.
    fn mem_next_by_id(&self, lvl: usize, after: Option<u32>) -> Option<usize> {
        let set = &self.work.borrow().active[lvl];
        (0..set.len())
            .filter(|&k| after.is_none_or(|x| set[k].id > x))
            .min_by_key(|&k| set[k].id)
    }

    // ---- the public API ----------------------------------------------------

    /// Starts a stage: from now on, the labels of items that stores,
    /// updates and forgets touch are collected (in RAM) for
    /// [`write_memory_stage_note`](Self::write_memory_stage_note).
    pub fn memory_stage_begin(&mut self) {
        self.stage.clear();
    }

    /// Writes `Memory update: [label1;label2]` for the labels memory writes
    /// touched since [`memory_stage_begin`](Self::memory_stage_begin),
    /// deduplicated; writes nothing and returns `false` if there are none.
    pub fn write_memory_stage_note<O: fmt::Write>(&self, w: &mut O) -> Result<bool, fmt::Error> {
        self.stage.write_to(w)
    }

    fn stage_touch(&mut self, item: &Item) {
        // A note beyond its capacity keeps its first labels.
        let _ = self.stage.note_item(item);
    }

    /// Stores a long-term memory item (ESP-Claw's `store`): the input is
    /// trimmed and normalized (tags, grounded keywords, summary labels); an
    /// empty content is an error. An input that duplicates an active item
    /// (same key, same normalized content, or containment) writes nothing and
    /// returns that item with `changed = false`. With `replace`, active items
    /// sharing a tag or keyword with the new one are forgotten afterwards.
    ///
    /// Power loss: the item is one atomic batch; with `replace`, each
    /// forgetting after it is atomic on its own.
    pub fn memory_store(
        &mut self,
        input: &ItemInput<'_>,
        now: u32,
        replace: bool,
    ) -> Result<Stored, Error<F::Error>> {
        let id = ItemId::new(self.mem.next_id);
        let item = Item::new(id, input, now, self.config.memory.label_limit)
            .map_err(|_| Error::InvalidInput("memory content is empty"))?;
        self.mem_store_new(item, replace)
    }

    /// Stores an item carried over from another store (an ESP-Claw
    /// `memory_records.jsonl` being imported, say): as
    /// [`memory_store`](Self::memory_store) without `replace`, but the item
    /// keeps its creation and update times and its access count. It gets a
    /// new id, as every stored item does.
    pub fn memory_import(
        &mut self,
        input: &ItemInput<'_>,
        created_at: u32,
        updated_at: u32,
        access_count: u16,
    ) -> Result<Stored, Error<F::Error>> {
        let id = ItemId::new(self.mem.next_id);
        let mut item = Item::new(id, input, created_at, self.config.memory.label_limit)
            .map_err(|_| Error::InvalidInput("memory content is empty"))?;
        item.set_updated_at(updated_at);
        item.set_access_count(access_count);
        self.mem_store_new(item, false)
    }

    /// The common part of storing `item`, a new item with the next id.
    fn mem_store_new(&mut self, item: Item, replace: bool) -> Result<Stored, Error<F::Error>> {
        self.mem_active(OP)?;
        for k in 0..self.work.borrow_mut().active[OP].len() {
            let a = self.work.borrow_mut().active[OP][k];
            if !self.mem_load_ok_in(&a, 0)? {
                continue;
            }
            if item.duplicate_of(self.slot(0)).is_some() {
                return Ok(Stored {
                    item: self.slot(0).clone(),
                    changed: false,
                    replaced: 0,
                });
            }
        }
        if self.work.borrow_mut().active[OP].len() >= ACTIVE_CAP - 1 {
            self.mem_compact_with(None, Priority::User)?;
        }
        self.mem.next_id = self.mem.next_id.wrapping_add(1);
        self.mem_put(&item, (0, 0), true, Priority::User)?;
        self.stage_touch(&item);
        let mut replaced = 0;
        if replace {
            // Forgetting may compact memory: that works on its own active
            // set, so this one stays as read here.
            self.mem_active(OP)?;
            for k in 0..self.work.borrow_mut().active[OP].len() {
                let a = self.work.borrow_mut().active[OP][k];
                if a.id == item.id().get() {
                    continue;
                }
                if !self.mem_load_ok_in(&a, 0)? {
                    continue;
                }
                if conflicts_for_replace(self.slot(0), &item) {
                    // The stage note first: forgetting may compact, which
                    // reuses the slot.
                    let w: &mut Work = self.work.borrow_mut();
                    let _ = self.stage.note_item(&w.items[0]);
                    self.mem_forget_record(a.id, Priority::User)?;
                    replaced += 1;
                }
            }
        }
        self.mem_maybe_compact()?;
        Ok(Stored {
            item,
            changed: true,
            replaced,
        })
    }

    /// The active item with this id.
    pub fn memory_get(&mut self, id: ItemId) -> Result<Item, Error<F::Error>> {
        let a = self.mem_find(id.get())?.ok_or(Error::NotFound)?;
        self.mem_load(&a)
    }

    /// The active-set entry of item `id`, if it is active.
    fn mem_find(&mut self, id: u32) -> Result<Option<Active>, Error<F::Error>> {
        self.mem_active(OP)?;
        Ok(self.work.borrow_mut().active[OP]
            .iter()
            .find(|a| a.id == id)
            .copied())
    }

    /// Calls `f` with every active item in priority order (access count,
    /// then update time, descending; then id). Returns how many. An item
    /// that fails its checksum (damage at rest) is left out and counted in
    /// [`memory_damaged_reads`](Self::memory_damaged_reads); so is every
    /// other memory read.
    pub fn memory_list(&mut self, mut f: impl FnMut(&Item)) -> Result<usize, Error<F::Error>> {
        self.memory_list_dyn(&mut f)
    }

    /// [`memory_list`](Self::memory_list), compiled once whatever the
    /// caller's closure.
    fn memory_list_dyn(&mut self, f: &mut dyn FnMut(&Item)) -> Result<usize, Error<F::Error>> {
        self.mem_active(OP)?;
        self.work.borrow_mut().active[OP].sort_unstable_by(|a, b| a.rank().recall_cmp(&b.rank()));
        let mut listed = 0;
        for k in 0..self.work.borrow_mut().active[OP].len() {
            let a = self.work.borrow_mut().active[OP][k];
            if !self.mem_load_ok_in(&a, 0)? {
                continue;
            }
            f(self.slot(0));
            listed += 1;
        }
        Ok(listed)
    }

    /// Calls `f` with every summary label and its reference count, in the
    /// order items first carry them (oldest item first).
    pub fn memory_catalog(
        &mut self,
        mut f: impl FnMut(&str, u16),
    ) -> Result<usize, Error<F::Error>> {
        self.memory_catalog_dyn(&mut f)
    }

    /// [`memory_catalog`](Self::memory_catalog), compiled once whatever the
    /// caller's closure.
    fn memory_catalog_dyn(
        &mut self,
        f: &mut dyn FnMut(&str, u16),
    ) -> Result<usize, Error<F::Error>> {
        self.mem_active(OP)?;
        if let Some(n) = self.mem_catalog_from_index(f)? {
            return Ok(n);
        }
        // No catalog in the index (none yet, or it did not fit): count the
        // labels of every active item, oldest item first. The labels' hashes
        // go to the scratch area in that order; a label is emitted where its
        // hash first appears, with the number of times it appears.
        self.work.borrow_mut().active[OP].sort_unstable_by_key(|a| a.id);
        let cap = SCRATCH_BYTES / 4;
        let mut hashes = 0;
        for k in 0..self.work.borrow_mut().active[OP].len() {
            let a = self.work.borrow_mut().active[OP][k];
            if !self.mem_load_ok_in(&a, 0)? {
                continue;
            }
            let w: &mut Work = self.work.borrow_mut();
            for l in w.items[0].labels() {
                if hashes < cap {
                    set_word(&mut w.scratch, hashes, fnv1a32(l.as_bytes()));
                    hashes += 1;
                }
            }
        }
        let mut emitted = 0;
        let mut pos = 0;
        for k in 0..self.work.borrow_mut().active[OP].len() {
            let a = self.work.borrow_mut().active[OP][k];
            if !self.mem_load_ok_in(&a, 0)? {
                continue;
            }
            let w: &Work = self.work.borrow();
            for l in w.items[0].labels() {
                let h = fnv1a32(l.as_bytes());
                let b = &w.scratch;
                let here = pos.min(hashes);
                pos += 1;
                if (0..here).any(|x| word(b, x) == h) {
                    continue;
                }
                let refs = (0..hashes).filter(|&x| word(b, x) == h).count() as u16;
                emitted += 1;
                f(l, refs);
            }
        }
        Ok(emitted)
    }

    /// The catalog from the newest index, corrected for what the chain
    /// changed since: reads the index's catalog and entries and only the
    /// items added or removed since. `None` if the index has no catalog.
    /// Works on active set [`OP`] as read; the label deltas go to the
    /// scratch area.
    #[inline(never)]
    fn mem_catalog_from_index(
        &mut self,
        f: &mut dyn FnMut(&str, u16),
    ) -> Result<Option<usize>, Error<F::Error>> {
        let root = self.mem.root;
        if root == NO_ADDR {
            return Ok(None);
        }
        let mut fixed = [0u8; INDEX_FIXED as usize];
        let at = root + CHUNK_HEADER_LEN;
        self.log.io().read_stream(at, &mut fixed)?;
        let count = u32_at(&fixed, 8).min(ACTIVE_CAP as u32);
        let catalog_len = u32_at(&fixed, 16);
        if catalog_len == NO_ADDR || catalog_len as usize > CATALOG_MAX {
            return Ok(None);
        }
        // Label deltas since the index: (label hash, change, a put holding
        // the label for labels the index does not have).
        let mut deltas = 0;
        // Active entries the index lists as they are.
        let mut listed = Marks::NONE;
        for k in 0..count {
            let mut e = [0u8; INDEX_ENTRY as usize];
            let a = self
                .log
                .io()
                .stream_advance(at, INDEX_FIXED + INDEX_ENTRY * k);
            self.log.io().read_stream(a, &mut e)?;
            let (id, addr) = (u32_at(&e, 0), u32_at(&e, 4));
            match self.work.borrow_mut().active[OP]
                .iter()
                .position(|x| x.id == id && x.addr == addr)
            {
                Some(x) => listed.set(x),
                None => {
                    if !self.mem_label_deltas(&mut deltas, addr, -1)? {
                        return Ok(None);
                    }
                }
            }
        }
        for k in 0..self.work.borrow_mut().active[OP].len() {
            if !listed.get(k) {
                let addr = self.work.borrow_mut().active[OP][k].addr;
                if !self.mem_label_deltas(&mut deltas, addr, 1)? {
                    return Ok(None);
                }
            }
        }
        // The index's labels in their order, then the new ones.
        let mut emitted = 0;
        // Offsets in the index's payload (a stream that may cross sectors).
        let mut pos = INDEX_FIXED + INDEX_ENTRY * count;
        let end = pos + catalog_len;
        while pos < end {
            let mut hdr = [0u8; 1];
            let addr = self.log.io().stream_advance(at, pos);
            self.log.io().read_stream(addr, &mut hdr)?;
            let n = hdr[0] as usize;
            let mut label = [0u8; crate::memory::LABEL_MAX_BYTES + 2];
            if n > crate::memory::LABEL_MAX_BYTES || pos + 1 + n as u32 + 2 > end {
                return Ok(None);
            }
            let rest = self.log.io().stream_advance(at, pos + 1);
            self.log.io().read_stream(rest, &mut label[..n + 2])?;
            let text = core::str::from_utf8(&label[..n]).map_err(|_| Error::Corrupted {
                address: addr,
                what: "a memory catalog label is not UTF-8",
            })?;
            let h = fnv1a32(text.as_bytes());
            let refs = i32::from(u16::from_le_bytes([label[n], label[n + 1]]));
            let b = &mut self.work.borrow_mut().scratch;
            let change = match (0..deltas).find(|&d| LabelDelta::load(b, d).hash == h) {
                Some(d) => {
                    let mut x = LabelDelta::load(b, d);
                    x.used = true;
                    x.store(b, d);
                    i32::from(x.change)
                }
                None => 0,
            };
            if refs + change > 0 {
                f(text, (refs + change) as u16);
                emitted += 1;
            }
            pos += 1 + n as u32 + 2;
        }
        for d in 0..deltas {
            let x = LabelDelta::load(&self.work.borrow_mut().scratch, d);
            if x.change <= 0 || x.used {
                continue;
            }
            let r = self.mem_read(x.addr, 0);
            if self.mem_tolerate(r)?.is_none() {
                return Ok(None);
            }
            if let Some(l) = self
                .slot(0)
                .labels()
                .iter()
                .find(|l| fnv1a32(l.as_bytes()) == x.hash)
            {
                f(l, x.change as u16);
                emitted += 1;
            }
        }
        Ok(Some(emitted))
    }

    /// Adds the labels of the item put at `addr` to the `deltas` label
    /// deltas in the scratch area, `by` references each. `false` if the
    /// item is damaged or the deltas do not fit.
    fn mem_label_deltas(
        &mut self,
        deltas: &mut usize,
        addr: u32,
        by: i16,
    ) -> Result<bool, Error<F::Error>> {
        let r = self.mem_read(addr, 0);
        if self.mem_tolerate(r)?.is_none() {
            return Ok(false);
        }
        let w: &mut Work = self.work.borrow_mut();
        let b = &mut w.scratch;
        for l in w.items[0].labels() {
            let h = fnv1a32(l.as_bytes());
            match (0..*deltas).find(|&d| LabelDelta::load(b, d).hash == h) {
                Some(d) => {
                    let mut x = LabelDelta::load(b, d);
                    x.change += by;
                    x.store(b, d);
                }
                None if *deltas < DELTAS_MAX => {
                    let x = LabelDelta {
                        hash: h,
                        change: by,
                        addr,
                        used: false,
                    };
                    x.store(b, *deltas);
                    *deltas += 1;
                }
                None => return Ok(false),
            }
        }
        Ok(true)
    }

    // Out of line: its buffers stay off every caller's stack frame.
    #[inline(never)]
    fn unknown_label(&mut self, label: &str) -> Result<UnknownLabelError, Error<F::Error>> {
        let mut e = UnknownLabelError {
            label: heapless::String::new(),
            available: heapless::String::new(),
        };
        push_str(&mut e.label, crate::text::utf8_prefix(label, 32));
        let mut first = true;
        let mut cut = false;
        let mut available = heapless::String::<64>::new();
        self.memory_catalog(|l, _| {
            let sep = if first { 0 } else { 2 };
            if cut || available.len() + sep + l.len() > 60 {
                cut = true;
                return;
            }
            if !first {
                push_str(&mut available, ", ");
            }
            first = false;
            push_str(&mut available, l);
        })?;
        if cut {
            push_str(&mut available, "...");
        }
        e.available = available;
        Ok(e)
    }

    /// Recalls the active items carrying any of `labels` (at most 3, copied
    /// exactly from the catalog), in priority order, at most `limit`
    /// (1..=128; ESP-Claw's default is 8), calling `f` with each. Each
    /// returned item's access count grows by one: a small access record is
    /// appended, the items are not rewritten. An unknown label is
    /// [`Error::UnknownLabel`], naming it and listing the labels there are.
    ///
    /// Power loss: the access record is atomic; a cut loses at most this
    /// recall's count increments.
    pub fn memory_recall(
        &mut self,
        labels: &[&str],
        limit: usize,
        now: u32,
        mut f: impl FnMut(&Item),
    ) -> Result<usize, Error<F::Error>> {
        self.memory_recall_dyn(labels, limit, now, &mut f)
    }

    /// [`memory_recall`](Self::memory_recall), compiled once whatever the
    /// caller's closure.
    fn memory_recall_dyn(
        &mut self,
        labels: &[&str],
        limit: usize,
        now: u32,
        f: &mut dyn FnMut(&Item),
    ) -> Result<usize, Error<F::Error>> {
        if labels.is_empty() || labels.len() > 3 {
            return Err(Error::InvalidInput("recall takes 1 to 3 labels"));
        }
        if limit == 0 || limit > MAX_ACTIVE_ITEMS {
            return Err(Error::InvalidInput("recall limit must be 1 to 128"));
        }
        self.mem_active(OP)?;
        // Every label must exist in the catalog.
        let mut seen = [false; 3];
        let mut hits = Marks::NONE;
        let want = labels.iter().fold(0u16, |b, l| b | label_bloom(l));
        for k in 0..self.work.borrow_mut().active[OP].len() {
            let a = self.work.borrow_mut().active[OP][k];
            if a.bloom & want == 0 {
                continue;
            }
            if !self.mem_load_ok_in(&a, 0)? {
                continue;
            }
            for (k2, l) in labels.iter().enumerate() {
                if self.slot(0).has_label(l) {
                    seen[k2] = true;
                    hits.set(k);
                }
            }
        }
        if let Some(k) = seen.iter().take(labels.len()).position(|s| !s) {
            let e = self.unknown_label(labels[k])?;
            return Err(Error::UnknownLabel(e));
        }
        // The matches, in priority order: the active set keeps only them.
        let set = &mut self.work.borrow_mut().active[OP];
        let mut kept = 0;
        for k in 0..set.len() {
            if hits.get(k) {
                set[kept] = set[k];
                kept += 1;
            }
        }
        set.truncate(kept);
        set.sort_unstable_by(|a, b| a.rank().recall_cmp(&b.rank()));
        set.truncate(limit);
        let matched = set.len();
        self.mem_before_write(Priority::User)?;
        self.prepare_write(8 + 4 * matched as u32, Priority::User)?;
        // The access record, built in the scratch area once room is made.
        let prev = self.mem_prev();
        let work: &mut Work = self.work.borrow_mut();
        let ids = &mut work.scratch;
        ids[0..4].copy_from_slice(&prev.to_le_bytes());
        ids[4..8].copy_from_slice(&now.to_le_bytes());
        for (k, a) in work.active[OP].iter().enumerate() {
            set_word(ids, 2 + k, a.id);
        }
        let n = 8 + 4 * matched;
        let mut payload = crate::log::Slices([&self.work.borrow().scratch[..n]]);
        let (addr, _) = self.log.write_batch(kind::MEM_ACCESS, &mut payload)?;
        self.bytes_since_checkpoint = self.bytes_since_checkpoint.saturating_add(n as u32);
        self.mem_written(addr, n as u32, 0);
        // Read back through the (possibly relocated) active set: the access
        // record is applied there. The matched ids stay in the scratch
        // area, which nothing below writes until the last one is read.
        self.mem_active(OP)?;
        for m in 0..matched {
            let id = word(&self.work.borrow_mut().scratch, 2 + m);
            if let Some(a) = self.work.borrow_mut().active[OP]
                .iter()
                .find(|a| a.id == id)
                .copied()
            {
                if !self.mem_load_ok_in(&a, 0)? {
                    continue;
                }
                f(self.slot(0));
            }
        }
        self.mem_maybe_compact()?;
        Ok(matched)
    }

    /// Updates an item (ESP-Claw's `update`): the non-empty fields of `patch`
    /// replace the item's, and the result is stored as a new item with a new
    /// id and access count 0, after which the old item is forgotten.
    /// [`memory_newest`](Self::memory_newest) follows the lineage from the
    /// old id. Returns the new item (or the item it duplicates), or `None`
    /// if the patch changes nothing.
    ///
    /// Power loss: the new item and the tombstone are two batches; a cut
    /// between them leaves both, and the next compaction forgets the old
    /// one through the lineage the new item records.
    pub fn memory_update(
        &mut self,
        id: ItemId,
        patch: &ItemInput<'_>,
        now: u32,
    ) -> Result<Option<Stored>, Error<F::Error>> {
        let old_a = self.mem_find(id.get())?.ok_or(Error::NotFound)?;
        let (_, old_root) = self.mem_load_in(&old_a, 0)?;
        let old = self.slot(0).clone();
        let root = if old_root == 0 { id.get() } else { old_root };
        let new_id = ItemId::new(self.mem.next_id);
        let Some(new) = old
            .updated(patch, new_id, now, self.config.memory.label_limit)
            .map_err(|_| Error::InvalidInput("memory content is empty"))?
        else {
            return Ok(None);
        };
        let mut dup = None;
        for k in 0..self.work.borrow_mut().active[OP].len() {
            let a = self.work.borrow_mut().active[OP][k];
            if a.id == id.get() {
                continue;
            }
            if !self.mem_load_ok_in(&a, 0)? {
                continue;
            }
            if new.duplicate_of(self.slot(0)).is_some() {
                dup = Some(self.slot(0).clone());
                break;
            }
        }
        let stored = match dup {
            Some(existing) => Stored {
                item: existing,
                changed: false,
                replaced: 0,
            },
            None => {
                self.mem.next_id = self.mem.next_id.wrapping_add(1);
                self.mem_put(&new, (id.get(), root), true, Priority::User)?;
                self.stage_touch(&new);
                Stored {
                    item: new,
                    changed: true,
                    replaced: 0,
                }
            }
        };
        self.mem_forget_record(id.get(), Priority::User)?;
        self.stage_touch(&old);
        self.mem_maybe_compact()?;
        Ok(Some(stored))
    }

    /// Forgets an active item: appends a tombstone. Its content stays on
    /// flash until garbage collection erases it; use
    /// [`memory_forget_scrub`](Self::memory_forget_scrub) to remove it now.
    ///
    /// Power loss: atomic.
    pub fn memory_forget(&mut self, id: ItemId) -> Result<Item, Error<F::Error>> {
        let item = self.memory_get(id)?;
        self.mem_forget_record(id.get(), Priority::Maintenance)?;
        self.stage_touch(&item);
        self.mem_maybe_compact()?;
        Ok(item)
    }

    /// The newest version of an item: `id` itself if active, else the
    /// active item that replaced it or that descends from it (every put
    /// records the id it replaced and the first id of its lineage).
    /// `NotFound` if the lineage ends in a forgotten item.
    pub fn memory_newest(&mut self, id: ItemId) -> Result<ItemId, Error<F::Error>> {
        let want = id.get();
        if self.mem_find(want)?.is_some() {
            return Ok(id);
        }
        for k in 0..self.work.borrow_mut().active[OP].len() {
            let a = self.work.borrow_mut().active[OP][k];
            let r = self.mem_read(a.addr, 0);
            let Some((origin, root)) = self.mem_tolerate(r)? else {
                continue;
            };
            if origin == want || root == want {
                return Ok(ItemId::new(a.id));
            }
        }
        Err(Error::NotFound)
    }

    /// Forgets every long-term memory item.
    ///
    /// Power loss: atomic (one empty index).
    pub fn memory_clear(&mut self) -> Result<(), Error<F::Error>> {
        let mut fixed = [0u8; INDEX_FIXED as usize];
        fixed[0..4].copy_from_slice(&NO_ADDR.to_le_bytes());
        fixed[4..8].copy_from_slice(&self.mem.next_id.to_le_bytes());
        let seq = self.log.head_seq;
        fixed[12..16].copy_from_slice(&seq.to_le_bytes());
        let mut payload = IndexPayload {
            fixed,
            entries: &[],
            catalog: &[],
        };
        let addr = self.write(kind::MEM_INDEX, &mut payload, Priority::Maintenance)?;
        let seq = self.log.head_seq_of(addr);
        self.mem_links.clear();
        self.mem = MemState {
            root: addr,
            head: addr,
            oldest: seq,
            ..MemState {
                chain: 0,
                changes: 0,
                bytes: 0,
                next_id: self.mem.next_id,
                ..MemState::EMPTY
            }
        };
        Ok(())
    }

    /// Compacts long-term memory now (it also runs by itself after
    /// [`MemoryConfig::compact_after_changes`] changes or
    /// [`MemoryConfig::compact_after_bytes`] bytes).
    pub fn memory_compact(&mut self) -> Result<(), Error<F::Error>> {
        self.mem_compact_with(None, Priority::Maintenance)
            .map(|_| ())
    }

    /// Number of active items.
    pub fn memory_len(&mut self) -> Result<usize, Error<F::Error>> {
        self.mem_active(OP)?;
        Ok(self.work.borrow_mut().active[OP].len())
    }

    /// Writes the full-mode prompt context: ESP-Claw's preamble, then
    /// `Summary label catalog:` and one `- <label>` line per label, or
    /// `- (empty)`.
    pub fn write_memory_prompt<O: fmt::Write>(&mut self, w: &mut O) -> Result<(), Error<F::Error>> {
        let mut failed = w.write_str(LONG_TERM_PREAMBLE).is_err();
        let mut any = false;
        self.memory_catalog(|l, _| {
            any = true;
            failed |= writeln!(w, "- {l}").is_err();
        })?;
        if !any {
            failed |= w.write_str(crate::memory::CATALOG_EMPTY_LINE).is_err();
        }
        if failed {
            return Err(Error::InvalidInput("the prompt writer failed"));
        }
        Ok(())
    }

    /// Writes `MEMORY.md` in ESP-Claw's layout (lite mode injects it whole).
    pub fn write_memory_md<O: fmt::Write>(&mut self, w: &mut O) -> Result<(), Error<F::Error>> {
        let mut failed = false;
        failed |= writeln!(w, "{}\n", crate::memory::MEMORY_MD_TITLE).is_err();
        let mut any_label = false;
        self.memory_catalog(|l, refs| {
            if !any_label {
                failed |= w.write_str("## Summary Labels\n\n").is_err();
            }
            any_label = true;
            failed |= writeln!(w, "- {l} (refs={refs})").is_err();
        })?;
        if any_label {
            failed |= w.write_char('\n').is_err();
        }
        let mut first = true;
        let count = self.memory_list(|item| {
            if first {
                failed |= w.write_str("## Active Memories\n\n").is_err();
                first = false;
            }
            failed |= crate::memory::write_memory_md_item(w, item).is_err();
        })?;
        if count == 0 {
            failed |= writeln!(w, "{}", crate::memory::MEMORY_MD_EMPTY_LINE).is_err();
        }
        if failed {
            return Err(Error::InvalidInput("the MEMORY.md writer failed"));
        }
        Ok(())
    }

    // ---- scrubbing -----------------------------------------------------------

    /// Every put of item `id` anywhere on flash (current, relocated and
    /// released-but-not-erased copies): calls `f(addr, len)` with each
    /// chunk's address and payload length.
    fn mem_find_copies(
        &mut self,
        id: u32,
        mut f: impl FnMut(u32, u32),
    ) -> Result<(), Error<F::Error>> {
        let geo = self.log.geo;
        // Every sector, whatever its header says: a sector whose erase was
        // cut (its header gone, its chunks still there) holds copies too.
        for sector in 0..geo.count {
            let mut pos = geo.first_chunk(sector);
            for _ in 0..geo.sector {
                let c = match self.log.slot_at(sector, pos)? {
                    crate::log::Slot::Chunk(c) => c,
                    _ => break,
                };
                if c.header.kind == kind::MEM_PUT && c.header.is_first() {
                    let mut b = [0u8; PUT_FIXED as usize + 6];
                    let n = (c.header.len as usize).min(b.len());
                    self.log
                        .io()
                        .read_stream(pos + CHUNK_HEADER_LEN, &mut b[..n])?;
                    if n == b.len() && u32_at(&b, PUT_FIXED as usize + 2) == id {
                        f(pos, c.header.len);
                    }
                }
                pos += geo.chunk_size(c.header.len);
            }
        }
        Ok(())
    }
}

impl<F: NorFlash, const MAX_SESSIONS: usize, W: BorrowMut<Work>> Store<F, MAX_SESSIONS, W> {
    /// Forgets an item and removes every copy of it from flash, on any flash
    /// (write-once included): each sector holding a copy has everything else
    /// that lives in it moved to the head, and is erased. Costs up to a few
    /// sectors of relocation and one erase per sector holding a copy; on
    /// flash that allows rewrites,
    /// [`memory_forget_scrub_in_place`](Self::memory_forget_scrub_in_place)
    /// is cheaper.
    ///
    /// Power loss: the tombstone and a compaction commit first (the item is
    /// forgotten from then on); each sector is then wiped only after its live
    /// contents are moved and a checkpoint records where they went. After a
    /// cut, call again with the same id to finish.
    pub fn memory_forget_scrub(&mut self, id: ItemId) -> Result<(), Error<F::Error>> {
        if self.memory_get(id).is_ok() {
            self.mem_forget_record(id.get(), Priority::Maintenance)?;
        }
        self.mem_compact_with(None, Priority::Maintenance)?;
        let geo = self.log.geo;
        // Sectors holding a copy (at most every sector, bounded).
        let mut sectors: Vec<u32, 64> = Vec::new();
        let mut more = false;
        self.mem_find_copies(id.get(), |a, _| {
            let s = a / geo.sector;
            if !sectors.contains(&s) && sectors.push(s).is_err() {
                more = true;
            }
        })?;
        for &sector in sectors.iter() {
            self.wipe_sector_contents(sector)?;
        }
        if more {
            // More than 64 sectors held copies: the next call goes on.
            return self.memory_forget_scrub(id);
        }
        Ok(())
    }

    /// Moves everything live out of `sector` and erases it.
    fn wipe_sector_contents(&mut self, sector: u32) -> Result<(), Error<F::Error>> {
        let Some(seq) = self.log.seq_of_sector(sector) else {
            // Free (released, not yet erased): nothing lives there.
            let start = self.log.geo.sector_start(sector);
            return self
                .log
                .flash
                .erase(start, start + self.log.geo.sector)
                .map_err(Error::Flash);
        };
        if sector == self.log.head {
            // Seal the head so that writing moves on to a new sector.
            self.log.write_pos = self.log.geo.sector_start(sector) + self.log.geo.sector;
            self.ensure_room(1, Priority::Maintenance)?;
            self.log.open_next_sector()?;
        }
        // Move what lives in it (and, to keep this simple, what lives in
        // older sectors too: the same relocation garbage collection does).
        self.ensure_room(self.log.geo.sector * 2, Priority::Maintenance)?;
        self.in_gc = true;
        let moved = self.relocate_tail(seq);
        self.in_gc = false;
        if !moved? {
            return Err(Error::Full {
                needed_bytes: self.log.geo.sector,
                available_bytes: 0,
            });
        }
        self.write_checkpoint_with(Priority::Maintenance)?;
        self.log.wipe_sector(sector)
    }
}

impl<F: MultiwriteNorFlash, const MAX_SESSIONS: usize, W: BorrowMut<Work>>
    Store<F, MAX_SESSIONS, W>
{
    /// Forgets an item and zeroes every copy of it on flash in place, so the
    /// raw flash no longer holds its content. Needs flash that allows a word
    /// to be programmed again (`MultiwriteNorFlash`); on other flash use
    /// [`memory_forget_scrub`](Self::memory_forget_scrub).
    ///
    /// Power loss: the tombstone and a compaction (so no chain runs through
    /// the zeroed copies) commit first; a cut while zeroing leaves the item
    /// forgotten, with some copies still to zero (call again with the same
    /// id: it is found by its copies even once forgotten).
    pub fn memory_forget_scrub_in_place(&mut self, id: ItemId) -> Result<(), Error<F::Error>> {
        if self.memory_get(id).is_ok() {
            self.mem_forget_record(id.get(), Priority::Maintenance)?;
        }
        self.mem_compact_with(None, Priority::Maintenance)?;
        let mut copies: Vec<(u32, u32), 64> = Vec::new();
        self.mem_find_copies(id.get(), |a, l| {
            let _ = copies.push((a, l));
        })?;
        let w = self.log.geo.write;
        for (addr, len) in copies {
            // Zero every payload byte; bytes of the chunk header and of the
            // next chunk that share a word are written as 0xFF (unchanged).
            let start = addr + CHUNK_HEADER_LEN;
            let end = start + len;
            let mut at = start / w * w;
            while at < end {
                let n = (self.log.buf.len() as u32).min(end.div_ceil(w) * w - at);
                for (k, b) in self.log.buf[..n as usize].iter_mut().enumerate() {
                    let p = at + k as u32;
                    *b = if p >= start && p < end { 0x00 } else { 0xFF };
                }
                self.log
                    .flash
                    .write(at, &self.log.buf[..n as usize])
                    .map_err(Error::Flash)?;
                at += n;
            }
        }
        Ok(())
    }
}

trait CloneCorrupted {
    fn clone_corrupted(&self) -> Self;
}

impl<E> CloneCorrupted for Error<E> {
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
