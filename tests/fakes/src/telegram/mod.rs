//! A fake Telegram Bot API server for offline tests of the Telegram adapter.
//!
//! It speaks the real wire format at `{url}/bot{TOKEN}/{method}` (method names match
//! case-insensitively, since teloxide sends `SendMessage`), keeps the state a bot can observe
//! (chats, message ids per chat, the update queue and its `offset`), and enforces Telegram's
//! rules with Telegram's own error texts: the 4096-character text limit, HTML parse-mode
//! errors, "message is not modified", flood limits answered with 429 and `retry_after`, a
//! 409 when a second `getUpdates` poller appears, and the file limits (`getFile` up to 20 MB,
//! photos up to 10 MB, other uploads up to 50 MB, captions up to 1024 characters).
//!
//! ```no_run
//! # async fn demo() -> std::io::Result<()> {
//! use ferry_fakes::FakeTelegram;
//! let telegram = FakeTelegram::start("123:TEST").await?.without_rate_limits();
//! // teloxide: Bot::new("123:TEST").set_api_url(telegram.url().parse().unwrap())
//! let update_id = telegram.private_message(42, "Ada", "hello");
//! let sends = telegram.wait_for_calls("sendMessage", 1).await;
//! assert_eq!(sends[0].params["chat_id"], 42);
//! assert!(telegram.current_offset() > update_id); // the adapter confirmed the update
//! # Ok(()) }
//! ```
//!
//! Layout: `state.rs` holds chats, messages and the update queue; `methods.rs` serves the HTTP
//! API; `faults.rs` the scripted faults and storms; `html.rs` is the parse-mode checker;
//! `rate_limit.rs` the flood limits; `params.rs` reads query, form and JSON parameters;
//! `files.rs` keeps files and serves `getFile` and downloads; `uploads.rs` reads multipart
//! uploads and serves `sendPhoto`, `sendDocument`, `sendVoice`, `sendAudio` and `sendVideo`;
//! `media.rs` injects users' photos, documents, voice notes and stickers.
//!
//! The handle is `Send + Sync` and every method takes `&self`: a test can share it (in an
//! `Arc`) with a task that scripts faults or reads state while a client is using the API.
//!
//! Not served: media groups, animations and stickers sent by the bot, inline mode, webhook delivery (`setWebhook` is only
//! recorded, so it blocks `getUpdates` like on Telegram), Markdown validation.

mod faults;
mod files;
mod html;
mod media;
mod methods;
pub(crate) mod params;
mod rate_limit;
mod state;
mod uploads;

use std::io;
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::time::Duration;

use serde_json::{Value, json};
use tokio::sync::watch;
use tokio::time::Instant;

use faults::Fault;
pub use files::{DOWNLOAD_LIMIT, PHOTO_UPLOAD_LIMIT, TgFile, UPLOAD_LIMIT};
pub use media::{InjectedMedia, StickerFormat, TgMedia, sample_jpeg};
pub use rate_limit::RateLimits;
use state::{GENERAL_TOPIC_ID, State, detect_entities, unix_now};
pub use uploads::SentMedia;

use crate::FakeServer;

/// The bot's `username` unless [`FakeTelegram::with_bot_username`] changes it.
pub const DEFAULT_BOT_USERNAME: &str = "ferry_test_bot";

/// The bot's user id (`getMe().id`).
pub const BOT_USER_ID: i64 = 777_000_001;

/// A Telegram user as the fake puts it in `from` fields.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TgUser {
    pub id: i64,
    pub first_name: String,
    pub username: Option<String>,
    pub is_bot: bool,
}

impl TgUser {
    /// A human user without a username.
    pub fn new(id: i64, first_name: impl Into<String>) -> Self {
        Self { id, first_name: first_name.into(), username: None, is_bot: false }
    }

    pub fn with_username(mut self, username: impl Into<String>) -> Self {
        self.username = Some(username.into());
        self
    }

    /// The `User` object.
    pub fn to_json(&self) -> Value {
        let mut user = json!({ "id": self.id, "is_bot": self.is_bot, "first_name": self.first_name });
        if let Some(username) = &self.username {
            user["username"] = username.clone().into();
        }
        user
    }
}

