//! Vectors for memory search, from an OpenAI-compatible `POST {base_url}/embeddings`
//! (OpenAI, Ollama, vLLM, LM Studio), and the background task that keeps every chunk
//! embedded under the configured model.
//!
//! The promise: embeddings only ever add to search. A chunk is embedded once per text and
//! model (the store keys vectors by both), a changed model embeds everything again here in
//! the background while search keeps answering from keywords, and an endpoint that fails
//! is retried with backoff and logged, never surfaced as an error to a user or the model.

use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use serde::Deserialize;
use tokio::sync::Notify;
use tokio_util::sync::CancellationToken;

use crate::config::{EmbeddingsConfig, Environment, REDACTED, Secret};
use crate::media::transcribe::error_message;
use crate::state::memory::MemoryStore;

/// How long establishing a connection to the endpoint may take.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(10);
/// How long embedding one batch in the background may take.
const BATCH_TIMEOUT: Duration = Duration::from_secs(60);
/// Chunk texts sent in one request (OpenAI takes up to 2,048; local servers fewer).
const BATCH: usize = 32;
/// The longest pause between attempts while the endpoint keeps failing.
const MAX_BACKOFF: Duration = Duration::from_secs(300);
/// How often the indexer looks for unembedded text with no write to wake it (another
/// replica's writes, a changed model).
const IDLE_CHECK: Duration = Duration::from_secs(60);

/// Why texts got no vectors.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum EmbedError {
    #[error("the embeddings key is not set: the environment variable {variable} is empty or missing")]
    KeyNotSet { variable: String },
    #[error("the embeddings endpoint could not be reached: {0}")]
    Connection(String),
    #[error("the embeddings endpoint did not answer within {0:?}")]
    TimedOut(Duration),
    #[error("the embeddings endpoint refused the request ({status}): {message}")]
    Refused { status: u16, message: String },
    #[error("the embeddings endpoint answered something unreadable: {0}")]
    BadResponse(String),
}

/// A client of one embeddings endpoint and model. Cheap to clone.
#[derive(Clone)]
pub struct Embedder {
    client: reqwest::Client,
    /// `{base_url}/embeddings`.
    endpoint: Arc<str>,
    key: Option<Secret>,
    model: Arc<str>,
}

impl std::fmt::Debug for Embedder {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Embedder")
            .field("endpoint", &self.endpoint)
            .field("key", &self.key.as_ref().map(|_| REDACTED))
            .field("model", &self.model)
            .finish()
    }
}

impl Embedder {
    /// A client for `config`; the key is `api_key`, else the variable `api_key_env` names
    /// (which must then be set), else none (a local server).
    pub fn new(config: &EmbeddingsConfig, env: &Environment) -> Result<Self, EmbedError> {
        let key = Secret::resolve(config.api_key.as_ref(), config.api_key_env.as_deref(), env)
            .map_err(|variable| EmbedError::KeyNotSet { variable })?;
        let client = reqwest::Client::builder()
            .connect_timeout(CONNECT_TIMEOUT)
            .user_agent(concat!("ferry/", env!("CARGO_PKG_VERSION")))
            .build()
            // Fails only if the TLS backend cannot initialize: a broken binary.
            .unwrap_or_default();
        Ok(Self {
            client,
            endpoint: format!("{}/embeddings", config.base_url.trim_end_matches('/')).into(),
            key,
            model: config.model.trim().into(),
        })
    }

    /// The model vectors are kept under.
    pub fn model(&self) -> &str {
        &self.model
    }

    /// One vector per text, in order, within `timeout`.
    pub async fn embed(&self, texts: &[String], timeout: Duration) -> Result<Vec<Vec<f32>>, EmbedError> {
        let result = self.request(texts, timeout).await;
        crate::metrics::metrics().memory_embedding_call(result.is_ok());
        result
    }

