//! The session directory: sessions beyond the RAM table
//! (`docs/FORMAT.md`, "Checkpoint" and "Mount").
//!
//! Owns: where a session is found that the RAM table (`Store<_, N>`) does
//! not hold. The table is a working set; every session lives on flash, and
//! the directory is the newest full checkpoint with the deltas written after
//! it (`checkpoint.rs`), which list every session at the time each was
//! written. A session in the table is *hot*; one the directory holds and the
//! table does not is *cold*. The table lets a hot session go (it turns cold)
//! only when it is *clean*: unchanged since the checkpoint that holds its
//! newest version. When every entry is changed and a slot is needed, a
//! checkpoint is written first, which makes them clean.
//!
//! What RAM keeps of the cold sessions, in a few words: which cold sessions
//! have their newest version in a delta (`delta_cold`, bounded; a full
//! checkpoint empties it), the deletions since the full checkpoint
//! (`Store::deleted_since_full`, bounded likewise), the number of sessions
//! the full checkpoint lists and the uid it was written at, and bounds on
//! the cold sessions' oldest sector and largest index (for garbage
//! collection and the reserve). The number of cold sessions follows from
//! those ([`cold_count`](Store::cold_count)): every live session whose uid
//! is below the full checkpoint's next uid is in it.
//!
//! A cold session is found by reading the directory in one pass: the deltas
//! newest first, for the sessions of `delta_cold`, then the full checkpoint,
//! skipping the sessions that are hot, deleted or have a newer version in a
//! delta. Garbage collection brings the cold sessions nearest the tail into
//! the table before it weighs or makes a release
//! ([`warm`](Store::warm)), in place of clean ones farther from it.
//!
//! Invariants: a session is hot or cold, never both; a clean hot session's
//! newest version is in the directory where its `dir` says; `delta_cold`
//! and the deletions are disjoint from the table and each other; the number
//! of changed sessions never exceeds the table, so a mount, which replays
//! the changes since the newest checkpoint, can hold them all.
//!
//! Power loss: the directory is only read here. A checkpoint written to free
//! a slot is an ordinary checkpoint (see `checkpoint.rs`); until it commits
//! the previous directory stands, and a mount replays the changes after it.

use core::borrow::BorrowMut;

use embedded_storage::nor_flash::NorFlash;
use heapless::Vec;

use super::checkpoint::{CKPT_DELTA, CKPT_DELTA_WASTE, CKPT_FULL_WASTE};
use super::checkpoint::{CKPT_DELTA_FIXED, CKPT_FIXED, CKPT_WASTE, DELTAS_PER_FULL};
use super::{Priority, Store, Work};
use crate::error::{fail, Fail};
use crate::layout::NO_ADDR;
use crate::layout::{u16_at, u32_at, CHUNK_HEADER_LEN};
use crate::log::Io;
use crate::naming::fnv1a32;
use crate::session::{Session, DIR_DELTA, DIR_FULL, DIR_STUB, DIR_STUB_BASE};
use crate::session::{MAX_SESSION_ID_BYTES, SESSION_ENCODED};

/// Cold sessions whose newest version is in a delta checkpoint that RAM
/// can name; more make the next checkpoint that frees a slot a full one.
pub(crate) const DELTA_COLD_MAX: usize = 32;

/// Checkpoints in the directory: the full one and its deltas.
const CHAIN_CAP: usize = DELTAS_PER_FULL as usize + 1;

/// What RAM keeps of the directory.
#[derive(Debug, Clone)]
pub(crate) struct Dir {
    /// The full checkpoint, then each delta written after it, oldest first.
    chain: [u32; CHAIN_CAP],
    len: u8,
    /// Sessions the full checkpoint lists.
    full_count: u32,
    /// The next uid when it was written: every session made before it and
    /// still live is in it.
    full_next_uid: u32,
    /// Cold sessions whose newest version is in a delta.
    delta_cold: Vec<u32, DELTA_COLD_MAX>,
    /// At most the oldest sector sequence of any cold session (`u32::MAX`
    /// when none may be older than anything).
    pub(super) cold_oldest: u32,
    /// At least the largest index a compaction of a cold session writes.
    pub(super) cold_index_max: u32,
    /// A session went cold since the full checkpoint was set (in this
    /// store, or in the mount that loaded it), or the checkpoint listed
    /// one: a mount of the flash may hold cold sessions that this store
    /// brought back into its table.
    pub(super) cold_met: bool,
}

