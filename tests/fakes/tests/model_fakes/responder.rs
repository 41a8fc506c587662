//! The responder: a model that computes its turn from the request once the script is used up,
//! and the helpers that read the conversation out of a recorded request.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use ferry_fakes::{FakeAnthropic, FakeOpenAi, RecordedRequest, Reply, Turn};
use reqwest::StatusCode;
use serde_json::{Value, json};

use crate::soon;
use crate::sse_client::{BodyEnd, SseReader};

/// The chaos test's model: "ack" followed by the `tok-…` words of the latest user message.
fn ack_tokens(request: &RecordedRequest) -> Turn {
    let text = request.last_user_text().unwrap_or_default();
    let tokens: Vec<&str> = text.split_whitespace().filter(|word| word.starts_with("tok-")).collect();
    Turn::text([format!("ack {}", tokens.join(" "))])
}

fn openai_body(messages: Value) -> Value {
    json!({ "model": "gpt-test", "stream": false, "messages": messages })
}

async fn post_openai(fake: &FakeOpenAi, body: &Value) -> reqwest::Response {
    let url = format!("{}/chat/completions", fake.url());
    soon(reqwest::Client::new().post(url).json(body).send()).await.expect("send request")
}

async fn openai_text(fake: &FakeOpenAi, body: &Value) -> String {
    let response = post_openai(fake, body).await;
    assert_eq!(response.status(), StatusCode::OK);
    let completion: Value = response.json().await.unwrap();
    completion["choices"][0]["message"]["content"].as_str().unwrap().to_owned()
}

fn recorded(body: Value) -> RecordedRequest {
    RecordedRequest { path: "/v1/test".into(), headers: BTreeMap::new(), body }
}

#[tokio::test]
async fn the_responder_answers_only_when_the_script_is_empty() {
    let fake = FakeOpenAi::start().await.unwrap();
    let asked = Arc::new(AtomicUsize::new(0));
    fake.push(Turn::text(["scripted"]));
    fake.set_responder({
        let asked = Arc::clone(&asked);
        move |request| {
            asked.fetch_add(1, Ordering::SeqCst);
            ack_tokens(request)
        }
    });
    let conversation = openai_body(json!([
        { "role": "user", "content": "first tok-1" },
        { "role": "assistant", "content": "ack tok-1" },
        { "role": "user", "content": "then tok-17 and tok-18" },
    ]));

    assert_eq!(openai_text(&fake, &conversation).await, "scripted");
    assert_eq!(asked.load(Ordering::SeqCst), 0);
    assert_eq!(openai_text(&fake, &conversation).await, "ack tok-17 tok-18");
    // A turn pushed later wins over the responder again.
    fake.push(Turn::text(["scripted again"]));
    assert_eq!(openai_text(&fake, &conversation).await, "scripted again");
    // A request refused by the checks never reaches the responder.
    let response = post_openai(&fake, &json!({ "model": "gpt-test" })).await;
    assert_eq!(response.status(), StatusCode::BAD_REQUEST);
    assert_eq!(asked.load(Ordering::SeqCst), 1);

    fake.clear_responder();
    let response = post_openai(&fake, &conversation).await;
    assert_eq!(response.status(), StatusCode::INTERNAL_SERVER_ERROR);
    let body: Value = response.json().await.unwrap();
    assert!(body["error"]["message"].as_str().unwrap().contains("no scripted turn left"), "{body}");
}

#[tokio::test]
async fn a_panicking_responder_answers_500() {
    let fake = FakeOpenAi::start().await.unwrap().with_responder(|_| panic!("responder bug"));
    let response = post_openai(&fake, &openai_body(json!([{ "role": "user", "content": "hi" }]))).await;
    assert_eq!(response.status(), StatusCode::INTERNAL_SERVER_ERROR);
    let body: Value = response.json().await.unwrap();
    assert!(body["error"]["message"].as_str().unwrap().contains("responder panicked"), "{body}");
}

#[tokio::test]
async fn a_stall_from_the_responder_ends_when_the_client_goes_away() {
    let fake = FakeOpenAi::start().await.unwrap().with_responder(|_| Turn::stall(Reply::text(["a", "b"]), 1));
    let body = json!({ "model": "gpt-test", "stream": true, "messages": [{ "role": "user", "content": "hi" }] });
    let mut reader = SseReader::new(post_openai(&fake, &body).await);
    let events = reader.take(2).await;
    assert_eq!(events[1].json()["choices"][0]["delta"]["content"], "a");
    assert!(reader.is_silent().await, "the stream stalls after one delta");
    assert_eq!(fake.open_streams(), 1);

    drop(reader);
    soon(fake.wait_for_open_streams(0)).await;
}

