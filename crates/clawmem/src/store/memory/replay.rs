//! What mount does with a long-term memory record it meets after the
//! checkpoint (`store/replay.rs` hands each memory batch here): the memory
//! chain's ends and counters in RAM ([`MemState`]) follow the records as the
//! writes that made them did, and damage at rest is repaired where the rest
//! of the chain makes it certain. The chain goes on past a record that
//! rotted ([`mem_lost_link`](Store::mem_lost_link)), and a memory index the
//! scan left out is found again through the record that links to it
//! ([`mem_lost_index`](Store::mem_lost_index)).
//!
//! Only the records' fixed parts are read, never an item. Power loss:
//! nothing here writes; mount records a repair afterwards (`mount.rs`).

use core::borrow::BorrowMut;

use embedded_storage::nor_flash::NorFlash;

use super::{
    put_fixed, CATALOG_MAX, INDEX_ENTRY, INDEX_FIXED, MEM_ACCESS, MEM_ACCESS_PACKED, MEM_FORGET,
    MEM_INDEX, MEM_PUT, MEM_PUT_PLAIN, UNCHAINED,
};
use crate::layout::{u32_at, ChunkHeader, CHUNK_HEADER_LEN, NO_ADDR};
use crate::store::replay::Skip;
use crate::store::{Store, Work};

impl<F: NorFlash, const MAX_SESSIONS: usize, W: BorrowMut<Work>> Store<F, MAX_SESSIONS, W> {
    /// Applies the committed memory batch at `addr` (in the sector of
    /// sequence `sector_seq`) to the memory chain in RAM.
    pub(in crate::store) fn mem_apply(
        &mut self,
        addr: u32,
        h: &ChunkHeader,
        sector_seq: u32,
    ) -> Result<(), Skip> {
        match h.kind {
            MEM_PUT | MEM_PUT_PLAIN | MEM_FORGET | MEM_ACCESS | MEM_ACCESS_PACKED => {
                let mut b = [0u8; 20];
                // A batch split over sectors continues in the next one, so
                // its first chunk may hold fewer than 20 bytes of the
                // payload; the batch is committed (its last chunk is on
                // flash), so the stream is read on into the next sector.
                // Forgets (8 bytes) and short access records read only
                // their own length.
                let fixed = put_fixed(h.kind);
                let n = match fixed {
                    Some(f) => f as usize + 6,
                    None => (h.len as usize).min(8),
                };
                self.log
                    .io()
                    .read_stream(addr + CHUNK_HEADER_LEN, b.split_at_mut(n).0)?;
                let prev = u32_at(&b, 0);
                if let Some(f) = fixed {
                    // The item's id follows prev (and the lineage words of
                    // a put that has them) and the encoding's version and
                    // flags bytes.
                    let id = u32_at(&b, f as usize + 2);
                    self.mem.next_id = self.mem.next_id.max(id.wrapping_add(1));
                    if prev == UNCHAINED {
                        // A merge or relocation copy: the index after it,
                        // if it landed, points at it.
                        return Ok(());
                    }
                }
                if prev != self.mem.head {
                    if self.mem_lost_link(prev, addr)? {
                        // The chain goes on through a record damaged at
                        // rest: that record is lost (readers skip it), the
                        // chain kept.
                        self.mem.chain = self.mem.chain.saturating_add(1);
                    } else if prev == self.scan_damaged && self.mem_lost_index(prev, addr)? {
                        // A sound record whose link names the chunk the
                        // scan left out for damage since the last memory
                        // record: that chunk was an index (any other
                        // memory record there is handled by
                        // `mem_lost_link`). Its entries are confirmed one
                        // by one by the puts they name when read
                        // (`mem_active`), so a wrong guess loses
                        // items and never returns one. Its stated oldest
                        // sector is not trusted: the tail is assumed, so
                        // that memory gets a sound index before the tail
                        // is released.
                        let mut f = [0u8; 16];
                        self.log
                            .io()
                            .read_stream(self.scan_damaged + CHUNK_HEADER_LEN, &mut f)?;
                        self.mem_rooted_at(self.scan_damaged, self.log.tail_seq(), u32_at(&f, 4));
                        self.mount_report.salvaged_memory_index = true;
                    } else {
                        // A memory record does not follow the memory chain.
                        return Err(Skip);
                    }
                    // Either way, one record was met damaged.
                    self.mem_damaged = self.mem_damaged.saturating_add(1);
                }
                self.scan_damaged = NO_ADDR;
                self.mem.head = addr;
                self.mem.chain = self.mem.chain.saturating_add(1);
                if !matches!(h.kind, MEM_ACCESS | MEM_ACCESS_PACKED) {
                    self.mem.changes = self.mem.changes.saturating_add(1);
                }
                self.mem.bytes = self.mem.bytes.saturating_add(h.len);
                self.mem.oldest = self.mem.oldest.min(sector_seq);
            }
            MEM_INDEX => {
                let mut b = [0u8; 20];
                self.log.io().read_stream(addr + CHUNK_HEADER_LEN, &mut b)?;
                // An index replaces the whole memory state: it must look
                // like one before it is applied (its link is "none" and its
                // length is what its count and catalog say), so that a
                // flipped kind byte cannot make another record one. A
                // damaged index left out here is found again through the
                // record that links to it.
                let total = crate::cursor::batch_len(&mut self.log.io(), addr, h)?;
                let catalog = match u32_at(&b, 16) {
                    NO_ADDR => 0,
                    n => n,
                };
                let expected = u64::from(INDEX_FIXED)
                    + u64::from(INDEX_ENTRY) * u64::from(u32_at(&b, 8))
                    + u64::from(catalog);
                if u32_at(&b, 0) != NO_ADDR
                    || catalog as usize > CATALOG_MAX
                    || expected != u64::from(total)
                {
                    // A memory index that does not hold together.
                    return Err(Skip);
                }
                self.scan_damaged = NO_ADDR;
                self.mount_report.salvaged_memory_index = false;
                self.mem_rooted_at(addr, u32_at(&b, 12).min(sector_seq), u32_at(&b, 4));
            }
            _ => {}
        }
        Ok(())
    }

