//! [`MemoryStore`] on the SQLite state database: `memory_documents`, `memory_versions`,
//! `memory_scopes`, `memory_chunks` with the FTS5 table `memory_fts`, and
//! `memory_embeddings`.
//!
//! A write is one group-committed savepoint: the version check, the caps, the kept version,
//! the totals and the chunks land together or not at all. Searches read on the reader
//! connections and never wait for a write.

use async_trait::async_trait;
use chrono::Utc;
use rusqlite::{Connection, OptionalExtension, params};
use sha2::{Digest, Sha256};

use super::Database;
use crate::state::StorageError;
use crate::state::memory::{
    ChunkHit, ChunkVector, DocChunk, DocSummary, DocVersion, KEEP_VERSIONS, KeywordQuery, MEMORY_INDEX_VERSION_KEY,
    MemoryDoc, MemoryLimits, MemoryScope, MemoryStats, MemoryStore, PutError, ScopeSummary, Unembedded, check_put,
    index_version, vector_bytes, vector_of,
};

impl From<rusqlite::Error> for PutError {
    fn from(error: rusqlite::Error) -> Self {
        PutError::Storage(error.into())
    }
}

/// Memory documents in `ferry.db`.
#[derive(Clone)]
pub struct SqliteMemory {
    database: Database,
}

impl std::fmt::Debug for SqliteMemory {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SqliteMemory").finish_non_exhaustive()
    }
}

impl SqliteMemory {
    pub fn new(database: Database) -> Self {
        Self { database }
    }
}

/// The one FTS token that names a scope in `memory_fts.scope`: letters and digits only, so
/// the tokenizer keeps it whole, and no word a person writes.
fn scope_token(scope: &MemoryScope) -> String {
    let mut hasher = Sha256::new();
    hasher.update(scope.agent_id.as_bytes());
    hasher.update([0]);
    hasher.update(scope.scope.as_bytes());
    let digest = hasher.finalize();
    let hex: String = digest.iter().take(12).map(|byte| format!("{byte:02x}")).collect();
    format!("scope{hex}")
}

fn put(
    connection: &Connection,
    scope: &MemoryScope,
    path: &str,
    content: &str,
    chunks: &[DocChunk],
    expected: Option<i64>,
    limits: MemoryLimits,
) -> Result<i64, PutError> {
    let now = Utc::now().timestamp_millis();
    let current: Option<(i64, String, i64)> = connection
        .prepare_cached(
            "SELECT version, content, updated_ms FROM memory_documents WHERE agent_id = ?1 AND scope = ?2 AND path = ?3",
        )?
        .query_row(params![scope.agent_id, scope.scope, path], |row| Ok((row.get(0)?, row.get(1)?, row.get(2)?)))
        .optional()?;
    let current_version = current.as_ref().map(|(version, _, _)| *version);
    let (docs, bytes): (i64, i64) = connection
        .prepare_cached("SELECT docs, bytes FROM memory_scopes WHERE agent_id = ?1 AND scope = ?2")?
        .query_row(params![scope.agent_id, scope.scope], |row| Ok((row.get(0)?, row.get(1)?)))
        .optional()?
        .unwrap_or((0, 0));
    let old_bytes = current.as_ref().map_or(0, |(_, old, _)| old.len() as u64);
    let sizes = (old_bytes, content.len() as u64, bytes.max(0) as u64);
    let scope_bytes = check_put(path, current_version, expected, sizes, limits)?;
    if let Some((version, old, written_ms)) = &current {
        connection
            .prepare_cached(
                "INSERT OR REPLACE INTO memory_versions (agent_id, scope, path, version, content, written_ms) \
                 VALUES (?1, ?2, ?3, ?4, ?5, ?6)",
            )?
            .execute(params![scope.agent_id, scope.scope, path, version, old, written_ms])?;
        connection
            .prepare_cached(
                "DELETE FROM memory_versions WHERE agent_id = ?1 AND scope = ?2 AND path = ?3 AND version <= ?4",
            )?
            .execute(params![scope.agent_id, scope.scope, path, version - KEEP_VERSIONS])?;
    }
    let removing = content.is_empty();
    let version = if removing {
        connection
            .prepare_cached("DELETE FROM memory_documents WHERE agent_id = ?1 AND scope = ?2 AND path = ?3")?
            .execute(params![scope.agent_id, scope.scope, path])?;
        0
    } else {
        let version = current_version.unwrap_or(0) + 1;
        connection
            .prepare_cached(
                "INSERT INTO memory_documents (agent_id, scope, path, content, version, updated_ms) \
                 VALUES (?1, ?2, ?3, ?4, ?5, ?6) ON CONFLICT (agent_id, scope, path) \
                 DO UPDATE SET content = excluded.content, version = excluded.version, updated_ms = excluded.updated_ms",
            )?
            .execute(params![scope.agent_id, scope.scope, path, content, version, now])?;
        version
    };
    let docs = docs + i64::from(current.is_none() && !removing) - i64::from(current.is_some() && removing);
    connection
        .prepare_cached(
            "INSERT INTO memory_scopes (agent_id, scope, docs, bytes, updated_ms, revision) \
             VALUES (?1, ?2, ?3, ?4, ?5, 1) ON CONFLICT (agent_id, scope) DO UPDATE SET docs = excluded.docs, \
             bytes = excluded.bytes, updated_ms = excluded.updated_ms, revision = memory_scopes.revision + 1",
        )?
        .execute(params![scope.agent_id, scope.scope, docs, scope_bytes as i64, now])?;
    replace_chunks(connection, scope, path, chunks)?;
    Ok(version)
}

