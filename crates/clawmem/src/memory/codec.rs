//! The byte encoding of an [`Item`], which the storage layer persists as a
//! record payload. This file owns the layout; the storage layer owns the
//! framing and CRC around it.
//!
//! [`Item::encode`] writes version 2; [`Item::decode`] reads versions 1
//! and 2. All integers are little-endian, with no padding. Both versions
//! begin with the version byte, a flags byte and the id (bytes 2..6), which
//! the storage layer reads in place.
//!
//! Version 2 leaves out what the other fields already hold:
//!
//! ```text
//! offset size field
//!      0    1 version          = 2
//!      1    1 flags            bit 0 updated_at present (else = created_at)
//!                              bit 1 access_count present (else 0)
//!                              bits 2-3 source: 0 written out, 1 "auto_llm",
//!                              2 "manual" (3 is invalid)
//!                              bits 4-5 keyword pieces (0..=3)
//!                              bit 6 keywords written out whole
//!                              bit 7 zero
//!      2    4 id               u32
//!      6    4 created_at       u32 seconds
//!      .    4 updated_at       u32, if flags bit 0
//!      .    2 access_count     u16, if flags bit 1
//!      .    . source           u8 len (1..=16) + UTF-8, if source code 0
//!      .    1 content_len - 1  u8 (content is 1..=256 bytes)
//!      .    . content          UTF-8
//!      .    1 tags_len         u8, <= 96
//!      .    . tags             UTF-8
//!      .    1 label_count      <= 3
//!      .    . keywords         whole: u8 len (<= 128) + UTF-8;
//!                              else one reference per piece (the list
//!                              split on ','):
//!                                0x00..=0x7E  a literal of that many bytes
//!                                0x80 + i     tag term i (i < 3)
//!                                0xC0 off len the content's bytes off..off+len
//!                                0xC1 off len the same, ASCII lowercased
//!      .    . labels           label_count references:
//!                                i << 6 | len  the first len bytes (1..=32)
//!                                              of tag term i (i < 3)
//!                                0xC0 | len    a literal of len bytes
//! ```
//!
//! A tag term is a term of the tags list as [`terms`] splits it, which is
//! how labels are derived from tags; a label is always a prefix of one, so
//! it costs one byte. Keywords are grounded in the content or the tags, so
//! they are mostly references. The encoder's choices are fixed: the first
//! tag term that fits, else the first exact occurrence in the content (3
//! bytes or longer), else the first lowercased one, else a literal; the
//! keywords are written whole only if some piece is longer than 126 bytes
//! or there are more than three pieces.
//!
//! Version 1 (read only): version 1, flags 0, id u32, created_at u32,
//! updated_at u32, access_count u16, source_len u8, content_len u16,
//! tags_len u8, keywords_len u8, label_count u8, then source, content,
//! tags, keywords and each label as u8 len + bytes.
//!
//! The payload ends exactly after the last field: trailing bytes are an
//! error. [`Item::decode`] never panics and accepts only byte strings that
//! an encoder of that version produces from an item satisfying the item
//! invariants (non-empty trimmed content, non-empty source, unique
//! non-empty labels): a version 2 payload must be exactly what
//! [`Item::encode`] writes for the item it decodes to, so a record that
//! passes its CRC but was written by a buggy or foreign encoder is still
//! caught. A format change bumps the version byte.

use core::fmt;

use super::item::{Item, ItemId, Label};
use heapless::string::StringView;

use super::text::{copy_text, find_bytes, push_label, terms, trim_c, EXACT, LOWER_HAYSTACK};
use super::{
    CONTENT_MAX_BYTES, KEYWORDS_MAX_BYTES, LABEL_MAX_BYTES, MAX_SUMMARY_LABELS, SOURCE_MAX_BYTES,
    TAGS_MAX_BYTES,
};
use super::{SOURCE_AUTO_LLM, SOURCE_MANUAL};

/// The encoding version written by [`Item::encode`].
pub const ITEM_FORMAT_VERSION: u8 = 2;

/// Size of the fixed header of a version 1 item, the largest fixed part of
/// any version.
pub const ITEM_HEADER_BYTES: usize = 22;

/// The largest encoded item: a buffer of this size always suffices for
/// [`Item::encode`].
pub const ITEM_ENCODED_MAX_BYTES: usize = ITEM_HEADER_BYTES
    + SOURCE_MAX_BYTES
    + CONTENT_MAX_BYTES
    + TAGS_MAX_BYTES
    + KEYWORDS_MAX_BYTES
    + MAX_SUMMARY_LABELS * (1 + LABEL_MAX_BYTES);

