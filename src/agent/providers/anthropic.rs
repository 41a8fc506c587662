//! Anthropic Messages over SSE: text, tool use (`input_json_delta`) and thinking blocks.

use std::collections::{BTreeMap, BTreeSet};

use async_trait::async_trait;
use serde_json::{Value, json};

use super::http::{self, looks_like_context_overflow};
use super::sse::{SseEvent, StreamDecoder, decode_stream, sse_events};
use super::{
    ModelEvent, ModelProvider, ModelRequest, ModelStream, ProviderError, StopReason, text_with_image_notes,
    user_content,
};
use crate::config::Secret;
use crate::types::conversation::{ChatMessage, ImagePart, MediaRef, ThinkingBlock, Usage};

/// Anthropic's public endpoint, used when a provider sets no `base_url`.
pub const DEFAULT_BASE_URL: &str = "https://api.anthropic.com";

/// The API version Ferry speaks (sent as `anthropic-version`).
pub const API_VERSION: &str = "2023-06-01";

/// The Messages API requires a reply cap; this one leaves room for long answers.
pub const DEFAULT_MAX_TOKENS: u32 = 8192;

pub struct AnthropicProvider {
    name: String,
    endpoint: String,
    api_key: Option<Secret>,
    client: reqwest::Client,
}

impl AnthropicProvider {
    /// `base_url` may or may not end in `/v1`; both are common in configs.
    pub fn new(name: impl Into<String>, base_url: &str, api_key: Option<Secret>) -> Self {
        let base = base_url.trim_end_matches('/');
        let endpoint = if base.ends_with("/v1") { format!("{base}/messages") } else { format!("{base}/v1/messages") };
        Self { name: name.into(), endpoint, api_key: api_key.filter(|key| !key.is_blank()), client: http::client() }
    }
}

#[async_trait]
impl ModelProvider for AnthropicProvider {
    fn name(&self) -> &str {
        &self.name
    }

    /// Current Claude models take 200k tokens.
    fn default_context_window(&self) -> u32 {
        200_000
    }

    async fn stream(&self, request: &ModelRequest) -> Result<ModelStream, ProviderError> {
        let mut builder =
            self.client.post(&self.endpoint).header("anthropic-version", API_VERSION).json(&request_body(request));
        if let Some(key) = &self.api_key {
            builder = builder.header("x-api-key", key.expose());
        }
        let response = http::send(builder).await?;
        Ok(decode_stream(sse_events(response.bytes_stream()), EventDecoder::default()))
    }
}

/// The Messages request for a conversation. Consecutive messages of one role are merged
/// (the API requires user and assistant turns to alternate), and tool results travel as
/// `tool_result` blocks of a user turn, with their images inside when the model takes them.
pub fn request_body(request: &ModelRequest) -> Value {
    let budget = request.thinking.anthropic_budget();
    // Thinking blocks matter only in the tool-use loop answering the latest user message
    // (the API ignores earlier ones), and only while thinking is on.
    let loop_start = request.messages.iter().rposition(|message| matches!(message, ChatMessage::User { .. }));
    let mut messages: Vec<(&str, Vec<Value>)> = Vec::new();
    for (position, message) in request.messages.iter().enumerate() {
        let (role, blocks) = match message {
            ChatMessage::User { text, media } => ("user", user_blocks(text, media, request.vision)),
            ChatMessage::Assistant { text, tool_calls, thinking } => {
                let mut blocks = Vec::new();
                if budget.is_some() && loop_start.is_none_or(|start| position > start) {
                    blocks.extend(thinking.iter().map(thinking_block));
                }
                // The API refuses empty text blocks.
                if !text.is_empty() {
                    blocks.push(json!({ "type": "text", "text": text }));
                }
                for call in tool_calls {
                    // A call whose arguments were not valid JSON was answered with an error;
                    // the API still needs an object here.
                    let input: Value = serde_json::from_str(&call.arguments)
                        .ok()
                        .filter(Value::is_object)
                        .unwrap_or_else(|| json!({}));
                    blocks.push(json!({ "type": "tool_use", "id": call.id, "name": call.name, "input": input }));
                }
                ("assistant", blocks)
            }
            ChatMessage::ToolResult { call_id, content, is_error, images, .. } => {
                let content = tool_result_content(content, images, request.vision);
                let block =
                    json!({ "type": "tool_result", "tool_use_id": call_id, "content": content, "is_error": is_error });
                ("user", vec![block])
            }
        };
        if blocks.is_empty() {
            continue;
        }
        match messages.last_mut() {
            Some((last_role, last_blocks)) if *last_role == role => last_blocks.extend(blocks),
            _ => messages.push((role, blocks)),
        }
    }
    let max_tokens = request.max_output_tokens.unwrap_or(DEFAULT_MAX_TOKENS);
    let mut body = json!({
        "model": request.model,
        // Thinking counts against max_tokens: room for the budget and a full answer.
        "max_tokens": budget.map_or(max_tokens, |budget| budget + max_tokens),
        "messages": messages.into_iter().map(|(role, content)| json!({ "role": role, "content": content })).collect::<Vec<_>>(),
        "stream": true,
    });
    if !request.system.is_empty() {
        body["system"] = request.system.clone().into();
    }
    if let Some(budget) = budget {
        body["thinking"] = json!({ "type": "enabled", "budget_tokens": budget });
    }
    if !request.tools.is_empty() {
        body["tools"] = request
            .tools
            .iter()
            .map(|tool| json!({ "name": tool.name, "description": tool.description, "input_schema": tool.parameters }))
            .collect();
    }
    body
}

