//! Opening the ring at mount: the sector header pass and the walk of the
//! head sector (`docs/FORMAT.md`, "Mount").
//!
//! Owns finding where the ring stands on a partition: which sector is the
//! head, its sequence and erase count, where writing goes on, and the
//! checkpoints the head sector and its header name, or the start of one
//! that ends in the head sector ([`Log::checkpoint_ending_in`]). The store then loads
//! the checkpoint and scans what follows it (`store/mount.rs`); this file
//! knows nothing of what the chunks hold. It also holds the chunk CRC check
//! and the search for the next sound chunk after damage
//! ([`Log::resync`]), which the head walk and the store's scan share.
//!
//! The header pass reads 12 bytes of each sector header (magic, version,
//! flags, sequence) and checks only the winner's CRC; if that fails, a
//! second pass checks every header. An image with a newer format version is
//! refused; a partition that is erased through and through is blank (the
//! caller may format it); anything else without a valid header is not a
//! clawmem store.
//!
//! Invariants the head walk relies on: batch sequence numbers grow by one
//! from chunk to chunk within a sector, and a torn chunk is the last of its
//! sector or followed by a sequence gap (below). So only the last chunk's
//! CRC is checked, and a chunk followed by anything but the next sequence
//! number (torn, or its length damaged at rest) is checked too; a chunk
//! that fails is left out and the walk resumes at the next sound chunk.
//! Every loop is bounded by the geometry.
//!
//! Torn head: damage at the end of the head sector with nothing sound after
//! it is a torn write. Where its extent is known, writing goes on after it
//! in the same sector instead of sealing the rest (`docs/FORMAT.md`, Mount,
//! step 2), so a cut costs only what the torn chunk reached:
//! - a chunk whose header decodes and whose CRC fails ends at its length
//!   (a tear only programs bits from 1 to 0, so the length reads at least
//!   as large as the true one), and writing goes on there if everything
//!   from there to the sector's end is erased (which also refuses a random
//!   tear or a length rotted at rest that ends short); the next batch then
//!   skips a sequence number, so every later walk and scan checks the torn
//!   chunk's CRC;
//! - a header that does not decode, and lies within one program piece, was
//!   torn in its chunk's first piece (later pieces are written after it
//!   lands), so nothing past that piece was programmed: writing goes on at
//!   the piece's end if everything after is erased (a header rotted at rest
//!   over a longer chunk is not); later walks and scans pass over it as
//!   damage followed by a sound chunk.
//!
//! Anything else seals the head, as does a head of an older format.
//!
//! Upgrade: an image whose head sector is of an older format (from
//! [`MIN_FORMAT_VERSION`](crate::layout::MIN_FORMAT_VERSION) on) opens as it
//! is, its head taken as full, so the first write opens a sector of this
//! format; older sectors keep their headers until the ring reopens them.
//!
//! Power loss: nothing here writes. A torn write at the head is reported
//! (`resumed_head` where writing goes on after it, else `sealed_head`, and
//! the head is taken as full); nothing is ever written over the words a torn
//! write may have reached.

use embedded_storage::nor_flash::NorFlash;

use super::{ChunkAt, Io, Log, Slot, ERASE_AHEAD, NOTE_ROOM, STAGE};
use crate::error::Fail;
use crate::layout::{
    align_up, u16_at, u32_at, SectorHeader, CHUNK_HEADER_LEN, ERASED_AHEAD_VERSION, NO_ADDR,
};

/// What [`Log::open`] found besides the ring's position, which it set.
#[derive(Debug, Default, Clone, Copy)]
pub(crate) struct Opened {
    /// Sector headers read (both passes).
    pub sector_headers: u32,
    /// Sector headers found damaged over sound contents.
    pub damaged_headers: u32,
    /// The head sector holds a torn write: it is taken as full.
    pub sealed_head: bool,
    /// The head sector's last chunk is torn, and writing goes on after it.
    pub resumed_head: bool,
    /// The newest checkpoint in the head sector (`NO_ADDR`: none).
    pub head_checkpoint: u32,
    /// The checkpoint the head sector's header names.
    pub header_checkpoint: u32,
    /// The batch sequence of a checkpoint that began in an earlier sector
    /// and ends in the head: its continuation is the head's first chunk.
    /// The head's header names the checkpoint before it (the head was
    /// opened while it was being written); [`Log::checkpoint_ending_in`]
    /// finds where it begins.
    pub continued_checkpoint: Option<u32>,
    /// The end of the head sector's sound chunks.
    pub head_valid_end: u32,
}

