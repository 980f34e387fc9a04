//! `clawmem-sim export` and `import`: a clawmem store to and from ESP-Claw's
//! file layout (`/work/shared/reference/esp-claw-memory.md`), so that an
//! ESP-Claw device's memory moves to clawmem and back.
//!
//! The layout, relative to the directory:
//!
//! - `sessions/s_<safe>_<hash>.log`: each record's JSON body and a `\n`;
//!   `.log.idx`: the binary `CHDX` index (an 8-byte header, a 10-byte entry
//!   per record); `.log.blocked`: the empty marker of a blocked session. The
//!   names and both files are byte for byte what ESP-Claw writes
//!   ([`clawmem::naming`], [`clawmem::chdx`]).
//! - `memory/memory_records.jsonl`: one line per active item, ESP-Claw's
//!   item snapshot as its compaction (`claw_memory_compact_internal`)
//!   writes it:
//!   `{"id":"mem-7","source":"manual","content":"...","tags":"a,b","keywords":"a,c","created_at":0,"updated_at":0,"access_count":0,"deleted":false,"summary_ids":[1],"summary_labels":[]}`.
//!   Export writes the log as a compaction leaves it (active items only,
//!   oldest id first); import replays a whole event log: the last snapshot
//!   of an id wins and `"deleted":true` forgets it.
//! - `memory/memory_index.json`: the summary-label catalog and keyword
//!   index in the shape ESP-Claw's `claw_memory_load_index` reads (version
//!   3, `summaries` of `summary_id`/`label`/`ref_count`, `keyword_index`,
//!   `next_summary_id`, `last_compact_digest_size`), written as ESP-Claw's
//!   compaction would for the exported records ([`crate::espclaw`]).
//!   **Labels are ESP-Claw's**: recomputed from each item's tags by
//!   `claw_memory_collect_summary_labels`, so a clawmem label longer than 8
//!   characters is cut (`dietary_preferences` -> `dietary_`; a cut that
//!   ends on a space keeps it, `dietary preferences` -> `dietary `), and two
//!   labels that agree on their first 8 characters become one label whose
//!   reference count is the sum; on the device a recall by the long label
//!   finds nothing, the model sees the cut one in the catalog. The export
//!   report lists every label it cut. Nothing is lost for a later import:
//!   import rebuilds clawmem's labels from the tags, which are kept whole.
//!   Import reads this file in ESP-Claw's shape and in the shape clawmem's
//!   export wrote before (`id`, `refs`, `keywords`), and reports what
//!   ESP-Claw's loader would read as 0 or drop; the catalog itself is
//!   rebuilt from the records.
//! - `memory/memory_digest.log`: export writes it empty, which is what
//!   `last_compact_digest_size: 0` in the index says (a device's old digest
//!   left in place would have its recalls counted again at the next
//!   compaction).
//! - `memory/MEMORY.md`: the Markdown rendering (lite mode's prompt), as
//!   [`clawmem::Store::write_memory_md`] writes it; import ignores it.
//! - `memory/soul.md`, `identity.md`, `user.md` (and Ameba-Claw's
//!   `AGENTS.md` when it is not the default).
//! - `sessions/chat_map/chat_<safe>_<hash>.json`, one per chat, written by
//!   ESP-Claw's session manager (`claw_session_mgr.c`):
//!   `{"chat_key":"chat:feishu:oc_..","current_alias":"work","sessions":["default_01","work"]}`;
//!   a session's id is `<chat_key>:<alias>`. `<safe>`: ASCII letters and
//!   digits kept, each run of other bytes one `_`, a trailing `_` dropped,
//!   cut to 24 bytes (`default` if empty); `<hash>`: FNV-1a of the key
//!   ([`crate::espclaw`]). Import stores each as the engine's chat session
//!   map (aliases in order, the current one), so `/session list` answers as
//!   on the device; export writes the engine's maps back byte for byte.
//! - `sessions/subagent_map/subagents_<safe>_<hash>.json` (`parent` if the
//!   safe name is empty):
//!   `{"parent_session_id":..,"next_suffix":3,"child_ids":[..]}`. The engine
//!   has no subagent registry, so import keeps these maps in a host-side
//!   **sidecar file beside the image**, `<image>.session-maps.json`
//!   ([`Sidecar`], [`sidecar_path`]), and export writes them back from it
//!   byte for byte. A chat map the engine cannot store (it keeps 24
//!   objects, 20 of them for chat maps beside the 4 profile documents) goes
//!   to the sidecar too, with a warning. An image exported without its
//!   sidecar has no subagent maps (and lacks those chat maps).
//! - `clawmem-session-ids.txt`: one session id per line. ESP-Claw's file
//!   names keep only 24 bytes of an id, with `:` and other bytes turned
//!   into `_`, so an id cannot always be read back from its name. Export
//!   writes this extra file (ESP-Claw ignores it).
//!
//! **Which id a session file holds**, in this order: an id of the chat and
//! subagent maps, of `clawmem-session-ids.txt` or of `--ids` whose name is
//! the file's; an id of at most 24 bytes found by trying the bytes ESP-Claw
//! turns into `_` ([`recover_session_id`]); otherwise the **fallback id**
//! `unrecovered:<stem>` (`<stem>` the file name without `.log`, e.g.
//! `unrecovered:s_trigger_scheduler_daily_1a2b3c4d`; [`fallback_session_id`]).
//! A recovered id longer than the engine's [`MAX_SESSION_ID_BYTES`] (255;
//! ESP-Claw's reach about 204 bytes) gets the fallback id too. Either way the session is imported, named in the
//! report (`fallback_ids`) and a warning, and export writes a fallback-id
//! session back under `<stem>`, its original name, so the device finds it
//! under its real id and the round trip stays byte-identical. On clawmem
//! such a session answers only to its fallback id.
//!
//! When ESP-Claw folds the digest in: the current source
//! (`claw_memory.c` at commit 9354591b) does not compact at boot;
//! `claw_memory_init` only creates missing files. Compaction runs after a
//! store, update or forget once 5 changes were made since boot or the last
//! compaction, or once the records log reaches 32 KiB
//! (`claw_memory_maybe_compact`), and only then are the digest's recall
//! counts applied to the records (`claw_memory_apply_digest_recall_deltas`).
//! (Older ESP-Claw, June 2026, also compacted in `claw_memory_init`.) So a
//! device's records log can lag its digest by any number of recalls; import
//! reads `memory/memory_digest.log` from `last_compact_digest_size` on and
//! applies its recall lines as that function does (access count + 1,
//! `updated_at` raised to the recall time).
//!
//! Bad input is an error that names the file and the line or byte; nothing
//! is half-imported into an image that was already written (import always
//! formats a fresh image).

use std::collections::{BTreeMap, BTreeSet};
use std::fmt;
use std::fs;
use std::path::{Path, PathBuf};

use clawmem::chat::{Alias, ChatKey, SessionCommand, FIRST_DEFAULT_ALIAS};
use clawmem::chdx::{self, Entry};
use clawmem::memory::{Item, ItemInput};
use clawmem::naming::{self, SessionFileKind};
use clawmem::profile::ProfileDoc;
use clawmem::rebuild::{self, Verdict};
use clawmem::MountMode;
use clawmem::{BackendFormat, Record, RecordType, Store, MAX_SESSION_ID_BYTES};
use embedded_storage::nor_flash::NorFlash;
use serde::{Deserialize, Serialize};

