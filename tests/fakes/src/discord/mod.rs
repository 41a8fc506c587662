//! A fake Discord (REST + gateway WebSocket) for offline tests of the Discord adapter.
//!
//! REST is served under `{url}/api/v10` — point serenity at it with
//! `HttpBuilder::new(token).proxy(url).ratelimiter_disabled(true)` — and the gateway at
//! `{ws_url}/gateway`, which `GET /api/v10/gateway` hands out. The fake keeps what a bot can
//! observe (channels and threads, messages, the gateway session and its sequence numbers)
//! and enforces Discord's rules with Discord's own error bodies: the bot token (401, and close
//! code 4004 on the gateway), 2000 characters per message (400, code 50035), 5 message calls
//! per 5 s per channel and scripted 429s (`retry_after` in the body, `X-RateLimit-*` headers).
//!
//! A create with a `nonce` and `enforce_nonce: true` that repeats a nonce the bot used in the
//! same channel within [`NONCE_WINDOW`] is answered 200 with the message already created, and
//! nothing new is created ([`FakeDiscord::nonce_replays`] lists them), as Discord does. For
//! "send exactly once" tests a call can be made to take effect but lose its answer
//! ([`FakeDiscord::apply_then_drop_next`]) or to be lost before it takes effect
//! ([`FakeDiscord::drop_next_before_apply`]); the client sees the same connection error.
//!
//! ```no_run
//! # async fn demo() -> std::io::Result<()> {
//! use ferry_fakes::{DiscordUser, FakeDiscord, Mention};
//! let discord = FakeDiscord::start("bot-token").await?;
//! // serenity: HttpBuilder::new("bot-token").proxy(discord.url()).ratelimiter_disabled(true)
//! discord.wait_for_session().await; // the client identified and got READY
//! discord.guild_message(1, 10, &DiscordUser::new(42, "ada"), "hello", Mention::Plain);
//! let sent = discord.wait_for_messages(10, 1).await;
//! assert_eq!(sent[0].channel_id, 10);
//! discord.disconnect(); // close code 4000; the client resumes and missed events are replayed
//! # Ok(()) }
//! ```
//!
//! Files travel as Discord's do: a user's message can carry attachments the fake serves from
//! signed links that expire, and the bot uploads files with a `multipart/form-data` create,
//! checked against Discord's limits (`media.rs`).
//!
//! A channel's history is served as Discord serves it (`history.rs`); a message can be put
//! there without any gateway event ([`FakeDiscord::history_only_message`]), as when it was
//! written while the bot's gateway was down.
//!
//! Layout: `state.rs` holds channels, messages, faults, limits and the session log;
//! `rest.rs` serves the HTTP API; `history.rs` its message history; `media.rs` the CDN and uploads; `gateway.rs` the WebSocket.
//!
//! Not served: embeds, slash commands and interactions, guild and member endpoints,
//! zlib-compressed gateway frames.

mod gateway;
mod history;
mod media;
mod rest;
mod state;

use std::io;
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::time::Duration;

use serde_json::{Value, json};
use tokio::sync::watch;
use tokio::time::Instant;

use state::{ChannelInfo, DM, Fault, GROUP_DM, GUILD_TEXT, PUBLIC_THREAD, State, StoredMessage};

use crate::FakeServer;

pub use media::{CdnRequest, DiscordFile, MAX_FILES, SentAttachment, UPLOAD_LIMIT};

/// Discord's limit on a message's content.
pub const TEXT_LIMIT: usize = 2000;

/// Discord's limit on a message nonce (API docs, "Create Message": up to 25 characters).
pub const NONCE_LIMIT: usize = 25;

/// How long a nonce is remembered for `enforce_nonce`. Discord documents "the past few
/// minutes"; the fake uses 5, on tokio's clock (so a paused-clock test can step past it).
pub const NONCE_WINDOW: Duration = Duration::from_secs(5 * 60);

/// The `retry_after` a [`FakeDiscord::rate_limit_storm`] announces, however long it lasts.
pub const STORM_RETRY_AFTER: Duration = Duration::from_secs(1);

/// The bot's user id (`GET /users/@me`), unless [`FakeDiscord::start`]'s bot is changed.
pub const DISCORD_BOT_ID: u64 = 1_200_000_000_000_000_001;

