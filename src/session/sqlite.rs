//! The session store on the state directory's SQLite database.

use async_trait::async_trait;
use chrono::{DateTime, Local, Utc};
use sqlx::Row;
use sqlx::sqlite::SqliteRow;

use super::reset::{ResetReason, staleness};
use super::store::{Resolved, Session, SessionOverrides, SessionStore, StoreError};
use crate::agent::tools::{SessionCatalog, SessionSummary};
use crate::agent::{ChatMessage, Usage};
use crate::config::ResetConfig;
use crate::state::Database;

/// Sessions in SQLite. Daily resets are judged in the gateway's local time zone.
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

fn session_from_row(row: &SqliteRow) -> Result<Session, StoreError> {
    let overrides: String = row.try_get("overrides")?;
    Ok(Session {
        key: row.try_get("key")?,
        session_id: row.try_get("session_id")?,
        created_at: from_millis(row.try_get("created_at")?),
        updated_at: from_millis(row.try_get("updated_at")?),
        usage: Usage {
            input_tokens: row.try_get::<i64, _>("input_tokens")?.max(0) as u64,
            output_tokens: row.try_get::<i64, _>("output_tokens")?.max(0) as u64,
        },
        compaction_count: row.try_get::<i64, _>("compaction_count")?.max(0) as u32,
        overrides: serde_json::from_str(&overrides).map_err(|e| StoreError::Corrupt(format!("overrides: {e}")))?,
    })
}

const SELECT_SESSION: &str = "SELECT key, session_id, created_at, updated_at, input_tokens, output_tokens, \
     compaction_count, overrides FROM sessions";

async fn fetch_session(connection: &mut sqlx::SqliteConnection, key: &str) -> Result<Option<Session>, StoreError> {
    let row =
        sqlx::query(&format!("{SELECT_SESSION} WHERE key = ?")).bind(key).fetch_optional(&mut *connection).await?;
    row.as_ref().map(session_from_row).transpose()
}

fn role_of(message: &ChatMessage) -> &'static str {
    match message {
        ChatMessage::User { .. } => "user",
        ChatMessage::Assistant { .. } => "assistant",
        ChatMessage::ToolResult { .. } => "tool_result",
    }
}

impl SqliteSessionStore {
    /// A transaction that reads, then writes. `BEGIN IMMEDIATE` takes the write lock up
    /// front: a deferred transaction that upgrades from reading to writing after another
    /// connection committed fails at once with SQLITE_BUSY_SNAPSHOT, which the busy
    /// timeout does not cover.
    async fn write_transaction(&self) -> Result<sqlx::Transaction<'static, sqlx::Sqlite>, sqlx::Error> {
        self.database.pool().begin_with("BEGIN IMMEDIATE").await
    }

    /// Replaces the session id of `key` (or creates the row) inside `transaction`.
    async fn rotate(
        transaction: &mut sqlx::SqliteConnection,
        key: &str,
        now: DateTime<Utc>,
        existing: Option<&Session>,
    ) -> Result<Session, StoreError> {
        let session_id = new_session_id();
        match existing {
            Some(_) => {
                sqlx::query(
                    "UPDATE sessions SET session_id = ?, created_at = ?, updated_at = ?, input_tokens = 0, \
                     output_tokens = 0, compaction_count = 0, active_run_id = NULL WHERE key = ?",
                )
                .bind(&session_id)
                .bind(millis(now))
                .bind(millis(now))
                .bind(key)
                .execute(&mut *transaction)
                .await?;
            }
            None => {
                sqlx::query("INSERT INTO sessions (key, session_id, created_at, updated_at) VALUES (?, ?, ?, ?)")
                    .bind(key)
                    .bind(&session_id)
                    .bind(millis(now))
                    .bind(millis(now))
                    .execute(&mut *transaction)
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
            // A reset starts the conversation over, not the user's settings.
            overrides: existing.map(|s| s.overrides.clone()).unwrap_or_default(),
        })
    }
}

#[async_trait]
impl SessionStore for SqliteSessionStore {
    async fn resolve(&self, key: &str, now: DateTime<Utc>, policy: &ResetConfig) -> Result<Resolved, StoreError> {
        let mut transaction = self.write_transaction().await?;
        let existing = fetch_session(&mut transaction, key).await?;
        let resolved = match existing {
            None => Resolved {
                session: Self::rotate(&mut transaction, key, now, None).await?,
                started: Some(ResetReason::New),
                ended_session_id: None,
            },
            Some(session) => match staleness(session.updated_at, now, policy, &Local) {
                Some(reason) => Resolved {
                    session: Self::rotate(&mut transaction, key, now, Some(&session)).await?,
                    started: Some(reason),
                    ended_session_id: Some(session.session_id),
                },
                None => {
                    sqlx::query("UPDATE sessions SET updated_at = ? WHERE key = ?")
                        .bind(millis(now))
                        .bind(key)
                        .execute(&mut *transaction)
                        .await?;
                    Resolved { session: Session { updated_at: now, ..session }, started: None, ended_session_id: None }
                }
            },
        };
        transaction.commit().await?;
        Ok(resolved)
    }

    async fn reset(&self, key: &str, now: DateTime<Utc>) -> Result<Resolved, StoreError> {
        let mut transaction = self.write_transaction().await?;
        let existing = fetch_session(&mut transaction, key).await?;
        let session = Self::rotate(&mut transaction, key, now, existing.as_ref()).await?;
        transaction.commit().await?;
        Ok(Resolved {
            session,
            started: Some(if existing.is_some() { ResetReason::Manual } else { ResetReason::New }),
            ended_session_id: existing.map(|s| s.session_id),
        })
    }

