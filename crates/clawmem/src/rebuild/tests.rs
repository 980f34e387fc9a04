//! Unit tests of the index rebuild: splitting, inference, entries, writing
//! and the keep-or-rebuild verdict.

extern crate std;

use super::infer::type_is;
use super::*;
use crate::backend::{JsonKind, JsonValue};
use crate::chdx::{self, BackendFormat, ChdxError, Entry, RecordType};
use std::string::ToString;
use std::vec;
use std::vec::Vec;
use BackendFormat::{
    AnthropicCompatible as Anthropic, OpenAiCompatible as OpenAi, OpenAiResponses as Responses,
    Unknown,
};
use Basis::{Default as Dflt, Hint, OldIndex, Shape, Turn};
use RecordType::{AssistantFinal, AssistantTool, ToolResult, User};

// Bodies from traces/smoke.jsonl (all four types in the trace's forms).
const OPENAI_USER: &str = r#"{"role":"user","content":"Move 'final_report.pdf' within document directory to 'temp' directory in document. Make sure to create the directory"}"#;
const OPENAI_TOOL: &str = r#"{"role":"assistant","content":null,"tool_calls":[{"id":"call_1","type":"function","function":{"name":"cd","arguments":"{\"folder\":\"document\"}"}},{"id":"call_2","type":"function","function":{"name":"mkdir","arguments":"{\"dir_name\":\"temp\"}"}}]}"#;
const OPENAI_RESULT: &str = r#"[{"role":"tool","tool_call_id":"call_1","content":"{\"current_working_directory\": \"document\"}","is_error":false},{"role":"tool","tool_call_id":"call_2","content":"None","is_error":false}]"#;
const OPENAI_FINAL: &str = r#"{"role":"assistant","content":"(templated reply: BFCL has no reference final answers) Done. I used cd, mkdir and mv (3 calls)."}"#;
const ANTHROPIC_TOOL: &str = r#"{"role":"assistant","content":[{"type":"tool_use","id":"call_1","name":"ls","input":{"a":true}}]}"#;
const ANTHROPIC_RESULT: &str = r#"[{"type":"tool_result","tool_use_id":"call_1","content":"{\"current_directory_content\": [\"workspace\"]}","is_error":false}]"#;
const ANTHROPIC_FINAL: &str = r#"{"role":"assistant","content":[{"type":"text","text":"(templated reply: BFCL has no reference final answers) Done. I used ls (1 call)."}]}"#;
const RESPONSES_TOOL: &str =
    r#"[{"type":"function_call","call_id":"call_1","name":"ls","arguments":"{\"a\":false}"}]"#;
const RESPONSES_RESULT: &str = r#"[{"type":"function_call_output","call_id":"call_1","output":"{\"current_directory_content\": [\"document\", \"archive\"]}"}]"#;
const RESPONSES_FINAL: &str = r#"{"type":"message","role":"assistant","content":[{"type":"output_text","text":"(templated reply: BFCL has no reference final answers) I used ls: document and archive."}]}"#;

// Bodies as ESP-Claw itself writes them (see the module documentation).
const ESP_RESPONSES_TOOL: &str = r#"{"role":"assistant","content":null,"tool_calls":[{"id":"call_1","type":"function","function":{"name":"ls","arguments":"{}"}}],"_claw_provider_state":{"backend":"openai_responses","output":[{"type":"function_call","call_id":"call_1","name":"ls","arguments":"{}"}]}}"#;
const ESP_ANTHROPIC_FINAL: &str = r#"{"role":"assistant","content":[{"type":"thinking","thinking":"short","signature":"s"},{"type":"text","text":"Hi."}]}"#;
const ESP_FAILURE_NOTE: &str = r#"{"role":"assistant","content":"Session note: the previous request failed before producing a final answer.\nReason: timeout"}"#;

fn infer(body: &str) -> Inference {
    infer_record(body.as_bytes()).unwrap()
}

fn check(body: &str, ty: RecordType, ty_basis: Basis, format: BackendFormat, basis: Basis) {
    let inference = infer(body);
    assert_eq!(
        (inference.record_type, inference.type_basis),
        (ty, ty_basis),
        "type of {body}"
    );
    assert_eq!(
        (inference.backend_format, inference.format_basis),
        (format, basis),
        "format of {body}"
    );
}

fn log_of(bodies: &[&str]) -> Vec<u8> {
    let mut log = Vec::new();
    for body in bodies {
        log.extend_from_slice(body.as_bytes());
        log.push(b'\n');
    }
    log
}

fn rebuild(log: &[u8]) -> (Vec<u8>, RebuildReport) {
    let mut out = vec![0u8; 8 + 10 * 64];
    let report = rebuild_index(log, &mut out).unwrap();
    out.truncate(report.index_size_bytes());
    (out, report)
}

