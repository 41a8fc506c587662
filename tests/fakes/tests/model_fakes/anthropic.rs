use std::time::{Duration, Instant};

use ferry_fakes::{FakeAnthropic, HttpError, Reply, StopReason, ToolCall, Turn};
use reqwest::StatusCode;
use serde_json::{Value, json};

use crate::soon;
use crate::sse_client::{BodyEnd, SseEvent, SseReader};

pub(crate) const KEY: &str = "sk-ant-test";

pub(crate) async fn start() -> FakeAnthropic {
    FakeAnthropic::start().await.expect("start fake Anthropic").with_api_key(KEY)
}

fn messages_body(stream: bool) -> Value {
    json!({
        "model": "claude-test",
        "max_tokens": 1024,
        "stream": stream,
        "messages": [{ "role": "user", "content": "hi" }],
    })
}

pub(crate) fn request(fake: &FakeAnthropic, body: &Value) -> reqwest::RequestBuilder {
    reqwest::Client::new()
        .post(format!("{}/v1/messages", fake.url()))
        .header("x-api-key", KEY)
        .header("anthropic-version", "2023-06-01")
        .json(body)
}

pub(crate) async fn post(fake: &FakeAnthropic, body: &Value) -> reqwest::Response {
    soon(request(fake, body).send()).await.expect("send request")
}

/// The events of a complete stream, checking each `data.type` matches its event name.
pub(crate) async fn stream_events(response: reqwest::Response) -> Vec<(String, Value)> {
    assert_eq!(response.status(), StatusCode::OK);
    let content_type = response.headers()["content-type"].to_str().unwrap().to_owned();
    assert!(content_type.starts_with("text/event-stream"), "{content_type}");
    let (events, end) = soon(SseReader::new(response).read_to_end()).await;
    assert_eq!(end, BodyEnd::Clean);
    named(&events)
}

pub(crate) fn named(events: &[SseEvent]) -> Vec<(String, Value)> {
    events
        .iter()
        .map(|event| {
            let name = event.event.clone().expect("Anthropic events are named");
            let data = event.json();
            assert_eq!(data["type"], name.as_str());
            (name, data)
        })
        .collect()
}

fn names(events: &[(String, Value)]) -> Vec<&str> {
    events.iter().map(|(name, _)| name.as_str()).collect()
}

/// The `delta[field]` strings of every `content_block_delta` of this delta type.
pub(crate) fn deltas(events: &[(String, Value)], delta_type: &str, field: &str) -> Vec<String> {
    events
        .iter()
        .filter(|(_, data)| data["delta"]["type"] == delta_type)
        .map(|(_, data)| data["delta"][field].as_str().unwrap().to_owned())
        .collect()
}

pub(crate) async fn error_body(response: reqwest::Response, status: StatusCode) -> Value {
    assert_eq!(response.status(), status);
    let body: Value = response.json().await.unwrap();
    assert_eq!(body["type"], "error");
    assert!(body["error"]["message"].is_string());
    body
}

#[tokio::test]
async fn text_turn_streams_named_events_ending_with_message_stop() {
    let fake = start().await;
    fake.push(Reply::text(["Hel", "lo", " world"]).with_usage(25, 9));
    let events = stream_events(post(&fake, &messages_body(true)).await).await;

    assert_eq!(
        names(&events),
        [
            "message_start",
            "content_block_start",
            "ping",
            "content_block_delta",
            "content_block_delta",
            "content_block_delta",
            "content_block_stop",
            "message_delta",
            "message_stop",
        ]
    );
    let message = &events[0].1["message"];
    assert_eq!(message["role"], "assistant");
    assert_eq!(message["model"], "claude-test");
    assert_eq!(message["usage"]["input_tokens"], 25);
    assert_eq!(events[1].1["content_block"], json!({ "type": "text", "text": "" }));
    assert_eq!(deltas(&events, "text_delta", "text"), ["Hel", "lo", " world"]);
    assert_eq!(events[7].1["delta"]["stop_reason"], "end_turn");
    assert_eq!(events[7].1["usage"]["output_tokens"], 9);
}

#[tokio::test]
async fn thinking_block_precedes_text_and_ends_with_a_signature() {
    let fake = start().await;
    fake.push(Reply::text(["Answer"]).with_thinking(["Let me ", "think."]));
    let events = stream_events(post(&fake, &messages_body(true)).await).await;

    let starts: Vec<&Value> =
        events.iter().filter(|(name, _)| name == "content_block_start").map(|(_, data)| data).collect();
    assert_eq!(starts[0]["index"], 0);
    assert_eq!(starts[0]["content_block"]["type"], "thinking");
    assert_eq!(starts[1]["index"], 1);
    assert_eq!(starts[1]["content_block"]["type"], "text");
    assert_eq!(deltas(&events, "thinking_delta", "thinking"), ["Let me ", "think."]);
    let signatures = deltas(&events, "signature_delta", "signature");
    assert_eq!(signatures.len(), 1);
    assert!(!signatures[0].is_empty());
    assert_eq!(deltas(&events, "text_delta", "text"), ["Answer"]);
}

