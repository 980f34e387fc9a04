//! Reading a session's records in order, and reading batches with their
//! checksums verified.
//!
//! [`Records`] walks a session from its root (a base or its first batch)
//! through the batches chained after it. The chain is stored newest to
//! oldest; it is collected once into a bounded array ([`CHAIN_CAP`]
//! addresses, `chain.rs`), so no recursion and no allocation are needed.
//! Batches read with every chunk's checksum verified are `verified.rs`'s.

use embedded_storage::nor_flash::NorFlash;

mod chain;
mod verified;
pub(crate) use chain::{Chain, CHAIN_CAP};
pub(crate) use verified::{verify_batch, VerifiedReader};

use crate::chdx::{BackendFormat, RawEntry, RecordType, CHDX_ENTRY_SIZE, CHDX_HEADER_SIZE};
use crate::error::{fail, Fail, Kind};
use crate::layout::{ChunkHeader, CHUNK_HEADER_LEN};
use crate::log::{Io, Ring};
use crate::session::{
    get_varint, unpack_kind, BaseFixed, BatchFixed, Session, BASE_FIXED, BATCH_FIXED, BATCH_HAS_ID,
    BATCH_META_MAX, MAX_SESSION_ID_BYTES,
};
use crate::session::{SESSION_BASE, SESSION_BATCH};

/// One record as found on flash.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct RecordInfo {
    pub kind: RecordType,
    pub format: BackendFormat,
    /// Body length in bytes (without ESP-Claw's newline).
    pub len: u32,
    /// Stream address of the body.
    pub addr: u32,
    /// CRC-32 of the body when a base recorded it.
    pub crc: Option<u32>,
    /// Index of the batch in the chain (0 for the root), for damage reports.
    pub segment: usize,
    /// Offset of the body in its batch's payload (batches only).
    pub offset: u32,
    /// The index entry or batch meta describing this record is damaged:
    /// nothing else in it can be used.
    pub damaged: bool,
}

impl RecordInfo {
    #[inline(never)]
    fn damaged(segment: usize) -> RecordInfo {
        RecordInfo {
            kind: RecordType::User,
            format: BackendFormat::Unknown,
            len: 0,
            addr: 0,
            crc: None,
            segment,
            offset: 0,
            damaged: true,
        }
    }
}

/// An `Option` whose "none" is the byte 0, guaranteed by its `repr(u8)`
/// tag: `Option` would put a field's niche there (a `bool`'s 2), and a
/// work area holding one would start nonzero, in `.data` instead of `.bss`.
#[repr(u8)]
#[derive(Clone, Copy)]
pub(crate) enum Held<T> {
    Empty = 0,
    Full(T) = 1,
}

impl<T> Held<T> {
    pub fn get(&self) -> Option<&T> {
        match self {
            Held::Full(t) => Some(t),
            Held::Empty => None,
        }
    }
}

/// Where a base's sections are.
#[derive(Debug, Clone, Copy)]
pub(crate) struct BaseLayout {
    pub fixed: BaseFixed,
    /// Stream address of the first CHDX entry.
    pub entries: u32,
    /// Stream address of the first per-record CRC.
    pub crcs: u32,
    /// Whether the CHDX header checked out.
    pub header_ok: bool,
}

/// Reads the fixed part of a chunk's payload and checks the chunk header.
pub(crate) fn read_first_chunk<F: NorFlash>(
    io: &mut Io<'_, F>,
    addr: u32,
    want_kind: Option<u8>,
) -> Result<ChunkHeader, Fail> {
    let h = io.chunk_header(addr)?.ok_or_else(|| {
        io.parked().at(
            fail!(Corrupted, "no chunk header where a record should start"),
            addr,
        )
    })?;
    if !h.is_first() || want_kind.is_some_and(|k| k != h.kind) {
        return Err(io.parked().at(
            fail!(Corrupted, "a pointer leads to the wrong kind of record"),
            addr,
        ));
    }
    Ok(h)
}

