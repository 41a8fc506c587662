//! Compaction end to end (SPEC §6.9): a session's older transcript summarized by the model
//! when the provider reports a context overflow, when the prompt would cross
//! `context_window - reserve_tokens`, and on `/compact`; through the in-memory channel, the
//! dispatcher, the SQLite session store and the fake OpenAI server.

#[path = "common/runner.rs"]
mod runner;
use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use ferry::agent::compaction::{CompactRequest, Compacted, CompactionError, Compactor, ContextBudget, ReportedContext};
use ferry::agent::providers::{ProviderError, ResolvedModel};
use ferry::agent::{
    AgentRunner, AgentStream, ChatMessage, CompactionEvent, RunRequest, RunSettings, RunStatus, RunnerParts, Usage,
};
use ferry::channel::memory::MemoryChannel;
use ferry::channel::{ChatKind, ChatRef};
use ferry::channels::ChannelRegistry;
use ferry::config::{Config, DmPolicy, Environment};
use ferry::dispatch::{Dispatcher, DispatcherParts};
use ferry::hooks::{AfterCompaction, BeforeCompaction, HookResult, Hooks, Plugin};
use ferry::models::{ModelCatalog, ModelRouter};
use ferry::routing::{SystemClock, ThreadLabels};
use ferry::session::Session;
use ferry::state::{Database, Stores};
use ferry_fakes::{FakeOpenAi, ToolCall, Turn};
use runner::fake_model_runner;
use serde_json::Value;

/// Generous bound for waiting on explicit signals; never a measurement.
const PATIENCE: Duration = Duration::from_secs(20);

/// What the summarizer is told begins with this (session::compaction's prompt).
const SUMMARIZER: &str = "You compact conversations";

/// Records the compaction hooks it sees.
#[derive(Clone, Default)]
struct CompactionWatcher(Arc<std::sync::Mutex<Vec<String>>>);

#[async_trait]
impl Plugin for CompactionWatcher {
    fn name(&self) -> &str {
        "compaction-watcher"
    }

    async fn before_compaction(&self, event: &BeforeCompaction) -> HookResult<()> {
        self.0.lock().unwrap().push(format!("before: {} entries", event.message_count));
        Ok(())
    }

    async fn after_compaction(&self, event: &AfterCompaction) -> HookResult<()> {
        self.0.lock().unwrap().push(format!("after: {} summarized, retry {}", event.compacted, event.will_retry));
        Ok(())
    }
}

struct World {
    fake: FakeOpenAi,
    hooks_seen: CompactionWatcher,
    channel: Arc<MemoryChannel>,
    dispatcher: Dispatcher,
    _state: tempfile::TempDir,
    _workspace: tempfile::TempDir,
}

impl World {
    async fn new(context_window: Option<u32>, reserve_tokens: u32) -> Self {
        Self::build(Config::default(), reserve_tokens, |_, parts| {
            ResolvedModel { context_window, ..parts.model.primary() }.into()
        })
        .await
    }

    /// `config`'s models (whose providers' `base_url` is `{fake}`), `config`'s channel
    /// settings, and `reserve_tokens`.
    async fn with_models(config: &str, reserve_tokens: u32) -> Self {
        Self::build(Config::default(), reserve_tokens, |fake, _| {
            let config: Config = toml::from_str(&config.replace("{fake}", &fake.url())).unwrap();
            let env = Environment::new([("", ""); 0], "/");
            ModelRouter::new(ModelCatalog::resolve(&config, &env).unwrap())
        })
        .await
    }

