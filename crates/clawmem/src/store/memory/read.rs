//! Reading long-term memory: a record checked whole, an item decoded into
//! the work area, the chain walked from its head, and the active set built
//! from the index and the chain (damage at rest confined to the record it
//! hit, see `docs/DESIGN.md`).
//!
//! Invariants: every record is CRC-checked before any of it is used; a
//! read fills the work area's slot or active set it names and nothing else.
//!
//! Power loss: nothing here writes.

use super::*;
use super::{MEM_ACCESS_PACKED, MEM_FORGET, MEM_INDEX, MEM_PUT, MEM_PUT_PLAIN};

impl<F: NorFlash, const MAX_SESSIONS: usize, W: BorrowMut<Work>> Store<F, MAX_SESSIONS, W> {
    /// Checks the memory record at `addr` (its kind, and the CRC of the
    /// whole batch); returns its payload length.
    #[inline(always)]
    pub(super) fn mem_check(&mut self, addr: u32, want: u8) -> Result<usize, Fail> {
        Ok(self.mem_check_kind(addr, want)?.0)
    }

    /// [`mem_check`](Self::mem_check), also returning the record's kind:
    /// [`MEM_PUT`] wanted accepts either kind of put.
    pub(super) fn mem_check_kind(&mut self, addr: u32, want: u8) -> Result<(usize, u8), Fail> {
        let h = self.log.io().chunk_header(addr)?;
        let bad = self
            .log
            .parked()
            .at(fail!(Corrupted, "a memory record is damaged"), addr);
        let Some(h) = h else { return Err(bad) };
        let kind_ok = h.kind == want || (want == MEM_PUT && h.kind == MEM_PUT_PLAIN);
        if !kind_ok || !h.is_first() {
            return Err(bad);
        }
        Ok((self.log.verify(addr)?.ok_or(bad)? as usize, h.kind))
    }

    /// Reads a memory record's payload (CRC checked) into `buf`; returns its
    /// length.
    pub(super) fn mem_record(
        &mut self,
        addr: u32,
        want: u8,
        buf: &mut [u8],
    ) -> Result<usize, Fail> {
        let len = self.mem_check(addr, want)?;
        let n = len.min(buf.len());
        self.mem_payload(addr, 0, buf.split_at_mut(n).0)?;
        Ok(len)
    }

    /// Reads `buf.len()` bytes from offset `offset` of the payload of the
    /// record at `addr` (a stream that may go on in the next sector): the
    /// one read of a memory record's bytes, compiled once.
    #[inline(never)]
    pub(super) fn mem_payload(
        &mut self,
        addr: u32,
        offset: u32,
        buf: &mut [u8],
    ) -> Result<(), Fail> {
        self.log
            .io()
            .read_stream_after(addr + CHUNK_HEADER_LEN, offset, buf)
    }

    /// Reads the item put at `addr` into the work area's item slot `slot`,
    /// and returns its lineage: the id it replaced and the first id of its
    /// lineage (0: none). The put is read into the work area, not onto the
    /// stack.
    #[inline(never)]
    pub(super) fn mem_read(&mut self, addr: u32, slot: usize) -> Result<Lineage, Fail> {
        // Either kind of put: a plain one has no lineage words.
        let (len, kind) = self.mem_check_kind(addr, MEM_PUT)?;
        let fixed = put_fixed(kind).unwrap_or(PUT_FIXED) as usize;
        let w: &mut Work = self.work.borrow_mut();
        let n = len.min(w.enc.len());
        self.log
            .io()
            .read_stream(addr + CHUNK_HEADER_LEN, w.enc.split_at_mut(n).0)?;
        let item = &mut w.items[slot];
        let decoded = w.enc.get(fixed..len).map(|body| item.decode_from(body));
        if !matches!(decoded, Some(Ok(()))) {
            return Err(self
                .log
                .parked()
                .at(fail!(Corrupted, "a memory item does not decode"), addr));
        }
        if kind == MEM_PUT_PLAIN {
            return Ok((0, 0));
        }
        Ok((word(&w.enc, 1), word(&w.enc, 2)))
    }

    /// The item in the work area's slot `slot`.
    pub(super) fn slot(&self, slot: usize) -> &Item {
        &self.work.borrow().items[slot]
    }

