//! The peers that `compare` measures clawmem against, each a [`Driver`] on
//! the same [`SimFlash`] so that every byte and erase is counted by the
//! simulator, never by the peer.
//!
//! - [`EspClawDriver`]: ESP-Claw's own file pattern
//!   (`/work/shared/reference/esp-claw-memory.md`) on any file system behind
//!   a [`FileStore`]:
//!   - a session is `sessions/s_<safe>_<fnv>.log` (each record's body and a
//!     newline) and its `.log.idx` (an 8-byte header, then a 10-byte entry
//!     per record); an append adds the batch to both; turn-aware compaction
//!     at 150 KiB rewrites both in place; a session still too large gets a
//!     `.blocked` marker and refuses appends;
//!   - every memory write appends its record to
//!     `memory/memory_records.jsonl` and rewrites `memory/memory_index.json`
//!     and `MEMORY.md`; a recall appends to `memory/memory_digest.log`;
//!     memory compaction (records log >= 32 KiB, or 5 writes since the last,
//!     and at boot) rewrites the records log in place and empties the digest;
//!   - a profile write rewrites `<name>.md`.
//! - [`fat`]: the [`FileStore`] of FAT (the `fatfs` crate) on ESP-IDF's wear
//!   levelling ([`wl`]), with ESP-IDF's read-erase-program of a whole sector
//!   for every sector written.
//! - `littlefs` (cargo feature `littlefs`, needs libclang to build): the
//!   [`FileStore`] of littlefs 2 (the `littlefs2` crate).

pub mod fat;
#[cfg(feature = "littlefs")]
pub mod littlefs;
pub mod seqstore;
pub mod wl;

use std::collections::BTreeMap;

use clawmem::turns::{PlanBuilder, COMPACT_TOOL_TURNS};
use clawmem::RecordType;
use serde::{Deserialize, Serialize};

use crate::flash::SimFlash;
use crate::replay::{
    AppendOutcome, Driver, EngineInfo, HistoryRecord, ItemHandle, MemoryChange, MemoryItem,
    MemoryStored, OpError, OpResult,
};
use crate::trace::{Format, MemorySource, ProfileName, RecordKind, TraceRecord};

/// A file system as ESP-Claw's code uses it: whole-file reads, appends,
/// truncate-then-write rewrites, removals.
pub trait FileStore {
    /// Name of the engine, for the report.
    fn name(&self) -> String;
    /// Notes on the set-up, for the report.
    fn notes(&self) -> Vec<String> {
        Vec::new()
    }
    /// The flash under the file system.
    fn flash(&self) -> &SimFlash;
    /// A whole file, `None` if it does not exist.
    fn read(&mut self, path: &str) -> Result<Option<Vec<u8>>, String>;
    /// Size of a file, `None` if it does not exist.
    fn size(&mut self, path: &str) -> Result<Option<u64>, String>;
    /// Creates or truncates `path`, then writes `data` and closes it.
    fn write(&mut self, path: &str, data: &[u8]) -> Result<(), String>;
    /// Appends `data` to `path` (created if need be) and closes it.
    fn append(&mut self, path: &str, data: &[u8]) -> Result<(), String>;
    /// Removes a file; a missing one is not an error.
    ///
    /// Every method's error text starts with [`NO_SPACE`] when the file
    /// system is out of space.
    fn remove(&mut self, path: &str) -> Result<(), String>;
    /// Unmounts and mounts again; returns the bytes the mount read.
    fn remount(&mut self) -> Result<u64, String>;
}

/// ESP-Claw's session size limit (`CLAW_MEMORY_SESSION_SIZE_LIMIT`).
pub const SESSION_LIMIT: u64 = 150 * 1024;
/// Memory compaction threshold of the records log.
const MEMORY_LOG_LIMIT: u64 = 32 * 1024;
/// Memory writes between two compactions.
const MEMORY_WRITES_PER_COMPACTION: u32 = 5;
/// Active items kept by memory compaction.
const MAX_ITEMS: usize = 128;

const IDX_MAGIC: u32 = 0x5844_4843;
const RECORDS: &str = "memory/memory_records.jsonl";
const INDEX: &str = "memory/memory_index.json";
const DIGEST: &str = "memory/memory_digest.log";
const MEMORY_MD: &str = "MEMORY.md";

