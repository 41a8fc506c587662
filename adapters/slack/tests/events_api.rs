//! The Slack adapter in HTTP mode: the `/slack/events` route, served here on a fake server as
//! the gateway serves it, driven by the fake Slack's signing Events API client.

use std::future::Future;
use std::time::Duration;

use ferry_channel::{Channel, InboundStream};
use ferry_fakes::{FakeServer, FakeSlack, SlackEventsClient};
use ferry_slack::{EVENTS_PATH, SlackChannel, SlackConfig};
use futures::StreamExt;

async fn soon<T>(future: impl Future<Output = T>) -> T {
    tokio::time::timeout(Duration::from_secs(30), future).await.expect("timed out")
}

struct Http {
    slack: FakeSlack,
    _channel: SlackChannel,
    inbound: InboundStream,
    client: SlackEventsClient,
    _server: FakeServer,
}

async fn http() -> Http {
    let slack = FakeSlack::start().await.unwrap();
    let mut config = SlackConfig::http(FakeSlack::BOT_TOKEN, FakeSlack::SIGNING_SECRET);
    config.api_url = slack.api_url();
    let channel = SlackChannel::connect(config).await.unwrap();
    let server = FakeServer::start(channel.events_router().expect("HTTP mode serves a route")).await.unwrap();
    let inbound = channel.start().await.unwrap();
    let client = SlackEventsClient::new(format!("{}{EVENTS_PATH}", server.url()), FakeSlack::SIGNING_SECRET);
    Http { slack, _channel: channel, inbound, client, _server: server }
}

/// Accepts every delivery as the core would, counting them.
fn accept_all(inbound: InboundStream) -> tokio::sync::watch::Receiver<Vec<String>> {
    let (tx, rx) = tokio::sync::watch::channel(Vec::new());
    tokio::spawn(async move {
        let mut inbound = inbound;
        while let Some(delivery) = inbound.next().await {
            tx.send_modify(|seen| seen.push(delivery.message.text.clone()));
            delivery.ack.accept();
        }
    });
    rx
}

#[tokio::test]
async fn url_verification_is_answered_with_the_challenge() {
    let http = http().await;
    let response = http.client.url_verification("3eZbrw1aBm2rZgRNFdxV2595E9CY3gmdALWMmHkvFXO7tYXAYM8P").await;
    assert_eq!(response.status, 200);
    let body: serde_json::Value = serde_json::from_str(&response.body).unwrap();
    assert_eq!(body["challenge"], "3eZbrw1aBm2rZgRNFdxV2595E9CY3gmdALWMmHkvFXO7tYXAYM8P");
}

#[tokio::test]
async fn a_bad_signature_or_a_six_minute_old_timestamp_is_refused_and_never_reaches_the_core() {
    let http = http().await;
    let seen = accept_all(http.inbound);
    let event = http.slack.event(FakeSlack::message_body("DU1", "im", "U1", "forged", None));
    assert_eq!(http.client.deliver_badly_signed(&event.payload).await.status, 401);
    assert_eq!(http.client.deliver_stale(&event.payload, 6 * 60).await.status, 401);
    // A genuine one afterwards is the first and only thing the core sees.
    let genuine = http.slack.event(FakeSlack::message_body("DU1", "im", "U1", "genuine", None));
    assert_eq!(http.client.deliver(&genuine.payload).await.status, 200);
    assert_eq!(*seen.borrow(), ["genuine"]);
}

#[tokio::test]
async fn the_answer_waits_for_the_core_and_a_retry_of_an_accepted_event_is_answered_once() {
    let mut http = http().await;
    let event = http.slack.event(FakeSlack::message_body("C1", "channel", "U1", "hello", None));
    let client = http.client.clone();
    let payload = event.payload.clone();
    let request = tokio::spawn(async move { client.deliver(&payload).await });
    let delivery = soon(http.inbound.next()).await.unwrap();
    assert!(!request.is_finished(), "no answer before the core decided");
    delivery.ack.accept();
    assert_eq!(soon(request).await.unwrap().status, 200);
    // Slack retries (it did not see the answer in time): 200 again, nothing new for the core.
    assert_eq!(http.client.redeliver(&event.payload, 1).await.status, 200);
    let next = http.slack.event(FakeSlack::message_body("C1", "channel", "U1", "next", None));
    let client = http.client.clone();
    let request = tokio::spawn(async move { client.deliver(&next.payload).await });
    let delivery = soon(http.inbound.next()).await.unwrap();
    assert_eq!(delivery.message.text, "next", "the retry never reached the core");
    delivery.ack.accept();
    assert_eq!(soon(request).await.unwrap().status, 200);
}

#[tokio::test]
async fn an_event_the_core_abandons_is_answered_503_so_slack_retries_it() {
    let mut http = http().await;
    let event = http.slack.event(FakeSlack::message_body("C1", "channel", "U1", "again", None));
    let client = http.client.clone();
    let payload = event.payload.clone();
    let request = tokio::spawn(async move { client.deliver(&payload).await });
    drop(soon(http.inbound.next()).await.unwrap().ack);
    assert_eq!(soon(request).await.unwrap().status, 503);
    let client = http.client.clone();
    let payload = event.payload.clone();
    let retry = tokio::spawn(async move { client.redeliver(&payload, 1).await });
    let again = soon(http.inbound.next()).await.unwrap();
    assert_eq!(again.message.text, "again");
    again.ack.accept();
    assert_eq!(soon(retry).await.unwrap().status, 200);
}
