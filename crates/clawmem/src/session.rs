//! Session records on flash and the in-RAM session table.
//!
//! A session is a chain of batches rooted at either its first batch (which
//! carries the session id) or its newest *base*. A base is the session's full
//! index in ESP-Claw's CHDX layout (8-byte header, 10-byte entries) whose
//! entry offsets are flash addresses of record bodies, followed by a CRC-32
//! per record and, when the base relocated or added bodies, those bodies.
//! Every batch points back to the previous batch or base of its session.
//!
//! Compaction and consolidation write a new base that references the kept
//! bodies where they are; garbage collection writes a base that carries
//! copies of the session's live bodies. Either way the old chain is dead once
//! the base commits: a power cut before that leaves the old chain in force.

use crate::chdx::{BackendFormat, RecordType};
use crate::layout::NO_ADDR;

// The record kinds of the session layer, in class `CLASS_SESSION` of
// `layout::kind` (`docs/FORMAT.md`, "Kinds").
/// Records appended to a session.
pub(crate) const SESSION_BATCH: u8 = 0x10;
/// A session's index (CHDX) after compaction, consolidation or
/// relocation, possibly with the bodies it relocated.
pub(crate) const SESSION_BASE: u8 = 0x11;
/// A session deletion.
pub(crate) const SESSION_DELETE: u8 = 0x12;
/// A session's block flag.
pub(crate) const SESSION_BLOCK: u8 = 0x13;
/// Bodies a collection moved out of a sector it released, for a session
/// whose base named them there (format 10, feature `sector-table`; stage 4
/// of `docs/DESIGN.md`, "Format 10 in stages"): a chain element, with no
/// records of its own ([`MovesFixed`]).
#[cfg(feature = "sector-table")]
pub(crate) const SESSION_MOVES: u8 = 0x14;
const _: () = {
    use crate::layout::kind::{defined_in, CLASS_SESSION};
    assert!(defined_in(SESSION_BATCH, CLASS_SESSION) && defined_in(SESSION_BASE, CLASS_SESSION));
    assert!(defined_in(SESSION_DELETE, CLASS_SESSION) && defined_in(SESSION_BLOCK, CLASS_SESSION));
    #[cfg(feature = "sector-table")]
    assert!(defined_in(SESSION_MOVES, CLASS_SESSION));
};

/// Fixed part of a moves record's payload: uid u32, prev u32, the sector
/// released (its index) u32 and the sequence it carried u32, and the
/// session's oldest sector sequence once the record commits u32. The
/// bodies follow, one after another, in record order.
#[cfg(feature = "sector-table")]
pub(crate) const MOVES_FIXED: u32 = 20;

/// Most moves records a session's chain holds: a collection that would
/// write one more writes a base instead, which folds them in.
#[cfg(feature = "sector-table")]
pub(crate) const MOVES_MAX: usize = 4;

/// The parsed fixed part of a moves record (`SESSION_MOVES`): every body the
/// session's base names (its root's entries), whose place after the
/// moves records before this one has a byte in sector `sector`, now lies in
/// this record's payload, in record order, one after another.
#[cfg(feature = "sector-table")]
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct MovesFixed {
    pub uid: u32,
    pub prev: u32,
    pub sector: u32,
    pub seq: u32,
    pub oldest: u32,
}

#[cfg(feature = "sector-table")]
impl MovesFixed {
    pub fn encode(&self) -> [u8; MOVES_FIXED as usize] {
        let mut out = [0u8; MOVES_FIXED as usize];
        for (k, v) in [self.uid, self.prev, self.sector, self.seq, self.oldest]
            .into_iter()
            .enumerate()
        {
            crate::layout::put_u32(&mut out, 4 * k, v);
        }
        out
    }

    /// `None` if the fields cannot hold together: a record has a previous
    /// element, and the session's oldest sector is newer than the one the
    /// record emptied. (The sector is checked against the partition by the
    /// reader.)
    pub fn decode(b: &[u8]) -> Option<MovesFixed> {
        let b = b.first_chunk::<{ MOVES_FIXED as usize }>()?;
        let at = |k: usize| crate::layout::u32_at(b, 4 * k);
        let f = MovesFixed {
            uid: at(0),
            prev: at(1),
            sector: at(2),
            seq: at(3),
            oldest: at(4),
        };
        (f.prev != NO_ADDR && f.oldest > f.seq).then_some(f)
    }
}

/// Most bytes of a session id: all that its one-byte length on flash holds.
/// ESP-Claw's ids reach about 204 bytes (a chat key of up to 159, `:`, an
/// alias of up to 32, and `:subagent_NN` for a subagent).
pub const MAX_SESSION_ID_BYTES: usize = 255;

/// Most batches a chain may have after its root before the next append
/// consolidates them into a base.
pub(crate) const CHAIN_MAX: usize = 32;

