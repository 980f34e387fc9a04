//! `export` and `import` against ESP-Claw's own rules (issue 13, items 7
//! and 9). Each test is named after the ESP-Claw C function whose rule it
//! checks (`claw_memory_storage.c`, `claw_memory_cap.c`, `claw_memory.c` at
//! commit 9354591b; `claw_session_mgr.c`).

use std::collections::BTreeMap;
use std::fs;
use std::path::{Path, PathBuf};

use clawmem::memory::ItemInput;
use clawmem::{Config, Store};
use clawmem_sim::espclaw;
use clawmem_sim::espfiles::{
    self, export_image, export_store, import_dir, import_to_image, ImportOptions,
};
use clawmem_sim::{replay_clawmem, Esp32Flash, Preset, ReplayOptions, SimFlash, Trace};
use serde_json::Value;

type S = Store<Esp32Flash, 64>;

fn fresh() -> S {
    let flash = Esp32Flash::new(SimFlash::new(Preset::Esp32.model(1024 * 1024).unwrap())).unwrap();
    S::format(flash, Config::default()).unwrap()
}

fn replayed_image(dir: &Path, name: &str) -> PathBuf {
    let trace = Trace::from_path(
        PathBuf::from(env!("CARGO_MANIFEST_DIR"))
            .join("../traces")
            .join(name),
    )
    .unwrap();
    let path = dir.join(format!("{name}.img"));
    let opts = ReplayOptions {
        image: Some(path.clone()),
        ..ReplayOptions::default()
    };
    replay_clawmem(&trace, &opts, &mut |_, _| {}).unwrap();
    path
}

/// Every file under `dir`, by relative path.
fn tree(dir: &Path) -> BTreeMap<String, Vec<u8>> {
    fn walk(root: &Path, at: &Path, out: &mut BTreeMap<String, Vec<u8>>) {
        for e in fs::read_dir(at).unwrap() {
            let p = e.unwrap().path();
            if p.is_dir() {
                walk(root, &p, out);
            } else {
                let rel = p.strip_prefix(root).unwrap().to_string_lossy().into_owned();
                out.insert(rel, fs::read(&p).unwrap());
            }
        }
    }
    let mut out = BTreeMap::new();
    walk(dir, dir, &mut out);
    out
}

fn records(dir: &Path) -> Vec<Value> {
    fs::read_to_string(dir.join(espfiles::RECORDS_FILE))
        .unwrap()
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect()
}

