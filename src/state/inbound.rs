//! The inbound store: which messages were seen (dedupe), which accepted messages still wait
//! for their answer (the queue journal), and what became of their replies (the delivery
//! ledger's records). Dedupe, the journal and the ledger are its three views.
//!
//! One machine keeps it in the append-only [`InboundLog`] beside `ferry.db`; several
//! replicas keep it in PostgreSQL tables, where the same calls are statements. The contract
//! both keep:
//! - a message's first sighting inside the window is decided and recorded in one step, so two
//!   deliveries racing each other (on one replica or two) cannot both be first;
//! - an accepted message is journaled in that same step, so a crash can never leave it seen
//!   but not queued;
//! - the delivery record that completes a reply marks its messages answered in the same write.

use std::fmt::Debug;

use async_trait::async_trait;

use super::StorageError;
use super::inbound_log::{Accepted, InboundLog, MessageKey, Unanswered};

/// Where inbound messages are recorded. Times are unix milliseconds; `cutoff` is the time at
/// or before which a sighting no longer counts (the end of the dedupe window).
#[async_trait]
pub trait InboundStore: Send + Sync + Debug {
    /// Whether `key` was recorded as seen after `cutoff`. Only what is durable counts.
    async fn seen(&self, key: &MessageKey<'_>, cutoff: i64) -> Result<bool, StorageError>;

    /// Records a sighting of `key` at `at` for a message that will not run. `false`: it was
    /// already seen after `cutoff` (a redelivery), and nothing was written.
    async fn record_seen(&self, key: &MessageKey<'_>, at: i64, cutoff: i64) -> Result<bool, StorageError>;

    /// Records a sighting of `key` and journals the message it accepts, in one write.
    /// Returns the message's id, or `None` for a redelivery (nothing written). Ids grow in
    /// the order messages are accepted.
    async fn accept(
        &self,
        key: &MessageKey<'_>,
        at: i64,
        cutoff: i64,
        entry: &Accepted,
    ) -> Result<Option<i64>, StorageError>;

    /// Records that the accepted messages `ids` were answered (or dropped): they will not
    /// run again after a restart.
    async fn answered(&self, ids: &[i64]) -> Result<(), StorageError>;

    /// Appends a delivery ledger record about the reply to `ids` (`body` is the ledger's).
    /// With `answered`, the same write marks the messages answered.
    async fn record_delivery(&self, ids: &[i64], body: String, answered: bool) -> Result<(), StorageError>;

    /// The accepted messages not answered yet (oldest first) and the delivery records of
    /// their replies (in the order written).
    async fn unanswered(&self) -> Result<Unanswered, StorageError>;

    /// How many accepted messages wait for their answer.
    async fn pending_count(&self) -> Result<usize, StorageError>;

    /// The id the next accepted message will get: every message with a smaller id was
    /// accepted before now.
    async fn next_id(&self) -> Result<i64, StorageError>;
}

#[async_trait]
impl InboundStore for InboundLog {
    async fn seen(&self, key: &MessageKey<'_>, cutoff: i64) -> Result<bool, StorageError> {
        Ok(InboundLog::seen(self, key, cutoff))
    }

    async fn record_seen(&self, key: &MessageKey<'_>, at: i64, cutoff: i64) -> Result<bool, StorageError> {
        Ok(InboundLog::record_seen(self, key, at, cutoff).await?)
    }

    async fn accept(
        &self,
        key: &MessageKey<'_>,
        at: i64,
        cutoff: i64,
        entry: &Accepted,
    ) -> Result<Option<i64>, StorageError> {
        Ok(InboundLog::accept(self, key, at, cutoff, entry).await?)
    }

    async fn answered(&self, ids: &[i64]) -> Result<(), StorageError> {
        Ok(InboundLog::answered(self, ids).await?)
    }

    async fn record_delivery(&self, ids: &[i64], body: String, answered: bool) -> Result<(), StorageError> {
        Ok(InboundLog::record_delivery(self, ids, body, answered).await?)
    }

    async fn unanswered(&self) -> Result<Unanswered, StorageError> {
        Ok(InboundLog::unanswered(self)?)
    }

    async fn pending_count(&self) -> Result<usize, StorageError> {
        Ok(InboundLog::pending_count(self))
    }

    async fn next_id(&self) -> Result<i64, StorageError> {
        Ok(InboundLog::next_seq(self))
    }
}
