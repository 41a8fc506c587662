//! Long-term memory documents (issue 40): per agent and per scope, markdown documents by
//! path (`MEMORY.md`, `memory/YYYY-MM-DD.md`, `memory/<name>.md`), with their earlier
//! versions, their search chunks and the chunks' embeddings.
//!
//! The store keeps and finds; it does not decide. What a scope is, which paths are allowed,
//! how a document is cut into chunks and how a query is written for each backend's full-text
//! search are the `memory` room's. The store's promises are the ones only a transaction can
//! keep:
//! - a write lands only on the version it was computed from ([`MemoryStore::put`] compares
//!   and swaps), so two replicas appending at once never lose either append;
//! - the size caps are checked in the write that would pass them;
//! - a document's chunks are replaced in the same write, so search never sees half of one.
//!
//! Every read and write names its [`MemoryScope`]; nothing here can read across scopes
//! except the operator's listing ([`MemoryStore::scopes`]).

use async_trait::async_trait;

use super::StorageError;

/// How many earlier versions of a document are kept (the newest; older ones are dropped
/// in the write that passes this), so a history is there to look back on without memory
/// growing with every append.
pub const KEEP_VERSIONS: i64 = 20;

/// One agent's memory of one person or one chat: `private:<channel>:<peer>`,
/// `private:<peer>` (`dm_scope = "per-peer"`) or `shared:<chat>`.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct MemoryScope {
    pub agent_id: String,
    pub scope: String,
}

impl MemoryScope {
    pub fn new(agent_id: impl Into<String>, scope: impl Into<String>) -> Self {
        Self { agent_id: agent_id.into(), scope: scope.into() }
    }
}

/// A document as it is now.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MemoryDoc {
    pub path: String,
    pub content: String,
    /// 1 for the first write, one more for each after it: what [`MemoryStore::put`] compares.
    pub version: i64,
    pub updated_ms: i64,
}

/// A document's size and age without its text, for listings.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DocSummary {
    pub path: String,
    pub bytes: u64,
    pub version: i64,
    pub updated_ms: i64,
}

/// An earlier version of a document, kept when a write replaced it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DocVersion {
    pub version: i64,
    pub content: String,
    pub written_ms: i64,
}

/// One search chunk of a document, as the `memory` room cut it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DocChunk {
    /// The chunk's lines in the document, 1-based and inclusive.
    pub start_line: u32,
    pub end_line: u32,
    pub text: String,
    /// What the full-text index is given for `text` (normalized so any script is searchable).
    pub index_text: String,
    /// The hash of `text`: embeddings are kept per hash and model, so unchanged text is
    /// never embedded twice.
    pub hash: String,
}

/// The size caps a write is checked against.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct MemoryLimits {
    /// The most one document may hold.
    pub doc_bytes: u64,
    /// The most all of one scope's documents may hold together.
    pub scope_bytes: u64,
}

/// Why a write was not made.
#[derive(Debug, thiserror::Error)]
pub enum PutError {
    #[error("{path} would be {bytes} bytes, over the limit of {limit} bytes for one memory document")]
    DocTooLarge { path: String, bytes: u64, limit: u64 },
    #[error("this memory would hold {bytes} bytes, over its limit of {limit} bytes; remove or shorten notes first")]
    ScopeFull { bytes: u64, limit: u64 },
    /// Someone else wrote the document since it was read: read it again and redo the change.
    #[error("{path} changed while it was being written (now at version {current})")]
    Conflict { path: String, current: i64 },
    #[error(transparent)]
    Storage(#[from] StorageError),
}

/// A keyword query, written for each backend's full-text search by the `memory` room.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct KeywordQuery {
    /// An FTS5 `MATCH` expression (SQLite).
    pub fts5: String,
    /// A `to_tsquery('simple', …)` argument (PostgreSQL).
    pub tsquery: String,
}

/// A chunk found by a search, with where it is.
#[derive(Debug, Clone, PartialEq)]
pub struct ChunkHit {
    pub path: String,
    pub start_line: u32,
    pub end_line: u32,
    pub text: String,
    pub hash: String,
    /// Higher is better; comparable only within one search.
    pub score: f64,
}

/// A chunk's vector under one embedding model, with where the chunk is but not its text
/// (read for the few best matches only, with [`MemoryStore::chunk_texts`]).
#[derive(Debug, Clone, PartialEq)]
pub struct ChunkVector {
    /// The chunk's id: stable until its document is written again.
    pub id: i64,
    pub path: String,
    pub start_line: u32,
    pub end_line: u32,
    pub vector: Vec<f32>,
}

/// Text that still needs a vector under a model.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Unembedded {
    pub hash: String,
    pub text: String,
}

/// One scope's totals, for the operator.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ScopeSummary {
    pub scope: MemoryScope,
    pub docs: u64,
    pub bytes: u64,
    pub updated_ms: i64,
}

/// The whole store's totals, for `/healthz`, `/metrics` and `ferry memory status`.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct MemoryStats {
    pub scopes: u64,
    pub docs: u64,
    pub bytes: u64,
    pub chunks: u64,
    /// Distinct chunk texts with a vector under the model asked about.
    pub embedded: u64,
    /// Distinct chunk texts without one.
    pub unembedded: u64,
}

/// Memory documents, their versions, search chunks and embeddings.
#[async_trait]
pub trait MemoryStore: Send + Sync + std::fmt::Debug {
    /// The document at `path`, `None` if it was never written (or removed).
    async fn get(&self, scope: &MemoryScope, path: &str) -> Result<Option<MemoryDoc>, StorageError>;

