//! Geometry and the byte layout of the two structures every sector holds:
//! the sector header and the chunk header. See `docs/FORMAT.md`.
//!
//! Everything on flash is little-endian and encoded by hand here; nothing is
//! transmuted. Decoding never panics: every byte pattern decodes to a value or
//! to "invalid".

use embedded_storage::nor_flash::NorFlash;

/// On-flash format version written by this crate. Images with a newer
/// version are refused. Version 10 (full checkpoints that record the
/// sector table, sectors released out of ring order) is written only with
/// the feature `sector-table`, which is off by default while format 10 is
/// built in stages (`docs/DESIGN.md`).
#[cfg(not(feature = "sector-table"))]
pub const FORMAT_VERSION: u16 = 9;
/// On-flash format version written by this crate (format 10, feature
/// `sector-table`). Images with a newer version are refused.
#[cfg(feature = "sector-table")]
pub const FORMAT_VERSION: u16 = 10;
/// Oldest format version this crate mounts (and upgrades by writing).
pub const MIN_FORMAT_VERSION: u16 = 2;

/// First format version whose sector headers carry the geometry they were
/// written with ([`geometry_flags`]); older headers carry flags 0.
pub(crate) const GEOMETRY_VERSION: u16 = 4;

/// First format version whose chunk headers say how many free sectors after
/// their sector were soundly erased when they were written
/// ([`ChunkHeader::ahead`]); older chunks carry 0 there.
pub(crate) const ERASED_AHEAD_VERSION: u16 = 8;

/// The sector header's flags for a store of `geo` (version 4 on): bits 0..5
/// the log2 of the sector (erase unit) size, 7 to 17; bits 5..8 the log2 of
/// the write unit, 0 to 5; bits 8..16 zero. Never 0 (a sector is at least
/// 128 B), so a version 4 header always says what it was written with.
pub(crate) fn geometry_flags(geo: &Geometry) -> u16 {
    (geo.sector.trailing_zeros() | geo.write.trailing_zeros() << 5) as u16
}

/// The (sector, write unit) sizes that `flags` of a version 4 header name.
pub(crate) fn flags_geometry(flags: u16) -> (u32, u32) {
    (1 << (flags & 0x1F), 1 << ((flags >> 5) & 0x7))
}

/// Sector header magic: `"CLMS"` on flash.
pub(crate) const SECTOR_MAGIC: u32 = u32::from_le_bytes(*b"CLMS");
/// The same, for readers outside this module.
pub(crate) const SECTOR_MAGIC_VALUE: u32 = SECTOR_MAGIC;

/// Unpadded sector header length: magic u32, version u16, flags u16, sector
/// sequence u32, erase count u32, checkpoint address u32, CRC-32 u32.
pub(crate) const SECTOR_HEADER_LEN: u32 = 24;

/// Chunk header length: kind u8, flags u8, length low u16, sequence u32,
/// CRC-32 u32.
pub(crate) const CHUNK_HEADER_LEN: u32 = 12;

/// Largest chunk payload the header can describe (20 bits).
pub(crate) const CHUNK_PAYLOAD_MAX: u32 = (1 << 20) - 1;

/// Chunk flag: first chunk of a batch.
pub(crate) const CHUNK_FIRST: u8 = 1;
/// Chunk flag: last chunk of a batch; a batch without it never committed.
pub(crate) const CHUNK_LAST: u8 = 2;
/// Chunk flags, bits 2..3 (version 8 on): how many free sectors right after
/// the chunk's sector had been erased, to the end, when it was written
/// (erased ahead by idle-time maintenance), 0 to 3.
pub(crate) const CHUNK_AHEAD_SHIFT: u8 = 2;

/// The "no address" value in pointers.
pub(crate) const NO_ADDR: u32 = u32::MAX;

/// CRC-32 (ISO-HDLC, the zlib one) used for every checksum on flash.
pub(crate) const CRC: crc::Crc<u32> = crc::Crc::<u32>::new(&crc::CRC_32_ISO_HDLC);

