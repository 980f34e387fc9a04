//! Unit tests of the mixed-backend filter and the JSON scanner under it.

extern crate std;

use super::*;
use std::string::{String, ToString};
use std::vec;
use std::vec::Vec;
use BackendFormat::{AnthropicCompatible as Anthropic, OpenAiCompatible as OpenAi, Unknown};

fn degrade(body: &str) -> Result<(Degraded, String), ScanError> {
    let mut out = vec![0u8; 4096];
    let result = degrade_assistant_final(body.as_bytes(), &mut out)?;
    let text = match result {
        Degraded::Rewritten { len_bytes } => String::from_utf8(out[..len_bytes].to_vec()).unwrap(),
        _ => String::new(),
    };
    Ok((result, text))
}

fn extract(body: &str) -> Result<String, ScanError> {
    let mut out = vec![0u8; 4096];
    let len = extract_final_text(body.as_bytes(), &mut out)?;
    Ok(String::from_utf8(out[..len].to_vec()).unwrap())
}

fn kind_of(body: &[u8]) -> JsonErrorKind {
    match validate_json(body) {
        Err(ScanError::Malformed { kind, .. }) => kind,
        other => panic!(
            "expected malformed, got {other:?} for {:?}",
            String::from_utf8_lossy(body)
        ),
    }
}

#[test]
fn mismatch_needs_two_known_different_backends() {
    assert!(!backends_mismatch(Unknown, OpenAi));
    assert!(!backends_mismatch(OpenAi, Unknown));
    assert!(!backends_mismatch(OpenAi, OpenAi));
    assert!(backends_mismatch(OpenAi, Anthropic));
    assert!(backends_mismatch(BackendFormat::OpenAiResponses, OpenAi));
}

#[test]
fn actions_per_record_type() {
    use RecordType::*;
    assert_eq!(history_action(OpenAi, Anthropic, User), HistoryAction::Keep);
    assert_eq!(
        history_action(OpenAi, Anthropic, AssistantFinal),
        HistoryAction::KeepTextOnly
    );
    assert_eq!(
        history_action(OpenAi, Anthropic, AssistantTool),
        HistoryAction::Drop
    );
    assert_eq!(
        history_action(OpenAi, Anthropic, ToolResult),
        HistoryAction::Drop
    );
    for ty in [User, AssistantFinal, AssistantTool, ToolResult] {
        assert_eq!(history_action(OpenAi, OpenAi, ty), HistoryAction::Keep);
        assert_eq!(history_action(Unknown, Anthropic, ty), HistoryAction::Keep);
    }
}

