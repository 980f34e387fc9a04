#!/usr/bin/env bash
# Canary: build the engine with `canary-skip-crc` (the chunk CRC check of the
# verified read path is skipped, so damaged session batches read back as
# good) and run the bit-rot suite against it. The suite must FAIL; this
# script succeeds only if it does, and fails if the suite passes (it no
# longer catches a broken checksum) or does not build.
set -uo pipefail
cd "$(dirname "$0")/.."

out=$(cargo test -p clawmem-tests --features clawmem/canary-skip-crc --test bit_rot 2>&1)
status=$?
if [ "$status" -eq 0 ]; then
    echo "canary: FAILED - bit_rot passed against an engine that skips the chunk CRC check" >&2
    exit 1
fi
if ! grep -q "test result: FAILED" <<<"$out"; then
    echo "$out" >&2
    echo "canary: FAILED - the canary build did not build or run" >&2
    exit 1
fi
echo "$out" | grep -E "^test .* FAILED|panicked at" | head -5
echo "canary: ok - bit_rot catches the engine that skips the chunk CRC check"
