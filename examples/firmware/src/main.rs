//! Example firmware for a Cortex-M4F (STM32L476-like) that links the whole
//! clawmem API, so that `scripts/firmware-size.sh` can report what the engine
//! costs in flash and RAM.
//!
//! It runs an agent loop against clawmem the way ESP-Claw's memory system is
//! used: `/session` commands per chat, the request gate, the system prompt
//! (profiles, memory catalog, history), appends of a user message, a tool
//! call, its result and the final answer (a completed turn, which may
//! compact), long-term memory tools (store, recall, update, forget, list,
//! catalog, `MEMORY.md`, stage note), summary compaction, profile updates,
//! and a maintenance step (check, space, counters, deletions, memory
//! compaction, scrub, clear, importing an ESP-Claw session log).
//!
//! There is no LLM and no radio: messages come from a fixed inbox and the
//! model's answers are canned. Every input goes through
//! [`core::hint::black_box`], and the store's answers depend on flash
//! contents the compiler cannot see, so nothing is optimized away and every
//! public operation stays in the image. Output goes to [`Console`], which
//! stands in for a UART.
//!
//! Every clawmem call goes through [`api`], one `#[inline(never)]` forward
//! per operation, so that the size report can tell the engine's code from
//! the example's. The flash driver ([`flash`]) is an untested example for
//! the STM32L4's internal flash; it holds this crate's `unsafe`, apart from
//! taking the flash back after a failed mount.
#![no_std]
#![no_main]

mod api;
mod flash;

use core::fmt::{self, Write};
use core::hint::black_box;
use core::mem::size_of;
use core::panic::PanicInfo;

#[cfg(feature = "chat")]
use clawmem::chat::{self, SessionCommand};
#[cfg(feature = "memory")]
use clawmem::memory::{ItemInput, MemoryAction, RecallReply, SOURCE_AUTO_LLM, SOURCE_MANUAL};
use clawmem::naming::SessionFileKind;
#[cfg(feature = "profiles")]
use clawmem::profile::ProfileDoc;
use clawmem::{
    BackendFormat, Config, Error, Gate, MemoryConfig, MountMode, Record, RecordType, Store, Work,
};
use cortex_m_rt::entry;
use embedded_storage::nor_flash::ReadNorFlash;

use flash::{FlashError, InternalFlash};

/// Sessions the RAM table holds (`Store`'s const generic).
pub const SESSIONS: usize = 32;

/// The engine with its state: what the firmware keeps in RAM for clawmem,
/// with the engine's work area ([`Work`]) lent from a static of its own.
pub type Engine = Store<InternalFlash, SESSIONS, &'static mut Work>;

/// The engine's work area, `size_of::<Work>()`, for the same report.
#[used]
#[no_mangle]
pub static CLAWMEM_WORK_BYTES: u32 = size_of::<Work>() as u32;

/// The engine's working RAM, lent to the store for good.
static mut WORK: Work = Work::new();

/// The work area. Called once per mount attempt: a failed mount drops the
/// store, and with it the only reference to the area.
fn take_work() -> &'static mut Work {
    // SAFETY: single-core, no interrupts use it, and each reference is
    // handed to a mount that keeps it in the store, and the store is
    // dropped (a failed mount, `into_flash`) before the next call.
    unsafe { &mut *core::ptr::addr_of_mut!(WORK) }
}

type Result<T> = core::result::Result<T, Error<FlashError>>;

/// `size_of::<Engine>()` on the target, for scripts/firmware-size.sh (which
/// reads it back from the ELF).
#[used]
#[no_mangle]
pub static CLAWMEM_ENGINE_STATE_BYTES: u32 = size_of::<Engine>() as u32;

/// The `Store` const generic, for the same report.
#[used]
#[no_mangle]
pub static CLAWMEM_SESSIONS: u32 = SESSIONS as u32;

/// Session size limit: ESP-Claw's is 150 KiB, more than this part's RAM can
/// read back as history; 16 KiB fits the work buffer below.
const SESSION_LIMIT_BYTES: u32 = 16 * 1024;

