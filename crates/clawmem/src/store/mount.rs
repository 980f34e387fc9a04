//! Format and mount: the ring opened, the newest checkpoint, and the chunks
//! written after it (`docs/FORMAT.md`, "Mount").
//!
//! Mount has the log find the ring ([`Log::open`](crate::log::Log::open),
//! `log/open.rs`: the sector header pass and the walk of the head sector),
//! loads the newest checkpoint (`checkpoint.rs`), and scans the chunk
//! headers after it, handing each committed batch to
//! [`apply`](Store::apply) (`replay.rs`). It never reads the whole
//! partition.
//!
//! Invariants the scan relies on are the head walk's: batch sequence
//! numbers grow by one from chunk to chunk within a sector, and only the
//! last chunk of a sector can be torn. A chunk followed by anything but the
//! next sequence number is checked, and one that fails is left out; every
//! loop is bounded by the geometry.
//!
//! Power loss: a cut during [`format`](Store::format) leaves the old store
//! (possibly missing erased sectors, which mount tolerates) or a blank
//! partition. Mount itself writes only to record what it recovered: a
//! checkpoint when the head was sealed, no checkpoint was found (so the
//! next mount never revisits the damage) or a power cut spent bytes at the
//! head (which the checkpoint then carries, so that later mounts count
//! them as the cut's waste), a header given back to a sector
//! whose wipe by a scrub was cut, and a memory compaction after a repair of
//! the memory chain. Each is an ordinary write: cut, it leaves the state
//! before it, and the next mount recovers the same way.

use core::borrow::BorrowMut;

use embedded_storage::nor_flash::NorFlash;
use heapless::Vec;

use super::checkpoint::DELTAS_PER_FULL;
use super::memory::MemState;
use super::{Config, MountMode, MountReport, Priority, Store, Work};
use crate::error::{fail, Error, Fail};
use crate::layout::{geometry, kind, ChunkHeader, SectorHeader, NO_ADDR};
use crate::log::{ring, Log, Opened, Slot};

#[cfg(any(test, feature = "by-value"))]
impl<F: NorFlash, const MAX_SESSIONS: usize> Store<F, MAX_SESSIONS, Work> {
    /// [`format_in`](Self::format_in) with a work area of its own inside
    /// the `Store` ([`Work`] more of it), for hosts (the `by-value`
    /// feature).
    ///
    /// Power loss: as [`format_into`](Self::format_into).
    pub fn format(flash: F, config: Config) -> Result<Self, Error<F::Error>> {
        Self::format_in(flash, Work::new(), config)
    }

    /// [`mount_in`](Self::mount_in) with a work area of its own inside the
    /// `Store` ([`Work`] more of it), for hosts (the `by-value` feature). A
    /// firmware lends one, in a RAM of its choice, and mounts in place with
    /// [`mount_into`](Self::mount_into).
    ///
    /// Power loss: mount writes nothing unless it formats.
    pub fn mount(flash: F, config: Config, mode: MountMode) -> Result<Self, Error<F::Error>> {
        Self::mount_in(flash, Work::new(), config, mode)
    }
}

impl<F: NorFlash, const MAX_SESSIONS: usize, W: BorrowMut<Work>> Store<F, MAX_SESSIONS, W> {
    /// [`format_into`](Self::format_into), returning the store by value
    /// (the `by-value` feature): the store passes through the stack on its
    /// way to the caller, so a firmware formats in place instead.
    ///
    /// Power loss: as [`format_into`](Self::format_into).
    #[cfg(any(test, feature = "by-value"))]
    pub fn format_in(flash: F, work: W, config: Config) -> Result<Self, Error<F::Error>> {
        let mut slot = None;
        Self::format_into(&mut slot, flash, work, config)?;
        slot.ok_or(Error::LogicBug("format left no store"))
    }

