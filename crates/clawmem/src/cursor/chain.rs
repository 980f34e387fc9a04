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
//! one, the batches of its uid newer than its root, in log order. With the
//! feature `sector-table`, a chain element may be a moves record instead of
//! a batch (format 10); the chain lists them apart as well ([`Move`]), at
//! most [`MOVES_MAX`], oldest first.
//!
//! Power loss: it only reads; nothing here can be torn.

use embedded_storage::nor_flash::NorFlash;

use super::read_first_chunk;
use crate::error::{fail, Fail};
use crate::layout::{ChunkHeader, CHUNK_HEADER_LEN};
use crate::log::{Io, Ring};
use crate::session::SESSION_BATCH;
use crate::session::{BatchFixed, Session, BATCH_FIXED, CHAIN_MAX};
#[cfg(feature = "sector-table")]
use crate::session::{MovesFixed, MOVES_FIXED, MOVES_MAX, SESSION_MOVES};

/// Whether a chain element may be a moves record (format 10).
const MOVES: bool = cfg!(feature = "sector-table");

/// Most batches a chain holds: the root and [`CHAIN_MAX`] batches after it,
/// and as many again when a rescan of the log finds the chain of a base
/// damaged at rest (the batches before it and after it).
pub(crate) const CHAIN_CAP: usize = 2 * CHAIN_MAX + 1;

/// The batches of a session from its root to its head, oldest first.
#[derive(Clone, Copy)]
pub(crate) struct Chain {
    pub addrs: [u32; CHAIN_CAP],
    pub len: usize,
    /// The moves records among them, oldest first (format 10).
    #[cfg(feature = "sector-table")]
    pub moves: [Move; MOVES_MAX],
    #[cfg(feature = "sector-table")]
    pub moves_len: usize,
}

/// A moves record of a chain (`docs/FORMAT.md`, "Session moves"): where
/// its bodies are, and which sector it emptied.
#[cfg(feature = "sector-table")]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Move {
    /// Its place in the chain.
    pub segment: usize,
    /// The sector it emptied (an index).
    pub sector: u32,
    /// The stream address of its payload.
    pub payload: u32,
    /// Its payload's length (`u32::MAX` when a continuation is missing:
    /// no body is found in it then).
    pub len: u32,
}

#[cfg(feature = "sector-table")]
impl Move {
    const EMPTY: Move = Move {
        segment: 0,
        sector: 0,
        payload: 0,
        len: 0,
    };
}

impl Chain {
    /// No batches (a placeholder in the work area).
    pub(crate) const EMPTY: Chain = Chain {
        addrs: [0; CHAIN_CAP],
        len: 0,
        #[cfg(feature = "sector-table")]
        moves: [Move::EMPTY; MOVES_MAX],
        #[cfg(feature = "sector-table")]
        moves_len: 0,
    };

    /// Whether chain segment `seg` is a moves record.
    #[cfg(feature = "sector-table")]
    pub fn is_moves(&self, seg: usize) -> bool {
        self.moves
            .iter()
            .take(self.moves_len)
            .any(|m| m.segment == seg)
    }

    /// Notes the moves record at `addr` (first chunk `h`), chain segment
    /// `segment`, after those noted (a collected chain notes them newest
    /// first and turns them round). `false` if the chain holds too many.
    #[cfg(feature = "sector-table")]
    fn note_move<F: NorFlash>(
        &mut self,
        io: &mut Io<'_, F>,
        addr: u32,
        h: &ChunkHeader,
        f: &MovesFixed,
        segment: usize,
    ) -> Result<bool, Fail> {
        let Some(slot) = self.moves.get_mut(self.moves_len) else {
            return Ok(false);
        };
        if f.sector >= io.geo.count {
            return Ok(false);
        }
        *slot = Move {
            segment,
            sector: f.sector,
            payload: addr + CHUNK_HEADER_LEN,
            len: super::batch_len(io, addr, h)?,
        };
        self.moves_len += 1;
        Ok(true)
    }
}

/// The fixed part of the moves record at `addr` (first chunk `h`), if it is
/// one and its fixed part decodes.
#[cfg(feature = "sector-table")]
fn moves_fixed<F: NorFlash>(
    io: &mut Io<'_, F>,
    addr: u32,
    h: &ChunkHeader,
) -> Result<Option<MovesFixed>, Fail> {
    if h.kind != SESSION_MOVES || !h.is_first() {
        return Ok(None);
    }
    let mut b = [0u8; MOVES_FIXED as usize];
    io.read_stream(addr + CHUNK_HEADER_LEN, &mut b)?;
    Ok(MovesFixed::decode(&b))
}

impl Chain {
    /// Collects the chain of `s` by walking back from its head, in place
    /// (no second chain on the stack). On an error `self` holds what the
    /// walk had reached.
    pub fn collect<F: NorFlash>(&mut self, io: &mut Io<'_, F>, s: &Session) -> Result<(), Fail> {
        #[cfg(feature = "sector-table")]
        {
            self.moves_len = 0;
        }
        let mut n = 0;
        let mut at = s.head;
        loop {
            let addrs = &mut self.addrs;
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
            // (With moves records, either kind; checked below.)
            let h = read_first_chunk(io, at, Some(SESSION_BATCH).filter(|_| !MOVES))?;
            #[cfg(feature = "sector-table")]
            {
                if let Some(f) = moves_fixed(io, at, &h)? {
                    // Its segment is set once the chain's length is known.
                    if f.uid != s.uid || f.prev == at || !self.note_move(io, at, &h, &f, n)? {
                        return Err(io.parked().at(
                            fail!(Corrupted, "a session's moves record does not belong"),
                            at,
                        ));
                    }
                    at = f.prev;
                    continue;
                }
                if h.kind != SESSION_BATCH {
                    return Err(io.parked().at(
                        fail!(Corrupted, "a pointer leads to the wrong kind of record"),
                        at,
                    ));
                }
            }
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
        self.addrs.copy_within(CHAIN_MAX + 1 - n..CHAIN_MAX + 1, 0);
        self.len = n;
        // Noted newest first with their count from the head (1 for the
        // head): oldest first, with their segments.
        #[cfg(feature = "sector-table")]
        {
            let moves = &mut self.moves[..self.moves_len];
            moves.reverse();
            for m in moves {
                m.segment = n - m.segment;
            }
        }
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
        self.addrs[0] = s.root;
        let mut n = 1;
        self.len = n;
        #[cfg(feature = "sector-table")]
        {
            self.moves_len = 0;
        }
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
                #[cfg(feature = "sector-table")]
                if pos != s.root && h.seq > root_seq && n < CHAIN_CAP {
                    if let Some(f) = moves_fixed(io, pos, &h)?.filter(|f| f.uid == s.uid) {
                        if self.note_move(io, pos, &h, &f, n)? {
                            self.addrs[n] = pos;
                            n += 1;
                            self.len = n;
                        }
                    }
                }
                if h.kind == SESSION_BATCH && h.is_first() && pos != s.root && h.seq > root_seq {
                    let mut f = [0u8; BATCH_FIXED as usize];
                    io.read_stream(pos + CHUNK_HEADER_LEN, &mut f)?;
                    if BatchFixed::decode(&f).is_some_and(|f| f.uid == s.uid) && n < CHAIN_CAP {
                        self.addrs[n] = pos;
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
