//! Room and garbage collection: the reserves, making room for a write, and
//! releasing the tail sector (`docs/FORMAT.md`, "Garbage collection").
//!
//! Every write goes through [`prepare_write`](Store::prepare_write) (a due
//! checkpoint, then room) or [`ensure_room`](Store::ensure_room). Room is
//! kept in reserve by [`Priority`]: session appends leave the whole reserve
//! and the room kept for memory and profiles free, memory and profile
//! writes the whole reserve, maintenance (deletes, blocks, compaction,
//! checkpoints) may use its maintenance part, and garbage collection itself
//! may use everything, so that a collection always has room to finish. The
//! reserve follows what the store holds (its sessions' checkpoint, its
//! largest index), not the limits it allows. Before collecting for a write,
//! a dry run (`dry_run.rs`, `collectable`) decides whether collection can
//! make the room at a bounded copying cost and whether it completes; if
//! not, the write is refused with nothing written or erased.
//!
//! A power cut spends bytes at the head that come back only when the ring
//! collects their sector (the cut waste, which mount measures and
//! checkpoints carry). Every write but a collection's leaves one sector
//! more free, the cut slack ([`CUT_SLACK`]); a store recovered from a cut
//! uses it, and does not hold collection to the copy limit, until the tail
//! passes the waste. So a store cut near full takes the writes the uncut
//! store would have taken.
//!
//! Releasing the tail: what lives there is known without reading it (each
//! session records the oldest sector it still uses, each object its own
//! sector, memory its oldest). A new full checkpoint is written first if the
//! newest full one is in the tail; every object there is copied to the head;
//! memory reaching into the tail gets a new index; every session reaching
//! into it is relocated into a new base that carries its bodies (all of them
//! when there is room, else at least those in the sectors about to be
//! released, the rest referenced in place). Deleted sessions,
//! compacted-away records and superseded objects are never copied. Nothing
//! is erased at release; the sector is erased when the ring reaches it
//! again.
//!
//! Invariants: no collection runs inside another (`in_gc`), and the tail is
//! released only once everything live in it has been written elsewhere.
//!
//! Power loss: each copy is an ordinary batch; until the tail is released
//! (a RAM change only) the originals stand, so a cut leaves the old copies in
//! force and the next collection does the work again.

use core::borrow::BorrowMut;

use embedded_storage::nor_flash::NorFlash;

use super::base::Embed;
use super::objects::{OBJ_ENCODED, OBJ_FIXED};
use super::{Maintenance, Store, Work};
use crate::chdx::{CHDX_ENTRY_SIZE, CHDX_HEADER_SIZE};
use crate::error::{fail, Error, Fail, Kind};
use crate::layout::CHUNK_HEADER_LEN;
use crate::log::{Io, Payload};
use crate::session::{Session, BASE_FIXED, SESSION_ENCODED};
use crate::store::objects::OBJECT;

/// Most bytes a collection copies for a byte of room it makes, before the
/// store is full (cleaning sectors more than four fifths live).
pub(super) const COPY_LIMIT: u64 = 4;

/// Sectors every write but a collection's leaves free beside the reserve,
/// for what a power cut at the head may spend: a store recovered from a cut
/// uses them for the cut's waste until the ring collects it, so that it
/// takes every write the uncut store would have taken (`docs/FORMAT.md`,
/// "Garbage collection").
pub(crate) const CUT_SLACK: u32 = 1;

/// Partitions with fewer sectors keep no cut slack: a sector is too much of
/// them (below 128 KiB of 4 KiB sectors, where a partition holds a session
/// or two), and a cut there may cost a write the uncut store took.
const CUT_SLACK_MIN_SECTORS: u32 = 32;

/// How much room a write may use.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Priority {
    /// Session appends: leave the whole reserve free, and the room kept
    /// for memory and profiles ([`Config::knowledge_reserve`]).
    ///
    /// [`Config::knowledge_reserve`]: super::Config::knowledge_reserve
    History,
    /// Memory, profiles, chat maps: leave the whole reserve free.
    User,
    /// Deletes, blocks, compaction, checkpoints: may use the maintenance part.
    Maintenance,
    /// A session's deletion that the collection could not make room for at
    /// [`Priority::Maintenance`] (`docs/DESIGN.md`, "Known gap: a session
    /// near the limit at the tail of a small partition"): leaves free only
    /// the sectors collection works in, so that a store whose collection
    /// is stuck still takes the deletions that unstick it; one that fits in
    /// the head sector is taken whatever is free. It skips a due
    /// checkpoint and uses the cut slack.
    Deletion,
    /// Garbage collection itself: may use everything.
    Gc,
}