#[tokio::test]
async fn the_anthropic_fake_takes_a_responder_too() {
    let fake = FakeAnthropic::start().await.unwrap().with_responder(ack_tokens);
    let body = json!({
        "model": "claude-test",
        "max_tokens": 256,
        "stream": true,
        "messages": [
            { "role": "user", "content": [{ "type": "text", "text": "tok-3" }, { "type": "text", "text": "tok-4" }] },
            { "role": "assistant", "content": [{ "type": "tool_use", "id": "t1", "name": "clock", "input": {} }] },
            { "role": "user", "content": [{ "type": "tool_result", "tool_use_id": "t1", "content": "noon" }] },
        ],
    });
    let response = soon(
        reqwest::Client::new()
            .post(format!("{}/v1/messages", fake.url()))
            .header("anthropic-version", "2023-06-01")
            .json(&body)
            .send(),
    )
    .await
    .unwrap();
    assert_eq!(response.status(), StatusCode::OK);
    let (events, end) = soon(SseReader::new(response).read_to_end()).await;
    assert_eq!(end, BodyEnd::Clean);
    let text: String = events
        .iter()
        .map(|event| event.json())
        .filter(|data| data["delta"]["type"] == "text_delta")
        .map(|data| data["delta"]["text"].as_str().unwrap().to_owned())
        .collect();
    assert_eq!(text, "ack tok-3 tok-4");
    assert_eq!(fake.open_streams(), 0, "a finished stream is not open");
}

#[test]
fn user_texts_read_openai_bodies() {
    let request = recorded(json!({ "messages": [
        { "role": "system", "content": "be brief" },
        { "role": "user", "content": "plain" },
        { "role": "assistant", "content": null, "tool_calls": [] },
        { "role": "tool", "tool_call_id": "c1", "content": "not a user" },
        { "role": "user", "content": [
            { "type": "text", "text": "part one" },
            { "type": "image_url", "image_url": { "url": "https://example.com/a.png" } },
            { "type": "text", "text": "part two" },
        ] },
    ] }));
    assert_eq!(request.user_texts(), ["plain", "part one\npart two"]);
    assert_eq!(request.last_user_text().as_deref(), Some("part one\npart two"));
}

#[test]
fn user_texts_read_anthropic_bodies_and_skip_tool_result_turns() {
    let request = recorded(json!({ "system": "be brief", "messages": [
        { "role": "user", "content": [{ "type": "text", "text": "a" }, { "type": "text", "text": "b" }] },
        { "role": "assistant", "content": [{ "type": "tool_use", "id": "t1", "name": "n", "input": {} }] },
        { "role": "user", "content": [{ "type": "tool_result", "tool_use_id": "t1", "content": "r" }] },
    ] }));
    assert_eq!(request.user_texts(), ["a\nb"]);
    assert_eq!(request.last_user_text().as_deref(), Some("a\nb"));
}

#[test]
fn a_body_without_user_messages_has_no_user_text() {
    assert_eq!(recorded(Value::Null).last_user_text(), None);
    assert_eq!(recorded(json!({ "messages": [{ "role": "system", "content": "x" }] })).last_user_text(), None);
}

#[tokio::test]
async fn streams_are_counted_per_group_the_test_names() {
    let fake = FakeOpenAi::start().await.unwrap().with_responder(|_| Turn::stall(Reply::text(["a", "b"]), 1));
    fake.set_stream_group(|request| request.last_user_text());
    let body =
        |text: &str| json!({ "model": "gpt-test", "stream": true, "messages": [{ "role": "user", "content": text }] });
    let mut first = SseReader::new(post_openai(&fake, &body("chat one")).await);
    let mut second = SseReader::new(post_openai(&fake, &body("chat one")).await);
    let mut other = SseReader::new(post_openai(&fake, &body("chat two")).await);
    for reader in [&mut first, &mut second, &mut other] {
        reader.take(2).await;
    }
    let peaks = fake.peak_open_streams_by_group();
    assert_eq!(peaks.get("chat one"), Some(&2), "two streams of one group overlapped: {peaks:?}");
    assert_eq!(peaks.get("chat two"), Some(&1));

    drop((first, second, other));
    soon(fake.wait_for_open_streams(0)).await;
    let after = FakeOpenAi::start().await.unwrap().with_responder(|_| Turn::text(["ok"]));
    after.set_stream_group(|request| request.last_user_text());
    for _ in 0..2 {
        let mut reader = SseReader::new(post_openai(&after, &body("one at a time")).await);
        reader.read_to_end().await;
        drop(reader);
        soon(after.wait_for_open_streams(0)).await;
    }
    assert_eq!(after.peak_open_streams_by_group().get("one at a time"), Some(&1), "one after the other");
}