/// Reads a base's layout from its first chunk at `addr`. A damaged CHDX
/// header is reported in [`BaseLayout::header_ok`], not as an error: the
/// entries after it are still validated one by one.
pub(crate) fn read_base<F: NorFlash>(io: &mut Io<'_, F>, addr: u32) -> Result<BaseLayout, Fail> {
    let h = read_first_chunk(io, addr, Some(SESSION_BASE))?;
    let payload = addr + CHUNK_HEADER_LEN;
    let mut fixed = [0u8; BASE_FIXED as usize];
    io.read_stream(payload, &mut fixed)?;
    // The payload must hold what the fixed part announces: the id, the CHDX
    // header, an entry and a CRC per record; and every record is at least
    // one byte and its newline.
    let total = batch_len(io, addr, &h)?;
    let fits = |f: &BaseFixed| {
        let index = BASE_FIXED as u64
            + u64::from(f.id_len)
            + CHDX_HEADER_SIZE as u64
            + u64::from(f.count) * (CHDX_ENTRY_SIZE as u64 + 4);
        index <= u64::from(total) && u64::from(f.size) >= 2 * u64::from(f.count)
    };
    let decoded = |fixed: &[u8; BASE_FIXED as usize]| BaseFixed::decode(fixed).filter(fits);
    // The layout a fixed part gives (where the CHDX header, the entries
    // and the CRCs start), and whether the bytes after the last entry look
    // like one: a record count too low by damage puts the CRCs where
    // entries are, and the bytes after the last entry are CRCs, which look
    // like an entry only by chance (1 in thousands).
    let capacity = io.geo.capacity();
    let probe = |io: &mut Io<'_, F>, f: BaseFixed| -> Result<((u32, u32, u32), bool), Fail> {
        let hdr_at = io.stream_advance(payload, BASE_FIXED + u32::from(f.id_len));
        let entries = io.stream_advance(hdr_at, CHDX_HEADER_SIZE as u32);
        let crcs = io.stream_advance(entries, f.count * CHDX_ENTRY_SIZE as u32);
        let mut e = [0u8; CHDX_ENTRY_SIZE];
        io.read_stream(crcs, &mut e)?;
        let e = RawEntry::decode(&e);
        let like = e.check_fields(0).is_ok() && e.length >= 2 && e.offset < capacity;
        Ok(((hdr_at, entries, crcs), like))
    };
    // Damaged at rest: one flipped bit of the fixed part that explains the
    // first chunk's CRC is corrected (in `fixed`, in place) if the result
    // holds together. That is tried when the fixed part does not hold
    // together as read, and when the layout it gives looks like one with
    // too low a record count; the corrected layout is then taken if its
    // count differs and it does not look so. (One loop for the three
    // steps, at most one round each.)
    let mut cand = decoded(&fixed);
    let mut best: Option<(BaseFixed, (u32, u32, u32))> = None;
    let mut corrected_once = false;
    for _ in 0..4 {
        match cand {
            Some(g) if best.is_none_or(|(f, _)| g.count != f.count) => {
                let (at, like) = probe(io, g)?;
                let first = best.is_none();
                if first || !like {
                    best = Some((g, at));
                }
                if !first || !like {
                    break;
                }
            }
            None if best.is_none() && !corrected_once => corrected_once = true,
            _ => break,
        }
        cand = correct_fixed(io, addr, &h, &mut fixed)?.and_then(|()| decoded(&fixed));
    }
    let Some((f, (hdr_at, entries, crcs))) = best else {
        return Err(io
            .parked()
            .at(fail!(Corrupted, "session base header is invalid"), addr));
    };
    let mut b = [0u8; CHDX_HEADER_SIZE];
    io.read_stream(hdr_at, &mut b)?;
    let header_ok = crate::chdx::check_header(&b).is_ok();
    Ok(BaseLayout {
        fixed: f,
        entries,
        crcs,
        header_ok,
    })
}

/// Payload bytes of the batch whose first chunk, at `addr`, has header `h`:
/// the first chunk's and every continuation's (`u32::MAX` when a
/// continuation is missing: nothing can then be checked against it).
pub(crate) fn batch_len<F: NorFlash>(
    io: &mut Io<'_, F>,
    addr: u32,
    h: &ChunkHeader,
) -> Result<u32, Fail> {
    let rounds = io.geo.count;
    batch_walk(io, addr, h, None, rounds)
}

/// The chunks of the batch whose first chunk, at `addr`, has header `h`, at
/// most `rounds` of them: their payload bytes, or `u32::MAX` if a
/// continuation is missing or (with `scratch`, through which each chunk is
/// then read) a chunk lies outside its sector or fails its CRC. Both
/// [`batch_len`] and [`verify_batch`].
#[inline(never)]
fn batch_walk<F: NorFlash>(
    io: &mut Io<'_, F>,
    addr: u32,
    h: &ChunkHeader,
    mut scratch: Option<&mut [u8]>,
    rounds: u32,
) -> Result<u32, Fail> {
    let mut total = 0u32;
    let mut c = *h;
    let mut at = addr;
    for _ in 0..rounds {
        if let Some(scratch) = scratch.as_deref_mut() {
            if at + io.geo.chunk_size(c.len) > io.geo.sector_end(at)
                || !io.chunk_crc_ok(at, &c, scratch)?
            {
                break;
            }
        }
        total = total.saturating_add(c.len);
        if c.is_last() {
            return Ok(total);
        }
        if !continuation(io, &mut at, &mut c, h.seq, h.kind)? {
            break;
        }
    }
    Ok(u32::MAX)
}

