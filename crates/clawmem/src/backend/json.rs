//! The small JSON scanner the backend filter (and the index rebuild) needs.
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

use core::cell::Cell;
use core::fmt;

use crate::text::json_escape;

/// Deepest nesting of arrays and objects the scanner accepts (cJSON's limit).
pub const MAX_JSON_DEPTH: usize = 1000;

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

/// An internal step of the scanner: `None` when it failed, the reason then
/// in [`Json::error`] (an `Option` comes back in registers, a `Result` with
/// the reason in it through memory).
pub(super) type Scan<T> = Option<T>;

const fn malformed(offset: usize, kind: JsonErrorKind) -> ScanError {
    ScanError::Malformed { offset, kind }
}

/// Output buffer that keeps counting after it is full, to report the size
/// needed.
pub(super) struct Out<'a> {
    buf: &'a mut [u8],
    pub(super) needed: usize,
    pub(super) overflow: bool,
}

impl<'a> Out<'a> {
    pub(super) fn new(buf: &'a mut [u8]) -> Self {
        Out {
            buf,
            needed: 0,
            overflow: false,
        }
    }

    pub(super) fn push_bytes(&mut self, bytes: &[u8]) {
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

    pub(super) fn push_escaped(&mut self, c: char) {
        let mut buf = [0u8; 6];
        match json_escape(c, &mut buf) {
            Some(escaped) => self.push_bytes(escaped.as_bytes()),
            None => self.push_char(c),
        }
    }

    pub(super) fn finish(self) -> ScanResult<usize> {
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
    bits: [u32; MAX_JSON_DEPTH.div_ceil(32)],
    depth: usize,
}

impl Nesting {
    pub(super) const fn new() -> Self {
        Nesting {
            bits: [0; MAX_JSON_DEPTH.div_ceil(32)],
            depth: 0,
        }
    }

    pub(super) fn push(&mut self, is_object: bool) -> bool {
        if self.depth >= MAX_JSON_DEPTH {
            return false;
        }
        let Some(word) = self.bits.get_mut(self.depth / 32) else {
            return false;
        };
        let mask = 1u32 << (self.depth % 32);
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
        let word = self.bits.get(index / 32)?;
        Some(word & (1u32 << (index % 32)) != 0)
    }

    fn pop(&mut self) {
        self.depth = self.depth.saturating_sub(1);
    }
}

/// Decodes the characters of the JSON string whose opening quote is at a
/// given offset.
///
/// Offset arithmetic is plain `+`: every offset a step adds to is that of
/// a byte the document has (the quote, a backslash, a character's first
/// byte: checked before), so it is below `bytes.len()`, at most
/// `isize::MAX`, and adding an escape's 12 bytes or less cannot overflow.
struct StrChars<'j, 'a> {
    json: &'j Json<'a>,
    pos: usize,
    done: bool,
}

impl<'j, 'a> StrChars<'j, 'a> {
    fn new(json: &'j Json<'a>, quote_at: usize) -> Scan<Self> {
        if json.byte(quote_at) != Some(b'"') {
            return json.unexpected(quote_at);
        }
        Some(StrChars {
            json,
            pos: quote_at + 1,
            done: false,
        })
    }

    fn hex4(&self, at: usize) -> Scan<u32> {
        let mut value = 0u32;
        for i in 0..4 {
            let offset = at + i;
            // `0-9`, `a-f` and `A-F` only (a byte from 0x80 is no digit).
            let Some(digit) = char::from(self.json.need(offset)?).to_digit(16) else {
                return self.json.bad(offset, JsonErrorKind::InvalidUnicodeEscape);
            };
            value = (value << 4) | digit;
        }
        Some(value)
    }

    /// The next character, or `None` after the closing quote (the outer
    /// `None`: the string is malformed).
    fn next_char(&mut self) -> Scan<Option<char>> {
        if self.done {
            return Some(None);
        }
        let at = self.pos;
        let (c, width) = match self.json.need(at)? {
            b'"' => {
                self.done = true;
                self.pos = at + 1;
                return Some(None);
            }
            b'\\' => self.escape(at)?,
            b @ 0x00..=0x7F => (char::from(b), 1),
            lead => {
                let width = match lead {
                    0xC2..=0xDF => 2,
                    0xE0..=0xEF => 3,
                    0xF0..=0xF4 => 4,
                    _ => return self.json.bad(at, JsonErrorKind::InvalidUtf8),
                };
                let end = at + width;
                let Some(c) = self
                    .json
                    .bytes
                    .get(at..end)
                    .and_then(|seq| core::str::from_utf8(seq).ok())
                    .and_then(|s| s.chars().next())
                else {
                    return self.json.bad(at, JsonErrorKind::InvalidUtf8);
                };
                (c, width)
            }
        };
        self.pos = at + width;
        Some(Some(c))
    }

    /// Decodes the escape at `at` (a backslash): the character and the
    /// escape's length in bytes.
    #[inline(never)]
    fn escape(&self, at: usize) -> Scan<(char, usize)> {
        // The one-letter escapes and what they stand for.
        const LETTERS: &[u8; 8] = b"\"\\/bfnrt";
        const MEANS: &[u8; 8] = b"\"\\/\x08\x0c\n\r\t";
        let letter = self.json.need(at + 1)?;
        if letter == b'u' {
            return self.unicode_escape(at);
        }
        match LETTERS.iter().zip(MEANS).find(|(l, _)| **l == letter) {
            Some((_, &c)) => Some((char::from(c), 2)),
            None => self.json.bad(at, JsonErrorKind::InvalidEscape),
        }
    }

    fn unicode_escape(&self, at: usize) -> Scan<(char, usize)> {
        let first = self.hex4(at + 2)?;
        let (code, width) = match first {
            0xD800..=0xDBFF => {
                let next = at + 6;
                if !matches!(self.json.bytes.get(next..), Some([b'\\', b'u', ..])) {
                    return self.json.bad(at, JsonErrorKind::LoneSurrogate);
                }
                let second = self.hex4(next + 2)?;
                if !(0xDC00..=0xDFFF).contains(&second) {
                    return self.json.bad(at, JsonErrorKind::LoneSurrogate);
                }
                (0x10000 + ((first - 0xD800) << 10) + (second - 0xDC00), 12)
            }
            0xDC00..=0xDFFF => return self.json.bad(at, JsonErrorKind::LoneSurrogate),
            other => (other, 6),
        };
        let Some(c) = char::from_u32(code) else {
            return self.json.bad(at, JsonErrorKind::InvalidUnicodeEscape);
        };
        Some((c, width))
    }
}

/// A validating, non-recursive reader over one JSON document. Its steps
/// answer `None` when the document is malformed, and keep the reason
/// ([`error`](Self::error)).
pub(super) struct Json<'a> {
    bytes: &'a [u8],
    /// Why the last step that answered `None` failed.
    err: Cell<ScanError>,
}

#[derive(Clone, Copy, PartialEq, Eq)]
enum ListState {
    Start,
    AfterValue,
    Done,
}

/// Walks the members of an object or the elements of an array.
pub(super) struct List {
    pos: usize,
    state: ListState,
    object: bool,
}

impl<'a> Json<'a> {
    pub(super) const fn new(bytes: &'a [u8]) -> Self {
        Json {
            bytes,
            err: Cell::new(ScanError::BufferTooSmall { needed_bytes: 0 }),
        }
    }

