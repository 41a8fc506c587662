//! The Bot API methods, their checks and error texts, flood limits and scripted faults.

use std::time::Duration;

use ferry_fakes::{BotCommand, CallOutcome, ChatAction, FakeTelegram, RateLimits};
use serde_json::json;
use tokio::time::Instant;

use crate::{TOKEN, call, fails, fake, ok, soon};

const NOT_MODIFIED: &str = "Bad Request: message is not modified: specified new message content and reply markup \
                            are exactly the same as a current content and reply markup of the message";

#[tokio::test]
async fn a_wrong_token_is_unauthorized() {
    let telegram = fake().await;
    let url = format!("{}/bot999:WRONG/getMe", telegram.url());
    let response = reqwest::Client::new().post(url).send().await.unwrap();
    assert_eq!(response.status().as_u16(), 401);
    let body: serde_json::Value = response.json().await.unwrap();
    assert_eq!(body, json!({ "ok": false, "error_code": 401, "description": "Unauthorized" }));
    assert_eq!(telegram.calls()[0].outcome, CallOutcome::Answered(401));
}

#[tokio::test]
async fn method_names_match_case_insensitively_and_params_come_from_anywhere() {
    let telegram = fake().await;
    telegram.private_message(42, "Ada", "hi");
    let me = ok(&telegram, "GetMe", json!({})).await;
    assert_eq!(me["username"], "ferry_test_bot");
    assert_eq!(me["id"], 777_000_001);
    assert_eq!(me["is_bot"], true);

    // Query string, and a form body with a JSON-encoded object.
    let base = format!("{}/bot{TOKEN}", telegram.url());
    let client = reqwest::Client::new();
    let response = client.get(format!("{base}/sendmessage?chat_id=42&text=from%20query")).send().await.unwrap();
    assert_eq!(response.status().as_u16(), 200);
    let response = client
        .post(format!("{base}/SENDMESSAGE"))
        .header("content-type", "application/x-www-form-urlencoded")
        .body("chat_id=42&text=from+form&reply_parameters=%7B%22message_id%22%3A2%7D")
        .send()
        .await
        .unwrap();
    assert_eq!(response.status().as_u16(), 200);
    let sent = telegram.messages_in(42);
    assert_eq!(sent.iter().map(|message| message.text.as_str()).collect::<Vec<_>>(), ["from query", "from form"]);
    assert_eq!(sent[1].reply_to, Some(2));
    let methods: Vec<String> = telegram.calls().into_iter().map(|call| call.method).collect();
    assert_eq!(methods, ["getMe", "sendMessage", "sendMessage"]);

    assert_eq!(fails(&telegram, "noSuchMethod", json!({}), 404).await, "Not Found");
}

#[tokio::test]
async fn send_message_returns_the_message_and_records_it() {
    let telegram = fake().await;
    telegram.private_message(42, "Ada", "hi");
    let message = ok(&telegram, "sendMessage", json!({ "chat_id": 42, "text": "<b>Hello</b> &amp; bye", "parse_mode": "HTML", "reply_parameters": { "message_id": 1 } })).await;
    assert_eq!(message["message_id"], 2, "ids count per chat, after the user's message");
    assert_eq!(message["text"], "Hello & bye");
    assert_eq!(message["entities"], json!([{ "type": "bold", "offset": 0, "length": 5 }]));
    assert_eq!(message["from"]["id"], 777_000_001);
    assert_eq!(message["reply_to_message"]["text"], "hi");
    let sent = telegram.sent();
    assert_eq!(sent.len(), 1);
    assert_eq!(sent[0].text, "<b>Hello</b> &amp; bye");
    assert_eq!(sent[0].visible_text, "Hello & bye");
    assert_eq!(sent[0].parse_mode.as_deref(), Some("HTML"));
    assert_eq!(sent[0].reply_to, Some(1));
}

