//! Inbound-path throughput (issue 4): 100,000 messages from 10,000 senders (one session
//! each) through the real dispatcher — routing with persisted dedupe, the queue journal,
//! the scheduler and lanes — measured twice:
//!
//! 1. **inbound path** (what issue 4 asks for): the runs are done by an instant in-process
//!    agent, a [`RunExecutor`] that takes its global-lane slot and answers with one message
//!    through the channel at once;
//! 2. **end to end**: the runs are Ferry's own — the SQLite session store (lazy reset,
//!    history, fenced transcript), the agent loop against a model that answers at once, and
//!    the reply pipeline.
//!
//! Each reports messages/s, the latency from a message to its run starting (p50/p99, with a
//! free lane and under the flood), and resident memory per idle session.
//! Run with `cargo bench --bench inbound`; results go in BENCHMARKS.md.
//! `FERRY_BENCH_AGENT=instant|full` measures one of the two only.

use std::collections::HashMap;
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use async_trait::async_trait;

use ferry::agent::{AgentStream, EventBus, LifecycleEvent};
use ferry::channel::{AckOutcome, Channel, OutboundMessage, Target};
use ferry::channels::ChannelRegistry;
use ferry::config::{Config, DmPolicy, DmScope};
use ferry::dispatch::{Dispatcher, DispatcherParts};
use ferry::queue::{RunExecutor, RunJob, RunReport};
use ferry::routing::{SystemClock, ThreadLabels};
use ferry::state::{Database, Stores};

/// The binary's allocator, so the bench measures what `ferry gateway` runs with.
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

/// As `ferry`'s `main` sets it: freed memory back to the OS at once (`mi_option_purge_delay`).
fn tune_allocator_as_the_binary_does() {
    // SAFETY: sets one integer option of the allocator.
    unsafe { libmimalloc_sys::mi_option_set(15, 0) }
}

#[path = "support/mod.rs"]
mod support;

use support::{CountingChannel, cpu_time, percentile, rss_kib, runner, written_bytes};

const SESSIONS: usize = 10_000;
const MESSAGES_PER_SESSION: usize = 10;
const LATENCY_SAMPLES: usize = 10_000;

fn main() {
    tune_allocator_as_the_binary_does();
    let only = std::env::var("FERRY_BENCH_AGENT").ok();
    for agent in [Agent::Instant, Agent::Full] {
        if only.as_deref().is_some_and(|name| name != agent.name()) {
            continue;
        }
        // A runtime (and a database) of its own each, so neither measure carries the other's
        // memory or work.
        let runtime =
            tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build().expect("runtime");
        runtime.block_on(measure(agent));
    }
}

/// Who does the runs.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Agent {
    /// [`InstantAgent`]: the inbound path alone.
    Instant,
    /// Ferry's agent loop and session store, with [`InstantProvider`] as the model.
    Full,
}

impl Agent {
    fn name(self) -> &'static str {
        match self {
            Agent::Instant => "instant",
            Agent::Full => "full",
        }
    }
}

/// A run started: its session key and when.
type RunStart = (String, Instant);

/// The instant in-process agent: takes a global-lane slot like any run, answers the batch's
/// last message with one message through its channel, and says when it started.
struct InstantAgent {
    channel: Arc<CountingChannel>,
    starts: tokio::sync::mpsc::UnboundedSender<RunStart>,
}

#[async_trait]
impl RunExecutor for InstantAgent {
    async fn execute(&self, job: RunJob) -> RunReport {
        let _slot = job.global.enter(&job.session_key).await;
        let _ = self.starts.send((job.session_key.clone(), Instant::now()));
        if let Some(last) = job.messages.last() {
            let reply = OutboundMessage::text(Target::of(&last.message), "ok");
            if let Err(error) = self.channel.send(reply).await {
                eprintln!("reply failed: {error}");
            }
        }
        RunReport::default()
    }
}

