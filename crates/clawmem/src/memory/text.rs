//! Text primitives shared by the memory rules: UTF-8-safe cuts, ESP-Claw's
//! whitespace trim, term splitting, the normalized key, and JSON string
//! escaping for rendered output.
//!
//! Everything here works on `&str`, so every cut lands on a character
//! boundary by construction (ESP-Claw cuts by byte and can split a UTF-8
//! sequence; clawmem never does). Nothing allocates; the two owned results
//! ([`NormalizedText`], [`ItemKey`]) are fixed-capacity `heapless` strings.

use super::{KEY_MAX_BYTES, LABEL_MAX_BYTES, SEMANTIC_MATCH_BYTES};
pub(crate) use crate::text::write_json_string;

/// The normalized form of a text, as used by the duplicate rules: see
/// [`normalize_for_key`]. At most [`SEMANTIC_MATCH_BYTES`] (159) bytes, what
/// ESP-Claw's `existing_key[160]` holds.
pub type NormalizedText = heapless::String<SEMANTIC_MATCH_BYTES>;

/// An item's dedup key: the first [`KEY_MAX_BYTES`] bytes of its normalized
/// content, cut on a character boundary. See [`item_key`].
pub type ItemKey = heapless::String<KEY_MAX_BYTES>;

/// The non-ASCII punctuation that key normalization drops, exactly the list
/// of ESP-Claw's `utf8_is_common_punctuation`
/// (`components/claw_modules/claw_memory/src/claw_memory_utils.c`): CJK and
/// full-width marks. Every other non-ASCII character is kept.
pub const KEY_DROPPED_PUNCTUATION: [char; 28] = [
    '\u{3002}', // 。
    '\u{FF0C}', // ，
    '\u{FF01}', // ！
    '\u{FF1F}', // ？
    '\u{FF1B}', // ；
    '\u{FF1A}', // ：
    '\u{3001}', // 、
    '\u{FF08}', // （
    '\u{FF09}', // ）
    '\u{3010}', // 【
    '\u{3011}', // 】
    '\u{300A}', // 《
    '\u{300B}', // 》
    '\u{201C}', // “
    '\u{201D}', // ”
    '\u{2018}', // ‘
    '\u{2019}', // ’
    '\u{300C}', // 「
    '\u{300D}', // 」
    '\u{300E}', // 『
    '\u{300F}', // 』
    '\u{00B7}', // ·
    '\u{2026}', // …
    '\u{2014}', // —
    '\u{FF0D}', // －
    '\u{FF5E}', // ～
    '\u{3000}', // ideographic space
    '\u{FF0E}', // ．
];

/// The characters that separate terms in a tags or keywords list
/// (ESP-Claw's `strtok_r(..., ",;/|", ...)`).
pub const TERM_SEPARATORS: [char; 4] = [',', ';', '/', '|'];

/// Whitespace as C's `isspace` in the "C" locale sees it, which is what
/// ESP-Claw's `trim_whitespace` strips. Unlike [`str::trim`] this leaves
/// non-ASCII spaces (such as U+3000) alone. All of it is ASCII, so a byte
/// of UTF-8 that is C whitespace is a whole character: the trims below
/// look at bytes.
fn is_c_space(b: u8) -> bool {
    matches!(b, b' ' | b'\t' | b'\n' | 0x0B | 0x0C | b'\r')
}

/// Strips C whitespace from both ends.
#[inline(never)]
pub(crate) fn trim_c(s: &str) -> &str {
    let start = s.bytes().take_while(|&b| is_c_space(b)).count();
    // A cut after ASCII bytes is on a character boundary.
    trim_end_c(s.get(start..).unwrap_or(s))
}

/// Strips C whitespace from the end.
#[inline(never)]
pub(crate) fn trim_end_c(s: &str) -> &str {
    // Just past the last byte that is not C whitespace.
    let end = s
        .bytes()
        .rposition(|b| !is_c_space(b))
        .map_or(0, |last| last + 1);
    // A cut before ASCII bytes is on a character boundary.
    s.get(..end).unwrap_or(s)
}

