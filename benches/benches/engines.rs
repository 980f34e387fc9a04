//! clawmem against `sequential-storage` (version 8, uncached), on the same
//! simulated 1 MiB ESP32 flash (4 B words, 4 KiB sectors, in RAM) in the
//! same run. What is timed is host CPU time of the engine plus the
//! simulator, not modelled device time (`compare` reports that).
//!
//! Before the groups it prints the host append throughput ratio
//! ([`clawmem_benches::append_throughput_ratio`]) twice:
//! `append throughput ratio clawmem/sequential-storage: X.XX`, once with
//! all of clawmem's appends in one session (which grows to 500 records, so
//! its index is rewritten every 32 batches) and once spread over 20
//! sessions of 25 records, as an agent's sessions are.
//!
//! Each group puts clawmem next to the crate's nearest call:
//!
//! - `append_200B`: one 200 B record appended to one clawmem session, against
//!   one `QueueStorage::push` to a queue over the whole partition. Both start
//!   from a blank partition every 500 appends (not timed).
//! - `history_40`: the history of a 40-record session, against iterating a
//!   queue of 40 items (`QueueStorage::iter`, each item copied out).
//! - `mount_empty`, `mount_full`, `mount_after_cut`: `Store::mount` of a
//!   formatted partition, of one filled until the store refused an append,
//!   and right after a power cut in the middle of an append (the cut is
//!   armed on the simulator, a prefix of the program in flight lands). The
//!   crate has no mount step: its nearest is what an application does at
//!   boot, `QueueStorage::new` and a `peek` at the oldest item
//!   (`seqstore_queue_peek`, on a queue in the same state), and the
//!   `compare` peer's mount (`seqstore_peer`: a peek at each of its 120
//!   session queues and one walk of its map, with sessions of 36 x 200 B in
//!   every queue for `full`).
//! - `memory_store`: `Store::memory_store` of a new item, against
//!   `MapStorage::store_item` of the same text under a new `u32` key (map
//!   over the whole partition); 64 per fresh partition.
//! - `memory_recall`: `memory_recall` of one label (8 of 64 items carry it,
//!   limit 8), against `MapStorage::fetch_item` of one key of 64
//!   (`seqstore_map_fetch`), and against walking the whole map
//!   (`fetch_all_items`) as the `compare` peer recalls (`seqstore_map_scan`).
//! - `compaction`: the append that takes a 20-record session with tool
//!   turns over a 6 KiB limit and runs ESP-Claw's turn-aware compaction.
//!   The crate has no compaction; the `compare` peer's (erase the session's
//!   queue, push the kept records again, at its 6,132 B limit) stands in.
//!
//! Run with `cargo bench -p clawmem-benches --bench engines`; each bench
//! measures for 2 s over 20 samples.

use std::hint::black_box;
use std::time::{Duration, Instant};

use clawmem::memory::ItemInput;
use clawmem::{BackendFormat, Config, Error, MountMode, Record, RecordType};
use clawmem_benches::{
    append_throughput_ratio, append_throughput_ratio_over, body_200, clawmem_formatted, esp32,
    queue, user, ClawStore, SsFlash, CAPACITY_BYTES,
};
use clawmem_sim::peers::seqstore::{AsyncNor, SeqStorageDriver};
use clawmem_sim::replay::Driver;
use clawmem_sim::trace::{Format, RecordKind, TraceRecord};
use clawmem_sim::{CutPoint, Esp32Flash, PowerCut, SimFlash, Tear};
use criterion::{criterion_group, criterion_main, BatchSize, BenchmarkGroup, Criterion};
use embassy_futures::block_on;
use sequential_storage::cache::{Cache, Uncached};
use sequential_storage::map::{MapConfig, MapStorage};

type Map<'a> = MapStorage<u32, &'a mut SsFlash, Cache<Uncached, Uncached, Uncached, u32>>;

fn map(flash: &mut SsFlash) -> Map<'_> {
    MapStorage::new(
        flash,
        MapConfig::new(0..CAPACITY_BYTES as u32),
        Cache::new_uncached(),
    )
}

