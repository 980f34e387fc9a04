//! The log: a ring of sectors holding CRC-framed chunks.
//!
//! Sectors are used in ring order. Opening a sector erases it and programs its
//! header with the next sector sequence number, so the sectors in use always
//! carry consecutive sequence numbers from the tail (oldest) to the head
//! (newest). Records ("batches") are written at the head as one or more
//! chunks. A batch that does not fit in the head sector continues in the next
//! sector: every chunk but the last fills its sector to the end, so a batch's
//! payload is one *stream* that skips only sector and chunk headers, and a
//! byte of it can be addressed by its flash address (see [`Io::read_stream`]).
//!
//! Commit rule: a batch exists once its last chunk (flag `LAST`) is on flash
//! with a valid CRC. Chunk headers are programmed first and the payload after
//! them, in page-aligned pieces of at most [`STAGE`] bytes.
//!
//! Power loss: a cut while a batch is programmed leaves a chunk whose CRC
//! fails, or a batch without its `LAST` chunk; both are ignored. After a
//! failed write the head sector is sealed for the rest of the mount (nothing
//! more is written to it). The next mount may write on after the torn chunk
//! in the same sector (`open.rs`, "Torn head"); the first chunk it writes
//! there skips a batch sequence number, so a torn chunk is always the last
//! chunk of its sector or followed by a sequence gap (or is a header that
//! does not decode, passed over as damage), and the scans check the CRC of
//! a chunk in either place. A cut during a
//! sector opening leaves an erased or partly erased sector without a valid
//! header, which is erased again when it is next opened.
//!
//! Erasing ahead (`ahead.rs`, for idle-time maintenance): the free sectors
//! right after the head may be erased before they are needed, so that
//! opening them costs only the header; erasing starts once the caller's
//! writes between two idle calls (twice the largest such burst of this
//! mount, [`Log::idle_begin`]) can reach past the head. A blank sector is
//! never taken for a soundly erased one on its looks (a cut erase can look
//! blank): every chunk written says how many free sectors after its sector
//! were erased, every erase done, when it was written (version 8 on, chunk
//! flags bits 2..3), and a mount trusts only what the head's last sound
//! chunk says (`open.rs`, step 3), reading each such sector through before
//! it opens it. A cut during an early erase leaves a free sector without a
//! header that no chunk names, as a cut opening does: it is erased again
//! when opened; only the erase count its old header carried is lost (the
//! next opening counts from the head's).
//!
//! Ring order (`ring.rs`): which sector follows or precedes another, the
//! sequence number a sector in use carries and where a payload stream goes
//! on at a sector's end are answered there (format 9: the physical order;
//! format 10 will back it with a table, which the feature `sector-table`
//! builds: the log keeps it with every sector opened or released, can
//! release a sector in the middle, held until a full checkpoint records
//! it, and rebuilds it at mount: `table.rs`). Without the table, the
//! mount's walk back and the head walk's checkpoint search step a
//! sequence number beside `ring::prev`, and the checkpoint reader bounds
//! the oldest sequence as `head_seq - (count - 1)`: both hold for format
//! 9's ring.
//!
//! The ring's position (head, tail, write position, sequence numbers, the
//! newest checkpoint) is private to the log: the layers above read it and
//! change it only through the steps that keep it consistent (a batch
//! written, a sector opened, sealed, wiped or released, the ring opened at
//! mount, a checkpoint recorded).

use embedded_storage::nor_flash::NorFlash;

mod ahead;
#[cfg(feature = "sector-table")]
mod dead;
mod io;
mod open;
pub(crate) mod ring;
#[cfg(feature = "sector-table")]
mod table;
#[cfg(all(test, feature = "sector-table"))]
mod tests;

#[cfg(feature = "sector-table")]
pub(crate) use dead::DEAD_PENDING;
pub(crate) use io::{copy_from_parts, Dev, Io, Payload, Slices};
pub(crate) use open::Opened;
#[cfg(feature = "sector-table")]
pub(crate) use ring::dead_unit;
pub(crate) use ring::Ring;

use crate::error::{fail, Fail, Parked};
use crate::layout::{
    align_up, encode_sector_header, geometry_flags, u16_at, u32_at, ChunkHeader, Geometry,
    SectorHeader, CHUNK_AHEAD_SHIFT, CHUNK_FIRST, CHUNK_HEADER_LEN, CHUNK_LAST, CHUNK_PAYLOAD_MAX,
};

/// Size of the staging buffer: writes are split at multiples of it, which
/// also keeps each program call inside one 256 B SPI NOR page.
pub(crate) const STAGE: usize = 256;

