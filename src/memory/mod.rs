//! Long-term memory: the agent remembers each person, privately, and each group, across
//! conversations, `/new` and compaction.
//!
//! Memory is markdown documents per agent and scope, kept in the state store (so replicas
//! share them): `MEMORY.md` for lasting facts, `memory/YYYY-MM-DD.md` for dated notes,
//! `memory/<name>.md` for anything else. The agent reads and writes them with the
//! `memory_search`, `memory_get` and `memory_write` tools, users with `/remember`,
//! `/memory` and `/forget`; nothing is saved behind anyone's back.
//!
//! - [`scope`] decides whose memory a conversation works in, the promise everything else
//!   rests on: a person's private memory is never read in a group or in another person's DM.
//! - [`paths`] says which documents may exist; [`documents`] reads and writes them;
//!   [`chunk`] cuts them into search chunks with line ranges, [`terms`] writes queries for
//!   both backends' full-text search, [`search`] finds and ranks ([`rank`]: reciprocal rank
//!   fusion, decay of dated notes).
//! - [`embed`] adds vector search through an OpenAI-compatible endpoint when one is
//!   configured; without it, or while it is down, keyword search answers alone. [`vectors`]
//!   keeps each searched scope's vectors between searches, until the scope changes or
//!   goes idle.
//! - [`mirror`] keeps one scope's documents as files in each agent's workspace for hand
//!   editing (`mirror_files`), and reads the edits back.
//! - [`prompt`] puts a private scope's `MEMORY.md` (and, with `recall`, a few matching
//!   passages) into the system prompt.

pub mod chunk;
mod documents;
pub mod embed;
pub mod mirror;
mod mirror_disk;
pub mod paths;
pub mod prompt;
pub mod rank;
pub mod scope;
pub mod search;
mod service;
pub mod terms;
pub mod vectors;

use chrono::{NaiveDate, Utc};
use chrono_tz::Tz;

pub use documents::{Memory, MemoryError, WriteMode, Written};
pub use service::MemoryService;

/// One agent's access to memory: the store, its embeddings endpoint when configured, and
/// the zone "today" is read in (the agent's `user_timezone`, else the host's).
#[derive(Debug, Clone)]
pub struct AgentMemory {
    pub memory: Memory,
    pub embedder: Option<embed::Embedder>,
    pub tz: Tz,
}

#[cfg(test)]
#[path = "backends_tests.rs"]
mod backends_tests;

impl AgentMemory {
    /// Today in the agent's zone: the dated note a default write goes to.
    pub fn today(&self) -> NaiveDate {
        Utc::now().with_timezone(&self.tz).date_naive()
    }
}
