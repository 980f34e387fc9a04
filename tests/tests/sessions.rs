//! Session behaviour: ESP-Claw's compaction rules, blocking and the request
//! gate, summary compaction, the mixed-backend filter, input errors, a full
//! store, formats and versions.

use clawmem::{
    BackendFormat, Config, Error, Gate, MountMode, Record, RecordType, Store, Work, FORMAT_VERSION,
};
use clawmem_sim::{Esp32Flash, Preset, SimFlash};

type S = Store<Esp32Flash, 16>;

const OA: BackendFormat = BackendFormat::OpenAiCompatible;
const AN: BackendFormat = BackendFormat::AnthropicCompatible;

fn flash(sectors: usize) -> Esp32Flash {
    Esp32Flash::new(SimFlash::new(Preset::Esp32.model(4096 * sectors).unwrap())).unwrap()
}

fn config(limit: u32) -> Config {
    Config {
        session_size_limit_bytes: limit,
        ..Config::default()
    }
}

fn rec(kind: RecordType, format: BackendFormat, body: &str) -> Record<'_> {
    Record {
        kind,
        format,
        body: body.as_bytes(),
    }
}

fn history<const N: usize>(
    store: &mut Store<Esp32Flash, N>,
    id: &str,
    current: BackendFormat,
) -> Result<Vec<(RecordType, String)>, Error<clawmem_sim::SimError>> {
    let mut buf = vec![0u8; 256 * 1024];
    let h = store.history(id, current, &mut buf)?;
    Ok(h.iter()
        .map(|r| (r.kind, String::from_utf8(r.body.to_vec()).unwrap()))
        .collect())
}

/// Every session of `want` reads back its bodies, in order, and the store
/// checks out.
fn histories_match<const N: usize>(
    store: &mut Store<Esp32Flash, N>,
    want: &std::collections::BTreeMap<String, Vec<String>>,
) {
    for (id, bodies) in want {
        let got: Vec<_> = history(store, id, OA)
            .unwrap()
            .into_iter()
            .map(|r| r.1)
            .collect();
        assert_eq!(&got, bodies, "{id}");
    }
    store.check().unwrap();
}

fn remount(store: S, cfg: Config) -> S {
    S::mount(store.into_flash(), cfg, MountMode::ExistingOnly).unwrap()
}

/// One tool turn: user, assistant_tool, tool_result, final.
fn tool_turn(store: &mut S, id: &str, n: usize, pad: usize) -> clawmem::Appended {
    let u = format!("{{\"role\":\"user\",\"content\":\"q{n}\"}}");
    let t = format!(
        "{{\"role\":\"assistant\",\"tool_calls\":[{{\"id\":\"c{n}\",\"pad\":\"{}\"}}]}}",
        "t".repeat(pad)
    );
    let r = format!(
        "[{{\"role\":\"tool\",\"tool_call_id\":\"c{n}\",\"content\":\"{}\"}}]",
        "r".repeat(pad)
    );
    let f = format!("{{\"role\":\"assistant\",\"content\":\"a{n}\"}}");
    store
        .append(id, &[rec(RecordType::User, OA, &u)], false)
        .unwrap();
    store
        .append(
            id,
            &[
                rec(RecordType::AssistantTool, OA, &t),
                rec(RecordType::ToolResult, OA, &r),
            ],
            false,
        )
        .unwrap();
    store
        .append(id, &[rec(RecordType::AssistantFinal, OA, &f)], true)
        .unwrap()
}

#[test]
fn turn_aware_compaction_keeps_users_finals_and_the_newest_tool_turn() {
    let cfg = config(4000);
    let mut store = S::format(flash(64), cfg).unwrap();
    let mut compacted_at = None;
    for n in 0..10 {
        let out = tool_turn(&mut store, "chat:c", n, 300);
        assert!(!out.blocked);
        if out.compacted && compacted_at.is_none() {
            compacted_at = Some(n);
        }
    }
    let first = compacted_at.expect("compaction ran");
    let mut store = remount(store, cfg);
    let h = history(&mut store, "chat:c", OA).unwrap();
    // Every user and final record survives, in order.
    let users: Vec<_> = h
        .iter()
        .filter(|r| r.0 == RecordType::User)
        .map(|r| r.1.clone())
        .collect();
    let finals: Vec<_> = h
        .iter()
        .filter(|r| r.0 == RecordType::AssistantFinal)
        .map(|r| r.1.clone())
        .collect();
    assert_eq!(users.len(), 10);
    assert_eq!(finals.len(), 10);
    for n in 0..10 {
        assert!(users[n].contains(&format!("q{n}")));
        assert!(finals[n].contains(&format!("a{n}")));
    }
    // Tool records: those of the newest completed tool turn are always kept;
    // those of turns before the last compaction are gone.
    assert!(h
        .iter()
        .any(|r| r.0 == RecordType::AssistantTool && r.1.contains("c9")));
    assert!(h
        .iter()
        .any(|r| r.0 == RecordType::ToolResult && r.1.contains("c9")));
    assert!(
        !h.iter().any(|r| r.1.contains("\"c0\"")),
        "compaction after turn {first} dropped turn 0's tools"
    );
    let info = store.session_info("chat:c").unwrap().unwrap();
    assert!(info.size_bytes <= 4000);
    assert!(!info.blocked);
    store.check().unwrap();
}

#[test]
fn compaction_rewrites_no_kept_body() {
    let cfg = config(4000);
    let mut store = S::format(flash(64), cfg).unwrap();
    let mut n = 0;
    let (written, info_before) = loop {
        let before = store.flash().flash().stats().programmed_bytes;
        let info_before = store.session_info("chat:w").unwrap();
        let out = tool_turn(&mut store, "chat:w", n, 300);
        n += 1;
        if out.compacted {
            break (
                store.flash().flash().stats().programmed_bytes - before,
                info_before.unwrap(),
            );
        }
        assert!(n < 20, "no compaction");
    };
    let info = store.session_info("chat:w").unwrap().unwrap();
    // The last turn's bodies plus a 10+4-byte index entry per kept record,
    // and a little framing: far less than rewriting the kept history.
    let turn_bytes = 4 * 40 + 2 * 300;
    let index_bytes = 14 * info.records as u64 + 200;
    println!(
        "compaction: {} records / {} B kept of {} B; turn + compaction wrote {written} B",
        info.records, info.size_bytes, info_before.size_bytes
    );
    assert!(
        written < (turn_bytes + index_bytes + 200) as u64,
        "wrote {written} B"
    );
}

#[test]
fn an_incomplete_last_turn_is_kept_whole() {
    let cfg = config(3000);
    let mut store = S::format(flash(64), cfg).unwrap();
    for n in 0..3 {
        tool_turn(&mut store, "chat:i", n, 300);
    }
    // A turn whose batch completes without a final answer: its tool records
    // must all stay.
    store
        .append(
            "chat:i",
            &[rec(
                RecordType::User,
                OA,
                "{\"role\":\"user\",\"content\":\"last\"}",
            )],
            false,
        )
        .unwrap();
    let big = format!(
        "{{\"role\":\"assistant\",\"tool_calls\":[{{\"id\":\"z\",\"pad\":\"{}\"}}]}}",
        "z".repeat(400)
    );
    store
        .append("chat:i", &[rec(RecordType::AssistantTool, OA, &big)], true)
        .unwrap();
    let h = history(&mut store, "chat:i", OA).unwrap();
    assert!(
        h.iter().any(|r| r.1.contains("\"z\"")),
        "the incomplete turn's tool call was dropped"
    );
    assert_eq!(h.last().unwrap().0, RecordType::AssistantTool);
}

