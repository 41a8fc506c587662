//! The chat channels' tables (`[channels.telegram]`, `[channels.discord]`,
//! `[channels.slack]`, `[channels.webchat]`): who may talk to each bot, how it is reached, how
//! replies show, and the accounts of a platform with several bots.

use std::collections::BTreeMap;

use indexmap::IndexMap;
use serde::{Deserialize, Serialize};

use super::Secret;
use super::tool_lists::ToolLists;

#[derive(Debug, Clone, Default, PartialEq, Deserialize, Serialize)]
#[serde(default, deny_unknown_fields)]
pub struct ChannelsConfig {
    pub telegram: TelegramConfig,
    pub discord: DiscordConfig,
    pub slack: SlackConfig,
    pub webchat: WebchatConfig,
}

impl ChannelsConfig {
    /// The operator's reply settings for an account of a channel by its config name:
    /// whether it streams a preview, and its chunk limit. A channel or account without a
    /// section here streams no preview and is chunked only at its own text limit.
    pub fn reply_settings(&self, channel: &str, account: &str) -> (StreamingMode, Option<usize>) {
        use super::Accounts;
        let none = (StreamingMode::Off, None);
        match channel {
            "telegram" => self.telegram.account(account).map_or(none, |t| (t.streaming, Some(t.text_chunk_limit))),
            "discord" => self.discord.account(account).map_or(none, |d| (d.streaming, Some(d.text_chunk_limit))),
            "slack" => self.slack.account(account).map_or(none, |s| (s.streaming, Some(s.text_chunk_limit))),
            _ => none,
        }
    }
}

/// Who may talk to the bot in direct messages (SPEC §3.2).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Deserialize, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum DmPolicy {
    /// Unknown senders get a code an operator approves with `ferry pairing approve`.
    #[default]
    Pairing,
    /// Only senders in `allow_from`.
    Allowlist,
    /// Anyone; `allow_from` must contain `"*"` to say so explicitly.
    Open,
    Disabled,
}

/// Which group chats the bot answers in.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Deserialize, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum GroupPolicy {
    /// Only the groups listed in the channel's group table.
    #[default]
    Allowlist,
    Open,
    Disabled,
}

/// How a reply appears while it is being written.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum StreamingMode {
    /// One message when the reply is done.
    Off,
    /// One preview message edited in place as the text grows.
    Partial,
}

/// How the Telegram bot receives updates.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Deserialize, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum TelegramMode {
    #[default]
    Polling,
    /// Telegram POSTs updates to `/telegram-webhook` on the gateway; needs `webhook_secret`.
    Webhook,
}

/// Group messages remembered per group while waiting for a mention (SPEC §3.3: "last 50").
pub const DEFAULT_HISTORY_LIMIT: usize = 50;

/// Per-group settings for an allowlisted group or channel.
#[derive(Debug, Clone, Default, PartialEq, Deserialize, Serialize)]
#[serde(default, deny_unknown_fields)]
pub struct GroupConfig {
    /// Overrides the channel's `require_mention` for this group.
    pub require_mention: Option<bool>,
    /// Tools this group may use besides, or may not use of, the channel's.
    pub tools: ToolLists,
}

