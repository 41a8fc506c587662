//! The fake embeddings endpoint: vectors that let a paraphrase outscore an unrelated text,
//! OpenAI's request forms, errors and limits, faults and recovery, and what it records.

use std::time::{Duration, Instant};

use base64::Engine;
use base64::engine::general_purpose::STANDARD as BASE64;
use ferry_fakes::{EMBEDDING_DIMENSIONS, EMBEDDING_MAX_INPUTS, EmbeddingRequest, FakeEmbeddings, HttpError};
use reqwest::StatusCode;
use serde_json::{Value, json};

use crate::soon;

const KEY: &str = "sk-embed-test-1234";
const MODEL: &str = "text-embedding-3-small";

async fn post_to(url: &str, key: Option<&str>, body: &Value) -> reqwest::Result<reqwest::Response> {
    let mut request = reqwest::Client::new().post(url).json(body);
    if let Some(key) = key {
        request = request.bearer_auth(key);
    }
    soon(request.send()).await
}

/// Posts to `{url}/embeddings`, as Ferry does with `base_url = fake.url()`.
async fn post(fake: &FakeEmbeddings, key: Option<&str>, body: Value) -> (StatusCode, Value) {
    let response = post_to(&format!("{}/embeddings", fake.url()), key, &body).await.expect("send request");
    (response.status(), soon(response.json()).await.expect("a JSON body"))
}

async fn embed_all(fake: &FakeEmbeddings, texts: &[&str]) -> Vec<Vec<f32>> {
    let (status, body) = post(fake, None, json!({ "model": MODEL, "input": texts })).await;
    assert_eq!(status, StatusCode::OK, "{body}");
    body["data"].as_array().unwrap().iter().map(floats).collect()
}

fn floats(item: &Value) -> Vec<f32> {
    item["embedding"].as_array().unwrap().iter().map(|value| value.as_f64().unwrap() as f32).collect()
}

fn cosine(a: &[f32], b: &[f32]) -> f32 {
    a.iter().zip(b).map(|(x, y)| x * y).sum()
}

/// Checks the OpenAI error object: all four fields present, and the type and code given.
fn assert_openai_error(body: &Value, error_type: &str, code: Option<&str>) -> String {
    let error = body["error"].as_object().unwrap_or_else(|| panic!("no error object in {body}"));
    for field in ["message", "type", "param", "code"] {
        assert!(error.contains_key(field), "{field} missing from {body}");
    }
    assert_eq!(error["type"], error_type, "{body}");
    assert_eq!(error["code"].as_str(), code, "{body}");
    error["message"].as_str().unwrap().to_owned()
}

#[tokio::test]
async fn a_paraphrase_sharing_no_keyword_scores_higher_than_an_unrelated_text() {
    let fake = FakeEmbeddings::start().await.unwrap();
    let texts = ["My car is red.", "Automobile colour: crimson", "The weather in Paris is sunny today"];

    // Without synonyms the paraphrase shares nothing with the fact, as keyword search sees it.
    let plain = embed_all(&fake, &texts).await;
    assert!(cosine(&plain[0], &plain[1]).abs() < 0.2, "{}", cosine(&plain[0], &plain[1]));

    fake.set_synonyms(&[&["car", "automobile", "vehicle"], &["red", "crimson", "scarlet"]]);
    let vectors = embed_all(&fake, &texts).await;
    let (paraphrase, unrelated) = (cosine(&vectors[0], &vectors[1]), cosine(&vectors[0], &vectors[2]));
    assert!(paraphrase > 0.6, "paraphrase {paraphrase}");
    assert!(paraphrase > unrelated + 0.4, "paraphrase {paraphrase}, unrelated {unrelated}");
    for vector in &vectors {
        assert_eq!(vector.len(), EMBEDDING_DIMENSIONS);
        assert!((cosine(vector, vector) - 1.0).abs() < 1e-5);
    }
    // The handle computes the same vectors, for tests that need no request.
    assert_eq!(fake.embed(texts[1]), vectors[1]);
    assert_eq!(fake.inputs_embedded(), 6);
}

