//! Writing a session base (`docs/FORMAT.md`, "Session base"): turn-aware and
//! summary compaction, consolidation of a long chain, and relocation by
//! garbage collection all write one.
//!
//! A base replaces everything before it in the session. It holds the
//! session's fixed facts and id, an index in ESP-Claw's CHDX layout (14
//! bytes a kept record: the entry and the body's CRC) and the bodies it
//! carries. Compaction and consolidation reference the kept bodies where
//! they are ([`Embed::None`]), so dropped bodies become garbage that is never
//! copied; relocation copies the bodies of the sectors being released, or
//! all of them when there is room ([`Embed::UpTo`], [`Embed::All`]).
//!
//! Invariants: a base keeps only records whose batch checks out (a damaged
//! batch's records are left out, the rest kept); it is planned before it is
//! written and must land where planned, since its entries point at its own
//! bodies; RAM takes the new root only after the base commits.
//!
//! Power loss: a torn base does not exist; the old chain is still the
//! session, and the next compaction or collection redoes the work.

use core::borrow::BorrowMut;

use embedded_storage::nor_flash::NorFlash;

use super::{Priority, Store, Work};
use crate::chdx::{self, RecordType, CHDX_ENTRY_SIZE, CHDX_HEADER_SIZE};
use crate::cursor::{digest_stream, Chain, RecPos, RecordInfo, Records};
use crate::error::{fail, Fail};
use crate::layout::{CHUNK_HEADER_LEN, CRC};
use crate::log::{ring, Io, Payload};
use crate::session::SESSION_BASE;
use crate::session::{BaseFixed, Record, BASE_FIXED, MAX_SESSION_ID_BYTES};
use crate::turns::TurnCursor;

/// Which records a new base keeps.
#[derive(Clone, Copy)]
pub(super) enum Keep<'p> {
    All,
    Turns(&'p crate::turns::Plan),
    From(u64),
}

/// Which kept bodies a new base carries (copies) instead of referencing.
#[derive(Clone, Copy, PartialEq, Eq)]
pub(super) enum Embed {
    /// None: compaction and consolidation reference bodies in place.
    None,
    /// All: relocation of a whole session.
    All,
    /// Bodies starting in sectors up to this sector sequence: relocation of
    /// the part of a session in the sectors being reclaimed.
    UpTo(u32),
    /// Bodies with a byte in this sector (its index): a memory scrub
    /// emptying one sector. A session with nothing in it is not rewritten.
    #[cfg(feature = "memory")]
    Span(u32),
}

/// The ring's head as it was before a write, to tell a body's sector
/// sequence (`log::ring`).
#[derive(Clone, Copy)]
struct HeadBefore {
    head: u32,
    head_seq: u32,
    geo: crate::layout::Geometry,
}

impl HeadBefore {
    /// The ring's head now.
    fn of<F: NorFlash>(log: &crate::log::Log<F>) -> Self {
        HeadBefore {
            head: log.head(),
            head_seq: log.head_seq(),
            geo: log.geo(),
        }
    }

    /// The sector sequence of `addr`; 0 (older than any) for an address
    /// outside the ring, which only damage at rest can give. With the
    /// sector table (`log::ring`), the table's: a record lies in a sector
    /// in use before the write, and the sectors the write opens carry
    /// newer sequences than any of those.
    fn seq_of<F: NorFlash>(&self, io: &Io<'_, F>, addr: u32) -> u32 {
        let idx = (addr / self.geo.sector) % self.geo.count;
        #[cfg(feature = "sector-table")]
        if io.table.on() {
            return io.table.seq_of(idx).unwrap_or(0);
        }
        #[cfg(not(feature = "sector-table"))]
        let _ = io;
        ring::seq_back_from(&self.geo, self.head, self.head_seq, idx)
    }

    fn embeds<F: NorFlash>(&self, io: &Io<'_, F>, e: Embed, r: &RecordInfo) -> bool {
        match e {
            Embed::None => false,
            Embed::All => true,
            Embed::UpTo(seq) => self.seq_of(io, r.addr) <= seq,
            #[cfg(feature = "memory")]
            Embed::Span(index) => io.stream_touches(r.addr, r.len, index),
        }
    }
}

/// Where a pass is in the turns, and how many records it has passed (the
/// cursor's count).
#[derive(Clone, Copy)]
struct KeepState {
    turns: TurnCursor,
}

impl KeepState {
    const fn new() -> Self {
        KeepState {
            turns: TurnCursor::new(),
        }
    }

