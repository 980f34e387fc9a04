//! Every clawmem operation the firmware uses, each behind one
//! `#[inline(never)]` function that only forwards its arguments.
//!
//! This is for the size report, not for clawmem's sake: with LTO and
//! `opt-level = "z"`, a clawmem function called from one place is inlined
//! into its caller, and its code would then be counted as the example's
//! (`clawmem_firmware::agent_turn`) instead of the engine's. Behind these
//! forwards the engine's code stays under clawmem's own symbols, or under
//! `clawmem_firmware::api::*`, which scripts/firmware-size.sh counts as
//! engine code: these functions hold nothing but the call. Callbacks and
//! writers cross as `dyn` so that the example's closures are not inlined the
//! other way.
//!
//! A real firmware calls `Store` directly; the code is the same.

#[cfg(any(feature = "memory", feature = "chat", feature = "profiles"))]
use core::fmt::{self, Write};

use clawmem::backend::{self, ScanError};
#[cfg(feature = "chat")]
use clawmem::chat::{self, ChatKey, ChatKeyError, ChatSessions, SessionCommand, SessionError};
#[cfg(feature = "chat")]
use clawmem::chat::{SessionId, SessionReply, UsageError};
use clawmem::chdx::{self, ChdxError, Entry};
#[cfg(feature = "memory")]
use clawmem::memory::{self, Item, ItemId, ItemInput, MemoryAction, RecallReply};
use clawmem::naming::{self, SessionFileKind, SessionFileName};
#[cfg(feature = "profiles")]
use clawmem::profile::ProfileDoc;
use clawmem::text::{self, Normalized};
#[cfg(feature = "memory")]
use clawmem::Stored;
use clawmem::{
    Appended, BackendFormat, Config, Error, Gate, History, HistoryStream, Maintenance, MountMode,
    MountReport, Record, SessionInfo, Space, Work, WrittenBytes,
};

use crate::flash::{FlashError, InternalFlash};
use crate::Engine;

type R<T> = core::result::Result<T, Error<FlashError>>;

// ---- the store: mount, sessions, profiles ---------------------------------

#[inline(never)]
pub fn mount(
    slot: &mut Option<Engine>,
    flash: InternalFlash,
    work: &'static mut Work,
    config: Config,
    mode: MountMode,
) -> R<()> {
    Engine::mount_into(slot, flash, work, config, mode)
}

#[inline(never)]
pub fn format(
    slot: &mut Option<Engine>,
    flash: InternalFlash,
    work: &'static mut Work,
    config: Config,
) -> R<()> {
    Engine::format_into(slot, flash, work, config)
}

#[inline(never)]
pub fn into_flash(store: Engine) -> InternalFlash {
    store.into_flash()
}

#[inline(never)]
pub fn flash(store: &Engine) -> &InternalFlash {
    store.flash()
}

#[inline(never)]
pub fn flash_mut(store: &mut Engine) -> &mut InternalFlash {
    store.flash_mut()
}

#[inline(never)]
pub fn damaged_sessions_dropped(store: &Engine) -> u32 {
    store.damaged_sessions_dropped()
}

#[inline(never)]
pub fn mount_report(store: &Engine) -> MountReport {
    store.mount_report()
}

#[inline(never)]
pub fn config(store: &Engine) -> &Config {
    store.config()
}

#[inline(never)]
pub fn space(store: &Engine) -> Space {
    store.space()
}

#[inline(never)]
pub fn written_bytes(store: &Engine) -> WrittenBytes {
    store.written_bytes()
}

#[inline(never)]
pub fn check(store: &mut Engine) -> R<u32> {
    store.check()
}

#[inline(never)]
pub fn maintain(store: &mut Engine, max_steps: u32) -> R<Maintenance> {
    store.maintain(max_steps)
}

#[inline(never)]
pub fn maintain_while(store: &mut Engine, go_on: &mut dyn FnMut() -> bool) -> R<Maintenance> {
    store.maintain_while(go_on)
}

#[inline(never)]
pub fn gate(store: &mut Engine, session: Option<&str>) -> Gate {
    store.gate(session)
}

#[inline(never)]
pub fn append(
    store: &mut Engine,
    session: &str,
    records: &[Record<'_>],
    turn_completed: bool,
) -> R<Appended> {
    store.append(session, records, turn_completed)
}

#[inline(never)]
pub fn compact_with_summary(
    store: &mut Engine,
    session: &str,
    keep_turns: u64,
    summary: Record<'_>,
) -> R<bool> {
    store.compact_with_summary(session, keep_turns, summary)
}

#[inline(never)]
pub fn history<'b>(
    store: &mut Engine,
    session: &str,
    current: BackendFormat,
    buf: &'b mut [u8],
) -> R<History<'b>> {
    store.history(session, current, buf)
}

#[inline(never)]
pub fn history_stream(
    store: &mut Engine,
    session: &str,
    current: BackendFormat,
    buf: &mut [u8],
) -> R<HistoryStream> {
    store.history_stream(session, current, buf)
}

