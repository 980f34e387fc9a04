//! Unit tests of chat keys, session aliases, session maps and `/session` commands.

extern crate std;

use super::*;
use std::string::{String as StdString, ToString};
use std::vec;

fn key() -> ChatKey {
    ChatKey::new("telegram", "42").unwrap()
}

fn alias(name: &str) -> Alias {
    Alias::new(name).unwrap()
}

fn list(map: &ChatSessions) -> StdString {
    let mut out = StdString::new();
    map.render_list(&mut out).unwrap();
    out
}

fn names(map: &ChatSessions) -> std::vec::Vec<&str> {
    map.aliases().iter().map(Alias::as_str).collect()
}

#[test]
fn aliases_are_1_to_32_safe_bytes() {
    assert!(is_valid_alias("a"));
    assert!(is_valid_alias("Project-A_01"));
    assert!(is_valid_alias(&"x".repeat(32)));
    assert_eq!(Alias::new(""), Err(InvalidAlias::Empty));
    assert_eq!(
        Alias::new(&"x".repeat(33)),
        Err(InvalidAlias::TooLong { len_bytes: 33 })
    );
    assert_eq!(
        Alias::new("a b"),
        Err(InvalidAlias::BadByte { at: 1, byte: b' ' })
    );
    assert!(!is_valid_alias("a:b"));
    assert!(!is_valid_alias("é"));
    assert!(!is_valid_alias("a.b"));
}

#[test]
fn default_aliases_have_two_digits() {
    assert_eq!(Alias::default_numbered(1).unwrap().as_str(), "default_01");
    assert_eq!(Alias::default_numbered(32).unwrap().as_str(), "default_32");
    assert_eq!(Alias::default_numbered(0), None);
    assert_eq!(Alias::default_numbered(100), None);
}

#[test]
fn chat_keys_and_session_ids() {
    assert_eq!(key().as_str(), "chat:telegram:42");
    assert_eq!(
        ChatKey::for_agent(3, "qq", "g1").unwrap().as_str(),
        "agent:3:chat:qq:g1"
    );
    assert_eq!(ChatKey::new("", "1"), Err(ChatKeyError::MissingChannel));
    assert_eq!(ChatKey::new("tg", ""), Err(ChatKeyError::MissingChatId));
    let long = "9".repeat(160);
    assert_eq!(
        ChatKey::new("tg", &long),
        Err(ChatKeyError::TooLong { len_bytes: 168 })
    );
    let just_fits = "9".repeat(CHAT_KEY_MAX_BYTES - 8);
    assert_eq!(ChatKey::new("tg", &just_fits).unwrap().as_str().len(), 159);
    let map = ChatSessions::first_use(key());
    assert_eq!(
        map.current_session_id().as_str(),
        "chat:telegram:42:default_01"
    );
    assert_eq!(map.session_id(&alias("x")).as_str(), "chat:telegram:42:x");
    // The longest key with the longest alias fits the session id capacity.
    let max_key = ChatKey::new("tg", &just_fits).unwrap();
    let id = max_key.session_id(&alias(&"a".repeat(32)));
    assert_eq!(id.len(), SESSION_ID_CAPACITY);
}

#[test]
fn first_use_creates_default_01() {
    let map = ChatSessions::first_use(key());
    assert_eq!(names(&map), ["default_01"]);
    assert_eq!(map.current().as_str(), "default_01");
    assert_eq!(map.len(), 1);
    assert!(!map.is_empty());
    assert_eq!(list(&map), "Sessions:\n* default_01 (current)");
}

#[test]
fn new_on_a_chat_without_a_map() {
    let map = ChatSessions::create(key(), Some(&alias("work")));
    assert_eq!(names(&map), ["work"]);
    assert_eq!(map.current().as_str(), "work");
    let map = ChatSessions::create(key(), None);
    assert_eq!(names(&map), ["default_01"]);
}

#[test]
fn new_takes_the_first_unused_default_and_becomes_current() {
    let mut map = ChatSessions::first_use(key());
    assert_eq!(map.new_session(None).unwrap().as_str(), "default_02");
    assert_eq!(map.current().as_str(), "default_02");
    assert_eq!(
        map.new_session(Some(&alias("work"))).unwrap().as_str(),
        "work"
    );
    assert_eq!(map.current().as_str(), "work");
    assert_eq!(map.new_session(None).unwrap().as_str(), "default_03");
    assert_eq!(
        names(&map),
        ["default_01", "default_02", "work", "default_03"]
    );
    assert_eq!(
        list(&map),
        "Sessions:\n* default_01\n* default_02\n* work\n* default_03 (current)"
    );
}

