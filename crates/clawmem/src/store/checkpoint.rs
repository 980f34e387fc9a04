//! Checkpoints: the RAM state (session table, objects, the memory chain's
//! ends) written to flash so that mount need not replay the whole ring
//! (`docs/FORMAT.md`, "Checkpoint").
//!
//! A checkpoint is *full* (every session) or a *delta* (the sessions changed
//! and deleted since the previous checkpoint, which it names); objects and
//! the memory state are in both. A delta is written when it is smaller, and
//! at most [`DELTAS_PER_FULL`] deltas follow a full checkpoint, so loading
//! reads a bounded chain: the full checkpoint, then each delta in order.
//! Every chunk's CRC is checked as a checkpoint is read; a damaged one is
//! not used, and mount falls back to another one or to a scan of the ring.
//!
//! Invariant: the newest full checkpoint is never in a sector being
//! released; garbage collection writes a new one first
//! ([`write_full_checkpoint`](Store::write_full_checkpoint)).
//!
//! Power loss: until a checkpoint commits, the previous one (which is never
//! reclaimed before a newer one exists) stays in force, and mount replays the
//! log after it.

use core::borrow::BorrowMut;

use embedded_storage::nor_flash::NorFlash;
use heapless::Vec;

use super::directory::{ColdCursor, Dir, DirView};
use super::memory::{MemState, MEM_STATE_ENCODED};
use super::objects::{ObjectSlot, MAX_OBJECTS, OBJ_CHAT_MAP, OBJ_ENCODED, OBJ_PROFILE};
use super::{Priority, Store, Work};
use crate::cursor::VerifiedReader;
use crate::error::{fail, Fail};
use crate::layout::{kind, u16_at, u32_at, CHUNK_HEADER_LEN, NO_ADDR};
use crate::log::Io;
use crate::session::{Session, DIR_DELTA, DIR_FULL, SESSION_ENCODED};

/// Checkpoint fixed part: version u8, object count u8, count u16, next uid
/// u32, tail sequence u32, next batch sequence u32.
pub(super) const CKPT_FIXED: usize = 16;
/// Version byte of a full checkpoint of format 8 and before (read only).
const CKPT_VERSION: u8 = 1;
/// Version byte of a delta checkpoint of format 8 and before (read only).
pub(super) const CKPT_DELTA: u8 = 2;
/// Version byte of a full checkpoint with a cut's waste (format 9 on).
pub(super) const CKPT_FULL_WASTE: u8 = 3;
/// Version byte of a delta checkpoint with a cut's waste (format 9 on).
pub(super) const CKPT_DELTA_WASTE: u8 = 4;
/// Version byte of a full checkpoint with a cut's waste (always, 0 for
/// none) and the sector table at its end (format 10, feature
/// `sector-table`).
#[cfg(feature = "sector-table")]
pub(super) const CKPT_FULL_TABLE: u8 = 5;
/// The sector table's part of a [`CKPT_FULL_TABLE`] checkpoint before its
/// entries: the base sequence u32 and the newest sequence recorded u32;
/// then a u16 a sector (its sequence less the base, `u16::MAX`: free).
#[cfg(feature = "sector-table")]
pub(super) const CKPT_TABLE_FIXED: usize = 8;
/// Version byte of a full checkpoint of format 10 with its waste part
/// (always) and the dead bytes part at its end (feature `sector-table`,
/// while the partition fits the table).
#[cfg(feature = "sector-table")]
pub(super) const CKPT_FULL_DEAD: u8 = 7;
/// Version byte of a full checkpoint of format 10 with its waste part, the
/// sector table and then the dead bytes part.
#[cfg(feature = "sector-table")]
pub(super) const CKPT_FULL_TABLE_DEAD: u8 = 9;
/// The dead bytes part before its entries: the newest sector sequence it
/// counts u32; then half a byte a sector (two a byte, the first in the
/// low half), its dead bytes in 16ths of a sector (`log::ring::dead_unit`),
/// rounded down. A count applies only to a sector whose sequence is at
/// most the newest: one opened since starts at 0.
#[cfg(feature = "sector-table")]
pub(super) const CKPT_DEAD_FIXED: usize = 4;
/// Version byte of a delta checkpoint of format 10 with its waste part
/// (always) and the dead bytes counted since the checkpoint before it at
/// its end (feature `sector-table`, when some were).
pub(super) const CKPT_DELTA_DEAD: u8 = 8;
/// A [`CKPT_DELTA_DEAD`] checkpoint's dead bytes part before its entries:
/// the newest sector sequence it counts u32 and the entries u32; then an
/// entry a sector, u16 its index and u16 the bytes counted dead in it
/// since the checkpoint before (at most `log::DEAD_PENDING` entries). An
/// entry applies only to a sector whose sequence is at most the newest.
#[cfg(feature = "sector-table")]
pub(super) const CKPT_DELTA_DEAD_FIXED: usize = 8;
/// The most sectors a partition has whose deltas carry dead bytes. A mount
/// reads every delta of its chain, and a large partition's mount is
/// already near its budget (1% of 4 MiB: 41,898 of 41,943 B with the
/// dead bytes in full checkpoints only, `sim/tests/fill.rs`); there, only
/// full checkpoints carry the counts.
#[cfg(feature = "sector-table")]
const DELTA_DEAD_SECTORS: u32 = 512;
/// The part after the fixed one in versions 3 and 4: the bytes a power
/// cut spent at the head that the ring has not collected yet u32, and the
/// sequence of the last sector holding them u32.
pub(super) const CKPT_WASTE: usize = 8;
/// A delta checkpoint's part after the fixed one: the previous checkpoint's
/// address u32, deleted count u16, delta number u16.
pub(super) const CKPT_DELTA_FIXED: usize = 8;

