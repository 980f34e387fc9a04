//! Flash access for the log and the layers above it: the driver wrapped
//! with what its errors could not carry ([`Dev`]), reads checked against
//! the partition's end and reads of a batch's payload stream across sector
//! ends ([`Io`]), and the sources of a batch's payload bytes ([`Payload`]).
//!
//! Invariants: every read goes through [`Io::read`], which refuses an
//! address or a length past the partition's end with `Corrupted` (a
//! pointer from flash is never trusted); a payload stream is read across
//! at most as many sector ends as the partition has sectors.
//!
//! Power loss: nothing here writes on its own. [`Dev::write`] and
//! [`Dev::erase`] are the driver's calls; what a cut in them leaves is the
//! log's concern (`log/mod.rs`).

use embedded_storage::nor_flash::NorFlash;

use crate::error::{fail, Fail, Parked};
use crate::layout::{
    decode_sector_header, ChunkHeader, Geometry, SectorHeader, CHUNK_HEADER_LEN, SECTOR_HEADER_LEN,
};

/// Flash access with the partition's geometry.
pub(crate) struct Io<'a, F: NorFlash> {
    pub flash: &'a mut Dev<F>,
    pub geo: &'a Geometry,
    /// The log's sector table (feature `sector-table`): where a stream
    /// goes on at a sector's end.
    #[cfg(feature = "sector-table")]
    pub table: &'a super::ring::SectorTable,
}

/// The flash, with what the errors met on it could not carry: the
/// driver's error of a flash failure and the numbers of the error
/// ([`Parked`]), until the public function that returns the error
/// collects it.
pub(crate) struct Dev<F: NorFlash> {
    pub dev: F,
    pub parked: Parked<F::Error>,
}

impl<F: NorFlash> Dev<F> {
    /// Reads `out.len()` bytes at `address`; a driver error is parked.
    #[inline(never)]
    pub fn read(&mut self, address: u32, out: &mut [u8]) -> Result<(), Fail> {
        self.dev
            .read(address, out)
            .map_err(|e| self.parked.flash(e))
    }

    /// Programs `bytes` at `address`; a driver error is parked.
    #[inline(never)]
    pub fn write(&mut self, address: u32, bytes: &[u8]) -> Result<(), Fail> {
        self.dev
            .write(address, bytes)
            .map_err(|e| self.parked.flash(e))
    }

    /// Erases `from..to`; a driver error is parked.
    #[inline(never)]
    pub fn erase(&mut self, from: u32, to: u32) -> Result<(), Fail> {
        self.dev.erase(from, to).map_err(|e| self.parked.flash(e))
    }
}

/// A source of batch payload bytes.
///
/// `fill` is called with increasing offsets in two passes (checksum, then
/// program); each pass starts again at offset 0.
pub(crate) trait Payload<F: NorFlash> {
    /// Total payload length in bytes.
    fn len(&self) -> u32;
    /// Copies payload bytes `offset..offset + out.len()` into `out`.
    fn fill(&mut self, io: &mut Io<'_, F>, offset: u32, out: &mut [u8]) -> Result<(), Fail>;
}

/// A payload made of byte slices laid end to end.
pub(crate) struct Slices<'a, const N: usize>(pub [&'a [u8]; N]);

impl<F: NorFlash, const N: usize> Payload<F> for Slices<'_, N> {
    fn len(&self) -> u32 {
        self.0.iter().map(|s| s.len() as u32).sum()
    }

    fn fill(&mut self, _io: &mut Io<'_, F>, offset: u32, out: &mut [u8]) -> Result<(), Fail> {
        copy_from_parts(self.0.iter().copied(), offset, out);
        Ok(())
    }
}

/// Copies `out.len()` bytes starting at `offset` of the concatenation of
/// `parts` into `out`.
pub(crate) fn copy_from_parts<'p>(
    parts: impl Iterator<Item = &'p [u8]>,
    offset: u32,
    out: &mut [u8],
) {
    let mut skip = offset as usize;
    let mut done = 0;
    for part in parts {
        if done == out.len() {
            break;
        }
        if skip >= part.len() {
            skip -= part.len();
            continue;
        }
        let n = (part.len() - skip).min(out.len() - done);
        // (Cut with split_at: the bounds are known, no panic path.)
        let to = out.split_at_mut(done).1.split_at_mut(n).0;
        to.copy_from_slice(part.split_at(skip).1.split_at(n).0);
        done += n;
        skip = 0;
    }
}