/// Moves `at` and `c` to the chunk after `at` of the batch of sequence
/// `seq` and kind `kind` (the first chunk of the next sector) if there is
/// one: `false`, and nothing moved, if that chunk does not continue it.
#[inline(never)]
pub(crate) fn continuation<F: NorFlash>(
    io: &mut Io<'_, F>,
    at: &mut u32,
    c: &mut ChunkHeader,
    seq: u32,
    kind: u8,
) -> Result<bool, Fail> {
    let geo = *io.geo;
    let next = geo.first_chunk(io.successor(geo.sector_of(*at)));
    match io.chunk_header(next)? {
        Some(n) if !n.is_first() && n.seq == seq && n.kind == kind => {
            (*at, *c) = (next, n);
            Ok(true)
        }
        _ => Ok(false),
    }
}

/// Corrects, in `fixed` (the first bytes of the payload of the batch at
/// `addr`), the one flipped bit that explains the first chunk's CRC, if
/// there is one and it lies in `fixed`.
fn correct_fixed<F: NorFlash>(
    io: &mut Io<'_, F>,
    addr: u32,
    h: &ChunkHeader,
    fixed: &mut [u8],
) -> Result<Option<()>, Fail> {
    let mut scratch = [0u8; 64];
    Ok(
        single_flip(io, addr, h, fixed.len(), &mut scratch)?.map(|(byte, bit)| {
            // (In `fixed`: the flip lies among its bytes, as asked; no
            // out-of-line index.)
            if let Some(x) = fixed.get_mut(byte) {
                *x ^= 1 << bit;
            }
        }),
    )
}

/// The one flipped bit among the first `within` payload bytes of the first
/// chunk at `addr` (header `h`) that explains the chunk's CRC, as
/// `(payload byte, bit)`; `None` if the chunk checks out or no single flip
/// there explains it. Reads the chunk once through `scratch`.
fn single_flip<F: NorFlash>(
    io: &mut Io<'_, F>,
    addr: u32,
    h: &ChunkHeader,
    within: usize,
    scratch: &mut [u8],
) -> Result<Option<(usize, u8)>, Fail> {
    let geo = *io.geo;
    if addr + geo.chunk_size(h.len) > geo.sector_end(addr) {
        return Ok(None);
    }
    // The chunk lies in its sector: its stream is its bytes (the same
    // reads).
    let crc = io.chunk_crc(addr, h, scratch)?;
    // The CRC covers 8 header bytes, then the payload.
    let to = 8 + within.min(h.len as usize);
    Ok(
        crate::layout::crc_single_bit_error(crc ^ h.crc, 8 + h.len as usize, 8, to)
            .map(|(byte, bit)| (byte - 8, bit)),
    )
}

/// Feeds the `len` bytes of the payload stream at `at` to `d`, read through
/// `scratch`.
#[inline(never)]
pub(crate) fn digest_stream<F: NorFlash>(
    io: &mut Io<'_, F>,
    d: &mut crc::Digest<'static, u32>,
    at: u32,
    len: u32,
    scratch: &mut [u8],
) -> Result<(), Fail> {
    let mut got = 0u32;
    while got < len {
        let m = ((len - got) as usize).min(scratch.len());
        let part = scratch.split_at_mut(m).0;
        io.read_stream_after(at, got, part)?;
        d.update(part);
        got += m as u32;
    }
    Ok(())
}

/// Reads `len` bytes of a session id stored at stream address `at`.
pub(crate) fn read_id<F: NorFlash>(
    io: &mut Io<'_, F>,
    s: &Session,
    out: &mut [u8; crate::session::MAX_SESSION_ID_BYTES],
) -> Result<usize, Fail> {
    let payload = s.root + CHUNK_HEADER_LEN;
    let skip = if s.root_is_base {
        BASE_FIXED
    } else {
        BATCH_FIXED + 1
    };
    let n = s.id_len as usize;
    io.read_stream_after(payload, skip, out.split_at_mut(n).0)?;
    Ok(n)
}

/// Longest meta a session's first batch starts with: the fixed part, the id
/// length, the id and the CRC-32 of uid and id.
const NAME_META_MAX: usize = BATCH_FIXED as usize + 1 + MAX_SESSION_ID_BYTES + 4;