    /// Every document of the scope, by path.
    async fn list(&self, scope: &MemoryScope) -> Result<Vec<DocSummary>, StorageError>;

    /// Makes `content` the document at `path` if it is still at `expected` (`None`: it
    /// must not exist), keeping the version it replaces and replacing its chunks with
    /// `chunks`. An empty `content` removes the document. Returns the new version (0 when
    /// removed).
    async fn put(
        &self,
        scope: &MemoryScope,
        path: &str,
        content: &str,
        chunks: &[DocChunk],
        expected: Option<i64>,
        limits: MemoryLimits,
    ) -> Result<i64, PutError>;

    /// The kept earlier versions of a document, newest first.
    async fn versions(&self, scope: &MemoryScope, path: &str, limit: usize) -> Result<Vec<DocVersion>, StorageError>;

    /// The scope's chunks that match `query`, best first.
    async fn search(
        &self,
        scope: &MemoryScope,
        query: &KeywordQuery,
        limit: usize,
    ) -> Result<Vec<ChunkHit>, StorageError>;

    /// A number that changes whenever the scope's documents, or its chunks' vectors, do (0
    /// for a scope never written): what lets a copy of the scope's vectors be kept between
    /// searches and trusted until it changes.
    async fn revision(&self, scope: &MemoryScope) -> Result<i64, StorageError>;

    /// The scope's chunks that have a vector under `model`, without their text.
    async fn vectors(&self, scope: &MemoryScope, model: &str) -> Result<Vec<ChunkVector>, StorageError>;

    /// The texts of the scope's chunks `ids` that still exist, by id.
    async fn chunk_texts(&self, scope: &MemoryScope, ids: &[i64]) -> Result<Vec<(i64, String)>, StorageError>;

    /// Chunk texts (of any scope) without a vector under `model`, at most `limit`.
    async fn unembedded(&self, model: &str, limit: usize) -> Result<Vec<Unembedded>, StorageError>;

    /// Keeps vectors under `model`, by chunk text hash; the scopes holding those texts get a
    /// new [`MemoryStore::revision`].
    async fn put_embeddings(&self, model: &str, vectors: &[(String, Vec<f32>)]) -> Result<(), StorageError>;

    /// Every scope of `agent_id` (every agent's when `None`), with its totals.
    async fn scopes(&self, agent_id: Option<&str>) -> Result<Vec<ScopeSummary>, StorageError>;

    /// Totals, with embedding counts under `model`.
    async fn stats(&self, model: Option<&str>) -> Result<MemoryStats, StorageError>;

    /// Indexes every chunk again with `index` (which makes a chunk text's
    /// [`DocChunk::index_text`]) when the store's chunks were indexed by a normalization
    /// older than `version`, and records `version` ([`MEMORY_INDEX_VERSION_KEY`]): a build
    /// that normalizes differently finds what older builds stored. Returns how many chunks
    /// were indexed again; 0, after one read, once the store is at `version`.
    async fn reindex(&self, version: i64, index: for<'a> fn(&'a str) -> String) -> Result<u64, StorageError>;
}

/// The `state_meta` key holding the normalization version memory's chunks were indexed by
/// ([`MemoryStore::reindex`]); a store without it was indexed by version 1.
pub const MEMORY_INDEX_VERSION_KEY: &str = "memory_index_version";

/// The normalization version a [`MEMORY_INDEX_VERSION_KEY`] value names (1 without one).
pub fn index_version(value: Option<&str>) -> i64 {
    value.and_then(|value| value.parse().ok()).unwrap_or(1)
}

/// The rules both backends decide a write by, on what their transaction read: the
/// document's version must still be `expected`, the new text must fit one document, and
/// the scope's new total (`scope_bytes` with `old_bytes` replaced by `new_bytes`) must fit
/// the scope, unless the write shrinks the document (so a full scope can be tidied).
/// Returns the scope's new total.
pub fn check_put(
    path: &str,
    current: Option<i64>,
    expected: Option<i64>,
    (old_bytes, new_bytes, scope_bytes): (u64, u64, u64),
    limits: MemoryLimits,
) -> Result<u64, PutError> {
    if current != expected {
        return Err(PutError::Conflict { path: path.to_owned(), current: current.unwrap_or(0) });
    }
    if new_bytes > limits.doc_bytes {
        return Err(PutError::DocTooLarge { path: path.to_owned(), bytes: new_bytes, limit: limits.doc_bytes });
    }
    let total = scope_bytes.saturating_sub(old_bytes).saturating_add(new_bytes);
    if total > limits.scope_bytes && new_bytes > old_bytes {
        return Err(PutError::ScopeFull { bytes: total, limit: limits.scope_bytes });
    }
    Ok(total)
}

/// A vector as kept: little-endian `f32`s.
pub fn vector_bytes(vector: &[f32]) -> Vec<u8> {
    vector.iter().flat_map(|value| value.to_le_bytes()).collect()
}

/// A kept vector read back; trailing bytes that make no whole `f32` are ignored.
pub fn vector_of(bytes: &[u8]) -> Vec<f32> {
    bytes.chunks_exact(4).map(|quad| f32::from_le_bytes([quad[0], quad[1], quad[2], quad[3]])).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_vector_round_trips_through_its_bytes() {
        let vector = vec![0.0, -1.5, f32::MIN_POSITIVE, 3.25];
        assert_eq!(vector_of(&vector_bytes(&vector)), vector);
        assert_eq!(vector_of(&[0, 0, 128]), Vec::<f32>::new(), "a torn value is dropped");
    }
}
