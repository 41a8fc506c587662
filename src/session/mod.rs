//! Sessions (SPEC §4): which conversation a message continues, how a context is kept within
//! the model's window, and what an agent's `sessions_list` tool sees.
//!
//! The session store itself (what a session is, its transcript, when it resets, and its
//! SQLite and PostgreSQL backends) is `state::sessions`; this room is what runs on top of it:
//!
//! - [`compaction`]: when and how a context is summarized to fit the model;
//! - [`catalog_for`]: what an agent's `sessions_list` tool sees;
//! - [`run_in_session`]: an agent run that continues a session's transcript.

mod catalog;
pub mod compaction;
mod run;

pub use crate::state::sessions::reset::{self, ResetReason};
pub use crate::state::sessions::{
    CompactionEntry, OpenedRun, Resolved, Session, SessionOverrides, SessionStore, StoreError, TranscriptEntry,
    TranscriptSaved,
};
pub use catalog::catalog_for;
pub use run::run_in_session;