/// ESP-Claw's loader and its users, applied to an exported `memory/`:
/// `claw_memory_load_index` (an object; `summary_id`, `label` and
/// `ref_count` per summary, a missing id or count reading as 0),
/// `claw_memory_find_summary_by_id` (every record's `summary_ids`
/// resolve), `claw_memory_find_summary_by_label` (a recall by each label
/// finds the items carrying it), `claw_memory_ensure_summary_label` (the
/// next id is past every id, so a new label cannot take an old id),
/// `claw_memory_adjust_summary_stats` (the counts are the active items'),
/// `claw_memory_collect_summary_labels` (each item's ids are those of the
/// labels its tags give, so a compaction on the device changes nothing),
/// `claw_memory_apply_digest_recall_deltas` (the digest offset is within
/// the digest). Returns the problems found.
fn esp_claw_loader_problems(dir: &Path) -> Vec<String> {
    let mut problems = Vec::new();
    let index: Value =
        match serde_json::from_slice(&fs::read(dir.join(espfiles::INDEX_FILE)).unwrap()) {
            Ok(v) => v,
            Err(e) => return vec![format!("not JSON: {e}")],
        };
    if !index.is_object() {
        return vec!["not an object".into()];
    }
    if index["version"] != 3 {
        problems.push(format!("version {}", index["version"]));
    }
    let summaries = index["summaries"].as_array().cloned().unwrap_or_default();
    if !index["summaries"].is_array() {
        problems.push("no summaries array".into());
    }
    let mut by_id: BTreeMap<i64, (String, i64)> = BTreeMap::new();
    for s in &summaries {
        let label = s["label"].as_str().unwrap_or("");
        // The loader: `summary_id` and `ref_count`, 0 when missing.
        let id = s.get("summary_id").and_then(Value::as_i64).unwrap_or(0);
        let refs = s.get("ref_count").and_then(Value::as_i64).unwrap_or(0);
        if label.is_empty() {
            problems.push("a summary without label (dropped by the loader)".into());
        }
        if id <= 0 {
            problems.push(format!("label {label:?} reads as summary_id {id}"));
        }
        if label.chars().count() > espclaw::MAX_LABEL_CHARS {
            problems.push(format!("label {label:?} longer than 8 characters"));
        }
        if by_id.insert(id, (label.to_string(), refs)).is_some() {
            problems.push(format!("summary_id {id} twice"));
        }
    }
    let labels: Vec<&str> = summaries
        .iter()
        .filter_map(|s| s["label"].as_str())
        .collect();
    for (n, l) in labels.iter().enumerate() {
        if labels[..n].contains(l) {
            problems.push(format!("label {l:?} twice"));
        }
    }
    match index.get("next_summary_id").and_then(Value::as_i64) {
        Some(next) if by_id.keys().all(|id| *id < next) => {}
        other => problems.push(format!("next_summary_id {other:?} not past every id")),
    }
    let digest = fs::read(dir.join(espfiles::DIGEST_FILE)).map_or(0, |d| d.len()) as i64;
    match index
        .get("last_compact_digest_size")
        .and_then(Value::as_i64)
    {
        Some(n) if n <= digest => {}
        other => problems.push(format!(
            "last_compact_digest_size {other:?} past the digest ({digest} B)"
        )),
    }
    let recs = records(dir);
    let mut counted: BTreeMap<i64, i64> = BTreeMap::new();
    for r in &recs {
        let ids: Vec<i64> = r["summary_ids"]
            .as_array()
            .unwrap()
            .iter()
            .map(|v| v.as_i64().unwrap())
            .collect();
        for id in &ids {
            if !by_id.contains_key(id) {
                problems.push(format!(
                    "record {} names summary_id {id}, not in the index",
                    r["id"]
                ));
            }
            *counted.entry(*id).or_default() += 1;
        }
        let want: Vec<i64> = espclaw::collect_summary_labels(r["tags"].as_str().unwrap())
            .iter()
            .map(|l| {
                by_id
                    .iter()
                    .find(|(_, (label, _))| label == l)
                    .map_or(-1, |(id, _)| *id)
            })
            .collect();
        if want != ids {
            problems.push(format!(
                "record {}: summary_ids {ids:?}, its tags give {want:?}",
                r["id"]
            ));
        }
    }
    for (id, (label, refs)) in &by_id {
        let n = counted.get(id).copied().unwrap_or(0);
        if *refs != n {
            problems.push(format!(
                "label {label:?}: ref_count {refs}, {n} items carry it"
            ));
        }
        if n == 0 {
            problems.push(format!("recall by {label:?} finds nothing"));
        }
    }
    let ids: Vec<&str> = recs.iter().filter_map(|r| r["id"].as_str()).collect();
    match index["keyword_index"].as_object() {
        Some(kw) => {
            for (term, v) in kw {
                for id in v.as_array().into_iter().flatten() {
                    if !id.as_str().is_some_and(|i| ids.contains(&i)) {
                        problems.push(format!("keyword {term:?} names {id}, not an active item"));
                    }
                }
            }
        }
        None => problems.push("no keyword_index object".into()),
    }
    problems
}

/// Item 7: ESP-Claw's loader reads the exported index: its field names,
/// version, ids and reference counts (the export before this wrote `id`,
/// `refs` and `keywords`, which the loader reads as id 0).
#[test]
fn claw_memory_load_index_reads_the_exported_index() {
    let tmp = tempfile::tempdir().unwrap();
    let image = replayed_image(tmp.path(), "bfcl-memory.jsonl");
    let dir = tmp.path().join("out");
    let out = export_image(&image, Preset::Esp32, &dir).unwrap();
    assert!(out.memory_items > 100 && out.labels > 10, "{out:?}");
    let problems = esp_claw_loader_problems(&dir);
    assert!(problems.is_empty(), "{problems:#?}");
    // The file as ESP-Claw's compaction prints it: unformatted, fields in
    // its order.
    let text = fs::read_to_string(dir.join(espfiles::INDEX_FILE)).unwrap();
    assert!(
        text.starts_with("{\"version\":3,\"summaries\":[{\"summary_id\":1,\"label\":"),
        "{text}"
    );
    assert!(
        text.contains(",\"next_summary_id\":")
            && text.ends_with(",\"last_compact_digest_size\":0}")
    );
    assert_eq!(fs::read(dir.join(espfiles::DIGEST_FILE)).unwrap(), b"");
    // The old shape is what the loader refuses.
    let old = r#"{"version":3,"summaries":[{"id":1,"label":"food","refs":1}],"keywords":{}}"#;
    fs::write(dir.join(espfiles::INDEX_FILE), old).unwrap();
    assert!(!esp_claw_loader_problems(&dir).is_empty());
}

