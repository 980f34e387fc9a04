//! Garbage collection's room rules (issue 12): a reserve that follows what
//! the store holds rather than the session limit, an append refused with
//! `Full` that writes and erases nothing, and room that session history
//! leaves for memory and profiles. Each is checked on a fresh mount too.

use clawmem::memory::ItemInput;
use clawmem::profile::ProfileDoc;
use clawmem::{BackendFormat, Config, Error, MountMode, Record, RecordType, Store};
use clawmem_sim::{ClawmemDriver, Esp32Flash, Preset, SimFlash};

type S = Store<Esp32Flash, 64>;

fn flash(bytes: usize) -> Esp32Flash {
    Esp32Flash::new(SimFlash::new(Preset::Esp32.model(bytes).unwrap())).unwrap()
}

fn user(body: &str) -> Record<'_> {
    Record {
        kind: RecordType::User,
        format: BackendFormat::OpenAiCompatible,
        body: body.as_bytes(),
    }
}

/// Appends to 40 sessions in turn until the store first answers `Full`;
/// returns how many appends landed.
fn fill(store: &mut S) -> usize {
    for n in 0..100_000 {
        let id = format!("chat:s{}", n % 40);
        let body = format!("{{\"n\":{n},\"pad\":\"{}\"}}", "p".repeat(300 + n % 97));
        match store.append(&id, &[user(&body)], n % 2 == 1) {
            Ok(_) => {}
            Err(Error::Full { .. }) => return n,
            Err(e) => panic!("append {n}: {e:?}"),
        }
    }
    panic!("the store never filled");
}

#[test]
fn the_reserve_does_not_grow_with_the_session_limit() {
    // ESP-Claw's 150 KiB limit on a 256 KiB partition: refused before
    // (113 of 256 sectors of a 1 MiB partition went to the reserve).
    let mut reserves = Vec::new();
    for limit in [16 * 1024, 150 * 1024] {
        let cfg = Config {
            session_size_limit_bytes: limit,
            ..Config::default()
        };
        let store = S::format(flash(256 * 1024), cfg).unwrap();
        reserves.push(store.space().reserve_sectors);
    }
    assert_eq!(reserves[0], reserves[1], "{reserves:?}");
    // (One of them is the cut slack, format 9: `docs/DESIGN.md`, "Room".)
    assert!(reserves[0] <= 9, "{reserves:?} of 64 sectors");
    // A partition too small for the limit is still refused at format.
    let cfg = Config::default();
    assert!(matches!(
        S::format(flash(128 * 1024), cfg),
        Err(Error::Config(_))
    ));
}

#[test]
fn a_full_store_holds_four_fifths_of_its_partition_in_history() {
    let cfg = Config {
        knowledge_reserve_bytes: Some(0),
        ..Config::default()
    };
    let mut store = S::format(flash(512 * 1024), cfg).unwrap();
    fill(&mut store);
    let mut held = 0u64;
    store
        .for_each_session(|_, info| held += u64::from(info.size_bytes))
        .unwrap();
    let fraction = held as f64 / (512.0 * 1024.0);
    println!("history held at the first Full: {held} B, {fraction:.3} of the partition");
    assert!(fraction >= 0.75, "{fraction:.3}");
}

#[test]
fn a_refused_append_writes_and_erases_nothing() {
    let mut store = S::format(flash(256 * 1024), Config::default()).unwrap();
    fill(&mut store);
    let big = "x".repeat(20_000);
    for k in 0..20 {
        let before = store.flash().flash().stats().clone();
        let r = store.append(&format!("chat:s{}", k % 40), &[user(&big)], true);
        assert!(matches!(r, Err(Error::Full { .. })), "{r:?}");
        let after = store.flash().flash().stats();
        assert_eq!(
            after.programmed_bytes, before.programmed_bytes,
            "append {k}"
        );
        assert_eq!(after.erases, before.erases, "append {k}");
    }
    // And the store it left mounts whole.
    let mut store = S::mount(
        store.into_flash(),
        Config::default(),
        MountMode::ExistingOnly,
    )
    .unwrap();
    store.check().unwrap();
}

