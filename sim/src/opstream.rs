//! Op streams: a trace converted on the host into the compact binary form
//! that the QEMU firmware (`examples/qemu`) executes, and the checker of
//! what the firmware reports back.
//!
//! The firmware runs clawmem on a real instruction set (Cortex-M4 under
//! QEMU) with no JSON parser and no model of the expected histories: it
//! reads one operation at a time, carries it out, and writes one result
//! record per operation (status, engine decisions, digests, stack use). The
//! host then checks the results **the way [`replay`](mod@crate::replay)
//! does**, by replaying the firmware's decisions on the model:
//!
//! - an append the firmware reports as `compacted` compacts the modelled
//!   session with the same [`PlanBuilder`] / `KeepCursor` as replay;
//! - an append refused as blocked drops the modelled session (the firmware
//!   deletes it, as replay's driver does);
//! - every `history` result is compared with the model: record count, byte
//!   count, CRC-32 and 64-bit FNV-1a of the records in order (kind, format,
//!   length, body), so any difference in any record shows;
//! - memory targets follow the item ids the firmware reports (store,
//!   duplicate, update lineage, eviction); the host keeps the same table and
//!   checks that the firmware skipped exactly the targets replay skips;
//! - `--repeat` rounds are expanded here: sessions suffixed `#k`, the
//!   previous round's session deleted at its first touch (only if it is
//!   live, which the firmware tracks per session number and the host checks),
//!   long-term memory cleared between rounds;
//! - `profile_read` results are compared with the last body written (a check
//!   replay does not make);
//! - the firmware's flash enforces NOR rules; a violation is an error;
//! - with [`StreamOptions::tour`] the stream ends with the API tour
//!   ([`TAG_TOUR`]): the firmware calls every other public `Store`
//!   operation on the store the trace left, and the checker requires every
//!   call of [`TOUR`], in order, with its expected outcome (success or the
//!   documented refusal), counting each call's stack under its own name.
//!   It runs after the trace's last op, so it cannot change what the trace
//!   checks; the host executor does not run it, so a toured run makes no
//!   host comparison of the flash work.
//!
//! [`execute`] is a host implementation of the firmware's loop over a
//! [`Driver`]: the tests use it to show that the checker agrees with
//! `replay` and catches a corrupted digest.
//!
//! ## Stream layout (all integers little-endian)
//!
//! Header ([`HEADER_BYTES`] bytes): magic `CLAWOPS1`, then u32 `version`,
//! `partition_bytes`, `write_size`, `erase_size`, `session_size_limit_bytes`,
//! `session_slots` (distinct session ids), `store_slots` (memory stores in
//! one round), `max_op_bytes` (largest op payload), `op_count` (stream
//! ops), `ops_crc` (CRC-32 of every byte after the header, echoed back by
//! the firmware so that the checker knows it read this stream).
//!
//! Each op: u8 tag, u32 payload length, payload. Strings are u32 length +
//! bytes. Payloads by tag: see [`WireOp`] and [`encode_op`].
//!
//! Each result: u8 tag (the op's), u8 status, u32 engine stack bytes, then
//! a status- and tag-specific body (see [`WireResult`]). The stream starts
//! with a [`TAG_FORMAT`] result and ends with a [`TAG_SUMMARY`] record.

use std::collections::HashMap;
use std::fmt;

use clawmem::turns::{PlanBuilder, COMPACT_TOOL_TURNS};
use clawmem::RecordType;
use serde::Serialize;

use crate::model::{Geometry, Preset};
use crate::nor::Esp32Flash;
use crate::replay::{
    fit_config, round_session_id, Driver, ItemHandle, MemoryChange, MemoryItem, OpError,
};
use crate::trace::{Format, MemorySource, Op, ProfileName, RecordKind, Trace, TraceRecord};

/// First bytes of an op stream.
pub const MAGIC: &[u8; 8] = b"CLAWOPS1";
/// Stream format version.
pub const VERSION: u32 = 1;
/// Header size in bytes.
pub const HEADER_BYTES: usize = 8 + 10 * 4;

/// `append`: u32 session slot, session id, u8 turn_completed, u16 record
/// count, then per record u8 kind (1..=4), u8 format (0..=3), body.
pub const TAG_APPEND: u8 = 1;
/// `history`: u32 session slot, session id.
pub const TAG_HISTORY: u8 = 2;
/// `session_delete`: u32 session slot, session id.
pub const TAG_SESSION_DELETE: u8 = 3;
/// `memory_store`: content, tags joined by `,`, keywords joined by `,`, u8
/// source (0 manual, 1 auto_llm).
pub const TAG_MEMORY_STORE: u8 = 4;
/// `memory_recall`: u32 limit, u16 label count, labels.
pub const TAG_MEMORY_RECALL: u8 = 5;
/// `memory_update`: u32 target, content, tags, keywords (empty: keep).
pub const TAG_MEMORY_UPDATE: u8 = 6;
/// `memory_forget`: u32 target.
pub const TAG_MEMORY_FORGET: u8 = 7;
/// `memory_list`: no payload.
pub const TAG_MEMORY_LIST: u8 = 8;
/// `profile_write`: u8 doc (0 soul, 1 identity, 2 user, 3 agents), body.
pub const TAG_PROFILE_WRITE: u8 = 9;
/// `profile_read`: u8 doc.
pub const TAG_PROFILE_READ: u8 = 10;
/// `remount`: no payload.
pub const TAG_REMOUNT: u8 = 11;
/// Start of a round: u32 round; memory targets start afresh.
pub const TAG_ROUND: u8 = 12;
/// Clear long-term memory (between rounds): no payload.
pub const TAG_MEMORY_CLEAR: u8 = 13;
/// Delete the previous round's session if it is live: u32 session slot,
/// session id.
pub const TAG_CLEANUP_DELETE: u8 = 14;
/// The API tour (last op before the end, with `--tour`): no payload. The
/// firmware calls every public `Store` operation the trace does not, in
/// the order of [`TOUR`], and writes one result per call with this tag:
/// status ([`ST_OK`], [`ST_REFUSED`] or [`ST_FAILED`]), stack, then op name
/// and case (u8 length + bytes each), then a u32 value on `ST_OK` or a
/// u16-length message otherwise.
pub const TAG_TOUR: u8 = 15;
/// End of the stream (op) / of the results.
pub const TAG_END: u8 = 0xFF;
/// Result only: the delete that follows a blocked append.
pub const TAG_BLOCKED_DELETE: u8 = 0x20;
/// Result only: the initial format.
pub const TAG_FORMAT: u8 = 0x21;
/// Result only: the run's summary (flash counters, stack set-up).
pub const TAG_SUMMARY: u8 = 0xFE;

/// Result status: done.
pub const ST_OK: u8 = 0;
/// Result status: append refused, session blocked.
pub const ST_BLOCKED: u8 = 1;
/// Result status: the engine no longer has the item (evicted).
pub const ST_EVICTED: u8 = 2;
/// Result status: memory target not live, nothing called.
pub const ST_SKIPPED: u8 = 3;
/// Result status: the engine failed; a u16-length message follows.
pub const ST_FAILED: u8 = 4;
/// Result status: cleanup delete of a session that is not live, nothing
/// called.
pub const ST_NOT_LIVE: u8 = 5;
/// Tour result status: the engine refused as the tour meant it to (a
/// documented refusal, e.g. `NotFound` for a missing id); a u16-length
/// message follows.
pub const ST_REFUSED: u8 = 6;

/// What a tour call must come to.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum TourExpect {
    /// Success ([`ST_OK`]).
    Ok,
    /// A documented refusal ([`ST_REFUSED`]).
    Refused,
}

/// The API tour's calls in the order the firmware makes them
/// (`examples/qemu/src/tour.rs`): op name (the key of its stack figure),
/// case, expected outcome. Every public `Store` operation that the trace
/// ops do not call is here, plus `memory_update` (to supersede an item for
/// `memory_newest`).
pub const TOUR: &[(&str, &str, TourExpect)] = {
    use TourExpect::{Ok as O, Refused as R};
    &[
        ("config", "session limit", O),
        ("damaged_sessions_dropped", "", O),
        ("memory_damaged_reads", "", O),
        ("mount_report", "chunks scanned", O),
        ("space", "used sectors", O),
        ("written_bytes", "total", O),
        ("session_count", "after the trace", O),
        ("for_each_session", "every session", O),
        ("session_info", "the largest session", O),
        ("session_info", "a missing session", O),
        ("gate", "no session", O),
        ("gate", "the largest session", O),
        ("history", "the largest session, whole", O),
        ("check", "whole log", O),
        ("maintain", "until done", O),
        ("maintain_while", "a budget of one step", O),
        ("compact_with_summary", "empty summary", R),
        ("compact_with_summary", "the largest session, every turn", O),
        ("chat_sessions", "first use", O),
        ("session_command", "new alpha", O),
        ("session_command", "new beta", O),
        ("session_command", "list", O),
        ("session_command", "switch alpha", O),
        ("session_command", "switch to a missing alias", R),
        ("session_command", "delete beta", O),
        ("chat_sessions", "after the commands", O),
        ("profile_len", "soul", O),
        ("profile_len", "identity", O),
        ("profile_len", "user", O),
        ("profile_len", "agents", O),
        ("memory_stage_begin", "", O),
        ("memory_import", "a tagged item", O),
        ("write_memory_stage_note", "counting sink", O),
        ("memory_len", "after the import", O),
        ("memory_catalog", "every label", O),
        ("write_memory_prompt", "counting sink", O),
        ("write_memory_md", "counting sink", O),
        ("write_memory_list_json", "counting sink", O),
        ("write_memory_recall_json", "the tour label", O),
        ("write_memory_recall_json", "a label not in the catalog", O),
        ("memory_get", "the imported item", O),
        ("memory_get", "a missing id", R),
        ("memory_update", "the imported item", O),
        ("memory_newest", "the superseded id", O),
        ("memory_forget_scrub", "the updated item", O),
        ("memory_get", "the scrubbed item", R),
        ("memory_compact", "", O),
        ("memory_len", "after the compaction", O),
        ("memory_clear", "", O),
        ("memory_len", "after the clear", O),
        ("clear_sessions", "every session", O),
        ("session_count", "after clear_sessions", O),
        ("mount_in", "after the tour", O),
    ]
};

