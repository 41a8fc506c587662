use std::collections::BTreeMap;

use ferry_fakes::{FakeOpenAi, HttpError, Reply, StopReason, ToolCall, Turn};
use reqwest::StatusCode;
use serde_json::{Value, json};

use crate::soon;
use crate::sse_client::{BodyEnd, SseEvent, SseReader};

async fn start() -> FakeOpenAi {
    FakeOpenAi::start().await.expect("start fake OpenAI")
}

fn chat_body(stream: bool) -> Value {
    json!({ "model": "gpt-test", "stream": stream, "messages": [{ "role": "user", "content": "hi" }] })
}

async fn post(fake: &FakeOpenAi, body: &Value) -> reqwest::Response {
    soon(reqwest::Client::new().post(format!("{}/chat/completions", fake.url())).json(body).send())
        .await
        .expect("send request")
}

/// The chunk payloads of a complete stream, checking it ended with `[DONE]` and cleanly.
async fn stream_chunks(response: reqwest::Response) -> Vec<Value> {
    assert_eq!(response.status(), StatusCode::OK);
    let content_type = response.headers()["content-type"].to_str().unwrap().to_owned();
    assert!(content_type.starts_with("text/event-stream"), "{content_type}");
    let (events, end) = soon(SseReader::new(response).read_to_end()).await;
    assert_eq!(end, BodyEnd::Clean);
    let (last, chunks) = events.split_last().expect("some events");
    assert_eq!(last.data, "[DONE]");
    assert!(events.iter().all(|event| event.event.is_none()), "OpenAI sends unnamed events");
    chunks.iter().map(SseEvent::json).collect()
}

/// The `delta[field]` strings in order, skipping the opening role chunk (whose content is "").
fn deltas(chunks: &[Value], field: &str) -> Vec<String> {
    chunks
        .iter()
        .map(|chunk| &chunk["choices"][0]["delta"])
        .filter(|delta| delta.get("role").is_none())
        .filter_map(|delta| delta[field].as_str())
        .map(str::to_owned)
        .collect()
}

#[tokio::test]
async fn text_turn_streams_ordered_chunks_ending_with_done() {
    let fake = start().await;
    fake.push(Turn::text(["Hel", "lo", " world"]));
    let chunks = stream_chunks(post(&fake, &chat_body(true)).await).await;

    assert_eq!(chunks.len(), 5, "role, three pieces, finish: {chunks:?}");
    for chunk in &chunks {
        assert_eq!(chunk["object"], "chat.completion.chunk");
        assert_eq!(chunk["model"], "gpt-test");
        assert_eq!(chunk["id"], chunks[0]["id"]);
        assert!(chunk["created"].is_u64());
        assert!(chunk.get("usage").is_none(), "no usage without include_usage");
    }
    assert_eq!(chunks[0]["choices"][0]["delta"]["role"], "assistant");
    assert_eq!(deltas(&chunks[1..], "content"), ["Hel", "lo", " world"]);
    assert!(chunks[..4].iter().all(|chunk| chunk["choices"][0]["finish_reason"].is_null()));
    assert_eq!(chunks[4]["choices"][0]["finish_reason"], "stop");
    assert_eq!(chunks[4]["choices"][0]["delta"], json!({}));
}

#[tokio::test]
async fn tool_call_argument_pieces_concatenate_to_the_original_json() {
    let read = r#"{"path":"/etc/hosts","lines":[1,2]}"#;
    let list = r#"{"dir":"/"}"#;
    let fake = start().await;
    fake.push(
        Reply::tool_calls([
            ToolCall::new("call_read", "read_file", read).split_at([1, 9, 20]),
            ToolCall::new("call_list", "list_dir", list).split_at([4]),
        ])
        .with_text(["Let me ", "look."]),
    );
    let chunks = stream_chunks(post(&fake, &chat_body(true)).await).await;

    assert_eq!(deltas(&chunks, "content"), ["Let me ", "look."]);
    let mut calls: BTreeMap<u64, (String, String, String)> = BTreeMap::new();
    let mut pieces = 0;
    for chunk in &chunks {
        for call in chunk["choices"][0]["delta"]["tool_calls"].as_array().into_iter().flatten() {
            let entry = calls.entry(call["index"].as_u64().unwrap()).or_default();
            if let Some(id) = call["id"].as_str() {
                assert_eq!(call["type"], "function");
                entry.0 = id.to_owned();
                entry.1 = call["function"]["name"].as_str().unwrap().to_owned();
            } else {
                pieces += 1;
            }
            entry.2.push_str(call["function"]["arguments"].as_str().unwrap());
        }
    }
    assert_eq!(pieces, 4 + 2);
    assert_eq!(calls[&0], ("call_read".to_owned(), "read_file".to_owned(), read.to_owned()));
    assert_eq!(calls[&1], ("call_list".to_owned(), "list_dir".to_owned(), list.to_owned()));
    assert_eq!(chunks.last().unwrap()["choices"][0]["finish_reason"], "tool_calls");
}