/// The session id in `m`, the start of a session's first batch (the
/// fixed part, the id's length, the id and the CRC-32 of `uid` and the
/// id), if its length is 1 to [`MAX_SESSION_ID_BYTES`], it lies in `m`
/// and that CRC checks out: [`BatchMeta::sound_id`]'s and [`start_name`]'s
/// one check.
#[inline(never)]
fn checked_id(m: &[u8], uid: u32) -> Option<&[u8]> {
    let at = BATCH_FIXED as usize + 1;
    let k = usize::from(*m.get(at - 1)?);
    if k == 0 || k > MAX_SESSION_ID_BYTES {
        return None;
    }
    let id = m.get(at..at + k)?;
    let crc = m.get(at + k..)?.first_chunk()?;
    let mut d = crate::layout::CRC.digest();
    d.update(&uid.to_le_bytes());
    d.update(id);
    (d.finalize() == u32::from_le_bytes(*crc)).then_some(id)
}

/// The name a session's first batch at `addr` carries, checked by the CRC-32
/// of the uid and the id written after it: `(uid, id length)` with the id in
/// `out`, or `None` when the name cannot be recovered.
///
/// This is the repair path for a first batch damaged at rest, which holds the
/// only copy of the session's name. The name is taken as stored when its own
/// CRC checks out (the damage is elsewhere in the batch, its chunk header
/// included). Otherwise, when one flipped bit in the name explains the first
/// chunk's CRC (or, for a name that runs on into the next sector, the CRC of
/// the batch's continuation chunk there), that bit is corrected, and the
/// name is kept only if its own CRC then checks out too: two independent
/// checks. `uid` is the session's
/// uid when a sound later batch gave it; else the batch's own is used (and
/// may be the corrected bit).
pub(crate) fn start_name<F: NorFlash>(
    io: &mut Io<'_, F>,
    addr: u32,
    uid: Option<u32>,
    out: &mut [u8; MAX_SESSION_ID_BYTES],
    scratch: &mut [u8],
) -> Result<Option<(u32, usize)>, Fail> {
    let name = |m: &[u8; NAME_META_MAX], out: &mut [u8; MAX_SESSION_ID_BYTES]| {
        let uid = uid.unwrap_or_else(|| u32::from_le_bytes([m[0], m[1], m[2], m[3]]));
        let id = checked_id(m, uid)?;
        if core::str::from_utf8(id).is_err() {
            return None;
        }
        let k = id.len();
        out[..k].copy_from_slice(id);
        Some((uid, k))
    };
    let geo = *io.geo;
    if addr >= geo.capacity() || addr + CHUNK_HEADER_LEN >= geo.sector_end(addr) {
        return Ok(None);
    }
    let mut m = [0xFFu8; NAME_META_MAX];
    match io.read_stream(addr + CHUNK_HEADER_LEN, &mut m) {
        Ok(()) => {}
        Err(e) if e.kind() == Kind::Flash => return Err(e),
        Err(_) => return Ok(None),
    }
    if let Some(found) = name(&m, out) {
        return Ok(Some(found));
    }
    // One flipped bit in the name: the first chunk's CRC locates it.
    let h = match io.chunk_header(addr)? {
        Some(h) if h.kind == SESSION_BATCH && h.is_first() => h,
        _ => return Ok(None),
    };
    // (One flip's correction and one name check for both places: the
    // first chunk's bytes start at 0 of the meta, the continuation's at
    // `first`.)
    let mut flip = single_flip(io, addr, &h, NAME_META_MAX, scratch)?;
    let mut first = 0;
    if flip.is_none() {
        // The name may run on into the batch's continuation, the first
        // chunk of the next sector (the first chunk then fills its
        // sector): a flip there is located by that chunk's own CRC.
        first = h.len as usize;
        let room = geo.sector_end(addr) - (addr + CHUNK_HEADER_LEN);
        if h.is_last() || first >= NAME_META_MAX || h.len != room {
            return Ok(None);
        }
        let (mut next, mut c) = (addr, h);
        if !continuation(io, &mut next, &mut c, h.seq, h.kind)? {
            return Ok(None);
        }
        flip = single_flip(io, next, &c, NAME_META_MAX - first, scratch)?;
    }
    let Some((byte, bit)) = flip else {
        return Ok(None);
    };
    // (In `m`: the flip lies among the NAME_META_MAX - first bytes asked
    // for after `first`; no out-of-line index.)
    if let Some(x) = m.get_mut(first + byte) {
        *x ^= 1 << bit;
    }
    Ok(name(&m, out))
}

