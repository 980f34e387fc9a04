//! The public long-term memory API: store, import, get, list, catalog,
//! recall, update, forget, newest, clear, compact, the prompt section and
//! `MEMORY.md`, and the stage note.
//!
//! Invariants: each operation works on the work area's [`OP`] active set,
//! which no compaction under it touches; an item read into a slot is done
//! with before the next write.
//!
//! Power loss: each function says what a cut during it leaves.

use super::*;
use super::{MEM_ACCESS_PACKED, MEM_INDEX};
use crate::memory::{MAX_SUMMARY_LABELS, RECALL_DEFAULT_LIMIT};

/// The bit of `memory_recall_word`'s word that marks an unknown
/// label (the rest is where it is in the labels; a count of items recalled
/// never reaches it).
const UNKNOWN_LABEL: u32 = 1 << 31;

impl<F: NorFlash, const MAX_SESSIONS: usize, W: BorrowMut<Work>> Store<F, MAX_SESSIONS, W> {
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

    pub(super) fn stage_touch(&mut self, item: &Item) {
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
        self.mem_store_surfaced(input, (now, now, 0), replace)
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
        let times = (created_at, updated_at, access_count);
        self.mem_store_surfaced(input, times, false)
    }

    /// [`memory_store`](Self::memory_store) and
    /// [`memory_import`](Self::memory_import), compiled once:
    /// [`Self::mem_store_new`] into a fresh answer, with the public error.
    #[inline(never)]
    fn mem_store_surfaced(
        &mut self,
        input: &ItemInput<'_>,
        times: (u32, u32, u16),
        replace: bool,
    ) -> Result<Stored, Error<F::Error>> {
        let mut stored = Stored::fresh();
        let r = self.mem_store_new(&mut stored, input, times, replace);
        self.surface(r).map(|()| stored)
    }

    /// The common part of a store and an import: builds `stored.item`
    /// from `input` as a new item with the next id, created, updated and
    /// accessed as `times` says (a store: now, now, 0), and stores it
    /// ([`Self::mem_store_core`]).
    #[inline(always)]
    fn mem_store_new(
        &mut self,
        stored: &mut Stored,
        input: &ItemInput<'_>,
        times: (u32, u32, u16),
        replace: bool,
    ) -> Result<(), Fail> {
        let id = ItemId::new(self.mem.next_id);
        let item = &mut stored.item;
        item.build(id, input, times.0, self.config.memory.label_limit)
            .map_err(|_| fail!(InvalidInput, "memory content is empty"))?;
        item.set_updated_at(times.1);
        item.set_access_count(times.2);
        self.mem_active(OP)?;
        self.mem_store_core(stored, (0, 0), replace)
    }

    /// The common part of a store, an import and an update, once
    /// `stored.item` is built as a new item with the next id and active set
    /// [`OP`] is read: `stored` says what was done (on a duplicate, its item
    /// becomes the existing one). A store has lineage `origin` (0, 0). An
    /// update's is (the item it replaces, the first id of its lineage):
    /// the duplicate check passes over the replaced item, which is
    /// forgotten after the put, or after the duplicate is found. Only a
    /// store's duplicate ends here with nothing written. The item stays in
    /// the caller's frame; its put copies it into work slot [`MERGED`].
    #[inline(never)]
    fn mem_store_core(
        &mut self,
        stored: &mut Stored,
        origin: Lineage,
        replace: bool,
    ) -> Result<(), Fail> {
        // Ids start at 1: 0 is no item.
        let old = origin.0;
        let skip = if old == 0 { None } else { Some(old) };
        if self.mem_duplicate(&stored.item, skip)? {
            stored.item.clone_from(self.slot(0));
            stored.changed = false;
            if old == 0 {
                return Ok(());
            }
        } else {
            self.mem_room_for_one()?;
            self.mem.next_id = self.mem.next_id.wrapping_add(1);
            self.mem_put(&stored.item, origin, Priority::User)?;
        }
        if old != 0 {
            self.mem_forget_record(old, Priority::User)?;
        }
        // An update's stage note gets the resulting item's labels only, as
        // `cap_memory_update_execute` notes them: not the old item's.
        let item = &stored.item;
        self.stage_touch(item);
        let mut replaced = 0;
        if replace {
            // Forgetting may compact memory: that works on its own active
            // set, so this one stays as read here.
            self.mem_active(OP)?;
            let mut from = 0;
            // Bounded: each match is at or after `from`, which moves past it.
            loop {
                let k = self.mem_match_word(item, Some(item.id().get()), from, true)? as usize;
                let w: &mut Work = self.work.borrow_mut();
                let Some(a) = w.active[OP].get(k).copied() else {
                    break;
                };
                // The stage note first: forgetting may compact, which
                // reuses the slot.
                let _ = self.stage.note_item(&w.items[0]);
                self.mem_forget_record(a.id, Priority::User)?;
                replaced += 1;
                from = k + 1;
            }
        }
        self.mem_maybe_compact()?;
        stored.replaced = replaced;
        Ok(())
    }