    fn keep(&mut self, mode: Keep<'_>, kind: RecordType) -> bool {
        let i = self.turns.records();
        let turn = self.turns.advance(kind);
        match mode {
            Keep::All => true,
            Keep::Turns(p) => p.keep(turn, kind),
            Keep::From(n) => i >= n,
        }
    }
}

impl<F: NorFlash, const MAX_SESSIONS: usize, W: BorrowMut<Work>> Store<F, MAX_SESSIONS, W> {
    /// Writes a new base for session `i` holding the records `keep` selects,
    /// after `summary` if given, its bodies referenced where they are
    /// (compaction, consolidation, repair; relocation is
    /// [`rewrite_base_gc`](Self::rewrite_base_gc)).
    #[inline(never)]
    pub(super) fn rewrite_base(
        &mut self,
        i: usize,
        keep: Keep<'_>,
        summary: Option<Record<'_>>,
        p: Priority,
    ) -> Result<(), Fail> {
        // Never inside a collection (a collection's rewrite is
        // `rewrite_base_gc`; no caller of this one runs in one): room
        // could not be made (`ensure_room` does not collect while `in_gc`
        // is set), and `in_gc` would be cleared under the collection.
        if self.in_gc {
            return Err(fail!(LogicBug, "a base rewritten inside a collection"));
        }
        // Make room first, for the largest base this can be: collecting
        // garbage may relocate this very session, so nothing is read before.
        let s = self.sessions[i];
        let estimate = BASE_FIXED
            + MAX_SESSION_ID_BYTES as u32
            + CHDX_HEADER_SIZE as u32
            + 14 * (u32::from(s.records) + 1)
            + summary.map_or(0, |r| r.body.len() as u32);
        self.ensure_room(estimate, p)?;
        // Garbage collection may have dropped a session damaged at rest,
        // which moves others in the table.
        let i = self.index_of(s.uid).ok_or(Fail::NOT_FOUND)?;
        self.in_gc = true;
        let result = self.rewrite_base_now(i, keep, summary, Embed::None, u64::MAX);
        self.in_gc = false;
        match result? {
            0 => Err(self.log.parked().full(estimate, 0)),
            _ => Ok(()),
        }
    }

    /// A new base for session `i` during garbage collection (relocation,
    /// every record kept), carrying the bodies `embed` selects: the bytes
    /// of the bodies it copied out of the tail sector, or `None`, with
    /// nothing written, if it would exceed `budget` payload bytes (those
    /// bodies aside) or the free sectors (not an error: inside a
    /// collection, room is not made).
    #[inline(always)]
    pub(super) fn rewrite_base_gc(
        &mut self,
        i: usize,
        embed: Embed,
        budget: u64,
    ) -> Result<Option<u32>, Fail> {
        Ok(self
            .rewrite_base_now(i, Keep::All, None, embed, budget)?
            .checked_sub(1))
    }

    /// What relocating session `i` in part, at tail sequence `tail`, would
    /// carry for each reach that [`relocate_hot`](Self::relocate_hot) tries
    /// (`reach.free` sectors past the tail, then half as many, down to
    /// none): the bodies `Embed::UpTo` copies, and the oldest sector after
    /// those that the session keeps a body in, where the ring meets it
    /// again. Reads the records where they are; writes nothing. Out of
    /// line, so its cursor is off the caller's stack afterwards.
    #[inline(never)]
    pub(super) fn reach_bodies(
        &mut self,
        i: usize,
        tail: u32,
        reach: &mut super::dry_run::Reach,
    ) -> Result<(), Fail> {
        let ring = HeadBefore::of(&self.log);
        let s = self.sessions[i];
        let ring_view = self.log.ring();
        let mut recs = Records::EMPTY;
        recs.start(&mut self.log.io(), &s, Some(ring_view))?;
        reach.clear();
        #[cfg(feature = "sector-table")]
        {
            reach.moves = recs.chain().moves_len;
            reach.appended = 0;
        }
        // (The sector of the base that is the session's root: the bodies
        // in it are those a collection or a compaction carried.)
        #[cfg(feature = "sector-table")]
        let carried = |r: &crate::cursor::RecordInfo| {
            r.segment == 0 && s.root_is_base && r.addr / ring.geo.sector == s.root / ring.geo.sector
        };
        while let Some(r) = recs.next(&mut self.log.io())? {
            // (A damaged record is lost: no relocation carries it.)
            if !r.damaged {
                let seq = ring.seq_of(&self.log.io(), r.addr);
                reach.add(tail, seq, r.len);
                // Where the caller appended it: not moved, not carried.
                #[cfg(feature = "sector-table")]
                if !recs.chain().is_moves(r.segment) && !carried(&r) {
                    reach.appended = reach.appended.max(seq);
                }
            }
        }
        Ok(())
    }

