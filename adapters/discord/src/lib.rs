//! Ferry's Discord adapter: a [`Channel`](ferry_channel::Channel) on serenity.
//!
//! ```no_run
//! use ferry_channel::Channel;
//! use ferry_discord::{DiscordChannel, DiscordConfig};
//! use futures::StreamExt;
//!
//! # async fn run() -> Result<(), Box<dyn std::error::Error>> {
//! let channel = DiscordChannel::connect(DiscordConfig::new("MTIz.bot-token")).await?;
//! let mut inbound = channel.start().await?;
//! while let Some(delivery) = inbound.next().await {
//!     // Record the message durably, then accept.
//!     delivery.ack.accept();
//! }
//! # Ok(()) }
//! ```
//!
//! Where things are:
//! - [`config`](DiscordConfig): token, API and gateway URLs, account;
//! - `channel`: [`DiscordChannel::connect`] (`GET /users/@me`, the serenity gateway client)
//!   and the outbound calls of the `Channel` trait;
//! - `gateway`: serenity's event handler, which only enqueues, and the forwarder that orders,
//!   dedupes, resolves channels (threads, DMs) and hands messages to the core;
//! - `catch_up`: after every (re)connect, each recently active channel's history since the
//!   last message seen there, for what the gateway never delivered;
//! - `normalize`: Discord messages → `InboundMessage` (DMs, channels, threads, mentions,
//!   attachments by their CDN link, type, size and pixel size);
//! - `nonce`: the `nonce` + `enforce_nonce` a create carries, derived from the message's
//!   idempotency key, with which Discord itself drops a repeated send;
//! - `rest`: one REST request per call, built by serenity, answered in full (status,
//!   rate-limit headers, JSON body);
//! - `upload`: the files a message carries (read from the core's media store, named so
//!   Discord previews them), sent by `rest` as `multipart/form-data`;
//! - `download`: inbound attachments fetched from their signed CDN links, streamed to the core;
//! - `error`: REST failures → `ChannelError` (429 → `RateLimited { retry_after }`).
//!
//! The bot needs the Message Content privileged intent (developer portal → Bot); the gateway
//! [`intents`] are guild messages, direct messages and message content.
//!
//! The platform's limits, which the core plans replies with (and `ferry config check`
//! validates against), are [`capabilities`].

use std::time::Duration;

use ferry_channel::{ChannelCapabilities, MarkupDialect, Rate, SendBudget};

mod catch_up;
mod channel;
mod config;
mod download;
mod error;
#[cfg(feature = "fuzzing")]
#[doc(hidden)]
pub mod fuzzing;
mod gateway;
mod nonce;
mod normalize;
mod rest;
mod shard_watch;
mod upload;

pub use channel::{DiscordChannel, intents};
pub use config::{DEFAULT_API_URL, DiscordConfig};
pub use error::DiscordError;

/// The channel's name in config (`[channels.discord]`) and in session keys.
pub const CHANNEL_NAME: &str = "discord";

/// Discord's limits and features, from its API documentation.
pub fn capabilities() -> ChannelCapabilities {
    ChannelCapabilities {
        // Message content: 2000 characters; clients collapse long messages at 17 lines.
        text_limit: 2000,
        max_lines: Some(17),
        markup: MarkupDialect::DiscordMarkdown,
        supports_edit: true,
        supports_delete: true,
        supports_typing: true,
        supports_reply_to: true,
        // 5 messages per 5 s per channel leaves room for one edit every 1.2 s.
        min_edit_interval: Duration::from_millis(1200),
        // Channel message routes allow 5 per 5 s; the global limit is 50 requests a second.
        send_budget: SendBudget {
            // Bursts of 3, then one every 1.75 s: never more than 5 in any 5 s (3 at once,
            // then at 1.75 s and 3.5 s; the sixth comes at 5.25 s). `Rate::new(5, 5 s)`
            // refilled a cell a second after a burst of 5 and so sent a sixth call 1 s in.
            per_chat: Some(Rate::spaced(Duration::from_millis(1750), 3)),
            per_direct_chat: None,
            per_group: None,
            // Discord's global limit is 50 requests a second: 5 at once, then one every
            // 23 ms, so no second holds more than 48 (5 + 1000 / 23). `Rate::new(50, 1 s)`
            // let a burst of 50 come on top of the rate, about 99 in a flood's first second.
            global: Some(Rate::spaced(Duration::from_millis(23), 5)),
        },
        replies_via_chat_events: false,
        send_reconciliation: ferry_channel::SendReconciliation::PlatformDeduplicates,
        max_upload_bytes: Some(10 * 1024 * 1024),
        caption_limit: None,
    }
}