/// Sectors an append up to a sector long opens: the free room beyond the
/// reserve that idle-time collection keeps for the appends before the next
/// idle call.
const APPEND_OPENS: u32 = 2;

impl<F: NorFlash, const MAX_SESSIONS: usize, W: BorrowMut<Work>> Store<F, MAX_SESSIONS, W> {
    /// Sectors a write of priority `p` must leave free. The reserve follows
    /// what the store holds, not the limits it allows: garbage collection
    /// keeps room for a full checkpoint of the sessions it has and a sector
    /// of copies; maintenance adds room for a due checkpoint and for the
    /// largest index a compaction of the sessions present would write.
    #[inline(never)]
    pub(crate) fn reserve_for(&self, p: Priority) -> u32 {
        let space = self.log.geo().sector_payload_space() - CHUNK_HEADER_LEN;
        // A full checkpoint with one more session and object.
        let ckpt = self.checkpoint_len() + SESSION_ENCODED as u32 + OBJ_ENCODED as u32;
        // The largest index a compaction of the sessions present writes.
        let index = || {
            let cold = self.dir.cold_index_max;
            self.sessions.iter().fold(cold, |m, s| m.max(index_len(s)))
        };
        // Room kept for memory and profiles, less what objects hold.
        let knowledge = || {
            let held: u32 = self.objects.iter().map(|o| o.len).sum();
            let capacity = self.log.geo().capacity();
            self.config.knowledge_reserve(capacity).saturating_sub(held)
        };
        // Maintenance writes a due checkpoint beside the one a collection
        // may write.
        // (Each priority below adds to the one above it.)
        if p == Priority::Gc {
            return 0;
        }
        if p == Priority::Deletion {
            return self.reserve_gc;
        }
        let (mut sectors, mut bytes) = (self.reserve_gc, ckpt);
        if p != Priority::Maintenance {
            sectors += self.reserve_maintenance;
            bytes += ckpt + index();
            if p == Priority::History {
                bytes += knowledge();
            }
        }
        sectors + bytes.div_ceil(space) + self.cut_slack_left()
    }

    /// The cut slack this partition keeps: [`CUT_SLACK`], or none on one of
    /// fewer than [`CUT_SLACK_MIN_SECTORS`] sectors.
    fn cut_slack(&self) -> u32 {
        match self.log.geo().count >= CUT_SLACK_MIN_SECTORS {
            true => CUT_SLACK,
            false => 0,
        }
    }

    /// Sectors of the cut slack ([`cut_slack`](Self::cut_slack)) left free
    /// of a cut's waste until the ring collects it. The waste takes the
    /// sectors of the bytes the last mount found spent by a cut write
    /// (`note_cut_waste`), and a sector for the few bytes by which the
    /// writes redone after it may be laid out otherwise: at least one
    /// sector, which is the whole slack ([`CUT_SLACK`] is one sector).
    fn cut_slack_left(&self) -> u32 {
        const _: () = assert!(CUT_SLACK == 1);
        match self.cut_waste_now() {
            (0, _) => self.cut_slack(),
            _ => 0,
        }
    }

    /// The bytes power cuts spent at the head that the ring has not
    /// collected yet, and the sequence of the last sector holding them:
    /// `(0, 0)` once the tail has passed it.
    pub(super) fn cut_waste_now(&self) -> (u32, u32) {
        match self.cut_waste != 0 && self.log.tail_seq() <= self.cut_waste_seq {
            true => (self.cut_waste, self.cut_waste_seq),
            false => (0, 0),
        }
    }

    /// The largest append of `records` records the partition can ever
    /// take: what an otherwise empty store has beside the reserves that a
    /// session holding only that batch needs (the head sector's rest aside).
    /// A larger one is refused as too large; a smaller one may still meet
    /// [`Error::Full`] while other data is held.
    pub(super) fn largest_append(&self, records: usize) -> u64 {
        let geo = self.log.geo();
        let unit = geo.sector_payload_space() - CHUNK_HEADER_LEN;
        let one = (super::checkpoint::CKPT_FIXED
            + super::checkpoint::CKPT_WASTE
            + 2 * SESSION_ENCODED
            + OBJ_ENCODED
            + crate::store::memory::MEM_STATE_ENCODED) as u32;
        // (Format 10: a full checkpoint records the sector table and the
        // dead bytes too.)
        #[cfg(feature = "sector-table")]
        let one = one + 8 + 2 * geo.count + 4 + geo.count.div_ceil(2);
        let index = BASE_FIXED
            + crate::session::MAX_SESSION_ID_BYTES as u32
            + (CHDX_HEADER_SIZE + CHDX_ENTRY_SIZE + 4) as u32
            + (CHDX_ENTRY_SIZE as u32 + 4) * records as u32;
        let knowledge = self.config.knowledge_reserve(geo.capacity());
        let sectors = geo
            .count
            .saturating_sub(self.reserve_gc + self.reserve_maintenance + 1);
        (u64::from(sectors) * u64::from(unit))
            .saturating_sub(u64::from(2 * one + index + knowledge))
    }

