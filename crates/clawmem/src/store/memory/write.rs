//! Writing long-term memory: puts, tombstones, access records, ESP-Claw's
//! compaction trigger and the compaction that writes a new index.
//!
//! Invariants: a chained record's `prev` is the chain's head once room is
//! made for it (making room may move memory); a compaction runs with no
//! collection nested in it and works on the work area's [`GC`] active set
//! and slots only.
//!
//! Power loss: each record is one atomic batch; a compaction commits with
//! its index, and the puts it writes before (merges, relocation copies)
//! replace items by the same id, so they are harmless if the index never
//! lands.

use super::*;
use super::{MEM_ACCESS_PACKED, MEM_FORGET, MEM_INDEX};

impl<F: NorFlash, const MAX_SESSIONS: usize, W: BorrowMut<Work>> Store<F, MAX_SESSIONS, W> {
    /// Makes room in the chain for one more record.
    pub(super) fn mem_before_write(&mut self, p: Priority) -> Result<(), Fail> {
        if self.mem.chain as usize >= MEM_CHAIN_MAX {
            self.mem_compact_with(None, p)?;
        }
        Ok(())
    }

    /// Appends a record to the memory chain. The caller built `payload`
    /// with `prev` = the chain's head after [`Store::prepare_write`].
    pub(super) fn mem_write<P: Payload<F>>(
        &mut self,
        k: u8,
        payload: &mut P,
        changes: u16,
    ) -> Result<u32, Fail> {
        let len = payload.len();
        let addr = self.write_prepared(k, payload)?;
        self.mem_written(addr, len, changes);
        Ok(addr)
    }

    /// The chain's state after a record of `len` payload bytes at `addr`.
    pub(super) fn mem_written(&mut self, addr: u32, len: u32, changes: u16) {
        let seq = self.log.head_seq_of(addr);
        self.mem.head = addr;
        self.mem.chain += 1;
        self.mem.changes = self.mem.changes.saturating_add(changes);
        self.mem.bytes = self.mem.bytes.saturating_add(len);
        self.mem.oldest = self.mem.oldest.min(seq);
    }

    /// Writes a chained put of `item`: it extends the memory chain. The item
    /// waits in the work area's slot [`MERGED`], which the compaction making
    /// room may start leaves alone, and is encoded once room is made (one
    /// put path, [`Self::mem_put_slot`]).
    #[inline(always)]
    pub(super) fn mem_put(
        &mut self,
        item: &Item,
        origin: (u32, u32),
        p: Priority,
    ) -> Result<u32, Fail> {
        self.work.borrow_mut().items[MERGED].clone_from(item);
        self.mem_put_slot(MERGED, origin, true, p)
    }

    /// A put of the item in the work area's slot `slot`. A chained one
    /// extends the memory chain (the slot is [`MERGED`], which the
    /// compaction making room may start leaves alone); an unchained one
    /// (a compaction's merge or relocation copy, `prev` none) is reachable
    /// only from the index written after it, and is garbage if that index
    /// never lands. The item is encoded once room is made.
    pub(super) fn mem_put_slot(
        &mut self,
        slot: usize,
        origin: (u32, u32),
        chained: bool,
        p: Priority,
    ) -> Result<u32, Fail> {
        if chained {
            self.mem_before_write(p)?;
        } else if !self.in_gc {
            return Err(fail!(LogicBug, "an unchained put outside a compaction"));
        }
        let len = put_len(&self.work.borrow().items[slot], origin)?;
        self.prepare_write(len, p)?;
        let prev = if chained { self.mem_prev() } else { UNCHAINED };
        let w: &mut Work = self.work.borrow_mut();
        let (len, kind) = put_encode(&mut w.enc, prev, origin, &w.items[slot])?;
        self.mem_write_built(len, kind, chained)
    }

