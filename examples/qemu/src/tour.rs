//! The API tour: after the trace's last op, every public `Store` operation
//! the trace does not exercise is called once or more on the store as the
//! trace left it, each through the same stack-painting measurement as the
//! trace's ops, and reported under its own name (`sim/src/opstream.rs`,
//! `TOUR`, lists the calls in order; the host checks names, order and
//! outcomes).
//!
//! Each call writes one result: [`TAG_TOUR`], status, stack bytes, op name
//! and case (u8 length + bytes each), then a u32 value on `ST_OK` (what the
//! call returned: a count, bytes written, an id) or a u16-length message on
//! `ST_REFUSED` (a documented refusal the tour provokes on purpose, e.g.
//! `NotFound` for a missing id) and `ST_FAILED` (an unexpected outcome).
//!
//! Not called: `memory_forget_scrub_in_place` (needs `MultiwriteNorFlash`;
//! the RAM flash refuses a second write of a word, so it is not one and the
//! call does not compile), `format`/`mount` (they own a `Work`; this store
//! borrows one: `format_into`/`mount_into` run in the trace, `mount_in`
//! here), and the handle accessors `flash`/`flash_mut`/`into_flash`.

use core::fmt;

use clawmem::chat::{parse_session_command, ChatKey, SessionCommand, SessionError};
use clawmem::memory::{ItemId, ItemInput, RecallReply, SOURCE_MANUAL};
use clawmem::profile::ProfileDoc;
use clawmem::{BackendFormat, Error, Gate, MountMode, Record, RecordType, MAX_SESSION_ID_BYTES};

use crate::flash::RamFlash;
use crate::{call, out, stack, store_slot, take_work, Msg, Run, E, S, ST_FAILED, ST_OK};

/// Op tag of the tour (the stream's last op before its end) and of each of
/// its results.
pub const TAG_TOUR: u8 = 15;
/// Tour result status: refused as the tour expected; a message follows.
pub const ST_REFUSED: u8 = 6;

/// A `core::fmt::Write` sink that counts the bytes written to it.
struct Count(u32);

impl fmt::Write for Count {
    fn write_str(&mut self, s: &str) -> fmt::Result {
        self.0 = self.0.wrapping_add(s.len() as u32);
        Ok(())
    }
}

fn head(op: &str, case: &str, status: u8, stack: u32) {
    let o = out();
    o.u8(TAG_TOUR);
    o.u8(status);
    o.u32(stack);
    for s in [op, case] {
        let s = &s.as_bytes()[..s.len().min(255)];
        o.u8(s.len() as u8);
        o.bytes(s);
    }
}

fn ok(op: &str, case: &str, stack: u32, value: u32) {
    head(op, case, ST_OK, stack);
    out().u32(value);
}

fn msg(op: &str, case: &str, status: u8, stack: u32, what: fmt::Arguments<'_>) {
    head(op, case, status, stack);
    let m = Msg::of(what);
    out().u16(m.len as u16);
    out().bytes(m.as_bytes());
}

fn failed(op: &str, case: &str, stack: u32, what: fmt::Arguments<'_>) {
    msg(op, case, ST_FAILED, stack, what);
}

/// An engine result: its value on success, the error as a failure.
fn report<T>(op: &str, case: &str, stack: u32, r: Result<T, E>, value: impl FnOnce(&T) -> u32) {
    match r {
        Ok(v) => ok(op, case, stack, value(&v)),
        Err(e) => failed(op, case, stack, format_args!("{e}")),
    }
}

/// A refusal the tour provokes: `NotFound` is the expected outcome.
fn refused_not_found<T>(op: &str, case: &str, stack: u32, r: Result<T, E>) {
    match r {
        Err(e @ Error::NotFound) => {
            msg(op, case, ST_REFUSED, stack, format_args!("{e}"));
        }
        Err(e) => failed(op, case, stack, format_args!("expected NotFound, got: {e}")),
        Ok(_) => failed(
            op,
            case,
            stack,
            format_args!("expected NotFound, the call succeeded"),
        ),
    }
}

