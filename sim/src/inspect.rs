//! A readable dump of a flash image (`clawmem-sim inspect`).
//!
//! The image is the raw bytes of the partition (what `esptool read_flash` or
//! `replay --image` gives). Every sector header is decoded here from the
//! 24-byte layout of `docs/FORMAT.md`; the contents (sessions, memory items,
//! profiles, `check()`) come from clawmem's public API on a RAM copy of the
//! image mounted with [`MountMode::ExistingOnly`], so the file is never
//! written. Damage is reported, never fatal: an image that does not mount
//! is still dumped sector by sector, with the mount error; a panic inside
//! the engine is caught and reported as an engine bug.

use std::fmt;
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::path::Path;

use clawmem::profile::ProfileDoc;
use clawmem::{MountMode, Store};
use serde::Serialize;

use crate::flash::SimFlash;
use crate::model::Preset;
use crate::nor::{
    Esp32EncryptedFlash, Esp32Flash, GenericFlash, Nrf52Flash, Stm32h7Flash, Stm32l4Flash,
};
use crate::replay::{SimBacked, MAX_SESSIONS};
use crate::torture::history_of;

/// `"CLMS"` as a little-endian u32.
pub const SECTOR_MAGIC: u32 = 0x534D_4C43;
/// The format version this build writes.
pub const FORMAT_VERSION: u16 = clawmem::FORMAT_VERSION;
/// The oldest format version this build mounts and upgrades.
pub const MIN_FORMAT_VERSION: u16 = clawmem::MIN_FORMAT_VERSION;
/// Bytes of a sector header before padding.
pub const SECTOR_HEADER_LEN: usize = 24;

/// CRC-32/ISO-HDLC (zlib's), bit by bit: headers are few and short.
pub fn crc32(data: &[u8]) -> u32 {
    let mut crc = !0u32;
    for &b in data {
        crc ^= u32::from(b);
        for _ in 0..8 {
            crc = if crc & 1 != 0 {
                (crc >> 1) ^ 0xEDB8_8320
            } else {
                crc >> 1
            };
        }
    }
    !crc
}

/// One sector, as its header reads.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct SectorInfo {
    /// Index in the partition.
    pub index: usize,
    /// Byte offset in the image.
    pub offset: usize,
    /// `valid`, `erased` (header all 0xFF), `invalid` (clawmem magic, bad
    /// CRC), `newer-version`, `older-version` or `foreign` (not a clawmem
    /// header, not erased).
    pub state: String,
    /// Magic as read.
    pub magic: u32,
    /// Format version as read.
    pub version: u16,
    /// Flags as read.
    pub flags: u16,
    /// Sector sequence number as read.
    pub seq: u32,
    /// Erase count as read.
    pub erase_count: u32,
    /// Newest committed checkpoint when the sector was opened (`None`: none).
    pub checkpoint: Option<u32>,
    /// Whether the header CRC checks out.
    pub crc_ok: bool,
    /// Bytes up to the last one that is not 0xFF (0: the sector is erased).
    pub used_bytes: usize,
}

/// Decodes the header of one sector (`data` is the whole sector).
pub fn decode_sector(index: usize, offset: usize, data: &[u8]) -> SectorInfo {
    let used_bytes = data.iter().rposition(|&b| b != 0xFF).map_or(0, |i| i + 1);
    let mut h = [0xFFu8; SECTOR_HEADER_LEN];
    let n = data.len().min(SECTOR_HEADER_LEN);
    h[..n].copy_from_slice(&data[..n]);
    let u32_at = |o: usize| u32::from_le_bytes([h[o], h[o + 1], h[o + 2], h[o + 3]]);
    let u16_at = |o: usize| u16::from_le_bytes([h[o], h[o + 1]]);
    let (magic, version, flags) = (u32_at(0), u16_at(4), u16_at(6));
    let crc_ok = n == SECTOR_HEADER_LEN && crc32(&h[..20]) == u32_at(20);
    let state = if h.iter().all(|&b| b == 0xFF) {
        "erased"
    } else if magic != SECTOR_MAGIC {
        "foreign"
    } else if !crc_ok {
        "invalid"
    } else if version > FORMAT_VERSION {
        "newer-version"
    } else if version < MIN_FORMAT_VERSION {
        "older-version"
    } else {
        "valid"
    };
    let checkpoint = u32_at(16);
    SectorInfo {
        index,
        offset,
        state: state.into(),
        magic,
        version,
        flags,
        seq: u32_at(8),
        erase_count: u32_at(12),
        checkpoint: (checkpoint != u32::MAX).then_some(checkpoint),
        crc_ok,
        used_bytes,
    }
}