    async fn build(
        mut config: Config,
        reserve_tokens: u32,
        model: impl FnOnce(&FakeOpenAi, &RunnerParts) -> ModelRouter,
    ) -> Self {
        let _ = tracing_subscriber::fmt().with_test_writer().with_env_filter("ferry=info").try_init();
        config.channels.telegram.dm_policy = DmPolicy::Open;
        config.channels.telegram.allow_from = vec!["*".into()];
        let fake = FakeOpenAi::start().await.unwrap();
        let state = tempfile::tempdir().unwrap();
        let database = Database::open(state.path()).await.unwrap();
        let workspace = tempfile::tempdir().unwrap();
        let channels = ChannelRegistry::new();
        let hooks_seen = CompactionWatcher::default();
        let parts = fake_model_runner(&fake.url(), workspace.path(), &channels);
        let runner = AgentRunner::new(RunnerParts {
            model: model(&fake, &parts),
            settings: RunSettings { compaction_reserve_tokens: reserve_tokens, ..parts.settings },
            hooks: Hooks::builder().register(0, hooks_seen.clone()).build(),
            media: None,
            ..parts
        });
        let dispatcher = Dispatcher::new(DispatcherParts {
            config: Arc::new(config),
            stores: Stores::sqlite(&database),
            agents: runner.into(),
            channels,
            clock: Arc::new(SystemClock),
            thread_labels: ThreadLabels::new(),
        })
        .unwrap();
        let channel = Arc::new(MemoryChannel::new("telegram", "default"));
        dispatcher.attach(channel.clone()).await.unwrap();
        Self { fake, hooks_seen, channel, dispatcher, _state: state, _workspace: workspace }
    }

    /// Sends `text` as a DM and waits for the chat to show `replies` messages in all.
    async fn say(&self, text: &str, replies: usize) -> Vec<String> {
        self.channel.inject(self.channel.message(ChatRef::new(ChatKind::Direct, "42"), "42", text));
        tokio::time::timeout(PATIENCE, async {
            loop {
                let texts = self.channel.sent_texts();
                if texts.len() >= replies {
                    return texts;
                }
                tokio::time::sleep(Duration::from_millis(10)).await;
            }
        })
        .await
        .unwrap_or_else(|_| panic!("expected {replies} replies, got {:?}", self.channel.sent_texts()))
    }

    async fn session(&self) -> Session {
        let sessions = self.dispatcher.store().list(10).await.unwrap();
        assert_eq!(sessions.len(), 1);
        sessions.into_iter().next().unwrap()
    }

    async fn context(&self) -> Vec<ChatMessage> {
        let session = self.session().await;
        self.dispatcher.store().history(&session.session_id).await.unwrap()
    }

    fn bodies(&self) -> Vec<Value> {
        self.fake.requests().into_iter().map(|request| request.body).collect()
    }
}

fn is_summarize(body: &Value) -> bool {
    body["messages"][0]["content"].as_str().is_some_and(|system| system.starts_with(SUMMARIZER))
}

fn text_of(body: &Value) -> String {
    body["messages"].to_string()
}

/// Every tool result in a request answers a tool call made earlier in the same request.
fn tool_pairs_intact(body: &Value) -> bool {
    let mut calls = Vec::new();
    for message in body["messages"].as_array().unwrap() {
        for call in message["tool_calls"].as_array().into_iter().flatten() {
            calls.push(call["id"].as_str().unwrap().to_owned());
        }
        if message["role"] == "tool" && !calls.contains(&message["tool_call_id"].as_str().unwrap().to_owned()) {
            return false;
        }
    }
    true
}

