//! Pairing on PostgreSQL. A request and an approval each run in one transaction holding a
//! per-channel advisory lock, so replicas (and `ferry pairing approve`) take turns on a
//! channel's codes as SQLite's `BEGIN IMMEDIATE` makes processes do.

use async_trait::async_trait;
use chrono::{DateTime, Utc};
use tokio_postgres::Row;

use super::{PgBackend, pg_error};
use crate::state::StorageError;
use crate::state::pairing::{
    ApprovedSender, CODE_ATTEMPTS, MAX_PENDING_PER_CHANNEL, PairingBackend, PairingError, PairingRequest,
    PendingPairing, generate_code, query,
};

/// [`PairingBackend`] on PostgreSQL.
#[derive(Debug, Clone)]
pub struct PgPairing {
    backend: PgBackend,
}

impl PgPairing {
    pub fn new(backend: PgBackend) -> Self {
        Self { backend }
    }
}

const SELECT_PENDING: &str =
    "SELECT channel, sender_id, sender_name, code, created_at, expires_at FROM pairing_requests";

/// Serializes work on one channel's codes until the transaction ends.
const LOCK_CHANNEL: &str = "SELECT pg_advisory_xact_lock(hashtext('ferry-pairing:' || $1))";

fn failed(action: &'static str) -> impl FnOnce(tokio_postgres::Error) -> PairingError {
    move |error| query(action)(pg_error(error))
}

#[async_trait]
impl PairingBackend for PgPairing {
    async fn is_approved(&self, channel: &str, sender_id: &str) -> Result<bool, StorageError> {
        let client = self.backend.client().await?;
        let statement = client
            .prepare_cached("SELECT EXISTS (SELECT 1 FROM pairing_approved WHERE channel = $1 AND sender_id = $2)")
            .await
            .map_err(pg_error)?;
        Ok(client.query_one(&statement, &[&channel, &sender_id]).await.map_err(pg_error)?.get(0))
    }

    async fn request(&self, wanted: PendingPairing) -> Result<PairingRequest, PairingError> {
        let mut client = self.backend.client().await.map_err(query("starting a pairing request"))?;
        let transaction = client.transaction().await.map_err(failed("starting a pairing request"))?;
        transaction.execute(LOCK_CHANNEL, &[&wanted.channel]).await.map_err(failed("starting a pairing request"))?;
        let created_at = wanted.created_at.timestamp_millis();
        transaction
            .execute(
                "DELETE FROM pairing_requests WHERE channel = $1 AND expires_at <= $2",
                &[&wanted.channel, &created_at],
            )
            .await
            .map_err(failed("removing expired codes"))?;
        let existing = transaction
            .query_opt(
                &format!("{SELECT_PENDING} WHERE channel = $1 AND sender_id = $2"),
                &[&wanted.channel, &wanted.sender_id],
            )
            .await
            .map_err(failed("looking up the sender's code"))?;
        let outcome = if let Some(row) = existing {
            PairingRequest::Existing(pending_from_row(&row))
        } else {
            let pending: i64 = transaction
                .query_one("SELECT COUNT(*) FROM pairing_requests WHERE channel = $1", &[&wanted.channel])
                .await
                .map_err(failed("counting pending codes"))?
                .get(0);
            if pending >= MAX_PENDING_PER_CHANNEL {
                PairingRequest::TooManyPending
            } else {
                let mut fresh = wanted;
                let mut issued = None;
                for _ in 0..CODE_ATTEMPTS {
                    fresh.code = generate_code();
                    let inserted = transaction
                        .execute(
                            "INSERT INTO pairing_requests (channel, sender_id, sender_name, code, created_at, expires_at) \
                             VALUES ($1, $2, $3, $4, $5, $6) ON CONFLICT DO NOTHING",
                            &[
                                &fresh.channel,
                                &fresh.sender_id,
                                &fresh.sender_name,
                                &fresh.code,
                                &fresh.created_at.timestamp_millis(),
                                &fresh.expires_at.timestamp_millis(),
                            ],
                        )
                        .await
                        .map_err(failed("saving a new code"))?;
                    if inserted == 1 {
                        issued = Some(fresh.clone());
                        break;
                    }
                }
                match issued {
                    Some(pending) => PairingRequest::Issued(pending),
                    None => return Err(PairingError::NoFreeCode { channel: fresh.channel }),
                }
            }
        };
        transaction.commit().await.map_err(failed("saving a pairing request"))?;
        Ok(outcome)
    }

    async fn approve(&self, channel: &str, code: &str, now: DateTime<Utc>) -> Result<ApprovedSender, PairingError> {
        let mut client = self.backend.client().await.map_err(query("starting an approval"))?;
        let transaction = client.transaction().await.map_err(failed("starting an approval"))?;
        transaction.execute(LOCK_CHANNEL, &[&channel]).await.map_err(failed("starting an approval"))?;
        let row = transaction
            .query_opt(
                &format!("DELETE FROM pairing_requests WHERE channel = $1 AND code = $2 RETURNING {}", COLUMNS),
                &[&channel, &code],
            )
            .await
            .map_err(failed("looking up the code"))?;
        let Some(row) = row else {
            return Err(PairingError::UnknownCode { channel: channel.to_owned(), code: code.to_owned() });
        };
        let pending = pending_from_row(&row);
        if pending.expires_at <= now {
            transaction.commit().await.map_err(failed("removing an expired code"))?;
            return Err(PairingError::Expired {
                channel: channel.to_owned(),
                code: code.to_owned(),
                expired_at: pending.expires_at,
            });
        }
        transaction
            .execute(
                "INSERT INTO pairing_approved (channel, sender_id, sender_name, approved_at) VALUES ($1, $2, $3, $4) \
                 ON CONFLICT (channel, sender_id) DO UPDATE SET sender_name = excluded.sender_name, \
                 approved_at = excluded.approved_at",
                &[&channel, &pending.sender_id, &pending.sender_name, &now.timestamp_millis()],
            )
            .await
            .map_err(failed("recording the approval"))?;
        transaction.commit().await.map_err(failed("recording the approval"))?;
        Ok(ApprovedSender {
            channel: pending.channel,
            sender_id: pending.sender_id,
            sender_name: pending.sender_name,
            approved_at: now,
        })
    }

    async fn pending(&self, now: DateTime<Utc>) -> Result<Vec<PendingPairing>, StorageError> {
        let client = self.backend.client().await?;
        let rows = client
            .query(
                &format!("{SELECT_PENDING} WHERE expires_at > $1 ORDER BY created_at, channel"),
                &[&now.timestamp_millis()],
            )
            .await
            .map_err(pg_error)?;
        Ok(rows.iter().map(pending_from_row).collect())
    }
}

const COLUMNS: &str = "channel, sender_id, sender_name, code, created_at, expires_at";

fn pending_from_row(row: &Row) -> PendingPairing {
    PendingPairing {
        channel: row.get("channel"),
        sender_id: row.get("sender_id"),
        sender_name: row.get("sender_name"),
        code: row.get("code"),
        created_at: from_millis(row.get("created_at")),
        expires_at: from_millis(row.get("expires_at")),
    }
}

/// A stored time; one out of chrono's range (a damaged row) reads as long ago, i.e. expired.
fn from_millis(millis: i64) -> DateTime<Utc> {
    DateTime::from_timestamp_millis(millis).unwrap_or(DateTime::<Utc>::MIN_UTC)
}
