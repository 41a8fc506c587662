//! Voice notes and audio as text, through an OpenAI-compatible transcription endpoint
//! (`[media.transcription]`: OpenAI, Groq, a local whisper server), so a model without audio
//! input still hears what the user said (issue 23).
//!
//! One request per file: `POST {base_url}/audio/transcriptions` as multipart/form-data with
//! the parts `file`, `model`, `response_format=json` and, when configured, `language`; the
//! answer is `{"text": "…"}`. The whole exchange, upload included, is bounded by the
//! configured timeout.
//!
//! The API key never leaves this module except in the `Authorization` header: [`Transcriber`]
//! prints it as `***`, and every [`TranscribeError`] has it masked out of whatever the server
//! answered, so an error can be logged or shown as it is.
//!
//! ```no_run
//! # async fn demo(config: &ferry::config::TranscriptionConfig, voice: Vec<u8>) -> Result<(), ferry::media::TranscribeError> {
//! use ferry::config::Environment;
//! let transcriber = ferry::media::Transcriber::new(config, &Environment::from_process())?;
//! let text = transcriber.transcribe(voice, "voice.oga", "audio/ogg").await?;
//! println!("[transcript] {text}");
//! # Ok(()) }
//! ```

use std::fmt;
use std::sync::Arc;
use std::time::Duration;

use reqwest::multipart::{Form, Part};
use serde::Deserialize;

use crate::config::{Environment, REDACTED, Secret, TranscriptionConfig};

/// How long establishing a connection may take, as for the model providers; the configured
/// timeout bounds the whole request.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(15);

/// The most characters of a server's error message kept in a [`TranscribeError`].
const MESSAGE_LIMIT: usize = 300;

/// The file extensions OpenAI's endpoint accepts; it judges a file by its name, so a name
/// without one of these is refused even when the bytes are fine (OpenAI's API reference,
/// "Create transcription").
const ACCEPTED_EXTENSIONS: [&str; 10] = ["flac", "m4a", "mp3", "mp4", "mpeg", "mpga", "oga", "ogg", "wav", "webm"];

/// Why a recording has no transcript.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum TranscribeError {
    /// `api_key_env` names a variable that is not set (or empty): a configuration error,
    /// reported when the transcriber is built.
    #[error("media.transcription.api_key_env: the environment variable {variable} is not set")]
    KeyNotSet { variable: String },
    /// The service answered with an error status. `message` is its own explanation (the
    /// `error.message` of OpenAI's error shape, else the body's first line).
    #[error("the transcription service answered {status}: {message}")]
    Refused { status: u16, message: String },
    /// No complete answer within the configured timeout.
    #[error("the transcription took longer than {} s", .0.as_secs())]
    TimedOut(Duration),
    /// The service could not be reached, or the connection broke.
    #[error("cannot reach the transcription service: {0}")]
    Connection(String),
    /// A success status, but no `{"text": …}` in the body.
    #[error("the transcription service's answer has no transcript: {0}")]
    BadResponse(String),
}

impl TranscribeError {
    /// Whether the same request may succeed later: a timeout, a connection failure, a rate
    /// limit or a server error. The others will fail again as they are.
    pub fn is_transient(&self) -> bool {
        match self {
            Self::TimedOut(_) | Self::Connection(_) => true,
            Self::Refused { status, .. } => *status == 429 || *status >= 500,
            Self::KeyNotSet { .. } | Self::BadResponse(_) => false,
        }
    }
}

/// A client for `[media.transcription]`. Cheap to clone (the connection pool and settings
/// are shared), so one can serve every chat.
#[derive(Clone)]
pub struct Transcriber {
    client: reqwest::Client,
    settings: Arc<Settings>,
}

struct Settings {
    /// `{base_url}/audio/transcriptions`.
    endpoint: String,
    /// `None` for a server that needs no key (a local whisper server).
    key: Option<Secret>,
    model: String,
    language: Option<String>,
    timeout: Duration,
}

impl fmt::Debug for Transcriber {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let settings = &self.settings;
        f.debug_struct("Transcriber")
            .field("endpoint", &settings.endpoint)
            .field("key", &settings.key.as_ref().map(|_| REDACTED))
            .field("model", &settings.model)
            .field("language", &settings.language)
            .field("timeout", &settings.timeout)
            .finish()
    }
}

impl Transcriber {
    /// A transcriber for `config`. The key is `api_key` if set, else the value of the
    /// variable `api_key_env` names (which must then be set: [`TranscribeError::KeyNotSet`]),
    /// else none at all, for servers that need none.
    pub fn new(config: &TranscriptionConfig, env: &Environment) -> Result<Self, TranscribeError> {
        let key = Secret::resolve(config.api_key.as_ref(), config.api_key_env.as_deref(), env)
            .map_err(|variable| TranscribeError::KeyNotSet { variable })?;
        let client = reqwest::Client::builder()
            .connect_timeout(CONNECT_TIMEOUT)
            .user_agent(concat!("ferry/", env!("CARGO_PKG_VERSION")))
            .build()
            // Fails only if the TLS backend cannot initialize: a broken binary, not a runtime
            // condition (as for the model providers).
            .unwrap_or_default();
        let settings = Settings {
            endpoint: format!("{}/audio/transcriptions", config.base_url.trim_end_matches('/')),
            key,
            model: config.model.clone(),
            language: config.language.clone().filter(|language| !language.trim().is_empty()),
            timeout: Duration::from_secs(config.timeout.max(1)),
        };
        Ok(Self { client, settings: Arc::new(settings) })
    }

