//! When each accepted message runs (SPEC §5): one run at a time per session, the queue
//! modes for messages that arrive while a run is active, the quiet window, the cap.
//!
//! A session can hold several chats (`session.dm_scope = "main"` puts every DM in one), but a
//! run answers in one place only. So every queue decision is made per reply place: a batch,
//! the summaries of messages the cap dropped, messages kept after a failed run, steering and
//! interrupts only ever combine messages from the same chat and thread, and the cap counts
//! each place's messages. Every user is answered in their own chat, never in someone else's.
//!
//! The scheduler decides; a [`RunExecutor`] does the run. Decisions are made under one
//! lock and never wait on I/O inside it; journal writes and run starts happen after.
//! A session with no active run and nothing queued has no state here at all, so idle
//! sessions cost no memory.
//!
//! The waiting messages of all sessions are `ferry_queue_depth`; how long a message waited
//! for its session's run to start is `ferry_lane_wait_seconds{lane="session"}`.

mod pending;

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use async_trait::async_trait;
use chrono::Utc;
use futures::FutureExt;
use futures::future::BoxFuture;
use prometheus_client::metrics::gauge::Gauge;
use tokio_util::sync::CancellationToken;

use super::journal::{AnsweredLog, QueuedMessage, ReplyPlace};
use super::lanes::{GlobalLane, SLOW_LANE_WAIT};
use super::prompt::{follow_up_prompt, summary_line};
use super::settings::QueueSettings;
use crate::agent::SteerInbox;
use crate::config::{DropPolicy, QueueMode};
use crate::metrics::{LaneKind, metrics};
use pending::Pending;

/// How often a shutdown checks whether runs are done.
const SHUTDOWN_POLL: Duration = Duration::from_millis(20);
/// How long aborted runs get to wind down (send their terminal event) at shutdown.
const ABORT_WAIT: Duration = Duration::from_secs(5);

/// One run to execute: what to ask, which messages it answers, and its controls.
pub struct RunJob {
    pub session_key: String,
    pub prompt: String,
    /// The messages this run answers, oldest first. The reply goes where the last came from.
    pub messages: Vec<QueuedMessage>,
    /// Messages the queue's cap dropped with `drop = "summarize"`: the prompt carries their
    /// summaries, and this run answers them too.
    pub summarized: Vec<i64>,
    /// Those messages' summary lines, for rebuilding the prompt when the executor changes
    /// the batch (`follow_up_prompt`).
    pub summaries: Vec<String>,
    pub cancel: CancellationToken,
    pub steer: SteerInbox,
    /// The limit on runs across sessions. The executor holds a slot of it while the agent
    /// runs — only then, so the writes around a run do not count against it.
    pub global: GlobalLane,
}

/// What the scheduler needs back from a run.
#[derive(Debug, Default)]
pub struct RunReport {
    /// Steering messages the run did not take; they run as follow-ups.
    pub unconsumed_steer: Vec<String>,
    /// The run's messages were already marked answered, in the same write that recorded
    /// their reply delivered (the delivery ledger): the journal needs no second write.
    pub answered: bool,
    /// Messages the run could not answer for a passing reason (the model failed even after
    /// retries, or its channel was still connecting): they stay journaled and are answered
    /// with the next message from their chat, when their channel connects
    /// ([`Scheduler::resume_kept`]), or after a restart, instead of being dropped.
    pub retry_later: Vec<QueuedMessage>,
    /// The session's lease was lost, or lapsed here, while the run went on: its writes
    /// were refused, and its messages (those steered into it too) stay journaled for the
    /// session's next holder rather than being marked answered.
    pub fenced: bool,
}

/// Does the runs the scheduler starts (the dispatcher: agent run + reply).
#[async_trait]
pub trait RunExecutor: Send + Sync + 'static {
    async fn execute(&self, job: RunJob) -> RunReport;
}

/// What happened to a submitted message.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Admission {
    /// The session was idle: it runs now.
    Started,
    /// It waits for the active run (and the quiet window) to end.
    Queued { position: usize },
    /// It was handed to the active run.
    Steered,
    /// Handed to the active run and also queued for a follow-up (`steer-backlog`).
    SteeredAndQueued,
    /// The active run is being aborted; this message runs next.
    Interrupting,
    /// The queue is full and `drop = "new"`: the message was not accepted.
    Rejected,
}

