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

use core::fmt;

use embedded_storage::nor_flash::{MultiwriteNorFlash, NorFlash};
use heapless::Vec;

use super::{Priority, Store};
use crate::error::{Error, UnknownLabelError};
use crate::layout::{kind, u16_at, u32_at, CHUNK_HEADER_LEN, NO_ADDR};
use crate::log::{copy_from_parts, Io, Payload};
use crate::memory::{
    conflicts_for_replace, merge_same_key, select_evictions, Item, ItemId, ItemInput, ItemRank,
    LabelLimit, ITEM_ENCODED_MAX_BYTES, LONG_TERM_PREAMBLE, MAX_ACTIVE_ITEMS,
};
use crate::naming::fnv1a32;

/// The `prev` of a put outside the chain (a merge or a relocation copy).
pub(crate) const UNCHAINED: u32 = 0xFFFF_FFFE;

/// Most records in the memory chain before it is compacted regardless.
pub(crate) const MEM_CHAIN_MAX: usize = 32;
/// Most active items between two compactions.
const ACTIVE_CAP: usize = MAX_ACTIVE_ITEMS + MEM_CHAIN_MAX;

/// The record kinds of the memory chain after its index.
fn is_chain_kind(k: u8) -> bool {
    matches!(k, kind::MEM_PUT | kind::MEM_FORGET | kind::MEM_ACCESS)
}
/// A put's payload before the item: prev u32, origin u32 (the id it
/// replaces), root u32 (the first id of its lineage).
const PUT_FIXED: u32 = 12;
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

/// A label's change in references since the index was written.
struct LabelDelta {
    hash: u32,
    change: i32,
    /// A put that carries the label.
    addr: u32,
    /// Whether the index's catalog has the label.
    used: bool,
}

/// Adds one reference to `label` in the catalog encoded in `buf[..len]`;
/// the new length, or `None` if it does not fit.
fn catalog_add(buf: &mut [u8; CATALOG_MAX], len: usize, label: &str) -> Option<usize> {
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

struct Put<'a> {
    fixed: [u8; PUT_FIXED as usize],
    item: &'a [u8],
}

