//! Rebuilding an ESP-Claw session index (`.log.idx`) from its log (`.log`),
//! instead of wiping the session as ESP-Claw does.
//!
//! This module owns three things: splitting a log into records
//! ([`segments`]), recognising each record's type and backend format from its
//! JSON ([`infer_record`], [`entries`]), and writing a complete [`chdx`] index
//! for them ([`rebuild_index`]). [`repair`] decides whether an existing index
//! can be kept.
//!
//! # What ESP-Claw writes
//!
//! Read from `components/claw_modules/claw_memory/src/claw_memory_session.c`
//! (`claw_memory_write_session_raw_record`,
//! `session_history_append_indexed_record`, `session_history_read_record_text`,
//! `session_history_load_indexed_json`) and from the writers of the bodies in
//! `components/claw_modules/claw_core/src/`: `claw_core_context_persist.c`,
//! `claw_core_agent_loop.c`, `claw_core_context.c`
//! (`claw_core_append_tool_results_messages`) and the three backends under
//! `llm/backends/`:
//!
//! - every record is one JSON text followed by one `\n`; the entry's length
//!   counts the newline, and the loader fails (and wipes the session) if the
//!   byte after the body is not `\n` or the body does not parse;
//! - the entry's backend format is the configured backend's, stamped at append
//!   time; it is **not** in the body;
//! - USER: `{"role":"user","content":"<text>"}` (built with cJSON from text);
//! - ASSISTANT_TOOL: the backend's `raw_message_json`. openai_compatible:
//!   `choices[0].message` as received (`tool_calls`, maybe
//!   `reasoning_content`, `refusal`, `annotations`). anthropic_compatible:
//!   `{"role":"assistant","content":[blocks]}` with `tool_use` (and `text`,
//!   `thinking`) blocks. openai_responses: a canonical
//!   `{"role":"assistant","content":...,"tool_calls":[...]}` plus
//!   `"_claw_provider_state":{"backend":"openai_responses","output":[...]}`;
//! - ASSISTANT_FINAL: the same `raw_message_json` without tool calls (the
//!   Responses one is just `{"role":"assistant","content":"<text>"}`), or, when
//!   a request failed, a text-built
//!   `{"role":"assistant","content":"Session note: ..."}`;
//! - TOOL_RESULT: `[{"role":"tool","tool_call_id":...,"content":...,"is_error":...}]`
//!   in this canonical shape **for every backend** (each backend converts it
//!   when it builds a request).
//!
//! Other writers (clawmem's own traces, older firmware) also store Anthropic
//! `tool_result` blocks, Responses `function_call` / `function_call_output`
//! items and Responses `message` items; those are recognised too.
//!
//! # Splitting: torn lines
//!
//! ESP-Claw has no checksums. A power cut can leave a partial body without its
//! newline at the end of the log; the next append then lands right after it,
//! so one line holds a torn prefix followed by a whole record. Each line (the
//! bytes up to a `\n` or the end of the log) is cut into [`Segment`]s that
//! tile the log:
//!
//! - a line that is one JSON object or array is a record;
//! - a line of JSON whitespace only is [`SegmentKind::Blank`];
//! - a line that starts with one complete object or array followed by more
//!   bytes (the newline after a record was lost) yields that record,
//!   unterminated, and the rest of the line is cut again;
//! - otherwise the start of the line is torn: the record is the first `{` or
//!   `[` from which the rest of the line is one complete JSON document, and
//!   what precedes it is [`SegmentKind::Skipped`]. If there is none, the
//!   whole line is skipped. (Only a record can complete a torn line: a valid
//!   document that ends at the end of the line and starts inside the torn
//!   prefix would need the prefix's brackets to close, and a torn prefix is
//!   cut before it closes them.)
//! - valid JSON that is not an object or array (ESP-Claw never writes one) is
//!   skipped.
//!
//! Invalid bytes are skipped and counted; valid records are never dropped. A
//! record is indexed only if its newline follows it, because ESP-Claw's
//! loader requires it: a record without one (the last bytes of the log, or
//! merged with the next record) is reported ([`RebuildReport::unterminated_records`],
//! [`RebuildReport::tail`]) so the caller can append the missing `\n`. Limit:
//! a record whose newline was lost *and* that follows a torn prefix on the
//! same line is skipped with the prefix.
//!
//! Cost: one pass over the log, plus, for a torn line, one validation per
//! candidate `{` or `[` (each stops at its first error, so in practice a few
//! passes over the line; at worst quadratic in the line length).
//!
//! # Inference
//!
//! [`infer_record`] reads one body and says how sure it is ([`Basis`]):
//! [`Basis::Shape`] when only that type or format writes such a body,
//! [`Basis::Hint`] when the body points to it but another writer could produce
//! the same, [`Basis::Default`] when nothing tells. The record type is nearly
//! always certain (the role and the shape say it); the format often is not: a
//! USER body, a canonical TOOL_RESULT and a Responses final look the same for
//! every backend.
//!
//! [`entries`] then fills a format the body does not reveal from the other
//! records of the same *turn* (from a USER record to the next, the unit that
//! compaction uses), [`Basis::Turn`]: every record between two USER records
//! was written by one request, hence by one backend. The nearest earlier
//! record of the turn with a known format wins, else the nearest later one.
//! This matters for loading: when the backend changes, ESP-Claw drops the
//! ASSISTANT_TOOL and TOOL_RESULT records of the old backend, and a canonical
//! TOOL_RESULT left at "unknown" would survive without its tool call.
//!
//! When an old index is at hand ([`rebuild_index_with_old`],
//! [`entries_with_old_index`]), an old entry with a valid type and format and
//! exactly the same offset and length as a rebuilt record is authoritative
//! ([`Basis::OldIndex`]): it keeps the exact format ESP-Claw stamped, which a
//! body cannot always tell (`unknown` versus `openai_compatible`).
//!
//! Pure logic over byte slices: no flash I/O and no allocation, so nothing
//! here is affected by power loss; writing the rebuilt index atomically is the
//! caller's job.

use core::fmt;

use crate::backend::{validate_json, JsonErrorKind, JsonKind, JsonValue, ScanError};
use crate::chdx::{
    self, BackendFormat, ChdxError, Entry, RecordType, CHDX_ENTRY_SIZE, CHDX_HEADER_SIZE,
};

/// Largest log an index can describe: entry offsets and lengths are `u32`.
pub const MAX_LOG_SIZE_BYTES: usize = u32::MAX as usize;

/// Size of an index with `entries` entries, in bytes (saturating).
pub const fn index_size_bytes(entries: usize) -> usize {
    CHDX_HEADER_SIZE.saturating_add(entries.saturating_mul(CHDX_ENTRY_SIZE))
}

// ---------------------------------------------------------------------------
// Splitting
// ---------------------------------------------------------------------------

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

// ---------------------------------------------------------------------------
// Inference
// ---------------------------------------------------------------------------

