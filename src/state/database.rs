//! The SQLite database in the state directory: opened in WAL mode, migrated on open.

use std::path::{Path, PathBuf};
use std::str::FromStr;
use std::time::Duration;

use chrono::Utc;
use sqlx::migrate::{MigrateError, Migrator};
use sqlx::sqlite::{SqliteConnectOptions, SqliteJournalMode, SqlitePool, SqlitePoolOptions, SqliteSynchronous};

use super::STATE_DIR_VAR;
use super::migrations::EmbeddedMigrations;

/// The database file's name inside the state directory.
pub const DATABASE_FILE_NAME: &str = "ferry.db";

/// How long a statement waits for another connection's write lock before failing. Writes
/// are short; a wait this long means something is stuck, and failing says so.
const BUSY_TIMEOUT: Duration = Duration::from_secs(5);

/// Readers run in parallel under WAL; SQLite still serializes writers.
const MAX_CONNECTIONS: u32 = 4;

/// Why the state could not be opened. Each says which path and what to do.
#[derive(Debug, thiserror::Error)]
pub enum StateError {
    #[error("cannot determine the state directory: set {STATE_DIR_VAR}, state_dir in the config, or HOME")]
    NoStateDir,
    #[error("cannot create state directory {}: {source}", path.display())]
    CreateDir { path: PathBuf, source: std::io::Error },
    #[error("cannot open state database {}: {source}", path.display())]
    Open { path: PathBuf, source: sqlx::Error },
    #[error(
        "state database {} was written by a newer Ferry (schema version {found}, this build knows up to {known}); \
         upgrade ferry or point {STATE_DIR_VAR} at another directory",
        path.display()
    )]
    NewerSchema { path: PathBuf, found: i64, known: i64 },
    #[error("cannot migrate state database {}: {source}", path.display())]
    Migrate { path: PathBuf, source: MigrateError },
    #[error("state database {} failed a query: {source}", path.display())]
    Query { path: PathBuf, source: sqlx::Error },
}

/// A handle on `ferry.db`. Cheap to clone; all clones share one connection pool.
#[derive(Debug, Clone)]
pub struct Database {
    pool: SqlitePool,
    path: PathBuf,
}

impl Database {
    /// Creates the state directory if needed (private to the user), opens the database in
    /// WAL mode and brings its schema up to date.
    pub async fn open(state_dir: &Path) -> Result<Self, StateError> {
        create_private_dir(state_dir)?;
        let path = state_dir.join(DATABASE_FILE_NAME);
        let options = SqliteConnectOptions::from_str("sqlite:")
            .map_err(|source| StateError::Open { path: path.clone(), source })?
            .filename(&path)
            .create_if_missing(true)
            .journal_mode(SqliteJournalMode::Wal)
            // With WAL, NORMAL is durable across application crashes; only a power loss can
            // lose the last commits, and it never corrupts the database.
            .synchronous(SqliteSynchronous::Normal)
            .foreign_keys(true)
            .busy_timeout(BUSY_TIMEOUT);
        let pool = SqlitePoolOptions::new()
            .max_connections(MAX_CONNECTIONS)
            .connect_with(options)
            .await
            .map_err(|source| StateError::Open { path: path.clone(), source })?;
        let database = Self { pool, path };
        database.migrate().await?;
        database.record_open().await?;
        Ok(database)
    }

    /// The connection pool, for the stores built on this database.
    pub fn pool(&self) -> &SqlitePool {
        &self.pool
    }

    pub fn path(&self) -> &Path {
        &self.path
    }

    /// A value from `state_meta` (`created_at`, `last_opened_version`, …).
    pub async fn meta(&self, key: &str) -> Result<Option<String>, StateError> {
        sqlx::query_scalar("SELECT value FROM state_meta WHERE key = ?")
            .bind(key)
            .fetch_optional(&self.pool)
            .await
            .map_err(|source| self.query_error(source))
    }

    /// Waits for queries in flight, then closes every connection (checkpointing the WAL).
    pub async fn close(self) {
        self.pool.close().await;
    }

    async fn migrate(&self) -> Result<(), StateError> {
        let migrator = Migrator::new(EmbeddedMigrations)
            .await
            .map_err(|source| StateError::Migrate { path: self.path.clone(), source })?;
        match migrator.run(&self.pool).await {
            Ok(()) => Ok(()),
            Err(MigrateError::VersionMissing(found)) => Err(StateError::NewerSchema {
                path: self.path.clone(),
                found,
                known: EmbeddedMigrations::latest_version(),
            }),
            Err(source) => Err(StateError::Migrate { path: self.path.clone(), source }),
        }
    }

