//! Webhook mode: Telegram POSTs each update to the gateway's `/telegram-webhook`.
//!
//! The gateway mounts [`TelegramChannel::webhook_router`](crate::TelegramChannel::webhook_router)
//! on its HTTP server. A request must carry the secret registered with `setWebhook`
//! (`X-Telegram-Bot-Api-Secret-Token`), else it is answered 401 without being read. The update
//! goes through the same normalization as in polling mode, and the answer follows the core's
//! [`Ack`]: 200 once the message is recorded (or the update is skipped), 503 when the core
//! abandons it or does not decide within [`ACK_TIMEOUT`], so Telegram delivers it again.

use std::sync::Arc;
use std::time::Duration;

use axum::Router;
use axum::body::Bytes;
use axum::extract::State;
use axum::http::{HeaderMap, StatusCode};
use axum::routing::post;
use ferry_channel::{Ack, AckOutcome, InboundDelivery};
use teloxide::types::Update;
use tokio::sync::mpsc;
use tracing::{debug, warn};

use crate::CHANNEL_NAME;
use crate::normalize::{BotIdentity, log_skipped, normalize};

/// The path the gateway serves Telegram's webhook on (SPEC §8): the account `default`'s,
/// which also answers at `/telegram-webhook/default`.
pub const WEBHOOK_PATH: &str = "/telegram-webhook";

/// The paths the webhook of the account `account_id` is served on: `/telegram-webhook/<id>`
/// for each bot, and the bare [`WEBHOOK_PATH`] too for the account `default` (the path of a
/// single-bot gateway, which its registered webhook keeps using).
pub fn webhook_paths(account_id: &str) -> Vec<String> {
    let own = format!("{WEBHOOK_PATH}/{account_id}");
    if account_id == ferry_channel::DEFAULT_ACCOUNT_ID { vec![WEBHOOK_PATH.to_owned(), own] } else { vec![own] }
}

/// The header Telegram sends the webhook's `secret_token` in.
pub const SECRET_HEADER: &str = "x-telegram-bot-api-secret-token";

/// How long a webhook request waits for the core's ack before asking Telegram to retry.
/// Telegram itself gives up on a request after about a minute.
pub const ACK_TIMEOUT: Duration = Duration::from_secs(30);

pub(crate) struct WebhookState {
    pub(crate) secret: String,
    pub(crate) identity: BotIdentity,
    pub(crate) account_id: String,
    pub(crate) tx: mpsc::Sender<InboundDelivery>,
}

pub(crate) fn router(state: Arc<WebhookState>) -> Router {
    let paths = webhook_paths(&state.account_id);
    paths.iter().fold(Router::new(), |router, path| router.route(path, post(receive))).with_state(state)
}

async fn receive(State(state): State<Arc<WebhookState>>, headers: HeaderMap, body: Bytes) -> StatusCode {
    let authorized =
        headers.get(SECRET_HEADER).is_some_and(|given| constant_time_eq(given.as_bytes(), state.secret.as_bytes()));
    if !authorized {
        warn!(channel = CHANNEL_NAME, account_id = %state.account_id, "webhook request without the right secret token; refused");
        return StatusCode::UNAUTHORIZED;
    }
    let update: Update = match serde_json::from_slice(&body) {
        Ok(update) => update,
        // Answered 200, like any skipped update: Telegram delivers a bot's updates in order
        // and retries a refused one, so refusing it would hold up every update after it,
        // and it will not read better the next time.
        Err(error) => {
            warn!(channel = CHANNEL_NAME, account_id = %state.account_id, %error, "webhook body Ferry cannot read as a Telegram update; skipped");
            return StatusCode::OK;
        }
    };
    let message = match normalize(&update, &state.identity, &state.account_id) {
        Ok(message) => message,
        Err(skip) => {
            log_skipped(&state.account_id, update.id.0, skip);
            return StatusCode::OK;
        }
    };
    let (ack, receiver) = Ack::pair();
    let decided = tokio::time::timeout(ACK_TIMEOUT, async {
        state.tx.send(InboundDelivery { message, ack }).await.ok()?;
        Some(receiver.outcome().await)
    })
    .await;
    match decided {
        Ok(Some(AckOutcome::Accepted)) => StatusCode::OK,
        _ => {
            debug!(channel = CHANNEL_NAME, account_id = %state.account_id, update_id = update.id.0, "update not accepted by the core; Telegram will redeliver it");
            StatusCode::SERVICE_UNAVAILABLE
        }
    }
}

/// Compares without an early exit, so response timing does not reveal the secret.
fn constant_time_eq(a: &[u8], b: &[u8]) -> bool {
    a.len() == b.len() && a.iter().zip(b).fold(0u8, |acc, (x, y)| acc | (x ^ y)) == 0
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn secrets_compare_equal_only_when_identical() {
        assert!(constant_time_eq(b"s3cret", b"s3cret"));
        assert!(!constant_time_eq(b"s3cret", b"s3creT"));
        assert!(!constant_time_eq(b"s3cret", b"s3cret-longer"));
        assert!(!constant_time_eq(b"", b"x"));
    }
}