/// Smallest payload worth starting a chunk for at the end of a sector;
/// with less room the batch starts in the next sector instead.
const MIN_CHUNK_PAYLOAD: u32 = 16;

/// Room a header-only chunk needs at the end of a sector (`write_chunks`
/// starts a batch with at least a header and a byte of room). A chunk says
/// sectors are erased ahead only if this much is left after it, so that one
/// can take it back ([`Log::settle_ahead`]).
const NOTE_ROOM: u32 = CHUNK_HEADER_LEN + 1;

/// Where a chunk lies and what its header says.
#[derive(Debug, Clone, Copy)]
pub(crate) struct ChunkAt {
    pub address: u32,
    pub header: ChunkHeader,
}

/// What lies at a position inside a sector.
#[derive(Debug, Clone, Copy)]
pub(crate) enum Slot {
    /// A chunk whose header decodes and whose length fits the sector.
    Chunk(ChunkAt),
    /// Erased space (or the sector end): nothing more was written here.
    End,
    /// Bytes that are neither: a torn write or damage.
    Damaged,
}

/// The ring's write state.
pub(crate) struct Log<F: NorFlash> {
    flash: Dev<F>,
    geo: Geometry,
    /// Head sector index: the sector being written.
    head: u32,
    /// Sector sequence number of the head.
    head_seq: u32,
    /// Erase count of the head sector.
    head_erase_count: u32,
    /// Address where the next chunk goes (the head sector's end if full).
    write_pos: u32,
    /// Sector sequence number of the oldest sector in use.
    tail_seq: u32,
    /// Next batch sequence number.
    next_seq: u32,
    /// Address of the newest committed checkpoint.
    checkpoint: u32,
    /// Staging buffer for programs and scratch for reads.
    buf: [u8; STAGE],
    /// Bytes written per kind of record since mount ([`usage_slot`]).
    written: [u64; USAGE_SLOTS],
    /// Bytes the batch being written has taken so far.
    batch_bytes: u32,
    /// How many free sectors right after the head were erased in this mount
    /// and not opened since ([`Log::erase_ahead`]).
    erased_ahead: u32,
    /// The erase counts their headers will carry, next sector first.
    ahead_counts: [u32; ERASE_AHEAD],
    /// Whether those were trusted at mount, as a chunk of an earlier mount
    /// said, and are still to be read through ([`Log::settle_ahead`]).
    ahead_unread: u32,
    /// How many sectors after the head the head's last chunk says are
    /// erased: after a mount, possibly more than are trusted, until
    /// [`Log::settle_ahead`] takes them back.
    ahead_said: u32,
    /// Bytes written since mount when idle-time maintenance last ended
    /// ([`Log::idle_begin`]).
    idle_mark: u64,
    /// The most bytes written between two idle-time calls in this mount:
    /// how far ahead [`Log::erase_ahead`] looks.
    burst: u32,
    /// Each sector's sequence (feature `sector-table`, `ring.rs`): ring
    /// order from it rather than from the arithmetic, where it is on.
    #[cfg(feature = "sector-table")]
    table: ring::SectorTable,
}

/// Most sectors [`Log::erase_ahead`] keeps erased after the head: enough for
/// any append up to a sector long to open its sectors without an erase.
pub(crate) const ERASE_AHEAD: usize = 3;

/// Slots of [`Log::written`]: one per kind a class may hold
/// ([`kind::usage_slot`](crate::layout::kind::usage_slot)).
pub(crate) const USAGE_SLOTS: usize = 4 * crate::layout::kind::PER_CLASS;

/// The slot of kind 0x00, which the format does not define: delta
/// checkpoints are counted there, apart from full ones
/// ([`Log::count_as_delta`]).
pub(crate) const DELTA_CHECKPOINT_SLOT: usize = 0;

impl<F: NorFlash> Log<F> {
    /// A log over `flash` before anything is known of its ring: the head
    /// sector `head`, writing at `write_pos`, the tail at `tail_seq`; no
    /// checkpoint, nothing written. Format and mount set the rest.
    // Out of line: format and mount share it.
    #[inline(never)]
    pub fn new(flash: F, geo: Geometry, head: u32, write_pos: u32, tail_seq: u32) -> Self {
        let log = Log {
            flash: Dev {
                dev: flash,
                parked: Parked::new(),
            },
            geo,
            head,
            head_seq: 0,
            head_erase_count: 0,
            write_pos,
            tail_seq,
            next_seq: 1,
            checkpoint: crate::layout::NO_ADDR,
            buf: [0; STAGE],
            written: [0; USAGE_SLOTS],
            batch_bytes: 0,
            erased_ahead: 0,
            ahead_counts: [0; ERASE_AHEAD],
            ahead_unread: 0,
            ahead_said: 0,
            idle_mark: 0,
            burst: 0,
            #[cfg(feature = "sector-table")]
            table: ring::SectorTable::OFF,
        };
        #[cfg(feature = "sector-table")]
        let log = {
            let mut log = log;
            log.sync_table();
            log
        };
        log
    }