/// A submission's outcome, with any older message the cap pushed out (`drop = "old"`),
/// whose sender should be told.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Submitted {
    pub admission: Admission,
    pub dropped: Vec<QueuedMessage>,
}

/// Whose work `/stop` ends.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum StopScope {
    /// The session's run, whoever it answers, and everything waiting.
    Session,
    /// Only what belongs to one reply place: the run if it answers there, and the messages
    /// waiting from there. In a session several people share (`dm_scope = "main"`), one
    /// person's `/stop` leaves the others' run and messages alone.
    Place(ReplyPlace),
}

/// What `/stop` did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Stopped {
    pub aborted_run: bool,
    pub cleared: usize,
}

/// A session's queue as `/status` shows it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct LaneStatus {
    pub running: bool,
    /// The running run streams and can take steering messages.
    pub streaming: bool,
    pub queued: usize,
}

#[derive(Clone)]
pub struct Scheduler {
    inner: Arc<Inner>,
}

struct Inner {
    lanes: Mutex<HashMap<String, Lane>>,
    /// Identifies runs, so a finished run can only retire itself, never a successor.
    next_token: AtomicU64,
    executor: Arc<dyn RunExecutor>,
    journal: Arc<dyn AnsweredLog>,
    global: GlobalLane,
    /// Set by [`Scheduler::shut_down`]: no run starts any more.
    closing: AtomicBool,
    /// Set by [`Scheduler::hold`] until [`Scheduler::restore`]: new messages wait behind the
    /// older ones a previous process left, so a chat's answers keep their order.
    holding: AtomicBool,
    /// Runs executing now.
    running: AtomicUsize,
    /// Counts the messages waiting in every lane's queue (`ferry_queue_depth`).
    depth: Gauge,
    /// Told the key of every session whose lane goes idle (nothing running, waiting or
    /// kept), when set ([`Scheduler::notify_idle`]): its lease can be given back.
    idle: Mutex<Option<tokio::sync::mpsc::UnboundedSender<String>>>,
}

/// One session's state; exists only while the session has work.
struct Lane {
    settings: QueueSettings,
    active: Option<Active>,
    pending: Pending,
    /// Messages the cap dropped under `drop = "summarize"`. Their summaries go into the next
    /// run for their place, and they stay journaled until that run is done, so a crash
    /// before it does not lose them.
    summarized: Vec<QueuedMessage>,
    /// Bumped by every arrival: a quiet-window timer only fires if nothing came since.
    generation: u64,
    /// After an interrupt the next run starts without a quiet window.
    skip_quiet: bool,
    /// Messages a failed run left for later ([`RunReport::retry_later`]): they join the next
    /// run for their place, which only a new message starts.
    parked: Vec<QueuedMessage>,
}

struct Active {
    token: u64,
    /// Where the run answers: only messages from there are steered into it or interrupt it.
    place: ReplyPlace,
    cancel: CancellationToken,
    steer: SteerInbox,
    /// Messages handed to the run by steering, in order.
    steered: Vec<QueuedMessage>,
}

/// The messages one run answers, all from one place.
struct Batch {
    place: ReplyPlace,
    /// Oldest first. Empty only when the place's kept messages are what runs
    /// ([`Scheduler::resume_kept`]); `start_job` puts them in front.
    messages: Vec<QueuedMessage>,
}

impl Batch {
    fn of(first: QueuedMessage) -> Self {
        Self { place: ReplyPlace::of(&first), messages: vec![first] }
    }
}

/// Work decided under the lock, done after it.
#[derive(Default)]
struct Effects {
    remove: Vec<i64>,
    start: Option<(String, RunJob, u64)>,
    quiet: Option<(String, u64, Duration)>,
}

impl Scheduler {
    pub fn new(executor: Arc<dyn RunExecutor>, journal: Arc<dyn AnsweredLog>, max_concurrent: usize) -> Self {
        Self::with_depth_gauge(executor, journal, max_concurrent, metrics().queue_depth().clone())
    }