fn sat(v: u64) -> u32 {
    u32::try_from(v).unwrap_or(u32::MAX)
}

/// Runs the tour on the store the trace left. Not inlined: the `Store` that
/// `mount_in` returns lives in this frame, not in `run_op`'s.
#[inline(never)]
pub fn tour(run: &mut Run) {
    let Some(store) = store_slot().as_mut() else {
        failed("tour", "no store", 0, format_args!("the store is lost"));
        return;
    };
    accessors(run, store);
    let (name, len) = sessions(run, store);
    let session = core::str::from_utf8(&name[..len]).unwrap_or("");
    session_calls(run, store, session);
    chat(run, store);
    profiles(run, store);
    memory(run, store);
    endings(run, store);
    remount_by_value(run);
}

#[inline(never)]
fn accessors(run: &mut Run, store: &mut S) {
    let (r, used) = engine!(run, store.config().session_size_limit_bytes);
    ok("config", "session limit", used, r);
    let (r, used) = engine!(run, store.damaged_sessions_dropped());
    ok("damaged_sessions_dropped", "", used, r);
    let (r, used) = engine!(run, store.memory_damaged_reads());
    ok("memory_damaged_reads", "", used, r);
    let (r, used) = engine!(run, store.mount_report());
    ok("mount_report", "chunks scanned", used, r.chunks_scanned);
    let (r, used) = engine!(run, store.space());
    ok("space", "used sectors", used, r.used_sectors);
    let (r, used) = engine!(run, store.written_bytes());
    let total = r.checkpoints
        + r.delta_checkpoints
        + r.session_batches
        + r.session_bases
        + r.session_other
        + r.objects
        + r.memory_items
        + r.memory_other;
    ok("written_bytes", "total", used, sat(total));
}

/// `session_count` and `for_each_session`; returns the id of the session
/// with the most records (empty if there is none).
#[inline(never)]
fn sessions(run: &mut Run, store: &mut S) -> ([u8; MAX_SESSION_ID_BYTES], usize) {
    let (count, used) = engine!(run, store.session_count());
    ok("session_count", "after the trace", used, count as u32);
    let mut best = ([0u8; MAX_SESSION_ID_BYTES], 0usize);
    let mut most = 0u32;
    let mut seen = 0usize;
    let (r, used) = engine!(
        run,
        store.for_each_session(|id, info| {
            seen += 1;
            if best.1 == 0 || info.records > most {
                most = info.records;
                let n = id.len().min(MAX_SESSION_ID_BYTES);
                best.0[..n].copy_from_slice(&id.as_bytes()[..n]);
                best.1 = n;
            }
        })
    );
    match r {
        Ok(0) if seen == count => ok("for_each_session", "every session", used, seen as u32),
        Ok(lost) => failed(
            "for_each_session",
            "every session",
            used,
            format_args!("{seen} sessions seen, {lost} lost, session_count says {count}"),
        ),
        Err(e) => failed(
            "for_each_session",
            "every session",
            used,
            format_args!("{e}"),
        ),
    }
    best
}

