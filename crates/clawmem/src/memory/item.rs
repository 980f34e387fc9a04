//! One long-term memory item and the store rules that build it.
//!
//! An [`Item`] is fixed-size (no heap): content, tags, keywords, source and
//! up to [`MAX_SUMMARY_LABELS`] summary labels live in `heapless` strings.
//! Its fields are private so that every item in existence satisfies the
//! store rules: [`Item::new`] is the only way to build one from user input
//! (and [`Item::decode`](super::Item::decode) re-checks the invariants of an
//! item read back from flash).
//!
//! Invariants of every `Item`:
//! - `content` is non-empty, has no leading/trailing C whitespace and is at
//!   most [`CONTENT_MAX_BYTES`] bytes; every field is valid UTF-8 and was cut
//!   on a character boundary. An item built here keeps what ESP-Claw's C
//!   arrays hold beside their NUL: content [`CONTENT_KEPT_BYTES`] (255),
//!   tags [`TAGS_KEPT_BYTES`] (95), keywords [`KEYWORDS_KEPT_BYTES`] (127),
//!   source [`SOURCE_KEPT_BYTES`] (15); an item decoded from an image
//!   written before that rule may fill the capacities.
//! - `tags` and `keywords` are comma-joined, unique, trimmed terms, at most
//!   [`MAX_TERMS`] each; `source` is non-empty.
//! - `labels` are non-empty, unique, at most [`LABEL_MAX_BYTES`] bytes each.
//!
//! The rules follow ESP-Claw's `claw_memory_store_prepared_item_internal`
//! (`components/claw_modules/claw_memory/src/claw_memory.c`),
//! `claw_memory_normalize_item_metadata` and
//! `claw_memory_collect_summary_labels`
//! (`components/claw_modules/claw_memory/src/claw_memory_extract.c`).

use core::fmt;

use heapless::string::StringView;

use super::text::{
    contains_ascii_ci, copy_text, cut_chars, cut_utf8, item_key, list_contains_term,
    normalize_for_key, push_label, terms, trim_c, trim_end_c, ItemKey, NormalizedText,
};
use super::{
    CONTENT_KEPT_BYTES, CONTENT_MAX_BYTES, KEYWORDS_KEPT_BYTES, KEYWORDS_MAX_BYTES,
    LABEL_MAX_BYTES, MAX_SUMMARY_LABELS, MAX_TERMS, SOURCE_KEPT_BYTES, SOURCE_MAX_BYTES,
    TAGS_KEPT_BYTES, TAGS_MAX_BYTES,
};

/// An item's content: at most [`CONTENT_MAX_BYTES`] bytes.
pub type Content = heapless::String<CONTENT_MAX_BYTES>;
/// An item's normalized tags list (`a,b,c`): at most [`TAGS_MAX_BYTES`] bytes.
pub type Tags = heapless::String<TAGS_MAX_BYTES>;
/// An item's normalized keywords list: at most [`KEYWORDS_MAX_BYTES`] bytes.
pub type Keywords = heapless::String<KEYWORDS_MAX_BYTES>;
/// Where an item came from ([`SOURCE_MANUAL`], [`SOURCE_AUTO_LLM`]): at most
/// [`SOURCE_MAX_BYTES`] bytes.
pub type Source = heapless::String<SOURCE_MAX_BYTES>;
/// One summary label: at most [`LABEL_MAX_BYTES`] bytes.
pub type Label = heapless::String<LABEL_MAX_BYTES>;
/// An item's summary labels, at most [`MAX_SUMMARY_LABELS`].
pub type Labels = heapless::Vec<Label, MAX_SUMMARY_LABELS>;

/// Source of an item stored by a tool call (the default for an empty source).
pub const SOURCE_MANUAL: &str = "manual";
/// Source of an item written by automatic extraction.
pub const SOURCE_AUTO_LLM: &str = "auto_llm";

/// [`ItemId::PREFIX`] as a literal, for writers that join it to the text
/// before it (`concat!`).
macro_rules! id_prefix {
    () => {
        "mem-"
    };
}
pub(crate) use id_prefix;