impl From<(i64, &str)> for TgUser {
    fn from((id, first_name): (i64, &str)) -> Self {
        Self::new(id, first_name)
    }
}

/// One Bot API call as received, recorded before any check so refused calls show up too.
#[derive(Clone, Debug)]
pub struct Call {
    /// The method in the documentation's spelling (`sendMessage`) when the fake knows it, as
    /// sent otherwise.
    pub method: String,
    /// Query, form and JSON parameters merged into one object (`Null` if unreadable).
    pub params: Value,
    /// When the call arrived, on tokio's clock (so paused-clock tests can measure spacing).
    pub at: Instant,
    /// How the call ended, or that it has not yet.
    pub outcome: CallOutcome,
}

/// How a recorded call ended.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum CallOutcome {
    /// Still being answered (a long poll, a delayed call).
    InFlight,
    /// Answered with this HTTP status.
    Answered(u16),
    /// The connection was closed without an answer, and the method did not run
    /// ([`FakeTelegram::drop_next_connection`]).
    Dropped,
    /// The method ran (its effects are visible) and would have answered with this status, but
    /// the connection was closed instead ([`FakeTelegram::apply_then_drop_next`]).
    AppliedThenDropped(u16),
    /// Answered 200 with a body cut off mid-JSON, and the method did not run
    /// ([`FakeTelegram::malformed_next`]).
    Malformed,
}

impl Call {
    /// The HTTP status answered, if the client got an answer.
    pub fn status(&self) -> Option<u16> {
        match self.outcome {
            CallOutcome::Answered(status) => Some(status),
            CallOutcome::Malformed => Some(200),
            CallOutcome::InFlight | CallOutcome::Dropped | CallOutcome::AppliedThenDropped(_) => None,
        }
    }
}

/// A message the bot sent that still exists, as it looks now (after edits).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SentMessage {
    pub chat_id: i64,
    pub message_id: i64,
    /// The forum topic it went to; `None` outside forums and for the General topic.
    pub thread_id: Option<i64>,
    /// The message it replies to, if that message existed.
    pub reply_to: Option<i64>,
    /// The text as the bot sent it, markup included.
    pub text: String,
    /// What the user sees: markup applied, entities decoded.
    pub visible_text: String,
    /// `parse_mode` as sent (`HTML`), if any.
    pub parse_mode: Option<String>,
    /// How many successful `editMessageText` calls changed it.
    pub edits: u32,
    /// The file it carries, for messages sent with `sendPhoto`, `sendDocument`, … (`text`
    /// and `visible_text` are then its caption, empty without one).
    pub media: Option<SentMedia>,
}

/// One accepted `sendChatAction`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ChatAction {
    pub chat_id: i64,
    pub action: String,
    pub thread_id: Option<i64>,
}

/// One entry of the last accepted `setMyCommands`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct BotCommand {
    pub command: String,
    pub description: String,
}

/// State shared between the handle a test holds and the server's handlers.
pub(crate) struct Shared {
    token: String,
    state: Mutex<State>,
    /// Number of recorded calls, so tests can wait for one without polling.
    calls_seen: watch::Sender<usize>,
    /// Bumped when an update is queued or a newer poll supersedes a waiting one.
    updates_changed: watch::Sender<u64>,
    /// The current offset, so tests can wait for the adapter to confirm updates.
    offset: watch::Sender<i64>,
    /// `true` once the handle is dropped: ends waiting long polls so the server can stop.
    closing: watch::Sender<bool>,
}

/// Locks ignoring poisoning: a test that panicked while holding the lock must not turn every
/// later request into a second, confusing panic.
fn lock<T>(mutex: &Mutex<T>) -> MutexGuard<'_, T> {
    mutex.lock().unwrap_or_else(PoisonError::into_inner)
}

impl Shared {
    fn record(&self, call: Call) -> usize {
        let index = {
            let mut state = lock(&self.state);
            state.calls.push(call);
            state.calls.len() - 1
        };
        self.calls_seen.send_replace(index + 1);
        index
    }

