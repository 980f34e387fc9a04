//! The one error type of the crate, [`Error`], with the texts and the
//! value it carries ([`SESSION_BLOCKED_WARNING`], [`UnknownLabelError`]), and
//! [`EncodeError`], which the pure encoders return; and the engine's
//! internal error, [`Fail`] (one word: a pointer to a constant [`Why`],
//! the variant and its text, made with [`fail!`]), with [`Parked`], what a
//! [`Fail`] does not carry, kept beside the flash until a public function
//! builds the [`Error`] from both.
//!
//! Invariant: every public error says what it said when the engine passed
//! whole [`Error`]s: the variant and its text are the [`Why`]; its numbers
//! and the flash driver's error are parked where the [`Fail`] is made and
//! collected by [`Parked::error`] when the public function returns it. A
//! parked part is overwritten by the next error that parks one, so it is
//! always the newest error's (the engine never makes a second error while
//! it passes one up).
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
/// every error a public function returns; [`NoLabel`], which no value has,
/// in an error that cannot be one. (The engine passes a one-word error of
/// its own from layer to layer, and builds an `Error` only when a public
/// function returns.)
///
/// `repr(u32)` (layout only): a word-sized tag keeps every field word
/// aligned, so moving an error copies whole words instead of byte and
/// half-word pieces.
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

/// What an error that cannot be an unknown label carries for one: nothing
/// (only [`Store::memory_recall`] makes an unknown-label error, with the
/// label, at the surface). No value of it exists.
///
/// [`Store::memory_recall`]: crate::Store::memory_recall
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum NoLabel {}

impl fmt::Display for NoLabel {
    fn fmt(&self, _: &mut fmt::Formatter<'_>) -> fmt::Result {
        match *self {}
    }
}

/// Which [`Error`] variant an engine error ([`Fail`]) becomes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[repr(u8)]
pub(crate) enum Kind {
    /// [`Error::Flash`]: the driver's error is parked ([`Parked::flash`]).
    Flash,
    /// [`Error::NotFormatted`].
    NotFormatted,
    /// [`Error::UnsupportedVersion`]: `found | supported << 16` is parked
    /// ([`Parked::detail`]).
    UnsupportedVersion,
    /// [`Error::Geometry`]: the sector and the write unit are parked
    /// ([`Parked::detail`], [`Parked::limit`]).
    Geometry,
    /// [`Error::Corrupted`]: the address is parked ([`Parked::detail`]).
    Corrupted,
    /// [`Error::Full`]: the bytes needed and available are parked
    /// ([`Parked::detail`], [`Parked::limit`]).
    Full,
    /// [`Error::TooLarge`]: size and limit are parked ([`Parked::size`],
    /// [`Parked::limit`]).
    TooLarge,
    /// [`Error::Blocked`].
    Blocked,
    /// [`Error::NotFound`].
    NotFound,
    /// [`Error::InvalidInput`].
    InvalidInput,
    /// [`Error::TooManySessions`]: the maximum is parked ([`Parked::size`]).
    TooManySessions,
    /// [`Error::BufferTooSmall`]: the bytes needed are parked
    /// ([`Parked::size`]).
    BufferTooSmall,
    /// [`Error::Config`] (made here only by a build without `memory`).
    #[cfg_attr(feature = "memory", allow(dead_code))]
    Config,
    /// [`Error::LogicBug`].
    LogicBug,
}

/// What an error site says: the kind and the text. One constant per site
/// (the [`fail!`] macro makes it), so that a [`Fail`] points at it instead
/// of carrying both.
#[derive(Debug, PartialEq, Eq)]
pub(crate) struct Why {
    /// The variant.
    pub kind: Kind,
    /// The text of a variant that has one (`what`), else empty.
    pub what: &'static str,
}

/// The engine's internal error: one word, so that a `Result` of `()`, an
/// integer or a pointer comes back in registers and `?` passes it on
/// without copying a whole [`Error`] from frame to frame (about 20 bytes
/// on a Cortex-M, and 290 or so `?` in the engine). Its numbers and the
/// flash driver's error wait in the store's [`Parked`], set where the
/// error is made, until the public function that returns it builds the
/// [`Error`] ([`Parked::error`]): every public error carries what it
/// carried before.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Fail {
    why: &'static Why,
}

/// A [`Fail`] of a kind with a constant text: `fail!(LogicBug, "what")`.
/// A kind with numbers is made by [`Parked`], which keeps them
/// (`parked.at(fail!(Corrupted, "what"), address)`).
macro_rules! fail {
    ($kind:ident, $what:expr) => {
        $crate::error::Fail::of(
            const {
                &$crate::error::Why {
                    kind: $crate::error::Kind::$kind,
                    what: $what,
                }
            },
        )
    };
}
pub(crate) use fail;

/// The [`Why`] of a kind without a text.
macro_rules! bare {
    ($kind:ident) => {
        const {
            &Why {
                kind: Kind::$kind,
                what: "",
            }
        }
    };
}

