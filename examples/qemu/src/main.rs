//! clawmem on a Cortex-M4F under QEMU (`mps2-an386`): replays an op stream
//! (a trace converted by `clawmem-sim opstream`, see `sim/src/opstream.rs`
//! for the layout) through `clawmem::Store` on a RAM flash that enforces
//! NOR rules (src/flash.rs), and writes one result per operation (status,
//! engine decisions, digests of what it read, engine stack bytes) for
//! `clawmem-sim opcheck` to check on the host. `scripts/qemu-replay.sh`
//! runs the whole thing.
//!
//! Files, through semihosting, relative to QEMU's working directory:
//! `ops.bin` is read one op at a time (the trace is never held whole),
//! `results.bin` is written. The firmware exits through semihosting:
//! success once every op has a result and the summary is written (the
//! host judges the results), failure on a broken stream, an I/O error, a
//! panic or a fault.
//!
//! It mirrors `ClawmemDriver` of `sim/src/replay.rs`: the same config
//! (`Config::default()` with the session limit the host fitted to the
//! partition), histories read with `BackendFormat::Unknown`,
//! a synthetic clock that advances 60 s per memory store, recall and update,
//! a blocked append answered by deleting the session, a remount that drops
//! the store and mounts the same flash with `MountMode::ExistingOnly`.
//!
//! A stream made with `--tour` ends with the API tour (src/tour.rs): every
//! other public `Store` operation, called on the store the trace left and
//! measured the same way.
#![no_std]
#![no_main]

mod flash;
mod host;
mod stack;

use core::fmt::{self, Write as _};
use core::ptr::addr_of_mut;

use clawmem::memory::{ItemId, ItemInput, SOURCE_AUTO_LLM, SOURCE_MANUAL};
use clawmem::profile::ProfileDoc;
use clawmem::{BackendFormat, Config, Error, MountMode, Record, RecordType, Store, Work};
use cortex_m_rt::{entry, exception, ExceptionFrame};
use cortex_m_semihosting::{debug, hprintln};

use flash::{FlashError, RamFlash};
use host::{File, Out};

/// Session table size, as the firmware example keeps: a working set over
/// the sessions on flash (the trace has 100), so that the sessions the
/// table lets go and finds again run on the target too.
const MAX_SESSIONS: usize = 32;
/// The store, with its work area lent from a static as a firmware would.
type S = Store<RamFlash, MAX_SESSIONS, &'static mut Work>;

/// The engine's working RAM, lent to every mount in turn.
static mut WORK: Work = Work::new();
type E = Error<FlashError>;

// ---- the wire (sim/src/opstream.rs) -------------------------------------------

const MAGIC: &[u8; 8] = b"CLAWOPS1";
const VERSION: u32 = 1;
const HEADER_BYTES: usize = 8 + 10 * 4;

const TAG_APPEND: u8 = 1;
const TAG_HISTORY: u8 = 2;
const TAG_SESSION_DELETE: u8 = 3;
const TAG_MEMORY_STORE: u8 = 4;
const TAG_MEMORY_RECALL: u8 = 5;
const TAG_MEMORY_UPDATE: u8 = 6;
const TAG_MEMORY_FORGET: u8 = 7;
const TAG_MEMORY_LIST: u8 = 8;
const TAG_PROFILE_WRITE: u8 = 9;
const TAG_PROFILE_READ: u8 = 10;
const TAG_REMOUNT: u8 = 11;
const TAG_ROUND: u8 = 12;
const TAG_MEMORY_CLEAR: u8 = 13;
const TAG_CLEANUP_DELETE: u8 = 14;
const TAG_END: u8 = 0xFF;
const TAG_BLOCKED_DELETE: u8 = 0x20;
const TAG_FORMAT: u8 = 0x21;
const TAG_SUMMARY: u8 = 0xFE;

const ST_OK: u8 = 0;
const ST_BLOCKED: u8 = 1;
const ST_EVICTED: u8 = 2;
const ST_SKIPPED: u8 = 3;
const ST_FAILED: u8 = 4;
const ST_NOT_LIVE: u8 = 5;

// ---- limits (opstream::limits on the host) ------------------------------------

