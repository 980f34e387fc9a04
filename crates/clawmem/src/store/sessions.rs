//! Sessions: the RAM session table, appends, compaction and deletes (history
//! reads are `history.rs`) (`docs/FORMAT.md`, "Session batch" and "Session history").
//!
//! A session is its root (its newest base, or its first batch) followed by
//! the batches chained after it through their "previous" pointers, at most
//! [`CHAIN_MAX`] of them (the next append consolidates them into a base,
//! `base.rs`). RAM keeps one [`Session`] entry per session: where its head
//! and root are, its record count and `.log` size, and the oldest sector it
//! still uses. The session's name is stored once, in its first batch (or in
//! its base); the table keeps its hash and length, and a lookup compares the
//! bytes on flash.
//!
//! Invariants: a table entry changes only after the batch that changes it
//! has committed; uids are never reused; a history read checks every batch
//! CRC and every referenced body's CRC, and leaves out (and counts) what
//! fails, rebuilding the session's index afterwards so that the next read is
//! whole.
//!
//! Power loss: an append is one batch, all or nothing; once it returns `Ok`
//! it survives any cut. A cut during the compaction that follows leaves the
//! uncompacted history, which the next completed turn compacts. A delete is
//! one small record: the session is either whole or gone.

use core::borrow::BorrowMut;

use embedded_storage::nor_flash::NorFlash;

use super::base::Keep;
use super::{Appended, Gate, Priority, SessionInfo, Store, Work};
use crate::chdx::RecordType;
use crate::cursor::{read_id, Records};
use crate::error::SESSION_BLOCKED_WARNING;
use crate::error::{fail, Error, Fail, Kind};
use crate::layout::NO_ADDR;
use crate::log::{copy_from_parts, Io, Payload, Slices};
use crate::naming::fnv1a32;
use crate::session::{
    encode_batch_meta, Record, Session, BATCH_META_MAX, BATCH_TURN_COMPLETED, CHAIN_MAX,
    FLAG_BLOCKED, MAX_RECORDS_PER_APPEND, MAX_SESSION_ID_BYTES,
};
use crate::session::{SESSION_BATCH, SESSION_BLOCK, SESSION_DELETE};
use crate::turns::{PlanBuilder, SummaryCutFinder, TurnCursor};

impl<F: NorFlash, const MAX_SESSIONS: usize, W: BorrowMut<Work>> Store<F, MAX_SESSIONS, W> {
    /// Where the session with `uid` is in the table.
    pub(super) fn index_of(&self, uid: u32) -> Option<usize> {
        self.sessions.iter().position(|s| s.uid == uid)
    }

    /// Drops the session with `uid` from the table and the directory
    /// (after its deletion committed, or at mount) and notes it for the
    /// next checkpoint. `false` if RAM could not note it (see
    /// [`note_deleted`](Self::note_deleted)).
    pub(super) fn remove_uid(&mut self, uid: u32) -> bool {
        // Noted first: until it is, a session that left the table counts
        // as one the directory holds.
        let noted = self.note_deleted(uid);
        if let Some(i) = self.index_of(uid) {
            self.sessions.swap_remove(i);
        }
        noted
    }

    /// Checks a session id against the configured length.
    #[inline(never)]
    pub(super) fn check_id(&mut self, id: &str) -> Result<(), Fail> {
        if id.is_empty() {
            return Err(fail!(InvalidInput, "session id is empty"));
        }
        if id.len() > self.config.max_session_id_bytes {
            let limit = self.config.max_session_id_bytes;
            let f = fail!(TooLarge, "session id");
            return Err(self.log.parked().too_large(f, id.len(), limit));
        }
        Ok(())
    }

    /// Where the session named `id` is in the table, comparing the name on
    /// flash (corrected when a first batch damaged at rest allows it); a
    /// cold one is brought in from the directory. The session found is the
    /// one the operation works on: the table keeps it until the next
    /// lookup.
    #[inline(always)]
    pub(super) fn find(&mut self, id: &str) -> Result<Option<usize>, Fail> {
        let i = self.find_word(id)?;
        Ok((i != usize::MAX).then_some(i))
    }

    /// [`check_id`](Self::check_id), then [`find`](Self::find) a session
    /// that must be there ([`Fail::NOT_FOUND`] if not): one call for the
    /// operations that read or delete a session.
    #[inline(never)]
    pub(super) fn find_known(&mut self, id: &str) -> Result<usize, Fail> {
        self.check_id(id)?;
        self.find(id)?.ok_or(Fail::NOT_FOUND)
    }