#[tokio::test]
async fn usage_chunk_is_sent_only_when_include_usage_is_asked() {
    let fake = start().await;
    fake.push(Reply::text(["a"]).with_usage(120, 7)).push(Reply::text(["b"]).with_usage(120, 7));

    let mut body = chat_body(true);
    body["stream_options"] = json!({ "include_usage": true });
    let chunks = stream_chunks(post(&fake, &body).await).await;
    let (usage_chunk, rest) = chunks.split_last().unwrap();
    assert_eq!(usage_chunk["choices"], json!([]));
    assert_eq!(usage_chunk["usage"], json!({ "prompt_tokens": 120, "completion_tokens": 7, "total_tokens": 127 }));
    assert!(rest.iter().all(|chunk| chunk["usage"].is_null() && chunk.get("usage").is_some()));

    let chunks = stream_chunks(post(&fake, &chat_body(true)).await).await;
    assert!(chunks.iter().all(|chunk| chunk.get("usage").is_none()));
    assert!(chunks.iter().all(|chunk| chunk["choices"].as_array().is_some_and(|choices| choices.len() == 1)));
}

#[tokio::test]
async fn reasoning_streams_before_content_and_length_maps_to_length() {
    let fake = start().await;
    fake.push(Reply::text(["Answer"]).with_thinking(["Think", "ing"]).with_stop_reason(StopReason::MaxTokens));
    let chunks = stream_chunks(post(&fake, &chat_body(true)).await).await;
    assert_eq!(deltas(&chunks, "reasoning_content"), ["Think", "ing"]);
    assert_eq!(chunks[3]["choices"][0]["delta"]["content"], "Answer");
    assert_eq!(chunks.last().unwrap()["choices"][0]["finish_reason"], "length");
}

#[tokio::test]
async fn inline_think_tags_are_sent_verbatim_as_content() {
    // DeepSeek-R1 behind llama.cpp without a reasoning parser: the reasoning is in the content.
    let pieces = ["<think>\nThe user", " greets me.\n</think>", "\n\nHello!"];
    let fake = start().await;
    fake.push(Turn::text(pieces)).push(Turn::text(pieces));
    let chunks = stream_chunks(post(&fake, &chat_body(true)).await).await;
    assert_eq!(deltas(&chunks, "content"), pieces);
    assert!(deltas(&chunks, "reasoning_content").is_empty());

    let completion: Value = post(&fake, &chat_body(false)).await.json().await.unwrap();
    assert_eq!(completion["choices"][0]["message"]["content"], pieces.concat());
    assert!(completion["choices"][0]["message"].get("reasoning_content").is_none());
}

#[tokio::test]
async fn reasoning_effort_and_max_tokens_are_recorded() {
    let fake = start().await;
    fake.push(Turn::text(["ok"]));
    let mut body = chat_body(false);
    body["reasoning_effort"] = "low".into();
    body["max_completion_tokens"] = 2048.into();
    assert_eq!(post(&fake, &body).await.status(), StatusCode::OK);
    let recorded = fake.requests().remove(0);
    assert_eq!(recorded.reasoning_effort().as_deref(), Some("low"));
    assert_eq!(recorded.max_tokens(), Some(2048));
    assert_eq!(recorded.thinking_budget(), None);
}

