//! The summary label catalog: every label carried by an active item, with
//! the number of active items that carry it.
//!
//! This mirrors the `summaries` array of ESP-Claw's `memory_index.json`
//! (`components/claw_modules/claw_memory/src/claw_memory_storage.c`:
//! `claw_memory_ensure_summary_label`, `claw_memory_adjust_summary_stats`,
//! `claw_memory_remove_unused_summaries`). Labels keep their insertion order,
//! which is the order the prompt and `MEMORY.md` list them in; a label leaves
//! as soon as its count drops to zero. Capacity is a const generic: no heap.
//!
//! The catalog is derived state: the storage layer can always rebuild it
//! from the active items ([`LabelCatalog::rebuild`]), so a lost or damaged
//! catalog never loses memory.

use core::fmt::{self, Write};

use super::item::{Item, Label};
use super::render::write_label_lines;
use super::text::{to_fixed, write_json_string};
use super::LABEL_MAX_BYTES;

/// Why a catalog operation failed.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum CatalogError {
    /// A new label does not fit: the catalog holds its capacity of labels.
    Full,
    /// The label is empty.
    EmptyLabel,
    /// The label is longer than [`LABEL_MAX_BYTES`].
    LabelTooLong,
    /// The label is not in the catalog.
    NotFound,
}

impl fmt::Display for CatalogError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Self::Full => "summary label catalog is full",
            Self::EmptyLabel => "summary label is empty",
            Self::LabelTooLong => "summary label is too long",
            Self::NotFound => "summary label is not in the catalog",
        })
    }
}

/// One catalog entry: a label and how many active items carry it (at least
/// one).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct CatalogEntry {
    label: Label,
    refs: u16,
}

impl CatalogEntry {
    /// The label.
    pub fn label(&self) -> &str {
        &self.label
    }

    /// How many active items carry it.
    pub fn refs(&self) -> u16 {
        self.refs
    }
}

/// Longest label an [`UnknownLabel`] error reproduces; longer requests are
/// cut (on a character boundary).
pub const UNKNOWN_LABEL_MAX_BYTES: usize = 64;

/// A recall asked for a label that is not in the catalog. Labels must be
/// copied exactly from the catalog; this error names the label and can
/// render the available ones, from which the model corrects itself.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct UnknownLabel {
    label: heapless::String<UNKNOWN_LABEL_MAX_BYTES>,
}

impl UnknownLabel {
    /// The error for `label`.
    pub fn new(label: &str) -> Self {
        Self {
            label: to_fixed(label),
        }
    }

    /// The unknown label (cut to [`UNKNOWN_LABEL_MAX_BYTES`]).
    pub fn label(&self) -> &str {
        &self.label
    }

    /// Writes the message for the model, naming the label and listing the
    /// catalog in the prompt's format:
    ///
    /// ```text
    /// Unknown summary label "dietary". Summary labels must be copied verbatim from the catalog below.
    /// Summary label catalog:
    /// - dietary_preferences
    /// - health
    /// ```
    ///
    /// (`- (empty)` when there are no labels.) ESP-Claw's recall silently
    /// ignores unknown labels; the wording here is clawmem's.
    pub fn write_with_catalog<'a, W, I>(&self, w: &mut W, available: I) -> fmt::Result
    where
        W: Write,
        I: IntoIterator<Item = &'a str>,
    {
        w.write_str("Unknown summary label ")?;
        write_json_string(w, &self.label)?;
        w.write_str(
            ". Summary labels must be copied verbatim from the catalog below.\n\
             Summary label catalog:\n",
        )?;
        write_label_lines(w, available)
    }
}

impl fmt::Display for UnknownLabel {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("unknown summary label ")?;
        write_json_string(f, &self.label)
    }
}

/// The label catalog, holding at most `N` labels.
///
/// `N` = [`MAX_CATALOG_LABELS`](super::MAX_CATALOG_LABELS) can never fill up
/// under the 128-item limit.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct LabelCatalog<const N: usize> {
    entries: heapless::Vec<CatalogEntry, N>,
}

impl<const N: usize> Default for LabelCatalog<N> {
    fn default() -> Self {
        Self::new()
    }
}

impl<const N: usize> LabelCatalog<N> {
    /// An empty catalog.
    pub const fn new() -> Self {
        Self {
            entries: heapless::Vec::new(),
        }
    }

    /// The catalog of `items` (the active items, in record order): what
    /// compaction rebuilds. Fails with [`CatalogError::Full`] if they carry
    /// more than `N` distinct labels.
    pub fn rebuild<'a, I>(items: I) -> Result<Self, CatalogError>
    where
        I: IntoIterator<Item = &'a Item>,
    {
        let mut catalog = Self::new();
        for item in items {
            catalog.add_item(item)?;
        }
        Ok(catalog)
    }

