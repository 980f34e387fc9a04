//! The log's side of the sector table (feature `sector-table`, format 10;
//! `docs/DESIGN.md`, "Format 10 in stages"): releasing a sector out of ring
//! order, and rebuilding the table at mount from the sector headers and
//! the newest full checkpoint, which records it.
//!
//! Owns the rules that tie a release to flash. A sector released out of
//! order is *held* ([`Log::release_sector`]): a hole for every walk, still
//! counted in use and never opened, until a full checkpoint that records
//! the table without it commits ([`Log::settle_releases`]). So a mount
//! finds a released sector either in use, as it was (its header and its
//! contents, all dead: whatever lived there was moved first), or free as
//! the checkpoint says; never opened again while a mount would still take
//! its old contents for the ring's.
//!
//! Mount: a ring whose headers are format 9's arithmetic (every sector's
//! sequence is the head's less its distance behind the head) is laid out
//! by it, as before. Any other ring has holes: the table takes the
//! sequences the first pass read from the headers' first bytes, unchecked
//! ([`Log::table_from_prefixes`]). A full checkpoint of format 10 then
//! names each sector in use when it was written; a sector whose header
//! carries a newer sequence than any it names was opened since, and keeps
//! that one if its header read whole says so ([`Log::merge_table_entry`]);
//! when no such checkpoint is merged, every header is read whole and a
//! sound one puts its sector in use with its sequence
//! ([`Log::table_from_headers`]). A sequence opened since that no
//! sound header carries goes to a sector whose header rotted, placed by
//! its first chunk ([`Log::place_opened_since`]). The tail narrows the
//! table (`Log::set_tail_seq`).
//!
//! Invariants: a held sector is never opened, and a full checkpoint is
//! written before it is (the store writes no delta while one is held);
//! sequences in use never exceed the head's.
//!
//! Power loss: nothing here writes flash. A cut before the full checkpoint
//! that records a release lands leaves the sector in use, with only dead
//! bytes, and the next collection of it is cheap.

use embedded_storage::nor_flash::NorFlash;

use super::Log;
use crate::error::{fail, Fail};
use crate::layout::SectorHeader;

impl<F: NorFlash> Log<F> {
    /// Whether the table is not format 9's arithmetic: a release out of
    /// order, or a mount that read it from the headers or a checkpoint.
    pub fn table_reordered(&self) -> bool {
        self.table.on() && self.table.reordered()
    }

    /// The oldest sequence in use (the head's when the table is empty).
    pub fn oldest_in_table(&self) -> u32 {
        self.table.oldest().unwrap_or(self.head_seq)
    }

    /// Releases sector `index` out of ring order: everything live in it
    /// was moved. It is held (a hole for every walk, still counted in use)
    /// until a full checkpoint records the release
    /// ([`settle_releases`](Self::settle_releases)); then the head opens
    /// it in its turn (the first free sector after the head in physical
    /// order), and a stream that crossed into it is dead.
    #[allow(dead_code)] // stage 4's cleaner calls it; the tests do now
    pub fn release_sector(&mut self, index: u32) -> Result<(), Fail> {
        if !self.table.on() {
            return Err(fail!(
                LogicBug,
                "a release out of order without a sector table"
            ));
        }
        if index == self.head || self.table.seq_of(index).is_none() {
            return Err(fail!(
                LogicBug,
                "released a sector that is the head or not in use"
            ));
        }
        self.table.hold(index);
        self.table.reorder();
        if let Some(oldest) = self.table.oldest() {
            self.tail_seq = oldest;
        }
        self.check_table();
        Ok(())
    }

    /// Whether a sector released out of order waits for a full checkpoint
    /// to record it: the next checkpoint must be a full one.
    pub fn holds_release(&self) -> bool {
        self.table.on() && self.table.holds()
    }

