//! A checkpoint's payload as the log writes it (`docs/FORMAT.md`,
//! "Checkpoint"): its bytes made one at a time from the RAM state, the cold
//! sessions read from the directory as they are reached, and with format
//! 10 the sector table and the dead bytes per sector read from the log's
//! as they are written.
//!
//! Owns only the encoding; what goes in it, and when a checkpoint is
//! written, is `checkpoint.rs`'s. Invariant: the bytes are those
//! [`CheckpointPayload::len`] counts, in the order the reader reads them.
//!
//! Power loss: nothing here writes; the log frames and commits the batch.

use embedded_storage::nor_flash::NorFlash;

use super::super::directory::{ColdCursor, DirView};
use super::super::memory::MEM_STATE_ENCODED;
use super::super::objects::{ObjectSlot, OBJ_ENCODED};
use super::CKPT_FIXED;
#[cfg(feature = "sector-table")]
use super::{CKPT_DEAD_FIXED, CKPT_DELTA_DEAD_FIXED, CKPT_TABLE_FIXED};
use super::{CKPT_DELTA_FIXED, CKPT_WASTE};
use crate::error::{fail, Fail};
use crate::layout::NO_ADDR;
use crate::log::{Io, Payload};
use crate::session::{Session, SESSION_ENCODED};

pub(super) struct CheckpointPayload<'a> {
    /// The fixed parts, as little-endian words (those past `fixed_len` are
    /// not written).
    pub(super) fixed: [u32; (CKPT_FIXED + CKPT_WASTE + CKPT_DELTA_FIXED) / 4],
    pub(super) fixed_len: usize,
    pub(super) sessions: &'a [Session],
    /// A delta carries only the sessions changed since the full checkpoint.
    pub(super) only_dirty: bool,
    /// Sessions carried.
    pub(super) count: usize,
    pub(super) deleted: &'a [u32],
    pub(super) objects: &'a [ObjectSlot],
    /// The memory state's encoding, as little-endian words.
    pub(super) mem: [u32; MEM_STATE_ENCODED / 4],
    /// A full checkpoint's cold sessions, read from the directory as the
    /// payload is written (after the table's).
    pub(super) cold: Option<DirView<'a>>,
    pub(super) cursor: ColdCursor,
    /// The index among the cold sessions of the one the cursor gives next
    /// (the cursor's `cur` is the one before it).
    pub(super) next_cold: usize,
    /// The session entry being written, encoded.
    pub(super) entry: [u8; SESSION_ENCODED],
    #[cfg(feature = "sector-table")]
    /// A full checkpoint of format 10's sector table: the base sequence,
    /// the newest sequence and the sectors (all 0: none).
    pub(super) table: [u32; 3],
    #[cfg(feature = "sector-table")]
    /// Format 10's dead bytes: the newest sequence counted, the sectors of
    /// a full checkpoint or the entries of a delta (0 sectors: no such
    /// part), and 1 for a delta's part.
    pub(super) dead: [u32; 3],
}

impl CheckpointPayload<'_> {
    /// Session entry `e` of the payload encoded in `entry`: the table's
    /// (its changed ones in a delta), then a full checkpoint's cold ones,
    /// read from the directory: the cursor goes on from where it is, or
    /// starts over.
    fn session_entry<F: NorFlash>(&mut self, io: &mut Io<'_, F>, e: usize) -> Result<(), Fail> {
        if let Some(s) = nth_session(self.sessions, self.only_dirty, e) {
            s.encode(&mut self.entry);
            return Ok(());
        }
        let Some(view) = &self.cold else {
            return Err(fail!(LogicBug, "checkpoint payload overrun"));
        };
        // (A full checkpoint: past the table's sessions.)
        let c = e.wrapping_sub(self.sessions.len());
        if c + 1 != self.next_cold {
            if c < self.next_cold {
                self.cursor = ColdCursor::new(view.dir);
                self.next_cold = 0;
            }
            while self.next_cold <= c {
                if self.cursor.next(io, view)? == 0 {
                    let f = fail!(
                        Corrupted,
                        "the session directory holds fewer sessions than counted"
                    );
                    // (Named at the full checkpoint: a directory with cold
                    // sessions has one.)
                    let full = view.dir.chain().first().copied().unwrap_or(NO_ADDR);
                    return Err(io.parked().at(f, full));
                }
                self.next_cold += 1;
            }
        }
        self.cursor.cur.encode(&mut self.entry);
        Ok(())
    }

    /// The byte at payload offset `p`.
    fn byte<F: NorFlash>(&mut self, io: &mut Io<'_, F>, p: usize) -> Result<u8, Fail> {
        let sessions_at = self.fixed_len;
        let deleted_at = sessions_at + self.count * SESSION_ENCODED;
        let objects_at = deleted_at + self.deleted.len() * 4;
        let mem_at = objects_at + self.objects.len() * OBJ_ENCODED;
        let b = if p < sessions_at {
            word_byte(&self.fixed, p)
        } else if p < deleted_at {
            let q = p - sessions_at;
            self.session_entry(io, q / SESSION_ENCODED)?;
            Some(self.entry[q % SESSION_ENCODED])
        } else if p < objects_at {
            word_byte(self.deleted, p - deleted_at)
        } else if p < mem_at {
            let q = p - objects_at;
            self.objects
                .get(q / OBJ_ENCODED)
                .and_then(|o| word_byte(&o.words(), q % OBJ_ENCODED))
        } else {
            self.tail_byte(io, p - mem_at)
        };
        b.ok_or(fail!(LogicBug, "checkpoint payload overrun"))
    }
}

