//! Stored objects (`docs/FORMAT.md`, "Object"): the small whole documents
//! that replace their previous version, today profile documents and chat
//! session maps. This file owns them on flash (write, read, the RAM table of
//! newest versions); their APIs are `profiles.rs` (feature `profiles`) and
//! `chats.rs` (feature `chat`).
//!
//! An object is one batch holding a type, a key and the data. The newest
//! object of a given type and key replaces every older one; RAM keeps where
//! the newest version of each is ([`ObjectSlot`], at most [`MAX_OBJECTS`]),
//! and the checkpoint carries that table. An object's CRC is checked before
//! it replaces an older version at mount and when it is read, so damage can
//! neither make it stand for another document nor hide a sound one.
//!
//! Power loss: every write of an object is atomic; the old version stands
//! until the new one commits.

use core::borrow::BorrowMut;

use embedded_storage::nor_flash::NorFlash;

#[cfg(any(feature = "chat", feature = "profiles"))]
use super::Priority;
use super::{Store, Work};
#[cfg(any(feature = "chat", feature = "profiles"))]
use crate::chat::ChatSessions;
use crate::error::Fail;
#[cfg(any(feature = "chat", feature = "profiles"))]
use crate::layout::CHUNK_HEADER_LEN;
#[cfg(any(feature = "chat", feature = "profiles"))]
use crate::log::Slices;

/// The record kind of a stored object (class
/// [`CLASS_OBJECT`](crate::layout::kind::CLASS_OBJECT)): a whole small
/// object that replaces the previous one with the same type and key.
pub(crate) const OBJECT: u8 = 0x20;
const _: () = assert!(crate::layout::kind::defined_in(
    OBJECT,
    crate::layout::kind::CLASS_OBJECT
));

/// Most objects (profile documents and chat session maps) a store holds.
pub const MAX_OBJECTS: usize = 24;

/// Object type: a chat's session map (key: FNV-1a of the chat key).
pub(super) const OBJ_CHAT_MAP: u8 = 1;
/// Object type: a profile document (key: its tag).
pub(super) const OBJ_PROFILE: u8 = 2;
/// Object payload header: type u8, zero u8, zero u16, key u32.
pub(super) const OBJ_FIXED: u32 = 8;
/// Bytes of one object slot in a checkpoint.
pub(super) const OBJ_ENCODED: usize = 20;

/// The newest version of one stored object.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) struct ObjectSlot {
    pub(super) ty: u8,
    pub(super) key: u32,
    /// First chunk of its batch.
    pub(super) addr: u32,
    /// Sector sequence of the sector it starts in.
    pub(super) seq: u32,
    /// Data length (payload minus the object header).
    pub(super) len: u32,
}

impl ObjectSlot {
    /// The slot's encoding in a checkpoint ([`OBJ_ENCODED`] bytes), as
    /// little-endian words: type u8, zero u8, zero u16, then key, address,
    /// sector sequence and length u32.
    pub(super) fn words(&self) -> [u32; OBJ_ENCODED / 4] {
        [u32::from(self.ty), self.key, self.addr, self.seq, self.len]
    }
}

impl<F: NorFlash, const MAX_SESSIONS: usize, W: BorrowMut<Work>> Store<F, MAX_SESSIONS, W> {
    /// Reads an object's data length from its batch (CRC checked).
    #[inline(always)]
    pub(super) fn object_len(&mut self, addr: u32) -> Result<Option<u32>, Fail> {
        let n = self.object_len_word(addr)?;
        Ok((n != u32::MAX).then_some(n))
    }

    /// [`Self::object_len`] as a word, `u32::MAX` for `None` (a length less
    /// `OBJ_FIXED` is less): a `Result<u32, _>` comes back in registers.
    #[inline(never)]
    fn object_len_word(&mut self, addr: u32) -> Result<u32, Fail> {
        Ok(self
            .log
            .verify(addr)?
            .and_then(|total| total.checked_sub(OBJ_FIXED))
            .unwrap_or(u32::MAX))
    }

    /// The position in the table of the object of type `ty` with `key`, or
    /// the table's length if there is none (a word, one loop for every
    /// lookup).
    #[inline(never)]
    pub(super) fn object_index(&self, ty: u8, key: u32) -> usize {
        self.objects
            .iter()
            .position(|o| o.ty == ty && o.key == key)
            .unwrap_or(self.objects.len())
    }