    async fn get(&self, key: &str) -> Result<Option<Session>, StoreError> {
        let mut connection = self.database.pool().acquire().await?;
        fetch_session(&mut connection, key).await
    }

    async fn begin_run(&self, key: &str, session_id: &str, run_id: &str) -> Result<(), StoreError> {
        let updated = sqlx::query("UPDATE sessions SET active_run_id = ? WHERE key = ? AND session_id = ?")
            .bind(run_id)
            .bind(key)
            .bind(session_id)
            .execute(self.database.pool())
            .await?;
        if updated.rows_affected() == 0 {
            return Err(StoreError::Superseded { key: key.to_owned(), run_id: run_id.to_owned() });
        }
        Ok(())
    }

    async fn history(&self, session_id: &str) -> Result<Vec<ChatMessage>, StoreError> {
        let rows = sqlx::query("SELECT content FROM transcript_entries WHERE session_id = ? ORDER BY id")
            .bind(session_id)
            .fetch_all(self.database.pool())
            .await?;
        rows.iter()
            .map(|row| {
                let content: String = row.try_get("content")?;
                serde_json::from_str(&content).map_err(|e| StoreError::Corrupt(format!("transcript entry: {e}")))
            })
            .collect()
    }

    async fn append(&self, key: &str, run_id: &str, entries: &[ChatMessage]) -> Result<(), StoreError> {
        let mut transaction = self.write_transaction().await?;
        // The fence: only the session's current run may write, to its current session id.
        let session_id: Option<String> =
            sqlx::query_scalar("SELECT session_id FROM sessions WHERE key = ? AND active_run_id = ?")
                .bind(key)
                .bind(run_id)
                .fetch_optional(&mut *transaction)
                .await?;
        let Some(session_id) = session_id else {
            return Err(StoreError::Superseded { key: key.to_owned(), run_id: run_id.to_owned() });
        };
        let mut parent: Option<i64> = sqlx::query_scalar("SELECT MAX(id) FROM transcript_entries WHERE session_id = ?")
            .bind(&session_id)
            .fetch_one(&mut *transaction)
            .await?;
        let now = millis(Utc::now());
        for entry in entries {
            let content = serde_json::to_string(entry).map_err(|e| StoreError::Corrupt(e.to_string()))?;
            let inserted = sqlx::query(
                "INSERT INTO transcript_entries (session_id, parent_id, run_id, role, content, created_at) \
                 VALUES (?, ?, ?, ?, ?, ?)",
            )
            .bind(&session_id)
            .bind(parent)
            .bind(run_id)
            .bind(role_of(entry))
            .bind(content)
            .bind(now)
            .execute(&mut *transaction)
            .await?;
            parent = Some(inserted.last_insert_rowid());
        }
        transaction.commit().await?;
        Ok(())
    }

    async fn finish_run(&self, key: &str, run_id: &str, usage: Usage) -> Result<(), StoreError> {
        sqlx::query(
            "UPDATE sessions SET input_tokens = input_tokens + ?, output_tokens = output_tokens + ?, \
             active_run_id = CASE WHEN active_run_id = ? THEN NULL ELSE active_run_id END WHERE key = ?",
        )
        .bind(i64::try_from(usage.input_tokens).unwrap_or(i64::MAX))
        .bind(i64::try_from(usage.output_tokens).unwrap_or(i64::MAX))
        .bind(run_id)
        .bind(key)
        .execute(self.database.pool())
        .await?;
        Ok(())
    }

    async fn set_overrides(&self, key: &str, overrides: &SessionOverrides) -> Result<(), StoreError> {
        let json = serde_json::to_string(overrides).map_err(|e| StoreError::Corrupt(e.to_string()))?;
        let updated = sqlx::query("UPDATE sessions SET overrides = ? WHERE key = ?")
            .bind(json)
            .bind(key)
            .execute(self.database.pool())
            .await?;
        if updated.rows_affected() == 0 {
            return Err(StoreError::NotFound(key.to_owned()));
        }
        Ok(())
    }

    async fn list(&self, limit: usize) -> Result<Vec<Session>, StoreError> {
        let rows = sqlx::query(&format!("{SELECT_SESSION} ORDER BY updated_at DESC, key LIMIT ?"))
            .bind(i64::try_from(limit).unwrap_or(i64::MAX))
            .fetch_all(self.database.pool())
            .await?;
        rows.iter().map(session_from_row).collect()
    }
}

/// The `sessions_list` tool reads the store.
#[async_trait]
impl SessionCatalog for SqliteSessionStore {
    async fn list(&self, limit: usize) -> Vec<SessionSummary> {
        match SessionStore::list(self, limit).await {
            Ok(sessions) => sessions
                .into_iter()
                .map(|s| SessionSummary {
                    key: s.key,
                    updated_at: s.updated_at,
                    input_tokens: s.usage.input_tokens,
                    output_tokens: s.usage.output_tokens,
                })
                .collect(),
            Err(error) => {
                tracing::warn!(%error, "cannot list sessions for the sessions_list tool");
                Vec::new()
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use chrono::TimeZone;

    use super::*;
    use crate::config::ResetMode;

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
        let entries = [ChatMessage::user("hi"), ChatMessage::Assistant { text: "hello".into(), tool_calls: vec![] }];
        store.append("k", "run-1", &entries).await.unwrap();
        store.append("k", "run-1", &[ChatMessage::user("again")]).await.unwrap();
        assert_eq!(store.history(&session.session_id).await.unwrap().len(), 3);
        let parents: Vec<Option<i64>> = sqlx::query_scalar("SELECT parent_id FROM transcript_entries ORDER BY id")
            .fetch_all(store.database.pool())
            .await
            .unwrap();
        assert_eq!(parents, [None, Some(1), Some(2)]);
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
}