    /// Number of labels.
    pub fn len(&self) -> usize {
        self.entries.len()
    }

    /// Whether there are no labels.
    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }

    /// Maximum number of labels (`N`).
    pub const fn capacity(&self) -> usize {
        N
    }

    /// Removes every label.
    pub fn clear(&mut self) {
        self.entries.clear();
    }

    fn position(&self, label: &str) -> Option<usize> {
        self.entries.iter().position(|e| e.label == label)
    }

    /// How many active items carry `label`, or `None` if it is not in the
    /// catalog.
    pub fn refs(&self, label: &str) -> Option<u16> {
        self.position(label)
            .and_then(|i| self.entries.get(i))
            .map(|e| e.refs)
    }

    /// Whether `label` is in the catalog (exact match).
    pub fn contains(&self, label: &str) -> bool {
        self.position(label).is_some()
    }

    /// The entries in catalog order (insertion order).
    pub fn iter(&self) -> impl Iterator<Item = &CatalogEntry> {
        self.entries.iter()
    }

    /// The labels in catalog order.
    pub fn labels(&self) -> impl Iterator<Item = &str> + Clone {
        self.entries.iter().map(|e| e.label.as_str())
    }

    /// The labels with their counts in catalog order, as
    /// [`write_memory_md`](super::write_memory_md) takes them.
    pub fn counts(&self) -> impl Iterator<Item = (&str, u16)> + Clone {
        self.entries.iter().map(|e| (e.label.as_str(), e.refs))
    }

    /// Adds one reference to `label`, appending it with count 1 if new.
    /// Returns the new count (saturating at `u16::MAX`).
    pub fn add_ref(&mut self, label: &str) -> Result<u16, CatalogError> {
        if label.is_empty() {
            return Err(CatalogError::EmptyLabel);
        }
        if label.len() > LABEL_MAX_BYTES {
            return Err(CatalogError::LabelTooLong);
        }
        if let Some(entry) = self.entries.iter_mut().find(|e| e.label == label) {
            entry.refs = entry.refs.saturating_add(1);
            return Ok(entry.refs);
        }
        self.entries
            .push(CatalogEntry {
                label: to_fixed(label),
                refs: 1,
            })
            .map_err(|_| CatalogError::Full)?;
        Ok(1)
    }

    /// Removes one reference from `label` and returns the remaining count;
    /// at 0 the label leaves the catalog (the others keep their order).
    pub fn remove_ref(&mut self, label: &str) -> Result<u16, CatalogError> {
        let index = self.position(label).ok_or(CatalogError::NotFound)?;
        let Some(entry) = self.entries.get_mut(index) else {
            return Err(CatalogError::NotFound);
        };
        entry.refs = entry.refs.saturating_sub(1);
        let remaining = entry.refs;
        if remaining == 0 {
            // `index` is in bounds: `position` found it.
            self.entries.remove(index);
        }
        Ok(remaining)
    }

    /// Adds a reference for each label of a newly stored item. All or
    /// nothing: if the new labels do not fit, nothing changes and the result
    /// is [`CatalogError::Full`].
    pub fn add_item(&mut self, item: &Item) -> Result<(), CatalogError> {
        let new_labels = item.labels().iter().filter(|l| !self.contains(l)).count();
        if self.len().saturating_add(new_labels) > N {
            return Err(CatalogError::Full);
        }
        for label in item.labels() {
            self.add_ref(label)?;
        }
        Ok(())
    }

    /// Removes a reference for each label of a forgotten (or evicted) item.
    /// Labels missing from the catalog are skipped, as in ESP-Claw.
    pub fn remove_item(&mut self, item: &Item) {
        for label in item.labels() {
            // A missing label is already in the state we want.
            let _ = self.remove_ref(label);
        }
    }

    /// Checks recall query labels: the first one not in the catalog is
    /// returned as an [`UnknownLabel`] error.
    pub fn check_labels(&self, labels: &[&str]) -> Result<(), UnknownLabel> {
        match labels.iter().find(|l| !self.contains(l)) {
            Some(unknown) => Err(UnknownLabel::new(unknown)),
            None => Ok(()),
        }
    }
}

#[cfg(test)]
mod tests {
    extern crate std;
    use std::string::{String, ToString};
    use std::vec::Vec;

    use super::super::item::{ItemId, ItemInput, LabelLimit};
    use super::*;

    fn item(id: u32, tags: &str) -> Item {
        Item::new(
            ItemId::new(id),
            &ItemInput::new("content").tags(tags),
            0,
            LabelLimit::DEFAULT,
        )
        .unwrap()
    }