    fn finish(&self, index: usize, outcome: CallOutcome) {
        if let Some(call) = lock(&self.state).calls.get_mut(index) {
            call.outcome = outcome;
        }
        // Wake waiters again: they wait for finished calls.
        self.calls_seen.send_modify(|_| {});
    }

    fn count_if_rate_limited(&self, error: &methods::ApiError) {
        if error.is_too_many_requests() {
            lock(&self.state).rate_limited += 1;
        }
    }

    fn offset_changed(&self) {
        let offset = lock(&self.state).current_offset();
        self.offset.send_if_modified(|current| std::mem::replace(current, offset) != offset);
    }

    fn notify_updates(&self) {
        self.updates_changed.send_modify(|version| *version += 1);
    }
}

/// A running fake Telegram Bot API; dropping it stops the server.
pub struct FakeTelegram {
    server: FakeServer,
    shared: Arc<Shared>,
}

impl FakeTelegram {
    /// Starts the server for a bot with this token. Flood limits are on
    /// ([`RateLimits::telegram`]); see [`FakeTelegram::without_rate_limits`].
    pub async fn start(token: &str) -> io::Result<Self> {
        Self::start_on(token, std::net::SocketAddr::from(([127, 0, 0, 1], 0))).await
    }

    /// Like [`FakeTelegram::start`], serving on `addr`: a Bot API that comes up after the
    /// gateway was started with its URL.
    pub async fn start_on(token: &str, addr: std::net::SocketAddr) -> io::Result<Self> {
        let bot = TgUser { is_bot: true, ..TgUser::new(BOT_USER_ID, "Ferry Test") }.with_username(DEFAULT_BOT_USERNAME);
        let state = State::new(bot);
        let offset = state.current_offset();
        let shared = Arc::new(Shared {
            token: token.to_owned(),
            state: Mutex::new(state),
            calls_seen: watch::Sender::new(0),
            updates_changed: watch::Sender::new(0),
            offset: watch::Sender::new(offset),
            closing: watch::Sender::new(false),
        });
        let server = FakeServer::start_on(methods::router(Arc::clone(&shared)), addr).await?;
        Ok(Self { server, shared })
    }

    /// The `api_url` to give the client: `http://127.0.0.1:PORT`, no trailing slash.
    pub fn url(&self) -> String {
        self.server.url()
    }

    /// The token the fake accepts; other tokens get 401 Unauthorized.
    pub fn token(&self) -> &str {
        &self.shared.token
    }

    /// Renames the bot (`getMe().username`, the `@mention` in [`FakeTelegram::group_message`]).
    pub fn with_bot_username(self, username: &str) -> Self {
        lock(&self.shared.state).bot.username = Some(username.to_owned());
        self
    }

    /// The bot's username, without `@`.
    pub fn bot_username(&self) -> String {
        lock(&self.shared.state).bot.username.clone().unwrap_or_default()
    }

    /// The bot as a user (`from` of its messages).
    pub fn bot_user(&self) -> TgUser {
        lock(&self.shared.state).bot.clone()
    }

    /// Replaces the flood limits; `None` turns them off.
    pub fn set_rate_limits(&self, limits: Option<RateLimits>) {
        let mut state = lock(&self.shared.state);
        state.rate_limits = limits;
        state.limiter = Default::default();
    }

    /// Builder form of [`FakeTelegram::set_rate_limits`].
    pub fn with_rate_limits(self, limits: RateLimits) -> Self {
        self.set_rate_limits(Some(limits));
        self
    }

    /// No flood limits: for tests that send fast and do not study 429 handling.
    pub fn without_rate_limits(self) -> Self {
        self.set_rate_limits(None);
        self
    }

    // --- Injecting updates ------------------------------------------------------------------

    fn inject_message(&self, kind: &str, message: Value) -> i64 {
        let id = lock(&self.shared.state).push_update(json!({ kind: message }));
        self.shared.notify_updates();
        self.shared.offset_changed();
        id
    }

    /// Queues an update as given; an `update_id` is assigned unless it has one. Returns the id.
    pub fn inject_update(&self, update: Value) -> i64 {
        let id = lock(&self.shared.state).push_update(update);
        self.shared.notify_updates();
        self.shared.offset_changed();
        id
    }