impl Dir {
    /// No directory: every session is in the table.
    pub(crate) const EMPTY: Dir = Dir {
        chain: [0; CHAIN_CAP],
        len: 0,
        full_count: 0,
        full_next_uid: 0,
        delta_cold: Vec::new(),
        cold_oldest: u32::MAX,
        cold_index_max: 0,
        cold_met: false,
    };

    /// A full checkpoint at `addr` listing `count` sessions, written when
    /// the next uid was `next_uid`, is the directory now.
    pub(super) fn set_full(&mut self, addr: u32, count: u32, next_uid: u32) {
        self.chain[0] = addr;
        self.len = 1;
        self.full_count = count;
        self.full_next_uid = next_uid;
        self.delta_cold.clear();
        self.cold_met = false;
    }

    /// A delta at `addr` follows the directory's checkpoints. `false` if
    /// the chain is longer than a full checkpoint allows (a logic error:
    /// the writer makes the next one full first).
    pub(super) fn push_delta(&mut self, addr: u32) -> bool {
        match (self.len as usize) < CHAIN_CAP && self.len > 0 {
            true => {
                self.chain[self.len as usize] = addr;
                self.len += 1;
                true
            }
            false => false,
        }
    }

    /// The full checkpoint, then each delta after it.
    pub(super) fn chain(&self) -> &[u32] {
        &self.chain[..self.len as usize]
    }

    /// Forgets the directory: the table holds every session (mount, when
    /// what the checkpoints say cannot be followed).
    pub(super) fn clear(&mut self) {
        *self = Dir::EMPTY;
    }

    /// Whether `uid` is cold with its newest version in a delta.
    fn in_delta_cold(&self, uid: u32) -> bool {
        self.delta_cold.contains(&uid)
    }

    /// Drops `uid` from the delta-version cold sessions (it is hot or
    /// deleted now).
    pub(super) fn forget(&mut self, uid: u32) {
        if let Some(k) = self.delta_cold.iter().position(|&u| u == uid) {
            self.delta_cold.swap_remove(k);
        }
    }

    /// Notes a session that turned cold: its sector and index bounds, and
    /// where its newest version is. `false` if it is a delta version and
    /// RAM cannot name another (the caller keeps it hot).
    fn note_cold(&mut self, s: &Session) -> bool {
        if s.dir == DIR_DELTA && self.delta_cold.push(s.uid).is_err() {
            return false;
        }
        self.note_unloaded(s);
        true
    }

    /// Notes the sector and index bounds of a cold session: one met while
    /// reading the directory (mount), or one that turned cold.
    pub(super) fn note_unloaded(&mut self, s: &Session) {
        self.cold_met = true;
        self.cold_oldest = self.cold_oldest.min(s.oldest);
        self.cold_index_max = self.cold_index_max.max(super::gc::index_len(s));
    }
}

/// What a lookup in the directory wants.
#[derive(Clone, Copy)]
pub(super) enum Want<'a> {
    /// The session with this name.
    Id(&'a str),
    /// The session with this uid.
    Uid(u32),
}

/// A pass over the cold sessions of the directory, one entry at a time:
/// first the delta versions (the deltas newest first, each session of
/// `delta_cold` at its newest), then the full checkpoint's entries that
/// are not hot, deleted or in a delta.
pub(super) struct ColdCursor {
    /// Checkpoints of the chain left to read, counted from the newest
    /// delta down to the full one (index 0), plus one: 0 is done.
    next_k: u8,
    /// The checkpoint being read (chain index).
    k: u8,
    /// Stream address of the next entry, and entries left in it.
    at: u32,
    left: u32,
    /// Delta-version sessions already met (their newest version).
    seen: Vec<u32, DELTA_COLD_MAX>,
    /// The session the pass gave last: a cold one ([`ColdCursor::next`]),
    /// or, in a pass over every session, one of the table's
    /// (`Store::next_session_word`). The cursor only writes it, and reads
    /// each entry into it: after a step that gave none (the end), it may
    /// hold one the pass went past.
    pub cur: Session,
}

