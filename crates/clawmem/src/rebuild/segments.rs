//! Splitting a log into records: [`segments`] cuts each line into
//! [`Segment`]s that tile the log (records, blank lines, torn stretches
//! skipped), as the module doc's "Splitting: torn lines" describes. Invalid
//! bytes are skipped and counted; valid records are never dropped.
//!
//! Pure logic over byte slices: no flash I/O, so nothing here is affected by
//! power loss.

use crate::backend::{validate_json, JsonErrorKind, ScanError};

/// Why a [`Segment`] is not a record.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SkipReason {
    /// Not valid JSON (a torn write); the scanner's first complaint.
    Malformed(JsonErrorKind),
    /// Valid JSON but not an object or array, which no writer of records
    /// produces.
    NotObjectOrArray,
}

/// What a [`Segment`] holds.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SegmentKind {
    /// One JSON object or array: a record body.
    Record,
    /// JSON whitespace only (an empty line).
    Blank,
    /// Bytes that are not a record.
    Skipped(SkipReason),
}

/// A stretch of the log: a record, a blank line or skipped bytes.
///
/// Segments tile the log: each starts where the previous one ended
/// ([`Segment::end`]), the first at 0, the last ends at the end of the log.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Segment {
    /// Offset of the first byte in the log.
    pub offset: usize,
    /// Length, without the newline that may follow.
    pub len_bytes: usize,
    /// `true` if a `\n` follows the segment (and belongs to it).
    pub terminated: bool,
    /// What the bytes are.
    pub kind: SegmentKind,
}

impl Segment {
    /// Offset just past the segment and its newline, if any.
    pub const fn end(&self) -> usize {
        self.offset
            .saturating_add(self.len_bytes)
            .saturating_add(self.terminated as usize)
    }

    /// `true` for a record followed by its newline: what an index entry can
    /// point to.
    pub fn is_indexable(&self) -> bool {
        self.kind == SegmentKind::Record && self.terminated
    }

    /// The segment's bytes (without the newline) in `log`; empty if `log` is
    /// not the log it came from.
    pub fn bytes<'a>(&self, log: &'a [u8]) -> &'a [u8] {
        log.get(self.offset..self.offset.saturating_add(self.len_bytes))
            .unwrap_or(&[])
    }
}

/// Iterator over the [`Segment`]s of a log; see [`segments`].
#[derive(Debug, Clone)]
pub struct Segments<'a> {
    log: &'a [u8],
    pos: usize,
}

/// Cuts `log` into [`Segment`]s, in order (see the module documentation).
/// Never fails: any byte pattern is cut into records, blank lines and skipped
/// bytes.
pub fn segments(log: &[u8]) -> Segments<'_> {
    Segments { log, pos: 0 }
}

const fn is_json_ws(byte: u8) -> bool {
    matches!(byte, b' ' | b'\t' | b'\n' | b'\r')
}

/// Classifies the start of `line` (which holds no `\n`), found at `offset` in
/// the log.
fn scan_line(line: &[u8], offset: usize, terminated: bool) -> Segment {
    let whole = |kind| Segment {
        offset,
        len_bytes: line.len(),
        terminated,
        kind,
    };
    if line.iter().all(|&b| is_json_ws(b)) {
        return whole(SegmentKind::Blank);
    }
    let first = line.iter().copied().find(|&b| !is_json_ws(b));
    let starts_container = matches!(first, Some(b'{' | b'['));
    let error = match validate_json(line) {
        Ok(()) if starts_container => return whole(SegmentKind::Record),
        Ok(()) => return whole(SegmentKind::Skipped(SkipReason::NotObjectOrArray)),
        Err(ScanError::Malformed {
            offset: rest,
            kind: JsonErrorKind::TrailingData,
        }) if starts_container && rest > 0 && rest < line.len() => {
            // `line[..rest]` is one complete object or array whose newline
            // was lost: a record, unterminated.
            return Segment {
                offset,
                len_bytes: rest,
                terminated: false,
                kind: SegmentKind::Record,
            };
        }
        Err(ScanError::Malformed { kind, .. }) => kind,
        Err(ScanError::BufferTooSmall { .. }) => JsonErrorKind::UnexpectedEnd,
    };
    // Torn start: the record is the first `{` or `[` from which the rest of
    // the line is one complete document.
    let reason = SegmentKind::Skipped(SkipReason::Malformed(error));
    for start in 1..line.len() {
        let Some(candidate) = line.get(start..) else {
            break;
        };
        if matches!(candidate.first(), Some(b'{' | b'[')) && validate_json(candidate).is_ok() {
            return Segment {
                offset,
                len_bytes: start,
                terminated: false,
                kind: reason,
            };
        }
    }
    whole(reason)
}

impl Iterator for Segments<'_> {
    type Item = Segment;

    fn next(&mut self) -> Option<Segment> {
        let start = self.pos;
        let rest = self.log.get(start..).filter(|rest| !rest.is_empty())?;
        let (line, terminated) = match rest.iter().position(|&b| b == b'\n') {
            Some(newline) => (rest.get(..newline).unwrap_or(rest), true),
            None => (rest, false),
        };
        let segment = scan_line(line, start, terminated);
        // Every segment holds at least one byte (a record, a torn prefix, or
        // a newline), so the walk ends within `log.len()` steps.
        debug_assert!(segment.end() > start);
        self.pos = if segment.end() > start {
            segment.end()
        } else {
            self.log.len()
        };
        Some(segment)
    }
}