/// Item 7: labels are ESP-Claw's (`claw_memory_collect_summary_labels`):
/// cut to 8 characters, two that agree on those become one label with the
/// summed count, and the report names every cut; import gives clawmem's
/// long labels back from the tags.
#[test]
fn claw_memory_collect_summary_labels_cuts_long_labels_on_export() {
    let mut store = fresh();
    for (content, tags) in [
        ("The user is vegetarian", "dietary_preferences"),
        ("The user avoids gluten", "dietary_restrictions"),
        ("The user likes green tea", "food"),
        ("The user prefers short answers", "answer style, food"),
    ] {
        store
            .memory_store(&ItemInput::new(content).tags(tags), 1_760_000_000, false)
            .unwrap();
    }
    let tmp = tempfile::tempdir().unwrap();
    let out = export_store(&mut store, tmp.path()).unwrap();
    assert_eq!(out.labels, 3, "{out:?}");
    assert_eq!(
        out.labels_cut,
        [
            "\"dietary_preferences\" -> \"dietary_\"",
            "\"dietary_restrictions\" -> \"dietary_\"",
            "\"answer style\" -> \"answer s\""
        ]
    );
    let index: Value =
        serde_json::from_slice(&fs::read(tmp.path().join(espfiles::INDEX_FILE)).unwrap()).unwrap();
    assert_eq!(
        index["summaries"],
        serde_json::json!([
            {"summary_id": 1, "label": "dietary_", "ref_count": 2},
            {"summary_id": 2, "label": "food", "ref_count": 2},
            {"summary_id": 3, "label": "answer s", "ref_count": 1},
        ])
    );
    assert_eq!(index["next_summary_id"], 4);
    let recs = records(tmp.path());
    assert_eq!(recs[3]["summary_ids"], serde_json::json!([3, 2]));
    assert_eq!(recs[3]["summary_labels"], serde_json::json!([]));
    assert!(esp_claw_loader_problems(tmp.path()).is_empty());

    let mut back = fresh();
    let r = import_dir(tmp.path(), &mut back, &ImportOptions::default()).unwrap();
    assert!(r.warnings.is_empty(), "{:?}", r.warnings);
    let mut labels = Vec::new();
    back.memory_catalog(|l, n| labels.push((l.to_string(), n)))
        .unwrap();
    labels.sort();
    assert_eq!(
        labels,
        [
            ("answer style".to_string(), 1),
            ("dietary_preferences".to_string(), 1),
            ("dietary_restrictions".to_string(), 1),
            ("food".to_string(), 2)
        ]
    );
}

/// A small ESP-Claw memory directory (one record) with this index text.
fn memory_dir(root: &Path, index: &str) {
    fs::create_dir_all(root.join("memory")).unwrap();
    let line = r#"{"id":"mem-1760000000-0001","source":"manual","content":"The user likes green tea","tags":"food","keywords":"tea","created_at":1760000000,"updated_at":1760000000,"access_count":1,"deleted":false,"summary_ids":[4]}"#;
    fs::write(root.join(espfiles::RECORDS_FILE), format!("{line}\n")).unwrap();
    fs::write(root.join(espfiles::INDEX_FILE), index).unwrap();
}

