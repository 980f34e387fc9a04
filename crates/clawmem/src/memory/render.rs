//! Text that long-term memory shows the model and the user, written into any
//! [`core::fmt::Write`] without allocating: the full-mode catalog prompt,
//! `MEMORY.md` (lite mode), the per-request stage note, and the timestamp
//! format they use.
//!
//! Texts and layouts are ESP-Claw's (`components/claw_modules/claw_memory/src/`:
//! `claw_memory.c` `claw_memory_long_term_collect` for the prompt,
//! `claw_memory_storage.c` `claw_memory_export_markdown_internal` and
//! `claw_memory_format_timestamp` for `MEMORY.md`, `claw_memory_utils.c`
//! `claw_memory_format_update_stage_note` for the stage note). ESP-Claw
//! renders into fixed buffers and silently truncates; these functions write
//! everything and report only the writer's own error.

use core::fmt::{self, Write};

use super::item::{id_prefix, Item, ItemId, Label};
use super::text::{push_label, write_json_string};
use super::CatalogError;

/// ESP-Claw's fixed English preamble of the full-mode long-term memory
/// context, ending with the `Summary label catalog:` line.
pub const LONG_TERM_PREAMBLE: &str = "\
The auto-injected long-term memory context only contains summary labels, not full memory bodies.
Use exact summary labels with memory_recall when you need detailed long-term memory.
Summary labels must be copied verbatim from the catalog below. Do not invent new labels.
If the user asks what you remember about them, what they like or prefer, or asks you to verify a remembered fact, call memory_recall before answering when any relevant summary label is present.
If the user asks you to forget a remembered item, first inspect memory_id with memory_recall or memory_list, then call memory_forget with that exact memory_id.
If the user asks you to update a remembered item and any relevant summary label exists, first choose the most relevant summary labels from this catalog, call memory_recall to inspect the original memory bodies and memory_id values, then call memory_update with the selected memory_id.
Do not rely on session history alone for those recall questions, because long-term memory may contain additional facts not visible in the recent chat.
Do not treat /memory/MEMORY.md or raw memory files as the retrieval source of truth.
Do not mention internal memory policy, storage behavior, auto-extraction, or whether you will or will not remember something unless the user explicitly asks about memory behavior.
Summary label catalog:
";

/// The catalog line written when there are no labels.
pub const CATALOG_EMPTY_LINE: &str = "- (empty)\n";

// Two texts of `MEMORY.md` as literals, for the store's writes of them with
// what follows them (`concat!`).
macro_rules! memory_md_title {
    () => {
        "# Long-term Memory"
    };
}
macro_rules! memory_md_empty_line {
    () => {
        "(empty - Claw will write memories here as it learns)"
    };
}
#[cfg(feature = "memory")]
pub(crate) use {memory_md_empty_line, memory_md_title};

/// The first line of `MEMORY.md`.
pub const MEMORY_MD_TITLE: &str = memory_md_title!();

/// The line `MEMORY.md` shows instead of the item list when there are no
/// active items (as ESP-Claw's export writes it; the file ESP-Claw creates at
/// first boot says `ESP-Claw` instead of `Claw`).
pub const MEMORY_MD_EMPTY_LINE: &str = memory_md_empty_line!();

/// Writes one `- <label>` line per label, or [`CATALOG_EMPTY_LINE`].
pub(crate) fn write_label_lines<'a, W, I>(w: &mut W, labels: I) -> fmt::Result
where
    W: Write,
    I: IntoIterator<Item = &'a str>,
{
    let mut any = false;
    for label in labels {
        any = true;
        writeln!(w, "- {label}")?;
    }
    if !any {
        w.write_str(CATALOG_EMPTY_LINE)?;
    }
    Ok(())
}

/// Writes the full-mode long-term memory context: [`LONG_TERM_PREAMBLE`],
/// then one `- <label>` line per catalog label in catalog order, or
/// `- (empty)`.
pub fn write_catalog_prompt<'a, W, I>(w: &mut W, labels: I) -> fmt::Result
where
    W: Write,
    I: IntoIterator<Item = &'a str>,
{
    w.write_str(LONG_TERM_PREAMBLE)?;
    write_label_lines(w, labels)
}

