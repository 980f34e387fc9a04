//! The rules that relate items to each other: duplicates, the `replace`
//! intent, recall order, merging at compaction and eviction.
//!
//! All are pure functions of item fields, so the storage layer can apply
//! them to items it has just read, in any order, with the same result.
//! Sources (ESP-Claw, `components/claw_modules/claw_memory/src/`):
//! `claw_memory.c` (`claw_memory_store_prepared_item_internal`),
//! `claw_memory_extract.c` (`claw_memory_items_semantically_match`,
//! `claw_memory_items_conflict_for_replacement`) and `claw_memory_storage.c`
//! (`claw_memory_sort_by_priority_desc`, `claw_memory_compact_internal`,
//! `claw_memory_capacity_score`, `claw_memory_trim_to_capacity`).

use core::cmp::Ordering;

use super::item::{Item, ItemId};
use super::text::{contains_str, cut_utf8, lists_overlap, normalize_for_key};
use super::{CONTAINMENT_MIN_BYTES, KEY_MAX_BYTES, MAX_ACTIVE_ITEMS};

/// Why a new item duplicates an existing one. The three kinds are checked in
/// this order; any of them means "duplicate" (nothing is written and the
/// existing item is returned unchanged).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum DuplicateKind {
    /// Both normalized contents are non-empty and equal.
    SameNormalizedContent,
    /// Both keys (first 36 bytes of the normalized content) are non-empty
    /// and equal.
    SameKey,
    /// Both normalized contents are at least [`CONTAINMENT_MIN_BYTES`] long
    /// and one contains the other.
    Containment,
}

/// Whether content `b` duplicates content `a`, and why (see
/// [`DuplicateKind`]). Symmetric. Contents that normalize to nothing (only
/// punctuation and spaces) never duplicate anything.
///
/// The caller compares a new item with every *active* item (ESP-Claw skips
/// deleted ones), skipping the item being updated when the new item is an
/// update's replacement (ESP-Claw's `ignore_existing_id`). As ESP-Claw's
/// `claw_memory_items_semantically_match`, the normalized contents compared
/// are their first [`SEMANTIC_MATCH_BYTES`](super::SEMANTIC_MATCH_BYTES)
/// bytes (`existing_key[160]`): two contents whose normalized forms share
/// those are the same content, and one that contains only the other's
/// prefix contains it.
pub fn duplicate_kind(a: &str, b: &str) -> Option<DuplicateKind> {
    let na = normalize_for_key(a);
    let nb = normalize_for_key(b);
    if na.is_empty() || nb.is_empty() {
        return None;
    }
    if na == nb {
        return Some(DuplicateKind::SameNormalizedContent);
    }
    // The keys, compared in place (`key_of_normalized` without the copies).
    if cut_utf8(&na, KEY_MAX_BYTES) == cut_utf8(&nb, KEY_MAX_BYTES) {
        return Some(DuplicateKind::SameKey);
    }
    let long_enough = na.len() >= CONTAINMENT_MIN_BYTES && nb.len() >= CONTAINMENT_MIN_BYTES;
    if long_enough && (contains_str(&na, &nb) || contains_str(&nb, &na)) {
        return Some(DuplicateKind::Containment);
    }
    None
}

/// Whether the `replace` intent makes `incoming` supersede `existing`
/// (ESP-Claw's `claw_memory_items_conflict_for_replacement`): they are
/// different items, not semantic duplicates (same normalized content or
/// containment; a mere key match still conflicts, as in ESP-Claw), and they
/// share a term between their tags and keywords (any of tags-tags,
/// keywords-keywords, tags-keywords, keywords-tags). The caller forgets
/// every active `existing` for which this holds after storing `incoming`.
pub fn conflicts_for_replace(existing: &Item, incoming: &Item) -> bool {
    if existing.id() == incoming.id() {
        return false;
    }
    if matches!(
        duplicate_kind(existing.content(), incoming.content()),
        Some(DuplicateKind::SameNormalizedContent | DuplicateKind::Containment)
    ) {
        return false;
    }
    lists_overlap(existing.tags(), incoming.tags())
        || lists_overlap(existing.keywords(), incoming.keywords())
        || lists_overlap(existing.tags(), incoming.keywords())
        || lists_overlap(existing.keywords(), incoming.tags())
}

impl Item {
    /// Whether this (new) item duplicates `existing`, and why. See
    /// [`duplicate_kind`].
    pub fn duplicate_of(&self, existing: &Item) -> Option<DuplicateKind> {
        duplicate_kind(existing.content(), self.content())
    }

    /// The fields that order items for recall and eviction.
    pub fn rank(&self) -> ItemRank {
        ItemRank {
            id: self.id(),
            access_count: self.access_count(),
            updated_at: self.updated_at(),
        }
    }
}

