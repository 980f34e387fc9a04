#!/usr/bin/env bash
# clawmem's C API (crates/clawmem-c): checks that the committed header
# include/clawmem.h is what cbindgen generates from the code, that it
# compiles on its own as C99 and as C++ with warnings as errors, builds the
# host staticlib and runs the C tests (tests/c: every function, bad
# arguments, a power cut at every flash call) compiled as C99 and as C++,
# replays traces through the C API alone and checks that its figures equal
# clawmem-sim replay's (scripts/c-replay.sh --check: smoke.jsonl,
# bfcl-multi-turn.jsonl, bfcl-memory.jsonl, and a generated trace that compacts and blocks),
# runs the ESP-IDF component's glue against a fake of esp_partition_*
# (tests/c/test_esp.c), and builds the staticlib for the ESP32-C3/C2 and ESP32-C6/H2 targets and
# prints its code size.
#
#   bash scripts/c-tests.sh           # check and test
#   bash scripts/c-tests.sh --bless   # regenerate include/clawmem.h first
set -euo pipefail
cd "$(dirname "$0")/.."
. scripts/lib.sh

CBINDGEN_VERSION=0.29.4
crate=crates/clawmem-c
header=$crate/include/clawmem.h
bless=0
[ "${1:-}" = "--bless" ] && bless=1

step() { printf '\n==> %s\n' "$*"; }

if ! cbindgen --version 2>/dev/null | grep -qx "cbindgen $CBINDGEN_VERSION"; then
    step "installing cbindgen $CBINDGEN_VERSION"
    cargo install --locked cbindgen --version "$CBINDGEN_VERSION"
fi

tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

step "include/clawmem.h matches the code (cbindgen $CBINDGEN_VERSION)"
# Warnings about private items and the engine's generic error type are
# expected; cbindgen fails on real errors.
(cd "$crate" && cbindgen --quiet --config cbindgen.toml --crate clawmem-c --output "$tmp/clawmem.h")
if [ "$bless" = 1 ]; then
    cp "$tmp/clawmem.h" "$header"
    echo "wrote $header"
elif ! diff -u "$header" "$tmp/clawmem.h"; then
    echo "c-tests: $header is out of date: run bash scripts/c-tests.sh --bless and commit it" >&2
    exit 1
fi

step "the header alone, as C99 and as C++"
cc=${CC:-cc}
cxx=${CXX:-c++}
warn=(-Wall -Wextra -Werror -pedantic)
printf '#include "clawmem.h"\nint main(void) { return (int)sizeof(clawmem_store_t) == 0; }\n' >"$tmp/alone.c"
$cc -std=c99 "${warn[@]}" -I"$crate/include" -c "$tmp/alone.c" -o "$tmp/alone.o"
$cxx -x c++ -std=c++11 "${warn[@]}" -I"$crate/include" -c "$tmp/alone.c" -o "$tmp/alone_cpp.o"

step "host staticlib"
(cd "$crate" && cargo build --release)
lib=$crate/target/release/libclawmem_c.a

step "C tests (tests/c), as C99 and as C++"
srcs=(tests/c/test_api.c tests/c/ramflash.c)
inc=(-I"$crate/include" -Itests/c)
$cc -std=c99 "${warn[@]}" -O1 "${inc[@]}" "${srcs[@]}" "$lib" -o "$tmp/test_api_c"
$cxx -std=c++11 "${warn[@]}" -O1 "${inc[@]}" -x c++ "${srcs[@]}" -x none "$lib" -o "$tmp/test_api_cpp"
"$tmp/test_api_c"
"$tmp/test_api_cpp"

step "ESP-IDF component glue (esp-idf/clawmem) on a fake esp_partition, as C99 and as C++"
esp_srcs=(tests/c/test_esp.c tests/c/fake_esp_partition.c tests/c/ramflash.c esp-idf/clawmem/clawmem_esp.c)
esp_inc=(-Iesp-idf/clawmem/include -I"$crate/include" -Itests/c/fake-idf -Itests/c)
$cc -std=c99 "${warn[@]}" -O1 "${esp_inc[@]}" "${esp_srcs[@]}" "$lib" -o "$tmp/test_esp_c"
$cxx -std=c++11 "${warn[@]}" -O1 "${esp_inc[@]}" -x c++ "${esp_srcs[@]}" -x none "$lib" -o "$tmp/test_esp_cpp"
"$tmp/test_esp_c"
"$tmp/test_esp_cpp"

step "C trace replays, checked against clawmem-sim replay"
bash scripts/c-replay.sh traces/smoke.jsonl --check
bash scripts/c-replay.sh traces/bfcl-multi-turn.jsonl --check
bash scripts/c-replay.sh traces/bfcl-memory.jsonl --check
# A session that compacts (tool results over the 150 KiB limit) and one
# that is blocked, as sim/tests/opstream.rs builds it.
python3 - "$tmp/compact.jsonl" <<'PY'
import json, sys
def append(session, kind, n, done):
    return json.dumps({"op": "append", "session": session, "turn_completed": done,
                       "records": [{"type": kind, "format": "openai", "body": "b" * n}]})