/// The normalization version the chunks were indexed by ([`MemoryStore::reindex`]).
fn indexed_version(connection: &Connection) -> rusqlite::Result<i64> {
    let value: Option<String> = connection
        .prepare_cached("SELECT value FROM state_meta WHERE key = ?1")?
        .query_row([MEMORY_INDEX_VERSION_KEY], |row| row.get(0))
        .optional()?;
    Ok(index_version(value.as_deref()))
}

/// Replaces the document's chunks and their full-text rows.
fn replace_chunks(
    connection: &Connection,
    scope: &MemoryScope,
    path: &str,
    chunks: &[DocChunk],
) -> rusqlite::Result<()> {
    connection
        .prepare_cached(
            "DELETE FROM memory_fts WHERE rowid IN \
             (SELECT id FROM memory_chunks WHERE agent_id = ?1 AND scope = ?2 AND path = ?3)",
        )?
        .execute(params![scope.agent_id, scope.scope, path])?;
    connection
        .prepare_cached("DELETE FROM memory_chunks WHERE agent_id = ?1 AND scope = ?2 AND path = ?3")?
        .execute(params![scope.agent_id, scope.scope, path])?;
    let token = scope_token(scope);
    let mut insert_chunk = connection.prepare_cached(
        "INSERT INTO memory_chunks (agent_id, scope, path, start_line, end_line, text, hash) \
         VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7)",
    )?;
    let mut insert_fts =
        connection.prepare_cached("INSERT INTO memory_fts (rowid, scope, body) VALUES (?1, ?2, ?3)")?;
    for chunk in chunks {
        insert_chunk.execute(params![
            scope.agent_id,
            scope.scope,
            path,
            chunk.start_line,
            chunk.end_line,
            chunk.text,
            chunk.hash
        ])?;
        insert_fts.execute(params![connection.last_insert_rowid(), token, chunk.index_text])?;
    }
    Ok(())
}

#[async_trait]
impl MemoryStore for SqliteMemory {
    async fn get(&self, scope: &MemoryScope, path: &str) -> Result<Option<MemoryDoc>, StorageError> {
        Ok(self.database.read(|connection| {
            connection
                .prepare_cached(
                    "SELECT content, version, updated_ms FROM memory_documents \
                     WHERE agent_id = ?1 AND scope = ?2 AND path = ?3",
                )?
                .query_row(params![scope.agent_id, scope.scope, path], |row| {
                    Ok(MemoryDoc {
                        path: path.to_owned(),
                        content: row.get(0)?,
                        version: row.get(1)?,
                        updated_ms: row.get(2)?,
                    })
                })
                .optional()
        })?)
    }