/// `<safe>_<hash>` of a session id, as ESP-Claw names its files.
pub fn session_stem(id: &str) -> String {
    let mut safe: String = id
        .bytes()
        .map(|b| {
            if b.is_ascii_alphanumeric() || b == b'_' || b == b'-' {
                b as char
            } else {
                '_'
            }
        })
        .take(24)
        .collect();
    if safe.is_empty() {
        safe = "default".into();
    }
    let mut h: u32 = 2_166_136_261;
    for b in id.bytes() {
        h ^= u32::from(b);
        h = h.wrapping_mul(16_777_619);
    }
    format!("sessions/s_{safe}_{h:08x}")
}

fn kind_code(k: RecordKind) -> u8 {
    match k {
        RecordKind::User => 1,
        RecordKind::AssistantFinal => 2,
        RecordKind::AssistantTool => 3,
        RecordKind::ToolResult => 4,
    }
}

fn kind_of(c: u8) -> Option<RecordKind> {
    Some(match c {
        1 => RecordKind::User,
        2 => RecordKind::AssistantFinal,
        3 => RecordKind::AssistantTool,
        4 => RecordKind::ToolResult,
        _ => return None,
    })
}

fn format_code(f: Format) -> u8 {
    match f {
        Format::Unknown => 0,
        Format::Openai => 1,
        Format::Anthropic => 2,
        Format::OpenaiResponses => 3,
    }
}

fn format_of(c: u8) -> Option<Format> {
    Some(match c {
        0 => Format::Unknown,
        1 => Format::Openai,
        2 => Format::Anthropic,
        3 => Format::OpenaiResponses,
        _ => return None,
    })
}

fn idx_header() -> Vec<u8> {
    let mut h = IDX_MAGIC.to_le_bytes().to_vec();
    h.extend_from_slice(&1u16.to_le_bytes());
    h.extend_from_slice(&10u16.to_le_bytes());
    h
}

fn idx_entry(out: &mut Vec<u8>, offset: u32, len: u32, kind: u8, format: u8) {
    out.extend_from_slice(&offset.to_le_bytes());
    out.extend_from_slice(&len.to_le_bytes());
    out.push(kind);
    out.push(format);
}

/// Parsed `.idx` entries: (offset, length, type, format).
fn parse_idx(idx: &[u8], log_len: usize) -> Result<Vec<(usize, usize, u8, u8)>, String> {
    if idx.len() < 8 || idx[..8] != idx_header()[..] || !(idx.len() - 8).is_multiple_of(10) {
        return Err("session index: bad header or size".into());
    }
    idx[8..]
        .chunks_exact(10)
        .map(|e| {
            let off = u32::from_le_bytes(e[0..4].try_into().unwrap()) as usize;
            let len = u32::from_le_bytes(e[4..8].try_into().unwrap()) as usize;
            if len == 0
                || off + len > log_len
                || kind_of(e[8]).is_none()
                || format_of(e[9]).is_none()
            {
                return Err("session index: bad entry".into());
            }
            Ok((off, len, e[8], e[9]))
        })
        .collect()
}

/// A long-term memory item, as a line of the records log.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
struct Item {
    id: u64,
    source: String,
    content: String,
    tags: Vec<String>,
    keywords: Vec<String>,
    created_at: u32,
    updated_at: u32,
    access_count: u32,
}

/// A line of the records log or the digest.
#[derive(Serialize, Deserialize)]
#[serde(tag = "op", rename_all = "snake_case")]
enum Line {
    Store(Item),
    Forget { id: u64 },
    Recall { ids: Vec<u64> },
}

/// Lowercased, ASCII alphanumerics and non-ASCII kept, the rest dropped.
fn normalize(s: &str) -> String {
    s.chars()
        .filter(|c| c.is_ascii_alphanumeric() || !c.is_ascii())
        .filter(|c| {
            !c.is_ascii_punctuation()
                && !matches!(c, '\u{3000}'..='\u{303F}' | '\u{FF00}'..='\u{FF65}')
        })
        .flat_map(char::to_lowercase)
        .collect()
}

