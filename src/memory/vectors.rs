//! The scopes' vectors, kept in memory between searches.
//!
//! Reading every vector of a scope from the store for each search cost about a second at
//! 40,000 chunks (`benches/memory.rs`). A search now checks the scope's revision (one row)
//! and reuses the vectors it loaded last time while it is unchanged; a write to the scope or
//! new vectors for its chunks give it a new revision, so the next search loads it again.
//! The store is read in that order (revision first), so a copy is never labelled newer than
//! what it holds.
//!
//! Vectors are kept normalized in one flat array per scope, so a search is a run of dot
//! products. A scope not searched for [`IDLE`] is dropped ([`VectorCache::drop_idle`], on
//! the memory service's timer) and the cache never holds more than [`MAX_FLOATS`] values,
//! so the gateway's memory at rest does not grow with what it remembers.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, Instant};

use crate::state::StorageError;
use crate::state::memory::{ChunkVector, MemoryScope, MemoryStore};

/// How long a scope's vectors stay after its last search.
pub const IDLE: Duration = Duration::from_secs(300);
/// The most values kept over every scope (256 MB of `f32`); the least recently searched
/// scopes go first, and a scope larger than this alone is searched without being kept.
pub const MAX_FLOATS: usize = 64 << 20;

/// Where a chunk is: what search results are fused on.
pub type Place = (String, u32, u32);

/// One scope's vectors under one model, as of one revision.
#[derive(Debug)]
pub struct ScopeVectors {
    revision: i64,
    dims: usize,
    /// Chunk id and place, one per row of `matrix`.
    chunks: Vec<(i64, Place)>,
    /// `chunks.len()` rows of `dims` normalized values.
    matrix: Vec<f32>,
}

impl ScopeVectors {
    /// The vectors as read from the store; those of another length than the first (left
    /// from a model that changed its size) and zero vectors are left out.
    fn new(revision: i64, loaded: Vec<ChunkVector>) -> Self {
        let dims = loaded.iter().map(|chunk| chunk.vector.len()).find(|dims| *dims > 0).unwrap_or(0);
        let mut chunks = Vec::with_capacity(loaded.len());
        let mut matrix = Vec::with_capacity(loaded.len() * dims);
        for chunk in loaded {
            if chunk.vector.len() != dims {
                continue;
            }
            let Some(unit) = normalized(&chunk.vector) else { continue };
            matrix.extend_from_slice(&unit);
            chunks.push((chunk.id, (chunk.path, chunk.start_line, chunk.end_line)));
        }
        Self { revision, dims, chunks, matrix }
    }

    pub fn is_empty(&self) -> bool {
        self.chunks.is_empty()
    }

    /// The `limit` chunks most similar to `query` (cosine above 0), best first.
    pub fn nearest(&self, query: &[f32], limit: usize) -> Vec<(f32, i64, Place)> {
        let Some(query) = normalized(query).filter(|query| query.len() == self.dims) else { return Vec::new() };
        let mut scored: Vec<(f32, usize)> = self
            .matrix
            .chunks_exact(self.dims)
            .map(|row| row.iter().zip(&query).map(|(a, b)| a * b).sum::<f32>())
            .enumerate()
            .filter(|(_, similarity)| *similarity > 0.0)
            .map(|(row, similarity)| (similarity, row))
            .collect();
        if scored.len() > limit && limit > 0 {
            scored.select_nth_unstable_by(limit - 1, |a, b| b.0.total_cmp(&a.0));
            scored.truncate(limit);
        }
        scored.sort_by(|a, b| b.0.total_cmp(&a.0));
        scored.truncate(limit);
        scored
            .into_iter()
            .map(|(similarity, row)| {
                let (id, place) = &self.chunks[row];
                (similarity.min(1.0), *id, place.clone())
            })
            .collect()
    }

    fn floats(&self) -> usize {
        self.matrix.len()
    }
}

/// `vector` scaled to length 1; `None` for a zero or non-finite vector.
fn normalized(vector: &[f32]) -> Option<Vec<f32>> {
    let norm = vector.iter().map(|value| f64::from(*value) * f64::from(*value)).sum::<f64>().sqrt();
    (norm.is_finite() && norm > 0.0).then(|| vector.iter().map(|value| (f64::from(*value) / norm) as f32).collect())
}

struct Kept {
    vectors: Arc<ScopeVectors>,
    used: Instant,
}

/// Every kept scope's vectors, by scope and model. Cheap to clone.
#[derive(Clone)]
pub struct VectorCache {
    kept: Arc<Mutex<HashMap<(MemoryScope, String), Kept>>>,
    /// [`MAX_FLOATS`], but for tests.
    max_floats: usize,
}

impl Default for VectorCache {
    fn default() -> Self {
        Self { kept: Arc::default(), max_floats: MAX_FLOATS }
    }
}

impl std::fmt::Debug for VectorCache {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("VectorCache").field("scopes", &self.lock().len()).finish()
    }
}