    /// Makes room for a batch of `len` payload bytes, collecting garbage if
    /// needed. Before anything is collected, a dry run from what RAM knows
    /// ([`collectable`](Self::collectable)) decides whether collecting can
    /// make the room: a write that would not fit is refused with
    /// [`Error::Full`] having written and erased nothing.
    pub(super) fn ensure_room(&mut self, len: u32, p: Priority) -> Result<(), Fail> {
        let geo = self.log.geo();
        // Fixed for this write: a collection does not change it.
        let reserve = self.reserve_for(p);
        let space = geo.sector_payload_space();
        let mut checked = false;
        for i in 0..2 * geo.count + 2 {
            let (_, opens) = self.log.plan(len);
            // (A deletion that fits in the head sector takes no sector.)
            if self.log.free_sectors() >= opens + reserve || opens == 0 && p == Priority::Deletion {
                return Ok(());
            }
            // First the tail sectors that deletions left dead, released as
            // a mount releases them: the store then decides from the state
            // a remount finds, not from what its own past left in RAM.
            if i == 0 && !self.in_gc {
                #[cfg(feature = "sector-table")]
                let used = self.log.used_sectors();
                self.release_dead_tail()?;
                // (Cleaned, with nothing live in them.)
                #[cfg(feature = "sector-table")]
                {
                    let n = u64::from(used - self.log.used_sectors());
                    self.cleaning.tail_releases += n;
                    self.cleaning.tail_payload_bytes += n * u64::from(space);
                }
                continue;
            }
            if self.in_gc || !(checked || self.collectable_warm(len, reserve)?) {
                break;
            }
            checked = true;
            if !self.reclaim_tail()? {
                break;
            }
        }
        // (At most the partition's capacity, a `u32`.)
        let available = self.log.free_sectors().saturating_sub(reserve) * space;
        Err(self.log.parked().full(len, available))
    }

    /// Does ahead of time, within a budget, the work an append would
    /// otherwise do inline: a checkpoint once seven eighths of the
    /// checkpoint interval are written (an append writes one only at the
    /// whole interval), a collection of the tail when free room runs low,
    /// and erasing the sectors the head opens next. Meant
    /// for idle time (while the model thinks), so that appends neither erase
    /// nor collect. Each step is one checkpoint, one release of the tail
    /// sector, one sector erase, or the header-only chunk that says which
    /// sectors are erased ahead (written when nothing else was after the
    /// erases, so that a remount does not erase them again); at most
    /// `max_steps` are taken.
    ///
    /// Power loss: every step is power-safe on its own. A checkpoint and a
    /// collection are ordinary writes (see [`Store::append`]'s rules); an
    /// erase ahead touches only a free sector, which is erased again when
    /// opened after a remount (a blank sector is never trusted across a
    /// mount).
    pub fn maintain(&mut self, max_steps: u32) -> Result<Maintenance, Error<F::Error>> {
        let r = self.maintain_inner(max_steps);
        self.surface(r)
    }

    /// [`maintain`](Self::maintain) with the engine's error.
    pub(crate) fn maintain_inner(&mut self, max_steps: u32) -> Result<Maintenance, Fail> {
        let mut left = max_steps;
        self.maintain_while_inner(&mut || {
            let go = left > 0;
            left = left.saturating_sub(1);
            go
        })
    }

    /// [`maintain`](Self::maintain) with the budget as a check the caller
    /// makes before each step (a deadline, a flag set by an interrupt):
    /// `go_on` returns `false` to stop.
    pub fn maintain_while(
        &mut self,
        go_on: &mut dyn FnMut() -> bool,
    ) -> Result<Maintenance, Error<F::Error>> {
        let r = self.maintain_while_inner(go_on);
        self.surface(r)
    }

