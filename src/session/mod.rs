//! Sessions (SPEC §4): which conversation a message continues, its transcript, its
//! counters and per-session settings, and when it starts afresh.
//!
//! - [`store`]: the [`SessionStore`] interface (a PostgreSQL backend is planned beside
//!   the SQLite one);
//! - [`sqlite`]: the default store, in the state directory's database;
//! - [`reset`]: the daily / idle reset rules;
//! - [`compaction`]: when and how a context is summarized to fit the model;
//! - [`run_in_session`]: an agent run that continues a session's transcript.

pub mod compaction;
pub mod reset;
mod run;
pub mod sqlite;
pub mod store;

pub use reset::ResetReason;
pub use run::run_in_session;
pub use sqlite::{AgentSessions, SqliteSessionStore};
pub use store::{
    CompactionEntry, OpenedRun, Resolved, Session, SessionOverrides, SessionStore, StoreError, TranscriptEntry,
    TranscriptSaved,
};
