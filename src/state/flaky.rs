//! Test support: an inbound store whose writes fail as unreachable a set number of times
//! before they reach the SQLite inbound log behind it, for tests of what rides out an outage.

use std::sync::atomic::{AtomicU32, Ordering};

use async_trait::async_trait;

use super::{InboundStore, StorageError, StorageErrorKind};
use crate::state::inbound::{Accepted, MessageKey, Unanswered};
use crate::state::sqlite::inbound_log::InboundLog;

/// [`InboundLog`] behind an outage: the next `failures` calls of `answered` and
/// `record_delivery` fail with [`StorageErrorKind::Unavailable`]; everything else, and every
/// call after those, goes through.
#[derive(Debug)]
pub(crate) struct FlakyInbound {
    log: InboundLog,
    failures: AtomicU32,
    /// Calls of `answered` and `record_delivery`, failed or not.
    pub(crate) writes: AtomicU32,
}

impl FlakyInbound {
    pub(crate) fn new(log: InboundLog, failures: u32) -> Self {
        Self { log, failures: AtomicU32::new(failures), writes: AtomicU32::new(0) }
    }

    fn outage(&self) -> Result<(), StorageError> {
        self.writes.fetch_add(1, Ordering::SeqCst);
        match self.failures.fetch_update(Ordering::SeqCst, Ordering::SeqCst, |left| left.checked_sub(1)) {
            Ok(_) => Err(StorageError::new(StorageErrorKind::Unavailable, "test", "the database is restarting")),
            Err(_) => Ok(()),
        }
    }
}

#[async_trait]
impl InboundStore for FlakyInbound {
    async fn seen(&self, key: &MessageKey<'_>, cutoff: i64) -> Result<bool, StorageError> {
        InboundStore::seen(&self.log, key, cutoff).await
    }

    async fn record_seen(&self, key: &MessageKey<'_>, at: i64, cutoff: i64) -> Result<bool, StorageError> {
        InboundStore::record_seen(&self.log, key, at, cutoff).await
    }

    async fn accept(
        &self,
        key: &MessageKey<'_>,
        at: i64,
        cutoff: i64,
        entry: &Accepted,
    ) -> Result<Option<i64>, StorageError> {
        InboundStore::accept(&self.log, key, at, cutoff, entry).await
    }

    async fn answered(&self, ids: &[i64]) -> Result<(), StorageError> {
        self.outage()?;
        InboundStore::answered(&self.log, ids).await
    }

    async fn record_delivery(&self, ids: &[i64], body: String, answered: bool) -> Result<(), StorageError> {
        self.outage()?;
        InboundStore::record_delivery(&self.log, ids, body, answered).await
    }

    async fn unanswered(&self) -> Result<Unanswered, StorageError> {
        InboundStore::unanswered(&self.log).await
    }

    async fn pending_count(&self) -> Result<usize, StorageError> {
        InboundStore::pending_count(&self.log).await
    }

    async fn next_id(&self) -> Result<i64, StorageError> {
        InboundStore::next_id(&self.log).await
    }
}