/// Most records in one append.
pub const MAX_RECORDS_PER_APPEND: usize = 16;

/// Session flag: blocked after compaction.
pub(crate) const FLAG_BLOCKED: u8 = 1;

/// Batch flag: the batch completes a turn.
pub(crate) const BATCH_TURN_COMPLETED: u8 = 1;
/// Batch flag: the batch starts a session and carries its id.
pub(crate) const BATCH_HAS_ID: u8 = 2;

/// Fixed part of a batch payload: uid u32, prev u32, and one byte holding
/// the record count (bits 0..4) and the flags (bits 5..6).
pub(crate) const BATCH_FIXED: u32 = 9;

/// Fixed part of a base payload: uid u32, flags u8, id_len u8, reserved
/// u16, size u32, count u32, oldest u32.
pub(crate) const BASE_FIXED: u32 = 20;

/// One record of a session history.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Record<'a> {
    /// ESP-Claw record type.
    pub kind: RecordType,
    /// Backend format the record was written in.
    pub format: BackendFormat,
    /// The message, a JSON text; opaque to the store.
    pub body: &'a [u8],
}

/// A session's entry in the RAM table (and in checkpoints).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Session {
    /// Unique over the store's lifetime; never reused.
    pub uid: u32,
    /// FNV-1a of the id, to find it quickly; the id itself is on flash.
    pub id_hash: u32,
    pub id_len: u8,
    pub flags: u8,
    /// Records in the history.
    pub records: u16,
    /// Batches after the root.
    pub chain: u16,
    /// Newest batch or base (address of its first chunk).
    pub head: u32,
    /// The base, or the first batch when there is no base.
    pub root: u32,
    /// Whether `root` is a base.
    pub root_is_base: bool,
    /// Sector sequence of the oldest sector holding any of its live bytes.
    pub oldest: u32,
    /// ESP-Claw `.log` size: every body plus one newline.
    pub size: u32,
    /// RAM only: changed since the last checkpoint (full or delta).
    pub dirty: bool,
    /// RAM only: which checkpoint of the directory holds its newest
    /// written version ([`DIR_NONE`], [`DIR_FULL`], [`DIR_DELTA`]): where a
    /// clean entry is found again once the table lets it go.
    pub dir: u8,
}

/// Not in any checkpoint of the directory (made since the last one).
pub(crate) const DIR_NONE: u8 = 0;
/// Its newest version is in the directory's full checkpoint.
pub(crate) const DIR_FULL: u8 = 1;
/// Its newest version is in one of the directory's delta checkpoints.
pub(crate) const DIR_DELTA: u8 = 2;
/// Mount only: a cold session that batches after the checkpoint changed;
/// the entry holds what they added, until the directory's entry is read
/// (`store/directory.rs`, `resolve_stubs`).
pub(crate) const DIR_STUB: u8 = 3;
/// Mount only: a cold session a base after the checkpoint replaced; the
/// entry is the base's, its name still to be checked against the
/// directory's entry.
pub(crate) const DIR_STUB_BASE: u8 = 4;

/// Bytes of one session in a checkpoint.
pub(crate) const SESSION_ENCODED: usize = 32;

impl Session {
    /// No session: no id, records or addresses, the oldest sector none.
    /// What a cursor holds before it gives a session, and the base of a
    /// stub that mount fills in later.
    pub const EMPTY: Session = Session {
        uid: 0,
        id_hash: 0,
        id_len: 0,
        flags: 0,
        records: 0,
        chain: 0,
        head: NO_ADDR,
        root: NO_ADDR,
        root_is_base: false,
        oldest: u32::MAX,
        size: 0,
        dirty: false,
        dir: DIR_NONE,
    };

    pub fn blocked(&self) -> bool {
        self.flags & FLAG_BLOCKED != 0
    }

    pub fn encode(&self, out: &mut [u8; SESSION_ENCODED]) {
        // Put together by array pattern: in bounds by type, no checks.
        let [u0, u1, u2, u3] = self.uid.to_le_bytes();
        let [i0, i1, i2, i3] = self.id_hash.to_le_bytes();
        let [r0, r1] = self.records.to_le_bytes();
        let [c0, c1] = self.chain.to_le_bytes();
        let [h0, h1, h2, h3] = self.head.to_le_bytes();
        let [t0, t1, t2, t3] = self.root.to_le_bytes();
        let [o0, o1, o2, o3] = self.oldest.to_le_bytes();
        let [s0, s1, s2, s3] = self.size.to_le_bytes();
        let flags = self.flags | if self.root_is_base { 0x80 } else { 0 };
        *out = [
            u0,
            u1,
            u2,
            u3,
            i0,
            i1,
            i2,
            i3,
            self.id_len,
            flags,
            r0,
            r1,
            c0,
            c1,
            0,
            0,
            h0,
            h1,
            h2,
            h3,
            t0,
            t1,
            t2,
            t3,
            o0,
            o1,
            o2,
            o3,
            s0,
            s1,
            s2,
            s3,
        ];
    }