/// A user's turn: its images as base64 `image` blocks (first, as Anthropic advises), then its
/// text. A photo sent without a caption has no text block: the API refuses empty ones.
fn user_blocks(text: &str, media: &[MediaRef], vision: bool) -> Vec<Value> {
    let content = user_content(text, media, vision);
    let mut blocks: Vec<Value> = content.images.iter().copied().map(image_block).collect();
    if !content.text.is_empty() || blocks.is_empty() {
        blocks.push(json!({ "type": "text", "text": content.text }));
    }
    blocks
}

fn image_block(image: &ImagePart) -> Value {
    json!({
        "type": "image",
        "source": { "type": "base64", "media_type": image.media_type, "data": image.data },
    })
}

/// A `tool_result` block's `content`: the text alone (with a note per image when the model
/// has no image input), or a text block followed by one base64 `image` block per image.
fn tool_result_content(text: &str, images: &[ImagePart], vision: bool) -> Value {
    if images.is_empty() || !vision {
        return text_with_image_notes(text, images).into();
    }
    let mut blocks = Vec::with_capacity(images.len() + 1);
    // The API refuses empty text blocks.
    if !text.is_empty() {
        blocks.push(json!({ "type": "text", "text": text }));
    }
    blocks.extend(images.iter().map(image_block));
    Value::Array(blocks)
}

/// A stored thinking block as the API wants it back: unmodified, with its signature.
fn thinking_block(block: &ThinkingBlock) -> Value {
    match block {
        ThinkingBlock::Thinking { thinking, signature } => {
            json!({ "type": "thinking", "thinking": thinking, "signature": signature })
        }
        ThinkingBlock::Redacted { data } => json!({ "type": "redacted_thinking", "data": data }),
    }
}

/// Turns Messages stream events into model events.
#[derive(Debug, Default)]
pub struct EventDecoder {
    usage: Usage,
    stop: Option<StopReason>,
    tool_blocks: BTreeSet<usize>,
    /// Thinking blocks being streamed, by index: their text and signature so far.
    thinking: BTreeMap<usize, (String, String)>,
    done: bool,
}

