//! The JSON replies of ESP-Claw's memory tools, byte for byte (issue 13,
//! item 6): clawmem's `write_memory_recall_json`, `write_memory_list_json`
//! and `write_memory_reply_json` against an oracle that builds each reply
//! with the real cJSON, making the calls ESP-Claw's memory capability makes
//! (`cap_memory_render_result`, `cap_memory_render_invalid_summary_labels`,
//! `claw_memory_item_to_json`; `sim/tests/cjson/memory_replies.c`).
//!
//! The oracle is fed what the engine's plain API says (the items a recall
//! or list gives, the catalog's order, the labels in list order), so each
//! test checks the JSON writer's shape, key order, escaping and numbers,
//! and which items and labels it writes. `scripts/test-all.sh` installs
//! cJSON (Debian's `libcjson-dev`).

use std::io::Write as _;
use std::path::PathBuf;
use std::process::{Command, Stdio};
use std::sync::OnceLock;

use clawmem::memory::{write_memory_reply_json, Item, ItemInput, MemoryAction, RecallReply};
use clawmem::{Config, Error, MountMode, Store};
use clawmem_sim::{Esp32Flash, Preset, SimFlash};
use serde_json::{json, Value};

type S = Store<Esp32Flash, 8>;

/// The oracle, compiled once per test run.
fn oracle() -> &'static PathBuf {
    static ORACLE: OnceLock<PathBuf> = OnceLock::new();
    ORACLE.get_or_init(|| {
        let src = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/cjson/memory_replies.c");
        let out = PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join("cjson-memory-replies");
        let status = Command::new("cc")
            .args(["-std=c99", "-Wall", "-Wextra", "-Werror", "-o"])
            .arg(&out)
            .arg(&src)
            .arg("-lcjson")
            .status()
            .expect("running cc");
        assert!(
            status.success(),
            "the cJSON oracle did not build: install libcjson-dev (scripts/test-all.sh does)"
        );
        out
    })
}

/// What cJSON prints for `input` (see the oracle's header).
fn cjson(input: &Value) -> String {
    let mut child = Command::new(oracle())
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    child
        .stdin
        .take()
        .unwrap()
        .write_all(input.to_string().as_bytes())
        .unwrap();
    let out = child.wait_with_output().unwrap();
    assert!(out.status.success(), "the oracle refused {input}");
    String::from_utf8(out.stdout).unwrap()
}

/// A store with items whose fields need every kind of escape, times past
/// `i32::MAX` (cJSON prints those another way), labels shared between
/// items, an item without tags, and access counts from earlier recalls.
/// Built the same way every time, so two stores built by it are equal.
fn store() -> S {
    let flash = Esp32Flash::new(SimFlash::new(Preset::Esp32.model(64 * 4096).unwrap())).unwrap();
    let mut s = S::format(flash, Config::default()).unwrap();
    let inputs = [
        ItemInput::new("User likes green tea")
            .tags("drinks, tea")
            .keywords("green tea"),
        ItemInput::new("User said \"call me Ada\"\nand left\tearly").tags("name"),
        ItemInput::new("Back\\slash, slash / and a bell \u{7} in 中文 text").tags("misc, drinks"),
        ItemInput::new("User walks every morning at seven").tags("daily_routine"),
        ItemInput::new("No tags on this one at all"),
        ItemInput::new("User is vegan and dislikes mushrooms").tags("diet, health, food"),
    ];
    for (k, input) in inputs.iter().enumerate() {
        let now = 4_000_000_000 + 100 * k as u32;
        s.memory_store(
            &input.source(if k == 3 { "auto_llm" } else { "" }),
            now,
            false,
        )
        .unwrap();
    }
    s.memory_recall(&["drinks"], 0, 4_000_001_000, |_| {})
        .unwrap();
    s.memory_recall(&["name"], 1, 4_000_001_100, |_| {})
        .unwrap();
    s
}

/// The labels' 1-based places in the catalog.
fn places(s: &mut S) -> Vec<String> {
    let mut labels = Vec::new();
    s.memory_catalog(|l, _| labels.push(l.to_string())).unwrap();
    labels
}

