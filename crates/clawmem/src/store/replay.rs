//! What mount does with each committed batch the scan meets after the
//! checkpoint: it changes the RAM state (session table, objects, the memory
//! chain's ends) as the write that made the batch did.
//!
//! Batches are applied from their chunk headers and fixed parts, without
//! reading their payloads, except the records that remove or replace state:
//! a session deletion or block, a memory tombstone, an access record, and an
//! object. Their CRC is checked before they are applied, so that a bit
//! flipped at rest cannot turn a batch into a deletion or hide a sound
//! version. A batch that starts a session names it only if the CRC over its
//! uid and id checks out. A batch that fails a check is left out (the scan
//! counts it as ignored); the rest of the ring is still applied.
//!
//! Damage at rest is repaired here where the rest of the log makes it
//! certain: a session's name is recovered from its first batch's own CRC or
//! by correcting one flipped bit; a sound batch of a session no batch named
//! is followed back to the first one ([`adopt`](Store::adopt)). Memory
//! records go to their owner, `store/memory/replay.rs`, which repairs the
//! memory chain the same way.
//!
//! Power loss: nothing here writes; mount records what it recovered
//! afterwards (`mount.rs`).

use core::borrow::BorrowMut;

use embedded_storage::nor_flash::NorFlash;
use heapless::Vec;

use super::objects::{ObjectSlot, OBJ_CHAT_MAP, OBJ_FIXED, OBJ_PROFILE};
use super::{Store, Work};
use crate::cursor::{read_base, BatchMeta};
use crate::error::{Fail, Parked};
use crate::layout::{u32_at, ChunkHeader, CHUNK_HEADER_LEN, NO_ADDR};
use crate::naming::fnv1a32;
use crate::session::{Session, BASE_FIXED, CHAIN_MAX, FLAG_BLOCKED, MAX_SESSION_ID_BYTES};
use crate::session::{DIR_STUB, DIR_STUB_BASE};
use crate::session::{SESSION_BASE, SESSION_BATCH, SESSION_BLOCK, SESSION_DELETE};
use crate::store::memory::{
    MEM_ACCESS, MEM_ACCESS_PACKED, MEM_FORGET, MEM_INDEX, MEM_PUT, MEM_PUT_PLAIN,
};
use crate::store::objects::OBJECT;

/// Why [`apply`](Store::apply) left a batch out: it failed a check, or
/// reading it failed. The scan only counts it (and notes where), so the
/// reason is not carried.
pub(super) struct Skip;

impl From<Fail> for Skip {
    fn from(_: Fail) -> Self {
        Skip
    }
}