mod payload;
use payload::{deleted_after, CheckpointPayload};

/// Delta checkpoints between two full ones.
pub(super) const DELTAS_PER_FULL: u32 = 8;
/// Deletions a delta checkpoint can carry; more make the next one full.
pub(super) const DELETED_MAX: usize = 48;

/// What a delta's deletions change: the table, the directory, and the
/// deletions noted since the full checkpoint.
type DeletionState<'a, const N: usize> = (
    &'a mut Vec<Session, N>,
    &'a mut Dir,
    &'a mut Vec<u32, DELETED_MAX>,
);

impl<F: NorFlash, const MAX_SESSIONS: usize, W: BorrowMut<Work>> Store<F, MAX_SESSIONS, W> {
    /// Reads a checkpoint: the full checkpoint it builds on, then every
    /// delta after it in order; `false` if any is damaged.
    #[inline(always)]
    pub(super) fn load_checkpoint(&mut self, addr: u32) -> Result<bool, Fail> {
        let loaded = self.load_checkpoint_word(addr)? != 0;
        // Dead bytes a full checkpoint gave are true of the state it
        // gives: a mount that goes from another one starts from 0.
        #[cfg(feature = "sector-table")]
        if !loaded {
            self.log.clear_dead();
        }
        Ok(loaded)
    }

    /// [`Self::load_checkpoint`] as a word (1 or 0; see `Io::chunk_crc_ok_word`).
    #[inline(never)]
    fn load_checkpoint_word(&mut self, addr: u32) -> Result<u32, Fail> {
        // Walk back to the full checkpoint (bounded: at most DELTAS_PER_FULL
        // deltas follow a full one).
        let mut chain = [0u32; DELTAS_PER_FULL as usize + 1];
        let mut n = 0;
        let mut at = addr;
        loop {
            if at >= self.log.geo().capacity() || n == chain.len() {
                return Ok(0);
            }
            chain[n] = at;
            n += 1;
            let mut io = self.log.io();
            match io.chunk_header(at)? {
                Some(h) if h.kind == kind::CHECKPOINT && h.is_first() => {}
                _ => return Ok(0),
            }
            // (A delta's previous checkpoint follows the cut waste, if it
            // has one.)
            let mut fixed = [0u8; CKPT_FIXED + CKPT_DELTA_FIXED];
            io.read_stream(at + CHUNK_HEADER_LEN, &mut fixed)?;
            match fixed[0] {
                #[cfg(feature = "sector-table")]
                CKPT_FULL_DEAD => {
                    self.mount_report.sector_headers += self.log.check_table_headers()?;
                    break;
                }
                CKPT_VERSION | CKPT_FULL_WASTE => {
                    // A full checkpoint that records no table: the
                    // headers decide it, read whole if the mount has their
                    // first bytes only (`log/table.rs`).
                    #[cfg(feature = "sector-table")]
                    {
                        self.mount_report.sector_headers += self.log.check_table_headers()?;
                    }
                    break;
                }
                #[cfg(feature = "sector-table")]
                CKPT_FULL_TABLE | CKPT_FULL_TABLE_DEAD => break,
                CKPT_DELTA => at = u32_at(&fixed, CKPT_FIXED),
                // (Format 10's delta with its dead bytes too: its previous
                // checkpoint is in the same place.)
                v if v == CKPT_DELTA_WASTE
                    || (cfg!(feature = "sector-table") && v == CKPT_DELTA_DEAD) =>
                {
                    let mut prev = [0u8; 4];
                    let skip = (CKPT_FIXED + CKPT_WASTE) as u32;
                    io.read_stream_after(at + CHUNK_HEADER_LEN, skip, &mut prev)?;
                    at = u32_at(&prev, 0);
                }
                _ => return Ok(0),
            }
        }
        // The full checkpoint first (the last one found), then the deltas.
        let mut overflow = false;
        for k in (0..n).rev() {
            if !self.apply_checkpoint(chain[k], k + 1 < n, &mut overflow)? {
                return Ok(0);
            }
        }
        self.full_checkpoint = chain[n - 1];
        self.deltas_since_full = n as u32 - 1;
        self.deleted_written = self.deleted_since_full.len() as u8;
        if overflow {
            // More deletions since the full checkpoint than RAM names (each
            // delta names those since the checkpoint before it): the
            // directory cannot be read past them. That is only safe while
            // every session is in the table, and then it is not read: until
            // the next full checkpoint, none goes cold.
            if self.dir.cold_oldest != u32::MAX {
                return Err(self.log.parked().too_many_sessions(MAX_SESSIONS));
            }
            self.dir.clear();
            self.deleted_since_full.clear();
            self.deleted_written = 0;
        }
        Ok(1)
    }