use crate::espclaw;
use crate::flash::SimFlash;
use crate::model::Preset;
use crate::nor::{
    Esp32EncryptedFlash, Esp32Flash, GenericFlash, Nrf52Flash, Stm32h7Flash, Stm32l4Flash,
};
use crate::replay::{fit_config, SimBacked, MAX_SESSIONS};

/// Calls `f::<FlashType>(args)` with the flash type of a preset.
macro_rules! dispatch {
    ($preset:expr, $f:ident($($arg:expr),*)) => {
        match $preset {
            Preset::Esp32 => $f::<Esp32Flash>($($arg),*),
            Preset::Nrf52 => $f::<Nrf52Flash>($($arg),*),
            Preset::Stm32l4 => $f::<Stm32l4Flash>($($arg),*),
            Preset::Stm32h7 => $f::<Stm32h7Flash>($($arg),*),
            Preset::Esp32Encrypted => $f::<Esp32EncryptedFlash>($($arg),*),
            Preset::Generic => $f::<GenericFlash>($($arg),*),
        }
    };
}

/// Directory of the session files.
pub const SESSIONS_DIR: &str = "sessions";
/// Directory of the memory files and profiles.
pub const MEMORY_DIR: &str = "memory";
/// The records log.
pub const RECORDS_FILE: &str = "memory/memory_records.jsonl";
/// The label catalog and keyword index.
pub const INDEX_FILE: &str = "memory/memory_index.json";
/// The Markdown rendering.
pub const MEMORY_MD_FILE: &str = "memory/MEMORY.md";
/// The session ids, one per line (clawmem's addition).
pub const IDS_FILE: &str = "clawmem-session-ids.txt";
/// The recall digest.
pub const DIGEST_FILE: &str = "memory/memory_digest.log";
/// Version of `memory_index.json`.
pub const INDEX_VERSION: u32 = crate::espclaw::INDEX_VERSION;

/// An export or import that failed: what was wrong and where.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FilesError(pub String);

impl fmt::Display for FilesError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for FilesError {}

fn err<T>(msg: impl Into<String>) -> Result<T, FilesError> {
    Err(FilesError(msg.into()))
}

/// One line of `memory_records.jsonl`, in ESP-Claw's field order.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct RecordLine {
    /// Item id (`mem-<n>` from clawmem; any text from ESP-Claw).
    pub id: String,
    /// `manual` (tools) or `auto_llm` (extraction).
    #[serde(default)]
    pub source: String,
    /// The memory text.
    #[serde(default)]
    pub content: String,
    /// Comma-joined tags.
    #[serde(default, deserialize_with = "terms")]
    pub tags: String,
    /// Comma-joined keywords.
    #[serde(default, deserialize_with = "terms")]
    pub keywords: String,
    /// Seconds.
    #[serde(default)]
    pub created_at: u32,
    /// Seconds.
    #[serde(default)]
    pub updated_at: u32,
    /// Recalls.
    #[serde(default)]
    pub access_count: u32,
    /// Tombstone.
    #[serde(default)]
    pub deleted: bool,
    /// Ids of the item's summary labels in `memory_index.json`.
    #[serde(default)]
    pub summary_ids: Vec<u32>,
    /// What `claw_memory_item_to_json` adds: the labels when it is given
    /// the index, `[]` in the records log (compaction passes none).
    #[serde(default)]
    pub summary_labels: Vec<String>,
}

/// Tags and keywords: ESP-Claw writes a comma-joined string; a list of
/// strings is taken too.
fn terms<'de, D: serde::Deserializer<'de>>(d: D) -> Result<String, D::Error> {
    #[derive(Deserialize)]
    #[serde(untagged)]
    enum Terms {
        Text(String),
        List(Vec<String>),
    }
    Ok(match Terms::deserialize(d)? {
        Terms::Text(s) => s,
        Terms::List(v) => v.join(","),
    })
}

/// What an export wrote.
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
pub struct ExportReport {
    /// Sessions written.
    pub sessions: usize,
    /// Records in them.
    pub records: usize,
    /// Sessions with a `.blocked` marker.
    pub blocked: usize,
    /// Sessions whose history had damaged records (left out).
    pub damaged_records: u32,
    /// Active memory items.
    pub memory_items: usize,
    /// Summary labels (ESP-Claw's, cut to 8 characters).
    pub labels: usize,
    /// clawmem labels that ESP-Claw's 8-character cut changed, as
    /// `"long" -> "cut"`.
    pub labels_cut: Vec<String>,
    /// Profile documents written.
    pub profiles: usize,
    /// Chat maps written (`sessions/chat_map/`).
    pub chat_maps: usize,
    /// Subagent maps written (`sessions/subagent_map/`, from the sidecar).
    pub subagent_maps: usize,
    /// Files written, relative to the directory.
    pub files: Vec<String>,
    /// What was damaged and left out, each naming the session or document.
    pub warnings: Vec<String>,
}

/// What an import stored.
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
pub struct ImportReport {
    /// Sessions stored.
    pub sessions: usize,
    /// Records appended.
    pub records: usize,
    /// Session indexes that did not match their log and were rebuilt from it
    /// (where ESP-Claw wipes the session).
    pub indexes_rebuilt: usize,
    /// Sessions ESP-Claw had blocked.
    pub blocked_markers: usize,
    /// Sessions that clawmem's turn-aware compaction shortened on import.
    pub compacted: usize,
    /// Lines of the records log.
    pub record_lines: usize,
    /// Active items found there.
    pub memory_items: usize,
    /// Items stored.
    pub memory_stored: usize,
    /// Items that duplicated one stored before (ESP-Claw's compaction merges
    /// them too).
    pub memory_merged: usize,
    /// Profile documents stored.
    pub profiles: usize,
    /// Chat maps (`sessions/chat_map/`) read.
    pub chat_maps: usize,
    /// Of those, the ones the engine stores as chat session maps.
    pub chat_maps_stored: usize,
    /// Subagent maps (`sessions/subagent_map/`) read; they, and the chat
    /// maps the engine could not store, go to the sidecar file.
    pub subagent_maps: usize,
    /// Sessions stored under a fallback id, as `"sessions/<file>.log -> <id>"`.
    pub fallback_ids: Vec<String>,
    /// The sidecar file written beside the image, if any.
    pub sidecar: Option<String>,
    /// Whose field names `memory_index.json` had, if it was read.
    pub index_shape: Option<espclaw::IndexShape>,
    /// Recall lines of `memory_digest.log` applied to the items.
    pub digest_recalls: usize,
    /// What was repaired or left out, each naming its file.
    pub warnings: Vec<String>,
}

/// Import options.
#[derive(Debug, Clone, Default)]
pub struct ImportOptions {
    /// Session ids to match file names against (besides the directory's
    /// `clawmem-session-ids.txt`).
    pub ids: Vec<String>,
    /// Skip records-log lines that do not parse (a torn line), with a
    /// warning, instead of failing.
    pub skip_bad_lines: bool,
}

// ---- export -------------------------------------------------------------------

