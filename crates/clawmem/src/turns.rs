//! Turn-aware compaction planning and summary-cut planning, streamed.
//!
//! A session is a sequence of records ([`RecordType`]). A *turn* starts at
//! record 0 and at every USER record; it is *completed* if it holds an
//! ASSISTANT_FINAL and *has tools* if it holds an ASSISTANT_TOOL or a
//! TOOL_RESULT.
//!
//! **Turn-aware compaction** (ESP-Claw, `session_history_analyze_turns`,
//! `session_history_compact_keep_record` and `session_history_plan_compaction`
//! in `components/claw_modules/claw_memory/src/claw_memory_session.c`) runs when
//! a turn completes and the log is larger than [`SESSION_SIZE_LIMIT`]. It keeps
//! every USER and ASSISTANT_FINAL record, every record of an incomplete last
//! turn, and the tool records (types 3 and 4) of only the newest
//! `N` = [`COMPACT_TOOL_TURNS`] completed turns that have tools. The size that is
//! compared with the limit is the log's: each kept record's body plus one
//! newline byte. If the compacted size is still over the limit the session is
//! *blocked* and the user gets [`SESSION_BLOCKED_WARNING`].
//!
//! ESP-Claw holds the whole index in RAM for this; clawmem cannot, so the plan
//! is made in two streaming passes with O(1) memory (O(`N`) for the kept tool
//! turns, `N` being a const generic):
//!
//! 1. feed every record's type and body length, in order, to a
//!    [`PlanBuilder`]; [`PlanBuilder::finish`] yields a [`Plan`] with the
//!    compacted size, so the caller can decide between compacting and blocking
//!    before writing anything;
//! 2. walk the records again in the same order and ask a [`KeepCursor`]
//!    (from [`Plan::cursor`]) whether to keep each one.
//!
//! **Summary cut** (Ameba-Claw's token-budget compaction, `do_compact` in
//! `claw_modules/claw_memory/src/claw_memory_compact.c` of
//! `Ameba-AIoT/ameba-claw`): all turns before the last `protect` turns are
//! replaced by one summary record. [`summary_first_kept_turn`] gives the first
//! protected turn from the turn count of the first pass, and a
//! [`SummaryCutFinder`] finds, in a second pass, the record index where it
//! starts and the size of what is replaced.
//!
//! Pure logic: no flash I/O, so nothing here is affected by power loss.
//! Sizes are `u64` and saturate instead of overflowing.

use crate::chdx::RecordType;

/// Log size above which a completed turn triggers compaction, in bytes
/// (`CLAW_MEMORY_SESSION_SIZE_LIMIT`, 150 KiB). Users with verbose reasoning
/// models hit it after one turn (espressif/esp-claw#161), so the engine should
/// make its limit configurable; this is the default.
pub const SESSION_SIZE_LIMIT: u64 = 150 * 1024;

/// Number of newest completed turns with tools whose tool records survive
/// compaction (`CLAW_MEMORY_SESSION_COMPACT_TOOL_TURNS`).
pub const COMPACT_TOOL_TURNS: usize = 1;

/// The message of a blocked session (defined with the error it explains,
/// [`Error::Blocked`](crate::Error::Blocked)).
pub use crate::error::SESSION_BLOCKED_WARNING;

/// Turns protected from the summary (Ameba-Claw's default: the last 4).
pub const SUMMARY_PROTECTED_TURNS: u64 = 4;

/// Ameba-Claw skips a summary that would replace fewer than this many turns.
pub const SUMMARY_MIN_REPLACED_TURNS: u64 = 2;

/// Longest summary kept, in characters, old and new summaries joined
/// (Ameba-Claw's `COMPACT_SUMMARY_MAX`).
pub const SUMMARY_MAX_CHARS: usize = 3072;

/// Size of a record in the log: its body plus one newline byte.
pub const fn record_size_bytes(body_len_bytes: u64) -> u64 {
    body_len_bytes.saturating_add(1)
}

/// `true` if a log of `data_size_bytes` must be compacted (ESP-Claw compacts
/// only when the size is strictly above the limit).
pub const fn needs_compaction(data_size_bytes: u64, limit_bytes: u64) -> bool {
    data_size_bytes > limit_bytes
}