    /// [`maintain_while`](Self::maintain_while) with the engine's error.
    pub(crate) fn maintain_while_inner(
        &mut self,
        go_on: &mut dyn FnMut() -> bool,
    ) -> Result<Maintenance, Fail> {
        self.log.idle_begin();
        let r = self.maintain_steps(go_on);
        self.log.idle_end();
        r
    }

    /// The steps of [`maintain_while`](Self::maintain_while).
    fn maintain_steps(&mut self, go_on: &mut dyn FnMut() -> bool) -> Result<Maintenance, Fail> {
        let mut steps = 0u32;
        // A collection that cannot release anything is not retried in the
        // same call.
        let mut collect = true;
        loop {
            let checkpoint = self.bytes_since_checkpoint >= self.idle_checkpoint_interval();
            collect = collect && self.collection_due()?;
            let erase = self.log.erase_ahead_due();
            // Last: say which sectors are erased ahead, if no chunk since
            // their erases has.
            let say = self.log.erased_ahead_unsaid();
            if !(checkpoint || collect || erase || say) {
                return Ok(Maintenance { steps, done: true });
            }
            if !go_on() {
                return Ok(Maintenance { steps, done: false });
            }
            if checkpoint {
                self.write_checkpoint_with(Priority::Maintenance)?;
            } else if collect {
                self.idle_credit = 0;
                collect = self.reclaim_tail()?;
            } else if erase {
                self.log.erase_ahead()?;
            } else {
                self.log.say_erased_ahead()?;
            }
            steps += 1;
        }
    }

    /// Whether free room is below what appends need without collecting
    /// (the reserve, plus the sectors an append up to a sector long opens),
    /// releasing the tail can help, and the caller has written a sector
    /// since `maintain` last collected: the rate appends would collect at,
    /// so that idle calls on a nearly full partition never move the same
    /// data again and again.
    fn collection_due(&mut self) -> Result<bool, Fail> {
        let geo = self.log.geo();
        let reserve = self.reserve_for(Priority::User);
        let due = self.log.free_sectors() < reserve + APPEND_OPENS
            && self.idle_credit >= geo.sector_payload_space()
            && self.log.used_sectors() > 1;
        Ok(due
            && self.collectable_warm(
                geo.sector_payload_space(),
                self.log.free_sectors().saturating_sub(1),
            )?)
    }

    /// What memory's relocation writes at most in one collection step: a
    /// new index of every active item (no more than ids ever given) and the
    /// items of one sector (`unit` bytes).
    #[cfg(feature = "memory")]
    pub(super) fn mem_relocation_bound(&self, unit: u64) -> u64 {
        let items = (self.mem.next_id as usize).min(crate::store::memory::ACTIVE_CAP);
        (16 * items) as u64 + 64 + unit
    }

    /// Releases the tail sector, relocating what is still live in it.
    /// `false` if nothing can be released.
    #[inline(always)]
    fn reclaim_tail(&mut self) -> Result<bool, Fail> {
        Ok(self.reclaim_tail_word()? != 0)
    }

    /// [`Self::reclaim_tail`] as a word (1 or 0; see `Io::chunk_crc_ok_word`).
    #[inline(never)]
    fn reclaim_tail_word(&mut self) -> Result<u32, Fail> {
        // Never from inside a collection or a maintenance write: releasing
        // the tail would relocate the same tail again (the sector is only
        // released once its contents are out), without end. What a
        // collection writes comes from the reserve kept for it.
        if self.log.used_sectors() <= 1 || self.in_gc {
            return Ok(0);
        }
        let tail_seq = self.log.tail_seq();
        self.in_gc = true;
        let result = self.relocate_tail(tail_seq);
        self.in_gc = false;
        if !result? {
            return Ok(0);
        }
        if self.checkpoint_sector_seq <= tail_seq {
            return Err(fail!(LogicBug, "checkpoint still in the reclaimed sector"));
        }
        self.log.release_tail();
        #[cfg(feature = "sector-table")]
        {
            self.cleaning.tail_releases += 1;
            let space = self.log.geo().sector_payload_space();
            self.cleaning.tail_payload_bytes += u64::from(space);
        }
        Ok(1)
    }

