//! The fake OpenAI's `POST /v1/audio/transcriptions`: a voice note in, `{"text": …}` out.
//!
//! It holds clients to what OpenAI enforces, with OpenAI's statuses and error texts: the
//! bearer key (the same 401s and per-key faults as the chat route), a multipart/form-data
//! body with a `file` part that is not empty, whose name has an extension the API accepts,
//! at most 25 MiB of content (the parts' bytes together; a 413 past it, with OpenAI's
//! message), and a `model`. `response_format` may be `json` (the default), `text`,
//! `verbose_json`, `srt` or `vtt`.
//!
//! The transcript is [`DEFAULT_TRANSCRIPT`] filled in with the file's name and size (so a
//! test can tell files apart) until a test sets its own. Scripted errors have a queue of
//! their own, separate from the chat route's [`Turn`](crate::Turn)s; a key set to
//! [`KeyBehaviour::Stall`](crate::KeyBehaviour::Stall) holds the request open until the fake
//! is dropped, for client timeouts. Every request is recorded, rejected ones included, as a
//! [`TranscriptionRequest`].

use std::collections::VecDeque;
use std::sync::{Arc, Mutex};

use axum::extract::State;
use axum::extract::multipart::{Multipart, MultipartRejection};
use axum::http::{HeaderMap, HeaderValue, StatusCode, Uri, header};
use axum::response::{IntoResponse, Response};
use serde_json::json;

use crate::keys::Admission;
use crate::model_script::HttpError;
use crate::model_server::{Dialect, Shared, error_response, json_response, lock};
use crate::openai::OpenAiDialect;

/// OpenAI's upload limit for audio: 25 MiB of request content.
pub const TRANSCRIPTION_LIMIT: usize = 26_214_400;

/// The transcript until a test sets one; `{name}` and `{bytes}` are the file's name and size.
pub const DEFAULT_TRANSCRIPT: &str = "Transcript of {name} ({bytes} bytes).";

/// The file extensions OpenAI accepts; it goes by the file's name.
const ACCEPTED_EXTENSIONS: [&str; 10] = ["flac", "m4a", "mp3", "mp4", "mpeg", "mpga", "oga", "ogg", "wav", "webm"];

/// One transcription request as the fake received it, recorded before any check.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct TranscriptionRequest {
    /// The request path, e.g. `/v1/audio/transcriptions`.
    pub path: String,
    /// The `Authorization: Bearer` token, if any.
    pub api_key: Option<String>,
    /// The form's part names in the order they arrived (`file`, `model`, …); empty when the
    /// body was no multipart form.
    pub parts: Vec<String>,
    /// The `file` part's file name and content type, as the client labelled them.
    pub file_name: Option<String>,
    pub content_type: Option<String>,
    /// How many bytes of the `file` part were read (0 without one).
    pub file_len: usize,
    pub model: Option<String>,
    pub language: Option<String>,
    pub prompt: Option<String>,
    pub response_format: Option<String>,
}

/// What the OpenAI fake keeps for its transcription route.
#[derive(Default)]
pub(crate) struct Transcriptions {
    transcript: Mutex<Option<String>>,
    errors: Mutex<VecDeque<HttpError>>,
    requests: Mutex<Vec<TranscriptionRequest>>,
}

impl Transcriptions {
    pub(crate) fn set_transcript(&self, text: Option<String>) {
        *lock(&self.transcript) = text;
    }

    pub(crate) fn push_error(&self, error: HttpError) {
        lock(&self.errors).push_back(error);
    }

    pub(crate) fn requests(&self) -> Vec<TranscriptionRequest> {
        lock(&self.requests).clone()
    }
}

/// OpenAI's error object.
fn error(status: StatusCode, message: &str, error_type: &str, param: Option<&str>, code: Option<&str>) -> Response {
    json_response(status, json!({ "error": { "message": message, "type": error_type, "param": param, "code": code } }))
}

fn invalid(message: &str, param: Option<&str>, code: Option<&str>) -> Response {
    error(StatusCode::BAD_REQUEST, message, "invalid_request_error", param, code)
}

/// The form as far as it could be read, and why reading stopped early, if it did.
async fn read_form(request: &mut TranscriptionRequest, multipart: &mut Multipart) -> Result<usize, String> {
    let mut content = 0usize;
    while let Some(mut field) = multipart.next_field().await.map_err(|error| error.body_text())? {
        let name = field.name().unwrap_or_default().to_owned();
        request.parts.push(name.clone());
        if name == "file" {
            request.file_name = field.file_name().map(str::to_owned);
            request.content_type = field.content_type().map(str::to_owned);
        }
        let mut value = Vec::new();
        while let Some(chunk) = field.chunk().await.map_err(|error| error.body_text())? {
            content += chunk.len();
            if name == "file" {
                request.file_len += chunk.len();
            } else if value.len() < 4096 {
                value.extend_from_slice(&chunk);
            }
        }
        let value = String::from_utf8_lossy(&value).into_owned();
        match name.as_str() {
            "model" => request.model = Some(value),
            "language" => request.language = Some(value),
            "prompt" => request.prompt = Some(value),
            "response_format" => request.response_format = Some(value),
            _ => {}
        }
    }
    Ok(content)
}