impl<F: NorFlash> Payload<F> for Put<'_> {
    fn len(&self) -> u32 {
        PUT_FIXED + self.item.len() as u32
    }
    fn fill(
        &mut self,
        _io: &mut Io<'_, F>,
        offset: u32,
        out: &mut [u8],
    ) -> Result<(), Error<F::Error>> {
        copy_from_parts([&self.fixed[..], self.item].into_iter(), offset, out);
        Ok(())
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

impl<F: NorFlash, const MAX_SESSIONS: usize> Store<F, MAX_SESSIONS> {
    // ---- reading -----------------------------------------------------------

    /// Reads a memory record's payload (CRC checked) into `buf`; returns its
    /// length.
    fn mem_record(
        &mut self,
        addr: u32,
        want: u8,
        buf: &mut [u8],
    ) -> Result<usize, Error<F::Error>> {
        let h = self.log.io().chunk_header(addr)?;
        let bad = Error::Corrupted {
            address: addr,
            what: "a memory record is damaged",
        };
        if h.is_none_or(|h| h.kind != want || !h.is_first()) {
            return Err(bad);
        }
        let len = self.log.verify(addr)?.ok_or(bad)? as usize;
        let n = len.min(buf.len());
        self.log
            .io()
            .read_stream(addr + CHUNK_HEADER_LEN, &mut buf[..n])?;
        Ok(len)
    }

    /// Reads the item put at `addr`, and its lineage: the id it replaced and
    /// the first id of its lineage (0: none).
    // Out of line: its buffers stay off every caller's stack frame.
    #[inline(never)]
    pub(crate) fn mem_item(&mut self, addr: u32) -> Result<(Item, Lineage), Error<F::Error>> {
        let mut buf = [0u8; PUT_FIXED as usize + ITEM_ENCODED_MAX_BYTES];
        let len = self.mem_record(addr, kind::MEM_PUT, &mut buf)?;
        let bad = Error::Corrupted {
            address: addr,
            what: "a memory item does not decode",
        };
        let body = buf
            .get(PUT_FIXED as usize..len)
            .ok_or(bad.clone_corrupted())?;
        let item = Item::decode(body).map_err(|_| bad)?;
        Ok((item, (u32_at(&buf, 4), u32_at(&buf, 8))))
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
    fn mem_salvage_index(
        &mut self,
        root: u32,
        out: &mut Vec<Active, ACTIVE_CAP>,
    ) -> Result<(), Error<F::Error>> {
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
            if addr >= capacity || out.iter().any(|x| x.id == id) {
                continue;
            }
            // A garbage entry past the real ones names no sound put: that
            // is not damage met, so it is not counted.
            let item = match self.mem_item(addr) {
                Ok((item, _)) => item,
                Err(Error::Corrupted { .. }) => continue,
                Err(e) => return Err(e),
            };
            if item.id().get() != id {
                continue;
            }
            let _ = out.push(Active {
                id,
                addr,
                updated_at: item.updated_at(),
                access: item.access_count(),
                bloom: item_bloom(&item),
            });
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

    /// The active items: the index's entries with the chain applied.
    // Out of line: its buffers stay off every caller's stack frame.
    #[inline(never)]
    pub(crate) fn mem_active(
        &mut self,
        out: &mut Vec<Active, ACTIVE_CAP>,
    ) -> Result<(), Error<F::Error>> {
        out.clear();
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
                let _ = out.push(Active {
                    id: u32_at(&e, 0),
                    addr: u32_at(&e, 4),
                    updated_at: u32_at(&e, 8),
                    access: u16_at(&e, 12),
                    bloom: u16_at(&e, 14),
                });
            }
        } else if root != NO_ADDR {
            self.mem_salvage_index(root, out)?;
        }
        for (addr, k) in self.mem_chain()? {
            match k {
                kind::MEM_PUT => {
                    let r = self.mem_item(addr);
                    let Some((item, _)) = self.mem_tolerate(r)? else {
                        continue;
                    };
                    let a = Active {
                        id: item.id().get(),
                        addr,
                        updated_at: item.updated_at(),
                        access: item.access_count(),
                        bloom: item_bloom(&item),
                    };
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
                    if let Some(i) = out.iter().position(|x| x.id == id) {
                        out.remove(i);
                    }
                }
                _ => {
                    let mut b = [0u8; 8 + 4 * MAX_ACTIVE_ITEMS];
                    let r = self.mem_record(addr, kind::MEM_ACCESS, &mut b);
                    let Some(len) = self.mem_tolerate(r)? else {
                        continue;
                    };
                    let len = len.min(b.len());
                    let now = u32_at(&b, 4);
                    for id in b[8..len].chunks_exact(4) {
                        let id = u32::from_le_bytes([id[0], id[1], id[2], id[3]]);
                        if let Some(x) = out.iter_mut().find(|x| x.id == id) {
                            x.access = x.access.saturating_add(1);
                            x.updated_at = x.updated_at.max(now);
                        }
                    }
                }
            }
        }
        Ok(())
    }

    /// The item with the applied access count and update time.
    fn mem_load(&mut self, a: &Active) -> Result<Item, Error<F::Error>> {
        let (mut item, _) = self.mem_item(a.addr)?;
        item.set_access_count(a.access);
        item.set_updated_at(a.updated_at);
        Ok(item)
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

    /// [`mem_load`](Self::mem_load), `None` for a damaged item.
    fn mem_load_ok(&mut self, a: &Active) -> Result<Option<Item>, Error<F::Error>> {
        let r = self.mem_load(a);
        self.mem_tolerate(r)
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
        let seq = self.log.head_seq_of(addr);
        self.mem.head = addr;
        self.mem.chain += 1;
        self.mem.changes = self.mem.changes.saturating_add(changes);
        self.mem.bytes = self.mem.bytes.saturating_add(len);
        self.mem.oldest = self.mem.oldest.min(seq);
        Ok(addr)
    }

    /// Writes a put. A chained put extends the memory chain; an unchained
    /// one (a merge or a relocation copy, `prev` none) is reachable only from
    /// the index written after it, and is garbage if that index never lands.
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
        let mut enc = [0u8; ITEM_ENCODED_MAX_BYTES];
        let n = item
            .encode(&mut enc)
            .map_err(|_| Error::LogicBug("item larger than its encoding"))?;
        let mut fixed = [0u8; PUT_FIXED as usize];
        self.prepare_write(PUT_FIXED + n as u32, p)?;
        let prev = if chained { self.mem_prev() } else { UNCHAINED };
        fixed[0..4].copy_from_slice(&prev.to_le_bytes());
        fixed[4..8].copy_from_slice(&origin.0.to_le_bytes());
        fixed[8..12].copy_from_slice(&origin.1.to_le_bytes());
        let mut payload = Put {
            fixed,
            item: &enc[..n],
        };
        if chained {
            self.mem_write(kind::MEM_PUT, &mut payload, 1)
        } else {
            let addr = self.write_prepared(kind::MEM_PUT, &mut payload)?;
            self.mem.oldest = self.mem.oldest.min(self.log.head_seq_of(addr));
            Ok(addr)
        }
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
    // Out of line: its buffers stay off every caller's stack frame.
    #[inline(never)]
    fn mem_maybe_compact(&mut self) -> Result<(), Error<F::Error>> {
        let c = self.config.memory;
        if self.mem.changes < c.compact_after_changes && self.mem.bytes < c.compact_after_bytes {
            return Ok(());
        }
        let p = Priority::Maintenance;
        let mut active: Vec<Active, ACTIVE_CAP> = Vec::new();
        self.mem_active(&mut active)?;
        // Merges.
        let mut keys = self.mem_keys(&active)?;
        let mut merges = 0;
        let mut i = 0;
        while i < active.len() {
            let mut j = i + 1;
            while j < active.len() {
                if keys[i] != 0 && keys[i] == keys[j] && merges < MAX_MERGES {
                    let (Some(a), Some(b)) =
                        (self.mem_load_ok(&active[i])?, self.mem_load_ok(&active[j])?)
                    else {
                        j += 1;
                        continue;
                    };
                    if let Some(m) = merge_same_key(&a, &b) {
                        merges += 1;
                        let other = if m.id() == a.id() { b.id() } else { a.id() };
                        self.mem_put(&m, (0, 0), true, p)?;
                        self.mem_forget_record(other.get(), p)?;
                        let kept = if m.id() == a.id() { i } else { j };
                        active[kept].access = m.access_count();
                        active[kept].updated_at = m.updated_at();
                        let gone = if kept == i { j } else { i };
                        active.remove(gone);
                        keys.remove(gone);
                        if gone == i {
                            break;
                        }
                        continue;
                    }
                }
                j += 1;
            }
            i += 1;
        }
        // Evictions.
        let max = self.config.memory.max_items.min(MAX_ACTIVE_ITEMS);
        if active.len() > max {
            let mut ranks: Vec<ItemRank, ACTIVE_CAP> = active.iter().map(Active::rank).collect();
            let evict: Vec<u32, ACTIVE_CAP> = select_evictions(&mut ranks, max)
                .iter()
                .map(|r| r.id.get())
                .collect();
            for id in evict {
                self.mem_forget_record(id, p)?;
            }
        }
        self.mem.changes = 0;
        self.mem.bytes = 0;
        Ok(())
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
            let mut active: Vec<Active, ACTIVE_CAP> = Vec::new();
            self.mem_active(&mut active)?;
            let merges = self.mem_merge_count(&active)?;
            need = INDEX_FIXED
                + INDEX_ENTRY * active.len() as u32
                + merges * (PUT_FIXED + ITEM_ENCODED_MAX_BYTES as u32 + 16);
            let (_, opens) = self.log.plan(need);
            if self.log.free_sectors() >= opens + self.reserve_for(p) {
                break;
            }
            self.ensure_room(need, p)?;
        }
        let _ = need;
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

    /// The hash of each active item's dedup key (0 for an empty key, which
    /// matches nothing), in the order of `active`.
    // Out of line: its buffers stay off every caller's stack frame.
    #[inline(never)]
    fn mem_keys(&mut self, active: &[Active]) -> Result<Vec<u32, ACTIVE_CAP>, Error<F::Error>> {
        let mut keys: Vec<u32, ACTIVE_CAP> = Vec::new();
        for a in active {
            // A damaged item has no key: it merges with nothing.
            let key = self.mem_load_ok(a)?.map(|i| i.key());
            let _ = keys.push(match key {
                Some(k) if !k.is_empty() => fnv1a32(k.as_bytes()),
                _ => 0,
            });
        }
        Ok(keys)
    }

    /// How many merges a compaction of `active` would write (at most
    /// [`MAX_MERGES`]).
    fn mem_merge_count(&mut self, active: &[Active]) -> Result<u32, Error<F::Error>> {
        let keys = self.mem_keys(active)?;
        let mut merges = 0;
        for i in 0..keys.len() {
            if keys[i] != 0 && keys[..i].contains(&keys[i]) {
                merges += 1;
            }
        }
        Ok(merges.min(MAX_MERGES as u32))
    }

    // Out of line: its buffers stay off every caller's stack frame.
    #[inline(never)]
    fn mem_compact_now(
        &mut self,
        relocate: Option<u32>,
        p: Priority,
    ) -> Result<bool, Error<F::Error>> {
        let mut active: Vec<Active, ACTIVE_CAP> = Vec::new();
        self.mem_active(&mut active)?;
        // A cut inside an update, between the new item and the old one's
        // tombstone, leaves both active: the new item's lineage names the
        // item it replaced, which is forgotten here (as `memory_update`
        // documents).
        // Items that fail their checksum are dropped: they cannot be read
        // back, and the new index must not keep them.
        let mut replaced: Vec<u32, ACTIVE_CAP> = Vec::new();
        for k in 0..active.len() {
            let a = active[k];
            let r = self.mem_item(a.addr);
            match self.mem_tolerate(r)? {
                Some((_, (origin, _))) => {
                    if origin != 0 && origin != a.id && active.iter().any(|x| x.id == origin) {
                        let _ = replaced.push(origin);
                    }
                }
                None => {
                    let _ = replaced.push(a.id);
                }
            }
        }
        active.retain(|a| !replaced.contains(&a.id));
        // Merge items with the same key (rare: stores refuse same-key
        // duplicates, so only updates can create them).
        let mut keys = self.mem_keys(&active)?;
        let mut i = 0;
        let mut merges = 0;
        while i < active.len() {
            let mut j = i + 1;
            while j < active.len() {
                if keys[i] != 0 && keys[i] == keys[j] && merges < MAX_MERGES {
                    merges += 1;
                    let (Some(a), Some(b)) =
                        (self.mem_load_ok(&active[i])?, self.mem_load_ok(&active[j])?)
                    else {
                        j += 1;
                        continue;
                    };
                    if let Some(m) = merge_same_key(&a, &b) {
                        let addr = self.mem_put(&m, (0, 0), false, p)?;
                        active[i] = Active {
                            id: m.id().get(),
                            addr,
                            updated_at: m.updated_at(),
                            access: m.access_count(),
                            bloom: item_bloom(&m),
                        };
                        active.remove(j);
                        keys.remove(j);
                        continue;
                    }
                }
                j += 1;
            }
            i += 1;
        }
        // Evict beyond the limit: lowest access*3 + updated_at/3600 first.
        let max = self.config.memory.max_items.min(MAX_ACTIVE_ITEMS);
        if active.len() > max {
            let mut ranks: Vec<ItemRank, ACTIVE_CAP> = active.iter().map(Active::rank).collect();
            let evict: Vec<u32, ACTIVE_CAP> = select_evictions(&mut ranks, max)
                .iter()
                .map(|r| r.id.get())
                .collect();
            active.retain(|a| !evict.contains(&a.id));
        }
        // Relocation: copy the items in the sectors about to be released.
        if let Some(upto) = relocate {
            for k in 0..active.len() {
                let a = active[k];
                if self.log.head_seq_of(a.addr) <= upto {
                    let item = self.mem_load(&a)?;
                    let (_, origin) = self.mem_item(a.addr)?;
                    let addr = self.mem_put(&item, origin, false, p)?;
                    active[k].addr = addr;
                }
            }
        }
        // The label catalog, in item order, if it fits.
        let mut catalog = [0u8; CATALOG_MAX];
        let mut catalog_len = Some(0usize);
        let mut order: Vec<Active, ACTIVE_CAP> = active.clone();
        order.sort_unstable_by_key(|a| a.id);
        for a in order.iter() {
            let item = self.mem_load(a)?;
            for l in item.labels() {
                if let Some(n) = catalog_len {
                    catalog_len = catalog_add(&mut catalog, n, l);
                }
            }
        }
        let catalog = match catalog_len {
            Some(n) => &catalog[..n],
            None => &catalog[..0],
        };
        // The new index.
        let len = INDEX_FIXED + INDEX_ENTRY * active.len() as u32 + catalog.len() as u32;
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
        let oldest = active
            .iter()
            .map(|a| self.log.head_seq_of(a.addr))
            .min()
            .unwrap_or(index_seq)
            .min(index_seq);
        let mut fixed = [0u8; INDEX_FIXED as usize];
        fixed[0..4].copy_from_slice(&NO_ADDR.to_le_bytes());
        fixed[4..8].copy_from_slice(&self.mem.next_id.to_le_bytes());
        fixed[8..12].copy_from_slice(&(active.len() as u32).to_le_bytes());
        fixed[12..16].copy_from_slice(&oldest.to_le_bytes());
        let catalog_field = if catalog_len.is_some() {
            catalog.len() as u32
        } else {
            NO_ADDR
        };
        fixed[16..20].copy_from_slice(&catalog_field.to_le_bytes());
        let mut payload = IndexPayload {
            fixed,
            entries: &active,
            catalog,
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
    pub fn write_memory_stage_note<W: fmt::Write>(&self, w: &mut W) -> Result<bool, fmt::Error> {
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
        let mut active: Vec<Active, ACTIVE_CAP> = Vec::new();
        self.mem_active(&mut active)?;
        for a in active.iter() {
            let Some(existing) = self.mem_load_ok(a)? else {
                continue;
            };
            if item.duplicate_of(&existing).is_some() {
                return Ok(Stored {
                    item: existing,
                    changed: false,
                    replaced: 0,
                });
            }
        }
        if active.len() >= ACTIVE_CAP - 1 {
            self.mem_compact_with(None, Priority::User)?;
            self.mem_active(&mut active)?;
        }
        self.mem.next_id = self.mem.next_id.wrapping_add(1);
        self.mem_put(&item, (0, 0), true, Priority::User)?;
        self.stage_touch(&item);
        let mut replaced = 0;
        if replace {
            self.mem_active(&mut active)?;
            for a in active.clone().iter().filter(|a| a.id != item.id().get()) {
                let Some(existing) = self.mem_load_ok(a)? else {
                    continue;
                };
                if conflicts_for_replace(&existing, &item) {
                    self.mem_forget_record(a.id, Priority::User)?;
                    self.stage_touch(&existing);
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
        let mut active: Vec<Active, ACTIVE_CAP> = Vec::new();
        self.mem_active(&mut active)?;
        let a = *active
            .iter()
            .find(|a| a.id == id.get())
            .ok_or(Error::NotFound)?;
        self.mem_load(&a)
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
        let mut active: Vec<Active, ACTIVE_CAP> = Vec::new();
        self.mem_active(&mut active)?;
        active.sort_unstable_by(|a, b| a.rank().recall_cmp(&b.rank()));
        let mut listed = 0;
        for a in active.iter() {
            let Some(item) = self.mem_load_ok(a)? else {
                continue;
            };
            f(&item);
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
        let mut f = f;
        let mut active: Vec<Active, ACTIVE_CAP> = Vec::new();
        self.mem_active(&mut active)?;
        if let Some(n) = self.mem_catalog_from_index(&active, &mut f)? {
            return Ok(n);
        }
        // No catalog in the index (none yet, or it did not fit): count the
        // labels of every active item.
        active.sort_unstable_by_key(|a| a.id);
        let mut hashes: Vec<u32, { ACTIVE_CAP * 3 }> = Vec::new();
        for a in active.iter() {
            let Some(item) = self.mem_load_ok(a)? else {
                continue;
            };
            for l in item.labels() {
                let _ = hashes.push(fnv1a32(l.as_bytes()));
            }
        }
        let mut sorted = hashes.clone();
        sorted.sort_unstable();
        let mut emitted: Vec<u32, { ACTIVE_CAP * 3 }> = Vec::new();
        for a in active.iter() {
            let Some(item) = self.mem_load_ok(a)? else {
                continue;
            };
            for l in item.labels() {
                let h = fnv1a32(l.as_bytes());
                if emitted.contains(&h) {
                    continue;
                }
                let _ = emitted.push(h);
                let refs = sorted.iter().filter(|x| **x == h).count() as u16;
                f(l, refs);
            }
        }
        Ok(emitted.len())
    }

    /// The catalog from the newest index, corrected for what the chain
    /// changed since: reads the index's catalog and entries and only the
    /// items added or removed since. `None` if the index has no catalog.
    // Out of line: its buffers stay off every caller's stack frame.
    #[inline(never)]
    fn mem_catalog_from_index(
        &mut self,
        active: &[Active],
        f: &mut impl FnMut(&str, u16),
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
        // At most the chain's records changed anything: 3 labels each, on
        // both sides.
        let mut deltas: Vec<LabelDelta, { 6 * MEM_CHAIN_MAX }> = Vec::new();
        let add = |deltas: &mut Vec<LabelDelta, { 6 * MEM_CHAIN_MAX }>,
                   item: &Item,
                   by: i32,
                   addr: u32|
         -> bool {
            for l in item.labels() {
                let h = fnv1a32(l.as_bytes());
                match deltas.iter_mut().find(|d| d.hash == h) {
                    Some(d) => d.change += by,
                    None => {
                        if deltas
                            .push(LabelDelta {
                                hash: h,
                                change: by,
                                addr,
                                used: false,
                            })
                            .is_err()
                        {
                            return false;
                        }
                    }
                }
            }
            true
        };
        let mut in_index: Vec<(u32, u32), ACTIVE_CAP> = Vec::new();
        for k in 0..count {
            let mut e = [0u8; INDEX_ENTRY as usize];
            let a = self
                .log
                .io()
                .stream_advance(at, INDEX_FIXED + INDEX_ENTRY * k);
            self.log.io().read_stream(a, &mut e)?;
            let (id, addr) = (u32_at(&e, 0), u32_at(&e, 4));
            let _ = in_index.push((id, addr));
            if !active.iter().any(|x| x.id == id && x.addr == addr) {
                let r = self.mem_item(addr);
                let Some((item, _)) = self.mem_tolerate(r)? else {
                    return Ok(None);
                };
                if !add(&mut deltas, &item, -1, addr) {
                    return Ok(None);
                }
            }
        }
        for a in active.iter() {
            if !in_index.iter().any(|x| x.0 == a.id && x.1 == a.addr) {
                let r = self.mem_item(a.addr);
                let Some((item, _)) = self.mem_tolerate(r)? else {
                    return Ok(None);
                };
                if !add(&mut deltas, &item, 1, a.addr) {
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
            let change = match deltas.iter_mut().find(|d| d.hash == h) {
                Some(d) => {
                    d.used = true;
                    d.change
                }
                None => 0,
            };
            if refs + change > 0 {
                f(text, (refs + change) as u16);
                emitted += 1;
            }
            pos += 1 + n as u32 + 2;
        }
        for d in deltas.iter().filter(|d| d.change > 0 && !d.used) {
            let r = self.mem_item(d.addr);
            let Some((item, _)) = self.mem_tolerate(r)? else {
                return Ok(None);
            };
            if let Some(l) = item
                .labels()
                .iter()
                .find(|l| fnv1a32(l.as_bytes()) == d.hash)
            {
                f(l, d.change as u16);
                emitted += 1;
            }
        }
        Ok(Some(emitted))
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
        let mut active: Vec<Active, ACTIVE_CAP> = Vec::new();
        self.mem_active(&mut active)?;
        // Every label must exist in the catalog.
        let mut seen = [false; 3];
        let mut matches: Vec<Active, ACTIVE_CAP> = Vec::new();
        let want = labels.iter().fold(0u16, |b, l| b | label_bloom(l));
        for a in active.iter() {
            if a.bloom & want == 0 {
                continue;
            }
            let Some(item) = self.mem_load_ok(a)? else {
                continue;
            };
            let mut hit = false;
            for (k, l) in labels.iter().enumerate() {
                if item.has_label(l) {
                    seen[k] = true;
                    hit = true;
                }
            }
            if hit {
                let _ = matches.push(*a);
            }
        }
        if let Some(k) = seen.iter().take(labels.len()).position(|s| !s) {
            let e = self.unknown_label(labels[k])?;
            return Err(Error::UnknownLabel(e));
        }
        matches.sort_unstable_by(|a, b| a.rank().recall_cmp(&b.rank()));
        matches.truncate(limit);
        self.mem_before_write(Priority::User)?;
        self.prepare_write(8 + 4 * matches.len() as u32, Priority::User)?;
        let mut ids = [0u8; 8 + 4 * MAX_ACTIVE_ITEMS];
        ids[0..4].copy_from_slice(&self.mem_prev().to_le_bytes());
        ids[4..8].copy_from_slice(&now.to_le_bytes());
        for (k, a) in matches.iter().enumerate() {
            ids[8 + 4 * k..12 + 4 * k].copy_from_slice(&a.id.to_le_bytes());
        }
        let n = 8 + 4 * matches.len();
        let mut payload = crate::log::Slices([&ids[..n]]);
        self.mem_write(kind::MEM_ACCESS, &mut payload, 0)?;
        // Read back through the (possibly relocated) active set: the access
        // record is applied there.
        self.mem_active(&mut active)?;
        for m in matches.iter() {
            if let Some(a) = active.iter().find(|a| a.id == m.id).copied() {
                let Some(item) = self.mem_load_ok(&a)? else {
                    continue;
                };
                f(&item);
            }
        }
        self.mem_maybe_compact()?;
        Ok(matches.len())
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
        let mut active: Vec<Active, ACTIVE_CAP> = Vec::new();
        self.mem_active(&mut active)?;
        let old_a = *active
            .iter()
            .find(|a| a.id == id.get())
            .ok_or(Error::NotFound)?;
        let old = self.mem_load(&old_a)?;
        let (_, (_, old_root)) = self.mem_item(old_a.addr)?;
        let root = if old_root == 0 { id.get() } else { old_root };
        let new_id = ItemId::new(self.mem.next_id);
        let Some(new) = old
            .updated(patch, new_id, now, self.config.memory.label_limit)
            .map_err(|_| Error::InvalidInput("memory content is empty"))?
        else {
            return Ok(None);
        };
        let mut dup = None;
        for a in active.iter().filter(|a| a.id != id.get()) {
            let Some(existing) = self.mem_load_ok(a)? else {
                continue;
            };
            if new.duplicate_of(&existing).is_some() {
                dup = Some(existing);
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
        let mut active: Vec<Active, ACTIVE_CAP> = Vec::new();
        self.mem_active(&mut active)?;
        let want = id.get();
        if active.iter().any(|a| a.id == want) {
            return Ok(id);
        }
        for a in active.iter() {
            let r = self.mem_item(a.addr);
            let Some((_, (origin, root))) = self.mem_tolerate(r)? else {
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
        let mut active: Vec<Active, ACTIVE_CAP> = Vec::new();
        self.mem_active(&mut active)?;
        Ok(active.len())
    }

    /// Writes the full-mode prompt context: ESP-Claw's preamble, then
    /// `Summary label catalog:` and one `- <label>` line per label, or
    /// `- (empty)`.
    pub fn write_memory_prompt<W: fmt::Write>(&mut self, w: &mut W) -> Result<(), Error<F::Error>> {
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
    pub fn write_memory_md<W: fmt::Write>(&mut self, w: &mut W) -> Result<(), Error<F::Error>> {
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

impl<F: NorFlash, const MAX_SESSIONS: usize> Store<F, MAX_SESSIONS> {
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

impl<F: MultiwriteNorFlash, const MAX_SESSIONS: usize> Store<F, MAX_SESSIONS> {
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