// The length fields are wide enough for their capacities.
const _: () = assert!(SOURCE_MAX_BYTES <= u8::MAX as usize);
const _: () = assert!(CONTENT_MAX_BYTES <= u16::MAX as usize);
const _: () = assert!(TAGS_MAX_BYTES <= u8::MAX as usize);
const _: () = assert!(KEYWORDS_MAX_BYTES <= u8::MAX as usize);
const _: () = assert!(LABEL_MAX_BYTES <= u8::MAX as usize);
const _: () = assert!(MAX_SUMMARY_LABELS <= u8::MAX as usize);

/// A field of an encoded item, named in [`DecodeError`]s.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ItemField {
    /// The source.
    Source,
    /// The content.
    Content,
    /// The tags list.
    Tags,
    /// The keywords list.
    Keywords,
    /// A summary label.
    Label,
}

impl fmt::Display for ItemField {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Self::Source => "source",
            Self::Content => "content",
            Self::Tags => "tags",
            Self::Keywords => "keywords",
            Self::Label => "label",
        })
    }
}

/// Why [`Item::encode`] failed (the crate's one encoder error).
pub use crate::error::EncodeError;

/// Why bytes are not a valid encoded item.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum DecodeError {
    /// The bytes end before the item does.
    Truncated,
    /// Written by an encoding version this build does not know.
    UnsupportedVersion(u8),
    /// The reserved flags byte is not zero.
    ReservedFlags(u8),
    /// A length field exceeds the field's capacity.
    TooLong(ItemField),
    /// More than [`MAX_SUMMARY_LABELS`] labels.
    TooManyLabels(u8),
    /// A field is not valid UTF-8.
    InvalidUtf8(ItemField),
    /// A field that must not be empty is empty (content, source, label).
    Empty(ItemField),
    /// The content has leading or trailing whitespace.
    UntrimmedContent,
    /// The same label appears twice.
    DuplicateLabel,
    /// Bytes follow the last field.
    TrailingBytes,
    /// A reference of a version 2 item names bytes that are not there
    /// (a tag term or a part of the content it does not have).
    BadReference(ItemField),
    /// A version 2 item is not written as the encoder writes its fields
    /// (another choice of references, flags, or a field left out).
    NotCanonical,
}

impl fmt::Display for DecodeError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Truncated => f.write_str("memory item record is truncated"),
            Self::UnsupportedVersion(v) => {
                write!(f, "memory item record has unsupported format version {v}")
            }
            Self::ReservedFlags(b) => {
                write!(f, "memory item record has reserved flags set ({b:#04x})")
            }
            Self::TooLong(field) => write!(f, "memory item {field} is longer than its capacity"),
            Self::TooManyLabels(n) => write!(f, "memory item has {n} labels (at most 3)"),
            Self::InvalidUtf8(field) => write!(f, "memory item {field} is not valid UTF-8"),
            Self::Empty(field) => write!(f, "memory item {field} is empty"),
            Self::UntrimmedContent => f.write_str("memory item content is not trimmed"),
            Self::DuplicateLabel => f.write_str("memory item repeats a label"),
            Self::TrailingBytes => f.write_str("memory item record has trailing bytes"),
            Self::BadReference(field) => {
                write!(
                    f,
                    "memory item {field} refers to bytes the item does not hold"
                )
            }
            Self::NotCanonical => {
                f.write_str("memory item record is not encoded as this format writes it")
            }
        }
    }
}

/// Where [`Item::emit`] sends the bytes: it counts them, writes them, or
/// compares them with a payload being decoded (one function for all three,
/// so the layout is written down once).
enum Dst<'a> {
    Count,
    Write(&'a mut [u8]),
    Compare(&'a [u8]),
}

struct Sink<'a> {
    dst: Dst<'a>,
    pos: usize,
    /// Every byte so far matched (compare mode).
    same: bool,
}

impl Sink<'_> {
    fn put(&mut self, bytes: &[u8]) {
        let end = self.pos.saturating_add(bytes.len());
        match &mut self.dst {
            Dst::Count => {}
            Dst::Write(buf) => {
                if let Some(dst) = buf.get_mut(self.pos..end) {
                    dst.copy_from_slice(bytes);
                }
            }
            Dst::Compare(have) => {
                if have.get(self.pos..end) != Some(bytes) {
                    self.same = false;
                }
            }
        }
        self.pos = end;
    }

    fn byte(&mut self, b: u8) {
        self.put(&[b]);
    }

    /// The byte `head` (a length or a marker), then `bytes` (compiled once
    /// for every such field).
    #[inline(never)]
    fn field(&mut self, head: u8, bytes: &[u8]) {
        self.byte(head);
        self.put(bytes);
    }
}

