//! The Web API at `{url}/api/{method}`: GET or POST, parameters from the query string, a form
//! body or a JSON body, the token from `Authorization: Bearer` (or a `token` parameter).
//!
//! Answers use Slack's shapes: `{"ok": true, …}` on success, HTTP 200 with
//! `{"ok": false, "error": "<code>"}` on a refusal (`invalid_auth`, `msg_too_long`,
//! `message_not_found`, `channel_not_found`, `no_text`…), and HTTP 429 with `Retry-After` and
//! `{"ok": false, "error": "ratelimited"}` when rate-limited. A scripted dropped connection
//! ends a call without an answer, before or after the method ran.
//!
//! `conversations.history` lists a channel's top-level messages newest first (thread parents
//! with `reply_count`, `latest_reply`, `reply_users`); `conversations.replies` a thread, its
//! parent first and then the replies oldest first, as Slack does. Both honour `limit`,
//! `oldest`, `latest` and `inclusive`, answer `has_more`, show `metadata` only with
//! `include_all_metadata=true`, and do not paginate with cursors.
//!
//! The `files.*` methods are in `files.rs`.

use std::io;
use std::sync::Arc;

use axum::body::{Body, Bytes};
use axum::extract::{Path, State as AxumState};
use axum::http::{HeaderMap, HeaderValue, StatusCode, Uri, header};
use axum::response::{IntoResponse, Response};
use serde_json::{Value, json};
use tokio::time::Instant;

use super::files;
use super::state::{Fault, Listed, ts_key};
use super::{BOT_ID, BOT_USER_ID, Call, Dropped, PostedMessage, Shared, TEAM_ID, TEXT_LIMIT, lock};
use crate::telegram::params::Params;

pub(crate) async fn call(
    AxumState(shared): AxumState<Arc<Shared>>,
    Path(method): Path<String>,
    uri: Uri,
    headers: HeaderMap,
    body: Bytes,
) -> Response {
    let content_type = headers.get(header::CONTENT_TYPE).and_then(|value| value.to_str().ok());
    let params = Params::parse(uri.query(), content_type, &body).unwrap_or_default();
    let token = headers
        .get(header::AUTHORIZATION)
        .and_then(|value| value.to_str().ok())
        .and_then(|value| value.strip_prefix("Bearer "))
        .map(str::to_owned)
        .or_else(|| params.str("token").map(str::to_owned));
    let index = shared.record(Call {
        method: method.clone(),
        params: params.to_value(),
        at: Instant::now(),
        status: None,
        dropped: None,
    });
    let fault = lock(&shared.state).take_fault(&method);
    let drop_answer = match fault {
        Some(Fault::DropBeforeApply) => {
            shared.finish_dropped(index, Dropped::BeforeApply);
            return dropped_response();
        }
        Some(Fault::ApplyThenDrop) => true,
        _ => false,
    };
    let (status, retry_after, body) = answer(&shared, &method, token.as_deref(), &params, fault);
    if drop_answer {
        // The method ran and its effects stay; only the answer is lost on the way back.
        shared.finish_dropped(index, Dropped::AfterApply(status.as_u16()));
        return dropped_response();
    }
    shared.finish(index, status.as_u16());
    let mut response = (status, axum::Json(body)).into_response();
    if let Some(secs) = retry_after
        && let Ok(value) = HeaderValue::from_str(&secs.to_string())
    {
        response.headers_mut().insert(header::RETRY_AFTER, value);
    }
    response
}

/// An answer's status, `Retry-After` seconds and JSON body.
pub(super) type Answer = (StatusCode, Option<u64>, Value);

/// A response whose body fails at once: the client sees the connection close mid-answer.
fn dropped_response() -> Response {
    let failed = futures::stream::once(async {
        Err::<Bytes, io::Error>(io::Error::new(io::ErrorKind::ConnectionAborted, "scripted dropped connection"))
    });
    Response::new(Body::from_stream(failed))
}

pub(super) fn ok(body: Value) -> Answer {
    let mut body = body;
    body["ok"] = Value::Bool(true);
    (StatusCode::OK, None, body)
}

pub(super) fn refuse(code: &str) -> Answer {
    (StatusCode::OK, None, json!({"ok": false, "error": code}))
}

