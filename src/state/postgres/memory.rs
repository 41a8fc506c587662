//! [`MemoryStore`] on PostgreSQL, shared by every replica: a memory written through one is
//! found through the others.
//!
//! A write locks its scope's totals row first, so writes to one scope take turns (the cap
//! and the version check are decided on what the previous write left), while other scopes
//! write in parallel. The full-text index is a `tsvector` built with the `simple`
//! configuration from the normalized text the memory room gives, so no language's stemming
//! or stop words hide a word.

use async_trait::async_trait;
use chrono::Utc;
use deadpool_postgres::Transaction;

use super::{PgBackend, pg_error};
use crate::state::StorageError;
use crate::state::memory::{
    ChunkHit, ChunkVector, DocChunk, DocSummary, DocVersion, KEEP_VERSIONS, KeywordQuery, MEMORY_INDEX_VERSION_KEY,
    MemoryDoc, MemoryLimits, MemoryScope, MemoryStats, MemoryStore, PutError, ScopeSummary, Unembedded, check_put,
    index_version, vector_bytes, vector_of,
};

impl From<tokio_postgres::Error> for PutError {
    fn from(error: tokio_postgres::Error) -> Self {
        PutError::Storage(pg_error(error))
    }
}

/// Memory documents in PostgreSQL.
#[derive(Debug, Clone)]
pub struct PgMemory {
    backend: PgBackend,
}

impl PgMemory {
    pub fn new(backend: PgBackend) -> Self {
        Self { backend }
    }
}

fn count(value: i64) -> u64 {
    value.max(0) as u64
}

async fn put(
    transaction: &Transaction<'_>,
    scope: &MemoryScope,
    path: &str,
    content: &str,
    chunks: &[DocChunk],
    expected: Option<i64>,
    limits: MemoryLimits,
) -> Result<i64, PutError> {
    let now = Utc::now().timestamp_millis();
    let keys: [&(dyn tokio_postgres::types::ToSql + Sync); 2] = [&scope.agent_id, &scope.scope];
    transaction
        .execute(
            "INSERT INTO memory_scopes (agent_id, scope, docs, bytes, updated_ms) VALUES ($1, $2, 0, 0, 0) \
             ON CONFLICT (agent_id, scope) DO NOTHING",
            &keys,
        )
        .await?;
    let totals = transaction
        .query_one("SELECT docs, bytes FROM memory_scopes WHERE agent_id = $1 AND scope = $2 FOR UPDATE", &keys)
        .await?;
    let (docs, bytes): (i64, i64) = (totals.get(0), totals.get(1));
    let current = transaction
        .query_opt(
            "SELECT version, content, updated_ms FROM memory_documents WHERE agent_id = $1 AND scope = $2 AND path = $3",
            &[&scope.agent_id, &scope.scope, &path],
        )
        .await?
        .map(|row| (row.get::<_, i64>(0), row.get::<_, String>(1), row.get::<_, i64>(2)));
    let current_version = current.as_ref().map(|(version, _, _)| *version);
    let old_bytes = current.as_ref().map_or(0, |(_, old, _)| old.len() as u64);
    let sizes = (old_bytes, content.len() as u64, count(bytes));
    let scope_bytes = check_put(path, current_version, expected, sizes, limits)?;
    if let Some((version, old, written_ms)) = &current {
        transaction
            .execute(
                "INSERT INTO memory_versions (agent_id, scope, path, version, content, written_ms) \
                 VALUES ($1, $2, $3, $4, $5, $6) ON CONFLICT (agent_id, scope, path, version) \
                 DO UPDATE SET content = excluded.content, written_ms = excluded.written_ms",
                &[&scope.agent_id, &scope.scope, &path, version, old, written_ms],
            )
            .await?;
        transaction
            .execute(
                "DELETE FROM memory_versions WHERE agent_id = $1 AND scope = $2 AND path = $3 AND version <= $4",
                &[&scope.agent_id, &scope.scope, &path, &(version - KEEP_VERSIONS)],
            )
            .await?;
    }
    let removing = content.is_empty();
    let version = if removing {
        transaction
            .execute(
                "DELETE FROM memory_documents WHERE agent_id = $1 AND scope = $2 AND path = $3",
                &[&scope.agent_id, &scope.scope, &path],
            )
            .await?;
        0
    } else {
        let version = current_version.unwrap_or(0) + 1;
        transaction
            .execute(
                "INSERT INTO memory_documents (agent_id, scope, path, content, version, updated_ms) \
                 VALUES ($1, $2, $3, $4, $5, $6) ON CONFLICT (agent_id, scope, path) \
                 DO UPDATE SET content = excluded.content, version = excluded.version, updated_ms = excluded.updated_ms",
                &[&scope.agent_id, &scope.scope, &path, &content, &version, &now],
            )
            .await?;
        version
    };
    let docs = docs + i64::from(current.is_none() && !removing) - i64::from(current.is_some() && removing);
    transaction
        .execute(
            "UPDATE memory_scopes SET docs = $3, bytes = $4, updated_ms = $5, revision = revision + 1 \
             WHERE agent_id = $1 AND scope = $2",
            &[&scope.agent_id, &scope.scope, &docs, &(scope_bytes as i64), &now],
        )
        .await?;
    transaction
        .execute(
            "DELETE FROM memory_chunks WHERE agent_id = $1 AND scope = $2 AND path = $3",
            &[&scope.agent_id, &scope.scope, &path],
        )
        .await?;
    if !chunks.is_empty() {
        let starts: Vec<i32> = chunks.iter().map(|chunk| chunk.start_line.min(i32::MAX as u32) as i32).collect();
        let ends: Vec<i32> = chunks.iter().map(|chunk| chunk.end_line.min(i32::MAX as u32) as i32).collect();
        let texts: Vec<&str> = chunks.iter().map(|chunk| chunk.text.as_str()).collect();
        let hashes: Vec<&str> = chunks.iter().map(|chunk| chunk.hash.as_str()).collect();
        let indexed: Vec<&str> = chunks.iter().map(|chunk| chunk.index_text.as_str()).collect();
        transaction
            .execute(
                "INSERT INTO memory_chunks (agent_id, scope, path, start_line, end_line, text, hash, tsv) \
                 SELECT $1, $2, $3, c.start_line, c.end_line, c.text, c.hash, to_tsvector('simple', c.indexed) \
                 FROM unnest($4::int[], $5::int[], $6::text[], $7::text[], $8::text[]) \
                 AS c(start_line, end_line, text, hash, indexed)",
                &[&scope.agent_id, &scope.scope, &path, &starts, &ends, &texts, &hashes, &indexed],
            )
            .await?;
    }
    Ok(version)
}

