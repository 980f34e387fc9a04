//! Idle-time maintenance (`Store::maintain`): it takes the erases, due
//! checkpoints and collections out of the appends that follow, keeps to its
//! budget, and is power-safe: a sector erased ahead is trusted across a
//! mount only as the head's last chunk says (format 8), never because it
//! reads blank.

use clawmem::{BackendFormat, Config, MountMode, Record, RecordType, Store};
use clawmem_sim::{CutPoint, Esp32Flash, PowerCut, Preset, SimFlash, Tear};

type S = Store<Esp32Flash, 16>;

fn esp32(sectors: usize) -> Esp32Flash {
    Esp32Flash::new(SimFlash::new(Preset::Esp32.model(4096 * sectors).unwrap())).unwrap()
}

fn config() -> Config {
    Config {
        session_size_limit_bytes: 8 * 1024,
        checkpoint_interval_bytes: 4096,
        ..Config::default()
    }
}

fn body(i: u32) -> Vec<u8> {
    format!(
        "{{\"turn\":{i},\"pad\":\"{}\"}}",
        "z".repeat(100 + (i % 7) as usize * 40)
    )
    .into_bytes()
}

fn append(store: &mut S, s: u32, i: u32) {
    append_body(store, s, &body(i));
}

/// One user record with body `b` appended to session `s`.
fn append_body(store: &mut S, s: u32, b: &[u8]) {
    store
        .append(
            &format!("chat:m:{s}"),
            &[Record {
                kind: RecordType::User,
                format: BackendFormat::OpenAiCompatible,
                body: b,
            }],
            false,
        )
        .unwrap();
}

fn erases(store: &S) -> u64 {
    store.flash().flash().stats().erases
}

/// Appends, with sessions deleted now and then so that the ring wraps and
/// collects, calling `maintain` between appends when `idle`. Returns how
/// many appends erased.
fn run(store: &mut S, from: u32, n: u32, idle: bool) -> u32 {
    let mut erasing = 0;
    for i in from..from + n {
        let s = i % 6;
        if i % 12 == 11 {
            store
                .delete_session(&format!("chat:m:{}", (i / 12) % 6))
                .ok();
        }
        let before = erases(store);
        append(store, s, i);
        if erases(store) > before {
            erasing += 1;
        }
        if idle {
            let m = store.maintain(u32::MAX).unwrap();
            assert!(m.done, "unbounded maintenance stopped with work due");
        }
    }
    erasing
}

#[test]
fn appends_after_maintenance_never_erase() {
    let mut store = S::format(esp32(24), config()).unwrap();
    // Without maintenance, appends that open sectors erase them.
    assert!(run(&mut store, 0, 300, false) > 0);
    store.maintain(u32::MAX).unwrap();
    // With it, over several turns of the ring, none does.
    let wraps_before = store.flash().flash().stats().erase_count_max();
    assert_eq!(run(&mut store, 300, 1500, true), 0);
    assert!(store.flash().flash().stats().erase_count_max() >= wraps_before + 2);
    store.check().unwrap();
    // Everything is still there after a fresh mount.
    let mut buf = vec![0u8; 64 * 1024];
    let mut seen = 0;
    let flash = store.into_flash();
    let mut store = S::mount(flash, config(), MountMode::ExistingOnly).unwrap();
    for s in 0..6 {
        if let Ok(h) = store.history(&format!("chat:m:{s}"), BackendFormat::Unknown, &mut buf) {
            seen += h.iter().count();
        }
    }
    assert!(seen > 0);
    store.check().unwrap();
}

#[test]
fn maintenance_keeps_to_its_budget() {
    let mut store = S::format(esp32(24), config()).unwrap();
    run(&mut store, 0, 60, false);
    let m = store.maintain(0).unwrap();
    assert_eq!(m.steps, 0);
    assert!(!m.done, "erasing ahead is due on a store with free sectors");
    let mut calls = 0;
    let m = store
        .maintain_while(&mut || {
            calls += 1;
            calls <= 1
        })
        .unwrap();
    assert_eq!(m.steps, 1);
    assert!(!m.done);
    let m = store.maintain(u32::MAX).unwrap();
    assert!(m.done);
    // Nothing is due any more: a second call takes no step.
    assert_eq!(store.maintain(u32::MAX).unwrap().steps, 0);
}

