//! The mixed-backend history filter, and the small JSON scanner it needs.
//!
//! Every session record remembers the [`BackendFormat`] of the LLM backend that
//! wrote it. When history is loaded for a request and both the current backend
//! and a record's backend are known (non-zero) and differ, ESP-Claw
//! (`session_history_backend_mismatch`, `session_history_load_indexed_json` and
//! `session_history_degrade_assistant_final` in
//! `components/claw_modules/claw_memory/src/claw_memory_session.c`):
//!
//! - drops ASSISTANT_TOOL and TOOL_RESULT records (another backend cannot
//!   replay its tool calls);
//! - keeps an ASSISTANT_FINAL's text only:
//!   - if the record's `content` is a string, the record is kept **unchanged**
//!     (whatever other fields it has);
//!   - if `content` is an array, the `text` of every block whose `type` is
//!     exactly `"text"` is concatenated, without separator, and the record is
//!     replaced by `{"role":"assistant","content":"<text>"}` (cJSON
//!     serialization: those two keys in that order, no spaces);
//!   - if `content` is missing or of another kind, or the concatenated text is
//!     empty, the record is dropped;
//! - keeps USER records as they are.
//!
//! [`history_action`] makes that decision from the index entry alone, and
//! [`degrade_assistant_final`] performs the rewrite into a caller buffer
//! without allocation; [`filter_record`] combines them. ESP-Claw looks up
//! object keys with `cJSON_GetObjectItem`, which takes the first member whose
//! name matches ignoring ASCII case; so does this module. String values
//! (`"text"`) are compared exactly.
//!
//! [`extract_final_text`] extracts the plain text of a final answer of any of
//! the three backends (OpenAI `content` string or array, Anthropic text blocks,
//! a raw Responses body's `output` message items with `output_text` and
//! `refusal` blocks, as `collect_output_text` in
//! `components/claw_modules/claw_core/src/llm/backends/claw_llm_backend_openai_responses.c`
//! reads them). ESP-Claw stores Responses answers already in the canonical
//! `{"role":"assistant","content":"..."}` shape, so the filter itself never
//! needs that branch.
//!
//! The JSON scanner these rest on (validation, navigation, escaping) is the
//! child module `json`; its public types are re-exported here.
//!
//! Pure logic: no flash I/O, so nothing here is affected by power loss.

use core::ops::Range;

use crate::chdx::{BackendFormat, RecordType};

mod json;

pub use json::{
    validate_json, JsonElements, JsonErrorKind, JsonKind, JsonValue, ScanError, MAX_JSON_DEPTH,
};
use json::{Json, Out, Scan};

/// What loading does with one record of the history.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum HistoryAction {
    /// Use the record as stored.
    Keep,
    /// Leave the record out.
    Drop,
    /// Use only the text of the ASSISTANT_FINAL: see [`degrade_assistant_final`].
    KeepTextOnly,
}

/// `true` if both formats are known and differ.
pub const fn backends_mismatch(current: BackendFormat, record: BackendFormat) -> bool {
    current.is_known() && record.is_known() && current as u8 != record as u8
}

/// What loading does with a record of `record_type` written by
/// `record_format` when the current backend is `current`.
pub const fn history_action(
    current: BackendFormat,
    record_format: BackendFormat,
    record_type: RecordType,
) -> HistoryAction {
    if !backends_mismatch(current, record_format) {
        return HistoryAction::Keep;
    }
    match record_type {
        RecordType::User => HistoryAction::Keep,
        RecordType::AssistantFinal => HistoryAction::KeepTextOnly,
        RecordType::AssistantTool | RecordType::ToolResult => HistoryAction::Drop,
    }
}

/// The result of [`degrade_assistant_final`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Degraded {
    /// `content` is a string: keep the record as stored.
    Unchanged,
    /// The rewritten record is the first `len_bytes` of the output buffer.
    Rewritten {
        /// Length of the rewritten record.
        len_bytes: usize,
    },
    /// No text: leave the record out.
    Dropped,
}

const TEXT_MESSAGE_PREFIX: &[u8] = br#"{"role":"assistant","content":""#;
const TEXT_MESSAGE_SUFFIX: &[u8] = br#""}"#;

