//! The Discord adapter against the fake Discord (REST + gateway): start-up, normalization of
//! what the gateway delivers, the outbound calls and their error classification, resume, and
//! Discord's own deduplication of a repeated send (`nonce` + `enforce_nonce`).

use std::time::Duration;

use ferry_channel::{
    Channel, ChannelError, ChatKind, InboundDelivery, InboundStream, MessageRef, OutboundMessage, Target,
};
use ferry_discord::{DiscordChannel, DiscordError};
use ferry_fakes::{DiscordUser, FakeDiscord, Mention};
use futures::StreamExt;
use tokio::io::AsyncReadExt;

mod common;
use common::{PATIENCE, TOKEN, config, started};

async fn next(inbound: &mut InboundStream) -> InboundDelivery {
    tokio::time::timeout(PATIENCE, inbound.next()).await.expect("a delivery in time").expect("the stream is open")
}

fn ada() -> DiscordUser {
    DiscordUser::new(4242, "ada")
}

#[tokio::test]
async fn a_dm_arrives_as_a_direct_chat_and_the_reply_lands_in_the_dm_channel() {
    let discord = FakeDiscord::start(TOKEN).await.unwrap();
    let (channel, mut inbound) = started(&discord).await;
    assert_eq!(channel.bot_id(), discord.bot_id());
    let (dm, message_id) = discord.dm(&ada(), "hello there");
    let delivery = next(&mut inbound).await;
    delivery.ack.accept();
    let message = delivery.message;
    assert_eq!((message.chat.kind, message.chat.id.as_str()), (ChatKind::Direct, dm.to_string().as_str()));
    assert_eq!((message.sender.id.as_str(), message.sender.is_bot), ("4242", false));
    assert_eq!((message.message_id.clone(), message.text.as_str()), (message_id.to_string(), "hello there"));
    let mut reply = OutboundMessage::reply_to(&message, "hi ada");
    reply.reply_to_message_id = Some(message_id.to_string());
    let sent = channel.send(reply).await.unwrap();
    let shown = discord.messages_in(dm);
    assert_eq!(shown.len(), 1);
    assert_eq!((shown[0].message_id.to_string(), shown[0].content.as_str()), (sent.message_id, "hi ada"));
    assert_eq!(shown[0].reply_to, Some(message_id), "threaded to the triggering message");
}

#[tokio::test]
async fn a_wrong_token_is_unauthorized_at_connect() {
    let discord = FakeDiscord::start(TOKEN).await.unwrap();
    let mut config = config(&discord);
    config.token = "wrong".into();
    let error = DiscordChannel::connect(config).await.err().expect("refused");
    assert!(matches!(error, DiscordError::Unauthorized { .. }), "{error}");
    assert!(error.to_string().contains("bot_token") && !error.to_string().contains("wrong"), "{error}");
}

#[tokio::test]
async fn guild_channels_threads_and_both_mention_forms_are_normalized() {
    let discord = FakeDiscord::start(TOKEN).await.unwrap();
    let (_channel, mut inbound) = started(&discord).await;
    discord.guild_message(1, 10, &ada(), "just chatting", Mention::None);
    discord.guild_message(1, 10, &ada(), "are you there?", Mention::Nickname);
    discord.thread_message(1, 10, 11, &ada(), "in a thread", Mention::Plain);
    let plain = next(&mut inbound).await.message;
    assert_eq!((plain.chat.kind, plain.chat.id.as_str(), plain.thread_id.as_deref()), (ChatKind::Channel, "10", None));
    assert!(!plain.mentions_bot);
    let nick = next(&mut inbound).await.message;
    assert!(nick.mentions_bot, "<@!id> counts as a mention");
    assert_eq!(nick.text, "are you there?", "the mention is cut from the text");
    let thread = next(&mut inbound).await.message;
    assert_eq!((thread.chat.id.as_str(), thread.thread_id.as_deref()), ("10", Some("11")));
    assert!(thread.mentions_bot);
}

