//! clawmem on an ESP32-C3: the store sits on the chip's SPI flash, in the
//! data partition labelled `clawmem` (partitions.csv), through esp-storage's
//! `FlashStorage` ([`partition::PartitionFlash`]).
//!
//! At each boot it mounts the store (formatting a blank partition), then
//! runs one pass of the operations an agent firmware uses, as
//! examples/firmware does: a chat turn (gate, prompt, the user's message,
//! memory tools, the final answer), the history read back and walked,
//! `/session new work`, profiles, the session list, a deletion, and the
//! upkeep (space, check, maintenance). It prints a line or so per operation
//! on the console (USB-Serial-JTAG or UART0, whichever is attached) and then
//! spends idle time on maintenance. What it wrote is there at the next boot:
//! the session's record count grows from boot to boot until the session is
//! compacted.
//!
//! No heap: the engine's work area and the store are statics, built in
//! place.
#![no_std]
#![no_main]

mod partition;

use core::fmt::{self, Write as _};
use core::ptr::addr_of_mut;

use clawmem::chat::{self, ChatKey};
use clawmem::memory::{ItemInput, RecallReply, SOURCE_AUTO_LLM, SOURCE_MANUAL};
use clawmem::profile::ProfileDoc;
use clawmem::{BackendFormat, Config, Error, Gate, MountMode, Record, RecordType, Store, Work};
use esp_hal::time::{Duration, Instant};
use esp_println::{println, Printer};
use esp_storage::FlashStorage;

use partition::{PartitionError, PartitionFlash};

// The application descriptor the ESP-IDF second-stage bootloader checks.
esp_bootloader_esp_idf::esp_app_desc!();

/// The partition's label in partitions.csv.
const PARTITION_LABEL: &str = "clawmem";

/// Sessions the RAM table holds (`Store`'s const generic).
const SESSIONS: usize = 32;

/// The store with its work area lent from a static.
type Engine = Store<PartitionFlash, SESSIONS, &'static mut Work>;

type Result<T> = core::result::Result<T, Error<PartitionError>>;

/// The engine's work area; all zeros, so it lands in `.bss`.
static mut WORK: Work = Work::new();
/// The engine state, built in place by `mount_into`.
static mut STORE: Option<Engine> = None;

/// The buffer history is read into.
const HISTORY_BYTES: usize = 4 * 1024;

/// A session is compacted after a completed turn once it is over this, so
/// that its history (bodies plus 6 bytes a record) fits [`HISTORY_BYTES`].
const SESSION_LIMIT_BYTES: u32 = 3 * 1024;

/// Where the console messages come from (a chat channel on a real agent).
const CHANNEL: &str = "serial";
const CHAT_ID: &str = "esp32c3";

/// A session outside the chat maps, written and deleted at each boot.
const SCRATCH_SESSION: &str = "esp32c3:scratch";

/// Seconds since the epoch at boot: there is no RTC time here.
const BOOT_EPOCH: u32 = 1_750_000_000;

fn config() -> Config {
    Config {
        session_size_limit_bytes: SESSION_LIMIT_BYTES,
        ..Config::default()
    }
}

