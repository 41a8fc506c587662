use ferry_fakes::{FakeSlack, SLACK_BOT_USER_ID};
use futures::{SinkExt, StreamExt};
use serde_json::{Value, json};
use slack_morphism::events::{SlackEventCallbackBody, SlackPushEventCallback};
use tokio_tungstenite::tungstenite::Message;

use crate::{call_with, soon};

type Socket = tokio_tungstenite::WebSocketStream<tokio_tungstenite::MaybeTlsStream<tokio::net::TcpStream>>;

/// Opens a Socket Mode connection the way a client does, and reads `hello`.
async fn connect(slack: &FakeSlack) -> Socket {
    let (_, _, opened) = call_with(slack, FakeSlack::APP_TOKEN, "apps.connections.open", json!({})).await;
    let url = opened["url"].as_str().unwrap().to_owned();
    assert!(url.starts_with("ws://"), "{url}");
    let (mut socket, _) = tokio_tungstenite::connect_async(url).await.unwrap();
    assert_eq!(next(&mut socket).await["type"], "hello");
    socket
}

async fn next(socket: &mut Socket) -> Value {
    loop {
        match soon(socket.next()).await {
            Some(Ok(Message::Text(text))) => return serde_json::from_str(text.as_str()).unwrap(),
            Some(Ok(Message::Close(_))) | None => return Value::Null,
            Some(Ok(_)) => {}
            Some(Err(error)) => panic!("socket error: {error}"),
        }
    }
}

async fn ack(socket: &mut Socket, envelope: &Value) {
    let frame = json!({"envelope_id": envelope["envelope_id"]}).to_string();
    socket.send(Message::Text(frame.into())).await.unwrap();
}

#[tokio::test]
async fn the_app_token_opens_a_socket_and_the_bot_token_does_not() {
    let slack = FakeSlack::start().await.unwrap();
    let (_, _, refused) = call_with(&slack, FakeSlack::BOT_TOKEN, "apps.connections.open", json!({})).await;
    assert_eq!(refused["error"], "not_allowed_token_type");
    let _socket = connect(&slack).await;
    soon(slack.wait_for_connections(1)).await;
}

#[tokio::test]
async fn events_arrive_in_envelopes_that_slack_morphism_parses() {
    let slack = FakeSlack::start().await.unwrap();
    let mut socket = connect(&slack).await;
    let event = slack.thread_reply("C1", "1700000000.000001", "U1", "in the thread");
    let envelope = next(&mut socket).await;
    assert_eq!((envelope["type"].as_str(), envelope["retry_attempt"].as_u64()), (Some("events_api"), Some(0)));
    let callback: SlackPushEventCallback = serde_json::from_value(envelope["payload"].clone()).unwrap();
    assert_eq!(callback.event_id.0, event.event_id);
    let SlackEventCallbackBody::Message(message) = callback.event else { panic!("a message event") };
    assert_eq!(message.origin.thread_ts.unwrap().0, "1700000000.000001");
    assert_eq!(message.origin.ts.0, event.ts);
    assert_eq!(slack.unacked(), 1);
    ack(&mut socket, &envelope).await;
    soon(slack.wait_for_ack(&event.event_id)).await;
    soon(slack.wait_for_all_acked()).await;
}

#[tokio::test]
async fn a_mention_comes_as_a_message_and_an_app_mention_of_one_ts() {
    let slack = FakeSlack::start().await.unwrap();
    let mut socket = connect(&slack).await;
    let (message, mention) = slack.mention("C1", "U1", "hello");
    assert_ne!(message.event_id, mention.event_id);
    let first = next(&mut socket).await;
    let second = next(&mut socket).await;
    assert_eq!(first["payload"]["event"]["type"], "message");
    assert_eq!(second["payload"]["event"]["type"], "app_mention");
    assert_eq!(first["payload"]["event"]["ts"], second["payload"]["event"]["ts"]);
    let text = second["payload"]["event"]["text"].as_str().unwrap();
    assert!(text.starts_with(&format!("<@{SLACK_BOT_USER_ID}>")), "{text}");
}

#[tokio::test]
async fn an_unacknowledged_envelope_is_redelivered_on_the_next_connection_only() {
    let slack = FakeSlack::start().await.unwrap();
    let mut first = connect(&slack).await;
    let event = slack.dm("U1", "hello");
    let envelope = next(&mut first).await;
    assert_eq!(envelope["payload"]["event_id"], event.event_id.as_str());
    // Not acknowledged; the connection goes away.
    drop(first);
    let mut second = connect(&slack).await;
    let again = next(&mut second).await;
    assert_eq!(
        (again["payload"]["event_id"].as_str(), again["retry_attempt"].as_u64()),
        (Some(event.event_id.as_str()), Some(1))
    );
    ack(&mut second, &again).await;
    soon(slack.wait_for_ack(&event.event_id)).await;
    let later = slack.dm("U1", "after the ack");
    assert_eq!(
        next(&mut second).await["payload"]["event_id"],
        later.event_id.as_str(),
        "the acked one is not sent again"
    );
    assert_eq!(slack.deliveries(&event.event_id), 2);
}

#[tokio::test]
async fn disconnect_asks_the_client_to_reconnect_and_lost_acks_leave_envelopes_unacked() {
    let slack = FakeSlack::start().await.unwrap();
    let mut socket = connect(&slack).await;
    slack.lose_next_acks(1);
    let event = slack.dm("U1", "hi");
    let envelope = next(&mut socket).await;
    ack(&mut socket, &envelope).await;
    soon(slack.wait_until(|s| s.lost_acks() == 1)).await;
    assert!(!slack.is_acked(&event.event_id));
    slack.disconnect("refresh_requested");
    let frame = next(&mut socket).await;
    assert_eq!((frame["type"].as_str(), frame["reason"].as_str()), (Some("disconnect"), Some("refresh_requested")));
    let mut fresh = connect(&slack).await;
    assert_eq!(next(&mut fresh).await["payload"]["event_id"], event.event_id.as_str());
}

#[tokio::test]
async fn closed_sockets_are_dropped_and_refused_until_they_open_again() {
    let slack = FakeSlack::start().await.unwrap();
    let mut socket = connect(&slack).await;
    soon(slack.wait_for_connections(1)).await;
    slack.close_sockets();
    assert!(matches!(soon(socket.next()).await, None | Some(Ok(Message::Close(_))) | Some(Err(_))), "dropped");
    soon(slack.wait_until(|slack| slack.connections().1 == 0)).await;
    let (_, _, opened) = call_with(&slack, FakeSlack::APP_TOKEN, "apps.connections.open", json!({})).await;
    let url = opened["url"].as_str().unwrap().to_owned();
    let refused = tokio_tungstenite::connect_async(url.clone()).await;
    assert!(refused.is_err(), "the upgrade is refused while closed");
    slack.open_sockets();
    let _socket = connect(&slack).await;
    soon(slack.wait_for_connections(2)).await;
}