/// Serializes replicas indexing memory again ([`MemoryStore::reindex`]): the second finds
/// the version recorded. An arbitrary constant ("memidx" in ASCII).
const REINDEX_LOCK: i64 = 0x6d65_6d69_6478;

/// Chunks indexed again per statement.
const REINDEX_BATCH: usize = 1000;

#[async_trait]
impl MemoryStore for PgMemory {
    async fn get(&self, scope: &MemoryScope, path: &str) -> Result<Option<MemoryDoc>, StorageError> {
        let client = self.backend.client().await?;
        let row = client
            .query_opt(
                "SELECT content, version, updated_ms FROM memory_documents \
                 WHERE agent_id = $1 AND scope = $2 AND path = $3",
                &[&scope.agent_id, &scope.scope, &path],
            )
            .await
            .map_err(pg_error)?;
        Ok(row.map(|row| MemoryDoc {
            path: path.to_owned(),
            content: row.get(0),
            version: row.get(1),
            updated_ms: row.get(2),
        }))
    }

    async fn list(&self, scope: &MemoryScope) -> Result<Vec<DocSummary>, StorageError> {
        let client = self.backend.client().await?;
        let rows = client
            .query(
                "SELECT path, octet_length(content)::bigint, version, updated_ms FROM memory_documents \
                 WHERE agent_id = $1 AND scope = $2 ORDER BY path COLLATE \"C\"",
                &[&scope.agent_id, &scope.scope],
            )
            .await
            .map_err(pg_error)?;
        Ok(rows
            .iter()
            .map(|row| DocSummary {
                path: row.get(0),
                bytes: count(row.get(1)),
                version: row.get(2),
                updated_ms: row.get(3),
            })
            .collect())
    }

    async fn put(
        &self,
        scope: &MemoryScope,
        path: &str,
        content: &str,
        chunks: &[DocChunk],
        expected: Option<i64>,
        limits: MemoryLimits,
    ) -> Result<i64, PutError> {
        let mut client = self.backend.client().await?;
        let transaction = client.transaction().await?;
        let version = put(&transaction, scope, path, content, chunks, expected, limits).await?;
        transaction.commit().await?;
        Ok(version)
    }

    async fn versions(&self, scope: &MemoryScope, path: &str, limit: usize) -> Result<Vec<DocVersion>, StorageError> {
        let client = self.backend.client().await?;
        let rows = client
            .query(
                "SELECT version, content, written_ms FROM memory_versions \
                 WHERE agent_id = $1 AND scope = $2 AND path = $3 ORDER BY version DESC LIMIT $4",
                &[&scope.agent_id, &scope.scope, &path, &(limit as i64)],
            )
            .await
            .map_err(pg_error)?;
        Ok(rows
            .iter()
            .map(|row| DocVersion { version: row.get(0), content: row.get(1), written_ms: row.get(2) })
            .collect())
    }

