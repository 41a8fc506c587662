//! How a platform differs, expressed as data the core can plan with.

use std::time::Duration;

use serde::{Deserialize, Serialize};

/// The markup a channel renders. The reply pipeline turns the model's markdown into this.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum MarkupDialect {
    /// No markup at all: markdown syntax is stripped.
    Plain,
    /// CommonMark, rendered by the client (the web chat).
    Markdown,
    /// Telegram's HTML parse mode (`<b>`, `<i>`, `<code>`, `<pre>`, `<a href>`).
    TelegramHtml,
    /// Discord's markdown flavour: no tables, so tables become code blocks.
    DiscordMarkdown,
    /// Slack mrkdwn: `*bold*`, `<url|label>` links.
    SlackMrkdwn,
}

/// What a channel can do and where its limits are. Platform quirks reach the core only
/// through these values, so the core never branches on the platform's name.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ChannelCapabilities {
    /// The platform's hard limit on characters in one message (Telegram 4096, Discord 2000).
    /// Operators may chunk below it with `text_chunk_limit`, never above.
    pub text_limit: usize,
    /// Lines per message before the client collapses it (Discord: 17), if any.
    pub max_lines: Option<usize>,
    pub markup: MarkupDialect,
    /// Messages can be edited after sending; needed for preview streaming.
    pub supports_edit: bool,
    pub supports_delete: bool,
    pub supports_typing: bool,
    /// Replies can be threaded to a specific message (`[[reply_to_current]]`).
    pub supports_reply_to: bool,
    /// The shortest interval between two edits of one preview message that the platform
    /// tolerates without rate-limiting (Telegram 1 s, Discord 1.2 s, Slack 1 s).
    pub min_edit_interval: Duration,
    /// How fast the bot may send; the core's outbound scheduler keeps to it.
    pub send_budget: SendBudget,
    /// The channel's clients watch every run's reply live through the gateway's `chat`
    /// events (the web chat): the reply pipeline sends them no reply messages of its own,
    /// only notices and what the agent's `message` tool sends.
    #[serde(default)]
    pub replies_via_chat_events: bool,
    /// How a send whose outcome is unknown (a timeout or a connection dropped after the
    /// request left) is made safe to repeat; see [`SendReconciliation`].
    #[serde(default)]
    pub send_reconciliation: SendReconciliation,
    /// The largest file, in bytes, the platform takes from a bot in one message (Telegram
    /// 50 MB, Discord 10 MiB, Slack 1 GB). `None`: the channel sends no files. A file over it
    /// is not attempted; the reader gets a note saying why instead.
    #[serde(default)]
    pub max_upload_bytes: Option<u64>,
    /// The most characters a file's caption may hold (Telegram: 1,024). Longer text is sent
    /// as messages of its own after the file. `None`: as many as a message's `text_limit`.
    #[serde(default)]
    pub caption_limit: Option<usize>,
}

/// What a channel offers against showing a message twice when a send's outcome is unknown
/// (SPEC §11: an unfinished send is reconciled, never blindly repeated). Every outbound
/// message carries an idempotency key that is stable across retries and restarts.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum SendReconciliation {
    /// Nothing: a repeated send may show the message twice (Telegram has no idempotency
    /// key). The core counts such repeats in `ferry_outbound_unknown_outcome_total`.
    #[default]
    None,
    /// The platform itself answers a repeat of the same idempotency key with the message it
    /// already created (Discord's `nonce` with `enforce_nonce`, within its window of a few
    /// minutes): repeating the send is safe.
    PlatformDeduplicates,
    /// The channel can look up a message it sent by its idempotency key
    /// ([`Channel::find_sent`](crate::Channel::find_sent); Slack keeps the key in message
    /// metadata): the core looks before it repeats.
    Lookup,
}

/// A number of calls per period, as the outbound scheduler applies it (GCRA): up to `calls`
/// back to back after a quiet spell, then one every `per / calls`. Over any window of
/// length `per` that allows up to `2 × calls - 1`; a platform limit counted in fixed or
/// sliding windows is declared with [`Rate::spaced`] and a burst that leaves room for it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct Rate {
    pub calls: u32,
    pub per: Duration,
}

impl Rate {
    pub const fn new(calls: u32, per: Duration) -> Self {
        Self { calls, per }
    }

    /// `burst` calls back to back, then one every `interval` — the way platforms word it
    /// ("about one a second, short bursts are fine"). The same rate as
    /// `Rate::new(burst, interval × burst)`.
    pub const fn spaced(interval: Duration, burst: u32) -> Self {
        Self { calls: burst, per: interval.saturating_mul(burst) }
    }
}

/// A platform's sending budgets (SPEC §7): what it tolerates before answering 429. Sends,
/// edits and deletes all count. `None` means no budget at that level.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct SendBudget {
    /// Per chat (Telegram ~1/s, Discord 5 per 5 s per channel, Slack ~1/s per channel).
    pub per_chat: Option<Rate>,
    /// Per one-to-one chat ([`ChatKind::Direct`](crate::ChatKind::Direct)) instead of
    /// `per_chat`, where the platform lets a private chat burst more than a group (Telegram:
    /// one a second with bursts of 3; a group keeps one a second). `None`: `per_chat`
    /// applies to direct chats too.
    #[serde(default)]
    pub per_direct_chat: Option<Rate>,
    /// Additionally per group or channel chat (Telegram: 20 per minute in a group).
    pub per_group: Option<Rate>,
    /// Across all chats of one bot account (Telegram ~30/s, Discord 50/s).
    pub global: Option<Rate>,
}

impl SendBudget {
    /// No budgets: for in-process channels.
    pub const UNLIMITED: Self = Self { per_chat: None, per_direct_chat: None, per_group: None, global: None };
}

impl ChannelCapabilities {
    /// A channel with no limits worth planning around and every feature: the in-memory
    /// channel and the web chat start from this.
    pub fn unrestricted() -> Self {
        Self {
            text_limit: 1_000_000,
            max_lines: None,
            markup: MarkupDialect::Markdown,
            supports_edit: true,
            supports_delete: true,
            supports_typing: true,
            supports_reply_to: true,
            min_edit_interval: Duration::ZERO,
            send_budget: SendBudget::UNLIMITED,
            replies_via_chat_events: false,
            send_reconciliation: SendReconciliation::None,
            max_upload_bytes: Some(u64::MAX),
            caption_limit: None,
        }
    }
}
