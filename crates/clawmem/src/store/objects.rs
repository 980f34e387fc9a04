//! Stored objects: profile documents and chat session maps (`docs/FORMAT.md`,
//! "Object").
//!
//! An object is one batch holding a type, a key and the data. The newest
//! object of a given type and key replaces every older one; RAM keeps where
//! the newest version of each is ([`ObjectSlot`], at most [`MAX_OBJECTS`]),
//! and the checkpoint carries that table. An object's CRC is checked before
//! it replaces an older version at mount and when it is read, so damage can
//! neither make it stand for another document nor hide a sound one.
//!
//! Power loss: every write of an object is atomic; the old version stands
//! until the new one commits. A `/session` delete removes the history first,
//! then the alias (see [`Store::session_command`]).

use core::borrow::BorrowMut;

use embedded_storage::nor_flash::NorFlash;

use super::{Priority, Store, Work};
use crate::chat::{ChatKey, ChatSessions, SessionCommand, SessionError, SessionReply};
use crate::error::{Error, Fail};
use crate::layout::CHUNK_HEADER_LEN;
use crate::log::Slices;
use crate::naming::fnv1a32;
use crate::profile::ProfileDoc;

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
    /// Byte `r` (below [`OBJ_ENCODED`]) of the slot's encoding in a
    /// checkpoint: type u8, zero u8, zero u16, key, address, sector
    /// sequence and length u32, all little-endian.
    pub(super) fn encoded_byte(&self, r: usize) -> u8 {
        let word = match r / 4 {
            0 => u32::from(self.ty),
            1 => self.key,
            2 => self.addr,
            3 => self.seq,
            _ => self.len,
        };
        (word >> (8 * (r % 4))) as u8
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

    /// Writes a new version of an object: `data`, or the encoding of `map`
    /// when one is given. A map is encoded into the work area's scratch once
    /// room is made (making room may use the scratch).
    ///
    /// Power loss: atomic; the old version stands until the new one commits.
    fn write_object(
        &mut self,
        ty: u8,
        key: u32,
        data: &[u8],
        map: Option<&ChatSessions>,
    ) -> Result<(), Fail<F::Error>> {
        let n = match map {
            Some(m) => m.encoded_len(),
            None => data.len(),
        };
        if map.is_some() && n > crate::chat::MAP_ENCODED_MAX_BYTES {
            return Err(Error::LogicBug("chat map larger than its maximum"));
        }
        let exists = self.objects.iter().any(|o| o.ty == ty && o.key == key);
        if !exists && self.objects.is_full() {
            return Err(Error::TooManySessions { max: MAX_OBJECTS });
        }
        let len = OBJ_FIXED + n as u32;
        self.prepare_write(len, Priority::User)?;
        let w: &mut Work = self.work.borrow_mut();
        let data = match map {
            Some(m) => {
                m.encode(&mut w.scratch)
                    .map_err(|_| Error::LogicBug("chat map larger than its maximum"))?;
                &w.scratch[..n]
            }
            None => data,
        };
        let mut head = [0u8; OBJ_FIXED as usize];
        head[0] = ty;
        head[4..8].copy_from_slice(&key.to_le_bytes());
        let mut payload = Slices([&head[..], data]);
        let (addr, _) = self.log.write_batch(OBJECT, &mut payload)?;
        self.bytes_since_checkpoint = self.bytes_since_checkpoint.saturating_add(len);
        let seq = self.log.head_seq_of(addr);
        self.upsert_object(ObjectSlot {
            ty,
            key,
            addr,
            seq,
            len: n as u32,
        })
    }

    /// Reads an object's data into `out`; `None` if there is none.
    fn read_object(
        &mut self,
        ty: u8,
        key: u32,
        out: &mut [u8],
    ) -> Result<Option<usize>, Fail<F::Error>> {
        let Some((at, len)) = self.object_data(ty, key)? else {
            return Ok(None);
        };
        let dst = out
            .get_mut(..len)
            .ok_or(Error::BufferTooSmall { needed: len })?;
        self.log.io().read_stream(at, dst)?;
        Ok(Some(len))
    }

    /// Where the newest object of this type and key has its data, and how
    /// long it is (its CRC checked); `None` if there is none.
    fn object_data(&mut self, ty: u8, key: u32) -> Result<Option<(u32, usize)>, Fail<F::Error>> {
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

    /// Reads a profile document whole into `out` and returns its length.
    /// A document never written is created with its default contents first
    /// (as ESP-Claw creates the missing file); on a full partition the
    /// default is returned without being stored, so a read never fails for
    /// lack of room.
    ///
    /// Power loss: creating the default is atomic.
    pub fn profile_read(
        &mut self,
        doc: ProfileDoc,
        out: &mut [u8],
    ) -> Result<usize, Error<F::Error>> {
        if let Some(n) = self.read_object(OBJ_PROFILE, u32::from(doc.tag()), out)? {
            return Ok(n);
        }
        let default = doc.default_contents();
        if out.len() < default.len() {
            return Err(Error::BufferTooSmall {
                needed: default.len(),
            });
        }
        match self.profile_write(doc, default) {
            Ok(()) | Err(Error::Full { .. }) => {}
            Err(e) => return Err(e),
        }
        out[..default.len()].copy_from_slice(default.as_bytes());
        Ok(default.len())
    }

    /// Length of a profile document (its default's if never written).
    pub fn profile_len(&mut self, doc: ProfileDoc) -> Result<usize, Error<F::Error>> {
        match self
            .objects
            .iter()
            .find(|o| o.ty == OBJ_PROFILE && o.key == u32::from(doc.tag()))
        {
            Some(o) => Ok(o.len as usize),
            None => Ok(doc.default_contents().len()),
        }
    }

    /// Replaces a profile document whole.
    ///
    /// Power loss: atomic; a read after any cut returns the old or the new
    /// document, never a mix.
    pub fn profile_write(&mut self, doc: ProfileDoc, body: &str) -> Result<(), Error<F::Error>> {
        if body.len() > self.config.profile_max_bytes {
            return Err(Error::TooLarge {
                what: "profile document",
                size: body.len(),
                limit: self.config.profile_max_bytes,
            });
        }
        Ok(self.write_object(OBJ_PROFILE, u32::from(doc.tag()), body.as_bytes(), None)?)
    }

    /// A chat's session map (ESP-Claw `/session`). On first use the chat
    /// gets `default_01` as its current session, which is stored.
    pub fn chat_sessions(&mut self, chat: &ChatKey) -> Result<ChatSessions, Error<F::Error>> {
        // One map on the stack: the stored one is decoded into it in place.
        let mut map = ChatSessions::first_use(chat.clone());
        if !self.load_chat_sessions(chat, &mut map)? {
            self.save_chat_sessions(&map)?;
        }
        Ok(map)
    }

    /// Decodes the stored map of `chat` into `map`; `false` if none is
    /// stored (`map` is then unchanged). The map is read into the work
    /// area's scratch, not onto the stack.
    #[inline(never)]
    fn load_chat_sessions(
        &mut self,
        chat: &ChatKey,
        map: &mut ChatSessions,
    ) -> Result<bool, Fail<F::Error>> {
        let key = fnv1a32(chat.as_str().as_bytes());
        let Some((at, n)) = self.object_data(OBJ_CHAT_MAP, key)? else {
            return Ok(false);
        };
        let w: &mut Work = self.work.borrow_mut();
        let buf = w.scratch.get_mut(..n).ok_or(Error::Corrupted {
            address: at,
            what: "a chat session map is longer than any map",
        })?;
        self.log.io().read_stream(at, buf)?;
        match map.decode_from(buf) {
            Ok(()) if map.key() == chat => Ok(true),
            // Another chat key with the same hash: not supported.
            _ => Err(Error::InvalidInput("chat key collides with another chat's")),
        }
    }

    /// Stores a chat's session map.
    fn save_chat_sessions(&mut self, map: &ChatSessions) -> Result<(), Fail<F::Error>> {
        let key = fnv1a32(map.key().as_str().as_bytes());
        self.write_object(OBJ_CHAT_MAP, key, &[], Some(map))
    }

    /// Runs a `/session` command for a chat (parse it with
    /// [`crate::chat::parse_session_command`]). `Ok(Err(_))` is a refusal whose
    /// text is ESP-Claw's reply; `list` replies with [`ChatSessions::render_list`]
    /// of [`chat_sessions`](Self::chat_sessions) and changes nothing.
    /// `delete` removes the session's whole history too.
    ///
    /// Power loss: the map is replaced atomically; a delete removes the
    /// history first, so a cut between the two leaves an alias whose history
    /// is empty, never a history without its alias being deletable.
    pub fn session_command(
        &mut self,
        chat: &ChatKey,
        command: &SessionCommand,
    ) -> Result<Result<Option<SessionReply>, SessionError>, Error<F::Error>> {
        // One map on the stack (as `chat_sessions`, which this does).
        let mut map = ChatSessions::first_use(chat.clone());
        if !self.load_chat_sessions(chat, &mut map)? {
            self.save_chat_sessions(&map)?;
        }
        let reply = match command {
            SessionCommand::List => return Ok(Ok(None)),
            SessionCommand::New(name) => match map.new_session(name.as_ref()) {
                Ok(alias) => SessionReply::Started(alias),
                Err(e) => return Ok(Err(e)),
            },
            SessionCommand::Switch(alias) => match map.switch_to(alias) {
                Ok(()) => SessionReply::Switched(alias.clone()),
                Err(e) => return Ok(Err(e)),
            },
            SessionCommand::Delete(alias) => {
                if let Err(e) = map.check_delete(alias) {
                    return Ok(Err(e));
                }
                let id = map.session_id(alias);
                match self.delete_session(id.as_str()) {
                    Ok(()) | Err(Error::NotFound) | Err(Error::TooLarge { .. }) => {}
                    Err(e) => return Err(e),
                }
                if let Err(e) = map.delete(alias) {
                    return Ok(Err(e));
                }
                SessionReply::Deleted(alias.clone())
            }
        };
        self.save_chat_sessions(&map)?;
        Ok(Ok(Some(reply)))
    }
}
