//! The session store on PostgreSQL: the same rows and rules as `session::sqlite`, each
//! call one transaction. A session's row is locked (`FOR UPDATE`) while a call decides
//! about it, so two replicas touching one session take turns.

use async_trait::async_trait;
use chrono::{DateTime, Local, Utc};
use deadpool_postgres::Transaction;
use tokio_postgres::Row as PgRow;
use tokio_postgres::types::ToSql;

use super::leases::check_fence;
use super::{PgBackend, pg_error};
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

/// [`SessionStore`] on PostgreSQL. Daily resets are judged in the gateway's local time zone.
#[derive(Debug, Clone)]
pub struct PgSessionStore {
    backend: PgBackend,
}

impl PgSessionStore {
    pub fn new(backend: PgBackend) -> Self {
        Self { backend }
    }

    /// One read statement outside any transaction.
    async fn read(&self, sql: &str, params: &[&(dyn ToSql + Sync)]) -> Result<Vec<PgRow>, StoreError> {
        let client = self.backend.client().await?;
        let statement = client.prepare_cached(sql).await.map_err(pg)?;
        client.query(&statement, params).await.map_err(pg)
    }
}

/// Evaluates `$body` (a `Result`, usually `async { … }.await`) with `$tx` bound to a
/// transaction on a pooled connection, and commits it if the body succeeded; otherwise the
/// transaction rolls back as it drops. Returns from the enclosing function on error.
macro_rules! in_transaction {
    ($store:expr, |$tx:ident| $body:expr) => {{
        let mut client = $store.backend.client().await?;
        let transaction = client.transaction().await.map_err(pg)?;
        let $tx = &transaction;
        let value: Result<_, StoreError> = $body;
        let value = value?;
        transaction.commit().await.map_err(pg)?;
        Ok::<_, StoreError>(value)
    }};
}

/// Refuses a run's write unless this replica holds the session's lease (see
/// `postgres::leases`); nothing to check when writes are not fenced.
async fn fence(backend: &PgBackend, transaction: &Transaction<'_>, key: &str) -> Result<(), StoreError> {
    check_fence(transaction, backend.book(), key).await.map_err(StoreError::Database)
}

fn pg(error: tokio_postgres::Error) -> StoreError {
    StoreError::Database(pg_error(error))
}

async fn query(
    transaction: &Transaction<'_>,
    sql: &str,
    params: &[&(dyn ToSql + Sync)],
) -> Result<Vec<PgRow>, StoreError> {
    let statement = transaction.prepare_cached(sql).await.map_err(pg)?;
    transaction.query(&statement, params).await.map_err(pg)
}

async fn execute(transaction: &Transaction<'_>, sql: &str, params: &[&(dyn ToSql + Sync)]) -> Result<u64, StoreError> {
    let statement = transaction.prepare_cached(sql).await.map_err(pg)?;
    transaction.execute(&statement, params).await.map_err(pg)
}

fn millis(time: DateTime<Utc>) -> i64 {
    time.timestamp_millis()
}

fn from_millis(ms: i64) -> DateTime<Utc> {
    DateTime::from_timestamp_millis(ms).unwrap_or_default()
}

fn tokens(count: u64) -> i64 {
    i64::try_from(count).unwrap_or(i64::MAX)
}

const SELECT_SESSION: &str = "SELECT key, session_id, created_at, updated_at, input_tokens, output_tokens, \
     compaction_count, overrides FROM sessions";

fn session_from_row(row: &PgRow) -> Result<Session, StoreError> {
    Ok(Session {
        key: row.get("key"),
        session_id: row.get("session_id"),
        created_at: from_millis(row.get("created_at")),
        updated_at: from_millis(row.get("updated_at")),
        usage: Usage {
            input_tokens: row.get::<_, i64>("input_tokens").max(0) as u64,
            output_tokens: row.get::<_, i64>("output_tokens").max(0) as u64,
        },
        compaction_count: row.get::<_, i32>("compaction_count").max(0) as u32,
        overrides: decode_overrides(row.get("overrides"))?,
    })
}

/// The session of `key`, its row locked until the transaction ends.
async fn fetch_locked(transaction: &Transaction<'_>, key: &str) -> Result<Option<Session>, StoreError> {
    let rows = query(transaction, &format!("{SELECT_SESSION} WHERE key = $1 FOR UPDATE"), &[&key]).await?;
    rows.first().map(session_from_row).transpose()
}

