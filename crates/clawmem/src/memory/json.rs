//! The replies ESP-Claw's memory tools give the model, as JSON, written into
//! any [`core::fmt::Write`] without allocating.
//!
//! ESP-Claw's memory capability (`components/claw_capabilities/cap_memory`,
//! `cap_memory_render_result`, `cap_memory_render_invalid_summary_labels`,
//! and `claw_memory_storage.c` `claw_memory_item_to_json` for each item)
//! builds its replies with cJSON and prints them unformatted. The pieces
//! here write the same bytes: the same keys in the same order, strings
//! escaped as cJSON escapes them, numbers as cJSON prints whole numbers.
//! The store assembles the recall, list and invalid-label replies from them
//! (`Store::write_memory_recall_json`, `Store::write_memory_list_json`);
//! [`write_memory_reply_json`] is the whole reply of a store, update or
//! forget.
//!
//! Invariants: every function writes one complete JSON value or piece of
//! one, and reports only the writer's own error. What differs from
//! ESP-Claw's bytes is what the engine's items differ in, each a documented
//! difference: ids are `mem-<n>`, labels may be longer than 8 characters,
//! and access counts include the recalls since the last compaction.
//!
//! Nothing here touches flash.

use core::fmt::{self, Write};

use super::item::id_prefix;
use super::item::{Item, ItemId};
use super::render::{write_labels_json, write_u32};
use super::text::write_json_string;

// The two texts as literals, for the reply's head (`concat!`).
macro_rules! invalid_labels_error {
    () => {
        "invalid_summary_labels"
    };
}
macro_rules! invalid_labels_message {
    () => {
        "summary_labels must be copied exactly from the current memory summary label catalog"
    };
}

/// The `error` of the reply to a recall with a label not in the catalog.
pub const INVALID_LABELS_ERROR: &str = invalid_labels_error!();

/// The `message` of that reply, as ESP-Claw words it.
pub const INVALID_LABELS_MESSAGE: &str = invalid_labels_message!();

/// A memory tool, named as its reply's `action` names it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum MemoryAction {
    /// `memory_store`.
    Store,
    /// `memory_recall`.
    Recall,
    /// `memory_list`.
    List,
    /// `memory_update`.
    Update,
    /// `memory_forget`.
    Forget,
}

impl MemoryAction {
    /// The tool's name, `memory_store` to `memory_forget`.
    pub const fn name(self) -> &'static str {
        match self {
            Self::Store => "memory_store",
            Self::Recall => "memory_recall",
            Self::List => "memory_list",
            Self::Update => "memory_update",
            Self::Forget => "memory_forget",
        }
    }
}

/// What a recall reply turned out to be.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum RecallReply {
    /// `{"ok":true,...,"items":[...]}` with this many items.
    Items(usize),
    /// The `invalid_summary_labels` error: a label is not in the catalog,
    /// and nothing was recalled or written.
    InvalidLabel,
}

/// Writes the opening of a successful reply, `{"ok":true,"action":..,
/// "changed":..`, then `"memory_id"` and `"summary"` when given and not
/// empty (`cap_memory_render_result`). The caller closes it.
pub(crate) fn write_reply_head(
    w: &mut dyn Write,
    action: MemoryAction,
    changed: bool,
    memory_id: Option<ItemId>,
    summary: &str,
) -> fmt::Result {
    w.write_str("{\"ok\":true,\"action\":\"")?;
    w.write_str(action.name())?;
    w.write_str(if changed {
        "\",\"changed\":true"
    } else {
        "\",\"changed\":false"
    })?;
    if let Some(id) = memory_id {
        write!(w, ",\"memory_id\":\"{id}\"")?;
    }
    if !summary.is_empty() {
        w.write_str(",\"summary\":")?;
        write_json_string(w, summary)?;
    }
    Ok(())
}

/// Writes the whole reply of a store, update or forget of `item`:
/// `{"ok":true,"action":"memory_store","changed":true,"memory_id":"mem-7","summary":"drinks"}`.
///
/// As ESP-Claw's tools give them: for a store, the item stored or the
/// active item it duplicates (`changed` false); for an update, the new item
/// (or the one it duplicates), or the unchanged item when the patch changes
/// nothing (`changed` false); for a forget, the forgotten item. `summary`
/// is the item's first label, left out when it has none.
pub fn write_memory_reply_json(
    w: &mut dyn Write,
    action: MemoryAction,
    item: &Item,
    changed: bool,
) -> fmt::Result {
    let summary = item.labels().first().map_or("", |l| l.as_str());
    write_reply_head(w, action, changed, Some(item.id()), summary)?;
    w.write_char('}')
}

/// `,"<key>":`, the start of every field after the first, as one literal.
macro_rules! key {
    ($key:literal) => {
        concat!(",\"", $key, "\":")
    };
}

