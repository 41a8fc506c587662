//! Ferry's Telegram adapter: a [`Channel`](ferry_channel::Channel) on teloxide's Bot API
//! client.
//!
//! ```no_run
//! use ferry_channel::Channel;
//! use ferry_telegram::{TelegramChannel, TelegramConfig};
//! use futures::StreamExt;
//!
//! # async fn run() -> Result<(), Box<dyn std::error::Error>> {
//! let channel = TelegramChannel::connect(TelegramConfig::new("123456:ABC-token")).await?;
//! let mut inbound = channel.start().await?;
//! while let Some(delivery) = inbound.next().await {
//!     // Record the message durably, then accept: only now does the poll offset move past it.
//!     delivery.ack.accept();
//! }
//! # Ok(()) }
//! ```
//!
//! Where things are:
//! - [`config`](TelegramConfig): token, API URL, account, polling or webhook mode;
//! - `channel`: [`TelegramChannel::connect`] (`getMe`, `setMyCommands`) and the outbound
//!   calls of the `Channel` trait;
//! - `polling`: the `getUpdates` loop, which confirms an update only after the core's ack;
//! - `webhook`: the `/telegram-webhook` route for webhook mode;
//! - `normalize`: Telegram updates → `InboundMessage` (chats, topics, mentions, replies,
//!   attachments);
//! - `download`: inbound files by `file_id` (`getFile`, then the file URL, streamed);
//! - `media_send`: outbound files (`sendPhoto`, `sendVoice`, `sendDocument`, …);
//! - `error`: Bot API errors → `ChannelError`.
//!
//! The platform's limits, which the core plans replies with (and `ferry config check`
//! validates against), are [`capabilities`].

use std::time::Duration;

use ferry_channel::{ChannelCapabilities, MarkupDialect, Rate, SendBudget};

mod channel;
mod config;
mod download;
mod error;
#[cfg(feature = "fuzzing")]
#[doc(hidden)]
pub mod fuzzing;
mod media_send;
mod normalize;
mod offset;
mod polling;
mod salvage;
mod webhook;

pub use channel::TelegramChannel;
pub use config::{DEFAULT_API_URL, DEFAULT_POLL_TIMEOUT, TelegramConfig, TelegramMode};
pub use error::TelegramError;
pub use normalize::GENERAL_TOPIC;
pub use webhook::{SECRET_HEADER, WEBHOOK_PATH, webhook_paths};

/// The channel's name in config (`[channels.telegram]`) and in session keys.
pub const CHANNEL_NAME: &str = "telegram";

/// Telegram's limits and features, from its API documentation.
pub fn capabilities() -> ChannelCapabilities {
    ChannelCapabilities {
        // sendMessage: 1-4096 characters after entity parsing.
        text_limit: 4096,
        max_lines: None,
        markup: MarkupDialect::TelegramHtml,
        supports_edit: true,
        supports_delete: true,
        supports_typing: true,
        supports_reply_to: true,
        // Edits above ~1/s per chat draw 429s.
        min_edit_interval: Duration::from_millis(1000),
        // Bot API FAQ: about one message a second per chat ("short bursts that go over
        // this limit" are allowed), 20 a minute in a group, about 30 a second overall.
        send_budget: SendBudget {
            // Groups and channels: one a second, no burst.
            per_chat: Some(Rate::new(1, Duration::from_secs(1))),
            // A private chat: bursts of 3 (a quick second question is answered at once),
            // then one every 1.05 s. The 50 ms over a second are for arrival jitter: a
            // call that reaches Telegram faster than the one before it must still find a
            // second's worth of refill.
            per_direct_chat: Some(Rate::spaced(Duration::from_millis(1050), 3)),
            // A group: 5 at once, then one every 4.2 s, so no minute holds more than 20
            // (5 + 60 / 4.2). `Rate::new(20, 60 s)` let a burst of 20 come on top of the
            // rate: about 39 in a group's first minute, where Telegram allows 20.
            per_group: Some(Rate::spaced(Duration::from_millis(4200), 5)),
            // One call every 35 ms (28.6/s), no burst: never more than 29 in any second.
            // A burst would come on top of the rate (`Rate::new(30, 1 s)` let 59 through
            // in the first second of a flood, and Telegram answered 429).
            global: Some(Rate::spaced(Duration::from_millis(35), 1)),
        },
        replies_via_chat_events: false,
        send_reconciliation: ferry_channel::SendReconciliation::None,
        max_upload_bytes: Some(50 * 1000 * 1000),
        caption_limit: Some(1024),
    }
}