/// Size of the summary body before the per-sector erase counts.
const SUMMARY_FIXED: usize = 4 * 15 + 8 * 3;

/// An op stream or its results that could not be made or read.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct StreamError(pub String);

impl fmt::Display for StreamError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for StreamError {}

fn err<T>(msg: impl Into<String>) -> Result<T, StreamError> {
    Err(StreamError(msg.into()))
}

/// What to convert: the trace prefix, rounds and partition.
#[derive(Clone, Debug, PartialEq)]
pub struct StreamOptions {
    /// Replay only the first N operations of the trace.
    pub ops: Option<usize>,
    /// Rounds, as `replay --repeat` (at least 1).
    pub repeat: u32,
    /// Partition size in bytes.
    pub size_bytes: usize,
    /// Flash preset; only `esp32` (4 B words, 4 KiB sectors) is supported by
    /// the firmware.
    pub preset: Preset,
    /// End the stream with the API tour ([`TAG_TOUR`]).
    pub tour: bool,
}

impl Default for StreamOptions {
    fn default() -> Self {
        StreamOptions {
            ops: None,
            repeat: 1,
            size_bytes: 1024 * 1024,
            preset: Preset::Esp32,
            tour: false,
        }
    }
}

/// One operation of the stream, as the firmware receives it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum WireOp {
    /// `append` (session id with its round suffix).
    Append {
        /// Session slot (distinct id number).
        slot: u32,
        /// Session id.
        session: String,
        /// Turn completed.
        turn_completed: bool,
        /// (kind, format, body).
        records: Vec<(u8, u8, Vec<u8>)>,
    },
    /// `history`.
    History {
        /// Session slot.
        slot: u32,
        /// Session id.
        session: String,
    },
    /// `session_delete`.
    SessionDelete {
        /// Session slot.
        slot: u32,
        /// Session id.
        session: String,
    },
    /// `memory_store`.
    MemoryStore {
        /// Content.
        content: String,
        /// Tags joined by `,`.
        tags: String,
        /// Keywords joined by `,`.
        keywords: String,
        /// 0 manual, 1 auto_llm.
        source: u8,
    },
    /// `memory_recall`.
    MemoryRecall {
        /// Limit.
        limit: u32,
        /// Labels.
        labels: Vec<String>,
    },
    /// `memory_update`.
    MemoryUpdate {
        /// Store number of the round.
        target: u32,
        /// New content (empty: keep).
        content: String,
        /// New tags joined (empty: keep).
        tags: String,
        /// New keywords joined (empty: keep).
        keywords: String,
    },
    /// `memory_forget`.
    MemoryForget {
        /// Store number of the round.
        target: u32,
    },
    /// `memory_list`.
    MemoryList,
    /// `profile_write`.
    ProfileWrite {
        /// Document number.
        doc: u8,
        /// Body.
        body: String,
    },
    /// `profile_read`.
    ProfileRead {
        /// Document number.
        doc: u8,
    },
    /// `remount`.
    Remount,
    /// Start of round `k`.
    Round(u32),
    /// Clear long-term memory.
    MemoryClear,
    /// Delete the previous round's session if live.
    CleanupDelete {
        /// Session slot.
        slot: u32,
        /// Session id.
        session: String,
    },
    /// The API tour.
    Tour,
}

impl WireOp {
    /// The op's tag.
    pub fn tag(&self) -> u8 {
        match self {
            WireOp::Append { .. } => TAG_APPEND,
            WireOp::History { .. } => TAG_HISTORY,
            WireOp::SessionDelete { .. } => TAG_SESSION_DELETE,
            WireOp::MemoryStore { .. } => TAG_MEMORY_STORE,
            WireOp::MemoryRecall { .. } => TAG_MEMORY_RECALL,
            WireOp::MemoryUpdate { .. } => TAG_MEMORY_UPDATE,
            WireOp::MemoryForget { .. } => TAG_MEMORY_FORGET,
            WireOp::MemoryList => TAG_MEMORY_LIST,
            WireOp::ProfileWrite { .. } => TAG_PROFILE_WRITE,
            WireOp::ProfileRead { .. } => TAG_PROFILE_READ,
            WireOp::Remount => TAG_REMOUNT,
            WireOp::Round(_) => TAG_ROUND,
            WireOp::MemoryClear => TAG_MEMORY_CLEAR,
            WireOp::CleanupDelete { .. } => TAG_CLEANUP_DELETE,
            WireOp::Tour => TAG_TOUR,
        }
    }
}

/// A stream op with where it came from.
#[derive(Clone, Debug, PartialEq)]
pub struct Step<'t> {
    /// Trace line (0 for ops the expansion adds).
    pub line: usize,
    /// Round.
    pub round: u32,
    /// The trace op, for trace ops.
    pub op: Option<&'t Op>,
    /// What the firmware receives.
    pub wire: WireOp,
}

/// The record kind byte of the wire and the digests (ESP-Claw's 1 to 4).
pub fn kind_byte(k: RecordKind) -> u8 {
    RecordType::from(k).as_u8()
}

/// The format byte of the wire and the digests (ESP-Claw's 0 to 3).
pub fn format_byte(f: Format) -> u8 {
    clawmem::BackendFormat::from(f).as_u8()
}

fn source_byte(s: MemorySource) -> u8 {
    match s {
        MemorySource::Manual => 0,
        MemorySource::AutoLlm => 1,
    }
}

fn doc_byte(n: ProfileName) -> u8 {
    match n {
        ProfileName::Soul => 0,
        ProfileName::Identity => 1,
        ProfileName::User => 2,
        ProfileName::Agents => 3,
    }
}

fn doc_name(b: u8) -> Option<ProfileName> {
    Some(match b {
        0 => ProfileName::Soul,
        1 => ProfileName::Identity,
        2 => ProfileName::User,
        3 => ProfileName::Agents,
        _ => return None,
    })
}

/// The trace ops to replay: all, or the first `n`.
fn prefix(trace: &Trace, ops: Option<usize>) -> &[crate::trace::TraceOp] {
    &trace.ops[..ops.unwrap_or(usize::MAX).min(trace.ops.len())]
}

/// Expands `trace` (its prefix) into stream steps over `repeat` rounds, the
/// way [`replay`](crate::replay::replay) schedules them. Also returns the
/// number of distinct session ids (slots) and the most stores in a round.
pub fn expand<'t>(trace: &'t Trace, opts: &StreamOptions) -> (Vec<Step<'t>>, u32, u32) {
    let ops = prefix(trace, opts.ops);
    let rounds = opts.repeat.max(1);
    let stores = ops
        .iter()
        .filter(|o| matches!(o.op, Op::MemoryStore { .. }))
        .count() as u32;
    let mut slots: HashMap<String, u32> = HashMap::new();
    let mut slot_of = |id: &str| -> u32 {
        let n = slots.len() as u32;
        *slots.entry(id.to_string()).or_insert(n)
    };
    let mut steps = Vec::new();
    let join = |v: &[String]| v.join(",");
    for round in 0..rounds {
        steps.push(Step {
            line: 0,
            round,
            op: None,
            wire: WireOp::Round(round),
        });
        if round > 0 && stores > 0 {
            steps.push(Step {
                line: 0,
                round,
                op: None,
                wire: WireOp::MemoryClear,
            });
        }
        let mut touched = std::collections::HashSet::new();
        for top in ops {
            if let Some(base) = top.op.session() {
                if round > 0 && touched.insert(base) {
                    let old = round_session_id(base, round - 1);
                    steps.push(Step {
                        line: top.line,
                        round,
                        op: None,
                        wire: WireOp::CleanupDelete {
                            slot: slot_of(&old),
                            session: old,
                        },
                    });
                }
            }
            let wire = match &top.op {
                Op::Append {
                    session,
                    records,
                    turn_completed,
                } => {
                    let id = round_session_id(session, round);
                    WireOp::Append {
                        slot: slot_of(&id),
                        session: id,
                        turn_completed: *turn_completed,
                        records: records
                            .iter()
                            .map(|r| {
                                (
                                    kind_byte(r.kind),
                                    format_byte(r.format),
                                    r.body.as_bytes().to_vec(),
                                )
                            })
                            .collect(),
                    }
                }
                Op::History { session } => {
                    let id = round_session_id(session, round);
                    WireOp::History {
                        slot: slot_of(&id),
                        session: id,
                    }
                }
                Op::SessionDelete { session } => {
                    let id = round_session_id(session, round);
                    WireOp::SessionDelete {
                        slot: slot_of(&id),
                        session: id,
                    }
                }
                Op::MemoryStore {
                    content,
                    tags,
                    keywords,
                    source,
                } => WireOp::MemoryStore {
                    content: content.clone(),
                    tags: join(tags),
                    keywords: join(keywords),
                    source: source_byte(*source),
                },
                Op::MemoryRecall { labels, limit } => WireOp::MemoryRecall {
                    limit: *limit,
                    labels: labels.clone(),
                },
                Op::MemoryUpdate {
                    target,
                    content,
                    tags,
                    keywords,
                } => WireOp::MemoryUpdate {
                    target: *target as u32,
                    content: content.clone().unwrap_or_default(),
                    tags: tags.as_deref().map(join).unwrap_or_default(),
                    keywords: keywords.as_deref().map(join).unwrap_or_default(),
                },
                Op::MemoryForget { target } => WireOp::MemoryForget {
                    target: *target as u32,
                },
                Op::MemoryList {} => WireOp::MemoryList,
                Op::ProfileWrite { name, body } => WireOp::ProfileWrite {
                    doc: doc_byte(*name),
                    body: body.clone(),
                },
                Op::ProfileRead { name } => WireOp::ProfileRead {
                    doc: doc_byte(*name),
                },
                Op::Remount {} => WireOp::Remount,
            };
            steps.push(Step {
                line: top.line,
                round,
                op: Some(&top.op),
                wire,
            });
        }
    }
    if opts.tour {
        steps.push(Step {
            line: 0,
            round: rounds - 1,
            op: None,
            wire: WireOp::Tour,
        });
    }
    let n = slots.len() as u32;
    (steps, n, stores)
}