impl<F: NorFlash> Log<F> {
    /// Finds the ring on the partition and sets the log's head, head
    /// sequence, erase count, tail (the head, until the store walks back)
    /// and write position. `None`: the partition is blank and
    /// `format_if_blank` was asked.
    ///
    /// Errors: [`Error::NotFormatted`] for a blank or foreign partition
    /// (blank only without `format_if_blank`), [`Error::UnsupportedVersion`]
    /// for an image of a newer format, [`Error::Geometry`] for a store
    /// (of version 4 on) written with another sector or write unit size.
    #[inline(never)]
    pub fn open(&mut self, format_if_blank: bool) -> Result<Option<Opened>, Fail> {
        let geo = self.geo;
        let mut report = Opened::default();
        // 1. Sector headers: find the head. A first pass reads 12 bytes of
        // each (magic, version, flags, sequence) and checks only the
        // winner's CRC; if that fails, a second pass checks every header.
        let mut newest: Option<(u32, u32, u32, u32)> = None;
        let mut all_erased = true;
        // The winner of the first pass: its index (`NO_ADDR`: none yet),
        // sequence and version.
        let mut best = (NO_ADDR, 0u32, 0u16);
        // Whether the headers' first bytes are format 9's arithmetic (the
        // same sequence less index, modulo the sectors, and all within a
        // turn of the ring): the sector table is laid out by it, else
        // takes the sequences read (`table.rs`). (`u32::MAX`: none seen;
        // the fewest and most sequences seen.)
        #[cfg(feature = "sector-table")]
        let (mut residue, mut in_order, mut span) = (u32::MAX, true, (u32::MAX, 0u32));
        // (And each sequence read goes in the table, unchecked, in case
        // they are not.)
        #[cfg(feature = "sector-table")]
        self.table.begin_prefixes();
        // (Every header is read, or the open fails.)
        report.sector_headers = geo.count;
        for i in 0..geo.count {
            let mut b = [0u8; 12];
            self.io().read(geo.sector_start(i), &mut b)?;
            if b.iter().all(|x| *x == 0xFF) {
                continue;
            }
            all_erased = false;
            if u32_at(&b, 0) != crate::layout::SECTOR_MAGIC_VALUE {
                continue;
            }
            let version = u16_at(&b, 4);
            if version > crate::layout::FORMAT_VERSION {
                if let SectorHeader::Newer { version } = self.io().sector_header(i)? {
                    let supported = crate::layout::FORMAT_VERSION;
                    return Err(self.parked().unsupported_version(version, supported));
                }
                continue;
            }
            let seq = u32_at(&b, 8);
            // Version 4 on: the header names the geometry it was written
            // with. Another one is refused before anything is misread.
            if version >= crate::layout::GEOMETRY_VERSION
                && u16_at(&b, 6) != crate::layout::geometry_flags(&geo)
            {
                if let SectorHeader::Valid { flags, .. } = self.io().sector_header(i)? {
                    let (sector, write) = crate::layout::flags_geometry(flags);
                    return Err(self.parked().geometry(sector, write));
                }
                continue;
            }
            if version >= crate::layout::MIN_FORMAT_VERSION && (best.0 == NO_ADDR || seq > best.1) {
                best = (i, seq, version);
            }
            #[cfg(feature = "sector-table")]
            if version >= crate::layout::MIN_FORMAT_VERSION {
                let r = (seq % geo.count + geo.count - i) % geo.count;
                in_order &= residue == u32::MAX || residue == r;
                residue = r;
                span = (span.0.min(seq), span.1.max(seq));
                self.table.note_prefix(i, seq);
            }
        }
        if best.0 != NO_ADDR {
            let (i, seq, _) = best;
            if let SectorHeader::Valid {
                seq: s,
                erase_count,
                checkpoint,
                ..
            } = self.io().sector_header(i)?
            {
                if s == seq {
                    newest = Some((i, seq, erase_count, checkpoint));
                }
            }
        }
        if newest.is_none() && best.0 != NO_ADDR {
            report.sector_headers += geo.count;
            for i in 0..geo.count {
                if let SectorHeader::Valid {
                    seq,
                    erase_count,
                    checkpoint,
                    ..
                } = self.io().sector_header(i)?
                {
                    if newest.is_none_or(|n| seq > n.1) {
                        newest = Some((i, seq, erase_count, checkpoint));
                    }
                }
            }
        }
        if newest.is_none() && format_if_blank && all_erased {
            // Formatting is only for a partition that is erased through and
            // through, never for a foreign one.
            if !self.erased(0, geo.capacity())? {
                return Err(Fail::NOT_FORMATTED);
            }
        }
        let Some((mut head, mut head_seq, head_erase_count, header_checkpoint)) = newest else {
            if format_if_blank && all_erased {
                return Ok(None);
            }
            return Err(Fail::NOT_FORMATTED);
        };
        // The head's own header may have rotted: then the newest valid
        // header is the sector before it. Such a sector holds sound chunks
        // newer than any of that one's; a sector whose opening was cut
        // holds none (its erase, if cut, leaves only older ones). It is
        // taken as the head, sealed, and kept in the ring like any sector
        // with a damaged header.
        let next = super::ring::next(&geo, head);
        if next != head && self.io().sector_header(next)? == SectorHeader::Invalid {
            let before = self.io().chunk_header(geo.first_chunk(head))?;
            let after = self.io().chunk_header(geo.first_chunk(next))?;
            if let (Some(b), Some(a)) = (before, after) {
                // (Equal: the head's first batch goes on in the next sector.)
                if a.seq >= b.seq && self.first_chunk_sound(next)? {
                    head = next;
                    head_seq += 1;
                    report.damaged_headers += 1;
                    report.sealed_head = true;
                }
            }
        }
        self.head = head;
        self.head_seq = head_seq;
        self.head_erase_count = head_erase_count;
        self.tail_seq = head_seq;
        // Until the store finds the tail (`Log::set_tail_seq`), the sector
        // table takes every sector for the format 9 ring ending at the
        // head, so that the mount's reads (a checkpoint that began in the
        // sector before the head) go on in physical order, as they were
        // written; the sectors before the head are not free yet.
        // A ring with holes (format 10) takes the sequences the first pass
        // read, unchecked until a full checkpoint decides them or the
        // headers are read whole (`table.rs`).
        #[cfg(feature = "sector-table")]
        if in_order && span.1.saturating_sub(span.0) < geo.count || !self.table.on() {
            self.table.fill(
                &geo,
                &super::Ring {
                    head,
                    head_seq,
                    tail_seq: head_seq.saturating_sub(geo.count - 1),
                },
            );
        } else {
            self.table_from_prefixes(head, head_seq);
        }
        // 2. The head sector: the newest checkpoint in it, and where writing
        // goes on.
        let mut pos = geo.first_chunk(head);
        // Walk the chunk headers. A torn chunk is the last one or followed
        // by a sequence gap or by damage (module docs), so only those are
        // CRC-checked; damage elsewhere is found, and confined, when a
        // record is read.
        let sector_end = geo.sector_start(head) + geo.sector;
        let mut last: Option<ChunkAt> = None;
        // The two newest checkpoints that begin in the head (`NO_ADDR`: none).
        let mut checkpoints = [NO_ADDR; 2];
        // The last chunk's CRC, once checked: its address (`NO_ADDR`:
        // none checked) and whether it is sound.
        let mut checked = (NO_ADDR, false);
        // The walk ended at an erased header whose program piece is erased.
        let mut at_end = false;
        // The walk ended at a header that does not decode (torn or
        // rotted) with no sound chunk after it, at this address.
        // (`NO_ADDR`: the walk ended otherwise.)
        let mut torn_piece = NO_ADDR;
        loop {
            match self.slot_at(head, pos)? {
                Slot::Chunk(c) => {
                    // Sequence numbers grow by one from chunk to chunk: a gap
                    // may mean the chunk before has a length damaged at rest
                    // and this is not a chunk at all. If the one before fails
                    // its CRC, the walk resumes at the next sound chunk.
                    if let Some(l) = last {
                        if c.header.seq != l.header.seq.wrapping_add(1) && checked.0 != l.address {
                            let ok = self.crc_noted(&l, &mut checked)?;
                            if !ok {
                                // A torn checkpoint written past is no
                                // checkpoint: the one before it is.
                                drop_torn(&mut checkpoints, l.address);
                                match self.resync(head, l.address + geo.write)? {
                                    Some(p) if p != pos => {
                                        pos = p;
                                        continue;
                                    }
                                    _ => {}
                                }
                            }
                        }
                    }
                    self.next_seq = self.next_seq.max(c.header.seq.wrapping_add(1));
                    if c.header.kind == crate::layout::kind::CHECKPOINT {
                        if c.header.is_first() {
                            checkpoints = [checkpoints[1], c.address];
                        } else if c.address == geo.first_chunk(head) {
                            report.continued_checkpoint = Some(c.header.seq);
                        }
                    }
                    last = Some(c);
                    pos += geo.chunk_size(c.header.len);
                }
                Slot::End => {
                    // The last chunk before the end fails its CRC: a torn
                    // write, or a length damaged at rest that passed over
                    // sound chunks. Look for them before the end; found,
                    // the damaged chunk is left behind and the walk goes on.
                    if let Some(c) = last {
                        let ok = self.crc_noted(&c, &mut checked)?;
                        if !ok {
                            if let Some(p) = self.resync_before(head, c.address + geo.write, pos)? {
                                if p < pos {
                                    drop_torn(&mut checkpoints, c.address);
                                    pos = p;
                                    continue;
                                }
                            }
                        }
                    }
                    // A torn first piece may have left bits after an erased
                    // header: the rest of that piece must be erased too.
                    let piece_end = ((pos / STAGE as u32 + 1) * STAGE as u32).min(sector_end);
                    // Sealed: a later walk would stop at the erased header
                    // and never see what came after.
                    if pos < sector_end && !self.erased(pos, piece_end - pos)? {
                        report.sealed_head = true;
                    } else {
                        at_end = true;
                    }
                    break;
                }
                Slot::Damaged => {
                    // Damage at rest followed by sound chunks (or a torn
                    // header a mount wrote on after): go on after it. Damage
                    // at the end is a torn write (below).
                    // (What resync finds lies at `from` or after it: past
                    // the last chunk, or past `pos` if there is none.)
                    let from = last.map_or(pos, |c| c.address) + geo.write;
                    if let Some(p) = self.resync(head, from)? {
                        pos = p;
                        continue;
                    }
                    torn_piece = pos;
                    break;
                }
            }
        }
        let mut valid_end = pos;
        let last_sound = match last {
            Some(c) if checked.0 == c.address => checked.1,
            Some(c) => self.crc_ok(&c)?,
            None => true,
        };
        // Where writing may go on after a torn write (module docs, "Torn
        // head"), if everything from there to the sector's end is erased
        // (`u32::MAX`: nowhere, damage seals the head), and the batch
        // sequence number the next chunk then takes at least (0: any).
        let mut from = u32::MAX;
        let mut skip = 0;
        if let (Some(c), false) = (last, last_sound) {
            valid_end = c.address;
            drop_torn(&mut checkpoints, c.address);
            // The torn chunk's header landed: its length, which a tear that
            // clears bits can only make read larger, bounds what was
            // programmed; past it, to the sector's end, all must be erased
            // (nothing is programmed after a torn write: this refuses a
            // length rotted at rest, or a random tear, that ends short of
            // programmed bytes). The next chunk's sequence number skips one,
            // so that every later walk and scan checks this one's CRC.
            // (`at_end`: the walk ended at erased space, not at damage.)
            if let Some(s) = c.header.seq.checked_add(2) {
                if at_end && pos == c.address + geo.chunk_size(c.header.len) {
                    (from, skip) = (pos, s);
                }
            }
        } else if torn_piece != NO_ADDR {
            let at = torn_piece;
            // Damage with no sound chunk after it: a header torn in its
            // chunk's first program piece (a later piece is only written
            // after the header's has landed), so nothing past the end of
            // that piece was programmed. Damage at rest (a rotted header
            // of a longer chunk) shows as programmed bytes past it.
            // A header that crosses into the next piece (write units of 1
            // or 2 B) may have been torn by that piece's program: sealed.
            let piece_end = (at / STAGE as u32 + 1) * STAGE as u32;
            if at + CHUNK_HEADER_LEN <= piece_end {
                from = piece_end;
            }
        }
        // Writing goes on at `from`.
        let resume = from < sector_end && self.erased(from, sector_end - from)?;
        if resume {
            self.next_seq = self.next_seq.max(skip);
            // (A head whose own header rotted stays sealed.)
            if !report.sealed_head {
                report.resumed_head = true;
            }
        } else if torn_piece != NO_ADDR || !last_sound {
            report.sealed_head = true;
        }
        let head_checkpoint = checkpoints[1];
        // A head of an older format takes no more writes: the first write
        // opens a sector of this format, so that an engine of the older one
        // refuses the image from then on rather than misread what this one
        // wrote. Nothing is written here (a store only read stays as it is).
        let version = match best {
            (i, _, v) if i == head => v,
            _ => {
                let mut v = [0u8; 2];
                self.io().read(geo.sector_start(head) + 4, &mut v)?;
                u16::from_le_bytes(v)
            }
        };
        let older = !report.sealed_head && version < crate::layout::FORMAT_VERSION;
        if older && report.resumed_head {
            // Not resumed: the head takes no more writes anyway.
            report.resumed_head = false;
            report.sealed_head = true;
        }
        if report.sealed_head || older {
            pos = sector_end;
        } else if resume {
            pos = from;
        }
        self.write_pos = pos;
        // 3. Sectors erased ahead (version 8 on): the head's last chunk, if
        // sound, says how many free sectors after the head had been erased,
        // every erase done, when it was written. None of them is erased
        // again while that chunk has the last word (`ahead.rs`), and an
        // opening that programmed any of a header's bytes left the sector
        // not erased there: each still erased where its header goes is
        // trusted, up to the first that is not, and read through before the
        // first write (`Log::settle_ahead`, which also takes back what is
        // said but not trusted). A sealed head is trusted for none (nothing
        // can be written after its chunks to take anything back; every
        // later mount finds it sealed too). The erase count an old header
        // carried is gone: the head's + 1.
        self.erased_ahead = 0;
        self.ahead_said = 0;
        let sealed = report.sealed_head || older;
        if let (Some(c), true, false) = (last, last_sound, sealed) {
            // A count is written only where a header-only chunk fits after
            // it, to take it back: one anywhere else is not trusted.
            let end = c.address + geo.chunk_size(c.header.len);
            if version >= ERASED_AHEAD_VERSION && end + NOTE_ROOM <= sector_end {
                self.ahead_said = c.header.ahead();
                let claimed = self.ahead_said.min(ERASE_AHEAD as u32).min(geo.count - 1);
                let mut sector = head;
                for k in 0..claimed {
                    sector = super::ring::next(&geo, sector);
                    let at = geo.sector_start(sector);
                    if !self.erased(at, geo.sector_header)? {
                        break;
                    }
                    self.ahead_counts[k as usize] = head_erase_count.saturating_add(1);
                    self.erased_ahead = k + 1;
                }
            }
        }
        self.ahead_unread = self.erased_ahead;
        report.head_checkpoint = head_checkpoint;
        report.header_checkpoint = header_checkpoint;
        report.head_valid_end = valid_end;
        Ok(Some(report))
    }

