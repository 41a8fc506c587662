//! What the agent loop needs to compact a run's context (SPEC §6.9), and nothing more.
//!
//! The loop knows *when* a model call needs a shorter context: before a call whose prompt
//! would cross `context_window - reserve_tokens` ([`Compactor::needs_compaction`]), and
//! when the provider answers with a context-overflow error (then it compacts and sends the
//! same call again, at most [`MAX_OVERFLOW_COMPACTIONS`] times per run). *How* — where to
//! cut, the summarizing model call, the persisted compaction entry — belongs to whoever
//! keeps the transcript: `session::compaction` implements [`Compactor`] on the session
//! store, as `session::sqlite` implements the tools' `SessionCatalog`.

use async_trait::async_trait;

use super::providers::{ProviderError, ResolvedModel};
use crate::types::conversation::{ChatMessage, Usage};

/// Compact-and-retry rounds one run may do after context-overflow errors; one more overflow
/// fails the run (SPEC §6.9).
pub const MAX_OVERFLOW_COMPACTIONS: u32 = 3;

/// The tokens a prompt may use: the model's window minus the reserve kept for the reply.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ContextBudget {
    pub context_window: u32,
    /// `agents.defaults.compaction.reserve_tokens`.
    pub reserve_tokens: u32,
}

impl ContextBudget {
    pub fn for_model(model: &ResolvedModel, reserve_tokens: u32) -> Self {
        Self { context_window: model.effective_context_window(), reserve_tokens }
    }

    /// Above this many prompt tokens, compact first.
    pub fn limit(&self) -> u64 {
        // A reserve as large as the window would leave nothing: keep at least a quarter.
        u64::from(self.context_window.saturating_sub(self.reserve_tokens).max(self.context_window / 4))
    }
}

/// What the provider reported about the last call's size: `tokens` (prompt + reply) covered
/// the first `messages` entries of the context, the reply included.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ReportedContext {
    pub tokens: u64,
    pub messages: usize,
}

/// A compaction to do.
pub struct CompactRequest<'a> {
    pub model: &'a ResolvedModel,
    pub budget: ContextBudget,
    /// The context as the model would get it, oldest first.
    pub messages: &'a [ChatMessage],
    /// Only `messages[..compactable]` are in the store and may be summarized; the rest is
    /// the running turn, always kept.
    pub compactable: usize,
    /// The operator's or user's extra instructions for the summary (`/compact …`).
    pub instructions: Option<&'a str>,
}

/// A compaction done and persisted: `messages[..keep_from]` are replaced by `summary`.
#[derive(Debug, Clone, PartialEq)]
pub struct Compacted {
    /// The summary as the model will see it: a clearly marked user message.
    pub summary: ChatMessage,
    pub keep_from: usize,
    /// How many of the replaced entries were conversation (not an earlier summary).
    pub summarized: usize,
    /// The estimated prompt size before.
    pub tokens_before: u64,
    /// What the summarizing call cost.
    pub usage: Usage,
}

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum CompactionError {
    #[error("there is nothing old enough to summarize")]
    NothingToCompact,
    #[error("the model could not write the summary ({0})")]
    Model(ProviderError),
    #[error("the model's summary was empty")]
    EmptySummary,
    #[error("the summary could not be saved ({0})")]
    Store(String),
}

/// Compacts a session's context. See the [module documentation](self).
#[async_trait]
pub trait Compactor: Send + Sync {
    /// Whether `system` + `messages` would cross the budget's limit; `reported` is the
    /// provider's count for a prefix of `messages`, when the last call reported one.
    fn needs_compaction(
        &self,
        budget: ContextBudget,
        system: &str,
        messages: &[ChatMessage],
        reported: Option<ReportedContext>,
    ) -> bool;

    /// Summarizes the older part of the context into a persisted compaction entry. On error
    /// the transcript is as it was.
    async fn compact(&self, request: CompactRequest<'_>) -> Result<Compacted, CompactionError>;
}
