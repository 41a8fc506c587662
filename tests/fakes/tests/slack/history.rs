//! Message metadata, `conversations.history` / `conversations.replies`, and calls whose
//! connection is dropped: what a Slack client needs to find a message it may have sent.

use ferry_fakes::{FakeSlack, SLACK_BOT_ID, SLACK_BOT_USER_ID, SlackDropped};
use serde_json::{Value, json};
use slack_morphism::api::{SlackApiConversationsHistoryResponse, SlackApiConversationsRepliesResponse};

use crate::call;

fn keyed(key: &str) -> Value {
    json!({"event_type": "ferry_reply", "event_payload": {"idempotency_key": key}})
}

/// POSTs JSON to a method; `Err` when the connection broke before a whole answer came.
async fn try_call(slack: &FakeSlack, method: &str, params: Value) -> reqwest::Result<Value> {
    let url = format!("{}/{method}", slack.api_url());
    let response = reqwest::Client::new().post(url).bearer_auth(FakeSlack::BOT_TOKEN).json(&params).send().await?;
    response.json().await
}

/// GETs a method with query parameters, as slack-morphism calls the history methods.
async fn get(slack: &FakeSlack, method: &str, query: &[(&str, &str)]) -> Value {
    let url = format!("{}/{method}", slack.api_url());
    let response = reqwest::Client::new().get(url).bearer_auth(FakeSlack::BOT_TOKEN).query(query).send().await.unwrap();
    response.json().await.unwrap()
}

fn texts(page: &Value) -> Vec<&str> {
    page["messages"].as_array().unwrap().iter().map(|m| m["text"].as_str().unwrap()).collect()
}

#[tokio::test]
async fn history_lists_top_level_messages_newest_first_with_metadata_only_when_asked() {
    let slack = FakeSlack::start().await.unwrap();
    let question = slack.channel_message("C1", "U1", "question");
    call(&slack, "chat.postMessage", json!({"channel": "C1", "text": "first", "metadata": keyed("d1:0")})).await;
    let in_thread = json!({"channel": "C1", "text": "in thread", "thread_ts": question.ts, "metadata": keyed("d1:1")});
    let reply = call(&slack, "chat.postMessage", in_thread).await;
    call(&slack, "chat.postMessage", json!({"channel": "C1", "text": "plain"})).await;
    call(&slack, "chat.postMessage", json!({"channel": "C2", "text": "elsewhere"})).await;
    assert_eq!(slack.messages_in("C1")[0].metadata, Some(keyed("d1:0")));

    let bare = get(&slack, "conversations.history", &[("channel", "C1")]).await;
    assert_eq!(texts(&bare), ["plain", "first", "question"], "newest first, no thread replies");
    assert!(bare["messages"].as_array().unwrap().iter().all(|m| m.get("metadata").is_none()));
    assert_eq!(bare["has_more"], false);

    let full = get(&slack, "conversations.history", &[("channel", "C1"), ("include_all_metadata", "true")]).await;
    let messages = full["messages"].as_array().unwrap();
    assert_eq!(messages[1]["metadata"], keyed("d1:0"));
    assert_eq!(
        (messages[1]["user"].as_str(), messages[1]["bot_id"].as_str()),
        (Some(SLACK_BOT_USER_ID), Some(SLACK_BOT_ID))
    );
    assert!(messages[0].get("metadata").is_none(), "posted without metadata");
    let parent = &messages[2];
    assert_eq!((parent["user"].as_str(), parent["reply_count"].as_u64()), (Some("U1"), Some(1)));
    assert_eq!(parent["latest_reply"], reply["ts"]);
    // slack-morphism, the adapter's SDK, reads the page.
    let parsed: SlackApiConversationsHistoryResponse = serde_json::from_value(full.clone()).unwrap();
    assert_eq!(parsed.messages[1].content.metadata.as_ref().unwrap().event_type, "ferry_reply");

    let limited = call(&slack, "conversations.history", json!({"channel": "C1", "limit": 2})).await;
    assert_eq!((texts(&limited), limited["has_more"].as_bool()), (vec!["plain", "first"], Some(true)));
    let since = call(&slack, "conversations.history", json!({"channel": "C1", "oldest": question.ts})).await;
    assert_eq!(texts(&since), ["plain", "first"], "oldest is exclusive");
}

