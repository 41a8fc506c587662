//! OpenAI-compatible Chat Completions over SSE: OpenAI, Ollama, vLLM, llama.cpp server,
//! OpenRouter and the many servers that copy the format.

use std::borrow::Cow;
use std::collections::BTreeSet;

use async_trait::async_trait;
use serde::Deserialize;
use serde_json::{Value, json};

use super::http::{self, error_details, looks_like_context_overflow};
use super::sse::{SseEvent, StreamDecoder, decode_stream, sse_events};
use super::{
    ModelEvent, ModelProvider, ModelRequest, ModelStream, ProviderError, StopReason, text_with_image_notes,
    user_content,
};
use crate::config::Secret;
use crate::types::conversation::{ChatMessage, ImagePart, MediaRef, Usage};

/// OpenAI's public endpoint, used when a provider sets no `base_url`.
pub const DEFAULT_BASE_URL: &str = "https://api.openai.com/v1";

pub struct OpenAiProvider {
    name: String,
    endpoint: String,
    api_key: Option<Secret>,
    client: reqwest::Client,
}

impl OpenAiProvider {
    /// `base_url` is the API root including any version segment (`…/v1`), as every
    /// compatible server documents it.
    pub fn new(name: impl Into<String>, base_url: &str, api_key: Option<Secret>) -> Self {
        Self {
            name: name.into(),
            endpoint: format!("{}/chat/completions", base_url.trim_end_matches('/')),
            api_key: api_key.filter(|key| !key.is_blank()),
            client: http::client(),
        }
    }
}

#[async_trait]
impl ModelProvider for OpenAiProvider {
    fn name(&self) -> &str {
        &self.name
    }

    async fn stream(&self, request: &ModelRequest) -> Result<ModelStream, ProviderError> {
        let mut builder = self.client.post(&self.endpoint).json(&request_body(request));
        if let Some(key) = &self.api_key {
            builder = builder.bearer_auth(key.expose());
        }
        let response = http::send(builder).await?;
        Ok(decode_stream(sse_events(response.bytes_stream()), ChunkDecoder::default()))
    }
}

/// The Chat Completions request for a conversation.
///
/// A `tool` message holds text only. When the model takes images, the images of a run of
/// tool results follow it in one `user` message (right after the last `tool` message: the
/// API requires the results to follow the assistant's `tool_calls` without a gap); without
/// image input each image is a line of text in its result.
pub fn request_body(request: &ModelRequest) -> Value {
    let mut messages = Vec::with_capacity(request.messages.len() + 1);
    if !request.system.is_empty() {
        messages.push(json!({ "role": "system", "content": request.system }));
    }
    // Images of the current run of tool results, sent once the run ends.
    let mut tool_images: Vec<(&str, &str, &[ImagePart])> = Vec::new();
    for message in &request.messages {
        if !matches!(message, ChatMessage::ToolResult { .. }) {
            push_tool_images(&mut messages, &mut tool_images);
        }
        messages.push(match message {
            ChatMessage::User { text, media } => user_message(text, media, request.vision),
            ChatMessage::Assistant { text, tool_calls, .. } if tool_calls.is_empty() => {
                json!({ "role": "assistant", "content": text })
            }
            ChatMessage::Assistant { text, tool_calls, .. } => json!({
                "role": "assistant",
                "content": if text.is_empty() { Value::Null } else { Value::from(text.as_str()) },
                "tool_calls": tool_calls.iter().map(|call| json!({
                    "id": call.id,
                    "type": "function",
                    "function": { "name": call.name, "arguments": call.arguments },
                })).collect::<Vec<_>>(),
            }),
            ChatMessage::ToolResult { call_id, name, content, images, .. } if request.vision => {
                if !images.is_empty() {
                    tool_images.push((name, call_id, images));
                }
                json!({ "role": "tool", "tool_call_id": call_id, "content": content })
            }
            ChatMessage::ToolResult { call_id, content, images, .. } => {
                json!({ "role": "tool", "tool_call_id": call_id, "content": text_with_image_notes(content, images) })
            }
        });
    }
    push_tool_images(&mut messages, &mut tool_images);
    let mut body = json!({
        "model": request.model,
        "messages": messages,
        "stream": true,
        "stream_options": { "include_usage": true },
    });
    if !request.tools.is_empty() {
        body["tools"] = request
            .tools
            .iter()
            .map(|tool| {
                json!({
                    "type": "function",
                    "function": { "name": tool.name, "description": tool.description, "parameters": tool.parameters },
                })
            })
            .collect();
    }
    if let Some(max) = request.max_output_tokens {
        body["max_tokens"] = max.into();
    }
    if !request.thinking.is_off() {
        body["reasoning_effort"] = request.thinking.as_str().into();
    }
    body
}

