//! Stored objects (`docs/FORMAT.md`, "Object"): the small whole documents
//! that replace their previous version, today profile documents and chat
//! session maps. This file owns them on flash (write, read, the RAM table of
//! newest versions); their APIs are `profiles.rs` and `chats.rs`.
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

use super::{Store, Work};
use crate::error::{Error, Fail};
#[cfg(any(feature = "chat", feature = "profiles"))]
use crate::layout::CHUNK_HEADER_LEN;

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
    pub(super) fn encode(&self, b: &mut [u8; OBJ_ENCODED]) {
        b[0] = self.ty;
        b[1..4].fill(0);
        b[4..8].copy_from_slice(&self.key.to_le_bytes());
        b[8..12].copy_from_slice(&self.addr.to_le_bytes());
        b[12..16].copy_from_slice(&self.seq.to_le_bytes());
        b[16..20].copy_from_slice(&self.len.to_le_bytes());
    }
}

impl<F: NorFlash, const MAX_SESSIONS: usize, W: BorrowMut<Work>> Store<F, MAX_SESSIONS, W> {
    /// Reads an object's data length from its batch (CRC checked).
    pub(super) fn object_len(&mut self, addr: u32) -> Result<Option<u32>, Fail<F::Error>> {
        Ok(self
            .log
            .verify(addr)?
            .and_then(|total| total.checked_sub(OBJ_FIXED)))
    }

    /// Records `slot` as the newest version of its object.
    pub(super) fn upsert_object(&mut self, slot: ObjectSlot) -> Result<(), Fail<F::Error>> {
        match self
            .objects
            .iter_mut()
            .find(|o| o.ty == slot.ty && o.key == slot.key)
        {
            Some(o) => *o = slot,
            None => self
                .objects
                .push(slot)
                .map_err(|_| Error::TooManySessions { max: MAX_OBJECTS })?,
        }
        Ok(())
    }

    /// Where the newest object of this type and key has its data, and how
    /// long it is (its CRC checked); `None` if there is none.
    #[cfg(any(feature = "chat", feature = "profiles"))]
    pub(super) fn object_data(
        &mut self,
        ty: u8,
        key: u32,
    ) -> Result<Option<(u32, usize)>, Fail<F::Error>> {
        let Some(o) = self
            .objects
            .iter()
            .find(|o| o.ty == ty && o.key == key)
            .copied()
        else {
            return Ok(None);
        };
        let len = self.object_len(o.addr)?.ok_or(Error::Corrupted {
            address: o.addr,
            what: "a stored document failed its checksum",
        })? as usize;
        let at = self
            .log
            .io()
            .stream_advance(o.addr + CHUNK_HEADER_LEN, OBJ_FIXED);
        Ok(Some((at, len)))
    }
}