    /// Sets the sector table to the ring as format 9 lays it out (a mount
    /// that found the ring, a format), and checks it.
    #[inline(always)]
    fn sync_table(&mut self) {
        #[cfg(feature = "sector-table")]
        {
            let ring = self.ring();
            self.table.fill(&self.geo, &ring);
        }
        self.check_table();
    }

    /// Checks, in debug builds with the sector table, that the table holds
    /// together with the ring's position (its count, the tail as its oldest
    /// sequence, the head's sequence), and that it agrees with format 9's
    /// arithmetic while no sector was released out of order.
    #[inline(always)]
    fn check_table(&self) {
        #[cfg(all(feature = "sector-table", debug_assertions))]
        {
            let ring = self.ring();
            debug_assert!(
                self.table.consistent(&ring),
                "the sector table does not hold together with the ring"
            );
            debug_assert!(
                self.table.reordered() || self.table.agrees(&self.geo, &ring),
                "the sector table disagrees with the ring"
            );
        }
    }

    /// The sector after `index` in ring order: where a batch or a stream
    /// that leaves sector `index` at its end goes on.
    #[cfg(feature = "memory")] // a memory scrub only
    #[inline(always)]
    pub fn successor(&self, index: u32) -> u32 {
        #[cfg(feature = "sector-table")]
        if self.table.on() {
            return self.table.next(&self.geo, index);
        }
        ring::next(&self.geo, index)
    }

    /// The sector the head opens after sector `index` (the head, or one it
    /// opens before): the next free one.
    #[inline(always)]
    fn to_open_after(&self, index: u32) -> u32 {
        #[cfg(feature = "sector-table")]
        if self.table.on() {
            return self.table.next_free(&self.geo, index);
        }
        ring::next(&self.geo, index)
    }

    /// The `n`th sector the head opens after itself (`1 <= n`, at most
    /// the free sectors).
    #[inline(always)]
    fn opened_after_head(&self, n: u32) -> u32 {
        #[cfg(feature = "sector-table")]
        if self.table.on() {
            let mut sector = self.head;
            for _ in 0..n {
                sector = self.table.next_free(&self.geo, sector);
            }
            return sector;
        }
        ring::after(&self.geo, self.head, n)
    }

    /// Whether `len` bytes at `address` are all 0xFF.
    #[inline(always)]
    fn erased(&mut self, address: u32, len: u32) -> Result<bool, Fail> {
        Ok(self.erased_word(address, len)? != 0)
    }
    /// [`Log::erased`] as a word (1 or 0; see [`Io::chunk_crc_ok_word`]).
    #[inline(never)]
    fn erased_word(&mut self, address: u32, len: u32) -> Result<u32, Fail> {
        let mut io = Io {
            flash: &mut self.flash,
            geo: &self.geo,
            #[cfg(feature = "sector-table")]
            table: &self.table,
        };
        io.is_erased_word(address, len, &mut self.buf)
    }

    /// Whether sector `idx` starts with a chunk whose header decodes and
    /// whose CRC checks out.
    #[inline(always)]
    pub fn first_chunk_sound(&mut self, idx: u32) -> Result<bool, Fail> {
        Ok(self.first_chunk_sound_word(idx)? != 0)
    }
    /// [`Log::first_chunk_sound`] as a word (1 or 0; see [`Io::chunk_crc_ok_word`]).
    #[inline(always)]
    fn first_chunk_sound_word(&mut self, idx: u32) -> Result<u32, Fail> {
        self.sound_at_word(idx, self.geo.first_chunk(idx))
    }

    /// Whether a chunk whose header decodes, that fits sector `sector`,
    /// and whose CRC checks out starts at `address`, as a word (1 or 0; see
    /// [`Io::chunk_crc_ok_word`]).
    #[inline(never)]
    fn sound_at_word(&mut self, sector: u32, address: u32) -> Result<u32, Fail> {
        match self.slot_at(sector, address)? {
            Slot::Chunk(c) => Ok(u32::from(self.crc_ok(&c)?)),
            _ => Ok(0),
        }
    }

    /// The partition's geometry.
    pub fn geo(&self) -> Geometry {
        self.geo
    }

    /// Head sector index: the sector being written.
    pub fn head(&self) -> u32 {
        self.head
    }

    /// Sector sequence number of the head.
    pub fn head_seq(&self) -> u32 {
        self.head_seq
    }