impl StreamDecoder for EventDecoder {
    fn decode(&mut self, event: SseEvent) -> Result<Vec<ModelEvent>, ProviderError> {
        if self.done || event.data.trim().is_empty() {
            return Ok(Vec::new());
        }
        let data: Value = serde_json::from_str(&event.data).map_err(|error| ProviderError::Malformed {
            message: format!("{} event is not JSON ({error})", event.event),
        })?;
        let kind = data.get("type").and_then(Value::as_str).unwrap_or(event.event.as_str());
        let index = data.get("index").and_then(Value::as_u64).map(|index| index as usize);
        let mut events = Vec::new();
        match kind {
            "message_start" => {
                let usage = data.pointer("/message/usage");
                let count = |key: &str| usage.and_then(|u| u.get(key)).and_then(Value::as_u64).unwrap_or(0);
                // Cached prompt tokens still occupy the context window.
                self.usage.input_tokens =
                    count("input_tokens") + count("cache_creation_input_tokens") + count("cache_read_input_tokens");
                self.usage.output_tokens = count("output_tokens");
            }
            "content_block_start" => {
                let block = data.get("content_block");
                match (block.and_then(|b| b.get("type")).and_then(Value::as_str), index) {
                    (Some("tool_use"), Some(index)) => {
                        self.tool_blocks.insert(index);
                        let field =
                            |key: &str| block.and_then(|b| b.get(key)).and_then(Value::as_str).unwrap_or_default();
                        events.push(ModelEvent::ToolCallStart {
                            index,
                            id: field("id").to_owned(),
                            name: field("name").to_owned(),
                        });
                    }
                    (Some("thinking"), Some(index)) => {
                        self.thinking.insert(index, (String::new(), String::new()));
                    }
                    (Some("redacted_thinking"), _) => {
                        let data = block.and_then(|b| b.get("data")).and_then(Value::as_str).unwrap_or_default();
                        events.push(ModelEvent::Thinking(ThinkingBlock::Redacted { data: data.to_owned() }));
                    }
                    (Some("text"), _) => {
                        if let Some(text) =
                            block.and_then(|b| b.get("text")).and_then(Value::as_str).filter(|t| !t.is_empty())
                        {
                            events.push(ModelEvent::TextDelta(text.to_owned()));
                        }
                    }
                    _ => {}
                }
            }
            "content_block_delta" => {
                let delta = data.get("delta");
                let field =
                    |key: &str| delta.and_then(|d| d.get(key)).and_then(Value::as_str).unwrap_or_default().to_owned();
                match delta.and_then(|d| d.get("type")).and_then(Value::as_str) {
                    Some("text_delta") => events.push(ModelEvent::TextDelta(field("text"))),
                    Some("thinking_delta") => {
                        let piece = field("thinking");
                        if let Some((text, _)) = index.and_then(|index| self.thinking.get_mut(&index)) {
                            text.push_str(&piece);
                        }
                        events.push(ModelEvent::ReasoningDelta(piece));
                    }
                    Some("signature_delta") => {
                        if let Some((_, signature)) = index.and_then(|index| self.thinking.get_mut(&index)) {
                            signature.push_str(&field("signature"));
                        }
                    }
                    Some("input_json_delta") => {
                        let partial = field("partial_json");
                        if let Some(index) = index.filter(|index| self.tool_blocks.contains(index))
                            && !partial.is_empty()
                        {
                            events.push(ModelEvent::ToolCallDelta { index, arguments: partial });
                        }
                    }
                    // citations_delta and future kinds carry nothing to show.
                    _ => {}
                }
            }
            "content_block_stop" => {
                if let Some(index) = index.filter(|index| self.tool_blocks.contains(index)) {
                    events.push(ModelEvent::ToolCallEnd { index });
                }
                if let Some((thinking, signature)) = index.and_then(|index| self.thinking.remove(&index)) {
                    events.push(ModelEvent::Thinking(ThinkingBlock::Thinking { thinking, signature }));
                }
            }
            "message_delta" => {
                if let Some(reason) = data.pointer("/delta/stop_reason").and_then(Value::as_str) {
                    self.stop = Some(match reason {
                        "end_turn" | "stop_sequence" => StopReason::EndTurn,
                        "tool_use" => StopReason::ToolUse,
                        "max_tokens" => StopReason::MaxTokens,
                        other => StopReason::Other(other.to_owned()),
                    });
                }
                if let Some(output) = data.pointer("/usage/output_tokens").and_then(Value::as_u64) {
                    self.usage.output_tokens = output;
                }
            }
            "message_stop" => {
                self.done = true;
                events.push(ModelEvent::Usage(self.usage));
                events.push(ModelEvent::Stop(self.stop.take().unwrap_or(StopReason::EndTurn)));
            }
            "error" => return Err(stream_error(&data)),
            other => tracing::debug!(event = other, "ignoring an Anthropic stream event of an unknown type"),
        }
        Ok(events)
    }

    fn is_complete(&self) -> bool {
        self.done
    }
}