#[tokio::test]
async fn replies_to_the_bot_count_and_bots_and_group_dms_are_flagged_or_skipped() {
    let discord = FakeDiscord::start(TOKEN).await.unwrap();
    let (channel, mut inbound) = started(&discord).await;
    discord.add_guild_channel(1, 10);
    let target = Target { chat: ferry_channel::ChatRef::new(ChatKind::Channel, "10"), thread_id: None };
    let bot_message = channel.send(OutboundMessage::text(target, "I said this")).await.unwrap();
    discord.group_dm_message(30, &ada(), "group dm");
    discord.inject_message(10, &DiscordUser::bot(99, "otherbot"), "beep");
    discord.reply(10, &ada(), bot_message.message_id.parse().unwrap(), "about that");
    let from_bot = next(&mut inbound).await.message;
    assert!(from_bot.sender.is_bot && from_bot.text == "beep", "{from_bot:?}");
    let reply = next(&mut inbound).await.message;
    assert!(reply.reply_to_bot && !reply.mentions_bot, "{reply:?}");
    assert_eq!(reply.text, "about that", "the group DM before it was skipped");
}

#[tokio::test]
async fn edits_deletes_and_typing_reach_the_right_channel() {
    let discord = FakeDiscord::start(TOKEN).await.unwrap();
    let (channel, _inbound) = started(&discord).await;
    discord.add_thread(1, 10, 11);
    let target = Target { chat: ferry_channel::ChatRef::new(ChatKind::Channel, "10"), thread_id: Some("11".into()) };
    channel.typing(&target).await.unwrap();
    let sent = channel.send(OutboundMessage::text(target.clone(), "draft")).await.unwrap();
    let message = MessageRef { target, message_id: sent.message_id };
    channel.edit(&message, "final", Default::default()).await.unwrap();
    assert_eq!(discord.messages_in(11)[0].content, "final");
    assert_eq!(discord.messages_in(11)[0].edits, 1);
    channel.delete(&message).await.unwrap();
    assert!(discord.messages_in(11).is_empty());
    channel.delete(&message).await.expect("deleting a deleted message is done already");
    assert_eq!(discord.typing(), vec![11]);
}

#[tokio::test]
async fn a_429_is_rate_limited_with_retry_after_and_limits_are_classified() {
    let discord = FakeDiscord::start(TOKEN).await.unwrap().without_rate_limits();
    let (channel, _inbound) = started(&discord).await;
    discord.add_guild_channel(1, 10);
    let target = Target { chat: ferry_channel::ChatRef::new(ChatKind::Channel, "10"), thread_id: None };
    discord.fail_next_with_429(10, Duration::from_millis(1500));
    let error = channel.send(OutboundMessage::text(target.clone(), "x")).await.unwrap_err();
    assert_eq!(error, ChannelError::RateLimited { retry_after: Some(Duration::from_millis(1500)) });
    let error = channel.send(OutboundMessage::text(target.clone(), "y".repeat(2001))).await.unwrap_err();
    assert_eq!(error, ChannelError::TooLong { len: 2001, limit: 2000 });
    discord.fail_next(10, 503);
    assert!(matches!(
        channel.send(OutboundMessage::text(target.clone(), "z")).await,
        Err(ChannelError::Transient { .. })
    ));
    discord.fail_next(10, 403);
    assert!(matches!(
        channel.send(OutboundMessage::text(target.clone(), "z")).await,
        Err(ChannelError::Rejected { .. })
    ));
    let unknown = Target { chat: ferry_channel::ChatRef::new(ChatKind::Channel, "999"), thread_id: None };
    assert!(matches!(channel.send(OutboundMessage::text(unknown, "z")).await, Err(ChannelError::Rejected { .. })));
    channel.send(OutboundMessage::text(target, "y".repeat(2000))).await.expect("exactly the limit is fine");
}

