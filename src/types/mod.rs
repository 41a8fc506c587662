//! Value types several floors of the house share, kept in a leaf that imports nothing of the
//! crate, so that `config` and `state` can name them without an import chain leading back up
//! into them.
//!
//! - [`conversation`]: the conversation as the agent loop, the providers and the session
//!   store see it ([`ChatMessage`], [`Usage`]);
//! - [`levels`]: how hard a model thinks ([`ThinkingLevel`]) and how its reasoning is shown
//!   ([`ReasoningDisplay`]), which the config, sessions and models all name;
//! - [`schedule`]: when a scheduled job runs (`at`, `in`, `every`, `cron`, in an IANA zone),
//!   which the config checks its keys with and `cron` fires by.
//!
//! The rooms that own these concepts re-export them (`agent::ChatMessage`,
//! `models::ThinkingLevel`); code below those rooms names them here.

pub mod conversation;
pub mod levels;
pub mod schedule;

pub use conversation::{ChatMessage, ToolCall, Usage};
pub use levels::{ReasoningDisplay, ThinkingLevel};
