//! What the NOR-flash simulator costs, so that crash sweeps can be sized.
//!
//! Every benchmark runs on a 1 MiB ESP32 flash (4 B words, 4 KiB sectors,
//! unlimited rewrites), walking its address space so that no single sector
//! stays hot in the cache:
//!
//! - `sim/program_256B`: one 256 B page program.
//! - `sim/erase_4KiB`: one sector erase.
//! - `sim/read_4KiB`: one 4 KiB read.
//! - `sim_copy_1MiB/snapshot` against `sim_copy_1MiB/image`: a crash sweep
//!   forks every run from a `snapshot()`, which shares sectors until one side
//!   writes them, so it must cost far less than copying the whole image. The
//!   ratio of the two, measured in the same run, is the figure that matters.
//!   `sim_copy_1MiB/snapshot_then_program` adds the first write to the fork,
//!   which copies the one sector it touches: the real cost of a fork.

use std::hint::black_box;

use clawmem_sim::{Preset, SimFlash};
use criterion::{criterion_group, criterion_main, Criterion, Throughput};

const CAPACITY_BYTES: usize = 1024 * 1024;
const PAGE_BYTES: usize = 256;
const SECTOR_BYTES: usize = 4096;

/// A 1 MiB ESP32 flash with every sector written once, so that no two
/// sectors share storage (a fresh flash shares one erased sector).
fn written_flash() -> SimFlash {
    let mut flash = SimFlash::new(
        Preset::Esp32
            .model(CAPACITY_BYTES)
            .expect("1 MiB is a whole number of ESP32 sectors"),
    );
    let page: Vec<u8> = (0..PAGE_BYTES).map(|i| (i * 31) as u8).collect();
    for offset in (0..CAPACITY_BYTES).step_by(SECTOR_BYTES) {
        flash
            .program(offset as u32, &page)
            .expect("program in bounds");
    }
    flash
}

fn calls(c: &mut Criterion) {
    let mut group = c.benchmark_group("sim");

    group.throughput(Throughput::Bytes(PAGE_BYTES as u64));
    group.bench_function("program_256B", |b| {
        let mut flash = written_flash();
        let page: Vec<u8> = (0..PAGE_BYTES).map(|i| !(i as u8)).collect();
        let mut offset = 0;
        b.iter(|| {
            flash
                .program(black_box(offset as u32), black_box(&page))
                .expect("ESP32 words may be programmed again");
            offset = (offset + PAGE_BYTES) % CAPACITY_BYTES;
        });
    });

    group.throughput(Throughput::Bytes(SECTOR_BYTES as u64));
    group.bench_function("erase_4KiB", |b| {
        let mut flash = written_flash();
        let mut offset = 0;
        b.iter(|| {
            flash
                .erase(black_box(offset as u32), (offset + SECTOR_BYTES) as u32)
                .expect("erase in bounds");
            offset = (offset + SECTOR_BYTES) % CAPACITY_BYTES;
        });
    });

    group.bench_function("read_4KiB", |b| {
        let mut flash = written_flash();
        let mut buf = vec![0u8; SECTOR_BYTES];
        let mut offset = 0;
        b.iter(|| {
            flash
                .read(black_box(offset as u32), &mut buf)
                .expect("read in bounds");
            black_box(&buf);
            offset = (offset + SECTOR_BYTES) % CAPACITY_BYTES;
        });
    });
    group.finish();
}

fn copies(c: &mut Criterion) {
    let flash = written_flash();
    let mut group = c.benchmark_group("sim_copy_1MiB");
    group.bench_function("snapshot", |b| b.iter(|| black_box(&flash).snapshot()));
    group.bench_function("image", |b| b.iter(|| black_box(&flash).image()));
    group.bench_function("snapshot_then_program", |b| {
        b.iter(|| {
            let mut fork = black_box(&flash).snapshot();
            fork.program(0, &[0u8; PAGE_BYTES])
                .expect("ESP32 words may be programmed again");
            fork
        })
    });
    group.finish();
}

criterion_group!(benches, calls, copies);
criterion_main!(benches);
