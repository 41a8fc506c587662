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
//! 3. Back to back: a user sends two messages at once, in 10 private chats one after the
//!    other (100 ms apart) — update → `sendMessage` of each answer, p50/max. Once with each
//!    message its own run (`/queue followup debounce:0`, so the second answer waits only
//!    for the send budgets), once with the default `collect` queue (its 1 s quiet time
//!    after a run holds the second message anyway).
//!
//! The fake enforces Telegram's flood limits (1 message/s per chat after a burst of 3,
//! 20/min per group, 30/s per bot) and the bench reports the 429s it served: Ferry's own
//! budgets should keep that at 0. Also reports the gateway's CPU time per message (one at a
//! time, and in the burst), its peak RSS, how long a gateway takes from its start to its first
//! `getUpdates` (10 starts in fresh homes) and its resident memory idle after that. `--no-default-features --features telegram` measures the smallest
//! build.
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
    let telegram = FakeTelegram::start(TOKEN).await.expect("fake telegram");
    let gateway = BenchGateway::start(&format!(
        "[channels.telegram]\nenabled = true\nbot_token = \"{TOKEN}\"\napi_url = \"{}\"\n\
         dm_policy = \"open\"\nallow_from = [\"*\"]\nstreaming = \"off\"\n",
        telegram.url()
    ));
    // Up once it polls.
    tokio::time::timeout(Duration::from_secs(60), telegram.wait_for_arrivals("getUpdates", 1)).await.expect("polling");

    let mut latencies: Vec<Duration> = Vec::new();
    let cpu_before = gateway.cpu_time();
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
    let cpu_one_at_a_time = gateway.cpu_time().saturating_sub(cpu_before);
    latencies.sort();
    let percentile = |p: f64| gateway::percentile(&latencies, p);
    println!(
        "one message at a time, update → sendMessage ({} samples): p50 {:.2} ms, p99 {:.2} ms, max {:.2} ms",
        latencies.len(),
        percentile(0.5).as_secs_f64() * 1e3,
        percentile(0.99).as_secs_f64() * 1e3,
        latencies.last().copied().unwrap_or_default().as_secs_f64() * 1e3,
    );
    println!(
        "CPU per message, one at a time (each a run and a reply, idle polling between them included): {:.2} ms",
        cpu_one_at_a_time.as_secs_f64() * 1e3 / LATENCY_SAMPLES as f64
    );

    let cpu_before = gateway.cpu_time();
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
    let cpu_burst = gateway.cpu_time().saturating_sub(cpu_before);
    println!(
        "burst: {} updates over {CHATS} chats accepted in {:.0} ms = {:.0} updates/s; every chat answered (first \
         message alone, the other nine collected into one follow-up) after {:.2} s, paced by the send budgets",
        CHATS * PER_CHAT,
        accepted.as_secs_f64() * 1e3,
        (CHATS * PER_CHAT) as f64 / accepted.as_secs_f64(),
        answered.as_secs_f64(),
    );
    println!(
        "CPU per update in the burst ({} updates, {} runs and replies): {:.2} ms",
        CHATS * PER_CHAT,
        CHATS * 2,
        cpu_burst.as_secs_f64() * 1e3 / (CHATS * PER_CHAT) as f64
    );
    println!("429s served by the fake so far: {}", telegram.rate_limited_count());

    back_to_back(&telegram).await;
    println!("429s served by the fake in all: {}", telegram.rate_limited_count());
    gateway.report_memory();
    drop(gateway);
    start_up().await;
}

/// Gateways started one after another, each in a fresh home (Telegram only, the echo
/// provider): from spawning `ferry gateway` to its first `getUpdates` at the fake, p50/max;
/// and each one's resident memory once it has polled idly for two seconds, p50/max. Built
/// with `mcp` and with the test servers set up (`eval "$(tests/mcp/setup)"`), the same again
/// with the reference MCP server configured: the gateway's own memory, not the server's.
async fn start_up() {
    start_up_with("Telegram", "", false).await;
    #[cfg(feature = "mcp")]
    {
        let var = |name: &str| std::env::var(name).ok().filter(|value| !value.is_empty());
        match (var("FERRY_MCP_NODE"), var("FERRY_MCP_EVERYTHING")) {
            (Some(node), Some(everything)) => {
                let server = format!(
                    "[mcp.servers.everything]\ncommand = {}\nargs = [{}, \"stdio\"]\n",
                    toml_string(&node),
                    toml_string(&everything)
                );
                start_up_with("Telegram + an MCP server (stdio)", &server, true).await;
            }
            _ => println!(
                "idle with an MCP server: not measured (run `eval \"$(tests/mcp/setup)\"` first for FERRY_MCP_NODE \
                 and FERRY_MCP_EVERYTHING)"
            ),
        }
    }
}

