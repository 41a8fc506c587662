//! HTTP mode: Slack's Events API POSTs each event to the gateway's `/slack/events`.
//!
//! The gateway mounts [`SlackChannel::events_router`](crate::SlackChannel::events_router) on
//! its HTTP server. A request is answered 401 without being parsed unless it carries
//! `X-Slack-Request-Timestamp` within [`MAX_REQUEST_AGE`] of now (a replayed request is
//! refused) and `X-Slack-Signature: v0=<hex HMAC-SHA256 of "v0:{ts}:{body}">` under the app's
//! signing secret, compared in constant time. A `url_verification` request is answered with
//! its challenge. An event is answered 200 only after the core accepted it (see
//! [`Inbound::receive`]); 503 otherwise, so Slack retries it (with `X-Slack-Retry-Num`),
//! and the retry of an accepted event is answered 200 without a second run.

use std::sync::Arc;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use axum::Router;
use axum::body::Bytes;
use axum::extract::State;
use axum::http::{HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::post;
use slack_morphism::SlackSigningSecret;
use slack_morphism::events::SlackPushEvent;
use slack_morphism::signature_verifier::SlackEventSignatureVerifier;
use tracing::{debug, warn};

use crate::CHANNEL_NAME;
use crate::inbound::Inbound;

/// The path the gateway serves the Events API on (SPEC §8): the account `default`'s, which
/// also answers at `/slack/events/default`.
pub const EVENTS_PATH: &str = "/slack/events";

/// The paths the Events API of the account `account_id` is served on: `/slack/events/<id>`
/// for each app, and the bare [`EVENTS_PATH`] too for the account `default`.
pub fn events_paths(account_id: &str) -> Vec<String> {
    let own = format!("{EVENTS_PATH}/{account_id}");
    if account_id == ferry_channel::DEFAULT_ACCOUNT_ID { vec![EVENTS_PATH.to_owned(), own] } else { vec![own] }
}

/// Slack's replay window: a request signed more than five minutes away from now is refused.
pub const MAX_REQUEST_AGE: Duration = Duration::from_secs(300);

const TIMESTAMP_HEADER: &str = "x-slack-request-timestamp";
const SIGNATURE_HEADER: &str = "x-slack-signature";
const RETRY_HEADER: &str = "x-slack-retry-num";

pub(crate) struct EventsState {
    pub(crate) verifier: SlackEventSignatureVerifier,
    pub(crate) inbound: Arc<Inbound>,
}

impl EventsState {
    pub(crate) fn new(signing_secret: &str, inbound: Arc<Inbound>) -> Self {
        let secret = SlackSigningSecret::new(signing_secret.to_owned());
        Self { verifier: SlackEventSignatureVerifier::new(&secret), inbound }
    }
}

pub(crate) fn router(state: Arc<EventsState>) -> Router {
    let paths = events_paths(&state.inbound.account_id);
    paths.iter().fold(Router::new(), |router, path| router.route(path, post(receive))).with_state(state)
}

async fn receive(State(state): State<Arc<EventsState>>, headers: HeaderMap, body: Bytes) -> Response {
    let account_id = &state.inbound.account_id;
    let header = |name| headers.get(name).and_then(|value| value.to_str().ok());
    let (Some(timestamp), Some(signature)) = (header(TIMESTAMP_HEADER), header(SIGNATURE_HEADER)) else {
        warn!(channel = CHANNEL_NAME, %account_id, "Events API request without a signature; refused");
        return StatusCode::UNAUTHORIZED.into_response();
    };
    if !is_fresh(timestamp, SystemTime::now()) {
        warn!(channel = CHANNEL_NAME, %account_id, timestamp, "Events API request outside the 5-minute window; refused");
        return StatusCode::UNAUTHORIZED.into_response();
    }
    let Ok(body) = std::str::from_utf8(&body) else {
        return StatusCode::BAD_REQUEST.into_response();
    };
    if state.verifier.verify(signature, body, timestamp).is_err() {
        warn!(channel = CHANNEL_NAME, %account_id, "Events API request with a wrong signature; refused");
        return StatusCode::UNAUTHORIZED.into_response();
    }
    let retry = header(RETRY_HEADER).unwrap_or("0");
    match serde_json::from_str::<SlackPushEvent>(body) {
        Ok(SlackPushEvent::UrlVerification(verification)) => {
            debug!(channel = CHANNEL_NAME, %account_id, "url_verification answered");
            axum::Json(serde_json::json!({ "challenge": verification.challenge })).into_response()
        }
        Ok(SlackPushEvent::EventCallback(callback)) => {
            debug!(channel = CHANNEL_NAME, %account_id, event_id = %callback.event_id.0, retry, "Events API event");
            if state.inbound.receive(&callback).await.confirm() {
                StatusCode::OK.into_response()
            } else {
                StatusCode::SERVICE_UNAVAILABLE.into_response()
            }
        }
        Ok(SlackPushEvent::AppRateLimited(limited)) => {
            warn!(channel = CHANNEL_NAME, %account_id, team_id = %limited.team_id, "Slack is dropping this app's events for a minute (app_rate_limited)");
            StatusCode::OK.into_response()
        }
        Err(error) => {
            // Answered 200: the same body will not parse better when Slack retries it.
            warn!(channel = CHANNEL_NAME, %account_id, %error, "Events API payload Ferry cannot read; skipped");
            StatusCode::OK.into_response()
        }
    }
}

/// Whether a request timestamp (Unix seconds) is within [`MAX_REQUEST_AGE`] of `now`, on
/// either side.
fn is_fresh(timestamp: &str, now: SystemTime) -> bool {
    let Ok(timestamp) = timestamp.trim().parse::<u64>() else { return false };
    let Ok(now) = now.duration_since(UNIX_EPOCH) else { return false };
    now.as_secs().abs_diff(timestamp) <= MAX_REQUEST_AGE.as_secs()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_timestamps_within_five_minutes_are_fresh() {
        let now = UNIX_EPOCH + Duration::from_secs(1_700_000_000);
        assert!(is_fresh("1700000000", now));
        assert!(is_fresh("1699999700", now));
        assert!(is_fresh("1700000300", now));
        assert!(!is_fresh("1699999640", now), "six minutes old");
        assert!(!is_fresh("1700000400", now), "too far ahead");
        assert!(!is_fresh("yesterday", now));
    }
}