fn group<'a>(
    c: &'a mut Criterion,
    name: &str,
) -> BenchmarkGroup<'a, criterion::measurement::WallTime> {
    let mut g = c.benchmark_group(name);
    g.measurement_time(Duration::from_secs(2))
        .warm_up_time(Duration::from_millis(500))
        .sample_size(20);
    g
}

/// Runs `op` `iters` times, timed, on a state that `fresh` rebuilds (not
/// timed) every `chunk` calls; `op` gets the call's index within the chunk.
fn chunked<S>(
    iters: u64,
    chunk: u64,
    mut fresh: impl FnMut() -> S,
    mut op: impl FnMut(&mut S, usize),
) -> Duration {
    let mut total = Duration::ZERO;
    let mut done = 0;
    while done < iters {
        let k = (iters - done).min(chunk);
        let mut state = fresh();
        let start = Instant::now();
        for i in 0..k {
            op(&mut state, i as usize);
        }
        total += start.elapsed();
        black_box(&mut state);
        done += k;
    }
    total
}

const SESSION: &str = "chat:bench:0";

fn throughput_ratio(_: &mut Criterion) {
    let t = append_throughput_ratio(4000);
    println!(
        "append throughput ratio clawmem/sequential-storage: {:.2} ({:.0} vs {:.0} appends/s, {} x 200 B each, one clawmem session)",
        t.ratio(),
        t.clawmem_per_s,
        t.seqstore_per_s,
        t.appends
    );
    let t = append_throughput_ratio_over(4000, 20);
    println!(
        "append throughput ratio clawmem/sequential-storage: {:.2} ({:.0} vs {:.0} appends/s, {} x 200 B each, 20 clawmem sessions)",
        t.ratio(),
        t.clawmem_per_s,
        t.seqstore_per_s,
        t.appends
    );
}

fn append(c: &mut Criterion) {
    let bodies: Vec<Vec<u8>> = (0..500).map(body_200).collect();
    let formatted = clawmem_formatted(Config::default()).into_flash();
    let mut g = group(c, "append_200B");
    g.bench_function("clawmem", |b| {
        b.iter_custom(|iters| {
            chunked(
                iters,
                500,
                || {
                    ClawStore::mount(
                        formatted.clone(),
                        Config::default(),
                        MountMode::ExistingOnly,
                    )
                    .unwrap()
                },
                |s, i| {
                    s.append(SESSION, &[user(&bodies[i])], false).unwrap();
                },
            )
        })
    });
    g.bench_function("seqstore_queue_push", |b| {
        b.iter_custom(|iters| {
            chunked(
                iters,
                500,
                || AsyncNor::new(esp32()),
                |f, i| block_on(queue(f).push(&bodies[i], false)).unwrap(),
            )
        })
    });
    g.finish();
}

fn history(c: &mut Criterion) {
    let mut store = clawmem_formatted(Config::default());
    let mut ss = AsyncNor::new(esp32());
    for i in 0..40 {
        let body = body_200(i);
        store.append(SESSION, &[user(&body)], false).unwrap();
        block_on(queue(&mut ss).push(&body, false)).unwrap();
    }
    let mut buf = vec![0u8; 16 * 1024];
    let mut g = group(c, "history_40");
    g.bench_function("clawmem", |b| {
        b.iter(|| {
            let h = store
                .history(SESSION, BackendFormat::Unknown, &mut buf)
                .unwrap();
            let n: usize = h.iter().map(|r| black_box(r.body).len()).sum();
            assert_eq!(n, 40 * 200);
        })
    });
    g.bench_function("seqstore_queue_iter", |b| {
        let mut item = vec![0u8; 4096];
        b.iter(|| {
            block_on(async {
                let mut q = queue(&mut ss);
                let mut it = q.iter().await.unwrap();
                let mut n = 0;
                while let Some(e) = it.next(&mut item).await.unwrap() {
                    buf[n..n + e.len()].copy_from_slice(&e);
                    n += e.len();
                }
                assert_eq!(n, 40 * 200);
            })
        })
    });
    g.finish();
}