    pub(super) fn upsert_object(&mut self, slot: ObjectSlot) -> Result<(), Fail> {
        let k = self.object_index(slot.ty, slot.key);
        match self.objects.get_mut(k) {
            Some(o) => *o = slot,
            None => self
                .objects
                .push(slot)
                .map_err(|_| self.log.parked().too_many_sessions(MAX_OBJECTS))?,
        }
        Ok(())
    }

    #[cfg(any(feature = "chat", feature = "profiles"))]
    /// Writes a new version of an object: `data`, or the encoding of `map`
    /// when one is given. A map is encoded into the work area's scratch once
    /// room is made (making room may use the scratch).
    ///
    /// Power loss: atomic; the old version stands until the new one commits.
    pub(super) fn write_object(
        &mut self,
        ty: u8,
        key: u32,
        data: &[u8],
        map: Option<&ChatSessions>,
    ) -> Result<(), Fail> {
        let n = match map {
            Some(m) => m.encoded_len(),
            None => data.len(),
        };
        if map.is_some() && n > crate::chat::MAP_ENCODED_MAX_BYTES {
            return Err(crate::error::fail!(
                LogicBug,
                "chat map larger than its maximum"
            ));
        }
        let exists = self.object_index(ty, key) < self.objects.len();
        if !exists && self.objects.is_full() {
            return Err(self.log.parked().too_many_sessions(MAX_OBJECTS));
        }
        let len = OBJ_FIXED + n as u32;
        self.prepare_write(len, Priority::User)?;
        let w: &mut Work = self.work.borrow_mut();
        let data = match map {
            Some(m) => {
                m.encode(&mut w.scratch).map_err(|_| {
                    crate::error::fail!(LogicBug, "chat map larger than its maximum")
                })?;
                &w.scratch[..n]
            }
            None => data,
        };
        // The type, three zero bytes and the key: two little-endian words.
        let head: [u8; OBJ_FIXED as usize] = (u64::from(ty) | u64::from(key) << 32).to_le_bytes();
        let mut payload = Slices([&head[..], data]);
        // Not `write_prepared`: the payload borrows the work area.
        let (addr, _) = self.log.write_batch(OBJECT, &mut payload)?;
        self.count_written(len);
        let seq = self.log.head_seq_of(addr);
        #[cfg(feature = "sector-table")]
        let old = self.objects.get(self.object_index(ty, key)).map(|o| o.addr);
        let r = self.upsert_object(ObjectSlot {
            ty,
            key,
            addr,
            seq,
            len: n as u32,
        });
        // The old version is dead (`store/dead.rs`).
        #[cfg(feature = "sector-table")]
        if let (Ok(()), Some(old)) = (&r, old) {
            self.batch_died(old);
        }
        r
    }

    #[cfg(feature = "profiles")]
    /// Reads an object's data into `out`; `None` if there is none.
    pub(super) fn read_object(
        &mut self,
        ty: u8,
        key: u32,
        out: &mut [u8],
    ) -> Result<Option<usize>, Fail> {
        let Some((at, len)) = self.object_data(ty, key)? else {
            return Ok(None);
        };
        let dst = out
            .get_mut(..len)
            .ok_or(self.log.parked().buffer_too_small(len))?;
        self.log.io().read_stream(at, dst)?;
        Ok(Some(len))
    }

    #[cfg(any(feature = "chat", feature = "profiles"))]
    /// Where the newest object of this type and key has its data, and how
    /// long it is (its CRC checked); `None` if there is none.
    pub(super) fn object_data(&mut self, ty: u8, key: u32) -> Result<Option<(u32, usize)>, Fail> {
        let Some(o) = self.objects.get(self.object_index(ty, key)).copied() else {
            return Ok(None);
        };
        let len = self.object_len(o.addr)?.ok_or_else(|| {
            let f = crate::error::fail!(Corrupted, "a stored document failed its checksum");
            self.log.parked().at(f, o.addr)
        })? as usize;
        let at = self
            .log
            .io()
            .stream_advance(o.addr + CHUNK_HEADER_LEN, OBJ_FIXED);
        Ok(Some((at, len)))
    }
}
