//! A fake Anthropic Messages server (`POST /v1/messages`).
//!
//! It speaks the wire format Ferry's Anthropic client must handle in production: named SSE
//! events (`message_start`, `content_block_start` / `_delta` / `_stop`, `message_delta`,
//! `message_stop`, `ping`), `thinking` blocks with a closing `signature_delta`, opaque
//! `redacted_thinking` blocks, `tool_use` blocks whose input arrives as `input_json_delta`
//! pieces, the `x-api-key` and `anthropic-version` headers, and errors shaped
//! `{"type":"error","error":{"type","message"}}`. Extended thinking is validated strictly, as
//! the real API does it; see [`thinking`].

mod thinking;

use std::io;
use std::sync::Arc;

use axum::http::{HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use serde_json::{Map, Value, json};

use self::thinking::ThinkingLedger;
use crate::images::{
    ANTHROPIC_MAX_SIDE, FoundImage, IMAGE_BASE64_LIMIT, ImageProblem, check, find_images, is_known_media_type,
};
use crate::keys::{Fault, KeyBehaviour};
use crate::model_script::{Reply, StopReason, Turn, Usage};
use crate::model_server::{
    Dialect, ModelFake, Rejection, TurnContext, header_str, json_response, model_fake_methods, with_retry_after,
};
use crate::recorded::RecordedRequest;
use crate::sse::{Event, EventKind};

/// A running fake Anthropic Messages server; dropping it stops the server.
///
/// ```no_run
/// # async fn demo() -> std::io::Result<()> {
/// use ferry_fakes::{FakeAnthropic, Reply, ToolCall, Turn};
/// let anthropic = FakeAnthropic::start().await?.with_api_key("sk-ant-test");
/// let call = ToolCall::new("toolu_1", "read_file", r#"{"path":"a.txt"}"#).split_at([5]);
/// anthropic.push(Reply::tool_calls([call]).with_text(["Reading it."])).push(Turn::text(["Done."]));
/// # Ok(()) }
/// ```
pub struct FakeAnthropic {
    inner: ModelFake<AnthropicDialect>,
}

impl FakeAnthropic {
    /// Starts the server on a free loopback port, with an empty script and no API key.
    pub async fn start() -> io::Result<Self> {
        Ok(Self { inner: ModelFake::start().await? })
    }

    /// Requires `x-api-key: <key>` on every request from now on; others get a 401. The same as
    /// [`FakeAnthropic::with_key`] with [`KeyBehaviour::Healthy`], so it combines with keys
    /// registered that way.
    pub fn with_api_key(self, key: impl Into<String>) -> Self {
        self.with_key(key, KeyBehaviour::Healthy)
    }

    /// Registers `key` (sent as `x-api-key: <key>`) with this behaviour. From then on a request
    /// with a missing or unregistered key gets Anthropic's 401 `authentication_error`; a faulty
    /// key gets its fault without consuming a scripted turn. See [`KeyBehaviour`].
    pub fn with_key(self, key: impl Into<String>, behaviour: KeyBehaviour) -> Self {
        self.set_key(key, behaviour);
        self
    }

    model_fake_methods!();

    /// The `signature` this fake issues for a thinking block whose full text is `thinking`,
    /// and accepts back when thinking is enabled: a test can build a valid history by hand.
    /// Signatures differ between fakes, as they are keyed by a secret drawn at start.
    pub fn sign_thinking(&self, thinking: &str) -> String {
        self.inner.provider_state().sign(thinking)
    }

    /// The base URL without `/v1`, as Anthropic clients expect (`https://api.anthropic.com`).
    /// `/messages` is answered with and without the `/v1` prefix, so appending `/v1` also works.
    pub fn url(&self) -> String {
        self.inner.server().url()
    }
}

/// The Anthropic Messages wire format.
pub(crate) struct AnthropicDialect;

/// Anthropic's own status for `overloaded_error`; not a registered HTTP status.
const OVERLOADED: StatusCode = match StatusCode::from_u16(529) {
    Ok(status) => status,
    Err(_) => StatusCode::SERVICE_UNAVAILABLE,
};

fn error_json(error_type: &str, message: &str) -> Value {
    json!({ "type": "error", "error": { "type": error_type, "message": message } })
}

/// A 400 `invalid_request_error`, the API's answer to any request it will not run.
fn invalid_request(message: &str) -> Rejection {
    Rejection::new(StatusCode::BAD_REQUEST, error_json("invalid_request_error", message))
}

fn stop_reason(reason: StopReason) -> &'static str {
    match reason {
        StopReason::EndTurn => "end_turn",
        StopReason::ToolUse => "tool_use",
        StopReason::MaxTokens => "max_tokens",
    }
}