/// Erasing ahead starts only when the caller's writes between idle calls
/// (twice the largest burst of this mount, at least half a sector) would
/// reach past the head: a head with room for that gets no erase ahead. Once
/// it starts, it erases three sectors, so that one chunk says them all
/// (format 8: a remount trusts them).
#[test]
fn erasing_ahead_looks_as_far_as_the_largest_burst() {
    let mut store = S::format(esp32(24), config()).unwrap();
    let e0 = erases(&store);
    store.maintain(u32::MAX).unwrap();
    assert_eq!(
        erases(&store),
        e0,
        "an empty head sector needs nothing erased"
    );
    // A burst of about 6 KiB with no idle call.
    run(&mut store, 0, 24, false);
    let e1 = erases(&store);
    store.maintain(u32::MAX).unwrap();
    assert_eq!(erases(&store), e1 + 3);
    // Appends up to that burst between idle calls then never erase.
    let mut waited = 0;
    for k in 0..20 {
        waited += run(&mut store, 100 + 24 * k, 24, false);
        store.maintain(u32::MAX).unwrap();
    }
    assert_eq!(waited, 0);
}

#[test]
fn a_sector_erased_ahead_is_erased_again_after_a_remount() {
    let mut store = S::format(esp32(24), config()).unwrap();
    run(&mut store, 0, 100, false);
    store.maintain(u32::MAX).unwrap();
    let expected = read_all(&mut store);
    // Every blank sector (those erased ahead among them) gets a stray 0 bit,
    // as a cut erase can leave in a sector that reads blank otherwise: a
    // fresh mount must not take them as erased.
    let mut flash = store.into_flash();
    let sim = flash.flash_mut();
    let image = sim.image();
    let mut marked = 0;
    for (k, sector) in image.chunks(4096).enumerate() {
        if sector.iter().all(|b| *b == 0xFF) {
            sim.flip_bit(k * 4096 + 100, 3).unwrap();
            marked += 1;
        }
    }
    assert!(marked >= 2, "the erased-ahead sectors are blank");
    let mut store = S::mount(flash, config(), MountMode::ExistingOnly).unwrap();
    assert_eq!(read_all(&mut store), expected);
    // A turn of the ring through them, then everything checks out.
    run(&mut store, 1000, 400, false);
    store.check().unwrap();
    assert_eq!(store.flash().flash().stats().write_budget_violations, 0);
    let flash = store.into_flash();
    let mut store = S::mount(flash, config(), MountMode::ExistingOnly).unwrap();
    store.check().unwrap();
}

#[test]
fn power_cut_at_every_call_of_maintenance() {
    let base = {
        let mut store = S::format(esp32(20), config()).unwrap();
        run(&mut store, 0, 200, false);
        store.into_flash()
    };
    // The clean run: how many program and erase calls maintenance makes.
    let mut clean = base.clone();
    clean.flash_mut().arm_power_cut(PowerCut {
        seed: 0,
        at: CutPoint::Op(u64::MAX),
        tear: Tear::Prefix(0),
    });
    // After the mount, a burst of appends with no idle call: maintenance
    // then erases ahead (three sectors), writes the due checkpoint and says
    // which sectors are erased.
    let mut store = S::mount(clean, config(), MountMode::ExistingOnly).unwrap();
    run(&mut store, 300, 30, false);
    let calls_before = store.flash().flash().ops_since_arm();
    let m = store.maintain(u32::MAX).unwrap();
    assert!(m.steps >= 3, "maintenance had little to do: {m:?}");
    let calls = store.flash().flash().ops_since_arm() - calls_before;
    let expected = read_all(&mut store);
    for cut in 0..calls {
        for tear in [Tear::Prefix(0), Tear::Prefix(7), Tear::Bits] {
            let mut flash = base.clone();
            flash.flash_mut().arm_power_cut(PowerCut {
                seed: cut,
                at: CutPoint::Op(calls_before + cut),
                tear,
            });
            let mut store = S::mount(flash, config(), MountMode::ExistingOnly).unwrap();
            run(&mut store, 300, 30, false);
            assert!(store.maintain(u32::MAX).is_err(), "cut {cut} did not land");
            let mut flash = store.into_flash();
            flash.flash_mut().restore_power();
            let mut store = S::mount(flash, config(), MountMode::ExistingOnly)
                .unwrap_or_else(|e| panic!("cut {cut} {tear:?}: mount: {e:?}"));
            assert_eq!(read_all(&mut store), expected, "cut {cut} {tear:?}");
            store.check().unwrap();
            // It goes on: maintenance finishes, and appends work.
            assert!(store.maintain(u32::MAX).unwrap().done);
            run(&mut store, 5000, 40, true);
            store.check().unwrap();
        }
    }
}

