//! Several `ferry gateway` replicas on one PostgreSQL (real, from `tests/postgres/setup`),
//! with the fake Telegram and model: one replica polls the bot at a time and another takes
//! over within the lease after a `kill -9`; a session's messages run on one replica at a
//! time, wherever they came in. Skips without PostgreSQL unless `FERRY_REQUIRE_POSTGRES=1`.

use std::time::{Duration, Instant};

use ferry_fakes::{DiscordUser, FakeDiscord, FakeOpenAi, FakeSlack, FakeTelegram, Reply, Turn, test_database};

#[path = "common/daemon.rs"]
mod daemon;

use daemon::{Daemon, PATIENCE, daemon_in, health, inbound_handled, telegram_replies};

const TOKEN: &str = "123456:TEST-token";
/// Short leases, so a takeover takes seconds.
const LEASE_SECONDS: u64 = 3;
const STATE: &str = "[state]\nbackend = \"postgres\"\nlease_seconds = 3\nrenew_seconds = 1\n";

fn telegram_config(url: &str, telegram: &FakeTelegram) -> String {
    format!(
        "{STATE}postgres_url = \"{url}\"\n\n[channels.telegram]\nenabled = true\nbot_token = \"{TOKEN}\"\n\
         api_url = \"{}\"\ndm_policy = \"open\"\nallow_from = [\"*\"]\n",
        telegram.url()
    )
}

fn discord_config(state: &str, url: &str, discord: &FakeDiscord) -> String {
    format!(
        "{state}postgres_url = \"{url}\"\n\n[channels.discord]\nenabled = true\nbot_token = \"{}\"\n\
         api_url = \"{}\"\ndm_policy = \"open\"\nallow_from = [\"*\"]\n",
        discord.token(),
        discord.url()
    )
}

/// The bot's messages in the Discord channel `channel` once there are `count`.
async fn discord_replies(discord: &FakeDiscord, channel: u64, count: usize) -> Vec<String> {
    tokio::time::timeout(PATIENCE, discord.wait_for_messages(channel, count))
        .await
        .unwrap_or_else(|_| panic!("expected {count} replies in {channel}: {:?}", discord.messages_in(channel)))
        .into_iter()
        .map(|message| message.content)
        .collect()
}

/// Messages a replica journaled for a session another replica held.
async fn forwarded(port: u16) -> u64 {
    let text = reqwest::get(format!("http://127.0.0.1:{port}/metrics")).await.unwrap().text().await.unwrap();
    text.lines()
        .filter(|line| line.starts_with("ferry_inbound_messages_total{") && line.contains("outcome=\"forwarded\""))
        .filter_map(|line| line.rsplit_once(' ')?.1.parse::<u64>().ok())
        .sum()
}

/// The replica among `daemons` whose `/healthz` says it holds an ingress named `name…`.
async fn poller_of(daemons: &[&Daemon], name: &str) -> Option<usize> {
    for (index, daemon) in daemons.iter().enumerate() {
        let health = health(daemon.port).await;
        let ingress = health["replica"]["ingress"].as_array().cloned().unwrap_or_default();
        if ingress.iter().any(|lease| lease["name"].as_str().is_some_and(|held| held.starts_with(name))) {
            return Some(index);
        }
    }
    None
}