    /// A scheduler counting its waiting messages in `depth`.
    fn with_depth_gauge(
        executor: Arc<dyn RunExecutor>,
        journal: Arc<dyn AnsweredLog>,
        max_concurrent: usize,
        depth: Gauge,
    ) -> Self {
        Self {
            inner: Arc::new(Inner {
                lanes: Mutex::new(HashMap::new()),
                next_token: AtomicU64::new(1),
                executor,
                journal,
                global: GlobalLane::new(max_concurrent),
                closing: AtomicBool::new(false),
                holding: AtomicBool::new(false),
                running: AtomicUsize::new(0),
                depth,
                idle: Mutex::new(None),
            }),
        }
    }

    /// Admits a journaled message under `settings`.
    pub async fn submit(&self, message: QueuedMessage, settings: QueueSettings) -> Submitted {
        let key = message.session_key.clone();
        let mut effects = Effects::default();
        let submitted = {
            let mut lanes = self.lanes();
            let lane = lanes.entry(key.clone()).or_insert_with(|| Lane::new(settings, &self.inner.depth));
            lane.settings = settings;
            lane.generation += 1;
            let holding = self.inner.holding.load(Ordering::Acquire);
            match (&lane.active, lane.pending.is_empty()) {
                // Older messages are about to be restored: this one waits behind them.
                (None, _) if holding => Self::enqueue(lane, message, &mut effects),
                (None, true) => {
                    effects.start = Some(self.start_job(&key, lane, Batch::of(message)));
                    Submitted { admission: Admission::Started, dropped: Vec::new() }
                }
                // Nothing runs but a quiet window is open: join the queue, restart the window.
                (None, false) => {
                    let submitted = Self::enqueue(lane, message, &mut effects);
                    effects.quiet = Some((key.clone(), lane.generation, lane.settings.debounce));
                    submitted
                }
                (Some(_), _) => self.admit_while_running(lane, message, &mut effects),
            }
        };
        self.apply(effects).await;
        submitted
    }

    fn admit_while_running(&self, lane: &mut Lane, message: QueuedMessage, effects: &mut Effects) -> Submitted {
        let Some(active) = lane.active.as_mut() else { return Self::enqueue(lane, message, effects) };
        if !active.place.holds(&message) {
            // The run answers another chat: this message waits for a run of its own.
            return Self::enqueue(lane, message, effects);
        }
        // Steering hands the run text only: a message with files waits for a run that takes
        // them in.
        let mode = match lane.settings.mode {
            QueueMode::Steer | QueueMode::SteerBacklog if !message.message.attachments.is_empty() => {
                QueueMode::Followup
            }
            mode => mode,
        };
        match mode {
            QueueMode::Collect | QueueMode::Followup => Self::enqueue(lane, message, effects),
            QueueMode::Steer => {
                // Its chat's earlier messages still waiting (they came before the run could
                // take them) go in first, in order: steered past them, this one would be
                // answered before them. One with files waits for a run of its own, and so
                // does everything after it.
                while let Some(earlier) = lane.pending.iter().find(|item| item.same_place(&message)) {
                    if !earlier.message.attachments.is_empty() || !active.steer.is_accepting() {
                        return Self::enqueue(lane, message, effects);
                    }
                    let Some(earlier) = lane.pending.remove_first(|item| item.same_place(&message)) else { break };
                    if let Some(earlier) = active.steer_in(earlier) {
                        lane.pending.push_front(earlier);
                        return Self::enqueue(lane, message, effects);
                    }
                }
                match active.steer_in(message) {
                    None => Submitted { admission: Admission::Steered, dropped: Vec::new() },
                    // Not streaming yet, or finishing: fall back to a follow-up.
                    Some(message) => Self::enqueue(lane, message, effects),
                }
            }
            QueueMode::SteerBacklog => {
                // Steered now; the queued copy keeps the journal entry until its own run.
                let steered = active.steer.push_for(message.prompt.clone(), client_run_id(&message), None).is_ok();
                let mut submitted = Self::enqueue(lane, message, effects);
                if steered && submitted.admission != Admission::Rejected {
                    submitted.admission = Admission::SteeredAndQueued;
                }
                submitted
            }
            QueueMode::Interrupt => {
                active.cancel.cancel();
                // The newest message replaces what its own chat still had waiting; other
                // chats' messages keep their turn.
                let place = ReplyPlace::of(&message);
                let superseded = lane.pending.take_all(|item| place.holds(item)).into_iter();
                let superseded = superseded.chain(lane.summarized.extract_if(.., |item| place.holds(item)));
                effects.remove.extend(superseded.map(|item| item.id));
                lane.pending.push_back(message);
                lane.skip_quiet = true;
                Submitted { admission: Admission::Interrupting, dropped: Vec::new() }
            }
        }
    }

