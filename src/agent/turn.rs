//! One streamed model reply, assembled: text, reasoning and tool calls from their deltas,
//! with the `assistant` events a listener sees as it grows.

use std::collections::BTreeMap;

use super::events::{AssistantEvent, RunEvents};
use super::inline_reasoning::{InlineReasoning, Piece};
use super::providers::{ModelEvent, StopReason};
use crate::types::conversation::{ThinkingBlock, ToolCall, Usage};

/// A finished assistant message.
#[derive(Debug, Clone, PartialEq)]
pub struct AssistantTurn {
    pub text: String,
    pub tool_calls: Vec<ToolCall>,
    /// Signed thinking blocks, for the next call of a tool-use loop.
    pub thinking: Vec<ThinkingBlock>,
    pub usage: Usage,
    pub stop: StopReason,
    /// The text reached the run's limit and was cut there (with a note saying so); the
    /// model was stopped and the run ends with this turn.
    pub cut: bool,
}

/// How much more text the run may produce, and what a cut reply ends with.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TextLimit {
    /// Characters left for this reply.
    pub chars_left: usize,
    /// The run's whole limit, named in the note.
    pub run_limit: usize,
}

impl TextLimit {
    /// What a cut reply ends with, so the user knows it is not the whole answer.
    pub fn note(&self) -> String {
        format!("\n\n[Reply cut: it reached the limit of {} characters.]", self.run_limit)
    }
}

/// No limit to speak of: for callers that bound text elsewhere.
impl Default for TextLimit {
    fn default() -> Self {
        Self { chars_left: usize::MAX, run_limit: usize::MAX }
    }
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
    limit: TextLimit,
    /// Characters in `text`, counted as deltas arrive (not the note).
    chars: usize,
    cut: bool,
    /// Takes `<think>…</think>` blocks out of the text as it streams.
    inline: InlineReasoning,
    thinking: Vec<ThinkingBlock>,
}

impl TurnAccumulator {
    /// An accumulator whose text stops at `limit`.
    pub fn with_limit(limit: TextLimit) -> Self {
        Self { limit, ..Self::default() }
    }

    /// Whether the text reached its limit; nothing more is taken from the model.
    pub fn is_cut(&self) -> bool {
        self.cut
    }

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
            ModelEvent::TextDelta(_) if self.cut => {}
            ModelEvent::TextDelta(delta) => {
                let pieces = self.inline.push(&delta);
                self.apply_pieces(pieces, events);
            }
            ModelEvent::ReasoningDelta(delta) => self.reasoning(delta, events),
            ModelEvent::Thinking(block) => self.thinking.push(block),
            _ if self.cut => {}
            ModelEvent::ToolCallStart { index, id, name } => {
                let held = self.inline.finish();
                self.apply_pieces(held, events);
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
        if !self.cut {
            let held = self.inline.finish();
            self.apply_pieces(held, events);
        }
        self.end_text(events);
        events.assistant(AssistantEvent::MessageEnd { text: self.text.clone() });
        AssistantTurn {
            text: self.text,
            tool_calls: self.calls.into_values().collect(),
            thinking: self.thinking,
            usage: self.usage,
            stop: self.stop.unwrap_or(if self.cut { StopReason::MaxTokens } else { StopReason::EndTurn }),
            cut: self.cut,
        }
    }

    fn apply_pieces(&mut self, pieces: Vec<Piece>, events: &RunEvents) {
        for piece in pieces {
            match piece {
                Piece::Answer(text) => self.text_delta(text, events),
                Piece::Reasoning(text) => self.reasoning(text, events),
            }
        }
    }

    fn reasoning(&mut self, delta: String, events: &RunEvents) {
        if delta.is_empty() {
            return;
        }
        self.shown = true;
        events.assistant(AssistantEvent::Reasoning { delta });
    }

    /// Answer text: kept within the run's limit and streamed to listeners.
    fn text_delta(&mut self, mut delta: String, events: &RunEvents) {
        if self.cut || delta.is_empty() {
            return;
        }
        let room = self.limit.chars_left.saturating_sub(self.chars);
        match delta.char_indices().nth(room) {
            Some((cut_at, _)) => {
                delta.truncate(cut_at);
                delta.push_str(&self.limit.note());
                self.chars += room;
                self.cut = true;
                // Whatever the model had begun to call cannot be whole.
                self.calls.clear();
            }
            None => self.chars += delta.chars().count(),
        }
        self.text.push_str(&delta);
        self.text_open = true;
        self.shown = true;
        events.assistant(AssistantEvent::Delta { delta });
    }

    fn end_text(&mut self, events: &RunEvents) {
        if self.text_open {
            self.text_open = false;
            events.assistant(AssistantEvent::TextEnd { text: self.text.clone() });
        }
    }
}
