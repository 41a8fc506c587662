//! The Slack adapter's outbound calls against the fake Web API: threads, edits, deletes, how
//! refusals are classified for the core's outbound scheduler, and finding a sent message
//! again by its idempotency key (message metadata) when a send's outcome was unknown.

use std::time::Duration;

use ferry_channel::{Channel, ChannelError, ChatKind, ChatRef, MessageRef, OutboundMessage, Target, TextFormat};
use ferry_fakes::FakeSlack;
use ferry_slack::{ReplyToMode, SlackChannel, SlackConfig};

async fn connected(slack: &FakeSlack, reply_to_mode: ReplyToMode) -> SlackChannel {
    let mut config = SlackConfig::http(FakeSlack::BOT_TOKEN, FakeSlack::SIGNING_SECRET);
    config.api_url = slack.api_url();
    config.reply_to_mode = reply_to_mode;
    SlackChannel::connect(config).await.unwrap()
}

fn target(channel: &str, thread: Option<&str>) -> Target {
    Target { chat: ChatRef::new(ChatKind::Channel, channel), thread_id: thread.map(str::to_owned) }
}

fn mrkdwn(target: Target, text: &str) -> OutboundMessage {
    let mut message = OutboundMessage::text(target, text);
    message.format = TextFormat::Markup;
    message
}

#[tokio::test]
async fn a_reply_in_a_thread_stays_in_it_and_a_top_level_reply_stays_top_level() {
    let slack = FakeSlack::start().await.unwrap();
    let channel = connected(&slack, ReplyToMode::Off).await;
    assert!(!channel.capabilities().supports_reply_to, "[[reply_to_current]] is ignored with reply_to_mode off");
    channel.send(mrkdwn(target("C1", Some("1700000000.000001")), "in thread")).await.unwrap();
    // Even if asked to thread, off means a top-level message gets no invented thread_ts…
    channel.send(mrkdwn(target("C1", None), "*top level*")).await.unwrap();
    let shown = slack.messages_in("C1");
    assert_eq!(shown[0].thread_ts.as_deref(), Some("1700000000.000001"));
    assert_eq!((shown[1].thread_ts.as_deref(), shown[1].text.as_str()), (None, "*top level*"));
}

#[tokio::test]
async fn with_reply_to_mode_all_a_top_level_message_is_answered_in_a_thread_under_it() {
    let slack = FakeSlack::start().await.unwrap();
    let channel = connected(&slack, ReplyToMode::All).await;
    assert!(channel.capabilities().supports_reply_to);
    let mut message = mrkdwn(target("C1", None), "threaded");
    message.reply_to_message_id = Some("1700000000.000009".to_owned());
    channel.send(message).await.unwrap();
    assert_eq!(slack.messages_in("C1")[0].thread_ts.as_deref(), Some("1700000000.000009"));
}

#[tokio::test]
async fn mrkdwn_tokens_go_as_is_and_plain_text_is_escaped() {
    let slack = FakeSlack::start().await.unwrap();
    let channel = connected(&slack, ReplyToMode::Off).await;
    channel.send(mrkdwn(target("C1", None), "see <https://example.com|the docs>, <@U1>")).await.unwrap();
    channel.send(OutboundMessage::text(target("C1", None), "1 < 2 & 3 > 2")).await.unwrap();
    let shown = slack.messages_in("C1");
    assert_eq!(shown[0].text, "see <https://example.com|the docs>, <@U1>");
    assert_eq!(shown[1].text, "1 &lt; 2 &amp; 3 &gt; 2");
}

#[tokio::test]
async fn a_preview_is_updated_in_place_and_deleted() {
    let slack = FakeSlack::start().await.unwrap();
    let channel = connected(&slack, ReplyToMode::Off).await;
    let sent = channel.send(mrkdwn(target("C1", None), "draft")).await.unwrap();
    let reference = MessageRef { target: target("C1", None), message_id: sent.message_id.clone() };
    channel.edit(&reference, "final", TextFormat::Markup).await.unwrap();
    channel.edit(&reference, "final", TextFormat::Markup).await.unwrap(); // same text: fine
    assert_eq!((slack.messages_in("C1")[0].text.as_str(), slack.messages_in("C1")[0].edits), ("final", 2));
    channel.delete(&reference).await.unwrap();
    assert!(slack.messages_in("C1").is_empty());
    let gone = channel.edit(&reference, "x", TextFormat::Markup).await.unwrap_err();
    assert!(matches!(gone, ChannelError::Rejected { ref reason } if reason == "message_not_found"), "{gone:?}");
}

#[tokio::test]
async fn refusals_are_classified_for_the_outbound_scheduler() {
    let slack = FakeSlack::start().await.unwrap();
    let channel = connected(&slack, ReplyToMode::Off).await;
    slack.rate_limit_next("chat.postMessage", 1, 2);
    let limited = channel.send(mrkdwn(target("C1", None), "a")).await.unwrap_err();
    assert_eq!(limited, ChannelError::RateLimited { retry_after: Some(Duration::from_secs(2)) });
    let long = "x".repeat(40_001);
    let too_long = channel.send(mrkdwn(target("C1", None), &long)).await.unwrap_err();
    assert_eq!(too_long, ChannelError::TooLong { len: 40_001, limit: 40_000 });
    slack.fail_next("chat.postMessage", "invalid_auth");
    assert!(matches!(channel.send(mrkdwn(target("C1", None), "a")).await, Err(ChannelError::Unauthorized { .. })));
    slack.fail_next_with_status("chat.postMessage", 500);
    assert!(matches!(channel.send(mrkdwn(target("C1", None), "a")).await, Err(ChannelError::Transient { .. })));
    slack.fail_next("chat.postMessage", "channel_not_found");
    assert!(matches!(channel.send(mrkdwn(target("C1", None), "a")).await, Err(ChannelError::Rejected { .. })));
    assert!(slack.messages().is_empty(), "nothing refused was posted");
}