/// Writes `MEMORY.md`, the lite-mode context and human-readable export:
///
/// ```text
/// # Long-term Memory
///
/// ## Summary Labels
///
/// - drinks (refs=1)
///
/// ## Active Memories
///
/// - `mem-7` User likes green tea
///   time=2023-11-14 22:13:20 access=2 labels=["drinks"]
/// ```
///
/// `catalog` gives the labels with their counts in catalog order (the
/// section is left out when it is empty); `items` the active items, which
/// the caller passes in recall order ([`recall_cmp`](super::recall_cmp)). With
/// no items the list is replaced by [`MEMORY_MD_EMPTY_LINE`]. Times are UTC
/// (see [`Timestamp`]); labels are a JSON array as cJSON prints it.
pub fn write_memory_md<'l, 'i, W, L, I>(w: &mut W, catalog: L, items: I) -> fmt::Result
where
    W: Write,
    L: IntoIterator<Item = (&'l str, u16)>,
    I: IntoIterator<Item = &'i Item>,
{
    writeln!(w, "{MEMORY_MD_TITLE}\n")?;
    let mut catalog = catalog.into_iter().peekable();
    if catalog.peek().is_some() {
        w.write_str("## Summary Labels\n\n")?;
        for (label, refs) in catalog {
            writeln!(w, "- {label} (refs={refs})")?;
        }
        w.write_char('\n')?;
    }
    let mut items = items.into_iter().peekable();
    if items.peek().is_none() {
        return writeln!(w, "{MEMORY_MD_EMPTY_LINE}");
    }
    w.write_str("## Active Memories\n\n")?;
    for item in items {
        write_memory_md_item(w, item)?;
    }
    Ok(())
}

/// Writes one item's two `MEMORY.md` lines (`` - `<id>` <content> `` and
/// `  time=... access=<n> labels=[...]`), for callers that render items one
/// at a time.
pub fn write_memory_md_item<W: Write>(w: &mut W, item: &Item) -> fmt::Result {
    write_md_item(w, item)
}

/// [`write_memory_md_item`], compiled once whatever the writer, in plain
/// pieces (no formatter machinery).
#[inline(never)]
pub(crate) fn write_md_item(w: &mut dyn Write, item: &Item) -> fmt::Result {
    // The id's text form: the prefix in the literal, then the number.
    w.write_str(concat!("- `", id_prefix!()))?;
    write_u32(w, item.id().get())?;
    w.write_str("` ")?;
    w.write_str(item.content())?;
    w.write_str("\n  time=")?;
    Timestamp(item.updated_at()).write_to(w)?;
    w.write_str(" access=")?;
    write_u32(w, item.access_count().into())?;
    write_labels_json(w, " labels=[", item.labels(), "]\n")
}

/// Writes labels as a compact JSON array (`["a","b"]`, `[]`), after `open`
/// (what precedes it, and its `[`) and before `close` (its `]`, and what
/// follows it): one write each.
pub(crate) fn write_labels_json(
    w: &mut dyn Write,
    open: &str,
    labels: &[Label],
    close: &str,
) -> fmt::Result {
    w.write_str(open)?;
    for (i, label) in labels.iter().enumerate() {
        if i > 0 {
            w.write_char(',')?;
        }
        write_json_string(w, label)?;
    }
    w.write_str(close)
}

/// Writes `v` in decimal, out of line: each `write!` with an argument
/// costs its own call of the formatter, this one is shared.
#[inline(never)]
pub(crate) fn write_u32(w: &mut dyn Write, v: u32) -> fmt::Result {
    write!(w, "{v}")
}

/// Writes an item id's text form, `mem-<n>` (as its `Display` does).
#[inline(never)]
pub(crate) fn write_id(w: &mut dyn Write, id: ItemId) -> fmt::Result {
    w.write_str(ItemId::PREFIX)?;
    write_u32(w, id.get())
}

/// A time in seconds since the Unix epoch, displayed as
/// `YYYY-MM-DD HH:MM:SS` in UTC, or `-` for 0 (unknown), like ESP-Claw's
/// `claw_memory_format_timestamp` (which uses the device's local time zone;
/// clawmem has none and uses UTC).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Timestamp(pub u32);

impl fmt::Display for Timestamp {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        self.write_to(f)
    }
}

