//! The multi-replica chaos test (issue 25): three `ferry gateway` processes on one real
//! PostgreSQL (a private cluster, so it can be restarted), each reaching it through a TCP
//! proxy of its own (so one replica's connection can be cut), with the fake Telegram, Discord
//! and Slack and one fake model, and hundreds of messages over many chats. While they flow,
//! one fault at a time:
//! - `kill -9` of a replica (half the time the one running the most sessions, right after a
//!   reply's finals were recorded), restarted a moment later;
//! - `SIGSTOP` of a replica past its lease, then `SIGCONT`: the zombie must have no effect;
//! - a replica's database connection cut (reset) or black-holed for a few seconds;
//! - PostgreSQL restarted under all of them.
//!
//! The oracle, at the end:
//! - nothing lost, nothing answered twice, no half-written preview (the shared
//!   `common/chaos_oracle.rs`), except Telegram's documented class: a send whose outcome was
//!   unknown, repeated;
//! - each chat answered in the order its messages were taken in (the journal's order, read
//!   from PostgreSQL), which on Telegram and Discord is the order they were sent (Slack hands
//!   each event to any of the app's sockets: one that reached a frozen replica is taken in
//!   after later ones);
//! - no two runs of one session at once anywhere: the fake model groups its streams by the
//!   chat each request is for, and no group ever has two open;
//! - every message answered within `lease + 10 s` of when it was sent, or of the last fault
//!   before its answer;
//! - scheduled jobs (issue 39, `every 10s` reminders to Slack DMs of their own, made with
//!   `ferry cron add`) fire each slot once across the replicas and the faults: every fire
//!   journaled is in its chat exactly once, and no slot has two runs.
//!
//! Discord keeps nothing for a bot that is not connected, and a session of another process
//! cannot be resumed, so Discord messages are sent only while a healthy replica holds the
//! Discord shard: each fault waits until what was sent reached the journal, and Discord
//! messages wait until the shard's holder is connected again after it (as `tests/chaos.rs`
//! does for one gateway). Their runs still meet the faults.
//!
//! Seeded and bounded: `FERRY_CHAOS_SEED` replays a run (the seed is printed, and named in
//! every failure); `FERRY_REPLICA_CHAOS_SECONDS` sets how long faults are injected (default
//! 60). Skips without PostgreSQL unless `FERRY_REQUIRE_POSTGRES=1`.

#[path = "common/daemon.rs"]
mod daemon;

#[allow(dead_code, unused_imports)]
#[path = "conformance/mod.rs"]
mod conformance;

#[path = "common/chaos_oracle.rs"]
mod oracle;

#[path = "common/replica_set.rs"]
mod replica_set;

use std::collections::{BTreeMap, HashMap};
use std::sync::atomic::{AtomicBool, AtomicU32, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use ferry_fakes::{FakeOpenAi, PrivateCluster, RecordedRequest, Turn};
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use tokio::time::Instant;

use conformance::discord::Discord;
use conformance::slack::Slack;
use conformance::telegram::Telegram;
use conformance::{Platform, Shown};
use daemon::PATIENCE;
use oracle::{Verdict, answer, asked_about, check_chat, duration_from_env, is_whole, seed, tokens};
use replica_set::{Fault, ReplicaSet};

/// Users per platform, each in a DM of their own: 3 × 8 chats.
const USERS: u64 = 8;
const LEASE_SECONDS: u64 = 3;
/// How late an answer may be after its message was sent or after the last fault before it.
const ANSWER_BOUND: Duration = Duration::from_secs(LEASE_SECONDS + 10);

#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
enum Kind {
    Telegram,
    Discord,
    Slack,
}

const KINDS: [Kind; 3] = [Kind::Telegram, Kind::Discord, Kind::Slack];

impl Kind {
    fn name(self) -> &'static str {
        match self {
            Self::Telegram => "telegram",
            Self::Discord => "discord",
            Self::Slack => "slack",
        }
    }
}