/// How a record's type or format was decided, strongest first.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum Basis {
    /// Taken from the old index entry for exactly these bytes.
    OldIndex,
    /// Only this type or format writes a body of this shape.
    Shape,
    /// The body points to it, but another writer could produce the same shape.
    Hint,
    /// The body does not tell; taken from another record of the same turn.
    Turn,
    /// Nothing tells: a default ([`BackendFormat::Unknown`] for a format).
    Default,
}

impl Basis {
    /// `true` for [`Basis::OldIndex`] and [`Basis::Shape`].
    pub const fn is_certain(self) -> bool {
        matches!(self, Basis::OldIndex | Basis::Shape)
    }

    /// `true` if the value comes from the record itself (old entry or body),
    /// so it can speak for the rest of its turn.
    const fn is_evidence(self) -> bool {
        matches!(self, Basis::OldIndex | Basis::Shape | Basis::Hint)
    }
}

/// A record's type and backend format as read from its body, with how sure
/// each is. A best effort: it never fails on a JSON object or array.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Inference {
    /// The record type.
    pub record_type: RecordType,
    /// How the type was decided.
    pub type_basis: Basis,
    /// The backend format ([`BackendFormat::Unknown`] when nothing tells).
    pub backend_format: BackendFormat,
    /// How the format was decided.
    pub format_basis: Basis,
}

impl Inference {
    /// `true` if neither type nor format was guessed.
    pub const fn is_certain(&self) -> bool {
        self.type_basis.is_certain() && self.format_basis.is_certain()
    }

    const fn new(record_type: RecordType, type_basis: Basis) -> Inference {
        Inference {
            record_type,
            type_basis,
            backend_format: BackendFormat::Unknown,
            format_basis: Basis::Default,
        }
    }

    /// Takes `format` if `basis` is stronger than the current one (the first
    /// of equals wins).
    fn offer(&mut self, format: BackendFormat, basis: Basis) {
        if basis < self.format_basis {
            self.backend_format = format;
            self.format_basis = basis;
        }
    }

    fn with_format(mut self, format: BackendFormat, basis: Basis) -> Inference {
        self.offer(format, basis);
        self
    }
}

fn member_is(value: JsonValue<'_>, name: &str, expected: &str) -> bool {
    value
        .member(name)
        .is_some_and(|member| member.is_string(expected))
}

fn type_is(value: JsonValue<'_>, expected: &str) -> bool {
    member_is(value, "type", expected)
}

/// `true` if `blocks` is an array holding an object of type `block_type`.
fn has_block(blocks: Option<JsonValue<'_>>, block_type: &str) -> bool {
    blocks.is_some_and(|blocks| blocks.elements().any(|block| type_is(block, block_type)))
}

/// Infers the type and format of one record body; `None` if the body is not
/// a JSON object or array (it cannot be a record).
///
/// Rules, in order (keys match ignoring ASCII case as cJSON does, string
/// values exactly):
///
/// | body | type | format |
/// |---|---|---|
/// | `role` `user` with `tool_result` blocks | TOOL_RESULT | anthropic (shape) |
/// | `role` `user` | USER | unknown |
/// | `role` `assistant` with non-empty `tool_calls` or `tool_use` blocks | ASSISTANT_TOOL | see below |
/// | `role` `assistant` otherwise | ASSISTANT_FINAL | see below |
/// | `role` `tool` | TOOL_RESULT | unknown |
/// | `type` `function_call` / `function_call_output` / `message` | ASSISTANT_TOOL / TOOL_RESULT / ASSISTANT_FINAL (hint) | responses (shape) |
/// | `type` `tool_use` / `tool_result` | ASSISTANT_TOOL / TOOL_RESULT | anthropic (shape) |
/// | an `output` array (a raw Responses body) | as an array below | responses (shape) |
/// | any other object | ASSISTANT_FINAL (default) | unknown |
///
/// An assistant message's format: `_claw_provider_state.backend` =
/// `openai_responses` or `type` `message` give responses (shape); `tool_use`,
/// `thinking` or `redacted_thinking` blocks give anthropic (shape); `text`
/// blocks anthropic (hint); `output_text` blocks responses (hint); a
/// `tool_calls`, `reasoning_content`, `refusal` or `annotations` member
/// openai_compatible (hint); a bare `{"role":"assistant","content":"..."}`
/// nothing (ESP-Claw writes it for openai_compatible, for openai_responses and
/// for failure notes).
///
/// An array: any `function_call` item makes it an ASSISTANT_TOOL (responses),
/// any `tool_use` block an ASSISTANT_TOOL (anthropic); else any
/// `function_call_output` item a TOOL_RESULT (responses), any `tool_result`
/// block (or user message holding them) a TOOL_RESULT (anthropic), any `role`
/// `tool` message a TOOL_RESULT (unknown: ESP-Claw's canonical shape for all
/// backends), any `message` or `reasoning` item an ASSISTANT_FINAL (hint,
/// responses); any other array a TOOL_RESULT (hint: ESP-Claw writes arrays
/// only for tool results), format unknown.
pub fn infer_record(body: &[u8]) -> Option<Inference> {
    let root = JsonValue::parse(body).ok()?;
    match root.kind() {
        JsonKind::Object => Some(infer_object(root)),
        JsonKind::Array => Some(infer_array(root)),
        _ => None,
    }
}

fn infer_object(object: JsonValue<'_>) -> Inference {
    use BackendFormat::{AnthropicCompatible, OpenAiResponses};
    use RecordType::{AssistantFinal, AssistantTool, ToolResult, User};

    if let Some(role) = object.member("role") {
        if role.is_string("user") {
            if has_block(object.member("content"), "tool_result") {
                return Inference::new(ToolResult, Basis::Shape)
                    .with_format(AnthropicCompatible, Basis::Shape);
            }
            return Inference::new(User, Basis::Shape);
        }
        if role.is_string("assistant") {
            return infer_assistant(object);
        }
        if role.is_string("tool") {
            return Inference::new(ToolResult, Basis::Shape);
        }
        return Inference::new(AssistantFinal, Basis::Default);
    }
    let typed = |record_type, type_basis, format| {
        Inference::new(record_type, type_basis).with_format(format, Basis::Shape)
    };
    if type_is(object, "function_call") {
        return typed(AssistantTool, Basis::Shape, OpenAiResponses);
    }
    if type_is(object, "function_call_output") {
        return typed(ToolResult, Basis::Shape, OpenAiResponses);
    }
    if type_is(object, "message") {
        return typed(AssistantFinal, Basis::Hint, OpenAiResponses);
    }
    if type_is(object, "tool_use") {
        return typed(AssistantTool, Basis::Shape, AnthropicCompatible);
    }
    if type_is(object, "tool_result") {
        return typed(ToolResult, Basis::Shape, AnthropicCompatible);
    }
    if let Some(output) = object
        .member("output")
        .filter(|output| output.kind() == JsonKind::Array)
    {
        return infer_array(output).with_format(OpenAiResponses, Basis::Shape);
    }
    Inference::new(AssistantFinal, Basis::Default)
}

