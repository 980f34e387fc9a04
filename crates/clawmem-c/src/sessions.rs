//! Sessions, chats and `/session` commands over the C boundary: the
//! request gate, appends, history reads and their record walker, session
//! info, listing and deletion, a chat's current session and its commands.
//!
//! Owns nothing but the conversions: every call goes through
//! [`with`](crate::with), which checks the store, and each function states
//! the engine's power-loss rule for what it does.

use core::ffi::{c_char, c_int, c_void};

use clawmem::chat::{self, ChatKey, SessionCommand};
use clawmem::{BackendFormat, Error, Gate, History, HistoryStream, Record, RecordType};

use crate::clawmem_err_t::*;
use crate::*;

// ---- sessions -------------------------------------------------------------

/// The request gate (ESP-Claw's check before a request): `*blocked` is set,
/// and for a blocked session the warning to show the user is written into
/// `warning` (NUL-terminated; `*len` its length, or the size needed).
/// `session` may be NULL (no session: never blocked).
///
/// Power loss: reads RAM only; never fails closed on a flash fault.
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
/// exist, or is empty, is CLAWMEM_ERR_NOT_FOUND; `out` is required. With CLAWMEM_ERR_BUFFER_TOO_SMALL,
/// `out->needed_bytes` is the size needed: the session as stored, or more
/// when final answers of another backend are rewritten after their bodies
/// (a call with that size may then ask again, for more).
///
/// Power loss: reads, and may rewrite the session's index to repair
/// damage found at rest (one atomic write).
///
/// # Safety
/// `store` NULL or a clawmem_store_t; `session` NULL or NUL-terminated; `buf`
/// NULL (with `cap` 0) or writable for `cap` bytes; `out` writable (NULL is
/// refused).
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
/// `*cursor`, 0 at the end, or CLAWMEM_ERR_INVALID for a NULL argument or
/// a cursor that is not at a record of the history.
/// Reads the caller's buffer only.
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
            // The end, or an offset that is not a record's start.
            None if *cursor == h.used_bytes => 0,
            None => CLAWMEM_ERR_INVALID as c_int,
        }
    }
}

/// What a [`clawmem_history_stream_t`] holds: the stream, the store it
/// belongs to, and a mark that it was opened.
struct StreamInner {
    magic: u32,
    store: usize,
    stream: HistoryStream,
}

const STREAM_MAGIC: u32 = 0x5354_524d;

const _: () = assert!(size_of::<StreamInner>() <= size_of::<clawmem_history_stream_t>());
const _: () = assert!(align_of::<StreamInner>() <= align_of::<clawmem_history_stream_t>());

/// The block behind `p`, checked for NULL and alignment.
fn stream_block(p: *mut clawmem_history_stream_t) -> R<*mut StreamInner> {
    if p.is_null() {
        return Err(arg("stream is NULL"));
    }
    if !(p as usize).is_multiple_of(align_of::<clawmem_history_stream_t>()) {
        return Err(arg("stream is not aligned as clawmem_history_stream_t"));
    }
    Ok(p.cast())
}

/// Opens a streaming read of `session`'s history for the `current_format`
/// backend: the records clawmem_history gives, handed out one at a time by
/// clawmem_history_stream_next into a buffer that holds the longest one,
/// never the whole session. `buf` is that buffer: the open uses it to check
/// every record and count what the stream gives (`info`, required). With
/// CLAWMEM_ERR_BUFFER_TOO_SMALL, `info->needed_bytes` is the size needed. A
/// session that does not exist, or is empty, is CLAWMEM_ERR_NOT_FOUND.
///
/// Power loss: reads only.
///
/// # Safety
/// `store` NULL or a clawmem_store_t; `session` NULL or NUL-terminated;
/// `buf` NULL (with `cap` 0) or writable for `cap` bytes; `stream` NULL or
/// writable for a clawmem_history_stream_t; `info` writable (NULL is
/// refused).
#[no_mangle]
pub unsafe extern "C" fn clawmem_history_stream_open(
    store: *mut clawmem_store_t,
    session: *const c_char,
    current_format: u8,
    buf: *mut u8,
    cap: usize,
    stream: *mut clawmem_history_stream_t,
    info: *mut clawmem_history_stream_info_t,
) -> c_int {
    with(store, |s| {
        // SAFETY: as this function's contract.
        unsafe {
            if info.is_null() {
                return Err(arg("info is NULL"));
            }
            info.write(clawmem_history_stream_info_t::default());
            let block = stream_block(stream)?;
            // Not opened until the open succeeds.
            addr_of_mut!((*block).magic).write(0);
            let session = text(session, "session is NULL")?;
            let format = BackendFormat::try_from(current_format)
                .map_err(|_| arg("format must be 0 to 3"))?;
            let b = out_buf(buf, cap)?;
            match s.history_stream(session, format, b) {
                Ok(st) => {
                    info.write(clawmem_history_stream_info_t {
                        records: st.records(),
                        damaged_records: st.damaged_records(),
                        total_bytes: st.total_bytes(),
                        buffer_bytes: st.buffer_bytes(),
                        needed_bytes: 0,
                    });
                    block.write(StreamInner {
                        magic: STREAM_MAGIC,
                        store: store as usize,
                        stream: st,
                    });
                    Ok(())
                }
                Err(e) => {
                    if let Error::BufferTooSmall { needed } = e {
                        (*info).needed_bytes = needed;
                    }
                    Err(e.into())
                }
            }
        }
    })
}