    /// Why the step that answered `None` failed.
    pub(super) fn error(&self) -> ScanError {
        self.err.get()
    }

    /// A step's answer as a `Result`.
    pub(super) fn result<T>(&self, r: Scan<T>) -> ScanResult<T> {
        r.ok_or_else(|| self.error())
    }

    /// Keeps `kind` at `at` as the reason of a failure.
    #[inline(never)]
    fn fail(&self, at: usize, kind: JsonErrorKind) {
        self.err.set(malformed(at, kind));
    }

    /// A failure: `kind` at `at`.
    #[inline(always)]
    fn bad<T>(&self, at: usize, kind: JsonErrorKind) -> Scan<T> {
        self.fail(at, kind);
        None
    }

    pub(super) fn byte(&self, at: usize) -> Option<u8> {
        self.bytes.get(at).copied()
    }

    /// The byte at `at`, which the document must have.
    fn need(&self, at: usize) -> Scan<u8> {
        match self.byte(at) {
            Some(b) => Some(b),
            None => self.bad(at, JsonErrorKind::UnexpectedEnd),
        }
    }

    pub(super) fn skip_ws(&self, mut at: usize) -> usize {
        while let Some(b' ' | b'\t' | b'\n' | b'\r') = self.byte(at) {
            at += 1;
        }
        at
    }

