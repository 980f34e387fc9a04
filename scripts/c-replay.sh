#!/usr/bin/env bash
# Replays an agent trace through clawmem's C API only (tests/c/replay.c,
# built against the clawmem-c staticlib and cJSON, the JSON library
# ESP-Claw uses; Debian's libcjson-dev is installed with apt when missing),
# on a C RAM flash with ESP32's geometry (4 B words, 4 KiB sectors), 1 MiB by
# default, checking every history read. Its last line is one JSON object
# (ops, history_mismatches, errors, blocked, programmed_bytes, erases, ...);
# it exits non-zero on a mismatch or an error.
#
#   bash scripts/c-replay.sh TRACE [--size BYTES|NK|NM] [--check]
#
# --check also replays the trace with `clawmem-sim replay` on the same
# geometry and fails unless ops, history checks, mismatches, errors,
# blocked, compactions, skipped, user bytes, programmed bytes and erases are
# equal: the same engine on the same flash rules, driven from C.
set -euo pipefail
cd "$(dirname "$0")/.."
. scripts/lib.sh

usage() { echo "usage: bash scripts/c-replay.sh TRACE [--size BYTES|NK|NM] [--check]" >&2; exit 2; }
[ $# -ge 1 ] || usage
trace=$1
shift
size=1048576
check=0
while [ $# -gt 0 ]; do
    case "$1" in
        --size)
            [ $# -ge 2 ] || usage
            case "$2" in
                *[Kk]) size=$(( ${2%[Kk]} * 1024 )) ;;
                *[Mm]) size=$(( ${2%[Mm]} * 1024 * 1024 )) ;;
                *[!0-9]* | "") usage ;;
                *) size=$2 ;;
            esac
            shift 2
            ;;
        --check) check=1; shift ;;
        *) usage ;;
    esac
done
[ -f "$trace" ] || { echo "c-replay: no such trace: $trace" >&2; exit 2; }

if [ ! -f /usr/include/cjson/cJSON.h ]; then
    apt_install libcjson-dev
fi

(cd crates/clawmem-c && cargo build --release -q)
mkdir -p target
bin=target/c-replay
${CC:-cc} -std=c99 -D_POSIX_C_SOURCE=200809L -Wall -Wextra -Werror -O2 \
    -Icrates/clawmem-c/include -Itests/c tests/c/replay.c tests/c/ramflash.c \
    crates/clawmem-c/target/release/libclawmem_c.a -lcjson -o "$bin"

set +e
out=$("$bin" "$trace" "$size")
rc=$?
set -e
printf '%s\n' "$out"
[ "$rc" = 0 ] || exit "$rc"

if [ "$check" = 1 ]; then
    sim=$(cargo run --release -q -p clawmem-sim -- replay "$trace" --size "$size" --json)
    C_OUT="$out" SIM_OUT="$sim" python3 - <<'PY'
import json, os, sys
c = json.loads(os.environ["C_OUT"].strip().splitlines()[-1])
s = json.loads(os.environ["SIM_OUT"])
keys = ["ops", "history_checks", "history_mismatches", "errors", "blocked",
        "compactions", "skipped", "user_bytes", "programmed_bytes", "erases"]
diff = [f"{k}: C API {c[k]}, clawmem-sim {s[k]}" for k in keys if c[k] != s[k]]
if diff:
    print("c-replay --check: the C API's replay differs from clawmem-sim replay's:", *diff, sep="\n  ", file=sys.stderr)
    sys.exit(1)
print("c-replay --check: equal to clawmem-sim replay on " + ", ".join(f"{k} {c[k]}" for k in keys))
PY
fi
