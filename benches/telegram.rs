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

#[path = "common/gateway.rs"]
mod gateway;

use std::time::Duration;

use ferry_fakes::FakeTelegram;
use tokio::time::Instant;

use gateway::BenchGateway;

const TOKEN: &str = "123456:BENCH-token";
const CHATS: i64 = 100;
const PER_CHAT: i64 = 10;
const LATENCY_SAMPLES: i64 = 100;
/// Between latency samples: 20/s, under the 30 sends/s bot budget.
const SAMPLE_GAP: Duration = Duration::from_millis(50);

fn main() {
    gateway::bench_main(run);
}

async fn run() {
    let telegram = FakeTelegram::start(TOKEN).await.expect("fake telegram").without_rate_limits();
    let gateway = BenchGateway::start(&format!(
        "[channels.telegram]\nenabled = true\nbot_token = \"{TOKEN}\"\napi_url = \"{}\"\n\
         dm_policy = \"open\"\nallow_from = [\"*\"]\nstreaming = \"off\"\n",
        telegram.url()
    ));
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
    let percentile = |p: f64| gateway::percentile(&latencies, p);
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
    gateway.report_memory();
}
