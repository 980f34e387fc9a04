//! Sessions on a simulated flash: append, history, remount, delete.

use clawmem::{BackendFormat, Config, Error, MountMode, Record, RecordType, Store};
use clawmem_sim::{Esp32Flash, Preset, SimFlash};

type S = Store<Esp32Flash, 16>;

fn esp32(sectors: usize) -> Esp32Flash {
    Esp32Flash::new(SimFlash::new(Preset::Esp32.model(4096 * sectors).unwrap())).unwrap()
}

fn small_config() -> Config {
    Config {
        session_size_limit_bytes: 8 * 1024,
        ..Config::default()
    }
}

fn user(body: &str) -> Record<'_> {
    Record {
        kind: RecordType::User,
        format: BackendFormat::OpenAiCompatible,
        body: body.as_bytes(),
    }
}

fn final_answer(body: &str) -> Record<'_> {
    Record {
        kind: RecordType::AssistantFinal,
        format: BackendFormat::OpenAiCompatible,
        body: body.as_bytes(),
    }
}

fn bodies(store: &mut S, id: &str) -> Vec<String> {
    let mut buf = vec![0u8; 64 * 1024];
    let h = store.history(id, BackendFormat::Unknown, &mut buf).unwrap();
    h.iter()
        .map(|r| String::from_utf8(r.body.to_vec()).unwrap())
        .collect()
}

#[test]
fn append_history_remount() {
    let mut store = S::format(esp32(64), small_config()).unwrap();
    store.append("chat:a", &[user("hello")], false).unwrap();
    store
        .append("chat:a", &[final_answer("hi there")], true)
        .unwrap();
    store.append("chat:b", &[user("other")], false).unwrap();
    assert_eq!(bodies(&mut store, "chat:a"), ["hello", "hi there"]);
    let flash = store.into_flash();
    let mut store = S::mount(flash, small_config(), MountMode::ExistingOnly).unwrap();
    assert_eq!(bodies(&mut store, "chat:a"), ["hello", "hi there"]);
    assert_eq!(bodies(&mut store, "chat:b"), ["other"]);
    store.check().unwrap();
    store.delete_session("chat:a").unwrap();
    let mut buf = [0u8; 256];
    assert!(matches!(
        store.history("chat:a", BackendFormat::Unknown, &mut buf),
        Err(Error::NotFound)
    ));
    let flash = store.into_flash();
    let mut store = S::mount(flash, small_config(), MountMode::ExistingOnly).unwrap();
    assert!(matches!(
        store.history("chat:a", BackendFormat::Unknown, &mut buf),
        Err(Error::NotFound)
    ));
    assert_eq!(bodies(&mut store, "chat:b"), ["other"]);
    store.check().unwrap();
}

#[test]
fn long_run_wraps_the_ring_and_keeps_everything() {
    let mut store = S::format(esp32(64), small_config()).unwrap();
    let mut expected: Vec<Vec<String>> = vec![Vec::new(); 4];
    for round in 0..3000u32 {
        let s = (round % 4) as usize;
        let id = format!("chat:t:{s}");
        let body = format!(
            "{{\"role\":\"user\",\"content\":\"message {round} {}\"}}",
            "x".repeat((round % 200) as usize)
        );
        let out = store.append(&id, &[user(&body)], true).unwrap();
        expected[s].push(body);
        if out.blocked || round % 97 == 0 {
            // Start over on a session now and then, as users do.
            store.delete_session(&id).unwrap();
            expected[s].clear();
        }
        if round % 500 == 499 {
            let flash = store.into_flash();
            store = S::mount(flash, small_config(), MountMode::ExistingOnly).unwrap();
        }
    }
    store.check().unwrap();
    for (s, exp) in expected.iter().enumerate() {
        let id = format!("chat:t:{s}");
        let got = bodies(&mut store, &id);
        // Compaction only drops tool records; these are all user records,
        // so a session over its limit is blocked instead.
        assert_eq!(&got, exp, "session {s}");
    }
    let stats = store.flash().flash().stats();
    println!("{}", stats.to_json());
}