/// Runs one call: a scripted answer (already taken from the queue), else the token check and
/// the method.
fn answer(shared: &Shared, method: &str, token: Option<&str>, params: &Params, fault: Option<Fault>) -> Answer {
    match fault {
        Some(Fault::Error(code)) => return refuse(&code),
        Some(Fault::RateLimited(secs)) => {
            lock(&shared.state).rate_limited += 1;
            return (StatusCode::TOO_MANY_REQUESTS, Some(secs), json!({"ok": false, "error": "ratelimited"}));
        }
        Some(Fault::Status(status)) => {
            let status = StatusCode::from_u16(status).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR);
            return (status, None, json!({"ok": false, "error": "internal_error"}));
        }
        Some(Fault::DropBeforeApply | Fault::ApplyThenDrop) | None => {}
    }
    let app_method = method == "apps.connections.open";
    let expected = if app_method { &shared.app_token } else { &shared.bot_token };
    match token {
        None => return refuse("not_authed"),
        Some(token) if token != expected => {
            let other = if app_method { &shared.bot_token } else { &shared.app_token };
            return refuse(if token == other { "not_allowed_token_type" } else { "invalid_auth" });
        }
        Some(_) => {}
    }
    match method {
        "auth.test" => ok(json!({
            "url": "https://ferry-test.slack.com/", "team": "Ferry Test", "user": "ferry",
            "team_id": TEAM_ID, "user_id": BOT_USER_ID, "bot_id": BOT_ID, "is_enterprise_install": false,
        })),
        "apps.connections.open" => {
            let ticket = lock(&shared.state).next_ts();
            ok(json!({ "url": format!("{}/link/?ticket={ticket}", shared.ws_url()) }))
        }
        "chat.postMessage" => post_message(shared, params),
        "chat.update" => update(shared, params),
        "chat.delete" => delete(shared, params),
        "conversations.info" => conversations_info(shared, params),
        "conversations.history" => conversations_history(shared, params),
        "conversations.replies" => conversations_replies(shared, params),
        "files.getUploadURLExternal" => files::get_upload_url(shared, params),
        "files.completeUploadExternal" => files::complete_upload(shared, params),
        "files.info" => files::info(shared, params),
        "files.delete" => files::delete(shared, params),
        // Retired by Slack in favour of the external upload flow.
        "files.upload" => refuse("method_deprecated"),
        _ => refuse("unknown_method"),
    }
}

fn channel_param(params: &Params) -> Result<String, Answer> {
    match params.str("channel") {
        Some(channel) if channel.starts_with(['C', 'D', 'G']) => Ok(channel.to_owned()),
        Some(_) => Err(refuse("channel_not_found")),
        None => Err(refuse("channel_not_found")),
    }
}

fn text_param(params: &Params) -> Result<String, Answer> {
    let text = params.str("text").unwrap_or_default();
    if text.trim().is_empty() {
        return Err(refuse("no_text"));
    }
    if text.chars().count() > TEXT_LIMIT {
        return Err(refuse("msg_too_long"));
    }
    Ok(text.to_owned())
}

fn post_message(shared: &Shared, params: &Params) -> Answer {
    let (channel, text) = match (channel_param(params), text_param(params)) {
        (Ok(channel), Ok(text)) => (channel, text),
        (Err(answer), _) | (_, Err(answer)) => return answer,
    };
    let thread_ts = params.str("thread_ts").filter(|ts| !ts.is_empty()).map(str::to_owned);
    let metadata = match metadata_param(params) {
        Ok(metadata) => metadata.filter(|metadata| !metadata.is_null()),
        Err(answer) => return answer,
    };
    let mut state = lock(&shared.state);
    if state.enforce_rate_limits
        && let Err(secs) = state.take_token(&channel, Instant::now())
    {
        state.rate_limited += 1;
        return (StatusCode::TOO_MANY_REQUESTS, Some(secs), json!({"ok": false, "error": "ratelimited"}));
    }
    let ts = state.next_ts();
    state.messages.push(PostedMessage {
        channel: channel.clone(),
        ts: ts.clone(),
        thread_ts: thread_ts.clone(),
        text: text.clone(),
        edits: 0,
        metadata,
        files: Vec::new(),
    });
    drop(state);
    shared.bump();
    let mut message = json!({"type": "message", "text": text, "user": BOT_USER_ID, "bot_id": BOT_ID, "ts": ts});
    if let Some(thread_ts) = thread_ts {
        message["thread_ts"] = thread_ts.into();
    }
    ok(json!({"channel": channel, "ts": ts, "message": message}))
}

