//! Dead bytes per sector (feature `sector-table`; stage 3 of format 10,
//! `docs/DESIGN.md`, "Format 10 in stages"): how many bytes of each sector
//! in use hold nothing live, for the cleaner to pick its victim by and its
//! dry run to predict a collection by.
//!
//! Owns the count's rules, and the list of what was counted since the
//! newest checkpoint, which the next delta carries ([`DEAD_PENDING`]
//! sectors at most). The layers above say when a batch dies (an
//! object superseded, a session deleted or relocated whole); the log walks
//! the batch's chunks and counts each chunk's bytes, header and padding
//! included, in its sector ([`Log::batch_died`]). A chunk is counted only
//! while the walk checks out (a first chunk, then chunks of the same batch
//! sequence in the sectors of the next sequences, none past its sector's
//! end), so damage at rest stops a count, never inflates it.
//!
//! Invariant: a sector's count never exceeds the bytes of it that nothing
//! live needs. A batch dies once (nothing references it again), so it is
//! counted once; what no layer reports (memory records, checkpoints, the
//! bodies a compaction left behind) is not counted, and the count may be
//! less than the truth, never more. It is 0 when a sector is opened.
//!
//! Power loss: every full checkpoint records the counts, rounded down to
//! 16ths of a sector (`docs/FORMAT.md`, "Checkpoint"), and every delta
//! the bytes counted since the checkpoint before it, exact, in at most
//! [`DEAD_PENDING`](super::DEAD_PENDING) sectors (the log keeps them
//! pending until a checkpoint commits: [`Log::set_checkpoint`]). A mount
//! that goes from a chain takes the full one's counts back, then adds each
//! delta's, for the sectors opened before each was written; those opened
//! since start at 0, and so does every sector when the mount goes from
//! anything else. What died after the newest checkpoint, or in sectors
//! past a delta's room, is not counted again: understated, so still true.
//! A count a mount takes back is not pending ([`Log::load_dead`]): the
//! chain carries it already.

use embedded_storage::nor_flash::NorFlash;

use super::ring::SectorTable;
use super::Log;
use crate::error::Fail;

/// Sectors whose dead bytes a delta checkpoint carries (format 10,
/// `docs/FORMAT.md`, "Checkpoint"): deaths in more sectors than this
/// between two checkpoints are carried by the next full one only.
pub const DEAD_PENDING: usize = 32;

/// The counts in the sector table, and what of them is pending for the
/// next delta.
impl SectorTable {
    /// `bytes` more of sector `index`, in use, are dead (saturating: a
    /// count never overstates). Nothing for a sector not in use.
    /// What is counted is pending for the next delta checkpoint too.
    pub fn add_dead(&mut self, index: u32, bytes: u32) {
        let Some(added) = self.load_dead(index, bytes) else {
            return;
        };
        let n = self.pending_len as usize;
        let pending = &mut self.pending[..n];
        match pending.iter_mut().find(|e| **e & 0xFFFF == index) {
            Some(e) => {
                let sum = (*e >> 16) + added;
                *e = index | sum.min(u32::from(u16::MAX)) << 16;
            }
            None if n < DEAD_PENDING => {
                self.pending[n] = index | added << 16;
                self.pending_len += 1;
            }
            // (Past the list's room: the next full checkpoint carries it.)
            None => {}
        }
    }

    /// [`add_dead`](Self::add_dead) for a count a mount takes back from a
    /// checkpoint: nothing is pending. The bytes added (`None`: none, the
    /// sector is not in use).
    pub fn load_dead(&mut self, index: u32, bytes: u32) -> Option<u32> {
        self.seq_of(index)?;
        let d = self.dead.get_mut(index as usize)?;
        let was = *d;
        *d = d.saturating_add(bytes.min(u32::from(u16::MAX)) as u16);
        Some(u32::from(*d - was))
    }

    /// Sector `index` starts over (opened, or given another sequence):
    /// nothing counted in it before is pending. Its entry stays, carrying
    /// nothing, so that a delta being written keeps its length.
    pub(super) fn forget_pending(&mut self, index: u32) {
        let n = self.pending_len as usize;
        for e in self.pending[..n].iter_mut() {
            if *e & 0xFFFF == index {
                *e = index;
            }
        }
    }

    /// The dead bytes counted since the newest checkpoint, by sector:
    /// `index | bytes << 16` (0 bytes: the sector was opened since).
    pub fn dead_pending(&self) -> &[u32] {
        &self.pending[..self.pending_len as usize]
    }

    /// A checkpoint the store goes on from carries everything counted so
    /// far (a full one, its snapshot; a delta, what was pending).
    pub fn dead_recorded(&mut self) {
        self.pending_len = 0;
    }
}

impl<F: NorFlash> Log<F> {
    /// Bytes of sector `index` known to be dead (0 for a sector not in
    /// use, or with the table off).
    pub fn dead_bytes(&self, index: u32) -> u32 {
        self.table.dead_of(index)
    }

    /// Whether dead bytes are counted: the table is on (the partition
    /// fits it). Nothing is read for a count otherwise.
    pub fn counts_dead(&self) -> bool {
        self.table.on()
    }

    /// The batch whose first chunk is at `addr` died (nothing live needs
    /// it any more): each of its chunks is counted dead in its sector.
    /// Stops, counting no more, at a chunk that does not continue the
    /// batch as written.
    #[inline(never)]
    pub fn batch_died(&mut self, addr: u32) -> Result<(), Fail> {
        if !self.counts_dead() {
            return Ok(());
        }
        let geo = self.geo;
        let mut at = addr;
        let mut batch: Option<u32> = None;
        for _ in 0..geo.count {
            let sector = geo.sector_of(at);
            let Some(h) = self.io().chunk_header(at)? else {
                return Ok(());
            };
            let size = geo.chunk_size(h.len);
            if h.is_first() != batch.is_none()
                || batch.is_some_and(|b| b != h.seq)
                || size > geo.sector_end(at) - at
            {
                return Ok(());
            }
            self.table.add_dead(sector, size);
            if h.is_last() {
                return Ok(());
            }
            batch = Some(h.seq);
            match self
                .table
                .seq_of(sector)
                .and_then(|q| self.table.index_of_seq(q + 1))
            {
                Some(next) => at = geo.first_chunk(next),
                None => return Ok(()),
            }
        }
        Ok(())
    }

    /// `bytes` more of sector `index` are dead (a body whose batch is not
    /// walked: its framing stays uncounted).
    pub fn add_dead(&mut self, index: u32, bytes: u32) {
        self.table.add_dead(index, bytes);
    }

    /// [`add_dead`](Self::add_dead) for a count a mount takes back from a
    /// checkpoint: nothing becomes pending for the next delta.
    pub fn load_dead(&mut self, index: u32, bytes: u32) {
        let _ = self.table.load_dead(index, bytes);
    }

    /// What was counted dead since the newest checkpoint, by sector
    /// (`index | bytes << 16`), for the next delta to carry.
    pub fn dead_pending(&self) -> &[u32] {
        self.table.dead_pending()
    }

    /// Every count back to 0: the mount loaded counts from a checkpoint it
    /// then did not go from.
    pub fn clear_dead(&mut self) {
        self.table.clear_dead();
    }
}