fn key(norm: &str) -> &str {
    let mut end = norm.len().min(36);
    while !norm.is_char_boundary(end) {
        end -= 1;
    }
    &norm[..end]
}

fn terms(list: &[String]) -> Vec<String> {
    let mut out: Vec<String> = Vec::new();
    for t in list.iter().flat_map(|s| s.split([',', ';', '/', '|'])) {
        let t = t.trim();
        if !t.is_empty() && !out.iter().any(|o| o == t) && out.len() < 3 {
            out.push(t.to_string());
        }
    }
    out
}

/// ESP-Claw's update: every non-empty field of `change` replaces the
/// item's (tags and keywords normalized as a store would).
fn patched(old: &Item, change: &MemoryChange<'_>) -> Item {
    let mut new = old.clone();
    if let Some(c) = change.content.map(str::trim).filter(|c| !c.is_empty()) {
        new.content = c.to_string();
    }
    if let Some(t) = change.tags.filter(|t| !t.is_empty()) {
        new.tags = terms(t);
    }
    if let Some(k) = change.keywords.filter(|k| !k.is_empty()) {
        new.keywords = terms(k);
    }
    new
}

/// ESP-Claw's memory and session logic on a [`FileStore`].
pub struct EspClawDriver<S: FileStore> {
    fs: S,
    items: BTreeMap<u64, Item>,
    next_id: u64,
    writes_since_compaction: u32,
    clock: u32,
    mount_reads: Vec<u64>,
}

/// How a [`FileStore`]'s error text starts when the file system is out of
/// space; the driver answers [`OpError::Full`] for it.
pub const NO_SPACE: &str = "no space left on device";

fn failed(e: String) -> OpError {
    if e.starts_with(NO_SPACE) {
        OpError::Full(e)
    } else {
        OpError::Failed(e)
    }
}

impl<S: FileStore> EspClawDriver<S> {
    /// Drives ESP-Claw's file pattern on a freshly formatted `fs`.
    /// `format_reads` is what the format (and first mount) read.
    pub fn new(fs: S, format_reads: u64) -> Self {
        EspClawDriver {
            fs,
            items: BTreeMap::new(),
            next_id: 1,
            writes_since_compaction: 0,
            clock: 0,
            mount_reads: vec![format_reads],
        }
    }

    /// The file system.
    pub fn file_store(&self) -> &S {
        &self.fs
    }

    fn tick(&mut self) -> u32 {
        self.clock += 60;
        1_700_000_000 + self.clock
    }

    fn active_sorted(&self) -> Vec<&Item> {
        let mut v: Vec<&Item> = self.items.values().collect();
        v.sort_by(|a, b| {
            b.access_count
                .cmp(&a.access_count)
                .then(b.updated_at.cmp(&a.updated_at))
                .then(a.id.cmp(&b.id))
        });
        v
    }

    fn labels(&self) -> BTreeMap<&str, u32> {
        let mut m = BTreeMap::new();
        for it in self.items.values() {
            for t in &it.tags {
                *m.entry(t.as_str()).or_insert(0) += 1;
            }
        }
        m
    }

    /// Rewrites `memory_index.json` and `MEMORY.md` from the active items.
    fn rewrite_index(&mut self) -> Result<(), String> {
        let items = self.active_sorted();
        let index = serde_json::json!({
            "labels": self.labels(),
            "items": items.iter().map(|i| serde_json::json!({
                "id": format!("mem-{}", i.id), "labels": i.tags, "keywords": i.keywords,
                "updated_at": i.updated_at, "access": i.access_count,
            })).collect::<Vec<_>>(),
        });
        let mut md = String::from("# Long-term Memory\n\n## Summary Labels\n\n");
        for (l, n) in self.labels() {
            md.push_str(&format!("- {l} (refs={n})\n"));
        }
        md.push_str("\n## Active Memories\n\n");
        if items.is_empty() {
            md.push_str("- (empty - no active memories)\n");
        }
        for i in &items {
            md.push_str(&format!(
                "- `mem-{}` {}\n  time={} access={} labels=[{}]\n",
                i.id,
                i.content,
                i.updated_at,
                i.access_count,
                i.tags.join(",")
            ));
        }
        let index = serde_json::to_vec(&index).expect("index serializes");
        self.fs.write(INDEX, &index)?;
        self.fs.write(MEMORY_MD, md.as_bytes())
    }