    /// Erase count of the head sector.
    pub fn head_erase_count(&self) -> u32 {
        self.head_erase_count
    }

    /// Sector sequence number of the oldest sector in use.
    pub fn tail_seq(&self) -> u32 {
        self.tail_seq
    }

    /// Next batch sequence number.
    pub fn next_seq(&self) -> u32 {
        self.next_seq
    }

    /// Address of the newest committed checkpoint.
    pub fn checkpoint(&self) -> u32 {
        self.checkpoint
    }

    /// Bytes written per kind of record since mount ([`usage_slot`]).
    pub fn written(&self) -> &[u64; USAGE_SLOTS] {
        &self.written
    }

    /// The flash.
    pub fn flash(&self) -> &F {
        &self.flash.dev
    }

    /// The flash, mutably (a scrub's in-place writes, fault injection).
    pub fn flash_mut(&mut self) -> &mut F {
        &mut self.flash.dev
    }

    /// What the errors met could not carry, for the public error.
    pub fn parked(&mut self) -> &mut Parked<F::Error> {
        &mut self.flash.parked
    }

    /// Flash access together with the staging buffer, as scratch for what
    /// is read through it.
    pub fn io_buf(&mut self) -> (Io<'_, F>, &mut [u8; STAGE]) {
        (
            Io {
                flash: &mut self.flash,
                geo: &self.geo,
                #[cfg(feature = "sector-table")]
                table: &self.table,
            },
            &mut self.buf,
        )
    }

    /// Records the newest committed checkpoint (mount, once it is loaded).
    pub fn set_checkpoint(&mut self, addr: u32) {
        self.checkpoint = addr;
        // It carries every dead byte counted so far (a full one, their
        // snapshot; a delta, those pending), and a mount sets it before
        // counting any.
        #[cfg(feature = "sector-table")]
        self.table.dead_recorded();
    }

    /// Sets the tail: mount, once the ring's oldest sector is known. It
    /// never passes the head.
    pub fn set_tail_seq(&mut self, seq: u32) {
        self.tail_seq = seq.min(self.head_seq);
        // A table a mount filled from what it read (holes, format 10) is
        // narrowed to the tail; format 9's ring is laid out again.
        #[cfg(feature = "sector-table")]
        if self.table.on() && self.table.reordered() {
            self.table.narrow(self.tail_seq);
            self.tail_seq = self.table.oldest().unwrap_or(self.head_seq);
            self.check_table();
            return;
        }
        self.sync_table();
    }

    /// The next batch sequence number is at least `seq` (mount: past every
    /// batch it met, and past what the checkpoint recorded).
    pub fn raise_next_seq(&mut self, seq: u32) {
        self.next_seq = self.next_seq.max(seq);
    }

    /// Counts the bytes written as checkpoints since `before` (a value of
    /// `written()[0]`) as delta checkpoints instead.
    pub fn count_as_delta(&mut self, before: u64) {
        let checkpoints = crate::layout::kind::usage_slot(crate::layout::kind::CHECKPOINT);
        let n = self.written[checkpoints] - before;
        self.written[checkpoints] = before;
        self.written[DELTA_CHECKPOINT_SLOT] += n;
    }

    /// Releases the tail sector: garbage collection moved everything live
    /// out of it.
    pub fn release_tail(&mut self) {
        #[cfg(feature = "sector-table")]
        if self.table.on() {
            // The oldest sector in use; the tail then moves to the next
            // oldest (the next sequence, but after a release in the
            // middle).
            if let Some(index) = self.table.index_of_seq(self.tail_seq) {
                self.table.release(index);
            }
            self.tail_seq = self.table.oldest().unwrap_or(self.head_seq + 1);
            self.check_table();
            return;
        }
        self.tail_seq += 1;
    }

    #[cfg(feature = "memory")] // a memory scrub only
    /// Seals the head sector: nothing more is written to it, the next
    /// write opens a new sector.
    pub fn seal_head(&mut self) -> Result<(), Fail> {
        // What the head's last chunk says must be true before nothing more
        // can be written after it.
        self.settle_ahead()?;
        self.write_pos = self.geo.sector_start(self.head) + self.geo.sector;
        Ok(())
    }

    /// Sector sequence of the sector holding `addr` (the head's if unknown).
    pub fn head_seq_of(&self, addr: u32) -> u32 {
        self.seq_of_sector(self.geo.sector_of(addr))
            .unwrap_or(self.head_seq)
    }

