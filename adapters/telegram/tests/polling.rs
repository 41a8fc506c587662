//! The adapter's inbound side against the fake Bot API: start-up checks, long polling with
//! the offset gated on the core's ack, normalization through the wire, and outages.

use std::future::Future;
use std::time::Duration;

use ferry_channel::{Channel, ChatKind, ChatRef, InboundDelivery, InboundStream};
use ferry_fakes::{BOT_USER_ID, CallOutcome, FakeTelegram, TgUser};
use ferry_telegram::{TelegramChannel, TelegramConfig, TelegramError};
use futures::StreamExt;

const TOKEN: &str = "123456:TEST-TOKEN";

/// Upper bound for anything a test waits for; never a sleep that passes a test by itself.
const PATIENCE: Duration = Duration::from_secs(15);

async fn within<T>(what: &str, future: impl Future<Output = T>) -> T {
    tokio::time::timeout(PATIENCE, future).await.unwrap_or_else(|_| panic!("timed out waiting for {what}"))
}

async fn fake() -> FakeTelegram {
    FakeTelegram::start(TOKEN).await.expect("fake Telegram").without_rate_limits()
}

fn config(telegram: &FakeTelegram) -> TelegramConfig {
    let mut config = TelegramConfig::new(telegram.token());
    config.api_url = telegram.url();
    config.poll_timeout = Duration::from_secs(5);
    config
}

async fn started(telegram: &FakeTelegram) -> (TelegramChannel, InboundStream) {
    let channel = TelegramChannel::connect(config(telegram)).await.expect("connect");
    let inbound = channel.start().await.expect("start");
    (channel, inbound)
}

async fn next(inbound: &mut InboundStream) -> InboundDelivery {
    within("an inbound message", inbound.next()).await.expect("the inbound stream ended")
}

#[tokio::test]
async fn a_wrong_token_is_a_clear_unauthorized_error() {
    let telegram = fake().await;
    let mut config = config(&telegram);
    config.token = "123456:WRONG".to_owned();
    let error = TelegramChannel::connect(config).await.err().expect("a wrong token must fail");
    assert!(matches!(error, TelegramError::Unauthorized { .. }), "{error:?}");
    let shown = error.to_string();
    assert!(shown.contains("bot_token") && !shown.contains("WRONG"), "{shown}");
}

#[tokio::test]
async fn connecting_registers_the_command_menu() {
    let telegram = fake().await;
    let channel = TelegramChannel::connect(config(&telegram)).await.unwrap();
    assert_eq!(channel.bot_username(), telegram.bot_username());
    let commands: Vec<String> = telegram.commands().into_iter().map(|c| c.command).collect();
    assert_eq!(commands, ["new", "reset", "stop", "status", "queue"]);
}

#[tokio::test]
async fn a_failing_set_my_commands_does_not_stop_the_channel() {
    let telegram = fake().await;
    telegram.fail_next("setMyCommands", 400, "Bad Request: BOT_COMMAND_INVALID");
    let channel = TelegramChannel::connect(config(&telegram)).await.expect("connect despite setMyCommands");
    assert_eq!(channel.name(), "telegram");
}

#[tokio::test]
async fn a_private_message_arrives_as_direct_and_is_confirmed_only_after_accept() {
    let telegram = fake().await;
    let (_channel, mut inbound) = started(&telegram).await;
    let update_id = telegram.private_message(42, "Ada", "hello");

    let delivery = next(&mut inbound).await;
    let message = &delivery.message;
    assert_eq!((message.channel.as_str(), message.account_id.as_str()), ("telegram", "default"));
    assert_eq!(message.chat, ChatRef::new(ChatKind::Direct, "42"));
    assert_eq!(message.sender.id, "42");
    assert_eq!(message.sender.name.as_deref(), Some("Ada"));
    assert_eq!(message.text, "hello");
    assert_eq!(message.thread_id, None);

    // Delivered but not accepted: Telegram still holds the update.
    assert_eq!(telegram.current_offset(), update_id);
    assert_eq!(telegram.pending_updates(), 1);

    delivery.ack.accept();
    within("the offset to pass the update", telegram.wait_for_offset(update_id + 1)).await;
    assert_eq!(telegram.pending_updates(), 0);
}