/// The record descriptor at `at` in `meta`: kind, format, body length and
/// where the next one starts.
#[inline(never)]
fn descriptor(meta: &[u8], at: usize) -> Option<(RecordType, BackendFormat, u32, usize)> {
    let (kind, format) = unpack_kind(*meta.get(at)?)?;
    let (len, next) = get_varint(meta, at + 1)?;
    Some((kind, format, len, next))
}

/// Where the meta of a batch with fixed part `fixed` ends and where its
/// record descriptors start, from its first `avail` bytes in `bytes`: the
/// id's length checked (1 to [`MAX_SESSION_ID_BYTES`]), and every record
/// descriptor it announces decoded, each with a body; `None` if any is not
/// ([`BatchMeta::read_with`]).
fn meta_extent(bytes: &[u8], avail: usize, fixed: &BatchFixed) -> Option<(usize, usize)> {
    let mut at = BATCH_FIXED as usize;
    if fixed.flags & BATCH_HAS_ID != 0 {
        let n = *bytes.get(at)? as usize;
        if n == 0 || n > MAX_SESSION_ID_BYTES {
            return None;
        }
        at += 1 + n + 4;
    }
    let records_at = at;
    // (`avail` is within `bytes`.)
    let announced = bytes.get(..avail).unwrap_or_default();
    for _ in 0..fixed.count {
        let (_, _, len, next) = descriptor(announced, at)?;
        if len == 0 {
            return None;
        }
        at = next;
    }
    Some((at, records_at))
}

/// A batch's parsed meta.
#[derive(Clone, Copy)]
pub(crate) struct BatchMeta {
    pub fixed: BatchFixed,
    pub bytes: [u8; BATCH_META_MAX],
    /// Meta length: bodies start this far into the payload.
    pub len: usize,
    /// Position of the first record descriptor in `bytes`.
    pub records_at: usize,
}

impl BatchMeta {
    /// No meta (a placeholder that [`read`](Self::read) fills in place).
    pub const EMPTY: BatchMeta = BatchMeta {
        fixed: BatchFixed {
            uid: 0,
            prev: 0,
            count: 0,
            flags: 0,
        },
        bytes: [0; BATCH_META_MAX],
        len: 0,
        records_at: 0,
    };

    /// Reads and parses, in place (no meta moved through a `Result`), the
    /// meta of the batch whose first chunk is `addr`. On an error `self`
    /// holds nothing usable.
    pub fn read<F: NorFlash>(&mut self, io: &mut Io<'_, F>, addr: u32) -> Result<(), Fail> {
        let h = read_first_chunk(io, addr, Some(SESSION_BATCH))?;
        self.read_with(io, addr, &h)
    }

    /// [`read`](Self::read) with the first chunk's header already read.
    /// Reads only the meta: the fixed part, then exactly the id and the
    /// record descriptors it announces (at most 6 bytes each).
    pub fn read_with<F: NorFlash>(
        &mut self,
        io: &mut Io<'_, F>,
        addr: u32,
        h: &crate::layout::ChunkHeader,
    ) -> Result<(), Fail> {
        // (Bytes past those read stay 0, whatever `self` held.)
        let bytes = &mut self.bytes;
        *bytes = [0u8; BATCH_META_MAX];
        // (Every check that fails ends at the one error below.)
        let mut parsed = None;
        if h.kind == SESSION_BATCH && h.is_first() {
            // A single-chunk batch is read no further than its payload; a
            // multi-chunk batch's meta may continue in the next sector, and
            // bytes read past the meta are ignored by the parse.
            let limit = if h.is_last() {
                (BATCH_META_MAX as u32).min(h.len) as usize
            } else {
                BATCH_META_MAX
            };
            let head = (BATCH_FIXED as usize + 1).min(limit);
            io.read_stream(addr + CHUNK_HEADER_LEN, bytes.split_at_mut(head).0)?;
            // Decoded once: the second read below starts after the fixed
            // part.
            if let Some(fixed) = bytes.get(..head).and_then(BatchFixed::decode) {
                let id_len = if fixed.flags & BATCH_HAS_ID != 0 {
                    1 + usize::from(bytes[BATCH_FIXED as usize]) + 4
                } else {
                    0
                };
                let avail =
                    (BATCH_FIXED as usize + id_len + 6 * usize::from(fixed.count)).min(limit);
                if avail > head {
                    io.read_stream_after(
                        addr + CHUNK_HEADER_LEN,
                        head as u32,
                        &mut bytes[head..avail],
                    )?;
                }
                parsed = meta_extent(bytes, avail, &fixed).map(|(len, at)| (fixed, len, at));
            }
        }
        let Some((fixed, len, records_at)) = parsed else {
            return Err(io
                .parked()
                .at(fail!(Corrupted, "session batch meta is invalid"), addr));
        };
        (self.fixed, self.len, self.records_at) = (fixed, len, records_at);
        Ok(())
    }

