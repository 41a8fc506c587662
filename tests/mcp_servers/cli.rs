//! End to end through the `ferry` binary: a chat turn in which the fake model calls an MCP
//! tool (embedded, and through a running gateway with `/healthz` and `/metrics`), a denied
//! tool not offered, `ferry mcp list` and `ferry config check`.

use std::path::Path;
use std::process::{Command, Output, Stdio};
use std::time::Duration;

use ferry_fakes::{FakeOpenAi, ToolCall, Turn};
use serde_json::{Value, json};

use super::crate_daemon;
use super::{Installed, installed};

/// `[mcp.servers.fast]`: the Python test server.
fn fast_server(installed: &Installed) -> String {
    format!("[mcp.servers.fast]\ncommand = {:?}\nargs = [{:?}]\n", installed.python, installed.fastmcp)
}

/// Runs `ferry <args>` in `home` with `home/ferry.toml`, the model at `model`.
async fn ferry(home: &Path, model: &FakeOpenAi, args: &[&str]) -> Output {
    let mut command = Command::new(env!("CARGO_BIN_EXE_ferry"));
    command
        .args(["--config", &home.join("ferry.toml").display().to_string()])
        .args(args)
        .env_clear()
        .env("HOME", home)
        .env("PATH", std::env::var("PATH").unwrap_or_default())
        .env("OPENAI_BASE_URL", model.url())
        .env("OPENAI_API_KEY", "sk-mcp-test")
        .current_dir(home);
    tokio::task::spawn_blocking(move || command.output().expect("run ferry")).await.expect("join")
}

fn text(bytes: &[u8]) -> String {
    String::from_utf8_lossy(bytes).into_owned()
}

/// A free port, so `ferry agent` finds no gateway and runs embedded.
fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port()
}

fn offered(request: &Value) -> Vec<String> {
    let tools = request["tools"].as_array().cloned().unwrap_or_default();
    tools.iter().filter_map(|tool| tool["function"]["name"].as_str().map(str::to_owned)).collect()
}

fn tool_messages(request: &Value) -> Vec<String> {
    let messages = request["messages"].as_array().cloned().unwrap_or_default();
    messages
        .iter()
        .filter(|message| message["role"] == "tool")
        .map(|message| message["content"].as_str().unwrap_or_default().to_owned())
        .collect()
}

#[tokio::test]
async fn the_model_calls_an_mcp_tool_and_the_result_reaches_it_and_the_transcript() {
    let Some(installed) = installed() else { return };
    let home = tempfile::tempdir().unwrap();
    let config =
        format!("[gateway]\nport = {}\n\n[tools]\ndeny = [\"fast__add\"]\n\n{}", free_port(), fast_server(&installed));
    std::fs::write(home.path().join("ferry.toml"), config).unwrap();
    let model = FakeOpenAi::start().await.unwrap();
    let call = ToolCall::new("call_1", "fast__echo", json!({"text": "from the chat"}).to_string());
    model.push(Turn::tool_calls([call])).push(Turn::text(["Echoed."]));

    let output = ferry(home.path(), &model, &["agent", "--json", "--message", "echo this"]).await;
    assert!(output.status.success(), "{}", text(&output.stderr));
    let requests = model.requests();
    let tools = offered(&requests[0].body);
    assert!(tools.contains(&"fast__echo".to_owned()), "{tools:?}");
    assert!(!tools.contains(&"fast__add".to_owned()), "a denied MCP tool is not offered: {tools:?}");
    assert_eq!(tool_messages(&requests[1].body), ["from the chat"]);
    // Like a built-in tool, the call shows in the run's tool events.
    let events: Vec<Value> = text(&output.stdout).lines().filter_map(|line| serde_json::from_str(line).ok()).collect();
    let phases: Vec<(&str, &str)> = events
        .iter()
        .filter(|event| event["stream"] == "tool")
        .map(|event| (event["data"]["phase"].as_str().unwrap_or(""), event["data"]["name"].as_str().unwrap_or("")))
        .collect();
    assert_eq!(phases, [("start", "fast__echo"), ("result", "fast__echo")]);

    // The session's next turn carries the call and its result in its history.
    model.push(Turn::text(["Still here."]));
    let again = ferry(home.path(), &model, &["agent", "--message", "and again"]).await;
    assert!(again.status.success(), "{}", text(&again.stderr));
    let history = model.requests().last().unwrap().body.clone();
    assert_eq!(tool_messages(&history), ["from the chat"], "{history}");
}

