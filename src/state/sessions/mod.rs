//! The session store: what a session is, its transcript, and the interface every backend
//! implements (SPEC §4). The rules a backend applies inside its writes live beside it: when a
//! session goes stale ([`reset`]) and how a transcript is kept as rows ([`transcript`]).

use async_trait::async_trait;
use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};

use super::StorageError;
use crate::config::{DropPolicy, QueueMode, ResetConfig};
use crate::types::{ChatMessage, ReasoningDisplay, ThinkingLevel, Usage};

pub mod reset;
pub(crate) mod transcript;

pub use reset::ResetReason;
pub use transcript::{SUMMARY_HEADER, is_summary, summary_message};

/// A conversation between the agent and a chat (or a person, by `dm_scope`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Session {
    pub key: String,
    /// Changes on every reset; transcripts belong to a session id.
    pub session_id: String,
    pub created_at: DateTime<Utc>,
    pub updated_at: DateTime<Utc>,
    pub usage: Usage,
    pub compaction_count: u32,
    pub overrides: SessionOverrides,
}

/// What a user changed for their session alone (`/queue …`, `/verbose …`).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct SessionOverrides {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub queue_mode: Option<QueueMode>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub debounce_ms: Option<u64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cap: Option<usize>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub drop: Option<DropPolicy>,
    /// Replies list the tools the agent used, one line per call (`/verbose on`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub verbose: Option<bool>,
    /// The model chosen with `/model` (`provider/model`); it answers alone, without fallbacks.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub model: Option<String>,
    /// `/think`: how hard the model thinks in this session.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub thinking: Option<ThinkingLevel>,
    /// `/reasoning`: how the model's reasoning is shown in this session.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reasoning: Option<ReasoningDisplay>,
}

/// A session looked up for a new message, with why it is fresh if it is.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Resolved {
    pub session: Session,
    /// `Some` when this call started a new session id (first message, or a reset).
    pub started: Option<ResetReason>,
    /// The session id that ended, when a reset replaced one.
    pub ended_session_id: Option<String>,
}

/// A run's session, owned by the run, and the conversation so far.
#[derive(Debug)]
pub struct OpenedRun {
    pub resolved: Resolved,
    /// Unreadable history is not fatal: the run answers without it.
    pub history: Result<Vec<ChatMessage>, StoreError>,
}

/// An entry of a session's context with the run that wrote it (`None` for a compaction's
/// summary), for readers that place other records of a run beside its messages (the web
/// chat's history puts a request to approve a command after the message that asked).
#[derive(Debug, Clone, PartialEq)]
pub struct TranscriptEntry {
    pub run_id: Option<String>,
    pub message: ChatMessage,
}

/// A compaction entry (SPEC §4, §6.9): the summary of a session's older transcript, which
/// stands in for it in every later context.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct CompactionEntry {
    /// The summary text as the model wrote it.
    pub summary: String,
    /// Entries of the context before this index are replaced by the summary (an index into
    /// the context [`SessionStore::history`] returns; the store records the entry id).
    #[serde(skip)]
    pub keep_from: usize,
    /// The estimated prompt tokens before compacting.
    pub tokens_before: u64,
}

/// Whether a run's transcript was kept when it ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TranscriptSaved {
    Saved,
    /// The session was reset or taken over during the run: its transcript belongs nowhere.
    Superseded,
}

#[derive(Debug, thiserror::Error)]
pub enum StoreError {
    /// The run lost its right to write: the session was reset, or a newer run took over.
    #[error("run {run_id} no longer owns session {key}")]
    Superseded { key: String, run_id: String },
    #[error("no session {0}")]
    NotFound(String),
    #[error("session store: {0}")]
    Database(#[from] StorageError),
    #[error("session store: corrupt entry: {0}")]
    Corrupt(String),
}

impl StoreError {
    /// The write was refused because this replica no longer holds the session's lease.
    pub fn is_fenced(&self) -> bool {
        matches!(self, Self::Database(error) if error.is_fenced())
    }

    /// The store could not be reached: the same call may succeed in a moment.
    pub fn is_unavailable(&self) -> bool {
        matches!(self, Self::Database(error) if error.is_unavailable())
    }
}

/// Sessions and their transcripts. One writer per session: the lanes guarantee it inside a
/// process, and [`SessionStore::append`] is fenced by run id so a superseded run cannot
/// write even if it is still going.
#[async_trait]
pub trait SessionStore: Send + Sync {
    /// The session for `key` as a new message arrives at `now`: created if missing,
    /// replaced by a fresh one if stale under `policy`; `updated_at` becomes `now`.
    async fn resolve(&self, key: &str, now: DateTime<Utc>, policy: &ResetConfig) -> Result<Resolved, StoreError>;