/// How a test message addresses the bot.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Mention {
    /// No mention.
    None,
    /// `<@bot_id> ` in front.
    Plain,
    /// The nickname form `<@!bot_id> ` in front.
    Nickname,
}

/// A Discord user as the fake puts it in `author` fields.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct DiscordUser {
    /// The user's snowflake id: what `<@id>` mentions and the adapter's sender ids carry.
    pub id: u64,
    /// `username` (and `global_name`) in the `User` object.
    pub username: String,
    /// A bot account: the core ignores its messages unless `allow_bots`.
    pub bot: bool,
}

impl DiscordUser {
    /// A human user.
    pub fn new(id: u64, username: impl Into<String>) -> Self {
        Self { id, username: username.into(), bot: false }
    }

    /// Another bot.
    pub fn bot(id: u64, username: impl Into<String>) -> Self {
        Self { id, username: username.into(), bot: true }
    }

    /// The `User` object.
    pub fn to_json(&self) -> Value {
        json!({
            "id": self.id.to_string(),
            "username": self.username,
            "global_name": self.username,
            "discriminator": "0",
            "avatar": null,
            "bot": self.bot,
        })
    }
}

/// One REST call as received, recorded before any check so refused calls show up too.
#[derive(Clone, Debug)]
pub struct Call {
    /// `GET`, `POST`, `PATCH`, `DELETE`.
    pub method: String,
    /// The path, e.g. `/api/v10/channels/10/messages`.
    pub path: String,
    /// The channel in the path, if any.
    pub channel_id: Option<u64>,
    /// The JSON body (`Null` if none).
    pub body: Value,
    /// When it arrived, on tokio's clock.
    pub at: Instant,
    /// The status answered; `None` while in flight, or if the connection was dropped.
    pub status: Option<u16>,
    /// The connection was closed instead of answering (a scripted fault), and whether the
    /// call took effect first.
    pub dropped: Option<Dropped>,
    /// The `files[n]` parts of a multipart create, in order (`body` is its `payload_json`).
    pub files: Vec<UploadedFile>,
}

/// A file part of a multipart call, as received.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct UploadedFile {
    /// `n` of the part's name `files[n]`.
    pub index: u64,
    /// The part's own file name (the `attachments` entry may rename it).
    pub filename: Option<String>,
    pub content_type: Option<String>,
    pub size: usize,
}

pub use crate::server::Dropped;

/// A create-message call that Discord answered with the message it had already created,
/// because the call's `nonce` (with `enforce_nonce: true`) repeated one used in the same
/// channel within [`NONCE_WINDOW`]. Nothing was created.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct NonceReplay {
    pub channel_id: u64,
    pub nonce: String,
    /// The existing message the call was answered with.
    pub message_id: u64,
}

impl Call {
    /// A create-message call (`POST …/messages`).
    pub fn is_create_message(&self) -> bool {
        self.method == "POST" && self.path.ends_with("/messages")
    }

    /// An edit-message call (`PATCH …/messages/{id}`).
    pub fn is_edit_message(&self) -> bool {
        self.method == "PATCH"
    }
}

/// A message the bot sent that still exists, as it reads now.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SentMessage {
    /// The channel (or thread) it was posted in.
    pub channel_id: u64,
    /// Its snowflake id, as the create-message answer gave it.
    pub message_id: u64,
    /// The text as it reads now (Discord markdown, shown as is).
    pub content: String,
    /// The message it replies to (`message_reference`), if that message existed.
    pub reply_to: Option<u64>,
    /// How many edits changed its content.
    pub edits: u32,
    /// The files it carries, in order.
    pub attachments: Vec<SentAttachment>,
}

/// How [`FakeDiscord`] ends the current gateway connection.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Kick {
    /// A close frame with this code (4000: unknown error, resumable).
    Close(u16),
    /// The TCP connection just ends, no close frame.
    Drop,
}