    /// Reads one checkpoint into the RAM state: a full one replaces it, a
    /// delta changes it. `false` if it is damaged.
    ///
    /// A full checkpoint is the directory's start: as many of its sessions
    /// as the table holds are loaded, the others stay cold. A delta's
    /// sessions are loaded in place of clean ones; its deletions are
    /// noted as deletions since the full checkpoint (`overflow` is set when
    /// RAM cannot name them all).
    #[inline(always)]
    fn apply_checkpoint(
        &mut self,
        addr: u32,
        delta: bool,
        overflow: &mut bool,
    ) -> Result<bool, Fail> {
        Ok(self.apply_checkpoint_word(addr, delta, overflow)? != 0)
    }

    /// [`Self::apply_checkpoint`] as a word (1 or 0; see `Io::chunk_crc_ok_word`).
    #[inline(never)]
    fn apply_checkpoint_word(
        &mut self,
        addr: u32,
        delta: bool,
        overflow: &mut bool,
    ) -> Result<u32, Fail> {
        let geo = self.log.geo();
        let mut io = self.log.io();
        // One pass: decode while every chunk's CRC is checked; a damaged
        // checkpoint makes the caller start over from another one.
        // (Started in place and used where it is: returned or moved out of
        // the `Option`, it was copied.)
        let mut reader = None;
        VerifiedReader::start(&mut io, addr, kind::CHECKPOINT, &mut reader)?;
        let Some(r) = reader.as_mut() else {
            return Ok(0);
        };
        let mut fixed = [0u8; CKPT_FIXED];
        if !r.read(&mut io, &mut fixed)? {
            return Ok(0);
        }
        let count = u16_at(&fixed, 2) as usize;
        let objects = fixed[1] as usize;
        // The version past the one of format 8 and before of its kind
        // (CKPT_VERSION or CKPT_DELTA): 0, or 2 with the cut waste
        // (CKPT_FULL_WASTE or CKPT_DELTA_WASTE); anything else is refused.
        let past = fixed[0].wrapping_sub(CKPT_VERSION + u8::from(delta));
        // A full one of format 10 records after the memory state the sector
        // table (CKPT_FULL_TABLE), the dead bytes (CKPT_FULL_DEAD) or both
        // (CKPT_FULL_TABLE_DEAD): read (and checked) with the rest, the
        // table merged once the whole checkpoint checks out.
        // A delta of format 10 records the dead bytes counted since the
        // checkpoint before it (CKPT_DELTA_DEAD).
        #[cfg(feature = "sector-table")]
        let (table, dead) = match (io.table.on(), delta, fixed[0]) {
            (true, false, CKPT_FULL_TABLE) => (true, false),
            (true, false, CKPT_FULL_DEAD) => (false, true),
            (true, false, CKPT_FULL_TABLE_DEAD) => (true, true),
            (true, true, CKPT_DELTA_DEAD) => (false, true),
            _ => (false, false),
        };
        #[cfg(not(feature = "sector-table"))]
        let (table, dead) = (false, false);
        if (past & !2 != 0 && !table && !dead) || objects > MAX_OBJECTS {
            return Ok(0);
        }
        // A checkpoint of format 8 and before says no waste.
        let mut waste = [0u8; CKPT_WASTE];
        let with_waste = past != 0;
        if with_waste && !r.read(&mut io, &mut waste)? {
            return Ok(0);
        }
        let mut deleted_count = 0;
        if delta {
            let mut d = [0u8; CKPT_DELTA_FIXED];
            if !r.read(&mut io, &mut d)? {
                return Ok(0);
            }
            deleted_count = u16_at(&d, 4) as usize;
            if deleted_count > DELETED_MAX {
                return Ok(0);
            }
            // Its deletions first: a delta carries the sessions made after
            // deletions that left room for them, and applied in the order
            // they are stored, the table would have to hold both.
            let skip = CKPT_FIXED
                + if with_waste { CKPT_WASTE } else { 0 }
                + CKPT_DELTA_FIXED
                + count * SESSION_ENCODED;
            let state = (
                &mut self.sessions,
                &mut self.dir,
                &mut self.deleted_since_full,
            );
            *overflow |= Self::apply_deletions_first(&mut io, state, addr, skip, deleted_count)?;
        } else {
            self.sessions.clear();
            self.dir.clear();
            self.deleted_since_full.clear();
        }
        // The sessions, the deletions, the objects and the memory state, in
        // that order, read by one loop. (The objects go straight to the
        // table: a damaged checkpoint leaves the state to be loaded again,
        // or rebuilt by a scan of the ring, whichever way.)
        self.objects.clear();
        let deleted_end = count + deleted_count;
        let objects_end = deleted_end + objects;
        // (Each part is read over the bytes it uses before they are used.)
        let mut b = [0u8; SESSION_ENCODED];
        for k in 0..objects_end + 1 {
            let n = if k < count {
                SESSION_ENCODED
            } else if k < deleted_end {
                4
            } else if k < objects_end {
                OBJ_ENCODED
            } else {
                MEM_STATE_ENCODED
            };
            if !r.read(&mut io, b.split_at_mut(n).0)? {
                return Ok(0);
            }
            if k < count {
                let mut decoded = Session::decode(&b);
                let Some(s) = decoded.as_mut() else {
                    return Ok(0);
                };
                s.dir = if delta { DIR_DELTA } else { DIR_FULL };
                if delta {
                    // (A delta's sessions after its deletions, which the
                    // first pass applied.)
                    Self::upsert_session(&mut self.sessions, &mut self.dir, io.parked(), *s)?;
                } else if self.sessions.push(*s).is_err() {
                    // Cold: found in the directory when it is used.
                    self.dir.note_unloaded(s);
                }
            } else if k < deleted_end || k == objects_end {
                // (Deletions: applied by the first pass; the memory state:
                // decoded below.)
            } else {
                // (The type, then three zero bytes: one word.)
                let ty = u32_at(&b, 0);
                if ty != u32::from(OBJ_CHAT_MAP) && ty != u32::from(OBJ_PROFILE) {
                    return Ok(0);
                }
                let _ = self.objects.push(ObjectSlot {
                    ty: ty as u8,
                    key: u32_at(&b, 4),
                    addr: u32_at(&b, 8),
                    seq: u32_at(&b, 12),
                    len: u32_at(&b, 16),
                });
            }
        }
        let Some(mem) = b.first_chunk().and_then(MemState::decode) else {
            return Ok(0);
        };
        // The sector table: merged into the one the headers gave as it is
        // read, and read from the headers again if the checkpoint then
        // fails its checks (`log/table.rs`).
        #[cfg_attr(not(feature = "sector-table"), allow(unused_mut))]
        let mut sound = true;
        #[cfg(feature = "sector-table")]
        let mut newest = 0;
        #[cfg(feature = "sector-table")]
        if table {
            let mut t = [0u8; CKPT_TABLE_FIXED];
            if !r.read(&mut io, &mut t)? {
                return Ok(0);
            }
            let base = u32_at(&t, 0);
            newest = u32_at(&t, 4);
            let mut index = 0;
            while sound && index < geo.count {
                let n = (geo.count - index).min(b.len() as u32 / 2);
                sound = r.read(&mut self.log.io(), &mut b[..2 * n as usize])?;
                for k in 0..n * u32::from(sound) {
                    let e = u16_at(&b, 2 * k as usize);
                    let recorded = (e != u16::MAX).then(|| base + u32::from(e));
                    self.mount_report.sector_headers +=
                        self.log.merge_table_entry(index + k, recorded, newest)?;
                }
                index += n;
            }
        }
        // The dead bytes, after the table: each count is taken for a
        // sector in use that was opened before the checkpoint was written
        // (cleared again by the caller if the checkpoint, or a delta after
        // it, then fails).
        #[cfg(feature = "sector-table")]
        if dead && delta && sound {
            // A delta's: the bytes counted since the checkpoint before it,
            // added (its chain is applied in order from the full one).
            let mut t = [0u8; CKPT_DELTA_DEAD_FIXED];
            sound = r.read(&mut self.log.io(), &mut t)?;
            let counted = u32_at(&t, 0);
            let n = u32_at(&t, 4);
            sound &= n as usize <= crate::log::DEAD_PENDING;
            for _ in 0..n * u32::from(sound) {
                sound = r.read(&mut self.log.io(), &mut b[..4])?;
                let (at, bytes) = (u32::from(u16_at(&b, 0)), u32::from(u16_at(&b, 2)));
                if sound && self.log.seq_of_sector(at).is_some_and(|q| q <= counted) {
                    self.log.load_dead(at, bytes);
                }
            }
        } else if dead && sound {
            let mut t = [0u8; CKPT_DEAD_FIXED];
            sound = r.read(&mut self.log.io(), &mut t)?;
            let counted = u32_at(&t, 0);
            let unit = crate::log::dead_unit(geo.sector);
            let mut index = 0;
            while sound && index < geo.count {
                // (Two sectors a byte.)
                let n = (geo.count - index).min(2 * b.len() as u32);
                sound = r.read(&mut self.log.io(), &mut b[..n.div_ceil(2) as usize])?;
                for k in 0..n * u32::from(sound) {
                    let units = u32::from(b[k as usize / 2] >> (4 * (k % 2)) & 15);
                    let at = index + k;
                    if units != 0 && self.log.seq_of_sector(at).is_some_and(|q| q <= counted) {
                        self.log.load_dead(at, units * unit);
                    }
                }
                index += n;
            }
        }
        let sound = sound && r.finish();
        #[cfg(feature = "sector-table")]
        if table {
            if !sound {
                self.mount_report.sector_headers += self.log.reread_table()?;
                return Ok(0);
            }
            self.log.table_merged(addr, newest)?;
        }
        if !sound {
            return Ok(0);
        }
        match delta {
            true => {
                if !self.dir.push_delta(addr) {
                    return Ok(0);
                }
            }
            false => self.dir.set_full(addr, count as u32, u32_at(&fixed, 4)),
        }
        self.mem = mem;
        self.cut_waste = u32_at(&waste, 0);
        self.cut_waste_seq = u32_at(&waste, 4);
        self.next_uid = u32_at(&fixed, 4);
        let tail_seq = u32_at(&fixed, 8);
        let oldest_possible = self.log.head_seq().saturating_sub(geo.count - 1);
        // (With holes, the sequences in use may span more than the ring.)
        #[cfg(feature = "sector-table")]
        let oldest_possible = match self.log.table_reordered() {
            true => 0,
            false => oldest_possible,
        };
        // (The log keeps the tail at or before the head.)
        self.log.set_tail_seq(tail_seq.max(oldest_possible));
        self.log.raise_next_seq(u32_at(&fixed, 12));
        Ok(1)
    }

