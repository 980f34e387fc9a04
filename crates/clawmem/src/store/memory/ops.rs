//! The pieces the memory operations share (`api.rs`, `read.rs`,
//! `write.rs`, `scrub.rs`): the active set's marks, order and lookup, label
//! deltas and blooms, the label catalog, and the encoding of puts and of the
//! index. Behind the `memory` feature with them; what mount and the
//! checkpoint need of memory (the records' layout, [`MemState`]) is in
//! `mod.rs`.
//!
//! Power loss: nothing here writes.

use super::*;

/// One bit per active-set entry, on the stack (20 bytes).
#[derive(Clone, Copy)]
pub(super) struct Marks([u32; ACTIVE_CAP.div_ceil(32)]);

impl Marks {
    pub(super) const NONE: Marks = Marks([0; ACTIVE_CAP.div_ceil(32)]);
    /// Marks entry `k` (one out-of-line copy: it is marked in four places).
    #[inline(never)]
    pub(super) fn set(&mut self, k: usize) {
        if let Some(w) = self.0.get_mut(k / 32) {
            *w |= 1 << (k % 32);
        }
    }
    /// Whether entry `k` is marked (out of line, as [`Marks::set`]).
    #[inline(never)]
    pub(super) fn get(&self, k: usize) -> bool {
        self.0.get(k / 32).is_some_and(|w| w & (1 << (k % 32)) != 0)
    }

    /// Keeps, in order, the entries of `set` whose mark is `keep`.
    #[inline(never)]
    pub(super) fn retain(&self, set: &mut Vec<Active, ACTIVE_CAP>, keep: bool) {
        let mut kept = 0;
        for k in 0..set.len() {
            if self.get(k) == keep {
                // `kept` is at most `k`.
                let a = set[k];
                if let Some(d) = set.get_mut(kept) {
                    *d = a;
                }
                kept += 1;
            }
        }
        set.truncate(kept);
    }
}

/// The record kinds of the memory chain after its index.
pub(super) fn is_chain_kind(k: u8) -> bool {
    matches!(
        k,
        MEM_PUT | MEM_PUT_PLAIN | MEM_FORGET | MEM_ACCESS | MEM_ACCESS_PACKED
    )
}

/// The ids of an access record after its prev and time, one byte at a
/// time: in a [`MEM_ACCESS`] record each a `u32`; in a
/// [`MEM_ACCESS_PACKED`] one, the first id then each id's difference from
/// the one before, zigzag-coded (`d << 1` for a step up, `(-d << 1) - 1`
/// down) as LEB128 (seven bits a byte, low first, the top bit set on every
/// byte but the last; five bytes at most). Recalls return ids close to each
/// other, so most take a byte.
pub(crate) struct IdCoder {
    packed: bool,
    last: u32,
    acc: u32,
    shift: u32,
}

impl IdCoder {
    pub(crate) fn new(packed: bool) -> IdCoder {
        IdCoder {
            packed,
            last: 0,
            acc: 0,
            shift: 0,
        }
    }

    /// Takes the next byte: `Ok(Some(id))` when it completes an id, `Err`
    /// for a packed id longer than five bytes.
    pub(crate) fn feed(&mut self, b: u8) -> Result<Option<u32>, ()> {
        if !self.packed {
            self.acc |= u32::from(b) << self.shift;
            self.shift += 8;
            if self.shift < 32 {
                return Ok(None);
            }
            let id = self.acc;
            (self.acc, self.shift) = (0, 0);
            return Ok(Some(id));
        }
        if self.shift >= 35 || (self.shift == 28 && b > 0x0F) {
            return Err(());
        }
        self.acc |= u32::from(b & 0x7F) << self.shift;
        if b & 0x80 != 0 {
            self.shift += 7;
            return Ok(None);
        }
        let z = self.acc;
        (self.acc, self.shift) = (0, 0);
        let d = (z >> 1) ^ (z & 1).wrapping_neg();
        self.last = self.last.wrapping_add(d);
        Ok(Some(self.last))
    }

