//! Long-term memory: ESP-Claw's store, recall, update and forget rules on
//! flash, compaction, scrubbing, and persistence across remounts.

use clawmem::memory::{ItemId, ItemInput, SOURCE_AUTO_LLM};
use clawmem::{Config, Error, MemoryConfig, MountMode, Store};
use clawmem_sim::{CutPoint, Esp32Flash, PowerCut, Preset, SimFlash, Stm32l4Flash, Tear};

type S = Store<Esp32Flash, 8>;

fn flash(sectors: usize) -> Esp32Flash {
    Esp32Flash::new(SimFlash::new(Preset::Esp32.model(4096 * sectors).unwrap())).unwrap()
}

fn config() -> Config {
    Config {
        session_size_limit_bytes: 4000,
        ..Config::default()
    }
}

fn remount(store: S) -> S {
    S::mount(store.into_flash(), config(), MountMode::ExistingOnly).unwrap()
}

/// A user record of `body`, in no backend's format.
fn rec(body: &[u8]) -> clawmem::Record<'_> {
    clawmem::Record {
        kind: clawmem::RecordType::User,
        format: clawmem::BackendFormat::Unknown,
        body,
    }
}

fn contents(store: &mut S) -> Vec<String> {
    let mut out = Vec::new();
    store
        .memory_list(|i| out.push(i.content().to_string()))
        .unwrap();
    out
}

#[test]
fn store_normalizes_and_rejects_duplicates() {
    let mut store = S::format(flash(32), config()).unwrap();
    let s = store
        .memory_store(
            &ItemInput::new("  User likes green tea  ")
                .tags("drinks, tea; drinks")
                .keywords("tea, coffee"),
            100,
            false,
        )
        .unwrap();
    assert!(s.changed);
    assert_eq!(s.item.content(), "User likes green tea");
    assert_eq!(s.item.tags(), "drinks,tea");
    // Keywords grounded in the content, topped up from the tags.
    assert_eq!(s.item.keywords(), "tea,drinks");
    // Same normalized content, same key, containment: duplicates.
    for dup in [
        "user likes green tea!",
        "User likes green tea, very much indeed",
        "likes green tea",
    ] {
        let d = store
            .memory_store(&ItemInput::new(dup), 200, false)
            .unwrap();
        assert!(!d.changed, "{dup}");
        assert_eq!(d.item.id(), s.item.id());
    }
    assert!(matches!(
        store.memory_store(&ItemInput::new("   "), 1, false),
        Err(Error::InvalidInput(_))
    ));
    assert_eq!(store.memory_len().unwrap(), 1);
}

#[test]
fn recall_orders_counts_access_and_names_unknown_labels() {
    let mut store = S::format(flash(32), config()).unwrap();
    let a = store
        .memory_store(
            &ItemInput::new("User is vegetarian").tags("diet"),
            10,
            false,
        )
        .unwrap()
        .item
        .id();
    let b = store
        .memory_store(
            &ItemInput::new("User avoids peanuts").tags("diet, allergy"),
            20,
            false,
        )
        .unwrap()
        .item
        .id();
    let c = store
        .memory_store(
            &ItemInput::new("User lives in Lisbon").tags("home"),
            30,
            false,
        )
        .unwrap()
        .item
        .id();
    let mut got = Vec::new();
    store
        .memory_recall(&["diet"], 8, 40, |i| got.push((i.id(), i.access_count())))
        .unwrap();
    // Equal access counts: newer first.
    assert_eq!(got, vec![(b, 1), (a, 1)]);
    got.clear();
    store
        .memory_recall(&["allergy"], 8, 50, |i| {
            got.push((i.id(), i.access_count()))
        })
        .unwrap();
    assert_eq!(got, vec![(b, 2)]);
    got.clear();
    store
        .memory_recall(&["diet", "home"], 2, 60, |i| {
            got.push((i.id(), i.access_count()))
        })
        .unwrap();
    assert_eq!(
        got,
        vec![(b, 3), (a, 2)],
        "access count first, cut to the limit"
    );
    let err = store.memory_recall(&["food"], 8, 70, |_| {}).unwrap_err();
    match &err {
        Error::UnknownLabel(e) => {
            assert_eq!(e.label(), "food");
            assert_eq!(e.available(), "diet, allergy, home");
        }
        e => panic!("{e:?}"),
    }
    assert!(
        err.to_string().contains("\"food\"") && err.to_string().contains("diet, allergy, home")
    );
    // The counts survive a remount and compaction; the items were never
    // rewritten for them.
    let mut store = remount(store);
    store.memory_compact().unwrap();
    let mut store = remount(store);
    assert_eq!(store.memory_get(b).unwrap().access_count(), 3);
    assert_eq!(store.memory_get(a).unwrap().access_count(), 2);
    assert_eq!(store.memory_get(c).unwrap().access_count(), 0);
    let mut order = Vec::new();
    store.memory_list(|i| order.push(i.id())).unwrap();
    assert_eq!(order, vec![b, a, c]);
    store.check().unwrap();
}