    /// A delta's deletions, read ahead of its sessions, which take `skip`
    /// bytes from the checkpoint's start with its fixed parts (a second pass
    /// over the same chunks; the first pass checks every CRC, and a
    /// damaged delta is dropped with all the state loaded from its chain).
    /// Each deletion leaves the table and the directory's delta versions
    /// and is noted as a deletion since the full checkpoint; `true` if RAM
    /// could not note them all.
    #[inline(always)]
    fn apply_deletions_first(
        io: &mut Io<'_, F>,
        state: DeletionState<'_, MAX_SESSIONS>,
        addr: u32,
        skip: usize,
        deleted: usize,
    ) -> Result<bool, Fail> {
        Ok(Self::apply_deletions_first_word(io, state, addr, skip, deleted)? != 0)
    }

    /// [`Self::apply_deletions_first`] as a word (1 or 0; see `Io::chunk_crc_ok_word`).
    #[inline(never)]
    fn apply_deletions_first_word(
        io: &mut Io<'_, F>,
        (sessions, dir, noted): DeletionState<'_, MAX_SESSIONS>,
        addr: u32,
        mut skip: usize,
        deleted: usize,
    ) -> Result<u32, Fail> {
        let mut reader = None;
        VerifiedReader::start(io, addr, kind::CHECKPOINT, &mut reader)?;
        let Some(r) = reader.as_mut() else {
            return Ok(0);
        };
        let mut b = [0u8; SESSION_ENCODED];
        while skip > 0 {
            let n = skip.min(b.len());
            if !r.read(io, b.split_at_mut(n).0)? {
                return Ok(0);
            }
            skip -= n;
        }
        let mut overflow = false;
        for _ in 0..deleted {
            if !r.read(io, &mut b[..4])? {
                return Ok(u32::from(overflow));
            }
            let uid = u32_at(&b, 0);
            if let Some(i) = sessions.iter().position(|x| x.uid == uid) {
                sessions.swap_remove(i);
            }
            dir.forget(uid);
            if !noted.contains(&uid) && noted.push(uid).is_err() {
                overflow = true;
            }
        }
        Ok(u32::from(overflow))
    }