/// An item's identity: a sequence number that the store never reuses.
///
/// Its text form is `mem-<n>`, `n` in decimal without leading zeros (for
/// example `mem-42`). ESP-Claw's ids are `mem-<unix seconds>-<seq % 10000>`
/// (`claw_memory_make_id`), which repeat after a reboot without a real-time
/// clock; the same prefix keeps the text familiar to prompts and tools.
/// Ids order numerically (ESP-Claw compares its text ids with `strcmp`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct ItemId(u32);

impl ItemId {
    /// The prefix of the text form.
    pub const PREFIX: &'static str = id_prefix!();
    /// The longest text form, `mem-4294967295`.
    pub const TEXT_MAX_BYTES: usize = 14;

    /// The id with sequence number `seq`.
    pub const fn new(seq: u32) -> Self {
        Self(seq)
    }

    /// The sequence number.
    pub const fn get(self) -> u32 {
        self.0
    }

    /// Parses the text form `mem-<n>`. Only the canonical spelling is
    /// accepted (no sign, no leading zeros, no spaces), so every id has
    /// exactly one text form.
    pub fn parse(text: &str) -> Option<Self> {
        let digits = text.strip_prefix(Self::PREFIX)?;
        let canonical = !digits.is_empty()
            && digits.bytes().all(|b| b.is_ascii_digit())
            && (digits == "0" || !digits.starts_with('0'));
        if !canonical {
            return None;
        }
        digits.parse::<u32>().ok().map(Self)
    }
}

impl From<u32> for ItemId {
    fn from(seq: u32) -> Self {
        Self(seq)
    }
}

impl fmt::Display for ItemId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        super::render::write_id(f, *self)
    }
}

/// How tags become summary labels: each tag is cut to at most `max_bytes`
/// bytes and `max_chars` characters (on a character boundary), then trailing
/// whitespace is removed.
///
/// ESP-Claw cuts labels to 8 characters (`CLAW_MEMORY_MAX_LABEL_CHARS`), so
/// `dietary_preferences` becomes `dietary_` and distinct tags collapse into
/// one label; [`LabelLimit::ESP_CLAW`] reproduces that. clawmem's default
/// keeps up to [`LABEL_MAX_BYTES`] bytes. ESP-Claw also keeps a trailing space
/// that the cut exposes (`dietary preferences` gives `dietary `); clawmem
/// trims it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct LabelLimit {
    max_bytes: usize,
    max_chars: usize,
}

impl LabelLimit {
    /// clawmem's default: labels up to [`LABEL_MAX_BYTES`] bytes.
    pub const DEFAULT: Self = Self {
        max_bytes: LABEL_MAX_BYTES,
        max_chars: LABEL_MAX_BYTES,
    };

    /// ESP-Claw's limit: 8 characters.
    pub const ESP_CLAW: Self = Self {
        max_bytes: LABEL_MAX_BYTES,
        max_chars: 8,
    };

    /// Labels of at most `max_bytes` bytes (clamped to [`LABEL_MAX_BYTES`]).
    /// A limit of 0 gives items no labels.
    pub const fn bytes(max_bytes: usize) -> Self {
        let max_bytes = if max_bytes > LABEL_MAX_BYTES {
            LABEL_MAX_BYTES
        } else {
            max_bytes
        };
        Self {
            max_bytes,
            max_chars: LABEL_MAX_BYTES,
        }
    }

    /// Labels of at most `max_chars` characters (and never more than
    /// [`LABEL_MAX_BYTES`] bytes).
    pub const fn chars(max_chars: usize) -> Self {
        Self {
            max_bytes: LABEL_MAX_BYTES,
            max_chars,
        }
    }

    /// The byte limit.
    pub const fn max_bytes(&self) -> usize {
        self.max_bytes
    }

    /// The character limit.
    pub const fn max_chars(&self) -> usize {
        self.max_chars
    }

    /// The label that `tag` becomes (possibly empty).
    pub fn apply<'a>(&self, tag: &'a str) -> &'a str {
        let by_bytes = cut_utf8(trim_c(tag), self.max_bytes.min(LABEL_MAX_BYTES));
        trim_end_c(cut_chars(by_bytes, self.max_chars))
    }
}

impl Default for LabelLimit {
    fn default() -> Self {
        Self::DEFAULT
    }
}

