//! The dry run of garbage collection (`docs/DESIGN.md`, "Room"): before a
//! write collects anything, whether releasing tail sectors one after
//! another can make its room at a bounded copying cost (an estimate from
//! RAM), and whether that collection completes (the releases replayed as
//! the relocation makes them, reading the indexes of the sessions it would
//! relocate in part). A write it turns away is refused with
//! [`Full`](crate::Error::Full) having written and erased nothing.
//!
//! Owns: the price estimate, and the replay of [`relocate`](Store::relocate)'s
//! choices (the checkpoint, objects, memory, and each session whole or in
//! part, as `relocate_hot` takes them) over a model of the head's room
//! ([`Head`]).
//!
//! Invariants: it writes nothing and changes no state but the order of the
//! session table (uid order, as a remounted store has it) and, when the run
//! would meet a cold session, which sessions the table holds (`warm`).
//!
//! Power loss: nothing is written; a store remounted after a cut decides
//! from what its mount found.

use core::borrow::BorrowMut;

use embedded_storage::nor_flash::NorFlash;

#[cfg(not(feature = "sector-table"))]
use super::gc::base_len;
use super::gc::{first_reach, framed, index_len, minimal_relocation, COPY_LIMIT};
use super::objects::OBJ_FIXED;
use super::{Store, Work};
use crate::error::Fail;
use crate::layout::CHUNK_HEADER_LEN;
#[cfg(feature = "sector-table")]
use crate::session::{Session, CHAIN_MAX, MOVES_FIXED, MOVES_MAX};

impl<F: NorFlash, const MAX_SESSIONS: usize, W: BorrowMut<Work>> Store<F, MAX_SESSIONS, W> {
    /// A dry run of collection: whether releasing tail sectors one after
    /// another can leave room for `len` payload bytes beside `reserve` free
    /// sectors at a bounded copying cost ([`priced`](Self::priced)), and
    /// whether the collection then completes ([`completes`](Self::completes)).
    /// A write either gets its room or is refused having written and erased
    /// nothing.
    ///
    /// After a power cut, until the ring collects what the cut spent
    /// ([`cut_waste_now`](Self::cut_waste_now)), the price is not held to
    /// the copy limit. Whether cleaning is cheap
    /// enough depends on how the collections before were split: the uncut
    /// store may have weighed a run of live tail sectors together with the
    /// cheap ones before them, in one collection that the cut broke in two,
    /// and the recovered store, its cheap sectors spent, would meet the
    /// live ones alone and refuse what the uncut store took. The limit is
    /// lifted for less than one pass of the ring (the tail reaches the
    /// cut's sectors within it), in which a record's body is copied at most
    /// once, so it costs at most the copying one pass of collection does.
    ///
    /// `None` if the run would meet a cold session (one the table does not
    /// hold): what it costs is not known in RAM.
    #[inline(never)]
    fn collectable(&mut self, len: u32, reserve: u32) -> Result<Option<bool>, Fail> {
        match self.priced(len, reserve, self.cut_waste_now().0 == 0) {
            Some(true) => self.completes(len, reserve),
            other => Ok(other),
        }
    }

