//! Chat-level session management: the `/session` commands and the per-chat
//! map of session aliases.
//!
//! Behaviour and texts follow ESP-Claw's `claw_session_mgr`
//! (`components/claw_modules/claw_manager/src/claw_session_mgr.c`, the map)
//! and `cap_session_mgr` (the `/session` command parser and its replies):
//!
//! - A chat is identified by its key `chat:<channel>:<chat_id>` (or
//!   `agent:<n>:chat:<channel>:<chat_id>` for agent `n` > 0), at most 159 bytes.
//! - Per chat key a map holds 1 to 32 aliases, in creation order, and the
//!   current one. An alias is 1 to 32 bytes of `[A-Za-z0-9_-]`; aliases compare
//!   byte for byte.
//! - The session id of an alias is `<chat key>:<alias>`.
//! - First use of a chat (any lookup of the current session, `list`,
//!   `switch`: ESP-Claw's `claw_session_mgr_load_or_init_mapping_locked`)
//!   creates the map with `default_01` as current:
//!   [`ChatSessions::first_use`]. `new` on a chat without a map starts the
//!   map empty and adds the new session
//!   (`claw_session_mgr_new_chat_session`, [`ChatSessions::create`]): a
//!   named `new` therefore does not create `default_01`, and `new` without a
//!   name starts `default_01`. `delete` on a chat without a map answers "no
//!   such session" and creates none (`claw_session_mgr_delete_chat_session`
//!   only loads).
//! - `new` without a name takes the first unused `default_NN` (`NN` = 01 to
//!   32), so numbers freed by `delete` are reused; a new session becomes
//!   current. With 32 sessions `new` fails before the name is checked.
//! - `switch` to an unknown alias, and `delete` of an unknown alias (or on a
//!   chat without a map), fail with "no such session"; the current session
//!   cannot be deleted. `delete` keeps the order of the others.
//! - `list` prints `Sessions:` and then one line per session,
//!   `* <alias>`, with ` (current)` after the current one, lines joined by
//!   `\n`, no trailing newline.
//!
//! The map has fixed capacity (`heapless`), renders into any
//! [`core::fmt::Write`], and has a compact, versioned byte encoding
//! ([`ChatSessions::encode`], [`ChatSessions::decode`]) for the engine to store
//! as a record; decoding validates everything ESP-Claw's
//! `claw_session_mgr_validate_alias_map` does and never panics.
//!
//! Differences from ESP-Claw, deliberate: with 32 sessions ESP-Claw answers
//! "Session command failed: unable to access session storage."; here
//! [`SessionError::TooManySessions`] says what is wrong. ESP-Claw stores the map
//! as JSON in a FAT file rewritten in place; here it is a byte record that the
//! engine writes atomically.
//!
//! Pure logic: no flash I/O, so nothing here is affected by power loss. The
//! engine deletes a session's history before it persists the map without the
//! alias, as ESP-Claw does, so a power cut in between leaves an alias with an
//! empty history, never history without an alias.

use core::fmt::{self, Write as _};

use heapless::{String, Vec};

/// Longest alias, in bytes.
pub const ALIAS_MAX_BYTES: usize = 32;

/// Most sessions one chat can have.
pub const MAX_SESSIONS_PER_CHAT: usize = 32;

/// Prefix of the generated aliases `default_01` to `default_32`.
pub const DEFAULT_ALIAS_PREFIX: &str = "default_";

/// The alias a chat starts with.
pub const FIRST_DEFAULT_ALIAS: &str = "default_01";

/// Longest chat key, in bytes (ESP-Claw's key buffer holds 160 bytes with
/// the terminating NUL).
pub const CHAT_KEY_MAX_BYTES: usize = 159;

/// Capacity of a session id `<chat key>:<alias>`; every id fits.
pub const SESSION_ID_CAPACITY: usize = CHAT_KEY_MAX_BYTES + 1 + ALIAS_MAX_BYTES;

/// A session id, `<chat key>:<alias>`.
pub type SessionId = String<SESSION_ID_CAPACITY>;

