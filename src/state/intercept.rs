//! An inbound store whose writes go through a hook first, in front of the SQLite inbound
//! log: how tests and benches stand in for a database that is down ([`Outage`]), slow, or
//! holding some writes back, without a database.

use std::sync::atomic::{AtomicU32, Ordering};

use async_trait::async_trait;

use super::{InboundStore, StorageError, StorageErrorKind};
use crate::state::inbound::{Accepted, MessageKey, Unanswered};
use crate::state::sqlite::inbound_log::InboundLog;

/// What runs before each write of an [`Intercepted`] store (`answered` and
/// `record_delivery`); an error is returned in the write's place, and nothing is written.
#[async_trait]
pub trait BeforeWrite: Send + Sync + std::fmt::Debug {
    /// `body`: the delivery record's, `None` for `answered`.
    async fn before_write(&self, body: Option<&str>) -> Result<(), StorageError>;
}

/// [`InboundLog`] behind `hook`: reads and acceptances go straight through, writes after
/// the hook.
#[derive(Debug)]
pub struct Intercepted<H> {
    pub log: InboundLog,
    pub hook: H,
}

/// The next `failures` writes fail with [`StorageErrorKind::Unavailable`] (a database
/// restarting); every write is counted, failed or not.
#[derive(Debug, Default)]
pub struct Outage {
    failures: AtomicU32,
    pub writes: AtomicU32,
}

impl Outage {
    pub fn new(failures: u32) -> Self {
        Self { failures: AtomicU32::new(failures), writes: AtomicU32::new(0) }
    }
}

#[async_trait]
impl BeforeWrite for Outage {
    async fn before_write(&self, _: Option<&str>) -> Result<(), StorageError> {
        self.writes.fetch_add(1, Ordering::SeqCst);
        match self.failures.fetch_update(Ordering::SeqCst, Ordering::SeqCst, |left| left.checked_sub(1)) {
            Ok(_) => Err(StorageError::new(StorageErrorKind::Unavailable, "test", "the database is restarting")),
            Err(_) => Ok(()),
        }
    }
}

#[async_trait]
impl<H: BeforeWrite> InboundStore for Intercepted<H> {
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
        self.hook.before_write(None).await?;
        InboundStore::answered(&self.log, ids).await
    }

    async fn record_delivery(&self, ids: &[i64], body: String, answered: bool) -> Result<(), StorageError> {
        self.hook.before_write(Some(&body)).await?;
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