    /// The price of the collection [`collectable`](Self::collectable) asks
    /// for, estimated from RAM alone: whether the releases make the room
    /// copying at most [`COPY_LIMIT`] bytes for each byte of room they make
    /// (if `limited`). Each release gains a sector and costs the copies of
    /// what still lives in it: the checkpoint and each object when the
    /// tail reaches their sector, memory's new index with a sector of
    /// items, and each session reaching into it, once (whole when that
    /// takes at most half the room; else its index and the bodies of as
    /// many sectors as half the room holds; with relocation in part, a
    /// moves record or its index, its bodies left to `completes`). An
    /// estimate: the collection may copy more ([`completes`](Self::completes)
    /// checks that it still finishes, and holds copies of sessions not in
    /// use to [`ROOM_PER_COPY`](super::gc::ROOM_PER_COPY)).
    fn priced(&self, len: u32, reserve: u32, limited: bool) -> Option<bool> {
        let geo = self.log.geo();
        let unit = u64::from(geo.sector_payload_space() - CHUNK_HEADER_LEN);
        let want = u64::from(len) + u64::from(reserve + 1) * unit;
        let tail = self.log.tail_seq();
        let mut room = self.room_bytes();
        let room0 = room;
        let mut copied = 0u64;
        // Cleaning that would copy more than `COPY_LIMIT` bytes for each
        // byte of room it makes is not done: the store is full rather than
        // thrashing.
        // The checkpoint and memory's index are copied whatever the rest
        // costs: they are not held against it.
        #[cfg(feature = "memory")]
        let memory = match self.mem.oldest {
            u32::MAX => 0,
            _ => framed(self.mem_relocation_bound(unit), unit),
        };
        #[cfg(not(feature = "memory"))]
        let memory = 0;
        let checkpoint = framed(u64::from(self.checkpoint_len()), unit);
        let fixed = checkpoint + memory;
        let cheap = |room: u64, copied: u64| {
            !limited || copied <= COPY_LIMIT * (room - room0).max(unit) + fixed
        };
        // The sector sequence at which something is first met.
        let met = |seq: u32| seq.max(tail);
        // The head: the log keeps the tail at or before it (`max` holds
        // the run's end at the tail even if it did not).
        let end = self.log.head_seq().max(tail);
        let mut t = tail;
        loop {
            if room >= want {
                return Some(cheap(room, copied));
            }
            if t == end {
                return Some(false);
            }
            if self.cold_reaches(t) {
                return None;
            }
            let mut cost = 0u64;
            if met(self.checkpoint_sector_seq) == t {
                cost += checkpoint;
            }
            for o in self.objects.iter().filter(|o| met(o.seq) == t) {
                cost += framed(u64::from(o.len + OBJ_FIXED), unit);
            }
            #[cfg(feature = "memory")]
            if self.mem.oldest != u32::MAX && met(self.mem.oldest) == t {
                cost += memory;
            }
            // A session is met once: relocated whole if that takes at most
            // half the room left, else with its index and the bodies of as
            // many sectors as half of it holds (`Embed::UpTo`), which keeps
            // it out of the tail for as many releases. The bodies in the
            // tail itself are one sector at most, for all of them.
            // (In part: never set.)
            #[cfg_attr(feature = "sector-table", allow(unused_mut))]
            let mut partial = false;
            for s in self.sessions.iter().filter(|s| met(s.oldest) == t) {
                let left = room.saturating_sub(cost + unit) / 2;
                #[cfg(not(feature = "sector-table"))]
                {
                    let whole = framed(u64::from(base_len(s)), unit);
                    if whole <= left {
                        cost += whole;
                    } else {
                        let index = u64::from(index_len(s));
                        let bodies = u64::from(s.size).min(left.saturating_sub(index));
                        cost += framed(index + bodies, unit);
                        partial = true;
                    }
                }
                #[cfg(feature = "sector-table")]
                {
                    let _ = left;
                    cost += self.priced_in_part(s, t, unit);
                }
            }
            if partial {
                cost += unit;
            }
            copied += cost;
            if cost > room {
                return Some(false);
            }
            // A hole (a sequence whose sector was released out of order,
            // feature `sector-table`) frees nothing more: its sector is
            // counted free already.
            #[cfg(feature = "sector-table")]
            let freed = match self.log.sector_of_seq(t) {
                Some(_) => unit,
                None => 0,
            };
            #[cfg(not(feature = "sector-table"))]
            let freed = unit;
            room = room - cost + freed;
            t += 1;
        }
    }

    /// What [`priced`](Self::priced) charges for session `s`, met at
    /// sequence `t`, with relocation in part: a moves record when its root
    /// is a base in a newer sector, else its index (`relocate_hot`). Its
    /// bodies are left to [`completes`](Self::completes), which holds them
    /// to [`ROOM_PER_COPY`](super::gc::ROOM_PER_COPY).
    #[cfg(feature = "sector-table")]
    fn priced_in_part(&self, s: &Session, t: u32, unit: u64) -> u64 {
        let moves = s.root_is_base && self.log.head_seq_of(s.root) > t;
        let c = if moves { MOVES_FIXED } else { index_len(s) };
        framed(u64::from(c), unit)
    }