    /// Queues a message, applying the cap to the messages waiting from its place (one
    /// chatty user cannot push another user's messages out of a shared session).
    fn enqueue(lane: &mut Lane, message: QueuedMessage, effects: &mut Effects) -> Submitted {
        let mut dropped = Vec::new();
        let from_here = |item: &QueuedMessage| item.same_place(&message);
        if lane.pending.iter().filter(|item| from_here(item)).count() >= lane.settings.cap {
            match lane.settings.drop {
                DropPolicy::New => {
                    effects.remove.push(message.id);
                    return Submitted { admission: Admission::Rejected, dropped };
                }
                DropPolicy::Old => {
                    if let Some(oldest) = lane.pending.remove_first(from_here) {
                        effects.remove.push(oldest.id);
                        dropped.push(oldest);
                    }
                }
                DropPolicy::Summarize => {
                    if let Some(oldest) = lane.pending.remove_first(from_here) {
                        lane.summarized.push(oldest);
                    }
                }
            }
        }
        lane.pending.push_back(message);
        Submitted { admission: Admission::Queued { position: lane.pending.len() }, dropped }
    }

    /// Aborts the active run and clears the queue (`/stop`).
    pub async fn stop(&self, session_key: &str, scope: &StopScope) -> Stopped {
        let mut effects = Effects::default();
        let stopped = {
            let mut lanes = self.lanes();
            match lanes.get_mut(session_key) {
                None => Stopped { aborted_run: false, cleared: 0 },
                Some(lane) => {
                    let cleared = match scope {
                        StopScope::Session => {
                            let cleared = lane.pending.len() + lane.parked.len();
                            effects.remove.extend(lane.pending.drain_all().map(|item| item.id));
                            effects.remove.extend(lane.parked.drain(..).map(|item| item.id));
                            effects.remove.extend(lane.summarized.drain(..).map(|item| item.id));
                            lane.skip_quiet = false;
                            cleared
                        }
                        StopScope::Place(place) => {
                            let pending = lane.pending.take_all(|item| place.holds(item));
                            let parked = drain_where(&mut lane.parked, |item| place.holds(item));
                            let summarized = drain_where(&mut lane.summarized, |item| place.holds(item));
                            let cleared = pending.len() + parked.len();
                            effects
                                .remove
                                .extend(pending.into_iter().chain(parked).chain(summarized).map(|item| item.id));
                            cleared
                        }
                    };
                    let aborted_run = match &lane.active {
                        Some(active) if scope_covers(scope, &active.place) => {
                            active.cancel.cancel();
                            true
                        }
                        _ => false,
                    };
                    let empty = lane.pending.is_empty() && lane.parked.is_empty() && lane.summarized.is_empty();
                    if lane.active.is_none() && empty {
                        lanes.remove(session_key);
                        self.went_idle(session_key);
                    }
                    Stopped { aborted_run, cleared }
                }
            }
        };
        self.apply(effects).await;
        stopped
    }

    /// Sends the key of every session whose lane goes idle to `idle` from now on.
    pub fn notify_idle(&self, idle: tokio::sync::mpsc::UnboundedSender<String>) {
        *self.inner.idle.lock().unwrap_or_else(|poisoned| poisoned.into_inner()) = Some(idle);
    }

    fn went_idle(&self, key: &str) {
        if let Some(idle) = self.inner.idle.lock().unwrap_or_else(|poisoned| poisoned.into_inner()).as_ref() {
            let _ = idle.send(key.to_owned());
        }
    }

    /// Gives up a session this process may no longer run (its lease passed to another
    /// replica): the active run is cancelled and the waiting messages are let go, without
    /// touching the journal, where the session's new holder finds them. Returns whether the
    /// session had anything here.
    pub fn abandon(&self, session_key: &str) -> bool {
        let Some(lane) = self.lanes().remove(session_key) else { return false };
        if let Some(active) = &lane.active {
            active.cancel.cancel();
        }
        true
    }