fn keyed(target: Target, text: &str, key: &str) -> OutboundMessage {
    let mut message = mrkdwn(target, text);
    message.idempotency_key = Some(key.to_owned());
    message
}

#[tokio::test]
async fn a_keyed_message_carries_its_key_in_metadata_and_find_sent_finds_it_top_level_and_in_a_thread() {
    let slack = FakeSlack::start().await.unwrap();
    let channel = connected(&slack, ReplyToMode::Off).await;
    let question = slack.channel_message("C1", "U1", "question");
    let top = channel.send(keyed(target("C1", None), "top", "d42:0")).await.unwrap();
    let threaded = channel.send(keyed(target("C1", Some(&question.ts)), "threaded", "d42:1")).await.unwrap();
    channel.send(mrkdwn(target("C1", None), "no key")).await.unwrap();
    let shown = slack.messages_in("C1");
    let metadata = serde_json::json!({"event_type": "ferry_reply", "event_payload": {"idempotency_key": "d42:0"}});
    assert_eq!(shown[0].metadata, Some(metadata));
    assert_eq!(shown[2].metadata, None);

    let found = channel.find_sent(&keyed(target("C1", None), "top", "d42:0")).await.unwrap();
    assert_eq!(found, Some(top), "the same id send returned");
    let found = channel.find_sent(&keyed(target("C1", Some(&question.ts)), "threaded", "d42:1")).await.unwrap();
    assert_eq!(found, Some(threaded));
    assert_eq!(channel.find_sent(&keyed(target("C1", None), "?", "d42:9")).await.unwrap(), None);
    assert_eq!(channel.find_sent(&keyed(target("C1", Some(&question.ts)), "?", "d42:9")).await.unwrap(), None);
    assert_eq!(channel.find_sent(&keyed(target("C2", None), "top", "d42:0")).await.unwrap(), None, "another channel");
    assert_eq!(channel.find_sent(&mrkdwn(target("C1", None), "top")).await.unwrap(), None, "no key, nothing sought");
    let history = &slack.calls_to("conversations.history")[0];
    assert_eq!(history.params["include_all_metadata"], "true");
    assert_eq!(slack.calls_to("conversations.replies")[0].params["ts"].as_str(), Some(question.ts.as_str()));
}

#[tokio::test]
async fn with_reply_to_mode_all_find_sent_looks_in_the_thread_the_reply_went_to() {
    let slack = FakeSlack::start().await.unwrap();
    let channel = connected(&slack, ReplyToMode::All).await;
    let question = slack.channel_message("C1", "U1", "question");
    let mut message = keyed(target("C1", None), "answer", "d5:0");
    message.reply_to_message_id = Some(question.ts.clone());
    let sent = channel.send(message.clone()).await.unwrap();
    assert_eq!(slack.messages_in("C1")[0].thread_ts.as_deref(), Some(question.ts.as_str()));
    assert_eq!(channel.find_sent(&message).await.unwrap(), Some(sent));
    message.idempotency_key = Some("d5:1".into());
    assert_eq!(channel.find_sent(&message).await.unwrap(), None);
}

#[tokio::test]
async fn after_a_post_whose_answer_was_lost_send_is_transient_and_find_sent_finds_the_message() {
    let slack = FakeSlack::start().await.unwrap();
    let channel = connected(&slack, ReplyToMode::Off).await;
    slack.apply_then_drop_next("chat.postMessage");
    let error = channel.send(keyed(target("C1", None), "landed", "d9:0")).await.unwrap_err();
    assert!(matches!(error, ChannelError::Transient { .. }), "{error:?}");
    let shown = slack.messages_in("C1");
    assert_eq!(shown.len(), 1, "the platform applied it");
    let found = channel.find_sent(&keyed(target("C1", None), "landed", "d9:0")).await.unwrap();
    assert_eq!(found.map(|sent| sent.message_id), Some(shown[0].ts.clone()));

    // Lost before it was applied: nothing to find, so sending again is right.
    slack.drop_next_before_apply("chat.postMessage");
    assert!(matches!(channel.send(keyed(target("C1", None), "x", "d9:1")).await, Err(ChannelError::Transient { .. })));
    assert_eq!(channel.find_sent(&keyed(target("C1", None), "x", "d9:1")).await.unwrap(), None);
}

#[tokio::test]
async fn find_sent_failures_are_classified_like_every_other_call() {
    let slack = FakeSlack::start().await.unwrap();
    let channel = connected(&slack, ReplyToMode::Off).await;
    slack.rate_limit_next("conversations.history", 1, 2);
    assert_eq!(
        channel.find_sent(&keyed(target("C1", None), "x", "k")).await,
        Err(ChannelError::RateLimited { retry_after: Some(Duration::from_secs(2)) })
    );
    slack.fail_next_with_status("conversations.history", 503);
    assert!(matches!(
        channel.find_sent(&keyed(target("C1", None), "x", "k")).await,
        Err(ChannelError::Transient { .. })
    ));
    slack.drop_next_before_apply("conversations.history");
    assert!(matches!(
        channel.find_sent(&keyed(target("C1", None), "x", "k")).await,
        Err(ChannelError::Transient { .. })
    ));
    slack.fail_next("conversations.history", "not_in_channel");
    assert!(matches!(
        channel.find_sent(&keyed(target("C1", None), "x", "k")).await,
        Err(ChannelError::Rejected { .. })
    ));
    // A thread that does not exist holds no message.
    assert_eq!(channel.find_sent(&keyed(target("C1", Some("1.000001")), "x", "k")).await, Ok(None));
}
