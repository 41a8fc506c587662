//! A fake OpenAI-compatible Chat Completions server (`POST /v1/chat/completions`).
//!
//! It speaks the wire format Ferry's OpenAI-compatible client must handle in production:
//! `chat.completion.chunk` events over SSE ending with `data: [DONE]`, tool calls whose
//! arguments arrive in pieces keyed by `index`, the usage-only chunk with empty `choices` that
//! `stream_options.include_usage` asks for, and errors shaped
//! `{"error":{"message","type","param","code"}}`. Reasoning is streamed as
//! `delta.reasoning_content`, the convention of DeepSeek, vLLM and most compatible servers.
//!
//! It also answers `POST /v1/audio/transcriptions` (see `transcription.rs` for what it
//! checks), behind the same keys.

use std::io;
use std::sync::Arc;

use axum::Router;
use axum::http::{HeaderMap, StatusCode};
use axum::response::Response;
use axum::routing::post;
use serde_json::{Map, Value, json};

use crate::images::{FoundImage, IMAGE_BASE64_LIMIT, ImageProblem, check, find_images, is_known_media_type};
use crate::keys::{Fault, KeyBehaviour};
use crate::model_script::{HttpError, Reply, StopReason, Turn};
use crate::model_server::{
    Dialect, ModelFake, Rejection, Shared, TurnContext, header_str, json_response, model_fake_methods, with_retry_after,
};
use crate::recorded::RecordedRequest;
use crate::sse::{Event, EventKind};
use crate::transcription::{self, TranscriptionRequest, Transcriptions};

/// A running fake OpenAI-compatible server; dropping it stops the server.
///
/// ```no_run
/// # async fn demo() -> std::io::Result<()> {
/// use ferry_fakes::{FakeOpenAi, Turn};
/// let openai = FakeOpenAi::start().await?.with_api_key("sk-test");
/// openai.push(Turn::text(["Hel", "lo"])).push(Turn::rate_limited(2));
/// // Point the client at `openai.url()`, run the agent, then inspect `openai.requests()`.
/// # Ok(()) }
/// ```
pub struct FakeOpenAi {
    inner: ModelFake<OpenAiDialect>,
}

impl FakeOpenAi {
    /// Starts the server on a free loopback port, with an empty script and no API key.
    pub async fn start() -> io::Result<Self> {
        Ok(Self { inner: ModelFake::start().await? })
    }

    /// Requires `Authorization: Bearer <key>` on every request from now on; others get a 401.
    /// The same as [`FakeOpenAi::with_key`] with [`KeyBehaviour::Healthy`], so it combines with
    /// keys registered that way.
    pub fn with_api_key(self, key: impl Into<String>) -> Self {
        self.with_key(key, KeyBehaviour::Healthy)
    }

    /// Registers `key` (sent as `Authorization: Bearer <key>`) with this behaviour. From then on
    /// a request with a missing or unregistered key gets OpenAI's 401 `invalid_api_key`; a
    /// faulty key gets its fault without consuming a scripted turn. See [`KeyBehaviour`].
    pub fn with_key(self, key: impl Into<String>, behaviour: KeyBehaviour) -> Self {
        self.set_key(key, behaviour);
        self
    }

    model_fake_methods!();

    /// Sets the text every later transcription answers with, instead of the default that
    /// names the file and its size ([`DEFAULT_TRANSCRIPT`](crate::DEFAULT_TRANSCRIPT)).
    pub fn set_transcript(&self, text: impl Into<String>) {
        self.inner.provider_state().set_transcript(Some(text.into()));
    }

    /// Goes back to the default transcript.
    pub fn clear_transcript(&self) {
        self.inner.provider_state().set_transcript(None);
    }

    /// Queues an error for the next transcription request that passes the checks (the chat
    /// route's script is separate), e.g. `HttpError::new(429, "…").retry_after(2)`.
    pub fn push_transcription_error(&self, error: HttpError) -> &Self {
        self.inner.provider_state().push_error(error);
        self
    }

    /// Every `/audio/transcriptions` request so far, in arrival order, rejected ones included.
    pub fn transcriptions(&self) -> Vec<TranscriptionRequest> {
        self.inner.provider_state().requests()
    }

    /// The base URL including `/v1`, as OpenAI clients expect (`https://api.openai.com/v1`).
    /// `/chat/completions` is answered with and without the `/v1` prefix.
    pub fn url(&self) -> String {
        format!("{}/v1", self.inner.server().url())
    }
}

/// The OpenAI Chat Completions wire format.
pub(crate) struct OpenAiDialect;

/// OpenAI's error object, which carries `param` and `code` besides the message and type.
fn error_json(message: &str, error_type: &str, param: Option<&str>, code: Option<&str>) -> Value {
    json!({ "error": { "message": message, "type": error_type, "param": param, "code": code } })
}