/// The bit whose flip explains a CRC mismatch: `syndrome` is the CRC-32
/// computed over a message of `len` bytes XOR the CRC stored with it. Only
/// bits of bytes `from..to` are candidates. Returns `(byte, bit)`, the flip
/// being `message[byte] ^= 1 << bit`, or `None` if no single flip there
/// explains it.
///
/// CRC-32 is linear: for messages of one length, the CRCs of `m` and of
/// `m ^ e` differ by the CRC of `e` computed with a zero start and no final
/// XOR. For a single bit that is the bit pushed through the zero bytes after
/// it, so every candidate costs one byte step, walking from the message's
/// end. CRC-32's Hamming distance is at least 3 for any message a sector can
/// hold, so two different single flips never share a syndrome. Callers
/// confirm a correction with a second, independent check.
pub(crate) fn crc_single_bit_error(
    syndrome: u32,
    len: usize,
    from: usize,
    to: usize,
) -> Option<(usize, u8)> {
    // The reflected ISO-HDLC polynomial.
    const POLY: u32 = 0xEDB8_8320;
    let step = |mut r: u32| {
        for _ in 0..8 {
            r = (r >> 1) ^ if r & 1 != 0 { POLY } else { 0 };
        }
        r
    };
    if syndrome == 0 || from >= to.min(len) {
        return None;
    }
    for bit in 0..8u8 {
        // The effect of `1 << bit` in the last byte, then one byte earlier
        // at every step.
        let mut r = step(1u32 << bit);
        let mut byte = len - 1;
        loop {
            if byte < to && r == syndrome {
                return Some((byte, bit));
            }
            if byte == from {
                break;
            }
            byte -= 1;
            r = step(r);
        }
    }
    None
}

const _: () = assert!(SECTOR_HEADER_LEN.is_multiple_of(4) && CHUNK_HEADER_LEN.is_multiple_of(4));

/// Sizes of the partition, taken from the flash type and its capacity.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Geometry {
    /// Program unit in bytes.
    pub write: u32,
    /// Erase unit (sector) in bytes.
    pub sector: u32,
    /// Number of sectors.
    pub count: u32,
    /// Sector header length padded to the program unit.
    pub sector_header: u32,
}

/// Program and erase units of a flash (`Config::flash_units`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct FlashUnits {
    /// Bytes programmed at once, aligned: a power of two up to 32.
    pub write_bytes: u32,
    /// Bytes of a sector, the erase unit: a power of two from 128 B to
    /// 128 KiB.
    pub erase_bytes: u32,
}

/// The partition's geometry: the flash type's units, or `units` where the
/// configuration gives them (each a multiple of the type's); why a flash
/// cannot hold a clawmem store otherwise.
pub(crate) fn geometry<F: NorFlash>(
    flash: &F,
    units: Option<FlashUnits>,
) -> Result<Geometry, &'static str> {
    let (mut write, mut sector) = (F::WRITE_SIZE, F::ERASE_SIZE);
    if let Some(u) = units {
        let (w, e) = (u.write_bytes as usize, u.erase_bytes as usize);
        if w == 0 || e == 0 || w % write != 0 || e % sector != 0 {
            return Err("flash_units must be multiples of the flash type's write and erase sizes");
        }
        (write, sector) = (w, e);
    }
    if !write.is_power_of_two() || write > 32 {
        return Err("write size must be a power of two up to 32 bytes");
    }
    if !sector.is_power_of_two() || !(128..=128 * 1024).contains(&sector) || sector < write {
        return Err("erase size must be a power of two from 128 B to 128 KiB");
    }
    let capacity = flash.capacity();
    if !capacity.is_multiple_of(sector) {
        return Err("capacity is not a whole number of sectors");
    }
    if capacity >= NO_ADDR as usize {
        return Err("capacity must be below 4 GiB");
    }
    let count = capacity / sector;
    if count < 4 {
        return Err("the partition needs at least 4 sectors");
    }
    let write = write as u32;
    Ok(Geometry {
        write,
        sector: sector as u32,
        count: count as u32,
        sector_header: align_up(SECTOR_HEADER_LEN, write),
    })
}