/// The three platforms' fakes.
struct Platforms {
    telegram: Telegram,
    discord: Discord,
    slack: Slack,
}

impl Platforms {
    async fn start() -> Self {
        Self { telegram: Telegram::start().await, discord: Discord::start().await, slack: Slack::start().await }
    }

    async fn dm(&self, kind: Kind, user: u64, text: &str) {
        match kind {
            Kind::Telegram => drop(self.telegram.dm(user, text).await),
            Kind::Discord => drop(self.discord.dm(user, text).await),
            Kind::Slack => drop(self.slack.dm(user, text).await),
        }
    }

    fn dm_messages(&self, kind: Kind, user: u64) -> Vec<Shown> {
        match kind {
            Kind::Telegram => self.telegram.dm_messages(user),
            Kind::Discord => self.discord.dm_messages(user),
            Kind::Slack => self.slack.dm_messages(user),
        }
    }

    /// The chat's id as Ferry records it in its delivery records.
    fn chat_id(&self, kind: Kind, user: u64) -> String {
        match kind {
            Kind::Telegram => user.to_string(),
            Kind::Discord => self.discord.fake().dm_channel(user).to_string(),
            Kind::Slack => conformance::slack::dm_channel(user),
        }
    }

    /// Every replica's config below `[state]`: all three platforms, open DMs, previews
    /// streamed and edited in place, the default queue mode (collect). Followup mode across
    /// replicas is tested in `tests/replicas.rs`: here, with each reply's preview and edits
    /// paced by the platform's limits (a few seconds a reply), one run per message would
    /// queue a busy chat's answers past the bound for reasons no fault caused.
    fn config(&self) -> String {
        let open = "dm_policy = \"open\"\nallow_from = [\"*\"]\nstreaming = \"partial\"";
        format!(
            "[channels.telegram]\n{}\n{open}\n\n[channels.discord]\n{}\n{open}\n\n[channels.slack]\n{}\n{open}\n\n\
             [agents.defaults]\nmodel_idle_timeout_seconds = 2\nmodel_retry_after_output_ms = 200\n\
             max_concurrent = 24\n\n\
             [messages]\ndelivery_deadline_seconds = 120\n\n[messages.queue]\ndebounce_ms = 200\n\n\
             [session]\ndm_scope = \"per-channel-peer\"\n",
            self.telegram.channel_config(),
            self.discord.channel_config(),
            self.slack.channel_config(),
        )
    }
}

/// The key of `user`'s DM session on `kind` (`dm_scope = "per-channel-peer"`), as the
/// replicas' logs name it.
fn session_key(kind: Kind, user: u64) -> String {
    match kind {
        Kind::Slack => format!("session_key=agent:main:slack:direct:u{user}"),
        _ => format!("session_key=agent:main:{}:direct:{user}", kind.name()),
    }
}

/// The chat a message is from, as its text names it: `chat=<kind>-<user>`.
fn chat_of(text: &str) -> Option<String> {
    let start = text.find("chat=")? + "chat=".len();
    let rest = &text[start..];
    let end = rest.find(|c: char| !(c.is_ascii_alphanumeric() || c == '-')).unwrap_or(rest.len());
    Some(rest[..end].to_owned())
}

/// The model: answers `<preamble> ack#<n> <tokens> done.` in four streamed pieces.
fn responder(counter: Arc<AtomicU32>) -> impl Fn(&RecordedRequest) -> Turn + Send + Sync {
    move |request| answer(request, &counter).map_or_else(|| Turn::text(["NO_", "REPLY"]), Turn::Reply)
}

/// A message sent, for the oracle.
#[derive(Debug, Clone)]
struct Sent {
    token: String,
    kind: Kind,
    user: u64,
    at: Instant,
}