    pub fn decode(b: &[u8; SESSION_ENCODED]) -> Option<Session> {
        let &[u0, u1, u2, u3, i0, i1, i2, i3, id_len, flags, r0, r1, c0, c1, z0, z1, h0, h1, h2, h3, t0, t1, t2, t3, o0, o1, o2, o3, s0, s1, s2, s3] =
            b;
        let s = Session {
            uid: u32::from_le_bytes([u0, u1, u2, u3]),
            id_hash: u32::from_le_bytes([i0, i1, i2, i3]),
            id_len,
            flags: flags & 0x7F,
            root_is_base: flags & 0x80 != 0,
            records: u16::from_le_bytes([r0, r1]),
            chain: u16::from_le_bytes([c0, c1]),
            head: u32::from_le_bytes([h0, h1, h2, h3]),
            root: u32::from_le_bytes([t0, t1, t2, t3]),
            oldest: u32::from_le_bytes([o0, o1, o2, o3]),
            size: u32::from_le_bytes([s0, s1, s2, s3]),
            dirty: false,
            dir: DIR_NONE,
        };
        let sane = s.id_len as usize <= MAX_SESSION_ID_BYTES
            && s.id_len > 0
            && s.flags & !FLAG_BLOCKED == 0
            && (s.chain as usize) <= CHAIN_MAX
            && [z0, z1] == [0, 0];
        sane.then_some(s)
    }
}

/// Packs a record's type and format into one byte.
#[inline(never)]
pub(crate) fn pack_kind(kind: RecordType, format: BackendFormat) -> u8 {
    (kind.as_u8() << 4) | format.as_u8()
}

/// Unpacks [`pack_kind`].
pub(crate) fn unpack_kind(b: u8) -> Option<(RecordType, BackendFormat)> {
    let kind = RecordType::try_from(b >> 4).ok()?;
    let format = BackendFormat::try_from(b & 0x0F).ok()?;
    Some((kind, format))
}

/// Appends `v` as LEB128 to `out` at `at`; returns the new position.
pub(crate) fn put_varint(out: &mut [u8], mut at: usize, mut v: u32) -> Option<usize> {
    loop {
        let byte = (v & 0x7F) as u8;
        v >>= 7;
        *out.get_mut(at)? = byte | if v != 0 { 0x80 } else { 0 };
        at += 1;
        if v == 0 {
            return Some(at);
        }
    }
}

/// Reads a LEB128 u32 from `b` at `at`; returns value and new position.
pub(crate) fn get_varint(b: &[u8], mut at: usize) -> Option<(u32, usize)> {
    let mut v: u32 = 0;
    let mut shift = 0;
    while shift < 35 {
        let byte = *b.get(at)?;
        at += 1;
        let bits = u32::from(byte & 0x7F);
        if shift == 28 && bits > 0x0F {
            return None;
        }
        v |= bits << shift;
        if byte & 0x80 == 0 {
            return Some((v, at));
        }
        shift += 7;
    }
    None
}

/// Largest batch meta: fixed part, id, and per record a kind byte and a
/// 5-byte varint.
pub(crate) const BATCH_META_MAX: usize =
    BATCH_FIXED as usize + 1 + MAX_SESSION_ID_BYTES + 4 + MAX_RECORDS_PER_APPEND * 6;

