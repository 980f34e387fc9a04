#!/usr/bin/env python3
"""A planning model of garbage collection on the fill workload: how full a
partition gets before the first `Full` under two cleaning policies.

This is not the engine. It replays the fill workload of `clawmem-sim replay
TRACE --fill` (rounds of the trace, each round's sessions kept, the trace's
own session deletes applied) on a model of the ring: sectors of 4,096 B with
a 24 B header, each append framed as a session batch of docs/FORMAT.md
(12 B chunk header, 9 B batch meta, 1 B type and a LEB128 length per record,
the id and its CRC on a session's first batch, padded to 4 B), a reserve of
free sectors that appends leave (as the engine's), and a copy limit like `COPY_LIMIT` in
`crates/clawmem/src/store/gc.rs` (at most 4 B copied for each byte of room
made). Relocated bytes are copied as they are (the engine's bases add an
index). It answers one question: what the cleaning order costs.

- `fifo` cleans in ring order, as clawmem does: a run of tail sectors is
  released when what it copies is within the limit of the room it makes.
- `greedy` cleans the sector with the fewest live bytes, wherever it is in
  the ring, within the same limit (a log-structured cleaner, which the ring
  format of version 9 cannot do: its sectors in use are consecutive).

It prints, per policy, the live user bytes at the first `Full` as a fraction
of the partition (the engine's `capacity_fraction`) and the program write
amplification of the fill phase.

With `--limit 1000000` every deleted byte can be reclaimed whatever it costs:
the capacity is then the ceiling that no cleaning order can pass with the
given framing and reserve. `--framing` sets what a session batch takes beside
its records (version 9: a 12 B chunk header and 9 B of batch meta).

  python3 scripts/gc-model.py [--trace T] [--size 1M] [--reserve 25] [--limit 4]
      [--relocation bytes|index|record] [--framing 21]
"""

import argparse
import collections
import json

SECTOR = 4096
HEADER = 24
PAYLOAD = SECTOR - HEADER


def leb_len(n):
    k = 1
    while n >= 0x80:
        n >>= 7
        k += 1
    return k


FRAMING = 12 + 9  # chunk header and batch meta (docs/FORMAT.md); --framing


def batch_len(records, first_id):
    n = FRAMING + sum(1 + leb_len(len(r)) + len(r) for r in records)
    if first_id is not None:
        n += 1 + len(first_id) + 4
    return (n + 3) // 4 * 4


class Ring:
    def __init__(self, sectors, policy, reserve, limit, relocation="bytes"):
        self.policy, self.reserve, self.limit = policy, reserve, limit
        self.relocation = relocation
        self.live = [0] * sectors
        self.pieces = [dict() for _ in range(sectors)]  # sector -> {piece: bytes}
        self.used = []  # sectors in use, oldest first
        self.free = collections.deque(range(sectors))
        self.head, self.room = None, 0
        self.where = collections.defaultdict(list)  # session -> [(sector, piece)]
        self.owner = {}
        self.index_pieces = set()  # pieces that are a session's index
        self.index = {}  # session -> piece of its newest index
        self.records = collections.Counter()  # session -> records
        self.next_piece = 0
        self.programmed = 0

    def place(self, session, n, piece):
        while n > 0:
            if self.head is None or self.room == 0:
                self.head = self.free.popleft()
                self.used.append(self.head)
                self.room = PAYLOAD
            take = min(n, self.room)
            p = self.pieces[self.head]
            p[piece] = p.get(piece, 0) + take
            self.live[self.head] += take
            self.where[session].append((self.head, piece))
            self.room -= take
            n -= take
            self.programmed += take

    def new_piece(self, session):
        piece = self.next_piece
        self.next_piece += 1
        self.owner[piece] = session
        return piece

    def extra(self, session, moved):
        """What relocating `moved` pieces of `session` writes beside them."""
        if self.relocation == "index":
            return 28 + 14 * self.records[session]
        if self.relocation == "record":
            return 21 + 4 * moved
        return 0

    def tally(self, sector, moved):
        """Adds what lives in `sector` to `moved` (session -> pieces that
        cleaning it copies) and returns the bytes copied as they are; an
        index is counted apart (it dies if its session is relocated)."""
        copied = 0
        for piece, n in self.pieces[sector].items():
            if piece in self.index_pieces:
                continue
            moved[self.owner[piece]] += 1
            copied += n
        return copied

    def cost(self, sectors, moved, copied):
        """Bytes that cleaning `sectors` writes, given their tally: the live
        bodies, what each relocated session writes beside them, and the
        indexes there whose session is not relocated (copied as they are)."""
        kept = sum(
            n
            for s in sectors
            for piece, n in self.pieces[s].items()
            if piece in self.index_pieces and self.owner[piece] not in moved
        )
        return copied + kept + sum(self.extra(o, k) for o, k in moved.items())

    def victims(self):
        cands = [s for s in self.used if s != self.head]
        if self.policy == "fifo":
            moved, copied = collections.Counter(), 0
            for k, s in enumerate(cands):
                copied += self.tally(s, moved)
                cost = self.cost(cands[: k + 1], moved, copied)
                room = (k + 1) * PAYLOAD - cost
                if room > 0 and cost <= self.limit * room:
                    return cands[: k + 1]
            return None
        if not cands:
            return None

        def cost(s):
            moved = collections.Counter()
            return self.cost([s], moved, self.tally(s, moved))

        v = min(cands, key=cost)
        c = cost(v)
        room = PAYLOAD - c
        return [v] if room > 0 and c <= self.limit * room else None

    def collect(self):
        vs = self.victims()
        if not vs:
            return False
        relocated = collections.Counter()
        for v in vs:
            relocated_here = collections.Counter()
            self.tally(v, relocated_here)
            relocated.update(relocated_here)
        for v in vs:
            moved = list(self.pieces[v].items())
            self.used.remove(v)
            self.pieces[v] = {}
            self.live[v] = 0
            self.free.append(v)
            for piece, n in moved:
                s = self.owner[piece]
                self.where[s] = [x for x in self.where[s] if x != (v, piece)]
                if piece in self.index_pieces and s in relocated:
                    continue  # replaced by the session's new index below
                self.place(s, n, piece)
        for s, k in relocated.items():
            extra = self.extra(s, k)
            if extra == 0 or s not in self.where:
                continue
            if self.relocation == "index":
                self.kill(s, self.index.pop(s, None))
            piece = self.new_piece(s)
            if self.relocation == "index":
                self.index_pieces.add(piece)
                self.index[s] = piece
            self.place(s, extra, piece)
        return True

    def kill(self, session, piece):
        """Marks `piece` of `session` dead wherever it lies."""
        if piece is None:
            return
        for s, p in [x for x in self.where[session] if x[1] == piece]:
            self.live[s] -= self.pieces[s].pop(p, 0)
        self.where[session] = [x for x in self.where[session] if x[1] != piece]

    def append(self, session, n, records):
        while len(self.free) < n // PAYLOAD + 1 + self.reserve:
            if not self.collect():
                return False
        self.records[session] += records
        self.place(session, n, self.new_piece(session))
        return True

    def delete(self, session):
        for s, piece in self.where.pop(session, []):
            self.live[s] -= self.pieces[s].pop(piece, 0)