    pub fn status(&self, session_key: &str) -> LaneStatus {
        self.lanes()
            .get(session_key)
            .map(|lane| LaneStatus {
                running: lane.active.is_some(),
                streaming: lane.active.as_ref().is_some_and(|active| active.steer.is_accepting()),
                queued: lane.pending.len(),
            })
            .unwrap_or_default()
    }

    /// Sessions with work in flight or waiting; idle sessions are not counted (or kept).
    pub fn busy_sessions(&self) -> usize {
        self.lanes().len()
    }

    /// Starts no run until [`Scheduler::restore`]: call it before the channels start, so
    /// messages they deliver meanwhile queue behind the older ones being restored.
    pub fn hold(&self) {
        self.inner.holding.store(true, Ordering::Release);
    }

    /// Runs the messages kept for later ([`RunReport::retry_later`]) whose replies go
    /// through `channel`, in every session with nothing running or waiting: the channel was
    /// not connected when they ran, and now it is.
    pub async fn resume_kept(&self, channel: &str) {
        let mut starts = Vec::new();
        {
            let mut lanes = self.lanes();
            for (key, lane) in lanes.iter_mut() {
                if lane.active.is_some() || !lane.pending.is_empty() {
                    continue;
                }
                let Some(first) = lane.parked.iter().find(|item| item.message.channel == channel) else { continue };
                // Its place's kept messages join the run in `start_job`.
                let batch = Batch { place: ReplyPlace::of(first), messages: Vec::new() };
                starts.push(self.start_job(key, lane, batch));
            }
        }
        for start in starts {
            self.apply(Effects { start: Some(start), ..Effects::default() }).await;
        }
    }

    /// Schedules messages left in the journal by a previous process, per session in order,
    /// ahead of anything that arrived while the scheduler held (see [`Scheduler::hold`]).
    pub async fn restore(&self, messages: Vec<QueuedMessage>, settings: impl Fn(&QueuedMessage) -> QueueSettings) {
        let mut starts = Vec::new();
        {
            let mut lanes = self.lanes();
            for message in messages.into_iter().rev() {
                let lane = lanes
                    .entry(message.session_key.clone())
                    .or_insert_with(|| Lane::new(settings(&message), &self.inner.depth));
                lane.pending.push_front(message);
            }
            self.inner.holding.store(false, Ordering::Release);
            let keys: Vec<String> = lanes.keys().cloned().collect();
            for key in keys {
                if let Some(lane) = lanes.get_mut(&key)
                    && lane.active.is_none()
                    && let Some(batch) = Self::restored_batch(lane)
                {
                    starts.push(self.start_job(&key, lane, batch));
                }
            }
        }
        for start in starts {
            self.apply(Effects { start: Some(start), ..Effects::default() }).await;
        }
    }

    /// The messages the next follow-up run answers: the oldest, and for `collect` every
    /// other message queued from its place (in order); other places' messages wait.
    fn next_batch(lane: &mut Lane) -> Option<Batch> {
        let first = lane.pending.pop_front()?;
        let mut batch = Batch::of(first);
        if lane.settings.mode == QueueMode::Collect {
            batch.messages.extend(lane.pending.take_all(|item| batch.place.holds(item)));
        }
        Some(batch)
    }

    /// The first run after a restart: [`Scheduler::next_batch`], except that in steer mode
    /// it answers every restored message of its place too. They arrived while the killed
    /// run went on and would have been steered into it; one run each would answer the
    /// oldest only after everything sent since (steered into the first), and a backlog that
    /// grows with every restart would overflow the queue.
    fn restored_batch(lane: &mut Lane) -> Option<Batch> {
        let mut batch = Self::next_batch(lane)?;
        if lane.settings.mode == QueueMode::Steer {
            batch.messages.extend(lane.pending.take_all(|item| batch.place.holds(item)));
        }
        Some(batch)
    }

