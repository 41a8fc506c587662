//! `getUpdates`: long polling, offset confirmation, the one-poller rule, and update shapes that
//! teloxide's `Update` type parses into the intended kinds.

use std::time::Duration;

use ferry_fakes::{CallOutcome, TgUser};
use serde_json::{Value, json};
use teloxide_core::types::{
    Chat, ChatKind, ChatPublic, MessageEntityKind, MessageId, PublicChatKind, ThreadId, Update, UpdateKind,
};
use tokio::time::Instant;

use crate::{call, fake, ok, soon};

const POLL_CONFLICT: &str =
    "Conflict: terminated by other getUpdates request; make sure that only one bot instance is running";

/// A forum supergroup id, in Telegram's `-100…` shape.
const FORUM: i64 = -1_009_876_543_210;

/// Parses from text, as teloxide does: its `UpdateKind` reads keys as borrowed `&str`, which
/// fails on a `serde_json::Value` and yields `UpdateKind::Error`.
fn parse_updates(result: Value) -> Vec<Update> {
    serde_json::from_str(&result.to_string()).unwrap()
}

/// The message of a `message` / `edited_message` update, failing on any other kind (teloxide
/// turns JSON it cannot parse into `UpdateKind::Error`, so this is the real check).
fn message_of(update: &Update) -> &teloxide_core::types::Message {
    match &update.kind {
        UpdateKind::Message(message) | UpdateKind::EditedMessage(message) => message,
        other => panic!("not a message update: {other:?}"),
    }
}

fn is_forum(chat: &Chat) -> bool {
    matches!(&chat.kind, ChatKind::Public(ChatPublic { kind: PublicChatKind::Supergroup(group), .. }) if group.is_forum)
}

#[tokio::test]
async fn updates_stay_until_an_offset_above_them_confirms_them() {
    let telegram = fake().await;
    let first = telegram.private_message(42, "Ada", "one");
    let second = telegram.private_message(42, "Ada", "two");
    assert_eq!(second, first + 1);
    assert_eq!(telegram.current_offset(), first);

    let updates = ok(&telegram, "getUpdates", json!({})).await;
    assert_eq!(updates.as_array().unwrap().len(), 2);
    // Delivered is not confirmed: the same updates come again.
    let updates = ok(&telegram, "getUpdates", json!({ "limit": 1 })).await;
    assert_eq!(updates[0]["update_id"], first);
    assert_eq!(updates.as_array().unwrap().len(), 1);

    let updates = ok(&telegram, "getUpdates", json!({ "offset": first + 1 })).await;
    assert_eq!(updates[0]["update_id"], second);
    assert_eq!(telegram.current_offset(), second);
    ok(&telegram, "getUpdates", json!({ "offset": second + 1 })).await;
    soon(telegram.wait_for_offset(second + 1)).await;
    assert_eq!(telegram.pending_updates(), 0);
}

#[tokio::test]
async fn a_long_poll_returns_as_soon_as_an_update_arrives() {
    let telegram = fake().await;
    let poll = call(&telegram, "getUpdates", json!({ "timeout": 30 }));
    let inject = async {
        let calls = soon(telegram.wait_for_arrivals("getUpdates", 1)).await;
        assert_eq!(calls[0].outcome, CallOutcome::InFlight);
        telegram.private_message(42, "Ada", "wake up")
    };
    let ((status, body), id) = soon(async { tokio::join!(poll, inject) }).await;
    assert_eq!(status, 200);
    assert_eq!(body["result"][0]["update_id"], id);
    assert_eq!(body["result"][0]["message"]["text"], "wake up");
}

#[tokio::test]
async fn a_long_poll_with_nothing_to_deliver_ends_empty_at_its_timeout() {
    let telegram = fake().await;
    let started = Instant::now();
    assert_eq!(ok(&telegram, "getUpdates", json!({ "timeout": 1 })).await, json!([]));
    assert!(started.elapsed() >= Duration::from_millis(950), "{:?}", started.elapsed());
}

#[tokio::test]
async fn a_second_poller_ends_the_waiting_one_with_409() {
    let telegram = fake().await;
    let first = call(&telegram, "getUpdates", json!({ "timeout": 30 }));
    let second = async {
        soon(telegram.wait_for_arrivals("getUpdates", 1)).await;
        call(&telegram, "getUpdates", json!({ "timeout": 0 })).await
    };
    let ((status, body), (second_status, _)) = soon(async { tokio::join!(first, second) }).await;
    assert_eq!((status, body["description"].as_str()), (409, Some(POLL_CONFLICT)));
    assert_eq!(second_status, 200);
    // Back to one poller: no conflict.
    assert_eq!(ok(&telegram, "getUpdates", json!({})).await, json!([]));
}

