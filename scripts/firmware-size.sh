#!/usr/bin/env bash
# clawmem's size on a Cortex-M4F. Builds examples/firmware (a no_std binary
# that calls every public clawmem operation, so the linker keeps all of the
# engine) for thumbv7em-none-eabihf with opt-level "z", LTO and one codegen
# unit, then reports:
#   - the ELF's sections (.text, .rodata, .data, .bss, ...);
#   - the engine's share of .text, from the symbol table: clawmem's own
#     functions (and generic code instantiated for clawmem's types), the
#     example's forwards to them (clawmem_firmware::api, see its doc), the
#     machine-outlined code only they call (OUTLINED_FUNCTION_n, see
#     outlined_engine), and the crates only clawmem uses (crc, heapless);
#   - the engine state, size_of::<Store<_, 32>>() on the target, read back
#     from the ELF (CLAWMEM_ENGINE_STATE_BYTES);
#   - the largest stack frames;
#   - both against the budget: engine code <= 32 KiB, engine state <= 4 KiB;
#   - where the example's static work area landed: Work::new() is all zero
#     bytes, so it belongs in .bss (no flash); in .data it would cost its
#     whole size in flash, and the script fails (in either mode).
#   - a table of the engine code of each build of clawmem's optional parts
#     (cargo features `memory`, `chat`, `profiles`): the default build with
#     all of them, each alone over a sessions-only build, and the
#     sessions-only build (the example leaves out the calls a feature
#     removes).
#
#   bash scripts/firmware-size.sh                  # report (exit 0 over budget)
#   bash scripts/firmware-size.sh --enforce        # exit 1 if over budget
#   bash scripts/firmware-size.sh --ceiling BYTES  # exit 1 if engine code > BYTES
#   bash scripts/firmware-size.sh --by-source      # and the engine code by source file
#
# --by-source builds the example once more with line tables
# (CARGO_PROFILE_RELEASE_DEBUG=line-tables-only, in a target dir of its
# own; the code is the same, which the script checks) and adds up the
# engine functions' instructions by the source line each comes from. Code
# inlined from core, heapless or another file counts where it was written:
# `?` on a Result in core's result.rs, a heapless push in heapless's vec,
# so the table shows what the engine's generic and inlined library code
# costs beside its own files; a second table lists the lines of core and
# the dependencies that cost the engine most.
set -euo pipefail
cd "$(dirname "$0")/.."
. scripts/lib.sh

TARGET=thumbv7em-none-eabihf
CODE_BUDGET=$((32 * 1024))
STATE_BUDGET=$((4 * 1024))

enforce=0
ceiling=
by_source=0
while [ $# -gt 0 ]; do
    case "$1" in
        --enforce) enforce=1 ;;
        --by-source) by_source=1 ;;
        --ceiling)
            ceiling="${2:-}"
            shift
            case "$ceiling" in
                "" | *[!0-9]*)
                    echo "firmware-size: --ceiling needs a byte count" >&2
                    exit 2
                    ;;
            esac
            ;;
        *)
            echo "usage: $0 [--enforce] [--ceiling BYTES] [--by-source]" >&2
            exit 2
            ;;
    esac
    shift
done

rustup target add "$TARGET" >/dev/null
# llvm-size/nm/objdump matching rustc's LLVM; a system LLVM will do as well.
SIZE=$(llvm_tool llvm-size)
NM=$(llvm_tool llvm-nm)
OBJDUMP=$(llvm_tool llvm-objdump)
OBJCOPY=$(llvm_tool llvm-objcopy)

# The example's own flags (.cargo/config.toml, build.rs) and target dir, so
# the figures do not depend on the caller's environment. Extra arguments go
# to cargo (features).
build_example() {
    (
        cd examples/firmware
        env -u RUSTFLAGS -u CARGO_ENCODED_RUSTFLAGS -u CARGO_TARGET_DIR \
            cargo build --release --target "$TARGET" "$@"
    )
}

tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