    #[cfg(feature = "memory")] // a memory scrub only
    /// Whether the batch whose first chunk is at `addr` has a chunk in sector
    /// `index`: its chunks are followed through the next sectors' first
    /// chunks until the last one (or one that does not check out).
    #[inline(always)]
    pub fn batch_touches(&mut self, addr: u32, index: u32) -> Result<bool, Fail> {
        Ok(self.batch_touches_word(addr, index)? != 0)
    }
    /// [`Log::batch_touches`] as a word (1 or 0; see [`Io::chunk_crc_ok_word`]).
    #[cfg(feature = "memory")]
    #[inline(never)]
    fn batch_touches_word(&mut self, addr: u32, index: u32) -> Result<u32, Fail> {
        let mut at = addr;
        for _ in 0..self.geo.count {
            let sector = self.geo.sector_of(at);
            if sector == index {
                return Ok(1);
            }
            match self.io().chunk_header(at)? {
                Some(h) if !h.is_last() => at = self.geo.first_chunk(self.successor(sector)),
                _ => return Ok(0),
            }
        }
        Ok(0)
    }

    #[cfg(feature = "memory")] // a memory scrub only
    /// Erases sector `index`, which holds nothing live (released and not
    /// yet reopened): no header is written.
    pub fn erase_free_sector(&mut self, index: u32) -> Result<(), Fail> {
        self.settle_ahead()?;
        // A sector erased ahead is erased, and a chunk may say so: a cut
        // erase of it now would make that claim false.
        let mut sector = self.head;
        for _ in 0..self.erased_ahead {
            sector = self.to_open_after(sector);
            if sector == index {
                return Ok(());
            }
        }
        self.erase_sector(index)
    }

    /// The flash, given back.
    pub fn into_flash(self) -> F {
        self.flash.dev
    }