/// A session of the image.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct SessionDump {
    /// Session id.
    pub id: String,
    /// Records in the history.
    pub records: u32,
    /// ESP-Claw `.log` size: bodies plus a newline each.
    pub size_bytes: u32,
    /// Whether appends are refused until it is deleted.
    pub blocked: bool,
    /// Records whose bytes did not check out when read (`None`: the history
    /// could not be read at all, see `error`).
    pub damaged_records: Option<u32>,
    /// Why the history could not be read, if it could not.
    pub error: Option<String>,
}

/// An active memory item.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct ItemDump {
    /// Item id.
    pub id: u32,
    /// Who created it.
    pub source: String,
    /// Content.
    pub content: String,
    /// Comma-separated tags.
    pub tags: String,
    /// Comma-separated keywords.
    pub keywords: String,
    /// Creation time (seconds since the epoch).
    pub created_at: u32,
    /// Last update time.
    pub updated_at: u32,
    /// Recalls counted.
    pub access_count: u16,
}

/// A profile document.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct ProfileDump {
    /// File name (`soul.md`, ...).
    pub name: String,
    /// Length in bytes (`None`: could not be read).
    pub len: Option<usize>,
    /// Whether it holds its default contents (never written, or written
    /// back as the default).
    pub default: bool,
    /// Its first line.
    pub first_line: String,
}

/// Everything `inspect` found.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct InspectReport {
    /// Image file (or the name given).
    pub image: String,
    /// Preset used for the geometry.
    pub preset: String,
    /// Size of the image in bytes.
    pub image_bytes: usize,
    /// Sector size of the preset.
    pub sector_bytes: usize,
    /// Every whole sector of the image, in order.
    pub sectors: Vec<SectorInfo>,
    /// The head: the valid sector with the largest sequence number.
    pub head: Option<usize>,
    /// Damaged or suspicious regions, in words.
    pub damage: Vec<String>,
    /// Why mount failed, if it did.
    pub mount_error: Option<String>,
    /// What mount did, if it succeeded.
    pub mount_report: Option<String>,
    /// Sessions, in table order.
    pub sessions: Vec<SessionDump>,
    /// Active memory items.
    pub memory: Vec<ItemDump>,
    /// The profile documents.
    pub profiles: Vec<ProfileDump>,
    /// `Store::check()`: `ok (N records)` or the error.
    pub check: Option<String>,
    /// The format versions of the valid sector headers, oldest first.
    pub format_versions: Vec<u16>,
    /// What this engine does with the image's format: whether it mounts
    /// it as it is, upgrades it as it writes, or refuses it.
    pub format: String,
}

/// A file that cannot be inspected at all: unreadable or empty.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct InspectError(pub String);

impl fmt::Display for InspectError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for InspectError {}

/// Inspects the image file at `path`.
pub fn inspect_file(path: &Path, preset: Preset) -> Result<InspectReport, InspectError> {
    let bytes = std::fs::read(path)
        .map_err(|e| InspectError(format!("cannot read {}: {e}", path.display())))?;
    inspect_bytes(&path.display().to_string(), &bytes, preset)
}