/// The three fields that order items, small enough for the storage layer to
/// keep one per active item in RAM.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ItemRank {
    /// The item's id.
    pub id: ItemId,
    /// How often recall has returned it.
    pub access_count: u16,
    /// Last update time in seconds.
    pub updated_at: u32,
}

impl ItemRank {
    /// Recall order: access count descending, then `updated_at` descending,
    /// then id ascending. `Less` means "returned first".
    pub fn recall_cmp(&self, other: &Self) -> Ordering {
        other
            .access_count
            .cmp(&self.access_count)
            .then(other.updated_at.cmp(&self.updated_at))
            .then(self.id.cmp(&other.id))
    }

    /// The eviction score, `access_count * 3 + updated_at / 3600` (see
    /// [`eviction_score`]).
    pub fn eviction_score(&self) -> u64 {
        eviction_score(self.access_count, self.updated_at)
    }

    /// Eviction order: score ascending, then id ascending (ESP-Claw removes
    /// the first lowest-scored item in record order, which is id order).
    /// `Less` means "evicted first".
    pub fn eviction_cmp(&self, other: &Self) -> Ordering {
        // The score in u32: at most 65_535 * 3 + u32::MAX / 3600, which
        // fits, so the order is the u64 score's.
        let score = |r: &Self| u32::from(r.access_count) * 3 + r.updated_at / 3600;
        score(self).cmp(&score(other)).then(self.id.cmp(&other.id))
    }
}

/// Recall (and list, and MEMORY.md) order of two items: access count
/// descending, `updated_at` descending, id ascending. Use with
/// `sort_unstable_by` (ids are unique, so the order is total).
pub fn recall_cmp(a: &Item, b: &Item) -> Ordering {
    a.rank().recall_cmp(&b.rank())
}

/// The eviction score of an item: `access_count * 3 + updated_at / 3600`,
/// computed in `u64` so it cannot overflow. The lowest scores are evicted
/// first.
pub fn eviction_score(access_count: u16, updated_at: u32) -> u64 {
    u64::from(access_count) * 3 + u64::from(updated_at / 3600)
}

/// How many of `active_count` items must be evicted to keep at most
/// `max_active` ([`MAX_ACTIVE_ITEMS`] in ESP-Claw).
pub fn evictions_needed(active_count: usize, max_active: usize) -> usize {
    active_count.saturating_sub(max_active)
}

/// Sorts `ranks` into eviction order and returns the prefix to evict so that
/// at most `max_active` remain (empty if there are not too many). Removing
/// these is exactly what ESP-Claw's one-at-a-time
/// `claw_memory_trim_to_capacity` ends with, since scores do not change.
pub fn select_evictions(ranks: &mut [ItemRank], max_active: usize) -> &[ItemRank] {
    let excess = evictions_needed(ranks.len(), max_active);
    if excess == 0 {
        return &[];
    }
    ranks.sort_unstable_by(ItemRank::eviction_cmp);
    ranks.get(..excess).unwrap_or(&[])
}

/// [`select_evictions`] with ESP-Claw's limit of [`MAX_ACTIVE_ITEMS`].
pub fn select_evictions_default(ranks: &mut [ItemRank]) -> &[ItemRank] {
    select_evictions(ranks, MAX_ACTIVE_ITEMS)
}

/// Merges two active items with the same non-empty key into one, as
/// compaction does (ESP-Claw's `claw_memory_compact_internal`), or `None` if
/// their keys differ or are empty.
///
/// The result keeps the lower id (ESP-Claw keeps the first item in record
/// order), the higher access count, the earliest non-zero `created_at`, and
/// the content of the more recently updated item (on a tie, the lower id's)
/// together with its `updated_at`, tags, labels, source and keywords.
/// ESP-Claw leaves the older item's keywords in place; clawmem takes them
/// with the content they were grounded in. The merge is commutative and
/// associative, so any number of same-key items can be folded in any order.
pub fn merge_same_key(a: &Item, b: &Item) -> Option<Item> {
    let mut merged = a.clone();
    merge_same_key_into(&mut merged, b).then_some(merged)
}

/// [`merge_same_key`] in place: `a` becomes the merged item, and `true`;
/// `false` (and `a` unchanged) if the keys differ or are empty.
pub fn merge_same_key_into(a: &mut Item, b: &Item) -> bool {
    {
        let key = a.key();
        if key.is_empty() || key != b.key() {
            return false;
        }
    }
    // The older item is the one with the lower id; the content comes from
    // the newer one only if it was updated later.
    let take_b = if a.id() <= b.id() {
        b.updated_at() > a.updated_at()
    } else {
        a.updated_at() <= b.updated_at()
    };
    let id = a.id().min(b.id());
    let access_count = a.access_count().max(b.access_count());
    let created_at = match (a.created_at(), b.created_at()) {
        (0, t) | (t, 0) => t,
        (x, y) => x.min(y),
    };
    if take_b {
        a.clone_from(b);
    }
    a.id = id;
    a.access_count = access_count;
    a.created_at = created_at;
    true
}