impl Timestamp {
    /// What `Display` writes, into any writer (compiled once).
    #[inline(never)]
    pub(crate) fn write_to(self, f: &mut dyn Write) -> fmt::Result {
        if self.0 == 0 {
            return f.write_str("-");
        }
        // Digits by hand, in u32 (a u32 of seconds keeps every step in
        // range): no formatter machinery and no 64-bit division.
        let secs = self.0;
        let (year, month, day) = civil_from_days(secs / 86_400);
        let of_day = secs % 86_400;
        let mut b = *b"0000-00-00 00:00:00";
        // From the end: the digits of each field (its leading ones dropped
        // if it is too long), the next field after each separator.
        let fields = [
            of_day % 60,
            of_day % 3600 / 60,
            of_day / 3600,
            day,
            month,
            year,
        ];
        let (mut k, mut v) = (0, fields[0]);
        for d in b.iter_mut().rev() {
            if *d == b'0' {
                *d += (v % 10) as u8;
                v /= 10;
            } else {
                k += 1;
                v = fields.get(k).copied().unwrap_or(0);
            }
        }
        // Only ASCII digits and separators were written.
        f.write_str(core::str::from_utf8(&b).map_err(|_| fmt::Error)?)
    }
}

/// The proleptic Gregorian date of a day count since 1970-01-01 (Howard
/// Hinnant's `civil_from_days`, restricted to non-negative days, which is
/// all a `u32` of seconds reaches: every step stays within a `u32`).
fn civil_from_days(days: u32) -> (u32, u32, u32) {
    let z = days + 719_468;
    let era = z / 146_097;
    let doe = z % 146_097;
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let day = doy - (153 * mp + 2) / 5 + 1;
    let month = if mp < 10 { mp + 3 } else { mp - 9 };
    let year = yoe + era * 400 + u32::from(month <= 2);
    (year, month, day)
}

/// The labels that memory writes touched during one request, deduplicated in
/// first-touch order, for the stage note `Memory update: [a;b]` (ESP-Claw's
/// pending summary list and `claw_memory_format_update_stage_note`). Holds at
/// most `N` labels.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct StageNote<const N: usize> {
    labels: heapless::Vec<Label, N>,
}

impl<const N: usize> StageNote<N> {
    /// An empty note.
    pub const fn new() -> Self {
        Self {
            labels: heapless::Vec::new(),
        }
    }

    /// Records that a write touched `label`. Empty labels and repeats are
    /// ignored; a new label beyond `N` is [`CatalogError::Full`], and one
    /// longer than a label can be is [`CatalogError::LabelTooLong`].
    pub fn note(&mut self, label: &str) -> Result<(), CatalogError> {
        if label.is_empty() || self.labels.iter().any(|l| l == label) {
            return Ok(());
        }
        if label.len() > super::LABEL_MAX_BYTES {
            return Err(CatalogError::LabelTooLong);
        }
        if push_label(self.labels.as_mut_view(), label) {
            Ok(())
        } else {
            Err(CatalogError::Full)
        }
    }

    /// Records every label of an item that a write stored (or changed).
    pub fn note_item(&mut self, item: &Item) -> Result<(), CatalogError> {
        item.labels().iter().try_for_each(|l| self.note(l))
    }

    /// Whether no write touched a label.
    pub fn is_empty(&self) -> bool {
        self.labels.is_empty()
    }

    /// Number of labels noted.
    pub fn len(&self) -> usize {
        self.labels.len()
    }

    /// The noted labels, in first-touch order.
    pub fn labels(&self) -> impl Iterator<Item = &str> {
        self.labels.iter().map(|l| l.as_str())
    }

    /// Forgets all labels (at the start of the next request).
    pub fn clear(&mut self) {
        self.labels.clear();
    }

    /// Writes `Memory update: [label1;label2]` and returns `true`; writes
    /// nothing and returns `false` when no label was noted (ESP-Claw then
    /// sends no note).
    pub fn write_to<W: Write>(&self, w: &mut W) -> Result<bool, fmt::Error> {
        if self.labels.is_empty() {
            return Ok(false);
        }
        w.write_str("Memory update: [")?;
        for (i, label) in self.labels.iter().enumerate() {
            if i > 0 {
                w.write_char(';')?;
            }
            w.write_str(label)?;
        }
        w.write_char(']')?;
        Ok(true)
    }
}

#[cfg(test)]
mod tests {
    extern crate std;
    use std::string::{String, ToString};

    use super::super::item::{ItemId, ItemInput, LabelLimit};
    use super::super::LabelCatalog;
    use super::*;

    fn item(id: u32, content: &str, tags: &str, at: u32) -> Item {
        Item::new(
            ItemId::new(id),
            &ItemInput::new(content).tags(tags),
            at,
            LabelLimit::DEFAULT,
        )
        .unwrap()
    }