/// A user's message: plain text, or, when it shows images, a text part followed by one
/// `image_url` part (a `data:` URL) per image.
fn user_message(text: &str, media: &[MediaRef], vision: bool) -> Value {
    let content = user_content(text, media, vision);
    if content.images.is_empty() {
        return json!({ "role": "user", "content": content.text });
    }
    let mut parts = Vec::with_capacity(content.images.len() + 1);
    if !content.text.is_empty() {
        parts.push(json!({ "type": "text", "text": content.text }));
    }
    parts.extend(
        content.images.iter().map(|image| json!({ "type": "image_url", "image_url": { "url": image.data_url() } })),
    );
    json!({ "role": "user", "content": parts })
}

/// The `user` message carrying the images of the tool results just sent, if they had any:
/// for each call a text part naming it, then its images as `data:` URLs.
fn push_tool_images(messages: &mut Vec<Value>, tool_images: &mut Vec<(&str, &str, &[ImagePart])>) {
    if tool_images.is_empty() {
        return;
    }
    let mut parts = Vec::new();
    for (name, call_id, images) in tool_images.drain(..) {
        parts.push(json!({ "type": "text", "text": format!("Images returned by tool {name} (call {call_id}):") }));
        parts.extend(
            images.iter().map(|image| json!({ "type": "image_url", "image_url": { "url": image.data_url() } })),
        );
    }
    messages.push(json!({ "role": "user", "content": parts }));
}

/// A `chat.completion.chunk`, the fields Ferry reads. Strings borrow from the event's
/// data unless they contain escapes; unknown fields are ignored.
#[derive(Deserialize)]
struct Chunk<'a> {
    #[serde(default, borrow)]
    choices: Option<Vec<Choice<'a>>>,
    #[serde(default)]
    usage: Option<ChunkUsage>,
    #[serde(default)]
    error: Option<Value>,
}

#[derive(Deserialize)]
struct Choice<'a> {
    #[serde(default)]
    index: Option<u64>,
    #[serde(default, borrow)]
    delta: Option<Delta<'a>>,
    #[serde(default, borrow)]
    finish_reason: Option<Cow<'a, str>>,
}

#[derive(Deserialize)]
struct Delta<'a> {
    #[serde(default, borrow)]
    content: Option<Cow<'a, str>>,
    /// DeepSeek, vLLM and llama.cpp stream reasoning here…
    #[serde(default, borrow)]
    reasoning_content: Option<Cow<'a, str>>,
    /// …and OpenRouter here.
    #[serde(default, borrow)]
    reasoning: Option<Cow<'a, str>>,
    #[serde(default, borrow)]
    tool_calls: Option<Vec<ToolCallChunk<'a>>>,
}

#[derive(Deserialize)]
struct ToolCallChunk<'a> {
    #[serde(default)]
    index: Option<usize>,
    #[serde(default, borrow)]
    id: Option<Cow<'a, str>>,
    #[serde(default, borrow)]
    function: Option<FunctionChunk<'a>>,
}

#[derive(Deserialize)]
struct FunctionChunk<'a> {
    #[serde(default, borrow)]
    name: Option<Cow<'a, str>>,
    #[serde(default, borrow)]
    arguments: Option<Cow<'a, str>>,
}

#[derive(Deserialize)]
struct ChunkUsage {
    #[serde(default)]
    prompt_tokens: u64,
    #[serde(default)]
    completion_tokens: u64,
}

/// Turns `chat.completion.chunk` events into model events.
#[derive(Debug, Default)]
pub struct ChunkDecoder {
    started_calls: BTreeSet<usize>,
    open_calls: BTreeSet<usize>,
    stop: Option<StopReason>,
    done: bool,
}