/// Replaces the session id of `key` (or creates the row), keeping the user's overrides.
async fn rotate(
    transaction: &Transaction<'_>,
    key: &str,
    now: DateTime<Utc>,
    existing: Option<&Session>,
) -> Result<Session, StoreError> {
    let session_id = new_session_id();
    let at = millis(now);
    match existing {
        Some(_) => {
            execute(
                transaction,
                "UPDATE sessions SET session_id = $1, created_at = $2, updated_at = $2, input_tokens = 0, \
                 output_tokens = 0, compaction_count = 0, active_run_id = NULL WHERE key = $3",
                &[&session_id, &at, &key],
            )
            .await?;
        }
        None => {
            execute(
                transaction,
                "INSERT INTO sessions (key, session_id, created_at, updated_at) VALUES ($1, $2, $3, $3)",
                &[&key, &session_id, &at],
            )
            .await?;
        }
    }
    Ok(Session {
        key: key.to_owned(),
        session_id,
        created_at: now,
        updated_at: now,
        usage: Usage::default(),
        compaction_count: 0,
        overrides: existing.map(|s| s.overrides.clone()).unwrap_or_default(),
    })
}

/// The session of `key`, locked: created if missing. Two replicas creating it at once: the
/// second's insert waits for the first and then finds its row.
async fn fetch_or_create(
    transaction: &Transaction<'_>,
    key: &str,
    now: DateTime<Utc>,
) -> Result<(Session, Option<ResetReason>), StoreError> {
    if let Some(session) = fetch_locked(transaction, key).await? {
        return Ok((session, None));
    }
    let session_id = new_session_id();
    let inserted = execute(
        transaction,
        "INSERT INTO sessions (key, session_id, created_at, updated_at) VALUES ($1, $2, $3, $3) \
         ON CONFLICT (key) DO NOTHING",
        &[&key, &session_id, &millis(now)],
    )
    .await?;
    if inserted == 1 {
        let session = Session {
            key: key.to_owned(),
            session_id,
            created_at: now,
            updated_at: now,
            usage: Usage::default(),
            compaction_count: 0,
            overrides: SessionOverrides::default(),
        };
        return Ok((session, Some(ResetReason::New)));
    }
    let session = fetch_locked(transaction, key).await?.ok_or_else(|| StoreError::NotFound(key.to_owned()))?;
    Ok((session, None))
}

/// See `session::sqlite::resolve_on`.
async fn resolve_on(
    transaction: &Transaction<'_>,
    key: &str,
    now: DateTime<Utc>,
    policy: &ResetConfig,
    run_id: Option<&str>,
) -> Result<Resolved, StoreError> {
    let (session, created) = fetch_or_create(transaction, key, now).await?;
    let resolved = if let Some(reason) = created {
        Resolved { session, started: Some(reason), ended_session_id: None }
    } else {
        match staleness(session.updated_at, now, policy, &Local) {
            Some(reason) => Resolved {
                session: rotate(transaction, key, now, Some(&session)).await?,
                started: Some(reason),
                ended_session_id: Some(session.session_id),
            },
            None => {
                execute(transaction, "UPDATE sessions SET updated_at = $1 WHERE key = $2", &[&millis(now), &key])
                    .await?;
                Resolved { session: Session { updated_at: now, ..session }, started: None, ended_session_id: None }
            }
        }
    };
    if let Some(run_id) = run_id {
        begin_on(transaction, key, &resolved.session.session_id, run_id).await?;
    }
    Ok(resolved)
}

async fn begin_on(transaction: &Transaction<'_>, key: &str, session_id: &str, run_id: &str) -> Result<(), StoreError> {
    let updated = execute(
        transaction,
        "UPDATE sessions SET active_run_id = $1 WHERE key = $2 AND session_id = $3",
        &[&run_id, &key, &session_id],
    )
    .await?;
    if updated == 0 {
        return Err(StoreError::Superseded { key: key.to_owned(), run_id: run_id.to_owned() });
    }
    Ok(())
}

async fn transcript_rows(transaction: &Transaction<'_>, session_id: &str) -> Result<Vec<Row>, StoreError> {
    let rows = query(
        transaction,
        "SELECT id, role, content FROM transcript_entries WHERE session_id = $1 ORDER BY id",
        &[&session_id],
    )
    .await?;
    Ok(rows.iter().map(|row| (row.get(0), row.get(1), row.get(2), ())).collect())
}

