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
//! The scanner validates a whole document before reading it (RFC 8259 grammar,
//! nesting at most [`MAX_JSON_DEPTH`] as cJSON's `CJSON_NESTING_LIMIT`, escapes
//! including surrogate pairs, strictly valid UTF-8), is not recursive, and
//! never panics: malformed input is a [`ScanError::Malformed`] with the byte
//! offset and the reason, a short output buffer is
//! [`ScanError::BufferTooSmall`] with the size needed. Like cJSON it accepts raw
//! control characters inside strings; unlike cJSON it rejects invalid UTF-8,
//! leading zeros (`01`) and a bare trailing dot (`1.`). [`JsonValue`] gives
//! other modules read-only navigation over a validated document (members,
//! array elements, string comparison).
//!
//! Written strings are escaped as cJSON prints them: `\"`, `\\`, `\b`, `\f`,
//! `\n`, `\r`, `\t`, other characters below U+0020 as `\u00xx`, everything else
//! (including `/` and non-ASCII) as is.
//!
//! Pure logic: no flash I/O, so nothing here is affected by power loss.

use core::fmt;
use core::ops::Range;

use crate::chdx::{BackendFormat, RecordType};
use crate::text::json_escape;

/// Deepest nesting of arrays and objects the scanner accepts (cJSON's limit).
pub const MAX_JSON_DEPTH: usize = 1000;

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

/// Why a document could not be read.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum JsonErrorKind {
    /// The document ends in the middle of a value.
    UnexpectedEnd,
    /// A byte that cannot appear here.
    UnexpectedByte(u8),
    /// A backslash followed by something other than `" \ / b f n r t u`.
    InvalidEscape,
    /// `\u` not followed by four hex digits.
    InvalidUnicodeEscape,
    /// A UTF-16 surrogate escape without its pair.
    LoneSurrogate,
    /// Bytes inside a string that are not valid UTF-8.
    InvalidUtf8,
    /// A number that does not follow the JSON grammar.
    InvalidNumber,
    /// Arrays and objects nested deeper than [`MAX_JSON_DEPTH`].
    TooDeep,
    /// Something other than whitespace after the document.
    TrailingData,
}

impl fmt::Display for JsonErrorKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match *self {
            JsonErrorKind::UnexpectedEnd => f.write_str("unexpected end of document"),
            JsonErrorKind::UnexpectedByte(byte) => write!(f, "unexpected byte {byte:#04x}"),
            JsonErrorKind::InvalidEscape => f.write_str("invalid escape sequence"),
            JsonErrorKind::InvalidUnicodeEscape => f.write_str("invalid \\u escape"),
            JsonErrorKind::LoneSurrogate => f.write_str("unpaired UTF-16 surrogate escape"),
            JsonErrorKind::InvalidUtf8 => f.write_str("invalid UTF-8 in a string"),
            JsonErrorKind::InvalidNumber => f.write_str("invalid number"),
            JsonErrorKind::TooDeep => write!(f, "nested deeper than {MAX_JSON_DEPTH} levels"),
            JsonErrorKind::TrailingData => f.write_str("data after the end of the document"),
        }
    }
}

/// Why a scan failed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum ScanError {
    /// The input is not a valid JSON document.
    Malformed {
        /// Byte offset of the problem in the input.
        offset: usize,
        /// What is wrong there.
        kind: JsonErrorKind,
    },
    /// The output buffer is too small; nothing usable was written.
    BufferTooSmall {
        /// Output size that would have been enough, in bytes.
        needed_bytes: usize,
    },
}

impl fmt::Display for ScanError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match *self {
            ScanError::Malformed { offset, kind } => {
                write!(f, "malformed JSON at byte {offset}: {kind}")
            }
            ScanError::BufferTooSmall { needed_bytes } => {
                write!(f, "output buffer too small: {needed_bytes} bytes needed")
            }
        }
    }
}

type ScanResult<T> = Result<T, ScanError>;

const fn malformed(offset: usize, kind: JsonErrorKind) -> ScanError {
    ScanError::Malformed { offset, kind }
}

/// Output buffer that keeps counting after it is full, to report the size
/// needed.
struct Out<'a> {
    buf: &'a mut [u8],
    needed: usize,
    overflow: bool,
}

impl<'a> Out<'a> {
    fn new(buf: &'a mut [u8]) -> Self {
        Out {
            buf,
            needed: 0,
            overflow: false,
        }
    }

    fn push_bytes(&mut self, bytes: &[u8]) {
        let end = self.needed.checked_add(bytes.len());
        if !self.overflow {
            match end.and_then(|end| self.buf.get_mut(self.needed..end)) {
                Some(target) => target.copy_from_slice(bytes),
                None => self.overflow = true,
            }
        }
        self.needed = end.unwrap_or(usize::MAX);
    }

    fn push_char(&mut self, c: char) {
        let mut tmp = [0u8; 4];
        self.push_bytes(c.encode_utf8(&mut tmp).as_bytes());
    }

    fn push_escaped(&mut self, c: char) {
        let mut buf = [0u8; 6];
        match json_escape(c, &mut buf) {
            Some(escaped) => self.push_bytes(escaped.as_bytes()),
            None => self.push_char(c),
        }
    }

    fn finish(self) -> ScanResult<usize> {
        if self.overflow {
            Err(ScanError::BufferTooSmall {
                needed_bytes: self.needed,
            })
        } else {
            Ok(self.needed)
        }
    }
}