// ---- encoding ---------------------------------------------------------------

fn put_u32(out: &mut Vec<u8>, v: u32) {
    out.extend_from_slice(&v.to_le_bytes());
}

fn put_str(out: &mut Vec<u8>, s: &[u8]) {
    put_u32(out, s.len() as u32);
    out.extend_from_slice(s);
}

/// The payload of one op.
pub fn encode_op(op: &WireOp) -> Vec<u8> {
    let mut p = Vec::new();
    match op {
        WireOp::Append {
            slot,
            session,
            turn_completed,
            records,
        } => {
            put_u32(&mut p, *slot);
            put_str(&mut p, session.as_bytes());
            p.push(u8::from(*turn_completed));
            p.extend_from_slice(&(records.len() as u16).to_le_bytes());
            for (k, f, body) in records {
                p.push(*k);
                p.push(*f);
                put_str(&mut p, body);
            }
        }
        WireOp::History { slot, session }
        | WireOp::SessionDelete { slot, session }
        | WireOp::CleanupDelete { slot, session } => {
            put_u32(&mut p, *slot);
            put_str(&mut p, session.as_bytes());
        }
        WireOp::MemoryStore {
            content,
            tags,
            keywords,
            source,
        } => {
            put_str(&mut p, content.as_bytes());
            put_str(&mut p, tags.as_bytes());
            put_str(&mut p, keywords.as_bytes());
            p.push(*source);
        }
        WireOp::MemoryRecall { limit, labels } => {
            put_u32(&mut p, *limit);
            p.extend_from_slice(&(labels.len() as u16).to_le_bytes());
            for l in labels {
                put_str(&mut p, l.as_bytes());
            }
        }
        WireOp::MemoryUpdate {
            target,
            content,
            tags,
            keywords,
        } => {
            put_u32(&mut p, *target);
            put_str(&mut p, content.as_bytes());
            put_str(&mut p, tags.as_bytes());
            put_str(&mut p, keywords.as_bytes());
        }
        WireOp::MemoryForget { target } => put_u32(&mut p, *target),
        WireOp::ProfileWrite { doc, body } => {
            p.push(*doc);
            put_str(&mut p, body.as_bytes());
        }
        WireOp::ProfileRead { doc } => p.push(*doc),
        WireOp::Round(k) => put_u32(&mut p, *k),
        WireOp::MemoryList | WireOp::Remount | WireOp::MemoryClear | WireOp::Tour => {}
    }
    p
}

/// Limits of the firmware that the converter checks up front, so that a
/// trace it cannot run is refused on the host with a clear message.
pub mod limits {
    /// Records in one append (clawmem's `MAX_RECORDS_PER_APPEND` is lower;
    /// the engine itself refuses more).
    pub const MAX_RECORDS: usize = 64;
    /// Labels in one recall.
    pub const MAX_LABELS: usize = 16;
    /// Largest op payload (the firmware's op buffer).
    pub const MAX_OP_BYTES: usize = 256 * 1024;
    /// Distinct session ids (the firmware's liveness bitmap).
    pub const MAX_SESSION_SLOTS: u32 = 64 * 1024;
    /// Memory stores in one round (the firmware's target table).
    pub const MAX_STORE_SLOTS: u32 = 16 * 1024;
    /// Largest partition (the firmware's PSRAM window).
    pub const MAX_PARTITION_BYTES: usize = 12 * 1024 * 1024;
}

/// What [`encode_stream`] made.
#[derive(Clone, Debug, PartialEq)]
pub struct Encoded {
    /// The stream file's bytes.
    pub bytes: Vec<u8>,
    /// Stream ops (trace ops plus the ones the expansion adds).
    pub op_count: u32,
    /// Trace ops over all rounds.
    pub trace_ops: u64,
    /// Session limit chosen for the partition (as `replay` chooses it).
    pub session_size_limit_bytes: u32,
    /// CRC-32 of the ops section.
    pub ops_crc: u32,
}

/// CRC-32 (ISO-HDLC, as zlib).
pub fn crc32(data: &[u8]) -> u32 {
    crc::Crc::<u32>::new(&crc::CRC_32_ISO_HDLC).checksum(data)
}

/// 64-bit FNV-1a, continued from `h`.
pub fn fnv1a(mut h: u64, data: &[u8]) -> u64 {
    for b in data {
        h ^= u64::from(*b);
        h = h.wrapping_mul(0x0000_0100_0000_01b3);
    }
    h
}

/// FNV-1a's offset basis.
pub const FNV_OFFSET: u64 = 0xcbf2_9ce4_8422_2325;

/// The session limit `replay` would use on this partition.
pub fn session_limit(opts: &StreamOptions) -> Result<(u32, Geometry), StreamError> {
    if opts.preset != Preset::Esp32 {
        return err(format!(
            "the QEMU firmware models the esp32 preset only (4 B words, 4 KiB sectors), not {}",
            opts.preset.name()
        ));
    }
    if opts.size_bytes > limits::MAX_PARTITION_BYTES {
        return err(format!(
            "partition of {} B is larger than the firmware's {} B",
            opts.size_bytes,
            limits::MAX_PARTITION_BYTES
        ));
    }
    let model = opts
        .preset
        .model(opts.size_bytes)
        .map_err(|e| StreamError(e.0))?;
    let (config, _) = fit_config::<Esp32Flash>(&model).map_err(|e| StreamError(e.0))?;
    Ok((config.session_size_limit_bytes, model.geometry))
}

/// Converts `trace` into an op stream.
pub fn encode_stream(trace: &Trace, opts: &StreamOptions) -> Result<Encoded, StreamError> {
    let (limit, g) = session_limit(opts)?;
    let (steps, slots, stores) = expand(trace, opts);
    if slots > limits::MAX_SESSION_SLOTS {
        return err(format!(
            "{slots} distinct session ids, the firmware tracks {}",
            limits::MAX_SESSION_SLOTS
        ));
    }
    if stores > limits::MAX_STORE_SLOTS {
        return err(format!(
            "{stores} memory stores in a round, the firmware tracks {}",
            limits::MAX_STORE_SLOTS
        ));
    }
    let mut ops = Vec::new();
    let mut max_op = 0usize;
    for s in &steps {
        match &s.wire {
            WireOp::Append { records, .. } if records.len() > limits::MAX_RECORDS => {
                return err(format!(
                    "{}:{}: {} records in one append, the firmware takes {}",
                    trace.file,
                    s.line,
                    records.len(),
                    limits::MAX_RECORDS
                ))
            }
            WireOp::MemoryRecall { labels, .. } if labels.len() > limits::MAX_LABELS => {
                return err(format!(
                    "{}:{}: {} labels in one recall, the firmware takes {}",
                    trace.file,
                    s.line,
                    labels.len(),
                    limits::MAX_LABELS
                ))
            }
            _ => {}
        }
        let payload = encode_op(&s.wire);
        if payload.len() > limits::MAX_OP_BYTES {
            return err(format!(
                "{}:{}: op of {} B, the firmware's op buffer holds {}",
                trace.file,
                s.line,
                payload.len(),
                limits::MAX_OP_BYTES
            ));
        }
        max_op = max_op.max(payload.len());
        ops.push(s.wire.tag());
        put_u32(&mut ops, payload.len() as u32);
        ops.extend_from_slice(&payload);
    }
    ops.push(TAG_END);
    put_u32(&mut ops, 0);
    let ops_crc = crc32(&ops);
    let mut bytes = Vec::with_capacity(HEADER_BYTES + ops.len());
    bytes.extend_from_slice(MAGIC);
    for v in [
        VERSION,
        opts.size_bytes as u32,
        g.write_size as u32,
        g.erase_size as u32,
        limit,
        slots,
        stores,
        max_op as u32,
        steps.len() as u32,
        ops_crc,
    ] {
        put_u32(&mut bytes, v);
    }
    bytes.extend_from_slice(&ops);
    let trace_ops = steps.iter().filter(|s| s.op.is_some()).count() as u64;
    Ok(Encoded {
        bytes,
        op_count: steps.len() as u32,
        trace_ops,
        session_size_limit_bytes: limit,
        ops_crc,
    })
}

// ---- decoding -----------------------------------------------------------------

/// A little-endian reader over a byte slice.
struct Reader<'a> {
    data: &'a [u8],
    at: usize,
}

impl<'a> Reader<'a> {
    fn new(data: &'a [u8]) -> Self {
        Reader { data, at: 0 }
    }

    fn take(&mut self, n: usize) -> Result<&'a [u8], StreamError> {
        if self.data.len() - self.at < n {
            return err(format!(
                "truncated: {n} B wanted at offset {} of {}",
                self.at,
                self.data.len()
            ));
        }
        let s = &self.data[self.at..self.at + n];
        self.at += n;
        Ok(s)
    }

    fn u8(&mut self) -> Result<u8, StreamError> {
        Ok(self.take(1)?[0])
    }

    fn u16(&mut self) -> Result<u16, StreamError> {
        Ok(u16::from_le_bytes(self.take(2)?.try_into().expect("2 B")))
    }

    fn u32(&mut self) -> Result<u32, StreamError> {
        Ok(u32::from_le_bytes(self.take(4)?.try_into().expect("4 B")))
    }

    fn u64(&mut self) -> Result<u64, StreamError> {
        Ok(u64::from_le_bytes(self.take(8)?.try_into().expect("8 B")))
    }

    fn bytes(&mut self) -> Result<&'a [u8], StreamError> {
        let n = self.u32()? as usize;
        self.take(n)
    }

    fn string(&mut self) -> Result<String, StreamError> {
        String::from_utf8(self.bytes()?.to_vec()).map_err(|e| StreamError(e.to_string()))
    }

    fn done(&self) -> bool {
        self.at == self.data.len()
    }
}