/// Encodes a batch's meta (everything before the bodies) into `out`;
/// returns its length.
pub(crate) fn encode_batch_meta(
    out: &mut [u8; BATCH_META_MAX],
    uid: u32,
    prev: u32,
    flags: u8,
    id: Option<&[u8]>,
    records: &[Record<'_>],
) -> usize {
    crate::layout::put_u32(out, 0, uid);
    crate::layout::put_u32(out, 4, prev);
    let flags = flags | if id.is_some() { BATCH_HAS_ID } else { 0 };
    out[8] = records.len() as u8 | (flags << 5);
    let mut at = BATCH_FIXED as usize;
    if let Some(id) = id {
        out[at] = id.len() as u8;
        out[at + 1..at + 1 + id.len()].copy_from_slice(id);
        at += 1 + id.len();
        // The session's uid and name get their own check, so that mount can
        // trust them without reading the whole batch.
        let mut d = crate::layout::CRC.digest();
        d.update(&uid.to_le_bytes());
        d.update(id);
        let crc = d.finalize();
        crate::layout::put_u32(out, at, crc);
        at += 4;
    }
    for r in records {
        out[at] = pack_kind(r.kind, r.format);
        at = put_varint(out, at + 1, r.body.len() as u32).unwrap_or(out.len());
    }
    at
}

/// The parsed fixed part of a batch meta.
#[derive(Debug, Clone, Copy)]
pub(crate) struct BatchFixed {
    pub uid: u32,
    pub prev: u32,
    pub count: u8,
    pub flags: u8,
}

impl BatchFixed {
    pub fn decode(b: &[u8]) -> Option<BatchFixed> {
        // Taken apart by pattern: in bounds by its type, no checks.
        let &[u0, u1, u2, u3, p0, p1, p2, p3, cf] = b.first_chunk::<{ BATCH_FIXED as usize }>()?;
        let f = BatchFixed {
            uid: u32::from_le_bytes([u0, u1, u2, u3]),
            prev: u32::from_le_bytes([p0, p1, p2, p3]),
            count: cf & 0x1F,
            flags: cf >> 5,
        };
        let sane = f.count >= 1
            && f.count as usize <= MAX_RECORDS_PER_APPEND
            && f.flags & !(BATCH_TURN_COMPLETED | BATCH_HAS_ID) == 0;
        sane.then_some(f)
    }
}

/// The parsed fixed part of a base.
#[derive(Debug, Clone, Copy)]
pub(crate) struct BaseFixed {
    pub uid: u32,
    pub flags: u8,
    pub id_len: u8,
    pub size: u32,
    pub count: u32,
    pub oldest: u32,
}

impl BaseFixed {
    pub fn encode(&self, out: &mut [u8; BASE_FIXED as usize]) {
        let [u0, u1, u2, u3] = self.uid.to_le_bytes();
        let [s0, s1, s2, s3] = self.size.to_le_bytes();
        let [c0, c1, c2, c3] = self.count.to_le_bytes();
        let [o0, o1, o2, o3] = self.oldest.to_le_bytes();
        *out = [
            u0,
            u1,
            u2,
            u3,
            self.flags,
            self.id_len,
            0,
            0,
            s0,
            s1,
            s2,
            s3,
            c0,
            c1,
            c2,
            c3,
            o0,
            o1,
            o2,
            o3,
        ];
    }

    pub fn decode(b: &[u8]) -> Option<BaseFixed> {
        // Taken apart by pattern: in bounds by its type, no checks.
        let &[u0, u1, u2, u3, flags, id_len, z0, z1, s0, s1, s2, s3, c0, c1, c2, c3, o0, o1, o2, o3] =
            b.first_chunk::<{ BASE_FIXED as usize }>()?;
        let f = BaseFixed {
            uid: u32::from_le_bytes([u0, u1, u2, u3]),
            flags,
            id_len,
            size: u32::from_le_bytes([s0, s1, s2, s3]),
            count: u32::from_le_bytes([c0, c1, c2, c3]),
            oldest: u32::from_le_bytes([o0, o1, o2, o3]),
        };
        let sane = f.flags & !FLAG_BLOCKED == 0
            && f.id_len as usize <= MAX_SESSION_ID_BYTES
            && f.id_len > 0
            && [z0, z1] == [0, 0]
            && f.count <= u16::MAX as u32;
        sane.then_some(f)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn varints_round_trip_and_reject_overlong() {
        let mut b = [0u8; 8];
        for v in [0, 1, 127, 128, 300, 65_535, 1 << 21, u32::MAX] {
            let end = put_varint(&mut b, 0, v).unwrap();
            assert_eq!(get_varint(&b, 0), Some((v, end)));
        }
        assert_eq!(get_varint(&[0x80, 0x80, 0x80, 0x80, 0x10], 0), None);
        assert_eq!(get_varint(&[0x80], 0), None);
    }

    #[test]
    fn session_entry_round_trip_and_sanity() {
        let s = Session {
            uid: 9,
            id_hash: 0xABCD,
            id_len: 12,
            flags: FLAG_BLOCKED,
            records: 300,
            chain: 3,
            head: 0x2000,
            root: 0x1000,
            root_is_base: true,
            oldest: 4,
            size: 150_000,
            dirty: false,
            dir: DIR_NONE,
        };
        let mut b = [0u8; SESSION_ENCODED];
        s.encode(&mut b);
        assert_eq!(Session::decode(&b), Some(s));
        b[8] = 0;
        assert_eq!(Session::decode(&b), None);
    }

    #[test]
    fn kinds_pack_and_reject_unknown() {
        let b = pack_kind(RecordType::ToolResult, BackendFormat::OpenAiResponses);
        assert_eq!(
            unpack_kind(b),
            Some((RecordType::ToolResult, BackendFormat::OpenAiResponses))
        );
        assert_eq!(unpack_kind(0x05), None);
        assert_eq!(unpack_kind(0x14), None);
    }
}
