//! The log with a sector released out of ring order (feature
//! `sector-table`, stage 1 of format 10): the head opens the hole in its
//! turn, streams go on across it, and the sectors said erased ahead stay
//! true. RAM only, as the release is at this stage: nothing here remounts.

extern crate std;

use std::vec::Vec;

use clawmem_sim::{Esp32Flash, Preset, SimFlash};

use super::*;
use crate::layout::{geometry, CHUNK_HEADER_LEN};

type Flash = Esp32Flash;

/// A formatted log of `sectors` 4 KiB sectors, as `format_ring` leaves it.
fn log(sectors: u32) -> Log<Flash> {
    let flash = Esp32Flash::new(SimFlash::new(
        Preset::Esp32.model(sectors as usize * 4096).unwrap(),
    ))
    .unwrap();
    let geo = geometry(&flash, None).unwrap();
    let mut log = Log::new(flash, geo, ring::prev(&geo, 0), geo.capacity(), 1);
    log.open_next_sector().unwrap();
    log
}

/// `len` bytes that name `tag`.
fn body(tag: u8, len: usize) -> Vec<u8> {
    (0..len).map(|i| tag ^ (i as u8).wrapping_mul(31)).collect()
}

/// Writes `data` as one batch; its payload's stream address.
fn write(log: &mut Log<Flash>, data: &[u8]) -> u32 {
    let (first, _) = log.write_batch(0x10, &mut Slices([data])).unwrap();
    first + CHUNK_HEADER_LEN
}

fn read(log: &mut Log<Flash>, at: u32, len: usize) -> Vec<u8> {
    let mut out = std::vec![0u8; len];
    log.io().read_stream(at, &mut out).unwrap();
    out
}

#[test]
fn the_head_opens_a_hole_in_the_middle_and_its_stream_goes_on_there() {
    let mut log = log(8);
    assert!(log.table.on());
    // Fill the ring: batches of 3,000 B until no sector is free.
    let mut written = Vec::new();
    let mut tag = 0u8;
    while log.free_sectors() > 0 {
        let data = body(tag, 3000);
        let at = write(&mut log, &data);
        written.push((at, data));
        tag += 1;
    }
    assert_eq!(log.used_sectors(), 8);
    let head = log.head();
    let head_seq = log.head_seq();
    // Release a sector in the middle, two before the head.
    let hole = ring::before(&log.geo(), head, 2);
    let hole_seq = log.seq_of_sector(hole).unwrap();
    log.release_sector(hole).unwrap();
    // Held until a full checkpoint records the release: a hole for every
    // walk, but not free, so never opened before the release is on flash.
    assert_eq!(log.seq_of_sector(hole), None);
    assert!(log.holds_release());
    assert_eq!(log.free_sectors(), 0);
    log.settle_releases();
    assert!(!log.holds_release());
    assert_eq!(log.free_sectors(), 1);
    assert_eq!(log.seq_of_sector(hole), None);
    // Neither the head nor a sector not in use can be released.
    assert!(log.release_sector(head).is_err());
    assert!(log.release_sector(hole).is_err());
    // A batch longer than the head's rest goes on in the hole, the only
    // free sector, which takes the next sequence.
    let data = body(0xA5, 3000 + log.head_room() as usize);
    let at = write(&mut log, &data);
    assert_eq!(log.head(), hole);
    assert_eq!(log.head_seq(), head_seq + 1);
    assert_eq!(log.seq_of_sector(hole), Some(head_seq + 1));
    assert_eq!(log.free_sectors(), 0);
    assert_eq!(read(&mut log, at, data.len()), data);
    let g = log.geo();
    assert_eq!(g.sector_of(at), head);
    assert_eq!(
        log.io().stream_advance(at, data.len() as u32 - 1) / g.sector,
        hole
    );
    // Every batch that touched neither the hole nor the sector before it
    // (whose stream may have crossed into the hole) reads back as written.
    let dead = [hole, ring::prev(&g, hole)];
    let mut intact = 0;
    for (at, data) in &written {
        let last = log.io().stream_advance(*at, data.len() as u32 - 1);
        let (from, to) = (g.sector_of(*at), g.sector_of(last));
        if dead.contains(&from) || dead.contains(&to) {
            continue;
        }
        assert_eq!(&read(&mut log, *at, data.len()), data);
        intact += 1;
    }
    assert!(intact >= 4, "{intact}");
    // Releasing the tail goes on from the oldest sequence still in use,
    // and past the hole's old sequence, which no sector carries now.
    let tail_seq = log.tail_seq();
    assert!(tail_seq < hole_seq);
    log.release_tail();
    assert_eq!(log.tail_seq(), tail_seq + 1);
    assert_eq!(log.used_sectors(), 7);
    while log.tail_seq() < hole_seq {
        log.release_tail();
    }
    assert_eq!(
        log.tail_seq(),
        hole_seq + 1,
        "the hole's sequence is skipped"
    );
    assert_eq!(log.used_sectors(), 8 - (hole_seq - tail_seq));
    // The head, in the reopened hole, goes on into the first free sector
    // after it in physical order: past the two still in use after it (the
    // old head and the one before), the first the tail freed. That
    // stream reads back too.
    let data = body(0xC3, 3000 + log.head_room() as usize);
    let at = write(&mut log, &data);
    assert_eq!(g.sector_of(at), hole);
    assert_eq!(log.head(), ring::next(&g, head));
    assert_eq!(log.head_seq(), head_seq + 2);
    assert_eq!(read(&mut log, at, data.len()), data);
}

#[test]
fn a_hole_before_the_sectors_erased_ahead_stops_them_being_counted() {
    let mut log = log(8);
    let mut tag = 0u8;
    while log.free_sectors() > 0 {
        write(&mut log, &body(tag, 3000));
        tag += 1;
    }
    let g = log.geo();
    let head = log.head();
    // A hole two after the head (physically: the head opens it next, past
    // the sector in use between them), erased ahead and said so.
    let later = ring::after(&g, head, 2);
    log.release_sector(later).unwrap();
    log.settle_releases();
    while log.head_room() >= log.geo().sector_payload_space() / 2 {
        write(&mut log, &body(tag, 200));
        tag += 1;
    }
    assert!(log.erase_ahead().unwrap());
    assert_eq!(log.erased_ahead, 1);
    write(&mut log, &body(0x77, 16));
    assert_eq!(log.ahead_said, 1, "the chunk says the hole is erased");
    // Releasing the sector between them puts an unerased sector first in
    // line: nothing after the head counts as erased any more.
    let between = ring::next(&g, head);
    log.release_sector(between).unwrap();
    // (Held, it changes nothing yet.)
    assert_eq!(log.erased_ahead, 1);
    log.settle_releases();
    assert_eq!(log.erased_ahead, 0);
    // The next write takes back what the last chunk said before anything
    // else, and then the head opens `between` with an erase of its own.
    let data = body(0x5A, log.head_room() as usize + 100);
    let at = write(&mut log, &data);
    assert_eq!(log.ahead_said, 0);
    assert_eq!(log.head(), between);
    assert_eq!(read(&mut log, at, data.len()), data);
    let data = body(0x3C, log.head_room() as usize + 100);
    let at = write(&mut log, &data);
    assert_eq!(log.head(), later);
    assert_eq!(read(&mut log, at, data.len()), data);
}
