//! What the core's wiring hands the adapter: credentials, endpoints and which account.

use std::fmt;
use std::sync::Arc;

use ferry_channel::IngressCursor;

/// Discord's public API host, the default of `channels.discord.api_url`. Serenity builds every
/// REST URL from it; any other value is used as a proxy prefix (tests point it at a fake).
pub const DEFAULT_API_URL: &str = "https://discord.com";

/// One Discord bot account, as configured under `[channels.discord]`.
#[derive(Clone)]
pub struct DiscordConfig {
    /// The bot token from the developer portal. Never logged (see the `Debug` impl).
    pub token: String,
    /// The REST base URL (`channels.discord.api_url`); tests point it at a fake.
    pub api_url: String,
    /// Overrides the gateway URL that `GET /api/v10/gateway` hands out
    /// (`channels.discord.gateway_url`).
    pub gateway_url: Option<String>,
    /// Which account of the channel this is; `default` when only one is configured.
    pub account_id: String,
    /// Pass group-DM messages to the core (as `group` chats). Off by default: bots are rarely
    /// in group DMs, and a group DM has no guild allowlist to gate it.
    pub group_dms: bool,
    /// Where the last message seen per channel is kept across restarts, for catching up
    /// after a reconnect (`catch_up.rs`) when the channel is started without a lease (one
    /// machine: a file in the state directory). Under a lease the lease's cursor is used
    /// instead. `None`: kept in memory, so only reconnects within the process catch up.
    pub positions: Option<Arc<dyn IngressCursor>>,
}

impl DiscordConfig {
    /// A bot on the public Discord API, account `default`.
    pub fn new(token: impl Into<String>) -> Self {
        Self {
            token: token.into(),
            api_url: DEFAULT_API_URL.to_owned(),
            gateway_url: None,
            account_id: "default".to_owned(),
            group_dms: false,
            positions: None,
        }
    }

    /// The serenity proxy prefix for a non-default `api_url`, or `None` for Discord itself.
    pub(crate) fn proxy(&self) -> Option<String> {
        let url = self.api_url.trim_end_matches('/');
        (url != DEFAULT_API_URL).then(|| url.to_owned())
    }
}

impl fmt::Debug for DiscordConfig {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("DiscordConfig")
            .field("token", &"<redacted>")
            .field("api_url", &self.api_url)
            .field("gateway_url", &self.gateway_url)
            .field("account_id", &self.account_id)
            .field("group_dms", &self.group_dms)
            .field("positions", &self.positions.is_some())
            .finish()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn debug_output_never_shows_the_token() {
        let shown = format!("{:?}", DiscordConfig::new("MTIz.SECRET.token"));
        assert!(!shown.contains("SECRET"), "{shown}");
    }

    #[test]
    fn only_a_non_default_api_url_is_a_proxy() {
        let mut config = DiscordConfig::new("t");
        assert_eq!(config.proxy(), None);
        config.api_url = "http://127.0.0.1:9/".to_owned();
        assert_eq!(config.proxy().as_deref(), Some("http://127.0.0.1:9"));
    }
}