fn write_file(
    dir: &Path,
    rel: &str,
    data: &[u8],
    report: &mut ExportReport,
) -> Result<(), FilesError> {
    let path = dir.join(rel);
    if let Some(parent) = path.parent() {
        fs::create_dir_all(parent)
            .map_err(|e| FilesError(format!("cannot create {}: {e}", parent.display())))?;
    }
    fs::write(&path, data)
        .map_err(|e| FilesError(format!("cannot write {}: {e}", path.display())))?;
    report.files.push(rel.to_string());
    Ok(())
}

/// A store's error as text.
fn engine<E: fmt::Debug>(what: &str, e: clawmem::Error<E>) -> FilesError {
    FilesError(format!("{what}: {e:?}"))
}

/// Writes the session manager's files: the engine's chat session maps and
/// the sidecar's chat maps as `sessions/chat_map/chat_<safe>_<hash>.json`
/// (the engine's map wins over a sidecar map of the same chat), the
/// sidecar's subagent maps as `sessions/subagent_map/subagents_<safe>_<hash>.json`,
/// each byte for byte as ESP-Claw's session manager writes it.
fn export_session_maps<F: NorFlash, const N: usize>(
    store: &mut Store<F, N>,
    dir: &Path,
    sidecar: &Sidecar,
    report: &mut ExportReport,
) -> Result<(), FilesError>
where
    F::Error: fmt::Debug,
{
    let mut chats: BTreeMap<String, espclaw::ChatMapFile> = BTreeMap::new();
    store
        .for_each_chat_sessions(|m| {
            let file = espclaw::ChatMapFile {
                chat_key: m.key().as_str().to_string(),
                current_alias: m.current().as_str().to_string(),
                sessions: m.aliases().iter().map(|a| a.as_str().to_string()).collect(),
            };
            chats.insert(espclaw::chat_map_file_name(&file.chat_key), file);
        })
        .map_err(|e| engine("listing the chat session maps", e))?;
    for m in &sidecar.chat_maps {
        let name = espclaw::chat_map_file_name(&m.chat_key);
        if let std::collections::btree_map::Entry::Vacant(slot) = chats.entry(name) {
            slot.insert(m.clone());
        } else {
            report.warnings.push(format!(
                "chat {:?}: the sidecar's map is left out, the engine holds one",
                m.chat_key
            ));
        }
    }
    for (name, m) in &chats {
        let rel = format!("{SESSIONS_DIR}/{}/{name}", espclaw::CHAT_MAP_DIR);
        write_file(dir, &rel, m.render().as_bytes(), report)?;
        report.chat_maps += 1;
    }
    for m in &sidecar.subagent_maps {
        let rel = format!(
            "{SESSIONS_DIR}/{}/{}",
            espclaw::SUBAGENT_MAP_DIR,
            espclaw::subagent_map_file_name(&m.parent_session_id)
        );
        write_file(dir, &rel, m.render().as_bytes(), report)?;
        report.subagent_maps += 1;
    }
    Ok(())
}

/// Writes everything `store` holds into `dir` in ESP-Claw's layout.
pub fn export_store<F: NorFlash, const N: usize>(
    store: &mut Store<F, N>,
    dir: &Path,
) -> Result<ExportReport, FilesError>
where
    F::Error: fmt::Debug,
{
    export_store_with_sidecar(store, dir, &Sidecar::default())
}

/// [`export_store`], also writing the session manager maps of `sidecar`
/// (what an import kept beside the image).
pub fn export_store_with_sidecar<F: NorFlash, const N: usize>(
    store: &mut Store<F, N>,
    dir: &Path,
    sidecar: &Sidecar,
) -> Result<ExportReport, FilesError>
where
    F::Error: fmt::Debug,
{
    let mut report = ExportReport::default();
    fs::create_dir_all(dir.join(SESSIONS_DIR))
        .map_err(|e| FilesError(format!("cannot create {}: {e}", dir.display())))?;
    fs::create_dir_all(dir.join(MEMORY_DIR))
        .map_err(|e| FilesError(format!("cannot create {}: {e}", dir.display())))?;

    // Sessions.
    let mut ids = Vec::new();
    let lost = store
        .for_each_session(|id, _| ids.push(id.to_string()))
        .map_err(|e| engine("listing the sessions", e))?;
    if lost > 0 {
        report.warnings.push(format!(
            "{lost} session(s) whose name is damaged beyond repair were left out"
        ));
    }
    ids.sort();
    let mut buf = vec![0u8; 64 * 1024];
    for id in &ids {
        let files = loop {
            let len = buf.len();
            match store.history(id, BackendFormat::Unknown, &mut buf) {
                Ok(h) => {
                    report.damaged_records += h.damaged_records();
                    let mut log = Vec::with_capacity(h.used_bytes());
                    let mut idx = chdx::encode_header().to_vec();
                    for r in h.iter() {
                        let offset = u32::try_from(log.len())
                            .map_err(|_| FilesError(format!("session {id}: log over 4 GiB")))?;
                        let entry = Entry::for_body(offset, r.body.len(), r.kind, r.format)
                            .ok_or_else(|| {
                                FilesError(format!("session {id}: record over 4 GiB"))
                            })?;
                        idx.extend_from_slice(&entry.encode());
                        log.extend_from_slice(r.body);
                        log.push(b'\n');
                    }
                    report.records += h.len();
                    break Some((log, idx));
                }
                Err(clawmem::Error::BufferTooSmall { needed }) if needed > len => {
                    buf.resize(needed, 0);
                }
                Err(clawmem::Error::NotFound) => {
                    break Some((Vec::new(), chdx::encode_header().to_vec()))
                }
                Err(e @ clawmem::Error::Corrupted { .. }) => {
                    report
                        .warnings
                        .push(format!("session {id}: {e:?}; left out"));
                    break None;
                }
                Err(e) => return Err(engine(&format!("reading session {id}"), e)),
            }
        };
        let Some((log, idx)) = files else {
            continue;
        };
        let stem = export_stem(id);
        let file = |kind: SessionFileKind| format!("{SESSIONS_DIR}/{stem}{}", kind.suffix());
        write_file(dir, &file(SessionFileKind::Log), &log, &mut report)?;
        write_file(dir, &file(SessionFileKind::Index), &idx, &mut report)?;
        let info = store
            .session_info(id)
            .map_err(|e| engine(&format!("session {id}"), e))?;
        if info.is_some_and(|i| i.blocked) {
            write_file(dir, &file(SessionFileKind::Blocked), b"", &mut report)?;
            report.blocked += 1;
        }
        report.sessions += 1;
    }
    let mut id_list = String::new();
    for id in &ids {
        id_list.push_str(id);
        id_list.push('\n');
    }
    write_file(dir, IDS_FILE, id_list.as_bytes(), &mut report)?;
    export_session_maps(store, dir, sidecar, &mut report)?;

    // Memory: the records and the index as ESP-Claw's compaction writes
    // them for these items, in this order (labels from the tags, by
    // ESP-Claw's rule).
    let mut items: Vec<Item> = Vec::new();
    store
        .memory_list(|i| items.push(i.clone()))
        .map_err(|e| engine("listing memory items", e))?;
    items.sort_by_key(|i| i.id());
    let mut index = espclaw::CompactedIndex::default();
    let mut jsonl = String::new();
    for item in &items {
        let summary_ids = index.add_item(item.tags());
        let esp_labels = espclaw::collect_summary_labels(item.tags());
        for label in item.labels() {
            let label = label.as_str();
            if !esp_labels.iter().any(|l| l == label) {
                let cut = espclaw::collect_summary_labels(label);
                let note = format!(
                    "{label:?} -> {:?}",
                    cut.first().map(String::as_str).unwrap_or("")
                );
                if !report.labels_cut.contains(&note) {
                    report.labels_cut.push(note);
                }
            }
        }
        let line = RecordLine {
            id: item.id().to_string(),
            source: item.source().to_string(),
            content: item.content().to_string(),
            tags: item.tags().to_string(),
            keywords: item.keywords().to_string(),
            created_at: item.created_at(),
            updated_at: item.updated_at(),
            access_count: u32::from(item.access_count()),
            deleted: false,
            summary_ids,
            summary_labels: Vec::new(),
        };
        jsonl.push_str(&serde_json::to_string(&line).map_err(|e| FilesError(e.to_string()))?);
        jsonl.push('\n');
        index.add_keywords(&line.id, item.keywords(), item.tags());
    }
    report.memory_items = items.len();
    report.labels = index.summaries.len();
    write_file(dir, RECORDS_FILE, jsonl.as_bytes(), &mut report)?;
    write_file(dir, INDEX_FILE, index.render().as_bytes(), &mut report)?;
    write_file(dir, DIGEST_FILE, b"", &mut report)?;
    let mut md = String::new();
    store
        .write_memory_md(&mut md)
        .map_err(|e| engine("rendering MEMORY.md", e))?;
    write_file(dir, MEMORY_MD_FILE, md.as_bytes(), &mut report)?;

    // Profiles.
    for doc in ProfileDoc::ALL {
        let len = store
            .profile_len(doc)
            .map_err(|e| engine(&format!("profile {}", doc.file_name()), e))?;
        let mut body = vec![0u8; len];
        let body = match store.profile_read(doc, &mut body) {
            Ok(n) => body[..n].to_vec(),
            // Never written, and no room to write it now (partition full,
            // or every object slot taken): the default is what it holds.
            Err(clawmem::Error::Full { .. } | clawmem::Error::TooManySessions { .. }) => {
                doc.default_contents().as_bytes().to_vec()
            }
            Err(e @ clawmem::Error::Corrupted { .. }) => {
                report
                    .warnings
                    .push(format!("profile {}: {e:?}; left out", doc.file_name()));
                continue;
            }
            Err(e) => return Err(engine(&format!("profile {}", doc.file_name()), e)),
        };
        if doc == ProfileDoc::Agents && body == doc.default_contents().as_bytes() {
            continue;
        }
        write_file(
            dir,
            &format!("{MEMORY_DIR}/{}", doc.file_name()),
            &body,
            &mut report,
        )?;
        report.profiles += 1;
    }
    Ok(report)
}

