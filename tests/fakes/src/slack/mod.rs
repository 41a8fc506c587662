//! A fake Slack for offline tests of the Slack adapter: the Web API, Socket Mode, and a signing
//! Events API client.
//!
//! - **Web API** at `{url}/api/{method}` (point slack-morphism's `with_slack_api_url` or
//!   `channels.slack.api_url` at [`FakeSlack::api_url`]): `auth.test` (GET or POST),
//!   `apps.connections.open`, `chat.postMessage` (with message `metadata`), `chat.update`,
//!   `chat.delete`, `conversations.info`, `conversations.history` and `conversations.replies`
//!   (metadata only with `include_all_metadata`), with Slack's `{"ok": false, "error": …}`
//!   refusals and 429 + `Retry-After`, scripted per method or enforced per channel. For "send
//!   exactly once" tests a call can take effect and lose its answer
//!   ([`FakeSlack::apply_then_drop_next`]) or be lost before it takes effect
//!   ([`FakeSlack::drop_next_before_apply`]).
//! - **Socket Mode**: `apps.connections.open` hands out a `ws://` URL; a connection gets
//!   `hello`, then `events_api` envelopes that must be acknowledged; unacknowledged envelopes
//!   are redelivered on the next connection; [`FakeSlack::disconnect`] sends `disconnect`;
//!   [`FakeSlack::close_sockets`] keeps the app off the socket until
//!   [`FakeSlack::open_sockets`], and [`FakeSlack::history_only_message`] writes a message
//!   that only `conversations.history` shows (one written while the app was not connected).
//!   A history read can be refused or rate-limited like any call
//!   ([`FakeSlack::rate_limit_next`]`("conversations.history", …)`).
//! - **Events API**: [`SlackEventsClient`] POSTs the same event payloads to an app's request URL,
//!   signed (or badly signed, or stale).
//! - **Files**: users' files shared in `file_share` messages and served only with the bot
//!   token (an HTML sign-in page otherwise), and the bot's uploads through
//!   `files.getUploadURLExternal` → upload URL → `files.completeUploadExternal`
//!   (`files.upload` answers `method_deprecated`); see `files.rs`.
//!
//! ```no_run
//! # async fn demo() -> std::io::Result<()> {
//! use ferry_fakes::FakeSlack;
//! let slack = FakeSlack::start().await?;
//! // channels.slack: bot_token = FakeSlack::BOT_TOKEN, app_token = FakeSlack::APP_TOKEN,
//! //                 api_url = slack.api_url()
//! let event = slack.dm("U1", "hello"); // delivered over Socket Mode
//! let replies = slack.wait_for_messages(&event.channel, 1).await;
//! assert!(slack.is_acked(&event.event_id));
//! # let _ = replies; Ok(()) }
//! ```
//!
//! Layout: `state.rs` holds calls, messages and envelopes; `web_api.rs` serves the HTTP API;
//! `files.rs` files both ways; `socket.rs` the WebSocket; `events_client.rs` signs Events API
//! requests.

mod events_client;
mod files;
mod socket;
mod state;
mod web_api;

use std::io;
use std::sync::{Arc, Mutex, MutexGuard, OnceLock, PoisonError};

use axum::Router;
use axum::routing::{any, get, post};
use serde_json::{Value, json};
use tokio::sync::{broadcast, watch};
use tokio::time::Instant;

pub use events_client::{EventsResponse, SlackEventsClient};
pub use files::{LOGIN_PAGE, UploadedFile};
use state::{Envelope, Fault, State};

use crate::FakeServer;

/// The bot user's id (`auth.test().user_id`): what `<@…>` mentions of the bot name.
pub const BOT_USER_ID: &str = "U0FERRYBOT";
/// The bot's id (`auth.test().bot_id`), on messages the bot posts.
pub const BOT_ID: &str = "B0FERRYBOT";
/// The workspace id.
pub const TEAM_ID: &str = "T0FERRY";
/// The app id, in `hello` and event payloads.
pub const APP_ID: &str = "A0FERRY";
/// `chat.postMessage` refuses longer texts with `msg_too_long`.
pub const TEXT_LIMIT: usize = 40_000;

