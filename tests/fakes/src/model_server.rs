//! The provider-independent half of a fake model server: the script queue, the responder that
//! answers once the script is used up, the request log, the optional API key, the count of open
//! streams, and the request pipeline that every provider shares.
//!
//! Each provider supplies a [`Dialect`]: how it checks headers and bodies, how its errors look,
//! and how a [`Reply`] is rendered as its stream events or its JSON document. Keeping the
//! pipeline here means both fakes record, authenticate and consume turns in the same order, so
//! a test written against one behaves the same against the other.

use std::collections::{BTreeMap, VecDeque};
use std::io;
use std::marker::PhantomData;
use std::panic::{AssertUnwindSafe, catch_unwind};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::time::{SystemTime, UNIX_EPOCH};

use axum::Router;
use axum::body::Bytes;
use axum::extract::State;
use axum::http::{HeaderMap, HeaderValue, StatusCode, Uri, header};
use axum::response::{IntoResponse, Response};
use axum::routing::post;
use serde_json::{Map, Value};
use tokio::sync::watch;

use crate::FakeServer;
use crate::model_script::{HttpError, Reply, Turn};
use crate::sse::{self, Ending, Event, OpenStream};

/// One request as the fake received it, recorded before any check so rejected requests show up
/// too.
#[derive(Clone, Debug)]
pub struct RecordedRequest {
    /// The request path, e.g. `/v1/chat/completions`.
    pub path: String,
    /// Headers by lowercase name; repeated headers are joined with `", "`.
    pub headers: BTreeMap<String, String>,
    /// The parsed JSON body, or `Value::Null` when the body was not valid JSON.
    pub body: Value,
}

impl RecordedRequest {
    /// The value of a header, by case-insensitive name.
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers.get(&name.to_ascii_lowercase()).map(String::as_str)
    }

    /// The text of every `user` message in the body's `messages`, in order. Works for both
    /// OpenAI Chat Completions and Anthropic Messages bodies: `content` is either a string or
    /// an array of parts whose `{"type":"text","text":…}` parts are joined with `\n` (other
    /// parts, such as images or Anthropic `tool_result` blocks, are ignored). A user message
    /// with no text part at all (an Anthropic turn carrying only tool results) is skipped;
    /// OpenAI tool results have their own `tool` role and never count.
    pub fn user_texts(&self) -> Vec<String> {
        let Some(messages) = self.body.get("messages").and_then(Value::as_array) else { return Vec::new() };
        messages
            .iter()
            .filter(|message| message.get("role").and_then(Value::as_str) == Some("user"))
            .filter_map(|message| content_text(message.get("content")?))
            .collect()
    }

    /// The text of the last `user` message that has text (see [`RecordedRequest::user_texts`]):
    /// what a responder usually answers. Note that Anthropic bodies merge consecutive user
    /// messages into one, while OpenAI bodies keep them apart.
    pub fn last_user_text(&self) -> Option<String> {
        self.user_texts().pop()
    }
}

/// The text of a message `content`: the string itself, or its text parts joined by newlines;
/// `None` when it has no text part.
fn content_text(content: &Value) -> Option<String> {
    match content {
        Value::String(text) => Some(text.clone()),
        Value::Array(parts) => {
            let texts: Vec<&str> = parts
                .iter()
                .filter(|part| part.get("type").and_then(Value::as_str) == Some("text"))
                .filter_map(|part| part.get("text").and_then(Value::as_str))
                .collect();
            (!texts.is_empty()).then(|| texts.join("\n"))
        }
        _ => None,
    }
}

/// Computes the turn for a request the script has no turn for.
type Responder = Arc<dyn Fn(&RecordedRequest) -> Turn + Send + Sync + 'static>;

/// What one incoming request is being answered for, as the renderers need it.
pub(crate) struct TurnContext<'a> {
    /// 0-based position of this request in the log; makes ids unique per request.
    pub(crate) index: usize,
    pub(crate) request: &'a Map<String, Value>,
    /// Unix seconds at which the answer was started.
    pub(crate) created: u64,
}

impl TurnContext<'_> {
    /// The model the request named, echoed back the way real providers do.
    pub(crate) fn model(&self) -> &str {
        self.request.get("model").and_then(Value::as_str).unwrap_or("fake-model")
    }

    pub(crate) fn wants_stream(&self) -> bool {
        self.request.get("stream").and_then(Value::as_bool).unwrap_or(false)
    }
}