/// `sk-abc...wxyz`-style masking, as OpenAI echoes a wrong key without revealing it.
fn mask_key(key: &str) -> String {
    let chars: Vec<char> = key.chars().collect();
    if chars.len() <= 8 {
        return "*".repeat(chars.len());
    }
    let head: String = chars[..3].iter().collect();
    let tail: String = chars[chars.len() - 4..].iter().collect();
    format!("{head}{}{tail}", "*".repeat(chars.len() - 7))
}

fn finish_reason(reason: StopReason) -> &'static str {
    match reason {
        StopReason::EndTurn => "stop",
        StopReason::ToolUse => "tool_calls",
        StopReason::MaxTokens => "length",
    }
}

fn usage_json(reply: &Reply) -> Value {
    let usage = reply.usage();
    json!({
        "prompt_tokens": usage.input_tokens,
        "completion_tokens": usage.output_tokens,
        "total_tokens": usage.input_tokens.saturating_add(usage.output_tokens),
    })
}

fn completion_id(context: &TurnContext<'_>) -> String {
    format!("chatcmpl-fake{}", context.index + 1)
}

fn wants_usage(context: &TurnContext<'_>) -> bool {
    context
        .request
        .get("stream_options")
        .and_then(|options| options.get("include_usage"))
        .and_then(Value::as_bool)
        .unwrap_or(false)
}

/// Builds `data: {chunk}` events that share the id, timestamp and model of one completion.
struct ChunkWriter<'a> {
    context: &'a TurnContext<'a>,
    include_usage: bool,
}

impl ChunkWriter<'_> {
    fn chunk(&self, choices: Value, usage: Option<Value>) -> String {
        let mut chunk = Map::new();
        chunk.insert("id".into(), completion_id(self.context).into());
        chunk.insert("object".into(), "chat.completion.chunk".into());
        chunk.insert("created".into(), self.context.created.into());
        chunk.insert("model".into(), self.context.model().into());
        chunk.insert("choices".into(), choices);
        // With include_usage every chunk carries `"usage": null` except the final one.
        if self.include_usage {
            chunk.insert("usage".into(), usage.unwrap_or(Value::Null));
        }
        format!("data: {}\n\n", Value::Object(chunk))
    }

    fn delta(&self, kind: EventKind, delta: Value, finish_reason: Option<&str>) -> Event {
        let choices = json!([{ "index": 0, "delta": delta, "logprobs": null, "finish_reason": finish_reason }]);
        Event::new(kind, self.chunk(choices, None))
    }
}