    /// A text message from user `from_user_id` in their private chat with the bot (chat id =
    /// user id). Commands (`/start`) and `@mentions` get their entities. Returns the update id.
    pub fn private_message(&self, from_user_id: i64, first_name: &str, text: &str) -> i64 {
        let from = TgUser::new(from_user_id, first_name);
        self.text_message(from_user_id, &from, text, |_| {})
    }

    /// A text message in a group (negative `chat_id`; `-100…` ids are supergroups). With
    /// `mention_bot`, `@botname ` is put in front unless the text already mentions the bot; the
    /// `mention` entity's offset and length are in UTF-16 units.
    pub fn group_message(&self, chat_id: i64, from: impl Into<TgUser>, text: &str, mention_bot: bool) -> i64 {
        let mention = format!("@{}", self.bot_username());
        let text = if mention_bot && !text.contains(&mention) { format!("{mention} {text}") } else { text.to_owned() };
        self.text_message(chat_id, &from.into(), &text, |_| {})
    }

    /// A reply to the bot's message `bot_message_id` in `chat_id`, embedding that message as
    /// `reply_to_message`. Panics if the message does not exist (a mistake in the test).
    pub fn reply_to_bot(&self, chat_id: i64, from: impl Into<TgUser>, bot_message_id: i64, text: &str) -> i64 {
        let reply = lock(&self.shared.state).reply_copy(chat_id, bot_message_id);
        let reply = reply.unwrap_or_else(|| panic!("no message {bot_message_id} in chat {chat_id} to reply to"));
        self.text_message(chat_id, &from.into(), text, |message| {
            message.insert("reply_to_message".into(), reply);
        })
    }

    /// A text message in forum topic `thread_id` of supergroup `chat_id` (made a forum with
    /// `is_forum: true`). Like Telegram, it carries `message_thread_id`, `is_topic_message` and
    /// a `reply_to_message` that is the topic's creation service message; in the General topic
    /// (`thread_id == 1`) it carries none of these.
    pub fn topic_message(&self, chat_id: i64, thread_id: i64, from: impl Into<TgUser>, text: &str) -> i64 {
        let from = from.into();
        lock(&self.shared.state).ensure_topic(chat_id, thread_id, &from);
        if thread_id == GENERAL_TOPIC_ID {
            return self.text_message(chat_id, &from, text, |_| {});
        }
        let chat = lock(&self.shared.state).chats[&chat_id].json.clone();
        let created = json!({
            "message_id": thread_id,
            "message_thread_id": thread_id,
            "from": from.to_json(),
            "chat": chat,
            "date": unix_now(),
            "forum_topic_created": { "name": format!("Topic {thread_id}"), "icon_color": 7_322_096 },
            "is_topic_message": true,
        });
        self.text_message(chat_id, &from, text, |message| {
            message.insert("message_thread_id".into(), thread_id.into());
            message.insert("is_topic_message".into(), true.into());
            message.insert("reply_to_message".into(), created);
        })
    }

    /// A photo with a caption (`caption` + `caption_entities`, no `text`).
    pub fn caption_message(&self, chat_id: i64, from: impl Into<TgUser>, caption: &str) -> i64 {
        let from = from.into();
        let caption = caption.to_owned();
        let message = lock(&self.shared.state).new_message(chat_id, &from, |chat, message| {
            let id = format!("fake-photo-{}-{}", chat.json["id"], chat.messages.len() + 1);
            let photo = json!([
                { "file_id": format!("{id}-s"), "file_unique_id": format!("{id}-s"), "width": 90, "height": 90, "file_size": 1200 },
                { "file_id": id, "file_unique_id": id, "width": 800, "height": 800, "file_size": 64000 },
            ]);
            message.insert("photo".into(), photo);
            let entities = detect_entities(&caption);
            message.insert("caption".into(), caption.into());
            if !entities.is_empty() {
                message.insert("caption_entities".into(), entities.into());
            }
        });
        self.inject_message("message", message)
    }