/// State shared between the handle a test holds and the server's handlers.
pub(crate) struct Shared {
    token: String,
    /// The token was revoked ([`FakeDiscord::revoke_session`]): REST answers 401 and an
    /// identify is closed with 4004, as Discord does for a revoked token.
    revoked: std::sync::atomic::AtomicBool,
    state: Mutex<State>,
    /// `ws://127.0.0.1:PORT/gateway`, set once the server is bound.
    gateway_url: Mutex<String>,
    /// `http://127.0.0.1:PORT`, set once the server is bound: the CDN links' base.
    url: Mutex<String>,
    heartbeat_interval: Duration,
    /// Bumped on every change a test or a connection may wait for.
    changed: watch::Sender<u64>,
    /// Tells the connected client's connection to end, and how.
    kick: watch::Sender<Kick>,
}

/// Locks ignoring poisoning: a test that panicked while holding the lock must not turn every
/// later request into a second, confusing panic.
pub(crate) fn lock<T>(mutex: &Mutex<T>) -> MutexGuard<'_, T> {
    mutex.lock().unwrap_or_else(PoisonError::into_inner)
}

impl Shared {
    /// Whether `token` (without `Bot `) is the bot's, and not revoked.
    fn accepts(&self, token: &str) -> bool {
        token == self.token && !self.revoked.load(std::sync::atomic::Ordering::SeqCst)
    }

    fn notify(&self) {
        self.changed.send_modify(|version| *version += 1);
    }

    fn gateway_url(&self) -> String {
        lock(&self.gateway_url).clone()
    }

    fn url(&self) -> String {
        lock(&self.url).clone()
    }
}

/// A running fake Discord; dropping it stops the server.
pub struct FakeDiscord {
    server: FakeServer,
    shared: Arc<Shared>,
}

impl FakeDiscord {
    /// Starts the server for a bot with this token, with Discord's per-channel limits on
    /// and a 3 s heartbeat interval: short, so tests see heartbeats quickly, yet long enough
    /// that a loaded 2-core machine acknowledges each in time (serenity drops a session
    /// whose heartbeat was not acknowledged within one interval; at 1 s that restarted
    /// healthy sessions while the test suite ran beside a build).
    pub async fn start(token: &str) -> io::Result<Self> {
        Self::start_with_heartbeat(token, Duration::from_secs(3)).await
    }

    /// [`FakeDiscord::start`] with the heartbeat interval Hello announces.
    pub async fn start_with_heartbeat(token: &str, heartbeat_interval: Duration) -> io::Result<Self> {
        let bot = DiscordUser::bot(DISCORD_BOT_ID, "ferry-test");
        let shared = Arc::new(Shared {
            token: token.to_owned(),
            revoked: std::sync::atomic::AtomicBool::new(false),
            state: Mutex::new(State::new(bot)),
            gateway_url: Mutex::new(String::new()),
            url: Mutex::new(String::new()),
            heartbeat_interval,
            changed: watch::Sender::new(0),
            kick: watch::Sender::new(Kick::Drop),
        });
        let server = FakeServer::start(rest::router(Arc::clone(&shared))).await?;
        *lock(&shared.gateway_url) = format!("ws://{}/gateway", server.addr());
        *lock(&shared.url) = server.url();
        Ok(Self { server, shared })
    }

    /// The `api_url` to give the client: `http://127.0.0.1:PORT`, no trailing slash.
    pub fn url(&self) -> String {
        self.server.url()
    }

    /// The gateway URL `GET /api/v10/gateway` answers with.
    pub fn gateway_url(&self) -> String {
        self.shared.gateway_url()
    }

    /// The token the fake accepts.
    pub fn token(&self) -> &str {
        &self.shared.token
    }

    /// The bot's user id.
    pub fn bot_id(&self) -> u64 {
        lock(&self.shared.state).bot.id
    }

    /// No per-channel limits: for tests that send fast and do not study rate limits.
    pub fn without_rate_limits(self) -> Self {
        lock(&self.shared.state).enforce_limits = false;
        self
    }

    // --- Channels ---------------------------------------------------------------------------

    fn ensure_channel(&self, id: u64, info: ChannelInfo) {
        lock(&self.shared.state).channels.entry(id).or_insert(info);
    }

    /// Makes `channel` a text channel of `guild` (done by the message helpers as needed).
    pub fn add_guild_channel(&self, guild: u64, channel: u64) {
        self.ensure_channel(channel, ChannelInfo { kind: GUILD_TEXT, guild_id: Some(guild), parent_id: None });
    }

