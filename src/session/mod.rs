//! Sessions (SPEC §4): which conversation a message continues, its transcript, its
//! counters and per-session settings, and when it starts afresh.
//!
//! - [`store`]: the [`SessionStore`] interface, which each state backend implements;
//! - [`sqlite`]: the default store, in the state directory's database;
//! - [`reset`]: the daily / idle reset rules;
//! - [`compaction`]: when and how a context is summarized to fit the model;
//! - [`catalog_for`]: what an agent's `sessions_list` tool sees;
//! - [`run_in_session`]: an agent run that continues a session's transcript.

mod catalog;
pub mod compaction;
pub mod reset;
mod run;
pub mod sqlite;
pub mod store;
pub(crate) mod transcript;

pub use catalog::catalog_for;
pub use reset::ResetReason;
pub use run::run_in_session;
pub use sqlite::SqliteSessionStore;
pub use store::{
    CompactionEntry, OpenedRun, Resolved, Session, SessionOverrides, SessionStore, StoreError, TranscriptEntry,
    TranscriptSaved,
};