/// Reads fields from untrusted bytes.
struct Reader<'a> {
    bytes: &'a [u8],
    pos: usize,
}

impl<'a> Reader<'a> {
    fn take(&mut self, len: usize) -> Result<&'a [u8], DecodeError> {
        let end = self.pos.checked_add(len).ok_or(DecodeError::Truncated)?;
        let out = self
            .bytes
            .get(self.pos..end)
            .ok_or(DecodeError::Truncated)?;
        self.pos = end;
        Ok(out)
    }

    fn u8(&mut self) -> Result<u8, DecodeError> {
        Ok(self.take(1)?[0])
    }

    fn u32(&mut self) -> Result<u32, DecodeError> {
        let b = self.take(4)?;
        Ok(u32::from_le_bytes([b[0], b[1], b[2], b[3]]))
    }

    fn str(&mut self, len: usize, field: ItemField) -> Result<&'a str, DecodeError> {
        core::str::from_utf8(self.take(len)?).map_err(|_| DecodeError::InvalidUtf8(field))
    }

    /// One text field into `out` (a view: compiled once for every
    /// capacity).
    fn text(
        &mut self,
        out: &mut heapless::string::StringView,
        len: usize,
        field: ItemField,
    ) -> Result<(), DecodeError> {
        let text = self.str(len, field)?;
        out.clear();
        out.push_str(text).map_err(|_| DecodeError::TooLong(field))
    }
}

fn check_len(len: usize, max: usize, field: ItemField) -> Result<usize, DecodeError> {
    if len > max {
        Err(DecodeError::TooLong(field))
    } else {
        Ok(len)
    }
}

/// Flags of a version 2 item.
const F_UPDATED: u8 = 1;
const F_ACCESS: u8 = 2;
const F_SOURCE_SHIFT: u8 = 2;
const F_PIECES_SHIFT: u8 = 4;
const F_KEYWORDS_WHOLE: u8 = 0x40;
/// Source codes of a version 2 item.
const SOURCE_CODES: [&str; 2] = [SOURCE_AUTO_LLM, SOURCE_MANUAL];
/// Keyword references of a version 2 item.
const KW_LITERAL_MAX: usize = 0x7E;
const KW_TAG: u8 = 0x80;
const KW_CONTENT: u8 = 0xC0;
const KW_CONTENT_LOWER: u8 = 0xC1;
/// A label reference's literal marker.
const LABEL_LITERAL: u8 = 0xC0;
/// Pieces of the keywords list referenced one by one, at most.
const PIECES_MAX: usize = 3;
/// Tag terms a reference can name.
const TAG_REFS: usize = 3;
/// The shortest keyword piece worth a content reference.
const CONTENT_REF_MIN: usize = 3;

/// The separator of the keywords' pieces, as the `[char; 4]` pattern that
/// [`terms`] splits on: `split(COMMA)` is `split(',')` with the searcher
/// `terms` already compiles (a `char` pattern would add one of its own).
const COMMA: [char; 4] = [','; 4];

/// The tag term `i` of `tags`, if it is one of the first [`TAG_REFS`].
fn tag_term(tags: &str, i: usize) -> Option<&str> {
    if i < TAG_REFS {
        terms(tags).nth(i)
    } else {
        None
    }
}

fn push_keywords(out: &mut StringView, s: &str) -> Result<(), DecodeError> {
    out.push_str(s)
        .map_err(|_| DecodeError::TooLong(ItemField::Keywords))
}

