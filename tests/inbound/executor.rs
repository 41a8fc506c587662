//! `Dispatcher::with_executor`: an embedder's own agent behind Ferry's inbound path. Routing,
//! the journaled queue with its modes, and the lanes are the gateway's; only the runs are
//! the embedder's.

use std::sync::{Arc, Mutex};

use async_trait::async_trait;
use ferry::channel::memory::MemoryChannel;
use ferry::channel::{AckOutcome, Channel, ChatKind, ChatRef, OutboundMessage, Target};
use ferry::channels::ChannelRegistry;
use ferry::dispatch::{Dispatcher, DispatcherParts};
use ferry::queue::{QueueJournal, RunExecutor, RunJob, RunReport};
use ferry::routing::{SystemClock, ThreadLabels};
use ferry::state::{Database, Stores};
use ferry_fakes::FakeOpenAi;
use tokio::sync::{Notify, mpsc};

use super::{PATIENCE, open_dms, runner::fake_model_runner};

/// Answers each batch with its prompt, after holding the first run until told to go on.
struct EchoAgent {
    channel: Arc<MemoryChannel>,
    started: mpsc::UnboundedSender<String>,
    first_run_may_end: Arc<Notify>,
    runs: Mutex<usize>,
}

#[async_trait]
impl RunExecutor for EchoAgent {
    async fn execute(&self, job: RunJob) -> RunReport {
        let _slot = job.global.enter(&job.session_key).await;
        let first = {
            let mut runs = self.runs.lock().unwrap();
            *runs += 1;
            *runs == 1
        };
        self.started.send(job.prompt.clone()).unwrap();
        if first {
            self.first_run_may_end.notified().await;
        }
        let last = job.messages.last().expect("a run answers at least one message");
        self.channel
            .send(OutboundMessage::text(Target::of(&last.message), format!("echo: {}", job.prompt)))
            .await
            .unwrap();
        RunReport::default()
    }
}

#[tokio::test]
async fn an_embedders_executor_runs_what_the_queue_hands_it_collected_and_journaled() {
    let fake = FakeOpenAi::start().await.unwrap();
    let state = tempfile::tempdir().unwrap();
    let workspace = tempfile::tempdir().unwrap();
    let database = Database::open(state.path()).await.unwrap();
    let channels = ChannelRegistry::new();
    let channel = Arc::new(MemoryChannel::new("telegram", "default"));
    let (started, mut starts) = mpsc::unbounded_channel();
    let first_run_may_end = Arc::new(Notify::new());
    let agent = EchoAgent {
        channel: channel.clone(),
        started,
        first_run_may_end: first_run_may_end.clone(),
        runs: Mutex::new(0),
    };
    let dispatcher = Dispatcher::with_executor(
        DispatcherParts {
            config: Arc::new(open_dms()),
            stores: Stores::sqlite(&database),
            agents: ferry::agent::AgentRunner::new(fake_model_runner(&fake.url(), workspace.path(), &channels)).into(),
            channels,
            clock: Arc::new(SystemClock),
            thread_labels: ThreadLabels::new(),
        },
        Arc::new(agent),
    )
    .unwrap();
    dispatcher.attach(channel.clone()).await.unwrap();
    let ada = ChatRef::new(ChatKind::Direct, "ada");

    assert_eq!(channel.inject(channel.message(ada.clone(), "ada", "first")).outcome().await, AckOutcome::Accepted);
    let first = tokio::time::timeout(PATIENCE, starts.recv()).await.unwrap().unwrap();
    assert_eq!(first, "first");
    // Two more while the first run is going: collected into one follow-up (the default mode).
    for text in ["second", "third"] {
        assert_eq!(channel.inject(channel.message(ada.clone(), "ada", text)).outcome().await, AckOutcome::Accepted);
    }
    assert_eq!(
        QueueJournal::new(database.inbound_store()).len().await.unwrap(),
        3,
        "every accepted message is journaled until answered"
    );
    first_run_may_end.notify_one();

    let follow_up = tokio::time::timeout(PATIENCE, starts.recv()).await.unwrap().unwrap();
    assert!(follow_up.starts_with("[Queued messages while agent was busy]"), "{follow_up}");
    assert!(follow_up.contains("Queued #1\nsecond") && follow_up.contains("Queued #2\nthird"), "{follow_up}");
    // Answered messages leave the journal (the removal is written after the run returns).
    tokio::time::timeout(PATIENCE, async {
        while channel.sent_texts().len() < 2 || !QueueJournal::new(database.inbound_store()).is_empty().await.unwrap() {
            tokio::time::sleep(std::time::Duration::from_millis(10)).await;
        }
    })
    .await
    .unwrap();
    let sent = channel.sent_texts();
    assert_eq!(sent[0], "echo: first");
    assert!(sent[1].starts_with("echo: [Queued messages"), "{sent:?}");
    assert!(fake.requests().is_empty(), "Ferry's own agent never ran");
    assert!(starts.try_recv().is_err(), "two runs, no more");
}
