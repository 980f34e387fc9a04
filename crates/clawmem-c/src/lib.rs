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

use core::ffi::{c_char, c_int, c_void, CStr};
use core::fmt::{self, Write};
use core::mem::{align_of, size_of};
use core::ptr::{addr_of, addr_of_mut};

use clawmem::chat::{self, ChatKey, SessionCommand};
use clawmem::memory::{Item, ItemId, ItemInput};
use clawmem::profile::ProfileDoc;
use clawmem::{
    BackendFormat, Config, Error, Gate, History, MountMode, Record, RecordType, Store, Work,
};

pub use flash::{clawmem_erase_fn, clawmem_flash_t, clawmem_prog_fn, clawmem_read_fn};
use flash::{CFlash, CFlashError};

/// Sessions a store keeps in its RAM table.
pub const CLAWMEM_MAX_SESSIONS: u32 = 128;
/// 64-bit words of a [`clawmem_store_t`] (its size is this times 8).
pub const CLAWMEM_STORE_WORDS: u32 = 2368;
/// Most labels one recall takes.
pub const CLAWMEM_RECALL_MAX_LABELS: u32 = 16;

type Engine = Store<CFlash, { CLAWMEM_MAX_SESSIONS as usize }, &'static mut Work>;
type Err = Error<CFlashError>;

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
    /// The configuration does not fit the flash.
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
/// aligned as this struct is, and never move it while mounted.
#[repr(C)]
pub struct clawmem_store_t {
    opaque: [u64; CLAWMEM_STORE_WORDS as usize],
}

/// What a store holds inside a [`clawmem_store_t`].
struct Inner {
    magic: u32,
    last: Last,
    store: Option<Engine>,
    work: Work,
}

/// The last failure, for clawmem_last_error.
#[derive(Clone)]
enum Last {
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
struct Fail(clawmem_err_t, Last);

type R<T> = Result<T, Fail>;

fn arg(what: &'static str) -> Fail {
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
        Error::Config(_) => CLAWMEM_ERR_CONFIG,
        _ => CLAWMEM_ERR_INTERNAL,
    }
}

impl From<Err> for Fail {
    fn from(e: Err) -> Self {
        Fail(code_of(&e), Last::Engine(e))
    }
}

/// The block behind `p`, checked for NULL and alignment.
fn block(p: *mut clawmem_store_t) -> R<*mut Inner> {
    if p.is_null() {
        return Err(arg("store is NULL"));
    }
    if !(p as usize).is_multiple_of(align_of::<clawmem_store_t>()) {
        return Err(arg("store is not aligned as clawmem_store_t"));
    }
    Ok(p.cast())
}

/// Runs `f` on the mounted engine behind `p` and turns the outcome into a
/// code, keeping a failure for clawmem_last_error.
fn with(p: *mut clawmem_store_t, f: impl FnOnce(&mut Engine) -> R<()>) -> c_int {
    let inner = match block(p) {
        Ok(i) => i,
        Err(Fail(code, _)) => return code as c_int,
    };
    // SAFETY: `inner` is non-NULL and aligned (checked), and points at the
    // caller's `clawmem_store_t`, which is large enough for an `Inner`
    // (asserted at compile time). `magic` is a plain u32 (any bits valid);
    // it is MAGIC only after a successful mount wrote `store` and `work`,
    // so `store` is then initialised. Only these two fields are referenced,
    // never `work` (which the engine borrows) nor the whole block.
    unsafe {
        if addr_of!((*inner).magic).read() != MAGIC {
            return CLAWMEM_ERR_NOT_MOUNTED as c_int;
        }
        let r = match (*addr_of_mut!((*inner).store)).as_mut() {
            Some(engine) => f(engine),
            None => Err(Fail(
                CLAWMEM_ERR_NOT_MOUNTED,
                Last::Arg("the store is not mounted"),
            )),
        };
        finish(inner, r)
    }
}

/// Keeps what a failed call says, and returns its code.
///
/// # Safety
/// `inner` is a checked block whose `last` field may be written.
unsafe fn finish(inner: *mut Inner, r: R<()>) -> c_int {
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
unsafe fn text<'a>(p: *const c_char, what: &'static str) -> R<&'a str> {
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
unsafe fn text_or_empty<'a>(p: *const c_char) -> R<&'a str> {
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
unsafe fn bytes<'a>(p: *const u8, len: usize, what: &'static str) -> R<&'a [u8]> {
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
unsafe fn out_buf<'a>(p: *mut u8, cap: usize) -> R<&'a mut [u8]> {
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
unsafe fn put<T>(p: *mut T, v: T) {
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
            Err(Fail(
                CLAWMEM_ERR_BUFFER_TOO_SMALL,
                Last::Arg("the output buffer is too small; the size needed was returned"),
            ))
        }
    }
}

