//! Agent traces: the JSON Lines workload format of `traces/FORMAT.md`
//! (version 1), parsed into typed operations.
//!
//! A [`Trace`] is the header and every operation of one file, each with the
//! line it came from. Parsing is strict where the format is and lenient where
//! it says so:
//!
//! - line 1 must be a header whose `"trace"` is `"clawmem-trace"` and whose
//!   `"version"` is 1;
//! - every later line is one operation; an unknown `op`, a missing or
//!   mistyped field, a `limit` outside 1 to 128, or a memory `target` that
//!   names no earlier `memory_store` is a [`TraceError`] naming the file and
//!   the line;
//! - fields that the format does not define are ignored, on any line;
//! - blank lines are skipped (a trailing newline is not an operation).
//!
//! The types here are engine-independent: a replayer converts them to what
//! its engine takes (see [`crate::replay`](mod@crate::replay)).

use std::fmt;
use std::path::Path;

use serde::{Deserialize, Serialize};

/// The header's `"trace"` value.
pub const TRACE_MAGIC: &str = "clawmem-trace";
/// The only trace format version this reader knows.
pub const TRACE_VERSION: u64 = 1;
/// Largest `limit` of a `memory_recall`.
pub const RECALL_LIMIT_MAX: u32 = 128;

/// A trace that could not be read, with where.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TraceError {
    /// The file (or the name given to [`Trace::parse`]).
    pub file: String,
    /// 1-based line number; 0 when the file itself could not be read.
    pub line: usize,
    /// What is wrong.
    pub message: String,
}

impl fmt::Display for TraceError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.line == 0 {
            write!(f, "{}: {}", self.file, self.message)
        } else {
            write!(f, "{}:{}: {}", self.file, self.line, self.message)
        }
    }
}

impl std::error::Error for TraceError {}

/// The first line of a trace. Fields beyond these are ignored.
#[derive(Clone, Debug, Default, PartialEq, Eq, Deserialize, Serialize)]
pub struct Header {
    /// Always [`TRACE_VERSION`] once parsed.
    pub version: u64,
    /// Where the workload comes from.
    #[serde(default)]
    pub source: Option<String>,
    /// The workload's license.
    #[serde(default)]
    pub license: Option<String>,
    /// Free text.
    #[serde(default)]
    pub notes: Option<String>,
}

/// ESP-Claw's session record types 1 to 4.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Deserialize, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum RecordKind {
    /// `user` (1): starts a turn.
    User,
    /// `assistant_final` (2): completes a turn.
    AssistantFinal,
    /// `assistant_tool` (3): asks for tool calls.
    AssistantTool,
    /// `tool_result` (4): a JSON array of tool messages.
    ToolResult,
}

/// ESP-Claw's backend formats 0 to 3.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Deserialize, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Format {
    /// `unknown` (0).
    Unknown,
    /// `openai` (1): chat completions.
    Openai,
    /// `anthropic` (2): messages with content blocks.
    Anthropic,
    /// `openai_responses` (3): the Responses API.
    OpenaiResponses,
}

/// One record of an `append`.
#[derive(Clone, Debug, PartialEq, Eq, Deserialize, Serialize)]
pub struct TraceRecord {
    /// Record type.
    #[serde(rename = "type")]
    pub kind: RecordKind,
    /// Backend format it was written in.
    pub format: Format,
    /// The message, itself a JSON text; opaque bytes to an engine.
    pub body: String,
}

/// Who created a memory item.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Deserialize, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum MemorySource {
    /// `manual`: the user asked for it.
    Manual,
    /// `auto_llm`: extracted by the model.
    AutoLlm,
}

/// The four profile documents.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Deserialize, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum ProfileName {
    /// `soul`
    Soul,
    /// `identity`
    Identity,
    /// `user`
    User,
    /// `agents`
    Agents,
}

/// One operation of a trace (see the table in `traces/FORMAT.md`).
#[derive(Clone, Debug, PartialEq, Eq, Deserialize, Serialize)]
#[serde(tag = "op", rename_all = "snake_case")]
pub enum Op {
    /// Persist one batch of session records.
    Append {
        /// Session id.
        session: String,
        /// The batch, in order.
        records: Vec<TraceRecord>,
        /// Whether the batch holds the turn's final answer.
        turn_completed: bool,
    },
    /// Read the whole history of a session.
    History {
        /// Session id.
        session: String,
    },
    /// Delete a session and all its records.
    SessionDelete {
        /// Session id.
        session: String,
    },
    /// Store one long-term memory item; numbered in trace order (see
    /// [`Trace::store_count`]).
    MemoryStore {
        /// The item's text.
        content: String,
        /// Tags (summary labels come from them).
        tags: Vec<String>,
        /// Keywords.
        keywords: Vec<String>,
        /// Who created it.
        source: MemorySource,
    },
    /// Recall items carrying any of `labels`.
    MemoryRecall {
        /// Summary labels, compared exactly.
        labels: Vec<String>,
        /// At most this many items (1 to 128).
        limit: u32,
    },
    /// Update the item named by `target`.
    MemoryUpdate {
        /// Number of the `memory_store` that created the item.
        target: usize,
        /// New content, if any.
        #[serde(default)]
        content: Option<String>,
        /// New tags, replacing the old ones, if any.
        #[serde(default)]
        tags: Option<Vec<String>>,
        /// New keywords, replacing the old ones, if any.
        #[serde(default)]
        keywords: Option<Vec<String>>,
    },
    /// Forget the item named by `target`.
    MemoryForget {
        /// Number of the `memory_store` that created the item.
        target: usize,
    },
    /// List every active item.
    MemoryList {},
    /// Replace a profile document.
    ProfileWrite {
        /// Which document.
        name: ProfileName,
        /// Its new text.
        body: String,
    },
    /// Read a profile document.
    ProfileRead {
        /// Which document.
        name: ProfileName,
    },
    /// Clean power cycle: drop the engine and mount the same flash again.
    Remount {},
}

