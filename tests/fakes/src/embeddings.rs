//! A fake OpenAI-compatible embeddings server (`POST /v1/embeddings`), for memory search.
//!
//! It speaks OpenAI's wire format: a JSON body with `model`, `input` (one string or an array
//! of strings) and optional `encoding_format` (`float`, the default, or `base64`: the
//! little-endian `f32`s in base64) and `dimensions`; an answer
//! `{"object":"list","data":[{"object":"embedding","index":i,"embedding":[…]}],"model","usage"}`
//! with one item per input, in input order; and errors shaped
//! `{"error":{"message","type","param","code"}}`. It holds clients to OpenAI's limits: at most
//! [`MAX_INPUTS`] inputs per request, no empty input, at most [`MAX_INPUT_TOKENS`] tokens per
//! input and [`MAX_REQUEST_TOKENS`] per request (counted by the fake's own estimate, a token
//! per four characters), a bearer key when one is set, and a known model when models are set
//! (OpenAI's 404 `model_not_found`).
//!
//! The vectors are not a model's but they behave like one where a test needs it: a text's
//! vector is the L2-normalised bag of its words' *concepts*, each hashed (FNV-1a) into one of
//! [`DIMENSIONS`] dimensions with a sign. Words are lowercased runs of letters and digits,
//! [`STOPWORDS`] do not count, and words a test groups with
//! [`FakeEmbeddings::set_synonyms`] share a concept, so "my car is red" and "automobile,
//! crimson" score close when car/automobile and red/crimson are grouped, while keyword search
//! finds nothing in common. The same text always gets the same vector, in every test run.
//!
//! Faults: the service down (503), connections dropped, scripted one-shot [`HttpError`]s
//! (a 429 with `retry-after`, say), and a delay before every answer. Every request is
//! recorded, refused ones included, as an [`EmbeddingRequest`].
//!
//! Like Ferry's OpenAI provider, the fake treats the base URL as the API root including `/v1`:
//! [`FakeEmbeddings::url`] ends in `/v1` and Ferry posts to `{base_url}/embeddings`. The route
//! is answered without the `/v1` prefix too, for a client that adds no version segment.

use std::collections::{HashMap, VecDeque};
use std::io;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use axum::Router;
use axum::body::{Body, Bytes};
use axum::extract::State;
use axum::http::{HeaderMap, StatusCode, Uri};
use axum::response::{IntoResponse, Response};
use axum::routing::post;
use base64::Engine;
use base64::engine::general_purpose::STANDARD as BASE64;
use serde_json::{Map, Value, json};
use tokio::sync::watch;

use crate::model_script::HttpError;
use crate::model_server::{Dialect, Rejection, error_response, json_response, lock};
use crate::openai::OpenAiDialect;
use crate::server::FakeServer;

/// The length of every vector the fake answers with. Real models have more (1536 for
/// `text-embedding-3-small`); 256 keeps accidental overlap between unrelated texts small.
pub const DIMENSIONS: usize = 256;

/// OpenAI's most inputs in one request ("any array must be 2048 dimensions or less").
pub const MAX_INPUTS: usize = 2048;

/// OpenAI's most tokens in one input (8192 for every embedding model).
pub const MAX_INPUT_TOKENS: usize = 8192;

/// OpenAI's most tokens summed over the inputs of one request.
pub const MAX_REQUEST_TOKENS: usize = 300_000;

/// Words that carry no meaning of their own, left out of a text's vector so that two texts
/// are not similar merely for both saying "what is the".
pub const STOPWORDS: [&str; 14] =
    ["a", "an", "the", "is", "my", "of", "to", "in", "and", "what", "which", "do", "i", "you"];

/// One embeddings request as the fake received it, recorded before any check.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct EmbeddingRequest {
    /// The request path: `/v1/embeddings`, or `/embeddings` for a client without `/v1`.
    pub path: String,
    /// The `Authorization: Bearer` token, if any.
    pub key: Option<String>,
    /// The `model` field; empty when the body named none.
    pub model: String,
    /// The texts to embed in order: `input` as one string or the strings of its array (other
    /// elements are left out); empty when the body had none.
    pub inputs: Vec<String>,
}