    /// Where the checkpoint of batch `seq` begins, given that its
    /// continuation is the head sector's first chunk
    /// ([`Opened::continued_checkpoint`]): the chunk of that batch, with
    /// the `FIRST` flag, that fills the end of a sector before the head.
    /// Walks the chunk headers of the sector before the head (and of the
    /// ones before it while their first chunk continues the same batch);
    /// `None` if the ring does not reach back there or the walk meets
    /// damage (the mount then loads the checkpoint the head's header
    /// names, and scans from it). Whether the checkpoint is sound is for
    /// its loader to check. Bounded by the ring.
    pub fn checkpoint_ending_in(&mut self, seq: u32) -> Result<Option<u32>, Fail> {
        let geo = self.geo;
        let mut sector = self.head;
        let mut sector_seq = self.head_seq;
        for _ in 1..geo.count {
            sector = super::ring::prev(&geo, sector);
            sector_seq = sector_seq.wrapping_sub(1);
            // (With holes, the sector of the sequence before.)
            #[cfg(feature = "sector-table")]
            if self.table.on() {
                match self.table.index_of_seq(sector_seq) {
                    Some(at) => sector = at,
                    None => return Ok(None),
                }
            }
            if !self.header_seq_is(sector, sector_seq)? {
                return Ok(None);
            }
            let end = geo.sector_start(sector) + geo.sector;
            let mut pos = geo.first_chunk(sector);
            loop {
                let Slot::Chunk(c) = self.slot_at(sector, pos)? else {
                    return Ok(None);
                };
                let next = pos + geo.chunk_size(c.header.len);
                if c.header.seq == seq && c.header.kind == crate::layout::kind::CHECKPOINT {
                    if next != end {
                        return Ok(None);
                    }
                    if c.header.is_first() {
                        return Ok(Some(pos));
                    }
                    // The batch began in a sector further back.
                    break;
                }
                if next >= end {
                    return Ok(None);
                }
                pos = next;
            }
        }
        Ok(None)
    }