/// The work buffer: history reads (the session limit, plus 6 bytes of
/// header per record instead of a newline), profile reads, and the imports.
const WORK_BYTES: usize = 24 * 1024;

/// ESP-Claw's cap on a user message, in code points.
const MAX_MESSAGE_CHARS: usize = 4096;

/// ESP-Claw's directory of the profile documents, as the prompt names it.
#[cfg(feature = "profiles")]
const PROFILE_DIR: &str = "/spiffs/memory";

/// The firmware's recovery copies of the profiles (ESP-Claw's
/// `/system/.recovery/memory/*.md`), seeded on first boot.
#[cfg(feature = "profiles")]
const RECOVERY_PROFILES: [(ProfileDoc, &str); 3] = [
    (ProfileDoc::Soul, "# Soul\n\nHelpful, brief, honest.\n"),
    (ProfileDoc::Identity, "# Identity\n\n- Name: Claw\n"),
    (ProfileDoc::User, "# User\n"),
];

fn config() -> Config {
    Config {
        session_size_limit_bytes: SESSION_LIMIT_BYTES,
        memory: MemoryConfig {
            // ESP-Claw's (and clawmem's) maximum of active memory items.
            max_items: 128,
            ..MemoryConfig::default()
        },
        ..Config::default()
    }
}

/// Stands in for a UART: counts what would be sent.
struct Console {
    bytes: usize,
}

impl Write for Console {
    fn write_str(&mut self, s: &str) -> fmt::Result {
        self.bytes = self.bytes.wrapping_add(black_box(s).len());
        Ok(())
    }
}

/// Where messages come from (a chat channel in a real device).
const INBOX: [&str; 8] = [
    "Hello! I like green tea in the morning.",
    "/session new work",
    "What did I say I like to drink?",
    "/session list",
    "/session switch default_01",
    "Please remember that I moved to Lyon.",
    "/session delete work",
    "/session frobnicate",
];

#[entry]
fn main() -> ! {
    let Some(flash) = InternalFlash::take() else {
        halt()
    };
    // The store is built in place, in a static, never on the stack: the
    // slot is all zeros, in .bss.
    let Some(slot) = cortex_m::singleton!(: Option<Engine> = None) else {
        halt()
    };
    match api::mount(slot, flash, take_work(), config(), MountMode::FormatIfBlank) {
        Ok(()) => {}
        // Foreign data (an earlier firmware's file system, say): this
        // example claims the partition.
        Err(Error::NotFormatted) => {
            // SAFETY: the only other handle was consumed by the failed mount.
            let flash = unsafe { InternalFlash::steal() };
            if api::format(slot, flash, take_work(), config()).is_err() {
                halt()
            }
        }
        // The part failed, or the image is damaged or from a newer clawmem:
        // keep it for inspection rather than format.
        Err(_) => halt(),
    };
    let Some(store) = slot.as_mut() else { halt() };
    let Some(work) = cortex_m::singleton!(: [u8; WORK_BYTES] = [0; WORK_BYTES]) else {
        halt()
    };
    let mut console = Console { bytes: 0 };
    let out = &mut console;
    // First boot: the profiles are seeded from the firmware's recovery
    // copies, never over what the user changed (ESP-Claw does the same).
    #[cfg(feature = "profiles")]
    for (doc, body) in RECOVERY_PROFILES {
        if let Err(e) = api::profile_write_if_absent(store, doc, black_box(body)) {
            let _ = writeln!(out, "profile seed error: {e}");
        }
    }
    let report = api::mount_report(store);
    let _ = writeln!(
        out,
        "clawmem: {} sector headers, {} chunks scanned, checkpoint {}",
        report.sector_headers, report.chunks_scanned, report.from_checkpoint
    );

    let mut now: u32 = 1_750_000_000;
    let mut turn: usize = 0;
    loop {
        let Some(store) = slot.as_mut() else { halt() };
        let message = black_box(INBOX[turn % INBOX.len()]);
        if let Err(e) = handle_message(store, work, out, "telegram", "42", message, now) {
            let _ = writeln!(out, "error: {e}");
        }
        if turn % 16 == 15 {
            if let Err(e) = maintenance(store, work, out, now) {
                let _ = writeln!(out, "maintenance error: {e}");
            }
        }
        // Before a firmware update: unmount, hand the flash to the updater,
        // and mount again if the update is called off.
        if turn % 1024 == 1023 {
            let Some(store) = slot.take() else { halt() };
            let flash = api::into_flash(store);
            if api::mount(slot, flash, take_work(), config(), MountMode::ExistingOnly).is_err() {
                halt()
            }
        }
        turn = turn.wrapping_add(1);
        now = now.wrapping_add(black_box(60));
    }
}

