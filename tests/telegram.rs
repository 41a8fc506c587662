//! Telegram end to end: the real `ferry gateway` binary with the Telegram adapter, against
//! the fake Bot API and the fake OpenAI server. The checks every adapter must pass live in the
//! conformance suite (`tests/conformance/`); these are the Telegram-specific ones.

use std::process::{Command, Stdio};
use std::time::Duration;

use ferry_fakes::{CallOutcome, FakeOpenAi, FakeTelegram, Reply, Turn};

#[path = "common/daemon.rs"]
mod daemon;

use daemon::{Daemon, PATIENCE, daemon_in, spawn_gateway};

const TOKEN: &str = "123456:TEST-token";

/// The `[channels.telegram]` table for `telegram` with `extra` keys in it.
fn config(token: &str, telegram: &FakeTelegram, extra: &str) -> String {
    format!("[channels.telegram]\nenabled = true\nbot_token = \"{token}\"\napi_url = \"{}\"\n{extra}\n", telegram.url())
}

/// `ferry gateway` with `telegram` (`extra` in its `[channels.telegram]` table) and the model
/// at `openai`.
async fn daemon(telegram: &FakeTelegram, openai: &FakeOpenAi, extra: &str) -> Daemon {
    let home = tempfile::tempdir().unwrap();
    daemon_in(home, &config(TOKEN, telegram, extra), openai, "telegram").await
}

async fn fakes() -> (FakeTelegram, FakeOpenAi) {
    let telegram = FakeTelegram::start(TOKEN).await.unwrap().without_rate_limits();
    (telegram, FakeOpenAi::start().await.unwrap())
}