#[test]
fn a_session_still_over_its_limit_is_blocked_until_deleted() {
    let cfg = config(1000);
    let mut store = S::format(flash(64), cfg).unwrap();
    let mut blocked = false;
    for n in 0..20 {
        let u = format!(
            "{{\"role\":\"user\",\"content\":\"{}{n}\"}}",
            "u".repeat(100)
        );
        store
            .append("chat:b", &[rec(RecordType::User, OA, &u)], false)
            .unwrap();
        let out = store
            .append(
                "chat:b",
                &[rec(
                    RecordType::AssistantFinal,
                    OA,
                    "{\"role\":\"assistant\",\"content\":\"ok\"}",
                )],
                true,
            )
            .unwrap();
        if out.blocked {
            blocked = true;
            break;
        }
    }
    assert!(blocked);
    let before = history(&mut store, "chat:b", OA).unwrap();
    assert!(matches!(
        store.append("chat:b", &[rec(RecordType::User, OA, "{}")], false),
        Err(Error::Blocked)
    ));
    let warning = "Session history is still too large after compaction. Please create a new conversation by sending the command `/session new [name]`, and delete the old session by `/session delete <name>` due to limited storage space.";
    assert_eq!(store.gate(Some("chat:b")), Gate::Blocked(warning));
    assert_eq!(store.gate(Some("chat:other")), Gate::Pass);
    assert_eq!(store.gate(None), Gate::Pass);
    // The block survives a remount; the history was left as it was.
    let mut store = remount(store, cfg);
    assert_eq!(store.gate(Some("chat:b")), Gate::Blocked(warning));
    assert_eq!(history(&mut store, "chat:b", OA).unwrap(), before);
    store.delete_session("chat:b").unwrap();
    assert_eq!(store.gate(Some("chat:b")), Gate::Pass);
    store
        .append(
            "chat:b",
            &[rec(
                RecordType::User,
                OA,
                "{\"role\":\"user\",\"content\":\"again\"}",
            )],
            false,
        )
        .unwrap();
    assert_eq!(history(&mut store, "chat:b", OA).unwrap().len(), 1);
}

#[test]
fn summary_compaction_replaces_old_turns_atomically() {
    let cfg = config(20_000);
    let mut store = S::format(flash(64), cfg).unwrap();
    for n in 0..8 {
        tool_turn(&mut store, "chat:s", n, 50);
    }
    let summary = rec(
        RecordType::User,
        OA,
        "{\"role\":\"user\",\"content\":\"[summary of turns 0-3]\"}",
    );
    assert!(store.compact_with_summary("chat:s", 4, summary).unwrap());
    let mut store = remount(store, cfg);
    let h = history(&mut store, "chat:s", OA).unwrap();
    assert_eq!(
        h[0].1,
        "{\"role\":\"user\",\"content\":\"[summary of turns 0-3]\"}"
    );
    assert_eq!(h.len(), 1 + 4 * 4);
    assert!(h[1].1.contains("q4"));
    // Too few turns to replace: nothing happens.
    assert!(!store.compact_with_summary("chat:s", 4, summary).unwrap());
    store.check().unwrap();
}

#[test]
fn mixed_backend_filter_drops_foreign_tools_and_keeps_final_text() {
    let cfg = config(20_000);
    let mut store = S::format(flash(64), cfg).unwrap();
    store
        .append(
            "chat:m",
            &[rec(
                RecordType::User,
                AN,
                "{\"role\":\"user\",\"content\":\"hi\"}",
            )],
            false,
        )
        .unwrap();
    store
        .append(
            "chat:m",
            &[
                rec(RecordType::AssistantTool, AN, "{\"role\":\"assistant\",\"content\":[{\"type\":\"tool_use\",\"id\":\"t1\",\"name\":\"ls\",\"input\":{}}]}"),
                rec(RecordType::ToolResult, AN, "[{\"type\":\"tool_result\",\"tool_use_id\":\"t1\",\"content\":\"a.txt\"}]"),
            ],
            false,
        )
        .unwrap();
    store
        .append(
            "chat:m",
            &[rec(RecordType::AssistantFinal, AN, "{\"role\":\"assistant\",\"content\":[{\"type\":\"text\",\"text\":\"Found a.txt\"}]}")],
            true,
        )
        .unwrap();
    // Same backend: everything as stored.
    assert_eq!(history(&mut store, "chat:m", AN).unwrap().len(), 4);
    assert_eq!(
        history(&mut store, "chat:m", BackendFormat::Unknown)
            .unwrap()
            .len(),
        4
    );
    // Another backend: tools dropped, the final answer reduced to its text.
    let h = history(&mut store, "chat:m", OA).unwrap();
    assert_eq!(h.len(), 2);
    assert_eq!(h[0].0, RecordType::User);
    assert_eq!(
        h[1],
        (
            RecordType::AssistantFinal,
            "{\"role\":\"assistant\",\"content\":\"Found a.txt\"}".to_string()
        )
    );
}

#[test]
fn bad_input_gets_a_clear_error_and_changes_nothing() {
    let cfg = Config {
        max_session_id_bytes: 16,
        ..config(4000)
    };
    let mut store = S::format(flash(64), cfg).unwrap();
    store
        .append("chat:x", &[rec(RecordType::User, OA, "{}")], false)
        .unwrap();
    let image = store.flash().flash().image();
    assert!(matches!(
        store.append("", &[rec(RecordType::User, OA, "{}")], false),
        Err(Error::InvalidInput(_))
    ));
    assert!(matches!(
        store.append(
            "chat:01234567890123456789",
            &[rec(RecordType::User, OA, "{}")],
            false
        ),
        Err(Error::TooLarge {
            what: "session id",
            limit: 16,
            ..
        })
    ));
    assert!(matches!(
        store.append("chat:x", &[], false),
        Err(Error::InvalidInput(_))
    ));
    assert!(matches!(
        store.append("chat:x", &[rec(RecordType::User, OA, "")], false),
        Err(Error::InvalidInput(_))
    ));
    let many = vec![rec(RecordType::User, OA, "{}"); 17];
    assert!(matches!(
        store.append("chat:x", &many, false),
        Err(Error::TooLarge { limit: 16, .. })
    ));
    // Larger than the session limit is stored (see
    // claw_memory_session_append_records_stores_any_batch_then_blocks);
    // larger than the 256 KiB partition is refused.
    let huge = "h".repeat(300_000);
    assert!(matches!(
        store.append("chat:x", &[rec(RecordType::User, OA, &huge)], false),
        Err(Error::TooLarge { .. })
    ));
    let mut small = [0u8; 4];
    assert_eq!(
        store.history("chat:x", OA, &mut small).unwrap_err(),
        Error::BufferTooSmall { needed: 8 }
    );
    let mut buf = [0u8; 8];
    assert_eq!(store.history("chat:x", OA, &mut buf).unwrap().len(), 1);
    assert!(matches!(
        store.history("chat:none", OA, &mut buf),
        Err(Error::NotFound)
    ));
    assert!(matches!(
        store.delete_session("chat:none"),
        Err(Error::NotFound)
    ));
    assert_eq!(
        store.flash().flash().image(),
        image,
        "refused calls wrote nothing"
    );
}

