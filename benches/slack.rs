//! Slack end to end (issue 10): the real `ferry gateway` binary with the Slack adapter in
//! Socket Mode against the fake Slack, the offline echo provider as an instant model.
//!
//! 1. Latency: 100 DMs one at a time, 50 ms apart, each from a user of its own, each waiting
//!    for its answer — envelope queued on the fake's socket → `chat.postMessage` received,
//!    p50/p99. Paced under Slack's ~1 message/s per channel, so no budget holds a reply:
//!    this is what Ferry adds (Socket Mode frame, normalize, journal + ack, route, run, send).
//! 2. Throughput: 1,000 DMs across 100 conversations queued at once; events/s until the last
//!    envelope is acknowledged (each only after it was durably accepted, one socket, in order),
//!    and until every conversation got its answers.
//! 3. Back to back: a user sends two DMs at once, in 10 conversations one after the other
//!    (100 ms apart) — envelope → `chat.postMessage` of each answer, p50/max. Once with each
//!    message its own run (`/queue followup debounce:0`, so the second answer waits only
//!    for the send budgets), once with the default `collect` queue.
//!
//! The fake enforces Slack's `chat.postMessage` limit (about 1/s per channel after a burst
//! of 3) and the bench reports the 429s it served: Ferry's own budgets should keep that at
//! 0. Also reports the gateway's peak RSS.
//!
//! Each DM is its own session (`dm_scope = "per-peer"`). Run with `cargo bench --bench slack`
//! (`FERRY_BENCH_LOG=info` shows the gateway's log); results go in BENCHMARKS.md.

#[path = "common/gateway.rs"]
mod gateway;

use std::time::Duration;

use ferry_fakes::FakeSlack;
use tokio::time::Instant;

use gateway::BenchGateway;

const USERS: u32 = 100;
const PER_USER: u32 = 10;
const LATENCY_SAMPLES: u32 = 100;
/// Between latency samples.
const SAMPLE_GAP: Duration = Duration::from_millis(50);

fn main() {
    gateway::bench_main(run);
}

async fn run() {
    let slack = FakeSlack::start().await.expect("fake slack");
    slack.enforce_rate_limits();
    let gateway = BenchGateway::start(&format!(
        "[channels.slack]\nenabled = true\n\
         bot_token = \"{}\"\napp_token = \"{}\"\napi_url = \"{}\"\ndm_policy = \"open\"\nallow_from = [\"*\"]\n\
         streaming = \"off\"\n",
        FakeSlack::BOT_TOKEN,
        FakeSlack::APP_TOKEN,
        slack.api_url()
    ));
    // Up once the socket is open.
    tokio::time::timeout(Duration::from_secs(60), slack.wait_for_connections(1)).await.expect("Socket Mode");

    let mut latencies: Vec<Duration> = Vec::new();
    for sample in 0..LATENCY_SAMPLES {
        let user = format!("ULAT{sample}");
        let channel = format!("D{user}");
        let queued_at = Instant::now();
        slack.dm(&user, "how long does this take?");
        let answered = loop {
            if let Some(call) =
                slack.calls_to("chat.postMessage").iter().find(|c| c.params["channel"].as_str() == Some(&channel))
            {
                break call.at;
            }
            tokio::task::yield_now().await;
            tokio::time::sleep(Duration::from_micros(200)).await;
        };
        latencies.push(answered.saturating_duration_since(queued_at));
        tokio::time::sleep(SAMPLE_GAP).await;
    }
    let slowest = latencies.iter().enumerate().max_by_key(|(_, latency)| **latency).map_or(0, |(index, _)| index);
    latencies.sort();
    let percentile = |p: f64| gateway::percentile(&latencies, p);
    println!(
        "one DM at a time, envelope → chat.postMessage ({} samples): p50 {:.2} ms, p90 {:.2} ms, p99 {:.2} ms, \
         max {:.2} ms (sample #{slowest})",
        latencies.len(),
        percentile(0.5).as_secs_f64() * 1e3,
        percentile(0.9).as_secs_f64() * 1e3,
        percentile(0.99).as_secs_f64() * 1e3,
        latencies.last().copied().unwrap_or_default().as_secs_f64() * 1e3,
    );

    let started = Instant::now();
    let mut last = None;
    for round in 0..PER_USER {
        for user in 0..USERS {
            last = Some(slack.dm(&format!("UBURST{user}"), &format!("message {round} from {user}")));
        }
    }
    let last = last.expect("events");
    tokio::time::timeout(Duration::from_secs(120), slack.wait_for_ack(&last.event_id)).await.expect("all acked");
    let accepted = started.elapsed();
    tokio::time::timeout(Duration::from_secs(300), async {
        while (0..USERS).any(|user| slack.messages_in(&format!("DUBURST{user}")).len() < 2) {
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
    })
    .await
    .expect("every conversation answered");
    let answered = started.elapsed();
    println!(
        "burst: {} DMs over {USERS} conversations acked in {:.0} ms = {:.0} events/s; every conversation answered \
         (first message alone, the other nine collected into one follow-up) after {:.2} s",
        USERS * PER_USER,
        accepted.as_secs_f64() * 1e3,
        f64::from(USERS * PER_USER) / accepted.as_secs_f64(),
        answered.as_secs_f64(),
    );
    println!("429s served by the fake so far: {}", slack.rate_limited_count());

    back_to_back(&slack).await;
    println!("429s served by the fake in all: {}", slack.rate_limited_count());
    gateway.report_memory();
}

/// When the bot's successful `chat.postMessage` calls to `channel` arrived.
fn sends_to(slack: &FakeSlack, channel: &str) -> Vec<Instant> {
    let calls = slack.calls_to("chat.postMessage");
    calls
        .iter()
        .filter(|c| c.params["channel"].as_str() == Some(channel) && c.status == Some(200))
        .map(|c| c.at)
        .collect()
}

/// Waits until `channel` got `count` messages from the bot.
async fn answers(slack: &FakeSlack, channel: &str, count: usize) -> Vec<Instant> {
    gateway::at_least(count, || sends_to(slack, channel)).await
}

/// Phase 3: two DMs at once from one user, each answered.
async fn back_to_back(slack: &FakeSlack) {
    for (label, prefix, command) in [
        ("each message its own run", "UPAIR", Some(gateway::EACH_MESSAGE_ITS_OWN_RUN)),
        ("default collect queue", "UCOLLECT", None),
    ] {
        let users: Vec<String> = (0..gateway::PAIRS).map(|i| format!("{prefix}{i}")).collect();
        let before = usize::from(command.is_some());
        if let Some(command) = command {
            for user in &users {
                slack.dm(user, command);
            }
            for user in &users {
                answers(slack, &format!("D{user}"), 1).await;
            }
        }
        tokio::time::sleep(gateway::REFILL).await;
        let (mut first, mut second) = (Vec::new(), Vec::new());
        for user in &users {
            let injected = Instant::now();
            slack.dm(user, "first question");
            slack.dm(user, "second question");
            let sends = answers(slack, &format!("D{user}"), before + 2).await;
            first.push(sends[before].saturating_duration_since(injected));
            second.push(sends[before + 1].saturating_duration_since(injected));
            tokio::time::sleep(gateway::PAIR_GAP).await;
        }
        println!(
            "back to back ({label}, {} users): first answer {}; second answer {}",
            gateway::PAIRS,
            gateway::p50_max(&mut first),
            gateway::p50_max(&mut second)
        );
    }
}
