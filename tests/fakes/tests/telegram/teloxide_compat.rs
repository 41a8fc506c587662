//! A real teloxide `Bot` against the fake: the calls the Telegram adapter makes, and the
//! errors it must tell apart, parsed by teloxide itself.

use ferry_fakes::FakeTelegram;
use teloxide_core::prelude::*;
use teloxide_core::types::{ChatAction, Me, Message, MessageId, ParseMode, UpdateKind};
use teloxide_core::{ApiError, RequestError};

use crate::{TOKEN, fake, ok};

fn bot(telegram: &FakeTelegram) -> Bot {
    Bot::new(TOKEN).set_api_url(telegram.url().parse().unwrap())
}

#[tokio::test]
async fn raw_answers_deserialize_into_teloxide_types() {
    let telegram = fake().await;
    telegram.private_message(42, "Ada", "hi");
    let me: Me = serde_json::from_value(ok(&telegram, "getMe", serde_json::json!({})).await).unwrap();
    assert_eq!(me.username(), "ferry_test_bot");
    let message: Message = serde_json::from_value(
        ok(&telegram, "sendMessage", serde_json::json!({ "chat_id": 42, "text": "<b>hi</b>", "parse_mode": "HTML" }))
            .await,
    )
    .unwrap();
    assert_eq!(message.text(), Some("hi"));
}

#[tokio::test]
async fn a_teloxide_bot_can_poll_send_edit_and_delete() {
    let telegram = fake().await;
    let bot = bot(&telegram);

    let me = bot.get_me().await.unwrap();
    assert_eq!((me.id.0, me.username()), (777_000_001, "ferry_test_bot"));

    let update_id = telegram.private_message(42, "Ada", "hello bot");
    let updates = bot.get_updates().timeout(5).await.unwrap();
    assert_eq!(updates.len(), 1);
    assert_eq!(updates[0].id.0 as i64, update_id);
    let UpdateKind::Message(message) = &updates[0].kind else { panic!("{:?}", updates[0].kind) };
    assert_eq!(message.text(), Some("hello bot"));
    let chat = message.chat.id;

    bot.send_chat_action(chat, ChatAction::Typing).await.unwrap();
    let sent = bot
        .send_message(chat, "<b>Hi</b> Ada")
        .parse_mode(ParseMode::Html)
        .reply_parameters(teloxide_core::types::ReplyParameters::new(message.id))
        .await
        .unwrap();
    assert_eq!(sent.text(), Some("Hi Ada"));
    assert_eq!(sent.reply_to_message().map(|replied| replied.id), Some(message.id));

    let edited = bot.edit_message_text(chat, sent.id, "<i>Hi</i> again").parse_mode(ParseMode::Html).await.unwrap();
    assert_eq!(edited.text(), Some("Hi again"));
    assert_eq!(telegram.messages_in(42)[0].visible_text, "Hi again");

    bot.delete_message(chat, sent.id).await.unwrap();
    assert!(telegram.sent().is_empty());

    // Confirming: the next poll's offset drops the update.
    let next = bot.get_updates().offset(update_id as i32 + 1).timeout(0).await.unwrap();
    assert!(next.is_empty());
    assert_eq!(telegram.current_offset(), update_id + 1);
    let methods: Vec<String> = telegram.calls().into_iter().map(|call| call.method).collect();
    assert_eq!(
        methods,
        ["getMe", "getUpdates", "sendChatAction", "sendMessage", "editMessageText", "deleteMessage", "getUpdates"]
    );
}

#[tokio::test]
async fn teloxide_recognises_the_errors_the_adapter_must_handle() {
    let telegram = FakeTelegram::start(TOKEN).await.unwrap();
    telegram.private_message(42, "Ada", "hi");
    let bot = bot(&telegram);
    let chat = ChatId(42);

    let error = bot.send_message(chat, "<foo>").parse_mode(ParseMode::Html).await.unwrap_err();
    assert!(
        matches!(&error, RequestError::Api(ApiError::CantParseEntities(text)) if text.contains("Unsupported start tag")),
        "{error:?}"
    );
    let error = bot.send_message(chat, "a".repeat(4097)).await.unwrap_err();
    assert!(matches!(error, RequestError::Api(ApiError::MessageIsTooLong)), "{error:?}");

    let sent = bot.send_message(chat, "same").await.unwrap();
    let error = bot.edit_message_text(chat, sent.id, "same").await.unwrap_err();
    assert!(matches!(error, RequestError::Api(ApiError::MessageNotModified)), "{error:?}");
    let error = bot.edit_message_text(chat, MessageId(99), "x").await.unwrap_err();
    assert!(matches!(error, RequestError::Api(ApiError::MessageToEditNotFound)), "{error:?}");
    let error = bot.delete_message(chat, MessageId(99)).await.unwrap_err();
    assert!(matches!(error, RequestError::Api(ApiError::MessageToDeleteNotFound)), "{error:?}");

    // Flood control: the burst of 3 is spent (one send above), so the third send is refused.
    bot.send_message(chat, "2").await.unwrap();
    bot.send_message(chat, "3").await.unwrap();
    let error = bot.send_message(chat, "4").await.unwrap_err();
    assert!(matches!(error, RequestError::RetryAfter(seconds) if seconds.seconds() == 1), "{error:?}");

    telegram.drop_next_connection("getMe");
    let error = bot.get_me().await.unwrap_err();
    assert!(matches!(error, RequestError::Network(_)), "{error:?}");

    let wrong = Bot::new("1:WRONG").set_api_url(telegram.url().parse().unwrap());
    let error = wrong.get_me().await.unwrap_err();
    assert!(matches!(error, RequestError::Api(ApiError::InvalidToken)), "{error:?}");
}

#[tokio::test]
async fn teloxide_sees_a_network_error_for_a_send_that_took_effect() {
    let telegram = fake().await;
    telegram.private_message(42, "Ada", "hi");
    let bot = bot(&telegram);
    telegram.apply_then_drop_next("sendMessage");
    let error = bot.send_message(ChatId(42), "delivered, unconfirmed").await.unwrap_err();
    assert!(matches!(error, RequestError::Network(_)), "{error:?}");
    let shown: Vec<String> = telegram.messages_in(42).into_iter().map(|message| message.visible_text).collect();
    assert_eq!(shown, ["delivered, unconfirmed"]);
}