#[tokio::test]
async fn sends_to_unknown_chats_messages_and_threads_are_refused() {
    let telegram = fake().await;
    telegram.private_message(42, "Ada", "hi");
    telegram.topic_message(-1001, 7, (5, "Bob"), "in a topic");
    assert_eq!(
        fails(&telegram, "sendMessage", json!({ "chat_id": 43, "text": "x" }), 400).await,
        "Bad Request: chat not found"
    );
    assert_eq!(
        fails(
            &telegram,
            "sendMessage",
            json!({ "chat_id": 42, "text": "x", "reply_parameters": { "message_id": 99 } }),
            400
        )
        .await,
        "Bad Request: message to be replied not found"
    );
    ok(&telegram, "sendMessage", json!({ "chat_id": 42, "text": "x", "reply_parameters": { "message_id": 99, "allow_sending_without_reply": true } })).await;
    assert_eq!(
        fails(&telegram, "sendMessage", json!({ "chat_id": 42, "text": "  \n" }), 400).await,
        "Bad Request: message text is empty"
    );
    // The General topic is 1, and sends to it must omit the thread id.
    for thread in [1, 8] {
        let params = json!({ "chat_id": -1001, "text": "x", "message_thread_id": thread });
        assert_eq!(fails(&telegram, "sendMessage", params, 400).await, "Bad Request: message thread not found");
    }
    let message = ok(&telegram, "sendMessage", json!({ "chat_id": -1001, "text": "x", "message_thread_id": 7 })).await;
    assert_eq!((message["message_thread_id"].clone(), message["is_topic_message"].clone()), (json!(7), json!(true)));
    assert_eq!(telegram.messages_in(-1001)[0].thread_id, Some(7));
}

#[tokio::test]
async fn text_over_4096_visible_characters_is_too_long() {
    let telegram = fake().await;
    telegram.private_message(42, "Ada", "hi");
    let too_long = json!({ "chat_id": 42, "text": "a".repeat(4097) });
    assert_eq!(fails(&telegram, "sendMessage", too_long, 400).await, "Bad Request: message is too long");
    ok(&telegram, "sendMessage", json!({ "chat_id": 42, "text": "a".repeat(4096) })).await;
    // Markup does not count; entities count as what they show.
    let html = format!("<b>{}</b>", "&amp;".repeat(4096));
    ok(&telegram, "sendMessage", json!({ "chat_id": 42, "text": html, "parse_mode": "HTML" })).await;
    let html = format!("<b>{}</b>", "&amp;".repeat(4097));
    let params = json!({ "chat_id": 42, "text": html, "parse_mode": "HTML" });
    assert_eq!(fails(&telegram, "sendMessage", params, 400).await, "Bad Request: message is too long");
    // The limit is in UTF-16 units: an emoji outside the BMP counts twice.
    let params = json!({ "chat_id": 42, "text": "😀".repeat(2049) });
    assert_eq!(fails(&telegram, "sendMessage", params, 400).await, "Bad Request: message is too long");
}

#[tokio::test]
async fn invalid_html_is_refused_with_telegrams_words() {
    let telegram = fake().await;
    telegram.private_message(42, "Ada", "hi");
    let cases = [
        ("hello <foo>x</foo>", "Unsupported start tag \"foo\" at byte offset 6"),
        ("<b>bold", "Can't find end tag corresponding to start tag \"b\""),
        ("if a < b", "Unsupported start tag \"\" at byte offset 5"),
        ("<b>x</i>", "Unmatched end tag at byte offset 4, expected \"</b>\", found \"</i>\""),
    ];
    for (text, detail) in cases {
        let params = json!({ "chat_id": 42, "text": text, "parse_mode": "HTML" });
        assert_eq!(
            fails(&telegram, "sendMessage", params, 400).await,
            format!("Bad Request: can't parse entities: {detail}")
        );
    }
    // A stray `&` is kept, as on Telegram; every supported tag parses.
    let text = "AT&T <b>b</b><strong>s</strong><i>i</i><em>e</em><u>u</u><ins>n</ins><s>s</s><strike>k</strike>\
                <del>d</del><code>c</code><pre>p</pre><a href=\"https://example.com\">a</a><tg-spoiler>t</tg-spoiler>\
                <span class=\"tg-spoiler\">p</span><blockquote>q</blockquote><blockquote expandable>x</blockquote>";
    let message = ok(&telegram, "sendMessage", json!({ "chat_id": 42, "text": text, "parse_mode": "html" })).await;
    assert!(message["text"].as_str().unwrap().starts_with("AT&T bsieunskdcpatpqx"), "{message}");
    assert_eq!(message["entities"].as_array().unwrap().len(), 16);
    // Without parse_mode, markup is just text.
    let message = ok(&telegram, "sendMessage", json!({ "chat_id": 42, "text": "<foo>" })).await;
    assert_eq!(message["text"], "<foo>");
}