/// A provider's wire format. Associated functions only: a dialect has no state of its own.
pub(crate) trait Dialect: Send + Sync + 'static {
    /// Used in error messages the fake makes up, e.g. `fake OpenAI`.
    const NAME: &'static str;
    /// The paths answered with `POST`.
    const PATHS: &'static [&'static str];

    /// The provider's error JSON for this status; `error_type` overrides the status default.
    fn error_body(status: StatusCode, error_type: Option<&str>, message: &str) -> Value;

    /// Authentication and required-header checks, in the provider's order.
    fn check_headers(headers: &HeaderMap, api_key: Option<&str>) -> Result<(), Rejection>;

    /// Required-field checks on a body that parsed as a JSON object.
    fn check_body(body: &Map<String, Value>) -> Result<(), Rejection>;

    /// The provider's "prompt too long" error.
    fn context_overflow() -> Response;

    /// A reply as the provider's stream of SSE events, including the finishing events.
    fn stream_events(reply: &Reply, context: &TurnContext<'_>) -> Vec<Event>;

    /// A reply as the provider's non-streaming JSON document.
    fn complete(reply: &Reply, context: &TurnContext<'_>) -> Value;

    /// An error response in the provider's shape.
    fn error(status: StatusCode, error_type: Option<&str>, message: &str) -> Response {
        json_response(status, Self::error_body(status, error_type, message))
    }
}

/// A request refused before it consumes a turn: a status and the provider's error JSON.
pub(crate) struct Rejection {
    status: StatusCode,
    body: Value,
}

impl Rejection {
    pub(crate) fn new(status: StatusCode, body: Value) -> Self {
        Self { status, body }
    }
}

impl IntoResponse for Rejection {
    fn into_response(self) -> Response {
        json_response(self.status, self.body)
    }
}

/// A JSON response with this status.
pub(crate) fn json_response(status: StatusCode, body: Value) -> Response {
    (status, axum::Json(body)).into_response()
}

/// The header value if present and valid UTF-8.
pub(crate) fn header_str<'a>(headers: &'a HeaderMap, name: &str) -> Option<&'a str> {
    headers.get(name).and_then(|value| value.to_str().ok())
}

/// State shared between the handle a test holds and the server's handlers.
struct Shared<D> {
    turns: Mutex<VecDeque<Turn>>,
    /// Answers requests once `turns` is empty; `None` answers them with a 500.
    responder: Mutex<Option<Responder>>,
    requests: Mutex<Vec<RecordedRequest>>,
    /// Number of recorded requests, so tests can wait for one without polling.
    recorded: watch::Sender<usize>,
    api_key: Mutex<Option<String>>,
    /// `true` once the handle is dropped; releases stalled streams.
    closing: watch::Sender<bool>,
    /// How many streamed bodies are alive (sending, or held open by a stall). Each body holds
    /// an [`OpenStream`] that counts down when hyper drops it: at the end, when the client goes
    /// away, or when the server stops.
    open_streams: Arc<watch::Sender<usize>>,
    dialect: PhantomData<D>,
}

/// Locks ignoring poisoning: a test that panicked while holding a lock must not turn every
/// later request into a second, confusing panic.
fn lock<T>(mutex: &Mutex<T>) -> MutexGuard<'_, T> {
    mutex.lock().unwrap_or_else(PoisonError::into_inner)
}

impl<D: Dialect> Shared<D> {
    fn record(&self, request: RecordedRequest) -> usize {
        let index = {
            let mut requests = lock(&self.requests);
            requests.push(request);
            requests.len() - 1
        };
        self.recorded.send_replace(index + 1);
        index
    }
}

/// A running fake model server of one dialect. The public per-provider handles wrap this.
pub(crate) struct ModelFake<D> {
    server: FakeServer,
    shared: Arc<Shared<D>>,
}

impl<D: Dialect> ModelFake<D> {
    pub(crate) async fn start() -> io::Result<Self> {
        let shared = Arc::new(Shared::<D> {
            turns: Mutex::new(VecDeque::new()),
            responder: Mutex::new(None),
            requests: Mutex::new(Vec::new()),
            recorded: watch::Sender::new(0),
            api_key: Mutex::new(None),
            closing: watch::Sender::new(false),
            open_streams: Arc::new(watch::Sender::new(0)),
            dialect: PhantomData,
        });
        let mut router = Router::new();
        for path in D::PATHS {
            router = router.route(path, post(handle::<D>));
        }
        let router = router.fallback(not_found::<D>).with_state(Arc::clone(&shared));
        let server = FakeServer::start(router).await?;
        Ok(Self { server, shared })
    }

    pub(crate) fn server(&self) -> &FakeServer {
        &self.server
    }

    pub(crate) fn set_api_key(&self, key: Option<String>) {
        *lock(&self.shared.api_key) = key;
    }

    pub(crate) fn push(&self, turn: Turn) {
        lock(&self.shared.turns).push_back(turn);
    }

    pub(crate) fn set_responder(&self, responder: Option<Responder>) {
        *lock(&self.shared.responder) = responder;
    }

    pub(crate) fn open_streams(&self) -> usize {
        *self.shared.open_streams.borrow()
    }

    pub(crate) async fn wait_for_open_streams(&self, count: usize) {
        let mut open = self.shared.open_streams.subscribe();
        // The sender lives in `self.shared`, so the channel cannot close while we wait.
        let _ = open.wait_for(|open| *open == count).await;
    }

    pub(crate) fn remaining_turns(&self) -> usize {
        lock(&self.shared.turns).len()
    }

    pub(crate) fn requests(&self) -> Vec<RecordedRequest> {
        lock(&self.shared.requests).clone()
    }