/// Stack of open containers (`true` for an object), as bits.
struct Nesting {
    bits: [u64; MAX_JSON_DEPTH.div_ceil(64)],
    depth: usize,
}

impl Nesting {
    const fn new() -> Self {
        Nesting {
            bits: [0; MAX_JSON_DEPTH.div_ceil(64)],
            depth: 0,
        }
    }

    fn push(&mut self, is_object: bool) -> bool {
        if self.depth >= MAX_JSON_DEPTH {
            return false;
        }
        let Some(word) = self.bits.get_mut(self.depth / 64) else {
            return false;
        };
        let mask = 1u64 << (self.depth % 64);
        if is_object {
            *word |= mask;
        } else {
            *word &= !mask;
        }
        self.depth += 1;
        true
    }

    fn top(&self) -> Option<bool> {
        let index = self.depth.checked_sub(1)?;
        let word = self.bits.get(index / 64)?;
        Some(word & (1u64 << (index % 64)) != 0)
    }

    fn pop(&mut self) {
        self.depth = self.depth.saturating_sub(1);
    }
}

/// Decodes the characters of the JSON string whose opening quote is at a
/// given offset.
struct StrChars<'a> {
    bytes: &'a [u8],
    pos: usize,
    done: bool,
}

impl<'a> StrChars<'a> {
    fn new(bytes: &'a [u8], quote_at: usize) -> ScanResult<Self> {
        match bytes.get(quote_at) {
            Some(b'"') => Ok(StrChars {
                bytes,
                pos: quote_at.saturating_add(1),
                done: false,
            }),
            Some(&other) => Err(malformed(quote_at, JsonErrorKind::UnexpectedByte(other))),
            None => Err(malformed(quote_at, JsonErrorKind::UnexpectedEnd)),
        }
    }

    fn byte(&self, at: usize) -> ScanResult<u8> {
        self.bytes
            .get(at)
            .copied()
            .ok_or(malformed(at, JsonErrorKind::UnexpectedEnd))
    }

    fn hex4(&self, at: usize) -> ScanResult<u32> {
        let mut value = 0u32;
        for i in 0..4 {
            let offset = at.saturating_add(i);
            let digit = match self.byte(offset)? {
                b @ b'0'..=b'9' => b - b'0',
                b @ b'a'..=b'f' => b - b'a' + 10,
                b @ b'A'..=b'F' => b - b'A' + 10,
                _ => return Err(malformed(offset, JsonErrorKind::InvalidUnicodeEscape)),
            };
            value = (value << 4) | u32::from(digit);
        }
        Ok(value)
    }

    /// The next character, or `None` after the closing quote.
    fn next_char(&mut self) -> ScanResult<Option<char>> {
        if self.done {
            return Ok(None);
        }
        let at = self.pos;
        let (c, width) = match self.byte(at)? {
            b'"' => {
                self.done = true;
                self.pos = at.saturating_add(1);
                return Ok(None);
            }
            b'\\' => self.escape(at)?,
            b @ 0x00..=0x7F => (char::from(b), 1),
            lead => {
                let width = match lead {
                    0xC2..=0xDF => 2,
                    0xE0..=0xEF => 3,
                    0xF0..=0xF4 => 4,
                    _ => return Err(malformed(at, JsonErrorKind::InvalidUtf8)),
                };
                let end = at.saturating_add(width);
                let c = self
                    .bytes
                    .get(at..end)
                    .and_then(|seq| core::str::from_utf8(seq).ok())
                    .and_then(|s| s.chars().next())
                    .ok_or(malformed(at, JsonErrorKind::InvalidUtf8))?;
                (c, width)
            }
        };
        self.pos = at.saturating_add(width);
        Ok(Some(c))
    }

    /// Decodes the escape at `at` (a backslash): the character and the
    /// escape's length in bytes.
    fn escape(&self, at: usize) -> ScanResult<(char, usize)> {
        let simple = match self.byte(at.saturating_add(1))? {
            b'"' => '"',
            b'\\' => '\\',
            b'/' => '/',
            b'b' => '\u{8}',
            b'f' => '\u{c}',
            b'n' => '\n',
            b'r' => '\r',
            b't' => '\t',
            b'u' => return self.unicode_escape(at),
            _ => return Err(malformed(at, JsonErrorKind::InvalidEscape)),
        };
        Ok((simple, 2))
    }

    fn unicode_escape(&self, at: usize) -> ScanResult<(char, usize)> {
        let first = self.hex4(at.saturating_add(2))?;
        let (code, width) = match first {
            0xD800..=0xDBFF => {
                let next = at.saturating_add(6);
                if self.bytes.get(next) != Some(&b'\\')
                    || self.bytes.get(next.saturating_add(1)) != Some(&b'u')
                {
                    return Err(malformed(at, JsonErrorKind::LoneSurrogate));
                }
                let second = self.hex4(next.saturating_add(2))?;
                if !(0xDC00..=0xDFFF).contains(&second) {
                    return Err(malformed(at, JsonErrorKind::LoneSurrogate));
                }
                (0x10000 + ((first - 0xD800) << 10) + (second - 0xDC00), 12)
            }
            0xDC00..=0xDFFF => return Err(malformed(at, JsonErrorKind::LoneSurrogate)),
            other => (other, 6),
        };
        let c = char::from_u32(code).ok_or(malformed(at, JsonErrorKind::InvalidUnicodeEscape))?;
        Ok((c, width))
    }
}