    /// After damage, the next sound chunk of `sector` at or after `from`
    /// (its header decodes, it fits, its CRC checks out), searched word by
    /// word. Bounded by the sector; used only when damage is found.
    #[inline(always)]
    pub fn resync(&mut self, sector: u32, from: u32) -> Result<Option<u32>, Fail> {
        self.resync_before(sector, from, u32::MAX - CHUNK_HEADER_LEN)
    }

    /// [`resync`](Self::resync) for a chunk that starts before `until`.
    #[inline(always)]
    pub fn resync_before(
        &mut self,
        sector: u32,
        from: u32,
        until: u32,
    ) -> Result<Option<u32>, Fail> {
        let p = self.resync_word(sector, from, until)?;
        Ok((p != u32::MAX).then_some(p))
    }
    /// [`resync_before`](Self::resync_before) as a word, `u32::MAX` for
    /// `None` (no chunk starts there; see [`Io::chunk_crc_ok_word`]).
    #[inline(never)]
    fn resync_word(&mut self, sector: u32, from: u32, until: u32) -> Result<u32, Fail> {
        let end = (self.geo.sector_start(sector) + self.geo.sector).min(until + CHUNK_HEADER_LEN);
        let mut p = align_up(from, self.geo.write).max(self.geo.first_chunk(sector));
        while p + CHUNK_HEADER_LEN <= end {
            if self.sound_at_word(sector, p)? != 0 {
                return Ok(p);
            }
            p += self.geo.write;
        }
        Ok(u32::MAX)
    }

