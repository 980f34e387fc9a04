//! The entries of a log: [`entries`] and [`entries_with_old_index`] walk the
//! segments, infer each record, fill a format the body does not reveal from
//! the other records of its turn, and take an old index's entry for exactly
//! the same bytes as authoritative; the [`RebuildReport`] counts what was
//! found. A record is indexed only if its newline follows it.
//!
//! Pure logic over byte slices: no flash I/O, so nothing here is affected by
//! power loss.

use super::index::RebuildError;
use super::infer::{infer_record, Basis, Inference};
use super::segments::{segments, Segment, SegmentKind, Segments};
use super::{index_size_bytes, MAX_LOG_SIZE_BYTES};
use crate::chdx::{self, BackendFormat, Entry, RecordType, CHDX_ENTRY_SIZE, CHDX_HEADER_SIZE};

/// The entries of an old index, looked up by offset in one forward pass.
#[derive(Debug, Clone, Copy)]
struct OldIndex<'a> {
    index: &'a [u8],
    next: usize,
    count: usize,
}

impl<'a> OldIndex<'a> {
    /// Trusts nothing from an index whose header is wrong; ignores a partial
    /// last entry.
    fn new(index: &'a [u8]) -> Self {
        let count = match chdx::check_header(index) {
            Ok(()) => index.len().saturating_sub(CHDX_HEADER_SIZE) / CHDX_ENTRY_SIZE,
            Err(_) => 0,
        };
        OldIndex {
            index,
            next: 0,
            count,
        }
    }

    /// The type and format of the old entry for exactly `offset..offset +
    /// length`, if the old entries are in ascending order up to it and its
    /// fields are valid. Lookups must come with ascending offsets.
    fn lookup(&mut self, offset: usize, length: usize) -> Option<(RecordType, BackendFormat)> {
        while self.next < self.count {
            let raw = chdx::raw_entry_at(self.index, self.next)?;
            let raw_offset = usize::try_from(raw.offset).ok()?;
            if raw_offset < offset {
                self.next += 1;
                continue;
            }
            if raw_offset == offset && usize::try_from(raw.length).ok() == Some(length) {
                let fields = raw.check_fields(self.next).ok();
                self.next += 1;
                return fields;
            }
            return None;
        }
        None
    }
}

/// One entry of a rebuilt index, with how its type and format were decided.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RebuiltEntry {
    /// The index entry (offset, length counting the newline, type, format).
    pub entry: Entry,
    /// How the type was decided.
    pub type_basis: Basis,
    /// How the format was decided.
    pub format_basis: Basis,
}

/// What a rebuild found in the log.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct RebuildReport {
    /// Records indexed.
    pub entries: usize,
    /// Bytes of the log the entries cover (bodies and newlines).
    pub indexed_bytes: u64,
    /// Lines holding only whitespace.
    pub blank_lines: usize,
    /// Stretches of bytes that are not records (torn writes).
    pub skipped_segments: usize,
    /// Bytes in those stretches (their newlines included).
    pub skipped_bytes: u64,
    /// Valid records not indexed because no newline follows them.
    pub unterminated_records: usize,
    /// The last segment of the log if it has no newline: a record missing its
    /// newline (append `\n` to the log to index it, and before the next
    /// append, or it merges with the next record), or torn bytes.
    pub tail: Option<Segment>,
    /// Entries whose type is not certain ([`Basis::Hint`] or
    /// [`Basis::Default`]).
    pub types_uncertain: usize,
    /// Entries whose format came from their turn ([`Basis::Turn`]).
    pub formats_from_turn: usize,
    /// Entries whose format stayed [`BackendFormat::Unknown`] for want of
    /// evidence.
    pub formats_unknown: usize,
    /// Entries taken from the old index ([`Basis::OldIndex`]).
    pub from_old_index: usize,
}

impl RebuildReport {
    /// Size of the rebuilt index, in bytes.
    pub const fn index_size_bytes(&self) -> usize {
        index_size_bytes(self.entries)
    }

    /// `true` if every byte of the log belongs to an indexed record: nothing
    /// blank, skipped or unterminated.
    pub const fn is_clean(&self) -> bool {
        self.blank_lines == 0 && self.skipped_segments == 0 && self.unterminated_records == 0
    }

    fn note_segment(&mut self, segment: &Segment, log_len: usize) {
        match segment.kind {
            SegmentKind::Blank => self.blank_lines += 1,
            SegmentKind::Skipped(_) => {
                self.skipped_segments += 1;
                let len = segment.end().saturating_sub(segment.offset);
                self.skipped_bytes = self.skipped_bytes.saturating_add(len as u64);
            }
            SegmentKind::Record if !segment.terminated => self.unterminated_records += 1,
            SegmentKind::Record => {}
        }
        if !segment.terminated && segment.end() == log_len {
            self.tail = Some(*segment);
        }
    }

    fn note_entry(&mut self, entry: &RebuiltEntry) {
        self.entries += 1;
        self.indexed_bytes = self
            .indexed_bytes
            .saturating_add(u64::from(entry.entry.length));
        if !entry.type_basis.is_certain() {
            self.types_uncertain += 1;
        }
        match entry.format_basis {
            Basis::Turn => self.formats_from_turn += 1,
            Basis::OldIndex => self.from_old_index += 1,
            _ => {}
        }
        if entry.entry.backend_format == BackendFormat::Unknown
            && entry.format_basis == Basis::Default
        {
            self.formats_unknown += 1;
        }
    }
}

