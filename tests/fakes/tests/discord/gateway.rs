//! The gateway side, driven with a plain WebSocket client: the handshake, heartbeats,
//! dispatches with sequence numbers, disconnects and resumes.

use ferry_fakes::{DiscordUser, FakeDiscord, Mention};
use futures::{SinkExt, StreamExt};
use serde_json::{Value, json};
use tokio_tungstenite::tungstenite::Message;

use crate::{TOKEN, fake, soon};

type Socket = tokio_tungstenite::WebSocketStream<tokio_tungstenite::MaybeTlsStream<tokio::net::TcpStream>>;

async fn open(discord: &FakeDiscord) -> Socket {
    let (socket, _) =
        tokio_tungstenite::connect_async(format!("{}?v=10&encoding=json", discord.gateway_url())).await.unwrap();
    socket
}

/// The next text frame as JSON; `None` when the connection closed (with the close code).
pub(crate) async fn frame(socket: &mut Socket) -> Result<Value, Option<u16>> {
    loop {
        match soon(socket.next()).await {
            Some(Ok(Message::Text(text))) => return Ok(serde_json::from_str(text.as_str()).unwrap()),
            Some(Ok(Message::Close(frame))) => return Err(frame.map(|f| u16::from(f.code))),
            Some(Ok(_)) => continue,
            Some(Err(_)) | None => return Err(None),
        }
    }
}

async fn send(socket: &mut Socket, payload: Value) {
    socket.send(Message::Text(payload.to_string().into())).await.unwrap();
}

/// Hello, Identify, READY; returns the socket and the session id.
pub(crate) async fn identified(discord: &FakeDiscord) -> (Socket, String) {
    let mut socket = open(discord).await;
    let hello = frame(&mut socket).await.unwrap();
    assert_eq!((hello["op"].as_u64(), hello["d"]["heartbeat_interval"].as_u64()), (Some(10), Some(3000)));
    send(&mut socket, json!({"op": 2, "d": {"token": format!("Bot {TOKEN}"), "intents": 37376, "properties": {}}}))
        .await;
    let ready = frame(&mut socket).await.unwrap();
    assert_eq!((ready["op"].as_u64(), ready["t"].as_str(), ready["s"].as_u64()), (Some(0), Some("READY"), Some(1)));
    assert_eq!(ready["d"]["resume_gateway_url"].as_str().unwrap(), discord.gateway_url());
    assert_eq!(ready["d"]["user"]["id"].as_str().unwrap(), discord.bot_id().to_string());
    (socket, ready["d"]["session_id"].as_str().unwrap().to_owned())
}

#[tokio::test]
async fn identify_gets_ready_then_message_creates_in_sequence_and_heartbeats_are_acked() {
    let discord = fake().await;
    // Injected before anyone connected: dispatched after READY.
    discord.dm(&DiscordUser::new(42, "ada"), "early");
    let (mut socket, _) = identified(&discord).await;
    let early = frame(&mut socket).await.unwrap();
    assert_eq!(
        (early["t"].as_str(), early["s"].as_u64(), early["d"]["content"].as_str()),
        (Some("MESSAGE_CREATE"), Some(2), Some("early"))
    );
    soon(discord.wait_for_session()).await;
    discord.guild_message(1, 10, &DiscordUser::new(42, "ada"), "hi", Mention::Nickname);
    let message = frame(&mut socket).await.unwrap();
    assert_eq!(message["s"].as_u64(), Some(3));
    assert_eq!(message["d"]["content"].as_str().unwrap(), format!("<@!{}> hi", discord.bot_id()));
    assert_eq!(message["d"]["guild_id"], "1");
    assert_eq!(message["d"]["mentions"][0]["id"].as_str().unwrap(), discord.bot_id().to_string());
    send(&mut socket, json!({"op": 1, "d": 3})).await;
    assert_eq!(frame(&mut socket).await.unwrap()["op"].as_u64(), Some(11));
    assert_eq!(discord.heartbeat_count(), 1);
}

#[tokio::test]
async fn a_wrong_token_is_closed_with_4004() {
    let discord = fake().await;
    let mut socket = open(&discord).await;
    frame(&mut socket).await.unwrap();
    send(&mut socket, json!({"op": 2, "d": {"token": "Bot wrong", "intents": 0, "properties": {}}})).await;
    assert_eq!(frame(&mut socket).await.unwrap_err(), Some(4004));
}

#[tokio::test]
async fn a_disconnect_closes_with_4000_and_a_resume_replays_what_was_missed_then_resumed() {
    let discord = fake().await;
    let (mut socket, session) = identified(&discord).await;
    let ada = DiscordUser::new(42, "ada");
    discord.dm(&ada, "seen");
    assert_eq!(frame(&mut socket).await.unwrap()["s"].as_u64(), Some(2));
    discord.disconnect();
    assert_eq!(frame(&mut socket).await.unwrap_err(), Some(4000));
    discord.dm(&ada, "missed");

    let mut socket = open(&discord).await;
    frame(&mut socket).await.unwrap();
    send(&mut socket, json!({"op": 6, "d": {"token": format!("Bot {TOKEN}"), "session_id": session, "seq": 2}})).await;
    let missed = frame(&mut socket).await.unwrap();
    assert_eq!((missed["s"].as_u64(), missed["d"]["content"].as_str()), (Some(3), Some("missed")));
    let resumed = frame(&mut socket).await.unwrap();
    assert_eq!((resumed["t"].as_str(), resumed["s"].as_u64()), (Some("RESUMED"), Some(4)));
    assert_eq!((discord.identify_count(), discord.resume_count()), (1, 1));
}

#[tokio::test]
async fn replay_all_resends_everything_since_ready_and_an_unknown_session_is_invalid() {
    let discord = fake().await;
    let (mut socket, session) = identified(&discord).await;
    discord.dm(&DiscordUser::new(42, "ada"), "seen");
    frame(&mut socket).await.unwrap();
    discord.replay_all_on_next_resume();
    discord.drop_connection();
    assert!(frame(&mut socket).await.is_err());

    let mut socket = open(&discord).await;
    frame(&mut socket).await.unwrap();
    send(&mut socket, json!({"op": 6, "d": {"token": format!("Bot {TOKEN}"), "session_id": session, "seq": 2}})).await;
    let replayed = frame(&mut socket).await.unwrap();
    assert_eq!((replayed["s"].as_u64(), replayed["d"]["content"].as_str()), (Some(2), Some("seen")));
    assert_eq!(frame(&mut socket).await.unwrap()["t"].as_str(), Some("RESUMED"));

    let mut other = open(&discord).await;
    frame(&mut other).await.unwrap();
    send(&mut other, json!({"op": 6, "d": {"token": format!("Bot {TOKEN}"), "session_id": "nope", "seq": 1}})).await;
    let invalid = frame(&mut other).await.unwrap();
    assert_eq!((invalid["op"].as_u64(), invalid["d"].as_bool()), (Some(9), Some(false)));
}
