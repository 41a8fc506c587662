//! What the core's wiring hands the adapter: tokens, endpoint, how events arrive, and how
//! replies thread.

use std::fmt;
use std::sync::Arc;

use ferry_channel::IngressCursor;

/// Slack's public Web API endpoint, the default of `channels.slack.api_url`.
pub const DEFAULT_API_URL: &str = "https://slack.com/api";

/// One Slack app installation, as configured under `[channels.slack]`.
#[derive(Clone)]
pub struct SlackConfig {
    /// The bot token (`xoxb-…`): every Web API call. Never logged (see the `Debug` impl).
    pub bot_token: String,
    /// The Web API base URL (`channels.slack.api_url`); tests point it at a fake. Plain
    /// `http` is accepted only for a loopback host.
    pub api_url: String,
    /// Which account of the channel this is; `default` when only one is configured.
    pub account_id: String,
    /// Whether events arrive over Socket Mode or as Events API requests.
    pub mode: SlackMode,
    /// Which reply messages start or join a thread under the message they answer
    /// (`messages.reply_to_mode`). A message that arrived in a thread is always answered in
    /// that thread, whatever this says.
    pub reply_to_mode: ReplyToMode,
    /// Where the last message seen per conversation is kept across restarts, for catching up
    /// on history after each Socket Mode (re)connect (`catch_up.rs`): a file in the state
    /// directory. Every replica runs its own socket (Slack's Socket Mode is not a singleton),
    /// so each keeps its own. `None`: kept in memory, so only reconnects within the process
    /// catch up. Not used in HTTP mode, where Slack retries what it could not deliver.
    pub positions: Option<Arc<dyn IngressCursor>>,
}

/// How events reach the adapter (`channels.slack.mode`).
#[derive(Clone, PartialEq, Eq)]
pub enum SlackMode {
    /// Socket Mode (the default): the adapter opens a WebSocket with the app-level token
    /// (`xapp-…`) from `apps.connections.open`; nothing needs to be reachable from outside.
    Socket { app_token: String },
    /// The Events API: Slack POSTs events to the gateway's `/slack/events`, mounted from
    /// [`SlackChannel::events_router`](crate::SlackChannel::events_router), signed with the
    /// app's signing secret.
    Http { signing_secret: String },
}

/// Threading of replies to top-level messages (SPEC §7 `reply_to_mode`). Slack ignores the
/// model's `[[reply_to_current]]` tag: with `Off` a top-level message gets a top-level reply.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum ReplyToMode {
    /// Top-level messages get top-level replies.
    #[default]
    Off,
    /// The first message of a reply opens a thread under the message answered.
    First,
    /// Every message of a reply goes to a thread under the message answered.
    All,
}

impl SlackConfig {
    /// A Socket Mode app on the public Web API, account `default`, replies not threaded.
    pub fn socket(bot_token: impl Into<String>, app_token: impl Into<String>) -> Self {
        Self::with_mode(bot_token, SlackMode::Socket { app_token: app_token.into() })
    }

    /// An Events API app on the public Web API, account `default`, replies not threaded.
    pub fn http(bot_token: impl Into<String>, signing_secret: impl Into<String>) -> Self {
        Self::with_mode(bot_token, SlackMode::Http { signing_secret: signing_secret.into() })
    }

    fn with_mode(bot_token: impl Into<String>, mode: SlackMode) -> Self {
        Self {
            bot_token: bot_token.into(),
            api_url: DEFAULT_API_URL.to_owned(),
            account_id: "default".to_owned(),
            mode,
            reply_to_mode: ReplyToMode::Off,
            positions: None,
        }
    }
}

impl fmt::Debug for SlackConfig {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("SlackConfig")
            .field("bot_token", &"<redacted>")
            .field("api_url", &self.api_url)
            .field("account_id", &self.account_id)
            .field("mode", &self.mode)
            .field("reply_to_mode", &self.reply_to_mode)
            .field("positions", &self.positions.is_some())
            .finish()
    }
}

impl fmt::Debug for SlackMode {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            SlackMode::Socket { .. } => f.write_str("Socket { app_token: <redacted> }"),
            SlackMode::Http { .. } => f.write_str("Http { signing_secret: <redacted> }"),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn debug_output_never_shows_tokens_or_the_signing_secret() {
        let shown =
            format!("{:?} {:?}", SlackConfig::socket("xoxb-BOT", "xapp-APP"), SlackConfig::http("xoxb-B", "SIGN"));
        for secret in ["xoxb-BOT", "xapp-APP", "SIGN"] {
            assert!(!shown.contains(secret), "{shown}");
        }
    }
}
