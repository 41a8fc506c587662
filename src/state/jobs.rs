//! The jobs store: scheduled jobs (reminders, recurring tasks, the heartbeat) and their run
//! history. What a schedule means and when a job is due next is `cron`'s; this is what is
//! kept, and the one step that must be atomic: claiming a due fire.
//!
//! The promise both backends keep: a fire is claimed in the same step that journals it as
//! an inbound message keyed by `(job id, fire slot)` ([`JobStore::claim_due`]), so the
//! journal, the lanes and the delivery ledger carry it from there, exactly once, through
//! restarts and across replicas. A job has at most one fire in flight ([`Job::running`]);
//! it is due again only once that fire is finished ([`JobStore::finish`]). Due means due by
//! the database's clock on PostgreSQL (several replicas, one clock) and by this process's
//! on SQLite.
//!
//! Times are unix milliseconds.

use std::fmt::Debug;

use async_trait::async_trait;
use tokio::sync::Notify;

use super::StorageError;
use super::inbound::{Accepted, SeenKey};

/// How many fires one claim takes at most; the rest wait for the next tick (moments later).
pub const CLAIM_BATCH: usize = 32;

/// Where a job's fire is delivered: a chat of a channel account, and a thread in it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct JobTarget {
    pub channel: String,
    pub account_id: String,
    pub chat_id: String,
    /// `direct`, `group` or `channel` (how the platform addresses the chat).
    pub chat_kind: String,
    pub thread_id: Option<String>,
}

/// The chat a job belongs to (it was created there, and only that chat sees it).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ChatScope {
    pub channel: String,
    pub account_id: String,
    pub chat_id: String,
}

/// A job's schedule as kept: its kind's fields and the IANA zone it is read in. `cron`
/// turns it into a schedule and back.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StoredSchedule {
    /// `at`, `every` or `cron`.
    pub kind: String,
    /// `at`: when.
    pub at_ms: Option<i64>,
    /// `every`: the interval, and the instant its slots count from.
    pub every_secs: Option<i64>,
    pub anchor_ms: Option<i64>,
    /// `cron`: the 5-field expression.
    pub cron: Option<String>,
    /// Always set: the zone the job was created in.
    pub tz: String,
}

/// What a fire does.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum JobPayload {
    /// A reminder: the text is sent as it is, with no model call.
    Text(String),
    /// An agent turn: the task is the prompt; the run's final reply is delivered.
    Task(String),
    /// The heartbeat: an agent turn made only when `HEARTBEAT.md` has something to do,
    /// whose `HEARTBEAT_OK` sends nothing. The text is the operator's prompt.
    Heartbeat(String),
}

impl JobPayload {
    /// The name kept in the `payload_kind` column.
    pub fn kind(&self) -> &'static str {
        match self {
            JobPayload::Text(_) => "text",
            JobPayload::Task(_) => "task",
            JobPayload::Heartbeat(_) => "heartbeat",
        }
    }

    pub fn text(&self) -> &str {
        match self {
            JobPayload::Text(text) | JobPayload::Task(text) | JobPayload::Heartbeat(text) => text,
        }
    }

    /// Reads a kept payload; `None` for a kind this version does not know.
    pub fn from_parts(kind: &str, text: String) -> Option<Self> {
        match kind {
            "text" => Some(JobPayload::Text(text)),
            "task" => Some(JobPayload::Task(text)),
            "heartbeat" => Some(JobPayload::Heartbeat(text)),
            _ => None,
        }
    }
}

/// Whether a job fires.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum JobState {
    Active,
    /// By its owner, or after too many failures in a row.
    Paused,
    /// A one-shot that fired; kept for its run history until that expires.
    Done,
}

impl JobState {
    pub fn as_str(self) -> &'static str {
        match self {
            JobState::Active => "active",
            JobState::Paused => "paused",
            JobState::Done => "done",
        }
    }

    pub fn parse(text: &str) -> Option<Self> {
        [JobState::Active, JobState::Paused, JobState::Done].into_iter().find(|state| state.as_str() == text)
    }
}

/// The fire a job has in flight.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RunningFire {
    /// The slot it fires for (its scheduled time, or its retry's).
    pub slot_ms: i64,
    /// Its inbound journal id, once journaled (on SQLite a claim is journaled just after).
    pub seq: Option<i64>,
    /// When it was claimed.
    pub claimed_ms: i64,
}