/// Writes one item as `claw_memory_item_to_json` does:
/// `{"id":..,"source":..,"content":..,"tags":..,"keywords":..,"created_at":..,
/// "updated_at":..,"access_count":..,"deleted":false,"summary_ids":[..],
/// "summary_labels":[..]}`. `summary_ids` gives each label's id, in the
/// order of the item's labels (the store gives a label's 1-based place in
/// the catalog, the id ESP-Claw's compaction gives it).
#[cfg_attr(not(feature = "memory"), allow(dead_code))]
#[inline(never)]
pub(crate) fn write_item_json(w: &mut dyn Write, item: &Item, summary_ids: &[u16]) -> fmt::Result {
    // The id's text form: the prefix in the literal, then the number.
    w.write_str(concat!("{\"id\":\"", id_prefix!()))?;
    write_u32(w, item.id().get())?;
    // The id's closing quote, then the first key.
    string_field(w, concat!("\"", key!("source")), item.source())?;
    string_field(w, key!("content"), item.content())?;
    string_field(w, key!("tags"), item.tags())?;
    string_field(w, key!("keywords"), item.keywords())?;
    number_field(w, key!("created_at"), item.created_at())?;
    number_field(w, key!("updated_at"), item.updated_at())?;
    number_field(w, key!("access_count"), item.access_count().into())?;
    w.write_str(",\"deleted\":false,\"summary_ids\":[")?;
    for (k, id) in summary_ids.iter().enumerate() {
        if k > 0 {
            w.write_char(',')?;
        }
        write_u32(w, (*id).into())?;
    }
    write_labels_json(w, "],\"summary_labels\":[", item.labels(), "]}")
}

/// Writes `key` (`,"<key>":`, from `key!`) and `"value"`.
fn string_field(w: &mut dyn Write, key: &str, value: &str) -> fmt::Result {
    w.write_str(key)?;
    write_json_string(w, value)
}

/// Writes `key` (`,"<key>":`, from `key!`) and `value`, a whole number as
/// cJSON prints one.
fn number_field(w: &mut dyn Write, key: &str, value: u32) -> fmt::Result {
    w.write_str(key)?;
    write_u32(w, value)
}

/// Writes the opening of the invalid-label reply, up to and including the
/// `[` of `available_summary_labels`
/// (`cap_memory_render_invalid_summary_labels`). The caller writes the
/// labels, comma-separated JSON strings, and `]}`.
#[cfg_attr(not(feature = "memory"), allow(dead_code))]
pub(crate) fn write_invalid_label_head(w: &mut dyn Write, label: &str) -> fmt::Result {
    // [`INVALID_LABELS_ERROR`] and [`INVALID_LABELS_MESSAGE`] in one
    // literal.
    w.write_str(concat!(
        "{\"ok\":false,\"error\":\"",
        invalid_labels_error!(),
        "\",\"message\":\"",
        invalid_labels_message!(),
        "\",\"invalid_label\":"
    ))?;
    write_json_string(w, label)?;
    w.write_str(",\"available_summary_labels\":[")
}

#[cfg(test)]
mod tests {
    extern crate std;

    use std::string::String;

    use super::*;
    use crate::memory::{ItemInput, LabelLimit};

    fn item() -> Item {
        let input = ItemInput::new("User said \"hi\"\n\tand\u{1} left / 中")
            .tags("drinks, tea")
            .keywords("hi");
        Item::new(ItemId::new(7), &input, 4_000_000_000, LabelLimit::DEFAULT).unwrap()
    }

    #[test]
    fn an_item_is_written_as_cjson_prints_it() {
        let mut out = String::new();
        write_item_json(&mut out, &item(), &[1, 2]).unwrap();
        assert_eq!(
            out,
            "{\"id\":\"mem-7\",\"source\":\"manual\",\"content\":\"User said \\\"hi\\\"\\n\\tand\\u0001 left / 中\",\
             \"tags\":\"drinks,tea\",\"keywords\":\"hi,drinks,tea\",\"created_at\":4000000000,\"updated_at\":4000000000,\
             \"access_count\":0,\"deleted\":false,\"summary_ids\":[1,2],\"summary_labels\":[\"drinks\",\"tea\"]}"
        );
    }

    #[test]
    fn write_replies_name_the_item_and_its_first_label() {
        let mut out = String::new();
        write_memory_reply_json(&mut out, MemoryAction::Forget, &item(), true).unwrap();
        assert_eq!(
            out,
            "{\"ok\":true,\"action\":\"memory_forget\",\"changed\":true,\"memory_id\":\"mem-7\",\"summary\":\"drinks\"}"
        );
        let bare = Item::new(ItemId::new(3), &ItemInput::new("x"), 0, LabelLimit::DEFAULT).unwrap();
        let mut out = String::new();
        write_memory_reply_json(&mut out, MemoryAction::Store, &bare, false).unwrap();
        let summary = bare.labels().first().map(|l| l.as_str());
        match summary {
            None => assert_eq!(
                out,
                "{\"ok\":true,\"action\":\"memory_store\",\"changed\":false,\"memory_id\":\"mem-3\"}"
            ),
            Some(s) => assert!(out.ends_with(&std::format!(",\"summary\":\"{s}\"}}"))),
        }
    }

    #[test]
    fn the_invalid_label_head_escapes_the_label() {
        let mut out = String::new();
        write_invalid_label_head(&mut out, "a\"b").unwrap();
        assert_eq!(
            out,
            "{\"ok\":false,\"error\":\"invalid_summary_labels\",\"message\":\"summary_labels must be copied exactly \
             from the current memory summary label catalog\",\"invalid_label\":\"a\\\"b\",\"available_summary_labels\":["
        );
    }
}