#[inline(never)]
fn session_calls(run: &mut Run, store: &mut S, session: &str) {
    const OP: &str = "session_info";
    let (r, used) = engine!(run, store.session_info(session));
    match r {
        Ok(Some(info)) => ok(OP, "the largest session", used, info.records),
        Ok(None) => failed(OP, "the largest session", used, format_args!("no session")),
        Err(e) => failed(OP, "the largest session", used, format_args!("{e}")),
    }
    let (r, used) = engine!(run, store.session_info("tour-no-such-session"));
    match r {
        Ok(None) => ok(OP, "a missing session", used, 0),
        Ok(Some(_)) => failed(OP, "a missing session", used, format_args!("found")),
        Err(e) => failed(OP, "a missing session", used, format_args!("{e}")),
    }
    let (r, used) = engine!(run, store.gate(None));
    match r {
        Gate::Pass => ok("gate", "no session", used, 0),
        Gate::Blocked(_) => failed("gate", "no session", used, format_args!("blocked")),
    }
    let (r, used) = engine!(run, store.gate(Some(session)));
    ok(
        "gate",
        "the largest session",
        used,
        u32::from(matches!(r, Gate::Blocked(_))),
    );
    // The trace streams every history (`history_stream`, `history_next`);
    // the whole read into one buffer is called here.
    // SAFETY: single core; the only reference to HIST while it lives.
    let buf = unsafe { &mut *core::ptr::addr_of_mut!(crate::HIST) };
    let (r, used) = engine!(
        run,
        store.history(session, BackendFormat::Unknown, &mut buf[..])
    );
    report("history", "the largest session, whole", used, r, |h| {
        h.len() as u32
    });
    let (r, used) = engine!(run, store.check());
    report("check", "whole log", used, r, |n| *n);
    let (r, used) = engine!(run, store.maintain(u32::MAX));
    report("maintain", "until done", used, r, |m| m.steps);
    let mut left = 2u32;
    let (r, used) = engine!(
        run,
        store.maintain_while(&mut || {
            left = left.saturating_sub(1);
            left > 0
        })
    );
    report("maintain_while", "a budget of one step", used, r, |m| {
        m.steps
    });
    let empty = Record {
        kind: RecordType::AssistantFinal,
        format: BackendFormat::Unknown,
        body: b"",
    };
    let (r, used) = engine!(run, store.compact_with_summary(session, 1, empty));
    const CWS: &str = "compact_with_summary";
    match r {
        Err(e @ Error::InvalidInput(_)) => {
            msg(CWS, "empty summary", ST_REFUSED, used, format_args!("{e}"))
        }
        Err(e) => failed(CWS, "empty summary", used, format_args!("{e}")),
        Ok(_) => failed(CWS, "empty summary", used, format_args!("accepted")),
    }
    let summary = Record {
        kind: RecordType::AssistantFinal,
        format: BackendFormat::Unknown,
        body: b"Summary of the earlier turns (API tour): the user asked, the agent answered.",
    };
    let (r, used) = engine!(run, store.compact_with_summary(session, 0, summary));
    report(CWS, "the largest session, every turn", used, r, |c| {
        u32::from(*c)
    });
}

#[inline(never)]
fn chat(run: &mut Run, store: &mut S) {
    let Ok(key) = ChatKey::new("tour", "42") else {
        failed(
            "chat_sessions",
            "first use",
            0,
            format_args!("bad chat key"),
        );
        return;
    };
    let (r, used) = engine!(run, store.chat_sessions(&key));
    report("chat_sessions", "first use", used, r, |m| m.len() as u32);
    for (args, case, refusal) in [
        ("new alpha", "new alpha", false),
        ("new beta", "new beta", false),
        ("list", "list", false),
        ("switch alpha", "switch alpha", false),
        ("switch gamma", "switch to a missing alias", true),
        ("delete beta", "delete beta", false),
    ] {
        const OP: &str = "session_command";
        let Ok(cmd) = parse_session_command(args) else {
            failed(OP, case, 0, format_args!("`{args}` does not parse"));
            continue;
        };
        let (r, used) = engine!(run, store.session_command(&key, &cmd));
        match (r, refusal) {
            (Ok(Ok(reply)), false) => {
                let want = !matches!(cmd, SessionCommand::List);
                if reply.is_some() == want {
                    ok(OP, case, used, u32::from(want));
                } else {
                    failed(OP, case, used, format_args!("reply {:?}", reply.is_some()));
                }
            }
            (Ok(Err(e @ SessionError::NoSuchSession { .. })), true) => {
                msg(OP, case, ST_REFUSED, used, format_args!("{e}"))
            }
            (Ok(Err(e)), _) => failed(OP, case, used, format_args!("{e}")),
            (Ok(Ok(_)), true) => failed(OP, case, used, format_args!("accepted")),
            (Err(e), _) => failed(OP, case, used, format_args!("{e}")),
        }
    }
    let (r, used) = engine!(run, store.chat_sessions(&key));
    match r {
        Ok(m) if m.len() == 2 && m.current().as_str() == "alpha" => {
            ok("chat_sessions", "after the commands", used, 2)
        }
        Ok(m) => failed(
            "chat_sessions",
            "after the commands",
            used,
            format_args!("{} sessions, current {}", m.len(), m.current().as_str()),
        ),
        Err(e) => failed(
            "chat_sessions",
            "after the commands",
            used,
            format_args!("{e}"),
        ),
    }
}