#[tokio::test]
async fn an_abandoned_update_is_fetched_again_and_later_ones_are_not_lost() {
    let telegram = fake().await;
    let (_channel, mut inbound) = started(&telegram).await;
    let first = telegram.private_message(42, "Ada", "one");

    let delivery = next(&mut inbound).await;
    assert_eq!(delivery.message.text, "one");
    drop(delivery); // the core let go without recording it
    let second = telegram.private_message(42, "Ada", "two");

    let again = next(&mut inbound).await;
    assert_eq!(again.message.text, "one", "the abandoned update comes again, first");
    assert_eq!(telegram.current_offset(), first);
    again.ack.accept();
    let next_one = next(&mut inbound).await;
    assert_eq!(next_one.message.text, "two");
    next_one.ack.accept();
    within("both updates confirmed", telegram.wait_for_offset(second + 1)).await;
}

#[tokio::test]
async fn group_mentions_replies_and_forum_topics_are_normalized_through_the_wire() {
    let telegram = fake().await;
    let (channel, mut inbound) = started(&telegram).await;
    let bob = TgUser::new(5, "Bob");

    telegram.group_message(-100123, bob.clone(), "what time is it?", true);
    let mention = next(&mut inbound).await;
    assert_eq!(mention.message.chat, ChatRef::new(ChatKind::Group, "-100123"));
    assert!(mention.message.mentions_bot && !mention.message.reply_to_bot);
    mention.ack.accept();

    telegram.group_message(-100123, bob.clone(), "just chatting", false);
    let plain = next(&mut inbound).await;
    assert!(!plain.message.mentions_bot);
    plain.ack.accept();

    let target = ferry_channel::Target { chat: ChatRef::new(ChatKind::Group, "-100123"), thread_id: None };
    let sent = channel.send(ferry_channel::OutboundMessage::text(target, "it is noon")).await.unwrap();
    telegram.reply_to_bot(-100123, bob.clone(), sent.message_id.parse().unwrap(), "thanks");
    let reply = next(&mut inbound).await;
    assert!(reply.message.reply_to_bot);
    reply.ack.accept();

    telegram.topic_message(-100777, 50, bob.clone(), "in a topic");
    let topic = next(&mut inbound).await;
    assert_eq!(topic.message.chat, ChatRef::new(ChatKind::Group, "-100777"));
    assert_eq!(topic.message.thread_id.as_deref(), Some("50"));
    assert!(!topic.message.reply_to_bot, "the implicit reply to the topic's creation is not a reply to the bot");
    topic.ack.accept();

    telegram.topic_message(-100777, 1, bob, "in general");
    let general = next(&mut inbound).await;
    assert_eq!(general.message.thread_id.as_deref(), Some("1"));
    general.ack.accept();
}

#[tokio::test]
async fn captions_count_as_text_and_photos_become_attachments() {
    let telegram = fake().await;
    let (_channel, mut inbound) = started(&telegram).await;
    let mention = format!("@{} look at this", telegram.bot_username());
    telegram.caption_message(-100123, TgUser::new(5, "Bob"), &mention);
    let delivery = next(&mut inbound).await;
    assert_eq!(delivery.message.text, mention);
    assert!(delivery.message.mentions_bot);
    assert_eq!(delivery.message.attachments.len(), 1);
    assert_eq!(delivery.message.attachments[0].kind, ferry_channel::AttachmentKind::Image);
    delivery.ack.accept();
}

#[tokio::test]
async fn edits_and_service_messages_are_skipped_but_still_confirmed() {
    let telegram = fake().await;
    let (_channel, mut inbound) = started(&telegram).await;
    let bob = TgUser::new(5, "Bob");
    telegram.group_message(-100123, bob.clone(), "original", false);
    let original = next(&mut inbound).await;
    let original_id: i64 = original.message.message_id.parse().unwrap();
    original.ack.accept();

    telegram.edited_message(-100123, original_id, "edited");
    telegram.members_joined(-100123, bob.clone(), &[TgUser::new(6, "Cy")]);
    let last = telegram.group_message(-100123, bob, "after", false);
    let after = next(&mut inbound).await;
    assert_eq!(after.message.text, "after", "the edit and the join never reach the core");
    after.ack.accept();
    within("every update confirmed", telegram.wait_for_offset(last + 1)).await;
}