fn all_entries(log: &[u8]) -> Vec<RebuiltEntry> {
    entries(log).unwrap().collect()
}

fn types_and_formats(log: &[u8]) -> Vec<(RecordType, BackendFormat, Basis)> {
    all_entries(log)
        .iter()
        .map(|e| (e.entry.record_type, e.entry.backend_format, e.format_basis))
        .collect()
}

fn kinds(log: &[u8]) -> Vec<(usize, usize, bool, SegmentKind)> {
    segments(log)
        .map(|s| (s.offset, s.len_bytes, s.terminated, s.kind))
        .collect()
}

fn assert_tiles(log: &[u8]) {
    let mut at = 0;
    for segment in segments(log) {
        assert_eq!(segment.offset, at);
        assert!(segment.end() > at);
        if segment.terminated {
            assert_eq!(log[segment.offset + segment.len_bytes], b'\n');
        }
        assert!(!segment.bytes(log).contains(&b'\n'));
        at = segment.end();
    }
    assert_eq!(at, log.len());
}

// --- inference: every type in every format ---------------------------

#[test]
fn openai_compatible_records() {
    check(OPENAI_USER, User, Shape, Unknown, Dflt);
    check(OPENAI_TOOL, AssistantTool, Shape, OpenAi, Hint);
    // ESP-Claw's canonical tool results carry no format of their own.
    check(OPENAI_RESULT, ToolResult, Shape, Unknown, Dflt);
    check(OPENAI_FINAL, AssistantFinal, Shape, Unknown, Dflt);
    check(
        r#"{"role":"assistant","content":"Hi","refusal":null,"annotations":[]}"#,
        AssistantFinal,
        Shape,
        OpenAi,
        Hint,
    );
    check(
        r#"{"role":"assistant","content":"Hi","reasoning_content":"think"}"#,
        AssistantFinal,
        Shape,
        OpenAi,
        Hint,
    );
    // `tool_calls` present but empty: no calls, still OpenAI-shaped.
    check(
        r#"{"role":"assistant","content":"Hi","tool_calls":[]}"#,
        AssistantFinal,
        Shape,
        OpenAi,
        Hint,
    );
}

#[test]
fn anthropic_compatible_records() {
    check(ANTHROPIC_TOOL, AssistantTool, Shape, Anthropic, Shape);
    check(ANTHROPIC_RESULT, ToolResult, Shape, Anthropic, Shape);
    check(ANTHROPIC_FINAL, AssistantFinal, Shape, Anthropic, Hint);
    check(ESP_ANTHROPIC_FINAL, AssistantFinal, Shape, Anthropic, Shape);
    // Anthropic's wire form of tool results: a user message of blocks.
    check(
        r#"{"role":"user","content":[{"type":"tool_result","tool_use_id":"t","content":"ok"}]}"#,
        ToolResult,
        Shape,
        Anthropic,
        Shape,
    );
    check(
        r#"[{"role":"user","content":[{"type":"tool_result","tool_use_id":"t","content":"ok"}]}]"#,
        ToolResult,
        Shape,
        Anthropic,
        Shape,
    );
    // Text and a tool call in one message: a tool record.
    check(
        r#"{"role":"assistant","content":[{"type":"text","text":"Let me look."},{"type":"tool_use","id":"t","name":"ls","input":{}}]}"#,
        AssistantTool,
        Shape,
        Anthropic,
        Shape,
    );
}

#[test]
fn openai_responses_records() {
    check(RESPONSES_TOOL, AssistantTool, Shape, Responses, Shape);
    check(RESPONSES_RESULT, ToolResult, Shape, Responses, Shape);
    check(RESPONSES_FINAL, AssistantFinal, Shape, Responses, Shape);
    // ESP-Claw's canonical Responses tool message keeps the provider state.
    check(ESP_RESPONSES_TOOL, AssistantTool, Shape, Responses, Shape);
    // Single items and a raw Responses body.
    check(
        r#"{"type":"function_call","call_id":"c","name":"n","arguments":"{}"}"#,
        AssistantTool,
        Shape,
        Responses,
        Shape,
    );
    check(
        r#"{"type":"function_call_output","call_id":"c","output":"x"}"#,
        ToolResult,
        Shape,
        Responses,
        Shape,
    );
    check(
        r#"{"id":"r","output":[{"type":"reasoning","summary":[]},{"type":"message","role":"assistant","content":[{"type":"output_text","text":"Hi"}]}]}"#,
        AssistantFinal,
        Hint,
        Responses,
        Shape,
    );
    check(
        r#"{"id":"r","output":[{"type":"function_call","call_id":"c","name":"n","arguments":"{}"}]}"#,
        AssistantTool,
        Shape,
        Responses,
        Shape,
    );
    check(
        r#"{"role":"assistant","content":[{"type":"output_text","text":"Hi"}]}"#,
        AssistantFinal,
        Shape,
        Responses,
        Hint,
    );
}

