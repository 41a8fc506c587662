//! Compaction inside the loop (SPEC §6.9): every model call goes through
//! [`AgentRunner::call_compacting`], which shortens the context first when it would cross the
//! budget, and compacts and sends the call again when the provider still answers with a
//! context overflow (at most [`MAX_OVERFLOW_COMPACTIONS`] times per run).
//!
//! A retried call is one that failed before it showed anything (an overflow after output is
//! not retried, see `call_model`), so listeners — the reply pipeline's preview, chunker and
//! tool lines — never see anything twice and keep what they have on `end {willRetry}`.

use super::super::compaction::{
    CompactRequest, CompactionError, Compactor, ContextBudget, MAX_OVERFLOW_COMPACTIONS, ReportedContext,
};
use super::super::events::{CompactionEvent, RunEvents};
use super::super::providers::{ModelRequest, ProviderError, ResolvedModel};
use super::super::steer::SteerInbox;
use super::super::turn::{AssistantTurn, TextLimit};
use super::{AgentRunner, CallContext, RunState};
use crate::agent::ChatMessage;
use crate::hooks::{AfterCompaction, BeforeCompaction};
use crate::models::Candidate;

/// A run's context accounting.
#[derive(Debug, Default)]
pub(super) struct ContextState {
    /// The provider's count after the last call, while the context still starts the same.
    reported: Option<ReportedContext>,
    /// Compactions done after overflow errors.
    overflows: u32,
    /// The agent had its turn to save memories since the last compaction
    /// (`super::memory_flush`): the next compaction does not give it another.
    pub(super) flushed: bool,
}

impl AgentRunner {
    /// One model call on `request`, whose messages are the run's context, compacting it when
    /// needed. Returns the turn; `state.messages` may have been replaced by a shorter context.
    pub(super) async fn call_compacting(
        &self,
        mut request: ModelRequest,
        state: &mut RunState,
        events: &RunEvents,
        call: &CallContext<'_>,
        compactor: Option<&dyn Compactor>,
        limit: TextLimit,
    ) -> Result<AssistantTurn, ProviderError> {
        let steer = call.steer;
        let Some(compactor) = compactor else { return self.call_model(&request, state, events, call, &limit).await };
        let (model, budget) = self.context_budget(call.session_key, call.chosen);
        if compactor.needs_compaction(budget, &request.system, &state.messages, state.context.reported) {
            match self.compact(state, events, steer, compactor, (&model, budget), false).await {
                Ok(()) => request.messages.clone_from(&state.messages),
                // The call may still fit: the provider says so if not.
                Err(error) => {
                    tracing::warn!(%error, "cannot compact the context before the model call; sending it as is")
                }
            }
        }
        loop {
            match self.call_model(&request, state, events, call, &limit).await {
                Err(ProviderError::ContextOverflow { message }) => {
                    if state.context.overflows >= MAX_OVERFLOW_COMPACTIONS {
                        return Err(ProviderError::ContextOverflow {
                            message: format!("still too long after {MAX_OVERFLOW_COMPACTIONS} compactions: {message}"),
                        });
                    }
                    state.context.overflows += 1;
                    tracing::info!(
                        attempt = state.context.overflows,
                        "the context overflowed the model; compacting and retrying"
                    );
                    if let Err(error) = self.compact(state, events, steer, compactor, (&model, budget), true).await {
                        tracing::warn!(%error, "cannot compact the context after an overflow; the run fails");
                        return Err(ProviderError::ContextOverflow { message });
                    }
                    request.messages.clone_from(&state.messages);
                }
                Ok(turn) => {
                    // The reply joins the context right after this.
                    let tokens = turn.usage.input_tokens + turn.usage.output_tokens;
                    state.context.reported =
                        (tokens > 0).then_some(ReportedContext { tokens, messages: state.messages.len() + 1 });
                    return Ok(turn);
                }
                Err(error) => return Err(error),
            }
        }
    }

    /// The model a call in `session_key` asks first (a `/model` choice or a fallback may
    /// have a window of its own), which also writes the summary, and its context budget.
    pub(super) fn context_budget(
        &self,
        session_key: &str,
        chosen: Option<&Candidate>,
    ) -> (ResolvedModel, ContextBudget) {
        let model = self.inner.parts.model.first_choice(session_key, chosen);
        let budget = ContextBudget::for_model(&model, self.inner.parts.settings.compaction_reserve_tokens);
        (model, budget)
    }

    /// Whether the next model call on `system` and the run's context will compact it first.
    pub(super) fn will_compact(
        &self,
        compactor: &dyn Compactor,
        system: &str,
        state: &RunState,
        session_key: &str,
        chosen: Option<&Candidate>,
    ) -> bool {
        let (_, budget) = self.context_budget(session_key, chosen);
        compactor.needs_compaction(budget, system, &state.messages, state.context.reported)
    }

    /// Compacts `state.messages`, with `compaction` events around it and steering refused
    /// meanwhile. On error the context is unchanged.
    async fn compact(
        &self,
        state: &mut RunState,
        events: &RunEvents,
        steer: Option<&SteerInbox>,
        compactor: &dyn Compactor,
        (model, budget): (&ResolvedModel, ContextBudget),
        will_retry: bool,
    ) -> Result<(), CompactionError> {
        events.compaction(CompactionEvent::Start);
        let hooks = &self.inner.parts.hooks;
        hooks.before_compaction(BeforeCompaction {
            run_id: events.run_id().to_owned(),
            session_key: events.session_key().to_owned(),
            message_count: state.messages.len(),
            compacting: state.first_new,
            tokens_before: state.context.reported.map(|reported| reported.tokens),
        });
        if let Some(inbox) = steer {
            inbox.set_paused(true);
        }
        let result = compactor
            .compact(CompactRequest {
                model,
                budget,
                messages: &state.messages,
                compactable: state.first_new,
                instructions: None,
            })
            .await;
        if let Some(inbox) = steer {
            inbox.set_paused(false);
        }
        let outcome = result.map(|compacted| {
            tracing::info!(
                summarized = compacted.summarized,
                tokens_before = compacted.tokens_before,
                "compacted the session's context"
            );
            state.usage.add(compacted.usage);
            let summary = match &compacted.summary {
                ChatMessage::User { text, .. } => text.clone(),
                _ => String::new(),
            };
            hooks.after_compaction(AfterCompaction {
                run_id: events.run_id().to_owned(),
                session_key: events.session_key().to_owned(),
                compacted: compacted.summarized,
                summary,
                tokens_after: None,
                will_retry,
            });
            state.messages.splice(..compacted.keep_from, [compacted.summary]);
            state.first_new = state.first_new + 1 - compacted.keep_from;
            // What the ledger recorded moved with the rest.
            state.recorded = (state.recorded + 1).saturating_sub(compacted.keep_from).max(state.first_new);
            state.context.reported = None;
            state.context.flushed = false;
        });
        events.compaction(CompactionEvent::End { will_retry: will_retry && outcome.is_ok() });
        outcome
    }
}
