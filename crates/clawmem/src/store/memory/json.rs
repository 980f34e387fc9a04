//! The JSON replies of ESP-Claw's `memory_recall` and `memory_list` tools,
//! and of a recall with a label not in the catalog, written from flash into
//! the caller's writer (the pieces are `crate::memory::json`'s).
//!
//! Invariants: a reply is built from the active set as it is when the
//! reply starts; nothing here writes to flash but the recall's own access
//! record. The ids of the items to write are held on the stack (4 bytes
//! each, at most the active set); their labels' catalog places are looked
//! up once per [`JSON_CHUNK`] items, by one pass over the catalog.
//!
//! Power loss: as [`Store::memory_recall`]; a list writes nothing.

use super::*;
use crate::memory::{
    write_invalid_label_head, write_item_json, write_reply_head, MemoryAction, RecallReply,
    MAX_SUMMARY_LABELS,
};

/// Items whose labels one catalog pass places.
const JSON_CHUNK: usize = 8;

/// The error a failing writer gives.
const WRITER_FAILED: &str = "the JSON writer failed";

fn wr(r: fmt::Result) -> Result<(), Fail> {
    r.map_err(|_| fail!(InvalidInput, WRITER_FAILED))
}

impl<F: NorFlash, const MAX_SESSIONS: usize, W: BorrowMut<Work>> Store<F, MAX_SESSIONS, W> {
    /// Recalls as [`memory_recall`](Self::memory_recall) does and writes
    /// ESP-Claw's reply into `w`: `{"ok":true,"action":"memory_recall",
    /// "changed":true,"items":[...]}`, each item as
    /// `claw_memory_item_to_json` writes it. A label that is not in the
    /// catalog writes the `invalid_summary_labels` error instead, whose
    /// `available_summary_labels` are the labels of the active items in
    /// list order (`cap_memory_collect_summary_catalog`), and recalls
    /// nothing ([`RecallReply::InvalidLabel`]).
    ///
    /// An item's `summary_ids` are its labels' 1-based places in the
    /// catalog, the ids an ESP-Claw compaction of these items hands out;
    /// its `access_count` includes this recall (clawmem applies counts at
    /// once, ESP-Claw at its next compaction). A writer that fails is
    /// [`Error::InvalidInput`]; the recall has then happened.
    ///
    /// Power loss: as [`memory_recall`](Self::memory_recall).
    pub fn write_memory_recall_json<O: fmt::Write>(
        &mut self,
        w: &mut O,
        labels: &[&str],
        limit: usize,
        now: u32,
    ) -> Result<RecallReply, Error<F::Error>> {
        let r = self.mem_recall_json(w, labels, limit, now);
        self.surface(r)
    }

    /// Writes ESP-Claw's `memory_list` reply into `w`:
    /// `{"ok":true,"action":"memory_list","changed":false,"items":[...]}`,
    /// every active item in list order (as
    /// [`memory_list`](Self::memory_list) gives them), each as
    /// [`write_memory_recall_json`](Self::write_memory_recall_json) writes
    /// it. Returns how many items.
    ///
    /// Power loss: writes nothing to flash.
    pub fn write_memory_list_json<O: fmt::Write>(
        &mut self,
        w: &mut O,
    ) -> Result<usize, Error<F::Error>> {
        let r = self.mem_list_json(w);
        self.surface(r)
    }

    /// [`write_memory_recall_json`](Self::write_memory_recall_json),
    /// compiled once whatever the writer.
    #[inline(never)]
    fn mem_recall_json(
        &mut self,
        w: &mut dyn fmt::Write,
        labels: &[&str],
        limit: usize,
        now: u32,
    ) -> Result<RecallReply, Fail> {
        let mut ids: Vec<u32, ACTIVE_CAP> = Vec::new();
        let recalled = self.memory_recall_dyn(labels, limit, now, &mut |item| {
            // At most the active set is recalled.
            let _ = ids.push(item.id().get());
        })?;
        if let Err(k) = recalled {
            wr(write_invalid_label_head(w, labels[k]))?;
            self.mem_list_labels_json(w)?;
            wr(w.write_str("]}"))?;
            return Ok(RecallReply::InvalidLabel);
        }
        wr(write_reply_head(w, MemoryAction::Recall, true, None, ""))?;
        // The recall may have compacted: the items as they are now.
        self.mem_active(OP)?;
        let n = self.mem_items_json(w, &ids)?;
        Ok(RecallReply::Items(n))
    }