    /// Writes the record of kind `kind` built in the work area, `len`
    /// bytes: a put encoded in `enc`, or a recall's access record
    /// ([`MEM_ACCESS_PACKED`], no change counted) built in the scratch area
    /// at [`ACCESS_AT`]; the one write of both, compiled once.
    pub(super) fn mem_write_built(
        &mut self,
        len: u32,
        kind: u8,
        chained: bool,
    ) -> Result<u32, Fail> {
        let w: &Work = self.work.borrow();
        let access = kind == MEM_ACCESS_PACKED;
        let built = if access {
            w.scratch.split_at(ACCESS_AT).1
        } else {
            &w.enc[..]
        };
        // `len` fits: the put's was encoded in `enc`, and the access
        // record's bound is `SCRATCH_BYTES`' (`mod.rs`).
        let part = built.split_at(built.len().min(len as usize)).0;
        let mut payload = crate::log::Slices([part]);
        let (addr, _) = self.log.write_batch(kind, &mut payload)?;
        self.bytes_since_checkpoint = self.bytes_since_checkpoint.saturating_add(len);
        if chained {
            self.mem_written(addr, len, u16::from(!access));
        } else {
            self.mem.oldest = self.mem.oldest.min(self.log.head_seq_of(addr));
        }
        Ok(addr)
    }

    pub(super) fn mem_prev(&self) -> u32 {
        self.mem.head
    }

    pub(super) fn mem_forget_record(&mut self, id: u32, p: Priority) -> Result<(), Fail> {
        self.mem_before_write(p)?;
        self.prepare_write(8, p)?;
        let mut b = [0u8; 8];
        set_word(&mut b, 0, self.mem_prev());
        set_word(&mut b, 1, id);
        let mut payload = crate::log::Slices([&b[..]]);
        self.mem_write(MEM_FORGET, &mut payload, 1)?;
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
    pub(super) fn mem_maybe_compact(&mut self) -> Result<(), Fail> {
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
        let (mut i, mut j) = (0, 1);
        while merges < MAX_MERGES {
            let Some((pi, pj)) = self.mem_same_key(OP, i, j) else {
                break;
            };
            (i, j) = (pi, pj);
            // Both in the work area's slots (0 and 1, which a
            // compaction that writing the merged item may start uses):
            // the merged item is copied to slot `MERGED` before its put.
            if self.mem_load_pair(OP, i, j)? {
                let w: &mut Work = self.work.borrow_mut();
                let [a, b, _] = &mut w.items;
                let (a_id, b_id) = (a.id(), b.id());
                if merge_same_key_into(a, b) {
                    merges += 1;
                    let kept_i = a.id() == a_id;
                    let other = if kept_i { b_id } else { a_id };
                    // The merged item waits in the operation's own slot,
                    // which the compaction its put may start leaves alone.
                    let [merged, _, slot] = &mut w.items;
                    slot.clone_from(merged);
                    self.mem_put_slot(MERGED, (0, 0), true, p)?;
                    self.mem_forget_record(other.get(), p)?;
                    self.mem_active(OP)?;
                    self.mem_keys(OP)?;
                    // Entry `i` gone: on with the next one.
                    if !kept_i {
                        (i, j) = (i + 1, i + 2);
                    }
                    continue;
                }
            }
            j += 1;
        }
        // Evictions, lowest score first: each is taken out of the active
        // set, which no write below reuses.
        while let Some(id) = self.mem_evict_one(OP) {
            self.mem_forget_record(id, p)?;
        }
        self.mem.changes = 0;
        self.mem.bytes = 0;
        Ok(())
    }

    /// With active set `lvl` beyond the item limit, takes out the entry
    /// to evict first ([`Self::mem_lowest`]) and returns its id (the one
    /// eviction step of both compactions).
    fn mem_evict_one(&mut self, lvl: usize) -> Option<u32> {
        let max = self.config.memory.max_items.min(MAX_ACTIVE_ITEMS);
        if self.work.borrow().active[lvl].len() <= max {
            return None;
        }
        let k = self.mem_lowest(lvl)?;
        Some(self.work.borrow_mut().active[lvl].remove(k).id)
    }

    /// The entry of active set `lvl` to evict first (lowest score, then id).
    #[inline(always)]
    pub(super) fn mem_lowest(&self, lvl: usize) -> Option<usize> {
        match self.mem_lowest_word(lvl) {
            usize::MAX => None,
            k => Some(k),
        }
    }

    /// With active set `lvl` full, `a` in place of the entry to evict
    /// first ([`Self::mem_lowest`]) if that one goes before it.
    #[inline(never)]
    pub(super) fn mem_over_lowest(&mut self, lvl: usize, a: &Active) {
        let k = self.mem_lowest_word(lvl);
        let out = &mut self.work.borrow_mut().active[lvl];
        if let Some(x) = out.get_mut(k) {
            if x.evicted_before(a) {
                *x = *a;
            }
        }
    }

    /// [`Self::mem_lowest`] as a word (`usize::MAX` for an empty set),
    /// compiled once.
    #[inline(never)]
    fn mem_lowest_word(&self, lvl: usize) -> usize {
        let set = &self.work.borrow().active[lvl];
        // The first of the lowest, as `min_by` takes it.
        let mut lowest = usize::MAX;
        for (k, a) in set.iter().enumerate() {
            if set.get(lowest).is_none_or(|b| a.evicted_before(b)) {
                lowest = k;
            }
        }
        lowest
    }

    /// Compacts: applies access deltas, drops tombstones, merges items with
    /// the same key, evicts beyond the item limit, and writes a new index.
    /// With `relocate`, items whose puts start in sectors up to that sector
    /// sequence are first copied to the head (garbage collection).
    ///
    /// Power loss: the new index commits atomically; before that the old
    /// index and chain stand (merge and relocation puts written before it
    /// replace items by the same id, so they are harmless either way).
    #[inline(always)]
    pub(crate) fn mem_compact_with(
        &mut self,
        relocate: Option<u32>,
        p: Priority,
    ) -> Result<bool, Fail> {
        Ok(self.mem_compact_with_word(relocate, p)? != 0)
    }

    /// [`Self::mem_compact_with`] as a word (1 or 0; see `Io::chunk_crc_ok_word`).
    #[inline(never)]
    fn mem_compact_with_word(&mut self, relocate: Option<u32>, p: Priority) -> Result<u32, Fail> {
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
            Ok(0) => Err(self.log.parked().full(need, 0)),
            r => r,
        }
    }

