//! The PostgreSQL state backend (`state.backend = "postgres"`): every store in one database
//! that several `ferry gateway` replicas share. Each store's implementation is a file here,
//! beside its SQLite twin in `state::sqlite` (`sessions`, `inbound`, `pairing`, `health`),
//! plus the session leases only several replicas need (`leases`).
//!
//! Connections come from a pool (deadpool-postgres) of at most `state.pool_size`, each set
//! up so a stuck statement or a dead peer cannot hold it forever: a statement timeout, an
//! idle-in-transaction timeout and TCP keepalives. TLS is rustls (the one TLS stack Ferry
//! has), used when the URL's `sslmode` asks for it (`prefer`, the default, tries it).
//!
//! Statements on the hot path are group-committed ([`batch`]): the writes many tasks make
//! at once go to the server as a few set-based statements in one transaction, so the
//! database sees one round trip per batch, not per message.

mod batch;
mod health;
mod inbound;
mod jobs;
#[cfg(test)]
mod lease_tests;
mod leases;
mod memory;
mod migrations;
mod pairing;
mod sessions;

use std::sync::Arc;
use std::time::Duration;

use deadpool_postgres::{Manager, ManagerConfig, Pool, RecyclingMethod};
use tokio_postgres::error::SqlState;

pub use health::PgHealth;
pub use inbound::PgInbound;
pub use jobs::PgJobs;
pub use leases::PgLeases;
pub use memory::PgMemory;

pub use migrations::{MigrateError, latest_version};
pub use pairing::PgPairing;
pub use sessions::PgSessionStore;

use super::{StorageError, StorageErrorKind};

/// How long a statement may run before the server cancels it. Ferry's statements take
/// milliseconds; one that runs for seconds is stuck behind a lock or a sick server, and
/// failing it lets the caller retry or report.
const STATEMENT_TIMEOUT: Duration = Duration::from_secs(5);

/// A connection idle inside a transaction this long is closed by the server, releasing its
/// locks (a replica frozen mid-transaction must not block the others).
const IDLE_IN_TRANSACTION_TIMEOUT: Duration = Duration::from_secs(10);

/// How long opening a connection may take.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(5);

/// How long a caller waits for a free pooled connection.
const POOL_WAIT: Duration = Duration::from_secs(5);

/// The backend's name in errors.
pub(crate) const BACKEND: &str = "PostgreSQL";

/// Why the PostgreSQL backend could not be opened.
#[derive(Debug, thiserror::Error)]
pub enum PgOpenError {
    #[error("state.postgres_url is not a valid PostgreSQL URL")]
    InvalidUrl,
    #[error("cannot set up the PostgreSQL connection pool: {0}")]
    Pool(String),
    #[error("cannot reach PostgreSQL: {0}")]
    Connect(StorageError),
    #[error("cannot migrate the PostgreSQL schema: {0}")]
    Migrate(#[from] MigrateError),
}

/// A pool of connections to one PostgreSQL database. Cheap to clone.
#[derive(Clone)]
pub struct PgBackend {
    pool: Pool,
    /// For connections outside the pool (`LISTEN`).
    config: Arc<tokio_postgres::Config>,
    /// The leases this replica holds, by which its stores fence their writes.
    book: Arc<leases::LeaseBook>,
}

impl std::fmt::Debug for PgBackend {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // Never the URL: it may hold a password.
        f.debug_struct("PgBackend").field("pool", &self.pool.status()).finish()
    }
}

impl PgBackend {
    /// Builds the pool for `url` and checks that the database answers. Does not migrate:
    /// see [`PgBackend::migrate`].
    pub async fn connect(url: &str, pool_size: usize) -> Result<Self, PgOpenError> {
        let mut config: tokio_postgres::Config = url.parse().map_err(|_| PgOpenError::InvalidUrl)?;
        let options = format!(
            "{} -c statement_timeout={} -c idle_in_transaction_session_timeout={}",
            config.get_options().unwrap_or_default(),
            STATEMENT_TIMEOUT.as_millis(),
            IDLE_IN_TRANSACTION_TIMEOUT.as_millis()
        );
        config
            .options(options.trim_start())
            .application_name("ferry")
            .connect_timeout(CONNECT_TIMEOUT)
            .keepalives(true)
            .keepalives_idle(Duration::from_secs(10))
            .keepalives_interval(Duration::from_secs(5))
            .keepalives_retries(3);
        // rustls needs a process-wide provider; Ferry's is ring (never aws-lc-rs).
        let _ = rustls::crypto::ring::default_provider().install_default();
        let tls = tokio_postgres_rustls::MakeRustlsConnect::with_webpki_roots();
        let manager =
            Manager::from_config(config.clone(), tls, ManagerConfig { recycling_method: RecyclingMethod::Verified });
        let pool = Pool::builder(manager)
            .max_size(pool_size.max(1))
            .wait_timeout(Some(POOL_WAIT))
            .create_timeout(Some(CONNECT_TIMEOUT))
            .recycle_timeout(Some(CONNECT_TIMEOUT))
            .runtime(deadpool_postgres::Runtime::Tokio1)
            .build()
            .map_err(|error| PgOpenError::Pool(error.to_string()))?;
        let backend = Self { pool, config: Arc::new(config), book: Arc::default() };
        drop(backend.client().await.map_err(PgOpenError::Connect)?);
        Ok(backend)
    }