/// Renders into the caller's text buffer with `f`.
///
/// # Safety
/// `buf` is NULL or valid for `cap` bytes; `len` NULL or writable.
unsafe fn render(
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

fn record<'a>(r: &clawmem_record_t) -> R<Record<'a>> {
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

fn profile_doc(doc: u8) -> R<ProfileDoc> {
    ProfileDoc::ALL
        .get(usize::from(doc))
        .copied()
        .ok_or(arg("profile document must be 0 to 3"))
}

fn item_view(item: &Item) -> clawmem_item_t {
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
fn item_to(
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
unsafe fn item_input<'a>(input: *const clawmem_item_input_t) -> R<ItemInput<'a>> {
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
unsafe fn labels_in(
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

fn chat_key(channel: &str, chat_id: &str) -> R<ChatKey> {
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
            addr_of_mut!((*inner).work).write(Work::new());
            let work: &'static mut Work = &mut *addr_of_mut!((*inner).work);
            let slot = &mut *addr_of_mut!((*inner).store);
            match mode {
                Some(mode) => Engine::mount_into(slot, f, work, config, mode)?,
                None => Engine::format_into(slot, f, work, config)?,
            }
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

/// The name of a result code, e.g. "store full". Never NULL.
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

// ---- sessions -------------------------------------------------------------

/// The request gate (ESP-Claw's check before a request): `*blocked` is set,
/// and for a blocked session the warning to show the user is written into
/// `warning` (NUL-terminated; `*len` its length, or the size needed).
/// `session` may be NULL (no session: never blocked).
///
/// # Safety
/// `store` NULL or a clawmem_store_t; `session` NULL or NUL-terminated;
/// `blocked` and `len` NULL or writable; `warning` NULL (with `cap` 0) or
/// writable for `cap` bytes.
#[no_mangle]
pub unsafe extern "C" fn clawmem_gate(
    store: *mut clawmem_store_t,
    session: *const c_char,
    blocked: *mut bool,
    warning: *mut c_char,
    cap: usize,
    len: *mut usize,
) -> c_int {
    with(store, |s| {
        // SAFETY: as this function's contract.
        unsafe {
            let session = match session.is_null() {
                true => None,
                false => Some(text(session, "")?),
            };
            let text = match s.gate(session) {
                Gate::Pass => "",
                Gate::Blocked(w) => w,
            };
            put(blocked, !text.is_empty());
            render(warning, cap, len, |w| {
                let _ = w.write_str(text);
                Ok(())
            })
        }
    })
}

/// Appends a batch of `n` records to `session` (created on first use);
/// `turn_completed` when the batch ends a turn (ESP-Claw compacts, and
/// blocks an oversized session, only then). `out` may be NULL.
///
/// Power loss: the batch is one atomic write: after a cut a fresh mount
/// shows all of it or none of it, and everything acknowledged before.
///
/// # Safety
/// `store` NULL or a clawmem_store_t; `session` NULL or NUL-terminated;
/// `records` NULL (with `n` 0) or `n` valid records; `out` NULL or
/// writable.
#[no_mangle]
pub unsafe extern "C" fn clawmem_append(
    store: *mut clawmem_store_t,
    session: *const c_char,
    records: *const clawmem_record_t,
    n: usize,
    turn_completed: bool,
    out: *mut clawmem_appended_t,
) -> c_int {
    with(store, |s| {
        // SAFETY: as this function's contract.
        unsafe {
            let session = text(session, "session is NULL")?;
            if n > clawmem::MAX_RECORDS_PER_APPEND {
                return Err(Fail(
                    CLAWMEM_ERR_TOO_LARGE,
                    Last::Arg("a batch holds at most MAX_RECORDS_PER_APPEND (64) records"),
                ));
            }
            if n > 0 && records.is_null() {
                return Err(arg("records is NULL with a nonzero count"));
            }
            let mut batch = [Record {
                kind: RecordType::User,
                format: BackendFormat::OpenAiCompatible,
                body: &[],
            }; clawmem::MAX_RECORDS_PER_APPEND];
            for (k, slot) in batch.iter_mut().enumerate().take(n) {
                *slot = record(&*records.add(k))?;
            }
            let a = s.append(session, &batch[..n], turn_completed)?;
            put(
                out,
                clawmem_appended_t {
                    compacted: a.compacted,
                    blocked: a.blocked,
                },
            );
            Ok(())
        }
    })
}

/// Compacts `session` now, keeping its last `keep_turns` turns after
/// `summary`; `*compacted` is false if there was nothing to drop.
///
/// Power loss: atomic; a cut leaves the session as before or compacted.
///
/// # Safety
/// `store` NULL or a clawmem_store_t; `session` NULL or NUL-terminated;
/// `summary` NULL or a valid record; `compacted` NULL or writable.
#[no_mangle]
pub unsafe extern "C" fn clawmem_compact_with_summary(
    store: *mut clawmem_store_t,
    session: *const c_char,
    keep_turns: u64,
    summary: *const clawmem_record_t,
    compacted: *mut bool,
) -> c_int {
    with(store, |s| {
        // SAFETY: as this function's contract.
        unsafe {
            let session = text(session, "session is NULL")?;
            let summary = match summary.as_ref() {
                Some(r) => record(r)?,
                None => return Err(arg("summary is NULL")),
            };
            let done = s.compact_with_summary(session, keep_turns, summary)?;
            put(compacted, done);
            Ok(())
        }
    })
}

/// Reads `session`'s history, as ESP-Claw loads it for a request in the
/// `current_format` backend (records of the other format are left out),
/// into `buf`; walk it with clawmem_history_next. A session that does not
/// exist, or is empty, is CLAWMEM_ERR_NOT_FOUND. With CLAWMEM_ERR_BUFFER_TOO_SMALL,
/// `out->needed_bytes` is the size needed.
///
/// Power loss: reads only.
///
/// # Safety
/// `store` NULL or a clawmem_store_t; `session` NULL or NUL-terminated; `buf`
/// NULL (with `cap` 0) or writable for `cap` bytes; `out` NULL or writable.
#[no_mangle]
pub unsafe extern "C" fn clawmem_history(
    store: *mut clawmem_store_t,
    session: *const c_char,
    current_format: u8,
    buf: *mut u8,
    cap: usize,
    out: *mut clawmem_history_t,
) -> c_int {
    with(store, |s| {
        // SAFETY: as this function's contract.
        unsafe {
            if out.is_null() {
                return Err(arg("out is NULL"));
            }
            out.write(clawmem_history_t {
                buf,
                used_bytes: 0,
                records: 0,
                damaged_records: 0,
                needed_bytes: 0,
            });
            let session = text(session, "session is NULL")?;
            let format = BackendFormat::try_from(current_format)
                .map_err(|_| arg("format must be 0 to 3"))?;
            let b = out_buf(buf, cap)?;
            match s.history(session, format, b) {
                Ok(h) => {
                    let v = &mut *out;
                    v.used_bytes = h.used_bytes();
                    v.records = h.len() as u32;
                    v.damaged_records = h.damaged_records();
                    Ok(())
                }
                Err(e) => {
                    if let Error::BufferTooSmall { needed } = e {
                        (*out).needed_bytes = needed;
                    }
                    Err(e.into())
                }
            }
        }
    })
}

/// The record at `*cursor` (start at 0) of a history: returns 1 and fills
/// `rec` (its body points into the history's buffer) and advances
/// `*cursor`, 0 at the end, or CLAWMEM_ERR_INVALID for a NULL argument.
///
/// # Safety
/// `history` NULL or filled by clawmem_history_t, its buffer unchanged since;
/// `cursor` and `rec` NULL or writable.
#[no_mangle]
pub unsafe extern "C" fn clawmem_history_next(
    history: *const clawmem_history_t,
    cursor: *mut usize,
    rec: *mut clawmem_record_t,
) -> c_int {
    if history.is_null() || cursor.is_null() || rec.is_null() {
        return CLAWMEM_ERR_INVALID as c_int;
    }
    // SAFETY: as this function's contract: the history's buffer holds
    // `used_bytes` bytes written by clawmem_history_t.
    unsafe {
        let h = &*history;
        let Ok(b) = bytes(h.buf, h.used_bytes, "") else {
            return CLAWMEM_ERR_INVALID as c_int;
        };
        match History::record_at(b, *cursor) {
            Some((r, next)) => {
                rec.write(clawmem_record_t {
                    type_: r.kind as u8,
                    format: r.format as u8,
                    body: r.body.as_ptr(),
                    body_len: r.body.len(),
                });
                *cursor = next;
                1
            }
            None => 0,
        }
    }
}

/// A session's state; CLAWMEM_ERR_NOT_FOUND if it does not exist.
///
/// # Safety
/// `store` NULL or a clawmem_store_t; `session` NULL or NUL-terminated;
/// `out` NULL or writable.
#[no_mangle]
pub unsafe extern "C" fn clawmem_session_info(
    store: *mut clawmem_store_t,
    session: *const c_char,
    out: *mut clawmem_session_info_t,
) -> c_int {
    with(store, |s| {
        // SAFETY: as this function's contract.
        unsafe {
            let session = text(session, "session is NULL")?;
            let Some(i) = s.session_info(session)? else {
                return Err(Err::NotFound.into());
            };
            put(
                out,
                clawmem_session_info_t {
                    records: i.records,
                    size_bytes: i.size_bytes,
                    blocked: i.blocked,
                },
            );
            Ok(())
        }
    })
}

/// Calls `cb` once per session (any order); `*count` gets the number of
/// sessions listed (a session whose name was damaged at rest beyond repair
/// cannot be listed, nor looked up).
///
/// Power loss: reads only.
///
/// # Safety
/// `store` NULL or a clawmem_store_t; `cb` a valid callback or NULL (count
/// only); `count` NULL or writable.
#[no_mangle]
pub unsafe extern "C" fn clawmem_session_list(
    store: *mut clawmem_store_t,
    cb: clawmem_session_cb,
    ctx: *mut c_void,
    count: *mut usize,
) -> c_int {
    with(store, |s| {
        let mut listed = 0usize;
        let mut each = |id: &str, info: clawmem::SessionInfo| {
            listed += 1;
            let Some(cb) = cb else { return };
            // Ids are at most 255 bytes: a NUL-terminated copy for C.
            let mut name = [0u8; clawmem::MAX_SESSION_ID_BYTES + 1];
            let n = id.len().min(clawmem::MAX_SESSION_ID_BYTES);
            name[..n].copy_from_slice(&id.as_bytes()[..n]);
            let info = clawmem_session_info_t {
                records: info.records,
                size_bytes: info.size_bytes,
                blocked: info.blocked,
            };
            // SAFETY: `cb` is the caller's callback; `name` (NUL-terminated)
            // and `info` live for the duration of the call.
            unsafe { cb(ctx, name.as_ptr().cast(), n, &info) }
        };
        s.for_each_session(&mut each)?;
        // SAFETY: as this function's contract.
        unsafe { put(count, listed) };
        Ok(())
    })
}

/// Deletes `session`'s history (ESP-Claw's delete of its `.log` and
/// `.idx`); CLAWMEM_ERR_NOT_FOUND if it does not exist.
///
/// Power loss: atomic.
///
/// # Safety
/// `store` NULL or a clawmem_store_t; `session` NULL or NUL-terminated.
#[no_mangle]
pub unsafe extern "C" fn clawmem_session_delete(
    store: *mut clawmem_store_t,
    session: *const c_char,
) -> c_int {
    with(store, |s| {
        // SAFETY: as this function's contract.
        let session = unsafe { text(session, "session is NULL")? };
        s.delete_session(session)?;
        Ok(())
    })
}

/// Deletes every session; `*deleted` gets how many.
///
/// Power loss: atomic.
///
/// # Safety
/// `store` NULL or a clawmem_store_t; `deleted` NULL or writable.
#[no_mangle]
pub unsafe extern "C" fn clawmem_sessions_clear(
    store: *mut clawmem_store_t,
    deleted: *mut usize,
) -> c_int {
    with(store, |s| {
        let n = s.clear_sessions()?;
        // SAFETY: as this function's contract.
        unsafe { put(deleted, n) };
        Ok(())
    })
}

// ---- chats and `/session` ---------------------------------------------------

/// The session id a chat's next turn goes to (ESP-Claw's
/// `<channel>:<chat_id>` key and its current alias), NUL-terminated into
/// `buf`; `*len` its length, or the size needed.
///
/// Power loss: may write the chat's map on first use (atomic).
///
/// # Safety
/// `store` NULL or a clawmem_store_t; `channel`, `chat_id` NULL or
/// NUL-terminated; `buf` NULL (with `cap` 0) or writable for `cap`; `len`
/// NULL or writable.
#[no_mangle]
pub unsafe extern "C" fn clawmem_chat_session(
    store: *mut clawmem_store_t,
    channel: *const c_char,
    chat_id: *const c_char,
    buf: *mut c_char,
    cap: usize,
    len: *mut usize,
) -> c_int {
    with(store, |s| {
        // SAFETY: as this function's contract.
        unsafe {
            let key = chat_key(
                text(channel, "channel is NULL")?,
                text(chat_id, "chat_id is NULL")?,
            )?;
            let map = s.chat_sessions(&key)?;
            let id = map.current_session_id();
            render(buf, cap, len, |w| {
                let _ = w.write_str(id.as_str());
                Ok(())
            })
        }
    })
}

/// Handles a chat message that may be a `/session` command (new, list,
/// switch, delete): `*handled` is false if it is not one (nothing is
/// written); else the reply ESP-Claw sends (a usage text, the list, a
/// confirmation or a refusal) is written NUL-terminated into `reply`.
///
/// Power loss: a command that changes the chat's map writes it atomically;
/// `delete` deletes the session's history first, then the map entry, so a
/// cut between leaves the alias with an empty history.
///
/// # Safety
/// `store` NULL or a clawmem_store_t; `channel`, `chat_id`, `message` NULL or
/// NUL-terminated; `handled`, `len` NULL or writable; `reply` NULL (with
/// `cap` 0) or writable for `cap` bytes.
#[no_mangle]
pub unsafe extern "C" fn clawmem_session_command(
    store: *mut clawmem_store_t,
    channel: *const c_char,
    chat_id: *const c_char,
    message: *const c_char,
    handled: *mut bool,
    reply: *mut c_char,
    cap: usize,
    len: *mut usize,
) -> c_int {
    with(store, |s| {
        // SAFETY: as this function's contract.
        unsafe {
            let message = text(message, "message is NULL")?;
            let Some(args) = chat::session_command_args(message) else {
                put(handled, false);
                put(len, 0);
                return Ok(());
            };
            put(handled, true);
            let key = chat_key(
                text(channel, "channel is NULL")?,
                text(chat_id, "chat_id is NULL")?,
            )?;
            match chat::parse_session_command(args) {
                Ok(SessionCommand::List) => {
                    let map = s.chat_sessions(&key)?;
                    render(reply, cap, len, |mut w| {
                        let _ = map.render_list(&mut w);
                        Ok(())
                    })
                }
                Ok(command) => {
                    let r = s.session_command(&key, &command)?;
                    render(reply, cap, len, |w| {
                        let _ = match r {
                            Ok(Some(done)) => write!(w, "{done}"),
                            Ok(None) => Ok(()),
                            Err(refusal) => write!(w, "{refusal}"),
                        };
                        Ok(())
                    })
                }
                Err(usage) => render(reply, cap, len, |w| {
                    let _ = write!(w, "{usage}");
                    Ok(())
                }),
            }
        }
    })
}

// ---- profiles ----------------------------------------------------------------

/// Reads a profile document (`CLAWMEM_PROFILE_*`) into `buf`,
/// NUL-terminated; `*len` its length, or the size needed. A document never
/// written is created with its default contents first, as ESP-Claw creates
/// the missing file (on a full partition the default is returned without
/// being stored).
///
/// Power loss: creating the default is atomic.
///
/// # Safety
/// `store` NULL or a clawmem_store_t; `buf` NULL (with `cap` 0) or writable
/// for `cap` bytes; `len` NULL or writable.
#[no_mangle]
pub unsafe extern "C" fn clawmem_profile_read(
    store: *mut clawmem_store_t,
    doc: u8,
    buf: *mut c_char,
    cap: usize,
    len: *mut usize,
) -> c_int {
    with(store, |s| {
        let doc = profile_doc(doc)?;
        let needed = s.profile_len(doc)?;
        // SAFETY: as this function's contract.
        unsafe {
            if needed >= cap {
                put(len, needed + 1);
                return Err(Fail(
                    CLAWMEM_ERR_BUFFER_TOO_SMALL,
                    Last::Arg("the output buffer is too small; the size needed was returned"),
                ));
            }
            let b = out_buf(buf.cast(), cap)?;
            let n = s.profile_read(doc, &mut b[..needed])?;
            b[n] = 0;
            put(len, n);
        }
        Ok(())
    })
}

/// Writes a profile document (UTF-8, `len` bytes, at most
/// `profile_max_bytes`), replacing it.
///
/// Power loss: atomic; a cut leaves the old document or the new one.
///
/// # Safety
/// `store` NULL or a clawmem_store_t; `body` NULL (with `len` 0) or readable
/// for `len` bytes.
#[no_mangle]
pub unsafe extern "C" fn clawmem_profile_write(
    store: *mut clawmem_store_t,
    doc: u8,
    body: *const c_char,
    len: usize,
) -> c_int {
    with(store, |s| {
        let doc = profile_doc(doc)?;
        // SAFETY: as this function's contract.
        let b = unsafe { bytes(body.cast(), len, "body is NULL with a nonzero length")? };
        let body = core::str::from_utf8(b).map_err(|_| arg("the profile is not valid UTF-8"))?;
        s.profile_write(doc, body)?;
        Ok(())
    })
}

/// Writes a profile document only if it was never written (a firmware's
/// defaults); `*written` says whether it was.
///
/// Power loss: atomic.
///
/// # Safety
/// As clawmem_profile_write; `written` NULL or writable.
#[no_mangle]
pub unsafe extern "C" fn clawmem_profile_write_if_absent(
    store: *mut clawmem_store_t,
    doc: u8,
    body: *const c_char,
    len: usize,
    written: *mut bool,
) -> c_int {
    with(store, |s| {
        let doc = profile_doc(doc)?;
        // SAFETY: as this function's contract.
        let b = unsafe { bytes(body.cast(), len, "body is NULL with a nonzero length")? };
        let body = core::str::from_utf8(b).map_err(|_| arg("the profile is not valid UTF-8"))?;
        let w = s.profile_write_if_absent(doc, body)?;
        // SAFETY: as this function's contract.
        unsafe { put(written, w) };
        Ok(())
    })
}

// ---- long-term memory ----------------------------------------------------------

/// Parses an item id's text form `mem-<n>` into `*id`; CLAWMEM_ERR_INVALID
/// if it is not one.
///
/// # Safety
/// `id_text` NULL or NUL-terminated; `id` NULL or writable.
#[no_mangle]
pub unsafe extern "C" fn clawmem_item_id_parse(id_text: *const c_char, id: *mut u32) -> c_int {
    // SAFETY: as this function's contract.
    unsafe {
        let Ok(t) = text(id_text, "") else {
            return CLAWMEM_ERR_INVALID as c_int;
        };
        match ItemId::parse(t) {
            Some(i) => {
                put(id, i.get());
                CLAWMEM_OK as c_int
            }
            None => CLAWMEM_ERR_INVALID as c_int,
        }
    }
}

/// Stores a memory item (ESP-Claw's `store`), at `now` seconds (0 without a
/// clock). A duplicate of an active item writes nothing (`changed` false);
/// `replace` forgets the items it supersedes. `out` may be NULL.
///
/// Power loss: the item is one atomic write.
///
/// # Safety
/// `store` NULL or a clawmem_store_t; `input` NULL or valid; `out` NULL or
/// writable.
#[no_mangle]
pub unsafe extern "C" fn clawmem_memory_store(
    store: *mut clawmem_store_t,
    input: *const clawmem_item_input_t,
    now: u32,
    replace: bool,
    out: *mut clawmem_stored_t,
) -> c_int {
    with(store, |s| {
        // SAFETY: as this function's contract.
        unsafe {
            let input = item_input(input)?;
            let st = s.memory_store(&input, now, replace)?;
            put(
                out,
                clawmem_stored_t {
                    id: st.item.id().get(),
                    changed: st.changed,
                    replaced: st.replaced,
                },
            );
        }
        Ok(())
    })
}

/// Recalls up to `limit` items under any of `labels` (all items for none),
/// best first, calling `cb` for each (ESP-Claw's `recall`); each recalled
/// item's access count is noted. `*count` gets how many. A label not in
/// the catalog is CLAWMEM_ERR_UNKNOWN_LABEL, recalling nothing, and
/// clawmem_last_error names it and the labels available.
///
/// # Safety
/// `store` NULL or a clawmem_store_t; `labels` NULL (with `n_labels` 0) or
/// `n_labels` NUL-terminated texts; `cb` valid or NULL; `count` NULL or
/// writable.
#[no_mangle]
pub unsafe extern "C" fn clawmem_memory_recall(
    store: *mut clawmem_store_t,
    labels: *const *const c_char,
    n_labels: usize,
    limit: usize,
    now: u32,
    cb: clawmem_item_cb,
    ctx: *mut c_void,
    count: *mut usize,
) -> c_int {
    with(store, |s| {
        let mut ls = [""; CLAWMEM_RECALL_MAX_LABELS as usize];
        // SAFETY: as this function's contract.
        let n = unsafe { labels_in(labels, n_labels, &mut ls)? };
        let found = match cb {
            Some(cb) => s.memory_recall(&ls[..n], limit, now, &mut item_to(cb, ctx))?,
            None => s.memory_recall(&ls[..n], limit, now, &mut |_: &Item| {})?,
        };
        // SAFETY: as this function's contract.
        unsafe { put(count, found) };
        Ok(())
    })
}

/// Calls `cb` for every active item in priority order (access count, then
/// update time, descending; then id); `*count` gets how many.
///
/// # Safety
/// As clawmem_memory_recall.
#[no_mangle]
pub unsafe extern "C" fn clawmem_memory_list(
    store: *mut clawmem_store_t,
    cb: clawmem_item_cb,
    ctx: *mut c_void,
    count: *mut usize,
) -> c_int {
    with(store, |s| {
        let n = match cb {
            Some(cb) => s.memory_list(&mut item_to(cb, ctx))?,
            None => s.memory_list(&mut |_: &Item| {})?,
        };
        // SAFETY: as this function's contract.
        unsafe { put(count, n) };
        Ok(())
    })
}

/// Calls `cb` once with the active item `id`; CLAWMEM_ERR_NOT_FOUND if
/// there is none.
///
/// # Safety
/// `store` NULL or a clawmem_store_t; `cb` valid or NULL.
#[no_mangle]
pub unsafe extern "C" fn clawmem_memory_get(
    store: *mut clawmem_store_t,
    id: u32,
    cb: clawmem_item_cb,
    ctx: *mut c_void,
) -> c_int {
    with(store, |s| {
        let item = s.memory_get(ItemId::new(id))?;
        if let Some(cb) = cb {
            item_to(cb, ctx)(&item);
        }
        Ok(())
    })
}

/// Updates item `id` (ESP-Claw's `update`): the non-empty fields of `patch`
/// replace the item's, and the result is stored under a new id, the old
/// one forgotten. `*updated` is false if the patch changes nothing (then
/// `out` is untouched). CLAWMEM_ERR_NOT_FOUND if `id` is not active.
///
/// Power loss: two atomic writes (the new item, the old one's tombstone);
/// a cut between them is repaired at the next compaction, through the
/// lineage the new item records.
///
/// # Safety
/// `store` NULL or a clawmem_store_t; `patch` NULL or valid; `out` and
/// `updated` NULL or writable.
#[no_mangle]
pub unsafe extern "C" fn clawmem_memory_update(
    store: *mut clawmem_store_t,
    id: u32,
    patch: *const clawmem_item_input_t,
    now: u32,
    out: *mut clawmem_stored_t,
    updated: *mut bool,
) -> c_int {
    with(store, |s| {
        // SAFETY: as this function's contract.
        unsafe {
            let patch = item_input(patch)?;
            let r = s.memory_update(ItemId::new(id), &patch, now)?;
            put(updated, r.is_some());
            if let Some(st) = r {
                put(
                    out,
                    clawmem_stored_t {
                        id: st.item.id().get(),
                        changed: st.changed,
                        replaced: st.replaced,
                    },
                );
            }
        }
        Ok(())
    })
}

/// The newest id in `id`'s line of updates (the id itself if it was never
/// updated), into `*newest`.
///
/// # Safety
/// `store` NULL or a clawmem_store_t; `newest` NULL or writable.
#[no_mangle]
pub unsafe extern "C" fn clawmem_memory_newest(
    store: *mut clawmem_store_t,
    id: u32,
    newest: *mut u32,
) -> c_int {
    with(store, |s| {
        let n = s.memory_newest(ItemId::new(id))?;
        // SAFETY: as this function's contract.
        unsafe { put(newest, n.get()) };
        Ok(())
    })
}

/// Forgets item `id` (a tombstone; its text stays on flash until collected,
/// see clawmem_memory_forget_scrub). CLAWMEM_ERR_NOT_FOUND if not active.
///
/// Power loss: atomic.
///
/// # Safety
/// `store` NULL or a clawmem_store_t.
#[no_mangle]
pub unsafe extern "C" fn clawmem_memory_forget(store: *mut clawmem_store_t, id: u32) -> c_int {
    with(store, |s| {
        s.memory_forget(ItemId::new(id))?;
        Ok(())
    })
}

/// Forgets item `id` and wipes its text from flash now (a sector's other
/// data is moved first). Needs a flash with `multiwrite`; otherwise
/// CLAWMEM_ERR_UNSUPPORTED and nothing is written.
///
/// Power loss: the item is forgotten atomically first; a cut during the
/// wipe leaves it forgotten, and the next mount completes the wipe.
///
/// # Safety
/// `store` NULL or a clawmem_store_t.
#[no_mangle]
pub unsafe extern "C" fn clawmem_memory_forget_scrub(
    store: *mut clawmem_store_t,
    id: u32,
) -> c_int {
    with(store, |s| {
        if !s.flash().multiwrite {
            return Err(Fail(
                CLAWMEM_ERR_UNSUPPORTED,
                Last::Arg("scrub programs a unit twice: the flash does not allow it (multiwrite is false)"),
            ));
        }
        s.memory_forget_scrub(ItemId::new(id))?;
        Ok(())
    })
}

/// Active items, into `*count`.
///
/// # Safety
/// `store` NULL or a clawmem_store_t; `count` NULL or writable.
#[no_mangle]
pub unsafe extern "C" fn clawmem_memory_count(
    store: *mut clawmem_store_t,
    count: *mut usize,
) -> c_int {
    with(store, |s| {
        let n = s.memory_len()?;
        // SAFETY: as this function's contract.
        unsafe { put(count, n) };
        Ok(())
    })
}

/// Rewrites memory's index and drops forgotten items from it now.
///
/// Power loss: atomic.
///
/// # Safety
/// `store` NULL or a clawmem_store_t.
#[no_mangle]
pub unsafe extern "C" fn clawmem_memory_compact(store: *mut clawmem_store_t) -> c_int {
    with(store, |s| Ok(s.memory_compact()?))
}

/// Forgets every memory item.
///
/// Power loss: atomic.
///
/// # Safety
/// `store` NULL or a clawmem_store_t.
#[no_mangle]
pub unsafe extern "C" fn clawmem_memory_clear(store: *mut clawmem_store_t) -> c_int {
    with(store, |s| Ok(s.memory_clear()?))
}

/// The memory catalog section of the system prompt (ESP-Claw's summary
/// labels with their counts), NUL-terminated into `buf`; `*len` its
/// length, or the size needed.
///
/// # Safety
/// `store` NULL or a clawmem_store_t; `buf` NULL (with `cap` 0) or writable
/// for `cap` bytes; `len` NULL or writable.
#[no_mangle]
pub unsafe extern "C" fn clawmem_memory_prompt(
    store: *mut clawmem_store_t,
    buf: *mut c_char,
    cap: usize,
    len: *mut usize,
) -> c_int {
    with(store, |s| {
        // SAFETY: as this function's contract.
        unsafe { render(buf, cap, len, |mut w| Ok(s.write_memory_prompt(&mut w)?)) }
    })
}

/// `MEMORY.md` as ESP-Claw renders it, NUL-terminated into `buf`; `*len`
/// its length, or the size needed.
///
/// # Safety
/// As clawmem_memory_prompt.
#[no_mangle]
pub unsafe extern "C" fn clawmem_memory_md(
    store: *mut clawmem_store_t,
    buf: *mut c_char,
    cap: usize,
    len: *mut usize,
) -> c_int {
    with(store, |s| {
        // SAFETY: as this function's contract.
        unsafe { render(buf, cap, len, |mut w| Ok(s.write_memory_md(&mut w)?)) }
    })
}

/// Begins a memory stage (a request): the stage note then lists what the
/// request's memory calls did.
///
/// # Safety
/// `store` NULL or a clawmem_store_t.
#[no_mangle]
pub unsafe extern "C" fn clawmem_memory_stage_begin(store: *mut clawmem_store_t) -> c_int {
    with(store, |s| {
        s.memory_stage_begin();
        Ok(())
    })
}

/// The stage note ESP-Claw appends after a stage's memory calls,
/// NUL-terminated into `buf` ("" and `*len` 0 when there is none).
///
/// # Safety
/// As clawmem_memory_prompt.
#[no_mangle]
pub unsafe extern "C" fn clawmem_memory_stage_note(
    store: *mut clawmem_store_t,
    buf: *mut c_char,
    cap: usize,
    len: *mut usize,
) -> c_int {
    with(store, |s| {
        // SAFETY: as this function's contract.
        unsafe {
            render(buf, cap, len, |mut w| {
                let _ = s.write_memory_stage_note(&mut w);
                Ok(())
            })
        }
    })
}

/// The `recall` tool's JSON reply (ESP-Claw's `cap_memory_render_result`),
/// NUL-terminated into `buf`; `*items` gets the items recalled, and
/// `*invalid_label` whether a label was not in the catalog (the reply is
/// then ESP-Claw's error JSON, and nothing was recalled or written). The
/// recall happens even when `buf` is too small.
///
/// # Safety
/// As clawmem_memory_recall and clawmem_memory_prompt; `items` and
/// `invalid_label` NULL or writable.
#[no_mangle]
pub unsafe extern "C" fn clawmem_memory_recall_json(
    store: *mut clawmem_store_t,
    labels: *const *const c_char,
    n_labels: usize,
    limit: usize,
    now: u32,
    buf: *mut c_char,
    cap: usize,
    len: *mut usize,
    items: *mut usize,
    invalid_label: *mut bool,
) -> c_int {
    with(store, |s| {
        let mut ls = [""; CLAWMEM_RECALL_MAX_LABELS as usize];
        // SAFETY: as this function's contract.
        unsafe {
            let n = labels_in(labels, n_labels, &mut ls)?;
            render(buf, cap, len, |mut w| {
                let r = s.write_memory_recall_json(&mut w, &ls[..n], limit, now)?;
                let (k, bad) = match r {
                    clawmem::memory::RecallReply::Items(k) => (k, false),
                    clawmem::memory::RecallReply::InvalidLabel => (0, true),
                };
                put(items, k);
                put(invalid_label, bad);
                Ok(())
            })
        }
    })
}

/// The `list` tool's JSON reply, NUL-terminated into `buf`; `*items` gets
/// how many items it lists.
///
/// # Safety
/// As clawmem_memory_prompt; `items` NULL or writable.
#[no_mangle]
pub unsafe extern "C" fn clawmem_memory_list_json(
    store: *mut clawmem_store_t,
    buf: *mut c_char,
    cap: usize,
    len: *mut usize,
    items: *mut usize,
) -> c_int {
    with(store, |s| {
        // SAFETY: as this function's contract.
        unsafe {
            render(buf, cap, len, |mut w| {
                let k = s.write_memory_list_json(&mut w)?;
                put(items, k);
                Ok(())
            })
        }
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
