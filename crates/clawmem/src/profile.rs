//! Profile documents: the agent's soul, identity and duties, and what it
//! knows about its user. Each is one whole document, replaced whole and read
//! whole into the system prompt.
//!
//! This module owns what the documents are (names, defaults, size limit,
//! prompt section format); the storage layer owns where their bytes live and
//! what a power cut during a replace leaves behind. It does no I/O.
//!
//! Sources: ESP-Claw `components/claw_modules/claw_memory/src/claw_memory_profile.c`
//! (`claw_memory_profile_init_defaults` for the soul, identity and user
//! defaults; `claw_memory_profile_collect` for the prompt sections) and
//! `claw_memory_internal.h` (file names); Ameba-Claw
//! `claw_modules/claw_memory/src/claw_memory.c` (`claw_memory_init`, which
//! adds `AGENTS.md` with its one-line default). ESP-Claw sets no size limit;
//! clawmem bounds every document ([`DEFAULT_MAX_BYTES`]).

use core::fmt::{self, Write};

/// Default size limit of one profile document in bytes. The store may be
/// configured with another limit; documents written under it are refused
/// with [`ProfileTooLarge`] when longer.
pub const DEFAULT_MAX_BYTES: usize = 8 * 1024;

/// One of the four profile documents.
///
/// The discriminants are stable (they may be persisted as a document tag).
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
#[repr(u8)]
pub enum ProfileDoc {
    /// `soul.md`: who the agent is, what it values, how it prefers to help.
    Soul = 0,
    /// `identity.md`: the agent's name, role, personality, strengths.
    Identity = 1,
    /// `user.md`: who the user is, their preferences and standing guidance.
    User = 2,
    /// `AGENTS.md`: the agent's duties and tool policy (Ameba-Claw).
    Agents = 3,
}

impl ProfileDoc {
    /// All documents, in tag order.
    pub const ALL: [Self; 4] = [Self::Soul, Self::Identity, Self::User, Self::Agents];

    /// The order in which documents enter the system prompt: ESP-Claw's user,
    /// soul, identity, then `AGENTS.md`.
    pub const PROMPT_ORDER: [Self; 4] = [Self::User, Self::Soul, Self::Identity, Self::Agents];

    /// The stable tag of the document.
    pub const fn tag(self) -> u8 {
        self as u8
    }

    /// The document with tag `tag`.
    pub const fn from_tag(tag: u8) -> Option<Self> {
        match tag {
            0 => Some(Self::Soul),
            1 => Some(Self::Identity),
            2 => Some(Self::User),
            3 => Some(Self::Agents),
            _ => None,
        }
    }

    /// The document's file name: `soul.md`, `identity.md`, `user.md`,
    /// `AGENTS.md`.
    pub const fn file_name(self) -> &'static str {
        match self {
            Self::Soul => "soul.md",
            Self::Identity => "identity.md",
            Self::User => "user.md",
            Self::Agents => "AGENTS.md",
        }
    }

    /// The document named `name` (exact, case-sensitive match of
    /// [`ProfileDoc::file_name`]).
    pub fn from_file_name(name: &str) -> Option<Self> {
        Self::ALL.into_iter().find(|doc| doc.file_name() == name)
    }

    /// The contents a document has before anything was written to it,
    /// exactly as ESP-Claw (soul, identity, user) and Ameba-Claw (`AGENTS.md`)
    /// create them on first use.
    pub const fn default_contents(self) -> &'static str {
        match self {
            Self::Soul => {
                "# Soul\n\nDescribe who the agent is, what it values, and how it prefers to help.\n"
            }
            Self::Identity => "# Identity Card\n\n- Name:\n- Role:\n- Personality:\n- Strengths:\n",
            Self::User => {
                "# User\n\nWrite down who the current user is, their preferences, and any standing guidance.\n"
            }
            Self::Agents => "You are an intelligent embedded AI assistant running on RTL8721F.\n",
        }
    }

    /// The title of the document's section in the system prompt: ESP-Claw's
    /// `User Profile`, `Agent Soul`, `Agent Identity Card`; `AGENTS.md` is
    /// `Agent Instructions` (clawmem's choice; Ameba-Claw injects it
    /// differently).
    pub const fn prompt_title(self) -> &'static str {
        match self {
            Self::Soul => "Agent Soul",
            Self::Identity => "Agent Identity Card",
            Self::User => "User Profile",
            Self::Agents => "Agent Instructions",
        }
    }

    /// Checks a new document length against `max_bytes`.
    pub const fn check_size(self, len: usize, max_bytes: usize) -> Result<(), ProfileTooLarge> {
        if len > max_bytes {
            Err(ProfileTooLarge {
                doc: self,
                len,
                max_bytes,
            })
        } else {
            Ok(())
        }
    }

    /// Writes the document's system prompt section as ESP-Claw does:
    /// `<title> (<dir>/<file name>):\n<contents trimmed>\n\n`. A document
    /// that is empty once trimmed contributes nothing; returns whether a
    /// section was written.
    pub fn write_prompt_section<W: Write>(
        self,
        w: &mut W,
        dir: &str,
        contents: &str,
    ) -> Result<bool, fmt::Error> {
        let body =
            contents.trim_matches(|c| matches!(c, ' ' | '\t' | '\n' | '\u{0B}' | '\u{0C}' | '\r'));
        if body.is_empty() {
            return Ok(false);
        }
        write!(
            w,
            "{} ({}/{}):\n{}\n\n",
            self.prompt_title(),
            dir,
            self.file_name(),
            body
        )?;
        Ok(true)
    }
}

