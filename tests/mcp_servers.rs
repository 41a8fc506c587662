//! The MCP client against real MCP servers nobody here wrote: the reference
//! `@modelcontextprotocol/server-everything` (npm) over stdio and streamable HTTP, and a small
//! server on the Python `mcp` package (tests/mcp/fastmcp_server.py). `tests/mcp/setup`
//! installs them and prints the `FERRY_MCP_*` variables these tests read; without them the
//! tests skip, unless `FERRY_REQUIRE_MCP=1` (CI) makes that a failure.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::{Duration, Instant};

use ferry::agent::tools::{RecentSessions, ToolContext, ToolSource};
use ferry::channels::ChannelRegistry;
use ferry::config::{Environment, McpConfig, McpServerConfig, Secret};
use ferry::mcp::{McpTools, Phase};
use serde_json::json;

#[path = "mcp_servers/cli.rs"]
mod cli;
#[path = "common/daemon.rs"]
mod crate_daemon;

/// The installed servers, or `None` (and the test skips) when `tests/mcp/setup` was not run.
pub struct Installed {
    pub node: String,
    pub everything: String,
    pub loopback: String,
    pub python: String,
    pub fastmcp: String,
}

pub fn installed() -> Option<Installed> {
    let var = |name: &str| std::env::var(name).ok().filter(|value| !value.is_empty());
    let found = (|| {
        Some(Installed {
            node: var("FERRY_MCP_NODE")?,
            everything: var("FERRY_MCP_EVERYTHING")?,
            loopback: var("FERRY_MCP_LOOPBACK")?,
            python: var("FERRY_MCP_PYTHON")?,
            fastmcp: var("FERRY_MCP_FASTMCP_SERVER")?,
        })
    })();
    if found.is_none() {
        assert!(
            std::env::var("FERRY_REQUIRE_MCP").as_deref() != Ok("1"),
            "FERRY_REQUIRE_MCP=1 but the MCP servers are not installed: eval \"$(tests/mcp/setup)\""
        );
        eprintln!("skipped: MCP servers not installed (eval \"$(tests/mcp/setup)\")");
    }
    found
}

fn stdio(command: &str, args: &[&str]) -> McpServerConfig {
    McpServerConfig {
        command: Some(command.to_owned()),
        args: args.iter().map(|arg| (*arg).to_owned()).collect(),
        ..Default::default()
    }
}

fn everything(installed: &Installed) -> McpServerConfig {
    stdio(&installed.node, &[&installed.everything, "stdio"])
}

fn fastmcp(installed: &Installed) -> McpServerConfig {
    stdio(&installed.python, &[&installed.fastmcp])
}

/// The environment Ferry runs in: with secrets a server must never see.
fn ferry_env() -> Environment {
    Environment::new(
        [
            ("PATH".to_owned(), std::env::var("PATH").unwrap_or_default()),
            ("HOME".to_owned(), std::env::var("HOME").unwrap_or_default()),
            ("OPENAI_API_KEY".to_owned(), "sk-never-shown".to_owned()),
            ("TELEGRAM_BOT_TOKEN".to_owned(), "123:never-shown".to_owned()),
            ("EXAMPLE_MCP_AUTH".to_owned(), "Bearer from-env".to_owned()),
        ],
        std::env::temp_dir(),
    )
}

fn start(servers: Vec<(&str, McpServerConfig)>) -> Arc<McpTools> {
    start_waiting(servers, McpConfig::default().startup_wait_seconds)
}

/// [`start`], runs waiting up to `startup_wait_seconds` for servers still connecting.
fn start_waiting(servers: Vec<(&str, McpServerConfig)>, startup_wait_seconds: u64) -> Arc<McpTools> {
    let servers = servers.into_iter().map(|(name, server)| (name.to_owned(), server)).collect::<BTreeMap<_, _>>();
    McpTools::start(&McpConfig { servers, startup_wait_seconds }, &ferry_env())
}

