//! Session file names and the FNV-1a hash behind them.
//!
//! ESP-Claw keeps one session's history in three files under its session
//! directory: `s_<safe>_<hash>.log` (the records), `.log.idx` (the `CHDX`
//! index, see [`crate::chdx`]) and `.log.blocked` (the empty marker of a
//! session that compaction could not shrink). The rule, from
//! `claw_memory_session_path_dup` in
//! `components/claw_modules/claw_memory/src/claw_memory_utils.c`:
//!
//! - `<safe>`: the session id with every byte outside `[A-Za-z0-9_-]` replaced
//!   by `_` (byte by byte, so a 3-byte UTF-8 character becomes `___`), then cut
//!   to 24 bytes; an empty result becomes `default`.
//! - `<hash>`: FNV-1a 32-bit (offset 2166136261, prime 16777619) over all the
//!   bytes of the original id, as 8 lowercase hex digits.
//!
//! clawmem does not use a file system, but it keeps these names: they are the
//! stable, human-readable key of a session in tools, exports and logs, and they
//! match what an ESP-Claw device shows. The names are built into fixed-size
//! `heapless` strings whose capacity is exact, so building one never fails.
//!
//! Only an empty id maps to `default` (every id byte yields one `<safe>` byte);
//! ESP-Claw never persists the empty id, and callers should refuse it too.
//!
//! Pure logic: no flash I/O, so nothing here is affected by power loss.

use heapless::String;

/// FNV-1a 32-bit offset basis.
pub const FNV1A32_OFFSET_BASIS: u32 = 2_166_136_261;

/// FNV-1a 32-bit prime.
pub const FNV1A32_PRIME: u32 = 16_777_619;

/// FNV-1a 32-bit hash of `bytes`.
pub const fn fnv1a32(bytes: &[u8]) -> u32 {
    let mut hash = FNV1A32_OFFSET_BASIS;
    let mut i = 0;
    while i < bytes.len() {
        hash ^= bytes[i] as u32;
        hash = hash.wrapping_mul(FNV1A32_PRIME);
        i += 1;
    }
    hash
}

/// Longest `<safe>` part of a session file name, in bytes.
pub const SAFE_ID_MAX_BYTES: usize = 24;

/// `<safe>` part used for an empty session id.
pub const EMPTY_SAFE_ID: &str = "default";

/// Number of hex digits of the `<hash>` part.
pub const HASH_HEX_DIGITS: usize = 8;

/// Capacity of a session file stem `s_<safe>_<hash>`: 2 + 24 + 1 + 8 bytes.
pub const SESSION_STEM_CAPACITY: usize = 2 + SAFE_ID_MAX_BYTES + 1 + HASH_HEX_DIGITS;

/// Capacity of a full session file name; the longest suffix is `.log.blocked`.
pub const SESSION_FILE_NAME_CAPACITY: usize =
    SESSION_STEM_CAPACITY + SessionFileKind::Blocked.suffix().len();

/// A session file stem, `s_<safe>_<hash>`.
pub type SessionStem = String<SESSION_STEM_CAPACITY>;

/// A full session file name, such as `s_chat_telegram_42_default_0a1b2c3d.log`.
pub type SessionFileName = String<SESSION_FILE_NAME_CAPACITY>;

/// The three files ESP-Claw keeps per session.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SessionFileKind {
    /// `.log`: the record bodies, one per line.
    Log,
    /// `.log.idx`: the binary `CHDX` index.
    Index,
    /// `.log.blocked`: empty marker of a blocked session.
    Blocked,
}

impl SessionFileKind {
    /// The file name suffix, including the leading dot.
    pub const fn suffix(self) -> &'static str {
        match self {
            SessionFileKind::Log => ".log",
            SessionFileKind::Index => ".log.idx",
            SessionFileKind::Blocked => ".log.blocked",
        }
    }
}

const _: () = assert!(SESSION_STEM_CAPACITY == 35);
const _: () = assert!(SESSION_FILE_NAME_CAPACITY == 47);

/// `true` for the bytes that ESP-Claw keeps as they are in `<safe>`.
const fn is_safe_byte(byte: u8) -> bool {
    byte.is_ascii_alphanumeric() || byte == b'_' || byte == b'-'
}

/// The 8 lowercase hex digits of `hash`.
pub fn hash_hex(hash: u32) -> [u8; HASH_HEX_DIGITS] {
    let mut out = [b'0'; HASH_HEX_DIGITS];
    // The top nibble first, each shifted out in turn.
    let mut rest = hash;
    for slot in out.iter_mut() {
        let nibble = (rest >> 28) as u8;
        *slot = nibble + if nibble < 10 { b'0' } else { b'a' - 10 };
        rest <<= 4;
    }
    out
}

/// Appends ASCII bytes to a string whose capacity the caller has checked
/// (a view: compiled once for every capacity).
fn push_ascii(target: &mut heapless::string::StringView, bytes: &[u8]) {
    // Capacity is exact by construction (const-asserted above); a failed
    // push could only drop bytes, never panic.
    let _ = target.push_str(core::str::from_utf8(bytes).unwrap_or_default());
}

/// The `<safe>` part of the file name of `session_id`.
pub fn safe_id(session_id: &str) -> String<SAFE_ID_MAX_BYTES> {
    let mut safe = String::new();
    push_safe_id(safe.as_mut_view(), session_id);
    safe
}

