//! Pairing in `ferry.db`. Read-then-write steps run in `BEGIN IMMEDIATE` transactions,
//! which SQLite serializes across processes (the daemon and `ferry pairing approve`).

use async_trait::async_trait;
use chrono::{DateTime, Utc};
use rusqlite::{Connection, OptionalExtension, TransactionBehavior, params};

use super::Database;
use crate::state::StorageError;
use crate::state::pairing::{
    ApprovedSender, CODE_ATTEMPTS, MAX_PENDING_PER_CHANNEL, PairingBackend, PairingError, PairingRequest,
    PendingPairing, generate_code,
};

/// [`PairingBackend`] on the SQLite state database.
#[derive(Debug, Clone)]
pub struct SqlitePairing {
    database: Database,
}

impl SqlitePairing {
    pub fn new(database: Database) -> Self {
        Self { database }
    }
}

#[async_trait]
impl PairingBackend for SqlitePairing {
    async fn is_approved(&self, channel: &str, sender_id: &str) -> Result<bool, StorageError> {
        Ok(self.database.read(|connection| {
            connection
                .prepare_cached("SELECT EXISTS (SELECT 1 FROM pairing_approved WHERE channel = ? AND sender_id = ?)")?
                .query_row([channel, sender_id], |row| row.get(0))
        })?)
    }

    async fn request(&self, wanted: PendingPairing) -> Result<PairingRequest, PairingError> {
        self.database.with_connection(|connection| {
            let transaction = connection
                .transaction_with_behavior(TransactionBehavior::Immediate)
                .map_err(query("starting a pairing request"))?;
            transaction
                .prepare_cached("DELETE FROM pairing_requests WHERE channel = ? AND expires_at <= ?")
                .and_then(|mut delete| delete.execute(params![wanted.channel, wanted.created_at.timestamp_millis()]))
                .map_err(query("removing expired codes"))?;
            let existing = transaction
                .prepare_cached(&format!("{SELECT_PENDING} WHERE channel = ? AND sender_id = ?"))
                .and_then(|mut select| {
                    select.query_row([&wanted.channel, &wanted.sender_id], pending_from_row).optional()
                })
                .map_err(query("looking up the sender's code"))?;
            let outcome = if let Some(pending) = existing {
                PairingRequest::Existing(pending)
            } else if pending_count(&transaction, &wanted.channel)? >= MAX_PENDING_PER_CHANNEL {
                PairingRequest::TooManyPending
            } else {
                PairingRequest::Issued(insert_with_fresh_code(&transaction, wanted)?)
            };
            transaction.commit().map_err(query("saving a pairing request"))?;
            Ok(outcome)
        })
    }

    async fn approve(&self, channel: &str, code: &str, now: DateTime<Utc>) -> Result<ApprovedSender, PairingError> {
        self.database.with_connection(|connection| {
            let transaction = connection
                .transaction_with_behavior(TransactionBehavior::Immediate)
                .map_err(query("starting an approval"))?;
            let pending = transaction
                .prepare_cached(&format!("{SELECT_PENDING} WHERE channel = ? AND code = ?"))
                .and_then(|mut select| select.query_row([channel, code], pending_from_row).optional())
                .map_err(query("looking up the code"))?;
            let Some(pending) = pending else {
                return Err(PairingError::UnknownCode { channel: channel.to_owned(), code: code.to_owned() });
            };
            transaction
                .prepare_cached("DELETE FROM pairing_requests WHERE channel = ? AND code = ?")
                .and_then(|mut delete| delete.execute([channel, code]))
                .map_err(query("removing the used code"))?;
            if pending.expires_at <= now {
                transaction.commit().map_err(query("removing an expired code"))?;
                return Err(PairingError::Expired {
                    channel: channel.to_owned(),
                    code: code.to_owned(),
                    expired_at: pending.expires_at,
                });
            }
            transaction
                .prepare_cached(
                    "INSERT INTO pairing_approved (channel, sender_id, sender_name, approved_at) VALUES (?, ?, ?, ?) \
                     ON CONFLICT (channel, sender_id) DO UPDATE SET sender_name = excluded.sender_name, \
                     approved_at = excluded.approved_at",
                )
                .and_then(|mut insert| {
                    insert.execute(params![channel, pending.sender_id, pending.sender_name, now.timestamp_millis()])
                })
                .map_err(query("recording the approval"))?;
            transaction.commit().map_err(query("recording the approval"))?;
            Ok(ApprovedSender {
                channel: pending.channel,
                sender_id: pending.sender_id,
                sender_name: pending.sender_name,
                approved_at: now,
            })
        })
    }

    async fn pending(&self, now: DateTime<Utc>) -> Result<Vec<PendingPairing>, StorageError> {
        let now = now.timestamp_millis();
        Ok(self.database.with_connection(|connection| {
            connection
                .prepare_cached(&format!("{SELECT_PENDING} WHERE expires_at > ? ORDER BY created_at, channel"))?
                .query_map([now], pending_from_row)?
                .collect::<rusqlite::Result<Vec<_>>>()
        })?)
    }
}

const SELECT_PENDING: &str =
    "SELECT channel, sender_id, sender_name, code, created_at, expires_at FROM pairing_requests";

fn query(action: &'static str) -> impl FnOnce(rusqlite::Error) -> PairingError {
    move |source| crate::state::pairing::query(action)(source.into())
}

fn pending_from_row(row: &rusqlite::Row<'_>) -> rusqlite::Result<PendingPairing> {
    Ok(PendingPairing {
        channel: row.get("channel")?,
        sender_id: row.get("sender_id")?,
        sender_name: row.get("sender_name")?,
        code: row.get("code")?,
        created_at: from_millis(row.get("created_at")?),
        expires_at: from_millis(row.get("expires_at")?),
    })
}

/// A stored time; one out of chrono's range (a damaged row) reads as long ago, i.e. expired.
fn from_millis(millis: i64) -> DateTime<Utc> {
    DateTime::from_timestamp_millis(millis).unwrap_or(DateTime::<Utc>::MIN_UTC)
}

fn pending_count(connection: &Connection, channel: &str) -> Result<i64, PairingError> {
    connection
        .prepare_cached("SELECT COUNT(*) FROM pairing_requests WHERE channel = ?")
        .and_then(|mut count| count.query_row([channel], |row| row.get(0)))
        .map_err(query("counting pending codes"))
}

fn insert_with_fresh_code(
    connection: &Connection,
    mut pending: PendingPairing,
) -> Result<PendingPairing, PairingError> {
    let mut insert = connection
        .prepare_cached(
            "INSERT OR IGNORE INTO pairing_requests \
             (channel, sender_id, sender_name, code, created_at, expires_at) VALUES (?, ?, ?, ?, ?, ?)",
        )
        .map_err(query("saving a new code"))?;
    for _ in 0..CODE_ATTEMPTS {
        pending.code = generate_code();
        let inserted = insert
            .execute(params![
                pending.channel,
                pending.sender_id,
                pending.sender_name,
                pending.code,
                pending.created_at.timestamp_millis(),
                pending.expires_at.timestamp_millis()
            ])
            .map_err(query("saving a new code"))?;
        if inserted == 1 {
            return Ok(pending);
        }
    }
    Err(PairingError::NoFreeCode { channel: pending.channel })
}