    /// Writes the next id packed into `out`; returns the bytes written.
    pub(crate) fn put(&mut self, id: u32, out: &mut [u8]) -> usize {
        let d = id.wrapping_sub(self.last) as i32;
        self.last = id;
        let mut z = ((d << 1) ^ (d >> 31)) as u32;
        let mut n = 0;
        loop {
            let more = z >= 0x80;
            if let Some(o) = out.get_mut(n) {
                *o = (z as u8 & 0x7F) | if more { 0x80 } else { 0 };
            }
            n += 1;
            z >>= 7;
            if !more {
                return n;
            }
        }
    }
}

/// The ids of `set` packed as a [`MEM_ACCESS_PACKED`] record lists them,
/// into `out` where it has room (nothing for an empty `out`: a count);
/// returns the bytes they take.
#[inline(never)]
pub(super) fn pack_ids(set: &[Active], out: &mut [u8]) -> usize {
    let mut coder = IdCoder::new(true);
    let mut tmp = [0u8; PACKED_ID_MAX];
    let mut at = 0;
    for a in set {
        let n = coder.put(a.id, &mut tmp);
        if let Some(o) = out.get_mut(at..at + n) {
            o.copy_from_slice(&tmp[..n]);
        }
        at += n;
    }
    at
}

/// Most bytes a packed id takes.
pub(crate) const PACKED_ID_MAX: usize = 5;

/// Most merges one compaction does (the rest wait for the next).
pub(super) const MAX_MERGES: usize = 8;

/// A label's change in references since the index was written, as kept in
/// the scratch area ([`DELTA_BYTES`] each).
#[derive(Clone, Copy)]
pub(super) struct LabelDelta {
    pub(super) hash: u32,
    pub(super) change: i16,
    /// A put that carries the label.
    pub(super) addr: u32,
    /// Whether the index's catalog has the label.
    pub(super) used: bool,
}

impl LabelDelta {
    // As words: hash, addr, then change (low half) and used (bit 16),
    // which is the byte layout [`DELTA_BYTES`] describes.
    pub(super) fn load(b: &[u8], k: usize) -> LabelDelta {
        let flags = word(b, 3 * k + 2);
        LabelDelta {
            hash: word(b, 3 * k),
            addr: word(b, 3 * k + 1),
            change: flags as u16 as i16,
            used: flags >> 16 != 0,
        }
    }

    pub(super) fn store(&self, b: &mut [u8], k: usize) {
        set_word(b, 3 * k, self.hash);
        set_word(b, 3 * k + 1, self.addr);
        set_word(
            b,
            3 * k + 2,
            u32::from(self.change as u16) | u32::from(self.used) << 16,
        );
    }

    /// Delta `k`'s change, the delta marked as in the index's catalog.
    pub(super) fn take_used(b: &mut [u8], k: usize) -> i16 {
        let flags = word(b, 3 * k + 2);
        set_word(b, 3 * k + 2, flags | 1 << 16);
        flags as u16 as i16
    }

    /// Adds `by` to delta `k`'s change.
    pub(super) fn add(b: &mut [u8], k: usize, by: i16) {
        let flags = word(b, 3 * k + 2);
        let change = (flags as u16 as i16) + by;
        set_word(
            b,
            3 * k + 2,
            (flags & 0xFFFF_0000) | u32::from(change as u16),
        );
    }

    /// The one of the first `n` deltas in `b` for label hash `h`.
    #[inline(always)]
    pub(super) fn find(b: &[u8], n: usize, h: u32) -> Option<usize> {
        find_word(b, n, 3, h)
    }
}

/// Adds one reference to `label` in the catalog encoded in `buf[..len]`;
/// the new length, or `None` if it does not fit (in [`CATALOG_MAX`] or in
/// `buf`).
#[inline(never)]
pub(super) fn catalog_add(buf: &mut [u8], len: usize, label: &str) -> Option<usize> {
    let l = label.as_bytes();
    let mut p = 0;
    while p < len {
        // An entry: its length byte, the label, then its references.
        let at = p + 1 + usize::from(*buf.get(p)?);
        let (entry, rest) = buf.get_mut(p + 1..at + 2)?.split_at_mut(at - p - 1);
        if entry == l {
            let refs = u16::from_le_bytes([rest[0], rest[1]]).saturating_add(1);
            rest.copy_from_slice(&refs.to_le_bytes());
            return Some(len);
        }
        p = at + 2;
    }
    let end = len + 3 + l.len();
    if end > CATALOG_MAX || l.len() > u8::MAX as usize {
        return None;
    }
    let (n, rest) = buf.get_mut(len..end)?.split_first_mut()?;
    *n = l.len() as u8;
    let (text, refs) = rest.split_at_mut(l.len());
    text.copy_from_slice(l);
    refs.copy_from_slice(&1u16.to_le_bytes());
    Some(end)
}