fn update(shared: &Shared, params: &Params) -> Answer {
    let (channel, text) = match (channel_param(params), text_param(params)) {
        (Ok(channel), Ok(text)) => (channel, text),
        (Err(answer), _) | (_, Err(answer)) => return answer,
    };
    let ts = params.str("ts").unwrap_or_default().to_owned();
    let metadata = match metadata_param(params) {
        Ok(metadata) => metadata,
        Err(answer) => return answer,
    };
    let mut state = lock(&shared.state);
    let Some(message) = state.messages.iter_mut().find(|m| m.channel == channel && m.ts == ts) else {
        return refuse("message_not_found");
    };
    message.text.clone_from(&text);
    message.edits += 1;
    // Without a `metadata` argument the message keeps its metadata; `{}` removes it.
    if let Some(metadata) = metadata {
        message.metadata = Some(metadata).filter(|metadata| !metadata.is_null());
    }
    let thread_ts = message.thread_ts.clone();
    drop(state);
    shared.bump();
    ok(json!({
        "channel": channel, "ts": ts, "text": text, "thread_ts": thread_ts,
        "message": {"text": text, "user": BOT_USER_ID, "bot_id": BOT_ID},
    }))
}

fn delete(shared: &Shared, params: &Params) -> Answer {
    let channel = match channel_param(params) {
        Ok(channel) => channel,
        Err(answer) => return answer,
    };
    let ts = params.str("ts").unwrap_or_default().to_owned();
    let mut state = lock(&shared.state);
    let before = state.messages.len();
    state.messages.retain(|m| !(m.channel == channel && m.ts == ts));
    if state.messages.len() == before {
        return refuse("message_not_found");
    }
    drop(state);
    shared.bump();
    ok(json!({"channel": channel, "ts": ts}))
}

fn conversations_info(shared: &Shared, params: &Params) -> Answer {
    let channel = match channel_param(params) {
        Ok(channel) => channel,
        Err(answer) => return answer,
    };
    let mpim = lock(&shared.state).mpims.contains(&channel);
    let (is_im, is_channel, is_private) = match channel.chars().next() {
        Some('D') => (true, false, true),
        Some('C') => (false, true, false),
        _ => (false, false, true),
    };
    ok(json!({"channel": {
        "id": channel, "name": channel.to_lowercase(), "created": 1_600_000_000,
        "is_channel": is_channel, "is_group": !is_im && !is_channel && !mpim, "is_im": is_im,
        "is_mpim": mpim, "is_private": is_private, "is_member": true, "is_archived": false,
    }}))
}

/// The `metadata` argument (a JSON object, or one URL-encoded as a string): `Ok(None)` when
/// absent, `Ok(Some(Null))` for `{}` (no metadata), else `{"event_type", "event_payload"}`.
fn metadata_param(params: &Params) -> Result<Option<Value>, Answer> {
    if params.str("metadata").is_none() && params.json("metadata").is_none() {
        return Ok(None);
    }
    let Some(Value::Object(metadata)) = params.json("metadata") else {
        return Err(refuse("invalid_metadata_format"));
    };
    if metadata.is_empty() {
        return Ok(Some(Value::Null));
    }
    match (metadata.get("event_type"), metadata.get("event_payload")) {
        (Some(Value::String(event_type)), Some(Value::Object(_)) | None) if !event_type.is_empty() => {
            Ok(Some(Value::Object(metadata)))
        }
        _ => Err(refuse("invalid_metadata_format")),
    }
}

/// Which messages of a listing the `oldest`, `latest`, `inclusive` and `limit` arguments
/// keep, and the message object of each (with `metadata` if `include_all_metadata`).
struct Window {
    oldest: Option<(u64, u64)>,
    latest: Option<(u64, u64)>,
    inclusive: bool,
    limit: usize,
    include_metadata: bool,
}