#[test]
fn a_store_full_of_history_still_takes_memory_and_profiles() {
    let cfg = Config::default();
    let mut store = S::format(flash(1024 * 1024), cfg).unwrap();
    fill(&mut store);
    let profile = "p".repeat(8 * 1024 - 16);
    for doc in [ProfileDoc::Soul, ProfileDoc::Identity, ProfileDoc::User] {
        store.profile_write(doc, &profile).unwrap();
    }
    let mut ids = Vec::new();
    for n in 0..16 {
        let text = format!("fact {n}: {}", "m".repeat(200));
        let tag = format!("t{n}");
        let stored = store
            .memory_store(&ItemInput::new(&text).tags(&tag), 1000 + n, false)
            .unwrap();
        ids.push(stored.item.id());
    }
    // History is still refused: it may not eat into that room.
    let r = store.append("chat:s0", &[user(&"y".repeat(2000))], false);
    assert!(matches!(r, Err(Error::Full { .. })), "{r:?}");
    // All of it survives a fresh mount.
    let mut store = S::mount(store.into_flash(), cfg, MountMode::ExistingOnly).unwrap();
    let mut buf = vec![0u8; 16 * 1024];
    let n = store.profile_read(ProfileDoc::User, &mut buf).unwrap();
    assert_eq!(&buf[..n], profile.as_bytes());
    for id in ids {
        store.memory_get(id).unwrap();
    }
    store.check().unwrap();
}

#[test]
fn relocating_part_of_a_summarized_session_keeps_every_record() {
    // A session compacted with a summary: its base carries the summary and
    // references the kept records where they are, in older sectors. When
    // the tail reaches them and the session is too large to move whole,
    // relocation carries the bodies of the sectors being released only: the
    // summary, in a newer sector, is referenced between them (the case that
    // stopped collection with "body section holds a referenced record").
    type T = Store<Esp32Flash, 16>;
    let cfg = Config {
        knowledge_reserve_bytes: Some(0),
        ..Config::default()
    };
    let mut store = T::format(flash(256 * 1024), cfg).unwrap();
    let mut want = Vec::new();
    for n in 0..40 {
        let body = format!("{{\"turn\":{n},\"pad\":\"{}\"}}", "a".repeat(1000));
        store.append("chat:a", &[user(&body)], true).unwrap();
        want.push(body);
    }
    let summary = "{\"summary\":\"the first five turns\"}";
    assert!(store
        .compact_with_summary("chat:a", 35, user(summary))
        .unwrap());
    want.drain(..5);
    want.insert(0, summary.to_string());
    let read = |store: &mut T| -> Vec<String> {
        let mut buf = vec![0u8; 128 * 1024];
        let h = store
            .history("chat:a", BackendFormat::OpenAiCompatible, &mut buf)
            .unwrap();
        h.iter()
            .map(|r| String::from_utf8(r.body.to_vec()).unwrap())
            .collect()
    };
    assert_eq!(read(&mut store), want);
    let first_sector = store.space().used_sectors;
    // Other sessions come and go until the ring has turned past it twice.
    let mut written = 0usize;
    let mut n = 0;
    while written < 600 * 1024 {
        let id = format!("chat:b{}", n % 6);
        let body = format!("{{\"n\":{n},\"pad\":\"{}\"}}", "b".repeat(600));
        store.append(&id, &[user(&body)], false).unwrap();
        written += body.len();
        if n % 12 == 11 {
            store
                .delete_session(&format!("chat:b{}", (n / 12) % 6))
                .unwrap();
        }
        n += 1;
    }
    assert!(first_sector > 0);
    assert_eq!(read(&mut store), want);
    store.check().unwrap();
    let mut store = T::mount(store.into_flash(), cfg, MountMode::ExistingOnly).unwrap();
    assert_eq!(read(&mut store), want);
}