#[esp_hal::main]
fn main() -> ! {
    let peripherals = esp_hal::init(esp_hal::Config::default());
    println!("clawmem on ESP32-C3");

    let flash = FlashStorage::new(peripherals.FLASH);
    let flash = match PartitionFlash::find(flash, PARTITION_LABEL) {
        Ok(flash) => flash,
        Err(e) => {
            println!(
                "partition '{PARTITION_LABEL}': {e} (flash with --partition-table partitions.csv)"
            );
            park()
        }
    };
    println!(
        "partition '{PARTITION_LABEL}' at {:#x}, {} KiB",
        flash.base(),
        embedded_storage::nor_flash::ReadNorFlash::capacity(&flash) / 1024
    );

    // SAFETY: taken once, here, before anything else runs: single core, no
    // interrupt handler touches them, and `main` never returns, so these
    // are the only references to the two statics for the program's life.
    let (slot, work) = unsafe { (&mut *addr_of_mut!(STORE), &mut *addr_of_mut!(WORK)) };
    if let Err(e) = Engine::mount_into(slot, flash, work, config(), MountMode::FormatIfBlank) {
        // Not formatted: foreign data in the partition (erase it to give it
        // to clawmem). Anything else: keep the image for inspection.
        println!("mount: {e}");
        park()
    }
    let Some(store) = slot.as_mut() else {
        println!("mount left no store");
        park()
    };
    let report = store.mount_report();
    println!(
        "mounted: {} sector headers, {} chunks scanned, from checkpoint {}",
        report.sector_headers, report.chunks_scanned, report.from_checkpoint
    );

    if let Err(e) = run(store) {
        println!("error: {e}");
    }

    // Idle: a few maintenance steps every 10 s (they return at once when
    // nothing is left to do ahead of the next writes).
    loop {
        if let Err(e) = store.maintain(4) {
            println!("maintain: {e}");
        }
        let start = Instant::now();
        while start.elapsed() < Duration::from_secs(10) {
            core::hint::spin_loop();
        }
    }
}

/// One pass of every operation, on the real flash.
fn run(store: &mut Engine) -> Result<()> {
    let now = BOOT_EPOCH + Instant::now().duration_since_epoch().as_secs() as u32;
    let backend = BackendFormat::OpenAiCompatible;

    // The chat's current session (`default` until a `/session` command).
    let Ok(chat) = ChatKey::new(CHANNEL, CHAT_ID) else {
        println!("{}", chat::MISSING_CHAT_CONTEXT_TEXT);
        return Ok(());
    };
    let session = store.chat_sessions(&chat)?.current_session_id();
    let session = session.as_str();

    if let Gate::Blocked(warning) = store.gate(Some(session)) {
        println!("gate: {warning}");
        return Ok(());
    }

    // Profiles, then the memory part of the system prompt.
    store.profile_write(ProfileDoc::User, "# User\n\n- Talks to an ESP32-C3.\n")?;
    let mut profile = [0u8; 256];
    let n = store.profile_read(ProfileDoc::User, &mut profile)?;
    println!("profile {}: {n} B", ProfileDoc::User);
    let mut prompt = Count(0);
    store.write_memory_prompt(&mut prompt)?;
    store.memory_stage_begin();
    println!("memory prompt: {} B", prompt.0);

    // The user's message.
    store.append(
        session,
        &[Record {
            kind: RecordType::User,
            format: backend,
            body: br#"{"role":"user","content":"I like green tea. I live in Lyon."}"#,
        }],
        false,
    )?;

    // The memory tools the model calls.
    memory_tools(store, now)?;

    // The final answer completes the turn (the session may be compacted).
    let appended = store.append(
        session,
        &[Record {
            kind: RecordType::AssistantFinal,
            format: backend,
            body: br#"{"role":"assistant","content":"Noted: green tea, Lyon."}"#,
        }],
        true,
    )?;
    println!(
        "turn in {session}: compacted {}, blocked {}",
        appended.compacted, appended.blocked
    );
    let _ = store.write_memory_stage_note(&mut Printer);
    println!();

    // The history, read back and walked.
    let mut buf = [0u8; HISTORY_BYTES];
    match store.history(session, backend, &mut buf) {
        Ok(history) => {
            let (mut records, mut bytes) = (0usize, 0usize);
            for record in history.iter() {
                records += 1;
                bytes += record.body.len();
            }
            println!(
                "history: {records} records, {bytes} B, {} damaged",
                history.damaged_records()
            );
        }
        Err(Error::BufferTooSmall { needed }) => println!("history needs {needed} B"),
        Err(e) => return Err(e),
    }
    if let Some(info) = store.session_info(session)? {
        println!(
            "session_info: {} records, {} B",
            info.records, info.size_bytes
        );
    }

    // `/session new work`, as a chat message.
    if let Some(args) = chat::session_command_args("/session new work") {
        match chat::parse_session_command(args) {
            Ok(command) => match store.session_command(&chat, &command)? {
                Ok(Some(reply)) => println!("/session new work: {reply}"),
                Ok(None) => {}
                Err(refusal) => println!("/session new work: {refusal}"),
            },
            Err(usage) => println!("{usage}"),
        }
    }

    // A session outside the chat maps, listed, then deleted.
    store.append(
        SCRATCH_SESSION,
        &[Record {
            kind: RecordType::User,
            format: backend,
            body: br#"{"role":"user","content":"scratch"}"#,
        }],
        false,
    )?;
    let count = store.for_each_session(|id, info| {
        println!("  {id}: {} records, {} B", info.records, info.size_bytes);
    })?;
    store.delete_session(SCRATCH_SESSION)?;
    println!("{count} sessions; deleted {SCRATCH_SESSION}");

    // Upkeep.
    let space = store.space();
    println!(
        "space: {}/{} sectors used ({} reserved, {} B each)",
        space.used_sectors, space.sectors, space.reserve_sectors, space.sector_bytes
    );
    println!("check: {} records", store.check()?);
    let m = store.maintain(8)?;
    println!("maintain: {} steps, done {}", m.steps, m.done);
    Ok(())
}