    fn labels<const N: usize>(c: &LabelCatalog<N>) -> Vec<(String, u16)> {
        c.counts().map(|(l, n)| (l.to_string(), n)).collect()
    }

    #[test]
    fn refcounts_grow_shrink_and_labels_leave_at_zero() {
        let mut c = LabelCatalog::<8>::new();
        assert!(c.is_empty());
        assert_eq!(c.capacity(), 8);
        assert_eq!(c.add_ref("food"), Ok(1));
        assert_eq!(c.add_ref("city"), Ok(1));
        assert_eq!(c.add_ref("food"), Ok(2));
        assert_eq!(c.add_ref("music"), Ok(1));
        assert_eq!(c.refs("food"), Some(2));
        assert_eq!(c.refs("nope"), None);
        assert_eq!(c.remove_ref("city"), Ok(0));
        assert!(!c.contains("city"));
        // Order of the rest is kept.
        assert_eq!(
            labels(&c),
            [("food".to_string(), 2), ("music".to_string(), 1)]
        );
        assert_eq!(c.remove_ref("food"), Ok(1));
        assert_eq!(c.remove_ref("city"), Err(CatalogError::NotFound));
        assert_eq!(c.add_ref(""), Err(CatalogError::EmptyLabel));
        assert_eq!(c.add_ref(&"x".repeat(33)), Err(CatalogError::LabelTooLong));
        // Re-added labels go to the end.
        assert_eq!(c.add_ref("city"), Ok(1));
        assert_eq!(c.labels().collect::<Vec<_>>(), ["food", "music", "city"]);
        c.clear();
        assert!(c.is_empty());
    }

    #[test]
    fn items_add_and_remove_all_their_labels() {
        let mut c = LabelCatalog::<8>::new();
        let a = item(1, "food, health");
        let b = item(2, "health; city");
        c.add_item(&a).unwrap();
        c.add_item(&b).unwrap();
        assert_eq!(
            labels(&c),
            [
                ("food".to_string(), 1),
                ("health".to_string(), 2),
                ("city".to_string(), 1)
            ]
        );
        c.remove_item(&a);
        assert_eq!(
            labels(&c),
            [("health".to_string(), 1), ("city".to_string(), 1)]
        );
        c.remove_item(&item(9, "zzz, food")); // labels not in the catalog: skipped
        assert_eq!(c.len(), 2);
        assert_eq!(LabelCatalog::<8>::rebuild([&b]).unwrap(), c);
    }

    #[test]
    fn full_catalog_rejects_new_labels_atomically() {
        let mut c = LabelCatalog::<2>::new();
        c.add_item(&item(1, "a")).unwrap();
        assert_eq!(c.add_item(&item(2, "a, b, c")), Err(CatalogError::Full));
        assert_eq!(labels(&c), [("a".to_string(), 1)]);
        c.add_item(&item(3, "a, b")).unwrap();
        assert_eq!(c.add_ref("z"), Err(CatalogError::Full));
        assert_eq!(c.add_ref("b"), Ok(2));
        assert_eq!(
            LabelCatalog::<1>::rebuild([&item(1, "a,b")]),
            Err(CatalogError::Full)
        );
    }

    #[test]
    fn refcount_saturates() {
        let mut c = LabelCatalog::<1>::new();
        for _ in 0..u16::MAX {
            c.add_ref("a").unwrap();
        }
        assert_eq!(c.add_ref("a"), Ok(u16::MAX));
    }

    #[test]
    fn unknown_label_names_it_and_lists_the_catalog() {
        let mut c = LabelCatalog::<4>::new();
        c.add_ref("dietary_preferences").unwrap();
        c.add_ref("health").unwrap();
        assert_eq!(c.check_labels(&["health", "dietary_preferences"]), Ok(()));
        assert_eq!(c.check_labels(&[]), Ok(()));
        let err = c.check_labels(&["health", "dietary"]).unwrap_err();
        assert_eq!(err.label(), "dietary");
        assert_eq!(err.to_string(), "unknown summary label \"dietary\"");
        let mut out = String::new();
        err.write_with_catalog(&mut out, c.labels()).unwrap();
        assert_eq!(
            out,
            "Unknown summary label \"dietary\". Summary labels must be copied verbatim from the catalog below.\n\
             Summary label catalog:\n\
             - dietary_preferences\n\
             - health\n"
        );
        let mut out = String::new();
        UnknownLabel::new("x\"y")
            .write_with_catalog(&mut out, LabelCatalog::<1>::new().labels())
            .unwrap();
        assert!(out.starts_with("Unknown summary label \"x\\\"y\"."));
        assert!(out.ends_with("Summary label catalog:\n- (empty)\n"));
        let long = "中".repeat(30);
        assert_eq!(UnknownLabel::new(&long).label().len(), 63);
    }
}
