//! Scrubbing: removing every copy of a forgotten item from flash, by moving
//! what else lives in the sectors that hold one and erasing them (any
//! flash), or by zeroing the copies in place (flash that allows a second
//! write).
//!
//! Power loss: the tombstone and a compaction commit first; each step after
//! is safe to cut, and calling again with the same id finishes.

use super::*;

impl<F: NorFlash, const MAX_SESSIONS: usize, W: BorrowMut<Work>> Store<F, MAX_SESSIONS, W> {
    /// Every put of item `id` anywhere on flash (current, relocated and
    /// released-but-not-erased copies): calls `f(addr, len)` with each
    /// chunk's address and payload length.
    #[inline(never)]
    pub(super) fn mem_find_copies(
        &mut self,
        id: u32,
        mut f: impl FnMut(u32, u32),
    ) -> Result<(), Fail> {
        let geo = self.log.geo();
        // Every sector, whatever its header says: a sector whose erase was
        // cut (its header gone, its chunks still there) holds copies too.
        for sector in 0..geo.count {
            let mut pos = geo.first_chunk(sector);
            for _ in 0..geo.sector {
                let c = match self.log.slot_at(sector, pos)? {
                    crate::log::Slot::Chunk(c) => c,
                    _ => break,
                };
                let fixed = put_fixed(c.header.kind);
                if let (Some(fixed), true) = (fixed, c.header.is_first()) {
                    // The item's id follows the version and flags bytes.
                    let mut b = [0u8; PUT_FIXED as usize + 6];
                    let want = fixed as usize + 6;
                    // A put that goes on in the next sector may hold fewer
                    // bytes than that in this chunk: the stream reads on.
                    let n = if c.header.is_last() {
                        (c.header.len as usize).min(want)
                    } else {
                        want
                    };
                    self.log
                        .io()
                        .read_stream(pos + CHUNK_HEADER_LEN, b.split_at_mut(n).0)?;
                    if n == want && u32_at(&b, fixed as usize + 2) == id {
                        f(pos, c.header.len);
                        // A put that spans sectors goes on in the first
                        // chunk of each next one, with the same sequence.
                        let mut h = c.header;
                        let mut at = sector;
                        for _ in 0..geo.count {
                            if h.is_last() {
                                break;
                            }
                            at = self.log.successor(at);
                            let next = geo.first_chunk(at);
                            match self.log.io().chunk_header(next)? {
                                Some(n) if n.seq == h.seq && n.kind == h.kind && !n.is_first() => {
                                    f(next, n.len);
                                    h = n;
                                }
                                _ => break,
                            }
                        }
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
        let r = self.mem_scrub(id);
        self.surface(r)
    }

    /// [`memory_forget_scrub`](Self::memory_forget_scrub), with the
    /// engine's small error and no item on the stack.
    #[inline(never)]
    fn mem_scrub(&mut self, id: ItemId) -> Result<(), Fail> {
        if self.mem_is_active(id.get())? {
            self.mem_forget_record(id.get(), Priority::Maintenance)?;
        }
        self.mem_compact_with(None, Priority::Maintenance)?;
        // One sector holding a copy at a time, found afresh each time (a
        // wipe moves what lives there and erases it; the item, forgotten,
        // is not moved): bounded by the sectors, with nothing collected on
        // the stack.
        for _ in 0..self.log.geo().count + 1 {
            // The last chunk reported: a put spanning sectors has its later
            // chunks wiped before its first, which is what finds them.
            let mut last = None;
            let sector = self.log.geo().sector;
            self.mem_find_copies(id.get(), |a, _| last = Some(a / sector))?;
            match last {
                Some(s) => self.wipe_sector_contents(s)?,
                None => return Ok(()),
            }
        }
        Err(fail!(LogicBug, "scrub passes did not end"))
    }

    /// Moves everything live out of `sector` and erases it.
    pub(super) fn wipe_sector_contents(&mut self, sector: u32) -> Result<(), Fail> {
        if self.log.seq_of_sector(sector).is_none() {
            // Free (released, not yet erased): nothing lives there.
            return self.log.erase_free_sector(sector);
        }
        if sector == self.log.head() {
            // Seal the head so that writing moves on to a new sector.
            self.log.seal_head()?;
            self.ensure_room(1, Priority::Maintenance)?;
            self.log.open_next_sector()?;
        }
        // Move what has a byte in it; what lives elsewhere stays there and
        // is referenced (a session's other bodies, other sessions).
        self.ensure_room(self.log.geo().sector * 2, Priority::Maintenance)?;
        // Making room may have released the sector (it was the tail), and
        // the copies it wrote may have opened it again, which erased it.
        let seq = match self.log.seq_of_sector(sector) {
            None => return self.log.erase_free_sector(sector),
            Some(_) if sector == self.log.head() => return Ok(()),
            Some(seq) => seq,
        };
        self.in_gc = true;
        let moved = self.relocate(seq, Some(sector));
        self.in_gc = false;
        if !moved? {
            let needed = self.log.geo().sector;
            return Err(self.log.parked().full(needed, 0));
        }
        // A full checkpoint (a delta's full one may be in this sector), out
        // of the room the relocation left it: the same as collection's.
        self.write_full_checkpoint(Priority::Gc)?;
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
        let r = self.memory_forget_scrub_in_place_inner(id);
        self.surface(r)
    }

    /// [`memory_forget_scrub_in_place`](Self::memory_forget_scrub_in_place) with the engine's error.
    pub(crate) fn memory_forget_scrub_in_place_inner(&mut self, id: ItemId) -> Result<(), Fail> {
        if self.mem_is_active(id.get())? {
            self.mem_forget_record(id.get(), Priority::Maintenance)?;
        }
        self.mem_compact_with(None, Priority::Maintenance)?;
        let mut copies: Vec<(u32, u32), 64> = Vec::new();
        self.mem_find_copies(id.get(), |a, l| {
            let _ = copies.push((a, l));
        })?;
        for (addr, len) in copies {
            // Zero every payload byte; bytes of the chunk header and of the
            // next chunk that share a word are left as they are.
            let start = addr + CHUNK_HEADER_LEN;
            self.log.zero_in_place(start, start + len)?;
        }
        Ok(())
    }
}