#[derive(Debug, Clone, PartialEq, Deserialize, Serialize)]
#[serde(default, deny_unknown_fields)]
pub struct TelegramConfig {
    pub enabled: bool,
    /// More bots of this platform by account id (`[channels.telegram.accounts.<id>]`), each
    /// starting from this table's settings (its credentials only for account `default`).
    /// Empty: this table is the one account, `default`.
    #[serde(skip_serializing_if = "IndexMap::is_empty")]
    pub accounts: IndexMap<String, TelegramConfig>,
    /// From @BotFather; `TELEGRAM_BOT_TOKEN` is used when unset.
    pub bot_token: Option<Secret>,
    pub api_url: String,
    pub mode: TelegramMode,
    /// Checked against `X-Telegram-Bot-Api-Secret-Token` in webhook mode.
    pub webhook_secret: Option<Secret>,
    pub dm_policy: DmPolicy,
    pub allow_from: Vec<String>,
    pub group_policy: GroupPolicy,
    /// Allowlisted groups by chat id (e.g. `"-1001234567890"`).
    pub groups: BTreeMap<String, GroupConfig>,
    pub require_mention: bool,
    /// Answer messages from other bots too. Off by default, so two bots cannot talk to each
    /// other forever.
    pub allow_bots: bool,
    /// Regular expressions (case-insensitive) that count as addressing the bot in a group,
    /// besides a native mention or a reply to the bot: e.g. `"^(hey )?ferry\\b"`.
    pub mention_patterns: Vec<String>,
    /// Group messages kept, per group, while the bot waits to be mentioned; they are shown
    /// to the model with the next message that mentions it.
    pub history_limit: usize,
    pub streaming: StreamingMode,
    pub text_chunk_limit: usize,
    /// Tools this channel's chats may use besides, or may not use of, `[tools]`'s.
    pub tools: ToolLists,
}

impl Default for TelegramConfig {
    fn default() -> Self {
        Self {
            enabled: false,
            accounts: IndexMap::new(),
            bot_token: None,
            api_url: "https://api.telegram.org".to_owned(),
            mode: TelegramMode::Polling,
            webhook_secret: None,
            dm_policy: DmPolicy::Pairing,
            allow_from: Vec::new(),
            group_policy: GroupPolicy::Allowlist,
            groups: BTreeMap::new(),
            require_mention: true,
            allow_bots: false,
            mention_patterns: Vec::new(),
            history_limit: DEFAULT_HISTORY_LIMIT,
            streaming: StreamingMode::Partial,
            text_chunk_limit: 4000,
            tools: ToolLists::default(),
        }
    }
}

/// An allowlisted Discord guild.
#[derive(Debug, Clone, Default, PartialEq, Deserialize, Serialize)]
#[serde(default, deny_unknown_fields)]
pub struct GuildConfig {
    /// Channel ids the bot answers in; empty means every channel of the guild.
    pub channels: Vec<String>,
    pub require_mention: Option<bool>,
    /// Tools the guild's channels may use besides, or may not use of, the channel's.
    pub tools: ToolLists,
}

#[derive(Debug, Clone, PartialEq, Deserialize, Serialize)]
#[serde(default, deny_unknown_fields)]
pub struct DiscordConfig {
    pub enabled: bool,
    /// More bots of this platform by account id (`[channels.discord.accounts.<id>]`), each
    /// starting from this table's settings (its credentials only for account `default`).
    /// Empty: this table is the one account, `default`.
    #[serde(skip_serializing_if = "IndexMap::is_empty")]
    pub accounts: IndexMap<String, DiscordConfig>,
    /// `DISCORD_BOT_TOKEN` is used when unset.
    pub bot_token: Option<Secret>,
    pub api_url: String,
    /// Overrides the gateway URL Discord hands out (for tests against a local fake).
    pub gateway_url: Option<String>,
    pub dm_policy: DmPolicy,
    pub allow_from: Vec<String>,
    pub group_policy: GroupPolicy,
    /// Allowlisted guilds by id.
    pub guilds: BTreeMap<String, GuildConfig>,
    pub require_mention: bool,
    /// Answer messages from other bots too. Off by default, so two bots cannot talk to each
    /// other forever.
    pub allow_bots: bool,
    /// Regular expressions (case-insensitive) that count as addressing the bot in a group,
    /// besides a native mention or a reply to the bot: e.g. `"^(hey )?ferry\\b"`.
    pub mention_patterns: Vec<String>,
    /// Group messages kept, per group, while the bot waits to be mentioned; they are shown
    /// to the model with the next message that mentions it.
    pub history_limit: usize,
    pub streaming: StreamingMode,
    pub text_chunk_limit: usize,
    pub max_lines_per_message: usize,
    /// Tools this channel's chats may use besides, or may not use of, `[tools]`'s.
    pub tools: ToolLists,
}