#[tokio::test]
async fn replies_list_a_thread_parent_first_and_refuse_an_unknown_thread() {
    let slack = FakeSlack::start().await.unwrap();
    let question = slack.channel_message("C1", "U1", "question");
    slack.thread_reply("C1", &question.ts, "U2", "me too");
    let post = json!({"channel": "C1", "text": "answer", "thread_ts": question.ts, "metadata": keyed("d1:0")});
    let answer = call(&slack, "chat.postMessage", post).await;

    // Form-encoded, as other clients send it.
    let url = format!("{}/conversations.replies", slack.api_url());
    let form = [("channel", "C1"), ("ts", question.ts.as_str()), ("include_all_metadata", "1")];
    let thread: Value = reqwest::Client::new()
        .post(url)
        .bearer_auth(FakeSlack::BOT_TOKEN)
        .form(&form)
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert_eq!(texts(&thread), ["question", "me too", "answer"]);
    assert_eq!(thread["messages"][2]["metadata"], keyed("d1:0"));
    assert_eq!(thread["messages"][2]["thread_ts"].as_str(), Some(question.ts.as_str()));
    let parsed: SlackApiConversationsRepliesResponse = serde_json::from_value(thread).unwrap();
    assert_eq!(parsed.messages.len(), 3);

    let bare = get(&slack, "conversations.replies", &[("channel", "C1"), ("ts", answer["ts"].as_str().unwrap())]).await;
    assert_eq!(texts(&bare), ["question", "me too", "answer"], "any ts of the thread names it");
    assert!(bare["messages"][2].get("metadata").is_none());
    let unknown = call(&slack, "conversations.replies", json!({"channel": "C1", "ts": "1.000001"})).await;
    assert_eq!(unknown["error"], "thread_not_found");
}

#[tokio::test]
async fn an_update_keeps_the_metadata_unless_given_and_bad_metadata_is_refused() {
    let slack = FakeSlack::start().await.unwrap();
    let posted =
        call(&slack, "chat.postMessage", json!({"channel": "C1", "text": "a", "metadata": keyed("d1:0")})).await;
    let ts = posted["ts"].as_str().unwrap();
    call(&slack, "chat.update", json!({"channel": "C1", "ts": ts, "text": "b"})).await;
    assert_eq!(slack.messages_in("C1")[0].metadata, Some(keyed("d1:0")));
    call(&slack, "chat.update", json!({"channel": "C1", "ts": ts, "text": "c", "metadata": {}})).await;
    assert_eq!(slack.messages_in("C1")[0].metadata, None);
    // As a URL-encoded JSON string, the way form clients send it.
    let as_text = keyed("d1:1").to_string();
    call(&slack, "chat.update", json!({"channel": "C1", "ts": ts, "text": "d", "metadata": as_text})).await;
    assert_eq!(slack.messages_in("C1")[0].metadata, Some(keyed("d1:1")));
    let bad =
        call(&slack, "chat.postMessage", json!({"channel": "C1", "text": "x", "metadata": {"event_payload": {}}}))
            .await;
    assert_eq!(bad["error"], "invalid_metadata_format");
    assert_eq!(slack.messages_in("C1").len(), 1);
}

