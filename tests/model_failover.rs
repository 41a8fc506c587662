//! Model failover end to end (issue 20): the real `ferry gateway` binary with the Telegram
//! adapter, a provider with two auth profiles on the fake OpenAI server (`p1`, keys
//! [`KEY_A`] as profile `default` and [`KEY_B`] as profile `b`) and, where a scenario needs
//! one, a fallback model on the fake Anthropic server (`p2`).
//!
//! Every scenario is a DM from an allowed user and checks that the user gets exactly one
//! answer. "Nothing else was sent" is proven the way the conformance suite proves it: once
//! the run has finished, `/status` is sent, and sends to one chat are FIFO, so its reply
//! arriving means everything the run queued before it is in the chat.

use std::path::Path;
use std::time::Duration;

use chrono::{DateTime, TimeDelta, Utc};
use ferry_fakes::{FakeAnthropic, FakeOpenAi, FakeTelegram, KeyBehaviour, RecordedRequest, Reply, SentMessage, Turn};

#[path = "common/daemon.rs"]
mod daemon;

use daemon::{PATIENCE, daemon_in};

const TOKEN: &str = "123456:TEST-token";
/// `p1`'s bare `api_key`: the profile `default`, tried first.
const KEY_A: &str = "sk-p1-default-7Qz1xw3Lr9Ka";
/// `p1`'s profile `b`.
const KEY_B: &str = "sk-p1-backup-5Hn2Vd8Tq4Pm";
/// `p2`'s only key (profile `default`).
const KEY_P2: &str = "sk-ant-p2-9Jc6Ys1Bf3Wg";

/// The user writing to the bot; a DM's chat id is the user's id.
const CHAT: i64 = 42;

/// Open DMs, replies sent whole (no preview).
const OPEN: &str = "dm_policy = \"open\"\nallow_from = [\"*\"]\nstreaming = \"off\"";
/// Open DMs with preview streaming, so text is visible before the reply is complete.
const PREVIEW: &str = "dm_policy = \"open\"\nallow_from = [\"*\"]\nstreaming = \"partial\"";

/// The gateway's config: the Telegram channel with `channel_keys`, then `tables`.
fn config(telegram: &FakeTelegram, channel_keys: &str, tables: &str) -> String {
    format!(
        "[channels.telegram]\nenabled = true\nbot_token = \"{TOKEN}\"\napi_url = \"{}\"\n{channel_keys}\n\n{tables}\n",
        telegram.url()
    )
}

/// `[models.providers.p1]` on `openai`: [`KEY_A`] as `default`, then [`KEY_B`] as `b`.
fn p1(openai: &FakeOpenAi) -> String {
    format!(
        "[models.providers.p1]\nkind = \"openai\"\nbase_url = \"{}\"\napi_key = \"{KEY_A}\"\n\n\
         [models.providers.p1.profiles.b]\napi_key = \"{KEY_B}\"\n",
        openai.url()
    )
}

/// `[models.providers.p2]` on `anthropic`, with [`KEY_P2`].
fn p2(anthropic: &FakeAnthropic) -> String {
    format!("[models.providers.p2]\nkind = \"anthropic\"\nbase_url = \"{}\"\napi_key = \"{KEY_P2}\"\n", anthropic.url())
}

async fn telegram() -> FakeTelegram {
    FakeTelegram::start(TOKEN).await.expect("fake Telegram").without_rate_limits()
}

/// `openai` with [`KEY_A`] and [`KEY_B`] behaving as told.
async fn openai(a: KeyBehaviour, b: KeyBehaviour) -> FakeOpenAi {
    FakeOpenAi::start().await.expect("fake OpenAI").with_key(KEY_A, a).with_key(KEY_B, b)
}

/// A model reply that quotes the question, so each answer says which message it is for.
fn answer_naming_the_question(request: &RecordedRequest) -> Turn {
    Turn::text([format!("answer to: {}", request.last_user_text().unwrap_or_default())])
}