/// What the records after a format-less record of a turn say (see
/// [`Entries`]): the format of the first one with evidence, or `None` if the
/// turn ends first; valid for records before `until`.
#[derive(Debug, Clone, Copy)]
struct Ahead {
    until: usize,
    format: Option<BackendFormat>,
}

/// Iterator over the entries of the index rebuilt from a log; see
/// [`entries`].
///
/// Memory is O(1): a format the body does not give is looked for among the
/// following records of the turn once, and the answer is reused for the rest
/// of the turn, so each record is read at most twice.
#[derive(Debug, Clone)]
pub struct Entries<'a> {
    log: &'a [u8],
    segments: Segments<'a>,
    old: OldIndex<'a>,
    turn_format: Option<BackendFormat>,
    ahead: Option<Ahead>,
    report: RebuildReport,
}

/// The entries of the index rebuilt from `log`, in log order, without a
/// buffer: exactly the entries [`rebuild_index`](super::rebuild_index) writes.
///
/// Fails only if the log is larger than [`MAX_LOG_SIZE_BYTES`].
pub fn entries(log: &[u8]) -> Result<Entries<'_>, RebuildError> {
    entries_with_old_index(log, &[])
}

/// Like [`entries`], taking the type and format of a record from `old_index`
/// when an entry there has exactly its offset and length (see the module
/// documentation). `old_index` may be damaged: a wrong header makes it
/// ignored, bad entries are skipped, and entries must be in ascending offset
/// order (as ESP-Claw writes them) to be found.
pub fn entries_with_old_index<'a>(
    log: &'a [u8],
    old_index: &'a [u8],
) -> Result<Entries<'a>, RebuildError> {
    if log.len() > MAX_LOG_SIZE_BYTES {
        return Err(RebuildError::LogTooLarge {
            len_bytes: log.len(),
        });
    }
    Ok(Entries {
        log,
        segments: segments(log),
        old: OldIndex::new(old_index),
        turn_format: None,
        ahead: None,
        report: RebuildReport::default(),
    })
}

impl<'a> Entries<'a> {
    /// What was found so far; complete once the iterator is exhausted.
    pub fn report(&self) -> RebuildReport {
        self.report
    }

    /// The type and format of an indexable segment, from the old index or the
    /// body alone.
    fn infer_segment(log: &[u8], segment: &Segment, old: &mut OldIndex<'_>) -> Inference {
        let length = segment.len_bytes.saturating_add(1);
        if let Some((record_type, backend_format)) = old.lookup(segment.offset, length) {
            return Inference {
                record_type,
                type_basis: Basis::OldIndex,
                backend_format,
                format_basis: Basis::OldIndex,
            };
        }
        infer_record(segment.bytes(log))
            .unwrap_or(Inference::new(RecordType::AssistantFinal, Basis::Default))
    }

    /// The format that the rest of the turn of the record at `offset` gives.
    fn format_ahead(&mut self, offset: usize) -> Option<BackendFormat> {
        if let Some(ahead) = self.ahead.filter(|ahead| ahead.until > offset) {
            return ahead.format;
        }
        let mut ahead = Ahead {
            until: usize::MAX,
            format: None,
        };
        let mut old = self.old;
        for segment in self.segments.clone() {
            if !segment.is_indexable() {
                continue;
            }
            let inference = Self::infer_segment(self.log, &segment, &mut old);
            if inference.record_type == RecordType::User {
                ahead.until = segment.offset;
                break;
            }
            if inference.format_basis.is_evidence() {
                ahead = Ahead {
                    until: segment.offset,
                    format: Some(inference.backend_format),
                };
                break;
            }
        }
        self.ahead = Some(ahead);
        ahead.format
    }
}

impl Iterator for Entries<'_> {
    type Item = RebuiltEntry;

    fn next(&mut self) -> Option<RebuiltEntry> {
        while let Some(segment) = self.segments.next() {
            self.report.note_segment(&segment, self.log.len());
            if !segment.is_indexable() {
                continue;
            }
            let (Ok(offset), Ok(length)) = (
                u32::try_from(segment.offset),
                u32::try_from(segment.len_bytes.saturating_add(1)),
            ) else {
                // Unreachable: the log is at most `MAX_LOG_SIZE_BYTES`.
                continue;
            };
            let mut inference = Self::infer_segment(self.log, &segment, &mut self.old);
            if inference.record_type == RecordType::User {
                self.turn_format = None;
            }
            if inference.format_basis.is_evidence() {
                self.turn_format = Some(inference.backend_format);
            } else if let Some(format) = self
                .turn_format
                .or_else(|| self.format_ahead(segment.offset))
            {
                inference.backend_format = format;
                inference.format_basis = Basis::Turn;
            }
            let rebuilt = RebuiltEntry {
                entry: Entry {
                    offset,
                    length,
                    record_type: inference.record_type,
                    backend_format: inference.backend_format,
                },
                type_basis: inference.type_basis,
                format_basis: inference.format_basis,
            };
            self.report.note_entry(&rebuilt);
            return Some(rebuilt);
        }
        None
    }
}