    async fn list(&self, scope: &MemoryScope) -> Result<Vec<DocSummary>, StorageError> {
        Ok(self.database.read(|connection| {
            connection
                .prepare_cached(
                    "SELECT path, length(CAST(content AS BLOB)), version, updated_ms FROM memory_documents \
                     WHERE agent_id = ?1 AND scope = ?2 ORDER BY path",
                )?
                .query_map(params![scope.agent_id, scope.scope], |row| {
                    Ok(DocSummary {
                        path: row.get(0)?,
                        bytes: row.get::<_, i64>(1)?.max(0) as u64,
                        version: row.get(2)?,
                        updated_ms: row.get(3)?,
                    })
                })?
                .collect()
        })?)
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
        let (scope, path, content, chunks) = (scope.clone(), path.to_owned(), content.to_owned(), chunks.to_vec());
        self.database.write(move |connection| put(connection, &scope, &path, &content, &chunks, expected, limits)).await
    }

    async fn versions(&self, scope: &MemoryScope, path: &str, limit: usize) -> Result<Vec<DocVersion>, StorageError> {
        Ok(self.database.read(|connection| {
            connection
                .prepare_cached(
                    "SELECT version, content, written_ms FROM memory_versions \
                     WHERE agent_id = ?1 AND scope = ?2 AND path = ?3 ORDER BY version DESC LIMIT ?4",
                )?
                .query_map(params![scope.agent_id, scope.scope, path, limit as i64], |row| {
                    Ok(DocVersion { version: row.get(0)?, content: row.get(1)?, written_ms: row.get(2)? })
                })?
                .collect()
        })?)
    }

    async fn search(
        &self,
        scope: &MemoryScope,
        query: &KeywordQuery,
        limit: usize,
    ) -> Result<Vec<ChunkHit>, StorageError> {
        let expression = format!("scope : {} AND body : ({})", scope_token(scope), query.fts5);
        Ok(self.database.read(|connection| {
            // Ranked in the full-text index alone (the scope token already keeps other
            // scopes out), and only the best `limit` chunks read: joining every match to its
            // chunk row first cost more than the ranking when a common word matched
            // thousands of chunks (`benches/memory.rs`).
            let ranked: Vec<(i64, f64)> = connection
                .prepare_cached(
                    "SELECT rowid, bm25(memory_fts, 0.0, 1.0) AS rank FROM memory_fts WHERE memory_fts MATCH ?1 \
                     ORDER BY rank LIMIT ?2",
                )?
                .query_map(params![expression, limit as i64], |row| Ok((row.get(0)?, row.get(1)?)))?
                .collect::<rusqlite::Result<_>>()?;
            let mut chunk = connection.prepare_cached(
                "SELECT path, start_line, end_line, text, hash FROM memory_chunks \
                 WHERE id = ?1 AND agent_id = ?2 AND scope = ?3",
            )?;
            let mut hits = Vec::with_capacity(ranked.len());
            for (id, rank) in ranked {
                let hit = chunk
                    .query_row(params![id, scope.agent_id, scope.scope], |row| {
                        Ok(ChunkHit {
                            path: row.get(0)?,
                            start_line: row.get(1)?,
                            end_line: row.get(2)?,
                            text: row.get(3)?,
                            hash: row.get(4)?,
                            // bm25 is lower for a better match.
                            score: -rank,
                        })
                    })
                    .optional()?;
                hits.extend(hit);
            }
            Ok::<_, rusqlite::Error>(hits)
        })?)
    }

    async fn revision(&self, scope: &MemoryScope) -> Result<i64, StorageError> {
        Ok(self.database.read(|connection| {
            connection
                .prepare_cached("SELECT revision FROM memory_scopes WHERE agent_id = ?1 AND scope = ?2")?
                .query_row(params![scope.agent_id, scope.scope], |row| row.get(0))
                .optional()
                .map(Option::unwrap_or_default)
        })?)
    }