    /// Releases the tail sectors before everything a collection would
    /// move (the checkpoint, objects, memory, sessions): they hold nothing
    /// live, so releasing them is what [`reclaim_tail`](Self::reclaim_tail)
    /// would do there, without a write. A mount learns the tail from the
    /// checkpoint, and sectors collected since were released in RAM only;
    /// without this, a store remounted nearly full counted them as used and
    /// could refuse a write the running store took. [`ensure_room`](Self::ensure_room)
    /// calls it too, before it collects: a deletion can leave the tail
    /// sectors dead, and a running store that kept them until it collected
    /// them decided from another state than a store remounted there.
    ///
    /// Power loss: nothing is written; a mount after a cut finds the same.
    pub(super) fn release_dead_tail(&mut self) -> Result<(), Fail> {
        let mut live = self.checkpoint_sector_seq.min(self.log.head_seq());
        for o in self.objects.iter() {
            live = live.min(o.seq);
        }
        #[cfg(feature = "memory")]
        {
            live = live.min(self.mem.oldest);
        }
        for s in self.sessions.iter() {
            live = live.min(s.oldest);
        }
        // What a mount knows of the cold sessions' oldest sector is a bound
        // (entries a newer version replaced count in it): read it exactly
        // when it holds the tail back.
        if self.cold_reaches(live.saturating_sub(1)) && self.log.tail_seq() < live {
            self.learn_cold()?;
        }
        if self.cold_count() > 0 {
            live = live.min(self.dir.cold_oldest);
        }
        while self.log.tail_seq() < live {
            self.log.release_tail();
        }
        Ok(())
    }

    /// Room at the head, in payload bytes, without reclaiming.
    pub(super) fn room_bytes(&self) -> u64 {
        let geo = self.log.geo();
        let space = u64::from(geo.sector_payload_space() - CHUNK_HEADER_LEN);
        let head_left = self.log.head_room();
        u64::from(self.log.free_sectors()) * space
            + u64::from(head_left.saturating_sub(CHUNK_HEADER_LEN))
    }

    /// Whether the room at the head ([`room_bytes`](Self::room_bytes))
    /// takes `len` bytes and a sector's payload space more.
    #[inline(never)]
    fn room_with_sector(&self, len: u32) -> bool {
        let space = u64::from(self.log.geo().sector_payload_space());
        u64::from(len) + space <= self.room_bytes()
    }

    /// Moves everything live out of the tail sector. A session that fits in
    /// the room left is relocated whole (its bodies then sit together, and it
    /// will not need moving again for a whole turn of the ring); otherwise
    /// only its bodies in the tail are copied and the rest referenced.
    /// `false` if there is not even room for that.
    pub(crate) fn relocate_tail(&mut self, tail_seq: u32) -> Result<bool, Fail> {
        self.relocate(tail_seq, None)
    }

    /// Moves everything live out of the sectors up to sequence `tail_seq`
    /// ([`relocate_tail`](Self::relocate_tail)) or, with `span`, only out of
    /// that sector (its index; `tail_seq` is its sequence): what has a byte
    /// there is copied, the rest referenced where it is. A scrub writes the
    /// checkpoint itself, after.
    #[inline(always)]
    pub(crate) fn relocate(&mut self, tail_seq: u32, span: Option<u32>) -> Result<bool, Fail> {
        Ok(self.relocate_word(tail_seq, span)? != 0)
    }