    /// [`collectable`](Self::collectable), bringing the cold sessions
    /// nearest the tail into the table first if the run would meet one
    /// (`directory.rs`, `warm`); a run that still would is refused.
    #[inline(always)]
    pub(super) fn collectable_warm(&mut self, len: u32, reserve: u32) -> Result<bool, Fail> {
        Ok(self.collectable_warm_word(len, reserve)? != 0)
    }

    /// [`Self::collectable_warm`] as a word (1 or 0; see `Io::chunk_crc_ok_word`).
    #[inline(never)]
    fn collectable_warm_word(&mut self, len: u32, reserve: u32) -> Result<u32, Fail> {
        // The dry run meets sessions in table order: in uid order, it
        // decides as a remounted store, whose table was filled otherwise.
        self.sort_table();
        if let Some(yes) = self.collectable(len, reserve)? {
            return Ok(u32::from(yes));
        }
        self.warm()?;
        if let Some(yes) = self.collectable(len, reserve)? {
            return Ok(u32::from(yes));
        }
        // The table cannot hold the cold sessions the run would meet
        // (every slot holds a changed session): refused, writing nothing;
        // the next checkpoint makes them clean.
        Ok(0)
    }

    /// Whether the collection that [`collectable`](Self::collectable) lets
    /// start completes, the releases replayed as [`relocate`](Self::relocate)
    /// makes them: the checkpoint and each object when the tail reaches
    /// their sector (each with a sector to spare), memory's new index with
    /// a sector of items, and each session reaching into it. A session is
    /// copied whole when that fits its budget (the room, less the indexes
    /// of the sessions after it and a sector for their bodies in the tail),
    /// else with its index and its bodies up to the farthest reach that
    /// fits; the run reads the session's index for what each reach carries
    /// and where it meets the session again ([`Reach`], `reach_bodies`).
    /// Each release must fit the room before it: a copy is written before
    /// its original is released. The room is counted as the log has it, in
    /// free sectors and the head sector's rest ([`Head`]), so that the run
    /// stops where `ensure_room` does. `None` if it would meet a cold
    /// session first.
    ///
    /// With relocation in part (feature `sector-table`), unless a power cut's
    /// waste lifts the limit (as in [`collectable`](Self::collectable)): the
    /// run must also make [`ROOM_PER_COPY`](super::gc::ROOM_PER_COPY) bytes
    /// of room for each byte it copies of the sessions not in use
    /// ([`in_use`]). Past that once it has its room, the run walks on: the
    /// stretch is cheap enough if the sectors after it pay for it, at that
    /// rate by some point, or at one byte of room to one copied over the
    /// whole ring. Else the store is full.
    fn completes(&mut self, len: u32, reserve: u32) -> Result<Option<bool>, Fail> {
        let geo = self.log.geo();
        let space = u64::from(geo.sector_payload_space());
        let unit = u64::from(geo.sector_payload_space() - CHUNK_HEADER_LEN);
        let tail = self.log.tail_seq();
        // The room at the head as the log has it: free sectors, and what
        // is left of the head sector's payload.
        let mut head = Head {
            free: u64::from(self.log.free_sectors()),
            left: u64::from(self.log.head_room().saturating_sub(CHUNK_HEADER_LEN)),
            unit,
        };
        // Memory's new index and a sector of its items.
        #[cfg(feature = "memory")]
        let memory = framed(self.mem_relocation_bound(unit), unit);
        let checkpoint = framed(u64::from(self.checkpoint_len()), unit);
        // The sector sequence at which something is first met.
        let met = |seq: u32| seq.max(tail);
        // Where the run meets each session in the table next: its oldest
        // sector, then where a relocation in part leaves it
        // (`u32::MAX`: relocated whole, not met again).
        let mut next = [u32::MAX; MAX_SESSIONS];
        for (n, s) in next.iter_mut().zip(self.sessions.iter()) {
            *n = s.oldest;
        }
        let mut reach = Reach::new();
        // The moves records the run wrote for each session, and (bit 7)
        // whether it wrote the session a new base (`moves_model`).
        #[cfg(feature = "sector-table")]
        let mut extra = [0u8; MAX_SESSIONS];
        // The head: the log keeps the tail at or before it (`max` holds
        // the run's end at the tail even if it did not).
        let end = self.log.head_seq().max(tail);
        let mut t = tail;
        // With relocation in part: the room the run starts from, and what
        // it copies of sessions not in use (`in_use`), which the room it
        // makes must be `ROOM_PER_COPY` times.
        #[cfg(feature = "sector-table")]
        let (room0, mut held) = (head.room(), 0u64);
        #[cfg(feature = "sector-table")]
        let limited = self.cut_waste_now().0 == 0;
        loop {
            let room = head.room();
            // As `ensure_room` asks: the sectors the write opens beside the
            // reserve.
            if head.free >= head.opens(u64::from(len)) + u64::from(reserve) {
                // (Past the copy limit, the run walks on: the stretch it
                // would clean may pay for itself further on.)
                #[cfg(feature = "sector-table")]
                let cheap = !limited
                    || held * super::gc::ROOM_PER_COPY <= room.saturating_sub(room0).max(unit);
                #[cfg(not(feature = "sector-table"))]
                let cheap = true;
                if cheap {
                    return Ok(Some(true));
                }
            }
            if t == end {
                // The whole ring walked (only a run past the copy limit
                // walks on after its room): the store is full if cleaning
                // all of it copies more of the sessions not in use than
                // the room it makes.
                #[cfg(feature = "sector-table")]
                if head.free >= head.opens(u64::from(len)) + u64::from(reserve) {
                    return Ok(Some(held <= room.saturating_sub(room0)));
                }
                return Ok(Some(false));
            }
            if self.cold_reaches(t) {
                return Ok(None);
            }
            let mut cost = 0u64;
            // The checkpoint and each object are copied only with a sector
            // to spare beside them (`room_with_sector`).
            let mut spare = true;
            if met(self.checkpoint_sector_seq) == t {
                spare &= cost + u64::from(self.checkpoint_len()) + space <= room;
                cost += checkpoint;
            }
            for o in self.objects.iter().filter(|o| met(o.seq) == t) {
                spare &= cost + u64::from(o.len) + space <= room;
                cost += framed(u64::from(o.len + OBJ_FIXED), unit);
            }
            if !spare {
                return Ok(Some(false));
            }
            #[cfg(feature = "memory")]
            if self.mem.oldest != u32::MAX && met(self.mem.oldest) == t {
                cost += memory;
            }
            // Each session met here as `relocate_hot` relocates it: whole
            // if that fits the room left beside the others' indexes and a
            // sector, else its index and the bodies up to the farthest
            // reach that fits (the largest power of two not above the free
            // sectors, then half as many, down to the tail alone:
            // `first_reach`); the run meets it again at the oldest
            // sector it still keeps a body in.
            let count = self.sessions.len().min(MAX_SESSIONS);
            let mut tail_used = 0u64;
            for i in 0..count {
                if met(next[i]) != t {
                    continue;
                }
                let s = self.sessions[i];
                let mut others = 0u64;
                for (j, o) in self.sessions.iter().enumerate().take(count) {
                    if j > i && met(next[j]) == t {
                        others += minimal_relocation(o, space);
                    }
                }
                let left = room.saturating_sub(cost);
                let budget = left.saturating_sub(others + space.saturating_sub(tail_used));
                // The free sectors once the copies before it are written.
                let mut after = head;
                let _ = after.spend(cost);
                // (Below the sectors' count, which is a `u32`.)
                reach.free = first_reach(after.free as u32);
                // Met again: the bodies before `next[i]` went with the
                // relocation before, into its base at the head.
                reach.from = match next[i] == s.oldest {
                    true => 0,
                    false => next[i],
                };
                self.reach_bodies(i, t, &mut reach)?;
                // Its bodies in the tail do not count against its budget
                // (`rewrite_base_now`).
                let in_tail = u64::from(reach.bytes[reach.count() - 1]);
                let index = u64::from(index_len(&s));
                // In part (format 10): a moves record, or a base that
                // carries the bodies in the tail alone.
                #[cfg(feature = "sector-table")]
                let (c, n) = {
                    let last = reach.count() - 1;
                    match self.moves_model(&s, t, &mut extra[i], reach.moves, budget) {
                        Some(root) => {
                            (u64::from(MOVES_FIXED) + in_tail, reach.next[last].min(root))
                        }
                        None if index <= budget => (index + in_tail, reach.next[last]),
                        None => return Ok(Some(false)),
                    }
                };
                #[cfg(not(feature = "sector-table"))]
                let whole = u64::from(base_len(&s));
                #[cfg(not(feature = "sector-table"))]
                let (c, n) = match whole.saturating_sub(in_tail) <= budget {
                    true => (whole, u32::MAX),
                    false => {
                        let carried = |j: usize| index + u64::from(reach.bytes[j]);
                        let fits = (0..reach.count())
                            .find(|&j| carried(j).saturating_sub(in_tail) <= budget);
                        let Some(j) = fits else {
                            return Ok(Some(false));
                        };
                        (carried(j), reach.next[j])
                    }
                };
                cost += framed(c, unit);
                #[cfg(feature = "sector-table")]
                if !in_use(reach.appended, tail, end) {
                    held += framed(c, unit);
                }
                tail_used += in_tail;
                next[i] = n;
            }
            if !head.spend(cost) {
                return Ok(Some(false));
            }
            // A hole (a sequence whose sector was released out of order,
            // feature `sector-table`) frees nothing more: its sector is
            // counted free already.
            #[cfg(feature = "sector-table")]
            let freed = self.log.sector_of_seq(t).is_some();
            #[cfg(not(feature = "sector-table"))]
            let freed = true;
            head.free += u64::from(freed);
            t += 1;
        }
    }
}