/// A scheduled job, as kept.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Job {
    pub id: String,
    pub agent_id: String,
    pub name: String,
    /// Who created it: a sender id, or `operator` / `system`.
    pub owner: String,
    /// `user` (a chat command), `agent` (the tool), `operator` (the CLI) or `system`.
    pub created_by: String,
    /// The chat it belongs to; `None` for the operator's and the system's jobs.
    pub scope: Option<ChatScope>,
    pub target: JobTarget,
    pub schedule: StoredSchedule,
    pub payload: JobPayload,
    /// The session a task runs in; `None`: its own, `cron:<job id>`.
    pub session_key: Option<String>,
    /// `run_once` (missed slots collapse into one late fire) or `skip`.
    pub missed: String,
    /// Missed slots older than this are skipped whatever `missed` says.
    pub grace_secs: Option<i64>,
    pub state: JobState,
    /// When it is due next; `None` once a one-shot has fired.
    pub next_run_ms: Option<i64>,
    pub running: Option<RunningFire>,
    /// Failed fires in a row.
    pub failures: u32,
    pub last_error: Option<String>,
    /// A hash of the last alert it sent and when (the heartbeat's 24-hour dedupe).
    pub last_alert: Option<(String, i64)>,
    pub created_ms: i64,
}

/// How many jobs may exist, checked in the same write that adds one.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct JobLimits {
    pub per_chat: usize,
    pub per_agent: usize,
}

/// Which jobs a listing returns.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct JobFilter {
    pub agent_id: Option<String>,
    /// Only this chat's jobs.
    pub scope: Option<ChatScope>,
    /// One-shots that already fired too.
    pub include_done: bool,
}

/// Why a job was not added.
#[derive(Debug, thiserror::Error)]
pub enum AddJobError {
    #[error("this chat already has {limit} scheduled jobs, the most it may have; remove one first")]
    ChatFull { limit: usize },
    #[error("this agent already has {limit} scheduled jobs, the most it may have; remove some first")]
    AgentFull { limit: usize },
    #[error("a job with id `{0}` exists already")]
    Exists(String),
    #[error(transparent)]
    Storage(#[from] StorageError),
}

/// A fire to journal, built by the caller for a due job (the inbound message it becomes).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PlannedFire {
    pub slot_ms: i64,
    /// The inbound message key: the target chat, with `cron:<job id>:<slot>` as message id.
    pub key: SeenKey,
    pub accepted: Accepted,
    /// It fires well after its slot (after downtime): its run is marked late.
    pub late: bool,
}

/// Slots of a job that were not fired (downtime past its grace, or `missed = "skip"`):
/// kept as one run-history row, never dropped silently.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SkippedSlots {
    pub count: u64,
    pub first_ms: i64,
    pub last_ms: i64,
}

/// What becomes of a due job, decided by the caller inside the claim.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FirePlan {
    pub fire: Option<PlannedFire>,
    pub skipped: Option<SkippedSlots>,
    /// When it is due after this; `None`: never again (a fired one-shot, or nothing left).
    pub next_run_ms: Option<i64>,
}

/// Decides, for each due job a claim takes, what it fires and when it is due next. The
/// store calls it inside its transaction, with the database's time.
pub trait FirePlanner: Send + Sync {
    fn plan(&self, job: &Job, now_ms: i64) -> FirePlan;
}

/// A fire this claim journaled: run it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ClaimedFire {
    pub job: Job,
    pub slot_ms: i64,
    /// Its inbound journal id.
    pub seq: i64,
    pub accepted: Accepted,
}

/// How a fire ended, as [`JobStore::finish`] records it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FireOutcome {
    /// `ok`, `failed` or `skipped` (the heartbeat with nothing to do, a busy session).
    pub status: String,
    /// Something was sent to the chat.
    pub delivered: bool,
    pub error: Option<String>,
    pub finished_ms: i64,
    /// A failed fire's retry: the job is due again then (before its next slot).
    pub retry_at_ms: Option<i64>,
    /// The job is paused (too many failures in a row).
    pub pause: bool,
    /// The alert it sent, for the heartbeat's dedupe.
    pub alert: Option<String>,
}

/// One row of a job's run history.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct JobRun {
    pub slot_ms: i64,
    /// `running`, `ok`, `failed` or `skipped`.
    pub status: String,
    pub started_ms: i64,
    pub finished_ms: Option<i64>,
    pub delivered: bool,
    /// It fired late (after downtime).
    pub late: bool,
    pub error: Option<String>,
    /// What else there is to say: how many slots a skip covers.
    pub note: Option<String>,
}

