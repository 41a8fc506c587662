//! Telegram end to end (issue 7): the real `ferry gateway` binary with the Telegram adapter
//! polling the fake Bot API, the offline echo provider as an instant model.
//!
//! 1. Latency: 100 messages one at a time, 50 ms apart, each in a chat of its own, each
//!    waiting for its answer — update injected → `sendMessage` received, p50/p99. Paced
//!    under the send budgets (30/s per bot, 1/s per chat), so none holds a reply: this is
//!    what Ferry adds.
//! 2. Throughput: 1,000 updates across 100 chats injected at once; updates/s until all are
//!    confirmed by the adapter (durably accepted), and until every chat got its answers.
//!    Here the send budgets pace the replies, by design.
//!
//! Also reports the gateway's peak RSS.
//!
//! Each chat is its own session (`dm_scope = "per-peer"`, as a bot serving many people is
//! configured). Run with `cargo bench --bench telegram` (`FERRY_BENCH_LOG=info` shows the
//! gateway's log); results go in BENCHMARKS.md.

use std::process::{Command, Stdio};
use std::time::Duration;

use ferry_fakes::FakeTelegram;
use tokio::time::Instant;

const TOKEN: &str = "123456:BENCH-token";
const CHATS: i64 = 100;
const PER_CHAT: i64 = 10;
const LATENCY_SAMPLES: i64 = 100;
/// Between latency samples: 20/s, under the 30 sends/s bot budget.
const SAMPLE_GAP: Duration = Duration::from_millis(50);

fn main() {
    if !std::env::args().any(|arg| arg == "--bench") {
        return;
    }
    let runtime = tokio::runtime::Builder::new_multi_thread().enable_all().build().expect("runtime");
    runtime.block_on(run());
}

async fn run() {
    let telegram = FakeTelegram::start(TOKEN).await.expect("fake telegram").without_rate_limits();
    let home = tempfile::tempdir().expect("home");
    let port = std::net::TcpListener::bind("127.0.0.1:0").expect("port").local_addr().expect("port").port();
    let config = format!(
        "[gateway]\nport = {port}\n\n[session]\ndm_scope = \"per-peer\"\n\n[channels.telegram]\nenabled = true\nbot_token = \"{TOKEN}\"\napi_url = \"{}\"\n\
         dm_policy = \"open\"\nallow_from = [\"*\"]\nstreaming = \"off\"\n",
        telegram.url()
    );
    std::fs::write(home.path().join("ferry.toml"), config).expect("config");
    let mut child = Command::new(env!("CARGO_BIN_EXE_ferry"))
        .arg("gateway")
        .env_clear()
        .env("HOME", home.path())
        .env("RUST_LOG", std::env::var("FERRY_BENCH_LOG").unwrap_or_else(|_| "warn".to_owned()))
        .current_dir(home.path())
        .stdout(Stdio::null())
        .stderr(if std::env::var_os("FERRY_BENCH_LOG").is_some() { Stdio::inherit() } else { Stdio::null() })
        .spawn()
        .expect("start ferry gateway");
    // Up once it polls.
    tokio::time::timeout(Duration::from_secs(60), telegram.wait_for_arrivals("getUpdates", 1)).await.expect("polling");

    let mut latencies: Vec<Duration> = Vec::new();
    for sample in 0..LATENCY_SAMPLES {
        let user = 20_000 + sample;
        let injected_at = Instant::now();
        telegram.private_message(user, "Bench", "how long does this take?");
        let answered = loop {
            if let Some(call) =
                telegram.calls_to("sendMessage").iter().find(|c| c.params["chat_id"].as_i64() == Some(user))
            {
                break call.at;
            }
            tokio::task::yield_now().await;
            tokio::time::sleep(Duration::from_micros(200)).await;
        };
        latencies.push(answered.saturating_duration_since(injected_at));
        // Within Telegram's 30 sends/s per bot, so the budget never holds a reply.
        tokio::time::sleep(SAMPLE_GAP).await;
    }
    latencies.sort();
    let percentile = |p: f64| latencies[((latencies.len() as f64 * p) as usize).min(latencies.len() - 1)];
    println!(
        "one message at a time, update → sendMessage ({} samples): p50 {:.2} ms, p99 {:.2} ms, max {:.2} ms",
        latencies.len(),
        percentile(0.5).as_secs_f64() * 1e3,
        percentile(0.99).as_secs_f64() * 1e3,
        latencies.last().copied().unwrap_or_default().as_secs_f64() * 1e3,
    );

    let started = Instant::now();
    let mut last = 0;
    for round in 0..PER_CHAT {
        for chat in 1..=CHATS {
            last = telegram.private_message(10_000 + chat, "Bench", &format!("message {round} from {chat}"));
        }
    }
    tokio::time::timeout(Duration::from_secs(120), telegram.wait_for_offset(last + 1)).await.expect("all accepted");
    let accepted = started.elapsed();
    tokio::time::timeout(Duration::from_secs(300), async {
        while (1..=CHATS).any(|chat| telegram.messages_in(10_000 + chat).len() < 2) {
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
    })
    .await
    .expect("every chat answered");
    let answered = started.elapsed();
    println!(
        "burst: {} updates over {CHATS} chats accepted in {:.0} ms = {:.0} updates/s; every chat answered (first \
         message alone, the other nine collected into one follow-up) after {:.2} s, paced by the send budgets",
        CHATS * PER_CHAT,
        accepted.as_secs_f64() * 1e3,
        (CHATS * PER_CHAT) as f64 / accepted.as_secs_f64(),
        answered.as_secs_f64(),
    );
    let status = std::fs::read_to_string(format!("/proc/{}/status", child.id())).unwrap_or_default();
    let field = |name: &str| {
        status.lines().find(|line| line.starts_with(name)).map(|line| line[name.len()..].trim().to_owned())
    };
    println!(
        "gateway memory: peak RSS (VmHWM) {}, now (VmRSS) {}",
        field("VmHWM:").unwrap_or_default(),
        field("VmRSS:").unwrap_or_default()
    );
    let _ = child.kill();
    let _ = child.wait();
}