/// What a caller asks to store (or, as a patch, to change): raw text that
/// [`Item::new`] normalizes.
///
/// `tags` and `keywords` are lists separated by any of `, ; / |`. An empty
/// `source` means [`SOURCE_MANUAL`].
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct ItemInput<'a> {
    /// The memory text.
    pub content: &'a str,
    /// Tags, the source of the summary labels.
    pub tags: &'a str,
    /// Retrieval keywords; kept only if they occur in the content or tags.
    pub keywords: &'a str,
    /// Where the item came from.
    pub source: &'a str,
}

impl<'a> ItemInput<'a> {
    /// An input with this content and nothing else.
    pub const fn new(content: &'a str) -> Self {
        Self {
            content,
            tags: "",
            keywords: "",
            source: "",
        }
    }

    /// The same input with these tags.
    pub const fn tags(mut self, tags: &'a str) -> Self {
        self.tags = tags;
        self
    }

    /// The same input with these keywords.
    pub const fn keywords(mut self, keywords: &'a str) -> Self {
        self.keywords = keywords;
        self
    }

    /// The same input with this source.
    pub const fn source(mut self, source: &'a str) -> Self {
        self.source = source;
        self
    }
}

/// Why an input cannot become an item.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum ItemError {
    /// The content is empty once trimmed.
    EmptyContent,
}

impl fmt::Display for ItemError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::EmptyContent => f.write_str("memory content is empty"),
        }
    }
}

/// One long-term memory item. See the module documentation for its
/// invariants.
#[derive(Debug, PartialEq, Eq)]
pub struct Item {
    pub(crate) id: ItemId,
    pub(crate) source: Source,
    pub(crate) content: Content,
    pub(crate) tags: Tags,
    pub(crate) keywords: Keywords,
    pub(crate) labels: Labels,
    pub(crate) created_at: u32,
    pub(crate) updated_at: u32,
    pub(crate) access_count: u16,
}

impl Clone for Item {
    fn clone(&self) -> Self {
        let mut item = Item::empty();
        item.clone_from(self);
        item
    }

    /// Copies `source` into `self` in place, field by field: no second item
    /// on the stack, and one copy routine for every text capacity.
    #[inline(never)]
    fn clone_from(&mut self, source: &Self) {
        self.id = source.id;
        copy_text(self.source.as_mut_view(), &source.source);
        copy_text(self.content.as_mut_view(), &source.content);
        copy_text(self.tags.as_mut_view(), &source.tags);
        copy_text(self.keywords.as_mut_view(), &source.keywords);
        self.labels.clear();
        for label in &source.labels {
            push_label(self.labels.as_mut_view(), label);
        }
        self.created_at = source.created_at;
        self.updated_at = source.updated_at;
        self.access_count = source.access_count;
    }
}

impl Item {
    /// An item with every field empty and id 0: a place to decode into
    /// ([`Item::decode_from`]), not an item to store.
    pub const fn empty() -> Item {
        Item {
            id: ItemId::new(0),
            source: Source::new(),
            content: Content::new(),
            tags: Tags::new(),
            keywords: Keywords::new(),
            labels: Labels::new(),
            created_at: 0,
            updated_at: 0,
            access_count: 0,
        }
    }

    /// Applies the store rules to `input` and builds a new item with id `id`,
    /// created and updated at `now` (seconds; 0 is allowed when there is no
    /// clock), never accessed.
    ///
    /// The rules: each input field is first cut to what ESP-Claw's array
    /// holds (`strlcpy`: content [`CONTENT_KEPT_BYTES`], source
    /// [`SOURCE_KEPT_BYTES`], tags and keywords in [`normalize_tags`] and
    /// [`normalize_keywords`]), on a UTF-8 boundary, and then trimmed; an
    /// empty content is [`ItemError::EmptyContent`]; labels are
    /// [`derive_labels`] under `limit`; an empty source becomes
    /// [`SOURCE_MANUAL`]. Whether the result duplicates an existing item is
    /// for the caller to check ([`Item::duplicate_of`]).
    pub fn new(
        id: ItemId,
        input: &ItemInput<'_>,
        now: u32,
        limit: LabelLimit,
    ) -> Result<Self, ItemError> {
        let mut item = Self::empty();
        item.build(id, input, now, limit)?;
        Ok(item)
    }