/// A stream's header.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Header {
    /// Partition size.
    pub partition_bytes: u32,
    /// Program unit.
    pub write_size: u32,
    /// Erase unit.
    pub erase_size: u32,
    /// Session limit for the config.
    pub session_size_limit_bytes: u32,
    /// Distinct session ids.
    pub session_slots: u32,
    /// Stores in one round.
    pub store_slots: u32,
    /// Largest op payload.
    pub max_op_bytes: u32,
    /// Stream ops.
    pub op_count: u32,
    /// CRC-32 of the ops section.
    pub ops_crc: u32,
}

/// Decodes a whole stream (the host side of what the firmware reads).
pub fn decode_stream(bytes: &[u8]) -> Result<(Header, Vec<WireOp>), StreamError> {
    let mut r = Reader::new(bytes);
    if r.take(8)? != MAGIC {
        return err("not an op stream (bad magic)");
    }
    let version = r.u32()?;
    if version != VERSION {
        return err(format!("op stream version {version}, expected {VERSION}"));
    }
    let h = Header {
        partition_bytes: r.u32()?,
        write_size: r.u32()?,
        erase_size: r.u32()?,
        session_size_limit_bytes: r.u32()?,
        session_slots: r.u32()?,
        store_slots: r.u32()?,
        max_op_bytes: r.u32()?,
        op_count: r.u32()?,
        ops_crc: r.u32()?,
    };
    if crc32(&bytes[HEADER_BYTES..]) != h.ops_crc {
        return err("op stream CRC mismatch");
    }
    let mut ops = Vec::new();
    loop {
        let tag = r.u8()?;
        let payload = r.bytes()?;
        if tag == TAG_END {
            break;
        }
        let mut p = Reader::new(payload);
        let op = match tag {
            TAG_APPEND => {
                let slot = p.u32()?;
                let session = p.string()?;
                let turn_completed = p.u8()? != 0;
                let n = p.u16()?;
                let mut records = Vec::new();
                for _ in 0..n {
                    let k = p.u8()?;
                    let f = p.u8()?;
                    records.push((k, f, p.bytes()?.to_vec()));
                }
                WireOp::Append {
                    slot,
                    session,
                    turn_completed,
                    records,
                }
            }
            TAG_HISTORY | TAG_SESSION_DELETE | TAG_CLEANUP_DELETE => {
                let slot = p.u32()?;
                let session = p.string()?;
                match tag {
                    TAG_HISTORY => WireOp::History { slot, session },
                    TAG_SESSION_DELETE => WireOp::SessionDelete { slot, session },
                    _ => WireOp::CleanupDelete { slot, session },
                }
            }
            TAG_MEMORY_STORE => WireOp::MemoryStore {
                content: p.string()?,
                tags: p.string()?,
                keywords: p.string()?,
                source: p.u8()?,
            },
            TAG_MEMORY_RECALL => {
                let limit = p.u32()?;
                let n = p.u16()?;
                let mut labels = Vec::new();
                for _ in 0..n {
                    labels.push(p.string()?);
                }
                WireOp::MemoryRecall { limit, labels }
            }
            TAG_MEMORY_UPDATE => WireOp::MemoryUpdate {
                target: p.u32()?,
                content: p.string()?,
                tags: p.string()?,
                keywords: p.string()?,
            },
            TAG_MEMORY_FORGET => WireOp::MemoryForget { target: p.u32()? },
            TAG_MEMORY_LIST => WireOp::MemoryList,
            TAG_PROFILE_WRITE => WireOp::ProfileWrite {
                doc: p.u8()?,
                body: p.string()?,
            },
            TAG_PROFILE_READ => WireOp::ProfileRead { doc: p.u8()? },
            TAG_REMOUNT => WireOp::Remount,
            TAG_ROUND => WireOp::Round(p.u32()?),
            TAG_MEMORY_CLEAR => WireOp::MemoryClear,
            TAG_TOUR => WireOp::Tour,
            t => return err(format!("unknown op tag {t}")),
        };
        if !p.done() {
            return err(format!("op tag {tag}: payload longer than its fields"));
        }
        ops.push(op);
    }
    if !r.done() {
        return err("bytes after the end of the op stream");
    }
    if ops.len() != h.op_count as usize {
        return err(format!(
            "header says {} ops, the stream has {}",
            h.op_count,
            ops.len()
        ));
    }
    Ok((h, ops))
}

/// A digest of a history or a profile document.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize)]
pub struct Digest {
    /// Records (1 for a profile).
    pub count: u32,
    /// Body bytes.
    pub bytes: u32,
    /// CRC-32 of the canonical form.
    pub crc32: u32,
    /// FNV-1a 64 of the canonical form.
    pub fnv64: u64,
}

impl fmt::Display for Digest {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{} records, {} B, crc32 {:08x}, fnv64 {:016x}",
            self.count, self.bytes, self.crc32, self.fnv64
        )
    }
}

/// Builds a [`Digest`] over records: each one as u8 kind, u8 format, u32
/// body length, body.
#[derive(Clone)]
pub struct Digester {
    crc: crc::Digest<'static, u32>,
    fnv: u64,
    count: u32,
    bytes: u32,
}

static CRC32: crc::Crc<u32> = crc::Crc::<u32>::new(&crc::CRC_32_ISO_HDLC);

impl Default for Digester {
    fn default() -> Self {
        Digester {
            crc: CRC32.digest(),
            fnv: FNV_OFFSET,
            count: 0,
            bytes: 0,
        }
    }
}

impl Digester {
    /// Adds one record.
    pub fn record(&mut self, kind: u8, format: u8, body: &[u8]) {
        let head = [kind, format];
        let len = (body.len() as u32).to_le_bytes();
        for part in [&head[..], &len[..], body] {
            self.crc.update(part);
            self.fnv = fnv1a(self.fnv, part);
        }
        self.count += 1;
        self.bytes += body.len() as u32;
    }

    /// The digest.
    pub fn finish(self) -> Digest {
        Digest {
            count: self.count,
            bytes: self.bytes,
            crc32: self.crc.finalize(),
            fnv64: self.fnv,
        }
    }
}

/// The digest of a profile document: one record of kind 0, format 0.
pub fn profile_digest(body: &[u8]) -> Digest {
    let mut d = Digester::default();
    d.record(0, 0, body);
    d.finish()
}

/// The digest of a list of item ids (recall, list): count and CRC-32 of
/// the u32 ids.
fn ids_digest(ids: &[u32]) -> (u32, u32) {
    let bytes: Vec<u8> = ids.iter().flat_map(|i| i.to_le_bytes()).collect();
    (ids.len() as u32, crc32(&bytes))
}

/// One result record, decoded.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct WireResult {
    /// The op's tag (or [`TAG_BLOCKED_DELETE`], [`TAG_FORMAT`]).
    pub tag: u8,
    /// One of the `ST_` statuses.
    pub status: u8,
    /// Engine stack bytes below the call site's SP (0: no engine call).
    pub stack: u32,
    /// The message of a failure.
    pub message: Option<String>,
    /// Append: (compacted, blocked).
    pub appended: Option<(bool, bool)>,
    /// History or profile read digest.
    pub digest: Option<Digest>,
    /// Memory store (id, duplicate), update (newest id, false).
    pub item: Option<(u32, bool)>,
    /// Recall or list: (count, CRC-32 of the ids).
    pub ids: Option<(u32, u32)>,
    /// Tour call: (op name, case).
    pub tour: Option<(String, String)>,
    /// Tour call on `ST_OK`: what it returned (a count, bytes, an id).
    pub value: Option<u32>,
}

/// The firmware's summary: flash counters and stack set-up.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize)]
pub struct Summary {
    /// `ops_crc` of the stream it read.
    pub ops_crc: u32,
    /// Partition bytes.
    pub partition_bytes: u32,
    /// Sectors.
    pub sector_count: u32,
    /// `size_of::<Store<_, 32>>()` on the target, minus the flash handle.
    pub engine_state_bytes: u32,
    /// Bytes of the stack region.
    pub stack_region_bytes: u32,
    /// Bytes below the call site's SP left unpainted.
    pub paint_margin_bytes: u32,
    /// Deepest SP of any call site, as bytes below the stack's top.
    pub call_site_depth_bytes: u32,
    /// 1 if painting ever found the stack limit overwritten.
    pub stack_overflow: u32,
    /// Writes or erases refused by the NOR rules.
    pub flash_rule_violations: u32,
    /// Total erases (the initial format included).
    pub erases: u32,
    /// Erases after the initial format.
    pub replay_erases: u32,
    /// Sectors erased at least once after the initial format.
    pub sectors_erased_in_replay: u32,
    /// Stream ops executed.
    pub ops_done: u32,
    /// The buffer the firmware streams every history through.
    pub history_buffer_bytes: u32,
    /// The largest buffer a history stream asked for.
    pub history_buffer_needed_bytes: u32,
    /// Bytes programmed.
    pub programmed_bytes: u64,
    /// Bytes erased.
    pub erased_bytes: u64,
    /// Bytes read.
    pub read_bytes: u64,
    /// Erase count of every sector.
    pub erase_counts: Vec<u32>,
}