    /// Whether the chunk at `prev`, which the scan left out for damage,
    /// can be the memory index the sound record at `addr` links to: the
    /// record checks out, and the chunk either names itself an index or
    /// links to nothing, as an index does (one of the two is intact when one
    /// of them rotted; a chain record with a flipped kind byte links to the
    /// head, and `mem_lost_link` takes it first).
    #[inline(never)]
    fn mem_lost_index(&mut self, prev: u32, addr: u32) -> Result<bool, Skip> {
        if prev >= self.log.geo().capacity() || self.log.verify(addr)?.is_none() {
            return Ok(false);
        }
        let mut link = [0u8; 4];
        self.log
            .io()
            .read_stream(prev + CHUNK_HEADER_LEN, &mut link)?;
        let named = self
            .log
            .io()
            .chunk_header(prev)?
            .is_some_and(|h| h.kind == MEM_INDEX && h.is_first());
        Ok(named || u32::from_le_bytes(link) == NO_ADDR)
    }

    /// At mount: whether the memory record at `addr`, whose link is `prev`
    /// and not the chain's head, follows a chain record damaged at rest: a
    /// record at `prev`, between the head and `addr` in log order, that
    /// does not check out but whose own link is the head. (A memory index
    /// links to nothing, so a damaged index never passes; the chain then
    /// stops there as before.)
    #[inline(never)]
    fn mem_lost_link(&mut self, prev: u32, addr: u32) -> Result<bool, Skip> {
        let head = self.mem.head;
        if prev == NO_ADDR {
            return Ok(false);
        }
        // With no memory at all before it (no index, no record), the lost
        // record was the first one (its link is "none"); were it an index,
        // it could only have summarized nothing.
        let empty = head == NO_ADDR && self.mem.root == NO_ADDR;
        if head == NO_ADDR && !empty {
            return Ok(false);
        }
        let geo = self.log.geo();
        let order = |log: &crate::log::Log<F>, a: u32| {
            if a >= geo.capacity() {
                return None;
            }
            log.seq_of_sector(geo.sector_of(a))
                .map(|seq| (seq, a % geo.sector))
        };
        let (Some(p), Some(y)) = (order(&self.log, prev), order(&self.log, addr)) else {
            return Ok(false);
        };
        let after_head = empty || order(&self.log, head).is_some_and(|h| h < p);
        if !(after_head && p < y) {
            return Ok(false);
        }
        // Only a sound record may carry the chain past a damaged one (a
        // session batch whose kind byte flipped must not pass for one).
        if self.log.verify(addr)?.is_none() {
            return Ok(false);
        }
        if self.log.verify(prev)?.is_some() {
            // A sound record: `addr` is not the one out of place.
            return Ok(false);
        }
        let mut link = [0u8; 4];
        self.log
            .io()
            .read_stream(prev + CHUNK_HEADER_LEN, &mut link)?;
        if u32::from_le_bytes(link) == head {
            return Ok(true);
        }
        // The record's header names a chain record but its payload (its
        // link, say) fails the CRC: it was the head when `addr` was
        // written, so the record before it is the head now. Remember that
        // link (the one on flash is not to be trusted) until the next index.
        let chain_header = self
            .log
            .io()
            .chunk_header(prev)?
            .is_some_and(|h| h.is_first() && super::ops::is_chain_kind(h.kind));
        if chain_header && self.mem_links.push((prev, head)).is_ok() {
            return Ok(true);
        }
        Ok(false)
    }
}