/// Tracks which turn each record of a stream belongs to.
///
/// Feed it every record in order; record 0 starts turn 0 whatever its type,
/// and each later USER record starts the next turn.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct TurnCursor {
    records: u64,
    turn: u64,
}

impl TurnCursor {
    /// A cursor before the first record.
    pub const fn new() -> Self {
        TurnCursor {
            records: 0,
            turn: 0,
        }
    }

    /// Advances over one record and returns the index of its turn.
    pub fn advance(&mut self, record_type: RecordType) -> u64 {
        if self.records > 0 && record_type == RecordType::User {
            add_sat(&mut self.turn, 1);
        }
        add_sat(&mut self.records, 1);
        self.turn
    }

    /// Records seen so far.
    pub const fn records(&self) -> u64 {
        self.records
    }

    /// Turns seen so far (0 before the first record).
    #[inline(never)]
    pub const fn turns(&self) -> u64 {
        if self.records == 0 {
            0
        } else {
            self.turn.saturating_add(1)
        }
    }
}

/// `*a = a.saturating_add(b)`, out of line: a 64-bit saturating add is
/// long on a 32-bit target, and the planner has several.
#[inline(never)]
fn add_sat(a: &mut u64, b: u64) {
    *a = a.saturating_add(b);
}

#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
struct ToolTurn {
    turn: u64,
    tool_records: u64,
    tool_size_bytes: u64,
}

/// First pass of turn-aware compaction: accumulates record types and sizes
/// and remembers the newest `N` completed turns with tools.
#[derive(Debug, Clone)]
pub struct PlanBuilder<const N: usize = COMPACT_TOOL_TURNS> {
    cursor: TurnCursor,
    original_size_bytes: u64,
    base_size_bytes: u64,
    base_records: u64,
    current_completed: bool,
    current_tools: ToolTurn,
    kept: [ToolTurn; N],
    kept_len: usize,
    kept_head: usize,
}

/// [`PlanBuilder`] keeping ESP-Claw's [`COMPACT_TOOL_TURNS`] tool turns.
pub type DefaultPlanBuilder = PlanBuilder<COMPACT_TOOL_TURNS>;

impl<const N: usize> Default for PlanBuilder<N> {
    fn default() -> Self {
        Self::new()
    }
}

impl<const N: usize> PlanBuilder<N> {
    /// An empty builder.
    pub const fn new() -> Self {
        const EMPTY: ToolTurn = ToolTurn {
            turn: 0,
            tool_records: 0,
            tool_size_bytes: 0,
        };
        PlanBuilder {
            cursor: TurnCursor::new(),
            original_size_bytes: 0,
            base_size_bytes: 0,
            base_records: 0,
            current_completed: false,
            current_tools: EMPTY,
            kept: [EMPTY; N],
            kept_len: 0,
            kept_head: 0,
        }
    }

    /// Feeds the next record: its type and the length of its body (without the
    /// newline).
    pub fn push(&mut self, record_type: RecordType, body_len_bytes: u64) {
        // The first record, and every USER record after it, opens a turn
        // (`TurnCursor::advance`; its count cannot saturate: a session
        // holds far fewer records).
        let first = self.cursor.records() == 0;
        let turn = self.cursor.advance(record_type);
        if first || record_type == RecordType::User {
            if !first {
                self.close_turn();
            }
            self.current_completed = false;
            self.current_tools = ToolTurn {
                turn,
                tool_records: 0,
                tool_size_bytes: 0,
            };
        }
        let size = record_size_bytes(body_len_bytes);
        add_sat(&mut self.original_size_bytes, size);
        if record_type.is_tool() {
            let tools = &mut self.current_tools;
            add_sat(&mut tools.tool_records, 1);
            add_sat(&mut tools.tool_size_bytes, size);
        } else {
            if record_type == RecordType::AssistantFinal {
                self.current_completed = true;
            }
            add_sat(&mut self.base_records, 1);
            add_sat(&mut self.base_size_bytes, size);
        }
    }