#[tokio::test]
async fn apply_then_drop_posts_updates_and_deletes_but_the_client_gets_a_connection_error() {
    let slack = FakeSlack::start().await.unwrap();
    slack.apply_then_drop_next("chat.postMessage");
    let post = json!({"channel": "C1", "text": "landed", "metadata": keyed("d1:0")});
    assert!(try_call(&slack, "chat.postMessage", post).await.is_err());
    let shown = slack.messages_in("C1");
    assert_eq!((shown.len(), shown[0].text.as_str()), (1, "landed"));
    let found = call(&slack, "conversations.history", json!({"channel": "C1", "include_all_metadata": true})).await;
    assert_eq!(found["messages"][0]["metadata"], keyed("d1:0"), "findable although the answer was lost");

    slack.apply_then_drop_next("chat.update");
    let update = json!({"channel": "C1", "ts": shown[0].ts, "text": "edited"});
    assert!(try_call(&slack, "chat.update", update).await.is_err());
    assert_eq!(slack.messages_in("C1")[0].text, "edited");
    slack.apply_then_drop_next("chat.delete");
    assert!(try_call(&slack, "chat.delete", json!({"channel": "C1", "ts": shown[0].ts})).await.is_err());
    assert!(slack.messages_in("C1").is_empty());

    let dropped: Vec<_> = slack.calls().iter().map(|c| (c.method.clone(), c.status, c.dropped)).collect();
    assert_eq!(dropped[0], ("chat.postMessage".to_owned(), None, Some(SlackDropped::AfterApply(200))));
    assert_eq!(dropped[2].2, Some(SlackDropped::AfterApply(200)));
    assert_eq!(dropped[3].2, Some(SlackDropped::AfterApply(200)));
    assert_eq!(slack.wait_for_calls("chat.delete", 1).await.len(), 1, "a dropped call counts as finished");
}

#[tokio::test]
async fn drop_next_before_apply_loses_the_call_and_applies_nothing() {
    let slack = FakeSlack::start().await.unwrap();
    let posted = call(&slack, "chat.postMessage", json!({"channel": "C1", "text": "one"})).await;
    let ts = posted["ts"].as_str().unwrap();
    for method in ["chat.postMessage", "chat.update", "chat.delete"] {
        slack.drop_next_before_apply(method);
        let params = json!({"channel": "C1", "ts": ts, "text": "lost"});
        assert!(try_call(&slack, method, params).await.is_err(), "{method}");
    }
    let shown = slack.messages_in("C1");
    assert_eq!((shown.len(), shown[0].text.as_str(), shown[0].edits), (1, "one", 0));
    let dropped: Vec<_> = slack.calls().iter().skip(1).map(|c| (c.status, c.dropped)).collect();
    assert_eq!(dropped, [(None, Some(SlackDropped::BeforeApply)); 3]);
    // Used once: the next call is answered.
    assert_eq!(call(&slack, "chat.delete", json!({"channel": "C1", "ts": ts})).await["ok"], true);
}

#[tokio::test]
async fn a_history_only_message_is_listed_but_never_pushed_and_another_apps_is_a_bot_message() {
    let slack = FakeSlack::start().await.unwrap();
    let seen = slack.channel_message("C1", "U1", "pushed");
    let missed = slack.history_only_message("C1", "U2", "only in history");
    let from_bot = slack.history_only_bot_message("C1", "B0OTHER", "beep");
    assert_eq!(slack.unacked(), 1, "only the pushed message has an envelope");

    let since = get(&slack, "conversations.history", &[("channel", "C1"), ("oldest", seen.ts.as_str())]).await;
    assert_eq!(texts(&since), ["beep", "only in history"], "newest first, after `oldest`");
    let messages = since["messages"].as_array().unwrap();
    assert_eq!((messages[1]["ts"].as_str(), messages[1]["user"].as_str()), (Some(missed.as_str()), Some("U2")));
    assert_eq!(messages[0]["ts"].as_str(), Some(from_bot.as_str()));
    assert_eq!(
        (messages[0]["subtype"].as_str(), messages[0]["bot_id"].as_str()),
        (Some("bot_message"), Some("B0OTHER"))
    );
    assert!(messages[0].get("user").is_none(), "{:?}", messages[0]);
    let inclusive =
        get(&slack, "conversations.history", &[("channel", "C1"), ("oldest", missed.as_str()), ("inclusive", "true")])
            .await;
    assert_eq!(texts(&inclusive), ["beep", "only in history"], "inclusive keeps `oldest` itself");
    let parsed: SlackApiConversationsHistoryResponse = serde_json::from_value(since).unwrap();
    assert_eq!(parsed.messages.len(), 2, "slack-morphism reads both");
}