fn read_all(store: &mut S) -> Vec<Vec<Vec<u8>>> {
    let mut buf = vec![0u8; 64 * 1024];
    (0..6)
        .map(
            |s| match store.history(&format!("chat:m:{s}"), BackendFormat::Unknown, &mut buf) {
                Ok(h) => h.iter().map(|r| r.body.to_vec()).collect(),
                Err(_) => Vec::new(),
            },
        )
        .collect()
}

/// On a partition that stays nearly full, idle calls collect no more often
/// than appends would: the flash programs about the same with and without
/// them (before the fix, each call moved the same sessions again).
#[test]
fn maintenance_on_a_nearly_full_partition_does_not_move_data_again_and_again() {
    let programmed = |idle: bool| {
        let mut store = S::format(esp32(14), config()).unwrap();
        run(&mut store, 0, 300, idle);
        store.check().unwrap();
        store.flash().flash().stats().programmed_bytes
    };
    let (plain, idle) = (programmed(false), programmed(true));
    assert!(
        idle <= plain + plain / 10,
        "maintenance programmed {idle} B against {plain} B without it"
    );
}

/// Sectors erased ahead are not erased again after a remount (format 8):
/// maintenance says which they are in a chunk (a header alone when nothing
/// else was written after the erases), and the mount trusts what the head's
/// last chunk says. Opening them then costs no erase; without the chunk
/// each remount erased them again.
#[test]
fn sectors_erased_ahead_are_not_erased_again_after_a_remount() {
    let mut store = S::format(esp32(24), config()).unwrap();
    // Round the ring first: the mount then starts from a checkpoint with
    // the tail far behind the head.
    run(&mut store, 0, 700, false);
    // A burst of two sectors with no idle call: maintenance erases three
    // sectors ahead, and says so.
    run(&mut store, 700, 30, false);
    store.maintain(u32::MAX).unwrap();
    let expected = read_all(&mut store);
    let before = store.flash().flash().stats().erase_counts.clone();
    // The sectors erased ahead: erased once (the partition was blank, and
    // the ring has not come round) and blank.
    let image = store.flash().flash().image();
    let ahead: Vec<usize> = (0..24)
        .filter(|&k| before[k] > 0 && image[k * 4096..(k + 1) * 4096].iter().all(|b| *b == 0xFF))
        .collect();
    assert_eq!(ahead.len(), 3, "three sectors erased ahead: {ahead:?}");
    let mut store = remount_and_open(store, &expected, &ahead, &before, 2000, "");
    store.check().unwrap();
    let flash = store.into_flash();
    let mut store = S::mount(flash, config(), MountMode::ExistingOnly).unwrap();
    store.check().unwrap();
}

/// Whether sector `k` holds a sector header (it was opened).
fn image_has_header(store: &S, k: usize) -> bool {
    let mut magic = [0u8; 4];
    store.flash().flash().peek(k * 4096, &mut magic);
    &magic == b"CLMS"
}