fn context() -> ToolContext {
    ToolContext {
        sender_id: None,
        memory_scope: None,
        run_id: "run".into(),
        session_key: "agent:main:main".into(),
        call_id: "call".into(),
        origin: None,
        channels: ChannelRegistry::new(),
        sessions: Arc::new(RecentSessions::default()),
        skills: Arc::default(),
        sends: Arc::default(),
        updates: None,
        outgoing: None,
        schedulers: None,
        send_ledger: None,
    }
}

fn offered(mcp: &McpTools) -> Vec<String> {
    mcp.specs().into_iter().map(|spec| spec.name).collect()
}

/// Waits for `condition` (checked every 50 ms) for up to 20 s.
async fn eventually(what: &str, mut condition: impl FnMut() -> bool) {
    let deadline = Instant::now() + Duration::from_secs(20);
    while !condition() {
        assert!(Instant::now() < deadline, "timed out waiting for {what}");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

async fn ready(mcp: &McpTools) {
    mcp.settled(Duration::from_secs(30)).await;
    let status = mcp.status();
    assert!(status.iter().all(|server| server.phase == Phase::Ready), "{status:#?}");
}

#[tokio::test]
async fn server_everything_over_stdio_offers_and_runs_its_tools_with_a_scrubbed_environment() {
    let Some(installed) = installed() else { return };
    let mut server = everything(&installed);
    server.env = BTreeMap::from([("GIVEN_TO_SERVER".to_owned(), Secret::new("visible"))]);
    let mcp = start(vec![("everything", server)]);
    ready(&mcp).await;

    let tools = offered(&mcp);
    assert!(tools.contains(&"everything__echo".to_owned()), "{tools:?}");
    let spec = mcp.specs().into_iter().find(|spec| spec.name == "everything__echo").unwrap();
    assert_eq!(spec.parameters["type"], "object");
    assert!(spec.parameters["properties"]["message"].is_object(), "{}", spec.parameters);

    let echoed = mcp.call("everything__echo", json!({"message": "hello ferry"}), &context()).await.unwrap();
    assert!(echoed.text.contains("hello ferry"), "{}", echoed.text);

    // The server's environment is PATH, HOME and its `env`; nothing of Ferry's.
    let env_tool = tools.iter().find(|name| name.contains("env")).expect("server-everything has an env tool");
    let seen = mcp.call(env_tool, json!({}), &context()).await.unwrap().text;
    assert!(seen.contains("GIVEN_TO_SERVER") && seen.contains("PATH"), "{seen}");
    for secret in ["sk-never-shown", "never-shown", "OPENAI_API_KEY", "TELEGRAM_BOT_TOKEN", "from-env"] {
        assert!(!seen.contains(secret), "{secret} reached the server: {seen}");
    }
    // Arguments the schema refuses come back as an error result, not a failure of the run.
    let refused = mcp.call("everything__echo", json!({"message": 42}), &context()).await;
    assert!(refused.is_err(), "{refused:?}");
    mcp.shutdown().await;
    assert!(mcp.status().iter().all(|server| server.phase == Phase::Stopped));
}

#[tokio::test]
async fn results_map_to_text_images_resource_links_and_errors() {
    let Some(installed) = installed() else { return };
    let mcp = start(vec![("fast", fastmcp(&installed))]);
    ready(&mcp).await;
    let call = |name: &'static str, arguments: serde_json::Value| {
        let mcp = mcp.clone();
        async move { mcp.call(name, arguments, &context()).await }
    };
    assert_eq!(call("fast__add", json!({"a": 2, "b": 3})).await.unwrap().text, "5");
    let image = call("fast__image", json!({})).await.unwrap();
    assert_eq!(image.images.len(), 1, "{}", image.text);
    assert!(image.text.contains("[image: image/png"), "{}", image.text);
    let link = call("fast__resource_link", json!({})).await.unwrap();
    assert!(link.text.starts_with("[resource: "), "{}", link.text);
    let failed = call("fast__fail", json!({})).await.unwrap_err();
    assert!(!failed.0.is_empty(), "an isError result is an error with the server's words");
    mcp.shutdown().await;
}

#[tokio::test]
async fn allow_and_deny_pick_a_servers_tools() {
    let Some(installed) = installed() else { return };
    let server = McpServerConfig {
        allow: vec!["e*".into(), "add".into()],
        deny: vec!["enable_extra".into()],
        ..fastmcp(&installed)
    };
    let mcp = start(vec![("fast", server)]);
    ready(&mcp).await;
    assert_eq!(offered(&mcp), ["fast__add", "fast__echo"]);
    mcp.shutdown().await;
}

#[tokio::test]
async fn a_list_change_is_followed_and_a_server_that_exits_is_restarted() {
    let Some(installed) = installed() else { return };
    let mcp = start(vec![("fast", fastmcp(&installed))]);
    ready(&mcp).await;
    assert!(!offered(&mcp).contains(&"fast__extra".to_owned()));
    mcp.call("fast__enable_extra", json!({}), &context()).await.unwrap();
    eventually("the new tool to be offered", || offered(&mcp).contains(&"fast__extra".to_owned())).await;
    assert!(mcp.call("fast__extra", json!({}), &context()).await.is_ok());

    let first_pid = mcp.call("fast__pid", json!({}), &context()).await.unwrap().text;
    let crashed = mcp.call("fast__crash", json!({}), &context()).await.unwrap_err();
    assert!(crashed.0.contains("lost"), "{crashed}");
    // Meanwhile its tools are not offered, and a call is told why at once.
    eventually("the server to be seen down", || offered(&mcp).is_empty()).await;
    let started = Instant::now();
    let down = mcp.call("fast__echo", json!({"text": "x"}), &context()).await.unwrap_err();
    assert!(down.0.contains("not running") || down.0.contains("starting"), "{down}");
    assert!(started.elapsed() < Duration::from_secs(1), "a call to a server that is down does not wait");

    eventually("the server to be back", || offered(&mcp).contains(&"fast__pid".to_owned())).await;
    let second_pid = mcp.call("fast__pid", json!({}), &context()).await.unwrap().text;
    assert_ne!(first_pid, second_pid, "a new process");
    assert_eq!(mcp.status()[0].restarts, 1);
    // Shutting down ends the server's process.
    let alive = std::path::PathBuf::from(format!("/proc/{}", second_pid.trim()));
    assert!(alive.exists());
    mcp.shutdown().await;
    eventually("the server process to exit", || !alive.exists() || zombie(&alive)).await;
}

#[tokio::test]
async fn a_hanging_call_times_out_and_the_server_stays_usable() {
    let Some(installed) = installed() else { return };
    let server = McpServerConfig { timeout: 1, ..fastmcp(&installed) };
    let mcp = start(vec![("fast", server)]);
    ready(&mcp).await;
    let started = Instant::now();
    let error = mcp.call("fast__slow", json!({"seconds": 30}), &context()).await.unwrap_err();
    assert!(error.0.contains("did not answer within 1s"), "{error}");
    assert!(started.elapsed() < Duration::from_secs(5));
    let echoed = mcp.call("fast__echo", json!({"text": "still here"}), &context()).await.unwrap();
    assert_eq!(echoed.text, "still here");
    mcp.shutdown().await;
}

#[tokio::test]
async fn a_broken_server_holds_up_neither_the_others_nor_the_start() {
    let Some(installed) = installed() else { return };
    let started = Instant::now();
    let mcp = start(vec![
        ("fast", fastmcp(&installed)),
        ("missing", stdio("/nonexistent/mcp-server", &[])),
        // Starts, but never speaks the protocol.
        ("mute", stdio("sleep", &["600"])),
    ]);
    assert!(started.elapsed() < Duration::from_millis(100), "starting returns at once");
    eventually("fast to be ready", || offered(&mcp).contains(&"fast__echo".to_owned())).await;
    let status = mcp.status();
    let missing = status.iter().find(|server| server.name == "missing").unwrap();
    let Phase::Retrying { last_error, .. } = &missing.phase else { panic!("{missing:?}") };
    assert!(last_error.contains("cannot start `/nonexistent/mcp-server`"), "{last_error}");
    let mute = status.iter().find(|server| server.name == "mute").unwrap();
    assert_eq!(mute.phase, Phase::Starting);
    let health = mcp.health();
    assert_eq!(health[0]["name"], "fast");
    assert_eq!(health[0]["state"], "ready");
    assert_eq!(health[1]["state"], "retrying");
    assert!(health[1]["lastError"].as_str().unwrap().contains("cannot start"));
    // Shutting down does not wait for the mute one's handshake.
    let stopping = Instant::now();
    mcp.shutdown().await;
    assert!(stopping.elapsed() < Duration::from_secs(10));
}

#[tokio::test]
async fn runs_wait_for_servers_still_starting_but_only_until_the_startup_wait_ends() {
    let Some(installed) = installed() else { return };
    // `ready` returns once every server left `starting`: fast is ready, missing retries.
    let mcp = start(vec![("fast", fastmcp(&installed)), ("missing", stdio("/nonexistent/mcp-server", &[]))]);
    tokio::time::timeout(Duration::from_secs(60), mcp.ready()).await.expect("ready once both settled");
    assert!(offered(&mcp).contains(&"fast__echo".to_owned()), "the tools are there when ready returns");
    mcp.shutdown().await;

    // A server that never speaks the protocol is waited for only until the startup wait ends
    // (its own handshake timeout is 30 s): then it is still starting, and runs go on.
    let mcp = start_waiting(vec![("mute", stdio("sleep", &["600"]))], 1);
    tokio::time::timeout(Duration::from_secs(20), mcp.ready()).await.expect("no wait past the startup wait");
    assert_eq!(mcp.status()[0].phase, Phase::Starting);
    // Once passed, no run waits again.
    tokio::time::timeout(Duration::from_millis(500), mcp.ready()).await.expect("at once");
    mcp.shutdown().await;
}

/// server-everything's streamable HTTP mode on loopback `port` (0: a free one), and its
/// endpoint.
pub async fn everything_over_http(installed: &Installed, port: u16) -> (tokio::process::Child, String) {
    let mut command = tokio::process::Command::new(&installed.node);
    command
        .args(["--import", &installed.loopback, &installed.everything, "streamableHttp"])
        .env("PORT", port.to_string());
    serving(command, "ferry-loopback: listening on ").await
}

/// The Python test server over streamable HTTP on a free loopback port, and its endpoint.
async fn fastmcp_over_http(installed: &Installed) -> (tokio::process::Child, String) {
    let mut command = tokio::process::Command::new(&installed.python);
    command.args([&installed.fastmcp, "--http", "0"]);
    serving(command, "Uvicorn running on ").await
}

/// Starts `command`, waits for the stderr line with `marker` followed by the address it
/// listens on, and returns the process and `http://<address>/mcp`.
async fn serving(mut command: tokio::process::Command, marker: &str) -> (tokio::process::Child, String) {
    use tokio::io::AsyncBufReadExt;
    let mut child = command
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::piped())
        .kill_on_drop(true)
        .spawn()
        .expect("start the HTTP server");
    let mut lines = tokio::io::BufReader::new(child.stderr.take().unwrap()).lines();
    let address = tokio::time::timeout(Duration::from_secs(30), async {
        while let Ok(Some(line)) = lines.next_line().await {
            if let Some(at) = line.find(marker) {
                let rest = line[at + marker.len()..].split_whitespace().next().unwrap_or_default();
                return rest.trim_start_matches("http://").to_owned();
            }
        }
        panic!("the server exited before listening");
    })
    .await
    .expect("the server listening");
    tokio::spawn(async move { while let Ok(Some(_)) = lines.next_line().await {} });
    (child, format!("http://{address}/mcp"))
}