    /// Makes room in the active set for one more item before a put of a
    /// new id: with active set [`OP`] as just read holding `ACTIVE_CAP - 1`
    /// items or more, memory is compacted first (evicting down to the item
    /// limit). Only such puts grow the set, so it never outgrows
    /// `ACTIVE_CAP`, however long the chain.
    fn mem_room_for_one(&mut self) -> Result<(), Fail> {
        if self.work.borrow().active[OP].len() >= ACTIVE_CAP - 1 {
            self.mem_compact_with(None, Priority::User)?;
        }
        Ok(())
    }

    /// Whether `item` duplicates an item of active set [`OP`] (other than
    /// `skip`), which is then in slot 0.
    #[inline(always)]
    fn mem_duplicate(&mut self, item: &Item, skip: Option<u32>) -> Result<bool, Fail> {
        Ok(self.mem_match_word(item, skip, 0, false)? != u32::MAX)
    }

    /// The first entry of active set [`OP`] from entry `from` on, other
    /// than item `skip`, whose item (then in slot 0) duplicates `item`, or
    /// with `replace` conflicts with it for a replacing store
    /// ([`conflicts_for_replace`]); `u32::MAX` if none (a word, returned in
    /// registers). A damaged item matches nothing. The one search of a
    /// store's duplicate check and of its replacements, compiled once.
    #[inline(never)]
    fn mem_match_word(
        &mut self,
        item: &Item,
        skip: Option<u32>,
        from: usize,
        replace: bool,
    ) -> Result<u32, Fail> {
        for k in from..self.work.borrow_mut().active[OP].len() {
            let id = self.work.borrow().active[OP][k].id;
            if Some(id) == skip || !self.mem_load_entry(OP, k)? {
                continue;
            }
            let hit = if replace {
                conflicts_for_replace(self.slot(0), item)
            } else {
                item.duplicate_of(self.slot(0)).is_some()
            };
            if hit {
                return Ok(k as u32);
            }
        }
        Ok(u32::MAX)
    }

    /// The active item with this id.
    pub fn memory_get(&mut self, id: ItemId) -> Result<Item, Error<F::Error>> {
        self.mem_item_surfaced(id, false)
    }

    /// [`memory_get`](Self::memory_get) and, with `forget`,
    /// [`memory_forget`](Self::memory_forget), compiled once: the item
    /// copied into the answer (the one copy on the caller's stack), with
    /// the public error.
    #[inline(never)]
    fn mem_item_surfaced(&mut self, id: ItemId, forget: bool) -> Result<Item, Error<F::Error>> {
        let mut item = Item::empty();
        let r = self.mem_get_into(id, &mut item, forget);
        self.surface(r).map(|()| item)
    }

    /// [`memory_get`](Self::memory_get) with the engine's error, the item
    /// copied into `item` (no item moved through the result); with
    /// `forget`, then forgets it as [`memory_forget`](Self::memory_forget)
    /// does.
    #[inline(always)]
    fn mem_get_into(&mut self, id: ItemId, item: &mut Item, forget: bool) -> Result<(), Fail> {
        self.mem_load_active(id, 0)?;
        item.clone_from(self.slot(0));
        if forget {
            self.mem_forget_record(id.get(), Priority::Maintenance)?;
            self.stage_touch(item);
            self.mem_maybe_compact()?;
        }
        Ok(())
    }