/// `value` as a TOML basic string.
#[cfg(feature = "mcp")]
fn toml_string(value: &str) -> String {
    format!("\"{}\"", value.replace('\\', "\\\\").replace('"', "\\\""))
}

/// [`start_up`] with `extra` added to the config; `with_server`: idle is counted from when
/// the gateway has started a child process (the MCP server), not from its first poll.
async fn start_up_with(label: &str, extra: &str, with_server: bool) {
    const STARTS: usize = 10;
    const IDLE: Duration = Duration::from_secs(2);
    let mut times = Vec::with_capacity(STARTS);
    let mut idle_kib = Vec::with_capacity(STARTS);
    for _ in 0..STARTS {
        let telegram = FakeTelegram::start(TOKEN).await.expect("fake telegram");
        let spawned = Instant::now();
        let gateway = BenchGateway::start(&format!(
            "[channels.telegram]\nenabled = true\nbot_token = \"{TOKEN}\"\napi_url = \"{}\"\n\
             dm_policy = \"open\"\nallow_from = [\"*\"]\n\n{extra}",
            telegram.url()
        ));
        tokio::time::timeout(Duration::from_secs(60), telegram.wait_for_arrivals("getUpdates", 1))
            .await
            .expect("polling");
        let first = telegram.calls_to("getUpdates").first().map(|call| call.at).expect("a getUpdates call");
        times.push(first.saturating_duration_since(spawned));
        if with_server {
            gateway::at_least(1, || gateway.children()).await;
        }
        tokio::time::sleep(IDLE).await;
        idle_kib.push(gateway.rss_kib());
        drop(gateway);
    }
    println!("{label}: start → first getUpdates ({STARTS} starts, fresh homes): {}", gateway::p50_max(&mut times));
    idle_kib.sort_unstable();
    println!(
        "{label}: idle RSS after {} s of polling ({STARTS} starts): p50 {:.1} MB, max {:.1} MB",
        IDLE.as_secs(),
        idle_kib[STARTS / 2] as f64 / 1024.0,
        idle_kib[STARTS - 1] as f64 / 1024.0
    );
}

/// When the bot's successful `sendMessage` calls to `chat` arrived.
fn sends_to(telegram: &FakeTelegram, chat: i64) -> Vec<Instant> {
    let calls = telegram.calls_to("sendMessage");
    calls
        .iter()
        .filter(|c| c.params["chat_id"].as_i64() == Some(chat) && c.status() == Some(200))
        .map(|c| c.at)
        .collect()
}

/// Waits until `chat` got `count` messages from the bot.
async fn answers(telegram: &FakeTelegram, chat: i64, count: usize) -> Vec<Instant> {
    gateway::at_least(count, || sends_to(telegram, chat)).await
}

/// Phase 3: two messages at once from one user, each answered.
async fn back_to_back(telegram: &FakeTelegram) {
    for (label, first_user, command) in [
        ("each message its own run", 40_000, Some(gateway::EACH_MESSAGE_ITS_OWN_RUN)),
        ("default collect queue", 50_000, None),
    ] {
        let users = first_user..first_user + gateway::PAIRS as i64;
        let before = usize::from(command.is_some());
        if let Some(command) = command {
            for user in users.clone() {
                telegram.private_message(user, "Bench", command);
            }
            for user in users.clone() {
                answers(telegram, user, 1).await;
            }
        }
        tokio::time::sleep(gateway::REFILL).await;
        let (mut first, mut second) = (Vec::new(), Vec::new());
        for user in users {
            let injected = Instant::now();
            telegram.private_message(user, "Bench", "first question");
            telegram.private_message(user, "Bench", "second question");
            let sends = answers(telegram, user, before + 2).await;
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
