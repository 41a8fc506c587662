//! The session store on the state directory's SQLite database.

use async_trait::async_trait;
use chrono::{DateTime, Local, Utc};
use rusqlite::{Connection, OptionalExtension, params};

use super::compaction::summary_message;
use super::reset::{ResetReason, staleness};
use super::store::{
    CompactionEntry, OpenedRun, Resolved, Session, SessionOverrides, SessionStore, StoreError, TranscriptEntry,
    TranscriptSaved,
};
use crate::agent::{ChatMessage, Usage};
use crate::config::ResetConfig;
use crate::state::Database;

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

fn new_session_id() -> String {
    uuid::Uuid::new_v4().to_string()
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
    let overrides = serde_json::from_str(&overrides).map_err(|e| StoreError::Corrupt(format!("overrides: {e}")))?;
    Ok(Session { overrides, ..session })
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

fn role_of(message: &ChatMessage) -> &'static str {
    match message {
        ChatMessage::User { .. } => "user",
        ChatMessage::Assistant { .. } => "assistant",
        ChatMessage::ToolResult { .. } => "tool_result",
    }
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

/// The role of a compaction entry's row (migration 0003 foresaw it: `role` is free text).
const COMPACTION_ROLE: &str = "compaction";

/// A compaction row's content.
#[derive(serde::Serialize, serde::Deserialize)]
struct StoredCompaction {
    summary: String,
    /// The first entry the summary does not cover; `None`: it covers every earlier entry.
    first_kept_entry_id: Option<i64>,
    tokens_before: u64,
}

/// One transcript row: id, role, JSON content, and `T`: nothing, or the run that wrote it.
type Row<T = ()> = (i64, String, String, T);

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

/// The context a transcript gives the model, each entry with its row id: after the latest
/// compaction, its summary (no row of its own: `None`, and `T::default()`) then the entries
/// it did not cover, each with its row's `T`.
fn context_entries<T: Default>(rows: Vec<Row<T>>) -> Result<Vec<(Option<i64>, T, ChatMessage)>, StoreError> {
    let latest = rows.iter().rposition(|(_, role, ..)| role == COMPACTION_ROLE);
    let mut context = Vec::new();
    let mut first_kept = i64::MIN;
    if let Some(index) = latest {
        let (id, _, content, _) = &rows[index];
        let compaction: StoredCompaction =
            serde_json::from_str(content).map_err(|e| StoreError::Corrupt(format!("compaction entry: {e}")))?;
        first_kept = compaction.first_kept_entry_id.unwrap_or(id + 1);
        context.push((None, T::default(), summary_message(&compaction.summary)));
    }
    for (id, role, content, extra) in rows {
        if id < first_kept || role == COMPACTION_ROLE {
            continue;
        }
        let entry =
            serde_json::from_str(&content).map_err(|e| StoreError::Corrupt(format!("transcript entry: {e}")))?;
        context.push((Some(id), extra, entry));
    }
    Ok(context)
}

fn decode_transcript(rows: Vec<Row>) -> Result<Vec<ChatMessage>, StoreError> {
    Ok(context_entries(rows)?.into_iter().map(|(_, _, entry)| entry).collect())
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
    let context = context_entries(rows)?;
    if context.len() != context_len || entry.keep_from == 0 || entry.keep_from > context_len {
        return Err(StoreError::Corrupt(format!(
            "a compaction keeping entries from {} of {context_len} does not fit the stored context of {}",
            entry.keep_from,
            context.len()
        )));
    }
    let first_kept_entry_id = context.get(entry.keep_from).and_then(|(id, ..)| *id);
    let stored =
        StoredCompaction { summary: entry.summary.clone(), first_kept_entry_id, tokens_before: entry.tokens_before };
    let content = serde_json::to_string(&stored).map_err(|e| StoreError::Corrupt(e.to_string()))?;
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

/// Transcript entries as (role, JSON), encoded before any write so the write lock is held
/// only for SQLite work.
fn encode_entries(entries: &[ChatMessage]) -> Result<Vec<(&'static str, String)>, StoreError> {
    entries
        .iter()
        .map(|entry| Ok((role_of(entry), serde_json::to_string(entry)?)))
        .collect::<Result<Vec<_>, serde_json::Error>>()
        .map_err(|e| StoreError::Corrupt(e.to_string()))
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
        Ok(rows
            .into_iter()
            .filter_map(|(key, json)| match serde_json::from_str::<SessionOverrides>(&json) {
                Ok(overrides) => (overrides != SessionOverrides::default()).then_some((key, overrides)),
                Err(error) => {
                    tracing::warn!(session_key = %key, %error, "a session's saved settings do not decode; using the defaults");
                    None
                }
            })
            .collect())
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
    use chrono::TimeZone;

    use super::*;
    use crate::config::{ResetMode, SessionsVisibility};
    use std::sync::Arc;

    use crate::session::catalog_for;

    async fn store() -> (SqliteSessionStore, tempfile::TempDir) {
        let dir = tempfile::tempdir().unwrap();
        (SqliteSessionStore::new(Database::open(dir.path()).await.unwrap()), dir)
    }

    fn local(hour: u32, minute: u32, day: u32) -> DateTime<Utc> {
        Local.with_ymd_and_hms(2026, 11, day, hour, minute, 0).earliest().unwrap().with_timezone(&Utc)
    }

    const DAILY: ResetConfig = ResetConfig { mode: ResetMode::Daily, at_hour: 4, idle_minutes: 0 };

    #[tokio::test]
    async fn the_daily_reset_at_04_00_starts_a_new_session_lazily() {
        let (store, _dir) = store().await;
        let first = store.resolve("agent:main:main", local(23, 0, 21), &DAILY).await.unwrap();
        assert_eq!(first.started, Some(ResetReason::New));
        let same = store.resolve("agent:main:main", local(3, 59, 22), &DAILY).await.unwrap();
        assert_eq!((same.started, &same.session.session_id), (None, &first.session.session_id));
        let next = store.resolve("agent:main:main", local(4, 1, 22), &DAILY).await.unwrap();
        assert_eq!(next.started, Some(ResetReason::Daily));
        assert_ne!(next.session.session_id, first.session.session_id);
        assert_eq!(next.ended_session_id.as_deref(), Some(first.session.session_id.as_str()));
    }

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
    async fn open_and_close_run_do_resolve_fence_append_and_usage_in_one_write_each() {
        let (store, _dir) = store().await;
        let opened = store.open_run("k", Utc::now(), &DAILY, "run-1").await.unwrap();
        assert_eq!(opened.resolved.started, Some(ResetReason::New));
        assert!(opened.history.unwrap().is_empty());
        let session_id = opened.resolved.session.session_id;
        let entries = [ChatMessage::user("hi"), ChatMessage::assistant("hello", vec![])];
        let usage = Usage { input_tokens: 3, output_tokens: 2 };
        assert_eq!(store.close_run("k", "run-1", &entries, usage).await.unwrap(), TranscriptSaved::Saved);
        assert_eq!(store.database.commit_stats().writes, 2);

        // The next run opens with the conversation so far, oldest first.
        let second = store.open_run("k", Utc::now(), &DAILY, "run-2").await.unwrap();
        assert_eq!(second.resolved.session.session_id, session_id);
        assert_eq!(second.history.unwrap(), entries);
        // A run superseded by a reset keeps nothing, but its tokens are still counted.
        let reset = store.reset("k", Utc::now()).await.unwrap();
        assert_eq!(store.close_run("k", "run-2", &entries, usage).await.unwrap(), TranscriptSaved::Superseded);
        assert!(store.history(&reset.session.session_id).await.unwrap().is_empty());
        assert_eq!(store.get("k").await.unwrap().unwrap().usage, usage);
    }

    #[tokio::test]
    async fn the_transcript_is_the_context_with_the_run_that_wrote_each_entry() {
        let (store, _dir) = store().await;
        let opened = store.open_run("k", Utc::now(), &DAILY, "run-1").await.unwrap();
        let session_id = opened.resolved.session.session_id;
        let answer = |text: &str| ChatMessage::assistant(text, vec![]);
        store.close_run("k", "run-1", &[ChatMessage::user("q1"), answer("a1")], Usage::default()).await.unwrap();
        store.open_run("k", Utc::now(), &DAILY, "run-2").await.unwrap();
        store.append("k", "run-2", &[ChatMessage::user("q2"), answer("a2")]).await.unwrap();
        let entry = CompactionEntry { summary: "q1".into(), keep_from: 2, tokens_before: 40 };
        store.compact("k", "run-2", 4, &entry).await.unwrap();

        let transcript = store.transcript(&session_id).await.unwrap();
        let runs: Vec<Option<&str>> = transcript.iter().map(|entry| entry.run_id.as_deref()).collect();
        assert_eq!(runs, [None, Some("run-2"), Some("run-2")], "the summary was written by no run");
        let messages: Vec<ChatMessage> = transcript.into_iter().map(|entry| entry.message).collect();
        assert_eq!(messages, store.history(&session_id).await.unwrap());
    }

    #[tokio::test]
    async fn a_compaction_entry_replaces_the_entries_it_summarized_in_the_context() {
        let (store, _dir) = store().await;
        let opened = store.open_run("k", Utc::now(), &DAILY, "run-1").await.unwrap();
        let answer = |text: &str| ChatMessage::assistant(text, vec![]);
        let entries = [ChatMessage::user("q1"), answer("a1"), ChatMessage::user("q2"), answer("a2")];
        store.append("k", "run-1", &entries).await.unwrap();
        let entry = CompactionEntry { summary: "they asked twice".into(), keep_from: 2, tokens_before: 40 };
        // The cut is checked against the stored context.
        assert!(matches!(store.compact("k", "run-1", 3, &entry).await, Err(StoreError::Corrupt(_))));
        store.compact("k", "run-1", 4, &entry).await.unwrap();
        let session_id = opened.resolved.session.session_id;
        let context = store.history(&session_id).await.unwrap();
        assert_eq!(context, [summary_message("they asked twice"), entries[2].clone(), entries[3].clone()]);

        // Later entries follow; a second compaction folds the first summary in.
        store.append("k", "run-1", &[ChatMessage::user("q3")]).await.unwrap();
        let again = CompactionEntry { summary: "all of it".into(), keep_from: 3, tokens_before: 30 };
        store.compact("k", "run-1", 4, &again).await.unwrap();
        assert_eq!(store.history(&session_id).await.unwrap(), [summary_message("all of it"), ChatMessage::user("q3")]);
        // Summarizing everything keeps only what comes after.
        let everything = CompactionEntry { summary: "done".into(), keep_from: 2, tokens_before: 10 };
        store.compact("k", "run-1", 2, &everything).await.unwrap();
        store.append("k", "run-1", &[ChatMessage::user("q4")]).await.unwrap();
        assert_eq!(store.history(&session_id).await.unwrap(), [summary_message("done"), ChatMessage::user("q4")]);
        assert_eq!(store.get("k").await.unwrap().unwrap().compaction_count, 3);
        // A run that lost the session cannot compact it.
        store.begin_run("k", &session_id, "run-2").await.unwrap();
        assert!(matches!(store.compact("k", "run-1", 2, &everything).await, Err(StoreError::Superseded { .. })));
    }

    #[tokio::test]
    async fn a_superseded_run_cannot_append() {
        let (store, _dir) = store().await;
        let session = store.resolve("k", Utc::now(), &DAILY).await.unwrap().session;
        store.begin_run("k", &session.session_id, "old-run").await.unwrap();
        // A newer run takes over (interrupt)…
        store.begin_run("k", &session.session_id, "new-run").await.unwrap();
        assert!(matches!(
            store.append("k", "old-run", &[ChatMessage::user("x")]).await,
            Err(StoreError::Superseded { .. })
        ));
        // …and a reset fences out everyone.
        let reset = store.reset("k", Utc::now()).await.unwrap();
        assert_eq!(reset.started, Some(ResetReason::Manual));
        assert!(matches!(
            store.append("k", "new-run", &[ChatMessage::user("x")]).await,
            Err(StoreError::Superseded { .. })
        ));
        assert!(store.begin_run("k", &session.session_id, "late").await.is_err(), "the old session id is gone");
        assert!(store.history(&reset.session.session_id).await.unwrap().is_empty());
    }

    #[tokio::test]
    async fn work_that_must_not_take_a_session_from_a_run_waits_for_it_to_finish() {
        let (store, _dir) = store().await;
        let session = store.resolve("k", Utc::now(), &DAILY).await.unwrap().session;
        store.begin_run("k", &session.session_id, "run-1").await.unwrap();
        assert!(!store.begin_run_if_idle("k", &session.session_id, "compact-1").await.unwrap(), "a run owns it");
        store.append("k", "run-1", &[ChatMessage::user("still mine")]).await.unwrap();
        store.finish_run("k", "run-1", Usage::default()).await.unwrap();
        assert!(store.begin_run_if_idle("k", &session.session_id, "compact-1").await.unwrap(), "free now");
    }

    #[tokio::test]
    async fn usage_overrides_and_listing_persist() {
        let (store, _dir) = store().await;
        let session = store.resolve("a", Utc::now(), &DAILY).await.unwrap().session;
        store.begin_run("a", &session.session_id, "r").await.unwrap();
        store.finish_run("a", "r", Usage { input_tokens: 10, output_tokens: 4 }).await.unwrap();
        let overrides = SessionOverrides { queue_mode: Some(crate::config::QueueMode::Followup), ..Default::default() };
        store.set_overrides("a", &overrides).await.unwrap();
        store.resolve("b", Utc::now() + chrono::Duration::seconds(1), &DAILY).await.unwrap();

        let listed = SessionStore::list(&store, 10).await.unwrap();
        assert_eq!(listed.iter().map(|s| s.key.as_str()).collect::<Vec<_>>(), ["b", "a"]);
        let a = store.get("a").await.unwrap().unwrap();
        assert_eq!((a.usage.input_tokens, a.usage.output_tokens), (10, 4));
        assert_eq!(a.overrides, overrides);
        // A reset keeps the user's settings.
        assert_eq!(store.reset("a", Utc::now()).await.unwrap().session.overrides, overrides);
    }

    #[tokio::test]
    async fn an_agents_catalog_lists_only_its_own_sessions() {
        let (store, _dir) = store().await;
        let keys = [
            "agent:main:main",
            "agent:helper:main",
            "agent:helper:slack:channel:c1",
            "agent:help:main",
            "agent:helper_x:main",
        ];
        for (offset, key) in keys.iter().enumerate() {
            let at = Utc::now() + chrono::Duration::seconds(offset as i64);
            store.resolve(key, at, &DAILY).await.unwrap();
        }
        let shared: Arc<dyn SessionStore> = Arc::new(store.clone());
        let helper: Vec<String> = catalog_for(shared.clone(), "helper", SessionsVisibility::Agent)
            .list(10)
            .await
            .into_iter()
            .map(|summary| summary.key)
            .collect();
        assert_eq!(helper, ["agent:helper:slack:channel:c1", "agent:helper:main"], "not help's, not helper_x's");
        assert_eq!(store.list_of_agent("helper", 1).await.unwrap().len(), 1, "the limit holds");
        let every = catalog_for(shared, "helper", SessionsVisibility::All).list(10).await;
        assert_eq!(every.len(), keys.len(), "the whole store sees every agent's");
    }
}