    /// Mount: a checkpoint the scan met after the one it loaded. What it
    /// says power cuts spent is taken (the newest checkpoint knows best),
    /// and a full one takes the loaded one's place as the one the next delta
    /// builds on, and as the oldest sector a mount needs. The head walk
    /// finds only checkpoints that begin in the head sector, and a sector's
    /// header names the newest checkpoint at its opening, so a checkpoint
    /// that began in the sector before the head and reached into it was not
    /// the one loaded; without this, the sector of the older full checkpoint
    /// stayed in use and a remounted store nearly full refused writes the
    /// running store took. The state the scan builds is kept as it is:
    /// sessions it changed stay dirty, so the next delta carries at least
    /// what changed since this checkpoint. `true` if the checkpoint is
    /// sound: the next one is due as if counted from it (a delta is not
    /// taken as the base, and the sessions the scan changed since the
    /// loaded one stay dirty); without that, a remount found a checkpoint
    /// due at once that the running store had just written, and refused a
    /// write the running store took. `false` if it fails its CRC or lies
    /// outside the ring.
    #[inline(always)]
    pub(super) fn checkpoint_met(&mut self, addr: u32) -> Result<bool, Fail> {
        Ok(self.checkpoint_met_word(addr)? != 0)
    }

    /// [`Self::checkpoint_met`] as a word (1 or 0; see `Io::chunk_crc_ok_word`).
    #[inline(never)]
    fn checkpoint_met_word(&mut self, addr: u32) -> Result<u32, Fail> {
        // The stubs of cold sessions are filled in from the directory they
        // were made against, before it may change.
        self.resolve_stubs()?;
        // The version, and the cut waste if it has one.
        let mut version = [0u8; 1];
        let mut waste = [0u8; CKPT_WASTE];
        let mut io = self.log.io();
        io.read_stream(addr + CHUNK_HEADER_LEN, &mut version)?;
        // Past the first version (CKPT_VERSION): 0 full, 1 delta, 2 and 3
        // the same with the cut waste; more is no checkpoint's.
        let past = version[0].wrapping_sub(CKPT_VERSION);
        // (4, 6 and 8: a full one of format 10, with the waste part and
        // the table, the dead bytes or both; 7 a delta of format 10, with
        // the waste part and its dead bytes.)
        let format_10 = cfg!(feature = "sector-table") && matches!(past, 4 | 6 | 7 | 8);
        let with_waste = past & !1 == 2 || format_10;
        if with_waste {
            io.read_stream_after(addr + CHUNK_HEADER_LEN, CKPT_FIXED as u32, &mut waste)?;
        }
        let Some(seq) = self.seq_at(addr) else {
            return Ok(0);
        };
        if (past > 3 && !format_10) || self.log.verify(addr)?.is_none() {
            return Ok(0);
        }
        // Versions 1 and 2 say no cut waste (`waste` stayed zero).
        self.cut_waste = u32_at(&waste, 0);
        self.cut_waste_seq = u32_at(&waste, 4);
        if past & 1 != 0 {
            // A delta that follows the directory's newest checkpoint holds
            // the state of every session the scan changed since then, as
            // the scan built it: the directory takes it, and those sessions
            // are clean (the table must hold only the changes since the
            // newest checkpoint, as the running store's did).
            let mut prev = [0u8; 4];
            let waste = if with_waste { CKPT_WASTE } else { 0 };
            let skip = (CKPT_FIXED + waste) as u32;
            self.log
                .io()
                .read_stream_after(addr + CHUNK_HEADER_LEN, skip, &mut prev)?;
            // (Only while the table does not hold every session: else it
            // has room for every change, and the next delta names the
            // loaded checkpoint, carrying them all, as before.)
            let follows = self.cold_count() > 0
                && self.dir.chain().last() == Some(&u32_at(&prev, 0))
                && self.deltas_since_full < DELTAS_PER_FULL;
            if follows {
                // (Nothing changes if the chain has no room for it.)
                let _ = self.checkpoint_taken(addr, false, (0, 0));
            }
            return Ok(1);
        }
        self.full_checkpoint = addr;
        self.checkpoint_sector_seq = seq;
        self.log.set_checkpoint(addr);
        if self.cold_count() == 0 {
            // Every session is in the table: the deletions and changes the
            // scan met before it stay to be written again in the next
            // checkpoint, and the directory is not read until a full one is
            // written (nothing goes cold before).
            self.dir.clear();
            self.deleted_written = 0;
            self.deltas_since_full = match self.deleted_since_full.is_full() {
                true => DELTAS_PER_FULL,
                false => 0,
            };
            return Ok(1);
        }
        // It is the directory now: it lists every session the scan has
        // built so far, and the deletions before it are in it.
        let full = super::directory::count_and_next_uid(&mut self.log.io(), addr)?;
        self.checkpoint_taken(addr, true, full);
        Ok(1)
    }