/// One keyword piece of a version 2 item, appended to `out`: the text a
/// reference names, pushed once (a lowercased content reference is then
/// lowercased in place, which keeps every length).
fn decode_piece(
    r: &mut Reader<'_>,
    content: &str,
    tags: &str,
    out: &mut StringView,
) -> Result<(), DecodeError> {
    let b = r.u8()?;
    let bad = DecodeError::BadReference(ItemField::Keywords);
    let text = if usize::from(b) <= KW_LITERAL_MAX {
        r.str(usize::from(b), ItemField::Keywords)?
    } else if (KW_TAG..KW_TAG + TAG_REFS as u8).contains(&b) {
        tag_term(tags, usize::from(b - KW_TAG)).ok_or(bad)?
    } else if b == KW_CONTENT || b == KW_CONTENT_LOWER {
        let at = usize::from(r.u8()?);
        let len = usize::from(r.u8()?);
        content.get(at..at + len).ok_or(bad)?
    } else {
        return Err(bad);
    };
    let start = out.len();
    push_keywords(out, text)?;
    if b == KW_CONTENT_LOWER {
        if let Some(pushed) = out.as_mut_str().get_mut(start..) {
            pushed.make_ascii_lowercase();
        }
    }
    Ok(())
}

impl Item {
    /// The length of this item's encoding, at most
    /// [`ITEM_ENCODED_MAX_BYTES`].
    pub fn encoded_len(&self) -> usize {
        let mut sink = Sink {
            dst: Dst::Count,
            pos: 0,
            same: true,
        };
        self.emit(&mut sink);
        sink.pos
    }

    /// Encodes the item into the start of `buf` and returns the number of
    /// bytes written. Fails only if `buf` is shorter than
    /// [`Item::encoded_len`]; then `buf` is left untouched.
    pub fn encode(&self, buf: &mut [u8]) -> Result<usize, EncodeError> {
        let needed = self.encoded_len();
        if buf.len() < needed {
            return Err(EncodeError::BufferTooSmall { needed });
        }
        Ok(self.encode_fitting(buf))
    }

    /// [`Item::encode`] into a `buf` the caller knows holds
    /// [`Item::encoded_len`] bytes (the store's put, whose buffer holds the
    /// largest item): writes the bytes that fit (all of them) and returns
    /// the encoding's length.
    pub(crate) fn encode_fitting(&self, buf: &mut [u8]) -> usize {
        let mut sink = Sink {
            dst: Dst::Write(buf),
            pos: 0,
            same: true,
        };
        self.emit(&mut sink);
        sink.pos
    }

    /// Whether `bytes` is exactly this item's version 2 encoding.
    fn encodes_to(&self, bytes: &[u8]) -> bool {
        let mut sink = Sink {
            dst: Dst::Compare(bytes),
            pos: 0,
            same: true,
        };
        self.emit(&mut sink);
        sink.same && sink.pos == bytes.len()
    }

    /// The version 2 layout (module docs), into `w`.
    #[inline(never)]
    fn emit(&self, w: &mut Sink<'_>) {
        let tags: &str = &self.tags;
        let keywords: &str = &self.keywords;
        let source = SOURCE_CODES
            .iter()
            .position(|&c| c == self.source.as_str())
            .map_or(0, |k| k as u8 + 1);
        // The keywords' pieces (none for an empty list: else one more than
        // its commas) and the longest, counted over the bytes (no second
        // splitter beside the one that emits them).
        let (mut pieces, mut longest, mut run) = (0, 0, 0);
        if !keywords.is_empty() {
            pieces = 1;
            for &b in keywords.as_bytes() {
                if b == b',' {
                    pieces += 1;
                    run = 0;
                } else {
                    run += 1;
                    longest = longest.max(run);
                }
            }
        }
        let whole = pieces > PIECES_MAX || longest > KW_LITERAL_MAX;
        let mut flags = source << F_SOURCE_SHIFT;
        if self.updated_at != self.created_at {
            flags |= F_UPDATED;
        }
        if self.access_count != 0 {
            flags |= F_ACCESS;
        }
        if whole {
            flags |= F_KEYWORDS_WHOLE;
        } else {
            flags |= (pieces as u8) << F_PIECES_SHIFT;
        }
        // The `as` casts below cannot truncate: the const assertions above
        // bound every capacity by its length field.
        w.put(&[ITEM_FORMAT_VERSION, flags]);
        w.put(&self.id.get().to_le_bytes());
        w.put(&self.created_at.to_le_bytes());
        if flags & F_UPDATED != 0 {
            w.put(&self.updated_at.to_le_bytes());
        }
        if flags & F_ACCESS != 0 {
            w.put(&self.access_count.to_le_bytes());
        }
        if source == 0 {
            w.field(self.source.len() as u8, self.source.as_bytes());
        }
        w.field(
            self.content.len().saturating_sub(1) as u8,
            self.content.as_bytes(),
        );
        w.field(tags.len() as u8, tags.as_bytes());
        w.byte(self.labels.len() as u8);
        if whole {
            w.field(keywords.len() as u8, keywords.as_bytes());
        } else if pieces > 0 {
            for piece in keywords.split(COMMA) {
                self.emit_piece(w, piece);
            }
        }
        for label in &self.labels {
            let tag = (0..TAG_REFS).find(|&i| {
                tag_term(tags, i).is_some_and(|t| t.as_bytes().starts_with(label.as_bytes()))
            });
            match tag {
                Some(i) => w.byte((i as u8) << 6 | label.len() as u8),
                None => w.field(LABEL_LITERAL | label.len() as u8, label.as_bytes()),
            }
        }
    }

