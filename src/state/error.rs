//! One error type for every storage backend, so the stores' public errors name no driver.
//!
//! Callers decide by [`StorageErrorKind`], not by the driver's error: an unreachable
//! database is retried and reported on `/healthz`, a lost lease stops the run that held it,
//! anything else is a failed operation.

use std::error::Error;

use super::inbound_log::LogError;

/// What kind of failure a storage operation met.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum StorageErrorKind {
    /// The database could not be reached or its connection broke: the same operation may
    /// succeed later.
    Unavailable,
    /// The write was refused because this process no longer holds the lease it was made
    /// under (a newer owner took the session or the ingress).
    Fenced,
    /// Anything else: a constraint, a damaged row, a full disk.
    Failed,
}

/// A storage operation failed. Its text is the backend's own, prefixed with the backend.
#[derive(Debug, thiserror::Error)]
#[error("{backend}: {source}")]
pub struct StorageError {
    kind: StorageErrorKind,
    backend: &'static str,
    #[source]
    source: Box<dyn Error + Send + Sync>,
}

impl StorageError {
    pub fn new(kind: StorageErrorKind, backend: &'static str, source: impl Into<Box<dyn Error + Send + Sync>>) -> Self {
        Self { kind, backend, source: source.into() }
    }

    /// A write refused by the lease fence; `what` says which lease.
    pub fn fenced(backend: &'static str, what: impl Into<String>) -> Self {
        Self::new(StorageErrorKind::Fenced, backend, what.into())
    }

    /// The same error again, for every caller of a failed batch (the source as text).
    pub fn duplicate(&self) -> Self {
        Self::new(self.kind, self.backend, self.source.to_string())
    }

    pub fn kind(&self) -> StorageErrorKind {
        self.kind
    }

    pub fn is_unavailable(&self) -> bool {
        self.kind == StorageErrorKind::Unavailable
    }

    pub fn is_fenced(&self) -> bool {
        self.kind == StorageErrorKind::Fenced
    }
}

impl From<rusqlite::Error> for StorageError {
    fn from(error: rusqlite::Error) -> Self {
        Self::new(StorageErrorKind::Failed, "SQLite", error)
    }
}

impl From<LogError> for StorageError {
    fn from(error: LogError) -> Self {
        // The log's text already names it and its path.
        Self::new(StorageErrorKind::Failed, "state", error)
    }
}
