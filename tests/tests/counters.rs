//! Pins the exact flash cost of a fixed workload, so that any change in
//! write, erase or read cost shows up as a failing test (update the numbers
//! deliberately, with the reason in the commit).

use clawmem::memory::ItemInput;
use clawmem::profile::ProfileDoc;
use clawmem::{BackendFormat, Config, MountMode, Record, RecordType, Store};
use clawmem_sim::{Esp32Flash, Preset, SimFlash, Stats};

fn workload() -> (Stats, Stats, u64) {
    let flash = Esp32Flash::new(SimFlash::new(Preset::Esp32.model(256 * 1024).unwrap())).unwrap();
    let config = Config {
        session_size_limit_bytes: 8 * 1024,
        ..Config::default()
    };
    let mut store = Store::<_, 16>::format(flash, config).unwrap();
    store.flash_mut().flash_mut().reset_counters();
    let mut user_bytes = 0u64;
    for turn in 0..120u32 {
        let id = format!("chat:telegram:{}:default_01", turn % 3);
        let user = format!("{{\"role\":\"user\",\"content\":\"question {turn}\"}}");
        let tool = format!("{{\"role\":\"assistant\",\"tool_calls\":[{{\"id\":\"c{turn}\",\"function\":{{\"name\":\"ls\",\"arguments\":\"{{}}\"}}}}]}}");
        let result = format!(
            "[{{\"role\":\"tool\",\"tool_call_id\":\"c{turn}\",\"content\":\"{}\"}}]",
            "file.txt ".repeat((turn % 20) as usize)
        );
        let answer = format!("{{\"role\":\"assistant\",\"content\":\"answer {turn}\"}}");
        let rec = |kind, body: &str| Record {
            kind,
            format: BackendFormat::OpenAiCompatible,
            body: body.as_bytes().to_vec().leak(),
        };
        store
            .append(&id, &[rec(RecordType::User, &user)], false)
            .unwrap();
        store
            .append(
                &id,
                &[
                    rec(RecordType::AssistantTool, &tool),
                    rec(RecordType::ToolResult, &result),
                ],
                false,
            )
            .unwrap();
        let out = store
            .append(&id, &[rec(RecordType::AssistantFinal, &answer)], true)
            .unwrap();
        user_bytes += (user.len() + tool.len() + result.len() + answer.len()) as u64;
        if out.blocked || turn % 40 == 39 {
            store.delete_session(&id).unwrap();
        }
        if turn % 10 == 0 {
            let c = format!("the user asked question {turn}");
            store
                .memory_store(&ItemInput::new(&c).tags("questions"), turn, false)
                .unwrap();
            user_bytes += c.len() as u64;
        }
        if turn % 30 == 0 {
            let doc = format!("# User\n\n- turns so far: {turn}\n");
            store.profile_write(ProfileDoc::User, &doc).unwrap();
            user_bytes += doc.len() as u64;
        }
    }
    let mut buf = vec![0u8; 64 * 1024];
    store
        .history(
            "chat:telegram:1:default_01",
            BackendFormat::OpenAiCompatible,
            &mut buf,
        )
        .unwrap();
    let mut flash = store.into_flash();
    let before_mount = flash.flash().stats().clone();
    flash.flash_mut().reset_counters();
    let store = Store::<_, 16>::mount(flash, config, MountMode::ExistingOnly).unwrap();
    let mount = store.flash().flash().stats().clone();
    (before_mount, mount, user_bytes)
}

#[test]
fn flash_cost_of_a_fixed_workload_is_pinned() {
    let (run, mount, user_bytes) = workload();
    println!(
        "user {user_bytes} B; programmed {} B in {} calls; erased {} sectors; read {} B; mount read {} B in {} calls",
        run.programmed_bytes, run.program_calls, run.erases, run.read_bytes, mount.read_bytes, mount.read_calls
    );
    assert_eq!(
        (
            run.programmed_bytes,
            run.program_calls,
            run.erases,
            run.read_bytes
        ),
        match clawmem::FORMAT_VERSION {
            10 => PINNED_RUN_FORMAT_10,
            _ => PINNED_RUN,
        },
        "the flash cost of the workload changed"
    );
    assert_eq!(
        (mount.read_bytes, mount.read_calls, mount.programmed_bytes),
        match clawmem::FORMAT_VERSION {
            10 => PINNED_MOUNT_FORMAT_10,
            _ => PINNED_MOUNT,
        }
    );
}

// Reads: each read of a base also reads the 10 bytes after its entries (a
// record count damaged at rest puts CRCs there) and the headers of a base's
// continuation chunks (its length, to check the count against). Format 6's
// item encoding (version 2) writes 352 B less for the workload's memory
// items, and reads of them are shorter by as much each time. Format 7's
// plain puts and packed access records write 88 B less in 3 calls fewer,
// and reads of them are shorter (its longer memory chain writes no index
// in this workload either way).
const PINNED_RUN: (u64, u64, u64, u64) = (58448, 621, 14, 224462);
// Format 10 (feature `sector-table`, unreleased) reads 4,883 B more: it
// counts the bytes that die per sector where they die (`store/dead.rs`),
// so a deletion reads the session's chain and its base's entries again,
// and a profile written over the chunk headers of its old version
// (3,698 B); and its full checkpoints record the counts (half a byte a
// sector and 4 B, with the 8 B waste part always): 12 B more written in
// 5 more program calls, and 1,185 B more read. Its deltas carry the
// bytes counted dead since the checkpoint before them (version 8, 8 B and
// 4 B a sector, with the waste part): 20 B more written in 1 call fewer
// (the chunks fall elsewhere), 31 B more read.
const PINNED_RUN_FORMAT_10: (u64, u64, u64, u64) = (58480, 625, 14, 229376);
// The mount reads the header of the sector after the head too (24 B), to
// find a head whose own header rotted, and checks the CRC of each document
// written since the checkpoint before it replaces the older version, and
// reads 10 bytes more of each base (see `PINNED_RUN`). The sectors inside
// the ring are checked for a wipe by the first 12 bytes of their header
// (magic, version, sequence), not all 24. The scan reads the 12 bytes at the
// head's sound end once: a chunk there whose sequence skips one means the
// chunk before it tore and a mount wrote on after it (format 5). Format 6's
// shorter memory items move where the workload's later chunks fall: the
// mount reads 93 B more in 6 calls fewer; format 7's shorter memory
// records move them again: 427 B less in 3 calls fewer.
const PINNED_MOUNT: (u64, u64, u64) = (6702, 619, 0);
// Format 10 (feature `sector-table`): its full checkpoints are longer (the
// dead bytes per sector and the waste part, always), which the mount reads
// and which moves where the workload's later chunks fall: 672 B more in 17
// calls more. Its deltas' dead bytes: 18 B more in 13 calls fewer.
const PINNED_MOUNT_FORMAT_10: (u64, u64, u64) = (7392, 623, 0);
