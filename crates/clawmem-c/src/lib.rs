//! clawmem's C API: every public operation of the engine as a C function
//! over a store that lives in the caller's memory, on a flash the caller
//! supplies as function pointers ([`clawmem_flash_t`]). `include/clawmem.h` is
//! generated from this file by cbindgen.
//!
//! Owns: the boundary. Every pointer from C is checked for NULL (and a
//! store for alignment and for being mounted) before use; every text is
//! checked for UTF-8; no call panics (the crate aborts on panic, and the
//! engine's own code returns errors) or allocates. Invariants: a
//! [`clawmem_store_t`] holds the engine, its work area and the last error; the
//! engine borrows the work area inside the same block, so the block must not
//! move while mounted (as littlefs's `lfs_t`). Nothing else takes a
//! reference to the work area.
//!
//! Power loss: the engine's rules, given at each function: what a call
//! acknowledged (returned `CLAWMEM_OK` for) survives a cut; a cut during a
//! call leaves the state before it or after it.
//!
//! This crate is the one place of clawmem where `unsafe` lives: each use
//! says why it is sound.
#![no_std]
#![allow(non_camel_case_types)]
#![deny(unsafe_op_in_unsafe_fn)]
// A failure carries the engine's error (as large as `clawmem::Error`, which
// the engine returns the same way) until it is kept in the store's block;
// there is no heap to box it in.
#![allow(clippy::result_large_err)]

mod flash;
mod knowledge;
mod sessions;

use core::ffi::{c_char, c_int, c_void, CStr};
use core::fmt::{self, Write};
use core::mem::{align_of, size_of};
use core::ptr::{addr_of, addr_of_mut};

use clawmem::chat::{self, ChatKey};
use clawmem::memory::{Item, ItemInput};
use clawmem::profile::ProfileDoc;
use clawmem::{BackendFormat, Config, Error, MountMode, Record, RecordType, Store, Work};

pub use flash::{clawmem_erase_fn, clawmem_flash_t, clawmem_prog_fn, clawmem_read_fn};
use flash::{CFlash, CFlashError};

/// Sessions a store keeps in its RAM table.
pub const CLAWMEM_MAX_SESSIONS: u32 = 128;
/// 64-bit words of a [`clawmem_store_t`] (its size is this times 8).
pub const CLAWMEM_STORE_WORDS: u32 = 2560;
/// Most labels one recall takes.
pub const CLAWMEM_RECALL_MAX_LABELS: u32 = 16;

pub(crate) type Engine = Store<CFlash, { CLAWMEM_MAX_SESSIONS as usize }, &'static mut Work>;
pub(crate) type Err = Error<CFlashError>;

/// Result codes: `CLAWMEM_OK`, or a negative code.
#[repr(C)]
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum clawmem_err_t {
    /// Success.
    CLAWMEM_OK = 0,
    /// A bad argument: a NULL pointer, a size of zero, text that is not
    /// UTF-8, a misaligned store, an unknown enum value.
    CLAWMEM_ERR_INVALID = -1,
    /// A flash callback failed; the operation did not complete.
    CLAWMEM_ERR_FLASH = -2,
    /// The partition holds no store (blank or foreign).
    CLAWMEM_ERR_NOT_FORMATTED = -3,
    /// The store was written by a newer format than this engine reads.
    CLAWMEM_ERR_VERSION = -4,
    /// Stored data failed its checks.
    CLAWMEM_ERR_CORRUPTED = -5,
    /// No room, even after collection; delete sessions or memory.
    CLAWMEM_ERR_FULL = -6,
    /// An input exceeds a limit.
    CLAWMEM_ERR_TOO_LARGE = -7,
    /// The session is blocked: it is over its size limit after compaction.
    CLAWMEM_ERR_BLOCKED = -8,
    /// No such session, item or document.
    CLAWMEM_ERR_NOT_FOUND = -9,
    /// The session table is full.
    CLAWMEM_ERR_TOO_MANY_SESSIONS = -10,
    /// An output buffer is too small; the size needed was returned.
    CLAWMEM_ERR_BUFFER_TOO_SMALL = -11,
    /// A recall named a label that is not in the catalog.
    CLAWMEM_ERR_UNKNOWN_LABEL = -12,
    /// The configuration does not fit the flash, or the store on the
    /// partition was written with another erase or program size than
    /// `clawmem_flash_t` gives (nothing was written; clawmem_last_error
    /// names the sizes it was written with).
    CLAWMEM_ERR_CONFIG = -13,
    /// The store is not mounted (never, or after clawmem_unmount or a
    /// failed mount).
    CLAWMEM_ERR_NOT_MOUNTED = -14,
    /// The flash cannot do this (scrub needs `multiwrite`).
    CLAWMEM_ERR_UNSUPPORTED = -15,
    /// An internal error of clawmem: a bug, please report it.
    CLAWMEM_ERR_INTERNAL = -16,
}
use clawmem_err_t::*;

/// Memory for one store: declare one (static or in a task's memory),
/// aligned as this struct is, and never move it while mounted (a copy or a
/// moved block answers CLAWMEM_ERR_INVALID until it is mounted again). No
/// callback may longjmp or throw out of a clawmem call. A callback
/// (flash, item or session) must not call into the store that called it:
/// such a call answers CLAWMEM_ERR_INVALID and does nothing.
#[repr(C)]
pub struct clawmem_store_t {
    opaque: [u64; CLAWMEM_STORE_WORDS as usize],
}