    /// An `edited_message` update: the user's message `message_id` in `chat_id` now reads
    /// `text` (with `edit_date`). Panics if there is no such message.
    pub fn edited_message(&self, chat_id: i64, message_id: i64, text: &str) -> i64 {
        let edited = {
            let mut state = lock(&self.shared.state);
            let stored = state.chats.get_mut(&chat_id).and_then(|chat| chat.messages.get_mut(&message_id));
            let stored = stored.unwrap_or_else(|| panic!("no message {message_id} in chat {chat_id} to edit"));
            stored.json["text"] = text.into();
            let entities = detect_entities(text);
            if let Some(object) = stored.json.as_object_mut() {
                object.remove("entities");
                if !entities.is_empty() {
                    object.insert("entities".into(), entities.into());
                }
                object.insert("edit_date".into(), unix_now().into());
            }
            stored.json.clone()
        };
        self.inject_message("edited_message", edited)
    }

    /// A service message: `from` added `new_members` to group `chat_id` (`new_chat_members`).
    pub fn members_joined(&self, chat_id: i64, from: impl Into<TgUser>, new_members: &[TgUser]) -> i64 {
        let members: Vec<Value> = new_members.iter().map(TgUser::to_json).collect();
        let message = lock(&self.shared.state).new_message(chat_id, &from.into(), |_, message| {
            message.insert("new_chat_members".into(), members.into());
        });
        self.inject_message("message", message)
    }

    /// The id the next message in `chat_id` will get, e.g. to predict a bot message's id.
    pub fn next_message_id(&self, chat_id: i64) -> Option<i64> {
        lock(&self.shared.state).chats.get(&chat_id).map(|chat| chat.peek_message_id())
    }

    fn text_message(
        &self,
        chat_id: i64,
        from: &TgUser,
        text: &str,
        extra: impl FnOnce(&mut serde_json::Map<String, Value>),
    ) -> i64 {
        let entities = detect_entities(text);
        let message = lock(&self.shared.state).new_message(chat_id, from, |_, message| {
            extra(message);
            message.insert("text".into(), text.into());
            if !entities.is_empty() {
                message.insert("entities".into(), entities.into());
            }
        });
        self.inject_message("message", message)
    }

    // --- Faults -----------------------------------------------------------------------------

    /// Queues a one-shot fault. A `getUpdates` waiting for updates now answers at once (with
    /// what is pending, often nothing, as a long poll may), so the fault meets the next poll
    /// instead of one up to a poll timeout later.
    fn push_fault(&self, method: &str, fault: Fault) {
        lock(&self.shared.state).faults.push(method, fault);
        self.shared.notify_updates();
    }

    /// The next call of `method` fails with `{"ok":false,"error_code":status,"description":…}`.
    /// Faults queue per method and each is used once. A 5xx makes teloxide sleep 10 s before
    /// it reads the answer: tests that inject one should pause tokio's clock.
    pub fn fail_next(&self, method: &str, status: u16, description: &str) {
        self.push_fault(method, Fault::Error { status, description: description.to_owned(), retry_after: None });
    }

    /// The next call of `method` gets a 429 `Too Many Requests: retry after {secs}` with
    /// `parameters.retry_after`, as flood control answers (counted in
    /// [`FakeTelegram::rate_limited_count`]).
    pub fn fail_next_with_retry_after(&self, method: &str, secs: u64) {
        let error = methods::ApiError::too_many_requests(secs);
        self.push_fault(method, error.into_fault());
    }

    /// The next call of `method` is answered normally after `delay` (on tokio's clock).
    pub fn delay_next(&self, method: &str, delay: Duration) {
        self.push_fault(method, Fault::Delay(delay));
    }

    /// The next call of `method` is not answered: the connection closes mid-response and the
    /// method does not run (nothing is sent or edited). Recorded as [`CallOutcome::Dropped`].
    ///
    /// Compare [`FakeTelegram::apply_then_drop_next`]: the client sees the same connection
    /// error either way, and cannot tell which of the two happened.
    pub fn drop_next_connection(&self, method: &str) {
        self.push_fault(method, Fault::Drop);
    }