    /// Flash access.
    pub fn io(&mut self) -> Io<'_, F> {
        Io {
            flash: &mut self.flash,
            geo: &self.geo,
            #[cfg(feature = "sector-table")]
            table: &self.table,
        }
    }

    /// Bytes left in the head sector after the write position.
    pub fn head_room(&self) -> u32 {
        self.geo.sector_end(self.geo.sector_start(self.head)) - self.write_pos
    }

    /// Sectors in use, tail to head inclusive.
    #[inline(never)]
    pub fn used_sectors(&self) -> u32 {
        #[cfg(feature = "sector-table")]
        if self.table.on() {
            return self.table.used();
        }
        self.ring().used()
    }

    /// Sectors that can be opened without reclaiming any.
    pub fn free_sectors(&self) -> u32 {
        self.geo.count - self.used_sectors()
    }

    /// The sector carrying sequence `seq`, if one in use does: with the
    /// sector table, a sequence between the tail and the head may be a
    /// hole (its sector was released out of order), which walks by
    /// sequence pass over.
    pub fn sector_of_seq(&self, seq: u32) -> Option<u32> {
        #[cfg(feature = "sector-table")]
        if self.table.on() {
            return self.table.index_of_seq(seq);
        }
        self.ring().sector_of(&self.geo, seq)
    }

    /// Sector sequence of the sector at `index`, if it is in use.
    pub fn seq_of_sector(&self, index: u32) -> Option<u32> {
        #[cfg(feature = "sector-table")]
        if self.table.on() {
            return self.table.seq_of(index);
        }
        self.ring().seq_of(&self.geo, index)
    }

    /// Where the ring is ([`Ring`]: the head, its sequence and the tail's),
    /// for the questions of ring order.
    #[inline]
    pub fn ring(&self) -> Ring {
        Ring {
            head: self.head,
            head_seq: self.head_seq,
            tail_seq: self.tail_seq,
        }
    }

    /// A payload length whose one batch needs at least the room that two
    /// batches of `first` and `second` bytes, one after the other, need
    /// (for [`plan`](Self::plan) and the room checks): the second's chunk
    /// header, what the first's last chunk leaves unused when too little
    /// for the second to start there (`MIN_CHUNK_PAYLOAD`, a header's
    /// worth) and its padding to the write unit.
    pub fn pair_len(&self, first: u32, second: u32) -> u32 {
        first
            .saturating_add(second)
            .saturating_add(2 * CHUNK_HEADER_LEN + MIN_CHUNK_PAYLOAD + self.geo.write)
    }

    /// Where a batch of `len` payload bytes would start, and how many new
    /// sectors it would open.
    pub fn plan(&self, len: u32) -> (u32, u32) {
        let mut sector = self.head;
        let mut pos = self.write_pos;
        let mut opened = 0;
        let mut left = len;
        let mut start = None;
        loop {
            let room = self.geo.sector_start(sector) + self.geo.sector - pos;
            if start.is_none() && room < CHUNK_HEADER_LEN + MIN_CHUNK_PAYLOAD.min(left.max(1)) {
                opened += 1;
                sector = self.to_open_after(sector);
                pos = self.geo.first_chunk(sector);
                continue;
            }
            let first = *start.get_or_insert(pos);
            let n = left.min(room - CHUNK_HEADER_LEN).min(CHUNK_PAYLOAD_MAX);
            left -= n;
            if left == 0 {
                return (first, opened);
            }
            opened += 1;
            sector = self.to_open_after(sector);
            pos = self.geo.first_chunk(sector);
        }
    }

    /// Erases sector `index` whole (no header is written).
    #[inline(never)]
    pub fn erase_sector(&mut self, index: u32) -> Result<(), Fail> {
        let start = self.geo.sector_start(index);
        self.flash.erase(start, start + self.geo.sector)
    }

    /// Erases sector `index`; returns the erase count its next header
    /// carries: its old header's + 1, else the head's + `bump` (a free
    /// sector's: 1; a wiped one's: 0).
    fn erase_counted(&mut self, index: u32, bump: u32) -> Result<u32, Fail> {
        let erase_count = match self.io().sector_header(index)? {
            SectorHeader::Valid { erase_count, .. } => erase_count.saturating_add(1),
            _ => self.head_erase_count.saturating_add(bump),
        };
        self.erase_sector(index)?;
        Ok(erase_count)
    }

    fn written_total(&self) -> u64 {
        self.written.iter().sum()
    }

    /// Whether sector `index` has a valid header (read whole, its CRC
    /// checked) of sequence `seq`.
    #[inline(always)]
    pub fn header_seq_is(&mut self, index: u32, seq: u32) -> Result<bool, Fail> {
        Ok(self.header_seq_is_word(index, seq)? != 0)
    }
    /// [`Log::header_seq_is`] as a word (1 or 0; see
    /// [`Io::chunk_crc_ok_word`]): one out-of-line reading and match of the
    /// header for the mount's and the check's walks of the ring.
    #[inline(never)]
    fn header_seq_is_word(&mut self, index: u32, seq: u32) -> Result<u32, Fail> {
        Ok(u32::from(matches!(
            self.io().sector_header(index)?,
            SectorHeader::Valid { seq: s, .. } if s == seq
        )))
    }

    /// Whether sector `index`'s header begins as the ring's header of
    /// sequence `seq` does (magic, version, sequence: its first 12 bytes;
    /// the rest and the CRC are not read).
    pub fn header_prefix_is(&mut self, index: u32, seq: u32) -> Result<bool, Fail> {
        let mut b = [0u8; 12];
        let at = self.geo.sector_start(index);
        self.io().read(at, &mut b)?;
        Ok(u32_at(&b, 0) == crate::layout::SECTOR_MAGIC_VALUE
            && (crate::layout::MIN_FORMAT_VERSION..=crate::layout::FORMAT_VERSION)
                .contains(&u16_at(&b, 4))
            && u32_at(&b, 8) == seq)
    }

    /// Opens the next sector in ring order: erase, then program its header,
    /// which records `checkpoint`, the newest checkpoint's address.
    ///
    /// Power loss: a cut during the erase or before the header lands leaves
    /// the sector without a valid header; it stays free and is erased again.
    pub fn open_next_sector(&mut self) -> Result<(), Fail> {
        if self.free_sectors() == 0 {
            return Err(fail!(LogicBug, "opened a sector that is not free"));
        }
        let index = self.to_open_after(self.head);
        let seq = self.head_seq.wrapping_add(1);
        #[cfg(feature = "sector-table")]
        if !self.table.room_for(seq) {
            return Err(fail!(
                LogicBug,
                "the sequences in use outgrew the sector table"
            ));
        }
        // (A no-op but right after a mount, and never inside a batch: the
        // batch settled first.)
        self.settle_ahead()?;
        let erase_count = if self.erased_ahead > 0 {
            // Erased ahead, and nothing has been written since: in this
            // mount, or (read through at the first write) as a chunk of an
            // earlier one said.
            let count = self.ahead_counts[0];
            self.ahead_counts.copy_within(1.., 0);
            self.erased_ahead -= 1;
            count
        } else {
            self.erase_counted(index, 1)?
        };
        let start = self.geo.sector_start(index);
        // The sector is erased now: whatever happens next, it is no longer
        // the old sector, so the ring moves on.
        let result = self.write_sector_header(index, seq, erase_count);
        self.ahead_said = 0;
        self.head = index;
        self.head_seq = seq;
        self.head_erase_count = erase_count;
        // (It fits: room_for above.)
        #[cfg(feature = "sector-table")]
        self.table.set(index, seq);
        self.check_table();
        self.write_pos = match result {
            Ok(()) => self.geo.first_chunk(index),
            Err(_) => start + self.geo.sector,
        };
        result
    }

    #[cfg(feature = "memory")] // a memory scrub only
    /// Erases sector `index` and, if it is in use, programs a fresh header
    /// with the sequence number it had, so the ring stays consecutive.
    /// Everything live in it must have been moved first.
    ///
    /// Power loss: a cut before the header lands leaves a sector in the ring
    /// without a valid header; mount gives it one again.
    pub fn wipe_sector(&mut self, index: u32) -> Result<(), Fail> {
        if index == self.head {
            return Err(fail!(LogicBug, "wiping the head sector"));
        }
        let erase_count = self.erase_counted(index, 0)?;
        match self.seq_of_sector(index) {
            Some(seq) => self.write_sector_header(index, seq, erase_count),
            None => Ok(()),
        }
    }

    /// Programs the header of an erased sector.
    pub fn write_sector_header(
        &mut self,
        index: u32,
        seq: u32,
        erase_count: u32,
    ) -> Result<(), Fail> {
        let len = self.geo.sector_header as usize;
        self.buf[..len].fill(0xFF);
        encode_sector_header(
            &mut self.buf,
            seq,
            geometry_flags(&self.geo),
            erase_count,
            self.checkpoint,
        );
        let start = self.geo.sector_start(index);
        self.flash.write(start, &self.buf[..len])
    }

    /// Writes one batch at the head. The caller has made sure that
    /// [`plan`](Self::plan)'s sectors are free. Returns the address of the
    /// first chunk and the batch's sequence number.
    ///
    /// Power loss: see the module docs; a failed write seals the head sector.
    #[inline(always)]
    pub fn write_batch<P: Payload<F>>(
        &mut self,
        kind: u8,
        payload: &mut P,
    ) -> Result<(u32, u32), Fail> {
        let first = self.write_batch_dyn(kind, payload)?;
        // The batch took the last sequence number given out (an
        // `ERASED_AHEAD` chunk that settling writes comes before it).
        Ok((first, self.next_seq.wrapping_sub(1)))
    }

    /// [`write_batch`](Self::write_batch), compiled once for every payload
    /// type (code size): the first chunk's address (a `Result<u32, _>`
    /// comes back in registers).
    #[inline(never)]
    fn write_batch_dyn(&mut self, kind: u8, payload: &mut dyn Payload<F>) -> Result<u32, Fail> {
        self.settle_ahead()?;
        self.write_batch_settled(kind, payload)
    }

    /// [`write_batch_dyn`](Self::write_batch_dyn) once the sectors erased
    /// ahead are settled; the batch takes sequence number `next_seq`.
    pub(super) fn write_batch_settled(
        &mut self,
        kind: u8,
        payload: &mut dyn Payload<F>,
    ) -> Result<u32, Fail> {
        let len = payload.len();
        let (_, opens) = self.plan(len);
        if opens > self.free_sectors() {
            return Err(fail!(LogicBug, "batch written without room"));
        }
        let seq = self.next_seq;
        self.next_seq = self.next_seq.wrapping_add(1);
        self.batch_bytes = 0;
        let result = self.write_chunks(kind, seq, payload, len);
        // Account what the batch took: headers, padding and the sector end
        // it skipped, if any.
        if let Some(slot) = self.written.get_mut(crate::layout::kind::usage_slot(kind)) {
            *slot = slot.saturating_add(u64::from(self.batch_bytes));
        }
        if result.is_err() {
            // Seal the head sector for this mount: nothing is written after
            // a damaged chunk until a mount has looked at it.
            self.write_pos = self.geo.sector_start(self.head) + self.geo.sector;
        }
        result
    }

    fn write_chunks(
        &mut self,
        kind: u8,
        seq: u32,
        payload: &mut dyn Payload<F>,
        len: u32,
    ) -> Result<u32, Fail> {
        let mut offset = 0u32;
        let mut first_addr = 0;
        loop {
            let room = self.head_room();
            let left = len - offset;
            if room < CHUNK_HEADER_LEN + MIN_CHUNK_PAYLOAD.min(left.max(1)) {
                self.batch_bytes += room;
                self.open_next_sector()?;
                continue;
            }
            let n = left.min(room - CHUNK_HEADER_LEN).min(CHUNK_PAYLOAD_MAX);
            let mut flags = 0;
            if offset == 0 {
                flags |= CHUNK_FIRST;
            }
            if offset + n == len {
                flags |= CHUNK_LAST;
            }
            // The sectors after this one erased ahead, every erase done:
            // a mount trusts them from the head's last chunk. Said only if
            // a header-only chunk still fits after this one, to take it
            // back if need be.
            let after = room - self.geo.chunk_size(n).min(room);
            let said = if after >= NOTE_ROOM {
                self.erased_ahead.min(3)
            } else {
                0
            };
            flags |= (said as u8) << CHUNK_AHEAD_SHIFT;
            let addr = self.write_pos;
            if offset == 0 {
                first_addr = addr;
            }
            self.write_chunk(kind, flags, seq, payload, offset, n, addr)?;
            self.ahead_said = said;
            self.write_pos = addr + self.geo.chunk_size(n);
            self.batch_bytes += self.geo.chunk_size(n);
            offset += n;
            if offset == len {
                return Ok(first_addr);
            }
        }
    }

    #[allow(clippy::too_many_arguments)]
    fn write_chunk(
        &mut self,
        kind: u8,
        flags: u8,
        seq: u32,
        payload: &mut dyn Payload<F>,
        offset: u32,
        n: u32,
        addr: u32,
    ) -> Result<(), Fail> {
        // Pass 1: checksum.
        let mut d = ChunkHeader::crc_start(kind, flags, n, seq);
        let mut done = 0;
        while done < n {
            let m = ((n - done) as usize).min(STAGE);
            let mut io = Io {
                flash: &mut self.flash,
                geo: &self.geo,
                #[cfg(feature = "sector-table")]
                table: &self.table,
            };
            let part = self.buf.split_at_mut(m).0;
            payload.fill(&mut io, offset + done, part)?;
            d.update(part);
            done += m as u32;
        }
        let header = ChunkHeader {
            kind,
            flags,
            len: n,
            seq,
            crc: d.finalize(),
        }
        .encode();
        // Pass 2: header then payload, staged up to page boundaries.
        let total = CHUNK_HEADER_LEN + n;
        let padded = align_up(total, self.geo.write);
        let mut at = 0u32; // bytes of the chunk already programmed
        while at < padded {
            let piece_start = addr + at;
            let boundary = (piece_start / STAGE as u32 + 1) * STAGE as u32;
            let piece = (boundary - piece_start).min(padded - at) as usize;
            for (i, b) in self.buf[..piece].iter_mut().enumerate() {
                let k = at + i as u32;
                *b = if k < CHUNK_HEADER_LEN {
                    header[k as usize]
                } else {
                    0xFF
                };
            }
            // Payload bytes of this piece.
            let lo = at.max(CHUNK_HEADER_LEN);
            let hi = (at + piece as u32).min(total);
            if lo < hi {
                let (s, e) = ((lo - at) as usize, (hi - at) as usize);
                let mut io = Io {
                    flash: &mut self.flash,
                    geo: &self.geo,
                    #[cfg(feature = "sector-table")]
                    table: &self.table,
                };
                payload.fill(&mut io, offset + lo - CHUNK_HEADER_LEN, &mut self.buf[s..e])?;
            }
            self.flash.write(piece_start, &self.buf[..piece])?;
            at += piece as u32;
        }
        Ok(())
    }

    /// What lies at `address` in sector `sector` (the sector's end is
    /// [`Slot::End`]).
    pub fn slot_at(&mut self, sector: u32, address: u32) -> Result<Slot, Fail> {
        let end = self.geo.sector_start(sector) + self.geo.sector;
        if address >= end || end - address < CHUNK_HEADER_LEN {
            return Ok(Slot::End);
        }
        let mut b = [0u8; CHUNK_HEADER_LEN as usize];
        self.io().read(address, &mut b)?;
        if b.iter().all(|x| *x == 0xFF) {
            return Ok(Slot::End);
        }
        match ChunkHeader::decode(&b) {
            Some(h) if address + self.geo.chunk_size(h.len) <= end => {
                Ok(Slot::Chunk(ChunkAt { address, header: h }))
            }
            _ => Ok(Slot::Damaged),
        }
    }
}

#[cfg(feature = "memory")] // a memory scrub only
impl<F: embedded_storage::nor_flash::MultiwriteNorFlash> Log<F> {
    /// Programs zeros over the bytes `start..end` in place (a scrub); the
    /// other bytes of the words they share are programmed as 0xFF, which
    /// leaves them as they are.
    ///
    /// Power loss: a cut leaves some of the bytes zeroed; a scrub run again
    /// zeroes the rest.
    pub fn zero_in_place(&mut self, start: u32, end: u32) -> Result<(), Fail> {
        let w = self.geo.write;
        let mut at = start / w * w;
        while at < end {
            let n = (self.buf.len() as u32).min(end.div_ceil(w) * w - at);
            for (k, b) in self.buf[..n as usize].iter_mut().enumerate() {
                let p = at + k as u32;
                *b = if p >= start && p < end { 0x00 } else { 0xFF };
            }
            self.flash.write(at, &self.buf[..n as usize])?;
            at += n;
        }
        Ok(())
    }
}