fn halt() -> ! {
    loop {
        cortex_m::asm::wfi();
    }
}

#[panic_handler]
fn panic(_: &PanicInfo) -> ! {
    loop {
        core::hint::spin_loop();
    }
}

/// One incoming chat message: a `/session` command, or an agent turn.
fn handle_message(
    store: &mut Engine,
    work: &mut [u8],
    out: &mut Console,
    channel: &str,
    chat_id: &str,
    message: &str,
    now: u32,
) -> Result<()> {
    #[cfg(not(feature = "chat"))]
    {
        // Without chat session maps: one session per chat, named by it.
        let _ = (channel, chat_id);
        agent_turn(store, work, out, "telegram:42", message, now)
    }
    #[cfg(feature = "chat")]
    handle_chat_message(store, work, out, channel, chat_id, message, now)
}

/// [`handle_message`] with `/session` commands and a session map per chat.
#[cfg(feature = "chat")]
fn handle_chat_message(
    store: &mut Engine,
    work: &mut [u8],
    out: &mut Console,
    channel: &str,
    chat_id: &str,
    message: &str,
    now: u32,
) -> Result<()> {
    let Ok(chat) = api::chat_key(channel, chat_id) else {
        let _ = out.write_str(chat::MISSING_CHAT_CONTEXT_TEXT);
        return Ok(());
    };
    if let Some(args) = api::session_command_args(message) {
        match api::parse_session_command(args) {
            Ok(SessionCommand::List) => {
                let map = api::chat_sessions(store, &chat)?;
                let _ = api::render_list(&map, out);
            }
            Ok(command) => match api::session_command(store, &chat, &command) {
                Ok(Ok(Some(reply))) => {
                    let _ = writeln!(out, "{reply}");
                }
                Ok(Ok(None)) => {}
                Ok(Err(refusal)) => {
                    let _ = writeln!(out, "{refusal}");
                }
                Err(_) => {
                    let _ = writeln!(out, "{}", chat::STORAGE_ERROR_TEXT);
                }
            },
            Err(usage) => {
                let _ = writeln!(out, "{usage}");
            }
        }
        return Ok(());
    }
    let map = api::chat_sessions(store, &chat)?;
    let session = api::current_session_id(&map);
    agent_turn(store, work, out, session.as_str(), message, now)
}

