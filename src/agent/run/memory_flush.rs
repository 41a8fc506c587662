//! Saving memories before a compaction (issue 40): when the context is about to be
//! summarized, the agent first gets one silent turn in which it may write what matters to
//! long-term memory, since the summary will lose detail.
//!
//! The turn is the run's context with one more message asking for it. It is offered the
//! memory tools and nothing else (those of them the chat's policy allows), runs at most
//! [`FLUSH_TOOL_ROUNDS`] rounds within [`FLUSH_TIMEOUT`], and is answered `NO_REPLY`. Nothing
//! of it is shown or kept: its events go nowhere, its messages are dropped, and only its
//! memory writes and its token usage remain. It happens once per compaction
//! ([`super::compact::ContextState::flushed`]), only for runs that ask for it
//! ([`super::RunRequest::memory_flush`]: conversations with people), and only before a
//! compaction the budget foresees: one the provider forces by refusing an overflowing
//! context has no room left for another turn.

use std::sync::Arc;
use std::time::Duration;

use super::super::compaction::Compactor;
use super::super::events::{EventBus, RunEvents};
use super::super::prompt::SILENT_TOKEN;
use super::super::providers::{ModelRequest, ProviderError};
use super::super::skills::SkillsSnapshot;
use super::super::tools::MEMORY_TOOLS;
use super::super::turn::TextLimit;
use super::{AgentRunner, CallContext, RunRequest, RunState};
use crate::types::conversation::ChatMessage;

/// Model ↔ tool rounds the flush may take before it must answer.
pub(super) const FLUSH_TOOL_ROUNDS: u32 = 3;
/// The longest a flush may take; past it, the compaction goes on without it.
pub(super) const FLUSH_TIMEOUT: Duration = Duration::from_secs(60);

/// What the agent is asked in the flush turn.
pub const FLUSH_PROMPT: &str = "[memory flush — automatic, not from the user] This conversation is about to be \
     compacted: its older messages will be replaced by a short summary. If it holds anything worth keeping beyond \
     this conversation (facts about the person or the chat, preferences, decisions, promises, open tasks) that \
     memory does not hold yet, save it now with memory_write: lasting facts in MEMORY.md, the rest in today's \
     note. Write nothing that is already saved. Nobody sees this turn; when you are done, answer exactly NO_REPLY.";

impl AgentRunner {
    /// Gives the agent its silent turn to save memories when the next model call is about
    /// to compact the context, once per compaction; see the module documentation. Returns
    /// whether it wrote to memory.
    pub(super) async fn flush_memory_before_compaction(
        &self,
        state: &mut RunState,
        request: &mut RunRequest,
        compactor: &dyn Compactor,
        skills: &Arc<SkillsSnapshot>,
        system: &str,
    ) -> bool {
        if state.context.flushed
            || request.memory_scope.is_none()
            || self.inner.parts.memory.is_none()
            || !self.will_compact(compactor, system, state, &request.session_key, request.model.as_ref())
        {
            return false;
        }
        let memory_tools = request.tools.clone().only(MEMORY_TOOLS);
        if !memory_tools.allows("memory_write") {
            return false;
        }
        state.context.flushed = true;
        let run_tools = std::mem::replace(&mut request.tools, memory_tools);
        let mut messages = state.messages.clone();
        messages.push(ChatMessage::user(FLUSH_PROMPT));
        let mut flush = RunState::new(messages, state.messages.len());
        // Its own bus and no consumer: nothing of the turn reaches the chat or observers.
        let silent = RunEvents::new(&request.run_id, &request.session_key, EventBus::new(), None);
        let outcome =
            tokio::time::timeout(FLUSH_TIMEOUT, self.flush_turns(&mut flush, request, &silent, skills, system)).await;
        request.tools = run_tools;
        state.usage.add(flush.usage);
        let calls = flush.messages[flush.first_new..]
            .iter()
            .filter(|message| matches!(message, ChatMessage::ToolResult { .. }))
            .count();
        let wrote = flush.messages[flush.first_new..].iter().any(|message| {
            matches!(message, ChatMessage::ToolResult { name, is_error: false, .. } if name == "memory_write")
        });
        match outcome {
            Ok(Ok(answer)) => {
                let silent = answer.trim().eq_ignore_ascii_case(SILENT_TOKEN) || answer.trim().is_empty();
                tracing::info!(
                    tool_calls = calls,
                    answered_silently = silent,
                    "the agent saved memories before compaction"
                );
            }
            Ok(Err(error)) => {
                tracing::warn!(%error, tool_calls = calls, "the memory flush before compaction failed; compacting anyway");
            }
            Err(_) => tracing::warn!(
                tool_calls = calls,
                timeout_s = FLUSH_TIMEOUT.as_secs(),
                "the memory flush before compaction took too long; compacting anyway"
            ),
        }
        wrote
    }

    /// The flush's model ↔ tool loop; returns its last answer's text.
    async fn flush_turns(
        &self,
        flush: &mut RunState,
        request: &RunRequest,
        events: &RunEvents,
        skills: &Arc<SkillsSnapshot>,
        system: &str,
    ) -> Result<String, ProviderError> {
        let parts = &self.inner.parts;
        for round in 0..=FLUSH_TOOL_ROUNDS {
            let tools = if round < FLUSH_TOOL_ROUNDS { parts.tools.specs(skills, &request.tools) } else { Vec::new() };
            let model_request = ModelRequest {
                model: String::new(),
                system: system.to_owned(),
                messages: flush.messages.clone(),
                tools,
                max_output_tokens: None,
                thinking: request.thinking.unwrap_or(parts.settings.thinking),
                vision: false,
            };
            let call = CallContext { session_key: &request.session_key, chosen: request.model.as_ref(), steer: None };
            let limit =
                TextLimit { chars_left: parts.settings.max_reply_chars, run_limit: parts.settings.max_reply_chars };
            let turn = self.call_model(&model_request, flush, events, &call, &limit).await?;
            flush.usage.add(turn.usage);
            flush.messages.push(ChatMessage::Assistant {
                text: turn.text.clone(),
                tool_calls: turn.tool_calls.clone(),
                thinking: turn.thinking.clone(),
            });
            if turn.tool_calls.is_empty() || round == FLUSH_TOOL_ROUNDS {
                return Ok(turn.text);
            }
            for call in &turn.tool_calls {
                self.execute_tool(call, flush, request, events, skills).await;
            }
        }
        Ok(String::new())
    }
}
