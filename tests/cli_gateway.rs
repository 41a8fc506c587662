//! `ferry gateway` as an operator runs it: the real binary on a fresh machine (no config,
//! the echo provider), reached over HTTP and WebSocket, used by `ferry agent`, and stopped
//! with SIGTERM.

use std::process::{Child, Command, Output, Stdio};
use std::time::Duration;

use ferry::gateway::client::GatewayClient;
use ferry_fakes::{FakeOpenAi, Reply, Turn};
use serde_json::json;

/// Generous bound for waiting on explicit signals; never a measurement.
const PATIENCE: Duration = Duration::from_secs(60);

struct Daemon {
    child: Child,
    port: u16,
    home: tempfile::TempDir,
    env: Vec<(String, String)>,
}

impl Daemon {
    /// Starts `ferry gateway` on a free port and waits until `/healthz` answers.
    async fn start(env: &[(&str, &str)]) -> Self {
        let home = tempfile::tempdir().unwrap();
        Self::start_in(home, env).await
    }

    async fn start_in(home: tempfile::TempDir, env: &[(&str, &str)]) -> Self {
        let port = std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port();
        let mut env: Vec<(String, String)> = env.iter().map(|(k, v)| ((*k).to_owned(), (*v).to_owned())).collect();
        env.push(("FERRY__GATEWAY__PORT".into(), port.to_string()));
        let child = Command::new(env!("CARGO_BIN_EXE_ferry"))
            .arg("gateway")
            .env_clear()
            .env("HOME", home.path())
            .envs(env.iter().cloned())
            .current_dir(home.path())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .expect("start ferry gateway");
        let daemon = Self { child, port, home, env };
        let healthz = format!("http://127.0.0.1:{port}/healthz");
        let up = tokio::time::timeout(PATIENCE, async {
            loop {
                if reqwest::get(&healthz).await.is_ok_and(|response| response.status().is_success()) {
                    return;
                }
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
        });
        up.await.expect("the gateway did not come up");
        daemon
    }

    fn ws_url(&self) -> String {
        format!("ws://127.0.0.1:{}/ws", self.port)
    }

    /// Runs another `ferry` command against this daemon's config.
    async fn ferry(&self, args: &[&str]) -> Output {
        let mut command = Command::new(env!("CARGO_BIN_EXE_ferry"));
        command.args(args).env_clear().env("HOME", self.home.path()).envs(self.env.iter().cloned());
        command.current_dir(self.home.path());
        tokio::task::spawn_blocking(move || command.output().expect("run ferry")).await.unwrap()
    }

    /// SIGTERM, then the exit and what it printed.
    async fn terminate(self) -> (Output, tempfile::TempDir) {
        let status = Command::new("kill").args(["-TERM", &self.child.id().to_string()]).status().unwrap();
        assert!(status.success());
        let child = self.child;
        let output = tokio::task::spawn_blocking(move || child.wait_with_output().unwrap());
        let output = tokio::time::timeout(PATIENCE, output).await.expect("the gateway did not stop").unwrap();
        (output, self.home)
    }
}

fn text(bytes: &[u8]) -> String {
    String::from_utf8_lossy(bytes).into_owned()
}

#[tokio::test]
async fn on_a_fresh_machine_the_gateway_serves_the_web_chat_and_stops_cleanly() {
    let daemon = Daemon::start(&[]).await;
    let page = reqwest::get(format!("http://127.0.0.1:{}/", daemon.port)).await.unwrap();
    assert_eq!(page.status(), 200);

    let mut client = GatewayClient::connect(&daemon.ws_url(), None, "browser-test").await.unwrap();
    client.call("chat.send", json!({"message": "echo me", "idempotencyKey": "k1"})).await.unwrap();
    let final_text = loop {
        let event = client.next_event().await.unwrap();
        if event["event"] == "chat" && event["payload"]["state"] == "final" {
            break event["payload"]["message"]["text"].as_str().unwrap_or_default().to_owned();
        }
    };
    assert_eq!(final_text, "echo me", "the offline echo provider answers");

    let (output, _) = daemon.terminate().await;
    let stderr = text(&output.stderr);
    assert!(output.status.success(), "{stderr}");
    assert!(stderr.contains("offline echo provider"), "{stderr}");
    assert!(stderr.contains("gateway stopped"), "{stderr}");
}

#[tokio::test]
async fn ferry_agent_uses_a_running_gateway_and_says_so() {
    let daemon = Daemon::start(&[]).await;
    let output = daemon.ferry(&["agent", "--message", "through the daemon"]).await;
    let stderr = text(&output.stderr);
    assert!(output.status.success(), "{stderr}");
    assert_eq!(text(&output.stdout), "through the daemon\n");
    assert!(stderr.contains("using the gateway at ws://127.0.0.1"), "{stderr}");

    let listed = daemon.ferry(&["sessions", "list"]).await;
    assert!(text(&listed.stdout).contains("agent:main:main"), "{}", text(&listed.stdout));
    daemon.terminate().await;
}

#[tokio::test]
async fn a_reply_in_progress_at_shutdown_is_finished_and_kept() {
    let fake = FakeOpenAi::start().await.unwrap();
    let pieces = ["Slow ", "and ", "steady ", "wins."];
    fake.push(Turn::Reply(Reply::text(pieces).with_chunk_delay(Duration::from_millis(300))));
    let url = fake.url();
    let env = [("OPENAI_BASE_URL", url.as_str()), ("OPENAI_API_KEY", "sk-test")];
    let daemon = Daemon::start(&env).await;
    let mut client = GatewayClient::connect(&daemon.ws_url(), None, "c").await.unwrap();
    client.call("agent", json!({"message": "take your time", "idempotencyKey": "slow"})).await.unwrap();
    tokio::time::timeout(PATIENCE, fake.wait_for_request(0)).await.unwrap();

    let (output, home) = daemon.terminate().await;
    assert!(output.status.success(), "{}", text(&output.stderr));

    // Started again on the same state: the reply was saved, not cut off.
    let daemon = Daemon::start_in(home, &env).await;
    let mut client = GatewayClient::connect(&daemon.ws_url(), None, "c").await.unwrap();
    let history = client.call("chat.history", json!({"sessionKey": "agent:main:main"})).await.unwrap();
    let messages = history["messages"].as_array().unwrap();
    assert_eq!(messages.last().unwrap()["text"], pieces.concat(), "{history}");
    daemon.terminate().await;
}

#[tokio::test]
async fn a_client_following_a_run_at_shutdown_receives_the_whole_reply_and_new_clients_are_refused() {
    let fake = FakeOpenAi::start().await.unwrap();
    let pieces = ["Every ", "word ", "of ", "this ", "arrives."];
    fake.push(Turn::Reply(Reply::text(pieces).with_chunk_delay(Duration::from_millis(400))));
    let url = fake.url();
    let env = [("OPENAI_BASE_URL", url.as_str()), ("OPENAI_API_KEY", "sk-test")];
    let daemon = Daemon::start(&env).await;
    let mut client = GatewayClient::connect(&daemon.ws_url(), None, "follower").await.unwrap();
    client.call("chat.send", json!({"message": "tell me slowly", "idempotencyKey": "slow"})).await.unwrap();
    tokio::time::timeout(PATIENCE, fake.wait_for_request(0)).await.unwrap();

    let status = Command::new("kill").args(["-TERM", &daemon.child.id().to_string()]).status().unwrap();
    assert!(status.success());
    let final_text = tokio::time::timeout(PATIENCE, async {
        loop {
            let event = client.next_event().await.expect("the connection stays open until the reply is done");
            if event["event"] == "chat" && event["payload"]["state"] == "final" {
                return event["payload"]["message"]["text"].as_str().unwrap_or_default().to_owned();
            }
        }
    })
    .await
    .expect("the final reply");
    assert_eq!(final_text, pieces.concat());
    let late = GatewayClient::connect(&daemon.ws_url(), None, "latecomer").await;
    assert!(late.is_err(), "no new connection during the shutdown");

    let child = daemon.child;
    let output = tokio::task::spawn_blocking(move || child.wait_with_output().unwrap());
    let output = tokio::time::timeout(PATIENCE, output).await.expect("the gateway stops").unwrap();
    assert!(output.status.success(), "{}", text(&output.stderr));
}

#[tokio::test]
async fn no_log_level_writes_the_gateway_token_or_one_a_client_tried() {
    let env = [("RUST_LOG", "trace"), ("FERRY__GATEWAY__AUTH_TOKEN", "s3cret-gateway-token")];
    let daemon = Daemon::start(&env).await;
    let refused = GatewayClient::connect(&daemon.ws_url(), Some("wrong-guess-4711"), "prober").await;
    assert!(refused.is_err(), "a wrong token is refused");
    let mut client = GatewayClient::connect(&daemon.ws_url(), Some("s3cret-gateway-token"), "operator").await.unwrap();
    client.call("health", json!({})).await.unwrap();
    drop(client);
    let (output, _) = daemon.terminate().await;
    let stderr = text(&output.stderr);
    assert!(
        stderr.contains("TRACE") || stderr.contains("DEBUG"),
        "the log is verbose: {}",
        &stderr[..stderr.len().min(2000)]
    );
    for secret in ["s3cret-gateway-token", "wrong-guess-4711"] {
        assert!(!stderr.contains(secret), "{secret} is in the log");
    }
}