    /// [`Item::new`] into `self`, which is [`Item::empty`]: built in place,
    /// field by field (no item moved through the result). On an error
    /// `self` is left empty.
    #[inline(never)]
    pub(crate) fn build(
        &mut self,
        id: ItemId,
        input: &ItemInput<'_>,
        now: u32,
        limit: LabelLimit,
    ) -> Result<(), ItemError> {
        // Cut first (ESP-Claw's `strlcpy` into the array), trimmed after.
        let content = cut_trim(input.content, CONTENT_KEPT_BYTES);
        if content.is_empty() {
            return Err(ItemError::EmptyContent);
        }
        let given = cut_trim(input.source, SOURCE_KEPT_BYTES);
        let source = if given.is_empty() {
            SOURCE_MANUAL
        } else {
            given
        };
        // The pushes cannot fail: each text is cut to its capacity.
        self.id = id;
        copy_text(self.source.as_mut_view(), source);
        copy_text(self.content.as_mut_view(), content);
        tags_into(self.tags.as_mut_view(), input.tags);
        keywords_into(
            self.keywords.as_mut_view(),
            input.keywords,
            content,
            &self.tags,
        );
        labels_into(&mut self.labels, &self.tags, limit);
        self.created_at = now;
        self.updated_at = now;
        Ok(())
    }

    /// The replacement for this item under `patch` (ESP-Claw's
    /// `claw_memory_update_with_result`): each non-empty patch field replaces
    /// the item's raw field, then the store rules run again (so keywords are
    /// re-grounded in the new content). The replacement has id `new_id`, is
    /// created and updated at `now` and has access count 0.
    ///
    /// `Ok(None)` when the replacement's source, content, tags and keywords
    /// equal this item's: the update is a no-op. Otherwise the caller checks
    /// the replacement for duplicates among the other active items (not this
    /// one), stores it unless it is a duplicate, and forgets this item in
    /// either case.
    pub fn updated(
        &self,
        patch: &ItemInput<'_>,
        new_id: ItemId,
        now: u32,
        limit: LabelLimit,
    ) -> Result<Option<Self>, ItemError> {
        let mut replacement = Self::empty();
        let changed = self.update_into(patch, new_id, now, limit, &mut replacement)?;
        Ok(if changed { Some(replacement) } else { None })
    }

    /// [`Item::updated`] into `out`, which is [`Item::empty`], in place:
    /// `Ok(true)` when `out` holds the replacement, `Ok(false)` for a no-op.
    pub(crate) fn update_into(
        &self,
        patch: &ItemInput<'_>,
        new_id: ItemId,
        now: u32,
        limit: LabelLimit,
        out: &mut Item,
    ) -> Result<bool, ItemError> {
        #[inline(never)]
        fn pick<'a>(patch: &'a str, current: &'a str) -> &'a str {
            if patch.is_empty() {
                current
            } else {
                patch
            }
        }
        let input = ItemInput {
            content: pick(patch.content, &self.content),
            tags: pick(patch.tags, &self.tags),
            keywords: pick(patch.keywords, &self.keywords),
            source: pick(patch.source, &self.source),
        };
        out.build(new_id, &input, now, limit)?;
        let unchanged = out.source == self.source
            && out.content == self.content
            && out.tags == self.tags
            && out.keywords == self.keywords;
        Ok(!unchanged)
    }

    /// The item's id.
    pub fn id(&self) -> ItemId {
        self.id
    }

    /// Where the item came from.
    pub fn source(&self) -> &str {
        &self.source
    }

    /// The memory text.
    #[inline(never)]
    pub fn content(&self) -> &str {
        &self.content
    }

    /// The normalized tags list (`a,b,c`).
    pub fn tags(&self) -> &str {
        &self.tags
    }

    /// The normalized keywords list.
    pub fn keywords(&self) -> &str {
        &self.keywords
    }

    /// The tags, one by one.
    pub fn tag_terms(&self) -> impl Iterator<Item = &str> {
        terms(&self.tags)
    }

    /// The keywords, one by one.
    pub fn keyword_terms(&self) -> impl Iterator<Item = &str> {
        terms(&self.keywords)
    }

    /// The summary labels, in tag order.
    pub fn labels(&self) -> &[Label] {
        &self.labels
    }

    /// Whether the item carries `label` (exact match).
    pub fn has_label(&self, label: &str) -> bool {
        self.labels.iter().any(|l| l == label)
    }

