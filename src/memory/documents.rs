//! Reading and writing memory documents for the tools and the chat commands: appends,
//! replacements and exact-text edits made on the version they were computed from (a write
//! that lost a race is computed again), re-chunked and re-indexed in the same write.

use std::sync::Arc;

use chrono::NaiveDate;
use tokio::sync::Notify;

use super::chunk::{CHUNK_OVERLAP_TOKENS, CHUNK_TOKENS, chunk, lines};
use super::paths::{self, PathError};
use super::terms::index_text;
use super::vectors::VectorCache;
use crate::config::MemoryConfig;
use crate::state::StorageError;
use crate::state::memory::{DocChunk, DocSummary, MemoryLimits, MemoryScope, MemoryStore, PutError};

/// Attempts at a write that keeps losing races to other writers of the same document; each
/// waits a little longer than the last, so racing writers spread out.
const WRITE_ATTEMPTS: u32 = 32;

/// How a write changes its document.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum WriteMode {
    /// Adds the text at the end, on a line of its own.
    Append,
    /// The text becomes the whole document.
    Replace,
    /// Exactly this text, found once in the document, becomes the new text.
    Edit { old_text: String },
}

/// What a write did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Written {
    pub path: String,
    /// 0 when the write emptied (removed) the document.
    pub version: i64,
    pub bytes: u64,
    /// The text was already there, word for word: nothing was written.
    pub unchanged: bool,
}

/// Why memory could not be read or written, worded for the model (tool results) and the
/// user (chat commands).
#[derive(Debug, thiserror::Error)]
pub enum MemoryError {
    #[error(transparent)]
    Path(#[from] PathError),
    #[error("nothing to write: `content` is empty")]
    Empty,
    #[error("`old_text` was not found in {path}; read it with memory_get and copy the text exactly")]
    OldTextMissing { path: String },
    #[error("`old_text` appears {count} times in {path}; include more of the text around it so it is found once")]
    OldTextAmbiguous { path: String, count: usize },
    #[error("{0}")]
    Refused(String),
    #[error("{path} is being written by someone else right now; try again")]
    Busy { path: String },
    #[error("memory is unavailable right now ({0})")]
    Storage(#[from] StorageError),
}

impl From<PutError> for MemoryError {
    fn from(error: PutError) -> Self {
        match error {
            PutError::Storage(error) => MemoryError::Storage(error),
            refused => MemoryError::Refused(refused.to_string()),
        }
    }
}

/// An agent's memory: documents per scope in the state store, their search index, and the
/// settings that bound them. Cheap to clone.
#[derive(Clone)]
pub struct Memory {
    pub(super) store: Arc<dyn MemoryStore>,
    pub(super) config: Arc<MemoryConfig>,
    /// Woken after each write, so new text gets its vectors soon (`super::embed`).
    pub(super) written: Arc<Notify>,
    /// The scopes' vectors between searches (`super::vectors`).
    pub(super) vectors: VectorCache,
}

impl std::fmt::Debug for Memory {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Memory").finish_non_exhaustive()
    }
}

impl Memory {
    pub fn new(store: Arc<dyn MemoryStore>, config: MemoryConfig) -> Self {
        Self { store, config: Arc::new(config), written: Arc::default(), vectors: VectorCache::default() }
    }

    pub fn config(&self) -> &MemoryConfig {
        &self.config
    }

    fn limits(&self) -> MemoryLimits {
        MemoryLimits { doc_bytes: self.config.max_document_bytes, scope_bytes: self.config.max_scope_bytes }
    }

    /// Lines `from..from + lines` of the document at `path` (all of it by default); a
    /// document never written is empty text, not an error.
    pub async fn read(
        &self,
        scope: &MemoryScope,
        path: &str,
        from: Option<u32>,
        count: Option<u32>,
    ) -> Result<String, MemoryError> {
        let path = paths::check(path)?;
        let Some(doc) = self.store.get(scope, &path).await? else { return Ok(String::new()) };
        Ok(match (from, count) {
            (None, None) => doc.content,
            (from, count) => lines(&doc.content, from.unwrap_or(1), count),
        })
    }

    /// Indexes the stored chunks again if an older build indexed them by an older word
    /// normalization ([`super::terms::INDEX_VERSION`]), so searches find what it stored the
    /// way they find what this build stores. Returns how many chunks were indexed again.
    pub async fn index_as_this_version(&self) -> Result<u64, MemoryError> {
        Ok(self.store.reindex(super::terms::INDEX_VERSION, index_text).await?)
    }

    /// Every document of the scope, for `/memory` and `ferry memory status`.
    pub async fn list(&self, scope: &MemoryScope) -> Result<Vec<DocSummary>, MemoryError> {
        Ok(self.store.list(scope).await?)
    }

    /// Writes `content` to `path` (today's note, `memory/<today>.md`, when `None`).
    pub async fn write(
        &self,
        scope: &MemoryScope,
        path: Option<&str>,
        content: &str,
        mode: &WriteMode,
        today: NaiveDate,
    ) -> Result<Written, MemoryError> {
        let path = match path {
            Some(path) => paths::check(path)?,
            None => paths::daily(today),
        };
        if content.trim().is_empty() && !matches!(mode, WriteMode::Edit { .. }) {
            return Err(MemoryError::Empty);
        }
        for attempt in 0..WRITE_ATTEMPTS {
            let current = self.store.get(scope, &path).await?;
            let old = current.as_ref().map_or("", |doc| doc.content.as_str());
            let new = match changed(old, content, mode, &path)? {
                Some(new) => new,
                None => {
                    let version = current.as_ref().map_or(0, |doc| doc.version);
                    return Ok(Written { path, version, bytes: old.len() as u64, unchanged: true });
                }
            };
            let expected = current.as_ref().map(|doc| doc.version);
            match self.put_whole(scope, &path, &new, expected).await {
                Ok(version) => {
                    return Ok(Written { path, version, bytes: new.len() as u64, unchanged: false });
                }
                Err(PutError::Conflict { .. }) => backoff(attempt).await,
                Err(error) => return Err(error.into()),
            }
        }
        Err(MemoryError::Busy { path })
    }

