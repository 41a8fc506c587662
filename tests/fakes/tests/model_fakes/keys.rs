//! Per-key behaviour: each fault as the provider's real API sends it, without consuming the
//! scripted turn that the key the agent fails over to should get.

use ferry_fakes::{FakeAnthropic, FakeOpenAi, KeyBehaviour, Turn};
use reqwest::StatusCode;
use serde_json::{Value, json};

use crate::soon;
use crate::sse_client::SseReader;

fn chat_body() -> Value {
    json!({ "model": "gpt-test", "stream": false, "messages": [{ "role": "user", "content": "hi" }] })
}

fn messages_body() -> Value {
    json!({ "model": "claude-test", "max_tokens": 1024, "stream": false, "messages": [{ "role": "user", "content": "hi" }] })
}

async fn post_openai(fake: &FakeOpenAi, key: &str) -> reqwest::Response {
    let request = reqwest::Client::new().post(format!("{}/chat/completions", fake.url())).bearer_auth(key);
    soon(request.json(&chat_body()).send()).await.expect("send request")
}

async fn post_anthropic(fake: &FakeAnthropic, key: &str) -> reqwest::Response {
    let request = reqwest::Client::new()
        .post(format!("{}/v1/messages", fake.url()))
        .header("x-api-key", key)
        .header("anthropic-version", "2023-06-01");
    soon(request.json(&messages_body()).send()).await.expect("send request")
}

/// The status, `retry-after` header and JSON body of a response.
async fn parts(response: reqwest::Response) -> (StatusCode, Option<String>, Value) {
    let status = response.status();
    let retry_after = response.headers().get("retry-after").map(|value| value.to_str().unwrap().to_owned());
    (status, retry_after, response.json().await.expect("a JSON body"))
}