#[inline(never)]
pub fn history_next<'b>(
    store: &mut Engine,
    stream: &mut HistoryStream,
    buf: &'b mut [u8],
) -> R<Option<Record<'b>>> {
    store.history_next(stream, buf)
}

#[inline(never)]
pub fn session_info(store: &mut Engine, session: &str) -> R<Option<SessionInfo>> {
    store.session_info(session)
}

#[inline(never)]
pub fn session_count(store: &Engine) -> usize {
    store.session_count()
}

#[inline(never)]
pub fn for_each_session(store: &mut Engine, f: &mut dyn FnMut(&str, SessionInfo)) -> R<usize> {
    store.for_each_session(f)
}

#[inline(never)]
pub fn delete_session(store: &mut Engine, session: &str) -> R<()> {
    store.delete_session(session)
}

#[inline(never)]
pub fn clear_sessions(store: &mut Engine) -> R<usize> {
    store.clear_sessions()
}

#[cfg(feature = "profiles")]
#[inline(never)]
pub fn profile_read(store: &mut Engine, doc: ProfileDoc, out: &mut [u8]) -> R<usize> {
    store.profile_read(doc, out)
}

#[cfg(feature = "profiles")]
#[inline(never)]
pub fn profile_len(store: &mut Engine, doc: ProfileDoc) -> R<usize> {
    store.profile_len(doc)
}

#[cfg(feature = "profiles")]
#[inline(never)]
pub fn profile_write(store: &mut Engine, doc: ProfileDoc, body: &str) -> R<()> {
    store.profile_write(doc, body)
}

#[cfg(feature = "profiles")]
#[inline(never)]
pub fn profile_write_if_absent(store: &mut Engine, doc: ProfileDoc, body: &str) -> R<bool> {
    store.profile_write_if_absent(doc, body)
}

#[cfg(feature = "profiles")]
#[inline(never)]
pub fn write_prompt_section(
    doc: ProfileDoc,
    mut w: &mut dyn Write,
    dir: &str,
    contents: &str,
) -> Result<bool, fmt::Error> {
    doc.write_prompt_section(&mut w, dir, contents)
}

// ---- `/session` commands --------------------------------------------------

#[cfg(feature = "chat")]
#[inline(never)]
pub fn chat_key(channel: &str, chat_id: &str) -> Result<ChatKey, ChatKeyError> {
    ChatKey::new(channel, chat_id)
}

#[cfg(feature = "chat")]
#[inline(never)]
pub fn session_command_args(text: &str) -> Option<&str> {
    chat::session_command_args(text)
}

#[cfg(feature = "chat")]
#[inline(never)]
pub fn parse_session_command(args: &str) -> Result<SessionCommand, UsageError> {
    chat::parse_session_command(args)
}

#[cfg(feature = "chat")]
#[inline(never)]
pub fn for_each_chat_sessions(store: &mut Engine, f: &mut dyn FnMut(&ChatSessions)) -> R<()> {
    store.for_each_chat_sessions(f)
}

#[cfg(feature = "chat")]
#[inline(never)]
pub fn chat_sessions(store: &mut Engine, chat: &ChatKey) -> R<ChatSessions> {
    store.chat_sessions(chat)
}

#[cfg(feature = "chat")]
#[inline(never)]
pub fn session_command(
    store: &mut Engine,
    chat: &ChatKey,
    command: &SessionCommand,
) -> R<Result<Option<SessionReply>, SessionError>> {
    store.session_command(chat, command)
}

#[cfg(feature = "chat")]
#[inline(never)]
pub fn current_session_id(map: &ChatSessions) -> SessionId {
    map.current_session_id()
}

#[cfg(feature = "chat")]
#[inline(never)]
pub fn render_list(map: &ChatSessions, mut w: &mut dyn Write) -> fmt::Result {
    map.render_list(&mut w)
}

// ---- long-term memory -----------------------------------------------------

#[cfg(feature = "memory")]
#[inline(never)]
pub fn memory_stage_begin(store: &mut Engine) {
    store.memory_stage_begin()
}

#[cfg(feature = "memory")]
#[inline(never)]
pub fn write_memory_stage_note(store: &Engine, mut w: &mut dyn Write) -> Result<bool, fmt::Error> {
    store.write_memory_stage_note(&mut w)
}

#[cfg(feature = "memory")]
#[inline(never)]
pub fn memory_store(
    store: &mut Engine,
    input: &ItemInput<'_>,
    now: u32,
    replace: bool,
) -> R<Stored> {
    store.memory_store(input, now, replace)
}

#[cfg(feature = "memory")]
#[inline(never)]
pub fn memory_recall(
    store: &mut Engine,
    labels: &[&str],
    limit: usize,
    now: u32,
    f: &mut dyn FnMut(&Item),
) -> R<usize> {
    store.memory_recall(labels, limit, now, f)
}