    /// The next call of `method` is answered `200 OK` with a body cut off mid-JSON
    /// (`{"ok":true,"result":[{"update_id":`), as a proxy or a connection that truncates an
    /// answer leaves it; the method does not run (a `getUpdates` confirms nothing). Recorded as
    /// [`CallOutcome::Malformed`]. Call it `n` times for the next `n` calls: with
    /// [`FakeTelegram::drop_next_connection`], a long poll that keeps breaking and then recovers.
    pub fn malformed_next(&self, method: &str) {
        self.push_fault(method, Fault::Malformed);
    }

    /// The next call of `method` runs exactly as a normal call would (a `sendMessage` creates
    /// its message, an `editMessageText` edits, a `deleteMessage` deletes, a `getUpdates`
    /// confirms its `offset`; a call the method refuses changes nothing), then the connection
    /// closes without the answer, so the client sees a connection error for a call that took
    /// effect. This is the case that duplicates a reply when a client retries a send blindly.
    ///
    /// Recorded as [`CallOutcome::AppliedThenDropped`] with the status it would have answered;
    /// a 429 it would have answered is not counted in [`FakeTelegram::rate_limited_count`].
    /// Queued with the other one-shot faults of the method, in order.
    pub fn apply_then_drop_next(&self, method: &str) {
        self.push_fault(method, Fault::ApplyThenDrop);
    }

    /// For `duration` from now (tokio's clock), every call of `method` is answered 429 with
    /// Telegram's flood-control body
    /// `{"ok":false,"error_code":429,"description":"Too Many Requests: retry after N","parameters":{"retry_after":N}}`
    /// with `N = retry_after_secs`, whatever the call. Each one counts in
    /// [`FakeTelegram::rate_limited_count`]. Returns the instant the storm ends, so a test can
    /// wait for exactly that moment.
    ///
    /// The storm may last longer than the `retry_after` it announces (e.g. 8 s of storm saying
    /// "retry after 1"), as Telegram's flood control does under sustained load: a client that
    /// obeys `retry_after` once and then gives up, or that retries without limit in a tight
    /// loop, shows. Calls answered by a storm do not use up one-shot faults
    /// ([`FakeTelegram::fail_next`], [`FakeTelegram::apply_then_drop_next`], …): those hit the
    /// first call after the storm. Storms on one method may overlap; the earliest started
    /// that is still active answers.
    pub fn rate_limit_storm(&self, method: &str, duration: Duration, retry_after_secs: u64) -> Instant {
        let error = methods::ApiError::too_many_requests(retry_after_secs);
        lock(&self.shared.state).faults.storm(method, duration, error.into_fault())
    }

    /// For `duration` from now (tokio's clock), every call of `method` fails with
    /// `502 {"ok":false,"error_code":502,"description":"Bad Gateway"}`, what Telegram's
    /// frontends answer while its backend is unreachable. Meant for `getUpdates` outages;
    /// works for any method. Returns the instant the storm ends; the same ordering rules as
    /// [`FakeTelegram::rate_limit_storm`] apply.
    ///
    /// What Ferry's Telegram adapter does with it: teloxide sleeps 10 s after any 5xx before it
    /// reads the body (the same for every 5xx status, so no status choice avoids it), then
    /// reports `RequestError::Api(ApiError::Unknown("Bad Gateway"))`. The poll loop treats that
    /// as an outage: it logs once, waits its backoff (1 s, doubling up to 30 s) and polls again,
    /// so each failed `getUpdates` costs about 10 s plus the backoff and an 8 s storm sees a
    /// single poll; the loop resumes within roughly 10 s + backoff after the storm ends (a storm
    /// outlasting five polls in a row, about a minute, ends the loop and the channel is
    /// restarted). No
    /// update is confirmed during the storm, so none is lost. An outbound call hit by the storm
    /// is reported as transient (the 10 s fit in the client's 17 s timeout).
    pub fn server_error_storm(&self, method: &str, duration: Duration) -> Instant {
        let error = methods::ApiError::bad_gateway();
        lock(&self.shared.state).faults.storm(method, duration, error.into_fault())
    }

    // --- Observing --------------------------------------------------------------------------

    /// Every call received so far, in arrival order.
    pub fn calls(&self) -> Vec<Call> {
        lock(&self.shared.state).calls.clone()
    }