    async fn search(
        &self,
        scope: &MemoryScope,
        query: &KeywordQuery,
        limit: usize,
    ) -> Result<Vec<ChunkHit>, StorageError> {
        let client = self.backend.client().await?;
        let rows = client
            .query(
                "SELECT path, start_line, end_line, text, hash, ts_rank(tsv, q)::float8 AS rank \
                 FROM memory_chunks, to_tsquery('simple', $3) AS q \
                 WHERE agent_id = $1 AND scope = $2 AND tsv @@ q ORDER BY rank DESC, id LIMIT $4",
                &[&scope.agent_id, &scope.scope, &query.tsquery, &(limit as i64)],
            )
            .await
            .map_err(pg_error)?;
        Ok(rows
            .iter()
            .map(|row| ChunkHit {
                path: row.get(0),
                start_line: row.get::<_, i32>(1).max(0) as u32,
                end_line: row.get::<_, i32>(2).max(0) as u32,
                text: row.get(3),
                hash: row.get(4),
                score: row.get(5),
            })
            .collect())
    }

    async fn revision(&self, scope: &MemoryScope) -> Result<i64, StorageError> {
        let client = self.backend.client().await?;
        let row = client
            .query_opt(
                "SELECT revision FROM memory_scopes WHERE agent_id = $1 AND scope = $2",
                &[&scope.agent_id, &scope.scope],
            )
            .await
            .map_err(pg_error)?;
        Ok(row.map_or(0, |row| row.get(0)))
    }

    async fn vectors(&self, scope: &MemoryScope, model: &str) -> Result<Vec<ChunkVector>, StorageError> {
        let client = self.backend.client().await?;
        let rows = client
            .query(
                "SELECT c.id, c.path, c.start_line, c.end_line, e.vector FROM memory_chunks c \
                 JOIN memory_embeddings e ON e.model = $3 AND e.hash = c.hash \
                 WHERE c.agent_id = $1 AND c.scope = $2",
                &[&scope.agent_id, &scope.scope, &model],
            )
            .await
            .map_err(pg_error)?;
        Ok(rows
            .iter()
            .map(|row| ChunkVector {
                id: row.get(0),
                path: row.get(1),
                start_line: row.get::<_, i32>(2).max(0) as u32,
                end_line: row.get::<_, i32>(3).max(0) as u32,
                vector: vector_of(row.get(4)),
            })
            .collect())
    }

    async fn chunk_texts(&self, scope: &MemoryScope, ids: &[i64]) -> Result<Vec<(i64, String)>, StorageError> {
        let client = self.backend.client().await?;
        let rows = client
            .query(
                "SELECT id, text FROM memory_chunks WHERE id = ANY($3) AND agent_id = $1 AND scope = $2",
                &[&scope.agent_id, &scope.scope, &ids],
            )
            .await
            .map_err(pg_error)?;
        Ok(rows.iter().map(|row| (row.get(0), row.get(1))).collect())
    }

    async fn unembedded(&self, model: &str, limit: usize) -> Result<Vec<Unembedded>, StorageError> {
        let client = self.backend.client().await?;
        let rows = client
            .query(
                "SELECT c.hash, min(c.text) FROM memory_chunks c WHERE NOT EXISTS \
                 (SELECT 1 FROM memory_embeddings e WHERE e.model = $1 AND e.hash = c.hash) \
                 GROUP BY c.hash LIMIT $2",
                &[&model, &(limit as i64)],
            )
            .await
            .map_err(pg_error)?;
        Ok(rows.iter().map(|row| Unembedded { hash: row.get(0), text: row.get(1) }).collect())
    }

