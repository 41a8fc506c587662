//! Drives the fake Telegram Bot API over real HTTP: with a plain client to check the bytes and
//! the rules, and with teloxide's own types and `Bot` to check that the adapter's SDK accepts
//! every answer.

mod api;
mod faults;
mod files;
mod teloxide_compat;
mod updates;

use std::future::Future;
use std::time::Duration;

use ferry_fakes::FakeTelegram;
use serde_json::Value;

pub const TOKEN: &str = "123456:TEST-token";

/// Generous bound for things that should happen at once, so a bug fails instead of hanging.
pub async fn soon<T>(future: impl Future<Output = T>) -> T {
    tokio::time::timeout(Duration::from_secs(10), future).await.expect("timed out")
}

/// A fake with flood limits off, for tests that do not study them.
pub async fn fake() -> FakeTelegram {
    FakeTelegram::start(TOKEN).await.unwrap().without_rate_limits()
}

/// POSTs JSON to a method and returns the status and the parsed answer.
pub async fn call(telegram: &FakeTelegram, method: &str, params: Value) -> (u16, Value) {
    let url = format!("{}/bot{}/{method}", telegram.url(), telegram.token());
    let response = reqwest::Client::new().post(url).json(&params).send().await.unwrap();
    let status = response.status().as_u16();
    (status, response.json().await.unwrap())
}

/// The `result` of a successful call; panics with the answer otherwise.
pub async fn ok(telegram: &FakeTelegram, method: &str, params: Value) -> Value {
    let (status, body) = call(telegram, method, params).await;
    assert_eq!((status, &body["ok"]), (200, &Value::Bool(true)), "{method}: {body}");
    body["result"].clone()
}

/// The `description` of a failed call, after checking status and `error_code` agree.
pub async fn fails(telegram: &FakeTelegram, method: &str, params: Value, status: u16) -> String {
    let (got, body) = call(telegram, method, params).await;
    assert_eq!(got, status, "{method}: {body}");
    assert_eq!(body["ok"], false);
    assert_eq!(body["error_code"], status);
    body["description"].as_str().unwrap().to_owned()
}