/// A validating, non-recursive reader over one JSON document.
struct Json<'a> {
    bytes: &'a [u8],
}

#[derive(Clone, Copy, PartialEq, Eq)]
enum ListState {
    Start,
    AfterValue,
    Done,
}

/// Walks the members of an object or the elements of an array.
struct List {
    pos: usize,
    state: ListState,
    object: bool,
}

impl<'a> Json<'a> {
    const fn new(bytes: &'a [u8]) -> Self {
        Json { bytes }
    }

    fn byte(&self, at: usize) -> Option<u8> {
        self.bytes.get(at).copied()
    }

    fn skip_ws(&self, mut at: usize) -> usize {
        while let Some(b' ' | b'\t' | b'\n' | b'\r') = self.byte(at) {
            at += 1;
        }
        at
    }

    fn unexpected(&self, at: usize) -> ScanError {
        match self.byte(at) {
            Some(byte) => malformed(at, JsonErrorKind::UnexpectedByte(byte)),
            None => malformed(at, JsonErrorKind::UnexpectedEnd),
        }
    }

    /// Validates the whole input and returns the offset of the root value.
    fn validate(&self) -> ScanResult<usize> {
        let root = self.skip_ws(0);
        let end = self.value_end(root)?;
        let rest = self.skip_ws(end);
        if rest != self.bytes.len() {
            return Err(malformed(rest, JsonErrorKind::TrailingData));
        }
        Ok(root)
    }

    fn string_end(&self, quote_at: usize) -> ScanResult<usize> {
        let mut chars = StrChars::new(self.bytes, quote_at)?;
        while chars.next_char()?.is_some() {}
        Ok(chars.pos)
    }

    fn digits_end(&self, mut at: usize) -> usize {
        while let Some(b'0'..=b'9') = self.byte(at) {
            at += 1;
        }
        at
    }

    fn number_end(&self, start: usize) -> ScanResult<usize> {
        let mut at = start;
        if self.byte(at) == Some(b'-') {
            at += 1;
        }
        match self.byte(at) {
            Some(b'0') => at += 1,
            Some(b'1'..=b'9') => at = self.digits_end(at),
            _ => return Err(malformed(at, JsonErrorKind::InvalidNumber)),
        }
        if self.byte(at) == Some(b'.') {
            let digits = self.digits_end(at + 1);
            if digits == at + 1 {
                return Err(malformed(digits, JsonErrorKind::InvalidNumber));
            }
            at = digits;
        }
        if let Some(b'e' | b'E') = self.byte(at) {
            at += 1;
            if let Some(b'+' | b'-') = self.byte(at) {
                at += 1;
            }
            let digits = self.digits_end(at);
            if digits == at {
                return Err(malformed(digits, JsonErrorKind::InvalidNumber));
            }
            at = digits;
        }
        Ok(at)
    }

    fn literal_end(&self, at: usize, literal: &[u8]) -> ScanResult<usize> {
        for (i, &expected) in literal.iter().enumerate() {
            let offset = at.saturating_add(i);
            if self.byte(offset) != Some(expected) {
                return Err(self.unexpected(offset));
            }
        }
        Ok(at.saturating_add(literal.len()))
    }

    /// Parses `"key" :` at `key_at` and returns the offset of the value.
    fn member_value_start(&self, key_at: usize) -> ScanResult<usize> {
        if self.byte(key_at) != Some(b'"') {
            return Err(self.unexpected(key_at));
        }
        let colon = self.skip_ws(self.string_end(key_at)?);
        if self.byte(colon) != Some(b':') {
            return Err(self.unexpected(colon));
        }
        Ok(self.skip_ws(colon + 1))
    }

    /// Validates the value at `start` and returns the offset just past it.
    fn value_end(&self, start: usize) -> ScanResult<usize> {
        let mut nesting = Nesting::new();
        let mut at = self.skip_ws(start);
        loop {
            let after_value = match self.byte(at) {
                Some(open @ (b'{' | b'[')) => {
                    // Empty containers count as a level too, as in cJSON.
                    if nesting.depth >= MAX_JSON_DEPTH {
                        return Err(malformed(at, JsonErrorKind::TooDeep));
                    }
                    let is_object = open == b'{';
                    let inner = self.skip_ws(at + 1);
                    let close = if is_object { b'}' } else { b']' };
                    if self.byte(inner) == Some(close) {
                        inner + 1
                    } else {
                        if !nesting.push(is_object) {
                            return Err(malformed(at, JsonErrorKind::TooDeep));
                        }
                        at = if is_object {
                            self.member_value_start(inner)?
                        } else {
                            inner
                        };
                        continue;
                    }
                }
                Some(b'"') => self.string_end(at)?,
                Some(b'-' | b'0'..=b'9') => self.number_end(at)?,
                Some(b't') => self.literal_end(at, b"true")?,
                Some(b'f') => self.literal_end(at, b"false")?,
                Some(b'n') => self.literal_end(at, b"null")?,
                _ => return Err(self.unexpected(at)),
            };
            at = after_value;
            // Close every container that ends here, or move to the next item.
            loop {
                let Some(is_object) = nesting.top() else {
                    return Ok(at);
                };
                let next = self.skip_ws(at);
                match self.byte(next) {
                    Some(b',') => {
                        let item = self.skip_ws(next + 1);
                        at = if is_object {
                            self.member_value_start(item)?
                        } else {
                            item
                        };
                        break;
                    }
                    Some(b'}') if is_object => {
                        nesting.pop();
                        at = next + 1;
                    }
                    Some(b']') if !is_object => {
                        nesting.pop();
                        at = next + 1;
                    }
                    _ => return Err(self.unexpected(next)),
                }
            }
        }
    }

