//! History reads: a session's records, oldest first, through ESP-Claw's
//! mixed-backend filter (`docs/FORMAT.md`, "Session history"), either whole
//! into one buffer ([`Store::history`]) or one record at a time
//! ([`Store::history_stream`], [`Store::history_next`]).
//!
//! Owns: [`HistCursor`], the one walk both reads share (the session's
//! records, each batch read once front to back through its checksums, each
//! base body checked against its own CRC, the filter applied), and
//! [`HistoryStream`], a read in progress that the caller keeps between
//! calls.
//!
//! Invariants: nothing is handed out that failed a check. The whole read
//! writes a batch's records as it reads them and takes them back if the
//! batch fails its CRC at the end. The stream cannot take back what it has
//! handed out, so it checks the whole session first (one pass that reads
//! every body and counts what the filter keeps: the total it reports in
//! advance) and then reads it again, record by record; its records are
//! therefore read twice. A stream is tied to the session as it was when it
//! was opened: any write to the session, or a sector reclaimed by the ring
//! since, makes the next call fail with [`Error::InvalidInput`] rather than
//! read moved bytes.
//!
//! Power loss: reads write nothing, except that a read which met damage
//! rebuilds the session's index afterwards (one base, atomic: a cut leaves
//! the old index or the new one, with the same records).

use core::borrow::BorrowMut;

use embedded_storage::nor_flash::NorFlash;

use super::base::Keep;
use super::report::HIST_HEADER;
use super::{History, Priority, Store, Work};
use crate::backend::{degrade_word, degraded, history_action, HistoryAction};
use crate::chdx::{BackendFormat, RecordType};
use crate::cursor::{RecordInfo, Records, VerifiedReader};
use crate::error::{fail, Error, Fail};
use crate::layout::CRC;
use crate::session::{Record, Session, SESSION_BATCH};

/// Where a history read is in a session.
pub(crate) struct HistCursor {
    recs: Records,
    /// The batch being read, through its checksums.
    reader: Option<VerifiedReader>,
    /// Chain segment of the record handled last (`usize::MAX` before the
    /// first).
    seg: usize,
    /// Segment `seg` has closed (a step said so): `pending` holds the
    /// record fetched then, the next step's.
    closed: bool,
    /// The current batch lost its header or a record's length: its
    /// remaining records are lost.
    broken: bool,
    /// The record fetched last.
    pending: Option<RecordInfo>,
    current: BackendFormat,
    /// The longest body read so far (kept, dropped or damaged).
    read_max: usize,
}

/// What a step of a history walk found, beside its word (see [`step`]):
/// a record's kind, format and length, the bytes it used (the segment that
/// ended is the cursor's `seg`). The caller's, filled in place.
struct Got {
    kind: RecordType,
    format: BackendFormat,
    len: usize,
    used: usize,
}

impl Got {
    const fn new() -> Got {
        Got {
            kind: RecordType::User,
            format: BackendFormat::Unknown,
            len: 0,
            used: 0,
        }
    }
}

impl HistCursor {
    /// A walk for the `current` backend, not started yet
    /// ([`Store::hist_start`] starts it in place). Out of line: both reads
    /// make one, in place.
    #[inline(never)]
    fn new(current: BackendFormat) -> HistCursor {
        HistCursor {
            recs: Records::EMPTY,
            reader: None,
            seg: usize::MAX,
            closed: false,
            broken: false,
            pending: None,
            current,
            read_max: 0,
        }
    }

    /// Back to the first record (segments found damaged stay skipped).
    fn rewind(&mut self) {
        self.recs.rewind();
        self.reader = None;
        self.seg = usize::MAX;
        self.closed = false;
        self.broken = false;
        self.pending = None;
    }
}

/// One step of a history walk: the word [`Store::hist_step`] answers (a
/// `Result<u32, _>` comes back in registers), what it found in a [`Got`].
mod step {
    /// A record the filter keeps, of kind `kind` and format
    /// `format`: its body is the first `len` bytes of the buffer;
    /// `used` bytes of it were needed (the stored body and, for a
    /// rewritten one, the rewrite).
    pub const KEPT: u32 = 0;
    /// A sound record the filter leaves out.
    pub const DROPPED: u32 = 1;
    /// A record lost to damage.
    pub const DAMAGED: u32 = 2;
    /// A record longer than the buffer.
    pub const TOO_LARGE: u32 = 3;
    /// A record of another backend whose rewrite (`used` bytes) did not
    /// fit after its `len` stored bytes.
    pub const NO_ROOM: u32 = 4;
    /// Segment `seg` (the cursor's; the base or a batch) has ended, sound.
    pub const SEGMENT_OK: u32 = 5;
    /// Segment `seg` has ended and its batch failed its checksums: every
    /// record it gave is void.
    pub const SEGMENT_BAD: u32 = 6;
    /// No more records.
    pub const END: u32 = 7;
}