/// The RAM state a [`ColdCursor`] reads past.
pub(super) struct DirView<'a> {
    pub dir: &'a Dir,
    pub hot: &'a [Session],
    pub deleted: &'a [u32],
}

impl DirView<'_> {
    /// Whether the full checkpoint's entry for `uid` is the session's
    /// newest version of a cold session.
    fn cold_in_full(&self, uid: u32) -> bool {
        !self.hot.iter().any(|s| s.uid == uid)
            && !self.deleted.contains(&uid)
            && !self.dir.in_delta_cold(uid)
    }
}

impl ColdCursor {
    /// A pass from the start.
    // Out of line: eight callers.
    #[inline(never)]
    pub(super) fn new(dir: &Dir) -> Self {
        ColdCursor {
            next_k: dir.len,
            k: 0,
            at: 0,
            left: 0,
            seen: Vec::new(),
            cur: Session::EMPTY,
        }
    }

    /// The next cold session, in [`cur`](Self::cur), and where its version
    /// is ([`DIR_FULL`] or [`DIR_DELTA`]); 0 at the end of the pass. (A
    /// word and the session in place: nothing large moves through a
    /// `Result`.)
    pub(super) fn next<F: NorFlash>(
        &mut self,
        io: &mut Io<'_, F>,
        v: &DirView<'_>,
    ) -> Result<u8, Fail> {
        loop {
            if self.left == 0 {
                if self.next_k == 0 {
                    return Ok(0);
                }
                self.next_k -= 1;
                // Deltas (chain indices len-1 down to 1) first, then the
                // full checkpoint (index 0); no delta is read when no cold
                // session has its version in one.
                self.k = self.next_k;
                if self.k > 0 && v.dir.delta_cold.is_empty() {
                    continue;
                }
                self.at = sessions_of(io, v.dir.chain[self.k as usize], &mut self.left)?;
                continue;
            }
            self.left -= 1;
            // Read into `cur` in place: it is the caller's only once a step
            // gives it.
            if read_entry(io, &mut self.at, &mut self.cur)? == 0 {
                continue;
            }
            let s = &self.cur;
            let dir = if self.k == 0 {
                match v.cold_in_full(s.uid) {
                    true => DIR_FULL,
                    false => 0,
                }
            } else if v.dir.in_delta_cold(s.uid) && !self.seen.contains(&s.uid) {
                // (`seen` holds as many as `delta_cold` can.)
                let _ = self.seen.push(s.uid);
                DIR_DELTA
            } else {
                0
            };
            if dir != 0 {
                return Ok(dir);
            }
        }
    }
}

/// The clean session the table lets go first: the one whose oldest sector
/// is farthest from the tail, never `pinned` (the one the operation in
/// progress works on); with `delta`, one whose version is in a delta too
/// (when RAM can name it as cold).
fn victim_in(sessions: &[Session], dir: &Dir, pinned: u32, delta: bool) -> Option<usize> {
    let room = delta && !dir.delta_cold.is_full();
    // The best so far and its oldest sector.
    let mut best: Option<usize> = None;
    let mut far = 0;
    for (i, s) in sessions.iter().enumerate() {
        let ok = !s.dirty
            && s.uid != pinned
            && (s.dir == DIR_FULL || s.dir == DIR_DELTA && room)
            && dir.len > 0;
        if ok && (best.is_none() || far < s.oldest) {
            best = Some(i);
            far = s.oldest;
        }
    }
    best
}

/// Lets the clean session at `i` go cold.
fn evict_in<const N: usize>(sessions: &mut Vec<Session, N>, dir: &mut Dir, i: usize) {
    if dir.note_cold(&sessions[i]) {
        sessions.swap_remove(i);
    }
}

/// A free slot in a table being loaded (mount): a clean session goes
/// cold. `false` if every one is changed.
pub(super) fn free_slot<const N: usize>(sessions: &mut Vec<Session, N>, dir: &mut Dir) -> bool {
    if !sessions.is_full() {
        return true;
    }
    match victim_in(sessions, dir, crate::layout::NO_ADDR, true) {
        Some(i) => {
            evict_in(sessions, dir, i);
            !sessions.is_full()
        }
        None => false,
    }
}