# Which owner a function symbol (demangled, v0) belongs to; shared by the
# main report and the feature table.
BUCKET='
function bucket(name) {
    if (name ~ /^clawmem_firmware::api::/ || name ~ /clawmem::/) return "engine"
    if (name ~ /(^|[<(&* ])(crc|crc_catalog|heapless)::/) return "deps"
    if (name ~ /clawmem_firmware::flash::/ || name ~ /embedded_storage::/) return "driver"
    if (name ~ /clawmem_firmware/) return "example"
    if (name ~ /cortex_m/ || name ~ /^(Reset|main|HardFault|HardFault_|DefaultHandler|DefaultHandler_|DefaultPreInit|__pre_init)$/) return "runtime"
    return "core"
}'

# The machine-outlined functions (OUTLINED_FUNCTION_n: LLVM's outliner at
# opt-level "z" moves instruction sequences that several functions repeat
# into one of these) that only engine code calls, from a disassembly on
# stdin, one name a line. They are engine code split out by the compiler,
# and count as engine code; one that the example or core also calls counts
# as shared (core). An outlined function called by another counts as the
# engine's only if that one does.
outlined_engine() {
    awk "$BUCKET"'
/^[0-9a-f]+ <.*>:$/ { fn = $0; sub(/^[0-9a-f]+ </, "", fn); sub(/>:$/, "", fn); next }
match($0, /<OUTLINED_FUNCTION_[0-9]+>/) {
    o = substr($0, RSTART + 1, RLENGTH - 2)
    if (o != fn && !((o, fn) in seen)) { seen[o, fn] = 1; n[o]++; caller[o, n[o]] = fn }
}
END {
    for (o in n) own[o] = 1
    do {
        changed = 0
        for (o in n) {
            if (!own[o]) continue
            for (i = 1; i <= n[o]; i++) {
                c = caller[o, i]
                if (c ~ /^OUTLINED_FUNCTION_[0-9]+$/) ok = (c in own) && own[c]
                else { b = bucket(c); ok = (b == "engine" || b == "deps") }
                if (!ok) { own[o] = 0; changed = 1; break }
            }
        }
    } while (changed)
    for (o in n) if (own[o]) print o
}'
}

# Engine code (clawmem + crc/heapless function symbols, and the outlined
# code only they call) of an ELF.
engine_code_of() {
    "$OBJDUMP" -d --no-show-raw-insn -C "$1" | outlined_engine >"$tmp/outlined-of"
    "$NM" --print-size --radix=d -C "$1" | awk "$BUCKET"'
FILENAME == ARGV[1] { outlined[$0] = 1; next }
$3 ~ /^[tT]$/ {
    name = $0
    sub(/^[0-9]+ [0-9]+ [tT] /, "", name)
    b = (name in outlined) ? "engine" : bucket(name)
    if (b == "engine" || b == "deps") sum += $2 + 0
}
END { print sum + 0 }' "$tmp/outlined-of" -
}

# A u32 static (little-endian, in .rodata) of an ELF.
u32_of() {
    local elf=$1 name=$2 addr base
    addr=$("$NM" "$elf" | awk -v s="$name" '$3 == s { print $1 }')
    base=$("$SIZE" -A -d "$elf" | awk '$1 == ".rodata" { print $3 }')
    [ -n "$addr" ] && [ -n "$base" ] || { echo "firmware-size: symbol $name missing" >&2; exit 1; }
    "$OBJCOPY" -O binary --only-section=.rodata "$elf" "$tmp/u32.bin"
    od -An -tu1 -j $((0x$addr - base)) -N4 "$tmp/u32.bin" |
        awk '{ print $1 + 256 * ($2 + 256 * ($3 + 256 * $4)) }'
}

# The feature table: each build in a target dir of its own, so that the
# default build below is not rebuilt.
variants_dir="examples/firmware/target/variants"
feature_rows=(
    "sessions only (no default features)|"
    "sessions + memory|memory"
    "sessions + chat|chat"
    "sessions + profiles|profiles"
)
for row in "${feature_rows[@]}"; do
    features="${row#*|}"
    build_example --quiet --no-default-features --features "$features" \
        --target-dir "$PWD/$variants_dir" >&2
    cp "$variants_dir/$TARGET/release/clawmem-firmware" "$tmp/variant.elf"
    printf '%s|%s|%d|%d|%d\n' "${row%%|*}" "$features" "$(engine_code_of "$tmp/variant.elf")" \
        "$(u32_of "$tmp/variant.elf" CLAWMEM_ENGINE_STATE_BYTES)" \
        "$(u32_of "$tmp/variant.elf" CLAWMEM_WORK_BYTES)" >>"$tmp/feature-table"
done

build_example
elf="examples/firmware/target/$TARGET/release/clawmem-firmware"
"$SIZE" -A -d "$elf" >"$tmp/sections"
"$NM" --print-size --radix=d -C "$elf" >"$tmp/symbols"
"$OBJDUMP" -d --no-show-raw-insn -C "$elf" >"$tmp/disassembly"
outlined_engine <"$tmp/disassembly" >"$tmp/outlined"

section() { awk -v s="$1" '$1 == s { v = $2 } END { print v + 0 }' "$tmp/sections"; }
kib() { awk -v b="$1" 'BEGIN { printf "%.1f KiB", b / 1024 }'; }

# u32 statics of the example (u32_of, above).
read_u32() { u32_of "$elf" "$1"; }

vector=$(section .vector_table)
text=$(section .text)
rodata=$(section .rodata)
data=$(section .data)
bss=$(section .bss)
uninit=$(section .uninit)
state=$(read_u32 CLAWMEM_ENGINE_STATE_BYTES)
sessions=$(read_u32 CLAWMEM_SESSIONS)
work=$(read_u32 CLAWMEM_WORK_BYTES)

echo
echo "== $elf ($TARGET, opt-level z, LTO)"
printf '  %-14s %8d B  %s\n' \
    .vector_table "$vector" "$(kib "$vector")" \
    .text "$text" "$(kib "$text")" \
    .rodata "$rodata" "$(kib "$rodata")" \
    .data "$data" "$(kib "$data")" \
    .bss "$bss" "$(kib "$bss")" \
    .uninit "$uninit" "$(kib "$uninit")"
flash=$((vector + text + rodata + data))
printf '  flash (vector_table+text+rodata+data) %d B (%s); static RAM (data+bss) %d B (%s)\n' \
    "$flash" "$(kib "$flash")" "$((data + bss))" "$(kib $((data + bss)))"
printf '  (.bss: the Store, %d B, its lent work area, %d B, and the example'"'"'s buffers, %d B; the stack is the rest of RAM)\n' \
    "$state" "$work" "$((bss - state - work))"

# Who owns .text: every function symbol, by its demangled (v0) name.
awk -v text="$text" -v out="$tmp" "$BUCKET"'
# A forward in clawmem_firmware::api holds the inlined body of the clawmem
# function it calls: count it in that function'"'"'s module (Store methods are
# clawmem::store).
function module(name,   f) {
    if (name ~ /^clawmem_firmware::api::/) {
        f = name
        sub(/^clawmem_firmware::api::/, "", f)
        sub(/[^a-z_].*$/, "", f)
        return (f in api) ? api[f] : "clawmem::store"
    }
    if (name in outlined) return "outlined (LLVM'"'"'s outliner; called by clawmem only)"
    if (match(name, /clawmem::[a-z_]+/)) return substr(name, RSTART, RLENGTH)
    return "?"
}
BEGIN {
    split("chat_key session_command_args parse_session_command current_session_id render_list", a, " ")
    for (i in a) api[a[i]] = "clawmem::chat"
    api["normalize_to_str"] = "clawmem::text"
    api["extract_final_text"] = "clawmem::backend"
    api["write_text_message"] = "clawmem::backend"
    api["session_file_name"] = "clawmem::naming"
    api["validate_index"] = "clawmem::chdx"
    api["index_entries"] = "clawmem::chdx"
    api["item_id"] = "clawmem::memory"
    api["write_prompt_section"] = "clawmem::profile"
}
FILENAME == ARGV[1] { outlined[$0] = 1; next }
$3 ~ /^[tT]$/ {
    size = $2 + 0
    name = $0
    sub(/^[0-9]+ [0-9]+ [tT] /, "", name)
    b = (name in outlined) ? "engine" : bucket(name)
    sum[b] += size
    total += size
    if (b == "engine") {
        mod[module(name)] += size
        printf "%d %s\n", size, name > (out "/engine-symbols")
    }
}
END {
    label["engine"] = "clawmem (its functions, generics over its types, api forwards, outlined code only they call)"
    label["deps"] = "crc, heapless (used by clawmem only)"
    label["core"] = "core, compiler_builtins (shared: fmt, memcpy, sort, u64 div)"
    label["example"] = "the example (agent loop, console, JSON)"
    label["driver"] = "the example flash driver, embedded-storage"
    label["runtime"] = "cortex-m-rt, cortex-m"
    print ""
    print "== .text by owner (sum of function symbol sizes)"
    n = split("engine deps core example driver runtime", order, " ")
    for (i = 1; i <= n; i++) {
        b = order[i]
        printf "  %8d B  %5.1f%%  %s\n", sum[b], 100 * sum[b] / text, label[b]
    }
    printf "  %8d B  %5.1f%%  all function symbols (.text is %d B; the rest is padding)\n", total, 100 * total / text, text
    for (m in mod) printf "%d %s\n", mod[m], m > (out "/engine-modules")
    printf "%d %d %d\n", sum["engine"] + sum["deps"], sum["engine"] + sum["deps"] + sum["core"], sum["engine"] > (out "/engine-total")
}' "$tmp/outlined" "$tmp/symbols"