#[test]
fn claw_memory_recall_takes_arguments_as_esp_claw() {
    // cap_memory_recall_execute: empty labels are skipped, labels after the
    // third non-empty one ignored; claw_memory_recall: no labels match every
    // active item, limit 0 means 8, no cap but the item count.
    let mut store = S::format(flash(32), config()).unwrap();
    let tags = ["a", "b", "c", "d"];
    for n in 0..12u32 {
        store
            .memory_store(
                &ItemInput::new(&format!("fact number {n} is distinct {}", n * 7919))
                    .tags(tags[n as usize % 4]),
                100 + n,
                false,
            )
            .unwrap();
    }
    let mut list_order = Vec::new();
    store.memory_list(|i| list_order.push(i.id())).unwrap();
    // No labels, limit 0: the first 8 of the list order.
    let mut got = Vec::new();
    let n = store
        .memory_recall(&[], 0, 200, |i| got.push(i.id()))
        .unwrap();
    assert_eq!(n, 8);
    assert_eq!(got, list_order[..8]);
    // Only empty labels are no labels; a limit past 128 is the item count.
    got.clear();
    let n = store
        .memory_recall(&["", ""], 1000, 210, |i| got.push(i.id()))
        .unwrap();
    assert_eq!(n, 12);
    got.sort();
    let mut all = list_order.clone();
    all.sort();
    assert_eq!(got, all);
    // "zzz" is the fourth non-empty label: ignored, not an unknown label.
    let mut labelled = Vec::new();
    let n = store
        .memory_recall(&["", "a", "", "b", "c", "zzz"], 0, 220, |i| {
            labelled.push(i.tags().to_string())
        })
        .unwrap();
    assert_eq!(n, 8, "a, b and c carry 9 items; the limit is 8");
    assert!(labelled.iter().all(|t| t != "d"), "{labelled:?}");
    // An unknown label among the first three is still an error.
    assert!(matches!(
        store.memory_recall(&["a", "", "zzz"], 0, 230, |_| {}),
        Err(Error::UnknownLabel(_))
    ));
    // An empty store: no labels recall nothing, and write nothing.
    let mut empty = S::format(flash(32), config()).unwrap();
    let before = empty.written_bytes();
    assert_eq!(empty.memory_recall(&[], 0, 1, |_| {}).unwrap(), 0);
    assert_eq!(empty.written_bytes(), before);
    store.check().unwrap();
}

#[test]
fn update_forget_lineage_and_ids_never_repeat() {
    let mut store = S::format(flash(32), config()).unwrap();
    let a = store
        .memory_store(&ItemInput::new("User works at Acme").tags("work"), 0, false)
        .unwrap()
        .item
        .id();
    let u1 = store
        .memory_update(a, &ItemInput::new("User works at Globex"), 0)
        .unwrap()
        .unwrap();
    assert!(u1.changed);
    let b = u1.item.id();
    assert_ne!(a, b);
    assert_eq!(u1.item.access_count(), 0);
    assert!(matches!(store.memory_get(a), Err(Error::NotFound)));
    let c = store
        .memory_update(b, &ItemInput::new("").tags("job"), 0)
        .unwrap()
        .unwrap()
        .item
        .id();
    assert_eq!(store.memory_newest(a).unwrap(), c);
    assert!(
        store
            .memory_update(c, &ItemInput::new("User works at Globex"), 0)
            .unwrap()
            .is_none(),
        "no change"
    );
    // Ids never repeat, across compactions and remounts, without a clock.
    let mut store = remount(store);
    store.memory_compact().unwrap();
    assert_eq!(store.memory_newest(a).unwrap(), c);
    let d = store
        .memory_store(&ItemInput::new("User has a cat"), 0, false)
        .unwrap()
        .item
        .id();
    assert!(d.get() > c.get());
    store.memory_forget(d).unwrap();
    assert!(matches!(store.memory_forget(d), Err(Error::NotFound)));
    assert!(matches!(
        store.memory_forget(ItemId::new(999)),
        Err(Error::NotFound)
    ));
    let mut store = remount(store);
    let e = store
        .memory_store(&ItemInput::new("User has a dog"), 0, false)
        .unwrap()
        .item
        .id();
    assert!(e.get() > d.get(), "a forgotten id is not reused");
    assert_eq!(contents(&mut store).len(), 2);
}

#[test]
fn replace_intent_forgets_items_sharing_a_term() {
    let mut store = S::format(flash(32), config()).unwrap();
    store
        .memory_store(
            &ItemInput::new("User lives in Lisbon")
                .tags("home")
                .keywords("city"),
            1,
            false,
        )
        .unwrap();
    store
        .memory_store(&ItemInput::new("User likes jazz").tags("music"), 2, false)
        .unwrap();
    let s = store
        .memory_store(
            &ItemInput::new("User moved to Porto")
                .tags("home")
                .source(SOURCE_AUTO_LLM),
            3,
            true,
        )
        .unwrap();
    assert_eq!(s.replaced, 1);
    let mut c = contents(&mut store);
    c.sort();
    assert_eq!(c, ["User likes jazz", "User moved to Porto"]);
}