/// A fresh mount sees at least the room the running store had: sectors a collection
/// released after the last checkpoint hold nothing live, and the mount
/// releases them too (it learns the tail from the checkpoint). Before, a
/// store remounted nearly full counted them as used and refused writes the
/// running store took (`torture --fill`: "a fresh mount of the uncut flash
/// refuses it too").
#[test]
fn a_remount_frees_the_sectors_collected_since_the_checkpoint() {
    let cfg = Config {
        session_size_limit_bytes: 16 * 1024,
        ..Config::default()
    };
    let mut store = S::format(flash(256 * 1024), cfg).unwrap();
    let landed = fill(&mut store);
    let (mut differed, mut checked, mut oldest) = (0, 0, 0);
    for n in landed..landed + 400 {
        let id = format!("chat:s{}", n % 40);
        let body = format!("{{\"n\":{n},\"pad\":\"{}\"}}", "q".repeat(200 + n % 61));
        match store.append(&id, &[user(&body)], false) {
            Ok(_) => {}
            Err(Error::Full { .. }) => {
                // As a user following the warning: a session goes.
                match store.delete_session(&format!("chat:s{}", oldest % 40)) {
                    Ok(_) | Err(Error::NotFound) => oldest += 1,
                    Err(e) => panic!("delete: {e:?}"),
                }
                continue;
            }
            Err(e) => panic!("append {n}: {e:?}"),
        }
        let running = store.space();
        let fresh = S::mount(store.flash().clone(), cfg, MountMode::ExistingOnly).unwrap();
        checked += 1;
        // (Fewer is fine: a tail sector a delete left with nothing live is
        // released by the mount at once, by the running store when it is
        // next short of room: `a_store_short_of_room_releases_the_dead_tail_as_a_mount_does`.)
        if fresh.space().used_sectors > running.used_sectors {
            differed += 1;
        }
    }
    assert!(checked > 200, "{checked} appends landed");
    assert_eq!(
        differed, 0,
        "{differed} of {checked} fresh mounts counted more sectors in use than the running store"
    );
}

/// A deletion can leave whole sectors at the tail with nothing live. A
/// mount releases them at once; the running store releases them all
/// before it collects (`ensure_room`), so that it decides from the state a
/// remount finds. Before, it released them one by one as it needed room,
/// and weighed the copies the rest of the collection made against the room
/// those dead sectors gave, which a remounted store had already taken: the
/// remounted store refused an append the running store took
/// (`torture --fill --size 1M --cuts 300 --seed 7`, `--cut 8098`: "a fresh
/// mount of the uncut flash refuses it too"). Here each retry after a
/// refusal and a deletion is made on the running store and on a fresh
/// mount of its flash: both answer alike and end with the same sectors in
/// use.
#[test]
fn a_store_short_of_room_releases_the_dead_tail_as_a_mount_does() {
    let cfg = Config {
        session_size_limit_bytes: 16 * 1024,
        ..Config::default()
    };
    let mut store = S::format(flash(256 * 1024), cfg).unwrap();
    // Sessions of 12 appends each, one after another: the oldest holds
    // whole sectors of the tail alone.
    let (mut oldest, mut retries, mut dead_tails) = (0, 0, 0);
    for n in 0..3000 {
        let id = format!("chat:b{}", n / 12);
        let body = format!("{{\"n\":{n},\"pad\":\"{}\"}}", "b".repeat(900 + n % 89));
        match store.append(&id, &[user(&body)], false) {
            Ok(_) => continue,
            Err(Error::Full { .. }) => {}
            Err(e) => panic!("append {n}: {e:?}"),
        }
        store.delete_session(&format!("chat:b{oldest}")).unwrap();
        oldest += 1;
        let mut fresh = S::mount(store.flash().clone(), cfg, MountMode::ExistingOnly).unwrap();
        if fresh.space().used_sectors < store.space().used_sectors {
            dead_tails += 1;
        }
        let running = store.append(&id, &[user(&body)], false);
        let remounted = fresh.append(&id, &[user(&body)], false);
        assert_eq!(
            running.is_ok(),
            remounted.is_ok(),
            "retry of append {n}: running {running:?}, remounted {remounted:?}"
        );
        assert_eq!(
            store.space().used_sectors,
            fresh.space().used_sectors,
            "sectors in use after the retry of append {n}"
        );
        retries += 1;
    }
    assert!(retries > 20, "{retries} retries");
    assert!(
        dead_tails > 10,
        "{dead_tails} deletions left dead tail sectors"
    );
}

