//! ESP-Claw's own rules for the files `export` writes and `import` reads,
//! each named after the C function it follows (ESP-Claw
//! `components/claw_modules/claw_memory/src/claw_memory_storage.c`,
//! `claw_memory_cap.c`, `claw_memory_utils.c` at commit 9354591b, and
//! `claw_manager/src/claw_session_mgr.c`).
//!
//! - The summary-label catalog of `memory_index.json`: labels from tags
//!   ([`collect_summary_labels`]), ids and reference counts as
//!   `claw_memory_compact_internal` assigns them ([`CompactedIndex`]), the
//!   keyword index ([`CompactedIndex::keyword_index`]), the file as
//!   `claw_memory_save_index` prints it ([`CompactedIndex::render`]), and the
//!   reading of the file in ESP-Claw's shape and in the shape clawmem's
//!   export wrote before (`id`, `refs`, `keywords`; [`parse_index`]).
//! - The session manager's files: `sessions/chat_map/chat_<safe>_<hash>.json`
//!   ([`chat_map_file_name`], [`ChatMapFile`]) and
//!   `sessions/subagent_map/subagents_<safe>_<hash>.json`
//!   ([`subagent_map_file_name`], [`SubagentMapFile`]), read with the checks
//!   of `claw_session_mgr_load_mapping_locked` and
//!   `claw_session_mgr_load_subagent_map_locked` and written byte for byte
//!   as `claw_session_mgr_write_mapping_locked` and
//!   `claw_session_mgr_write_subagent_map_locked` write them (cJSON's
//!   unformatted print, no trailing newline).

use serde::{Deserialize, Serialize};
use serde_json::Value;

use clawmem::naming::{fnv1a32, hash_hex};

/// `CLAW_MEMORY_MAX_SUMMARIES`: labels per item.
pub const MAX_SUMMARIES: usize = 3;
/// `CLAW_MEMORY_MAX_LABEL_CHARS`: characters ESP-Claw keeps of a label.
pub const MAX_LABEL_CHARS: usize = 8;
/// `CLAW_MEMORY_MAX_LABEL_TEXT`: the label buffer, NUL included.
pub const MAX_LABEL_TEXT: usize = 40;
/// Version of `memory_index.json` that ESP-Claw writes.
pub const INDEX_VERSION: u32 = 3;
/// `CLAW_SESSION_MGR_MAX_SESSIONS`: aliases per chat.
pub const MAX_CHAT_SESSIONS: usize = 32;
/// `CLAW_SESSION_MGR_ALIAS_MAX`.
pub const ALIAS_MAX: usize = 32;
/// `CLAW_SESSION_MGR_SUBAGENT_MAX`: children per parent.
pub const SUBAGENT_MAX: usize = 16;
/// `CLAW_SESSION_MGR_KEY_SIZE`: a chat key's buffer, NUL included.
pub const CHAT_KEY_SIZE: usize = 160;
/// `CLAW_SESSION_MGR_ID_SIZE`: a session id's buffer, NUL included.
pub const SESSION_ID_SIZE: usize = 256;
/// Directory of the chat maps, under `sessions/`.
pub const CHAT_MAP_DIR: &str = "chat_map";
/// Directory of the subagent maps, under `sessions/`.
pub const SUBAGENT_MAP_DIR: &str = "subagent_map";

// ---- C string helpers (claw_memory_utils.c) ---------------------------------

/// `safe_copy(dst, size, src)`: at most `size - 1` bytes (may cut a
/// character; later steps drop the broken sequence).
fn safe_copy(src: &[u8], size: usize) -> &[u8] {
    &src[..src.len().min(size.saturating_sub(1))]
}

/// C `isspace` in the C locale.
fn is_c_space(b: u8) -> bool {
    matches!(b, b' ' | b'\t' | b'\n' | 0x0b | 0x0c | b'\r')
}

/// `trim_whitespace`.
fn trim_whitespace(mut s: &[u8]) -> &[u8] {
    while let [first, rest @ ..] = s {
        if !is_c_space(*first) {
            break;
        }
        s = rest;
    }
    while let [rest @ .., last] = s {
        if !is_c_space(*last) {
            break;
        }
        s = rest;
    }
    s
}

