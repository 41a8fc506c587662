//! Slack end to end: the real `ferry gateway` binary with the Slack adapter, against the fake
//! Slack (Socket Mode, or the Events API through the gateway's `/slack/events`) and the fake
//! OpenAI server. The checks every adapter must pass (a DM answered once, NO_REPLY, long
//! replies, mention gating, collect mode, crash recovery, 429 storms, previews) live in the
//! conformance suite (`tests/conformance/`); these are the Slack-specific ones.

use std::process::{Command, Stdio};
use std::time::Duration;

use ferry_fakes::{FakeOpenAi, FakeSlack, PostedMessage, Reply, SLACK_BOT_USER_ID, SlackEventsClient, Turn};

#[path = "common/daemon.rs"]
mod daemon;

use daemon::{Daemon, PATIENCE, spawn_gateway};

/// Opens DMs and channels and streams no preview, for tests that do not study either.
const OPEN: &str = "dm_policy = \"open\"\nallow_from = [\"*\"]\ngroup_policy = \"open\"\nstreaming = \"off\"";
const HTTP: &str = "mode = \"http\"\nsigning_secret = \"ferry-signing-secret\"";

/// The gateway's Events API endpoint, as a signing client.
fn events_client(daemon: &Daemon) -> SlackEventsClient {
    SlackEventsClient::new(format!("http://127.0.0.1:{}/slack/events", daemon.port), FakeSlack::SIGNING_SECRET)
}

async fn fakes() -> (FakeSlack, FakeOpenAi) {
    (FakeSlack::start().await.unwrap(), FakeOpenAi::start().await.unwrap())
}

/// `top` tables, then `[channels.slack]` for `slack` with `bot_token` and `extra` keys in it.
fn config(bot_token: &str, slack: &FakeSlack, top: &str, extra: &str) -> String {
    format!(
        "{top}\n\n[channels.slack]\nenabled = true\nbot_token = \"{bot_token}\"\napp_token = \"{}\"\napi_url = \"{}\"\n{extra}\n",
        FakeSlack::APP_TOKEN,
        slack.api_url()
    )
}

/// `ferry gateway` with Slack (`extra` in its table) and the model at `openai`.
async fn daemon(slack: &FakeSlack, openai: &FakeOpenAi, extra: &str) -> Daemon {
    daemon_in(tempfile::tempdir().unwrap(), slack, openai, "", extra).await
}

/// [`daemon`] in `home` (perhaps left by an earlier one) with `top` tables before Slack's,
/// once `/healthz` lists slack and, in Socket Mode, a new socket is open.
async fn daemon_in(home: tempfile::TempDir, slack: &FakeSlack, openai: &FakeOpenAi, top: &str, extra: &str) -> Daemon {
    let sockets_before = slack.connections().0;
    let config = config(FakeSlack::BOT_TOKEN, slack, top, extra);
    let daemon = daemon::daemon_in(home, &config, openai, "slack").await;
    if !extra.contains("mode = \"http\"") {
        tokio::time::timeout(PATIENCE, slack.wait_for_connections(sockets_before + 1))
            .await
            .expect("the Socket Mode connection");
    }
    daemon
}

/// Waits until `channel` shows `count` bot messages.
async fn messages(slack: &FakeSlack, channel: &str, count: usize) -> Vec<PostedMessage> {
    tokio::time::timeout(PATIENCE, slack.wait_for_messages(channel, count))
        .await
        .unwrap_or_else(|_| panic!("expected {count} messages in {channel}, got {:?}", slack.messages_in(channel)))
}

fn mention(text: &str) -> String {
    format!("<@{SLACK_BOT_USER_ID}> {text}")
}

#[tokio::test]
async fn a_message_in_a_thread_is_answered_in_that_thread() {
    let (slack, openai) = fakes().await;
    openai.push(Turn::text(["Answered in the thread."]));
    let _daemon = daemon(&slack, &openai, OPEN).await;
    slack.thread_reply("C0TEAM", "1700000000.000100", "U1", &mention("where am I?"));
    let shown = messages(&slack, "C0TEAM", 1).await;
    assert_eq!(shown[0].text, "Answered in the thread.");
    assert_eq!(shown[0].thread_ts.as_deref(), Some("1700000000.000100"));
}