fn decode_result(r: &mut Reader<'_>) -> Result<Result<WireResult, Summary>, StreamError> {
    let tag = r.u8()?;
    if tag == TAG_SUMMARY {
        let mut s = Summary {
            ops_crc: r.u32()?,
            partition_bytes: r.u32()?,
            sector_count: r.u32()?,
            engine_state_bytes: r.u32()?,
            stack_region_bytes: r.u32()?,
            paint_margin_bytes: r.u32()?,
            call_site_depth_bytes: r.u32()?,
            stack_overflow: r.u32()?,
            flash_rule_violations: r.u32()?,
            erases: r.u32()?,
            replay_erases: r.u32()?,
            sectors_erased_in_replay: r.u32()?,
            ops_done: r.u32()?,
            history_buffer_bytes: r.u32()?,
            history_buffer_needed_bytes: r.u32()?,
            programmed_bytes: r.u64()?,
            erased_bytes: r.u64()?,
            read_bytes: r.u64()?,
            erase_counts: Vec::new(),
        };
        for _ in 0..s.sector_count {
            s.erase_counts.push(r.u32()?);
        }
        return Ok(Err(s));
    }
    let status = r.u8()?;
    let stack = r.u32()?;
    let mut res = WireResult {
        tag,
        status,
        stack,
        message: None,
        appended: None,
        digest: None,
        item: None,
        ids: None,
        tour: None,
        value: None,
    };
    if tag == TAG_TOUR {
        let mut name = || -> Result<String, StreamError> {
            let n = r.u8()? as usize;
            Ok(String::from_utf8_lossy(r.take(n)?).into_owned())
        };
        res.tour = Some((name()?, name()?));
        match status {
            ST_OK => res.value = Some(r.u32()?),
            ST_REFUSED | ST_FAILED => {
                let n = r.u16()? as usize;
                res.message = Some(String::from_utf8_lossy(r.take(n)?).into_owned());
            }
            s => return err(format!("tour result: unknown status {s}")),
        }
        return Ok(Ok(res));
    }
    match status {
        ST_FAILED => {
            let n = r.u16()? as usize;
            res.message = Some(String::from_utf8_lossy(r.take(n)?).into_owned());
        }
        ST_OK => match tag {
            TAG_APPEND => {
                let f = r.u8()?;
                res.appended = Some((f & 1 != 0, f & 2 != 0));
            }
            TAG_HISTORY | TAG_PROFILE_READ => {
                res.digest = Some(Digest {
                    count: r.u32()?,
                    bytes: r.u32()?,
                    crc32: r.u32()?,
                    fnv64: r.u64()?,
                });
            }
            TAG_MEMORY_STORE => {
                let id = r.u32()?;
                res.item = Some((id, r.u8()? != 0));
            }
            TAG_MEMORY_UPDATE => res.item = Some((r.u32()?, false)),
            TAG_MEMORY_RECALL | TAG_MEMORY_LIST => res.ids = Some((r.u32()?, r.u32()?)),
            _ => {}
        },
        ST_BLOCKED | ST_EVICTED | ST_SKIPPED | ST_NOT_LIVE => {}
        s => return err(format!("result of tag {tag}: unknown status {s}")),
    }
    Ok(Ok(res))
}

/// Decodes a results file: the results in order, and the summary (`None`
/// if the firmware stopped before writing it).
pub fn decode_results(bytes: &[u8]) -> Result<(Vec<WireResult>, Option<Summary>), StreamError> {
    match decode_results_lenient(bytes) {
        (out, summary, None) => Ok((out, summary)),
        (_, _, Some(e)) => Err(e),
    }
}

/// As [`decode_results`], but keeps what decoded before a damaged or cut
/// record (a firmware stopped mid-write) and says what was wrong.
fn decode_results_lenient(bytes: &[u8]) -> (Vec<WireResult>, Option<Summary>, Option<StreamError>) {
    let mut r = Reader::new(bytes);
    let mut out = Vec::new();
    while !r.done() {
        match decode_result(&mut r) {
            Ok(Ok(res)) => out.push(res),
            Ok(Err(summary)) => {
                let e = (!r.done()).then(|| StreamError("bytes after the summary".into()));
                return (out, Some(summary), e);
            }
            Err(e) => return (out, None, Some(e)),
        }
    }
    (out, None, None)
}

/// Encodes one result (the firmware writes the same bytes).
pub fn encode_result(res: &WireResult) -> Vec<u8> {
    let mut out = vec![res.tag, res.status];
    put_u32(&mut out, res.stack);
    if let Some((op, case)) = &res.tour {
        for s in [op, case] {
            let s = &s.as_bytes()[..s.len().min(255)];
            out.push(s.len() as u8);
            out.extend_from_slice(s);
        }
        if let Some(v) = res.value {
            put_u32(&mut out, v);
        }
    }
    if let Some(m) = &res.message {
        let m = &m.as_bytes()[..m.len().min(u16::MAX as usize)];
        out.extend_from_slice(&(m.len() as u16).to_le_bytes());
        out.extend_from_slice(m);
    }
    if let Some((c, b)) = res.appended {
        out.push(u8::from(c) | (u8::from(b) << 1));
    }
    if let Some(d) = res.digest {
        for v in [d.count, d.bytes, d.crc32] {
            put_u32(&mut out, v);
        }
        out.extend_from_slice(&d.fnv64.to_le_bytes());
    }
    if let Some((id, dup)) = res.item {
        put_u32(&mut out, id);
        if res.tag == TAG_MEMORY_STORE {
            out.push(u8::from(dup));
        }
    }
    if let Some((n, c)) = res.ids {
        put_u32(&mut out, n);
        put_u32(&mut out, c);
    }
    out
}

/// Encodes a summary record.
pub fn encode_summary(s: &Summary) -> Vec<u8> {
    let mut out = vec![TAG_SUMMARY];
    for v in [
        s.ops_crc,
        s.partition_bytes,
        s.sector_count,
        s.engine_state_bytes,
        s.stack_region_bytes,
        s.paint_margin_bytes,
        s.call_site_depth_bytes,
        s.stack_overflow,
        s.flash_rule_violations,
        s.erases,
        s.replay_erases,
        s.sectors_erased_in_replay,
        s.ops_done,
        s.history_buffer_bytes,
        s.history_buffer_needed_bytes,
    ] {
        put_u32(&mut out, v);
    }
    for v in [s.programmed_bytes, s.erased_bytes, s.read_bytes] {
        out.extend_from_slice(&v.to_le_bytes());
    }
    debug_assert_eq!(out.len(), 1 + SUMMARY_FIXED);
    for c in &s.erase_counts {
        put_u32(&mut out, *c);
    }
    out
}

// ---- the checker --------------------------------------------------------------

/// How to check a results file.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct CheckOptions {
    /// Fail when the peak engine stack exceeds this.
    pub stack_budget: Option<u64>,
    /// Corrupt the expected digest of the first history, to prove that a
    /// mismatch is caught (the check must then fail).
    pub selftest_mismatch: bool,
    /// Also run the stream through [`execute`] on the simulator and say
    /// whether the firmware's flash did the same work (erases, bytes
    /// programmed, erases per sector).
    pub compare_host: bool,
    /// Fail unless every sector was erased during the replay (the test
    /// that a run went all the way round the flash ring).
    pub require_wrap: bool,
    /// QEMU's exit status, if it ran; non-zero is an error.
    pub qemu_status: Option<i32>,
    /// QEMU's wall time, for the report.
    pub qemu_seconds: Option<f64>,
}

/// Geometry as the report shows it.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
pub struct ReportGeometry {
    /// Program unit.
    pub write_size: u32,
    /// Erase unit.
    pub erase_size: u32,
    /// Sectors.
    pub sector_count: u32,
}

/// The checked run, printed as one JSON line.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct QemuReport {
    /// Where the engine ran.
    pub machine: String,
    /// Trace file.
    pub trace: String,
    /// Flash preset.
    pub preset: String,
    /// Geometry of the firmware's RAM flash.
    pub geometry: ReportGeometry,
    /// Partition size.
    pub partition_bytes: u64,
    /// Session limit in the firmware's config (as `replay` fits it).
    pub session_limit_bytes: u32,
    /// Rounds.
    pub rounds: u32,
    /// Trace ops replayed (all rounds).
    pub ops: u64,
    /// Stream ops, the added cleanup and round ops included.
    pub stream_ops: u64,
    /// Completed turns.
    pub turns: u64,
    /// Payload acknowledged (as replay counts it).
    pub user_bytes: u64,
    /// Histories compared (each streamed through the firmware's history
    /// buffer, a record at a time).
    pub history_checks: u64,
    /// The firmware's history buffer.
    pub history_buffer_bytes: u64,
    /// The largest buffer a history stream asked for (its longest record).
    pub history_buffer_needed_bytes: u64,
    /// Histories that differed.
    pub history_mismatches: u64,
    /// The first difference.
    pub first_mismatch: Option<String>,
    /// Profile reads compared with the last body written.
    pub profile_checks: u64,
    /// Profile reads that differed.
    pub profile_mismatches: u64,
    /// Failed operations, NOR rule violations and disagreements between
    /// the firmware and the host's bookkeeping.
    pub errors: u64,
    /// The first of them.
    pub first_error: Option<String>,
    /// Appends reported compacted.
    pub compactions: u64,
    /// Appends refused as blocked.
    pub blocked: u64,
    /// Memory targets skipped (evicted, forgotten, failed store).
    pub skipped: u64,
    /// Previous-round sessions deleted.
    pub cleanup_deletes: u64,
    /// Memory clears between rounds.
    pub memory_clears: u64,
    /// Total erases, the initial format included.
    pub erases: u64,
    /// Erases after the format.
    pub replay_erases: u64,
    /// Erases of the most-erased sector.
    pub erase_count_max: u64,
    /// Sectors erased at least once after the format.
    pub sectors_erased_in_replay: u64,
    /// Every sector was erased during the replay: the log went all the way
    /// round the partition.
    pub ring_wrapped: bool,
    /// Bytes programmed.
    pub programmed_bytes: u64,
    /// Bytes erased.
    pub erased_bytes: u64,
    /// Bytes read.
    pub read_bytes: u64,
    /// Writes or erases that broke the NOR rules.
    pub flash_rule_violations: u64,
    /// `size_of::<Store<RamFlash, 32>>()` on the target.
    pub engine_state_bytes: u64,
    /// Size of the painted stack region.
    pub stack_region_bytes: u64,
    /// What the stack figures measure.
    pub stack_measured: String,
    /// Deepest engine stack use of any operation, in bytes.
    pub peak_stack_bytes: u64,
    /// The operation (line and kind) that reached it.
    pub peak_stack_at: Option<String>,
    /// Deepest engine stack use per operation kind (the tour's calls under
    /// their own names).
    pub peak_stack_by_op: std::collections::BTreeMap<String, u64>,
    /// Stack of the constructors that return the `Store` by value
    /// (`mount_in`), which holds the store itself; not in
    /// `peak_stack_bytes` nor the budget (see `BY_VALUE`).
    pub by_value_stack_by_op: std::collections::BTreeMap<String, u64>,
    /// The stream ended with the API tour (`--tour`).
    pub tour: bool,
    /// The tour's calls in order, with their outcomes.
    pub tour_calls: Vec<TourCall>,
    /// Deepest call site below the stack's top (the harness's own frames).
    pub call_site_depth_bytes: u64,
    /// The paint reached the stack limit.
    pub stack_overflow: bool,
    /// `--stack-budget`, if given.
    pub stack_budget_bytes: Option<u64>,
    /// `peak_stack_bytes` exceeds the budget.
    pub over_stack_budget: bool,
    /// The expected digest of the first history was corrupted on purpose.
    pub selftest_mismatch: bool,
    /// Erases of the same stream run on the host simulator (`execute`), if
    /// compared.
    pub host_erases: Option<u64>,
    /// The firmware's flash did exactly the host simulator's work: erases,
    /// bytes programmed and erased, every sector's erase count (if
    /// compared).
    pub same_flash_work_as_host: Option<bool>,
    /// QEMU's exit status.
    pub qemu_status: Option<i32>,
    /// QEMU's wall time in seconds.
    pub qemu_seconds: Option<f64>,
    /// `--require-wrap` was given.
    pub require_wrap: bool,
    /// No mismatch, no error, no overflow, within the budget (and wrapped,
    /// if required).
    pub ok: bool,
    /// Erase count of every sector.
    pub erase_counts: Vec<u32>,
}