#[tokio::test]
async fn tool_use_input_pieces_concatenate_to_the_original_json() {
    let input = r#"{"path":"/etc/hosts","lines":[1,2]}"#;
    let fake = start().await;
    fake.push(
        Reply::tool_calls([
            ToolCall::new("toolu_01", "read_file", input).split_at([2, 8, 30]),
            ToolCall::new("toolu_02", "list_dir", "{}"),
        ])
        .with_text(["Reading."]),
    );
    let events = stream_events(post(&fake, &messages_body(true)).await).await;

    let tool_starts: Vec<&Value> = events
        .iter()
        .filter(|(name, data)| name == "content_block_start" && data["content_block"]["type"] == "tool_use")
        .map(|(_, data)| data)
        .collect();
    assert_eq!(tool_starts.len(), 2);
    assert_eq!(
        tool_starts[0]["content_block"],
        json!({ "type": "tool_use", "id": "toolu_01", "name": "read_file", "input": {} })
    );
    let index = &tool_starts[0]["index"];
    let pieces: Vec<&str> = events
        .iter()
        .filter(|(_, data)| &data["index"] == index && data["delta"]["type"] == "input_json_delta")
        .map(|(_, data)| data["delta"]["partial_json"].as_str().unwrap())
        .collect();
    assert_eq!(pieces.len(), 4);
    assert_eq!(pieces.concat(), input);
    let message_delta = &events.iter().find(|(name, _)| name == "message_delta").unwrap().1;
    assert_eq!(message_delta["delta"]["stop_reason"], "tool_use");
}

#[tokio::test]
async fn non_streaming_request_gets_a_message() {
    let fake = start().await;
    fake.push(Reply::text(["Cut ", "short"]).with_stop_reason(StopReason::MaxTokens).with_usage(3, 4));
    let response = post(&fake, &messages_body(false)).await;
    assert_eq!(response.status(), StatusCode::OK);
    let body: Value = response.json().await.unwrap();
    assert_eq!(body["type"], "message");
    assert_eq!(body["content"], json!([{ "type": "text", "text": "Cut short" }]));
    assert_eq!(body["stop_reason"], "max_tokens");
    assert_eq!(body["usage"], json!({ "input_tokens": 3, "output_tokens": 4 }));
}

#[tokio::test]
async fn rate_limit_carries_retry_after() {
    let fake = start().await;
    fake.push(Turn::rate_limited(12)).push(HttpError::new(529, "Overloaded").retry_after(1));
    let response = post(&fake, &messages_body(true)).await;
    assert_eq!(response.headers()["retry-after"], "12");
    let body = error_body(response, StatusCode::TOO_MANY_REQUESTS).await;
    assert_eq!(body["error"]["type"], "rate_limit_error");

    let response = post(&fake, &messages_body(true)).await;
    assert_eq!(response.headers()["retry-after"], "1");
    let body = error_body(response, StatusCode::from_u16(529).unwrap()).await;
    assert_eq!(body, json!({ "type": "error", "error": { "type": "overloaded_error", "message": "Overloaded" } }));
}

#[tokio::test]
async fn context_overflow_is_an_invalid_request_error() {
    let fake = start().await;
    fake.push(Turn::context_overflow());
    let body = error_body(post(&fake, &messages_body(true)).await, StatusCode::BAD_REQUEST).await;
    assert_eq!(
        body,
        json!({ "type": "error", "error": {
            "type": "invalid_request_error", "message": "prompt is too long: 210000 tokens > 200000 maximum"
        }})
    );
}

#[tokio::test]
async fn stall_sends_k_deltas_then_nothing() {
    let fake = start().await;
    fake.push(Turn::stall(Reply::text(["a", "b", "c"]), 1));
    let response = post(&fake, &messages_body(true)).await;
    assert_eq!(response.status(), StatusCode::OK);
    let mut reader = SseReader::new(response);
    let events = named(&reader.take(4).await);
    assert_eq!(names(&events), ["message_start", "content_block_start", "ping", "content_block_delta"]);
    assert_eq!(deltas(&events, "text_delta", "text"), ["a"]);
    assert!(reader.is_silent().await, "a stalled stream must send nothing more");
}

