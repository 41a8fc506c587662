//! The Slack adapter in Socket Mode against the fake Slack: what reaches the core, and when
//! Slack is told it arrived.

use ferry_channel::{ChatKind, InboundDelivery, InboundStream};
use ferry_fakes::{FakeSlack, SLACK_BOT_USER_ID};
use ferry_slack::{SlackChannel, SlackConfig, SlackError};
use futures::StreamExt;

mod common;
use common::{soon, started};

async fn next(inbound: &mut InboundStream) -> InboundDelivery {
    soon(inbound.next()).await.expect("the inbound stream ended")
}

#[tokio::test]
async fn a_dm_reaches_the_core_and_is_acked_only_after_the_core_accepts_it() {
    let slack = FakeSlack::start().await.unwrap();
    let (channel, mut inbound) = started(&slack).await;
    assert_eq!(channel.bot_user_id(), SLACK_BOT_USER_ID);
    let event = slack.dm("U1", "hello there");
    let delivery = next(&mut inbound).await;
    let message = &delivery.message;
    assert_eq!(
        (message.chat.kind, message.chat.id.as_str(), message.text.as_str()),
        (ChatKind::Direct, "DU1", "hello there")
    );
    assert_eq!((message.message_id.as_str(), message.thread_id.as_deref()), (event.ts.as_str(), None));
    assert!(!slack.is_acked(&event.event_id), "not acknowledged before the core decided");
    delivery.ack.accept();
    soon(slack.wait_for_ack(&event.event_id)).await;
}

#[tokio::test]
async fn a_thread_reply_carries_its_thread_and_channels_are_channels() {
    let slack = FakeSlack::start().await.unwrap();
    let (_channel, mut inbound) = started(&slack).await;
    slack.thread_reply("C1", "1700000000.000001", "U1", "in the thread");
    let delivery = next(&mut inbound).await;
    assert_eq!(delivery.message.chat.kind, ChatKind::Channel);
    assert_eq!(delivery.message.thread_id.as_deref(), Some("1700000000.000001"));
    delivery.ack.accept();
}

#[tokio::test]
async fn an_abandoned_event_is_not_acked_and_comes_again_after_a_reconnect() {
    let slack = FakeSlack::start().await.unwrap();
    let (_channel, mut inbound) = started(&slack).await;
    let event = slack.dm("U1", "important");
    let first = next(&mut inbound).await;
    drop(first.ack); // the core let go of it without recording it
    assert!(!slack.is_acked(&event.event_id));
    slack.disconnect("refresh_requested");
    let again = next(&mut inbound).await;
    assert_eq!(again.message.message_id, event.ts);
    again.ack.accept();
    soon(slack.wait_for_ack(&event.event_id)).await;
    assert_eq!(slack.deliveries(&event.event_id), 2);
}

#[tokio::test]
async fn an_envelope_whose_ack_was_lost_is_acked_again_without_reaching_the_core_twice() {
    let slack = FakeSlack::start().await.unwrap();
    let (_channel, mut inbound) = started(&slack).await;
    slack.lose_next_acks(1);
    let event = slack.dm("U1", "once please");
    next(&mut inbound).await.ack.accept();
    soon(slack.wait_until(|s| s.lost_acks() == 1)).await;
    slack.disconnect("refresh_requested");
    soon(slack.wait_for_ack(&event.event_id)).await;
    assert_eq!(slack.deliveries(&event.event_id), 2, "Slack redelivered it");
    // The next message is the next thing the core sees: the redelivery never reached it.
    slack.dm("U1", "next");
    assert_eq!(next(&mut inbound).await.message.text, "next");
}

#[tokio::test]
async fn a_mention_arriving_as_message_and_app_mention_is_one_message_to_the_core() {
    let slack = FakeSlack::start().await.unwrap();
    let (_channel, mut inbound) = started(&slack).await;
    let (message, mention) = slack.mention("C1", "U1", "what's up?");
    let first = next(&mut inbound).await;
    let second = next(&mut inbound).await;
    // Both carry the same chat, thread and ts, which is the core's dedupe key.
    for delivery in [&first, &second] {
        assert!(delivery.message.mentions_bot);
        assert_eq!(
            (delivery.message.chat.id.as_str(), delivery.message.message_id.as_str()),
            ("C1", message.ts.as_str())
        );
        assert_eq!(delivery.message.thread_id, None);
    }
    first.ack.accept();
    second.ack.accept();
    soon(slack.wait_for_ack(&mention.event_id)).await;
}

