//! One streamed model reply, assembled: text, reasoning and tool calls from their deltas,
//! with the `assistant` events a listener sees as it grows.

use std::collections::BTreeMap;

use super::conversation::{ToolCall, Usage};
use super::events::{AssistantEvent, RunEvents};
use super::providers::{ModelEvent, StopReason};

/// A finished assistant message.
#[derive(Debug, Clone, PartialEq)]
pub struct AssistantTurn {
    pub text: String,
    pub tool_calls: Vec<ToolCall>,
    pub usage: Usage,
    pub stop: StopReason,
}

/// Collects one model reply as it streams and emits its events.
#[derive(Debug, Default)]
pub struct TurnAccumulator {
    text: String,
    text_open: bool,
    calls: BTreeMap<usize, ToolCall>,
    usage: Usage,
    stop: Option<StopReason>,
    shown: bool,
}

impl TurnAccumulator {
    /// Whether anything reached listeners; after that, a failed call is not retried.
    pub fn has_shown_output(&self) -> bool {
        self.shown
    }

    /// Whether the model started calling a tool in this reply.
    pub fn has_tool_calls(&self) -> bool {
        !self.calls.is_empty()
    }

    pub fn is_stopped(&self) -> bool {
        self.stop.is_some()
    }

    pub fn apply(&mut self, event: ModelEvent, events: &RunEvents) {
        match event {
            ModelEvent::TextDelta(delta) if delta.is_empty() => {}
            ModelEvent::TextDelta(delta) => {
                self.text.push_str(&delta);
                self.text_open = true;
                self.shown = true;
                events.assistant(AssistantEvent::Delta { delta, text: self.text.clone() });
            }
            ModelEvent::ReasoningDelta(delta) => {
                self.shown = true;
                events.assistant(AssistantEvent::Reasoning { delta });
            }
            ModelEvent::ToolCallStart { index, id, name } => {
                self.end_text(events);
                self.shown = true;
                self.calls.insert(index, ToolCall { id, name, arguments: String::new() });
            }
            ModelEvent::ToolCallDelta { index, arguments } => {
                self.calls
                    .entry(index)
                    .or_insert_with(|| ToolCall {
                        id: format!("call_{index}"),
                        name: String::new(),
                        arguments: String::new(),
                    })
                    .arguments
                    .push_str(&arguments);
            }
            // The arguments are whole; they are validated when the call is executed.
            ModelEvent::ToolCallEnd { .. } => {}
            // Providers report usage once per reply, as a total.
            ModelEvent::Usage(usage) => self.usage = usage,
            ModelEvent::Stop(reason) => self.stop = Some(reason),
        }
    }

    /// Closes the reply: ends the open text run and the message.
    pub fn finish(mut self, events: &RunEvents) -> AssistantTurn {
        self.end_text(events);
        events.assistant(AssistantEvent::MessageEnd { text: self.text.clone() });
        AssistantTurn {
            text: self.text,
            tool_calls: self.calls.into_values().collect(),
            usage: self.usage,
            stop: self.stop.unwrap_or(StopReason::EndTurn),
        }
    }

    fn end_text(&mut self, events: &RunEvents) {
        if self.text_open {
            self.text_open = false;
            events.assistant(AssistantEvent::TextEnd { text: self.text.clone() });
        }
    }
}