    fn append_lines(&mut self, path: &str, lines: &[Line]) -> Result<(), String> {
        let mut out = Vec::new();
        for l in lines {
            serde_json::to_writer(&mut out, l).expect("line serializes");
            out.push(b'\n');
        }
        self.fs.append(path, &out)
    }

    /// Memory compaction: applies the digest, evicts down to 128 items and
    /// rewrites the records log in place (truncate, then write).
    fn compact_memory(&mut self) -> Result<(), String> {
        if self.items.len() > MAX_ITEMS {
            let mut by_score: Vec<(u64, u64)> = self
                .items
                .values()
                .map(|i| {
                    let s = u64::from(i.access_count) * 3 + u64::from(i.updated_at) / 3600;
                    (s, i.id)
                })
                .collect();
            by_score.sort_unstable();
            let evict = self.items.len() - MAX_ITEMS;
            for (_, id) in by_score.into_iter().take(evict) {
                self.items.remove(&id);
            }
        }
        let lines: Vec<Line> = self.items.values().cloned().map(Line::Store).collect();
        let mut out = Vec::new();
        for l in &lines {
            serde_json::to_writer(&mut out, l).expect("line serializes");
            out.push(b'\n');
        }
        self.fs.write(RECORDS, &out)?;
        self.fs.remove(DIGEST)?;
        self.writes_since_compaction = 0;
        self.rewrite_index()
    }

    /// After a memory write: its record appended, the index and MEMORY.md
    /// rewritten, compaction when due.
    fn memory_written(&mut self, lines: &[Line]) -> Result<(), String> {
        self.append_lines(RECORDS, lines)?;
        self.rewrite_index()?;
        self.writes_since_compaction += 1;
        let log = self.fs.size(RECORDS)?.unwrap_or(0);
        if log >= MEMORY_LOG_LIMIT || self.writes_since_compaction >= MEMORY_WRITES_PER_COMPACTION {
            self.compact_memory()?;
        }
        Ok(())
    }

    /// Reloads the items from the records log and the digest.
    fn load_memory(&mut self) -> Result<(), String> {
        self.items.clear();
        for path in [RECORDS, DIGEST] {
            let Some(text) = self.fs.read(path)? else {
                continue;
            };
            for line in text.split(|b| *b == b'\n').filter(|l| !l.is_empty()) {
                match serde_json::from_slice::<Line>(line) {
                    Ok(Line::Store(it)) => {
                        self.next_id = self.next_id.max(it.id + 1);
                        self.clock = self.clock.max(it.updated_at.saturating_sub(1_700_000_000));
                        self.items.insert(it.id, it);
                    }
                    Ok(Line::Forget { id }) => {
                        self.items.remove(&id);
                    }
                    Ok(Line::Recall { ids }) => {
                        for id in ids {
                            if let Some(it) = self.items.get_mut(&id) {
                                it.access_count += 1;
                            }
                        }
                    }
                    // ESP-Claw skips a line it cannot parse.
                    Err(_) => {}
                }
            }
        }
        Ok(())
    }

    /// The active item that `content` duplicates, ignoring `except`.
    fn duplicate_of(&self, content: &str, except: Option<u64>) -> Option<u64> {
        let n = normalize(content);
        self.items
            .values()
            .filter(|i| Some(i.id) != except)
            .find(|i| {
                let m = normalize(&i.content);
                key(&m) == key(&n)
                    || m == n
                    || (m.len() >= 12 && n.len() >= 12 && (m.contains(&n) || n.contains(&m)))
            })
            .map(|i| i.id)
    }

    fn profile_path(name: ProfileName) -> &'static str {
        match name {
            ProfileName::Soul => "soul.md",
            ProfileName::Identity => "identity.md",
            ProfileName::User => "user.md",
            ProfileName::Agents => "AGENTS.md",
        }
    }

    fn read_history(&mut self, stem: &str) -> Result<Vec<HistoryRecord>, String> {
        let Some(idx) = self.fs.read(&format!("{stem}.log.idx"))? else {
            return Ok(Vec::new());
        };
        let log = self.fs.read(&format!("{stem}.log"))?.unwrap_or_default();
        let entries = parse_idx(&idx, log.len())?;
        Ok(entries
            .into_iter()
            .map(|(off, len, k, f)| HistoryRecord {
                kind: kind_of(k).expect("checked"),
                format: format_of(f).expect("checked"),
                // The entry's length counts the newline.
                body: log[off..off + len - 1].to_vec(),
            })
            .collect())
    }
}