/// Rounds `n` up to a multiple of `align` (a power of two).
pub(crate) const fn align_up(n: u32, align: u32) -> u32 {
    (n + align - 1) & !(align - 1)
}

impl Geometry {
    /// Total size in bytes.
    pub fn capacity(&self) -> u32 {
        self.sector * self.count
    }

    /// Sector index holding `address`.
    pub fn sector_of(&self, address: u32) -> u32 {
        address / self.sector
    }

    /// First byte of sector `index`.
    pub fn sector_start(&self, index: u32) -> u32 {
        index * self.sector
    }

    /// One past the last byte of the sector holding `address`.
    /// (A sector is a power of two bytes, as every geometry is made: the
    /// address with its offset bits set, plus one.)
    pub fn sector_end(&self, address: u32) -> u32 {
        (address | (self.sector - 1)) + 1
    }

    /// Where the first chunk of sector `index` starts.
    pub fn first_chunk(&self, index: u32) -> u32 {
        self.sector_start(index) + self.sector_header
    }

    /// The sector physically after `index`, the first after the last: ring
    /// order in format 9, for `log::ring` only (which every caller asks).
    pub fn next(&self, index: u32) -> u32 {
        if index + 1 == self.count {
            0
        } else {
            index + 1
        }
    }

    /// The sector physically before `index`, the last before the first:
    /// for `log::ring` only.
    pub fn prev(&self, index: u32) -> u32 {
        if index == 0 {
            self.count - 1
        } else {
            index - 1
        }
    }

    /// Space for chunks in one sector.
    pub fn sector_payload_space(&self) -> u32 {
        self.sector - self.sector_header
    }

    /// Bytes a chunk with `payload` bytes occupies.
    pub fn chunk_size(&self, payload: u32) -> u32 {
        align_up(CHUNK_HEADER_LEN + payload, self.write)
    }
}

/// A decoded sector header.
///
/// `repr(u32)` (RAM layout only): a word tag keeps the fields word aligned,
/// which makes the code that passes one around smaller.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[repr(u32)]
pub(crate) enum SectorHeader {
    /// Every header byte is 0xFF: the sector is (or looks) erased.
    Erased,
    /// A valid header of this format.
    Valid {
        /// Order in which the sector was opened; grows by one per opening.
        seq: u32,
        /// `SECTOR_FLAG_*`.
        flags: u16,
        /// Times this sector has been erased, as far as clawmem knows.
        erase_count: u32,
        /// Address of the newest checkpoint when the sector was opened.
        checkpoint: u32,
    },
    /// A valid clawmem header of a newer format.
    Newer {
        /// Its version.
        version: u16,
    },
    /// Anything else: torn, rotten or foreign.
    Invalid,
}

/// Encodes a sector header into the first `SECTOR_HEADER_LEN` bytes of `out`.
pub(crate) fn encode_sector_header(
    out: &mut [u8],
    seq: u32,
    flags: u16,
    erase_count: u32,
    checkpoint: u32,
) {
    let words = [
        SECTOR_MAGIC,
        u32::from(FORMAT_VERSION) | u32::from(flags) << 16,
        seq,
        erase_count,
        checkpoint,
    ];
    for (k, w) in words.into_iter().enumerate() {
        put_u32(out, 4 * k, w);
    }
    let crc = CRC.checksum(&out[0..20]);
    put_u32(out, 20, crc);
}

/// Decodes a sector header from `bytes` (at least `SECTOR_HEADER_LEN` long).
pub(crate) fn decode_sector_header(bytes: &[u8]) -> SectorHeader {
    let Some(b) = bytes.get(..SECTOR_HEADER_LEN as usize) else {
        return SectorHeader::Invalid;
    };
    if b.iter().all(|x| *x == 0xFF) {
        return SectorHeader::Erased;
    }
    if u32_at(b, 0) != SECTOR_MAGIC || CRC.checksum(&b[0..20]) != u32_at(b, 20) {
        return SectorHeader::Invalid;
    }
    let version = u16_at(b, 4);
    if version > FORMAT_VERSION {
        return SectorHeader::Newer { version };
    }
    if version < MIN_FORMAT_VERSION {
        return SectorHeader::Invalid;
    }
    SectorHeader::Valid {
        seq: u32_at(b, 8),
        flags: u16_at(b, 6),
        erase_count: u32_at(b, 12),
        checkpoint: u32_at(b, 16),
    }
}