    /// The calls of one method (case-insensitive).
    pub fn calls_to(&self, method: &str) -> Vec<Call> {
        self.calls().into_iter().filter(|call| call.method.eq_ignore_ascii_case(method)).collect()
    }

    /// Waits until `count` calls of `method` have finished (answered or dropped) and returns all
    /// calls of that method so far. Waits forever if they never come: wrap it in a timeout.
    pub async fn wait_for_calls(&self, method: &str, count: usize) -> Vec<Call> {
        let mut seen = self.shared.calls_seen.subscribe();
        loop {
            let calls = self.calls_to(method);
            if calls.iter().filter(|call| call.outcome != CallOutcome::InFlight).count() >= count {
                return calls;
            }
            // The sender lives in `self.shared`, so the channel cannot close while we wait.
            let _ = seen.changed().await;
        }
    }

    /// Waits until `count` calls of `method` have arrived, finished or not (e.g. a long poll that
    /// is now waiting), and returns all calls of that method so far.
    pub async fn wait_for_arrivals(&self, method: &str, count: usize) -> Vec<Call> {
        let mut seen = self.shared.calls_seen.subscribe();
        loop {
            let calls = self.calls_to(method);
            if calls.len() >= count {
                return calls;
            }
            let _ = seen.changed().await;
        }
    }

    /// The bot's messages that still exist, in the order they were sent, as they read now.
    pub fn sent(&self) -> Vec<SentMessage> {
        let state = lock(&self.shared.state);
        state
            .sent_order
            .iter()
            .filter_map(|(chat_id, message_id)| state.chats.get(chat_id)?.messages.get(message_id)?.sent.clone())
            .collect()
    }

    /// The bot's messages as one chat shows them now, by message id: each with the text of its
    /// latest accepted edit (`text` as sent, `visible_text` as seen), deleted ones left out.
    /// Edits and deletes whose answer was dropped ([`FakeTelegram::apply_then_drop_next`]) are
    /// included, since the chat shows them; refused ones are not. For "every message is
    /// answered exactly once" checks. The user's own messages are in
    /// [`FakeTelegram::message_json`].
    pub fn messages_in(&self, chat_id: i64) -> Vec<SentMessage> {
        let state = lock(&self.shared.state);
        let Some(chat) = state.chats.get(&chat_id) else { return Vec::new() };
        chat.messages.values().filter_map(|stored| stored.sent.clone()).collect()
    }

    /// The full `Message` JSON of any message (user's or bot's) that still exists.
    pub fn message_json(&self, chat_id: i64, message_id: i64) -> Option<Value> {
        lock(&self.shared.state).chats.get(&chat_id)?.messages.get(&message_id).map(|stored| stored.json.clone())
    }

    /// Every accepted `sendChatAction`, in order.
    pub fn chat_actions(&self) -> Vec<ChatAction> {
        lock(&self.shared.state).chat_actions.clone()
    }

    /// The command list of the last accepted `setMyCommands` (empty before one).
    pub fn commands(&self) -> Vec<BotCommand> {
        lock(&self.shared.state).commands.clone()
    }

    /// How many 429 answers were served, by flood control or by scripted faults.
    pub fn rate_limited_count(&self) -> usize {
        lock(&self.shared.state).rate_limited
    }

    /// The lowest update id not yet confirmed (the `offset` a caught-up client sends next).
    /// Updates are confirmed only by a later `getUpdates` with a higher `offset`.
    pub fn current_offset(&self) -> i64 {
        lock(&self.shared.state).current_offset()
    }

    /// Waits until the client has confirmed every update below `offset`.
    pub async fn wait_for_offset(&self, offset: i64) {
        let mut current = self.shared.offset.subscribe();
        let _ = current.wait_for(|current| *current >= offset).await;
    }

    /// How many updates are queued and not yet confirmed.
    pub fn pending_updates(&self) -> usize {
        lock(&self.shared.state).pending.len()
    }
}

impl Drop for FakeTelegram {
    fn drop(&mut self) {
        // Before `server` drops: a waiting long poll would otherwise hold graceful shutdown open.
        self.shared.closing.send_replace(true);
    }
}
