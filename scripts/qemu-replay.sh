#!/usr/bin/env bash
# Replays an agent trace through clawmem on a real instruction set: a
# Cortex-M4F firmware (examples/qemu) under QEMU's mps2-an386 machine, on a
# RAM flash that enforces NOR rules, with the engine's stack measured per
# operation.
#
#   bash scripts/qemu-replay.sh TRACE [--ops N] [--size BYTES] [--repeat N]
#                               [--stack-budget BYTES] [--timeout SECONDS]
#                               [--require-wrap] [--selftest-mismatch]
#                               [--no-tour] [--keep DIR]
#
# 1. installs qemu-system-arm (apt) and the thumbv7em-none-eabihf target
#    (rustup) if missing;
# 2. converts the trace on the host: clawmem-sim opstream (prefix --ops,
#    rounds --repeat as in `replay --repeat`, partition --size, 1 MiB by
#    default, up to 12 MiB, a multiple of 4 KiB), ending with the API tour
#    (opstream --tour) unless --no-tour: after the trace's last op the
#    firmware calls every other public Store operation on the store the
#    trace left, each measured and reported under its own name;
# 3. builds the firmware and runs it under QEMU (with a timeout); it reads
#    the op stream and writes results through semihosting;
# 4. checks the results on the host the way `clawmem-sim replay` checks a
#    replay: clawmem-sim opcheck. Its last line, one JSON object, is this
#    script's last line.
#
# Exits non-zero on a history or profile mismatch, an engine error, a NOR
# rule violation, a stack overflow, a QEMU failure or timeout, or, with
# --stack-budget, a peak engine stack above the budget, or, with
# --require-wrap, a run that did not erase every sector after the format.
# --selftest-mismatch corrupts the expected digest of the first history, so
# the run must fail. A tour call with an unexpected outcome is an error;
# --no-tour leaves the tour out (the check then also compares the flash
# work with the host simulator's, which cannot run the tour). --keep DIR keeps ops.bin and results.bin there.
set -euo pipefail
cd "$(dirname "$0")/.."

usage() {
    sed -n '2,/^set -euo/p' "$0" | sed '$d; s/^# \{0,1\}//' >&2
    exit 2
}

[ $# -ge 1 ] || usage
trace=$1
shift
stream_args=()
tour=(--tour)
check_args=()
timeout_s=600
keep=""
while [ $# -gt 0 ]; do
    case "$1" in
        --ops | --size | --repeat)
            [ $# -ge 2 ] || usage
            stream_args+=("$1" "$2")
            shift 2
            ;;
        --stack-budget)
            [ $# -ge 2 ] || usage
            check_args+=("$1" "$2")
            shift 2
            ;;
        --no-tour)
            tour=()
            shift
            ;;
        --selftest-mismatch | --require-wrap)
            check_args+=("$1")
            shift
            ;;
        --timeout)
            [ $# -ge 2 ] || usage
            timeout_s=$2
            shift 2
            ;;
        --keep)
            [ $# -ge 2 ] || usage
            keep=$2
            shift 2
            ;;
        -h | --help) usage ;;
        *)
            echo "qemu-replay: unknown option $1" >&2
            usage
            ;;
    esac
done
case "$timeout_s" in "" | 0 | *[!0-9.]*) echo "qemu-replay: --timeout needs a positive number of seconds" >&2; exit 2 ;; esac
[ -f "$trace" ] || { echo "qemu-replay: no trace file $trace" >&2; exit 2; }

log() { printf 'qemu-replay: %s\n' "$*" >&2; }

# 1. What the run needs, installed by the script itself.
if ! command -v qemu-system-arm >/dev/null; then
    log "installing qemu-system-arm (apt-get)"
    sudo=""
    [ "$(id -u)" = 0 ] || sudo="sudo"
    $sudo apt-get update -qq >&2
    DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq qemu-system-arm >&2
fi
rustup target add thumbv7em-none-eabihf >/dev/null 2>&1 ||
    rustup target add thumbv7em-none-eabihf >&2

# 2. The host tools and the firmware (the firmware with its own flags and
#    target dir, whatever the caller's environment says).
cargo build --release --quiet -p clawmem-sim --bin clawmem-sim >&2
sim="$(cargo metadata --format-version 1 --no-deps |
    sed -n 's/.*"target_directory":"\([^"]*\)".*/\1/p')/release/clawmem-sim"
(
    cd examples/qemu
    env -u RUSTFLAGS -u CARGO_ENCODED_RUSTFLAGS -u CARGO_TARGET_DIR \
        cargo build --release --quiet >&2
)
firmware="$PWD/examples/qemu/target/thumbv7em-none-eabihf/release/clawmem-qemu"

if [ -n "$keep" ]; then
    mkdir -p "$keep"
    work=$(cd "$keep" && pwd)
else
    work=$(mktemp -d)
    trap 'rm -rf "$work"' EXIT
fi
rm -f "$work/ops.bin" "$work/results.bin"
"$sim" opstream "$trace" "$work/ops.bin" "${stream_args[@]}" "${tour[@]}" >&2

# 3. The firmware reads ops.bin and writes results.bin in QEMU's working
#    directory (semihosting, target=native).
start=$(date +%s.%N)
set +e
(
    cd "$work"
    timeout --kill-after=10 "$timeout_s" qemu-system-arm -M mps2-an386 -nographic \
        -monitor none -serial none \
        -semihosting-config enable=on,target=native \
        -kernel "$firmware" >&2
)
status=$?
set -e
seconds=$(awk -v a="$start" -v b="$(date +%s.%N)" 'BEGIN { printf "%.2f", b - a }')
if [ "$status" = 124 ] || [ "$status" = 137 ]; then
    log "QEMU timed out after $timeout_s s"
elif [ "$status" != 0 ]; then
    log "QEMU exited with status $status"
fi
[ -f "$work/results.bin" ] || : >"$work/results.bin"
log "QEMU ran $seconds s"

# 4. The check; its JSON line is the last line of output.
"$sim" opcheck "$trace" "$work/results.bin" "${stream_args[@]}" "${tour[@]}" "${check_args[@]}" \
    --qemu-status "$status" --qemu-seconds "$seconds"
