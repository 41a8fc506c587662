//! The conversation as the agent loop and the providers see it, independent of any
//! vendor's wire format.

use serde::{Deserialize, Serialize};

/// One entry of the conversation sent to the model.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "role", rename_all = "snake_case")]
pub enum ChatMessage {
    User {
        text: String,
    },
    Assistant {
        text: String,
        #[serde(default, skip_serializing_if = "Vec::is_empty")]
        tool_calls: Vec<ToolCall>,
        /// The model's signed thinking blocks (Anthropic extended thinking), kept verbatim:
        /// a tool-use loop must send them back unmodified or the API refuses it.
        #[serde(default, skip_serializing_if = "Vec::is_empty")]
        thinking: Vec<ThinkingBlock>,
    },
    /// The answer to one tool call, matched to it by `call_id`.
    ToolResult {
        call_id: String,
        name: String,
        content: String,
        is_error: bool,
    },
}

impl ChatMessage {
    pub fn user(text: impl Into<String>) -> Self {
        ChatMessage::User { text: text.into() }
    }

    /// An assistant message without thinking blocks.
    pub fn assistant(text: impl Into<String>, tool_calls: Vec<ToolCall>) -> Self {
        ChatMessage::Assistant { text: text.into(), tool_calls, thinking: Vec::new() }
    }
}

/// A thinking block as the model produced it. Only its producer can read the signature or
/// the redacted data; Ferry stores and returns them untouched.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "type", rename_all = "snake_case")]
pub enum ThinkingBlock {
    Thinking { thinking: String, signature: String },
    Redacted { data: String },
}

/// A tool call the model made. `arguments` is the raw JSON text the model produced, which
/// may be invalid: validating it is the tool registry's job, so the model can be told.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ToolCall {
    pub id: String,
    pub name: String,
    pub arguments: String,
}

/// Tokens a run consumed, summed over its model calls.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Usage {
    pub input_tokens: u64,
    pub output_tokens: u64,
}

impl Usage {
    pub fn add(&mut self, other: Usage) {
        self.input_tokens += other.input_tokens;
        self.output_tokens += other.output_tokens;
    }
}
