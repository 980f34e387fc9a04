//! Text normalization for records built from plain text.
//!
//! ESP-Claw stores a USER record (and an ASSISTANT_FINAL that arrives as plain
//! text) as `{"role":...,"content":<text>}` after passing the text through a
//! normalizer: at most `max_message_chars` (4096) code points are kept, invalid
//! UTF-8 is dropped byte by byte, and a code point is never cut in half
//! (`claw_memory_normalize_session_text` in
//! `components/claw_modules/claw_memory/src/claw_memory_utils.c`). Raw JSON
//! records have no limit and do not pass through here.
//!
//! This module owns that normalizer, without allocation: the caller supplies
//! the output buffer ([`normalized_capacity_bytes`] tells how big it must be to
//! never truncate on space), [`utf8_prefix`] cuts a `&str` on a character
//! boundary, and the crate's one JSON string escaper (cJSON's rules), which
//! the backend filter and the memory renderer share.
//!
//! Differences from ESP-Claw, all deliberate:
//! - ESP-Claw only checks that continuation bytes look like `10xxxxxx`, so it
//!   lets overlong forms (`C0 80`), UTF-16 surrogates (`ED A0 80`) and code
//!   points above U+10FFFF through. Here a sequence is kept only if it is valid
//!   UTF-8 in the strict sense of [`core::str::from_utf8`], so the output is
//!   always a valid `&str`.
//! - ESP-Claw reads a C string and stops at the first NUL byte; here the input
//!   is a byte slice and U+0000 is an ordinary (valid) code point.
//! - When the output buffer is full ESP-Claw skips the character that does not
//!   fit and carries on with later, shorter ones; here copying stops, so the
//!   output is always a prefix of the valid text.
//!
//! Pure logic: no flash I/O, so nothing here is affected by power loss.

use core::fmt::{self, Write};

/// Largest number of code points kept from a text-built record
/// (`CLAW_MEMORY_DEFAULT_MAX_MESSAGE_CHARS` in ESP-Claw).
pub const MAX_MESSAGE_CHARS: usize = 4096;

/// Largest UTF-8 encoding of one code point, in bytes.
pub const MAX_UTF8_BYTES_PER_CHAR: usize = 4;

/// Output buffer size that can hold `max_chars` code points of any kind, so
/// that [`normalize`] is limited only by `max_chars`, never by space.
///
/// Saturates at `usize::MAX` instead of overflowing.
pub const fn normalized_capacity_bytes(max_chars: usize) -> usize {
    max_chars.saturating_mul(MAX_UTF8_BYTES_PER_CHAR)
}

/// What [`normalize`] did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Normalized {
    /// Bytes written at the start of the output buffer. They are valid UTF-8.
    pub len_bytes: usize,
    /// Code points written.
    pub chars: usize,
    /// Input bytes skipped because they did not start a valid UTF-8 sequence
    /// (counted up to the point where copying stopped).
    pub invalid_bytes_dropped: usize,
    /// `true` if at least one valid code point of the input was left out,
    /// because `max_chars` was reached or the output buffer was full.
    pub truncated: bool,
}

/// Length of the valid UTF-8 sequence that starts at `input[at]`, or `None` if
/// the byte there does not start one (bad lead byte, bad or missing
/// continuation bytes, overlong form, surrogate, or above U+10FFFF).
fn valid_sequence_len(input: &[u8], at: usize) -> Option<usize> {
    let lead = *input.get(at)?;
    let width = match lead {
        0x00..=0x7F => 1,
        0xC2..=0xDF => 2,
        0xE0..=0xEF => 3,
        0xF0..=0xF4 => 4,
        _ => return None,
    };
    // `at` indexes a byte of `input`: adding 4 or less cannot overflow.
    let sequence = input.get(at..at + width)?;
    core::str::from_utf8(sequence).ok().map(|_| width)
}