impl<F: NorFlash, const MAX_SESSIONS: usize, W: BorrowMut<Work>> Store<F, MAX_SESSIONS, W> {
    /// Applies one committed batch found at mount to the RAM state.
    #[inline(never)]
    pub(super) fn apply(&mut self, addr: u32, h: &ChunkHeader) -> Result<(), Skip> {
        // The scan reads chunk headers, not payloads. Deletions, blocks,
        // tombstones and access records are small: check their CRC, so
        // that a bit flipped at rest cannot turn a batch into a deletion or
        // an item into a tombstone. (Bases and objects are checked against
        // the session they name and by their readers.)
        let destructive = matches!(
            h.kind,
            SESSION_DELETE | SESSION_BLOCK | MEM_FORGET | MEM_ACCESS | MEM_ACCESS_PACKED
        );
        if destructive && self.log.verify(addr)?.is_none() {
            // A record failed its checksum.
            return Err(Skip);
        }
        let geo = self.log.geo();
        let sector_seq = self.log.head_seq_of(addr);
        // A session the batch names or a base replaces, or one found back
        // to its first batch: filled in by the branch that finds it.
        let mut s = Session {
            head: addr,
            root: addr,
            oldest: sector_seq,
            dirty: true,
            ..Session::EMPTY
        };
        match h.kind {
            SESSION_BATCH => {
                // (Read in place: moved out of a `Result`, the meta was
                // copied whole, and the frame held it twice.)
                let mut meta = BatchMeta::EMPTY;
                meta.read_with(&mut self.log.io(), addr, h)
                    .map_err(|_| Skip)?;
                let meta = &meta;
                let uid = meta.fixed.uid;
                let added = meta.bodies_len() + u32::from(meta.fixed.count);
                if added > geo.capacity() {
                    // A batch's record lengths exceed the partition: a
                    // record length damaged at rest (the scan does not read
                    // bodies, so their CRCs are not checked here).
                    return Err(Skip);
                }
                if meta.id().is_some() {
                    // The session's name comes from here: trust it only if
                    // its CRC checks out (a flipped id byte must not make it
                    // answer to another name). A batch damaged at rest keeps
                    // its session when the name can be recovered; its own
                    // records are lost (its CRC fails when read).
                    let mut id = [0u8; MAX_SESSION_ID_BYTES];
                    s.uid = uid;
                    let name = match meta.sound_id() {
                        Some(x) => {
                            s.records = u16::from(meta.fixed.count);
                            s.size = added;
                            x
                        }
                        _ => match self.log.start_name(addr, None, &mut id)? {
                            Some((uid, n)) => {
                                self.mount_report.recovered_names += 1;
                                s.uid = uid;
                                &id[..n]
                            }
                            None => {
                                // A session's name failed its checksum.
                                return Err(Skip);
                            }
                        },
                    };
                    s.id_hash = fnv1a32(name);
                    s.id_len = name.len() as u8;
                    self.next_uid = self.next_uid.max(s.uid.wrapping_add(1));
                    // Uids are never reused: this only guards a damaged image.
                    if let Some(i) = self.index_of(s.uid) {
                        self.sessions.swap_remove(i);
                    }
                } else {
                    // A batch that does not follow its session's head, or
                    // of no known session, must check out: its uid may be
                    // what is damaged, and its records another session's.
                    // Left out, and said so in the mount's report. (A
                    // stub's head is not known until the directory is
                    // read: NO_ADDR, and no check.)
                    let prev = meta.fixed.prev;
                    let check = match self.warm_uid(uid, true)? {
                        Some(s) => s.head != NO_ADDR && s.head != prev,
                        None => prev != NO_ADDR,
                    };
                    if check && self.log.verify(addr)?.is_none() {
                        return Err(Skip);
                    }
                    // One that goes on from a stale batch (`runs_into_reused`)
                    // is stale, and so is what the table holds of its
                    // session: what lives of it comes later in the walk, as a
                    // base (else it was deleted).
                    #[cfg(feature = "sector-table")]
                    if check && prev != NO_ADDR && self.runs_into_reused(prev)? {
                        if let Some(i) = self.index_of(uid) {
                            self.sessions.swap_remove(i);
                        }
                        return Err(Skip);
                    }
                    if let Some(s) = uid_mut(&mut self.sessions, uid) {
                        // A batch whose back pointer does not lead to the head is
                        // damaged (or follows a damaged one): it still becomes the
                        // head, and a read finds the chain again by scanning the
                        // log and rebuilds the index; ignoring it would lose every
                        // later batch of the session too.
                        s.head = addr;
                        s.records = s.records.saturating_add(u16::from(meta.fixed.count));
                        s.size = s.size.saturating_add(added);
                        s.chain = s.chain.saturating_add(1);
                        s.dirty = true;
                        return Ok(());
                    } else if prev != NO_ADDR {
                        // A sound batch of a session no batch named: the scan
                        // passed the session's first batch by, for damage in it
                        // or in a chunk length before it. Follow the back
                        // pointers to it and recover the name there, or the
                        // whole session is lost.
                        self.adopt(&mut s, meta)?
                    } else {
                        return Ok(());
                    }
                }
            }
            SESSION_BASE => {
                let read = read_base(&mut self.log.io(), addr);
                let b = read.as_ref().map_err(|_| Skip)?;
                let mut id = [0u8; MAX_SESSION_ID_BYTES];
                let n = b.fixed.id_len as usize;
                let at = addr + CHUNK_HEADER_LEN;
                let name = id.split_at_mut(n).0;
                self.log.io().read_stream_after(at, BASE_FIXED, name)?;
                // A base is written for a session that exists: its name is
                // the one the table has (the base's copy is not trusted
                // unchecked). A cold session's name is checked once the
                // directory's entry is read. A base of a session the scan
                // has not met (a scan without a checkpoint, whose first
                // batch was collected long ago) starts it under its own
                // name, once the whole base checks out.
                let hash = fnv1a32(name);
                let known = self
                    .warm_uid(b.fixed.uid, true)?
                    .map(|k| (k.dir, k.id_hash, k.id_len));
                let stub = matches!(known, Some((DIR_STUB | DIR_STUB_BASE, _, _)));
                let (id_hash, id_len) = match known {
                    Some((_, h, l)) if !stub => (h, l),
                    Some(_) => (hash, n as u8),
                    None if self.log.verify(addr)?.is_some() => (hash, n as u8),
                    // A session base for no known session, damaged.
                    None => return Err(Skip),
                };
                if id_hash != hash || id_len as usize != n {
                    // A session base names another session.
                    return Err(Skip);
                }
                s.uid = b.fixed.uid;
                s.id_hash = id_hash;
                s.id_len = id_len;
                s.flags = b.fixed.flags;
                s.records = b.fixed.count as u16;
                s.root_is_base = true;
                s.oldest = b.fixed.oldest;
                s.size = b.fixed.size;
                if stub {
                    s.dir = DIR_STUB_BASE;
                }
            }
            // A collection moved bodies of the session's base out of a
            // sector it released: the chain grows by one and the oldest
            // sector moves on (records and size as they were). Checked
            // whole first: it says where the bodies are now.
            #[cfg(feature = "sector-table")]
            crate::session::SESSION_MOVES => {
                use crate::session::{MovesFixed, MOVES_FIXED};
                let mut b = [0u8; MOVES_FIXED as usize];
                self.log.io().read_stream(addr + CHUNK_HEADER_LEN, &mut b)?;
                let f = MovesFixed::decode(&b).ok_or(Skip)?;
                if self.log.verify(addr)?.is_none() {
                    return Err(Skip);
                }
                if let Some(s) = self.warm_uid(f.uid, true)? {
                    s.head = addr;
                    s.chain = s.chain.saturating_add(1);
                    s.oldest = f.oldest;
                    s.dirty = true;
                }
                return Ok(());
            }
            MEM_PUT | MEM_PUT_PLAIN | MEM_FORGET | MEM_ACCESS | MEM_ACCESS_PACKED | MEM_INDEX => {
                self.mem_apply(addr, h, sector_seq)?;
                return Ok(());
            }
            OBJECT | SESSION_DELETE | SESSION_BLOCK => {
                // An object's fixed part, or a deletion's or a block's uid
                // (its first 4 bytes): one read for the three.
                let mut b = [0u8; OBJ_FIXED as usize];
                let n = if h.kind == OBJECT {
                    OBJ_FIXED as usize
                } else {
                    4
                };
                let fixed = b.split_at_mut(n).0;
                self.log.io().read_stream(addr + CHUNK_HEADER_LEN, fixed)?;
                if h.kind != OBJECT {
                    let uid = u32_at(&b, 0);
                    if h.kind == SESSION_DELETE {
                        self.remove_uid(uid);
                        return Ok(());
                    }
                    if let Some(s) = self.warm_uid(uid, false)? {
                        s.flags |= FLAG_BLOCKED;
                        s.dirty = true;
                    }
                    return Ok(());
                }
                let slot = ObjectSlot {
                    ty: b[0],
                    key: u32_at(&b, 4),
                    addr,
                    seq: sector_seq,
                    // Checked before it replaces the version before it: a
                    // flipped key must not make it stand for another
                    // document, and a damaged one must not hide a sound one.
                    len: self.object_len(addr)?.ok_or(Skip)?,
                };
                if !matches!(slot.ty, OBJ_CHAT_MAP | OBJ_PROFILE) {
                    // Unknown object type.
                    return Err(Skip);
                }
                self.upsert_object(slot)?;
                return Ok(());
            }
            _ => return Ok(()),
        }
        Self::upsert_session(&mut self.sessions, &mut self.dir, self.log.parked(), s)?;
        Ok(())
    }