#[test]
fn compaction_keeps_at_most_the_item_limit_evicting_by_score() {
    let cfg = Config {
        memory: MemoryConfig {
            max_items: 10,
            ..MemoryConfig::default()
        },
        ..config()
    };
    let mut store = S::format(flash(64), cfg).unwrap();
    let mut ids = Vec::new();
    for n in 0..14u32 {
        let s = store
            .memory_store(
                &ItemInput::new(&format!("fact number {n} about the user")).tags(&format!("t{n}")),
                n * 3600,
                false,
            )
            .unwrap();
        ids.push(s.item.id());
    }
    // Recall the oldest twice: access*3 outweighs age.
    store.memory_recall(&["t0"], 8, 14 * 3600, |_| {}).unwrap();
    store.memory_recall(&["t0"], 8, 14 * 3600, |_| {}).unwrap();
    store.memory_compact().unwrap();
    assert_eq!(store.memory_len().unwrap(), 10);
    assert!(store.memory_get(ids[0]).is_ok(), "recalled item kept");
    for (k, id) in ids.iter().enumerate().take(5).skip(1) {
        assert!(store.memory_get(*id).is_err(), "item {k} evicted");
    }
}

#[test]
fn catalog_prompt_and_memory_md() {
    let mut store = S::format(flash(32), config()).unwrap();
    let mut prompt = String::new();
    store.write_memory_prompt(&mut prompt).unwrap();
    assert!(
        prompt.ends_with("Summary label catalog:\n- (empty)\n"),
        "{prompt}"
    );
    store
        .memory_store(
            &ItemInput::new("User likes green tea").tags("drinks"),
            1_700_000_000,
            false,
        )
        .unwrap();
    store
        .memory_store(
            &ItemInput::new("User likes oolong").tags("drinks, tea"),
            1_700_000_100,
            false,
        )
        .unwrap();
    let mut prompt = String::new();
    store.write_memory_prompt(&mut prompt).unwrap();
    assert!(
        prompt.ends_with("Summary label catalog:\n- drinks\n- tea\n"),
        "{prompt}"
    );
    let mut md = String::new();
    store.write_memory_md(&mut md).unwrap();
    assert!(md.starts_with("# Long-term Memory\n\n## Summary Labels\n\n- drinks (refs=2)\n- tea (refs=1)\n\n## Active Memories\n\n"), "{md}");
    assert!(md.contains("- `mem-2` User likes oolong\n  time=2023-11-14 22:15:00 access=0 labels=[\"drinks\",\"tea\"]\n"), "{md}");
    assert!(md.ends_with("labels=[\"drinks\"]\n"), "{md}");
    store.memory_clear().unwrap();
    let mut md = String::new();
    store.write_memory_md(&mut md).unwrap();
    assert_eq!(
        md,
        "# Long-term Memory\n\n(empty - Claw will write memories here as it learns)\n"
    );
    let mut store = remount(store);
    assert_eq!(store.memory_len().unwrap(), 0);
}

#[test]
fn memory_survives_many_compactions_and_ring_wraps() {
    let mut store = S::format(flash(20), config()).unwrap();
    let mut live = std::collections::BTreeMap::new();
    for n in 0..600u32 {
        let s = store
            .memory_store(
                &ItemInput::new(&format!("memory {n}: {}", "m".repeat((n % 90) as usize)))
                    .tags(&format!("l{}", n % 7)),
                n,
                false,
            )
            .unwrap();
        live.insert(s.item.id(), s.item.content().to_string());
        if n % 3 == 0 {
            let victim = *live.keys().next().unwrap();
            match store.memory_forget(victim) {
                // Compaction may have evicted it (more than 128 items).
                Ok(_) | Err(Error::NotFound) => {}
                Err(e) => panic!("{e:?}"),
            }
            live.remove(&victim);
        }
        if n % 11 == 0 {
            match store.memory_recall(&[&format!("l{}", n % 7)], 4, n, |_| {}) {
                Ok(_) | Err(Error::UnknownLabel(_)) => {}
                Err(e) => panic!("{e:?}"),
            }
        }
        if n % 150 == 149 {
            store = remount(store);
        }
    }
    // Eviction at 128 may have dropped some: what is left is a subset, and
    // every item read back is exactly what was stored.
    store.memory_compact().unwrap();
    let mut got = std::collections::BTreeMap::new();
    store
        .memory_list(|i| {
            got.insert(i.id(), i.content().to_string());
        })
        .unwrap();
    assert!(got.len() <= 128 && !got.is_empty());
    for (id, c) in &got {
        assert_eq!(live.get(id), Some(c));
    }
    assert!(
        store.flash().flash().stats().erase_count_max() >= 2,
        "the ring wrapped"
    );
    store.check().unwrap();
}

/// Whether `secret` is on flash, whole or cut in two by a sector boundary (a
/// chunk's payload may continue in the next sector after its header).
fn on_flash(flash: &SimFlash, secret: &str) -> bool {
    let found = |s: &str| flash.find(s.as_bytes()).is_some();
    found(secret) || (1..secret.len()).any(|k| found(&secret[..k]) && found(&secret[k..]))
}

#[test]
fn scrub_in_place_removes_every_copy_on_multiwrite_flash() {
    let mut store = S::format(flash(24), config()).unwrap();
    let secret = "the garage door code is 4711";
    let id = store
        .memory_store(&ItemInput::new(secret).tags("home"), 1, false)
        .unwrap()
        .item
        .id();
    // Move it around: garbage collection copies it as the ring turns.
    for n in 0..400 {
        let body = format!("{{\"n\":{n},\"pad\":\"{}\"}}", "q".repeat(200));
        let out = store
            .append(
                "chat:x",
                &[clawmem::Record {
                    kind: clawmem::RecordType::User,
                    format: clawmem::BackendFormat::Unknown,
                    body: body.as_bytes(),
                }],
                false,
            )
            .unwrap();
        let _ = out;
        if n % 10 == 9 {
            store.delete_session("chat:x").unwrap();
        }
    }
    assert!(on_flash(store.flash().flash(), secret));
    store.memory_forget_scrub_in_place(id).unwrap();
    assert!(
        !on_flash(store.flash().flash(), secret),
        "a copy of the content is still on flash"
    );
    assert_eq!(store.flash().flash().stats().write_budget_violations, 0);
    let mut store = remount(store);
    assert!(matches!(store.memory_get(id), Err(Error::NotFound)));
    store.check().unwrap();
}