/// The RAM table is a working set: a store with a table of 4 holds 40
/// sessions. Those the table lets go stay on flash, in the checkpoints'
/// directory, and are found again when used: appends, reads, the list of
/// sessions, deletes and a remount see all 40. Before, the fifth session
/// was refused (`TooManySessions { max: 4 }`).
#[test]
fn sessions_beyond_the_table_live_on_flash() {
    type T = Store<Esp32Flash, 4>;
    let cfg = config(4000);
    let mut store = T::format(flash(128), cfg).unwrap();
    let mut want: std::collections::BTreeMap<String, Vec<String>> = Default::default();
    // Round-robin appends over 40 sessions, so that each is let go and
    // found again many times, with checkpoints (full and delta) between.
    for n in 0..400 {
        let id = format!("chat:beyond:{}", (n * 7) % 40);
        let body = format!("{{\"n\":{n},\"pad\":\"{}\"}}", "b".repeat(n % 90));
        store
            .append(&id, &[rec(RecordType::User, OA, &body)], n % 3 == 0)
            .unwrap();
        want.entry(id).or_default().push(body);
    }
    let check = |store: &mut T, want: &std::collections::BTreeMap<String, Vec<String>>| {
        assert_eq!(store.session_count(), want.len());
        let mut listed = Vec::new();
        let lost = store
            .for_each_session(|id, info| listed.push((id.to_string(), info.records)))
            .unwrap();
        assert_eq!(lost, 0);
        listed.sort();
        let expected: Vec<_> = want
            .iter()
            .map(|(id, b)| (id.clone(), b.len() as u32))
            .collect();
        assert_eq!(listed, expected, "every session is listed once");
        histories_match(store, want);
    };
    check(&mut store, &want);
    let mut store = T::mount(store.into_flash(), cfg, MountMode::ExistingOnly).unwrap();
    check(&mut store, &want);
    // Deleting sessions the table does not hold, and more than a delta
    // checkpoint names (the next checkpoint is a full one).
    for k in (0..40).step_by(3) {
        let id = format!("chat:beyond:{k}");
        store.delete_session(&id).unwrap();
        want.remove(&id);
        assert_eq!(
            store.session_info(&id).unwrap(),
            None,
            "a deleted session is not found again"
        );
    }
    check(&mut store, &want);
    let mut store = T::mount(store.into_flash(), cfg, MountMode::ExistingOnly).unwrap();
    check(&mut store, &want);
    assert_eq!(store.clear_sessions().unwrap(), want.len());
    want.clear();
    check(&mut store, &want);
    let mut store = T::mount(store.into_flash(), cfg, MountMode::ExistingOnly).unwrap();
    check(&mut store, &want);
}

/// More deletions since the full checkpoint than RAM names (48), while the
/// running store holds every session in its table but a mount would not:
/// the full checkpoint lists more sessions than the table holds, and the
/// running store brought the cold ones in when they were read. The running
/// store used to drop the deletions it had named (nothing is cold, so the
/// directory is not read) and write no checkpoint; a mount, whose table
/// holds what the checkpoint gave it, could not name the next deletion and
/// found the deleted session again in the full checkpoint (the fill
/// workload at 1 MiB, `torture --fill --size 1M --seed 7`, clean run: "should
/// not exist (resurrected?)", and then a session whose oldest sector is
/// outside the ring). A deletion that RAM cannot name now always writes a
/// full checkpoint first.
#[test]
fn a_deletion_past_what_ram_names_is_not_undone_by_a_mount() {
    type T = Store<Esp32Flash, 8>;
    let cfg = config(4000);
    let mut store = T::format(flash(128), cfg).unwrap();
    let mut want: std::collections::BTreeMap<String, Vec<String>> = Default::default();
    let mut add = |store: &mut T, id: &str, n: usize| {
        let body = format!("{{\"n\":{n}}}");
        store
            .append(id, &[rec(RecordType::User, OA, &body)], true)
            .unwrap();
        want.entry(id.to_string()).or_default().push(body);
    };
    // Twelve sessions, then all eight in the table changed again, so that
    // the thirteenth writes a full checkpoint that lists the twelve.
    for k in 0..12 {
        add(&mut store, &format!("chat:d{k}"), k);
    }
    for k in 4..12 {
        add(&mut store, &format!("chat:d{k}"), 100 + k);
    }
    add(&mut store, "chat:d12", 12);
    // Room in the table, and the cold sessions read: the running store now
    // holds every session.
    for k in 8..13 {
        store.delete_session(&format!("chat:d{k}")).unwrap();
        want.remove(&format!("chat:d{k}"));
    }
    for k in 0..8 {
        history(&mut store, &format!("chat:d{k}"), OA).unwrap();
    }
    store.delete_session("chat:d7").unwrap();
    want.remove("chat:d7");
    // Short sessions made and deleted, past the 48 deletions RAM names.
    for k in 0..50 {
        let id = format!("chat:t{k}");
        store
            .append(&id, &[rec(RecordType::User, OA, "{}")], true)
            .unwrap();
        store.delete_session(&id).unwrap();
    }
    store.delete_session("chat:d6").unwrap();
    want.remove("chat:d6");
    let mut store = T::mount(store.into_flash(), cfg, MountMode::ExistingOnly).unwrap();
    assert_eq!(
        store.session_info("chat:d6").unwrap(),
        None,
        "chat:d6 is back"
    );
    assert_eq!(store.session_count(), want.len());
    histories_match(&mut store, &want);
}