/// The next record of a history stream, oldest first: returns 1 and fills
/// `rec` (its body points into `buf`, valid until the next call that
/// writes `buf`), or 0 after the last record. `cap` must be at least the
/// `buffer_bytes` the open gave (else CLAWMEM_ERR_BUFFER_TOO_SMALL, and the
/// stream stays where it was). A stream whose session was written to since
/// it opened, or whose sectors the store reclaimed, answers
/// CLAWMEM_ERR_INVALID: open it again. So does a stream after a call of it
/// failed part-way (a flash error: its place is lost), and one whose last
/// open failed or that was opened on another store.
///
/// Power loss: reads; after the last record, a read that met damage may
/// rewrite the session's index (one atomic write).
///
/// # Safety
/// `store` NULL or a clawmem_store_t; `stream` NULL or a block that
/// clawmem_history_stream_open was given (and not written since but by
/// clawmem calls); `buf` NULL (with `cap` 0) or writable for `cap` bytes;
/// `rec` NULL or writable.
#[no_mangle]
pub unsafe extern "C" fn clawmem_history_stream_next(
    store: *mut clawmem_store_t,
    stream: *mut clawmem_history_stream_t,
    buf: *mut u8,
    cap: usize,
    rec: *mut clawmem_record_t,
) -> c_int {
    let mut got = false;
    let code = with(store, |s| {
        // SAFETY: as this function's contract.
        unsafe {
            if rec.is_null() {
                return Err(arg("rec is NULL"));
            }
            let block = stream_block(stream)?;
            // `magic` is a plain u32 (any bits valid); it is STREAM_MAGIC
            // only after an open wrote the whole block, so `stream` is then
            // initialised.
            if addr_of!((*block).magic).read() != STREAM_MAGIC
                || addr_of!((*block).store).read() != store as usize
            {
                return Err(arg("the stream was not opened on this store"));
            }
            let st = &mut *addr_of_mut!((*block).stream);
            let b = out_buf(buf, cap)?;
            if let Some(r) = s.history_next(st, b)? {
                rec.write(clawmem_record_t {
                    type_: r.kind as u8,
                    format: r.format as u8,
                    body: r.body.as_ptr(),
                    body_len: r.body.len(),
                });
                got = true;
            }
            Ok(())
        }
    });
    match (code, got) {
        (0, true) => 1,
        (c, _) => c,
    }
}

/// A session's state; CLAWMEM_ERR_NOT_FOUND if it does not exist.
///
/// Power loss: reads only.
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
                Ok(SessionCommand::List) => list_reply(s, &key, reply, cap, len),
                Ok(command) => command_reply(s, &key, &command, reply, cap, len),
                Err(usage) => render(reply, cap, len, |w| {
                    let _ = write!(w, "{usage}");
                    Ok(())
                }),
            }
        }
    })
}

/// `/session list`'s reply. Out of line, as is [`command_reply`], so that
/// the chat map one holds and the command result the other holds are never
/// on the stack together.
///
/// # Safety
/// As clawmem_session_command's `reply`, `cap` and `len`.
#[inline(never)]
unsafe fn list_reply(
    s: &mut Engine,
    key: &ChatKey,
    reply: *mut c_char,
    cap: usize,
    len: *mut usize,
) -> R<()> {
    let map = s.chat_sessions(key)?;
    // SAFETY: as this function's contract.
    unsafe {
        render(reply, cap, len, |mut w| {
            let _ = map.render_list(&mut w);
            Ok(())
        })
    }
}

/// The reply to `/session new`, `switch` or `delete`, after running it.
///
/// # Safety
/// As clawmem_session_command's `reply`, `cap` and `len`.
#[inline(never)]
unsafe fn command_reply(
    s: &mut Engine,
    key: &ChatKey,
    command: &SessionCommand,
    reply: *mut c_char,
    cap: usize,
    len: *mut usize,
) -> R<()> {
    let r = s.session_command(key, command)?;
    // SAFETY: as this function's contract.
    unsafe {
        render(reply, cap, len, |w| {
            let _ = match r {
                Ok(Some(done)) => write!(w, "{done}"),
                Ok(None) => Ok(()),
                Err(refusal) => write!(w, "{refusal}"),
            };
            Ok(())
        })
    }
}