/// Slack's default `limit` for both methods is 100 (history) / 1000 (replies); the fake uses
/// 100 for both unless told.
const DEFAULT_LIMIT: usize = 100;

impl Window {
    fn of(params: &Params) -> Self {
        let ts = |name: &str| params.str(name).filter(|ts| !ts.is_empty()).map(ts_key);
        let limit = params.int("limit").filter(|limit| *limit > 0).map_or(DEFAULT_LIMIT, |limit| limit as usize);
        Self {
            oldest: ts("oldest"),
            latest: ts("latest"),
            inclusive: flag(params, "inclusive"),
            limit,
            include_metadata: flag(params, "include_all_metadata"),
        }
    }

    fn contains(&self, ts: &str) -> bool {
        let key = ts_key(ts);
        let after_oldest = self.oldest.is_none_or(|oldest| key > oldest || (self.inclusive && key == oldest));
        let before_latest = self.latest.is_none_or(|latest| key < latest || (self.inclusive && key == latest));
        after_oldest && before_latest
    }

    fn show(&self, message: &Listed) -> Value {
        let mut json = message.json.clone();
        if self.include_metadata
            && let Some(metadata) = &message.metadata
        {
            json["metadata"] = metadata.clone();
        }
        json
    }
}

/// A boolean argument: `true`/`1` (form and query values are strings), or JSON `true`.
fn flag(params: &Params, name: &str) -> bool {
    params.bool(name) == Some(true) || params.int(name) == Some(1)
}

/// `messages` and `has_more` for the page `window` cuts from `listed` (already in answer
/// order).
fn page(window: &Window, listed: &[Listed], shown: impl Fn(&Listed) -> Value) -> Answer {
    let matching: Vec<&Listed> = listed.iter().filter(|m| window.contains(&m.ts)).collect();
    let has_more = matching.len() > window.limit;
    let messages: Vec<Value> = matching.into_iter().take(window.limit).map(shown).collect();
    ok(json!({"messages": messages, "has_more": has_more, "response_metadata": {"next_cursor": ""}}))
}

fn conversations_history(shared: &Shared, params: &Params) -> Answer {
    let channel = match channel_param(params) {
        Ok(channel) => channel,
        Err(answer) => return answer,
    };
    let conversation = lock(&shared.state).conversation(&channel);
    let window = Window::of(params);
    // Top-level messages only (thread replies are in `conversations.replies`), newest first.
    let mut top_level: Vec<Listed> = conversation.iter().filter(|m| !m.is_reply()).cloned().collect();
    top_level.reverse();
    page(&window, &top_level, |message| {
        let mut json = window.show(message);
        let replies: Vec<&Listed> =
            conversation.iter().filter(|r| r.is_reply() && r.thread_ts == Some(message.ts.clone())).collect();
        if let Some(latest) = replies.iter().map(|r| r.ts.as_str()).max_by_key(|ts| ts_key(ts)) {
            let mut users: Vec<&str> = Vec::new();
            for reply in &replies {
                if !users.contains(&reply.user.as_str()) {
                    users.push(&reply.user);
                }
            }
            json["thread_ts"] = message.ts.clone().into();
            json["reply_count"] = replies.len().into();
            json["reply_users_count"] = users.len().into();
            json["reply_users"] = users.into();
            json["latest_reply"] = latest.into();
        }
        json
    })
}

fn conversations_replies(shared: &Shared, params: &Params) -> Answer {
    let channel = match channel_param(params) {
        Ok(channel) => channel,
        Err(answer) => return answer,
    };
    let Some(ts) = params.str("ts").filter(|ts| !ts.is_empty()) else {
        return refuse("invalid_arguments");
    };
    let conversation = lock(&shared.state).conversation(&channel);
    // `ts` may name the parent or any message of the thread.
    let parent =
        conversation.iter().find(|m| m.ts == ts).and_then(|m| m.thread_ts.clone()).unwrap_or_else(|| ts.to_owned());
    let thread: Vec<Listed> = conversation
        .into_iter()
        .filter(|m| m.ts == parent || m.thread_ts.as_deref() == Some(parent.as_str()))
        .collect();
    if thread.is_empty() {
        return refuse("thread_not_found");
    }
    let window = Window::of(params);
    page(&window, &thread, |message| window.show(message))
}