    /// Remembers a deletion since the full checkpoint (every delta carries
    /// them all, and a lookup in the directory passes them by); too many
    /// make the next checkpoint a full one. `false` if RAM could not note
    /// it: a deletion that writes its record makes room first
    /// ([`room_for_deletion`](Self::room_for_deletion)).
    pub(super) fn note_deleted(&mut self, uid: u32) -> bool {
        self.dir.forget(uid);
        if self.deleted_since_full.contains(&uid) {
            return true;
        }
        if self.deleted_since_full.is_full() && self.cold_count() == 0 {
            // Every session is in the table: the directory is not read
            // until the next full checkpoint (nothing can go cold before
            // it), and the deletions the checkpoints carry already are
            // not needed in RAM.
            self.dir.clear();
            let noted = &mut self.deleted_since_full;
            let written = usize::from(self.deleted_written).min(noted.len());
            noted.copy_within(written.., 0);
            noted.truncate(noted.len() - written);
            self.deleted_written = 0;
        }
        if self.deleted_since_full.push(uid).is_ok() {
            return true;
        }
        // More deletions than a delta carries: the next checkpoint is full.
        self.deltas_since_full = DELTAS_PER_FULL;
        self.cold_count() == 0
    }

    /// Before a deletion is written: a full checkpoint when RAM could not
    /// note another deletion, so that a lookup in the directory never
    /// meets a deleted session it does not know of. Also when this store
    /// holds every session but one went cold since the full checkpoint
    /// (`cold_met`): a mount's table holds what the checkpoints and the
    /// log give it, which may leave cold sessions this store brought back
    /// in, and that mount could not note the deletion either; it would
    /// find the session again in the full checkpoint.
    pub(super) fn room_for_deletion(&mut self) -> Result<(), Fail> {
        if self.deleted_since_full.is_full() && (self.cold_count() > 0 || self.dir.cold_met) {
            self.write_full_checkpoint(Priority::Maintenance)?;
        }
        Ok(())
    }

    /// The deletions the next delta carries: those since the newest
    /// checkpoint.
    fn deleted_since_delta(&self) -> &[u32] {
        deleted_after(&self.deleted_since_full, self.deleted_written)
    }

    /// Bytes of the cut waste part in the next checkpoint: written only
    /// when there is some.
    fn waste_part_len(&self) -> usize {
        match self.cut_waste_now().0 {
            0 => 0,
            _ => CKPT_WASTE,
        }
    }

    #[inline(never)]
    pub(super) fn checkpoint_len(&self) -> u32 {
        let sessions = self.sessions.len() + self.cold_count() as usize;
        self.checkpoint_len_with(sessions * SESSION_ENCODED) + self.table_part_len()
    }

    /// Bytes a full checkpoint adds for format 10's parts: the waste part,
    /// written even when there is none, with the sector table (while it is
    /// not format 9's arithmetic) and with the dead bytes (while the
    /// partition fits the table).
    #[inline(always)]
    fn table_part_len(&self) -> u32 {
        #[cfg(feature = "sector-table")]
        if self.log.counts_dead() {
            let count = self.log.geo().count;
            let part =
                (CKPT_WASTE - self.waste_part_len() + CKPT_DEAD_FIXED) as u32 + count.div_ceil(2);
            return match self.log.table_reordered() {
                true => part + CKPT_TABLE_FIXED as u32 + 2 * count,
                false => part,
            };
        }
        0
    }

    /// Length of a checkpoint whose parts other than the fixed ones, the
    /// objects and the memory state take `parts` bytes (a full one's
    /// sessions; a delta's part, sessions and deletions).
    #[inline(never)]
    fn checkpoint_len_with(&self, parts: usize) -> u32 {
        (CKPT_FIXED
            + self.waste_part_len()
            + parts
            + self.objects.len() * OBJ_ENCODED
            + MEM_STATE_ENCODED) as u32
    }