#[cfg(feature = "sector-table")]
impl<F: NorFlash, const MAX_SESSIONS: usize, W: BorrowMut<Work>> Store<F, MAX_SESSIONS, W> {
    /// Whether the run's relocation of session `s` at sequence `t` writes
    /// a moves record, as `write_moves` decides (`store/moves.rs`): its
    /// root a base newer than `t` (one the run wrote is newer than the
    /// run), its chain with room for one more element and fewer than
    /// [`MOVES_MAX`] moves records (`moves` on flash, and those the run
    /// wrote), and the record's fixed part within `budget`. `Some` with the
    /// root's sequence, where the run meets the session again at the
    /// latest; `extra` (the run's count for the session, and in bit 7
    /// whether it wrote a base) is updated.
    fn moves_model(
        &self,
        s: &Session,
        t: u32,
        extra: &mut u8,
        moves: usize,
        budget: u64,
    ) -> Option<u32> {
        let rebased = *extra & 0x80 != 0;
        let done = usize::from(*extra & 0x7F);
        let root = match rebased {
            true => u32::MAX,
            false => self
                .log
                .seq_of_sector(self.log.geo().sector_of(s.root))
                .unwrap_or(0),
        };
        let (moves, chain) = match rebased {
            true => (done, done),
            false => (moves + done, usize::from(s.chain) + done),
        };
        let yes = (rebased || s.root_is_base)
            && root > t
            && chain < CHAIN_MAX
            && moves < MOVES_MAX
            && u64::from(MOVES_FIXED) <= budget;
        *extra = match yes {
            true => *extra + 1,
            false => 0x80,
        };
        yes.then_some(root)
    }
}

