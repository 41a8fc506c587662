//! Every store Ferry keeps across restarts, built on one backend: the handle the daemon and
//! the commands open once and hand to routing, the queue, the ledger and the agents.

use std::path::Path;
use std::sync::Arc;

use super::health::HealthStore;
use super::jobs::JobStore;
use super::leases::{LeaseStore, LeaseTiming};
use super::memory::MemoryStore;
use super::pairing::PairingBackend;
#[cfg(feature = "postgres")]
use super::postgres::{PgBackend, PgJobs, PgLeases, PgMemory};
use super::sessions::SessionStore;
use super::sqlite::{Database, SqliteHealth, SqliteJobs, SqliteMemory, SqlitePairing, SqliteSessionStore};
use super::{InboundStore, StateError};
#[cfg(feature = "postgres")]
use crate::config::Secret;
use crate::config::{Config, StateBackendKind};

/// The stores of one state backend. Cheap to clone: clones share connections.
#[derive(Clone)]
pub struct Stores {
    /// Sessions and transcripts.
    pub sessions: Arc<dyn SessionStore>,
    /// Dedupe, the queue journal and the delivery ledger's records.
    pub inbound: Arc<dyn InboundStore>,
    /// Pending pairing codes and approved senders.
    pub pairing: Arc<dyn PairingBackend>,
    /// Auth profiles' cooldowns.
    pub health: HealthStore,
    /// Scheduled jobs and their runs.
    pub jobs: Arc<dyn JobStore>,
    /// Long-term memory documents, their search index and embeddings.
    pub memory: Arc<dyn MemoryStore>,
    /// Session leases, when several replicas share the state ([`Stores::start_leases`]);
    /// `None` on SQLite, where the one process owns every session.
    pub leases: Option<Arc<dyn LeaseStore>>,
    backend: Backend,
}

impl std::fmt::Debug for Stores {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Stores").field("backend", &self.backend).finish_non_exhaustive()
    }
}

/// What the stores are built on, for what only that backend has.
#[derive(Debug, Clone)]
enum Backend {
    Sqlite(Database),
    #[cfg(feature = "postgres")]
    Postgres(PgBackend),
}

impl Stores {
    /// Opens the backend `[state]` chooses: SQLite in `state_dir`, or PostgreSQL.
    pub async fn open(config: &Config, state_dir: &Path) -> Result<Self, StateError> {
        match config.state.backend {
            StateBackendKind::Sqlite => Ok(Self::sqlite(&Database::open(state_dir).await?)),
            #[cfg(not(feature = "postgres"))]
            StateBackendKind::Postgres => Err(StateError::NotBuilt { backend: "postgres" }),
            #[cfg(feature = "postgres")]
            StateBackendKind::Postgres => {
                let url = config.state.postgres_url.as_ref().map(Secret::expose).unwrap_or_default();
                let backend = PgBackend::connect(url, config.state.pool_size as usize).await?;
                backend.migrate().await?;
                Ok(Self::postgres(&backend))
            }
        }
    }

    /// The stores in a PostgreSQL database (already migrated).
    #[cfg(feature = "postgres")]
    pub fn postgres(backend: &PgBackend) -> Self {
        let (sessions, inbound, pairing, health) = backend.stores();
        Self {
            sessions: Arc::new(sessions),
            inbound,
            pairing: Arc::new(pairing),
            health: Arc::new(health),
            jobs: Arc::new(PgJobs::new(backend.clone())),
            memory: Arc::new(PgMemory::new(backend.clone())),
            leases: None,
            backend: Backend::Postgres(backend.clone()),
        }
    }

    /// The stores in the state directory's SQLite database and inbound log.
    pub fn sqlite(database: &Database) -> Self {
        Self {
            sessions: Arc::new(SqliteSessionStore::new(database.clone())),
            inbound: database.inbound_store(),
            pairing: Arc::new(SqlitePairing::new(database.clone())),
            health: Arc::new(SqliteHealth::new(database.clone())),
            jobs: Arc::new(SqliteJobs::new(database.clone())),
            memory: Arc::new(SqliteMemory::new(database.clone())),
            leases: None,
            backend: Backend::Sqlite(database.clone()),
        }
    }

    /// Runs the stores as one replica of several: session leases timed by `timing`, and
    /// every run's writes fenced by them. Nothing on SQLite.
    pub fn start_leases(&mut self, timing: LeaseTiming) {
        #[cfg(feature = "postgres")]
        if let Backend::Postgres(backend) = &self.backend {
            self.leases = Some(PgLeases::start(backend.clone(), timing));
        }
        #[cfg(not(feature = "postgres"))]
        let _ = timing;
    }

    /// The SQLite database, when that is the backend (its group-commit statistics, tests).
    pub fn sqlite_database(&self) -> Option<&Database> {
        match &self.backend {
            Backend::Sqlite(database) => Some(database),
            #[cfg(feature = "postgres")]
            Backend::Postgres(_) => None,
        }
    }

    /// Closes the backend once the last clone is gone (SQLite checkpoints its WAL).
    pub async fn close(self) {
        let Self { sessions, inbound, pairing, health, jobs, memory, leases, backend } = self;
        drop((sessions, inbound, pairing, health, jobs, memory, leases));
        match backend {
            Backend::Sqlite(database) => database.close().await,
            #[cfg(feature = "postgres")]
            Backend::Postgres(backend) => backend.close(),
        }
    }
}