#[tokio::test]
async fn a_top_level_message_gets_a_top_level_reply_with_reply_to_mode_off() {
    let (slack, openai) = fakes().await;
    // The model asks to thread; Slack ignores the tag and never invents a thread_ts.
    // It writes markdown; Slack gets mrkdwn from the core's formatter.
    openai.push(Turn::text(["[[reply_to_current]] A **top-level** answer, see [the docs](https://example.com)."]));
    let home = tempfile::tempdir().unwrap();
    let _daemon = daemon_in(home, &slack, &openai, "[messages]\nreply_to_mode = \"off\"", OPEN).await;
    slack.channel_message("C0TEAM", "U1", &mention("hello"));
    let shown = messages(&slack, "C0TEAM", 1).await;
    assert_eq!(shown[0].thread_ts, None, "{shown:?}");
    assert!(shown[0].text.contains("A *top-level* answer") && !shown[0].text.contains("reply_to_current"), "{shown:?}");
    assert!(shown[0].text.contains("<https://example.com|the docs>"), "mrkdwn link: {}", shown[0].text);
}

#[tokio::test]
async fn a_dm_is_answered_once_even_when_it_also_arrives_as_an_app_mention() {
    let (slack, openai) = fakes().await;
    openai.push(Turn::text(["Hello Ada."]));
    openai.push(Turn::text(["Hello team."]));
    let _daemon = daemon(&slack, &openai, OPEN).await;
    let dm = slack.dm("U1", "hi");
    assert_eq!(messages(&slack, "DU1", 1).await[0].text, "Hello Ada.");
    // A channel mention comes as `message` and `app_mention` for the same ts: one run.
    let (message, app_mention) = slack.mention("C0TEAM", "U1", "hi all");
    assert_eq!(messages(&slack, "C0TEAM", 1).await[0].text, "Hello team.");
    for event in [&dm.event_id, &message.event_id, &app_mention.event_id] {
        tokio::time::timeout(PATIENCE, slack.wait_for_ack(event)).await.expect("acknowledged");
    }
    // A later mention is answered on its own, so a second run of the first would show by then.
    openai.push(Turn::text(["Later."]));
    slack.mention("C0TEAM", "U1", "one more");
    let shown = messages(&slack, "C0TEAM", 2).await;
    assert_eq!(shown.iter().map(|m| m.text.as_str()).collect::<Vec<_>>(), ["Hello team.", "Later."]);
    assert_eq!(openai.requests().len(), 3, "one run per message");
    let last = openai.requests()[2].body["messages"].as_array().unwrap().last().unwrap()["content"].to_string();
    assert!(last.contains("one more") && !last.contains("hi all"), "the first mention did not run again: {last}");
    assert_eq!(slack.messages_in("DU1").len(), 1);
}

#[tokio::test]
async fn a_long_reply_is_split_into_4000_character_messages_in_the_thread() {
    let (slack, openai) = fakes().await;
    let mut reply = String::new();
    while reply.len() < 9_000 {
        reply.push_str("A paragraph of the long answer, explaining one more detail of it.\n\n");
    }
    openai.push(Turn::text([reply.clone()]));
    let _daemon = daemon(&slack, &openai, OPEN).await;
    slack.thread_reply("C0TEAM", "1700000000.000200", "U1", &mention("explain at length"));
    let shown = messages(&slack, "C0TEAM", 3).await;
    assert_eq!(shown.len(), 3, "9,000 characters in 4,000-character messages");
    for message in &shown {
        assert!(message.text.chars().count() <= 4000);
        assert_eq!(message.thread_ts.as_deref(), Some("1700000000.000200"));
    }
}

