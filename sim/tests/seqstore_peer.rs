//! The `sequential-storage` peer of `compare`: the shipped traces read back
//! exactly, what it stored survives a remount and a fresh driver on the same
//! flash, compaction is reported as the replayer models it, and flash that
//! forbids rewriting a word is refused with a reason.

use clawmem_sim::compare::{compare, Engine};
use clawmem_sim::peers::seqstore::{self, SeqStorageDriver};
use clawmem_sim::replay::{replay, Driver, HistoryRecord, MemoryItem, Report, RunOptions};
use clawmem_sim::trace::{Format, MemorySource, ProfileName, RecordKind, Trace, TraceRecord};
use clawmem_sim::{Esp32Flash, Preset, ReplayOptions, SimFlash};

fn load(name: &str) -> Trace {
    let path = format!("{}/../traces/{name}", env!("CARGO_MANIFEST_DIR"));
    Trace::from_path(path).unwrap_or_else(|e| panic!("{e}"))
}

fn esp32() -> SimFlash {
    SimFlash::new(Preset::Esp32.model(1024 * 1024).unwrap())
}

fn run(trace: &Trace, repeat: u32) -> Report {
    seqstore::replay_preset(
        Preset::Esp32,
        esp32(),
        trace,
        &RunOptions {
            repeat,
            ..RunOptions::default()
        },
        &mut |_, _| {},
    )
    .unwrap()
}

fn assert_clean(r: &Report) {
    assert_eq!(
        (r.history_mismatches, r.errors, r.unsupported_ops),
        (0, 0, 0),
        "first mismatch: {:?}, first error: {:?}",
        r.first_mismatch,
        r.first_error
    );
    assert!(r.history_checks > 0);
}

#[test]
fn the_smoke_trace_reads_back_exactly() {
    let trace = load("smoke.jsonl");
    let r = run(&trace, 1);
    assert_clean(&r);
    assert_eq!(r.engine, "sequential-storage");
    // The initial mount and the trace's three remounts.
    assert_eq!(r.mounts, 4);
    assert!(r.programmed_bytes >= r.user_bytes);
    // Twice: the second round starts from the first round's flash.
    assert_clean(&run(&trace, 2));
}

#[test]
fn compare_lists_the_peer() {
    let opts = ReplayOptions::default();
    let cmp = compare(
        &load("smoke.jsonl"),
        &opts,
        &[Engine::Clawmem, Engine::SequentialStorage],
        &mut |_, _, _| {},
    )
    .unwrap();
    let names: Vec<&str> = cmp.engines.iter().map(|r| r.engine.as_str()).collect();
    assert_eq!(names, ["clawmem", "sequential-storage"]);
    let claw = cmp.get("clawmem").unwrap();
    let ss = cmp.get("sequential-storage").unwrap();
    assert_clean(ss);
    assert_eq!((claw.ops, claw.user_bytes), (ss.ops, ss.user_bytes));
    assert_eq!(claw.history_checks, ss.history_checks);
}

fn record(kind: RecordKind, body: String) -> TraceRecord {
    TraceRecord {
        kind,
        format: Format::Openai,
        body,
    }
}

fn as_history(records: &[TraceRecord]) -> Vec<HistoryRecord> {
    records
        .iter()
        .map(|r| HistoryRecord {
            kind: r.kind,
            format: r.format,
            body: r.body.clone().into_bytes(),
        })
        .collect()
}