    #[inline(never)]
    fn fail_unexpected(&self, at: usize) {
        let kind = match self.byte(at) {
            Some(byte) => JsonErrorKind::UnexpectedByte(byte),
            None => JsonErrorKind::UnexpectedEnd,
        };
        self.fail(at, kind);
    }

    /// A failure: the byte at `at` (or the end) cannot be there.
    #[inline(always)]
    fn unexpected<T>(&self, at: usize) -> Scan<T> {
        self.fail_unexpected(at);
        None
    }

    /// Validates the whole input and returns the offset of the root value.
    pub(super) fn validate(&self) -> Scan<usize> {
        let root = self.skip_ws(0);
        let end = self.value_end(root)?;
        let rest = self.skip_ws(end);
        if rest != self.bytes.len() {
            return self.bad(rest, JsonErrorKind::TrailingData);
        }
        Some(root)
    }

    fn string_end(&self, quote_at: usize) -> Scan<usize> {
        let mut chars = StrChars::new(self, quote_at)?;
        while chars.next_char()?.is_some() {}
        Some(chars.pos)
    }

    fn digits_end(&self, mut at: usize) -> usize {
        while let Some(b'0'..=b'9') = self.byte(at) {
            at += 1;
        }
        at
    }

    fn number_end(&self, start: usize) -> Scan<usize> {
        let mut at = start;
        if self.byte(at) == Some(b'-') {
            at += 1;
        }
        match self.byte(at) {
            Some(b'0') => at += 1,
            Some(b'1'..=b'9') => at = self.digits_end(at),
            _ => return self.bad(at, JsonErrorKind::InvalidNumber),
        }
        if self.byte(at) == Some(b'.') {
            let digits = self.digits_end(at + 1);
            if digits == at + 1 {
                return self.bad(digits, JsonErrorKind::InvalidNumber);
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
                return self.bad(digits, JsonErrorKind::InvalidNumber);
            }
            at = digits;
        }
        Some(at)
    }

    /// The end of `literal` at `at`, the offset of a byte the document
    /// has (its first letter), so `at + literal.len()` cannot overflow.
    fn literal_end(&self, at: usize, literal: &[u8]) -> Scan<usize> {
        for (i, &expected) in literal.iter().enumerate() {
            let offset = at + i;
            if self.byte(offset) != Some(expected) {
                return self.unexpected(offset);
            }
        }
        Some(at + literal.len())
    }

    /// Parses `"key" :` at `key_at` and returns the offset of the value.
    fn member_value_start(&self, key_at: usize) -> Scan<usize> {
        if self.byte(key_at) != Some(b'"') {
            return self.unexpected(key_at);
        }
        let colon = self.skip_ws(self.string_end(key_at)?);
        if self.byte(colon) != Some(b':') {
            return self.unexpected(colon);
        }
        Some(self.skip_ws(colon + 1))
    }

    /// Where the value of the item at `item` starts: after its name and
    /// colon in an object, the item itself in an array.
    #[inline(never)]
    fn item_value(&self, item: usize, object: bool) -> Scan<usize> {
        match object {
            true => self.member_value_start(item),
            false => Some(item),
        }
    }