    /// One piece of the keywords list: a tag term, a part of the content,
    /// or a literal (module docs).
    fn emit_piece(&self, w: &mut Sink<'_>, piece: &str) {
        if let Some(i) = (0..TAG_REFS).find(|&i| tag_term(&self.tags, i) == Some(piece)) {
            return w.byte(KW_TAG + i as u8);
        }
        if piece.len() >= CONTENT_REF_MIN {
            for (marker, how) in [(KW_CONTENT, EXACT), (KW_CONTENT_LOWER, LOWER_HAYSTACK)] {
                if let Some(at) = find_bytes(&self.content, piece, how) {
                    return w.put(&[marker, at as u8, piece.len() as u8]);
                }
            }
        }
        w.field(piece.len() as u8, piece.as_bytes());
    }

    /// Decodes an item written by [`Item::encode`] (or by version 1),
    /// validating every byte. Returns an error (never panics) for any other
    /// input.
    pub fn decode(bytes: &[u8]) -> Result<Self, DecodeError> {
        let mut item = Item::empty();
        item.decode_from(bytes)?;
        Ok(item)
    }

    /// [`Item::decode`] into `self`, in place (no second item on the
    /// stack). On an error `self` holds some of the fields read; it is a
    /// valid value but not a meaningful item.
    ///
    /// One reader for both versions: a version 1 header is a version 2
    /// one with flags 0 that holds updated_at and access_count, followed
    /// by the four text lengths; each field is `Truncated` if the bytes end
    /// before it, checked in field order.
    #[inline(never)]
    pub fn decode_from(&mut self, bytes: &[u8]) -> Result<(), DecodeError> {
        let v1 = match bytes.first() {
            None => return Err(DecodeError::Truncated),
            Some(1) => true,
            Some(2) => false,
            Some(&v) => return Err(DecodeError::UnsupportedVersion(v)),
        };
        let mut r = Reader { bytes, pos: 1 };
        let flags = r.u8()?;
        // Version 1 has no flags; version 2 reserves bit 7.
        if flags & if v1 { 0xFF } else { 0x80 } != 0 {
            return Err(DecodeError::ReservedFlags(flags));
        }
        // Version 1 as the version 2 flags that read it: updated_at and
        // access_count present, the keywords whole, the source written out.
        let flags = if v1 {
            F_UPDATED | F_ACCESS | F_KEYWORDS_WHOLE
        } else {
            flags
        };
        self.id = ItemId::new(r.u32()?);
        self.created_at = r.u32()?;
        self.updated_at = if flags & F_UPDATED != 0 {
            r.u32()?
        } else {
            self.created_at
        };
        self.access_count = if flags & F_ACCESS != 0 {
            let b = r.take(2)?;
            u16::from_le_bytes([b[0], b[1]])
        } else {
            0
        };
        // Version 1: the lengths of source, content, tags and keywords.
        // (Each checked against its capacity, which the const assertions
        // above bound by its length field: `u16`s.)
        let mut lens = [0u16; 4];
        if v1 {
            for (k, (len, &(max, field))) in lens.iter_mut().zip(&V1_TEXTS).enumerate() {
                // The content's length is a u16, the others a u8.
                let mut n = usize::from(r.u8()?);
                if k == 1 {
                    n |= usize::from(r.u8()?) << 8;
                }
                *len = check_len(n, max, field)? as u16;
            }
        }
        // The four texts in one loop, in field order: version 1 reads the
        // label count before them and each text by its length above;
        // version 2 reads the label count before the keywords, each text
        // after its own length (the content's is one less), a coded
        // source by name and referenced keywords below.
        let whole = flags & F_KEYWORDS_WHOLE != 0;
        let mut label_count = 0;
        for k in 0..4 {
            let (max, field) = V1_TEXTS[k];
            if k == if v1 { 0 } else { 3 } {
                label_count = r.u8()?;
                if usize::from(label_count) > MAX_SUMMARY_LABELS {
                    return Err(DecodeError::TooManyLabels(label_count));
                }
            }
            let code = (flags >> F_SOURCE_SHIFT) & 3;
            let out = self.text_mut(k);
            if k == 0 && code != 0 {
                let name = SOURCE_CODES
                    .get(usize::from(code) - 1)
                    .ok_or(DecodeError::ReservedFlags(flags))?;
                copy_text(out, name);
            } else if k == 3 && !whole {
                out.clear();
            } else {
                // Version 2: a u8 length before the text (the content's one
                // less: 1..=256 bytes, never longer than it can be).
                let len = if v1 {
                    usize::from(lens[k])
                } else {
                    check_len(usize::from(r.u8()?) + usize::from(k == 1), max, field)?
                };
                r.text(out, len, field)?;
            }
        }
        if !whole {
            let pieces = (flags >> F_PIECES_SHIFT) & 3;
            for k in 0..pieces {
                let out = self.keywords.as_mut_view();
                if k > 0 {
                    push_keywords(out, ",")?;
                }
                decode_piece(&mut r, &self.content, &self.tags, out)?;
            }
        }
        self.labels.clear();
        for _ in 0..label_count {
            let b = r.u8()?;
            // Version 1: u8 len + bytes; version 2: a reference.
            let text = if v1 || b & 0xC0 == LABEL_LITERAL {
                let len = usize::from(if v1 { b } else { b & 0x3F });
                r.str(
                    check_len(len, LABEL_MAX_BYTES, ItemField::Label)?,
                    ItemField::Label,
                )?
            } else {
                tag_term(&self.tags, usize::from(b >> 6))
                    .and_then(|t| t.get(..usize::from(b & 0x3F)))
                    .ok_or(DecodeError::BadReference(ItemField::Label))?
            };
            if text.len() > LABEL_MAX_BYTES {
                return Err(DecodeError::TooLong(ItemField::Label));
            }
            if !push_label(self.labels.as_mut_view(), text) {
                return Err(DecodeError::TooManyLabels(label_count));
            }
            // Version 1 checks each label as it reads it (the ones before
            // passed already).
            if v1 {
                check_labels(&self.labels)?;
            }
        }
        if r.pos != bytes.len() {
            return Err(DecodeError::TrailingBytes);
        }
        self.check_invariants()?;
        if !v1 && !self.encodes_to(bytes) {
            return Err(DecodeError::NotCanonical);
        }
        Ok(())
    }