    /// Starts a run answering `batch` (one place), joined by the messages a failed run kept
    /// and the summaries of dropped messages of the same place; together never empty.
    fn start_job(&self, key: &str, lane: &mut Lane, batch: Batch) -> (String, RunJob, u64) {
        let Batch { place, messages } = batch;
        let mut batch: Vec<QueuedMessage> = lane.parked.extract_if(.., |item| place.holds(item)).collect();
        batch.extend(messages);
        let token = self.inner.next_token.fetch_add(1, Ordering::Relaxed);
        let summarized: Vec<QueuedMessage> = lane.summarized.extract_if(.., |item| place.holds(item)).collect();
        let summaries: Vec<String> = summarized.iter().map(|item| summary_line(&item.message.text)).collect();
        let prompt = follow_up_prompt(&batch, &summaries);
        let summarized = summarized.iter().map(|item| item.id).collect();
        lane.skip_quiet = false;
        let cancel = CancellationToken::new();
        let steer = SteerInbox::new();
        lane.active = Some(Active { token, place, cancel: cancel.clone(), steer: steer.clone(), steered: Vec::new() });
        let job = RunJob {
            session_key: key.to_owned(),
            prompt,
            messages: batch,
            summarized,
            summaries,
            cancel,
            steer,
            global: self.inner.global.clone(),
        };
        (key.to_owned(), job, token)
    }

    /// The active run of `key` ended: forget what it answered and decide what runs next.
    async fn finished(&self, key: &str, token: u64, answered: Vec<i64>, report: RunReport) {
        let kept: Vec<i64> = report.retry_later.iter().map(|message| message.id).collect();
        let remove = if report.answered || report.fenced {
            Vec::new()
        } else {
            answered.into_iter().filter(|id| !kept.contains(id)).collect()
        };
        let mut effects = Effects { remove, ..Effects::default() };
        {
            let mut lanes = self.lanes();
            let Some(lane) = lanes.get_mut(key) else { return };
            let Some(active) = lane.active.take_if(|active| active.token == token) else { return };
            if self.inner.closing.load(Ordering::Acquire) && active.cancel.is_cancelled() {
                // Cut short by the shutdown: its messages stay journaled and are answered
                // after the restart.
                return;
            }
            // A run kept for later (the model failed for a passing reason) answered nothing,
            // the messages steered into it included: they wait with its own.
            let kept_for_later = !report.retry_later.is_empty();
            lane.parked.extend(report.retry_later);
            let mut steered = active.steered;
            let unconsumed = report.unconsumed_steer.len().min(steered.len());
            let returned = steered.split_off(steered.len() - unconsumed);
            if kept_for_later {
                lane.parked.extend(steered);
            } else if !report.fenced {
                effects.remove.extend(steered.iter().map(|item| item.id));
            }
            for item in returned.into_iter().rev() {
                lane.pending.push_front(item);
            }
            if lane.pending.is_empty() {
                if lane.parked.is_empty() {
                    lanes.remove(key);
                    self.went_idle(key);
                }
            } else if lane.skip_quiet {
                if let Some(batch) = Self::next_batch(lane) {
                    effects.start = Some(self.start_job(key, lane, batch));
                }
            } else {
                effects.quiet = Some((key.to_owned(), lane.generation, lane.settings.debounce));
            }
        }
        self.apply(effects).await;
    }

    /// The quiet window of `key` passed; run what waits unless something arrived since.
    async fn quiet_elapsed(&self, key: &str, generation: u64) {
        let start = {
            let mut lanes = self.lanes();
            let Some(lane) = lanes.get_mut(key) else { return };
            if lane.active.is_some() || lane.generation != generation || self.inner.holding.load(Ordering::Acquire) {
                return;
            }
            Self::next_batch(lane).map(|batch| self.start_job(key, lane, batch))
        };
        self.apply(Effects { start, ..Effects::default() }).await;
    }