fn infer_assistant(message: JsonValue<'_>) -> Inference {
    use BackendFormat::{AnthropicCompatible, OpenAiCompatible, OpenAiResponses};

    let mut tool = false;
    let mut inference = Inference::new(RecordType::AssistantFinal, Basis::Shape);
    let provider = message
        .member("_claw_provider_state")
        .and_then(|state| state.member("backend"));
    if provider.is_some_and(|backend| backend.is_string("openai_responses")) {
        inference.offer(OpenAiResponses, Basis::Shape);
    }
    if type_is(message, "message") {
        inference.offer(OpenAiResponses, Basis::Shape);
    }
    if let Some(calls) = message.member("tool_calls") {
        // Present but empty or null: an OpenAI message without calls.
        tool |= calls.elements().next().is_some();
        inference.offer(OpenAiCompatible, Basis::Hint);
    }
    if let Some(content) = message
        .member("content")
        .filter(|content| content.kind() == JsonKind::Array)
    {
        for block in content.elements() {
            if type_is(block, "tool_use") {
                tool = true;
                inference.offer(AnthropicCompatible, Basis::Shape);
            } else if type_is(block, "thinking") || type_is(block, "redacted_thinking") {
                inference.offer(AnthropicCompatible, Basis::Shape);
            } else if type_is(block, "output_text") {
                inference.offer(OpenAiResponses, Basis::Hint);
            } else if type_is(block, "text") {
                inference.offer(AnthropicCompatible, Basis::Hint);
            }
        }
    }
    for openai_member in ["reasoning_content", "refusal", "annotations"] {
        if message.member(openai_member).is_some() {
            inference.offer(OpenAiCompatible, Basis::Hint);
        }
    }
    if tool {
        inference.record_type = RecordType::AssistantTool;
    }
    inference
}

fn infer_array(array: JsonValue<'_>) -> Inference {
    use BackendFormat::{AnthropicCompatible, OpenAiResponses};
    use RecordType::{AssistantFinal, AssistantTool, ToolResult};

    let (mut function_call, mut tool_use, mut function_output) = (false, false, false);
    let (mut tool_result, mut tool_role, mut responses_item) = (false, false, false);
    for item in array.elements() {
        if item.kind() != JsonKind::Object {
            continue;
        }
        function_call |= type_is(item, "function_call");
        tool_use |= type_is(item, "tool_use");
        function_output |= type_is(item, "function_call_output");
        tool_result |= type_is(item, "tool_result")
            || (member_is(item, "role", "user")
                && has_block(item.member("content"), "tool_result"));
        tool_role |= member_is(item, "role", "tool");
        responses_item |= type_is(item, "message") || type_is(item, "reasoning");
    }
    let shaped = |record_type, type_basis, format| {
        Inference::new(record_type, type_basis).with_format(format, Basis::Shape)
    };
    if function_call {
        shaped(AssistantTool, Basis::Shape, OpenAiResponses)
    } else if tool_use {
        shaped(AssistantTool, Basis::Shape, AnthropicCompatible)
    } else if function_output {
        shaped(ToolResult, Basis::Shape, OpenAiResponses)
    } else if tool_result {
        shaped(ToolResult, Basis::Shape, AnthropicCompatible)
    } else if tool_role {
        Inference::new(ToolResult, Basis::Shape)
    } else if responses_item {
        shaped(AssistantFinal, Basis::Hint, OpenAiResponses)
    } else {
        Inference::new(ToolResult, Basis::Hint)
    }
}

// ---------------------------------------------------------------------------
// Entries
// ---------------------------------------------------------------------------

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
/// buffer: exactly the entries [`rebuild_index`] writes.
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

// ---------------------------------------------------------------------------
// Writing the index
// ---------------------------------------------------------------------------

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

// ---------------------------------------------------------------------------
// Keep or rebuild
// ---------------------------------------------------------------------------

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

#[cfg(test)]
mod tests {
    extern crate std;

    use super::*;
    use std::string::ToString;
    use std::vec;
    use std::vec::Vec;
    use BackendFormat::{
        AnthropicCompatible as Anthropic, OpenAiCompatible as OpenAi, OpenAiResponses as Responses,
        Unknown,
    };
    use Basis::{Default as Dflt, Hint, OldIndex, Shape, Turn};
    use RecordType::{AssistantFinal, AssistantTool, ToolResult, User};

    // Bodies from traces/smoke.jsonl (all four types in the trace's forms).
    const OPENAI_USER: &str = r#"{"role":"user","content":"Move 'final_report.pdf' within document directory to 'temp' directory in document. Make sure to create the directory"}"#;
    const OPENAI_TOOL: &str = r#"{"role":"assistant","content":null,"tool_calls":[{"id":"call_1","type":"function","function":{"name":"cd","arguments":"{\"folder\":\"document\"}"}},{"id":"call_2","type":"function","function":{"name":"mkdir","arguments":"{\"dir_name\":\"temp\"}"}}]}"#;
    const OPENAI_RESULT: &str = r#"[{"role":"tool","tool_call_id":"call_1","content":"{\"current_working_directory\": \"document\"}","is_error":false},{"role":"tool","tool_call_id":"call_2","content":"None","is_error":false}]"#;
    const OPENAI_FINAL: &str = r#"{"role":"assistant","content":"(templated reply: BFCL has no reference final answers) Done. I used cd, mkdir and mv (3 calls)."}"#;
    const ANTHROPIC_TOOL: &str = r#"{"role":"assistant","content":[{"type":"tool_use","id":"call_1","name":"ls","input":{"a":true}}]}"#;
    const ANTHROPIC_RESULT: &str = r#"[{"type":"tool_result","tool_use_id":"call_1","content":"{\"current_directory_content\": [\"workspace\"]}","is_error":false}]"#;
    const ANTHROPIC_FINAL: &str = r#"{"role":"assistant","content":[{"type":"text","text":"(templated reply: BFCL has no reference final answers) Done. I used ls (1 call)."}]}"#;
    const RESPONSES_TOOL: &str =
        r#"[{"type":"function_call","call_id":"call_1","name":"ls","arguments":"{\"a\":false}"}]"#;
    const RESPONSES_RESULT: &str = r#"[{"type":"function_call_output","call_id":"call_1","output":"{\"current_directory_content\": [\"document\", \"archive\"]}"}]"#;
    const RESPONSES_FINAL: &str = r#"{"type":"message","role":"assistant","content":[{"type":"output_text","text":"(templated reply: BFCL has no reference final answers) I used ls: document and archive."}]}"#;