    /// Active item `id` into the work area's slot `slot` (`NotFound` if it
    /// is not active); returns its lineage (compiled once for a get, a
    /// forget and an update).
    #[inline(never)]
    fn mem_load_active(&mut self, id: ItemId, slot: usize) -> Result<Lineage, Fail> {
        let a = self.mem_find(id.get())?.ok_or(Fail::NOT_FOUND)?;
        self.mem_load_in(&a, slot)
    }

    /// The active-set entry of item `id`, if it is active.
    #[inline(always)]
    pub(super) fn mem_find(&mut self, id: u32) -> Result<Option<Active>, Fail> {
        let k = self.mem_find_word(id)?;
        Ok(self.work.borrow().active[OP].get(k as usize).copied())
    }

    /// Whether item `id` is active (active set [`OP`] read).
    #[inline(always)]
    pub(super) fn mem_is_active(&mut self, id: u32) -> Result<bool, Fail> {
        Ok(self.mem_find_word(id)? != u32::MAX)
    }

    /// Where item `id` is in active set [`OP`] as [`Self::mem_find`] reads
    /// it, `u32::MAX` if it is not active (a word: returned in registers).
    #[inline(never)]
    fn mem_find_word(&mut self, id: u32) -> Result<u32, Fail> {
        self.mem_active(OP)?;
        Ok(position_of(&self.work.borrow().active[OP], id).map_or(u32::MAX, |k| k as u32))
    }

    /// Calls `f` with every active item in priority order (access count,
    /// then update time, descending; then id). Returns how many. An item
    /// that fails its checksum (damage at rest) is left out and counted in
    /// [`memory_damaged_reads`](Self::memory_damaged_reads); so is every
    /// other memory read.
    pub fn memory_list(&mut self, mut f: impl FnMut(&Item)) -> Result<usize, Error<F::Error>> {
        let r = self.memory_list_dyn(&mut f);
        self.surface(r)
    }