#[tokio::test]
async fn non_streaming_request_gets_a_chat_completion() {
    let fake = start().await;
    fake.push(
        Reply::tool_calls([ToolCall::new("call_1", "run", r#"{"cmd":"ls"}"#).split_at([3])])
            .with_usage(10, 5)
            .with_thinking(["hmm"]),
    );
    let response = post(&fake, &chat_body(false)).await;
    assert_eq!(response.status(), StatusCode::OK);
    let body: Value = response.json().await.unwrap();
    assert_eq!(body["object"], "chat.completion");
    let choice = &body["choices"][0];
    assert_eq!(choice["finish_reason"], "tool_calls");
    assert!(choice["message"]["content"].is_null());
    assert_eq!(choice["message"]["reasoning_content"], "hmm");
    assert_eq!(
        choice["message"]["tool_calls"],
        json!([{ "id": "call_1", "type": "function", "function": { "name": "run", "arguments": r#"{"cmd":"ls"}"# } }])
    );
    assert_eq!(body["usage"]["total_tokens"], 15);
}

#[tokio::test]
async fn rate_limit_carries_retry_after() {
    let fake = start().await;
    fake.push(Turn::rate_limited(7));
    let response = post(&fake, &chat_body(true)).await;
    assert_eq!(response.status(), StatusCode::TOO_MANY_REQUESTS);
    assert_eq!(response.headers()["retry-after"], "7");
    let body: Value = response.json().await.unwrap();
    assert_eq!(body["error"]["type"], "requests");
    assert_eq!(body["error"]["code"], "rate_limit_exceeded");
    assert!(body["error"]["message"].is_string());
    assert!(body["error"].get("param").is_some_and(Value::is_null));
}

#[tokio::test]
async fn server_errors_use_the_openai_shape() {
    let fake = start().await;
    fake.push(HttpError::new(503, "The engine is currently overloaded.")).push(Turn::error(400, "bad tools"));
    let response = post(&fake, &chat_body(true)).await;
    assert_eq!(response.status(), StatusCode::SERVICE_UNAVAILABLE);
    assert!(response.headers().get("retry-after").is_none());
    let body: Value = response.json().await.unwrap();
    assert_eq!(
        body,
        json!({ "error": {
            "message": "The engine is currently overloaded.", "type": "server_error", "param": null, "code": null
        }})
    );
    let response = post(&fake, &chat_body(true)).await;
    assert_eq!(response.status(), StatusCode::BAD_REQUEST);
    assert_eq!(response.json::<Value>().await.unwrap()["error"]["type"], "invalid_request_error");
}

#[tokio::test]
async fn context_overflow_is_a_400_with_context_length_exceeded() {
    let fake = start().await;
    fake.push(Turn::context_overflow());
    let response = post(&fake, &chat_body(true)).await;
    assert_eq!(response.status(), StatusCode::BAD_REQUEST);
    let body: Value = response.json().await.unwrap();
    assert_eq!(body["error"]["code"], "context_length_exceeded");
    assert_eq!(body["error"]["type"], "invalid_request_error");
    let message = body["error"]["message"].as_str().unwrap();
    assert!(message.starts_with("This model's maximum context length is "), "{message}");
    assert!(message.contains(" tokens"), "{message}");
}

#[tokio::test]
async fn stall_sends_k_deltas_then_nothing() {
    let fake = start().await;
    fake.push(Turn::stall(Reply::text(["a", "b", "c"]), 2));
    let response = post(&fake, &chat_body(true)).await;
    assert_eq!(response.status(), StatusCode::OK);
    let mut reader = SseReader::new(response);
    let chunks: Vec<Value> = reader.take(3).await.iter().map(SseEvent::json).collect();
    assert_eq!(chunks[0]["choices"][0]["delta"]["role"], "assistant");
    assert_eq!(deltas(&chunks, "content"), ["a", "b"]);
    assert!(reader.is_silent().await, "a stalled stream must send nothing more");
}

#[tokio::test]
async fn dropping_the_fake_releases_a_stalled_stream() {
    let fake = start().await;
    fake.push(Turn::stall(Reply::text(["a", "b"]), 0));
    let mut reader = SseReader::new(post(&fake, &chat_body(true)).await);
    assert_eq!(reader.take(1).await[0].json()["choices"][0]["delta"]["role"], "assistant");
    drop(fake);
    let (events, end) = soon(reader.read_to_end()).await;
    assert!(events.is_empty(), "{events:?}");
    assert_eq!(end, BodyEnd::Broken);
}

#[tokio::test]
async fn cut_ends_the_body_early_without_done() {
    let fake = start().await;
    fake.push(Turn::cut(Reply::text(["a", "b", "c"]), 1));
    let response = post(&fake, &chat_body(true)).await;
    assert_eq!(response.status(), StatusCode::OK);
    let (events, end) = soon(SseReader::new(response).read_to_end()).await;
    assert_eq!(end, BodyEnd::Broken);
    assert_eq!(events.len(), 2, "role chunk and one delta: {events:?}");
    assert_eq!(events[1].json()["choices"][0]["delta"]["content"], "a");
    assert!(events.iter().all(|event| event.data != "[DONE]"));
}

#[tokio::test]
async fn raw_turn_is_sent_verbatim() {
    let raw = "data: {not json\n\ndata: {\"id\":\"x\",\"object\":\"chat.completion.chunk\",\"choices\":[]}\n\n";
    let fake = start().await;
    fake.push(Turn::raw(raw));
    let response = post(&fake, &chat_body(true)).await;
    assert_eq!(response.status(), StatusCode::OK);
    assert_eq!(response.text().await.unwrap(), raw);
}

#[tokio::test]
async fn wrong_or_missing_key_is_rejected_without_consuming_a_turn() {
    let fake = start().await.with_api_key("sk-right-key-0001");
    fake.push(Turn::text(["ok"]));
    let client = reqwest::Client::new();
    let url = format!("{}/chat/completions", fake.url());

    let wrong = client.post(&url).bearer_auth("sk-wrong-key-0002").json(&chat_body(true)).send().await.unwrap();
    assert_eq!(wrong.status(), StatusCode::UNAUTHORIZED);
    let body: Value = wrong.json().await.unwrap();
    assert_eq!(body["error"]["code"], "invalid_api_key");
    assert_eq!(body["error"]["type"], "invalid_request_error");
    assert!(!body["error"]["message"].as_str().unwrap().contains("sk-wrong-key-0002"), "the key is masked");

    let missing = client.post(&url).json(&chat_body(true)).send().await.unwrap();
    assert_eq!(missing.status(), StatusCode::UNAUTHORIZED);
    assert_eq!(fake.remaining_turns(), 1);

    let right = client.post(&url).bearer_auth("sk-right-key-0001").json(&chat_body(true)).send().await.unwrap();
    assert_eq!(deltas(&stream_chunks(right).await, "content"), ["ok"]);
    assert_eq!(fake.remaining_turns(), 0);
}

#[tokio::test]
async fn requests_are_recorded_and_can_be_awaited() {
    let fake = start().await.with_api_key("sk-test");
    fake.push(Turn::text(["one"])).push(Turn::text(["two"]));
    let base = fake.url();
    let without_v1 = base.trim_end_matches("/v1").to_owned();
    let client = reqwest::Client::new();

    let sender = tokio::spawn({
        let client = client.clone();
        async move {
            for url in [format!("{base}/chat/completions"), format!("{without_v1}/chat/completions")] {
                let response = client.post(url).bearer_auth("sk-test").json(&chat_body(true)).send().await.unwrap();
                assert_eq!(response.status(), StatusCode::OK);
                response.bytes().await.unwrap();
            }
        }
    });
    let second = soon(fake.wait_for_request(1)).await;
    assert_eq!(second.path, "/chat/completions");
    soon(sender).await.unwrap();

    let requests = fake.requests();
    assert_eq!(requests.len(), 2);
    assert_eq!(requests[0].path, "/v1/chat/completions");
    assert_eq!(requests[0].header("Authorization"), Some("Bearer sk-test"));
    assert_eq!(requests[0].headers["content-type"], "application/json");
    assert_eq!(requests[0].body, chat_body(true));
}

#[tokio::test]
async fn empty_script_answers_500() {
    let fake = start().await;
    let response = post(&fake, &chat_body(true)).await;
    assert_eq!(response.status(), StatusCode::INTERNAL_SERVER_ERROR);
    let body: Value = response.json().await.unwrap();
    assert_eq!(body["error"]["type"], "server_error");
    let message = body["error"]["message"].as_str().unwrap();
    assert!(message.contains("no scripted turn left"), "{message}");
}

#[tokio::test]
async fn malformed_body_gets_a_400_and_keeps_the_turn() {
    let fake = start().await;
    fake.push(Turn::text(["unused"]));
    let client = reqwest::Client::new();
    let url = format!("{}/chat/completions", fake.url());
    let response = client.post(&url).header("content-type", "application/json").body("{oops").send().await.unwrap();
    assert_eq!(response.status(), StatusCode::BAD_REQUEST);
    assert_eq!(response.json::<Value>().await.unwrap()["error"]["type"], "invalid_request_error");

    let response = client.post(&url).json(&json!({ "model": "gpt-test" })).send().await.unwrap();
    assert_eq!(response.status(), StatusCode::BAD_REQUEST);
    assert_eq!(response.json::<Value>().await.unwrap()["error"]["param"], "messages");
    assert_eq!(fake.remaining_turns(), 1);
    assert!(fake.requests()[0].body.is_null(), "unparseable bodies are recorded as null");
}