#[test]
fn memory_works_on_flash_with_a_second_write_only_of_zeros() {
    let f = Stm32l4Flash::new(SimFlash::new(Preset::Stm32l4.model(2048 * 48).unwrap())).unwrap();
    let mut store = Store::<_, 8>::format(
        f,
        Config {
            session_size_limit_bytes: 2000,
            ..Config::default()
        },
    )
    .unwrap();
    for n in 0..60u32 {
        store
            .memory_store(
                &ItemInput::new(&format!("item {n} {}", "z".repeat(40))).tags("t"),
                n,
                false,
            )
            .unwrap();
    }
    store.memory_recall(&["t"], 5, 100, |_| {}).unwrap();
    assert_eq!(store.flash().flash().stats().write_budget_violations, 0);
    store.check().unwrap();
}

/// A store on write-once flash (32-byte words, `sectors` sectors of 4 KiB)
/// holding `secret`, tagged `home`, and one other item; and the secret's id.
fn write_once_with_secret(
    sectors: usize,
    secret: &str,
) -> (Store<clawmem_sim::Nor<32, 4096>, 8>, ItemId) {
    use clawmem_sim::{Geometry, Model, Nor, WriteRule};
    let t = Preset::Stm32h7.default_model().timings;
    let model = Model::custom(
        Geometry::new(32, 4096, sectors).unwrap(),
        WriteRule::Once,
        t,
    );
    let f = Nor::<32, 4096>::new(SimFlash::new(model)).unwrap();
    let mut store = Store::<_, 8>::format(f, config()).unwrap();
    let id = store
        .memory_store(&ItemInput::new(secret).tags("home"), 1, false)
        .unwrap()
        .item
        .id();
    store
        .memory_store(&ItemInput::new("User likes tea").tags("drinks"), 2, false)
        .unwrap();
    (store, id)
}

#[test]
fn scrub_relocates_and_erases_on_write_once_flash() {
    let cfg = config();
    let secret = "the safe combination is 12-34-56";
    let (mut store, id) = write_once_with_secret(32, secret);
    store
        .profile_write(
            clawmem::profile::ProfileDoc::User,
            "# User\n\n- Name: Ada\n",
        )
        .unwrap();
    for n in 0..300 {
        let body = format!("{{\"n\":{n},\"pad\":\"{}\"}}", "w".repeat(200));
        store
            .append(
                "chat:w",
                &[clawmem::Record {
                    kind: clawmem::RecordType::User,
                    format: clawmem::BackendFormat::Unknown,
                    body: body.as_bytes(),
                }],
                false,
            )
            .unwrap();
        if n % 10 == 9 {
            store.delete_session("chat:w").unwrap();
        }
    }
    store
        .append(
            "chat:keep",
            &[clawmem::Record {
                kind: clawmem::RecordType::User,
                format: clawmem::BackendFormat::Unknown,
                body: b"{\"keep\":1}",
            }],
            false,
        )
        .unwrap();
    assert!(on_flash(store.flash().flash(), secret));
    store.memory_forget_scrub(id).unwrap();
    assert!(
        !on_flash(store.flash().flash(), secret),
        "a copy of the content is still on flash"
    );
    assert_eq!(store.flash().flash().stats().write_budget_violations, 0);
    let mut store = Store::<_, 8>::mount(store.into_flash(), cfg, MountMode::ExistingOnly).unwrap();
    assert!(matches!(store.memory_get(id), Err(Error::NotFound)));
    assert_eq!(contents_of(&mut store), ["User likes tea"]);
    let mut buf = [0u8; 64];
    let n = store
        .profile_read(clawmem::profile::ProfileDoc::User, &mut buf)
        .unwrap();
    assert_eq!(&buf[..n], b"# User\n\n- Name: Ada\n");
    let mut h = [0u8; 64];
    assert_eq!(
        store
            .history("chat:keep", clawmem::BackendFormat::Unknown, &mut h)
            .unwrap()
            .len(),
        1
    );
    store.check().unwrap();
}

fn contents_of<F: embedded_storage::nor_flash::NorFlash>(store: &mut Store<F, 8>) -> Vec<String> {
    let mut out = Vec::new();
    store
        .memory_list(|i| out.push(i.content().to_string()))
        .unwrap();
    out
}

#[test]
fn stage_note_lists_the_labels_memory_writes_touched() {
    let mut store = S::format(flash(32), config()).unwrap();
    store
        .memory_store(&ItemInput::new("User likes tea").tags("drinks"), 1, false)
        .unwrap();
    store.memory_stage_begin();
    let mut note = String::new();
    assert!(!store.write_memory_stage_note(&mut note).unwrap());
    let a = store
        .memory_store(
            &ItemInput::new("User is vegan").tags("diet, health"),
            2,
            false,
        )
        .unwrap()
        .item
        .id();
    store
        .memory_store(&ItemInput::new("User is vegan!"), 3, false)
        .unwrap(); // a duplicate touches nothing
    store
        .memory_update(a, &ItemInput::new("User is vegetarian").tags("diet"), 4)
        .unwrap();
    assert!(store.write_memory_stage_note(&mut note).unwrap());
    assert_eq!(note, "Memory update: [diet;health]");
}