/// An agent turn in `session`: the gate, the prompt, the user's message,
/// a memory tool call and the final answer.
fn agent_turn(
    store: &mut Engine,
    work: &mut [u8],
    out: &mut Console,
    session: &str,
    message: &str,
    now: u32,
) -> Result<()> {
    if let Gate::Blocked(warning) = api::gate(store, Some(session)) {
        let _ = out.write_str(warning);
        return Ok(());
    }
    let backend = BackendFormat::OpenAiCompatible;

    // The system prompt: profiles, the memory catalog, then the history.
    #[cfg(feature = "profiles")]
    for doc in ProfileDoc::PROMPT_ORDER {
        let n = api::profile_read(store, doc, work)?;
        if let Ok(contents) = core::str::from_utf8(&work[..n]) {
            let _ = api::write_prompt_section(doc, out, PROFILE_DIR, contents);
        }
    }
    #[cfg(feature = "memory")]
    {
        api::write_memory_prompt(store, out)?;
        api::memory_stage_begin(store);
    }
    match api::history(store, session, backend, work) {
        Ok(history) => {
            for record in history.iter() {
                let _ = writeln!(out, "{:?}: {} B", record.kind, record.body.len());
            }
            if history.damaged_records() > 0 {
                let _ = writeln!(
                    out,
                    "{} damaged records left out",
                    history.damaged_records()
                );
            }
        }
        Err(Error::NotFound) => {}
        Err(Error::BufferTooSmall { needed }) => {
            let _ = writeln!(out, "history needs {needed} B");
        }
        Err(e) => return Err(e),
    }
    // The same history streamed a record at a time, as a firmware writes
    // it into the request body: the length is known before the first byte.
    match api::history_stream(store, session, backend, work) {
        Ok(mut stream) => {
            let _ = writeln!(out, "Content-Length: {}", stream.total_bytes());
            while let Some(record) = api::history_next(store, &mut stream, work)? {
                let _ = writeln!(out, "{:?}: {} B", record.kind, record.body.len());
            }
        }
        Err(Error::NotFound) => {}
        Err(Error::BufferTooSmall { needed }) => {
            let _ = writeln!(out, "a history record needs {needed} B");
        }
        Err(e) => return Err(e),
    }

    // The user's message, normalized and wrapped as ESP-Claw does.
    let (text_buf, body_buf) = work.split_at_mut(WORK_BYTES / 2);
    let (text, _) = api::normalize_to_str(message.as_bytes(), MAX_MESSAGE_CHARS, text_buf);
    let Some(n) = user_json(text, body_buf) else {
        return Err(Error::InvalidInput("message too long"));
    };
    api::append(
        store,
        session,
        &[Record {
            kind: RecordType::User,
            format: backend,
            body: &body_buf[..n],
        }],
        false,
    )?;

    // The model asks for a memory tool; run it and record both.
    let tool_call = black_box(
        br#"{"role":"assistant","content":null,"tool_calls":[{"id":"call_1","type":"function","function":{"name":"memory_store","arguments":"{\"content\":\"User likes green tea\",\"tags\":\"drinks\"}"}}]}"#
            .as_slice(),
    );
    #[cfg(feature = "memory")]
    let tool_result = memory_tools(store, out, now)?;
    #[cfg(not(feature = "memory"))]
    let tool_result: &[u8] = {
        let _ = now;
        br#"[{"role":"tool","tool_call_id":"call_1","content":"no memory in this build"}]"#
    };
    let tool_result = black_box(tool_result);
    api::append(
        store,
        session,
        &[
            Record {
                kind: RecordType::AssistantTool,
                format: backend,
                body: tool_call,
            },
            Record {
                kind: RecordType::ToolResult,
                format: backend,
                body: tool_result,
            },
        ],
        false,
    )?;

    // The final answer completes the turn: the session may be compacted.
    let raw = black_box(
        br#"{"role":"assistant","content":[{"type":"text","text":"Noted: green tea."}]}"#
            .as_slice(),
    );
    let (text_buf, body_buf) = work.split_at_mut(WORK_BYTES / 2);
    let final_body = match api::extract_final_text(raw, text_buf) {
        Ok(len) => match core::str::from_utf8(&text_buf[..len]) {
            Ok(answer) => {
                let _ = writeln!(out, "{answer}");
                match api::write_text_message(answer, body_buf) {
                    Ok(len) => &body_buf[..len],
                    Err(_) => raw,
                }
            }
            Err(_) => raw,
        },
        Err(_) => raw,
    };
    let appended = api::append(
        store,
        session,
        &[Record {
            kind: RecordType::AssistantFinal,
            format: backend,
            body: final_body,
        }],
        true,
    )?;
    if appended.compacted {
        let _ = writeln!(out, "session compacted");
    }
    if appended.blocked {
        let _ = out.write_str(clawmem::turns::SESSION_BLOCKED_WARNING);
    }
    #[cfg(feature = "memory")]
    if api::write_memory_stage_note(store, out) == Ok(true) {
        let _ = out.write_char('\n');
    }

    // Ameba-Claw's summary compaction once a session grows large.
    if let Some(info) = api::session_info(store, session)? {
        if info.size_bytes > SESSION_LIMIT_BYTES / 2 {
            let summary = black_box(
                br#"{"role":"user","content":"[summary of the earlier conversation]"}"#.as_slice(),
            );
            let summary = Record {
                kind: RecordType::User,
                format: backend,
                body: summary,
            };
            if api::compact_with_summary(store, session, 4, summary)? {
                let _ = writeln!(out, "summarized");
            }
        }
    }
    Ok(())
}