/// The reply to a `/session` command that does not parse (ESP-Claw's usage
/// text).
pub const USAGE_TEXT: &str = "Usage:\n\
/session new [name]       Create and switch to a new session\n\
/session list             List sessions in this chat\n\
/session switch <name>    Switch to an existing session\n\
/session delete <name>    Delete a non-current session\n\
\n\
Examples:\n\
/session new\n\
/session new project-a\n\
/session list\n\
/session switch project-a\n\
/session delete project-a\n\
\n\
Session names must be 1-32 characters and may only contain A-Z, a-z, 0-9, _ or -.";

/// ESP-Claw's reply when the map or the history cannot be read or written.
pub const STORAGE_ERROR_TEXT: &str = "Session command failed: unable to access session storage.";

/// ESP-Claw's reply to a `/session` command that does not come from a chat.
pub const MISSING_CHAT_CONTEXT_TEXT: &str = "Session command failed: missing chat context.";

const _: () = assert!(MAX_SESSIONS_PER_CHAT <= 99, "default_NN has two digits");
const _: () = assert!(MAX_SESSIONS_PER_CHAT <= u8::MAX as usize);
const _: () = assert!(CHAT_KEY_MAX_BYTES <= u8::MAX as usize);
const _: () = assert!(ALIAS_MAX_BYTES <= u8::MAX as usize);

/// `true` for the bytes an alias may contain, `[A-Za-z0-9_-]`.
pub const fn is_alias_byte(byte: u8) -> bool {
    byte.is_ascii_alphanumeric() || byte == b'_' || byte == b'-'
}

/// Why a string is not an alias.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum InvalidAlias {
    /// The alias is empty.
    Empty,
    /// The alias is longer than [`ALIAS_MAX_BYTES`].
    TooLong {
        /// Its length, in bytes.
        len_bytes: usize,
    },
    /// The alias contains a byte outside `[A-Za-z0-9_-]`.
    BadByte {
        /// Position of the byte.
        at: usize,
        /// The byte.
        byte: u8,
    },
}

impl fmt::Display for InvalidAlias {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match *self {
            InvalidAlias::Empty => f.write_str("session name is empty"),
            InvalidAlias::TooLong { len_bytes } => write!(
                f,
                "session name is {len_bytes} bytes, longer than {ALIAS_MAX_BYTES}"
            ),
            InvalidAlias::BadByte { at, byte } => write!(
                f,
                "session name has byte {byte:#04x} at {at}; only A-Z, a-z, 0-9, _ and - are allowed"
            ),
        }
    }
}

/// A valid session alias: 1 to 32 bytes of `[A-Za-z0-9_-]`.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct Alias(String<ALIAS_MAX_BYTES>);

impl Alias {
    /// Checks and copies `name`.
    pub fn new(name: &str) -> Result<Alias, InvalidAlias> {
        Alias::from_bytes(name.as_bytes())
    }

    /// Checks and copies an alias given as bytes.
    pub fn from_bytes(bytes: &[u8]) -> Result<Alias, InvalidAlias> {
        if bytes.is_empty() {
            return Err(InvalidAlias::Empty);
        }
        if bytes.len() > ALIAS_MAX_BYTES {
            return Err(InvalidAlias::TooLong {
                len_bytes: bytes.len(),
            });
        }
        if let Some((at, &byte)) = bytes.iter().enumerate().find(|(_, &b)| !is_alias_byte(b)) {
            return Err(InvalidAlias::BadByte { at, byte });
        }
        // ASCII of at most ALIAS_MAX_BYTES: valid UTF-8 that fits.
        let mut alias = String::new();
        let _ = alias.push_str(core::str::from_utf8(bytes).unwrap_or_default());
        Ok(Alias(alias))
    }

    /// `default_NN` for `number` in 1 to 99 (`%02u`), else `None`.
    pub fn default_numbered(number: u8) -> Option<Alias> {
        if !(1..=99).contains(&number) {
            return None;
        }
        // DEFAULT_ALIAS_PREFIX and two digits (`%02u`).
        let mut text = *b"default_00";
        text[8] += number / 10;
        text[9] += number % 10;
        Alias::from_bytes(&text).ok()
    }