/// Waits until `chat` shows `count` bot messages, then a little longer for late extras.
async fn messages(telegram: &FakeTelegram, chat: i64, count: usize) -> Vec<ferry_fakes::SentMessage> {
    tokio::time::timeout(PATIENCE, async {
        while telegram.messages_in(chat).len() < count {
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    })
    .await
    .unwrap_or_else(|_| panic!("expected {count} messages in {chat}, got {:?}", telegram.messages_in(chat)));
    telegram.messages_in(chat)
}

#[tokio::test]
async fn a_dm_gets_one_streamed_message_edited_into_the_final_reply() {
    let (telegram, openai) = fakes().await;
    let pieces = ["The deploy finished ", "at 10:02 and every ", "check passed; ", "nothing else ", "to do today."];
    openai.push(Turn::Reply(Reply::text(pieces).with_chunk_delay(Duration::from_millis(400))));
    let _daemon = daemon(&telegram, &openai, "dm_policy = \"open\"\nallow_from = [\"*\"]").await;
    telegram.private_message(42, "Ada", "status?");
    let full = pieces.concat();
    tokio::time::timeout(PATIENCE, async {
        while telegram.messages_in(42).first().map(|m| m.visible_text.trim().to_owned()) != Some(full.clone()) {
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    })
    .await
    .expect("the final reply");
    let shown = telegram.messages_in(42);
    assert_eq!(shown.len(), 1, "exactly one message: {shown:?}");
    assert!(shown[0].edits >= 1, "the preview was edited into the final");
    assert_eq!(telegram.calls_to("sendMessage").len(), 1);
    let first = &telegram.calls_to("sendMessage")[0];
    assert!(first.params["text"].as_str().unwrap().chars().count() >= 30, "the preview starts at ≥ 30 chars");
    let edits: Vec<_> = telegram.calls_to("editMessageText").into_iter().map(|call| call.at).collect();
    let mut calls = vec![first.at];
    calls.extend(edits);
    for pair in calls.windows(2) {
        assert!(pair[1] - pair[0] >= Duration::from_millis(950), "at most one edit a second: {calls:?}");
    }
    assert!(!telegram.chat_actions().is_empty(), "typing was shown");
}

#[tokio::test]
async fn an_unknown_dm_gets_a_pairing_code_and_no_run() {
    let (telegram, openai) = fakes().await;
    let _daemon = daemon(&telegram, &openai, "").await;
    telegram.private_message(77, "Stranger", "hello?");
    let shown = messages(&telegram, 77, 1).await;
    assert!(shown[0].visible_text.contains("ferry pairing approve telegram"), "{}", shown[0].visible_text);
    assert!(openai.requests().is_empty(), "no run for an unpaired sender");
}

#[tokio::test]
async fn webhook_mode_refuses_a_wrong_secret_and_runs_nothing() {
    let (telegram, openai) = fakes().await;
    let daemon = daemon(
        &telegram,
        &openai,
        "mode = \"webhook\"\nwebhook_secret = \"right\"\ndm_policy = \"open\"\nallow_from = [\"*\"]",
    )
    .await;
    // The fake knows a chat once a message was written there (the update stays queued:
    // in webhook mode nobody polls); the same update is then POSTed as Telegram would.
    telegram.private_message(42, "Ada", "hi");
    let update = serde_json::json!({
        "update_id": 1,
        "message": {"message_id": 1, "date": 0, "chat": {"id": 42, "type": "private", "first_name": "Ada"},
                    "from": {"id": 42, "is_bot": false, "first_name": "Ada"}, "text": "hi"}
    });
    let client = reqwest::Client::new();
    let url = format!("http://127.0.0.1:{}/telegram-webhook", daemon.port);
    let wrong = client.post(&url).header("X-Telegram-Bot-Api-Secret-Token", "wrong").json(&update).send().await;
    assert_eq!(wrong.unwrap().status(), 401);
    let missing = client.post(&url).json(&update).send().await.unwrap();
    assert_eq!(missing.status(), 401);
    openai.push(Turn::text(["Hello Ada."]));
    let right = client.post(&url).header("X-Telegram-Bot-Api-Secret-Token", "right").json(&update).send().await;
    assert_eq!(right.unwrap().status(), 200);
    assert_eq!(messages(&telegram, 42, 1).await[0].visible_text, "Hello Ada.");
    assert_eq!(openai.requests().len(), 1, "only the authenticated update ran");
}

const OPEN: &str = "dm_policy = \"open\"\nallow_from = [\"*\"]\ngroup_policy = \"open\"\nstreaming = \"off\"";

#[tokio::test]
async fn a_forum_topic_is_answered_in_its_topic() {
    let (telegram, openai) = fakes().await;
    openai.push(Turn::text(["Answered in the topic."]));
    let _daemon = daemon(&telegram, &openai, OPEN).await;
    telegram.topic_message(-100600, 12, (7, "Bea"), "@ferry_test_bot where am I?");
    let shown = messages(&telegram, -100600, 1).await;
    assert_eq!((shown[0].thread_id, shown[0].visible_text.as_str()), (Some(12), "Answered in the topic."));
}

#[tokio::test]
async fn stop_aborts_a_long_run_at_once() {
    let (telegram, openai) = fakes().await;
    openai.push(Turn::stall(Reply::text(["Thinking", " very hard"]), 1));
    let _daemon = daemon(&telegram, &openai, OPEN).await;
    telegram.private_message(42, "Ada", "a long question");
    tokio::time::timeout(PATIENCE, openai.wait_for_request(0)).await.unwrap();
    telegram.private_message(42, "Ada", "/stop");
    let shown = messages(&telegram, 42, 1).await;
    assert!(shown.iter().any(|m| m.visible_text.contains("Stopped")), "{shown:?}");
}

#[tokio::test]
async fn a_burst_to_one_chat_is_answered_exactly_once_within_telegrams_limits() {
    // The fake enforces Telegram's flood limits (1 message/s per chat after a burst of 3).
    let telegram = FakeTelegram::start(TOKEN).await.unwrap();
    let openai = FakeOpenAi::start().await.unwrap();
    for i in 0..20 {
        openai.push(Turn::text([format!("answer {i}")]));
    }
    // Every message is its own run, so the burst becomes 20 replies to send.
    let config = format!("{OPEN}\n\n[messages.queue]\nmode = \"followup\"\ndebounce_ms = 0");
    let _daemon = daemon(&telegram, &openai, &config).await;
    for i in 0..20 {
        telegram.private_message(42, "Ada", &format!("question {i}"));
    }
    let shown = tokio::time::timeout(PATIENCE, async {
        loop {
            let shown = telegram.messages_in(42);
            if shown.len() >= 20 {
                return shown;
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    })
    .await
    .unwrap_or_else(|_| panic!("20 answers expected, got {:?}", telegram.messages_in(42)));
    let mut texts: Vec<String> = shown.into_iter().map(|m| m.visible_text).collect();
    texts.sort();
    texts.dedup();
    assert_eq!(texts.len(), 20, "each answer exactly once");
    assert_eq!(telegram.rate_limited_count(), 0, "the outbound scheduler kept to Telegram's budget");
}

#[tokio::test]
async fn a_wrong_token_is_a_clear_error_and_the_gateway_serves_on() {
    let (telegram, openai) = fakes().await;
    let home = tempfile::tempdir().unwrap();
    let (child, port) = spawn_gateway(home.path(), &config("999:WRONG", &telegram, ""), &openai, Stdio::piped());
    // Stopped for good (a refused token is not retried), with the reason for the operator.
    let health = daemon::channel_in_state(port, "telegram", "stopped").await;
    let reason = daemon::channel_entry(&health, "telegram").unwrap()["reason"].as_str().unwrap_or_default().to_owned();
    assert!(reason.contains("bot_token"), "{health}");
    assert_eq!(health["ok"], false, "an enabled channel is not running: {health}");
    assert_eq!(daemon::channel_entry(&health, "webchat").unwrap()["state"], "running", "the web chat still is");
    Command::new("kill").args(["-TERM", &child.id().to_string()]).status().unwrap();
    let output = child.wait_with_output().unwrap();
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(stderr.contains("telegram channel did not start") && stderr.contains("bot_token"), "{stderr}");
    assert!(!stderr.contains("999:WRONG"), "the token is not logged");
}

#[tokio::test]
async fn a_bot_api_that_comes_up_after_the_gateway_is_connected_to_and_healthz_follows() {
    let openai = FakeOpenAi::start().await.unwrap();
    openai.push(Turn::text(["connected after all"]));
    // An address with nothing listening yet: the Bot API is down when the gateway starts.
    let address = std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap();
    let home = tempfile::tempdir().unwrap();
    let log = std::fs::File::create(home.path().join("stderr.log")).unwrap();
    let config = format!(
        "[channels.telegram]\nenabled = true\nbot_token = \"{TOKEN}\"\napi_url = \"http://{address}\"\n{OPEN}\n"
    );
    let (child, port) = spawn_gateway(home.path(), &config, &openai, Stdio::from(log));
    let _gateway = Daemon { child, port, home: None };

    let retrying = daemon::channel_in_state(port, "telegram", "retrying").await;
    let entry = daemon::channel_entry(&retrying, "telegram").unwrap();
    assert!(entry["lastError"].as_str().is_some_and(|error| error.contains("could not reach")), "{retrying}");
    assert_eq!(retrying["ok"], false, "an enabled channel is not running: {retrying}");

    tokio::time::sleep(Duration::from_secs(10)).await;
    let telegram = FakeTelegram::start_on(TOKEN, address).await.unwrap();
    let running = daemon::channel_in_state(port, "telegram", "running").await;
    assert_eq!(running["ok"], true, "{running}");
    telegram.private_message(42, "Ada", "are you there?");
    let shown = messages(&telegram, 42, 1).await;
    assert_eq!(shown[0].visible_text.trim(), "connected after all");

    let log = std::fs::read_to_string(home.path().join("stderr.log")).unwrap();
    let outages = log.matches("the telegram channel did not start").count();
    let recoveries = log.matches("the telegram channel is running again").count();
    assert_eq!((outages, recoveries), (1, 1), "logged once per outage and once on recovery:\n{log}");
    assert!(!log.contains(TOKEN), "the token is not logged");
}

#[tokio::test]
async fn a_message_left_from_before_a_restart_waits_while_the_bot_api_is_down_and_is_answered_once_it_is_back() {
    let (telegram, openai) = fakes().await;
    openai.push(Turn::stall(Reply::text(["never"]), 0));
    openai.set_responder(|request| Turn::text([format!("seen: {}", request.last_user_text().unwrap_or_default())]));
    let gateway = daemon(&telegram, &openai, OPEN).await;
    telegram.private_message(42, "Ada", "first question tok-a");
    tokio::time::timeout(PATIENCE, openai.wait_for_request(0)).await.expect("the first run starts");
    let home = gateway.crash();

    // The next start finds the Bot API failing: the left-over message must wait for it.
    telegram.server_error_storm("getMe", Duration::from_secs(5));
    let config = config(TOKEN, &telegram, OPEN);
    let (child, port) = spawn_gateway(home.path(), &config, &openai, Stdio::null());
    let _gateway = Daemon { child, port, home: Some(home) };
    daemon::channel_in_state(port, "telegram", "retrying").await;
    daemon::channel_in_state(port, "telegram", "running").await;
    let shown = messages(&telegram, 42, 1).await;
    assert!(shown[0].visible_text.contains("tok-a"), "answered once Telegram is back: {shown:?}");
}

#[tokio::test]
async fn an_update_whose_entities_lie_outside_its_text_is_answered_and_the_channel_keeps_running() {
    let (telegram, openai) = fakes().await;
    openai.push(Turn::text(["hello"]));
    openai.push(Turn::text(["answered despite the broken entities"]));
    openai.push(Turn::text(["and the next one too"]));
    let gateway = daemon(&telegram, &openai, OPEN).await;
    telegram.private_message(42, "Ada", "hello");
    messages(&telegram, 42, 1).await;
    let broken = serde_json::json!({"message": {
        "message_id": 900, "date": 1_700_000_000,
        "chat": {"id": 42, "type": "private", "first_name": "Ada"},
        "from": {"id": 42, "is_bot": false, "first_name": "Ada"},
        "text": "hi @ferry",
        "entities": [{"type": "mention", "offset": 500, "length": 12}, {"type": "bot_command", "offset": 3, "length": 99}]
    }});
    telegram.inject_update(broken);
    let shown = messages(&telegram, 42, 2).await;
    assert_eq!(shown[1].visible_text.trim(), "answered despite the broken entities");
    telegram.private_message(42, "Ada", "still there?");
    let shown = messages(&telegram, 42, 3).await;
    assert_eq!(shown[2].visible_text.trim(), "and the next one too");
    daemon::assert_running(gateway.port, "telegram").await;
}

#[tokio::test]
async fn no_log_level_writes_the_bot_token_or_the_model_key() {
    let (telegram, openai) = fakes().await;
    openai.push(Turn::text(["hi"]));
    let gateway = daemon::gateway_at_trace(&config(TOKEN, &telegram, OPEN), &openai, "telegram").await;
    telegram.private_message(42, "Ada", "hello");
    messages(&telegram, 42, 1).await;
    // The bot token, and the model's API key (`sk-test`, see `spawn_gateway`).
    daemon::assert_log_free_of(&gateway, &[TOKEN, "sk-test"]);
}

#[tokio::test]
async fn a_message_over_the_inbound_limit_is_not_run_and_its_sender_is_told() {
    let (telegram, openai) = fakes().await;
    openai.push(Turn::text(["short enough"]));
    let home = tempfile::tempdir().unwrap();
    let config = format!("{}\n[messages]\nmax_inbound_chars = 50\n", config(TOKEN, &telegram, OPEN));
    let _gateway = daemon_in(home, &config, &openai, "telegram").await;
    telegram.private_message(42, "Ada", &"long words ".repeat(10));
    let shown = messages(&telegram, 42, 1).await;
    assert!(shown[0].visible_text.contains("too long for me: 110 characters, and the limit is 50"), "{shown:?}");
    telegram.private_message(42, "Ada", "a short one");
    let shown = messages(&telegram, 42, 2).await;
    assert_eq!(shown[1].visible_text.trim(), "short enough");
    assert_eq!(openai.requests().len(), 1, "only the short message reached the model");
}

#[tokio::test]
async fn typing_is_shown_only_in_chats_whose_run_started() {
    let (telegram, openai) = fakes().await;
    // The first run is slow; while it works, 30 other people write.
    openai.push(Turn::Reply(Reply::text(["slow ", "answer"]).with_chunk_delay(Duration::from_millis(1500))));
    // The run next in line is slow too, so it is still the only one started when the test
    // looks, however late a loaded machine lets it look.
    openai.push(Turn::Reply(Reply::text(["next ", "answer"]).with_chunk_delay(Duration::from_millis(1500))));
    for i in 1..30 {
        openai.push(Turn::text([format!("answer {i}")]));
    }
    let home = tempfile::tempdir().unwrap();
    let config = format!("{}\n[agents.defaults]\nmax_concurrent = 1\n", config(TOKEN, &telegram, OPEN));
    let _gateway = daemon_in(home, &config, &openai, "telegram").await;
    telegram.private_message(1, "First", "hello");
    tokio::time::timeout(PATIENCE, async {
        while openai.requests().is_empty() {
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    })
    .await
    .unwrap();
    for chat in 100..130 {
        telegram.private_message(chat, "Waiting", "me too");
    }
    messages(&telegram, 1, 1).await;
    let typed: Vec<i64> = telegram.chat_actions().iter().map(|action| action.chat_id).collect();
    // Distinct chats: a run slowed by a loaded machine refreshes its typing every few seconds.
    let waiting_typed = typed.iter().filter(|chat| **chat >= 100).collect::<std::collections::HashSet<_>>().len();
    assert!(typed.contains(&1), "the running chat shows typing: {typed:?}");
    // While the first run worked, at most the one chat next in line could have started.
    assert!(waiting_typed <= 1, "typing fired for messages still waiting: {typed:?}");
    for chat in 100..130 {
        messages(&telegram, chat, 1).await;
    }
    let typed = telegram.chat_actions();
    assert!(typed.len() <= 31 + 31, "about one per run, not one per message and more: {}", typed.len());
    assert_eq!(telegram.rate_limited_count(), 0);
}

/// An update whose message replies to a message that replies to a message… `depth` times:
/// as deep as serde_json lets a document go. Telegram itself sends one level.
fn reply_chain(update_id: i64, depth: i64) -> serde_json::Value {
    let chat = serde_json::json!({"id": 42, "type": "private", "first_name": "Ada"});
    let mut message = serde_json::json!({"message_id": 1, "date": 0, "chat": chat, "text": "leaf"});
    for id in 0..depth {
        message = serde_json::json!({"message_id": id + 2, "date": 0, "chat": chat, "text": "n", "reply_to_message": message});
    }
    message["from"] = serde_json::json!({"id": 42, "is_bot": false, "first_name": "Ada"});
    serde_json::json!({"update_id": update_id, "message": message})
}

#[tokio::test]
async fn a_reply_chain_as_deep_as_json_allows_does_not_bring_the_gateway_down() {
    // Polling: the chain comes back from getUpdates (without "update_id"; the fake numbers it).
    let (telegram, openai) = fakes().await;
    openai.set_responder(|request| Turn::text([format!("echo: {}", request.last_user_text().unwrap_or_default())]));
    let mut gateway = daemon(&telegram, &openai, OPEN).await;
    telegram.inject_update(serde_json::json!({"message": reply_chain(0, 125)["message"]}));
    telegram.private_message(42, "Ada", "after the chain");
    let shown = messages(&telegram, 42, 1).await;
    assert!(shown.iter().any(|m| m.visible_text.contains("after the chain")), "{shown:?}");
    assert!(gateway.child.try_wait().unwrap().is_none(), "the gateway is still running");

    // Webhook: the chain is POSTed with the right secret.
    let (telegram, openai) = fakes().await;
    openai.push(Turn::text(["still here"]));
    let extra = "mode = \"webhook\"\nwebhook_secret = \"right\"\ndm_policy = \"open\"\nallow_from = [\"*\"]";
    let mut gateway = daemon(&telegram, &openai, extra).await;
    telegram.private_message(42, "Ada", "hi");
    let client = reqwest::Client::new();
    let url = format!("http://127.0.0.1:{}/telegram-webhook", gateway.port);
    let secret = ("X-Telegram-Bot-Api-Secret-Token", "right");
    let chain = client.post(&url).header(secret.0, secret.1).json(&reply_chain(7, 125)).send().await.unwrap();
    assert_eq!(chain.status(), 200, "skipped like any update Ferry cannot read, so Telegram moves on");
    assert!(gateway.child.try_wait().unwrap().is_none(), "the gateway is still running");
    let hi = serde_json::json!({"update_id": 8, "message": {"message_id": 9, "date": 0,
        "chat": {"id": 42, "type": "private", "first_name": "Ada"},
        "from": {"id": 42, "is_bot": false, "first_name": "Ada"}, "text": "hi"}});
    assert_eq!(client.post(&url).header(secret.0, secret.1).json(&hi).send().await.unwrap().status(), 200);
    assert!(messages(&telegram, 42, 1).await.iter().any(|m| m.visible_text == "still here"));
}

#[tokio::test]
async fn under_a_shared_dm_session_one_persons_stop_and_reset_leave_the_others_alone() {
    let (telegram, openai) = fakes().await;
    let slow = Reply::text(["Working on it", " for Ada."]).with_chunk_delay(Duration::from_millis(1500));
    openai.push(Turn::Reply(slow));
    openai.push(Turn::text(["Ada's second answer."]));
    let shared = format!(
        "{OPEN}\n\n[session]\ndm_scope = \"main\"\noperators = [\"telegram:7\"]\n\n[messages.queue]\ndebounce_ms = 0"
    );
    let _daemon = daemon(&telegram, &openai, &shared).await;
    telegram.private_message(42, "Ada", "a long question");
    tokio::time::timeout(PATIENCE, openai.wait_for_request(0)).await.unwrap();
    telegram.private_message(42, "Ada", "and another thing");

    // Bob shares the conversation, but his /stop is about his own work, and /reset is not his.
    telegram.private_message(43, "Bob", "/stop");
    assert_eq!(messages(&telegram, 43, 1).await[0].visible_text, "Nothing of yours is running.");
    telegram.private_message(43, "Bob", "/reset");
    let refused = messages(&telegram, 43, 2).await;
    assert!(refused[1].visible_text.starts_with("🔒 Only the operator"), "{refused:?}");

    let ada = messages(&telegram, 42, 2).await;
    let texts: Vec<&str> = ada.iter().map(|m| m.visible_text.as_str()).collect();
    assert_eq!(texts, ["Working on it for Ada.", "Ada's second answer."], "Ada's run and queue were left alone");
    assert_eq!(openai.requests().len(), 2);

    // The operator's /stop ends the run, whoever it answers.
    openai.push(Turn::stall(Reply::text(["Thinking", " very hard"]), 1));
    telegram.private_message(42, "Ada", "a third question");
    tokio::time::timeout(PATIENCE, openai.wait_for_request(2)).await.unwrap();
    telegram.private_message(7, "Cy", "/stop");
    assert_eq!(messages(&telegram, 7, 1).await[0].visible_text, "⏹️ Stopped.");
    telegram.private_message(7, "Cy", "/reset");
    assert_eq!(messages(&telegram, 7, 2).await[1].visible_text, "🆕 Started a new conversation.");
}

#[tokio::test]
async fn a_long_poll_that_keeps_breaking_shows_retrying_and_the_channel_comes_back_by_itself() {
    let (telegram, openai) = fakes().await;
    openai.set_responder(|request| Turn::text([format!("seen: {}", request.last_user_text().unwrap_or_default())]));
    let home = tempfile::tempdir().unwrap();
    let log = std::fs::File::create(home.path().join("stderr.log")).unwrap();
    let (child, port) = spawn_gateway(home.path(), &config(TOKEN, &telegram, OPEN), &openai, Stdio::from(log));
    let gateway = Daemon { child, port, home: Some(home) };
    daemon::channel_in_state(port, "telegram", "running").await;
    telegram.private_message(42, "Ada", "before");
    messages(&telegram, 42, 1).await;

    // The long poll breaks six times in a row (a body cut off mid-JSON, a closed connection),
    // more than the poller retries by itself, then Telegram is fine again.
    for _ in 0..3 {
        telegram.malformed_next("getUpdates");
        telegram.drop_next_connection("getUpdates");
    }
    let malformed =
        || telegram.calls_to("getUpdates").iter().filter(|call| call.outcome == CallOutcome::Malformed).count();
    tokio::time::timeout(PATIENCE, async {
        while malformed() == 0 {
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    })
    .await
    .expect("the outage begins");
    telegram.private_message(42, "Ada", "during the outage");

    let retrying = daemon::channel_in_state(port, "telegram", "retrying").await;
    assert_eq!(retrying["ok"], false, "{retrying}");
    daemon::channel_in_state(port, "telegram", "running").await;
    let shown = messages(&telegram, 42, 2).await;
    assert_eq!(shown[1].visible_text.trim(), "seen: during the outage", "Telegram kept it; answered after recovery");
    telegram.private_message(42, "Ada", "after");
    let shown = messages(&telegram, 42, 3).await;
    let texts: Vec<&str> = shown.iter().map(|m| m.visible_text.trim()).collect();
    assert_eq!(texts, ["seen: before", "seen: during the outage", "seen: after"], "each answered once");
    assert_eq!(openai.requests().len(), 3, "each message ran once");
    assert_eq!(malformed(), 3, "every scripted fault was met");

    let home = gateway.home.as_ref().unwrap();
    let log = std::fs::read_to_string(home.path().join("stderr.log")).unwrap();
    assert_eq!(log.matches("Telegram polling stopped").count(), 1, "{log}");
    assert!(log.contains("the telegram channel is running again"), "{log}");
    assert!(!log.contains(TOKEN), "the token is not logged");
}