/// A running fake embeddings server; dropping it stops the server.
///
/// ```no_run
/// # async fn demo() -> std::io::Result<()> {
/// use ferry_fakes::FakeEmbeddings;
/// let embeddings = FakeEmbeddings::start().await?.with_api_key("sk-embed").with_model("text-embedding-3-small");
/// embeddings.set_synonyms(&[&["car", "automobile"], &["red", "crimson"]]);
/// // Configure `[memory.embeddings] base_url = embeddings.url()`, write and search memory,
/// // then inspect `embeddings.requests()`.
/// # Ok(()) }
/// ```
pub struct FakeEmbeddings {
    server: FakeServer,
    shared: Arc<Shared>,
}

/// What the handle and the handler share.
#[derive(Default)]
struct Shared {
    /// The only key accepted once set; `None` accepts any request, with or without a key.
    api_key: Mutex<Option<String>>,
    /// The model names accepted; empty accepts any.
    models: Mutex<Vec<String>>,
    /// Word → concept (the first word of its group), both lowercased.
    synonyms: Mutex<HashMap<String, String>>,
    /// Answered first-in first-out, one per request that passes the checks.
    errors: Mutex<VecDeque<HttpError>>,
    delay: Mutex<Duration>,
    down: AtomicBool,
    drop_connections: AtomicBool,
    requests: Mutex<Vec<EmbeddingRequest>>,
    /// What `calls()` and `inputs_embedded()` read, in a channel so a test can wait for them.
    counts: watch::Sender<Counts>,
}

#[derive(Clone, Copy, Debug, Default)]
struct Counts {
    calls: usize,
    inputs_embedded: usize,
}

impl FakeEmbeddings {
    /// Starts the server on a free loopback port: no key, any model, no synonyms, no faults.
    pub async fn start() -> io::Result<Self> {
        let shared = Arc::new(Shared::default());
        let router = Router::new()
            .route("/v1/embeddings", post(handle))
            .route("/embeddings", post(handle))
            .fallback(not_found)
            .with_state(Arc::clone(&shared));
        Ok(Self { server: FakeServer::start(router).await?, shared })
    }

    /// Requires `Authorization: Bearer <key>` from now on; a missing or other key gets
    /// OpenAI's 401 (`invalid_api_key` for a wrong one).
    pub fn with_api_key(self, key: impl Into<String>) -> Self {
        *lock(&self.shared.api_key) = Some(key.into());
        self
    }

    /// Adds `name` to the models served. Once any is added, a request naming another gets
    /// OpenAI's 404 `model_not_found`; until then every model name is served.
    pub fn with_model(self, name: impl Into<String>) -> Self {
        lock(&self.shared.models).push(name.into());
        self
    }

    /// The base URL including `/v1`, as OpenAI-compatible clients are configured
    /// (`https://api.openai.com/v1`); the client posts to `{url}/embeddings`.
    pub fn url(&self) -> String {
        format!("{}/v1", self.server.url())
    }

    /// Replaces the synonym groups: the words of one group (case ignored) share one concept,
    /// and so the same dimension of the vector. A word in two groups belongs to the last.
    pub fn set_synonyms(&self, groups: &[&[&str]]) {
        let mut synonyms = HashMap::new();
        for group in groups {
            let Some(first) = group.first() else { continue };
            let concept = first.to_lowercase();
            for word in *group {
                synonyms.insert(word.to_lowercase(), concept.clone());
            }
        }
        *lock(&self.shared.synonyms) = synonyms;
    }

    /// The vector the fake answers for `text` under the current synonyms: [`DIMENSIONS`]
    /// long and of unit length, for tests that compare scores without a request.
    pub fn embed(&self, text: &str) -> Vec<f32> {
        embed(text, &lock(&self.shared.synonyms))
    }

    /// While `down`, every request is answered with OpenAI's 503 "overloaded" error, before
    /// the key is checked, and consumes no scripted error.
    pub fn set_down(&self, down: bool) {
        self.shared.down.store(down, Ordering::SeqCst);
    }

    /// While set, every request's connection is closed without an answer: the client may see
    /// a status line, but the body fails, as with a crashed proxy. Wins over [`set_down`].
    ///
    /// [`set_down`]: FakeEmbeddings::set_down
    pub fn set_drop_connections(&self, drop: bool) {
        self.shared.drop_connections.store(drop, Ordering::SeqCst);
    }

    /// Queues an error for the next request that passes the checks (key, body, model), e.g.
    /// `HttpError::new(429, "Rate limit reached").retry_after(2)`; its type and code follow
    /// the status as OpenAI's do, unless [`HttpError::error_type`] overrides them.
    pub fn push_error(&self, error: HttpError) -> &Self {
        lock(&self.shared.errors).push_back(error);
        self
    }

