//! Inbound-path throughput with 1, 2 and 3 replicas on one PostgreSQL (issue 25): the
//! inbound bench's instant in-process agent, each replica a dispatcher of its own with its
//! own connection pool and leases, in this one process. Messages come in on every replica
//! (as Slack spreads events over sockets): each session's messages alternate between them,
//! so most are journaled on one replica and run on the session's holder.
//!
//! Reports messages/s (accepted, and all answered) and the latency from a message to its
//! run's start (p50/p99) under the flood, per replica count. The database is
//! `FERRY_TEST_DATABASE_URL`'s server (`eval "$(tests/postgres/setup)"`), a fresh database
//! per run; without it, a private cluster is started from Debian's PostgreSQL binaries.
//! Run with `cargo bench --bench replicas`; results go in BENCHMARKS.md.
//! `FERRY_BENCH_REPLICAS=2` measures one count only.

use std::collections::HashMap;
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use async_trait::async_trait;

use ferry::agent::EventBus;
use ferry::channel::{AckOutcome, Channel, OutboundMessage, Target};
use ferry::channels::ChannelRegistry;
use ferry::config::{Config, DmPolicy, DmScope};
use ferry::dispatch::{Dispatcher, DispatcherParts};
use ferry::queue::{RunExecutor, RunJob, RunReport};
use ferry::routing::{SystemClock, ThreadLabels};
use ferry::state::Stores;
use ferry::state::leases::LeaseTiming;
use ferry::state::postgres::PgBackend;

#[path = "support/mod.rs"]
mod support;

use support::{CountingChannel, cpu_time, percentile, runner};

#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

const SESSIONS: usize = 2_000;
const MESSAGES_PER_SESSION: usize = 10;

/// A run started: its session key and when.
type RunStart = (String, Instant);

/// Answers at once, as in `benches/inbound.rs`.
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

/// One replica: a dispatcher on its own pool, with its channel.
struct Replica {
    dispatcher: Dispatcher,
    channel: Arc<CountingChannel>,
}

async fn replica(
    url: &str,
    starts: tokio::sync::mpsc::UnboundedSender<RunStart>,
    workspace: &std::path::Path,
) -> Replica {
    let backend = PgBackend::connect(url, 8).await.expect("connect");
    backend.migrate().await.expect("migrate");
    let mut stores = Stores::postgres(&backend);
    stores.start_leases(LeaseTiming { lease: Duration::from_secs(30), renew: Duration::from_secs(10) });
    let mut config = Config::default();
    config.channels.telegram.dm_policy = DmPolicy::Open;
    config.channels.telegram.allow_from = vec!["*".into()];
    config.session.dm_scope = DmScope::PerPeer;
    config.messages.queue.debounce_ms = 0;
    config.messages.queue.cap = MESSAGES_PER_SESSION * 2;
    let channel = Arc::new(CountingChannel::new());
    let parts = DispatcherParts {
        config: Arc::new(config),
        stores,
        agents: runner(&EventBus::new(), workspace, &ChannelRegistry::new()).into(),
        channels: ChannelRegistry::new(),
        clock: Arc::new(SystemClock),
        thread_labels: ThreadLabels::new(),
    };
    let dispatcher = Dispatcher::with_executor(parts, Arc::new(InstantAgent { channel: channel.clone(), starts }))
        .expect("dispatcher");
    dispatcher.attach(channel.clone()).await.expect("attach");
    Replica { dispatcher, channel }
}

fn main() {
    let only: Option<usize> = std::env::var("FERRY_BENCH_REPLICAS").ok().and_then(|count| count.parse().ok());
    for count in [1, 2, 3] {
        if only.is_some_and(|only| only != count) {
            continue;
        }
        let runtime =
            tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build().expect("runtime");
        runtime.block_on(measure(count));
    }
}

async fn measure(count: usize) {
    let cluster;
    let database;
    let url = match ferry_fakes::test_database().await {
        Some(fresh) => {
            database = fresh;
            database.url().to_owned()
        }
        None => {
            cluster = ferry_fakes::PrivateCluster::start().await.expect("PostgreSQL binaries (tests/postgres/setup)");
            cluster.url().to_owned()
        }
    };
    let workspace = tempfile::tempdir().expect("workspace");
    let (starts, mut started_runs) = tokio::sync::mpsc::unbounded_channel::<RunStart>();
    let mut replicas = Vec::new();
    for _ in 0..count {
        replicas.push(replica(&url, starts.clone(), workspace.path()).await);
    }
    drop(starts);
    println!("== {count} replica(s) on one PostgreSQL: routing + journal + leases + lanes, instant agent ==");

    let collector = tokio::spawn(async move {
        let mut first_start: HashMap<String, Instant> = HashMap::with_capacity(SESSIONS);
        while let Some((session_key, at)) = started_runs.recv().await {
            first_start.entry(session_key).or_insert(at);
            if first_start.len() == SESSIONS {
                break;
            }
        }
        first_start
    });
    let cpu_before = cpu_time();
    let started = Instant::now();
    let mut first_sent: HashMap<String, Instant> = HashMap::with_capacity(SESSIONS);
    let mut acks = Vec::with_capacity(SESSIONS * MESSAGES_PER_SESSION);
    for round in 0..MESSAGES_PER_SESSION {
        for sender in 0..SESSIONS {
            let peer = format!("{sender}");
            if round == 0 {
                first_sent.insert(format!("agent:main:direct:{peer}"), Instant::now());
            }
            let replica = &replicas[(sender + round) % count];
            acks.push(replica.channel.inject(&peer, &format!("message {round}")));
        }
    }
    for ack in acks {
        assert_eq!(ack.outcome().await, AckOutcome::Accepted);
    }
    let accepted = started.elapsed();
    let total = SESSIONS * MESSAGES_PER_SESSION;
    // Answered: every message's run done (the journal empty) on every replica.
    let stores_of_one = postgres_stores(&url).await;
    loop {
        let waiting = stores_of_one.inbound.pending_count().await.expect("pending");
        let busy: usize = replicas.iter().map(|replica| replica.dispatcher.scheduler().busy_sessions()).sum();
        if waiting == 0 && busy == 0 {
            break;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    let answered = started.elapsed();
    let cpu = cpu_time().saturating_sub(cpu_before);
    let first_start = collector.await.expect("collector");
    let mut latencies: Vec<Duration> = first_sent
        .iter()
        .filter_map(|(key, sent)| first_start.get(key).map(|start| start.saturating_duration_since(*sent)))
        .collect();
    latencies.sort();
    let replies: usize = replicas.iter().map(|replica| replica.channel.sent.load(Ordering::Relaxed)).sum();
    println!("messages: {total} over {SESSIONS} sessions, spread over {count} replica(s)");
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
        "under the flood, first message -> run start: p50 {:.2} ms, p99 {:.2} ms ({} sessions)",
        percentile(&latencies, 0.50).as_secs_f64() * 1e3,
        percentile(&latencies, 0.99).as_secs_f64() * 1e3,
        latencies.len()
    );
    println!(
        "CPU of this process (the replicas; PostgreSQL not counted): {:.2} s, {:.1} µs per message",
        cpu.as_secs_f64(),
        cpu.as_secs_f64() * 1e6 / total as f64
    );
    println!("replies sent: {replies} (collect batching merges messages that arrive during a run)");
    println!();
}

async fn postgres_stores(url: &str) -> Stores {
    let backend = PgBackend::connect(url, 2).await.expect("connect");
    Stores::postgres(&backend)
}
