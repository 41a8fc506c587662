//! Drives the fake Slack over real HTTP and WebSocket: a plain client checks the Web API's
//! shapes and rules, a raw WebSocket client the Socket Mode protocol, and slack-morphism's own
//! types check that the adapter's SDK accepts every answer.

mod events_api;
mod files;
mod history;
mod socket_mode;
mod web_api;

use std::future::Future;
use std::time::Duration;

use ferry_fakes::FakeSlack;
use serde_json::Value;

/// Generous bound for things that should happen at once, so a bug fails instead of hanging.
pub async fn soon<T>(future: impl Future<Output = T>) -> T {
    tokio::time::timeout(Duration::from_secs(10), future).await.expect("timed out")
}

/// POSTs JSON to a method with `token` and returns the status, `Retry-After` and the answer.
pub async fn call_with(slack: &FakeSlack, token: &str, method: &str, params: Value) -> (u16, Option<String>, Value) {
    let url = format!("{}/{method}", slack.api_url());
    let response = reqwest::Client::new().post(url).bearer_auth(token).json(&params).send().await.unwrap();
    let status = response.status().as_u16();
    let retry_after = response.headers().get("retry-after").map(|v| v.to_str().unwrap().to_owned());
    (status, retry_after, response.json().await.unwrap())
}

/// [`call_with`] the bot token, without the status line.
pub async fn call(slack: &FakeSlack, method: &str, params: Value) -> Value {
    call_with(slack, FakeSlack::BOT_TOKEN, method, params).await.2
}