    /// Remembers the turn being closed if it is completed and has tools.
    // Out of line: `push` and `finish` call it.
    #[inline(never)]
    fn close_turn(&mut self) {
        if !self.current_completed || self.current_tools.tool_records == 0 || N == 0 {
            return;
        }
        // The slot after the newest kept turn: a free one while the ring
        // is not full, else the oldest (`kept_len == N`, `kept_head < N`),
        // which it replaces.
        let slot = (self.kept_head + self.kept_len) % N;
        if let Some(entry) = self.kept.get_mut(slot) {
            *entry = self.current_tools;
        }
        if self.kept_len < N {
            self.kept_len += 1;
        } else {
            self.kept_head = (self.kept_head + 1) % N;
        }
    }

    /// Ends the first pass.
    pub fn finish(mut self) -> Plan<N> {
        let turn_count = self.cursor.turns();
        let mut last_turn_incomplete = false;
        let mut extra_records = 0u64;
        let mut extra_size = 0u64;
        if turn_count > 0 {
            if self.current_completed {
                self.close_turn();
            } else {
                last_turn_incomplete = true;
                extra_records = self.current_tools.tool_records;
                extra_size = self.current_tools.tool_size_bytes;
            }
        }
        let mut kept_tool_turns = [0u64; N];
        let mut kept_records = self.base_records.saturating_add(extra_records);
        let mut compacted = self.base_size_bytes.saturating_add(extra_size);
        for i in 0..self.kept_len {
            let slot = if N == 0 { 0 } else { (self.kept_head + i) % N };
            if let (Some(turn), Some(target)) = (self.kept.get(slot), kept_tool_turns.get_mut(i)) {
                *target = turn.turn;
                add_sat(&mut kept_records, turn.tool_records);
                add_sat(&mut compacted, turn.tool_size_bytes);
            }
        }
        Plan {
            record_count: self.cursor.records(),
            turn_count,
            last_turn_incomplete,
            kept_tool_turns,
            kept_tool_turn_count: self.kept_len,
            kept_record_count: kept_records,
            original_size_bytes: self.original_size_bytes,
            compacted_size_bytes: compacted,
        }
    }
}

/// The outcome of the first pass: which records compaction keeps, and how
/// big the log would be afterwards.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Plan<const N: usize = COMPACT_TOOL_TURNS> {
    record_count: u64,
    turn_count: u64,
    last_turn_incomplete: bool,
    kept_tool_turns: [u64; N],
    kept_tool_turn_count: usize,
    kept_record_count: u64,
    original_size_bytes: u64,
    compacted_size_bytes: u64,
}

impl<const N: usize> Plan<N> {
    /// Records seen in the first pass.
    pub const fn record_count(&self) -> u64 {
        self.record_count
    }

    /// Turns seen in the first pass.
    pub const fn turn_count(&self) -> u64 {
        self.turn_count
    }

    /// `true` if the last turn has no ASSISTANT_FINAL (all its records are kept).
    pub const fn last_turn_incomplete(&self) -> bool {
        self.last_turn_incomplete
    }

    /// Turn indices whose tool records are kept, oldest first (at most `N`).
    pub fn kept_tool_turns(&self) -> &[u64] {
        self.kept_tool_turns
            .get(..self.kept_tool_turn_count)
            .unwrap_or(&[])
    }

    /// Records that compaction keeps.
    pub const fn kept_record_count(&self) -> u64 {
        self.kept_record_count
    }

    /// Log size before compaction: every body plus its newline.
    pub const fn original_size_bytes(&self) -> u64 {
        self.original_size_bytes
    }

    /// Log size after compaction: every kept body plus its newline.
    pub const fn compacted_size_bytes(&self) -> u64 {
        self.compacted_size_bytes
    }

    /// `true` if even the compacted log is over `limit_bytes`: the session is
    /// blocked ([`SESSION_BLOCKED_WARNING`]) instead of compacted.
    pub const fn blocked(&self, limit_bytes: u64) -> bool {
        self.compacted_size_bytes > limit_bytes
    }

