//! Discord end to end (issue 9): the real `ferry gateway` binary with the Discord adapter on
//! the fake Discord's gateway and REST API, the offline echo provider as an instant model.
//!
//! 1. Latency: after one warm-up message (reported alone: it pays one-time start-up costs),
//!    100 messages one at a time, 50 ms apart, each in a DM channel of its own, each waiting
//!    for its answer — `MESSAGE_CREATE` queued on the fake → create-message call received,
//!    p50/p99. Paced under the send budgets (50/s per bot, 5 per 5 s per
//!    channel), so none holds a reply: this is what Ferry adds.
//! 2. Throughput: 1,000 messages across 100 DM channels dispatched at once; until every
//!    channel got its answers. The send budgets pace the replies, by design.
//! 3. Back to back: a user sends two messages at once, in 10 DM channels one after the
//!    other (100 ms apart) — `MESSAGE_CREATE` → create message of each answer, p50/max.
//!    Once with each message its own run (`/queue followup debounce:0`, so the second answer
//!    waits only for the send budgets), once with the default `collect` queue.
//!
//! The fake enforces Discord's per-channel limit (5 message calls per 5 s) and the bench
//! reports the 429s it served: Ferry's own budgets should keep that at 0. Also reports the
//! gateway's peak RSS.
//!
//! Each user is their own session (`dm_scope = "per-peer"`). Run with
//! `cargo bench --bench discord` (`FERRY_BENCH_LOG=info` shows the gateway's log); results go
//! in BENCHMARKS.md.

#[path = "common/gateway.rs"]
mod gateway;

use std::time::Duration;

use ferry_fakes::{DiscordUser, FakeDiscord};
use tokio::time::Instant;

use gateway::BenchGateway;

const TOKEN: &str = "bench.discord.token";
const USERS: u64 = 100;
const PER_USER: u64 = 10;
const LATENCY_SAMPLES: u64 = 100;
/// Between latency samples: 20/s, under the 50 requests/s bot budget.
const SAMPLE_GAP: Duration = Duration::from_millis(50);

fn main() {
    gateway::bench_main(run);
}

/// When the bot's first create-message call to `channel` arrived, if it has.
fn first_send(discord: &FakeDiscord, channel: u64) -> Option<Instant> {
    discord.calls().into_iter().find(|call| call.is_create_message() && call.channel_id == Some(channel)).map(|c| c.at)
}

/// One DM from a new user (so a new DM channel): dispatched → the answer's create-message
/// call received.
async fn latency(discord: &FakeDiscord, user: u64) -> Duration {
    let injected_at = Instant::now();
    let (channel, _) = discord.dm(&DiscordUser::new(user, "bench"), "how long does this take?");
    let answered = loop {
        if let Some(at) = first_send(discord, channel) {
            break at;
        }
        tokio::task::yield_now().await;
        tokio::time::sleep(Duration::from_micros(200)).await;
    };
    answered.saturating_duration_since(injected_at)
}

async fn run() {
    let discord = FakeDiscord::start(TOKEN).await.expect("fake discord");
    let gateway = BenchGateway::start(&format!(
        "[channels.discord]\nenabled = true\nbot_token = \"{TOKEN}\"\napi_url = \"{}\"\n\
         dm_policy = \"open\"\nallow_from = [\"*\"]\nstreaming = \"off\"\n",
        discord.url()
    ));
    // Up once the gateway session is live.
    tokio::time::timeout(Duration::from_secs(60), discord.wait_for_session()).await.expect("gateway session");

    // The first message after start-up pays one-time costs (first session, first REST
    // connection); reported on its own, not mixed into the percentiles.
    let cold = latency(&discord, 19_990).await;
    tokio::time::sleep(SAMPLE_GAP).await;
    let mut latencies: Vec<Duration> = Vec::new();
    for sample in 0..LATENCY_SAMPLES {
        latencies.push(latency(&discord, 20_000 + sample * 10).await);
        tokio::time::sleep(SAMPLE_GAP).await;
    }
    latencies.sort();
    let percentile = |p: f64| gateway::percentile(&latencies, p);
    println!("first message after start-up: {:.2} ms", cold.as_secs_f64() * 1e3);
    println!(
        "one message at a time, MESSAGE_CREATE → create message ({} samples): p50 {:.2} ms, p99 {:.2} ms, max {:.2} ms",
        latencies.len(),
        percentile(0.5).as_secs_f64() * 1e3,
        percentile(0.99).as_secs_f64() * 1e3,
        latencies.last().copied().unwrap_or_default().as_secs_f64() * 1e3,
    );

    let started = Instant::now();
    let users: Vec<DiscordUser> = (1..=USERS).map(|i| DiscordUser::new(10_000 + i * 10, "bench")).collect();
    for round in 0..PER_USER {
        for user in &users {
            discord.dm(user, &format!("message {round} from {}", user.id));
        }
    }
    tokio::time::timeout(Duration::from_secs(300), async {
        while users.iter().any(|user| discord.messages_in(discord.dm_channel(user.id)).len() < 2) {
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
    })
    .await
    .expect("every channel answered");
    let answered = started.elapsed();
    println!(
        "burst: {} messages over {USERS} DM channels; every channel answered (first message alone, the other nine \
         collected into one follow-up) after {:.2} s, paced by the send budgets",
        USERS * PER_USER,
        answered.as_secs_f64(),
    );
    println!("429s served by the fake so far: {}", discord.rate_limited_count());

    back_to_back(&discord).await;
    println!("429s served by the fake in all: {}", discord.rate_limited_count());
    gateway.report_memory();
}

/// When the bot's successful create-message calls to `channel` arrived.
fn sends_to(discord: &FakeDiscord, channel: u64) -> Vec<Instant> {
    let calls = discord.calls();
    calls
        .iter()
        .filter(|call| call.is_create_message() && call.channel_id == Some(channel) && call.status == Some(200))
        .map(|call| call.at)
        .collect()
}

/// Waits until `channel` got `count` messages from the bot.
async fn answers(discord: &FakeDiscord, channel: u64, count: usize) -> Vec<Instant> {
    gateway::at_least(count, || sends_to(discord, channel)).await
}

/// Phase 3: two messages at once from one user, each answered.
async fn back_to_back(discord: &FakeDiscord) {
    for (label, first_user, command) in [
        ("each message its own run", 40_000, Some(gateway::EACH_MESSAGE_ITS_OWN_RUN)),
        ("default collect queue", 50_000, None),
    ] {
        let users: Vec<DiscordUser> =
            (0..gateway::PAIRS as u64).map(|i| DiscordUser::new(first_user + i * 10, "bench")).collect();
        let before = usize::from(command.is_some());
        if let Some(command) = command {
            for user in &users {
                discord.dm(user, command);
            }
            for user in &users {
                answers(discord, discord.dm_channel(user.id), 1).await;
            }
        }
        tokio::time::sleep(gateway::REFILL).await;
        let (mut first, mut second) = (Vec::new(), Vec::new());
        for user in &users {
            let injected = Instant::now();
            let (channel, _) = discord.dm(user, "first question");
            discord.dm(user, "second question");
            let sends = answers(discord, channel, before + 2).await;
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
