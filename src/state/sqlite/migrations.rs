//! The database schema, as an ordered list of migrations compiled into the binary.
//!
//! Each later capability (sessions, dedupe, queues, pairing…) appends a file to
//! `migrations/` and a line here. The schema version a database has reached is kept in
//! SQLite's `PRAGMA user_version`; opening applies every newer migration in order, in one
//! transaction, and refuses a database whose version is newer than this build knows.

use rusqlite::{Connection, TransactionBehavior};

/// `(version, description, sql)`, in version order, without gaps.
const MIGRATIONS: &[(i64, &str, &str)] = &[
    (1, "state meta", include_str!("../../../migrations/0001_state_meta.sql")),
    (2, "routing: pairing and inbound dedupe", include_str!("../../../migrations/0002_routing.sql")),
    (3, "sessions and queued messages", include_str!("../../../migrations/0003_sessions.sql")),
    (4, "leaner hot path: sessions keyed by key", include_str!("../../../migrations/0004_leaner_hot_path.sql")),
    (5, "dedupe and queued messages move to the inbound log", include_str!("../../../migrations/0005_inbound_log.sql")),
    (6, "auth profiles' cooldowns", include_str!("../../../migrations/0006_auth_profiles.sql")),
    (7, "scheduled jobs and their runs", include_str!("../../../migrations/0007_scheduled_jobs.sql")),
    (8, "long-term memory", include_str!("../../../migrations/0008_memory.sql")),
    (9, "a fire's journal id on its run", include_str!("../../../migrations/0009_fire_ids_on_runs.sql")),
    (10, "a revision per memory scope", include_str!("../../../migrations/0010_memory_revisions.sql")),
];

/// Why the schema could not be brought up to date.
#[derive(Debug, thiserror::Error)]
pub enum MigrateError {
    /// The database was migrated by a newer build; touching it could lose data.
    #[error("schema version {found} is newer than this build knows ({known})")]
    NewerSchema { found: i64, known: i64 },
    #[error("migration {version} ({description}) failed: {source}")]
    Apply { version: i64, description: &'static str, source: rusqlite::Error },
    #[error("cannot read or record the schema version: {0}")]
    Version(#[from] rusqlite::Error),
}

/// The newest schema version this build knows.
pub fn latest_version() -> i64 {
    MIGRATIONS.iter().map(|(version, _, _)| *version).max().unwrap_or(0)
}

/// Applies the migrations newer than the database's `user_version`, in order, in one
/// `BEGIN IMMEDIATE` transaction: two processes opening the same directory at once take
/// turns, and a failed migration leaves the database as it was.
pub fn apply(connection: &mut Connection) -> Result<(), MigrateError> {
    let transaction = connection.transaction_with_behavior(TransactionBehavior::Immediate)?;
    let found: i64 = transaction.query_row("PRAGMA user_version", [], |row| row.get(0))?;
    let known = latest_version();
    if found > known {
        return Err(MigrateError::NewerSchema { found, known });
    }
    let pending = MIGRATIONS.iter().filter(|(version, _, _)| *version > found);
    for &(version, description, sql) in pending {
        transaction.execute_batch(sql).map_err(|source| MigrateError::Apply { version, description, source })?;
        transaction.pragma_update(None, "user_version", version)?;
    }
    transaction.commit()?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn versions_ascend_from_one_without_gaps() {
        for (index, (version, _, _)) in MIGRATIONS.iter().enumerate() {
            assert_eq!(*version, index as i64 + 1);
        }
    }

    #[test]
    fn applying_twice_is_a_no_op_and_records_the_latest_version() {
        let mut connection = Connection::open_in_memory().unwrap();
        apply(&mut connection).unwrap();
        apply(&mut connection).unwrap();
        let version: i64 = connection.query_row("PRAGMA user_version", [], |row| row.get(0)).unwrap();
        assert_eq!(version, latest_version());
    }

    #[test]
    fn sessions_written_before_version_4_keep_everything() {
        let mut connection = Connection::open_in_memory().unwrap();
        for &(version, _, sql) in &MIGRATIONS[..3] {
            connection.execute_batch(sql).unwrap();
            connection.pragma_update(None, "user_version", version).unwrap();
        }
        connection
            .execute(
                "INSERT INTO sessions (key, session_id, created_at, updated_at, input_tokens, overrides, active_run_id) \
                 VALUES ('agent:main:main', 's1', 1, 2, 30, '{\"queue_mode\":\"followup\"}', 'r1')",
                [],
            )
            .unwrap();
        apply(&mut connection).unwrap();
        let row: (String, i64, i64, String, Option<String>) = connection
            .query_row(
                "SELECT session_id, updated_at, input_tokens, overrides, active_run_id FROM sessions WHERE key = ?",
                ["agent:main:main"],
                |row| Ok((row.get(0)?, row.get(1)?, row.get(2)?, row.get(3)?, row.get(4)?)),
            )
            .unwrap();
        assert_eq!(row, ("s1".into(), 2, 30, r#"{"queue_mode":"followup"}"#.into(), Some("r1".into())));
    }

    #[test]
    fn a_failed_migration_leaves_the_version_unchanged() {
        let mut connection = Connection::open_in_memory().unwrap();
        // Version 1 would create state_meta; a table already in the way makes it fail.
        connection.execute_batch("CREATE TABLE state_meta (x INTEGER)").unwrap();
        let error = apply(&mut connection).unwrap_err();
        assert!(matches!(error, MigrateError::Apply { version: 1, .. }), "{error}");
        let version: i64 = connection.query_row("PRAGMA user_version", [], |row| row.get(0)).unwrap();
        assert_eq!(version, 0);
    }
}