    /// [`write_memory_list_json`](Self::write_memory_list_json), compiled
    /// once whatever the writer.
    #[inline(never)]
    fn mem_list_json(&mut self, w: &mut dyn fmt::Write) -> Result<usize, Fail> {
        self.mem_active_listed()?;
        let mut ids: Vec<u32, ACTIVE_CAP> = Vec::new();
        for a in &self.work.borrow().active[OP] {
            // The set holds at most `ACTIVE_CAP` entries.
            let _ = ids.push(a.id);
        }
        wr(write_reply_head(w, MemoryAction::List, false, None, ""))?;
        self.mem_items_json(w, &ids)
    }

    /// Writes `,"items":[...]}` for the active items `ids`, in that order
    /// (an id no longer active, or a damaged item, is left out), from
    /// active set [`OP`] as read (each catalog pass reads it again, the
    /// same items). Returns how many were written.
    fn mem_items_json(&mut self, w: &mut dyn fmt::Write, ids: &[u32]) -> Result<usize, Fail> {
        const LABELS: usize = JSON_CHUNK * MAX_SUMMARY_LABELS;
        wr(w.write_str(",\"items\":["))?;
        let mut written = 0;
        for chunk in ids.chunks(JSON_CHUNK) {
            // Pass 0 gathers the distinct labels of these items, by hash;
            // one catalog pass places them; pass 1 writes the items.
            let mut hashes = [0u32; LABELS];
            let mut places = [0u16; LABELS];
            let mut n = 0;
            for pass in 0..2 {
                if pass == 1 {
                    let mut place = 0u16;
                    self.memory_catalog_dyn(&mut |l, _| {
                        place = place.saturating_add(1);
                        let h = fnv1a32(l.as_bytes());
                        match hashes[..n].iter().position(|x| *x == h) {
                            Some(k) if places[k] == 0 => places[k] = place,
                            _ => {}
                        }
                        Ok(())
                    })?;
                }
                for &id in chunk {
                    if !self.mem_load_id(id)? {
                        continue;
                    }
                    let item = self.slot(0);
                    let mut summary_ids = [0u16; MAX_SUMMARY_LABELS];
                    let labels = item.labels();
                    for (s, l) in summary_ids.iter_mut().zip(labels) {
                        let h = fnv1a32(l.as_bytes());
                        match hashes[..n].iter().position(|x| *x == h) {
                            Some(k) => *s = places[k],
                            None if pass == 0 && n < LABELS => {
                                hashes[n] = h;
                                n += 1;
                            }
                            None => {}
                        }
                    }
                    if pass == 1 {
                        if written > 0 {
                            wr(w.write_char(','))?;
                        }
                        let count = labels.len().min(MAX_SUMMARY_LABELS);
                        wr(write_item_json(w, item, &summary_ids[..count]))?;
                        written += 1;
                    }
                }
            }
        }
        wr(w.write_str("]}"))?;
        Ok(written)
    }

    /// Loads active item `id` of active set [`OP`] as read into slot 0;
    /// `false` if it is not there or damaged.
    #[inline(always)]
    pub(super) fn mem_load_id(&mut self, id: u32) -> Result<bool, Fail> {
        Ok(self.mem_load_id_word(id)? != 0)
    }

    /// [`Self::mem_load_id`] as a word (1 or 0; see `Io::chunk_crc_ok_word`).
    #[inline(never)]
    fn mem_load_id_word(&mut self, id: u32) -> Result<u32, Fail> {
        match position_of(&self.work.borrow().active[OP], id) {
            Some(k) => self.mem_load_entry_word(OP, k, 0),
            None => Ok(0),
        }
    }

    /// Writes the labels of the active items in list order, each once, as
    /// comma-separated JSON strings: the catalog ESP-Claw's recall checks
    /// labels against.
    fn mem_list_labels_json(&mut self, w: &mut dyn fmt::Write) -> Result<(), Fail> {
        self.mem_active_listed()?;
        let mut first = true;
        self.mem_label_walk(false, &mut |l, _| {
            if !first {
                wr(w.write_char(','))?;
            }
            first = false;
            wr(crate::text::write_json_string(w, l))
        })?;
        Ok(())
    }
}