    pub(super) fn checkpoint_interval(&self) -> u32 {
        self.config
            .checkpoint_interval_bytes
            .max(16 * self.delta_len())
    }

    /// The bytes after which idle-time maintenance writes a checkpoint:
    /// seven eighths of [`checkpoint_interval`](Self::checkpoint_interval).
    /// An append writes one only at the whole interval, so as long as less
    /// than an eighth of it (3.5 KiB by default) is written between two
    /// idle calls, no append does. Mount's cost stays bounded by the
    /// interval itself.
    pub(super) fn idle_checkpoint_interval(&self) -> u32 {
        let interval = self.checkpoint_interval();
        interval - interval / 8
    }

    /// Sessions in the table changed since the newest checkpoint: those a
    /// delta carries (one count for its length and its writer).
    pub(super) fn dirty_count(&self) -> usize {
        self.sessions.iter().filter(|s| s.dirty).count()
    }

    /// Length of the delta checkpoint that would be written now.
    fn delta_len(&self) -> u32 {
        let dirty = self.dirty_count();
        let deleted = self.deleted_since_delta().len();
        self.checkpoint_len_with(CKPT_DELTA_FIXED + dirty * SESSION_ENCODED + deleted * 4)
            + self.delta_dead_len()
    }

    /// Bytes a delta adds for format 10's dead bytes part, written with
    /// the waste part (even when there is none) when dead bytes were
    /// counted since the checkpoint before it.
    #[inline(always)]
    fn delta_dead_len(&self) -> u32 {
        #[cfg(feature = "sector-table")]
        if !self.log.dead_pending().is_empty() && self.log.geo().count <= DELTA_DEAD_SECTORS {
            let n = self.log.dead_pending().len();
            return (CKPT_WASTE - self.waste_part_len() + CKPT_DELTA_DEAD_FIXED + 4 * n) as u32;
        }
        0
    }

    pub(super) fn write_checkpoint(&mut self) -> Result<(), Fail> {
        self.write_checkpoint_with(Priority::Maintenance)
    }

    /// Writes the RAM state as a checkpoint: a delta (the sessions changed
    /// and deleted since the previous checkpoint, all objects and the memory
    /// state) when that is smaller, else a full one; at most
    /// [`DELTAS_PER_FULL`] deltas follow a full checkpoint.
    ///
    /// Power loss: until the checkpoint commits, the previous one (which is
    /// never reclaimed before a newer one exists) stays in force.
    #[inline(always)]
    pub(super) fn write_checkpoint_with(&mut self, p: Priority) -> Result<(), Fail> {
        self.write_checkpoint_as(p, true)
    }

    /// Writes a full checkpoint (needed before its predecessor's sector is
    /// released).
    #[inline(always)]
    pub(super) fn write_full_checkpoint(&mut self, p: Priority) -> Result<(), Fail> {
        self.write_checkpoint_as(p, false)
    }

