//! The inbound path end to end: an in-memory channel named like a real platform, the
//! dispatcher (routing, commands, queue, sessions) and real agent runs against the fake
//! OpenAI server.

#[path = "common/runner.rs"]
mod runner;
use std::sync::Arc;
use std::time::Duration;

use ferry::agent::{AgentRunner, RunnerParts};
use ferry::channel::memory::{MemoryChannel, Operation, OperationKind};
use ferry::channel::{AckOutcome, AckReceiver, ChannelError, ChatKind, ChatRef, InboundMessage};
use ferry::channels::ChannelRegistry;
use ferry::config::{Config, DmPolicy, QueueMode};
use ferry::dispatch::{Dispatcher, DispatcherParts};
use ferry::hooks::{Hooks, HooksBuilder};
use ferry::queue::QueueJournal;
use ferry::routing::{PairingStore, SystemClock, ThreadLabel, ThreadLabels};
use ferry::state::{Database, Stores};
use ferry_fakes::{FakeOpenAi, Reply, ToolCall, Turn};
use runner::fake_model_runner;

#[path = "inbound/hooks.rs"]
mod hooks;

#[path = "inbound/executor.rs"]
mod executor;

/// Generous bound for waiting on explicit signals; never a measurement.
const PATIENCE: Duration = Duration::from_secs(20);
/// The session of DMs from user 42 (the default `dm_scope`, per channel and peer).
const DM_42: &str = "agent:main:telegram:direct:42";

struct World {
    fake: FakeOpenAi,
    channel: Arc<MemoryChannel>,
    dispatcher: Dispatcher,
    database: Database,
    _state: tempfile::TempDir,
    _workspace: tempfile::TempDir,
}

fn open_dms() -> Config {
    let mut config = Config::default();
    config.channels.telegram.dm_policy = DmPolicy::Open;
    config.channels.telegram.allow_from = vec!["*".into()];
    config.messages.queue.debounce_ms = 100;
    config
}

impl World {
    async fn new(config: Config) -> Self {
        let fake = FakeOpenAi::start().await.unwrap();
        let state = tempfile::tempdir().unwrap();
        let database = Database::open(state.path()).await.unwrap();
        Self::with(config, fake, state, database).await
    }

    async fn with(config: Config, fake: FakeOpenAi, state: tempfile::TempDir, database: Database) -> Self {
        Self::with_hooks(config, fake, state, database, |hooks| hooks).await
    }

    /// Open DMs and a fresh fake model on the state directory `state_path`, as a process that
    /// is about to die mid-run (the caller's runtime ends, and the world with it).
    async fn doomed(state_path: &std::path::Path) -> Self {
        let fake = FakeOpenAi::start().await.unwrap();
        let database = Database::open(state_path).await.unwrap();
        Self::with(open_dms(), fake, tempfile::tempdir().unwrap(), database).await
    }

    /// A world whose hooks are `[hooks]` from `config` plus the plugins `plugins` registers.
    async fn hooked(config: Config, plugins: impl FnOnce(HooksBuilder) -> HooksBuilder) -> Self {
        let fake = FakeOpenAi::start().await.unwrap();
        let state = tempfile::tempdir().unwrap();
        let database = Database::open(state.path()).await.unwrap();
        Self::with_hooks(config, fake, state, database, plugins).await
    }

    async fn with_hooks(
        config: Config,
        fake: FakeOpenAi,
        state: tempfile::TempDir,
        database: Database,
        plugins: impl FnOnce(HooksBuilder) -> HooksBuilder,
    ) -> Self {
        // Logs show in a failing test's output.
        let _ = tracing_subscriber::fmt()
            .with_test_writer()
            .with_env_filter(std::env::var("RUST_LOG").unwrap_or("ferry=info".into()))
            .try_init();
        let workspace = tempfile::tempdir().unwrap();
        let channels = ChannelRegistry::new();
        let runner = AgentRunner::new(RunnerParts {
            hooks: plugins(Hooks::from_config(&config.hooks)).build(),
            media: None,
            ..fake_model_runner(&fake.url(), workspace.path(), &channels)
        });
        let dispatcher = Dispatcher::new(DispatcherParts {
            config: Arc::new(config),
            stores: Stores::sqlite(&database),
            agents: runner.into(),
            channels,
            clock: Arc::new(SystemClock),
            thread_labels: ThreadLabels::new().with("telegram", ThreadLabel::Topic),
        })
        .unwrap();
        let channel = Arc::new(MemoryChannel::new("telegram", "default"));
        dispatcher.attach(channel.clone()).await.unwrap();
        Self { fake, channel, dispatcher, database, _state: state, _workspace: workspace }
    }

    fn workspace(&self) -> &std::path::Path {
        self._workspace.path()
    }

    fn dm(&self, from: &str, text: &str) -> InboundMessage {
        self.channel.message(ChatRef::new(ChatKind::Direct, from), from, text)
    }

    fn send(&self, message: InboundMessage) -> AckReceiver {
        self.channel.inject(message)
    }

