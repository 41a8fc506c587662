//! The Web API at `{url}/api/{method}`: GET or POST, parameters from the query string, a form
//! body or a JSON body, the token from `Authorization: Bearer` (or a `token` parameter).
//!
//! Answers use Slack's shapes: `{"ok": true, …}` on success, HTTP 200 with
//! `{"ok": false, "error": "<code>"}` on a refusal (`invalid_auth`, `msg_too_long`,
//! `message_not_found`, `channel_not_found`, `no_text`…), and HTTP 429 with `Retry-After` and
//! `{"ok": false, "error": "ratelimited"}` when rate-limited.

use std::sync::Arc;

use axum::body::Bytes;
use axum::extract::{Path, State as AxumState};
use axum::http::{HeaderMap, HeaderValue, StatusCode, Uri, header};
use axum::response::{IntoResponse, Response};
use serde_json::{Value, json};
use tokio::time::Instant;

use super::state::Fault;
use super::{BOT_ID, BOT_USER_ID, Call, PostedMessage, Shared, TEAM_ID, TEXT_LIMIT, lock};
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
    let index =
        shared.record(Call { method: method.clone(), params: params.to_value(), at: Instant::now(), status: None });
    let (status, retry_after, body) = answer(&shared, &method, token.as_deref(), &params);
    shared.finish(index, status.as_u16());
    let mut response = (status, axum::Json(body)).into_response();
    if let Some(secs) = retry_after
        && let Ok(value) = HeaderValue::from_str(&secs.to_string())
    {
        response.headers_mut().insert(header::RETRY_AFTER, value);
    }
    response
}

type Answer = (StatusCode, Option<u64>, Value);

fn ok(body: Value) -> Answer {
    let mut body = body;
    body["ok"] = Value::Bool(true);
    (StatusCode::OK, None, body)
}

fn refuse(code: &str) -> Answer {
    (StatusCode::OK, None, json!({"ok": false, "error": code}))
}

fn answer(shared: &Shared, method: &str, token: Option<&str>, params: &Params) -> Answer {
    let fault = lock(&shared.state).take_fault(method);
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
        None => {}
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
    let mut state = lock(&shared.state);
    let Some(message) = state.messages.iter_mut().find(|m| m.channel == channel && m.ts == ts) else {
        return refuse("message_not_found");
    };
    message.text.clone_from(&text);
    message.edits += 1;
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