/// `cap_memory_update_execute` notes the labels of the item the update
/// leaves (`cap_memory_collect_summary_list(item)` after
/// `claw_memory_update_with_result` made `item` the replacement), not the
/// old item's; an update that duplicates another item notes that item's.
#[test]
fn cap_memory_update_execute_notes_only_the_resulting_items_labels() {
    let mut store = S::format(flash(32), config()).unwrap();
    let a = store
        .memory_store(
            &ItemInput::new("User is vegan").tags("diet, health"),
            1,
            false,
        )
        .unwrap()
        .item
        .id();
    let b = store
        .memory_store(
            &ItemInput::new("User runs on Mondays").tags("sport"),
            2,
            false,
        )
        .unwrap()
        .item
        .id();
    store.memory_stage_begin();
    store
        .memory_update(a, &ItemInput::new("User is vegetarian").tags("food"), 3)
        .unwrap()
        .unwrap();
    let mut note = String::new();
    assert!(store.write_memory_stage_note(&mut note).unwrap());
    assert_eq!(note, "Memory update: [food]");
    // Updated into a duplicate of `b`: the note names `b`'s labels.
    let c = store
        .memory_store(&ItemInput::new("User swims daily").tags("swim"), 4, false)
        .unwrap()
        .item
        .id();
    store.memory_stage_begin();
    let dup = store
        .memory_update(c, &ItemInput::new("User runs on Mondays"), 5)
        .unwrap()
        .unwrap();
    assert_eq!(dup.item.id(), b);
    let mut note = String::new();
    assert!(store.write_memory_stage_note(&mut note).unwrap());
    assert_eq!(note, "Memory update: [sport]");
}

#[test]
fn catalog_read_cost_is_measured() {
    let mut store = S::format(flash(64), config()).unwrap();
    for n in 0..60u32 {
        store
            .memory_store(
                &ItemInput::new(&format!("fact {n}: the user mentioned topic {n}"))
                    .tags(&format!("topic_{}", n % 12)),
                n,
                false,
            )
            .unwrap();
    }
    store.memory_compact().unwrap();
    let b0 = store.flash().flash().stats().read_bytes;
    store.memory_len().unwrap();
    println!(
        "active set: {} B",
        store.flash().flash().stats().read_bytes - b0
    );
    let before = store.flash().flash().stats().read_bytes;
    let mut prompt = String::new();
    store.write_memory_prompt(&mut prompt).unwrap();
    let read = store.flash().flash().stats().read_bytes - before;
    println!("catalog of 12 labels over 60 items: {read} B read");
    assert!(prompt.contains("- topic_11\n"));
    // The index carries the catalog: reading it costs the index, not the
    // items.
    assert!(read < 4096, "{read}");
    // Changes since the index are applied on top of it.
    let mut first_topic0 = None;
    store
        .memory_list(|i| {
            if i.tags() == "topic_0" && first_topic0.is_none() {
                first_topic0 = Some(i.id());
            }
        })
        .unwrap();
    store.memory_forget(first_topic0.unwrap()).unwrap();
    store
        .memory_store(&ItemInput::new("a brand new fact").tags("fresh"), 99, false)
        .unwrap();
    let mut cat = Vec::new();
    store
        .memory_catalog(|l, n| cat.push((l.to_string(), n)))
        .unwrap();
    assert_eq!(cat[0], ("topic_0".to_string(), 4));
    assert_eq!(cat[1], ("topic_1".to_string(), 5));
    assert_eq!(cat.last().unwrap(), &("fresh".to_string(), 1));
    assert_eq!(cat.len(), 13);
}

/// Regression (found by the `engine_ops` fuzz target): with 256-byte
/// sectors a memory item's record often starts in the last bytes of a
/// sector and continues in the next. Mount used to take the next item id
/// only from a record whose first chunk held the id, so after a remount the
/// next store reused the id of the newest item and replaced it.
#[test]
fn item_ids_survive_a_remount_when_the_newest_item_straddles_sectors() {
    use clawmem_sim::{Geometry, Model, Nor, WriteRule};
    type Tiny = Store<Nor<1, 256, true>, 8>;
    let t = Preset::Generic.default_model().timings;
    let model = Model::custom(Geometry::new(1, 256, 64).unwrap(), WriteRule::Unlimited, t);
    let cfg = Config {
        session_size_limit_bytes: 768,
        ..Config::default()
    };
    let mut store = Tiny::format(Nor::new(SimFlash::new(model)).unwrap(), cfg).unwrap();
    let mut want = Vec::new();
    for n in 0..24 {
        let c = format!("straddling fact {n}: x{}", "s".repeat(n * 5 % 70));
        store
            .memory_store(&ItemInput::new(&c).tags("facts"), n as u32, false)
            .unwrap();
        want.push(c);
        store = Tiny::mount(store.into_flash(), cfg, MountMode::ExistingOnly).unwrap();
        let mut got = Vec::new();
        store
            .memory_list(|i| got.push(i.content().to_string()))
            .unwrap();
        got.sort();
        let mut w = want.clone();
        w.sort();
        assert_eq!(got, w, "after store {n} and a remount");
    }
    store.check().unwrap();
}