impl Fail {
    /// Not found.
    pub const NOT_FOUND: Fail = Fail::of(bare!(NotFound));
    /// The session is blocked.
    pub const BLOCKED: Fail = Fail::of(bare!(Blocked));
    /// No store on the partition.
    pub const NOT_FORMATTED: Fail = Fail::of(bare!(NotFormatted));

    /// An error that says `why`.
    pub const fn of(why: &'static Why) -> Fail {
        Fail { why }
    }

    /// Its kind.
    pub fn kind(self) -> Kind {
        self.why.kind
    }
}

/// What an engine error could not carry, kept beside the flash until the
/// public function that returns the error collects it
/// ([`Parked::error`]). Each field is set with the error that needs it, so
/// it always holds the newest one's.
#[derive(Debug)]
pub(crate) struct Parked<E> {
    /// The flash driver's error of the newest [`Kind::Flash`].
    pub flash: Option<E>,
    /// A [`Kind::Corrupted`]'s address, a [`Kind::Full`]'s bytes needed, a
    /// [`Kind::Geometry`]'s sector, a [`Kind::UnsupportedVersion`]'s
    /// versions (`found | supported << 16`).
    pub detail: u32,
    /// A [`Kind::TooLarge`]'s size, a [`Kind::BufferTooSmall`]'s bytes
    /// needed, a [`Kind::TooManySessions`]'s maximum.
    pub size: usize,
    /// A [`Kind::TooLarge`]'s limit, a [`Kind::Full`]'s bytes available, a
    /// [`Kind::Geometry`]'s write unit.
    pub limit: usize,
}

impl<E> Parked<E> {
    /// Nothing parked.
    pub const fn new() -> Self {
        Parked {
            flash: None,
            detail: 0,
            size: 0,
            limit: 0,
        }
    }

    /// Parks the driver's error `e`: [`Error::Flash`].
    pub fn flash(&mut self, e: E) -> Fail {
        self.flash = Some(e);
        Fail::of(bare!(Flash))
    }

    /// `f` (a [`Kind::Corrupted`]) at `address`.
    pub fn at(&mut self, f: Fail, address: u32) -> Fail {
        self.detail = address;
        f
    }

    /// [`Error::Full`].
    pub fn full(&mut self, needed_bytes: u32, available_bytes: u32) -> Fail {
        self.detail = needed_bytes;
        self.limit = available_bytes as usize;
        Fail::of(bare!(Full))
    }

    /// [`Error::TooLarge`] with `f`'s text (`fail!(TooLarge, "what")`).
    pub fn too_large(&mut self, f: Fail, size: usize, limit: usize) -> Fail {
        self.size = size;
        self.limit = limit;
        f
    }

    /// [`Error::BufferTooSmall`].
    pub fn buffer_too_small(&mut self, needed: usize) -> Fail {
        self.size = needed;
        Fail::of(bare!(BufferTooSmall))
    }

    /// [`Error::TooManySessions`]: `max` is a table's capacity.
    pub fn too_many_sessions(&mut self, max: usize) -> Fail {
        self.size = max;
        Fail::of(bare!(TooManySessions))
    }

    /// [`Error::Geometry`].
    pub fn geometry(&mut self, sector: u32, write: u32) -> Fail {
        self.detail = sector;
        self.limit = write as usize;
        Fail::of(bare!(Geometry))
    }

    /// [`Error::UnsupportedVersion`].
    pub fn unsupported_version(&mut self, found: u16, supported: u16) -> Fail {
        self.detail = u32::from(found) | u32::from(supported) << 16;
        Fail::of(bare!(UnsupportedVersion))
    }

    /// The public error `f` stands for, with what was parked for it.
    // Out of line: every public function of the store calls it.
    #[inline(never)]
    pub fn error(&mut self, f: Fail) -> Error<E> {
        let (what, detail) = (f.why.what, self.detail);
        match f.why.kind {
            Kind::Flash => match self.flash.take() {
                Some(e) => Error::Flash(e),
                None => Error::LogicBug("a flash error was not kept"),
            },
            Kind::NotFormatted => Error::NotFormatted,
            Kind::UnsupportedVersion => Error::UnsupportedVersion {
                found: detail as u16,
                supported: (detail >> 16) as u16,
            },
            Kind::Geometry => Error::Geometry {
                sector: detail,
                write: self.limit as u32,
            },
            Kind::Corrupted => Error::Corrupted {
                address: detail,
                what,
            },
            Kind::Full => Error::Full {
                needed_bytes: detail,
                available_bytes: self.limit as u32,
            },
            Kind::TooLarge => Error::TooLarge {
                what,
                size: self.size,
                limit: self.limit,
            },
            Kind::Blocked => Error::Blocked,
            Kind::NotFound => Error::NotFound,
            Kind::InvalidInput => Error::InvalidInput(what),
            Kind::TooManySessions => Error::TooManySessions { max: self.size },
            Kind::BufferTooSmall => Error::BufferTooSmall { needed: self.size },
            Kind::Config => Error::Config(what),
            Kind::LogicBug => Error::LogicBug(what),
        }
    }
}

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
            Error::UnknownLabel(e) => fmt::Display::fmt(e, f),
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