    /// Waits until the chat shows `count` messages and returns their texts.
    async fn replies(&self, count: usize) -> Vec<String> {
        tokio::time::timeout(PATIENCE, async {
            loop {
                let texts = self.channel.sent_texts();
                if texts.len() >= count {
                    return texts;
                }
                tokio::time::sleep(Duration::from_millis(10)).await;
            }
        })
        .await
        .unwrap_or_else(|_| panic!("expected {count} replies, got {:?}", self.channel.sent_texts()))
    }

    async fn request(&self, index: usize) -> serde_json::Value {
        tokio::time::timeout(PATIENCE, self.fake.wait_for_request(index)).await.expect("model request").body
    }

    /// What the user sees now: the messages' texts, edits applied, deletions gone.
    fn shown(&self) -> Vec<String> {
        self.channel.visible_messages().into_iter().map(|message| message.text).collect()
    }

    /// Waits until the user sees a message `wanted` holds for.
    async fn until_shown(&self, wanted: impl Fn(&str) -> bool) {
        tokio::time::timeout(PATIENCE, async {
            while !self.shown().iter().any(|text| wanted(text)) {
                tokio::time::sleep(Duration::from_millis(10)).await;
            }
        })
        .await
        .unwrap_or_else(|_| panic!("not shown; the chat shows {:?}", self.shown()));
    }

    /// The last user message of the model's latest request.
    async fn last_asked(&self) -> String {
        let last = self.fake.requests().len().saturating_sub(1);
        last_user_content(&self.request(last).await)
    }

    async fn journaled(&self) -> usize {
        QueueJournal::new(self.database.inbound_store()).len().await.expect("journal")
    }
}

fn last_user_content(body: &serde_json::Value) -> String {
    let messages = body["messages"].as_array().unwrap();
    messages.iter().rev().find(|m| m["role"] == "user").unwrap()["content"].as_str().unwrap().to_owned()
}

#[tokio::test]
async fn a_direct_message_is_answered_and_acknowledged() {
    let world = World::new(open_dms()).await;
    world.fake.push(Turn::text(["Hello ", "Ada!"]));
    let ack = world.send(world.dm("42", "hi there"));
    assert_eq!(ack.outcome().await, AckOutcome::Accepted);
    assert_eq!(world.replies(1).await, ["Hello Ada!"]);
    assert_eq!(last_user_content(&world.request(0).await), "hi there");
    tokio::time::sleep(Duration::from_millis(50)).await;
    assert_eq!(world.journaled().await, 0, "answered messages leave the journal");
    let typed =
        world.channel.operations().iter().any(|op| matches!(op, ferry::channel::memory::Operation::Typing { .. }));
    assert!(!typed, "a reply ready at once is sent without typing first");
}

/// A run that works a while shows typing: the reply comes a second after the message.
#[tokio::test]
async fn a_run_that_works_a_while_shows_typing() {
    let world = World::new(open_dms()).await;
    world.fake.push(Turn::Reply(Reply::text(["Let me ", "think."]).with_chunk_delay(Duration::from_secs(1))));
    world.send(world.dm("42", "a hard one"));
    assert_eq!(world.replies(1).await, ["Let me think."]);
    let typed =
        world.channel.operations().iter().any(|op| matches!(op, ferry::channel::memory::Operation::Typing { .. }));
    assert!(typed, "typing was shown while the run worked");
}