#[cfg(feature = "memory")]
#[inline(never)]
pub fn memory_update(
    store: &mut Engine,
    id: ItemId,
    patch: &ItemInput<'_>,
    now: u32,
) -> R<Option<Stored>> {
    store.memory_update(id, patch, now)
}

#[cfg(feature = "memory")]
#[inline(never)]
pub fn memory_newest(store: &mut Engine, id: ItemId) -> R<ItemId> {
    store.memory_newest(id)
}

#[cfg(feature = "memory")]
#[inline(never)]
pub fn memory_get(store: &mut Engine, id: ItemId) -> R<Item> {
    store.memory_get(id)
}

#[cfg(feature = "memory")]
#[inline(never)]
pub fn memory_forget(store: &mut Engine, id: ItemId) -> R<Item> {
    store.memory_forget(id)
}

#[cfg(feature = "memory")]
#[inline(never)]
pub fn memory_forget_scrub(store: &mut Engine, id: ItemId) -> R<()> {
    store.memory_forget_scrub(id)
}

#[cfg(feature = "memory")]
#[inline(never)]
pub fn memory_import(
    store: &mut Engine,
    input: &ItemInput<'_>,
    created_at: u32,
    updated_at: u32,
    access_count: u16,
) -> R<Stored> {
    store.memory_import(input, created_at, updated_at, access_count)
}

#[cfg(feature = "memory")]
#[inline(never)]
pub fn memory_damaged_reads(store: &Engine) -> u32 {
    store.memory_damaged_reads()
}

#[cfg(feature = "memory")]
#[inline(never)]
pub fn memory_list(store: &mut Engine, f: &mut dyn FnMut(&Item)) -> R<usize> {
    store.memory_list(f)
}

#[cfg(feature = "memory")]
#[inline(never)]
pub fn memory_catalog(store: &mut Engine, f: &mut dyn FnMut(&str, u16)) -> R<usize> {
    store.memory_catalog(f)
}

#[cfg(feature = "memory")]
#[inline(never)]
pub fn memory_len(store: &mut Engine) -> R<usize> {
    store.memory_len()
}

#[cfg(feature = "memory")]
#[inline(never)]
pub fn memory_compact(store: &mut Engine) -> R<()> {
    store.memory_compact()
}

#[cfg(feature = "memory")]
#[inline(never)]
pub fn memory_clear(store: &mut Engine) -> R<()> {
    store.memory_clear()
}

#[cfg(feature = "memory")]
#[inline(never)]
pub fn write_memory_prompt(store: &mut Engine, mut w: &mut dyn Write) -> R<()> {
    store.write_memory_prompt(&mut w)
}

#[cfg(feature = "memory")]
#[inline(never)]
pub fn write_memory_md(store: &mut Engine, mut w: &mut dyn Write) -> R<()> {
    store.write_memory_md(&mut w)
}

#[cfg(feature = "memory")]
#[inline(never)]
pub fn write_memory_recall_json(
    store: &mut Engine,
    mut w: &mut dyn Write,
    labels: &[&str],
    limit: usize,
    now: u32,
) -> R<RecallReply> {
    store.write_memory_recall_json(&mut w, labels, limit, now)
}

#[cfg(feature = "memory")]
#[inline(never)]
pub fn write_memory_list_json(store: &mut Engine, mut w: &mut dyn Write) -> R<usize> {
    store.write_memory_list_json(&mut w)
}

#[cfg(feature = "memory")]
#[inline(never)]
pub fn write_memory_reply_json(
    w: &mut dyn Write,
    action: MemoryAction,
    item: &Item,
    changed: bool,
) -> fmt::Result {
    memory::write_memory_reply_json(w, action, item, changed)
}

#[cfg(feature = "memory")]
#[inline(never)]
pub fn item_id(text: &str) -> Option<ItemId> {
    ItemId::parse(text)
}

// ---- records: text, JSON, names, ESP-Claw import ----------------------------

#[inline(never)]
pub fn normalize_to_str<'a>(
    input: &[u8],
    max_chars: usize,
    out: &'a mut [u8],
) -> (&'a str, Normalized) {
    text::normalize_to_str(input, max_chars, out)
}

#[inline(never)]
pub fn extract_final_text(body: &[u8], out: &mut [u8]) -> Result<usize, ScanError> {
    backend::extract_final_text(body, out)
}

#[inline(never)]
pub fn write_text_message(text: &str, out: &mut [u8]) -> Result<usize, ScanError> {
    backend::write_text_message(text, out)
}

#[inline(never)]
pub fn session_file_name(session: &str, kind: SessionFileKind) -> SessionFileName {
    naming::session_file_name(session, kind)
}

#[inline(never)]
pub fn validate_index(index: &[u8], data_size_bytes: u64) -> Result<usize, ChdxError> {
    chdx::validate_index(index, data_size_bytes)
}

#[inline(never)]
pub fn index_entries(index: &[u8], data_size_bytes: u64, f: &mut dyn FnMut(Entry)) {
    for entry in chdx::entries(index, data_size_bytes) {
        f(entry)
    }
}