#[tokio::test]
async fn the_fakes_own_per_channel_limit_answers_429_after_five_in_five_seconds() {
    let discord = FakeDiscord::start(TOKEN).await.unwrap();
    let (channel, _inbound) = started(&discord).await;
    discord.add_guild_channel(1, 10);
    let target = Target { chat: ferry_channel::ChatRef::new(ChatKind::Channel, "10"), thread_id: None };
    for i in 0..5 {
        channel.send(OutboundMessage::text(target.clone(), format!("m{i}"))).await.unwrap();
    }
    let error = channel.send(OutboundMessage::text(target, "m5")).await.unwrap_err();
    assert!(matches!(error, ChannelError::RateLimited { retry_after: Some(wait) } if wait <= Duration::from_secs(5)));
    assert_eq!(discord.rate_limited_count(), 1);
}

#[tokio::test]
async fn after_a_disconnect_the_session_resumes_and_a_replayed_message_is_not_delivered_twice() {
    let discord = FakeDiscord::start(TOKEN).await.unwrap();
    let (_channel, mut inbound) = started(&discord).await;
    discord.dm(&ada(), "before");
    assert_eq!(next(&mut inbound).await.message.text, "before");
    discord.replay_all_on_next_resume();
    discord.disconnect();
    discord.dm(&ada(), "while away");
    tokio::time::timeout(PATIENCE, discord.wait_for_resumes(1)).await.expect("resumed");
    assert_eq!(next(&mut inbound).await.message.text, "while away", "missed, so replayed; 'before' was dropped");
    discord.drop_connection();
    tokio::time::timeout(PATIENCE, discord.wait_for_resumes(2)).await.expect("resumed after a dropped socket too");
    discord.dm(&ada(), "after");
    assert_eq!(next(&mut inbound).await.message.text, "after");
    assert_eq!(discord.identify_count(), 1, "resumed, never re-identified");
}

#[tokio::test]
async fn heartbeats_go_on_while_the_core_takes_no_deliveries() {
    let discord = FakeDiscord::start_with_heartbeat(TOKEN, Duration::from_millis(200)).await.unwrap();
    let (_channel, _inbound) = started(&discord).await;
    // Far more messages than the inbound buffer holds, and nobody reads the stream.
    for i in 0..300 {
        discord.dm(&ada(), &format!("message {i}"));
    }
    let seen = discord.heartbeat_count();
    tokio::time::timeout(PATIENCE, discord.wait_for_heartbeats(seen + 3)).await.expect("heartbeats still ACKed");
}

#[tokio::test]
async fn gateway_url_overrides_the_url_that_rest_hands_out() {
    let rest = FakeDiscord::start(TOKEN).await.unwrap();
    let gateway = FakeDiscord::start(TOKEN).await.unwrap();
    let mut config = config(&rest);
    config.gateway_url = Some(gateway.gateway_url());
    let channel = DiscordChannel::connect(config).await.expect("connect");
    let mut inbound = channel.start().await.expect("start");
    tokio::time::timeout(PATIENCE, gateway.wait_for_session()).await.expect("the session is on the override");
    assert_eq!(rest.identify_count(), 0);
    gateway.dm(&ada(), "via the other gateway");
    assert_eq!(next(&mut inbound).await.message.text, "via the other gateway");
}

#[tokio::test]
async fn a_wss_gateway_url_is_dialled_over_tls() {
    // Every other test dials the fake's plain ws:// gateway. This one makes the gateway build
    // its TLS client (rustls 0.23 through tokio-tungstenite), which would panic instead if the
    // graph ever held a second rustls crypto provider (see DEPENDENCIES.md).
    let rest = FakeDiscord::start(TOKEN).await.unwrap();
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let mut config = config(&rest);
    config.gateway_url = Some(format!("wss://{}", listener.local_addr().unwrap()));
    let channel = DiscordChannel::connect(config).await.expect("connect");
    let _inbound = channel.start().await.expect("start");
    let (mut socket, _) = tokio::time::timeout(PATIENCE, listener.accept()).await.expect("the gateway dials").unwrap();
    // A TLS record header (type, version, length) and the first byte of its handshake message.
    let mut first = [0u8; 6];
    tokio::time::timeout(PATIENCE, socket.read_exact(&mut first)).await.expect("bytes in time").unwrap();
    assert_eq!((first[0], first[5]), (0x16, 0x01), "a handshake record holding a ClientHello: {first:?}");
}

