//! The one error type of the crate, [`Error`], with the texts and the
//! value it carries ([`SESSION_BLOCKED_WARNING`], [`UnknownLabelError`]), and
//! [`EncodeError`], which the pure encoders return.
//!
//! A leaf: it imports no module of the crate, so every layer can return it.

use core::fmt;

/// Everything that can go wrong in clawmem. `E` is the flash driver's error.
///
/// Variants say what a caller can act on: retry after the flash recovers
/// ([`Error::Flash`]), free space ([`Error::Full`]), create a new session
/// ([`Error::Blocked`]), fix the input ([`Error::InvalidInput`],
/// [`Error::TooLarge`], [`Error::BufferTooSmall`]), or format
/// ([`Error::NotFormatted`]).
///
/// `L` is what [`Error::UnknownLabel`] carries: [`UnknownLabelError`] in
/// every error a public function returns. Inside the engine it is
/// [`NoLabel`], which no value has, so the error the engine passes from
/// layer to layer stays a few words (the label and the labels there are
/// would otherwise make every `Result` on every frame about 100 bytes).
///
/// `repr(u32)` (layout only): a word-sized tag keeps every field word
/// aligned, so passing an error up through `?` copies whole words instead
/// of byte and half-word pieces (about 1.7 KiB less code on a Cortex-M4).
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
#[repr(u32)]
pub enum Error<E, L = UnknownLabelError> {
    /// The flash driver failed. Nothing acknowledged is lost; the operation
    /// in flight may or may not have landed (see each function's "Power
    /// loss" notes) and a remount gives a consistent answer.
    Flash(E),
    /// The partition holds no clawmem store (blank or foreign). Nothing was
    /// written: format explicitly, or mount with formatting allowed.
    NotFormatted,
    /// The partition was written by a newer on-flash format than this crate
    /// reads. Nothing was written or erased.
    UnsupportedVersion {
        /// Version found on flash.
        found: u16,
        /// Newest version this crate reads.
        supported: u16,
    },
    /// The store on the partition was written with another sector (erase
    /// unit) or write unit size than this flash and configuration give
    /// (`Config::flash_units`, the flash type's sizes): mounted so, every
    /// record would be misread. Nothing was written or erased.
    Geometry {
        /// Sector size the store was written with, in bytes.
        sector: u32,
        /// Write unit it was written with, in bytes.
        write: u32,
    },
    /// Flash contents failed a check that a CRC or a structural rule
    /// guards. `address` is where; nothing was changed.
    Corrupted {
        /// Flash address of the damaged structure.
        address: u32,
        /// What was wrong.
        what: &'static str,
    },
    /// Not enough free space, even after garbage collection. Nothing was
    /// written; reads, deletes and compaction still work.
    Full {
        /// Bytes the operation needed.
        needed_bytes: u32,
        /// Bytes that could be made free.
        available_bytes: u32,
    },
    /// An input exceeds a configured or format limit.
    TooLarge {
        /// What was too large.
        what: &'static str,
        /// Its size.
        size: usize,
        /// The limit.
        limit: usize,
    },
    /// The session is blocked: it is still over its size limit after
    /// compaction. Appends are refused until the session is deleted.
    Blocked,
    /// No such session, item or document (an empty history is "not found").
    NotFound,
    /// The input is malformed; the text says how.
    InvalidInput(&'static str),
    /// The session table is full.
    TooManySessions {
        /// The configured maximum.
        max: usize,
    },
    /// The caller's buffer is too small; `needed` bytes would do.
    BufferTooSmall {
        /// Bytes needed.
        needed: usize,
    },
    /// A recall named a summary label that is not in the catalog; the error
    /// names it and lists the labels there are.
    UnknownLabel(L),
    /// The configuration does not fit the flash.
    Config(&'static str),
    /// An internal invariant failed. This is a bug in clawmem; please report
    /// it. It would otherwise have been a panic. Nothing acknowledged is lost.
    LogicBug(&'static str),
}

impl<E, L> From<E> for Error<E, L> {
    fn from(e: E) -> Self {
        Error::Flash(e)
    }
}

/// What the engine's internal errors carry for an unknown label: nothing,
/// since no internal error is one (only [`Store::memory_recall`] makes
/// them, with the label, at the surface). No value of it exists.
///
/// [`Store::memory_recall`]: crate::Store::memory_recall
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum NoLabel {}

impl fmt::Display for NoLabel {
    fn fmt(&self, _: &mut fmt::Formatter<'_>) -> fmt::Result {
        match *self {}
    }
}

/// The engine's internal error: [`Error`] without the unknown-label text.
pub(crate) type Fail<E> = Error<E, NoLabel>;

impl<E> From<Error<E, NoLabel>> for Error<E, UnknownLabelError> {
    fn from(e: Error<E, NoLabel>) -> Self {
        e.relabel(|never| match never {})
    }
}

impl<E, L> Error<E, L> {
    /// The same error with another unknown-label payload: `f` maps an
    /// [`Error::UnknownLabel`], every other variant is kept.
    fn relabel<M>(self, f: impl FnOnce(L) -> Error<E, M>) -> Error<E, M> {
        match self {
            Error::Flash(e) => Error::Flash(e),
            Error::NotFormatted => Error::NotFormatted,
            Error::UnsupportedVersion { found, supported } => {
                Error::UnsupportedVersion { found, supported }
            }
            Error::Geometry { sector, write } => Error::Geometry { sector, write },
            Error::Corrupted { address, what } => Error::Corrupted { address, what },
            Error::Full {
                needed_bytes,
                available_bytes,
            } => Error::Full {
                needed_bytes,
                available_bytes,
            },
            Error::TooLarge { what, size, limit } => Error::TooLarge { what, size, limit },
            Error::Blocked => Error::Blocked,
            Error::NotFound => Error::NotFound,
            Error::InvalidInput(what) => Error::InvalidInput(what),
            Error::TooManySessions { max } => Error::TooManySessions { max },
            Error::BufferTooSmall { needed } => Error::BufferTooSmall { needed },
            Error::UnknownLabel(l) => f(l),
            Error::Config(what) => Error::Config(what),
            Error::LogicBug(what) => Error::LogicBug(what),
        }
    }
}

impl<E: fmt::Debug, L: fmt::Display> fmt::Display for Error<E, L> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Error::Flash(e) => write!(f, "flash error: {e:?}"),
            Error::NotFormatted => f.write_str(
                "the partition holds no clawmem store (blank or foreign); format it to use it",
            ),
            Error::UnsupportedVersion { found, supported } => write!(
                f,
                "the store uses on-flash format {found}, this clawmem reads up to {supported}; upgrade clawmem"
            ),
            Error::Geometry { sector, write } => write!(
                f,
                "the store was written with {sector} B sectors and a {write} B write unit, which this flash's configuration does not match; nothing was written"
            ),
            Error::Corrupted { address, what } => {
                write!(f, "corrupted flash at 0x{address:08x}: {what}")
            }
            Error::Full {
                needed_bytes,
                available_bytes,
            } => write!(
                f,
                "store full: needs {needed_bytes} B, {available_bytes} B can be freed; delete sessions or memory"
            ),
            Error::TooLarge { what, size, limit } => {
                write!(f, "{what} is {size} B, the limit is {limit} B")
            }
            Error::Blocked => f.write_str(SESSION_BLOCKED_WARNING),
            Error::NotFound => f.write_str("not found"),
            Error::InvalidInput(what) => write!(f, "invalid input: {what}"),
            Error::TooManySessions { max } => {
                write!(f, "too many sessions: the store holds at most {max}")
            }
            Error::BufferTooSmall { needed } => {
                write!(f, "buffer too small: {needed} B needed")
            }
            Error::UnknownLabel(e) => write!(f, "{e}"),
            Error::Config(what) => write!(f, "bad configuration: {what}"),
            Error::LogicBug(what) => write!(
                f,
                "clawmem internal error ({what}); this is a bug, please report it"
            ),
        }
    }
}