#[test]
fn the_smallest_sectors_and_the_largest_words_work() {
    use clawmem_sim::{Geometry, Model, Nor, WriteRule};
    let t = Preset::Generic.default_model().timings;
    // 128-byte sectors with 1-byte writes (32-byte words are swept in
    // power_loss.rs).
    let cfg = Config {
        session_size_limit_bytes: 300,
        ..Config::default()
    };
    let model = Model::custom(Geometry::new(1, 128, 256).unwrap(), WriteRule::Unlimited, t);
    let flash = Nor::<1, 128, true>::new(SimFlash::new(model)).unwrap();
    let mut store = Store::<_, 8>::format(flash, cfg).unwrap();
    let mut expected = Vec::new();
    for n in 0..400u32 {
        let body = format!("{{\"n\":{n},\"p\":\"{}\"}}", "s".repeat((n % 50) as usize));
        let out = store.append("chat:small", &[user(&body)], true).unwrap();
        expected.push(body);
        if out.blocked || n % 5 == 4 {
            store.delete_session("chat:small").unwrap();
            expected.clear();
        }
        if n % 97 == 0 {
            let flash = store.into_flash();
            store = Store::<_, 8>::mount(flash, cfg, MountMode::ExistingOnly).unwrap();
        }
    }
    store.check().unwrap();
    assert_eq!(store.flash().flash().stats().write_budget_violations, 0);
    assert!(store.flash().flash().stats().erase_count_max() >= 2);
    let mut buf = vec![0u8; 8192];
    if !expected.is_empty() {
        let h = store
            .history("chat:small", BackendFormat::Unknown, &mut buf)
            .unwrap();
        let got: Vec<String> = h
            .iter()
            .map(|r| String::from_utf8(r.body.to_vec()).unwrap())
            .collect();
        assert_eq!(got, expected);
    }
}

/// `Config::flash_units` runs the store on coarser units than the flash
/// type's (ESP32 flash encryption's 16-byte blocks; the C API's run-time
/// geometry): the image round-trips through a remount with the same units,
/// and units that are not multiples of the type's are refused.
#[test]
fn flash_units_coarser_than_the_flash_type() {
    let units = |write_bytes, erase_bytes| Config {
        flash_units: Some(clawmem::FlashUnits {
            write_bytes,
            erase_bytes,
        }),
        ..small_config()
    };
    let mut store = S::format(esp32(64), units(16, 8192)).unwrap();
    assert_eq!(store.space().sector_bytes, 8192);
    assert_eq!(store.space().sectors, 32);
    store.append("chat:a", &[user("hello")], false).unwrap();
    store
        .append("chat:a", &[final_answer("hi there")], true)
        .unwrap();
    let flash = store.into_flash();
    let mut store = S::mount(flash, units(16, 8192), MountMode::ExistingOnly).unwrap();
    assert_eq!(bodies(&mut store, "chat:a"), ["hello", "hi there"]);
    store.check().unwrap();
    for (w, e) in [(6, 4096), (16, 2048), (2, 4096), (0, 4096)] {
        assert!(
            matches!(S::format(esp32(64), units(w, e)), Err(Error::Config(_))),
            "units {w}/{e} must be refused"
        );
    }
}

/// A store written with one geometry is refused, untouched, by a mount with
/// another (format version 4 on: the sector header names its sector and
/// write unit). Mounted with 8 KiB sectors, a store of 4 KiB sectors would
/// take every other header for data and the data for free space; with a
/// coarser write unit, its chunks would be misaligned.
#[test]
fn a_mount_with_another_geometry_is_refused_untouched() {
    let units = |write_bytes, erase_bytes| Config {
        flash_units: Some(clawmem::FlashUnits {
            write_bytes,
            erase_bytes,
        }),
        ..small_config()
    };
    let mut store = S::format(esp32(64), small_config()).unwrap();
    store.append("chat:a", &[user("hello")], true).unwrap();
    let mut flash = store.into_flash();
    let image = flash.flash().image();
    let calls = flash.flash().stats().clone();
    for (w, e) in [(4, 8192), (16, 4096), (8, 16384)] {
        // Through `&mut`, so that the flash outlives the refused mount.
        let err =
            Store::<&mut Esp32Flash, 16>::mount(&mut flash, units(w, e), MountMode::FormatIfBlank)
                .err();
        let Some(Error::Geometry { sector, write }) = err else {
            panic!("units {w}/{e}: {err:?}");
        };
        assert_eq!((sector, write), (4096, 4), "units {w}/{e}");
    }
    let after = flash.flash().stats();
    assert_eq!(after.programmed_bytes, calls.programmed_bytes);
    assert_eq!(after.erased_bytes, calls.erased_bytes);
    assert_eq!(flash.flash().image(), image);
    let mut store = S::mount(flash, small_config(), MountMode::ExistingOnly).unwrap();
    assert_eq!(bodies(&mut store, "chat:a"), ["hello"]);
    // The other way round: written with 8 KiB sectors and a 16 B unit.
    let store = S::format(esp32(64), units(16, 8192)).unwrap();
    let flash = store.into_flash();
    let err = S::mount(flash, small_config(), MountMode::ExistingOnly).err();
    assert!(
        matches!(
            err,
            Some(Error::Geometry {
                sector: 8192,
                write: 16
            })
        ),
        "{err:?}"
    );
    let text = format!("{}", err.unwrap());
    assert!(
        text.contains("8192 B sectors and a 16 B write unit"),
        "{text}"
    );
}