/// One Web API call as received, recorded before any check so refused calls show up too.
#[derive(Clone, Debug)]
pub struct Call {
    /// The method as in the path (`chat.postMessage`).
    pub method: String,
    /// Query, form and JSON parameters merged into one object.
    pub params: Value,
    /// When it arrived, on tokio's clock.
    pub at: Instant,
    /// The HTTP status answered; `None` while in flight, or if the connection was dropped.
    pub status: Option<u16>,
    /// The connection was closed instead of answering (a scripted fault), and whether the
    /// method ran first.
    pub dropped: Option<Dropped>,
}

pub use crate::server::Dropped;

/// A message the bot posted that still exists, as it looks now (after edits).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PostedMessage {
    pub channel: String,
    pub ts: String,
    /// The thread it was posted in; `None` for a top-level message.
    pub thread_ts: Option<String>,
    pub text: String,
    /// How many successful `chat.update` calls changed it.
    pub edits: u32,
    /// The message metadata it was posted with (`{"event_type", "event_payload"}`), as
    /// `conversations.history` shows it with `include_all_metadata`.
    pub metadata: Option<Value>,
    /// The ids of the files it shares (a `files.completeUploadExternal` share message).
    pub files: Vec<String>,
}

/// An event as the fake built it: the `event_callback` payload Slack would push.
#[derive(Clone, Debug)]
pub struct SlackEvent {
    pub event_id: String,
    /// The message's `ts` (its id in the channel).
    pub ts: String,
    pub channel: String,
    /// The whole `event_callback` payload, for [`SlackEventsClient`] or [`FakeSlack::deliver`].
    pub payload: Value,
}

#[derive(Clone, Debug)]
pub(crate) enum SocketControl {
    Disconnect(String),
    Drop,
}

pub(crate) struct Shared {
    pub(crate) bot_token: String,
    pub(crate) app_token: String,
    pub(crate) state: Mutex<State>,
    /// Bumped on every change a test or a socket may wait for.
    pub(crate) changed: watch::Sender<u64>,
    pub(crate) control: broadcast::Sender<SocketControl>,
    ws_url: OnceLock<String>,
    /// `http://127.0.0.1:PORT`, for the file URLs the fake hands out.
    base_url: OnceLock<String>,
}

pub(crate) fn lock<T>(mutex: &Mutex<T>) -> MutexGuard<'_, T> {
    mutex.lock().unwrap_or_else(PoisonError::into_inner)
}

impl Shared {
    pub(crate) fn bump(&self) {
        self.changed.send_modify(|n| *n += 1);
    }

    pub(crate) fn record(&self, call: Call) -> usize {
        let index = {
            let mut state = lock(&self.state);
            state.calls.push(call);
            state.calls.len() - 1
        };
        self.bump();
        index
    }

    pub(crate) fn finish(&self, index: usize, status: u16) {
        if let Some(call) = lock(&self.state).calls.get_mut(index) {
            call.status = Some(status);
        }
        self.bump();
    }

    pub(crate) fn finish_dropped(&self, index: usize, dropped: Dropped) {
        if let Some(call) = lock(&self.state).calls.get_mut(index) {
            call.dropped = Some(dropped);
        }
        self.bump();
    }

    pub(crate) fn ws_url(&self) -> String {
        self.ws_url.get().cloned().unwrap_or_default()
    }

    pub(crate) fn base_url(&self) -> String {
        self.base_url.get().cloned().unwrap_or_default()
    }
}

/// A running fake Slack; stops when dropped.
pub struct FakeSlack {
    shared: Arc<Shared>,
    server: FakeServer,
}

