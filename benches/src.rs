//! Benchmarks live under `benches/`:
//!
//! - `sim`: what the NOR-flash simulator costs per call (256 B page program,
//!   4 KiB sector erase, 4 KiB read) and what a copy-on-write `snapshot()` of
//!   a 1 MiB flash costs next to a full `image()` copy. Run with
//!   `cargo bench -p clawmem-benches --bench sim`.
//! - `engines`: clawmem against `sequential-storage` (version 8, uncached)
//!   on the same simulated 1 MiB ESP32 flash in the same run: append,
//!   history, mount (empty, full, after a power cut), memory store and
//!   recall, compaction. Run with
//!   `cargo bench -p clawmem-benches --bench engines`; it first prints the
//!   host append throughput ratio of [`append_throughput_ratio`].
//!
//! This library holds what the benches share: the flash, the workloads and
//! the host append throughput comparison.

use std::hint::black_box;
use std::time::{Duration, Instant};

use clawmem::{BackendFormat, Config, Record, RecordType, Store};
use clawmem_sim::peers::seqstore::AsyncNor;
use clawmem_sim::{Esp32Flash, Preset, SimFlash};
use embassy_futures::block_on;
use sequential_storage::cache::Cache;
use sequential_storage::queue::{QueueConfig, QueueStorage};

/// Partition size of every engine bench.
pub const CAPACITY_BYTES: usize = 1024 * 1024;

/// Session table size of the benched clawmem store (as `compare` uses).
pub const SESSIONS: usize = 128;

/// The benched clawmem store.
pub type ClawStore = Store<Esp32Flash, SESSIONS>;

/// `sequential-storage` on the simulator.
pub type SsFlash = AsyncNor<Esp32Flash>;

/// Appends timed between two fresh partitions: 500 x 200 B stays below
/// clawmem's 150 KiB session limit and well inside 1 MiB for both engines.
pub const APPEND_CHUNK: usize = 500;

/// A blank 1 MiB ESP32 partition (4 B words, 4 KiB sectors, rewrites).
pub fn esp32() -> Esp32Flash {
    Esp32Flash::new(SimFlash::new(
        Preset::Esp32
            .model(CAPACITY_BYTES)
            .expect("1 MiB is a whole number of ESP32 sectors"),
    ))
    .expect("the ESP32 model has 4 B words and 4 KiB sectors")
}

/// A freshly formatted clawmem store on [`esp32`] with `config`.
pub fn clawmem_formatted(config: Config) -> ClawStore {
    ClawStore::format(esp32(), config).expect("1 MiB formats")
}

/// Body of record `i`: a chat message of exactly 200 bytes.
pub fn body_200(i: usize) -> Vec<u8> {
    let mut b = format!("{{\"role\":\"user\",\"content\":\"message {i:08} ").into_bytes();
    b.resize(198, b'x');
    b.extend_from_slice(b"\"}");
    b
}

/// A user record of `body`.
pub fn user(body: &[u8]) -> Record<'_> {
    Record {
        kind: RecordType::User,
        format: BackendFormat::OpenAiCompatible,
        body,
    }
}

/// The queue of the benches: one `sequential-storage` queue over the whole
/// partition, uncached (the crate's default and the `compare` peer's).
pub fn queue(
    flash: &mut SsFlash,
) -> QueueStorage<
    &mut SsFlash,
    Cache<
        sequential_storage::cache::Uncached,
        sequential_storage::cache::Uncached,
        sequential_storage::cache::Uncached,
    >,
> {
    QueueStorage::new(
        flash,
        QueueConfig::new(0..CAPACITY_BYTES as u32),
        Cache::new_uncached(),
    )
}

/// Times `n` appends of a 200 B record to one clawmem session, starting
/// from a freshly formatted partition every [`APPEND_CHUNK`] appends (the
/// formats are not timed).
pub fn time_clawmem_appends(n: usize) -> Duration {
    time_clawmem_appends_over(n, 1)
}

