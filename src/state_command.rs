//! `ferry state migrate` and `ferry state copy --from sqlite --to postgres`: what an operator
//! runs to upgrade the state schema on purpose, and to move a one-machine install onto the
//! PostgreSQL that several replicas share.

#[cfg(feature = "postgres")]
use anyhow::Context;
use ferry::config::{Environment, StateBackendKind};
use ferry::state::{self, Database};
#[cfg(feature = "postgres")]
use ferry::{
    config::{Config, Secret},
    state::copy,
    state::postgres::{self, PgBackend},
};

use crate::cli::GlobalArgs;
use crate::commands::load_config;

/// Migrates the backend `[state]` chooses and says which schema version it is at.
pub async fn migrate(global: &GlobalArgs, env: &Environment) -> anyhow::Result<()> {
    let loaded = load_config(global, env)?;
    let config = &loaded.config;
    match config.state.backend {
        StateBackendKind::Sqlite => {
            let state_dir = state::resolve_state_dir(config, env)?;
            // Opening migrates.
            let database = Database::open(&state_dir).await?;
            database.close().await;
            println!("SQLite state in {}: schema up to date", state_dir.display());
        }
        // Refused when the config was loaded (`config::features`).
        #[cfg(not(feature = "postgres"))]
        StateBackendKind::Postgres => anyhow::bail!(ferry::state::StateError::NotBuilt { backend: "postgres" }),
        #[cfg(feature = "postgres")]
        StateBackendKind::Postgres => {
            let backend = connect(config).await?;
            let before = backend.schema_version().await.context("reading the schema version")?;
            backend.migrate().await?;
            let after = postgres::latest_version();
            if before == after {
                println!("PostgreSQL: schema already at version {after}");
            } else {
                println!("PostgreSQL: schema migrated from version {before} to {after}");
            }
            backend.close();
        }
    }
    Ok(())
}

/// Copies the state directory's SQLite state into the PostgreSQL of `state.postgres_url`.
#[cfg(feature = "postgres")]
pub async fn copy_sqlite_to_postgres(global: &GlobalArgs, force: bool, env: &Environment) -> anyhow::Result<()> {
    let loaded = load_config(global, env)?;
    let config = &loaded.config;
    let state_dir = state::resolve_state_dir(config, env)?;
    if !state_dir.join(state::DATABASE_FILE_NAME).is_file() {
        anyhow::bail!("no SQLite state to copy in {} (nothing was ever stored there)", state_dir.display());
    }
    let database = Database::open(&state_dir).await?;
    let backend = connect(config).await?;
    backend.migrate().await?;
    let copied = copy::sqlite_to_postgres(&database, &backend, force).await;
    database.close().await;
    backend.close();
    let report = copied?;
    println!("copied {} into PostgreSQL:", state_dir.display());
    for (count, what) in [
        (report.sessions, "sessions"),
        (report.transcript_entries, "transcript entries"),
        (report.pairing_approved, "approved senders"),
        (report.pairing_requests, "pending pairing codes"),
        (report.cooldowns, "auth profile cooldowns"),
        (report.unanswered, "messages waiting for their answer"),
        (report.delivery_records, "delivery records"),
        (report.sightings, "recently seen messages (dedupe)"),
        (report.scheduled_jobs, "scheduled jobs"),
        (report.scheduled_runs, "scheduled runs (history)"),
        (report.memory_documents, "memory documents"),
        (report.memory_chunks, "memory search chunks"),
    ] {
        println!("  {count:>8} {what}");
    }
    if config.state.backend == StateBackendKind::Sqlite {
        println!("set state.backend = \"postgres\" to use it");
    }
    Ok(())
}

/// Without the PostgreSQL driver there is nothing to copy into; says which build has it.
#[cfg(not(feature = "postgres"))]
pub async fn copy_sqlite_to_postgres(_global: &GlobalArgs, _force: bool, _env: &Environment) -> anyhow::Result<()> {
    anyhow::bail!("ferry state copy --to postgres {}", ferry::config::features::needs("postgres"))
}

#[cfg(feature = "postgres")]
async fn connect(config: &Config) -> anyhow::Result<PgBackend> {
    let url = config.state.postgres_url.as_ref().filter(|url| !url.is_blank()).map(Secret::expose).context(
        "no PostgreSQL to use: set state.postgres_url in the config or the FERRY_DATABASE_URL environment variable",
    )?;
    Ok(PgBackend::connect(url, 2).await?)
}