    /// [`Self::find`] as a word, `usize::MAX` for `None` (no table index).
    #[inline(never)]
    fn find_word(&mut self, id: &str) -> Result<usize, Fail> {
        let found = match self.find_hot(id)? {
            Some(i) => Some(i),
            None => self.find_cold(super::directory::Want::Id(id), true)?,
        };
        self.pinned = found.map_or(NO_ADDR, |i| self.sessions[i].uid);
        Ok(found.unwrap_or(usize::MAX))
    }

    /// [`find`](Self::find) in the table alone.
    fn find_hot(&mut self, id: &str) -> Result<Option<usize>, Fail> {
        let hash = fnv1a32(id.as_bytes());
        for i in 0..self.sessions.len() {
            let s = &self.sessions[i];
            if s.id_hash != hash || s.id_len as usize != id.len() {
                continue;
            }
            let mut buf = [0u8; MAX_SESSION_ID_BYTES];
            let n = read_id(&mut self.log.io(), s, &mut buf)?;
            if &buf[..n] == id.as_bytes() {
                return Ok(Some(i));
            }
            // The hash matched but the bytes did not: a first batch damaged
            // at rest may still give its name back.
            if !s.root_is_base {
                if let Some((_, n)) = self.log.start_name(s.root, Some(s.uid), &mut buf)? {
                    if &buf[..n] == id.as_bytes() {
                        return Ok(Some(i));
                    }
                }
            }
        }
        Ok(None)
    }

    /// The id of `s` into `out`, checked against the table's hash; a first
    /// batch damaged at rest is corrected when it can be. `None`: the name
    /// is lost to damage.
    pub(super) fn session_id(
        &mut self,
        s: &Session,
        out: &mut [u8; MAX_SESSION_ID_BYTES],
    ) -> Result<Option<usize>, Fail> {
        session_id_in(&mut self.log, s, out)
    }

    /// Facts about a session, or `None` if it does not exist.
    pub fn session_info(&mut self, id: &str) -> Result<Option<SessionInfo>, Error<F::Error>> {
        let r = self.session_info_inner(id);
        self.surface(r)
    }

    /// [`session_info`](Self::session_info) with the engine's error.
    pub(crate) fn session_info_inner(&mut self, id: &str) -> Result<Option<SessionInfo>, Fail> {
        self.check_id(id)?;
        Ok(self.find(id)?.map(|i| {
            let s = &self.sessions[i];
            SessionInfo {
                records: u32::from(s.records),
                size_bytes: s.size,
                blocked: s.blocked(),
            }
        }))
    }

    /// Number of sessions stored: those in the RAM table and those only
    /// on flash.
    pub fn session_count(&self) -> usize {
        self.sessions.len() + self.cold_count() as usize
    }

    /// Calls `f` with the id of every session. Returns how many sessions
    /// were left out because their name is damaged at rest beyond repair
    /// (they cannot be looked up either).
    pub fn for_each_session(
        &mut self,
        f: impl FnMut(&str, SessionInfo),
    ) -> Result<usize, Error<F::Error>> {
        let r = self.for_each_session_inner(f);
        self.surface(r)
    }

    /// [`for_each_session`](Self::for_each_session) with the engine's error.
    pub(crate) fn for_each_session_inner(
        &mut self,
        mut f: impl FnMut(&str, SessionInfo),
    ) -> Result<usize, Fail> {
        let mut lost = 0;
        // The table's sessions, then the directory's others.
        let mut cold = super::directory::ColdCursor::new(&self.dir);
        let mut i = 0;
        while self.next_session_word(&mut i, &mut cold)? != 0 {
            let s = &cold.cur;
            let mut buf = [0u8; MAX_SESSION_ID_BYTES];
            // (A name `session_id` gives is UTF-8: it checked.)
            let name = self.session_id(s, &mut buf)?;
            let Some(id) = name.and_then(|n| core::str::from_utf8(buf.get(..n)?).ok()) else {
                lost += 1;
                continue;
            };
            f(
                id,
                SessionInfo {
                    records: u32::from(s.records),
                    size_bytes: s.size,
                    blocked: s.blocked(),
                },
            );
        }
        Ok(lost)
    }

