//! A session's chain: the batches from its root to its head, oldest first.
//!
//! Owns: [`Chain`], collected by walking the "previous" pointers back from
//! the head ([`Chain::collect`]), or found again by scanning the ring for the
//! session's batches when a pointer is damaged ([`Chain::scan`]); both are
//! bounded ([`CHAIN_CAP`] addresses, the ring's sectors), with no recursion
//! and no allocation.
//!
//! Invariants: a chain starts at the session's root; a collected chain holds
//! only batches of the session's uid, linked by their pointers; a scanned
//! one, the batches of its uid newer than its root, in log order.
//!
//! Power loss: it only reads; nothing here can be torn.

use embedded_storage::nor_flash::NorFlash;

use super::read_first_chunk;
use crate::error::{fail, Fail};
use crate::layout::{ChunkHeader, CHUNK_HEADER_LEN};
use crate::log::{Io, Ring};
use crate::session::SESSION_BATCH;
use crate::session::{BatchFixed, Session, BATCH_FIXED, CHAIN_MAX};

/// Most batches a chain holds: the root and [`CHAIN_MAX`] batches after it,
/// and as many again when a rescan of the log finds the chain of a base
/// damaged at rest (the batches before it and after it).
pub(crate) const CHAIN_CAP: usize = 2 * CHAIN_MAX + 1;

/// The batches of a session from its root to its head, oldest first.
#[derive(Clone, Copy)]
pub(crate) struct Chain {
    pub addrs: [u32; CHAIN_CAP],
    pub len: usize,
}

impl Chain {
    /// No batches (a placeholder in the work area).
    pub(crate) const EMPTY: Chain = Chain {
        addrs: [0; CHAIN_CAP],
        len: 0,
    };
}

impl Chain {
    /// Collects the chain of `s` by walking back from its head, in place
    /// (no second chain on the stack). On an error `self` holds what the
    /// walk had reached.
    pub fn collect<F: NorFlash>(&mut self, io: &mut Io<'_, F>, s: &Session) -> Result<(), Fail> {
        let addrs = &mut self.addrs;
        let mut n = 0;
        let mut at = s.head;
        loop {
            if n > CHAIN_MAX {
                return Err(io.parked().at(
                    fail!(Corrupted, "a session chain is longer than it may be"),
                    at,
                ));
            }
            // Newest last, from CHAIN_MAX down; moved to the front below.
            addrs[CHAIN_MAX - n] = at;
            n += 1;
            if at == s.root {
                break;
            }
            let h = read_first_chunk(io, at, Some(SESSION_BATCH))?;
            let mut fixed = [0u8; BATCH_FIXED as usize];
            io.read_stream(at + CHUNK_HEADER_LEN, &mut fixed)?;
            let f = BatchFixed::decode(&fixed).ok_or_else(|| {
                io.parked()
                    .at(fail!(Corrupted, "session batch meta is invalid"), at)
            })?;
            if f.uid != s.uid || f.prev == at {
                return Err(io.parked().at(
                    fail!(Corrupted, "a session chain leads to another session"),
                    at,
                ));
            }
            let _ = h;
            at = f.prev;
        }
        addrs.copy_within(CHAIN_MAX + 1 - n..CHAIN_MAX + 1, 0);
        self.len = n;
        Ok(())
    }
}

impl Chain {
    /// Finds a session's chain again by scanning the log (the ring from the
    /// tail to the head) for the batches of its uid after its root: the
    /// repair when a "previous" pointer is damaged. Bounded by the ring.
    /// Fills `self` in place (no second chain on the stack).
    pub fn scan<F: NorFlash>(
        &mut self,
        io: &mut Io<'_, F>,
        s: &Session,
        ring: Ring,
    ) -> Result<(), Fail> {
        let addrs = &mut self.addrs;
        addrs[0] = s.root;
        let mut n = 1;
        self.len = n;
        let root_seq = io.chunk_header(s.root)?.map(|h| h.seq).unwrap_or(0);
        let geo = *io.geo;
        // From the tail to the head, by sequence (a hole, a sequence whose
        // sector was released out of order, is passed over): as many steps
        // as the sequences in use span (the sectors in use in format 9's
        // ring; with holes up to what a table entry holds, until stage 4
        // bounds the span).
        let span = ring.head_seq.saturating_sub(ring.tail_seq);
        for k in 0..=span {
            let Some(sector) = io.sector_of_seq(&ring, ring.tail_seq + k) else {
                continue;
            };
            let end = geo.sector_start(sector) + geo.sector;
            let mut pos = geo.first_chunk(sector);
            // After damage, chunks are trusted again from the next one whose
            // CRC checks out, searched word by word.
            let mut resync = false;
            let mut scratch = [0u8; 64];
            while pos + CHUNK_HEADER_LEN <= end {
                let mut raw = [0u8; CHUNK_HEADER_LEN as usize];
                io.read(pos, &mut raw)?;
                if raw.iter().all(|b| *b == 0xFF) && !resync {
                    break;
                }
                let Some(h) =
                    ChunkHeader::decode(&raw).filter(|h| pos + geo.chunk_size(h.len) <= end)
                else {
                    resync = true;
                    pos += geo.write;
                    continue;
                };
                let size = geo.chunk_size(h.len);
                // Sequence numbers grow by one from chunk to chunk in a
                // sector: anything else after this chunk may mean its length
                // is damaged. Such a chunk, one that reaches the sector's end
                // (a length damaged to reach it passes over everything after
                // it), or one found while resyncing, is trusted only if its
                // CRC checks out; else the search goes on after its start.
                let follows = !resync
                    && pos + size + CHUNK_HEADER_LEN <= end
                    && io
                        .chunk_header(pos + size)?
                        .is_some_and(|next| next.seq == h.seq.wrapping_add(1));
                if !follows && !io.chunk_crc_ok(pos, &h, &mut scratch)? {
                    resync = true;
                    pos += geo.write;
                    continue;
                }
                resync = false;
                if h.kind == SESSION_BATCH && h.is_first() && pos != s.root && h.seq > root_seq {
                    let mut f = [0u8; BATCH_FIXED as usize];
                    io.read_stream(pos + CHUNK_HEADER_LEN, &mut f)?;
                    if BatchFixed::decode(&f).is_some_and(|f| f.uid == s.uid) && n < CHAIN_CAP {
                        addrs[n] = pos;
                        n += 1;
                        self.len = n;
                    }
                }
                pos += size;
            }
        }
        Ok(())
    }
}