impl CheckpointPayload<'_> {
    /// Byte `q` of the sector table's part (format 10): the base and the
    /// newest sequence, then each sector's entry, read from the log's
    /// table as it is written (a sector the head opens meanwhile has a
    /// newer sequence than the newest recorded, as its header says).
    #[cfg(feature = "sector-table")]
    fn table_byte<F: NorFlash>(&self, io: &mut Io<'_, F>, q: usize) -> Option<u8> {
        if q < CKPT_TABLE_FIXED {
            return word_byte(&self.table[..2], q);
        }
        let e = (q - CKPT_TABLE_FIXED) / 2;
        if e as u32 >= self.table[2] {
            return None;
        }
        let entry = io.table.entry(e as u32, self.table[0]);
        Some((entry >> (8 * ((q - CKPT_TABLE_FIXED) % 2))) as u8)
    }

    /// Byte `q` of the dead bytes part (format 10): the newest sequence
    /// counted, then each sector's count in 16ths of a sector, two
    /// sectors a byte (the first in the low half), read from the log's
    /// table as it is written.
    #[cfg(feature = "sector-table")]
    fn dead_byte<F: NorFlash>(&self, io: &mut Io<'_, F>, q: usize) -> Option<u8> {
        if self.dead[2] != 0 {
            // A delta's: the newest sequence and the entries, then each
            // entry as the log has it now (one for a sector the write
            // opens carries nothing: `log/ring.rs`).
            if q < CKPT_DELTA_DEAD_FIXED {
                return word_byte(&self.dead[..2], q);
            }
            let e = (q - CKPT_DELTA_DEAD_FIXED) / 4;
            if e as u32 >= self.dead[1] {
                return None;
            }
            let entry = io.table.dead_pending().get(e).copied().unwrap_or(0);
            return word_byte(&[entry], q % 4);
        }
        if q < CKPT_DEAD_FIXED {
            return word_byte(&self.dead[..1], q);
        }
        let e = 2 * (q - CKPT_DEAD_FIXED) as u32;
        (e < self.dead[1]).then(|| {
            let units = |i: u32| match i < self.dead[1] {
                true => io.table.dead_units(i, io.geo.sector),
                false => 0,
            };
            units(e) | units(e + 1) << 4
        })
    }

    /// Byte `q` of the memory state and what follows it: with format 10,
    /// the sector table's part and the dead bytes part.
    #[inline(always)]
    fn tail_byte<F: NorFlash>(&self, io: &mut Io<'_, F>, q: usize) -> Option<u8> {
        #[cfg(feature = "sector-table")]
        if q >= MEM_STATE_ENCODED {
            let q = q - MEM_STATE_ENCODED;
            return match q.checked_sub(self.table_len()) {
                Some(d) => self.dead_byte(io, d),
                None => self.table_byte(io, q),
            };
        }
        let _ = io;
        word_byte(&self.mem, q)
    }

    /// Bytes of the dead bytes part (0: none).
    #[inline(always)]
    fn dead_len(&self) -> usize {
        #[cfg(feature = "sector-table")]
        match (self.dead[1], self.dead[2]) {
            (0, _) => {}
            (n, 0) => return CKPT_DEAD_FIXED + n.div_ceil(2) as usize,
            (n, _) => return CKPT_DELTA_DEAD_FIXED + 4 * n as usize,
        }
        0
    }

    /// Bytes of the sector table's part (0: none).
    #[inline(always)]
    fn table_len(&self) -> usize {
        #[cfg(feature = "sector-table")]
        if self.table[2] != 0 {
            return CKPT_TABLE_FIXED + 2 * self.table[2] as usize;
        }
        0
    }
}

/// Session `k` of `sessions`, counting only the changed ones with
/// `only_dirty`.
fn nth_session(sessions: &[Session], only_dirty: bool, mut k: usize) -> Option<&Session> {
    for s in sessions {
        if only_dirty && !s.dirty {
            continue;
        }
        if k == 0 {
            return Some(s);
        }
        k -= 1;
    }
    None
}

/// Byte `q` of `words` laid out as little-endian words; `None` past them.
#[inline(never)]
fn word_byte(words: &[u32], q: usize) -> Option<u8> {
    Some((words.get(q / 4)? >> (8 * (q % 4))) as u8)
}

impl<F: NorFlash> Payload<F> for CheckpointPayload<'_> {
    fn len(&self) -> u32 {
        (self.fixed_len
            + self.count * SESSION_ENCODED
            + self.deleted.len() * 4
            + self.objects.len() * OBJ_ENCODED
            + MEM_STATE_ENCODED
            + self.table_len()
            + self.dead_len()) as u32
    }

    fn fill(&mut self, io: &mut Io<'_, F>, offset: u32, out: &mut [u8]) -> Result<(), Fail> {
        for (k, o) in out.iter_mut().enumerate() {
            *o = self.byte(io, offset as usize + k)?;
        }
        Ok(())
    }
}

/// The deletions since a full checkpoint (`since_full`) that no checkpoint
/// has carried yet: those after the first `written`, which the newest
/// delta carried ([`Store::deleted_since_delta`]). A free function, so that
/// a checkpoint's writer can hold them while it writes to the log.
pub(super) fn deleted_after(since_full: &[u32], written: u8) -> &[u32] {
    let from = usize::from(written).min(since_full.len());
    // (In bounds: no out-of-line index.)
    since_full.get(from..).unwrap_or_default()
}