/// Appends entries to the session of `key`, if `run_id` still owns it.
async fn append_on(
    transaction: &Transaction<'_>,
    key: &str,
    run_id: &str,
    encoded: &[(&'static str, String)],
) -> Result<(), StoreError> {
    let fenced = query(
        transaction,
        "SELECT session_id, (SELECT MAX(id) FROM transcript_entries WHERE session_id = sessions.session_id) \
         FROM sessions WHERE key = $1 AND active_run_id = $2 FOR UPDATE",
        &[&key, &run_id],
    )
    .await?;
    let Some(row) = fenced.first() else {
        return Err(StoreError::Superseded { key: key.to_owned(), run_id: run_id.to_owned() });
    };
    let (session_id, mut parent): (String, Option<i64>) = (row.get(0), row.get(1));
    let now = millis(Utc::now());
    let statement = transaction
        .prepare_cached(
            "INSERT INTO transcript_entries (session_id, parent_id, run_id, role, content, created_at) \
             VALUES ($1, $2, $3, $4, $5, $6) RETURNING id",
        )
        .await
        .map_err(pg)?;
    for (role, content) in encoded {
        let row = transaction
            .query_one(&statement, &[&session_id, &parent, &run_id, role, content, &now])
            .await
            .map_err(pg)?;
        parent = Some(row.get(0));
    }
    Ok(())
}

async fn finish_on(transaction: &Transaction<'_>, key: &str, run_id: &str, usage: Usage) -> Result<(), StoreError> {
    execute(
        transaction,
        "UPDATE sessions SET input_tokens = input_tokens + $1, output_tokens = output_tokens + $2, \
         active_run_id = CASE WHEN active_run_id = $3 THEN NULL ELSE active_run_id END WHERE key = $4",
        &[&tokens(usage.input_tokens), &tokens(usage.output_tokens), &run_id, &key],
    )
    .await?;
    Ok(())
}

#[async_trait]
impl SessionStore for PgSessionStore {
    async fn resolve(&self, key: &str, now: DateTime<Utc>, policy: &ResetConfig) -> Result<Resolved, StoreError> {
        in_transaction!(self, |transaction| resolve_on(transaction, key, now, policy, None).await)
    }

    async fn open_run(
        &self,
        key: &str,
        now: DateTime<Utc>,
        policy: &ResetConfig,
        run_id: &str,
    ) -> Result<OpenedRun, StoreError> {
        let (resolved, rows) = in_transaction!(self, |transaction| async {
            fence(&self.backend, transaction, key).await?;
            let resolved = resolve_on(transaction, key, now, policy, Some(run_id)).await?;
            let rows = transcript_rows(transaction, &resolved.session.session_id).await?;
            Ok((resolved, rows))
        }
        .await)?;
        Ok(OpenedRun { resolved, history: decode_transcript(rows) })
    }

    async fn reset(&self, key: &str, now: DateTime<Utc>) -> Result<Resolved, StoreError> {
        in_transaction!(self, |transaction| async {
            let existing = fetch_locked(transaction, key).await?;
            let session = match &existing {
                Some(existing) => rotate(transaction, key, now, Some(existing)).await?,
                None => fetch_or_create(transaction, key, now).await?.0,
            };
            Ok(Resolved {
                session,
                started: Some(if existing.is_some() { ResetReason::Manual } else { ResetReason::New }),
                ended_session_id: existing.map(|s| s.session_id),
            })
        }
        .await)
    }

    async fn get(&self, key: &str) -> Result<Option<Session>, StoreError> {
        let rows = self.read(&format!("{SELECT_SESSION} WHERE key = $1"), &[&key]).await?;
        rows.first().map(session_from_row).transpose()
    }

    async fn begin_run(&self, key: &str, session_id: &str, run_id: &str) -> Result<(), StoreError> {
        in_transaction!(self, |transaction| begin_on(transaction, key, session_id, run_id).await)
    }

    async fn begin_run_if_idle(&self, key: &str, session_id: &str, run_id: &str) -> Result<bool, StoreError> {
        in_transaction!(self, |transaction| async {
            let updated = execute(
                transaction,
                "UPDATE sessions SET active_run_id = $1 WHERE key = $2 AND session_id = $3 \
                     AND active_run_id IS NULL",
                &[&run_id, &key, &session_id],
            )
            .await?;
            Ok(updated == 1)
        }
        .await)
    }

    async fn history(&self, session_id: &str) -> Result<Vec<ChatMessage>, StoreError> {
        let rows = self
            .read("SELECT id, role, content FROM transcript_entries WHERE session_id = $1 ORDER BY id", &[&session_id])
            .await?;
        decode_transcript(rows.iter().map(|row| (row.get(0), row.get(1), row.get(2), ())).collect())
    }

    async fn transcript(&self, session_id: &str) -> Result<Vec<TranscriptEntry>, StoreError> {
        let rows = self
            .read(
                "SELECT id, role, content, run_id FROM transcript_entries WHERE session_id = $1 ORDER BY id",
                &[&session_id],
            )
            .await?;
        let rows: Vec<Row<Option<String>>> =
            rows.iter().map(|row| (row.get(0), row.get(1), row.get(2), row.get(3))).collect();
        let context = context_entries(rows)?;
        Ok(context.into_iter().map(|(_, run_id, message)| TranscriptEntry { run_id, message }).collect())
    }

    async fn append(&self, key: &str, run_id: &str, entries: &[ChatMessage]) -> Result<(), StoreError> {
        let encoded = encode_entries(entries)?;
        in_transaction!(self, |transaction| async {
            fence(&self.backend, transaction, key).await?;
            append_on(transaction, key, run_id, &encoded).await
        }
        .await)
    }

    async fn finish_run(&self, key: &str, run_id: &str, usage: Usage) -> Result<(), StoreError> {
        in_transaction!(self, |transaction| async {
            fence(&self.backend, transaction, key).await?;
            finish_on(transaction, key, run_id, usage).await
        }
        .await)
    }

    async fn close_run(
        &self,
        key: &str,
        run_id: &str,
        entries: &[ChatMessage],
        usage: Usage,
    ) -> Result<TranscriptSaved, StoreError> {
        let encoded = encode_entries(entries)?;
        in_transaction!(self, |transaction| async {
            fence(&self.backend, transaction, key).await?;
            let saved = match append_on(transaction, key, run_id, &encoded).await {
                Ok(()) => TranscriptSaved::Saved,
                Err(StoreError::Superseded { .. }) => TranscriptSaved::Superseded,
                Err(error) => return Err(error),
            };
            finish_on(transaction, key, run_id, usage).await?;
            Ok(saved)
        }
        .await)
    }

    async fn compact(
        &self,
        key: &str,
        run_id: &str,
        context_len: usize,
        entry: &CompactionEntry,
    ) -> Result<(), StoreError> {
        in_transaction!(self, |transaction| async {
            fence(&self.backend, transaction, key).await?;
            let owned = query(
                transaction,
                "SELECT session_id FROM sessions WHERE key = $1 AND active_run_id = $2 FOR UPDATE",
                &[&key, &run_id],
            )
            .await?;
            let Some(row) = owned.first() else {
                return Err(StoreError::Superseded { key: key.to_owned(), run_id: run_id.to_owned() });
            };
            let session_id: String = row.get(0);
            let rows = transcript_rows(transaction, &session_id).await?;
            let parent = rows.last().map(|(id, ..)| *id);
            let content = compaction_content(rows, context_len, entry)?;
            execute(
                transaction,
                "INSERT INTO transcript_entries (session_id, parent_id, run_id, role, content, created_at) \
                     VALUES ($1, $2, $3, $4, $5, $6)",
                &[&session_id, &parent, &run_id, &COMPACTION_ROLE, &content, &millis(Utc::now())],
            )
            .await?;
            execute(transaction, "UPDATE sessions SET compaction_count = compaction_count + 1 WHERE key = $1", &[&key])
                .await?;
            Ok(())
        }
        .await)
    }

    async fn set_overrides(&self, key: &str, overrides: &SessionOverrides) -> Result<(), StoreError> {
        let json = serde_json::to_string(overrides).map_err(|e| StoreError::Corrupt(e.to_string()))?;
        in_transaction!(self, |transaction| async {
            let updated =
                execute(transaction, "UPDATE sessions SET overrides = $1 WHERE key = $2", &[&json, &key]).await?;
            if updated == 0 {
                return Err(StoreError::NotFound(key.to_owned()));
            }
            Ok(())
        }
        .await)
    }

    async fn overridden(&self) -> Result<Vec<(String, SessionOverrides)>, StoreError> {
        let rows = self.read("SELECT key, overrides FROM sessions WHERE overrides <> '{}'", &[]).await?;
        Ok(overridden(rows.iter().map(|row| (row.get(0), row.get(1))).collect()))
    }

    async fn list(&self, limit: usize) -> Result<Vec<Session>, StoreError> {
        let limit = i64::try_from(limit).unwrap_or(i64::MAX);
        let rows = self.read(&format!("{SELECT_SESSION} ORDER BY updated_at DESC, key LIMIT $1"), &[&limit]).await?;
        rows.iter().map(session_from_row).collect()
    }

    async fn list_of_agent(&self, agent: &str, limit: usize) -> Result<Vec<Session>, StoreError> {
        // As on SQLite: the keys from `agent:<agent>:` up to `agent:<agent>;`, compared
        // byte by byte (`COLLATE "C"`) so the database's collation cannot reorder `:` and `;`.
        let (from, to) = (format!("agent:{agent}:"), format!("agent:{agent};"));
        let limit = i64::try_from(limit).unwrap_or(i64::MAX);
        let rows = self
            .read(
                &format!(
                    "{SELECT_SESSION} WHERE key COLLATE \"C\" >= $1 AND key COLLATE \"C\" < $2 \
                     ORDER BY updated_at DESC, key LIMIT $3"
                ),
                &[&from, &to, &limit],
            )
            .await?;
        rows.iter().map(session_from_row).collect()
    }
}
