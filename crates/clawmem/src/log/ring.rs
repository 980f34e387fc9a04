//! The ring's order: which sector comes after or before another, which
//! sequence number a sector in use carries, and where a batch's payload
//! stream goes on at a sector's end. Every layer asks here for a sector's
//! successor or predecessor (the log's own walks, every payload stream, the
//! cursors' continuations and the chain rescan, the store's mount walks,
//! bases and scrub); a few step a sequence number beside it (`log/mod.rs`
//! says which).
//!
//! Owns nothing on flash and no state of its own: [`Ring`] is the ring's
//! position (head, its sequence, the tail's sequence), copied out of the
//! [`Log`](super::Log) that keeps it, and the free functions take the
//! partition's [`Geometry`].
//!
//! Invariant (format 9): the map from ring order to sectors is the
//! identity. The sectors are used in physical order, the one after the last
//! being sector 0, and the sectors in use carry consecutive sequence
//! numbers from the tail to the head, so a sector's sequence is ring
//! arithmetic from the head's. Format 10 (`docs/DESIGN.md`, "What a picking
//! cleaner needs") backs these answers with a table of the sector
//! sequences instead; the callers stay as they are.
//!
//! Power loss: nothing here reads or writes flash.

use crate::layout::{Geometry, CHUNK_HEADER_LEN};

/// Where the ring is: the head's index and sequence and the tail's
/// sequence (the sectors in use are the tail's up to the head's).
#[derive(Clone, Copy)]
pub(crate) struct Ring {
    pub head: u32,
    pub head_seq: u32,
    pub tail_seq: u32,
}

impl Ring {
    /// Sectors in use, tail to head inclusive.
    #[inline]
    pub fn used(&self) -> u32 {
        self.head_seq.wrapping_sub(self.tail_seq).wrapping_add(1)
    }

    /// Sector sequence of the sector at `index`, if it is in use.
    #[inline]
    pub fn seq_of(&self, geo: &Geometry, index: u32) -> Option<u32> {
        let back = back(geo, self.head, index);
        if back >= self.used() {
            return None;
        }
        Some(self.head_seq - back)
    }

    /// Sector index holding the sector with sequence `seq`, which is in
    /// use: `tail_seq <= seq <= head_seq`. Its callers hold that bound; a
    /// sequence past the head (not in use) counts as the head's.
    #[inline]
    pub fn index_of_seq(&self, geo: &Geometry, seq: u32) -> u32 {
        before(
            geo,
            self.head,
            self.head_seq.saturating_sub(seq) % geo.count,
        )
    }
}

/// How many sectors `index` lies before the head `head` in ring order.
#[inline]
fn back(geo: &Geometry, head: u32, index: u32) -> u32 {
    (head + geo.count - index) % geo.count
}

/// The sequence the sector at `index` carries counted back from the head
/// `head` of sequence `head_seq`, whether it is in use or not (0 at least:
/// older than any). For a snapshot of the ring's head taken before a
/// write ([`Ring::seq_of`] answers for the sectors in use now).
#[inline]
pub(crate) fn seq_back_from(geo: &Geometry, head: u32, head_seq: u32, index: u32) -> u32 {
    head_seq.saturating_sub(back(geo, head, index))
}

/// The sector after `index` in ring order.
#[inline]
pub(crate) fn next(geo: &Geometry, index: u32) -> u32 {
    geo.next(index)
}

/// The sector before `index` in ring order.
#[inline]
pub(crate) fn prev(geo: &Geometry, index: u32) -> u32 {
    geo.prev(index)
}

/// The sector `n` places after `index` in ring order (`n <= count`).
#[inline]
pub(crate) fn after(geo: &Geometry, index: u32, n: u32) -> u32 {
    // (`index` is below the count: one wrap at most.)
    let i = index + n;
    if i >= geo.count {
        i - geo.count
    } else {
        i
    }
}

/// The sector `n` places before `index` in ring order (`n <= count`).
#[inline]
pub(crate) fn before(geo: &Geometry, index: u32, n: u32) -> u32 {
    if n > index {
        index + geo.count - n
    } else {
        index - n
    }
}

/// Where the payload stream that leaves sector `index` at its end goes on:
/// after the next sector's header and continuation chunk header.
#[inline]
pub(crate) fn continued(geo: &Geometry, index: u32) -> u32 {
    geo.first_chunk(next(geo, index)) + CHUNK_HEADER_LEN
}

/// The address of the byte `len` bytes further along the payload stream
/// that starts at `address` (the continuation's address when that byte
/// is in the next sector).
pub(crate) fn stream_advance(geo: &Geometry, address: u32, len: u32) -> u32 {
    let mut address = address;
    let mut left = len;
    for _ in 0..geo.count + 1 {
        let room = geo.sector_end(address) - address;
        if left < room {
            return address + left;
        }
        left -= room;
        address = continued(geo, geo.sector_of(address));
    }
    address
}