/// clawmem states for the mount benches: formatted, full, after a cut.
fn clawmem_states() -> [Esp32Flash; 3] {
    let empty = clawmem_formatted(Config::default()).into_flash();
    // Full: 40-record sessions until the store refuses an append.
    let mut store =
        ClawStore::mount(empty.clone(), Config::default(), MountMode::ExistingOnly).unwrap();
    let mut half = None;
    'fill: for s in 0.. {
        let id = format!("chat:bench:{s}");
        for i in 0..40 {
            match store.append(&id, &[user(&body_200(i))], i == 39) {
                Ok(_) => {}
                Err(Error::Full { .. } | Error::TooManySessions { .. }) => break 'fill,
                Err(e) => panic!("filling clawmem: {e:?}"),
            }
        }
        if s == 40 {
            half = Some(store.flash().clone());
        }
    }
    let full = store.into_flash();
    // After a cut: half full (41 sessions), power lost in the middle of
    // the second program call of the next append.
    let half = half.expect("41 sessions fit 1 MiB");
    let mut store = ClawStore::mount(half, Config::default(), MountMode::ExistingOnly).unwrap();
    store.flash_mut().flash_mut().arm_power_cut(PowerCut {
        seed: 7,
        at: CutPoint::Op(1),
        tear: Tear::Prefix(64),
    });
    assert!(store
        .append("chat:bench:cut", &[user(&body_200(0))], false)
        .is_err());
    let mut cut = store.into_flash();
    cut.flash_mut().restore_power();
    [empty, full, cut]
}

/// Queue states for the mount benches: blank, full, after a cut.
fn queue_states() -> [SsFlash; 3] {
    let empty = AsyncNor::new(esp32());
    let mut full = empty.clone();
    let mut half = None;
    for i in 0.. {
        match block_on(queue(&mut full).push(&body_200(i), false)) {
            Ok(()) => {}
            Err(sequential_storage::Error::FullStorage) => break,
            Err(e) => panic!("filling the queue: {e:?}"),
        }
        if i == 41 * 40 {
            half = Some(full.clone());
        }
    }
    let mut cut = half.expect("half the queue");
    cut.inner_mut().flash_mut().arm_power_cut(PowerCut {
        seed: 7,
        at: CutPoint::Op(1),
        tear: Tear::Prefix(64),
    });
    assert!(block_on(queue(&mut cut).push(&body_200(0), false)).is_err());
    cut.inner_mut().flash_mut().restore_power();
    [empty, full, cut]
}

fn trace_record(kind: RecordKind, body: Vec<u8>) -> TraceRecord {
    TraceRecord {
        kind,
        format: Format::Openai,
        body: String::from_utf8(body).unwrap(),
    }
}

/// `compare` peer states for the mount benches: blank, every session
/// queue holding 36 x 200 B, after a cut with 60 sessions.
fn peer_states() -> [SimFlash; 3] {
    let blank = SimFlash::new(esp32().into_inner().model().clone());
    let mut d = SeqStorageDriver::<Esp32Flash>::new(blank.clone()).unwrap();
    let slots = d.layout().slots;
    let mut half = None;
    for s in 0..slots {
        let id = format!("chat:bench:{s}");
        for i in 0..36 {
            let r = [trace_record(RecordKind::User, body_200(i))];
            let out = d.append(&id, &r, false).unwrap();
            assert!(!out.compacted && !out.blocked);
        }
        if s == 59 {
            half = Some(d.flash().clone());
        }
    }
    let full = d.into_flash();
    let mut d = SeqStorageDriver::<Esp32Flash>::new(half.unwrap()).unwrap();
    d.nor_mut().flash_mut().arm_power_cut(PowerCut {
        seed: 7,
        at: CutPoint::Op(1),
        tear: Tear::Prefix(64),
    });
    let r = [trace_record(RecordKind::User, body_200(0))];
    assert!(d.append("chat:bench:0", &r, false).is_err());
    let mut cut = d.into_flash();
    cut.restore_power();
    [blank, full, cut]
}

