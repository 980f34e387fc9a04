//! Long-term memory: the pure rules of memory items, with no flash I/O.
//!
//! This module owns what a long-term memory *is* and how items relate; the
//! storage layer owns where they live. It provides:
//!
//! - [`Item`]: one fixed-size item (no heap), built only through the store
//!   rules ([`Item::new`]: trim, tags, grounded keywords, summary labels) and
//!   [`Item::updated`]; its compact versioned byte encoding
//!   ([`Item::encode`], [`Item::decode`]) is the record payload the storage
//!   layer persists.
//! - The relations between items: duplicates ([`duplicate_kind`]), the
//!   `replace` intent ([`conflicts_for_replace`]), recall order
//!   ([`recall_cmp`]), merging at compaction ([`merge_same_key`]) and
//!   eviction beyond [`MAX_ACTIVE_ITEMS`] ([`select_evictions`]).
//! - The summary label catalog with reference counts ([`LabelCatalog`]) and
//!   the error for a recall with an unknown label ([`UnknownLabel`]).
//! - Rendering without allocation: the full-mode catalog prompt
//!   ([`write_catalog_prompt`]), `MEMORY.md` ([`write_memory_md`]) and the
//!   stage note ([`StageNote`]), and the JSON replies of ESP-Claw's memory
//!   tools ([`write_memory_reply_json`], [`MemoryAction`]).
//!
//! Nothing here touches flash, so nothing here can be cut by power loss; the
//! storage layer states its own guarantees. Every function is total: no
//! panics on any input, no allocation, no recursion.
//!
//! The behaviour follows ESP-Claw's `components/claw_modules/claw_memory`
//! (`src/claw_memory.c`, `claw_memory_extract.c`, `claw_memory_storage.c`,
//! `claw_memory_utils.c`, `claw_memory_internal.h`), with these deliberate
//! differences, each documented where it applies: ids are sequence numbers
//! that never repeat (`mem-<n>`); every cut lands on a UTF-8 boundary;
//! summary labels keep up to [`LABEL_MAX_BYTES`] bytes by default instead of
//! 8 characters ([`LabelLimit`]); a content with an empty key never matches
//! another; merged items keep keywords consistent with their content; times
//! render in UTC.

mod catalog;
mod codec;
mod item;
mod json;
mod render;
mod rules;
mod text;

pub use catalog::{
    CatalogEntry, CatalogError, LabelCatalog, UnknownLabel, UNKNOWN_LABEL_MAX_BYTES,
};
pub use codec::{
    DecodeError, EncodeError, ItemField, ITEM_ENCODED_MAX_BYTES, ITEM_FORMAT_VERSION,
    ITEM_HEADER_BYTES,
};
pub use item::{
    derive_labels, normalize_keywords, normalize_tags, Content, Item, ItemError, ItemId, ItemInput,
    Keywords, Label, LabelLimit, Labels, Source, Tags, SOURCE_AUTO_LLM, SOURCE_MANUAL,
};
#[cfg(feature = "memory")]
pub(crate) use json::{write_invalid_label_head, write_item_json, write_reply_head};
pub use json::{
    write_memory_reply_json, MemoryAction, RecallReply, INVALID_LABELS_ERROR,
    INVALID_LABELS_MESSAGE,
};
#[cfg(feature = "memory")]
pub(crate) use render::{memory_md_empty_line, memory_md_title, write_md_item};
pub use render::{
    write_catalog_prompt, write_memory_md, write_memory_md_item, StageNote, Timestamp,
    CATALOG_EMPTY_LINE, LONG_TERM_PREAMBLE, MEMORY_MD_EMPTY_LINE, MEMORY_MD_TITLE,
};
pub use rules::{
    conflicts_for_replace, duplicate_kind, eviction_score, evictions_needed, merge_same_key,
    merge_same_key_into, recall_cmp, select_evictions, select_evictions_default, DuplicateKind,
    ItemRank,
};
pub use text::{
    cut_utf8, item_key, normalize_for_key, ItemKey, NormalizedText, KEY_DROPPED_PUNCTUATION,
    TERM_SEPARATORS,
};

/// Capacity of an item's content in bytes (ESP-Claw: `content[256]`). A new
/// item keeps at most [`CONTENT_KEPT_BYTES`]; an item read from an image
/// written before that rule may hold the whole capacity.
pub const CONTENT_MAX_BYTES: usize = 256;
/// Capacity of an item's normalized tags list in bytes (ESP-Claw: `tags[96]`).
pub const TAGS_MAX_BYTES: usize = 96;
/// Capacity of an item's normalized keywords list in bytes (ESP-Claw:
/// `keywords[128]`).
pub const KEYWORDS_MAX_BYTES: usize = 128;
/// Capacity of an item's source in bytes (ESP-Claw: `source[16]`).
pub const SOURCE_MAX_BYTES: usize = 16;
/// Most content bytes a new item keeps: what ESP-Claw's `content[256]` holds
/// beside its terminating NUL (the tool input is `strlcpy`'d into it).
pub const CONTENT_KEPT_BYTES: usize = CONTENT_MAX_BYTES - 1;
/// Most bytes of a new item's tags, raw and normalized (`tags[96]` less the
/// NUL).
pub const TAGS_KEPT_BYTES: usize = TAGS_MAX_BYTES - 1;
/// Most bytes of a new item's keywords, raw and normalized (`keywords[128]`
/// less the NUL).
pub const KEYWORDS_KEPT_BYTES: usize = KEYWORDS_MAX_BYTES - 1;
/// Most bytes of a new item's source (`source[16]` less the NUL).
pub const SOURCE_KEPT_BYTES: usize = SOURCE_MAX_BYTES - 1;
/// How many bytes of the normalized contents the duplicate check compares:
/// ESP-Claw normalizes into `existing_key[160]` and `incoming_key[160]`
/// (`claw_memory_items_semantically_match`), 159 bytes beside the NUL.
pub const SEMANTIC_MATCH_BYTES: usize = 159;
/// Capacity of one summary label in bytes. ESP-Claw keeps 8 characters
/// (`CLAW_MEMORY_MAX_LABEL_CHARS`); 32 bytes hold 8 characters of any script.
pub const LABEL_MAX_BYTES: usize = 32;
/// Most tags, and most keywords, an item keeps (ESP-Claw reuses
/// `CLAW_MEMORY_MAX_SUMMARIES` for both).
pub const MAX_TERMS: usize = 3;
/// Most summary labels per item, and per recall query
/// (`CLAW_MEMORY_MAX_SUMMARIES`).
pub const MAX_SUMMARY_LABELS: usize = 3;
/// Most active items kept after compaction (`CLAW_MEMORY_MAX_ACTIVE_ITEMS`).
pub const MAX_ACTIVE_ITEMS: usize = 128;
/// A catalog capacity that can never fill up: every active item's labels
/// distinct.
pub const MAX_CATALOG_LABELS: usize = MAX_ACTIVE_ITEMS * MAX_SUMMARY_LABELS;
/// Default recall limit (`CLAW_MEMORY_RECALL_DEFAULT_LIMIT`).
pub const RECALL_DEFAULT_LIMIT: usize = 8;
/// Length of an item's dedup key in bytes (ESP-Claw's `normalized_prefix[37]`).
pub const KEY_MAX_BYTES: usize = 36;
/// Minimum normalized length, in bytes, of both contents for the
/// containment duplicate rule.
pub const CONTAINMENT_MIN_BYTES: usize = 12;
