//! The dispatcher: the path of every inbound message, from any channel to its run.
//!
//! Each channel's messages are handled by [`INBOUND_SHARDS`] tasks, split by chat (one
//! chat's messages stay in order). For each delivery: route it (access, pairing, mention
//! gating, session key, dedupe); handle a command at once; otherwise record it as seen and
//! journal it in one group-committed write, acknowledge it to the platform,
//! and hand it to the queue scheduler, which runs the agent through
//! [`executor::AgentExecutor`] and sends the reply. Users are told when their message was
//! refused or dropped. Each delivery counts once in `ferry_inbound_messages_total`, under
//! what became of it.

mod control;
mod executor;
mod hooks;
mod jobs;
mod keeper;
mod memory;
mod models;
mod overrides;
mod recovered;
mod scheduled;
mod singleton;

use std::collections::HashMap;
use std::hash::{BuildHasher, Hash, Hasher, RandomState};
use std::sync::Arc;

use ferry_channel::{Channel, InboundDelivery, InboundMessage, OutboundMessage};
use futures::StreamExt;
use tokio::sync::mpsc;
use tokio::task::JoinHandle;
use tracing::Instrument;

use crate::agent::tools::AgentToolPolicies;
use crate::agent::{AgentRunner, Agents};
use crate::channels::ChannelRegistry;
use crate::config::Config;
use crate::control::parse_command;
use crate::metrics::{InboundOutcome, metrics};
use crate::queue::{Admission, QueueJournal, QueueSettings, QueuedMessage, RunExecutor, Scheduler};
use crate::reply::ledger::{DeliveryLedger, OrphanPreview};
use crate::reply::outbound::Schedulers;
use crate::reply::outbound::retry::RetryPolicy;
use crate::routing::{
    Admitted, Clock, RouteDecision, Routed, Router, RoutingError, SessionKey, ThreadLabels, too_long,
};
use crate::session::SessionStore;
use crate::state::Stores;
use crate::state::outage::through_outages;
use executor::AgentExecutor;
use overrides::OverridesCache;

/// Told to a user whose message could not be recorded (it would otherwise be lost).
const NOT_ACCEPTED: &str = "⚠️ I could not take your message just now. Please send it again in a moment.";
/// Told to a user whose message the full queue refused (`drop = "new"`).
const QUEUE_FULL: &str =
    "⚠️ Too many messages are waiting already, so this one was not queued. Please wait for my reply.";
/// Told to a user whose older queued message was dropped to make room (`drop = "old"`).
const DROPPED_OLDER: &str = "⚠️ The queue was full, so your earliest waiting message was dropped.";

/// What the dispatcher's parts share with the executor that runs its batches.
struct Shared<'a> {
    config: &'a Arc<Config>,
    agents: &'a Agents,
    store: &'a Arc<dyn SessionStore>,
    channels: &'a ChannelRegistry,
    schedulers: &'a Schedulers,
    overrides: &'a Arc<OverridesCache>,
    ledger: &'a DeliveryLedger,
    leases: Option<&'a Arc<dyn crate::state::leases::LeaseStore>>,
    jobs: &'a Arc<dyn crate::state::jobs::JobStore>,
}

/// Tasks handling one channel's inbound messages side by side; see [`Dispatcher::attach`].
pub const INBOUND_SHARDS: usize = 64;

/// Messages waiting per shard before the channel's stream is no longer read (backpressure
/// to the adapter, which then leaves them with the platform).
const SHARD_BACKLOG: usize = 256;

/// Everything the dispatcher is built from.
pub struct DispatcherParts {
    pub config: Arc<Config>,
    /// Where sessions, the inbound journal and the ledger are kept.
    pub stores: Stores,
    /// The agents that answer, by id; `runner.into()` for one (`main`).
    pub agents: Agents,
    pub channels: ChannelRegistry,
    pub clock: Arc<dyn Clock>,
    /// How each channel's thread ids read in session keys (`:topic:` for Telegram forum
    /// topics). The binary's wiring fills it from the adapters; the core names none.
    pub thread_labels: ThreadLabels,
}