/// What the sender and the fault injector share.
struct Shared {
    platforms: Platforms,
    sent: Mutex<Vec<Sent>>,
    /// When each token was first seen in a whole answer.
    answered: Mutex<HashMap<String, Instant>>,
    /// Discord messages may be sent: a healthy replica holds the shard. Flipped under
    /// `discord_gate`, which the sender holds while it sends one.
    discord_open: AtomicBool,
    discord_gate: tokio::sync::Mutex<()>,
    discord_sent: AtomicUsize,
    stop_sending: AtomicBool,
}

impl Shared {
    fn record(&self, kind: Kind, user: u64, token: String) {
        let sent = Sent { token, kind, user, at: Instant::now() };
        self.sent.lock().unwrap().push(sent);
    }
}

/// Sends a message to a random chat every 40-250 ms until told to stop.
async fn send_messages(shared: Arc<Shared>, mut rng: StdRng) -> usize {
    let mut count = 0;
    while !shared.stop_sending.load(Ordering::SeqCst) {
        let kind = KINDS[rng.random_range(0..KINDS.len())];
        let user = rng.random_range(1..=USERS);
        let token = format!("tok-{count}");
        let text = format!("{token} from chat={}-{user}: what do you think?", kind.name());
        if kind == Kind::Discord {
            let _gate = shared.discord_gate.lock().await;
            if shared.discord_open.load(Ordering::SeqCst) {
                shared.platforms.dm(kind, user, &text).await;
                shared.discord_sent.fetch_add(1, Ordering::SeqCst);
                shared.record(kind, user, token);
                count += 1;
            }
        } else {
            shared.platforms.dm(kind, user, &text).await;
            shared.record(kind, user, token);
            count += 1;
        }
        tokio::time::sleep(Duration::from_millis(rng.random_range(40..250))).await;
    }
    count
}