impl<F: NorFlash> Io<'_, F> {
    /// What the errors met could not carry ([`Parked`]).
    pub fn parked(&mut self) -> &mut Parked<F::Error> {
        &mut self.flash.parked
    }

    /// Reads `out.len()` bytes at `address`.
    pub fn read(&mut self, address: u32, out: &mut [u8]) -> Result<(), Fail> {
        // (In u32: past the end if the address is, or the bytes after it
        // are fewer than asked.)
        let capacity = self.geo.capacity();
        if address > capacity || out.len() > (capacity - address) as usize {
            return Err(self.parked().at(
                fail!(Corrupted, "a pointer leads past the end of the partition"),
                address,
            ));
        }
        self.flash.read(address, out)
    }

    /// Reads `out.len()` bytes of a batch payload stream starting at
    /// `address`: at a sector end the stream continues after the next
    /// sector's header and continuation chunk header.
    pub fn read_stream(&mut self, mut address: u32, out: &mut [u8]) -> Result<(), Fail> {
        let mut done = 0;
        let mut hops = 0;
        while done < out.len() {
            let end = self.geo.sector_end(address);
            let n = ((end - address) as usize).min(out.len() - done);
            self.read(address, out.split_at_mut(done).1.split_at_mut(n).0)?;
            done += n;
            if done < out.len() {
                hops += 1;
                if hops > self.geo.count {
                    return Err(self.parked().at(
                        fail!(Corrupted, "a payload stream longer than the partition"),
                        address,
                    ));
                }
                address = self.continued(self.geo.sector_of(address));
            }
        }
        Ok(())
    }

    /// The address of the byte `len` bytes further along the payload stream
    /// that starts at `address` (the continuation's address when that byte
    /// is in the next sector).
    pub fn stream_advance(&self, address: u32, len: u32) -> u32 {
        #[cfg(feature = "sector-table")]
        if self.table.on() {
            return super::ring::stream_advance_by(self.geo, address, len, |s| {
                self.table.next(self.geo, s)
            });
        }
        super::ring::stream_advance(self.geo, address, len)
    }

    /// [`stream_advance`](Self::stream_advance) for a stream being
    /// written, whose later sectors are not opened yet: they are the ones
    /// the head opens next ([`SectorTable::next_planned`]).
    ///
    /// [`SectorTable::next_planned`]: super::ring::SectorTable::next_planned
    pub fn planned_advance(&self, address: u32, len: u32) -> u32 {
        #[cfg(feature = "sector-table")]
        if self.table.on() {
            return super::ring::stream_advance_by(self.geo, address, len, |s| {
                self.table.next_planned(self.geo, s)
            });
        }
        super::ring::stream_advance(self.geo, address, len)
    }

    /// The sector after `index` in ring order: where a batch or a stream
    /// that leaves sector `index` at its end goes on.
    #[inline(always)]
    pub fn successor(&self, index: u32) -> u32 {
        #[cfg(feature = "sector-table")]
        if self.table.on() {
            return self.table.next(self.geo, index);
        }
        super::ring::next(self.geo, index)
    }

    /// Whether the `len` stream bytes from `address` have one in sector
    /// `index`: the sectors the stream passes, its first to the one of its
    /// last byte, in ring order.
    #[cfg(any(feature = "memory", feature = "sector-table"))] // a memory scrub, a moves record
    pub fn stream_touches(&self, address: u32, len: u32, index: u32) -> bool {
        let last = self
            .geo
            .sector_of(self.stream_advance(address, len.saturating_sub(1)));
        let mut sector = self.geo.sector_of(address);
        for _ in 0..self.geo.count {
            if sector == index {
                return true;
            }
            if sector == last {
                break;
            }
            sector = self.successor(sector);
        }
        false
    }

    /// The sector carrying sequence `seq` of the ring `ring`, if one in
    /// use does ([`Log::sector_of_seq`](super::Log::sector_of_seq), for a
    /// walk that holds a copy of the ring's position).
    pub fn sector_of_seq(&self, ring: &super::Ring, seq: u32) -> Option<u32> {
        #[cfg(feature = "sector-table")]
        if self.table.on() {
            return self.table.index_of_seq(seq);
        }
        ring.sector_of(self.geo, seq)
    }

    /// Where the payload stream that leaves sector `index` at its end goes
    /// on: after its successor's header and continuation chunk header.
    #[inline(always)]
    pub fn continued(&self, index: u32) -> u32 {
        self.geo.first_chunk(self.successor(index)) + CHUNK_HEADER_LEN
    }

    /// [`read_stream`](Self::read_stream) `skip` bytes along the stream
    /// from `address` ([`stream_advance`](Self::stream_advance)).
    #[inline(never)]
    pub fn read_stream_after(
        &mut self,
        address: u32,
        skip: u32,
        out: &mut [u8],
    ) -> Result<(), Fail> {
        let at = self.stream_advance(address, skip);
        self.read_stream(at, out)
    }

    /// Reads and decodes the header of sector `index`.
    pub fn sector_header(&mut self, index: u32) -> Result<SectorHeader, Fail> {
        let mut b = [0u8; SECTOR_HEADER_LEN as usize];
        self.read(self.geo.sector_start(index), &mut b)?;
        Ok(decode_sector_header(&b))
    }

    /// Reads the chunk header at `address`; `None` if erased or invalid.
    pub fn chunk_header(&mut self, address: u32) -> Result<Option<ChunkHeader>, Fail> {
        let mut b = [0u8; CHUNK_HEADER_LEN as usize];
        self.read(address, &mut b)?;
        Ok(ChunkHeader::decode(&b))
    }

    /// Checks a chunk's CRC by reading its payload through `scratch`.
    #[inline(always)]
    pub fn chunk_crc_ok(
        &mut self,
        address: u32,
        h: &ChunkHeader,
        scratch: &mut [u8],
    ) -> Result<bool, Fail> {
        Ok(self.chunk_crc_ok_word(address, h, scratch)? != 0)
    }
    /// [`Io::chunk_crc_ok`] as a word, 1 or 0: returned in registers, a bool through memory.
    /// (Inline: the out-of-line call is [`Io::chunk_crc`]'s, no deeper.)
    #[inline(always)]
    pub(super) fn chunk_crc_ok_word(
        &mut self,
        address: u32,
        h: &ChunkHeader,
        scratch: &mut [u8],
    ) -> Result<u32, Fail> {
        Ok(u32::from(self.chunk_crc(address, h, scratch)? == h.crc))
    }

    /// The CRC-32 of the chunk at `address` with header `h`, its 8 header
    /// bytes then its payload, read through `scratch` as the bytes after
    /// its header (not a payload stream): what [`Io::chunk_crc_ok`] compares
    /// with `h.crc`, and what the flipped-bit search (`cursor`) takes apart.
    #[inline(never)]
    pub(crate) fn chunk_crc(
        &mut self,
        address: u32,
        h: &ChunkHeader,
        scratch: &mut [u8],
    ) -> Result<u32, Fail> {
        let mut d = ChunkHeader::crc_start(h.kind, h.flags, h.len, h.seq);
        let mut at = address + CHUNK_HEADER_LEN;
        let mut left = h.len;
        while left > 0 {
            let n = (left as usize).min(scratch.len());
            let part = scratch.split_at_mut(n).0;
            self.read(at, part)?;
            d.update(part);
            at += n as u32;
            left -= n as u32;
        }
        Ok(d.finalize())
    }

    /// Whether `len` bytes at `address` are all 0xFF, as a word (1 or 0;
    /// see [`Io::chunk_crc_ok_word`]; [`Log::erased`](super::Log::erased) reads through the
    /// staging buffer).
    pub(super) fn is_erased_word(
        &mut self,
        address: u32,
        len: u32,
        scratch: &mut [u8],
    ) -> Result<u32, Fail> {
        let mut at = address;
        let end = address + len;
        while at < end {
            let n = ((end - at) as usize).min(scratch.len());
            let part = scratch.split_at_mut(n).0;
            self.read(at, part)?;
            if part.iter().any(|b| *b != 0xFF) {
                return Ok(0);
            }
            at += n as u32;
        }
        Ok(1)
    }
}