#[tokio::test]
async fn the_same_text_gets_the_same_vector_from_every_fake() {
    let first = FakeEmbeddings::start().await.unwrap();
    let second = FakeEmbeddings::start().await.unwrap();
    let text = "Ada's sister lives in Lisbon";
    assert_eq!(embed_all(&first, &[text]).await, embed_all(&second, &[text]).await);
}

#[tokio::test]
async fn a_string_input_and_an_array_input_are_both_answered_in_input_order() {
    let fake = FakeEmbeddings::start().await.unwrap();
    let (status, body) = post(&fake, None, json!({ "model": MODEL, "input": "one text" })).await;
    assert_eq!(status, StatusCode::OK);
    assert_eq!(body["object"], "list");
    assert_eq!(body["model"], MODEL);
    assert_eq!(body["data"].as_array().unwrap().len(), 1);
    assert_eq!(body["data"][0]["object"], "embedding");
    assert_eq!(body["data"][0]["index"], 0);
    assert_eq!(floats(&body["data"][0]), fake.embed("one text"));
    assert_eq!(body["usage"], json!({ "prompt_tokens": 2, "total_tokens": 2 }));

    let texts = ["alpha", "bravo charlie", "delta", "echo foxtrot golf"];
    let body = json!({ "model": MODEL, "input": texts, "encoding_format": "float" });
    let (status, body) = post(&fake, None, body).await;
    assert_eq!(status, StatusCode::OK);
    let data = body["data"].as_array().unwrap();
    assert_eq!(data.len(), texts.len());
    for (index, (item, text)) in data.iter().zip(texts).enumerate() {
        assert_eq!(item["index"], index);
        assert_eq!(floats(item), fake.embed(text), "{text}");
    }
    assert_eq!((fake.calls(), fake.inputs_embedded()), (2, 5));
}

#[tokio::test]
async fn base64_encoding_carries_the_same_floats() {
    let fake = FakeEmbeddings::start().await.unwrap();
    let body = json!({ "model": MODEL, "input": ["crimson car"], "encoding_format": "base64" });
    let (status, body) = post(&fake, None, body).await;
    assert_eq!(status, StatusCode::OK);
    let bytes = BASE64.decode(body["data"][0]["embedding"].as_str().unwrap()).unwrap();
    let decoded: Vec<f32> = bytes.chunks_exact(4).map(|chunk| f32::from_le_bytes(chunk.try_into().unwrap())).collect();
    assert_eq!(decoded, fake.embed("crimson car"));
}

#[tokio::test]
async fn the_key_is_checked_once_one_is_set() {
    let fake = FakeEmbeddings::start().await.unwrap().with_api_key(KEY);
    let body = json!({ "model": MODEL, "input": "hello" });

    let (status, missing) = post(&fake, None, body.clone()).await;
    assert_eq!(status, StatusCode::UNAUTHORIZED);
    assert!(assert_openai_error(&missing, "invalid_request_error", None).starts_with("You didn't provide an API key"));

    let (status, wrong) = post(&fake, Some("sk-wrong-key-9876"), body.clone()).await;
    assert_eq!(status, StatusCode::UNAUTHORIZED);
    let message = assert_openai_error(&wrong, "invalid_request_error", Some("invalid_api_key"));
    assert!(message.starts_with("Incorrect API key provided: sk-"), "{message}");
    assert!(!message.contains("sk-wrong-key-9876"), "the key is masked: {message}");

    let (status, _) = post(&fake, Some(KEY), body).await;
    assert_eq!(status, StatusCode::OK);
    assert_eq!((fake.calls(), fake.inputs_embedded()), (3, 1));
    let keys: Vec<Option<String>> = fake.requests().into_iter().map(|request| request.key).collect();
    assert_eq!(keys, [None, Some("sk-wrong-key-9876".into()), Some(KEY.into())]);
}