    /// Whether the item carries any of `labels` (the recall filter). An
    /// empty query matches every item, as in ESP-Claw.
    pub fn has_any_label(&self, labels: &[&str]) -> bool {
        labels.is_empty() || labels.iter().any(|l| self.has_label(l))
    }

    /// Creation time in seconds (0: unknown).
    pub fn created_at(&self) -> u32 {
        self.created_at
    }

    /// Last update time in seconds (0: unknown).
    pub fn updated_at(&self) -> u32 {
        self.updated_at
    }

    /// How often recall has returned the item.
    pub fn access_count(&self) -> u16 {
        self.access_count
    }

    /// The dedup key of the content (see [`item_key`]).
    pub fn key(&self) -> ItemKey {
        item_key(&self.content)
    }

    /// The normalized content (see [`normalize_for_key`]).
    pub fn normalized_content(&self) -> NormalizedText {
        normalize_for_key(&self.content)
    }

    /// Applies one recorded recall: the access count grows by one (saturating)
    /// and `updated_at` becomes `at` if that is later. This is how ESP-Claw
    /// replays its `recall` digest lines at compaction
    /// (`claw_memory_apply_digest_recall_deltas`).
    pub fn record_recall(&mut self, at: u32) {
        self.access_count = self.access_count.saturating_add(1);
        self.updated_at = self.updated_at.max(at);
    }

    /// Sets the access count (for replaying persisted counters).
    pub fn set_access_count(&mut self, access_count: u16) {
        self.access_count = access_count;
    }

    /// Sets the last update time.
    pub fn set_updated_at(&mut self, updated_at: u32) {
        self.updated_at = updated_at;
    }
}

/// `s` cut to at most `max_bytes` on a character boundary, then trimmed:
/// ESP-Claw's `strlcpy` into a field followed by `trim_whitespace`.
fn cut_trim(s: &str, max_bytes: usize) -> &str {
    trim_c(cut_utf8(s, max_bytes))
}

/// Appends `term` to a comma-joined list if it fits entirely beside the
/// NUL that ESP-Claw's array keeps (its `snprintf` refuses a term that
/// would reach the array's size), so the list stays below its capacity.
/// (A view: compiled once for tags and keywords.)
fn push_term(list: &mut StringView, term: &str) -> bool {
    // Plain sums: a term is a part of a cut input and the list is within
    // its capacity, both a few hundred bytes at most.
    let separator = usize::from(!list.is_empty());
    if list.len() + term.len() + separator >= list.capacity() {
        return false;
    }
    if separator == 1 && list.push(',').is_err() {
        return false;
    }
    list.push_str(term).is_ok()
}

/// The store rule for tags: the first [`MAX_TERMS`] unique terms of `raw`
/// (split on `, ; / |`, trimmed, empty terms skipped), joined with `,`.
///
/// `raw` is first cut to [`TAGS_KEPT_BYTES`] (95) bytes and trimmed, as
/// ESP-Claw copies it into its 96-byte field before normalizing; the
/// normalized list keeps at most 95 bytes too.
pub fn normalize_tags(raw: &str) -> Tags {
    let mut tags = Tags::new();
    tags_into(tags.as_mut_view(), raw);
    tags
}

/// [`normalize_tags`] into an empty `tags`.
fn tags_into(tags: &mut StringView, raw: &str) {
    add_terms(tags, &mut 0, cut_trim(raw, TAGS_KEPT_BYTES), None);
}

/// Appends to the comma-joined `list`, which holds `count` terms, the terms
/// of `raw` it does not have yet, until it holds [`MAX_TERMS`] or a term
/// does not fit; with `grounded_in` = (content, tags), only the terms that
/// occur in either (ASCII letters compared without case). The one loop of
/// the tags and both keyword passes.
fn add_terms(
    list: &mut StringView,
    count: &mut usize,
    raw: &str,
    grounded_in: Option<(&str, &str)>,
) {
    for term in terms(raw) {
        if *count >= MAX_TERMS {
            break;
        }
        if list_contains_term(list, term) {
            continue;
        }
        if let Some((content, tags)) = grounded_in {
            if !(contains_ascii_ci(content, term) || contains_ascii_ci(tags, term)) {
                continue;
            }
        }
        if !push_term(list, term) {
            break;
        }
        *count += 1;
    }
}

