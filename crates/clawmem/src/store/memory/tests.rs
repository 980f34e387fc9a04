//! The active set's bound under records no public operation writes: puts
//! of new ids past it, written here without the guard stores and updates
//! go through.

extern crate std;

use clawmem_sim::{Esp32Flash, Preset, SimFlash};

use super::*;
use crate::memory::LabelLimit;
use crate::Config;
use std::format;
use std::string::String;
use std::vec::Vec;

/// More new items on the chain than the active set holds (as only damage
/// that one mount saw and another did not could show): every read still
/// answers, keeping the items compaction would keep, and a store then
/// writes a sound index.
#[test]
fn more_items_than_the_active_set_holds_still_read() {
    let flash = Esp32Flash::new(SimFlash::new(Preset::Esp32.model(64 * 4096).unwrap())).unwrap();
    let mut store = Store::<_, 8>::format(flash, Config::default()).unwrap();
    // 128 records fill the chain, so the 129th put first compacts (to 128
    // items); 50 more then make 178, past ACTIVE_CAP.
    let total = 178u32;
    for n in 0..total {
        let id = ItemId::new(store.mem.next_id);
        let text = std::format!("item {n:04} written past the guard");
        let input = ItemInput::new(&text).tags("bound");
        // Created an hour apart: the oldest rank lowest.
        let item = Item::new(id, &input, n * 3600, LabelLimit::DEFAULT).unwrap();
        store.mem.next_id += 1;
        store.mem_put(&item, (0, 0), Priority::User).unwrap();
    }
    store.mem_active(OP).unwrap();
    let set = &store.work.active[OP];
    assert_eq!(set.len(), ACTIVE_CAP);
    // The newest ACTIVE_CAP items, the ones compaction keeps first.
    let lowest = set.iter().map(|a| a.id).min().unwrap();
    assert_eq!(lowest, total - ACTIVE_CAP as u32 + 1);
    // A public store compacts first and leaves a sound index.
    let input = ItemInput::new("one more after them").tags("bound");
    store.memory_store(&input, total * 3600, false).unwrap();
    assert!(store.memory_len().unwrap() <= MAX_ACTIVE_ITEMS + 1);
    store.check().unwrap();
}

fn record(body: &[u8]) -> crate::Record<'_> {
    crate::Record {
        kind: crate::RecordType::User,
        format: crate::BackendFormat::Unknown,
        body,
    }
}

/// A memory put that straddles sectors 0 -> 1; sector 0 then released as the
/// tail (format 9 order, no hole), sector 1 still in use. The scrub must
/// still find and wipe the put's continuation in sector 1: what a free sector
/// held goes on where it was written (with the sector table, not in the
/// sector the head opens next; found in a review of stage 1).
#[test]
fn scrub_finds_a_put_continued_from_a_released_tail() {
    let flash = Esp32Flash::new(SimFlash::new(Preset::Esp32.model(32 * 4096).unwrap())).unwrap();
    let cfg = Config {
        session_size_limit_bytes: 4000,
        ..Config::default()
    };
    let mut store = Store::<_, 8>::format(flash, cfg).unwrap();
    let pad = [b'p'; 60];
    while store.log.head() == 0 && store.log.head_room() > 170 {
        store.append("chat:pad", &[record(&pad)], false).unwrap();
    }
    assert_eq!(store.log.head(), 0);
    let content: String = (0..15).map(|i| format!("tok{i:02}-secretxx")).collect();
    assert!(content.len() <= 256);
    let id = store
        .memory_store(&ItemInput::new(&content).tags("home"), 1, false)
        .unwrap()
        .item
        .id();
    assert_eq!(store.log.head(), 1, "the put went on into sector 1");
    let img = store.flash().flash().image();
    let first = img.windows(13).position(|w| w == b"tok00-secretx").unwrap();
    let last = img.windows(13).position(|w| w == b"tok14-secretx").unwrap();
    assert!(
        first < 4096 && last >= 4096,
        "the put straddles sectors 0 and 1"
    );
    // More data, to move the head to sector 3.
    let mut n = 0;
    while store.log.head() < 3 {
        n += 1;
        let b: Vec<u8> = (0..300).map(|i| b'a' + ((i + n) % 26) as u8).collect();
        store.append("chat:more", &[record(&b)], false).unwrap();
    }
    store.delete_session("chat:pad").unwrap();
    // Collect the tail (sector 0), as reclaim_tail does.
    let tail = store.log.tail_seq();
    assert_eq!(store.log.sector_of_seq(tail), Some(0));
    store.in_gc = true;
    assert!(store.relocate_tail(tail).unwrap());
    store.in_gc = false;
    assert!(store.checkpoint_sector_seq > tail);
    store.log.release_tail();
    assert_eq!(store.log.seq_of_sector(0), None);
    assert!(store.log.seq_of_sector(1).is_some());
    // The old copy is still in sectors 0 and 1.
    let img = store.flash().flash().image();
    assert!(img.windows(13).any(|w| w == b"tok14-secretx"));
    store.memory_forget_scrub(id).unwrap();
    let img = store.flash().flash().image();
    for i in 0..15 {
        let tok = format!("tok{i:02}-secretx");
        let at = img.windows(13).position(|w| w == tok.as_bytes());
        assert!(at.is_none(), "{tok} still on flash at {at:#x?}");
    }
}