    /// The alias text.
    pub fn as_str(&self) -> &str {
        self.0.as_str()
    }
}

impl AsRef<str> for Alias {
    fn as_ref(&self) -> &str {
        self.as_str()
    }
}

impl fmt::Display for Alias {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// `true` if `name` is a valid alias.
pub fn is_valid_alias(name: &str) -> bool {
    Alias::new(name).is_ok()
}

/// Why a chat key cannot be built or read.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum ChatKeyError {
    /// The channel is empty.
    MissingChannel,
    /// The chat id is empty.
    MissingChatId,
    /// A stored key is empty.
    Empty,
    /// The key would be longer than [`CHAT_KEY_MAX_BYTES`].
    TooLong {
        /// Its length, in bytes.
        len_bytes: usize,
    },
    /// A stored key is not valid UTF-8.
    NotUtf8,
}

impl fmt::Display for ChatKeyError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match *self {
            ChatKeyError::MissingChannel => f.write_str("chat key needs a channel"),
            ChatKeyError::MissingChatId => f.write_str("chat key needs a chat id"),
            ChatKeyError::Empty => f.write_str("chat key is empty"),
            ChatKeyError::TooLong { len_bytes } => write!(
                f,
                "chat key is {len_bytes} bytes, longer than {CHAT_KEY_MAX_BYTES}"
            ),
            ChatKeyError::NotUtf8 => f.write_str("chat key is not valid UTF-8"),
        }
    }
}

/// The key of one chat, `chat:<channel>:<chat_id>`.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct ChatKey(String<CHAT_KEY_MAX_BYTES>);

impl ChatKey {
    /// `chat:<channel>:<chat_id>`.
    pub fn new(channel: &str, chat_id: &str) -> Result<ChatKey, ChatKeyError> {
        ChatKey::for_agent(0, channel, chat_id)
    }

    /// The key of a chat of agent `agent_id`: `chat:<channel>:<chat_id>` for
    /// agent 0, `agent:<n>:chat:<channel>:<chat_id>` otherwise.
    pub fn for_agent(agent_id: u32, channel: &str, chat_id: &str) -> Result<ChatKey, ChatKeyError> {
        if channel.is_empty() {
            return Err(ChatKeyError::MissingChannel);
        }
        if chat_id.is_empty() {
            return Err(ChatKeyError::MissingChatId);
        }
        let mut key = KeyWriter {
            key: String::new(),
            len_bytes: 0,
        };
        let _ = if agent_id == 0 {
            write!(key, "chat:{channel}:{chat_id}")
        } else {
            write!(key, "agent:{agent_id}:chat:{channel}:{chat_id}")
        };
        if key.len_bytes > CHAT_KEY_MAX_BYTES {
            return Err(ChatKeyError::TooLong {
                len_bytes: key.len_bytes,
            });
        }
        Ok(ChatKey(key.key))
    }

    /// A key read back from storage: any non-empty UTF-8 of at most
    /// [`CHAT_KEY_MAX_BYTES`].
    pub fn from_stored(bytes: &[u8]) -> Result<ChatKey, ChatKeyError> {
        let mut key = ChatKey(String::new());
        key.set_stored(bytes)?;
        Ok(key)
    }

    /// [`ChatKey::from_stored`] into `self`, in place (no key moved through a
    /// `Result`). On an error `self` is left unchanged or empty.
    fn set_stored(&mut self, bytes: &[u8]) -> Result<(), ChatKeyError> {
        if bytes.is_empty() {
            return Err(ChatKeyError::Empty);
        }
        if bytes.len() > CHAT_KEY_MAX_BYTES {
            return Err(ChatKeyError::TooLong {
                len_bytes: bytes.len(),
            });
        }
        let text = core::str::from_utf8(bytes).map_err(|_| ChatKeyError::NotUtf8)?;
        self.0.clear();
        self.0.push_str(text).map_err(|_| ChatKeyError::TooLong {
            len_bytes: bytes.len(),
        })
    }

    /// The key text.
    pub fn as_str(&self) -> &str {
        self.0.as_str()
    }