/// An `error` event mid-stream, e.g. `overloaded_error`.
fn stream_error(data: &Value) -> ProviderError {
    let kind = data.pointer("/error/type").and_then(Value::as_str).unwrap_or_default();
    let message = data.pointer("/error/message").and_then(Value::as_str).unwrap_or("unknown error").to_owned();
    if looks_like_context_overflow(None, &message) {
        return ProviderError::ContextOverflow { message };
    }
    match kind {
        "rate_limit_error" => ProviderError::RateLimited { retry_after: None, message },
        "overloaded_error" => ProviderError::Server { status: 529, retry_after: None, message },
        "invalid_request_error" => ProviderError::Rejected { status: 400, message },
        _ => ProviderError::Server { status: 500, retry_after: None, message },
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::types::conversation::ToolCall;

    fn decode_all(events: &[(&str, &str)]) -> Result<Vec<ModelEvent>, ProviderError> {
        let mut decoder = EventDecoder::default();
        let mut out = Vec::new();
        for (name, data) in events {
            out.extend(decoder.decode(SseEvent { event: (*name).into(), data: (*data).into() })?);
        }
        Ok(out)
    }

    #[test]
    fn text_thinking_tool_use_and_usage_are_decoded() {
        let events = decode_all(&[
            ("message_start", r#"{"type":"message_start","message":{"usage":{"input_tokens":20,"output_tokens":1}}}"#),
            ("content_block_start", r#"{"type":"content_block_start","index":0,"content_block":{"type":"thinking","thinking":""}}"#),
            ("content_block_delta", r#"{"type":"content_block_delta","index":0,"delta":{"type":"thinking_delta","thinking":"hmm"}}"#),
            ("content_block_delta", r#"{"type":"content_block_delta","index":0,"delta":{"type":"signature_delta","signature":"x"}}"#),
            ("content_block_start", r#"{"type":"content_block_start","index":1,"content_block":{"type":"text","text":""}}"#),
            ("content_block_delta", r#"{"type":"content_block_delta","index":1,"delta":{"type":"text_delta","text":"Let me check."}}"#),
            ("content_block_start", r#"{"type":"content_block_start","index":2,"content_block":{"type":"tool_use","id":"toolu_1","name":"current_time","input":{}}}"#),
            ("content_block_delta", r#"{"type":"content_block_delta","index":2,"delta":{"type":"input_json_delta","partial_json":"{\"tz\":"}}"#),
            ("content_block_delta", r#"{"type":"content_block_delta","index":2,"delta":{"type":"input_json_delta","partial_json":"\"UTC\"}"}}"#),
            ("content_block_stop", r#"{"type":"content_block_stop","index":2}"#),
            ("ping", r#"{"type":"ping"}"#),
            ("message_delta", r#"{"type":"message_delta","delta":{"stop_reason":"tool_use"},"usage":{"output_tokens":30}}"#),
            ("message_stop", r#"{"type":"message_stop"}"#),
        ])
        .unwrap();
        assert_eq!(
            events,
            [
                ModelEvent::ReasoningDelta("hmm".into()),
                ModelEvent::TextDelta("Let me check.".into()),
                ModelEvent::ToolCallStart { index: 2, id: "toolu_1".into(), name: "current_time".into() },
                ModelEvent::ToolCallDelta { index: 2, arguments: "{\"tz\":".into() },
                ModelEvent::ToolCallDelta { index: 2, arguments: "\"UTC\"}".into() },
                ModelEvent::ToolCallEnd { index: 2 },
                ModelEvent::Usage(Usage { input_tokens: 20, output_tokens: 30 }),
                ModelEvent::Stop(StopReason::ToolUse),
            ]
        );
    }

    #[test]
    fn mid_stream_errors_are_classified() {
        let overloaded =
            decode_all(&[("error", r#"{"type":"error","error":{"type":"overloaded_error","message":"Overloaded"}}"#)]);
        assert!(matches!(overloaded, Err(ProviderError::Server { status: 529, .. })));
        let unknown = decode_all(&[("future_event", r#"{"type":"future_event"}"#)]).unwrap();
        assert!(unknown.is_empty());
    }

    #[test]
    fn the_request_alternates_roles_and_sends_tool_results_as_user_blocks() {
        let request = ModelRequest {
            model: "claude-test".into(),
            system: "sys".into(),
            messages: vec![
                ChatMessage::user("a"),
                ChatMessage::user("b"),
                ChatMessage::Assistant {
                    text: String::new(),
                    tool_calls: vec![
                        ToolCall { id: "t1".into(), name: "x".into(), arguments: "{\"k\":1}".into() },
                        ToolCall { id: "t2".into(), name: "y".into(), arguments: "{broken".into() },
                    ],
                    thinking: Vec::new(),
                },
                ChatMessage::tool_result("t1", "x", "ok", false),
                ChatMessage::tool_result("t2", "y", "bad", true),
            ],
            tools: vec![],
            max_output_tokens: None,
            thinking: Default::default(),
            vision: false,
        };
        let body = request_body(&request);
        let messages = body["messages"].as_array().unwrap();
        assert_eq!(messages.len(), 3);
        assert_eq!(messages[0]["content"].as_array().unwrap().len(), 2);
        assert_eq!(messages[1]["content"][0]["input"], json!({"k":1}));
        assert_eq!(messages[1]["content"][1]["input"], json!({}));
        assert_eq!(messages[2]["role"], "user");
        assert_eq!(messages[2]["content"][1]["is_error"], true);
        assert_eq!(body["system"], "sys");
        assert_eq!(body["max_tokens"], DEFAULT_MAX_TOKENS);
    }

    #[test]
    fn with_image_input_a_users_photo_is_an_image_block_and_older_ones_are_notes() {
        let body = request_body(&super::super::with_user_photos(true));
        assert_eq!(
            body["messages"][0]["content"],
            json!([{ "type": "text", "text": "old one\n[photo 800×600 not shown: only the latest images are shown again]" }])
        );
        // No caption: the API refuses an empty text block, so there is none.
        assert_eq!(
            body["messages"][2]["content"],
            json!([{ "type": "image", "source": { "type": "base64", "media_type": "image/jpeg", "data": "/9j/4A==" } }])
        );
    }

    #[test]
    fn without_image_input_a_users_photo_is_a_note() {
        let body = request_body(&super::super::with_user_photos(false));
        assert_eq!(
            body["messages"][2]["content"],
            json!([{ "type": "text", "text": "[photo 1568×1045 not shown: this model has no image input]" }])
        );
    }

    /// A conversation whose one tool call returned text and two images.
    fn with_tool_images(vision: bool) -> ModelRequest {
        let image =
            |width, height| ImagePart { media_type: "image/png".into(), data: "iVBORw0KGgo=".into(), width, height };
        ModelRequest {
            model: "claude-test".into(),
            system: String::new(),
            messages: vec![
                ChatMessage::user("look"),
                ChatMessage::assistant(
                    "",
                    vec![ToolCall { id: "t1".into(), name: "read".into(), arguments: "{}".into() }],
                ),
                ChatMessage::ToolResult {
                    call_id: "t1".into(),
                    name: "read".into(),
                    content: "a.png".into(),
                    is_error: false,
                    images: vec![image(1280, 960), image(10, 20)],
                },
            ],
            tools: vec![],
            max_output_tokens: None,
            thinking: Default::default(),
            vision,
        }
    }

    #[test]
    fn with_image_input_tool_result_images_become_image_blocks_inside_the_result() {
        let body = request_body(&with_tool_images(true));
        let result = &body["messages"][2]["content"][0];
        assert_eq!(result["type"], "tool_result");
        assert_eq!(result["tool_use_id"], "t1");
        assert_eq!(
            result["content"],
            json!([
                { "type": "text", "text": "a.png" },
                { "type": "image", "source": { "type": "base64", "media_type": "image/png", "data": "iVBORw0KGgo=" } },
                { "type": "image", "source": { "type": "base64", "media_type": "image/png", "data": "iVBORw0KGgo=" } },
            ])
        );
    }

    #[test]
    fn without_image_input_each_image_becomes_a_line_of_text() {
        let body = request_body(&with_tool_images(false));
        assert_eq!(
            body["messages"][2]["content"][0]["content"],
            "a.png\n[image 1280×960 not shown: this model has no image input]\n\
             [image 10×20 not shown: this model has no image input]"
        );
        assert!(!body.to_string().contains("iVBOR"));
    }

    #[test]
    fn base_urls_with_and_without_the_version_segment_work() {
        assert_eq!(AnthropicProvider::new("a", "http://h/v1/", None).endpoint, "http://h/v1/messages");
        assert_eq!(AnthropicProvider::new("a", "http://h", None).endpoint, "http://h/v1/messages");
    }
}