#[tokio::test]
async fn each_inbound_message_counts_once_under_what_became_of_it() {
    let counted = |outcome: &str| {
        let series = format!(r#"ferry_inbound_messages_total{{channel="telegram",outcome="{outcome}"}} "#);
        let text = ferry::metrics::render();
        text.lines().find_map(|line| line.strip_prefix(&series)?.parse::<f64>().ok()).unwrap_or(0.0)
    };
    let outcomes = ["run", "duplicate", "command"];
    let before = outcomes.map(counted);
    let world = World::new(open_dms()).await;
    world.fake.push(Turn::text(["once"]));
    let message = world.dm("42", "hi");
    world.send(message.clone());
    world.replies(1).await;
    // One chat's messages are handled in order: once the duplicate is acknowledged, the
    // first message was counted too.
    assert_eq!(world.send(message).outcome().await, AckOutcome::Accepted);
    world.send(world.dm("42", "/status"));
    world.replies(2).await;

    // Tests beside this one count telegram messages too: at least ours are there.
    let after = outcomes.map(counted);
    for ((outcome, after), before) in outcomes.iter().zip(after).zip(before) {
        assert!(after - before >= 1.0, "{outcome}: {before} -> {after}");
    }
}

#[tokio::test]
async fn the_session_remembers_the_conversation() {
    let world = World::new(open_dms()).await;
    world.fake.push(Turn::text(["First answer."])).push(Turn::text(["Second answer."]));
    world.send(world.dm("42", "first question"));
    world.replies(1).await;
    world.send(world.dm("42", "second question"));
    world.replies(2).await;
    let roles: Vec<String> = world.request(1).await["messages"]
        .as_array()
        .unwrap()
        .iter()
        .map(|m| m["role"].as_str().unwrap().to_owned())
        .collect();
    assert_eq!(roles, ["system", "user", "assistant", "user"]);
}

#[tokio::test]
async fn collect_batches_messages_that_arrive_during_a_run() {
    let world = World::new(open_dms()).await;
    world.fake.push(Reply::text(["Working ", "on ", "it."]).with_chunk_delay(Duration::from_millis(300)));
    world.fake.push(Turn::text(["All three answered."]));
    world.send(world.dm("42", "start"));
    world.request(0).await;
    for text in ["one", "two", "three"] {
        world.send(world.dm("42", text));
    }
    assert_eq!(world.replies(2).await, ["Working on it.", "All three answered."]);
    assert_eq!(
        last_user_content(&world.request(1).await),
        "[Queued messages while agent was busy]\n---\nQueued #1\none\n---\nQueued #2\ntwo\n---\nQueued #3\nthree"
    );
    assert_eq!(world.fake.requests().len(), 2, "one follow-up run, not three");
}

#[tokio::test]
async fn stop_aborts_a_long_run_at_once_and_clears_the_queue() {
    let world = World::new(open_dms()).await;
    world.fake.push(Turn::stall(Reply::text(["Thinking very hard", "never sent"]), 1));
    world.send(world.dm("42", "write me a novel"));
    world.request(0).await;
    world.send(world.dm("42", "and a poem"));
    world.send(world.dm("42", "stop"));
    assert_eq!(world.replies(1).await, ["⏹️ Stopped, and cleared 1 waiting message(s)."]);
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert_eq!(world.channel.sent_texts().len(), 1, "the aborted run sends nothing");
    assert_eq!(world.fake.requests().len(), 1, "the queued message never ran");
    assert_eq!(world.journaled().await, 0);
}

#[tokio::test]
async fn queue_override_applies_to_one_session_only() {
    let world = World::new(open_dms()).await;
    world.send(world.dm("42", "/queue followup debounce:50ms"));
    assert_eq!(
        world.replies(1).await[0],
        "Queue for this conversation: followup (debounce 50 ms, cap 20, drop summarize)"
    );
    let mut config = open_dms();
    config.session.dm_scope = ferry::config::DmScope::PerPeer;
    let per_peer = World::new(config).await;
    per_peer.send(per_peer.dm("1", "/queue steer"));
    per_peer.replies(1).await;
    per_peer.send(per_peer.dm("2", "/queue"));
    let texts = per_peer.replies(2).await;
    assert!(texts[1].starts_with("collect"), "another peer keeps the default: {texts:?}");
}

#[tokio::test]
async fn a_queue_override_outlives_a_restart() {
    let world = World::new(open_dms()).await;
    world.send(world.dm("42", "/queue followup cap:5"));
    world.replies(1).await;
    let World { fake, database, _state, .. } = world;
    let restarted = World::with(open_dms(), fake, _state, database).await;
    // The platform numbers messages on; a fresh test channel would start over.
    let later = |text| InboundMessage { message_id: format!("later-{text}"), ..restarted.dm("42", text) };
    restarted.send(later("/queue"));
    assert_eq!(restarted.replies(1).await[0], "followup (debounce 100 ms, cap 5, drop summarize)");
    restarted.send(later("/queue reset"));
    assert_eq!(
        restarted.replies(2).await[1],
        "Queue for this conversation: collect (debounce 100 ms, cap 20, drop summarize)"
    );
}

#[tokio::test]
async fn an_unknown_sender_gets_a_pairing_code_and_runs_after_approval() {
    let mut config = open_dms();
    config.channels.telegram.dm_policy = DmPolicy::Pairing;
    config.channels.telegram.allow_from = vec![];
    let world = World::new(config).await;
    world.send(world.dm("77", "hello?"));
    let reply = world.replies(1).await.remove(0);
    let code = reply
        .split(|c: char| !c.is_ascii_alphanumeric())
        .find(|word| word.len() == 8 && word.chars().all(|c| c.is_ascii_uppercase() || c.is_ascii_digit()))
        .unwrap_or_else(|| panic!("no code in {reply:?}"))
        .to_owned();
    assert!(world.fake.requests().is_empty(), "no run before approval");

    PairingStore::new(Stores::sqlite(&world.database).pairing, Arc::new(SystemClock))
        .approve("telegram", &code)
        .await
        .unwrap();
    world.fake.push(Turn::text(["Welcome!"]));
    world.send(world.dm("77", "hello again"));
    assert_eq!(world.replies(2).await[1], "Welcome!");
}

#[tokio::test]
async fn a_redelivered_message_runs_once_also_after_a_restart() {
    let world = World::new(open_dms()).await;
    world.fake.push(Turn::text(["once"]));
    let message = world.dm("42", "hi");
    world.send(message.clone());
    world.replies(1).await;
    assert_eq!(world.send(message.clone()).outcome().await, AckOutcome::Accepted, "a duplicate is acknowledged");

    let World { fake, database, _state, .. } = world;
    let restarted = World::with(open_dms(), fake, _state, database).await;
    assert_eq!(restarted.send(message).outcome().await, AckOutcome::Accepted);
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert!(restarted.channel.sent_texts().is_empty());
    assert_eq!(restarted.fake.requests().len(), 1, "the model ran once in all");
}

#[tokio::test]
async fn group_messages_without_a_mention_become_context_for_the_next_mention() {
    let mut config = open_dms();
    config.channels.telegram.groups.insert("-100".into(), Default::default());
    let world = World::new(config).await;
    world.fake.push(Turn::text(["Noted."]));
    let group = ChatRef::new(ChatKind::Group, "-100");
    let mut chatter = world.channel.message(group.clone(), "5", "lunch at noon?");
    chatter.sender.name = Some("Bea".into());
    world.send(chatter);
    let mut asked = world.channel.message(group, "6", "@ferry what did Bea say?");
    asked.sender.name = Some("Cy".into());
    asked.mentions_bot = true;
    world.send(asked);
    world.replies(1).await;
    let prompt = last_user_content(&world.request(0).await);
    assert!(prompt.starts_with("[Chat messages since your last reply - for context]\nBea: lunch at noon?"), "{prompt}");
    assert!(prompt.contains("[Current message - respond to this]\nCy: @ferry what did Bea say?"), "{prompt}");
}

#[tokio::test]
async fn a_forum_topic_is_its_own_session_and_is_answered_in_its_topic() {
    let mut config = open_dms();
    config
        .channels
        .telegram
        .groups
        .insert("-100".into(), ferry::config::GroupConfig { require_mention: Some(false), ..Default::default() });
    let world = World::new(config).await;
    world.fake.push(Turn::text(["Topic reply."]));
    let mut message = world.channel.message(ChatRef::new(ChatKind::Group, "-100"), "5", "hello topic");
    message.thread_id = Some("7".into());
    world.send(message);
    world.replies(1).await;
    let visible = world.channel.visible_messages();
    assert_eq!(visible[0].target.thread_id.as_deref(), Some("7"));
    let sessions = world.dispatcher.store().list(10).await.unwrap();
    assert_eq!(sessions[0].key, "agent:main:telegram:group:-100:topic:7");
}

#[tokio::test]
async fn a_message_that_cannot_be_journaled_is_left_for_redelivery_and_the_sender_told() {
    let world = World::new(open_dms()).await;
    // The disk is full for one write.
    world.database.inbound_log().fail_next_appends(1);
    let message = world.dm("42", "important");
    assert_eq!(world.send(message.clone()).outcome().await, AckOutcome::Abandoned);
    assert!(world.replies(1).await[0].contains("could not take your message"));

    world.fake.push(Turn::text(["Got it now."]));
    assert_eq!(
        world.send(message).outcome().await,
        AckOutcome::Accepted,
        "the redelivery is not taken for a duplicate"
    );
    assert_eq!(world.replies(2).await[1], "Got it now.");
}

#[tokio::test]
async fn interrupt_mode_aborts_and_answers_the_newest() {
    let mut config = open_dms();
    config.messages.queue.mode = QueueMode::Interrupt;
    let world = World::new(config).await;
    world.fake.push(Turn::stall(Reply::text(["slow", "never"]), 1));
    world.fake.push(Turn::text(["Answering the new one."]));
    world.send(world.dm("42", "old question"));
    world.request(0).await;
    world.send(world.dm("42", "new question"));
    assert_eq!(world.replies(1).await, ["Answering the new one."]);
    assert_eq!(last_user_content(&world.request(1).await), "new question");
}

#[test]
fn queued_messages_survive_a_restart() {
    let state = tempfile::tempdir().unwrap();
    let state_path = state.path().to_owned();
    // First process: a run hangs, two messages queue behind it, then the process dies.
    let first = tokio::runtime::Runtime::new().unwrap();
    let fake_url = first.block_on(async {
        let world = World::doomed(&state_path).await;
        world.fake.push(Turn::stall(Reply::text(["never finished"]), 0));
        world.send(world.dm("42", "first"));
        world.request(0).await;
        world.send(world.dm("42", "second"));
        world.send(world.dm("42", "third"));
        tokio::time::timeout(PATIENCE, async {
            while world.journaled().await < 3 {
                tokio::time::sleep(Duration::from_millis(10)).await;
            }
        })
        .await
        .unwrap();
        world.fake.url()
    });
    drop(first);
    let _ = fake_url;

    // Second process: everything accepted and unanswered runs, as one collected batch.
    let second = tokio::runtime::Runtime::new().unwrap();
    second.block_on(async {
        let fake = FakeOpenAi::start().await.unwrap();
        fake.push(Turn::text(["Sorry for the wait."]));
        let world = World::with(open_dms(), fake, state, Database::open(&state_path).await.unwrap()).await;
        assert_eq!(world.dispatcher.restore().await.unwrap(), 3);
        assert_eq!(world.replies(1).await, ["Sorry for the wait."]);
        assert_eq!(
            last_user_content(&world.request(0).await),
            "[Queued messages while agent was busy]\n---\nQueued #1\nfirst\n---\nQueued #2\nsecond\n---\nQueued #3\nthird"
        );
    });
}

#[test]
fn a_message_accepted_while_left_overs_are_restored_runs_once() {
    let state = tempfile::tempdir().unwrap();
    let state_path = state.path().to_owned();
    // First process: a run hangs on the first message and the process dies.
    let first = tokio::runtime::Runtime::new().unwrap();
    first.block_on(async {
        let world = World::doomed(&state_path).await;
        world.fake.push(Turn::stall(Reply::text(["never finished"]), 0));
        world.send(world.dm("42", "left over"));
        world.request(0).await;
    });
    drop(first);

    // Second process: the left-overs are read, then (as when a channel starts and delivers at
    // once) a new message is accepted before they are resumed. Each runs exactly once.
    let second = tokio::runtime::Runtime::new().unwrap();
    second.block_on(async {
        let fake = FakeOpenAi::start().await.unwrap();
        fake.push(Turn::text(["First answer."]));
        fake.push(Turn::text(["Second answer."]));
        // Per-peer DMs: the two messages are two sessions, answered side by side.
        let mut config = open_dms();
        config.session.dm_scope = ferry::config::DmScope::PerPeer;
        let world = World::with(config, fake, state, Database::open(&state_path).await.unwrap()).await;
        let left_over = world.dispatcher.left_over().await.unwrap();
        assert_eq!(world.send(world.dm("43", "arrived at start-up")).outcome().await, AckOutcome::Accepted);
        assert_eq!(world.dispatcher.resume(left_over).await, 1, "only what the last process left");
        let mut replies = world.replies(2).await;
        replies.sort();
        assert_eq!(replies, ["First answer.", "Second answer."]);
        world.fake.push(Turn::text(["pong"]));
        world.send(world.dm("43", "ping"));
        assert_eq!(world.replies(3).await.len(), 3, "nothing answered twice");
        let asked: Vec<String> = world.fake.requests().iter().map(|r| last_user_content(&r.body)).collect();
        assert_eq!(asked.iter().filter(|a| a.contains("arrived at start-up")).count(), 1, "{asked:?}");
        assert_eq!(asked.iter().filter(|a| a.contains("left over")).count(), 1, "{asked:?}");
    });
}

#[tokio::test]
async fn steer_mode_feeds_a_message_into_the_streaming_run_without_a_second_run() {
    let mut config = open_dms();
    config.messages.queue.mode = QueueMode::Steer;
    let world = World::new(config).await;
    world.fake.push(Reply::text(["Here ", "is ", "the ", "plan."]).with_chunk_delay(Duration::from_millis(300)));
    world.fake.push(Turn::text(["Sure, in French then."]));
    world.send(world.dm("42", "make a plan"));
    world.request(0).await;
    // Steer once the run streams (the reply takes ~1 s to stream in full).
    tokio::time::timeout(PATIENCE, async {
        while !world.dispatcher.scheduler().status(DM_42).streaming {
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    })
    .await
    .unwrap();
    world.send(world.dm("42", "in French please"));
    assert_eq!(world.replies(2).await, ["Here is the plan.", "Sure, in French then."]);
    let second = world.request(1).await;
    let contents: Vec<&str> =
        second["messages"].as_array().unwrap().iter().filter_map(|m| m["content"].as_str()).collect();
    assert_eq!(&contents[1..], ["make a plan", "Here is the plan.", "in French please"]);
    assert_eq!(world.dispatcher.scheduler().status(DM_42).queued, 0, "steered, not queued");
}

#[tokio::test]
async fn a_message_refused_by_a_full_queue_is_told_so() {
    let mut config = open_dms();
    config.messages.queue.cap = 1;
    config.messages.queue.drop = ferry::config::DropPolicy::New;
    let world = World::new(config).await;
    world.fake.push(Turn::stall(Reply::text(["busy", "never"]), 1));
    world.send(world.dm("42", "long job"));
    world.request(0).await;
    world.send(world.dm("42", "queued"));
    world.send(world.dm("42", "one too many"));
    let replies = world.replies(1).await;
    assert!(replies[0].contains("was not queued"), "{replies:?}");
    assert_eq!(world.dispatcher.scheduler().status(DM_42).queued, 1);
    let key = world.channel.operations().into_iter().find_map(|op| match op {
        Operation::Sent { message, .. } => message.idempotency_key,
        _ => None,
    });
    assert!(key.is_some_and(|key| key.starts_with("notice:telegram:")), "a retried notice is not posted twice");
}

/// The texts sent so far, each with the chat it went to.
fn sent_to(world: &World) -> Vec<(String, String)> {
    world
        .channel
        .operations()
        .into_iter()
        .filter_map(|op| match op {
            Operation::Sent { message, .. } => Some((message.target.chat.id, message.text)),
            _ => None,
        })
        .collect()
}

/// Waits until the run for the `index`-th model request has ended and its reply (if any)
/// would have been sent: the next message's run only starts after it.
async fn settle(world: &World, from: &str, requests: usize) {
    world.fake.push(Turn::text(["marker"]));
    world.send(world.dm(from, "are you there?"));
    world.request(requests).await;
    tokio::time::timeout(PATIENCE, async {
        while !sent_to(world).iter().any(|(_, text)| text == "marker") {
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    })
    .await
    .expect("the marker reply");
}

#[tokio::test]
async fn a_silent_reply_sends_nothing_and_a_trailing_token_is_stripped() {
    let world = World::new(open_dms()).await;
    world.fake.push(Turn::text(["  no_", "reply \n"]));
    world.send(world.dm("42", "thanks"));
    settle(&world, "42", 1).await;
    assert_eq!(sent_to(&world), [("42".to_owned(), "marker".to_owned())], "nothing for the silent reply");
    assert!(
        !world
            .channel
            .operations()
            .iter()
            .any(|op| matches!(op, Operation::Typing { target } if target.chat.id == "42")),
        "no typing flash for a silent reply ready at once"
    );

    world.fake.push(Turn::text(["😄 NO_", "REPLY"]));
    world.send(world.dm("42", "haha"));
    world.request(2).await;
    assert_eq!(world.replies(2).await[1], "😄");
}

#[tokio::test]
async fn a_message_tool_send_to_this_chat_replaces_the_final_reply() {
    let world = World::new(open_dms()).await;
    world.fake.push(Turn::tool_calls([ToolCall::new("call_1", "message", r#"{"text":"Here is your report."}"#)]));
    world.fake.push(Turn::text(["Sent it to you!"]));
    world.send(world.dm("42", "send me the report"));
    settle(&world, "42", 2).await;
    assert_eq!(
        sent_to(&world),
        [("42".to_owned(), "Here is your report.".to_owned()), ("42".to_owned(), "marker".to_owned())]
    );
}

#[tokio::test]
async fn a_message_tool_send_to_another_chat_still_gets_a_final_reply() {
    let world = World::new(open_dms()).await;
    let call = ToolCall::new("call_1", "message", r#"{"text":"Alice asked for you.","to":"direct:7"}"#);
    world.fake.push(Turn::tool_calls([call]));
    world.fake.push(Turn::text(["I let Bob know."]));
    world.send(world.dm("42", "tell bob"));
    world.request(1).await;
    world.replies(2).await;
    assert_eq!(
        sent_to(&world),
        [("7".to_owned(), "Alice asked for you.".to_owned()), ("42".to_owned(), "I let Bob know.".to_owned())]
    );
}

#[tokio::test]
async fn a_failed_message_tool_leaves_the_final_reply() {
    let world = World::new(open_dms()).await;
    world.channel.fail_next(OperationKind::Send, ChannelError::Rejected { reason: "chat not found".into() });
    world.fake.push(Turn::tool_calls([ToolCall::new("call_1", "message", r#"{"text":"Here is your report."}"#)]));
    world.fake.push(Turn::text(["I could not send the report separately, so here it is: all green."]));
    world.send(world.dm("42", "send me the report"));
    world.request(1).await;
    assert_eq!(
        world.replies(1).await,
        ["I could not send the report separately, so here it is: all green."],
        "the failed send left nothing behind and the final went out"
    );
}

#[tokio::test]
async fn a_streamed_reply_grows_in_one_preview_message_that_becomes_the_final() {
    let world = World::new(open_dms()).await;
    let pieces = ["The deploy ", "finished at 10:02 ", "and every check ", "passed; ", "nothing else to do."];
    world.fake.push(Turn::Reply(Reply::text(pieces).with_chunk_delay(Duration::from_millis(40))));
    world.send(world.dm("42", "status?"));
    world.request(0).await;
    let full = pieces.concat();
    tokio::time::timeout(PATIENCE, async {
        while world.channel.visible_messages().first().map(|m| m.text.as_str()) != Some(full.as_str()) {
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    })
    .await
    .expect("the final text");
    tokio::time::sleep(Duration::from_millis(100)).await;
    let sends = sent_to(&world);
    assert_eq!(sends.len(), 1, "one message, edited in place: {sends:?}");
    assert!(sends[0].1.chars().count() >= 30 && full.starts_with(&sends[0].1), "{sends:?}");
    assert!(world.channel.operations().iter().any(|op| matches!(op, Operation::Edited { .. })));
}

#[tokio::test]
async fn a_streamed_silent_reply_never_shows_a_preview() {
    let world = World::new(open_dms()).await;
    world.fake.push(Turn::Reply(Reply::text(["NO", "_RE", "PLY"]).with_chunk_delay(Duration::from_millis(30))));
    world.send(world.dm("42", "ok thanks"));
    settle(&world, "42", 1).await;
    assert_eq!(sent_to(&world), [("42".to_owned(), "marker".to_owned())]);
    assert!(!world.channel.operations().iter().any(|op| matches!(op, Operation::Edited { .. })));
}

/// The sends so far: (text, the message they are threaded to).
fn threading(world: &World) -> Vec<(String, Option<String>)> {
    world
        .channel
        .operations()
        .into_iter()
        .filter_map(|op| match op {
            Operation::Sent { message, .. } => Some((message.text, message.reply_to_message_id)),
            _ => None,
        })
        .collect()
}

#[tokio::test]
async fn replies_are_threaded_per_reply_to_mode_or_when_the_model_asks() {
    let world = World::new(open_dms()).await;
    world.fake.push(Turn::text(["[[reply_to_current]] ", "Yes, that one."]));
    let question = world.dm("42", "this one?");
    let question_id = question.message_id.clone();
    world.send(question);
    world.replies(1).await;
    assert_eq!(threading(&world), [("Yes, that one.".to_owned(), Some(question_id))]);

    let mut config = open_dms();
    config.messages.reply_to_mode = ferry::config::ReplyToMode::First;
    config.messages.response_prefix = Some("🤖".into());
    let world = World::new(config).await;
    world.fake.push(Turn::text(["Plain answer."]));
    let question = world.dm("42", "hi");
    let question_id = question.message_id.clone();
    world.send(question);
    world.replies(1).await;
    assert_eq!(threading(&world), [("🤖 Plain answer.".to_owned(), Some(question_id))]);
}

#[tokio::test]
async fn with_block_streaming_the_blocks_are_the_reply_and_the_final_is_not_sent_again() {
    let mut config = open_dms();
    config.agents.defaults.block_streaming = true;
    let world = World::new(config).await;
    let paragraph = |word: &str| format!("{word} ").repeat(180).trim_end().to_owned();
    let (a, b, c) = (paragraph("alpha"), paragraph("bravo"), paragraph("charlie"));
    world.fake.push(Turn::text([format!("{a}\n\n"), format!("{b}\n\n"), c.clone()]));
    world.send(world.dm("42", "tell me everything"));
    settle(&world, "42", 1).await;
    let texts: Vec<String> = sent_to(&world).into_iter().map(|(_, text)| text).collect();
    assert_eq!(texts, [format!("{a}\n\n{b}\n\n{c}"), "marker".to_owned()], "blocks in quick succession merge");
}

#[tokio::test]
async fn verbose_mode_lists_each_tool_call_above_the_reply_until_turned_off() {
    let world = World::new(open_dms()).await;
    world.send(world.dm("42", "/verbose on"));
    assert!(world.replies(1).await[0].contains("Verbose is on"));

    world.fake.push(Turn::tool_calls([
        ToolCall::new("a", "current_time", "{}"),
        ToolCall::new("b", "web_search", r#"{"query":"rust *async*"}"#),
    ]));
    world.fake.push(Turn::text(["It is noon."]));
    world.send(world.dm("42", "what time is it?"));
    let replies = world.replies(3).await;
    // Markdown as the channel receives it: what the model wrote stays literal.
    assert_eq!(replies[1], "🔧 current\\_time\n🔧 web\\_search — query: rust \\*async\\* (failed)");
    assert_eq!(replies[2], "It is noon.");

    world.send(world.dm("42", "/verbose off"));
    assert!(world.replies(4).await[3].contains("Verbose is off"));
    world.fake.push(Turn::tool_calls([ToolCall::new("c", "current_time", "{}")]));
    world.fake.push(Turn::text(["Still noon."]));
    world.send(world.dm("42", "and now?"));
    world.request(3).await;
    assert_eq!(world.replies(5).await[4], "Still noon.");
    tokio::time::sleep(Duration::from_millis(50)).await;
    assert_eq!(world.channel.sent_texts().len(), 5, "no tool lines once verbose is off");
}

#[tokio::test]
async fn a_run_still_going_after_the_shutdown_grace_is_aborted_and_its_message_kept() {
    let world = World::new(open_dms()).await;
    world.fake.push(Turn::stall(Reply::text(["thinking", "forever"]), 1));
    let mut bus = world.dispatcher.runner().bus().subscribe();
    world.send(world.dm("42", "a long question"));
    world.request(0).await;
    let aborted = world.dispatcher.scheduler().shut_down(Duration::from_millis(200)).await;
    assert_eq!(aborted, 1);
    let ended = tokio::time::timeout(PATIENCE, async {
        loop {
            let event = bus.recv().await.unwrap();
            if let ferry::agent::AgentStream::Lifecycle(ferry::agent::LifecycleEvent::End { aborted, .. }) =
                event.stream
            {
                return aborted;
            }
        }
    });
    assert!(ended.await.unwrap(), "the run ends with lifecycle end {{aborted}}");
    assert_eq!(world.journaled().await, 1, "the message is answered after the restart");
    world.send(world.dm("42", "during shutdown"));
    tokio::time::sleep(Duration::from_millis(100)).await;
    assert_eq!(world.fake.requests().len(), 1, "no run starts once shutting down");
}

/// A message steered into a run that a crash cut short is part of the resumed run; when that
/// run is kept for later (the model failing for a passing reason), the steered message is
/// kept with the run's own, and the next run asks about both.
#[test]
fn a_resumed_run_kept_for_later_keeps_the_message_steered_into_it() {
    let state = tempfile::tempdir().unwrap();
    let state_path = state.path().to_owned();
    let mut config = open_dms();
    config.messages.queue.mode = QueueMode::Steer;
    // First process: the first question's run streams, the second is steered into it, the
    // run records a step with it (before its `message` send), then hangs and the process dies.
    let first = tokio::runtime::Runtime::new().unwrap();
    first.block_on(async {
        let fake = FakeOpenAi::start().await.unwrap();
        let database = Database::open(&state_path).await.unwrap();
        let world = World::with(config.clone(), fake, tempfile::tempdir().unwrap(), database).await;
        let skipped = ToolCall::new("call_1", "message", r#"{"text":"Skipped for the steered message."}"#);
        let reply = Reply::text(["Let me ", "look ", "into ", "that."]).with_tool_call(skipped);
        world.fake.push(reply.with_chunk_delay(Duration::from_millis(300)));
        world.fake.push(Turn::tool_calls([ToolCall::new("call_2", "message", r#"{"text":"On it."}"#)]));
        world.fake.push(Turn::stall(Reply::text(["never finished"]), 0));
        world.send(world.dm("42", "the first question"));
        world.request(0).await;
        tokio::time::timeout(PATIENCE, async {
            while !world.dispatcher.scheduler().status(DM_42).streaming {
                tokio::time::sleep(Duration::from_millis(10)).await;
            }
        })
        .await
        .unwrap();
        world.send(world.dm("42", "the steered question"));
        world.request(2).await;
        assert_eq!(world.journaled().await, 2);
    });
    drop(first);

    // Second process: the resumed run fails for a passing reason and is kept for later; the
    // next message runs with both kept messages.
    let second = tokio::runtime::Runtime::new().unwrap();
    second.block_on(async {
        let fake = FakeOpenAi::start().await.unwrap();
        for _ in 0..3 {
            fake.push(Turn::cut(Reply::text(["Starting an answer that breaks off", " …"]), 1));
        }
        let world = World::with(config, fake, state, Database::open(&state_path).await.unwrap()).await;
        world.dispatcher.restore().await.unwrap();
        world.request(2).await;
        world.until_shown(|text| text.contains("kept your message")).await;
        world.fake.push(Turn::text(["All three answered."]));
        // Not `1` again, which the first process gave the first question.
        world.send(InboundMessage { message_id: "third".into(), ..world.dm("42", "the third question") });
        world.until_shown(|text| text == "All three answered.").await;
        let asked = world.last_asked().await;
        for question in ["the first question", "the steered question", "the third question"] {
            assert!(asked.contains(question), "{question:?} is not asked: {asked}");
        }
    });
}

/// Holds every reply at `message_sending` until the process dies: the run's reply is
/// recorded whole (its last step), but nothing of it is sent.
struct HoldReplies(tokio::sync::mpsc::UnboundedSender<()>);

#[async_trait::async_trait]
impl ferry::hooks::Plugin for HoldReplies {
    fn name(&self) -> &str {
        "hold-replies"
    }

    async fn message_sending(
        &self,
        _event: &ferry::hooks::MessageSending,
    ) -> ferry::hooks::HookResult<Option<ferry::hooks::SendingDecision>> {
        let _ = self.0.send(());
        std::future::pending().await
    }
}

/// A run that ended before a crash left its whole reply recorded but unsent. After the
/// restart that reply goes out in a run that also answers a message that came since; when
/// that run is kept for later (the model failing for a passing reason), the recorded reply
/// still answers its own message, which is never asked about again.
#[test]
fn a_recorded_reply_resumed_in_a_run_kept_for_later_still_answers_its_message() {
    let state = tempfile::tempdir().unwrap();
    let state_path = state.path().to_owned();
    let first = tokio::runtime::Runtime::new().unwrap();
    first.block_on(async {
        let mut config = open_dms();
        config.hooks.timeout_ms = 600_000;
        // No preview: this channel's message ids start again at 1 in the next process, where
        // a left preview's id would name another message.
        config.channels.telegram.streaming = ferry::config::StreamingMode::Off;
        let (held, mut holding) = tokio::sync::mpsc::unbounded_channel();
        let fake = FakeOpenAi::start().await.unwrap();
        fake.push(Turn::text(["The answer to the first question."]));
        let database = Database::open(&state_path).await.unwrap();
        let world = World::with_hooks(config, fake, tempfile::tempdir().unwrap(), database, |hooks| {
            hooks.register(1, HoldReplies(held))
        })
        .await;
        world.send(world.dm("42", "the first question"));
        tokio::time::timeout(PATIENCE, holding.recv()).await.expect("the reply reaches its hook");
    });
    drop(first);

    let second = tokio::runtime::Runtime::new().unwrap();
    second.block_on(async {
        let fake = FakeOpenAi::start().await.unwrap();
        for _ in 0..3 {
            fake.push(Turn::cut(Reply::text(["Starting an answer that breaks off", " …"]), 1));
        }
        let world = World::with(open_dms(), fake, state, Database::open(&state_path).await.unwrap()).await;
        let left_over = world.dispatcher.left_over().await.unwrap();
        let second = InboundMessage { message_id: "second".into(), ..world.dm("42", "the second question") };
        assert_eq!(world.send(second).outcome().await, AckOutcome::Accepted);
        world.dispatcher.resume(left_over).await;
        world.until_shown(|text| text.contains("kept your message")).await;
        world.fake.push(Turn::text(["Both answered."]));
        world.send(InboundMessage { message_id: "third".into(), ..world.dm("42", "the third question") });
        world.until_shown(|text| text == "Both answered.").await;
        let recorded = world.shown().iter().filter(|text| text.contains("The answer to the first question.")).count();
        assert_eq!(recorded, 1, "the recorded reply is shown once: {:?}", world.shown());
        let asked = world.last_asked().await;
        assert!(!asked.contains("the first question"), "asked again: {asked}");
        assert!(asked.contains("the second question") && asked.contains("the third question"), "{asked}");
    });
}