/// Where checkpoint `addr`'s session entries start (a stream address); how
/// many it has into `count` (a word and a store: nothing moves through a
/// `Result` in memory).
pub(super) fn sessions_of<F: NorFlash>(
    io: &mut Io<'_, F>,
    addr: u32,
    count: &mut u32,
) -> Result<u32, Fail> {
    let mut fixed = [0u8; CKPT_FIXED];
    io.read_stream(addr + CHUNK_HEADER_LEN, &mut fixed)?;
    // Past the first version: 1 a delta (its part), 2 the cut waste, 3
    // both; each part is 8 bytes. (Anything else is no checkpoint's, and
    // has none.)
    const _: () = assert!(CKPT_WASTE == 8 && CKPT_DELTA_FIXED == 8);
    const _: () = assert!(CKPT_DELTA == 2 && CKPT_FULL_WASTE == 3 && CKPT_DELTA_WASTE == 4);
    let past = fixed[0].wrapping_sub(1);
    // (4, 6 and 8: a full one of format 10, CKPT_FULL_TABLE,
    // CKPT_FULL_DEAD or CKPT_FULL_TABLE_DEAD, with the waste part; 7 a
    // delta of format 10, CKPT_DELTA_DEAD, with both parts.)
    let extra = match past {
        0..4 => 8 * usize::from((past >> 1) + (past & 1)),
        4 | 6 | 8 if cfg!(feature = "sector-table") => 8,
        7 if cfg!(feature = "sector-table") => 16,
        _ => 0,
    };
    *count = u32::from(u16_at(&fixed, 2));
    Ok(io.stream_advance(addr + CHUNK_HEADER_LEN, (CKPT_FIXED + extra) as u32))
}

/// Reads the checkpoint's session entry at stream address `*at` into `out`
/// and moves `at` past it: 1, or 0 (`out` unchanged) if the entry does not
/// decode (a word; the session in place).
#[inline(never)]
fn read_entry<F: NorFlash>(
    io: &mut Io<'_, F>,
    at: &mut u32,
    out: &mut Session,
) -> Result<u32, Fail> {
    let mut b = [0u8; SESSION_ENCODED];
    io.read_stream(*at, &mut b)?;
    *at = io.stream_advance(*at, SESSION_ENCODED as u32);
    Ok(match Session::decode(&b) {
        Some(s) => {
            *out = s;
            1
        }
        None => 0,
    })
}

/// The session count of the checkpoint at `addr` and the next uid it was
/// written at.
pub(super) fn count_and_next_uid<F: NorFlash>(
    io: &mut Io<'_, F>,
    addr: u32,
) -> Result<(u32, u32), Fail> {
    let mut fixed = [0u8; CKPT_FIXED];
    io.read_stream(addr + CHUNK_HEADER_LEN, &mut fixed)?;
    Ok((u32::from(u16_at(&fixed, 2)), u32_at(&fixed, 4)))
}

impl<F: NorFlash, const MAX_SESSIONS: usize, W: BorrowMut<Work>> Store<F, MAX_SESSIONS, W> {
    /// Sessions the directory holds that the table does not: the full
    /// checkpoint's, less those hot, deleted or with a newer version in a
    /// delta, plus those whose newest version is in a delta.
    pub(super) fn cold_count(&self) -> u32 {
        let d = &self.dir;
        let f = d.full_next_uid;
        // The hot, deleted and delta-version sessions below `f`, in one
        // count.
        let mut taken = 0u32;
        for s in self.sessions.iter() {
            taken += u32::from(s.uid < f);
        }
        for &u in self.deleted_since_full.iter() {
            taken += u32::from(u < f);
        }
        for &u in d.delta_cold.iter() {
            taken += u32::from(u < f);
        }
        (d.full_count + d.delta_cold.len() as u32).saturating_sub(taken)
    }

    /// The next cold session of a pass, in `c.cur`, and where its version
    /// is; 0 at the end ([`ColdCursor::next`]).
    #[inline(never)]
    pub(super) fn cold_step(&mut self, c: &mut ColdCursor) -> Result<u8, Fail> {
        let view = DirView {
            dir: &self.dir,
            hot: &self.sessions,
            deleted: &self.deleted_since_full,
        };
        c.next(&mut self.log.io(), &view)
    }