// ---- import -------------------------------------------------------------------

fn read_file(path: &Path) -> Result<Option<Vec<u8>>, FilesError> {
    match fs::read(path) {
        Ok(b) => Ok(Some(b)),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(None),
        Err(e) => err(format!("cannot read {}: {e}", path.display())),
    }
}

fn utf8<'a>(path: &Path, bytes: &'a [u8]) -> Result<&'a str, FilesError> {
    std::str::from_utf8(bytes).map_err(|e| {
        FilesError(format!(
            "{}: invalid UTF-8 at byte {}",
            path.display(),
            e.valid_up_to()
        ))
    })
}

/// Prefix of the fallback id of a session file whose id cannot be found.
pub const FALLBACK_ID_PREFIX: &str = "unrecovered:";

/// The fallback id of the session file `<stem>.log`:
/// `unrecovered:<stem>`, e.g. `unrecovered:s_chat_feishu_oc_5f2d7c1e9a_1a2b3c4d`
/// (at most 47 bytes, so the engine always takes it). Export writes such a
/// session back under `<stem>` (not under the name of the fallback id), so
/// the device finds it under its real id again.
pub fn fallback_session_id(stem: &str) -> String {
    format!("{FALLBACK_ID_PREFIX}{stem}")
}

/// The file stem a fallback id stands for, if `id` is one: the prefix, then
/// `s_<safe>_<8 hex digits>` with a safe part of 1 to 24 bytes.
pub fn fallback_stem(id: &str) -> Option<&str> {
    let stem = id.strip_prefix(FALLBACK_ID_PREFIX)?;
    let (safe, hash) = stem.strip_prefix("s_")?.rsplit_once('_')?;
    let ok = (1..=naming::SAFE_ID_MAX_BYTES).contains(&safe.len())
        && safe
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'_' || b == b'-')
        && hash.len() == 8
        && hash
            .bytes()
            .all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b));
    ok.then_some(stem)
}

/// The stem of the files export writes for session `id`.
fn export_stem(id: &str) -> String {
    match fallback_stem(id) {
        Some(stem) => stem.to_string(),
        None => naming::session_stem(id).to_string(),
    }
}

/// Unsafe bytes an id may have had where its file name has `_`, most
/// likely first.
const UNSAFE_GUESSES: [u8; 5] = [b':', b'_', b'#', b'.', b'/'];

/// The session id whose file stem is `stem`: one of `known`, or one found
/// by trying the bytes ESP-Claw turns into `_` at each `_` of the name.
pub fn recover_session_id(stem: &str, known: &[String]) -> Option<String> {
    if let Some(id) = known
        .iter()
        .find(|id| naming::session_stem(id).as_str() == stem || fallback_stem(id) == Some(stem))
    {
        return Some(id.clone());
    }
    let inner = stem.strip_prefix("s_")?;
    let (safe, hash) = inner.rsplit_once('_')?;
    if hash.len() != 8 || !hash.bytes().all(|b| b.is_ascii_hexdigit()) {
        return None;
    }
    let holes: Vec<usize> = safe
        .bytes()
        .enumerate()
        .filter(|(_, b)| *b == b'_')
        .map(|(i, _)| i)
        .collect();
    // Up to 5^8 (390,625) candidates, or 2^k with `:` and `_` only.
    let guesses: &[u8] = if holes.len() <= 8 {
        &UNSAFE_GUESSES
    } else if holes.len() <= 20 {
        &UNSAFE_GUESSES[..2]
    } else {
        return None;
    };
    let mut candidate = safe.as_bytes().to_vec();
    let mut choice = vec![0usize; holes.len()];
    loop {
        for (slot, &at) in holes.iter().enumerate() {
            candidate[at] = guesses[choice[slot]];
        }
        let id = std::str::from_utf8(&candidate).ok()?;
        if naming::session_stem(id).as_str() == stem {
            return Some(id.to_string());
        }
        // Next combination.
        let mut slot = 0;
        loop {
            if slot == choice.len() {
                return None;
            }
            choice[slot] += 1;
            if choice[slot] < guesses.len() {
                break;
            }
            choice[slot] = 0;
            slot += 1;
        }
    }
}