/// The long-term memory tools the model can call. Returns the tool result
/// record (a JSON array of tool messages).
#[cfg(feature = "memory")]
fn memory_tools(store: &mut Engine, out: &mut Console, now: u32) -> Result<&'static [u8]> {
    let tea = ItemInput::new(black_box("User likes green tea in the morning"))
        .tags(black_box("drinks, morning"))
        .keywords(black_box("green tea"))
        .source(SOURCE_AUTO_LLM);
    let stored = api::memory_store(store, &tea, now, false)?;
    let city = ItemInput::new(black_box("User lives in Lyon"))
        .tags(black_box("home"))
        .source(SOURCE_MANUAL);
    let home = api::memory_store(store, &city, now, true)?;
    let _ = writeln!(
        out,
        "stored {} (changed {}), {} (replaced {})",
        stored.item.id(),
        stored.changed,
        home.item.id(),
        home.replaced
    );

    // The replies the model gets, in ESP-Claw's JSON.
    let _ = api::write_memory_reply_json(out, MemoryAction::Store, &stored.item, stored.changed);
    let _ = writeln!(out);
    match api::write_memory_recall_json(store, out, &[black_box("home")], 0, now)? {
        RecallReply::Items(n) => {
            let _ = writeln!(out, " ({n} recalled)");
        }
        RecallReply::InvalidLabel => {
            let _ = writeln!(out, " (no such label)");
        }
    }

    let mut recalled = 0usize;
    match api::memory_recall(store, &[black_box("drinks")], 8, now, &mut |item| {
        recalled += 1;
        let _ = writeln!(out, "- {} {}", item.id(), item.content());
    }) {
        Ok(_) => {}
        Err(Error::UnknownLabel(e)) => {
            let _ = writeln!(out, "{e}");
        }
        Err(e) => return Err(e),
    }

    let patch = ItemInput::new(black_box("User likes oolong tea in the morning"));
    if let Some(updated) = api::memory_update(store, stored.item.id(), &patch, now)? {
        let newest = api::memory_newest(store, stored.item.id())?;
        let item = api::memory_get(store, newest)?;
        let _ = writeln!(
            out,
            "{} -> {}: {}",
            stored.item.id(),
            updated.item.id(),
            item.content()
        );
    }
    if let Some(id) = api::item_id(black_box("mem-1")) {
        match api::memory_forget(store, id) {
            Ok(item) => {
                let _ = writeln!(out, "forgot {}", item.id());
            }
            Err(Error::NotFound) => {}
            Err(e) => return Err(e),
        }
    }
    Ok(if recalled > 0 {
        br#"[{"role":"tool","tool_call_id":"call_1","content":"stored"}]"#
    } else {
        br#"[{"role":"tool","tool_call_id":"call_1","content":"nothing recalled"}]"#
    })
}