echo
echo "== clawmem's .text by module (code inlined into a function counts in that function's module)"
sort -rn "$tmp/engine-modules" | awk '{ s = $1; $1 = ""; printf "  %8d B %s\n", s, $0 }'

echo
echo "== largest clawmem functions"
sort -rn "$tmp/engine-symbols" | awk 'NR <= 15 { s = $1; $1 = ""; printf "  %8d B %s\n", s, $0 }'

echo
echo "== largest stack frames (sub sp in the prologues; call depth adds them up)"
awk '
/^[0-9a-f]+ <.*>:$/ { fn = $0; sub(/^[0-9a-f]+ </, "", fn); sub(/>:$/, "", fn); next }
/\tsub(\.w|w)?\tsp, (sp, )?#[0-9]/ {
    # The immediate is hex in newer LLVM, decimal in older.
    s = $0; sub(/.*#/, "", s); base = 10; digits = "0123456789"
    if (s ~ /^0x/) { s = substr(s, 3); base = 16; digits = "0123456789abcdef" }
    v = 0
    for (i = 1; i <= length(s); i++) {
        c = index(digits, substr(s, i, 1)); if (c == 0) break
        v = v * base + c - 1
    }
    if (v > frame[fn]) frame[fn] = v
}
END { for (f in frame) printf "%d %s\n", frame[f], f }' "$tmp/disassembly" |
    sort -rn | awk 'NR <= 8 { s = $1; $1 = ""; printf "  %8d B %s\n", s, $0 }'