#[inline(never)]
fn profiles(run: &mut Run, store: &mut S) {
    for (d, case) in [
        (ProfileDoc::Soul, "soul"),
        (ProfileDoc::Identity, "identity"),
        (ProfileDoc::User, "user"),
        (ProfileDoc::Agents, "agents"),
    ] {
        let (r, used) = engine!(run, store.profile_len(d));
        report("profile_len", case, used, r, |n| *n as u32);
    }
}

#[inline(never)]
fn memory(run: &mut Run, store: &mut S) {
    let (_, used) = engine!(run, store.memory_stage_begin());
    ok("memory_stage_begin", "", used, 0);
    let input = ItemInput::new("The user's API tour item: prefers short answers in the morning.")
        .tags("tour,preference")
        .keywords("morning,short")
        .source(SOURCE_MANUAL);
    let now = run.tick();
    let (r, used) = engine!(run, store.memory_import(&input, now - 3600, now, 3));
    let id = match r {
        Ok(s) => {
            let id = s.item.id().get();
            ok("memory_import", "a tagged item", used, id);
            id
        }
        Err(e) => {
            failed("memory_import", "a tagged item", used, format_args!("{e}"));
            0
        }
    };
    let mut note = Count(0);
    let (r, used) = engine!(run, store.write_memory_stage_note(&mut note));
    match r {
        Ok(_) => ok("write_memory_stage_note", "counting sink", used, note.0),
        Err(_) => failed(
            "write_memory_stage_note",
            "counting sink",
            used,
            format_args!("fmt"),
        ),
    }
    let (r, used) = engine!(run, store.memory_len());
    report("memory_len", "after the import", used, r, |n| *n as u32);
    let mut labels = 0u32;
    let (r, used) = engine!(run, store.memory_catalog(|_, _| labels += 1));
    report("memory_catalog", "every label", used, r, |_| labels);
    let mut sink = Count(0);
    let (r, used) = engine!(run, store.write_memory_prompt(&mut sink));
    report("write_memory_prompt", "counting sink", used, r, |_| sink.0);
    let mut sink = Count(0);
    let (r, used) = engine!(run, store.write_memory_md(&mut sink));
    report("write_memory_md", "counting sink", used, r, |_| sink.0);
    let mut sink = Count(0);
    let (r, used) = engine!(run, store.write_memory_list_json(&mut sink));
    report("write_memory_list_json", "counting sink", used, r, |_| {
        sink.0
    });
    let now = run.tick();
    for (label, case, want_items) in [
        ("tour", "the tour label", true),
        ("not-a-label", "a label not in the catalog", false),
    ] {
        let mut sink = Count(0);
        let (r, used) = engine!(
            run,
            store.write_memory_recall_json(&mut sink, &[label], 0, now)
        );
        match r {
            Ok(RecallReply::Items(n)) if want_items && n > 0 => {
                ok("write_memory_recall_json", case, used, sink.0)
            }
            Ok(RecallReply::InvalidLabel) if !want_items => {
                ok("write_memory_recall_json", case, used, sink.0)
            }
            Ok(other) => failed(
                "write_memory_recall_json",
                case,
                used,
                format_args!("{other:?}"),
            ),
            Err(e) => failed("write_memory_recall_json", case, used, format_args!("{e}")),
        }
    }
    let (r, used) = engine!(run, store.memory_get(ItemId::new(id)));
    match r {
        Ok(i) if i.id().get() == id => ok("memory_get", "the imported item", used, id),
        Ok(i) => failed(
            "memory_get",
            "the imported item",
            used,
            format_args!("got item {}", i.id().get()),
        ),
        Err(e) => failed("memory_get", "the imported item", used, format_args!("{e}")),
    }
    let (r, used) = engine!(run, store.memory_get(ItemId::new(0xFFFF_FFF0)));
    refused_not_found("memory_get", "a missing id", used, r);
    let patch = ItemInput::new("The user's API tour item: prefers short answers all day.");
    let now = run.tick();
    let (r, used) = engine!(run, store.memory_update(ItemId::new(id), &patch, now));
    let newest = match r {
        Ok(Some(s)) => {
            let n = s.item.id().get();
            ok("memory_update", "the imported item", used, n);
            n
        }
        Ok(None) => {
            failed(
                "memory_update",
                "the imported item",
                used,
                format_args!("unchanged"),
            );
            id
        }
        Err(e) => {
            failed(
                "memory_update",
                "the imported item",
                used,
                format_args!("{e}"),
            );
            id
        }
    };
    let (r, used) = engine!(run, store.memory_newest(ItemId::new(id)));
    match r {
        Ok(n) if n.get() == newest => ok("memory_newest", "the superseded id", used, newest),
        Ok(n) => failed(
            "memory_newest",
            "the superseded id",
            used,
            format_args!("{} (the update made {newest})", n.get()),
        ),
        Err(e) => failed(
            "memory_newest",
            "the superseded id",
            used,
            format_args!("{e}"),
        ),
    }
    let (r, used) = engine!(run, store.memory_forget_scrub(ItemId::new(newest)));
    report("memory_forget_scrub", "the updated item", used, r, |_| {
        newest
    });
    let (r, used) = engine!(run, store.memory_get(ItemId::new(newest)));
    refused_not_found("memory_get", "the scrubbed item", used, r);
    let (r, used) = engine!(run, store.memory_compact());
    report("memory_compact", "", used, r, |_| 0);
    let (r, used) = engine!(run, store.memory_len());
    report("memory_len", "after the compaction", used, r, |n| *n as u32);
}