    /// The hash of each entry's dedup key in active set `lvl` (0 for an
    /// empty key, which matches nothing), into the scratch area as words in
    /// the order of the set.
    #[inline(never)]
    pub(super) fn mem_keys(&mut self, lvl: usize) -> Result<(), Fail> {
        for k in 0..self.work.borrow_mut().active[lvl].len() {
            // A damaged item has no key: it merges with nothing.
            let mut key = 0;
            if self.mem_load_entry(lvl, k)? {
                let item_key = self.slot(0).key();
                if !item_key.is_empty() {
                    key = fnv1a32(item_key.as_bytes());
                }
            }
            set_word(&mut self.work.borrow_mut().scratch, k, key);
        }
        Ok(())
    }

    /// The first pair of entries of active set `lvl` with the same key (as
    /// [`Self::mem_keys`] put them in the scratch area) from entries `i`
    /// and `j` on, `j` after `i`, in the order of a loop over `i` with one
    /// over `j` inside it: the one search of both merge loops.
    #[inline(always)]
    fn mem_same_key(&self, lvl: usize, i: usize, j: usize) -> Option<(usize, usize)> {
        match self.mem_same_key_word(lvl, i, j) {
            usize::MAX => None,
            w => Some((w & 0xFFFF, w >> 16)),
        }
    }

    /// [`Self::mem_same_key`] as a word, `i | j << 16` (`usize::MAX`:
    /// none; both are below [`ACTIVE_CAP`], the set's capacity), returned
    /// in a register.
    #[inline(never)]
    fn mem_same_key_word(&self, lvl: usize, i: usize, j: usize) -> usize {
        const _: () = assert!(ACTIVE_CAP <= 0xFFFF);
        let work: &Work = self.work.borrow();
        let n = work.active[lvl].len();
        let (mut i, mut j) = (i, j);
        while i < n {
            if j >= n {
                (i, j) = (i + 1, i + 2);
                continue;
            }
            let ki = word(&work.scratch, i);
            if ki != 0 && ki == word(&work.scratch, j) {
                return i | j << 16;
            }
            j += 1;
        }
        usize::MAX
    }

    /// How many merges a compaction of active set `lvl` would write (at
    /// most [`MAX_MERGES`]).
    #[inline(never)]
    pub(super) fn mem_merge_count(&mut self, lvl: usize) -> Result<u32, Fail> {
        self.mem_keys(lvl)?;
        let work: &Work = self.work.borrow();
        let keys = &work.scratch;
        let mut merges = 0;
        for i in 0..work.active[lvl].len() {
            let ki = word(keys, i);
            if ki != 0 && find_word(keys, i, 1, ki).is_some() {
                merges += 1;
            }
        }
        Ok(merges.min(MAX_MERGES as u32))
    }

