//! Webhook mode: the `/telegram-webhook` route checks the secret and answers Telegram only
//! after the core decided, so an unrecorded update is delivered again.

use std::time::Duration;

use ferry_channel::{Channel, ChatKind, ChatRef};
use ferry_fakes::FakeTelegram;
use ferry_telegram::{SECRET_HEADER, TelegramChannel, TelegramConfig, TelegramMode, WEBHOOK_PATH};
use futures::StreamExt;
use serde_json::json;

const SECRET: &str = "hook-secret";
const PATIENCE: Duration = Duration::from_secs(15);

/// A channel in webhook mode with its router served on a loopback port; returns the URL.
async fn serve() -> (FakeTelegram, TelegramChannel, String) {
    let telegram = FakeTelegram::start("123456:TEST-TOKEN").await.expect("fake Telegram").without_rate_limits();
    let mut config = TelegramConfig::new(telegram.token());
    config.api_url = telegram.url();
    config.mode = TelegramMode::Webhook { secret: SECRET.to_owned() };
    let channel = TelegramChannel::connect(config).await.expect("connect");
    let router = channel.webhook_router().expect("webhook mode has a router");
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("http://{}{WEBHOOK_PATH}", listener.local_addr().unwrap());
    tokio::spawn(async move { axum::serve(listener, router).await });
    (telegram, channel, url)
}

fn update(update_id: u32, text: &str) -> serde_json::Value {
    json!({"update_id": update_id, "message": {
        "message_id": update_id, "date": 1_700_000_000, "text": text,
        "chat": {"id": 42, "type": "private", "first_name": "Ada"},
        "from": {"id": 42, "is_bot": false, "first_name": "Ada"}}})
}

#[tokio::test]
async fn polling_mode_has_no_webhook_router() {
    let telegram = FakeTelegram::start("123456:TEST-TOKEN").await.unwrap();
    let mut config = TelegramConfig::new(telegram.token());
    config.api_url = telegram.url();
    assert!(TelegramChannel::connect(config).await.unwrap().webhook_router().is_none());
}

#[tokio::test]
async fn a_request_without_the_secret_token_is_refused() {
    let (_telegram, _channel, url) = serve().await;
    let client = reqwest::Client::new();
    let missing = client.post(&url).json(&update(1, "hi")).send().await.unwrap();
    assert_eq!(missing.status(), 401);
    let wrong = client.post(&url).header(SECRET_HEADER, "guess").json(&update(1, "hi")).send().await.unwrap();
    assert_eq!(wrong.status(), 401);
}

#[tokio::test]
async fn an_update_is_answered_200_only_once_the_core_accepted_it() {
    let (_telegram, channel, url) = serve().await;
    let mut inbound = channel.start().await.unwrap();
    let client = reqwest::Client::new();
    let post = tokio::spawn(client.post(&url).header(SECRET_HEADER, SECRET).json(&update(7, "hello")).send());

    let delivery = tokio::time::timeout(PATIENCE, inbound.next()).await.expect("delivered").unwrap();
    assert_eq!(delivery.message.chat, ChatRef::new(ChatKind::Direct, "42"));
    assert_eq!(delivery.message.text, "hello");
    assert!(!post.is_finished(), "Telegram must not get its 200 before the core decided");
    delivery.ack.accept();
    let response = tokio::time::timeout(PATIENCE, post).await.expect("answered").unwrap().unwrap();
    assert_eq!(response.status(), 200);
}

#[tokio::test]
async fn an_abandoned_update_is_answered_with_an_error_so_telegram_retries() {
    let (_telegram, channel, url) = serve().await;
    let mut inbound = channel.start().await.unwrap();
    let client = reqwest::Client::new();
    let post = tokio::spawn(client.post(&url).header(SECRET_HEADER, SECRET).json(&update(8, "hello")).send());
    let delivery = tokio::time::timeout(PATIENCE, inbound.next()).await.expect("delivered").unwrap();
    drop(delivery);
    let response = tokio::time::timeout(PATIENCE, post).await.expect("answered").unwrap().unwrap();
    assert_eq!(response.status(), 503);
}

#[tokio::test]
async fn skipped_updates_are_acknowledged_at_once() {
    let (_telegram, _channel, url) = serve().await;
    let edited = json!({"update_id": 9, "edited_message": update(9, "x")["message"].clone()});
    let response = reqwest::Client::new().post(&url).header(SECRET_HEADER, SECRET).json(&edited).send().await.unwrap();
    assert_eq!(response.status(), 200);
}

#[tokio::test]
async fn a_body_over_two_megabytes_is_refused_without_being_read_whole() {
    let (_telegram, channel, url) = serve().await;
    let mut inbound = channel.start().await.unwrap();
    let client = reqwest::Client::new();
    let mut huge = update(8, "x");
    huge["message"]["text"] = serde_json::Value::String("x".repeat(3 << 20));
    let refused = client.post(&url).header(SECRET_HEADER, SECRET).json(&huge).send().await.unwrap();
    assert_eq!(refused.status(), 413, "payload too large");
    let ok = client.post(&url).header(SECRET_HEADER, SECRET).json(&update(9, "small")).send();
    let ok = tokio::spawn(ok);
    let delivery = tokio::time::timeout(PATIENCE, inbound.next()).await.expect("delivered").unwrap();
    assert_eq!(delivery.message.text, "small", "the oversized update never reached the core");
    delivery.ack.accept();
    assert_eq!(ok.await.unwrap().unwrap().status(), 200);
}

#[tokio::test]
async fn an_update_whose_entities_lie_outside_its_text_is_delivered_and_answered_200() {
    let (_telegram, channel, url) = serve().await;
    let mut inbound = channel.start().await.unwrap();
    let client = reqwest::Client::new();
    let mut broken = update(10, "hi @ferry");
    broken["message"]["entities"] = json!([{"type": "mention", "offset": 500, "length": 12}]);
    let post = tokio::spawn(client.post(&url).header(SECRET_HEADER, SECRET).json(&broken).send());
    let delivery = tokio::time::timeout(PATIENCE, inbound.next()).await.expect("delivered").unwrap();
    assert_eq!(delivery.message.text, "hi @ferry");
    delivery.ack.accept();
    let response = tokio::time::timeout(PATIENCE, post).await.expect("answered").unwrap().unwrap();
    assert_eq!(response.status(), 200, "answered, not a connection closed without a response");
}