#[test]
fn a_full_store_loses_nothing_and_still_reads_deletes_and_compacts() {
    let cfg = config(4000);
    let mut store = S::format(flash(24), cfg).unwrap();
    let mut appended = Vec::new();
    let mut full = false;
    'outer: for n in 0..10_000 {
        for s in 0..12 {
            let id = format!("chat:f{s}");
            let body = format!("{{\"n\":{n},\"pad\":\"{}\"}}", "f".repeat(200));
            match store.append(&id, &[rec(RecordType::User, OA, &body)], false) {
                Ok(_) => appended.push((id, body)),
                Err(Error::Full { .. }) => {
                    full = true;
                    break 'outer;
                }
                Err(Error::TooManySessions { .. }) => break,
                Err(e) => panic!("{e:?}"),
            }
        }
    }
    assert!(full);
    let mut store = remount(store, cfg);
    for s in 0..12 {
        let id = format!("chat:f{s}");
        let want: Vec<_> = appended
            .iter()
            .filter(|a| a.0 == id)
            .map(|a| a.1.clone())
            .collect();
        let got: Vec<_> = history(&mut store, &id, OA)
            .unwrap()
            .into_iter()
            .map(|r| r.1)
            .collect();
        assert_eq!(got, want, "{id}");
    }
    store.check().unwrap();
    // Compaction still works on a full store (it may use the maintenance
    // reserve that appends may not touch): one user record per turn, so a
    // summary replaces turns.
    let summary = rec(RecordType::User, OA, "{\"summary\":true}");
    assert!(store.compact_with_summary("chat:f11", 2, summary).unwrap());
    // Deleting frees room: after deleting some sessions, appends work again.
    let mut deleted = 0;
    loop {
        store.delete_session(&format!("chat:f{deleted}")).unwrap();
        deleted += 1;
        match store.append(
            "chat:new",
            &[rec(RecordType::User, OA, "{\"again\":1}")],
            false,
        ) {
            Ok(_) => break,
            Err(Error::Full { .. }) => assert!(
                deleted < 6,
                "still full after deleting {deleted} of 12 sessions"
            ),
            Err(e) => panic!("{e:?}"),
        }
    }
    println!("appends work again after deleting {deleted} of 12 sessions");
    store.check().unwrap();
    let mut store = remount(store, cfg);
    for s in deleted..12 {
        if s == 11 {
            continue; // summarized above
        }
        let id = format!("chat:f{s}");
        let want: Vec<_> = appended
            .iter()
            .filter(|a| a.0 == id)
            .map(|a| a.1.clone())
            .collect();
        let got: Vec<_> = history(&mut store, &id, OA)
            .unwrap()
            .into_iter()
            .map(|r| r.1)
            .collect();
        assert_eq!(got, want, "{id}");
    }
}

#[test]
fn blank_foreign_and_newer_images() {
    let cfg = config(4000);
    // Blank: refused unless formatting is allowed.
    assert!(matches!(
        S::mount(flash(16), cfg, MountMode::ExistingOnly),
        Err(Error::NotFormatted)
    ));
    let store = S::mount(flash(16), cfg, MountMode::FormatIfBlank).unwrap();
    assert_eq!(store.session_count(), 0);
    // Foreign bytes: refused, never formatted, never written.
    let mut sim = SimFlash::new(Preset::Esp32.model(4096 * 16).unwrap());
    for i in 0..16u32 {
        sim.program(i * 4096, b"FAT12   \x00\x01\x02\x03").unwrap();
    }
    let image = sim.image();
    let f = Esp32Flash::new(sim).unwrap();
    let err = match S::mount(f, cfg, MountMode::FormatIfBlank) {
        Err(e) => e,
        Ok(_) => panic!("a foreign image was mounted"),
    };
    assert_eq!(err, Error::NotFormatted);
    // Erased sector headers but a byte written further in (the middle of a
    // sector, the partition's last byte): not blank, refused.
    for (at, word) in [
        (4096 * 5 + 700, b"\x00\xff\xff\xff"),
        (4096 * 16 - 4, b"\xff\xff\xff\x00"),
    ] {
        let mut sim = SimFlash::new(Preset::Esp32.model(4096 * 16).unwrap());
        sim.program(at, word).unwrap();
        let f = Esp32Flash::new(sim).unwrap();
        assert!(matches!(
            S::mount(f, cfg, MountMode::FormatIfBlank),
            Err(Error::NotFormatted)
        ));
    }
    // A newer format: refused, untouched.
    let mut store = S::format(flash(16), cfg).unwrap();
    store
        .append("chat:v", &[rec(RecordType::User, OA, "{}")], false)
        .unwrap();
    let sim = store.into_flash().into_inner();
    let mut header = [0u8; 24];
    sim.peek(0, &mut header);
    header[4..6].copy_from_slice(&(FORMAT_VERSION + 1).to_le_bytes());
    let crc = crc32(&header[..20]);
    header[20..24].copy_from_slice(&crc.to_le_bytes());
    let mut img = sim.image();
    img[..24].copy_from_slice(&header);
    let sim = SimFlash::from_image(sim.model(), &img).unwrap();
    let f = Esp32Flash::new(sim).unwrap();
    match S::mount(f, cfg, MountMode::FormatIfBlank) {
        Err(Error::UnsupportedVersion { found, supported }) => {
            assert_eq!((found, supported), (FORMAT_VERSION + 1, FORMAT_VERSION));
        }
        Err(e) => panic!("{e:?}"),
        Ok(_) => panic!("a newer image was mounted"),
    }
    // A format older than the oldest this crate upgrades (every sector
    // header says MIN_FORMAT_VERSION - 1): foreign, refused. (Version 2
    // images mount: sim/tests/golden.rs.)
    let mut store = S::format(flash(16), cfg).unwrap();
    store
        .append("chat:old", &[rec(RecordType::User, OA, "{}")], false)
        .unwrap();
    let sim = store.into_flash().into_inner();
    let mut img = sim.image();
    let sector = 4096;
    for s in 0..img.len() / sector {
        let h = &mut img[s * sector..s * sector + 24];
        if h[..4] != *b"CLMS" {
            continue;
        }
        h[4..6].copy_from_slice(&(clawmem::MIN_FORMAT_VERSION - 1).to_le_bytes());
        let crc = crc32(&h[..20]);
        h[20..24].copy_from_slice(&crc.to_le_bytes());
    }
    let sim = SimFlash::from_image(sim.model(), &img).unwrap();
    let f = Esp32Flash::new(sim).unwrap();
    match S::mount(f, cfg, MountMode::FormatIfBlank) {
        Err(e) => assert_eq!(e, Error::NotFormatted),
        Ok(_) => panic!("an older image was mounted"),
    }
    let _ = image;
}

fn crc32(b: &[u8]) -> u32 {
    let mut crc = 0xFFFF_FFFFu32;
    for &x in b {
        crc ^= u32::from(x);
        for _ in 0..8 {
            crc = if crc & 1 != 0 {
                (crc >> 1) ^ 0xEDB8_8320
            } else {
                crc >> 1
            };
        }
    }
    !crc
}

#[test]
fn engine_state_fits_in_4_kib() {
    // The state a firmware keeps: the `Store` with its work area lent
    // (`Store::mount_in`), not counting the flash driver, for the table of
    // 32 sessions the firmware example keeps (a working set: the store
    // holds as many sessions as the flash does).
    let flash = core::mem::size_of::<Esp32Flash>();
    let total = core::mem::size_of::<Store<Esp32Flash, 32, &'static mut Work>>();
    let state = total - flash;
    println!("engine state: {state} B for a table of 32 sessions, work area lent");
    assert!(state <= 4096, "{state} B");
    let t64 = core::mem::size_of::<Store<Esp32Flash, 64, &'static mut Work>>() - flash;
    println!("engine state: {t64} B for a table of 64 sessions, work area lent");
    let work = core::mem::size_of::<Work>();
    println!("work area: {work} B");
    let owned = core::mem::size_of::<Store<Esp32Flash, 32>>() - flash;
    // Owned, the work area is inside the store (with its alignment's padding).
    assert!(owned >= state - core::mem::size_of::<&mut Work>() + work);
    let big = core::mem::size_of::<Store<Esp32Flash, 128, &'static mut Work>>() - flash;
    println!("engine state: {big} B for 128 sessions (as the replays use), work area lent");
}