#[test]
fn default_numbers_are_reused_after_delete() {
    let mut map = ChatSessions::first_use(key());
    map.new_session(None).unwrap(); // default_02
    map.new_session(None).unwrap(); // default_03, current
    map.delete(&alias("default_01")).unwrap();
    assert_eq!(names(&map), ["default_02", "default_03"]);
    assert_eq!(map.new_session(None).unwrap().as_str(), "default_01");
    assert_eq!(names(&map), ["default_02", "default_03", "default_01"]);
    // A user-chosen name that looks like a default is skipped over too.
    map.new_session(Some(&alias("default_04"))).unwrap();
    assert_eq!(map.new_session(None).unwrap().as_str(), "default_05");
}

#[test]
fn new_with_an_existing_name_fails_with_esp_claws_text() {
    let mut map = ChatSessions::first_use(key());
    let err = map.new_session(Some(&alias("default_01"))).unwrap_err();
    assert_eq!(err, SessionError::AlreadyExists(alias("default_01")));
    assert_eq!(
        err.to_string(),
        "Cannot create session \"default_01\": a session with that name already exists."
    );
    assert_eq!(map.len(), 1);
}

#[test]
fn at_most_32_sessions_per_chat() {
    let mut map = ChatSessions::first_use(key());
    for i in 2..=32 {
        let created = map.new_session(None).unwrap();
        assert_eq!(created, Alias::default_numbered(i).unwrap());
    }
    assert_eq!(map.len(), MAX_SESSIONS_PER_CHAT);
    assert_eq!(map.first_unused_default(), None);
    assert_eq!(map.new_session(None), Err(SessionError::TooManySessions));
    // The limit is checked before the name, as in ESP-Claw.
    assert_eq!(
        map.new_session(Some(&alias("default_05"))),
        Err(SessionError::TooManySessions)
    );
    assert_eq!(
        map.new_session(Some(&alias("fresh"))),
        Err(SessionError::TooManySessions)
    );
    assert!(SessionError::TooManySessions
        .to_string()
        .contains("32 sessions"));
    map.switch_to(&alias("default_01")).unwrap();
    map.delete(&alias("default_17")).unwrap();
    assert_eq!(map.new_session(None).unwrap().as_str(), "default_17");
}

#[test]
fn switch_changes_current_or_says_no_such_session() {
    let mut map = ChatSessions::first_use(key());
    map.new_session(Some(&alias("b"))).unwrap();
    map.switch_to(&alias("default_01")).unwrap();
    assert_eq!(map.current().as_str(), "default_01");
    map.switch_to(&alias("default_01")).unwrap();
    let err = map.switch_to(&alias("nope")).unwrap_err();
    assert_eq!(
        err.to_string(),
        "Cannot switch to session \"nope\": no such session. Send /session list to list sessions."
    );
    assert_eq!(map.current().as_str(), "default_01");
}

#[test]
fn delete_rules_and_texts() {
    let mut map = ChatSessions::first_use(key());
    map.new_session(Some(&alias("a"))).unwrap();
    map.new_session(Some(&alias("b"))).unwrap(); // current
    let err = map.delete(&alias("b")).unwrap_err();
    assert_eq!(
        err.to_string(),
        "Cannot delete the current session \"b\". Switch to another session first."
    );
    let err = map.delete(&alias("zz")).unwrap_err();
    assert_eq!(
        err.to_string(),
        "Cannot delete session \"zz\": no such session. Send /session list to list sessions."
    );
    assert_eq!(map.check_delete(&alias("a")), Ok(()));
    assert_eq!(names(&map), ["default_01", "a", "b"]);
    map.delete(&alias("default_01")).unwrap();
    // Order kept, current still "b".
    assert_eq!(names(&map), ["a", "b"]);
    assert_eq!(map.current().as_str(), "b");
    assert_eq!(list(&map), "Sessions:\n* a\n* b (current)");
}