/// The store rule for keywords: up to [`MAX_TERMS`] unique terms of `raw`
/// that are *grounded* (occur in `content` or in the normalized `tags`,
/// ASCII letters compared without case), then topped up with the tags in
/// order until there are [`MAX_TERMS`] (ESP-Claw's
/// `claw_memory_normalize_item_metadata`). `raw` is first cut to
/// [`KEYWORDS_KEPT_BYTES`] (127) bytes and trimmed; a term that no longer
/// fits those 127 bytes ends that pass.
pub fn normalize_keywords(raw: &str, content: &str, tags: &str) -> Keywords {
    let mut keywords = Keywords::new();
    keywords_into(keywords.as_mut_view(), raw, content, tags);
    keywords
}

/// [`normalize_keywords`] into an empty `keywords`.
fn keywords_into(keywords: &mut StringView, raw: &str, content: &str, tags: &str) {
    let raw = cut_trim(raw, KEYWORDS_KEPT_BYTES);
    let mut count = 0;
    add_terms(keywords, &mut count, raw, Some((content, tags)));
    add_terms(keywords, &mut count, tags, None);
}

/// The store rule for summary labels: each tag of the normalized `tags`
/// list, cut by `limit`, skipping empty and repeated results, at most
/// [`MAX_SUMMARY_LABELS`].
pub fn derive_labels(tags: &str, limit: LabelLimit) -> Labels {
    let mut labels = Labels::new();
    labels_into(&mut labels, tags, limit);
    labels
}

/// [`derive_labels`] into an empty `labels`.
fn labels_into(labels: &mut Labels, tags: &str, limit: LabelLimit) {
    for term in terms(tags) {
        let label = limit.apply(term);
        if label.is_empty() || labels.iter().any(|l| l == label) {
            continue;
        }
        if !push_label(labels.as_mut_view(), label) {
            break;
        }
    }
}

#[cfg(test)]
mod tests {
    extern crate std;
    use std::string::ToString;
    use std::vec::Vec;

    use super::*;

    fn item(content: &str, tags: &str, keywords: &str) -> Item {
        Item::new(
            ItemId::new(1),
            &ItemInput::new(content).tags(tags).keywords(keywords),
            100,
            LabelLimit::DEFAULT,
        )
        .unwrap()
    }

    #[test]
    fn id_text_form_roundtrips_and_is_canonical() {
        assert_eq!(ItemId::new(42).to_string(), "mem-42");
        assert_eq!(
            ItemId::new(u32::MAX).to_string().len(),
            ItemId::TEXT_MAX_BYTES
        );
        assert_eq!(ItemId::parse("mem-42"), Some(ItemId::new(42)));
        assert_eq!(ItemId::parse("mem-0"), Some(ItemId::new(0)));
        assert_eq!(ItemId::parse("mem-4294967295"), Some(ItemId::new(u32::MAX)));
        for bad in [
            "mem-",
            "mem-042",
            "mem-+4",
            "mem--4",
            "mem-4294967296",
            "mem-4 ",
            "MEM-4",
            "4",
            "mem-1700000000-0001",
        ] {
            assert_eq!(ItemId::parse(bad), None, "{bad}");
        }
        assert!(ItemId::new(2) < ItemId::new(10));
    }

    #[test]
    fn store_trims_and_rejects_empty_content() {
        let it = item("  \t likes green tea \n", "", "");
        assert_eq!(it.content(), "likes green tea");
        assert_eq!(it.source(), SOURCE_MANUAL);
        assert_eq!(
            (it.created_at(), it.updated_at(), it.access_count()),
            (100, 100, 0)
        );
        for empty in ["", "   ", "\r\n\t"] {
            assert_eq!(
                Item::new(
                    ItemId::new(1),
                    &ItemInput::new(empty),
                    0,
                    LabelLimit::DEFAULT
                ),
                Err(ItemError::EmptyContent)
            );
        }
        let auto = Item::new(
            ItemId::new(2),
            &ItemInput::new("x").source(SOURCE_AUTO_LLM),
            0,
            LabelLimit::DEFAULT,
        )
        .unwrap();
        assert_eq!(auto.source(), "auto_llm");
    }

    #[test]
    fn long_content_is_cut_on_a_char_boundary() {
        // 85 CJK characters = 255 bytes, then one more: 258 bytes.
        let text: std::string::String = "中".repeat(86);
        let it = item(&text, "", "");
        assert_eq!(it.content().len(), 255);
        assert_eq!(it.content(), "中".repeat(85));
        // A cut that exposes trailing whitespace is trimmed again.
        let spaced = std::format!("{} tail", "a".repeat(255));
        assert_eq!(item(&spaced, "", "").content(), "a".repeat(255));
    }