#[test]
fn string_content_is_kept_unchanged() {
    let (d, _) = degrade(r#"{"role":"assistant","content":"hi","reasoning_content":"x"}"#).unwrap();
    assert_eq!(d, Degraded::Unchanged);
    let (d, _) = degrade(r#"{"role":"assistant","content":""}"#).unwrap();
    assert_eq!(d, Degraded::Unchanged);
}

#[test]
fn anthropic_blocks_become_one_openai_style_message() {
    let body = r#"{"role":"assistant","content":[
        {"type":"thinking","thinking":"hmm","signature":"s"},
        {"type":"text","text":"Hello, "},
        {"type":"tool_use","id":"t","name":"n","input":{"text":"no"}},
        {"text":"world\n","type":"text"}
    ]}"#;
    let (d, text) = degrade(body).unwrap();
    assert_eq!(text, r#"{"role":"assistant","content":"Hello, world\n"}"#);
    assert_eq!(
        d,
        Degraded::Rewritten {
            len_bytes: text.len()
        }
    );
}

#[test]
fn no_text_means_dropped() {
    for body in [
        r#"{"role":"assistant"}"#,
        r#"{"role":"assistant","content":null}"#,
        r#"{"role":"assistant","content":42}"#,
        r#"{"role":"assistant","content":[]}"#,
        r#"{"role":"assistant","content":[{"type":"text","text":""}]}"#,
        r#"{"role":"assistant","content":[{"type":"Text","text":"case matters"}]}"#,
        r#"{"role":"assistant","content":[{"type":"text","text":7}, "x", [1]]}"#,
        r#"["not","an","object"]"#,
        r#""just a string""#,
    ] {
        assert_eq!(degrade(body).unwrap().0, Degraded::Dropped, "{body}");
    }
}

#[test]
fn keys_match_ignoring_ascii_case_first_one_wins() {
    let (d, text) =
        degrade(r#"{"Content":[{"TYPE":"text","Text":"a"}],"content":"later"}"#).unwrap();
    assert!(matches!(d, Degraded::Rewritten { .. }));
    assert_eq!(text, r#"{"role":"assistant","content":"a"}"#);
    // An escaped key name is decoded before comparison.
    let (d, _) = degrade(r#"{"con\u0074ent":"x"}"#).unwrap();
    assert_eq!(d, Degraded::Unchanged);
}

#[test]
fn escapes_are_decoded_and_re_escaped_like_cjson() {
    let body = r#"{"content":[{"type":"text","text":"q\" b\\ s\/ \b\f\n\r\t \u0001 \u00e9 \ud83d\ude00 €"}]}"#;
    let (_, text) = degrade(body).unwrap();
    assert_eq!(
        text,
        "{\"role\":\"assistant\",\"content\":\"q\\\" b\\\\ s/ \\b\\f\\n\\r\\t \\u0001 é 😀 €\"}"
    );
    assert_eq!(
        extract(body).unwrap(),
        "q\" b\\ s/ \u{8}\u{c}\n\r\t \u{1} é 😀 €"
    );
}

#[test]
fn a_short_buffer_reports_the_size_needed() {
    let body = br#"{"content":[{"type":"text","text":"hello"}]}"#;
    let expected = br#"{"role":"assistant","content":"hello"}"#.len();
    let mut small = [0u8; 10];
    assert_eq!(
        degrade_assistant_final(body, &mut small),
        Err(ScanError::BufferTooSmall {
            needed_bytes: expected
        })
    );
    let mut exact = vec![0u8; expected];
    assert_eq!(
        degrade_assistant_final(body, &mut exact),
        Ok(Degraded::Rewritten {
            len_bytes: expected
        })
    );
    let mut tiny = [0u8; 2];
    assert_eq!(
        extract_final_text(br#"{"content":"abc"}"#, &mut tiny),
        Err(ScanError::BufferTooSmall { needed_bytes: 3 })
    );
}

#[test]
fn extract_reads_all_three_backends() {
    assert_eq!(
        extract(r#"{"role":"assistant","content":"plain"}"#).unwrap(),
        "plain"
    );
    assert_eq!(
        extract(r#"{"content":[{"type":"text","text":"a"},{"type":"output_text","text":"b"}]}"#)
            .unwrap(),
        "ab"
    );
    let responses = r#"{"id":"r","output":[
        {"type":"reasoning","summary":[]},
        {"type":"message","role":"assistant","content":[
            {"type":"output_text","text":"Hi ","annotations":[]},
            {"type":"refusal","refusal":"no."}
        ]},
        {"type":"function_call","call_id":"c","name":"n","arguments":"{}"}
    ]}"#;
    assert_eq!(extract(responses).unwrap(), "Hi no.");
    assert_eq!(extract(r#"{"content":null}"#).unwrap(), "");
    assert_eq!(extract(r#"[1,2]"#).unwrap(), "");
}

#[test]
fn filter_record_combines_action_and_rewrite() {
    let mut scratch = [0u8; 256];
    let body = br#"{"role":"assistant","content":[{"type":"text","text":"x"}]}"#;
    let result = filter_record(
        OpenAi,
        Anthropic,
        RecordType::AssistantFinal,
        body,
        &mut scratch,
    )
    .unwrap();
    assert_eq!(
        result,
        Filtered::Replace(br#"{"role":"assistant","content":"x"}"#)
    );
    let mut scratch = [0u8; 256];
    assert_eq!(
        filter_record(
            OpenAi,
            Anthropic,
            RecordType::ToolResult,
            b"[]",
            &mut scratch
        )
        .unwrap(),
        Filtered::Drop
    );
    let mut scratch = [0u8; 256];
    assert_eq!(
        filter_record(
            OpenAi,
            OpenAi,
            RecordType::AssistantFinal,
            b"not json",
            &mut scratch
        )
        .unwrap(),
        Filtered::Keep(b"not json")
    );
    let mut scratch = [0u8; 256];
    assert!(matches!(
        filter_record(
            OpenAi,
            Anthropic,
            RecordType::AssistantFinal,
            b"{",
            &mut scratch
        ),
        Err(ScanError::Malformed { .. })
    ));
}

#[test]
fn write_text_message_escapes() {
    let mut out = [0u8; 64];
    let len = write_text_message("a\"b\n", &mut out).unwrap();
    assert_eq!(&out[..len], br#"{"role":"assistant","content":"a\"b\n"}"#);
    assert_eq!(json_escaped_len("a\"b\n"), 6);
    assert_eq!(json_escaped_len("\u{1f}é"), 6 + 2);
    let hello = br#"{"role":"assistant","content":"hello"}"#.len();
    assert_eq!(
        write_text_message("hello", &mut [0u8; 5]),
        Err(ScanError::BufferTooSmall {
            needed_bytes: hello
        })
    );
}

#[test]
fn array_span_for_tool_results() {
    let body = br#"  [ {"role":"tool","content":"a"} , {"role":"tool"} ]  "#;
    let span = array_inner_span(body).unwrap().unwrap();
    assert_eq!(
        &body[span],
        br#"{"role":"tool","content":"a"} , {"role":"tool"}"#
    );
    let span = array_inner_span(b"[]").unwrap().unwrap();
    assert!(span.is_empty());
    let span = array_inner_span(b"[ ]").unwrap().unwrap();
    assert!(span.is_empty());
    assert_eq!(array_inner_span(br#"{"a":1}"#).unwrap(), None);
    assert!(array_inner_span(b"[1,").is_err());
}

#[test]
fn valid_documents_are_accepted() {
    for body in [
        "0",
        "-0.5e+10",
        "1E5",
        "true",
        "null",
        r#"  {"a" : [ 1 , 2.25 , {"b":null} , [] , {} ] }  "#,
        r#""\u0000 nul is fine""#,
        "\"raw \n newline, as cJSON accepts\"",
        r#"[[[[[]]]]]"#,
    ] {
        assert_eq!(validate_json(body.as_bytes()), Ok(()), "{body}");
    }
}

#[test]
fn malformed_documents_say_why() {
    assert_eq!(kind_of(b""), JsonErrorKind::UnexpectedEnd);
    assert_eq!(kind_of(b"{"), JsonErrorKind::UnexpectedEnd);
    assert_eq!(kind_of(br#"{"a":1"#), JsonErrorKind::UnexpectedEnd);
    assert_eq!(kind_of(br#"{"a" 1}"#), JsonErrorKind::UnexpectedByte(b'1'));
    assert_eq!(kind_of(br#"{"a":1,}"#), JsonErrorKind::UnexpectedByte(b'}'));
    assert_eq!(kind_of(b"[1,]"), JsonErrorKind::UnexpectedByte(b']'));
    assert_eq!(kind_of(b"[1 2]"), JsonErrorKind::UnexpectedByte(b'2'));
    assert_eq!(kind_of(b"{1:2}"), JsonErrorKind::UnexpectedByte(b'1'));
    assert_eq!(kind_of(b"[}"), JsonErrorKind::UnexpectedByte(b'}'));
    assert_eq!(kind_of(b"tru"), JsonErrorKind::UnexpectedEnd);
    assert_eq!(kind_of(b"nulL"), JsonErrorKind::UnexpectedByte(b'L'));
    assert_eq!(kind_of(b"{} x"), JsonErrorKind::TrailingData);
    assert_eq!(kind_of(b"01"), JsonErrorKind::TrailingData);
    assert_eq!(kind_of(b"1."), JsonErrorKind::InvalidNumber);
    assert_eq!(kind_of(b"-"), JsonErrorKind::InvalidNumber);
    assert_eq!(kind_of(b"1e+"), JsonErrorKind::InvalidNumber);
    assert_eq!(kind_of(br#""\x""#), JsonErrorKind::InvalidEscape);
    assert_eq!(kind_of(br#""\u12g4""#), JsonErrorKind::InvalidUnicodeEscape);
    assert_eq!(kind_of(br#""\ud83d""#), JsonErrorKind::LoneSurrogate);
    assert_eq!(kind_of(br#""\ud83d\u0041""#), JsonErrorKind::LoneSurrogate);
    assert_eq!(kind_of(br#""\ude00""#), JsonErrorKind::LoneSurrogate);
    assert_eq!(kind_of(b"\"\xff\""), JsonErrorKind::InvalidUtf8);
    assert_eq!(kind_of(b"\"\xe2\x82\""), JsonErrorKind::InvalidUtf8);
    assert_eq!(kind_of(b"\"unterminated"), JsonErrorKind::UnexpectedEnd);
    assert_eq!(kind_of(b"\"\\"), JsonErrorKind::UnexpectedEnd);
}

#[test]
fn error_offsets_point_at_the_problem() {
    assert_eq!(
        validate_json(br#"{"a":[1,2,x]}"#),
        Err(ScanError::Malformed {
            offset: 10,
            kind: JsonErrorKind::UnexpectedByte(b'x')
        })
    );
    let text = validate_json(b"[1,]").unwrap_err().to_string();
    assert!(text.contains("byte 3"), "{text}");
}

#[test]
fn nesting_is_limited_without_recursion() {
    let mut deep = Vec::new();
    deep.extend(core::iter::repeat_n(b'[', MAX_JSON_DEPTH));
    deep.extend(core::iter::repeat_n(b']', MAX_JSON_DEPTH));
    assert_eq!(validate_json(&deep), Ok(()));
    let mut too_deep = Vec::new();
    too_deep.extend(core::iter::repeat_n(b'[', MAX_JSON_DEPTH + 1));
    too_deep.extend(core::iter::repeat_n(b']', MAX_JSON_DEPTH + 1));
    assert_eq!(kind_of(&too_deep), JsonErrorKind::TooDeep);
    let mut objects = Vec::new();
    for _ in 0..MAX_JSON_DEPTH {
        objects.extend_from_slice(br#"{"a":"#);
    }
    objects.extend_from_slice(b"{}");
    objects.extend(core::iter::repeat_n(b'}', MAX_JSON_DEPTH));
    assert_eq!(kind_of(&objects), JsonErrorKind::TooDeep);
    // Far deeper than any stack could recurse: still a clean error.
    let huge: Vec<u8> = core::iter::repeat_n(b'{', 100_000).collect();
    assert!(validate_json(&huge).is_err());
}

#[test]
fn never_panics_on_arbitrary_bytes() {
    // Every prefix and every single-byte corruption of a realistic body.
    let body = br#"{"role":"assistant","content":[{"type":"text","text":"a\u00e9\ud83d\ude00\n"},{"type":"x","n":-1.5e3,"b":[true,false,null]}]}"#;
    let mut out = [0u8; 64];
    for end in 0..=body.len() {
        let _ = degrade_assistant_final(&body[..end], &mut out);
        let _ = extract_final_text(&body[..end], &mut out);
        let _ = array_inner_span(&body[..end]);
    }
    let mut copy = body.to_vec();
    for i in 0..copy.len() {
        let original = copy[i];
        for b in [
            0u8, b'"', b'\\', b'{', b'}', b'[', b']', b',', b':', 0x80, 0xff,
        ] {
            copy[i] = b;
            let _ = degrade_assistant_final(&copy, &mut out);
            let _ = extract_final_text(&copy, &mut out[..3]);
        }
        copy[i] = original;
    }
    // A simple xorshift stream of random documents.
    let mut state = 0x2545_f491_4f6c_dd1du64;
    let alphabet = br#"{}[]":,\u0123abtrufesnl-+.eE 09"#;
    for _ in 0..20_000 {
        let doc = crate::testing::random_bytes(&mut state, alphabet, 24);
        let _ = degrade_assistant_final(&doc, &mut out);
        let _ = extract_final_text(&doc, &mut out);
    }
}

#[test]
fn degrade_word_says_what_degrade_assistant_final_says() {
    let bodies: [&[u8]; 9] = [
        br#"{"content":[{"type":"text","text":"hello"},{"type":"text","text":" \u00e9\n"}]}"#,
        br#"{"content":"as is"}"#,
        br#"{"content":[{"type":"tool_use","id":"x"}]}"#,
        br#"{"content":[]}"#,
        br#"{"CONTENT":[{"type":"text","text":"k"}]}"#,
        br#"{"other":1}"#,
        br#"{"content":[{"type":"text","text":"x"}"#,
        b"not json",
        br#"{"content":null}"#,
    ];
    for body in bodies {
        for size in [0usize, 5, 30, 45, 4096] {
            let mut a = vec![0u8; size];
            let mut b = vec![0u8; size];
            let word = degrade_word(body, &mut b);
            let want = match degrade_assistant_final(body, &mut a) {
                Ok(Degraded::Unchanged) | Err(ScanError::Malformed { .. }) => (degraded::KEEP, 0),
                Ok(Degraded::Dropped) => (degraded::DROP, 0),
                Ok(Degraded::Rewritten { len_bytes }) => (degraded::REWRITTEN, len_bytes),
                Err(ScanError::BufferTooSmall { needed_bytes }) => {
                    (degraded::NO_ROOM, needed_bytes)
                }
            };
            assert_eq!(
                word,
                want,
                "{:?} into {size}",
                String::from_utf8_lossy(body)
            );
            if word.0 == degraded::REWRITTEN {
                assert_eq!(a[..word.1], b[..word.1]);
            }
        }
    }
}

#[test]
fn names_and_strings_compare_character_by_character() {
    let doc = JsonValue::parse(
        r#"{"Ké\u00e9":"é😀","ab":"A","\u00c9":"x","é":"é","k":"é","e":"a"}"#.as_bytes(),
    )
    .unwrap();
    // ASCII case is ignored in names, other characters must be equal.
    assert!(doc.member("kÉé").is_none());
    assert!(doc.member("kéé").unwrap().is_string("é😀"));
    assert!(!doc.member("kéé").unwrap().is_string("é😀x"));
    assert!(!doc.member("kéé").unwrap().is_string("é"));
    assert!(!doc.member("AB").unwrap().is_string("a"));
    assert!(doc.member("ab").unwrap().is_string("A"));
    assert!(doc.member("É").unwrap().is_string("x"));
    assert!(doc.member("é").unwrap().is_string("é"));
    // A one-byte character never matches a longer one, nor the reverse.
    assert!(!doc.member("k").unwrap().is_string("e"));
    assert!(!doc.member("e").unwrap().is_string("é"));
    assert!(doc.member("ka").is_none());
}
