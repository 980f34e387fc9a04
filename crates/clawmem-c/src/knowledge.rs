//! Profiles and long-term memory over the C boundary: profile documents,
//! memory store, recall, list, get, update, forget and scrub, the catalog
//! prompt, `MEMORY.md`, the stage note and the tools' JSON replies.
//!
//! Owns nothing but the conversions: every call goes through
//! [`with`](crate::with), which checks the store, and each function states
//! the engine's power-loss rule for what it does.

use core::ffi::{c_char, c_int, c_void};

use clawmem::memory::{Item, ItemId};

use crate::clawmem_err_t::*;
use crate::*;

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
                return Err(Err::BufferTooSmall { needed: needed + 1 }.into());
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
/// if it is not one. Touches no store or flash.
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
            put(out, stored_view(&st));
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
/// Power loss: the access record is atomic; a cut loses at most this
/// recall's count increments.
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
/// Power loss: reads only.
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
/// Power loss: reads only.
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
                put(out, stored_view(&st));
            }
        }
        Ok(())
    })
}

/// The newest id in `id`'s line of updates (the id itself if it was never
/// updated), into `*newest`.
///
/// Power loss: reads only.
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
/// Power loss: reads only.
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
/// Power loss: reads only.
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
/// Power loss: reads only.
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
/// Power loss: RAM only (the note is not stored).
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
/// Power loss: RAM only.
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
/// Power loss: as clawmem_memory_recall.
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
/// Power loss: writes nothing to flash.
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

/// What the engine's store or update did, for C.
fn stored_view(st: &clawmem::Stored) -> clawmem_stored_t {
    clawmem_stored_t {
        id: st.item.id().get(),
        changed: st.changed,
        replaced: st.replaced,
    }
}