    /// The session id of `alias` in this chat, `<chat key>:<alias>`.
    pub fn session_id(&self, alias: &Alias) -> SessionId {
        let mut id = SessionId::new();
        // Always fits: SESSION_ID_CAPACITY is the sum of the three maxima.
        let _ = id.push_str(self.as_str());
        let _ = id.push(':');
        let _ = id.push_str(alias.as_str());
        id
    }
}

impl fmt::Display for ChatKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// Builds a chat key and counts the bytes written to it, including those
/// that did not fit (the key is then too long and not used).
struct KeyWriter {
    key: String<CHAT_KEY_MAX_BYTES>,
    len_bytes: usize,
}

impl fmt::Write for KeyWriter {
    fn write_str(&mut self, s: &str) -> fmt::Result {
        self.len_bytes = self.len_bytes.saturating_add(s.len());
        let _ = self.key.push_str(s);
        Ok(())
    }
}

/// The `/session` sub-command a failed operation belongs to.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CommandKind {
    /// `/session new`.
    New,
    /// `/session list`.
    List,
    /// `/session switch`.
    Switch,
    /// `/session delete`.
    Delete,
}

/// A refused `/session` operation; its [`fmt::Display`] is the reply text.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum SessionError {
    /// `new <name>` with a name already in use.
    AlreadyExists(Alias),
    /// `switch` or `delete` of an alias that does not exist.
    NoSuchSession {
        /// [`CommandKind::Switch`] or [`CommandKind::Delete`].
        command: CommandKind,
        /// The alias asked for.
        alias: Alias,
    },
    /// `delete` of the current session.
    DeleteCurrent(Alias),
    /// `new` in a chat that already has [`MAX_SESSIONS_PER_CHAT`] sessions.
    TooManySessions,
}

impl fmt::Display for SessionError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            SessionError::AlreadyExists(alias) => write!(
                f,
                "Cannot create session \"{alias}\": a session with that name already exists."
            ),
            SessionError::NoSuchSession {
                command: CommandKind::Delete,
                alias,
            } => write!(
                f,
                "Cannot delete session \"{alias}\": no such session. Send /session list to list sessions."
            ),
            SessionError::NoSuchSession { alias, .. } => write!(
                f,
                "Cannot switch to session \"{alias}\": no such session. Send /session list to list sessions."
            ),
            SessionError::DeleteCurrent(alias) => write!(
                f,
                "Cannot delete the current session \"{alias}\". Switch to another session first."
            ),
            SessionError::TooManySessions => write!(
                f,
                "Cannot create session: this chat already has {MAX_SESSIONS_PER_CHAT} sessions. Delete one with /session delete <name> first."
            ),
        }
    }
}

/// The reply to a successful `new`, `switch` or `delete` (ESP-Claw's texts).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum SessionReply {
    /// `Started a new session: <alias>`.
    Started(Alias),
    /// `Switched to session: <alias>`.
    Switched(Alias),
    /// `Deleted session: <alias>`.
    Deleted(Alias),
}

impl fmt::Display for SessionReply {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            SessionReply::Started(alias) => write!(f, "Started a new session: {alias}"),
            SessionReply::Switched(alias) => write!(f, "Switched to session: {alias}"),
            SessionReply::Deleted(alias) => write!(f, "Deleted session: {alias}"),
        }
    }
}

/// A parsed `/session` command.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum SessionCommand {
    /// `/session new [name]`.
    New(Option<Alias>),
    /// `/session list`.
    List,
    /// `/session switch <name>`.
    Switch(Alias),
    /// `/session delete <name>`.
    Delete(Alias),
}

/// A `/session` command that does not parse; its [`fmt::Display`] is
/// [`USAGE_TEXT`], ESP-Claw's reply.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct UsageError;

impl fmt::Display for UsageError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(USAGE_TEXT)
    }
}

/// ESP-Claw's whitespace for commands: space, `\t`, `\n`, `\r`, `\f`, `\v`.
/// All are ASCII, so scanning the UTF-8 bytes finds the same places as
/// scanning the characters (no byte of a multi-byte character is ASCII).
const fn is_command_space(byte: u8) -> bool {
    // \t, \n, \v, \f, \r are 0x09 to 0x0d.
    matches!(byte, b'\t'..=b'\r' | b' ')
}

