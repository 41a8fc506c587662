//! The fake's REST API under `/api/v10`, the paths serenity's routes produce.
//!
//! Every call is recorded before any check (so refused calls show up too), then checked the
//! way Discord checks it: the `Authorization: Bot <token>` header (401), the channel (404
//! Unknown Channel), storms, scripted faults and rate limits (429 with `retry_after` and the
//! `X-RateLimit-*` headers), the content (400 code 50006 empty, 50035 over 2000 chars) and
//! the nonce (50035 over 25 chars). A create with files comes as `multipart/form-data` and
//! is checked in `media.rs` too (at most 10 MiB: 413, code 40005). A create whose `nonce`
//! repeats (with `enforce_nonce`) is answered with the existing message. Scripted connection drops end a call without an
//! answer, before or after it took effect.

use std::io;
use std::sync::Arc;

use axum::Router;
use axum::body::{Body, Bytes};
use axum::extract::{DefaultBodyLimit, Path, State as AxumState};
use axum::http::{Extensions, HeaderMap, HeaderValue, Method, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, patch, post};
use serde_json::{Value, json};
use tokio::time::Instant;

use super::media::{self, Upload};
use super::state::{Fault, NonceUse};
use super::{
    Call, Dropped, NONCE_LIMIT, NonceReplay, SentAttachment, SentMessage, Shared, TEXT_LIMIT, UploadedFile, lock,
};

pub(crate) fn router(shared: Arc<Shared>) -> Router {
    Router::new()
        .route("/api/v10/gateway", get(gateway))
        .route("/api/v10/gateway/bot", get(gateway_bot))
        .route("/api/v10/users/@me", get(current_user))
        .route("/api/v10/channels/{channel}", get(channel))
        .route(
            "/api/v10/channels/{channel}/messages",
            post(create_message).layer(DefaultBodyLimit::max(media::BODY_LIMIT)).get(super::history::list_messages),
        )
        .route("/api/v10/channels/{channel}/messages/{message}", patch(edit_message).delete(delete_message))
        .route("/api/v10/channels/{channel}/typing", post(typing))
        .route("/gateway", get(super::gateway::upgrade))
        .route("/attachments/{channel}/{attachment}/{filename}", get(media::serve))
        .route("/media/attachments/{channel}/{attachment}/{filename}", get(media::serve))
        .with_state(shared)
}

type Shared_ = AxumState<Arc<Shared>>;

/// A Discord JSON error answer.
pub(crate) fn error(status: u16, code: i64, message: &str) -> Response {
    let status = StatusCode::from_u16(status).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR);
    (status, axum::Json(json!({ "code": code, "message": message }))).into_response()
}

pub(crate) fn rate_limited(retry_after: f64) -> Response {
    let body = json!({ "message": "You are being rate limited.", "retry_after": retry_after, "global": false });
    let mut response = (StatusCode::TOO_MANY_REQUESTS, axum::Json(body)).into_response();
    let headers = response.headers_mut();
    let mut set = |name: &'static str, value: String| {
        if let Ok(value) = HeaderValue::from_str(&value) {
            headers.insert(name, value);
        }
    };
    set("retry-after", format!("{}", retry_after.ceil() as u64));
    set("x-ratelimit-limit", "5".to_owned());
    set("x-ratelimit-remaining", "0".to_owned());
    set("x-ratelimit-reset-after", format!("{retry_after:.3}"));
    set("x-ratelimit-bucket", "fake-channel-messages".to_owned());
    set("x-ratelimit-scope", "user".to_owned());
    response
}

impl Shared {
    /// Records the call; returns its index.
    pub(crate) fn record(&self, method: &Method, path: String, channel_id: Option<u64>, body: Value) -> usize {
        let index = {
            let mut state = lock(&self.state);
            state.calls.push(Call {
                method: method.to_string(),
                path,
                channel_id,
                body,
                at: Instant::now(),
                status: None,
                dropped: None,
                files: Vec::new(),
            });
            state.calls.len() - 1
        };
        self.notify();
        index
    }

    pub(crate) fn answer(&self, index: usize, response: Response) -> Response {
        {
            let mut state = lock(&self.state);
            if response.status() == StatusCode::TOO_MANY_REQUESTS {
                state.rate_limited += 1;
            }
            if let Some(call) = state.calls.get_mut(index) {
                call.status = Some(response.status().as_u16());
            }
        }
        self.notify();
        response
    }

    /// Ends a message call: its answer, or a dropped connection if a fault said so.
    /// `drop_answer` is set when the call ran under [`Fault::ApplyThenDrop`].
    fn conclude(&self, index: usize, outcome: Result<Response, Refused>, drop_answer: bool) -> Response {
        let response = match outcome {
            Err(Refused::Drop) => return self.drop_connection(index, Dropped::BeforeApply),
            Ok(response) => response,
            Err(Refused::Answer(response)) => *response,
        };
        if drop_answer {
            // Not counted as served: a 429 that never reached the client is not one it saw.
            return self.drop_connection(index, Dropped::AfterApply(response.status().as_u16()));
        }
        self.answer(index, response)
    }

