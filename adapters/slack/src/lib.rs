//! Ferry's Slack adapter: a [`Channel`](ferry_channel::Channel) on slack-morphism.
//!
//! The platform client arrives with the Slack issue; what is here now are the platform's
//! limits, which the core plans replies with (and `ferry config check` validates against).

use std::time::Duration;

use ferry_channel::{ChannelCapabilities, MarkupDialect, Rate, SendBudget};

/// The channel's name in config (`[channels.slack]`) and in session keys.
pub const CHANNEL_NAME: &str = "slack";

/// Slack's limits and features, from its API documentation.
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
        supports_reply_to: false,
        // chat.update is Tier 3 (~50/min); one edit a second stays inside it.
        min_edit_interval: Duration::from_millis(1000),
        // chat.postMessage: about one message a second per channel (short bursts tolerated).
        send_budget: SendBudget { per_chat: Some(Rate::new(1, Duration::from_secs(1))), per_group: None, global: None },
        replies_via_chat_events: false,
    }
}