    /// The next session of a pass over every one, in `cold.cur` (which the
    /// pass only writes): the table's (counted by `i`), then the
    /// directory's others (`cold`). A word: 1, or 0 at the end (see
    /// `Io::chunk_crc_ok_word`); the session in place.
    #[inline(never)]
    pub(super) fn next_session_word(
        &mut self,
        i: &mut usize,
        cold: &mut ColdCursor,
    ) -> Result<u32, Fail> {
        if let Some(s) = self.sessions.get(*i) {
            *i += 1;
            cold.cur = *s;
            return Ok(1);
        }
        Ok(u32::from(self.cold_step(cold)? != 0))
    }

    /// Finds a cold session in the directory (one pass) and brings it into
    /// the table; its index there.
    #[inline(always)]
    pub(super) fn find_cold(
        &mut self,
        want: Want<'_>,
        may_write: bool,
    ) -> Result<Option<usize>, Fail> {
        let i = self.find_cold_word(want, may_write)?;
        Ok((i != usize::MAX).then_some(i))
    }

    /// [`Self::find_cold`] as a word, `usize::MAX` for `None` (no table
    /// index): a `Result<usize, _>` comes back in registers.
    #[inline(never)]
    fn find_cold_word(&mut self, want: Want<'_>, may_write: bool) -> Result<usize, Fail> {
        if self.dir.len == 0 || self.cold_count() == 0 {
            return Ok(usize::MAX);
        }
        if let Want::Uid(uid) = want {
            // Only a session below the full checkpoint's next uid, or one
            // with its version in a delta, can be cold. (The one caller
            // asks for a uid a pass over the cold sessions gave: never one
            // in the table.)
            if !self.may_be_cold(uid) {
                return Ok(usize::MAX);
            }
        }
        let (hash, len) = match want {
            Want::Id(id) => (fnv1a32(id.as_bytes()), id.len()),
            Want::Uid(_) => (0, 0),
        };
        let mut c = ColdCursor::new(&self.dir);
        loop {
            let dir = self.cold_step(&mut c)?;
            if dir == 0 {
                return Ok(usize::MAX);
            }
            let s = &c.cur;
            let hit = match want {
                Want::Uid(uid) => s.uid == uid,
                Want::Id(id) => {
                    s.id_hash == hash
                        && usize::from(s.id_len) == len
                        && self.id_matches(s, id.as_bytes())?
                }
            };
            if hit {
                return self.admit(c.cur, dir, may_write);
            }
        }
    }

    /// Whether the name of `s` on flash is `id` (corrected when damage at
    /// rest allows it).
    fn id_matches(&mut self, s: &Session, id: &[u8]) -> Result<bool, Fail> {
        let mut buf = [0u8; MAX_SESSION_ID_BYTES];
        Ok(
            match super::sessions::session_id_in(&mut self.log, s, &mut buf)? {
                Some(n) => &buf[..n] == id,
                None => false,
            },
        )
    }

    /// Puts the cold session `s`, whose newest version is where `dir` says,
    /// in the table, making room; its index there.
    pub(super) fn admit(&mut self, s: Session, dir: u8, may_write: bool) -> Result<usize, Fail> {
        let full = self.dir.chain().first().copied();
        // A session that leaves the delta versions RAM names makes room
        // there for the one that goes cold in its place.
        if self.sessions.is_full() && self.victim(true).is_none() && self.dir.in_delta_cold(s.uid) {
            self.dir.forget(s.uid);
            match self.victim(true) {
                Some(i) => self.evict(i),
                None => {
                    let _ = self.dir.delta_cold.push(s.uid);
                }
            }
        }
        self.make_slot(may_write)?;
        // The checkpoint written for a slot made room first, and the
        // collection that may take brings cold sessions in (and relocates
        // them): then the table's entry is the newest.
        if let Some(i) = self.index_of(s.uid) {
            return Ok(i);
        }
        // A full checkpoint written for the slot holds it now.
        let dir = match self.dir.chain().first().copied() == full {
            true => dir,
            false => DIR_FULL,
        };
        if !self.take_in(&s, dir) {
            return Err(fail!(LogicBug, "session table full after a slot was made"));
        }
        Ok(self.sessions.len() - 1)
    }