/// Forwards each run's lifecycle start on `bus` as a [`RunStart`].
fn starts_from_bus(bus: &EventBus, starts: tokio::sync::mpsc::UnboundedSender<RunStart>) {
    let mut events = bus.subscribe();
    tokio::spawn(async move {
        loop {
            match events.recv().await {
                Ok(event) => {
                    if let AgentStream::Lifecycle(LifecycleEvent::Start { .. }) = event.stream
                        && starts.send((event.session_key.clone(), Instant::now())).is_err()
                    {
                        break;
                    }
                }
                Err(tokio::sync::broadcast::error::RecvError::Lagged(_)) => continue,
                Err(_) => break,
            }
        }
    });
}

async fn measure(agent: Agent) {
    match agent {
        Agent::Instant => println!("== inbound path: routing + lanes + queue, instant in-process agent =="),
        Agent::Full => println!("== end to end: + session store, agent loop (instant model), reply pipeline =="),
    }
    let state = tempfile::tempdir().expect("state dir");
    let workspace = tempfile::tempdir().expect("workspace");
    let database = Database::open(state.path()).await.expect("database");
    let mut config = Config::default();
    config.channels.telegram.dm_policy = DmPolicy::Open;
    config.channels.telegram.allow_from = vec!["*".into()];
    config.session.dm_scope = DmScope::PerPeer;
    config.messages.queue.debounce_ms = 0;
    config.messages.queue.cap = MESSAGES_PER_SESSION * 2;
    if let Ok(limit) = std::env::var("FERRY_BENCH_MAX_CONCURRENT") {
        config.agents.defaults.max_concurrent = limit.parse().expect("a number");
    }

    let channels = ChannelRegistry::new();
    let bus = EventBus::new();
    let channel = Arc::new(CountingChannel::new());
    let (starts, mut started_runs) = tokio::sync::mpsc::unbounded_channel::<RunStart>();
    let parts = DispatcherParts {
        config: Arc::new(config),
        stores: Stores::sqlite(&database),
        agents: runner(&bus, workspace.path(), &channels).into(),
        channels,
        clock: Arc::new(SystemClock),
        thread_labels: ThreadLabels::new(),
    };
    let dispatcher = match agent {
        Agent::Instant => Dispatcher::with_executor(parts, Arc::new(InstantAgent { channel: channel.clone(), starts })),
        Agent::Full => {
            starts_from_bus(&bus, starts);
            Dispatcher::new(parts)
        }
    }
    .expect("dispatcher");
    dispatcher.attach(channel.clone()).await.expect("attach");

    // Phase 1: latency with free lanes — one message at a time, each to an idle session,
    // timed from injection to its run's start.
    let mut free_lane: Vec<Duration> = Vec::with_capacity(LATENCY_SAMPLES);
    let rss_before_idle = rss_kib();
    // FERRY_BENCH_FLOOD_ONLY=1 skips this phase (for profiling the flood alone).
    let samples = if std::env::var_os("FERRY_BENCH_FLOOD_ONLY").is_some() { 0 } else { LATENCY_SAMPLES };
    for sample in 0..samples {
        let peer = format!("probe-{sample}");
        let key = format!("agent:main:direct:{peer}");
        let sent = Instant::now();
        let _ack = channel.inject(&peer, "ping");
        loop {
            match started_runs.recv().await {
                Some((session_key, at)) if session_key == key => {
                    free_lane.push(at.saturating_duration_since(sent));
                    break;
                }
                Some(_) => {}
                None => return,
            }
        }
        while dispatcher.scheduler().busy_sessions() > 0 {
            tokio::task::yield_now().await;
        }
    }
    let rss_after_idle = rss_kib();
    free_lane.sort();
    if samples > 0 {
        println!(
            "free lane, message -> run start: p50 {:.2} ms, p99 {:.2} ms ({samples} samples)",
            percentile(&free_lane, 0.50).as_secs_f64() * 1e3,
            percentile(&free_lane, 0.99).as_secs_f64() * 1e3
        );
        println!(
            "resident memory across {samples} sessions created one at a time and left idle: {} -> {} KiB, {:.2} KiB per session",
            rss_before_idle,
            rss_after_idle,
            rss_after_idle.saturating_sub(rss_before_idle) as f64 / samples as f64
        );
    }

    // Phase 2: throughput — every message injected at once.
    let written_before = written_bytes();
    let commits_before = database.commit_stats();
    let log_before = database.inbound_log().stats();
    let sent_before = channel.sent.load(Ordering::Relaxed);
    let cpu_before = cpu_time();
    // First run start per session.
    let starts = tokio::spawn(async move {
        let mut first_start: HashMap<String, Instant> = HashMap::with_capacity(SESSIONS);
        while let Some((session_key, at)) = started_runs.recv().await {
            first_start.entry(session_key).or_insert(at);
            if first_start.len() == SESSIONS {
                break;
            }
        }
        first_start
    });

    let rss_before = rss_kib();
    let started = Instant::now();
    let mut first_sent: HashMap<String, Instant> = HashMap::with_capacity(SESSIONS);
    let mut acks = Vec::with_capacity(SESSIONS * MESSAGES_PER_SESSION);
    for round in 0..MESSAGES_PER_SESSION {
        for sender in 0..SESSIONS {
            let peer = format!("{sender}");
            if round == 0 {
                first_sent.insert(format!("agent:main:direct:{peer}"), Instant::now());
            }
            acks.push(channel.inject(&peer, &format!("message {round}")));
        }
    }
    for ack in acks {
        assert_eq!(ack.outcome().await, AckOutcome::Accepted);
    }
    let accepted = started.elapsed();
    while dispatcher.scheduler().busy_sessions() > 0 {
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    let answered = started.elapsed();
    let written = written_bytes().saturating_sub(written_before);
    let commits = database.commit_stats();
    let log = database.inbound_log().stats();
    let cpu = cpu_time().saturating_sub(cpu_before);
    let replies = channel.sent.load(Ordering::Relaxed) - sent_before;
    let first_start = starts.await.expect("start collector");
    let rss_after = rss_kib();

    let mut latencies: Vec<Duration> = first_sent
        .iter()
        .filter_map(|(key, sent)| first_start.get(key).map(|start| start.saturating_duration_since(*sent)))
        .collect();
    latencies.sort();
    let total = SESSIONS * MESSAGES_PER_SESSION;
    println!("messages: {total} over {SESSIONS} sessions");
    println!(
        "accepted (routed + journaled + acked): {:.2} s -> {:.0} msgs/s",
        accepted.as_secs_f64(),
        total as f64 / accepted.as_secs_f64()
    );
    println!(
        "all answered: {:.2} s -> {:.0} msgs/s end to end",
        answered.as_secs_f64(),
        total as f64 / answered.as_secs_f64()
    );
    println!(
        "written to disk (inbound log, WAL and database): {:.1} MiB, {:.1} KiB per message",
        written as f64 / (1024.0 * 1024.0),
        written as f64 / 1024.0 / total as f64
    );
    let (writes, transactions) = (commits.writes - commits_before.writes, commits.commits - commits_before.commits);
    println!(
        "database writes: {writes} in {transactions} transactions ({:.1} writes per commit); writer busy {:.2} s",
        writes as f64 / transactions.max(1) as f64,
        (commits.busy - commits_before.busy).as_secs_f64()
    );
    println!(
        "inbound log: {} records in {} writes, {:.2} MiB ({:.0} bytes per message)",
        log.appends - log_before.appends,
        log.writes - log_before.writes,
        (log.bytes - log_before.bytes) as f64 / (1 << 20) as f64,
        (log.bytes - log_before.bytes) as f64 / total as f64
    );
    println!(
        "CPU used: {:.2} s ({:.1} µs per message; the machine has 2 cores)",
        cpu.as_secs_f64(),
        cpu.as_secs_f64() * 1e6 / total as f64
    );
    println!("replies sent: {replies} (collect batching merges messages that arrive during a run)");
    println!(
        "under the flood, first message -> run start: p50 {:.2} ms, p99 {:.2} ms ({} sessions)",
        percentile(&latencies, 0.50).as_secs_f64() * 1e3,
        percentile(&latencies, 0.99).as_secs_f64() * 1e3,
        latencies.len()
    );
    println!(
        "resident memory after the flood: {} KiB before, {} KiB after -> {:.2} KiB per session (peak retained by the allocator)",
        rss_before,
        rss_after,
        (rss_after.saturating_sub(rss_before)) as f64 / SESSIONS as f64
    );
    println!("scheduler state kept for idle sessions: {}", dispatcher.scheduler().busy_sessions());
    println!();
}