/// Copies the valid UTF-8 of `input` into `out`, keeping at most `max_chars`
/// code points and never splitting one.
///
/// Bytes that do not start a valid UTF-8 sequence are dropped one at a time
/// (a broken sequence loses only its bad bytes; the next valid code point is
/// kept). Copying stops at the first valid code point that would exceed
/// `max_chars` or not fit in `out`; the output is then a prefix of the input's
/// valid text and [`Normalized::truncated`] is set.
///
/// Never panics; any byte pattern is accepted.
pub fn normalize(input: &[u8], max_chars: usize, out: &mut [u8]) -> Normalized {
    let mut result = Normalized {
        len_bytes: 0,
        chars: 0,
        invalid_bytes_dropped: 0,
        truncated: false,
    };
    // Plain sums below: `at` stays within `input`, `len_bytes` within
    // `out`, and the counts below `input.len()`.
    let mut at = 0usize;
    while at < input.len() {
        let Some(width) = valid_sequence_len(input, at) else {
            result.invalid_bytes_dropped += 1;
            at += 1;
            continue;
        };
        let out_end = result.len_bytes + width;
        let in_end = at + width;
        // No room left, or `max_chars` reached: either way, truncated.
        match (
            input.get(at..in_end),
            out.get_mut(result.len_bytes..out_end),
        ) {
            (Some(source), Some(target)) if result.chars < max_chars => {
                target.copy_from_slice(source)
            }
            _ => {
                result.truncated = true;
                break;
            }
        }
        result.len_bytes = out_end;
        result.chars += 1;
        at = in_end;
    }
    result
}

/// [`normalize`], returning the written text as a `&str` borrowed from `out`.
pub fn normalize_to_str<'a>(
    input: &[u8],
    max_chars: usize,
    out: &'a mut [u8],
) -> (&'a str, Normalized) {
    let result = normalize(input, max_chars, out);
    let written = out.get(..result.len_bytes).unwrap_or(&[]);
    // `normalize` only ever copies complete, strictly valid sequences.
    let text = core::str::from_utf8(written).unwrap_or("");
    (text, result)
}

/// The longest prefix of `s` that is at most `max_bytes` long and ends on a
/// character boundary.
pub fn utf8_prefix(s: &str, max_bytes: usize) -> &str {
    if s.len() <= max_bytes {
        return s;
    }
    let mut end = max_bytes;
    while end > 0 && !s.is_char_boundary(end) {
        end -= 1;
    }
    s.get(..end).unwrap_or("")
}

/// How cJSON writes `c` inside a JSON string: `"` and `\` escaped,
/// `\b \f \n \r \t` as short escapes, other control characters as
/// `\u00xx`; `None` for everything else (including non-ASCII), written as is.
pub(crate) fn json_escape(c: char, buf: &mut [u8; 6]) -> Option<&str> {
    let short = match c {
        '"' => b'"',
        '\\' => b'\\',
        '\u{8}' => b'b',
        '\u{c}' => b'f',
        '\n' => b'n',
        '\r' => b'r',
        '\t' => b't',
        c if (c as u32) < 0x20 => {
            const HEX: &[u8; 16] = b"0123456789abcdef";
            let code = c as usize;
            let hi = HEX.get(code >> 4).copied().unwrap_or(b'0');
            let lo = HEX.get(code & 0xF).copied().unwrap_or(b'0');
            *buf = [b'\\', b'u', b'0', b'0', hi, lo];
            return core::str::from_utf8(buf).ok();
        }
        _ => return None,
    };
    buf[0] = b'\\';
    buf[1] = short;
    core::str::from_utf8(&buf[..2]).ok()
}