#[test]
fn a_lent_work_area_serves_every_mount() {
    // The same operations with the work area lent as with it owned, and a
    // fresh mount with another lent area reads them back.
    let mut work = Work::new();
    let flash = self::flash(64);
    let mut s: Store<Esp32Flash, 16, &mut Work> =
        Store::mount_in(flash, &mut work, config(4000), MountMode::FormatIfBlank).unwrap();
    let rec = [Record {
        kind: RecordType::User,
        format: BackendFormat::OpenAiCompatible,
        body: br#"{"role":"user","content":"hi"}"#,
    }];
    s.append("chat:lent", &rec, true).unwrap();
    for k in 0..40u32 {
        let content = format!("fact number {k} about tea");
        let input = clawmem::memory::ItemInput::new(&content).tags("tea");
        s.memory_store(&input, k, false).unwrap();
    }
    let mut listed = 0;
    s.memory_list(|_| listed += 1).unwrap();
    let flash = s.into_flash();
    let mut other = Work::new();
    let mut s: Store<Esp32Flash, 16, &mut Work> =
        Store::mount_in(flash, &mut other, config(4000), MountMode::ExistingOnly).unwrap();
    let mut again = 0;
    s.memory_list(|_| again += 1).unwrap();
    assert_eq!(listed, 40);
    assert_eq!(again, listed);
    let mut buf = [0u8; 4096];
    let h = s
        .history("chat:lent", BackendFormat::OpenAiCompatible, &mut buf)
        .unwrap();
    assert_eq!(h.len(), 1);
}

#[test]
fn session_ids_up_to_the_limit_and_many_sessions_survive_remount() {
    let cfg = config(4000);
    let mut store = S::format(flash(64), cfg).unwrap();
    let long = "chat:telegram:123456789:".to_string() + &"a".repeat(64 - 24);
    assert_eq!(long.len(), 64);
    store
        .append(&long, &[rec(RecordType::User, OA, "{\"l\":1}")], false)
        .unwrap();
    for i in 0..15 {
        store
            .append(
                &format!("agent:{i}:chat:x"),
                &[rec(RecordType::User, OA, "{\"x\":1}")],
                false,
            )
            .unwrap();
    }
    let mut store = remount(store, cfg);
    assert_eq!(store.session_count(), 16);
    assert_eq!(history(&mut store, &long, OA).unwrap().len(), 1);
    let mut ids = Vec::new();
    store
        .for_each_session(|id, _| ids.push(id.to_string()))
        .unwrap();
    assert!(ids.contains(&long));
    assert_eq!(store.clear_sessions().unwrap(), 16);
    let mut store = remount(store, cfg);
    assert_eq!(store.session_count(), 0);
    store.check().unwrap();
}

#[test]
fn chat_session_commands_follow_esp_claw_and_persist() {
    use clawmem::chat::{parse_session_command, ChatKey, SessionCommand};
    let cfg = config(4000);
    let mut store = S::format(flash(64), cfg).unwrap();
    let chat = ChatKey::new("telegram", "42").unwrap();
    let map = store.chat_sessions(&chat).unwrap();
    assert_eq!(map.current().as_str(), "default_01");
    let current = map.current_session_id();
    store
        .append(
            current.as_str(),
            &[rec(RecordType::User, OA, "{\"x\":1}")],
            false,
        )
        .unwrap();
    let run = |store: &mut S, text: &str| -> String {
        let cmd = parse_session_command(text).unwrap();
        match store.session_command(&chat, &cmd).unwrap() {
            Ok(Some(reply)) => reply.to_string(),
            Ok(None) => {
                let mut out = String::new();
                store
                    .chat_sessions(&chat)
                    .unwrap()
                    .render_list(&mut out)
                    .unwrap();
                out
            }
            Err(e) => e.to_string(),
        }
    };
    assert_eq!(run(&mut store, "new"), "Started a new session: default_02");
    assert_eq!(run(&mut store, "new work"), "Started a new session: work");
    assert_eq!(
        run(&mut store, "new work"),
        "Cannot create session \"work\": a session with that name already exists."
    );
    assert_eq!(
        run(&mut store, "switch nope"),
        "Cannot switch to session \"nope\": no such session. Send /session list to list sessions."
    );
    assert_eq!(
        run(&mut store, "delete work"),
        "Cannot delete the current session \"work\". Switch to another session first."
    );
    assert_eq!(
        run(&mut store, "switch default_01"),
        "Switched to session: default_01"
    );
    let mut store = remount(store, cfg);
    assert_eq!(
        run(&mut store, "list"),
        "Sessions:\n* default_01 (current)\n* default_02\n* work"
    );
    // Deleting an alias deletes its history.
    let work = chat.session_id(&clawmem::chat::Alias::new("work").unwrap());
    store
        .append(
            work.as_str(),
            &[rec(RecordType::User, OA, "{\"w\":1}")],
            false,
        )
        .unwrap();
    assert_eq!(run(&mut store, "delete work"), "Deleted session: work");
    assert!(matches!(
        history(&mut store, work.as_str(), OA),
        Err(Error::NotFound)
    ));
    assert_eq!(run(&mut store, "new"), "Started a new session: default_03");
    let _ = SessionCommand::List;
    let mut store = remount(store, cfg);
    assert_eq!(
        run(&mut store, "list"),
        "Sessions:\n* default_01\n* default_02\n* default_03 (current)"
    );
    assert_eq!(history(&mut store, current.as_str(), OA).unwrap().len(), 1);
    store.check().unwrap();
}

/// Runs a `/session` command and renders its reply as ESP-Claw words it
/// (`list` renders the map).
fn session_reply(store: &mut S, chat: &clawmem::chat::ChatKey, text: &str) -> String {
    let cmd = clawmem::chat::parse_session_command(text).unwrap();
    match store.session_command(chat, &cmd).unwrap() {
        Ok(Some(reply)) => reply.to_string(),
        Ok(None) => {
            let mut out = String::new();
            store
                .chat_sessions(chat)
                .unwrap()
                .render_list(&mut out)
                .unwrap();
            out
        }
        Err(e) => e.to_string(),
    }
}

#[test]
fn claw_session_mgr_new_chat_session_starts_a_missing_map_empty() {
    use clawmem::chat::ChatKey;
    let cfg = config(4000);
    let mut store = S::format(flash(64), cfg).unwrap();
    // `new` without a name on a chat with no map: the map is [default_01].
    let a = ChatKey::new("telegram", "1").unwrap();
    assert_eq!(
        session_reply(&mut store, &a, "new"),
        "Started a new session: default_01"
    );
    assert_eq!(
        session_reply(&mut store, &a, "list"),
        "Sessions:\n* default_01 (current)"
    );
    // A named `new` on a chat with no map: only that session, no default_01.
    let b = ChatKey::new("telegram", "2").unwrap();
    assert_eq!(
        session_reply(&mut store, &b, "new foo"),
        "Started a new session: foo"
    );
    let mut store = remount(store, cfg);
    assert_eq!(
        session_reply(&mut store, &b, "list"),
        "Sessions:\n* foo (current)"
    );
    assert_eq!(
        store
            .chat_sessions(&b)
            .unwrap()
            .current_session_id()
            .as_str(),
        "chat:telegram:2:foo"
    );
    // With a map, `new` adds to it.
    assert_eq!(
        session_reply(&mut store, &b, "new"),
        "Started a new session: default_01"
    );
    assert_eq!(
        session_reply(&mut store, &b, "list"),
        "Sessions:\n* foo\n* default_01 (current)"
    );
    store.check().unwrap();
}