    /// Puts `s` in `sessions` (the table) in place of the session with its uid,
    /// else at the end, in place of a clean one if the table is full.
    #[inline(never)]
    pub(super) fn upsert_session(
        sessions: &mut Vec<Session, MAX_SESSIONS>,
        dir: &mut super::directory::Dir,
        parked: &mut Parked<F::Error>,
        s: Session,
    ) -> Result<(), Fail> {
        dir.forget(s.uid);
        match uid_mut(sessions, s.uid) {
            Some(x) => *x = s,
            None => {
                if !super::directory::free_slot(sessions, dir) {
                    return Err(parked.too_many_sessions(MAX_SESSIONS));
                }
                sessions
                    .push(s)
                    .map_err(|_| parked.too_many_sessions(MAX_SESSIONS))?
            }
        }
        Ok(())
    }

    /// Mount: a session that the batch at hand changes, cold in the
    /// directory, gets a stub in the table that gathers what the batches
    /// after the checkpoint change; one pass over the directory at the end
    /// of the scan fills the stubs in (`resolve_stubs`), so that a mount
    /// reads the directory once, not once a session. `raise`: the batch
    /// names the uid as its own (a session's batch or base), so the next
    /// uid is past it. The session in the table, if it is there (or has a
    /// stub there now): the replay's one lookup of the uid after it.
    fn warm_uid(&mut self, uid: u32, raise: bool) -> Result<Option<&mut Session>, Fail> {
        if raise {
            self.next_uid = self.next_uid.max(uid.wrapping_add(1));
        }
        if self.index_of(uid).is_none() && self.may_be_cold(uid) {
            let stub = Session {
                uid,
                dirty: true,
                dir: DIR_STUB,
                ..Session::EMPTY
            };
            Self::upsert_session(&mut self.sessions, &mut self.dir, self.log.parked(), stub)?;
        }
        Ok(uid_mut(&mut self.sessions, uid))
    }