/// Rewrites an ASSISTANT_FINAL record written by another backend so that it
/// keeps only its text, exactly as ESP-Claw does (see the module
/// documentation). A rewritten record is written at the start of `out`.
///
/// The whole body is validated first; a malformed body is an error (ESP-Claw
/// fails the whole load and wipes the session in that case).
pub fn degrade_assistant_final(body: &[u8], out: &mut [u8]) -> Result<Degraded, ScanError> {
    let json = Json::new(body);
    let mut writer = Out::new(out);
    match json.result(degrade(&json, &mut writer))? {
        Degraded::Rewritten { .. } => writer
            .finish()
            .map(|len_bytes| Degraded::Rewritten { len_bytes }),
        kept_or_dropped => Ok(kept_or_dropped),
    }
}

/// What [`degrade_word`] found.
pub(crate) mod degraded {
    /// Keep the record as stored: its `content` is a string, or it is not
    /// JSON.
    pub const KEEP: u32 = 0;
    /// No text: leave the record out.
    pub const DROP: u32 = 1;
    /// The rewritten record is the first `len` bytes of the output buffer.
    pub const REWRITTEN: u32 = 2;
    /// The rewrite needs `len` bytes, more than the output buffer holds.
    pub const NO_ROOM: u32 = 3;
}

/// [`degrade_assistant_final`] for the history read, as a word and a length
/// (see [`degraded`]; a pair comes back in registers, a `Result` through
/// memory). A malformed body is kept as stored.
pub(crate) fn degrade_word(body: &[u8], out: &mut [u8]) -> (u32, usize) {
    let json = Json::new(body);
    let mut writer = Out::new(out);
    match degrade(&json, &mut writer) {
        None | Some(Degraded::Unchanged) => (degraded::KEEP, 0),
        Some(Degraded::Dropped) => (degraded::DROP, 0),
        Some(Degraded::Rewritten { .. }) if writer.overflow => (degraded::NO_ROOM, writer.needed),
        Some(Degraded::Rewritten { .. }) => (degraded::REWRITTEN, writer.needed),
    }
}

/// [`degrade_assistant_final`]'s scan, the rewrite into `writer`
/// ([`Degraded::Rewritten`]'s length is then the writer's).
fn degrade(json: &Json<'_>, writer: &mut Out<'_>) -> Scan<Degraded> {
    let root = json.validate()?;
    let Some(content) = json.member(root, "content")? else {
        return Some(Degraded::Dropped);
    };
    match json.byte(content) {
        Some(b'"') => return Some(Degraded::Unchanged),
        Some(b'[') => {}
        _ => return Some(Degraded::Dropped),
    }
    writer.push_bytes(TEXT_MESSAGE_PREFIX);
    let text_bytes = json.copy_text_blocks(content, &["text"], &["text"], writer, true)?;
    if text_bytes == 0 {
        return Some(Degraded::Dropped);
    }
    writer.push_bytes(TEXT_MESSAGE_SUFFIX);
    Some(Degraded::Rewritten { len_bytes: 0 })
}

/// What loading should emit for one record.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Filtered<'a> {
    /// Emit the stored body.
    Keep(&'a [u8]),
    /// Emit nothing.
    Drop,
    /// Emit this rewritten body (a slice of the scratch buffer).
    Replace(&'a [u8]),
}

/// Applies the mixed-backend filter to one record: [`history_action`], then
/// [`degrade_assistant_final`] into `scratch` when needed.
///
/// Bodies that are kept are not parsed (ESP-Claw parses every record; the
/// caller may run [`validate_json`] if it wants the same strictness).
pub fn filter_record<'a>(
    current: BackendFormat,
    record_format: BackendFormat,
    record_type: RecordType,
    body: &'a [u8],
    scratch: &'a mut [u8],
) -> Result<Filtered<'a>, ScanError> {
    match history_action(current, record_format, record_type) {
        HistoryAction::Keep => Ok(Filtered::Keep(body)),
        HistoryAction::Drop => Ok(Filtered::Drop),
        HistoryAction::KeepTextOnly => match degrade_assistant_final(body, scratch)? {
            Degraded::Unchanged => Ok(Filtered::Keep(body)),
            Degraded::Dropped => Ok(Filtered::Drop),
            Degraded::Rewritten { len_bytes } => {
                let scratch: &'a [u8] = scratch;
                Ok(Filtered::Replace(scratch.get(..len_bytes).unwrap_or(&[])))
            }
        },
    }
}

