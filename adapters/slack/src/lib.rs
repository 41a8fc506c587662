//! Ferry's Slack adapter: a [`Channel`](ferry_channel::Channel) on slack-morphism.
//!
//! ```no_run
//! use ferry_channel::Channel;
//! use ferry_slack::{SlackChannel, SlackConfig};
//! use futures::StreamExt;
//!
//! # async fn run() -> Result<(), Box<dyn std::error::Error>> {
//! let channel = SlackChannel::connect(SlackConfig::socket("xoxb-…", "xapp-…")).await?;
//! let mut inbound = channel.start().await?;
//! while let Some(delivery) = inbound.next().await {
//!     // Record the message durably, then accept: only now is the envelope acknowledged.
//!     delivery.ack.accept();
//! }
//! # Ok(()) }
//! ```
//!
//! Where things are:
//! - [`config`](SlackConfig): tokens, API URL, account, Socket Mode or HTTP, reply threading;
//! - `client`: the Web API client on a connector that is https-only off loopback;
//! - `channel`: [`SlackChannel::connect`] (`auth.test`) and the outbound calls of the
//!   `Channel` trait;
//! - `lookup`: a sent message found again by its idempotency key (kept in message metadata),
//!   so a send whose outcome was unknown is not repeated;
//! - `inbound`: one event's way to the core, its ack, and redelivery dedupe by `event_id`;
//! - `socket`: Socket Mode, acknowledging an envelope only after the core's ack;
//! - `catch_up`: after every Socket Mode (re)connect, each recently active conversation's
//!   history since the last message seen there, for what no socket was open to receive;
//! - `events`: the `/slack/events` route for the Events API (signature, replay window,
//!   `url_verification`);
//! - `normalize`: Slack events → `InboundMessage` (DMs, group DMs, channels, threads, the
//!   files a message shares);
//! - `download`: a shared file's bytes, fetched with the bot token from Slack's hosts only
//!   (`hosts`);
//! - `upload`: a message with a file, through Slack's external upload flow, and what its
//!   message id is;
//! - `error`: Web API and file request errors → `ChannelError`.
//!
//! The platform's limits, which the core plans replies with (and `ferry config check`
//! validates against), are [`capabilities`].

use std::time::Duration;

use ferry_channel::{ChannelCapabilities, MarkupDialect, Rate, SendBudget};

mod catch_up;
mod channel;
mod client;
mod config;
mod download;
mod error;
mod events;
#[cfg(feature = "fuzzing")]
#[doc(hidden)]
pub mod fuzzing;
mod hosts;
mod inbound;
mod lookup;
mod normalize;
mod socket;
mod upload;

pub use channel::SlackChannel;
pub use config::{DEFAULT_API_URL, ReplyToMode, SlackConfig, SlackMode};
pub use error::SlackError;
pub use events::{EVENTS_PATH, MAX_REQUEST_AGE, events_paths};
pub use inbound::ACK_TIMEOUT;

/// The channel's name in config (`[channels.slack]`) and in session keys.
pub const CHANNEL_NAME: &str = "slack";

/// Slack's limits and features, from its API documentation. A connected channel reports
/// `supports_reply_to` per its [`ReplyToMode`]; this is the `off` default.
pub fn capabilities() -> ChannelCapabilities {
    ChannelCapabilities {
        // chat.postMessage truncates text beyond 40,000 characters (4,000 is advised).
        text_limit: 40_000,
        max_lines: None,
        markup: MarkupDialect::SlackMrkdwn,
        supports_edit: true,
        supports_delete: true,
        // Bot tokens have no typing indicator in the Web API.
        supports_typing: false,
        // Top-level messages get top-level replies, and `[[reply_to_current]]` is ignored.
        supports_reply_to: false,
        // chat.update is Tier 3 (~50/min); one edit a second stays inside it.
        min_edit_interval: Duration::from_millis(1000),
        // chat.postMessage: about one message a second per channel, "allowing for short
        // bursts": 3 at once, then one every 1.05 s (the 50 ms over a second absorb
        // arrival jitter, as for Telegram's private chats).
        send_budget: SendBudget {
            per_chat: Some(Rate::spaced(Duration::from_millis(1050), 3)),
            per_direct_chat: None,
            per_group: None,
            global: None,
        },
        replies_via_chat_events: false,
        send_reconciliation: ferry_channel::SendReconciliation::Lookup,
        max_upload_bytes: Some(1000 * 1000 * 1000),
        caption_limit: None,
    }
}