#[tokio::test]
async fn a_context_overflow_compacts_the_session_and_the_retry_answers_once() {
    let world = World::new(None, 20_000).await;
    let mut bus = world.dispatcher.runner().bus().subscribe();
    world.fake.push(Turn::text(["First answer."])).push(Turn::text(["Second answer."]));
    world.say("first question", 1).await;
    world.say("second question", 2).await;

    world.fake.push(Turn::context_overflow()).push(Turn::text(["They asked two questions."]));
    world.fake.push(Turn::text(["Third ", "answer."]));
    let replies = world.say("third question", 3).await;
    tokio::time::sleep(Duration::from_millis(100)).await;
    assert_eq!(world.channel.sent_texts(), replies, "nothing more arrives");
    assert_eq!(replies, ["First answer.", "Second answer.", "Third answer."], "one reply, sent once");

    let bodies = world.bodies();
    assert_eq!(bodies.len(), 5, "overflow, summarize, retry");
    assert!(is_summarize(&bodies[3]) && text_of(&bodies[3]).contains("first question"));
    assert!(bodies[3].get("tools").is_none_or(|tools| tools.as_array().is_none_or(Vec::is_empty)));
    let retry = text_of(&bodies[4]);
    assert!(retry.contains("They asked two questions.") && retry.contains("third question"), "{retry}");
    assert!(!retry.contains("first question"), "summarized entries are not sent again: {retry}");

    assert_eq!(world.session().await.compaction_count, 1);
    let seen = tokio::time::timeout(PATIENCE, async {
        loop {
            let seen = world.hooks_seen.0.lock().unwrap().clone();
            if seen.len() == 2 {
                return seen;
            }
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    });
    assert_eq!(
        seen.await.unwrap(),
        ["before: 5 entries", "after: 4 summarized, retry true"],
        "plugins hear of the compaction"
    );
    let context = world.context().await;
    let ChatMessage::User { text, .. } = &context[0] else { panic!("{context:?}") };
    assert!(text.contains("They asked two questions."), "the compaction entry stands in: {context:?}");
    assert_eq!(context.len(), 3, "summary, third question, its answer: {context:?}");

    let mut phases = Vec::new();
    while let Ok(event) = bus.try_recv() {
        if let AgentStream::Compaction(compaction) = &event.stream {
            phases.push(compaction.clone());
        }
    }
    assert_eq!(phases, [CompactionEvent::Start, CompactionEvent::End { will_retry: true }]);
}

#[tokio::test]
async fn a_session_past_the_threshold_is_compacted_before_the_next_turn() {
    // 2,000-token window, 500 reserved: prompts above ~1,500 tokens (~6,000 chars) compact.
    let world = World::new(Some(2_000), 500).await;
    let long = |word: &str| format!("{word} ").repeat(500);
    world.fake.push(Turn::tool_calls([ToolCall::new("t1", "current_time", "{}")]));
    world.fake.push(Turn::text([long("alpha")]));
    world.say("what time is it", 1).await;
    world.fake.push(Turn::text([long("bravo")]));
    world.say("tell me more", 2).await;
    let before = world.bodies().len();
    assert!(world.bodies().iter().all(|body| !is_summarize(body)), "not yet past the threshold");

    world.fake.push(Turn::text(["Summary: the time, alpha and bravo."])).push(Turn::text(["Fine."]));
    let replies = world.say("and now?", 3).await;
    assert_eq!(replies[2], "Fine.");
    let bodies = world.bodies();
    assert_eq!(bodies.len(), before + 2);
    assert!(is_summarize(&bodies[before]), "the summary is asked first");
    let next = text_of(&bodies[before + 1]);
    assert!(next.contains("Summary: the time, alpha and bravo.") && next.contains("and now?"), "{next}");
    assert!(!next.contains("alpha alpha"), "the old messages are gone: {next}");
    assert!(bodies.iter().all(tool_pairs_intact), "no tool result without its call");
    assert_eq!(world.session().await.compaction_count, 1);
}

#[tokio::test]
async fn a_model_chosen_with_a_smaller_window_is_compacted_for_its_own_window() {
    // The primary has the default 128k window; `small/little` has 2,000 tokens, 500 reserved.
    let models = "[models.providers.big]\nkind = \"openai\"\nbase_url = \"{fake}\"\napi_key = \"k\"\n\
                  [models.providers.small]\nkind = \"openai\"\nbase_url = \"{fake}\"\napi_key = \"k\"\n\
                  context_window = 2000\n\
                  [agents.defaults]\nmodel = \"big/large\"\nmodels = [\"big/large\", \"small/little\"]\n";
    let world = World::with_models(models, 500).await;
    let long = |word: &str| format!("{word} ").repeat(500);
    world.fake.push(Turn::text([long("alpha")]));
    world.say("tell me", 1).await;
    world.fake.push(Turn::text([long("bravo")]));
    world.say("tell me more", 2).await;
    assert!(world.bodies().iter().all(|body| !is_summarize(body)), "the primary's window holds it all");

    world.say("/model small/little", 3).await;
    world.fake.push(Turn::text(["Summary: alpha and bravo."])).push(Turn::text(["Fine."]));
    let replies = world.say("and now?", 4).await;
    assert_eq!(replies[3], "Fine.");
    let bodies = world.bodies();
    let summary = &bodies[bodies.len() - 2];
    assert!(is_summarize(summary), "compacted for the chosen model's window");
    assert_eq!(summary["model"], "little", "by the chosen model");
    assert_eq!(bodies[0]["model"], "large");
    assert_eq!(world.session().await.compaction_count, 1);
}

#[tokio::test]
async fn compact_on_request_summarizes_and_a_failure_leaves_the_transcript_alone() {
    let world = World::new(None, 20_000).await;
    world.fake.push(Turn::text(["One."])).push(Turn::text(["Two."]));
    world.say("first", 1).await;
    world.say("second", 2).await;

    world.fake.push(Turn::error(500, "the summarizer broke"));
    let before = world.context().await;
    let replies = world.say("/compact", 3).await;
    assert!(replies[2].starts_with("⚠️ I could not compact the conversation:"), "{}", replies[2]);
    assert_eq!(world.context().await, before, "the transcript is untouched");
    assert_eq!(world.session().await.compaction_count, 0);

    world.fake.push(Turn::text(["They said first."]));
    let replies = world.say("/compact keep the numbers", 4).await;
    assert_eq!(replies[3], "🧹 Compacted: 2 messages summarized.");
    let summarize = world.bodies().pop().unwrap();
    assert!(is_summarize(&summarize) && text_of(&summarize).contains("keep the numbers"));
    let context = world.context().await;
    assert_eq!(context.len(), 3, "summary + the last turn: {context:?}");
    assert_eq!(context[1], ChatMessage::user("second"));
    assert_eq!(world.session().await.compaction_count, 1);
}

/// Compacts by putting a summary in front, as many times as asked.
#[derive(Default)]
struct CountingCompactor {
    compactions: std::sync::atomic::AtomicU32,
}

#[async_trait]
impl Compactor for CountingCompactor {
    fn needs_compaction(&self, _: ContextBudget, _: &str, _: &[ChatMessage], _: Option<ReportedContext>) -> bool {
        false
    }

    async fn compact(&self, _: CompactRequest<'_>) -> Result<Compacted, CompactionError> {
        self.compactions.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
        Ok(Compacted {
            summary: ChatMessage::user("summary"),
            keep_from: 0,
            summarized: 0,
            tokens_before: 0,
            usage: Usage::default(),
        })
    }
}

#[tokio::test]
async fn a_fourth_overflow_in_one_run_fails_it_with_a_clear_error() {
    let world = World::new(None, 20_000).await;
    for _ in 0..4 {
        world.fake.push(Turn::context_overflow());
    }
    let compactor = CountingCompactor::default();
    let runner = world.dispatcher.runner();
    let outcome = runner.run_with(RunRequest::new("k", "hello"), None, Some(&compactor), |_, _| async {}).await;
    let RunStatus::Failed { error: ProviderError::ContextOverflow { message } } = &outcome.status else {
        panic!("{:?}", outcome.status)
    };
    assert!(message.contains("still too long after 3 compactions"), "{message}");
    assert_eq!(compactor.compactions.load(std::sync::atomic::Ordering::SeqCst), 3);
    assert_eq!(world.bodies().len(), 4);
    assert!(outcome.payloads[0].is_error, "the user is told");
}