    // Bodies as ESP-Claw itself writes them (see the module documentation).
    const ESP_RESPONSES_TOOL: &str = r#"{"role":"assistant","content":null,"tool_calls":[{"id":"call_1","type":"function","function":{"name":"ls","arguments":"{}"}}],"_claw_provider_state":{"backend":"openai_responses","output":[{"type":"function_call","call_id":"call_1","name":"ls","arguments":"{}"}]}}"#;
    const ESP_ANTHROPIC_FINAL: &str = r#"{"role":"assistant","content":[{"type":"thinking","thinking":"short","signature":"s"},{"type":"text","text":"Hi."}]}"#;
    const ESP_FAILURE_NOTE: &str = r#"{"role":"assistant","content":"Session note: the previous request failed before producing a final answer.\nReason: timeout"}"#;

    fn infer(body: &str) -> Inference {
        infer_record(body.as_bytes()).unwrap()
    }

    fn check(body: &str, ty: RecordType, ty_basis: Basis, format: BackendFormat, basis: Basis) {
        let inference = infer(body);
        assert_eq!(
            (inference.record_type, inference.type_basis),
            (ty, ty_basis),
            "type of {body}"
        );
        assert_eq!(
            (inference.backend_format, inference.format_basis),
            (format, basis),
            "format of {body}"
        );
    }

    fn log_of(bodies: &[&str]) -> Vec<u8> {
        let mut log = Vec::new();
        for body in bodies {
            log.extend_from_slice(body.as_bytes());
            log.push(b'\n');
        }
        log
    }

    fn rebuild(log: &[u8]) -> (Vec<u8>, RebuildReport) {
        let mut out = vec![0u8; 8 + 10 * 64];
        let report = rebuild_index(log, &mut out).unwrap();
        out.truncate(report.index_size_bytes());
        (out, report)
    }

    fn all_entries(log: &[u8]) -> Vec<RebuiltEntry> {
        entries(log).unwrap().collect()
    }

    fn types_and_formats(log: &[u8]) -> Vec<(RecordType, BackendFormat, Basis)> {
        all_entries(log)
            .iter()
            .map(|e| (e.entry.record_type, e.entry.backend_format, e.format_basis))
            .collect()
    }

    fn kinds(log: &[u8]) -> Vec<(usize, usize, bool, SegmentKind)> {
        segments(log)
            .map(|s| (s.offset, s.len_bytes, s.terminated, s.kind))
            .collect()
    }

    fn assert_tiles(log: &[u8]) {
        let mut at = 0;
        for segment in segments(log) {
            assert_eq!(segment.offset, at);
            assert!(segment.end() > at);
            if segment.terminated {
                assert_eq!(log[segment.offset + segment.len_bytes], b'\n');
            }
            assert!(!segment.bytes(log).contains(&b'\n'));
            at = segment.end();
        }
        assert_eq!(at, log.len());
    }

    // --- inference: every type in every format ---------------------------

    #[test]
    fn openai_compatible_records() {
        check(OPENAI_USER, User, Shape, Unknown, Dflt);
        check(OPENAI_TOOL, AssistantTool, Shape, OpenAi, Hint);
        // ESP-Claw's canonical tool results carry no format of their own.
        check(OPENAI_RESULT, ToolResult, Shape, Unknown, Dflt);
        check(OPENAI_FINAL, AssistantFinal, Shape, Unknown, Dflt);
        check(
            r#"{"role":"assistant","content":"Hi","refusal":null,"annotations":[]}"#,
            AssistantFinal,
            Shape,
            OpenAi,
            Hint,
        );
        check(
            r#"{"role":"assistant","content":"Hi","reasoning_content":"think"}"#,
            AssistantFinal,
            Shape,
            OpenAi,
            Hint,
        );
        // `tool_calls` present but empty: no calls, still OpenAI-shaped.
        check(
            r#"{"role":"assistant","content":"Hi","tool_calls":[]}"#,
            AssistantFinal,
            Shape,
            OpenAi,
            Hint,
        );
    }

    #[test]
    fn anthropic_compatible_records() {
        check(ANTHROPIC_TOOL, AssistantTool, Shape, Anthropic, Shape);
        check(ANTHROPIC_RESULT, ToolResult, Shape, Anthropic, Shape);
        check(ANTHROPIC_FINAL, AssistantFinal, Shape, Anthropic, Hint);
        check(ESP_ANTHROPIC_FINAL, AssistantFinal, Shape, Anthropic, Shape);
        // Anthropic's wire form of tool results: a user message of blocks.
        check(
            r#"{"role":"user","content":[{"type":"tool_result","tool_use_id":"t","content":"ok"}]}"#,
            ToolResult,
            Shape,
            Anthropic,
            Shape,
        );
        check(
            r#"[{"role":"user","content":[{"type":"tool_result","tool_use_id":"t","content":"ok"}]}]"#,
            ToolResult,
            Shape,
            Anthropic,
            Shape,
        );
        // Text and a tool call in one message: a tool record.
        check(
            r#"{"role":"assistant","content":[{"type":"text","text":"Let me look."},{"type":"tool_use","id":"t","name":"ls","input":{}}]}"#,
            AssistantTool,
            Shape,
            Anthropic,
            Shape,
        );
    }

    #[test]
    fn openai_responses_records() {
        check(RESPONSES_TOOL, AssistantTool, Shape, Responses, Shape);
        check(RESPONSES_RESULT, ToolResult, Shape, Responses, Shape);
        check(RESPONSES_FINAL, AssistantFinal, Shape, Responses, Shape);
        // ESP-Claw's canonical Responses tool message keeps the provider state.
        check(ESP_RESPONSES_TOOL, AssistantTool, Shape, Responses, Shape);
        // Single items and a raw Responses body.
        check(
            r#"{"type":"function_call","call_id":"c","name":"n","arguments":"{}"}"#,
            AssistantTool,
            Shape,
            Responses,
            Shape,
        );
        check(
            r#"{"type":"function_call_output","call_id":"c","output":"x"}"#,
            ToolResult,
            Shape,
            Responses,
            Shape,
        );
        check(
            r#"{"id":"r","output":[{"type":"reasoning","summary":[]},{"type":"message","role":"assistant","content":[{"type":"output_text","text":"Hi"}]}]}"#,
            AssistantFinal,
            Hint,
            Responses,
            Shape,
        );
        check(
            r#"{"id":"r","output":[{"type":"function_call","call_id":"c","name":"n","arguments":"{}"}]}"#,
            AssistantTool,
            Shape,
            Responses,
            Shape,
        );
        check(
            r#"{"role":"assistant","content":[{"type":"output_text","text":"Hi"}]}"#,
            AssistantFinal,
            Shape,
            Responses,
            Hint,
        );
    }