/// A format wears each sector at most once: on a blank partition it erases
/// sector 0 alone (to open it), and over a store it erases each sector that
/// holds one, sector 0 last and once. (It erased sector 0 twice, which made
/// sector 0 the most worn of the ring for good: max/mean wear 14/12.46 on
/// `replay bfcl-multi-turn --repeat 40`, 13/12.46 since.)
#[test]
fn format_erases_each_sector_at_most_once() {
    let store = S::format(esp32(64), small_config()).unwrap();
    let flash = store.into_flash();
    let counts = flash.flash().stats().erase_counts.clone();
    assert_eq!(counts[0], 1, "{counts:?}");
    assert_eq!(counts.iter().sum::<u64>(), 1, "{counts:?}");
    // Over a store that fills several sectors.
    let mut store = S::mount(flash, small_config(), MountMode::ExistingOnly).unwrap();
    let body = "x".repeat(1000);
    for i in 0..12 {
        store
            .append(&format!("chat:{i}"), &[user(&body)], false)
            .unwrap();
    }
    let flash = store.into_flash();
    let before = flash.flash().stats().erase_counts.clone();
    let store = S::format(flash, small_config()).unwrap();
    let after = store.flash().flash().stats().erase_counts.clone();
    let added: Vec<u64> = after.iter().zip(&before).map(|(a, b)| a - b).collect();
    assert!(added.iter().all(|&n| n <= 1), "{added:?}");
    assert_eq!(added[0], 1, "{added:?}");
    assert!(added.iter().sum::<u64>() >= 3, "{added:?}");
}

/// A configuration with sizes near `u32::MAX` is refused as one the
/// partition cannot hold, never wrapped round to a size that fits (the C
/// API passes a caller's values through).
#[test]
fn huge_config_values_are_refused_not_wrapped() {
    for config in [
        Config {
            session_size_limit_bytes: u32::MAX,
            ..small_config()
        },
        Config {
            knowledge_reserve_bytes: Some(u32::MAX - 4095),
            ..small_config()
        },
    ] {
        assert!(
            matches!(S::format(esp32(64), config), Err(Error::Config(_))),
            "{config:?}"
        );
    }
    // A huge profile limit only saturates the default reserve (a sixteenth
    // of the partition).
    let config = Config {
        profile_max_bytes: usize::MAX,
        ..small_config()
    };
    S::format(esp32(64), config).unwrap();
}