    /// Brings the schema up to date; replicas starting together take turns.
    pub async fn migrate(&self) -> Result<(), PgOpenError> {
        let mut client = self.client().await.map_err(PgOpenError::Connect)?;
        migrations::apply(&mut client).await?;
        Ok(())
    }

    /// The schema version the database has reached (0: never migrated).
    pub async fn schema_version(&self) -> Result<i64, StorageError> {
        let client = self.client().await?;
        migrations::current_version(&client).await.map_err(pg_error)
    }

    /// A connection of its own, outside the pool, and the messages the server sends it
    /// unasked (notifications). The stream ends when the connection does.
    pub(crate) async fn dedicated_connection(
        &self,
    ) -> Result<
        (
            tokio_postgres::Client,
            futures::channel::mpsc::UnboundedReceiver<Result<tokio_postgres::AsyncMessage, tokio_postgres::Error>>,
        ),
        StorageError,
    > {
        let tls = tokio_postgres_rustls::MakeRustlsConnect::with_webpki_roots();
        let (client, mut connection) = self.config.connect(tls).await.map_err(pg_error)?;
        let (sender, receiver) = futures::channel::mpsc::unbounded();
        tokio::spawn(async move {
            let mut messages = futures::stream::poll_fn(move |cx| connection.poll_message(cx));
            while let Some(message) = futures::StreamExt::next(&mut messages).await {
                let end = message.is_err();
                if sender.unbounded_send(message).is_err() || end {
                    break;
                }
            }
        });
        Ok((client, receiver))
    }

    /// The leases this replica holds.
    pub(crate) fn book(&self) -> &leases::LeaseBook {
        &self.book
    }

    /// A pooled connection.
    pub async fn client(&self) -> Result<deadpool_postgres::Client, StorageError> {
        self.pool.get().await.map_err(pool_error)
    }

    /// The stores on this database. Starts their group-commit and pruning tasks.
    pub fn stores(&self) -> (PgSessionStore, Arc<PgInbound>, PgPairing, PgHealth) {
        (
            PgSessionStore::new(self.clone()),
            PgInbound::start(self.clone()),
            PgPairing::new(self.clone()),
            PgHealth::new(self.clone()),
        )
    }

    /// A value from `state_meta`.
    pub async fn meta(&self, key: &str) -> Result<Option<String>, StorageError> {
        let client = self.client().await?;
        let row = client.query_opt("SELECT value FROM state_meta WHERE key = $1", &[&key]).await.map_err(pg_error)?;
        Ok(row.map(|row| row.get(0)))
    }

    /// Closes every pooled connection.
    pub fn close(&self) {
        self.pool.close();
    }
}

/// A driver error as a [`StorageError`]: a broken or refused connection, or a server
/// shutting down, is [`StorageErrorKind::Unavailable`] (retry later); the rest failed.
pub(crate) fn pg_error(error: tokio_postgres::Error) -> StorageError {
    let unavailable = error.is_closed()
        || error.code().is_some_and(|code| {
            code.code().starts_with("08")
                || [
                    SqlState::ADMIN_SHUTDOWN,
                    SqlState::CRASH_SHUTDOWN,
                    SqlState::CANNOT_CONNECT_NOW,
                    SqlState::QUERY_CANCELED,
                    SqlState::IDLE_IN_TRANSACTION_SESSION_TIMEOUT,
                ]
                .contains(code)
        })
        || (error.code().is_none()
            && std::error::Error::source(&error).is_some_and(|source| source.is::<std::io::Error>()));
    let kind = if unavailable { StorageErrorKind::Unavailable } else { StorageErrorKind::Failed };
    StorageError::new(kind, BACKEND, error)
}

/// A pool error: no connection could be had in time, or opening one failed.
pub(crate) fn pool_error(error: deadpool_postgres::PoolError) -> StorageError {
    match error {
        deadpool_postgres::PoolError::Backend(error) => pg_error(error),
        other => StorageError::new(StorageErrorKind::Unavailable, BACKEND, other.to_string()),
    }
}
