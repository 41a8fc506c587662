//! Socket Mode: Slack pushes events over a WebSocket the adapter opens with the app-level
//! token; each `events_api` envelope must be acknowledged with its `envelope_id`.
//!
//! slack-morphism's listener runs the connection (URL from `apps.connections.open`, pings,
//! reconnect on `disconnect` or a dropped socket) and sends the envelope's ack only when the
//! push-event callback returns `Ok`. The callback here returns `Ok` only after
//! [`Inbound::receive`] says the core accepted the message (or it was a skip or a known
//! redelivery); otherwise it returns [`NotAccepted`], the error handler answers with a
//! non-success status, and the envelope stays unacknowledged so Slack redelivers it.
//!
//! Every connection opens with `hello`: the first after start-up, and each after a reconnect.
//! Whatever was written while no socket was open is never pushed, so on each `hello` the
//! conversations seen lately are read back from history (`catch_up.rs`). Their positions are
//! taken in the `hello` callback itself, before slack-morphism reads the connection's next
//! frame, so an event pushed on the new socket cannot move a position past what was missed;
//! the reading runs in its own task, and the socket goes on meanwhile.
//!
//! One connection only: with slack-morphism's default of two, every event arrives twice.
//! Callbacks are plain `fn` pointers, so the adapter's state travels in the listener's user
//! state as an `Arc<Inbound>`.

use std::sync::Arc;

use axum::http::StatusCode;
use slack_morphism::events::SlackPushEventCallback;
use slack_morphism::listener::{HttpStatusCode, SlackClientEventsListenerEnvironment, SlackClientEventsUserState};
use slack_morphism::prelude::SlackClientHyperHttpsConnector;
use slack_morphism::socket_mode::{
    SlackClientSocketModeConfig, SlackClientSocketModeListener, SlackSocketModeListenerCallbacks,
};
use slack_morphism::{SlackApiToken, UserCallbackResult};
use tracing::{debug, error, warn};

use crate::client::Client;
use crate::inbound::Inbound;
use crate::{CHANNEL_NAME, catch_up};

/// Seconds between attempts to open a connection while Slack (or the network) is down.
const RECONNECT_SECONDS: u64 = 3;

/// The callback's error for an event the core did not accept: no ack, Slack redelivers.
#[derive(Debug, thiserror::Error)]
#[error("the core did not accept the event in time; leaving the envelope unacknowledged")]
pub(crate) struct NotAccepted;

/// Runs the Socket Mode listener until the core drops the inbound stream.
pub(crate) async fn run(client: Arc<Client>, app_token: SlackApiToken, inbound: Arc<Inbound>) {
    let environment = Arc::new(
        SlackClientEventsListenerEnvironment::new(client).with_error_handler(on_error).with_user_state(inbound.clone()),
    );
    let callbacks = SlackSocketModeListenerCallbacks::new().with_hello_events(on_hello).with_push_events(on_push_event);
    let config = SlackClientSocketModeConfig::new()
        .with_max_connections_count(1)
        .with_reconnect_timeout_in_seconds(RECONNECT_SECONDS);
    let listener = SlackClientSocketModeListener::new(&config, environment, callbacks);
    if let Err(error) = listener.listen_for(&app_token).await {
        error!(channel = CHANNEL_NAME, account_id = %inbound.account_id, %error, "cannot start Socket Mode; no Slack events will arrive");
        return;
    }
    listener.start().await;
    debug!(channel = CHANNEL_NAME, account_id = %inbound.account_id, "Socket Mode listener started");
    inbound.tx.closed().await;
    listener.shutdown().await;
    debug!(channel = CHANNEL_NAME, account_id = %inbound.account_id, "inbound stream dropped; Socket Mode stopped");
}

/// A connection is open: catch up on what was written while none was. Generic over the
/// event because slack-morphism 2.31 does not export `SlackSocketModeHelloEvent` under a
/// nameable path (its two `socket_mode` modules collide); nothing in it is needed.
async fn on_hello<Hello: Send>(
    _event: Hello,
    _client: Arc<slack_morphism::SlackClient<SlackClientHyperHttpsConnector>>,
    state: SlackClientEventsUserState,
) {
    let inbound = state.read().await.get_user_state::<Arc<Inbound>>().cloned();
    let Some(inbound) = inbound else { return };
    debug!(channel = CHANNEL_NAME, account_id = %inbound.account_id, "Socket Mode connection open (hello)");
    let conversations = inbound.positions.recent(catch_up::now_ms());
    tokio::spawn(catch_up::run(inbound, conversations));
}

async fn on_push_event(
    event: SlackPushEventCallback,
    _client: Arc<slack_morphism::SlackClient<SlackClientHyperHttpsConnector>>,
    state: SlackClientEventsUserState,
) -> UserCallbackResult<()> {
    let inbound = state.read().await.get_user_state::<Arc<Inbound>>().cloned();
    let Some(inbound) = inbound else { return Err(Box::new(NotAccepted)) };
    if inbound.receive(&event).await.confirm() { Ok(()) } else { Err(Box::new(NotAccepted)) }
}

/// Decides whether the envelope is acknowledged after a failed callback: never for
/// [`NotAccepted`]; yes for anything else (a payload that cannot be parsed will not parse
/// better when redelivered).
fn on_error(
    error: Box<dyn std::error::Error + Send + Sync>,
    _client: Arc<slack_morphism::SlackClient<SlackClientHyperHttpsConnector>>,
    _state: SlackClientEventsUserState,
) -> HttpStatusCode {
    if error.downcast_ref::<NotAccepted>().is_some() {
        return StatusCode::SERVICE_UNAVAILABLE;
    }
    warn!(channel = CHANNEL_NAME, %error, "Slack Socket Mode error; the envelope (if any) is acknowledged and skipped");
    StatusCode::OK
}