#[tokio::test]
async fn a_preview_is_streamed_with_at_most_one_update_a_second() {
    let (slack, openai) = fakes().await;
    let pieces = ["The deploy finished ", "at 10:02 and every ", "check passed; ", "nothing else ", "to do today."];
    openai.push(Turn::Reply(Reply::text(pieces).with_chunk_delay(Duration::from_millis(400))));
    let _daemon = daemon(&slack, &openai, "dm_policy = \"open\"\nallow_from = [\"*\"]").await;
    slack.dm("U1", "status?");
    let full = pieces.concat();
    tokio::time::timeout(
        PATIENCE,
        slack.wait_until(|s| s.messages_in("DU1").first().map(|m| m.text.trim()) == Some(full.as_str())),
    )
    .await
    .expect("the final reply");
    let shown = slack.messages_in("DU1");
    assert_eq!(shown.len(), 1, "one message, edited into the final: {shown:?}");
    assert!(shown[0].edits >= 1);
    let mut calls: Vec<_> = slack.calls_to("chat.postMessage").into_iter().map(|c| c.at).collect();
    calls.extend(slack.calls_to("chat.update").into_iter().map(|c| c.at));
    for pair in calls.windows(2) {
        assert!(pair[1] - pair[0] >= Duration::from_millis(950), "at most one update a second: {calls:?}");
    }
}

#[tokio::test]
async fn a_429_is_waited_out_for_its_retry_after_and_nothing_is_lost() {
    let (slack, openai) = fakes().await;
    for i in 0..4 {
        openai.push(Turn::text([format!("answer {i}")]));
    }
    // Two 429s in a row (Retry-After: 1 s), then Slack recovers.
    slack.rate_limit_next("chat.postMessage", 2, 1);
    let config = format!("{OPEN}\n\n[messages.queue]\nmode = \"followup\"\ndebounce_ms = 0");
    let _daemon = daemon(&slack, &openai, &config).await;
    for i in 0..4 {
        slack.dm("U1", &format!("question {i}"));
    }
    let shown = messages(&slack, "DU1", 4).await;
    let mut texts: Vec<String> = shown.into_iter().map(|m| m.text).collect();
    texts.sort();
    texts.dedup();
    assert_eq!(texts, ["answer 0", "answer 1", "answer 2", "answer 3"], "each answer exactly once");
    assert_eq!(slack.rate_limited_count(), 2);
    let posts = slack.calls_to("chat.postMessage");
    let limited: Vec<_> = posts.iter().filter(|c| c.status == Some(429)).collect();
    let after = posts.iter().find(|c| c.status == Some(200)).unwrap();
    assert!(after.at - limited[1].at >= Duration::from_millis(950), "Retry-After was honoured");
}

#[tokio::test]
async fn an_envelope_whose_ack_was_lost_is_redelivered_after_a_reconnect_and_runs_once() {
    let (slack, openai) = fakes().await;
    openai.push(Turn::text(["Answered once."]));
    let _daemon = daemon(&slack, &openai, OPEN).await;
    slack.lose_next_acks(1);
    let event = slack.dm("U1", "hello");
    messages(&slack, "DU1", 1).await;
    slack.disconnect("refresh_requested");
    tokio::time::timeout(PATIENCE, slack.wait_for_ack(&event.event_id)).await.expect("acked after the reconnect");
    assert_eq!(slack.deliveries(&event.event_id), 2, "Slack delivered it twice");
    // A later message is answered, so the redelivery had its chance to run and did not.
    openai.push(Turn::text(["Second answer."]));
    slack.dm("U1", "and now?");
    let shown = messages(&slack, "DU1", 2).await;
    assert_eq!(shown.iter().map(|m| m.text.as_str()).collect::<Vec<_>>(), ["Answered once.", "Second answer."]);
    assert_eq!(openai.requests().len(), 2);
}