    /// Validates the value at `start` and returns the offset just past it.
    pub(super) fn value_end(&self, start: usize) -> Scan<usize> {
        let mut nesting = Nesting::new();
        let mut at = self.skip_ws(start);
        loop {
            let after_value = match self.byte(at) {
                Some(open @ (b'{' | b'[')) => {
                    // Empty containers count as a level too, as in cJSON.
                    if nesting.depth >= MAX_JSON_DEPTH {
                        return self.bad(at, JsonErrorKind::TooDeep);
                    }
                    let is_object = open == b'{';
                    let inner = self.skip_ws(at + 1);
                    let close = if is_object { b'}' } else { b']' };
                    if self.byte(inner) == Some(close) {
                        inner + 1
                    } else {
                        if !nesting.push(is_object) {
                            return self.bad(at, JsonErrorKind::TooDeep);
                        }
                        at = self.item_value(inner, is_object)?;
                        continue;
                    }
                }
                Some(b'"') => self.string_end(at)?,
                Some(b'-' | b'0'..=b'9') => self.number_end(at)?,
                Some(c @ (b't' | b'f' | b'n')) => {
                    let literal: &[u8] = match c {
                        b't' => b"true",
                        b'f' => b"false",
                        _ => b"null",
                    };
                    self.literal_end(at, literal)?
                }
                _ => return self.unexpected(at),
            };
            at = after_value;
            // Close every container that ends here, or move to the next item.
            loop {
                let Some(is_object) = nesting.top() else {
                    return Some(at);
                };
                let next = self.skip_ws(at);
                match self.byte(next) {
                    Some(b',') => {
                        at = self.item_value(self.skip_ws(next + 1), is_object)?;
                        break;
                    }
                    Some(b) if b == if is_object { b'}' } else { b']' } => {
                        nesting.pop();
                        at = next + 1;
                    }
                    _ => return self.unexpected(next),
                }
            }
        }
    }

    /// A walk over the container at `open`, which must be `{` or `[`.
    pub(super) fn list(&self, open: usize) -> List {
        List {
            pos: open.saturating_add(1),
            state: ListState::Start,
            object: self.byte(open) == Some(b'{'),
        }
    }

    /// The next item of a walk: `(key offset, value offset)` for an object
    /// (the key offset is that of its quote), `(value, value)` for an array.
    pub(super) fn next_item(&self, list: &mut List) -> Scan<Option<(usize, usize)>> {
        let close = if list.object { b'}' } else { b']' };
        if list.state == ListState::Done {
            return Some(None);
        }
        let at = self.skip_ws(list.pos);
        // The close ends the walk at its start or after a value; a comma
        // leads to the next item after a value.
        let item = match (list.state, self.byte(at)) {
            (_, Some(byte)) if byte == close => {
                list.state = ListState::Done;
                return Some(None);
            }
            (ListState::Start, _) => at,
            (_, Some(b',')) => self.skip_ws(at + 1),
            _ => return self.unexpected(at),
        };
        let value = self.item_value(item, list.object)?;
        list.pos = self.value_end(value)?;
        list.state = ListState::AfterValue;
        Some(Some((item, value)))
    }

    /// `true` if the string at `quote_at` equals `expected` (ignoring ASCII
    /// case if asked).
    fn string_eq(&self, quote_at: usize, expected: &str, ignore_case: bool) -> Scan<bool> {
        if self.byte(quote_at) != Some(b'"') {
            return Some(false);
        }
        // Compared as UTF-8: equal encodings are equal characters, and ASCII
        // case folding leaves the bytes of other characters (0x80 and up)
        // alone. The string's characters are read as far as they match, and
        // one past `expected`.
        let mut chars = StrChars::new(self, quote_at)?;
        let mut rest = expected.as_bytes();
        while let Some(got) = chars.next_char()? {
            let mut buf = [0u8; 4];
            let got = got.encode_utf8(&mut buf).as_bytes();
            match rest.split_at_checked(got.len()) {
                Some((want, tail)) if want == got => rest = tail,
                Some((want, tail)) if ignore_case && want.eq_ignore_ascii_case(got) => rest = tail,
                _ => return Some(false),
            }
        }
        Some(rest.is_empty())
    }