    /// Whether a record of `record_type` in turn `turn_index` is kept.
    ///
    /// Turn indices past the plan's last turn keep nothing, as in ESP-Claw.
    pub fn keep(&self, turn_index: u64, record_type: RecordType) -> bool {
        if turn_index >= self.turn_count {
            return false;
        }
        if !record_type.is_tool() {
            return true;
        }
        if self.last_turn_incomplete && turn_index.saturating_add(1) == self.turn_count {
            return true;
        }
        self.kept_tool_turns().contains(&turn_index)
    }

    /// A cursor for the second pass.
    pub const fn cursor(&self) -> KeepCursor<'_, N> {
        KeepCursor {
            plan: self,
            turns: TurnCursor::new(),
        }
    }
}

/// Second pass of turn-aware compaction: says, record by record, whether
/// compaction keeps it.
#[derive(Debug, Clone)]
pub struct KeepCursor<'a, const N: usize = COMPACT_TOOL_TURNS> {
    plan: &'a Plan<N>,
    turns: TurnCursor,
}

impl<const N: usize> KeepCursor<'_, N> {
    /// Advances over the next record and says whether to keep it.
    pub fn keep_next(&mut self, record_type: RecordType) -> bool {
        let turn = self.turns.advance(record_type);
        self.plan.keep(turn, record_type)
    }

    /// Records seen so far; after the pass it must equal
    /// [`Plan::record_count`], or the log changed between the passes.
    pub const fn records_seen(&self) -> u64 {
        self.turns.records()
    }
}

/// The first turn kept whole by a summary that protects the last
/// `protected_turns` turns, or `None` if there is nothing before them.
pub const fn summary_first_kept_turn(turn_count: u64, protected_turns: u64) -> Option<u64> {
    if turn_count > protected_turns {
        Some(turn_count - protected_turns)
    } else {
        None
    }
}

/// Where a summary cut falls.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SummaryCut {
    /// Index of the first record kept (the first record of the first
    /// protected turn); records `0..record_index` are replaced.
    pub record_index: u64,
    /// Turns replaced by the summary.
    pub replaced_turns: u64,
    /// Size of the replaced records in the log (bodies plus newlines).
    pub replaced_size_bytes: u64,
}

/// Second pass of a summary cut: finds the record where the protected turns
/// start.
#[derive(Debug, Clone)]
pub struct SummaryCutFinder {
    first_kept_turn: Option<u64>,
    cursor: TurnCursor,
    replaced_size_bytes: u64,
    cut_record: Option<u64>,
}

impl SummaryCutFinder {
    /// A finder for a session of `turn_count` turns (from the first pass,
    /// [`Plan::turn_count`] or a [`TurnCursor`]) protecting the last
    /// `protected_turns`.
    pub const fn new(turn_count: u64, protected_turns: u64) -> Self {
        SummaryCutFinder {
            first_kept_turn: summary_first_kept_turn(turn_count, protected_turns),
            cursor: TurnCursor::new(),
            replaced_size_bytes: 0,
            cut_record: None,
        }
    }

    /// Feeds the next record; returns `true` if it lies before the cut, so the
    /// summary replaces it.
    pub fn push(&mut self, record_type: RecordType, body_len_bytes: u64) -> bool {
        let index = self.cursor.records();
        let turn = self.cursor.advance(record_type);
        let Some(first_kept) = self.first_kept_turn else {
            return false;
        };
        if turn < first_kept {
            add_sat(
                &mut self.replaced_size_bytes,
                record_size_bytes(body_len_bytes),
            );
            true
        } else {
            if self.cut_record.is_none() {
                self.cut_record = Some(index);
            }
            false
        }
    }

    /// Ends the pass: the cut, or `None` if nothing is replaced (too few
    /// turns) or the stream did not match the turn count it was planned with.
    ///
    /// With no protected turns every record is replaced and the cut falls at
    /// the end of the stream.
    pub const fn finish(&self) -> Option<SummaryCut> {
        let record_index = match (self.first_kept_turn, self.cut_record) {
            (Some(0), _) | (None, _) => return None,
            (Some(_), Some(record_index)) => record_index,
            (Some(first_kept), None) => {
                if self.cursor.turns() != first_kept {
                    return None;
                }
                self.cursor.records()
            }
        };
        match self.first_kept_turn {
            Some(replaced_turns) => Some(SummaryCut {
                record_index,
                replaced_turns,
                replaced_size_bytes: self.replaced_size_bytes,
            }),
            None => None,
        }
    }
}