/// The records of a session's files: the index if it matches the log,
/// otherwise the index rebuilt from the log (where ESP-Claw wipes the
/// session), with a warning.
fn session_entries(
    log_path: &Path,
    log: &[u8],
    idx: Option<&[u8]>,
    report: &mut ImportReport,
) -> Result<Vec<Entry>, FilesError> {
    let idx_name = format!("{}.idx", log_path.display());
    if let Some(idx) = idx {
        match rebuild::repair(idx, log) {
            Verdict::Keep { tail, .. } => {
                if let Some(t) = tail {
                    report.warnings.push(format!(
                        "{}: {} bytes at byte {} after the last record are torn; left out",
                        log_path.display(),
                        t.end().saturating_sub(t.offset),
                        t.offset
                    ));
                }
                return Ok(chdx::entries(idx, log.len() as u64).collect());
            }
            Verdict::Rebuild(reason) => {
                report.warnings.push(format!(
                    "{idx_name}: {reason}; rebuilt from the log (ESP-Claw would wipe the session)"
                ));
            }
        }
    } else {
        report
            .warnings
            .push(format!("{idx_name}: missing; rebuilt from the log"));
    }
    report.indexes_rebuilt += 1;
    let entries =
        rebuild::entries(log).map_err(|e| FilesError(format!("{}: {e}", log_path.display())))?;
    let mut out = Vec::new();
    let mut it = entries;
    for e in it.by_ref() {
        out.push(e.entry);
    }
    let r = it.report();
    if r.skipped_segments > 0 || r.unterminated_records > 0 {
        report.warnings.push(format!(
            "{}: {} torn stretch(es) ({} bytes) and {} unterminated record(s) left out",
            log_path.display(),
            r.skipped_segments,
            r.skipped_bytes,
            r.unterminated_records
        ));
    }
    Ok(out)
}

fn import_sessions<F: NorFlash, const N: usize>(
    dir: &Path,
    store: &mut Store<F, N>,
    known: &[String],
    report: &mut ImportReport,
) -> Result<(), FilesError>
where
    F::Error: fmt::Debug,
{
    let sdir = dir.join(SESSIONS_DIR);
    let listing = match fs::read_dir(&sdir) {
        Ok(l) => l,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(()),
        Err(e) => return err(format!("cannot read {}: {e}", sdir.display())),
    };
    let mut names = BTreeSet::new();
    for entry in listing {
        let entry =
            entry.map_err(|e| FilesError(format!("cannot read {}: {e}", sdir.display())))?;
        let name = entry.file_name().to_string_lossy().into_owned();
        if entry.path().is_dir() {
            if name != espclaw::CHAT_MAP_DIR && name != espclaw::SUBAGENT_MAP_DIR {
                report.warnings.push(format!(
                    "{}: a directory ESP-Claw does not write; ignored",
                    entry.path().display()
                ));
            }
            continue;
        }
        names.insert(name);
    }
    for name in &names {
        let Some(stem) = name.strip_suffix(".log") else {
            let paired = [".log.idx", ".log.blocked"].iter().any(|s| {
                name.strip_suffix(s)
                    .is_some_and(|st| names.contains(&format!("{st}.log")))
            });
            if !paired {
                report.warnings.push(format!(
                    "{}: not a session log, or its .log is missing; ignored",
                    sdir.join(name).display()
                ));
            }
            continue;
        };
        let log_path = sdir.join(name);
        let fallback = fallback_session_id(stem);
        let id = match recover_session_id(stem, known) {
            Some(id) if id.is_empty() => {
                return err(format!("{}: the session id is empty", log_path.display()))
            }
            Some(id) if id.len() > MAX_SESSION_ID_BYTES => {
                report.warnings.push(format!(
                    "{}: session id {id:?} is {} bytes, longer than the {MAX_SESSION_ID_BYTES} the engine takes; stored as {fallback:?}, and export writes it back under this file name",
                    log_path.display(),
                    id.len()
                ));
                report
                    .fallback_ids
                    .push(format!("{SESSIONS_DIR}/{name} -> {fallback}"));
                fallback
            }
            Some(id) if fallback_stem(&id) == Some(stem) => {
                report
                    .fallback_ids
                    .push(format!("{SESSIONS_DIR}/{name} -> {id}"));
                id
            }
            Some(id) => id,
            None => {
                report.warnings.push(format!(
                    "{}: no session id found for this file (not in the chat or subagent maps, {IDS_FILE} or --ids, and longer than the 24 bytes a file name keeps); stored as {fallback:?}, and export writes it back under this file name",
                    log_path.display()
                ));
                report
                    .fallback_ids
                    .push(format!("{SESSIONS_DIR}/{name} -> {fallback}"));
                fallback
            }
        };
        let log = read_file(&log_path)?.unwrap_or_default();
        let idx = read_file(&sdir.join(format!("{name}.idx")))?;
        let entries = session_entries(&log_path, &log, idx.as_deref(), report)?;
        if names.contains(&format!("{name}.blocked")) {
            report.blocked_markers += 1;
        }
        let mut compacted = false;
        let mut blocked = false;
        for (n, e) in entries.iter().enumerate() {
            let start = e.offset as usize;
            let body = &log[start..start + e.body_len() as usize];
            let record = Record {
                kind: e.record_type,
                format: e.backend_format,
                body,
            };
            match store.append(&id, &[record], e.record_type == RecordType::AssistantFinal) {
                Ok(out) => {
                    compacted |= out.compacted;
                    blocked |= out.blocked;
                }
                Err(clawmem::Error::Blocked) => {
                    report.warnings.push(format!(
                        "{}: the session is blocked (over its size limit after compaction); records from entry {n} on were not imported",
                        log_path.display()
                    ));
                    break;
                }
                Err(e) => {
                    return Err(engine(
                        &format!("{}: record {n} (byte {start})", log_path.display()),
                        e,
                    ))
                }
            }
            report.records += 1;
        }
        if compacted {
            report.compacted += 1;
        }
        if blocked && !names.contains(&format!("{name}.blocked")) {
            report.warnings.push(format!(
                "{}: over the session limit after compaction; clawmem blocked it",
                log_path.display()
            ));
        }
        report.sessions += 1;
    }
    Ok(())
}

/// `claw_memory_apply_digest_recall_deltas`: the recall lines of
/// `memory/memory_digest.log` from byte `from` on (the index's
/// `last_compact_digest_size`; nothing if that is past the end, as in
/// ESP-Claw) each add 1 to the item's access count and
/// raise its `updated_at` to the recall time. A line is
/// `<time>\trecall\t<id>\taccess_count+1`; other lines are skipped.
fn apply_digest(
    dir: &Path,
    from: u64,
    live: &mut BTreeMap<String, RecordLine>,
    report: &mut ImportReport,
) -> Result<(), FilesError> {
    let path = dir.join(DIGEST_FILE);
    let Some(bytes) = read_file(&path)? else {
        return Ok(());
    };
    let Some(tail) = usize::try_from(from).ok().and_then(|f| bytes.get(f..)) else {
        return Ok(());
    };
    for line in tail.split(|b| *b == b'\n') {
        let fields: Vec<&[u8]> = line
            .split(|b| matches!(*b, b'\t' | b'\r'))
            .filter(|f| !f.is_empty())
            .take(5)
            .collect();
        if fields.len() < 4 || fields[1] != b"recall" || fields[3] != b"access_count+1" {
            continue;
        }
        let Ok(id) = std::str::from_utf8(fields[2]) else {
            continue;
        };
        let Some(rec) = live.get_mut(id) else {
            continue;
        };
        rec.access_count = rec.access_count.saturating_add(1).min(u32::from(u16::MAX));
        // strtoul: the leading digits.
        let digits: Vec<u8> = fields[0]
            .iter()
            .copied()
            .take_while(u8::is_ascii_digit)
            .collect();
        if let Some(ts) = std::str::from_utf8(&digits)
            .ok()
            .and_then(|d| d.parse::<u64>().ok())
        {
            let ts = ts.min(u64::from(u32::MAX)) as u32;
            if ts > rec.updated_at {
                rec.updated_at = ts;
            }
        }
        report.digest_recalls += 1;
    }
    Ok(())
}