    /// Makes `thread` a public thread under `parent` in `guild`.
    pub fn add_thread(&self, guild: u64, parent: u64, thread: u64) {
        self.add_guild_channel(guild, parent);
        self.ensure_channel(
            thread,
            ChannelInfo { kind: PUBLIC_THREAD, guild_id: Some(guild), parent_id: Some(parent) },
        );
    }

    /// The DM channel between the bot and `user` (its id is the user's id + 1, so tests can
    /// name it).
    pub fn dm_channel(&self, user: u64) -> u64 {
        let id = user + 1;
        self.ensure_channel(id, ChannelInfo { kind: DM, guild_id: None, parent_id: None });
        id
    }

    // --- Injecting messages -----------------------------------------------------------------

    /// A `MESSAGE_CREATE` from `author` in `channel` (which must exist); returns the message
    /// id. Dispatched on the live session, or after the next READY if there is none.
    pub fn inject_message(&self, channel: u64, author: &DiscordUser, content: &str) -> u64 {
        self.inject_with(channel, author, content, None, Vec::new())
    }

    /// Dispatches `data` as a `t` event on the live session exactly as given, however wrong:
    /// for tests of payloads Discord should never send.
    pub fn inject_raw(&self, event: &str, data: Value) {
        lock(&self.shared.state).dispatch(event, data);
        self.shared.notify();
    }

    /// A message from `author` in `channel` (which must exist) that only the channel's
    /// history has: no gateway event is dispatched, now or later, as for a message written
    /// while the bot was not connected. Returns its id.
    pub fn history_only_message(&self, channel: u64, author: &DiscordUser, content: &str) -> u64 {
        let id = {
            let mut state = lock(&self.shared.state);
            assert!(state.channels.contains_key(&channel), "fake Discord: channel {channel} was never created");
            let id = state.next_id();
            let json = state.message_json(id, channel, author, content, None);
            state.messages.insert(id, StoredMessage { json, sent: None });
            id
        };
        self.shared.notify();
        id
    }

    fn inject_with(
        &self,
        channel: u64,
        author: &DiscordUser,
        content: &str,
        reply_to: Option<u64>,
        files: Vec<DiscordFile>,
    ) -> u64 {
        let base_url = self.shared.url();
        let id = {
            let mut state = lock(&self.shared.state);
            assert!(state.channels.contains_key(&channel), "fake Discord: channel {channel} was never created");
            let id = state.next_id();
            let mut json = state.message_json(id, channel, author, content, reply_to);
            let attachments: Vec<Value> = files
                .into_iter()
                .map(|file| {
                    let content_type = file.content_type.as_deref();
                    state.publish(&base_url, channel, &file.filename, content_type, file.bytes.into()).1
                })
                .collect();
            json["attachments"] = attachments.into();
            state.messages.insert(id, StoredMessage { json: json.clone(), sent: None });
            state.dispatch("MESSAGE_CREATE", json);
            id
        };
        self.shared.notify();
        id
    }

    fn addressed(&self, content: &str, mention: Mention) -> String {
        let bot = self.bot_id();
        match mention {
            Mention::None => content.to_owned(),
            Mention::Plain => format!("<@{bot}> {content}"),
            Mention::Nickname => format!("<@!{bot}> {content}"),
        }
    }

    /// A DM from `author`; returns `(dm channel id, message id)`.
    pub fn dm(&self, author: &DiscordUser, content: &str) -> (u64, u64) {
        let channel = self.dm_channel(author.id);
        (channel, self.inject_message(channel, author, content))
    }

    /// A message in a group DM `channel` (created as needed).
    pub fn group_dm_message(&self, channel: u64, author: &DiscordUser, content: &str) -> u64 {
        self.ensure_channel(channel, ChannelInfo { kind: GROUP_DM, guild_id: None, parent_id: None });
        self.inject_message(channel, author, content)
    }

    /// A message in text channel `channel` of `guild` (created as needed).
    pub fn guild_message(
        &self,
        guild: u64,
        channel: u64,
        author: &DiscordUser,
        content: &str,
        mention: Mention,
    ) -> u64 {
        self.add_guild_channel(guild, channel);
        self.inject_message(channel, author, &self.addressed(content, mention))
    }

