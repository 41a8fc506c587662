//! The adapter's outbound calls against the fake Bot API: formats, threading, topics,
//! edits, deletes, typing, and how Telegram's refusals reach the core.

use std::time::Duration;

use ferry_channel::{Channel, ChannelError, ChatKind, ChatRef, MessageRef, OutboundMessage, Target, TextFormat};
use ferry_fakes::{FakeTelegram, TgUser};
use ferry_telegram::{TelegramChannel, TelegramConfig};
use serde_json::Value;

const TOKEN: &str = "123456:TEST-TOKEN";

/// A private chat, a plain supergroup and a forum, known to the fake.
const ADA: i64 = 42;
const GROUP: i64 = -100123;
const FORUM: i64 = -100777;

async fn setup() -> (FakeTelegram, TelegramChannel) {
    let telegram = FakeTelegram::start(TOKEN).await.expect("fake Telegram").without_rate_limits();
    // The chats exist once someone wrote in them.
    telegram.private_message(ADA, "Ada", "hi");
    telegram.group_message(GROUP, TgUser::new(5, "Bob"), "hi", false);
    telegram.topic_message(FORUM, 50, TgUser::new(5, "Bob"), "hi");
    let mut config = TelegramConfig::new(telegram.token());
    config.api_url = telegram.url();
    let channel = TelegramChannel::connect(config).await.expect("connect");
    (telegram, channel)
}

fn target(chat: i64, thread: Option<&str>) -> Target {
    let kind = if chat > 0 { ChatKind::Direct } else { ChatKind::Group };
    Target { chat: ChatRef::new(kind, chat.to_string()), thread_id: thread.map(str::to_owned) }
}

fn last_params(telegram: &FakeTelegram, method: &str) -> Value {
    telegram.calls_to(method).last().unwrap_or_else(|| panic!("no {method} call")).params.clone()
}

#[tokio::test]
async fn markup_goes_as_html_and_plain_text_without_a_parse_mode() {
    let (telegram, channel) = setup().await;
    let html =
        OutboundMessage { format: TextFormat::Markup, ..OutboundMessage::text(target(ADA, None), "<b>bold</b>") };
    let sent = channel.send(html).await.unwrap();
    assert_eq!(last_params(&telegram, "sendMessage")["parse_mode"], "HTML");
    let shown = telegram.sent().into_iter().find(|m| m.message_id.to_string() == sent.message_id).unwrap();
    assert_eq!(shown.visible_text, "bold");

    channel.send(OutboundMessage::text(target(ADA, None), "<b>not markup</b>")).await.unwrap();
    assert!(last_params(&telegram, "sendMessage").get("parse_mode").is_none());
    assert_eq!(telegram.sent().last().unwrap().visible_text, "<b>not markup</b>");
}

#[tokio::test]
async fn a_threaded_reply_uses_reply_parameters_that_tolerate_a_deleted_original() {
    let (telegram, channel) = setup().await;
    let reply = OutboundMessage {
        reply_to_message_id: Some("1".to_owned()),
        ..OutboundMessage::text(target(ADA, None), "answer")
    };
    channel.send(reply).await.unwrap();
    let params = last_params(&telegram, "sendMessage");
    assert_eq!(params["reply_parameters"]["message_id"], 1);
    assert_eq!(params["reply_parameters"]["allow_sending_without_reply"], true);
    assert_eq!(telegram.sent().last().unwrap().reply_to, Some(1));
}

#[tokio::test]
async fn topic_sends_carry_the_thread_but_the_general_topic_is_omitted() {
    let (telegram, channel) = setup().await;
    channel.send(OutboundMessage::text(target(FORUM, Some("50")), "in topic")).await.unwrap();
    assert_eq!(last_params(&telegram, "sendMessage")["message_thread_id"], 50);
    assert_eq!(telegram.sent().last().unwrap().thread_id, Some(50));

    channel.send(OutboundMessage::text(target(FORUM, Some("1")), "in general")).await.unwrap();
    assert!(last_params(&telegram, "sendMessage").get("message_thread_id").is_none());
    assert_eq!(telegram.sent().last().unwrap().thread_id, None);
}