    /// Records how the call was dropped and answers with a connection that breaks.
    fn drop_connection(&self, index: usize, dropped: Dropped) -> Response {
        if let Some(call) = lock(&self.state).calls.get_mut(index) {
            call.dropped = Some(dropped);
        }
        self.notify();
        dropped_response()
    }

    pub(crate) fn authorized(&self, headers: &HeaderMap) -> bool {
        let header = headers.get("authorization").and_then(|value| value.to_str().ok());
        header.and_then(|value| value.strip_prefix("Bot ")).is_some_and(|token| self.accepts(token))
    }
}

async fn gateway(AxumState(shared): Shared_) -> Response {
    axum::Json(json!({ "url": shared.gateway_url() })).into_response()
}

async fn gateway_bot(AxumState(shared): Shared_, headers: HeaderMap) -> Response {
    if !shared.authorized(&headers) {
        return error(401, 0, "401: Unauthorized");
    }
    let limit = json!({ "total": 1000, "remaining": 999, "reset_after": 0, "max_concurrency": 1 });
    axum::Json(json!({ "url": shared.gateway_url(), "shards": 1, "session_start_limit": limit })).into_response()
}

async fn current_user(AxumState(shared): Shared_, headers: HeaderMap) -> Response {
    let index = shared.record(&Method::GET, "/api/v10/users/@me".to_owned(), None, Value::Null);
    let response = if shared.authorized(&headers) {
        axum::Json(lock(&shared.state).bot.to_json()).into_response()
    } else {
        error(401, 0, "401: Unauthorized")
    };
    shared.answer(index, response)
}

async fn channel(AxumState(shared): Shared_, Path(channel): Path<String>, headers: HeaderMap) -> Response {
    let id = channel.parse::<u64>().ok();
    let index = shared.record(&Method::GET, format!("/api/v10/channels/{channel}"), id, Value::Null);
    let response = if !shared.authorized(&headers) {
        error(401, 0, "401: Unauthorized")
    } else {
        let state = lock(&shared.state);
        match id.and_then(|id| Some((id, state.channels.get(&id)?))) {
            Some((id, info)) => axum::Json(info.to_json(id)).into_response(),
            None => error(404, 10003, "Unknown Channel"),
        }
    };
    shared.answer(index, response)
}

/// Why a message call does not go ahead: an answer to give instead (boxed: a `Response` is
/// large for a `Result`'s error), or a scripted dropped connection.
enum Refused {
    Answer(Box<Response>),
    /// [`Fault::DropBeforeApply`]: no answer at all, and nothing applied.
    Drop,
}

impl From<Response> for Refused {
    fn from(response: Response) -> Self {
        Refused::Answer(Box::new(response))
    }
}

/// A response whose body fails at once: the client sees the connection close mid-answer.
fn dropped_response() -> Response {
    let failed = futures::stream::once(async {
        Err::<Bytes, io::Error>(io::Error::new(io::ErrorKind::ConnectionAborted, "scripted dropped connection"))
    });
    Response::new(Body::from_stream(failed))
}

/// A message call that passed the shared checks.
struct Admitted {
    channel: u64,
    /// Run the call, then drop the connection instead of answering ([`Fault::ApplyThenDrop`]).
    drop_answer: bool,
}

/// The channel a stored message is in.
fn channel_of(message: &Value) -> Option<u64> {
    message["channel_id"].as_str()?.parse().ok()
}

/// The checks every message call shares, in this order: the token, the channel, a storm
/// (which leaves queued faults alone), a scripted fault, the per-channel limit.
fn check_message_call(shared: &Shared, headers: &HeaderMap, channel: Option<u64>) -> Result<Admitted, Refused> {
    if !shared.authorized(headers) {
        return Err(error(401, 0, "401: Unauthorized").into());
    }
    let mut state = lock(&shared.state);
    let Some(channel) = channel.filter(|id| state.channels.contains_key(id)) else {
        return Err(error(404, 10003, "Unknown Channel").into());
    };
    let now = Instant::now();
    if let Some(storm) = state.storms.get(&channel).copied() {
        if storm.until > now {
            return Err(rate_limited(storm.retry_after).into());
        }
        state.storms.remove(&channel);
    }
    let mut drop_answer = false;
    match state.faults.get_mut(&channel).and_then(|faults| faults.pop_front()) {
        Some(Fault::RateLimited(retry_after)) => return Err(rate_limited(retry_after).into()),
        Some(Fault::Status(status)) if status >= 500 => {
            return Err(error(status, 0, "500: Internal Server Error").into());
        }
        Some(Fault::Status(status)) => return Err(error(status, 50001, "Missing Access").into()),
        Some(Fault::DropBeforeApply) => return Err(Refused::Drop),
        Some(Fault::ApplyThenDrop) => drop_answer = true,
        None => {}
    }
    state.admit(channel, now).map_err(|wait| Refused::from(rate_limited(wait.as_secs_f64().max(0.001))))?;
    Ok(Admitted { channel, drop_answer })
}