impl fmt::Display for ProfileDoc {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.file_name())
    }
}

/// A profile document is longer than the configured limit.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ProfileTooLarge {
    /// The document.
    pub doc: ProfileDoc,
    /// Its length in bytes.
    pub len: usize,
    /// The limit in bytes.
    pub max_bytes: usize,
}

impl fmt::Display for ProfileTooLarge {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{} is {} bytes, more than the {}-byte limit",
            self.doc, self.len, self.max_bytes
        )
    }
}

#[cfg(test)]
mod tests {
    extern crate std;
    use std::string::{String, ToString};

    use super::*;

    #[test]
    fn names_tags_and_lookup() {
        let names: [&str; 4] = ProfileDoc::ALL.map(ProfileDoc::file_name);
        assert_eq!(names, ["soul.md", "identity.md", "user.md", "AGENTS.md"]);
        for doc in ProfileDoc::ALL {
            assert_eq!(ProfileDoc::from_tag(doc.tag()), Some(doc));
            assert_eq!(ProfileDoc::from_file_name(doc.file_name()), Some(doc));
            assert_eq!(doc.to_string(), doc.file_name());
        }
        assert_eq!(ProfileDoc::from_tag(4), None);
        assert_eq!(ProfileDoc::from_file_name("agents.md"), None);
        assert_eq!(ProfileDoc::from_file_name("SOUL.md"), None);
    }

    #[test]
    fn defaults_are_exact() {
        assert_eq!(
            ProfileDoc::Soul.default_contents(),
            "# Soul\n\nDescribe who the agent is, what it values, and how it prefers to help.\n"
        );
        assert_eq!(
            ProfileDoc::Identity.default_contents(),
            "# Identity Card\n\n- Name:\n- Role:\n- Personality:\n- Strengths:\n"
        );
        assert_eq!(
            ProfileDoc::User.default_contents(),
            "# User\n\nWrite down who the current user is, their preferences, and any standing guidance.\n"
        );
        assert_eq!(
            ProfileDoc::Agents.default_contents(),
            "You are an intelligent embedded AI assistant running on RTL8721F.\n"
        );
        for doc in ProfileDoc::ALL {
            assert!(doc
                .check_size(doc.default_contents().len(), DEFAULT_MAX_BYTES)
                .is_ok());
        }
    }

    #[test]
    fn size_limit() {
        assert_eq!(
            ProfileDoc::User.check_size(DEFAULT_MAX_BYTES, DEFAULT_MAX_BYTES),
            Ok(())
        );
        let err = ProfileDoc::User
            .check_size(DEFAULT_MAX_BYTES + 1, DEFAULT_MAX_BYTES)
            .unwrap_err();
        assert_eq!(
            err,
            ProfileTooLarge {
                doc: ProfileDoc::User,
                len: 8193,
                max_bytes: 8192
            }
        );
        assert_eq!(
            err.to_string(),
            "user.md is 8193 bytes, more than the 8192-byte limit"
        );
    }

    #[test]
    fn prompt_sections() {
        let mut out = String::new();
        for doc in ProfileDoc::PROMPT_ORDER {
            let contents = match doc {
                ProfileDoc::User => "\n  # User\n\nLikes tea.\n\n",
                ProfileDoc::Soul => " \n\t ",
                other => other.default_contents(),
            };
            doc.write_prompt_section(&mut out, "/memory", contents)
                .unwrap();
        }
        assert_eq!(
            out,
            "User Profile (/memory/user.md):\n# User\n\nLikes tea.\n\n\
             Agent Identity Card (/memory/identity.md):\n# Identity Card\n\n- Name:\n- Role:\n- Personality:\n- Strengths:\n\n\
             Agent Instructions (/memory/AGENTS.md):\nYou are an intelligent embedded AI assistant running on RTL8721F.\n\n"
        );
        assert_eq!(
            ProfileDoc::Soul.write_prompt_section(&mut out, "/m", ""),
            Ok(false)
        );
    }
}
