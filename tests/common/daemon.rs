//! The real `ferry gateway` binary as a child process, for the end-to-end tests: written a
//! config, started in its own home directory, waited on until `/healthz` lists a channel,
//! killed (SIGKILL, no shutdown of any kind) when dropped or on request.

// Each test crate that includes this file uses a different part of it.
#![allow(dead_code)]

use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use ferry_fakes::{FakeOpenAi, FakeTelegram};

/// Generous bound for waiting on explicit signals; never a measurement.
pub const PATIENCE: Duration = Duration::from_secs(60);

/// A running `ferry gateway`.
pub struct Daemon {
    pub child: Child,
    pub port: u16,
    pub home: Option<tempfile::TempDir>,
}

impl Drop for Daemon {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl Daemon {
    /// Kills the process at once (SIGKILL) and hands back its home, for a restart on the
    /// same state.
    pub fn crash(mut self) -> tempfile::TempDir {
        let _ = self.child.kill();
        let _ = self.child.wait();
        self.home.take().expect("the home is still owned")
    }
}

/// Writes `config` (the gateway's port is put in front) to `home/ferry.toml` and starts
/// `ferry gateway` there with the model at `openai`; returns the process and its port.
pub fn spawn_gateway(home: &Path, config: &str, openai: &FakeOpenAi, stderr: Stdio) -> (Child, u16) {
    let rust_log = "ferry=debug,ferry_telegram=debug,ferry_discord=debug,ferry_slack=debug";
    spawn_gateway_logging(home, config, openai, stderr, rust_log)
}

/// [`spawn_gateway`] with `RUST_LOG` set to `rust_log`.
pub fn spawn_gateway_logging(
    home: &Path,
    config: &str,
    openai: &FakeOpenAi,
    stderr: Stdio,
    rust_log: &str,
) -> (Child, u16) {
    let port = std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port();
    std::fs::write(home.join("ferry.toml"), format!("[gateway]\nport = {port}\n\n{config}\n")).unwrap();
    let child = Command::new(env!("CARGO_BIN_EXE_ferry"))
        .arg("gateway")
        .env_clear()
        .env("HOME", home)
        .env("OPENAI_BASE_URL", openai.url())
        .env("OPENAI_API_KEY", "sk-test")
        .env("RUST_LOG", rust_log)
        .current_dir(home)
        .stdout(Stdio::null())
        .stderr(stderr)
        .spawn()
        .expect("start ferry gateway");
    (child, port)
}

/// `ferry gateway` at `RUST_LOG=trace` with its stderr in `<home>/stderr.log`, once
/// `channel` is running: for tests that no secret reaches the log at any level.
pub async fn gateway_at_trace(config: &str, openai: &FakeOpenAi, channel: &str) -> Daemon {
    let home = tempfile::tempdir().unwrap();
    let log = std::fs::File::create(home.path().join("stderr.log")).unwrap();
    let (child, port) = spawn_gateway_logging(home.path(), config, openai, Stdio::from(log), "trace");
    let daemon = Daemon { child, port, home: Some(home) };
    channel_in_state(port, channel, "running").await;
    daemon
}

/// Asserts that the trace log of a [`gateway_at_trace`] daemon holds none of `secrets`.
pub fn assert_log_free_of(daemon: &Daemon, secrets: &[&str]) {
    let home = daemon.home.as_ref().expect("the daemon's home");
    let log = std::fs::read_to_string(home.path().join("stderr.log")).unwrap();
    assert!(log.contains("TRACE"), "the log is at trace level");
    for secret in secrets {
        let leaks: Vec<&str> = log.lines().filter(|line| line.contains(secret)).take(3).collect();
        assert!(leaks.is_empty(), "{secret} is in the log: {leaks:#?}");
    }
}

/// The gateway's `/healthz` JSON once it answers.
pub async fn health(port: u16) -> serde_json::Value {
    let url = format!("http://127.0.0.1:{port}/healthz");
    tokio::time::timeout(PATIENCE, async {
        loop {
            if let Ok(response) = reqwest::get(&url).await
                && let Ok(body) = response.json().await
            {
                return body;
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    })
    .await
    .expect("the gateway did not answer /healthz")
}

/// Waits until `/healthz` shows the channel `name` in `state`; returns the whole answer.
pub async fn channel_in_state(port: u16, name: &str, state: &str) -> serde_json::Value {
    let mut last = serde_json::Value::Null;
    let reached = tokio::time::timeout(PATIENCE, async {
        loop {
            last = health(port).await;
            if channel_entry(&last, name).is_some_and(|entry| entry["state"] == state) {
                return;
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    })
    .await;
    assert!(reached.is_ok(), "{name} never showed as {state}: {last}");
    last
}

/// Asserts that `/healthz` shows the channel `name` running now.
pub async fn assert_running(port: u16, name: &str) {
    let health = health(port).await;
    assert_eq!(channel_entry(&health, name).and_then(|entry| entry["state"].as_str()), Some("running"), "{health}");
}

/// The entry of channel `name` in a `/healthz` answer.
pub fn channel_entry<'a>(health: &'a serde_json::Value, name: &str) -> Option<&'a serde_json::Value> {
    health["channels"].as_array()?.iter().find(|entry| entry["name"] == name)
}

/// Starts `ferry gateway` in `home` and waits until `/healthz` shows `channel` running.
pub async fn daemon_in(home: tempfile::TempDir, config: &str, openai: &FakeOpenAi, channel: &str) -> Daemon {
    let (child, port) = spawn_gateway(home.path(), config, openai, Stdio::inherit());
    let url = format!("http://127.0.0.1:{port}/healthz");
    tokio::time::timeout(PATIENCE, async {
        loop {
            if let Ok(response) = reqwest::get(&url).await
                && let Ok(body) = response.json::<serde_json::Value>().await
                && body["channels"]
                    .as_array()
                    .is_some_and(|c| c.iter().any(|c| c["name"] == channel && c["state"] == "running"))
            {
                return;
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    })
    .await
    .unwrap_or_else(|_| panic!("the gateway did not come up with {channel} connected"));
    Daemon { child, port, home: Some(home) }
}

/// Inbound messages from `channel` the gateway has handled so far, whatever became of each
/// (`ferry_inbound_messages_total` summed over its outcomes, from `/metrics`).
pub async fn inbound_handled(port: u16, channel: &str) -> u64 {
    let Ok(response) = reqwest::get(format!("http://127.0.0.1:{port}/metrics")).await else { return 0 };
    let text = response.text().await.unwrap_or_default();
    let series = format!("ferry_inbound_messages_total{{channel=\"{channel}\",");
    text.lines()
        .filter(|line| line.starts_with(&series))
        .filter_map(|line| line.rsplit_once(' ')?.1.parse::<u64>().ok())
        .sum()
}

/// Waits until the gateway has handled `count` inbound messages from `channel`: for a
/// platform without delivery confirmation (Discord), the only way to know a message was
/// taken before the next one is sent. serenity runs each gateway event in its own task, so
/// two messages sent in the same instant can reach Ferry in either order.
pub async fn wait_for_inbound(port: u16, channel: &str, count: u64) {
    tokio::time::timeout(PATIENCE, async {
        while inbound_handled(port, channel).await < count {
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    })
    .await
    .unwrap_or_else(|_| panic!("the gateway did not handle {count} {channel} messages in time"));
}

/// Waits until the delivery ledger (inside the inbound log of the gateway whose home is
/// `home`) holds a record containing `needle`: the explicit signal that a step of a reply is
/// durable. False if it never does within [`PATIENCE`].
pub async fn ledger_holds(home: &Path, needle: &str) -> bool {
    let log = home.join(".local/share/ferry/inbound.log");
    let found = tokio::time::timeout(PATIENCE, async {
        loop {
            let bytes = std::fs::read(&log).unwrap_or_default();
            if bytes.windows(needle.len()).any(|window| window == needle.as_bytes()) {
                return;
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    })
    .await;
    found.is_ok()
}

/// The bot's messages in the Telegram chat `chat`, trimmed, once there are `count` with text.
pub async fn telegram_replies(telegram: &FakeTelegram, chat: i64, count: usize) -> Vec<String> {
    tokio::time::timeout(PATIENCE, async {
        loop {
            let texts: Vec<String> =
                telegram.messages_in(chat).iter().map(|m| m.visible_text.trim().to_owned()).collect();
            if texts.len() >= count && texts.iter().all(|text| !text.is_empty()) {
                return texts;
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    })
    .await
    .unwrap_or_else(|_| panic!("expected {count} replies in {chat}: {:?}", telegram.messages_in(chat)))
}
