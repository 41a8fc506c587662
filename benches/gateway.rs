//! Gateway load (issue 6): N WebSocket clients, each running `agent` then `agent.wait` in
//! a loop against the offline echo provider, through the real gateway, dispatcher, queue,
//! lanes and SQLite state. Reports runs/s and the `agent` accept latency (request sent →
//! `{runId, acceptedAt}` received; the message is durably journaled by then), and the
//! resident memory of an idle `ferry gateway` process.
//!
//! Run with `cargo bench --bench gateway`; knobs: `FERRY_BENCH_CLIENTS` (client counts to
//! measure, default `8,16,64`), `FERRY_BENCH_RUNS` (runs per count, default 20000), `FERRY_BENCH_MAX_CONCURRENT` (default 4, the
//! configured default of `agents.defaults.max_concurrent`). Results go in BENCHMARKS.md.

use std::process::{Command, Stdio};
use std::sync::Arc;
use std::time::{Duration, Instant};

use ferry::agent::providers::resolve_model;
use ferry::agent::tools::{RecentSessions, ToolRegistry};
use ferry::agent::{AgentRunner, EventBus, RunSettings, RunnerParts};
use ferry::channels::ChannelRegistry;
use ferry::config::{Config, Environment};
use ferry::dispatch::{Dispatcher, DispatcherParts};
use ferry::gateway::client::GatewayClient;
use ferry::gateway::{Gateway, GatewayParts};
use ferry::routing::{SystemClock, ThreadLabels};
use ferry::state::{Database, Stores};
use serde_json::json;

fn knob(name: &str, default: usize) -> usize {
    std::env::var(name).ok().and_then(|value| value.parse().ok()).unwrap_or(default)
}

fn main() {
    // `cargo bench` passes `--bench`; a bench binary run by `cargo test` gets nothing and
    // should not spend a minute here.
    if !std::env::args().any(|arg| arg == "--bench") {
        return;
    }
    let runtime = tokio::runtime::Builder::new_multi_thread().enable_all().build().expect("runtime");
    runtime.block_on(load());
    idle_rss();
}

async fn load() {
    let counts: Vec<usize> = std::env::var("FERRY_BENCH_CLIENTS")
        .unwrap_or_else(|_| "8,16,64".to_owned())
        .split(',')
        .filter_map(|count| count.trim().parse().ok())
        .collect();
    let runs = knob("FERRY_BENCH_RUNS", 20_000);
    let state = tempfile::tempdir().expect("state dir");
    let workspace = tempfile::tempdir().expect("workspace");
    let mut config = Config::default();
    config.agents.defaults.max_concurrent = knob("FERRY_BENCH_MAX_CONCURRENT", 4) as u32;
    let config = Arc::new(config);
    let env = Environment::new(Vec::<(String, String)>::new(), state.path());
    let model = resolve_model(&config, &env).expect("echo model");
    let database = Database::open(state.path()).await.expect("database");
    let channels = ChannelRegistry::new();
    let bus = EventBus::new();
    let runner = AgentRunner::new(RunnerParts {
        model: model.into(),
        tools: ToolRegistry::with_builtins(),
        bus: bus.clone(),
        settings: RunSettings::from_config(&config.agents.defaults),
        workspace: workspace.path().to_owned(),
        channels: channels.clone(),
        sessions: Arc::new(RecentSessions::default()),
        hooks: Default::default(),
        media: None,
        memory: None,
    });
    let dispatcher = Dispatcher::new(DispatcherParts {
        config: config.clone(),
        stores: Stores::sqlite(&database),
        agents: runner.into(),
        channels: channels.clone(),
        clock: Arc::new(SystemClock),
        thread_labels: ThreadLabels::new(),
    })
    .expect("dispatcher");
    let gateway = Gateway::start(GatewayParts {
        config,
        dispatcher,
        bus,
        channels,
        #[cfg(feature = "mcp")]
        mcp: None,
    })
    .await
    .expect("gateway");
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.expect("listen");
    let url = format!("ws://{}/ws", listener.local_addr().expect("address"));
    tokio::spawn(gateway.serve(listener, std::future::pending()));
    for (round, clients) in counts.into_iter().enumerate() {
        measure(&url, round, clients, runs).await;
    }
}

/// `clients` clients sharing `runs` runs, each run its own session.
async fn measure(url: &str, round: usize, clients: usize, runs: usize) {
    let per_client = runs / clients.max(1);
    let started = Instant::now();
    let tasks: Vec<_> = (0..clients)
        .map(|client| {
            let url = url.to_owned();
            tokio::spawn(async move {
                let id = format!("bench-{round}-{client}");
                let mut gateway = GatewayClient::connect(&url, None, &id).await.expect("connect");
                let mut accepts = Vec::with_capacity(per_client);
                for run in 0..per_client {
                    let key = format!("{round}-{client}-{run}");
                    // A session per run: what is measured is the gateway's work, not the
                    // history a long session makes each run read (compaction's business).
                    let session = format!("agent:main:bench-{key}");
                    let sent = Instant::now();
                    let params = json!({"message": "ping", "idempotencyKey": key, "sessionKey": session});
                    gateway.call("agent", params).await.expect("agent");
                    accepts.push(sent.elapsed());
                    let waited = gateway.call("agent.wait", json!({"runId": key})).await.expect("agent.wait");
                    assert_eq!(waited["status"], "ok", "{waited}");
                }
                accepts
            })
        })
        .collect();
    let mut accepts = Vec::with_capacity(runs);
    for task in tasks {
        accepts.extend(task.await.expect("client"));
    }
    let elapsed = started.elapsed();
    accepts.sort();
    let percentile = |p: f64| accepts[((accepts.len() as f64 * p) as usize).min(accepts.len() - 1)];
    println!(
        "gateway load: {clients} clients, {} runs (agent + agent.wait each) in {:.2} s = {:.0} runs/s; accept \
         latency p50 {:.2} ms, p99 {:.2} ms, max {:.2} ms",
        accepts.len(),
        elapsed.as_secs_f64(),
        accepts.len() as f64 / elapsed.as_secs_f64(),
        percentile(0.50).as_secs_f64() * 1e3,
        percentile(0.99).as_secs_f64() * 1e3,
        accepts.last().copied().unwrap_or_default().as_secs_f64() * 1e3,
    );
}

/// Starts the real `ferry gateway` (fresh machine: no config, echo provider), waits until
/// it answers, and reads its resident memory.
fn idle_rss() {
    let home = tempfile::tempdir().expect("home");
    let port = std::net::TcpListener::bind("127.0.0.1:0").expect("port").local_addr().expect("port").port();
    let mut child = Command::new(env!("CARGO_BIN_EXE_ferry"))
        .arg("gateway")
        .env_clear()
        .env("HOME", home.path())
        .env("FERRY__GATEWAY__PORT", port.to_string())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .expect("start ferry gateway");
    let deadline = Instant::now() + Duration::from_secs(30);
    while std::net::TcpStream::connect(("127.0.0.1", port)).is_err() && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(20));
    }
    std::thread::sleep(Duration::from_secs(1));
    let status = std::fs::read_to_string(format!("/proc/{}/status", child.id())).unwrap_or_default();
    let rss = status.lines().find(|line| line.starts_with("VmRSS:")).unwrap_or("VmRSS: unknown").to_owned();
    println!(
        "idle ferry gateway (fresh machine, echo provider): {}",
        rss.split_whitespace().skip(1).collect::<Vec<_>>().join(" ")
    );
    let _ = child.kill();
    let _ = child.wait();
}