/// One call of the API tour, as the report shows it.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct TourCall {
    /// The `Store` operation.
    pub op: String,
    /// What it was called on.
    pub case: String,
    /// `ok`, `refused` (as expected) or `failed`.
    pub outcome: String,
    /// Engine stack bytes below the call site's SP.
    pub stack_bytes: u64,
    /// What it returned (count, bytes, id), on success.
    pub value: Option<u32>,
    /// The refusal's or the failure's message.
    pub message: Option<String>,
}

/// Memory target bookkeeping, as replay keeps it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Target {
    Live(u32),
    Forgotten,
    Evicted,
    Failed,
}

fn retarget(targets: &mut [Target], item: u32, now: Target) {
    for x in targets.iter_mut().filter(|x| **x == Target::Live(item)) {
        *x = now;
    }
}

/// The stack figure's operation kind of a result.
fn stack_kind(tag: u8) -> &'static str {
    match tag {
        TAG_APPEND => "append",
        TAG_HISTORY => "history_stream",
        TAG_SESSION_DELETE | TAG_CLEANUP_DELETE | TAG_BLOCKED_DELETE => "session_delete",
        TAG_MEMORY_STORE => "memory_store",
        TAG_MEMORY_RECALL => "memory_recall",
        TAG_MEMORY_UPDATE => "memory_update",
        TAG_MEMORY_FORGET => "memory_forget",
        TAG_MEMORY_LIST => "memory_list",
        TAG_PROFILE_WRITE => "profile_write",
        TAG_PROFILE_READ => "profile_read",
        TAG_REMOUNT => "remount",
        TAG_FORMAT => "format",
        TAG_MEMORY_CLEAR => "memory_clear",
        _ => "other",
    }
}

/// ESP-Claw's turn-aware compaction of a modelled session (as replay).
fn compact_model(records: &mut Vec<&TraceRecord>) {
    let mut plan = PlanBuilder::<COMPACT_TOOL_TURNS>::new();
    for r in records.iter() {
        plan.push(RecordType::from(r.kind), r.body.len() as u64);
    }
    let plan = plan.finish();
    let mut keep = plan.cursor();
    records.retain(|r| keep.keep_next(RecordType::from(r.kind)));
}

fn history_digest(records: &[&TraceRecord]) -> Digest {
    let mut d = Digester::default();
    for r in records {
        d.record(kind_byte(r.kind), format_byte(r.format), r.body.as_bytes());
    }
    d.finish()
}

struct Tally {
    report: QemuReport,
}

/// Counts a result's engine stack under its operation kind.
/// Constructors that return the `Store` by value: their frame holds the
/// store itself (`engine_state_bytes`) on its way out, besides the engine's
/// own work. A firmware builds the store in place (`mount_into`, counted in
/// `peak_stack_bytes`); these are reported apart, outside the budget.
const BY_VALUE: &[&str] = &["mount_in"];

fn stack(t: &mut Tally, res: &WireResult, at: &str) {
    stack_as(t, stack_kind(res.tag), res, at);
}

/// Counts a result's engine stack under `kind`.
fn stack_as(t: &mut Tally, kind: &str, res: &WireResult, at: &str) {
    if res.stack == 0 {
        return;
    }
    if BY_VALUE.contains(&kind) {
        let e = t
            .report
            .by_value_stack_by_op
            .entry(kind.to_string())
            .or_insert(0);
        *e = (*e).max(u64::from(res.stack));
        return;
    }
    let e = t
        .report
        .peak_stack_by_op
        .entry(kind.to_string())
        .or_insert(0);
    *e = (*e).max(u64::from(res.stack));
    if u64::from(res.stack) > t.report.peak_stack_bytes {
        t.report.peak_stack_bytes = u64::from(res.stack);
        t.report.peak_stack_at = Some(format!("{at} ({kind})"));
    }
}

impl Tally {
    fn error(&mut self, at: String, what: impl fmt::Display) {
        self.report.errors += 1;
        if self.report.first_error.is_none() {
            self.report.first_error = Some(format!("{at}: {what}"));
        }
    }

    /// Checks the tour's results against [`TOUR`]: every call there, in
    /// order, with the expected outcome. `false` if the results are out of
    /// step (the check stops there).
    fn tour<'r>(&mut self, it: &mut impl Iterator<Item = &'r WireResult>, at: &str) -> bool {
        for (op, case, expect) in TOUR {
            let here = format!("{at} {op} ({case})");
            let Some(res) = it.next() else {
                self.error(here, "the firmware stopped before this tour call");
                return false;
            };
            let names = res.tour.as_ref().map(|(o, c)| (o.as_str(), c.as_str()));
            if res.tag != TAG_TOUR || names != Some((*op, *case)) {
                self.error(
                    here,
                    format!(
                        "result tag {} {names:?}: firmware out of step with the tour",
                        res.tag
                    ),
                );
                return false;
            }
            stack_as(self, op, res, &here);
            let outcome = match (res.status, expect) {
                (ST_OK, TourExpect::Ok) => "ok",
                (ST_REFUSED, TourExpect::Refused) => "refused",
                (st, _) => {
                    let what = res.message.as_deref().unwrap_or("");
                    self.error(here, format!("status {st}, expected {expect:?}: {what}"));
                    "failed"
                }
            };
            self.report.tour_calls.push(TourCall {
                op: op.to_string(),
                case: case.to_string(),
                outcome: outcome.into(),
                stack_bytes: u64::from(res.stack),
                value: res.value,
                message: res.message.clone(),
            });
        }
        true
    }
}