impl Op {
    /// The `op` name as the trace spells it.
    pub fn name(&self) -> &'static str {
        match self {
            Op::Append { .. } => "append",
            Op::History { .. } => "history",
            Op::SessionDelete { .. } => "session_delete",
            Op::MemoryStore { .. } => "memory_store",
            Op::MemoryRecall { .. } => "memory_recall",
            Op::MemoryUpdate { .. } => "memory_update",
            Op::MemoryForget { .. } => "memory_forget",
            Op::MemoryList {} => "memory_list",
            Op::ProfileWrite { .. } => "profile_write",
            Op::ProfileRead { .. } => "profile_read",
            Op::Remount {} => "remount",
        }
    }

    /// The session the operation names, if any.
    pub fn session(&self) -> Option<&str> {
        match self {
            Op::Append { session, .. }
            | Op::History { session }
            | Op::SessionDelete { session } => Some(session),
            _ => None,
        }
    }
}

/// An operation and the line it came from.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TraceOp {
    /// 1-based line number in the file.
    pub line: usize,
    /// The operation.
    pub op: Op,
}

/// A whole trace: its header and its operations in order.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Trace {
    /// The file it was read from (or the name given to [`Trace::parse`]).
    pub file: String,
    /// The header.
    pub header: Header,
    /// The operations, in order.
    pub ops: Vec<TraceOp>,
}

impl Trace {
    /// Reads and parses the trace at `path`.
    pub fn from_path(path: impl AsRef<Path>) -> Result<Trace, TraceError> {
        let path = path.as_ref();
        let file = path.display().to_string();
        let text = std::fs::read_to_string(path).map_err(|e| TraceError {
            file: file.clone(),
            line: 0,
            message: e.to_string(),
        })?;
        Trace::parse(&file, &text)
    }

    /// Parses `text`; `file` names it in errors.
    pub fn parse(file: &str, text: &str) -> Result<Trace, TraceError> {
        let err = |line: usize, message: String| TraceError {
            file: file.to_string(),
            line,
            message,
        };
        let mut lines = text.lines().enumerate().map(|(i, l)| (i + 1, l));
        let header = match lines.next() {
            Some((n, l)) if !l.trim().is_empty() => parse_header(l).map_err(|m| err(n, m))?,
            _ => return Err(err(1, "empty trace: line 1 must be the header".into())),
        };
        let mut ops = Vec::new();
        let mut stores = 0usize;
        for (n, l) in lines {
            if l.trim().is_empty() {
                continue;
            }
            let op: Op = serde_json::from_str(l).map_err(|e| err(n, describe(&e)))?;
            check_op(&op, stores).map_err(|m| err(n, m))?;
            if matches!(op, Op::MemoryStore { .. }) {
                stores += 1;
            }
            ops.push(TraceOp { line: n, op });
        }
        Ok(Trace {
            file: file.to_string(),
            header,
            ops,
        })
    }

    /// Number of `memory_store` operations, which number memory targets.
    pub fn store_count(&self) -> usize {
        self.ops
            .iter()
            .filter(|o| matches!(o.op, Op::MemoryStore { .. }))
            .count()
    }

    /// Number of completed turns: appends with `turn_completed`.
    pub fn turn_count(&self) -> usize {
        self.ops
            .iter()
            .filter(|o| {
                matches!(
                    o.op,
                    Op::Append {
                        turn_completed: true,
                        ..
                    }
                )
            })
            .count()
    }
}

fn parse_header(line: &str) -> Result<Header, String> {
    let v: serde_json::Value =
        serde_json::from_str(line).map_err(|e| format!("bad header: {}", describe(&e)))?;
    let obj = v.as_object().ok_or("bad header: expected a JSON object")?;
    match obj.get("trace").and_then(|t| t.as_str()) {
        Some(TRACE_MAGIC) => {}
        Some(other) => {
            return Err(format!(
                "not a clawmem trace: header \"trace\" is {other:?}, expected {TRACE_MAGIC:?}"
            ))
        }
        None => {
            return Err(format!(
                "not a clawmem trace: the header has no \"trace\":{TRACE_MAGIC:?}"
            ))
        }
    }
    match obj.get("version").and_then(|t| t.as_u64()) {
        Some(TRACE_VERSION) => {}
        Some(other) => {
            return Err(format!(
                "trace version {other} is not supported (this reader knows version {TRACE_VERSION})"
            ))
        }
        None => return Err("the header has no integer \"version\"".into()),
    }
    serde_json::from_value(v).map_err(|e| format!("bad header: {e}"))
}

/// The rules serde cannot express.
fn check_op(op: &Op, stores_before: usize) -> Result<(), String> {
    match op {
        Op::MemoryRecall { limit, .. } if !(1..=RECALL_LIMIT_MAX).contains(limit) => Err(format!(
            "memory_recall limit {limit} is outside 1 to {RECALL_LIMIT_MAX}"
        )),
        Op::MemoryUpdate { target, .. } | Op::MemoryForget { target }
            if *target >= stores_before =>
        {
            Err(format!(
                "{} target {target} names no earlier memory_store ({stores_before} so far)",
                op.name()
            ))
        }
        _ => Ok(()),
    }
}

/// serde_json's message without its "at line 1 column N" suffix, which is
/// about the line alone and would confuse the file's line number.
fn describe(e: &serde_json::Error) -> String {
    let s = e.to_string();
    match s.rfind(" at line ") {
        Some(i) => format!("{} (column {})", &s[..i], e.column()),
        None => s,
    }
}