/// The longest prefix of `s` that is at most `max_bytes` long and ends on a
/// character boundary (the crate's one implementation,
/// [`crate::text::utf8_prefix`]).
pub use crate::text::utf8_prefix as cut_utf8;

/// The prefix of `s` holding at most `max_chars` characters (code points).
pub(crate) fn cut_chars(s: &str, max_chars: usize) -> &str {
    // Counted by the bytes that start a character (no char decoding).
    let mut chars = 0;
    for (end, b) in s.bytes().enumerate() {
        if b & 0xC0 != 0x80 {
            if chars == max_chars {
                return s.get(..end).unwrap_or(s);
            }
            chars += 1;
        }
    }
    s
}

/// Copies `s` into a fixed-capacity string, cut on a character boundary to
/// fit.
pub(crate) fn to_fixed<const N: usize>(s: &str) -> heapless::String<N> {
    let mut out = heapless::String::new();
    fill_cut(out.as_mut_view(), s);
    out
}

/// Appends `s` (cut to fit) as a new label of `labels`, built in place:
/// `false` if `labels` is full. Compiled once for every list capacity.
#[inline(never)]
pub(crate) fn push_label(
    labels: &mut heapless::vec::VecView<heapless::String<LABEL_MAX_BYTES>>,
    s: &str,
) -> bool {
    if labels.push(heapless::String::new()).is_err() {
        return false;
    }
    if let Some(label) = labels.last_mut() {
        fill_cut(label.as_mut_view(), s);
    }
    true
}

/// Replaces the text of `out` with `s` (which fits its capacity), compiled
/// once for every capacity.
pub(crate) fn copy_text(out: &mut heapless::string::StringView, s: &str) {
    out.clear();
    fill_cut(out, s);
}

/// The body of [`to_fixed`], compiled once for every capacity.
fn fill_cut(out: &mut heapless::string::StringView, s: &str) {
    // Cannot fail: the cut fits the capacity.
    let _ = out.push_str(cut_utf8(s, out.capacity()));
}

/// The non-empty, trimmed terms of a tags/keywords list, in order.
/// Consecutive separators yield no empty terms (like `strtok_r`).
#[inline(never)]
pub(crate) fn terms(list: &str) -> impl Iterator<Item = &str> {
    list.split(TERM_SEPARATORS)
        .map(trim_c)
        .filter(|t| !t.is_empty())
}

/// Whether `term` is one of the terms of `list` (exact, case-sensitive:
/// ESP-Claw's `claw_memory_csv_contains_term`).
pub(crate) fn list_contains_term(list: &str, term: &str) -> bool {
    terms(list).any(|t| t == term)
}

/// Whether the two lists share a term (`claw_memory_csv_has_overlap`).
pub(crate) fn lists_overlap(a: &str, b: &str) -> bool {
    terms(a).any(|t| list_contains_term(b, t))
}

/// How [`find_bytes`] compares: byte for byte.
pub(crate) const EXACT: u8 = 0;
/// How [`find_bytes`] compares: the haystack's ASCII letters lowercased.
pub(crate) const LOWER_HAYSTACK: u8 = 1;
/// How [`find_bytes`] compares: ASCII letters without case on both sides.
pub(crate) const IGNORE_CASE: u8 = 2;

/// The first offset at which `needle` occurs in `haystack`, compared as
/// `how` says ([`EXACT`], [`LOWER_HAYSTACK`], [`IGNORE_CASE`]); `None` for
/// an empty needle. A plain window search (the texts are short; this keeps
/// the two-way searcher out of the firmware), the one of every search.
#[inline(never)]
pub(crate) fn find_bytes(haystack: &str, needle: &str, how: u8) -> Option<usize> {
    let n = needle.as_bytes();
    if n.is_empty() {
        return None;
    }
    // No window (and so no offset) when the needle is the longer.
    haystack.as_bytes().windows(n.len()).position(|w| {
        w.iter().zip(n).all(|(&a, &b)| {
            let a = if how == EXACT {
                a
            } else {
                a.to_ascii_lowercase()
            };
            let b = if how == IGNORE_CASE {
                b.to_ascii_lowercase()
            } else {
                b
            };
            a == b
        })
    })
}

