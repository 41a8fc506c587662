//! The journal of accepted messages that have not been answered yet.
//!
//! A message is recorded before the platform is told it was received, and removed only
//! after the run that answers it finished. After a crash or restart, whatever is still in
//! the journal runs again: nothing accepted is lost.

use async_trait::async_trait;
use chrono::{DateTime, Utc};
use ferry_channel::InboundMessage;
use rusqlite::{Connection, params};

use crate::state::Database;

/// An accepted message waiting for (or in) its run.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct QueuedMessage {
    pub id: i64,
    pub session_key: String,
    pub message: InboundMessage,
    /// What the model is asked (the message text, wrapped with group context if any).
    pub prompt: String,
    pub enqueued_at: DateTime<Utc>,
}

impl QueuedMessage {
    /// Where a reply to it goes: the same channel, account, chat and thread.
    pub fn reply_place(&self) -> (&str, &str, &str, Option<&str>) {
        let m = &self.message;
        (&m.channel, &m.account_id, &m.chat.id, m.thread_id.as_deref())
    }
}

#[derive(Debug, thiserror::Error)]
pub enum JournalError {
    #[error("queue journal: {0}")]
    Database(#[from] rusqlite::Error),
    #[error("queue journal: cannot encode a message: {0}")]
    Encode(#[from] serde_json::Error),
}

/// What the scheduler needs of the journal: forgetting messages once answered or dropped.
#[async_trait]
pub trait AnsweredLog: Send + Sync + 'static {
    async fn forget(&self, ids: &[i64]) -> Result<(), JournalError>;
}

#[async_trait]
impl AnsweredLog for QueueJournal {
    async fn forget(&self, ids: &[i64]) -> Result<(), JournalError> {
        self.remove(ids).await
    }
}

/// An accepted message, encoded and waiting to be written.
pub struct JournalEntry {
    message: InboundMessage,
    encoded: String,
    enqueued_at: DateTime<Utc>,
}

impl JournalEntry {
    /// Writes the entry on `connection` (inside the caller's transaction) and returns the
    /// queued message with its journal id.
    pub fn insert(self, connection: &Connection, session_key: &str, prompt: &str) -> rusqlite::Result<QueuedMessage> {
        let id = connection
            .prepare_cached(
                "INSERT INTO queued_messages (session_key, message, prompt, enqueued_at) VALUES (?, ?, ?, ?)",
            )?
            .insert(params![session_key, self.encoded, prompt, self.enqueued_at.timestamp_millis()])?;
        Ok(QueuedMessage {
            id,
            session_key: session_key.to_owned(),
            message: self.message,
            prompt: prompt.to_owned(),
            enqueued_at: self.enqueued_at,
        })
    }
}

#[derive(Clone)]
pub struct QueueJournal {
    database: Database,
}

impl QueueJournal {
    pub fn new(database: Database) -> Self {
        Self { database }
    }

    /// Prepares `message` for the journal (encoding it here, outside any transaction); the
    /// returned entry is written by [`JournalEntry::insert`] inside the write that accepts it.
    pub fn entry(message: &InboundMessage) -> Result<JournalEntry, JournalError> {
        Ok(JournalEntry { encoded: serde_json::to_string(message)?, message: message.clone(), enqueued_at: Utc::now() })
    }

    /// Forgets answered (or deliberately dropped) messages.
    pub async fn remove(&self, ids: &[i64]) -> Result<(), JournalError> {
        if ids.is_empty() {
            return Ok(());
        }
        let ids = ids.to_vec();
        self.database
            .write(move |connection| -> rusqlite::Result<()> {
                let mut delete = connection.prepare_cached("DELETE FROM queued_messages WHERE id = ?")?;
                for id in ids {
                    delete.execute([id])?;
                }
                Ok(())
            })
            .await?;
        Ok(())
    }

    /// Everything still unanswered, oldest first. Rows that no longer decode are logged and
    /// skipped (and left in place for an operator to inspect).
    pub async fn pending(&self) -> Result<Vec<QueuedMessage>, JournalError> {
        let rows: Vec<(i64, String, String, String, i64)> = self.database.read(|connection| {
            connection
                .prepare("SELECT id, session_key, message, prompt, enqueued_at FROM queued_messages ORDER BY id")?
                .query_map([], |row| Ok((row.get(0)?, row.get(1)?, row.get(2)?, row.get(3)?, row.get(4)?)))?
                .collect()
        })?;
        let mut pending = Vec::with_capacity(rows.len());
        for (id, session_key, encoded, prompt, enqueued_at) in rows {
            match serde_json::from_str::<InboundMessage>(&encoded) {
                Ok(message) => pending.push(QueuedMessage {
                    id,
                    session_key,
                    message,
                    prompt,
                    enqueued_at: DateTime::from_timestamp_millis(enqueued_at).unwrap_or_default(),
                }),
                Err(error) => tracing::error!(id, %error, "a queued message does not decode; skipping it"),
            }
        }
        Ok(pending)
    }
}