impl Default for DiscordConfig {
    fn default() -> Self {
        Self {
            enabled: false,
            accounts: IndexMap::new(),
            bot_token: None,
            api_url: "https://discord.com".to_owned(),
            gateway_url: None,
            dm_policy: DmPolicy::Pairing,
            allow_from: Vec::new(),
            group_policy: GroupPolicy::Allowlist,
            guilds: BTreeMap::new(),
            require_mention: true,
            allow_bots: false,
            mention_patterns: Vec::new(),
            history_limit: DEFAULT_HISTORY_LIMIT,
            streaming: StreamingMode::Off,
            text_chunk_limit: 2000,
            max_lines_per_message: 17,
            tools: ToolLists::default(),
        }
    }
}

/// How the Slack app receives events.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Deserialize, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum SlackMode {
    /// Socket Mode over a WebSocket; needs `app_token`.
    #[default]
    Socket,
    /// Events API POSTs to `/slack/events`; needs `signing_secret`.
    Http,
}

#[derive(Debug, Clone, PartialEq, Deserialize, Serialize)]
#[serde(default, deny_unknown_fields)]
pub struct SlackConfig {
    pub enabled: bool,
    /// More bots of this platform by account id (`[channels.slack.accounts.<id>]`), each
    /// starting from this table's settings (its credentials only for account `default`).
    /// Empty: this table is the one account, `default`.
    #[serde(skip_serializing_if = "IndexMap::is_empty")]
    pub accounts: IndexMap<String, SlackConfig>,
    /// `xoxb-…`; `SLACK_BOT_TOKEN` is used when unset.
    pub bot_token: Option<Secret>,
    /// `xapp-…` for Socket Mode; `SLACK_APP_TOKEN` is used when unset.
    pub app_token: Option<Secret>,
    /// Verifies Events API requests in HTTP mode; `SLACK_SIGNING_SECRET` when unset.
    pub signing_secret: Option<Secret>,
    pub mode: SlackMode,
    pub api_url: String,
    pub dm_policy: DmPolicy,
    pub allow_from: Vec<String>,
    pub group_policy: GroupPolicy,
    /// Allowlisted channels by id (e.g. `C0123ABCD`).
    pub channels: BTreeMap<String, GroupConfig>,
    pub require_mention: bool,
    /// Answer messages from other bots too. Off by default, so two bots cannot talk to each
    /// other forever.
    pub allow_bots: bool,
    /// Regular expressions (case-insensitive) that count as addressing the bot in a group,
    /// besides a native mention or a reply to the bot: e.g. `"^(hey )?ferry\\b"`.
    pub mention_patterns: Vec<String>,
    /// Group messages kept, per group, while the bot waits to be mentioned; they are shown
    /// to the model with the next message that mentions it.
    pub history_limit: usize,
    pub streaming: StreamingMode,
    pub text_chunk_limit: usize,
    /// Tools this channel's chats may use besides, or may not use of, `[tools]`'s.
    pub tools: ToolLists,
}

impl Default for SlackConfig {
    fn default() -> Self {
        Self {
            enabled: false,
            accounts: IndexMap::new(),
            bot_token: None,
            app_token: None,
            signing_secret: None,
            mode: SlackMode::Socket,
            api_url: "https://slack.com/api".to_owned(),
            dm_policy: DmPolicy::Pairing,
            allow_from: Vec::new(),
            group_policy: GroupPolicy::Allowlist,
            channels: BTreeMap::new(),
            require_mention: true,
            allow_bots: false,
            mention_patterns: Vec::new(),
            history_limit: DEFAULT_HISTORY_LIMIT,
            streaming: StreamingMode::Partial,
            text_chunk_limit: 4000,
            tools: ToolLists::default(),
        }
    }
}

/// The chat page the gateway serves at `/`.
#[derive(Debug, Clone, PartialEq, Deserialize, Serialize)]
#[serde(default, deny_unknown_fields)]
pub struct WebchatConfig {
    pub enabled: bool,
    /// Tools web chat sessions may use besides, or may not use of, `[tools]`'s.
    pub tools: ToolLists,
}

impl Default for WebchatConfig {
    fn default() -> Self {
        Self { enabled: true, tools: ToolLists::default() }
    }
}
