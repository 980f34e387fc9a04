//! Writing a complete CHDX index for a log ([`rebuild_index`],
//! [`rebuild_index_with_old`]), and deciding whether an existing index can
//! be kept ([`repair`], [`Verdict`]): it is rebuilt where ESP-Claw would wipe
//! the session.
//!
//! Pure logic over byte slices: no flash I/O and no allocation. Nothing here
//! is affected by power loss; writing the rebuilt index atomically is the
//! caller's job.

use core::fmt;

use super::entries::{entries_with_old_index, RebuildReport};
use super::segments::{segments, Segment, SegmentKind};
use super::MAX_LOG_SIZE_BYTES;
use crate::backend::validate_json;
use crate::chdx::{self, ChdxError, CHDX_ENTRY_SIZE, CHDX_HEADER_SIZE};

/// Why no index was written.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum RebuildError {
    /// `out` is too small for the index; nothing usable was written.
    BufferTooSmall {
        /// Size of the index, in bytes.
        needed_bytes: usize,
    },
    /// The log is larger than an index can describe ([`MAX_LOG_SIZE_BYTES`]).
    LogTooLarge {
        /// Size of the log, in bytes.
        len_bytes: usize,
    },
    /// The log is not empty but holds no complete record, and ESP-Claw rejects
    /// an index without entries for a non-empty log.
    NoRecords {
        /// Size of the log, in bytes.
        log_len_bytes: usize,
        /// The log's last segment if it has no newline; if it is a
        /// [`SegmentKind::Record`], appending `\n` to the log makes it
        /// indexable.
        tail: Option<Segment>,
    },
}

impl fmt::Display for RebuildError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match *self {
            RebuildError::BufferTooSmall { needed_bytes } => write!(
                f,
                "index buffer too small: the rebuilt index needs {needed_bytes} bytes"
            ),
            RebuildError::LogTooLarge { len_bytes } => write!(
                f,
                "session log is {len_bytes} bytes, more than an index can describe ({MAX_LOG_SIZE_BYTES})"
            ),
            RebuildError::NoRecords {
                log_len_bytes,
                tail:
                    Some(Segment {
                        offset,
                        kind: SegmentKind::Record,
                        ..
                    }),
            } => write!(
                f,
                "session log ({log_len_bytes} bytes) holds no complete record: the record at offset {offset} lacks its newline; append one and rebuild"
            ),
            RebuildError::NoRecords { log_len_bytes, .. } => write!(
                f,
                "session log ({log_len_bytes} bytes) holds no record, only torn or blank lines; truncate it to 0 bytes"
            ),
        }
    }
}

/// Rebuilds the whole index (header and entries) of `log` into `out` and
/// reports what it found; the index is the first
/// [`RebuildReport::index_size_bytes`] bytes of `out`.
///
/// On `Ok`, [`chdx::validate_index`] accepts the index for a log of
/// `log.len()` bytes, every entry points at a JSON object or array followed
/// by `\n`, and entries are in log order. The whole log is read even when
/// `out` is too small, so [`RebuildError::BufferTooSmall`] gives the exact
/// size. An empty log gives a header-only index.
pub fn rebuild_index(log: &[u8], out: &mut [u8]) -> Result<RebuildReport, RebuildError> {
    rebuild_index_with_old(log, &[], out)
}

/// Like [`rebuild_index`], keeping the type and format of every record that
/// `old_index` describes exactly (see [`entries_with_old_index`]).
pub fn rebuild_index_with_old(
    log: &[u8],
    old_index: &[u8],
    out: &mut [u8],
) -> Result<RebuildReport, RebuildError> {
    let mut entries = entries_with_old_index(log, old_index)?;
    if let Some(header) = out.get_mut(..CHDX_HEADER_SIZE) {
        header.copy_from_slice(&chdx::encode_header());
    }
    let mut needed = CHDX_HEADER_SIZE;
    for rebuilt in entries.by_ref() {
        let end = needed.saturating_add(CHDX_ENTRY_SIZE);
        if let Some(slot) = out.get_mut(needed..end) {
            slot.copy_from_slice(&rebuilt.entry.encode());
        }
        needed = end;
    }
    let report = entries.report();
    if report.entries == 0 && !log.is_empty() {
        return Err(RebuildError::NoRecords {
            log_len_bytes: log.len(),
            tail: report.tail,
        });
    }
    if needed > out.len() {
        return Err(RebuildError::BufferTooSmall {
            needed_bytes: needed,
        });
    }
    debug_assert_eq!(needed, report.index_size_bytes());
    debug_assert_eq!(
        out.get(..needed)
            .map(|index| chdx::validate_index(index, log.len() as u64)),
        Some(Ok(report.entries))
    );
    Ok(report)
}

