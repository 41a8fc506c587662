//! The faults a chaos test injects: calls that take effect but lose their answer, flood-control
//! storms that outlast their `retry_after`, 5xx outages, and what the chat shows afterwards.
//!
//! Storms run on tokio's clock; these tests use the real one with short storms and wait for
//! the storm's announced end (or for the `retry_after` it asked for), never for an arbitrary
//! while.

use std::sync::Arc;
use std::time::Duration;

use ferry_fakes::{CallOutcome, FakeAnthropic, FakeOpenAi, FakeTelegram};
use serde_json::{Value, json};
use tokio::time::Instant;

use crate::{TOKEN, call, fails, fake, ok, soon};

/// POSTs JSON to a method and reads the whole answer; `Err` when the connection broke.
async fn try_call(telegram: &FakeTelegram, method: &str, params: Value) -> reqwest::Result<(u16, Value)> {
    let url = format!("{}/bot{TOKEN}/{method}", telegram.url());
    let response = reqwest::Client::new().post(url).json(&params).send().await?;
    let status = response.status().as_u16();
    Ok((status, response.json().await?))
}

fn texts(telegram: &FakeTelegram, chat_id: i64) -> Vec<(i64, String)> {
    telegram.messages_in(chat_id).into_iter().map(|message| (message.message_id, message.visible_text)).collect()
}

#[tokio::test]
async fn apply_then_drop_sends_the_message_but_the_client_gets_a_connection_error() {
    let telegram = fake().await;
    telegram.private_message(42, "Ada", "hi");
    telegram.apply_then_drop_next("SendMessage");

    let result = try_call(&telegram, "sendMessage", json!({ "chat_id": 42, "text": "answer" })).await;
    assert!(result.is_err(), "the client must see a broken connection: {result:?}");
    let calls = soon(telegram.wait_for_calls("sendMessage", 1)).await;
    assert_eq!(calls[0].outcome, CallOutcome::AppliedThenDropped(200));
    assert_eq!(calls[0].status(), None, "no answer reached the client");
    // The message exists exactly as a normal send would have made it.
    assert_eq!(texts(&telegram, 42), [(2, "answer".to_owned())]);

    // Used once: the next send is answered, with the next id.
    let message = ok(&telegram, "sendMessage", json!({ "chat_id": 42, "text": "again" })).await;
    assert_eq!(message["message_id"], 3);
    assert_eq!(texts(&telegram, 42), [(2, "answer".to_owned()), (3, "again".to_owned())]);
}

#[tokio::test]
async fn apply_then_drop_applies_edits_and_deletes_while_drop_next_connection_applies_nothing() {
    let telegram = fake().await;
    telegram.private_message(42, "Ada", "hi");
    for text in ["one", "two", "three"] {
        ok(&telegram, "sendMessage", json!({ "chat_id": 42, "text": text })).await;
    }

    telegram.apply_then_drop_next("editMessageText");
    let edit = json!({ "chat_id": 42, "message_id": 2, "text": "<b>one, edited</b>", "parse_mode": "HTML" });
    assert!(try_call(&telegram, "editMessageText", edit.clone()).await.is_err());
    telegram.apply_then_drop_next("deleteMessage");
    assert!(try_call(&telegram, "deleteMessage", json!({ "chat_id": 42, "message_id": 3 })).await.is_err());
    // Dropped before it runs: the message keeps its text.
    telegram.drop_next_connection("editMessageText");
    let lost = json!({ "chat_id": 42, "message_id": 4, "text": "never shown" });
    assert!(try_call(&telegram, "editMessageText", lost).await.is_err());
    // A call the method refuses changes nothing, applied or not; the status it would have
    // answered is recorded.
    telegram.apply_then_drop_next("editMessageText");
    assert!(try_call(&telegram, "editMessageText", edit).await.is_err());

    // What the chat shows now: the latest edit, without the deleted message.
    let shown = telegram.messages_in(42);
    assert_eq!(texts(&telegram, 42), [(2, "one, edited".to_owned()), (4, "three".to_owned())]);
    assert_eq!((shown[0].text.as_str(), shown[0].edits), ("<b>one, edited</b>", 1));
    assert_eq!(shown[1].edits, 0);
    let outcomes: Vec<CallOutcome> = telegram.calls().iter().skip(3).map(|call| call.outcome).collect();
    assert_eq!(
        outcomes,
        [
            CallOutcome::AppliedThenDropped(200),
            CallOutcome::AppliedThenDropped(200),
            CallOutcome::Dropped,
            CallOutcome::AppliedThenDropped(400),
        ]
    );
}