/// store, recall, update, get, list, forget, and the replies in ESP-Claw's
/// JSON.
fn memory_tools(store: &mut Engine, now: u32) -> Result<()> {
    let tea = ItemInput::new("User likes green tea")
        .tags("drinks")
        .source(SOURCE_AUTO_LLM);
    let tea = store.memory_store(&tea, now, false)?;
    let city = ItemInput::new("User lives in Lyon")
        .tags("home")
        .source(SOURCE_MANUAL);
    let city = store.memory_store(&city, now, true)?;
    println!(
        "memory_store: {} (changed {}), {} (replaced {})",
        tea.item.id(),
        tea.changed,
        city.item.id(),
        city.replaced
    );

    let _ = Printer.write_str("recall json: ");
    match store.write_memory_recall_json(&mut Printer, &["home"], 0, now)? {
        RecallReply::Items(n) => println!(" ({n} items)"),
        RecallReply::InvalidLabel => println!(" (no such label)"),
    }
    let recalled = store.memory_recall(&["drinks"], 8, now, |item| {
        println!("  recalled {}: {}", item.id(), item.content());
    })?;

    let patch = ItemInput::new("User likes oolong tea");
    let Some(updated) = store.memory_update(tea.item.id(), &patch, now)? else {
        println!("memory_update: {} is gone", tea.item.id());
        return Ok(());
    };
    let item = store.memory_get(updated.item.id())?;
    println!(
        "memory_update: {} -> {}: {}",
        tea.item.id(),
        item.id(),
        item.content()
    );

    let listed = store.memory_list(|_| {})?;
    let mut json = Count(0);
    let in_json = store.write_memory_list_json(&mut json)?;
    let mut md = Count(0);
    store.write_memory_md(&mut md)?;
    println!(
        "memory: {recalled} recalled, {listed} listed, list json {in_json} items in {} B, MEMORY.md {} B",
        json.0, md.0
    );

    // The update's item is forgotten again: the store keeps one memory
    // (the city) however often the board boots.
    let forgotten = store.memory_forget(updated.item.id())?;
    println!("memory_forget: {}", forgotten.id());
    Ok(())
}

/// Counts what would be written (the prompt, `MEMORY.md`, the list JSON).
struct Count(usize);

impl fmt::Write for Count {
    fn write_str(&mut self, s: &str) -> fmt::Result {
        self.0 += s.len();
        Ok(())
    }
}

/// Stops here for good (the state stays for a debugger or the console).
fn park() -> ! {
    loop {
        core::hint::spin_loop();
    }
}

#[panic_handler]
fn panic(info: &core::panic::PanicInfo) -> ! {
    println!("panic: {info}");
    // A few seconds for the console to show it, then a reset: no unwinding.
    let start = Instant::now();
    while start.elapsed() < Duration::from_secs(3) {
        core::hint::spin_loop();
    }
    esp_hal::system::software_reset()
}
