//! `export` and `import` against ESP-Claw's own rules (issue 13, items 7
//! and 9). Each test is named after the ESP-Claw C function whose rule it
//! checks (`claw_memory_storage.c`, `claw_memory_cap.c`, `claw_memory.c` at
//! commit 9354591b; `claw_session_mgr.c`).

use std::collections::BTreeMap;
use std::fs;
use std::path::{Path, PathBuf};

use clawmem::chat::ChatKey;
use clawmem::chdx;
use clawmem::memory::ItemInput;
use clawmem::naming;
use clawmem::{BackendFormat, Config, MountMode, RecordType, Store, MAX_SESSION_ID_BYTES};
use clawmem_sim::espclaw::{self, ChatMapFile, SubagentMapFile};
use clawmem_sim::espfiles::{
    self, export_image, export_store, import_dir, import_to_image, sidecar_path, ImportOptions,
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

// ---- item 9: the session manager's maps -------------------------------------

/// `claw_session_mgr_build_mapping_path` and
/// `claw_session_mgr_build_subagent_mapping_path_locked`: ASCII letters and
/// digits kept, each run of other bytes one `_`, a trailing `_` dropped,
/// cut to 24 bytes, `default` / `parent` when nothing is left, FNV-1a of
/// the whole key (hashes computed independently of clawmem).
#[test]
fn claw_session_mgr_build_mapping_path_names_the_maps() {
    assert_eq!(
        espclaw::chat_map_file_name("chat:telegram:42"),
        "chat_chat_telegram_42_a0f9b888.json"
    );
    assert_eq!(
        espclaw::chat_map_file_name("agent:2:chat:feishu:oc_5f2d7c1e9a8b4c3d"),
        "chat_agent_2_chat_feishu_oc_5_3d192200.json"
    );
    assert_eq!(
        espclaw::chat_map_file_name("::"),
        "chat_default_980630f5.json"
    );
    assert_eq!(
        espclaw::subagent_map_file_name("::"),
        "subagents_parent_980630f5.json"
    );
    assert_eq!(
        espclaw::subagent_map_file_name("chat:feishu:oc_5f2d7c1e9a8b4c3d:work"),
        "subagents_chat_feishu_oc_5f2d7c1e9_68c724ee.json"
    );
}

const FEISHU: &str = "chat:feishu:oc_5f2d7c1e9a8b4c3d";
const AGENT: &str = "agent:2:chat:telegram:1234567890";
const PARENT: &str = "chat:feishu:oc_5f2d7c1e9a8b4c3d:work";

/// A chat key of `n` bytes (for ids longer than the engine takes).
fn long_key(n: usize) -> String {
    let mut k = String::from("chat:feishu:oc_");
    while k.len() < n {
        k.push('7');
    }
    k
}

fn write_session(root: &Path, id: &str, texts: &[&str]) {
    let mut log = Vec::new();
    let mut idx = chdx::encode_header().to_vec();
    for (n, t) in texts.iter().enumerate() {
        let (body, kind) = if n % 2 == 0 {
            (
                format!("{{\"role\":\"user\",\"content\":\"{t}\"}}"),
                RecordType::User,
            )
        } else {
            (
                format!("{{\"role\":\"assistant\",\"content\":\"{t}\"}}"),
                RecordType::AssistantFinal,
            )
        };
        let e = chdx::Entry::for_body(
            log.len() as u32,
            body.len(),
            kind,
            BackendFormat::OpenAiCompatible,
        )
        .unwrap();
        idx.extend_from_slice(&e.encode());
        log.extend_from_slice(body.as_bytes());
        log.push(b'\n');
    }
    let stem = naming::session_stem(id);
    fs::write(root.join(format!("sessions/{stem}.log")), &log).unwrap();
    fs::write(root.join(format!("sessions/{stem}.log.idx")), &idx).unwrap();
}

/// An ESP-Claw device's `sessions/` as its session manager and memory
/// write them: two chats with maps (ids of 36 to 48 bytes, longer than a
/// file name keeps), a subagent map with two children, a chat whose ids
/// are longer than the engine's 64 bytes, and one session no map names.
fn device_dir(root: &Path) {
    fs::create_dir_all(root.join("sessions/chat_map")).unwrap();
    fs::create_dir_all(root.join("sessions/subagent_map")).unwrap();
    let long = long_key(150);
    let maps = [
        (FEISHU, "work", vec!["default_01", "work", "trip-2026"]),
        (AGENT, "default_01", vec!["notes", "default_01"]),
        (long.as_str(), "default_01", vec!["default_01"]),
    ];
    for (key, current, aliases) in &maps {
        let list: Vec<String> = aliases.iter().map(|a| format!("\"{a}\"")).collect();
        let text = format!(
            "{{\"chat_key\":\"{key}\",\"current_alias\":\"{current}\",\"sessions\":[{}]}}",
            list.join(",")
        );
        fs::write(
            root.join("sessions/chat_map")
                .join(espclaw::chat_map_file_name(key)),
            text,
        )
        .unwrap();
    }
    let sub = format!(
        "{{\"parent_session_id\":\"{PARENT}\",\"next_suffix\":3,\"child_ids\":[\"{PARENT}:subagent_01\",\"{PARENT}:subagent_02\"]}}"
    );
    fs::write(
        root.join("sessions/subagent_map")
            .join(espclaw::subagent_map_file_name(PARENT)),
        sub,
    )
    .unwrap();
    write_session(root, &format!("{FEISHU}:default_01"), &["hi", "hello"]);
    write_session(root, PARENT, &["plan the week", "done"]);
    write_session(root, &format!("{PARENT}:subagent_01"), &["step 1", "ok"]);
    write_session(root, &format!("{PARENT}:subagent_02"), &["step 2"]);
    write_session(root, &format!("{AGENT}:notes"), &["note", "kept"]);
    write_session(root, &format!("{AGENT}:default_01"), &["x"]);
    write_session(root, &format!("{long}:default_01"), &["long id", "stored"]);
    write_session(root, "trigger:scheduler:daily-report-2026-12-01", &["run"]);
}

fn mount(image: &Path) -> Store<Esp32Flash, 128> {
    let bytes = fs::read(image).unwrap();
    let model = Preset::Esp32.model(bytes.len()).unwrap();
    let flash = Esp32Flash::new(SimFlash::from_image(&model, &bytes).unwrap()).unwrap();
    Store::mount(flash, Config::default(), MountMode::ExistingOnly).unwrap()
}

/// `/session list` as ESP-Claw answers it from a map file: every alias on
/// its own `* ` line, ` (current)` after the current one.
fn esp_claw_list(map: &ChatMapFile) -> String {
    let mut out = String::from("Sessions:");
    for a in &map.sessions {
        out.push_str("\n* ");
        out.push_str(a);
        if *a == map.current_alias {
            out.push_str(" (current)");
        }
    }
    out
}

/// Item 9: the ids come from the chat and subagent maps (no `--ids`), the
/// chat maps become the engine's (aliases in order, the current one), so
/// `/session list` answers as on the device, a 161-byte id included; the
/// session no map names is stored under its fallback id and named in the
/// report.
#[test]
fn claw_session_mgr_load_mapping_locked_imports_chat_maps() {
    let tmp = tempfile::tempdir().unwrap();
    let dev = tmp.path().join("device");
    device_dir(&dev);
    let image = tmp.path().join("c.img");
    let r = import_to_image(&dev, &image, Preset::Esp32, None, &ImportOptions::default()).unwrap();
    assert_eq!((r.sessions, r.records), (8, 13), "{r:?}");
    assert_eq!(
        (r.chat_maps, r.chat_maps_stored, r.subagent_maps),
        (3, 3, 1)
    );
    let long_id = format!("{}:default_01", long_key(150));
    let fallback = |id: &str| {
        let stem = naming::session_stem(id);
        format!("sessions/{stem}.log -> unrecovered:{stem}")
    };
    // The 161-byte id fits the engine's 255 bytes: imported under itself;
    // only the session no map names gets a fallback id.
    assert!(long_id.len() == 161 && long_id.len() <= MAX_SESSION_ID_BYTES);
    assert_eq!(
        r.fallback_ids,
        [fallback("trigger:scheduler:daily-report-2026-12-01")]
    );
    assert!(
        !r.warnings
            .iter()
            .any(|w| w.contains("bytes, longer than the")),
        "{:?}",
        r.warnings
    );

    let mut store = mount(&image);
    let mut buf = vec![0u8; 8192];
    for id in [
        long_id.clone(),
        format!("{FEISHU}:default_01"),
        PARENT.to_string(),
        format!("{PARENT}:subagent_01"),
        format!("{PARENT}:subagent_02"),
        format!("{AGENT}:notes"),
    ] {
        assert!(id.len() > 24 && id.len() <= MAX_SESSION_ID_BYTES, "{id}");
        assert!(
            !store
                .history(&id, BackendFormat::Unknown, &mut buf)
                .unwrap()
                .is_empty(),
            "{id}"
        );
    }
    for entry in fs::read_dir(dev.join("sessions/chat_map")).unwrap() {
        let map = ChatMapFile::parse(&fs::read(entry.unwrap().path()).unwrap()).unwrap();
        let key = ChatKey::from_stored(map.chat_key.as_bytes()).unwrap();
        let mut text = String::new();
        store
            .chat_sessions(&key)
            .unwrap()
            .render_list(&mut text)
            .unwrap();
        assert_eq!(text, esp_claw_list(&map));
    }
    // The engine's `/session list` on the migrated chat.
    let key = ChatKey::from_stored(FEISHU.as_bytes()).unwrap();
    let mut text = String::new();
    store
        .chat_sessions(&key)
        .unwrap()
        .render_list(&mut text)
        .unwrap();
    assert_eq!(
        text,
        "Sessions:\n* default_01\n* work (current)\n* trip-2026"
    );
}

/// Item 9: the subagent maps, which the engine has no place for, are kept
/// in the sidecar file beside the image and written back by export as
/// `claw_session_mgr_write_subagent_map_locked` writes them.
#[test]
fn claw_session_mgr_load_subagent_map_locked_keeps_subagent_maps() {
    let tmp = tempfile::tempdir().unwrap();
    let dev = tmp.path().join("device");
    device_dir(&dev);
    let image = tmp.path().join("c.img");
    let r = import_to_image(&dev, &image, Preset::Esp32, None, &ImportOptions::default()).unwrap();
    let side = sidecar_path(&image);
    assert_eq!(r.sidecar.as_deref(), Some(side.to_str().unwrap()));
    let sidecar = espfiles::read_sidecar(&image).unwrap();
    assert_eq!(
        sidecar.subagent_maps,
        [SubagentMapFile {
            parent_session_id: PARENT.into(),
            next_suffix: 3,
            child_ids: vec![
                format!("{PARENT}:subagent_01"),
                format!("{PARENT}:subagent_02")
            ],
        }]
    );
    let out = tmp.path().join("out");
    let e = export_image(&image, Preset::Esp32, &out).unwrap();
    assert_eq!((e.chat_maps, e.subagent_maps), (3, 1));
    let name = espclaw::subagent_map_file_name(PARENT);
    assert_eq!(
        fs::read(out.join("sessions/subagent_map").join(&name)).unwrap(),
        fs::read(dev.join("sessions/subagent_map").join(&name)).unwrap()
    );
    // Without the sidecar the image alone has no subagent maps.
    fs::remove_file(&side).unwrap();
    let bare = tmp.path().join("bare");
    assert_eq!(
        export_image(&image, Preset::Esp32, &bare)
            .unwrap()
            .subagent_maps,
        0
    );
    // A re-import with no subagent maps removes the stale sidecar.
    fs::write(&side, "{}").unwrap();
    fs::remove_dir_all(dev.join("sessions/subagent_map")).unwrap();
    let r = import_to_image(&dev, &image, Preset::Esp32, None, &ImportOptions::default()).unwrap();
    assert_eq!(r.sidecar, None);
    assert!(!side.exists());
}

/// Item 9: the device's `sessions/` comes back byte for byte: chat maps as
/// `claw_session_mgr_write_mapping_locked` writes them, subagent maps,
/// every log and index, the fallback-id sessions under their own file
/// names; and a second round trip changes nothing.
#[test]
fn claw_session_mgr_write_mapping_locked_round_trip_is_byte_identical() {
    let tmp = tempfile::tempdir().unwrap();
    let dev = tmp.path().join("device");
    device_dir(&dev);
    let (img1, img2) = (tmp.path().join("1.img"), tmp.path().join("2.img"));
    let (out1, out2) = (tmp.path().join("out1"), tmp.path().join("out2"));
    import_to_image(&dev, &img1, Preset::Esp32, None, &ImportOptions::default()).unwrap();
    export_image(&img1, Preset::Esp32, &out1).unwrap();
    let sessions = |d: &Path| tree(&d.join("sessions"));
    assert_eq!(sessions(&dev), sessions(&out1));
    let r = import_to_image(&out1, &img2, Preset::Esp32, None, &ImportOptions::default()).unwrap();
    let long_id = format!("{}:default_01", long_key(150));
    let expected = 1 + usize::from(long_id.len() > MAX_SESSION_ID_BYTES);
    assert_eq!(r.fallback_ids.len(), expected);
    export_image(&img2, Preset::Esp32, &out2).unwrap();
    assert_eq!(tree(&out1), tree(&out2));
}

/// Item 1's limit on import: a subagent of a subagent of a long chat can
/// name an id past the engine's 255 bytes (`claw_session_mgr` builds
/// `<parent>:subagent_NN` from any parent). Such a session is imported under
/// its fallback id, the report names it and its length, its history reads
/// back, and export writes it back under its own file name, byte for byte.
#[test]
fn claw_session_mgr_load_subagent_map_locked_an_id_past_255_bytes_gets_its_fallback() {
    let tmp = tempfile::tempdir().unwrap();
    let dev = tmp.path().join("device");
    device_dir(&dev);
    let parent = format!("{}:default_01:subagent_01:subagent_01", long_key(220));
    let child = format!("{parent}:subagent_02");
    assert!(child.len() > MAX_SESSION_ID_BYTES && parent.len() <= MAX_SESSION_ID_BYTES);
    let sub = format!(
        "{{\"parent_session_id\":\"{parent}\",\"next_suffix\":3,\"child_ids\":[\"{child}\"]}}"
    );
    fs::write(
        dev.join("sessions/subagent_map")
            .join(espclaw::subagent_map_file_name(&parent)),
        sub,
    )
    .unwrap();
    write_session(&dev, &parent, &["parent turn", "ok"]);
    write_session(&dev, &child, &["a long way down", "still kept"]);
    let image = tmp.path().join("long.img");
    let r = import_to_image(&dev, &image, Preset::Esp32, None, &ImportOptions::default()).unwrap();
    let stem = naming::session_stem(&child);
    let fallback = format!("unrecovered:{stem}");
    assert!(
        r.fallback_ids
            .contains(&format!("sessions/{stem}.log -> {fallback}")),
        "{:?}",
        r.fallback_ids
    );
    assert!(
        r.warnings.iter().any(|w| w.contains(&format!(
            "is {} bytes, longer than the {MAX_SESSION_ID_BYTES}",
            child.len()
        ))),
        "{:?}",
        r.warnings
    );
    let mut store = mount(&image);
    let mut buf = vec![0u8; 8192];
    let h = store
        .history(&fallback, BackendFormat::Unknown, &mut buf)
        .unwrap();
    assert_eq!(h.len(), 2);
    assert_eq!(
        store
            .history(&parent, BackendFormat::Unknown, &mut buf)
            .unwrap()
            .len(),
        2
    );
    drop(store);
    let out = tmp.path().join("out");
    export_image(&image, Preset::Esp32, &out).unwrap();
    for suffix in [".log", ".log.idx"] {
        let name = format!("sessions/{stem}{suffix}");
        assert_eq!(
            fs::read(out.join(&name)).unwrap(),
            fs::read(dev.join(&name)).unwrap(),
            "{name}"
        );
    }
}

/// Item 9, nothing left behind: chat maps beyond what the engine stores
/// (it keeps at most 24 objects, profiles included)
/// go to the sidecar, with a warning, and export writes them all back.
#[test]
fn claw_session_mgr_write_mapping_locked_maps_beyond_the_engine_go_to_the_sidecar() {
    let tmp = tempfile::tempdir().unwrap();
    let dev = tmp.path().join("device");
    fs::create_dir_all(dev.join("sessions/chat_map")).unwrap();
    let n = 24 + 2; // the engine keeps at most 24 objects (store::MAX_OBJECTS)
    for i in 0..n {
        let key = format!("chat:telegram:{}", 100_000 + i);
        fs::write(
            dev.join("sessions/chat_map").join(espclaw::chat_map_file_name(&key)),
            format!("{{\"chat_key\":\"{key}\",\"current_alias\":\"default_01\",\"sessions\":[\"default_01\"]}}"),
        )
        .unwrap();
    }
    let image = tmp.path().join("c.img");
    let r = import_to_image(&dev, &image, Preset::Esp32, None, &ImportOptions::default()).unwrap();
    assert_eq!(r.chat_maps, n);
    assert!(r.chat_maps_stored < n && r.chat_maps_stored > 10, "{r:?}");
    assert_eq!(
        espfiles::read_sidecar(&image).unwrap().chat_maps.len(),
        n - r.chat_maps_stored
    );
    assert!(r.warnings.iter().any(|w| w.contains("kept in the sidecar")));
    let out = tmp.path().join("out");
    assert_eq!(
        export_image(&image, Preset::Esp32, &out).unwrap().chat_maps,
        n
    );
    assert_eq!(
        tree(&dev.join("sessions/chat_map")),
        tree(&out.join("sessions/chat_map"))
    );
}

/// Bad map files: an error naming the file and what is wrong (the checks
/// of `claw_session_mgr_load_mapping_locked`,
/// `claw_session_mgr_validate_alias_map` and
/// `claw_session_mgr_load_subagent_map_locked`), never a panic, and no
/// image written.
#[test]
fn claw_session_mgr_load_mapping_locked_bad_maps_are_named() {
    let tmp = tempfile::tempdir().unwrap();
    let many: Vec<String> = (1..=33).map(|i| format!("\"s{i}\"")).collect();
    let many = format!(
        "{{\"chat_key\":\"chat:t:1\",\"current_alias\":\"s1\",\"sessions\":[{}]}}",
        many.join(",")
    );
    let cases: Vec<(&str, &str, String, &str)> = vec![
        (
            "chat_map",
            "chat_x.json",
            "{\"chat_key\":".into(),
            "line 1 column 12",
        ),
        ("chat_map", "chat_x.json", "[1]".into(), "not a JSON object"),
        (
            "chat_map",
            "chat_x.json",
            r#"{"current_alias":"a","sessions":["a"]}"#.into(),
            "no \"chat_key\"",
        ),
        (
            "chat_map",
            "chat_x.json",
            r#"{"chat_key":"chat:t:1","sessions":["a"]}"#.into(),
            "no \"current_alias\"",
        ),
        (
            "chat_map",
            "chat_x.json",
            r#"{"chat_key":"chat:t:1","current_alias":"a"}"#.into(),
            "no \"sessions\"",
        ),
        (
            "chat_map",
            "chat_x.json",
            r#"{"chat_key":"chat:t:1","current_alias":"b","sessions":["a"]}"#.into(),
            "not in \"sessions\"",
        ),
        (
            "chat_map",
            "chat_x.json",
            r#"{"chat_key":"chat:t:1","current_alias":"a","sessions":["a","a"]}"#.into(),
            "twice",
        ),
        (
            "chat_map",
            "chat_x.json",
            r#"{"chat_key":"chat:t:1","current_alias":"a","sessions":["a","b c"]}"#.into(),
            "[1] is not a valid alias",
        ),
        (
            "chat_map",
            "chat_x.json",
            r#"{"chat_key":"chat:t:1","current_alias":"a","sessions":[]}"#.into(),
            "0 aliases",
        ),
        ("chat_map", "chat_x.json", many, "33 aliases"),
        (
            "subagent_map",
            "subagents_x.json",
            r#"{"parent_session_id":"p","next_suffix":0}"#.into(),
            "next_suffix",
        ),
        (
            "subagent_map",
            "subagents_x.json",
            r#"{"next_suffix":1}"#.into(),
            "parent_session_id",
        ),
        (
            "subagent_map",
            "subagents_x.json",
            r#"{"parent_session_id":"p","next_suffix":2,"child_ids":[""]}"#.into(),
            "\"child_ids\"[0]",
        ),
    ];
    for (n, (sub, name, text, what)) in cases.iter().enumerate() {
        let dev = tmp.path().join(format!("dev{n}"));
        fs::create_dir_all(dev.join("sessions").join(sub)).unwrap();
        fs::write(dev.join("sessions").join(sub).join(name), text).unwrap();
        let image = tmp.path().join(format!("{n}.img"));
        let e = import_to_image(&dev, &image, Preset::Esp32, None, &ImportOptions::default())
            .unwrap_err()
            .0;
        assert!(e.contains(name) && e.contains(what), "case {n}: {e}");
        assert!(!image.exists());
    }
    // A map ESP-Claw would never open (its name is not its key's) is read
    // all the same, with a warning.
    let dev = tmp.path().join("misnamed");
    fs::create_dir_all(dev.join("sessions/chat_map")).unwrap();
    fs::write(
        dev.join("sessions/chat_map/chat_old.json"),
        r#"{"chat_key":"chat:t:1","current_alias":"a","sessions":["a"]}"#,
    )
    .unwrap();
    let mut store = fresh();
    let r = import_dir(&dev, &mut store, &ImportOptions::default()).unwrap();
    assert_eq!(r.chat_maps_stored, 1);
    assert!(r.warnings[0].contains("chat_old.json") && r.warnings[0].contains("never reads"));
}
