//! Ferry's Discord adapter: a [`Channel`](ferry_channel::Channel) on serenity.
//!
//! The platform client arrives with the Discord issue; what is here now are the platform's
//! limits, which the core plans replies with (and `ferry config check` validates against).

use std::time::Duration;

use ferry_channel::{ChannelCapabilities, MarkupDialect, Rate, SendBudget};

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
            per_chat: Some(Rate::new(5, Duration::from_secs(5))),
            per_group: None,
            global: Some(Rate::new(50, Duration::from_secs(1))),
        },
        replies_via_chat_events: false,
    }
}