impl FakeSlack {
    /// The bot token the fake accepts (`xoxb-…`).
    pub const BOT_TOKEN: &'static str = "xoxb-ferry-test";
    /// The app-level token the fake accepts for `apps.connections.open` (`xapp-…`).
    pub const APP_TOKEN: &'static str = "xapp-ferry-test";
    /// A signing secret for Events API tests.
    pub const SIGNING_SECRET: &'static str = "ferry-signing-secret";

    /// Serves the fake on an ephemeral loopback port, accepting [`Self::BOT_TOKEN`] and
    /// [`Self::APP_TOKEN`].
    pub async fn start() -> io::Result<Self> {
        Self::start_with_tokens(Self::BOT_TOKEN, Self::APP_TOKEN).await
    }

    /// [`Self::start`] for another app, accepting these tokens instead: a second Slack app
    /// of one gateway has credentials of its own.
    pub async fn start_with_tokens(bot_token: &str, app_token: &str) -> io::Result<Self> {
        let shared = Arc::new(Shared {
            bot_token: bot_token.to_owned(),
            app_token: app_token.to_owned(),
            state: Mutex::new(State::default()),
            changed: watch::channel(0).0,
            control: broadcast::channel(16).0,
            ws_url: OnceLock::new(),
            base_url: OnceLock::new(),
        });
        let router = Router::new()
            .route("/api/{method}", any(web_api::call))
            .route("/link/", get(socket::upgrade))
            .route("/files-pri/{key}/{*rest}", get(files::download))
            .route("/upload/v1/{upload_id}", post(files::upload))
            .with_state(shared.clone());
        let server = FakeServer::start(router).await?;
        let _ = shared.ws_url.set(format!("ws://{}", server.addr()));
        let _ = shared.base_url.set(server.url());
        Ok(Self { shared, server })
    }

    /// The bot token (`xoxb-…`) this fake accepts.
    pub fn bot_token(&self) -> &str {
        &self.shared.bot_token
    }

    /// The app-level token (`xapp-…`) this fake accepts for Socket Mode.
    pub fn app_token(&self) -> &str {
        &self.shared.app_token
    }

    /// `http://127.0.0.1:PORT`.
    pub fn url(&self) -> String {
        self.server.url()
    }

    /// The Web API base, `http://127.0.0.1:PORT/api`, for `channels.slack.api_url`.
    pub fn api_url(&self) -> String {
        format!("{}/api", self.server.url())
    }