    /// [`rewrite_base`](Self::rewrite_base) with no garbage collection,
    /// within `budget` payload bytes beside the bodies it copies out of the
    /// tail sector: 0 if the room or `budget` is short, else 1 and the
    /// bytes of those bodies (a word; see `Io::chunk_crc_ok_word`).
    fn rewrite_base_now(
        &mut self,
        i: usize,
        keep: Keep<'_>,
        summary: Option<Record<'_>>,
        embed: Embed,
        budget: u64,
    ) -> Result<u32, Fail> {
        let ring = HeadBefore::of(&self.log);
        let s = self.sessions[i];
        let ring_view = self.log.ring();
        let mut recs = Records::EMPTY;
        recs.start(&mut self.log.io(), &s, Some(ring_view))?;
        // Check the batches whose bodies will be referenced or copied; a
        // damaged one is left out (its records are lost, the rest kept),
        // after the chain is found again by a scan of the log, as a read
        // does, in case the damage reached its pointer.
        // A repair (every record kept) finds the chain again first; a
        // compaction does not, as its plan (`keep`) counts records along
        // the chain the pointers give.
        let repair = matches!(keep, Keep::All);
        let mut k = 0;
        while let Some(&addr) = recs.chain().addrs.get(k).filter(|_| k < recs.chain().len) {
            if !(k == 0 && s.root_is_base) && self.log.verify(addr)?.is_none() {
                if repair && recs.rescan(&mut self.log.io(), &s, ring_view, k)? {
                    k = 0;
                    continue;
                }
                recs.skip_segment(k);
            }
            k += 1;
        }
        // A scrub rewrites only a session with a byte in its sector: a batch
        // of its chain there, or a body (below).
        #[cfg(feature = "memory")]
        let mut touched = match embed {
            Embed::Span(index) => {
                let mut t = false;
                let chain = recs.chain();
                for &addr in chain.addrs.iter().take(chain.len) {
                    t |= self.log.batch_touches(addr, index)?;
                }
                t
            }
            _ => true,
        };
        // Pre-pass: what is kept.
        let mut state = KeepState::new();
        let mut count: u32 = u32::from(summary.is_some());
        let mut size: u32 = summary.map_or(0, |r| r.body.len() as u32 + 1);
        let mut embedded: u32 = summary.map_or(0, |r| r.body.len() as u32);
        // The bodies copied out of the tail sector: a relocation's budget
        // leaves them out, as the sector held back for them is its own.
        let tail_seq = self.log.tail_seq();
        let mut in_tail: u32 = 0;
        // The oldest sector a referenced body starts in (u32::MAX: none).
        let mut oldest_ref = u32::MAX;
        // The chain segments a referenced body lies in (the root's: in it
        // or, for a base, where the base names it): the others die with
        // the new base (`store/dead.rs`).
        #[cfg(feature = "sector-table")]
        let mut needed: u128 = 0;
        while let Some(r) = recs.next(&mut self.log.io())? {
            if r.damaged {
                continue;
            }
            if state.keep(keep, r.kind) {
                count += 1;
                size += r.len + 1;
                if ring.embeds(&self.log.io(), embed, &r) {
                    embedded += r.len;
                    if matches!(embed, Embed::All | Embed::UpTo(_))
                        && ring.seq_of(&self.log.io(), r.addr) <= tail_seq
                    {
                        in_tail += r.len;
                    }
                    #[cfg(feature = "memory")]
                    {
                        touched = true;
                    }
                } else {
                    oldest_ref = oldest_ref.min(ring.seq_of(&self.log.io(), r.addr));
                    #[cfg(feature = "sector-table")]
                    {
                        needed |= 1 << r.segment.min(127);
                    }
                }
            }
        }
        if count == 0 {
            if summary.is_none() && matches!(keep, Keep::All) {
                return Err(self.log.parked().at(
                    fail!(Corrupted, "no record of the session checks out"),
                    s.root,
                ));
            }
            return Err(fail!(LogicBug, "a base with no records"));
        }
        #[cfg(feature = "memory")]
        if !touched {
            return Ok(1);
        }
        recs.rewind();
        let id_len = s.id_len as u32;
        let entries_at = BASE_FIXED + id_len + CHDX_HEADER_SIZE as u32;
        let crcs_at = entries_at + count * CHDX_ENTRY_SIZE as u32;
        let bodies_at = crcs_at + count * 4;
        let total = bodies_at + embedded;
        let (start, opens) = self.log.plan(total);
        if opens > self.log.free_sectors() || u64::from(total - in_tail) > budget {
            return Ok(0);
        }
        let payload_start = start + CHUNK_HEADER_LEN;
        // The base starts in the head sector or, if that is full, the next.
        let new_sector_seq = if self.log.geo().sector_of(start) == self.log.head() {
            self.log.head_seq()
        } else {
            self.log.head_seq() + 1
        };
        // A relocating base holds every live body itself; otherwise the
        // referenced bodies stay where they are.
        let oldest = oldest_ref.min(new_sector_seq);
        let work: &mut Work = self.work.borrow_mut();
        let w = &mut work.base;
        // The id and the CHDX header, one after the other.
        let Some(id) = w.head.first_chunk_mut() else {
            return Err(fail!(LogicBug, "base head buffer too short"));
        };
        if super::sessions::session_id_in(&mut self.log, &s, id)?.is_none() {
            return Err(self.log.parked().at(
                fail!(Corrupted, "a session's name is damaged beyond repair"),
                s.root,
            ));
        }
        // (Always there: the id is at most `MAX_SESSION_ID_BYTES` long.)
        if let Some(h) = w.head.get_mut(id_len as usize..) {
            if let Some(h) = h.first_chunk_mut() {
                *h = chdx::encode_header();
            }
        }
        // One chain, three positions on it.
        let (chain, pos) = recs.split();
        w.chain = *chain;
        // (A fresh sweep sets every `cur_*` field before it is read.)
        for sweep in &mut w.sweeps {
            sweep.pos = *pos;
            sweep.rewind();
        }
        let mut payload = BasePayload {
            fixed: [0u8; BASE_FIXED as usize],
            summary,
            keep,
            embed,
            ring,
            payload_start,
            entries_at,
            crcs_at,
            bodies_at,
            total,
            last_end: 0,
            w,
        };
        // The fixed part, encoded in place.
        BaseFixed {
            uid: s.uid,
            flags: s.flags,
            id_len: s.id_len,
            size,
            count,
            oldest,
        }
        .encode(&mut payload.fixed);
        let (addr, _) = self.log.write_batch(SESSION_BASE, &mut payload)?;
        if addr != start {
            return Err(fail!(LogicBug, "base landed elsewhere than planned"));
        }
        // A relocation at the tail: what it copied out of the tail, from
        // later sectors, and its index (`Store::cleaning`).
        #[cfg(feature = "sector-table")]
        if matches!(embed, Embed::All | Embed::UpTo(_)) {
            let c = &mut self.cleaning;
            c.tail_live_bytes += u64::from(in_tail);
            c.ahead_bytes += u64::from(embedded - in_tail);
            c.index_bytes += u64::from(bodies_at);
        }
        self.bytes_since_checkpoint = self.bytes_since_checkpoint.saturating_add(total);
        #[cfg(feature = "sector-table")]
        let was = s;
        let s = &mut self.sessions[i];
        s.root = addr;
        s.head = addr;
        s.root_is_base = true;
        s.chain = 0;
        s.records = count as u16;
        s.size = size;
        s.oldest = oldest;
        s.dirty = true;
        // A base that references nothing in place leaves every batch of
        // the session as it was dead; one that does, the batches of its
        // chain that hold no body it names (but a base at the root, whose
        // bodies it may name) (`store/dead.rs`).
        #[cfg(feature = "sector-table")]
        if oldest_ref == u32::MAX {
            recs.rewind();
            self.records_died(&mut recs, &was);
        } else {
            for k in usize::from(was.root_is_base)..recs.chain().len.min(127) {
                if needed & 1 << k == 0 {
                    self.batch_died(recs.chain().addrs[k]);
                }
            }
        }
        Ok(1 + in_tail)
    }
}