#[tokio::test]
async fn edits_change_the_visible_message_and_follow_telegrams_rules() {
    let telegram = fake().await;
    telegram.private_message(42, "Ada", "hi");
    let message = ok(&telegram, "sendMessage", json!({ "chat_id": 42, "text": "draft" })).await;
    let id = message["message_id"].as_i64().unwrap();

    let edited = ok(
        &telegram,
        "editMessageText",
        json!({ "chat_id": 42, "message_id": id, "text": "<i>final</i>", "parse_mode": "HTML" }),
    )
    .await;
    assert_eq!(edited["text"], "final");
    assert!(edited["edit_date"].is_i64());
    let sent = telegram.messages_in(42);
    assert_eq!((sent[0].visible_text.as_str(), sent[0].edits), ("final", 1));

    let same = json!({ "chat_id": 42, "message_id": id, "text": "<i>final</i>", "parse_mode": "HTML" });
    assert_eq!(fails(&telegram, "editMessageText", same, 400).await, NOT_MODIFIED);
    // Same text, different formatting: a change.
    ok(&telegram, "editMessageText", json!({ "chat_id": 42, "message_id": id, "text": "final" })).await;

    let missing = json!({ "chat_id": 42, "message_id": 99, "text": "x" });
    assert_eq!(fails(&telegram, "editMessageText", missing, 400).await, "Bad Request: message to edit not found");
    let users = json!({ "chat_id": 42, "message_id": 1, "text": "x" });
    assert_eq!(fails(&telegram, "editMessageText", users, 400).await, "Bad Request: message can't be edited");
    let bad = json!({ "chat_id": 42, "message_id": id, "text": "<b>", "parse_mode": "HTML" });
    let description = fails(&telegram, "editMessageText", bad, 400).await;
    assert!(description.starts_with("Bad Request: can't parse entities: "), "{description}");
    let long = json!({ "chat_id": 42, "message_id": id, "text": "a".repeat(4097) });
    assert_eq!(fails(&telegram, "editMessageText", long, 400).await, "Bad Request: message is too long");
}

#[tokio::test]
async fn deleted_messages_are_gone() {
    let telegram = fake().await;
    telegram.private_message(42, "Ada", "hi");
    ok(&telegram, "sendMessage", json!({ "chat_id": 42, "text": "one" })).await;
    ok(&telegram, "sendMessage", json!({ "chat_id": 42, "text": "two" })).await;
    assert_eq!(ok(&telegram, "deleteMessage", json!({ "chat_id": 42, "message_id": 2 })).await, true);
    assert_eq!(telegram.sent().iter().map(|message| message.message_id).collect::<Vec<_>>(), [3]);
    let again = json!({ "chat_id": 42, "message_id": 2 });
    assert_eq!(fails(&telegram, "deleteMessage", again, 400).await, "Bad Request: message to delete not found");
    let edit = json!({ "chat_id": 42, "message_id": 2, "text": "x" });
    assert_eq!(fails(&telegram, "editMessageText", edit, 400).await, "Bad Request: message to edit not found");
}

#[tokio::test]
async fn chat_actions_and_commands_are_recorded() {
    let telegram = fake().await;
    telegram.private_message(42, "Ada", "hi");
    assert_eq!(ok(&telegram, "sendChatAction", json!({ "chat_id": 42, "action": "typing" })).await, true);
    let wrong = json!({ "chat_id": 42, "action": "dancing" });
    assert_eq!(fails(&telegram, "sendChatAction", wrong, 400).await, "Bad Request: wrong parameter action in request");
    assert_eq!(telegram.chat_actions(), [ChatAction { chat_id: 42, action: "typing".into(), thread_id: None }]);

    let commands = json!([{ "command": "new", "description": "Start a new session" }, { "command": "stop", "description": "Stop the run" }]);
    assert_eq!(ok(&telegram, "setMyCommands", json!({ "commands": commands })).await, true);
    assert_eq!(telegram.commands()[0], BotCommand { command: "new".into(), description: "Start a new session".into() });
    assert_eq!(ok(&telegram, "getMyCommands", json!({})).await, commands);
    let bad = json!({ "commands": [{ "command": "Bad Name", "description": "x" }] });
    assert_eq!(fails(&telegram, "setMyCommands", bad, 400).await, "Bad Request: BOT_COMMAND_INVALID");
}

#[tokio::test]
async fn a_chat_gets_a_burst_then_429_with_retry_after() {
    let telegram = FakeTelegram::start(TOKEN).await.unwrap();
    telegram.private_message(42, "Ada", "hi");
    telegram.private_message(43, "Bob", "hi");
    for text in ["1", "2", "3"] {
        ok(&telegram, "sendMessage", json!({ "chat_id": 42, "text": text })).await;
    }
    let (status, body) = call(&telegram, "sendMessage", json!({ "chat_id": 42, "text": "4" })).await;
    assert_eq!(status, 429);
    assert_eq!(
        body,
        json!({ "ok": false, "error_code": 429, "description": "Too Many Requests: retry after 1", "parameters": { "retry_after": 1 } })
    );
    // Another chat has its own budget; a refused send is not recorded as sent.
    ok(&telegram, "sendMessage", json!({ "chat_id": 43, "text": "1" })).await;
    assert_eq!(telegram.messages_in(42).len(), 3);
    assert_eq!(telegram.rate_limited_count(), 1);
}