    /// The memory chain after the root, newest first (as it is walked), into
    /// the work area's chain list (emptied first).
    // Out of line: its buffers stay off every caller's stack frame.
    #[inline(never)]
    pub(super) fn mem_chain(&mut self) -> Result<(), Fail> {
        self.work.borrow_mut().chain.clear();
        let mut at = self.mem.head;
        // Bounded: each step either records a link or crosses a damaged
        // one, and the chain holds at most `MEM_CHAIN_MAX` records.
        for _ in 0..2 * (MEM_CHAIN_MAX + 1) {
            if at == self.mem.root || at == NO_ADDR {
                break;
            }
            let sound = self.mem_chain_kind(at)?;
            let prev = match self.mem_links.iter().find(|l| l.0 == at) {
                // A link the mount repaired: the one on flash rotted.
                Some(&(_, before)) => Some(before),
                None => self.mem_prev_of(at)?,
            };
            match sound {
                Some(kind) => {
                    if !self.work.borrow_mut().chain.push(at, kind) {
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
        Ok(())
    }

    /// How many entries to read of a memory index that fails its checksum
    /// (damage at rest), whose entries [`Self::mem_active`] then keeps only
    /// where they check out: each entry names an item and the put that
    /// holds it, so an entry is kept when that put checks out and holds
    /// that id. The item's time and access count are the put's: the
    /// recalls the index had counted since are lost, and nothing is taken
    /// from the damaged bytes but the id and the address, which the put
    /// confirms. Entries are read up to the count the index states or its
    /// length allows, whichever is more (a damaged count), and at most
    /// `ACTIVE_CAP`; none if its fixed part cannot be read.
    #[inline(never)]
    fn mem_salvage_count(&mut self, root: u32) -> Result<usize, Fail> {
        let mut fixed = [0u8; INDEX_FIXED as usize];
        let r = self.mem_payload(root, 0, &mut fixed);
        if self.mem_tolerate(r)?.is_none() {
            return Ok(0);
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
        Ok((word(&fixed, 2) as usize).max(by_len).min(ACTIVE_CAP))
    }

    /// The link (the previous record's address) at the start of the
    /// memory record at `at`, `None` if it cannot be read.
    pub(super) fn mem_prev_of(&mut self, at: u32) -> Result<Option<u32>, Fail> {
        let mut prev = [0u8; 4];
        let r = self.log.io().read_stream(at + CHUNK_HEADER_LEN, &mut prev);
        Ok(self.mem_tolerate(r)?.map(|()| u32::from_le_bytes(prev)))
    }

    /// The kind of the memory chain record whose first chunk's header is
    /// sound at `at` (the header only: its CRC is not checked), `None` if
    /// there is none.
    #[inline(always)]
    fn mem_chain_kind(&mut self, at: u32) -> Result<Option<u8>, Fail> {
        Ok(match self.mem_chain_kind_word(at)? {
            0 => None,
            k => Some(k as u8),
        })
    }

    /// [`Self::mem_chain_kind`] as a word (0: none; no chain kind is 0).
    #[inline(never)]
    fn mem_chain_kind_word(&mut self, at: u32) -> Result<u32, Fail> {
        let h = self.log.io().chunk_header(at);
        Ok(match self.mem_tolerate(h)? {
            Some(Some(h)) if is_chain_kind(h.kind) && h.is_first() => u32::from(h.kind),
            _ => 0,
        })
    }

    /// Whether a sound memory chain record (header and CRC) starts at `at`.
    pub(super) fn mem_sound(&mut self, at: u32) -> Result<bool, Fail> {
        if self.mem_chain_kind(at)?.is_none() {
            return Ok(false);
        }
        let v = self.log.verify(at);
        Ok(matches!(self.mem_tolerate(v)?, Some(Some(_))))
    }

    /// The active items, into the work area's active set `lvl` ([`OP`] or
    /// [`GC`]): the index's entries with the chain applied.
    #[inline(never)]
    pub(crate) fn mem_active(&mut self, lvl: usize) -> Result<(), Fail> {
        self.work.borrow_mut().active[lvl].clear();
        let mut fixed = [0u8; INDEX_FIXED as usize];
        let root = self.mem.root;
        let index = if root == NO_ADDR {
            None
        } else {
            let r = self.mem_record(root, MEM_INDEX, &mut fixed);
            self.mem_tolerate(r)?
        };
        let (count, sound) = match index {
            Some(len) => {
                let count = word(&fixed, 2) as usize;
                let catalog = match word(&fixed, 4) {
                    NO_ADDR => 0,
                    n => n as usize,
                };
                if len != (INDEX_FIXED + INDEX_ENTRY * count as u32) as usize + catalog
                    || count > ACTIVE_CAP
                    || catalog > CATALOG_MAX
                {
                    return Err(self
                        .log
                        .parked()
                        .at(fail!(Corrupted, "the memory index has a bad length"), root));
                }
                (count, true)
            }
            None if root != NO_ADDR => (self.mem_salvage_count(root)?, false),
            None => (0, true),
        };
        // The index's entries: as they are from a sound index; from a
        // damaged one, each confirmed by its put ([`Self::mem_salvage_count`]).
        let capacity = self.log.geo().capacity();
        for k in 0..count {
            let mut e = [0u8; INDEX_ENTRY as usize];
            let r = self.mem_payload(root, INDEX_FIXED + INDEX_ENTRY * k as u32, &mut e);
            if sound {
                r?;
            } else if self.mem_tolerate(r)?.is_none() {
                break;
            }
            let last = word(&e, 3);
            let mut a = Active {
                id: word(&e, 0),
                addr: word(&e, 1),
                updated_at: word(&e, 2),
                access: last as u16,
                bloom: (last >> 16) as u16,
            };
            if !sound {
                if a.addr >= capacity
                    || position_of(&self.work.borrow().active[lvl], a.id).is_some()
                {
                    continue;
                }
                // A garbage entry past the real ones names no sound put:
                // that is not damage met, so it is not counted.
                match self.mem_read(a.addr, 0) {
                    Ok(_) => {}
                    Err(e) if e.kind() == Kind::Corrupted => continue,
                    Err(e) => return Err(e),
                }
                let item = self.slot(0);
                if item.id().get() != a.id {
                    continue;
                }
                a = Active::of(item, a.addr);
            }
            let _ = self.work.borrow_mut().active[lvl].push(a);
        }
        self.mem_chain()?;
        // Oldest first.
        for i in (0..self.work.borrow().chain.count()).rev() {
            let (addr, k) = self.work.borrow().chain.get(i);
            match k {
                MEM_PUT | MEM_PUT_PLAIN => {
                    let r = self.mem_read(addr, 0);
                    if self.mem_tolerate(r)?.is_none() {
                        continue;
                    }
                    let w: &mut Work = self.work.borrow_mut();
                    let a = Active::of(&w.items[0], addr);
                    let out = &mut w.active[lvl];
                    let full = match position_of(out, a.id) {
                        Some(x) => {
                            out[x] = a;
                            false
                        }
                        None => out.push(a).is_err(),
                    };
                    // Stores and updates keep the set below its bound; only
                    // damage seen by one mount and not another (a link
                    // repaired in RAM) can show more. The item compaction
                    // would evict first then goes now, so that every read
                    // still answers and the next store writes a sound index.
                    if full {
                        self.mem_over_lowest(lvl, &a);
                    }
                }
                MEM_FORGET => {
                    let mut b = [0u8; 8];
                    let r = self.mem_record(addr, MEM_FORGET, &mut b);
                    if self.mem_tolerate(r)?.is_none() {
                        continue;
                    }
                    let id = word(&b, 1);
                    let out = &mut self.work.borrow_mut().active[lvl];
                    if let Some(i) = position_of(out, id) {
                        out.remove(i);
                    }
                }
                _ => {
                    // Either kind of access record: checked whole, then
                    // read a few ids at a time.
                    let r = self.mem_check(addr, k);
                    let Some(len) = self.mem_tolerate(r)? else {
                        continue;
                    };
                    let packed = k == MEM_ACCESS_PACKED;
                    // A recall lists at most the whole active set.
                    let most = if packed { PACKED_ID_MAX } else { 4 };
                    let len = len.min(8 + most * ACTIVE_CAP) as u32;
                    let mut b = [0u8; 64];
                    let mut now = [0u8; 4];
                    if len < 8 {
                        continue;
                    }
                    self.mem_payload(addr, 4, &mut now)?;
                    let now = u32::from_le_bytes(now);
                    let mut coder = IdCoder::new(packed);
                    let mut pos = 8;
                    'record: while pos < len {
                        let n = (len - pos).min(b.len() as u32) as usize;
                        let part = b.split_at_mut(n).0;
                        self.mem_payload(addr, pos, part)?;
                        let out = &mut self.work.borrow_mut().active[lvl];
                        for &byte in &*part {
                            let id = match coder.feed(byte) {
                                Ok(Some(id)) => id,
                                Ok(None) => continue,
                                // Not what a writer packs: the rest is
                                // left out.
                                Err(()) => break 'record,
                            };
                            if let Some(k) = position_of(out, id) {
                                let x = &mut out[k];
                                x.access = x.access.saturating_add(1);
                                x.updated_at = x.updated_at.max(now);
                            }
                        }
                        pos += n as u32;
                    }
                }
            }
        }
        Ok(())
    }

    /// Active set [`OP`] read, in list order ([`by_recall`]; compiled once
    /// for every listing).
    #[inline(never)]
    pub(super) fn mem_active_listed(&mut self) -> Result<(), Fail> {
        self.mem_active(OP)?;
        sort_active(&mut self.work.borrow_mut().active[OP], &by_recall);
        Ok(())
    }

    /// The item with the applied access count and update time, into slot
    /// `slot`; returns its lineage.
    pub(super) fn mem_load_in(&mut self, a: &Active, slot: usize) -> Result<Lineage, Fail> {
        let lineage = self.mem_read(a.addr, slot)?;
        let item = &mut self.work.borrow_mut().items[slot];
        item.set_access_count(a.access);
        item.set_updated_at(a.updated_at);
        Ok(lineage)
    }

    /// Entry `k` of active set `lvl` loaded as
    /// [`mem_load_in`](Self::mem_load_in) loads it, into slot 0; `false`
    /// for a damaged item.
    #[inline(always)]
    pub(super) fn mem_load_entry(&mut self, lvl: usize, k: usize) -> Result<bool, Fail> {
        Ok(self.mem_load_entry_word(lvl, k, 0)? != 0)
    }

    /// Entries `i` and `j` of active set `lvl` into slots 0 and 1, a
    /// merge's pair, as [`mem_load_entry`](Self::mem_load_entry) loads
    /// one: `false` if either is damaged (the second is not read when the
    /// first is).
    #[inline(always)]
    pub(super) fn mem_load_pair(&mut self, lvl: usize, i: usize, j: usize) -> Result<bool, Fail> {
        Ok(self.mem_load_pair_word(lvl, i, j)? != 0)
    }

    /// [`Self::mem_load_pair`] as a word (1 or 0; see `Io::chunk_crc_ok_word`).
    #[inline(never)]
    fn mem_load_pair_word(&mut self, lvl: usize, i: usize, j: usize) -> Result<u32, Fail> {
        if self.mem_load_entry_word(lvl, i, 0)? == 0 {
            return Ok(0);
        }
        self.mem_load_entry_word(lvl, j, 1)
    }

    /// [`Self::mem_load_entry`] into slot `slot`, as a word (1 or 0; see
    /// `Io::chunk_crc_ok_word`).
    #[inline(never)]
    pub(super) fn mem_load_entry_word(
        &mut self,
        lvl: usize,
        k: usize,
        slot: usize,
    ) -> Result<u32, Fail> {
        let a = self.work.borrow().active[lvl][k];
        let r = self.mem_load_in(&a, slot);
        Ok(u32::from(self.mem_tolerate(r)?.is_some()))
    }

    /// Damage at rest confined to the record it hit: `Ok(None)` (counted)
    /// where `r` failed a checksum; flash errors pass through.
    #[inline(always)]
    pub(super) fn mem_tolerate<T>(&mut self, r: Result<T, Fail>) -> Result<Option<T>, Fail> {
        match r {
            Ok(v) => Ok(Some(v)),
            Err(e) => {
                self.mem_absorb(e)?;
                Ok(None)
            }
        }
    }

    /// The error half of [`mem_tolerate`](Self::mem_tolerate), compiled
    /// once: a checksum failure is counted and absorbed, any other error
    /// passes through.
    #[inline(never)]
    fn mem_absorb(&mut self, e: Fail) -> Result<(), Fail> {
        if e.kind() != Kind::Corrupted {
            return Err(e);
        }
        self.mem_damaged = self.mem_damaged.saturating_add(1);
        Ok(())
    }

    /// Memory records that failed their checksum (damage at rest) and were
    /// left out of a read since the mount. Each read that meets one counts
    /// it again; 0 means no memory read has met damage.
    pub fn memory_damaged_reads(&self) -> u32 {
        self.mem_damaged
    }
}