    /// A walk over the container at `open`, which must be `{` or `[`.
    fn list(&self, open: usize) -> List {
        List {
            pos: open.saturating_add(1),
            state: ListState::Start,
            object: self.byte(open) == Some(b'{'),
        }
    }

    /// The next item of a walk: `(key offset, value offset)` for an object
    /// (the key offset is that of its quote), `(value, value)` for an array.
    fn next_item(&self, list: &mut List) -> ScanResult<Option<(usize, usize)>> {
        let close = if list.object { b'}' } else { b']' };
        let item = match list.state {
            ListState::Done => return Ok(None),
            ListState::Start => {
                let at = self.skip_ws(list.pos);
                if self.byte(at) == Some(close) {
                    list.state = ListState::Done;
                    return Ok(None);
                }
                at
            }
            ListState::AfterValue => {
                let at = self.skip_ws(list.pos);
                match self.byte(at) {
                    Some(b',') => self.skip_ws(at + 1),
                    Some(byte) if byte == close => {
                        list.state = ListState::Done;
                        return Ok(None);
                    }
                    _ => return Err(self.unexpected(at)),
                }
            }
        };
        let value = if list.object {
            self.member_value_start(item)?
        } else {
            item
        };
        list.pos = self.value_end(value)?;
        list.state = ListState::AfterValue;
        Ok(Some((item, value)))
    }

    /// `true` if the string at `quote_at` equals `expected` (ignoring ASCII
    /// case if asked).
    fn string_eq(&self, quote_at: usize, expected: &str, ignore_case: bool) -> ScanResult<bool> {
        if self.byte(quote_at) != Some(b'"') {
            return Ok(false);
        }
        let mut chars = StrChars::new(self.bytes, quote_at)?;
        for want in expected.chars() {
            match chars.next_char()? {
                Some(got) if got == want => {}
                Some(got) if ignore_case && got.eq_ignore_ascii_case(&want) => {}
                _ => return Ok(false),
            }
        }
        Ok(chars.next_char()?.is_none())
    }

    /// The value of the first member of the object at `object_at` named
    /// `name` (ASCII case ignored, as `cJSON_GetObjectItem`).
    fn member(&self, object_at: usize, name: &str) -> ScanResult<Option<usize>> {
        if self.byte(object_at) != Some(b'{') {
            return Ok(None);
        }
        let mut list = self.list(object_at);
        while let Some((key, value)) = self.next_item(&mut list)? {
            if self.string_eq(key, name, true)? {
                return Ok(Some(value));
            }
        }
        Ok(None)
    }

    /// `true` if the object at `object_at` has a member `name` whose value is
    /// the string `expected` (compared exactly, as `strcmp`).
    fn member_is(&self, object_at: usize, name: &str, expected: &str) -> ScanResult<bool> {
        match self.member(object_at, name)? {
            Some(value) => self.string_eq(value, expected, false),
            None => Ok(false),
        }
    }

    /// The string value of member `name`, if it is a string.
    fn string_member(&self, object_at: usize, name: &str) -> ScanResult<Option<usize>> {
        Ok(self
            .member(object_at, name)?
            .filter(|&value| self.byte(value) == Some(b'"')))
    }

    /// Copies the decoded string at `quote_at` to `out`, escaped or not;
    /// returns the number of UTF-8 bytes of decoded text.
    fn copy_string(&self, quote_at: usize, out: &mut Out<'_>, escape: bool) -> ScanResult<usize> {
        let mut chars = StrChars::new(self.bytes, quote_at)?;
        let mut text_bytes = 0usize;
        while let Some(c) = chars.next_char()? {
            text_bytes = text_bytes.saturating_add(c.len_utf8());
            if escape {
                out.push_escaped(c);
            } else {
                out.push_char(c);
            }
        }
        Ok(text_bytes)
    }

    /// Copies the `text` of every block of the array at `array_at` whose
    /// `type` is one of `types`; returns the text bytes copied.
    fn copy_text_blocks(
        &self,
        array_at: usize,
        types: &[&str],
        out: &mut Out<'_>,
        escape: bool,
    ) -> ScanResult<usize> {
        let mut total = 0usize;
        let mut blocks = self.list(array_at);
        while let Some((_, block)) = self.next_item(&mut blocks)? {
            if self.byte(block) != Some(b'{') {
                continue;
            }
            let mut matched = false;
            for ty in types {
                if self.member_is(block, "type", ty)? {
                    matched = true;
                    break;
                }
            }
            if !matched {
                continue;
            }
            if let Some(text) = self.string_member(block, "text")? {
                total = total.saturating_add(self.copy_string(text, out, escape)?);
            }
        }
        Ok(total)
    }
}

/// Checks that `body` is one complete JSON document.
pub fn validate_json(body: &[u8]) -> Result<(), ScanError> {
    Json::new(body).validate().map(|_| ())
}

/// The kind of a [`JsonValue`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum JsonKind {
    /// `{...}`
    Object,
    /// `[...]`
    Array,
    /// `"..."`
    String,
    /// A number.
    Number,
    /// `true` or `false`.
    Bool,
    /// `null`.
    Null,
}

