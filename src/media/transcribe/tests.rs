//! The transcriber against the fake OpenAI (`ferry_fakes`), and against a hostile server that
//! echoes the request's headers back, to prove the key never reaches an error.

use std::net::TcpListener;

use axum::Router;
use axum::http::{HeaderMap, StatusCode};
use axum::routing::post;
use ferry_fakes::{FakeOpenAi, FakeServer, HttpError, KeyBehaviour, TranscriptionRequest};

use super::*;

const KEY: &str = "sk-transcribe-secret-0451";

fn config(base_url: &str) -> TranscriptionConfig {
    TranscriptionConfig {
        base_url: base_url.to_owned(),
        api_key: Some(Secret::new(KEY)),
        language: Some("de".into()),
        timeout: 10,
        ..TranscriptionConfig::default()
    }
}

fn no_env() -> Environment {
    Environment::new(Vec::<(String, String)>::new(), "/")
}

fn transcriber(config: &TranscriptionConfig) -> Transcriber {
    Transcriber::new(config, &no_env()).expect("a transcriber")
}

/// Neither the error's message nor its debug form shows the key.
fn assert_hides_key(error: &TranscribeError) {
    let shown = format!("{error} {error:?}");
    assert!(!shown.contains(KEY), "the key leaked: {shown}");
}

#[tokio::test]
async fn a_voice_note_goes_out_as_openai_expects_and_the_transcript_comes_back_trimmed() {
    let fake = FakeOpenAi::start().await.unwrap().with_api_key(KEY);
    fake.set_transcript("  Call me back after lunch.\n");
    let text = transcriber(&config(&fake.url())).transcribe(vec![5; 2048], "voice.oga", "audio/ogg").await;

    assert_eq!(text.as_deref(), Ok("Call me back after lunch."));
    let expected = TranscriptionRequest {
        path: "/v1/audio/transcriptions".into(),
        api_key: Some(KEY.into()),
        parts: vec!["file".into(), "model".into(), "language".into(), "response_format".into()],
        file_name: Some("voice.oga".into()),
        content_type: Some("audio/ogg".into()),
        file_len: 2048,
        model: Some("whisper-1".into()),
        language: Some("de".into()),
        prompt: None,
        response_format: Some("json".into()),
    };
    assert_eq!(fake.transcriptions(), vec![expected]);
}

#[tokio::test]
async fn a_name_without_an_extension_the_api_accepts_gets_one_from_the_type() {
    let fake = FakeOpenAi::start().await.unwrap();
    let mut config = config(&fake.url());
    config.language = None;
    let text = transcriber(&config).transcribe(vec![1; 10], "file_17", "audio/ogg").await.unwrap();

    assert_eq!(text, "Transcript of file_17.ogg (10 bytes).");
    let recorded = &fake.transcriptions()[0];
    assert_eq!(recorded.parts, ["file", "model", "response_format"], "no language part when none is set");
}

#[test]
fn upload_names_keep_accepted_extensions_and_gain_the_types_otherwise() {
    assert_eq!(upload_name("Voice.OGA", "audio/ogg"), "Voice.OGA");
    assert_eq!(upload_name("voice/file_3.oga", "audio/ogg"), "file_3.oga");
    assert_eq!(upload_name("note.opus", "audio/opus"), "note.opus.ogg");
    assert_eq!(upload_name("", "audio/mpeg"), "audio.mp3");
    assert_eq!(upload_name("clip", "video/webm"), "clip.webm");
    assert_eq!(upload_name("mystery.bin", "application/octet-stream"), "mystery.bin");
}

#[tokio::test]
async fn the_key_is_api_key_first_then_the_named_variable_then_none() {
    let fake = FakeOpenAi::start().await.unwrap();
    let env = Environment::new([("WHISPER_KEY", "sk-from-env")], "/");
    let mut config = config(&fake.url());
    config.api_key_env = Some("WHISPER_KEY".into());
    Transcriber::new(&config, &env).unwrap().transcribe(vec![1], "a.ogg", "audio/ogg").await.unwrap();
    config.api_key = None;
    Transcriber::new(&config, &env).unwrap().transcribe(vec![1], "a.ogg", "audio/ogg").await.unwrap();
    config.api_key_env = None;
    Transcriber::new(&config, &env).unwrap().transcribe(vec![1], "a.ogg", "audio/ogg").await.unwrap();

    let keys: Vec<_> = fake.transcriptions().into_iter().map(|request| request.api_key).collect();
    assert_eq!(keys, [Some(KEY.to_owned()), Some("sk-from-env".to_owned()), None]);
}

#[test]
fn a_named_variable_that_is_not_set_is_a_config_error_naming_it() {
    let mut config = config("http://127.0.0.1:9/v1");
    config.api_key = None;
    config.api_key_env = Some("WHISPER_KEY".into());
    for env in [no_env(), Environment::new([("WHISPER_KEY", " ")], "/")] {
        let error = Transcriber::new(&config, &env).unwrap_err();
        assert_eq!(error, TranscribeError::KeyNotSet { variable: "WHISPER_KEY".into() });
        assert_eq!(
            error.to_string(),
            "media.transcription.api_key_env: the environment variable WHISPER_KEY is not set"
        );
    }
}

