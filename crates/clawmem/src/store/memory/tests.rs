//! The active set's bound under records no public operation writes: puts
//! of new ids past it, written here without the guard stores and updates
//! go through.

extern crate std;

use clawmem_sim::{Esp32Flash, Preset, SimFlash};

use super::*;
use crate::memory::LabelLimit;
use crate::Config;

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