#[tokio::test]
async fn allowed_updates_filters_kinds_and_sticks() {
    let telegram = fake().await;
    telegram.private_message(42, "Ada", "one");
    telegram.edited_message(42, 1, "one, edited");
    let updates = ok(&telegram, "getUpdates", json!({ "allowed_updates": ["message"] })).await;
    assert_eq!(updates.as_array().unwrap().len(), 1);
    telegram.edited_message(42, 1, "again");
    assert_eq!(ok(&telegram, "getUpdates", json!({})).await.as_array().unwrap().len(), 1);
    // Opt-in kinds are left out by default.
    let telegram = fake().await;
    telegram.inject_update(json!({ "message_reaction": {} }));
    assert_eq!(ok(&telegram, "getUpdates", json!({})).await, json!([]));
}

#[tokio::test]
async fn private_and_group_messages_parse_as_teloxide_updates() {
    let telegram = fake().await;
    telegram.private_message(42, "Ada", "/start now");
    telegram.group_message(
        -1_001_234_567_890,
        TgUser::new(7, "Cy").with_username("cy"),
        "héllo 😀 @ferry_test_bot ?",
        false,
    );
    telegram.group_message(-5, (8, "Di"), "what's up", true);
    let updates = parse_updates(ok(&telegram, "getUpdates", json!({})).await);
    assert_eq!(updates.len(), 3);

    let private = message_of(&updates[0]);
    assert!(private.chat.is_private());
    assert_eq!(private.chat.id.0, 42);
    assert_eq!(private.from.as_ref().unwrap().first_name, "Ada");
    assert_eq!(private.text(), Some("/start now"));
    assert_eq!(private.entities().unwrap()[0].kind, MessageEntityKind::BotCommand);

    let supergroup = message_of(&updates[1]);
    assert!(supergroup.chat.is_supergroup());
    let mention = &supergroup.entities().unwrap()[0];
    assert_eq!(mention.kind, MessageEntityKind::Mention);
    // "héllo 😀 " is 9 UTF-16 units: é is one, the emoji two.
    assert_eq!((mention.offset, mention.length), (9, 15));
    assert_eq!(supergroup.from.as_ref().unwrap().username.as_deref(), Some("cy"));

    let group = message_of(&updates[2]);
    assert!(group.chat.is_group());
    assert_eq!(group.text(), Some("@ferry_test_bot what's up"));
    let mention = &group.entities().unwrap()[0];
    assert_eq!((mention.kind.clone(), mention.offset, mention.length), (MessageEntityKind::Mention, 0, 15));
}

#[tokio::test]
async fn topic_reply_caption_edit_and_service_messages_parse_as_teloxide_updates() {
    let telegram = fake().await;
    telegram.topic_message(FORUM, 12, (7, "Cy"), "in topic 12");
    telegram.topic_message(FORUM, 1, (7, "Cy"), "in General");
    let sent =
        ok(&telegram, "sendMessage", json!({ "chat_id": FORUM, "text": "bot says", "message_thread_id": 12 })).await;
    let bot_message = sent["message_id"].as_i64().unwrap();
    telegram.reply_to_bot(FORUM, (7, "Cy"), bot_message, "replying");
    telegram.caption_message(42, (42, "Ada"), "look @ferry_test_bot");
    telegram.private_message(42, "Ada", "typo");
    telegram.edited_message(42, 2, "fixed");
    telegram.members_joined(-5, (8, "Di"), &[TgUser::new(9, "Ed"), telegram.bot_user()]);
    let updates = parse_updates(ok(&telegram, "getUpdates", json!({})).await);
    assert_eq!(updates.len(), 7);

    let topic = message_of(&updates[0]);
    assert_eq!(topic.thread_id, Some(ThreadId(MessageId(12))));
    assert!(topic.is_topic_message);
    assert!(is_forum(&topic.chat), "{:?}", topic.chat);
    assert!(topic.id.0 > 12, "the topic's creation took id 12");
    let created = topic.reply_to_message().unwrap();
    assert!(created.forum_topic_created().is_some(), "{created:?}");

    let general = message_of(&updates[1]);
    assert_eq!(general.thread_id, None);
    assert!(!general.is_topic_message);

    let reply = message_of(&updates[2]);
    let replied = reply.reply_to_message().unwrap();
    assert_eq!(replied.id.0 as i64, bot_message);
    assert_eq!(replied.from.as_ref().unwrap().id.0, 777_000_001);
    assert_eq!(replied.text(), Some("bot says"));

    let caption = message_of(&updates[3]);
    assert_eq!(caption.caption(), Some("look @ferry_test_bot"));
    assert!(caption.photo().is_some());
    assert_eq!(caption.caption_entities().unwrap()[0].kind, MessageEntityKind::Mention);

    let UpdateKind::EditedMessage(edited) = &updates[5].kind else { panic!("{:?}", updates[5].kind) };
    assert_eq!((edited.id.0, edited.text()), (2, Some("fixed")));
    assert!(edited.edit_date().is_some());

    let joined = message_of(&updates[6]);
    let members = joined.new_chat_members().unwrap();
    assert_eq!(members.len(), 2);
    assert!(members[1].is_bot);
}