/// Writes the plain text (unescaped UTF-8) of a final answer of any backend
/// into `out` and returns its length; 0 if the body has no text.
///
/// Reads, in this order: a `content` string; a `content` array's blocks of
/// type `text` or `output_text`; a Responses body's `output` items of type
/// `message`, their `content` blocks of type `output_text` (`text`) and
/// `refusal` (`refusal`). Text pieces are concatenated without separator.
pub fn extract_final_text(body: &[u8], out: &mut [u8]) -> Result<usize, ScanError> {
    let json = Json::new(body);
    let mut writer = Out::new(out);
    json.result(final_text(&json, &mut writer))?;
    writer.finish()
}

/// [`extract_final_text`]'s scan, the text into `writer`.
fn final_text(json: &Json<'_>, writer: &mut Out<'_>) -> Scan<()> {
    let root = json.validate()?;
    if let Some(content) = json.member(root, "content")? {
        // A string, or an array of blocks (anything else has no text).
        if json.byte(content) == Some(b'"') {
            json.copy_string(content, writer, false)?;
        } else {
            json.copy_text_blocks(
                content,
                &["text", "output_text"],
                &["text", "text"],
                writer,
                false,
            )?;
        }
        return Some(());
    }
    if let Some(output) = json.member(root, "output")? {
        if json.byte(output) == Some(b'[') {
            let mut items = json.list(output);
            while let Some((_, item)) = json.next_item(&mut items)? {
                if json.member_in(item, "type", &["message"])?.is_none() {
                    continue;
                }
                if let Some(content) = json.member(item, "content")? {
                    json.copy_text_blocks(
                        content,
                        &["output_text", "refusal"],
                        &["text", "refusal"],
                        writer,
                        false,
                    )?;
                }
            }
        }
    }
    Some(())
}

/// Length of `text` once escaped as a JSON string body (without quotes).
pub fn json_escaped_len(text: &str) -> usize {
    let mut writer = Out::new(&mut []);
    for c in text.chars() {
        writer.push_escaped(c);
    }
    writer.needed
}

/// Writes `{"role":"assistant","content":"<text>"}` into `out` and returns
/// its length: the shape ESP-Claw gives a degraded ASSISTANT_FINAL.
pub fn write_text_message(text: &str, out: &mut [u8]) -> Result<usize, ScanError> {
    let mut writer = Out::new(out);
    writer.push_bytes(TEXT_MESSAGE_PREFIX);
    for c in text.chars() {
        writer.push_escaped(c);
    }
    writer.push_bytes(TEXT_MESSAGE_SUFFIX);
    writer.finish()
}

/// For a TOOL_RESULT body that is a JSON array, the byte range of its
/// elements (between the brackets, without surrounding whitespace), which
/// loading splices into the message list one by one as ESP-Claw does; `None`
/// if the body is valid JSON but not an array (it is then emitted whole).
pub fn array_inner_span(body: &[u8]) -> Result<Option<Range<usize>>, ScanError> {
    let json = Json::new(body);
    json.result(inner_span(&json))
}

/// [`array_inner_span`]'s scan.
fn inner_span(json: &Json<'_>) -> Scan<Option<Range<usize>>> {
    let root = json.validate()?;
    if json.byte(root) != Some(b'[') {
        return Some(None);
    }
    let end = json.value_end(root)?;
    let start = json.skip_ws(root.saturating_add(1));
    let mut inner_end = end.saturating_sub(1);
    while inner_end > start
        && matches!(json.byte(inner_end - 1), Some(b' ' | b'\t' | b'\n' | b'\r'))
    {
        inner_end -= 1;
    }
    Some(Some(start..inner_end.max(start)))
}

#[cfg(test)]
mod tests;