    async fn request(&self, texts: &[String], timeout: Duration) -> Result<Vec<Vec<f32>>, EmbedError> {
        if texts.is_empty() {
            return Ok(Vec::new());
        }
        let body = serde_json::json!({ "model": &*self.model, "input": texts, "encoding_format": "float" });
        let mut request = self.client.post(&*self.endpoint).json(&body).timeout(timeout);
        if let Some(key) = &self.key {
            request = request.bearer_auth(key.expose());
        }
        let response = request.send().await.map_err(|error| self.transport_error(&error, timeout))?;
        let status = response.status();
        let body = response.bytes().await.map_err(|error| self.transport_error(&error, timeout))?;
        if !status.is_success() {
            return Err(EmbedError::Refused { status: status.as_u16(), message: self.redact(&error_message(&body)) });
        }
        #[derive(Deserialize)]
        struct Item {
            index: usize,
            embedding: Vec<f32>,
        }
        #[derive(Deserialize)]
        struct Answer {
            data: Vec<Item>,
        }
        let answer: Answer = serde_json::from_slice(&body).map_err(|error| {
            EmbedError::BadResponse(format!("expected {{\"data\": [{{\"embedding\": …}}]}}: {error}"))
        })?;
        let mut vectors = vec![Vec::new(); texts.len()];
        for item in answer.data {
            match vectors.get_mut(item.index) {
                Some(slot) if slot.is_empty() && !item.embedding.is_empty() => *slot = item.embedding,
                _ => return Err(EmbedError::BadResponse(format!("an unexpected or repeated index {}", item.index))),
            }
        }
        if vectors.iter().any(Vec::is_empty) {
            return Err(EmbedError::BadResponse(format!("fewer vectors than the {} texts sent", texts.len())));
        }
        Ok(vectors)
    }

    fn transport_error(&self, error: &reqwest::Error, timeout: Duration) -> EmbedError {
        if error.is_timeout() {
            return EmbedError::TimedOut(timeout);
        }
        let what = if error.is_connect() { "connection failed" } else { "request failed" };
        let mut innermost = None;
        let mut cause = std::error::Error::source(error);
        while let Some(inner) = cause {
            innermost = Some(inner.to_string());
            cause = inner.source();
        }
        let detail = innermost.map_or_else(|| what.to_owned(), |inner| format!("{what}: {inner}"));
        EmbedError::Connection(self.redact(&detail))
    }

    /// `text` with the key masked: a server or proxy may echo headers back.
    fn redact(&self, text: &str) -> String {
        match &self.key {
            Some(key) if !key.is_blank() => text.replace(key.expose(), REDACTED),
            _ => text.to_owned(),
        }
    }
}

/// What `/healthz` shows of the index: how much is embedded under the model, and the
/// endpoint's last failure while it keeps failing.
#[derive(Debug, Clone, Default)]
pub struct IndexHealth {
    pub model: Option<String>,
    pub last_error: Option<String>,
}

/// The shared, updatable [`IndexHealth`].
pub type IndexState = Arc<Mutex<IndexHealth>>;

/// Keeps every chunk (of every scope) embedded under `embedder`'s model until `stop`:
/// woken by `written` after a write, and every [`IDLE_CHECK`] otherwise.
pub async fn keep_embedded(
    store: Arc<dyn MemoryStore>,
    embedder: Embedder,
    written: Arc<Notify>,
    state: IndexState,
    stop: CancellationToken,
) {
    state.lock().unwrap_or_else(PoisonError::into_inner).model = Some(embedder.model().to_owned());
    let mut backoff = Duration::from_secs(1);
    loop {
        let pause = match embed_batch(store.as_ref(), &embedder).await {
            Ok(0) => {
                state.lock().unwrap_or_else(PoisonError::into_inner).last_error = None;
                backoff = Duration::from_secs(1);
                tokio::select! {
                    () = written.notified() => continue,
                    () = tokio::time::sleep(IDLE_CHECK) => continue,
                    () = stop.cancelled() => return,
                }
            }
            Ok(_) => {
                state.lock().unwrap_or_else(PoisonError::into_inner).last_error = None;
                backoff = Duration::from_secs(1);
                Duration::ZERO
            }
            Err(error) => {
                tracing::warn!(model = embedder.model(), %error, retry_in = ?backoff, "memory text could not be embedded; search uses keywords until it can");
                state.lock().unwrap_or_else(PoisonError::into_inner).last_error = Some(error);
                let pause = backoff;
                backoff = (backoff * 2).min(MAX_BACKOFF);
                pause
            }
        };
        tokio::select! {
            () = tokio::time::sleep(pause) => {}
            () = stop.cancelled() => return,
        }
    }
}

/// Embeds one batch of unembedded text; how many texts it embedded.
async fn embed_batch(store: &dyn MemoryStore, embedder: &Embedder) -> Result<usize, String> {
    let todo = store.unembedded(embedder.model(), BATCH).await.map_err(|error| error.to_string())?;
    if todo.is_empty() {
        return Ok(0);
    }
    let texts: Vec<String> = todo.iter().map(|item| item.text.clone()).collect();
    let vectors = embedder.embed(&texts, BATCH_TIMEOUT).await.map_err(|error| error.to_string())?;
    let rows: Vec<(String, Vec<f32>)> = todo.into_iter().map(|item| item.hash).zip(vectors).collect();
    store.put_embeddings(embedder.model(), &rows).await.map_err(|error| error.to_string())?;
    Ok(rows.len())
}