fn mount(c: &mut Criterion) {
    let claw = clawmem_states();
    let queues = queue_states();
    let peers = peer_states();
    for (k, name) in ["mount_empty", "mount_full", "mount_after_cut"]
        .into_iter()
        .enumerate()
    {
        let mut g = group(c, name);
        g.bench_function("clawmem", |b| {
            b.iter_batched(
                || claw[k].clone(),
                |f| ClawStore::mount(f, Config::default(), MountMode::ExistingOnly).unwrap(),
                BatchSize::SmallInput,
            )
        });
        g.bench_function("seqstore_queue_peek", |b| {
            let mut item = vec![0u8; 4096];
            b.iter_batched(
                || queues[k].clone(),
                |mut f| {
                    let n = block_on(queue(&mut f).peek(&mut item))
                        .unwrap()
                        .map(|d| d.len());
                    assert_eq!(n, (k != 0).then_some(200));
                    f
                },
                BatchSize::SmallInput,
            )
        });
        g.bench_function("seqstore_peer", |b| {
            b.iter_batched(
                || peers[k].clone(),
                |f| SeqStorageDriver::<Esp32Flash>::new(f).unwrap(),
                BatchSize::SmallInput,
            )
        });
        g.finish();
    }
}

fn content(i: usize) -> String {
    format!("fact {i:05}: the user mentioned that their favourite place number {i} is worth remembering")
}

fn memory(c: &mut Criterion) {
    let labels: Vec<String> = (0..8).map(|l| format!("label{l}")).collect();
    let formatted = clawmem_formatted(Config::default()).into_flash();
    let mut g = group(c, "memory_store");
    g.bench_function("clawmem", |b| {
        b.iter_custom(|iters| {
            chunked(
                iters,
                64,
                || {
                    ClawStore::mount(
                        formatted.clone(),
                        Config::default(),
                        MountMode::ExistingOnly,
                    )
                    .unwrap()
                },
                |s, i| {
                    let text = content(i);
                    let input = ItemInput::new(&text).tags(&labels[i % 8]);
                    let stored = s
                        .memory_store(&input, 1_700_000_000 + i as u32, false)
                        .unwrap();
                    assert!(stored.changed);
                },
            )
        })
    });
    g.bench_function("seqstore_map_store", |b| {
        let mut buf = vec![0u8; 4096];
        b.iter_custom(|iters| {
            chunked(
                iters,
                64,
                || AsyncNor::new(esp32()),
                |f, i| {
                    let value = format!("{}\u{1f}{}", content(i), labels[i % 8]);
                    block_on(map(f).store_item(&mut buf, &(i as u32), &value.as_bytes())).unwrap();
                },
            )
        })
    });
    g.finish();

    // 64 items, 8 per label, on both.
    let mut store = ClawStore::mount(
        formatted.clone(),
        Config::default(),
        MountMode::ExistingOnly,
    )
    .unwrap();
    let mut ss = AsyncNor::new(esp32());
    let mut buf = vec![0u8; 4096];
    for i in 0..64 {
        let text = content(i);
        let input = ItemInput::new(&text).tags(&labels[i % 8]);
        store
            .memory_store(&input, 1_700_000_000 + i as u32, false)
            .unwrap();
        let value = format!("{text}\u{1f}{}", labels[i % 8]);
        block_on(map(&mut ss).store_item(&mut buf, &(i as u32), &value.as_bytes())).unwrap();
    }
    let stocked = store.into_flash();
    let mut g = group(c, "memory_recall");
    g.bench_function("clawmem", |b| {
        b.iter_custom(|iters| {
            // Recalls write access records: a fresh copy every 1,000.
            chunked(
                iters,
                1000,
                || {
                    ClawStore::mount(stocked.clone(), Config::default(), MountMode::ExistingOnly)
                        .unwrap()
                },
                |s, i| {
                    let mut n = 0;
                    s.memory_recall(&[labels[i % 8].as_str()], 8, 1_800_000_000, |it| {
                        n += black_box(it).content().len()
                    })
                    .unwrap();
                    assert!(n > 0);
                },
            )
        })
    });
    g.bench_function("seqstore_map_fetch", |b| {
        let mut i = 0u32;
        b.iter(|| {
            let v = block_on(map(&mut ss).fetch_item::<&[u8]>(&mut buf, &(i % 64)))
                .unwrap()
                .map(<[u8]>::len);
            assert!(v.is_some());
            i += 1;
        })
    });
    g.bench_function("seqstore_map_scan", |b| {
        let mut i = 0usize;
        b.iter(|| {
            let want = labels[i % 8].as_bytes();
            let mut hits = 0;
            block_on(async {
                let mut m = map(&mut ss);
                let mut it = m.fetch_all_items(&mut buf).await.unwrap();
                while let Some((_, v)) = it.next::<&[u8]>(&mut buf).await.unwrap() {
                    if hits < 8 && v.ends_with(want) {
                        hits += 1;
                    }
                }
            });
            assert_eq!(hits, 8);
            i += 1;
        })
    });
    g.finish();
}