read -r engine_code engine_upper engine_only <"$tmp/engine-total"

if [ "$by_source" = 1 ]; then
    lines_dir="examples/firmware/target/by-source"
    CARGO_PROFILE_RELEASE_DEBUG=line-tables-only build_example --quiet \
        --target-dir "$PWD/$lines_dir" >&2
    lines_elf="$lines_dir/$TARGET/release/clawmem-firmware"
    "$SIZE" -A -d "$lines_elf" | awk '$1 == ".text" { print $2 + 0 }' >"$tmp/lines-text"
    if [ "$(cat "$tmp/lines-text")" != "$text" ]; then
        echo "firmware-size: the build with line tables has another .text ($(cat "$tmp/lines-text") B, not $text B)" >&2
        exit 1
    fi
    echo
    echo "== engine code by source file (line tables; inlined code counts in the file it was written in)"
    "$OBJDUMP" -d --no-show-raw-insn -C "$lines_elf" | outlined_engine >"$tmp/outlined-lines"
    "$OBJDUMP" -d -l --no-show-raw-insn -C "$lines_elf" | awk -v root="$PWD/" -v out="$tmp" '
    FILENAME == ARGV[1] { outlined[$0] = 1; next }
    function hex(s,   v, i) {
        v = 0
        for (i = 1; i <= length(s); i++) v = v * 16 + index("0123456789abcdef", substr(s, i, 1)) - 1
        return v
    }
    function engine(n) { return n ~ /^clawmem_firmware::api::/ || n ~ /clawmem::/ || (n in outlined) }
    # An instruction counts where it was written: the source line in force
    # when it was met (at_src, at_line), not the one a marker after it names.
    function flush(a) {
        if (have && engine(at_fn)) {
            by[at_src] += a - at
            if (at_src ~ /^std: / || at_src ~ /^[a-z_-]+-[0-9.]+: /) by_line[at_src ":" at_line] += a - at
        }
        have = 0
    }
    function short(p) {
        if (index(p, root "crates/clawmem/src/") == 1) return substr(p, length(root "crates/clawmem/src/") + 1)
        if (index(p, root "examples/firmware/src/") == 1) return "example: " substr(p, length(root "examples/firmware/src/") + 1)
        if (p ~ /\/library\//) { sub(/.*\/library\//, "", p); return "std: " p }
        if (p ~ /\/registry\/src\//) { sub(/.*\/registry\/src\/[^\/]*\//, "", p); sub(/\/src\//, ": ", p); return p }
        return p
    }
    /^[0-9a-f]+ <.*>:$/ {
        flush(hex($1)); fn = $0; sub(/^[0-9a-f]+ </, "", fn); sub(/>:$/, "", fn)
        src = (fn in outlined) ? "outlined by LLVM (no source line)" : "?"; next
    }
    /^; \// {
        src = substr($0, 3); line = src; sub(/^.*:/, "", line); sub(/:[0-9]+$/, "", src)
        src = short(src); next
    }
    /^ *[0-9a-f]+:[ \t]/ {
        a = $1; sub(/:$/, "", a); a = hex(a); flush(a)
        at = a; at_fn = fn; at_src = src; at_line = line; have = 1
    }
    END {
        for (s in by) if (by[s] >= 16) printf "%d %s\n", by[s], s > (out "/by-file")
        for (s in by_line) if (by_line[s] >= 64) printf "%d %s\n", by_line[s], s > (out "/by-line")
    }' "$tmp/outlined-lines" -
    sort -rn "$tmp/by-file" | awk '{ s = $1; $1 = ""; printf "  %8d B %s\n", s, $0 }'
    echo
    echo "== the lines of core and the dependencies that the engine inlines most (64 B or more)"
    sort -rn "$tmp/by-line" | awk 'NR <= 20 { s = $1; $1 = ""; printf "  %8d B %s\n", s, $0 }'
fi

echo
echo "== engine code by build (cargo features of clawmem; the example calls what each build has)"
base=$(awk -F'|' 'NR == 1 { print $3 }' "$tmp/feature-table")
printf '  %11s %10s %10s  %s\n' "engine code" "state" "work area" "build"
printf '  %9d B %8d B %8d B  %s\n' "$engine_code" "$state" "$work" "default: memory, chat, profiles (the report above)"
awk -F'|' -v base="$base" '
NR == 1 { printf "  %9d B %8d B %8d B  %s\n", $3, $4, $5, $1; next }
{ printf "  %9d B %8d B %8d B  %s (the feature costs %d B of code)\n", $3, $4, $5, $1, $3 - base }' "$tmp/feature-table"
echo
echo "== budget"
verdict() { if [ "$1" -le "$2" ]; then echo "ok"; else echo "OVER by $(($1 - $2)) B"; fi; }
printf '  engine code  %8d B (%s): clawmem %d B + crc/heapless %d B; budget %d B: %s\n' \
    "$engine_code" "$(kib "$engine_code")" "$engine_only" "$((engine_code - engine_only))" \
    "$CODE_BUDGET" "$(verdict "$engine_code" "$CODE_BUDGET")"
printf '               %8d B (%s) with all of core/compiler_builtins (an upper bound)\n' \
    "$engine_upper" "$(kib "$engine_upper")"
printf '  engine state %8d B: size_of::<Store<InternalFlash, %d, &mut Work>>() on %s; budget %d B: %s\n' \
    "$state" "$sessions" "$TARGET" "$STATE_BUDGET" "$(verdict "$state" "$STATE_BUDGET")"
# The static's section: b/B is .bss, d/D is .data.
work_type=$(awk '$NF == "clawmem_firmware::WORK" { print $3 }' "$tmp/symbols")
case "$work_type" in
    b | B) work_in=".bss" ;;
    d | D) work_in=".data" ;;
    *) work_in="an unknown section ($work_type)" ;;
esac
printf '  work area    %8d B: size_of::<Work>(), lent to the store (a static here, in %s)\n' \
    "$work" "$work_in"

if [ "$work_in" != ".bss" ]; then
    echo "firmware-size: the static Work is in $work_in, not .bss: Work::new() is not all zero bytes" >&2
    exit 1
fi

if [ "$enforce" = 1 ] && { [ "$engine_code" -gt "$CODE_BUDGET" ] || [ "$state" -gt "$STATE_BUDGET" ]; }; then
    echo "firmware-size: over budget" >&2
    exit 1
fi
if [ -n "$ceiling" ] && [ "$engine_code" -gt "$ceiling" ]; then
    echo "firmware-size: engine code $engine_code B is over the ceiling of $ceiling B" >&2
    exit 1
fi