fn faulty_keys() -> [(&'static str, KeyBehaviour); 4] {
    [
        ("key-limited", KeyBehaviour::RateLimited { retry_after_secs: 7 }),
        ("key-revoked", KeyBehaviour::Unauthorized),
        ("key-broke", KeyBehaviour::Billing),
        ("key-busy", KeyBehaviour::Overloaded),
    ]
}

#[tokio::test]
async fn openai_faulty_keys_answer_as_openai_does_without_consuming_the_turn() {
    let mut fake = FakeOpenAi::start().await.unwrap().with_key("key-ok", KeyBehaviour::Healthy);
    for (key, behaviour) in faulty_keys() {
        fake = fake.with_key(key, behaviour);
    }
    fake.push(Turn::text(["ok"]));

    let (status, retry_after, body) = parts(post_openai(&fake, "key-limited").await).await;
    assert_eq!((status, retry_after.as_deref()), (StatusCode::TOO_MANY_REQUESTS, Some("7")));
    assert_eq!(body["error"]["type"], "requests");
    assert_eq!(body["error"]["code"], "rate_limit_exceeded");
    assert!(body["error"]["param"].is_null());
    let message = body["error"]["message"].as_str().unwrap();
    assert!(message.starts_with("Rate limit reached for gpt-test"), "{message}");

    let (status, _, body) = parts(post_openai(&fake, "key-revoked").await).await;
    assert_eq!(status, StatusCode::UNAUTHORIZED);
    assert_eq!(body["error"]["code"], "invalid_api_key");

    // OpenAI really answers an empty account with a 429; only type and code tell it apart.
    let (status, retry_after, body) = parts(post_openai(&fake, "key-broke").await).await;
    assert_eq!((status, retry_after), (StatusCode::TOO_MANY_REQUESTS, None));
    assert_eq!(body["error"]["type"], "insufficient_quota");
    assert_eq!(body["error"]["code"], "insufficient_quota");
    let message = body["error"]["message"].as_str().unwrap();
    assert!(
        message.starts_with("You exceeded your current quota, please check your plan and billing details."),
        "{message}"
    );

    let (status, _, body) = parts(post_openai(&fake, "key-busy").await).await;
    assert_eq!(status, StatusCode::SERVICE_UNAVAILABLE);
    assert_eq!(body["error"]["type"], "server_error");
    assert!(body["error"]["code"].is_null());

    assert_eq!(fake.remaining_turns(), 1, "faulty keys consume no turn");
    let (status, _, body) = parts(post_openai(&fake, "key-ok").await).await;
    assert_eq!(status, StatusCode::OK);
    assert_eq!(body["choices"][0]["message"]["content"], "ok");

    let used: Vec<Option<String>> = fake.requests().iter().map(|request| request.api_key()).collect();
    let expected = ["key-limited", "key-revoked", "key-broke", "key-busy", "key-ok"].map(|key| Some(key.to_owned()));
    assert_eq!(used, expected);
    assert_eq!(fake.requests_with_key("key-busy"), 1);
    assert_eq!(fake.requests_with_key("key-unknown"), 0);
}

#[tokio::test]
async fn anthropic_faulty_keys_answer_as_anthropic_does_without_consuming_the_turn() {
    let mut fake = FakeAnthropic::start().await.unwrap().with_key("key-ok", KeyBehaviour::Healthy);
    for (key, behaviour) in faulty_keys() {
        fake = fake.with_key(key, behaviour);
    }
    fake.push(Turn::text(["ok"]));
    let error = |error_type: &str, body: &Value| {
        assert_eq!(body["type"], "error");
        assert_eq!(body["error"]["type"], error_type);
        assert!(body["error"]["message"].as_str().is_some_and(|message| !message.is_empty()), "{body}");
    };

    let (status, retry_after, body) = parts(post_anthropic(&fake, "key-limited").await).await;
    assert_eq!((status, retry_after.as_deref()), (StatusCode::TOO_MANY_REQUESTS, Some("7")));
    error("rate_limit_error", &body);

    let (status, _, body) = parts(post_anthropic(&fake, "key-revoked").await).await;
    assert_eq!(status, StatusCode::UNAUTHORIZED);
    error("authentication_error", &body);

    let (status, _, body) = parts(post_anthropic(&fake, "key-broke").await).await;
    assert_eq!(status, StatusCode::PAYMENT_REQUIRED);
    error("billing_error", &body);
    assert!(body["error"]["message"].as_str().unwrap().starts_with("Your credit balance is too low"));

    let (status, _, body) = parts(post_anthropic(&fake, "key-busy").await).await;
    assert_eq!(status.as_u16(), 529);
    assert_eq!(body, json!({ "type": "error", "error": { "type": "overloaded_error", "message": "Overloaded" } }));

    assert_eq!(fake.remaining_turns(), 1, "faulty keys consume no turn");
    let (status, _, body) = parts(post_anthropic(&fake, "key-ok").await).await;
    assert_eq!(status, StatusCode::OK);
    assert_eq!(body["content"], json!([{ "type": "text", "text": "ok" }]));
    assert_eq!(fake.requests().len(), 5);
    assert_eq!(fake.requests()[1].api_key().as_deref(), Some("key-revoked"));
    assert_eq!(fake.requests_with_key("key-ok"), 1);
}

#[tokio::test]
async fn once_a_key_is_registered_unknown_and_missing_keys_get_401() {
    let openai =
        FakeOpenAi::start().await.unwrap().with_key("key-limited", KeyBehaviour::RateLimited { retry_after_secs: 1 });
    let (status, _, body) = parts(post_openai(&openai, "key-other").await).await;
    assert_eq!(status, StatusCode::UNAUTHORIZED);
    assert_eq!(body["error"]["code"], "invalid_api_key");
    let missing = reqwest::Client::new().post(format!("{}/chat/completions", openai.url())).json(&chat_body());
    assert_eq!(soon(missing.send()).await.unwrap().status(), StatusCode::UNAUTHORIZED);

    let anthropic = FakeAnthropic::start().await.unwrap().with_key("key-busy", KeyBehaviour::Overloaded);
    let (status, _, body) = parts(post_anthropic(&anthropic, "key-other").await).await;
    assert_eq!(status, StatusCode::UNAUTHORIZED);
    assert_eq!(body["error"], json!({ "type": "authentication_error", "message": "invalid x-api-key" }));
    assert_eq!(anthropic.requests_with_key("key-other"), 1);
}

#[tokio::test]
async fn set_key_heals_a_rate_limited_key_at_runtime() {
    let fake = FakeOpenAi::start().await.unwrap().with_key("key-1", KeyBehaviour::RateLimited { retry_after_secs: 30 });
    fake.push(Turn::text(["healed"]));
    assert_eq!(post_openai(&fake, "key-1").await.status(), StatusCode::TOO_MANY_REQUESTS);

    fake.set_key("key-1", KeyBehaviour::Healthy);
    let (status, _, body) = parts(post_openai(&fake, "key-1").await).await;
    assert_eq!(status, StatusCode::OK);
    assert_eq!(body["choices"][0]["message"]["content"], "healed");
    assert_eq!(fake.requests_with_key("key-1"), 2);
}

#[tokio::test]
async fn with_api_key_combines_with_registered_keys() {
    let fake =
        FakeAnthropic::start().await.unwrap().with_api_key("key-main").with_key("key-spare", KeyBehaviour::Billing);
    fake.push(Turn::text(["ok"]));
    assert_eq!(post_anthropic(&fake, "key-spare").await.status(), StatusCode::PAYMENT_REQUIRED);
    assert_eq!(post_anthropic(&fake, "key-main").await.status(), StatusCode::OK);
}

#[tokio::test]
async fn openai_stalled_key_sends_headers_then_silence_until_the_client_leaves() {
    let fake = FakeOpenAi::start().await.unwrap().with_key("key-stuck", KeyBehaviour::Stall);
    fake.push(Turn::text(["unused"]));
    let response = post_openai(&fake, "key-stuck").await;
    assert_eq!(response.status(), StatusCode::OK);
    assert!(response.headers()["content-type"].to_str().unwrap().starts_with("text/event-stream"));
    assert_eq!(fake.open_streams(), 1);

    let mut reader = SseReader::new(response);
    assert!(reader.is_silent().await, "a stalled key's stream sends nothing");
    drop(reader);
    soon(fake.wait_for_open_streams(0)).await;
    assert_eq!(fake.remaining_turns(), 1, "a stalled key consumes no turn");
}

#[tokio::test]
async fn anthropic_stalled_key_sends_message_start_then_silence() {
    let fake = FakeAnthropic::start().await.unwrap().with_key("key-stuck", KeyBehaviour::Stall);
    fake.push(Turn::text(["unused"]));
    let response = post_anthropic(&fake, "key-stuck").await;
    assert_eq!(response.status(), StatusCode::OK);
    assert!(response.headers()["content-type"].to_str().unwrap().starts_with("text/event-stream"));

    let mut reader = SseReader::new(response);
    let start = reader.take(1).await.remove(0);
    assert_eq!(start.event.as_deref(), Some("message_start"));
    assert_eq!(start.json()["message"]["model"], "claude-test");
    assert!(reader.is_silent().await, "nothing follows message_start");
    assert_eq!(fake.open_streams(), 1);

    drop(fake);
    let (events, _) = soon(reader.read_to_end()).await;
    assert!(events.is_empty(), "dropping the fake ends the stall: {events:?}");
}