#[tokio::test]
async fn refused_bodies_get_openai_statuses_and_error_shapes() {
    let fake = FakeEmbeddings::start().await.unwrap().with_model(MODEL);
    let too_many = vec!["word"; EMBEDDING_MAX_INPUTS + 1];
    let too_long = "x".repeat(4 * 8192 + 1);
    let cases = [
        (json!({ "input": "hi" }), StatusCode::BAD_REQUEST, None),
        (json!({ "model": "text-embedding-4", "input": "hi" }), StatusCode::NOT_FOUND, Some("model_not_found")),
        (json!({ "model": MODEL }), StatusCode::BAD_REQUEST, Some("missing_required_parameter")),
        (json!({ "model": MODEL, "input": [] }), StatusCode::BAD_REQUEST, None),
        (json!({ "model": MODEL, "input": "" }), StatusCode::BAD_REQUEST, None),
        (json!({ "model": MODEL, "input": ["fine", ""] }), StatusCode::BAD_REQUEST, None),
        (json!({ "model": MODEL, "input": [[1, 2, 3]] }), StatusCode::BAD_REQUEST, None),
        (json!({ "model": MODEL, "input": too_many }), StatusCode::BAD_REQUEST, Some("array_above_max_length")),
        (json!({ "model": MODEL, "input": "hi", "encoding_format": "int8" }), StatusCode::BAD_REQUEST, None),
        (json!({ "model": MODEL, "input": "hi", "dimensions": 3 }), StatusCode::BAD_REQUEST, None),
        (json!({ "model": MODEL, "input": too_long }), StatusCode::BAD_REQUEST, None),
    ];
    for (body, expected_status, code) in cases {
        let (status, answer) = post(&fake, None, body.clone()).await;
        assert_eq!(status, expected_status, "{body}: {answer}");
        assert_openai_error(&answer, "invalid_request_error", code);
    }
    let response = reqwest::Client::new()
        .post(format!("{}/embeddings", fake.url()))
        .header("content-type", "application/json")
        .body("{not json")
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), StatusCode::BAD_REQUEST);
    assert_openai_error(&response.json().await.unwrap(), "invalid_request_error", None);

    // The limit itself is allowed; refusals embed nothing but are counted as calls.
    let (status, body) =
        post(&fake, None, json!({ "model": MODEL, "input": vec!["word"; EMBEDDING_MAX_INPUTS] })).await;
    assert_eq!(status, StatusCode::OK);
    assert_eq!(body["data"].as_array().unwrap().len(), EMBEDDING_MAX_INPUTS);
    assert_eq!((fake.calls(), fake.inputs_embedded()), (13, EMBEDDING_MAX_INPUTS));
}

#[tokio::test]
async fn a_scripted_error_answers_the_next_valid_request_only() {
    let fake = FakeEmbeddings::start().await.unwrap().with_api_key(KEY);
    fake.push_error(HttpError::new(429, "Rate limit reached for requests").retry_after(3))
        .push_error(HttpError::new(429, "You exceeded your current quota").error_type("insufficient_quota"));
    let body = json!({ "model": MODEL, "input": "hello" });

    // A refused request does not consume the script.
    let (status, _) = post(&fake, None, body.clone()).await;
    assert_eq!(status, StatusCode::UNAUTHORIZED);

    let response = post_to(&format!("{}/embeddings", fake.url()), Some(KEY), &body).await.unwrap();
    assert_eq!(response.status(), StatusCode::TOO_MANY_REQUESTS);
    assert_eq!(response.headers()["retry-after"], "3");
    let message = assert_openai_error(&response.json().await.unwrap(), "requests", Some("rate_limit_exceeded"));
    assert_eq!(message, "Rate limit reached for requests");

    let (status, quota) = post(&fake, Some(KEY), body.clone()).await;
    assert_eq!(status, StatusCode::TOO_MANY_REQUESTS);
    assert_openai_error(&quota, "insufficient_quota", Some("insufficient_quota"));

    let (status, _) = post(&fake, Some(KEY), body).await;
    assert_eq!(status, StatusCode::OK);
    assert_eq!((fake.calls(), fake.inputs_embedded()), (4, 1));
}