    fn state(&self) -> MutexGuard<'_, State> {
        lock(&self.shared.state)
    }

    // ---- Scripting -------------------------------------------------------------------------

    /// Enforces ~1 `chat.postMessage` a second per channel (after a burst of 3) with 429s.
    pub fn enforce_rate_limits(&self) {
        self.state().enforce_rate_limits = true;
    }

    /// The next call of `method` is refused with `{"ok": false, "error": code}`.
    pub fn fail_next(&self, method: &str, code: &str) {
        self.push_fault(method, Fault::Error(code.to_owned()));
    }

    /// The next `count` calls of `method` are answered 429 with `Retry-After: secs`.
    pub fn rate_limit_next(&self, method: &str, count: usize, secs: u64) {
        for _ in 0..count {
            self.push_fault(method, Fault::RateLimited(secs));
        }
    }

    /// The next call of `method` is answered with a bare HTTP `status` (e.g. 500).
    pub fn fail_next_with_status(&self, method: &str, status: u16) {
        self.push_fault(method, Fault::Status(status));
    }

    /// The next call of `method` (meant for `chat.postMessage`, `chat.update`,
    /// `chat.delete`; works for any) runs exactly as a normal call would (the message is
    /// posted, updated or deleted; a call the method refuses changes nothing), then the
    /// connection is closed without the answer: the client sees a connection error for a call
    /// that took effect. Recorded with [`Dropped::AfterApply`] and the status it would have
    /// answered. Queued with the method's other one-shot faults, in order.
    pub fn apply_then_drop_next(&self, method: &str) {
        self.push_fault(method, Fault::ApplyThenDrop);
    }

    /// The next call of `method` is not answered: the connection closes before the method
    /// runs, so nothing is applied. Recorded with [`Dropped::BeforeApply`]. The client sees
    /// the same error as with [`FakeSlack::apply_then_drop_next`].
    pub fn drop_next_before_apply(&self, method: &str) {
        self.push_fault(method, Fault::DropBeforeApply);
    }

    fn push_fault(&self, method: &str, fault: Fault) {
        self.state().faults.entry(method.to_owned()).or_default().push_back(fault);
    }

    /// Marks a `G…` conversation as a group DM for `conversations.info` (otherwise a `G…` id
    /// is a private channel).
    pub fn mark_mpim(&self, channel: &str) {
        self.state().mpims.insert(channel.to_owned());
    }

    /// Sends `disconnect` (e.g. `"refresh_requested"`) on every open socket, then closes them.
    pub fn disconnect(&self, reason: &str) {
        let _ = self.shared.control.send(SocketControl::Disconnect(reason.to_owned()));
    }

    /// Drops every open socket without a close frame, as a network failure would.
    pub fn drop_sockets(&self) {
        let _ = self.shared.control.send(SocketControl::Drop);
    }

    /// Takes Socket Mode down: open sockets are dropped (no close frame) and new ones are
    /// refused with HTTP 503 on the WebSocket upgrade until [`Self::open_sockets`]. Events
    /// queued meanwhile wait; messages meant to be missed are written with
    /// [`Self::history_only_message`].
    pub fn close_sockets(&self) {
        self.state().sockets_closed = true;
        let _ = self.shared.control.send(SocketControl::Drop);
        self.shared.bump();
    }

    /// Lets clients open sockets again after [`Self::close_sockets`].
    pub fn open_sockets(&self) {
        self.state().sockets_closed = false;
        self.shared.bump();
    }

    /// The next `count` envelope acks are lost on the wire (the envelopes stay unacked).
    pub fn lose_next_acks(&self, count: usize) {
        self.state().acks_to_lose += count;
    }

    // ---- Events ----------------------------------------------------------------------------

    /// Wraps an event body (`{"type": "message", …}`) in an `event_callback` payload with a
    /// fresh `event_id`, without delivering it.
    pub fn event(&self, mut event: Value) -> SlackEvent {
        let (event_id, ts) = {
            let mut state = self.state();
            let event_id = state.next_event_id();
            let ts = match event["ts"].as_str() {
                Some(ts) => ts.to_owned(),
                None => state.next_ts(),
            };
            (event_id, ts)
        };
        event["ts"] = ts.clone().into();
        if event.get("event_ts").is_none() {
            event["event_ts"] = ts.clone().into();
        }
        let channel = event["channel"].as_str().unwrap_or_default().to_owned();
        self.keep_user_message(&channel, &ts, &event);
        let payload = json!({
            "token": "legacy-verification-token", "team_id": TEAM_ID, "api_app_id": APP_ID,
            "type": "event_callback", "event_id": event_id, "event_time": ts.split('.').next().and_then(|s| s.parse::<u64>().ok()).unwrap_or(0),
            "authorizations": [{"team_id": TEAM_ID, "user_id": BOT_USER_ID, "is_bot": true}],
            "event": event,
        });
        SlackEvent { event_id, ts, channel, payload }
    }

    /// Queues the event for Socket Mode delivery, in a new envelope. Delivering the same event
    /// twice is Slack delivering it twice (same `event_id`).
    pub fn deliver(&self, event: &SlackEvent) {
        self.deliver_on(event, None);
    }

    /// [`Self::deliver`] to the open Socket Mode connection of rank `rank` (oldest first), as
    /// Slack spreads an app's events over its connections; to any if there are not that many.
    pub fn deliver_via(&self, event: &SlackEvent, rank: usize) {
        self.deliver_on(event, Some(rank));
    }

    fn deliver_on(&self, event: &SlackEvent, only_on: Option<usize>) {
        {
            let mut state = self.state();
            let envelope_id = format!("env-{}-{}", event.event_id, state.envelopes.len());
            state.envelopes.push(Envelope {
                envelope_id,
                event_id: event.event_id.clone(),
                payload: event.payload.clone(),
                deliveries: 0,
                on_connection: None,
                acked: false,
                only_on,
            });
        }
        self.shared.bump();
    }

    /// A `message` event body from `user` in `channel` of `channel_type` (`im`, `mpim`,
    /// `channel`, `group`), in a thread when `thread_ts` is given.
    pub fn message_body(channel: &str, channel_type: &str, user: &str, text: &str, thread_ts: Option<&str>) -> Value {
        let mut body = json!({
            "type": "message", "channel": channel, "channel_type": channel_type, "user": user, "text": text,
            "client_msg_id": format!("msg-{text}").chars().take(36).collect::<String>(),
        });
        if let Some(thread_ts) = thread_ts {
            body["thread_ts"] = thread_ts.into();
        }
        body
    }

    /// A DM from `user` (conversation `D<user>`), delivered over Socket Mode.
    pub fn dm(&self, user: &str, text: &str) -> SlackEvent {
        self.push(Self::message_body(&format!("D{user}"), "im", user, text, None))
    }

    /// A top-level message in a channel, delivered over Socket Mode.
    pub fn channel_message(&self, channel: &str, user: &str, text: &str) -> SlackEvent {
        self.push(Self::message_body(channel, "channel", user, text, None))
    }

    /// A reply in the thread under `thread_ts`, delivered over Socket Mode.
    pub fn thread_reply(&self, channel: &str, thread_ts: &str, user: &str, text: &str) -> SlackEvent {
        self.push(Self::message_body(channel, "channel", user, text, Some(thread_ts)))
    }

    /// A message mentioning the bot in a channel, delivered as Slack does when the app
    /// subscribes to both: a `message` event and an `app_mention` event for the same `ts`.
    pub fn mention(&self, channel: &str, user: &str, text: &str) -> (SlackEvent, SlackEvent) {
        let text = format!("<@{BOT_USER_ID}> {text}");
        let message = self.push(Self::message_body(channel, "channel", user, &text, None));
        let mention = self.push(json!({
            "type": "app_mention", "channel": channel, "user": user, "text": text, "ts": message.ts,
        }));
        (message, mention)
    }

    /// Keeps a user's plain `message` event as part of its conversation (once per `ts`), for
    /// `conversations.history` and `conversations.replies`.
    fn keep_user_message(&self, channel: &str, ts: &str, event: &Value) {
        let (Some("message"), None, Some(user)) =
            (event["type"].as_str(), event.get("subtype"), event["user"].as_str())
        else {
            return;
        };
        let mut state = self.state();
        if state.user_messages.iter().any(|m| m.channel == channel && m.ts == ts) {
            return;
        }
        state.user_messages.push(state::UserMessage {
            channel: channel.to_owned(),
            ts: ts.to_owned(),
            thread_ts: event["thread_ts"].as_str().map(str::to_owned),
            user: user.to_owned(),
            text: event["text"].as_str().unwrap_or_default().to_owned(),
            from_bot: false,
        });
    }

    /// A top-level message from `user` in `channel` that only `conversations.history` shows:
    /// no event is pushed for it, as for a message written while no Socket Mode connection
    /// was open (Slack does not push those later). Returns its `ts`.
    pub fn history_only_message(&self, channel: &str, user: &str, text: &str) -> String {
        self.history_only(channel, user, text, false)
    }

    /// [`Self::history_only_message`] from another app: a `bot_message` with `bot_id`.
    pub fn history_only_bot_message(&self, channel: &str, bot_id: &str, text: &str) -> String {
        self.history_only(channel, bot_id, text, true)
    }

    fn history_only(&self, channel: &str, user: &str, text: &str, from_bot: bool) -> String {
        let ts = {
            let mut state = self.state();
            let ts = state.next_ts();
            state.user_messages.push(state::UserMessage {
                channel: channel.to_owned(),
                ts: ts.clone(),
                thread_ts: None,
                user: user.to_owned(),
                text: text.to_owned(),
                from_bot,
            });
            ts
        };
        self.shared.bump();
        ts
    }

    fn push(&self, body: Value) -> SlackEvent {
        let event = self.event(body);
        self.deliver(&event);
        event
    }

    // ---- Inspection ------------------------------------------------------------------------

    pub fn calls(&self) -> Vec<Call> {
        self.state().calls.clone()
    }

    pub fn calls_to(&self, method: &str) -> Vec<Call> {
        self.state().calls.iter().filter(|call| call.method == method).cloned().collect()
    }

    /// The bot's messages that still exist, in posting order.
    pub fn messages(&self) -> Vec<PostedMessage> {
        self.state().messages.clone()
    }

    pub fn messages_in(&self, channel: &str) -> Vec<PostedMessage> {
        self.state().messages.iter().filter(|m| m.channel == channel).cloned().collect()
    }

    /// How many calls were answered 429.
    pub fn rate_limited_count(&self) -> usize {
        self.state().rate_limited
    }

    /// Whether some envelope of this event was acknowledged.
    pub fn is_acked(&self, event_id: &str) -> bool {
        self.state().envelopes.iter().any(|e| e.event_id == event_id && e.acked)
    }

    /// Envelopes not acknowledged yet.
    pub fn unacked(&self) -> usize {
        self.state().envelopes.iter().filter(|e| !e.acked).count()
    }

    /// Waits until every envelope queued so far is acknowledged (taken by the app).
    pub async fn wait_for_all_acked(&self) {
        self.wait_until(|slack| slack.unacked() == 0).await;
    }

    /// How often envelopes of this event were written to a socket.
    pub fn deliveries(&self, event_id: &str) -> u32 {
        self.state().envelopes.iter().filter(|e| e.event_id == event_id).map(|e| e.deliveries).sum()
    }

    /// Sockets that got `hello`, ever / now.
    pub fn connections(&self) -> (u64, usize) {
        let state = self.state();
        (state.connections_opened, state.active_connections.len())
    }

    /// Acks thrown away by [`FakeSlack::lose_next_acks`] so far.
    pub fn lost_acks(&self) -> usize {
        self.state().lost_acks
    }

    /// Waits until `check` holds; re-checked on every change the fake sees.
    pub async fn wait_until(&self, mut check: impl FnMut(&FakeSlack) -> bool) {
        let mut changed = self.shared.changed.subscribe();
        loop {
            if check(self) {
                return;
            }
            // The sender lives in `self.shared`, so the channel cannot close while we wait.
            let _ = changed.changed().await;
        }
    }

    /// Waits for `count` bot messages in `channel` and returns them.
    pub async fn wait_for_messages(&self, channel: &str, count: usize) -> Vec<PostedMessage> {
        self.wait_until(|slack| slack.messages_in(channel).len() >= count).await;
        self.messages_in(channel)
    }

    /// Waits until `count` calls of `method` were answered (or their connection dropped) and
    /// returns all calls of it.
    pub async fn wait_for_calls(&self, method: &str, count: usize) -> Vec<Call> {
        self.wait_until(|slack| {
            slack.calls_to(method).iter().filter(|c| c.status.is_some() || c.dropped.is_some()).count() >= count
        })
        .await;
        self.calls_to(method)
    }

    /// Waits until an envelope of the event is acknowledged.
    pub async fn wait_for_ack(&self, event_id: &str) {
        self.wait_until(|slack| slack.is_acked(event_id)).await;
    }

    /// Waits until `count` sockets have ever got `hello` and one is open.
    pub async fn wait_for_connections(&self, count: u64) {
        self.wait_until(|slack| {
            let (opened, open) = slack.connections();
            opened >= count && open >= 1
        })
        .await;
    }
}