/// [`time_clawmem_appends`] spread round-robin over `sessions` sessions
/// (with 20, each holds 25 records per chunk, as an agent's sessions do;
/// with 1, the session grows to 500 records and its index is rewritten
/// every 32 batches).
pub fn time_clawmem_appends_over(n: usize, sessions: usize) -> Duration {
    let ids: Vec<String> = (0..sessions.max(1))
        .map(|i| format!("chat:bench:{i}"))
        .collect();
    let base = clawmem_formatted(Config::default()).into_flash();
    let bodies: Vec<Vec<u8>> = (0..APPEND_CHUNK).map(body_200).collect();
    let mut total = Duration::ZERO;
    let mut done = 0;
    while done < n {
        let k = (n - done).min(APPEND_CHUNK);
        let mut store = ClawStore::mount(
            base.clone(),
            Config::default(),
            clawmem::MountMode::ExistingOnly,
        )
        .expect("a formatted partition mounts");
        let start = Instant::now();
        for (j, b) in bodies[..k].iter().enumerate() {
            store
                .append(&ids[j % ids.len()], &[user(b)], false)
                .expect("100 KiB fit one session");
        }
        total += start.elapsed();
        black_box(&store);
        done += k;
    }
    total
}

/// Times `n` pushes of a 200 B record to a `sequential-storage` queue over
/// the whole partition, starting from a blank partition every
/// [`APPEND_CHUNK`] pushes (not timed).
pub fn time_seqstore_pushes(n: usize) -> Duration {
    let bodies: Vec<Vec<u8>> = (0..APPEND_CHUNK).map(body_200).collect();
    let mut total = Duration::ZERO;
    let mut done = 0;
    while done < n {
        let k = (n - done).min(APPEND_CHUNK);
        let mut flash = AsyncNor::new(esp32());
        let mut q = queue(&mut flash);
        let start = Instant::now();
        for b in &bodies[..k] {
            block_on(q.push(b, false)).expect("100 KiB fit the queue");
        }
        total += start.elapsed();
        black_box(&mut q);
        done += k;
    }
    total
}

/// Host append throughput of both engines on the same simulated flash.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct AppendThroughput {
    /// Appends timed on each engine.
    pub appends: usize,
    /// clawmem appends per second.
    pub clawmem_per_s: f64,
    /// `sequential-storage` queue pushes per second.
    pub seqstore_per_s: f64,
}

impl AppendThroughput {
    /// clawmem's throughput over `sequential-storage`'s (above 1: clawmem
    /// appends faster on the host).
    pub fn ratio(&self) -> f64 {
        self.clawmem_per_s / self.seqstore_per_s
    }
}

/// Times `n` 200 B appends on each engine ([`time_clawmem_appends`],
/// [`time_seqstore_pushes`]), interleaved in two halves so that a change of
/// machine load hits both, and returns both throughputs.
pub fn append_throughput_ratio(n: usize) -> AppendThroughput {
    append_throughput_ratio_over(n, 1)
}

/// [`append_throughput_ratio`] with clawmem's appends spread over
/// `sessions` sessions ([`time_clawmem_appends_over`]).
pub fn append_throughput_ratio_over(n: usize, sessions: usize) -> AppendThroughput {
    let n = n.max(2);
    let half = n / 2;
    let mut claw = Duration::ZERO;
    let mut ss = Duration::ZERO;
    for k in [half, n - half] {
        claw += time_clawmem_appends_over(k, sessions);
        ss += time_seqstore_pushes(k);
    }
    let per_s = |d: Duration| n as f64 / d.as_secs_f64().max(1e-9);
    AppendThroughput {
        appends: n,
        clawmem_per_s: per_s(claw),
        seqstore_per_s: per_s(ss),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bodies_are_200_bytes_of_json() {
        for i in [0, 7, 12_345_678] {
            let b = body_200(i);
            assert_eq!(b.len(), 200);
            serde_json_free_check(&b);
        }
    }

    /// Starts like a JSON object and ends like one (no serde here).
    fn serde_json_free_check(b: &[u8]) {
        assert!(b.starts_with(b"{\"role\"") && b.ends_with(b"\"}"));
    }

    #[test]
    fn both_engines_append() {
        let t = append_throughput_ratio(20);
        assert_eq!(t.appends, 20);
        assert!(t.ratio() > 0.0 && t.ratio().is_finite());
    }
}