    /// Starts a new session id for `key` (`/new`, `/reset`); any running run loses its
    /// right to append.
    async fn reset(&self, key: &str, now: DateTime<Utc>) -> Result<Resolved, StoreError>;

    async fn get(&self, key: &str) -> Result<Option<Session>, StoreError>;

    /// Makes `run_id` the session's only writer. Fails if `session_id` is no longer current.
    async fn begin_run(&self, key: &str, session_id: &str, run_id: &str) -> Result<(), StoreError>;

    /// [`SessionStore::begin_run`] only if no run owns the session now; `false` (and nothing
    /// changed) if one does. For work that must not take a session from a run (`/compact`).
    async fn begin_run_if_idle(&self, key: &str, session_id: &str, run_id: &str) -> Result<bool, StoreError> {
        self.begin_run(key, session_id, run_id).await.map(|()| true)
    }

    /// The context of a session id, oldest first: its transcript, where the latest compaction
    /// entry stands in (as one summary message) for the entries it summarized.
    async fn history(&self, session_id: &str) -> Result<Vec<ChatMessage>, StoreError>;

    /// [`SessionStore::history`] with the run that wrote each entry. A backend that does not
    /// record runs gives `None` for every entry.
    async fn transcript(&self, session_id: &str) -> Result<Vec<TranscriptEntry>, StoreError> {
        let history = self.history(session_id).await?;
        Ok(history.into_iter().map(|message| TranscriptEntry { run_id: None, message }).collect())
    }

    /// Appends a run's entries, if the run still owns the session.
    async fn append(&self, key: &str, run_id: &str, entries: &[ChatMessage]) -> Result<(), StoreError>;

    /// Adds the run's token usage and releases its ownership.
    async fn finish_run(&self, key: &str, run_id: &str, usage: Usage) -> Result<(), StoreError>;

    /// [`SessionStore::resolve`], [`SessionStore::begin_run`] and [`SessionStore::history`]
    /// for a run about to start; a backend that can should do it in one write (SQLite: one
    /// group-committed write, the history read on the writer's warm cache).
    async fn open_run(
        &self,
        key: &str,
        now: DateTime<Utc>,
        policy: &ResetConfig,
        run_id: &str,
    ) -> Result<OpenedRun, StoreError> {
        let resolved = self.resolve(key, now, policy).await?;
        self.begin_run(key, &resolved.session.session_id, run_id).await?;
        let history = self.history(&resolved.session.session_id).await;
        Ok(OpenedRun { resolved, history })
    }

    /// [`SessionStore::append`] (if the run still owns the session) then
    /// [`SessionStore::finish_run`] for a run that ended; one write where the backend can.
    /// Usage is added even when the transcript is not (the tokens were spent).
    async fn close_run(
        &self,
        key: &str,
        run_id: &str,
        entries: &[ChatMessage],
        usage: Usage,
    ) -> Result<TranscriptSaved, StoreError> {
        let saved = match self.append(key, run_id, entries).await {
            Ok(()) => TranscriptSaved::Saved,
            Err(StoreError::Superseded { .. }) => TranscriptSaved::Superseded,
            Err(error) => return Err(error),
        };
        self.finish_run(key, run_id, usage).await?;
        Ok(saved)
    }

    /// Records a compaction of the session's context, if `run_id` still owns the session;
    /// `context_len` is the length of the context the cut was chosen in, checked against
    /// the store's. Counts it in the session's `compaction_count`.
    async fn compact(
        &self,
        key: &str,
        run_id: &str,
        context_len: usize,
        entry: &CompactionEntry,
    ) -> Result<(), StoreError>;

    async fn set_overrides(&self, key: &str, overrides: &SessionOverrides) -> Result<(), StoreError>;

    /// Every session whose user changed its settings (non-default overrides). Few: callers
    /// keep them in memory instead of reading a session per message.
    async fn overridden(&self) -> Result<Vec<(String, SessionOverrides)>, StoreError>;

    /// Up to `limit` sessions, most recently updated first.
    async fn list(&self, limit: usize) -> Result<Vec<Session>, StoreError>;

    /// Up to `limit` sessions of the agent `agent` (`agent:<agent>:…`), most recently
    /// updated first.
    async fn list_of_agent(&self, agent: &str, limit: usize) -> Result<Vec<Session>, StoreError>;
}