lines = ['{"trace":"clawmem-trace","version":1,"source":"scripts/c-tests.sh"}']
for _ in range(20):
    lines += [append("c", "user", 300, False), append("c", "assistant_tool", 4000, False),
              append("c", "tool_result", 4000, False), append("c", "assistant_final", 300, True),
              '{"op":"history","session":"c"}']
lines += [append("z", "user", 80000, False), append("z", "assistant_final", 80000, True),
          append("z", "user", 10, False), '{"op":"history","session":"z"}',
          append("z", "user", 20, False), '{"op":"history","session":"z"}',
          '{"op":"remount"}', '{"op":"history","session":"c"}']
open(sys.argv[1], "w").write("\n".join(lines) + "\n")
PY
out=$(bash scripts/c-replay.sh "$tmp/compact.jsonl" --check)
printf '%s\n' "$out"
printf '%s\n' "$out" | grep -q '"blocked":1,"compactions":1,' || {
    echo "c-tests: the generated trace must compact once and block once" >&2
    exit 1
}

step "staticlib for ESP32 RISC-V targets: code size, and the largest stack frames"
SIZE=$(llvm_tool llvm-size)
OBJDUMP=$(llvm_tool llvm-objdump)
for target in riscv32imc-unknown-none-elf riscv32imac-unknown-none-elf; do
    rustup target add "$target" >/dev/null
    (cd "$crate" && cargo build --release --target "$target" -q)
    a=$crate/target/$target/release/libclawmem_c.a
    # Every C function is exported, so all of the engine they reach is in
    # the LTO'd object (its .text and .rodata sections are counted; unwind
    # tables and debug sections are not code). compiler_builtins stays
    # apart, and a firmware's linker keeps only the builtins it calls.
    "$SIZE" -A "$a" | awk -v t="$target" '
        / \(ex / { engine = ($1 ~ /^clawmem_c-/) }
        engine && $1 ~ /^\.text/ { text += $2 }
        engine && $1 ~ /^\.s?rodata/ { ro += $2 }
        END { printf "  %-30s code %7d B, rodata %6d B (the C API and the engine, LTO, opt-level z)\n", t, text, ro }'
done
# The frames (the stack pointer moves of each prologue) of the largest
# functions of the ESP32-C3 library: one frame each, not the depth of a
# call chain, which adds the frames of its callees.
mkdir -p "$tmp/objs"
(cd "$tmp/objs" && ar x "$OLDPWD/$crate/target/riscv32imc-unknown-none-elf/release/libclawmem_c.a")
"$OBJDUMP" -d --no-show-raw-insn -C "$tmp"/objs/clawmem_c-*.o | python3 -c '
import re, sys
frames, fn, n = {}, None, 0
for line in sys.stdin:
    m = re.match(r"^[0-9a-f]+ <(.*)>:$", line)
    if m:
        fn, n = m.group(1), 0
        frames[fn] = 0
        continue
    n += 1
    m = re.search(r"addi\s+sp, sp, -0x([0-9a-f]+)", line)
    if fn and n <= 12 and m:
        frames[fn] += int(m.group(1), 16)
print("  largest frames on riscv32imc (bytes, one frame each):")
for f, v in sorted(frames.items(), key=lambda x: -x[1])[:6]:
    print(f"    {v:6d}  {f[:90]}")
'

step "the ESP-IDF component's CMakeLists.txt, under a stand-in for IDF's CMake (tests/c/fake-idf/cmake)"
if ! command -v cmake >/dev/null; then
    apt_install cmake
fi
# ESP32-C3: the component's cargo command builds the staticlib it links,
# from nothing, into the build directory as in an IDF project, and its glue
# compiles against the stand-in's esp_partition.h.
cmake -S tests/c/fake-idf/cmake -B "$tmp/idf-c3" -DIDF_TARGET=esp32c3 >/dev/null
cmake --build "$tmp/idf-c3" --target clawmem_cargo __idf_clawmem >/dev/null
test -f "$tmp/idf-c3/clawmem-cargo/riscv32imc-unknown-none-elf/release/libclawmem_c.a"
# ESP32-C6: the same with the imac target (into the crate's own target
# directory, which the step above filled).
cmake -S tests/c/fake-idf/cmake -B "$tmp/idf-c6" -DIDF_TARGET=esp32c6 \
    -DCLAWMEM_CARGO_TARGET_DIR="$PWD/$crate/target" >/dev/null
cmake --build "$tmp/idf-c6" --target clawmem_cargo >/dev/null
test -f "$crate/target/riscv32imac-unknown-none-elf/release/libclawmem_c.a"
# An Xtensa chip without Espressif's toolchain is refused with the way out.
if cmake -S tests/c/fake-idf/cmake -B "$tmp/idf-s3" -DIDF_TARGET=esp32s3 >"$tmp/s3.log" 2>&1; then
    echo "c-tests: the component configured for esp32s3 without Espressif's toolchain" >&2
    exit 1
fi
grep -q "espup" "$tmp/s3.log" || { cat "$tmp/s3.log" >&2; exit 1; }
echo "component: esp32c3 and esp32c6 configure and build their staticlib; esp32s3 is refused until -DCLAWMEM_CARGO_TOOLCHAIN=esp"