    /// The text field `k` in [`V1_TEXTS`]' order (source, content, tags,
    /// keywords), as a view: one decode step for all four.
    #[inline(never)]
    fn text_mut(&mut self, k: usize) -> &mut StringView {
        match k {
            0 => self.source.as_mut_view(),
            1 => self.content.as_mut_view(),
            2 => self.tags.as_mut_view(),
            _ => self.keywords.as_mut_view(),
        }
    }

    /// The item invariants every version checks last.
    fn check_invariants(&self) -> Result<(), DecodeError> {
        if self.source.is_empty() {
            return Err(DecodeError::Empty(ItemField::Source));
        }
        if self.content.is_empty() {
            return Err(DecodeError::Empty(ItemField::Content));
        }
        if trim_c(&self.content).len() != self.content.len() {
            return Err(DecodeError::UntrimmedContent);
        }
        check_labels(&self.labels)
    }
}

/// The labels are non-empty and unique (an item invariant), checked in
/// order.
#[inline(never)]
fn check_labels(labels: &[Label]) -> Result<(), DecodeError> {
    for k in 0..labels.len() {
        let (before, rest) = labels.split_at(k);
        let Some(label) = rest.first() else { break };
        if label.is_empty() {
            return Err(DecodeError::Empty(ItemField::Label));
        }
        if before.contains(label) {
            return Err(DecodeError::DuplicateLabel);
        }
    }
    Ok(())
}

/// The capacities and names of an item's four texts, in the order both
/// versions write them (a version 1 header's lengths, the texts of either).
const V1_TEXTS: [(usize, ItemField); 4] = [
    (SOURCE_MAX_BYTES, ItemField::Source),
    (CONTENT_MAX_BYTES, ItemField::Content),
    (TAGS_MAX_BYTES, ItemField::Tags),
    (KEYWORDS_MAX_BYTES, ItemField::Keywords),
];

#[cfg(test)]
mod tests;