impl<S: FileStore> Driver for EspClawDriver<S> {
    fn info(&self) -> EngineInfo {
        EngineInfo {
            engine: self.fs.name(),
            state_bytes: std::mem::size_of::<Self>(),
            session_limit_bytes: Some(SESSION_LIMIT),
            session_limit_scaled: false,
            notes: self.fs.notes(),
        }
    }

    fn flash(&self) -> &SimFlash {
        self.fs.flash()
    }

    fn mount_read_bytes(&self) -> &[u64] {
        &self.mount_reads
    }

    fn append(
        &mut self,
        session: &str,
        records: &[TraceRecord],
        turn_completed: bool,
    ) -> OpResult<AppendOutcome> {
        let stem = session_stem(session);
        let (log_path, idx_path) = (format!("{stem}.log"), format!("{stem}.log.idx"));
        let blocked_path = format!("{stem}.log.blocked");
        if self.fs.size(&blocked_path).map_err(failed)?.is_some() {
            return Err(OpError::Blocked);
        }
        let log_len = self.fs.size(&log_path).map_err(failed)?.unwrap_or(0);
        let mut idx = Vec::new();
        if self.fs.size(&idx_path).map_err(failed)?.is_none() {
            idx = idx_header();
        }
        let mut data = Vec::new();
        for r in records {
            let off = log_len + data.len() as u64;
            data.extend_from_slice(r.body.as_bytes());
            data.push(b'\n');
            let len = r.body.len() as u32 + 1;
            idx_entry(
                &mut idx,
                off as u32,
                len,
                kind_code(r.kind),
                format_code(r.format),
            );
        }
        self.fs.append(&log_path, &data).map_err(failed)?;
        self.fs.append(&idx_path, &idx).map_err(failed)?;
        let size = log_len + data.len() as u64;
        if !turn_completed || size <= SESSION_LIMIT {
            return Ok(AppendOutcome::default());
        }
        // Turn-aware compaction, rewriting both files in place.
        let history = self.read_history(&stem).map_err(failed)?;
        let mut plan = PlanBuilder::<COMPACT_TOOL_TURNS>::new();
        for r in &history {
            plan.push(RecordType::from(r.kind), r.body.len() as u64);
        }
        let plan = plan.finish();
        if plan.blocked(SESSION_LIMIT) {
            self.fs.write(&blocked_path, &[]).map_err(failed)?;
            return Ok(AppendOutcome {
                compacted: false,
                blocked: true,
            });
        }
        let mut keep = plan.cursor();
        let (mut log, mut idx) = (Vec::new(), idx_header());
        for r in history {
            if keep.keep_next(RecordType::from(r.kind)) {
                let off = log.len() as u32;
                log.extend_from_slice(&r.body);
                log.push(b'\n');
                let len = r.body.len() as u32 + 1;
                idx_entry(&mut idx, off, len, kind_code(r.kind), format_code(r.format));
            }
        }
        self.fs.write(&log_path, &log).map_err(failed)?;
        self.fs.write(&idx_path, &idx).map_err(failed)?;
        Ok(AppendOutcome {
            compacted: true,
            blocked: false,
        })
    }

    fn history(&mut self, session: &str) -> OpResult<Vec<HistoryRecord>> {
        let stem = session_stem(session);
        self.read_history(&stem).map_err(failed)
    }

    fn session_delete(&mut self, session: &str) -> OpResult<()> {
        let stem = session_stem(session);
        for ext in [".log", ".log.idx", ".log.blocked"] {
            self.fs.remove(&format!("{stem}{ext}")).map_err(failed)?;
        }
        Ok(())
    }