#[tokio::test]
async fn groups_get_their_per_minute_budget() {
    let limits = RateLimits { per_chat_burst: 100, group_per_minute: 2, ..RateLimits::telegram() };
    let telegram = FakeTelegram::start(TOKEN).await.unwrap().with_rate_limits(limits);
    telegram.group_message(-5, (7, "Cy"), "hello", true);
    ok(&telegram, "sendMessage", json!({ "chat_id": -5, "text": "1" })).await;
    ok(&telegram, "editMessageText", json!({ "chat_id": -5, "message_id": 2, "text": "1, edited" })).await;
    let description = fails(&telegram, "sendMessage", json!({ "chat_id": -5, "text": "2" }), 429).await;
    assert!(description.starts_with("Too Many Requests: retry after "), "{description}");
    let retry_after: u64 = description.rsplit(' ').next().unwrap().parse().unwrap();
    assert!((59..=60).contains(&retry_after), "{retry_after}");
}

#[tokio::test]
async fn scripted_faults_hit_the_next_call_of_their_method_once() {
    let telegram = fake().await;
    telegram.private_message(42, "Ada", "hi");
    telegram.fail_next("sendMessage", 403, "Forbidden: bot was blocked by the user");
    telegram.fail_next_with_retry_after("SENDMESSAGE", 7);
    ok(&telegram, "sendChatAction", json!({ "chat_id": 42, "action": "typing" })).await;
    let params = json!({ "chat_id": 42, "text": "x" });
    assert_eq!(fails(&telegram, "sendMessage", params.clone(), 403).await, "Forbidden: bot was blocked by the user");
    let (status, body) = call(&telegram, "sendMessage", params.clone()).await;
    assert_eq!((status, &body["parameters"]), (429, &json!({ "retry_after": 7 })));
    ok(&telegram, "sendMessage", params.clone()).await;
    assert_eq!(telegram.rate_limited_count(), 1);

    telegram.fail_next("editMessageText", 502, "Bad Gateway");
    let edit = json!({ "chat_id": 42, "message_id": 2, "text": "y" });
    assert_eq!(fails(&telegram, "editMessageText", edit, 502).await, "Bad Gateway");
}

#[tokio::test]
async fn a_delayed_call_is_answered_after_the_delay() {
    let telegram = fake().await;
    telegram.delay_next("getMe", Duration::from_millis(300));
    let started = Instant::now();
    ok(&telegram, "getMe", json!({})).await;
    assert!(started.elapsed() >= Duration::from_millis(300));
    let started = Instant::now();
    ok(&telegram, "getMe", json!({})).await;
    assert!(started.elapsed() < Duration::from_millis(300));
}

#[tokio::test]
async fn a_dropped_connection_gets_no_answer_and_runs_nothing() {
    let telegram = fake().await;
    telegram.private_message(42, "Ada", "hi");
    telegram.drop_next_connection("sendMessage");
    let url = format!("{}/bot{TOKEN}/sendMessage", telegram.url());
    let result = async {
        let response = reqwest::Client::new().post(&url).json(&json!({ "chat_id": 42, "text": "x" })).send().await?;
        response.bytes().await
    }
    .await;
    assert!(result.is_err(), "{result:?}");
    assert!(telegram.sent().is_empty());
    assert_eq!(soon(telegram.wait_for_calls("sendMessage", 1)).await[0].outcome, CallOutcome::Dropped);
    ok(&telegram, "sendMessage", json!({ "chat_id": 42, "text": "x" })).await;
}

#[tokio::test]
async fn a_webhook_blocks_polling_until_deleted() {
    let telegram = fake().await;
    assert_eq!(ok(&telegram, "getWebhookInfo", json!({})).await["url"], "");
    ok(&telegram, "setWebhook", json!({ "url": "https://example.com/hook", "secret_token": "s" })).await;
    assert_eq!(ok(&telegram, "getWebhookInfo", json!({})).await["url"], "https://example.com/hook");
    let description = fails(&telegram, "getUpdates", json!({}), 409).await;
    assert!(description.starts_with("Conflict: can't use getUpdates method while webhook is active"), "{description}");
    telegram.private_message(42, "Ada", "hi");
    ok(&telegram, "deleteWebhook", json!({ "drop_pending_updates": true })).await;
    assert_eq!(ok(&telegram, "getUpdates", json!({})).await, json!([]));
}
