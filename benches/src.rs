//! Benchmarks live under `benches/`:
//!
//! - `sim`: what the NOR-flash simulator costs per call (256 B page program,
//!   4 KiB sector erase, 4 KiB read) and what a copy-on-write `snapshot()` of
//!   a 1 MiB flash costs next to a full `image()` copy. Run with
//!   `cargo bench -p clawmem-benches --bench sim`.