/// A sector erased ahead that no chunk says is erased (maintenance stopped
/// by its budget after the erase, before saying so; or a cut erase, which
/// can leave a sector that reads blank with cells not soundly erased) is
/// erased again when opened after a remount: a blank sector is never
/// trusted on its looks.
#[test]
fn a_sector_erased_ahead_but_not_said_is_erased_again_after_a_remount() {
    let mut store = S::format(esp32(24), config()).unwrap();
    run(&mut store, 0, 130, false);
    // Maintenance one step at a time, up to its first erase and no step
    // after it.
    let mut erased = false;
    for _ in 0..16 {
        let before = erases(&store);
        let m = store.maintain(1).unwrap();
        if erases(&store) > before {
            erased = true;
            break;
        }
        assert!(!m.done, "maintenance ended before erasing ahead");
    }
    assert!(erased, "maintenance erased nothing ahead");
    let before = store.flash().flash().stats().erase_counts.clone();
    let image = store.flash().flash().image();
    let ahead: Vec<usize> = (0..24)
        .filter(|&k| before[k] > 0 && image[k * 4096..(k + 1) * 4096].iter().all(|b| *b == 0xFF))
        .collect();
    assert!(!ahead.is_empty(), "a sector erased ahead");
    let flash = store.into_flash();
    let mut store = S::mount(flash, config(), MountMode::ExistingOnly).unwrap();
    for i in 0..40 {
        append(&mut store, i % 6, 3000 + i);
    }
    let after = &store.flash().flash().stats().erase_counts;
    for &k in &ahead {
        assert!(image_has_header(&store, k), "sector {k} was not opened");
        assert_eq!(
            after[k],
            before[k] + 1,
            "sector {k}, erased ahead but not said, was not erased again"
        );
    }
    store.check().unwrap();
}

/// A sector a chunk says is erased ahead, but that a mount trusts no more
/// (an opening of it was torn: a bit of its header programmed), is taken
/// back on flash before it is erased again. Otherwise an erase of it cut
/// part-way would leave a sector that reads erased, which the head's last
/// chunk, still the last word, would have the next mount trust. Idle work
/// right after the mount erases it (after a header-only chunk takes it
/// back), and that erase is cut; the next mount must erase it again when it
/// opens it.
#[test]
fn a_sector_said_erased_but_no_longer_trusted_is_taken_back_before_it_is_erased() {
    let mut checked = 0;
    for n in (60..200).step_by(5) {
        let mut store = S::format(esp32(24), config()).unwrap();
        run(&mut store, 0, n, false);
        run(&mut store, 1000, 30, false);
        store.maintain(u32::MAX).unwrap();
        let counts = store.flash().flash().stats().erase_counts.clone();
        let image = store.flash().flash().image();
        let Some(first) = (0..24).find(|&k| {
            counts[k] > 0
                && image[k * 4096..(k + 1) * 4096].iter().all(|b| *b == 0xFF)
                && counts[(k + 23) % 24] > 0
                && !image[((k + 23) % 24) * 4096..((k + 23) % 24 + 1) * 4096]
                    .iter()
                    .all(|b| *b == 0xFF)
        }) else {
            continue;
        };
        let mut tampered = store.into_flash();
        tampered.flash_mut().flip_bit(first * 4096 + 2, 0).unwrap();
        // Which call of the idle work after a remount erases it.
        let cut_at = |op: u64| {
            let mut store = S::mount(tampered.clone(), config(), MountMode::ExistingOnly).unwrap();
            let before = store.flash().flash().stats().erase_counts[first];
            store.flash_mut().flash_mut().arm_power_cut(PowerCut {
                seed: op,
                at: CutPoint::Op(op),
                tear: Tear::Prefix(4096),
            });
            let cut = store.maintain(u32::MAX).is_err();
            let erased = store.flash().flash().stats().erase_counts[first] > before;
            let mut flash = store.into_flash();
            flash.flash_mut().restore_power();
            (cut, erased, flash)
        };
        // The first call that erases it, cut there.
        let Some(after) = (0..4).find_map(|op| match cut_at(op) {
            (true, true, flash) => Some(flash),
            _ => None,
        }) else {
            continue;
        };
        // The erase was cut (it landed whole, as a cut erase can look):
        // the next mount must not take the sector for erased.
        let mut store = S::mount(after, config(), MountMode::ExistingOnly).unwrap();
        let before = store.flash().flash().stats().erase_counts[first];
        for i in 0..60 {
            append(&mut store, i % 6, 5000 + i);
        }
        assert!(
            image_has_header(&store, first),
            "n {n}: sector {first} not opened"
        );
        assert!(
            store.flash().flash().stats().erase_counts[first] > before,
            "n {n}: sector {first}, its erase cut, was opened without an erase"
        );
        store.check().unwrap();
        checked += 1;
    }
    assert!(
        checked > 0,
        "no workload made idle work erase a sector said erased"
    );
}