    /// Every answer, faults included, waits this long first (zero, the default, for none).
    pub fn set_delay(&self, delay: Duration) {
        *lock(&self.shared.delay) = delay;
    }

    /// Every request so far, in arrival order, refused ones included.
    pub fn requests(&self) -> Vec<EmbeddingRequest> {
        lock(&self.shared.requests).clone()
    }

    /// How many requests arrived, whatever they were answered.
    pub fn calls(&self) -> usize {
        self.shared.counts.borrow().calls
    }

    /// How many inputs were answered with a vector, over all successful requests.
    pub fn inputs_embedded(&self) -> usize {
        self.shared.counts.borrow().inputs_embedded
    }

    /// Waits until at least `count` requests have arrived, for work a client does in the
    /// background (the answer may still be on its way).
    pub async fn wait_for_calls(&self, count: usize) {
        let mut counts = self.shared.counts.subscribe();
        // The sender lives in `self.shared`, so the channel cannot close while we wait.
        let _ = counts.wait_for(|counts| counts.calls >= count).await;
    }

    /// Waits until at least `count` inputs have been embedded and answered.
    pub async fn wait_for_inputs_embedded(&self, count: usize) {
        let mut counts = self.shared.counts.subscribe();
        let _ = counts.wait_for(|counts| counts.inputs_embedded >= count).await;
    }
}

/// FNV-1a, 64-bit: stable across runs, platforms and Rust versions, unlike `std`'s hasher.
fn fnv1a(bytes: &[u8]) -> u64 {
    bytes.iter().fold(0xcbf2_9ce4_8422_2325, |hash, &byte| (hash ^ u64::from(byte)).wrapping_mul(0x0100_0000_01b3))
}

/// The lowercased runs of letters and digits in `text` (any script).
fn words(text: &str) -> Vec<String> {
    text.split(|c: char| !c.is_alphanumeric()).filter(|word| !word.is_empty()).map(str::to_lowercase).collect()
}

/// The concepts a text's vector is made of: its words other than stopwords, through the
/// synonym groups. A text of stopwords only falls back to those, and a text without words
/// (punctuation, an emoji) to the whole text, so every vector has unit length.
fn concepts(text: &str, synonyms: &HashMap<String, String>) -> Vec<String> {
    let words = words(text);
    let meaningful: Vec<String> = words.iter().filter(|word| !STOPWORDS.contains(&word.as_str())).cloned().collect();
    let chosen = match (meaningful.is_empty(), words.is_empty()) {
        (false, _) => meaningful,
        (true, false) => words,
        (true, true) => vec![text.to_owned()],
    };
    chosen.into_iter().map(|word| synonyms.get(&word).cloned().unwrap_or(word)).collect()
}

fn embed(text: &str, synonyms: &HashMap<String, String>) -> Vec<f32> {
    let mut vector = vec![0f32; DIMENSIONS];
    for concept in concepts(text, synonyms) {
        let hash = fnv1a(concept.as_bytes());
        // The low bits pick the dimension, the top bit the sign.
        let dimension = (hash % DIMENSIONS as u64) as usize;
        vector[dimension] += if hash >> 63 == 1 { -1.0 } else { 1.0 };
    }
    let norm = vector.iter().map(|value| value * value).sum::<f32>().sqrt();
    if norm > 0.0 {
        vector.iter_mut().for_each(|value| *value /= norm);
    } else {
        // Concepts that cancelled out in a shared dimension ("+x −y"): any fixed unit vector.
        vector[0] = 1.0;
    }
    vector
}

/// The fake's token count: a token per four characters, at least one per input, as a rough
/// stand-in for OpenAI's tokenizer (English averages about four characters a token).
fn estimated_tokens(text: &str) -> usize {
    text.chars().count().div_ceil(4).max(1)
}

/// OpenAI's error object, which carries `param` and `code` besides the message and type.
fn error(status: StatusCode, message: &str, error_type: &str, param: Option<&str>, code: Option<&str>) -> Rejection {
    Rejection::new(status, json!({ "error": { "message": message, "type": error_type, "param": param, "code": code } }))
}

fn invalid(message: &str, param: Option<&str>, code: Option<&str>) -> Rejection {
    error(StatusCode::BAD_REQUEST, message, "invalid_request_error", param, code)
}

/// What OpenAI says to an `input` that is missing its text: an empty string, an empty array,
/// or something that is neither a string nor an array of strings.
fn invalid_input() -> Rejection {
    invalid(
        "'$.input' is invalid. Please check the API reference: https://platform.openai.com/docs/api-reference.",
        None,
        None,
    )
}