/// Background upkeep: consistency check, space and wear counters, memory
/// views and compaction, profile edits, session clean-up, privacy scrub,
/// and importing a session log from an ESP-Claw device.
fn maintenance(store: &mut Engine, work: &mut [u8], out: &mut Console, now: u32) -> Result<()> {
    let records = api::check(store)?;
    let space = api::space(store);
    let written = api::written_bytes(store);
    let limit = api::config(store).session_size_limit_bytes;
    let _ = writeln!(
        out,
        "check: {records} records; {}/{} sectors used ({} reserved, {} B each); {} B of batches; limit {limit} B",
        space.used_sectors,
        space.sectors,
        space.reserve_sectors,
        space.sector_bytes,
        written.session_batches,
    );
    // Diagnostics: the partition, its first word as the driver reads it,
    // and the sessions damage at rest cost since the mount.
    let capacity = ReadNorFlash::capacity(api::flash(store));
    let mut first = [0u8; 4];
    let _ = ReadNorFlash::read(api::flash_mut(store), 0, &mut first);
    let _ = writeln!(
        out,
        "partition {capacity} B, first word {:#010x}; {} damaged sessions dropped",
        u32::from_le_bytes(first),
        api::damaged_sessions_dropped(store),
    );

    // Memory views.
    #[cfg(feature = "memory")]
    memory_views(store, out)?;

    // Profiles: the user asked the agent to remember a preference.
    #[cfg(feature = "profiles")]
    {
        let user = ProfileDoc::User;
        let len = api::profile_len(store, user)?;
        let n = api::profile_read(store, user, work)?;
        let _ = writeln!(out, "{user}: {len} B ({n} read)");
        api::profile_write(store, user, black_box("# User\n\n- Prefers oolong tea.\n"))?;
    }
    // Idle time while the model thinks: erase ahead, a due checkpoint, a
    // collection step, so that the next appends neither erase nor collect.
    // A budget of steps, or a check before each (here: a few at most).
    let m = api::maintain(store, 4)?;
    let mut left = 8u32;
    let more = api::maintain_while(store, &mut || {
        left = left.saturating_sub(1);
        left > 0
    })?;
    let _ = writeln!(
        out,
        "idle: {} + {} steps, done {}",
        m.steps, more.steps, more.done
    );
    maintenance_rest(store, work, out, now, space)
}

/// The memory views and compaction of [`maintenance`].
#[cfg(feature = "memory")]
fn memory_views(store: &mut Engine, out: &mut Console) -> Result<()> {
    api::write_memory_list_json(store, out)?;
    let _ = writeln!(out);
    let n = api::memory_list(store, &mut |item| {
        let _ = writeln!(out, "{} [{}] {}", item.id(), item.tags(), item.content());
    })?;
    let labels = api::memory_catalog(store, &mut |label, refs| {
        let _ = writeln!(out, "{label} ({refs})");
    })?;
    let _ = writeln!(
        out,
        "{n} items ({}), {labels} labels, {} damaged reads",
        api::memory_len(store)?,
        api::memory_damaged_reads(store)
    );
    api::write_memory_md(store, out)?;
    api::memory_compact(store)
}