/// `utf8_sequence_len`.
fn utf8_sequence_len(b: u8) -> usize {
    if b < 0x80 {
        1
    } else if b & 0xE0 == 0xC0 {
        2
    } else if b & 0xF0 == 0xE0 {
        3
    } else if b & 0xF8 == 0xF0 {
        4
    } else {
        0
    }
}

/// `utf8_copy_chars(dst, dst_size, src, max_chars)`: whole sequences only,
/// invalid lead or continuation bytes skipped.
fn utf8_copy_chars(src: &[u8], dst_size: usize, max_chars: usize) -> Vec<u8> {
    let mut out = Vec::new();
    let (mut i, mut chars) = (0usize, 0usize);
    while i < src.len() && src[i] != 0 && out.len() + 1 < dst_size && chars < max_chars {
        let len = utf8_sequence_len(src[i]);
        let valid = len > 0 && (1..len).all(|k| src.get(i + k).is_some_and(|b| b & 0xC0 == 0x80));
        if !valid {
            i += 1;
            continue;
        }
        if out.len() + len >= dst_size {
            break;
        }
        out.extend_from_slice(&src[i..i + len]);
        i += len;
        chars += 1;
    }
    out
}

/// `strtok_r(text, ",;/|")`: the non-empty tokens.
fn tokens(text: &[u8]) -> impl Iterator<Item = &[u8]> {
    text.split(|b| b",;/|".contains(b))
        .filter(|t| !t.is_empty())
}

// ---- summary labels (claw_memory_cap.c) -----------------------------------

/// `claw_memory_collect_summary_labels`: the labels ESP-Claw gives an item
/// with these tags. The tags are read up to 127 bytes; each token is cut to
/// 39 bytes, trimmed, then cut to 8 characters (a trailing space the cut
/// exposes stays, as in ESP-Claw); an empty or repeated label is skipped;
/// at most 3.
pub fn collect_summary_labels(tags: &str) -> Vec<String> {
    let tag_copy = safe_copy(tags.as_bytes(), 128);
    let mut labels: Vec<String> = Vec::new();
    for token in tokens(tag_copy) {
        if labels.len() >= MAX_SUMMARIES {
            break;
        }
        let trimmed = trim_whitespace(safe_copy(token, MAX_LABEL_TEXT));
        let limited = utf8_copy_chars(trimmed, MAX_LABEL_TEXT, MAX_LABEL_CHARS);
        let limited = String::from_utf8_lossy(&limited).into_owned();
        if !limited.is_empty() && !labels.contains(&limited) {
            labels.push(limited);
        }
    }
    labels
}

// ---- memory_index.json -----------------------------------------------------

/// One entry of the catalog: `{"summary_id":..,"label":..,"ref_count":..}`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Summary {
    /// `summary_id`: what items list in `summary_ids`.
    pub summary_id: u32,
    /// The label.
    pub label: String,
    /// `ref_count`: active items carrying it.
    pub ref_count: u32,
}

/// The index `claw_memory_compact_internal` builds for a list of active
/// items, in their order, with no earlier index (so ids are handed out
/// from 1 in order of first use).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct CompactedIndex {
    /// The catalog, in order of first use.
    pub summaries: Vec<Summary>,
    /// `keyword_index`: term to item ids, in order of first use; terms
    /// compare as cJSON's `cJSON_GetObjectItem` does (ASCII case ignored),
    /// so the first spelling names the entry.
    pub keyword_index: Vec<(String, Vec<String>)>,
}

impl CompactedIndex {
    /// Adds an item (`claw_memory_ensure_summary_label` for each of its
    /// labels, then `claw_memory_adjust_summary_stats`); returns its
    /// `summary_ids`.
    pub fn add_item(&mut self, tags: &str) -> Vec<u32> {
        let mut ids = Vec::new();
        for label in collect_summary_labels(tags) {
            let id = match self.summaries.iter().find(|s| s.label == label) {
                Some(s) => s.summary_id,
                None => {
                    let id = self.next_summary_id();
                    self.summaries.push(Summary {
                        summary_id: id,
                        label,
                        ref_count: 0,
                    });
                    id
                }
            };
            ids.push(id);
        }
        for id in &ids {
            if let Some(s) = self.summaries.iter_mut().find(|s| s.summary_id == *id) {
                s.ref_count += 1;
            }
        }
        ids
    }

