//! The provider-independent half of a fake model server: the script queue, the responder that
//! answers once the script is used up, the request log, the registered API keys, the count of
//! open streams, and the request pipeline that every provider shares.
//!
//! Each provider supplies a [`Dialect`]: how it reads the key and checks headers and bodies,
//! how its errors look, and how a [`Reply`] is rendered as its stream events or its JSON
//! document. Keeping the pipeline here means both fakes record, authenticate and consume turns
//! in the same order, so a test written against one behaves the same against the other.

use std::collections::{BTreeMap, VecDeque};
use std::io;
use std::panic::{AssertUnwindSafe, catch_unwind};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::time::{SystemTime, UNIX_EPOCH};

use axum::Router;
use axum::body::Bytes;
use axum::extract::{DefaultBodyLimit, State};
use axum::http::{HeaderMap, HeaderValue, StatusCode, Uri, header};
use axum::response::{IntoResponse, Response};
use axum::routing::post;
use serde_json::{Map, Value};
use tokio::sync::watch;

use crate::FakeServer;
use crate::keys::{Admission, Fault, KeyBehaviour, KeyTable};
use crate::model_script::{HttpError, Reply, Turn};
use crate::recorded::RecordedRequest;
use crate::sse::{self, Ending, Event, GroupCounts, OpenStream};

/// Computes the turn for a request the script has no turn for.
type Responder = Arc<dyn Fn(&RecordedRequest) -> Turn + Send + Sync + 'static>;
/// Names the group of streams a request belongs to (see `set_stream_group`).
type StreamGroup = Arc<dyn Fn(&RecordedRequest) -> Option<String> + Send + Sync + 'static>;

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

