#!/usr/bin/env bash
# Installs what clawmem's tests need on a fresh machine (rustup targets and
# components; Debian packages once the peers need them) and runs them all:
# format, lints, the whole test suite, the no_std builds of the core, and
# the firmware example with its size report (scripts/firmware-size.sh).
set -euo pipefail
cd "$(dirname "$0")/.."

step() { printf '\n==> %s\n' "$*"; }

step "toolchain (rust-toolchain.toml)"
rustup show active-toolchain || rustup toolchain install
rustup component add rustfmt clippy
rustup target add thumbv7em-none-eabihf riscv32imc-unknown-none-elf

step "cargo fmt --check"
cargo fmt --all -- --check

step "cargo clippy"
cargo clippy --workspace --all-targets -- -D warnings

step "cargo test"
cargo test --workspace

step "fuzz harnesses as tests (fuzz/, outside the workspace)"
(cd fuzz && cargo test)

step "canary: the suite must catch an engine that skips a CRC check"
bash scripts/canary.sh

step "no_std builds of crates/clawmem"
for target in thumbv7em-none-eabihf riscv32imc-unknown-none-elf; do
    cargo build -p clawmem --release --target "$target"
done

step "firmware example (examples/firmware, outside the workspace): build and size report"
bash scripts/firmware-size.sh

step "all checks passed"
