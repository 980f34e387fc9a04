//! Where data dies (feature `sector-table`; stage 3 of format 10,
//! `docs/DESIGN.md`, "Format 10 in stages"): the store tells the log which
//! batches nothing live needs any more, and the log counts their bytes dead
//! in their sectors (`log/dead.rs`).
//!
//! Owns the list of deaths counted: an object's old version once its new
//! one commits (a write, or a collection's copy); a deleted session's
//! batches once its deletion commits (its chain's, and the bodies its base
//! names in place, without their batches' framing); a session's old
//! batches once a new
//! base commits, all of them if it references no body in place (a
//! collection relocating the session whole), else the batches of the old
//! chain it names no body in (`store/base.rs`: a compaction's dropped
//! turns, a partial relocation's copied bodies). A batch is counted when
//! it goes from needed to not needed, which happens once, so it is
//! counted once.
//!
//! Invariant: counts never overstate. What is not listed is not counted:
//! memory records, checkpoints, deletions and blocks, an old base at the
//! root when the new one references bodies in place, and the batches the
//! old base named in place that the new one no longer does (finding them
//! would walk a sector's chunks per batch at every compaction). A walk that does not
//! check out, or fails to read, counts less and fails nothing: the write
//! that killed the data committed, and a flash error surfaces at the next
//! operation that needs the flash.
//!
//! Power loss: nothing here writes; the counts are RAM only.

use core::borrow::BorrowMut;

use embedded_storage::nor_flash::NorFlash;

use super::{Store, Work};
use crate::cursor::Records;
use crate::session::Session;

impl<F: NorFlash, const MAX_SESSIONS: usize, W: BorrowMut<Work>> Store<F, MAX_SESSIONS, W> {
    /// The batch whose first chunk is at `addr` died.
    pub(super) fn batch_died(&mut self, addr: u32) {
        // (Advisory: a walk cut short counts less, which the rule allows.)
        let _ = self.log.batch_died(addr);
    }

    /// Session `s`, as it was, died whole (deleted, or relocated into a
    /// base that carries every body): the batches of its chain, and those
    /// whose bodies its base referenced in place.
    #[inline(never)]
    pub(super) fn session_died(&mut self, s: &Session) {
        if !self.log.counts_dead() {
            return;
        }
        let mut recs = Records::EMPTY;
        if recs.start(&mut self.log.io(), s, None).is_err() {
            return;
        }
        self.records_died(&mut recs, s);
    }

    /// [`session_died`](Self::session_died) over `recs`, the records of
    /// `s` from their first (a base being written has them at hand: its
    /// chain is not walked again).
    pub(super) fn records_died(&mut self, recs: &mut Records, s: &Session) {
        if !self.log.counts_dead() {
            return;
        }
        let chain = recs.chain();
        for &addr in chain.addrs.iter().take(chain.len) {
            self.batch_died(addr);
        }
        if !s.root_is_base {
            return;
        }
        // The bodies its base names in place: each one's bytes, in its
        // sector, if it lies in one (their batches' framing is not
        // counted: finding it would walk a sector's chunks per batch).
        // A body in place is older than the base: in a sector of a lower
        // sequence, or before it in its sector; the base's own bodies,
        // after it, are in its batch, counted above.
        let geo = self.log.geo();
        let Some(root_seq) = self.log.seq_of_sector(geo.sector_of(s.root)) else {
            return;
        };
        while let Ok(Some(r)) = recs.next(&mut self.log.io()) {
            // The base's entries come first, each with its CRC; one a moves
            // record holds is in that record, counted above.
            if r.crc.is_none() && !r.damaged {
                break;
            }
            if r.segment != 0 {
                continue;
            }
            let sector = geo.sector_of(r.addr);
            let in_place = match self.log.seq_of_sector(sector) {
                Some(q) => q < root_seq || (q == root_seq && r.addr < s.root),
                None => false,
            };
            let last = self
                .log
                .io()
                .stream_advance(r.addr, r.len.saturating_sub(1));
            if in_place && !r.damaged && geo.sector_of(last) == sector {
                self.log.add_dead(sector, r.len);
            }
        }
    }
}