/// A history read handed out one record at a time: opened by
/// [`Store::history_stream`], read by [`Store::history_next`]. It knows in
/// advance how many records and bytes it will give, so that a firmware can
/// send a `Content-Length` before it streams the bodies.
pub struct HistoryStream {
    cursor: HistCursor,
    /// The session as it was at open: any change voids the stream.
    session: Session,
    tail_seq: u32,
    records: u32,
    bytes: usize,
    damaged: u32,
    need: usize,
    given: u32,
    given_bytes: usize,
    /// The buffer the open was given: the reads use no more of theirs, so
    /// that a record too long for one pass is too long for the other.
    open_len: usize,
    done: bool,
    /// A call failed part-way (a flash error, or the flash changed): the
    /// stream's place is lost, and every later call says so.
    failed: bool,
}

impl HistoryStream {
    /// Records the stream gives in all.
    pub fn records(&self) -> u32 {
        self.records
    }

    /// Body bytes the stream gives in all (the sum of every record's body
    /// length).
    pub fn total_bytes(&self) -> usize {
        self.bytes
    }

    /// Records damaged on flash and left out.
    pub fn damaged_records(&self) -> u32 {
        self.damaged
    }

    /// The smallest buffer [`Store::history_next`] takes for this stream:
    /// its longest record (a record of another backend that is rewritten
    /// needs its stored body and the rewrite).
    pub fn buffer_bytes(&self) -> usize {
        self.need
    }

    /// Records given so far.
    pub fn given(&self) -> u32 {
        self.given
    }
}

impl core::fmt::Debug for HistoryStream {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.debug_struct("HistoryStream")
            .field("records", &self.records)
            .field("bytes", &self.bytes)
            .field("given", &self.given)
            .finish()
    }
}

/// Adds to `total` what a history read returns of each record it is given
/// (its header and body), leaving out a length beyond `capacity` (damage):
/// one closure for [`Store::history_len`] and a rescan's count.
fn held_counter(capacity: u32, total: &mut usize) -> impl FnMut(u8, RecordType, u32) + '_ {
    move |_, _, len| {
        if len <= capacity {
            *total += HIST_HEADER + len as usize;
        }
    }
}

/// A record a stream gives: its kind, format and body length.
type Given = (RecordType, BackendFormat, usize);

/// The error a stream answers once its session changed under it.
const STREAM_STALE: &str =
    "the session changed since its history stream was opened: open the stream again";

/// The error a stream answers after a call of it failed part-way.
const STREAM_FAILED: &str = "a read of this history stream failed part-way: open the stream again";

impl<F: NorFlash, const MAX_SESSIONS: usize, W: BorrowMut<Work>> Store<F, MAX_SESSIONS, W> {
    /// Starts walk `c` (made by [`HistCursor::new`]) at `s`'s first record,
    /// in place.
    fn hist_start(&mut self, c: &mut HistCursor, s: &Session) -> Result<(), Fail> {
        let ring = self.log.ring();
        c.recs.start(&mut self.log.io(), s, Some(ring))
    }

    /// After segment `c.seg` of walk `c` failed its check, finds `s`'s
    /// chain again by scanning the log ([`Records::rescan`]) and rewinds the
    /// walk: `false` if that is not done (the root, or scanned already).
    #[inline(always)]
    fn hist_rescan(&mut self, c: &mut HistCursor, s: &Session) -> Result<bool, Fail> {
        Ok(self.hist_rescan_word(c, s)? != 0)
    }

    /// [`Self::hist_rescan`] as a word (1 or 0; see `Io::chunk_crc_ok_word`).
    #[inline(never)]
    fn hist_rescan_word(&mut self, c: &mut HistCursor, s: &Session) -> Result<u32, Fail> {
        let ring = self.log.ring();
        let again = c.recs.rescan(&mut self.log.io(), s, ring, c.seg)?;
        if again {
            c.rewind();
            c.read_max = 0;
        }
        Ok(u32::from(again))
    }