/// What a store holds inside a [`clawmem_store_t`].
struct Inner {
    magic: u32,
    /// A call is running on this store (1; else 0): a callback (flash,
    /// item, session) that calls into the same store is refused rather than
    /// alias the engine. A byte, not a `bool`, so that any bits C left in
    /// a block are a valid value.
    busy: u8,
    /// Where the block was when it was mounted: the engine borrows its work
    /// area there, so a block copied or moved elsewhere is refused.
    at: usize,
    last: Last,
    store: Option<Engine>,
    work: Work,
}

/// The last failure, for clawmem_last_error.
#[derive(Clone)]
pub(crate) enum Last {
    None,
    Arg(&'static str),
    Engine(Err),
}

/// `magic` of a mounted store.
const MAGIC: u32 = 0x434c_4d43;
/// `magic` of a block a mount ran on that is not mounted now (a failed
/// mount, or after clawmem_unmount): `last` is valid, `store` is None or
/// must not be used.
const IDLE: u32 = 0x434c_4d49;

const _: () = assert!(size_of::<Inner>() <= size_of::<clawmem_store_t>());
const _: () = assert!(align_of::<Inner>() <= align_of::<clawmem_store_t>());

/// Tunables of a store; clawmem_config_init gives ESP-Claw's defaults.
#[repr(C)]
#[derive(Clone, Copy)]
pub struct clawmem_config_t {
    /// A session over this many bytes (ESP-Claw's `.log` size) after a
    /// completed turn is compacted, then blocked if still over (150 KiB).
    pub session_size_limit_bytes: u32,
    /// Longest session id, 1 to 255 bytes.
    pub max_session_id_bytes: u32,
    /// Payload bytes between checkpoints; bounds what a mount reads.
    pub checkpoint_interval_bytes: u32,
    /// Largest profile document.
    pub profile_max_bytes: u32,
    /// Most active memory items (ESP-Claw: 128).
    pub memory_max_items: u32,
    /// Room history leaves for memory and profiles, in bytes;
    /// `UINT32_MAX` for the default rule (docs/DESIGN.md).
    pub knowledge_reserve_bytes: u32,
}

/// clawmem_mount mode: refuse a partition without a store
/// (CLAWMEM_ERR_NOT_FORMATTED).
pub const CLAWMEM_MOUNT_EXISTING: u32 = 0;
/// clawmem_mount mode: format a partition that is entirely erased (never a
/// foreign one).
pub const CLAWMEM_MOUNT_FORMAT_IF_BLANK: u32 = 1;

/// A history record: ESP-Claw's record type and backend format, and the
/// message (JSON text, not NUL-terminated).
#[repr(C)]
#[derive(Clone, Copy)]
pub struct clawmem_record_t {
    /// `CLAWMEM_RECORD_*`.
    pub type_: u8,
    /// `CLAWMEM_FORMAT_*`.
    pub format: u8,
    /// The body; may be NULL when `body_len` is 0.
    pub body: *const u8,
    /// Bytes of `body`.
    pub body_len: usize,
}

/// ESP-Claw's record types (`clawmem_record_t.type_`): a user message, which
/// starts a turn.
pub const CLAWMEM_RECORD_USER: u8 = 1;
/// The backend's final assistant message, which completes a turn.
pub const CLAWMEM_RECORD_ASSISTANT_FINAL: u8 = 2;
/// The backend's assistant message that requests tool calls.
pub const CLAWMEM_RECORD_ASSISTANT_TOOL: u8 = 3;
/// A JSON array of tool result messages.
pub const CLAWMEM_RECORD_TOOL_RESULT: u8 = 4;
/// Backend formats (`clawmem_record_t.format`, ESP-Claw's
/// `claw_llm_backend_format`): not known, never a mismatch.
pub const CLAWMEM_FORMAT_UNKNOWN: u8 = 0;
/// `openai_compatible`.
pub const CLAWMEM_FORMAT_OPENAI: u8 = 1;
/// `anthropic_compatible`.
pub const CLAWMEM_FORMAT_ANTHROPIC: u8 = 2;
/// `openai_responses`.
pub const CLAWMEM_FORMAT_OPENAI_RESPONSES: u8 = 3;

/// What an append did.
#[repr(C)]
#[derive(Clone, Copy, Default)]
pub struct clawmem_appended_t {
    /// The session was compacted (its completed turn took it over the
    /// limit).
    pub compacted: bool,
    /// The session is now blocked (still over the limit).
    pub blocked: bool,
}

/// A history read into the caller's buffer; walk it with
/// clawmem_history_next.
#[repr(C)]
#[derive(Clone, Copy)]
pub struct clawmem_history_t {
    /// The caller's buffer.
    pub buf: *const u8,
    /// Bytes of it the history fills.
    pub used_bytes: usize,
    /// Records in it.
    pub records: u32,
    /// Records left out because they failed their checks.
    pub damaged_records: u32,
    /// With CLAWMEM_ERR_BUFFER_TOO_SMALL: the buffer size needed.
    pub needed_bytes: usize,
}

/// 64-bit words of a [`clawmem_history_stream_t`].
pub const CLAWMEM_HISTORY_STREAM_WORDS: u32 = 128;

/// A history read handed out a record at a time: opened by
/// clawmem_history_stream_open, read by clawmem_history_stream_next.
/// Declare one where the read runs (a task's stack or a static); it belongs
/// to the store it was opened on. It may be copied, and is never freed.
#[repr(C)]
pub struct clawmem_history_stream_t {
    opaque: [u64; CLAWMEM_HISTORY_STREAM_WORDS as usize],
}

/// What a history stream will give, known when it opens.
#[repr(C)]
#[derive(Clone, Copy, Default)]
pub struct clawmem_history_stream_info_t {
    /// Records it gives.
    pub records: u32,
    /// Records left out because they failed their checks.
    pub damaged_records: u32,
    /// Body bytes it gives in all (for a `Content-Length`).
    pub total_bytes: usize,
    /// The buffer clawmem_history_stream_next needs: the longest record
    /// (with its rewrite, for a final answer of another backend).
    pub buffer_bytes: usize,
    /// With CLAWMEM_ERR_BUFFER_TOO_SMALL: the buffer size needed.
    pub needed_bytes: usize,
}

/// A session's state.
#[repr(C)]
#[derive(Clone, Copy, Default)]
pub struct clawmem_session_info_t {
    /// Records in its history.
    pub records: u32,
    /// Its ESP-Claw `.log` size: bodies plus a newline each.
    pub size_bytes: u32,
    /// Whether it is blocked.
    pub blocked: bool,
}

/// Called once per session by clawmem_session_list: `id` is NUL-terminated
/// (and `id_len` bytes long) and valid during the call only.
pub type clawmem_session_cb = Option<
    unsafe extern "C" fn(
        ctx: *mut c_void,
        id: *const c_char,
        id_len: usize,
        info: *const clawmem_session_info_t,
    ),
>;

/// The partition's use, in sectors.
#[repr(C)]
#[derive(Clone, Copy, Default)]
pub struct clawmem_space_t {
    /// Sectors in the partition.
    pub sectors: u32,
    /// Sectors holding data.
    pub used_sectors: u32,
    /// Sectors kept free for collection and maintenance now.
    pub reserve_sectors: u32,
    /// Bytes of a sector.
    pub sector_bytes: u32,
}

/// What the last mount read and recovered.
#[repr(C)]
#[derive(Clone, Copy, Default)]
pub struct clawmem_mount_report_t {
    /// Sector headers read.
    pub sector_headers: u32,
    /// Chunk headers scanned after the checkpoint.
    pub chunks_scanned: u32,
    /// Whether a checkpoint was found.
    pub from_checkpoint: bool,
    /// Whether a torn write at the head was sealed.
    pub sealed_head: bool,
    /// Whether a torn write at the head was passed over, writing going on
    /// after it in the same sector.
    pub resumed_head: bool,
    /// Batches left out as damaged.
    pub ignored_batches: u32,
    /// Sector headers found damaged.
    pub damaged_headers: u32,
}

/// What clawmem_maintain did.
#[repr(C)]
#[derive(Clone, Copy, Default)]
pub struct clawmem_maintenance_t {
    /// Steps taken (a checkpoint, a collection step or a sector erase).
    pub steps: u32,
    /// Whether nothing is left to do.
    pub done: bool,
}

/// A memory item as its fields' texts (none NUL-terminated; print with
/// `%.*s`), valid during the callback only.
#[repr(C)]
#[derive(Clone, Copy)]
pub struct clawmem_item_t {
    /// Its id; its text form is `mem-<id>`.
    pub id: u32,
    /// The memory text.
    pub content: *const c_char,
    /// Bytes of `content`.
    pub content_len: usize,
    /// Its tags, normalized.
    pub tags: *const c_char,
    /// Bytes of `tags`.
    pub tags_len: usize,
    /// Its keywords, normalized.
    pub keywords: *const c_char,
    /// Bytes of `keywords`.
    pub keywords_len: usize,
    /// Where it came from.
    pub source: *const c_char,
    /// Bytes of `source`.
    pub source_len: usize,
    /// Seconds, as the caller gave them.
    pub created_at: u32,
    /// Seconds, as the caller gave them.
    pub updated_at: u32,
    /// Times recalled.
    pub access_count: u16,
}

/// Called once per memory item.
pub type clawmem_item_cb =
    Option<unsafe extern "C" fn(ctx: *mut c_void, item: *const clawmem_item_t)>;

/// A memory item to store, or a patch to update one with: NUL-terminated
/// UTF-8 texts, NULL for none. Tags and keywords are lists separated by any
/// of `, ; / |`.
#[repr(C)]
#[derive(Clone, Copy)]
pub struct clawmem_item_input_t {
    /// The memory text (required to store).
    pub content: *const c_char,
    /// Tags, the source of the catalog's labels.
    pub tags: *const c_char,
    /// Retrieval keywords.
    pub keywords: *const c_char,
    /// Where it came from (empty: `manual`).
    pub source: *const c_char,
}

/// What a memory store or update did.
#[repr(C)]
#[derive(Clone, Copy, Default)]
pub struct clawmem_stored_t {
    /// The item's id (an existing item's, for a duplicate).
    pub id: u32,
    /// False if it duplicated an item and nothing was written.
    pub changed: bool,
    /// Items the replace intent forgot.
    pub replaced: u16,
}

/// Profile documents: `soul.md`.
pub const CLAWMEM_PROFILE_SOUL: u8 = 0;
/// `identity.md`.
pub const CLAWMEM_PROFILE_IDENTITY: u8 = 1;
/// `user.md`.
pub const CLAWMEM_PROFILE_USER: u8 = 2;
/// `AGENTS.md`.
pub const CLAWMEM_PROFILE_AGENTS: u8 = 3;

// ---- helpers ----------------------------------------------------------------

/// A failed call: the code, and what was wrong, kept for clawmem_last_error.
pub(crate) struct Fail(pub(crate) clawmem_err_t, pub(crate) Last);

pub(crate) type R<T> = Result<T, Fail>;

pub(crate) fn arg(what: &'static str) -> Fail {
    Fail(CLAWMEM_ERR_INVALID, Last::Arg(what))
}

fn code_of(e: &Err) -> clawmem_err_t {
    match e {
        Error::Flash(_) => CLAWMEM_ERR_FLASH,
        Error::NotFormatted => CLAWMEM_ERR_NOT_FORMATTED,
        Error::UnsupportedVersion { .. } => CLAWMEM_ERR_VERSION,
        Error::Corrupted { .. } => CLAWMEM_ERR_CORRUPTED,
        Error::Full { .. } => CLAWMEM_ERR_FULL,
        Error::TooLarge { .. } => CLAWMEM_ERR_TOO_LARGE,
        Error::Blocked => CLAWMEM_ERR_BLOCKED,
        Error::NotFound => CLAWMEM_ERR_NOT_FOUND,
        Error::InvalidInput(_) => CLAWMEM_ERR_INVALID,
        Error::TooManySessions { .. } => CLAWMEM_ERR_TOO_MANY_SESSIONS,
        Error::BufferTooSmall { .. } => CLAWMEM_ERR_BUFFER_TOO_SMALL,
        Error::UnknownLabel(_) => CLAWMEM_ERR_UNKNOWN_LABEL,
        Error::Config(_) | Error::Geometry { .. } => CLAWMEM_ERR_CONFIG,
        _ => CLAWMEM_ERR_INTERNAL,
    }
}

impl From<Err> for Fail {
    fn from(e: Err) -> Self {
        Fail(code_of(&e), Last::Engine(e))
    }
}

/// The block behind `p`, checked for NULL and alignment.
pub(crate) fn block(p: *mut clawmem_store_t) -> R<*mut Inner> {
    if p.is_null() {
        return Err(arg("store is NULL"));
    }
    if !(p as usize).is_multiple_of(align_of::<clawmem_store_t>()) {
        return Err(arg("store is not aligned as clawmem_store_t"));
    }
    Ok(p.cast())
}

/// Runs `f` on the mounted engine behind `p` and turns the outcome into a
/// code, keeping a failure for clawmem_last_error. Stamped out once per C
/// function, so all it does is call the two halves that are not.
pub(crate) fn with(p: *mut clawmem_store_t, f: impl FnOnce(&mut Engine) -> R<()>) -> c_int {
    let inner = match enter(p) {
        Ok(i) => i,
        Err(code) => return code,
    };
    // SAFETY: `enter` checked the block, found it mounted and marked it
    // busy: the `store` field is initialised and Some, and no other
    // reference to it exists until `leave` clears `busy`.
    let r = match unsafe { (*addr_of_mut!((*inner).store)).as_mut() } {
        Some(engine) => f(engine),
        None => Err(Fail(
            CLAWMEM_ERR_NOT_MOUNTED,
            Last::Arg("the store is not mounted"),
        )),
    };
    // SAFETY: `inner` is the block `enter` checked.
    unsafe { leave(inner, r) }
}

/// The first half of [`with`]: the block behind `p`, checked, mounted and
/// now busy; else the code to return.
#[inline(never)]
fn enter(p: *mut clawmem_store_t) -> Result<*mut Inner, c_int> {
    let inner = block(p).map_err(|Fail(code, _)| code as c_int)?;
    // SAFETY: `inner` is non-NULL and aligned (checked), and points at the
    // caller's `clawmem_store_t`, which is large enough for an `Inner`
    // (asserted at compile time). `magic` is a plain u32 (any bits valid);
    // it is MAGIC only after a successful mount wrote `busy`, `last`,
    // `store` and `work`, so they are then initialised. Only `magic`,
    // `busy`, `last` and `store` are referenced, each on its own, never
    // `work` (which the engine borrows) nor the whole block; `busy` keeps a
    // callback from taking a second `&mut` to the engine while one is live.
    unsafe {
        match addr_of!((*inner).magic).read() {
            MAGIC => {}
            IDLE => {
                let what =
                    "the store is not mounted (never mounted, unmounted, or its mount failed)";
                return Err(finish(
                    inner,
                    Err(Fail(CLAWMEM_ERR_NOT_MOUNTED, Last::Arg(what))),
                ));
            }
            _ => return Err(CLAWMEM_ERR_NOT_MOUNTED as c_int),
        }
        if addr_of!((*inner).at).read() != inner as usize {
            return Err(CLAWMEM_ERR_INVALID as c_int);
        }
        if addr_of!((*inner).busy).read() != 0 {
            return Err(reentered(inner));
        }
        addr_of_mut!((*inner).busy).write(1);
    }
    Ok(inner)
}

/// The second half of [`with`]: not busy any more, and the outcome as a
/// code.
///
/// # Safety
/// `inner` is a block [`enter`] returned.
#[inline(never)]
unsafe fn leave(inner: *mut Inner, r: R<()>) -> c_int {
    // SAFETY: as this function's contract; the engine's reference ended
    // with `f`.
    unsafe {
        addr_of_mut!((*inner).busy).write(0);
        finish(inner, r)
    }
}

/// A call made from inside a callback of a call on the same store.
///
/// # Safety
/// `inner` is a checked, mounted block whose `last` field may be written.
unsafe fn reentered(inner: *mut Inner) -> c_int {
    let what = "called from inside a callback of a call on the same store";
    // SAFETY: as this function's contract; the running call holds a
    // reference to `store` only, not to `last`, and writes `last` only
    // after its callbacks have returned.
    unsafe { finish(inner, Err(Fail(CLAWMEM_ERR_INVALID, Last::Arg(what)))) }
}

/// Keeps what a failed call says, and returns its code.
///
/// # Safety
/// `inner` is a checked block whose `last` field may be written.
pub(crate) unsafe fn finish(inner: *mut Inner, r: R<()>) -> c_int {
    match r {
        Ok(()) => CLAWMEM_OK as c_int,
        Err(Fail(code, last)) => {
            // SAFETY: `last` lies in the caller's block (see `with`); it is
            // written whole, never read as a reference before it is valid.
            unsafe { addr_of_mut!((*inner).last).write(last) };
            code as c_int
        }
    }
}

/// A required NUL-terminated UTF-8 text.
///
/// # Safety
/// `p` is NULL or points at a NUL-terminated string that outlives `'a`.
pub(crate) unsafe fn text<'a>(p: *const c_char, what: &'static str) -> R<&'a str> {
    if p.is_null() {
        return Err(arg(what));
    }
    // SAFETY: non-NULL and NUL-terminated by the caller's contract.
    let s = unsafe { CStr::from_ptr(p) };
    s.to_str().map_err(|_| arg("a text is not valid UTF-8"))
}

