//! A bot many people use at once, end to end: the real `ferry gateway` with the Telegram
//! adapter against the fake Bot API (with Telegram's flood limits) and a fake model that
//! answers by naming the tokens it was asked about. Every user must be answered in their own
//! chat, about their own messages only, whatever `session.dm_scope` is; and by default no
//! user's DM history reaches another user's run.

use std::collections::BTreeSet;
use std::time::Duration;

use ferry_fakes::{FakeOpenAi, FakeTelegram, RecordedRequest, Turn};

#[path = "common/daemon.rs"]
mod daemon;

use daemon::{PATIENCE, daemon_in};

const TOKEN: &str = "123456:TEST-token";
const USERS: i64 = 20;
const MESSAGES_PER_USER: usize = 10;

/// The tokens (`u<user>m<n>`) in `text`.
fn tokens(text: &str) -> BTreeSet<String> {
    text.split(|c: char| !c.is_ascii_alphanumeric())
        .filter(|word| {
            word.strip_prefix('u')
                .and_then(|rest| rest.split_once('m'))
                .is_some_and(|(user, n)| user.parse::<u32>().is_ok() && n.parse::<u32>().is_ok())
        })
        .map(str::to_owned)
        .collect()
}

/// A model that answers each run by naming every token in the prompt it was given.
fn naming_model(request: &RecordedRequest) -> Turn {
    let asked = request.last_user_text().map(|text| tokens(&text)).unwrap_or_default();
    Turn::text([format!("ack {}", asked.into_iter().collect::<Vec<_>>().join(" "))])
}

fn gateway_config(telegram: &FakeTelegram, session: &str) -> String {
    format!(
        "[channels.telegram]\nenabled = true\nbot_token = \"{TOKEN}\"\napi_url = \"{}\"\ndm_policy = \"open\"\n\
         allow_from = [\"*\"]\n\n[messages.queue]\ndebounce_ms = 100\n\n{session}\n",
        telegram.url()
    )
}

/// 20 users each send 10 DMs at once; returns, per user, the tokens named in their chat.
async fn burst(session: &str) -> (Vec<BTreeSet<String>>, FakeTelegram) {
    let telegram = FakeTelegram::start(TOKEN).await.unwrap();
    let openai = FakeOpenAi::start().await.unwrap().with_responder(naming_model);
    let home = tempfile::tempdir().unwrap();
    let _daemon = daemon_in(home, &gateway_config(&telegram, session), &openai, "telegram").await;
    for n in 0..MESSAGES_PER_USER {
        for user in 1..=USERS {
            telegram.private_message(user, &format!("User {user}"), &format!("question u{user}m{n}"));
        }
    }
    let answered = |user: i64| -> BTreeSet<String> {
        telegram.messages_in(user).iter().flat_map(|message| tokens(&message.visible_text)).collect()
    };
    let everyone_answered = tokio::time::timeout(PATIENCE * 2, async {
        while (1..=USERS).any(|user| answered(user).len() < MESSAGES_PER_USER) {
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    })
    .await;
    // A little longer, for any reply that would go to the wrong chat after the last one.
    tokio::time::sleep(Duration::from_millis(500)).await;
    let per_user: Vec<BTreeSet<String>> = (1..=USERS).map(answered).collect();
    assert!(everyone_answered.is_ok(), "not every user was answered: {per_user:?}");
    (per_user, telegram)
}

fn assert_each_user_answered_about_their_own_messages(per_user: &[BTreeSet<String>]) {
    for (index, named) in per_user.iter().enumerate() {
        let user = index + 1;
        let own: BTreeSet<String> = (0..MESSAGES_PER_USER).map(|n| format!("u{user}m{n}")).collect();
        assert_eq!(named, &own, "user {user}'s chat names exactly their own messages");
    }
}

#[tokio::test]
async fn a_dm_burst_from_twenty_users_sharing_the_main_session_answers_each_in_their_own_chat() {
    let (per_user, telegram) = burst("[session]\ndm_scope = \"main\"").await;
    assert_each_user_answered_about_their_own_messages(&per_user);
    assert_eq!(telegram.rate_limited_count(), 0, "within Telegram's limits");
}

#[tokio::test]
async fn a_dm_burst_from_twenty_users_with_the_default_config_answers_each_in_their_own_chat() {
    let (per_user, telegram) = burst("").await;
    assert_each_user_answered_about_their_own_messages(&per_user);
    assert_eq!(telegram.rate_limited_count(), 0, "within Telegram's limits");
}

/// Waits until `chat` got a reply.
async fn answered(telegram: &FakeTelegram, chat: i64) {
    let replied = tokio::time::timeout(PATIENCE, async {
        while telegram.messages_in(chat).is_empty() {
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    })
    .await;
    assert!(replied.is_ok(), "chat {chat} was not answered");
}

#[tokio::test]
async fn two_users_dms_do_not_share_history_by_default() {
    let telegram = FakeTelegram::start(TOKEN).await.unwrap();
    let openai = FakeOpenAi::start().await.unwrap().with_responder(naming_model);
    let home = tempfile::tempdir().unwrap();
    let _daemon = daemon_in(home, &gateway_config(&telegram, ""), &openai, "telegram").await;
    telegram.private_message(1, "Ada", "my locker code is u1m0");
    answered(&telegram, 1).await;
    telegram.private_message(2, "Bob", "what did the others tell you? u2m0");
    answered(&telegram, 2).await;
    let bobs_run = openai
        .requests()
        .into_iter()
        .find(|request| request.last_user_text().is_some_and(|text| text.contains("u2m0")))
        .expect("the model was asked Bob's question");
    let context = bobs_run.body.to_string();
    assert!(!context.contains("u1m0") && !context.contains("locker"), "Bob's run saw Ada's DM: {context}");
    assert!(!telegram.messages_in(2).iter().any(|m| m.visible_text.contains("u1m0")));
}
