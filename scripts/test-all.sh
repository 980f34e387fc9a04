#!/usr/bin/env bash
# Installs what clawmem's tests need on a fresh machine (rustup targets and
# components; Debian's libcjson-dev and libclang-dev) and runs them all:
# format, lints, the whole test suite, compare and fill with the littlefs
# peer (clawmem-sim's `littlefs` feature), the no_std builds of the core, and
# the firmware example with its size report (scripts/firmware-size.sh), and
# the engine on a Cortex-M4F under QEMU (scripts/qemu-replay.sh, which
# installs qemu-system-arm itself), and the C API with its C tests
# (scripts/c-tests.sh, which installs cbindgen with cargo).
set -euo pipefail
cd "$(dirname "$0")/.."
. scripts/lib.sh

# Each step says how long the run has taken so far, so that the slow steps
# show in CI's log (the whole run must stay under 30 minutes on 2 cores).
started=$SECONDS
step() { printf '\n==> [%4ds] %s\n' "$((SECONDS - started))" "$*"; }

# A run from a clean clone builds everything once per feature set, so
# incremental compilation only adds work, and the test builds need line
# tables for backtraces, not full debug info. Release builds are not affected:
# the size and stack reports build with their own settings.
export CARGO_INCREMENTAL=0
export CARGO_PROFILE_DEV_DEBUG=line-tables-only
export CARGO_PROFILE_TEST_DEBUG=line-tables-only

step "toolchain (rust-toolchain.toml)"
rustup show active-toolchain || rustup toolchain install
rustup component add rustfmt clippy
rustup target add thumbv7em-none-eabihf riscv32imc-unknown-none-elf riscv32imac-unknown-none-elf

step "Debian packages the tests need"
# cJSON for the oracle of the memory tools' JSON replies
# (sim/tests/espclaw_replies.rs builds sim/tests/cjson/memory_replies.c).
if [ ! -f /usr/include/cjson/cJSON.h ]; then
    apt_install libcjson-dev
fi
# libclang for bindgen: compare's esp-claw-littlefs peer builds littlefs's C
# library through littlefs2 (clawmem-sim's `littlefs` feature).
if ! dpkg -s libclang-dev >/dev/null 2>&1; then
    apt_install libclang-dev
fi

step "cargo fmt --check"
cargo fmt --all -- --check

step "cargo clippy (with clawmem-sim's littlefs peer, so that its code is linted in the one pass)"
cargo clippy --workspace --all-targets --features clawmem-sim/littlefs -- -D warnings

step "cargo test"
cargo test --workspace

step "compare and fill against littlefs too (clawmem-sim's littlefs feature)"
cargo test -p clawmem-sim --features littlefs --test compare --test fill

step "fuzz harnesses as tests (fuzz/, outside the workspace)"
(cd fuzz && cargo test)

step "canary: the suite must catch an engine that skips a CRC check"
bash scripts/canary.sh

step "no_std builds of crates/clawmem"
for target in thumbv7em-none-eabihf riscv32imc-unknown-none-elf riscv32imac-unknown-none-elf; do
    cargo build -p clawmem --release --target "$target"
done

step "crates/clawmem without its optional features (sessions only) and with each alone"
for features in "" memory chat profiles; do
    cargo clippy -p clawmem --no-default-features --features "$features" --target thumbv7em-none-eabihf -- -D warnings
done
bash scripts/sessions-only.sh

step "the sector table (feature sector-table, format 10, off by default)"
# Its own tests (log/ring.rs, log/tests.rs, the store over a ring with
# holes in store/tests.rs), the scans without a checkpoint and the stuck
# collection (store/scan_tests.rs), the dead bytes per sector against an
# oracle (store/dead_tests.rs), the moves records (store/moves_tests.rs), the
# copy limit of relocation in part (store/copy_limit_tests.rs), and the suites
# that wrap the ring with it on
# (the power-cut campaigns of crash_consistency.rs among them): in
# debug builds the log checks after every change of the ring that the table
# holds together, and agrees with format 9's arithmetic until a sector is
# released out of order.
cargo clippy -p clawmem --features sector-table --all-targets -- -D warnings
cargo build -p clawmem --release --target thumbv7em-none-eabihf --features sector-table
cargo test -p clawmem --features sector-table --lib -- log:: store::tests store::scan_tests \
    store::dead_tests store::moves_tests store::copy_limit_tests