/// The kind of a put with lineage `origin`: a plain put without one.
pub(super) fn put_kind(origin: Lineage) -> u8 {
    if origin == (0, 0) {
        MEM_PUT_PLAIN
    } else {
        MEM_PUT
    }
}

/// The payload length of a put of `item` with lineage `origin`.
pub(super) fn put_len(item: &Item, origin: Lineage) -> Result<u32, Fail> {
    let n = item.encoded_len();
    if n > ITEM_ENCODED_MAX_BYTES {
        return Err(fail!(LogicBug, "item larger than its encoding"));
    }
    let fixed = put_fixed(put_kind(origin)).unwrap_or(PUT_FIXED);
    Ok(fixed + n as u32)
}

/// Encodes a put of `item` (after `prev` and its lineage `origin`, if
/// any) into `enc`; returns its length and kind. The caller has made room
/// for [`put_len`] bytes, which checked the item's length.
pub(super) fn put_encode(
    enc: &mut [u8],
    prev: u32,
    origin: Lineage,
    item: &Item,
) -> Result<(u32, u8), Fail> {
    let kind = put_kind(origin);
    let fixed = put_fixed(kind).unwrap_or(PUT_FIXED) as usize;
    set_word(enc, 0, prev);
    if kind == MEM_PUT {
        set_word(enc, 1, origin.0);
        set_word(enc, 2, origin.1);
    }
    let out = enc
        .get_mut(fixed..)
        .ok_or(fail!(LogicBug, "put buffer too small"))?;
    // [`put_len`] checked the item's length, and `enc` holds the largest
    // put: the whole encoding fits (no second count of it).
    let n = item.encode_fitting(out);
    Ok((fixed as u32 + n as u32, kind))
}

/// An item's lineage: the id it replaced and the first id of its lineage
/// (0: none).
pub(super) type Lineage = (u32, u32);

/// Sorts an active set by `before` (a total order, so the result is the
/// one any sort gives): one insertion sort for every order, compiled once
/// (code size); the set holds at most [`ACTIVE_CAP`] entries.
#[inline(never)]
pub(super) fn sort_active(set: &mut [Active], before: &dyn Fn(&Active, &Active) -> bool) {
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
pub(super) fn position_of(set: &[Active], id: u32) -> Option<usize> {
    set.iter().position(|x| x.id == id)
}

/// Recall order: [`ItemRank::recall_cmp`].
pub(super) fn by_recall(a: &Active, b: &Active) -> bool {
    a.rank().recall_cmp(&b.rank()) == core::cmp::Ordering::Less
}

/// Id order.
pub(super) fn by_id(a: &Active, b: &Active) -> bool {
    a.id < b.id
}

impl Active {
    /// The entry of `item`, put at `addr`.
    pub(super) fn of(item: &Item, addr: u32) -> Active {
        Active {
            id: item.id().get(),
            addr,
            updated_at: item.updated_at(),
            access: item.access_count(),
            bloom: item_bloom(item),
        }
    }

    /// Whether this entry goes before `other` in eviction order
    /// ([`ItemRank::eviction_cmp`]), compiled once.
    #[inline(never)]
    pub(super) fn evicted_before(&self, other: &Active) -> bool {
        self.rank().eviction_cmp(&other.rank()).is_lt()
    }

    pub(super) fn rank(&self) -> ItemRank {
        ItemRank {
            id: ItemId::new(self.id),
            access_count: self.access,
            updated_at: self.updated_at,
        }
    }
}

pub(super) fn label_bloom(label: &str) -> u16 {
    let h = fnv1a32(label.as_bytes());
    (1u16 << (h & 15)) | (1u16 << ((h >> 4) & 15))
}

pub(super) fn item_bloom(item: &Item) -> u16 {
    item.labels().iter().fold(0, |b, l| b | label_bloom(l))
}

/// An index's payload before its entries ([`INDEX_FIXED`] bytes), as
/// words: no prev, then these.
pub(super) fn index_fixed(
    next_id: u32,
    count: u32,
    oldest: u32,
    catalog: u32,
) -> [u32; INDEX_FIXED as usize / 4] {
    [NO_ADDR, next_id, count, oldest, catalog]
}

pub(super) struct IndexPayload<'a> {
    /// The words before the entries ([`index_fixed`]).
    pub(super) fixed: [u32; INDEX_FIXED as usize / 4],
    pub(super) entries: &'a [Active],
    /// The label catalog: `u8 length`, label, `u16 refs`, repeated.
    pub(super) catalog: &'a [u8],
}