/// An optional text: NULL is "".
///
/// # Safety
/// As [`text`].
pub(crate) unsafe fn text_or_empty<'a>(p: *const c_char) -> R<&'a str> {
    match p.is_null() {
        true => Ok(""),
        // SAFETY: as this function's contract.
        false => unsafe { text(p, "") },
    }
}

/// `len` bytes at `p`; NULL only when `len` is 0.
///
/// # Safety
/// `p` is NULL or valid for reads of `len` bytes for `'a`.
pub(crate) unsafe fn bytes<'a>(p: *const u8, len: usize, what: &'static str) -> R<&'a [u8]> {
    match (p.is_null(), len) {
        (true, 0) => Ok(&[]),
        (true, _) => Err(arg(what)),
        // SAFETY: non-NULL and valid for `len` bytes by the contract.
        (false, _) => Ok(unsafe { core::slice::from_raw_parts(p, len) }),
    }
}

/// The caller's output buffer; NULL only when `cap` is 0.
///
/// # Safety
/// `p` is NULL or valid for writes of `cap` bytes for `'a`.
pub(crate) unsafe fn out_buf<'a>(p: *mut u8, cap: usize) -> R<&'a mut [u8]> {
    match (p.is_null(), cap) {
        (true, 0) => Ok(&mut []),
        (true, _) => Err(arg("an output buffer is NULL with a nonzero size")),
        // SAFETY: non-NULL and valid for `cap` bytes by the contract.
        (false, _) => Ok(unsafe { core::slice::from_raw_parts_mut(p, cap) }),
    }
}