const OP_BUF: usize = 256 * 1024;
/// Profile buffer, and the tour's whole history read: a session over the
/// 150 KiB limit fits.
const HIST_BUF: usize = 1024 * 1024;
/// The buffer every history of the trace is streamed through (issue 15:
/// at most 8 KiB): a record at a time, never the whole session.
pub(crate) const STREAM_BUF: usize = 8 * 1024;
const MAX_RECORDS: usize = 64;
const MAX_LABELS: usize = 16;
const MAX_SLOTS: usize = 64 * 1024;
const MAX_TARGETS: usize = 16 * 1024;

/// What a memory target names (as replay's `Target`). `Failed` first, so
/// that the table is zeroes and lives in .bss.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Target {
    Failed,
    Live(u32),
    Forgotten,
    Evicted,
}

static mut OPS: [u8; OP_BUF] = [0; OP_BUF];
pub(crate) static mut HIST: [u8; HIST_BUF] = [0; HIST_BUF];
static mut STREAM: [u8; STREAM_BUF] = [0; STREAM_BUF];
static mut LIVE: [u32; MAX_SLOTS / 32] = [0; MAX_SLOTS / 32];
static mut TARGETS: [Target; MAX_TARGETS] = [Target::Failed; MAX_TARGETS];
static mut STORE: Option<S> = None;
static mut OUT: Out = Out::new();

/// Statics, borrowed once in `main` (single core, no interrupts).
fn out() -> &'static mut Out {
    // SAFETY: only the main loop and the fault handlers touch it, never at
    // once (a handler does not return).
    unsafe { &mut *addr_of_mut!(OUT) }
}

// ---- the stack figures -----------------------------------------------------

/// Runs `f` (an engine call) in a frame of its own below the caller's:
/// whatever the optimiser inlines into it is below the painted SP.
#[inline(never)]
fn call<R>(f: impl FnOnce() -> R) -> R {
    f()
}

/// Paints, runs an engine call, measures: `(result, stack bytes)`.
macro_rules! engine {
    ($run:expr, $body:expr) => {{
        let sp = stack::paint();
        let r = call(|| $body);
        let (used, overflow) = stack::used(sp);
        $run.note_stack(sp, overflow);
        (r, used)
    }};
}

// After the macro: the tour uses it.
mod tour;

// ---- failures ------------------------------------------------------------------

/// A message into a fixed buffer, cut at its size.
#[derive(Clone, Copy)]
struct Msg {
    buf: [u8; 240],
    len: usize,
}

impl Msg {
    fn new() -> Self {
        Msg {
            buf: [0; 240],
            len: 0,
        }
    }

    fn of(args: fmt::Arguments<'_>) -> Self {
        let mut m = Msg::new();
        let _ = m.write_fmt(args);
        m
    }

    fn as_bytes(&self) -> &[u8] {
        &self.buf[..self.len]
    }
}

impl fmt::Write for Msg {
    fn write_str(&mut self, s: &str) -> fmt::Result {
        let n = s.len().min(self.buf.len() - self.len);
        self.buf[self.len..self.len + n].copy_from_slice(&s.as_bytes()[..n]);
        self.len += n;
        Ok(())
    }
}

/// The stream cannot be run on: stop with a failure.
struct Fatal(Msg);

macro_rules! fatal {
    ($($arg:tt)*) => { Fatal(Msg::of(format_args!($($arg)*))) };
}

// ---- reading the stream --------------------------------------------------------

/// A little-endian reader over an op's payload.
struct Cur<'a> {
    p: &'a [u8],
}

impl<'a> Cur<'a> {
    fn take(&mut self, n: usize) -> Result<&'a [u8], Fatal> {
        if self.p.len() < n {
            return Err(fatal!("op payload truncated"));
        }
        let (a, b) = self.p.split_at(n);
        self.p = b;
        Ok(a)
    }

    fn u8(&mut self) -> Result<u8, Fatal> {
        Ok(self.take(1)?[0])
    }

    fn u16(&mut self) -> Result<u16, Fatal> {
        let b = self.take(2)?;
        Ok(u16::from_le_bytes([b[0], b[1]]))
    }

    fn u32(&mut self) -> Result<u32, Fatal> {
        let b = self.take(4)?;
        Ok(u32::from_le_bytes([b[0], b[1], b[2], b[3]]))
    }

    fn bytes(&mut self) -> Result<&'a [u8], Fatal> {
        let n = self.u32()? as usize;
        self.take(n)
    }

    fn str(&mut self) -> Result<&'a str, Fatal> {
        core::str::from_utf8(self.bytes()?).map_err(|_| fatal!("op string is not UTF-8"))
    }
}