    /// The next step of walk `c`, reading a record's body into `dst`: a
    /// [`step`] word, what it found in `got`.
    #[inline(never)]
    fn hist_step(
        &mut self,
        c: &mut HistCursor,
        dst: &mut [u8],
        got: &mut Got,
    ) -> Result<u32, Fail> {
        if !c.closed {
            c.pending = c.recs.next(&mut self.log.io())?;
        }
        let next = c.pending;
        if c.closed || next.map(|r| r.segment) != Some(c.seg) {
            if !c.closed && c.seg != usize::MAX {
                // Close the segment: a batch counts only if every chunk of
                // it, read to its end, checked out.
                let ok = c.reader.take().is_none_or(|r| r.finish());
                c.closed = true;
                return Ok(if ok {
                    step::SEGMENT_OK
                } else {
                    step::SEGMENT_BAD
                });
            }
            c.closed = false;
            if let Some(r) = next {
                c.seg = r.segment;
                c.broken = false;
                // A base's bodies have their own CRCs (moved by a moves
                // record or not); a batch is read once, front to back, its
                // CRCs checked on the way (meta included).
                let base = r.crc.is_some();
                let addr = c.recs.chain().addrs.get(r.segment);
                if let (false, false, Some(&addr)) = (base, r.damaged, addr) {
                    VerifiedReader::start(&mut self.log.io(), addr, SESSION_BATCH, &mut c.reader)?;
                    // A batch whose header is gone: its records are lost.
                    c.broken = c.reader.is_none();
                }
            }
        }
        let Some(r) = next else {
            return Ok(step::END);
        };
        if r.damaged || c.broken {
            return Ok(step::DAMAGED);
        }
        let len = r.len as usize;
        if len > dst.len() {
            // In a batch, whose bodies follow one another, the rest of the
            // batch cannot be found any more (and the reader will not finish
            // it); a base's entries stand alone.
            c.broken |= r.crc.is_none();
            return Ok(step::TOO_LARGE);
        }
        c.read_max = c.read_max.max(len);
        let (body, tail) = dst.split_at_mut(len);
        match c.reader.as_mut() {
            Some(v) => {
                // Skip (and check) the meta before the first body.
                let mut skip = r.offset.saturating_sub(v.read_total());
                while skip > 0 {
                    let (mut io, scratch) = self.log.io_buf();
                    let n = (skip as usize).min(scratch.len());
                    v.read(&mut io, scratch.split_at_mut(n).0)?;
                    skip -= n as u32;
                }
                v.read(&mut self.log.io(), body)?;
            }
            None => self.log.io().read_stream(r.addr, body)?,
        }
        if r.crc.is_some_and(|crc| CRC.checksum(body) != crc) {
            return Ok(step::DAMAGED);
        }
        got.kind = r.kind;
        got.format = r.format;
        got.len = len;
        got.used = len;
        Ok(match history_action(c.current, r.format, r.kind) {
            HistoryAction::Keep => step::KEPT,
            HistoryAction::Drop => step::DROPPED,
            HistoryAction::KeepTextOnly => match degrade_word(body, tail) {
                // A body that is not JSON is kept as stored.
                (degraded::KEEP, _) => step::KEPT,
                (degraded::REWRITTEN, len_bytes) => {
                    dst.copy_within(len..len + len_bytes, 0);
                    got.len = len_bytes;
                    got.used = len + len_bytes;
                    step::KEPT
                }
                (degraded::NO_ROOM, needed_bytes) => {
                    got.used = needed_bytes;
                    step::NO_ROOM
                }
                _ => step::DROPPED,
            },
        })
    }

