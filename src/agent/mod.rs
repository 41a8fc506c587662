//! The agent loop (SPEC §6): a message in, model inference and tool calls, a streamed
//! reply out, with `lifecycle` / `assistant` / `tool` events along the way.
//!
//! - [`run`]: [`AgentRunner`] drives one run — prompt, model ↔ tool rounds, timeout,
//!   cancellation, retries — and returns a [`RunOutcome`].
//! - [`providers`]: the model clients (OpenAI-compatible, Anthropic, echo).
//! - [`tools`]: typed tools and their registry.
//! - [`events`]: the event stream and its delivery guarantees.
//! - [`compaction`]: what the loop asks of whoever can shorten a session's context.
//! - [`prompt`] and [`skills`]: what goes into the system prompt.
//! - [`roster`]: the agents of one gateway, by id.

mod change_cache;
pub mod compaction;
pub mod events;
pub mod inline_reasoning;
pub mod prompt;
pub mod providers;
pub mod roster;
pub mod run;
pub mod skills;
mod steer;
pub mod tools;
mod turn;

pub use crate::types::conversation::{ChatMessage, ToolCall, Usage};
pub use events::{AgentEvent, AgentStream, AssistantEvent, CompactionEvent, EventBus, LifecycleEvent, ToolEvent};
pub use roster::Agents;
pub use run::{
    AbortReason, AgentRunner, Payload, Resumption, RunHandle, RunOutcome, RunRequest, RunSettings, RunStatus,
    RunnerParts,
};
pub use steer::SteerInbox;
pub use turn::AssistantTurn;