cargo test -p clawmem-tests --features clawmem/sector-table \
    --test engine_basics --test gc --test maintain --test power_loss --test model --test counters \
    --test history_stream --test crash_consistency
# The fill report's dead bytes and full-phase cleaning, and the 1% mount
# reads of large partitions with the table's checkpoints (the rest of
# fill.rs asks the engine state of a table of 32 to fit 4 KiB, which the
# table breaks: issue 12).
cargo test -p clawmem-sim --features sector-table --test fill -- \
    the_report_sums_the_dead_bytes_the_mounts_take_back \
    the_report_sets_full_phase_cleaning_against_its_bound \
    a_mount_reads_under_one_percent_of_large_partitions

step "firmware example (examples/firmware, outside the workspace): build and size report"
# The 32 KiB budget (--enforce) is not met yet (issue 11): until it is, a
# ceiling at today's figure, rounded up to 256 B, keeps the engine from
# growing. Lower it when the code shrinks. (Since the eighth round the
# report also counts the outlined code only the engine calls, 790 B then.)
# (Raised from 70912: by the scrub
# that moves only what shares a copy's sector, 638 B, which a nearly full
# store needs, as the old one relocated every older sector and answered
# Full; and by format 3's upgrade of version 2 images and 255-byte ids and
# by storing over-limit appends, 378 B; by the memory tools' replies in
# ESP-Claw's JSON, 2,966 B; and by idle-time maintenance that erases only
# as far ahead as the caller's writes reach, 180 B; by run-time flash units,
# Config::flash_units, which the C API needs, and History::record_at,
# 344 B; by checking a configuration's sizes in u64, so that a C caller's
# values near u32::MAX are refused rather than wrapped, 116 B; by format
# 4's geometry in the sector header, which refuses a mount with another
# sector or write unit size instead of misreading and then erasing the
# store, 220 B; by repairing a session's name that runs on into the next
# sector, 210 B; by format 5's mount that writes on after a torn chunk at
# the head instead of sealing the sector, so that a power cut costs only
# the bytes the torn write reached, 808 B; by streaming history reads,
# Store::history_stream and history_next, which share one walk with the
# whole read, 1,580 B; by format 6's memory item encoding, version 2,
# which leaves out what an item's other fields hold (references for labels
# and keywords), while version 1 is still read, 2,276 B; by format 7's
# plain puts, packed access records and a memory chain of 128 records
# kept in the work area, with the old record kinds still read, 952 B; by
# a read that keeps the items compaction would keep when damage shows more
# than the active set holds, and a scrub that reads a put's id on into the
# next sector, 238 B; by reads that find a chain again by scanning the log
# when a batch reached through a pointer fails its check (its pointer may
# have led past sound batches), 544 B; by format 8's sectors erased ahead,
# said in chunk flags and a header-only chunk, trusted by a remount so
# that it does not erase them again, and taken back before any of them is
# erased again, 1,168 B; by a mount that takes a full checkpoint met
# after the loaded one as the newest, so that a remount does not keep the
# older one's collected sector in use, and applies a delta's deletions
# before its sessions, so that a full table whose sessions were replaced
# mounts, 612 B; by format 9's cut waste, measured at mount, carried by
# checkpoints and counted as room by collection's cost check, so that a
# store cut near full takes the writes the uncut store took, 682 B; by a
# mount that loads a checkpoint ending in the head sector, found from the
# head's first chunk, rather than the older one the head's header names,
# so that it does not scan every chunk since that one, 450 B; by sessions
# beyond the RAM table (a working set over the checkpoints' directory:
# lookups, the collection that brings cold sessions in, the mount's stubs
# filled in one pass, full checkpoints that copy the cold sessions), which
# lets a table of 32 hold every session the flash does, 7,960 B. Lowered
# from 93184 by a word-sized tag for Error and word-aligned chunk and
# sector headers in RAM, 2,166 B; to 83968 by the engine's one-word
# internal error, 7,192 B; to 83200 by hot functions that return a word
# in registers instead of a bool or an Option through memory, 836 B.
# Raised from 69632 by reads and mounts that report what bit rot lost:
# a read counts the records its session holds that it could not give,
# and a mount leaves out, and reports, a batch off its session's chain or
# of no known session that fails its checksum, where it used to give its
# records to another session or lose them without a word, 144 B; then a
# mount without a sound checkpoint that starts a session from a sound base
# it has not met, 28 B, and one that counts a batch whose first part
# rotted at a sector's end, 32 B: 69,776 B; then deletions taken when
# the collection is stuck, 96 B: 69,872 B; the mount's loop over the
# checkpoints, restructured for the sector table, -4 B: 69,868 B; then
# the verified read that checks the CRC of a chunk whose length reads 0
# (a length rotted to 0 skipped the check, and a read returned bodies at
# a shifted offset as sound), 46 B: 69,914 B; then the dry run that
# checks a collection completes before it starts (a refused append wrote
# up to 62 MB while a session near the limit held the tail: docs/DESIGN.md,
# "Known gap"), 2,002 B: 71,916 B; 71,906 B at 10c706c; then a store short of room releasing the tail
# sectors a deletion left dead before it collects, as a mount does (the
# running store decided from a state no remount finds), 58 B: 71,964 B;
# then a full checkpoint before a deletion RAM cannot name whenever a
# session went cold since the last one (a mount found a deleted session
# again), 22 B: 71,986 B.)
# --by-source adds the engine code by source file, from a second build with
# line tables (the script fails if that build's code differs).
bash scripts/firmware-size.sh --ceiling 72000 --by-source

