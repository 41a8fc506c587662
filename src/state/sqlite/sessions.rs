//! The session store on the state directory's SQLite database.

use async_trait::async_trait;
use chrono::{DateTime, Local, Utc};
use rusqlite::{Connection, OptionalExtension, params};

use super::Database;
use crate::config::ResetConfig;
use crate::state::sessions::reset::{ResetReason, staleness};
use crate::state::sessions::transcript::{
    COMPACTION_ROLE, Row, compaction_content, context_entries, decode_overrides, decode_transcript, encode_entries,
    new_session_id, overridden,
};
use crate::state::sessions::{
    CompactionEntry, OpenedRun, Resolved, Session, SessionOverrides, SessionStore, StoreError, TranscriptEntry,
    TranscriptSaved,
};
use crate::types::{ChatMessage, Usage};

impl From<rusqlite::Error> for StoreError {
    fn from(error: rusqlite::Error) -> Self {
        Self::Database(error.into())
    }
}

/// Sessions in SQLite. Daily resets are judged in the gateway's local time zone.
///
/// Lookups run in place on a reader connection ([`Database::read`]); changes go through
/// the database's group commit ([`Database::write`]).
#[derive(Clone)]
pub struct SqliteSessionStore {
    database: Database,
}

impl SqliteSessionStore {
    pub fn new(database: Database) -> Self {
        Self { database }
    }
}

fn millis(time: DateTime<Utc>) -> i64 {
    time.timestamp_millis()
}

fn from_millis(ms: i64) -> DateTime<Utc> {
    DateTime::from_timestamp_millis(ms).unwrap_or_default()
}

/// A row of [`SELECT_SESSION`], with the overrides still JSON (decoded by [`decode_session`]
/// outside rusqlite's row callback, so a bad value reads as [`StoreError::Corrupt`]).
fn session_from_row(row: &rusqlite::Row<'_>) -> rusqlite::Result<(Session, String)> {
    Ok((
        Session {
            key: row.get("key")?,
            session_id: row.get("session_id")?,
            created_at: from_millis(row.get("created_at")?),
            updated_at: from_millis(row.get("updated_at")?),
            usage: Usage {
                input_tokens: row.get::<_, i64>("input_tokens")?.max(0) as u64,
                output_tokens: row.get::<_, i64>("output_tokens")?.max(0) as u64,
            },
            compaction_count: row.get::<_, i64>("compaction_count")?.max(0) as u32,
            overrides: SessionOverrides::default(),
        },
        row.get("overrides")?,
    ))
}

fn decode_session((session, overrides): (Session, String)) -> Result<Session, StoreError> {
    Ok(Session { overrides: decode_overrides(&overrides)?, ..session })
}

const SELECT_SESSION: &str = "SELECT key, session_id, created_at, updated_at, input_tokens, output_tokens, \
     compaction_count, overrides FROM sessions";

fn fetch_session(connection: &Connection, key: &str) -> Result<Option<Session>, StoreError> {
    let row = connection
        .prepare_cached(&format!("{SELECT_SESSION} WHERE key = ?"))?
        .query_row([key], session_from_row)
        .optional()?;
    row.map(decode_session).transpose()
}

/// The session for `key` as a message arrives at `now`, rotated if stale under `policy`;
/// with `run_id`, that run also becomes the session's only writer (see [`begin_on`]).
fn resolve_on(
    connection: &Connection,
    key: &str,
    now: DateTime<Utc>,
    policy: &ResetConfig,
    run_id: Option<&str>,
) -> Result<Resolved, StoreError> {
    let existing = fetch_session(connection, key)?;
    let resolved = match existing {
        None => Resolved {
            session: SqliteSessionStore::rotate(connection, key, now, None)?,
            started: Some(ResetReason::New),
            ended_session_id: None,
        },
        Some(session) => match staleness(session.updated_at, now, policy, &Local) {
            Some(reason) => Resolved {
                session: SqliteSessionStore::rotate(connection, key, now, Some(&session))?,
                started: Some(reason),
                ended_session_id: Some(session.session_id),
            },
            None => {
                // The common case, one statement: the row was just read in this transaction,
                // so its session id needs no second check.
                match run_id {
                    Some(run_id) => connection
                        .prepare_cached("UPDATE sessions SET updated_at = ?, active_run_id = ? WHERE key = ?")?
                        .execute(params![millis(now), run_id, key])?,
                    None => connection
                        .prepare_cached("UPDATE sessions SET updated_at = ? WHERE key = ?")?
                        .execute(params![millis(now), key])?,
                };
                let session = Session { updated_at: now, ..session };
                return Ok(Resolved { session, started: None, ended_session_id: None });
            }
        },
    };
    if let Some(run_id) = run_id {
        begin_on(connection, key.to_owned(), &resolved.session.session_id, run_id.to_owned())?;
    }
    Ok(resolved)
}