#[tokio::test]
async fn server_everything_over_streamable_http() {
    let Some(installed) = installed() else { return };
    let (_server, url) = everything_over_http(&installed, 0).await;
    let remote = McpServerConfig {
        url: Some(url),
        headers: BTreeMap::from([("X-Team".to_owned(), Secret::new("ops"))]),
        headers_env: BTreeMap::from([("Authorization".to_owned(), "EXAMPLE_MCP_AUTH".to_owned())]),
        ..Default::default()
    };
    let mcp = start(vec![("remote", remote)]);
    ready(&mcp).await;
    assert!(offered(&mcp).contains(&"remote__echo".to_owned()));
    let echoed = mcp.call("remote__echo", json!({"message": "over http"}), &context()).await.unwrap();
    assert!(echoed.text.contains("over http"), "{}", echoed.text);
    assert_eq!(mcp.status()[0].transport, "http");
    mcp.shutdown().await;
}

#[tokio::test]
async fn headers_reach_a_remote_server_and_a_missing_variable_is_named() {
    let Some(installed) = installed() else { return };
    let (_server, url) = fastmcp_over_http(&installed).await;
    let remote = McpServerConfig {
        url: Some(url.clone()),
        headers: BTreeMap::from([("X-Team".to_owned(), Secret::new("ops"))]),
        headers_env: BTreeMap::from([("Authorization".to_owned(), "EXAMPLE_MCP_AUTH".to_owned())]),
        ..Default::default()
    };
    let unset = McpServerConfig {
        url: Some(url),
        headers_env: BTreeMap::from([("Authorization".to_owned(), "NOT_SET_ANYWHERE".to_owned())]),
        ..Default::default()
    };
    let mcp = start(vec![("remote", remote), ("unset", unset)]);
    mcp.settled(Duration::from_secs(30)).await;
    let header = |name: &'static str| {
        let mcp = mcp.clone();
        async move { mcp.call("remote__header", json!({"name": name}), &context()).await.unwrap().text }
    };
    assert_eq!(header("x-team").await, "ops");
    assert_eq!(header("authorization").await, "Bearer from-env");
    let status = mcp.status();
    let Phase::Retrying { last_error, .. } = &status[1].phase else { panic!("{status:?}") };
    assert!(last_error.contains("NOT_SET_ANYWHERE is not set"), "{last_error}");
    mcp.shutdown().await;
}