    /// The session of a sound batch (meta `meta`) whose uid the mount has
    /// not met, filled in `s` (which comes with the batch's address as its
    /// head and the batch's sector as its oldest, the rest empty): its
    /// earlier batches, back to the first, are found through the back
    /// pointers (each one sound and of the same uid), and the name is
    /// recovered from the first ([`start_name`]).
    #[inline(never)]
    fn adopt(&mut self, s: &mut Session, meta: &BatchMeta) -> Result<(), Skip> {
        let uid = meta.fixed.uid;
        // The batch of a session whose name is lost.
        let lost = Skip;
        s.uid = uid;
        s.records = u16::from(meta.fixed.count);
        s.chain = 1;
        s.root = meta.fixed.prev;
        s.size = meta.bodies_len() + u32::from(meta.fixed.count);
        let mut id = [0u8; MAX_SESSION_ID_BYTES];
        for _ in 0..CHAIN_MAX {
            let root = s.root;
            if root >= self.log.geo().capacity() {
                return Err(lost);
            }
            if let Some(seq) = self.seq_at(root) {
                s.oldest = s.oldest.min(seq);
            }
            let sound = self.log.verify(root)?.is_some();
            // (Read in place, where it is used: moved out of a `Result`,
            // wrapped in an `Option` or read into a variable set in one
            // branch only, the meta was copied whole, and the frame held it
            // twice.)
            let mut read_meta = BatchMeta::EMPTY;
            let read = match sound {
                true => read_meta.read(&mut self.log.io(), root),
                // (Not read: any error stands for it.)
                false => Err(Fail::NOT_FORMATTED),
            };
            let m = match read {
                Ok(()) => Some(&read_meta),
                Err(_) if sound => return Err(Skip),
                Err(_) => None,
            };
            let named = self.log.start_name(root, Some(uid), &mut id)?;
            // A sound batch of the session counts: the first one, whose
            // name was found (the scan skipped it), or one before the head
            // that is not a first batch, which lets the walk go on past it.
            // (Looked at where it is: a batch's meta is too large to move.)
            let m = m.filter(|m| {
                m.fixed.uid == uid
                    && (named.is_some() || m.id().is_none() && m.fixed.prev != NO_ADDR)
            });
            if let Some(m) = m {
                s.records = s.records.saturating_add(u16::from(m.fixed.count));
                s.size = s
                    .size
                    .saturating_add(m.bodies_len() + u32::from(m.fixed.count));
            }
            if let Some((_, n)) = named {
                s.id_hash = fnv1a32(&id[..n]);
                s.id_len = n as u8;
                if m.is_none() {
                    self.mount_report.recovered_names += 1;
                }
                return Ok(());
            }
            match m {
                Some(m) => {
                    s.chain += 1;
                    s.root = m.fixed.prev;
                }
                None => return Err(lost),
            }
        }
        Err(lost)
    }