    /// ESP-Claw's request gate: a request without a session passes; a
    /// blocked session is refused with the warning, whole. A fault in the
    /// memory system never blocks a request.
    pub fn gate(&mut self, session: Option<&str>) -> Gate {
        let Some(id) = session else {
            return Gate::Pass;
        };
        match self.session_info(id) {
            Ok(Some(info)) if info.blocked => Gate::Blocked(SESSION_BLOCKED_WARNING),
            _ => Gate::Pass,
        }
    }

    /// Appends records to a session as one atomic batch, creating the
    /// session on first use. With `turn_completed`, a session left over its
    /// size limit is compacted (ESP-Claw's turn-aware rules), or blocked if
    /// compaction cannot bring it under.
    ///
    /// A batch larger than the session limit is stored, as ESP-Claw stores
    /// it, and its completed turn then blocks the session. Only a batch
    /// larger than the partition can ever hold beside its reserves is
    /// refused ([`Error::TooLarge`], naming that size); one that fits the
    /// partition but not the room left now gets [`Error::Full`]. While a
    /// blocked session holds a body larger than the room garbage collection
    /// has, the store may answer Full until that session is deleted, as the
    /// warning asks (a body is copied whole when its sector is released).
    ///
    /// Power loss: the batch is all-or-nothing; once this returns `Ok` it
    /// survives any cut. A cut during the compaction that follows leaves the
    /// uncompacted history, which the next completed turn compacts.
    pub fn append(
        &mut self,
        session: &str,
        records: &[Record<'_>],
        turn_completed: bool,
    ) -> Result<Appended, Error<F::Error>> {
        let r = self.append_inner(session, records, turn_completed);
        self.surface(r)
    }

    /// [`append`](Self::append) with the engine's error.
    pub(crate) fn append_inner(
        &mut self,
        session: &str,
        records: &[Record<'_>],
        turn_completed: bool,
    ) -> Result<Appended, Fail> {
        self.check_id(session)?;
        if records.is_empty() {
            return Err(fail!(InvalidInput, "an append needs at least one record"));
        }
        if records.len() > MAX_RECORDS_PER_APPEND {
            let f = fail!(TooLarge, "records in one append");
            let size = records.len();
            return Err(self.log.parked().too_large(f, size, MAX_RECORDS_PER_APPEND));
        }
        let mut total: u64 = 0;
        for r in records {
            if r.body.is_empty() {
                return Err(fail!(InvalidInput, "a record body is empty"));
            }
            total += r.body.len() as u64 + 1;
        }
        // ESP-Claw writes a batch of any size and lets the turn's compaction
        // block the session (esp-claw#161, a reasoning model's first turn):
        // only a batch the partition could never hold is refused.
        let most = self.largest_append(records.len());
        if total > most {
            let f = fail!(
                TooLarge,
                "one append (more than the partition holds beside its reserves)"
            );
            let (size, limit) = (total as usize, most as usize);
            return Err(self.log.parked().too_large(f, size, limit));
        }
        let found = self.find(session)?;
        // Collecting garbage may drop a session damaged at rest, which moves
        // others in the table: the session is found again by uid.
        let mut found_uid = None;
        if let Some(i) = found {
            let s = &self.sessions[i];
            let uid = s.uid;
            found_uid = Some(uid);
            if s.blocked() {
                return Err(Fail::BLOCKED);
            }
            if s.chain as usize >= CHAIN_MAX {
                // Room for the new index and the batch together first: an
                // append that is refused leaves nothing behind.
                // Collecting may reorder the table (`sort_table`, `warm`):
                // the session is found again by the uid it had before.
                let index = crate::store::gc::index_len(s);
                self.ensure_room(index + total as u32 + 64, Priority::History)?;
                let i = self.index_of(uid).ok_or(Fail::NOT_FOUND)?;
                self.rewrite_base(i, Keep::All, None, Priority::History)?;
            }
        } else {
            // A new session: a slot in the table (a clean session goes
            // cold, after a checkpoint if none is), and no more than a
            // checkpoint can count.
            if self.session_count() >= usize::from(u16::MAX) {
                return Err(self.log.parked().too_many_sessions(usize::from(u16::MAX)));
            }
            self.pinned = NO_ADDR;
        }
        // Room first: collecting garbage may relocate this session, which
        // moves its head.
        let id_len = if found.is_none() {
            1 + session.len()
        } else {
            0
        };
        let meta_max = crate::session::BATCH_FIXED as usize + id_len + records.len() * 6;
        // (`total` counts a newline a record.)
        let bodies = total as usize - records.len();
        let len = (meta_max + bodies) as u32;
        self.prepare_write(len, Priority::History)?;
        // A new session's slot in the table: a clean session goes cold (room
        // made may have brought cold ones in, clean). If every slot holds a
        // changed session, a checkpoint makes them clean, with room for it
        // and the batch together first, so that a refused append leaves
        // nothing behind.
        for attempt in 0..3 {
            if found.is_some() || self.take_slot() {
                break;
            }
            if attempt == 2 {
                return Err(self.log.parked().too_many_sessions(MAX_SESSIONS));
            }
            self.ensure_room(len.saturating_add(self.checkpoint_len()), Priority::History)?;
            self.clean_table(Priority::Maintenance)?;
            self.prepare_write(len, Priority::History)?;
        }
        // Garbage collection may have dropped a session damaged at rest,
        // which moves others in the table.
        let found = match found_uid {
            Some(uid) => Some(self.index_of(uid).ok_or(Fail::NOT_FOUND)?),
            None => None,
        };
        let (uid, prev) = match found {
            Some(i) => {
                let s = &self.sessions[i];
                (s.uid, s.head)
            }
            None => (self.next_uid, NO_ADDR),
        };
        let mut meta = [0u8; BATCH_META_MAX];
        let flags = if turn_completed {
            BATCH_TURN_COMPLETED
        } else {
            0
        };
        let id = found.is_none().then_some(session.as_bytes());
        let meta_len = encode_batch_meta(&mut meta, uid, prev, flags, id, records);
        let mut payload = AppendPayload {
            meta: &meta[..meta_len],
            records,
            len: (meta_len + bodies) as u32,
        };
        if found.is_none() {
            self.next_uid = self.next_uid.wrapping_add(1);
        }
        let addr = self.write_prepared(SESSION_BATCH, &mut payload)?;
        let sector_seq = self.log.head_seq_of(addr);
        // A new session enters the table empty, at its first batch; then
        // the batch counts alike for a new session and an old one.
        let i = match found {
            Some(i) => i,
            None => {
                let s = Session {
                    uid,
                    id_hash: fnv1a32(session.as_bytes()),
                    id_len: session.len() as u8,
                    root: addr,
                    oldest: sector_seq,
                    ..Session::EMPTY
                };
                self.sessions
                    .push(s)
                    .map_err(|_| fail!(LogicBug, "session table full after check"))?;
                self.sessions.len() - 1
            }
        };
        let s = &mut self.sessions[i];
        s.head = addr;
        // (A new session's first batch is its root: no chain after it.)
        s.chain += u16::from(found.is_some());
        s.records = s.records.saturating_add(records.len() as u16);
        s.size = s.size.saturating_add(total as u32);
        s.dirty = true;
        let size = s.size;
        let mut out = 0;
        if turn_completed && size > self.config.session_size_limit_bytes {
            out = self.compact_turns_word(i)?;
        }
        Ok(Appended {
            compacted: out == COMPACTED,
            blocked: out == BLOCKED,
        })
    }

    /// ESP-Claw's turn-aware compaction of session `i`: [`COMPACTED`],
    /// [`BLOCKED`], or 0 if nothing was to drop (a word, in registers).
    #[inline(never)]
    fn compact_turns_word(&mut self, i: usize) -> Result<u32, Fail> {
        let uid = self.sessions[i].uid;
        let mut plan = PlanBuilder::<{ crate::turns::COMPACT_TOOL_TURNS }>::new();
        self.each_record(i, 1, &mut |_, kind, len| plan.push(kind, u64::from(len)))?;
        let plan = plan.finish();
        if plan.blocked(u64::from(self.config.session_size_limit_bytes)) {
            self.write_uid(SESSION_BLOCK, uid)?;
            let i = self.index_of(uid).ok_or(Fail::NOT_FOUND)?;
            let x = &mut self.sessions[i];
            x.flags |= FLAG_BLOCKED;
            x.dirty = true;
            return Ok(BLOCKED);
        }
        if plan.kept_record_count() == plan.record_count() {
            return Ok(0);
        }
        self.rewrite_base(i, Keep::Turns(&plan), None, Priority::Maintenance)?;
        Ok(COMPACTED)
    }

    /// Ameba-Claw's summary compaction: replaces every turn before the last
    /// `keep_turns` turns by `summary`. Returns `false` (and writes nothing)
    /// if fewer than two turns would be replaced.
    ///
    /// Power loss: atomic; before the new index commits the old history
    /// stands, after it the summarized one.
    pub fn compact_with_summary(
        &mut self,
        session: &str,
        keep_turns: u64,
        summary: Record<'_>,
    ) -> Result<bool, Error<F::Error>> {
        let r = self.compact_with_summary_inner(session, keep_turns, summary);
        self.surface(r)
    }

    /// [`compact_with_summary`](Self::compact_with_summary) with the engine's error.
    pub(crate) fn compact_with_summary_inner(
        &mut self,
        session: &str,
        keep_turns: u64,
        summary: Record<'_>,
    ) -> Result<bool, Fail> {
        self.check_id(session)?;
        if summary.body.is_empty() {
            return Err(fail!(InvalidInput, "the summary is empty"));
        }
        let i = self.find(session)?.ok_or(Fail::NOT_FOUND)?;
        let Some(cut) = self.summary_cut(i, keep_turns)? else {
            return Ok(false);
        };
        if cut.replaced_turns < crate::turns::SUMMARY_MIN_REPLACED_TURNS {
            return Ok(false);
        }
        self.rewrite_base(
            i,
            Keep::From(cut.record_index),
            Some(summary),
            Priority::Maintenance,
        )?;
        Ok(true)
    }

    /// Where a summary of session `i` would cut, keeping `keep_turns`
    /// turns: two passes over its records (turns, then the cut).
    fn summary_cut(
        &mut self,
        i: usize,
        keep_turns: u64,
    ) -> Result<Option<crate::turns::SummaryCut>, Fail> {
        let mut turns = TurnCursor::new();
        // Made again after each record of the first pass, so that it starts
        // the second knowing every turn.
        let mut finder = SummaryCutFinder::new(0, keep_turns);
        self.each_record(i, 2, &mut |pass, kind, len| {
            if pass == 0 {
                turns.advance(kind);
                finder = SummaryCutFinder::new(turns.turns(), keep_turns);
            } else {
                finder.push(kind, u64::from(len));
            }
        })?;
        Ok(finder.finish())
    }

    /// Calls `f(pass, kind, body length)` for every record of session `i`
    /// (in the table, read where it is) that is not damaged, in order, in
    /// each of `passes` passes over one chain.
    /// Out of line, so its cursor is off the caller's stack afterwards (a
    /// base written next).
    #[inline(never)]
    pub(super) fn each_record(
        &mut self,
        i: usize,
        passes: u8,
        f: &mut dyn FnMut(u8, RecordType, u32),
    ) -> Result<(), Fail> {
        let ring = self.log.ring();
        let mut recs = Records::EMPTY;
        recs.start(&mut self.log.io(), &self.sessions[i], Some(ring))?;
        for pass in 0..passes {
            self.walk_records(&mut recs, pass, f)?;
        }
        Ok(())
    }

    /// Walks `recs` from where it is to its end, giving `f` `pass` and each
    /// sound record's kind and body length, and rewinds it.
    #[inline(never)]
    pub(super) fn walk_records(
        &mut self,
        recs: &mut Records,
        pass: u8,
        f: &mut dyn FnMut(u8, RecordType, u32),
    ) -> Result<(), Fail> {
        while let Some(r) = recs.next(&mut self.log.io())? {
            if !r.damaged {
                f(pass, r.kind, r.len);
            }
        }
        recs.rewind();
        Ok(())
    }

    /// Deletes a session and all its records.
    ///
    /// Power loss: atomic; the deletion commits with one small record.
    pub fn delete_session(&mut self, session: &str) -> Result<(), Error<F::Error>> {
        let r = self.delete_session_inner(session);
        self.surface(r)
    }

    /// [`delete_session`](Self::delete_session) with the engine's error.
    pub(crate) fn delete_session_inner(&mut self, session: &str) -> Result<(), Fail> {
        let i = self.find_known(session)?;
        self.delete_uid(self.sessions[i].uid)?;
        Ok(())
    }

    /// Deletes every session. Returns how many were deleted.
    ///
    /// Power loss: each session's deletion is atomic on its own.
    pub fn clear_sessions(&mut self) -> Result<usize, Error<F::Error>> {
        let r = self.clear_sessions_inner();
        self.surface(r)
    }

    /// [`clear_sessions`](Self::clear_sessions) with the engine's error.
    pub(crate) fn clear_sessions_inner(&mut self) -> Result<usize, Fail> {
        let mut n = 0;
        loop {
            let uid = match self.sessions.last() {
                Some(s) => s.uid,
                // (A deletion may write a full checkpoint, a new directory:
                // each cold one is looked for from the start.)
                None => {
                    let mut c = super::directory::ColdCursor::new(&self.dir);
                    match self.cold_step(&mut c)? {
                        0 => break,
                        _ => c.cur.uid,
                    }
                }
            };
            self.delete_uid(uid)?;
            n += 1;
        }
        Ok(n)
    }

    /// Deletes the session with `uid`: its deletion record, then its entry
    /// (a full checkpoint first if RAM could not note another deletion).
    fn delete_uid(&mut self, uid: u32) -> Result<(), Fail> {
        self.room_for_deletion()?;
        if let Err(e) = self.write_uid(SESSION_DELETE, uid) {
            if e.kind() != Kind::Full {
                return Err(e);
            }
            // The collection could not make room: a deletion may still go
            // where maintenance's room is kept (`Priority::Deletion`).
            let mut payload = Slices([&uid.to_le_bytes()[..]]);
            self.write(SESSION_DELETE, &mut payload, Priority::Deletion)?;
        }
        // (As the deletion found it: making room may have relocated it.)
        #[cfg(feature = "sector-table")]
        let dying = self.index_of(uid).map(|i| self.sessions[i]);
        if !self.remove_uid(uid) {
            return Err(fail!(LogicBug, "a deletion RAM could not note"));
        }
        // Its batches are dead (`store/dead.rs`).
        #[cfg(feature = "sector-table")]
        if let Some(s) = dying {
            self.session_died(&s);
        }
        Ok(())
    }

    /// Writes a record of kind `k` that holds only a session's uid (a
    /// deletion, a block).
    #[inline(never)]
    fn write_uid(&mut self, k: u8, uid: u32) -> Result<u32, Fail> {
        let mut payload = Slices([&uid.to_le_bytes()[..]]);
        self.write(k, &mut payload, Priority::Maintenance)
    }
}

/// What [`Store::compact_turns_word`] did: [`Appended::compacted`].
const COMPACTED: u32 = 1;
/// What [`Store::compact_turns_word`] did: [`Appended::blocked`].
const BLOCKED: u32 = 2;

struct AppendPayload<'a, 'r> {
    meta: &'a [u8],
    records: &'a [Record<'r>],
    /// The meta's length and the bodies'.
    len: u32,
}

impl<F: NorFlash> Payload<F> for AppendPayload<'_, '_> {
    fn len(&self) -> u32 {
        self.len
    }