/// `text` without its leading whitespace (see [`is_command_space`]).
fn trim_space(text: &str) -> &str {
    let bytes = text.as_bytes();
    let start = bytes
        .iter()
        .position(|&b| !is_command_space(b))
        .unwrap_or(bytes.len());
    // At an ASCII byte or the end: a char boundary.
    text.get(start..).unwrap_or("")
}

/// The first whitespace-separated token of `text` and the text after it;
/// `None` if `text` is all whitespace.
fn next_token(text: &str) -> Option<(&str, &str)> {
    let text = trim_space(text);
    if text.is_empty() {
        return None;
    }
    let end = text
        .bytes()
        .position(is_command_space)
        .unwrap_or(text.len());
    text.split_at_checked(end)
}

/// If `text` is a `/session` command (after leading whitespace, `/session`
/// followed by the end or whitespace), the arguments after `/session`.
pub fn session_command_args(text: &str) -> Option<&str> {
    let rest = trim_space(text).strip_prefix("/session")?;
    match rest.as_bytes().first() {
        None => Some(rest),
        Some(&byte) if is_command_space(byte) => Some(rest),
        Some(_) => None,
    }
}

/// Parses the arguments of a `/session` command (the text after
/// `/session`): a sub-command, at most one name, nothing else; `list` takes
/// no name, `switch` and `delete` need one, and the name must be a valid
/// alias.
pub fn parse_session_command(args: &str) -> Result<SessionCommand, UsageError> {
    let (sub, rest) = next_token(args).ok_or(UsageError)?;
    let name = next_token(rest);
    if let Some((_, rest)) = name {
        if next_token(rest).is_some() {
            return Err(UsageError);
        }
    }
    let name = name.map(|(name, _)| name);
    let alias = match name {
        Some(name) => Some(Alias::new(name).map_err(|_| UsageError)?),
        None => None,
    };
    match (sub, alias) {
        ("new", alias) => Ok(SessionCommand::New(alias)),
        ("list", None) => Ok(SessionCommand::List),
        ("switch", Some(alias)) => Ok(SessionCommand::Switch(alias)),
        ("delete", Some(alias)) => Ok(SessionCommand::Delete(alias)),
        _ => Err(UsageError),
    }
}

/// Version byte of the map encoding.
pub const MAP_FORMAT_VERSION: u8 = 1;

/// Largest encoded map, in bytes.
pub const MAP_ENCODED_MAX_BYTES: usize =
    1 + 1 + CHAT_KEY_MAX_BYTES + 1 + 1 + MAX_SESSIONS_PER_CHAT * (1 + ALIAS_MAX_BYTES);

/// Why [`ChatSessions::encode`] failed (the crate's one encoder error).
pub use crate::error::EncodeError;

/// What is wrong with an encoded map.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum MapDecodeError {
    /// The bytes end before the map does.
    Truncated {
        /// Offset where more bytes were needed.
        offset: usize,
    },
    /// The version byte is not [`MAP_FORMAT_VERSION`].
    UnsupportedVersion(u8),
    /// The chat key is invalid.
    BadChatKey(ChatKeyError),
    /// The chat key is valid but not the one expected.
    ChatKeyMismatch,
    /// The session count is 0 or above [`MAX_SESSIONS_PER_CHAT`].
    BadSessionCount(u8),
    /// The current index is not below the session count.
    BadCurrent {
        /// The index stored.
        current: u8,
        /// The session count.
        count: u8,
    },
    /// A stored alias is invalid.
    BadAlias {
        /// Position of the alias in the map.
        index: usize,
        /// What is wrong with it.
        reason: InvalidAlias,
    },
    /// A stored alias repeats an earlier one.
    DuplicateAlias {
        /// Position of the repeated alias in the map.
        index: usize,
    },
    /// Bytes follow the map.
    TrailingBytes {
        /// How many.
        count: usize,
    },
}