#[test]
fn bad_memory_and_profile_input_gets_a_clear_error_and_changes_nothing() {
    use clawmem::profile::ProfileDoc;
    let mut store = S::format(flash(24), config()).unwrap();
    let id = store
        .memory_store(&ItemInput::new("User likes tea").tags("drinks"), 1, false)
        .unwrap()
        .item
        .id();
    store.profile_write(ProfileDoc::User, "# User\n").unwrap();
    let image = store.flash().flash().image();
    assert!(matches!(
        store.memory_store(&ItemInput::new(" \n "), 2, false),
        Err(Error::InvalidInput(_))
    ));
    assert!(matches!(
        store.memory_forget(ItemId::new(999)),
        Err(Error::NotFound)
    ));
    assert!(matches!(
        store.memory_update(ItemId::new(999), &ItemInput::new("a b c"), 3),
        Err(Error::NotFound)
    ));
    match store.memory_recall(&["nope"], 4, 3, |_| {}) {
        Err(Error::UnknownLabel(e)) => {
            assert_eq!(e.label(), "nope");
            assert_eq!(e.available(), "drinks");
        }
        r => panic!("{:?}", r.map(|_| ())),
    }
    assert!(matches!(
        store.profile_write(ProfileDoc::User, &"p".repeat(64 * 1024)),
        Err(Error::TooLarge {
            what: "profile document",
            size: 65536,
            limit: 8192
        })
    ));
    let mut small = [0u8; 2];
    assert!(matches!(
        store.profile_read(ProfileDoc::User, &mut small),
        Err(Error::BufferTooSmall { needed: 7 })
    ));
    assert!(
        store.flash().flash().image() == image,
        "a refused call wrote to flash"
    );
    let mut store = remount(store);
    assert_eq!(contents_of(&mut store), ["User likes tea"]);
    let mut doc = [0u8; 16];
    let n = store.profile_read(ProfileDoc::User, &mut doc).unwrap();
    assert_eq!(&doc[..n], b"# User\n");
    // Content past the 255 bytes ESP-Claw's content[256] holds is cut, as
    // ESP-Claw cuts it.
    let long = "y".repeat(clawmem::memory::CONTENT_MAX_BYTES + 40);
    let s = store
        .memory_store(&ItemInput::new(&long), 4, false)
        .unwrap();
    assert_eq!(s.item.content().len(), clawmem::memory::CONTENT_KEPT_BYTES);
    let _ = id;
}

/// A power cut at every program and erase call of a scrub on write-once
/// flash (the relocation, the checkpoint, the erase of each sector that held
/// a copy), torn three ways; after a fresh mount, running the scrub again
/// leaves no copy of the content on flash, and everything else is there.
/// An erase torn early leaves a sector whose header is gone but whose first
/// chunks still check out: the mount keeps such a sector (it cannot tell it
/// from a header damaged at rest) and the second scrub wipes it.
#[test]
fn scrub_cut_anywhere_then_scrubbed_again_leaves_no_copy() {
    use clawmem_sim::{CutPoint, Nor, PowerCut, Tear};
    type W = Nor<32, 4096>;
    let cfg = config();
    let secret = "the alarm code is 9-8-7-6";
    let (mut store, id) = write_once_with_secret(24, secret);
    for n in 0..120 {
        let body = format!("{{\"n\":{n},\"pad\":\"{}\"}}", "w".repeat(200));
        let rec = clawmem::Record {
            kind: clawmem::RecordType::User,
            format: clawmem::BackendFormat::Unknown,
            body: body.as_bytes(),
        };
        store.append("chat:w", &[rec], false).unwrap();
        if n % 10 == 9 {
            store.delete_session("chat:w").unwrap();
        }
    }
    let keep = clawmem::Record {
        kind: clawmem::RecordType::User,
        format: clawmem::BackendFormat::Unknown,
        body: b"{\"keep\":1}",
    };
    store.append("chat:keep", &[keep], false).unwrap();
    let before = store.into_flash().into_inner();
    // The scrub's calls, counted on a copy.
    let mut count = before.clone();
    count.arm_power_cut(PowerCut {
        seed: 0,
        at: CutPoint::Op(u64::MAX),
        tear: Tear::Prefix(0),
    });
    let mut s = Store::<W, 8>::mount(W::new(count).unwrap(), cfg, MountMode::ExistingOnly).unwrap();
    s.memory_forget_scrub(id).unwrap();
    let calls = s.flash().flash().ops_since_arm();
    assert!(calls >= 3, "{calls}");
    let mut runs = 0;
    for k in 0..calls {
        for tear in [Tear::Prefix(12), Tear::Prefix(2048), Tear::Bits] {
            let mut f = before.clone();
            f.arm_power_cut(PowerCut {
                seed: k,
                at: CutPoint::Op(k),
                tear,
            });
            let mut s =
                Store::<W, 8>::mount(W::new(f).unwrap(), cfg, MountMode::ExistingOnly).unwrap();
            assert!(
                s.memory_forget_scrub(id).is_err(),
                "call {k} did not meet the cut"
            );
            let mut f = s.into_flash().into_inner();
            f.restore_power();
            let ctx = format!("cut at call {k} of {calls}, {tear:?}");
            let mut s = Store::<W, 8>::mount(W::new(f).unwrap(), cfg, MountMode::ExistingOnly)
                .unwrap_or_else(|e| panic!("{ctx}: {e:?}"));
            s.memory_forget_scrub(id)
                .unwrap_or_else(|e| panic!("{ctx}: the second scrub: {e:?}"));
            assert!(
                !on_flash(s.flash().flash(), secret),
                "{ctx}: a copy is left"
            );
            assert_eq!(contents_of(&mut s), ["User likes tea"], "{ctx}");
            let mut buf = [0u8; 256];
            let h = s
                .history("chat:keep", clawmem::BackendFormat::Unknown, &mut buf)
                .unwrap_or_else(|e| panic!("{ctx}: {e:?}"));
            assert_eq!(h.len(), 1, "{ctx}");
            s.check().unwrap_or_else(|e| panic!("{ctx}: check: {e:?}"));
            runs += 1;
        }
    }
    println!("{runs} cut scrubs, each scrubbed again after a fresh mount");
}