/// Five tool turns of 1,254 B of log each; the last `assistant_final` takes
/// the session from 6,019 B to 6,270 B, over both 6 KiB limits.
fn turns() -> Vec<(RecordKind, Vec<u8>)> {
    let mut v = Vec::new();
    for t in 0..5 {
        for (kind, len) in [
            (RecordKind::User, 100),
            (RecordKind::AssistantTool, 100),
            (RecordKind::ToolResult, 800),
            (RecordKind::AssistantFinal, 250),
        ] {
            let mut body = format!("{{\"turn\":{t},\"text\":\"").into_bytes();
            body.resize(len - 2, b'z');
            body.extend_from_slice(b"\"}");
            v.push((kind, body));
        }
    }
    v
}

fn record_type(k: RecordKind) -> RecordType {
    match k {
        RecordKind::User => RecordType::User,
        RecordKind::AssistantFinal => RecordType::AssistantFinal,
        RecordKind::AssistantTool => RecordType::AssistantTool,
        RecordKind::ToolResult => RecordType::ToolResult,
    }
}

fn record((kind, body): &(RecordKind, Vec<u8>)) -> Record<'_> {
    Record {
        kind: record_type(*kind),
        format: BackendFormat::OpenAiCompatible,
        body,
    }
}

fn compaction(c: &mut Criterion) {
    let turns = turns();
    let (last, before) = turns.split_last().unwrap();
    let config = Config {
        session_size_limit_bytes: 6 * 1024,
        ..Config::default()
    };
    let mut store = clawmem_formatted(config);
    for (i, r) in before.iter().enumerate() {
        let done = r.0 == RecordKind::AssistantFinal;
        let out = store.append(SESSION, &[record(r)], done).unwrap();
        assert!(!out.compacted, "record {i}");
    }
    let claw = store.into_flash();
    let mut d =
        SeqStorageDriver::<Esp32Flash>::new(SimFlash::new(esp32().into_inner().model().clone()))
            .unwrap();
    for r in before {
        let done = r.0 == RecordKind::AssistantFinal;
        let out = d
            .append(SESSION, &[trace_record(r.0, r.1.clone())], done)
            .unwrap();
        assert!(!out.compacted);
    }
    let peer = d.into_flash();
    let last_trace = [trace_record(last.0, last.1.clone())];

    let mut g = group(c, "compaction");
    g.bench_function("clawmem", |b| {
        b.iter_batched(
            || ClawStore::mount(claw.clone(), config, MountMode::ExistingOnly).unwrap(),
            |mut s| {
                assert!(s.append(SESSION, &[record(last)], true).unwrap().compacted);
                s
            },
            BatchSize::SmallInput,
        )
    });
    g.bench_function("seqstore_peer", |b| {
        b.iter_batched(
            || {
                let mut d = SeqStorageDriver::<Esp32Flash>::new(peer.clone()).unwrap();
                // As after a history read: the session's size is known.
                d.history(SESSION).unwrap();
                d
            },
            |mut d| {
                assert!(d.append(SESSION, &last_trace, true).unwrap().compacted);
                d
            },
            BatchSize::SmallInput,
        )
    });
    g.finish();
}

criterion_group!(
    benches,
    throughput_ratio,
    append,
    history,
    mount,
    memory,
    compaction
);
criterion_main!(benches);
