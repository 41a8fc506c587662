//! What the core's wiring hands the adapter: credentials, endpoint and how updates arrive.

use std::fmt;
use std::time::Duration;

/// Telegram's public Bot API endpoint, the default of `channels.telegram.api_url`.
pub const DEFAULT_API_URL: &str = "https://api.telegram.org";

/// How long one `getUpdates` call waits for an update before returning empty. Telegram
/// allows up to 50 s; 30 s keeps a stuck connection from going unnoticed for long.
pub const DEFAULT_POLL_TIMEOUT: Duration = Duration::from_secs(30);

/// One Telegram bot account, as configured under `[channels.telegram]`.
#[derive(Clone)]
pub struct TelegramConfig {
    /// The bot token from @BotFather. Never logged (see the `Debug` impl).
    pub token: String,
    /// The Bot API base URL (`channels.telegram.api_url`); tests point it at a fake.
    pub api_url: String,
    /// Which account of the channel this is; `default` when only one is configured.
    pub account_id: String,
    /// Whether updates are fetched by long polling or pushed to the gateway's webhook.
    pub mode: TelegramMode,
    /// The long-poll timeout of `getUpdates`. The HTTP client's own timeout is set above it.
    pub poll_timeout: Duration,
}

/// How updates reach the adapter (`channels.telegram.mode`).
#[derive(Clone, PartialEq, Eq)]
pub enum TelegramMode {
    /// The adapter long-polls `getUpdates` itself (the default).
    Polling,
    /// Telegram POSTs updates to the gateway's `/telegram-webhook`, mounted from
    /// [`TelegramChannel::webhook_router`](crate::TelegramChannel::webhook_router). Requests
    /// must carry `X-Telegram-Bot-Api-Secret-Token: <secret>`; the webhook itself is
    /// registered with Telegram (`setWebhook` with this `secret_token`) by the operator.
    Webhook { secret: String },
}

impl TelegramConfig {
    /// A polling bot on the public Bot API, account `default`.
    pub fn new(token: impl Into<String>) -> Self {
        Self {
            token: token.into(),
            api_url: DEFAULT_API_URL.to_owned(),
            account_id: "default".to_owned(),
            mode: TelegramMode::Polling,
            poll_timeout: DEFAULT_POLL_TIMEOUT,
        }
    }
}

impl fmt::Debug for TelegramConfig {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("TelegramConfig")
            .field("token", &"<redacted>")
            .field("api_url", &self.api_url)
            .field("account_id", &self.account_id)
            .field("mode", &self.mode)
            .field("poll_timeout", &self.poll_timeout)
            .finish()
    }
}

impl fmt::Debug for TelegramMode {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            TelegramMode::Polling => f.write_str("Polling"),
            TelegramMode::Webhook { .. } => f.write_str("Webhook { secret: <redacted> }"),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn debug_output_never_shows_the_token_or_the_webhook_secret() {
        let mut config = TelegramConfig::new("123:SECRET-TOKEN");
        config.mode = TelegramMode::Webhook { secret: "hook-secret".to_owned() };
        let shown = format!("{config:?}");
        assert!(!shown.contains("SECRET-TOKEN") && !shown.contains("hook-secret"), "{shown}");
    }
}