impl StreamDecoder for ChunkDecoder {
    fn decode(&mut self, event: SseEvent) -> Result<Vec<ModelEvent>, ProviderError> {
        let data = event.data.trim();
        // Nothing after `[DONE]` counts, another `[DONE]` included: the reply stops once.
        if data.is_empty() || self.done {
            return Ok(Vec::new());
        }
        if data == "[DONE]" {
            self.done = true;
            return Ok(vec![ModelEvent::Stop(self.stop.take().unwrap_or(StopReason::EndTurn))]);
        }
        let chunk: Chunk<'_> = serde_json::from_str(data).map_err(|error| ProviderError::Malformed {
            message: format!("chunk is not a completion chunk ({error})"),
        })?;
        if let Some(error) = &chunk.error {
            return Err(stream_error(error));
        }
        let mut events = Vec::new();
        for choice in chunk.choices.into_iter().flatten() {
            // Ferry asks for one choice; ignore any others a server sends.
            if choice.index.unwrap_or(0) != 0 {
                continue;
            }
            if let Some(delta) = choice.delta {
                self.decode_delta(delta, &mut events);
            }
            if let Some(reason) = choice.finish_reason {
                // The finish reason closes every call still open.
                events.extend(
                    std::mem::take(&mut self.open_calls).into_iter().map(|index| ModelEvent::ToolCallEnd { index }),
                );
                self.stop = Some(match reason.as_ref() {
                    "stop" => StopReason::EndTurn,
                    "tool_calls" | "function_call" => StopReason::ToolUse,
                    "length" => StopReason::MaxTokens,
                    other => StopReason::Other(other.to_owned()),
                });
            }
        }
        if let Some(usage) = chunk.usage {
            events.push(ModelEvent::Usage(Usage {
                input_tokens: usage.prompt_tokens,
                output_tokens: usage.completion_tokens,
            }));
        }
        Ok(events)
    }

    /// `[DONE]` ends a reply; a server that omits it but sent a finish reason is accepted.
    fn is_complete(&self) -> bool {
        self.done || self.stop.is_some()
    }
}

impl ChunkDecoder {
    fn decode_delta(&mut self, delta: Delta<'_>, events: &mut Vec<ModelEvent>) {
        let non_empty = |text: Option<Cow<'_, str>>| text.filter(|text| !text.is_empty()).map(Cow::into_owned);
        if let Some(reasoning) = non_empty(delta.reasoning_content).or_else(|| non_empty(delta.reasoning)) {
            events.push(ModelEvent::ReasoningDelta(reasoning));
        }
        if let Some(content) = non_empty(delta.content) {
            events.push(ModelEvent::TextDelta(content));
        }
        for (position, call) in delta.tool_calls.into_iter().flatten().enumerate() {
            let index = call.index.unwrap_or(position);
            let (name, arguments) = call.function.map_or((None, None), |f| (f.name, f.arguments));
            if self.started_calls.insert(index) {
                self.open_calls.insert(index);
                // llama.cpp and some proxies leave out the id; the loop needs one to pair
                // the result with the call.
                let id = call.id.map_or_else(|| format!("call_{index}"), Cow::into_owned);
                events.push(ModelEvent::ToolCallStart {
                    index,
                    id,
                    name: name.map(Cow::into_owned).unwrap_or_default(),
                });
            }
            if let Some(arguments) = non_empty(arguments) {
                events.push(ModelEvent::ToolCallDelta { index, arguments });
            }
        }
    }
}