#[test]
fn claw_session_mgr_delete_chat_session_creates_no_map() {
    use clawmem::chat::ChatKey;
    let cfg = config(4000);
    let mut store = S::format(flash(64), cfg).unwrap();
    let chat = ChatKey::new("telegram", "7").unwrap();
    let before = store.written_bytes().objects;
    for alias in ["default_01", "other"] {
        assert_eq!(
            session_reply(&mut store, &chat, &format!("delete {alias}")),
            format!(
                "Cannot delete session \"{alias}\": no such session. Send /session list to list sessions."
            )
        );
    }
    // Nothing was stored: the next `new` starts the map empty.
    assert_eq!(store.written_bytes().objects, before);
    assert_eq!(
        session_reply(&mut store, &chat, "new work"),
        "Started a new session: work"
    );
    assert_eq!(
        session_reply(&mut store, &chat, "list"),
        "Sessions:\n* work (current)"
    );
    store.check().unwrap();
}

#[test]
fn claw_session_mgr_list_chat_sessions_stores_the_first_use_map() {
    // ESP-Claw's `list` and `switch` load or init the map
    // (`claw_session_mgr_load_or_init_mapping_locked`): afterwards the chat
    // has default_01, and `new` adds default_02.
    use clawmem::chat::ChatKey;
    let cfg = config(4000);
    let mut store = S::format(flash(64), cfg).unwrap();
    let a = ChatKey::new("telegram", "1").unwrap();
    assert_eq!(
        session_reply(&mut store, &a, "list"),
        "Sessions:\n* default_01 (current)"
    );
    let b = ChatKey::new("telegram", "2").unwrap();
    assert_eq!(
        session_reply(&mut store, &b, "switch x"),
        "Cannot switch to session \"x\": no such session. Send /session list to list sessions."
    );
    let mut store = remount(store, cfg);
    for chat in [&a, &b] {
        assert_eq!(
            session_reply(&mut store, chat, "new"),
            "Started a new session: default_02"
        );
    }
    store.check().unwrap();
}

#[test]
fn claw_memory_profile_init_defaults_seeds_only_absent_documents() {
    use clawmem::profile::ProfileDoc;
    use clawmem_sim::{CutPoint, PowerCut, Tear};
    let cfg = Config {
        profile_max_bytes: 512,
        ..config(4000)
    };
    let read = |store: &mut S, doc| {
        let mut buf = [0u8; 512];
        let n = store.profile_read(doc, &mut buf).unwrap();
        String::from_utf8(buf[..n].to_vec()).unwrap()
    };
    let seed = "# Soul\n\nThe recovery copy.\n";
    let mut store = S::format(flash(24), cfg).unwrap();
    assert!(store
        .profile_write_if_absent(ProfileDoc::Soul, seed)
        .unwrap());
    assert!(!store
        .profile_write_if_absent(ProfileDoc::Soul, "# Soul\n\nAnother.\n")
        .unwrap());
    // What the user wrote is never overwritten.
    store
        .profile_write(ProfileDoc::User, "# User\n\n- Name: Ada\n")
        .unwrap();
    assert!(!store
        .profile_write_if_absent(ProfileDoc::User, "# User\n\nseed\n")
        .unwrap());
    // A default that a read stored is present too.
    read(&mut store, ProfileDoc::Identity);
    assert!(!store
        .profile_write_if_absent(ProfileDoc::Identity, "# Identity\n\nseed\n")
        .unwrap());
    // Too large is an error, present or not, and writes nothing.
    let big = "x".repeat(513);
    for doc in [ProfileDoc::Soul, ProfileDoc::Agents] {
        assert!(matches!(
            store.profile_write_if_absent(doc, &big),
            Err(Error::TooLarge { limit: 512, .. })
        ));
    }
    let mut store = remount(store, cfg);
    assert_eq!(read(&mut store, ProfileDoc::Soul), seed);
    assert_eq!(
        read(&mut store, ProfileDoc::User),
        "# User\n\n- Name: Ada\n"
    );
    assert_eq!(
        read(&mut store, ProfileDoc::Agents),
        ProfileDoc::Agents.default_contents()
    );
    store.check().unwrap();

    // Power loss: a cut at any program or erase call of a seeding leaves the
    // document absent or seeded; seeding again after the mount completes it,
    // and a third call writes nothing.
    let base = S::format(flash(24), cfg).unwrap().into_flash();
    let mut clean = base.clone();
    clean.flash_mut().arm_power_cut(PowerCut {
        seed: 0,
        at: CutPoint::Op(u64::MAX),
        tear: Tear::Prefix(0),
    });
    let mut store = S::mount(clean, cfg, MountMode::ExistingOnly).unwrap();
    assert!(store
        .profile_write_if_absent(ProfileDoc::Soul, seed)
        .unwrap());
    let total = store.flash().flash().ops_since_arm();
    assert!(total > 0);
    for cut in 0..total {
        for tear in [Tear::Prefix(0), Tear::Prefix(9), Tear::Bits, Tear::Random] {
            let at = PowerCut {
                seed: cut,
                at: CutPoint::Op(cut),
                tear,
            };
            let mut f = base.clone();
            f.flash_mut().arm_power_cut(at);
            let mut store = S::mount(f, cfg, MountMode::ExistingOnly).unwrap();
            assert!(store
                .profile_write_if_absent(ProfileDoc::Soul, seed)
                .is_err());
            let mut f = store.into_flash();
            f.flash_mut().restore_power();
            let mut store = S::mount(f, cfg, MountMode::ExistingOnly)
                .unwrap_or_else(|e| panic!("mount after {at}: {e:?}"));
            store
                .profile_write_if_absent(ProfileDoc::Soul, seed)
                .unwrap();
            assert_eq!(read(&mut store, ProfileDoc::Soul), seed, "{at}");
            assert!(!store
                .profile_write_if_absent(ProfileDoc::Soul, "other")
                .unwrap());
            store.check().unwrap();
        }
    }
}

