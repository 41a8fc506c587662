//! Drives the fake Discord over real HTTP and a real WebSocket, frame by frame, to check the
//! wire format and the rules. (That serenity accepts every answer is proven by the Discord
//! adapter's own tests, which run serenity against this fake.)

mod faults;
mod gateway;
mod media;
mod rest;

use std::future::Future;
use std::time::Duration;

use ferry_fakes::FakeDiscord;
use serde_json::Value;

pub const TOKEN: &str = "fake.discord.token";

/// Generous bound for things that should happen at once, so a bug fails instead of hanging.
pub async fn soon<T>(future: impl Future<Output = T>) -> T {
    tokio::time::timeout(Duration::from_secs(10), future).await.expect("timed out")
}

/// A fake with the per-channel limit off, for tests that do not study it.
pub async fn fake() -> FakeDiscord {
    FakeDiscord::start(TOKEN).await.unwrap().without_rate_limits()
}

/// One REST call with the bot token; returns the status, the body and the response headers.
pub async fn call(
    discord: &FakeDiscord,
    method: reqwest::Method,
    path: &str,
    body: Option<Value>,
    token: &str,
) -> (u16, Value, reqwest::header::HeaderMap) {
    let mut request = reqwest::Client::new()
        .request(method, format!("{}/api/v10{path}", discord.url()))
        .header("Authorization", format!("Bot {token}"));
    if let Some(body) = body {
        request = request.json(&body);
    }
    let response = request.send().await.unwrap();
    let status = response.status().as_u16();
    let headers = response.headers().clone();
    let text = response.text().await.unwrap();
    (status, serde_json::from_str(&text).unwrap_or(Value::Null), headers)
}
