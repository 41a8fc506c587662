//! [`InboundStore`] on one machine: the append-only inbound log beside `ferry.db`
//! ([`InboundLog`]), whose group-committed appends carry the inbound path (see its module doc
//! for why it is a log and not SQLite tables).

use async_trait::async_trait;

use super::inbound_log::{InboundLog, LogError};
use crate::state::StorageError;
use crate::state::inbound::{Accepted, InboundStore, MessageKey, Unanswered};

impl From<LogError> for StorageError {
    fn from(error: LogError) -> Self {
        // The log's text already names it and its path.
        Self::new(crate::state::StorageErrorKind::Failed, "state", error)
    }
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