#[test]
fn a_remount_and_a_fresh_driver_keep_everything() {
    let mut d = SeqStorageDriver::<Esp32Flash>::new(esp32()).unwrap();
    let a: Vec<TraceRecord> = (0..30)
        .map(|i| {
            record(
                RecordKind::User,
                format!("{{\"n\":{i},\"pad\":\"{}\"}}", "x".repeat(i * 7)),
            )
        })
        .collect();
    // A body longer than a page is split over several queue items.
    let big = vec![record(RecordKind::ToolResult, "y".repeat(5000))];
    for (i, chunk) in a.chunks(3).enumerate() {
        let r = d.append("chat:a", chunk, true);
        assert!(r.is_ok(), "{i}: {r:?} {:?}", d.info().notes);
    }
    d.append("chat:b", &big, false).unwrap();
    d.append("chat:c", &a[..2], true).unwrap();
    d.session_delete("chat:c").unwrap();
    let tags = vec!["drinks".to_string()];
    let tea = d
        .memory_store(&MemoryItem {
            content: "User likes green tea",
            tags: &tags,
            keywords: &[],
            source: MemorySource::Manual,
        })
        .unwrap();
    let soul = "# Soul\n".repeat(1200); // over two pages: three map chunks
    d.profile_write(ProfileName::Soul, &soul).unwrap();
    d.profile_write(ProfileName::User, "# User\n").unwrap();

    let check = |d: &mut SeqStorageDriver<Esp32Flash>| {
        assert_eq!(d.history("chat:a").unwrap(), as_history(&a));
        assert_eq!(d.history("chat:b").unwrap(), as_history(&big));
        assert!(d.history("chat:c").unwrap().is_empty());
        assert_eq!(d.memory_list().unwrap(), vec![tea.item]);
        assert_eq!(d.memory_recall(&tags, 8).unwrap(), vec![tea.item]);
        assert_eq!(
            d.profile_read(ProfileName::Soul).unwrap(),
            Some(soul.clone().into_bytes())
        );
        assert_eq!(
            d.profile_read(ProfileName::User).unwrap(),
            Some(b"# User\n".to_vec())
        );
        assert_eq!(d.profile_read(ProfileName::Agents).unwrap(), None);
    };
    check(&mut d);
    d.remount().unwrap();
    check(&mut d);
    assert_eq!(d.mount_read_bytes().len(), 2);

    // Only the flash carries over to a new driver.
    let mut d = SeqStorageDriver::<Esp32Flash>::new(d.into_flash()).unwrap();
    check(&mut d);
    // New ids continue after the ones on flash, new sessions find free queues.
    let other = d
        .memory_store(&MemoryItem {
            content: "User walks to work every morning",
            tags: &tags,
            keywords: &[],
            source: MemorySource::AutoLlm,
        })
        .unwrap();
    assert!(other.item.0 > tea.item.0 && !other.duplicate);
    d.append("chat:d", &a[..1], true).unwrap();
    assert_eq!(d.history("chat:d").unwrap(), as_history(&a[..1]));
    // A shorter profile drops the old chunks.
    d.profile_write(ProfileName::Soul, "# Soul\n").unwrap();
    d.remount().unwrap();
    assert_eq!(
        d.profile_read(ProfileName::Soul).unwrap(),
        Some(b"# Soul\n".to_vec())
    );
}

/// A trace whose one session outgrows a 2-page queue: turns of a user
/// message, a tool call, a 1.5 KiB tool result and an answer.
fn growing_trace(turns: usize) -> Trace {
    let mut lines = vec![r#"{"trace":"clawmem-trace","version":1}"#.to_string()];
    for t in 0..turns {
        let recs = [
            ("user", format!("question {t}")),
            ("assistant_tool", format!("call {t}")),
            ("tool_result", format!("result {t} {}", "r".repeat(1500))),
            ("assistant_final", format!("answer {t} {}", "a".repeat(300))),
        ];
        for (i, (kind, body)) in recs.iter().enumerate() {
            let rec = serde_json::json!({"type": kind, "format": "openai", "body": body});
            let op = serde_json::json!({
                "op": "append", "session": "chat:grow",
                "records": [rec], "turn_completed": i == 3,
            });
            lines.push(op.to_string());
        }
        lines.push(r#"{"op":"history","session":"chat:grow"}"#.to_string());
        if t % 7 == 6 {
            lines.push(r#"{"op":"remount"}"#.to_string());
        }
    }
    Trace::parse("grow.jsonl", &lines.join("\n")).unwrap()
}

#[test]
fn compaction_matches_the_replayers_model() {
    let trace = growing_trace(40);
    let mut d = SeqStorageDriver::<Esp32Flash>::new(esp32()).unwrap();
    let r = replay(&mut d, &trace, &RunOptions::default(), &mut |_, _| {});
    assert_clean(&r);
    assert!(r.compactions > 0, "{:?}", r.notes);
    assert!(r.session_limit_scaled);
    assert_eq!(r.session_limit_bytes, Some(6132));
    // Answers alone outgrow the limit in the end: blocked, then deleted by
    // the replayer, and the session starts again.
    assert!(r.blocked > 0, "{:?}", r.notes);
}

#[test]
fn the_memory_trace_reads_back_exactly() {
    // 10 KiB sessions: more than a 2-page queue holds, so full queues are
    // rewritten or compacted on the way.
    let r = run(&load("bfcl-memory.jsonl"), 1);
    assert_clean(&r);
}

#[test]
fn flash_without_rewrites_is_refused() {
    for p in [Preset::Stm32h7, Preset::Stm32l4] {
        let flash = SimFlash::new(p.model(p.default_capacity()).unwrap());
        let err = seqstore::replay_preset(
            p,
            flash,
            &load("smoke.jsonl"),
            &RunOptions::default(),
            &mut |_, _| {},
        )
        .unwrap_err();
        assert!(err.contains("MultiwriteNorFlash"), "{err}");
    }
    // nRF52 and the generic part allow it.
    for p in [Preset::Nrf52, Preset::Generic] {
        let flash = SimFlash::new(p.model(p.default_capacity()).unwrap());
        let r = seqstore::replay_preset(
            p,
            flash,
            &load("smoke.jsonl"),
            &RunOptions::default(),
            &mut |_, _| {},
        )
        .unwrap();
        assert_clean(&r);
    }
}