#[cfg(test)]
mod tests {
    extern crate std;
    use std::vec::Vec;

    use super::super::item::{ItemInput, LabelLimit};
    use super::*;

    fn item(id: u32, content: &str, tags: &str, keywords: &str, at: u32) -> Item {
        Item::new(
            ItemId::new(id),
            &ItemInput::new(content).tags(tags).keywords(keywords),
            at,
            LabelLimit::DEFAULT,
        )
        .unwrap()
    }

    fn ranked(id: u32, access_count: u16, updated_at: u32) -> ItemRank {
        ItemRank {
            id: ItemId::new(id),
            access_count,
            updated_at,
        }
    }

    #[test]
    fn duplicate_same_normalized_content() {
        assert_eq!(
            duplicate_kind("User likes green tea.", "user LIKES green-tea!"),
            Some(DuplicateKind::SameNormalizedContent)
        );
        // CJK and full-width punctuation is ignored too.
        assert_eq!(
            duplicate_kind("用户喜欢绿茶。", "用户，喜欢“绿茶”！"),
            Some(DuplicateKind::SameNormalizedContent)
        );
    }

    #[test]
    fn duplicate_same_key() {
        // Same first 36 normalized bytes, different tails, neither contains the other.
        let a = "The user's favourite programming language is Rust";
        let b = "The user's favourite programming language was C++ before";
        assert_eq!(duplicate_kind(a, b), Some(DuplicateKind::SameKey));
    }

    #[test]
    fn duplicate_containment_needs_twelve_bytes_each() {
        assert_eq!(
            duplicate_kind("Lives in Shanghai", "The user lives in Shanghai, China"),
            Some(DuplicateKind::Containment)
        );
        // "tea" (3 bytes) is contained in the other but too short.
        assert_eq!(duplicate_kind("tea", "likes tea a lot"), None);
        // Exactly 12 normalized bytes on both sides is enough.
        assert_eq!(
            duplicate_kind("abcdefghijkl", "xx abcdefghijkl yy"),
            Some(DuplicateKind::Containment)
        );
        assert_eq!(duplicate_kind("abcdefghijk", "xx abcdefghijk yy"), None);
        // Four CJK characters are 12 bytes.
        assert_eq!(
            duplicate_kind("喜欢绿茶", "用户喜欢绿茶和咖啡"),
            Some(DuplicateKind::Containment)
        );
    }

    #[test]
    fn claw_memory_items_semantically_match_compares_159_bytes() {
        // ESP-Claw normalizes both contents into 160-byte buffers
        // (`existing_key[160]`): 159 bytes, ending before a character that
        // does not fit. a's form is "abc" + 52 CJK (159 bytes) and b's "c" +
        // 52 CJK (157 bytes): the first contains the second, although the
        // whole forms differ in their tails and keys.
        let cjk = "中".repeat(60);
        let a = std::format!("abc{cjk}alpha");
        let b = std::format!("c{cjk}omega");
        assert_eq!(normalize_for_key(&a).len(), 159);
        assert_eq!(normalize_for_key(&b).len(), 157);
        assert_eq!(duplicate_kind(&a, &b), Some(DuplicateKind::Containment));
        assert_eq!(duplicate_kind(&b, &a), Some(DuplicateKind::Containment));
        // Two forms equal in their first 159 bytes are the same content.
        let long = "x".repeat(170);
        let c = std::format!("{long}1");
        let d = std::format!("{long}2");
        assert_eq!(
            duplicate_kind(&c, &d),
            Some(DuplicateKind::SameNormalizedContent)
        );
    }

    #[test]
    fn not_duplicates() {
        assert_eq!(duplicate_kind("likes tea", "likes coffee"), None);
        assert_eq!(duplicate_kind("!!!", "!!!"), None);
        assert_eq!(duplicate_kind("", "x"), None);
        let a = item(1, "User likes tea", "", "", 0);
        let b = item(2, "user likes TEA!", "", "", 0);
        assert_eq!(
            b.duplicate_of(&a),
            Some(DuplicateKind::SameNormalizedContent)
        );
    }

    #[test]
    fn replace_conflicts_need_a_shared_term() {
        let old = item(1, "User lives in Beijing", "city", "Beijing", 0);
        let new = item(2, "User moved to Shanghai", "city", "Shanghai", 0);
        assert!(conflicts_for_replace(&old, &new));
        let other = item(3, "User likes tea", "drinks", "tea", 0);
        assert!(!conflicts_for_replace(&other, &new));
        // keywords vs tags.
        let kw = item(4, "Shanghai weather is humid", "weather", "Shanghai", 0);
        let tagged = item(5, "Shanghai trip planned", "Shanghai", "", 0);
        assert!(conflicts_for_replace(&kw, &tagged));
        // The same item, or a semantic duplicate, never conflicts.
        assert!(!conflicts_for_replace(&new, &new));
        let dup = item(6, "User moved to Shanghai!", "city", "", 0);
        assert!(!conflicts_for_replace(&dup, &new));
    }