/// A delta checkpoint carries the sessions made since the checkpoint before
/// it and the deletions that left them room in the table; a mount applies
/// the deletions first. Before, a store whose full table had sessions
/// replaced since its last full checkpoint did not mount
/// (`TooManySessions`), though the running store held no more sessions
/// than its table.
#[test]
fn a_full_table_whose_sessions_were_replaced_since_the_checkpoint_mounts() {
    type T = Store<Esp32Flash, 16>;
    let cfg = Config {
        session_size_limit_bytes: 16 * 1024,
        ..Config::default()
    };
    let mut store = T::format(flash(256 * 1024), cfg).unwrap();
    // A full table, then a session replaced every tenth append: the deltas
    // (a few sessions each) are smaller than a full checkpoint.
    let mut live: std::collections::VecDeque<usize> = (0..16).collect();
    let mut next = 16;
    for n in 0..16 {
        let body = format!("{{\"n\":{n}}}");
        store
            .append(&format!("chat:r{n}"), &[user(&body)], true)
            .unwrap();
    }
    for n in 0..600 {
        if n % 10 == 0 {
            let old = live.pop_front().unwrap();
            store.delete_session(&format!("chat:r{old}")).unwrap();
            live.push_back(next);
            next += 1;
        }
        let id = format!("chat:r{}", live[live.len() - 1 - n % 2]);
        let body = format!("{{\"n\":{n},\"pad\":\"{}\"}}", "r".repeat(400 + n % 53));
        store.append(&id, &[user(&body)], true).unwrap();
        // Idle time: the checkpoints fall due here.
        store.maintain(16).unwrap();
        let fresh = T::mount(store.flash().clone(), cfg, MountMode::ExistingOnly)
            .unwrap_or_else(|e| panic!("mount after append {n}: {e:?}"));
        assert_eq!(fresh.session_count(), live.len(), "after append {n}");
    }
}

/// The fill workload of `traces/bfcl-multi-turn.jsonl` on 256 KiB (what
/// `torture --fill` runs), with a fresh mount of a copy of the flash after
/// every write (the workload's appends and deletes): none counts more
/// sectors in use than the running store. A full checkpoint that a collection wrote from the sector
/// before the head into the head sector is not the one a mount loads (the
/// head walk finds only checkpoints that begin in the head sector, and the
/// head's header names the one before); the mount's scan meets it and takes
/// it as the newest full one. Before, the older full checkpoint's sector,
/// which the running store had collected, stayed in use after a remount
/// (`torture --fill --size 256K --cuts 200`, `--cut 1900`: "a fresh mount
/// of the uncut flash refuses it too").
#[test]
fn no_fresh_mount_on_the_fill_workload_counts_more_sectors_in_use() {
    use std::cell::RefCell;
    use std::rc::Rc;
    let trace = clawmem_sim::Trace::from_path(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../traces/bfcl-multi-turn.jsonl"
    ))
    .unwrap();
    let model = Preset::Esp32.model(256 * 1024).unwrap();
    let mut d = ClawmemDriver::<Esp32Flash, 128>::format(SimFlash::new(model)).unwrap();
    let cfg = *d.config();
    // (mounts made, (mount, used sectors fresh, running) where more)
    let seen = Rc::new(RefCell::new((0usize, Vec::new())));
    let log = Rc::clone(&seen);
    d.after_each_write(Box::new(move |store| {
        let running = store.space().used_sectors;
        let fresh =
            Store::<Esp32Flash, 128>::mount(store.flash().clone(), cfg, MountMode::ExistingOnly)
                .unwrap_or_else(|e| panic!("fresh mount {}: {e:?}", log.borrow().0));
        let mut l = log.borrow_mut();
        let n = l.0;
        if fresh.space().used_sectors > running {
            l.1.push((n, fresh.space().used_sectors, running));
        }
        l.0 += 1;
    }));
    let run = clawmem_sim::fill::fill(
        &mut d,
        &trace,
        &clawmem_sim::ReplayOptions::default(),
        &mut |_, _| {},
    );
    assert!(run.fill.reached_full, "the workload never filled the store");
    let (checked, differed) = &*seen.borrow();
    assert!(*checked > 1000, "{checked} fresh mounts");
    assert!(
        differed.is_empty(),
        "{} of {checked} fresh mounts counted more sectors in use than the running store (used sectors, fresh against running, by mount: {:?})",
        differed.len(),
        &differed[..differed.len().min(8)]
    );
}
