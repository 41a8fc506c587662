//! Carrying dedupe records and queued messages written by Ferry before the inbound log
//! (schema version 4 and older) over into the log, so an upgrade neither loses an accepted
//! message nor answers a redelivered one.
//!
//! Migration 5 renames the old tables to `legacy_*`; this runs on every open, finds them,
//! appends their rows to the log, syncs it, and only then drops the tables. A crash in
//! between carries the rows over again on the next open: a message already in the log (by
//! its dedupe key) is skipped, so nothing is queued twice.

use rusqlite::{Connection, OptionalExtension};

use super::inbound_log::{InboundLog, LogError};
use crate::state::inbound::{Accepted, MessageKey};

#[derive(Debug, thiserror::Error)]
pub enum CarryOverError {
    #[error(transparent)]
    Database(#[from] rusqlite::Error),
    #[error(transparent)]
    Log(#[from] LogError),
}

/// A queued message's identity, read from its stored `InboundMessage` JSON.
#[derive(serde::Deserialize)]
struct StoredMessage {
    channel: String,
    account_id: String,
    chat: StoredChat,
    thread_id: Option<String>,
    message_id: String,
}

#[derive(serde::Deserialize)]
struct StoredChat {
    id: String,
}

pub async fn carry_over(connection: &mut Connection, log: &InboundLog) -> Result<(), CarryOverError> {
    if !table_exists(connection, "legacy_inbound_seen")? && !table_exists(connection, "legacy_queued_messages")? {
        return Ok(());
    }
    let seen: Vec<(String, String, String, String, String, i64)> = if table_exists(connection, "legacy_inbound_seen")? {
        connection
            .prepare("SELECT channel, account_id, chat_id, thread_id, message_id, seen_at FROM legacy_inbound_seen")?
            .query_map([], |row| Ok((row.get(0)?, row.get(1)?, row.get(2)?, row.get(3)?, row.get(4)?, row.get(5)?)))?
            .collect::<rusqlite::Result<_>>()?
    } else {
        Vec::new()
    };
    let queued: Vec<(String, String, String, i64)> = if table_exists(connection, "legacy_queued_messages")? {
        connection
            .prepare("SELECT session_key, message, prompt, enqueued_at FROM legacy_queued_messages ORDER BY id")?
            .query_map([], |row| Ok((row.get(0)?, row.get(1)?, row.get(2)?, row.get(3)?)))?
            .collect::<rusqlite::Result<_>>()?
    } else {
        Vec::new()
    };
    let mut carried = (0, 0);
    // Queued messages first: each also counts as seen, with its whole message.
    for (session_key, message, prompt, enqueued_at) in queued {
        let Ok(stored) = serde_json::from_str::<StoredMessage>(&message) else {
            tracing::error!(session_key, "an old queued message does not decode; leaving it out");
            continue;
        };
        let thread_id = stored.thread_id.unwrap_or_default();
        let key = MessageKey {
            channel: &stored.channel,
            account_id: &stored.account_id,
            chat_id: &stored.chat.id,
            thread_id: &thread_id,
            message_id: &stored.message_id,
        };
        let entry = Accepted { session_key, prompt, message, enqueued_at };
        // Cutoff `i64::MIN`: anything the log has of this message, however old, means it
        // was carried over before.
        if log.accept(&key, enqueued_at, i64::MIN, &entry).await?.is_some() {
            carried.1 += 1;
        }
    }
    for (channel, account_id, chat_id, thread_id, message_id, seen_at) in &seen {
        let key = MessageKey { channel, account_id, chat_id, thread_id, message_id };
        if log.record_seen(&key, *seen_at, i64::MIN).await? {
            carried.0 += 1;
        }
    }
    let (carried_seen, carried_queued) = carried;
    log.sync()?;
    let transaction = connection.transaction()?;
    transaction
        .execute_batch("DROP TABLE IF EXISTS legacy_inbound_seen; DROP TABLE IF EXISTS legacy_queued_messages;")?;
    transaction.commit()?;
    if carried_seen + carried_queued > 0 {
        tracing::info!(carried_seen, carried_queued, "moved dedupe records and queued messages into the inbound log");
    }
    Ok(())
}

fn table_exists(connection: &Connection, name: &str) -> rusqlite::Result<bool> {
    connection
        .query_row("SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = ?", [name], |_| Ok(()))
        .optional()
        .map(|found| found.is_some())
}

#[cfg(test)]
mod tests {
    use super::super::inbound_log::INBOUND_LOG_FILE_NAME;
    use crate::state::Database;

    /// A state directory as Ferry left it before the inbound log: schema 4, one queued
    /// message and one dedupe record.
    fn old_state(dir: &std::path::Path) {
        let connection = rusqlite::Connection::open(dir.join(crate::state::DATABASE_FILE_NAME)).unwrap();
        for sql in [
            include_str!("../../../migrations/0001_state_meta.sql"),
            include_str!("../../../migrations/0002_routing.sql"),
            include_str!("../../../migrations/0003_sessions.sql"),
            include_str!("../../../migrations/0004_leaner_hot_path.sql"),
        ] {
            connection.execute_batch(sql).unwrap();
        }
        connection.pragma_update(None, "user_version", 4).unwrap();
        let message = serde_json::json!({
            "channel": "telegram", "account_id": "default", "chat": {"kind": "direct", "id": "42"},
            "thread_id": null, "sender": {"id": "42", "is_bot": false}, "message_id": "7", "text": "still there?"
        });
        connection
            .execute(
                "INSERT INTO queued_messages (session_key, message, prompt, enqueued_at) VALUES (?, ?, ?, ?)",
                rusqlite::params!["agent:main:main", message.to_string(), "still there?", 1_750_000_000_000_i64],
            )
            .unwrap();
        connection
            .execute(
                "INSERT INTO inbound_seen VALUES ('slack', 'default', 'C1', '', '1.5', ?)",
                [1_750_000_000_000_i64],
            )
            .unwrap();
    }

    #[tokio::test]
    async fn an_upgrade_carries_queued_messages_and_dedupe_records_into_the_log_once() {
        let dir = tempfile::tempdir().unwrap();
        old_state(dir.path());
        let database = Database::open(dir.path()).await.unwrap();
        let log = database.inbound_log();
        let pending = log.pending().unwrap();
        assert_eq!(pending.len(), 1);
        assert_eq!(pending[0].entry.prompt, "still there?");
        let slack = super::MessageKey {
            channel: "slack",
            account_id: "default",
            chat_id: "C1",
            thread_id: "",
            message_id: "1.5",
        };
        assert!(log.seen(&slack, 1_749_999_999_999));
        let tables: i64 = database
            .with_connection(|c| {
                c.query_row("SELECT COUNT(*) FROM sqlite_master WHERE name LIKE 'legacy_%'", [], |row| row.get(0))
            })
            .unwrap();
        assert_eq!(tables, 0, "the old tables are gone");
        drop(database);

        let reopened = Database::open(dir.path()).await.unwrap();
        assert_eq!(reopened.inbound_log().pending().unwrap().len(), 1, "carried over once");
        assert!(dir.path().join(INBOUND_LOG_FILE_NAME).exists());
    }
}