/// Why an index must be rebuilt.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum RebuildReason {
    /// [`chdx::validate_index`] rejects it (where ESP-Claw wipes the session).
    Invalid(ChdxError),
    /// The byte after entry `entry`'s body is not `\n` (ESP-Claw's loader
    /// fails there and wipes the session).
    MissingNewline {
        /// Position of the entry.
        entry: usize,
    },
    /// Entry `entry`'s body is not valid JSON (ESP-Claw's loader fails there
    /// and wipes the session).
    MalformedRecord {
        /// Position of the entry.
        entry: usize,
    },
    /// The log holds a complete record at `offset` that no entry covers
    /// (typically power lost between writing a record and its entry); it
    /// would never be loaded.
    UnindexedRecord {
        /// Offset of the record in the log.
        offset: usize,
    },
}

impl fmt::Display for RebuildReason {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match *self {
            RebuildReason::Invalid(error) => write!(f, "{error}"),
            RebuildReason::MissingNewline { entry } => write!(
                f,
                "session index entry {entry}: the record is not followed by a newline in the log"
            ),
            RebuildReason::MalformedRecord { entry } => write!(
                f,
                "session index entry {entry}: the record is not valid JSON"
            ),
            RebuildReason::UnindexedRecord { offset } => write!(
                f,
                "the session log holds a record at offset {offset} that the index does not cover"
            ),
        }
    }
}

/// What to do with an existing index.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Verdict {
    /// The index matches the log: keep it (it holds the exact formats).
    Keep {
        /// Number of entries.
        entries: usize,
        /// The log's last segment if it has no newline (see
        /// [`RebuildReport::tail`]): repair the log before the next append.
        tail: Option<Segment>,
    },
    /// Rebuild it with [`rebuild_index_with_old`] (passing this index keeps
    /// the formats of the entries that still match).
    Rebuild(RebuildReason),
}

/// The first indexable record in `log[start..end]`, if any (`start` is a
/// line start), and the last segment of that range if it has no newline.
fn scan_gap(log: &[u8], start: usize, end: usize) -> (Option<usize>, Option<Segment>) {
    let Some(gap) = log.get(start..end) else {
        return (None, None);
    };
    let mut last = None;
    for segment in segments(gap) {
        if segment.is_indexable() {
            return (Some(start.saturating_add(segment.offset)), None);
        }
        last = Some(segment);
    }
    let tail = last
        .filter(|segment| !segment.terminated)
        .map(|segment| Segment {
            offset: start.saturating_add(segment.offset),
            ..segment
        });
    (None, tail)
}

/// Decides whether `index` can be kept for `log`.
///
/// Keep only if [`chdx::validate_index`] accepts it *and* ESP-Claw's loader
/// would read it: every entry's body is valid JSON followed by `\n`. It
/// must also cover every complete record of the log: a record between or
/// after the entries (power lost before its entry was written) asks for a
/// rebuild, which indexes it. Torn or blank bytes outside the entries are
/// fine. Reads the whole log once.
pub fn repair(index: &[u8], log: &[u8]) -> Verdict {
    let data_size_bytes = log.len() as u64;
    let count = match chdx::validate_index(index, data_size_bytes) {
        Ok(count) => count,
        Err(error) => return Verdict::Rebuild(RebuildReason::Invalid(error)),
    };
    // Start of the log not yet covered by an entry, in entry order.
    let mut covered = 0usize;
    // `validate_index` accepted every entry, so this yields all `count`.
    for (entry, checked) in chdx::entries(index, data_size_bytes).enumerate() {
        let start = checked.offset as usize;
        let body_end = checked.newline_offset() as usize;
        if log.get(body_end) != Some(&b'\n') {
            return Verdict::Rebuild(RebuildReason::MissingNewline { entry });
        }
        if log
            .get(start..body_end)
            .is_none_or(|body| validate_json(body).is_err())
        {
            return Verdict::Rebuild(RebuildReason::MalformedRecord { entry });
        }
        if start > covered {
            if let (Some(offset), _) = scan_gap(log, covered, start) {
                return Verdict::Rebuild(RebuildReason::UnindexedRecord { offset });
            }
        }
        covered = covered.max(body_end.saturating_add(1));
    }
    match scan_gap(log, covered, log.len()) {
        (Some(offset), _) => Verdict::Rebuild(RebuildReason::UnindexedRecord { offset }),
        (None, tail) => Verdict::Keep {
            entries: count,
            tail,
        },
    }
}
