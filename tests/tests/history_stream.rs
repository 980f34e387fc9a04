//! Streaming history reads (`Store::history_stream`, `Store::history_next`):
//! the same records as the whole read through a buffer that holds one
//! record, the totals known in advance, a read that resumes where a too
//! small buffer stopped it, a stream voided by a write to its session, and
//! damage left out as the whole read leaves it out. Also the whole read's
//! rewrite of another backend's final answer, which must not depend on the
//! room left in the caller's buffer.

use clawmem::{BackendFormat, Config, Error, MountMode, Record, RecordType, Store};
use clawmem_sim::{Esp32Flash, Preset, SimError, SimFlash};

type S = Store<Esp32Flash, 16>;

const OA: BackendFormat = BackendFormat::OpenAiCompatible;
const AN: BackendFormat = BackendFormat::AnthropicCompatible;
const FORMATS: [BackendFormat; 3] = [OA, AN, BackendFormat::Unknown];

type Got = Vec<(RecordType, BackendFormat, Vec<u8>)>;

fn flash(sectors: usize) -> Esp32Flash {
    Esp32Flash::new(SimFlash::new(Preset::Esp32.model(4096 * sectors).unwrap())).unwrap()
}

fn config() -> Config {
    Config {
        session_size_limit_bytes: 24_000,
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

/// The whole read, with a buffer as large as it asks for (asking again
/// while it asks for more).
fn whole(store: &mut S, id: &str, current: BackendFormat) -> Result<(Got, u32), Error<SimError>> {
    let mut len = 1;
    for _ in 0..64 {
        let mut buf = vec![0u8; len];
        match store.history(id, current, &mut buf) {
            Ok(h) => {
                let got = h
                    .iter()
                    .map(|r| (r.kind, r.format, r.body.to_vec()))
                    .collect();
                return Ok((got, h.damaged_records()));
            }
            Err(Error::BufferTooSmall { needed }) => {
                assert!(needed > len, "asked for {needed} B with {len} B given");
                len = needed;
            }
            Err(e) => return Err(e),
        }
    }
    panic!("the whole read kept asking for more room");
}

/// A streamed read through one buffer of the size the open asks for.
fn streamed(
    store: &mut S,
    id: &str,
    current: BackendFormat,
) -> Result<(Got, u32, usize), Error<SimError>> {
    let mut buf = vec![0u8; 1];
    let mut st = loop {
        match store.history_stream(id, current, &mut buf) {
            Ok(st) => break st,
            Err(Error::BufferTooSmall { needed }) => {
                assert!(needed > buf.len());
                buf = vec![0u8; needed];
            }
            Err(e) => return Err(e),
        }
    };
    assert!(st.buffer_bytes() <= buf.len());
    let mut got = Vec::new();
    while let Some(r) = store.history_next(&mut st, &mut buf)? {
        got.push((r.kind, r.format, r.body.to_vec()));
    }
    assert_eq!(got.len() as u32, st.records(), "{id}: records announced");
    assert_eq!(
        got.iter().map(|r| r.2.len()).sum::<usize>(),
        st.total_bytes(),
        "{id}: bytes announced"
    );
    // After the end, it stays at the end.
    assert!(store.history_next(&mut st, &mut buf)?.is_none());
    Ok((got, st.damaged_records(), buf.len()))
}

/// A store with sessions of both backends: tool turns, final answers whose
/// content is an array of blocks (rewritten for the other backend), long
/// sessions that have been compacted and consolidated into bases with
/// batches chained after them.
fn mixed_store() -> S {
    let mut store = S::format(flash(96), config()).unwrap();
    for n in 0..60 {
        let id = format!("chat:{}", n % 4);
        let f = if n % 3 == 0 { AN } else { OA };
        let pad = "x".repeat(20 + (n * 37) % 400);
        let user = format!("{{\"role\":\"user\",\"content\":\"q{n} {pad}\"}}");
        let tool = format!("{{\"role\":\"assistant\",\"content\":[{{\"type\":\"tool_use\",\"id\":\"t{n}\",\"name\":\"ls\",\"input\":{{}}}}]}}");
        let result = format!(
            "[{{\"type\":\"tool_result\",\"tool_use_id\":\"t{n}\",\"content\":\"{pad}\"}}]"
        );
        let fin = if n % 2 == 0 {
            format!("{{\"role\":\"assistant\",\"content\":[{{\"type\":\"text\",\"text\":\"a{n}\"}},{{\"type\":\"text\",\"text\":\" {pad}\"}}]}}")
        } else {
            format!("{{\"role\":\"assistant\",\"content\":\"a{n}\"}}")
        };
        store
            .append(&id, &[rec(RecordType::User, f, &user)], false)
            .unwrap();
        store
            .append(
                &id,
                &[
                    rec(RecordType::AssistantTool, f, &tool),
                    rec(RecordType::ToolResult, f, &result),
                ],
                false,
            )
            .unwrap();
        let out = store
            .append(&id, &[rec(RecordType::AssistantFinal, f, &fin)], true)
            .unwrap();
        assert!(!out.blocked);
    }
    // A session of many small appends: a base and a chain after it.
    for n in 0..45 {
        let body = format!("{{\"role\":\"user\",\"content\":\"small {n}\"}}");
        store
            .append("chat:long", &[rec(RecordType::User, OA, &body)], false)
            .unwrap();
    }
    store
}

const IDS: [&str; 5] = ["chat:0", "chat:1", "chat:2", "chat:3", "chat:long"];

#[test]
fn a_stream_gives_what_the_whole_read_gives_through_one_record_of_room() {
    let store = mixed_store();
    let mut store = S::mount(store.into_flash(), config(), MountMode::ExistingOnly).unwrap();
    let mut rewritten = 0;
    for id in IDS {
        for current in FORMATS {
            let (want, wd) = whole(&mut store, id, current).unwrap();
            let (got, gd, room) = streamed(&mut store, id, current).unwrap();
            assert_eq!(got, want, "{id} for {current:?}");
            assert_eq!((wd, gd), (0, 0));
            // The buffer is the longest record (with its rewrite), far less
            // than the session.
            let longest = want.iter().map(|r| r.2.len()).max().unwrap();
            let session: usize = want.iter().map(|r| r.2.len()).sum();
            assert!(room >= longest);
            assert!(room < session, "{id}: {room} B of room for {session} B");
            rewritten += want
                .iter()
                .filter(|r| {
                    r.0 == RecordType::AssistantFinal
                        && r.1 != current
                        && r.1 != BackendFormat::Unknown
                        && current != BackendFormat::Unknown
                })
                .count();
        }
    }
    assert!(rewritten > 20, "the filter was exercised: {rewritten}");
    store.check().unwrap();
}

#[test]
fn the_open_asks_for_the_longest_record_and_its_rewrite() {
    let mut store = S::format(flash(32), config()).unwrap();
    let long_user = format!("{{\"role\":\"user\",\"content\":\"{}\"}}", "u".repeat(700));
    let text = "t".repeat(500);
    let fin = format!(
        "{{\"role\":\"assistant\",\"content\":[{{\"type\":\"text\",\"text\":\"{text}\"}}]}}"
    );
    store
        .append("chat:r", &[rec(RecordType::User, AN, &long_user)], false)
        .unwrap();
    store
        .append("chat:r", &[rec(RecordType::AssistantFinal, AN, &fin)], true)
        .unwrap();
    let mut small = vec![0u8; 699];
    // For its own backend the longest record is the user's.
    match store.history_stream("chat:r", AN, &mut small) {
        Err(Error::BufferTooSmall { needed }) => assert_eq!(needed, long_user.len()),
        other => panic!("{other:?}"),
    }
    let mut buf = vec![0u8; long_user.len()];
    let st = store.history_stream("chat:r", AN, &mut buf).unwrap();
    assert_eq!(st.buffer_bytes(), long_user.len());
    assert_eq!(st.total_bytes(), long_user.len() + fin.len());
    // For the other backend the final answer is rewritten after its stored
    // body: both must fit.
    let rewrite = format!("{{\"role\":\"assistant\",\"content\":\"{text}\"}}");
    let need = fin.len() + rewrite.len();
    assert!(need > long_user.len());
    let mut buf = vec![0u8; long_user.len()];
    match store.history_stream("chat:r", OA, &mut buf) {
        Err(Error::BufferTooSmall { needed }) => assert_eq!(needed, need),
        other => panic!("{other:?}"),
    }
    let mut buf = vec![0u8; need];
    let mut st = store.history_stream("chat:r", OA, &mut buf).unwrap();
    assert_eq!(st.total_bytes(), long_user.len() + rewrite.len());
    assert_eq!(st.records(), 2);
    let a = store.history_next(&mut st, &mut buf).unwrap().unwrap();
    assert_eq!(a.body, long_user.as_bytes());
    let b = store.history_next(&mut st, &mut buf).unwrap().unwrap();
    assert_eq!(b.body, rewrite.as_bytes());
    assert!(store.history_next(&mut st, &mut buf).unwrap().is_none());
}

#[test]
fn a_too_small_buffer_leaves_the_stream_where_it_was() {
    let mut store = mixed_store();
    let (want, _) = whole(&mut store, "chat:1", OA).unwrap();
    let mut buf = vec![0u8; 64 * 1024];
    let mut st = store.history_stream("chat:1", OA, &mut buf).unwrap();
    let mut got = Vec::new();
    let mut refused = 0;
    loop {
        // Every other call offers one byte too few: refused, nothing lost.
        if got.len() % 2 == 1 && refused < got.len() {
            let mut small = vec![0u8; st.buffer_bytes() - 1];
            match store.history_next(&mut st, &mut small) {
                Err(Error::BufferTooSmall { needed }) => assert_eq!(needed, st.buffer_bytes()),
                other => panic!("{other:?}"),
            }
            refused += 1;
        }
        let mut room = vec![0u8; st.buffer_bytes()];
        match store.history_next(&mut st, &mut room).unwrap() {
            Some(r) => got.push((r.kind, r.format, r.body.to_vec())),
            None => break,
        }
    }
    assert!(refused > 3);
    assert_eq!(got, want);
}

#[test]
fn a_write_to_the_session_voids_its_stream() {
    let mut store = mixed_store();
    let mut buf = vec![0u8; 8 * 1024];
    let mut st = store.history_stream("chat:2", OA, &mut buf).unwrap();
    // Another session's write leaves it valid (no sector was reclaimed in
    // a partition this empty).
    let mut other = store.history_stream("chat:3", OA, &mut buf).unwrap();
    store.history_next(&mut st, &mut buf).unwrap().unwrap();
    store
        .append(
            "chat:0",
            &[rec(
                RecordType::User,
                OA,
                "{\"role\":\"user\",\"content\":\"hi\"}",
            )],
            false,
        )
        .unwrap();
    store.history_next(&mut st, &mut buf).unwrap().unwrap();
    store
        .append(
            "chat:2",
            &[rec(
                RecordType::User,
                OA,
                "{\"role\":\"user\",\"content\":\"new\"}",
            )],
            false,
        )
        .unwrap();
    match store.history_next(&mut st, &mut buf) {
        Err(Error::InvalidInput(why)) => assert!(why.contains("changed"), "{why}"),
        other => panic!("{other:?}"),
    }
    store.history_next(&mut other, &mut buf).unwrap().unwrap();
    // A deleted session too.
    store.delete_session("chat:3").unwrap();
    assert!(matches!(
        store.history_next(&mut other, &mut buf),
        Err(Error::InvalidInput(_))
    ));
    // Opened again, the stream has the new record.
    let (got, _, _) = streamed(&mut store, "chat:2", OA).unwrap();
    assert!(got.last().unwrap().2.ends_with(b"\"new\"}"));
    assert!(matches!(
        store.history_stream("chat:3", OA, &mut buf),
        Err(Error::NotFound)
    ));
    assert!(matches!(
        store.history_stream("chat:none", OA, &mut buf),
        Err(Error::NotFound)
    ));
    assert!(matches!(
        store.history_stream("", OA, &mut buf),
        Err(Error::InvalidInput(_))
    ));
}

/// Every byte of the session bodies' region flipped in turn: the stream
/// gives exactly what the whole read of the same damaged image gives, and
/// reports the same damage.
#[test]
fn damage_is_left_out_of_a_stream_as_of_the_whole_read() {
    let image = mixed_store().into_flash().into_inner();
    let used = image.image().iter().rposition(|b| *b != 0xFF).unwrap() + 1;
    let (mut damaged, mut runs) = (0u32, 0u32);
    // A flip in every 97th byte, bit by rotation: bases, batch metas and
    // bodies of every session.
    for addr in (4096..used).step_by(97) {
        let mut img = image.clone();
        img.flip_bit(addr, (addr % 8) as u8).unwrap();
        // The same damaged image, mounted twice: one reads whole, the other
        // streams (each read repairs what it met, so they must not share).
        let mount = |img: SimFlash| {
            S::mount(
                Esp32Flash::new(img).unwrap(),
                config(),
                MountMode::ExistingOnly,
            )
        };
        let (Ok(mut a), Ok(mut b)) = (mount(img.clone()), mount(img)) else {
            continue;
        };
        for id in IDS {
            let w = whole(&mut a, id, OA);
            let s = streamed(&mut b, id, OA);
            match (w, s) {
                (Ok((want, wd)), Ok((got, gd, _))) => {
                    assert_eq!(got, want, "flip at 0x{addr:x}: {id}");
                    assert_eq!(gd, wd, "flip at 0x{addr:x}: {id}");
                    damaged += gd;
                }
                (Err(Error::NotFound), Err(Error::NotFound)) => {}
                (w, s) => panic!(
                    "flip at 0x{addr:x}: {id}: whole {:?}, streamed {:?}",
                    w.map(|x| (x.0.len(), x.1)),
                    s.map(|x| (x.0.len(), x.1))
                ),
            }
            runs += 1;
        }
        // Each read repaired what it met, the same way: the next reads
        // agree again. (A body damaged in a base stays damaged: its
        // rebuilt index keeps the CRC of what was written.)
        for id in IDS {
            let w = whole(&mut a, id, OA);
            let s = streamed(&mut b, id, OA).map(|(g, d, _)| (g, d));
            match (w, s) {
                (Ok(w), Ok(s)) => assert_eq!(s, w, "flip at 0x{addr:x}: {id}, after the repair"),
                (Err(Error::NotFound), Err(Error::NotFound)) => {}
                (w, s) => panic!(
                    "flip at 0x{addr:x}: {id} after the repair: whole {:?}, streamed {:?}",
                    w.map(|x| x.0.len()),
                    s.map(|x| x.0.len())
                ),
            }
        }
    }
    assert!(runs > 1000, "{runs}");
    assert!(damaged > 50, "the flips hit records: {damaged}");
}

/// The flash changing under an open stream (a bit flipped after the open
/// checked the session) fails the stream with `Corrupted` at the
/// session's root, wherever the flip is. The read may first pass over the
/// damage it meets (a batch it cannot read is left out, as damage), which
/// notes that batch's address; the error the stream returns must still
/// name the root, so every such failure of a session names one address.
#[test]
fn a_stream_whose_session_changes_on_flash_names_its_root() {
    let image = mixed_store().into_flash().into_inner();
    let used = image.image().iter().rposition(|b| *b != 0xFF).unwrap() + 1;
    let mut roots: std::collections::BTreeMap<&str, std::collections::BTreeSet<u32>> =
        Default::default();
    let mut failed = 0u32;
    for addr in (4096..used).step_by(97) {
        for id in IDS {
            let mut store = S::mount(
                Esp32Flash::new(image.clone()).unwrap(),
                config(),
                MountMode::ExistingOnly,
            )
            .unwrap();
            let mut buf = vec![0u8; 8192];
            let mut st = store.history_stream(id, OA, &mut buf).unwrap();
            store
                .flash_mut()
                .flash_mut()
                .flip_bit(addr, (addr % 8) as u8)
                .unwrap();
            for _ in 0..=st.records() {
                match store.history_next(&mut st, &mut buf) {
                    Ok(Some(_)) => {}
                    Ok(None) => break,
                    Err(Error::Corrupted { address, what })
                        if what.contains("while it was streamed") =>
                    {
                        roots.entry(id).or_default().insert(address);
                        failed += 1;
                        break;
                    }
                    Err(_) => break,
                }
            }
        }
    }
    for (id, addresses) in &roots {
        assert_eq!(addresses.len(), 1, "{id}: {addresses:x?}");
    }
    assert!(
        failed > 20 && roots.len() >= 3,
        "{failed} failures: {roots:x?}"
    );
}

/// The whole read rewrites another backend's final answer in the room
/// after its body. With a buffer of exactly the stored size there is no
/// such room for the last record: it must ask for more, not hand the
/// answer back unrewritten.
#[test]
fn the_whole_read_rewrites_a_final_answer_whatever_room_is_left() {
    let mut store = S::format(flash(32), config()).unwrap();
    let fin = "{\"role\":\"assistant\",\"content\":[{\"type\":\"text\",\"text\":\"done\"}]}";
    store
        .append(
            "chat:f",
            &[rec(
                RecordType::User,
                AN,
                "{\"role\":\"user\",\"content\":\"go\"}",
            )],
            false,
        )
        .unwrap();
    store
        .append("chat:f", &[rec(RecordType::AssistantFinal, AN, fin)], true)
        .unwrap();
    let mut probe = [0u8; 1];
    let Err(Error::BufferTooSmall { needed }) = store.history("chat:f", OA, &mut probe) else {
        panic!("a one-byte buffer was enough");
    };
    let mut exact = vec![0u8; needed];
    match store.history("chat:f", OA, &mut exact) {
        Err(Error::BufferTooSmall { needed: more }) => assert!(more > needed),
        Ok(h) => {
            let last = h.iter().last().unwrap();
            assert_ne!(last.body, fin.as_bytes(), "handed back unrewritten");
        }
        Err(e) => panic!("{e:?}"),
    }
    let (got, _) = whole(&mut store, "chat:f", OA).unwrap();
    assert_eq!(
        got[1].2,
        b"{\"role\":\"assistant\",\"content\":\"done\"}".to_vec()
    );
}

/// What a read costs: the whole read reads about what it returns; the
/// stream reads the session twice (the open checks every body, the reads
/// hand them out), and no more.
#[test]
fn a_stream_reads_the_session_twice_and_no_more() {
    let store = mixed_store();
    let mut store = S::mount(store.into_flash(), config(), MountMode::ExistingOnly).unwrap();
    let reads = |s: &S| s.flash().flash().stats().read_bytes;
    let mut big = vec![0u8; 256 * 1024];
    for id in IDS {
        let r0 = reads(&store);
        let returned: u64 = {
            let h = store.history(id, OA, &mut big).unwrap();
            h.iter().map(|r| r.body.len() as u64).sum()
        };
        let whole = reads(&store) - r0;
        // A buffer large enough at once (each refused open costs a pass).
        let mut buf = vec![0u8; 8 * 1024];
        let r1 = reads(&store);
        let mut st = store.history_stream(id, OA, &mut buf).unwrap();
        let mut given = 0u64;
        while let Some(r) = store.history_next(&mut st, &mut buf).unwrap() {
            given += r.body.len() as u64;
        }
        let stream = reads(&store) - r1;
        assert_eq!(given, returned);
        println!("{id}: returns {returned} B; whole read {whole} B, stream {stream} B");
        assert!(
            whole < returned + returned / 4 + 2048,
            "{id}: whole read {whole} B for {returned} B"
        );
        assert!(
            stream <= 2 * whole + 2048,
            "{id}: stream {stream} B, whole read {whole} B"
        );
    }
}

/// A flash error part-way through a stream loses its place: every later
/// call says so, and none answers the end for records it did not give.
#[test]
fn a_flash_error_part_way_fails_the_stream_for_good() {
    use clawmem_sim::{InjectedError, OpKind};
    let mut store = mixed_store();
    let (want, _) = whole(&mut store, "chat:0", OA).unwrap();
    let mut buf = vec![0u8; 8 * 1024];
    let mut st = store.history_stream("chat:0", OA, &mut buf).unwrap();
    for _ in 0..3 {
        store.history_next(&mut st, &mut buf).unwrap().unwrap();
    }
    store.flash_mut().flash_mut().inject_error(InjectedError {
        op: OpKind::Read,
        at_call: 0,
        persistent: false,
    });
    assert!(matches!(
        store.history_next(&mut st, &mut buf),
        Err(Error::Flash(_))
    ));
    store.flash_mut().flash_mut().clear_faults();
    for _ in 0..2 {
        match store.history_next(&mut st, &mut buf) {
            Err(Error::InvalidInput(why)) => assert!(why.contains("failed"), "{why}"),
            other => panic!("{other:?}"),
        }
    }
    // Opened again, it reads whole.
    let (got, _, _) = streamed(&mut store, "chat:0", OA).unwrap();
    assert_eq!(got, want);
}

/// Every byte of the used region flipped in turn (every 13th, bit by
/// rotation): where the mount met no damage (a batch it left out is in its
/// report, `ignored_batches`, and the session's count leaves it out; a
/// damaged last chunk at the head is a torn write to it), a
/// whole read and a stream give every record of each session or count it
/// damaged, none lost without a word. A batch whose "previous" pointer is
/// damaged sends the walk off the chain's pointers (the chain found again
/// by a rescan of the ring, which passes over the damaged batch): what the
/// session held less what the read gave is counted.
#[test]
fn a_read_gives_every_record_or_counts_it_damaged() {
    let store = mixed_store();
    let image = store.into_flash().into_inner();
    let used = image.image().iter().rposition(|b| *b != 0xFF).unwrap() + 1;
    let mount = |img: SimFlash| {
        S::mount(
            Esp32Flash::new(img).unwrap(),
            config(),
            MountMode::ExistingOnly,
        )
    };
    let mut sound = mount(image.clone()).unwrap();
    let mut held = Vec::new();
    for id in IDS {
        held.push(
            whole(&mut sound, id, BackendFormat::Unknown)
                .unwrap()
                .0
                .len() as u32,
        );
    }
    let (mut checked, mut short) = (0u32, 0u32);
    for addr in (4096..used).step_by(13) {
        let mut img = image.clone();
        img.flip_bit(addr, (addr % 8) as u8).unwrap();
        let (Ok(mut a), Ok(mut b)) = (mount(img.clone()), mount(img)) else {
            continue;
        };
        let r = a.mount_report();
        if r.ignored_batches > 0 || r.sealed_head || r.resumed_head {
            continue;
        }
        for (id, &n) in IDS.iter().zip(&held) {
            let (Ok((got, wd)), Ok((sgot, sd, _))) = (
                whole(&mut a, id, BackendFormat::Unknown),
                streamed(&mut b, id, BackendFormat::Unknown),
            ) else {
                continue;
            };
            let given = got.len() as u32;
            assert!(
                given + wd >= n,
                "flip at 0x{addr:x}: {id}: {given} given, {wd} damaged, of {n}"
            );
            let streamed = sgot.len() as u32;
            assert!(
                streamed + sd >= n,
                "flip at 0x{addr:x}: {id}: {streamed} streamed, {sd} damaged, of {n}"
            );
            short += u32::from(given < n);
            checked += 1;
        }
    }
    assert!(
        checked > 1000 && short > 50,
        "{checked} reads, {short} short"
    );
}