/// Checks the firmware's `results` against `trace` converted with `opts`,
/// replaying the firmware's decisions on the model as `replay` does.
pub fn check(
    trace: &Trace,
    opts: &StreamOptions,
    results: &[u8],
    copts: &CheckOptions,
) -> Result<QemuReport, StreamError> {
    let encoded = encode_stream(trace, opts)?;
    let (steps, _, _) = expand(trace, opts);
    let (results, summary, damage) = decode_results_lenient(results);
    let sectors = (opts.size_bytes / 4096) as u32;
    let mut t = Tally {
        report: QemuReport {
            machine: "qemu-system-arm -M mps2-an386 (Cortex-M4F)".into(),
            trace: trace.file.clone(),
            preset: opts.preset.name().into(),
            geometry: ReportGeometry {
                write_size: 4,
                erase_size: 4096,
                sector_count: sectors,
            },
            partition_bytes: opts.size_bytes as u64,
            session_limit_bytes: encoded.session_size_limit_bytes,
            rounds: opts.repeat.max(1),
            ops: 0,
            stream_ops: steps.len() as u64,
            turns: 0,
            user_bytes: 0,
            history_checks: 0,
            history_buffer_bytes: 0,
            history_buffer_needed_bytes: 0,
            history_mismatches: 0,
            first_mismatch: None,
            profile_checks: 0,
            profile_mismatches: 0,
            errors: 0,
            first_error: None,
            compactions: 0,
            blocked: 0,
            skipped: 0,
            cleanup_deletes: 0,
            memory_clears: 0,
            erases: 0,
            replay_erases: 0,
            erase_count_max: 0,
            sectors_erased_in_replay: 0,
            ring_wrapped: false,
            programmed_bytes: 0,
            erased_bytes: 0,
            read_bytes: 0,
            flash_rule_violations: 0,
            engine_state_bytes: 0,
            stack_region_bytes: 0,
            stack_measured: "bytes of stack the engine call used below the SP at its call site \
                             (paint from the stack limit to a margin below that SP before the \
                             call, deepest overwritten word after it)"
                .into(),
            peak_stack_bytes: 0,
            peak_stack_at: None,
            peak_stack_by_op: Default::default(),
            by_value_stack_by_op: Default::default(),
            tour: opts.tour,
            tour_calls: Vec::new(),
            call_site_depth_bytes: 0,
            stack_overflow: false,
            stack_budget_bytes: copts.stack_budget,
            over_stack_budget: false,
            selftest_mismatch: copts.selftest_mismatch,
            host_erases: None,
            same_flash_work_as_host: None,
            qemu_status: copts.qemu_status,
            qemu_seconds: copts.qemu_seconds,
            require_wrap: copts.require_wrap,
            ok: false,
            erase_counts: Vec::new(),
        },
    };
    if let Some(e) = damage {
        t.error("results file".into(), e);
    }
    let mut it = results.iter();
    let file = trace.file.clone();
    // The initial format.
    match it.next() {
        Some(r) if r.tag == TAG_FORMAT => {
            stack(&mut t, r, "format");
            if r.status != ST_OK {
                t.error(
                    "format".into(),
                    r.message.as_deref().unwrap_or("failed without a message"),
                );
            }
        }
        _ => t.error("format".into(), "the firmware reported no format result"),
    }
    let mut sessions: HashMap<String, Vec<&TraceRecord>> = HashMap::new();
    let mut targets: Vec<Target> = Vec::new();
    let mut profiles: HashMap<u8, Vec<u8>> = HashMap::new();
    let mut corrupt_next = copts.selftest_mismatch;
    let mut complete = true;
    for s in &steps {
        let at = format!(
            "{file}:{} (round {}) {}",
            s.line,
            s.round,
            match (&s.wire, s.op) {
                (_, Some(o)) => o.name(),
                (WireOp::Round(_), _) => "round",
                (WireOp::MemoryClear, _) => "memory_clear",
                (WireOp::Tour, _) => "tour",
                _ => "cleanup_delete",
            }
        );
        if s.wire == WireOp::Tour {
            if !t.tour(&mut it, &at) {
                complete = false;
                break;
            }
            continue;
        }
        if s.op.is_some() {
            t.report.ops += 1;
        }
        let Some(res) = it.next() else {
            t.error(at, "the firmware stopped before this op");
            complete = false;
            break;
        };
        if res.tag != s.wire.tag() {
            t.error(
                at,
                format!(
                    "result tag {} for op tag {}: firmware out of step",
                    res.tag,
                    s.wire.tag()
                ),
            );
            complete = false;
            break;
        }
        stack(&mut t, res, &at);
        let failed = |t: &mut Tally, at: &str, res: &WireResult| {
            t.error(
                at.to_string(),
                res.message.as_deref().unwrap_or("unexpected status"),
            )
        };
        match (&s.wire, s.op) {
            (WireOp::Round(_), _) => targets.clear(),
            (WireOp::MemoryClear, _) => match res.status {
                ST_OK => t.report.memory_clears += 1,
                _ => failed(&mut t, &at, res),
            },
            (WireOp::CleanupDelete { session, .. }, _) => {
                let live = sessions.remove(session).is_some();
                match (live, res.status) {
                    (true, ST_OK) => t.report.cleanup_deletes += 1,
                    (true, ST_FAILED) => {
                        t.report.cleanup_deletes += 1;
                        failed(&mut t, &at, res);
                    }
                    (false, ST_NOT_LIVE) => {}
                    (live, st) => t.error(
                        at,
                        format!(
                            "cleanup of {session}: host model live={live}, firmware status {st}"
                        ),
                    ),
                }
            }
            (
                WireOp::Append { session, .. },
                Some(Op::Append {
                    records,
                    turn_completed,
                    ..
                }),
            ) => {
                if *turn_completed {
                    t.report.turns += 1;
                }
                match res.status {
                    ST_OK => {
                        t.report.user_bytes +=
                            records.iter().map(|r| r.body.len() as u64).sum::<u64>();
                        let model = sessions.entry(session.clone()).or_default();
                        model.extend(records.iter());
                        if res.appended.is_some_and(|(c, _)| c) {
                            t.report.compactions += 1;
                            compact_model(model);
                        }
                    }
                    ST_BLOCKED => {
                        t.report.blocked += 1;
                        sessions.remove(session);
                        match it.next() {
                            Some(d) if d.tag == TAG_BLOCKED_DELETE => {
                                stack(&mut t, d, &at);
                                if d.status != ST_OK {
                                    failed(&mut t, &at, d);
                                }
                            }
                            _ => {
                                t.error(at, "no delete result after a blocked append");
                                complete = false;
                                break;
                            }
                        }
                    }
                    _ => failed(&mut t, &at, res),
                }
            }
            (WireOp::History { session, .. }, _) => match (res.status, res.digest) {
                (ST_OK, Some(got)) => {
                    t.report.history_checks += 1;
                    let want = sessions.get(session).map_or(&[][..], |v| v.as_slice());
                    let mut want = history_digest(want);
                    if corrupt_next {
                        want.crc32 ^= 1;
                        corrupt_next = false;
                    }
                    if want != got {
                        t.report.history_mismatches += 1;
                        if t.report.first_mismatch.is_none() {
                            t.report.first_mismatch =
                                Some(format!("{at} {session}: expected {want}, got {got}"));
                        }
                    }
                }
                _ => failed(&mut t, &at, res),
            },
            (WireOp::SessionDelete { session, .. }, _) => match res.status {
                ST_OK => {
                    sessions.remove(session);
                }
                _ => failed(&mut t, &at, res),
            },
            (WireOp::MemoryStore { content, .. }, _) => {
                let target = match (res.status, res.item) {
                    (ST_OK, Some((id, _))) => {
                        t.report.user_bytes += content.len() as u64;
                        Target::Live(id)
                    }
                    _ => {
                        failed(&mut t, &at, res);
                        Target::Failed
                    }
                };
                targets.push(target);
            }
            (WireOp::MemoryUpdate { target, .. }, Some(Op::MemoryUpdate { content, .. })) => {
                let live = match targets.get(*target as usize) {
                    Some(Target::Live(h)) => Some(*h),
                    _ => None,
                };
                match (live, res.status) {
                    (None, ST_SKIPPED) => t.report.skipped += 1,
                    (Some(item), ST_OK) => {
                        t.report.user_bytes += content.as_ref().map_or(0, |c| c.len() as u64);
                        let newest = res.item.map_or(item, |(id, _)| id);
                        retarget(&mut targets, item, Target::Live(newest));
                    }
                    (Some(item), ST_EVICTED) => {
                        t.report.skipped += 1;
                        retarget(&mut targets, item, Target::Evicted);
                    }
                    (Some(_), ST_FAILED) => failed(&mut t, &at, res),
                    (live, st) => t.error(
                        at,
                        format!("target {target}: host has {live:?}, firmware status {st}"),
                    ),
                }
            }
            (WireOp::MemoryForget { target }, _) => {
                let live = match targets.get(*target as usize) {
                    Some(Target::Live(h)) => Some(*h),
                    _ => None,
                };
                match (live, res.status) {
                    (None, ST_SKIPPED) => t.report.skipped += 1,
                    (Some(item), ST_OK) => retarget(&mut targets, item, Target::Forgotten),
                    (Some(item), ST_EVICTED) => {
                        t.report.skipped += 1;
                        retarget(&mut targets, item, Target::Evicted);
                    }
                    (Some(_), ST_FAILED) => failed(&mut t, &at, res),
                    (live, st) => t.error(
                        at,
                        format!("target {target}: host has {live:?}, firmware status {st}"),
                    ),
                }
            }
            (WireOp::MemoryRecall { .. }, _) | (WireOp::MemoryList, _) | (WireOp::Remount, _) => {
                if res.status != ST_OK {
                    failed(&mut t, &at, res);
                }
            }
            (WireOp::ProfileWrite { doc, body }, _) => match res.status {
                ST_OK => {
                    t.report.user_bytes += body.len() as u64;
                    profiles.insert(*doc, body.as_bytes().to_vec());
                }
                _ => failed(&mut t, &at, res),
            },
            (WireOp::ProfileRead { doc }, _) => match (res.status, res.digest) {
                (ST_OK, Some(got)) => {
                    t.report.profile_checks += 1;
                    let want = profile_digest(profiles.get(doc).map_or(&[][..], |b| b));
                    if want != got {
                        t.report.profile_mismatches += 1;
                        if t.report.first_mismatch.is_none() {
                            t.report.first_mismatch = Some(format!(
                                "{at} {:?}: expected {want}, got {got}",
                                doc_name(*doc)
                            ));
                        }
                    }
                }
                _ => failed(&mut t, &at, res),
            },
            (w, _) => t.error(at, format!("op {w:?} out of place")),
        }
    }
    if complete && it.next().is_some() {
        t.error("end".into(), "results after the last op");
    }
    match summary {
        None => t.error("end".into(), "the firmware wrote no summary"),
        Some(s) => {
            if s.ops_crc != encoded.ops_crc {
                t.error(
                    "summary".into(),
                    format!(
                        "the firmware read a stream with ops CRC {:08x}, this trace and these \
                         options give {:08x}",
                        s.ops_crc, encoded.ops_crc
                    ),
                );
            }
            if s.flash_rule_violations > 0 {
                t.error(
                    "flash".into(),
                    format!("{} NOR rule violations", s.flash_rule_violations),
                );
            }
            if s.stack_overflow != 0 {
                t.error(
                    "stack".into(),
                    "the paint reached the stack limit: overflow",
                );
            }
            let r = &mut t.report;
            r.geometry.sector_count = s.sector_count;
            r.erases = u64::from(s.erases);
            r.replay_erases = u64::from(s.replay_erases);
            r.erase_count_max = s.erase_counts.iter().copied().max().unwrap_or(0).into();
            r.sectors_erased_in_replay = u64::from(s.sectors_erased_in_replay);
            r.ring_wrapped = s.sector_count > 0 && s.sectors_erased_in_replay == s.sector_count;
            r.programmed_bytes = s.programmed_bytes;
            r.erased_bytes = s.erased_bytes;
            r.read_bytes = s.read_bytes;
            r.flash_rule_violations = u64::from(s.flash_rule_violations);
            r.engine_state_bytes = u64::from(s.engine_state_bytes);
            r.history_buffer_bytes = u64::from(s.history_buffer_bytes);
            r.history_buffer_needed_bytes = u64::from(s.history_buffer_needed_bytes);
            r.stack_region_bytes = u64::from(s.stack_region_bytes);
            r.call_site_depth_bytes = u64::from(s.call_site_depth_bytes);
            r.stack_overflow = s.stack_overflow != 0;
            r.erase_counts = s.erase_counts;
        }
    }
    if let Some(status) = copts.qemu_status.filter(|s| *s != 0) {
        t.error(
            "qemu".into(),
            format!("QEMU exited with status {status} (timeout: 124)"),
        );
    }
    // The host executor has no `Store` to tour: with the tour the flash did
    // more than the stream's trace ops, so there is nothing to compare.
    if copts.compare_host && !opts.tour {
        let model = opts
            .preset
            .model(opts.size_bytes)
            .map_err(|e| StreamError(e.0))?;
        let mut driver =
            crate::replay::ClawmemDriver::<Esp32Flash>::format(crate::flash::SimFlash::new(model))
                .map_err(|e| StreamError(e.0))?;
        let host = execute(&encoded.bytes, &mut driver)?;
        let (_, host) = decode_results(&host)?;
        let host = host.expect("execute writes a summary");
        let r = &mut t.report;
        r.host_erases = Some(u64::from(host.erases));
        r.same_flash_work_as_host = Some(
            u64::from(host.erases) == r.erases
                && host.programmed_bytes == r.programmed_bytes
                && host.erased_bytes == r.erased_bytes
                && host.erase_counts == r.erase_counts,
        );
    }
    let r = &mut t.report;
    r.over_stack_budget = copts.stack_budget.is_some_and(|b| r.peak_stack_bytes > b);
    r.ok = r.history_mismatches == 0
        && r.profile_mismatches == 0
        && r.errors == 0
        && !r.stack_overflow
        && !r.over_stack_budget
        && (r.ring_wrapped || !copts.require_wrap);
    Ok(t.report)
}