#[tokio::test]
async fn apply_then_drop_on_get_updates_confirms_the_offset_but_loses_the_batch() {
    let telegram = fake().await;
    let first = telegram.private_message(42, "Ada", "one");
    let second = telegram.private_message(42, "Ada", "two");
    telegram.apply_then_drop_next("getUpdates");
    assert!(try_call(&telegram, "getUpdates", json!({ "offset": first + 1 })).await.is_err());
    // The offset confirmed the first update; the second was in the lost answer, so it is
    // delivered again.
    assert_eq!(telegram.current_offset(), second);
    let updates = ok(&telegram, "getUpdates", json!({ "offset": second })).await;
    assert_eq!(updates[0]["update_id"], second);
}

#[tokio::test]
async fn a_rate_limit_storm_answers_429_with_retry_after_for_its_whole_duration_then_stops() {
    let telegram = fake().await;
    telegram.private_message(42, "Ada", "hi");
    // Scripted before the storm: it must hit the first call that gets through, not be eaten by it.
    telegram.fail_next("sendMessage", 403, "Forbidden: bot was blocked by the user");
    let ends = telegram.rate_limit_storm("sendMessage", Duration::from_millis(2500), 1);
    let params = json!({ "chat_id": 42, "text": "x" });
    let flood = json!({
        "ok": false,
        "error_code": 429,
        "description": "Too Many Requests: retry after 1",
        "parameters": { "retry_after": 1 },
    });

    assert_eq!(call(&telegram, "sendMessage", params.clone()).await, (429, flood.clone()));
    // Other methods are not in the storm.
    ok(&telegram, "sendChatAction", json!({ "chat_id": 42, "action": "typing" })).await;
    // Obeying retry_after is not enough: the storm outlasts what it announces.
    tokio::time::sleep(Duration::from_secs(1)).await;
    assert!(Instant::now() < ends, "the storm must still be on for this check");
    assert_eq!(call(&telegram, "sendMessage", params.clone()).await, (429, flood));
    assert_eq!(telegram.rate_limited_count(), 2);
    assert!(telegram.messages_in(42).is_empty());

    tokio::time::sleep_until(ends).await;
    assert_eq!(fails(&telegram, "sendMessage", params.clone(), 403).await, "Forbidden: bot was blocked by the user");
    ok(&telegram, "sendMessage", params).await;
    assert_eq!(telegram.rate_limited_count(), 2);
    let statuses: Vec<Option<u16>> = telegram.calls_to("sendMessage").iter().map(|call| call.status()).collect();
    assert_eq!(statuses, [Some(429), Some(429), Some(403), Some(200)]);
}

#[tokio::test]
async fn a_server_error_storm_fails_get_updates_with_502_and_confirms_nothing_until_it_ends() {
    let telegram = fake().await;
    let update_id = telegram.private_message(42, "Ada", "hi");
    let ends = telegram.server_error_storm("getUpdates", Duration::from_millis(800));

    let (status, body) = call(&telegram, "getUpdates", json!({ "offset": update_id + 1, "timeout": 5 })).await;
    assert_eq!((status, &body), (502, &json!({ "ok": false, "error_code": 502, "description": "Bad Gateway" })));
    // The adapter's SDK reads that description as an unknown API error (after its 10 s sleep on
    // a 5xx), which the adapter retries with backoff.
    let parsed: teloxide_core::ApiError = serde_json::from_value(body["description"].clone()).unwrap();
    assert_eq!(parsed, teloxide_core::ApiError::Unknown("Bad Gateway".into()));
    // The failed poll confirmed nothing, even with an offset past the update.
    assert_eq!((telegram.pending_updates(), telegram.current_offset()), (1, update_id));
    assert_eq!(telegram.rate_limited_count(), 0);

    tokio::time::sleep_until(ends).await;
    let updates = ok(&telegram, "getUpdates", json!({ "offset": update_id })).await;
    assert_eq!(updates[0]["message"]["text"], "hi");
}