fn keyed(target: &Target, text: &str, key: &str) -> OutboundMessage {
    let mut message = OutboundMessage::text(target.clone(), text);
    message.idempotency_key = Some(key.to_owned());
    message
}

#[tokio::test]
async fn a_keyed_send_carries_a_nonce_with_enforce_nonce_and_a_repeat_returns_the_same_message() {
    let discord = FakeDiscord::start(TOKEN).await.unwrap().without_rate_limits();
    let channel = DiscordChannel::connect(config(&discord)).await.expect("connect");
    discord.add_guild_channel(1, 10);
    let target = Target { chat: ferry_channel::ChatRef::new(ChatKind::Channel, "10"), thread_id: None };
    let first = channel.send(keyed(&target, "the answer", "d42:3")).await.unwrap();
    let again = channel.send(keyed(&target, "the answer", "d42:3")).await.unwrap();
    assert_eq!(again, first, "Discord answered the repeat with the message it had created");
    let shown = discord.messages_in(10);
    assert_eq!((shown.len(), shown[0].message_id.to_string()), (1, first.message_id.clone()));
    assert_eq!(discord.nonce_replays().len(), 1);

    let creates: Vec<_> = discord.calls().into_iter().filter(|call| call.is_create_message()).collect();
    let nonce = creates[0].body["nonce"].as_str().expect("a nonce").to_owned();
    assert!(nonce.len() <= 25 && nonce.bytes().all(|b| b.is_ascii_alphanumeric()), "{nonce}");
    assert_eq!(creates[0].body["enforce_nonce"], true);
    assert_eq!(creates[1].body["nonce"].as_str(), Some(nonce.as_str()), "the same key, the same nonce");

    // Another key is another message; no key, no nonce.
    let other = channel.send(keyed(&target, "the answer", "d42:4")).await.unwrap();
    assert_ne!(other, first);
    channel.send(OutboundMessage::text(target, "a notice")).await.unwrap();
    let last = discord.calls().into_iter().rfind(|call| call.is_create_message()).unwrap();
    assert!(last.body.get("nonce").is_none() && last.body.get("enforce_nonce").is_none(), "{}", last.body);
    assert_eq!(discord.messages_in(10).len(), 3);
}

#[tokio::test]
async fn a_send_whose_answer_was_lost_is_transient_and_repeating_it_shows_the_message_once() {
    let discord = FakeDiscord::start(TOKEN).await.unwrap().without_rate_limits();
    let channel = DiscordChannel::connect(config(&discord)).await.expect("connect");
    discord.add_guild_channel(1, 10);
    let target = Target { chat: ferry_channel::ChatRef::new(ChatKind::Channel, "10"), thread_id: None };
    discord.apply_then_drop_next(10);
    let error = channel.send(keyed(&target, "landed", "d7:0")).await.unwrap_err();
    assert!(matches!(error, ChannelError::Transient { .. }), "{error:?}");
    assert_eq!(discord.messages_in(10).len(), 1, "the platform applied it");

    let retried = channel.send(keyed(&target, "landed", "d7:0")).await.unwrap();
    let shown = discord.messages_in(10);
    assert_eq!(shown.len(), 1, "shown once");
    assert_eq!(retried.message_id, shown[0].message_id.to_string());

    // Lost before it was applied: the repeat creates it, once.
    discord.drop_next_before_apply(10);
    assert!(matches!(channel.send(keyed(&target, "next", "d7:1")).await, Err(ChannelError::Transient { .. })));
    channel.send(keyed(&target, "next", "d7:1")).await.unwrap();
    let texts: Vec<_> = discord.messages_in(10).into_iter().map(|message| message.content).collect();
    assert_eq!(texts, ["landed", "next"]);
}