/// Whether a session whose newest body the caller appended (where it was
/// appended) is in sector sequence `appended` ([`Reach::appended`]) is in
/// use: that body in the newer half of the ring from `tail` to `end`. A refusal asks the caller to delete
/// sessions, and a caller deletes those it no longer uses (ESP-Claw's
/// warning: the oldest): what one in use keeps at the tail is copied
/// whatever the store answers, so [`completes`](Store::completes) does not
/// hold its copies to the limit. Decided from what a mount finds again
/// (the chain, the ring), so a remounted store decides alike.
#[cfg(feature = "sector-table")]
fn in_use(appended: u32, tail: u32, end: u32) -> bool {
    appended >= tail + (end - tail) / 2
}

/// Reaches of a relocation in part ([`Reach`]): enough for any count of
/// free sectors (`u32::BITS` halvings, and none).
const REACHES: usize = u32::BITS as usize + 1;

/// What a relocation in part of one session carries at each reach that
/// [`relocate_hot`](Store::relocate_hot) tries: `free` sectors past the
/// tail (a power of two), then half as many, down to the tail alone
/// (reach `j` is `free >> j`). Filled by `Store::reach_bodies` for the dry run.
pub(super) struct Reach {
    /// The first reach: the largest power of two not above the free
    /// sectors (`first_reach`).
    pub(super) free: u32,
    /// Bodies in sectors before this one are not counted: a relocation
    /// in part before carried them.
    pub(super) from: u32,
    /// The bytes of the bodies in sectors up to each reach.
    bytes: [u32; REACHES],
    /// The oldest sector past each reach that holds a body (`u32::MAX`:
    /// none).
    next: [u32; REACHES],
    /// The moves records of the session's chain (format 10).
    #[cfg(feature = "sector-table")]
    pub(super) moves: usize,
    /// The sector sequence of the newest body the caller appended that is
    /// where it was appended: not moved by a moves record, nor carried by
    /// the base at the root (0: none; format 10).
    #[cfg(feature = "sector-table")]
    pub(super) appended: u32,
}