/// What ESP-Claw's session manager holds that a clawmem image has no place
/// for, kept in a host-side sidecar file beside the image
/// ([`sidecar_path`]), which `import` writes and `export` reads back:
/// the subagent maps (the engine has no subagent registry) and any chat map
/// the engine could not store (it keeps at most 24 (`MAX_OBJECTS`)
/// objects, chat maps and profile documents together).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Sidecar {
    /// Format version, 1.
    pub version: u32,
    /// `sessions/subagent_map/` files, in file-name order.
    pub subagent_maps: Vec<espclaw::SubagentMapFile>,
    /// Chat maps the engine did not take, in file-name order.
    pub chat_maps: Vec<espclaw::ChatMapFile>,
}

impl Sidecar {
    /// `true` if it holds nothing.
    pub fn is_empty(&self) -> bool {
        self.subagent_maps.is_empty() && self.chat_maps.is_empty()
    }
}

/// Objects a store keeps (the engine's `store::MAX_OBJECTS`): chat maps
/// and profile documents together.
pub const ENGINE_OBJECTS: usize = 24;

/// The sidecar file of an image: `<image>.session-maps.json`.
pub fn sidecar_path(image: &Path) -> PathBuf {
    let mut name = image.as_os_str().to_owned();
    name.push(".session-maps.json");
    PathBuf::from(name)
}

/// The session manager's files of `dir`, read and checked.
#[derive(Debug, Clone, Default)]
struct SessionMaps {
    chats: Vec<espclaw::ChatMapFile>,
    subagents: Vec<espclaw::SubagentMapFile>,
}

impl SessionMaps {
    /// Every session id the maps name: `<chat_key>:<alias>` of each alias,
    /// each subagent map's parent and children.
    fn session_ids(&self) -> Vec<String> {
        let mut ids: Vec<String> = self.chats.iter().flat_map(|m| m.session_ids()).collect();
        for m in &self.subagents {
            ids.push(m.parent_session_id.clone());
            ids.extend(m.child_ids.iter().cloned());
        }
        ids
    }
}

/// The `.json` files of `sessions/<sub>/`, in name order; other entries are
/// named in a warning.
fn map_files(
    dir: &Path,
    sub: &str,
    report: &mut ImportReport,
) -> Result<Vec<(PathBuf, String, Vec<u8>)>, FilesError> {
    let mdir = dir.join(SESSIONS_DIR).join(sub);
    let listing = match fs::read_dir(&mdir) {
        Ok(l) => l,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(Vec::new()),
        Err(e) => return err(format!("cannot read {}: {e}", mdir.display())),
    };
    let mut out = Vec::new();
    for entry in listing {
        let entry =
            entry.map_err(|e| FilesError(format!("cannot read {}: {e}", mdir.display())))?;
        let path = entry.path();
        let name = entry.file_name().to_string_lossy().into_owned();
        if path.is_dir() || !name.ends_with(".json") {
            report.warnings.push(format!(
                "{}: not a session manager map; ignored",
                path.display()
            ));
            continue;
        }
        let bytes = read_file(&path)?.unwrap_or_default();
        out.push((path, name, bytes));
    }
    out.sort_by(|a, b| a.1.cmp(&b.1));
    Ok(out)
}

/// Reads `sessions/chat_map/` and `sessions/subagent_map/` with the checks
/// of `claw_session_mgr_load_mapping_locked` and
/// `claw_session_mgr_load_subagent_map_locked`. A file that fails them is
/// an error naming it and what is wrong (ESP-Claw cannot use it either).
/// A map whose file name is not the one ESP-Claw derives from its key
/// (ESP-Claw never opens it) is read all the same, with a warning; export
/// writes it under the right name.
fn read_session_maps(dir: &Path, report: &mut ImportReport) -> Result<SessionMaps, FilesError> {
    let mut maps = SessionMaps::default();
    for (path, name, bytes) in map_files(dir, espclaw::CHAT_MAP_DIR, report)? {
        let map = espclaw::ChatMapFile::parse(&bytes)
            .map_err(|e| FilesError(format!("{}: {e}", path.display())))?;
        let want = espclaw::chat_map_file_name(&map.chat_key);
        if name != want {
            report.warnings.push(format!(
                "{}: ESP-Claw names the map of {:?} {want}; it never reads this file; imported all the same",
                path.display(),
                map.chat_key
            ));
        }
        if maps.chats.iter().any(|m| m.chat_key == map.chat_key) {
            return err(format!(
                "{}: a second map for chat {:?}",
                path.display(),
                map.chat_key
            ));
        }
        maps.chats.push(map);
    }
    for (path, name, bytes) in map_files(dir, espclaw::SUBAGENT_MAP_DIR, report)? {
        let map = espclaw::SubagentMapFile::parse(&bytes)
            .map_err(|e| FilesError(format!("{}: {e}", path.display())))?;
        let want = espclaw::subagent_map_file_name(&map.parent_session_id);
        if name != want {
            report.warnings.push(format!(
                "{}: ESP-Claw names the subagent map of {:?} {want}; it never reads this file; kept all the same",
                path.display(),
                map.parent_session_id
            ));
        }
        if maps
            .subagents
            .iter()
            .any(|m| m.parent_session_id == map.parent_session_id)
        {
            return err(format!(
                "{}: a second subagent map for {:?}",
                path.display(),
                map.parent_session_id
            ));
        }
        maps.subagents.push(map);
    }
    report.chat_maps = maps.chats.len();
    report.subagent_maps = maps.subagents.len();
    Ok(maps)
}

/// Runs one `/session` command for an import; a refusal is an error.
fn session_cmd<F: NorFlash, const N: usize>(
    store: &mut Store<F, N>,
    key: &ChatKey,
    command: SessionCommand,
) -> Result<(), String>
where
    F::Error: fmt::Debug,
{
    match store.session_command(key, &command) {
        Ok(Ok(_)) => Ok(()),
        Ok(Err(refusal)) => Err(format!("{command:?} refused: {refusal}")),
        Err(e) => Err(format!("{command:?}: {e:?}")),
    }
}