impl fmt::Display for MapDecodeError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match *self {
            MapDecodeError::Truncated { offset } => {
                write!(f, "session map is cut short at byte {offset}")
            }
            MapDecodeError::UnsupportedVersion(v) => write!(
                f,
                "session map version {v} is not supported (expected {MAP_FORMAT_VERSION})"
            ),
            MapDecodeError::BadChatKey(e) => write!(f, "session map chat key: {e}"),
            MapDecodeError::ChatKeyMismatch => f.write_str("session map belongs to another chat"),
            MapDecodeError::BadSessionCount(n) => write!(
                f,
                "session map holds {n} sessions (expected 1 to {MAX_SESSIONS_PER_CHAT})"
            ),
            MapDecodeError::BadCurrent { current, count } => write!(
                f,
                "session map current index {current} is not below its {count} sessions"
            ),
            MapDecodeError::BadAlias { index, reason } => {
                write!(f, "session map alias {index}: {reason}")
            }
            MapDecodeError::DuplicateAlias { index } => {
                write!(f, "session map alias {index} repeats an earlier one")
            }
            MapDecodeError::TrailingBytes { count } => {
                write!(f, "session map is followed by {count} stray bytes")
            }
        }
    }
}

/// Reads an encoded map front to back.
struct Reader<'a> {
    bytes: &'a [u8],
    pos: usize,
}

impl<'a> Reader<'a> {
    fn u8(&mut self) -> Result<u8, MapDecodeError> {
        let byte = self
            .bytes
            .get(self.pos)
            .copied()
            .ok_or(MapDecodeError::Truncated { offset: self.pos })?;
        self.pos += 1;
        Ok(byte)
    }

    fn take(&mut self, len: usize) -> Result<&'a [u8], MapDecodeError> {
        let end = self
            .pos
            .checked_add(len)
            .ok_or(MapDecodeError::Truncated { offset: self.pos })?;
        let slice = self
            .bytes
            .get(self.pos..end)
            .ok_or(MapDecodeError::Truncated {
                offset: self.bytes.len(),
            })?;
        self.pos = end;
        Ok(slice)
    }
}

/// One chat's sessions: 1 to 32 distinct aliases in creation order, and the
/// current one.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ChatSessions {
    key: ChatKey,
    aliases: Vec<Alias, MAX_SESSIONS_PER_CHAT>,
    current: usize,
}

impl ChatSessions {
    /// The map of a chat seen for the first time: `default_01`, current.
    pub fn first_use(key: ChatKey) -> ChatSessions {
        ChatSessions::create(key, None)
    }

    /// The map made by `/session new [name]` in a chat that has none: only the
    /// new session (`name`, or `default_01`), current.
    pub fn create(key: ChatKey, name: Option<&Alias>) -> ChatSessions {
        let mut map = ChatSessions {
            key,
            aliases: Vec::new(),
            current: 0,
        };
        // An empty map takes any valid name, and has default_01 free.
        let _ = map.new_session(name);
        map
    }

    /// Empties the map, in place: what ESP-Claw's
    /// `claw_session_mgr_new_chat_session` starts from on a chat without a
    /// map, and what `claw_session_mgr_delete_chat_session` finds there (no
    /// session). A transient state for the engine: it adds a session with
    /// [`ChatSessions::new_session`] before it stores the map, and stores
    /// nothing after a refused `delete`.
    #[cfg(feature = "chat")]
    pub(crate) fn start_empty(&mut self) {
        self.aliases.clear();
        self.current = 0;
    }

    /// The chat key.
    pub fn key(&self) -> &ChatKey {
        &self.key
    }

    /// The aliases, in creation order.
    pub fn aliases(&self) -> &[Alias] {
        &self.aliases
    }

    /// Number of sessions (at least 1).
    pub fn len(&self) -> usize {
        self.aliases.len()
    }

    /// Always `false`: a map holds at least one session.
    pub fn is_empty(&self) -> bool {
        self.aliases.is_empty()
    }

    /// The current alias.
    pub fn current(&self) -> &Alias {
        // Every constructor and operation keeps current < len; the fallback
        // only avoids a panic path.
        static NO_ALIAS: Alias = Alias(String::new());
        self.aliases.get(self.current).unwrap_or(&NO_ALIAS)
    }