/// Whether `needle` occurs in `haystack`, as `str::contains` answers it.
#[inline(always)]
pub(crate) fn contains_str(haystack: &str, needle: &str) -> bool {
    needle.is_empty() || find_bytes(haystack, needle, EXACT).is_some()
}

/// Whether `needle` occurs in `haystack`, ASCII letters compared without
/// case (ESP-Claw's `text_contains_token`: `strstr` or
/// `text_contains_ascii_ci`). An empty needle never occurs.
#[inline(always)]
pub(crate) fn contains_ascii_ci(haystack: &str, needle: &str) -> bool {
    find_bytes(haystack, needle, IGNORE_CASE).is_some()
}

/// Normalizes a text for duplicate detection, as ESP-Claw's
/// `normalize_text_for_key` does: ASCII letters are lowercased and kept,
/// ASCII digits kept, every other ASCII character (spaces, punctuation,
/// controls) dropped; non-ASCII characters are kept except the CJK and
/// full-width punctuation of [`KEY_DROPPED_PUNCTUATION`]. The result ends
/// before the first kept character that would take it past
/// [`SEMANTIC_MATCH_BYTES`] bytes, as ESP-Claw's `normalize_text_for_key`
/// into a 160-byte buffer ends (so always on a character boundary).
pub fn normalize_for_key(text: &str) -> NormalizedText {
    let mut out = NormalizedText::new();
    for c in text.chars() {
        let keep = if c.is_ascii() {
            c.is_ascii_alphanumeric()
        } else {
            !KEY_DROPPED_PUNCTUATION.contains(&c)
        };
        if keep && out.push(c.to_ascii_lowercase()).is_err() {
            break;
        }
    }
    out
}

/// The dedup key of a content: its normalized form (see
/// [`normalize_for_key`]) cut to the first [`KEY_MAX_BYTES`] bytes on a
/// character boundary (`claw_memory_build_item_key`). Empty when the content
/// has nothing but punctuation and spaces; an empty key never matches
/// anything (ESP-Claw substitutes `memory-<now>`, which collides for two such
/// items stored in the same second).
pub fn item_key(content: &str) -> ItemKey {
    key_of_normalized(&normalize_for_key(content))
}

/// The key of an already normalized text.
pub(crate) fn key_of_normalized(normalized: &str) -> ItemKey {
    to_fixed(normalized)
}

#[cfg(test)]
mod tests {
    extern crate std;
    use std::vec::Vec;

    use super::*;

    #[test]
    fn cut_chars_counts_code_points() {
        assert_eq!(cut_chars("dietary_preferences", 8), "dietary_");
        assert_eq!(cut_chars("饮食偏好与禁忌清单详情", 8), "饮食偏好与禁忌清");
        assert_eq!(cut_chars("ab", 8), "ab");
        assert_eq!(cut_chars("ab", 0), "");
        // The cut is where the character after the first `n` starts.
        for s in ["", "a", "é中a𝄞b", "𝄞𝄞", "a\u{301}b"] {
            for n in 0..7 {
                let end = s.char_indices().nth(n).map_or(s.len(), |(i, _)| i);
                assert_eq!(cut_chars(s, n), &s[..end], "{s} {n}");
            }
        }
    }

    #[test]
    fn trim_uses_c_whitespace_only() {
        assert_eq!(trim_c(" \t\n\u{0B}\u{0C}\r x y \r\n"), "x y");
        // U+3000 is not C whitespace: ESP-Claw keeps it.
        assert_eq!(trim_c("\u{3000}x"), "\u{3000}x");
    }

