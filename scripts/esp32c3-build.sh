#!/usr/bin/env bash
# Builds examples/esp32c3 (clawmem on an ESP32-C3's SPI flash, with esp-hal
# and esp-storage) for riscv32imc-unknown-none-elf on the pinned stable
# toolchain, in release (opt-level "z", LTO), and prints the ELF's sections.
# It is built only: running it needs a board (see examples/esp32c3/README.md).
# Needs nothing but rustup and cargo (no espflash, no ESP-IDF).
#
#   bash scripts/esp32c3-build.sh
set -euo pipefail
cd "$(dirname "$0")/.."
. scripts/lib.sh

TARGET=riscv32imc-unknown-none-elf
EXAMPLE=examples/esp32c3
BIN=clawmem-esp32c3

rustup target add "$TARGET" >/dev/null
# llvm-size/llvm-nm matching rustc's LLVM (a system LLVM on PATH will do).
SIZE=$(llvm_tool llvm-size)
NM=$(llvm_tool llvm-nm)

# The example's own flags (.cargo/config.toml) and target dir, so that the
# figures do not depend on the caller's environment; its Cargo.lock pins the
# esp-hal crates.
(
    cd "$EXAMPLE"
    env -u RUSTFLAGS -u CARGO_ENCODED_RUSTFLAGS -u CARGO_TARGET_DIR -u CARGO_BUILD_TARGET \
        cargo build --release --locked --target "$TARGET"
)
elf="$EXAMPLE/target/$TARGET/release/$BIN"

tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
"$SIZE" -A -d "$elf" >"$tmp/sections"
"$NM" -C --print-size --radix=d "$elf" >"$tmp/symbols"

section() { awk -v s="$1" '$1 == s { v = $2 } END { print v + 0 }' "$tmp/sections"; }
kib() { awk -v b="$1" 'BEGIN { printf "%.1f KiB", b / 1024 }'; }

text=$(section .text)
rodata=$(section .rodata)
data=$(section .data)
bss=$(section .bss)
# Code the ROM bootloader copies into IRAM (trap vectors, flash and
# interrupt paths), and the application descriptor.
rwtext=$(section .rwtext)
trap_=$(section .trap)
appdesc=$(section .flash.appdesc)

echo
echo "== $elf ($TARGET, opt-level z, LTO)"
printf '  %-14s %8d B  %s\n' \
    .text "$text" "$(kib "$text")" \
    .rodata "$rodata" "$(kib "$rodata")" \
    .data "$data" "$(kib "$data")" \
    .bss "$bss" "$(kib "$bss")"
printf '  (also in the image: .rwtext %d B and .trap %d B, code run from IRAM; .flash.appdesc %d B)\n' \
    "$rwtext" "$trap_" "$appdesc"
flash=$((text + rodata + data + rwtext + trap_ + appdesc))
printf '  flash (text+rodata+data+rwtext+trap+appdesc) %d B (%s); static RAM (data+bss+rwtext+trap) %d B (%s)\n' \
    "$flash" "$(kib "$flash")" "$((data + bss + rwtext + trap_))" "$(kib $((data + bss + rwtext + trap_)))"

# Where the two statics landed: b/B is .bss (no flash), d/D is .data (its
# initial value is stored in flash too).
static_of() {
    awk -v s="$1" '$4 ~ ("^" s "(::|$)") {
        where = ($3 ~ /^[bB]$/) ? ".bss" : ($3 ~ /^[dD]$/) ? ".data" : "?"
        printf "%s, %d B, in %s", s, $2 + 0, where
        exit
    }' "$tmp/symbols"
}
printf '  statics: %s; %s\n' \
    "$(static_of clawmem_esp32c3::WORK)" "$(static_of clawmem_esp32c3::STORE)"