/// Stores `map` as the engine's chat session map of its key, with its
/// aliases in order and its current alias, through `/session` commands
/// (the engine's public way to shape a map): the chat's first use gives
/// `[default_01]`; the map's first alias is added and `default_01` deleted
/// unless it is that alias; the others are added in order; the current one
/// is switched to. Runs before any session history is imported, so the
/// delete removes no history. The result is read back and compared.
fn store_chat_map<F: NorFlash, const N: usize>(
    store: &mut Store<F, N>,
    map: &espclaw::ChatMapFile,
) -> Result<(), String>
where
    F::Error: fmt::Debug,
{
    let key = ChatKey::from_stored(map.chat_key.as_bytes()).map_err(|e| e.to_string())?;
    let alias = |a: &str| Alias::new(a).map_err(|e| format!("alias {a:?}: {e:?}"));
    let first = store.chat_sessions(&key).map_err(|e| format!("{e:?}"))?;
    let fresh = first.aliases().len() == 1 && first.aliases()[0].as_str() == FIRST_DEFAULT_ALIAS;
    if !fresh {
        return Err("the store already holds a map for this chat".into());
    }
    let (head, rest) = map.sessions.split_first().ok_or("no aliases")?;
    if head != FIRST_DEFAULT_ALIAS {
        session_cmd(store, &key, SessionCommand::New(Some(alias(head)?)))?;
        session_cmd(
            store,
            &key,
            SessionCommand::Delete(alias(FIRST_DEFAULT_ALIAS)?),
        )?;
    }
    for a in rest {
        session_cmd(store, &key, SessionCommand::New(Some(alias(a)?)))?;
    }
    session_cmd(
        store,
        &key,
        SessionCommand::Switch(alias(&map.current_alias)?),
    )?;
    let got = store.chat_sessions(&key).map_err(|e| format!("{e:?}"))?;
    let aliases: Vec<&str> = got.aliases().iter().map(|a| a.as_str()).collect();
    if aliases != map.sessions.iter().map(String::as_str).collect::<Vec<_>>()
        || got.current().as_str() != map.current_alias
    {
        return Err(format!(
            "the engine holds {aliases:?} (current {}) instead",
            got.current().as_str()
        ));
    }
    Ok(())
}

/// Stores the chat maps in the engine; those it cannot take go to the
/// sidecar, with a warning naming the file.
fn import_chat_maps<F: NorFlash, const N: usize>(
    dir: &Path,
    store: &mut Store<F, N>,
    maps: &SessionMaps,
    sidecar: &mut Sidecar,
    report: &mut ImportReport,
) where
    F::Error: fmt::Debug,
{
    // The engine keeps 24 objects, chat maps and profile documents
    // together; the profiles keep their room, written or not.
    let limit = ENGINE_OBJECTS - ProfileDoc::ALL.len();
    for map in &maps.chats {
        let stored = if report.chat_maps_stored >= limit {
            Err(format!(
                "it keeps {ENGINE_OBJECTS} objects, {limit} of them chat maps beside the profile documents"
            ))
        } else {
            store_chat_map(store, map)
        };
        match stored {
            Ok(()) => report.chat_maps_stored += 1,
            Err(e) => {
                report.warnings.push(format!(
                    "{}: the engine did not store this chat map ({e}); kept in the sidecar file, and export writes it back",
                    dir.join(SESSIONS_DIR)
                        .join(espclaw::CHAT_MAP_DIR)
                        .join(espclaw::chat_map_file_name(&map.chat_key))
                        .display()
                ));
                sidecar.chat_maps.push(map.clone());
            }
        }
    }
}

fn import_memory<F: NorFlash, const N: usize>(
    dir: &Path,
    store: &mut Store<F, N>,
    opts: &ImportOptions,
    report: &mut ImportReport,
) -> Result<(), FilesError>
where
    F::Error: fmt::Debug,
{
    let index_path = dir.join(INDEX_FILE);
    let mut index = None;
    if let Some(bytes) = read_file(&index_path)? {
        match espclaw::parse_index(&bytes) {
            Ok(parsed) => {
                for p in &parsed.problems {
                    report.warnings.push(format!(
                        "{}: {p}; the catalog is rebuilt from the records",
                        index_path.display()
                    ));
                }
                report.index_shape = Some(parsed.shape);
                index = Some(parsed);
            }
            Err(e) => report.warnings.push(format!(
                "{}: {e}; the catalog is rebuilt from the records",
                index_path.display()
            )),
        }
    }
    let path = dir.join(RECORDS_FILE);
    let Some(bytes) = read_file(&path)? else {
        return Ok(());
    };
    let text = utf8(&path, &bytes)?;
    // The event log replayed: the last snapshot of an id wins, a tombstone
    // forgets it; first appearance gives the order.
    let mut order: Vec<String> = Vec::new();
    let mut live: BTreeMap<String, RecordLine> = BTreeMap::new();
    for (n, line) in text.lines().enumerate() {
        let lineno = n + 1;
        if line.trim().is_empty() {
            continue;
        }
        report.record_lines += 1;
        let rec: RecordLine = match serde_json::from_str(line) {
            Ok(r) => r,
            Err(e) => {
                let msg = format!(
                    "{}: line {lineno} column {}: {e}",
                    path.display(),
                    e.column()
                );
                if opts.skip_bad_lines {
                    report.warnings.push(format!("{msg}; skipped"));
                    continue;
                }
                return err(format!("{msg} (pass --skip-bad-lines to leave it out)"));
            }
        };
        if rec.deleted {
            live.remove(&rec.id);
            continue;
        }
        if rec.content.trim().is_empty() {
            let msg = format!(
                "{}: line {lineno}: item {} has empty content",
                path.display(),
                rec.id
            );
            if opts.skip_bad_lines {
                report.warnings.push(format!("{msg}; skipped"));
                continue;
            }
            return err(msg);
        }
        if !live.contains_key(&rec.id) {
            order.retain(|id| id != &rec.id);
            order.push(rec.id.clone());
        }
        live.insert(rec.id.clone(), rec);
    }
    if let Some(index) = &index {
        for rec in live.values() {
            for sid in &rec.summary_ids {
                if !index
                    .summaries
                    .iter()
                    .any(|s| s.summary_id == *sid && *sid > 0)
                {
                    report.warnings.push(format!(
                        "{}: item {} names summary id {sid}, which {} does not hold (ESP-Claw recall would not find it by that label)",
                        path.display(),
                        rec.id,
                        index_path.display()
                    ));
                }
            }
        }
    }
    let digest_from = index.as_ref().map_or(0, |i| i.last_compact_digest_size);
    apply_digest(dir, digest_from, &mut live, report)?;
    for id in order {
        let Some(rec) = live.get(&id) else { continue };
        report.memory_items += 1;
        let input = ItemInput {
            content: &rec.content,
            tags: &rec.tags,
            keywords: &rec.keywords,
            source: &rec.source,
        };
        let access = u16::try_from(rec.access_count).unwrap_or(u16::MAX);
        let stored = store
            .memory_import(
                &input,
                rec.created_at,
                rec.updated_at.max(rec.created_at),
                access,
            )
            .map_err(|e| engine(&format!("{}: item {id}", path.display()), e))?;
        if stored.changed {
            report.memory_stored += 1;
        } else {
            report.memory_merged += 1;
        }
    }
    Ok(())
}

fn import_profiles<F: NorFlash, const N: usize>(
    dir: &Path,
    store: &mut Store<F, N>,
    report: &mut ImportReport,
) -> Result<(), FilesError>
where
    F::Error: fmt::Debug,
{
    for doc in ProfileDoc::ALL {
        let path = dir.join(MEMORY_DIR).join(doc.file_name());
        let Some(bytes) = read_file(&path)? else {
            continue;
        };
        let body = utf8(&path, &bytes)?;
        store
            .profile_write(doc, body)
            .map_err(|e| engine(&path.display().to_string(), e))?;
        report.profiles += 1;
    }
    Ok(())
}