fn le32(b: &[u8], at: usize) -> u32 {
    u32::from_le_bytes([b[at], b[at + 1], b[at + 2], b[at + 3]])
}

// ---- digests ------------------------------------------------------------------------

static CRC32: crc::Crc<u32> = crc::Crc::<u32>::new(&crc::CRC_32_ISO_HDLC);

/// `opstream::Digester`: count, bytes, CRC-32 and FNV-1a 64 over records
/// as (u8 kind, u8 format, u32 length, body).
struct Digester {
    crc: crc::Digest<'static, u32>,
    fnv: u64,
    count: u32,
    bytes: u32,
}

impl Digester {
    fn new() -> Self {
        Digester {
            crc: CRC32.digest(),
            fnv: 0xcbf2_9ce4_8422_2325,
            count: 0,
            bytes: 0,
        }
    }

    fn record(&mut self, kind: u8, format: u8, body: &[u8]) {
        let head = [kind, format];
        let len = (body.len() as u32).to_le_bytes();
        for part in [&head[..], &len[..], body] {
            self.crc.update(part);
            for b in part {
                self.fnv ^= u64::from(*b);
                self.fnv = self.fnv.wrapping_mul(0x0000_0100_0000_01b3);
            }
        }
        self.count += 1;
        self.bytes += body.len() as u32;
    }

    fn write(self, out: &mut Out) {
        out.u32(self.count);
        out.u32(self.bytes);
        out.u32(self.crc.finalize());
        out.u64(self.fnv);
    }
}

/// Count and CRC-32 of item ids (recall, list).
struct Ids {
    crc: crc::Digest<'static, u32>,
    count: u32,
}

impl Ids {
    fn new() -> Self {
        Ids {
            crc: CRC32.digest(),
            count: 0,
        }
    }

    fn push(&mut self, id: u32) {
        self.crc.update(&id.to_le_bytes());
        self.count += 1;
    }
}

// ---- the run ------------------------------------------------------------------------

struct Run {
    config: Config,
    /// Why the store is gone (a remount failed).
    lost: Option<Msg>,
    clock: u32,
    targets: usize,
    slots: usize,
    deepest_sp: usize,
    overflow: bool,
    ops_done: u32,
    /// The largest buffer a history stream asked for.
    stream_need: usize,
}

impl Run {
    fn note_stack(&mut self, sp: usize, overflow: bool) {
        self.deepest_sp = self.deepest_sp.min(sp);
        self.overflow |= overflow;
    }

    fn tick(&mut self) -> u32 {
        self.clock = self.clock.wrapping_add(60);
        1_700_000_000u32.wrapping_add(self.clock)
    }

    fn live(&self, slot: u32) -> Result<bool, Fatal> {
        let s = slot as usize;
        if s >= self.slots {
            return Err(fatal!("session slot {slot} out of range"));
        }
        // SAFETY: single core; no reference to LIVE outlives this call.
        Ok(unsafe { (*addr_of_mut!(LIVE))[s / 32] } & (1 << (s % 32)) != 0)
    }

    fn set_live(&mut self, slot: u32, live: bool) -> Result<(), Fatal> {
        let s = slot as usize;
        if s >= self.slots {
            return Err(fatal!("session slot {slot} out of range"));
        }
        // SAFETY: as `live`.
        let w = unsafe { &mut (*addr_of_mut!(LIVE))[s / 32] };
        if live {
            *w |= 1 << (s % 32);
        } else {
            *w &= !(1 << (s % 32));
        }
        Ok(())
    }
}

fn targets() -> &'static mut [Target; MAX_TARGETS] {
    // SAFETY: single core; only the main loop uses it.
    unsafe { &mut *addr_of_mut!(TARGETS) }
}

fn retarget(n: usize, item: u32, now: Target) {
    for t in targets()[..n]
        .iter_mut()
        .filter(|t| **t == Target::Live(item))
    {
        *t = now;
    }
}