    /// [`Self::relocate`] as a word (1 or 0; see `Io::chunk_crc_ok_word`).
    #[inline(never)]
    fn relocate_word(&mut self, tail_seq: u32, span: Option<u32>) -> Result<u32, Fail> {
        if span.is_none() && self.checkpoint_sector_seq <= tail_seq {
            if !self.room_with_sector(self.checkpoint_len()) {
                return Ok(0);
            }
            self.write_full_checkpoint(Priority::Gc)?;
        }
        // Objects in the tail are copied whole.
        let mut k = 0;
        while let Some(&o) = self.objects.get(k) {
            let touches = match span {
                #[cfg(feature = "memory")]
                Some(index) => self.log.batch_touches(o.addr, index)?,
                _ => o.seq <= tail_seq,
            };
            if touches {
                let Some(len) = self.object_len(o.addr)? else {
                    // Damaged at rest: nothing sound to keep.
                    self.objects.swap_remove(k);
                    continue;
                };
                if !self.room_with_sector(len) {
                    return Ok(0);
                }
                let mut payload = FlashCopy {
                    from: o.addr + CHUNK_HEADER_LEN,
                    len: len + OBJ_FIXED,
                };
                let (addr, _) = self.log.write_batch(OBJECT, &mut payload)?;
                let seq = self.log.head_seq_of(addr);
                if let Some(o) = self.objects.get_mut(k) {
                    *o = super::objects::ObjectSlot {
                        addr,
                        seq,
                        len,
                        ..*o
                    };
                }
                // The original is dead (`store/dead.rs`).
                #[cfg(feature = "sector-table")]
                {
                    self.batch_died(o.addr);
                    if span.is_none() {
                        self.cleaning.tail_live_bytes += u64::from(len);
                    }
                }
            }
            k += 1;
        }
        // Long-term memory reaching into the tail: a new index, with the
        // items in the next sectors to be released copied.
        // (Without the `memory` feature, mount refused a store that holds
        // memory, and nothing writes any.)
        #[cfg(feature = "memory")]
        if self.mem.oldest <= tail_seq {
            let mut k = self.log.free_sectors() / 2;
            loop {
                if self.mem_compact_with(Some(tail_seq + k), Priority::Gc)? {
                    break;
                }
                if k == 0 {
                    return Ok(0);
                }
                k /= 2;
            }
        }
        // The sessions in the table, then the cold ones the directory holds
        // there, brought into the table a working set at a time.
        let mut last_uid = 0;
        // The cold sessions in the tail first, and every one in uid order,
        // so that a remounted store, whose table was filled otherwise,
        // relocates as the running one.
        if span.is_none() && self.cold_reaches(tail_seq) {
            self.warm()?;
        }
        self.sort_table();
        for _ in 0..self.session_count() + 2 {
            if !self.relocate_hot(tail_seq, span)? {
                return Ok(0);
            }
            if !self.cold_reaches(tail_seq) {
                return Ok(1);
            }
            match self.bring_cold(tail_seq, span, &mut last_uid)? {
                Brought::Some => {}
                Brought::NoneLeft => return Ok(1),
                Brought::None => return Ok(0),
            }
        }
        Err(fail!(LogicBug, "relocating the cold sessions did not end"))
    }

    /// Brings cold sessions that may hold bytes at or before sector
    /// `tail_seq` into the table, writing a checkpoint first if every
    /// slot holds a changed session. A release brings as many as the table
    /// takes (the ones nearest the tail; each leaves the tail once
    /// relocated); a scrub (`span`) one at a time in uid order, after
    /// `last_uid` (one whose bytes are elsewhere stays as it is, and must
    /// not be met again).
    fn bring_cold(
        &mut self,
        tail_seq: u32,
        span: Option<u32>,
        last_uid: &mut u32,
    ) -> Result<Brought, Fail> {
        let reached = |s: &Session| s.oldest <= tail_seq;
        for attempt in 0..2 {
            if attempt == 1 {
                // Every slot holds a changed session (relocated ones are):
                // a checkpoint makes them clean.
                if !self.room_with_sector(self.checkpoint_len()) {
                    return Ok(Brought::None);
                }
                self.clean_table(Priority::Gc)?;
            }
            if span.is_none() {
                let before = self.sessions.iter().filter(|s| reached(s)).count();
                self.warm()?;
                if self.sessions.iter().filter(|s| reached(s)).count() > before {
                    return Ok(Brought::Some);
                }
                continue;
            }
            // A scrub: the cold session of smallest uid after `last_uid`
            // that may hold bytes there.
            let mut next: Option<u32> = None;
            let mut c = super::directory::ColdCursor::new(&self.dir);
            while self.cold_step(&mut c)? != 0 {
                let s = &c.cur;
                if reached(s) && s.uid > *last_uid && next.is_none_or(|n| s.uid < n) {
                    next = Some(s.uid);
                }
            }
            let Some(uid) = next else {
                return Ok(Brought::NoneLeft);
            };
            *last_uid = uid;
            self.pinned = uid;
            match self.find_cold(super::directory::Want::Uid(uid), true) {
                Ok(Some(_)) => return Ok(Brought::Some),
                Ok(None) => return Err(fail!(LogicBug, "a cold session vanished")),
                Err(e) if e.kind() == Kind::TooManySessions => continue,
                Err(e) => return Err(e),
            }
        }
        Ok(Brought::None)
    }

