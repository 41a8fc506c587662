//! Local stand-ins for the services Ferry talks to, so every test runs offline.
//!
//! Each fake speaks the real wire format of its service and enforces its real limits. They
//! share [`FakeServer`]: an axum router served on an ephemeral loopback port, shut down when
//! the handle drops, so a test owns its servers and never leaks one into the next test.
//!
//! The model fakes, [`FakeOpenAi`] and [`FakeAnthropic`], replay a script of [`Turn`]s: one
//! turn per request, rendered in the provider's own streaming format and error shape, so the
//! same scenario (a tool call split mid-JSON, a 429, a stalled or cut stream) can be run
//! against each provider client. Each API key can be given a [`KeyBehaviour`] (rate-limited,
//! revoked, out of credit, overloaded, stalled) to test failover between auth profiles, and
//! the Anthropic fake validates extended thinking (budget bounds, signed `thinking` blocks
//! handed back intact) as strictly as the real API. Both check image parts as their API does
//! (decodable PNG, JPEG, WebP or GIF, at most 5 MB of base64, in the places the API allows).
//! [`RecordedRequest`] reads back what the client sent: the key, the user's words, the
//! thinking knobs, the images ([`ReceivedImage`]: media type, pixel size, byte length).
//! [`FakeOpenAi`] also transcribes audio (`/v1/audio/transcriptions`, multipart, OpenAI's
//! limits and errors), recording each upload as a [`TranscriptionRequest`].
//! [`FakeEmbeddings`] is an OpenAI-compatible `/v1/embeddings` for memory search: deterministic
//! vectors in which words a test declares synonyms coincide (so a paraphrase that shares no
//! keyword still scores close), OpenAI's limits and errors, down / dropped / scripted faults,
//! and each request recorded as an [`EmbeddingRequest`].
//!
//! [`FakeTelegram`] is the Bot API: injected updates served through `getUpdates` long polling,
//! `sendMessage` / `editMessageText` / `deleteMessage` checked against Telegram's limits and
//! answered with its error texts, and scripted faults (errors, 429s, delays, dropped sockets).
//!
//! [`FakeDiscord`] is Discord's REST API and gateway WebSocket: injected `MESSAGE_CREATE`
//! dispatches with sequence numbers, forced disconnects and resumes that replay missed events,
//! create / edit / delete message checked against the 2000-character limit and per-channel
//! 429s with `retry_after`.
//!
//! [`FakeSlack`] is the Web API (`auth.test`, `chat.postMessage`/`update`/`delete`, …) with
//! Slack's `{ok:false, error}` refusals and 429 + `Retry-After`, a Socket Mode WebSocket whose
//! `events_api` envelopes must be acknowledged (redelivered after a reconnect otherwise), and
//! [`SlackEventsClient`], which POSTs signed Events API requests (or badly signed, or stale).
//!
//! [`pdfs`] writes PDFs byte for byte: one with text, and hostile ones that make the
//! extractor run without end or allocate without bound, for the out-of-process reader.
//!
//! PostgreSQL is the one service not faked: the state backend's tests need the real server's
//! locking and transactions. [`test_database`] gives a test a fresh database of its own on the
//! cluster `tests/postgres/setup` started (one per CI run; a database per test keeps parallel
//! tests apart), dropped with the handle. [`PrivateCluster`] is a cluster of one test's own for
//! tests that stop, restart or kill the server. Without the setup's environment both skip,
//! unless `FERRY_REQUIRE_POSTGRES=1` (CI) makes that a failure.

mod anthropic;
mod discord;
mod embeddings;
mod images;
mod keys;
mod model_script;
mod model_server;
mod openai;
pub mod pdfs;
mod postgres;
mod recorded;
mod server;
mod slack;
mod sse;
mod tcp_proxy;
mod telegram;
mod transcription;

pub use anthropic::FakeAnthropic;
pub use discord::{
    Call as DiscordCall, CdnRequest as DiscordCdnRequest, DISCORD_BOT_ID, DiscordFile, DiscordUser,
    Dropped as DiscordDropped, FakeDiscord, MAX_FILES as DISCORD_MAX_FILES, Mention,
    NONCE_LIMIT as DISCORD_NONCE_LIMIT, NONCE_WINDOW as DISCORD_NONCE_WINDOW, NonceReplay as DiscordNonceReplay,
    STORM_RETRY_AFTER as DISCORD_STORM_RETRY_AFTER, SentAttachment as DiscordSentAttachment,
    SentMessage as DiscordSentMessage, TEXT_LIMIT as DISCORD_TEXT_LIMIT, UPLOAD_LIMIT as DISCORD_UPLOAD_LIMIT,
    UploadedFile as DiscordUploadedFile,
};
pub use embeddings::{
    DIMENSIONS as EMBEDDING_DIMENSIONS, EmbeddingRequest, FakeEmbeddings,
    MAX_INPUT_TOKENS as EMBEDDING_MAX_INPUT_TOKENS, MAX_INPUTS as EMBEDDING_MAX_INPUTS,
    MAX_REQUEST_TOKENS as EMBEDDING_MAX_REQUEST_TOKENS, STOPWORDS as EMBEDDING_STOPWORDS,
};
pub use images::{ANTHROPIC_MAX_SIDE, IMAGE_BASE64_LIMIT, ReceivedImage};
pub use keys::KeyBehaviour;
pub use model_script::{HttpError, Reply, StopReason, ToolCall, Turn, Usage};
pub use openai::FakeOpenAi;
pub use postgres::{PrivateCluster, TestDatabase, test_database};
pub use recorded::RecordedRequest;
pub use server::FakeServer;
pub use slack::{
    APP_ID as SLACK_APP_ID, BOT_ID as SLACK_BOT_ID, BOT_USER_ID as SLACK_BOT_USER_ID, Call as SlackCall,
    Dropped as SlackDropped, EventsResponse, FakeSlack, LOGIN_PAGE as SLACK_LOGIN_PAGE, PostedMessage, SlackEvent,
    SlackEventsClient, TEAM_ID as SLACK_TEAM_ID, UploadedFile as SlackUploadedFile,
};
pub use tcp_proxy::TcpProxy;
pub use telegram::{
    BOT_USER_ID, BotCommand, Call, CallOutcome, ChatAction, DEFAULT_BOT_USERNAME, DOWNLOAD_LIMIT, FakeTelegram,
    InjectedMedia, PHOTO_UPLOAD_LIMIT, RateLimits, SentMedia, SentMessage, StickerFormat, TgFile, TgMedia, TgUser,
    UPLOAD_LIMIT, sample_jpeg,
};
pub use transcription::{DEFAULT_TRANSCRIPT, TRANSCRIPTION_LIMIT, TranscriptionRequest};
