//! The database schema, as an ordered list of migrations compiled into the binary.
//!
//! Each later capability (sessions, dedupe, queues, pairing…) appends a file to
//! `migrations/` and a line here. Applied migrations are recorded in the database, so an
//! edited or removed migration is detected rather than silently diverging.

use std::borrow::Cow;

use futures::future::BoxFuture;
use sqlx::error::BoxDynError;
use sqlx::migrate::{Migration, MigrationSource, MigrationType};

/// `(version, description, sql)`, in version order.
const MIGRATIONS: &[(i64, &str, &str)] = &[
    (1, "state meta", include_str!("../../migrations/0001_state_meta.sql")),
    (2, "routing: pairing and inbound dedupe", include_str!("../../migrations/0002_routing.sql")),
    (3, "sessions and queued messages", include_str!("../../migrations/0003_sessions.sql")),
];

/// The migrations above, as sqlx's migrator wants them.
#[derive(Debug, Clone, Copy)]
pub struct EmbeddedMigrations;

impl EmbeddedMigrations {
    /// The newest schema version this build knows.
    pub fn latest_version() -> i64 {
        MIGRATIONS.iter().map(|(version, _, _)| *version).max().unwrap_or(0)
    }

    /// How many migrations this build carries.
    #[cfg(test)]
    pub fn count() -> usize {
        MIGRATIONS.len()
    }
}

impl MigrationSource<'static> for EmbeddedMigrations {
    fn resolve(self) -> BoxFuture<'static, Result<Vec<Migration>, BoxDynError>> {
        Box::pin(async {
            Ok(MIGRATIONS
                .iter()
                .map(|(version, description, sql)| {
                    Migration::new(
                        *version,
                        Cow::Borrowed(*description),
                        MigrationType::Simple,
                        Cow::Borrowed(*sql),
                        false,
                    )
                })
                .collect())
        })
    }
}