    fn memory_store(&mut self, item: &MemoryItem<'_>) -> OpResult<MemoryStored> {
        let content = item.content.trim();
        if content.is_empty() {
            return Err(OpError::Failed("empty content".into()));
        }
        if let Some(id) = self.duplicate_of(content, None) {
            return Ok(MemoryStored {
                item: ItemHandle(id),
                duplicate: true,
            });
        }
        let now = self.tick();
        let it = Item {
            id: self.next_id,
            source: match item.source {
                MemorySource::Manual => "manual".into(),
                MemorySource::AutoLlm => "auto_llm".into(),
            },
            content: content.to_string(),
            tags: terms(item.tags),
            keywords: terms(item.keywords),
            created_at: now,
            updated_at: now,
            access_count: 0,
        };
        self.next_id += 1;
        let id = it.id;
        self.items.insert(id, it.clone());
        self.memory_written(&[Line::Store(it)]).map_err(failed)?;
        // Compaction may have evicted it already.
        Ok(MemoryStored {
            item: ItemHandle(id),
            duplicate: false,
        })
    }

    fn memory_recall(&mut self, labels: &[String], limit: u32) -> OpResult<Vec<ItemHandle>> {
        let ids: Vec<u64> = self
            .active_sorted()
            .into_iter()
            .filter(|i| i.tags.iter().any(|t| labels.contains(t)))
            .take(limit as usize)
            .map(|i| i.id)
            .collect();
        for id in &ids {
            if let Some(it) = self.items.get_mut(id) {
                it.access_count += 1;
            }
        }
        if !ids.is_empty() {
            self.append_lines(DIGEST, &[Line::Recall { ids: ids.clone() }])
                .map_err(failed)?;
        }
        Ok(ids.into_iter().map(ItemHandle).collect())
    }

    fn memory_update(
        &mut self,
        item: ItemHandle,
        change: &MemoryChange<'_>,
    ) -> OpResult<ItemHandle> {
        let Some(old) = self.items.get(&item.0).cloned() else {
            return Err(OpError::Evicted);
        };
        let mut new = patched(&old, change);
        if new == old {
            return Ok(item);
        }
        let dup = self.duplicate_of(&new.content, Some(old.id));
        self.items.remove(&old.id);
        let forget = Line::Forget { id: old.id };
        let newest = match dup {
            Some(d) => {
                self.memory_written(&[forget]).map_err(failed)?;
                d
            }
            None => {
                new.id = self.next_id;
                self.next_id += 1;
                new.access_count = 0;
                new.updated_at = self.tick();
                self.items.insert(new.id, new.clone());
                let id = new.id;
                self.memory_written(&[Line::Store(new), forget])
                    .map_err(failed)?;
                id
            }
        };
        Ok(ItemHandle(newest))
    }

    fn memory_forget(&mut self, item: ItemHandle) -> OpResult<()> {
        if self.items.remove(&item.0).is_none() {
            return Err(OpError::Evicted);
        }
        self.memory_written(&[Line::Forget { id: item.0 }])
            .map_err(failed)
    }

    fn memory_list(&mut self) -> OpResult<Vec<ItemHandle>> {
        // ESP-Claw lists from its index file.
        self.fs.read(INDEX).map_err(failed)?;
        Ok(self
            .active_sorted()
            .into_iter()
            .map(|i| ItemHandle(i.id))
            .collect())
    }

    fn profile_write(&mut self, name: ProfileName, body: &str) -> OpResult<()> {
        self.fs
            .write(Self::profile_path(name), body.as_bytes())
            .map_err(failed)
    }

    fn profile_read(&mut self, name: ProfileName) -> OpResult<Option<Vec<u8>>> {
        self.fs.read(Self::profile_path(name)).map_err(failed)
    }

    fn remount(&mut self) -> OpResult<()> {
        let read = self.fs.remount().map_err(failed)?;
        self.mount_reads.push(read);
        self.load_memory().map_err(failed)?;
        // ESP-Claw compacts long-term memory at boot.
        self.compact_memory().map_err(failed)
    }

    fn memory_clear(&mut self) -> OpResult<()> {
        self.items.clear();
        for p in [RECORDS, INDEX, DIGEST, MEMORY_MD] {
            self.fs.remove(p).map_err(failed)?;
        }
        Ok(())
    }
}