    /// A message in `thread` under `parent` of `guild` (created as needed).
    pub fn thread_message(
        &self,
        guild: u64,
        parent: u64,
        thread: u64,
        author: &DiscordUser,
        content: &str,
        mention: Mention,
    ) -> u64 {
        self.add_thread(guild, parent, thread);
        self.inject_message(thread, author, &self.addressed(content, mention))
    }

    /// A reply to message `to` in `channel` (`message_reference` + `referenced_message`).
    pub fn reply(&self, channel: u64, author: &DiscordUser, to: u64, content: &str) -> u64 {
        self.inject_with(channel, author, content, Some(to), Vec::new())
    }

    // --- Faults -----------------------------------------------------------------------------

    /// The next message call (create, edit, delete) to `channel` gets a 429 with this
    /// `retry_after`. Faults queue per channel, each used once.
    pub fn fail_next_with_429(&self, channel: u64, retry_after: Duration) {
        let fault = Fault::RateLimited(retry_after.as_secs_f64());
        lock(&self.shared.state).faults.entry(channel).or_default().push_back(fault);
    }

    /// The next message call to `channel` gets this status (5xx: a server error body; 4xx:
    /// 50001 Missing Access).
    pub fn fail_next(&self, channel: u64, status: u16) {
        lock(&self.shared.state).faults.entry(channel).or_default().push_back(Fault::Status(status));
    }

    /// The next message call (create, edit, delete) to `channel` runs exactly as a normal call
    /// would (the message is created, edited or deleted; a call the fake refuses changes
    /// nothing), then the connection is closed without the answer: the client sees a
    /// connection error for a call that took effect, the case that duplicates a reply when a
    /// client repeats a send blindly. Recorded with [`Dropped::AfterApply`] and the status it
    /// would have answered. Queued with the channel's other one-shot faults, in order.
    pub fn apply_then_drop_next(&self, channel: u64) {
        lock(&self.shared.state).faults.entry(channel).or_default().push_back(Fault::ApplyThenDrop);
    }

    /// The next message call to `channel` is not answered: the connection closes and nothing
    /// is applied. Recorded with [`Dropped::BeforeApply`]. The client sees the same error as
    /// with [`FakeDiscord::apply_then_drop_next`] and cannot tell which happened.
    pub fn drop_next_before_apply(&self, channel: u64) {
        lock(&self.shared.state).faults.entry(channel).or_default().push_back(Fault::DropBeforeApply);
    }

    /// For `duration` from now (tokio's clock) every message call to `channel` gets a 429
    /// announcing `retry_after` [`STORM_RETRY_AFTER`] (1 s), however long the storm still
    /// lasts, as Discord does under sustained load: a client that obeys `retry_after` once and
    /// then gives up, or retries in a tight loop, shows. Returns the instant the storm ends.
    ///
    /// Storms answer before the channel's one-shot faults and leave them queued, so a fault
    /// scripted during a storm hits the first call that gets through it.
    pub fn rate_limit_storm(&self, channel: u64, duration: Duration) -> Instant {
        self.rate_limit_storm_with_retry_after(channel, duration, STORM_RETRY_AFTER)
    }

    /// [`FakeDiscord::rate_limit_storm`] announcing this `retry_after` in every answer.
    pub fn rate_limit_storm_with_retry_after(
        &self,
        channel: u64,
        duration: Duration,
        retry_after: Duration,
    ) -> Instant {
        let until = Instant::now() + duration;
        let storm = state::Storm { until, retry_after: retry_after.as_secs_f64() };
        lock(&self.shared.state).storms.insert(channel, storm);
        until
    }

    /// The next history read of `channel` gets a 429 with this `retry_after`. Queued per
    /// channel, each used once.
    pub fn fail_next_history_read(&self, channel: u64, retry_after: Duration) {
        lock(&self.shared.state).history_faults.entry(channel).or_default().push_back(retry_after.as_secs_f64());
    }

    /// History reads (`GET …/messages`) answered with a page so far.
    pub fn history_reads(&self) -> usize {
        lock(&self.shared.state).history_reads
    }

    // --- The gateway ------------------------------------------------------------------------

    /// Closes the client's gateway connection with close code 4000 (resumable).
    pub fn disconnect(&self) {
        self.kick(Kick::Close(4000));
    }