/// Makes `run_id` the only writer of `key`, if `session_id` is still its session.
fn begin_on(connection: &Connection, key: String, session_id: &str, run_id: String) -> Result<(), StoreError> {
    let updated = connection
        .prepare_cached("UPDATE sessions SET active_run_id = ? WHERE key = ? AND session_id = ?")?
        .execute(params![run_id, key, session_id])?;
    if updated == 0 {
        return Err(StoreError::Superseded { key, run_id });
    }
    Ok(())
}

/// A session id's transcript entries as stored, oldest first.
fn transcript_rows(connection: &Connection, session_id: &str) -> rusqlite::Result<Vec<Row>> {
    // Sorted here, not with ORDER BY id: with it, SQLite re-prepares the statement after
    // every write to the table (sqlite3_stmt_status REPREPARE climbs by one per write),
    // which cost ~4% of the inbound benchmark. The index yields id order anyway.
    let mut rows: Vec<Row> = connection
        .prepare_cached("SELECT id, role, content FROM transcript_entries WHERE session_id = ?")?
        .query_map([session_id], |row| Ok((row.get(0)?, row.get(1)?, row.get(2)?, ())))?
        .collect::<rusqlite::Result<_>>()?;
    rows.sort_unstable_by_key(|(id, ..)| *id);
    Ok(rows)
}

/// [`transcript_rows`] with the run that wrote each row; off the runs' hot path, which
/// does not need them.
fn transcript_rows_with_runs(connection: &Connection, session_id: &str) -> rusqlite::Result<Vec<Row<Option<String>>>> {
    let mut rows: Vec<Row<Option<String>>> = connection
        .prepare_cached("SELECT id, role, content, run_id FROM transcript_entries WHERE session_id = ?")?
        .query_map([session_id], |row| Ok((row.get(0)?, row.get(1)?, row.get(2)?, row.get(3)?)))?
        .collect::<rusqlite::Result<_>>()?;
    rows.sort_unstable_by_key(|(id, ..)| *id);
    Ok(rows)
}

/// Records a compaction of `key`'s context if `run_id` owns the session (see
/// [`SessionStore::compact`]).
fn compact_on(
    connection: &Connection,
    key: String,
    run_id: String,
    context_len: usize,
    entry: &CompactionEntry,
) -> Result<(), StoreError> {
    let session_id: Option<String> = connection
        .prepare_cached("SELECT session_id FROM sessions WHERE key = ? AND active_run_id = ?")?
        .query_row([&key, &run_id], |row| row.get(0))
        .optional()?;
    let Some(session_id) = session_id else { return Err(StoreError::Superseded { key, run_id }) };
    let rows = transcript_rows(connection, &session_id)?;
    let parent = rows.last().map(|(id, ..)| *id);
    let content = compaction_content(rows, context_len, entry)?;
    connection
        .prepare_cached(
            "INSERT INTO transcript_entries (session_id, parent_id, run_id, role, content, created_at) \
             VALUES (?, ?, ?, ?, ?, ?)",
        )?
        .execute(params![session_id, parent, run_id, COMPACTION_ROLE, content, millis(Utc::now())])?;
    connection
        .prepare_cached("UPDATE sessions SET compaction_count = compaction_count + 1 WHERE key = ?")?
        .execute([&key])?;
    Ok(())
}