fn item_input(item: &Item, catalog: &[String]) -> Value {
    let ids: Vec<usize> = item
        .labels()
        .iter()
        .map(|l| 1 + catalog.iter().position(|c| c == l.as_str()).unwrap())
        .collect();
    let labels: Vec<&str> = item.labels().iter().map(|l| l.as_str()).collect();
    json!({
        "id": item.id().to_string(),
        "source": item.source(),
        "content": item.content(),
        "tags": item.tags(),
        "keywords": item.keywords(),
        "created_at": item.created_at(),
        "updated_at": item.updated_at(),
        "access_count": item.access_count(),
        "summary_ids": ids,
        "summary_labels": labels,
    })
}

fn items_reply(action: &str, changed: bool, items: &[Item], catalog: &[String]) -> String {
    let items: Vec<Value> = items.iter().map(|i| item_input(i, catalog)).collect();
    cjson(&json!({"reply": "items", "action": action, "changed": changed, "items": items}))
}

#[test]
fn cap_memory_recall_execute_replies_as_cjson_prints_it() {
    for (labels, limit) in [
        (&["drinks"][..], 0),
        (&["tea", "", "name", "diet", "nope"][..], 2),
        (&[][..], 0),
        (&[""][..], 3),
        (&["food"][..], 100),
    ] {
        let mut a = store();
        let mut got = String::new();
        let reply = a
            .write_memory_recall_json(&mut got, labels, limit, 4_000_002_000)
            .unwrap();
        // The same recall through the plain API, on an equal store.
        let mut b = store();
        let mut items = Vec::new();
        b.memory_recall(labels, limit, 4_000_002_000, |i| items.push(i.clone()))
            .unwrap();
        let catalog = places(&mut b);
        assert_eq!(reply, RecallReply::Items(items.len()), "{labels:?}");
        assert_eq!(
            got,
            items_reply("memory_recall", true, &items, &catalog),
            "{labels:?} {limit}"
        );
        // Both wrote the same access record.
        assert_eq!(
            a.flash().flash().stats().programmed_bytes,
            b.flash().flash().stats().programmed_bytes
        );
    }
}

#[test]
fn cap_memory_list_execute_replies_as_cjson_prints_it() {
    let mut a = store();
    let mut got = String::new();
    let n = a.write_memory_list_json(&mut got).unwrap();
    let mut items = Vec::new();
    a.memory_list(|i| items.push(i.clone())).unwrap();
    let catalog = places(&mut a);
    assert_eq!(n, 6);
    assert_eq!(got, items_reply("memory_list", false, &items, &catalog));
    // An empty store, and more items than one catalog pass places.
    let flash = Esp32Flash::new(SimFlash::new(Preset::Esp32.model(64 * 4096).unwrap())).unwrap();
    let mut empty = S::format(flash, Config::default()).unwrap();
    let mut got = String::new();
    assert_eq!(empty.write_memory_list_json(&mut got).unwrap(), 0);
    assert_eq!(got, items_reply("memory_list", false, &[], &[]));
    for k in 0..20u32 {
        a.memory_store(
            &ItemInput::new(&format!("Fact number {k} about topic {}", k % 7))
                .tags(&format!("topic_{}, fact_{k}", k % 7)),
            4_100_000_000 + k,
            false,
        )
        .unwrap();
    }
    let mut got = String::new();
    assert_eq!(a.write_memory_list_json(&mut got).unwrap(), 26);
    let mut items = Vec::new();
    a.memory_list(|i| items.push(i.clone())).unwrap();
    let catalog = places(&mut a);
    assert_eq!(got, items_reply("memory_list", false, &items, &catalog));
}