    #[test]
    fn cap_memory_copy_string_cuts_then_trims() {
        // ESP-Claw `strlcpy`s each tool field into its array (content[256],
        // source[16], tags[96], keywords[128]) and trims after:
        // the cut comes first, so leading spaces count against the 255 bytes.
        let padded = std::format!("{}{}", " ".repeat(10), "x".repeat(300));
        assert_eq!(item(&padded, "", "").content(), "x".repeat(245));
        // A space the cut exposes is trimmed.
        let spaced = std::format!("{} tail", "a".repeat(254));
        assert_eq!(item(&spaced, "", "").content(), "a".repeat(254));
        // 255 bytes, cut on a UTF-8 boundary: 'a' and 84 CJK (253 bytes).
        let cjk = std::format!("a{}", "中".repeat(85));
        assert_eq!(cjk.len(), 256);
        let it = item(&cjk, "", "");
        assert_eq!(it.content(), std::format!("a{}", "中".repeat(84)));
        // Tags: 95 bytes of input; a cut inside a character drops it.
        let tags = std::format!("{}é", "t".repeat(94));
        assert_eq!(item("x", &tags, "").tags(), "t".repeat(94));
        // Source: 15 bytes, then trimmed.
        let src = Item::new(
            ItemId::new(1),
            &ItemInput::new("x").source("sixteen_bytes_xx"),
            0,
            LabelLimit::DEFAULT,
        )
        .unwrap();
        assert_eq!(src.source(), "sixteen_bytes_x");
        let src = Item::new(
            ItemId::new(1),
            &ItemInput::new("x").source("              \tz"),
            0,
            LabelLimit::DEFAULT,
        )
        .unwrap();
        assert_eq!(src.source(), SOURCE_MANUAL);
    }

    #[test]
    fn claw_memory_normalize_item_metadata_keeps_127_keyword_bytes() {
        // The normalized keywords are built in a 128-byte array: a term that
        // would reach byte 128 is not added (`snprintf` returns >= size).
        let k = "k".repeat(60);
        let j = "j".repeat(60);
        let content = std::format!("{k} {j}");
        let raw = std::format!("{k},{j}");
        // 60 + 1 + 60 + 1 + 5 = 127 bytes: the tag tops the list up.
        assert_eq!(
            normalize_keywords(&raw, &content, "ttttt").len(),
            KEYWORDS_KEPT_BYTES
        );
        // One byte more would reach 128: the tag is left out.
        assert_eq!(normalize_keywords(&raw, &content, "tttttt"), raw.as_str());
        // Raw keywords are cut at 127 bytes first.
        let long = "q".repeat(200);
        assert_eq!(normalize_keywords(&long, &long, "").len(), 127);
    }

    #[test]
    fn tags_are_first_three_unique_terms() {
        assert_eq!(
            normalize_tags(" food ; drink/food| travel , music"),
            "food,drink,travel"
        );
        assert_eq!(normalize_tags(",,;; a ,, "), "a");
        assert_eq!(normalize_tags(""), "");
        assert_eq!(normalize_tags("x|X"), "x,X");
        // Input beyond 95 bytes is cut first (on a char boundary).
        let long = std::format!("{},b", "t".repeat(100));
        assert_eq!(normalize_tags(&long).as_str(), "t".repeat(95));
    }

    #[test]
    fn keywords_must_be_grounded_then_are_topped_up_from_tags() {
        // "coffee" occurs nowhere: dropped. "TEA" matches "tea" case-insensitively.
        let kw = normalize_keywords("coffee, TEA, drinks", "User drinks green tea", "beverage");
        assert_eq!(kw, "TEA,drinks,beverage");
        // Grounded in the tags rather than the content.
        assert_eq!(
            normalize_keywords("bever", "x", "beverage,food"),
            "bever,beverage,food"
        );
        // Nothing grounded: the tags alone.
        assert_eq!(normalize_keywords("zzz", "abc", "t1,t2"), "t1,t2");
        // At most three, unique.
        assert_eq!(normalize_keywords("a,a,b,c,d", "abcd", "e"), "a,b,c");
        // Non-ASCII grounding is exact.
        assert_eq!(normalize_keywords("绿茶,红茶", "喜欢绿茶", ""), "绿茶");
    }