/// Writes `v` through `p` if it is not NULL.
///
/// # Safety
/// `p` is NULL or valid for a write of a `T`.
pub(crate) unsafe fn put<T>(p: *mut T, v: T) {
    if !p.is_null() {
        // SAFETY: non-NULL and valid by the contract.
        unsafe { p.write(v) }
    }
}

/// Text written into a caller's buffer, NUL-terminated, counting what does
/// not fit.
struct TextOut<'a> {
    buf: &'a mut [u8],
    len: usize,
}

impl Write for TextOut<'_> {
    fn write_str(&mut self, s: &str) -> fmt::Result {
        let room = self.buf.len().saturating_sub(1).saturating_sub(self.len);
        let n = room.min(s.len());
        if n > 0 {
            self.buf[self.len..self.len + n].copy_from_slice(&s.as_bytes()[..n]);
        }
        self.len += s.len();
        Ok(())
    }
}

impl TextOut<'_> {
    /// Ends the text: its length through `len`, or the size needed
    /// (with the NUL) and CLAWMEM_ERR_BUFFER_TOO_SMALL.
    ///
    /// # Safety
    /// `len` is NULL or valid for a write.
    unsafe fn end(self, len: *mut usize) -> R<()> {
        let cap = self.buf.len();
        if let Some(last) = self.buf.get_mut(self.len.min(cap.saturating_sub(1))) {
            *last = 0;
        }
        // An empty text needs no buffer at all.
        if self.len < cap || self.len == 0 {
            // SAFETY: as this function's contract.
            unsafe { put(len, self.len) };
            Ok(())
        } else {
            // SAFETY: as this function's contract.
            unsafe { put(len, self.len + 1) };
            Err(Error::BufferTooSmall {
                needed: self.len + 1,
            }
            .into())
        }
    }
}