/// One value of a validated JSON document, for read-only navigation without
/// allocation (used by `rebuild` to recognise record shapes).
///
/// Only [`JsonValue::parse`] makes one, after validating the whole document,
/// so every method is total: a lookup that cannot succeed gives `None`,
/// `false` or no elements.
#[derive(Debug, Clone, Copy)]
pub struct JsonValue<'a> {
    bytes: &'a [u8],
    at: usize,
}

impl<'a> JsonValue<'a> {
    /// Validates `body` as one JSON document (see [`validate_json`]) and
    /// returns its root value.
    pub fn parse(body: &'a [u8]) -> Result<JsonValue<'a>, ScanError> {
        let at = Json::new(body).validate()?;
        Ok(JsonValue { bytes: body, at })
    }

    /// What kind of value this is.
    pub fn kind(self) -> JsonKind {
        match self.bytes.get(self.at) {
            Some(b'{') => JsonKind::Object,
            Some(b'[') => JsonKind::Array,
            Some(b'"') => JsonKind::String,
            Some(b't' | b'f') => JsonKind::Bool,
            Some(b'n') => JsonKind::Null,
            _ => JsonKind::Number,
        }
    }

    /// The first member named `name`, ignoring ASCII case as
    /// `cJSON_GetObjectItem` does; `None` if this is not an object or has no
    /// such member.
    pub fn member(self, name: &str) -> Option<JsonValue<'a>> {
        let at = Json::new(self.bytes).member(self.at, name).ok()??;
        Some(JsonValue {
            bytes: self.bytes,
            at,
        })
    }

    /// `true` if this is a string equal to `expected` (compared exactly, as
    /// `strcmp`).
    pub fn is_string(self, expected: &str) -> bool {
        Json::new(self.bytes)
            .string_eq(self.at, expected, false)
            .unwrap_or(false)
    }

    /// The elements of this array, in order; none if this is not an array.
    pub fn elements(self) -> JsonElements<'a> {
        let json = Json::new(self.bytes);
        JsonElements {
            bytes: self.bytes,
            list: json.list(self.at),
            done: self.kind() != JsonKind::Array,
        }
    }
}

/// Iterator over the elements of a [`JsonValue`] array.
pub struct JsonElements<'a> {
    bytes: &'a [u8],
    list: List,
    done: bool,
}

impl<'a> Iterator for JsonElements<'a> {
    type Item = JsonValue<'a>;

    fn next(&mut self) -> Option<JsonValue<'a>> {
        if self.done {
            return None;
        }
        match Json::new(self.bytes).next_item(&mut self.list) {
            Ok(Some((_, at))) => Some(JsonValue {
                bytes: self.bytes,
                at,
            }),
            _ => {
                self.done = true;
                None
            }
        }
    }
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
    let root = json.validate()?;
    let Some(content) = json.member(root, "content")? else {
        return Ok(Degraded::Dropped);
    };
    match json.byte(content) {
        Some(b'"') => return Ok(Degraded::Unchanged),
        Some(b'[') => {}
        _ => return Ok(Degraded::Dropped),
    }
    let mut writer = Out::new(out);
    writer.push_bytes(TEXT_MESSAGE_PREFIX);
    let text_bytes = json.copy_text_blocks(content, &["text"], &mut writer, true)?;
    if text_bytes == 0 {
        return Ok(Degraded::Dropped);
    }
    writer.push_bytes(TEXT_MESSAGE_SUFFIX);
    writer
        .finish()
        .map(|len_bytes| Degraded::Rewritten { len_bytes })
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
    let root = json.validate()?;
    let mut writer = Out::new(out);
    if let Some(content) = json.member(root, "content")? {
        match json.byte(content) {
            Some(b'"') => {
                json.copy_string(content, &mut writer, false)?;
            }
            Some(b'[') => {
                json.copy_text_blocks(content, &["text", "output_text"], &mut writer, false)?;
            }
            _ => {}
        }
        return writer.finish();
    }
    if let Some(output) = json.member(root, "output")? {
        if json.byte(output) == Some(b'[') {
            let mut items = json.list(output);
            while let Some((_, item)) = json.next_item(&mut items)? {
                if !json.member_is(item, "type", "message")? {
                    continue;
                }
                let Some(content) = json.member(item, "content")? else {
                    continue;
                };
                if json.byte(content) != Some(b'[') {
                    continue;
                }
                let mut blocks = json.list(content);
                while let Some((_, block)) = json.next_item(&mut blocks)? {
                    let field = if json.member_is(block, "type", "output_text")? {
                        "text"
                    } else if json.member_is(block, "type", "refusal")? {
                        "refusal"
                    } else {
                        continue;
                    };
                    if let Some(text) = json.string_member(block, field)? {
                        json.copy_string(text, &mut writer, false)?;
                    }
                }
            }
        }
    }
    writer.finish()
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
    let root = json.validate()?;
    if json.byte(root) != Some(b'[') {
        return Ok(None);
    }
    let end = json.value_end(root)?;
    let start = json.skip_ws(root.saturating_add(1));
    let mut inner_end = end.saturating_sub(1);
    while inner_end > start
        && matches!(json.byte(inner_end - 1), Some(b' ' | b'\t' | b'\n' | b'\r'))
    {
        inner_end -= 1;
    }
    Ok(Some(start..inner_end.max(start)))
}

#[cfg(test)]
mod tests {
    extern crate std;

    use super::*;
    use std::string::{String, ToString};
    use std::vec;
    use std::vec::Vec;
    use BackendFormat::{AnthropicCompatible as Anthropic, OpenAiCompatible as OpenAi, Unknown};