/// The content's problem, as Discord reports it, if any. It may be empty only when the
/// message carries files.
fn check_content(content: Option<&str>, may_be_empty: bool) -> Result<(), Refused> {
    let content = content.unwrap_or_default();
    if content.trim().is_empty() && !may_be_empty {
        return Err(error(400, 50006, "Cannot send an empty message").into());
    }
    if content.chars().count() > TEXT_LIMIT {
        let body = json!({
            "code": 50035,
            "message": "Invalid Form Body",
            "errors": { "content": { "_errors": [
                { "code": "BASE_TYPE_MAX_LENGTH", "message": format!("Must be {TEXT_LIMIT} or fewer in length.") }
            ] } }
        });
        return Err((StatusCode::BAD_REQUEST, axum::Json(body)).into_response().into());
    }
    Ok(())
}

/// The create's `nonce` (a string, or an integer as Discord also accepts), or Discord's
/// refusal of one longer than 25 characters.
fn check_nonce(body: &Value) -> Result<Option<String>, Refused> {
    let nonce = match body.get("nonce") {
        Some(Value::String(nonce)) => nonce.clone(),
        Some(Value::Number(number)) => number.to_string(),
        _ => return Ok(None),
    };
    if nonce.chars().count() > NONCE_LIMIT {
        let body = json!({
            "code": 50035,
            "message": "Invalid Form Body",
            "errors": { "nonce": { "_errors": [
                { "code": "BASE_TYPE_MAX_LENGTH", "message": format!("Must be {NONCE_LIMIT} or fewer in length.") }
            ] } }
        });
        return Err((StatusCode::BAD_REQUEST, axum::Json(body)).into_response().into());
    }
    Ok(Some(nonce))
}

fn parse_body(body: &Bytes) -> Value {
    serde_json::from_slice(body).unwrap_or(Value::Null)
}

async fn create_message(
    AxumState(shared): Shared_,
    Path(channel): Path<String>,
    headers: HeaderMap,
    extensions: Extensions,
    body: Bytes,
) -> Response {
    // A create with files is a multipart form whose `payload_json` is the JSON body.
    let multipart = media::is_multipart(&headers);
    let (body, mut form_error, parts) = if multipart {
        let Upload { payload, parts } = media::parse(&headers, extensions, body).await;
        match payload {
            Ok(payload) => (payload, None, parts),
            Err(refusal) => (Value::Null, Some(refusal), parts),
        }
    } else {
        (parse_body(&body), None, Vec::new())
    };
    let channel_id = channel.parse::<u64>().ok();
    let index = shared.record(&Method::POST, format!("/api/v10/channels/{channel}/messages"), channel_id, body.clone());
    if let Some(call) = lock(&shared.state).calls.get_mut(index) {
        call.files = parts
            .iter()
            .map(|part| UploadedFile {
                index: part.index,
                filename: part.filename.clone(),
                content_type: part.content_type.clone(),
                size: part.bytes.len(),
            })
            .collect();
    }
    let mut drop_answer = false;
    let outcome = (|| -> Result<Response, Refused> {
        let admitted = check_message_call(&shared, &headers, channel_id)?;
        drop_answer = admitted.drop_answer;
        let channel = admitted.channel;
        if let Some(refusal) = form_error.take() {
            return Err(refusal.into());
        }
        let files = if multipart { media::check(&body, &parts).map_err(Refused::Answer)? } else { Vec::new() };
        let content = body.get("content").and_then(Value::as_str);
        check_content(content, !files.is_empty())?;
        let nonce = check_nonce(&body)?;
        let enforce_nonce = body.get("enforce_nonce").and_then(Value::as_bool) == Some(true);
        let content = content.unwrap_or_default();
        let reply_to =
            body.pointer("/message_reference/message_id").and_then(Value::as_str).and_then(|id| id.parse().ok());
        let base_url = shared.url();
        let mut state = lock(&shared.state);
        let now = Instant::now();
        if let Some(nonce) = nonce.as_ref().filter(|_| enforce_nonce)
            && let Some(message_id) = state.created_under(channel, nonce, now)
            && let Some(existing) = state.messages.get(&message_id).map(|stored| stored.json.clone())
        {
            state.nonce_replays.push(NonceReplay { channel_id: channel, nonce: nonce.clone(), message_id });
            return Ok(axum::Json(existing).into_response());
        }
        let id = state.next_id();
        let bot = state.bot.clone();
        let reply_to = reply_to.filter(|id| state.messages.contains_key(id));
        let mut json = state.message_json(id, channel, &bot, content, reply_to);
        let mut attachments = Vec::new();
        let mut objects = Vec::new();
        for file in files {
            let content_type = file.part.content_type.as_deref();
            let (attachment_id, object) =
                state.publish(&base_url, channel, &file.filename, content_type, file.part.bytes.clone());
            attachments.push(SentAttachment {
                id: attachment_id,
                filename: file.filename,
                content_type: file.part.content_type,
                bytes: file.part.bytes.to_vec(),
                url: object["url"].as_str().unwrap_or_default().to_owned(),
            });
            objects.push(object);
        }
        json["attachments"] = objects.into();
        if let Some(nonce) = &nonce {
            json["nonce"] = nonce.clone().into();
            state.nonces.insert((channel, nonce.clone()), NonceUse { message_id: id, at: now });
        }
        let content = content.to_owned();
        let sent = SentMessage { channel_id: channel, message_id: id, content, reply_to, edits: 0, attachments };
        state.messages.insert(id, super::state::StoredMessage { json: json.clone(), sent: Some(sent) });
        Ok(axum::Json(json).into_response())
    })();
    shared.conclude(index, outcome, drop_answer)
}

