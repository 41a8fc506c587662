//! Catching up after a Socket Mode reconnect, against the fake Slack: messages written while
//! no socket was open are only in `conversations.history`, and reach the core from there.

use ferry_channel::{ChatKind, InboundDelivery, InboundStream};
use ferry_fakes::{FakeSlack, SLACK_BOT_ID};
use futures::StreamExt;

mod common;
use common::{soon, started};

async fn next(inbound: &mut InboundStream) -> InboundDelivery {
    soon(inbound.next()).await.expect("the inbound stream ended")
}

/// A DM the core accepted: the conversation `DU1` is recently active.
async fn seen_dm(slack: &FakeSlack, inbound: &mut InboundStream) {
    let event = slack.dm("U1", "hello");
    next(inbound).await.ack.accept();
    soon(slack.wait_for_ack(&event.event_id)).await;
}

/// Closes Socket Mode, runs `meanwhile`, and lets the adapter reconnect.
async fn while_closed(slack: &FakeSlack, meanwhile: impl FnOnce(&FakeSlack)) {
    slack.close_sockets();
    soon(slack.wait_until(|s| s.connections().1 == 0)).await;
    meanwhile(slack);
    let opened = slack.connections().0;
    slack.open_sockets();
    soon(slack.wait_for_connections(opened + 1)).await;
}

#[tokio::test]
async fn messages_missed_while_the_socket_was_closed_reach_the_core_oldest_first_after_the_reconnect() {
    let slack = FakeSlack::start().await.unwrap();
    let (_channel, mut inbound) = started(&slack).await;
    seen_dm(&slack, &mut inbound).await;
    while_closed(&slack, |slack| {
        slack.history_only_message("DU1", "U1", "one");
        slack.history_only_bot_message("DU1", SLACK_BOT_ID, "the bot's own");
        slack.history_only_message("DU1", "U1", "two");
        slack.history_only_bot_message("DU1", "B0OTHER", "beep");
    })
    .await;
    let mut seen = Vec::new();
    for _ in 0..3 {
        let delivery = next(&mut inbound).await;
        let message = &delivery.message;
        assert_eq!((message.chat.kind, message.chat.id.as_str()), (ChatKind::Direct, "DU1"));
        seen.push((message.text.clone(), message.sender.is_bot));
        delivery.ack.accept();
    }
    let expected = [("one".to_owned(), false), ("two".to_owned(), false), ("beep".to_owned(), true)];
    assert_eq!(seen, expected, "oldest first, the bot's own skipped, another bot's flagged");
    // Nothing was missed since: a second reconnect reads nothing again.
    while_closed(&slack, |_| {}).await;
    slack.dm("U1", "next");
    assert_eq!(next(&mut inbound).await.message.text, "next");
}

#[tokio::test]
async fn a_missed_message_the_core_let_go_of_is_read_again_at_the_next_reconnect() {
    let slack = FakeSlack::start().await.unwrap();
    let (_channel, mut inbound) = started(&slack).await;
    seen_dm(&slack, &mut inbound).await;
    while_closed(&slack, |slack| {
        slack.history_only_message("DU1", "U1", "lost once");
    })
    .await;
    let first = next(&mut inbound).await;
    assert_eq!(first.message.text, "lost once");
    drop(first.ack); // the core let go of it without recording it
    while_closed(&slack, |_| {}).await;
    let again = next(&mut inbound).await;
    assert_eq!(again.message.text, "lost once");
    again.ack.accept();
}

#[tokio::test]
async fn a_conversation_whose_history_cannot_be_read_is_skipped_and_the_others_are_caught_up() {
    let slack = FakeSlack::start().await.unwrap();
    let (_channel, mut inbound) = started(&slack).await;
    let event = slack.channel_message("C1", "U2", "in the channel");
    next(&mut inbound).await.ack.accept();
    soon(slack.wait_for_ack(&event.event_id)).await;
    seen_dm(&slack, &mut inbound).await;
    while_closed(&slack, |slack| {
        slack.history_only_message("C1", "U2", "never read");
        slack.history_only_message("DU1", "U1", "caught up");
        // Conversations are read in id order: C1 first.
        slack.fail_next("conversations.history", "internal_error");
    })
    .await;
    assert_eq!(next(&mut inbound).await.message.text, "caught up");
    slack.dm("U1", "live again");
    assert_eq!(next(&mut inbound).await.message.text, "live again", "the socket kept running");
    let reads = slack.calls_to("conversations.history");
    assert_eq!(reads.len(), 2, "{reads:#?}");
    assert_eq!(reads[0].params["channel"], "C1");
}