    fn degrade(body: &str) -> Result<(Degraded, String), ScanError> {
        let mut out = vec![0u8; 4096];
        let result = degrade_assistant_final(body.as_bytes(), &mut out)?;
        let text = match result {
            Degraded::Rewritten { len_bytes } => {
                String::from_utf8(out[..len_bytes].to_vec()).unwrap()
            }
            _ => String::new(),
        };
        Ok((result, text))
    }

    fn extract(body: &str) -> Result<String, ScanError> {
        let mut out = vec![0u8; 4096];
        let len = extract_final_text(body.as_bytes(), &mut out)?;
        Ok(String::from_utf8(out[..len].to_vec()).unwrap())
    }

    fn kind_of(body: &[u8]) -> JsonErrorKind {
        match validate_json(body) {
            Err(ScanError::Malformed { kind, .. }) => kind,
            other => panic!(
                "expected malformed, got {other:?} for {:?}",
                String::from_utf8_lossy(body)
            ),
        }
    }

    #[test]
    fn mismatch_needs_two_known_different_backends() {
        assert!(!backends_mismatch(Unknown, OpenAi));
        assert!(!backends_mismatch(OpenAi, Unknown));
        assert!(!backends_mismatch(OpenAi, OpenAi));
        assert!(backends_mismatch(OpenAi, Anthropic));
        assert!(backends_mismatch(BackendFormat::OpenAiResponses, OpenAi));
    }

    #[test]
    fn actions_per_record_type() {
        use RecordType::*;
        assert_eq!(history_action(OpenAi, Anthropic, User), HistoryAction::Keep);
        assert_eq!(
            history_action(OpenAi, Anthropic, AssistantFinal),
            HistoryAction::KeepTextOnly
        );
        assert_eq!(
            history_action(OpenAi, Anthropic, AssistantTool),
            HistoryAction::Drop
        );
        assert_eq!(
            history_action(OpenAi, Anthropic, ToolResult),
            HistoryAction::Drop
        );
        for ty in [User, AssistantFinal, AssistantTool, ToolResult] {
            assert_eq!(history_action(OpenAi, OpenAi, ty), HistoryAction::Keep);
            assert_eq!(history_action(Unknown, Anthropic, ty), HistoryAction::Keep);
        }
    }