    /// Writes a checkpoint: a delta when `may_delta` and that is smaller
    /// ([`write_checkpoint_with`](Self::write_checkpoint_with)), else a
    /// full one ([`write_full_checkpoint`](Self::write_full_checkpoint)).
    /// (One body for both: the choice is a word.)
    #[inline(never)]
    pub(super) fn write_checkpoint_as(&mut self, p: Priority, may_delta: bool) -> Result<(), Fail> {
        let mut len = self.checkpoint_len();
        let mut delta = false;
        // (A release out of order waits for a full checkpoint to record
        // it: `log/table.rs`.)
        #[cfg(feature = "sector-table")]
        let may_delta = may_delta && !self.log.holds_release();
        if may_delta && self.full_checkpoint != NO_ADDR && self.deltas_since_full < DELTAS_PER_FULL
        {
            let delta_len = self.delta_len();
            if delta_len < len {
                (len, delta) = (delta_len, true);
            }
        }
        self.ensure_room(len, p)?;
        // A full checkpoint lists the cold sessions too, copied from the
        // directory as it is written: every checkpoint of it is checked
        // first, so that damage at rest is never carried over as sound.
        let cold = if delta { 0 } else { self.cold_count() as usize };
        if cold > 0 {
            for &at in self.dir.chain() {
                if self.log.verify(at)?.is_none() {
                    return Err(self.log.parked().at(
                        fail!(
                            Corrupted,
                            "a checkpoint of the session directory failed its checksum"
                        ),
                        at,
                    ));
                }
            }
        }
        let count = if delta {
            self.dirty_count()
        } else {
            self.sessions.len() + cold
        };
        // The fixed parts as little-endian words: the cut waste only when
        // there is some (versions 3 and 4), the delta part only in a delta.
        let (waste, waste_seq) = self.cut_waste_now();
        // CKPT_VERSION, CKPT_DELTA, CKPT_FULL_WASTE or CKPT_DELTA_WASTE
        // (or CKPT_FULL_TABLE, with its waste part even when there is none).
        // The table is recorded only once it is not format 9's arithmetic
        // (a release out of order, or a mount that merged a recorded one):
        // until then the headers give it, and a full checkpoint is format
        // 9's, as long, read as fast.
        // A full one records the dead bytes per sector too (CKPT_FULL_DEAD,
        // CKPT_FULL_TABLE_DEAD) while the partition fits the table.
        // A delta records the dead bytes counted since the checkpoint
        // before it (CKPT_DELTA_DEAD) when some were.
        #[cfg(feature = "sector-table")]
        let (table, dead) = (
            !delta && self.log.table_reordered(),
            match delta {
                false => self.log.counts_dead(),
                true => self.delta_dead_len() != 0,
            },
        );
        #[cfg(not(feature = "sector-table"))]
        let (table, dead) = (false, false);
        let with_waste = waste != 0 || table || dead;
        let version = CKPT_VERSION
            + u8::from(delta)
            + 2 * u8::from(with_waste)
            + 2 * u8::from(table)
            + 4 * u8::from(dead);
        // (Borrowing the two fields only: the write below takes the log.)
        let deleted: &[u32] = match delta {
            true => deleted_after(&self.deleted_since_full, self.deleted_written),
            false => &[],
        };
        // (Words of the waste part: 2, or 0 when the delta part moves up
        // over it.)
        let w = 2 * usize::from(with_waste);
        let mut payload = CheckpointPayload {
            fixed: [
                u32::from(version)
                    | (self.objects.len() as u32) << 8
                    | (count as u32 & 0xFFFF) << 16,
                self.next_uid,
                self.log.tail_seq(),
                self.log.next_seq(),
                waste,
                waste_seq,
                0,
                0,
            ],
            fixed_len: CKPT_FIXED + 4 * w + if delta { CKPT_DELTA_FIXED } else { 0 },
            sessions: &self.sessions,
            only_dirty: delta,
            count,
            deleted,
            objects: &self.objects,
            mem: self.mem.words(),
            cold: (cold > 0).then_some(DirView {
                dir: &self.dir,
                hot: &self.sessions,
                deleted: &self.deleted_since_full,
            }),
            cursor: ColdCursor::new(&self.dir),
            next_cold: 0,
            entry: [0; SESSION_ENCODED],
            #[cfg(feature = "sector-table")]
            table: match table {
                true => [
                    self.log.tail_seq(),
                    self.log.head_seq(),
                    self.log.geo().count,
                ],
                false => [0; 3],
            },
            #[cfg(feature = "sector-table")]
            dead: match (dead, delta) {
                (true, false) => [self.log.head_seq(), self.log.geo().count, 0],
                (true, true) => [self.log.head_seq(), self.log.dead_pending().len() as u32, 1],
                (false, _) => [0; 3],
            },
        };
        // The delta part (written only in a delta), after the waste part.
        payload.fixed[4 + w] = self.log.checkpoint();
        payload.fixed[5 + w] =
            (deleted.len() as u32 & 0xFFFF) | ((self.deltas_since_full + 1) & 0xFFFF) << 16;
        let before = self.log.written()[crate::layout::kind::usage_slot(kind::CHECKPOINT)];
        let (addr, _) = self.log.write_batch(kind::CHECKPOINT, &mut payload)?;
        if delta {
            // Deltas are accounted apart from full checkpoints.
            self.log.count_as_delta(before);
        }
        // The releases it records are final: their sectors are free.
        #[cfg(feature = "sector-table")]
        if table {
            self.log.settle_releases();
        }
        // The next delta carries what changes after this checkpoint (and
        // every deletion since the full one).
        if !self.checkpoint_taken(addr, !delta, (count as u32, self.next_uid)) {
            return Err(fail!(
                LogicBug,
                "a delta checkpoint past the directory's chain"
            ));
        }
        if !delta {
            self.checkpoint_sector_seq = self
                .seq_at(addr)
                .ok_or(fail!(LogicBug, "checkpoint written outside the ring"))?;
        }
        self.bytes_since_checkpoint = 0;
        Ok(())
    }

    /// The RAM state once the checkpoint at `addr`, written or met by the
    /// mount's scan, is the newest: a delta (`full` false) follows the
    /// directory's chain (`false`, and nothing changed, if the chain has
    /// no room for it); a full one (its session count and the next uid it
    /// was written at, `(count, next_uid)`, which a delta ignores) starts
    /// the directory over, with no deletion since. The sessions it carries
    /// are clean, in the directory's version it is. (Flag and words in
    /// registers: an `Option` of the pair went through the stack.)
    #[inline(never)]
    fn checkpoint_taken(&mut self, addr: u32, full: bool, (count, next_uid): (u32, u32)) -> bool {
        match full {
            false => {
                // (No directory while it is cleared: until the next full
                // one.)
                if !self.dir.chain().is_empty() && !self.dir.push_delta(addr) {
                    return false;
                }
                self.deltas_since_full += 1;
                self.deleted_written = self.deleted_since_full.len() as u8;
            }
            true => {
                self.dir.set_full(addr, count, next_uid);
                self.deleted_since_full.clear();
                self.deleted_written = 0;
                // (It lists the cold sessions too.)
                self.dir.cold_met = self.cold_count() > 0;
                self.full_checkpoint = addr;
                self.deltas_since_full = 0;
            }
        }
        self.log.set_checkpoint(addr);
        let dir = if full { DIR_FULL } else { DIR_DELTA };
        for s in self.sessions.iter_mut() {
            if full || s.dirty {
                s.dir = dir;
            }
            s.dirty = false;
        }
        true
    }
}