    async fn vectors(&self, scope: &MemoryScope, model: &str) -> Result<Vec<ChunkVector>, StorageError> {
        Ok(self.database.read(|connection| {
            connection
                .prepare_cached(
                    "SELECT c.id, c.path, c.start_line, c.end_line, e.vector FROM memory_chunks c \
                     JOIN memory_embeddings e ON e.model = ?3 AND e.hash = c.hash \
                     WHERE c.agent_id = ?1 AND c.scope = ?2",
                )?
                .query_map(params![scope.agent_id, scope.scope, model], |row| {
                    Ok(ChunkVector {
                        id: row.get(0)?,
                        path: row.get(1)?,
                        start_line: row.get(2)?,
                        end_line: row.get(3)?,
                        vector: vector_of(row.get_ref(4)?.as_blob()?),
                    })
                })?
                .collect()
        })?)
    }

    async fn chunk_texts(&self, scope: &MemoryScope, ids: &[i64]) -> Result<Vec<(i64, String)>, StorageError> {
        Ok(self.database.read(|connection| {
            let mut text = connection
                .prepare_cached("SELECT text FROM memory_chunks WHERE id = ?1 AND agent_id = ?2 AND scope = ?3")?;
            let mut texts = Vec::with_capacity(ids.len());
            for id in ids {
                let found: Option<String> =
                    text.query_row(params![id, scope.agent_id, scope.scope], |row| row.get(0)).optional()?;
                texts.extend(found.map(|found| (*id, found)));
            }
            Ok::<_, rusqlite::Error>(texts)
        })?)
    }

    async fn unembedded(&self, model: &str, limit: usize) -> Result<Vec<Unembedded>, StorageError> {
        Ok(self.database.read(|connection| {
            connection
                .prepare_cached(
                    "SELECT c.hash, min(c.text) FROM memory_chunks c WHERE NOT EXISTS \
                     (SELECT 1 FROM memory_embeddings e WHERE e.model = ?1 AND e.hash = c.hash) \
                     GROUP BY c.hash LIMIT ?2",
                )?
                .query_map(params![model, limit as i64], |row| Ok(Unembedded { hash: row.get(0)?, text: row.get(1)? }))?
                .collect()
        })?)
    }

    async fn put_embeddings(&self, model: &str, vectors: &[(String, Vec<f32>)]) -> Result<(), StorageError> {
        if vectors.is_empty() {
            return Ok(());
        }
        let rows: Vec<(String, Vec<u8>)> =
            vectors.iter().map(|(hash, vector)| (hash.clone(), vector_bytes(vector))).collect();
        let model = model.to_owned();
        self.database
            .write(move |connection| {
                let mut insert = connection.prepare_cached(
                    "INSERT OR REPLACE INTO memory_embeddings (model, hash, vector) VALUES (?1, ?2, ?3)",
                )?;
                let mut holders =
                    connection.prepare_cached("SELECT DISTINCT agent_id, scope FROM memory_chunks WHERE hash = ?1")?;
                let mut scopes = std::collections::BTreeSet::new();
                for (hash, vector) in &rows {
                    insert.execute(params![model, hash, vector])?;
                    let found =
                        holders.query_map([hash], |row| Ok((row.get::<_, String>(0)?, row.get::<_, String>(1)?)))?;
                    for holder in found {
                        scopes.insert(holder?);
                    }
                }
                let mut touch = connection.prepare_cached(
                    "UPDATE memory_scopes SET revision = revision + 1 WHERE agent_id = ?1 AND scope = ?2",
                )?;
                for (agent_id, scope) in &scopes {
                    touch.execute(params![agent_id, scope])?;
                }
                Ok::<_, StorageError>(())
            })
            .await
    }