#[tokio::test]
async fn events_api_answers_url_verification_refuses_forgeries_and_runs_a_retried_event_once() {
    let (slack, openai) = fakes().await;
    openai.push(Turn::text(["Hello over HTTP."]));
    let daemon = daemon(&slack, &openai, &format!("{OPEN}\n{HTTP}")).await;
    let client = events_client(&daemon);
    let verification = client.url_verification("challenge-42").await;
    assert_eq!(verification.status, 200);
    assert!(verification.body.contains("challenge-42"), "{}", verification.body);

    let event = slack.event(FakeSlack::message_body("DU1", "im", "U1", "hi over http", None));
    assert_eq!(client.deliver_badly_signed(&event.payload).await.status, 401);
    assert_eq!(client.deliver_stale(&event.payload, 6 * 60).await.status, 401);
    assert!(openai.requests().is_empty(), "no run for a refused request");

    assert_eq!(client.deliver(&event.payload).await.status, 200);
    assert_eq!(client.redeliver(&event.payload, 1).await.status, 200);
    assert_eq!(client.redeliver(&event.payload, 2).await.status, 200);
    assert_eq!(messages(&slack, "DU1", 1).await[0].text, "Hello over HTTP.");
    openai.push(Turn::text(["Second."]));
    let next = slack.event(FakeSlack::message_body("DU1", "im", "U1", "next", None));
    assert_eq!(client.deliver(&next.payload).await.status, 200);
    let shown = messages(&slack, "DU1", 2).await;
    assert_eq!(shown[1].text, "Second.");
    assert_eq!(openai.requests().len(), 2, "the retries did not run");
}

#[tokio::test]
async fn a_restart_answers_what_was_sent_while_down_and_nothing_twice() {
    let (slack, openai) = fakes().await;
    openai.push(Turn::stall(Reply::text(["I was about to", " answer"]), 1));
    openai.push(Turn::text(["Here is your answer."]));
    let first = daemon(&slack, &openai, OPEN).await;
    let event = slack.dm("U1", "an important question");
    tokio::time::timeout(PATIENCE, openai.wait_for_request(0)).await.unwrap();
    tokio::time::timeout(PATIENCE, slack.wait_for_ack(&event.event_id)).await.expect("accepted, so acked");
    let home = first.crash(); // SIGKILL: no shutdown of any kind
    // Written while the gateway is down: Slack holds it until a socket takes it.
    openai.push(Turn::text(["Answered after the restart."]));
    let while_down = slack.dm("U2", "are you there?");

    let _second = daemon_in(home, &slack, &openai, "", OPEN).await;
    // Which of the two runs first (and so gets which scripted answer) is up to the lanes.
    let mut answers =
        vec![messages(&slack, "DU1", 1).await[0].text.clone(), messages(&slack, "DU2", 1).await[0].text.clone()];
    answers.sort();
    assert_eq!(answers, ["Answered after the restart.", "Here is your answer."]);
    assert!(slack.is_acked(&while_down.event_id));
    // A later message is answered after them, so a duplicate would have shown up by then.
    openai.push(Turn::text(["Later."]));
    slack.dm("U1", "later");
    let shown = messages(&slack, "DU1", 2).await;
    let asked: Vec<String> = openai
        .requests()
        .iter()
        .map(|r| {
            r.body["messages"].as_array().and_then(|m| m.last()).map(|m| m["content"].to_string()).unwrap_or_default()
        })
        .collect();
    assert_eq!(shown[1].text, "Later.", "the model was asked: {asked:#?}");
    assert_eq!((slack.messages_in("DU1").len(), slack.messages_in("DU2").len()), (2, 1));
    let prompts: Vec<String> = openai.requests().iter().map(|r| r.body["messages"].to_string()).collect();
    assert_eq!(prompts.len(), 4, "the stalled run, its rerun, the message sent while down, the later one");
    assert!(prompts[1..].iter().any(|p| p.contains("an important question")), "the journaled message ran again");
}

#[tokio::test]
async fn a_wrong_token_is_a_clear_error_and_the_gateway_serves_on() {
    let (slack, openai) = fakes().await;
    let home = tempfile::tempdir().unwrap();
    let (child, port) = spawn_gateway(home.path(), &config("xoxb-WRONG", &slack, "", ""), &openai, Stdio::piped());
    // Stopped for good (a refused token is not retried), with the reason for the operator.
    let health = daemon::channel_in_state(port, "slack", "stopped").await;
    let reason = daemon::channel_entry(&health, "slack").unwrap()["reason"].as_str().unwrap_or_default().to_owned();
    assert!(reason.contains("bot_token"), "{health}");
    assert_eq!(health["ok"], false, "an enabled channel is not running: {health}");
    assert_eq!(daemon::channel_entry(&health, "webchat").unwrap()["state"], "running", "the web chat still is");
    Command::new("kill").args(["-TERM", &child.id().to_string()]).status().unwrap();
    let output = child.wait_with_output().unwrap();
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(stderr.contains("slack channel did not start") && stderr.contains("bot_token"), "{stderr}");
    assert!(!stderr.contains("xoxb-WRONG"), "the token is not logged");
}