#[test]
fn profiles_default_replace_limit_and_survive_gc() {
    use clawmem::profile::ProfileDoc;
    let cfg = Config {
        profile_max_bytes: 512,
        ..config(4000)
    };
    let mut store = S::format(flash(24), cfg).unwrap();
    let mut buf = [0u8; 1024];
    let n = store.profile_read(ProfileDoc::Soul, &mut buf).unwrap();
    assert_eq!(&buf[..n], ProfileDoc::Soul.default_contents().as_bytes());
    store
        .profile_write(ProfileDoc::User, "# User\n\n- Name: Ada\n")
        .unwrap();
    assert!(matches!(
        store.profile_write(ProfileDoc::User, &"x".repeat(513)),
        Err(Error::TooLarge { limit: 512, .. })
    ));
    let mut tiny = [0u8; 4];
    assert_eq!(
        store.profile_read(ProfileDoc::User, &mut tiny).unwrap_err(),
        Error::BufferTooSmall { needed: 20 }
    );
    // Enough session traffic to wrap the ring several times: the profiles
    // are relocated by garbage collection and stay intact.
    for n in 0..2000 {
        let id = format!("chat:p{}", n % 3);
        let body = format!("{{\"n\":{n},\"pad\":\"{}\"}}", "p".repeat(150));
        let out = store
            .append(&id, &[rec(RecordType::User, OA, &body)], n % 7 == 0)
            .unwrap();
        if out.blocked || n % 50 == 0 {
            store.delete_session(&id).unwrap();
        }
    }
    assert!(store.flash().flash().stats().erase_count_max() >= 3);
    let mut store = remount(store, cfg);
    let n = store.profile_read(ProfileDoc::User, &mut buf).unwrap();
    assert_eq!(&buf[..n], b"# User\n\n- Name: Ada\n");
    let n = store.profile_read(ProfileDoc::Soul, &mut buf).unwrap();
    assert_eq!(&buf[..n], ProfileDoc::Soul.default_contents().as_bytes());
    store.check().unwrap();
}

#[test]
fn a_history_read_costs_about_what_it_returns() {
    let cfg = config(20_000);
    let mut store = S::format(flash(64), cfg).unwrap();
    // Interleave with other sessions, compact once, and relocate by GC: the
    // read of one session must not touch the others.
    for n in 0..60 {
        tool_turn(&mut store, "chat:h", n, 150);
        for other in 0..3 {
            let body = format!("{{\"other\":{n},\"pad\":\"{}\"}}", "o".repeat(300));
            store
                .append(
                    &format!("chat:o{other}"),
                    &[rec(RecordType::User, OA, &body)],
                    false,
                )
                .unwrap();
        }
        if n % 20 == 19 {
            for other in 0..3 {
                store.delete_session(&format!("chat:o{other}")).unwrap();
            }
        }
    }
    let mut buf = vec![0u8; 256 * 1024];
    let before = store.flash().flash().stats().read_bytes;
    let h = store.history("chat:h", OA, &mut buf).unwrap();
    let returned: usize = h.iter().map(|r| r.body.len()).sum();
    let records = h.len();
    let read = store.flash().flash().stats().read_bytes - before;
    let ratio = read as f64 / returned as f64;
    println!("history: {records} records, {returned} B returned, {read} B read (x{ratio:.3})");
    // Besides the bodies, a read costs 14 bytes per record of the index
    // (entry and CRC) and about 80 bytes per batch after it (headers and
    // meta): with these small records (74 B on average) that is 30%.
    assert!(ratio < 1.35, "read {read} B to return {returned} B");
    // With bodies of a typical size the overhead shrinks accordingly.
    let mut store = S::format(flash(64), config(60_000)).unwrap();
    for n in 0..30 {
        tool_turn(&mut store, "chat:big", n, 400);
    }
    let before = store.flash().flash().stats().read_bytes;
    let h = store.history("chat:big", OA, &mut buf).unwrap();
    let returned: usize = h.iter().map(|r| r.body.len()).sum();
    let read = store.flash().flash().stats().read_bytes - before;
    let ratio = read as f64 / returned as f64;
    println!(
        "history: {} records, {returned} B returned, {read} B read (x{ratio:.3})",
        h.len()
    );
    assert!(ratio < 1.15, "read {read} B to return {returned} B");
}

/// Finds the first occurrence of `needle` in the flash image.
fn find_in(store: &S, needle: &[u8]) -> usize {
    store.flash().flash().find(needle).expect("bytes on flash")
}

#[test]
fn a_damaged_index_or_chain_is_rebuilt_from_the_log_not_wiped() {
    let cfg = config(4000);
    let mut store = S::format(flash(64), cfg).unwrap();
    // A compacted session: its root is a base (CHDX index) referencing
    // bodies in older batches, and batches follow it.
    let mut n = 0;
    while !tool_turn(&mut store, "chat:r", n, 300).compacted {
        n += 1;
    }
    // Records after the base, so that it is not the last thing written.
    store
        .append(
            "chat:r",
            &[rec(
                RecordType::User,
                OA,
                "{\"role\":\"user\",\"content\":\"after\"}",
            )],
            false,
        )
        .unwrap();
    let before = history(&mut store, "chat:r", OA).unwrap();
    assert!(before.len() > 8);
    // Damage the CHDX magic of the newest base ("CHDX" on flash).
    let magic = store
        .flash()
        .flash()
        .image()
        .windows(4)
        .rposition(|w| w == b"CHDX")
        .unwrap();
    let mut sim = store.into_flash().into_inner();
    sim.flip_bit(magic, 0).unwrap();
    let mut store = S::mount(Esp32Flash::new(sim).unwrap(), cfg, MountMode::ExistingOnly).unwrap();
    let checked = store.check();
    println!("magic at 0x{magic:x}: check {checked:?}");
    assert!(checked.is_err(), "check() reports the damaged index");
    // The history is still read whole, and reading it rebuilt the index.
    assert_eq!(history(&mut store, "chat:r", OA).unwrap(), before);
    store.check().unwrap();
    let mut store = remount(store, cfg);
    assert_eq!(history(&mut store, "chat:r", OA).unwrap(), before);

    // Damage a batch's back pointer: the chain is found again by scanning
    // the log for the session's batches.
    for n in 40..42 {
        tool_turn(&mut store, "chat:r", n, 100);
    }
    let before = history(&mut store, "chat:r", OA).unwrap();
    let last_user = find_in(&store, b"{\"role\":\"user\",\"content\":\"q41\"}");
    let mut sim = store.into_flash().into_inner();
    // The batch holding the last user record starts 2 + 9 + 12 bytes before
    // it (one record: kind byte and a one-byte length); its prev pointer is
    // at offset 12 + 4 of the chunk.
    let chunk = last_user - (12 + 9 + 2);
    sim.flip_bit(chunk + 12 + 4, 3).unwrap();
    let mut store = S::mount(Esp32Flash::new(sim).unwrap(), cfg, MountMode::ExistingOnly).unwrap();
    let mut buf = vec![0u8; 256 * 1024];
    let h = store.history("chat:r", OA, &mut buf).unwrap();
    // The damaged batch (its CRC covers the pointer) is the only loss.
    assert_eq!(h.damaged_records(), 1);
    let got: Vec<_> = h
        .iter()
        .map(|r| (r.kind, String::from_utf8(r.body.to_vec()).unwrap()))
        .collect();
    let want: Vec<_> = before
        .iter()
        .filter(|r| !r.1.contains("\"q41\""))
        .cloned()
        .collect();
    assert_eq!(got, want, "every other record is found again");
    store.check().unwrap();
    let mut store = remount(store, cfg);
    assert_eq!(history(&mut store, "chat:r", OA).unwrap(), want);
}

