//! Ferry's Telegram adapter: a [`Channel`](ferry_channel::Channel) on teloxide.
//!
//! The platform client arrives with the Telegram issue; what is here now are the platform's
//! limits, which the core plans replies with (and `ferry config check` validates against).

use std::time::Duration;

use ferry_channel::{ChannelCapabilities, MarkupDialect, Rate, SendBudget};

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
        // Bot API FAQ: about one message a second per chat, 20 a minute in a group, 30 a
        // second overall.
        send_budget: SendBudget {
            per_chat: Some(Rate::new(1, Duration::from_secs(1))),
            per_group: Some(Rate::new(20, Duration::from_secs(60))),
            global: Some(Rate::new(30, Duration::from_secs(1))),
        },
        replies_via_chat_events: false,
    }
}
