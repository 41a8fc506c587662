use std::sync::{Arc, Mutex};

use axum::body::Bytes;
use axum::http::HeaderMap;
use axum::routing::post;
use ferry_fakes::{FakeServer, FakeSlack, SlackEventsClient};
use serde_json::json;

/// A request URL that records what it was sent and answers 200.
async fn recorder() -> (FakeServer, Arc<Mutex<Vec<(HeaderMap, String)>>>) {
    let seen = Arc::new(Mutex::new(Vec::new()));
    let record = seen.clone();
    let router = axum::Router::new().route(
        "/slack/events",
        post(move |headers: HeaderMap, body: Bytes| {
            let record = record.clone();
            async move {
                record.lock().unwrap().push((headers, String::from_utf8_lossy(&body).into_owned()));
                "ok"
            }
        }),
    );
    (FakeServer::start(router).await.unwrap(), seen)
}

fn header(headers: &HeaderMap, name: &str) -> String {
    headers.get(name).unwrap().to_str().unwrap().to_owned()
}

#[tokio::test]
async fn requests_are_signed_over_timestamp_and_body_and_retries_are_marked() {
    let slack = FakeSlack::start().await.unwrap();
    let (app, seen) = recorder().await;
    let client = SlackEventsClient::new(format!("{}/slack/events", app.url()), "secret");
    let event = slack.event(FakeSlack::message_body("C1", "channel", "U1", "hi", None));
    assert_eq!(client.deliver(&event.payload).await.status, 200);
    assert_eq!(client.redeliver(&event.payload, 1).await.status, 200);
    assert_eq!(client.deliver_stale(&event.payload, 360).await.status, 200);
    assert_eq!(client.deliver_badly_signed(&event.payload).await.status, 200);
    let seen = seen.lock().unwrap();
    let check = |index: usize| {
        let (headers, body) = &seen[index];
        let timestamp: u64 = header(headers, "x-slack-request-timestamp").parse().unwrap();
        (timestamp, header(headers, "x-slack-signature") == SlackEventsClient::sign("secret", timestamp, body))
    };
    let now = SlackEventsClient::now();
    let (first, signed) = check(0);
    assert!(signed && now.abs_diff(first) < 60);
    assert_eq!(header(&seen[1].0, "x-slack-retry-num"), "1");
    let (stale, signed) = check(2);
    assert!(signed && now - stale >= 360);
    assert!(!check(3).1, "signed with another secret");
    assert_eq!(seen[0].1, event.payload.to_string());
}

#[tokio::test]
async fn url_verification_sends_the_challenge() {
    let (app, seen) = recorder().await;
    let client = SlackEventsClient::new(format!("{}/slack/events", app.url()), "secret");
    client.url_verification("c-123").await;
    let body: serde_json::Value = serde_json::from_str(&seen.lock().unwrap()[0].1).unwrap();
    assert_eq!((body["type"].clone(), body["challenge"].clone()), (json!("url_verification"), json!("c-123")));
}