    /// Revokes the bot's token: the gateway connection is closed with code 4004
    /// (authentication failed), which a client must not reconnect after, and from now on
    /// REST answers 401 and a new identify is refused, as Discord does.
    pub fn revoke_session(&self) {
        self.shared.revoked.store(true, std::sync::atomic::Ordering::SeqCst);
        self.kick(Kick::Close(4004));
    }

    /// Closes the client's gateway connection with close `code`, e.g. 4014 (disallowed
    /// intents), one a client does not resume or reconnect after by itself.
    pub fn close_with(&self, code: u16) {
        self.kick(Kick::Close(code));
    }

    /// Ends the client's gateway connection without a close frame.
    pub fn drop_connection(&self) {
        self.kick(Kick::Drop);
    }

    fn kick(&self, how: Kick) {
        lock(&self.shared.state).gateway.live = false;
        self.shared.kick.send_replace(how);
        self.shared.notify();
    }

    /// The next resume replays every dispatch of the session since READY, as if Discord had
    /// lost track of what the client saw: the client must drop what it already handled.
    pub fn replay_all_on_next_resume(&self) {
        lock(&self.shared.state).gateway.replay_all_on_resume = true;
    }

    async fn wait_until(&self, mut done: impl FnMut(&State) -> bool) {
        let mut changed = self.shared.changed.subscribe();
        loop {
            if done(&lock(&self.shared.state)) {
                return;
            }
            // The sender lives in `self.shared`, so the channel cannot close while we wait.
            let _ = changed.changed().await;
        }
    }

    /// Waits until a client has a live session (after READY or RESUMED). Wrap in a timeout.
    pub async fn wait_for_session(&self) {
        self.wait_until(|state| state.gateway.live).await;
    }

    /// Waits until `count` resumes have succeeded in all.
    pub async fn wait_for_resumes(&self, count: usize) {
        self.wait_until(|state| state.gateway.resumes >= count && state.gateway.live).await;
    }

    /// Waits until `count` heartbeats have been received (and ACKed) in all.
    pub async fn wait_for_heartbeats(&self, count: usize) {
        self.wait_until(|state| state.gateway.heartbeats >= count).await;
    }

    /// Identifies (new sessions) so far.
    pub fn identify_count(&self) -> usize {
        lock(&self.shared.state).gateway.identifies
    }

    /// Successful resumes so far.
    pub fn resume_count(&self) -> usize {
        lock(&self.shared.state).gateway.resumes
    }

    /// Heartbeats received (each ACKed) so far.
    pub fn heartbeat_count(&self) -> usize {
        lock(&self.shared.state).gateway.heartbeats
    }

    // --- Observing --------------------------------------------------------------------------

    /// Every REST call received so far, in arrival order (`GET /gateway` excepted).
    pub fn calls(&self) -> Vec<Call> {
        lock(&self.shared.state).calls.clone()
    }

    /// The bot's messages that still exist, in the order they were sent, as they read now.
    pub fn sent_messages(&self) -> Vec<SentMessage> {
        lock(&self.shared.state).messages.values().filter_map(|stored| stored.sent.clone()).collect()
    }

    /// The bot's messages that still exist in one channel (or thread).
    pub fn messages_in(&self, channel: u64) -> Vec<SentMessage> {
        self.sent_messages().into_iter().filter(|message| message.channel_id == channel).collect()
    }

    /// Waits until `channel` shows at least `count` bot messages and returns them. Wrap in a
    /// timeout.
    pub async fn wait_for_messages(&self, channel: u64, count: usize) -> Vec<SentMessage> {
        self.wait_until(|state| {
            state.messages.values().filter(|m| m.sent.as_ref().is_some_and(|s| s.channel_id == channel)).count()
                >= count
        })
        .await;
        self.messages_in(channel)
    }

    /// Channels a typing indicator was triggered in, in order.
    pub fn typing(&self) -> Vec<u64> {
        lock(&self.shared.state).typing.clone()
    }

    /// How many 429 answers were served (limits, storms and scripted).
    pub fn rate_limited_count(&self) -> usize {
        lock(&self.shared.state).rate_limited
    }

    /// Creates answered with an existing message because their nonce repeated (with
    /// `enforce_nonce`), in order.
    pub fn nonce_replays(&self) -> Vec<NonceReplay> {
        lock(&self.shared.state).nonce_replays.clone()
    }
}
