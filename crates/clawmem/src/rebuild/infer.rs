//! Inference from one body: [`infer_record`] reads a record's JSON and says
//! its type and backend format, and how sure it is ([`Basis`]), as the
//! module doc's "Inference" describes. A best effort: it never fails on a
//! JSON object or array.
//!
//! Pure logic over byte slices: no flash I/O, so nothing here is affected by
//! power loss.

use crate::backend::{JsonKind, JsonValue};
use crate::chdx::{BackendFormat, RecordType};

/// How a record's type or format was decided, strongest first.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum Basis {
    /// Taken from the old index entry for exactly these bytes.
    OldIndex,
    /// Only this type or format writes a body of this shape.
    Shape,
    /// The body points to it, but another writer could produce the same shape.
    Hint,
    /// The body does not tell; taken from another record of the same turn.
    Turn,
    /// Nothing tells: a default ([`BackendFormat::Unknown`] for a format).
    Default,
}

impl Basis {
    /// `true` for [`Basis::OldIndex`] and [`Basis::Shape`].
    pub const fn is_certain(self) -> bool {
        matches!(self, Basis::OldIndex | Basis::Shape)
    }

    /// `true` if the value comes from the record itself (old entry or body),
    /// so it can speak for the rest of its turn.
    pub(super) const fn is_evidence(self) -> bool {
        matches!(self, Basis::OldIndex | Basis::Shape | Basis::Hint)
    }
}

/// A record's type and backend format as read from its body, with how sure
/// each is. A best effort: it never fails on a JSON object or array.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Inference {
    /// The record type.
    pub record_type: RecordType,
    /// How the type was decided.
    pub type_basis: Basis,
    /// The backend format ([`BackendFormat::Unknown`] when nothing tells).
    pub backend_format: BackendFormat,
    /// How the format was decided.
    pub format_basis: Basis,
}

impl Inference {
    /// `true` if neither type nor format was guessed.
    pub const fn is_certain(&self) -> bool {
        self.type_basis.is_certain() && self.format_basis.is_certain()
    }

    pub(super) const fn new(record_type: RecordType, type_basis: Basis) -> Inference {
        Inference {
            record_type,
            type_basis,
            backend_format: BackendFormat::Unknown,
            format_basis: Basis::Default,
        }
    }

    /// Takes `format` if `basis` is stronger than the current one (the first
    /// of equals wins).
    fn offer(&mut self, format: BackendFormat, basis: Basis) {
        if basis < self.format_basis {
            self.backend_format = format;
            self.format_basis = basis;
        }
    }

    fn with_format(mut self, format: BackendFormat, basis: Basis) -> Inference {
        self.offer(format, basis);
        self
    }
}

fn member_is(value: JsonValue<'_>, name: &str, expected: &str) -> bool {
    value
        .member(name)
        .is_some_and(|member| member.is_string(expected))
}

pub(super) fn type_is(value: JsonValue<'_>, expected: &str) -> bool {
    member_is(value, "type", expected)
}

/// `true` if `blocks` is an array holding an object of type `block_type`.
fn has_block(blocks: Option<JsonValue<'_>>, block_type: &str) -> bool {
    blocks.is_some_and(|blocks| blocks.elements().any(|block| type_is(block, block_type)))
}

/// Infers the type and format of one record body; `None` if the body is not
/// a JSON object or array (it cannot be a record).
///
/// Rules, in order (keys match ignoring ASCII case as cJSON does, string
/// values exactly):
///
/// | body | type | format |
/// |---|---|---|
/// | `role` `user` with `tool_result` blocks | TOOL_RESULT | anthropic (shape) |
/// | `role` `user` | USER | unknown |
/// | `role` `assistant` with non-empty `tool_calls` or `tool_use` blocks | ASSISTANT_TOOL | see below |
/// | `role` `assistant` otherwise | ASSISTANT_FINAL | see below |
/// | `role` `tool` | TOOL_RESULT | unknown |
/// | `type` `function_call` / `function_call_output` / `message` | ASSISTANT_TOOL / TOOL_RESULT / ASSISTANT_FINAL (hint) | responses (shape) |
/// | `type` `tool_use` / `tool_result` | ASSISTANT_TOOL / TOOL_RESULT | anthropic (shape) |
/// | an `output` array (a raw Responses body) | as an array below | responses (shape) |
/// | any other object | ASSISTANT_FINAL (default) | unknown |
///
/// An assistant message's format: `_claw_provider_state.backend` =
/// `openai_responses` or `type` `message` give responses (shape); `tool_use`,
/// `thinking` or `redacted_thinking` blocks give anthropic (shape); `text`
/// blocks anthropic (hint); `output_text` blocks responses (hint); a
/// `tool_calls`, `reasoning_content`, `refusal` or `annotations` member
/// openai_compatible (hint); a bare `{"role":"assistant","content":"..."}`
/// nothing (ESP-Claw writes it for openai_compatible, for openai_responses and
/// for failure notes).
///
/// An array: any `function_call` item makes it an ASSISTANT_TOOL (responses),
/// any `tool_use` block an ASSISTANT_TOOL (anthropic); else any
/// `function_call_output` item a TOOL_RESULT (responses), any `tool_result`
/// block (or user message holding them) a TOOL_RESULT (anthropic), any `role`
/// `tool` message a TOOL_RESULT (unknown: ESP-Claw's canonical shape for all
/// backends), any `message` or `reasoning` item an ASSISTANT_FINAL (hint,
/// responses); any other array a TOOL_RESULT (hint: ESP-Claw writes arrays
/// only for tool results), format unknown.
pub fn infer_record(body: &[u8]) -> Option<Inference> {
    let root = JsonValue::parse(body).ok()?;
    match root.kind() {
        JsonKind::Object => Some(infer_object(root)),
        JsonKind::Array => Some(infer_array(root)),
        _ => None,
    }
}