    #[test]
    fn bodies_that_do_not_tell_their_format() {
        // A Responses final and a failure note look like any OpenAI final.
        check(
            r#"{"role":"assistant","content":"Hi"}"#,
            AssistantFinal,
            Shape,
            Unknown,
            Dflt,
        );
        check(ESP_FAILURE_NOTE, AssistantFinal, Shape, Unknown, Dflt);
        check(
            r#"{"role":"tool","tool_call_id":"c","content":"x"}"#,
            ToolResult,
            Shape,
            Unknown,
            Dflt,
        );
        // Unrecognised shapes: kept, with a default type.
        check(r#"{"hello":"world"}"#, AssistantFinal, Dflt, Unknown, Dflt);
        check(
            r#"{"role":"system","content":"x"}"#,
            AssistantFinal,
            Dflt,
            Unknown,
            Dflt,
        );
        check("[]", ToolResult, Hint, Unknown, Dflt);
        check("[1,\"x\",null]", ToolResult, Hint, Unknown, Dflt);
        // Roles are compared exactly, keys ignoring case (as cJSON).
        check(
            r#"{"ROLE":"user","content":"x"}"#,
            User,
            Shape,
            Unknown,
            Dflt,
        );
        check(
            r#"{"role":"User","content":"x"}"#,
            AssistantFinal,
            Dflt,
            Unknown,
            Dflt,
        );
        // Not objects or arrays, or not JSON: not records.
        for body in ["42", "\"text\"", "null", "{", "", "{\"a\":1} x"] {
            assert_eq!(infer_record(body.as_bytes()), None, "{body}");
        }
        assert!(!infer(OPENAI_FINAL).is_certain());
        assert!(infer(ANTHROPIC_TOOL).is_certain());
    }

    #[test]
    fn json_navigation_reads_like_cjson() {
        // The `backend::JsonValue` helper that inference is built on.
        let body =
            br#" {"Role":"assistant","content":[{"type":"text"},7,{"TYPE":"tool_use"}],"n":null} "#;
        let root = JsonValue::parse(body).unwrap();
        assert_eq!(root.kind(), JsonKind::Object);
        let role = root.member("role").unwrap();
        assert!(role.is_string("assistant"));
        assert!(!role.is_string("Assistant"));
        assert!(!role.is_string("assistan"));
        let content = root.member("content").unwrap();
        let kinds: Vec<JsonKind> = content.elements().map(JsonValue::kind).collect();
        assert_eq!(
            kinds,
            [JsonKind::Object, JsonKind::Number, JsonKind::Object]
        );
        assert!(type_is(content.elements().nth(2).unwrap(), "tool_use"));
        assert_eq!(root.member("n").unwrap().kind(), JsonKind::Null);
        assert!(root.member("missing").is_none());
        assert_eq!(root.elements().count(), 0);
        assert!(content.member("type").is_none());
        assert!(JsonValue::parse(b"{").is_err());
    }

    // --- splitting ---------------------------------------------------------

    #[test]
    fn a_clean_log_is_one_record_per_line() {
        let log = log_of(&[OPENAI_USER, OPENAI_TOOL, OPENAI_RESULT, OPENAI_FINAL]);
        let segs: Vec<Segment> = segments(&log).collect();
        assert_eq!(segs.len(), 4);
        assert!(segs.iter().all(Segment::is_indexable));
        assert_eq!(segs[1].bytes(&log), OPENAI_TOOL.as_bytes());
        assert_eq!(segs[1].offset, OPENAI_USER.len() + 1);
        assert_tiles(&log);
    }

    #[test]
    fn blank_lines_and_whitespace_are_tolerated() {
        let log = b"\n  \r\n{\"role\":\"user\",\"content\":\"a\"}\r\n\t[]  \n\n";
        assert_eq!(
            kinds(log),
            vec![
                (0, 0, true, SegmentKind::Blank),
                (1, 3, true, SegmentKind::Blank),
                (5, 30, true, SegmentKind::Record),
                (36, 5, true, SegmentKind::Record),
                (42, 0, true, SegmentKind::Blank),
            ]
        );
        assert_tiles(log);
        let (index, report) = rebuild(log);
        assert_eq!(report.entries, 2);
        assert_eq!(report.blank_lines, 3);
        assert!(!report.is_clean());
        assert_eq!(chdx::validate_index(&index, log.len() as u64), Ok(2));
    }

    #[test]
    fn a_final_line_without_newline_is_reported_not_indexed() {
        let mut log = log_of(&[OPENAI_USER]);
        log.extend_from_slice(OPENAI_FINAL.as_bytes());
        let (index, report) = rebuild(&log);
        assert_eq!(report.entries, 1);
        assert_eq!(report.unterminated_records, 1);
        let tail = report.tail.unwrap();
        assert_eq!(tail.kind, SegmentKind::Record);
        assert_eq!(tail.offset, OPENAI_USER.len() + 1);
        assert_eq!(tail.bytes(&log), OPENAI_FINAL.as_bytes());
        assert_eq!(chdx::validate_index(&index, log.len() as u64), Ok(1));
        // Appending the newline makes it indexable.
        log.push(b'\n');
        let (_, report) = rebuild(&log);
        assert_eq!(report.entries, 2);
        assert!(report.is_clean());
        assert_eq!(report.tail, None);
    }

    #[test]
    fn a_torn_line_merged_with_the_next_record_keeps_the_record() {
        // Power lost in the middle of the second record; the next append
        // lands right after the torn bytes.
        let torn = &OPENAI_TOOL[..57];
        let mut log = log_of(&[OPENAI_USER]);
        log.extend_from_slice(torn.as_bytes());
        log.extend_from_slice(&log_of(&[OPENAI_USER, OPENAI_FINAL]));
        assert_tiles(&log);
        let segs: Vec<Segment> = segments(&log).collect();
        assert_eq!(segs.len(), 4);
        assert!(matches!(
            segs[1].kind,
            SegmentKind::Skipped(SkipReason::Malformed(_))
        ));
        assert_eq!(segs[1].bytes(&log), torn.as_bytes());
        assert!(!segs[1].terminated);
        assert_eq!(segs[2].bytes(&log), OPENAI_USER.as_bytes());
        assert!(segs[2].is_indexable());
        let (index, report) = rebuild(&log);
        assert_eq!(report.entries, 3);
        assert_eq!(report.skipped_segments, 1);
        assert_eq!(report.skipped_bytes, torn.len() as u64);
        assert_eq!(chdx::validate_index(&index, log.len() as u64), Ok(3));
        let types: Vec<RecordType> = all_entries(&log)
            .iter()
            .map(|e| e.entry.record_type)
            .collect();
        assert_eq!(types, [User, User, AssistantFinal]);
    }

    #[test]
    fn every_tear_point_keeps_every_whole_record() {
        let whole = [
            OPENAI_USER,
            ANTHROPIC_TOOL,
            ANTHROPIC_RESULT,
            ESP_RESPONSES_TOOL,
            OPENAI_RESULT,
        ];
        for torn_body in whole {
            for cut in 1..torn_body.len() {
                let mut log = log_of(&[OPENAI_USER]);
                log.extend_from_slice(&torn_body.as_bytes()[..cut]);
                log.extend_from_slice(&log_of(&[ANTHROPIC_FINAL, OPENAI_FINAL]));
                assert_tiles(&log);
                let bodies: Vec<&[u8]> = all_entries(&log)
                    .iter()
                    .map(|e| &log[e.entry.offset as usize..e.entry.newline_offset() as usize])
                    .collect();
                assert_eq!(
                    bodies,
                    [
                        OPENAI_USER.as_bytes(),
                        ANTHROPIC_FINAL.as_bytes(),
                        OPENAI_FINAL.as_bytes()
                    ],
                    "torn {torn_body} at {cut}"
                );
            }
        }
    }

    #[test]
    fn a_long_torn_line_is_recovered() {
        // A ~130 KiB canonical tool result torn halfway, then the next record:
        // each `{` inside it is tried and rejected after one small element.
        let element = r#"{"role":"tool","tool_call_id":"call_1","content":"{\"k\": [1, 2, {\"x\": 3}]}","is_error":false}"#;
        let mut big = Vec::from(&b"["[..]);
        for i in 0..1500 {
            if i > 0 {
                big.push(b',');
            }
            big.extend_from_slice(element.as_bytes());
        }
        big.push(b']');
        assert_eq!(infer_record(&big).unwrap().record_type, ToolResult);
        let mut log = log_of(&[OPENAI_USER]);
        log.extend_from_slice(&big[..big.len() / 2]);
        log.extend_from_slice(&log_of(&[OPENAI_FINAL]));
        let (index, report) = rebuild(&log);
        assert_eq!(report.entries, 2);
        assert_eq!(report.skipped_bytes, (big.len() / 2) as u64);
        assert_eq!(chdx::validate_index(&index, log.len() as u64), Ok(2));
        assert_eq!(segments(&log).nth(1).unwrap().bytes(&[]), b"");
    }

    #[test]
    fn a_lost_newline_between_two_records_keeps_both_in_view() {
        let mut log = Vec::from(OPENAI_USER.as_bytes());
        log.extend_from_slice(b" ");
        log.extend_from_slice(&log_of(&[OPENAI_FINAL]));
        assert_eq!(
            kinds(&log),
            vec![
                (0, OPENAI_USER.len() + 1, false, SegmentKind::Record),
                (
                    OPENAI_USER.len() + 1,
                    OPENAI_FINAL.len(),
                    true,
                    SegmentKind::Record
                ),
            ]
        );
        let (index, report) = rebuild(&log);
        // Only the second can be indexed: ESP-Claw needs the newline.
        assert_eq!(report.entries, 1);
        assert_eq!(report.unterminated_records, 1);
        assert_eq!(report.tail, None);
        assert_eq!(chdx::validate_index(&index, log.len() as u64), Ok(1));
    }

    #[test]
    fn valid_json_that_is_not_a_record_is_skipped() {
        let mut log = log_of(&["42", "\"text\"", "null"]);
        log.extend_from_slice(&log_of(&[OPENAI_USER]));
        let (_, report) = rebuild(&log);
        assert_eq!(report.entries, 1);
        assert_eq!(report.skipped_segments, 3);
        assert_eq!(
            segments(&log).next().unwrap().kind,
            SegmentKind::Skipped(SkipReason::NotObjectOrArray)
        );
        // A scalar followed by a record on one line: the scalar is skipped.
        let mut log = Vec::from(&b"12"[..]);
        log.extend_from_slice(&log_of(&[OPENAI_USER]));
        assert_eq!(
            kinds(&log)[1],
            (2, OPENAI_USER.len(), true, SegmentKind::Record)
        );
    }

    #[test]
    fn a_torn_tail_is_skipped_and_reported() {
        let mut log = log_of(&[OPENAI_USER, OPENAI_FINAL]);
        log.extend_from_slice(&OPENAI_TOOL.as_bytes()[..40]);
        let (index, report) = rebuild(&log);
        assert_eq!(report.entries, 2);
        assert_eq!(report.skipped_segments, 1);
        let tail = report.tail.unwrap();
        assert!(matches!(tail.kind, SegmentKind::Skipped(_)));
        assert_eq!(tail.end(), log.len());
        assert_eq!(chdx::validate_index(&index, log.len() as u64), Ok(2));
    }

    // --- turns --------------------------------------------------------------

    #[test]
    fn formats_spread_through_a_turn() {
        // ESP-Claw's own anthropic turn: user, tool_use, canonical tool result,
        // final with blocks.
        let log = log_of(&[
            OPENAI_USER,
            ANTHROPIC_TOOL,
            OPENAI_RESULT,
            ESP_ANTHROPIC_FINAL,
        ]);
        assert_eq!(
            types_and_formats(&log),
            [
                (User, Anthropic, Turn),
                (AssistantTool, Anthropic, Shape),
                (ToolResult, Anthropic, Turn),
                (AssistantFinal, Anthropic, Shape),
            ]
        );
        // ESP-Claw's own Responses turn: the final is a bare text message.
        let log = log_of(&[OPENAI_USER, ESP_RESPONSES_TOOL, OPENAI_RESULT, OPENAI_FINAL]);
        assert_eq!(
            types_and_formats(&log),
            [
                (User, Responses, Turn),
                (AssistantTool, Responses, Shape),
                (ToolResult, Responses, Turn),
                (AssistantFinal, Responses, Turn),
            ]
        );
    }

    #[test]
    fn formats_do_not_cross_user_records() {
        let log = log_of(&[
            OPENAI_USER,
            OPENAI_FINAL, // no evidence in this turn
            OPENAI_USER,
            OPENAI_TOOL,
            OPENAI_RESULT,
            OPENAI_FINAL,
            OPENAI_USER,
            ANTHROPIC_FINAL,
            OPENAI_USER,
        ]);
        assert_eq!(
            types_and_formats(&log),
            [
                (User, Unknown, Dflt),
                (AssistantFinal, Unknown, Dflt),
                (User, OpenAi, Turn),
                (AssistantTool, OpenAi, Hint),
                (ToolResult, OpenAi, Turn),
                (AssistantFinal, OpenAi, Turn),
                (User, Anthropic, Turn),
                (AssistantFinal, Anthropic, Hint),
                (User, Unknown, Dflt),
            ]
        );
        let report = {
            let mut it = entries(&log).unwrap();
            it.by_ref().for_each(drop);
            it.report()
        };
        assert_eq!(report.formats_from_turn, 4);
        assert_eq!(report.formats_unknown, 3);
        assert_eq!(report.types_uncertain, 0);
    }

    #[test]
    fn the_nearest_earlier_evidence_wins_within_a_turn() {
        // Cannot happen with ESP-Claw (one backend per request), but must be
        // deterministic.
        let log = log_of(&[
            OPENAI_USER,
            ANTHROPIC_TOOL,
            OPENAI_RESULT,
            RESPONSES_TOOL,
            OPENAI_RESULT,
        ]);
        assert_eq!(
            types_and_formats(&log),
            [
                (User, Anthropic, Turn),
                (AssistantTool, Anthropic, Shape),
                (ToolResult, Anthropic, Turn),
                (AssistantTool, Responses, Shape),
                (ToolResult, Responses, Turn),
            ]
        );
    }

    #[test]
    fn the_smoke_trace_session_rebuilds_with_its_formats() {
        // The records of traces/smoke.jsonl in order (one session per backend).
        let log = log_of(&[
            OPENAI_USER,
            OPENAI_TOOL,
            OPENAI_RESULT,
            OPENAI_FINAL,
            OPENAI_USER,
            ANTHROPIC_TOOL,
            ANTHROPIC_RESULT,
            ANTHROPIC_FINAL,
            OPENAI_USER,
            RESPONSES_TOOL,
            RESPONSES_RESULT,
            RESPONSES_FINAL,
        ]);
        let (index, report) = rebuild(&log);
        assert_eq!(chdx::validate_index(&index, log.len() as u64), Ok(12));
        assert!(report.is_clean());
        assert_eq!(report.indexed_bytes, log.len() as u64);
        let expected = [
            (User, OpenAi),
            (AssistantTool, OpenAi),
            (ToolResult, OpenAi),
            (AssistantFinal, OpenAi),
            (User, Anthropic),
            (AssistantTool, Anthropic),
            (ToolResult, Anthropic),
            (AssistantFinal, Anthropic),
            (User, Responses),
            (AssistantTool, Responses),
            (ToolResult, Responses),
            (AssistantFinal, Responses),
        ];
        let decoded: Vec<(RecordType, BackendFormat)> = chdx::entries(&index, log.len() as u64)
            .map(|e| (e.record_type, e.backend_format))
            .collect();
        assert_eq!(decoded, expected);
        // The iterator yields exactly what the buffer holds.
        let from_iter: Vec<Entry> = all_entries(&log).iter().map(|e| e.entry).collect();
        let from_index: Vec<Entry> = chdx::entries(&index, log.len() as u64).collect();
        assert_eq!(from_iter, from_index);
    }

    // --- the index ----------------------------------------------------------

    #[test]
    fn round_trip_offsets_and_lengths() {
        let bodies = [OPENAI_USER, ANTHROPIC_TOOL, OPENAI_RESULT, ANTHROPIC_FINAL];
        let log = log_of(&bodies);
        let (index, report) = rebuild(&log);
        assert_eq!(index.len(), 8 + 40);
        assert_eq!(&index[..8], &chdx::encode_header());
        assert_eq!(report.index_size_bytes(), index.len());
        let mut offset = 0u32;
        for (entry, body) in chdx::entries(&index, log.len() as u64).zip(bodies) {
            assert_eq!(entry.offset, offset);
            assert_eq!(entry.length as usize, body.len() + 1);
            assert_eq!(log[entry.newline_offset() as usize], b'\n');
            offset += entry.length;
        }
        assert_eq!(offset as usize, log.len());
        assert_eq!(
            repair(&index, &log),
            Verdict::Keep {
                entries: 4,
                tail: None
            }
        );
    }

    #[test]
    fn an_empty_log_gives_a_header_only_index() {
        let mut out = [0u8; 8];
        let report = rebuild_index(b"", &mut out).unwrap();
        assert_eq!(report, RebuildReport::default());
        assert_eq!(out, chdx::encode_header());
        assert_eq!(chdx::validate_index(&out, 0), Ok(0));
        assert_eq!(entries(b"").unwrap().count(), 0);
    }

    #[test]
    fn a_log_without_records_is_an_error_that_says_what_to_do() {
        let mut out = [0u8; 64];
        let err = rebuild_index(b"{\"role\":\"us", &mut out).unwrap_err();
        assert!(matches!(
            err,
            RebuildError::NoRecords {
                log_len_bytes: 11,
                tail: Some(Segment {
                    kind: SegmentKind::Skipped(_),
                    ..
                })
            }
        ));
        assert!(err.to_string().contains("truncate"));
        let err = rebuild_index(b"\n\n", &mut out).unwrap_err();
        assert_eq!(
            err,
            RebuildError::NoRecords {
                log_len_bytes: 2,
                tail: None
            }
        );
        // One whole record that lost its newline: append one.
        let err = rebuild_index(OPENAI_USER.as_bytes(), &mut out).unwrap_err();
        assert!(matches!(
            err,
            RebuildError::NoRecords {
                tail: Some(Segment {
                    offset: 0,
                    kind: SegmentKind::Record,
                    ..
                }),
                ..
            }
        ));
        assert!(err.to_string().contains("append"));
    }

    #[test]
    fn a_small_buffer_states_the_size_needed() {
        let log = log_of(&[OPENAI_USER, OPENAI_TOOL, OPENAI_RESULT]);
        for size in [0, 7, 8, 17, 37] {
            let mut out = vec![0u8; size];
            assert_eq!(
                rebuild_index(&log, &mut out),
                Err(RebuildError::BufferTooSmall { needed_bytes: 38 }),
                "size {size}"
            );
        }
        let mut exact = [0u8; 38];
        let report = rebuild_index(&log, &mut exact).unwrap();
        assert_eq!(report.index_size_bytes(), 38);
        assert_eq!(chdx::validate_index(&exact, log.len() as u64), Ok(3));
        assert!(RebuildError::BufferTooSmall { needed_bytes: 38 }
            .to_string()
            .contains("38 bytes"));
        assert_eq!(index_size_bytes(3), 38);
    }

    #[test]
    fn the_old_index_keeps_exact_formats() {
        // ESP-Claw stamped "unknown" (a custom backend) on an OpenAI-looking
        // turn; then power was lost after a record but before its entry.
        let log = log_of(&[OPENAI_USER, OPENAI_TOOL, OPENAI_RESULT, OPENAI_FINAL]);
        let mut old = Vec::from(chdx::encode_header());
        let mut offset = 0;
        for (body, ty) in [
            (OPENAI_USER, User),
            (OPENAI_TOOL, AssistantTool),
            (OPENAI_RESULT, ToolResult),
        ] {
            let entry = Entry::for_body(offset, body.len(), ty, Unknown).unwrap();
            old.extend_from_slice(&entry.encode());
            offset += entry.length;
        }
        assert_eq!(
            repair(&old, &log),
            Verdict::Rebuild(RebuildReason::UnindexedRecord {
                offset: offset as usize
            })
        );
        let mut out = [0u8; 64];
        let report = rebuild_index_with_old(&log, &old, &mut out).unwrap();
        assert_eq!(report.entries, 4);
        assert_eq!(report.from_old_index, 3);
        let rebuilt: Vec<RebuiltEntry> = entries_with_old_index(&log, &old).unwrap().collect();
        let formats: Vec<(BackendFormat, Basis)> = rebuilt
            .iter()
            .map(|e| (e.entry.backend_format, e.format_basis))
            .collect();
        assert_eq!(
            formats,
            [
                (Unknown, OldIndex),
                (Unknown, OldIndex),
                (Unknown, OldIndex),
                (Unknown, Turn),
            ]
        );
        let index = &out[..report.index_size_bytes()];
        assert_eq!(
            repair(index, &log),
            Verdict::Keep {
                entries: 4,
                tail: None
            }
        );
        // Without the old index, the body's hint wins.
        assert_eq!(all_entries(&log)[1].entry.backend_format, OpenAi);
    }

    #[test]
    fn a_damaged_old_index_is_used_only_where_it_matches() {
        let log = log_of(&[OPENAI_USER, ANTHROPIC_TOOL]);
        let user = Entry::for_body(0, OPENAI_USER.len(), User, OpenAi).unwrap();
        let mut old = Vec::from(chdx::encode_header());
        old.extend_from_slice(&user.encode());
        // A wrong length for the second record, then a partial entry.
        let wrong = Entry::for_body(user.length, 3, AssistantFinal, OpenAi).unwrap();
        old.extend_from_slice(&wrong.encode());
        old.extend_from_slice(&[1, 2, 3]);
        let rebuilt: Vec<RebuiltEntry> = entries_with_old_index(&log, &old).unwrap().collect();
        assert_eq!(rebuilt[0].format_basis, OldIndex);
        assert_eq!(rebuilt[0].entry.backend_format, OpenAi);
        assert_eq!(rebuilt[1].entry.record_type, AssistantTool);
        assert_eq!(rebuilt[1].format_basis, Shape);
        // A bad header: nothing is trusted.
        old[0] = b'X';
        let rebuilt: Vec<RebuiltEntry> = entries_with_old_index(&log, &old).unwrap().collect();
        assert!(rebuilt.iter().all(|e| e.format_basis != OldIndex));
    }

    // --- repair -------------------------------------------------------------

    #[test]
    fn repair_keeps_a_matching_index() {
        let mut log = log_of(&[OPENAI_USER, OPENAI_FINAL]);
        let (index, _) = rebuild(&log);
        assert_eq!(
            repair(&index, &log),
            Verdict::Keep {
                entries: 2,
                tail: None
            }
        );
        // A torn tail does not force a rebuild, but is reported.
        log.extend_from_slice(b"{\"role\":");
        match repair(&index, &log) {
            Verdict::Keep {
                entries: 2,
                tail: Some(tail),
            } => {
                assert_eq!(tail.offset, log.len() - 8);
                assert!(matches!(tail.kind, SegmentKind::Skipped(_)));
            }
            other => panic!("{other:?}"),
        }
        // An empty index for an empty log.
        assert_eq!(
            repair(&chdx::encode_header(), b""),
            Verdict::Keep {
                entries: 0,
                tail: None
            }
        );
    }

    #[test]
    fn repair_says_why_an_index_must_be_rebuilt() {
        let log = log_of(&[OPENAI_USER, OPENAI_FINAL]);
        let (index, _) = rebuild(&log);
        let mut bad = index.clone();
        bad[0] = b'X';
        assert!(matches!(
            repair(&bad, &log),
            Verdict::Rebuild(RebuildReason::Invalid(ChdxError::BadMagic { .. }))
        ));
        assert_eq!(
            repair(&index[..index.len() - 1], &log),
            Verdict::Rebuild(RebuildReason::Invalid(ChdxError::PartialEntry {
                trailing_bytes: 9
            }))
        );
        assert_eq!(
            repair(&chdx::encode_header(), &log),
            Verdict::Rebuild(RebuildReason::Invalid(ChdxError::NoEntriesForData {
                data_size_bytes: log.len() as u64
            }))
        );
        // An entry one byte short: its "newline" is the body's last byte.
        let mut short = index.clone();
        short[8 + 4] -= 1;
        assert_eq!(
            repair(&short, &log),
            Verdict::Rebuild(RebuildReason::MissingNewline { entry: 0 })
        );
        // The record's bytes were damaged in place.
        let mut damaged = log.clone();
        damaged[0] = b'#';
        assert_eq!(
            repair(&index, &damaged),
            Verdict::Rebuild(RebuildReason::MalformedRecord { entry: 0 })
        );
        // Only the second entry survives: the first record is in a gap.
        let second = chdx::raw_entry_at(&index, 1).unwrap();
        let mut only_second = Vec::from(chdx::encode_header());
        only_second.extend_from_slice(&second.encode());
        let verdict = repair(&only_second, &log);
        assert_eq!(
            verdict,
            Verdict::Rebuild(RebuildReason::UnindexedRecord { offset: 0 })
        );
        if let Verdict::Rebuild(reason) = verdict {
            assert!(reason.to_string().contains("offset 0"));
        }
        assert!(RebuildReason::Invalid(ChdxError::ZeroLength { entry: 3 })
            .to_string()
            .contains("entry 3"));
    }

    // --- robustness ---------------------------------------------------------

    fn check_any_log(log: &[u8]) {
        assert_tiles(log);
        let mut out = [0u8; 8 + 10 * 32];
        match rebuild_index(log, &mut out) {
            Ok(report) => {
                let index = &out[..report.index_size_bytes()];
                assert_eq!(
                    chdx::validate_index(index, log.len() as u64),
                    Ok(report.entries)
                );
                for entry in chdx::entries(index, log.len() as u64) {
                    let body = &log[entry.offset as usize..entry.newline_offset() as usize];
                    assert!(infer_record(body).is_some());
                    assert_eq!(log[entry.newline_offset() as usize], b'\n');
                }
                assert!(matches!(repair(index, log), Verdict::Keep { .. }));
            }
            Err(RebuildError::NoRecords { .. }) => assert_eq!(entries(log).unwrap().count(), 0),
            Err(other) => panic!("{other:?}"),
        }
    }

    #[test]
    fn every_prefix_and_corruption_of_a_log_is_handled() {
        let log = log_of(&[OPENAI_USER, ANTHROPIC_TOOL, OPENAI_RESULT, RESPONSES_FINAL]);
        for end in 0..=log.len() {
            check_any_log(&log[..end]);
        }
        let mut copy = log.clone();
        for i in (0..copy.len()).step_by(3) {
            let original = copy[i];
            for b in [b'\n', b'{', b'}', b'"', b'[', 0xff] {
                copy[i] = b;
                check_any_log(&copy);
            }
            copy[i] = original;
        }
    }

    #[test]
    fn random_bytes_never_panic() {
        let alphabet = b"{}[]\":,\n \\ur0ltasenu1";
        let mut state = 0x9e37_79b9_7f4a_7c15u64;
        for _ in 0..3_000 {
            let mut log = Vec::new();
            for _ in 0..(state % 64) {
                state ^= state << 13;
                state ^= state >> 7;
                state ^= state << 17;
                log.push(alphabet[(state % alphabet.len() as u64) as usize]);
            }
            check_any_log(&log);
            let _ = repair(&log, &log);
        }
    }
}