    /// Puts the cold session `s` in the table, clean, its newest version
    /// where `dir` says; `false` if the table is full (nothing changes
    /// then but that RAM no longer names it as a delta version).
    #[inline(never)]
    fn take_in(&mut self, s: &Session, dir: u8) -> bool {
        self.dir.forget(s.uid);
        let mut s = *s;
        s.dirty = false;
        s.dir = dir;
        self.sessions.push(s).is_ok()
    }

    /// A free slot in the table: a clean session goes cold (the one
    /// farthest from the tail); if every one is changed, a checkpoint is
    /// written first (`may_write`; a mount cannot, and answers
    /// [`Error::TooManySessions`]).
    pub(super) fn make_slot(&mut self, may_write: bool) -> Result<(), Fail> {
        for attempt in 0..3 {
            if !self.sessions.is_full() {
                return Ok(());
            }
            if let Some(i) = self.victim(true) {
                self.evict(i);
                continue;
            }
            if !may_write || attempt == 2 {
                break;
            }
            let p = match self.in_gc {
                true => Priority::Gc,
                false => Priority::Maintenance,
            };
            match attempt {
                0 => self.clean_table(p)?,
                _ => self.write_full_checkpoint(p)?,
            }
        }
        if self.sessions.is_full() {
            return Err(self.log.parked().too_many_sessions(MAX_SESSIONS));
        }
        Ok(())
    }

    /// The clean session the table lets go first ([`victim_in`]).
    fn victim(&self, delta: bool) -> Option<usize> {
        victim_in(&self.sessions, &self.dir, self.pinned, delta)
    }

    /// Writes a checkpoint that frees a slot of the table: a delta that
    /// makes its changed sessions clean (each then has its version there)
    /// when there are some and RAM can name one more as cold, else (or
    /// without a directory) a full one, after which every session can go.
    pub(super) fn clean_table(&mut self, p: Priority) -> Result<(), Fail> {
        self.write_checkpoint_as(p, self.cleans_by_delta())
    }

    /// Whether the checkpoint [`clean_table`](Self::clean_table) writes may
    /// be a delta: there are changed sessions and RAM can name one more as
    /// cold. (Without a directory, RAM cannot let any session go before a
    /// full checkpoint makes one.)
    pub(super) fn cleans_by_delta(&self) -> bool {
        self.dir.len > 0 && self.dirty_count() > 0 && !self.dir.delta_cold.is_full()
    }

    /// A free slot in the table without writing: a clean session goes
    /// cold if it is full. `false` if every one is changed.
    pub(super) fn take_slot(&mut self) -> bool {
        if !self.sessions.is_full() {
            return true;
        }
        match self.victim(true) {
            Some(i) => {
                self.evict(i);
                !self.sessions.is_full()
            }
            None => false,
        }
    }

    /// Lets the clean session at `i` go cold ([`evict_in`]).
    fn evict(&mut self, i: usize) {
        evict_in(&mut self.sessions, &mut self.dir, i);
    }

    /// Learns the oldest sector and the largest index of the cold sessions
    /// exactly, in one pass over the directory, bringing none in.
    #[inline(always)]
    pub(super) fn learn_cold(&mut self) -> Result<(), Fail> {
        self.pass_cold(false)
    }

    /// Brings the cold sessions nearest the tail into the table, in place
    /// of clean ones whose oldest sector is farther from it, and learns the
    /// oldest sector of the cold sessions left exactly. One pass over the
    /// directory; nothing is written.
    #[inline(always)]
    pub(super) fn warm(&mut self) -> Result<(), Fail> {
        self.pass_cold(true)
    }

    /// [`warm`](Self::warm) (`bring`), or [`learn_cold`](Self::learn_cold):
    /// one pass over the cold sessions, each noted as cold unless brought
    /// in. (Only `warm` passes up a directory with no cold session.)
    #[inline(never)]
    fn pass_cold(&mut self, bring: bool) -> Result<(), Fail> {
        self.dir.cold_oldest = u32::MAX;
        self.dir.cold_index_max = 0;
        if bring && (self.dir.len == 0 || self.cold_count() == 0) {
            return Ok(());
        }
        let mut c = ColdCursor::new(&self.dir);
        loop {
            let dir = self.cold_step(&mut c)?;
            if dir == 0 {
                return Ok(());
            }
            let s = &c.cur;
            // While the deltas are read, only a session whose version is
            // in the full checkpoint may go cold: the pass has read past
            // the newer versions of the others.
            let delta_phase = c.k > 0;
            let slot = bring
                && match self.sessions.is_full() {
                    false => true,
                    true => match self.victim(!delta_phase) {
                        Some(i) if self.sessions[i].oldest > s.oldest => {
                            self.evict(i);
                            !self.sessions.is_full()
                        }
                        _ => false,
                    },
                };
            if slot {
                self.take_in(s, dir);
            } else {
                self.dir.note_unloaded(s);
            }
        }
    }