    #[test]
    fn recall_order_is_access_desc_updated_desc_id_asc() {
        let mut ranks = [
            ranked(5, 1, 100),
            ranked(2, 3, 50),
            ranked(4, 1, 200),
            ranked(3, 1, 100),
            ranked(1, 0, 999),
        ];
        ranks.sort_unstable_by(ItemRank::recall_cmp);
        let ids: Vec<u32> = ranks.iter().map(|r| r.id.get()).collect();
        assert_eq!(ids, [2, 4, 3, 5, 1]);

        let mut items = [
            item(3, "c", "", "", 10),
            item(1, "a", "", "", 10),
            item(2, "b", "", "", 20),
        ];
        items[1].record_recall(0);
        items.sort_unstable_by(recall_cmp);
        let ids: Vec<u32> = items.iter().map(|i| i.id().get()).collect();
        assert_eq!(ids, [1, 2, 3]);
    }

    #[test]
    fn eviction_score_formula_and_no_overflow() {
        assert_eq!(eviction_score(0, 0), 0);
        assert_eq!(eviction_score(2, 7200), 8);
        assert_eq!(eviction_score(1, 3599), 3);
        let max = eviction_score(u16::MAX, u32::MAX);
        assert_eq!(max, 65_535 * 3 + 4_294_967_295 / 3600);
        assert_eq!(ranked(1, 2, 7200).eviction_score(), 8);
    }

    #[test]
    fn eviction_keeps_at_most_max_active() {
        assert_eq!(evictions_needed(127, MAX_ACTIVE_ITEMS), 0);
        assert_eq!(evictions_needed(128, MAX_ACTIVE_ITEMS), 0);
        assert_eq!(evictions_needed(131, MAX_ACTIVE_ITEMS), 3);

        // 130 items: ids 1..=130, updated an hour apart, none accessed,
        // except id 1 which was recalled often.
        let mut ranks: Vec<ItemRank> = (1..=130u32).map(|i| ranked(i, 0, i * 3600)).collect();
        ranks[0].access_count = 100;
        let victims: Vec<u32> = select_evictions_default(&mut ranks)
            .iter()
            .map(|r| r.id.get())
            .collect();
        assert_eq!(victims, [2, 3]);

        // Ties on score go to the lower id.
        let mut tied = [
            ranked(9, 1, 0),
            ranked(4, 0, 3 * 3600),
            ranked(7, 0, 3 * 3600),
        ];
        let victims: Vec<u32> = select_evictions(&mut tied, 1)
            .iter()
            .map(|r| r.id.get())
            .collect();
        assert_eq!(victims, [4, 7]);

        let mut few = [ranked(1, 0, 0)];
        assert!(select_evictions(&mut few, 1).is_empty());
        assert!(select_evictions(&mut [], 0).is_empty());
    }

    #[test]
    fn merge_takes_max_access_newest_content_earliest_creation() {
        let mut old = item(3, "User likes green tea", "drinks", "tea", 1000);
        old.set_access_count(5);
        let mut newer = item(8, "User likes green tea!!", "beverage", "green", 2000);
        newer.set_access_count(2);
        newer.created_at = 500;

        let merged = merge_same_key(&old, &newer).unwrap();
        assert_eq!(merged.id(), ItemId::new(3));
        assert_eq!(merged.access_count(), 5);
        assert_eq!(merged.created_at(), 500);
        assert_eq!(merged.updated_at(), 2000);
        assert_eq!(merged.content(), "User likes green tea!!");
        assert_eq!(merged.tags(), "beverage");
        assert_eq!(merged.labels()[0], "beverage");
        // Commutative.
        assert_eq!(merge_same_key(&newer, &old).unwrap(), merged);

        // A zero created_at is "unknown", not the earliest.
        let mut unknown = newer.clone();
        unknown.created_at = 0;
        assert_eq!(merge_same_key(&old, &unknown).unwrap().created_at(), 1000);

        // On equal updated_at the lower id's content wins.
        let mut tie = newer.clone();
        tie.updated_at = 1000;
        assert_eq!(
            merge_same_key(&tie, &old).unwrap().content(),
            "User likes green tea"
        );

        // Different keys do not merge.
        let other = item(9, "User likes black coffee", "", "", 0);
        assert_eq!(merge_same_key(&old, &other), None);
        let blank = item(10, "!!!", "", "", 0);
        assert_eq!(merge_same_key(&blank, &blank), None);
    }
}