/// A response whose body fails at once: the client sees the connection close mid-answer
/// (the same as the Telegram and Discord fakes' dropped calls).
fn dropped_response() -> Response {
    let failed = futures::stream::once(async {
        Err::<Bytes, io::Error>(io::Error::new(io::ErrorKind::ConnectionAborted, "scripted dropped connection"))
    });
    Response::new(Body::from_stream(failed))
}

async fn not_found(uri: Uri) -> Response {
    let message = format!("fake embeddings: nothing is served at {}", uri.path());
    error(StatusCode::NOT_FOUND, &message, "invalid_request_error", None, None).into_response()
}

/// A request body that passed every check.
struct Accepted {
    model: String,
    inputs: Vec<String>,
    base64: bool,
}

/// The route's handler: record, wait, apply the faults, authenticate, check the body as
/// OpenAI does, then answer a scripted error or the vectors.
async fn handle(State(shared): State<Arc<Shared>>, uri: Uri, headers: HeaderMap, body: Bytes) -> Response {
    let parsed = serde_json::from_slice::<Value>(&body);
    let field = |name: &str| parsed.as_ref().ok().and_then(|body| body.get(name));
    let inputs = match field("input") {
        Some(Value::String(text)) => vec![text.clone()],
        Some(Value::Array(items)) => items.iter().filter_map(Value::as_str).map(str::to_owned).collect(),
        _ => Vec::new(),
    };
    let request = EmbeddingRequest {
        path: uri.path().to_owned(),
        key: OpenAiDialect::presented_key(&headers).map(str::to_owned),
        model: field("model").and_then(Value::as_str).unwrap_or_default().to_owned(),
        inputs,
    };
    lock(&shared.requests).push(request.clone());
    shared.counts.send_modify(|counts| counts.calls += 1);

    let delay = *lock(&shared.delay);
    if !delay.is_zero() {
        tokio::time::sleep(delay).await;
    }
    if shared.drop_connections.load(Ordering::SeqCst) {
        return dropped_response();
    }
    if shared.down.load(Ordering::SeqCst) {
        let message = "The engine is currently overloaded, please try again later.";
        return error(StatusCode::SERVICE_UNAVAILABLE, message, "server_error", None, None).into_response();
    }
    let expected = lock(&shared.api_key).clone();
    if expected.is_some_and(|expected| request.key.as_deref() != Some(expected.as_str())) {
        return OpenAiDialect::unauthorized(&headers).into_response();
    }
    let accepted = match parsed {
        Ok(Value::Object(body)) => check(&body, &lock(&shared.models)),
        Ok(_) => Err(invalid("The request body must be a JSON object.", None, None)),
        Err(_) => Err(invalid(
            "We could not parse the JSON body of your request. (HINT: This likely means you aren't using your \
             HTTP library correctly. The OpenAI API expects a JSON payload, but what was sent was not valid JSON.)",
            None,
            None,
        )),
    };
    let accepted = match accepted {
        Ok(accepted) => accepted,
        Err(refusal) => return refusal.into_response(),
    };
    let scripted = lock(&shared.errors).pop_front();
    if let Some(scripted) = scripted {
        return error_response::<OpenAiDialect>(&scripted);
    }

    let vectors: Vec<Vec<f32>> = {
        let synonyms = lock(&shared.synonyms);
        accepted.inputs.iter().map(|text| embed(text, &synonyms)).collect()
    };
    let data: Vec<Value> = vectors
        .iter()
        .enumerate()
        .map(|(index, vector)| {
            let embedding = if accepted.base64 {
                let bytes: Vec<u8> = vector.iter().flat_map(|value| value.to_le_bytes()).collect();
                Value::from(BASE64.encode(bytes))
            } else {
                json!(vector)
            };
            json!({ "object": "embedding", "index": index, "embedding": embedding })
        })
        .collect();
    let tokens: usize = accepted.inputs.iter().map(|text| estimated_tokens(text)).sum();
    shared.counts.send_modify(|counts| counts.inputs_embedded += accepted.inputs.len());
    json_response(
        StatusCode::OK,
        json!({
            "object": "list",
            "data": data,
            "model": accepted.model,
            "usage": { "prompt_tokens": tokens, "total_tokens": tokens },
        }),
    )
}