impl VectorCache {
    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<(MemoryScope, String), Kept>> {
        self.kept.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// The scope's vectors under `model` as the store holds them now: the kept copy while
    /// the scope's revision is unchanged, else read again (and kept).
    pub async fn of(
        &self,
        store: &dyn MemoryStore,
        scope: &MemoryScope,
        model: &str,
    ) -> Result<Arc<ScopeVectors>, StorageError> {
        let revision = store.revision(scope).await?;
        let key = (scope.clone(), model.to_owned());
        if let Some(kept) = self.lock().get_mut(&key)
            && kept.vectors.revision == revision
        {
            kept.used = Instant::now();
            return Ok(kept.vectors.clone());
        }
        let loaded = store.vectors(scope, model).await?;
        let vectors = Arc::new(ScopeVectors::new(revision, loaded));
        self.keep(key, vectors.clone());
        Ok(vectors)
    }

    /// Keeps `vectors`, dropping the least recently used scopes while over [`MAX_FLOATS`].
    fn keep(&self, key: (MemoryScope, String), vectors: Arc<ScopeVectors>) {
        let mut kept = self.lock();
        kept.remove(&key);
        if vectors.floats() > self.max_floats {
            return;
        }
        let mut total: usize = kept.values().map(|kept| kept.vectors.floats()).sum::<usize>() + vectors.floats();
        while total > self.max_floats {
            let Some(oldest) = kept.iter().min_by_key(|(_, kept)| kept.used).map(|(key, _)| key.clone()) else { break };
            if let Some(dropped) = kept.remove(&oldest) {
                total -= dropped.vectors.floats();
            }
        }
        kept.insert(key, Kept { vectors, used: Instant::now() });
    }

    /// Drops the scopes not searched for `idle`; returns how many are still kept.
    pub fn drop_idle(&self, idle: Duration) -> usize {
        let mut kept = self.lock();
        kept.retain(|_, kept| kept.used.elapsed() < idle);
        if kept.is_empty() {
            kept.shrink_to_fit();
        }
        kept.len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn chunk(id: i64, vector: Vec<f32>) -> ChunkVector {
        ChunkVector { id, path: "MEMORY.md".into(), start_line: id as u32, end_line: id as u32, vector }
    }

    #[test]
    fn nearest_ranks_by_cosine_and_leaves_out_the_unlike() {
        let vectors = ScopeVectors::new(
            1,
            vec![
                chunk(1, vec![1.0, 0.0]),
                chunk(2, vec![3.0, 3.0]),
                chunk(3, vec![0.0, 2.0]),
                chunk(4, vec![-1.0, 0.0]),
                chunk(5, vec![0.0, 0.0]),
                chunk(6, vec![1.0, 0.0, 0.0]),
            ],
        );
        assert_eq!(vectors.chunks.len(), 4, "a zero vector and one of another size are left out");
        let found = vectors.nearest(&[2.0, 0.2], 10);
        let ids: Vec<i64> = found.iter().map(|(_, id, _)| *id).collect();
        assert_eq!(ids, [1, 2, 3], "the opposite vector is no match");
        assert!((found[0].0 - 0.995).abs() < 0.01, "{found:?}");
        let top: Vec<i64> = vectors.nearest(&[2.0, 0.2], 2).iter().map(|(_, id, _)| *id).collect();
        assert_eq!(top, [1, 2]);
        assert!(vectors.nearest(&[1.0, 0.0, 0.0], 10).is_empty(), "a query of another size finds nothing");
    }

    #[test]
    fn idle_scopes_are_dropped_and_the_total_is_bounded() {
        let cache = VectorCache::default();
        let key = |name: &str| (MemoryScope::new("main", name), "m".to_owned());
        cache.keep(key("a"), Arc::new(ScopeVectors::new(1, vec![chunk(1, vec![1.0; 4])])));
        cache.keep(key("b"), Arc::new(ScopeVectors::new(1, vec![chunk(1, vec![1.0; 4])])));
        assert_eq!(cache.drop_idle(IDLE), 2);
        assert_eq!(cache.drop_idle(Duration::ZERO), 0, "nothing was used just now");

        let cache = VectorCache { max_floats: 8, ..VectorCache::default() };
        let big = |id| Arc::new(ScopeVectors::new(1, vec![chunk(id, vec![1.0; 4])]));
        cache.keep(key("a"), big(1));
        cache.keep(key("b"), big(2));
        cache.keep(key("c"), big(3));
        {
            let kept = cache.lock();
            assert!(!kept.contains_key(&key("a")) && kept.len() == 2, "the least recently used went first");
        }
        cache.keep(key("d"), Arc::new(ScopeVectors::new(1, vec![chunk(1, vec![1.0; 9])])));
        assert!(!cache.lock().contains_key(&key("d")), "a scope over the limit alone is not kept");
    }
}