fn message_id(context: &TurnContext<'_>) -> String {
    format!("msg_fake{}", context.index + 1)
}

/// A tool call's input as a JSON value; scripted invalid JSON is kept as a string so a
/// non-streaming answer still shows what the script said.
fn tool_input(arguments: &str) -> Value {
    if arguments.is_empty() {
        return json!({});
    }
    serde_json::from_str(arguments).unwrap_or_else(|_| Value::String(arguments.to_owned()))
}

fn event(kind: EventKind, name: &str, data: Value) -> Event {
    Event::new(kind, format!("event: {name}\ndata: {data}\n\n"))
}

/// Appends one content block's start, deltas and stop; `ping` follows the first block start,
/// where the real API sends it.
struct BlockWriter {
    events: Vec<Event>,
    next_index: usize,
}

impl BlockWriter {
    fn block(&mut self, start: Value, deltas: impl IntoIterator<Item = (EventKind, Value)>) {
        let index = self.next_index;
        self.next_index += 1;
        self.events.push(event(
            EventKind::Framing,
            "content_block_start",
            json!({ "type": "content_block_start", "index": index, "content_block": start }),
        ));
        if index == 0 {
            self.events.push(event(EventKind::Framing, "ping", json!({ "type": "ping" })));
        }
        for (kind, delta) in deltas {
            self.events.push(event(
                kind,
                "content_block_delta",
                json!({ "type": "content_block_delta", "index": index, "delta": delta }),
            ));
        }
        self.events.push(event(
            EventKind::Framing,
            "content_block_stop",
            json!({ "type": "content_block_stop", "index": index }),
        ));
    }
}