    /// [`memory_list`](Self::memory_list), compiled once whatever the
    /// caller's closure.
    pub(super) fn memory_list_dyn(&mut self, f: &mut dyn FnMut(&Item)) -> Result<usize, Fail> {
        self.mem_active_listed()?;
        let mut listed = 0;
        for k in 0..self.work.borrow_mut().active[OP].len() {
            if !self.mem_load_entry(OP, k)? {
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
        let r = self.memory_catalog_dyn(&mut |l, refs| {
            f(l, refs);
            Ok(())
        });
        self.surface(r)
    }

    /// [`memory_catalog`](Self::memory_catalog), compiled once whatever the
    /// caller's closure; an error of `f` ends it.
    pub(super) fn memory_catalog_dyn(
        &mut self,
        f: &mut dyn FnMut(&str, u16) -> Result<(), Fail>,
    ) -> Result<usize, Fail> {
        self.mem_active(OP)?;
        let n = self.mem_catalog_from_index(f)?;
        if n != u32::MAX {
            return Ok(n as usize);
        }
        // No catalog in the index (none yet, or it did not fit): count the
        // labels of every active item, oldest item first.
        sort_active(&mut self.work.borrow_mut().active[OP], &by_id);
        self.mem_label_walk(true, f)
    }

    /// Calls `f` with each label of the items of active set [`OP`] in its
    /// order, once, where it first appears; returns how many. With
    /// `counted`, `f` gets the number of times the label appears (two
    /// walks of the items: the first gathers the labels' hashes); without,
    /// a number of no meaning (one walk). An error of `f` ends the walk.
    /// The labels' hashes go to the scratch area in the order they appear
    /// (it holds every label of a full active set, `SCRATCH_BYTES`' bound;
    /// past it, a label is emitted unless one of the hashes kept is its).
    /// The one walk of the catalog counted from the items and of the
    /// labels a recall's unknown-label reply lists.
    #[inline(never)]
    pub(super) fn mem_label_walk(
        &mut self,
        counted: bool,
        f: &mut dyn FnMut(&str, u16) -> Result<(), Fail>,
    ) -> Result<usize, Fail> {
        let cap = SCRATCH_BYTES / 4;
        let mut hashes = 0;
        let mut emitted = 0;
        // Pass 0 gathers the hashes, pass 1 emits; uncounted, pass 1 does
        // both: a label's hash is kept when it is the next one to keep.
        for pass in usize::from(!counted)..2 {
            let mut pos = 0;
            for k in 0..self.work.borrow_mut().active[OP].len() {
                if !self.mem_load_entry(OP, k)? {
                    continue;
                }
                let w: &mut Work = self.work.borrow_mut();
                for l in w.items[0].labels() {
                    let h = fnv1a32(l.as_bytes());
                    let b = &mut w.scratch;
                    // The hashes of the labels before this one.
                    let here = pos.min(hashes);
                    if hashes == pos && hashes < cap {
                        set_word(b, hashes, h);
                        hashes += 1;
                    }
                    pos += 1;
                    if pass == 0 || find_word(b, here, 1, h).is_some() {
                        continue;
                    }
                    let refs = (0..hashes).filter(|&x| word(b, x) == h).count() as u16;
                    emitted += 1;
                    f(l, refs)?;
                }
            }
        }
        Ok(emitted)
    }

    /// The catalog from the newest index, corrected for what the chain
    /// changed since: reads the index's catalog and entries and only the
    /// items added or removed since. Returns how many labels it emitted,
    /// `u32::MAX` (a word, returned in registers) if the index has no
    /// catalog.
    /// Works on active set [`OP`] as read; the label deltas go to the
    /// scratch area.
    #[inline(never)]
    pub(super) fn mem_catalog_from_index(
        &mut self,
        f: &mut dyn FnMut(&str, u16) -> Result<(), Fail>,
    ) -> Result<u32, Fail> {
        let root = self.mem.root;
        if root == NO_ADDR {
            return Ok(u32::MAX);
        }
        let mut fixed = [0u8; INDEX_FIXED as usize];
        self.mem_payload(root, 0, &mut fixed)?;
        let count = word(&fixed, 2).min(ACTIVE_CAP as u32);
        let catalog_len = word(&fixed, 4);
        if catalog_len == NO_ADDR || catalog_len as usize > CATALOG_MAX {
            return Ok(u32::MAX);
        }
        // Label deltas since the index: (label hash, change, a put holding
        // the label for labels the index does not have).
        let mut deltas = 0;
        // Active entries the index lists as they are.
        let mut listed = Marks::NONE;
        for k in 0..count {
            let mut e = [0u8; INDEX_ENTRY as usize];
            self.mem_payload(root, INDEX_FIXED + INDEX_ENTRY * k, &mut e)?;
            let (id, addr) = (word(&e, 0), word(&e, 1));
            match self.work.borrow_mut().active[OP]
                .iter()
                .position(|x| x.id == id && x.addr == addr)
            {
                Some(x) => listed.set(x),
                None => {
                    if !self.mem_label_deltas(&mut deltas, addr, -1)? {
                        return Ok(u32::MAX);
                    }
                }
            }
        }
        for k in 0..self.work.borrow_mut().active[OP].len() {
            if !listed.get(k) {
                let addr = self.work.borrow_mut().active[OP][k].addr;
                if !self.mem_label_deltas(&mut deltas, addr, 1)? {
                    return Ok(u32::MAX);
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
            self.mem_payload(root, pos, &mut hdr)?;
            let n = hdr[0] as usize;
            let mut label = [0u8; crate::memory::LABEL_MAX_BYTES + 2];
            if n > crate::memory::LABEL_MAX_BYTES || pos + 1 + n as u32 + 2 > end {
                return Ok(u32::MAX);
            }
            self.mem_payload(root, pos + 1, &mut label[..n + 2])?;
            let text = core::str::from_utf8(&label[..n]).map_err(|_| {
                // Where the label's entry starts.
                let addr = self.log.io().stream_advance(root + CHUNK_HEADER_LEN, pos);
                self.log.parked().at(
                    fail!(Corrupted, "a memory catalog label is not UTF-8"),
                    addr,
                )
            })?;
            let h = fnv1a32(text.as_bytes());
            let refs = i32::from(u16::from_le_bytes([label[n], label[n + 1]]));
            let b = &mut self.work.borrow_mut().scratch;
            let change = match LabelDelta::find(b, deltas, h) {
                Some(d) => i32::from(LabelDelta::take_used(b, d)),
                None => 0,
            };
            if refs + change > 0 {
                f(text, (refs + change) as u16)?;
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
                return Ok(u32::MAX);
            }
            if let Some(l) = self
                .slot(0)
                .labels()
                .iter()
                .find(|l| fnv1a32(l.as_bytes()) == x.hash)
            {
                f(l, x.change as u16)?;
                emitted += 1;
            }
        }
        Ok(emitted)
    }

    /// Adds the labels of the item put at `addr` to the `deltas` label
    /// deltas in the scratch area, `by` references each. `false` if the
    /// item is damaged or the deltas do not fit.
    #[inline(always)]
    pub(super) fn mem_label_deltas(
        &mut self,
        deltas: &mut usize,
        addr: u32,
        by: i16,
    ) -> Result<bool, Fail> {
        Ok(self.mem_label_deltas_word(deltas, addr, by)? != 0)
    }

    /// [`Self::mem_label_deltas`] as a word (1 or 0; see `Io::chunk_crc_ok_word`).
    #[inline(never)]
    fn mem_label_deltas_word(
        &mut self,
        deltas: &mut usize,
        addr: u32,
        by: i16,
    ) -> Result<u32, Fail> {
        let r = self.mem_read(addr, 0);
        if self.mem_tolerate(r)?.is_none() {
            return Ok(0);
        }
        let w: &mut Work = self.work.borrow_mut();
        let b = &mut w.scratch;
        for l in w.items[0].labels() {
            let h = fnv1a32(l.as_bytes());
            match LabelDelta::find(b, *deltas, h) {
                Some(d) => LabelDelta::add(b, d, by),
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
                None => return Ok(0),
            }
        }
        Ok(1)
    }

    // Out of line: its buffers stay off every caller's stack frame.
    #[inline(never)]
    pub(super) fn unknown_label(&mut self, label: &str) -> Result<UnknownLabelError, Fail> {
        let mut e = UnknownLabelError {
            label: heapless::String::new(),
            available: heapless::String::new(),
        };
        // Each push fits: the label is cut to the capacity, and the list is
        // cut at 60 bytes before its "..." (of 64).
        let _ = e
            .label
            .as_mut_view()
            .push_str(crate::text::utf8_prefix(label, 32));
        let mut first = true;
        let mut cut = false;
        let available = e.available.as_mut_view();
        self.memory_catalog_dyn(&mut |l, _| {
            let sep = if first { 0 } else { 2 };
            if cut || available.len() + sep + l.len() > 60 {
                cut = true;
                return Ok(());
            }
            if !first {
                let _ = available.push_str(", ");
            }
            first = false;
            let _ = available.push_str(l);
            Ok(())
        })?;
        if cut {
            let _ = available.push_str("...");
        }
        Ok(e)
    }

    /// Recalls the active items carrying any of `labels` (copied exactly
    /// from the catalog), in priority order, at most `limit`, calling `f`
    /// with each. The arguments are taken as ESP-Claw's
    /// `cap_memory_recall_execute` and `claw_memory_recall` take them: empty
    /// labels are ignored and so is every label after the third non-empty
    /// one; no labels match every active item (the first `limit` in list
    /// order); `limit` 0 means 8 ([`RECALL_DEFAULT_LIMIT`]) and nothing but
    /// the number of items caps it. Each returned item's access count grows
    /// by one: a small access record is appended, the items are not
    /// rewritten. An unknown label is [`Error::UnknownLabel`], naming it and
    /// listing the labels there are.
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
        let unknown = match self.memory_recall_dyn(labels, limit, now, &mut f) {
            Ok(Ok(n)) => return Ok(n),
            Ok(Err(k)) => self.unknown_label(labels[k]),
            Err(e) => Err(e),
        };
        match unknown {
            Ok(e) => Err(Error::UnknownLabel(e)),
            Err(e) => self.surface(Err(e)),
        }
    }

    /// [`memory_recall`](Self::memory_recall), compiled once whatever the
    /// caller's closure. An unknown label is `Err(k)`, `labels[k]`, and
    /// nothing is written.
    #[inline(always)]
    pub(super) fn memory_recall_dyn(
        &mut self,
        labels: &[&str],
        limit: usize,
        now: u32,
        f: &mut dyn FnMut(&Item),
    ) -> Result<Result<usize, usize>, Fail> {
        let n = self.memory_recall_word(labels, limit, now, f)?;
        Ok(match n & UNKNOWN_LABEL {
            0 => Ok(n as usize),
            _ => Err((n & !UNKNOWN_LABEL) as usize),
        })
    }

    /// [`Self::memory_recall_dyn`] as a word (returned in registers): the
    /// items recalled, or [`UNKNOWN_LABEL`] with `k` for `Err(k)`.
    #[inline(never)]
    fn memory_recall_word(
        &mut self,
        labels: &[&str],
        limit: usize,
        now: u32,
        f: &mut dyn FnMut(&Item),
    ) -> Result<u32, Fail> {
        // The first three non-empty labels (ESP-Claw's loop over
        // `summary_labels`), with where each is in `labels`; none: every
        // active item.
        let mut query = [""; MAX_SUMMARY_LABELS];
        let mut given = [0usize; MAX_SUMMARY_LABELS];
        let mut n = 0;
        for (k, l) in labels.iter().enumerate().filter(|(_, l)| !l.is_empty()) {
            if n == query.len() {
                break;
            }
            query[n] = l;
            given[n] = k;
            n += 1;
        }
        let labels = &query[..n];
        let every = n == 0;
        let limit = if limit == 0 {
            RECALL_DEFAULT_LIMIT
        } else {
            limit
        };
        self.mem_active(OP)?;
        // Every label must exist in the catalog.
        // Bit `k`: `labels[k]` found.
        let mut seen = 0u32;
        let mut hits = Marks::NONE;
        let want = labels.iter().fold(0u16, |b, l| b | label_bloom(l));
        for k in 0..self.work.borrow_mut().active[OP].len() {
            let bloom = self.work.borrow().active[OP][k].bloom;
            if !every && bloom & want == 0 {
                continue;
            }
            if !self.mem_load_entry(OP, k)? {
                continue;
            }
            let mut hit = every;
            for (k2, l) in labels.iter().enumerate() {
                if self.slot(0).has_label(l) {
                    seen |= 1 << k2;
                    hit = true;
                }
            }
            if hit {
                hits.set(k);
            }
        }
        // The first label not found, if any.
        let missing = (!seen).trailing_zeros() as usize;
        if missing < n {
            return Ok(UNKNOWN_LABEL | given.get(missing).map_or(0, |&k| k as u32));
        }
        // The matches, in priority order: the active set keeps only them.
        let set = &mut self.work.borrow_mut().active[OP];
        hits.retain(set, true);
        sort_active(set, &by_recall);
        set.truncate(limit);
        let matched = set.len();
        if matched == 0 {
            // Nothing to count (no items, or only damaged ones).
            return Ok(0);
        }
        self.mem_before_write(Priority::User)?;
        // The packed record's length, counted before room is made (the
        // scratch area is not held across that).
        let n = 8 + pack_ids(&self.work.borrow().active[OP], &mut []);
        self.prepare_write(n as u32, Priority::User)?;
        // The access record, built in the scratch area once room is made,
        // after the matched ids as words (read again below).
        let prev = self.mem_prev();
        let work: &mut Work = self.work.borrow_mut();
        let ids = &mut work.scratch;
        for (k, a) in work.active[OP].iter().enumerate() {
            set_word(ids, 2 + k, a.id);
        }
        let (_, rec) = ids.split_at_mut(ACCESS_AT);
        set_word(rec, 0, prev);
        set_word(rec, 1, now);
        pack_ids(&work.active[OP], &mut rec[8..]);
        self.mem_write_built(n as u32, MEM_ACCESS_PACKED, true)?;
        // Read back through the (possibly relocated) active set: the access
        // record is applied there. The matched ids stay in the scratch
        // area, which nothing below writes until the last one is read.
        self.mem_active(OP)?;
        for m in 0..matched {
            let id = word(&self.work.borrow_mut().scratch, 2 + m);
            if self.mem_load_id(id)? {
                f(self.slot(0));
            }
        }
        self.mem_maybe_compact()?;
        Ok(matched as u32)
    }

    /// Updates an item (ESP-Claw's `update`): the non-empty fields of `patch`
    /// replace the item's, and the result is stored as a new item with a new
    /// id and access count 0, after which the old item is forgotten.
    /// [`memory_newest`](Self::memory_newest) follows the lineage from the
    /// old id. Returns the new item (or the item it duplicates), or `None`
    /// if the patch changes nothing. The stage note gets the labels of the
    /// item returned, not the old item's (as ESP-Claw notes an update).
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
        let mut out = Some(Stored::fresh());
        let r = self.mem_update_into(&mut out, id, patch, now);
        self.surface(r).map(|()| out)
    }

    /// [`memory_update`](Self::memory_update) with the engine's error,
    /// into `out` (a fresh answer, which becomes `None` if the patch
    /// changes nothing; no answer moved through the result).
    fn mem_update_into(
        &mut self,
        out: &mut Option<Stored>,
        id: ItemId,
        patch: &ItemInput<'_>,
        now: u32,
    ) -> Result<(), Fail> {
        // The old item waits in the operation's own slot, apart from the
        // one the duplicate check reads, until the new item's put takes it.
        let (_, old_root) = self.mem_load_active(id, MERGED)?;
        let root = if old_root == 0 { id.get() } else { old_root };
        let new_id = ItemId::new(self.mem.next_id);
        let Some(stored) = out else {
            return Ok(());
        };
        let changed = self
            .slot(MERGED)
            .update_into(
                patch,
                new_id,
                now,
                self.config.memory.label_limit,
                &mut stored.item,
            )
            .map_err(|_| fail!(InvalidInput, "memory content is empty"))?;
        if !changed {
            *out = None;
            return Ok(());
        }
        self.mem_store_core(stored, (id.get(), root), false)
    }

    /// Forgets an active item: appends a tombstone. Its content stays on
    /// flash until garbage collection erases it; use
    /// [`memory_forget_scrub`](Self::memory_forget_scrub) to remove it now.
    ///
    /// Power loss: atomic.
    pub fn memory_forget(&mut self, id: ItemId) -> Result<Item, Error<F::Error>> {
        self.mem_item_surfaced(id, true)
    }

    /// The newest version of an item: `id` itself if active, else the
    /// active item that replaced it or that descends from it (every put
    /// records the id it replaced and the first id of its lineage).
    /// `NotFound` if the lineage ends in a forgotten item.
    pub fn memory_newest(&mut self, id: ItemId) -> Result<ItemId, Error<F::Error>> {
        let r = self.memory_newest_inner(id);
        self.surface(r)
    }

    /// [`memory_newest`](Self::memory_newest) with the engine's error.
    pub(crate) fn memory_newest_inner(&mut self, id: ItemId) -> Result<ItemId, Fail> {
        let want = id.get();
        if self.mem_is_active(want)? {
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
        Err(Fail::NOT_FOUND)
    }

    /// Forgets every long-term memory item.
    ///
    /// Power loss: atomic (one empty index).
    pub fn memory_clear(&mut self) -> Result<(), Error<F::Error>> {
        let r = self.memory_clear_inner();
        self.surface(r)
    }

    /// [`memory_clear`](Self::memory_clear) with the engine's error.
    pub(crate) fn memory_clear_inner(&mut self) -> Result<(), Fail> {
        let mut payload = IndexPayload {
            fixed: index_fixed(self.mem.next_id, 0, self.log.head_seq(), 0),
            entries: &[],
            catalog: &[],
        };
        let addr = self.write(MEM_INDEX, &mut payload, Priority::Maintenance)?;
        let seq = self.log.head_seq_of(addr);
        self.mem_rooted_at(addr, seq, self.mem.next_id);
        Ok(())
    }

    /// Compacts long-term memory now (it also runs by itself after
    /// [`MemoryConfig::compact_after_changes`] changes or
    /// [`MemoryConfig::compact_after_bytes`] bytes).
    pub fn memory_compact(&mut self) -> Result<(), Error<F::Error>> {
        let r = self
            .mem_compact_with(None, Priority::Maintenance)
            .map(|_| ());
        self.surface(r)
    }

    /// Number of active items.
    pub fn memory_len(&mut self) -> Result<usize, Error<F::Error>> {
        let r = self.memory_len_inner();
        self.surface(r)
    }

    /// [`memory_len`](Self::memory_len) with the engine's error.
    pub(crate) fn memory_len_inner(&mut self) -> Result<usize, Fail> {
        self.mem_active(OP)?;
        Ok(self.work.borrow_mut().active[OP].len())
    }

    /// Writes the full-mode prompt context: ESP-Claw's preamble, then
    /// `Summary label catalog:` and one `- <label>` line per label, or
    /// `- (empty)`.
    pub fn write_memory_prompt<O: fmt::Write>(&mut self, w: &mut O) -> Result<(), Error<F::Error>> {
        let r = self.write_memory_prompt_inner(w);
        self.surface(r)
    }

    /// [`write_memory_prompt`](Self::write_memory_prompt) with the engine's error.
    pub(crate) fn write_memory_prompt_inner<O: fmt::Write>(
        &mut self,
        w: &mut O,
    ) -> Result<(), Fail> {
        let mut failed = w.write_str(LONG_TERM_PREAMBLE).is_err();
        let mut any = false;
        self.memory_catalog_dyn(&mut |l, _| {
            any = true;
            failed |= writeln!(w, "- {l}").is_err();
            Ok(())
        })?;
        if !any {
            failed |= w.write_str(crate::memory::CATALOG_EMPTY_LINE).is_err();
        }
        if failed {
            return Err(fail!(InvalidInput, "the prompt writer failed"));
        }
        Ok(())
    }

    /// Writes `MEMORY.md` in ESP-Claw's layout (lite mode injects it whole).
    pub fn write_memory_md<O: fmt::Write>(&mut self, w: &mut O) -> Result<(), Error<F::Error>> {
        let r = self.write_memory_md_inner(w);
        self.surface(r)
    }

    /// [`write_memory_md`](Self::write_memory_md) with the engine's error.
    pub(crate) fn write_memory_md_inner<O: fmt::Write>(&mut self, w: &mut O) -> Result<(), Fail> {
        let w: &mut dyn fmt::Write = w;
        let mut failed = false;
        // `MEMORY_MD_TITLE` and a blank line.
        failed |= w
            .write_str(concat!(crate::memory::memory_md_title!(), "\n\n"))
            .is_err();
        let mut any_label = false;
        self.memory_catalog_dyn(&mut |l, refs| {
            if !any_label {
                failed |= w.write_str("## Summary Labels\n\n").is_err();
            }
            any_label = true;
            failed |= writeln!(w, "- {l} (refs={refs})").is_err();
            Ok(())
        })?;
        if any_label {
            failed |= w.write_char('\n').is_err();
        }
        let mut first = true;
        let count = self.memory_list_dyn(&mut |item| {
            if first {
                failed |= w.write_str("## Active Memories\n\n").is_err();
                first = false;
            }
            failed |= crate::memory::write_md_item(w, item).is_err();
        })?;
        if count == 0 {
            // `MEMORY_MD_EMPTY_LINE` and its newline.
            failed |= w
                .write_str(concat!(crate::memory::memory_md_empty_line!(), "\n"))
                .is_err();
        }
        if failed {
            return Err(fail!(InvalidInput, "the MEMORY.md writer failed"));
        }
        Ok(())
    }
}