/// Inspects an image held in memory. Fails only on an empty image; every
/// other problem is reported in [`InspectReport::damage`] or
/// [`InspectReport::mount_error`].
pub fn inspect_bytes(
    name: &str,
    bytes: &[u8],
    preset: Preset,
) -> Result<InspectReport, InspectError> {
    if bytes.is_empty() {
        return Err(InspectError(format!("{name}: the image is empty")));
    }
    let model = preset.default_model();
    let sector_bytes = model.geometry.erase_size;
    let mut report = InspectReport {
        image: name.to_string(),
        preset: preset.name().to_string(),
        image_bytes: bytes.len(),
        sector_bytes,
        sectors: Vec::new(),
        head: None,
        damage: Vec::new(),
        mount_error: None,
        mount_report: None,
        sessions: Vec::new(),
        memory: Vec::new(),
        profiles: Vec::new(),
        check: None,
        format_versions: Vec::new(),
        format: String::new(),
    };
    let whole = bytes.len() / sector_bytes;
    for (i, chunk) in bytes.chunks_exact(sector_bytes).enumerate() {
        report
            .sectors
            .push(decode_sector(i, i * sector_bytes, chunk));
    }
    let tail = bytes.len() % sector_bytes;
    if tail != 0 {
        report.damage.push(format!(
            "the image is {} B, not a whole number of {sector_bytes} B sectors: the last {tail} B are ignored",
            bytes.len()
        ));
    }
    let mut versions: Vec<u16> = report
        .sectors
        .iter()
        .filter(|s| {
            matches!(
                s.state.as_str(),
                "valid" | "newer-version" | "older-version"
            )
        })
        .map(|s| s.version)
        .collect();
    versions.sort_unstable();
    versions.dedup();
    report.format = match (versions.first(), versions.last()) {
        (None, _) | (_, None) => "no clawmem sector header".to_string(),
        (_, Some(&v)) if v > FORMAT_VERSION => format!(
            "format version {v} is newer than this engine's {FORMAT_VERSION}: refused, never written"
        ),
        (Some(&v), _) if v < MIN_FORMAT_VERSION => format!(
            "format version {v} is older than the oldest this engine upgrades ({MIN_FORMAT_VERSION}): foreign"
        ),
        (Some(&v), _) if v < FORMAT_VERSION => format!(
            "format version {v}: this engine mounts it as it is and upgrades it in place to version {FORMAT_VERSION}, sector by sector as it writes"
        ),
        _ => format!("format version {FORMAT_VERSION}, this engine's"),
    };
    report.format_versions = versions;
    report.head = report
        .sectors
        .iter()
        .filter(|s| s.state == "valid")
        .max_by_key(|s| s.seq)
        .map(|s| s.index);
    for s in &report.sectors {
        match s.state.as_str() {
            "invalid" => report.damage.push(format!(
                "sector {} at 0x{:x}: clawmem magic but bad header CRC",
                s.index, s.offset
            )),
            "foreign" => report.damage.push(format!(
                "sector {} at 0x{:x}: not a clawmem header (magic 0x{:08x})",
                s.index, s.offset, s.magic
            )),
            "newer-version" | "older-version" => report.damage.push(format!(
                "sector {} at 0x{:x}: format version {} (this build reads {FORMAT_VERSION})",
                s.index, s.offset, s.version
            )),
            "erased" if s.used_bytes > 0 => report.damage.push(format!(
                "sector {} at 0x{:x}: erased header but {} B of data",
                s.index, s.offset, s.used_bytes
            )),
            _ => {}
        }
    }
    if whole < 4 {
        report.mount_error = Some(format!(
            "not mounted: {whole} whole sector(s), clawmem needs at least 4"
        ));
        return Ok(report);
    }
    let image = &bytes[..whole * sector_bytes];
    let flash = match SimFlash::from_image(&model, image) {
        Ok(f) => f,
        Err(e) => {
            report.mount_error = Some(format!("not mounted: {e}"));
            return Ok(report);
        }
    };
    let outcome = catch_unwind(AssertUnwindSafe(|| match preset {
        Preset::Esp32 => dump::<Esp32Flash>(flash, &mut report),
        Preset::Nrf52 => dump::<Nrf52Flash>(flash, &mut report),
        Preset::Stm32l4 => dump::<Stm32l4Flash>(flash, &mut report),
        Preset::Stm32h7 => dump::<Stm32h7Flash>(flash, &mut report),
        Preset::Esp32Encrypted => dump::<Esp32EncryptedFlash>(flash, &mut report),
        Preset::Generic => dump::<GenericFlash>(flash, &mut report),
    }));
    if let Err(panic) = outcome {
        let what = panic
            .downcast_ref::<String>()
            .cloned()
            .or_else(|| panic.downcast_ref::<&str>().map(|s| s.to_string()))
            .unwrap_or_else(|| "?".into());
        report.damage.push(format!(
            "the engine panicked reading the image (an engine bug): {what}"
        ));
    }
    Ok(report)
}