/// One sequential pass over the kept records of a base being written.
#[derive(Clone, Copy)]
struct Sweep {
    pos: RecPos,
    state: KeepState,
    /// Kept records passed so far, the summary counting as the first: the
    /// current one is number `passed - 1`.
    passed: u32,
    /// The current record's entry fields: its type and format bytes, its
    /// body's address (0 for the summary) and CRC (when known).
    cur_type: u8,
    cur_format: u8,
    cur_addr: u32,
    cur_crc: Option<u32>,
    /// The current record's body length, and whether the base carries it.
    cur_len: u32,
    cur_embedded: bool,
    /// Offset of the current record's body within the embedded-bodies
    /// section (if it is there).
    embed_off: u32,
}

impl Sweep {
    const fn new(pos: RecPos) -> Self {
        Sweep {
            pos,
            state: KeepState::new(),
            passed: 0,
            cur_type: 0,
            cur_format: 0,
            cur_addr: 0,
            cur_crc: None,
            cur_len: 0,
            cur_embedded: false,
            embed_off: 0,
        }
    }

    fn rewind(&mut self) {
        self.pos.rewind();
        self.state = KeepState::new();
        self.passed = 0;
        self.cur_len = 0;
        self.cur_embedded = false;
        self.embed_off = 0;
    }
}