/// Appends entries to the session of `key`, if `run_id` still owns it.
fn append_on(
    connection: &Connection,
    key: String,
    run_id: String,
    encoded: &[(&'static str, String)],
) -> Result<(), StoreError> {
    let now = millis(Utc::now());
    // The fence: only the session's current run may write, to its current session id.
    // The same statement finds the parent of the first new entry.
    let fenced: Option<(String, Option<i64>)> = connection
        .prepare_cached(
            "SELECT session_id, (SELECT MAX(id) FROM transcript_entries WHERE session_id = sessions.session_id) \
             FROM sessions WHERE key = ? AND active_run_id = ?",
        )?
        .query_row([&key, &run_id], |row| Ok((row.get(0)?, row.get(1)?)))
        .optional()?;
    let Some((session_id, mut parent)) = fenced else {
        return Err(StoreError::Superseded { key, run_id });
    };
    let mut insert = connection.prepare_cached(
        "INSERT INTO transcript_entries (session_id, parent_id, run_id, role, content, created_at) \
         VALUES (?, ?, ?, ?, ?, ?)",
    )?;
    for (role, content) in encoded {
        insert.execute(params![session_id, parent, run_id, role, content, now])?;
        parent = Some(connection.last_insert_rowid());
    }
    Ok(())
}

/// Adds a run's token usage to `key` and releases the run's ownership.
fn finish_on(connection: &Connection, key: &str, run_id: &str, usage: Usage) -> rusqlite::Result<()> {
    connection
        .prepare_cached(
            "UPDATE sessions SET input_tokens = input_tokens + ?, output_tokens = output_tokens + ?, \
             active_run_id = CASE WHEN active_run_id = ? THEN NULL ELSE active_run_id END WHERE key = ?",
        )?
        .execute(params![
            i64::try_from(usage.input_tokens).unwrap_or(i64::MAX),
            i64::try_from(usage.output_tokens).unwrap_or(i64::MAX),
            run_id,
            key
        ])?;
    Ok(())
}

impl SqliteSessionStore {
    /// Runs `f` in the database's next group commit (see [`Database::write`]): atomically,
    /// in a transaction that takes the write lock up front (`BEGIN IMMEDIATE`; a deferred
    /// one that upgrades from reading to writing after another process committed would fail
    /// at once with SQLITE_BUSY_SNAPSHOT, which the busy timeout does not cover).
    async fn write<T: Send + 'static>(
        &self,
        f: impl FnOnce(&Connection) -> Result<T, StoreError> + Send + 'static,
    ) -> Result<T, StoreError> {
        self.database.write(f).await
    }

    /// Replaces the session id of `key` (or creates the row) inside the caller's transaction.
    fn rotate(
        connection: &Connection,
        key: &str,
        now: DateTime<Utc>,
        existing: Option<&Session>,
    ) -> Result<Session, StoreError> {
        let session_id = new_session_id();
        match existing {
            Some(_) => {
                connection
                    .prepare_cached(
                        "UPDATE sessions SET session_id = ?, created_at = ?, updated_at = ?, input_tokens = 0, \
                         output_tokens = 0, compaction_count = 0, active_run_id = NULL WHERE key = ?",
                    )?
                    .execute(params![session_id, millis(now), millis(now), key])?;
            }
            None => {
                connection
                    .prepare_cached(
                        "INSERT INTO sessions (key, session_id, created_at, updated_at) VALUES (?, ?, ?, ?)",
                    )?
                    .execute(params![key, session_id, millis(now), millis(now)])?;
            }
        }
        Ok(Session {
            key: key.to_owned(),
            session_id,
            created_at: now,
            updated_at: now,
            usage: Usage::default(),
            compaction_count: 0,
            // A reset starts the conversation over, not the user's settings.
            overrides: existing.map(|s| s.overrides.clone()).unwrap_or_default(),
        })
    }
}

#[async_trait]
impl SessionStore for SqliteSessionStore {
    async fn resolve(&self, key: &str, now: DateTime<Utc>, policy: &ResetConfig) -> Result<Resolved, StoreError> {
        let (key, policy) = (key.to_owned(), policy.clone());
        self.write(move |connection| resolve_on(connection, &key, now, &policy, None)).await
    }

    async fn open_run(
        &self,
        key: &str,
        now: DateTime<Utc>,
        policy: &ResetConfig,
        run_id: &str,
    ) -> Result<OpenedRun, StoreError> {
        let (key, policy, run_id) = (key.to_owned(), policy.clone(), run_id.to_owned());
        let (resolved, rows) = self
            .write(move |connection| {
                let resolved = resolve_on(connection, &key, now, &policy, Some(&run_id))?;
                // Read here rather than on a reader: the writer's page cache holds these pages,
                // while a reader's is dropped at every commit and would re-read them all.
                let rows = transcript_rows(connection, &resolved.session.session_id)?;
                Ok((resolved, rows))
            })
            .await?;
        Ok(OpenedRun { resolved, history: decode_transcript(rows) })
    }

    async fn reset(&self, key: &str, now: DateTime<Utc>) -> Result<Resolved, StoreError> {
        let key = key.to_owned();
        self.write(move |transaction| {
            let existing = fetch_session(transaction, &key)?;
            let session = Self::rotate(transaction, &key, now, existing.as_ref())?;
            Ok(Resolved {
                session,
                started: Some(if existing.is_some() { ResetReason::Manual } else { ResetReason::New }),
                ended_session_id: existing.map(|s| s.session_id),
            })
        })
        .await
    }

    async fn get(&self, key: &str) -> Result<Option<Session>, StoreError> {
        self.database.read(|connection| fetch_session(connection, key))
    }

    async fn begin_run(&self, key: &str, session_id: &str, run_id: &str) -> Result<(), StoreError> {
        let (key, session_id, run_id) = (key.to_owned(), session_id.to_owned(), run_id.to_owned());
        self.write(move |connection| begin_on(connection, key, &session_id, run_id)).await
    }

    async fn begin_run_if_idle(&self, key: &str, session_id: &str, run_id: &str) -> Result<bool, StoreError> {
        let (key, session_id, run_id) = (key.to_owned(), session_id.to_owned(), run_id.to_owned());
        self.write(move |connection| {
            let updated = connection
                .prepare_cached(
                    "UPDATE sessions SET active_run_id = ? WHERE key = ? AND session_id = ? AND active_run_id IS NULL",
                )?
                .execute(params![run_id, key, session_id])?;
            Ok(updated == 1)
        })
        .await
    }

    async fn history(&self, session_id: &str) -> Result<Vec<ChatMessage>, StoreError> {
        decode_transcript(self.database.read(|connection| transcript_rows(connection, session_id))?)
    }

    async fn transcript(&self, session_id: &str) -> Result<Vec<TranscriptEntry>, StoreError> {
        let rows = self.database.read(|connection| transcript_rows_with_runs(connection, session_id))?;
        let context = context_entries(rows)?;
        Ok(context.into_iter().map(|(_, run_id, message)| TranscriptEntry { run_id, message }).collect())
    }

    async fn append(&self, key: &str, run_id: &str, entries: &[ChatMessage]) -> Result<(), StoreError> {
        let encoded = encode_entries(entries)?;
        let (key, run_id) = (key.to_owned(), run_id.to_owned());
        self.write(move |connection| append_on(connection, key, run_id, &encoded)).await
    }

    async fn finish_run(&self, key: &str, run_id: &str, usage: Usage) -> Result<(), StoreError> {
        let (key, run_id) = (key.to_owned(), run_id.to_owned());
        self.write(move |connection| Ok(finish_on(connection, &key, &run_id, usage)?)).await
    }

    async fn close_run(
        &self,
        key: &str,
        run_id: &str,
        entries: &[ChatMessage],
        usage: Usage,
    ) -> Result<TranscriptSaved, StoreError> {
        let encoded = encode_entries(entries)?;
        let (key, run_id) = (key.to_owned(), run_id.to_owned());
        self.write(move |connection| {
            let saved = match append_on(connection, key.clone(), run_id.clone(), &encoded) {
                Ok(()) => TranscriptSaved::Saved,
                Err(StoreError::Superseded { .. }) => TranscriptSaved::Superseded,
                Err(error) => return Err(error),
            };
            finish_on(connection, &key, &run_id, usage)?;
            Ok(saved)
        })
        .await
    }

    async fn compact(
        &self,
        key: &str,
        run_id: &str,
        context_len: usize,
        entry: &CompactionEntry,
    ) -> Result<(), StoreError> {
        let (key, run_id, entry) = (key.to_owned(), run_id.to_owned(), entry.clone());
        self.write(move |connection| compact_on(connection, key, run_id, context_len, &entry)).await
    }

    async fn set_overrides(&self, key: &str, overrides: &SessionOverrides) -> Result<(), StoreError> {
        let json = serde_json::to_string(overrides).map_err(|e| StoreError::Corrupt(e.to_string()))?;
        let key = key.to_owned();
        self.write(move |connection| {
            let updated = connection
                .prepare_cached("UPDATE sessions SET overrides = ? WHERE key = ?")?
                .execute(params![json, key])?;
            if updated == 0 {
                return Err(StoreError::NotFound(key));
            }
            Ok(())
        })
        .await
    }

    async fn overridden(&self) -> Result<Vec<(String, SessionOverrides)>, StoreError> {
        let rows: Vec<(String, String)> = self.database.read(|connection| {
            connection
                .prepare_cached("SELECT key, overrides FROM sessions WHERE overrides <> '{}'")?
                .query_map([], |row| Ok((row.get(0)?, row.get(1)?)))?
                .collect()
        })?;
        Ok(overridden(rows))
    }

    async fn list(&self, limit: usize) -> Result<Vec<Session>, StoreError> {
        let rows: Vec<(Session, String)> = self.database.read(|connection| {
            connection
                .prepare_cached(&format!("{SELECT_SESSION} ORDER BY updated_at DESC, key LIMIT ?"))?
                .query_map([i64::try_from(limit).unwrap_or(i64::MAX)], session_from_row)?
                .collect()
        })?;
        rows.into_iter().map(decode_session).collect()
    }

    async fn list_of_agent(&self, agent: &str, limit: usize) -> Result<Vec<Session>, StoreError> {
        // The keys from `agent:<agent>:` up to, not including, `agent:<agent>;` (`;` follows
        // `:`): a range the key's index answers, with no LIKE wildcard in an id to escape.
        let (from, to) = (format!("agent:{agent}:"), format!("agent:{agent};"));
        let rows: Vec<(Session, String)> = self.database.read(move |connection| {
            connection
                .prepare_cached(&format!(
                    "{SELECT_SESSION} WHERE key >= ? AND key < ? ORDER BY updated_at DESC, key LIMIT ?"
                ))?
                .query_map(rusqlite::params![from, to, i64::try_from(limit).unwrap_or(i64::MAX)], session_from_row)?
                .collect()
        })?;
        rows.into_iter().map(decode_session).collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::ResetMode;

    async fn store() -> (SqliteSessionStore, tempfile::TempDir) {
        let dir = tempfile::tempdir().unwrap();
        (SqliteSessionStore::new(Database::open(dir.path()).await.unwrap()), dir)
    }

    const DAILY: ResetConfig = ResetConfig { mode: ResetMode::Daily, at_hour: 4, idle_minutes: 0 };

    #[tokio::test]
    async fn transcripts_append_in_order_with_parent_links() {
        let (store, _dir) = store().await;
        let session = store.resolve("k", Utc::now(), &DAILY).await.unwrap().session;
        store.begin_run("k", &session.session_id, "run-1").await.unwrap();
        let entries = [ChatMessage::user("hi"), ChatMessage::assistant("hello", vec![])];
        store.append("k", "run-1", &entries).await.unwrap();
        store.append("k", "run-1", &[ChatMessage::user("again")]).await.unwrap();
        assert_eq!(store.history(&session.session_id).await.unwrap().len(), 3);
        let parents: Vec<Option<i64>> = store
            .database
            .with_connection(|c| {
                c.prepare("SELECT parent_id FROM transcript_entries ORDER BY id")?
                    .query_map([], |row| row.get(0))?
                    .collect()
            })
            .unwrap();
        assert_eq!(parents, [None, Some(1), Some(2)]);
    }

    #[tokio::test]
    async fn open_and_close_run_are_one_group_commit_each() {
        let (store, _dir) = store().await;
        store.open_run("k", Utc::now(), &DAILY, "run-1").await.unwrap();
        let entries = [ChatMessage::user("hi"), ChatMessage::assistant("hello", vec![])];
        store.close_run("k", "run-1", &entries, Usage::default()).await.unwrap();
        assert_eq!(store.database.commit_stats().writes, 2);
    }
}