/// Mounts a RAM copy and reads everything through the public API.
fn dump<F: SimBacked>(flash: SimFlash, report: &mut InspectReport) {
    // The config only matters for writing, but mount refuses a session
    // limit the partition cannot hold: halve it until it fits, as the
    // replayer scales it down for small partitions.
    let mut config = clawmem::Config::default();
    let mut store = loop {
        let wrapped = match F::wrap(flash.clone()) {
            Ok(f) => f,
            Err(e) => {
                report.mount_error = Some(format!("not mounted: {}", e.0));
                return;
            }
        };
        match Store::<F, MAX_SESSIONS>::mount(wrapped, config, MountMode::ExistingOnly) {
            Ok(s) => break s,
            Err(clawmem::Error::Config(_)) if config.session_size_limit_bytes > 1024 => {
                config.session_size_limit_bytes = (config.session_size_limit_bytes / 2).max(1024);
            }
            Err(e) => {
                report.mount_error = Some(format!("{e:?}"));
                return;
            }
        }
    };
    let m = store.mount_report();
    report.mount_report = Some(format!("{m:?}"));
    if m.sealed_head {
        report
            .damage
            .push("the head sector held a torn write and was sealed".into());
    }
    if m.resumed_head {
        report.damage.push(
            "the head sector held a torn write; writing goes on after it in the same sector".into(),
        );
    }
    if m.ignored_batches > 0 {
        report.damage.push(format!(
            "{} damaged or uncommitted batch(es) ignored",
            m.ignored_batches
        ));
    }
    if m.damaged_headers > 0 {
        report.damage.push(format!(
            "{} sector header(s) damaged at rest over sound contents, kept",
            m.damaged_headers
        ));
    }
    if m.recovered_names > 0 {
        report.damage.push(format!(
            "{} session name(s) recovered from a damaged first batch (that batch's records lost)",
            m.recovered_names
        ));
    }
    if m.salvaged_memory_index {
        report.damage.push(
            "the memory index is damaged: its entries were kept where the puts they name confirm them"
                .into(),
        );
    }
    let mut sessions = Vec::new();
    match store.for_each_session(|id, info| sessions.push((id.to_string(), info))) {
        Ok(0) => {}
        Ok(lost) => report.damage.push(format!(
            "{lost} session(s) whose name is damaged beyond repair, left out"
        )),
        Err(e) => report.damage.push(format!("session table: {e:?}")),
    }
    for (id, info) in sessions {
        let (damaged_records, error) = match history_of(&mut store, &id) {
            Ok((_, d)) => (Some(d), None),
            Err(e) => (None, Some(e)),
        };
        if let Some(d) = damaged_records.filter(|&d| d > 0) {
            report
                .damage
                .push(format!("session {id}: {d} damaged record(s)"));
        }
        if let Some(e) = &error {
            report.damage.push(format!("session {id}: {e}"));
        }
        report.sessions.push(SessionDump {
            id,
            records: info.records,
            size_bytes: info.size_bytes,
            blocked: info.blocked,
            damaged_records,
            error,
        });
    }
    let mut items = Vec::new();
    if let Err(e) = store.memory_list(|i| {
        items.push(ItemDump {
            id: i.id().get(),
            source: i.source().to_string(),
            content: i.content().to_string(),
            tags: i.tags().to_string(),
            keywords: i.keywords().to_string(),
            created_at: i.created_at(),
            updated_at: i.updated_at(),
            access_count: i.access_count(),
        })
    }) {
        report.damage.push(format!("memory: {e:?}"));
    }
    report.memory = items;
    for doc in ProfileDoc::ALL {
        let mut dump = ProfileDump {
            name: doc.file_name().to_string(),
            len: None,
            default: false,
            first_line: String::new(),
        };
        let read = store.profile_len(doc).and_then(|len| {
            let mut buf = vec![0u8; len];
            // A document never written stores its default first: on this
            // RAM copy only.
            store.profile_read(doc, &mut buf).map(|n| {
                buf.truncate(n);
                buf
            })
        });
        match read {
            Ok(buf) => {
                dump.len = Some(buf.len());
                dump.default = buf == doc.default_contents().as_bytes();
                let text = String::from_utf8_lossy(&buf);
                dump.first_line = text.lines().next().unwrap_or("").chars().take(72).collect();
            }
            Err(e) => report
                .damage
                .push(format!("profile {}: {e:?}", doc.file_name())),
        }
        report.profiles.push(dump);
    }
    report.check = Some(match store.check() {
        Ok(n) => format!("ok ({n})"),
        Err(e) => {
            report.damage.push(format!("check() failed: {e:?}"));
            format!("{e:?}")
        }
    });
}

fn clip(s: &str, n: usize) -> String {
    let one_line: String = s.chars().map(|c| if c == '\n' { ' ' } else { c }).collect();
    if one_line.chars().count() > n {
        one_line.chars().take(n - 1).collect::<String>() + "…"
    } else {
        one_line
    }
}