fn infer_object(object: JsonValue<'_>) -> Inference {
    use BackendFormat::{AnthropicCompatible, OpenAiResponses};
    use RecordType::{AssistantFinal, AssistantTool, ToolResult, User};

    if let Some(role) = object.member("role") {
        if role.is_string("user") {
            if has_block(object.member("content"), "tool_result") {
                return Inference::new(ToolResult, Basis::Shape)
                    .with_format(AnthropicCompatible, Basis::Shape);
            }
            return Inference::new(User, Basis::Shape);
        }
        if role.is_string("assistant") {
            return infer_assistant(object);
        }
        if role.is_string("tool") {
            return Inference::new(ToolResult, Basis::Shape);
        }
        return Inference::new(AssistantFinal, Basis::Default);
    }
    let typed = |record_type, type_basis, format| {
        Inference::new(record_type, type_basis).with_format(format, Basis::Shape)
    };
    if type_is(object, "function_call") {
        return typed(AssistantTool, Basis::Shape, OpenAiResponses);
    }
    if type_is(object, "function_call_output") {
        return typed(ToolResult, Basis::Shape, OpenAiResponses);
    }
    if type_is(object, "message") {
        return typed(AssistantFinal, Basis::Hint, OpenAiResponses);
    }
    if type_is(object, "tool_use") {
        return typed(AssistantTool, Basis::Shape, AnthropicCompatible);
    }
    if type_is(object, "tool_result") {
        return typed(ToolResult, Basis::Shape, AnthropicCompatible);
    }
    if let Some(output) = object
        .member("output")
        .filter(|output| output.kind() == JsonKind::Array)
    {
        return infer_array(output).with_format(OpenAiResponses, Basis::Shape);
    }
    Inference::new(AssistantFinal, Basis::Default)
}

fn infer_assistant(message: JsonValue<'_>) -> Inference {
    use BackendFormat::{AnthropicCompatible, OpenAiCompatible, OpenAiResponses};

    let mut tool = false;
    let mut inference = Inference::new(RecordType::AssistantFinal, Basis::Shape);
    let provider = message
        .member("_claw_provider_state")
        .and_then(|state| state.member("backend"));
    if provider.is_some_and(|backend| backend.is_string("openai_responses")) {
        inference.offer(OpenAiResponses, Basis::Shape);
    }
    if type_is(message, "message") {
        inference.offer(OpenAiResponses, Basis::Shape);
    }
    if let Some(calls) = message.member("tool_calls") {
        // Present but empty or null: an OpenAI message without calls.
        tool |= calls.elements().next().is_some();
        inference.offer(OpenAiCompatible, Basis::Hint);
    }
    if let Some(content) = message
        .member("content")
        .filter(|content| content.kind() == JsonKind::Array)
    {
        for block in content.elements() {
            if type_is(block, "tool_use") {
                tool = true;
                inference.offer(AnthropicCompatible, Basis::Shape);
            } else if type_is(block, "thinking") || type_is(block, "redacted_thinking") {
                inference.offer(AnthropicCompatible, Basis::Shape);
            } else if type_is(block, "output_text") {
                inference.offer(OpenAiResponses, Basis::Hint);
            } else if type_is(block, "text") {
                inference.offer(AnthropicCompatible, Basis::Hint);
            }
        }
    }
    for openai_member in ["reasoning_content", "refusal", "annotations"] {
        if message.member(openai_member).is_some() {
            inference.offer(OpenAiCompatible, Basis::Hint);
        }
    }
    if tool {
        inference.record_type = RecordType::AssistantTool;
    }
    inference
}

fn infer_array(array: JsonValue<'_>) -> Inference {
    use BackendFormat::{AnthropicCompatible, OpenAiResponses};
    use RecordType::{AssistantFinal, AssistantTool, ToolResult};

    let (mut function_call, mut tool_use, mut function_output) = (false, false, false);
    let (mut tool_result, mut tool_role, mut responses_item) = (false, false, false);
    for item in array.elements() {
        if item.kind() != JsonKind::Object {
            continue;
        }
        function_call |= type_is(item, "function_call");
        tool_use |= type_is(item, "tool_use");
        function_output |= type_is(item, "function_call_output");
        tool_result |= type_is(item, "tool_result")
            || (member_is(item, "role", "user")
                && has_block(item.member("content"), "tool_result"));
        tool_role |= member_is(item, "role", "tool");
        responses_item |= type_is(item, "message") || type_is(item, "reasoning");
    }
    let shaped = |record_type, type_basis, format| {
        Inference::new(record_type, type_basis).with_format(format, Basis::Shape)
    };
    if function_call {
        shaped(AssistantTool, Basis::Shape, OpenAiResponses)
    } else if tool_use {
        shaped(AssistantTool, Basis::Shape, AnthropicCompatible)
    } else if function_output {
        shaped(ToolResult, Basis::Shape, OpenAiResponses)
    } else if tool_result {
        shaped(ToolResult, Basis::Shape, AnthropicCompatible)
    } else if tool_role {
        Inference::new(ToolResult, Basis::Shape)
    } else if responses_item {
        shaped(AssistantFinal, Basis::Hint, OpenAiResponses)
    } else {
        Inference::new(ToolResult, Basis::Hint)
    }
}