async fn edit_message(
    AxumState(shared): Shared_,
    Path((channel, message)): Path<(String, String)>,
    headers: HeaderMap,
    body: Bytes,
) -> Response {
    let body = parse_body(&body);
    let channel_id = channel.parse::<u64>().ok();
    let path = format!("/api/v10/channels/{channel}/messages/{message}");
    let index = shared.record(&Method::PATCH, path, channel_id, body.clone());
    let mut drop_answer = false;
    let outcome = (|| -> Result<Response, Refused> {
        let admitted = check_message_call(&shared, &headers, channel_id)?;
        drop_answer = admitted.drop_answer;
        let channel = admitted.channel;
        let content = body.get("content").and_then(Value::as_str);
        check_content(content, false)?;
        let mut state = lock(&shared.state);
        let stored = message.parse::<u64>().ok().and_then(|id| state.messages.get_mut(&id));
        let Some(stored) = stored.filter(|stored| channel_of(&stored.json) == Some(channel)) else {
            return Err(error(404, 10008, "Unknown Message").into());
        };
        let Some(sent) = stored.sent.as_mut() else {
            return Err(error(403, 50005, "Cannot edit a message authored by another user").into());
        };
        let content = content.unwrap_or_default();
        if sent.content != content {
            sent.content = content.to_owned();
            sent.edits += 1;
        }
        stored.json["content"] = content.into();
        stored.json["edited_timestamp"] = super::state::timestamp().into();
        Ok(axum::Json(stored.json.clone()).into_response())
    })();
    shared.conclude(index, outcome, drop_answer)
}

async fn delete_message(
    AxumState(shared): Shared_,
    Path((channel, message)): Path<(String, String)>,
    headers: HeaderMap,
) -> Response {
    let channel_id = channel.parse::<u64>().ok();
    let path = format!("/api/v10/channels/{channel}/messages/{message}");
    let index = shared.record(&Method::DELETE, path, channel_id, Value::Null);
    let mut drop_answer = false;
    let outcome = (|| -> Result<Response, Refused> {
        let admitted = check_message_call(&shared, &headers, channel_id)?;
        drop_answer = admitted.drop_answer;
        let channel = admitted.channel;
        let mut state = lock(&shared.state);
        let id = message.parse::<u64>().ok();
        let found = id.filter(|id| state.messages.get(id).is_some_and(|m| channel_of(&m.json) == Some(channel)));
        let Some(id) = found else { return Err(error(404, 10008, "Unknown Message").into()) };
        state.messages.remove(&id);
        Ok(StatusCode::NO_CONTENT.into_response())
    })();
    shared.conclude(index, outcome, drop_answer)
}

async fn typing(AxumState(shared): Shared_, Path(channel): Path<String>, headers: HeaderMap) -> Response {
    let channel_id = channel.parse::<u64>().ok();
    let index = shared.record(&Method::POST, format!("/api/v10/channels/{channel}/typing"), channel_id, Value::Null);
    let response = if !shared.authorized(&headers) {
        error(401, 0, "401: Unauthorized")
    } else {
        let mut state = lock(&shared.state);
        match channel_id.filter(|id| state.channels.contains_key(id)) {
            Some(id) => {
                state.typing.push(id);
                StatusCode::NO_CONTENT.into_response()
            }
            None => error(404, 10003, "Unknown Channel"),
        }
    };
    shared.answer(index, response)
}