/// Notes when each token first shows in a whole answer, every 100 ms, until told to stop.
async fn watch_answers(shared: Arc<Shared>, stop: Arc<AtomicBool>) {
    while !stop.load(Ordering::SeqCst) {
        let now = Instant::now();
        for kind in KINDS {
            for user in 1..=USERS {
                for message in shared.platforms.dm_messages(kind, user) {
                    let text = message.visible.trim();
                    if !is_whole(text) {
                        continue;
                    }
                    let mut answered = shared.answered.lock().unwrap();
                    for token in tokens(text) {
                        answered.entry(token).or_insert(now);
                    }
                }
            }
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// Closes Discord to new messages and waits until what was sent is journaled: the fault to
/// come may take the shard's holder away.
async fn close_discord(shared: &Shared, replicas: &ReplicaSet) {
    {
        let _gate = shared.discord_gate.lock().await;
        shared.discord_open.store(false, Ordering::SeqCst);
    }
    let sent = shared.discord_sent.load(Ordering::SeqCst);
    replicas.wait_for_journaled("discord", sent).await;
}

/// Opens Discord again once a healthy replica holds the shard and is connected.
async fn reopen_discord(shared: &Shared, replicas: &ReplicaSet) {
    replicas.wait_for_healthy_ingress("discord:").await;
    tokio::time::timeout(PATIENCE, shared.platforms.discord.fake().wait_for_session())
        .await
        .expect("a live Discord session");
    let _gate = shared.discord_gate.lock().await;
    shared.discord_open.store(true, Ordering::SeqCst);
}

/// Runs faults one after another, a few seconds apart, until `deadline`; returns when each
/// one started.
async fn inject_faults(
    shared: &Shared,
    replicas: &mut ReplicaSet,
    rng: &mut StdRng,
    began: Instant,
    deadline: Instant,
) -> Vec<(Instant, Fault)> {
    let mut faults = Vec::new();
    while Instant::now() < deadline {
        tokio::time::sleep(Duration::from_millis(rng.random_range(1500..4000))).await;
        let roll = rng.random_range(0..100);
        let target = rng.random_range(0..replicas.len());
        let (fault, target) = match roll {
            0..40 => {
                // Half the time the worst moment: the busiest replica, right after finals.
                let busiest = rng.random_bool(0.5);
                let target = if busiest { replicas.busiest().await.unwrap_or(target) } else { target };
                if busiest {
                    replicas.wait_for_new_finals(Duration::from_secs(2)).await;
                }
                (Fault::Kill { down: Duration::from_millis(rng.random_range(300..2000)) }, target)
            }
            40..60 => {
                let past_lease = Duration::from_millis(LEASE_SECONDS * 1000 + rng.random_range(500..2500));
                (Fault::Stop { frozen: past_lease }, target)
            }
            60..80 => {
                let cut = Duration::from_millis(rng.random_range(1000..5000));
                (Fault::CutDatabase { cut, blackhole: rng.random_bool(0.5) }, target)
            }
            _ => (Fault::RestartPostgres, target),
        };
        // Any fault may take the shard's holder away (a replica that loses the database
        // loses its leases; a lease may have moved since it was looked at): Discord waits.
        close_discord(shared, replicas).await;
        let started = Instant::now();
        println!("{:>6.1}s: {fault:?} on replica {target}", (started - began).as_secs_f64());
        replicas.inflict(target, fault).await;
        faults.push((started, fault));
        reopen_discord(shared, replicas).await;
    }
    faults
}

/// Slack DMs that only scheduled reminders go to (`beat <n>` every 10 s).
const BEAT_USERS: [u64; 4] = [101, 102, 103, 104];

/// Adds the reminders, through the CLI, on the shared database; returns their ids.
fn add_beats(replicas: &ReplicaSet) -> Vec<String> {
    BEAT_USERS
        .iter()
        .map(|user| {
            let to = format!("slack:{}", conformance::slack::dm_channel(*user));
            let text = format!("beat {user}");
            let out = replicas.command(&["cron", "add", "--to", &to, "--every", "10s", "--text", &text]);
            // `added <id> "<name>": …`
            out.split_whitespace().nth(1).unwrap_or_else(|| panic!("no job id in {out:?}")).to_owned()
        })
        .collect()
}

/// Pauses the reminders, waits until no fire is in flight or waiting, then checks that each
/// journaled fire reached its chat exactly once and no slot ran twice.
async fn check_beats(replicas: &ReplicaSet, platforms: &Platforms, jobs: &[String], seed: u64) -> usize {
    for id in jobs {
        replicas.command(&["cron", "pause", id]);
    }
    let settled = tokio::time::timeout(PATIENCE * 2, async {
        loop {
            let running =
                replicas.rows("SELECT count(*)::text FROM scheduled_jobs WHERE running_slot_ms IS NOT NULL").await;
            let waiting = replicas
                .rows(
                    "SELECT count(*)::text FROM inbound_journal WHERE message_id LIKE 'cron:%' AND answered_at IS NULL",
                )
                .await;
            if running == ["0"] && waiting == ["0"] {
                return;
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    })
    .await;
    assert!(settled.is_ok(), "seed {seed}: scheduled fires were still in flight long after the jobs were paused");
    let twice = replicas
        .rows(
            "SELECT job_id || '@' || slot_ms FROM scheduled_runs WHERE status <> 'skipped'              GROUP BY job_id, slot_ms HAVING count(*) > 1",
        )
        .await;
    assert!(twice.is_empty(), "seed {seed}: slots that ran twice: {twice:?}");
    let mut fired = 0;
    for user in BEAT_USERS {
        let chat = conformance::slack::dm_channel(user);
        let fires = replicas
            .rows(&format!(
                "SELECT message_id FROM inbound_journal WHERE chat_id = '{chat}' AND message_id LIKE 'cron:%'"
            ))
            .await;
        let beat = format!("beat {user}");
        let delivered = tokio::time::timeout(PATIENCE, async {
            loop {
                let shown = platforms.dm_messages(Kind::Slack, user);
                let count = shown.iter().filter(|message| message.visible.trim().starts_with(&beat)).count();
                if count >= fires.len() {
                    return (count, shown);
                }
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
        })
        .await;
        let (count, shown) = delivered.unwrap_or_else(|_| {
            panic!(
                "seed {seed}: {chat}: {} fires journaled, fewer delivered: {:?}",
                fires.len(),
                platforms.dm_messages(Kind::Slack, user)
            )
        });
        let texts: Vec<String> = shown.into_iter().map(|message| message.visible).collect();
        assert_eq!(count, fires.len(), "seed {seed}: {chat}: each fire delivered once: {fires:?} vs {texts:?}");
        assert!(fires.len() >= 3, "seed {seed}: {chat}: the job kept firing through the faults: {fires:?}");
        fired += fires.len();
    }
    fired
}

/// What a run did, for its report.
#[derive(Debug, Default)]
struct Tally {
    messages: usize,
    kills: usize,
    stops: usize,
    database_cuts: usize,
    postgres_restarts: usize,
    scheduled_fires: usize,
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn three_replicas_answer_every_message_once_through_kills_freezes_and_database_faults() {
    let Some(cluster) = PrivateCluster::start().await else { return };
    let seed = seed();
    println!("replica chaos seed: {seed} (FERRY_CHAOS_SEED={seed} replays it)");
    let mut rng = StdRng::seed_from_u64(seed);
    let openai = Arc::new(FakeOpenAi::start().await.expect("fake model"));
    openai.set_responder(responder(Arc::new(AtomicU32::new(0))));
    // One group per chat: no chat may have two model streams open at once.
    openai.set_stream_group(|request| chat_of(&request.last_user_text().unwrap_or_default()));
    let platforms = Platforms::start().await;
    let config = platforms.config();
    let mut replicas =
        ReplicaSet::start(cluster, openai.clone(), 3, LEASE_SECONDS, &config, &["telegram", "discord", "slack"]).await;
    platforms.slack.fake().wait_for_connections(3).await;
    replicas.wait_for_healthy_ingress("discord:").await;
    replicas.wait_for_healthy_ingress("telegram:").await;
    tokio::time::timeout(PATIENCE, platforms.discord.fake().wait_for_session()).await.expect("a Discord session");

    let beats = add_beats(&replicas);

    let shared = Arc::new(Shared {
        platforms,
        sent: Mutex::default(),
        answered: Mutex::default(),
        discord_open: AtomicBool::new(true),
        discord_gate: tokio::sync::Mutex::new(()),
        discord_sent: AtomicUsize::new(0),
        stop_sending: AtomicBool::new(false),
    });
    let watching = Arc::new(AtomicBool::new(false));
    let watcher = tokio::spawn(watch_answers(shared.clone(), watching.clone()));
    let sender = tokio::spawn(send_messages(shared.clone(), StdRng::seed_from_u64(rng.random())));
    let began = Instant::now();
    // The replicas log in UTC: the faults' offsets are from here.
    println!("faults are timed from {}", chrono::Utc::now().to_rfc3339());
    let deadline = began + duration_from_env("FERRY_REPLICA_CHAOS_SECONDS", 60);
    let faults = inject_faults(&shared, &mut replicas, &mut rng, began, deadline).await;
    shared.stop_sending.store(true, Ordering::SeqCst);
    let mut tally = Tally { messages: sender.await.expect("the sender"), ..Tally::default() };
    for (_, fault) in &faults {
        match fault {
            Fault::Kill { .. } => tally.kills += 1,
            Fault::Stop { .. } => tally.stops += 1,
            Fault::CutDatabase { .. } => tally.database_cuts += 1,
            Fault::RestartPostgres => tally.postgres_restarts += 1,
        }
    }

    // A last message per chat: once it is answered, everything before it in that chat is.
    for kind in KINDS {
        for user in 1..=USERS {
            let token = format!("end-{}", shared.sent.lock().unwrap().len());
            let text = format!("{token} from chat={}-{user}: that is all", kind.name());
            shared.platforms.dm(kind, user, &text).await;
            shared.record(kind, user, token);
        }
    }
    let ends: Vec<Sent> =
        shared.sent.lock().unwrap().iter().filter(|sent| sent.token.starts_with("end-")).cloned().collect();
    for end in &ends {
        let answered = tokio::time::timeout(PATIENCE * 2, async {
            while !shared.answered.lock().unwrap().contains_key(&end.token) {
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
        })
        .await;
        if answered.is_err() {
            for index in 0..replicas.len() {
                println!("replica {index} trouble: {:#?}", replicas.trouble(index, 30));
            }
            panic!(
                "seed {seed}: {:?} user {}'s last message was never answered; the chat shows {:?}",
                end.kind,
                end.user,
                shared.platforms.dm_messages(end.kind, end.user).iter().map(|m| m.visible.clone()).collect::<Vec<_>>()
            );
        }
    }
    // Anything sent twice would have shown by now.
    tokio::time::sleep(Duration::from_secs(2)).await;
    watching.store(true, Ordering::SeqCst);
    watcher.await.expect("the watcher");

    let sent = shared.sent.lock().unwrap().clone();
    // Each chat's tokens, in the order sent (then, below, in the order taken in).
    let mut by_chat: BTreeMap<(Kind, u64), Vec<String>> = BTreeMap::new();
    for message in &sent {
        by_chat.entry((message.kind, message.user)).or_default().push(message.token.clone());
    }
    // The order the journal took each chat's messages in: the order Ferry runs them. On
    // Telegram (one poller) and Discord (one connection) it must be the order they were
    // sent; Slack hands each event to any of the app's sockets, so one that reached a frozen
    // or cut-off replica is taken in after later ones that reached a healthy one.
    let journal = replicas.journal().await;
    let position: HashMap<String, usize> = journal
        .iter()
        .enumerate()
        .flat_map(|(index, (_, prompt))| tokens(prompt).into_iter().map(move |token| (token, index)))
        .collect();
    let mut taken_in_out_of_order: BTreeMap<Kind, usize> = BTreeMap::new();
    for ((kind, _), tokens) in by_chat.iter_mut() {
        let sent_order = tokens.clone();
        tokens.sort_by_key(|token| position.get(token).copied().unwrap_or(usize::MAX));
        if *tokens != sent_order {
            *taken_in_out_of_order.entry(*kind).or_default() += 1;
        }
    }
    let mut verdicts: BTreeMap<Kind, Verdict> = BTreeMap::new();
    for ((kind, user), tokens) in &by_chat {
        let verdict = verdicts.entry(*kind).or_default();
        let shown = shared.platforms.dm_messages(*kind, *user);
        let chat = shared.platforms.chat_id(*kind, *user);
        let mut known = Vec::new();
        for message in shown {
            // A preview Ferry knew of is in its records; one it never learned the id of is not.
            let recorded =
                format!("\"id\":\"{chat}\"}},\"thread_id\":null}},\"message_id\":\"{}\"", message.message_id);
            if !is_whole(message.visible.trim()) && replicas.ledger_count(&recorded).await == 0 {
                verdict.unknown_previews.push(message.visible);
            } else {
                known.push(message);
            }
        }
        check_chat(&known, tokens, verdict);
    }

    // No two runs of one session at once, as the model saw them.
    let overlapping: BTreeMap<String, usize> =
        openai.peak_open_streams_by_group().into_iter().filter(|(_, peak)| *peak > 1).collect();
    // Every answer within the bound of its message, or of the last fault before the answer.
    let answered = shared.answered.lock().unwrap().clone();
    let mut late = Vec::new();
    for message in &sent {
        let Some(at) = answered.get(&message.token).copied() else { continue };
        let last_fault = faults.iter().map(|(started, _)| *started).filter(|started| *started <= at).max();
        let from = last_fault.map_or(message.at, |fault| fault.max(message.at));
        if at - from > ANSWER_BOUND {
            late.push(format!(
                "{} ({:?} {}) sent at {:.1}s, answered {:.1}s after {}",
                message.token,
                message.kind,
                message.user,
                (message.at - began).as_secs_f64(),
                (at - from).as_secs_f64(),
                if from == message.at { "it was sent" } else { "the fault" },
            ));
        }
    }

    tally.scheduled_fires = check_beats(&replicas, &shared.platforms, &beats, seed).await;
    println!("seed {seed}: {tally:?}");
    for (kind, verdict) in &verdicts {
        println!("seed {seed}, {kind:?}: {verdict}");
    }
    for (kind, verdict) in &verdicts {
        let troubled = verdict.lost.iter().chain(&verdict.duplicated).chain(&verdict.repeated_sends);
        for token in troubled {
            let asked = asked_about(&openai.requests(), token);
            let user = sent.iter().find(|message| message.token == *token).map_or(0, |message| message.user);
            let chat: Vec<String> = shared.platforms.dm_messages(*kind, user).into_iter().map(|m| m.visible).collect();
            println!(
                "{kind:?} {token} (user {user}): the model was asked about it {asked} times; the chat shows {chat:?}"
            );
            // What each replica did with the chat's session, for a post-mortem from CI's
            // output alone (the homes are kept on the machine that ran it).
            let session = session_key(*kind, user);
            for index in 0..replicas.len() {
                for line in replicas.lines_about(index, &session, 60) {
                    println!("  replica {index}: {line}");
                }
            }
            if *kind == Kind::Discord {
                let channel = shared.platforms.discord.fake().dm_channel(user);
                for call in
                    shared.platforms.discord.fake().calls().iter().filter(|call| call.channel_id == Some(channel))
                {
                    println!("  {} {} {:?} -> {:?} {}", call.method, call.path, call.status, call.dropped, call.body);
                }
            }
        }
    }
    println!("seed {seed}: overlapping runs {overlapping:?}, answered late {late:?}");
    println!("seed {seed}: chats whose messages the platform delivered out of order: {taken_in_out_of_order:?}");
    let clean = |v: &Verdict| {
        v.lost.is_empty()
            && v.duplicated.is_empty()
            && v.half_written.is_empty()
            && v.leaks.is_empty()
            && v.out_of_order.is_empty()
    };
    let failed = !verdicts.values().all(clean) || !overlapping.is_empty() || !late.is_empty();
    if failed {
        for index in 0..replicas.len() {
            println!("replica {index} trouble: {:#?}", replicas.trouble(index, 30));
        }
        println!("the replicas' homes, kept: {:?}", replicas.keep_homes());
    }
    for (kind, verdict) in &verdicts {
        let context = format!("seed {seed}, {kind:?}: {verdict:?}");
        assert!(verdict.lost.is_empty(), "lost: {context}");
        assert!(verdict.duplicated.is_empty(), "answered twice: {context}");
        assert!(verdict.half_written.is_empty(), "half-written or frozen: {context}");
        assert!(verdict.leaks.is_empty(), "NO_REPLY leaked: {context}");
        assert!(verdict.out_of_order.is_empty(), "out of order: {context}");
        if *kind != Kind::Telegram {
            assert!(verdict.repeated_sends.is_empty(), "only Telegram may repeat a send: {context}");
            assert!(verdict.unknown_previews.is_empty(), "only Telegram may lose track of a preview: {context}");
        }
    }
    for kind in [Kind::Telegram, Kind::Discord] {
        let reordered = taken_in_out_of_order.get(&kind).copied().unwrap_or(0);
        assert_eq!(reordered, 0, "seed {seed}: {kind:?} messages were taken in out of the order they were sent");
    }
    assert!(overlapping.is_empty(), "seed {seed}: runs of one session overlapped: {overlapping:?}");
    assert!(
        late.is_empty(),
        "seed {seed}: answered later than {ANSWER_BOUND:?} after the message or a fault: {late:?}"
    );
    assert!(tally.messages >= 200, "seed {seed}: only {} messages were sent", tally.messages);
}