/// Bytes left blank at the end of the head sector (the sector with a
/// header and the highest sequence number), from the image.
fn head_room(store: &S, sectors: usize) -> usize {
    let image = store.flash().flash().image();
    let seq = |k: usize| u32::from_le_bytes(image[k * 4096 + 8..k * 4096 + 12].try_into().unwrap());
    let head = (0..sectors)
        .filter(|&k| &image[k * 4096..k * 4096 + 4] == b"CLMS")
        .max_by_key(|&k| seq(k))
        .unwrap();
    let sector = &image[head * 4096..(head + 1) * 4096];
    sector.iter().rev().take_while(|b| **b == 0xFF).count()
}

/// An append whose body is `len` bytes.
fn append_len(store: &mut S, s: u32, len: usize) {
    append_body(store, s, &vec![b'y'; len]);
}

/// Sectors erased ahead while the head has no room left for a chunk that
/// could say so (its last chunk ended too close to the sector's end) are
/// said all the same: maintenance opens the first of them, which needs no
/// erase, and says the rest there. A remount then erases none of them
/// again (before format 8's fix it erased all three again).
#[test]
fn sectors_erased_ahead_behind_a_full_head_are_not_erased_again_after_a_remount() {
    let fresh = || {
        let mut store = S::format(esp32(24), config()).unwrap();
        run(&mut store, 0, 700, false);
        store
    };
    // A last append that leaves the head less room than a header-only
    // chunk and the room after it need.
    let room = head_room(&fresh(), 24);
    let mut found = None;
    for len in (1..room.min(4000)).rev() {
        let mut store = fresh();
        append_len(&mut store, 0, len);
        let left = head_room(&store, 24);
        if left < 28 {
            found = Some((store, len, left));
            break;
        }
    }
    let (mut store, len, left) = found.expect("no append leaves the head nearly full");
    let before = store.flash().flash().stats().erase_counts.clone();
    let m = store.maintain(u32::MAX).unwrap();
    assert!(m.done);
    let counts = store.flash().flash().stats().erase_counts.clone();
    let ahead: Vec<usize> = (0..24).filter(|&k| counts[k] > before[k]).collect();
    // Three, then (the first opened to say them) one more.
    assert!(
        ahead.len() >= 3,
        "append of {len} B left {left} B: sectors erased ahead: {ahead:?}"
    );
    let expected = read_all(&mut store);
    let what = format!("append of {len} B left {left} B: ");
    let mut store = remount_and_open(store, &expected, &ahead, &counts, 4000, &what);
    store.check().unwrap();
}

/// Remounts `store`, checks that it reads back `expected`, and appends
/// until every sector of `ahead` is opened; each must be opened without an
/// erase: its erase count still the one in `counts`. `what` prefixes the
/// failure messages.
fn remount_and_open(
    store: S,
    expected: &[Vec<Vec<u8>>],
    ahead: &[usize],
    counts: &[u64],
    from: u32,
    what: &str,
) -> S {
    let flash = store.into_flash();
    let mut store = S::mount(flash, config(), MountMode::ExistingOnly).unwrap();
    assert_eq!(read_all(&mut store), expected);
    // Appends that open all of them (and more).
    for i in 0..50 {
        append(&mut store, i % 6, from + i);
    }
    let after = &store.flash().flash().stats().erase_counts;
    for &k in ahead {
        assert!(
            image_has_header(&store, k),
            "{what}sector {k} was not opened by the appends"
        );
        assert_eq!(
            after[k], counts[k],
            "{what}sector {k}, erased ahead, was erased again after the remount"
        );
    }
    store
}