    /// `claw_memory_rebuild_keyword_index` for one item: its keywords, or
    /// its tags when it has none; each term cut to 47 bytes and trimmed.
    pub fn add_keywords(&mut self, id: &str, keywords: &str, tags: &str) {
        let csv = if keywords.is_empty() { tags } else { keywords };
        for token in tokens(safe_copy(csv.as_bytes(), 160)) {
            let term = trim_whitespace(safe_copy(token, 48));
            if term.is_empty() {
                continue;
            }
            let term = String::from_utf8_lossy(term).into_owned();
            let at = match self
                .keyword_index
                .iter()
                .position(|(k, _)| k.eq_ignore_ascii_case(&term))
            {
                Some(at) => at,
                None => {
                    self.keyword_index.push((term, Vec::new()));
                    self.keyword_index.len() - 1
                }
            };
            let ids = &mut self.keyword_index[at].1;
            if !ids.iter().any(|i| i == id) {
                ids.push(id.to_string());
            }
        }
    }

    /// `next_summary_id`: one past the largest id (1 when there is none).
    pub fn next_summary_id(&self) -> u32 {
        self.summaries
            .iter()
            .map(|s| s.summary_id + 1)
            .max()
            .unwrap_or(1)
    }

    /// The file as ESP-Claw's compaction leaves it: `cJSON_PrintUnformatted`
    /// of the index built by `claw_memory_new_index_root` and then changed
    /// (`next_summary_id` and `last_compact_digest_size` are replaced by
    /// delete-and-add, so they move to the end), no trailing newline.
    /// `last_compact_digest_size` is 0: export writes an empty
    /// `memory_digest.log` beside it.
    pub fn render(&self) -> String {
        let mut summaries = String::from("[");
        for (n, s) in self.summaries.iter().enumerate() {
            if n > 0 {
                summaries.push(',');
            }
            summaries.push_str(&format!(
                "{{\"summary_id\":{},\"label\":{},\"ref_count\":{}}}",
                s.summary_id,
                json_str(&s.label),
                s.ref_count
            ));
        }
        summaries.push(']');
        let mut keywords = String::from("{");
        for (n, (term, ids)) in self.keyword_index.iter().enumerate() {
            if n > 0 {
                keywords.push(',');
            }
            let ids: Vec<String> = ids.iter().map(|i| json_str(i)).collect();
            keywords.push_str(&format!("{}:[{}]", json_str(term), ids.join(",")));
        }
        keywords.push('}');
        if self.summaries.is_empty() {
            format!(
                "{{\"version\":{INDEX_VERSION},\"next_summary_id\":1,\"summaries\":{summaries},\"keyword_index\":{keywords},\"last_compact_digest_size\":0}}"
            )
        } else {
            format!(
                "{{\"version\":{INDEX_VERSION},\"summaries\":{summaries},\"keyword_index\":{keywords},\"next_summary_id\":{},\"last_compact_digest_size\":0}}",
                self.next_summary_id()
            )
        }
    }
}

/// A JSON string as cJSON prints it (the same escapes as serde_json's for
/// valid UTF-8: `\"`, `\\`, `\b \f \n \r \t`, other control bytes as
/// `\u00xx`).
pub fn json_str(s: &str) -> String {
    serde_json::to_string(s).unwrap_or_else(|_| "\"\"".to_string())
}

/// Which writer's field names an index file has.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum IndexShape {
    /// ESP-Claw's: `summary_id`, `ref_count`, `keyword_index`.
    EspClaw,
    /// clawmem's export before it wrote ESP-Claw's: `id`, `refs`, `keywords`.
    OldClawmem,
}

/// `memory_index.json` as read by `claw_memory_load_index`.
#[derive(Debug, Clone, PartialEq)]
pub struct ParsedIndex {
    /// Whose field names it has.
    pub shape: IndexShape,
    /// `version`, if it is a number.
    pub version: Option<u64>,
    /// The catalog; a missing or non-numeric id or count reads as 0 (as in
    /// ESP-Claw); entries without a label are dropped (as in ESP-Claw).
    pub summaries: Vec<Summary>,
    /// `last_compact_digest_size` (0 if missing).
    pub last_compact_digest_size: u64,
    /// Problems found, each a sentence.
    pub problems: Vec<String>,
}