/// An error object sent inside the stream (some servers report failures this way).
fn stream_error(error: &Value) -> ProviderError {
    let (code, message) = error_details(&json!({ "error": error }).to_string());
    if looks_like_context_overflow(code.as_deref(), &message) {
        return ProviderError::ContextOverflow { message };
    }
    ProviderError::Server { status: 500, retry_after: None, message }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::agent::providers::ToolSpec;
    use crate::types::conversation::ToolCall;

    fn decode_all(lines: &[&str]) -> Result<Vec<ModelEvent>, ProviderError> {
        let mut decoder = ChunkDecoder::default();
        let mut events = Vec::new();
        for line in lines {
            events.extend(decoder.decode(SseEvent { event: "message".into(), data: (*line).into() })?);
        }
        Ok(events)
    }

    #[test]
    fn text_tool_calls_usage_and_stop_are_decoded() {
        let events = decode_all(&[
            r#"{"choices":[{"index":0,"delta":{"role":"assistant","content":"Hi"},"finish_reason":null}]}"#,
            r#"{"choices":[{"index":0,"delta":{"tool_calls":[{"index":0,"id":"call_1","type":"function","function":{"name":"current_time","arguments":""}}]}}]}"#,
            r#"{"choices":[{"index":0,"delta":{"tool_calls":[{"index":0,"function":{"arguments":"{}"}}]}}]}"#,
            r#"{"choices":[{"index":0,"delta":{},"finish_reason":"tool_calls"}]}"#,
            r#"{"choices":[],"usage":{"prompt_tokens":12,"completion_tokens":3,"total_tokens":15}}"#,
            "[DONE]",
        ])
        .unwrap();
        assert_eq!(
            events,
            [
                ModelEvent::TextDelta("Hi".into()),
                ModelEvent::ToolCallStart { index: 0, id: "call_1".into(), name: "current_time".into() },
                ModelEvent::ToolCallDelta { index: 0, arguments: "{}".into() },
                ModelEvent::ToolCallEnd { index: 0 },
                ModelEvent::Usage(Usage { input_tokens: 12, output_tokens: 3 }),
                ModelEvent::Stop(StopReason::ToolUse),
            ]
        );
    }

    /// Found by fuzzing (fuzz/seeds/sse_decoders/regression-double-done): a second `[DONE]`
    /// stopped the reply again, as `EndTurn`, overwriting the tool-use stop before it.
    #[test]
    fn the_reply_stops_once_even_if_done_comes_twice() {
        let events =
            decode_all(&[r#"{"choices":[{"index":0,"delta":{},"finish_reason":"tool_calls"}]}"#, "[DONE]", "[DONE]"])
                .unwrap();
        assert_eq!(events, [ModelEvent::Stop(StopReason::ToolUse)]);
    }

    #[test]
    fn a_call_without_an_id_gets_one() {
        let events = decode_all(&[
            r#"{"choices":[{"index":0,"delta":{"tool_calls":[{"index":2,"function":{"name":"x","arguments":"{\"a\":1}"}}]}}]}"#,
        ])
        .unwrap();
        assert_eq!(events[0], ModelEvent::ToolCallStart { index: 2, id: "call_2".into(), name: "x".into() });
        assert_eq!(events[1], ModelEvent::ToolCallDelta { index: 2, arguments: "{\"a\":1}".into() });
    }

    #[test]
    fn empty_choices_are_ignored_and_bad_json_is_a_clear_error() {
        assert_eq!(decode_all(&[r#"{"choices":[]}"#]).unwrap(), []);
        let error = decode_all(&["{not json"]).unwrap_err();
        assert!(matches!(error, ProviderError::Malformed { .. }), "{error}");
    }

    #[test]
    fn an_in_stream_error_object_is_reported() {
        let error = decode_all(&[r#"{"error":{"message":"upstream overloaded"}}"#]).unwrap_err();
        assert_eq!(
            error,
            ProviderError::Server { status: 500, retry_after: None, message: "upstream overloaded".into() }
        );
    }

    #[test]
    fn the_request_carries_system_history_tools_and_usage_option() {
        let request = ModelRequest {
            model: "gpt-test".into(),
            system: "be brief".into(),
            messages: vec![
                ChatMessage::user("time?"),
                ChatMessage::Assistant {
                    text: String::new(),
                    tool_calls: vec![ToolCall { id: "c1".into(), name: "current_time".into(), arguments: "{}".into() }],
                    thinking: Vec::new(),
                },
                ChatMessage::tool_result("c1", "current_time", "noon", false),
            ],
            tools: vec![ToolSpec {
                name: "current_time".into(),
                description: "d".into(),
                parameters: std::sync::Arc::new(json!({"type":"object"})),
            }],
            max_output_tokens: None,
            thinking: Default::default(),
            vision: false,
        };
        let body = request_body(&request);
        assert_eq!(body["messages"][0], json!({"role":"system","content":"be brief"}));
        assert_eq!(body["messages"][2]["content"], Value::Null);
        assert_eq!(body["messages"][2]["tool_calls"][0]["function"]["name"], "current_time");
        assert_eq!(body["messages"][3], json!({"role":"tool","tool_call_id":"c1","content":"noon"}));
        assert_eq!(body["tools"][0]["function"]["parameters"], json!({"type":"object"}));
        assert_eq!(body["stream_options"]["include_usage"], true);
        assert!(body.get("max_tokens").is_none());
    }

    #[test]
    fn with_image_input_a_users_photo_is_an_image_url_part_and_older_ones_are_notes() {
        let body = request_body(&super::super::with_user_photos(true));
        assert_eq!(
            body["messages"][0]["content"],
            "old one\n[photo 800×600 not shown: only the latest images are shown again]"
        );
        // No caption: no empty text part.
        assert_eq!(
            body["messages"][2]["content"],
            json!([{ "type": "image_url", "image_url": { "url": "data:image/jpeg;base64,/9j/4A==" } }])
        );
    }

    #[test]
    fn without_image_input_a_users_photo_is_a_note() {
        let body = request_body(&super::super::with_user_photos(false));
        assert_eq!(body["messages"][2]["content"], "[photo 1568×1045 not shown: this model has no image input]");
        assert_eq!(body["messages"][0]["content"], "old one\n[photo 800×600 not shown: this model has no image input]");
    }

    /// Two parallel calls, the first returning an image, the second two; then a steering
    /// message.
    fn with_tool_images(vision: bool) -> ModelRequest {
        let image =
            |width, height| ImagePart { media_type: "image/jpeg".into(), data: "/9j/4A==".into(), width, height };
        let call = |id: &str, name: &str| ToolCall { id: id.into(), name: name.into(), arguments: "{}".into() };
        ModelRequest {
            model: "gpt-test".into(),
            system: String::new(),
            messages: vec![
                ChatMessage::user("look"),
                ChatMessage::assistant("", vec![call("c1", "read"), call("c2", "screenshot")]),
                ChatMessage::ToolResult {
                    call_id: "c1".into(),
                    name: "read".into(),
                    content: "a.jpg".into(),
                    is_error: false,
                    images: vec![image(1280, 960)],
                },
                ChatMessage::ToolResult {
                    call_id: "c2".into(),
                    name: "screenshot".into(),
                    content: String::new(),
                    is_error: false,
                    images: vec![image(1568, 980), image(300, 200)],
                },
                ChatMessage::user("and this?"),
            ],
            tools: vec![],
            max_output_tokens: None,
            thinking: Default::default(),
            vision,
        }
    }

    #[test]
    fn with_image_input_tool_images_follow_the_last_tool_message_in_one_user_message() {
        let body = request_body(&with_tool_images(true));
        let messages = body["messages"].as_array().unwrap();
        let roles: Vec<_> = messages.iter().map(|m| m["role"].as_str().unwrap()).collect();
        assert_eq!(roles, ["user", "assistant", "tool", "tool", "user", "user"]);
        assert_eq!(messages[2], json!({"role":"tool","tool_call_id":"c1","content":"a.jpg"}));
        assert_eq!(messages[3], json!({"role":"tool","tool_call_id":"c2","content":""}));
        let url = json!({ "type": "image_url", "image_url": { "url": "data:image/jpeg;base64,/9j/4A==" } });
        assert_eq!(
            messages[4]["content"],
            json!([
                { "type": "text", "text": "Images returned by tool read (call c1):" },
                url,
                { "type": "text", "text": "Images returned by tool screenshot (call c2):" },
                url,
                url,
            ])
        );
        assert_eq!(messages[5]["content"], "and this?");
    }

    #[test]
    fn without_image_input_each_image_becomes_a_line_of_its_tool_message() {
        let body = request_body(&with_tool_images(false));
        let messages = body["messages"].as_array().unwrap();
        assert_eq!(messages.len(), 5, "no extra user message");
        assert_eq!(messages[2]["content"], "a.jpg\n[image 1280×960 not shown: this model has no image input]");
        assert_eq!(
            messages[3]["content"],
            "[image 1568×980 not shown: this model has no image input]\n\
             [image 300×200 not shown: this model has no image input]"
        );
        assert!(!body.to_string().contains("base64"));
    }
}