    /// Reads a session's history into `buf`, oldest record first, applying
    /// ESP-Claw's mixed-backend filter for the `current` backend (tool
    /// records of another known backend are dropped; a final answer keeps
    /// only its text). An empty or unknown session is [`Error::NotFound`].
    ///
    /// A buffer too small is [`Error::BufferTooSmall`] with the size that
    /// holds the session as stored; a final answer of another backend is
    /// rewritten in the buffer after its body, so a session holding such
    /// answers may ask again, for more, until every rewrite fits.
    ///
    /// Reads about the bytes it returns: the session's index and bodies and
    /// the meta of its recent batches, never the rest of the partition.
    pub fn history<'b>(
        &mut self,
        session: &str,
        current: BackendFormat,
        buf: &'b mut [u8],
    ) -> Result<History<'b>, Error<F::Error>> {
        let r = self.history_inner(session, current, buf);
        self.surface(r)
    }

    /// [`history`](Self::history) with the engine's error.
    pub(crate) fn history_inner<'b>(
        &mut self,
        session: &str,
        current: BackendFormat,
        buf: &'b mut [u8],
    ) -> Result<History<'b>, Fail> {
        let i = self.find_known(session)?;
        let s = self.sessions[i];
        let mut needed =
            (s.size as usize).saturating_sub(s.records as usize) + HIST_HEADER * s.records as usize;
        // The size a base states may be damaged at rest and claim more than
        // its records hold: before asking for more room, count what they
        // hold (the next read then repairs the base).
        let mut resized = false;
        if buf.len() < needed {
            let held = self.history_len(i)?;
            if held < needed {
                needed = held;
                resized = true;
            }
            if buf.len() < needed {
                return Err(self.log.parked().buffer_too_small(needed));
            }
        }
        let mut c = HistCursor::new(current);
        self.hist_start(&mut c, &s)?;
        let mut at = 0usize;
        let mut count = 0u32;
        let mut damaged = 0u32;
        // Where the current segment's output began, to take it back whole
        // if its checksum fails.
        let mut seg_start = 0usize;
        let mut seg_records = 0u32;
        let mut got = Got::new();
        // Records left out for the caller's format: a walk that left the
        // chain's pointers for damage (or a rescan that found the chain
        // again) passes over a damaged batch without meeting it, so what
        // the session holds less what the read gave and left out is lost.
        let mut dropped = 0u32;
        loop {
            let body = at + HIST_HEADER;
            let dst = buf.get_mut(body..).unwrap_or_default();
            let word = self.hist_step(&mut c, dst, &mut got)?;
            match word {
                step::KEPT => {
                    let len = got.len;
                    let l = (len as u32).to_le_bytes();
                    // (In the buffer: the body after it is.)
                    if let Some(header) = buf.get_mut(at..body) {
                        header.copy_from_slice(&[
                            got.kind.as_u8(),
                            got.format.as_u8(),
                            l[0],
                            l[1],
                            l[2],
                            l[3],
                        ]);
                    }
                    at = body + len;
                    count += 1;
                    seg_records += 1;
                }
                step::DROPPED => dropped += 1,
                step::DAMAGED => damaged += 1,
                step::TOO_LARGE => {
                    if buf.len() < needed {
                        return Err(self.log.parked().buffer_too_small(needed));
                    }
                    // `needed` holds the whole session: a record that does
                    // not fit has a length damaged at rest.
                    damaged += 1;
                }
                step::NO_ROOM => {
                    return Err(self.log.parked().buffer_too_small(buf.len() + got.used))
                }
                step::SEGMENT_OK | step::SEGMENT_BAD => {
                    let ok = word == step::SEGMENT_OK;
                    if !ok && self.hist_rescan(&mut c, &s)? {
                        // The chain found again may hold more than the
                        // pointers led to (and than `needed` counted when
                        // it was taken from them): ask for room for it
                        // rather than count its records damaged.
                        let capacity = self.log.geo().capacity();
                        let mut held = 0usize;
                        self.walk_records(&mut c.recs, 0, &mut held_counter(capacity, &mut held))?;
                        needed = needed.max(held);
                        if buf.len() < needed {
                            return Err(self.log.parked().buffer_too_small(needed));
                        }
                        // Read it all afresh.
                        (at, count, damaged, seg_start, seg_records) = (0, 0, 0, 0, 0);
                        dropped = 0;
                        continue;
                    }
                    if !ok {
                        damaged += seg_records;
                        count -= seg_records;
                        at = seg_start;
                    }
                    seg_start = at;
                    seg_records = 0;
                }
                _ => break,
            }
        }
        damaged = damaged.max(lost(&s, count + dropped));
        if c.recs.degraded() || damaged > 0 || resized {
            self.repair_index(i);
        }
        if count == 0 {
            return Err(Fail::NOT_FOUND);
        }
        Ok(History {
            buf: &buf[..at],
            records: count,
            damaged,
        })
    }

    /// Rebuilds session `i`'s index from what the log still holds, after a
    /// read found damage, so that the next read is whole again and nothing
    /// points at the damage. A failure (no room) leaves the session as it
    /// is; the read still answers.
    #[inline(never)]
    fn repair_index(&mut self, i: usize) {
        let _ = self.rewrite_base(i, Keep::All, None, Priority::Maintenance);
    }

    /// Bytes a history read of session `i` returns at most: every record's header
    /// and body, as the index and batch metas give them (a length beyond
    /// the partition is damage, and not counted).
    #[inline(never)]
    fn history_len(&mut self, i: usize) -> Result<usize, Fail> {
        let capacity = self.log.geo().capacity();
        let mut total = 0usize;
        self.each_record(i, 1, &mut held_counter(capacity, &mut total))?;
        Ok(total)
    }

    /// Opens a streaming read of a session's history: the same records,
    /// filter and checks as [`history`](Self::history), handed out one at a
    /// time by [`history_next`](Self::history_next) into a buffer that holds
    /// one record. `buf` is that buffer: it must hold the session's longest
    /// record (or [`Error::BufferTooSmall`] says how much is needed), and the
    /// open uses it to check every body and count what the read will give
    /// ([`HistoryStream::records`], [`HistoryStream::total_bytes`]). An
    /// empty or unknown session is [`Error::NotFound`].
    ///
    /// Reads the session's bodies once here and once more as they are
    /// handed out; holds nothing of the session in RAM but the stream.
    pub fn history_stream(
        &mut self,
        session: &str,
        current: BackendFormat,
        buf: &mut [u8],
    ) -> Result<HistoryStream, Error<F::Error>> {
        let r = self.history_stream_inner(session, current, buf);
        self.surface(r)
    }

    /// [`history_stream`](Self::history_stream) with the engine's error.
    pub(crate) fn history_stream_inner(
        &mut self,
        session: &str,
        current: BackendFormat,
        buf: &mut [u8],
    ) -> Result<HistoryStream, Fail> {
        let i = self.find_known(session)?;
        let s = self.sessions[i];
        let mut c = HistCursor::new(current);
        self.hist_start(&mut c, &s)?;
        // Once more from the start if a rescan finds the chain again. (What
        // the session holds less what the read gives and leaves out is
        // lost, as in `history`.)
        let (records, bytes, mut damaged, need, longest, dropped) = 'walk: loop {
            // The longest record, from the index and batch metas: a length
            // beyond the session's size is damage (found and counted
            // below). The walk's own cursor, rewound after: no second one
            // on the stack.
            let mut longest = 0u32;
            self.walk_records(&mut c.recs, 0, &mut |_, _, len| {
                if len <= s.size {
                    longest = longest.max(len);
                }
            })?;
            if buf.len() < longest as usize {
                return Err(self.log.parked().buffer_too_small(longest as usize));
            }
            let (mut records, mut bytes, mut damaged, mut need) = (0u32, 0usize, 0u32, 0usize);
            let (mut seg_records, mut seg_bytes, mut dropped) = (0u32, 0usize, 0u32);
            let mut got = Got::new();
            loop {
                match self.hist_step(&mut c, buf, &mut got)? {
                    step::KEPT => {
                        seg_records += 1;
                        seg_bytes += got.len;
                        need = need.max(got.used);
                    }
                    step::NO_ROOM => {
                        seg_records += 1;
                        seg_bytes += got.used;
                        need = need.max(got.len + got.used);
                    }
                    step::DROPPED => dropped += 1,
                    step::DAMAGED | step::TOO_LARGE => damaged += 1,
                    step::SEGMENT_OK => {
                        records += seg_records;
                        bytes += seg_bytes;
                        (seg_records, seg_bytes) = (0, 0);
                    }
                    step::SEGMENT_BAD => {
                        if self.hist_rescan(&mut c, &s)? {
                            continue 'walk;
                        }
                        // Left out of the second pass whole.
                        damaged += seg_records;
                        c.recs.skip_segment(c.seg);
                        (seg_records, seg_bytes) = (0, 0);
                    }
                    _ => break 'walk (records, bytes, damaged, need, longest, dropped),
                }
            }
        };
        damaged = damaged.max(lost(&s, records + dropped));
        // Every body the open read (one the filter drops, or a damaged
        // one, included) must fit the reads too: they decide alike.
        let need = need.max(longest as usize).max(c.read_max);
        if buf.len() < need {
            return Err(self.log.parked().buffer_too_small(need));
        }
        if records == 0 {
            if c.recs.degraded() || damaged > 0 {
                self.repair_index(i);
            }
            return Err(Fail::NOT_FOUND);
        }
        c.rewind();
        Ok(HistoryStream {
            cursor: c,
            session: s,
            tail_seq: self.log.tail_seq(),
            records,
            bytes,
            damaged,
            need,
            given: 0,
            given_bytes: 0,
            open_len: buf.len(),
            done: false,
            failed: false,
        })
    }

    /// The next record of a history stream, oldest first, its body in `buf`
    /// (at least [`HistoryStream::buffer_bytes`] long, or
    /// [`Error::BufferTooSmall`], and the stream stays where it was);
    /// `None` after the last. A stream whose session was written to, or
    /// whose sectors the ring reclaimed, since it was opened answers
    /// [`Error::InvalidInput`]: open it again. So does a stream after one of
    /// its calls failed part-way (a flash error): its place is lost, and it
    /// never answers `None` for the records it did not give.
    ///
    /// After the last record, a read that met damage rebuilds the
    /// session's index, as [`history`](Self::history) does.
    pub fn history_next<'b>(
        &mut self,
        stream: &mut HistoryStream,
        buf: &'b mut [u8],
    ) -> Result<Option<Record<'b>>, Error<F::Error>> {
        let r = self.history_next_inner(stream, buf);
        self.surface(r)
    }

    /// [`history_next`](Self::history_next) with the engine's error.
    pub(crate) fn history_next_inner<'b>(
        &mut self,
        stream: &mut HistoryStream,
        buf: &'b mut [u8],
    ) -> Result<Option<Record<'b>>, Fail> {
        if stream.failed {
            return Err(fail!(InvalidInput, STREAM_FAILED));
        }
        if stream.done {
            return Ok(None);
        }
        if buf.len() < stream.need {
            return Err(self.log.parked().buffer_too_small(stream.need));
        }
        let was = stream.session;
        let i = self
            .index_of(was.uid)
            .filter(|&i| {
                let s = &self.sessions[i];
                s.head == was.head && s.root == was.root && s.records == was.records
            })
            .filter(|_| self.log.tail_seq() == stream.tail_seq)
            .ok_or(fail!(InvalidInput, STREAM_STALE))?;
        let cap = buf.len().min(stream.open_len);
        let (capped, _) = buf.split_at_mut(cap);
        match self.stream_step(stream, capped, i) {
            Ok(Some((kind, format, len))) => Ok(Some(Record {
                kind,
                format,
                body: &buf[..len],
            })),
            Ok(None) => Ok(None),
            Err(e) => {
                stream.failed = true;
                Err(e)
            }
        }
    }

    /// The next record `stream` gives, read into `buf`: its kind, format
    /// and length; `None` at the end (session `i`'s index repaired then if
    /// the read met damage).
    fn stream_step(
        &mut self,
        stream: &mut HistoryStream,
        buf: &mut [u8],
        i: usize,
    ) -> Result<Option<Given>, Fail> {
        // The open checked all of this: a difference now is the flash
        // changing under the read. Made where it is returned: a step may
        // meet and pass over damage, which parks that damage's address.
        let root = stream.session.root;
        let changed = |s: &mut Self| {
            s.log.parked().at(
                fail!(
                    Corrupted,
                    "a session's history changed on flash while it was streamed"
                ),
                root,
            )
        };
        let mut got = Got::new();
        loop {
            match self.hist_step(&mut stream.cursor, buf, &mut got)? {
                step::KEPT => {
                    let (kind, format, len) = (got.kind, got.format, got.len);
                    stream.given += 1;
                    stream.given_bytes += len;
                    if stream.given > stream.records || stream.given_bytes > stream.bytes {
                        return Err(changed(self));
                    }
                    return Ok(Some((kind, format, len)));
                }
                // A length beyond the open's buffer is damage the open
                // counted.
                step::DROPPED | step::DAMAGED | step::TOO_LARGE => {}
                step::SEGMENT_OK => {}
                step::NO_ROOM | step::SEGMENT_BAD => return Err(changed(self)),
                _ => {
                    if stream.given != stream.records || stream.given_bytes != stream.bytes {
                        return Err(changed(self));
                    }
                    stream.done = true;
                    if stream.cursor.recs.degraded() || stream.damaged > 0 {
                        self.repair_index(i);
                    }
                    return Ok(None);
                }
            }
        }
    }
}

/// Records of session `s` a read lost when it left the chain's pointers
/// (a rescan, or a walk that passed over damage, meets no damaged batch
/// to count): those the session holds less the `met` it gave or left out
/// for the caller's format.
fn lost(s: &Session, met: u32) -> u32 {
    u32::from(s.records).saturating_sub(met)
}