fn num_u32(v: Option<&Value>) -> Option<u32> {
    let v = v?;
    v.as_u64()
        .map(|n| n.min(u64::from(u32::MAX)) as u32)
        .or_else(|| v.as_f64().filter(|f| *f > 0.0).map(|f| f as u32))
        .or(Some(0))
        .filter(|_| v.is_number())
}

/// Reads an index file in either shape. An error is a file ESP-Claw's
/// loader fails on (not JSON, or not an object); anything it would repair
/// or read as 0 is listed in `problems`.
pub fn parse_index(bytes: &[u8]) -> Result<ParsedIndex, String> {
    let root: Value = serde_json::from_slice(bytes)
        .map_err(|e| format!("line {} column {}: {e}", e.line(), e.column()))?;
    let Some(obj) = root.as_object() else {
        return Err("not a JSON object (ESP-Claw's loader fails on it)".into());
    };
    let mut problems = Vec::new();
    let entries: Vec<&serde_json::Map<String, Value>> = match obj.get("summaries") {
        Some(Value::Array(a)) => a.iter().filter_map(Value::as_object).collect(),
        Some(_) => {
            problems.push("\"summaries\" is not an array".into());
            Vec::new()
        }
        None => {
            problems.push("no \"summaries\"".into());
            Vec::new()
        }
    };
    let old = entries
        .iter()
        .any(|e| e.contains_key("id") || e.contains_key("refs"))
        && !entries
            .iter()
            .any(|e| e.contains_key("summary_id") || e.contains_key("ref_count"));
    let old = old || (entries.is_empty() && obj.contains_key("keywords"));
    let (id_key, refs_key, kw_key) = if old {
        ("id", "refs", "keywords")
    } else {
        ("summary_id", "ref_count", "keyword_index")
    };
    let mut summaries = Vec::new();
    for (n, e) in entries.iter().enumerate() {
        let Some(label) = e
            .get("label")
            .and_then(Value::as_str)
            .filter(|l| !l.is_empty())
        else {
            problems.push(format!("summary {n} has no label"));
            continue;
        };
        let id = num_u32(e.get(id_key));
        let refs = num_u32(e.get(refs_key));
        if id.is_none_or(|i| i == 0) {
            problems.push(format!(
                "summary {label:?} has no \"{id_key}\" (reads as 0)"
            ));
        }
        if refs.is_none() {
            problems.push(format!(
                "summary {label:?} has no \"{refs_key}\" (reads as 0)"
            ));
        }
        summaries.push(Summary {
            summary_id: id.unwrap_or(0),
            label: label.to_string(),
            ref_count: refs.unwrap_or(0),
        });
    }
    if !obj.get(kw_key).is_some_and(Value::is_object) {
        problems.push(format!("no \"{kw_key}\" object"));
    }
    let version = obj.get("version").and_then(Value::as_u64);
    if version != Some(u64::from(INDEX_VERSION)) {
        problems.push(format!(
            "version is {:?}, not {INDEX_VERSION}",
            obj.get("version")
        ));
    }
    if !old && !obj.get("next_summary_id").is_some_and(Value::is_number) {
        problems.push("no \"next_summary_id\"".into());
    }
    Ok(ParsedIndex {
        shape: if old {
            IndexShape::OldClawmem
        } else {
            IndexShape::EspClaw
        },
        version,
        summaries,
        last_compact_digest_size: obj
            .get("last_compact_digest_size")
            .and_then(Value::as_u64)
            .unwrap_or(0),
        problems,
    })
}

// ---- session manager (claw_session_mgr.c) ---------------------------------

/// `claw_session_mgr_sanitize` into a 40-byte buffer: ASCII letters and
/// digits kept, every run of other bytes one `_`, a trailing `_` dropped;
/// then cut to 24 bytes (`claw_session_mgr_build_mapping_path`).
pub fn session_mgr_safe_name(key: &str) -> String {
    let mut out: Vec<u8> = Vec::new();
    for &b in key.as_bytes() {
        if out.len() + 1 >= 40 {
            break;
        }
        if b.is_ascii_alphanumeric() {
            out.push(b);
        } else if out.last() != Some(&b'_') {
            out.push(b'_');
        }
    }
    if out.last() == Some(&b'_') {
        out.pop();
    }
    out.truncate(24);
    String::from_utf8_lossy(&out).into_owned()
}