// ---- a host executor ----------------------------------------------------------

/// Runs an op stream through a [`Driver`] the way the firmware does
/// (targets, liveness, blocked sessions, digests) and returns the results
/// file it would write, with no stack figures. The tests use it to show the
/// checker agrees with `replay`.
pub fn execute<D: Driver>(stream: &[u8], driver: &mut D) -> Result<Vec<u8>, StreamError> {
    let (h, ops) = decode_stream(stream)?;
    let erases_before = driver.flash().stats().erase_counts.clone();
    let mut out = encode_result(&ok(TAG_FORMAT));
    let mut live = vec![false; h.session_slots as usize];
    let mut targets: Vec<Target> = Vec::new();
    let fail = |tag: u8, e: OpError| -> WireResult {
        match e {
            OpError::Blocked => WireResult {
                message: Some("session blocked".into()),
                ..status(tag, ST_FAILED)
            },
            OpError::Evicted => status(tag, ST_EVICTED),
            e => WireResult {
                message: Some(e.to_string()),
                ..status(tag, ST_FAILED)
            },
        }
    };
    let split = |s: &str| -> Vec<String> {
        if s.is_empty() {
            Vec::new()
        } else {
            s.split(',').map(str::to_string).collect()
        }
    };
    for op in &ops {
        let tag = op.tag();
        let res = match op {
            WireOp::Append {
                slot,
                session,
                turn_completed,
                records,
            } => {
                let recs: Vec<TraceRecord> = records
                    .iter()
                    .map(|(k, f, b)| TraceRecord {
                        kind: RecordType::try_from_u8(*k).map_or(RecordKind::User, Into::into),
                        format: format_from_byte(*f),
                        body: String::from_utf8_lossy(b).into_owned(),
                    })
                    .collect();
                match driver.append(session, &recs, *turn_completed) {
                    Ok(a) => {
                        live[*slot as usize] = true;
                        WireResult {
                            appended: Some((a.compacted, a.blocked)),
                            ..ok(tag)
                        }
                    }
                    Err(OpError::Blocked) => {
                        out.extend(encode_result(&status(tag, ST_BLOCKED)));
                        live[*slot as usize] = false;
                        match driver.session_delete(session) {
                            Ok(()) => ok(TAG_BLOCKED_DELETE),
                            Err(e) => fail(TAG_BLOCKED_DELETE, e),
                        }
                    }
                    Err(e) => fail(tag, e),
                }
            }
            WireOp::History { session, .. } => match driver.history(session) {
                Ok(h) => {
                    let mut d = Digester::default();
                    for r in &h {
                        d.record(kind_byte(r.kind), format_byte(r.format), &r.body);
                    }
                    WireResult {
                        digest: Some(d.finish()),
                        ..ok(tag)
                    }
                }
                Err(e) => fail(tag, e),
            },
            WireOp::SessionDelete { slot, session } => match driver.session_delete(session) {
                Ok(()) => {
                    live[*slot as usize] = false;
                    ok(tag)
                }
                Err(e) => fail(tag, e),
            },
            WireOp::CleanupDelete { slot, session } => {
                if !live[*slot as usize] {
                    status(tag, ST_NOT_LIVE)
                } else {
                    live[*slot as usize] = false;
                    match driver.session_delete(session) {
                        Ok(()) => ok(tag),
                        Err(e) => fail(tag, e),
                    }
                }
            }
            WireOp::MemoryStore {
                content,
                tags,
                keywords,
                source,
            } => {
                let (tags, keywords) = (split(tags), split(keywords));
                let item = MemoryItem {
                    content,
                    tags: &tags,
                    keywords: &keywords,
                    source: if *source == 0 {
                        MemorySource::Manual
                    } else {
                        MemorySource::AutoLlm
                    },
                };
                match driver.memory_store(&item) {
                    Ok(s) => {
                        targets.push(Target::Live(s.item.0 as u32));
                        WireResult {
                            item: Some((s.item.0 as u32, s.duplicate)),
                            ..ok(tag)
                        }
                    }
                    Err(e) => {
                        targets.push(Target::Failed);
                        fail(tag, e)
                    }
                }
            }
            WireOp::MemoryRecall { limit, labels } => match driver.memory_recall(labels, *limit) {
                Ok(ids) => {
                    let ids: Vec<u32> = ids.iter().map(|h| h.0 as u32).collect();
                    WireResult {
                        ids: Some(ids_digest(&ids)),
                        ..ok(tag)
                    }
                }
                Err(e) => fail(tag, e),
            },
            WireOp::MemoryUpdate {
                target,
                content,
                tags,
                keywords,
            } => match targets.get(*target as usize) {
                Some(Target::Live(item)) => {
                    let item = *item;
                    let (tags, keywords) = (split(tags), split(keywords));
                    let change = MemoryChange {
                        content: Some(content),
                        tags: Some(&tags),
                        keywords: Some(&keywords),
                    };
                    match driver.memory_update(ItemHandle(u64::from(item)), &change) {
                        Ok(n) => {
                            retarget(&mut targets, item, Target::Live(n.0 as u32));
                            WireResult {
                                item: Some((n.0 as u32, false)),
                                ..ok(tag)
                            }
                        }
                        Err(OpError::Evicted) => {
                            retarget(&mut targets, item, Target::Evicted);
                            status(tag, ST_EVICTED)
                        }
                        Err(e) => fail(tag, e),
                    }
                }
                _ => status(tag, ST_SKIPPED),
            },
            WireOp::MemoryForget { target } => match targets.get(*target as usize) {
                Some(Target::Live(item)) => {
                    let item = *item;
                    match driver.memory_forget(ItemHandle(u64::from(item))) {
                        Ok(()) => {
                            retarget(&mut targets, item, Target::Forgotten);
                            ok(tag)
                        }
                        Err(OpError::Evicted) => {
                            retarget(&mut targets, item, Target::Evicted);
                            status(tag, ST_EVICTED)
                        }
                        Err(e) => fail(tag, e),
                    }
                }
                _ => status(tag, ST_SKIPPED),
            },
            WireOp::MemoryList => match driver.memory_list() {
                Ok(ids) => {
                    let ids: Vec<u32> = ids.iter().map(|h| h.0 as u32).collect();
                    WireResult {
                        ids: Some(ids_digest(&ids)),
                        ..ok(tag)
                    }
                }
                Err(e) => fail(tag, e),
            },
            WireOp::ProfileWrite { doc, body } => {
                match driver.profile_write(doc_name(*doc).expect("doc"), body) {
                    Ok(()) => ok(tag),
                    Err(e) => fail(tag, e),
                }
            }
            WireOp::ProfileRead { doc } => {
                match driver.profile_read(doc_name(*doc).expect("doc")) {
                    Ok(body) => WireResult {
                        digest: Some(profile_digest(body.as_deref().unwrap_or(&[]))),
                        ..ok(tag)
                    },
                    Err(e) => fail(tag, e),
                }
            }
            WireOp::Remount => match driver.remount() {
                Ok(()) => ok(tag),
                Err(e) => fail(tag, e),
            },
            WireOp::Round(_) => {
                targets.clear();
                ok(tag)
            }
            WireOp::MemoryClear => match driver.memory_clear() {
                Ok(()) => ok(tag),
                Err(e) => fail(tag, e),
            },
            WireOp::Tour => return err("the host executor does not run the API tour"),
        };
        out.extend(encode_result(&res));
    }
    let stats = driver.flash().stats();
    let counts: Vec<u32> = stats.erase_counts.iter().map(|c| *c as u32).collect();
    let replay: Vec<u64> = stats
        .erase_counts
        .iter()
        .zip(erases_before.iter())
        .map(|(a, b)| a - b)
        .collect();
    out.extend(encode_summary(&Summary {
        ops_crc: h.ops_crc,
        partition_bytes: h.partition_bytes,
        sector_count: counts.len() as u32,
        ops_done: ops.len() as u32,
        erases: stats.erases as u32,
        replay_erases: replay.iter().sum::<u64>() as u32,
        sectors_erased_in_replay: replay.iter().filter(|c| **c > 0).count() as u32,
        programmed_bytes: stats.programmed_bytes,
        erased_bytes: stats.erased_bytes,
        read_bytes: stats.read_bytes,
        erase_counts: counts,
        ..Summary::default()
    }));
    Ok(out)
}

fn status(tag: u8, status: u8) -> WireResult {
    WireResult {
        tag,
        status,
        stack: 0,
        message: None,
        appended: None,
        digest: None,
        item: None,
        ids: None,
        tour: None,
        value: None,
    }
}

fn ok(tag: u8) -> WireResult {
    status(tag, ST_OK)
}

fn format_from_byte(b: u8) -> Format {
    match b {
        1 => Format::Openai,
        2 => Format::Anthropic,
        3 => Format::OpenaiResponses,
        _ => Format::Unknown,
    }
}

trait TryFromU8: Sized {
    fn try_from_u8(b: u8) -> Option<Self>;
}

impl TryFromU8 for RecordType {
    fn try_from_u8(b: u8) -> Option<Self> {
        Some(match b {
            1 => RecordType::User,
            2 => RecordType::AssistantFinal,
            3 => RecordType::AssistantTool,
            4 => RecordType::ToolResult,
            _ => return None,
        })
    }
}
