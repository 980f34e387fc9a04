//! Moves records (format 10, feature `sector-table`; stage 4 of
//! `docs/DESIGN.md`, "Format 10 in stages"): releasing the tail sector, a
//! collection moves the bodies a session's base names there into a small
//! record of the session's chain (`docs/FORMAT.md`, "Session moves")
//! instead of writing the session a new base, whose index costs 14 bytes a
//! record of the whole session.
//!
//! Owns: when a session's part in the tail goes into a moves record, and
//! writing it. A session qualifies when its root is a base outside the
//! tail sector (so every element of its chain is: they are newer), the
//! only bytes it has in the tail are bodies its base names, its chain has
//! room for one more element, and it holds fewer than
//! [`MOVES_MAX`] moves records; anything else (a chain or a record that
//! does not check out included) is left to a new base, as before.
//!
//! Invariants: the record names the sector and the sequence it carries; its
//! bodies are, in record order, every body of the base whose place (after
//! the moves records before it) has a byte in that sector, copied whole;
//! its fixed part carries the session's oldest sector once it commits, so
//! that mount's replay sets it as the running store did. RAM takes the new
//! head only once the record commits.
//!
//! Power loss: a torn moves record does not exist; the session stays as it
//! was, its bodies still in the tail sector, which is not released before
//! the collection that moves everything out of it has committed.

use core::borrow::BorrowMut;

use embedded_storage::nor_flash::NorFlash;

use super::{Store, Work};
use crate::cursor::{Chain, RecPos, Records};
use crate::error::{fail, Fail};
use crate::log::{Io, Payload};
use crate::session::{MovesFixed, CHAIN_MAX, MOVES_FIXED, MOVES_MAX, SESSION_MOVES};

impl<F: NorFlash, const MAX_SESSIONS: usize, W: BorrowMut<Work>> Store<F, MAX_SESSIONS, W> {
    /// Moves the bodies of session `i` in the tail sector (sequence
    /// `tail_seq`) into a moves record, if the session qualifies (above)
    /// and the record's fixed part fits `budget` and the free sectors (the
    /// bodies come out of the sector held back for the tail's, as a
    /// relocating base's do). The bytes of the bodies moved, or `None`
    /// with nothing written.
    #[inline(never)]
    pub(super) fn write_moves(
        &mut self,
        i: usize,
        tail_seq: u32,
        budget: u64,
    ) -> Result<Option<u32>, Fail> {
        let s = self.sessions[i];
        let geo = self.log.geo();
        let root_seq = self.log.seq_of_sector(geo.sector_of(s.root));
        let tail = self.log.sector_of_seq(tail_seq);
        let (Some(root_seq), Some(tail)) = (root_seq, tail) else {
            return Ok(None);
        };
        if !s.root_is_base || root_seq <= tail_seq || s.chain as usize >= CHAIN_MAX {
            return Ok(None);
        }
        let mut recs = Records::EMPTY;
        match recs.start(&mut self.log.io(), &s, None) {
            Ok(()) => {}
            Err(e) if e.kind() == crate::error::Kind::Flash => return Err(e),
            // Damage: a new base repairs what it can.
            Err(_) => return Ok(None),
        }
        if recs.chain().moves_len >= MOVES_MAX {
            return Ok(None);
        }
        let mut moved = 0u32;
        let mut oldest = root_seq;
        while let Some(r) = recs.next(&mut self.log.io())? {
            if r.damaged || recs.degraded() {
                return Ok(None);
            }
            let io = self.log.io();
            if io.stream_touches(r.addr, r.len, tail) {
                if r.crc.is_none() {
                    // A batch's body in the tail: its batch is there too.
                    return Ok(None);
                }
                moved += r.len;
            } else if let Some(q) = self.log.seq_of_sector(geo.sector_of(r.addr)) {
                oldest = oldest.min(q);
            }
        }
        let total = MOVES_FIXED + moved;
        let (_, opens) = self.log.plan(total);
        if opens > self.log.free_sectors() || u64::from(MOVES_FIXED) > budget {
            return Ok(None);
        }
        recs.rewind();
        let fixed = MovesFixed {
            uid: s.uid,
            prev: s.head,
            sector: tail,
            seq: tail_seq,
            oldest,
        };
        let work: &mut Work = self.work.borrow_mut();
        let (chain, pos) = work.base.chain_and_pos();
        let (c, p) = recs.split();
        *chain = *c;
        *pos = *p;
        let mut payload = MovesPayload {
            fixed: fixed.encode(),
            tail,
            total,
            chain,
            pos,
            cur: (0, 0),
            cur_off: 0,
            started: false,
            last_end: 0,
        };
        let (addr, _) = self.log.write_batch(SESSION_MOVES, &mut payload)?;
        self.bytes_since_checkpoint = self.bytes_since_checkpoint.saturating_add(total);
        let c = &mut self.cleaning;
        c.tail_live_bytes += u64::from(moved);
        c.moves_records += 1;
        let s = &mut self.sessions[i];
        s.head = addr;
        s.chain += 1;
        s.oldest = oldest;
        s.dirty = true;
        Ok(Some(moved))
    }
}

/// A moves record's payload, produced as the log writes it: the fixed part,
/// then the bodies moved, read through one pass over the session's records
/// (started again when the log asks for a chunk a second time).
struct MovesPayload<'w> {
    fixed: [u8; MOVES_FIXED as usize],
    /// The sector emptied (an index).
    tail: u32,
    total: u32,
    chain: &'w mut Chain,
    pos: &'w mut RecPos,
    /// The current body moved: its address and length, and its offset
    /// among the bodies.
    cur: (u32, u32),
    cur_off: u32,
    started: bool,
    last_end: u32,
}

impl<F: NorFlash> Payload<F> for MovesPayload<'_> {
    fn len(&self) -> u32 {
        self.total
    }

    fn fill(&mut self, io: &mut Io<'_, F>, offset: u32, out: &mut [u8]) -> Result<(), Fail> {
        if offset < self.last_end {
            self.pos.rewind();
            (self.cur, self.cur_off, self.started) = ((0, 0), 0, false);
        }
        self.last_end = offset + out.len() as u32;
        let mut done = 0usize;
        while done < out.len() {
            let p = offset + done as u32;
            if p < MOVES_FIXED {
                let rest = &self.fixed[p as usize..];
                let n = rest.len().min(out.len() - done);
                out[done..done + n].copy_from_slice(&rest[..n]);
                done += n;
                continue;
            }
            let rel = p - MOVES_FIXED;
            // On to the body that holds `rel`.
            while !self.started || rel >= self.cur_off + self.cur.1 {
                if self.started {
                    self.cur_off += self.cur.1;
                }
                let r = self
                    .pos
                    .next(io, self.chain)?
                    .ok_or(fail!(LogicBug, "a moves record ran out of bodies"))?;
                let moves =
                    r.crc.is_some() && !r.damaged && io.stream_touches(r.addr, r.len, self.tail);
                self.cur = if moves { (r.addr, r.len) } else { (0, 0) };
                self.started = true;
            }
            if rel < self.cur_off {
                return Err(fail!(LogicBug, "a moves record's bodies went backwards"));
            }
            let j = rel - self.cur_off;
            let n = ((self.cur.1 - j) as usize).min(out.len() - done);
            io.read_stream_after(self.cur.0, j, &mut out[done..done + n])?;
            done += n;
        }
        Ok(())
    }
}