    /// [`crc_ok`](Self::crc_ok), noted in `checked` (the chunk's address
    /// and the answer) for the head walk.
    #[inline(never)]
    fn crc_noted(&mut self, c: &ChunkAt, checked: &mut (u32, bool)) -> Result<bool, Fail> {
        let ok = self.crc_ok_word(c)? != 0;
        *checked = (c.address, ok);
        Ok(ok)
    }

    /// Checks the chunk's CRC.
    #[inline(always)]
    pub fn crc_ok(&mut self, c: &ChunkAt) -> Result<bool, Fail> {
        Ok(self.crc_ok_word(c)? != 0)
    }
    /// [`Log::crc_ok`] as a word (1 or 0; see [`Io::chunk_crc_ok_word`]).
    #[inline(never)]
    fn crc_ok_word(&mut self, c: &ChunkAt) -> Result<u32, Fail> {
        let mut io = Io {
            flash: &mut self.flash,
            geo: &self.geo,
            #[cfg(feature = "sector-table")]
            table: &self.table,
        };
        io.chunk_crc_ok_word(c.address, &c.header, &mut self.buf)
    }
}

/// The two newest checkpoints that begin in the head (`Log::open`), once
/// the chunk at `at` failed its CRC: a torn checkpoint is no checkpoint,
/// and the one before it is the newest.
#[inline(never)]
fn drop_torn(checkpoints: &mut [u32; 2], at: u32) {
    if checkpoints[1] == at {
        *checkpoints = [NO_ADDR, checkpoints[0]];
    }
}