/// Renders into the caller's text buffer with `f`.
///
/// # Safety
/// `buf` is NULL or valid for `cap` bytes; `len` NULL or writable.
pub(crate) unsafe fn render(
    buf: *mut c_char,
    cap: usize,
    len: *mut usize,
    f: impl FnOnce(&mut dyn Write) -> R<()>,
) -> R<()> {
    // SAFETY: as this function's contract.
    let mut out = TextOut {
        buf: unsafe { out_buf(buf.cast(), cap)? },
        len: 0,
    };
    f(&mut out)?;
    // SAFETY: as this function's contract.
    unsafe { out.end(len) }
}

pub(crate) fn record<'a>(r: &clawmem_record_t) -> R<Record<'a>> {
    let kind = RecordType::try_from(r.type_).map_err(|_| arg("record type must be 1 to 4"))?;
    let format =
        BackendFormat::try_from(r.format).map_err(|_| arg("record format must be 0 to 3"))?;
    // SAFETY: the caller's record points at `body_len` readable bytes that
    // outlive the call (the header's contract for clawmem_record_t).
    let body = unsafe {
        bytes(
            r.body,
            r.body_len,
            "a record body is NULL with a nonzero length",
        )?
    };
    Ok(Record { kind, format, body })
}

pub(crate) fn profile_doc(doc: u8) -> R<ProfileDoc> {
    ProfileDoc::ALL
        .get(usize::from(doc))
        .copied()
        .ok_or(arg("profile document must be 0 to 3"))
}