fn map_file_name(prefix: &str, empty: &str, key: &str) -> String {
    let safe = session_mgr_safe_name(key);
    let hash = hash_hex(fnv1a32(key.as_bytes()));
    format!(
        "{prefix}_{}_{}.json",
        if safe.is_empty() { empty } else { &safe },
        String::from_utf8_lossy(&hash)
    )
}

/// `claw_session_mgr_build_mapping_path`: `chat_<safe>_<hash>.json`
/// (`default` for an empty safe name).
pub fn chat_map_file_name(chat_key: &str) -> String {
    map_file_name("chat", "default", chat_key)
}

/// `claw_session_mgr_build_subagent_mapping_path_locked`:
/// `subagents_<safe>_<hash>.json` (`parent` for an empty safe name).
pub fn subagent_map_file_name(parent_session_id: &str) -> String {
    map_file_name("subagents", "parent", parent_session_id)
}

/// `claw_session_mgr_alias_is_valid`: 1 to 32 bytes of `[A-Za-z0-9_-]`.
pub fn alias_is_valid(alias: &str) -> bool {
    !alias.is_empty()
        && alias.len() <= ALIAS_MAX
        && alias
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'_' || b == b'-')
}

/// A chat map file: `{"chat_key":..,"current_alias":..,"sessions":[..]}`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ChatMapFile {
    /// The chat key (`chat:<channel>:<chat_id>`, `agent:<n>:chat:...`).
    pub chat_key: String,
    /// The current alias.
    pub current_alias: String,
    /// The aliases, in creation order.
    pub sessions: Vec<String>,
}

impl ChatMapFile {
    /// Reads a map file with the checks of
    /// `claw_session_mgr_load_mapping_locked` and
    /// `claw_session_mgr_validate_alias_map`; the error says what is wrong.
    pub fn parse(bytes: &[u8]) -> Result<ChatMapFile, String> {
        let root: Value = serde_json::from_slice(bytes)
            .map_err(|e| format!("line {} column {}: {e}", e.line(), e.column()))?;
        let obj = root.as_object().ok_or("not a JSON object")?;
        let chat_key = obj
            .get("chat_key")
            .and_then(Value::as_str)
            .filter(|k| !k.is_empty())
            .ok_or("no \"chat_key\" string")?;
        if chat_key.len() >= CHAT_KEY_SIZE {
            return Err(format!(
                "\"chat_key\" is {} bytes, longer than ESP-Claw's {}",
                chat_key.len(),
                CHAT_KEY_SIZE - 1
            ));
        }
        let current = obj
            .get("current_alias")
            .and_then(Value::as_str)
            .ok_or("no \"current_alias\" string")?;
        if !alias_is_valid(current) {
            return Err(format!(
                "\"current_alias\" {current:?} is not a valid alias"
            ));
        }
        let sessions = obj
            .get("sessions")
            .and_then(Value::as_array)
            .ok_or("no \"sessions\" array")?;
        if sessions.is_empty() || sessions.len() > MAX_CHAT_SESSIONS {
            return Err(format!(
                "\"sessions\" has {} aliases (1 to {MAX_CHAT_SESSIONS})",
                sessions.len()
            ));
        }
        let mut aliases: Vec<String> = Vec::new();
        for (n, a) in sessions.iter().enumerate() {
            let a = a
                .as_str()
                .filter(|a| alias_is_valid(a))
                .ok_or_else(|| format!("\"sessions\"[{n}] is not a valid alias"))?;
            if aliases.iter().any(|x| x == a) {
                return Err(format!("\"sessions\" lists {a:?} twice"));
            }
            aliases.push(a.to_string());
        }
        if !aliases.iter().any(|a| a == current) {
            return Err(format!(
                "\"current_alias\" {current:?} is not in \"sessions\""
            ));
        }
        Ok(ChatMapFile {
            chat_key: chat_key.to_string(),
            current_alias: current.to_string(),
            sessions: aliases,
        })
    }