#[tokio::test]
async fn typing_keeps_the_thread_even_for_the_general_topic() {
    let (telegram, channel) = setup().await;
    channel.typing(&target(FORUM, Some("1"))).await.unwrap();
    channel.typing(&target(ADA, None)).await.unwrap();
    let actions: Vec<_> = telegram.chat_actions().into_iter().map(|a| (a.chat_id, a.action, a.thread_id)).collect();
    assert_eq!(actions, [(FORUM, "typing".to_owned(), Some(1)), (ADA, "typing".to_owned(), None)]);
}

#[tokio::test]
async fn edits_replace_the_text_and_an_unchanged_edit_is_success() {
    let (telegram, channel) = setup().await;
    let sent = channel.send(OutboundMessage::text(target(GROUP, None), "draft")).await.unwrap();
    let message = MessageRef { target: target(GROUP, None), message_id: sent.message_id };
    channel.edit(&message, "final", TextFormat::Plain).await.unwrap();
    channel.edit(&message, "final", TextFormat::Plain).await.expect("not modified is Ok");
    assert_eq!(telegram.calls_to("editMessageText").last().unwrap().status(), Some(400));
    let shown = telegram.sent().last().unwrap().clone();
    assert_eq!((shown.text.as_str(), shown.edits), ("final", 1));

    channel.edit(&message, "<i>styled</i>", TextFormat::Markup).await.unwrap();
    assert_eq!(last_params(&telegram, "editMessageText")["parse_mode"], "HTML");
}

#[tokio::test]
async fn deleting_removes_the_message_and_a_missing_one_is_rejected() {
    let (telegram, channel) = setup().await;
    let sent = channel.send(OutboundMessage::text(target(GROUP, None), "preview")).await.unwrap();
    let message = MessageRef { target: target(GROUP, None), message_id: sent.message_id };
    channel.delete(&message).await.unwrap();
    assert!(telegram.messages_in(GROUP).is_empty());
    assert!(matches!(channel.delete(&message).await, Err(ChannelError::Rejected { .. })));
}

#[tokio::test]
async fn flood_control_maps_to_rate_limited_with_retry_after() {
    let (telegram, channel) = setup().await;
    telegram.fail_next_with_retry_after("sendMessage", 3);
    let error = channel.send(OutboundMessage::text(target(ADA, None), "hi")).await.unwrap_err();
    assert_eq!(error, ChannelError::RateLimited { retry_after: Some(Duration::from_secs(3)) });
    // One request, no hidden retry: the core's scheduler decides.
    assert_eq!(telegram.calls_to("sendMessage").len(), 1);
}

#[tokio::test]
async fn broken_html_maps_to_markup_rejected() {
    let (telegram, channel) = setup().await;
    let broken = OutboundMessage { format: TextFormat::Markup, ..OutboundMessage::text(target(ADA, None), "<b>open") };
    let error = channel.send(broken).await.unwrap_err();
    assert!(matches!(error, ChannelError::MarkupRejected { .. }), "{error:?}");
    assert!(telegram.sent().is_empty());
}

#[tokio::test]
async fn an_overlong_text_maps_to_too_long() {
    let (_telegram, channel) = setup().await;
    let error = channel.send(OutboundMessage::text(target(ADA, None), "x".repeat(5000))).await.unwrap_err();
    assert_eq!(error, ChannelError::TooLong { len: 5000, limit: 4096 });
}

#[tokio::test]
async fn a_blocked_bot_is_rejected_and_a_revoked_token_is_unauthorized() {
    let (telegram, channel) = setup().await;
    telegram.fail_next("sendMessage", 403, "Forbidden: bot was blocked by the user");
    let error = channel.send(OutboundMessage::text(target(ADA, None), "hi")).await.unwrap_err();
    assert!(matches!(error, ChannelError::Rejected { .. }), "{error:?}");
    telegram.fail_next("sendMessage", 401, "Unauthorized");
    let error = channel.send(OutboundMessage::text(target(ADA, None), "hi")).await.unwrap_err();
    assert!(matches!(error, ChannelError::Unauthorized { .. }), "{error:?}");
}

#[tokio::test]
async fn a_dropped_connection_is_transient_and_never_shows_the_token() {
    let (telegram, channel) = setup().await;
    telegram.drop_next_connection("sendMessage");
    let error = channel.send(OutboundMessage::text(target(ADA, None), "hi")).await.unwrap_err();
    assert!(matches!(error, ChannelError::Transient { .. }), "{error:?}");
    assert!(!error.to_string().contains("TEST-TOKEN"), "{error}");
}