def size_arg(text):
    t = text.upper()
    mult = {"K": 1024, "M": 1024 * 1024}.get(t[-1:], 1)
    return int(t.rstrip("KM")) * mult


def fill(ops, sectors, policy, reserve, limit, relocation):
    ring = Ring(sectors, policy, reserve, limit, relocation)
    live_user = {}
    user = 0
    for rnd in range(10_000):
        for op in ops:
            session = f"{op['session']}#{rnd}"
            if op["op"] == "session_delete":
                ring.delete(session)
                live_user.pop(session, None)
                continue
            bodies = [r["body"].encode() for r in op["records"]]
            first = session.encode() if session not in live_user else None
            if not ring.append(session, batch_len(bodies, first), len(bodies)):
                return sum(live_user.values()) / (sectors * SECTOR), ring.programmed / user
            n = sum(len(b) for b in bodies)
            live_user[session] = live_user.get(session, 0) + n
            user += n
    raise SystemExit("the partition never filled")


def main():
    global FRAMING
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--trace", default="traces/bfcl-multi-turn.jsonl")
    ap.add_argument("--size", type=size_arg, default=size_arg("1M"))
    ap.add_argument(
        "--reserve",
        type=int,
        help="free sectors appends leave (default: 9 for collection and maintenance, "
        "as the engine's at 1 MiB, and the room kept for memory and profiles: "
        "about 112 KiB, at most a sixteenth of the partition)",
    )
    ap.add_argument("--limit", type=float, default=4.0, help="bytes copied per byte of room")
    ap.add_argument(
        "--relocation",
        choices=("bytes", "index", "record"),
        default="bytes",
        help="what a relocated session writes beside its bodies: nothing (default), "
        "a new index as the engine's bases, or a small record of the moved bodies",
    )
    ap.add_argument(
        "--framing",
        type=int,
        default=FRAMING,
        help="bytes a session batch takes beside its records: the chunk header and the "
        f"batch meta (default: {FRAMING}, format version 9's 12 and 9)",
    )
    a = ap.parse_args()
    FRAMING = a.framing
    with open(a.trace) as f:
        ops = [json.loads(line) for line in f]
    ops = [o for o in ops if o.get("op") in ("append", "session_delete")]
    sectors = a.size // SECTOR
    if a.reserve is None:
        knowledge = min(112 * 1024, a.size // 16)
        a.reserve = 9 + -(-knowledge // (PAYLOAD - 12))
    print(
        f"model: {a.trace}, {sectors} sectors, reserve {a.reserve}, copy limit {a.limit:g}, "
        f"relocation writes {a.relocation}, batch framing {a.framing} B"
    )
    for policy in ("fifo", "greedy"):
        cap, wa = fill(ops, sectors, policy, a.reserve, a.limit, a.relocation)
        print(f"  {policy:<7} capacity {cap:.3f}  fill-phase program WA {wa:.2f}")


if __name__ == "__main__":
    main()