    /// Boxed: runs it starts call back into the scheduler, and the recursion needs a
    /// future type the compiler can see is `Send`.
    fn apply(&self, effects: Effects) -> BoxFuture<'_, ()> {
        async move { self.apply_now(effects).await }.boxed()
    }

    async fn apply_now(&self, effects: Effects) {
        // Timers and runs first: the quiet window counts from the decision, not from when
        // the journal write below completes.
        if let Some((key, generation, delay)) = effects.quiet {
            let deadline = tokio::time::Instant::now() + delay;
            let scheduler = self.clone();
            tokio::spawn(async move {
                tokio::time::sleep_until(deadline).await;
                scheduler.quiet_elapsed(&key, generation).await;
            });
        }
        if let Some((key, job, token)) = effects.start
            && !self.inner.closing.load(Ordering::Acquire)
        {
            let scheduler = self.clone();
            scheduler.inner.running.fetch_add(1, Ordering::AcqRel);
            tokio::spawn(async move {
                let waited = Utc::now() - job.messages.first().map_or_else(Utc::now, |m| m.enqueued_at);
                let waited = waited.to_std().unwrap_or_default();
                metrics().lane_waited(LaneKind::Session, waited);
                if waited > SLOW_LANE_WAIT {
                    tracing::info!(session_key = %key, waited_ms = waited.as_millis() as u64, "a message waited long in its session lane");
                }
                let answered: Vec<i64> =
                    job.messages.iter().map(|m| m.id).chain(job.summarized.iter().copied()).collect();
                let report = scheduler.inner.executor.execute(job).await;
                scheduler.finished(&key, token, answered, report).await;
                scheduler.inner.running.fetch_sub(1, Ordering::AcqRel);
            });
        }
        if let Err(error) = self.inner.journal.forget(&effects.remove).await {
            tracing::error!(%error, "cannot remove answered messages from the queue journal; they may run again after a restart");
        }
    }

    /// Stops starting runs (waiting messages stay journaled for the next start), gives the
    /// running ones `grace` to finish, then aborts the rest — they end with `lifecycle end
    /// {aborted}` and their messages are answered after the restart. Returns how many were
    /// aborted.
    pub async fn shut_down(&self, grace: Duration) -> usize {
        self.inner.closing.store(true, Ordering::Release);
        let deadline = tokio::time::Instant::now() + grace;
        while self.running() > 0 && tokio::time::Instant::now() < deadline {
            tokio::time::sleep(SHUTDOWN_POLL).await;
        }
        let aborted = {
            let lanes = self.lanes();
            let active: Vec<_> = lanes.values().filter_map(|lane| lane.active.as_ref()).collect();
            active.iter().for_each(|active| active.cancel.cancel());
            active.len()
        };
        let deadline = tokio::time::Instant::now() + ABORT_WAIT;
        while self.running() > 0 && tokio::time::Instant::now() < deadline {
            tokio::time::sleep(SHUTDOWN_POLL).await;
        }
        if aborted > 0 {
            tracing::warn!(aborted, "runs still going at the end of the shutdown grace period were aborted");
        }
        aborted
    }

    /// Runs executing now.
    pub fn running(&self) -> usize {
        self.inner.running.load(Ordering::Acquire)
    }

    fn lanes(&self) -> MutexGuard<'_, HashMap<String, Lane>> {
        self.inner.lanes.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
    }
}

/// The run id a gateway client gave the message, if it came from one.
/// Whether `/stop` with `scope` ends a run that answers at `place`.
fn scope_covers(scope: &StopScope, place: &ReplyPlace) -> bool {
    match scope {
        StopScope::Session => true,
        StopScope::Place(stopped) => stopped == place,
    }
}

/// Takes the items `take` accepts out of `items`, keeping the order of both.
fn drain_where(items: &mut Vec<QueuedMessage>, take: impl Fn(&QueuedMessage) -> bool) -> Vec<QueuedMessage> {
    let (taken, kept) = std::mem::take(items).into_iter().partition(|item| take(item));
    *items = kept;
    taken
}

impl Active {
    /// Hands `message` to the run, whose reply answers it. Gives it back (`Some`) when the
    /// run cannot take it now (not streaming yet, or finishing).
    fn steer_in(&mut self, message: QueuedMessage) -> Option<QueuedMessage> {
        match self.steer.push_for(message.prompt.clone(), client_run_id(&message), Some(message.id)) {
            Ok(()) => {
                self.steered.push(message);
                None
            }
            Err(_) => Some(message),
        }
    }
}

fn client_run_id(message: &QueuedMessage) -> Option<String> {
    message.message.request.as_ref().map(|request| request.run_id.clone())
}

impl Lane {
    fn new(settings: QueueSettings, depth: &Gauge) -> Self {
        Self {
            settings,
            active: None,
            pending: Pending::new(depth.clone()),
            summarized: Vec::new(),
            generation: 0,
            skip_quiet: false,
            parked: Vec::new(),
        }
    }
}

#[cfg(test)]
mod tests;