/// Whether the `len` stream bytes from `address` have one in sector
/// `index` (they lie in consecutive sectors, in ring order).
#[cfg(feature = "memory")] // a memory scrub only
pub(crate) fn stream_touches(geo: &Geometry, address: u32, len: u32, index: u32) -> bool {
    let first = geo.sector_of(address);
    let last = geo.sector_of(stream_advance(geo, address, len.saturating_sub(1)));
    let span = (last + geo.count - first) % geo.count;
    (index + geo.count - first) % geo.count <= span
}

#[cfg(test)]
mod tests {
    use super::*;

    fn geo() -> Geometry {
        // Eight 4 KiB sectors, 4-byte writes.
        Geometry {
            write: 4,
            sector: 4096,
            count: 8,
            sector_header: 24,
        }
    }

    #[test]
    fn next_and_prev_wrap_at_both_ends() {
        let g = geo();
        assert_eq!(next(&g, 0), 1);
        assert_eq!(next(&g, 6), 7);
        assert_eq!(next(&g, 7), 0);
        assert_eq!(prev(&g, 0), 7);
        assert_eq!(prev(&g, 1), 0);
        for i in 0..g.count {
            assert_eq!(prev(&g, next(&g, i)), i);
            assert_eq!(after(&g, i, 1), next(&g, i));
            assert_eq!(before(&g, i, 1), prev(&g, i));
            assert_eq!(after(&g, i, g.count), i);
            assert_eq!(before(&g, after(&g, i, 5), 5), i);
            assert_eq!(before(&g, i, g.count), i);
        }
    }

    #[test]
    fn seq_of_agrees_with_the_head_arithmetic() {
        let g = geo();
        // Not wrapped: sectors 0..=3 in use, sequences 10..=13.
        let r = Ring {
            head: 3,
            head_seq: 13,
            tail_seq: 10,
        };
        assert_eq!(r.used(), 4);
        for i in 0..4 {
            assert_eq!(r.seq_of(&g, i), Some(10 + i));
            assert_eq!(r.index_of_seq(&g, 10 + i), i);
            assert_eq!(seq_back_from(&g, r.head, r.head_seq, i), 10 + i);
        }
        for i in 4..8 {
            assert_eq!(r.seq_of(&g, i), None);
        }
        // Wrapped: sectors 6, 7, 0, 1 in use, sequences 100..=103.
        let r = Ring {
            head: 1,
            head_seq: 103,
            tail_seq: 100,
        };
        let in_use = [(6, 100), (7, 101), (0, 102), (1, 103)];
        for (i, seq) in in_use {
            assert_eq!(r.seq_of(&g, i), Some(seq));
            assert_eq!(r.index_of_seq(&g, seq), i);
        }
        for i in 2..6 {
            assert_eq!(r.seq_of(&g, i), None);
        }
        // Walking from the tail with `next` meets the sequences in order.
        let mut s = r.index_of_seq(&g, r.tail_seq);
        for k in 0..r.used() {
            assert_eq!(r.seq_of(&g, s), Some(r.tail_seq + k));
            s = next(&g, s);
        }
        // A full ring: every sector in use.
        let r = Ring {
            head: 2,
            head_seq: 20,
            tail_seq: 13,
        };
        assert_eq!(r.seq_of(&g, 3), Some(13));
        assert_eq!(r.seq_of(&g, 2), Some(20));
        // Counted back from a head near sequence 0, a sector stops at 0.
        assert_eq!(seq_back_from(&g, 1, 1, 7), 0);
        assert_eq!(seq_back_from(&g, 1, 1, 0), 0);
        assert_eq!(seq_back_from(&g, 1, 1, 1), 1);
    }

    #[test]
    fn streams_cross_the_last_sector_into_sector_0() {
        let g = geo();
        let start = g.sector_start(7) + g.sector - 10;
        // Ten bytes left in sector 7; the eleventh is sector 0's first
        // payload byte.
        assert_eq!(stream_advance(&g, start, 9), start + 9);
        let cont = g.first_chunk(0) + CHUNK_HEADER_LEN;
        assert_eq!(continued(&g, 7), cont);
        assert_eq!(stream_advance(&g, start, 10), cont);
        assert_eq!(stream_advance(&g, start, 15), cont + 5);
        #[cfg(feature = "memory")]
        {
            assert!(stream_touches(&g, start, 10, 7));
            assert!(!stream_touches(&g, start, 10, 0));
            assert!(stream_touches(&g, start, 11, 0));
            assert!(!stream_touches(&g, start, 11, 1));
            assert!(!stream_touches(&g, start, 11, 6));
        }
    }
}