pub(crate) fn item_view(item: &Item) -> clawmem_item_t {
    let t = |s: &str| (s.as_ptr().cast::<c_char>(), s.len());
    let (content, content_len) = t(item.content());
    let (tags, tags_len) = t(item.tags());
    let (keywords, keywords_len) = t(item.keywords());
    let (source, source_len) = t(item.source());
    clawmem_item_t {
        id: item.id().get(),
        content,
        content_len,
        tags,
        tags_len,
        keywords,
        keywords_len,
        source,
        source_len,
        created_at: item.created_at(),
        updated_at: item.updated_at(),
        access_count: item.access_count(),
    }
}

/// Calls the caller's item callback.
pub(crate) fn item_to(
    cb: unsafe extern "C" fn(*mut c_void, *const clawmem_item_t),
    ctx: *mut c_void,
) -> impl FnMut(&Item) {
    move |item: &Item| {
        let view = item_view(item);
        // SAFETY: `cb` is the caller's callback; `view` and the texts it
        // points at live for the duration of the call.
        unsafe { cb(ctx, &view) }
    }
}

/// # Safety
/// `input` is NULL or points at a clawmem_item_input_t whose texts are NULL or
/// NUL-terminated.
pub(crate) unsafe fn item_input<'a>(input: *const clawmem_item_input_t) -> R<ItemInput<'a>> {
    if input.is_null() {
        return Err(arg("item input is NULL"));
    }
    // SAFETY: as this function's contract.
    unsafe {
        let i = &*input;
        Ok(ItemInput {
            content: text_or_empty(i.content)?,
            tags: text_or_empty(i.tags)?,
            keywords: text_or_empty(i.keywords)?,
            source: text_or_empty(i.source)?,
        })
    }
}

/// # Safety
/// `labels` is NULL (with `n` 0) or points at `n` NUL-terminated texts.
pub(crate) unsafe fn labels_in(
    labels: *const *const c_char,
    n: usize,
    out: &mut [&str; CLAWMEM_RECALL_MAX_LABELS as usize],
) -> R<usize> {
    if n > out.len() {
        return Err(Fail(
            CLAWMEM_ERR_TOO_LARGE,
            Last::Arg("a recall takes at most CLAWMEM_RECALL_MAX_LABELS labels"),
        ));
    }
    if n > 0 && labels.is_null() {
        return Err(arg("labels is NULL with a nonzero count"));
    }
    for (k, slot) in out.iter_mut().enumerate().take(n) {
        // SAFETY: `labels` holds `n` pointers (contract); each is checked
        // by `text`.
        *slot = unsafe { text(*labels.add(k), "a label is NULL")? };
    }
    Ok(n)
}

pub(crate) fn chat_key(channel: &str, chat_id: &str) -> R<ChatKey> {
    ChatKey::new(channel, chat_id).map_err(|_| arg(chat::MISSING_CHAT_CONTEXT_TEXT))
}

// ---- the store ----------------------------------------------------------------

/// The size of a clawmem_store_t in bytes (CLAWMEM_STORE_WORDS * 8).
#[no_mangle]
pub extern "C" fn clawmem_store_size() -> usize {
    size_of::<clawmem_store_t>()
}

/// The bytes of a clawmem_store_t this build uses (at most clawmem_store_size).
#[no_mangle]
pub extern "C" fn clawmem_store_used() -> usize {
    size_of::<Inner>()
}

/// Fills `config` with the defaults (ESP-Claw's limits). Does nothing if
/// `config` is NULL.
///
/// # Safety
/// `config` is NULL or writable.
#[no_mangle]
pub unsafe extern "C" fn clawmem_config_init(config: *mut clawmem_config_t) {
    let d = Config::default();
    let c = clawmem_config_t {
        session_size_limit_bytes: d.session_size_limit_bytes,
        max_session_id_bytes: d.max_session_id_bytes as u32,
        checkpoint_interval_bytes: d.checkpoint_interval_bytes,
        profile_max_bytes: d.profile_max_bytes as u32,
        memory_max_items: d.memory.max_items as u32,
        knowledge_reserve_bytes: u32::MAX,
    };
    // SAFETY: as this function's contract.
    unsafe { put(config, c) }
}

fn config_of(c: Option<&clawmem_config_t>, flash: &CFlash) -> Config {
    let mut config = Config::default();
    if let Some(c) = c {
        config.session_size_limit_bytes = c.session_size_limit_bytes;
        config.max_session_id_bytes = c.max_session_id_bytes as usize;
        config.checkpoint_interval_bytes = c.checkpoint_interval_bytes;
        config.profile_max_bytes = c.profile_max_bytes as usize;
        config.memory.max_items = c.memory_max_items as usize;
        config.knowledge_reserve_bytes = match c.knowledge_reserve_bytes {
            u32::MAX => None,
            b => Some(b),
        };
    }
    config.flash_units = Some(flash.units());
    config
}