/// The work area for the next mount or format; the store that held the
/// previous reference has been dropped (see [`remount`]).
fn take_work() -> &'static mut Work {
    // SAFETY: single core; each reference goes to one mount or format, and
    // the store holding the one before is dropped before the next call.
    unsafe { &mut *addr_of_mut!(WORK) }
}

fn store_slot() -> &'static mut Option<S> {
    // SAFETY: single core; only the main loop uses it.
    unsafe { &mut *addr_of_mut!(STORE) }
}

fn result(tag: u8, status: u8, stack: u32) {
    let o = out();
    o.u8(tag);
    o.u8(status);
    o.u32(stack);
}

fn failed(tag: u8, stack: u32, what: fmt::Arguments<'_>) {
    result(tag, ST_FAILED, stack);
    let m = Msg::of(what);
    out().u16(m.len as u16);
    out().bytes(m.as_bytes());
}

fn fail(tag: u8, stack: u32, e: &E) {
    failed(tag, stack, format_args!("{e}"));
}

fn record_type(b: u8) -> Result<RecordType, Fatal> {
    Ok(match b {
        1 => RecordType::User,
        2 => RecordType::AssistantFinal,
        3 => RecordType::AssistantTool,
        4 => RecordType::ToolResult,
        _ => return Err(fatal!("record kind {b}")),
    })
}

fn backend(b: u8) -> Result<BackendFormat, Fatal> {
    Ok(match b {
        0 => BackendFormat::Unknown,
        1 => BackendFormat::OpenAiCompatible,
        2 => BackendFormat::AnthropicCompatible,
        3 => BackendFormat::OpenAiResponses,
        _ => return Err(fatal!("record format {b}")),
    })
}

fn doc(b: u8) -> Result<ProfileDoc, Fatal> {
    Ok(match b {
        0 => ProfileDoc::Soul,
        1 => ProfileDoc::Identity,
        2 => ProfileDoc::User,
        3 => ProfileDoc::Agents,
        _ => return Err(fatal!("profile doc {b}")),
    })
}

/// Deletes a session as the driver does: a session that is not there is
/// not an error.
fn delete(run: &mut Run, store: &mut S, tag: u8, session: &str) {
    let (r, used) = engine!(run, store.delete_session(session));
    match r {
        Ok(()) | Err(Error::NotFound) => result(tag, ST_OK, used),
        Err(e) => fail(tag, used, &e),
    }
}

