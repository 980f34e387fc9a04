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
//! That table is [`SectorTable`] (feature `sector-table`, off by default:
//! stage 1 of format 10, "Format 10 in stages"). With it on, the log
//! answers from the table which sector a stream or a batch goes on in
//! ([`Io::successor`](super::Io::successor): the sector of the next
//! sequence, else the physical next; a stream being written, whose later
//! sectors are not open yet, goes on in the ones the head opens next,
//! [`Io::planned_advance`](super::Io::planned_advance)), which sector the
//! head opens next (the first free one
//! after it in physical order), a sector's sequence, which sector carries a
//! sequence ([`Log::sector_of_seq`], `None` for a hole) and how many are in
//! use; a sector can be released out of order
//! ([`Log::release_sector`](super::Log::release_sector), RAM only). The
//! layers above walk by those answers: the cursors' chain rescan and
//! `Store::check` go by sequence and pass over holes, a base decides which
//! bodies it carries by their sector's sequence from the table, the memory
//! scrub follows a stream by successors, and a collection's dry run counts
//! no room for a hole. The mount rebuilds the table from the headers and
//! the newest full checkpoint, which records it (format 10, stage 2,
//! `log/table.rs`); in debug
//! builds the log checks the table after every change of the ring (its own
//! consistency always, the arithmetic while no sector was released out of
//! order). A lookup by sequence tries first where format 9's ring puts
//! it, counting back from the sector opened last, and searches the table
//! only when that sector carries another: a walk of every sequence is
//! linear while the ring is in physical order, and once the head has
//! reopened a hole the sequences older than it miss the guess, so a walk
//! is quadratic in the sectors (about a million steps at 1,024; the span
//! of sequences with holes is bounded only by what an entry holds until
//! stage 4 bounds it).
//!
//! [`Log::sector_of_seq`]: super::Log::sector_of_seq
//!
//! Power loss: nothing here reads or writes flash.