    /// The id bytes, if the batch starts its session.
    pub fn id(&self) -> Option<&[u8]> {
        if self.fixed.flags & BATCH_HAS_ID == 0 {
            return None;
        }
        let n = self.bytes[BATCH_FIXED as usize] as usize;
        self.bytes
            .get(BATCH_FIXED as usize + 1..BATCH_FIXED as usize + 1 + n)
    }

    /// The id bytes, if the batch starts its session and the CRC-32 of
    /// the uid and the id (written after the id) checks out.
    /// ([`read_with`](Self::read_with) checked the id's length of a batch
    /// with an id, as `checked_id` does again.)
    pub fn sound_id(&self) -> Option<&[u8]> {
        if self.fixed.flags & BATCH_HAS_ID == 0 {
            return None;
        }
        checked_id(&self.bytes, self.fixed.uid)
    }

    /// The record descriptor at `at` in the meta (from
    /// [`records_at`](Self::records_at) up to [`len`](Self::len), which
    /// [`read_with`](Self::read_with) checked): kind, format, body length
    /// and where the next descriptor starts.
    pub fn record_at(&self, at: usize) -> Option<(RecordType, BackendFormat, u32, usize)> {
        descriptor(&self.bytes[..self.len], at)
    }

    /// Sum of body lengths.
    pub fn bodies_len(&self) -> u32 {
        let mut sum = 0u32;
        let mut at = self.records_at;
        while let Some((_, _, len, next)) = self.record_at(at) {
            sum += len;
            at = next;
        }
        sum
    }
}

/// Reads a session's records in order: the root's (base entries or first
/// batch), then each chained batch's.
#[derive(Clone, Copy)]
pub(crate) struct Records {
    chain: Chain,
    pos: RecPos,
    /// The chain was found by scanning the log (it is not scanned twice).
    scanned: bool,
}

/// Where a pass over a session's records is, apart from the chain it walks:
/// several passes over one chain share the chain (a base being written
/// sweeps it three times at once) and keep only this each.
#[derive(Clone, Copy)]
pub(crate) struct RecPos {
    root_is_base: bool,
    base: Held<BaseLayout>,
    segment: usize,
    /// The next record: its entry in a base, the position of its
    /// descriptor in a batch's meta.
    index: u32,
    meta: Option<BatchMeta>,
    body_offset: u32,
    /// Something was damaged: the index needs rebuilding from the log.
    degraded: bool,
    /// Chain segments to skip (found damaged), one bit each (in 32-bit
    /// words: a Cortex-M shifts those in one instruction).
    skip: [u32; CHAIN_CAP.div_ceil(32)],
    /// The bytes of the bodies each moves record of the chain holds for the
    /// records passed so far (format 10): where its next body starts.
    #[cfg(feature = "sector-table")]
    moved: [u32; crate::session::MOVES_MAX],
}

impl Records {
    /// No records: a placeholder that [`start`](Self::start) fills in place.
    pub const EMPTY: Records = Records {
        chain: Chain::EMPTY,
        pos: RecPos::EMPTY,
        scanned: false,
    };

    /// Starts at the first record of `s`, in place (no walk moved through a
    /// `Result`); whatever `self` held is replaced (but for chain addresses
    /// past the chain's length, which nothing reads). A damaged chain or index
    /// does not fail: with `ring`, the chain is found again by scanning the
    /// log for the session's batches; damaged entries come back as damaged
    /// records; and [`degraded`](Self::degraded) tells the caller to rebuild
    /// the index.
    #[inline(never)]
    pub fn start<F: NorFlash>(
        &mut self,
        io: &mut Io<'_, F>,
        s: &Session,
        ring: Option<Ring>,
    ) -> Result<(), Fail> {
        let mut degraded = false;
        let chain = &mut self.chain;
        match (chain.collect(io, s), ring) {
            (Ok(()), _) => {}
            (Err(e), _) if e.kind() == Kind::Flash => return Err(e),
            (Err(e), None) => return Err(e),
            (Err(_), Some(ring)) => {
                degraded = true;
                chain.scan(io, s, ring)?;
            }
        }
        let base = if s.root_is_base {
            match read_base(io, s.root) {
                Ok(b) => {
                    degraded |= !b.header_ok;
                    Held::Full(b)
                }
                Err(e) if e.kind() == Kind::Flash => return Err(e),
                Err(e) if ring.is_none() => return Err(e),
                Err(_) => {
                    degraded = true;
                    Held::Empty
                }
            }
        } else {
            Held::Empty
        };
        // Filled in place: a position built whole was copied in.
        let pos = &mut self.pos;
        *pos = RecPos::EMPTY;
        pos.root_is_base = s.root_is_base;
        pos.base = base;
        pos.degraded = degraded;
        self.scanned = degraded;
        Ok(())
    }

