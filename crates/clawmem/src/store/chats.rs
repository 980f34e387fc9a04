//! Chat session maps (ESP-Claw `/session`): which sessions a chat has and
//! which is current, each map stored as an object of type `OBJ_CHAT_MAP`
//! keyed by the FNV-1a of the chat key (`objects.rs` owns objects on flash;
//! the map's rules are the pure `crate::chat`).
//!
//! Behind the `chat` feature. A build without it still relocates and
//! checkpoints the maps a store holds (they are plain objects to the layers
//! below), so mounting a store written with chat maps loses nothing.
//!
//! Power loss: a map is replaced atomically; a `/session` delete removes the
//! history first, then the alias (see [`Store::session_command`]).

use core::borrow::BorrowMut;

use embedded_storage::nor_flash::NorFlash;

use super::objects::OBJ_CHAT_MAP;
use super::{Store, Work};
use crate::chat::{ChatKey, ChatSessions, SessionCommand, SessionError, SessionReply};
use crate::error::{fail, Error, Fail, Kind};
use crate::naming::fnv1a32;

impl<F: NorFlash, const MAX_SESSIONS: usize, W: BorrowMut<Work>> Store<F, MAX_SESSIONS, W> {
    /// A chat's session map (ESP-Claw `/session`). On first use the chat
    /// gets `default_01` as its current session, which is stored.
    pub fn chat_sessions(&mut self, chat: &ChatKey) -> Result<ChatSessions, Error<F::Error>> {
        let r = self.chat_sessions_inner(chat);
        self.surface(r)
    }

    /// [`chat_sessions`](Self::chat_sessions) with the engine's error.
    pub(crate) fn chat_sessions_inner(&mut self, chat: &ChatKey) -> Result<ChatSessions, Fail> {
        // One map on the stack: the stored one is decoded into it in place.
        let mut map = ChatSessions::first_use(chat.clone());
        if !self.load_chat_sessions(chat, &mut map)? {
            self.save_chat_sessions(&map)?;
        }
        Ok(map)
    }

    /// Reads the stored chat map with `key` into the work area's scratch;
    /// where its bytes are and their length, `None` if none is stored.
    pub(super) fn read_chat_map(&mut self, key: u32) -> Result<Option<(u32, usize)>, Fail> {
        let Some((at, n)) = self.object_data(OBJ_CHAT_MAP, key)? else {
            return Ok(None);
        };
        let w: &mut Work = self.work.borrow_mut();
        let buf = w.scratch.get_mut(..n).ok_or_else(|| {
            self.log.parked().at(
                fail!(Corrupted, "a chat session map is longer than any map"),
                at,
            )
        })?;
        self.log.io().read_stream(at, buf)?;
        Ok(Some((at, n)))
    }

    /// Decodes the stored map of `chat` into `map`; `false` if none is
    /// stored (`map` is then unchanged). The map is read into the work
    /// area's scratch, not onto the stack.
    #[inline(always)]
    fn load_chat_sessions(&mut self, chat: &ChatKey, map: &mut ChatSessions) -> Result<bool, Fail> {
        Ok(self.load_chat_sessions_word(chat, map)? != 0)
    }

    /// [`Self::load_chat_sessions`] as a word (1 or 0; see `Io::chunk_crc_ok_word`).
    #[inline(never)]
    fn load_chat_sessions_word(
        &mut self,
        chat: &ChatKey,
        map: &mut ChatSessions,
    ) -> Result<u32, Fail> {
        let key = fnv1a32(chat.as_str().as_bytes());
        let Some((_, n)) = self.read_chat_map(key)? else {
            return Ok(0);
        };
        let w: &mut Work = self.work.borrow_mut();
        match map.decode_from(&w.scratch[..n]) {
            Ok(()) if map.key() == chat => Ok(1),
            // Another chat key with the same hash: not supported.
            _ => Err(fail!(InvalidInput, "chat key collides with another chat's")),
        }
    }

    /// Stores a chat's session map.
    fn save_chat_sessions(&mut self, map: &ChatSessions) -> Result<(), Fail> {
        let key = fnv1a32(map.key().as_str().as_bytes());
        self.write_object(OBJ_CHAT_MAP, key, &[], Some(map))
    }

    /// Runs a `/session` command for a chat (parse it with
    /// [`crate::chat::parse_session_command`]). `Ok(Err(_))` is a refusal whose
    /// text is ESP-Claw's reply; `list` replies with [`ChatSessions::render_list`]
    /// of [`chat_sessions`](Self::chat_sessions) and changes nothing.
    /// `delete` removes the session's whole history too.
    ///
    /// On a chat that has no map yet, as ESP-Claw: `new [name]` creates the
    /// map with only `name` (or `default_01`); `delete` answers "no such
    /// session" and stores nothing; `list` and `switch` first store the
    /// first-use map (`default_01`, current), as any lookup does.
    ///
    /// Power loss: the map is replaced atomically; a delete removes the
    /// history first, so a cut between the two leaves an alias whose history
    /// is empty, never a history without its alias being deletable.
    pub fn session_command(
        &mut self,
        chat: &ChatKey,
        command: &SessionCommand,
    ) -> Result<Result<Option<SessionReply>, SessionError>, Error<F::Error>> {
        let r = self.session_command_inner(chat, command);
        self.surface(r)
    }

    /// [`session_command`](Self::session_command) with the engine's error.
    pub(crate) fn session_command_inner(
        &mut self,
        chat: &ChatKey,
        command: &SessionCommand,
    ) -> Result<Result<Option<SessionReply>, SessionError>, Fail> {
        // One map on the stack (as `chat_sessions`).
        let mut map = ChatSessions::first_use(chat.clone());
        let stored = self.load_chat_sessions(chat, &mut map)?;
        // A chat without a map: `list` and `switch` store the first-use map
        // (ESP-Claw's `claw_session_mgr_load_or_init_mapping_locked`); `new`
        // starts the map empty (`claw_session_mgr_new_chat_session`) and
        // `delete` only loads (`claw_session_mgr_delete_chat_session`), so
        // neither stores `default_01` first.
        if !stored {
            match command {
                SessionCommand::New(_) | SessionCommand::Delete(_) => map.start_empty(),
                _ => self.save_chat_sessions(&map)?,
            }
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
                let index = match map.delete_index(alias) {
                    Ok(index) => index,
                    Err(e) => return Ok(Err(e)),
                };
                let id = map.session_id(alias);
                match self.delete_session_inner(id.as_str()) {
                    Ok(()) => {}
                    Err(e) if matches!(e.kind(), Kind::NotFound | Kind::TooLarge) => {}
                    Err(e) => return Err(e),
                }
                // (The map is as checked: the delete is allowed.)
                map.delete_at(index);
                SessionReply::Deleted(alias.clone())
            }
        };
        self.save_chat_sessions(&map)?;
        Ok(Ok(Some(reply)))
    }
}