    /// A full checkpoint that records the table committed: the sectors
    /// released out of order before it are free. If one of them now comes
    /// among those erased ahead of the head, the ones from it on are no
    /// longer counted erased, and the next write takes back what a chunk
    /// said of them ([`Log::settle_ahead`]).
    pub fn settle_releases(&mut self) {
        if !self.holds_release() {
            return;
        }
        let mut before = [0u32; super::ERASE_AHEAD];
        let mut sector = self.head;
        for slot in before.iter_mut().take(self.erased_ahead as usize) {
            sector = self.table.next_free(&self.geo, sector);
            *slot = sector;
        }
        self.table.settle_held();
        let mut sector = self.head;
        for k in 0..self.erased_ahead {
            sector = self.table.next_free(&self.geo, sector);
            if sector != before[k as usize] {
                self.erased_ahead = k;
                break;
            }
        }
        self.check_table();
    }

    /// The sector after `index` in ring order, past any hole: the one of
    /// the smallest sequence in use above its own (mount's scans);
    /// `index`'s physical successor where the table is off or `index` is
    /// not in use.
    pub fn next_in_ring(&self, index: u32) -> u32 {
        if self.table.on() {
            if let Some(at) = self.table.next_in_use(index) {
                return at;
            }
        }
        super::ring::next(&self.geo, index)
    }

    /// Mount, a ring whose sector headers' first bytes are not format 9's
    /// arithmetic: reads every header whole. If the sound ones are (a
    /// header's first bytes rotted), the table is format 9's ring ending
    /// at the head, as before; else it holds every sector whose header is
    /// sound, with its sequence (none above the head's), and a sector
    /// whose header is not is free until a checkpoint says otherwise.
    /// Returns the headers read.
    #[inline(never)]
    pub(super) fn table_from_headers(&mut self, head: u32, head_seq: u32) -> Result<u32, Fail> {
        let geo = self.geo;
        self.table.clear_for(&geo, head, head_seq);
        let ring = super::Ring {
            head,
            head_seq,
            tail_seq: head_seq.saturating_sub(geo.count - 1),
        };
        let mut in_order = true;
        for i in 0..geo.count {
            let seq = match self.io().sector_header(i)? {
                SectorHeader::Valid { seq, .. } => Some(seq),
                _ => None,
            };
            if seq.is_some() && seq != ring.seq_of(&geo, i) {
                in_order = false;
            }
            self.table.put(i, seq);
        }
        if in_order {
            self.table.fill(&geo, &ring);
        } else {
            self.table.put(head, Some(head_seq));
            self.table.filled();
        }
        Ok(geo.count)
    }

    /// Mount, a ring with holes: the table takes the sequences the first
    /// pass read from the headers' first bytes, unchecked. A full
    /// checkpoint of format 10 decides every sector it records, and the
    /// header of a sector it does not (opened since) is read whole when it
    /// is merged ([`merge_table_entry`](Self::merge_table_entry)); when
    /// none is merged, every header is read whole
    /// ([`check_table_headers`](Self::check_table_headers)). So a mount
    /// that finds such a checkpoint reads each header's first bytes once.
    pub(super) fn table_from_prefixes(&mut self, head: u32, head_seq: u32) {
        self.table.resolve_prefixes(head, head_seq);
        self.table.put(head, Some(head_seq));
        self.table.filled();
    }

    /// Mount: the table as the headers give it again (a full checkpoint
    /// merged into it failed its checks part-way). Reads every header;
    /// returns the headers read.
    #[inline(never)]
    pub fn reread_table(&mut self) -> Result<u32, Fail> {
        self.table_from_headers(self.head, self.head_seq)
    }

    /// Mount, no full checkpoint of format 10 merged: if the table holds
    /// headers' first bytes, unchecked, every header is read whole
    /// ([`table_from_headers`](Self::table_from_headers)). Returns the
    /// headers read.
    pub fn check_table_headers(&mut self) -> Result<u32, Fail> {
        match self.table.on() && self.table.unchecked() {
            true => self.table_from_headers(self.head, self.head_seq),
            false => Ok(0),
        }
    }

