//! The PostgreSQL schema, as an ordered list of migrations compiled into the binary.
//!
//! Applied versions are rows of `ferry_schema_migrations`. Migrating runs in one
//! transaction under a transaction-level advisory lock: replicas starting together take
//! turns (the second finds nothing left to do), and a failed migration changes nothing. A
//! database migrated by a newer build is refused, as on SQLite.

use chrono::Utc;
use deadpool_postgres::Client;

/// `(version, description, sql)`, in version order, without gaps.
const MIGRATIONS: &[(i64, &str, &str)] = &[
    (1, "every store, as on SQLite at version 6", include_str!("../../../migrations/postgres/0001_init.sql")),
    (2, "session and ingress leases", include_str!("../../../migrations/postgres/0002_leases.sql")),
    (3, "scheduled jobs and their runs", include_str!("../../../migrations/postgres/0003_scheduled_jobs.sql")),
    (4, "long-term memory", include_str!("../../../migrations/postgres/0004_memory.sql")),
    (5, "a revision per memory scope", include_str!("../../../migrations/postgres/0005_memory_revisions.sql")),
];

/// The advisory lock migrations hold (an arbitrary constant: "ferry" in ASCII).
const MIGRATION_LOCK: i64 = 0x0066_6572_7279;

/// Why the schema could not be brought up to date.
#[derive(Debug, thiserror::Error)]
pub enum MigrateError {
    #[error(
        "the database was migrated by a newer Ferry (schema version {found}, this build knows up to {known}); \
         upgrade ferry"
    )]
    NewerSchema { found: i64, known: i64 },
    #[error("migration {version} ({description}) failed: {source}")]
    Apply { version: i64, description: &'static str, source: tokio_postgres::Error },
    #[error("cannot read or record the schema version: {0}")]
    Version(#[from] tokio_postgres::Error),
}

/// The newest schema version this build knows.
pub fn latest_version() -> i64 {
    MIGRATIONS.iter().map(|(version, _, _)| *version).max().unwrap_or(0)
}

/// Applies the migrations the database lacks and records this opening in `state_meta`.
pub(super) async fn apply(client: &mut Client) -> Result<(), MigrateError> {
    let transaction = client.transaction().await?;
    transaction.execute("SELECT pg_advisory_xact_lock($1)", &[&MIGRATION_LOCK]).await?;
    transaction
        .batch_execute(
            "CREATE TABLE IF NOT EXISTS ferry_schema_migrations (
                 version     bigint PRIMARY KEY,
                 description text NOT NULL,
                 applied_at  timestamptz NOT NULL DEFAULT now()
             )",
        )
        .await?;
    let found: i64 =
        transaction.query_one("SELECT COALESCE(MAX(version), 0) FROM ferry_schema_migrations", &[]).await?.get(0);
    let known = latest_version();
    if found > known {
        return Err(MigrateError::NewerSchema { found, known });
    }
    for &(version, description, sql) in MIGRATIONS.iter().filter(|(version, _, _)| *version > found) {
        transaction.batch_execute(sql).await.map_err(|source| MigrateError::Apply { version, description, source })?;
        transaction
            .execute(
                "INSERT INTO ferry_schema_migrations (version, description) VALUES ($1, $2)",
                &[&version, &description],
            )
            .await?;
    }
    let now = Utc::now().to_rfc3339();
    transaction
        .execute("INSERT INTO state_meta (key, value) VALUES ('created_at', $1) ON CONFLICT (key) DO NOTHING", &[&now])
        .await?;
    for (key, value) in [("last_opened_at", now.as_str()), ("last_opened_version", env!("CARGO_PKG_VERSION"))] {
        transaction
            .execute(
                "INSERT INTO state_meta (key, value) VALUES ($1, $2) ON CONFLICT (key) DO UPDATE SET value = excluded.value",
                &[&key, &value],
            )
            .await?;
    }
    transaction.commit().await?;
    Ok(())
}

/// The schema version the database has reached (0: never migrated).
pub(super) async fn current_version(client: &Client) -> Result<i64, tokio_postgres::Error> {
    let exists: bool = client.query_one("SELECT to_regclass('ferry_schema_migrations') IS NOT NULL", &[]).await?.get(0);
    if !exists {
        return Ok(0);
    }
    Ok(client.query_one("SELECT COALESCE(MAX(version), 0) FROM ferry_schema_migrations", &[]).await?.get(0))
}