/// Carries out one op and writes its result(s). Not inlined (nor is
/// [`remount`] or [`format`]): the Store-sized temporaries of a mount stay
/// out of the frames that every other engine call sits below.
#[inline(never)]
fn run_op(run: &mut Run, tag: u8, payload: &[u8]) -> Result<(), Fatal> {
    let mut p = Cur { p: payload };
    // Ops that do not need the store.
    match tag {
        TAG_ROUND => {
            let _round = p.u32()?;
            run.targets = 0;
            result(tag, ST_OK, 0);
            return Ok(());
        }
        TAG_REMOUNT => {
            remount(run);
            return Ok(());
        }
        tour::TAG_TOUR => {
            tour::tour(run);
            return Ok(());
        }
        _ => {}
    }
    let store = match (store_slot().as_mut(), run.lost) {
        (Some(s), _) => s,
        (None, why) => {
            // Replay's driver fails every op once a remount failed.
            let why = why.unwrap_or_else(|| Msg::of(format_args!("no store")));
            let why = core::str::from_utf8(why.as_bytes()).unwrap_or("store lost");
            match tag {
                TAG_MEMORY_UPDATE | TAG_MEMORY_FORGET => {
                    let k = p.u32()? as usize;
                    if !matches!(targets()[..run.targets].get(k), Some(Target::Live(_))) {
                        result(tag, ST_SKIPPED, 0);
                        return Ok(());
                    }
                }
                TAG_CLEANUP_DELETE => {
                    let slot = p.u32()?;
                    if !run.live(slot)? {
                        result(tag, ST_NOT_LIVE, 0);
                        return Ok(());
                    }
                    run.set_live(slot, false)?;
                }
                TAG_MEMORY_STORE => {
                    if run.targets == MAX_TARGETS {
                        return Err(fatal!("more memory stores than the target table holds"));
                    }
                    targets()[run.targets] = Target::Failed;
                    run.targets += 1;
                }
                _ => {}
            }
            failed(tag, 0, format_args!("store lost: {why}"));
            return Ok(());
        }
    };
    match tag {
        TAG_APPEND => {
            let slot = p.u32()?;
            let session = p.str()?;
            let turn_completed = p.u8()? != 0;
            let n = p.u16()? as usize;
            if n > MAX_RECORDS {
                return Err(fatal!("{n} records in one append"));
            }
            let mut records = [Record {
                kind: RecordType::User,
                format: BackendFormat::Unknown,
                body: &[],
            }; MAX_RECORDS];
            for r in records.iter_mut().take(n) {
                r.kind = record_type(p.u8()?)?;
                r.format = backend(p.u8()?)?;
                r.body = p.bytes()?;
            }
            let records = &records[..n];
            let (r, used) = engine!(run, store.append(session, records, turn_completed));
            match r {
                Ok(a) => {
                    run.set_live(slot, true)?;
                    result(tag, ST_OK, used);
                    out().u8(u8::from(a.compacted) | (u8::from(a.blocked) << 1));
                }
                Err(Error::Blocked) => {
                    result(tag, ST_BLOCKED, used);
                    run.set_live(slot, false)?;
                    delete(run, store, TAG_BLOCKED_DELETE, session);
                }
                Err(e) => fail(tag, used, &e),
            }
        }
        TAG_HISTORY => {
            let _slot = p.u32()?;
            let session = p.str()?;
            // SAFETY: single core; the only reference to STREAM while it lives.
            let buf = unsafe { &mut *addr_of_mut!(STREAM) };
            // The history is streamed: opened (which checks every body and
            // counts the records), then read a record at a time into the
            // 8 KiB buffer. The stack figure is the deeper of the calls.
            let (r, mut used) = engine!(
                run,
                store.history_stream(session, BackendFormat::Unknown, &mut buf[..])
            );
            match r {
                Ok(mut st) => {
                    run.stream_need = run.stream_need.max(st.buffer_bytes());
                    let mut d = Digester::new();
                    let mut bytes = 0usize;
                    let end = loop {
                        let (r, u) = engine!(run, store.history_next(&mut st, &mut buf[..]));
                        used = used.max(u);
                        match r {
                            Ok(Some(rec)) => {
                                bytes += rec.body.len();
                                d.record(rec.kind.as_u8(), rec.format.as_u8(), rec.body);
                            }
                            Ok(None) => break Ok(()),
                            Err(e) => break Err(e),
                        }
                    };
                    match end {
                        Ok(()) if bytes != st.total_bytes() || st.given() != st.records() => {
                            failed(
                                tag,
                                used,
                                format_args!(
                                    "the stream gave {} records and {bytes} B, it announced {} and {} B",
                                    st.given(),
                                    st.records(),
                                    st.total_bytes()
                                ),
                            )
                        }
                        Ok(()) => {
                            result(tag, ST_OK, used);
                            d.write(out());
                        }
                        Err(e) => fail(tag, used, &e),
                    }
                }
                Err(Error::NotFound) => {
                    result(tag, ST_OK, used);
                    Digester::new().write(out());
                }
                Err(Error::BufferTooSmall { needed }) => failed(
                    tag,
                    used,
                    format_args!(
                        "a history stream needs {needed} B, the firmware's buffer holds {STREAM_BUF}"
                    ),
                ),
                Err(e) => fail(tag, used, &e),
            }
        }
        TAG_SESSION_DELETE => {
            let slot = p.u32()?;
            let session = p.str()?;
            let (r, used) = engine!(run, store.delete_session(session));
            match r {
                Ok(()) | Err(Error::NotFound) => {
                    run.set_live(slot, false)?;
                    result(tag, ST_OK, used);
                }
                Err(e) => fail(tag, used, &e),
            }
        }
        TAG_CLEANUP_DELETE => {
            let slot = p.u32()?;
            let session = p.str()?;
            if run.live(slot)? {
                run.set_live(slot, false)?;
                delete(run, store, tag, session);
            } else {
                result(tag, ST_NOT_LIVE, 0);
            }
        }
        TAG_MEMORY_STORE => {
            let content = p.str()?;
            let tags = p.str()?;
            let keywords = p.str()?;
            let source = if p.u8()? == 0 {
                SOURCE_MANUAL
            } else {
                SOURCE_AUTO_LLM
            };
            let input = ItemInput::new(content)
                .tags(tags)
                .keywords(keywords)
                .source(source);
            if run.targets == MAX_TARGETS {
                return Err(fatal!("more memory stores than the target table holds"));
            }
            let now = run.tick();
            let (r, used) = engine!(run, store.memory_store(&input, now, false));
            let k = run.targets;
            run.targets += 1;
            match r {
                Ok(s) => {
                    let id = s.item.id().get();
                    targets()[k] = Target::Live(id);
                    result(tag, ST_OK, used);
                    out().u32(id);
                    out().u8(u8::from(!s.changed));
                }
                Err(e) => {
                    targets()[k] = Target::Failed;
                    fail(tag, used, &e);
                }
            }
        }
        TAG_MEMORY_RECALL => {
            let limit = p.u32()? as usize;
            let n = p.u16()? as usize;
            if n > MAX_LABELS {
                return Err(fatal!("{n} labels in one recall"));
            }
            let mut labels = [""; MAX_LABELS];
            for l in labels.iter_mut().take(n) {
                *l = p.str()?;
            }
            let labels = &labels[..n];
            let now = run.tick();
            let mut ids = Ids::new();
            let (r, used) = engine!(
                run,
                store.memory_recall(labels, limit, now, |i| ids.push(i.id().get()))
            );
            match r {
                Ok(_) => {
                    result(tag, ST_OK, used);
                    out().u32(ids.count);
                    out().u32(ids.crc.finalize());
                }
                Err(e) => fail(tag, used, &e),
            }
        }
        TAG_MEMORY_UPDATE => {
            let k = p.u32()? as usize;
            let content = p.str()?;
            let tags = p.str()?;
            let keywords = p.str()?;
            let Some(Target::Live(item)) = targets()[..run.targets].get(k).copied() else {
                result(tag, ST_SKIPPED, 0);
                return Ok(());
            };
            let patch = ItemInput::new(content).tags(tags).keywords(keywords);
            let now = run.tick();
            let (r, used) = engine!(run, store.memory_update(ItemId::new(item), &patch, now));
            match r {
                Ok(stored) => {
                    let newest = stored.map_or(item, |s| s.item.id().get());
                    retarget(run.targets, item, Target::Live(newest));
                    result(tag, ST_OK, used);
                    out().u32(newest);
                }
                Err(Error::NotFound) => {
                    retarget(run.targets, item, Target::Evicted);
                    result(tag, ST_EVICTED, used);
                }
                Err(e) => fail(tag, used, &e),
            }
        }
        TAG_MEMORY_FORGET => {
            let k = p.u32()? as usize;
            let Some(Target::Live(item)) = targets()[..run.targets].get(k).copied() else {
                result(tag, ST_SKIPPED, 0);
                return Ok(());
            };
            let (r, used) = engine!(run, store.memory_forget(ItemId::new(item)));
            match r {
                Ok(_) => {
                    retarget(run.targets, item, Target::Forgotten);
                    result(tag, ST_OK, used);
                }
                Err(Error::NotFound) => {
                    retarget(run.targets, item, Target::Evicted);
                    result(tag, ST_EVICTED, used);
                }
                Err(e) => fail(tag, used, &e),
            }
        }
        TAG_MEMORY_LIST => {
            let mut ids = Ids::new();
            let (r, used) = engine!(run, store.memory_list(|i| ids.push(i.id().get())));
            match r {
                Ok(_) => {
                    result(tag, ST_OK, used);
                    out().u32(ids.count);
                    out().u32(ids.crc.finalize());
                }
                Err(e) => fail(tag, used, &e),
            }
        }
        TAG_PROFILE_WRITE => {
            let d = doc(p.u8()?)?;
            let body = p.str()?;
            let (r, used) = engine!(run, store.profile_write(d, body));
            match r {
                Ok(()) => result(tag, ST_OK, used),
                Err(e) => fail(tag, used, &e),
            }
        }
        TAG_PROFILE_READ => {
            let d = doc(p.u8()?)?;
            // SAFETY: single core; the only reference to HIST while it lives.
            let buf = unsafe { &mut *addr_of_mut!(HIST) };
            let (r, used) = engine!(
                run,
                (|| -> Result<Result<usize, usize>, E> {
                    let len = store.profile_len(d)?;
                    if len > buf.len() {
                        return Ok(Err(len));
                    }
                    store.profile_read(d, &mut buf[..len]).map(Ok)
                })()
            );
            match r {
                Ok(Ok(n)) => {
                    let mut dg = Digester::new();
                    dg.record(0, 0, &buf[..n]);
                    result(tag, ST_OK, used);
                    dg.write(out());
                }
                Ok(Err(len)) => failed(
                    tag,
                    used,
                    format_args!("profile of {len} B, the firmware's buffer holds {HIST_BUF}"),
                ),
                Err(e) => fail(tag, used, &e),
            }
        }
        TAG_MEMORY_CLEAR => {
            let (r, used) = engine!(run, store.memory_clear());
            match r {
                Ok(()) => result(tag, ST_OK, used),
                Err(e) => fail(tag, used, &e),
            }
        }
        t => return Err(fatal!("unknown op tag {t}")),
    }
    Ok(())
}