    /// [`relocate`](Self::relocate)'s step for the sessions in the table.
    fn relocate_hot(&mut self, tail_seq: u32, span: Option<u32>) -> Result<bool, Fail> {
        let space = u64::from(self.log.geo().sector_payload_space());
        // What each other session in the tail needs at least: a new index
        // (their bodies in the tail are a sector at most, for all).
        let minimal = |s: &Session| minimal_relocation(s, space);
        // The bodies copied out of the tail so far, from the sector held
        // back for them.
        let mut tail_used = 0u64;
        let mut i = 0;
        while let Some(&s) = self.sessions.get(i) {
            if s.oldest > tail_seq {
                i += 1;
                continue;
            }
            // A scrub holds nothing back for the others: most sessions
            // have nothing in its sector and are not rewritten.
            let mut others = 0u64;
            for (j, o) in self.sessions.iter().enumerate() {
                if span.is_none() && j > i && o.oldest <= tail_seq {
                    others += minimal(o);
                }
            }
            // The bodies in the tail: a sector at most, for all of them,
            // held back but for what the sessions before took of it (each
            // session's own do not count against its budget:
            // `rewrite_base_now`).
            let budget = self
                .room_bytes()
                .saturating_sub(others + space.saturating_sub(tail_used));
            // Only the bodies its base names in the tail, into a moves
            // record (format 10), when the session qualifies
            // (`store/moves.rs`).
            #[cfg(feature = "sector-table")]
            if span.is_none() {
                if let Some(in_tail) = self.write_moves(i, tail_seq, budget)? {
                    tail_used += u64::from(in_tail);
                    i += 1;
                    continue;
                }
            }
            // Copy as much of the session as the room allows: everything,
            // else its bodies in the next `k` sectors too, so that it need
            // not be re-indexed at each of them. With moves records, only
            // its bodies in the tail: the rest go into moves records as the
            // tail reaches them, each copied once (`IN_PART`).
            let first = match span {
                #[cfg(feature = "memory")]
                Some(index) => Embed::Span(index),
                _ if IN_PART => Embed::UpTo(tail_seq),
                _ => Embed::All,
            };
            // One call site: `first`, then (a release) the bodies up to
            // `k` sectors on, `k` from the largest power of two not above
            // the free sectors (`first_reach`), halved down to none.
            let mut embed = first;
            let mut k: Option<u32> = None;
            let moved = loop {
                let moved = self.rewrite_base_gc(i, embed, budget);
                if span.is_some() || IN_PART || !matches!(moved, Ok(None)) {
                    break moved;
                }
                let next = match k {
                    None => first_reach(self.log.free_sectors()),
                    Some(0) => break moved,
                    Some(k) => k / 2,
                };
                k = Some(next);
                embed = Embed::UpTo(tail_seq + next);
            };
            match moved {
                Ok(Some(in_tail)) => {
                    tail_used += u64::from(in_tail);
                    i += 1;
                }
                Ok(None) => return Ok(false),
                // Damage at rest left nothing to relocate under a name (the
                // name is lost, or no record checks out): the session can
                // no longer be found or read, and it goes with the tail
                // rather than stop every later write.
                Err(e) if e.kind() == Kind::Corrupted => {
                    self.remove_uid(s.uid);
                    self.sessions_dropped = self.sessions_dropped.saturating_add(1);
                }
                Err(e) => return Err(e),
            }
        }
        Ok(true)
    }

    /// Writes a batch with room made first; returns its address.
    pub(super) fn write<P: Payload<F>>(
        &mut self,
        k: u8,
        payload: &mut P,
        p: Priority,
    ) -> Result<u32, Fail> {
        self.prepare_write(payload.len(), p)?;
        self.write_prepared(k, payload)
    }

    /// Writes a due checkpoint and makes room for `len` payload bytes. After
    /// this, nothing moves until the write: a record that points at others
    /// (a batch at its session's head) must be built after this call.
    pub(super) fn prepare_write(&mut self, len: u32, p: Priority) -> Result<(), Fail> {
        if p != Priority::Gc
            && p != Priority::Deletion
            && !self.in_gc
            && self.bytes_since_checkpoint >= self.checkpoint_interval()
        {
            // Room for both first: a write that is refused leaves no
            // checkpoint behind either.
            match self.ensure_room(self.log.pair_len(self.checkpoint_len(), len), p) {
                Ok(()) => self.write_checkpoint_with(Priority::Maintenance)?,
                // Nearly full, a checkpoint that is due waits for room, up
                // to twice the interval: the write that made it due may
                // have been a collection's copies, which the running store
                // wrote after it had decided on this write's checkpoint and
                // a store remounted after a cut counts before. So a cut
                // does not turn away a write the uncut store took.
                Err(e)
                    if e.kind() == Kind::Full
                        && self.bytes_since_checkpoint
                            < self.checkpoint_interval().saturating_mul(2) => {}
                Err(e) => return Err(e),
            }
        }
        self.ensure_room(len, p)
    }