/// OpenAI's answer to a JSON body it refuses, checked in this order: model, input, encoding
/// format, dimensions, token limits.
fn check(body: &Map<String, Value>, models: &[String]) -> Result<Accepted, Rejection> {
    let Some(model) = body.get("model").and_then(Value::as_str).filter(|model| !model.is_empty()) else {
        return Err(invalid("you must provide a model parameter", None, None));
    };
    if !models.is_empty() && !models.iter().any(|known| known == model) {
        let message = format!("The model `{model}` does not exist or you do not have access to it.");
        return Err(error(StatusCode::NOT_FOUND, &message, "invalid_request_error", None, Some("model_not_found")));
    }
    let inputs = match body.get("input") {
        None => {
            let message = "Missing required parameter: 'input'.";
            return Err(invalid(message, Some("input"), Some("missing_required_parameter")));
        }
        Some(Value::String(text)) => vec![text.clone()],
        Some(Value::Array(items)) if items.len() > MAX_INPUTS => {
            let message = format!(
                "Invalid 'input': array too long. Expected an array with maximum length {MAX_INPUTS}, but got an \
                 array with length {} instead.",
                items.len()
            );
            return Err(invalid(&message, Some("input"), Some("array_above_max_length")));
        }
        Some(Value::Array(items)) => {
            // Token arrays are valid for OpenAI, but Ferry sends text; the fake refuses them.
            let texts: Option<Vec<String>> = items.iter().map(|item| item.as_str().map(str::to_owned)).collect();
            texts.ok_or_else(invalid_input)?
        }
        Some(_) => return Err(invalid_input()),
    };
    if inputs.is_empty() || inputs.iter().any(String::is_empty) {
        return Err(invalid_input());
    }
    let base64 = match body.get("encoding_format") {
        None | Some(Value::Null) => false,
        Some(Value::String(format)) if format == "float" => false,
        Some(Value::String(format)) if format == "base64" => true,
        Some(other) => {
            let message = format!("{other} is not one of ['float', 'base64'] - 'encoding_format'");
            return Err(invalid(&message, Some("encoding_format"), None));
        }
    };
    if let Some(dimensions) = body.get("dimensions").filter(|value| !value.is_null())
        && dimensions.as_u64() != Some(DIMENSIONS as u64)
    {
        let message = format!("The fake embeds in {DIMENSIONS} dimensions only; {dimensions} were asked for.");
        return Err(invalid(&message, Some("dimensions"), None));
    }
    let mut total = 0usize;
    for text in &inputs {
        let tokens = estimated_tokens(text);
        if tokens > MAX_INPUT_TOKENS {
            let message = format!(
                "This model's maximum context length is {MAX_INPUT_TOKENS} tokens, however you requested {tokens} \
                 tokens ({tokens} in your prompt; 0 for the completion). Please reduce your prompt; or completion \
                 length."
            );
            return Err(invalid(&message, None, None));
        }
        total += tokens;
    }
    if total > MAX_REQUEST_TOKENS {
        let message = format!("Requested {total} tokens, max {MAX_REQUEST_TOKENS} tokens per request");
        return Err(invalid(&message, None, Some("max_tokens_per_request")));
    }
    Ok(Accepted { model: model.to_owned(), inputs, base64 })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn cosine(a: &[f32], b: &[f32]) -> f32 {
        a.iter().zip(b).map(|(x, y)| x * y).sum()
    }

    #[test]
    fn fnv1a_matches_the_reference_values() {
        // From the FNV reference test suite.
        assert_eq!(fnv1a(b""), 0xcbf2_9ce4_8422_2325);
        assert_eq!(fnv1a(b"a"), 0xaf63_dc4c_8601_ec8c);
        assert_eq!(fnv1a(b"foobar"), 0x8594_4171_f739_67e8);
    }

    #[test]
    fn stopwords_case_and_punctuation_do_not_change_the_vector() {
        let none = HashMap::new();
        assert_eq!(embed("The car, is RED!", &none), embed("car red", &none));
        assert_ne!(embed("car red", &none), embed("car blue", &none));
    }

    #[test]
    fn every_vector_has_unit_length() {
        let none = HashMap::new();
        for text in ["car", "the a an", "?!", "Машина красная", "車は赤い", "car car car red"] {
            let vector = embed(text, &none);
            assert_eq!(vector.len(), DIMENSIONS);
            assert!((cosine(&vector, &vector) - 1.0).abs() < 1e-5, "{text}: {vector:?}");
        }
    }

    #[test]
    fn synonyms_share_a_concept() {
        let mut synonyms = HashMap::new();
        synonyms.insert("automobile".to_owned(), "car".to_owned());
        assert_eq!(embed("automobile", &synonyms), embed("car", &HashMap::new()));
    }
}