    /// Finds the chain again by scanning the log, when chain segment `seg`
    /// (a batch reached through the "previous" pointer of the one after it)
    /// failed its check: its own pointer is damaged too, perhaps, and may
    /// have led the walk to an older batch of the session past sound ones,
    /// with no sign of it. Once only, and not for the root (reached through
    /// the table): `false` then, and nothing changes. After a rescan the
    /// walk starts over, no segment skipped.
    #[inline(always)]
    pub fn rescan<F: NorFlash>(
        &mut self,
        io: &mut Io<'_, F>,
        s: &Session,
        ring: Ring,
        seg: usize,
    ) -> Result<bool, Fail> {
        Ok(self.rescan_word(io, s, ring, seg)? != 0)
    }

    /// [`Self::rescan`] as a word (1 or 0; see `Io::chunk_crc_ok_word`).
    #[inline(never)]
    fn rescan_word<F: NorFlash>(
        &mut self,
        io: &mut Io<'_, F>,
        s: &Session,
        ring: Ring,
        seg: usize,
    ) -> Result<u32, Fail> {
        if seg == 0 || self.scanned {
            return Ok(0);
        }
        self.chain.scan(io, s, ring)?;
        self.scanned = true;
        self.pos.degraded = true;
        self.pos.skip = [0; CHAIN_CAP.div_ceil(32)];
        self.pos.rewind();
        Ok(1)
    }

    /// The chain and the position, apart (for passes that share a chain).
    pub fn split(&self) -> (&Chain, &RecPos) {
        (&self.chain, &self.pos)
    }

    /// Whether damage was found: the caller should rebuild the index.
    #[inline(never)]
    pub fn degraded(&self) -> bool {
        self.pos.degraded
    }

    /// Skips chain segment `k` from now on (its batch failed its check).
    pub fn skip_segment(&mut self, k: usize) {
        self.pos.skip_segment(k)
    }

    /// The chain (root first).
    pub fn chain(&self) -> &Chain {
        &self.chain
    }

    /// Back to the first record.
    pub fn rewind(&mut self) {
        self.pos.rewind()
    }

    /// The next record, or `None` after the last.
    pub fn next<F: NorFlash>(&mut self, io: &mut Io<'_, F>) -> Result<Option<RecordInfo>, Fail> {
        self.pos.next(io, &self.chain)
    }
}

impl RecPos {
    /// A position on no chain (a placeholder in the work area).
    pub(crate) const EMPTY: RecPos = RecPos {
        root_is_base: false,
        base: Held::Empty,
        segment: 0,
        index: 0,
        meta: None,
        body_offset: 0,
        degraded: false,
        skip: [0; CHAIN_CAP.div_ceil(32)],
        #[cfg(feature = "sector-table")]
        moved: [0; crate::session::MOVES_MAX],
    };

    /// On to the first record of the next chain segment; the segment left.
    /// (No meta is held in a base's segment, nor once reading one failed:
    /// clearing it there changes nothing.)
    fn next_segment(&mut self) -> usize {
        let seg = self.segment;
        self.segment += 1;
        self.index = 0;
        self.meta = None;
        seg
    }

    /// Skips chain segment `k` from now on (its batch failed its check).
    pub fn skip_segment(&mut self, k: usize) {
        if k < CHAIN_CAP {
            self.skip[k / 32] |= 1 << (k % 32);
            self.degraded = true;
        }
    }

    /// Back to the first record.
    #[inline(never)]
    pub fn rewind(&mut self) {
        self.segment = 0;
        self.index = 0;
        self.meta = None;
        self.body_offset = 0;
        #[cfg(feature = "sector-table")]
        {
            self.moved = [0; crate::session::MOVES_MAX];
        }
    }

    /// Where the body at `addr`, `len` bytes, that the root's base names
    /// is now: the moves records of `chain` applied in chain order, each
    /// taking it if its place then has a byte in the sector the record
    /// emptied (`docs/FORMAT.md`, "Session moves"). `(address, segment,
    /// offset in the segment's payload)`; `None` if a record that took it
    /// is too short to hold it (damage: the body is lost).
    #[cfg(feature = "sector-table")]
    fn moved_to<F: NorFlash>(
        &mut self,
        io: &Io<'_, F>,
        chain: &Chain,
        addr: u32,
        len: u32,
    ) -> Option<(u32, usize, u32)> {
        let mut at = (addr, 0, 0);
        for (m, done) in chain
            .moves
            .iter()
            .take(chain.moves_len)
            .zip(&mut self.moved)
        {
            if io.stream_touches(at.0, len, m.sector) {
                let offset = crate::session::MOVES_FIXED + *done;
                *done += len;
                if u64::from(offset) + u64::from(len) > u64::from(m.len) {
                    return None;
                }
                at = (io.stream_advance(m.payload, offset), m.segment, offset);
            }
        }
        Some(at)
    }