    /// Writes a batch for which [`prepare_write`](Self::prepare_write) made
    /// room.
    pub(super) fn write_prepared<P: Payload<F>>(
        &mut self,
        k: u8,
        payload: &mut P,
    ) -> Result<u32, Fail> {
        let len = payload.len();
        let (addr, _) = self.log.write_batch(k, payload)?;
        self.count_written(len);
        Ok(addr)
    }

    /// Counts `len` payload bytes written toward the next checkpoint and
    /// the idle-time collection's credit.
    #[inline(never)]
    pub(super) fn count_written(&mut self, len: u32) {
        self.bytes_since_checkpoint = self.bytes_since_checkpoint.saturating_add(len);
        self.idle_credit = self.idle_credit.saturating_add(len);
    }
}

/// What [`bring_cold`](Store::bring_cold) did.
enum Brought {
    /// Brought at least one cold session into the table.
    Some,
    /// None is left to bring (a scrub has met every one).
    NoneLeft,
    /// Could not: no room for the checkpoint that frees a slot.
    None,
}

/// Whether a collection relocates a session in part, its bodies in the tail
/// alone (format 10, feature `sector-table`: what it keeps in later sectors
/// goes into moves records as the tail reaches them, `store/moves.rs`),
/// rather than whole when the room allows.
pub(super) const IN_PART: bool = cfg!(feature = "sector-table");

/// With relocation in part ([`IN_PART`]): the bytes of room a collection
/// must make for each byte it copies of the sessions not in use, or the
/// store is full (the sectors it cleans at most a fifth live in them). The
/// caller then deletes sessions, as ESP-Claw's warning asks, which leaves
/// the tail dead; cleaning what it would delete anyway thrashes (measured
/// in `docs/DESIGN.md`, stage 4, "Built: the copy limit"). What a refusal cannot
/// free is not held to it: the checkpoint, objects, memory, and sessions in
/// use (`in_use`, `store/dry_run.rs`).
#[cfg(feature = "sector-table")]
pub(super) const ROOM_PER_COPY: u64 = 4;

/// Payload bytes of a base that carries every body of `s`: the fixed part,
/// the id, the CHDX header, an entry and a CRC a record, and the bodies
/// (`size` counts a newline a record, which is not stored). (Relocation
/// in part never copies a session whole.)
#[cfg(not(feature = "sector-table"))]
pub(super) fn base_len(s: &Session) -> u32 {
    index_len(s) + s.size.saturating_sub(u32::from(s.records))
}

/// Payload bytes of a base of `s` that references every body in place.
pub(super) fn index_len(s: &Session) -> u32 {
    BASE_FIXED
        + u32::from(s.id_len)
        + (CHDX_HEADER_SIZE + CHDX_ENTRY_SIZE + 4) as u32
        + (CHDX_ENTRY_SIZE as u32 + 4) * u32::from(s.records)
}

/// What relocating `s` costs at least when it does not go whole, beside its
/// bodies in the tail: its index, framed.
pub(super) fn minimal_relocation(s: &Session, space: u64) -> u64 {
    framed(u64::from(index_len(s)), space)
}

/// The farthest reach a relocation in part tries first with `free`
/// sectors free: the largest power of two not above it (0 for none); the
/// next reaches halve it. Powers of two make the reaches a store tries with
/// more free sectors a superset of those it tries with fewer: the dry run
/// counts the room on the safe side (`store/dry_run.rs`), and the
/// relocation, having at least that room, then picks a reach at least as
/// far as the run did, never a nearer one that meets the session again
/// sooner.
#[inline(never)]
pub(super) fn first_reach(free: u32) -> u32 {
    free.checked_ilog2().map_or(0, |b| 1 << b)
}

/// `bytes` of payload with the chunk headers of the sectors it may span.
pub(super) fn framed(bytes: u64, unit: u64) -> u64 {
    bytes + u64::from(CHUNK_HEADER_LEN) * (bytes / unit + 2)
}

/// A payload copied from a stream on flash.
struct FlashCopy {
    from: u32,
    len: u32,
}

impl<F: NorFlash> Payload<F> for FlashCopy {
    fn len(&self) -> u32 {
        self.len
    }

    fn fill(&mut self, io: &mut Io<'_, F>, offset: u32, out: &mut [u8]) -> Result<(), Fail> {
        io.read_stream_after(self.from, offset, out)
    }
}