impl<F: NorFlash> Payload<F> for IndexPayload<'_> {
    fn len(&self) -> u32 {
        INDEX_FIXED + INDEX_ENTRY * self.entries.len() as u32 + self.catalog.len() as u32
    }
    fn fill(&mut self, _io: &mut Io<'_, F>, offset: u32, out: &mut [u8]) -> Result<(), Fail> {
        let catalog_at = INDEX_FIXED as usize + INDEX_ENTRY as usize * self.entries.len();
        for (i, b) in out.iter_mut().enumerate() {
            let p = offset as usize + i;
            *b = if p >= catalog_at {
                *self
                    .catalog
                    .get(p - catalog_at)
                    .ok_or(fail!(LogicBug, "index payload overrun"))?
            } else {
                // The fixed words, then each entry's, little-endian: id,
                // addr, updated_at, then access and bloom.
                let w = match p.checked_sub(INDEX_FIXED as usize) {
                    None => self.fixed[p / 4],
                    Some(q) => {
                        let e = self
                            .entries
                            .get(q / INDEX_ENTRY as usize)
                            .ok_or(fail!(LogicBug, "index payload overrun"))?;
                        match q % INDEX_ENTRY as usize / 4 {
                            0 => e.id,
                            1 => e.addr,
                            2 => e.updated_at,
                            _ => u32::from(e.access) | u32::from(e.bloom) << 16,
                        }
                    }
                };
                (w >> (8 * (p % 4))) as u8
            };
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    extern crate std;
    use super::{catalog_add, IdCoder, LabelDelta, CATALOG_MAX, PACKED_ID_MAX};

    #[test]
    fn catalog_add_counts_labels_in_their_order_until_full() {
        let mut b = [0u8; CATALOG_MAX + 8];
        let mut len = 0;
        for l in ["tea", "city", "tea", "tea"] {
            len = catalog_add(&mut b, len, l).unwrap();
        }
        assert_eq!(&b[..len], b"\x03tea\x03\x00\x04city\x01\x00");
        // Full: a new label that does not fit is refused, and the catalog
        // is left as it was; a label it has still counts.
        let mut full = [0u8; CATALOG_MAX + 8];
        let mut n = 0;
        for k in 0..CATALOG_MAX / 8 {
            let l = [
                b'a' + (k % 26) as u8,
                b'a' + (k / 26) as u8,
                b'x',
                b'y',
                b'z',
            ];
            n = catalog_add(&mut full, n, core::str::from_utf8(&l).unwrap()).unwrap();
        }
        assert_eq!(n, CATALOG_MAX);
        let before = full;
        assert_eq!(catalog_add(&mut full, n, "new"), None);
        assert_eq!(full, before);
        assert_eq!(catalog_add(&mut full, n, "aaxyz"), Some(n));
        assert_eq!(&full[6..8], &[2, 0]);
        // A buffer shorter than the catalog's bound: refused, not a panic.
        assert_eq!(catalog_add(&mut [0u8; 4], 0, "tea"), None);
        assert_eq!(catalog_add(&mut [0u8; 256 + 3], 0, &"x".repeat(256)), None);
    }

    #[test]
    fn label_delta_words_keep_their_fields() {
        let mut b = [0u8; 36];
        for (k, (change, used)) in [(-3i16, false), (5, true), (0, false)]
            .into_iter()
            .enumerate()
        {
            let x = LabelDelta {
                hash: 0x1234_5678 + k as u32,
                change,
                addr: 0xABCD_0000 + k as u32,
                used,
            };
            x.store(&mut b, k);
        }
        LabelDelta::add(&mut b, 0, 2);
        LabelDelta::add(&mut b, 1, -7);
        assert_eq!(LabelDelta::take_used(&mut b, 0), -1);
        assert_eq!(LabelDelta::take_used(&mut b, 1), -2);
        for (k, (change, used)) in [(-1i16, true), (-2, true), (0, false)]
            .into_iter()
            .enumerate()
        {
            let x = LabelDelta::load(&b, k);
            assert_eq!(
                (x.hash, x.addr),
                (0x1234_5678 + k as u32, 0xABCD_0000 + k as u32)
            );
            assert_eq!((x.change, x.used), (change, used));
        }
        assert_eq!(LabelDelta::find(&b, 3, 0x1234_567A), Some(2));
    }

    fn pack(ids: &[u32]) -> std::vec::Vec<u8> {
        let mut c = IdCoder::new(true);
        let mut out = std::vec::Vec::new();
        for &id in ids {
            let mut b = [0u8; PACKED_ID_MAX];
            let n = c.put(id, &mut b);
            out.extend_from_slice(&b[..n]);
        }
        out
    }

    fn unpack(packed: bool, bytes: &[u8]) -> Result<std::vec::Vec<u32>, ()> {
        let mut c = IdCoder::new(packed);
        let mut out = std::vec::Vec::new();
        for &b in bytes {
            if let Some(id) = c.feed(b)? {
                out.push(id);
            }
        }
        Ok(out)
    }

    #[test]
    fn packed_ids_round_trip_in_their_order() {
        let cases: [&[u32]; 6] = [
            &[],
            &[1],
            &[17, 12, 13, 90, 3],
            &[0, u32::MAX, 0, 0x8000_0000, 0x7FFF_FFFF],
            &[70_000, 5, 1 << 20, (1 << 20) + 1],
            &[128, 127, 255, 256, 16_383, 16_384],
        ];
        for ids in cases {
            assert_eq!(unpack(true, &pack(ids)).unwrap(), ids);
        }
        // A pseudo-random sweep.
        let mut x = 0x2545_F491u32;
        for _ in 0..2000 {
            let ids: std::vec::Vec<u32> = (0..(x % 9))
                .map(|_| {
                    x ^= x << 13;
                    x ^= x >> 17;
                    x ^= x << 5;
                    if x & 1 == 0 {
                        x % 300
                    } else {
                        x
                    }
                })
                .collect();
            assert_eq!(unpack(true, &pack(&ids)).unwrap(), ids);
        }
    }

    #[test]
    fn close_ids_take_a_byte_and_none_more_than_five() {
        // A recall's ids, a few apart: a byte each after the first.
        assert_eq!(pack(&[100, 103, 98, 140]).len(), 2 + 1 + 1 + 1);
        assert_eq!(pack(&[u32::MAX / 2 + 3]).len(), PACKED_ID_MAX);
        assert_eq!(pack(&[0, 0x8000_0000]).len(), 1 + PACKED_ID_MAX);
    }

    #[test]
    fn an_id_longer_than_five_bytes_is_refused() {
        assert!(unpack(true, &[0x80, 0x80, 0x80, 0x80, 0x10]).is_err());
        assert!(unpack(true, &[0x80, 0x80, 0x80, 0x80, 0x80, 0x00]).is_err());
        assert_eq!(
            unpack(true, &[0xFE, 0xFF, 0xFF, 0xFF, 0x0F]).unwrap(),
            [0x7FFF_FFFF]
        );
        assert_eq!(
            unpack(true, &[0xFF, 0xFF, 0xFF, 0xFF, 0x0F]).unwrap(),
            [0x8000_0000]
        );
    }

    #[test]
    fn unpacked_ids_are_words() {
        let bytes = [1, 0, 0, 0, 0xFF, 0xFF, 0xFF, 0xFF, 7];
        // A trailing part of a word is no id.
        assert_eq!(unpack(false, &bytes).unwrap(), [1, u32::MAX]);
    }
}