#[tokio::test]
async fn edits_joins_and_the_bots_own_posts_are_acked_without_reaching_the_core() {
    let slack = FakeSlack::start().await.unwrap();
    let (_channel, mut inbound) = started(&slack).await;
    let mut edit = FakeSlack::message_body("C1", "channel", "U1", "", None);
    edit["subtype"] = "message_changed".into();
    edit["message"] = serde_json::json!({"text": "edited", "user": "U1", "ts": "1.000001"});
    let edit = slack.event(edit);
    slack.deliver(&edit);
    let mut own = FakeSlack::message_body("C1", "channel", SLACK_BOT_USER_ID, "my reply", None);
    own["bot_id"] = ferry_fakes::SLACK_BOT_ID.into();
    let own = slack.event(own);
    slack.deliver(&own);
    soon(slack.wait_for_ack(&edit.event_id)).await;
    soon(slack.wait_for_ack(&own.event_id)).await;
    slack.channel_message("C1", "U1", "a real one");
    assert_eq!(next(&mut inbound).await.message.text, "a real one");
}

#[tokio::test]
async fn a_wrong_bot_token_or_app_token_fails_connect_clearly() {
    let slack = FakeSlack::start().await.unwrap();
    let mut config = SlackConfig::socket("xoxb-wrong", FakeSlack::APP_TOKEN);
    config.api_url = slack.api_url();
    let error = SlackChannel::connect(config).await.err().expect("refused");
    assert!(matches!(error, SlackError::Unauthorized { ref code } if code == "invalid_auth"), "{error}");
    assert!(error.to_string().contains("bot_token") && !error.to_string().contains("xoxb-wrong"), "{error}");
    let mut config = SlackConfig::socket(FakeSlack::BOT_TOKEN, "xapp-wrong");
    config.api_url = slack.api_url();
    let error = SlackChannel::connect(config).await.err().expect("refused");
    assert!(error.to_string().contains("app_token"), "{error}");
}

#[tokio::test]
async fn an_app_mention_in_a_g_conversation_is_looked_up_once_and_a_group_dm_is_a_group() {
    let slack = FakeSlack::start().await.unwrap();
    let (_channel, mut inbound) = started(&slack).await;
    slack.mark_mpim("G5");
    for text in ["first", "second"] {
        let body = serde_json::json!({"type": "app_mention", "channel": "G5", "user": "U1", "text": format!("<@{SLACK_BOT_USER_ID}> {text}")});
        let event = slack.event(body);
        slack.deliver(&event);
        let delivery = next(&mut inbound).await;
        assert_eq!((delivery.message.chat.kind, delivery.message.mentions_bot), (ChatKind::Group, true));
        delivery.ack.accept();
    }
    slack.deliver(&slack.event(FakeSlack::message_body("G6", "group", "U1", "private channel", None)));
    assert_eq!(next(&mut inbound).await.message.chat.kind, ChatKind::Channel);
    assert_eq!(slack.calls_to("conversations.info").len(), 1, "cached after the first lookup");
}

#[tokio::test]
async fn a_socket_dropped_without_a_close_frame_is_reopened_and_nothing_is_lost() {
    let slack = FakeSlack::start().await.unwrap();
    let (_channel, mut inbound) = started(&slack).await;
    soon(slack.wait_for_connections(1)).await;
    slack.drop_sockets();
    let event = slack.dm("U1", "after the outage");
    let delivery = next(&mut inbound).await;
    assert_eq!(delivery.message.text, "after the outage");
    delivery.ack.accept();
    soon(slack.wait_for_ack(&event.event_id)).await;
    assert!(slack.connections().0 >= 2, "a new socket was opened");
}