/// A base's payload, produced piece by piece as the log writes it: the
/// fixed part and the id, then the CHDX entries, the CRCs and the embedded
/// bodies, each section from its own sweep over the kept records.
struct BasePayload<'p, 'r, 'w> {
    fixed: [u8; BASE_FIXED as usize],
    summary: Option<Record<'r>>,
    keep: Keep<'p>,
    embed: Embed,
    ring: HeadBefore,
    payload_start: u32,
    entries_at: u32,
    crcs_at: u32,
    bodies_at: u32,
    total: u32,
    last_end: u32,
    /// The chain and the three sweeps, in the work area.
    w: &'w mut BaseWork,
}

/// What a base being written walks: the session's chain and three sweeps
/// over it (entries, CRCs, bodies). It lives in the work area: it is a few
/// KiB, and no base is written while another is (a base is written with no
/// collection under it).
pub(crate) struct BaseWork {
    chain: Chain,
    /// Indexed by [`ENTRIES`], [`CRCS`], [`BODIES`].
    sweeps: [Sweep; 3],
    /// What a base holds between its fixed part and its entries: the
    /// session's id, then the CHDX header.
    head: [u8; HEAD_MAX],
}

/// Longest run of bytes between a base's fixed part and its entries
/// ([`BaseWork::head`]).
const HEAD_MAX: usize = MAX_SESSION_ID_BYTES + CHDX_HEADER_SIZE;

/// The sweep of each section, in [`BaseWork::sweeps`].
const ENTRIES: usize = 0;
const CRCS: usize = 1;
const BODIES: usize = 2;

impl BaseWork {
    /// The chain and one position on it, for a moves record being written
    /// (`store/moves.rs`; no base is written meanwhile).
    #[cfg(feature = "sector-table")]
    pub(crate) fn chain_and_pos(&mut self) -> (&mut Chain, &mut RecPos) {
        (&mut self.chain, &mut self.sweeps[BODIES].pos)
    }

    /// An empty one, for the work area.
    pub(crate) const EMPTY: BaseWork = BaseWork {
        chain: Chain::EMPTY,
        sweeps: [Sweep::new(RecPos::EMPTY); 3],
        head: [0; HEAD_MAX],
    };
}

impl<'r> BasePayload<'_, 'r, '_> {
    /// Moves sweep `which` to kept record `k` (the summary, if there is
    /// one, is record 0), its fields in the sweep's `cur_*`; returns its
    /// body's offset in the embedded section, or `u32::MAX` if the base
    /// does not carry it (a word, in registers).
    fn seek<F: NorFlash>(&mut self, io: &mut Io<'_, F>, which: usize, k: u32) -> Result<u32, Fail> {
        let (keep, summary, embed, ring) = (self.keep, self.summary, self.embed, &self.ring);
        let BaseWork { chain, sweeps, .. } = &mut *self.w;
        let sweep = &mut sweeps[which];
        if sweep.passed > k + 1 {
            sweep.rewind();
        }
        while sweep.passed <= k {
            // Account the current record's embedded body before moving on.
            if sweep.cur_embedded {
                sweep.embed_off += sweep.cur_len;
            }
            let (kind, format, addr, crc, len, embedded) = match summary {
                // The summary is always carried.
                Some(s) if sweep.passed == 0 => (
                    s.kind,
                    s.format,
                    0,
                    Some(CRC.checksum(s.body)),
                    s.body.len() as u32,
                    true,
                ),
                _ => {
                    let r = loop {
                        let r = sweep
                            .pos
                            .next(io, chain)?
                            .ok_or(fail!(LogicBug, "base sweep ran out of records"))?;
                        if !r.damaged && sweep.state.keep(keep, r.kind) {
                            break r;
                        }
                    };
                    (
                        r.kind,
                        r.format,
                        r.addr,
                        r.crc,
                        r.len,
                        ring.embeds(io, embed, &r),
                    )
                }
            };
            sweep.cur_type = kind.as_u8();
            sweep.cur_format = format.as_u8();
            sweep.cur_addr = addr;
            sweep.cur_crc = crc;
            sweep.cur_len = len;
            sweep.cur_embedded = embedded;
            sweep.passed += 1;
        }
        Ok(if sweep.cur_embedded {
            sweep.embed_off
        } else {
            u32::MAX
        })
    }
}

