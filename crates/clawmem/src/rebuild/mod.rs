//! Rebuilding an ESP-Claw session index (`.log.idx`) from its log (`.log`),
//! instead of wiping the session as ESP-Claw does.
//!
//! This module owns three things: splitting a log into records
//! ([`segments`]), recognising each record's type and backend format from its
//! JSON ([`infer_record`], [`entries`]), and writing a complete
//! [`chdx`](crate::chdx) index for them ([`rebuild_index`]). [`repair`]
//! decides whether an existing index can be kept.
//!
//! # What ESP-Claw writes
//!
//! Read from `components/claw_modules/claw_memory/src/claw_memory_session.c`
//! (`claw_memory_write_session_raw_record`,
//! `session_history_append_indexed_record`, `session_history_read_record_text`,
//! `session_history_load_indexed_json`) and from the writers of the bodies in
//! `components/claw_modules/claw_core/src/`: `claw_core_context_persist.c`,
//! `claw_core_agent_loop.c`, `claw_core_context.c`
//! (`claw_core_append_tool_results_messages`) and the three backends under
//! `llm/backends/`:
//!
//! - every record is one JSON text followed by one `\n`; the entry's length
//!   counts the newline, and the loader fails (and wipes the session) if the
//!   byte after the body is not `\n` or the body does not parse;
//! - the entry's backend format is the configured backend's, stamped at append
//!   time; it is **not** in the body;
//! - USER: `{"role":"user","content":"<text>"}` (built with cJSON from text);
//! - ASSISTANT_TOOL: the backend's `raw_message_json`. openai_compatible:
//!   `choices[0].message` as received (`tool_calls`, maybe
//!   `reasoning_content`, `refusal`, `annotations`). anthropic_compatible:
//!   `{"role":"assistant","content":[blocks]}` with `tool_use` (and `text`,
//!   `thinking`) blocks. openai_responses: a canonical
//!   `{"role":"assistant","content":...,"tool_calls":[...]}` plus
//!   `"_claw_provider_state":{"backend":"openai_responses","output":[...]}`;
//! - ASSISTANT_FINAL: the same `raw_message_json` without tool calls (the
//!   Responses one is just `{"role":"assistant","content":"<text>"}`), or, when
//!   a request failed, a text-built
//!   `{"role":"assistant","content":"Session note: ..."}`;
//! - TOOL_RESULT: `[{"role":"tool","tool_call_id":...,"content":...,"is_error":...}]`
//!   in this canonical shape **for every backend** (each backend converts it
//!   when it builds a request).
//!
//! Other writers (clawmem's own traces, older firmware) also store Anthropic
//! `tool_result` blocks, Responses `function_call` / `function_call_output`
//! items and Responses `message` items; those are recognised too.
//!
//! # Splitting: torn lines
//!
//! ESP-Claw has no checksums. A power cut can leave a partial body without its
//! newline at the end of the log; the next append then lands right after it,
//! so one line holds a torn prefix followed by a whole record. Each line (the
//! bytes up to a `\n` or the end of the log) is cut into [`Segment`]s that
//! tile the log:
//!
//! - a line that is one JSON object or array is a record;
//! - a line of JSON whitespace only is [`SegmentKind::Blank`];
//! - a line that starts with one complete object or array followed by more
//!   bytes (the newline after a record was lost) yields that record,
//!   unterminated, and the rest of the line is cut again;
//! - otherwise the start of the line is torn: the record is the first `{` or
//!   `[` from which the rest of the line is one complete JSON document, and
//!   what precedes it is [`SegmentKind::Skipped`]. If there is none, the
//!   whole line is skipped. (Only a record can complete a torn line: a valid
//!   document that ends at the end of the line and starts inside the torn
//!   prefix would need the prefix's brackets to close, and a torn prefix is
//!   cut before it closes them.)
//! - valid JSON that is not an object or array (ESP-Claw never writes one) is
//!   skipped.
//!
//! Invalid bytes are skipped and counted; valid records are never dropped. A
//! record is indexed only if its newline follows it, because ESP-Claw's
//! loader requires it: a record without one (the last bytes of the log, or
//! merged with the next record) is reported ([`RebuildReport::unterminated_records`],
//! [`RebuildReport::tail`]) so the caller can append the missing `\n`. Limit:
//! a record whose newline was lost *and* that follows a torn prefix on the
//! same line is skipped with the prefix.
//!
//! Cost: one pass over the log, plus, for a torn line, one validation per
//! candidate `{` or `[` (each stops at its first error, so in practice a few
//! passes over the line; at worst quadratic in the line length).
//!
//! # Inference
//!
//! [`infer_record`] reads one body and says how sure it is ([`Basis`]):
//! [`Basis::Shape`] when only that type or format writes such a body,
//! [`Basis::Hint`] when the body points to it but another writer could produce
//! the same, [`Basis::Default`] when nothing tells. The record type is nearly
//! always certain (the role and the shape say it); the format often is not: a
//! USER body, a canonical TOOL_RESULT and a Responses final look the same for
//! every backend.
//!
//! [`entries`] then fills a format the body does not reveal from the other
//! records of the same *turn* (from a USER record to the next, the unit that
//! compaction uses), [`Basis::Turn`]: every record between two USER records
//! was written by one request, hence by one backend. The nearest earlier
//! record of the turn with a known format wins, else the nearest later one.
//! This matters for loading: when the backend changes, ESP-Claw drops the
//! ASSISTANT_TOOL and TOOL_RESULT records of the old backend, and a canonical
//! TOOL_RESULT left at "unknown" would survive without its tool call.
//!
//! When an old index is at hand ([`rebuild_index_with_old`],
//! [`entries_with_old_index`]), an old entry with a valid type and format and
//! exactly the same offset and length as a rebuilt record is authoritative
//! ([`Basis::OldIndex`]): it keeps the exact format ESP-Claw stamped, which a
//! body cannot always tell (`unknown` versus `openai_compatible`).
//!
//! Pure logic over byte slices: no flash I/O and no allocation, so nothing
//! here is affected by power loss; writing the rebuilt index atomically is the
//! caller's job.
//!
//! The code is split by those steps: `segments.rs` (splitting), `infer.rs`
//! (inference from one body), `entries.rs` (the entries of a log, by turn
//! and old index), `index.rs` (writing the index, and the keep-or-rebuild
//! verdict). This module is host-side, behind the crate's `rebuild`
//! feature: importing ESP-Claw files is not firmware work.

use crate::chdx::{CHDX_ENTRY_SIZE, CHDX_HEADER_SIZE};

mod entries;
mod index;
mod infer;
mod segments;

pub use entries::{entries, entries_with_old_index, Entries, RebuildReport, RebuiltEntry};
pub use index::{
    rebuild_index, rebuild_index_with_old, repair, RebuildError, RebuildReason, Verdict,
};
pub use infer::{infer_record, Basis, Inference};
pub use segments::{segments, Segment, SegmentKind, Segments, SkipReason};

/// Largest log an index can describe: entry offsets and lengths are `u32`.
pub const MAX_LOG_SIZE_BYTES: usize = u32::MAX as usize;

/// Size of an index with `entries` entries, in bytes (saturating).
pub const fn index_size_bytes(entries: usize) -> usize {
    CHDX_HEADER_SIZE.saturating_add(entries.saturating_mul(CHDX_ENTRY_SIZE))
}

#[cfg(test)]
mod tests;