impl Dialect for AnthropicDialect {
    const NAME: &'static str = "fake Anthropic";
    const PATHS: &'static [&'static str] = &["/v1/messages", "/messages"];

    type State = ThinkingLedger;

    fn new_state() -> io::Result<ThinkingLedger> {
        ThinkingLedger::new()
    }

    fn error_body(status: StatusCode, error_type: Option<&str>, message: &str) -> Value {
        let default_type = match status.as_u16() {
            400 => "invalid_request_error",
            401 => "authentication_error",
            403 => "permission_error",
            404 => "not_found_error",
            413 => "request_too_large",
            429 => "rate_limit_error",
            529 => "overloaded_error",
            500.. => "api_error",
            _ => "invalid_request_error",
        };
        error_json(error_type.unwrap_or(default_type), message)
    }

    fn presented_key(headers: &HeaderMap) -> Option<&str> {
        header_str(headers, "x-api-key")
    }

    fn unauthorized(headers: &HeaderMap) -> Rejection {
        let message = match Self::presented_key(headers) {
            Some(_) => "invalid x-api-key",
            None => "x-api-key header is required",
        };
        Rejection::new(StatusCode::UNAUTHORIZED, error_json("authentication_error", message))
    }

    fn key_fault(fault: Fault, _model: &str) -> Response {
        key_fault(fault)
    }

    fn check_headers(headers: &HeaderMap) -> Result<(), Rejection> {
        if header_str(headers, "anthropic-version").is_none() {
            return Err(invalid_request("anthropic-version: header is required"));
        }
        Ok(())
    }

    fn check_body(ledger: &ThinkingLedger, headers: &HeaderMap, body: &Map<String, Value>) -> Result<(), Rejection> {
        if !body.get("model").is_some_and(Value::is_string) {
            return Err(invalid_request("model: Field required"));
        }
        if !body.get("max_tokens").is_some_and(Value::is_u64) {
            return Err(invalid_request("max_tokens: Field required"));
        }
        let Some(messages) = body.get("messages").and_then(Value::as_array) else {
            return Err(invalid_request("messages: Field required"));
        };
        check_tool_result_blocks(messages)?;
        check_images(messages)?;
        ledger.check(headers, body)
    }

    fn context_overflow() -> Response {
        invalid_request("prompt is too long: 210000 tokens > 200000 maximum").into_response()
    }

    fn stream_events(ledger: &ThinkingLedger, reply: &Reply, context: &TurnContext<'_>) -> Vec<Event> {
        let usage = reply.usage();
        let mut writer = BlockWriter { events: vec![message_start(context, usage)], next_index: 0 };

        for data in reply.redacted_thinking() {
            ledger.issue_redacted(data);
            writer.block(json!({ "type": "redacted_thinking", "data": data }), []);
        }
        if !reply.thinking().is_empty() {
            let signature = ledger.sign(&reply.full_thinking());
            let deltas = reply
                .thinking()
                .iter()
                .map(|piece| (EventKind::Delta, json!({ "type": "thinking_delta", "thinking": piece })))
                .chain([(EventKind::Framing, json!({ "type": "signature_delta", "signature": signature }))]);
            writer.block(json!({ "type": "thinking", "thinking": "" }), deltas);
        }
        if !reply.text_pieces().is_empty() {
            let deltas = reply
                .text_pieces()
                .iter()
                .map(|piece| (EventKind::Delta, json!({ "type": "text_delta", "text": piece })));
            writer.block(json!({ "type": "text", "text": "" }), deltas);
        }
        for call in reply.calls() {
            let deltas = call
                .pieces()
                .into_iter()
                .map(|piece| (EventKind::Delta, json!({ "type": "input_json_delta", "partial_json": piece })));
            writer.block(json!({ "type": "tool_use", "id": call.id(), "name": call.name(), "input": {} }), deltas);
        }

        let mut events = writer.events;
        if writer.next_index == 0 {
            events.push(event(EventKind::Framing, "ping", json!({ "type": "ping" })));
        }
        let delta = json!({
            "type": "message_delta",
            "delta": { "stop_reason": stop_reason(reply.stop_reason()), "stop_sequence": null },
            "usage": { "output_tokens": usage.output_tokens },
        });
        events.push(event(EventKind::Finish, "message_delta", delta));
        events.push(event(EventKind::Finish, "message_stop", json!({ "type": "message_stop" })));
        events
    }

    fn complete(ledger: &ThinkingLedger, reply: &Reply, context: &TurnContext<'_>) -> Value {
        let mut content = Vec::new();
        for data in reply.redacted_thinking() {
            ledger.issue_redacted(data);
            content.push(json!({ "type": "redacted_thinking", "data": data }));
        }
        if !reply.thinking().is_empty() {
            let thinking = reply.full_thinking();
            let signature = ledger.sign(&thinking);
            content.push(json!({ "type": "thinking", "thinking": thinking, "signature": signature }));
        }
        if !reply.text_pieces().is_empty() {
            content.push(json!({ "type": "text", "text": reply.full_text() }));
        }
        for call in reply.calls() {
            content.push(json!({
                "type": "tool_use",
                "id": call.id(),
                "name": call.name(),
                "input": tool_input(call.arguments()),
            }));
        }
        let usage = reply.usage();
        json!({
            "id": message_id(context),
            "type": "message",
            "role": "assistant",
            "model": context.model(),
            "content": content,
            "stop_reason": stop_reason(reply.stop_reason()),
            "stop_sequence": null,
            "usage": { "input_tokens": usage.input_tokens, "output_tokens": usage.output_tokens },
        })
    }

    fn stall_events(context: &TurnContext<'_>) -> Vec<Event> {
        vec![message_start(context, Usage::default())]
    }
}

/// A `tool_result` whose content is an array may hold only non-empty `text` blocks and
/// `image` blocks, as the API requires.
fn check_tool_result_blocks(messages: &[Value]) -> Result<(), Rejection> {
    for (index, message) in messages.iter().enumerate() {
        let Some(blocks) = message.get("content").and_then(Value::as_array) else { continue };
        for (position, block) in blocks.iter().enumerate() {
            if block.get("type").and_then(Value::as_str) != Some("tool_result") {
                continue;
            }
            let Some(inner) = block.get("content").and_then(Value::as_array) else { continue };
            for (part, content) in inner.iter().enumerate() {
                let path = format!("messages.{index}.content.{position}.content.{part}");
                match content.get("type").and_then(Value::as_str) {
                    Some("image") => {}
                    Some("text") if content.get("text").and_then(Value::as_str).is_some_and(|t| !t.is_empty()) => {}
                    Some("text") => return Err(invalid_request("messages: text content blocks must be non-empty")),
                    _ => return Err(invalid_request(&format!("{path}.type: Input should be 'text' or 'image'"))),
                }
            }
        }
    }
    Ok(())
}