#[tokio::test]
async fn cut_ends_the_body_early_without_message_stop() {
    let fake = start().await;
    fake.push(Turn::cut(Reply::text(["a", "b", "c"]), 2));
    let response = post(&fake, &messages_body(true)).await;
    assert_eq!(response.status(), StatusCode::OK);
    let (events, end) = soon(SseReader::new(response).read_to_end()).await;
    assert_eq!(end, BodyEnd::Broken);
    let events = named(&events);
    assert_eq!(deltas(&events, "text_delta", "text"), ["a", "b"]);
    assert!(!names(&events).contains(&"message_stop"));
    assert!(!names(&events).contains(&"message_delta"));
}

#[tokio::test]
async fn raw_turn_is_sent_verbatim() {
    let raw = "event: surprise\ndata: {\"type\":\"surprise\"}\n\nevent: content_block_delta\ndata: {not json\n\n";
    let fake = start().await;
    fake.push(Turn::raw(raw));
    let response = post(&fake, &messages_body(true)).await;
    assert_eq!(response.status(), StatusCode::OK);
    assert_eq!(response.text().await.unwrap(), raw);
}

#[tokio::test]
async fn chunk_delay_spaces_the_events() {
    let fake = start().await;
    fake.push(Reply::text(["a", "b"]).with_chunk_delay(Duration::from_millis(40)));
    let started = Instant::now();
    let events = stream_events(post(&fake, &messages_body(true)).await).await;
    assert_eq!(events.len(), 8);
    // Seven pauses between eight events.
    assert!(started.elapsed() >= Duration::from_millis(7 * 40), "{:?}", started.elapsed());
}

#[tokio::test]
async fn wrong_key_and_missing_version_are_rejected_without_consuming_a_turn() {
    let fake = start().await;
    fake.push(Turn::text(["ok"]));
    let url = format!("{}/v1/messages", fake.url());
    let client = reqwest::Client::new();

    let wrong = client
        .post(&url)
        .header("x-api-key", "sk-ant-wrong")
        .header("anthropic-version", "2023-06-01")
        .json(&messages_body(true))
        .send()
        .await
        .unwrap();
    let body = error_body(wrong, StatusCode::UNAUTHORIZED).await;
    assert_eq!(body["error"]["type"], "authentication_error");

    let no_version = client.post(&url).header("x-api-key", KEY).json(&messages_body(true)).send().await.unwrap();
    let body = error_body(no_version, StatusCode::BAD_REQUEST).await;
    assert_eq!(body["error"]["type"], "invalid_request_error");
    assert!(body["error"]["message"].as_str().unwrap().contains("anthropic-version"));

    assert_eq!(fake.remaining_turns(), 1);
    let events = stream_events(post(&fake, &messages_body(true)).await).await;
    assert_eq!(deltas(&events, "text_delta", "text"), ["ok"]);
}

#[tokio::test]
async fn requests_are_recorded_and_can_be_awaited() {
    let fake = start().await;
    fake.push(Turn::text(["one"]));
    let pending = request(&fake, &messages_body(true)).send();
    let sender = tokio::spawn(async move { pending.await.unwrap().bytes().await.unwrap() });
    let first = soon(fake.wait_for_request(0)).await;
    soon(sender).await.unwrap();

    assert_eq!(first.path, "/v1/messages");
    assert_eq!(first.header("X-Api-Key"), Some(KEY));
    assert_eq!(first.headers["anthropic-version"], "2023-06-01");
    assert_eq!(first.body, messages_body(true));
    assert_eq!(fake.requests().len(), 1);
}

#[tokio::test]
async fn empty_script_answers_500() {
    let fake = start().await;
    let body = error_body(post(&fake, &messages_body(true)).await, StatusCode::INTERNAL_SERVER_ERROR).await;
    assert_eq!(body["error"]["type"], "api_error");
    assert!(body["error"]["message"].as_str().unwrap().contains("no scripted turn left"));
}

#[tokio::test]
async fn malformed_body_gets_a_400_and_keeps_the_turn() {
    let fake = start().await;
    fake.push(Turn::text(["unused"]));
    let response = reqwest::Client::new()
        .post(format!("{}/v1/messages", fake.url()))
        .header("x-api-key", KEY)
        .header("anthropic-version", "2023-06-01")
        .header("content-type", "application/json")
        .body("[1, 2")
        .send()
        .await
        .unwrap();
    let body = error_body(response, StatusCode::BAD_REQUEST).await;
    assert_eq!(body["error"]["type"], "invalid_request_error");

    let mut no_max_tokens = messages_body(true);
    no_max_tokens.as_object_mut().unwrap().remove("max_tokens");
    let body = error_body(post(&fake, &no_max_tokens).await, StatusCode::BAD_REQUEST).await;
    assert_eq!(body["error"]["message"], "max_tokens: Field required");
    assert_eq!(fake.remaining_turns(), 1);
}