#[tokio::test]
async fn refusals_carry_the_status_and_the_apis_own_message() {
    let fake = FakeOpenAi::start().await.unwrap().with_api_key(KEY);
    fake.push_transcription_error(HttpError::new(429, "Rate limit reached for whisper-1.").retry_after(1));
    let transcriber = transcriber(&config(&fake.url()));

    let error = transcriber.transcribe(vec![1; 10], "v.ogg", "audio/ogg").await.unwrap_err();
    assert_eq!(error, TranscribeError::Refused { status: 429, message: "Rate limit reached for whisper-1.".into() });
    assert!(error.is_transient());

    let error = transcriber.transcribe(Vec::new(), "v.ogg", "audio/ogg").await.unwrap_err();
    let message = "Audio file is too short. Minimum audio length is 0.1 seconds.".to_owned();
    assert_eq!(error, TranscribeError::Refused { status: 400, message });
    assert!(!error.is_transient());
    assert_eq!(
        error.to_string(),
        "the transcription service answered 400: Audio file is too short. Minimum audio length is 0.1 seconds."
    );
}

#[tokio::test]
async fn a_wrong_key_is_refused_without_showing_it() {
    let fake = FakeOpenAi::start().await.unwrap().with_api_key("sk-the-right-one");
    let error = transcriber(&config(&fake.url())).transcribe(vec![1], "v.ogg", "audio/ogg").await.unwrap_err();
    assert!(
        matches!(&error, TranscribeError::Refused { status: 401, message } if message.contains("Incorrect API key"))
    );
    assert_hides_key(&error);
}

#[tokio::test]
async fn a_service_that_does_not_answer_times_out_at_the_configured_timeout() {
    let fake = FakeOpenAi::start().await.unwrap().with_key(KEY, KeyBehaviour::Stall);
    let mut config = config(&fake.url());
    config.timeout = 1;
    let started = std::time::Instant::now();
    let error = transcriber(&config).transcribe(vec![1; 10], "v.ogg", "audio/ogg").await.unwrap_err();

    assert_eq!(error, TranscribeError::TimedOut(Duration::from_secs(1)));
    assert!(started.elapsed() < Duration::from_secs(5));
    assert!(error.is_transient());
    assert_eq!(error.to_string(), "the transcription took longer than 1 s");
}

#[tokio::test]
async fn an_unreachable_service_is_a_connection_error() {
    let port = TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port();
    let error = transcriber(&config(&format!("http://127.0.0.1:{port}/v1")))
        .transcribe(vec![1], "v.ogg", "audio/ogg")
        .await
        .unwrap_err();
    assert!(
        matches!(&error, TranscribeError::Connection(detail) if detail.starts_with("connection failed")),
        "{error}"
    );
    assert!(error.is_transient());
    assert!(!error.to_string().contains("127.0.0.1"), "no URL in the error: {error}");
}

/// A server that puts the request's `Authorization` header in everything it answers: an
/// OpenAI-shaped error, a plain-text error, a success that is no transcript.
async fn echoing_server() -> FakeServer {
    fn echoed(headers: &HeaderMap) -> String {
        let value = headers.get("authorization").map(|value| value.to_str().unwrap_or_default()).unwrap_or_default();
        format!("you sent {value}")
    }
    let router = Router::new()
        .route(
            "/json/audio/transcriptions",
            post(|headers: HeaderMap| async move {
                let body = serde_json::json!({ "error": { "message": echoed(&headers), "type": "invalid_request_error" } });
                (StatusCode::BAD_REQUEST, axum::Json(body))
            }),
        )
        .route("/plain/audio/transcriptions", post(|headers: HeaderMap| async move { (StatusCode::BAD_GATEWAY, echoed(&headers)) }))
        .route(
            "/success/audio/transcriptions",
            post(|headers: HeaderMap| async move { axum::Json(serde_json::json!({ "text": 7, "note": echoed(&headers) })) }),
        )
        .route(
            "/value/audio/transcriptions",
            post(|headers: HeaderMap| async move { axum::Json(serde_json::json!({ "text": { "x": echoed(&headers) } })) }),
        );
    FakeServer::start(router).await.unwrap()
}

#[tokio::test]
async fn the_key_appears_in_no_error_even_when_the_server_echoes_it() {
    let server = echoing_server().await;
    let mut errors = Vec::new();
    for path in ["json", "plain", "success", "value"] {
        let transcriber = transcriber(&config(&format!("{}/{path}", server.url())));
        errors.push(transcriber.transcribe(vec![1], "v.ogg", "audio/ogg").await.unwrap_err());
    }
    assert_eq!(errors[0], TranscribeError::Refused { status: 400, message: "you sent Bearer ***".into() });
    assert_eq!(errors[1], TranscribeError::Refused { status: 502, message: "you sent Bearer ***".into() });
    assert!(matches!(errors[2], TranscribeError::BadResponse(_)), "{:?}", errors[2]);

    // Every kind, including those built without a server.
    errors.push(TranscribeError::TimedOut(Duration::from_secs(1)));
    errors.push(TranscribeError::KeyNotSet { variable: "WHISPER_KEY".into() });
    let port = TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port();
    let unreachable = transcriber(&config(&format!("http://127.0.0.1:{port}/{KEY}")));
    errors.push(unreachable.transcribe(vec![1], "v.ogg", "audio/ogg").await.unwrap_err());
    for error in &errors {
        assert_hides_key(error);
    }
}

#[test]
fn the_transcribers_debug_form_hides_the_key() {
    let shown = format!("{:?}", transcriber(&config("http://127.0.0.1:9/v1")));
    assert!(!shown.contains(KEY), "{shown}");
    assert!(shown.contains("key: Some(\"***\")"), "{shown}");
    assert!(shown.contains("endpoint: \"http://127.0.0.1:9/v1/audio/transcriptions\""), "{shown}");
}