/// A checkpoint that begins in the sector before the head and ends in the
/// head is the one a mount loads: the head's header names the one before it
/// (the head was opened while it was being written), and a mount that
/// loaded that one scanned every chunk since it (on `replay
/// bfcl-multi-turn.jsonl --repeat 100` the largest mount read 23,861 B,
/// 2.28% of the partition, against 19,496 B now). So the scan after such a
/// checkpoint reads no chunk before it: at most the head sector's chunks.
#[test]
fn a_mount_loads_the_checkpoint_that_ends_in_the_head_sector() {
    const SECTOR: usize = 4096;
    let mut store = Store::<Esp32Flash, 64>::format(esp32(256), small_config()).unwrap();
    let body = "x".repeat(150);
    let mut met = 0;
    for i in 0..3000 {
        // Many sessions, so that checkpoints are long and often cross a
        // sector's end.
        let id = format!("chat:t:{}", i % 40);
        let out = store
            .append(&id, &[user(&body), final_answer(&body)], true)
            .unwrap();
        if out.blocked {
            store.delete_session(&id).unwrap();
        }
        let img = store.flash().flash().image();
        // The head: the sector whose header carries the highest sequence.
        let (head, _) = img
            .chunks(SECTOR)
            .enumerate()
            .filter(|(_, s)| s[..4] != [0xFF; 4])
            .map(|(i, s)| (i, u32::from_le_bytes(s[8..12].try_into().unwrap())))
            .max_by_key(|&(_, seq)| seq)
            .unwrap();
        let first = &img[head * SECTOR + 24..];
        // Kind 0x01 (checkpoint) without the FIRST flag: a continuation.
        if first[0] != 0x01 || first[1] & 1 != 0 {
            continue;
        }
        let mut chunks_in_head = 0;
        let mut at = 24;
        while at + 12 <= SECTOR && img[head * SECTOR + at..][..12] != [0xFF; 12] {
            let h = &img[head * SECTOR + at..];
            let len = u32::from(u16::from_le_bytes([h[2], h[3]])) | u32::from(h[1] >> 4) << 16;
            chunks_in_head += 1;
            at += (12 + len as usize).div_ceil(4) * 4;
        }
        met += 1;
        let fresh = Store::<Esp32Flash, 64>::mount(
            store.flash().clone(),
            small_config(),
            MountMode::ExistingOnly,
        )
        .unwrap();
        let r = fresh.mount_report();
        assert!(r.from_checkpoint);
        assert!(
            r.chunks_scanned <= chunks_in_head,
            "append {i}: the mount scanned {} chunks, the head sector holds {chunks_in_head}",
            r.chunks_scanned
        );
    }
    assert!(met >= 50, "only {met} checkpoints ended in the head sector");
}

/// A mount with `FormatIfBlank` on a blank partition is the same store as a
/// format: mount builds the store from the log it opened on the blank
/// partition (`store/mount.rs`, `in_place`), where format starts a fresh
/// one. Any state the opening left behind that format would not have (the
/// write burst idle-time maintenance measures, sectors said to be erased
/// ahead, counters) would show as different bytes, erases or maintenance
/// answers in the run below, which wraps the ring several times with idle
/// calls between the writes.
#[test]
fn format_if_blank_is_the_same_store_as_format() {
    let formatted = S::format(esp32(64), small_config()).unwrap();
    let mounted = S::mount(esp32(64), small_config(), MountMode::FormatIfBlank).unwrap();
    let mut stores = [formatted, mounted];
    let image = |s: &S| s.flash().flash().image();
    let erases = |s: &S| s.flash().flash().stats().erase_counts.clone();
    assert!(image(&stores[0]) == image(&stores[1]), "after format");
    let mut answers: [Vec<String>; 2] = [Vec::new(), Vec::new()];
    for round in 0..1500u32 {
        let id = format!("chat:f:{}", round % 5);
        let body = format!(
            "{{\"role\":\"user\",\"content\":\"{round} {}\"}}",
            "y".repeat((round * 37 % 900) as usize)
        );
        for (store, log) in stores.iter_mut().zip(answers.iter_mut()) {
            let out = store.append(&id, &[user(&body)], round % 3 == 2);
            log.push(format!("append {:?}", out.map(|o| o.blocked)));
            if round % 7 == 6 {
                let m = store.maintain(3);
                log.push(format!("maintain {m:?}"));
            }
            if round % 11 == 10 {
                log.push(format!("delete {:?}", store.delete_session(&id)));
            }
        }
        if round % 100 == 99 {
            assert_eq!(answers[0], answers[1], "answers up to round {round}");
            assert!(
                image(&stores[0]) == image(&stores[1]),
                "flash after round {round}"
            );
            assert_eq!(
                erases(&stores[0]),
                erases(&stores[1]),
                "wear after round {round}"
            );
        }
    }
    // The ring wrapped: every sector was erased more than once.
    assert!(
        erases(&stores[0]).iter().all(|&n| n >= 2),
        "{:?}",
        erases(&stores[0])
    );
    for store in &mut stores {
        store.check().unwrap();
    }
}