    async fn reindex(&self, version: i64, index: for<'a> fn(&'a str) -> String) -> Result<u64, StorageError> {
        // Up to date (every start but the first after an upgrade): a read, not the writer.
        if self.database.read(indexed_version)? >= version {
            return Ok(0);
        }
        self.database
            .write(move |connection| {
                if indexed_version(connection)? >= version {
                    return Ok::<_, StorageError>(0);
                }
                let chunks: Vec<(i64, String)> = connection
                    .prepare("SELECT id, text FROM memory_chunks")?
                    .query_map([], |row| Ok((row.get(0)?, row.get(1)?)))?
                    .collect::<Result<_, _>>()?;
                let mut update = connection.prepare("UPDATE memory_fts SET body = ?2 WHERE rowid = ?1")?;
                for (id, text) in &chunks {
                    update.execute(params![id, index(text)])?;
                }
                connection.execute(
                    "INSERT INTO state_meta (key, value) VALUES (?1, ?2) \
                     ON CONFLICT (key) DO UPDATE SET value = excluded.value",
                    params![MEMORY_INDEX_VERSION_KEY, version.to_string()],
                )?;
                Ok(chunks.len() as u64)
            })
            .await
    }

    async fn scopes(&self, agent_id: Option<&str>) -> Result<Vec<ScopeSummary>, StorageError> {
        Ok(self.database.read(|connection| {
            connection
                .prepare_cached(
                    "SELECT agent_id, scope, docs, bytes, updated_ms FROM memory_scopes \
                     WHERE (?1 IS NULL OR agent_id = ?1) AND docs > 0 ORDER BY agent_id, scope",
                )?
                .query_map(params![agent_id], |row| {
                    Ok(ScopeSummary {
                        scope: MemoryScope { agent_id: row.get(0)?, scope: row.get(1)? },
                        docs: row.get::<_, i64>(2)?.max(0) as u64,
                        bytes: row.get::<_, i64>(3)?.max(0) as u64,
                        updated_ms: row.get(4)?,
                    })
                })?
                .collect()
        })?)
    }

    async fn stats(&self, model: Option<&str>) -> Result<MemoryStats, StorageError> {
        Ok(self.database.read(|connection| {
            let (scopes, docs, bytes) = connection.query_row(
                "SELECT count(*), coalesce(sum(docs), 0), coalesce(sum(bytes), 0) FROM memory_scopes WHERE docs > 0",
                [],
                |row| Ok((row.get::<_, i64>(0)?, row.get::<_, i64>(1)?, row.get::<_, i64>(2)?)),
            )?;
            // Distinct texts counted along the hash index (`GROUP BY`, or each vector once),
            // never with `count(DISTINCT …)`, whose temporary tree holds every hash in memory.
            let chunks: i64 = connection.query_row("SELECT count(*) FROM memory_chunks", [], |row| row.get(0))?;
            let hashes: i64 = connection.query_row(
                "SELECT count(*) FROM (SELECT hash FROM memory_chunks GROUP BY hash)",
                [],
                |row| row.get(0),
            )?;
            let embedded: i64 = match model {
                Some(model) => connection.query_row(
                    "SELECT count(*) FROM memory_embeddings e WHERE e.model = ?1 \
                     AND EXISTS (SELECT 1 FROM memory_chunks c WHERE c.hash = e.hash)",
                    [model],
                    |row| row.get(0),
                )?,
                None => 0,
            };
            // The counts read every chunk's index entry; the pages they pulled into this
            // reader's cache are given back, so a gateway at rest does not hold them
            // (its RSS would grow with what memory holds, up to the cache's size).
            connection.execute_batch("PRAGMA shrink_memory")?;
            let count = |value: i64| value.max(0) as u64;
            Ok::<_, rusqlite::Error>(MemoryStats {
                scopes: count(scopes),
                docs: count(docs),
                bytes: count(bytes),
                chunks: count(chunks),
                embedded: count(embedded),
                unembedded: count(hashes - embedded),
            })
        })?)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_scope_token_is_one_word_of_its_own() {
        let token = scope_token(&MemoryScope::new("main", "private:telegram:42"));
        assert!(token.chars().all(|c| c.is_ascii_alphanumeric()), "{token}");
        assert_ne!(token, scope_token(&MemoryScope::new("main", "private:telegram:43")));
        assert_ne!(token, scope_token(&MemoryScope::new("other", "private:telegram:42")));
        // The separator keeps ("ab", "c") and ("a", "bc") apart.
        assert_ne!(scope_token(&MemoryScope::new("ab", "c")), scope_token(&MemoryScope::new("a", "bc")));
    }
}