#[test]
fn cap_memory_render_invalid_summary_labels_lists_the_labels_in_list_order() {
    let mut a = store();
    let before = a.flash().flash().stats().programmed_bytes;
    let mut got = String::new();
    // The first unknown label of the first three non-empty ones.
    let reply = a
        .write_memory_recall_json(
            &mut got,
            &["", "drinks", "diet\"ary", "nope", "later"],
            0,
            1,
        )
        .unwrap();
    assert_eq!(reply, RecallReply::InvalidLabel);
    assert_eq!(
        a.flash().flash().stats().programmed_bytes,
        before,
        "an invalid recall wrote"
    );
    // ESP-Claw's catalog for this check: the labels of `claw_memory_list`'s
    // items, in list order, each once.
    let mut available: Vec<String> = Vec::new();
    a.memory_list(|i| {
        for l in i.labels() {
            if !available.iter().any(|x| x == l.as_str()) {
                available.push(l.to_string());
            }
        }
    })
    .unwrap();
    assert_ne!(
        available,
        places(&mut a),
        "list order is not catalog order here"
    );
    let want = cjson(&json!({
        "reply": "invalid",
        "invalid_label": "diet\"ary",
        "available": available,
    }));
    assert_eq!(got, want);
    // With no items, every label is unknown and the list is empty.
    let flash = Esp32Flash::new(SimFlash::new(Preset::Esp32.model(64 * 4096).unwrap())).unwrap();
    let mut empty = S::format(flash, Config::default()).unwrap();
    let mut got = String::new();
    let reply = empty
        .write_memory_recall_json(&mut got, &["x"], 0, 1)
        .unwrap();
    assert_eq!(reply, RecallReply::InvalidLabel);
    let want = cjson(&json!({"reply": "invalid", "invalid_label": "x", "available": []}));
    assert_eq!(got, want);
}

#[test]
fn cap_memory_store_update_forget_execute_reply_as_cjson_prints_it() {
    let mut s = store();
    let check = |action: MemoryAction, item: &Item, changed: bool| {
        let mut got = String::new();
        write_memory_reply_json(&mut got, action, item, changed).unwrap();
        let want = cjson(&json!({
            "reply": "write",
            "action": action.name(),
            "changed": changed,
            "memory_id": item.id().to_string(),
            "summary": item.labels().first().map_or("", |l| l.as_str()),
        }));
        assert_eq!(got, want);
    };
    let stored = s
        .memory_store(
            &ItemInput::new("User plays chess on Sundays").tags("hobby"),
            5,
            false,
        )
        .unwrap();
    check(MemoryAction::Store, &stored.item, stored.changed);
    let dup = s
        .memory_store(&ItemInput::new("user plays chess on sundays!"), 6, false)
        .unwrap();
    assert!(!dup.changed);
    check(MemoryAction::Store, &dup.item, dup.changed);
    let updated = s
        .memory_update(
            stored.item.id(),
            &ItemInput::new("User plays go on Sundays"),
            7,
        )
        .unwrap()
        .unwrap();
    check(MemoryAction::Update, &updated.item, updated.changed);
    let forgotten = s.memory_forget(updated.item.id()).unwrap();
    check(MemoryAction::Forget, &forgotten, true);
    // An item without labels has no "summary".
    let bare = s
        .memory_store(&ItemInput::new("No tags here either, none"), 8, false)
        .unwrap();
    assert!(bare.item.labels().is_empty());
    check(MemoryAction::Store, &bare.item, true);
}

/// A writer that refuses everything.
struct Refuse;

impl std::fmt::Write for Refuse {
    fn write_str(&mut self, _: &str) -> std::fmt::Result {
        Err(std::fmt::Error)
    }
}

#[test]
fn a_failing_writer_is_an_error_and_the_store_stays_whole() {
    let mut s = store();
    assert!(matches!(
        s.write_memory_list_json(&mut Refuse),
        Err(Error::InvalidInput(_))
    ));
    assert!(matches!(
        s.write_memory_recall_json(&mut Refuse, &["drinks"], 0, 9),
        Err(Error::InvalidInput(_))
    ));
    let flash = s.into_flash();
    let mut s = S::mount(flash, Config::default(), MountMode::ExistingOnly).unwrap();
    assert_eq!(s.memory_len().unwrap(), 6);
    s.check().unwrap();
}