/// A scrub on a store nearly full of history moves only what shares a
/// sector with a copy: it costs a few sectors, not a turn of the ring (the
/// sectors before the copy are not relocated), and it is not refused as
/// Full. Every history reads back the same after a fresh mount.
#[test]
fn scrub_of_a_nearly_full_store_moves_only_what_shares_its_sectors() {
    use clawmem_sim::{Geometry, Model, Nor, WriteRule};
    type W = Nor<32, 4096>;
    let t = Preset::Stm32h7.default_model().timings;
    let model = Model::custom(Geometry::new(32, 4096, 48).unwrap(), WriteRule::Once, t);
    let cfg = config();
    let mut store = Store::<W, 8>::format(W::new(SimFlash::new(model)).unwrap(), cfg).unwrap();
    // Six sessions filled in turns until the store refuses.
    let mut appended = 0;
    'fill: for n in 0..10_000 {
        let body = format!("{{\"n\":{n},\"pad\":\"{}\"}}", "h".repeat(150));
        let id = format!("chat:{}", n % 6);
        match store.append(&id, &[rec(body.as_bytes())], false) {
            Ok(_) => appended += 1,
            Err(Error::Full { .. }) => break 'fill,
            Err(e) => panic!("append {n}: {e:?}"),
        }
    }
    assert!(appended > 100, "{appended}");
    let used = store.space().used_sectors;
    assert!(used >= 40, "the store is not nearly full: {used} of 48");
    let secret = "the vault opens with 31-41-59";
    let id = store
        .memory_store(&ItemInput::new(secret).tags("home"), 1, false)
        .unwrap()
        .item
        .id();
    store
        .memory_store(&ItemInput::new("User likes tea").tags("drinks"), 2, false)
        .unwrap();
    let histories = |s: &mut Store<W, 8>| -> Vec<Vec<u8>> {
        (0..6)
            .map(|k| {
                let mut buf = vec![0u8; 64 * 1024];
                let h = s
                    .history(
                        &format!("chat:{k}"),
                        clawmem::BackendFormat::Unknown,
                        &mut buf,
                    )
                    .unwrap();
                let mut out = format!("{}:", h.len()).into_bytes();
                for r in h.iter() {
                    out.extend_from_slice(r.body);
                    out.push(b'\n');
                }
                out
            })
            .collect()
    };
    let before = histories(&mut store);
    assert!(on_flash(store.flash().flash(), secret));
    let s0 = store.flash().flash().stats().clone();
    store.memory_forget_scrub(id).unwrap();
    let s1 = store.flash().flash().stats().clone();
    assert!(!on_flash(store.flash().flash(), secret), "a copy is left");
    // A few sectors: the copies' sectors, their neighbours' moved records,
    // the memory index and a checkpoint. Relocating everything older than
    // the copy would be most of the 48 sectors.
    let erases = s1.erases - s0.erases;
    let written = s1.programmed_bytes - s0.programmed_bytes;
    println!("the scrub: {erases} erases, {written} B programmed, {used} of 48 sectors in use");
    assert!(erases <= 8, "{erases} erases");
    assert!(written <= 6 * 4096, "{written} B programmed");
    assert_eq!(s1.write_budget_violations, 0);
    let mut store = Store::<W, 8>::mount(store.into_flash(), cfg, MountMode::ExistingOnly).unwrap();
    assert_eq!(histories(&mut store), before);
    assert!(matches!(store.memory_get(id), Err(Error::NotFound)));
    assert_eq!(contents_of(&mut store), ["User likes tea"]);
    store.check().unwrap();
}

/// Memory that never compacts on its own (ESP-Claw's trigger off): only
/// the chain's length and a full active set write an index.
fn no_trigger() -> Config {
    Config {
        memory: MemoryConfig {
            compact_after_changes: u16::MAX,
            compact_after_bytes: u32::MAX,
            ..MemoryConfig::default()
        },
        ..config()
    }
}

fn fact(n: u32) -> String {
    format!("item {n:04} of the long chain")
}