/// The rest of [`maintenance`]: sessions, privacy, import.
fn maintenance_rest(
    store: &mut Engine,
    work: &mut [u8],
    out: &mut Console,
    now: u32,
    space: clawmem::Space,
) -> Result<()> {
    // Sessions: list them, delete the largest when space runs low.
    let mut largest = (0u32, [0u8; clawmem::MAX_SESSION_ID_BYTES], 0usize);
    api::for_each_session(store, &mut |id, info| {
        let file = api::session_file_name(id, SessionFileKind::Log);
        let _ = writeln!(
            out,
            "{} {} records, {} B",
            file.as_str(),
            info.records,
            info.size_bytes
        );
        if info.size_bytes > largest.0 && id.len() <= largest.1.len() {
            largest.0 = info.size_bytes;
            largest.1[..id.len()].copy_from_slice(id.as_bytes());
            largest.2 = id.len();
        }
    })?;
    if space.used_sectors * 4 > space.sectors * 3 {
        if let Ok(id) = core::str::from_utf8(&largest.1[..largest.2]) {
            api::delete_session(store, id)?;
        }
    }
    if api::session_count(store) == SESSIONS {
        let n = api::clear_sessions(store)?;
        let _ = writeln!(out, "cleared {n} sessions");
    }
    #[cfg(feature = "chat")]
    {
        let mut chats = 0;
        api::for_each_chat_sessions(store, &mut |map| chats += map.len())?;
        let _ = writeln!(out, "{chats} chat sessions");
    }

    // Privacy: the user asked to erase one memory for good, or all.
    #[cfg(feature = "memory")]
    if let Some(id) = api::item_id(black_box("mem-2")) {
        match api::memory_forget_scrub(store, id) {
            Ok(()) | Err(Error::NotFound) => {}
            Err(e) => return Err(e),
        }
    }
    #[cfg(feature = "memory")]
    if black_box(now).is_multiple_of(86_400) {
        api::memory_clear(store)?;
    }
    #[cfg(not(feature = "memory"))]
    let _ = now;

    // An ESP-Claw memory item received from an old device keeps its times
    // and access count.
    #[cfg(feature = "memory")]
    {
        let item = ItemInput::new(black_box("User's cat is called Miso"))
            .tags(black_box("pets"))
            .source(SOURCE_MANUAL);
        let old = black_box(1_700_000_000);
        let stored = api::memory_import(store, &item, old, old, black_box(3))?;
        let _ = writeln!(out, "imported {}", stored.item.id());
    }

    // An ESP-Claw session (`.log` and `.log.idx`) received from an old
    // device, for instance over USB, into the work buffer.
    let (log, index) = work.split_at_mut(WORK_BYTES / 2);
    let log_len = black_box(0usize).min(log.len());
    let index_len = black_box(0usize).min(index.len());
    import_espclaw_session(
        store,
        out,
        "import:espclaw",
        &log[..log_len],
        &index[..index_len],
    )
}

/// Imports one ESP-Claw session whose index matches its log: appends its
/// records. An index that does not match is refused here; rebuilding it from
/// the log is host work (clawmem's `rebuild` feature, `clawmem-sim import`),
/// kept out of the firmware.
fn import_espclaw_session(
    store: &mut Engine,
    out: &mut Console,
    session: &str,
    log: &[u8],
    index: &[u8],
) -> Result<()> {
    if let Err(e) = api::validate_index(index, log.len() as u64) {
        let _ = writeln!(out, "cannot import: {e}; rebuild the index on a host");
        return Ok(());
    }
    let mut result = Ok(());
    api::index_entries(index, log.len() as u64, &mut |entry| {
        let start = entry.offset as usize;
        let Some(body) = log.get(start..start + entry.body_len() as usize) else {
            return;
        };
        if result.is_ok() {
            let record = Record {
                kind: entry.record_type,
                format: entry.backend_format,
                body,
            };
            let completed = entry.record_type == RecordType::AssistantFinal;
            result = api::append(store, session, &[record], completed).map(|_| ());
        }
    });
    result
}

/// `{"role":"user","content":"<text>"}` with `text` escaped as cJSON does.
fn user_json(text: &str, out: &mut [u8]) -> Option<usize> {
    struct Buf<'a> {
        out: &'a mut [u8],
        at: usize,
    }
    impl Write for Buf<'_> {
        fn write_str(&mut self, s: &str) -> fmt::Result {
            let end = self.at.checked_add(s.len()).ok_or(fmt::Error)?;
            self.out
                .get_mut(self.at..end)
                .ok_or(fmt::Error)?
                .copy_from_slice(s.as_bytes());
            self.at = end;
            Ok(())
        }
    }
    let mut b = Buf { out, at: 0 };
    b.write_str(r#"{"role":"user","content":""#).ok()?;
    for c in text.chars() {
        match c {
            '"' => b.write_str("\\\""),
            '\\' => b.write_str("\\\\"),
            '\n' => b.write_str("\\n"),
            '\r' => b.write_str("\\r"),
            '\t' => b.write_str("\\t"),
            c if (c as u32) < 0x20 => write!(b, "\\u{:04x}", c as u32),
            c => b.write_char(c),
        }
        .ok()?;
    }
    b.write_str(r#""}"#).ok()?;
    Some(b.at)
}