step "QEMU: traces through clawmem on a Cortex-M4F (examples/qemu, scripts/qemu-replay.sh)"
# Every run holds the engine to the 4 KiB stack budget (peak engine stack of
# any operation, measured on the target below the call site's SP).
budget=(--stack-budget 4096)
bash scripts/qemu-replay.sh traces/smoke.jsonl "${budget[@]}"
# The memory-heavy trace: stores, recalls, updates and forgets, with the
# compactions they start.
bash scripts/qemu-replay.sh traces/bfcl-memory.jsonl "${budget[@]}"
# 600 ops of bfcl-multi-turn in 5 rounds on 640 KiB: every sector is erased
# after the format (--require-wrap), so the log wraps the ring. A prefix
# alone never wraps: it holds all it wrote, and the reserves for a 150 KiB
# session fill a smaller partition first.
bash scripts/qemu-replay.sh traces/bfcl-multi-turn.jsonl --ops 600 --repeat 5 --size 640K --require-wrap \
    "${budget[@]}"
# The check must be able to fail: a corrupted expectation is a mismatch.
if bash scripts/qemu-replay.sh traces/smoke.jsonl --selftest-mismatch >/dev/null 2>&1; then
    echo "qemu-replay.sh --selftest-mismatch passed: the history check cannot fail" >&2
    exit 1
fi

step "ESP32-C3 example on esp-hal and esp-storage (examples/esp32c3, outside the workspace): build and sizes, not run"
(cd examples/esp32c3 && cargo fmt -- --check)
bash scripts/esp32c3-build.sh

step "C API (crates/clawmem-c, outside the workspace): fmt, clippy, header, C tests, C trace replays, RISC-V sizes"
(cd crates/clawmem-c && cargo fmt -- --check && cargo clippy --release -- -D warnings)
bash scripts/c-tests.sh

step "all checks passed"