    /// Mount, loading a full checkpoint of format 10: sector `index` was
    /// in use with sequence `recorded` when it was written (`None`: free),
    /// and `newest` is the newest sequence it records. A sector the table
    /// has with a newer sequence was opened since and keeps it, if its
    /// header says so whole (read here when the table holds headers' first
    /// bytes only); any other takes what the checkpoint recorded. Returns
    /// the headers read (0 or 1).
    pub fn merge_table_entry(
        &mut self,
        index: u32,
        recorded: Option<u32>,
        newest: u32,
    ) -> Result<u32, Fail> {
        let mut read = 0;
        if let Some(now) = self.table.seq_of(index).filter(|&s| s > newest) {
            if !self.table.unchecked() {
                return Ok(0);
            }
            read = 1;
            if let SectorHeader::Valid { seq, .. } = self.io().sector_header(index)? {
                if seq == now {
                    return Ok(1);
                }
            }
        }
        self.table.put(index, recorded);
        Ok(read)
    }

    /// Mount: the table now holds what the full checkpoint at `checkpoint`
    /// recorded, `newest` the newest sequence it records; it is not format
    /// 9's arithmetic any more (the tail narrows it). A sector opened since
    /// whose header rotted is placed ([`place_opened_since`](Self::place_opened_since)).
    pub fn table_merged(&mut self, checkpoint: u32, newest: u32) -> Result<(), Fail> {
        self.table.put(self.head, Some(self.head_seq));
        self.place_opened_since(checkpoint, newest)?;
        self.table.filled();
        self.table.reorder();
        self.table.checked();
        Ok(())
    }

    /// Mount: every sequence from `newest + 1` to the head's was opened
    /// after the full checkpoint at `checkpoint` and is in use (the tail
    /// never passes the newest full checkpoint). One that no sector
    /// carries belongs to a sector whose header rotted at rest: the
    /// checkpoint recorded it free, or in use with the sequence it had
    /// before, and a hole, unlike format 9's ring, gives no sequence by
    /// place. Such a sector's first chunk is newer than the checkpoint
    /// (one the checkpoint went on into, not recorded in use by it, begins
    /// with the checkpoint's own sequence), and batch sequences grow with
    /// sector sequences: the missing sequences go to those sectors in the
    /// order of their first chunks. Nothing is placed where that order is
    /// not clear (fewer such sectors than sequences missing, or two whose
    /// first chunks carry the same sequence): those keep what the
    /// checkpoint recorded, as before. Reads headers only when a sequence
    /// is missing.
    #[inline(never)]
    fn place_opened_since(&mut self, checkpoint: u32, newest: u32) -> Result<(), Fail> {
        let geo = self.geo;
        let present = (0..geo.count)
            .filter(|&i| self.table.seq_of(i).is_some_and(|s| s > newest))
            .count() as u32;
        let missing = self.head_seq.saturating_sub(newest).saturating_sub(present);
        if missing == 0 {
            return Ok(());
        }
        let Some(ck) = self.io().chunk_header(checkpoint)? else {
            return Ok(());
        };
        // The sequence of the last first chunk placed; the sequence placed
        // last.
        let (mut last, mut seq) = (None::<u32>, newest);
        for _ in 0..missing {
            // The sector with the oldest first chunk not placed yet, and
            // whether another begins with the same sequence.
            let mut pick: Option<(u32, u32)> = None;
            let mut tied = false;
            for i in 0..geo.count {
                let recorded = self.table.seq_of(i);
                if i == self.head || recorded.is_some_and(|s| s > newest) {
                    continue;
                }
                if self.io().sector_header(i)? != SectorHeader::Invalid {
                    continue;
                }
                let Some(first) = self.io().chunk_header(geo.first_chunk(i))? else {
                    continue;
                };
                let since = first.seq > ck.seq || (first.seq == ck.seq && recorded.is_none());
                if !since || last.is_some_and(|l| first.seq <= l) {
                    continue;
                }
                match pick {
                    Some((_, p)) if first.seq > p => {}
                    Some((_, p)) if first.seq == p => tied = true,
                    _ => {
                        pick = Some((i, first.seq));
                        tied = false;
                    }
                }
            }
            let Some((index, first)) = pick.filter(|_| !tied) else {
                break;
            };
            seq += 1;
            while self.table.index_of_seq(seq).is_some() {
                seq += 1;
            }
            self.table.put(index, Some(seq));
            last = Some(first);
        }
        Ok(())
    }
}