    /// The session id of the current alias.
    pub fn current_session_id(&self) -> SessionId {
        self.key.session_id(self.current())
    }

    /// The session id of `alias` in this chat (whether or not it exists).
    pub fn session_id(&self, alias: &Alias) -> SessionId {
        self.key.session_id(alias)
    }

    fn position(&self, alias: &str) -> Option<usize> {
        self.aliases.iter().position(|a| a.as_str() == alias)
    }

    /// `true` if the chat has a session named `alias`.
    pub fn contains(&self, alias: &str) -> bool {
        self.position(alias).is_some()
    }

    /// The first `default_NN` (NN from 01 to 32) not in use.
    pub fn first_unused_default(&self) -> Option<Alias> {
        // Every number in 1 to 32 gives an alias.
        for number in 1..MAX_SESSIONS_PER_CHAT as u8 + 1 {
            let alias = Alias::default_numbered(number)?;
            if !self.contains(alias.as_str()) {
                return Some(alias);
            }
        }
        None
    }

    /// `/session new [name]`: adds a session named `name`, or the first unused
    /// `default_NN`, and makes it current. Returns its alias.
    pub fn new_session(&mut self, name: Option<&Alias>) -> Result<Alias, SessionError> {
        // One alias is made (the name's copy, or the first unused default)
        // and moved: into the error if the name is taken, else into the map.
        let alias = match name {
            _ if self.aliases.len() >= MAX_SESSIONS_PER_CHAT => None,
            Some(alias) => Some(alias.clone()),
            None => self.first_unused_default(),
        };
        let Some(alias) = alias else {
            return Err(SessionError::TooManySessions);
        };
        // A default is unused by construction; only a name can be taken.
        if name.is_some() && self.contains(alias.as_str()) {
            return Err(SessionError::AlreadyExists(alias));
        }
        if self.aliases.push(alias).is_err() {
            return Err(SessionError::TooManySessions);
        }
        self.current = self.aliases.len() - 1;
        // The alias just added, cloned once.
        Ok(self.current().clone())
    }

    /// `/session switch <alias>`: makes `alias` current.
    pub fn switch_to(&mut self, alias: &Alias) -> Result<(), SessionError> {
        let index = self
            .position(alias.as_str())
            .ok_or_else(|| SessionError::NoSuchSession {
                command: CommandKind::Switch,
                alias: alias.clone(),
            })?;
        self.current = index;
        Ok(())
    }

    /// Checks that `/session delete <alias>` is allowed, without changing the
    /// map: the engine calls this, deletes the session's history, then calls
    /// [`ChatSessions::delete`].
    pub fn check_delete(&self, alias: &Alias) -> Result<(), SessionError> {
        self.delete_index(alias).map(|_| ())
    }

    /// Where `alias` is, if `/session delete <alias>` is allowed.
    pub(crate) fn delete_index(&self, alias: &Alias) -> Result<usize, SessionError> {
        let index = self
            .position(alias.as_str())
            .ok_or_else(|| SessionError::NoSuchSession {
                command: CommandKind::Delete,
                alias: alias.clone(),
            })?;
        if index == self.current {
            return Err(SessionError::DeleteCurrent(alias.clone()));
        }
        Ok(index)
    }

    /// `/session delete <alias>`: removes a session that is not current,
    /// keeping the order of the others.
    pub fn delete(&mut self, alias: &Alias) -> Result<(), SessionError> {
        let index = self.delete_index(alias)?;
        self.delete_at(index);
        Ok(())
    }

    /// Removes the session at `index` ([`ChatSessions::delete_index`]),
    /// keeping the order of the others.
    pub(crate) fn delete_at(&mut self, index: usize) {
        if index < self.aliases.len() {
            self.aliases.remove(index);
        }
        if index < self.current {
            self.current -= 1;
        }
    }

    /// Writes the `/session list` reply.
    pub fn render_list<W: fmt::Write>(&self, out: &mut W) -> fmt::Result {
        out.write_str("Sessions:")?;
        for (index, alias) in self.aliases.iter().enumerate() {
            out.write_str("\n* ")?;
            out.write_str(alias.as_str())?;
            if index == self.current {
                out.write_str(" (current)")?;
            }
        }
        Ok(())
    }