/// Drops the store and mounts the same flash again.
#[inline(never)]
fn remount(run: &mut Run) {
    let slot = store_slot();
    if slot.is_none() {
        let why = run.lost.as_ref().map_or(&b"no store"[..], |m| m.as_bytes());
        let why = core::str::from_utf8(why).unwrap_or("store lost");
        failed(TAG_REMOUNT, 0, format_args!("store lost: {why}"));
        return;
    }
    *slot = None;
    let config = run.config;
    let (r, used) = engine!(
        run,
        S::mount_into(
            slot,
            RamFlash::take(),
            take_work(),
            config,
            MountMode::ExistingOnly
        )
    );
    match r {
        Ok(()) => result(TAG_REMOUNT, ST_OK, used),
        Err(e) => {
            run.lost = Some(Msg::of(format_args!("mount failed: {e}")));
            failed(TAG_REMOUNT, used, format_args!("mount failed: {e}"));
        }
    }
}

/// Formats the blank partition.
#[inline(never)]
fn format(run: &mut Run) {
    let config = run.config;
    let (r, used) = engine!(
        run,
        S::format_into(store_slot(), RamFlash::take(), take_work(), config)
    );
    match r {
        Ok(()) => result(TAG_FORMAT, ST_OK, used),
        Err(e) => {
            run.lost = Some(Msg::of(format_args!("format failed: {e}")));
            fail(TAG_FORMAT, used, &e);
        }
    }
}