#[cfg(test)]
mod tests {
    extern crate std;

    use super::*;
    use std::vec::Vec;
    use RecordType::{AssistantFinal as F, AssistantTool as T, ToolResult as R, User as U};

    /// Plans `records` (type, body length) and returns the plan and the kept
    /// indices from the second pass.
    fn run_plan<const N: usize>(records: &[(RecordType, u64)]) -> (Plan<N>, Vec<usize>) {
        let mut builder = PlanBuilder::<N>::new();
        for &(ty, len) in records {
            builder.push(ty, len);
        }
        let plan = builder.finish();
        let mut cursor = plan.cursor();
        let kept = records
            .iter()
            .enumerate()
            .filter(|(_, &(ty, _))| cursor.keep_next(ty))
            .map(|(i, _)| i)
            .collect();
        assert_eq!(cursor.records_seen(), plan.record_count());
        (plan, kept)
    }

    /// Reference implementation that holds everything in memory, written from
    /// ESP-Claw's three functions.
    fn reference(types: &[RecordType], keep_tool_turns: usize) -> Vec<usize> {
        let mut starts = Vec::new();
        for (i, &ty) in types.iter().enumerate() {
            if i == 0 || ty == U {
                starts.push(i);
            }
        }
        let turn_of = |i: usize| starts.iter().rposition(|&s| s <= i).unwrap();
        let count = starts.len();
        let completed: Vec<bool> = (0..count)
            .map(|t| (0..types.len()).any(|i| turn_of(i) == t && types[i] == F))
            .collect();
        let tools: Vec<bool> = (0..count)
            .map(|t| (0..types.len()).any(|i| turn_of(i) == t && types[i].is_tool()))
            .collect();
        let mut keep_tools = std::vec![false; count];
        let mut kept = 0;
        for t in (0..count).rev() {
            if completed[t] && tools[t] && kept < keep_tool_turns {
                keep_tools[t] = true;
                kept += 1;
            }
        }
        (0..types.len())
            .filter(|&i| {
                let t = turn_of(i);
                !types[i].is_tool() || (t + 1 == count && !completed[t]) || keep_tools[t]
            })
            .collect()
    }

    #[test]
    fn esp_claw_constants() {
        assert_eq!(SESSION_SIZE_LIMIT, 153_600);
        assert_eq!(COMPACT_TOOL_TURNS, 1);
        assert!(
            SESSION_BLOCKED_WARNING.len() > 192,
            "delivered whole, not cut to 192"
        );
        assert!(SESSION_BLOCKED_WARNING.starts_with("Session history is still too large"));
        assert!(SESSION_BLOCKED_WARNING.contains("by sending the command `/session new [name]`"));
        assert!(SESSION_BLOCKED_WARNING.ends_with("due to limited storage space."));
        assert!(!needs_compaction(SESSION_SIZE_LIMIT, SESSION_SIZE_LIMIT));
        assert!(needs_compaction(SESSION_SIZE_LIMIT + 1, SESSION_SIZE_LIMIT));
    }

    #[test]
    fn turns_start_at_record_zero_and_at_each_user() {
        let mut cursor = TurnCursor::new();
        assert_eq!(cursor.turns(), 0);
        // A log that does not start with USER still starts turn 0 at record 0.
        assert_eq!(cursor.advance(F), 0);
        assert_eq!(cursor.advance(U), 1);
        assert_eq!(cursor.advance(T), 1);
        assert_eq!(cursor.advance(U), 2);
        assert_eq!(cursor.turns(), 3);
        assert_eq!(cursor.records(), 4);
    }