impl<F: NorFlash> Payload<F> for BasePayload<'_, '_, '_> {
    fn len(&self) -> u32 {
        self.total
    }

    fn fill(&mut self, io: &mut Io<'_, F>, offset: u32, out: &mut [u8]) -> Result<(), Fail> {
        if offset < self.last_end {
            // A new pass over this chunk (checksum, then program).
            for sweep in &mut self.w.sweeps {
                sweep.rewind();
            }
        }
        self.last_end = offset + out.len() as u32;
        let mut done = 0usize;
        while done < out.len() {
            let p = offset + done as u32;
            let rest = out.len() - done;
            // Each section is copied from `src`, a slice of the section's
            // bytes from `p` on (the id and the CHDX header from the work
            // area, an entry or a CRC built in `small`), or read straight
            // into `out` (a carried body on flash).
            let mut small = [0u8; CHDX_ENTRY_SIZE];
            let src: &[u8] = if p < BASE_FIXED {
                &self.fixed[p as usize..]
            } else if p < self.entries_at {
                &self.w.head[(p - BASE_FIXED) as usize..(self.entries_at - BASE_FIXED) as usize]
            } else if p >= self.bodies_at {
                // Embedded bodies, in kept order.
                let rel = p - self.bodies_at;
                let mut k = self.w.sweeps[BODIES].passed.saturating_sub(1);
                loop {
                    let o = self.seek(io, BODIES, k)?;
                    let c = &self.w.sweeps[BODIES];
                    let len = c.cur_len;
                    // A referenced record between carried ones has no
                    // place in this section.
                    if o == u32::MAX {
                        k += 1;
                        continue;
                    }
                    if rel < o {
                        return Err(fail!(LogicBug, "base body sweep went backwards"));
                    }
                    if rel < o + len {
                        let j = rel - o;
                        match self.summary {
                            Some(s) if k == 0 => break &s.body[j as usize..],
                            _ => {
                                let n = ((len - j) as usize).min(rest);
                                io.read_stream_after(c.cur_addr, j, &mut out[done..done + n])?;
                                done += n;
                                break &[];
                            }
                        }
                    }
                    k += 1;
                }
            } else {
                // An entry or a CRC: one seek, for the sweep of its
                // section.
                let (which, at, end) = match p < self.crcs_at {
                    true => (ENTRIES, self.entries_at, CHDX_ENTRY_SIZE),
                    false => (CRCS, self.crcs_at, 4),
                };
                let k = (p - at) / end as u32;
                let j = (p - at) % end as u32;
                let emb = self.seek(io, which, k)?;
                if which == ENTRIES {
                    let c = &self.w.sweeps[ENTRIES];
                    let addr = match emb {
                        u32::MAX => c.cur_addr,
                        off => io.planned_advance(self.payload_start, self.bodies_at + off),
                    };
                    small = chdx::RawEntry {
                        offset: addr,
                        length: c.cur_len + 1,
                        record_type: c.cur_type,
                        backend_format: c.cur_format,
                    }
                    .encode();
                } else {
                    let c = &self.w.sweeps[CRCS];
                    let crc = match c.cur_crc {
                        Some(crc) => crc,
                        None => {
                            let mut d = CRC.digest();
                            digest_stream(io, &mut d, c.cur_addr, c.cur_len, &mut [0u8; 64])?;
                            d.finalize()
                        }
                    };
                    crate::layout::put_u32(&mut small, 0, crc);
                }
                &small[j as usize..end]
            };
            let n = src.len().min(rest);
            out[done..done + n].copy_from_slice(&src[..n]);
            done += n;
        }
        Ok(())
    }
}