#[tokio::test]
async fn faults_can_be_scripted_from_another_task_while_a_client_uses_the_api() {
    fn shared_across_tasks<T: Send + Sync + 'static>() {}
    shared_across_tasks::<FakeTelegram>();
    shared_across_tasks::<FakeOpenAi>();
    shared_across_tasks::<FakeAnthropic>();

    let telegram = Arc::new(fake().await);
    let poll = call(&telegram, "getUpdates", json!({ "timeout": 30 }));
    let chaos = tokio::spawn({
        let telegram = Arc::clone(&telegram);
        async move {
            telegram.wait_for_arrivals("getUpdates", 1).await;
            telegram.apply_then_drop_next("sendMessage");
            telegram.rate_limit_storm("editMessageText", Duration::from_secs(60), 1);
            telegram.private_message(42, "Ada", "wake up")
        }
    });
    let ((status, body), injected) = soon(async { tokio::join!(poll, chaos) }).await;
    assert_eq!((status, &body["result"][0]["update_id"]), (200, &json!(injected.unwrap())));
    assert!(try_call(&telegram, "sendMessage", json!({ "chat_id": 42, "text": "x" })).await.is_err());
    let edit = json!({ "chat_id": 42, "message_id": 2, "text": "y" });
    assert_eq!(call(&telegram, "editMessageText", edit).await.0, 429);
    assert_eq!(texts(&telegram, 42), [(2, "x".to_owned())]);
}

#[tokio::test]
async fn malformed_answers_cut_the_waiting_long_poll_short_and_confirm_nothing() {
    let telegram = fake().await;
    let before = telegram.private_message(42, "Ada", "before");
    assert_eq!(ok(&telegram, "getUpdates", json!({})).await[0]["update_id"], before);
    // A poll confirming `before` waits for more; the faults scripted meanwhile end it early.
    let waiting = call(&telegram, "getUpdates", json!({ "offset": before + 1, "timeout": 30 }));
    let script = async {
        telegram.wait_for_arrivals("getUpdates", 2).await;
        telegram.malformed_next("getUpdates");
        telegram.malformed_next("getUpdates");
    };
    let ((status, body), ()) = soon(async { tokio::join!(waiting, script) }).await;
    assert_eq!((status, &body["result"]), (200, &json!([])), "answered early, empty");

    let during = telegram.private_message(42, "Ada", "during");
    let url = format!("{}/bot{TOKEN}/getUpdates", telegram.url());
    for _ in 0..2 {
        let response = reqwest::Client::new().post(&url).json(&json!({ "offset": during + 1 })).send().await.unwrap();
        assert_eq!(response.status().as_u16(), 200);
        let text = response.text().await.unwrap();
        assert!(serde_json::from_str::<Value>(&text).is_err(), "not JSON: {text}");
    }
    // Neither malformed poll confirmed `during`, though each asked to: the next poll gets it.
    assert_eq!((telegram.pending_updates(), telegram.current_offset()), (1, during));
    let updates = ok(&telegram, "getUpdates", json!({ "offset": before + 1 })).await;
    assert_eq!(updates[0]["message"]["text"], "during");
    let outcomes: Vec<CallOutcome> = telegram.calls_to("getUpdates").iter().map(|call| call.outcome).collect();
    assert_eq!(outcomes[2..4], [CallOutcome::Malformed, CallOutcome::Malformed]);
}