/// A provider's wire format. Associated functions only; what a provider must remember between
/// requests (Anthropic's thinking signatures) lives in its [`Dialect::State`], owned by the fake.
pub(crate) trait Dialect: Send + Sync + 'static {
    /// Used in error messages the fake makes up, e.g. `fake OpenAI`.
    const NAME: &'static str;
    /// The paths answered with `POST`.
    const PATHS: &'static [&'static str];

    /// Per-fake provider state, shared by all requests.
    type State: Send + Sync + 'static;

    /// A fresh state for a fake that is starting.
    fn new_state() -> io::Result<Self::State>;

    /// The provider's error JSON for this status; `error_type` overrides the status default.
    fn error_body(status: StatusCode, error_type: Option<&str>, message: &str) -> Value;

    /// The API key a request presents, from the provider's auth header.
    fn presented_key(headers: &HeaderMap) -> Option<&str>;

    /// The provider's 401 for a request whose key is missing, unknown or revoked.
    fn unauthorized(headers: &HeaderMap) -> Rejection;

    /// A faulty key's answer; `model` is the one the body named (`fake-model` if none), for
    /// providers that name it in the message.
    fn key_fault(fault: Fault, model: &str) -> Response;

    /// Required-header checks other than authentication, which the pipeline does first.
    fn check_headers(_headers: &HeaderMap) -> Result<(), Rejection> {
        Ok(())
    }

    /// Checks on a body that parsed as a JSON object: required fields, and whatever the
    /// provider validates against what it sent earlier.
    fn check_body(state: &Self::State, headers: &HeaderMap, body: &Map<String, Value>) -> Result<(), Rejection>;

    /// The provider's "prompt too long" error.
    fn context_overflow() -> Response;

    /// A reply as the provider's stream of SSE events, including the finishing events.
    fn stream_events(state: &Self::State, reply: &Reply, context: &TurnContext<'_>) -> Vec<Event>;

    /// A reply as the provider's non-streaming JSON document.
    fn complete(state: &Self::State, reply: &Reply, context: &TurnContext<'_>) -> Value;

    /// What a [`KeyBehaviour::Stall`] key gets before the silence: the framing a real server
    /// sends as soon as it accepts a request.
    fn stall_events(context: &TurnContext<'_>) -> Vec<Event>;

    /// Routes besides [`Dialect::PATHS`], e.g. OpenAI's audio transcriptions.
    fn more_routes(router: Router<Arc<Shared<Self>>>) -> Router<Arc<Shared<Self>>>
    where
        Self: Sized,
    {
        router
    }

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
pub(crate) struct Shared<D: Dialect> {
    turns: Mutex<VecDeque<Turn>>,
    /// Answers requests once `turns` is empty; `None` answers them with a 500.
    responder: Mutex<Option<Responder>>,
    requests: Mutex<Vec<RecordedRequest>>,
    /// Number of recorded requests, so tests can wait for one without polling.
    recorded: watch::Sender<usize>,
    /// Empty until a test registers a key; from then on every request is authenticated.
    pub(crate) keys: Mutex<KeyTable>,
    /// `true` once the handle is dropped; releases stalled streams.
    pub(crate) closing: watch::Sender<bool>,
    /// How many streamed bodies are alive (sending, or held open by a stall). Each body holds
    /// an [`OpenStream`] that counts down when hyper drops it: at the end, when the client goes
    /// away, or when the server stops.
    open_streams: Arc<watch::Sender<usize>>,
    /// The most streams ever open at once.
    peak_open_streams: std::sync::atomic::AtomicUsize,
    /// Names the group a request belongs to, for [`GroupCounts`]; none by default.
    stream_group: Mutex<Option<StreamGroup>>,
    group_counts: Arc<GroupCounts>,
    /// What the provider remembers between requests, e.g. Anthropic's thinking-signature key.
    pub(crate) provider: D::State,
}

/// Locks ignoring poisoning: a test that panicked while holding a lock must not turn every
/// later request into a second, confusing panic.
pub(crate) fn lock<T>(mutex: &Mutex<T>) -> MutexGuard<'_, T> {
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

/// The largest request body the fakes read: Anthropic's 32 MB request limit, room for a few
/// images of 5 MB each (axum's default of 2 MB would refuse one).
const REQUEST_BODY_LIMIT: usize = 32 * 1024 * 1024;

/// A running fake model server of one dialect. The public per-provider handles wrap this.
pub(crate) struct ModelFake<D: Dialect> {
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
            keys: Mutex::new(KeyTable::default()),
            closing: watch::Sender::new(false),
            open_streams: Arc::new(watch::Sender::new(0)),
            peak_open_streams: std::sync::atomic::AtomicUsize::new(0),
            stream_group: Mutex::new(None),
            group_counts: Arc::default(),
            provider: D::new_state()?,
        });
        let mut router = Router::new();
        for path in D::PATHS {
            router = router.route(path, post(handle::<D>));
        }
        let router = D::more_routes(router)
            .fallback(not_found::<D>)
            .layer(DefaultBodyLimit::max(REQUEST_BODY_LIMIT))
            .with_state(Arc::clone(&shared));
        let server = FakeServer::start(router).await?;
        Ok(Self { server, shared })
    }

    pub(crate) fn server(&self) -> &FakeServer {
        &self.server
    }

    /// The provider's own state, e.g. for signing thinking text on a test's behalf.
    pub(crate) fn provider_state(&self) -> &D::State {
        &self.shared.provider
    }

    pub(crate) fn set_key(&self, key: String, behaviour: KeyBehaviour) {
        lock(&self.shared.keys).set(key, behaviour);
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

    pub(crate) fn peak_open_streams(&self) -> usize {
        self.shared.peak_open_streams.load(std::sync::atomic::Ordering::SeqCst)
    }

    pub(crate) fn set_stream_group(&self, group: StreamGroup) {
        *lock(&self.shared.stream_group) = Some(group);
    }

    pub(crate) fn peak_open_streams_by_group(&self) -> std::collections::BTreeMap<String, usize> {
        self.shared.group_counts.peaks()
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

    pub(crate) fn requests_with_key(&self, key: &str) -> usize {
        lock(&self.shared.requests).iter().filter(|request| request.api_key().as_deref() == Some(key)).count()
    }

    pub(crate) async fn wait_for_request(&self, index: usize) -> RecordedRequest {
        let mut recorded = self.shared.recorded.subscribe();
        // The sender lives in `self.shared`, so the channel cannot close while we wait.
        let _ = recorded.wait_for(|count| *count > index).await;
        lock(&self.shared.requests)[index].clone()
    }
}

impl<D: Dialect> Drop for ModelFake<D> {
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

/// The pipeline every request goes through: record, authenticate (a faulty key is answered
/// here), check the other headers, parse and check the body, then consume one scripted turn,
/// or ask the responder when the script is empty. Rejected requests and requests with a
/// faulty key do not consume a turn and are not shown to the responder.
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

    let admission = lock(&shared.keys).admit(D::presented_key(&headers));
    match admission {
        Admission::Serve | Admission::Stall => {}
        Admission::Unauthorized => return D::unauthorized(&headers).into_response(),
        Admission::Fault(fault) => {
            let model = recorded.body.get("model").and_then(Value::as_str).unwrap_or("fake-model");
            return D::key_fault(fault, model);
        }
    }
    if let Err(rejection) = D::check_headers(&headers) {
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
    if let Err(rejection) = D::check_body(&shared.provider, &headers, &request) {
        return rejection.into_response();
    }

    let context = TurnContext { index, request: &request, created: unix_now() };
    let group = lock(&shared.stream_group)
        .clone()
        .and_then(|name| name(&recorded))
        .map(|name| (Arc::clone(&shared.group_counts), name));
    let open_stream = || {
        let stream = OpenStream::new(Arc::clone(&shared.open_streams), group.clone());
        let open = *shared.open_streams.borrow();
        shared.peak_open_streams.fetch_max(open, std::sync::atomic::Ordering::SeqCst);
        stream
    };
    if admission == Admission::Stall {
        let stall = Ending::Stall { after_deltas: 0 };
        return sse::stream_response(D::stall_events(&context), stall, None, shared.closing.subscribe(), open_stream());
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
    let stream = |reply: &Reply, ending: Ending| {
        let events = D::stream_events(&shared.provider, reply, &context);
        sse::stream_response(events, ending, reply.chunk_delay(), shared.closing.subscribe(), open_stream())
    };
    match turn {
        Turn::Reply(reply) if context.wants_stream() => stream(&reply, Ending::Complete),
        Turn::Reply(reply) => json_response(StatusCode::OK, D::complete(&shared.provider, &reply, &context)),
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

pub(crate) fn error_response<D: Dialect>(error: &HttpError) -> Response {
    let status = StatusCode::from_u16(error.status()).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR);
    let response = D::error(status, error.overridden_type(), error.message());
    match error.retry_after_secs() {
        Some(seconds) => with_retry_after(response, seconds),
        None => response,
    }
}

/// Adds `retry-after: <seconds>`, as both providers send with 429s.
pub(crate) fn with_retry_after(mut response: Response, seconds: u64) -> Response {
    response.headers_mut().insert(header::RETRY_AFTER, HeaderValue::from(seconds));
    response
}

async fn not_found<D: Dialect>(uri: Uri) -> Response {
    let message = format!("{}: nothing is served at {}", D::NAME, uri.path());
    D::error(StatusCode::NOT_FOUND, None, &message)
}

/// The methods every fake model server has, which only forward to its [`ModelFake`]: one
/// text for both fakes, so their APIs cannot drift apart.
macro_rules! model_fake_methods {
    () => {
        /// Registers `key` or changes its behaviour while the fake runs, e.g. to heal a
        /// rate-limited key; takes effect from the next request.
        pub fn set_key(&self, key: impl Into<String>, behaviour: KeyBehaviour) {
            self.inner.set_key(key.into(), behaviour);
        }

        /// Appends a turn to the script; each request that passes the checks consumes one.
        pub fn push(&self, turn: impl Into<Turn>) -> &Self {
            self.inner.push(turn.into());
            self
        }

        /// Answers every request the script has no turn for with `responder(&request)`; scripted
        /// turns still come first, so a test can put a few exact turns (an error, a stall) in front
        /// of a model that computes its replies, e.g. one that names the tokens in the latest user
        /// message ([`RecordedRequest::last_user_text`]). The responder sees only requests that
        /// passed the key and body checks. Any [`Turn`] works, including [`Turn::Stall`], whose
        /// stream stays open until the client goes away (see [`Self::open_streams`]). It runs
        /// on the server's task, so it should be quick; if it panics the request gets a 500.
        /// Replaces an earlier responder.
        pub fn set_responder<F>(&self, responder: F)
        where
            F: Fn(&RecordedRequest) -> Turn + Send + Sync + 'static,
        {
            self.inner.set_responder(Some(Arc::new(responder)));
        }

        /// Builder form of [`Self::set_responder`].
        pub fn with_responder<F>(self, responder: F) -> Self
        where
            F: Fn(&RecordedRequest) -> Turn + Send + Sync + 'static,
        {
            self.set_responder(responder);
            self
        }

        /// Removes the responder: requests the script has no turn for get a 500 again.
        pub fn clear_responder(&self) {
            self.inner.set_responder(None);
        }

        /// How many streamed answers are still open: being sent, or held open by a stall. A stream
        /// counts until the server is done with it, including when the client went away.
        pub fn open_streams(&self) -> usize {
            self.inner.open_streams()
        }

        /// The most streamed answers ever open at once: 1 when requests never overlapped.
        pub fn peak_open_streams(&self) -> usize {
            self.inner.peak_open_streams()
        }

        /// Groups the streamed answers by `group(&request)` (e.g. the chat session a request
        /// belongs to, read from its text; `None` leaves a request out), for
        /// [`Self::peak_open_streams_by_group`]. Counts from the next request on.
        pub fn set_stream_group<F>(&self, group: F)
        where
            F: Fn(&RecordedRequest) -> Option<String> + Send + Sync + 'static,
        {
            self.inner.set_stream_group(Arc::new(group));
        }

        /// Each group's most streamed answers ever open at once (see
        /// [`Self::set_stream_group`]): 1 for a group whose requests never overlapped.
        pub fn peak_open_streams_by_group(&self) -> std::collections::BTreeMap<String, usize> {
            self.inner.peak_open_streams_by_group()
        }

        /// Waits until exactly `count` streamed answers are open, e.g. `0` to see that a stalled
        /// stream ended once its client went away. Waits forever if that never happens, so wrap it
        /// in `tokio::time::timeout`.
        pub async fn wait_for_open_streams(&self, count: usize) {
            self.inner.wait_for_open_streams(count).await;
        }

        /// How many scripted turns have not been consumed yet.
        pub fn remaining_turns(&self) -> usize {
            self.inner.remaining_turns()
        }

        /// Every request received so far, in arrival order, including rejected ones.
        pub fn requests(&self) -> Vec<RecordedRequest> {
            self.inner.requests()
        }

        /// How many recorded requests presented this API key, whatever they were answered.
        pub fn requests_with_key(&self, key: &str) -> usize {
            self.inner.requests_with_key(key)
        }

        /// Waits until the request at 0-based `index` has arrived and returns it. Waits forever if
        /// it never comes, so wrap it in `tokio::time::timeout`.
        pub async fn wait_for_request(&self, index: usize) -> RecordedRequest {
            self.inner.wait_for_request(index).await
        }
    };
}
pub(crate) use model_fake_methods;
