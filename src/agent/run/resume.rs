//! Resuming a run a crash cut short (issue 41): the delivery ledger recorded the run's own
//! messages after each tool call that changed something ([`crate::reply::ledger::sends`]),
//! and the run re-done for the same messages starts from there rather than asking the
//! model to do it all again — a `message` it had sent, a job it had scheduled, is not done
//! twice.
//!
//! What the killed attempt said is streamed to the reply again (the reply sends only what
//! its block messages had not reached, and a preview shows the whole answer), its texts are
//! the start of this run's reply, and calls it had made but not answered when it was
//! killed are made again under the same call ids, so their sends are reconciled by key.

use std::sync::Arc;

use super::super::events::{AssistantEvent, RunEvents};
use super::super::skills::SkillsSnapshot;
use super::{AgentRunner, Payload, RunRequest, RunState};
use crate::reply::ledger::StepKind;
use crate::types::conversation::ChatMessage;

/// What a killed attempt at a run recorded in the delivery ledger, for the run that takes
/// it up again.
#[derive(Debug, Clone, Default)]
pub struct Resumption {
    /// Its own messages as far as its last step (its user message first).
    pub messages: Vec<ChatMessage>,
    /// It had ended: `messages` is all it said, and the model is not asked again unless
    /// messages arrived since.
    pub ended: bool,
}

/// How many of the `resumed` messages the session saved already: the longest end of
/// `history` that is also the start of `resumed` (a killed attempt that ended saved its
/// transcript before its reply was delivered; one of several attempts may have). Those are
/// taken out of the history, which the resumed messages continue, and are not saved again.
pub(super) fn saved_already(history: &[ChatMessage], resumed: &[ChatMessage]) -> usize {
    (1..=history.len().min(resumed.len()))
        .rev()
        .find(|&count| history[history.len() - count..] == resumed[..count])
        .unwrap_or(0)
}

impl AgentRunner {
    /// Takes the resumed messages (`state.messages[state.first_new..state.recorded]`) up
    /// again: shows their texts, makes the calls left unanswered. Returns the tool rounds
    /// they hold, which count against the run's limit.
    pub(super) async fn resume(
        &self,
        state: &mut RunState,
        request: &RunRequest,
        events: &RunEvents,
        skills: &Arc<SkillsSnapshot>,
    ) -> u32 {
        let resumed: Vec<ChatMessage> = state.messages[state.first_new..state.recorded].to_vec();
        let mut rounds = 0;
        for message in &resumed {
            let ChatMessage::Assistant { text, tool_calls, .. } = message else { continue };
            rounds += u32::from(!tool_calls.is_empty());
            if text.trim().is_empty() {
                continue;
            }
            events.assistant(AssistantEvent::Delta { delta: text.clone() });
            events.assistant(AssistantEvent::TextEnd { text: text.clone() });
            events.assistant(AssistantEvent::MessageEnd { text: text.clone() });
            state.reply_chars += text.chars().count();
            let text = self.attach_media_lines(text, &request.session_key, state).await;
            state.payloads.push(Payload { text, is_error: false });
        }
        // Their results follow the calls, before the messages that arrived since (already
        // after the resumed ones): a tool result must answer the turn just before it.
        let arrived = state.messages.split_off(state.recorded.min(state.messages.len()));
        for call in unanswered_calls(&resumed) {
            tracing::info!(tool = %call.name, call_id = %call.id, "making a call again that a killed attempt at this run had made");
            self.execute_tool(&call, state, request, events, skills).await;
        }
        state.messages.extend(arrived);
        rounds
    }

    /// Records the run's messages since its last step in the delivery ledger, when the run's
    /// reply is recorded: a crash from now on resumes here (and makes the calls of its last
    /// turn that no result answers again, under the same ids).
    pub(super) async fn record_step(&self, state: &mut RunState, request: &RunRequest) {
        if state.recorded >= state.messages.len() {
            return;
        }
        Self::write_step(state, request, false).await;
    }

    /// Records that the run ended, with what it said since its last step, before its
    /// transcript is saved: a run re-done for its messages after a crash delivers that
    /// rather than asking the model again, and leaves the saved transcript out of its
    /// history instead of being told twice. Nothing is written when the run has nothing to
    /// save (`saved_from`: where what it saves starts).
    pub(super) async fn record_end(&self, state: &mut RunState, request: &RunRequest, saved_from: usize) {
        if saved_from >= state.messages.len() {
            return;
        }
        Self::write_step(state, request, true).await;
    }

    /// Writes the run's messages since its last step (all of them when it has none yet),
    /// with the messages steered into it so far, when its reply is recorded.
    async fn write_step(state: &mut RunState, request: &RunRequest, ended: bool) {
        let Some(sends) = &request.send_ledger else { return };
        let whole = state.recorded == state.first_new;
        let messages = state.messages.get(state.recorded..).unwrap_or_default().to_vec();
        state.recorded = state.messages.len();
        let joined = request.steer.as_ref().map(super::super::SteerInbox::taken_seqs).unwrap_or_default();
        sends.step(messages, joined, &request.run_id, StepKind { ended, whole }).await;
    }
}

/// The calls of the last assistant turn in `messages` that no tool result answers.
fn unanswered_calls(messages: &[ChatMessage]) -> Vec<crate::types::conversation::ToolCall> {
    let Some(last) = messages.iter().rposition(|message| matches!(message, ChatMessage::Assistant { .. })) else {
        return Vec::new();
    };
    let ChatMessage::Assistant { tool_calls, .. } = &messages[last] else { return Vec::new() };
    tool_calls
        .iter()
        .filter(|call| {
            !messages[last..]
                .iter()
                .any(|message| matches!(message, ChatMessage::ToolResult { call_id, .. } if *call_id == call.id))
        })
        .cloned()
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::types::conversation::ToolCall;

    #[test]
    fn what_the_session_saved_of_the_resumed_messages_is_the_overlap_at_its_end() {
        let (a, b, c, d) = (
            ChatMessage::user("a"),
            ChatMessage::assistant("b", Vec::new()),
            ChatMessage::user("c"),
            ChatMessage::assistant("d", Vec::new()),
        );
        let history = [a.clone(), b.clone(), c.clone(), d.clone()];
        assert_eq!(saved_already(&history, &[c.clone(), d.clone(), a.clone()]), 2, "saved, then more");
        assert_eq!(saved_already(&history, std::slice::from_ref(&c)), 0, "not at the end: not this run's");
        assert_eq!(saved_already(&history[..2], &[c.clone(), d.clone()]), 0, "never saved");
        assert_eq!(saved_already(&history, &history), 4);
        assert_eq!(saved_already(&[], &[a]), 0);
    }

    #[test]
    fn only_the_last_turns_unanswered_calls_are_made_again() {
        let call = |id: &str| ToolCall { id: id.into(), name: "message".into(), arguments: "{}".into() };
        let result = |id: &str| ChatMessage::ToolResult {
            call_id: id.into(),
            name: "message".into(),
            content: "ok".into(),
            is_error: false,
            images: Vec::new(),
        };
        let messages = vec![
            ChatMessage::user("hi"),
            ChatMessage::Assistant { text: String::new(), tool_calls: vec![call("a")], thinking: Vec::new() },
            result("a"),
            ChatMessage::Assistant { text: "and".into(), tool_calls: vec![call("b"), call("c")], thinking: Vec::new() },
            result("b"),
        ];
        let ids: Vec<String> = unanswered_calls(&messages).into_iter().map(|call| call.id).collect();
        assert_eq!(ids, ["c"]);
        assert!(unanswered_calls(&messages[..3]).is_empty());
    }
}