/// A cut between an update's new item and its tombstone leaves both
/// active. Were the set as full as stores let it get (159 items: a store
/// finding 159 compacts first), that would be one item more than any store
/// makes, and the next update would add one to it, past what the active
/// set holds. So an update finding 159 items compacts before its put too
/// (evicting down to the item limit), whatever the chain's length: after a
/// cut at any point of such an update, the next update, store and recall
/// all answer and at most 159 items are active.
#[test]
fn an_update_that_finds_the_active_set_full_compacts_first() {
    let cfg = no_trigger();
    let mut store = S::format(flash(64), cfg).unwrap();
    let mut ids = Vec::new();
    for n in 0..159u32 {
        let s = store
            .memory_store(&ItemInput::new(&fact(n)).tags("chain"), n * 3600, false)
            .unwrap();
        assert!(s.changed);
        ids.push(s.item.id());
    }
    assert_eq!(store.memory_len().unwrap(), 159);
    let base = store.into_flash();
    let mut clean = base.clone();
    clean.flash_mut().arm_power_cut(PowerCut {
        seed: 0,
        at: CutPoint::Op(u64::MAX),
        tear: Tear::Prefix(0),
    });
    let mut store = S::mount(clean, cfg, MountMode::ExistingOnly).unwrap();
    store
        .memory_update(ids[158], &ItemInput::new("item 0158 updated once"), 600_000)
        .unwrap()
        .unwrap();
    assert!(store.memory_len().unwrap() <= 159);
    let total = store.flash().flash().ops_since_arm();
    for cut in 0..total {
        let mut flash = base.clone();
        flash.flash_mut().arm_power_cut(PowerCut {
            seed: cut,
            at: CutPoint::Op(cut),
            tear: Tear::Prefix(0),
        });
        let mut store = S::mount(flash, cfg, MountMode::ExistingOnly).unwrap();
        let _ = store.memory_update(ids[158], &ItemInput::new("item 0158 updated once"), 600_000);
        let mut flash = store.into_flash();
        flash.flash_mut().restore_power();
        let mut store = S::mount(flash, cfg, MountMode::ExistingOnly).unwrap();
        let len = store.memory_len().unwrap();
        assert!((128..=159).contains(&len), "cut {cut}: {len} items");
        // Another update, a store and a recall: each answers, and what is
        // active afterwards reads back the same after a remount.
        store
            .memory_update(ids[157], &ItemInput::new("item 0157 updated once"), 600_100)
            .unwrap_or_else(|e| panic!("cut {cut}: update: {e:?}"));
        store
            .memory_store(&ItemInput::new(&fact(900)).tags("chain"), 600_200, false)
            .unwrap_or_else(|e| panic!("cut {cut}: store: {e:?}"));
        store
            .memory_recall(&["chain"], 8, 600_300, |_| {})
            .unwrap_or_else(|e| panic!("cut {cut}: recall: {e:?}"));
        let got = contents(&mut store);
        assert!(got.len() <= 159, "cut {cut}: {} items", got.len());
        assert!(got.iter().any(|c| c == "item 0157 updated once"));
        let mut store = S::mount(store.into_flash(), cfg, MountMode::ExistingOnly).unwrap();
        assert_eq!(contents(&mut store), got, "cut {cut}");
    }
}

/// The chain after an index holds up to 128 records: every access record
/// of a chain that long is applied, after a remount too, and the index
/// written when it is full keeps the counts.
#[test]
fn a_full_memory_chain_is_applied_whole_after_a_remount() {
    let cfg = no_trigger();
    let mut store = S::format(flash(64), cfg).unwrap();
    let id = store
        .memory_store(&ItemInput::new(&fact(1)).tags("chain"), 1, false)
        .unwrap()
        .item
        .id();
    for round in 0..300u32 {
        store
            .memory_recall(&["chain"], 8, 10 + round, |_| {})
            .unwrap();
        if round % 97 == 0 {
            store = S::mount(store.into_flash(), cfg, MountMode::ExistingOnly).unwrap();
        }
        let item = store.memory_get(id).unwrap();
        assert_eq!(item.access_count(), (round + 1) as u16, "round {round}");
        assert_eq!(item.updated_at(), 10 + round, "round {round}");
    }
}

/// A scrub finds a copy by the item id near the start of its put. An
/// updated item's put (with its lineage words, 18 bytes before the id's
/// end) may start at a sector's end with only 16 or 17 bytes in its first
/// chunk: the id is read on in the next sector, and the copy is found.
/// The padding before the update moves its put over 100 head positions.
#[test]
fn scrub_finds_an_updated_item_whose_put_starts_at_a_sectors_end() {
    let secret = "the safe in the attic opens with 2718";
    for pad in 3850..3950usize {
        let mut store = S::format(flash(8), config()).unwrap();
        let old = store
            .memory_store(&ItemInput::new("a placeholder note").tags("home"), 1, false)
            .unwrap()
            .item
            .id();
        let body = format!("{{\"pad\":\"{}\"}}", "q".repeat(pad));
        store
            .append("chat:pad", &[rec(body.as_bytes())], false)
            .unwrap();
        let new = store
            .memory_update(old, &ItemInput::new(secret), 2)
            .unwrap()
            .unwrap()
            .item
            .id();
        assert!(on_flash(store.flash().flash(), secret));
        store.memory_forget_scrub(new).unwrap();
        assert!(
            !on_flash(store.flash().flash(), secret),
            "pad {pad}: a copy of the content is still on flash"
        );
        let mut store = remount(store);
        assert!(matches!(store.memory_get(new), Err(Error::NotFound)));
        store.check().unwrap();
    }
}