#[tokio::test]
async fn a_poll_conflict_backs_off_and_recovers() {
    let telegram = fake().await;
    telegram.fail_next(
        "getUpdates",
        409,
        "Conflict: terminated by other getUpdates request; make sure that only one bot instance is running",
    );
    telegram.fail_next("getUpdates", 409, "Conflict: terminated by other getUpdates request");
    let (_channel, mut inbound) = started(&telegram).await;
    telegram.private_message(42, "Ada", "still there?");

    let delivery = next(&mut inbound).await;
    assert_eq!(delivery.message.text, "still there?");
    delivery.ack.accept();

    let polls = telegram.calls_to("getUpdates");
    let statuses: Vec<_> = polls.iter().take(3).map(|call| call.status()).collect();
    assert_eq!(statuses, [Some(409), Some(409), Some(200)]);
    // Backoff: 1 s after the first conflict, 2 s after the second.
    assert!(polls[1].at - polls[0].at >= Duration::from_millis(900), "{:?}", polls[1].at - polls[0].at);
    assert!(polls[2].at - polls[1].at >= Duration::from_millis(1900), "{:?}", polls[2].at - polls[1].at);
}

#[tokio::test]
async fn a_dropped_connection_is_retried() {
    let telegram = fake().await;
    telegram.drop_next_connection("getUpdates");
    let (_channel, mut inbound) = started(&telegram).await;
    let update_id = telegram.private_message(42, "Ada", "hello again");
    let delivery = next(&mut inbound).await;
    delivery.ack.accept();
    within("the offset to pass the update", telegram.wait_for_offset(update_id + 1)).await;
}

/// Waits until the fake has answered a `getUpdates` with a malformed body: the outage began.
async fn outage_began(telegram: &FakeTelegram) {
    while !telegram.calls_to("getUpdates").iter().any(|call| call.outcome == CallOutcome::Malformed) {
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

#[tokio::test]
async fn a_long_poll_that_keeps_breaking_ends_the_stream_and_a_restart_fetches_the_outages_updates() {
    let telegram = fake().await;
    let (channel, mut inbound) = started(&telegram).await;
    let before = telegram.private_message(42, "Ada", "before");
    next(&mut inbound).await.ack.accept();
    // Confirmed by the poll that now waits for more. (Had the outage begun before that poll
    // arrived, a restart would fetch `before` again, which the core drops as a duplicate.)
    within("the offset to pass the update", telegram.wait_for_offset(before + 1)).await;
    // Six broken polls in a row, more than the poller retries by itself (five).
    for _ in 0..3 {
        telegram.malformed_next("getUpdates");
        telegram.drop_next_connection("getUpdates");
    }
    within("the outage to begin", outage_began(&telegram)).await;
    let during = telegram.private_message(42, "Ada", "during the outage");

    // Five failures with 1, 2, 4 and 8 s of backoff between them, then the stream ends.
    let ended = tokio::time::timeout(Duration::from_secs(40), inbound.next()).await;
    assert!(matches!(ended, Ok(None)), "the inbound stream should end by itself");
    assert_eq!(telegram.calls_to("getUpdates").iter().filter(|call| call.outcome == CallOutcome::Malformed).count(), 3);

    // Started again, as the supervisor does: past the last broken poll, the update of the
    // outage arrives, once, and is confirmed.
    let mut inbound = channel.start().await.expect("the channel starts again");
    let delivery = next(&mut inbound).await;
    assert_eq!(delivery.message.text, "during the outage");
    delivery.ack.accept();
    within("the offset to pass the update", telegram.wait_for_offset(during + 1)).await;
    let after = telegram.private_message(42, "Ada", "after");
    let delivery = next(&mut inbound).await;
    assert_eq!(delivery.message.text, "after", "nothing redelivered, nothing skipped");
    delivery.ack.accept();
    within("the offset to pass the update", telegram.wait_for_offset(after + 1)).await;
}

#[tokio::test]
async fn a_token_revoked_while_polling_ends_the_stream_at_once() {
    let telegram = fake().await;
    let (_channel, mut inbound) = started(&telegram).await;
    telegram.fail_next("getUpdates", 401, "Unauthorized");
    let ended = within("the inbound stream to end", inbound.next()).await;
    assert!(ended.is_none(), "no retrying with a refused token");
    assert_eq!(telegram.calls_to("getUpdates").iter().filter(|call| call.status() == Some(401)).count(), 1);
}

#[tokio::test]
async fn starting_twice_is_an_error() {
    let telegram = fake().await;
    let (channel, _inbound) = started(&telegram).await;
    assert!(channel.start().await.is_err());
    // The bot's own id is what mentions and replies are matched against.
    assert_eq!(telegram.bot_user().id, BOT_USER_ID);
}
