//! The typed data each hook point hands its handlers, and what a modifying handler may
//! answer. Observing hooks get an event and answer nothing; modifying hooks answer an
//! `Option` of a change (`None`: leave it as it is).

use std::time::Duration;

use chrono::{DateTime, Utc};
use serde::Serialize;

use crate::agent::{ChatMessage, Usage};

/// `before_agent_start`: the system prompt about to be used, before the first model call.
#[derive(Debug, Clone)]
pub struct BeforeAgentStart {
    pub run_id: String,
    pub session_key: String,
    /// The user's message (or the batch of queued messages) the run answers.
    pub message: String,
    /// The prompt as the handlers before this one left it.
    pub system_prompt: String,
}

/// A `before_agent_start` handler's change to the system prompt.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct AgentStartChange {
    /// Replaces the whole system prompt (applied before `context`).
    pub system_prompt: Option<String>,
    /// Appended to the system prompt as a paragraph of its own.
    pub context: Option<String>,
}

/// `agent_end`: a run finished (completed, failed or aborted).
#[derive(Debug, Clone)]
pub struct AgentEnd {
    pub run_id: String,
    pub session_key: String,
    /// The whole conversation as the run left it: history, the user's message, the
    /// assistant's turns and tool results.
    pub messages: Vec<ChatMessage>,
    /// `completed`, `failed` or `aborted`.
    pub status: &'static str,
    pub error: Option<String>,
    pub usage: Usage,
    pub started_at: DateTime<Utc>,
    pub ended_at: DateTime<Utc>,
}

/// `before_tool_call`: a tool call the model made, before it runs.
#[derive(Debug, Clone)]
pub struct BeforeToolCall {
    pub run_id: String,
    pub session_key: String,
    pub tool_name: String,
    pub call_id: String,
    /// The arguments as the handlers before this one left them.
    pub params: serde_json::Value,
}

/// A `before_tool_call` handler's answer.
#[derive(Debug, Clone, PartialEq)]
pub enum ToolCallDecision {
    /// Run the tool with these arguments instead.
    Rewrite(serde_json::Value),
    /// Do not run the tool; the model gets an error result naming `reason`. Final: no
    /// later handler is asked.
    Block { reason: String },
}

/// `after_tool_call`: a tool call ran (or was blocked).
#[derive(Debug, Clone)]
pub struct AfterToolCall {
    pub run_id: String,
    pub session_key: String,
    pub tool_name: String,
    pub call_id: String,
    pub params: serde_json::Value,
    pub result: String,
    pub is_error: bool,
    pub duration: Duration,
}

/// `tool_result_persist`: a tool result about to be written to the session transcript.
#[derive(Debug, Clone, Copy)]
pub struct ToolResultPersist<'a> {
    pub session_key: &'a str,
    pub tool_name: &'a str,
    pub call_id: &'a str,
    /// The result as the handlers before this one left it.
    pub content: &'a str,
    pub is_error: bool,
}

/// `message_received`: an inbound message the dispatcher accepted for a session (a
/// message to answer or a command).
#[derive(Debug, Clone, Serialize)]
pub struct MessageReceived {
    pub session_key: String,
    pub channel: String,
    pub account_id: String,
    pub chat_id: String,
    pub message_id: String,
    pub sender_id: String,
    pub text: String,
}

/// `message_sending`: a reply message (or a notice) about to be sent.
#[derive(Debug, Clone)]
pub struct MessageSending {
    pub channel: String,
    pub account_id: String,
    pub chat_id: String,
    /// The text as the handlers before this one left it (already rendered in the
    /// channel's markup).
    pub text: String,
}

/// A `message_sending` handler's answer.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum SendingDecision {
    Rewrite(String),
    /// Send nothing. Final: no later handler is asked.
    Cancel,
}

/// `message_sent`: a message reached the platform.
#[derive(Debug, Clone, Serialize)]
pub struct MessageSent {
    pub channel: String,
    pub account_id: String,
    pub chat_id: String,
    pub message_id: String,
    pub text: String,
}

/// Why a session started or ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum SessionReason {
    /// The first message of a key, or `/new`.
    New,
    /// `/reset`.
    Reset,
    /// No message for `session.reset.idle_minutes`.
    Idle,
    /// The daily reset hour passed.
    Daily,
    /// Compaction replaced the transcript with a summary.
    Compaction,
}

/// `session_start` / `session_end`.
#[derive(Debug, Clone)]
pub struct SessionEvent {
    pub session_key: String,
    pub session_id: String,
    pub reason: SessionReason,
}

/// `gateway_start` / `gateway_stop`.
#[derive(Debug, Clone)]
pub struct GatewayEvent {
    /// The address the gateway listens on (`127.0.0.1:18789`).
    pub address: String,
}

/// `before_compaction`: the older part of a transcript is about to be summarized.
#[derive(Debug, Clone)]
pub struct BeforeCompaction {
    pub run_id: String,
    pub session_key: String,
    /// Entries in the context before compaction, and how many will be summarized.
    pub message_count: usize,
    pub compacting: usize,
    pub tokens_before: Option<u64>,
}

/// `after_compaction`: the summary replaced the older entries.
#[derive(Debug, Clone)]
pub struct AfterCompaction {
    pub run_id: String,
    pub session_key: String,
    pub compacted: usize,
    pub summary: String,
    pub tokens_after: Option<u64>,
    /// The model call that overflowed is retried next.
    pub will_retry: bool,
}
