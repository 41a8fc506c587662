//! Reply directives end to end: the real `ferry gateway` binary with the Telegram adapter
//! against the fake Bot API (its flood limits on) and the fake OpenAI server. The model
//! writes `[[ reply_to : <id> ]]`; the reply is threaded to that message and the tag never
//! reaches the chat, in a final or in any preview along the way.

use std::time::Duration;

use ferry_fakes::{FakeOpenAi, FakeTelegram, Reply, SentMessage, Turn};

#[path = "common/daemon.rs"]
mod daemon;

use daemon::{Daemon, PATIENCE, daemon_in};

const TOKEN: &str = "123456:TEST-token";
const USER: i64 = 42;

async fn start(streaming: &str) -> (FakeTelegram, FakeOpenAi, Daemon) {
    let telegram = FakeTelegram::start(TOKEN).await.unwrap();
    let openai = FakeOpenAi::start().await.unwrap();
    let config = format!(
        "[channels.telegram]\nenabled = true\nbot_token = \"{TOKEN}\"\napi_url = \"{}\"\n\
         dm_policy = \"open\"\nallow_from = [\"*\"]\nstreaming = \"{streaming}\"\n",
        telegram.url()
    );
    let daemon = daemon_in(tempfile::tempdir().unwrap(), &config, &openai, "telegram").await;
    tokio::time::timeout(PATIENCE, telegram.wait_for_arrivals("getUpdates", 1)).await.expect("polling");
    (telegram, openai, daemon)
}

/// A DM from the user; returns its message id.
fn dm(telegram: &FakeTelegram, text: &str) -> i64 {
    // Message ids count up per chat from 1.
    let id = telegram.next_message_id(USER).unwrap_or(1);
    telegram.private_message(USER, "Ada", text);
    id
}

/// Waits until the bot's messages in the DM satisfy `done`.
async fn until(telegram: &FakeTelegram, done: impl Fn(&[SentMessage]) -> bool) -> Vec<SentMessage> {
    tokio::time::timeout(PATIENCE, async {
        loop {
            let shown = telegram.messages_in(USER);
            if done(&shown) {
                return shown;
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    })
    .await
    .unwrap_or_else(|_| panic!("not reached; the chat shows {:?}", telegram.messages_in(USER)))
}

/// Every text the bot sent or edited in, as sent.
fn every_text_sent(telegram: &FakeTelegram) -> Vec<String> {
    ["sendMessage", "editMessageText"]
        .into_iter()
        .flat_map(|method| telegram.calls_to(method))
        .filter_map(|call| call.params["text"].as_str().map(str::to_owned))
        .collect()
}

fn assert_no_tag_shown(telegram: &FakeTelegram) {
    for text in every_text_sent(telegram) {
        assert!(!text.contains("[[") && !text.contains("reply_to"), "a directive reached the chat: {text:?}");
    }
}

/// An earlier message, answered; then a question whose answer threads back to it.
async fn earlier_message_answered(telegram: &FakeTelegram, openai: &FakeOpenAi) -> i64 {
    openai.push(Turn::text(["Noted."]));
    let earlier = dm(telegram, "Remember: the release is on Friday.");
    until(telegram, |shown| shown.len() == 1).await;
    earlier
}

#[tokio::test]
async fn a_reply_to_directive_threads_the_reply_to_that_message_and_is_not_shown() {
    let (telegram, openai, _daemon) = start("off").await;
    let earlier = earlier_message_answered(&telegram, &openai).await;
    openai.push(Turn::text([format!("[[ reply_to : {earlier} ]] That was the release date.")]));
    let question = dm(&telegram, "What did I tell you?");
    let shown = until(&telegram, |shown| shown.len() == 2).await;
    assert_eq!(shown[1].visible_text, "That was the release date.");
    assert_eq!(shown[1].reply_to, Some(earlier), "threaded to the message named, not the question {question}");
    assert_no_tag_shown(&telegram);
}

#[tokio::test]
async fn a_streamed_reply_is_previewed_in_the_thread_its_directive_names_and_edited_in_place() {
    let (telegram, openai, _daemon) = start("partial").await;
    let earlier = earlier_message_answered(&telegram, &openai).await;
    let pieces = [
        "[[ reply".to_owned(),
        format!("_to : {earlier}"),
        " ]] About the release you mentioned: ".to_owned(),
        "it is still on Friday, ".to_owned(),
        "nothing has moved.".to_owned(),
    ];
    let full = "About the release you mentioned: it is still on Friday, nothing has moved.";
    openai.push(Turn::Reply(Reply::text(pieces).with_chunk_delay(Duration::from_millis(400))));
    dm(&telegram, "Is the release still on?");
    let shown = until(&telegram, |shown| shown.len() == 2 && shown[1].visible_text == full).await;
    assert!(shown[1].edits >= 1, "the preview grew into the final: {shown:?}");
    assert_eq!(shown[1].reply_to, Some(earlier), "the preview was sent threaded, and stayed so");
    assert_eq!(telegram.calls_to("sendMessage").len(), 2, "one preview, edited in place; nothing sent fresh");
    assert_no_tag_shown(&telegram);
    assert_eq!(telegram.rate_limited_count(), 0);
}

#[tokio::test]
async fn a_reply_to_a_message_id_telegram_cannot_take_is_sent_unthreaded() {
    let (telegram, openai, _daemon) = start("off").await;
    openai.push(Turn::text(["[[reply_to: the-first-one]] Here is the answer anyway."]));
    dm(&telegram, "Which one?");
    let shown = until(&telegram, |shown| !shown.is_empty()).await;
    assert_eq!((shown[0].visible_text.as_str(), shown[0].reply_to), ("Here is the answer anyway.", None));
    assert_no_tag_shown(&telegram);
}