/// A summary for `/healthz`.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct JobStats {
    pub active: u64,
    pub paused: u64,
    pub running: u64,
    pub next_due_ms: Option<i64>,
    /// The most recent error of any job: its id and what it said.
    pub last_error: Option<(String, String)>,
}

/// A change of a job's state by its owner or the operator.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum JobChange {
    Pause,
    /// Active again, due at this time, its failure count cleared.
    Resume {
        next_run_ms: i64,
    },
    /// Due now (`run`): fires at the next tick unless a fire is in flight.
    RunAt {
        at_ms: i64,
    },
}

/// A run history is kept this long…
pub const KEEP_RUNS_MS: i64 = 7 * 24 * 60 * 60 * 1000;
/// …and at most this many rows per job.
pub const KEEP_RUNS_PER_JOB: usize = 200;

/// The note of a run-history row that stands for skipped slots.
pub fn skip_note(count: u64, first_ms: i64, last_ms: i64) -> String {
    if count == 1 {
        "missed while Ferry was down; skipped".to_owned()
    } else {
        format!("{count} slots missed while Ferry was down (from {first_ms} to {last_ms}, unix ms); skipped")
    }
}

/// Where scheduled jobs are kept.
#[async_trait]
pub trait JobStore: Send + Sync + Debug {
    /// Adds `job`, unless its chat or its agent has reached `limits` (counted in the same
    /// write, so two adds racing each other cannot both pass the last free place).
    async fn add(&self, job: &Job, limits: JobLimits) -> Result<(), AddJobError>;

    /// Adds `job`, or replaces the one with its id (the config's system jobs, kept in step
    /// with the config at start); a fire in flight and the run history stay.
    async fn upsert_system(&self, job: &Job) -> Result<(), StorageError>;

    async fn get(&self, id: &str) -> Result<Option<Job>, StorageError>;

    /// The jobs `filter` selects, by next run (the unscheduled last).
    async fn list(&self, filter: &JobFilter) -> Result<Vec<Job>, StorageError>;

    /// Removes a job and its history. `false`: there was none.
    async fn remove(&self, id: &str) -> Result<bool, StorageError>;

    /// Pauses, resumes or runs a job now. `false`: there was none (or it is done).
    async fn change(&self, id: &str, change: JobChange) -> Result<bool, StorageError>;

    /// When the next active job without a fire in flight is due.
    async fn next_due(&self) -> Result<Option<i64>, StorageError>;

    /// Claims up to [`CLAIM_BATCH`] due jobs: for each, `planner` decides the fire and the
    /// next run, and the fire is journaled as an inbound message in the same step (see
    /// the module's docs). A job with a fire in flight is not due.
    async fn claim_due(&self, planner: &dyn FirePlanner) -> Result<Vec<ClaimedFire>, StorageError>;

    /// Completes a fire a crash left claimed but not journaled (SQLite, where the claim and
    /// the journal are two writes): `journaled` is its journal id if the inbound store has
    /// it already, else it is journaled now. Returns the id; `None`: the job has no such
    /// fire.
    async fn journal_claimed(
        &self,
        job_id: &str,
        fire: &PlannedFire,
        journaled: Option<i64>,
    ) -> Result<Option<i64>, StorageError>;

    /// Records how the fire for `slot_ms` ended and clears it, so the job is due again.
    /// `false`: that fire was not in flight (finished already).
    async fn finish(&self, job_id: &str, slot_ms: i64, outcome: &FireOutcome) -> Result<bool, StorageError>;

    /// The jobs with a fire in flight.
    async fn running(&self) -> Result<Vec<Job>, StorageError>;

    /// A job's runs, newest first.
    async fn runs(&self, job_id: &str, limit: usize) -> Result<Vec<JobRun>, StorageError>;

    /// Deletes run rows older than `before_ms` or beyond [`KEEP_RUNS_PER_JOB`] per job, and
    /// done jobs whose last run is older than `before_ms`.
    async fn prune(&self, before_ms: i64) -> Result<u64, StorageError>;

    async fn stats(&self) -> Result<JobStats, StorageError>;

    /// Notified after every change that may make a job due sooner (an add, a resume, a
    /// finished fire), so the ticker sleeping until the next due time looks again.
    fn changes(&self) -> &Notify;
}