/// Mounts (or formats) into `store`.
///
/// # Safety
/// As clawmem_mount.
unsafe fn open(
    store: *mut clawmem_store_t,
    flash: *const clawmem_flash_t,
    config: *const clawmem_config_t,
    mode: Option<MountMode>,
) -> c_int {
    let inner = match block(store) {
        Ok(i) => i,
        Err(Fail(code, _)) => return code as c_int,
    };
    // SAFETY: `inner` is a checked block (see `with`). The fields are
    // written whole before any is referenced: `last` and `store` first,
    // then `magic` IDLE (so a failed mount leaves the store unmounted with
    // its error readable), and MAGIC only once mounted (a
    // previous engine in it holds nothing that needs dropping: its flash
    // is the caller's callbacks), then `work`. The `&'static mut Work`
    // handed to the engine is the only reference to `work` ever made; the
    // block outlives the engine by the header's contract (it is not moved
    // or reused while mounted), and a new mount replaces the engine before
    // the work area is written again.
    unsafe {
        let magic = addr_of!((*inner).magic).read();
        if (magic == MAGIC || magic == IDLE)
            && addr_of!((*inner).at).read() == inner as usize
            && addr_of!((*inner).busy).read() != 0
        {
            return reentered(inner);
        }
        addr_of_mut!((*inner).busy).write(0);
        addr_of_mut!((*inner).at).write(inner as usize);
        addr_of_mut!((*inner).last).write(Last::None);
        addr_of_mut!((*inner).store).write(None);
        addr_of_mut!((*inner).magic).write(IDLE);
        let r = (|| {
            if flash.is_null() {
                return Err(arg("flash is NULL"));
            }
            let f =
                CFlash::new(&*flash).map_err(|what| Fail(CLAWMEM_ERR_CONFIG, Last::Arg(what)))?;
            let config = config_of(config.as_ref(), &f);
            // `Work::new()` is all zero bytes (scripts/firmware-size.sh
            // fails otherwise: its static must land in .bss), so zeroing
            // the area in place gives that value without building it on
            // the stack first (which took a 5.9 KiB frame on RISC-V).
            addr_of_mut!((*inner).work).write_bytes(0, 1);
            let work: &'static mut Work = &mut *addr_of_mut!((*inner).work);
            let slot = &mut *addr_of_mut!((*inner).store);
            addr_of_mut!((*inner).busy).write(1);
            let r = match mode {
                Some(mode) => Engine::mount_into(slot, f, work, config, mode),
                None => Engine::format_into(slot, f, work, config),
            };
            addr_of_mut!((*inner).busy).write(0);
            r?;
            addr_of_mut!((*inner).magic).write(MAGIC);
            Ok(())
        })();
        finish(inner, r)
    }
}

/// Mounts the store on `flash` into `store`. `config` may be NULL for the
/// defaults; `mode` is CLAWMEM_MOUNT_EXISTING or
/// CLAWMEM_MOUNT_FORMAT_IF_BLANK. With CLAWMEM_MOUNT_FORMAT_IF_BLANK a blank partition is
/// formatted; a foreign one is never touched (CLAWMEM_ERR_NOT_FORMATTED).
/// An image of a newer format is refused untouched (CLAWMEM_ERR_VERSION).
///
/// Reads the sector headers, the head sector, the newest checkpoint and
/// the chunk headers after it: not the whole partition.
///
/// Power loss: a mount of a sound image writes nothing; it writes only to
/// record a recovery (each such write is atomic) or to format.
///
/// # Safety
/// `store` is NULL or a clawmem_store_t that is not moved while mounted;
/// `flash` is NULL or a valid clawmem_flash_t whose callbacks and `ctx` stay
/// valid while mounted; `config` is NULL or valid.
#[no_mangle]
pub unsafe extern "C" fn clawmem_mount(
    store: *mut clawmem_store_t,
    flash: *const clawmem_flash_t,
    config: *const clawmem_config_t,
    mode: u32,
) -> c_int {
    let mode = match mode {
        CLAWMEM_MOUNT_EXISTING => MountMode::ExistingOnly,
        CLAWMEM_MOUNT_FORMAT_IF_BLANK => MountMode::FormatIfBlank,
        _ => return CLAWMEM_ERR_INVALID as c_int,
    };
    // SAFETY: as this function's contract.
    unsafe { open(store, flash, config, Some(mode)) }
}

/// Formats the partition and mounts the empty store: everything stored is
/// lost.
///
/// Power loss: a cut leaves the old store (possibly missing erased
/// sectors, which mount tolerates) or a blank partition; format again.
///
/// # Safety
/// As clawmem_mount.
#[no_mangle]
pub unsafe extern "C" fn clawmem_format(
    store: *mut clawmem_store_t,
    flash: *const clawmem_flash_t,
    config: *const clawmem_config_t,
) -> c_int {
    // SAFETY: as this function's contract.
    unsafe { open(store, flash, config, None) }
}

/// Unmounts: later calls answer CLAWMEM_ERR_NOT_MOUNTED until a mount. The
/// store writes nothing here (every acknowledged write is already on
/// flash), so the block and the flash may then be reused.
///
/// # Safety
/// `store` is NULL or a clawmem_store_t.
#[no_mangle]
pub unsafe extern "C" fn clawmem_unmount(store: *mut clawmem_store_t) -> c_int {
    let r = with(store, |_| Ok(()));
    if r == CLAWMEM_OK as c_int {
        // SAFETY: `with` checked the block; only `magic` is written.
        unsafe { addr_of_mut!((*store.cast::<Inner>()).magic).write(IDLE) };
    }
    r
}