    #[test]
    fn byte_trims_strip_what_char_trims_strip() {
        let c_space = |c: char| matches!(c, ' ' | '\t' | '\n' | '\u{0B}' | '\u{0C}' | '\r');
        for s in [
            "",
            " ",
            "\t\r\n\u{0B}\u{0C}",
            "x",
            " x y ",
            "\u{3000} x \u{3000}",
            " 中 ",
            "é\u{0B}",
            "\u{0C}é",
            " \u{85}\u{A0} ",
        ] {
            assert_eq!(trim_c(s), s.trim_matches(c_space), "{s:?}");
            assert_eq!(trim_end_c(s), s.trim_end_matches(c_space), "{s:?}");
        }
    }

    #[test]
    fn find_bytes_compares_as_asked() {
        assert_eq!(find_bytes("a Tea tea", "tea", EXACT), Some(6));
        assert_eq!(find_bytes("a Tea tea", "tea", LOWER_HAYSTACK), Some(2));
        assert_eq!(find_bytes("a Tea tea", "TEA", LOWER_HAYSTACK), None);
        assert_eq!(find_bytes("a Tea tea", "TEA", IGNORE_CASE), Some(2));
        assert_eq!(find_bytes("tea", "teas", IGNORE_CASE), None);
        assert_eq!(find_bytes("tea", "", EXACT), None);
        assert!(contains_str("tea", "") && contains_str("绿茶x", "茶x"));
        assert!(!contains_str("Tea", "tea"));
    }

    #[test]
    fn terms_split_on_all_separators_and_skip_empties() {
        let got: Vec<&str> = terms(" a, b;c /d|| e ,,").collect();
        assert_eq!(got, ["a", "b", "c", "d", "e"]);
        assert_eq!(terms(" , ; ").count(), 0);
        assert!(list_contains_term("x, y", "y"));
        assert!(!list_contains_term("x, y", "Y"));
        assert!(lists_overlap("a,b", "c;b"));
        assert!(!lists_overlap("a,b", "c;d"));
    }

    #[test]
    fn contains_is_ascii_case_insensitive() {
        assert!(contains_ascii_ci("I drink Green Tea", "green tea"));
        assert!(contains_ascii_ci("喜欢绿茶", "绿茶"));
        assert!(!contains_ascii_ci("tea", "teas"));
        assert!(!contains_ascii_ci("tea", ""));
    }

    #[test]
    fn normalization_drops_ascii_and_cjk_punctuation() {
        assert_eq!(normalize_for_key("Hello, World! 42_x"), "helloworld42x");
        assert_eq!(
            normalize_for_key("用户喜欢：绿茶（不加糖）。“真的”…"),
            "用户喜欢绿茶不加糖真的"
        );
        // Full-width punctuation outside ESP-Claw's list is kept, as there.
        assert_eq!(normalize_for_key("a＃b"), "a＃b");
        // Non-ASCII letters are not lowercased (ESP-Claw only lowercases ASCII).
        assert_eq!(normalize_for_key("ÉCOLE"), "École");
    }

    #[test]
    fn key_is_36_bytes_on_a_char_boundary() {
        let ascii = "The quick brown fox jumps over the lazy dog, twice!";
        let key = item_key(ascii);
        assert_eq!(key.as_str(), "thequickbrownfoxjumpsoverthelazydogt");
        assert_eq!(key.len(), 36);
        // 13 CJK characters are 39 bytes: the key keeps 12 (36 bytes).
        let cjk = "一二三四五六七八九十百千万";
        assert_eq!(item_key(cjk).as_str(), "一二三四五六七八九十百千");
        // 'a' + 12 CJK = 37 bytes: the 12th CJK char would end at byte 37.
        let mixed = "a一二三四五六七八九十百千";
        assert_eq!(item_key(mixed).as_str(), "a一二三四五六七八九十百");
        assert_eq!(item_key("!!! ，。").as_str(), "");
    }
}