    /// Formats the partition: erases every sector that holds a store (of any
    /// version) and writes an empty store, built in `slot`, where it will
    /// live, never copied through the stack (a firmware keeps it in a
    /// static). Everything stored is lost. `work` is the engine's working
    /// RAM ([`Work`]), owned or lent. `slot` is `None` on an error.
    ///
    /// Power loss: a cut leaves either the old store (possibly missing erased
    /// sectors, which mount tolerates) or a blank partition; format again.
    pub fn format_into(
        slot: &mut Option<Self>,
        flash: F,
        work: W,
        config: Config,
    ) -> Result<(), Error<F::Error>> {
        Self::in_place(slot, flash, work, config, None)
    }

    /// The store of a format or mount, built in `slot`, where it will live:
    /// an empty state over `log`, whose mount report, checkpoint sector
    /// sequence and delta count are a mount's (what `opened` found, the
    /// head's sequence, a full checkpoint due) or a format's (`None`: 1
    /// and 0, as its first checkpoint needs). A literal written into the
    /// slot, so that no second `Store` passes through the stack (a
    /// constructor's return value did: measured, the QEMU remount went
    /// from 3,004 B to 7,132 B); out of line, so that the temporary the
    /// literal is built in is off the stack before the store's first write
    /// or the mount's scan.
    #[inline(never)]
    fn install<'a>(
        slot: &'a mut Option<Self>,
        log: Log<F>,
        work: W,
        config: Config,
        (reserve_gc, reserve_maintenance): (u32, u32),
        opened: Option<&Opened>,
    ) -> &'a mut Self {
        let (mount_report, checkpoint_sector_seq, deltas_since_full) = match opened {
            Some(o) => (
                MountReport {
                    sector_headers: o.sector_headers,
                    damaged_headers: o.damaged_headers,
                    sealed_head: o.sealed_head,
                    resumed_head: o.resumed_head,
                    ..MountReport::default()
                },
                log.head_seq(),
                DELTAS_PER_FULL,
            ),
            None => (MountReport::default(), 1, 0),
        };
        slot.insert(Store {
            log,
            sessions: Vec::new(),
            dir: super::directory::Dir::EMPTY,
            pinned: NO_ADDR,
            config,
            next_uid: 1,
            checkpoint_sector_seq,
            full_checkpoint: NO_ADDR,
            deltas_since_full,
            deleted_since_full: Vec::new(),
            deleted_written: 0,
            bytes_since_checkpoint: 0,
            reserve_gc,
            reserve_maintenance,
            mount_report,
            in_gc: false,
            idle_credit: 0,
            cut_waste: 0,
            cut_waste_seq: 0,
            objects: Vec::new(),
            mem: MemState::EMPTY,
            #[cfg(feature = "memory")]
            mem_damaged: 0,
            scan_damaged: NO_ADDR,
            sessions_dropped: 0,
            #[cfg(feature = "sector-table")]
            cleaning: super::report::Cleaning::default(),
            #[cfg(feature = "memory")]
            mem_links: Vec::new(),
            #[cfg(feature = "memory")]
            stage: crate::memory::StageNote::new(),
            work,
        })
    }

    /// Erases every sector of `log`'s partition that holds a store, and
    /// opens the first sector of an empty ring.
    fn format_ring(log: &mut Log<F>) -> Result<(), Fail> {
        // Sector 0 is left to `open_next_sector`, which erases it last (and
        // carries its erase count on): erasing it here as well would wear
        // it twice for one format.
        for i in (1..log.geo().count).rev() {
            let h = log.io().sector_header(i)?;
            if matches!(h, SectorHeader::Valid { .. } | SectorHeader::Newer { .. }) {
                log.erase_sector(i)?;
            }
        }
        log.open_next_sector()
    }

    /// The end of a format or mount into `slot`: the public error of `r`,
    /// with the slot emptied, or the store left in it.
    // Out of line: format and mount share it.
    #[inline(never)]
    fn settle(slot: &mut Option<Self>, r: Result<(), Fail>) -> Result<(), Error<F::Error>> {
        let (Err(f), Some(store)) = (r, slot.as_mut()) else {
            return Ok(());
        };
        let e = store.public_error(f);
        *slot = None;
        Err(e)
    }

    /// [`mount_into`](Self::mount_into), returning the store by value (the
    /// `by-value` feature): the store passes through the stack on its way
    /// to the caller, so a firmware mounts in place instead.
    ///
    /// Power loss: as [`mount_into`](Self::mount_into).
    #[cfg(any(test, feature = "by-value"))]
    pub fn mount_in(
        flash: F,
        work: W,
        config: Config,
        mode: MountMode,
    ) -> Result<Self, Error<F::Error>> {
        let mut slot = None;
        Self::mount_into(&mut slot, flash, work, config, mode)?;
        slot.ok_or(Error::LogicBug("mount left no store"))
    }

    /// Mounts the store on `flash` into `slot`, in place: the store is built
    /// where it will live, never copied through the stack (a firmware keeps
    /// it in a static). `work` is the engine's working RAM ([`Work`], owned
    /// or lent). `slot` is `None` on an error.
    ///
    /// Reads every sector header, the head sector, the newest checkpoint and
    /// the chunk headers written after it. A torn write at the head is
    /// ignored and its sector sealed; an image written by a newer format is
    /// refused; a blank or foreign partition is [`Error::NotFormatted`]
    /// unless `mode` allows formatting a blank one.
    ///
    /// Power loss: a mount of a sound image writes nothing. It writes only
    /// to record a recovery (a checkpoint after a torn head or a scan of the
    /// whole ring, a sector header given back, a memory compaction after
    /// damage at rest) or to format a blank partition, and each of those
    /// writes is atomic.
    pub fn mount_into(
        slot: &mut Option<Self>,
        flash: F,
        work: W,
        config: Config,
        mode: MountMode,
    ) -> Result<(), Error<F::Error>> {
        Self::in_place(slot, flash, work, config, Some(mode))
    }

    /// [`format_into`](Self::format_into) (`mode` `None`) and
    /// [`mount_into`](Self::mount_into), which formats a blank partition
    /// if `mode` allows. The engine's errors become public ones here, where
    /// the log (and the store) that keeps their parked parts is at hand.
    fn in_place(
        slot: &mut Option<Self>,
        flash: F,
        work: W,
        config: Config,
        mode: Option<MountMode>,
    ) -> Result<(), Error<F::Error>> {
        *slot = None;
        let geo = geometry(&flash, config.flash_units).map_err(Error::<F::Error>::Config)?;
        let reserves = Self::check_config(&geo, &config)?;
        // A format's ring: head sequence 0 and tail 1, an empty ring
        // (opening sector 0 takes sequence 1). A mount's is where
        // `Log::open` finds it. (The head is the sector before sector 0.)
        let mut log = Log::new(flash, geo, ring::prev(&geo, 0), geo.capacity(), 1);
        // 1. and 2.: the sector headers and the head sector (`log/open.rs`);
        // `None`: format (asked, or the partition is blank and may be).
        let opened = match mode {
            Some(mode) => log.open(mode == MountMode::FormatIfBlank),
            None => Ok(None),
        };
        let opened = match opened {
            Ok(None) => Self::format_ring(&mut log).map(|()| None),
            r => r,
        };
        let opened = match opened {
            Ok(o) => o,
            Err(f) => return Err(log.parked().error(f)),
        };
        let store = Self::install(slot, log, work, config, reserves, opened.as_ref());
        let r = store.mount_finish(opened.as_ref());
        Self::settle(slot, r)
    }

    /// Steps 3 on of a mount, on the store built in place, from what
    /// [`Log::open`] found (`opened`): the newest checkpoint (else a scan
    /// of the whole ring), the scan after it, the repairs, the tail moved
    /// on past sectors collected since the checkpoint, and the writes that
    /// record a recovery. A format (`None`) writes its first checkpoint
    /// (one call site for both, so that the store is installed by one).
    #[inline(never)]
    fn mount_finish(&mut self, opened: Option<&Opened>) -> Result<(), Fail> {
        let Some(o) = opened else {
            return self.write_checkpoint();
        };
        let (head, head_seq) = (self.log.head(), self.log.head_seq());
        let head_valid_end = o.head_valid_end;
        // 3. The newest checkpoint, else a scan of the whole ring: one that
        // begins in the head sector, else one that ends there (found from
        // the head's first chunk), else the one the head's header names.
        // (With the sector table, a ring with holes: if none loads while
        // the table holds the headers' first bytes, unchecked, the headers
        // are read whole and the three are tried again, `log/table.rs`.)
        #[cfg(feature = "sector-table")]
        let passes = 2;
        #[cfg(not(feature = "sector-table"))]
        let passes = 1;
        let mut start = None;
        for pass in 0..passes {
            for i in 0..3 {
                let c = match i {
                    0 => o.head_checkpoint,
                    1 => match o.continued_checkpoint {
                        Some(seq) => self.log.checkpoint_ending_in(seq)?.unwrap_or(NO_ADDR),
                        None => NO_ADDR,
                    },
                    _ => o.header_checkpoint,
                };
                if c != NO_ADDR && self.load_checkpoint(c)? {
                    start = Some(c);
                    break;
                }
            }
            if start.is_some() || pass + 1 == passes {
                break;
            }
            #[cfg(feature = "sector-table")]
            {
                let read = self.log.check_table_headers()?;
                if read == 0 {
                    break;
                }
                self.mount_report.sector_headers += read;
            }
        }
        let scan_from = match start {
            Some(c) => {
                self.mount_report.from_checkpoint = true;
                self.log.set_checkpoint(c);
                let full = self.full_checkpoint;
                self.checkpoint_sector_seq = self.seq_at(full).ok_or(self.log.parked().at(
                    fail!(Corrupted, "the checkpoint lies outside the ring"),
                    full,
                ))?;
                c
            }
            None => {
                // Walk back over consecutive sector sequences to the tail.
                let mut tail_seq = head_seq;
                let mut i = head;
                // With holes (format 10), every sector whose header is
                // sound is in use (the table read them whole): the tail is
                // the oldest. A released sector not reopened is scanned
                // too; what superseded its records (the copies that
                // emptied it, a delete) is newer in the scan's order.
                #[cfg(feature = "sector-table")]
                if self.log.table_reordered() {
                    tail_seq = self.log.oldest_in_table();
                    i = self.log.sector_of_seq(tail_seq).unwrap_or(head);
                }
                #[cfg(feature = "sector-table")]
                let walk = !self.log.table_reordered();
                #[cfg(not(feature = "sector-table"))]
                let walk = true;
                for _ in 1..self.log.geo().count * u32::from(walk) {
                    let p = ring::prev(&self.log.geo(), i);
                    let seq = tail_seq.wrapping_sub(1);
                    if !self.log.header_seq_is(p, seq)? {
                        break;
                    }
                    tail_seq = seq;
                    i = p;
                }
                self.log.set_tail_seq(tail_seq);
                self.sessions.clear();
                self.objects.clear();
                self.mem = MemState::EMPTY;
                self.next_uid = 1;
                self.deltas_since_full = DELTAS_PER_FULL;
                self.log.geo().first_chunk(i)
            }
        };
        // Sectors at the tail end whose header does not carry the sequence
        // the ring expects were being reopened when power failed: free.
        while self.log.tail_seq() < self.log.head_seq() {
            // (A sequence no sector carries is free too.)
            if let Some(idx) = self.log.sector_of_seq(self.log.tail_seq()) {
                if self.log.header_seq_is(idx, self.log.tail_seq())? {
                    break;
                }
            }
            self.log.set_tail_seq(self.log.tail_seq() + 1);
        }
        self.log.mount_done();
        let uncommitted = self.scan(scan_from, head_valid_end)?;
        self.resolve_stubs()?;
        let cut = self.note_cut_waste(uncommitted, head_valid_end);
        // A build without long-term memory cannot collect memory records
        // (that needs a memory compaction): it refuses such a store before
        // writing anything, so that nothing stored is lost.
        #[cfg(not(feature = "memory"))]
        if self.mem.root != NO_ADDR || self.mem.head != NO_ADDR {
            return Err(fail!(Config, "the store holds long-term memory; mount it with a clawmem built with the `memory` feature"));
        }
        // A sector inside the ring without its header was being wiped (a
        // scrub) when power failed; its contents had been moved: give it
        // its header back.
        let mut seq = self.log.tail_seq();
        while seq < self.log.head_seq() {
            // (From the tail up to below the head; a hole is passed over.)
            let Some(idx) = self.log.sector_of_seq(seq) else {
                seq += 1;
                continue;
            };
            // The first 12 bytes (magic, version, flags, sequence) tell a
            // sector that was wiped or is not this ring's; the rest (erase
            // count, checkpoint, CRC) matter only for the head, which the
            // ring pass checked whole. So a sound prefix is all this reads.
            if self.log.header_prefix_is(idx, seq)? {
                seq += 1;
                continue;
            }
            if self.log.header_seq_is(idx, seq)? {
                // Sound whole.
            } else if self.log.first_chunk_sound(idx)? {
                // A header damaged at rest over sound contents: the sector
                // is kept, its sequence known from its place in the ring,
                // and collected in its turn. (A wipe's erase cut early can
                // look the same; what it held had been moved, nothing
                // points into it, and a scrub run again finds the copies
                // in it: scrub looks at every sector.)
                self.mount_report.damaged_headers += 1;
            } else {
                self.log.erase_sector(idx)?;
                let erase_count = self.log.head_erase_count();
                self.log.write_sector_header(idx, seq, erase_count)?;
            }
            seq += 1;
        }
        // Sectors collected after the checkpoint was written hold nothing
        // live: free again, as the running store had them (and those a
        // deletion left dead, which it releases when next short of room).
        if self.mount_report.from_checkpoint {
            self.release_dead_tail()?;
        }
        if cut || self.mount_report.sealed_head || !self.mount_report.from_checkpoint {
            // Record the recovered state, so that the next mount reads the
            // same and never revisits the damage, and what a cut spent
            // (this checkpoint too), so that later mounts count it as well.
            if cut {
                let framed = self.checkpoint_len() + 2 * crate::layout::CHUNK_HEADER_LEN;
                self.cut_waste = self.cut_waste.saturating_add(framed);
            }
            self.write_checkpoint_with(Priority::Gc)?;
        }
        #[cfg(feature = "memory")]
        if !self.mem_links.is_empty() || self.mount_report.salvaged_memory_index {
            // Links repaired in RAM are not on flash: once a checkpoint
            // covers the records after them, a later mount would not
            // repair them again. A memory compaction writes an index that
            // needs none of them, nor the damaged index. Without room for
            // it, the repair holds only until then.
            let _ = self.mem_compact_with(None, Priority::Maintenance);
        }
        Ok(())
    }

    /// Applies every committed batch from `from` to `head_end` in the head
    /// sector.
    /// Returns the first chunk of a batch left uncommitted at the head, if
    /// any (`NO_ADDR`: none; a word comes back in registers).
    #[inline(never)]
    fn scan(&mut self, from: u32, head_end: u32) -> Result<u32, Fail> {
        let mut pos = from;
        let mut sector = self.log.geo().sector_of(from);
        // A multi-chunk batch being followed: (first chunk, header).
        let mut pending: Option<(u32, ChunkHeader)> = None;
        // The sector before ended in damage with nothing sound after it,
        // not counted yet: if the next chunk continues a batch, that batch's
        // first part was what the damage hit (a torn write leaves no sound
        // continuation: later chunks are written after it), and it is lost.
        let mut left_out = false;
        let skip_seq = match self.log.io().chunk_header(from)? {
            Some(h) if h.kind == kind::CHECKPOINT && self.mount_report.from_checkpoint => {
                Some(h.seq)
            }
            _ => None,
        };
        let mut scanned_bytes = 0u32;
        // (One more pass than there are sectors; a half-open range: an
        // inclusive one's iterator is a function of its own.)
        for _ in 0..self.log.geo().count + 1 {
            // The slot after the current chunk, read once for both the
            // "last in its sector" test and the next step.
            let mut lookahead: Option<Slot> = None;
            // (`NO_ADDR`: none yet in this sector.)
            let mut last_start = NO_ADDR;
            loop {
                if sector == self.log.head() && pos >= head_end {
                    break;
                }
                let slot = match lookahead.take() {
                    Some(s) => s,
                    None => self.log.slot_at(sector, pos)?,
                };
                let c = match slot {
                    Slot::Chunk(c) => c,
                    Slot::End => break,
                    Slot::Damaged => {
                        // Damage at rest: find the next sound chunk after the
                        // last one applied, so that the damage stays confined.
                        let from = match last_start {
                            NO_ADDR => pos,
                            a => a,
                        } + self.log.geo().write;
                        self.note_scan_damage(pending.map_or(pos, |(a, _)| a), 0);
                        match self.log.resync(sector, from)? {
                            Some(p) if p != pos => {
                                self.mount_report.ignored_batches += 1;
                                pos = p;
                                continue;
                            }
                            _ => {
                                left_out = true;
                                break;
                            }
                        }
                    }
                };
                let after_damage = core::mem::take(&mut left_out);
                last_start = pos;
                let next = pos + self.log.geo().chunk_size(c.header.len);
                // Batch sequence numbers grow by one from chunk to chunk
                // within a sector: a chunk followed by anything else may
                // have a length damaged at rest, which would pass over the
                // chunks after it.
                let (is_last_in_sector, suspect) = if sector == self.log.head() && next > head_end {
                    // No chunk reaches past the head's end but by a
                    // damaged length.
                    (false, true)
                } else {
                    let s = self.log.slot_at(sector, next)?;
                    let gap = match &s {
                        Slot::Chunk(n) => n.header.seq != c.header.seq.wrapping_add(1),
                        _ => false,
                    };
                    if sector == self.log.head() && next == head_end {
                        // What lies past the head's sound end: a chunk whose
                        // sequence skips one, written after this one tore (the
                        // head walk resumed after it) and then torn itself.
                        (false, gap)
                    } else {
                        let last = !matches!(s, Slot::Chunk(_));
                        lookahead = Some(s);
                        (sector != self.log.head() && last, gap)
                    }
                };
                pos = next;
                // Every chunk seen, the checkpoint's own included, raises the
                // next sequence number: a checkpoint stores the number it was
                // written *before* taking its own, and when it lies before the
                // head sector the head walk never sees it; a batch that then
                // reused its number would be skipped as part of it.
                self.log.raise_next_seq(c.header.seq.wrapping_add(1));
                if Some(c.header.seq) == skip_seq {
                    continue;
                }
                scanned_bytes = scanned_bytes.saturating_add(c.header.len);
                self.mount_report.chunks_scanned += 1;
                // A torn chunk is the last of its sector, or followed by a
                // sequence gap where a mount wrote on after it (`log/open.rs`,
                // "Torn head"); check the last if it ends a batch, and check
                // a suspect one. One that fails is left out, and the walk goes
                // on at the next sound chunk after its start.
                if (is_last_in_sector && c.header.is_last() || suspect) && !self.log.crc_ok(&c)? {
                    self.note_scan_damage(pending.map_or(c.address, |(a, _)| a), 1);
                    pending = None;
                    lookahead = None;
                    match self.log.resync(sector, c.address + self.log.geo().write)? {
                        Some(p) if sector != self.log.head() || p < head_end => pos = p,
                        _ => break,
                    }
                    continue;
                }
                // The same sequence number and kind as the batch being
                // followed: its continuation (even if a rotted flag calls
                // it a first chunk; a new batch has a new number).
                let continues =
                    pending.is_some_and(|(_, h)| h.seq == c.header.seq && h.kind == c.header.kind);
                if c.header.is_first() && !continues {
                    if let Some((a, _)) = pending {
                        self.note_scan_damage(a, 1);
                    }
                    pending = Some((c.address, c.header));
                } else if !continues {
                    // A continuation of nothing: a first chunk whose flags
                    // rotted, or the rest of a batch left out (counted here
                    // if its first part was lost to damage not counted).
                    let at = pending.map_or(c.address, |(a, _)| a);
                    self.note_scan_damage(at, u32::from(after_damage));
                    pending = None;
                    continue;
                }
                if c.header.is_last() {
                    let taken = pending.take();
                    // (A batch that went on past a hole, stale, is not
                    // applied: below.)
                    #[cfg(feature = "sector-table")]
                    let taken = taken.filter(|&(a, _)| a != NO_ADDR);
                    if let Some((addr, h)) = taken {
                        if h.kind == kind::CHECKPOINT {
                            // A newer checkpoint: the next one is due from
                            // here, and a full one is the base (a read error
                            // leaves it unused).
                            if matches!(self.checkpoint_met(addr), Ok(true)) {
                                scanned_bytes = 0;
                            }
                        } else if self.apply(addr, &h).is_err() {
                            self.note_scan_damage(addr, 1);
                        }
                    }
                }
            }
            if sector == self.log.head() {
                break;
            }
            // (In ring order: the sector carrying the next sequence, past
            // any hole.)
            #[cfg(feature = "sector-table")]
            {
                let seq = self.log.seq_of_sector(sector);
                sector = self.log.next_in_ring(sector);
                // A batch going on past a hole is stale: the head opens a
                // batch's sectors one after another, and the sector it went
                // on in was let go (what was live in it moved first) and
                // may have been opened again. Its last chunk, if the walk
                // meets it, must not glue it to its first.
                if self.log.seq_of_sector(sector) != seq.and_then(|q| q.checked_add(1)) {
                    pending = pending.map(|(_, h)| (NO_ADDR, h));
                }
            }
            #[cfg(not(feature = "sector-table"))]
            {
                sector = self.log.io().successor(sector);
            }
            pos = self.log.geo().first_chunk(sector);
        }
        // The next checkpoint is due as if no remount had happened.
        self.bytes_since_checkpoint = scanned_bytes;
        Ok(pending.map_or(NO_ADDR, |(a, _)| a))
    }

    /// Mount: what a cut spent at the head, from the first chunk of a
    /// batch left uncommitted (else the torn chunk, or a sealed head's
    /// sound end) to the write position. Those bytes come back only when
    /// the ring collects their sectors; until then the store uses the cut
    /// slack and collection is not held to the copy limit, so that a store
    /// cut near full takes what the uncut store took (`dry_run.rs`,
    /// `collectable`).
    /// They add to what earlier cuts spent, if the ring has not collected
    /// that yet (the checkpoint loaded says). `true` if a cut spent any.
    /// (`uncommitted`: `NO_ADDR` if none.)
    fn note_cut_waste(&mut self, uncommitted: u32, head_valid_end: u32) -> bool {
        let torn = self.mount_report.sealed_head || self.mount_report.resumed_head;
        let from = match uncommitted {
            NO_ADDR if torn => head_valid_end,
            NO_ADDR => return false,
            a => a,
        };
        let geo = self.log.geo();
        let Some(seq) = self.seq_at(from) else {
            return false;
        };
        let head_seq = self.log.head_seq();
        let space = geo.sector_payload_space();
        let head_room = self.log.head_room();
        let head_used = space.saturating_sub(head_room);
        let first = geo.sector_end(from).saturating_sub(from);
        let spent = if seq == head_seq {
            first.saturating_sub(head_room)
        } else {
            first + (head_seq - seq - 1) * space + head_used
        };
        self.cut_waste = self.cut_waste_now().0.saturating_add(spent);
        self.cut_waste_seq = head_seq;
        true
    }
}