    /// Whether `uid`, not in the table, may be a cold session of the
    /// directory.
    pub(super) fn may_be_cold(&self, uid: u32) -> bool {
        self.dir.len > 0
            && (uid < self.dir.full_next_uid && !self.deleted_since_full.contains(&uid)
                || self.dir.in_delta_cold(uid))
    }

    /// Mount: fills in the stubs the scan made for cold sessions (see
    /// `replay.rs`, `warm_uid`) from the directory, in one pass (its deltas
    /// newest first, then the full checkpoint: the first entry met is a
    /// session's newest). A stub's batches add to the entry; a stub's base
    /// replaces it if it names the same session. A stub the directory does
    /// not hold (damage at rest) is dropped with what it gathered.
    pub(super) fn resolve_stubs(&mut self) -> Result<(), Fail> {
        let stub = |s: &Session| matches!(s.dir, DIR_STUB | DIR_STUB_BASE);
        // Stubs left: each entry that resolves one makes it a session.
        let mut stubs = self.sessions.iter().filter(|s| stub(s)).count();
        if stubs == 0 {
            return Ok(());
        }
        // Newest delta first, the full checkpoint last.
        for k in (0..self.dir.len as usize).rev() {
            let mut count = 0;
            let mut at = sessions_of(&mut self.log.io(), self.dir.chain[k], &mut count)?;
            let loc = if k == 0 { DIR_FULL } else { DIR_DELTA };
            // (Each entry read replaces it whole before it is used.)
            let mut e = Session::EMPTY;
            while count > 0 {
                count -= 1;
                if stubs == 0 {
                    return Ok(());
                }
                if read_entry(&mut self.log.io(), &mut at, &mut e)? == 0 {
                    continue;
                }
                let Some(x) = self.sessions.iter_mut().find(|x| x.uid == e.uid && stub(x)) else {
                    continue;
                };
                let batches = x.dir == DIR_STUB;
                if batches {
                    if x.head != NO_ADDR {
                        e.head = x.head;
                    }
                    e.records = e.records.saturating_add(x.records);
                    e.size = e.size.saturating_add(x.size);
                    e.chain = e.chain.saturating_add(x.chain);
                    e.flags |= x.flags;
                    // A moves record after the entry said where the
                    // session's oldest byte is now.
                    #[cfg(feature = "sector-table")]
                    if x.oldest != u32::MAX {
                        e.oldest = x.oldest;
                    }
                }
                // (A base that names another session is damage: the
                // directory's entry stands.)
                if batches || x.id_hash != e.id_hash || x.id_len != e.id_len {
                    *x = e;
                }
                x.dirty = true;
                x.dir = loc;
                stubs -= 1;
            }
        }
        // Stubs the directory does not hold.
        self.sessions.retain(|s| !stub(s));
        Ok(())
    }

    /// Puts the table in uid order (an insertion sort: the table is small
    /// and mostly in order already) while it does not hold every session,
    /// so that what garbage collection decides does not depend on the order
    /// sessions came into it.
    pub(super) fn sort_table(&mut self) {
        // (A table that holds every session was filled the same way by a
        // running store and a remounted one: left in its order.)
        if self.cold_count() == 0 {
            return;
        }
        let t = self.sessions.as_mut_slice();
        for i in 1..t.len() {
            let mut j = i;
            while j > 0 && t[j - 1].uid > t[j].uid {
                t.swap(j - 1, j);
                j -= 1;
            }
        }
    }

    /// Whether any cold session may still use sector `seq` or an older one.
    pub(super) fn cold_reaches(&self, seq: u32) -> bool {
        self.dir.cold_oldest <= seq && self.cold_count() > 0
    }
}