#[tokio::test]
async fn edits_deletions_joins_and_bot_messages_are_not_runs() {
    let (slack, openai) = fakes().await;
    openai.push(Turn::text(["Only this one."]));
    let _daemon = daemon(&slack, &openai, OPEN).await;
    let mut not_runs = Vec::new();
    let mut edit = FakeSlack::message_body("DU1", "im", "U1", "", None);
    edit["subtype"] = "message_changed".into();
    edit["message"] = serde_json::json!({"text": "edited text", "user": "U1", "ts": "1700000000.000001"});
    not_runs.push(edit);
    not_runs.push(serde_json::json!({"type": "message", "subtype": "message_deleted", "channel": "DU1",
        "channel_type": "im", "hidden": true, "deleted_ts": "1700000000.000001"}));
    let mut join = FakeSlack::message_body("C0TEAM", "channel", "U1", &mention("has joined the channel"), None);
    join["subtype"] = "channel_join".into();
    not_runs.push(join);
    not_runs.push(serde_json::json!({"type": "message", "subtype": "bot_message", "channel": "DU1",
        "channel_type": "im", "bot_id": "B0OTHER", "username": "otherbot", "text": "beep"}));
    for body in not_runs {
        let event = slack.event(body);
        slack.deliver(&event);
        tokio::time::timeout(PATIENCE, slack.wait_for_ack(&event.event_id)).await.expect("acknowledged");
    }
    slack.dm("U1", "a real question");
    assert_eq!(messages(&slack, "DU1", 1).await[0].text, "Only this one.");
    assert_eq!(openai.requests().len(), 1, "nothing else ran");
    assert!(slack.messages_in("C0TEAM").is_empty());
}

#[tokio::test]
async fn each_thread_is_its_own_session() {
    let (slack, openai) = fakes().await;
    openai.push(Turn::text(["Alpha answered."]));
    openai.push(Turn::text(["Beta answered."]));
    openai.push(Turn::text(["Alpha again."]));
    let _daemon = daemon(&slack, &openai, OPEN).await;
    slack.thread_reply("C0TEAM", "1700000000.000301", "U1", &mention("alpha question"));
    messages(&slack, "C0TEAM", 1).await;
    slack.thread_reply("C0TEAM", "1700000000.000302", "U2", &mention("beta question"));
    messages(&slack, "C0TEAM", 2).await;
    slack.thread_reply("C0TEAM", "1700000000.000301", "U1", &mention("alpha follow-up"));
    let shown = messages(&slack, "C0TEAM", 3).await;
    let threads: Vec<_> = shown.iter().map(|m| (m.thread_ts.as_deref().unwrap_or_default(), m.text.as_str())).collect();
    assert_eq!(
        threads,
        [
            ("1700000000.000301", "Alpha answered."),
            ("1700000000.000302", "Beta answered."),
            ("1700000000.000301", "Alpha again.")
        ]
    );
    let requests = openai.requests();
    let beta = requests[1].body["messages"].to_string();
    assert!(beta.contains("beta question") && !beta.contains("alpha question"), "thread B starts fresh: {beta}");
    let alpha = requests[2].body["messages"].to_string();
    assert!(alpha.contains("alpha question") && !alpha.contains("beta question"), "thread A continues: {alpha}");
}