    fn fill(&mut self, _io: &mut Io<'_, F>, offset: u32, out: &mut [u8]) -> Result<(), Fail> {
        let parts = core::iter::once(self.meta).chain(self.records.iter().map(|r| r.body));
        copy_from_parts(parts, offset, out);
        Ok(())
    }
}

/// [`Store::session_id`] on the log alone, so that `out` may be in the work
/// area (a base being written keeps its session's id there, off the stack).
#[inline(always)]
pub(super) fn session_id_in<F: NorFlash>(
    log: &mut crate::log::Log<F>,
    s: &Session,
    out: &mut [u8; MAX_SESSION_ID_BYTES],
) -> Result<Option<usize>, Fail> {
    let n = session_id_word(log, s, out)?;
    Ok((n != usize::MAX).then_some(n))
}

/// [`session_id_in`] as a word, `usize::MAX` for `None` (no id is that
/// long): a `Result<usize, _>` comes back in registers.
#[inline(never)]
fn session_id_word<F: NorFlash>(
    log: &mut crate::log::Log<F>,
    s: &Session,
    out: &mut [u8; MAX_SESSION_ID_BYTES],
) -> Result<usize, Fail> {
    let sound = |id: &[u8]| {
        id.len() == usize::from(s.id_len)
            && fnv1a32(id) == s.id_hash
            && core::str::from_utf8(id).is_ok()
    };
    match read_id(&mut log.io(), s, out) {
        Ok(n) if sound(&out[..n]) => return Ok(n),
        Ok(_) => {}
        Err(e) if e.kind() == Kind::Corrupted => {}
        Err(e) => return Err(e),
    }
    if s.root_is_base {
        return Ok(usize::MAX);
    }
    Ok(match log.start_name(s.root, Some(s.uid), out)? {
        Some((_, n)) if sound(&out[..n]) => n,
        _ => usize::MAX,
    })
}