    /// The file as `claw_session_mgr_write_mapping_locked` writes it.
    pub fn render(&self) -> String {
        let aliases: Vec<String> = self.sessions.iter().map(|a| json_str(a)).collect();
        format!(
            "{{\"chat_key\":{},\"current_alias\":{},\"sessions\":[{}]}}",
            json_str(&self.chat_key),
            json_str(&self.current_alias),
            aliases.join(",")
        )
    }

    /// The session ids of the map's aliases, `<chat_key>:<alias>`
    /// (`claw_session_mgr_build_alias_session_id`).
    pub fn session_ids(&self) -> impl Iterator<Item = String> + '_ {
        self.sessions
            .iter()
            .map(|a| format!("{}:{a}", self.chat_key))
    }
}

/// A subagent map file:
/// `{"parent_session_id":..,"next_suffix":..,"child_ids":[..]}`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct SubagentMapFile {
    /// The parent session.
    pub parent_session_id: String,
    /// The number the next child gets (`<parent>:subagent_NN`).
    pub next_suffix: u32,
    /// The children's session ids, at most 16.
    pub child_ids: Vec<String>,
}

impl SubagentMapFile {
    /// Reads a map file with the checks of
    /// `claw_session_mgr_load_subagent_map_locked`: `child_ids` may be
    /// missing (no children), `next_suffix` is a number of at least 1 (a
    /// fraction is cut, as the C cast does).
    pub fn parse(bytes: &[u8]) -> Result<SubagentMapFile, String> {
        let root: Value = serde_json::from_slice(bytes)
            .map_err(|e| format!("line {} column {}: {e}", e.line(), e.column()))?;
        let obj = root.as_object().ok_or("not a JSON object")?;
        let parent = obj
            .get("parent_session_id")
            .and_then(Value::as_str)
            .filter(|p| !p.is_empty())
            .ok_or("no \"parent_session_id\" string")?;
        if parent.len() >= SESSION_ID_SIZE {
            return Err(format!(
                "\"parent_session_id\" is {} bytes, longer than ESP-Claw's {}",
                parent.len(),
                SESSION_ID_SIZE - 1
            ));
        }
        let next = obj
            .get("next_suffix")
            .and_then(Value::as_f64)
            .filter(|n| *n >= 1.0)
            .ok_or("no \"next_suffix\" number of at least 1")?;
        let mut child_ids = Vec::new();
        if let Some(Value::Array(children)) = obj.get("child_ids") {
            if children.len() > SUBAGENT_MAX {
                return Err(format!(
                    "\"child_ids\" has {} ids, more than {SUBAGENT_MAX}",
                    children.len()
                ));
            }
            for (n, c) in children.iter().enumerate() {
                let c = c
                    .as_str()
                    .filter(|c| !c.is_empty())
                    .ok_or_else(|| format!("\"child_ids\"[{n}] is not a non-empty string"))?;
                child_ids.push(c.to_string());
            }
        }
        Ok(SubagentMapFile {
            parent_session_id: parent.to_string(),
            next_suffix: next.min(f64::from(u32::MAX)) as u32,
            child_ids,
        })
    }

    /// The file as `claw_session_mgr_write_subagent_map_locked` writes it.
    pub fn render(&self) -> String {
        let children: Vec<String> = self.child_ids.iter().map(|c| json_str(c)).collect();
        format!(
            "{{\"parent_session_id\":{},\"next_suffix\":{},\"child_ids\":[{}]}}",
            json_str(&self.parent_session_id),
            self.next_suffix,
            children.join(",")
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn labels_follow_the_c_rule() {
        assert_eq!(collect_summary_labels("dietary preferences"), ["dietary "]);
        assert_eq!(
            collect_summary_labels("dietary_a, dietary_b, food, x"),
            ["dietary_", "food", "x"]
        );
        assert_eq!(collect_summary_labels(" ;; ,"), Vec::<String>::new());
        assert_eq!(
            collect_summary_labels("日本語のテキストです"),
            ["日本語のテキスト"]
        );
    }

    #[test]
    fn safe_names() {
        assert_eq!(
            session_mgr_safe_name("chat:telegram:42"),
            "chat_telegram_42"
        );
        assert_eq!(session_mgr_safe_name("::a::"), "_a");
        assert_eq!(session_mgr_safe_name("::"), "");
        assert_eq!(session_mgr_safe_name(&"a".repeat(50)), "a".repeat(24));
    }
}
