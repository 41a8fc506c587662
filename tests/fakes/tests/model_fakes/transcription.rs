//! The fake OpenAI's `/v1/audio/transcriptions`: OpenAI's checks, errors and limits, the
//! settable transcript, scripted faults, and what it records.

use std::time::Duration;

use ferry_fakes::{FakeOpenAi, HttpError, KeyBehaviour, TRANSCRIPTION_LIMIT, TranscriptionRequest};
use reqwest::StatusCode;
use reqwest::multipart::{Form, Part};
use serde_json::Value;

use crate::soon;

const KEY: &str = "sk-audio-test-1234";

fn voice(bytes: Vec<u8>, name: &str) -> Part {
    Part::bytes(bytes).file_name(name.to_owned()).mime_str("audio/ogg").unwrap()
}

fn form(file: Part) -> Form {
    Form::new().part("file", file).text("model", "whisper-1")
}

async fn post(fake: &FakeOpenAi, key: Option<&str>, form: Form) -> reqwest::Response {
    let mut request = reqwest::Client::new().post(format!("{}/audio/transcriptions", fake.url())).multipart(form);
    if let Some(key) = key {
        request = request.bearer_auth(key);
    }
    soon(request.send()).await.expect("send request")
}

async fn status_and_json(response: reqwest::Response) -> (StatusCode, Value) {
    (response.status(), response.json().await.expect("a JSON body"))
}

#[tokio::test]
async fn a_voice_note_is_transcribed_with_a_default_naming_the_file_and_recorded() {
    let fake = FakeOpenAi::start().await.unwrap().with_api_key(KEY);
    let form = form(voice(vec![7; 1234], "voice.oga")).text("language", "de").text("response_format", "json");
    let (status, body) = status_and_json(post(&fake, Some(KEY), form).await).await;

    assert_eq!(status, StatusCode::OK);
    assert_eq!(body, serde_json::json!({ "text": "Transcript of voice.oga (1234 bytes)." }));
    let expected = TranscriptionRequest {
        path: "/v1/audio/transcriptions".into(),
        api_key: Some(KEY.into()),
        parts: vec!["file".into(), "model".into(), "language".into(), "response_format".into()],
        file_name: Some("voice.oga".into()),
        content_type: Some("audio/ogg".into()),
        file_len: 1234,
        model: Some("whisper-1".into()),
        language: Some("de".into()),
        prompt: None,
        response_format: Some("json".into()),
    };
    assert_eq!(fake.transcriptions(), vec![expected]);
}

#[tokio::test]
async fn a_test_sets_the_transcript_and_can_ask_for_plain_text() {
    let fake = FakeOpenAi::start().await.unwrap();
    fake.set_transcript("  Buy milk, please.  ");
    let response = post(&fake, None, form(voice(vec![1; 10], "a.mp3")).text("response_format", "text")).await;
    assert_eq!(response.status(), StatusCode::OK);
    assert_eq!(response.text().await.unwrap(), "  Buy milk, please.  \n");

    fake.clear_transcript();
    let (_, body) = status_and_json(post(&fake, None, form(voice(vec![1; 3], "b.wav"))).await).await;
    assert_eq!(body["text"], "Transcript of b.wav (3 bytes).");
}

#[tokio::test]
async fn the_key_is_required_as_on_the_chat_route() {
    let fake = FakeOpenAi::start().await.unwrap().with_api_key(KEY);
    let (status, body) = status_and_json(post(&fake, None, form(voice(vec![1; 10], "v.ogg"))).await).await;
    assert_eq!(status, StatusCode::UNAUTHORIZED);
    assert!(body["error"]["message"].as_str().unwrap().starts_with("You didn't provide an API key."));

    let (status, body) =
        status_and_json(post(&fake, Some("sk-wrong-key-9876"), form(voice(vec![1; 10], "v.ogg"))).await).await;
    assert_eq!(status, StatusCode::UNAUTHORIZED);
    assert_eq!(body["error"]["code"], "invalid_api_key");
    assert!(body["error"]["message"].as_str().unwrap().contains("sk-**********9876"));
    assert_eq!(fake.transcriptions().len(), 2, "refused requests are recorded too");
}