/// Reads the session-id list at `path` (one id per line).
pub fn read_ids(path: &Path) -> Result<Vec<String>, FilesError> {
    let bytes =
        fs::read(path).map_err(|e| FilesError(format!("cannot read {}: {e}", path.display())))?;
    Ok(utf8(path, &bytes)?
        .lines()
        .filter(|l| !l.is_empty())
        .map(str::to_string)
        .collect())
}

/// Stores everything of `dir` (ESP-Claw's layout) into `store`, which
/// should be freshly formatted. The subagent maps, which the engine has no
/// place for, are in the report's sidecar ([`import_dir_with_sidecar`]
/// returns it; [`import_to_image`] writes it beside the image).
pub fn import_dir<F: NorFlash, const N: usize>(
    dir: &Path,
    store: &mut Store<F, N>,
    opts: &ImportOptions,
) -> Result<ImportReport, FilesError>
where
    F::Error: fmt::Debug,
{
    import_dir_with_sidecar(dir, store, opts).map(|(r, _)| r)
}

/// [`import_dir`], also returning what goes to the sidecar file.
pub fn import_dir_with_sidecar<F: NorFlash, const N: usize>(
    dir: &Path,
    store: &mut Store<F, N>,
    opts: &ImportOptions,
) -> Result<(ImportReport, Sidecar), FilesError>
where
    F::Error: fmt::Debug,
{
    if !dir.is_dir() {
        return err(format!("{}: not a directory", dir.display()));
    }
    let mut report = ImportReport::default();
    let mut known = opts.ids.clone();
    let ids_path: PathBuf = dir.join(IDS_FILE);
    if ids_path.exists() {
        known.extend(read_ids(&ids_path)?);
    }
    let maps = read_session_maps(dir, &mut report)?;
    known.extend(maps.session_ids());
    let mut sidecar = Sidecar {
        version: 1,
        subagent_maps: maps.subagents.clone(),
        chat_maps: Vec::new(),
    };
    // Memory and profiles first: they are small, and a session log that
    // does not fit then fails with everything else stored. Chat maps
    // before the session histories (see `store_chat_map`).
    import_memory(dir, store, opts, &mut report)?;
    import_profiles(dir, store, &mut report)?;
    import_chat_maps(dir, store, &maps, &mut sidecar, &mut report);
    import_sessions(dir, store, &known, &mut report)?;
    Ok((report, sidecar))
}

// ---- images -------------------------------------------------------------------

/// Mounts the image file `image` (of part `preset`) in RAM and exports it
/// into `dir`. The image file is not changed.
pub fn export_image(image: &Path, preset: Preset, dir: &Path) -> Result<ExportReport, FilesError> {
    fn on<F: SimBacked>(
        flash: SimFlash,
        dir: &Path,
        name: &str,
        sidecar: &Sidecar,
    ) -> Result<ExportReport, FilesError> {
        let (config, _) = fit_config::<F>(flash.model()).map_err(|e| FilesError(e.0))?;
        let wrapped = F::wrap(flash).map_err(|e| FilesError(format!("{name}: {}", e.0)))?;
        let mut store =
            Store::<F, MAX_SESSIONS>::mount(wrapped, config, MountMode::ExistingOnly)
                .map_err(|e| FilesError(format!("{name}: not a clawmem image that mounts: {e}")))?;
        export_store_with_sidecar(&mut store, dir, sidecar)
    }
    let bytes =
        fs::read(image).map_err(|e| FilesError(format!("cannot read {}: {e}", image.display())))?;
    let name = image.display().to_string();
    let sidecar = read_sidecar(image)?;
    let flash = sim_of(&name, preset, &bytes)?;
    dispatch!(preset, on(flash, dir, &name, &sidecar))
}

/// The sidecar of `image` ([`sidecar_path`]), empty if there is none.
pub fn read_sidecar(image: &Path) -> Result<Sidecar, FilesError> {
    let path = sidecar_path(image);
    let Some(bytes) = read_file(&path)? else {
        return Ok(Sidecar::default());
    };
    let sidecar: Sidecar = serde_json::from_slice(&bytes).map_err(|e| {
        FilesError(format!(
            "{}: line {} column {}: {e}",
            path.display(),
            e.line(),
            e.column()
        ))
    })?;
    if sidecar.version != 1 {
        return err(format!(
            "{}: version {}, this export reads 1",
            path.display(),
            sidecar.version
        ));
    }
    Ok(sidecar)
}

/// Formats a fresh image of `size_bytes` (the preset's default if `None`)
/// for part `preset`, imports `dir` into it and writes it to `image`. The
/// image file is written only if the import succeeds.
pub fn import_to_image(
    dir: &Path,
    image: &Path,
    preset: Preset,
    size_bytes: Option<usize>,
    opts: &ImportOptions,
) -> Result<ImportReport, FilesError> {
    fn on<F: SimBacked>(
        flash: SimFlash,
        dir: &Path,
        opts: &ImportOptions,
    ) -> Result<(ImportReport, Sidecar, SimFlash), FilesError> {
        let (config, _) = fit_config::<F>(flash.model()).map_err(|e| FilesError(e.0))?;
        let wrapped = F::wrap(flash).map_err(|e| FilesError(e.0))?;
        let mut store = Store::<F, MAX_SESSIONS>::format(wrapped, config)
            .map_err(|e| FilesError(format!("format failed: {e}")))?;
        let (report, sidecar) = import_dir_with_sidecar(dir, &mut store, opts)?;
        store
            .check()
            .map_err(|e| engine("check after the import", e))?;
        Ok((report, sidecar, store.into_flash().into_sim()))
    }
    let model = preset
        .model(size_bytes.unwrap_or_else(|| preset.default_capacity()))
        .map_err(|e| FilesError(e.0))?;
    let flash = SimFlash::new(model);
    let (mut report, sidecar, flash) = dispatch!(preset, on(flash, dir, opts))?;
    fs::write(image, flash.image())
        .map_err(|e| FilesError(format!("cannot write {}: {e}", image.display())))?;
    // The sidecar belongs to this image: an old one is replaced or removed.
    let side = sidecar_path(image);
    if sidecar.is_empty() {
        match fs::remove_file(&side) {
            Ok(()) => {}
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
            Err(e) => return err(format!("cannot remove {}: {e}", side.display())),
        }
    } else {
        let text = serde_json::to_string_pretty(&sidecar).map_err(|e| FilesError(e.to_string()))?;
        fs::write(&side, text + "\n")
            .map_err(|e| FilesError(format!("cannot write {}: {e}", side.display())))?;
        report.sidecar = Some(side.display().to_string());
    }
    Ok(report)
}

/// A RAM simulator holding `bytes`, an image of part `preset`.
fn sim_of(name: &str, preset: Preset, bytes: &[u8]) -> Result<SimFlash, FilesError> {
    let model = preset.model(bytes.len()).map_err(|e| {
        FilesError(format!(
            "{name}: {} B is not a {} image: {}",
            bytes.len(),
            preset.name(),
            e.0
        ))
    })?;
    SimFlash::from_image(&model, bytes).map_err(|e| FilesError(format!("{name}: {e:?}")))
}