    /// Size of the encoding, in bytes.
    pub fn encoded_len(&self) -> usize {
        let aliases: usize = self.aliases.iter().map(|a| 1 + a.as_str().len()).sum();
        2 + self.key.as_str().len() + 2 + aliases
    }

    /// Encodes the map into `out` and returns the bytes written:
    ///
    /// ```text
    /// u8 version = 1 | u8 key_len | key | u8 count | u8 current | count × (u8 len | alias)
    /// ```
    pub fn encode(&self, out: &mut [u8]) -> Result<usize, EncodeError> {
        let needed_bytes = self.encoded_len();
        let Some(target) = out.get_mut(..needed_bytes) else {
            return Err(EncodeError::BufferTooSmall {
                needed: needed_bytes,
            });
        };
        let mut pos = 0usize;
        let mut put = |bytes: &[u8]| {
            let end = pos + bytes.len();
            if let Some(slot) = target.get_mut(pos..end) {
                slot.copy_from_slice(bytes);
            }
            pos = end;
        };
        let key = self.key.as_str().as_bytes();
        put(&[MAP_FORMAT_VERSION, key.len() as u8]);
        put(key);
        put(&[self.aliases.len() as u8, self.current as u8]);
        for alias in &self.aliases {
            put(&[alias.as_str().len() as u8]);
            put(alias.as_str().as_bytes());
        }
        Ok(needed_bytes)
    }

    /// Decodes and fully validates an encoded map.
    pub fn decode(bytes: &[u8]) -> Result<ChatSessions, MapDecodeError> {
        let mut map = ChatSessions {
            key: ChatKey(String::new()),
            aliases: Vec::new(),
            current: 0,
        };
        map.decode_from(bytes)?;
        Ok(map)
    }

    /// [`ChatSessions::decode`] into `self`, in place (no second map on the
    /// stack). On an error `self` is left a valid but meaningless map.
    pub fn decode_from(&mut self, bytes: &[u8]) -> Result<(), MapDecodeError> {
        let mut reader = Reader { bytes, pos: 0 };
        let version = reader.u8()?;
        if version != MAP_FORMAT_VERSION {
            return Err(MapDecodeError::UnsupportedVersion(version));
        }
        let key_len = usize::from(reader.u8()?);
        self.key
            .set_stored(reader.take(key_len)?)
            .map_err(MapDecodeError::BadChatKey)?;
        let count = reader.u8()?;
        if count == 0 || usize::from(count) > MAX_SESSIONS_PER_CHAT {
            return Err(MapDecodeError::BadSessionCount(count));
        }
        let current = reader.u8()?;
        if current >= count {
            return Err(MapDecodeError::BadCurrent { current, count });
        }
        self.aliases.clear();
        for index in 0..usize::from(count) {
            let len = usize::from(reader.u8()?);
            let alias = Alias::from_bytes(reader.take(len)?)
                .map_err(|reason| MapDecodeError::BadAlias { index, reason })?;
            if self.contains(alias.as_str()) {
                return Err(MapDecodeError::DuplicateAlias { index });
            }
            self.aliases
                .push(alias)
                .map_err(|_| MapDecodeError::BadSessionCount(count))?;
        }
        let trailing = bytes.len().saturating_sub(reader.pos);
        if trailing != 0 {
            return Err(MapDecodeError::TrailingBytes { count: trailing });
        }
        self.current = usize::from(current);
        Ok(())
    }

    /// [`ChatSessions::decode`], also checking that the map belongs to `key`
    /// (ESP-Claw rejects a map file whose `chat_key` differs).
    pub fn decode_for(key: &ChatKey, bytes: &[u8]) -> Result<ChatSessions, MapDecodeError> {
        let map = ChatSessions::decode(bytes)?;
        if map.key != *key {
            return Err(MapDecodeError::ChatKeyMismatch);
        }
        Ok(map)
    }
}

#[cfg(test)]
mod tests;
