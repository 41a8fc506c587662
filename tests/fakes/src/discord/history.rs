//! `GET /api/v10/channels/{id}/messages`: a channel's history, as a bot reads it to catch up
//! on what the gateway did not deliver.
//!
//! Discord's semantics: `limit` is 1–100 (default 50, anything else is 400 code 50035);
//! with `after`, the `limit` oldest messages newer than `after`; with `before`, the `limit`
//! newest older than it; with neither, the newest `limit`. The answer lists them newest
//! first, the bot's own messages included. Each answer carries the `X-RateLimit-*` headers
//! of the route's bucket; a read scripted with [`FakeDiscord::fail_next_history_read`] is
//! answered 429 with `retry_after`, as Discord does.
//!
//! [`FakeDiscord::fail_next_history_read`]: super::FakeDiscord::fail_next_history_read

use std::collections::HashMap;
use std::sync::Arc;

use axum::extract::{Path, RawQuery, State as AxumState};
use axum::http::{HeaderMap, HeaderValue, Method};
use axum::response::{IntoResponse, Response};
use serde_json::Value;

use super::rest::{error, rate_limited};
use super::{Shared, lock};

/// How many history reads the fake's bucket allows per window, announced in the headers.
const BUCKET_LIMIT: u32 = 5;

pub(crate) async fn list_messages(
    AxumState(shared): AxumState<Arc<Shared>>,
    Path(channel): Path<String>,
    RawQuery(query): RawQuery,
    headers: HeaderMap,
) -> Response {
    // The parameters are ids and numbers: nothing to percent-decode.
    let query: HashMap<String, String> = query
        .unwrap_or_default()
        .split('&')
        .filter_map(|pair| pair.split_once('='))
        .map(|(name, value)| (name.to_owned(), value.to_owned()))
        .collect();
    let channel_id = channel.parse::<u64>().ok();
    let path = format!("/api/v10/channels/{channel}/messages");
    let index = shared.record(&Method::GET, path, channel_id, serde_json::to_value(&query).unwrap_or(Value::Null));
    let response = answer(&shared, &headers, channel_id, &query);
    shared.answer(index, response)
}

fn answer(shared: &Shared, headers: &HeaderMap, channel: Option<u64>, query: &HashMap<String, String>) -> Response {
    if !shared.authorized(headers) {
        return error(401, 0, "401: Unauthorized");
    }
    let mut state = lock(&shared.state);
    let Some(channel) = channel.filter(|id| state.channels.contains_key(id)) else {
        return error(404, 10003, "Unknown Channel");
    };
    if let Some(retry_after) = state.history_faults.get_mut(&channel).and_then(|faults| faults.pop_front()) {
        return rate_limited(retry_after);
    }
    let limit = match query.get("limit").map(|limit| limit.parse::<usize>()) {
        None => 50,
        Some(Ok(limit)) if (1..=100).contains(&limit) => limit,
        Some(_) => return error(400, 50035, "Invalid Form Body"),
    };
    let bound = |name: &str| query.get(name).and_then(|id| id.parse::<u64>().ok());
    let in_channel = state
        .messages
        .iter()
        .filter(|(_, stored)| stored.json["channel_id"].as_str() == Some(channel.to_string().as_str()));
    let mut page: Vec<(u64, Value)> = match (bound("after"), bound("before")) {
        (Some(after), _) => {
            in_channel.filter(|(id, _)| **id > after).take(limit).map(|(id, s)| (*id, s.json.clone())).collect()
        }
        (None, Some(before)) => {
            let older: Vec<_> = in_channel.filter(|(id, _)| **id < before).collect();
            older.into_iter().rev().take(limit).map(|(id, s)| (*id, s.json.clone())).collect()
        }
        (None, None) => in_channel.rev().take(limit).map(|(id, s)| (*id, s.json.clone())).collect(),
    };
    page.sort_by_key(|(id, _)| std::cmp::Reverse(*id));
    state.history_reads += 1;
    let remaining = BUCKET_LIMIT.saturating_sub(1);
    drop(state);
    let body: Vec<Value> = page.into_iter().map(|(_, json)| json).collect();
    let mut response = axum::Json(body).into_response();
    let headers = response.headers_mut();
    for (name, value) in [
        ("x-ratelimit-limit", BUCKET_LIMIT.to_string()),
        ("x-ratelimit-remaining", remaining.to_string()),
        ("x-ratelimit-reset-after", "5.000".to_owned()),
        ("x-ratelimit-bucket", "fake-channel-history".to_owned()),
    ] {
        if let Ok(value) = HeaderValue::from_str(&value) {
            headers.insert(name, value);
        }
    }
    response
}