    #[test]
    fn only_the_newest_completed_tool_turn_keeps_its_tools() {
        let records = [
            (U, 10),
            (T, 100),
            (R, 200),
            (F, 20), // turn 0: completed, tools
            (U, 10),
            (T, 100),
            (R, 200),
            (F, 20), // turn 1: completed, tools (newest) -> tools kept
            (U, 10),
            (F, 20), // turn 2: completed, no tools
        ];
        let (plan, kept) = run_plan::<1>(&records);
        assert_eq!(kept, [0, 3, 4, 5, 6, 7, 8, 9]);
        assert_eq!(plan.turn_count(), 3);
        assert_eq!(plan.kept_tool_turns(), &[1]);
        assert!(!plan.last_turn_incomplete());
        assert_eq!(plan.kept_record_count(), 8);
        let all: u64 = records.iter().map(|r| r.1 + 1).sum();
        assert_eq!(plan.original_size_bytes(), all);
        assert_eq!(plan.compacted_size_bytes(), all - 101 - 201);
    }

    #[test]
    fn an_incomplete_last_turn_is_kept_whole() {
        let records = [(U, 1), (T, 1), (R, 1), (F, 1), (U, 1), (T, 1), (R, 1)];
        let (plan, kept) = run_plan::<1>(&records);
        assert!(plan.last_turn_incomplete());
        assert_eq!(kept, [0, 1, 2, 3, 4, 5, 6]);
        assert_eq!(plan.compacted_size_bytes(), plan.original_size_bytes());
    }

    #[test]
    fn an_incomplete_turn_in_the_middle_loses_its_tools() {
        // Turn 0 was aborted after a tool round; turn 1 completed with tools.
        let records = [(U, 1), (T, 1), (R, 1), (U, 1), (T, 1), (R, 1), (F, 1)];
        let (_, kept) = run_plan::<1>(&records);
        assert_eq!(kept, [0, 3, 4, 5, 6]);
    }

    #[test]
    fn the_tool_turn_count_is_a_parameter() {
        let records = [
            (U, 1),
            (T, 1),
            (F, 1),
            (U, 1),
            (R, 1),
            (F, 1),
            (U, 1),
            (T, 1),
            (F, 1),
        ];
        let (p0, k0) = run_plan::<0>(&records);
        assert_eq!(k0, [0, 2, 3, 5, 6, 8]);
        assert!(p0.kept_tool_turns().is_empty());
        let (p2, k2) = run_plan::<2>(&records);
        assert_eq!(k2, [0, 2, 3, 4, 5, 6, 7, 8]);
        assert_eq!(p2.kept_tool_turns(), &[1, 2]);
        let (_, k9) = run_plan::<9>(&records);
        assert_eq!(k9, [0, 1, 2, 3, 4, 5, 6, 7, 8]);
    }

    #[test]
    fn blocked_when_the_compacted_log_is_still_over_the_limit() {
        let records = [(U, 99), (F, 199)];
        let (plan, _) = run_plan::<1>(&records);
        assert_eq!(plan.compacted_size_bytes(), 300);
        assert!(!plan.blocked(300));
        assert!(plan.blocked(299));
    }

    #[test]
    fn an_empty_stream_plans_nothing() {
        let (plan, kept) = run_plan::<1>(&[]);
        assert_eq!(plan.turn_count(), 0);
        assert_eq!(plan.record_count(), 0);
        assert_eq!(plan.compacted_size_bytes(), 0);
        assert!(kept.is_empty());
        assert!(!plan.keep(0, U));
    }

    #[test]
    fn a_log_starting_with_tools_has_a_turn_zero() {
        // Record 0 is a tool record: it still opens turn 0 (ESP-Claw does the same).
        let records = [(T, 1), (F, 1), (U, 1), (F, 1)];
        let (plan, kept) = run_plan::<1>(&records);
        assert_eq!(plan.turn_count(), 2);
        assert_eq!(kept, [0, 1, 2, 3]);
        let (_, kept0) = run_plan::<0>(&records);
        assert_eq!(kept0, [1, 2, 3]);
    }

    #[test]
    fn sizes_saturate_instead_of_overflowing() {
        let records = [(U, u64::MAX), (F, u64::MAX)];
        let (plan, _) = run_plan::<1>(&records);
        assert_eq!(plan.original_size_bytes(), u64::MAX);
        assert!(plan.blocked(SESSION_SIZE_LIMIT));
    }