/// Waits until the bot's messages in [`CHAT`] satisfy `done`; returns them.
async fn until(telegram: &FakeTelegram, done: impl Fn(&[SentMessage]) -> bool) -> Vec<SentMessage> {
    let reached = tokio::time::timeout(PATIENCE, async {
        loop {
            let shown = telegram.messages_in(CHAT);
            if done(&shown) {
                return shown;
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    })
    .await;
    reached.unwrap_or_else(|_| panic!("the chat never got there: {:#?}", telegram.messages_in(CHAT)))
}

/// Waits for a bot message in [`CHAT`] whose visible text contains `needle`.
async fn shown_containing(telegram: &FakeTelegram, needle: &str) -> Vec<SentMessage> {
    until(telegram, |shown| shown.iter().any(|message| message.visible_text.contains(needle))).await
}

/// Whether a bot message is the reply to `/status`.
fn is_status(message: &SentMessage) -> bool {
    message.visible_text.starts_with("Session:")
}

/// The gateway's `/metrics` text (open: no `auth_token` is configured).
async fn metrics_text(port: u16) -> String {
    let response = reqwest::get(format!("http://127.0.0.1:{port}/metrics")).await.expect("GET /metrics");
    response.text().await.expect("the /metrics body")
}

/// The value of one series (name and labels, exactly as exported) in `/metrics`; 0 if absent.
async fn metric(port: u16, series: &str) -> f64 {
    let text = metrics_text(port).await;
    text.lines()
        .find_map(|line| line.strip_prefix(series)?.strip_prefix(' '))
        .map_or(0.0, |value| value.parse().expect("a number"))
}

/// Runs this gateway process has finished, however they ended.
async fn runs_finished(port: u16) -> u64 {
    let text = metrics_text(port).await;
    text.lines()
        .filter(|line| line.starts_with("ferry_runs_finished_total{"))
        .filter_map(|line| line.rsplit_once(' ')?.1.parse::<u64>().ok())
        .sum()
}

/// Once this gateway process has finished `runs` runs, asks `/status` and waits for its
/// reply: everything queued for the chat before it has been sent by then. Returns the
/// visible texts of the bot's other messages in the chat, and the `/status` reply.
async fn settle(telegram: &FakeTelegram, port: u16, runs: u64) -> (Vec<String>, String) {
    let finished = tokio::time::timeout(PATIENCE, async {
        while runs_finished(port).await < runs {
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    })
    .await;
    assert!(finished.is_ok(), "the gateway did not finish {runs} run(s)");
    let asked_before = telegram.messages_in(CHAT).iter().filter(|message| is_status(message)).count();
    telegram.private_message(CHAT, "Ada", "/status");
    let shown = until(telegram, |shown| shown.iter().filter(|message| is_status(message)).count() > asked_before).await;
    let status = shown.iter().rfind(|message| is_status(message)).map(|message| message.visible_text.clone());
    let others = shown.iter().filter(|message| !is_status(message)).map(|message| message.visible_text.clone());
    (others.collect(), status.unwrap_or_default())
}

/// `cooling_until` of `provider`'s `profile` as the state database in `home` holds it, if a
/// cooldown is recorded there. Read-only, beside the running gateway (WAL readers do not
/// block its writer).
fn persisted_cooldown(home: &Path, provider: &str, profile: &str) -> Option<String> {
    let path = home.join(".local/share/ferry/ferry.db");
    let flags = rusqlite::OpenFlags::SQLITE_OPEN_READ_ONLY | rusqlite::OpenFlags::SQLITE_OPEN_NO_MUTEX;
    let connection = rusqlite::Connection::open_with_flags(path, flags).ok()?;
    connection
        .query_row(
            "SELECT cooling_until FROM auth_profile_health WHERE provider = ?1 AND profile = ?2",
            [provider, profile],
            |row| row.get::<_, Option<String>>(0),
        )
        .ok()
        .flatten()
}

/// Waits until the delivery ledger in `home` holds a record containing `needle`.
async fn ledger_holds(home: &Path, needle: &str) {
    assert!(daemon::ledger_holds(home, needle).await, "the ledger never recorded {needle}");
}

#[tokio::test]
async fn a_rate_limited_key_fails_over_to_the_next_key_and_the_user_gets_one_answer() {
    let telegram = telegram().await;
    let openai = openai(KeyBehaviour::RateLimited { retry_after_secs: 30 }, KeyBehaviour::Healthy).await;
    openai.push(Turn::text(["Answered with ", "the second key."]));
    let tables = format!("{}\n[agents.defaults]\nmodel = \"p1/m1\"\n", p1(&openai));
    let gateway = daemon_in(tempfile::tempdir().unwrap(), &config(&telegram, OPEN, &tables), &openai, "telegram").await;

    telegram.private_message(CHAT, "Ada", "what is the weather?");
    shown_containing(&telegram, "Answered with the second key.").await;
    let (answers, _) = settle(&telegram, gateway.port, 1).await;
    assert_eq!(answers, ["Answered with the second key."], "exactly one answer");
    assert_eq!(openai.requests_with_key(KEY_A), 1, "the rate-limited key was asked once and then left alone");
    assert_eq!(openai.requests_with_key(KEY_B), 1, "the answer came through the second key");
    assert_eq!(openai.remaining_turns(), 0);

    let failover = r#"ferry_model_failovers_total{from="p1/m1@default",to="p1/m1@b",reason="rate_limit"}"#;
    assert_eq!(metric(gateway.port, failover).await, 1.0, "{}", metrics_text(gateway.port).await);
    let cooldowns = r#"ferry_auth_profile_cooldowns_total{provider="p1",reason="rate_limit"}"#;
    assert_eq!(metric(gateway.port, cooldowns).await, 1.0);
    assert_eq!(metric(gateway.port, "ferry_auth_profiles_cooling").await, 1.0, "key A is cooling");
}

#[tokio::test]
async fn when_every_key_of_the_primary_fails_the_fallback_model_answers_and_status_names_it() {
    let telegram = telegram().await;
    let openai = openai(KeyBehaviour::Unauthorized, KeyBehaviour::Billing).await;
    let anthropic = FakeAnthropic::start().await.expect("fake Anthropic").with_key(KEY_P2, KeyBehaviour::Healthy);
    anthropic.push(Turn::text(["The fallback ", "model answers."]));
    let tables = format!(
        "{}\n{}\n[agents.defaults]\nmodel = {{ primary = \"p1/m1\", fallbacks = [\"p2/m2\"] }}\n",
        p1(&openai),
        p2(&anthropic)
    );
    let gateway = daemon_in(tempfile::tempdir().unwrap(), &config(&telegram, OPEN, &tables), &openai, "telegram").await;

    telegram.private_message(CHAT, "Ada", "who answers?");
    shown_containing(&telegram, "The fallback model answers.").await;
    let (answers, status) = settle(&telegram, gateway.port, 1).await;
    assert_eq!(answers, ["The fallback model answers."], "exactly one answer");
    assert_eq!((openai.requests_with_key(KEY_A), openai.requests_with_key(KEY_B)), (1, 1), "each p1 key asked once");
    assert_eq!(anthropic.requests_with_key(KEY_P2), 1);
    assert_eq!(anthropic.requests()[0].body["model"], "m2");

    let failovers = [
        r#"ferry_model_failovers_total{from="p1/m1@default",to="p1/m1@b",reason="auth"}"#,
        r#"ferry_model_failovers_total{from="p1/m1@b",to="p2/m2@default",reason="billing"}"#,
    ];
    for series in failovers {
        assert_eq!(metric(gateway.port, series).await, 1.0, "{series}\n{}", metrics_text(gateway.port).await);
    }
    assert_eq!(metric(gateway.port, "ferry_auth_profiles_cooling").await, 2.0, "both p1 keys are cooling");

    assert!(
        status.contains("Answered by: p2/m2 (profile default)"),
        "/status names the model that answered:\n{status}"
    );
}

#[tokio::test]
async fn a_key_cooling_before_a_restart_is_still_cooling_after_it() {
    let telegram = telegram().await;
    let openai = openai(KeyBehaviour::RateLimited { retry_after_secs: 600 }, KeyBehaviour::Healthy).await;
    openai.set_responder(answer_naming_the_question);
    let tables = format!("{}\n[agents.defaults]\nmodel = \"p1/m1\"\n", p1(&openai));
    let config = config(&telegram, OPEN, &tables);
    let gateway = daemon_in(tempfile::tempdir().unwrap(), &config, &openai, "telegram").await;

    telegram.private_message(CHAT, "Ada", "first question");
    shown_containing(&telegram, "first question").await;
    assert_eq!((openai.requests_with_key(KEY_A), openai.requests_with_key(KEY_B)), (1, 1));
    let home = gateway.home.as_ref().expect("the gateway's home").path().to_owned();
    // Killed before the delivery is recorded, the answer would be sent again after the
    // restart: Telegram has no idempotency key (`SendReconciliation::None`).
    ledger_holds(&home, "\"event\":\"delivered\"").await;
    // The explicit signal that the cooldown is durable: its row in the state database.
    let persisted = tokio::time::timeout(PATIENCE, async {
        loop {
            if let Some(until) = persisted_cooldown(&home, "p1", "default") {
                return until;
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    })
    .await
    .expect("key A's cooldown is kept in the state database");
    let until = DateTime::parse_from_rfc3339(&persisted).expect("an RFC 3339 time").with_timezone(&Utc);
    assert!(until > Utc::now() + TimeDelta::minutes(5), "the retry-after of 600 s is honoured: {persisted}");

    let home = gateway.crash();
    openai.set_key(KEY_A, KeyBehaviour::Healthy);
    let gateway = daemon_in(home, &config, &openai, "telegram").await;
    assert_eq!(metric(gateway.port, "ferry_auth_profiles_cooling").await, 1.0, "the cooldown was restored");

    telegram.private_message(CHAT, "Ada", "second question");
    shown_containing(&telegram, "second question").await;
    let (answers, _) = settle(&telegram, gateway.port, 1).await;
    assert_eq!(answers.len(), 2, "each question answered once, across the restart: {answers:?}");
    assert!(answers[0].contains("first question") && answers[1].contains("second question"), "{answers:?}");
    assert_eq!(openai.requests_with_key(KEY_A), 1, "the healed key is not asked while its cooldown lasts");
    assert_eq!(openai.requests_with_key(KEY_B), 2);
}

#[tokio::test]
async fn after_visible_text_failures_are_asked_again_of_the_same_key_without_failover_or_duplicate_text() {
    let telegram = telegram().await;
    let openai = openai(KeyBehaviour::Healthy, KeyBehaviour::Healthy).await;
    let first = "The first attempt says this much, and then";
    openai.push(Turn::cut(Reply::text([first, " breaks off"]).with_chunk_delay(Duration::from_millis(1500)), 1));
    // The retry fails before it shows anything new: still no failover to the other key.
    openai.push(Turn::rate_limited(0));
    openai.push(Turn::text(["The second attempt ", "finishes the answer."]));
    let tables = format!("{}\n[agents.defaults]\nmodel = \"p1/m1\"\nmodel_retry_after_output_ms = 200\n", p1(&openai));
    let gateway =
        daemon_in(tempfile::tempdir().unwrap(), &config(&telegram, PREVIEW, &tables), &openai, "telegram").await;

    telegram.private_message(CHAT, "Ada", "a question");
    let full = "The second attempt finishes the answer.";
    until(&telegram, |shown| shown.iter().any(|message| message.visible_text.trim() == full)).await;
    let (answers, _) = settle(&telegram, gateway.port, 1).await;
    let answers: Vec<&str> = answers.iter().map(|text| text.trim()).collect();
    assert_eq!(answers, [full], "one message, holding the answer once");

    let previews = telegram.calls_to("sendMessage");
    let preview = previews[0].params["text"].as_str().unwrap_or_default();
    assert!(preview.contains(first), "the first attempt's text was visible before it broke off: {preview:?}");
    assert_eq!(previews.len(), 2, "one message for the answer, one for /status: {previews:?}");
    assert_eq!(openai.requests_with_key(KEY_A), 3, "the same key was asked again, twice");
    assert_eq!(openai.requests_with_key(KEY_B), 0, "no failover after visible output");
    let failovers = metrics_text(gateway.port).await;
    assert!(!failovers.lines().any(|line| line.starts_with("ferry_model_failovers_total{")), "{failovers}");
}

#[tokio::test]
async fn when_every_key_is_down_the_user_gets_one_unavailable_message_without_secrets() {
    let telegram = telegram().await;
    let openai = openai(KeyBehaviour::Unauthorized, KeyBehaviour::RateLimited { retry_after_secs: 600 }).await;
    let tables = format!("{}\n[agents.defaults]\nmodel = \"p1/m1\"\n", p1(&openai));
    let gateway = daemon::gateway_at_trace(&config(&telegram, OPEN, &tables), &openai, "telegram").await;

    let asked = Utc::now();
    telegram.private_message(CHAT, "Ada", "anyone there?");
    shown_containing(&telegram, "unavailable").await;
    let told = Utc::now();
    let (answers, _) = settle(&telegram, gateway.port, 1).await;
    assert_eq!(answers.len(), 1, "exactly one message: {answers:?}");
    let message = &answers[0];
    assert_eq!((openai.requests_with_key(KEY_A), openai.requests_with_key(KEY_B)), (1, 1), "each key asked once");

    // Key B, rate-limited for 600 s, is the first one back.
    let back = [asked, told].map(|at| (at + TimeDelta::seconds(600)).format("It may be back at %H:%M UTC").to_string());
    assert!(back.iter().any(|line| message.contains(line.as_str())), "expected one of {back:?} in {message:?}");
    assert_free_of_internals(message);

    // While both keys cool, the next question is answered the same way without asking either.
    telegram.private_message(CHAT, "Ada", "and now?");
    let (answers, _) = settle(&telegram, gateway.port, 2).await;
    assert_eq!(answers.len(), 2, "one message per question: {answers:?}");
    assert!(answers[1].contains("unavailable"), "{answers:?}");
    assert_free_of_internals(&answers[1]);
    assert_eq!((openai.requests_with_key(KEY_A), openai.requests_with_key(KEY_B)), (1, 1), "no key asked again");

    daemon::assert_log_free_of(&gateway, &[KEY_A, KEY_B, TOKEN]);
}

/// Asserts that a message to a chat user is one friendly line: no key, no stack trace, no
/// raw error body.
fn assert_free_of_internals(message: &str) {
    for secret in [KEY_A, KEY_B, KEY_P2] {
        assert!(!message.contains(secret), "key material in {message:?}");
    }
    for internal in ["panicked", "backtrace", "src/", ".rs:", "{\"error\"", "Incorrect API key", "sk-"] {
        assert!(!message.contains(internal), "{internal:?} in {message:?}");
    }
    assert_eq!(message.trim().lines().count(), 1, "one line: {message:?}");
}

#[tokio::test]
async fn a_stalled_key_is_abandoned_after_the_idle_timeout_and_the_next_key_answers() {
    let telegram = telegram().await;
    let openai = openai(KeyBehaviour::Stall, KeyBehaviour::Healthy).await;
    openai.push(Turn::text(["Answered after ", "the stall."]));
    let tables = format!("{}\n[agents.defaults]\nmodel = \"p1/m1\"\nmodel_idle_timeout_seconds = 2\n", p1(&openai));
    let gateway = daemon_in(tempfile::tempdir().unwrap(), &config(&telegram, OPEN, &tables), &openai, "telegram").await;

    telegram.private_message(CHAT, "Ada", "are you stuck?");
    shown_containing(&telegram, "Answered after the stall.").await;
    let (answers, _) = settle(&telegram, gateway.port, 1).await;
    assert_eq!(answers, ["Answered after the stall."], "exactly one answer");
    assert_eq!((openai.requests_with_key(KEY_A), openai.requests_with_key(KEY_B)), (1, 1));
    let failover = r#"ferry_model_failovers_total{from="p1/m1@default",to="p1/m1@b",reason="timeout"}"#;
    assert_eq!(metric(gateway.port, failover).await, 1.0, "{}", metrics_text(gateway.port).await);
    let released = tokio::time::timeout(PATIENCE, openai.wait_for_open_streams(0)).await;
    assert!(released.is_ok(), "the stalled request was let go: {} stream(s) open", openai.open_streams());
}