    #[test]
    fn item_new_applies_all_metadata_rules() {
        let it = item(
            "The user is vegetarian",
            "dietary_preferences; health | dietary_preferences / extra",
            "vegetarian, meat",
        );
        assert_eq!(it.tags(), "dietary_preferences,health,extra");
        assert_eq!(it.keywords(), "vegetarian,dietary_preferences,health");
        let labels: Vec<&str> = it.labels().iter().map(|l| l.as_str()).collect();
        assert_eq!(labels, ["dietary_preferences", "health", "extra"]);
        assert!(it.has_label("health"));
        assert!(!it.has_label("dietary_"));
        assert!(it.has_any_label(&["nope", "extra"]));
        assert!(!it.has_any_label(&["nope"]));
        assert!(it.has_any_label(&[]));
    }

    #[test]
    fn label_limit_esp_claw_collapses_long_tags() {
        let labels = derive_labels(
            "dietary_preferences,dietary_restrictions,x",
            LabelLimit::ESP_CLAW,
        );
        let labels: Vec<&str> = labels.iter().map(|l| l.as_str()).collect();
        assert_eq!(labels, ["dietary_", "x"]);
        // The default keeps them apart.
        let labels = derive_labels(
            "dietary_preferences,dietary_restrictions",
            LabelLimit::DEFAULT,
        );
        assert_eq!(labels.len(), 2);
        assert_eq!(labels[1], "dietary_restrictions");
    }

    #[test]
    fn label_limit_cuts_bytes_on_char_boundary_and_trims() {
        assert_eq!(LabelLimit::bytes(8).apply("饮食偏好"), "饮食");
        assert_eq!(LabelLimit::bytes(1000).max_bytes(), LABEL_MAX_BYTES);
        assert_eq!(LabelLimit::chars(8).apply("dietary preferences"), "dietary");
        assert_eq!(LabelLimit::bytes(0).apply("abc"), "");
        let long = "x".repeat(40);
        assert_eq!(LabelLimit::DEFAULT.apply(&long).len(), LABEL_MAX_BYTES);
        assert_eq!(LabelLimit::default(), LabelLimit::DEFAULT);
        assert!(derive_labels("a,b", LabelLimit::bytes(0)).is_empty());
    }

    #[test]
    fn update_replaces_non_empty_fields_and_detects_no_ops() {
        let mut old = item("User likes tea", "drinks", "tea");
        old.record_recall(500);
        assert_eq!(old.access_count(), 1);
        assert_eq!(old.updated_at(), 500);

        let none = old
            .updated(
                &ItemInput::default(),
                ItemId::new(9),
                900,
                LabelLimit::DEFAULT,
            )
            .unwrap();
        assert_eq!(none, None);
        let same = old
            .updated(
                &ItemInput::new("  User likes tea "),
                ItemId::new(9),
                900,
                LabelLimit::DEFAULT,
            )
            .unwrap();
        assert_eq!(same, None);

        let new = old
            .updated(
                &ItemInput::new("User likes coffee"),
                ItemId::new(9),
                900,
                LabelLimit::DEFAULT,
            )
            .unwrap()
            .unwrap();
        assert_eq!(new.id(), ItemId::new(9));
        assert_eq!(new.content(), "User likes coffee");
        assert_eq!(new.tags(), "drinks");
        // "tea" is no longer grounded in the new content.
        assert_eq!(new.keywords(), "drinks");
        assert_eq!(
            (new.access_count(), new.created_at(), new.updated_at()),
            (0, 900, 900)
        );

        assert_eq!(
            old.updated(
                &ItemInput::new("   "),
                ItemId::new(9),
                900,
                LabelLimit::DEFAULT
            ),
            Err(ItemError::EmptyContent)
        );
    }

    #[test]
    fn recall_replay_saturates() {
        let mut it = item("x", "", "");
        it.set_access_count(u16::MAX);
        it.record_recall(50);
        assert_eq!(it.access_count(), u16::MAX);
        assert_eq!(it.updated_at(), 100);
        it.set_updated_at(7);
        assert_eq!(it.updated_at(), 7);
    }
}