/// The route's handler: read and record the form, authenticate, check it as OpenAI does,
/// then answer a scripted error, a stall, or the transcript.
pub(crate) async fn handle(
    State(shared): State<Arc<Shared<OpenAiDialect>>>,
    uri: Uri,
    headers: HeaderMap,
    multipart: Result<Multipart, MultipartRejection>,
) -> Response {
    let mut request = TranscriptionRequest {
        path: uri.path().to_owned(),
        api_key: OpenAiDialect::presented_key(&headers).map(str::to_owned),
        ..TranscriptionRequest::default()
    };
    // The whole body is read before answering, as a client still sending would otherwise see
    // its connection reset instead of the answer.
    let read = match multipart {
        Ok(mut multipart) => Some(read_form(&mut request, &mut multipart).await),
        Err(_) => None,
    };
    lock(&shared.provider.requests).push(request.clone());

    let admission = lock(&shared.keys).admit(request.api_key.as_deref());
    match admission {
        Admission::Serve | Admission::Stall => {}
        Admission::Unauthorized => return OpenAiDialect::unauthorized(&headers).into_response(),
        Admission::Fault(fault) => {
            return OpenAiDialect::key_fault(fault, request.model.as_deref().unwrap_or("whisper-1"));
        }
    }
    let content = match read {
        None => return invalid("Could not parse multipart form", None, None),
        Some(Err(_)) if request.file_len > TRANSCRIPTION_LIMIT => return too_large(request.file_len),
        Some(Err(_)) => return invalid("Could not parse multipart form", None, None),
        Some(Ok(content)) => content,
    };
    if content > TRANSCRIPTION_LIMIT {
        return too_large(content);
    }
    if let Some(refusal) = refusal(&request) {
        return refusal;
    }
    if admission == Admission::Stall {
        // Like a stalled chat request: no scripted error is consumed.
        let mut closing = shared.closing.subscribe();
        let _ = closing.wait_for(|closing| *closing).await;
        return invalid("The fake is shutting down.", None, None);
    }
    let scripted = lock(&shared.provider.errors).pop_front();
    if let Some(scripted) = scripted {
        return error_response::<OpenAiDialect>(&scripted);
    }
    let name = request.file_name.clone().unwrap_or_default();
    let text = lock(&shared.provider.transcript).clone().unwrap_or_else(|| {
        DEFAULT_TRANSCRIPT.replace("{name}", &name).replace("{bytes}", &request.file_len.to_string())
    });
    render(&request, &text)
}

fn too_large(read: usize) -> Response {
    let message = format!("Maximum content size limit ({TRANSCRIPTION_LIMIT}) exceeded ({read} bytes read)");
    error(StatusCode::PAYLOAD_TOO_LARGE, &message, "server_error", None, None)
}

/// OpenAI's answer to a readable form it refuses, checked in its order: model, file, format,
/// length.
fn refusal(request: &TranscriptionRequest) -> Option<Response> {
    if request.model.as_deref().is_none_or(str::is_empty) {
        return Some(invalid("you must provide a model parameter", None, None));
    }
    if !request.parts.iter().any(|part| part == "file") {
        return Some(invalid(
            "1 validation error for Request\nbody -> file\n  field required (type=value_error.missing)",
            None,
            None,
        ));
    }
    let extension =
        request.file_name.as_deref().and_then(|name| name.rsplit_once('.')).map(|(_, ext)| ext.to_lowercase());
    if !extension.is_some_and(|extension| ACCEPTED_EXTENSIONS.contains(&extension.as_str())) {
        let formats = ACCEPTED_EXTENSIONS.map(|extension| format!("'{extension}'")).join(", ");
        return Some(invalid(&format!("Invalid file format. Supported formats: [{formats}]"), None, None));
    }
    if request.file_len == 0 {
        return Some(invalid(
            "Audio file is too short. Minimum audio length is 0.1 seconds.",
            Some("file"),
            Some("audio_too_short"),
        ));
    }
    None
}

/// The transcript in the requested `response_format`.
fn render(request: &TranscriptionRequest, text: &str) -> Response {
    let plain = |body: String, content_type: &'static str| {
        let mut response = (StatusCode::OK, body).into_response();
        response.headers_mut().insert(header::CONTENT_TYPE, HeaderValue::from_static(content_type));
        response
    };
    match request.response_format.as_deref().unwrap_or("json") {
        "json" => json_response(StatusCode::OK, json!({ "text": text })),
        "text" => plain(format!("{text}\n"), "text/plain; charset=utf-8"),
        "verbose_json" => json_response(
            StatusCode::OK,
            json!({
                "task": "transcribe",
                "language": request.language.as_deref().unwrap_or("english"),
                "duration": 1.0,
                "text": text,
                "segments": [{ "id": 0, "start": 0.0, "end": 1.0, "text": text }],
            }),
        ),
        "srt" => plain(format!("1\n00:00:00,000 --> 00:00:01,000\n{text}\n\n"), "text/plain; charset=utf-8"),
        "vtt" => plain(format!("WEBVTT\n\n00:00:00.000 --> 00:00:01.000\n{text}\n\n"), "text/vtt; charset=utf-8"),
        other => invalid(
            &format!(
                "Invalid value: '{other}'. Supported values are: 'json', 'text', 'srt', 'verbose_json', and 'vtt'."
            ),
            Some("response_format"),
            Some("invalid_value"),
        ),
    }
}