/// ESP-Claw's `claw_memory_session_append_records` writes a batch of any
/// size, and the turn's compaction then blocks the session when it stays
/// over the limit (esp-claw#161: a reasoning model's first turn). The
/// batch is kept, the block survives a fresh mount, and a delete clears
/// it. Only a batch the partition could never hold is refused, with an
/// error that names the partition, and nothing is written for it.
#[test]
fn claw_memory_session_append_records_stores_any_batch_then_blocks() {
    let mut store = S::format(flash(64), config(4000)).unwrap();
    store
        .append("chat:a", &[rec(RecordType::User, OA, "{\"q\":1}")], false)
        .unwrap();
    let big = format!("{{\"r\":\"{}\"}}", "z".repeat(6000));
    let out = store
        .append("chat:a", &[rec(RecordType::AssistantFinal, OA, &big)], true)
        .unwrap();
    assert!(out.blocked && !out.compacted, "{out:?}");
    assert!(matches!(store.gate(Some("chat:a")), Gate::Blocked(_)));
    assert!(matches!(
        store.append("chat:a", &[rec(RecordType::User, OA, "{}")], false),
        Err(Error::Blocked)
    ));
    let mut store = S::mount(store.into_flash(), config(4000), MountMode::ExistingOnly).unwrap();
    assert!(matches!(store.gate(Some("chat:a")), Gate::Blocked(_)));
    let mut buf = vec![0u8; 16 * 1024];
    let h = store.history("chat:a", OA, &mut buf).unwrap();
    let bodies: Vec<&[u8]> = h.iter().map(|r| r.body).collect();
    assert_eq!(bodies, [&b"{\"q\":1}"[..], big.as_bytes()]);
    // A batch larger than the partition: refused, saying so, unwritten.
    let image = store.flash().flash().image();
    let vast = "v".repeat(300_000);
    match store.append("chat:b", &[rec(RecordType::User, OA, &vast)], true) {
        Err(Error::TooLarge { what, size, limit }) => {
            assert!(what.contains("partition"), "{what}");
            assert_eq!(size, 300_001);
            assert!(limit < 256 * 1024 && limit > 128 * 1024, "{limit}");
        }
        r => panic!("{r:?}"),
    }
    assert!(store.flash().flash().image() == image);
    store.delete_session("chat:a").unwrap();
    let out = store
        .append("chat:a", &[rec(RecordType::User, OA, "{}")], true)
        .unwrap();
    assert!(!out.blocked);
    store.check().unwrap();
}

/// ESP-Claw's session ids reach about 204 bytes (`claw_session_mgr`: a chat
/// key of up to 159 bytes, `:`, an alias of up to 32, `:subagent_NN`). The
/// engine takes ids up to 255 bytes (the length byte on flash): such a
/// session is written, found, listed and read back after a fresh mount; a
/// 256-byte id is refused, naming the limit.
#[test]
fn claw_session_mgr_ids_of_esp_claw_length_are_accepted() {
    let mut store = S::format(flash(64), config(4000)).unwrap();
    let key = format!("chat:feishu:{}", "o".repeat(159 - "chat:feishu:".len()));
    let alias = "a".repeat(32);
    let long = format!("{key}:{alias}:subagent_01");
    assert_eq!(long.len(), 204);
    let longest = "x".repeat(clawmem::MAX_SESSION_ID_BYTES);
    assert_eq!(longest.len(), 255);
    for (n, id) in [&long, &longest].into_iter().enumerate() {
        for k in 0..3 {
            let body = format!("{{\"n\":{n},\"k\":{k}}}");
            store
                .append(id, &[rec(RecordType::User, OA, &body)], k == 2)
                .unwrap();
        }
    }
    let too_long = "y".repeat(256);
    assert!(matches!(
        store.append(&too_long, &[rec(RecordType::User, OA, "{}")], false),
        Err(Error::TooLarge {
            what: "session id",
            limit: 255,
            ..
        })
    ));
    let mut store = S::mount(store.into_flash(), config(4000), MountMode::ExistingOnly).unwrap();
    let mut ids = Vec::new();
    store
        .for_each_session(|id, _| ids.push(id.to_string()))
        .unwrap();
    ids.sort();
    let mut want = vec![long.clone(), longest.clone()];
    want.sort();
    assert_eq!(ids, want);
    for (n, id) in [&long, &longest].into_iter().enumerate() {
        let mut buf = [0u8; 256];
        let h = store.history(id, OA, &mut buf).unwrap();
        let bodies: Vec<String> = h
            .iter()
            .map(|r| String::from_utf8(r.body.to_vec()).unwrap())
            .collect();
        assert_eq!(
            bodies,
            (0..3)
                .map(|k| format!("{{\"n\":{n},\"k\":{k}}}"))
                .collect::<Vec<_>>()
        );
        assert_eq!(store.session_info(id).unwrap().unwrap().records, 3);
    }
    store.check().unwrap();
}

/// An append that consolidates a chain at its limit on a store short of
/// room collects first, and collection may reorder the session table (it
/// sorts it by uid and brings cold sessions in while the table does not
/// hold every session). The consolidation must still rewrite the
/// appending session's base, not the one now at its old place in the
/// table: every session keeps its history, its chain within the limit, and
/// the store checks out, before and after a remount.
#[test]
fn consolidation_after_collection_reorders_the_table_rewrites_the_right_session() {
    type T = Store<Esp32Flash, 4>;
    let cfg = config(16 * 1024);
    let mut store = T::format(flash(40), cfg).unwrap();
    let mut want: std::collections::BTreeMap<String, Vec<String>> = Default::default();
    let mut state = 0x9e37_79b9_7f4a_7c15u64;
    let mut fulls = 0;
    let mut n = 0usize;
    while fulls < 40 && n < 40_000 {
        state ^= state << 13;
        state ^= state >> 7;
        state ^= state << 17;
        // Twelve sessions over a table of four.
        let k = state % 12;
        let id = format!("chat:reorder:{k}");
        let body = format!(
            "{{\"n\":{n},\"pad\":\"{}\"}}",
            "r".repeat(40 + (n * 13) % 160)
        );
        match store.append(&id, &[rec(RecordType::User, OA, &body)], false) {
            Ok(_) => want.entry(id).or_default().push(body),
            Err(Error::Full { .. }) => {
                fulls += 1;
                // As a user following the warning: the session with the
                // most records goes.
                let victim = want
                    .iter()
                    .max_by_key(|(_, b)| b.len())
                    .map(|(i, _)| i.clone())
                    .unwrap();
                store.delete_session(&victim).unwrap();
                want.remove(&victim);
            }
            Err(e) => panic!("append {n} to {id}: {e:?}"),
        }
        if n.is_multiple_of(64) {
            store
                .check()
                .unwrap_or_else(|e| panic!("check after op {n}: {e:?}"));
        }
        n += 1;
    }
    assert!(fulls >= 40, "the store filled {fulls} times in {n} appends");
    histories_match(&mut store, &want);
    let mut store = T::mount(store.into_flash(), cfg, MountMode::ExistingOnly).unwrap();
    histories_match(&mut store, &want);
}
