//! Errors of the state: [`StorageError`], one type for every storage backend so the stores'
//! public errors name no driver, and [`StateError`], why the state could not be opened.
//!
//! Callers decide by [`StorageErrorKind`], not by the driver's error: an unreachable
//! database is retried and reported on `/healthz`, a lost lease stops the run that held it,
//! anything else is a failed operation.

use std::error::Error;
use std::path::PathBuf;

use super::STATE_DIR_VAR;
use super::sqlite::MigrateError;
use super::sqlite::inbound_log::LogError;

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

/// Why the state could not be opened. Each says which path and what to do.
#[derive(Debug, thiserror::Error)]
pub enum StateError {
    #[error("cannot determine the state directory: set {STATE_DIR_VAR}, state_dir in the config, or HOME")]
    NoStateDir,
    #[error("cannot create state directory {}: {source}", path.display())]
    CreateDir { path: PathBuf, source: std::io::Error },
    #[error("cannot open state database {}: {source}", path.display())]
    Open { path: PathBuf, source: StorageError },
    #[error(
        "state database {} was written by a newer Ferry (schema version {found}, this build knows up to {known}); \
         upgrade ferry or point {STATE_DIR_VAR} at another directory",
        path.display()
    )]
    NewerSchema { path: PathBuf, found: i64, known: i64 },
    #[error("cannot migrate state database {}: {source}", path.display())]
    Migrate { path: PathBuf, source: MigrateError },
    #[error("state database {} failed a query: {source}", path.display())]
    Query { path: PathBuf, source: StorageError },
    #[cfg(feature = "postgres")]
    #[error(transparent)]
    Postgres(#[from] super::postgres::PgOpenError),
    /// A backend this build does not have (a config loaded without `config::features`' check).
    #[error("state.backend = \"{backend}\" needs a ferry built with --features {backend}")]
    NotBuilt { backend: &'static str },
    #[error("cannot open the inbound log: {0}")]
    InboundLog(#[from] LogError),
}