    #[test]
    fn catalog_prompt_exact_text() {
        let mut out = String::new();
        write_catalog_prompt(&mut out, ["drinks", "city"]).unwrap();
        let tail = "Summary label catalog:\n- drinks\n- city\n";
        assert!(out.starts_with(
            "The auto-injected long-term memory context only contains summary labels, not full memory bodies.\n\
             Use exact summary labels with memory_recall"
        ));
        assert!(out.ends_with(tail));
        assert_eq!(
            out.len(),
            LONG_TERM_PREAMBLE.len() + "- drinks\n- city\n".len()
        );
        assert_eq!(LONG_TERM_PREAMBLE.lines().count(), 10);

        let mut empty = String::new();
        write_catalog_prompt(&mut empty, LabelCatalog::<4>::new().labels()).unwrap();
        assert_eq!(empty, std::format!("{LONG_TERM_PREAMBLE}- (empty)\n"));
    }

    #[test]
    fn memory_md_exact_layout() {
        let mut catalog = LabelCatalog::<8>::new();
        let mut tea = item(7, "User likes green tea", "drinks", 1_700_000_000);
        tea.record_recall(0);
        tea.record_recall(0);
        let city = item(3, "User lives in \"Shanghai\"", "city, home", 0);
        catalog.add_item(&tea).unwrap();
        catalog.add_item(&city).unwrap();

        let mut out = String::new();
        write_memory_md(&mut out, catalog.counts(), [&tea, &city]).unwrap();
        assert_eq!(
            out,
            "# Long-term Memory\n\
             \n\
             ## Summary Labels\n\
             \n\
             - drinks (refs=1)\n\
             - city (refs=1)\n\
             - home (refs=1)\n\
             \n\
             ## Active Memories\n\
             \n\
             - `mem-7` User likes green tea\n  time=2023-11-14 22:13:20 access=2 labels=[\"drinks\"]\n\
             - `mem-3` User lives in \"Shanghai\"\n  time=- access=0 labels=[\"city\",\"home\"]\n"
        );
    }

    #[test]
    fn memory_md_empty_and_label_less() {
        let mut out = String::new();
        write_memory_md(
            &mut out,
            LabelCatalog::<1>::new().counts(),
            [] as [&Item; 0],
        )
        .unwrap();
        assert_eq!(
            out,
            "# Long-term Memory\n\n(empty - Claw will write memories here as it learns)\n"
        );

        let bare = item(1, "x", "", 1);
        let mut out = String::new();
        write_memory_md(&mut out, [] as [(&str, u16); 0], [&bare]).unwrap();
        assert_eq!(
            out,
            "# Long-term Memory\n\n## Active Memories\n\n- `mem-1` x\n  time=1970-01-01 00:00:01 access=0 labels=[]\n"
        );
    }

    #[test]
    fn timestamps() {
        assert_eq!(Timestamp(0).to_string(), "-");
        assert_eq!(Timestamp(1).to_string(), "1970-01-01 00:00:01");
        assert_eq!(Timestamp(951_782_400).to_string(), "2000-02-29 00:00:00");
        assert_eq!(Timestamp(951_868_799).to_string(), "2000-02-29 23:59:59");
        assert_eq!(Timestamp(951_868_800).to_string(), "2000-03-01 00:00:00");
        assert_eq!(Timestamp(1_709_164_800).to_string(), "2024-02-29 00:00:00");
        assert_eq!(Timestamp(1_735_689_599).to_string(), "2024-12-31 23:59:59");
        assert_eq!(Timestamp(u32::MAX).to_string(), "2106-02-07 06:28:15");
    }

    #[test]
    fn stage_note_dedups_in_first_touch_order() {
        let mut note = StageNote::<4>::new();
        let mut out = String::new();
        assert_eq!(note.write_to(&mut out), Ok(false));
        assert_eq!(out, "");

        note.note_item(&item(1, "a", "food, health", 0)).unwrap();
        note.note("health").unwrap();
        note.note("").unwrap();
        note.note("city").unwrap();
        assert_eq!(note.len(), 3);
        assert_eq!(note.write_to(&mut out), Ok(true));
        assert_eq!(out, "Memory update: [food;health;city]");

        note.note("d").unwrap();
        assert_eq!(note.note("e"), Err(CatalogError::Full));
        assert_eq!(note.note("food"), Ok(()));
        assert_eq!(note.note(&"x".repeat(33)), Err(CatalogError::LabelTooLong));
        note.clear();
        assert!(note.is_empty());
        assert_eq!(note.labels().count(), 0);
    }
}