/// A decoded chunk header (its CRC is checked separately, over the payload).
///
/// `repr(C)` (RAM layout only; the encoding is [`ChunkHeader::encode`]): the
/// two bytes first, so that a `Result` carrying one copies whole words.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[repr(C)]
pub(crate) struct ChunkHeader {
    /// Record kind (`kind::*`).
    pub kind: u8,
    /// `CHUNK_FIRST` / `CHUNK_LAST`, and the sectors erased ahead
    /// ([`CHUNK_AHEAD_SHIFT`]).
    pub flags: u8,
    /// Payload length in bytes.
    pub len: u32,
    /// Sequence number of the batch; every chunk of a batch has the same.
    pub seq: u32,
    /// CRC-32 over the first 8 header bytes and the payload.
    pub crc: u32,
}

impl ChunkHeader {
    /// Encodes into 12 bytes.
    pub fn encode(&self) -> [u8; CHUNK_HEADER_LEN as usize] {
        let flags = (self.flags & 0x0F) | (((self.len >> 16) as u8 & 0x0F) << 4);
        let [k, f, l0, l1] =
            (u32::from(self.kind) | u32::from(flags) << 8 | (self.len & 0xFFFF) << 16)
                .to_le_bytes();
        let [s0, s1, s2, s3] = self.seq.to_le_bytes();
        let [c0, c1, c2, c3] = self.crc.to_le_bytes();
        [k, f, l0, l1, s0, s1, s2, s3, c0, c1, c2, c3]
    }

    /// Decodes 12 bytes. `None` if they are all 0xFF (erased) or name no
    /// known kind.
    pub fn decode(b: &[u8; CHUNK_HEADER_LEN as usize]) -> Option<ChunkHeader> {
        // (Erased bytes name kind 0xFF, which no class defines.)
        if !kind::is_known(b[0]) {
            return None;
        }
        Some(ChunkHeader {
            kind: b[0],
            flags: b[1] & 0x0F,
            len: u32::from(u16_at(b, 2)) | (u32::from(b[1] >> 4) << 16),
            seq: u32_at(b, 4),
            crc: u32_at(b, 8),
        })
    }

    /// Whether this chunk starts a batch.
    pub fn is_first(&self) -> bool {
        self.flags & CHUNK_FIRST != 0
    }

    /// Whether this chunk ends a batch.
    pub fn is_last(&self) -> bool {
        self.flags & CHUNK_LAST != 0
    }

    /// How many free sectors right after this chunk's sector were erased
    /// when it was written (0 in chunks of versions before 8).
    pub fn ahead(&self) -> u32 {
        u32::from(self.flags >> CHUNK_AHEAD_SHIFT) & 3
    }

    /// CRC digest primed with the header fields.
    pub fn crc_start(kind: u8, flags: u8, len: u32, seq: u32) -> crc::Digest<'static, u32> {
        let mut h = ChunkHeader {
            kind,
            flags,
            len,
            seq,
            crc: 0,
        }
        .encode();
        h[8..12].fill(0);
        let mut d = CRC.digest();
        d.update(&h[0..8]);
        d
    }
}