#[cfg(feature = "sector-table")]
use super::dead::DEAD_PENDING;
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

    /// The sector carrying sequence `seq`, if it is in use (format 9:
    /// every sequence from the tail to the head is).
    #[inline]
    pub fn sector_of(&self, geo: &Geometry, seq: u32) -> Option<u32> {
        if seq < self.tail_seq || seq > self.head_seq {
            return None;
        }
        Some(self.index_of_seq(geo, seq))
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

/// The address of the byte `len` bytes further along the payload stream
/// that starts at `address` (the continuation's address when that byte
/// is in the next sector).
pub(crate) fn stream_advance(geo: &Geometry, address: u32, len: u32) -> u32 {
    stream_advance_by(geo, address, len, |s| next(geo, s))
}

/// [`stream_advance`] with the successor of a sector given by `next`.
#[inline(always)]
pub(crate) fn stream_advance_by(
    geo: &Geometry,
    address: u32,
    len: u32,
    next: impl Fn(u32) -> u32,
) -> u32 {
    let mut address = address;
    let mut left = len;
    for _ in 0..geo.count + 1 {
        let room = geo.sector_end(address) - address;
        if left < room {
            return address + left;
        }
        left -= room;
        address = geo.first_chunk(next(geo.sector_of(address))) + CHUNK_HEADER_LEN;
    }
    address
}

/// Most sectors the [`SectorTable`] holds: 1,024 (4 MiB of 4 KiB
/// sectors, 2 KiB of RAM). On a partition with more, the table stays off
/// and ring order is format 9's arithmetic.
#[cfg(feature = "sector-table")]
pub(crate) const TABLE_SECTORS: usize = 1024;

/// A [`SectorTable`] entry of a sector not in use.
#[cfg(feature = "sector-table")]
const FREE: u16 = u16::MAX;

/// A [`SectorTable`] entry of a sector released out of order whose
/// release no full checkpoint records yet: a hole for every walk, but
/// still counted in use and never opened, so that a power cut before the
/// checkpoint lands leaves it as a mount finds it (its header, its old
/// contents, all dead).
#[cfg(feature = "sector-table")]
const HELD: u16 = u16::MAX - 1;

/// The sequence of every sector in use, by sector index (feature
/// `sector-table`; stages 1 and 2 of format 10, `docs/DESIGN.md`, "Format
/// 10 in stages"): what ring order becomes once a sector can be released out of
/// order. Sequences stay consecutive as the head opens sectors; a sector
/// released in the middle leaves a sequence that no sector carries, the
/// stream that crossed into it is dead, and the head opens the first free
/// sector after it in physical order.
///
/// Invariant: an entry is `FREE`, `HELD` (released out of order, its
/// release not yet recorded by a full checkpoint: in use for counting,
/// a hole for every walk, never opened) or the sector's sequence less
/// `base`; `used` counts the entries that are not `FREE`. On a format 9
/// ring (no release in the middle) the table is the identity map of
/// [`Ring`], which [`SectorTable::agrees`] checks.
#[cfg(feature = "sector-table")]
pub(crate) struct SectorTable {
    seq: [u16; TABLE_SECTORS],
    base: u32,
    used: u32,
    /// Sectors of the partition; 0: the table is off (more than
    /// [`TABLE_SECTORS`]).
    count: u32,
    /// A sector was released out of ring order since the last fill.
    reordered: bool,
    /// The entries were read from the headers' first bytes, whose CRC is
    /// not checked yet ([`resolve_prefixes`](Self::resolve_prefixes)).
    unchecked: bool,
    /// The sector set last and its sequence (the head's, once the ring
    /// is open): where [`index_of_seq`](Self::index_of_seq) looks first.
    newest: (u32, u32),
    /// Bytes of each sector in use known to be dead (stage 3): counted
    /// where what they hold dies, never more than are, 0 when the sector
    /// is opened and after a mount ([`add_dead`](Self::add_dead)).
    pub(super) dead: [u16; TABLE_SECTORS],
    /// What [`add_dead`](Self::add_dead) counted since the newest
    /// checkpoint, for the next delta to carry: `index | bytes << 16`, one
    /// entry a sector, the first `pending_len`. A sector past the list's
    /// room is not carried (a mount then counts less, never more).
    pub(super) pending: [u32; DEAD_PENDING],
    pub(super) pending_len: u32,
}

/// The unit a full checkpoint records dead bytes in: a 16th of a
/// `sector`-byte sector (256 B of a 4 KiB one), so that half a byte a
/// sector holds any count.
#[cfg(feature = "sector-table")]
pub const fn dead_unit(sector: u32) -> u32 {
    match sector / 16 {
        0 => 1,
        u => u,
    }
}

#[cfg(feature = "sector-table")]
impl SectorTable {
    /// A table that is off until [`fill`](Self::fill).
    pub const OFF: SectorTable = SectorTable {
        seq: [FREE; TABLE_SECTORS],
        base: 0,
        used: 0,
        count: 0,
        reordered: false,
        unchecked: false,
        newest: (0, 0),
        dead: [0; TABLE_SECTORS],
        pending: [0; DEAD_PENDING],
        pending_len: 0,
    };

    /// Whether the table answers (the partition fits it).
    #[inline]
    pub fn on(&self) -> bool {
        self.count != 0
    }

    /// Sets the table to the ring `ring` of format 9: the sectors from its
    /// tail to its head, in physical order, carry consecutive sequences.
    /// Off if the partition has more sectors than the table.
    pub fn fill(&mut self, geo: &Geometry, ring: &Ring) {
        // A sector that keeps its sequence keeps its dead bytes (the tail
        // moved, the ring laid out again); any other starts at 0.
        for index in 0..TABLE_SECTORS as u32 {
            let kept = index < geo.count
                && self.seq_of(index).is_some()
                && self.seq_of(index) == ring.seq_of(geo, index);
            if !kept {
                self.dead[index as usize] = 0;
                self.forget_pending(index);
            }
        }
        self.seq = [FREE; TABLE_SECTORS];
        self.used = 0;
        self.base = ring.tail_seq;
        self.count = if geo.count as usize <= TABLE_SECTORS {
            geo.count
        } else {
            0
        };
        self.reordered = false;
        self.unchecked = false;
        self.newest = (ring.head, ring.head_seq);
        // (The sequences in use span at most `count`: each fits.)
        for index in 0..self.count {
            if let Some(seq) = ring.seq_of(geo, index) {
                self.seq[index as usize] = (seq - self.base) as u16;
                self.used += 1;
            }
        }
    }

    /// A sector was released out of ring order: from now on the table is
    /// not format 9's layout ([`agrees`](Self::agrees) is not asked), until
    /// it is filled again.
    pub fn reorder(&mut self) {
        self.reordered = true;
    }

    /// Whether a sector was released out of order since the table was
    /// filled (or a mount filled it from what it read, not by format 9's
    /// arithmetic).
    pub fn reordered(&self) -> bool {
        self.reordered
    }

    /// The sequence of sector `index`, if it is in use.
    #[inline]
    pub fn seq_of(&self, index: u32) -> Option<u32> {
        match self.seq.get(index as usize) {
            Some(&off) if off < HELD && index < self.count => Some(self.base + u32::from(off)),
            _ => None,
        }
    }

    /// The sector that carries sequence `seq`, if one in use does. Tried
    /// first where format 9's ring puts it, counting back from the sector
    /// opened last (the head): a ring in physical order answers in one
    /// step, the rest by a search of the table.
    pub fn index_of_seq(&self, seq: u32) -> Option<u32> {
        let off = seq.checked_sub(self.base)?;
        if off >= u32::from(HELD) || self.count == 0 {
            return None;
        }
        let back = self.newest.1.wrapping_sub(seq) % self.count;
        let guess = (self.newest.0 + self.count - back) % self.count;
        if self.seq[guess as usize] == off as u16 {
            return Some(guess);
        }
        (0..self.count).find(|&i| self.seq[i as usize] == off as u16)
    }

    /// Sectors in use.
    #[inline]
    pub fn used(&self) -> u32 {
        self.used
    }

    /// Whether sequence `seq` fits an entry, moving `base` up to the oldest
    /// sequence in use first if it must (an empty table takes `seq` as its
    /// base). `false`: the sequences in use would span more than an entry
    /// holds (a sector kept in use while about 65,000 others were opened),
    /// which stage 4's bound on the span is to prevent; the log then refuses
    /// to open a sector rather than record it wrongly.
    pub fn room_for(&mut self, seq: u32) -> bool {
        if self.used == 0 {
            self.base = seq;
        } else if seq.wrapping_sub(self.base) >= u32::from(HELD) {
            self.rebase();
        }
        seq.checked_sub(self.base)
            .is_some_and(|o| o < u32::from(HELD))
    }

    /// Sector `index` is in use with sequence `seq` (the head opened it);
    /// `false` if the table could not record it ([`room_for`](Self::room_for)).
    pub fn set(&mut self, index: u32, seq: u32) -> bool {
        if index >= self.count {
            return true;
        }
        if !self.room_for(seq) {
            return false;
        }
        let was = self.seq[index as usize];
        if was == FREE {
            self.used += 1;
        }
        let off = (seq - self.base) as u16;
        if was != off {
            // Opened: nothing in it is dead yet, nor pending.
            self.dead[index as usize] = 0;
            self.forget_pending(index);
        }
        self.seq[index as usize] = off;
        self.newest = (index, seq);
        true
    }

    /// Bytes of sector `index` known to be dead (0 for one not in use).
    pub fn dead_of(&self, index: u32) -> u32 {
        match self.seq_of(index) {
            Some(_) => self.dead.get(index as usize).map_or(0, |&d| u32::from(d)),
            None => 0,
        }
    }

    /// Sector `index`'s dead bytes as a full checkpoint records them: in
    /// units of [`dead_unit`] of a `sector`-byte sector, rounded down (so
    /// never more than are), at most 15.
    pub fn dead_units(&self, index: u32, sector: u32) -> u8 {
        (self.dead_of(index) / dead_unit(sector)).min(15) as u8
    }

    /// Every count back to 0 (a mount that will not go from the
    /// checkpoint whose counts it loaded).
    pub fn clear_dead(&mut self) {
        self.dead = [0; TABLE_SECTORS];
        self.pending_len = 0;
    }

    #[cfg(any(test, debug_assertions))] // the debug check of the table
    /// Whether the table holds together with the ring position `ring`: the
    /// count of sectors in use is right, the tail is the oldest sequence in
    /// use and the head carries the head's sequence (while any is in use).
    pub fn consistent(&self, ring: &Ring) -> bool {
        if !self.on() {
            return true;
        }
        let counted = self.seq[..self.count as usize]
            .iter()
            .filter(|&&o| o != FREE)
            .count() as u32;
        counted == self.used
            && (self.used == 0
                || (self.oldest() == Some(ring.tail_seq)
                    && self.seq_of(ring.head) == Some(ring.head_seq)))
    }

    /// Sector `index` is no longer in use (released: everything live in it
    /// was moved).
    pub fn release(&mut self, index: u32) {
        if let Some(slot) = self.seq.get_mut(index as usize) {
            if *slot != FREE {
                *slot = FREE;
                self.used -= 1;
            }
        }
    }

    /// The oldest sequence in use (`None`: the table is empty).
    pub fn oldest(&self) -> Option<u32> {
        self.seq[..self.count as usize]
            .iter()
            .filter(|&&o| o < HELD)
            .min()
            .map(|&o| self.base + u32::from(o))
    }

    /// Moves `base` to the oldest sequence in use.
    fn rebase(&mut self) {
        let Some(oldest) = self.oldest() else {
            return;
        };
        let shift = (oldest - self.base) as u16;
        for o in self.seq.iter_mut().filter(|o| **o < HELD) {
            *o -= shift;
        }
        self.base = oldest;
    }

    /// The sector after `index` in ring order, where a stream written
    /// there goes on: the one carrying the next sequence, if `index` is in
    /// use and that one is (tried first in the physical next sector);
    /// otherwise the physical next sector, as format 9 wrote it (a stream
    /// that crossed into a hole is dead and nothing reads on; a sector a
    /// mount let go, whose header it found damaged at the tail, is still
    /// read where it was written until the ring reopens it).
    pub fn next(&self, geo: &Geometry, index: u32) -> u32 {
        let physical = geo.next(index);
        match self.seq_of(index) {
            Some(seq) if self.seq_of(physical) != Some(seq.wrapping_add(1)) => {
                self.index_of_seq(seq.wrapping_add(1)).unwrap_or(physical)
            }
            _ => physical,
        }
    }

    /// Where a stream being written goes on after sector `index`, before
    /// the sectors it reaches are opened: the sector of the next sequence
    /// if one in use carries it, else the one the head opens after
    /// `index` ([`next_free`](Self::next_free); the physical next sector
    /// when none is free). A base's entries name the bodies it carries
    /// further on, in sectors not opened yet.
    pub fn next_planned(&self, geo: &Geometry, index: u32) -> u32 {
        if let Some(seq) = self.seq_of(index) {
            if let Some(at) = self.index_of_seq(seq.wrapping_add(1)) {
                return at;
            }
        }
        match self.next_free(geo, index) {
            at if at == index => geo.next(index),
            at => at,
        }
    }

    /// The first free sector after `index` in physical order: the one the
    /// head opens after sector `index` (`index` itself when no other is
    /// free).
    pub fn next_free(&self, geo: &Geometry, index: u32) -> u32 {
        let mut at = index;
        for _ in 0..self.count {
            at = geo.next(at);
            if self.seq.get(at as usize) == Some(&FREE) {
                return at;
            }
        }
        index
    }

    /// Sector `index`, in use, is released out of order but not free yet:
    /// a hole for every walk, still counted in use and never opened, until
    /// [`settle_held`](Self::settle_held) (once a full checkpoint records
    /// the release).
    pub fn hold(&mut self, index: u32) {
        if let Some(slot) = self.seq.get_mut(index as usize) {
            if *slot < HELD {
                *slot = HELD;
            }
        }
    }

    /// Whether a sector is held ([`hold`](Self::hold)).
    pub fn holds(&self) -> bool {
        self.seq[..self.count as usize].contains(&HELD)
    }

    /// Every held sector is free: a full checkpoint that records the
    /// releases committed.
    pub fn settle_held(&mut self) {
        for slot in self.seq[..self.count as usize].iter_mut() {
            if *slot == HELD {
                *slot = FREE;
                self.used -= 1;
            }
        }
    }

    /// The sector of the smallest sequence in use above sector `index`'s:
    /// the next one in ring order, past any hole (tried first where the
    /// next sequence would be). `None` for the newest, or a sector not in
    /// use. Mount's scans step by it.
    pub fn next_in_use(&self, index: u32) -> Option<u32> {
        let seq = self.seq_of(index)?;
        if let Some(at) = self.index_of_seq(seq.wrapping_add(1)) {
            return Some(at);
        }
        let mut best: Option<(u32, u32)> = None;
        for i in 0..self.count {
            if let Some(s) = self.seq_of(i) {
                if s > seq && best.is_none_or(|(b, _)| s < b) {
                    best = Some((s, i));
                }
            }
        }
        best.map(|(_, i)| i)
    }

    /// Empties the table for a fill from what a mount read
    /// ([`put`](Self::put) each sector in use, then
    /// [`filled`](Self::filled)); sequences up to `head_seq`, and no more
    /// than an entry holds below it, are taken.
    pub fn clear_for(&mut self, geo: &Geometry, head: u32, head_seq: u32) {
        self.fill(
            geo,
            &Ring {
                head,
                head_seq,
                tail_seq: head_seq + 1,
            },
        );
        self.base = head_seq.saturating_sub(u32::from(HELD) - 1);
        self.reordered = true;
    }

    /// Sector `index` is in use with sequence `seq`, as a mount read it
    /// (after [`clear_for`](Self::clear_for)); `None`, or a sequence out of
    /// the range, leaves it free.
    pub fn put(&mut self, index: u32, seq: Option<u32>) {
        let Some(slot) = self.seq.get_mut(index as usize) else {
            return;
        };
        if index >= self.count {
            return;
        }
        let was = *slot != FREE;
        *slot = match seq.and_then(|s| s.checked_sub(self.base)) {
            Some(o) if o < u32::from(HELD) && self.base + o <= self.newest.1 => o as u16,
            _ => FREE,
        };
        match (was, *slot != FREE) {
            (false, true) => self.used += 1,
            (true, false) => self.used -= 1,
            _ => {}
        }
    }

    /// A fill from what a mount read is done: the base moves up to the
    /// oldest sequence in use.
    pub fn filled(&mut self) {
        self.rebase();
    }

    /// Mount's first pass over the headers begins: every entry is free
    /// until [`note_prefix`](Self::note_prefix).
    pub fn begin_prefixes(&mut self) {
        self.seq = [FREE; TABLE_SECTORS];
        self.dead = [0; TABLE_SECTORS];
        self.pending_len = 0;
        self.used = 0;
    }

    /// Mount's first pass: sector `index`'s header begins with this ring's
    /// magic, a version it reads and sequence `seq`, its CRC not checked.
    /// Kept as the low 15 bits until the head is known
    /// ([`resolve_prefixes`](Self::resolve_prefixes)).
    pub fn note_prefix(&mut self, index: u32, seq: u32) {
        if let Some(slot) = self.seq.get_mut(index as usize) {
            *slot = (seq & 0x7FFF) as u16;
        }
    }

    /// The first pass found holes, and the head `head` with `head_seq`:
    /// each noted prefix becomes the sequence at most `head_seq` whose low
    /// 15 bits it carries (a header more than 32,767 below the head, a
    /// sector left cold that long, which stage 4's bound on the span will
    /// rule out, resolves to a newer sequence with the same low bits:
    /// wrong, like any unchecked entry can be, until a full checkpoint
    /// decides the sectors it records and the headers of the others are
    /// read whole, [`checked`](Self::checked)).
    pub fn resolve_prefixes(&mut self, head: u32, head_seq: u32) {
        let base = head_seq.saturating_sub(u32::from(HELD) - 1);
        self.base = base;
        self.used = 0;
        for slot in self.seq[..self.count as usize].iter_mut() {
            if *slot == FREE {
                continue;
            }
            let back = head_seq.wrapping_sub(u32::from(*slot)) & 0x7FFF;
            *slot = match head_seq.checked_sub(back) {
                Some(seq) if seq >= base => {
                    self.used += 1;
                    (seq - base) as u16
                }
                _ => FREE,
            };
        }
        self.newest = (head, head_seq);
        self.reordered = true;
        self.unchecked = true;
    }

    /// Whether the entries are headers' first bytes, not checked yet.
    pub fn unchecked(&self) -> bool {
        self.unchecked
    }

    /// The entries are checked (a full checkpoint decided them, or the
    /// headers were read whole).
    pub fn checked(&mut self) {
        self.unchecked = false;
    }

    /// Every sector of a sequence below `tail_seq` is free (a mount found
    /// the tail past them).
    pub fn narrow(&mut self, tail_seq: u32) {
        for i in 0..self.count {
            if self.seq_of(i).is_some_and(|s| s < tail_seq) {
                self.release(i);
            }
        }
    }

    /// The sequence an entry of a checkpoint gives sector `index`: its
    /// sequence less `base`, or `u16::MAX` for a sector not in use (a held
    /// one is released, as the checkpoint records), or past `u16::MAX - 1`.
    pub fn entry(&self, index: u32, base: u32) -> u16 {
        match self.seq_of(index).and_then(|s| s.checked_sub(base)) {
            Some(o) if o < u32::from(HELD) => o as u16,
            _ => FREE,
        }
    }

    #[cfg(any(test, debug_assertions))] // the debug check of the table
    /// Whether the table is the identity map of `ring` (format 9's
    /// arithmetic), as it is while no sector was released out of order.
    pub fn agrees(&self, geo: &Geometry, ring: &Ring) -> bool {
        !self.on() || (0..geo.count).all(|i| self.seq_of(i) == ring.seq_of(geo, i))
    }
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
        assert_eq!(stream_advance(&g, start, 10), cont);
        assert_eq!(stream_advance(&g, start, 15), cont + 5);
    }

    #[cfg(feature = "sector-table")]
    #[test]
    fn the_table_is_the_identity_of_format_9s_ring_on_every_geometry() {
        let mut t = SectorTable::OFF;
        for count in [2u32, 3, 8, 64, 1024] {
            let g = Geometry { count, ..geo() };
            for head in [0, 1, count / 2, count - 1] {
                for used in [1, 2, count / 2, count] {
                    let used = used.clamp(1, count);
                    let r = Ring {
                        head,
                        head_seq: 1000 + used,
                        tail_seq: 1001,
                    };
                    t.fill(&g, &r);
                    assert!(t.on());
                    assert!(t.agrees(&g, &r));
                    assert_eq!(t.used(), r.used());
                    assert_eq!(t.oldest(), Some(r.tail_seq));
                    for seq in r.tail_seq..=r.head_seq {
                        let i = r.index_of_seq(&g, seq);
                        assert_eq!(t.index_of_seq(seq), Some(i));
                        if seq < r.head_seq {
                            assert_eq!(t.next(&g, i), next(&g, i));
                        }
                    }
                    // The head opens the physically next sector, free
                    // unless the ring is full.
                    if used < count {
                        assert_eq!(t.next_free(&g, head), next(&g, head));
                    } else {
                        assert_eq!(t.next_free(&g, head), head);
                    }
                }
            }
        }
        // A partition larger than the table leaves it off, and then it
        // agrees with any ring.
        let g = Geometry {
            count: TABLE_SECTORS as u32 + 1,
            ..geo()
        };
        let r = Ring {
            head: 5,
            head_seq: 9,
            tail_seq: 2,
        };
        t.fill(&g, &r);
        assert!(!t.on());
        assert!(t.agrees(&g, &r));
    }

    #[cfg(feature = "sector-table")]
    #[test]
    fn a_release_in_the_middle_leaves_a_hole_that_order_skips() {
        let g = geo();
        let mut t = SectorTable::OFF;
        // Full ring: sectors 3..=7, 0..=2 carry 10..=17.
        let r = Ring {
            head: 2,
            head_seq: 17,
            tail_seq: 10,
        };
        t.fill(&g, &r);
        assert_eq!(t.used(), 8);
        // Sector 5 (sequence 12) is released in the middle.
        t.release(5);
        assert_eq!(t.used(), 7);
        assert_eq!(t.seq_of(5), None);
        assert_eq!(t.index_of_seq(12), None);
        // Sector 4 (11) has no successor now: its stream into 5 is dead,
        // and it answers the physical next sector, which is free.
        assert_eq!(t.next(&g, 4), 5);
        assert_eq!(t.next(&g, 6), 7);
        // A stream being written at the head goes on in the sector the
        // head opens next, the hole, not the physical next sector (the
        // tail, in use); so does one planned past the hole, in the next
        // free sector (none here: the physical next).
        assert_eq!(t.next_planned(&g, 2), 5);
        assert_eq!(t.next_planned(&g, 4), 5);
        assert_eq!(t.next_planned(&g, 6), 7);
        // The head opens the hole, the only free sector, and gives it the
        // next sequence; the old head's streams go on there.
        assert_eq!(t.next_free(&g, 2), 5);
        assert!(t.set(5, 18));
        assert_eq!(t.next(&g, 2), 5);
        assert_eq!(t.seq_of(5), Some(18));
        assert_eq!(t.next_free(&g, 5), 5, "full again: nothing free");
        // Releasing the tail (3, sequence 10) makes 11 the oldest.
        t.release(3);
        assert_eq!(t.oldest(), Some(11));
        assert!(!t.agrees(
            &g,
            &Ring {
                head: 5,
                head_seq: 18,
                tail_seq: 11
            }
        ));
    }

    /// A table of `g` with sector 0 alone in use, sequence 1 (a format).
    #[cfg(feature = "sector-table")]
    fn one_sector_in_use(g: &Geometry) -> SectorTable {
        let mut t = SectorTable::OFF;
        let r = Ring {
            head: 0,
            head_seq: 1,
            tail_seq: 1,
        };
        t.fill(g, &r);
        t
    }

    #[cfg(feature = "sector-table")]
    #[test]
    fn sequences_past_the_entries_move_the_base() {
        let g = geo();
        let mut t = one_sector_in_use(&g);
        // Open and release round the ring far past what a u16 entry holds
        // above the base; the answers stay exact.
        let mut head = 0;
        let mut seq = 1u32;
        let mut tail = (0u32, 1u32);
        for _ in 0..200_000u32 {
            let at = t.next_free(&g, head);
            seq += 1;
            assert!(t.set(at, seq));
            head = at;
            if t.used() == g.count {
                t.release(tail.0);
                tail = (next(&g, tail.0), tail.1 + 1);
            }
            assert_eq!(t.seq_of(head), Some(seq));
        }
        assert_eq!(t.oldest(), Some(tail.1));
        assert_eq!(t.index_of_seq(tail.1), Some(tail.0));
        assert_eq!(t.next(&g, tail.0), next(&g, tail.0));
    }

    #[cfg(feature = "sector-table")]
    #[test]
    fn a_span_past_what_an_entry_holds_is_refused_not_recorded_wrongly() {
        let g = geo();
        let mut t = one_sector_in_use(&g);
        // Sector 0 keeps sequence 1 while the other seven are opened and
        // released round and round.
        let mut seq = 1u32;
        let mut at = 0;
        let refused = loop {
            if t.used() == g.count {
                // Release the oldest but sector 0.
                let oldest = (1..g.count)
                    .filter_map(|i| t.seq_of(i).map(|s| (s, i)))
                    .min()
                    .unwrap();
                t.release(oldest.1);
            }
            at = t.next_free(&g, at);
            seq += 1;
            if !t.room_for(seq) {
                break seq;
            }
            assert!(t.set(at, seq));
            assert!(seq < 70_000);
        };
        // Refused exactly when the span from sector 0's sequence would
        // pass what an entry holds; nothing was recorded for it.
        assert_eq!(refused - 1, u32::from(HELD));
        assert!(!t.set(at, refused));
        assert_eq!(t.seq_of(0), Some(1));
        assert_eq!(t.used(), g.count - 1);
        // Once sector 0 is released, the base moves up and it fits.
        t.release(0);
        assert!(t.set(at, refused));
        assert_eq!(t.seq_of(at), Some(refused));
    }
}