    async fn reindex(&self, version: i64, index: for<'a> fn(&'a str) -> String) -> Result<u64, StorageError> {
        // Up to date (every start but the first after an upgrade): one read, no lock.
        if index_version(self.backend.meta(MEMORY_INDEX_VERSION_KEY).await?.as_deref()) >= version {
            return Ok(0);
        }
        let mut client = self.backend.client().await?;
        let transaction = client.transaction().await.map_err(pg_error)?;
        transaction.execute("SELECT pg_advisory_xact_lock($1)", &[&REINDEX_LOCK]).await.map_err(pg_error)?;
        let indexed = transaction
            .query_opt("SELECT value FROM state_meta WHERE key = $1", &[&MEMORY_INDEX_VERSION_KEY])
            .await
            .map_err(pg_error)?
            .map(|row| row.get::<_, String>(0));
        // Another replica may have done it while this one waited for the lock.
        if index_version(indexed.as_deref()) >= version {
            return Ok(0);
        }
        let chunks = transaction.query("SELECT id, text FROM memory_chunks", &[]).await.map_err(pg_error)?;
        for batch in chunks.chunks(REINDEX_BATCH) {
            let ids: Vec<i64> = batch.iter().map(|row| row.get(0)).collect();
            let texts: Vec<String> = batch.iter().map(|row| index(row.get(1))).collect();
            transaction
                .execute(
                    "UPDATE memory_chunks m SET tsv = to_tsvector('simple', c.indexed) \
                     FROM unnest($1::bigint[], $2::text[]) AS c(id, indexed) WHERE m.id = c.id",
                    &[&ids, &texts],
                )
                .await
                .map_err(pg_error)?;
        }
        transaction
            .execute(
                "INSERT INTO state_meta (key, value) VALUES ($1, $2) \
                 ON CONFLICT (key) DO UPDATE SET value = excluded.value",
                &[&MEMORY_INDEX_VERSION_KEY, &version.to_string()],
            )
            .await
            .map_err(pg_error)?;
        transaction.commit().await.map_err(pg_error)?;
        Ok(chunks.len() as u64)
    }

    async fn put_embeddings(&self, model: &str, vectors: &[(String, Vec<f32>)]) -> Result<(), StorageError> {
        if vectors.is_empty() {
            return Ok(());
        }
        let hashes: Vec<&str> = vectors.iter().map(|(hash, _)| hash.as_str()).collect();
        let bytes: Vec<Vec<u8>> = vectors.iter().map(|(_, vector)| vector_bytes(vector)).collect();
        let mut client = self.backend.client().await?;
        let transaction = client.transaction().await.map_err(pg_error)?;
        transaction
            .execute(
                "INSERT INTO memory_embeddings (model, hash, vector) \
                 SELECT $1, v.hash, v.vector FROM unnest($2::text[], $3::bytea[]) AS v(hash, vector) \
                 ON CONFLICT (model, hash) DO UPDATE SET vector = excluded.vector",
                &[&model, &hashes, &bytes],
            )
            .await
            .map_err(pg_error)?;
        // Locked in one order, so two replicas' indexers raising overlapping scopes wait for
        // each other instead of deadlocking.
        transaction
            .execute(
                "UPDATE memory_scopes s SET revision = s.revision + 1 FROM ( \
                 SELECT agent_id, scope FROM memory_scopes WHERE (agent_id, scope) IN \
                 (SELECT agent_id, scope FROM memory_chunks WHERE hash = ANY($1)) \
                 ORDER BY agent_id, scope FOR UPDATE) AS held \
                 WHERE s.agent_id = held.agent_id AND s.scope = held.scope",
                &[&hashes],
            )
            .await
            .map_err(pg_error)?;
        transaction.commit().await.map_err(pg_error)
    }

    async fn scopes(&self, agent_id: Option<&str>) -> Result<Vec<ScopeSummary>, StorageError> {
        let client = self.backend.client().await?;
        let rows = client
            .query(
                "SELECT agent_id, scope, docs, bytes, updated_ms FROM memory_scopes \
                 WHERE ($1::text IS NULL OR agent_id = $1) AND docs > 0 \
                 ORDER BY agent_id COLLATE \"C\", scope COLLATE \"C\"",
                &[&agent_id],
            )
            .await
            .map_err(pg_error)?;
        Ok(rows
            .iter()
            .map(|row| ScopeSummary {
                scope: MemoryScope { agent_id: row.get(0), scope: row.get(1) },
                docs: count(row.get(2)),
                bytes: count(row.get(3)),
                updated_ms: row.get(4),
            })
            .collect())
    }

    async fn stats(&self, model: Option<&str>) -> Result<MemoryStats, StorageError> {
        let client = self.backend.client().await?;
        let row = client
            .query_one(
                "SELECT (SELECT count(*) FROM memory_scopes WHERE docs > 0), \
                 (SELECT coalesce(sum(docs), 0)::bigint FROM memory_scopes), \
                 (SELECT coalesce(sum(bytes), 0)::bigint FROM memory_scopes), \
                 (SELECT count(*) FROM memory_chunks), \
                 (SELECT count(DISTINCT hash) FROM memory_chunks), \
                 (SELECT count(DISTINCT c.hash) FROM memory_chunks c \
                  JOIN memory_embeddings e ON e.model = $1 AND e.hash = c.hash)",
                &[&model],
            )
            .await
            .map_err(pg_error)?;
        let (hashes, embedded): (i64, i64) = (row.get(4), row.get(5));
        Ok(MemoryStats {
            scopes: count(row.get(0)),
            docs: count(row.get(1)),
            bytes: count(row.get(2)),
            chunks: count(row.get(3)),
            embedded: count(embedded),
            unembedded: count(hashes - embedded),
        })
    }
}