#[tokio::test]
async fn malformed_events_are_acknowledged_and_skipped_and_the_channel_keeps_answering() {
    let (slack, openai) = fakes().await;
    let gateway = daemon(&slack, &openai, OPEN).await;
    let malformed = [
        serde_json::json!({"type": "message", "channel": 42, "user": ["U1"], "text": {"not": "text"}}),
        serde_json::json!({"type": "message", "channel_type": "im"}),
        serde_json::json!({"type": "app_mention", "channel": "C1"}),
        serde_json::json!({"type": "message", "channel": "DU1", "channel_type": "im", "user": "U1",
                           "text": "x", "files": "not a list", "thread_ts": 17}),
        serde_json::json!({"type": "an_event_slack_never_sent", "payload": [null, {}]}),
    ];
    let events: Vec<_> = malformed.into_iter().map(|body| slack.event(body)).collect();
    for event in &events {
        slack.deliver(event);
    }
    openai.push(Turn::text(["still here"]));
    slack.dm("U1", "are you there?");
    assert_eq!(messages(&slack, "DU1", 1).await[0].text, "still here");
    tokio::time::timeout(PATIENCE, slack.wait_for_all_acked()).await.expect("every envelope acknowledged");
    for event in &events {
        assert_eq!(slack.deliveries(&event.event_id), 1, "a malformed event is not redelivered");
    }
    assert_eq!(openai.requests().len(), 1, "nothing ran for the malformed events");
    daemon::assert_running(gateway.port, "slack").await;
}

#[tokio::test]
async fn no_log_level_writes_a_token_the_signing_secret_or_the_model_key() {
    for mode in ["", HTTP] {
        let (slack, openai) = fakes().await;
        openai.push(Turn::text(["hi"]));
        let config = config(FakeSlack::BOT_TOKEN, &slack, "", &format!("{OPEN}\n{mode}"));
        let gateway = daemon::gateway_at_trace(&config, &openai, "slack").await;
        let dm = slack.dm("U1", "hello");
        if mode == HTTP {
            events_client(&gateway).deliver(&dm.payload).await;
        }
        messages(&slack, "DU1", 1).await;
        let secrets = [FakeSlack::BOT_TOKEN, FakeSlack::APP_TOKEN, FakeSlack::SIGNING_SECRET, "sk-test"];
        daemon::assert_log_free_of(&gateway, &secrets);
    }
}

/// One run per message, so each missed message is answered on its own and in order.
fn one_run_each() -> String {
    format!("{OPEN}\n\n[messages.queue]\nmode = \"followup\"\ndebounce_ms = 0")
}

/// The text of the last message of each model request: the one it answers.
fn questions(openai: &FakeOpenAi) -> Vec<String> {
    openai
        .requests()
        .iter()
        .map(|r| {
            r.body["messages"].as_array().and_then(|m| m.last()).map(|m| m["content"].to_string()).unwrap_or_default()
        })
        .collect()
}

/// Where `text` was asked among `questions`, checking it was asked exactly once.
fn asked_once(questions: &[String], text: &str) -> usize {
    let found: Vec<usize> = (0..questions.len()).filter(|&i| questions[i].contains(text)).collect();
    assert_eq!(found.len(), 1, "{text:?} answered once: {questions:#?}");
    found[0]
}

/// A DM and a channel mention answered, so both conversations are recently active; the
/// channel's answer is in its history too (the bot's own message, which a catch-up reads
/// and must not answer).
async fn warm_up(slack: &FakeSlack, openai: &FakeOpenAi) -> (String, String) {
    openai.push(Turn::text(["Hello Ada."]));
    openai.push(Turn::text(["Hello team."]));
    let dm = slack.dm("U1", "hello");
    messages(slack, "DU1", 1).await;
    let (mention, _) = slack.mention("C0TEAM", "U1", "hi all");
    messages(slack, "C0TEAM", 1).await;
    for event in [&dm.event_id, &mention.event_id] {
        tokio::time::timeout(PATIENCE, slack.wait_for_ack(event)).await.expect("accepted, so acked");
    }
    (dm.ts, mention.ts)
}