#[tokio::test]
async fn forms_openai_would_refuse_get_its_400s() {
    let fake = FakeOpenAi::start().await.unwrap();
    let cases: Vec<(Form, &str, Option<&str>)> = vec![
        (Form::new().text("model", "whisper-1"), "body -> file\n  field required", None),
        (Form::new().part("file", voice(vec![1; 10], "v.ogg")), "you must provide a model parameter", None),
        (form(voice(Vec::new(), "v.ogg")), "Audio file is too short.", Some("audio_too_short")),
        (form(voice(vec![1; 10], "voice")), "Invalid file format. Supported formats: ['flac', 'm4a',", None),
        (form(voice(vec![1; 10], "v.opus")), "Invalid file format.", None),
        (
            form(voice(vec![1; 10], "v.ogg")).text("response_format", "xml"),
            "Invalid value: 'xml'.",
            Some("invalid_value"),
        ),
    ];
    for (form, message, code) in cases {
        let (status, body) = status_and_json(post(&fake, None, form).await).await;
        assert_eq!(status, StatusCode::BAD_REQUEST, "{body}");
        assert_eq!(body["error"]["type"], "invalid_request_error");
        assert!(body["error"]["message"].as_str().unwrap().contains(message), "{body}");
        assert_eq!(body["error"]["code"].as_str(), code, "{body}");
    }

    let response = reqwest::Client::new()
        .post(format!("{}/audio/transcriptions", fake.url()))
        .json(&serde_json::json!({ "model": "whisper-1" }))
        .send()
        .await
        .unwrap();
    let (status, body) = status_and_json(response).await;
    assert_eq!(
        (status, body["error"]["message"].as_str()),
        (StatusCode::BAD_REQUEST, Some("Could not parse multipart form"))
    );
}

#[tokio::test]
async fn more_than_25_mib_is_refused_with_openais_413() {
    let fake = FakeOpenAi::start().await.unwrap();
    let (status, body) =
        status_and_json(post(&fake, None, form(voice(vec![0; TRANSCRIPTION_LIMIT + 1], "big.mp3"))).await).await;
    assert_eq!(status, StatusCode::PAYLOAD_TOO_LARGE);
    assert_eq!(body["error"]["type"], "server_error");
    let message = body["error"]["message"].as_str().unwrap();
    assert!(message.starts_with("Maximum content size limit (26214400) exceeded ("), "{message}");

    // A file a little under the limit passes (the limit counts the form's parts together).
    let (status, _) =
        status_and_json(post(&fake, None, form(voice(vec![0; TRANSCRIPTION_LIMIT - 64], "ok.mp3"))).await).await;
    assert_eq!(status, StatusCode::OK);
}

#[tokio::test]
async fn scripted_errors_and_key_faults_apply_to_transcriptions() {
    let fake = FakeOpenAi::start()
        .await
        .unwrap()
        .with_api_key(KEY)
        .with_key("key-limited", KeyBehaviour::RateLimited { retry_after_secs: 3 });
    fake.push_transcription_error(HttpError::new(429, "Slow down.").retry_after(2))
        .push_transcription_error(HttpError::new(500, "The server had an error while processing your request."));

    let response = post(&fake, Some(KEY), form(voice(vec![1; 10], "v.ogg"))).await;
    assert_eq!(response.headers()["retry-after"], "2");
    let (status, body) = status_and_json(response).await;
    assert_eq!((status, body["error"]["code"].as_str()), (StatusCode::TOO_MANY_REQUESTS, Some("rate_limit_exceeded")));

    let (status, body) = status_and_json(post(&fake, Some(KEY), form(voice(vec![1; 10], "v.ogg"))).await).await;
    assert_eq!((status, body["error"]["type"].as_str()), (StatusCode::INTERNAL_SERVER_ERROR, Some("server_error")));

    let (status, body) =
        status_and_json(post(&fake, Some("key-limited"), form(voice(vec![1; 10], "v.ogg"))).await).await;
    assert_eq!(status, StatusCode::TOO_MANY_REQUESTS);
    assert!(body["error"]["message"].as_str().unwrap().starts_with("Rate limit reached for whisper-1"), "{body}");

    let (status, _) = status_and_json(post(&fake, Some(KEY), form(voice(vec![1; 10], "v.ogg"))).await).await;
    assert_eq!(status, StatusCode::OK, "the script is used up");
}

#[tokio::test]
async fn a_stalled_key_holds_the_request_until_the_client_gives_up() {
    let fake = FakeOpenAi::start().await.unwrap().with_key("key-stall", KeyBehaviour::Stall);
    let request = reqwest::Client::new()
        .post(format!("{}/audio/transcriptions", fake.url()))
        .bearer_auth("key-stall")
        .multipart(form(voice(vec![1; 10], "v.ogg")))
        .timeout(Duration::from_millis(200));
    let error = soon(request.send()).await.expect_err("no answer while stalled");
    assert!(error.is_timeout(), "{error}");
    assert_eq!(fake.transcriptions().len(), 1);
}

#[tokio::test]
async fn the_chat_script_is_not_consumed_by_transcriptions() {
    let fake = FakeOpenAi::start().await.unwrap();
    fake.push(ferry_fakes::Turn::text(["hi"]));
    let (status, _) = status_and_json(post(&fake, None, form(voice(vec![1; 10], "v.ogg"))).await).await;
    assert_eq!(status, StatusCode::OK);
    assert_eq!(fake.remaining_turns(), 1);
    assert!(fake.requests().is_empty(), "chat requests and transcriptions are logged apart");
}
