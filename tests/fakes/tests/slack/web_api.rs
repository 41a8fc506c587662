use ferry_fakes::{FakeSlack, SLACK_BOT_USER_ID};
use serde_json::json;
use slack_morphism::api::{SlackApiAuthTestResponse, SlackApiChatPostMessageResponse, SlackApiChatUpdateResponse};

use crate::{call, call_with};

#[tokio::test]
async fn auth_test_answers_get_and_post_and_refuses_a_wrong_token() {
    let slack = FakeSlack::start().await.unwrap();
    let url = format!("{}/auth.test", slack.api_url());
    let get = reqwest::Client::new().get(&url).bearer_auth(FakeSlack::BOT_TOKEN).send().await.unwrap();
    let body: serde_json::Value = get.json().await.unwrap();
    assert_eq!((body["ok"].as_bool(), body["user_id"].as_str()), (Some(true), Some(SLACK_BOT_USER_ID)));
    let parsed: SlackApiAuthTestResponse = serde_json::from_value(body).unwrap();
    assert_eq!(parsed.user_id.0, SLACK_BOT_USER_ID);
    assert_eq!(call(&slack, "auth.test", json!({})).await["ok"], true);
    let (status, _, refused) = call_with(&slack, "xoxb-wrong", "auth.test", json!({})).await;
    assert_eq!((status, refused), (200, json!({"ok": false, "error": "invalid_auth"})));
    let (_, _, wrong_kind) = call_with(&slack, FakeSlack::APP_TOKEN, "auth.test", json!({})).await;
    assert_eq!(wrong_kind["error"], "not_allowed_token_type");
}

#[tokio::test]
async fn post_update_and_delete_keep_the_channel_as_a_user_would_see_it() {
    let slack = FakeSlack::start().await.unwrap();
    let posted = call(&slack, "chat.postMessage", json!({"channel": "C1", "text": "draft"})).await;
    let parsed: SlackApiChatPostMessageResponse = serde_json::from_value(posted.clone()).unwrap();
    let ts = parsed.ts.0;
    let threaded =
        call(&slack, "chat.postMessage", json!({"channel": "C1", "text": "in thread", "thread_ts": "1.000001"})).await;
    assert_eq!(threaded["message"]["thread_ts"], "1.000001");
    let updated = call(&slack, "chat.update", json!({"channel": "C1", "ts": ts, "text": "final"})).await;
    let _: SlackApiChatUpdateResponse = serde_json::from_value(updated).unwrap();
    let shown = slack.messages_in("C1");
    assert_eq!((shown[0].text.as_str(), shown[0].edits, shown[0].thread_ts.as_deref()), ("final", 1, None));
    assert_eq!(shown[1].thread_ts.as_deref(), Some("1.000001"));
    assert_eq!(call(&slack, "chat.delete", json!({"channel": "C1", "ts": ts})).await["ok"], true);
    assert_eq!(slack.messages_in("C1").len(), 1);
    let gone = call(&slack, "chat.update", json!({"channel": "C1", "ts": ts, "text": "x"})).await;
    assert_eq!(gone["error"], "message_not_found");
}

#[tokio::test]
async fn refusals_use_slacks_error_codes() {
    let slack = FakeSlack::start().await.unwrap();
    let long = "x".repeat(40_001);
    assert_eq!(call(&slack, "chat.postMessage", json!({"channel": "C1", "text": long})).await["error"], "msg_too_long");
    assert_eq!(call(&slack, "chat.postMessage", json!({"channel": "C1", "text": " "})).await["error"], "no_text");
    assert_eq!(
        call(&slack, "chat.postMessage", json!({"channel": "X1", "text": "a"})).await["error"],
        "channel_not_found"
    );
    assert_eq!(call(&slack, "chat.nonsense", json!({})).await["error"], "unknown_method");
    slack.fail_next("chat.postMessage", "not_in_channel");
    assert_eq!(
        call(&slack, "chat.postMessage", json!({"channel": "C1", "text": "a"})).await["error"],
        "not_in_channel"
    );
    assert!(slack.messages().is_empty());
}

#[tokio::test]
async fn scripted_and_enforced_rate_limits_answer_429_with_retry_after() {
    let slack = FakeSlack::start().await.unwrap();
    slack.rate_limit_next("chat.postMessage", 2, 3);
    for _ in 0..2 {
        let (status, retry_after, body) =
            call_with(&slack, FakeSlack::BOT_TOKEN, "chat.postMessage", json!({"channel": "C1", "text": "a"})).await;
        assert_eq!((status, retry_after.as_deref(), body["error"].as_str()), (429, Some("3"), Some("ratelimited")));
    }
    assert_eq!(call(&slack, "chat.postMessage", json!({"channel": "C1", "text": "a"})).await["ok"], true);
    slack.enforce_rate_limits();
    let mut statuses = Vec::new();
    for _ in 0..5 {
        statuses.push(
            call_with(&slack, FakeSlack::BOT_TOKEN, "chat.postMessage", json!({"channel": "C2", "text": "b"})).await.0,
        );
    }
    assert_eq!(statuses, [200, 200, 200, 429, 429], "a burst of three, then one a second");
    assert_eq!(slack.rate_limited_count(), 4);
}

#[tokio::test]
async fn conversations_info_tells_dms_group_dms_and_channels_apart() {
    let slack = FakeSlack::start().await.unwrap();
    slack.mark_mpim("G2");
    let info = |channel: &'static str| {
        let slack = &slack;
        async move { call(slack, "conversations.info", json!({"channel": channel})).await["channel"].clone() }
    };
    assert_eq!(info("D1").await["is_im"], true);
    assert_eq!(info("C1").await["is_channel"], true);
    assert_eq!(
        (info("G1").await["is_mpim"].clone(), info("G1").await["is_private"].clone()),
        (json!(false), json!(true))
    );
    assert_eq!(info("G2").await["is_mpim"], true);
    let parsed: slack_morphism::api::SlackApiConversationsInfoResponse =
        serde_json::from_value(call(&slack, "conversations.info", json!({"channel": "G2"})).await).unwrap();
    assert_eq!(parsed.channel.flags.is_mpim, Some(true));
}