/// Record kinds: the byte that opens every chunk header.
///
/// A kind's high nibble is the class of the layer that owns the record, its
/// low nibble the owner's kind within the class. The owners declare their
/// kinds and what they mean: the session layer (`session.rs`: batches,
/// bases, deletions, blocks), stored objects (`store/objects.rs`) and
/// long-term memory (`store/memory/mod.rs`). The log owns one kind, the
/// checkpoint, which its sector headers point at and mount looks for. This
/// module knows only which kinds the format defines, so that a chunk header
/// with any other kind byte is not taken for a chunk, and where each class
/// counts its bytes.
pub(crate) mod kind {
    /// Engine state at a point in the log; mount starts from the newest.
    pub const CHECKPOINT: u8 = 0x01;
    /// No payload (version 8 on): its header's flags say which free sectors
    /// after its sector were erased ahead, once no other chunk says so
    /// ([`super::ChunkHeader::ahead`]).
    pub const ERASED_AHEAD: u8 = 0x02;
    /// The class of the session layer's kinds.
    pub const CLASS_SESSION: u8 = 0x10;
    /// The class of stored objects' kinds.
    pub const CLASS_OBJECT: u8 = 0x20;
    /// The class of long-term memory's kinds.
    pub const CLASS_MEMORY: u8 = 0x30;
    /// The kinds the format defines, as the first and last of each class
    /// (format 10, feature `sector-table`, adds the sessions' moves record,
    /// 0x14).
    #[cfg(not(feature = "sector-table"))]
    const DEFINED: [(u8, u8); 4] = [(0x01, 0x02), (0x10, 0x13), (0x20, 0x20), (0x30, 0x35)];
    #[cfg(feature = "sector-table")]
    const DEFINED: [(u8, u8); 4] = [(0x01, 0x02), (0x10, 0x14), (0x20, 0x20), (0x30, 0x35)];
    // No class 0xF0: an erased kind byte, 0xFF, is no kind
    // ([`super::ChunkHeader::decode`] relies on it).
    const _: () = assert!(DEFINED.len() < 0x0F);
    /// Slots a class has in the written-bytes table ([`usage_slot`]).
    pub const PER_CLASS: usize = 4;

    /// Whether `k` is a kind this format defines.
    pub fn is_known(k: u8) -> bool {
        match DEFINED.get(usize::from(k >> 4)) {
            Some(&(first, last)) => k >= first && k <= last,
            None => false,
        }
    }

    /// Whether `k` is a defined kind of `class` (owners check their
    /// declarations with it at compile time).
    pub const fn defined_in(k: u8, class: u8) -> bool {
        let (first, last) = DEFINED[(class >> 4) as usize];
        k & 0xF0 == class && k >= first && k <= last
    }

    /// The slot of `k` in the log's written-bytes table: one per defined
    /// kind, but memory's fifth and sixth (0x34, a put without lineage, and
    /// 0x35, a packed access record) share the slots of its first and second
    /// (0x30, a put, and 0x31, a tombstone): they count as items and as
    /// memory's other records.
    /// A moves record (0x14, feature `sector-table`) counts as a base
    /// (0x11): both are what relocation writes.
    pub fn usage_slot(k: u8) -> usize {
        #[cfg(feature = "sector-table")]
        let k = if k == 0x14 { 0x11 } else { k };
        usize::from(k >> 4).min(3) * PER_CLASS + usize::from(k & 3)
    }
}

/// Reads a little-endian u16 at `at` (caller guarantees bounds).
pub(crate) fn u16_at(b: &[u8], at: usize) -> u16 {
    match b[at..at + 2] {
        [x, y] => u16::from_le_bytes([x, y]),
        _ => 0,
    }
}

/// Writes `v` little-endian at `at` (caller guarantees bounds).
pub(crate) fn put_u32(b: &mut [u8], at: usize, v: u32) {
    if let [w, x, y, z] = &mut b[at..at + 4] {
        [*w, *x, *y, *z] = v.to_le_bytes();
    }
}