/// Item 7: import reads the index in ESP-Claw's shape and in the shape
/// clawmem's export wrote before, and names what ESP-Claw's loader
/// (`claw_memory_load_index`) would read as 0.
#[test]
fn claw_memory_load_index_old_and_new_shapes_import() {
    let tmp = tempfile::tempdir().unwrap();
    let cases = [
        (
            "new",
            r#"{"version":3,"summaries":[{"summary_id":4,"label":"food","ref_count":1}],"keyword_index":{"tea":["mem-1760000000-0001"]},"next_summary_id":5,"last_compact_digest_size":0}"#,
            Some(espclaw::IndexShape::EspClaw),
            "",
        ),
        (
            "old",
            "{\n  \"version\": 3,\n  \"summaries\": [\n    {\n      \"id\": 4,\n      \"label\": \"food\",\n      \"refs\": 1\n    }\n  ],\n  \"keywords\": {\n    \"tea\": [\"mem-1\"]\n  }\n}",
            Some(espclaw::IndexShape::OldClawmem),
            "",
        ),
        (
            "no-id",
            r#"{"version":3,"summaries":[{"label":"food","ref_count":1}],"keyword_index":{},"next_summary_id":2}"#,
            Some(espclaw::IndexShape::EspClaw),
            "summary \"food\" has no \"summary_id\" (reads as 0)",
        ),
        (
            "unknown-id",
            r#"{"version":3,"summaries":[{"summary_id":9,"label":"food","ref_count":1}],"keyword_index":{},"next_summary_id":10}"#,
            Some(espclaw::IndexShape::EspClaw),
            "names summary id 4, which",
        ),
        ("not-json", "{\"version\":3,", None, "line 1 column 13"),
        ("array", "[]", None, "not a JSON object"),
    ];
    for (name, index, shape, warning) in cases {
        let dir = tmp.path().join(name);
        memory_dir(&dir, index);
        let mut store = fresh();
        let r = import_dir(&dir, &mut store, &ImportOptions::default()).unwrap();
        assert_eq!(r.index_shape, shape, "{name}");
        assert_eq!(r.memory_stored, 1, "{name}");
        if warning.is_empty() {
            assert!(r.warnings.is_empty(), "{name}: {:?}", r.warnings);
        } else {
            assert!(
                r.warnings
                    .iter()
                    .any(|w| w.contains("memory_index.json") && w.contains(warning)),
                "{name}: {:?}",
                r.warnings
            );
        }
    }
}

/// `claw_memory_apply_digest_recall_deltas`: the recalls logged since the
/// last compaction (from `last_compact_digest_size` on) count on import.
#[test]
fn claw_memory_apply_digest_recall_deltas_on_import() {
    let tmp = tempfile::tempdir().unwrap();
    let before = "1760000050\trecall\tmem-1760000000-0001\taccess_count+1\n";
    let index = format!(
        r#"{{"version":3,"summaries":[{{"summary_id":4,"label":"food","ref_count":1}}],"keyword_index":{{}},"next_summary_id":5,"last_compact_digest_size":{}}}"#,
        before.len()
    );
    memory_dir(tmp.path(), &index);
    let digest = format!(
        "{before}1760000100\trecall\tmem-1760000000-0001\taccess_count+1\n1760000200\tstore\tmem-1760000000-0001\n1760000300\trecall\tmem-1760000000-0001\taccess_count+1\n1760000400\trecall\tmem-gone\taccess_count+1\n"
    );
    fs::write(tmp.path().join(espfiles::DIGEST_FILE), digest).unwrap();
    let mut store = fresh();
    let r = import_dir(tmp.path(), &mut store, &ImportOptions::default()).unwrap();
    assert_eq!(r.digest_recalls, 2);
    let mut got = Vec::new();
    store
        .memory_list(|i| got.push((i.access_count(), i.updated_at())))
        .unwrap();
    assert_eq!(got, [(3, 1_760_000_300)]);
}

/// Items 7 and 9: `export -> import -> export` is byte-identical for every
/// file, and the first export differs from the second only by the memory
/// item ids a store hands out afresh (so only in the three memory files).
#[test]
fn claw_memory_compact_internal_export_import_export_is_byte_identical() {
    let tmp = tempfile::tempdir().unwrap();
    let image = replayed_image(tmp.path(), "bfcl-memory.jsonl");
    let (a, b, c) = (
        tmp.path().join("a"),
        tmp.path().join("b"),
        tmp.path().join("c"),
    );
    export_image(&image, Preset::Esp32, &a).unwrap();
    let img2 = tmp.path().join("2.img");
    import_to_image(&a, &img2, Preset::Esp32, None, &ImportOptions::default()).unwrap();
    export_image(&img2, Preset::Esp32, &b).unwrap();
    let img3 = tmp.path().join("3.img");
    import_to_image(&b, &img3, Preset::Esp32, None, &ImportOptions::default()).unwrap();
    export_image(&img3, Preset::Esp32, &c).unwrap();
    let (ta, tb, tc) = (tree(&a), tree(&b), tree(&c));
    assert_eq!(tb.keys().collect::<Vec<_>>(), tc.keys().collect::<Vec<_>>());
    for (name, bytes) in &tb {
        assert!(bytes == &tc[name], "{name} differs between exports 2 and 3");
    }
    assert_eq!(ta.keys().collect::<Vec<_>>(), tb.keys().collect::<Vec<_>>());
    for (name, bytes) in &ta {
        if ![
            espfiles::RECORDS_FILE,
            espfiles::INDEX_FILE,
            espfiles::MEMORY_MD_FILE,
        ]
        .contains(&name.as_str())
        {
            assert!(bytes == &tb[name], "{name} differs between exports 1 and 2");
        }
    }
}