    #[test]
    fn matches_the_in_memory_reference_on_every_short_sequence() {
        let alphabet = [U, F, T, R];
        for len in 0..=7u32 {
            for code in 0..4u32.pow(len) {
                let mut c = code;
                let types: Vec<RecordType> = (0..len)
                    .map(|_| {
                        let ty = alphabet[(c % 4) as usize];
                        c /= 4;
                        ty
                    })
                    .collect();
                let records: Vec<(RecordType, u64)> = types
                    .iter()
                    .enumerate()
                    .map(|(i, &t)| (t, i as u64 * 7))
                    .collect();
                let (p1, k1) = run_plan::<1>(&records);
                assert_eq!(k1, reference(&types, 1), "{types:?}");
                let expected: u64 = k1.iter().map(|&i| records[i].1 + 1).sum();
                assert_eq!(p1.compacted_size_bytes(), expected, "{types:?}");
                assert_eq!(p1.kept_record_count(), k1.len() as u64);
                let (_, k2) = run_plan::<2>(&records);
                assert_eq!(k2, reference(&types, 2), "{types:?}");
            }
        }
    }

    #[test]
    fn summary_cut_replaces_all_but_the_last_turns() {
        let records = [
            (U, 9),
            (F, 9), // turn 0
            (U, 9),
            (T, 9),
            (R, 9),
            (F, 9), // turn 1
            (U, 9),
            (F, 9), // turn 2
            (U, 9), // turn 3 (incomplete)
        ];
        let turn_count = 4;
        assert_eq!(summary_first_kept_turn(turn_count, 2), Some(2));
        let mut finder = SummaryCutFinder::new(turn_count, 2);
        let replaced: Vec<bool> = records.iter().map(|&(t, l)| finder.push(t, l)).collect();
        assert_eq!(
            replaced,
            [true, true, true, true, true, true, false, false, false]
        );
        assert_eq!(
            finder.finish(),
            Some(SummaryCut {
                record_index: 6,
                replaced_turns: 2,
                replaced_size_bytes: 60,
            })
        );
    }

    #[test]
    fn summary_cut_needs_more_turns_than_protected() {
        assert_eq!(summary_first_kept_turn(4, 4), None);
        assert_eq!(summary_first_kept_turn(0, 0), None);
        let mut finder = SummaryCutFinder::new(2, SUMMARY_PROTECTED_TURNS);
        assert!(!finder.push(U, 1));
        assert!(!finder.push(U, 1));
        assert_eq!(finder.finish(), None);
    }

    #[test]
    fn summary_cut_of_zero_protected_turns_replaces_everything() {
        let mut finder = SummaryCutFinder::new(2, 0);
        assert!(finder.push(U, 1));
        assert!(finder.push(F, 2));
        assert!(finder.push(U, 3));
        assert_eq!(
            finder.finish(),
            Some(SummaryCut {
                record_index: 3,
                replaced_turns: 2,
                replaced_size_bytes: 9,
            })
        );
    }

    #[test]
    fn summary_cut_rejects_a_stream_shorter_than_planned() {
        // Planned with 5 turns, but the second pass saw only 2.
        let mut finder = SummaryCutFinder::new(5, 1);
        finder.push(U, 1);
        finder.push(U, 1);
        assert_eq!(finder.finish(), None);
    }

    #[test]
    fn summary_cut_with_a_leading_non_user_record() {
        let records = [(F, 1), (U, 1), (F, 1), (U, 1), (F, 1)];
        let mut cursor = TurnCursor::new();
        for &(t, _) in &records {
            cursor.advance(t);
        }
        assert_eq!(cursor.turns(), 3);
        let mut finder = SummaryCutFinder::new(cursor.turns(), 1);
        for &(t, l) in &records {
            finder.push(t, l);
        }
        let cut = finder.finish().unwrap();
        assert_eq!(cut.record_index, 3);
        assert_eq!(cut.replaced_turns, 2);
        assert!(cut.replaced_turns >= SUMMARY_MIN_REPLACED_TURNS);
    }
}
