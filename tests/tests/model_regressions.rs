//! Regressions found by the model test (`model.rs`).

use clawmem::memory::ItemInput;
use clawmem::{BackendFormat, Config, MountMode, Record, RecordType, Store};
use clawmem_sim::{CutPoint, Geometry, Model, Nor, PowerCut, Preset, SimFlash, Tear, WriteRule};

fn esp32() -> Nor<4, 4096, true> {
    Nor::new(SimFlash::new(Preset::Esp32.model(12 * 4096).unwrap())).unwrap()
}

/// Item ids are sequence numbers that never repeat, across remounts too.
#[test]
fn item_ids_do_not_repeat_after_forget_and_remount() {
    let config = Config {
        session_size_limit_bytes: 4096,
        ..Config::default()
    };
    let mut store = Store::<_, 8>::format(esp32(), config).unwrap();
    let a = store
        .memory_store(&ItemInput::new("fact one about tea").tags("food"), 1, false)
        .unwrap()
        .item
        .id();
    store.memory_forget(a).unwrap();
    let flash = store.into_flash();
    let mut store = Store::<_, 8>::mount(flash, config, MountMode::ExistingOnly).unwrap();
    let b = store
        .memory_store(
            &ItemInput::new("fact two about cats").tags("pets"),
            2,
            false,
        )
        .unwrap()
        .item
        .id();
    assert!(b.get() > a.get(), "id {} reused after {}", b.get(), a.get());
}

/// A cut after an item's put committed (during the work that follows it)
/// must not let the next store reuse the item's id after remount.
#[test]
fn item_ids_do_not_repeat_after_a_cut_behind_a_put() {
    let config = Config {
        session_size_limit_bytes: 512,
        checkpoint_interval_bytes: 2048,
        ..Config::default()
    };
    let t = Preset::Generic.default_model().timings;
    let model = Model::custom(Geometry::new(4, 512, 40).unwrap(), WriteRule::AtMost(2), t);
    for at in 0..24 {
        let flash = Nor::<4, 512, true>::new(SimFlash::new(model.clone())).unwrap();
        let mut store = Store::<_, 8>::format(flash, config).unwrap();
        store.memory_compact().unwrap();
        store.flash_mut().flash_mut().arm_power_cut(PowerCut {
            seed: 0,
            at: CutPoint::Op(at),
            tear: Tear::Prefix(0),
        });
        let r = store.memory_store(&ItemInput::new("fact one about tea").tags("food"), 1, false);
        let mut flash = store.into_flash();
        flash.flash_mut().restore_power();
        let mut store = Store::<_, 8>::mount(flash, config, MountMode::ExistingOnly).unwrap();
        let mut ids = vec![];
        store.memory_list(|i| ids.push(i.id().get())).unwrap();
        let b = store
            .memory_store(
                &ItemInput::new("fact two about cats").tags("pets"),
                2,
                false,
            )
            .unwrap()
            .item
            .id()
            .get();
        assert!(
            !ids.contains(&b),
            "cut at {at} ({:?}): new item got id {b}, already active: {ids:?}",
            r.map(|s| s.item.id().get())
        );
    }
}

/// Found by the model test: mount recovered the next item id only from a
/// put whose first chunk held 20 bytes or more, so a put split across a
/// sector boundary right after its start was missed and the next store
/// reused its id. Every padding below puts the item at another offset.
#[test]
fn item_id_of_a_put_split_across_sectors_is_not_reused() {
    let config = Config {
        session_size_limit_bytes: 512,
        ..Config::default()
    };
    let t = Preset::Generic.default_model().timings;
    let model = Model::custom(Geometry::new(4, 512, 40).unwrap(), WriteRule::AtMost(2), t);
    for pad in 1..=480 {
        let flash = Nor::<4, 512, true>::new(SimFlash::new(model.clone())).unwrap();
        let mut store = Store::<_, 8>::format(flash, config).unwrap();
        let body = vec![b'x'; pad];
        store
            .append(
                "s",
                &[Record {
                    kind: RecordType::User,
                    format: BackendFormat::Unknown,
                    body: &body,
                }],
                false,
            )
            .unwrap();
        let a = store
            .memory_store(&ItemInput::new("fact one about tea").tags("food"), 1, false)
            .unwrap()
            .item
            .id()
            .get();
        let flash = store.into_flash();
        let mut store = Store::<_, 8>::mount(flash, config, MountMode::ExistingOnly).unwrap();
        let b = store
            .memory_store(
                &ItemInput::new("fact two about cats").tags("pets"),
                2,
                false,
            )
            .unwrap()
            .item
            .id()
            .get();
        assert!(b > a, "padding {pad}: id {b} reused after {a}");
    }
}

/// Found by the model test: `memory_update` documents that a cut between
/// the new item and the old one's tombstone leaves both, and that the next
/// compaction forgets the old one through the lineage. Compaction did not
/// look at the lineage, so the old item stayed active for good (or, when
/// old and new shared a key, was merged with the new one under the old id).
#[test]
fn compaction_forgets_the_item_an_interrupted_update_replaced() {
    let config = Config {
        session_size_limit_bytes: 512,
        ..Config::default()
    };
    let t = Preset::Generic.default_model().timings;
    let model = Model::custom(Geometry::new(4, 512, 40).unwrap(), WriteRule::AtMost(2), t);
    let mut between = 0;
    for (new_content, new_tags) in [("fact two about cats", ""), ("", "work")] {
        for at in 0..8 {
            let flash = Nor::<4, 512, true>::new(SimFlash::new(model.clone())).unwrap();
            let mut store = Store::<_, 8>::format(flash, config).unwrap();
            let old = store
                .memory_store(&ItemInput::new("fact one about tea").tags("food"), 1, false)
                .unwrap()
                .item
                .id();
            store.flash_mut().flash_mut().arm_power_cut(PowerCut {
                seed: 0,
                at: CutPoint::Op(at),
                tear: Tear::Prefix(0),
            });
            let patch = ItemInput::new(new_content).tags(new_tags);
            if store.memory_update(old, &patch, 2).is_ok() {
                continue;
            }
            let mut flash = store.into_flash();
            flash.flash_mut().restore_power();
            let mut store = Store::<_, 8>::mount(flash, config, MountMode::ExistingOnly).unwrap();
            let mut ids = vec![];
            store.memory_list(|i| ids.push(i.id())).unwrap();
            if ids.len() != 2 {
                continue;
            }
            between += 1;
            let new = *ids.iter().find(|i| **i != old).unwrap();
            store.memory_compact().unwrap();
            let mut after = vec![];
            store
                .memory_list(|i| after.push((i.id(), i.tags().to_string())))
                .unwrap();
            let want_tags = if new_tags.is_empty() {
                "food"
            } else {
                new_tags
            };
            assert_eq!(
                after,
                vec![(new, want_tags.to_string())],
                "cut at {at}: compaction after an interrupted update"
            );
            assert_eq!(store.memory_newest(old).unwrap(), new);
        }
    }
    assert!(
        between >= 2,
        "no cut fell between the put and the tombstone"
    );
}