/// Waits until the catch-up positions saved in `home` (one machine: a file in the state
/// directory) name `ts` as the last seen in `conversation`.
async fn positions_saved(home: &std::path::Path, conversation: &str, ts: &str) {
    let file = home.join(".local/share/ferry/channels/slack.default.positions.json");
    let expected = format!("\"{conversation}\":{{\"last\":\"{ts}\"");
    tokio::time::timeout(PATIENCE, async {
        while !std::fs::read_to_string(&file).is_ok_and(|saved| saved.contains(&expected)) {
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    })
    .await
    .unwrap_or_else(|_| panic!("{} never named {ts} in {conversation}", file.display()));
}

/// Writes, to history only, what Slack would never push: two DMs, a channel mention, a
/// channel message without one (mention rules: not answered), and another app's message
/// mentioning the bot (bots are not answered).
fn written_while_disconnected(slack: &FakeSlack) {
    slack.history_only_message("DU1", "U1", "first while away");
    slack.history_only_message("DU1", "U1", "second while away");
    slack.history_only_message("C0TEAM", "U2", &mention("third while away"));
    slack.history_only_message("C0TEAM", "U2", "chatter nobody asked the bot about");
    slack.history_only_bot_message("C0TEAM", "B0OTHER", &mention("a bot asking"));
}

/// After the catch-up, one more DM: anything run twice would have shown by its answer.
/// Then checks the three missed messages and it ran once each, in order, and nothing else.
async fn assert_caught_up_once_each(slack: &FakeSlack, openai: &FakeOpenAi) {
    messages(slack, "DU1", 3).await;
    messages(slack, "C0TEAM", 2).await;
    openai.push(Turn::text(["After."]));
    slack.dm("U1", "and now?");
    tokio::time::timeout(PATIENCE, slack.wait_until(|s| s.messages_in("DU1").iter().any(|m| m.text == "After.")))
        .await
        .expect("the message after the catch-up is answered");
    let questions = questions(openai);
    assert!(asked_once(&questions, "first while away") < asked_once(&questions, "second while away"), "in order");
    asked_once(&questions, "third while away");
    asked_once(&questions, "and now?");
    assert_eq!(questions.len(), 6, "warm-up DM and mention, three missed, and now: {questions:#?}");
    assert!(!questions.iter().any(|q| q.contains("a bot asking")), "another bot is not answered");
    assert_eq!((slack.messages_in("DU1").len(), slack.messages_in("C0TEAM").len()), (4, 2));
}

#[tokio::test]
async fn messages_written_while_the_socket_was_closed_are_answered_once_each_in_order_after_the_reconnect() {
    let (slack, openai) = fakes().await;
    let _daemon = daemon(&slack, &openai, &one_run_each()).await;
    warm_up(&slack, &openai).await;
    slack.close_sockets();
    tokio::time::timeout(PATIENCE, slack.wait_until(|s| s.connections().1 == 0)).await.expect("the socket is closed");
    let reads_before = slack.calls_to("conversations.history").len();

    written_while_disconnected(&slack);
    // Slack asks for patience on the first read: it is waited out, not skipped.
    slack.rate_limit_next("conversations.history", 1, 1);
    for answer in ["Answer A.", "Answer B.", "Answer C."] {
        openai.push(Turn::text([answer]));
    }
    let opened = slack.connections().0;
    slack.open_sockets();
    tokio::time::timeout(PATIENCE, slack.wait_for_connections(opened + 1)).await.expect("the socket reconnects");
    assert_caught_up_once_each(&slack, &openai).await;
    assert_eq!(slack.rate_limited_count(), 1, "the 429 was met");
    let reads = slack.calls_to("conversations.history");
    assert!(reads.len() >= reads_before + 3, "two conversations read, one of them twice: {reads:#?}");
    assert!(reads[reads_before..].iter().all(|read| read.params["oldest"].as_str().is_some_and(|ts| !ts.is_empty())));
}

#[tokio::test]
async fn messages_written_while_the_gateway_was_down_are_answered_once_each_in_order_after_it_starts() {
    let (slack, openai) = fakes().await;
    let first = daemon(&slack, &openai, &one_run_each()).await;
    let (dm_ts, mention_ts) = warm_up(&slack, &openai).await;
    let home = first.home.as_ref().expect("home").path().to_owned();
    positions_saved(&home, "DU1", &dm_ts).await;
    positions_saved(&home, "C0TEAM", &mention_ts).await;
    let home = first.crash(); // SIGKILL: the gateway is down until the next start

    written_while_disconnected(&slack);
    for answer in ["Answer A.", "Answer B.", "Answer C."] {
        openai.push(Turn::text([answer]));
    }
    let _second = daemon_in(home, &slack, &openai, "", &one_run_each()).await;
    assert_caught_up_once_each(&slack, &openai).await;
}