    async fn record_open(&self) -> Result<(), StateError> {
        let now = Utc::now().to_rfc3339();
        let mut transaction = self.pool.begin().await.map_err(|source| self.query_error(source))?;
        sqlx::query("INSERT OR IGNORE INTO state_meta (key, value) VALUES ('created_at', ?)")
            .bind(&now)
            .execute(&mut *transaction)
            .await
            .map_err(|source| self.query_error(source))?;
        for (key, value) in [("last_opened_at", now.as_str()), ("last_opened_version", env!("CARGO_PKG_VERSION"))] {
            sqlx::query("INSERT INTO state_meta (key, value) VALUES (?, ?) ON CONFLICT(key) DO UPDATE SET value = excluded.value")
                .bind(key)
                .bind(value)
                .execute(&mut *transaction)
                .await
                .map_err(|source| self.query_error(source))?;
        }
        transaction.commit().await.map_err(|source| self.query_error(source))
    }

    fn query_error(&self, source: sqlx::Error) -> StateError {
        StateError::Query { path: self.path.clone(), source }
    }
}

/// Transcripts and tokens live here: only the owner may read it.
fn create_private_dir(dir: &Path) -> Result<(), StateError> {
    let error = |source| StateError::CreateDir { path: dir.to_owned(), source };
    let mut builder = std::fs::DirBuilder::new();
    builder.recursive(true);
    #[cfg(unix)]
    {
        use std::os::unix::fs::DirBuilderExt;
        builder.mode(0o700);
    }
    builder.create(dir).map_err(error)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn opening_creates_the_directory_and_a_wal_database() {
        let root = tempfile::tempdir().unwrap();
        let dir = root.path().join("nested/state");
        let database = Database::open(&dir).await.unwrap();
        assert!(dir.join(DATABASE_FILE_NAME).is_file());
        let mode: String = sqlx::query_scalar("PRAGMA journal_mode").fetch_one(database.pool()).await.unwrap();
        assert_eq!(mode, "wal");
        let foreign_keys: i64 = sqlx::query_scalar("PRAGMA foreign_keys").fetch_one(database.pool()).await.unwrap();
        assert_eq!(foreign_keys, 1);
        #[cfg(unix)]
        {
            use std::os::unix::fs::PermissionsExt;
            let mode = std::fs::metadata(&dir).unwrap().permissions().mode() & 0o777;
            assert_eq!(mode, 0o700);
        }
    }

    #[tokio::test]
    async fn reopening_keeps_data_and_the_creation_time() {
        let dir = tempfile::tempdir().unwrap();
        let first = Database::open(dir.path()).await.unwrap();
        let created = first.meta("created_at").await.unwrap().unwrap();
        first.close().await;

        let second = Database::open(dir.path()).await.unwrap();
        assert_eq!(second.meta("created_at").await.unwrap().unwrap(), created);
        assert_eq!(second.meta("last_opened_version").await.unwrap().unwrap(), env!("CARGO_PKG_VERSION"));
        let applied: i64 =
            sqlx::query_scalar("SELECT COUNT(*) FROM _sqlx_migrations").fetch_one(second.pool()).await.unwrap();
        assert_eq!(applied as usize, EmbeddedMigrations::count());
    }

    #[tokio::test]
    async fn a_database_from_a_newer_ferry_is_refused_with_a_clear_error() {
        let dir = tempfile::tempdir().unwrap();
        let database = Database::open(dir.path()).await.unwrap();
        let future = EmbeddedMigrations::latest_version() + 1;
        sqlx::query(
            "INSERT INTO _sqlx_migrations (version, description, success, checksum, execution_time) \
             VALUES (?, 'from the future', 1, x'00', 0)",
        )
        .bind(future)
        .execute(database.pool())
        .await
        .unwrap();
        database.close().await;

        let error = Database::open(dir.path()).await.unwrap_err();
        assert!(matches!(error, StateError::NewerSchema { found, .. } if found == future), "{error}");
        assert!(error.to_string().contains("newer Ferry"), "{error}");
    }

    #[tokio::test]
    async fn an_unusable_directory_names_the_path() {
        let root = tempfile::tempdir().unwrap();
        let file = root.path().join("not-a-dir");
        std::fs::write(&file, "x").unwrap();
        let error = Database::open(&file.join("state")).await.unwrap_err();
        assert!(matches!(error, StateError::CreateDir { .. }), "{error}");
        assert!(error.to_string().contains("not-a-dir"), "{error}");
    }
}