    pub(crate) async fn wait_for_request(&self, index: usize) -> RecordedRequest {
        let mut recorded = self.shared.recorded.subscribe();
        // The sender lives in `self.shared`, so the channel cannot close while we wait.
        let _ = recorded.wait_for(|count| *count > index).await;
        lock(&self.shared.requests)[index].clone()
    }
}

impl<D> Drop for ModelFake<D> {
    fn drop(&mut self) {
        // Before `server` drops: a stalled stream would otherwise hold graceful shutdown open.
        self.shared.closing.send_replace(true);
    }
}

fn headers_map(headers: &HeaderMap) -> BTreeMap<String, String> {
    let mut map = BTreeMap::<String, String>::new();
    for (name, value) in headers {
        let value = String::from_utf8_lossy(value.as_bytes()).into_owned();
        map.entry(name.as_str().to_owned())
            .and_modify(|existing| {
                existing.push_str(", ");
                existing.push_str(&value);
            })
            .or_insert(value);
    }
    map
}

fn unix_now() -> u64 {
    SystemTime::now().duration_since(UNIX_EPOCH).map(|elapsed| elapsed.as_secs()).unwrap_or_default()
}

/// The pipeline every request goes through: record, check headers, parse and check the body,
/// then consume one scripted turn, or ask the responder when the script is empty. Rejected
/// requests do not consume a turn and are not shown to the responder.
async fn handle<D: Dialect>(
    State(shared): State<Arc<Shared<D>>>,
    uri: Uri,
    headers: HeaderMap,
    body: Bytes,
) -> Response {
    let parsed = serde_json::from_slice::<Value>(&body);
    let recorded = RecordedRequest {
        path: uri.path().to_owned(),
        headers: headers_map(&headers),
        body: parsed.as_ref().ok().cloned().unwrap_or_default(),
    };
    let index = shared.record(recorded.clone());

    let api_key = lock(&shared.api_key).clone();
    if let Err(rejection) = D::check_headers(&headers, api_key.as_deref()) {
        return rejection.into_response();
    }
    let request = match parsed {
        Ok(Value::Object(request)) => request,
        Ok(_) => return D::error(StatusCode::BAD_REQUEST, None, "The request body must be a JSON object."),
        Err(error) => {
            let message = format!("The request body is not valid JSON: {error}");
            return D::error(StatusCode::BAD_REQUEST, None, &message);
        }
    };
    if let Err(rejection) = D::check_body(&request) {
        return rejection.into_response();
    }

    let scripted = lock(&shared.turns).pop_front();
    let turn = match scripted {
        Some(turn) => turn,
        None => match next_from_responder(&shared, &recorded, index) {
            Ok(turn) => turn,
            Err(message) => {
                tracing::warn!("{message}");
                return D::error(StatusCode::INTERNAL_SERVER_ERROR, None, &message);
            }
        },
    };
    let context = TurnContext { index, request: &request, created: unix_now() };
    let stream = |reply: &Reply, ending: Ending| {
        let events = D::stream_events(reply, &context);
        let open = OpenStream::new(Arc::clone(&shared.open_streams));
        sse::stream_response(events, ending, reply.chunk_delay(), shared.closing.subscribe(), open)
    };
    match turn {
        Turn::Reply(reply) if context.wants_stream() => stream(&reply, Ending::Complete),
        Turn::Reply(reply) => json_response(StatusCode::OK, D::complete(&reply, &context)),
        Turn::Error(error) => error_response::<D>(&error),
        Turn::ContextOverflow => D::context_overflow(),
        Turn::Stall { reply, after_deltas } => stream(&reply, Ending::Stall { after_deltas }),
        Turn::Cut { reply, after_deltas } => stream(&reply, Ending::Cut { after_deltas }),
        Turn::Raw(text) => sse::raw_response(text),
    }
}

/// The responder's turn for a request the script has none for, or why there is none: no
/// responder is set, or it panicked (answered as a 500 so the client sees a model error rather
/// than a dropped connection; the panic message is printed as usual).
fn next_from_responder<D: Dialect>(
    shared: &Shared<D>,
    request: &RecordedRequest,
    index: usize,
) -> Result<Turn, String> {
    // Cloned out of the lock, so a responder may itself set or clear the responder.
    let responder = lock(&shared.responder).clone();
    let Some(responder) = responder else {
        return Err(format!(
            "{}: no scripted turn left for request #{} ({}); push another Turn or set a responder",
            D::NAME,
            index + 1,
            request.path
        ));
    };
    catch_unwind(AssertUnwindSafe(|| responder(request)))
        .map_err(|_| format!("{}: the responder panicked on request #{} ({})", D::NAME, index + 1, request.path))
}

fn error_response<D: Dialect>(error: &HttpError) -> Response {
    let status = StatusCode::from_u16(error.status()).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR);
    let mut response = D::error(status, error.overridden_type(), error.message());
    if let Some(seconds) = error.retry_after_secs() {
        response.headers_mut().insert(header::RETRY_AFTER, HeaderValue::from(seconds));
    }
    response
}

async fn not_found<D: Dialect>(uri: Uri) -> Response {
    let message = format!("{}: nothing is served at {}", D::NAME, uri.path());
    D::error(StatusCode::NOT_FOUND, None, &message)
}