#[derive(Debug, thiserror::Error)]
pub enum DispatchError {
    #[error(transparent)]
    Routing(#[from] RoutingError),
    #[error("cannot read the queue journal: {0}")]
    Journal(#[from] crate::queue::JournalError),
}

#[derive(Clone)]
pub struct Dispatcher {
    inner: Arc<Inner>,
}

struct Inner {
    config: Arc<Config>,
    router: Router,
    store: Arc<dyn SessionStore>,
    journal: QueueJournal,
    scheduler: Scheduler,
    channels: ChannelRegistry,
    agents: Agents,
    overrides: Arc<OverridesCache>,
    /// Every reply and notice goes out through its account's scheduler.
    schedulers: Schedulers,
    /// What became of each reply; what the last shutdown left unfinished.
    ledger: DeliveryLedger,
    /// Session lanes across replicas, when the state is shared (PostgreSQL).
    keeper: Option<Arc<keeper::LaneKeeper>>,
    /// Scheduled jobs, for `/remind` and `/jobs`.
    jobs: Arc<dyn crate::state::jobs::JobStore>,
    /// Entries of `/healthz` kept by background tasks (`scheduler` by the cron ticker,
    /// `memory` by the memory service), as they last saw things.
    health_entries: std::sync::Mutex<std::collections::BTreeMap<&'static str, serde_json::Value>>,
}

impl Dispatcher {
    /// The dispatcher of `ferry gateway`: runs are the agent's, answered through the reply
    /// pipeline.
    pub fn new(parts: DispatcherParts) -> Result<Self, DispatchError> {
        Self::assemble(parts, |shared| {
            Arc::new(AgentExecutor {
                overrides: shared.overrides.clone(),
                agents: shared.agents.clone(),
                store: shared.store.clone(),
                channels: shared.channels.clone(),
                schedulers: shared.schedulers.clone(),
                tool_policies: AgentToolPolicies::from_config(shared.config),
                config: shared.config.clone(),
                ledger: shared.ledger.clone(),
                leases: shared.leases.cloned(),
                jobs: shared.jobs.clone(),
            })
        })
    }

    /// A dispatcher whose runs are done by `executor` instead of Ferry's agent: for an
    /// embedder with an agent of its own, and for measuring the inbound path apart from
    /// any agent (`benches/inbound.rs`). Routing, commands, the queue and its journal, and
    /// the lanes are the same as [`Dispatcher::new`]'s; `executor` runs each batch, holding
    /// a slot of [`RunJob::global`](crate::queue::RunJob) while it works.
    pub fn with_executor(parts: DispatcherParts, executor: Arc<dyn RunExecutor>) -> Result<Self, DispatchError> {
        Self::assemble(parts, |_| executor)
    }

    fn assemble(
        parts: DispatcherParts,
        executor: impl FnOnce(&Shared<'_>) -> Arc<dyn RunExecutor>,
    ) -> Result<Self, DispatchError> {
        let router = Router::new(&parts.config, &parts.stores, parts.clock)?.with_thread_labels(parts.thread_labels);
        let store: Arc<dyn SessionStore> = parts.stores.sessions.clone();
        let journal = QueueJournal::new(parts.stores.inbound.clone());
        let deadline = std::time::Duration::from_secs(parts.config.messages.delivery_deadline_seconds);
        let schedulers = Schedulers::with_retry(RetryPolicy::with_deadline(deadline));
        let ledger = DeliveryLedger::new(parts.stores.inbound.clone());
        let overrides = Arc::new(OverridesCache::default());
        let executor = executor(&Shared {
            config: &parts.config,
            agents: &parts.agents,
            store: &store,
            channels: &parts.channels,
            schedulers: &schedulers,
            overrides: &overrides,
            ledger: &ledger,
            leases: parts.stores.leases.as_ref(),
            jobs: &parts.stores.jobs,
        });
        let max_concurrent = parts.config.agents.defaults.max_concurrent as usize;
        let scheduler = Scheduler::new(executor, Arc::new(journal.clone()), max_concurrent);
        let keeper = parts.stores.leases.clone().map(keeper::LaneKeeper::new);
        let dispatcher = Self {
            inner: Arc::new(Inner {
                config: parts.config,
                router,
                store,
                journal,
                scheduler,
                channels: parts.channels,
                agents: parts.agents,
                overrides,
                schedulers,
                ledger,
                keeper,
                jobs: parts.stores.jobs.clone(),
                health_entries: std::sync::Mutex::default(),
            }),
        };
        if let Some(keeper) = &dispatcher.inner.keeper {
            keeper.start(&dispatcher);
        }
        Ok(dispatcher)
    }

    /// The default agent's runner (the agents share one event bus, where observers listen).
    pub fn runner(&self) -> &AgentRunner {
        self.inner.agents.default_runner()
    }

    /// Every agent's runner, by id.
    pub fn agents(&self) -> &Agents {
        &self.inner.agents
    }

    /// The runner of the agent `session_key` belongs to.
    fn runner_for(&self, session_key: &str) -> &AgentRunner {
        self.inner.agents.for_session(session_key)
    }

    /// This replica's part in `/healthz` when several share one database: its id, whether
    /// it reaches the database, and the session leases it holds (the first
    /// [`keeper::HEALTH_LEASES`]); `None` on SQLite.
    pub fn replica_health(&self) -> Option<serde_json::Value> {
        let keeper = self.inner.keeper.as_ref()?;
        let held: Vec<_> =
            keeper.leases().held().into_iter().filter(|lease| keeper.leases().holds(&lease.key)).collect();
        let sessions: Vec<serde_json::Value> = held
            .iter()
            .take(keeper::HEALTH_LEASES)
            .map(|lease| serde_json::json!({ "sessionKey": lease.key, "epoch": lease.epoch }))
            .collect();
        let database = if keeper.database_reachable() { "reachable" } else { "unreachable" };
        let ingress: Vec<serde_json::Value> = keeper
            .leases()
            .held_ingress()
            .iter()
            .map(|lease| serde_json::json!({ "name": lease.key, "epoch": lease.epoch }))
            .collect();
        Some(serde_json::json!({
            "id": keeper.leases().replica_id(),
            "database": database,
            "ingress": ingress,
            "sessionLeases": held.len(),
            "sessions": sessions,
        }))
    }

    /// The `/healthz` entries background tasks keep: `scheduler` (the scheduled-jobs
    /// ticker: jobs, next due, last error), `memory` (documents, the embedding index).
    pub fn health_entries(&self) -> Vec<(&'static str, serde_json::Value)> {
        let entries = self.inner.health_entries.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        entries.iter().map(|(name, value)| (*name, value.clone())).collect()
    }

    /// Replaces the `/healthz` entry `name` (see [`Dispatcher::health_entries`]).
    pub fn set_health_entry(&self, name: &'static str, health: serde_json::Value) {
        let mut entries = self.inner.health_entries.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        entries.insert(name, health);
    }

    pub fn scheduler(&self) -> &Scheduler {
        &self.inner.scheduler
    }

    /// The session `message` would run in (see [`Router::session_key_of`]).
    pub fn session_key_of(&self, message: &InboundMessage) -> SessionKey {
        self.inner.router.session_key_of(message)
    }

    /// The longest message that runs, in characters (`messages.max_inbound_chars`).
    pub fn max_inbound_chars(&self) -> usize {
        self.inner.router.max_inbound_chars()
    }

    pub fn store(&self) -> &Arc<dyn SessionStore> {
        &self.inner.store
    }

    /// Runs the messages a previous process accepted but never answered: [`Dispatcher::left_over`]
    /// then [`Dispatcher::resume`], for callers with no channel starting in between.
    pub async fn restore(&self) -> Result<usize, DispatchError> {
        let left_over = self.left_over().await?;
        Ok(self.resume(left_over).await)
    }

    /// Reads the messages a previous process accepted but never answered. Call it before any
    /// channel starts: read later, the journal also holds what this process has just accepted
    /// and queued itself, and those messages would run twice (a Slack event delivered while
    /// the gateway was down arrives the moment its socket opens).
    pub async fn left_over(&self) -> Result<LeftOver, DispatchError> {
        if self.inner.keeper.is_some() {
            // Shared state: what other replicas own is theirs; what lapsed is taken over by
            // the keeper's poll, session by session.
            return Ok(LeftOver { messages: Vec::new(), orphans: Vec::new() });
        }
        // The messages and the replies they were getting, read before this process records any.
        let (messages, deliveries) = self.inner.journal.left_over().await?;
        // What the channels deliver from now on waits behind these.
        self.inner.scheduler.hold();
        let orphans = self.inner.ledger.recover(deliveries).await;
        Ok(LeftOver { messages, orphans })
    }

    /// Runs what [`Dispatcher::left_over`] found; call it once the channels are attached, so
    /// the replies have somewhere to go. Returns how many messages it queued.
    pub async fn resume(&self, left_over: LeftOver) -> usize {
        self.delete_orphans(left_over.orphans);
        let pending = left_over.messages;
        let count = pending.len();
        if count > 0 {
            tracing::info!(count, "answering messages accepted before the last shutdown");
        }
        let mut settings = HashMap::with_capacity(count);
        for message in &pending {
            settings.insert(message.id, self.settings_for(&message.session_key, &message.message.channel).await);
        }
        let default = QueueSettings::resolve(&self.inner.config.messages.queue, "", &Default::default());
        self.inner.scheduler.restore(pending, |message| settings.get(&message.id).copied().unwrap_or(default)).await;
        count
    }

    /// Registers a channel, starts it and feeds its messages through [`Dispatcher::handle`]
    /// until its stream ends. The handle finishes once every message taken was handled.
    ///
    /// Messages are handled by [`INBOUND_SHARDS`] tasks, each owning the chats that hash to
    /// it: one chat's messages are handled in order, different chats' side by side — so a
    /// burst's database writes meet in the same group commit instead of queueing one by one.
    pub async fn attach(&self, channel: Arc<dyn Channel>) -> Result<JoinHandle<()>, ferry_channel::ChannelError> {
        if let (Some(keeper), Some(name)) = (&self.inner.keeper, channel.singleton_ingress()) {
            // Sends work at once; receiving waits for this replica to hold the singleton.
            self.inner.channels.register(channel.clone());
            let shards = self.shards();
            let leases = keeper.leases().clone();
            return Ok(tokio::spawn(singleton::receive(leases, channel, name, shards)));
        }
        let inbound = channel.start().await?;
        self.inner.channels.register(channel.clone());
        let shards = self.shards();
        let channels = self.inner.channels.clone();
        Ok(tokio::spawn(async move {
            shards.feed(inbound).await;
            shards.close().await;
            channels.mark_stopped(channel.name(), channel.account_id());
            tracing::info!(
                channel = channel.name(),
                account = channel.account_id(),
                "channel stopped delivering messages"
            );
        }))
    }

    /// [`INBOUND_SHARDS`] tasks handling one channel's deliveries.
    fn shards(&self) -> Shards {
        let (senders, workers): (Vec<_>, Vec<_>) = (0..INBOUND_SHARDS)
            .map(|_| {
                let (sender, mut receiver) = mpsc::channel::<InboundDelivery>(SHARD_BACKLOG);
                let dispatcher = self.clone();
                let worker = tokio::spawn(async move {
                    while let Some(delivery) = receiver.recv().await {
                        dispatcher.handle(delivery).await;
                    }
                });
                (sender, worker)
            })
            .unzip();
        Shards { senders, workers, hasher: RandomState::new() }
    }

    /// One inbound message, from routing to the queue.
    pub async fn handle(&self, delivery: InboundDelivery) {
        let message = &delivery.message;
        let span = tracing::info_span!("inbound", channel = %message.channel, chat_id = %message.chat.id, message_id = %message.message_id);
        self.handle_in_span(delivery).instrument(span).await
    }

    async fn handle_in_span(&self, delivery: InboundDelivery) {
        let InboundDelivery { message, ack } = delivery;
        let oversized = too_long(&message.text, self.inner.router.max_inbound_chars()).is_some();
        let command = if oversized { None } else { parse_command(&message.text) };
        // A message that runs is journaled in the same record that marks it as seen; one too
        // long to run is not journaled at all.
        let encoded = match command {
            Some(_) => None,
            None if oversized => None,
            None => match QueueJournal::encode(&message) {
                Ok(encoded) => Some(encoded),
                Err(error) => {
                    tracing::error!(%error, "cannot encode a message for the queue journal; leaving it unacknowledged");
                    metrics().inbound(&message.channel, InboundOutcome::Error);
                    self.reply(&message, NOT_ACCEPTED).await;
                    return;
                }
            },
        };
        let routed = self.route_through_outages(&message, encoded).await;
        let Routed { decision, admitted } = match routed {
            Ok(routed) => routed,
            Err(error) => {
                // Nothing was recorded and the platform is not told we have it: it delivers
                // the message again. The sender is told in case it does not.
                tracing::error!(%error, "cannot route a message; leaving it unacknowledged for redelivery");
                metrics().inbound(&message.channel, InboundOutcome::Error);
                if matches!(error, RoutingError::Admission(_)) {
                    drop(ack);
                    self.reply(&message, NOT_ACCEPTED).await;
                }
                return;
            }
        };
        if let Some(outcome) = not_run(&decision) {
            metrics().inbound(&message.channel, outcome);
        }
        match decision {
            RouteDecision::Duplicate | RouteDecision::Ignored(_) | RouteDecision::Denied { reply: None, .. } => {
                ack.accept()
            }
            RouteDecision::Pairing { reply } | RouteDecision::Denied { reply: Some(reply), .. } => {
                ack.accept();
                self.reply(&message, &reply).await;
            }
            RouteDecision::TooLong { chars, limit } => {
                ack.accept();
                self.reply(&message, &too_long_notice(chars, limit)).await;
            }
            RouteDecision::Run { session_key, prompt, .. } => {
                ack.accept();
                self.received(&message, session_key.as_str());
                match (command, admitted) {
                    (Some(command), _) => {
                        metrics().inbound(&message.channel, InboundOutcome::Command);
                        self.control(command, session_key.as_str(), &message).await
                    }
                    (None, Some(Admitted { id, enqueued_at })) => {
                        let session_key = session_key.as_str().to_owned();
                        self.submit(QueuedMessage { id, session_key, message, prompt, enqueued_at }).await
                    }
                    (None, None) => tracing::error!("a message to run was admitted without a journal entry"),
                }
            }
        }
    }

    /// Routes and admits `message`, trying again while the state store is unreachable (see
    /// `state::outage`): holding the message here is what keeps it on a platform that does
    /// not deliver it again (Discord), and spares the sender a refusal on the others. Routing
    /// a message again is safe: one whose first admission did commit is a duplicate the
    /// second time, and its journal entry is run from there.
    async fn route_through_outages(
        &self,
        message: &InboundMessage,
        encoded: Option<String>,
    ) -> Result<Routed, RoutingError> {
        through_outages("an inbound message", None, RoutingError::is_unavailable, || {
            self.inner.router.route_and_admit(message, encoded.clone())
        })
        .await
    }

    /// Previews of killed runs that nothing will stream into again, deleted in the
    /// background.
    fn delete_orphans(&self, orphans: Vec<OrphanPreview>) {
        if orphans.is_empty() {
            return;
        }
        let (channels, schedulers) = (self.inner.channels.clone(), self.inner.schedulers.clone());
        tokio::spawn(async move {
            for orphan in orphans {
                recovered::delete_orphan(&channels, &schedulers, &orphan).await;
            }
        });
    }

    /// A journaled message to run: here, or (state shared with other replicas) where its
    /// session's lease is held.
    async fn submit(&self, queued: QueuedMessage) {
        match &self.inner.keeper {
            None => self.submit_locally(queued).await,
            Some(keeper) => {
                let channel = queued.message.channel.clone();
                keeper.arrived(&queued.session_key).await;
                if !keeper.leases().holds(&queued.session_key) {
                    metrics().inbound(&channel, InboundOutcome::Forwarded);
                }
            }
        }
    }

    /// Runs a scheduled job's fire, journaled by the jobs store: here, or where its
    /// session's lease is held (`cron::ticker`).
    pub async fn submit_scheduled(&self, queued: QueuedMessage) {
        self.submit(queued).await
    }

    /// Hands a journaled message to this process's scheduler.
    async fn submit_locally(&self, queued: QueuedMessage) {
        let message = queued.message.clone();
        let settings = self.settings_for(&queued.session_key, &message.channel).await;
        let submitted = self.inner.scheduler.submit(queued, settings).await;
        tracing::debug!(admission = ?submitted.admission, "message admitted");
        let outcome =
            if submitted.admission == Admission::Rejected { InboundOutcome::Rejected } else { InboundOutcome::Run };
        // Typing is shown by the run once it starts (and only then: a flood of waiting
        // messages must not fire an indicator each).
        metrics().inbound(&message.channel, outcome);
        if submitted.admission == Admission::Rejected {
            self.reply(&message, QUEUE_FULL).await;
        }
        for dropped in &submitted.dropped {
            self.reply(&dropped.message, DROPPED_OLDER).await;
        }
    }

    /// The queue behaviour for a session: its override, else its channel's, else the default.
    async fn settings_for(&self, session_key: &str, channel: &str) -> QueueSettings {
        let overrides = self.inner.overrides.get(self.inner.store.as_ref(), session_key).await;
        QueueSettings::resolve(&self.inner.config.messages.queue, channel, &overrides)
    }

    /// Sends a short notice to where `message` came from, threaded to it where the
    /// channel can.
    async fn reply(&self, message: &InboundMessage, text: &str) {
        let Some(channel) = self.inner.channels.get(&message.channel, Some(&message.account_id)) else {
            tracing::warn!(channel = %message.channel, "cannot reply: the channel is not connected");
            return;
        };
        let scheduler = self.inner.schedulers.for_channel(&channel);
        let Some(text) = self.sending(message, text).await else { return };
        let mut notice = OutboundMessage::reply_to(message, &text);
        notice.idempotency_key = Some(notice_key(message, &text));
        // Quoting the message says which one a notice is about.
        if channel.capabilities().supports_reply_to {
            notice.reply_to_message_id = Some(message.message_id.clone());
        }
        match scheduler.send(notice).await {
            Ok(sent) => self.sent(message, &sent.message_id, &text),
            Err(error) => tracing::warn!(%error, "sending a notice failed"),
        }
    }
}

/// How a routing decision that does not run its message counts in
/// `ferry_inbound_messages_total`; `None` for one that runs.
fn not_run(decision: &RouteDecision) -> Option<InboundOutcome> {
    match decision {
        RouteDecision::Run { .. } => None,
        RouteDecision::Duplicate => Some(InboundOutcome::Duplicate),
        RouteDecision::Ignored(_) => Some(InboundOutcome::Ignored),
        RouteDecision::Denied { .. } => Some(InboundOutcome::Denied),
        RouteDecision::Pairing { .. } => Some(InboundOutcome::Pairing),
        RouteDecision::TooLong { .. } => Some(InboundOutcome::Rejected),
    }
}

/// Told to a user whose message was over `messages.max_inbound_chars`.
fn too_long_notice(chars: usize, limit: usize) -> String {
    format!(
        "⚠️ Your message is too long for me: {chars} characters, and the limit is {limit}. Please send a shorter one."
    )
}

/// A notice's idempotency key: the message it answers and what it says, so a notice that
/// is retried is not posted twice while different notices about one message all go out.
fn notice_key(message: &InboundMessage, text: &str) -> String {
    let mut hasher = std::hash::DefaultHasher::new();
    text.hash(&mut hasher);
    format!(
        "notice:{}:{}:{}:{}:{}:{:016x}",
        message.channel,
        message.account_id,
        message.chat.id,
        message.thread_id.as_deref().unwrap_or(""),
        message.message_id,
        hasher.finish()
    )
}

/// The tasks handling one channel's deliveries, each owning the chats that hash to it.
pub(crate) struct Shards {
    senders: Vec<mpsc::Sender<InboundDelivery>>,
    workers: Vec<JoinHandle<()>>,
    hasher: RandomState,
}

impl Shards {
    /// Hands every delivery of `inbound` to its chat's task, until the stream ends.
    async fn feed(&self, mut inbound: ferry_channel::InboundStream) {
        while let Some(delivery) = inbound.next().await {
            let shard = self.hasher.hash_one(&delivery.message.chat.id) as usize % self.senders.len();
            if self.senders[shard].send(delivery).await.is_err() {
                // Its worker died (a bug); the message stays unacknowledged and comes again.
                tracing::error!(shard, "an inbound worker is gone; leaving a message for redelivery");
            }
        }
    }

    /// Waits for every delivery handed over to be handled.
    async fn close(self) {
        drop(self.senders);
        for worker in self.workers {
            if let Err(error) = worker.await {
                tracing::error!(%error, "an inbound worker failed");
            }
        }
    }
}

/// Messages a previous process accepted but never answered, read by
/// [`Dispatcher::left_over`] before the channels start and run by [`Dispatcher::resume`].
#[derive(Debug)]
#[must_use = "left-over messages are answered only when passed to Dispatcher::resume"]
pub struct LeftOver {
    messages: Vec<QueuedMessage>,
    /// Previews of killed runs that nothing will stream into again: deleted on resume.
    orphans: Vec<OrphanPreview>,
}