#[test]
fn deleting_after_the_current_keeps_it() {
    let mut map = ChatSessions::first_use(key());
    map.new_session(Some(&alias("a"))).unwrap();
    map.new_session(Some(&alias("b"))).unwrap();
    map.switch_to(&alias("a")).unwrap();
    map.delete(&alias("b")).unwrap();
    assert_eq!(map.current().as_str(), "a");
    assert_eq!(names(&map), ["default_01", "a"]);
}

#[test]
fn replies_use_esp_claws_texts() {
    assert_eq!(
        SessionReply::Started(alias("x")).to_string(),
        "Started a new session: x"
    );
    assert_eq!(
        SessionReply::Switched(alias("x")).to_string(),
        "Switched to session: x"
    );
    assert_eq!(
        SessionReply::Deleted(alias("x")).to_string(),
        "Deleted session: x"
    );
    assert!(UsageError
        .to_string()
        .starts_with("Usage:\n/session new [name]"));
    assert!(USAGE_TEXT.ends_with("A-Z, a-z, 0-9, _ or -."));
}

#[test]
fn command_parsing() {
    assert_eq!(session_command_args("/session new x"), Some(" new x"));
    assert_eq!(session_command_args("  \t/session"), Some(""));
    assert_eq!(session_command_args("/sessions"), None);
    assert_eq!(session_command_args("hello /session"), None);
    assert_eq!(
        parse_session_command(" new "),
        Ok(SessionCommand::New(None))
    );
    assert_eq!(
        parse_session_command("new\tproj-1"),
        Ok(SessionCommand::New(Some(alias("proj-1"))))
    );
    assert_eq!(parse_session_command("list"), Ok(SessionCommand::List));
    assert_eq!(
        parse_session_command("switch a\u{b}"),
        Ok(SessionCommand::Switch(alias("a")))
    );
    assert_eq!(
        parse_session_command("delete a"),
        Ok(SessionCommand::Delete(alias("a")))
    );
    for bad in [
        "",
        "   ",
        "list x",
        "switch",
        "delete",
        "new a b",
        "new bad.name",
        "new é",
        "rename a",
        "NEW",
        &std::format!("new {}", "x".repeat(33)),
    ] {
        assert_eq!(parse_session_command(bad), Err(UsageError), "{bad:?}");
    }
}

#[test]
fn encoding_round_trips() {
    let mut map = ChatSessions::first_use(ChatKey::for_agent(7, "feishu", "oc_1").unwrap());
    map.new_session(Some(&alias("work"))).unwrap();
    map.new_session(None).unwrap();
    map.switch_to(&alias("work")).unwrap();
    let mut buf = [0u8; MAP_ENCODED_MAX_BYTES];
    let len = map.encode(&mut buf).unwrap();
    assert_eq!(len, map.encoded_len());
    assert_eq!(buf[0], MAP_FORMAT_VERSION);
    let decoded = ChatSessions::decode(&buf[..len]).unwrap();
    assert_eq!(decoded, map);
    assert_eq!(decoded.current().as_str(), "work");
    assert_eq!(
        ChatSessions::decode_for(map.key(), &buf[..len]),
        Ok(map.clone())
    );
    assert_eq!(
        ChatSessions::decode_for(&key(), &buf[..len]),
        Err(MapDecodeError::ChatKeyMismatch)
    );
    let mut small = [0u8; 4];
    assert_eq!(
        map.encode(&mut small),
        Err(EncodeError::BufferTooSmall { needed: len })
    );
}

#[test]
fn the_largest_map_fits_the_maximum_encoding() {
    let long_key = ChatKey::new("tg", &"9".repeat(CHAT_KEY_MAX_BYTES - 8)).unwrap();
    let mut map = ChatSessions::create(long_key, Some(&alias(&"a".repeat(32))));
    for i in 1..MAX_SESSIONS_PER_CHAT {
        let name = std::format!("{:0>32}", i);
        map.new_session(Some(&alias(&name))).unwrap();
    }
    assert_eq!(map.encoded_len(), MAP_ENCODED_MAX_BYTES);
    let mut buf = [0u8; MAP_ENCODED_MAX_BYTES];
    let len = map.encode(&mut buf).unwrap();
    assert_eq!(ChatSessions::decode(&buf[..len]).unwrap(), map);
}