/// Writes `s` as a JSON string literal the way cJSON prints it (see
/// [`json_escape`]).
pub(crate) fn write_json_string<W: Write + ?Sized>(w: &mut W, s: &str) -> fmt::Result {
    w.write_char('"')?;
    // Every character that is escaped is ASCII, so the bytes are scanned: a
    // byte of a multi-byte character (0x80 and up, as a char U+0080 to
    // U+00FF) is never escaped, and the text is cut only at ASCII bytes.
    let mut start = 0;
    for (at, &byte) in s.as_bytes().iter().enumerate() {
        let mut buf = [0u8; 6];
        if let Some(escaped) = json_escape(char::from(byte), &mut buf) {
            w.write_str(s.get(start..at).unwrap_or(""))?;
            w.write_str(escaped)?;
            start = at + 1;
        }
    }
    w.write_str(s.get(start..).unwrap_or(""))?;
    w.write_char('"')
}

#[cfg(test)]
mod tests {
    extern crate std;

    use super::*;
    use std::string::String;
    use std::vec;

    fn run(input: &[u8], max_chars: usize, out_len: usize) -> (String, Normalized) {
        let mut out = vec![0u8; out_len];
        let (text, result) = normalize_to_str(input, max_chars, &mut out);
        (String::from(text), result)
    }

    #[test]
    fn ascii_is_copied_unchanged() {
        let (text, r) = run(b"hello", MAX_MESSAGE_CHARS, 64);
        assert_eq!(text, "hello");
        assert_eq!(r.len_bytes, 5);
        assert_eq!(r.chars, 5);
        assert!(!r.truncated);
        assert_eq!(r.invalid_bytes_dropped, 0);
    }

    #[test]
    fn max_chars_counts_code_points_not_bytes() {
        // 3 CJK characters of 3 bytes each, then an emoji of 4 bytes.
        let input = "你好吗😀".as_bytes();
        let (text, r) = run(input, 3, 64);
        assert_eq!(text, "你好吗");
        assert_eq!(r.chars, 3);
        assert_eq!(r.len_bytes, 9);
        assert!(r.truncated);
        let (text, r) = run(input, 4, 64);
        assert_eq!(text, "你好吗😀");
        assert!(!r.truncated);
    }

    #[test]
    fn exactly_max_chars_is_not_truncated() {
        let (text, r) = run(b"abcd", 4, 64);
        assert_eq!(text, "abcd");
        assert!(!r.truncated);
    }

    #[test]
    fn zero_max_chars_writes_nothing() {
        let (text, r) = run(b"abc", 0, 64);
        assert_eq!(text, "");
        assert!(r.truncated);
        let (_, r) = run(b"", 0, 64);
        assert!(!r.truncated);
    }

    #[test]
    fn a_full_buffer_never_cuts_a_code_point() {
        // "a" + "é" (2 bytes) + "b": a 2-byte buffer holds "a" only.
        let (text, r) = run("aéb".as_bytes(), 10, 2);
        assert_eq!(text, "a");
        assert_eq!(r.len_bytes, 1);
        assert!(r.truncated);
        let (text, _) = run("aéb".as_bytes(), 10, 3);
        assert_eq!(text, "aé");
        let (text, r) = run("😀".as_bytes(), 10, 3);
        assert_eq!(text, "");
        assert!(r.truncated);
    }

    #[test]
    fn invalid_bytes_are_dropped_and_valid_text_around_them_kept() {
        // Lone continuation byte, invalid lead 0xFF, truncated 3-byte sequence.
        let input = b"a\x80b\xFFc\xE4\xBDd";
        let (text, r) = run(input, 100, 64);
        assert_eq!(text, "abcd");
        assert_eq!(r.invalid_bytes_dropped, 4);
        assert!(!r.truncated);
    }

    #[test]
    fn overlong_surrogate_and_out_of_range_forms_are_rejected() {
        // C0 80 (overlong NUL), ED A0 80 (surrogate U+D800), F4 90 80 80 (> U+10FFFF),
        // E0 80 80 (overlong 3-byte).
        let input = b"x\xC0\x80y\xED\xA0\x80z\xF4\x90\x80\x80w\xE0\x80\x80v";
        let (text, r) = run(input, 100, 64);
        assert_eq!(text, "xyzwv");
        assert_eq!(r.invalid_bytes_dropped, 2 + 3 + 4 + 3);
    }