#[tokio::test]
async fn a_service_that_is_down_or_drops_connections_recovers() {
    let fake = FakeEmbeddings::start().await.unwrap().with_api_key(KEY);
    let body = json!({ "model": MODEL, "input": ["hello", "world"] });

    fake.set_down(true);
    // Down answers before the key is looked at.
    let (status, answer) = post(&fake, Some("sk-wrong"), body.clone()).await;
    assert_eq!(status, StatusCode::SERVICE_UNAVAILABLE);
    assert_openai_error(&answer, "server_error", None);

    fake.set_drop_connections(true);
    let url = format!("{}/embeddings", fake.url());
    let outcome = match post_to(&url, Some(KEY), &body).await {
        Ok(response) => soon(response.bytes()).await.map(|_| ()),
        Err(error) => Err(error),
    };
    assert!(outcome.is_err(), "the dropped connection reached the client as an answer");

    fake.set_drop_connections(false);
    fake.set_down(false);
    let (status, answer) = post(&fake, Some(KEY), body).await;
    assert_eq!(status, StatusCode::OK);
    assert_eq!(answer["data"].as_array().unwrap().len(), 2);
    assert_eq!((fake.calls(), fake.inputs_embedded()), (3, 2));
}

#[tokio::test]
async fn a_delay_holds_every_answer() {
    let fake = FakeEmbeddings::start().await.unwrap();
    fake.set_delay(Duration::from_millis(300));
    let started = Instant::now();
    let (status, _) = post(&fake, None, json!({ "model": MODEL, "input": "slow" })).await;
    assert_eq!(status, StatusCode::OK);
    assert!(started.elapsed() >= Duration::from_millis(300), "{:?}", started.elapsed());

    // A client that gives up sooner sees a timeout; the request was still recorded.
    let timed_out = reqwest::Client::new()
        .post(format!("{}/embeddings", fake.url()))
        .json(&json!({ "model": MODEL, "input": "slow" }))
        .timeout(Duration::from_millis(50))
        .send()
        .await;
    assert!(timed_out.unwrap_err().is_timeout());
    soon(fake.wait_for_calls(2)).await;
}

#[tokio::test]
async fn requests_are_recorded_with_and_without_the_v1_prefix() {
    let fake = FakeEmbeddings::start().await.unwrap();
    assert!(fake.url().ends_with("/v1"), "{}", fake.url());
    let root = fake.url().trim_end_matches("/v1").to_owned();

    let body = json!({ "model": MODEL, "input": ["Ada likes tea", "Bob likes coffee"] });
    assert_eq!(post_to(&format!("{root}/v1/embeddings"), Some(KEY), &body).await.unwrap().status(), StatusCode::OK);
    let body = json!({ "model": "nomic-embed-text", "input": "plain" });
    assert_eq!(post_to(&format!("{root}/embeddings"), None, &body).await.unwrap().status(), StatusCode::OK);
    let elsewhere = post_to(&format!("{root}/v2/embeddings"), None, &body).await.unwrap();
    assert_eq!(elsewhere.status(), StatusCode::NOT_FOUND);

    soon(fake.wait_for_inputs_embedded(3)).await;
    let expected = [
        EmbeddingRequest {
            path: "/v1/embeddings".into(),
            key: Some(KEY.into()),
            model: MODEL.into(),
            inputs: vec!["Ada likes tea".into(), "Bob likes coffee".into()],
        },
        EmbeddingRequest {
            path: "/embeddings".into(),
            key: None,
            model: "nomic-embed-text".into(),
            inputs: vec!["plain".into()],
        },
    ];
    // The unknown path is not a call.
    assert_eq!(fake.requests(), expected);
    assert_eq!(fake.calls(), 2);
}