    /// Makes `content` the whole document at `path` (already checked) if it is still at
    /// `expected` (`None`: it must not exist yet); empty `content` removes it. Chunked and
    /// indexed like every write, with no retry: a lost race comes back as
    /// [`PutError::Conflict`], for a caller with a rule of its own for it (the file mirror's
    /// "the store wins"). Returns the new version, 0 when removed.
    pub(super) async fn put_whole(
        &self,
        scope: &MemoryScope,
        path: &str,
        content: &str,
        expected: Option<i64>,
    ) -> Result<i64, PutError> {
        let chunks = chunks_of(content);
        let version = self.store.put(scope, path, content, &chunks, expected, self.limits()).await?;
        self.written.notify_one();
        crate::metrics::metrics().memory_written();
        Ok(version)
    }

    /// Removes every line that contains `text` (ignoring case) from every document of the
    /// scope (`/forget`). Returns how many lines went, by document.
    pub async fn forget(&self, scope: &MemoryScope, text: &str) -> Result<Vec<(String, usize)>, MemoryError> {
        let needle = text.trim().to_lowercase();
        if needle.is_empty() {
            return Err(MemoryError::Empty);
        }
        let mut removed = Vec::new();
        for summary in self.store.list(scope).await? {
            let mut attempts = 0;
            loop {
                let Some(doc) = self.store.get(scope, &summary.path).await? else { break };
                let kept: Vec<&str> =
                    doc.content.lines().filter(|line| !line.to_lowercase().contains(&needle)).collect();
                let gone = doc.content.lines().count() - kept.len();
                if gone == 0 {
                    break;
                }
                let mut new = kept.join("\n");
                if !new.trim().is_empty() && doc.content.ends_with('\n') {
                    new.push('\n');
                }
                if new.trim().is_empty() {
                    new.clear();
                }
                let chunks = chunks_of(&new);
                match self.store.put(scope, &summary.path, &new, &chunks, Some(doc.version), self.limits()).await {
                    Ok(_) => {
                        removed.push((summary.path.clone(), gone));
                        break;
                    }
                    Err(PutError::Conflict { .. }) if attempts < WRITE_ATTEMPTS => {
                        backoff(attempts).await;
                        attempts += 1;
                    }
                    Err(PutError::Conflict { .. }) => return Err(MemoryError::Busy { path: summary.path }),
                    Err(error) => return Err(error.into()),
                }
            }
        }
        if !removed.is_empty() {
            crate::metrics::metrics().memory_written();
        }
        Ok(removed)
    }
}

/// The wait after losing a race `attempt` times: a millisecond more each time, plus up to
/// as much again at random (so two writers that collided do not collide again).
async fn backoff(attempt: u32) {
    let base = u64::from(attempt) + 1;
    let jitter = rand::random_range(0..=base);
    tokio::time::sleep(std::time::Duration::from_millis(base + jitter)).await;
}

/// The document after the change, `None` when the change adds nothing (an append of text
/// the document already holds word for word: the same fact is not kept twice).
fn changed(old: &str, content: &str, mode: &WriteMode, path: &str) -> Result<Option<String>, MemoryError> {
    Ok(match mode {
        WriteMode::Append => {
            let addition = content.trim_end_matches(['\n', '\r']);
            if already_holds(old, addition) {
                return Ok(None);
            }
            let mut new = old.trim_end_matches(['\n', '\r']).to_owned();
            if !new.is_empty() {
                new.push('\n');
            }
            new.push_str(addition);
            new.push('\n');
            Some(new)
        }
        WriteMode::Replace => (old != content).then(|| content.to_owned()),
        WriteMode::Edit { old_text } => {
            if old_text.is_empty() {
                return Err(MemoryError::OldTextMissing { path: path.to_owned() });
            }
            match old.matches(old_text.as_str()).count() {
                0 => return Err(MemoryError::OldTextMissing { path: path.to_owned() }),
                1 => Some(old.replacen(old_text.as_str(), content, 1)),
                count => return Err(MemoryError::OldTextAmbiguous { path: path.to_owned(), count }),
            }
        }
    })
}

/// Whether every line of `addition` is already a line of `document` (ignoring surrounding
/// space): the same fact appended again is not kept twice. Whole lines, so "likes tea" is
/// still added beside "likes tea with milk".
fn already_holds(document: &str, addition: &str) -> bool {
    let held: std::collections::HashSet<&str> = document.lines().map(str::trim).collect();
    let mut lines = addition.lines().map(str::trim).filter(|line| !line.is_empty()).peekable();
    lines.peek().is_some() && lines.all(|line| held.contains(line))
}

/// `content`'s search chunks, with the text the full-text index is given.
pub(crate) fn chunks_of(content: &str) -> Vec<DocChunk> {
    chunk(content, CHUNK_TOKENS, CHUNK_OVERLAP_TOKENS)
        .into_iter()
        .map(|chunk| DocChunk {
            start_line: chunk.start_line,
            end_line: chunk.end_line,
            index_text: index_text(&chunk.text),
            text: chunk.text,
            hash: chunk.hash,
        })
        .collect()
}

#[cfg(test)]
#[path = "documents_tests.rs"]
mod tests;