    /// The text spoken in `bytes`, trimmed (possibly empty: silence). `file_name` and
    /// `mime_type` describe the recording; when the name lacks an extension the service
    /// accepts, one is added from the type (`voice` + `audio/ogg` is sent as `voice.ogg`).
    pub async fn transcribe(
        &self,
        bytes: Vec<u8>,
        file_name: &str,
        mime_type: &str,
    ) -> Result<String, TranscribeError> {
        let settings = &self.settings;
        let mime_type = if is_mime_type(mime_type) { mime_type } else { "application/octet-stream" };
        let file = Part::bytes(bytes)
            .file_name(upload_name(file_name, mime_type))
            .mime_str(mime_type)
            .map_err(|error| TranscribeError::Connection(self.redact(&error.to_string())))?;
        let mut form = Form::new().part("file", file).text("model", settings.model.clone());
        if let Some(language) = &settings.language {
            form = form.text("language", language.clone());
        }
        form = form.text("response_format", "json");
        let mut request = self.client.post(&settings.endpoint).multipart(form).timeout(settings.timeout);
        if let Some(key) = &settings.key {
            request = request.bearer_auth(key.expose());
        }
        let response = request.send().await.map_err(|error| self.transport_error(&error))?;
        let status = response.status();
        let body = response.bytes().await.map_err(|error| self.transport_error(&error))?;
        if !status.is_success() {
            let message = self.redact(&error_message(&body));
            return Err(TranscribeError::Refused { status: status.as_u16(), message });
        }
        #[derive(Deserialize)]
        struct Transcript {
            text: String,
        }
        match serde_json::from_slice::<Transcript>(&body) {
            Ok(transcript) => Ok(transcript.text.trim().to_owned()),
            Err(error) => Err(TranscribeError::BadResponse(self.redact(&format!("expected {{\"text\": …}}: {error}")))),
        }
    }

    /// A failure to send or to read, described without the URL, with the key masked.
    fn transport_error(&self, error: &reqwest::Error) -> TranscribeError {
        if error.is_timeout() {
            return TranscribeError::TimedOut(self.settings.timeout);
        }
        let mut detail = if error.is_connect() { "connection failed" } else { "request failed" }.to_owned();
        let mut cause = std::error::Error::source(error);
        let mut innermost = None;
        while let Some(inner) = cause {
            innermost = Some(inner.to_string());
            cause = inner.source();
        }
        if let Some(innermost) = innermost {
            detail = format!("{detail}: {innermost}");
        }
        TranscribeError::Connection(self.redact(&detail))
    }

    /// `text` with every occurrence of the key replaced by `***`: a server (or a proxy) may
    /// echo the request's headers back.
    fn redact(&self, text: &str) -> String {
        match &self.settings.key {
            Some(key) if !key.is_blank() => text.replace(key.expose(), REDACTED),
            _ => text.to_owned(),
        }
    }
}

/// The `error.message` of OpenAI's error shape, else the body's first line; at most
/// [`MESSAGE_LIMIT`] characters.
pub(crate) fn error_message(body: &[u8]) -> String {
    let parsed: Option<serde_json::Value> = serde_json::from_slice(body).ok();
    let message = parsed
        .as_ref()
        .and_then(|value| value.get("error"))
        .and_then(|error| error.get("message").and_then(serde_json::Value::as_str).or_else(|| error.as_str()))
        .map(str::to_owned)
        .unwrap_or_else(|| String::from_utf8_lossy(body).lines().next().unwrap_or_default().trim().to_owned());
    let message = if message.is_empty() { "no explanation given".to_owned() } else { message };
    match message.char_indices().nth(MESSAGE_LIMIT) {
        Some((cut, _)) => format!("{}…", &message[..cut]),
        None => message,
    }
}

/// `type/subtype` made of token characters, which reqwest accepts as a part's type.
fn is_mime_type(text: &str) -> bool {
    let token =
        |part: &str| !part.is_empty() && part.bytes().all(|b| b.is_ascii_alphanumeric() || b"!#$&^_.+-".contains(&b));
    text.split_once('/').is_some_and(|(kind, subtype)| token(kind) && token(subtype))
}

/// The name to upload the file as: `file_name` if its extension is one the service accepts,
/// else with the extension that `mime_type` implies appended (unchanged when none is known).
fn upload_name(file_name: &str, mime_type: &str) -> String {
    let file_name = file_name.rsplit(['/', '\\']).next().unwrap_or_default().trim();
    let file_name = if file_name.is_empty() { "audio" } else { file_name };
    let extension = file_name.rsplit_once('.').map(|(_, extension)| extension.to_ascii_lowercase());
    if extension.is_some_and(|extension| ACCEPTED_EXTENSIONS.contains(&extension.as_str())) {
        return file_name.to_owned();
    }
    let implied = match mime_type.to_ascii_lowercase().as_str() {
        "audio/ogg" | "audio/opus" | "application/ogg" => "ogg",
        "audio/mpeg" | "audio/mp3" => "mp3",
        "audio/mp4" | "audio/m4a" | "audio/x-m4a" => "m4a",
        "video/mp4" => "mp4",
        "audio/wav" | "audio/x-wav" | "audio/wave" | "audio/vnd.wave" => "wav",
        "audio/webm" | "video/webm" => "webm",
        "audio/flac" | "audio/x-flac" => "flac",
        _ => return file_name.to_owned(),
    };
    format!("{file_name}.{implied}")
}

#[cfg(test)]
mod tests;