/// The name of a result code, e.g. "store full". Never NULL. Touches no
/// store or flash.
#[no_mangle]
pub extern "C" fn clawmem_strerror(code: c_int) -> *const c_char {
    let s: &'static [u8] = match code {
        0 => b"ok\0",
        -1 => b"invalid argument\0",
        -2 => b"flash error\0",
        -3 => b"no clawmem store on the partition (blank or foreign)\0",
        -4 => b"the store uses a newer on-flash format\0",
        -5 => b"corrupted data on flash\0",
        -6 => b"store full\0",
        -7 => b"input too large\0",
        -8 => b"session blocked\0",
        -9 => b"not found\0",
        -10 => b"too many sessions\0",
        -11 => b"buffer too small\0",
        -12 => b"unknown label\0",
        -13 => b"bad configuration\0",
        -14 => b"store not mounted\0",
        -15 => b"not supported by this flash\0",
        -16 => b"clawmem internal error\0",
        _ => b"unknown clawmem result code\0",
    };
    s.as_ptr().cast()
}

/// Says what was wrong with the store's last failed call (for example
/// "store full: needs 644 B, 0 B can be freed; delete sessions or memory"),
/// NUL-terminated, into `buf`; "" if no call failed since the mount.
/// `*len` gets the text's length, or with CLAWMEM_ERR_BUFFER_TOO_SMALL the
/// size needed.
///
/// # Safety
/// `store` is NULL or a clawmem_store_t; `buf` NULL (with `cap` 0) or
/// writable for `cap` bytes; `len` NULL or writable.
#[no_mangle]
pub unsafe extern "C" fn clawmem_last_error(
    store: *mut clawmem_store_t,
    buf: *mut c_char,
    cap: usize,
    len: *mut usize,
) -> c_int {
    let inner = match block(store) {
        Ok(i) => i,
        Err(Fail(code, _)) => return code as c_int,
    };
    // SAFETY: a checked block; `last` was written whole by a mount before
    // `magic` became IDLE or MAGIC, and is only read then.
    let last = unsafe {
        match addr_of!((*inner).magic).read() {
            IDLE | MAGIC => (*addr_of!((*inner).last)).clone(),
            _ => Last::None,
        }
    };
    // SAFETY: as this function's contract.
    let r = unsafe {
        render(buf, cap, len, |w| {
            let _ = match &last {
                Last::None => Ok(()),
                Last::Arg(s) => w.write_str(s),
                Last::Engine(e) => write!(w, "{e}"),
            };
            Ok(())
        })
    };
    match r {
        Ok(()) => CLAWMEM_OK as c_int,
        Err(Fail(code, _)) => code as c_int,
    }
}

/// The partition's use.
///
/// Power loss: reads RAM only.
///
/// # Safety
/// `store` is NULL or a clawmem_store_t; `out` NULL or writable.
#[no_mangle]
pub unsafe extern "C" fn clawmem_space(
    store: *mut clawmem_store_t,
    out: *mut clawmem_space_t,
) -> c_int {
    with(store, |s| {
        let sp = s.space();
        let v = clawmem_space_t {
            sectors: sp.sectors,
            used_sectors: sp.used_sectors,
            reserve_sectors: sp.reserve_sectors,
            sector_bytes: sp.sector_bytes,
        };
        // SAFETY: as this function's contract.
        unsafe { put(out, v) };
        Ok(())
    })
}

/// What the last mount read and recovered.
///
/// Power loss: reads RAM only.
///
/// # Safety
/// `store` is NULL or a clawmem_store_t; `out` NULL or writable.
#[no_mangle]
pub unsafe extern "C" fn clawmem_mount_report(
    store: *mut clawmem_store_t,
    out: *mut clawmem_mount_report_t,
) -> c_int {
    with(store, |s| {
        let m = s.mount_report();
        let v = clawmem_mount_report_t {
            sector_headers: m.sector_headers,
            chunks_scanned: m.chunks_scanned,
            from_checkpoint: m.from_checkpoint,
            sealed_head: m.sealed_head,
            resumed_head: m.resumed_head,
            ignored_batches: m.ignored_batches,
            damaged_headers: m.damaged_headers,
        };
        // SAFETY: as this function's contract.
        unsafe { put(out, v) };
        Ok(())
    })
}

/// Reads and checks everything stored (every record's CRC); `*checked` gets
/// the number of records checked.
///
/// Power loss: reads only.
///
/// # Safety
/// `store` is NULL or a clawmem_store_t; `checked` NULL or writable.
#[no_mangle]
pub unsafe extern "C" fn clawmem_check(store: *mut clawmem_store_t, checked: *mut u32) -> c_int {
    with(store, |s| {
        let n = s.check()?;
        // SAFETY: as this function's contract.
        unsafe { put(checked, n) };
        Ok(())
    })
}

/// Idle-time work, at most `max_steps` steps: a due checkpoint, a
/// collection step, erasing the sectors the head opens next. Call it while
/// the model thinks, so that appends neither erase nor collect.
///
/// Power loss: every step is power-safe on its own.
///
/// # Safety
/// `store` is NULL or a clawmem_store_t; `out` NULL or writable.
#[no_mangle]
pub unsafe extern "C" fn clawmem_maintain(
    store: *mut clawmem_store_t,
    max_steps: u32,
    out: *mut clawmem_maintenance_t,
) -> c_int {
    with(store, |s| {
        let m = s.maintain(max_steps)?;
        // SAFETY: as this function's contract.
        unsafe {
            put(
                out,
                clawmem_maintenance_t {
                    steps: m.steps,
                    done: m.done,
                },
            );
        }
        Ok(())
    })
}

#[cfg(not(test))]
#[panic_handler]
fn panic(_: &core::panic::PanicInfo<'_>) -> ! {
    // The engine returns errors and never panics by design; should a bug
    // panic anyway, stop as C's abort() does rather than unwind into C.
    extern "C" {
        fn abort() -> !;
    }
    // SAFETY: abort() takes nothing and never returns (C's standard
    // library, newlib on ESP-IDF; a bare-metal firmware provides it).
    unsafe { abort() }
}