impl Dialect for OpenAiDialect {
    const NAME: &'static str = "fake OpenAI";
    const PATHS: &'static [&'static str] = &["/v1/chat/completions", "/chat/completions"];

    type State = Transcriptions;

    fn new_state() -> io::Result<Transcriptions> {
        Ok(Transcriptions::default())
    }

    fn more_routes(router: Router<Arc<Shared<Self>>>) -> Router<Arc<Shared<Self>>> {
        router
            .route("/v1/audio/transcriptions", post(transcription::handle))
            .route("/audio/transcriptions", post(transcription::handle))
    }

    fn error_body(status: StatusCode, error_type: Option<&str>, message: &str) -> Value {
        if let Some(error_type) = error_type {
            return error_json(message, error_type, None, Some(error_type));
        }
        let (error_type, code) = match status.as_u16() {
            401 => ("invalid_request_error", Some("invalid_api_key")),
            429 => ("requests", Some("rate_limit_exceeded")),
            500.. => ("server_error", None),
            _ => ("invalid_request_error", None),
        };
        error_json(message, error_type, None, code)
    }

    fn presented_key(headers: &HeaderMap) -> Option<&str> {
        header_str(headers, "authorization").and_then(|value| value.strip_prefix("Bearer "))
    }

    fn unauthorized(headers: &HeaderMap) -> Rejection {
        let body = match Self::presented_key(headers) {
            Some(given) => error_json(
                &format!(
                    "Incorrect API key provided: {}. You can find your API key at https://platform.openai.com/account/api-keys.",
                    mask_key(given)
                ),
                "invalid_request_error",
                None,
                Some("invalid_api_key"),
            ),
            None => error_json(
                "You didn't provide an API key. You need to provide your API key in an Authorization header \
                 using Bearer auth (i.e. Authorization: Bearer YOUR_KEY).",
                "invalid_request_error",
                None,
                None,
            ),
        };
        Rejection::new(StatusCode::UNAUTHORIZED, body)
    }

    fn key_fault(fault: Fault, model: &str) -> Response {
        key_fault(fault, model)
    }

    fn check_body(_state: &Transcriptions, _headers: &HeaderMap, body: &Map<String, Value>) -> Result<(), Rejection> {
        if !body.get("model").is_some_and(Value::is_string) {
            let error = error_json("you must provide a model parameter", "invalid_request_error", None, None);
            return Err(Rejection::new(StatusCode::BAD_REQUEST, error));
        }
        let Some(messages) = body.get("messages").and_then(Value::as_array) else {
            let error = error_json(
                "Missing required parameter: 'messages'.",
                "invalid_request_error",
                Some("messages"),
                Some("missing_required_parameter"),
            );
            return Err(Rejection::new(StatusCode::BAD_REQUEST, error));
        };
        check_tool_order(messages)?;
        check_images(messages)
    }

    fn context_overflow() -> Response {
        let error = error_json(
            "This model's maximum context length is 128000 tokens. However, your messages resulted in 131072 \
             tokens. Please reduce the length of the messages.",
            "invalid_request_error",
            Some("messages"),
            Some("context_length_exceeded"),
        );
        json_response(StatusCode::BAD_REQUEST, error)
    }

    fn stream_events(_state: &Transcriptions, reply: &Reply, context: &TurnContext<'_>) -> Vec<Event> {
        let include_usage = wants_usage(context);
        let writer = ChunkWriter { context, include_usage };
        let mut events = vec![writer.delta(EventKind::Framing, json!({ "role": "assistant", "content": "" }), None)];
        for piece in reply.thinking() {
            events.push(writer.delta(EventKind::Delta, json!({ "reasoning_content": piece }), None));
        }
        for piece in reply.text_pieces() {
            events.push(writer.delta(EventKind::Delta, json!({ "content": piece }), None));
        }
        for (index, call) in reply.calls().iter().enumerate() {
            let start = json!({ "tool_calls": [{
                "index": index,
                "id": call.id(),
                "type": "function",
                "function": { "name": call.name(), "arguments": "" },
            }]});
            events.push(writer.delta(EventKind::Framing, start, None));
            for piece in call.pieces() {
                let delta = json!({ "tool_calls": [{ "index": index, "function": { "arguments": piece } }] });
                events.push(writer.delta(EventKind::Delta, delta, None));
            }
        }
        events.push(writer.delta(EventKind::Finish, json!({}), Some(finish_reason(reply.stop_reason()))));
        if include_usage {
            events.push(Event::new(EventKind::Finish, writer.chunk(json!([]), Some(usage_json(reply)))));
        }
        events.push(Event::new(EventKind::Finish, "data: [DONE]\n\n".to_owned()));
        events
    }

    fn complete(_state: &Transcriptions, reply: &Reply, context: &TurnContext<'_>) -> Value {
        let mut message = Map::new();
        message.insert("role".into(), "assistant".into());
        let text = reply.full_text();
        let content = if text.is_empty() && !reply.calls().is_empty() { Value::Null } else { text.into() };
        message.insert("content".into(), content);
        if !reply.thinking().is_empty() {
            message.insert("reasoning_content".into(), reply.full_thinking().into());
        }
        if !reply.calls().is_empty() {
            let calls = reply
                .calls()
                .iter()
                .map(|call| {
                    json!({
                        "id": call.id(),
                        "type": "function",
                        "function": { "name": call.name(), "arguments": call.arguments() },
                    })
                })
                .collect();
            message.insert("tool_calls".into(), Value::Array(calls));
        }
        json!({
            "id": completion_id(context),
            "object": "chat.completion",
            "created": context.created,
            "model": context.model(),
            "choices": [{
                "index": 0,
                "message": message,
                "logprobs": null,
                "finish_reason": finish_reason(reply.stop_reason()),
            }],
            "usage": usage_json(reply),
        })
    }

    /// Nothing: an OpenAI-compatible server sends its first chunk (the role) only once the
    /// model produces output, so a hung upstream shows as headers and silence.
    fn stall_events(_context: &TurnContext<'_>) -> Vec<Event> {
        Vec::new()
    }
}

/// A `tool` message must follow the assistant's `tool_calls` or another `tool` message: the
/// API refuses anything in between (such as a user message carrying images).
fn check_tool_order(messages: &[Value]) -> Result<(), Rejection> {
    let role = |message: &Value| message.get("role").and_then(Value::as_str).unwrap_or_default().to_owned();
    for (index, message) in messages.iter().enumerate().skip(1) {
        if role(message) != "tool" {
            continue;
        }
        let previous = &messages[index - 1];
        let calls = previous.get("tool_calls").and_then(Value::as_array).is_some_and(|calls| !calls.is_empty());
        if role(previous) == "tool" || (role(previous) == "assistant" && calls) {
            continue;
        }
        let error = error_json(
            "Invalid parameter: messages with role 'tool' must be a response to a preceeding message with \
             'tool_calls'.",
            "invalid_request_error",
            Some(&format!("messages.[{index}].role")),
            None,
        );
        return Err(Rejection::new(StatusCode::BAD_REQUEST, error));
    }
    Ok(())
}

