//! Setup the Discord adapter's integration tests share: a channel connected to the fake.

use std::time::Duration;

use ferry_channel::{Channel, InboundStream};
use ferry_discord::{DiscordChannel, DiscordConfig};
use ferry_fakes::FakeDiscord;

/// Generous bound for waiting on explicit signals; never a measurement.
pub const PATIENCE: Duration = Duration::from_secs(30);
pub const TOKEN: &str = "fake.discord.token";

/// The adapter's config, pointed at `discord`.
pub fn config(discord: &FakeDiscord) -> DiscordConfig {
    let mut config = DiscordConfig::new(TOKEN);
    config.api_url = discord.url();
    config
}

/// A channel started against `discord`, once its gateway session is live.
pub async fn started(discord: &FakeDiscord) -> (DiscordChannel, InboundStream) {
    let channel = DiscordChannel::connect(config(discord)).await.expect("connect");
    let inbound = channel.start().await.expect("start");
    tokio::time::timeout(PATIENCE, discord.wait_for_session()).await.expect("the gateway session is live");
    (channel, inbound)
}