    /// The compaction itself, once room is made: 1 when the new index is
    /// written, 0 when it does not fit (a word, returned in registers).
    #[inline(never)]
    pub(super) fn mem_compact_now(
        &mut self,
        relocate: Option<u32>,
        p: Priority,
    ) -> Result<u32, Fail> {
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
                        if let Some(o) = position_of(&self.work.borrow().active[GC], origin) {
                            replaced.set(o);
                        }
                    }
                }
                None => replaced.set(k),
            }
        }
        replaced.retain(&mut self.work.borrow_mut().active[GC], false);
        // Merge items with the same key (rare: stores refuse same-key
        // duplicates, so only updates can create them). No collection runs
        // inside a compaction, so the keys stay in the scratch area.
        self.mem_keys(GC)?;
        let (mut i, mut j) = (0, 1);
        let mut merges = 0;
        while merges < MAX_MERGES {
            let Some((pi, pj)) = self.mem_same_key(GC, i, j) else {
                break;
            };
            (i, j) = (pi, pj);
            merges += 1;
            if self.mem_load_pair(GC, i, j)? {
                let w: &mut Work = self.work.borrow_mut();
                let [a, b, _] = &mut w.items;
                if merge_same_key_into(a, b) {
                    let addr = self.mem_put_slot(0, (0, 0), false, p)?;
                    let work: &mut Work = self.work.borrow_mut();
                    let merged = Active::of(&work.items[0], addr);
                    let set = &mut work.active[GC];
                    set[i] = merged;
                    set.remove(j);
                    // The keys after `j` move down one word with it.
                    let n = set.len();
                    work.scratch.copy_within(4 * (j + 1)..4 * (n + 1), 4 * j);
                    continue;
                }
            }
            j += 1;
        }
        // Evict beyond the limit: lowest access*3 + updated_at/3600 first.
        while self.mem_evict_one(GC).is_some() {}
        // Relocation: copy the items in the sectors about to be released.
        if let Some(upto) = relocate {
            for k in 0..self.work.borrow_mut().active[GC].len() {
                let a = self.work.borrow_mut().active[GC][k];
                if self.log.head_seq_of(a.addr) <= upto {
                    let origin = self.mem_load_in(&a, 0)?;
                    let addr = self.mem_put_slot(0, origin, false, p)?;
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
        let (start, opens) = self.log.plan(len);
        if opens > self.log.free_sectors() {
            return Ok(0);
        }
        let index_seq =
            self.log.head_seq() + u32::from(self.log.geo().sector_of(start) != self.log.head());
        let oldest = self.work.borrow_mut().active[GC]
            .iter()
            .fold(index_seq, |m, a| m.min(self.log.head_seq_of(a.addr)));
        let catalog_field = catalog_len.map_or(NO_ADDR, |n| n as u32);
        let work: &Work = self.work.borrow();
        let mut payload = IndexPayload {
            fixed: index_fixed(self.mem.next_id, count, oldest, catalog_field),
            entries: &work.active[GC],
            catalog: &work.scratch[..catalog_bytes],
        };
        let (addr, _) = self.log.write_batch(MEM_INDEX, &mut payload)?;
        self.bytes_since_checkpoint = self.bytes_since_checkpoint.saturating_add(len);
        self.mem_rooted_at(addr, oldest, 0);
        Ok(1)
    }

    /// The chain rooted at the new index at `addr`
    /// ([`MemState::rooted_at`]), with no repaired links (those were all
    /// before it), and the next id at least `next_id` (ids never go back):
    /// compiled once.
    #[inline(never)]
    pub(super) fn mem_rooted_at(&mut self, addr: u32, oldest: u32, next_id: u32) {
        self.mem_links.clear();
        self.mem = MemState::rooted_at(addr, oldest, self.mem.next_id.max(next_id));
    }

    /// The entry of active set `lvl` with the smallest id above `after`
    /// (any id for `None`): walks the set in id order without sorting it.
    pub(super) fn mem_next_by_id(&self, lvl: usize, after: Option<u32>) -> Option<usize> {
        let set = &self.work.borrow().active[lvl];
        let mut best: Option<(usize, u32)> = None;
        for (k, a) in set.iter().enumerate() {
            // The first of equal ids, as `min_by_key` takes it.
            if after.is_none_or(|x| a.id > x) && best.is_none_or(|(_, id)| a.id < id) {
                best = Some((k, a.id));
            }
        }
        best.map(|(k, _)| k)
    }
}