/// Refuses an image the API would refuse, with its error text (see [`crate::images`]).
fn check_images(messages: &[Value]) -> Result<(), Rejection> {
    for image in find_images(messages) {
        if image.data.is_some() && !is_known_media_type(image.media_type) {
            return Err(invalid_request(&format!(
                "{}.source.media_type: Input should be 'image/jpeg', 'image/png', 'image/gif' or 'image/webp'",
                image.path
            )));
        }
        if let Err(problem) = check(&image, true, ANTHROPIC_MAX_SIDE) {
            return Err(invalid_request(&image_error(&image, problem)));
        }
    }
    Ok(())
}

fn image_error(image: &FoundImage<'_>, problem: ImageProblem) -> String {
    let path = &image.path;
    match problem {
        ImageProblem::Malformed => {
            format!("{path}.source: expected {{\"type\": \"base64\", \"media_type\": …, \"data\": …}}")
        }
        ImageProblem::InvalidBase64 => format!("{path}.source.base64: invalid base64 data"),
        ImageProblem::TooLarge { base64_len } => {
            format!("{path}.source.base64: image exceeds 5 MB maximum: {base64_len} bytes > {IMAGE_BASE64_LIMIT} bytes")
        }
        ImageProblem::NotAnImage => format!("{path}.source.base64: Could not process image"),
        ImageProblem::WrongMediaType { .. } => {
            format!("{path}.source.base64: Image does not match the provided media type {}", image.media_type)
        }
        ImageProblem::TooManyPixels => format!(
            "{path}.source.base64.data: At least one of the image dimensions exceed max allowed size: \
             {ANTHROPIC_MAX_SIDE} pixels"
        ),
    }
}

/// The first event of every stream, sent as soon as the request is accepted.
fn message_start(context: &TurnContext<'_>, usage: Usage) -> Event {
    let start = json!({
        "type": "message_start",
        "message": {
            "id": message_id(context),
            "type": "message",
            "role": "assistant",
            "model": context.model(),
            "content": [],
            "stop_reason": null,
            "stop_sequence": null,
            "usage": {
                "input_tokens": usage.input_tokens,
                "cache_creation_input_tokens": 0,
                "cache_read_input_tokens": 0,
                "output_tokens": 1,
            },
        },
    });
    event(EventKind::Framing, "message_start", start)
}

/// A faulty key's answer as Anthropic sends it.
fn key_fault(fault: Fault) -> Response {
    match fault {
        Fault::RateLimited { retry_after_secs } => {
            let message = "This request would exceed the rate limit for your organization (org-fake) of 50 requests \
                           per minute. For details, refer to: https://docs.claude.com/en/api/rate-limits. You can see \
                           the response headers for current usage. Please reduce the prompt length or the maximum \
                           tokens requested, or try again later.";
            let response = json_response(StatusCode::TOO_MANY_REQUESTS, error_json("rate_limit_error", message));
            with_retry_after(response, retry_after_secs)
        }
        Fault::Billing => json_response(
            StatusCode::PAYMENT_REQUIRED,
            error_json(
                "billing_error",
                "Your credit balance is too low to access the Anthropic API. Please go to Plans & Billing to \
                 upgrade or purchase credits.",
            ),
        ),
        Fault::Overloaded => json_response(OVERLOADED, error_json("overloaded_error", "Overloaded")),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn status_picks_the_error_type() {
        let body = AnthropicDialect::error_body(StatusCode::TOO_MANY_REQUESTS, None, "slow down");
        assert_eq!(body, json!({ "type": "error", "error": { "type": "rate_limit_error", "message": "slow down" } }));
        let body = AnthropicDialect::error_body(StatusCode::from_u16(529).unwrap(), None, "busy");
        assert_eq!(body["error"]["type"], "overloaded_error");
        let body = AnthropicDialect::error_body(StatusCode::SERVICE_UNAVAILABLE, None, "down");
        assert_eq!(body["error"]["type"], "api_error");
    }

    #[test]
    fn tool_input_keeps_invalid_json_as_text() {
        assert_eq!(tool_input(r#"{"a":1}"#), json!({ "a": 1 }));
        assert_eq!(tool_input(""), json!({}));
        assert_eq!(tool_input("{broken"), json!("{broken"));
    }
}
