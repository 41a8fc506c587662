//! The PostgreSQL state backend end to end, on real PostgreSQL (`tests/postgres/setup`):
//! the `ferry gateway` binary answering from it and resuming after a crash on another home
//! directory, `ferry state migrate`, and `ferry state copy --from sqlite --to postgres`.
//! Each test skips without PostgreSQL unless `FERRY_REQUIRE_POSTGRES=1` (CI).

use std::process::{Command, Output, Stdio};
use std::sync::Arc;
use std::time::Duration;

use chrono::Utc;
use ferry::agent::{ChatMessage, Usage};
use ferry::config::{Config, ResetConfig};
use ferry::cron::manage::{CronJobs, NewJob};
use ferry::routing::clock::SystemClock;
use ferry::routing::pairing::{PairingRequest, PairingStore};
use ferry::state::inbound::{Accepted, MessageKey};
use ferry::state::jobs::{ChatScope, JobPayload, JobTarget};
use ferry::state::memory::{DocChunk, KeywordQuery, MemoryLimits, MemoryScope};
use ferry::state::postgres::PgBackend;
use ferry::state::{Database, Stores};
use ferry::types::schedule::When;
use ferry_fakes::{FakeOpenAi, FakeTelegram, Reply, Turn, test_database};

#[path = "common/daemon.rs"]
mod daemon;

use daemon::{PATIENCE, daemon_in, telegram_replies};

const TOKEN: &str = "123456:TEST-token";

fn postgres_config(url: &str, telegram: &FakeTelegram) -> String {
    format!(
        "[state]\nbackend = \"postgres\"\npostgres_url = \"{url}\"\nlease_seconds = 3\nrenew_seconds = 1\n\n[channels.telegram]\nenabled = true\n\
         bot_token = \"{TOKEN}\"\napi_url = \"{}\"\ndm_policy = \"open\"\nallow_from = [\"*\"]\n",
        telegram.url()
    )
}

async fn postgres_stores(url: &str) -> Stores {
    let backend = PgBackend::connect(url, 2).await.expect("connect");
    backend.migrate().await.expect("migrate");
    Stores::postgres(&backend)
}