    /// The next record of `chain`, or `None` after the last.
    pub fn next<F: NorFlash>(
        &mut self,
        io: &mut Io<'_, F>,
        chain: &Chain,
    ) -> Result<Option<RecordInfo>, Fail> {
        loop {
            let seg = self.segment;
            let Some(&addr) = chain.addrs.get(seg).filter(|_| seg < chain.len) else {
                return Ok(None);
            };
            if self.skip[seg / 32] & (1 << (seg % 32)) != 0 {
                self.next_segment();
                continue;
            }
            // One record built for both kinds of segment.
            let (kind, format, len, at, crc, offset) = if self.segment == 0 && self.root_is_base {
                let Some(b) = self.base.get() else {
                    // The base itself is unreadable: its records are lost.
                    // (Segment 0.)
                    return Ok(Some(RecordInfo::damaged(self.next_segment())));
                };
                if self.index >= b.fixed.count {
                    self.next_segment();
                    continue;
                }
                let mut e = [0u8; CHDX_ENTRY_SIZE];
                io.read_stream_after(b.entries, self.index * CHDX_ENTRY_SIZE as u32, &mut e)?;
                let mut c = [0u8; 4];
                io.read_stream_after(b.crcs, self.index * 4, &mut c)?;
                let raw = RawEntry::decode(&e);
                self.index += 1;
                let bounded = raw.length >= 2
                    && raw.offset < io.geo.capacity()
                    && raw.length - 1 <= io.geo.capacity();
                let (Ok((kind, format)), true) =
                    (raw.check_fields(self.index as usize - 1), bounded)
                else {
                    // This entry is damaged: this record is lost, the others
                    // are still read (and the index gets rebuilt).
                    self.degraded = true;
                    return Ok(Some(RecordInfo::damaged(0)));
                };
                let len = raw.length - 1;
                #[cfg(feature = "sector-table")]
                if chain.moves_len > 0 {
                    let Some((at, segment, offset)) = self.moved_to(io, chain, raw.offset, len)
                    else {
                        self.degraded = true;
                        return Ok(Some(RecordInfo::damaged(0)));
                    };
                    return Ok(Some(RecordInfo {
                        kind,
                        format,
                        len,
                        addr: at,
                        crc: Some(u32::from_le_bytes(c)),
                        segment,
                        offset,
                        damaged: false,
                    }));
                }
                (
                    kind,
                    format,
                    len,
                    raw.offset,
                    Some(u32::from_le_bytes(c)),
                    0,
                )
            } else {
                // A moves record holds no records of its own.
                #[cfg(feature = "sector-table")]
                if chain.is_moves(seg) {
                    self.next_segment();
                    continue;
                }
                let meta = match self.meta {
                    Some(ref meta) => meta,
                    None => {
                        // Read in place (a meta moved in was copied whole).
                        let meta = self.meta.insert(BatchMeta::EMPTY);
                        match meta.read(io, addr) {
                            Ok(()) => {
                                self.body_offset = meta.len as u32;
                                // In a batch, `index` is where the next record
                                // descriptor is in the meta.
                                self.index = meta.records_at as u32;
                                meta
                            }
                            Err(e) => {
                                self.meta = None;
                                if e.kind() == Kind::Flash {
                                    return Err(e);
                                }
                                // The batch's meta is damaged: its records are lost.
                                self.degraded = true;
                                return Ok(Some(RecordInfo::damaged(self.next_segment())));
                            }
                        }
                    }
                };
                match meta.record_at(self.index as usize) {
                    Some((kind, format, len, next)) => {
                        let offset = self.body_offset;
                        let body = io.stream_advance(addr + CHUNK_HEADER_LEN, offset);
                        self.body_offset += len;
                        self.index = next as u32;
                        (kind, format, len, body, None, offset)
                    }
                    None => {
                        self.next_segment();
                        continue;
                    }
                }
            };
            return Ok(Some(RecordInfo {
                kind,
                format,
                len,
                addr: at,
                crc,
                segment: self.segment,
                offset,
                damaged: false,
            }));
        }
    }
}
