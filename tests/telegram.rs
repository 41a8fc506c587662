//! Telegram end to end: the real `ferry gateway` binary with the Telegram adapter, against
//! the fake Bot API and the fake OpenAI server.

use std::process::{Child, Command, Stdio};
use std::time::Duration;

use ferry_fakes::{FakeOpenAi, FakeTelegram, Reply, Turn};

/// Generous bound for waiting on explicit signals; never a measurement.
const PATIENCE: Duration = Duration::from_secs(60);
const TOKEN: &str = "123456:TEST-token";

struct Daemon {
    child: Child,
    port: u16,
    _home: tempfile::TempDir,
}

impl Drop for Daemon {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// `ferry gateway` with `telegram` (a `[channels.telegram]` body) and the model at `openai`.
async fn daemon(telegram: &FakeTelegram, openai: &FakeOpenAi, extra: &str) -> Daemon {
    daemon_in(tempfile::tempdir().unwrap(), telegram, openai, extra).await
}

/// [`daemon`] on the state left in `home` by an earlier one.
async fn daemon_in(home: tempfile::TempDir, telegram: &FakeTelegram, openai: &FakeOpenAi, extra: &str) -> Daemon {
    let (child, port) = spawn_gateway(home.path(), TOKEN, telegram, openai, extra, Stdio::inherit());
    let healthz = format!("http://127.0.0.1:{port}/healthz");
    tokio::time::timeout(PATIENCE, async {
        loop {
            if let Ok(response) = reqwest::get(&healthz).await
                && let Ok(body) = response.text().await
                && body.contains("telegram")
            {
                return;
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    })
    .await
    .expect("the gateway did not come up with telegram connected");
    Daemon { child, port, _home: home }
}

/// Starts `ferry gateway` in `home` with Telegram (`token`, the fake's URL, `extra` in its
/// section) and the model at `openai`; returns the process and the gateway's port.
fn spawn_gateway(
    home: &std::path::Path,
    token: &str,
    telegram: &FakeTelegram,
    openai: &FakeOpenAi,
    extra: &str,
    stderr: Stdio,
) -> (Child, u16) {
    let port = std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port();
    let config = format!(
        "[gateway]\nport = {port}\n\n[channels.telegram]\nenabled = true\nbot_token = \"{token}\"\napi_url = \"{}\"\n{extra}\n",
        telegram.url()
    );
    std::fs::write(home.join("ferry.toml"), config).unwrap();
    let child = Command::new(env!("CARGO_BIN_EXE_ferry"))
        .arg("gateway")
        .env_clear()
        .env("HOME", home)
        .env("OPENAI_BASE_URL", openai.url())
        .env("OPENAI_API_KEY", "sk-test")
        .env("RUST_LOG", "ferry=debug,ferry_telegram=debug")
        .current_dir(home)
        .stdout(Stdio::null())
        .stderr(stderr)
        .spawn()
        .expect("start ferry gateway");
    (child, port)
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
async fn a_long_reply_is_split_with_intact_code_fences() {
    let (telegram, openai) = fakes().await;
    let mut reply = String::new();
    while reply.len() < 3_000 {
        reply.push_str("Some prose before the code, explaining what it does in detail.\n\n");
    }
    reply.push_str("```rust\n");
    while reply.len() < 6_500 {
        reply.push_str("let value = compute(42); // a line of code\n");
    }
    reply.push_str("```\n\n");
    while reply.len() < 9_000 {
        reply.push_str("And a closing paragraph after the code.\n\n");
    }
    openai.push(Turn::text([reply.clone()]));
    let _daemon = daemon(&telegram, &openai, "dm_policy = \"open\"\nallow_from = [\"*\"]\nstreaming = \"off\"").await;
    telegram.private_message(42, "Ada", "explain");
    let shown = messages(&telegram, 42, 3).await;
    assert_eq!(shown.len(), 3, "9,000 characters in 4,000-character messages");
    for message in &shown {
        assert!(message.visible_text.chars().count() <= 4000);
        assert_eq!(message.text.matches("<pre").count(), message.text.matches("</pre>").count(), "{}", message.text);
    }
    assert!(shown.iter().all(|m| m.parse_mode.as_deref() == Some("HTML")));
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
async fn in_a_group_only_a_mention_runs_and_it_sees_what_was_said_before() {
    let (telegram, openai) = fakes().await;
    openai.push(Turn::text(["Tuesday works for everyone."]));
    let _daemon = daemon(&telegram, &openai, OPEN).await;
    telegram.group_message(-100500, (7, "Bea"), "shall we meet tuesday?", false);
    let second = telegram.group_message(-100500, (8, "Cy"), "tuesday is fine by me", false);
    // Both are taken (held as context) before the mention arrives.
    tokio::time::timeout(PATIENCE, telegram.wait_for_offset(second + 1)).await.unwrap();
    telegram.group_message(-100500, (7, "Bea"), "what do you think?", true);
    let shown = messages(&telegram, -100500, 1).await;
    assert_eq!(shown[0].visible_text, "Tuesday works for everyone.");
    let prompt = openai.requests()[0].body["messages"].as_array().unwrap().last().unwrap()["content"].clone();
    let prompt = prompt.as_str().unwrap();
    assert!(prompt.contains("shall we meet tuesday?") && prompt.contains("tuesday is fine by me"), "{prompt}");
    assert_eq!(openai.requests().len(), 1, "the messages without a mention did not run");
}

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
async fn a_crash_mid_run_neither_loses_the_message_nor_answers_twice() {
    let (telegram, openai) = fakes().await;
    openai.push(Turn::stall(Reply::text(["I was about to", " answer"]), 1));
    openai.push(Turn::text(["Here is your answer."]));
    let mut first = daemon(&telegram, &openai, OPEN).await;
    let update = telegram.private_message(42, "Ada", "an important question");
    tokio::time::timeout(PATIENCE, openai.wait_for_request(0)).await.unwrap();
    tokio::time::timeout(PATIENCE, telegram.wait_for_offset(update + 1)).await.expect("accepted, so confirmed");
    first.child.kill().unwrap(); // SIGKILL: no shutdown of any kind
    first.child.wait().unwrap();
    let home = std::mem::replace(&mut first._home, tempfile::tempdir().unwrap());

    let _second = daemon_in(home, &telegram, &openai, OPEN).await;
    let shown = messages(&telegram, 42, 1).await;
    tokio::time::sleep(Duration::from_millis(500)).await;
    let shown_later = telegram.messages_in(42);
    assert_eq!(shown_later.len(), 1, "answered once: {shown_later:?}");
    assert_eq!(shown[0].visible_text, "Here is your answer.");
    let prompt = &openai.requests()[1].body["messages"];
    assert!(prompt.to_string().contains("an important question"), "the journaled message ran again: {prompt}");
}

#[tokio::test]
async fn a_wrong_token_is_a_clear_error_and_the_gateway_serves_on() {
    let (telegram, openai) = fakes().await;
    let home = tempfile::tempdir().unwrap();
    let (child, port) = spawn_gateway(home.path(), "999:WRONG", &telegram, &openai, "", Stdio::piped());
    let healthz = format!("http://127.0.0.1:{port}/healthz");
    let health: serde_json::Value = tokio::time::timeout(PATIENCE, async {
        loop {
            if let Ok(response) = reqwest::get(&healthz).await {
                return response.json().await.unwrap();
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    })
    .await
    .unwrap();
    let channels = health["channels"].as_array().unwrap();
    assert!(channels.iter().all(|c| c["name"] != "telegram"), "telegram is not running: {health}");
    assert!(channels.iter().any(|c| c["name"] == "webchat"), "the web chat still is");
    Command::new("kill").args(["-TERM", &child.id().to_string()]).status().unwrap();
    let output = child.wait_with_output().unwrap();
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(stderr.contains("telegram channel did not start") && stderr.contains("bot_token"), "{stderr}");
    assert!(!stderr.contains("999:WRONG"), "the token is not logged");
}