/// Refuses an image part the API would refuse (see [`crate::images`]): an image URL outside a
/// `user` message, a malformed data URL, bytes that are no PNG, JPEG, WebP or GIF, or (the
/// fake holding clients to Ferry's promise) more than 5 MB of base64.
fn check_images(messages: &[Value]) -> Result<(), Rejection> {
    for image in find_images(messages) {
        let param = openai_param(&image);
        let invalid = |message: String, code: &str| {
            let error = error_json(&message, "invalid_request_error", Some(&param), Some(code));
            Err(Rejection::new(StatusCode::BAD_REQUEST, error))
        };
        if image.role != "user" {
            return invalid(
                format!(
                    "Invalid 'messages[{}]'. Image URLs are only allowed for messages with role 'user', but this \
                     message with role '{}' contains an image URL.",
                    image.message, image.role
                ),
                "invalid_value",
            );
        }
        let problem = if image.data.is_some() && !is_known_media_type(image.media_type) {
            Some(ImageProblem::NotAnImage)
        } else {
            check(&image, false, u32::MAX).err()
        };
        match problem {
            None => {}
            Some(ImageProblem::Malformed | ImageProblem::InvalidBase64) => {
                return invalid(
                    format!(
                        "Invalid '{param}.image_url.url'. Expected a base64-encoded data URL with an image MIME type \
                         (e.g. 'data:image/png;base64,aW1nIGJ5dGVzIGhlcmU='), but got an invalid value."
                    ),
                    "invalid_value",
                );
            }
            Some(ImageProblem::TooLarge { base64_len }) => {
                return invalid(
                    format!("Invalid image: {base64_len} bytes of base64, over the {IMAGE_BASE64_LIMIT}-byte limit."),
                    "image_too_large",
                );
            }
            Some(_) => {
                return invalid(
                    "You uploaded an unsupported image. Please make sure your image has of one the following \
                     formats: ['png', 'jpeg', 'gif', 'webp']."
                        .to_owned(),
                    "invalid_image_format",
                );
            }
        }
    }
    Ok(())
}

/// `messages.2.content.1` as OpenAI names it in errors: `messages[2].content[1]`.
fn openai_param(image: &FoundImage<'_>) -> String {
    let mut param = String::new();
    for part in image.path.split('.') {
        if part.chars().all(|c| c.is_ascii_digit()) {
            param.push_str(&format!("[{part}]"));
        } else {
            if !param.is_empty() {
                param.push('.');
            }
            param.push_str(part);
        }
    }
    param
}

/// A faulty key's answer as OpenAI sends it.
fn key_fault(fault: Fault, model: &str) -> Response {
    match fault {
        Fault::RateLimited { retry_after_secs } => {
            let message = format!(
                "Rate limit reached for {model} in organization org-fake on requests per min (RPM): Limit 3, Used 3, \
                 Requested 1. Please try again in {retry_after_secs}s. Visit \
                 https://platform.openai.com/account/rate-limits to learn more."
            );
            let body = error_json(&message, "requests", None, Some("rate_limit_exceeded"));
            with_retry_after(json_response(StatusCode::TOO_MANY_REQUESTS, body), retry_after_secs)
        }
        // Really a 429, told apart from a rate limit only by its type and code.
        Fault::Billing => json_response(
            StatusCode::TOO_MANY_REQUESTS,
            error_json(
                "You exceeded your current quota, please check your plan and billing details. For more information \
                 on this error, read the docs: https://platform.openai.com/docs/guides/error-codes/api-errors.",
                "insufficient_quota",
                None,
                Some("insufficient_quota"),
            ),
        ),
        Fault::Overloaded => json_response(
            StatusCode::SERVICE_UNAVAILABLE,
            error_json("The server is overloaded or not ready yet.", "server_error", None, None),
        ),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn masks_all_but_the_ends_of_a_key() {
        assert_eq!(mask_key("sk-wrong-key-1234"), "sk-**********1234");
        assert_eq!(mask_key("short"), "*****");
    }

    #[test]
    fn status_picks_the_error_type_and_code() {
        let body = OpenAiDialect::error_body(StatusCode::TOO_MANY_REQUESTS, None, "slow down");
        assert_eq!(body["error"]["type"], "requests");
        assert_eq!(body["error"]["code"], "rate_limit_exceeded");
        let body = OpenAiDialect::error_body(StatusCode::SERVICE_UNAVAILABLE, None, "down");
        assert_eq!(body["error"]["type"], "server_error");
        assert!(body["error"]["code"].is_null());
        let body = OpenAiDialect::error_body(StatusCode::TOO_MANY_REQUESTS, Some("insufficient_quota"), "pay");
        assert_eq!(body["error"]["type"], "insufficient_quota");
        assert_eq!(body["error"]["code"], "insufficient_quota");
    }
}