fn encoded(key: &str, count: u8, current: u8, aliases: &[&[u8]]) -> std::vec::Vec<u8> {
    let mut bytes = vec![MAP_FORMAT_VERSION, key.len() as u8];
    bytes.extend_from_slice(key.as_bytes());
    bytes.push(count);
    bytes.push(current);
    for a in aliases {
        bytes.push(a.len() as u8);
        bytes.extend_from_slice(a);
    }
    bytes
}

#[test]
fn bad_bytes_are_errors_not_panics() {
    let good = encoded("chat:t:1", 2, 1, &[b"a", b"b"]);
    assert!(ChatSessions::decode(&good).is_ok());
    assert_eq!(
        ChatSessions::decode(&[]),
        Err(MapDecodeError::Truncated { offset: 0 })
    );
    let mut v = good.clone();
    v[0] = 9;
    assert_eq!(
        ChatSessions::decode(&v),
        Err(MapDecodeError::UnsupportedVersion(9))
    );
    assert_eq!(
        ChatSessions::decode(&encoded("", 1, 0, &[b"a"])),
        Err(MapDecodeError::BadChatKey(ChatKeyError::Empty))
    );
    assert_eq!(
        ChatSessions::decode(&encoded("chat:\u{0}", 1, 0, &[b"a"])).map(|m| m.len()),
        Ok(1)
    );
    let mut not_utf8 = encoded("chat:xx", 1, 0, &[b"a"]);
    not_utf8[3] = 0xff;
    assert_eq!(
        ChatSessions::decode(&not_utf8),
        Err(MapDecodeError::BadChatKey(ChatKeyError::NotUtf8))
    );
    assert_eq!(
        ChatSessions::decode(&encoded("k", 0, 0, &[])),
        Err(MapDecodeError::BadSessionCount(0))
    );
    assert_eq!(
        ChatSessions::decode(&encoded("k", 33, 0, &[])),
        Err(MapDecodeError::BadSessionCount(33))
    );
    assert_eq!(
        ChatSessions::decode(&encoded("k", 2, 2, &[b"a", b"b"])),
        Err(MapDecodeError::BadCurrent {
            current: 2,
            count: 2
        })
    );
    assert_eq!(
        ChatSessions::decode(&encoded("k", 2, 0, &[b"a", b""])),
        Err(MapDecodeError::BadAlias {
            index: 1,
            reason: InvalidAlias::Empty
        })
    );
    assert_eq!(
        ChatSessions::decode(&encoded("k", 1, 0, &[b"a b"])),
        Err(MapDecodeError::BadAlias {
            index: 0,
            reason: InvalidAlias::BadByte { at: 1, byte: b' ' }
        })
    );
    assert_eq!(
        ChatSessions::decode(&encoded("k", 1, 0, &[&[b'x'; 33]])),
        Err(MapDecodeError::BadAlias {
            index: 0,
            reason: InvalidAlias::TooLong { len_bytes: 33 }
        })
    );
    assert_eq!(
        ChatSessions::decode(&encoded("k", 3, 0, &[b"a", b"b", b"a"])),
        Err(MapDecodeError::DuplicateAlias { index: 2 })
    );
    let mut trailing = good.clone();
    trailing.push(0);
    assert_eq!(
        ChatSessions::decode(&trailing),
        Err(MapDecodeError::TrailingBytes { count: 1 })
    );
    // Every truncation of a valid encoding is an error.
    for end in 0..good.len() {
        assert!(matches!(
            ChatSessions::decode(&good[..end]),
            Err(MapDecodeError::Truncated { .. })
        ));
    }
    // Every single-byte corruption decodes or errors, never panics, and a
    // successful decode is always a valid map.
    for i in 0..good.len() {
        for b in 0..=255u8 {
            let mut v = good.clone();
            v[i] = b;
            if let Ok(map) = ChatSessions::decode(&v) {
                assert!(
                    !map.is_empty() && map.aliases().iter().all(|a| is_valid_alias(a.as_str()))
                );
                let _ = list(&map);
            }
        }
    }
}

#[test]
fn errors_display() {
    let e = MapDecodeError::BadAlias {
        index: 3,
        reason: InvalidAlias::BadByte { at: 0, byte: b'.' },
    };
    assert!(e.to_string().contains("alias 3"));
    assert!(EncodeError::BufferTooSmall { needed: 9 }
        .to_string()
        .contains("9 bytes"));
}