#[inline(never)]
fn endings(run: &mut Run, store: &mut S) {
    let (r, used) = engine!(run, store.memory_clear());
    report("memory_clear", "", used, r, |_| 0);
    let (r, used) = engine!(run, store.memory_len());
    match r {
        Ok(0) => ok("memory_len", "after the clear", used, 0),
        Ok(n) => failed(
            "memory_len",
            "after the clear",
            used,
            format_args!("{n} items"),
        ),
        Err(e) => failed("memory_len", "after the clear", used, format_args!("{e}")),
    }
    let (r, used) = engine!(run, store.clear_sessions());
    report("clear_sessions", "every session", used, r, |n| *n as u32);
    let (n, used) = engine!(run, store.session_count());
    if n == 0 {
        ok("session_count", "after clear_sessions", used, 0);
    } else {
        failed(
            "session_count",
            "after clear_sessions",
            used,
            format_args!("{n}"),
        );
    }
}

/// Drops the store and mounts the flash again with `mount_in`, which
/// returns the store by value (the trace's remounts use `mount_into`).
#[inline(never)]
fn remount_by_value(run: &mut Run) {
    let slot = store_slot();
    *slot = None;
    let config = run.config;
    let (r, used) = engine!(
        run,
        S::mount_in(
            RamFlash::take(),
            take_work(),
            config,
            MountMode::ExistingOnly
        )
    );
    match r {
        Ok(s) => {
            let sessions = s.session_count() as u32;
            *slot = Some(s);
            if sessions == 0 {
                ok("mount_in", "after the tour", used, 0);
            } else {
                failed(
                    "mount_in",
                    "after the tour",
                    used,
                    format_args!("{sessions} sessions"),
                );
            }
        }
        Err(e) => {
            run.lost = Some(Msg::of(format_args!("mount failed: {e}")));
            failed("mount_in", "after the tour", used, format_args!("{e}"));
        }
    }
}
