//! Setup the Slack adapter's integration tests share: bounded waits and a channel started
//! in Socket Mode against the fake.

use std::future::Future;
use std::time::Duration;

use ferry_channel::{Channel, InboundStream};
use ferry_fakes::FakeSlack;
use ferry_slack::{SlackChannel, SlackConfig};

/// Generous bound for things that should happen promptly, so a bug fails instead of hanging.
pub async fn soon<T>(future: impl Future<Output = T>) -> T {
    tokio::time::timeout(Duration::from_secs(30), future).await.expect("timed out")
}

/// A channel started in Socket Mode against `slack`.
pub async fn started(slack: &FakeSlack) -> (SlackChannel, InboundStream) {
    let mut config = SlackConfig::socket(FakeSlack::BOT_TOKEN, FakeSlack::APP_TOKEN);
    config.api_url = slack.api_url();
    let channel = SlackChannel::connect(config).await.expect("connect");
    let inbound = channel.start().await.expect("start");
    (channel, inbound)
}
