//! Erasing ahead: free sectors after the head erased in idle time, so that
//! opening them costs only the header, and said on flash so that a remount
//! trusts them (format 8).
//!
//! Owns the erase-ahead state of [`Log`]: how many free sectors after the
//! head are erased, the erase counts their headers will carry, which of
//! them a chunk says are erased, and the caller's largest burst of writes
//! between idle calls (how far ahead to look).
//!
//! Invariants: the sectors erased ahead are the next ones after the head,
//! free, erased to the end; a chunk's count of them (flags bits 2..3) never
//! exceeds the erases done before it was written, and is above 0 only if a
//! header-only chunk still fits after it; a mount trusts only what the
//! head's last sound chunk says (`open.rs`, step 3), and before the first
//! write or erase reads each trusted sector through and takes back what is
//! said but no longer trusted ([`Log::settle_ahead`]).
//!
//! Power loss: a chunk says a sector is erased only after its erase is done,
//! and no sector a chunk still says is erased is erased again: after a
//! mount that trusts fewer than the head's last chunk says, a header-only
//! chunk takes the rest back before anything is written or erased
//! ([`Log::settle_ahead`]). So an erase that is cut leaves a free sector no
//! chunk names, erased again when opened. The header-only chunk, torn, is a
//! torn chunk at the head that says nothing; the opening of a sector erased
//! ahead to hold it (the head had no room), cut, leaves that sector without
//! a header, free, and nothing said of the others.

use embedded_storage::nor_flash::NorFlash;

use super::{Log, Slices, ERASE_AHEAD, MIN_CHUNK_PAYLOAD, NOTE_ROOM};
use crate::error::{fail, Fail};
use crate::layout::kind::ERASED_AHEAD;
use crate::layout::CHUNK_HEADER_LEN;

impl<F: NorFlash> Log<F> {
    /// Mount is done and the tail known: the sectors trusted as erased
    /// ahead (`open.rs`, step 3) are free ones, or none is. What the head's
    /// last chunk says stays as it is said ([`settle_ahead`](Self::settle_ahead)).
    pub fn mount_done(&mut self) {
        // The mount trusted the sectors physically after the head; the
        // head opens the table's free ones after it, which are the same
        // unless a sector in use or held comes between (format 10): then
        // none is trusted.
        #[cfg(feature = "sector-table")]
        for k in 1..=self.erased_ahead {
            if self.opened_after_head(k) != super::ring::after(&self.geo, self.head, k) {
                self.erased_ahead = 0;
            }
        }
        if self.erased_ahead > self.free_sectors() {
            self.erased_ahead = 0;
            self.ahead_unread = 0;
        }
    }

    /// Before the first write or erase after a mount: reads the sectors
    /// trusted as erased ahead through (one with anything not erased,
    /// damage at rest, is trusted no more, nor those after it), and if the
    /// head's last chunk says more are erased than are trusted now, says the
    /// truth in a header-only chunk first. So no sector a chunk says is
    /// erased is ever erased again while that chunk has the last word: an
    /// erase of it that was cut could look erased to a later mount. The
    /// room is there: a chunk says a sector is erased only if a header-only
    /// chunk still fits after it (`write_chunks`). Does nothing otherwise.
    #[inline(never)]
    pub fn settle_ahead(&mut self) -> Result<(), Fail> {
        if self.ahead_unread > 0 {
            self.ahead_unread = 0;
            let mut sector = self.head;
            for k in 0..self.erased_ahead {
                sector = self.to_open_after(sector);
                let start = self.geo.sector_start(sector);
                if !self.erased(start, self.geo.sector)? {
                    self.erased_ahead = k;
                    break;
                }
            }
        }
        if self.ahead_said > self.erased_ahead {
            let room = self.head_room();
            if room < NOTE_ROOM {
                return Err(fail!(LogicBug, "no room to take back sectors said erased"));
            }
            self.write_batch_settled(ERASED_AHEAD, &mut Slices::<0>([]))?;
            if self.ahead_said > self.erased_ahead {
                return Err(fail!(LogicBug, "sectors said erased not taken back"));
            }
        }
        Ok(())
    }