#[test]
fn bodies_that_do_not_tell_their_format() {
    // A Responses final and a failure note look like any OpenAI final.
    check(
        r#"{"role":"assistant","content":"Hi"}"#,
        AssistantFinal,
        Shape,
        Unknown,
        Dflt,
    );
    check(ESP_FAILURE_NOTE, AssistantFinal, Shape, Unknown, Dflt);
    check(
        r#"{"role":"tool","tool_call_id":"c","content":"x"}"#,
        ToolResult,
        Shape,
        Unknown,
        Dflt,
    );
    // Unrecognised shapes: kept, with a default type.
    check(r#"{"hello":"world"}"#, AssistantFinal, Dflt, Unknown, Dflt);
    check(
        r#"{"role":"system","content":"x"}"#,
        AssistantFinal,
        Dflt,
        Unknown,
        Dflt,
    );
    check("[]", ToolResult, Hint, Unknown, Dflt);
    check("[1,\"x\",null]", ToolResult, Hint, Unknown, Dflt);
    // Roles are compared exactly, keys ignoring case (as cJSON).
    check(
        r#"{"ROLE":"user","content":"x"}"#,
        User,
        Shape,
        Unknown,
        Dflt,
    );
    check(
        r#"{"role":"User","content":"x"}"#,
        AssistantFinal,
        Dflt,
        Unknown,
        Dflt,
    );
    // Not objects or arrays, or not JSON: not records.
    for body in ["42", "\"text\"", "null", "{", "", "{\"a\":1} x"] {
        assert_eq!(infer_record(body.as_bytes()), None, "{body}");
    }
    assert!(!infer(OPENAI_FINAL).is_certain());
    assert!(infer(ANTHROPIC_TOOL).is_certain());
}

#[test]
fn json_navigation_reads_like_cjson() {
    // The `backend::JsonValue` helper that inference is built on.
    let body =
        br#" {"Role":"assistant","content":[{"type":"text"},7,{"TYPE":"tool_use"}],"n":null} "#;
    let root = JsonValue::parse(body).unwrap();
    assert_eq!(root.kind(), JsonKind::Object);
    let role = root.member("role").unwrap();
    assert!(role.is_string("assistant"));
    assert!(!role.is_string("Assistant"));
    assert!(!role.is_string("assistan"));
    let content = root.member("content").unwrap();
    let kinds: Vec<JsonKind> = content.elements().map(JsonValue::kind).collect();
    assert_eq!(
        kinds,
        [JsonKind::Object, JsonKind::Number, JsonKind::Object]
    );
    assert!(type_is(content.elements().nth(2).unwrap(), "tool_use"));
    assert_eq!(root.member("n").unwrap().kind(), JsonKind::Null);
    assert!(root.member("missing").is_none());
    assert_eq!(root.elements().count(), 0);
    assert!(content.member("type").is_none());
    assert!(JsonValue::parse(b"{").is_err());
}

// --- splitting ---------------------------------------------------------

#[test]
fn a_clean_log_is_one_record_per_line() {
    let log = log_of(&[OPENAI_USER, OPENAI_TOOL, OPENAI_RESULT, OPENAI_FINAL]);
    let segs: Vec<Segment> = segments(&log).collect();
    assert_eq!(segs.len(), 4);
    assert!(segs.iter().all(Segment::is_indexable));
    assert_eq!(segs[1].bytes(&log), OPENAI_TOOL.as_bytes());
    assert_eq!(segs[1].offset, OPENAI_USER.len() + 1);
    assert_tiles(&log);
}

#[test]
fn blank_lines_and_whitespace_are_tolerated() {
    let log = b"\n  \r\n{\"role\":\"user\",\"content\":\"a\"}\r\n\t[]  \n\n";
    assert_eq!(
        kinds(log),
        vec![
            (0, 0, true, SegmentKind::Blank),
            (1, 3, true, SegmentKind::Blank),
            (5, 30, true, SegmentKind::Record),
            (36, 5, true, SegmentKind::Record),
            (42, 0, true, SegmentKind::Blank),
        ]
    );
    assert_tiles(log);
    let (index, report) = rebuild(log);
    assert_eq!(report.entries, 2);
    assert_eq!(report.blank_lines, 3);
    assert!(!report.is_clean());
    assert_eq!(chdx::validate_index(&index, log.len() as u64), Ok(2));
}

#[test]
fn a_final_line_without_newline_is_reported_not_indexed() {
    let mut log = log_of(&[OPENAI_USER]);
    log.extend_from_slice(OPENAI_FINAL.as_bytes());
    let (index, report) = rebuild(&log);
    assert_eq!(report.entries, 1);
    assert_eq!(report.unterminated_records, 1);
    let tail = report.tail.unwrap();
    assert_eq!(tail.kind, SegmentKind::Record);
    assert_eq!(tail.offset, OPENAI_USER.len() + 1);
    assert_eq!(tail.bytes(&log), OPENAI_FINAL.as_bytes());
    assert_eq!(chdx::validate_index(&index, log.len() as u64), Ok(1));
    // Appending the newline makes it indexable.
    log.push(b'\n');
    let (_, report) = rebuild(&log);
    assert_eq!(report.entries, 2);
    assert!(report.is_clean());
    assert_eq!(report.tail, None);
}

#[test]
fn a_torn_line_merged_with_the_next_record_keeps_the_record() {
    // Power lost in the middle of the second record; the next append
    // lands right after the torn bytes.
    let torn = &OPENAI_TOOL[..57];
    let mut log = log_of(&[OPENAI_USER]);
    log.extend_from_slice(torn.as_bytes());
    log.extend_from_slice(&log_of(&[OPENAI_USER, OPENAI_FINAL]));
    assert_tiles(&log);
    let segs: Vec<Segment> = segments(&log).collect();
    assert_eq!(segs.len(), 4);
    assert!(matches!(
        segs[1].kind,
        SegmentKind::Skipped(SkipReason::Malformed(_))
    ));
    assert_eq!(segs[1].bytes(&log), torn.as_bytes());
    assert!(!segs[1].terminated);
    assert_eq!(segs[2].bytes(&log), OPENAI_USER.as_bytes());
    assert!(segs[2].is_indexable());
    let (index, report) = rebuild(&log);
    assert_eq!(report.entries, 3);
    assert_eq!(report.skipped_segments, 1);
    assert_eq!(report.skipped_bytes, torn.len() as u64);
    assert_eq!(chdx::validate_index(&index, log.len() as u64), Ok(3));
    let types: Vec<RecordType> = all_entries(&log)
        .iter()
        .map(|e| e.entry.record_type)
        .collect();
    assert_eq!(types, [User, User, AssistantFinal]);
}

#[test]
fn every_tear_point_keeps_every_whole_record() {
    let whole = [
        OPENAI_USER,
        ANTHROPIC_TOOL,
        ANTHROPIC_RESULT,
        ESP_RESPONSES_TOOL,
        OPENAI_RESULT,
    ];
    for torn_body in whole {
        for cut in 1..torn_body.len() {
            let mut log = log_of(&[OPENAI_USER]);
            log.extend_from_slice(&torn_body.as_bytes()[..cut]);
            log.extend_from_slice(&log_of(&[ANTHROPIC_FINAL, OPENAI_FINAL]));
            assert_tiles(&log);
            let bodies: Vec<&[u8]> = all_entries(&log)
                .iter()
                .map(|e| &log[e.entry.offset as usize..e.entry.newline_offset() as usize])
                .collect();
            assert_eq!(
                bodies,
                [
                    OPENAI_USER.as_bytes(),
                    ANTHROPIC_FINAL.as_bytes(),
                    OPENAI_FINAL.as_bytes()
                ],
                "torn {torn_body} at {cut}"
            );
        }
    }
}

#[test]
fn a_long_torn_line_is_recovered() {
    // A ~130 KiB canonical tool result torn halfway, then the next record:
    // each `{` inside it is tried and rejected after one small element.
    let element = r#"{"role":"tool","tool_call_id":"call_1","content":"{\"k\": [1, 2, {\"x\": 3}]}","is_error":false}"#;
    let mut big = Vec::from(&b"["[..]);
    for i in 0..1500 {
        if i > 0 {
            big.push(b',');
        }
        big.extend_from_slice(element.as_bytes());
    }
    big.push(b']');
    assert_eq!(infer_record(&big).unwrap().record_type, ToolResult);
    let mut log = log_of(&[OPENAI_USER]);
    log.extend_from_slice(&big[..big.len() / 2]);
    log.extend_from_slice(&log_of(&[OPENAI_FINAL]));
    let (index, report) = rebuild(&log);
    assert_eq!(report.entries, 2);
    assert_eq!(report.skipped_bytes, (big.len() / 2) as u64);
    assert_eq!(chdx::validate_index(&index, log.len() as u64), Ok(2));
    assert_eq!(segments(&log).nth(1).unwrap().bytes(&[]), b"");
}

#[test]
fn a_lost_newline_between_two_records_keeps_both_in_view() {
    let mut log = Vec::from(OPENAI_USER.as_bytes());
    log.extend_from_slice(b" ");
    log.extend_from_slice(&log_of(&[OPENAI_FINAL]));
    assert_eq!(
        kinds(&log),
        vec![
            (0, OPENAI_USER.len() + 1, false, SegmentKind::Record),
            (
                OPENAI_USER.len() + 1,
                OPENAI_FINAL.len(),
                true,
                SegmentKind::Record
            ),
        ]
    );
    let (index, report) = rebuild(&log);
    // Only the second can be indexed: ESP-Claw needs the newline.
    assert_eq!(report.entries, 1);
    assert_eq!(report.unterminated_records, 1);
    assert_eq!(report.tail, None);
    assert_eq!(chdx::validate_index(&index, log.len() as u64), Ok(1));
}

#[test]
fn valid_json_that_is_not_a_record_is_skipped() {
    let mut log = log_of(&["42", "\"text\"", "null"]);
    log.extend_from_slice(&log_of(&[OPENAI_USER]));
    let (_, report) = rebuild(&log);
    assert_eq!(report.entries, 1);
    assert_eq!(report.skipped_segments, 3);
    assert_eq!(
        segments(&log).next().unwrap().kind,
        SegmentKind::Skipped(SkipReason::NotObjectOrArray)
    );
    // A scalar followed by a record on one line: the scalar is skipped.
    let mut log = Vec::from(&b"12"[..]);
    log.extend_from_slice(&log_of(&[OPENAI_USER]));
    assert_eq!(
        kinds(&log)[1],
        (2, OPENAI_USER.len(), true, SegmentKind::Record)
    );
}

#[test]
fn a_torn_tail_is_skipped_and_reported() {
    let mut log = log_of(&[OPENAI_USER, OPENAI_FINAL]);
    log.extend_from_slice(&OPENAI_TOOL.as_bytes()[..40]);
    let (index, report) = rebuild(&log);
    assert_eq!(report.entries, 2);
    assert_eq!(report.skipped_segments, 1);
    let tail = report.tail.unwrap();
    assert!(matches!(tail.kind, SegmentKind::Skipped(_)));
    assert_eq!(tail.end(), log.len());
    assert_eq!(chdx::validate_index(&index, log.len() as u64), Ok(2));
}

// --- turns --------------------------------------------------------------

#[test]
fn formats_spread_through_a_turn() {
    // ESP-Claw's own anthropic turn: user, tool_use, canonical tool result,
    // final with blocks.
    let log = log_of(&[
        OPENAI_USER,
        ANTHROPIC_TOOL,
        OPENAI_RESULT,
        ESP_ANTHROPIC_FINAL,
    ]);
    assert_eq!(
        types_and_formats(&log),
        [
            (User, Anthropic, Turn),
            (AssistantTool, Anthropic, Shape),
            (ToolResult, Anthropic, Turn),
            (AssistantFinal, Anthropic, Shape),
        ]
    );
    // ESP-Claw's own Responses turn: the final is a bare text message.
    let log = log_of(&[OPENAI_USER, ESP_RESPONSES_TOOL, OPENAI_RESULT, OPENAI_FINAL]);
    assert_eq!(
        types_and_formats(&log),
        [
            (User, Responses, Turn),
            (AssistantTool, Responses, Shape),
            (ToolResult, Responses, Turn),
            (AssistantFinal, Responses, Turn),
        ]
    );
}

#[test]
fn formats_do_not_cross_user_records() {
    let log = log_of(&[
        OPENAI_USER,
        OPENAI_FINAL, // no evidence in this turn
        OPENAI_USER,
        OPENAI_TOOL,
        OPENAI_RESULT,
        OPENAI_FINAL,
        OPENAI_USER,
        ANTHROPIC_FINAL,
        OPENAI_USER,
    ]);
    assert_eq!(
        types_and_formats(&log),
        [
            (User, Unknown, Dflt),
            (AssistantFinal, Unknown, Dflt),
            (User, OpenAi, Turn),
            (AssistantTool, OpenAi, Hint),
            (ToolResult, OpenAi, Turn),
            (AssistantFinal, OpenAi, Turn),
            (User, Anthropic, Turn),
            (AssistantFinal, Anthropic, Hint),
            (User, Unknown, Dflt),
        ]
    );
    let report = {
        let mut it = entries(&log).unwrap();
        it.by_ref().for_each(drop);
        it.report()
    };
    assert_eq!(report.formats_from_turn, 4);
    assert_eq!(report.formats_unknown, 3);
    assert_eq!(report.types_uncertain, 0);
}

#[test]
fn the_nearest_earlier_evidence_wins_within_a_turn() {
    // Cannot happen with ESP-Claw (one backend per request), but must be
    // deterministic.
    let log = log_of(&[
        OPENAI_USER,
        ANTHROPIC_TOOL,
        OPENAI_RESULT,
        RESPONSES_TOOL,
        OPENAI_RESULT,
    ]);
    assert_eq!(
        types_and_formats(&log),
        [
            (User, Anthropic, Turn),
            (AssistantTool, Anthropic, Shape),
            (ToolResult, Anthropic, Turn),
            (AssistantTool, Responses, Shape),
            (ToolResult, Responses, Turn),
        ]
    );
}

#[test]
fn the_smoke_trace_session_rebuilds_with_its_formats() {
    // The records of traces/smoke.jsonl in order (one session per backend).
    let log = log_of(&[
        OPENAI_USER,
        OPENAI_TOOL,
        OPENAI_RESULT,
        OPENAI_FINAL,
        OPENAI_USER,
        ANTHROPIC_TOOL,
        ANTHROPIC_RESULT,
        ANTHROPIC_FINAL,
        OPENAI_USER,
        RESPONSES_TOOL,
        RESPONSES_RESULT,
        RESPONSES_FINAL,
    ]);
    let (index, report) = rebuild(&log);
    assert_eq!(chdx::validate_index(&index, log.len() as u64), Ok(12));
    assert!(report.is_clean());
    assert_eq!(report.indexed_bytes, log.len() as u64);
    let expected = [
        (User, OpenAi),
        (AssistantTool, OpenAi),
        (ToolResult, OpenAi),
        (AssistantFinal, OpenAi),
        (User, Anthropic),
        (AssistantTool, Anthropic),
        (ToolResult, Anthropic),
        (AssistantFinal, Anthropic),
        (User, Responses),
        (AssistantTool, Responses),
        (ToolResult, Responses),
        (AssistantFinal, Responses),
    ];
    let decoded: Vec<(RecordType, BackendFormat)> = chdx::entries(&index, log.len() as u64)
        .map(|e| (e.record_type, e.backend_format))
        .collect();
    assert_eq!(decoded, expected);
    // The iterator yields exactly what the buffer holds.
    let from_iter: Vec<Entry> = all_entries(&log).iter().map(|e| e.entry).collect();
    let from_index: Vec<Entry> = chdx::entries(&index, log.len() as u64).collect();
    assert_eq!(from_iter, from_index);
}

// --- the index ----------------------------------------------------------

#[test]
fn round_trip_offsets_and_lengths() {
    let bodies = [OPENAI_USER, ANTHROPIC_TOOL, OPENAI_RESULT, ANTHROPIC_FINAL];
    let log = log_of(&bodies);
    let (index, report) = rebuild(&log);
    assert_eq!(index.len(), 8 + 40);
    assert_eq!(&index[..8], &chdx::encode_header());
    assert_eq!(report.index_size_bytes(), index.len());
    let mut offset = 0u32;
    for (entry, body) in chdx::entries(&index, log.len() as u64).zip(bodies) {
        assert_eq!(entry.offset, offset);
        assert_eq!(entry.length as usize, body.len() + 1);
        assert_eq!(log[entry.newline_offset() as usize], b'\n');
        offset += entry.length;
    }
    assert_eq!(offset as usize, log.len());
    assert_eq!(
        repair(&index, &log),
        Verdict::Keep {
            entries: 4,
            tail: None
        }
    );
}

#[test]
fn an_empty_log_gives_a_header_only_index() {
    let mut out = [0u8; 8];
    let report = rebuild_index(b"", &mut out).unwrap();
    assert_eq!(report, RebuildReport::default());
    assert_eq!(out, chdx::encode_header());
    assert_eq!(chdx::validate_index(&out, 0), Ok(0));
    assert_eq!(entries(b"").unwrap().count(), 0);
}

#[test]
fn a_log_without_records_is_an_error_that_says_what_to_do() {
    let mut out = [0u8; 64];
    let err = rebuild_index(b"{\"role\":\"us", &mut out).unwrap_err();
    assert!(matches!(
        err,
        RebuildError::NoRecords {
            log_len_bytes: 11,
            tail: Some(Segment {
                kind: SegmentKind::Skipped(_),
                ..
            })
        }
    ));
    assert!(err.to_string().contains("truncate"));
    let err = rebuild_index(b"\n\n", &mut out).unwrap_err();
    assert_eq!(
        err,
        RebuildError::NoRecords {
            log_len_bytes: 2,
            tail: None
        }
    );
    // One whole record that lost its newline: append one.
    let err = rebuild_index(OPENAI_USER.as_bytes(), &mut out).unwrap_err();
    assert!(matches!(
        err,
        RebuildError::NoRecords {
            tail: Some(Segment {
                offset: 0,
                kind: SegmentKind::Record,
                ..
            }),
            ..
        }
    ));
    assert!(err.to_string().contains("append"));
}

#[test]
fn a_small_buffer_states_the_size_needed() {
    let log = log_of(&[OPENAI_USER, OPENAI_TOOL, OPENAI_RESULT]);
    for size in [0, 7, 8, 17, 37] {
        let mut out = vec![0u8; size];
        assert_eq!(
            rebuild_index(&log, &mut out),
            Err(RebuildError::BufferTooSmall { needed_bytes: 38 }),
            "size {size}"
        );
    }
    let mut exact = [0u8; 38];
    let report = rebuild_index(&log, &mut exact).unwrap();
    assert_eq!(report.index_size_bytes(), 38);
    assert_eq!(chdx::validate_index(&exact, log.len() as u64), Ok(3));
    assert!(RebuildError::BufferTooSmall { needed_bytes: 38 }
        .to_string()
        .contains("38 bytes"));
    assert_eq!(index_size_bytes(3), 38);
}

#[test]
fn the_old_index_keeps_exact_formats() {
    // ESP-Claw stamped "unknown" (a custom backend) on an OpenAI-looking
    // turn; then power was lost after a record but before its entry.
    let log = log_of(&[OPENAI_USER, OPENAI_TOOL, OPENAI_RESULT, OPENAI_FINAL]);
    let mut old = Vec::from(chdx::encode_header());
    let mut offset = 0;
    for (body, ty) in [
        (OPENAI_USER, User),
        (OPENAI_TOOL, AssistantTool),
        (OPENAI_RESULT, ToolResult),
    ] {
        let entry = Entry::for_body(offset, body.len(), ty, Unknown).unwrap();
        old.extend_from_slice(&entry.encode());
        offset += entry.length;
    }
    assert_eq!(
        repair(&old, &log),
        Verdict::Rebuild(RebuildReason::UnindexedRecord {
            offset: offset as usize
        })
    );
    let mut out = [0u8; 64];
    let report = rebuild_index_with_old(&log, &old, &mut out).unwrap();
    assert_eq!(report.entries, 4);
    assert_eq!(report.from_old_index, 3);
    let rebuilt: Vec<RebuiltEntry> = entries_with_old_index(&log, &old).unwrap().collect();
    let formats: Vec<(BackendFormat, Basis)> = rebuilt
        .iter()
        .map(|e| (e.entry.backend_format, e.format_basis))
        .collect();
    assert_eq!(
        formats,
        [
            (Unknown, OldIndex),
            (Unknown, OldIndex),
            (Unknown, OldIndex),
            (Unknown, Turn),
        ]
    );
    let index = &out[..report.index_size_bytes()];
    assert_eq!(
        repair(index, &log),
        Verdict::Keep {
            entries: 4,
            tail: None
        }
    );
    // Without the old index, the body's hint wins.
    assert_eq!(all_entries(&log)[1].entry.backend_format, OpenAi);
}

#[test]
fn a_damaged_old_index_is_used_only_where_it_matches() {
    let log = log_of(&[OPENAI_USER, ANTHROPIC_TOOL]);
    let user = Entry::for_body(0, OPENAI_USER.len(), User, OpenAi).unwrap();
    let mut old = Vec::from(chdx::encode_header());
    old.extend_from_slice(&user.encode());
    // A wrong length for the second record, then a partial entry.
    let wrong = Entry::for_body(user.length, 3, AssistantFinal, OpenAi).unwrap();
    old.extend_from_slice(&wrong.encode());
    old.extend_from_slice(&[1, 2, 3]);
    let rebuilt: Vec<RebuiltEntry> = entries_with_old_index(&log, &old).unwrap().collect();
    assert_eq!(rebuilt[0].format_basis, OldIndex);
    assert_eq!(rebuilt[0].entry.backend_format, OpenAi);
    assert_eq!(rebuilt[1].entry.record_type, AssistantTool);
    assert_eq!(rebuilt[1].format_basis, Shape);
    // A bad header: nothing is trusted.
    old[0] = b'X';
    let rebuilt: Vec<RebuiltEntry> = entries_with_old_index(&log, &old).unwrap().collect();
    assert!(rebuilt.iter().all(|e| e.format_basis != OldIndex));
}

// --- repair -------------------------------------------------------------

#[test]
fn repair_keeps_a_matching_index() {
    let mut log = log_of(&[OPENAI_USER, OPENAI_FINAL]);
    let (index, _) = rebuild(&log);
    assert_eq!(
        repair(&index, &log),
        Verdict::Keep {
            entries: 2,
            tail: None
        }
    );
    // A torn tail does not force a rebuild, but is reported.
    log.extend_from_slice(b"{\"role\":");
    match repair(&index, &log) {
        Verdict::Keep {
            entries: 2,
            tail: Some(tail),
        } => {
            assert_eq!(tail.offset, log.len() - 8);
            assert!(matches!(tail.kind, SegmentKind::Skipped(_)));
        }
        other => panic!("{other:?}"),
    }
    // An empty index for an empty log.
    assert_eq!(
        repair(&chdx::encode_header(), b""),
        Verdict::Keep {
            entries: 0,
            tail: None
        }
    );
}

#[test]
fn repair_says_why_an_index_must_be_rebuilt() {
    let log = log_of(&[OPENAI_USER, OPENAI_FINAL]);
    let (index, _) = rebuild(&log);
    let mut bad = index.clone();
    bad[0] = b'X';
    assert!(matches!(
        repair(&bad, &log),
        Verdict::Rebuild(RebuildReason::Invalid(ChdxError::BadMagic { .. }))
    ));
    assert_eq!(
        repair(&index[..index.len() - 1], &log),
        Verdict::Rebuild(RebuildReason::Invalid(ChdxError::PartialEntry {
            trailing_bytes: 9
        }))
    );
    assert_eq!(
        repair(&chdx::encode_header(), &log),
        Verdict::Rebuild(RebuildReason::Invalid(ChdxError::NoEntriesForData {
            data_size_bytes: log.len() as u64
        }))
    );
    // An entry one byte short: its "newline" is the body's last byte.
    let mut short = index.clone();
    short[8 + 4] -= 1;
    assert_eq!(
        repair(&short, &log),
        Verdict::Rebuild(RebuildReason::MissingNewline { entry: 0 })
    );
    // The record's bytes were damaged in place.
    let mut damaged = log.clone();
    damaged[0] = b'#';
    assert_eq!(
        repair(&index, &damaged),
        Verdict::Rebuild(RebuildReason::MalformedRecord { entry: 0 })
    );
    // Only the second entry survives: the first record is in a gap.
    let second = chdx::raw_entry_at(&index, 1).unwrap();
    let mut only_second = Vec::from(chdx::encode_header());
    only_second.extend_from_slice(&second.encode());
    let verdict = repair(&only_second, &log);
    assert_eq!(
        verdict,
        Verdict::Rebuild(RebuildReason::UnindexedRecord { offset: 0 })
    );
    if let Verdict::Rebuild(reason) = verdict {
        assert!(reason.to_string().contains("offset 0"));
    }
    assert!(RebuildReason::Invalid(ChdxError::ZeroLength { entry: 3 })
        .to_string()
        .contains("entry 3"));
}

// --- robustness ---------------------------------------------------------

fn check_any_log(log: &[u8]) {
    assert_tiles(log);
    let mut out = [0u8; 8 + 10 * 32];
    match rebuild_index(log, &mut out) {
        Ok(report) => {
            let index = &out[..report.index_size_bytes()];
            assert_eq!(
                chdx::validate_index(index, log.len() as u64),
                Ok(report.entries)
            );
            for entry in chdx::entries(index, log.len() as u64) {
                let body = &log[entry.offset as usize..entry.newline_offset() as usize];
                assert!(infer_record(body).is_some());
                assert_eq!(log[entry.newline_offset() as usize], b'\n');
            }
            assert!(matches!(repair(index, log), Verdict::Keep { .. }));
        }
        Err(RebuildError::NoRecords { .. }) => assert_eq!(entries(log).unwrap().count(), 0),
        Err(other) => panic!("{other:?}"),
    }
}

#[test]
fn every_prefix_and_corruption_of_a_log_is_handled() {
    let log = log_of(&[OPENAI_USER, ANTHROPIC_TOOL, OPENAI_RESULT, RESPONSES_FINAL]);
    for end in 0..=log.len() {
        check_any_log(&log[..end]);
    }
    let mut copy = log.clone();
    for i in (0..copy.len()).step_by(3) {
        let original = copy[i];
        for b in [b'\n', b'{', b'}', b'"', b'[', 0xff] {
            copy[i] = b;
            check_any_log(&copy);
        }
        copy[i] = original;
    }
}

#[test]
fn random_bytes_never_panic() {
    let alphabet = b"{}[]\":,\n \\ur0ltasenu1";
    let mut state = 0x9e37_79b9_7f4a_7c15u64;
    for _ in 0..3_000 {
        let log = crate::testing::random_bytes(&mut state, alphabet, 64);
        check_any_log(&log);
        let _ = repair(&log, &log);
    }
}