#[tokio::test]
async fn a_remote_server_that_goes_away_is_reconnected_when_it_is_back() {
    let Some(installed) = installed() else { return };
    let (mut server, url) = everything_over_http(&installed, 0).await;
    let port: u16 = url.rsplit(':').next().unwrap().trim_end_matches("/mcp").parse().unwrap();
    let remote = McpServerConfig { url: Some(url), ..Default::default() };
    let mcp = start(vec![("remote", remote)]);
    ready(&mcp).await;
    assert!(mcp.call("remote__echo", json!({"message": "one"}), &context()).await.is_ok());

    server.kill().await.unwrap();
    let lost = mcp.call("remote__echo", json!({"message": "two"}), &context()).await.unwrap_err();
    assert!(lost.0.contains("remote"), "{lost}");
    eventually("the server to be seen down", || offered(&mcp).is_empty()).await;

    let (_back, _) = everything_over_http(&installed, port).await;
    eventually("the server to be back", || offered(&mcp).contains(&"remote__echo".to_owned())).await;
    let echoed = mcp.call("remote__echo", json!({"message": "three"}), &context()).await.unwrap();
    assert!(echoed.text.contains("three"), "{}", echoed.text);
    mcp.shutdown().await;
}

/// Whether the process at `/proc/<pid>` has exited and waits to be reaped.
fn zombie(proc: &std::path::Path) -> bool {
    std::fs::read_to_string(proc.join("stat"))
        .is_ok_and(|stat| stat.rsplit(')').next().is_some_and(|rest| rest.trim_start().starts_with('Z')))
}