    /// Whether the batch at `addr` goes on into a sector that does not
    /// carry the sequence after its own. The head opens a batch's sectors
    /// one after another, so that sector was let go since (a collection
    /// moved out what was live in it first) and maybe opened again: the
    /// batch is stale, not damaged. A mount without a checkpoint takes
    /// every sector with a sound header, those the running store had let
    /// go too; with the sector table a sector let go out of order is opened
    /// again while the sectors round it still hold what was written before
    /// it (in ring order the sectors let go are the oldest, and the walk
    /// back from the head stops at the first sequence missing). Damage at
    /// rest leaves the sequences as they were.
    #[cfg(feature = "sector-table")]
    #[inline(never)]
    fn runs_into_reused(&mut self, addr: u32) -> Result<bool, Fail> {
        let geo = self.log.geo();
        let Some(mut seq) = self.seq_at(addr) else {
            return Ok(false);
        };
        let Some(first) = self.log.io().chunk_header(addr)? else {
            return Ok(false);
        };
        let (mut at, mut c) = (addr, first);
        for _ in 0..geo.count {
            if c.is_last() {
                return Ok(false);
            }
            let next = self.log.io().successor(geo.sector_of(at));
            if self.log.seq_of_sector(next) != seq.checked_add(1) {
                return Ok(true);
            }
            seq += 1;
            if !crate::cursor::continuation(
                &mut self.log.io(),
                &mut at,
                &mut c,
                first.seq,
                first.kind,
            )? {
                return Ok(false);
            }
        }
        Ok(false)
    }

    /// Sector sequence of the sector holding `addr`, if it is in use
    /// (`Log::seq_of_sector`; out of line for the mount's and the
    /// checkpoints' callers).
    #[inline(never)]
    pub(super) fn seq_at(&self, addr: u32) -> Option<u32> {
        self.log.seq_of_sector(self.log.geo().sector_of(addr))
    }

    /// Remembers where the scan first left a chunk out for damage since the
    /// last memory record (one damaged batch can be met more than once: its
    /// first chunk, then its continuation), and counts the `ignored`
    /// batches (0 or 1) it left out there.
    #[inline(never)]
    pub(super) fn note_scan_damage(&mut self, at: u32, ignored: u32) {
        self.mount_report.ignored_batches += ignored;
        if self.scan_damaged == NO_ADDR {
            self.scan_damaged = at;
        }
    }
}

/// The session with `uid` in `sessions` (the table), if it is there; out
/// of line for the replay's four lookups.
#[inline(never)]
fn uid_mut(sessions: &mut [Session], uid: u32) -> Option<&mut Session> {
    sessions.iter_mut().find(|s| s.uid == uid)
}