    #[test]
    fn a_sequence_cut_by_the_end_of_input_is_dropped() {
        let input = b"ok\xF0\x9F\x98";
        let (text, r) = run(input, 100, 64);
        assert_eq!(text, "ok");
        assert_eq!(r.invalid_bytes_dropped, 3);
    }

    #[test]
    fn truncated_is_false_when_only_invalid_bytes_remain() {
        let (text, r) = run(b"ab\xFF\xFE", 2, 64);
        assert_eq!(text, "ab");
        assert!(!r.truncated);
        assert_eq!(r.invalid_bytes_dropped, 2);
    }

    #[test]
    fn nul_is_an_ordinary_code_point() {
        let (text, r) = run(b"a\0b", 100, 64);
        assert_eq!(text, "a\0b");
        assert_eq!(r.chars, 3);
    }

    #[test]
    fn the_default_limit_keeps_4096_chars() {
        let input = "é".repeat(5000);
        let mut out = vec![0u8; normalized_capacity_bytes(MAX_MESSAGE_CHARS)];
        let r = normalize(input.as_bytes(), MAX_MESSAGE_CHARS, &mut out);
        assert_eq!(r.chars, MAX_MESSAGE_CHARS);
        assert_eq!(r.len_bytes, 2 * MAX_MESSAGE_CHARS);
        assert!(r.truncated);
    }

    #[test]
    fn capacity_saturates() {
        assert_eq!(normalized_capacity_bytes(4096), 16384);
        assert_eq!(normalized_capacity_bytes(usize::MAX), usize::MAX);
    }

    #[test]
    fn every_two_byte_pattern_gives_valid_utf8() {
        let mut out = [0u8; 16];
        for a in 0..=255u8 {
            for b in 0..=255u8 {
                let input = [a, b, b'z'];
                let r = normalize(&input, 10, &mut out);
                let written = out.get(..r.len_bytes).unwrap_or(&[]);
                assert!(core::str::from_utf8(written).is_ok());
                assert_eq!(written.last(), Some(&b'z'));
            }
        }
    }

    #[test]
    fn utf8_prefix_cuts_on_char_boundaries() {
        let s = "aé😀b"; // 1 + 2 + 4 + 1 bytes
        assert_eq!(utf8_prefix(s, 0), "");
        assert_eq!(utf8_prefix(s, 1), "a");
        assert_eq!(utf8_prefix(s, 2), "a");
        assert_eq!(utf8_prefix(s, 3), "aé");
        assert_eq!(utf8_prefix(s, 6), "aé");
        assert_eq!(utf8_prefix(s, 7), "aé😀");
        assert_eq!(utf8_prefix(s, 8), s);
        assert_eq!(utf8_prefix(s, 100), s);
        assert_eq!(utf8_prefix("", 5), "");
        // "中" is 3 bytes.
        let s = "aé中😀";
        assert_eq!(utf8_prefix(s, 5), "aé");
        assert_eq!(utf8_prefix(s, 6), "aé中");
        assert_eq!(utf8_prefix(s, 9), "aé中");
        assert_eq!(utf8_prefix(s, 10), s);
        for max in 0..=s.len() + 1 {
            let cut = utf8_prefix(s, max);
            assert!(cut.len() <= max);
            assert!(s.starts_with(cut));
        }
    }

    #[test]
    fn json_escaping_matches_cjson() {
        let mut out = String::new();
        write_json_string(&mut out, "a\"b\\c\n\t\u{01}中").unwrap();
        assert_eq!(out, "\"a\\\"b\\\\c\\n\\t\\u0001中\"");
        let mut buf = [0u8; 6];
        assert_eq!(json_escape('\u{1f}', &mut buf), Some("\\u001f"));
        assert_eq!(json_escape('\u{8}', &mut buf), Some("\\b"));
        assert_eq!(json_escape('é', &mut buf), None);
        assert_eq!(json_escape(' ', &mut buf), None);
    }
}
