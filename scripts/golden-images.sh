#!/usr/bin/env bash
# Writes the golden images of the current on-flash format into
# tests/images/v<FORMAT_VERSION>/: for each preset, the partition after a
# replay of traces/smoke.jsonl (sessions, long-term memory, profiles, chat
# session maps, remounts) and, from version 3 on, after a replay of the
# first 500 lines of traces/bfcl-memory.jsonl (memory-heavy: stores,
# updates, forgets, recalls over several sessions), and beside each what the
# image must read back, as
# `clawmem-sim export` writes it (ESP-Claw's files: every history, the
# memory records and index, the profiles, the chat maps).
#
# Run it once, in the commit that introduces a format version, with that
# version's engine; CI never runs it: only an old engine can write an old
# image. The file SOURCE names the commit whose engine wrote them.
# tests/tests/../sim/tests/golden.rs mounts every image with the current
# engine and checks it against what was exported.
#
# Usage: scripts/golden-images.sh
set -euo pipefail
cd "$(dirname "$0")/.."

version=$(sed -n 's/^pub const FORMAT_VERSION: u16 = \([0-9]*\);/\1/p' crates/clawmem/src/layout.rs)
[ -n "$version" ] || { echo "cannot read FORMAT_VERSION" >&2; exit 1; }
out=tests/images/v$version
if [ -e "$out" ]; then
    echo "$out exists: the images of a released format are never rewritten" >&2
    exit 1
fi
cargo build --release -p clawmem-sim
sim=target/release/clawmem-sim
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
head -n 500 traces/bfcl-memory.jsonl >"$tmp/bfcl-memory500.jsonl"
# From version 8 on the replays call idle-time maintenance (--idle), so
# that the images hold sectors erased ahead and the chunks that say so.
idle=()
[ "$version" -lt 8 ] || idle=(--idle)
mkdir -p "$out"
# trace x preset and partition size (stm32h7 has 128 KiB sectors)
for trace in traces/smoke.jsonl "$tmp/bfcl-memory500.jsonl"; do
    name=$(basename "$trace" .jsonl)
    # esp32-encrypted (16 B blocks written once) from version 4 on.
    for spec in esp32:256K nrf52:256K stm32l4:256K stm32h7:1M esp32-encrypted:256K; do
        preset=${spec%%:*}
        size=${spec#*:}
        img=$out/$name-$preset.img
        # A replay that errs (a refused write) would make an image of an
        # unplanned state: refuse it.
        errors=$("$sim" replay "$trace" --preset "$preset" --size "$size" "${idle[@]}" --image "$img" --json |
            sed -n 's/^  "errors": \([0-9]*\),*$/\1/p')
        [ "$errors" = 0 ] || { echo "$name on $preset: $errors errors" >&2; exit 1; }
        "$sim" export --preset "$preset" "$img" "$out/$name-$preset.expected" >/dev/null
    done
done
{
    echo "format version $version"
    # Run in the commit that introduces the version, the engine is that
    # commit's, not yet committed: name its parent.
    if git diff --quiet HEAD -- crates sim; then
        echo "written by the engine of commit $(git rev-parse HEAD)"
    else
        echo "written by the engine of the commit that adds $out (its parent: $(git rev-parse HEAD))"
    fi
    echo "with: scripts/golden-images.sh (traces/smoke.jsonl and the first 500 lines of traces/bfcl-memory.jsonl, each on esp32, nrf52, stm32l4, esp32-encrypted at 256 KiB and stm32h7 at 1 MiB${idle:+, with idle-time maintenance (--idle)})"
} >"$out/SOURCE"
echo "wrote $out"
