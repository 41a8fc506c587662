//! Anthropic extended thinking, validated as strictly as the real API: a continuation must hand
//! back the thinking blocks exactly as they were sent, signature included.

use ferry_fakes::{FakeAnthropic, Reply, ToolCall, Turn};
use reqwest::StatusCode;
use serde_json::{Value, json};

use crate::anthropic::{error_body, post, request, start, stream_events};
use crate::soon;

const QUESTION: &str = "What is in a.txt?";

fn thinking_body(messages: Value) -> Value {
    json!({
        "model": "claude-test",
        "max_tokens": 4096,
        "stream": true,
        "thinking": { "type": "enabled", "budget_tokens": 2048 },
        "messages": messages,
    })
}

fn read_call() -> Reply {
    Reply::tool_calls([ToolCall::new("toolu_1", "read_file", r#"{"path":"a.txt"}"#).split_at([4])])
        .with_thinking(["I should ", "read the file."])
}

/// The assistant message's content blocks, assembled from a stream the way a client does.
fn assemble(events: &[(String, Value)]) -> Vec<Value> {
    let mut blocks: Vec<Value> = Vec::new();
    let mut partial_json: Vec<String> = Vec::new();
    for (name, data) in events {
        let index = data["index"].as_u64().unwrap_or_default() as usize;
        match name.as_str() {
            "content_block_start" => {
                blocks.push(data["content_block"].clone());
                partial_json.push(String::new());
            }
            "content_block_delta" => {
                let delta = &data["delta"];
                let block = &mut blocks[index];
                let append = |block: &mut Value, field: &str, piece: &Value| {
                    let text = format!("{}{}", block[field].as_str().unwrap_or_default(), piece.as_str().unwrap());
                    block[field] = text.into();
                };
                match delta["type"].as_str().unwrap() {
                    "thinking_delta" => append(block, "thinking", &delta["thinking"]),
                    "text_delta" => append(block, "text", &delta["text"]),
                    "signature_delta" => block["signature"] = delta["signature"].clone(),
                    "input_json_delta" => partial_json[index].push_str(delta["partial_json"].as_str().unwrap()),
                    other => panic!("unexpected delta {other}"),
                }
            }
            "content_block_stop" if blocks[index]["type"] == "tool_use" => {
                blocks[index]["input"] = serde_json::from_str(&partial_json[index]).unwrap();
            }
            _ => {}
        }
    }
    blocks
}

fn tool_result() -> Value {
    json!({ "role": "user", "content": [{ "type": "tool_result", "tool_use_id": "toolu_1", "content": "hello" }] })
}

/// The history of a tool-call round trip: question, the assistant's message as given, result.
fn continuation(assistant: Vec<Value>) -> Value {
    json!([{ "role": "user", "content": QUESTION }, { "role": "assistant", "content": assistant }, tool_result()])
}

/// Asks once with thinking enabled and returns the assistant blocks the fake streamed back; the
/// fake is left with one turn ("Done.") for the continuation.
async fn first_turn(fake: &FakeAnthropic, reply: Reply) -> Vec<Value> {
    fake.push(reply).push(Turn::text(["Done."]));
    let body = thinking_body(json!([{ "role": "user", "content": QUESTION }]));
    assemble(&stream_events(post(fake, &body).await).await)
}

/// Sends the continuation and returns the 400's message, checking that no turn was consumed.
async fn rejected(fake: &FakeAnthropic, assistant: Vec<Value>) -> String {
    let before = fake.requests().len();
    let body = error_body(post(fake, &thinking_body(continuation(assistant))).await, StatusCode::BAD_REQUEST).await;
    assert_eq!(body["error"]["type"], "invalid_request_error");
    assert_eq!(fake.remaining_turns(), 1, "a rejected continuation consumes no turn");
    assert_eq!(fake.requests().len(), before + 1, "a rejected continuation is recorded");
    body["error"]["message"].as_str().unwrap().to_owned()
}

#[tokio::test]
async fn an_unmodified_continuation_is_accepted() {
    let fake = start().await;
    let assistant = first_turn(&fake, read_call()).await;
    assert_eq!(assistant[0]["type"], "thinking");
    assert_eq!(assistant[0]["thinking"], "I should read the file.");
    assert_eq!(assistant[0]["signature"], fake.sign_thinking("I should read the file."));
    assert_eq!(
        assistant[1],
        json!({ "type": "tool_use", "id": "toolu_1", "name": "read_file", "input": { "path": "a.txt" } })
    );

    let events = stream_events(post(&fake, &thinking_body(continuation(assistant))).await).await;
    assert_eq!(crate::anthropic::deltas(&events, "text_delta", "text"), ["Done."]);
    let recorded = fake.requests().pop().unwrap();
    assert_eq!(recorded.thinking_budget(), Some(2048));
    assert_eq!(recorded.max_tokens(), Some(4096));
}

#[tokio::test]
async fn a_dropped_thinking_block_is_rejected() {
    let fake = start().await;
    let mut assistant = first_turn(&fake, read_call().with_text(["Reading."])).await;
    assistant.remove(0);
    let message = rejected(&fake, assistant).await;
    assert!(
        message.starts_with("messages.1.content.0.type: Expected `thinking` or `redacted_thinking`, but found `text`."),
        "{message}"
    );
    assert!(message.contains("a final `assistant` message must start with a thinking block"), "{message}");
}

#[tokio::test]
async fn altered_thinking_text_or_signature_is_rejected() {
    let fake = start().await;
    let assistant = first_turn(&fake, read_call()).await;

    let mut altered_text = assistant.clone();
    altered_text[0]["thinking"] = "I should read the file!".into();
    assert_eq!(rejected(&fake, altered_text).await, "messages.1.content.0: Invalid `signature` in `thinking` block");

    let mut altered_signature = assistant.clone();
    altered_signature[0]["signature"] = fake.sign_thinking("something else").into();
    assert_eq!(
        rejected(&fake, altered_signature).await,
        "messages.1.content.0: Invalid `signature` in `thinking` block"
    );

    let mut unsigned = assistant.clone();
    unsigned[0].as_object_mut().unwrap().remove("signature");
    assert_eq!(rejected(&fake, unsigned).await, "messages.1.content.0.thinking.signature: Field required");

    let events = stream_events(post(&fake, &thinking_body(continuation(assistant))).await).await;
    assert_eq!(crate::anthropic::deltas(&events, "text_delta", "text"), ["Done."]);
}

#[tokio::test]
async fn signatures_are_checked_in_every_assistant_message_not_only_the_last() {
    let fake = start().await;
    fake.push(Turn::text(["fine"]));
    let earlier = json!({ "role": "assistant", "content": [
        { "type": "thinking", "thinking": "old thought", "signature": "forged" },
        { "type": "text", "text": "Earlier answer." },
    ]});
    let messages = json!([{ "role": "user", "content": "hi" }, earlier, { "role": "user", "content": "again" }]);
    let body = error_body(post(&fake, &thinking_body(messages.clone())).await, StatusCode::BAD_REQUEST).await;
    assert_eq!(body["error"]["message"], "messages.1.content.0: Invalid `signature` in `thinking` block");

    let mut disabled = thinking_body(messages);
    disabled["thinking"] = json!({ "type": "disabled" });
    let events = stream_events(post(&fake, &disabled).await).await;
    assert_eq!(crate::anthropic::deltas(&events, "text_delta", "text"), ["fine"]);
}

#[tokio::test]
async fn without_thinking_enabled_the_history_is_not_validated() {
    let fake = start().await;
    let mut assistant = first_turn(&fake, read_call()).await;
    assistant[0]["signature"] = "tampered".into();
    assistant.swap(0, 1);
    let mut body = thinking_body(continuation(assistant));
    body.as_object_mut().unwrap().remove("thinking");
    let events = stream_events(post(&fake, &body).await).await;
    assert_eq!(crate::anthropic::deltas(&events, "text_delta", "text"), ["Done."]);
}

#[tokio::test]
async fn budget_must_be_at_least_1024_and_below_max_tokens() {
    let fake = start().await;
    fake.push(Turn::text(["ok"]));
    let ask = |budget: Value, max_tokens: u64| {
        let mut body = thinking_body(json!([{ "role": "user", "content": "hi" }]));
        body["thinking"]["budget_tokens"] = budget;
        body["max_tokens"] = max_tokens.into();
        body
    };

    let body = error_body(post(&fake, &ask(1023.into(), 4096)).await, StatusCode::BAD_REQUEST).await;
    assert_eq!(
        body["error"]["message"],
        "thinking.enabled.budget_tokens: Input should be greater than or equal to 1024"
    );
    for (budget, max_tokens) in [(4096, 4096), (8000, 4096)] {
        let body = error_body(post(&fake, &ask(budget.into(), max_tokens)).await, StatusCode::BAD_REQUEST).await;
        let message = body["error"]["message"].as_str().unwrap();
        assert!(message.starts_with("`max_tokens` must be greater than `thinking.budget_tokens`."), "{message}");
    }
    let body = error_body(post(&fake, &ask("lots".into(), 4096)).await, StatusCode::BAD_REQUEST).await;
    assert_eq!(body["error"]["message"], "thinking.enabled.budget_tokens: Input should be a valid integer");
    assert_eq!(fake.remaining_turns(), 1);
    assert_eq!(fake.requests()[0].thinking_budget(), Some(1023));

    // Interleaved thinking lets the budget span several blocks, so it may exceed max_tokens.
    let interleaved =
        request(&fake, &ask(8000.into(), 4096)).header("anthropic-beta", "interleaved-thinking-2025-05-14");
    let events = stream_events(soon(interleaved.send()).await.unwrap()).await;
    assert_eq!(crate::anthropic::deltas(&events, "text_delta", "text"), ["ok"]);
}

#[tokio::test]
async fn redacted_thinking_is_streamed_first_and_accepted_back_verbatim() {
    let fake = start().await;
    let reply = read_call().with_redacted_thinking("EmwKAhgBEgy3va3pzix/LafPsn4a");
    fake.push(reply).push(Turn::text(["Done."]));
    let body = thinking_body(json!([{ "role": "user", "content": QUESTION }]));
    let events = stream_events(post(&fake, &body).await).await;

    let redacted_index = &events[1].1["index"];
    assert_eq!(
        events[1].1["content_block"],
        json!({ "type": "redacted_thinking", "data": "EmwKAhgBEgy3va3pzix/LafPsn4a" })
    );
    assert!(
        !events.iter().any(|(name, data)| name == "content_block_delta" && &data["index"] == redacted_index),
        "a redacted block has no deltas"
    );
    let assistant = assemble(&events);
    let types: Vec<&str> = assistant.iter().map(|block| block["type"].as_str().unwrap()).collect();
    assert_eq!(types, ["redacted_thinking", "thinking", "tool_use"]);

    let mut forged = assistant.clone();
    forged[0]["data"] = "EmwKAhgBEgy3va3pzix/LafPsn4b".into();
    assert_eq!(rejected(&fake, forged).await, "messages.1.content.0: Invalid `data` in `redacted_thinking` block");

    let events = stream_events(post(&fake, &thinking_body(continuation(assistant))).await).await;
    assert_eq!(crate::anthropic::deltas(&events, "text_delta", "text"), ["Done."]);
}

#[tokio::test]
async fn non_streaming_answers_carry_signed_and_redacted_blocks_that_round_trip() {
    let fake = start().await;
    fake.push(read_call().with_redacted_thinking("opaque")).push(Turn::text(["Done."]));
    let mut body = thinking_body(json!([{ "role": "user", "content": QUESTION }]));
    body["stream"] = false.into();
    let response = post(&fake, &body).await;
    assert_eq!(response.status(), StatusCode::OK);
    let message: Value = response.json().await.unwrap();
    let content = message["content"].as_array().unwrap().clone();
    assert_eq!(content[0], json!({ "type": "redacted_thinking", "data": "opaque" }));
    assert_eq!(
        content[1],
        json!({
            "type": "thinking",
            "thinking": "I should read the file.",
            "signature": fake.sign_thinking("I should read the file."),
        })
    );

    let mut continued = thinking_body(continuation(content));
    continued["stream"] = false.into();
    let response = post(&fake, &continued).await;
    assert_eq!(response.status(), StatusCode::OK);
    let message: Value = response.json().await.unwrap();
    assert_eq!(message["content"], json!([{ "type": "text", "text": "Done." }]));
}