    #[test]
    fn string_content_is_kept_unchanged() {
        let (d, _) =
            degrade(r#"{"role":"assistant","content":"hi","reasoning_content":"x"}"#).unwrap();
        assert_eq!(d, Degraded::Unchanged);
        let (d, _) = degrade(r#"{"role":"assistant","content":""}"#).unwrap();
        assert_eq!(d, Degraded::Unchanged);
    }

    #[test]
    fn anthropic_blocks_become_one_openai_style_message() {
        let body = r#"{"role":"assistant","content":[
            {"type":"thinking","thinking":"hmm","signature":"s"},
            {"type":"text","text":"Hello, "},
            {"type":"tool_use","id":"t","name":"n","input":{"text":"no"}},
            {"text":"world\n","type":"text"}
        ]}"#;
        let (d, text) = degrade(body).unwrap();
        assert_eq!(text, r#"{"role":"assistant","content":"Hello, world\n"}"#);
        assert_eq!(
            d,
            Degraded::Rewritten {
                len_bytes: text.len()
            }
        );
    }

    #[test]
    fn no_text_means_dropped() {
        for body in [
            r#"{"role":"assistant"}"#,
            r#"{"role":"assistant","content":null}"#,
            r#"{"role":"assistant","content":42}"#,
            r#"{"role":"assistant","content":[]}"#,
            r#"{"role":"assistant","content":[{"type":"text","text":""}]}"#,
            r#"{"role":"assistant","content":[{"type":"Text","text":"case matters"}]}"#,
            r#"{"role":"assistant","content":[{"type":"text","text":7}, "x", [1]]}"#,
            r#"["not","an","object"]"#,
            r#""just a string""#,
        ] {
            assert_eq!(degrade(body).unwrap().0, Degraded::Dropped, "{body}");
        }
    }

    #[test]
    fn keys_match_ignoring_ascii_case_first_one_wins() {
        let (d, text) =
            degrade(r#"{"Content":[{"TYPE":"text","Text":"a"}],"content":"later"}"#).unwrap();
        assert!(matches!(d, Degraded::Rewritten { .. }));
        assert_eq!(text, r#"{"role":"assistant","content":"a"}"#);
        // An escaped key name is decoded before comparison.
        let (d, _) = degrade(r#"{"con\u0074ent":"x"}"#).unwrap();
        assert_eq!(d, Degraded::Unchanged);
    }

    #[test]
    fn escapes_are_decoded_and_re_escaped_like_cjson() {
        let body = r#"{"content":[{"type":"text","text":"q\" b\\ s\/ \b\f\n\r\t \u0001 \u00e9 \ud83d\ude00 €"}]}"#;
        let (_, text) = degrade(body).unwrap();
        assert_eq!(
            text,
            "{\"role\":\"assistant\",\"content\":\"q\\\" b\\\\ s/ \\b\\f\\n\\r\\t \\u0001 é 😀 €\"}"
        );
        assert_eq!(
            extract(body).unwrap(),
            "q\" b\\ s/ \u{8}\u{c}\n\r\t \u{1} é 😀 €"
        );
    }

    #[test]
    fn a_short_buffer_reports_the_size_needed() {
        let body = br#"{"content":[{"type":"text","text":"hello"}]}"#;
        let expected = br#"{"role":"assistant","content":"hello"}"#.len();
        let mut small = [0u8; 10];
        assert_eq!(
            degrade_assistant_final(body, &mut small),
            Err(ScanError::BufferTooSmall {
                needed_bytes: expected
            })
        );
        let mut exact = vec![0u8; expected];
        assert_eq!(
            degrade_assistant_final(body, &mut exact),
            Ok(Degraded::Rewritten {
                len_bytes: expected
            })
        );
        let mut tiny = [0u8; 2];
        assert_eq!(
            extract_final_text(br#"{"content":"abc"}"#, &mut tiny),
            Err(ScanError::BufferTooSmall { needed_bytes: 3 })
        );
    }

    #[test]
    fn extract_reads_all_three_backends() {
        assert_eq!(
            extract(r#"{"role":"assistant","content":"plain"}"#).unwrap(),
            "plain"
        );
        assert_eq!(
            extract(
                r#"{"content":[{"type":"text","text":"a"},{"type":"output_text","text":"b"}]}"#
            )
            .unwrap(),
            "ab"
        );
        let responses = r#"{"id":"r","output":[
            {"type":"reasoning","summary":[]},
            {"type":"message","role":"assistant","content":[
                {"type":"output_text","text":"Hi ","annotations":[]},
                {"type":"refusal","refusal":"no."}
            ]},
            {"type":"function_call","call_id":"c","name":"n","arguments":"{}"}
        ]}"#;
        assert_eq!(extract(responses).unwrap(), "Hi no.");
        assert_eq!(extract(r#"{"content":null}"#).unwrap(), "");
        assert_eq!(extract(r#"[1,2]"#).unwrap(), "");
    }

    #[test]
    fn filter_record_combines_action_and_rewrite() {
        let mut scratch = [0u8; 256];
        let body = br#"{"role":"assistant","content":[{"type":"text","text":"x"}]}"#;
        let result = filter_record(
            OpenAi,
            Anthropic,
            RecordType::AssistantFinal,
            body,
            &mut scratch,
        )
        .unwrap();
        assert_eq!(
            result,
            Filtered::Replace(br#"{"role":"assistant","content":"x"}"#)
        );
        let mut scratch = [0u8; 256];
        assert_eq!(
            filter_record(
                OpenAi,
                Anthropic,
                RecordType::ToolResult,
                b"[]",
                &mut scratch
            )
            .unwrap(),
            Filtered::Drop
        );
        let mut scratch = [0u8; 256];
        assert_eq!(
            filter_record(
                OpenAi,
                OpenAi,
                RecordType::AssistantFinal,
                b"not json",
                &mut scratch
            )
            .unwrap(),
            Filtered::Keep(b"not json")
        );
        let mut scratch = [0u8; 256];
        assert!(matches!(
            filter_record(
                OpenAi,
                Anthropic,
                RecordType::AssistantFinal,
                b"{",
                &mut scratch
            ),
            Err(ScanError::Malformed { .. })
        ));
    }

    #[test]
    fn write_text_message_escapes() {
        let mut out = [0u8; 64];
        let len = write_text_message("a\"b\n", &mut out).unwrap();
        assert_eq!(&out[..len], br#"{"role":"assistant","content":"a\"b\n"}"#);
        assert_eq!(json_escaped_len("a\"b\n"), 6);
        assert_eq!(json_escaped_len("\u{1f}é"), 6 + 2);
        let hello = br#"{"role":"assistant","content":"hello"}"#.len();
        assert_eq!(
            write_text_message("hello", &mut [0u8; 5]),
            Err(ScanError::BufferTooSmall {
                needed_bytes: hello
            })
        );
    }

    #[test]
    fn array_span_for_tool_results() {
        let body = br#"  [ {"role":"tool","content":"a"} , {"role":"tool"} ]  "#;
        let span = array_inner_span(body).unwrap().unwrap();
        assert_eq!(
            &body[span],
            br#"{"role":"tool","content":"a"} , {"role":"tool"}"#
        );
        let span = array_inner_span(b"[]").unwrap().unwrap();
        assert!(span.is_empty());
        let span = array_inner_span(b"[ ]").unwrap().unwrap();
        assert!(span.is_empty());
        assert_eq!(array_inner_span(br#"{"a":1}"#).unwrap(), None);
        assert!(array_inner_span(b"[1,").is_err());
    }

    #[test]
    fn valid_documents_are_accepted() {
        for body in [
            "0",
            "-0.5e+10",
            "1E5",
            "true",
            "null",
            r#"  {"a" : [ 1 , 2.25 , {"b":null} , [] , {} ] }  "#,
            r#""\u0000 nul is fine""#,
            "\"raw \n newline, as cJSON accepts\"",
            r#"[[[[[]]]]]"#,
        ] {
            assert_eq!(validate_json(body.as_bytes()), Ok(()), "{body}");
        }
    }

    #[test]
    fn malformed_documents_say_why() {
        assert_eq!(kind_of(b""), JsonErrorKind::UnexpectedEnd);
        assert_eq!(kind_of(b"{"), JsonErrorKind::UnexpectedEnd);
        assert_eq!(kind_of(br#"{"a":1"#), JsonErrorKind::UnexpectedEnd);
        assert_eq!(kind_of(br#"{"a" 1}"#), JsonErrorKind::UnexpectedByte(b'1'));
        assert_eq!(kind_of(br#"{"a":1,}"#), JsonErrorKind::UnexpectedByte(b'}'));
        assert_eq!(kind_of(b"[1,]"), JsonErrorKind::UnexpectedByte(b']'));
        assert_eq!(kind_of(b"[1 2]"), JsonErrorKind::UnexpectedByte(b'2'));
        assert_eq!(kind_of(b"{1:2}"), JsonErrorKind::UnexpectedByte(b'1'));
        assert_eq!(kind_of(b"[}"), JsonErrorKind::UnexpectedByte(b'}'));
        assert_eq!(kind_of(b"tru"), JsonErrorKind::UnexpectedEnd);
        assert_eq!(kind_of(b"nulL"), JsonErrorKind::UnexpectedByte(b'L'));
        assert_eq!(kind_of(b"{} x"), JsonErrorKind::TrailingData);
        assert_eq!(kind_of(b"01"), JsonErrorKind::TrailingData);
        assert_eq!(kind_of(b"1."), JsonErrorKind::InvalidNumber);
        assert_eq!(kind_of(b"-"), JsonErrorKind::InvalidNumber);
        assert_eq!(kind_of(b"1e+"), JsonErrorKind::InvalidNumber);
        assert_eq!(kind_of(br#""\x""#), JsonErrorKind::InvalidEscape);
        assert_eq!(kind_of(br#""\u12g4""#), JsonErrorKind::InvalidUnicodeEscape);
        assert_eq!(kind_of(br#""\ud83d""#), JsonErrorKind::LoneSurrogate);
        assert_eq!(kind_of(br#""\ud83d\u0041""#), JsonErrorKind::LoneSurrogate);
        assert_eq!(kind_of(br#""\ude00""#), JsonErrorKind::LoneSurrogate);
        assert_eq!(kind_of(b"\"\xff\""), JsonErrorKind::InvalidUtf8);
        assert_eq!(kind_of(b"\"\xe2\x82\""), JsonErrorKind::InvalidUtf8);
        assert_eq!(kind_of(b"\"unterminated"), JsonErrorKind::UnexpectedEnd);
        assert_eq!(kind_of(b"\"\\"), JsonErrorKind::UnexpectedEnd);
    }

    #[test]
    fn error_offsets_point_at_the_problem() {
        assert_eq!(
            validate_json(br#"{"a":[1,2,x]}"#),
            Err(ScanError::Malformed {
                offset: 10,
                kind: JsonErrorKind::UnexpectedByte(b'x')
            })
        );
        let text = validate_json(b"[1,]").unwrap_err().to_string();
        assert!(text.contains("byte 3"), "{text}");
    }

    #[test]
    fn nesting_is_limited_without_recursion() {
        let mut deep = Vec::new();
        deep.extend(core::iter::repeat_n(b'[', MAX_JSON_DEPTH));
        deep.extend(core::iter::repeat_n(b']', MAX_JSON_DEPTH));
        assert_eq!(validate_json(&deep), Ok(()));
        let mut too_deep = Vec::new();
        too_deep.extend(core::iter::repeat_n(b'[', MAX_JSON_DEPTH + 1));
        too_deep.extend(core::iter::repeat_n(b']', MAX_JSON_DEPTH + 1));
        assert_eq!(kind_of(&too_deep), JsonErrorKind::TooDeep);
        let mut objects = Vec::new();
        for _ in 0..MAX_JSON_DEPTH {
            objects.extend_from_slice(br#"{"a":"#);
        }
        objects.extend_from_slice(b"{}");
        objects.extend(core::iter::repeat_n(b'}', MAX_JSON_DEPTH));
        assert_eq!(kind_of(&objects), JsonErrorKind::TooDeep);
        // Far deeper than any stack could recurse: still a clean error.
        let huge: Vec<u8> = core::iter::repeat_n(b'{', 100_000).collect();
        assert!(validate_json(&huge).is_err());
    }

    #[test]
    fn never_panics_on_arbitrary_bytes() {
        // Every prefix and every single-byte corruption of a realistic body.
        let body = br#"{"role":"assistant","content":[{"type":"text","text":"a\u00e9\ud83d\ude00\n"},{"type":"x","n":-1.5e3,"b":[true,false,null]}]}"#;
        let mut out = [0u8; 64];
        for end in 0..=body.len() {
            let _ = degrade_assistant_final(&body[..end], &mut out);
            let _ = extract_final_text(&body[..end], &mut out);
            let _ = array_inner_span(&body[..end]);
        }
        let mut copy = body.to_vec();
        for i in 0..copy.len() {
            let original = copy[i];
            for b in [
                0u8, b'"', b'\\', b'{', b'}', b'[', b']', b',', b':', 0x80, 0xff,
            ] {
                copy[i] = b;
                let _ = degrade_assistant_final(&copy, &mut out);
                let _ = extract_final_text(&copy, &mut out[..3]);
            }
            copy[i] = original;
        }
        // A simple xorshift stream of random documents.
        let mut state = 0x2545_f491_4f6c_dd1du64;
        let alphabet = br#"{}[]":,\u0123abtrufesnl-+.eE 09"#;
        for _ in 0..20_000 {
            let mut doc = Vec::new();
            for _ in 0..(state % 24) {
                state ^= state << 13;
                state ^= state >> 7;
                state ^= state << 17;
                doc.push(alphabet[(state % alphabet.len() as u64) as usize]);
            }
            let _ = degrade_assistant_final(&doc, &mut out);
            let _ = extract_final_text(&doc, &mut out);
        }
    }
}
