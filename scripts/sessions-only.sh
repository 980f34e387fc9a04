#!/usr/bin/env bash
# clawmem built without its optional features (`default-features = false`:
# sessions only, no memory, chat maps or profiles), on images the full
# engine wrote (examples/sessions-only):
#   1. an image that holds long-term memory (traces/smoke.jsonl) is refused
#      at mount, unchanged;
#   2. an image with sessions and profiles but no memory (smoke.jsonl
#      without its memory operations) goes through three wraps of the ring
#      by the sessions-only build, which relocates every record and object
#      in it; every history reads back the same, and what the full engine
#      exports from the image afterwards (profiles included) equals the
#      export from before.
#
#   bash scripts/sessions-only.sh
set -euo pipefail
cd "$(dirname "$0")/.."

tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

cargo build -q --release -p clawmem-sim
sim=target/release/clawmem-sim
(cd examples/sessions-only && env -u CARGO_TARGET_DIR cargo build -q --release)
only=examples/sessions-only/target/release/clawmem-sessions-only

echo "== an image with long-term memory is refused, unchanged"
"$sim" replay traces/smoke.jsonl --image "$tmp/memory.img" >/dev/null
"$only" refuse "$tmp/memory.img"

echo "== an image without memory keeps everything through three wraps of the ring"
grep -v '"op":"memory_' traces/smoke.jsonl >"$tmp/no-memory.jsonl"
if grep -q '"op":"memory_' "$tmp/no-memory.jsonl"; then
    echo "sessions-only: memory operations left in the trace" >&2
    exit 1
fi
"$sim" replay "$tmp/no-memory.jsonl" --image "$tmp/plain.img" >/dev/null
"$sim" export "$tmp/plain.img" "$tmp/before" >/dev/null
"$only" churn "$tmp/plain.img"
"$sim" export "$tmp/plain.img" "$tmp/after" >/dev/null
# The trace writes four profile documents: the sessions-only build cannot
# read them, and must keep them.
for doc in soul identity user AGENTS; do
    [ -s "$tmp/before/memory/$doc.md" ] || { echo "sessions-only: $doc.md missing from the export" >&2; exit 1; }
done
diff -r "$tmp/before" "$tmp/after"
echo "sessions-only: the full engine exports the same files before and after ($(find "$tmp/before" -type f | wc -l) files)"