async fn wait_for_poller(daemons: &[&Daemon], name: &str) -> usize {
    tokio::time::timeout(PATIENCE, async {
        loop {
            if let Some(index) = poller_of(daemons, name).await {
                return index;
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    })
    .await
    .expect("a replica took the Telegram poller")
}

/// Waits until `daemon` holds no session lease: every run it had is over and recorded.
async fn wait_for_no_session_leases(daemon: &Daemon) {
    tokio::time::timeout(PATIENCE, async {
        while health(daemon.port).await["replica"]["sessionLeases"] != 0 {
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    })
    .await
    .expect("the replica gave its sessions back");
}

/// Two replicas, one bot: one polls, the other stands by. After the poller is killed, the
/// other polls within the lease (plus its renewal period and jitter) and answers what was
/// sent meanwhile, once.
#[tokio::test]
async fn after_a_kill_another_replica_polls_the_bot_within_the_lease() {
    let Some(database) = test_database().await else { return };
    let telegram = FakeTelegram::start(TOKEN).await.unwrap().without_rate_limits();
    let openai = FakeOpenAi::start().await.unwrap();
    let config = telegram_config(database.url(), &telegram);
    let a = daemon_in(tempfile::tempdir().unwrap(), &config, &openai, "telegram").await;
    let b = daemon_in(tempfile::tempdir().unwrap(), &config, &openai, "telegram").await;
    let ingress = "telegram:";
    let first = wait_for_poller(&[&a, &b], ingress).await;
    openai.push(Turn::text(["one"]));
    telegram.private_message(42, "Ada", "first");
    assert_eq!(telegram_replies(&telegram, 42, 1).await, ["one"]);

    let (holder, standby) = if first == 0 { (a, b) } else { (b, a) };
    // The reply is recorded as delivered before the session is given back; a kill between
    // the send and that record is Telegram's documented at-least-once case, not this test's.
    wait_for_no_session_leases(&holder).await;
    let killed = Instant::now();
    drop(holder);
    openai.push(Turn::text(["two"]));
    telegram.private_message(42, "Ada", "second");
    let survivor = wait_for_poller(&[&standby], ingress).await;
    assert_eq!(survivor, 0);
    let took = killed.elapsed();
    assert_eq!(telegram_replies(&telegram, 42, 2).await, ["one", "two"]);
    let bound = Duration::from_secs(LEASE_SECONDS) + Duration::from_secs(1) * 2 + Duration::from_secs(2);
    assert!(took < bound, "the poller moved after {took:?}, not within {bound:?}");
    tokio::time::sleep(Duration::from_millis(500)).await;
    assert_eq!(telegram.messages_in(42).len(), 2, "nothing answered twice: {:?}", telegram.messages_in(42));
}

/// Slack sends each event to one of the app's sockets; with two replicas connected, one
/// chat's messages come in on both. They still run one at a time, on the replica that
/// holds the session, in order, each answered once.
#[tokio::test]
async fn a_sessions_messages_run_on_one_replica_whichever_took_them_in() {
    let Some(database) = test_database().await else { return };
    let slack = FakeSlack::start().await.unwrap();
    let openai = FakeOpenAi::start().await.unwrap();
    let config = format!(
        "{STATE}postgres_url = \"{}\"\n\n[channels.slack]\nenabled = true\nbot_token = \"{}\"\n\
         app_token = \"{}\"\napi_url = \"{}\"\ndm_policy = \"open\"\nallow_from = [\"*\"]\n\
         [messages.queue]\nmode = \"followup\"\ndebounce_ms = 0\n",
        database.url(),
        FakeSlack::BOT_TOKEN,
        FakeSlack::APP_TOKEN,
        slack.api_url()
    );
    let a = daemon_in(tempfile::tempdir().unwrap(), &config, &openai, "slack").await;
    let b = daemon_in(tempfile::tempdir().unwrap(), &config, &openai, "slack").await;
    slack.wait_for_connections(2).await;
    let count = 6;
    for n in 0..count {
        openai.push(Turn::Reply(Reply::text([format!("answer {n}")]).with_chunk_delay(Duration::from_millis(100))));
    }
    for n in 0..count {
        let event = slack.event(FakeSlack::message_body("D1", "im", "U1", &format!("question {n}"), None));
        // Alternately on each replica's socket.
        slack.deliver_via(&event, n % 2);
        tokio::time::sleep(Duration::from_millis(30)).await;
    }
    let answers = tokio::time::timeout(PATIENCE, async {
        loop {
            let posted: Vec<String> = slack.messages_in("D1").into_iter().map(|m| m.text).collect();
            if posted.len() >= count {
                return posted;
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    })
    .await
    .unwrap_or_else(|_| panic!("every question answered: {:?}", slack.messages_in("D1")));
    let expected: Vec<String> = (0..count).map(|n| format!("answer {n}")).collect();
    assert_eq!(answers, expected, "each answered once, in order");
    // Each replica took half of them in; what one took in for a session the other held,
    // it handed over through the journal.
    let forwarded = forwarded(a.port).await + forwarded(b.port).await;
    assert!(forwarded >= 1, "messages crossed between replicas");
    assert_eq!(openai.peak_open_streams(), 1, "one run of the session at a time across replicas");
}

/// The database goes away under a running gateway: it keeps running, says so on `/healthz`
/// (and stops receiving for the bot, which needs the lease), then reconnects by itself
/// when the database is back and answers again.
#[tokio::test]
async fn a_replica_rides_out_a_database_outage_and_says_so() {
    let Some(cluster) = ferry_fakes::PrivateCluster::start().await else { return };
    let telegram = FakeTelegram::start(TOKEN).await.unwrap().without_rate_limits();
    let openai = FakeOpenAi::start().await.unwrap();
    let daemon =
        daemon_in(tempfile::tempdir().unwrap(), &telegram_config(cluster.url(), &telegram), &openai, "telegram").await;
    wait_for_poller(&[&daemon], "telegram:").await;
    let database_is = |state: &'static str| {
        let port = daemon.port;
        async move {
            tokio::time::timeout(PATIENCE, async {
                loop {
                    let health = health(port).await;
                    if health["replica"]["database"] == state {
                        return health;
                    }
                    tokio::time::sleep(Duration::from_millis(100)).await;
                }
            })
            .await
            .unwrap_or_else(|_| panic!("/healthz never said the database is {state}"))
        }
    };
    assert_eq!(database_is("reachable").await["ok"], true);

    cluster.stop().await;
    let down = database_is("unreachable").await;
    assert_eq!(down["ok"], false, "{down}");
    // Past the lease, it no longer counts itself the bot's poller.
    tokio::time::sleep(Duration::from_secs(LEASE_SECONDS)).await;
    assert_eq!(poller_of(&[&daemon], "telegram:").await, None);

    cluster.start_again().await;
    assert_eq!(database_is("reachable").await["ok"], true);
    wait_for_poller(&[&daemon], "telegram:").await;
    openai.push(Turn::text(["back"]));
    telegram.private_message(42, "Ada", "are you there?");
    assert_eq!(telegram_replies(&telegram, 42, 1).await, ["back"]);
}

/// Two replicas, one Discord bot: only the holder of the shard's lease connects to the
/// gateway (one identify), and after a kill the other connects within the lease and
/// answers.
#[tokio::test]
async fn one_replica_at_a_time_connects_to_the_discord_gateway_and_another_takes_over_after_a_kill() {
    let Some(database) = test_database().await else { return };
    let discord = FakeDiscord::start("fake.discord.token").await.unwrap().without_rate_limits();
    let openai = FakeOpenAi::start().await.unwrap();
    let config = discord_config(STATE, database.url(), &discord);
    let a = daemon_in(tempfile::tempdir().unwrap(), &config, &openai, "discord").await;
    let b = daemon_in(tempfile::tempdir().unwrap(), &config, &openai, "discord").await;
    let first = wait_for_poller(&[&a, &b], "discord:").await;
    tokio::time::timeout(PATIENCE, discord.wait_for_session()).await.expect("a gateway session");
    // The other replica stands by: it never connected.
    tokio::time::sleep(Duration::from_secs(LEASE_SECONDS)).await;
    assert_eq!(discord.identify_count(), 1, "only the shard's holder connects");
    let ada = DiscordUser::new(42, "ada");
    openai.push(Turn::text(["one"]));
    let (channel, _) = discord.dm(&ada, "first");
    assert_eq!(discord_replies(&discord, channel, 1).await, ["one"]);

    let (holder, standby) = if first == 0 { (a, b) } else { (b, a) };
    wait_for_no_session_leases(&holder).await;
    let killed = Instant::now();
    drop(holder);
    wait_for_poller(&[&standby], "discord:").await;
    tokio::time::timeout(PATIENCE, discord.wait_for_session()).await.expect("a gateway session");
    let took = killed.elapsed();
    let bound = Duration::from_secs(LEASE_SECONDS) + Duration::from_secs(1) * 2 + Duration::from_secs(2);
    assert!(took < bound, "the shard moved after {took:?}, not within {bound:?}");
    assert_eq!(discord.identify_count(), 2);
    openai.push(Turn::text(["two"]));
    discord.dm(&ada, "second");
    assert_eq!(discord_replies(&discord, channel, 2).await, ["one", "two"]);
}

/// Discord keeps nothing for a bot that is not connected: a message sent after the shard's
/// holder was killed and before another replica took the shard over reaches only the
/// channel's history. The replica that takes over catches up from the positions the holder
/// saved under the shard's lease, and answers it, once.
#[tokio::test]
async fn a_discord_message_sent_between_the_holders_kill_and_the_takeover_is_answered_once() {
    let Some(database) = test_database().await else { return };
    let discord = FakeDiscord::start("fake.discord.token").await.unwrap().without_rate_limits();
    let openai = FakeOpenAi::start().await.unwrap();
    let config = discord_config(STATE, database.url(), &discord);
    let mut replicas = Vec::new();
    for _ in 0..3 {
        replicas.push(daemon_in(tempfile::tempdir().unwrap(), &config, &openai, "discord").await);
    }
    let first = wait_for_poller(&replicas.iter().collect::<Vec<_>>(), "discord:").await;
    tokio::time::timeout(PATIENCE, discord.wait_for_session()).await.expect("a gateway session");
    let ada = DiscordUser::new(42, "ada");
    openai.push(Turn::text(["one"]));
    let (channel, _) = discord.dm(&ada, "first");
    assert_eq!(discord_replies(&discord, channel, 1).await, ["one"]);

    let holder = replicas.remove(first);
    wait_for_no_session_leases(&holder).await;
    drop(holder);
    // In the gap: the shard's lease has not run out, nobody is connected.
    discord.history_only_message(channel, &ada, "sent in the gap");
    openai.push(Turn::text(["two"]));
    wait_for_poller(&replicas.iter().collect::<Vec<_>>(), "discord:").await;
    assert_eq!(discord_replies(&discord, channel, 2).await, ["one", "two"]);
    // One more: anything answered twice would have shown by its answer.
    openai.push(Turn::text(["three"]));
    discord.dm(&ada, "after");
    assert_eq!(discord_replies(&discord, channel, 3).await, ["one", "two", "three"]);
    let asked = openai.requests().iter().filter(|request| request.body.to_string().contains("sent in the gap")).count();
    assert_eq!(asked, 2, "asked about it in its own run and seen once in the history of the next");
}

/// A Discord message that arrives while PostgreSQL restarts is held until the database
/// answers again, then answered: Discord does not deliver it again, so refusing it would
/// lose it.
#[tokio::test]
async fn a_discord_message_that_arrives_while_postgres_restarts_is_held_and_answered() {
    let Some(cluster) = ferry_fakes::PrivateCluster::start().await else { return };
    let discord = FakeDiscord::start("fake.discord.token").await.unwrap().without_rate_limits();
    let openai = FakeOpenAi::start().await.unwrap();
    // A lease long enough that the shard stays this replica's through the restart.
    let state = "[state]\nbackend = \"postgres\"\nlease_seconds = 12\nrenew_seconds = 4\n";
    let daemon =
        daemon_in(tempfile::tempdir().unwrap(), &discord_config(state, cluster.url(), &discord), &openai, "discord")
            .await;
    wait_for_poller(&[&daemon], "discord:").await;
    tokio::time::timeout(PATIENCE, discord.wait_for_session()).await.expect("a gateway session");

    cluster.stop().await;
    openai.push(Turn::text(["held, then answered"]));
    let (channel, _) = discord.dm(&DiscordUser::new(42, "ada"), "are you there?");
    tokio::time::sleep(Duration::from_secs(1)).await;
    cluster.start_again().await;
    assert_eq!(discord_replies(&discord, channel, 1).await, ["held, then answered"]);
    tokio::time::sleep(Duration::from_millis(500)).await;
    assert_eq!(
        discord.messages_in(channel).len(),
        1,
        "no refusal beside the answer: {:?}",
        discord.messages_in(channel)
    );
}

/// A database connection that goes silent (black-holed, no error) cannot hold up the lease
/// renewal: the replica says the database is unreachable within a renewal period, and past
/// the lease no longer counts itself the bot's poller.
#[tokio::test]
async fn a_replica_whose_database_goes_silent_says_so_and_lets_its_leases_go() {
    let Some(database) = test_database().await else { return };
    let upstream =
        format!("127.0.0.1:{}", database.url().rsplit_once(':').and_then(|(_, rest)| rest.split('/').next()).unwrap());
    let proxy = ferry_fakes::TcpProxy::start(upstream.parse().unwrap()).await.unwrap();
    let telegram = FakeTelegram::start(TOKEN).await.unwrap().without_rate_limits();
    let openai = FakeOpenAi::start().await.unwrap();
    let config = telegram_config(&proxy.rewrite_url(database.url()), &telegram);
    let daemon = daemon_in(tempfile::tempdir().unwrap(), &config, &openai, "telegram").await;
    wait_for_poller(&[&daemon], "telegram:").await;

    proxy.blackhole();
    let silent = tokio::time::Instant::now();
    let said = tokio::time::timeout(PATIENCE, async {
        while health(daemon.port).await["replica"]["database"] != "unreachable" {
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    })
    .await;
    assert!(said.is_ok(), "/healthz never said the database is unreachable");
    // A renewal period (1 s) to time out, plus the next one's start and the poll here.
    assert!(silent.elapsed() < Duration::from_secs(LEASE_SECONDS), "said after {:?}", silent.elapsed());
    tokio::time::sleep(Duration::from_secs(LEASE_SECONDS)).await;
    assert_eq!(poller_of(&[&daemon], "telegram:").await, None);

    proxy.restore();
    wait_for_poller(&[&daemon], "telegram:").await;
    openai.push(Turn::text(["back"]));
    telegram.private_message(42, "Ada", "are you there?");
    assert_eq!(telegram_replies(&telegram, 42, 1).await, ["back"]);
}

/// A message whose run is due while PostgreSQL is down waits for the database instead of
/// being dropped with a "could not load this conversation" notice: the second of two
/// messages, queued behind the first's run, opens its session a quiet window after that run
/// ends, and the database is stopped in that window.
#[tokio::test]
async fn a_run_due_while_postgres_is_down_waits_for_it_and_answers() {
    let Some(cluster) = ferry_fakes::PrivateCluster::start().await else { return };
    let telegram = FakeTelegram::start(TOKEN).await.unwrap().without_rate_limits();
    let openai = FakeOpenAi::start().await.unwrap();
    // A long lease, so the session stays this replica's through the outage, and a quiet
    // window long enough to stop the database in.
    let config = format!(
        "[state]\nbackend = \"postgres\"\npostgres_url = \"{}\"\nlease_seconds = 30\nrenew_seconds = 10\n\n\
         [channels.telegram]\nenabled = true\nbot_token = \"{TOKEN}\"\napi_url = \"{}\"\ndm_policy = \"open\"\n\
         allow_from = [\"*\"]\nstreaming = \"off\"\n\n[messages.queue]\ndebounce_ms = 3000\n",
        cluster.url(),
        telegram.url()
    );
    let daemon = daemon_in(tempfile::tempdir().unwrap(), &config, &openai, "telegram").await;
    wait_for_poller(&[&daemon], "telegram:").await;

    openai.push(Turn::Reply(Reply::text(["first ", "answer"]).with_chunk_delay(Duration::from_millis(800))));
    openai.push(Turn::text(["second answer"]));
    telegram.private_message(42, "Ada", "one");
    tokio::time::timeout(PATIENCE, openai.wait_for_request(0)).await.expect("the first run asked the model");
    telegram.private_message(42, "Ada", "two");
    tokio::time::timeout(PATIENCE, async {
        while inbound_handled(daemon.port, "telegram").await < 2 {
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    })
    .await
    .expect("the second message queued behind the first's run");
    // The first run is over (its message marked answered): the quiet window has begun.
    let client = cluster.connect().await;
    tokio::time::timeout(PATIENCE, async {
        let sql = "SELECT count(*) FROM inbound_journal WHERE answered_at IS NOT NULL";
        while client.query_one(sql, &[]).await.unwrap().get::<_, i64>(0) < 1 {
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    })
    .await
    .expect("the first message was answered");
    drop(client);
    cluster.stop().await;
    // The quiet window ends while the database is down: the run tries to open its session.
    tokio::time::sleep(Duration::from_secs(4)).await;
    assert_eq!(openai.requests().len(), 1, "nothing ran without its session");
    cluster.start_again().await;
    assert_eq!(telegram_replies(&telegram, 42, 2).await, ["first answer", "second answer"]);
    tokio::time::sleep(Duration::from_millis(500)).await;
    assert_eq!(telegram.messages_in(42).len(), 2, "no notice beside the answers: {:?}", telegram.messages_in(42));
}