    /// The value of the first member of the object at `object_at` named
    /// `name` (ASCII case ignored, as `cJSON_GetObjectItem`).
    pub(super) fn member(&self, object_at: usize, name: &str) -> Scan<Option<usize>> {
        if self.byte(object_at) != Some(b'{') {
            return Some(None);
        }
        let mut list = self.list(object_at);
        while let Some((key, value)) = self.next_item(&mut list)? {
            if self.string_eq(key, name, true)? {
                return Some(Some(value));
            }
        }
        Some(None)
    }

    /// Which of `choices` the value of the object at `object_at`'s member
    /// `name` is, as a string compared exactly (as `strcmp`): the first
    /// one's index, `None` if none (or no such member). The member is looked
    /// up once.
    pub(super) fn member_in(
        &self,
        object_at: usize,
        name: &str,
        choices: &[&str],
    ) -> Scan<Option<usize>> {
        if let Some(value) = self.member(object_at, name)? {
            for (k, expected) in choices.iter().enumerate() {
                if self.string_eq(value, expected, false)? {
                    return Some(Some(k));
                }
            }
        }
        Some(None)
    }

    /// The string value of member `name`, if it is a string.
    pub(super) fn string_member(&self, object_at: usize, name: &str) -> Scan<Option<usize>> {
        Some(
            self.member(object_at, name)?
                .filter(|&value| self.byte(value) == Some(b'"')),
        )
    }

    /// Copies the decoded string at `quote_at` to `out`, escaped or not;
    /// returns the number of UTF-8 bytes of decoded text.
    pub(super) fn copy_string(
        &self,
        quote_at: usize,
        out: &mut Out<'_>,
        escape: bool,
    ) -> Scan<usize> {
        let mut chars = StrChars::new(self, quote_at)?;
        let mut text_bytes = 0usize;
        while let Some(c) = chars.next_char()? {
            // At most the string's bytes in the document: no overflow.
            text_bytes += c.len_utf8();
            if escape {
                out.push_escaped(c);
            } else {
                out.push_char(c);
            }
        }
        Some(text_bytes)
    }

    /// Copies, from every block of the array at `array_at` whose `type` is
    /// `types[k]`, its string member `fields[k]`; returns the text bytes
    /// copied; nothing if the value at `array_at` is not an array. (The one
    /// walk of every backend's content blocks.)
    pub(super) fn copy_text_blocks(
        &self,
        array_at: usize,
        types: &[&str],
        fields: &[&str],
        out: &mut Out<'_>,
        escape: bool,
    ) -> Scan<usize> {
        let mut total = 0usize;
        if self.byte(array_at) != Some(b'[') {
            return Some(0);
        }
        let mut blocks = self.list(array_at);
        while let Some((_, block)) = self.next_item(&mut blocks)? {
            // `None` for a block that is not an object, too.
            let Some(k) = self.member_in(block, "type", types)? else {
                continue;
            };
            let Some(field) = fields.get(k) else {
                continue;
            };
            if let Some(text) = self.string_member(block, field)? {
                // Each string's text is at most its own bytes of the
                // document, and the strings are distinct: no overflow.
                total += self.copy_string(text, out, escape)?;
            }
        }
        Some(total)
    }
}

/// Checks that `body` is one complete JSON document.
pub fn validate_json(body: &[u8]) -> Result<(), ScanError> {
    let json = Json::new(body);
    json.result(json.validate().map(|_| ()))
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
        let json = Json::new(body);
        let at = json.result(json.validate())?;
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
        let at = Json::new(self.bytes).member(self.at, name)??;
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
            Some(Some((_, at))) => Some(JsonValue {
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