#[tokio::test]
async fn a_running_gateway_reports_its_servers_in_healthz_and_counts_calls_in_metrics() {
    let Some(installed) = installed() else { return };
    let home = tempfile::tempdir().unwrap();
    let model = FakeOpenAi::start().await.unwrap();
    let broken = "[mcp.servers.broken]\ncommand = \"/nonexistent/server\"\n";
    let (child, port) = crate_daemon::spawn_gateway(
        home.path(),
        &format!("{}\n{broken}", fast_server(&installed)),
        &model,
        Stdio::null(),
    );
    let _daemon = crate_daemon::Daemon { child, port, home: None };
    let health = tokio::time::timeout(Duration::from_secs(60), async {
        loop {
            let health = crate_daemon::health(port).await;
            if health["mcp"][1]["state"] == "ready" {
                return health;
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    })
    .await
    .expect("the fast server ready in /healthz");
    assert_eq!(health["mcp"][1]["name"], "fast");
    assert!(health["mcp"][1]["tools"].as_u64().unwrap() >= 8, "{health}");
    assert_eq!(health["mcp"][0]["name"], "broken");
    assert_eq!(health["mcp"][0]["state"], "retrying");
    assert_eq!(health["ok"], true, "an MCP server does not make the bot unhealthy");

    // A turn through the gateway (`ferry agent` finds it on the config's port).
    let call = ToolCall::new("call_1", "fast__add", json!({"a": 20, "b": 22}).to_string());
    model.push(Turn::tool_calls([call])).push(Turn::text(["42."]));
    let output = ferry(home.path(), &model, &["agent", "--message", "add them"]).await;
    assert!(output.status.success(), "{}", text(&output.stderr));
    assert_eq!(tool_messages(&model.requests()[1].body), ["42"]);
    let metrics = reqwest::get(format!("http://127.0.0.1:{port}/metrics")).await.unwrap().text().await.unwrap();
    assert!(metrics.contains("ferry_mcp_calls_total{server=\"fast\"} 1"), "{metrics}");
    assert!(metrics.contains("ferry_mcp_call_duration_seconds_count{server=\"fast\"} 1"), "{metrics}");
}

#[tokio::test]
async fn a_message_right_after_the_start_waits_for_a_server_still_connecting() {
    let Some(installed) = installed() else { return };
    let home = tempfile::tempdir().unwrap();
    let model = FakeOpenAi::start().await.unwrap();
    let slow = format!(
        "[mcp.servers.fast]\ncommand = {:?}\nargs = [{:?}, \"--start-delay\", \"4\"]\n",
        installed.python, installed.fastmcp
    );
    let (child, port) = crate_daemon::spawn_gateway(home.path(), &slow, &model, Stdio::null());
    let _daemon = crate_daemon::Daemon { child, port, home: None };
    let health = tokio::time::timeout(Duration::from_secs(30), async {
        loop {
            if let Ok(response) = reqwest::get(format!("http://127.0.0.1:{port}/healthz")).await
                && let Ok(health) = response.json::<Value>().await
            {
                return health;
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    })
    .await
    .expect("the gateway up");
    assert_eq!(health["mcp"][0]["state"], "starting", "the message must come while the server connects: {health}");

    model.push(Turn::text(["Echo is there."]));
    let output = ferry(home.path(), &model, &["agent", "--message", "can you echo?"]).await;
    assert!(output.status.success(), "{}", text(&output.stderr));
    let tools = offered(&model.requests()[0].body);
    assert!(tools.contains(&"fast__echo".to_owned()), "the run waited for the server's tools: {tools:?}");
}

#[tokio::test]
async fn mcp_list_prints_every_servers_tools_and_fails_on_one_it_cannot_reach() {
    let Some(installed) = installed() else { return };
    let home = tempfile::tempdir().unwrap();
    let model = FakeOpenAi::start().await.unwrap();
    std::fs::write(home.path().join("ferry.toml"), fast_server(&installed)).unwrap();
    let output = ferry(home.path(), &model, &["mcp", "list"]).await;
    assert!(output.status.success(), "{}", text(&output.stderr));
    let listed = text(&output.stdout);
    assert!(listed.starts_with("fast: ready, "), "{listed}");
    assert!(listed.contains("\n  fast__echo\n") && listed.contains("\n  fast__pid\n"), "{listed}");

    let broken =
        format!("{}\n[mcp.servers.gone]\nurl = \"http://127.0.0.1:{}/mcp\"\n", fast_server(&installed), free_port());
    std::fs::write(home.path().join("ferry.toml"), broken).unwrap();
    let output = ferry(home.path(), &model, &["mcp", "list"]).await;
    assert!(!output.status.success());
    let listed = text(&output.stdout);
    assert!(listed.contains("gone: failed (http)"), "{listed}");
    assert!(text(&output.stderr).contains("1 MCP server(s) could not be reached"));
}

#[tokio::test]
async fn config_check_names_a_missing_program_and_a_bad_entry() {
    let home = tempfile::tempdir().unwrap();
    let model = FakeOpenAi::start().await.unwrap();
    let write = |config: &str| std::fs::write(home.path().join("ferry.toml"), config).unwrap();
    write("[mcp.servers.ok]\ncommand = \"sh\"\n");
    let output = ferry(home.path(), &model, &["config", "check"]).await;
    assert!(output.status.success(), "{}", text(&output.stderr));
    assert!(text(&output.stdout).contains("mcp servers: ok"));

    write("[mcp.servers.typo]\ncommand = \"no-such-mcp-server\"\n");
    let output = ferry(home.path(), &model, &["config", "check"]).await;
    assert!(!output.status.success());
    let error = text(&output.stderr);
    assert!(error.contains("ferry.toml") && error.contains("mcp.servers.typo.command"), "{error}");
    assert!(error.contains("`no-such-mcp-server` is not on PATH"), "{error}");

    write("[mcp.servers.both]\ncommand = \"sh\"\nurl = \"http://127.0.0.1:1/mcp\"\n");
    let error = text(&ferry(home.path(), &model, &["config", "check"]).await.stderr);
    assert!(error.contains("mcp.servers.both") && error.contains("both `command` and `url`"), "{error}");
    write("[tools]\ndeny = [\"group:mcp:nope\"]\n");
    let error = text(&ferry(home.path(), &model, &["config", "check"]).await.stderr);
    assert!(error.contains("tools.deny") && error.contains("`nope`, which is not configured"), "{error}");
}

#[tokio::test]
async fn no_secret_of_a_server_reaches_the_log_at_trace() {
    let Some(installed) = installed() else { return };
    let (_server, url) = super::everything_over_http(&installed, 0).await;
    let model = FakeOpenAi::start().await.unwrap();
    let config = format!(
        "{}env = {{ FAST_SECRET = \"env-secret-4711\" }}\n\n[mcp.servers.remote]\nurl = {url:?}\nheaders = {{ Authorization = \"Bearer header-secret-4712\" }}\n",
        fast_server(&installed)
    );
    let daemon = crate_daemon::gateway_at_trace(&config, &model, "webchat").await;
    tokio::time::timeout(Duration::from_secs(60), async {
        loop {
            let health = crate_daemon::health(daemon.port).await;
            let states: Vec<&Value> = health["mcp"]
                .as_array()
                .map(|servers| servers.iter().map(|s| &s["state"]).collect())
                .unwrap_or_default();
            if states.len() == 2 && states.iter().all(|state| *state == "ready") {
                return;
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    })
    .await
    .expect("both servers ready");
    crate_daemon::assert_log_free_of(&daemon, &["env-secret-4711", "header-secret-4712"]);
}