    /// Erases the next free sector after the head that is not erased yet,
    /// if fewer than [`ERASE_AHEAD`] are and one is free. `false` if there
    /// was nothing to do.
    ///
    /// Power loss: the sector is free before and after; a cut leaves it
    /// without a header, and it is erased again when opened.
    pub fn erase_ahead(&mut self) -> Result<bool, Fail> {
        self.settle_ahead()?;
        if !self.erase_ahead_due() {
            return Ok(false);
        }
        let k = self.erased_ahead;
        // (`k` is below the free sectors.)
        let index = self.opened_after_head(1 + k);
        let count = self.erase_counted(index, 1)?;
        // (`k` is below ERASE_AHEAD: erase_ahead_due.)
        if let Some(slot) = self.ahead_counts.get_mut(k as usize) {
            *slot = count;
        }
        self.erased_ahead = k + 1;
        Ok(true)
    }

    /// Whether [`erase_ahead`](Self::erase_ahead) has a sector to erase:
    /// the bytes the caller may write before the next idle call (the most
    /// it wrote between two of them in this mount, at least half a sector)
    /// would open more sectors than are erased ahead (at most
    /// [`ERASE_AHEAD`]), and one more is free.
    ///
    /// Once one is erased, the rest up to [`ERASE_AHEAD`] follow before
    /// it is said ([`say_erased_ahead`](Self::say_erased_ahead)): one
    /// chunk says them all.
    pub fn erase_ahead_due(&self) -> bool {
        let payload = self.geo.sector_payload_space();
        let want = self.burst.saturating_mul(2).max(payload / 2);
        let room = self.head_room();
        let need = if room >= want {
            0
        } else if room.saturating_add(payload) >= want {
            1
        } else {
            ERASE_AHEAD as u32
        };
        // Once erasing has begun and is not yet said, it goes on to the
        // most: one chunk then says them all.
        let need = if self.erased_ahead > self.ahead_said {
            ERASE_AHEAD as u32
        } else {
            need
        };
        self.erased_ahead < need.min(ERASE_AHEAD as u32) && self.free_sectors() > self.erased_ahead
    }

    /// Whether sectors were erased ahead that no chunk of the head says are
    /// (a remount would erase them again), and a header-only chunk can say
    /// so: in the head, or, if the head has no room left for one that may
    /// say it, at the start of the next sector erased ahead, when at least
    /// one more is erased after it ([`say_needs_open`](Self::say_needs_open)).
    pub fn erased_ahead_unsaid(&self) -> bool {
        self.erased_ahead > self.ahead_said && (!self.say_needs_open() || self.erased_ahead >= 2)
    }

    /// Whether the head has too little room left for a header-only chunk
    /// that may say sectors are erased (one that leaves room for another
    /// after it): saying it then opens the next sector first.
    pub fn say_needs_open(&self) -> bool {
        self.head_room() < CHUNK_HEADER_LEN + MIN_CHUNK_PAYLOAD
    }

    /// Says in a chunk of its own, a header alone, which sectors after the
    /// head are erased ahead, so that a remount opens them without erasing
    /// them again (idle-time maintenance, after erasing ahead, when no
    /// other chunk was written since, or the last one had no room to say
    /// it). If the head has no room left for it, opens the next sector,
    /// erased ahead, first: the head's rest is too short for any chunk
    /// that could say it, and the next append would open that sector
    /// anyway.
    ///
    /// Power loss: written after the erases it names are done; a torn one
    /// is a torn chunk at the head, and says nothing. A cut while the next
    /// sector is opened leaves it without a header: free, and erased again
    /// when opened.
    pub fn say_erased_ahead(&mut self) -> Result<(), Fail> {
        if !self.erased_ahead_unsaid() {
            return Ok(());
        }
        if self.say_needs_open() {
            self.open_next_sector()?;
        }
        self.write_batch(ERASED_AHEAD, &mut Slices::<0>([]))
            .map(|_| ())
    }

    /// Idle-time maintenance begins: the bytes written since it last ended
    /// are one burst of the caller's.
    pub fn idle_begin(&mut self) {
        let since = self.written_total().saturating_sub(self.idle_mark);
        self.burst = self.burst.max(since.min(u64::from(u32::MAX)) as u32);
    }

    /// Idle-time maintenance ends: its own writes are no burst.
    pub fn idle_end(&mut self) {
        self.idle_mark = self.written_total();
    }
}