/// Reads a little-endian u32 at `at` (caller guarantees bounds).
pub(crate) fn u32_at(b: &[u8], at: usize) -> u32 {
    match b[at..at + 4] {
        [w, x, y, z] => u32::from_le_bytes([w, x, y, z]),
        _ => 0,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn geometry_flags_name_the_units_they_were_written_with() {
        for sector in (7..=17).map(|k| 1u32 << k) {
            for write in (0..=5).map(|k| 1u32 << k).filter(|w| *w <= sector) {
                let geo = Geometry {
                    write,
                    sector,
                    count: 8,
                    sector_header: 24,
                };
                let flags = geometry_flags(&geo);
                assert_ne!(flags, 0);
                assert_eq!(flags >> 8, 0);
                assert_eq!(flags_geometry(flags), (sector, write));
            }
        }
    }

    #[test]
    fn sector_header_round_trip_and_rejection() {
        let mut b = [0xFFu8; 24];
        assert_eq!(decode_sector_header(&b), SectorHeader::Erased);
        encode_sector_header(&mut b, 7, 1, 3, 0x1234);
        assert_eq!(
            decode_sector_header(&b),
            SectorHeader::Valid {
                seq: 7,
                flags: 1,
                erase_count: 3,
                checkpoint: 0x1234,
            }
        );
        for i in 0..24 {
            let mut c = b;
            c[i] ^= 0x10;
            assert_eq!(decode_sector_header(&c), SectorHeader::Invalid, "byte {i}");
        }
        let mut newer = b;
        newer[4..6].copy_from_slice(&(FORMAT_VERSION + 1).to_le_bytes());
        let crc = CRC.checksum(&newer[0..20]);
        newer[20..24].copy_from_slice(&crc.to_le_bytes());
        assert_eq!(
            decode_sector_header(&newer),
            SectorHeader::Newer {
                version: FORMAT_VERSION + 1
            }
        );
    }

    #[test]
    fn single_bit_errors_are_located_exactly() {
        let msg: [u8; 300] = core::array::from_fn(|i| (i * 37 + 11) as u8);
        let good = CRC.checksum(&msg);
        for byte in 0..msg.len() {
            for bit in 0..8u8 {
                let mut m = msg;
                m[byte] ^= 1 << bit;
                let syndrome = CRC.checksum(&m) ^ good;
                // Searched over the whole message and over a window around
                // the flip: found exactly; outside the window: not found.
                assert_eq!(
                    crc_single_bit_error(syndrome, m.len(), 0, m.len()),
                    Some((byte, bit))
                );
                let (lo, hi) = (byte.saturating_sub(3), (byte + 4).min(m.len()));
                assert_eq!(
                    crc_single_bit_error(syndrome, m.len(), lo, hi),
                    Some((byte, bit))
                );
                if byte >= 8 {
                    assert_eq!(crc_single_bit_error(syndrome, m.len(), 0, byte), None);
                }
            }
        }
        // No damage, and damage no single flip explains.
        assert_eq!(crc_single_bit_error(0, msg.len(), 0, msg.len()), None);
        let mut two = msg;
        two[10] ^= 1;
        two[200] ^= 0x80;
        let syndrome = CRC.checksum(&two) ^ good;
        assert_eq!(
            crc_single_bit_error(syndrome, two.len(), 0, two.len()),
            None
        );
        // Empty ranges.
        assert_eq!(crc_single_bit_error(syndrome, 10, 5, 5), None);
        assert_eq!(crc_single_bit_error(syndrome, 10, 12, 20), None);
    }

    #[test]
    fn chunk_header_round_trip_with_20_bit_length() {
        for len in [0, 1, 0xFFFF, 0x1_0000, CHUNK_PAYLOAD_MAX] {
            let h = ChunkHeader {
                kind: kind::CLASS_SESSION, // a session batch
                flags: CHUNK_FIRST | CHUNK_LAST,
                len,
                seq: 0xDEAD_BEEF,
                crc: 42,
            };
            assert_eq!(ChunkHeader::decode(&h.encode()), Some(h));
        }
        assert_eq!(ChunkHeader::decode(&[0xFF; 12]), None);
        // The sectors erased ahead (version 8 on) round-trip in bits 2..3.
        for ahead in 0..4u8 {
            let h = ChunkHeader {
                kind: kind::CHECKPOINT,
                flags: CHUNK_FIRST | ahead << CHUNK_AHEAD_SHIFT,
                len: 9,
                seq: 7,
                crc: 1,
            };
            let d = ChunkHeader::decode(&h.encode()).unwrap();
            assert_eq!(
                (d, d.ahead(), d.is_first(), d.is_last()),
                (h, u32::from(ahead), true, false)
            );
        }
        let mut unknown = [0u8; 12];
        unknown[0] = 0x7E;
        assert_eq!(ChunkHeader::decode(&unknown), None);
    }
}