/// The message of a blocked session, delivered whole (ESP-Claw cuts it to 192
/// bytes when it rejects a request).
///
/// ESP-Claw's `CLAW_MEMORY_SESSION_SIZE_WARNING` is split over two source lines
/// with a backslash inside the string literal, which puts five spaces between
/// "sending" and "the command" in what users see; this is the sentence as
/// intended, with one space.
pub const SESSION_BLOCKED_WARNING: &str = "Session history is still too large after compaction. Please create a new conversation by sending the command `/session new [name]`, and delete the old session by `/session delete <name>` due to limited storage space.";

/// An unknown recall label: names it and lists the labels there are (the
/// first ones, when they do not fit in 64 bytes; the full catalog is in the
/// prompt and in [`Store::memory_catalog`](crate::Store::memory_catalog)).
#[derive(Clone, PartialEq, Eq)]
pub struct UnknownLabelError {
    pub(crate) label: heapless::String<32>,
    pub(crate) available: heapless::String<64>,
}

impl UnknownLabelError {
    /// The label asked for.
    pub fn label(&self) -> &str {
        &self.label
    }

    /// The available labels, comma-separated, ending in `...` if cut.
    pub fn available(&self) -> &str {
        &self.available
    }
}

impl fmt::Debug for UnknownLabelError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Display::fmt(self, f)
    }
}

impl fmt::Display for UnknownLabelError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "unknown summary label \"{}\"; copy a label exactly from the catalog. Available labels: {}",
            self.label,
            if self.available.is_empty() {
                "(none)"
            } else {
                &self.available
            }
        )
    }
}

/// Why an encoder into a caller's buffer failed
/// ([`ChatSessions::encode`](crate::chat::ChatSessions::encode),
/// [`Item::encode`](crate::memory::Item::encode)).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum EncodeError {
    /// The buffer is shorter than the encoding.
    BufferTooSmall {
        /// Bytes the encoding needs.
        needed: usize,
    },
}

impl fmt::Display for EncodeError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::BufferTooSmall { needed } => {
                write!(f, "buffer too small: {needed} bytes needed")
            }
        }
    }
}