/// Appends the `<safe>` part of the file name of `session_id`.
fn push_safe_id(target: &mut heapless::string::StringView, session_id: &str) {
    if session_id.is_empty() {
        push_ascii(target, EMPTY_SAFE_ID.as_bytes());
        return;
    }
    let mut safe = [0u8; SAFE_ID_MAX_BYTES];
    let mut len = 0;
    for (slot, &byte) in safe.iter_mut().zip(session_id.as_bytes()) {
        *slot = if is_safe_byte(byte) { byte } else { b'_' };
        len += 1;
    }
    push_ascii(target, &safe[..len]);
}

/// The stem `s_<safe>_<hash>` shared by a session's three files.
pub fn session_stem(session_id: &str) -> SessionStem {
    let mut stem = String::new();
    push_stem(stem.as_mut_view(), session_id);
    stem
}

/// Appends the stem of `session_id` (see [`session_stem`]), built in place.
fn push_stem(target: &mut heapless::string::StringView, session_id: &str) {
    push_ascii(target, b"s_");
    push_safe_id(target, session_id);
    push_ascii(target, b"_");
    push_ascii(target, &hash_hex(fnv1a32(session_id.as_bytes())));
}

/// The name of one of the files of `session_id`, for example
/// `s_chat_telegram_42_default_<hash>.log.idx`.
pub fn session_file_name(session_id: &str, kind: SessionFileKind) -> SessionFileName {
    let mut name = String::new();
    push_stem(name.as_mut_view(), session_id);
    push_ascii(name.as_mut_view(), kind.suffix().as_bytes());
    name
}

#[cfg(test)]
mod tests {
    extern crate std;

    use super::*;
    use std::format;

    #[test]
    fn fnv1a32_matches_published_vectors() {
        assert_eq!(fnv1a32(b""), 0x811c_9dc5);
        assert_eq!(fnv1a32(b"a"), 0xe40c_292c);
        assert_eq!(fnv1a32(b"foobar"), 0xbf9c_f968);
        assert_eq!(FNV1A32_OFFSET_BASIS, 0x811c_9dc5);
        assert_eq!(FNV1A32_PRIME, 0x0100_0193);
    }

    #[test]
    fn hash_hex_is_eight_lowercase_digits() {
        assert_eq!(&hash_hex(0x0a1b_2c3d), b"0a1b2c3d");
        assert_eq!(&hash_hex(0), b"00000000");
        assert_eq!(&hash_hex(u32::MAX), b"ffffffff");
    }

    #[test]
    fn unsafe_bytes_become_underscores() {
        assert_eq!(safe_id("chat:tg:42:a-b_C").as_str(), "chat_tg_42_a-b_C");
        // A 3-byte UTF-8 character becomes three underscores.
        assert_eq!(safe_id("x你y").as_str(), "x___y");
        assert_eq!(safe_id("a b/c.d").as_str(), "a_b_c_d");
    }

    #[test]
    fn safe_part_is_cut_to_24_bytes() {
        let id = "chat:telegram:123456789:default_01";
        let safe = safe_id(id);
        assert_eq!(safe.len(), 24);
        assert_eq!(safe.as_str(), "chat_telegram_123456789_");
        assert_eq!(
            safe_id("abcdefghijklmnopqrstuvwx").as_str(),
            "abcdefghijklmnopqrstuvwx"
        );
        assert_eq!(
            safe_id("abcdefghijklmnopqrstuvwxyz").as_str(),
            "abcdefghijklmnopqrstuvwx"
        );
    }

    #[test]
    fn empty_id_becomes_default() {
        assert_eq!(safe_id("").as_str(), "default");
        assert_eq!(
            session_file_name("", SessionFileKind::Log).as_str(),
            "s_default_811c9dc5.log"
        );
    }

    #[test]
    fn file_names_follow_the_rule() {
        let id = "chat:telegram:123456789:default_01";
        let hash = fnv1a32(id.as_bytes());
        let stem = format!("s_chat_telegram_123456789__{hash:08x}");
        assert_eq!(session_stem(id).as_str(), stem);
        assert_eq!(
            session_file_name(id, SessionFileKind::Log).as_str(),
            format!("{stem}.log")
        );
        assert_eq!(
            session_file_name(id, SessionFileKind::Index).as_str(),
            format!("{stem}.log.idx")
        );
        assert_eq!(
            session_file_name(id, SessionFileKind::Blocked).as_str(),
            format!("{stem}.log.blocked")
        );
    }

    #[test]
    fn hash_covers_the_whole_id_not_the_cut_part() {
        let a = "chat:telegram:123456789:project-a";
        let b = "chat:telegram:123456789:project-b";
        assert_eq!(safe_id(a), safe_id(b));
        assert_ne!(session_stem(a), session_stem(b));
    }

    #[test]
    fn longest_names_fit_their_capacity() {
        let long = "é".repeat(200);
        let name = session_file_name(&long, SessionFileKind::Blocked);
        assert_eq!(name.len(), SESSION_FILE_NAME_CAPACITY);
        assert!(name.ends_with(".log.blocked"));
        assert!(name.starts_with("s________________________"));
    }
}