impl Reach {
    const fn new() -> Self {
        Reach {
            free: 0,
            from: 0,
            bytes: [0; REACHES],
            next: [u32::MAX; REACHES],
            #[cfg(feature = "sector-table")]
            moves: 0,
            #[cfg(feature = "sector-table")]
            appended: 0,
        }
    }

    /// How many reaches there are: `free`, halved down to 0.
    fn count(&self) -> usize {
        (u32::BITS - self.free.leading_zeros()) as usize + 1
    }

    /// Starts a new count, keeping `free`.
    pub(super) fn clear(&mut self) {
        self.bytes = [0; REACHES];
        self.next = [u32::MAX; REACHES];
    }

    /// Counts a body of `len` bytes in the sector of sequence `seq`, with
    /// the tail at `tail`.
    pub(super) fn add(&mut self, tail: u32, seq: u32, len: u32) {
        if seq < self.from {
            return;
        }
        for j in 0..self.count() {
            let k = self.free.checked_shr(j as u32).unwrap_or(0);
            if seq <= tail.saturating_add(k) {
                self.bytes[j] = self.bytes[j].saturating_add(len);
            } else {
                self.next[j] = self.next[j].min(seq);
            }
        }
    }
}

/// The room at the head in the dry run ([`Store::completes`]): the free
/// sectors and the payload bytes left in the head sector, each sector
/// holding `unit` payload bytes.
#[derive(Clone, Copy)]
struct Head {
    free: u64,
    left: u64,
    unit: u64,
}

impl Head {
    /// The payload bytes the head has room for.
    fn room(&self) -> u64 {
        self.free * self.unit + self.left
    }

    /// The sectors a write of `len` payload bytes opens.
    fn opens(&self, len: u64) -> u64 {
        len.saturating_sub(self.left).div_ceil(self.unit)
    }

    /// Writes `bytes` (framed): `false` if they do not fit.
    fn spend(&mut self, bytes: u64) -> bool {
        let opens = self.opens(bytes);
        if opens > self.free {
            return false;
        }
        self.free -= opens;
        self.left = (self.left + opens * self.unit) - bytes;
        true
    }
}