/// A message answered from PostgreSQL; then a message whose run is cut by `kill -9` is
/// answered by a gateway started in another home directory (another machine, as far as
/// it knows), because the journal, the session and its transcript live in the database. The
/// dead gateway's leases (the session, the bot's poller) lapse after `lease_seconds`.
#[tokio::test]
async fn a_gateway_on_postgres_answers_and_another_resumes_what_a_killed_one_owed() {
    let Some(database) = test_database().await else { return };
    let telegram = FakeTelegram::start(TOKEN).await.unwrap().without_rate_limits();
    let openai = FakeOpenAi::start().await.unwrap();
    openai.push(Turn::text(["first answer"]));
    let config = postgres_config(database.url(), &telegram);
    let first = daemon_in(tempfile::tempdir().unwrap(), &config, &openai, "telegram").await;
    telegram.private_message(42, "Ada", "one");
    assert_eq!(telegram_replies(&telegram, 42, 1).await, ["first answer"]);

    // The second run streams one piece and hangs; the gateway dies under it.
    openai.push(Turn::Stall { reply: Reply::text(["partial ", "never finished"]), after_deltas: 1 });
    telegram.private_message(42, "Ada", "two");
    openai.wait_for_request(1).await;
    drop(first);

    openai.push(Turn::text(["second answer"]));
    let _second = daemon_in(tempfile::tempdir().unwrap(), &config, &openai, "telegram").await;
    tokio::time::timeout(PATIENCE, async {
        while !telegram.messages_in(42).iter().any(|message| message.visible_text.trim() == "second answer") {
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    })
    .await
    .unwrap_or_else(|_| panic!("the resumed reply: {:?}", telegram.messages_in(42)));
    let resumed = openai.wait_for_request(2).await;
    assert!(resumed.body.to_string().contains("first answer"), "the resumed run sees the conversation so far");

    let stores = postgres_stores(database.url()).await;
    tokio::time::timeout(PATIENCE, async {
        while stores.inbound.pending_count().await.unwrap() > 0 {
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    })
    .await
    .expect("every message answered");
    let sessions = stores.sessions.list(10).await.unwrap();
    assert_eq!(sessions.len(), 1, "{sessions:?}");
    let history = stores.sessions.history(&sessions[0].session_id).await.unwrap();
    assert_eq!(history.len(), 4, "both turns are in the transcript: {history:?}");
}

fn ferry(args: &[&str], home: &std::path::Path, config: &str, database_url: &str) -> Output {
    std::fs::write(home.join("ferry.toml"), config).unwrap();
    Command::new(env!("CARGO_BIN_EXE_ferry"))
        .args(args)
        .env_clear()
        .env("HOME", home)
        .env("FERRY_DATABASE_URL", database_url)
        .current_dir(home)
        .stdin(Stdio::null())
        .output()
        .expect("run ferry")
}

fn text(bytes: &[u8]) -> String {
    String::from_utf8_lossy(bytes).into_owned()
}

#[tokio::test]
async fn state_migrate_says_where_the_schema_stands() {
    let Some(database) = test_database().await else { return };
    let home = tempfile::tempdir().unwrap();
    let config = "[state]\nbackend = \"postgres\"\n";
    let first = ferry(&["state", "migrate"], home.path(), config, database.url());
    assert!(first.status.success(), "{}", text(&first.stderr));
    assert_eq!(text(&first.stdout), "PostgreSQL: schema migrated from version 0 to 5\n");
    let again = ferry(&["state", "migrate"], home.path(), config, database.url());
    assert_eq!(text(&again.stdout), "PostgreSQL: schema already at version 5\n");
    let password = "hunter2-in-the-url";
    let unreachable = format!("postgres://ferry:{password}@127.0.0.1:1/nowhere");
    let refused = ferry(&["state", "migrate"], home.path(), config, &unreachable);
    assert!(!refused.status.success());
    assert!(text(&refused.stderr).contains("cannot reach PostgreSQL"), "{}", text(&refused.stderr));
    assert!(!text(&refused.stderr).contains(password), "the password leaked: {}", text(&refused.stderr));
}

/// An install's SQLite state moves into PostgreSQL whole: sessions with their transcripts,
/// approvals, cooldowns, the messages still owed an answer with their delivery records, and
/// what was seen (a redelivery after the move is still a duplicate).
#[tokio::test]
async fn state_copy_moves_a_sqlite_install_into_postgres() {
    let Some(database) = test_database().await else { return };
    let home = tempfile::tempdir().unwrap();
    let state_dir = home.path().join("state");
    let sqlite = Database::open(&state_dir).await.unwrap();
    let local = Stores::sqlite(&sqlite);
    let reset = ResetConfig::default();
    let opened = local.sessions.open_run("agent:main:main", Utc::now(), &reset, "run-1").await.unwrap();
    let said = [ChatMessage::user("hello"), ChatMessage::assistant("hi there", vec![])];
    local
        .sessions
        .close_run("agent:main:main", "run-1", &said, Usage { input_tokens: 7, output_tokens: 3 })
        .await
        .unwrap();
    let pairing = PairingStore::new(local.pairing.clone(), Arc::new(SystemClock));
    let PairingRequest::Issued(code) = pairing.request("telegram", "42", Some("Ada")).await.unwrap() else {
        panic!("a new code")
    };
    pairing.approve("telegram", &code.code).await.unwrap();
    pairing.request("telegram", "77", None).await.unwrap();
    let now = Utc::now().timestamp_millis();
    let key = MessageKey { channel: "telegram", account_id: "default", chat_id: "42", thread_id: "", message_id: "9" };
    let entry = Accepted {
        session_key: "agent:main:main".into(),
        prompt: "still owed".into(),
        message: "{}".into(),
        enqueued_at: now,
    };
    local.inbound.accept(&key, now, now - 60_000, &entry).await.unwrap().unwrap();
    let answered_key = MessageKey { message_id: "8", ..key };
    let answered = local.inbound.accept(&answered_key, now, now - 60_000, &entry).await.unwrap().unwrap();
    local.inbound.answered(&[answered]).await.unwrap();
    let owed = local.inbound.unanswered().await.unwrap().messages[0].seq;
    local.inbound.record_delivery(&[owed], "{\"preview\":5}".into(), false).await.unwrap();
    let jobs = CronJobs::new(local.jobs.clone(), Arc::new(Config::default()));
    let reminder = NewJob {
        agent_id: "main".into(),
        when: When::Cron("0 8 * * 1-5".into()),
        tz: Some("Europe/Berlin".into()),
        payload: JobPayload::Text("standup".into()),
        name: None,
        owner: "42".into(),
        created_by: "user",
        scope: Some(ChatScope { channel: "telegram".into(), account_id: "default".into(), chat_id: "42".into() }),
        target: JobTarget {
            channel: "telegram".into(),
            account_id: "default".into(),
            chat_id: "42".into(),
            chat_kind: "direct".into(),
            thread_id: None,
        },
        session_key: None,
    };
    let job = jobs.create(reminder, Utc::now()).await.unwrap().job;
    let memory = MemoryScope::new("main", "private:telegram:42");
    let fact = DocChunk {
        start_line: 1,
        end_line: 1,
        text: "Ada keeps bees".into(),
        index_text: "ada keeps bees".into(),
        hash: "h1".into(),
    };
    let limits = MemoryLimits { doc_bytes: 1000, scope_bytes: 1000 };
    local.memory.put(&memory, "MEMORY.md", "Ada keeps bees", &[fact], None, limits).await.unwrap();
    local.memory.put_embeddings("small", &[("h1".into(), vec![0.25, -0.5])]).await.unwrap();
    drop((local, jobs));
    sqlite.close().await;

    let config = format!("state_dir = \"{}\"\n", state_dir.display());
    let copied =
        ferry(&["state", "copy", "--from", "sqlite", "--to", "postgres"], home.path(), &config, database.url());
    assert!(copied.status.success(), "{}", text(&copied.stderr));
    let report = text(&copied.stdout);
    for line in [
        "1 sessions",
        "2 transcript entries",
        "1 approved senders",
        "1 pending pairing codes",
        "1 messages waiting",
        "1 delivery records",
        "2 recently seen",
        "1 scheduled jobs",
        "1 memory documents",
        "1 memory search chunks",
    ] {
        assert!(report.lines().any(|shown| shown.trim_start().starts_with(line)), "{line:?} in {report}");
    }
    assert!(report.contains("set state.backend = \"postgres\""), "{report}");

    let check = async || {
        let remote = postgres_stores(database.url()).await;
        let session = remote.sessions.get("agent:main:main").await.unwrap().expect("the session");
        assert_eq!(session.session_id, opened.resolved.session.session_id);
        assert_eq!((session.usage.input_tokens, session.usage.output_tokens), (7, 3));
        assert_eq!(remote.sessions.history(&session.session_id).await.unwrap(), said);
        assert!(
            PairingStore::new(remote.pairing.clone(), Arc::new(SystemClock))
                .is_approved("telegram", "42")
                .await
                .unwrap()
        );
        let left = remote.inbound.unanswered().await.unwrap();
        assert_eq!(left.messages.iter().map(|message| message.seq).collect::<Vec<_>>(), [owed]);
        assert_eq!(left.messages[0].entry.prompt, "still owed");
        assert_eq!(left.deliveries.len(), 1);
        assert!(!remote.inbound.record_seen(&answered_key, now + 1, now - 60_000).await.unwrap(), "still a duplicate");
        let next = remote.inbound.accept(&MessageKey { message_id: "10", ..key }, now, now - 60_000, &entry).await;
        assert!(next.unwrap().unwrap() > answered, "ids continue after the copied ones");
        assert_eq!(remote.jobs.get(&job.id).await.unwrap().as_ref(), Some(&job), "the scheduled job, as it was");
        let doc = remote.memory.get(&memory, "MEMORY.md").await.unwrap().expect("the memory document");
        assert_eq!((doc.content.as_str(), doc.version), ("Ada keeps bees", 1));
        let query = KeywordQuery { fts5: "\"bees\"".into(), tsquery: "'bees'".into() };
        let hits = remote.memory.search(&memory, &query, 5).await.unwrap();
        assert_eq!(hits.iter().map(|hit| hit.text.as_str()).collect::<Vec<_>>(), ["Ada keeps bees"], "indexed again");
        let vectors = remote.memory.vectors(&memory, "small").await.unwrap();
        assert_eq!(vectors.iter().map(|chunk| chunk.vector.clone()).collect::<Vec<_>>(), [vec![0.25, -0.5]]);
        let totals = remote.memory.scopes(None).await.unwrap();
        assert_eq!(totals.iter().map(|scope| (scope.docs, scope.bytes)).collect::<Vec<_>>(), [(1, 14)]);
    };
    check().await;

    let refused =
        ferry(&["state", "copy", "--from", "sqlite", "--to", "postgres"], home.path(), &config, database.url());
    assert!(!refused.status.success());
    assert!(text(&refused.stderr).contains("already holds Ferry state"), "{}", text(&refused.stderr));
    assert!(text(&refused.stderr).contains("--force"), "{}", text(&refused.stderr));
    let forced = ferry(
        &["state", "copy", "--from", "sqlite", "--to", "postgres", "--force"],
        home.path(),
        &config,
        database.url(),
    );
    assert!(forced.status.success(), "{}", text(&forced.stderr));
    check().await;
}

/// A note an older Ferry stored on PostgreSQL, indexed with its accents (PostgreSQL's
/// `simple` configuration folds none), is found by `ferry memory search` without them: the
/// chunks are indexed again as this build normalizes words, once.
#[tokio::test]
async fn memory_search_finds_without_accents_a_note_an_older_build_indexed_with_them() {
    let Some(database) = test_database().await else { return };
    let stores = postgres_stores(database.url()).await;
    let scope = MemoryScope::new("main", "private:telegram:42");
    let note = "Ada's café is in Lisbon";
    let indexed_by_version_1 = "ada s café is in lisbon".to_owned();
    let chunk =
        DocChunk { start_line: 1, end_line: 1, text: note.into(), index_text: indexed_by_version_1, hash: "h".into() };
    let limits = MemoryLimits { doc_bytes: 50_000, scope_bytes: 5_000_000 };
    stores.memory.put(&scope, "MEMORY.md", note, &[chunk], None, limits).await.unwrap();
    let cafe = KeywordQuery { fts5: "\"cafe\"".into(), tsquery: "'cafe'".into() };
    assert!(stores.memory.search(&scope, &cafe, 5).await.unwrap().is_empty(), "not found before");

    let home = tempfile::tempdir().unwrap();
    let config = "[state]\nbackend = \"postgres\"\n";
    let args = ["memory", "search", "CAFE", "--scope", "private:telegram:42"];
    let found = ferry(&args, home.path(), config, database.url());
    assert!(found.status.success(), "{}", text(&found.stderr));
    assert!(text(&found.stdout).contains("MEMORY.md:1-1  Ada's café is in Lisbon"), "{}", text(&found.stdout));
    assert_eq!(stores.memory.search(&scope, &cafe, 5).await.unwrap().len(), 1, "indexed again in the database");
    assert_eq!(stores.memory.reindex(2, str::to_owned).await.unwrap(), 0, "recorded as done");
}