impl fmt::Display for InspectReport {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        writeln!(
            f,
            "image {}: {} B, preset {}, {} sectors of {} B",
            self.image,
            self.image_bytes,
            self.preset,
            self.sectors.len(),
            self.sector_bytes
        )?;
        writeln!(f, "format: {}", self.format)?;
        writeln!(f, "\nsectors")?;
        writeln!(
            f,
            "  {:>5} {:>9}  {:<13} {:>7} {:>10} {:>7} {:>10} {:>8}",
            "#", "offset", "state", "version", "seq", "erases", "checkpoint", "used"
        )?;
        let mut erased_run = 0;
        let last = self.sectors.len();
        for (i, s) in self.sectors.iter().enumerate() {
            // Runs of erased sectors are folded into one line.
            if s.state == "erased" && s.used_bytes == 0 {
                erased_run += 1;
                if i + 1 < last {
                    continue;
                }
            }
            if erased_run > 0 {
                let first = if s.state == "erased" && s.used_bytes == 0 {
                    i + 1 - erased_run
                } else {
                    i - erased_run
                };
                writeln!(
                    f,
                    "  {:>5} {:>9}  erased x{erased_run}",
                    first,
                    format!("0x{:x}", first * self.sector_bytes)
                )?;
                erased_run = 0;
                if s.state == "erased" && s.used_bytes == 0 {
                    continue;
                }
            }
            let head = if Some(s.index) == self.head {
                " head"
            } else {
                ""
            };
            if s.state == "foreign" || s.state == "erased" {
                writeln!(
                    f,
                    "  {:>5} {:>9}  {:<13} {:>7} {:>10} {:>7} {:>10} {:>8}",
                    s.index,
                    format!("0x{:x}", s.offset),
                    s.state,
                    "-",
                    "-",
                    "-",
                    "-",
                    s.used_bytes
                )?;
            } else {
                writeln!(
                    f,
                    "  {:>5} {:>9}  {:<13} {:>7} {:>10} {:>7} {:>10} {:>8}{head}",
                    s.index,
                    format!("0x{:x}", s.offset),
                    s.state,
                    s.version,
                    s.seq,
                    s.erase_count,
                    s.checkpoint
                        .map_or("none".to_string(), |c| format!("0x{c:x}")),
                    s.used_bytes
                )?;
            }
        }
        match (&self.mount_error, &self.mount_report) {
            (Some(e), _) => writeln!(f, "\nmount: FAILED: {e}")?,
            (None, Some(r)) => writeln!(f, "\nmount: ok {r}")?,
            (None, None) => {}
        }
        if self.mount_error.is_none() {
            writeln!(f, "\nsessions ({})", self.sessions.len())?;
            for s in &self.sessions {
                writeln!(
                    f,
                    "  {:<40} {:>5} records {:>8} B{}{}",
                    s.id,
                    s.records,
                    s.size_bytes,
                    if s.blocked { "  blocked" } else { "" },
                    match (s.damaged_records, &s.error) {
                        (Some(0), _) => String::new(),
                        (Some(d), _) => format!("  {d} damaged"),
                        (None, Some(e)) => format!("  unreadable: {e}"),
                        (None, None) => String::new(),
                    }
                )?;
            }
            writeln!(f, "\nmemory items ({})", self.memory.len())?;
            for i in &self.memory {
                writeln!(
                    f,
                    "  #{:<5} [{}] {}  tags={} keywords={} recalls={}",
                    i.id,
                    i.source,
                    clip(&i.content, 60),
                    clip(&i.tags, 40),
                    clip(&i.keywords, 40),
                    i.access_count
                )?;
            }
            writeln!(f, "\nprofiles")?;
            for p in &self.profiles {
                writeln!(
                    f,
                    "  {:<12} {:>6} B{}  {}",
                    p.name,
                    p.len.map_or("?".into(), |n| n.to_string()),
                    if p.default { " (default)" } else { "" },
                    clip(&p.first_line, 60)
                )?;
            }
            if let Some(c) = &self.check {
                writeln!(f, "\ncheck(): {c}")?;
            }
        }
        if self.damage.is_empty() {
            writeln!(f, "\ndamage: none")
        } else {
            writeln!(f, "\ndamage ({})", self.damage.len())?;
            for d in &self.damage {
                writeln!(f, "  {d}")?;
            }
            Ok(())
        }
    }
}
