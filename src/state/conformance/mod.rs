//! The state backends' conformance suite: every test here runs on SQLite and on PostgreSQL,
//! through the same interfaces the rest of Ferry uses ([`Stores`]). One file per store
//! (`sessions`, `inbound`, `pairing`, `health`, `jobs`, `memory`). Code above `state` that wants its own tests
//! to run on both backends (a session catalog, say) uses [`Harness`] and `conformance!` too.
//!
//! `conformance!(name, …)` turns each `async fn name(harness: &Harness)` of a submodule into
//! two tests, `sqlite::name` and `postgres::name`. The PostgreSQL one takes a fresh database
//! from `tests/postgres/setup`'s server and skips without one (unless
//! `FERRY_REQUIRE_POSTGRES=1`, as in CI).

mod health;
mod inbound;
mod jobs;
mod memory;
mod pairing;
mod sessions;

#[cfg(feature = "postgres")]
use ferry_fakes::TestDatabase;
use tempfile::TempDir;

use super::Stores;
#[cfg(feature = "postgres")]
use super::postgres::PgBackend;
use super::sqlite::Database;

/// One backend's stores, and what reopening them needs.
pub struct Harness {
    pub stores: Stores,
    place: Place,
}

enum Place {
    Sqlite(TempDir),
    #[cfg(feature = "postgres")]
    Postgres(TestDatabase),
}

impl Harness {
    pub async fn sqlite() -> Self {
        let dir = tempfile::tempdir().expect("a temporary directory");
        let database = Database::open(dir.path()).await.expect("open SQLite");
        Self { stores: Stores::sqlite(&database), place: Place::Sqlite(dir) }
    }

    /// `None` (the test skips) without a PostgreSQL to test against.
    #[cfg(feature = "postgres")]
    pub async fn postgres() -> Option<Self> {
        let database = ferry_fakes::test_database().await?;
        let stores = open_postgres(database.url()).await;
        Some(Self { stores, place: Place::Postgres(database) })
    }

    /// The same state, opened again as a restarted process would (the old handles still
    /// work; a test drops them first if it needs the files closed).
    pub async fn reopen(&self) -> Stores {
        match &self.place {
            Place::Sqlite(dir) => Stores::sqlite(&Database::open(dir.path()).await.expect("reopen SQLite")),
            #[cfg(feature = "postgres")]
            Place::Postgres(database) => open_postgres(database.url()).await,
        }
    }
}

#[cfg(feature = "postgres")]
async fn open_postgres(url: &str) -> Stores {
    let backend = PgBackend::connect(url, 4).await.expect("connect to PostgreSQL");
    backend.migrate().await.expect("migrate");
    Stores::postgres(&backend)
}

/// Makes `sqlite::name` and `postgres::name` tests of each `async fn name(&Harness)`.
macro_rules! conformance {
    ($($name:ident),* $(,)?) => {
        mod sqlite {
            $(
                #[tokio::test]
                async fn $name() {
                    let harness = $crate::state::conformance::Harness::sqlite().await;
                    super::$name(&harness).await;
                }
            )*
        }
        #[cfg(feature = "postgres")]
        mod postgres {
            $(
                #[tokio::test]
                async fn $name() {
                    let Some(harness) = $crate::state::conformance::Harness::postgres().await else { return };
                    super::$name(&harness).await;
                }
            )*
        }
    };
}
pub(crate) use conformance;