fn summary(run: &Run, ops_crc: u32) {
    let st = flash::stats();
    let sectors = flash::sectors();
    let (mut replay_erases, mut erased_sectors) = (0u32, 0u32);
    for s in 0..sectors {
        let (_, since) = flash::erase_count(s);
        replay_erases += since;
        erased_sectors += u32::from(since > 0);
    }
    let o = out();
    o.u8(TAG_SUMMARY);
    for v in [
        ops_crc,
        (sectors * flash::SECTOR) as u32,
        sectors as u32,
        (core::mem::size_of::<S>() - core::mem::size_of::<RamFlash>()) as u32,
        (stack::top() - stack::limit()) as u32,
        stack::MARGIN as u32,
        (stack::top() - run.deepest_sp) as u32,
        u32::from(run.overflow),
        st.violations,
        st.erases,
        replay_erases,
        erased_sectors,
        run.ops_done,
        STREAM_BUF as u32,
        run.stream_need as u32,
    ] {
        o.u32(v);
    }
    o.u64(st.programmed);
    o.u64(st.erased);
    o.u64(st.read);
    for s in 0..sectors {
        o.u32(flash::erase_count(s).0);
    }
}

fn replay() -> Result<(), Fatal> {
    let input = File::open_read(b"ops.bin\0").map_err(|_| fatal!("cannot open ops.bin"))?;
    let output = File::create(b"results.bin\0").map_err(|_| fatal!("cannot create results.bin"))?;
    out().attach(output);
    let mut h = [0u8; HEADER_BYTES];
    input
        .read_exact(&mut h)
        .map_err(|_| fatal!("ops.bin: no header"))?;
    if &h[..8] != MAGIC || le32(&h, 8) != VERSION {
        return Err(fatal!("ops.bin: not an op stream of version {VERSION}"));
    }
    let field = |i: usize| le32(&h, 12 + 4 * i);
    let (size, write, erase, limit) = (field(0), field(1), field(2), field(3));
    let (slots, stores, max_op, op_count, ops_crc) =
        (field(4), field(5), field(6), field(7), field(8));
    if write as usize != flash::WORD || erase as usize != flash::SECTOR {
        return Err(fatal!(
            "geometry {write} B / {erase} B; this flash has 4 B words and 4 KiB sectors"
        ));
    }
    if slots as usize > MAX_SLOTS || stores as usize > MAX_TARGETS || max_op as usize > OP_BUF {
        return Err(fatal!("ops.bin is beyond the firmware's tables"));
    }
    flash::selftest().map_err(|e| fatal!("{e}"))?;
    stack::selftest().map_err(|e| fatal!("{e}"))?;
    flash::init(size as usize).map_err(|e| fatal!("{e}"))?;
    let mut run = Run {
        config: Config {
            session_size_limit_bytes: limit,
            ..Config::default()
        },
        lost: None,
        clock: 0,
        targets: 0,
        slots: slots as usize,
        deepest_sp: stack::top(),
        overflow: false,
        ops_done: 0,
        stream_need: 0,
    };
    hprintln!(
        "clawmem-qemu: flash and stack self-tests passed; {} ops, partition {} B ({} sectors \
         of 4 KiB), session limit {} B, stack {} B at {:#x}, Store<_, {}> {} B",
        op_count,
        size,
        size / 4096,
        limit,
        stack::top() - stack::limit(),
        stack::limit(),
        MAX_SESSIONS,
        core::mem::size_of::<S>()
    );
    format(&mut run);
    flash::mark_format_done();
    // SAFETY: single core; the only reference to OPS.
    let ops = unsafe { &mut *addr_of_mut!(OPS) };
    loop {
        let mut frame = [0u8; 5];
        input
            .read_exact(&mut frame)
            .map_err(|_| fatal!("ops.bin ends before its end op"))?;
        let tag = frame[0];
        let len = le32(&frame, 1) as usize;
        if len > OP_BUF {
            return Err(fatal!("op of {len} B, the buffer holds {OP_BUF}"));
        }
        input
            .read_exact(&mut ops[..len])
            .map_err(|_| fatal!("ops.bin: op {} truncated", run.ops_done))?;
        if tag == TAG_END {
            break;
        }
        run_op(&mut run, tag, &ops[..len])?;
        run.ops_done += 1;
        if out().failed {
            return Err(fatal!("writing results.bin failed"));
        }
    }
    if run.ops_done != op_count {
        return Err(fatal!(
            "{} ops read, the header says {op_count}",
            run.ops_done
        ));
    }
    summary(&run, ops_crc);
    out().flush();
    if out().failed || output.close().is_err() {
        return Err(fatal!("writing results.bin failed"));
    }
    let _ = input.close();
    hprintln!(
        "clawmem-qemu: done, {} ops; deepest engine call site {} B below the stack top{}",
        run.ops_done,
        stack::top() - run.deepest_sp,
        if run.overflow { "; STACK OVERFLOW" } else { "" }
    );
    Ok(())
}

#[entry]
fn main() -> ! {
    match replay() {
        Ok(()) => debug::exit(debug::EXIT_SUCCESS),
        Err(Fatal(m)) => {
            out().flush();
            hprintln!(
                "clawmem-qemu: error: {}",
                core::str::from_utf8(m.as_bytes()).unwrap_or("?")
            );
            debug::exit(debug::EXIT_FAILURE);
        }
    }
    loop {
        cortex_m::asm::bkpt();
    }
}

#[panic_handler]
fn panic(info: &core::panic::PanicInfo<'_>) -> ! {
    hprintln!("clawmem-qemu: panic: {}", info);
    debug::exit(debug::EXIT_FAILURE);
    loop {
        cortex_m::asm::bkpt();
    }
}

#[exception]
unsafe fn HardFault(ef: &ExceptionFrame) -> ! {
    hprintln!("clawmem-qemu: hard fault: {:?}", ef);
    debug::exit(debug::EXIT_FAILURE);
    loop {
        cortex_m::asm::bkpt();
    }
}
