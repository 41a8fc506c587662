//! The SQLite backend: the state directory's `ferry.db` (opened in WAL mode, migrated on
//! open) and the append-only inbound log beside it, for one process that owns every session.
//!
//! Each store's implementation is a file here, beside its PostgreSQL twin in
//! `state::postgres`: [`SqliteSessionStore`], [`SqlitePairing`], [`SqliteHealth`], and the
//! inbound store on the [`InboundLog`] (`inbound.rs`). Hot-path writes go through the group
//! commit ([`Database::write`]); lookups read on reader connections ([`Database::read`]).

mod group_commit;
mod health;
mod inbound;
pub mod inbound_log;
mod jobs;
mod legacy;
mod memory;
mod migrations;
mod pairing;
mod sessions;

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError, Weak};
use std::time::Duration;

use chrono::Utc;
use rusqlite::{Connection, OpenFlags, OptionalExtension, params};

pub use group_commit::CommitStats;
use group_commit::{CommitTarget, WriteQueue};
pub use health::SqliteHealth;
use inbound_log::{INBOUND_LOG_FILE_NAME, InboundLog};
pub use jobs::{SqliteJobs, running_seq_expression};
pub use memory::SqliteMemory;
pub use migrations::MigrateError;
pub use pairing::SqlitePairing;
pub use sessions::SqliteSessionStore;

use super::{InboundStore, StateError, StorageError, StorageErrorKind};

impl From<rusqlite::Error> for StorageError {
    fn from(error: rusqlite::Error) -> Self {
        Self::new(StorageErrorKind::Failed, "SQLite", error)
    }
}

/// The database file's name inside the state directory.
pub const DATABASE_FILE_NAME: &str = "ferry.db";

/// How long a statement waits for another process's write lock (a `ferry pairing` command)
/// before failing. Writes are short; a wait this long means something is stuck, and failing
/// says so.
const BUSY_TIMEOUT: Duration = Duration::from_secs(5);

/// Prepared statements kept per connection. The stores use a few dozen distinct statements;
/// re-preparing one costs more than running it.
const STATEMENT_CACHE_CAPACITY: usize = 64;

/// A handle on the state directory: `ferry.db` and the inbound log beside it. Cheap to
/// clone; all clones share one connection and one log.
///
/// SQLite is called in place, on the calling task's thread, under a mutex: a statement
/// takes microseconds, whereas handing each one to a database worker thread (as sqlx does)
/// cost ~100 µs per round trip on a 2-vCPU machine and capped the inbound path at a few
/// hundred messages a second. One connection serializes this process's statements, which
/// SQLite does for writers anyway.
#[derive(Debug, Clone)]
pub struct Database {
    inner: Arc<Inner>,
}

struct Inner {
    connection: Mutex<Connection>,
    /// Read-only connections for [`Database::read`]: WAL readers never wait for the writer.
    readers: Vec<Mutex<Connection>>,
    /// Spreads reads over `readers` when all are busy.
    next_reader: AtomicUsize,
    path: PathBuf,
    writes: WriteQueue,
    inbound: InboundLog,
}

impl std::fmt::Debug for Inner {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Database").field("path", &self.path).finish_non_exhaustive()
    }
}

impl CommitTarget for Inner {
    fn queue(&self) -> &WriteQueue {
        &self.writes
    }

    fn connection(&self) -> MutexGuard<'_, Connection> {
        self.connection.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

impl Database {
    /// Creates the state directory if needed (private to the user), opens the database in
    /// WAL mode and brings its schema up to date.
    ///
    /// `async` for its callers' sake; the work is done in place.
    pub async fn open(state_dir: &Path) -> Result<Self, StateError> {
        create_private_dir(state_dir)?;
        let path = state_dir.join(DATABASE_FILE_NAME);
        let mut connection =
            open_connection(&path).map_err(|source| StateError::Open { path: path.clone(), source: source.into() })?;
        migrations::apply(&mut connection).map_err(|source| match source {
            MigrateError::NewerSchema { found, known } => StateError::NewerSchema { path: path.clone(), found, known },
            source => StateError::Migrate { path: path.clone(), source },
        })?;
        record_open(&mut connection)
            .map_err(|source| StateError::Query { path: path.clone(), source: source.into() })?;
        let inbound = InboundLog::open(&state_dir.join(INBOUND_LOG_FILE_NAME))?;
        legacy::carry_over(&mut connection, &inbound).await.map_err(|source| match source {
            legacy::CarryOverError::Database(source) => StateError::Query { path: path.clone(), source: source.into() },
            legacy::CarryOverError::Log(error) => StateError::InboundLog(error),
        })?;
        let readers = (0..READERS)
            .map(|_| open_reader(&path).map(Mutex::new))
            .collect::<rusqlite::Result<Vec<_>>>()
            .map_err(|source| StateError::Open { path: path.clone(), source: source.into() })?;
        let inner = Arc::new(Inner {
            connection: Mutex::new(connection),
            readers,
            next_reader: AtomicUsize::new(0),
            path: path.clone(),
            writes: WriteQueue::default(),
            inbound,
        });
        spawn_checkpointer(&path, Arc::downgrade(&inner))
            .map_err(|source| StateError::Open { path, source: source.into() })?;
        Ok(Self { inner })
    }

    pub fn path(&self) -> &Path {
        &self.inner.path
    }

    /// The state directory's inbound log: dedupe and the journal of unanswered messages.
    pub fn inbound_log(&self) -> &InboundLog {
        &self.inner.inbound
    }

    /// The inbound log as the stores take it.
    pub fn inbound_store(&self) -> Arc<dyn InboundStore> {
        Arc::new(self.inner.inbound.clone())
    }

    /// Runs `f` on the connection, in place, and returns what it returns. For the stores
    /// built on this database.
    ///
    /// The lock is held only for the duration of `f`, which is synchronous: it is never held
    /// across an `.await`. Keep `f` to SQLite work (microseconds); everything else waits for
    /// it. A transaction opened inside `f` must end inside it (dropping a
    /// `rusqlite::Transaction` rolls back).
    pub fn with_connection<T, E>(&self, f: impl FnOnce(&mut Connection) -> Result<T, E>) -> Result<T, E> {
        // A panic inside `f` unwound through any open transaction, which rolled it back; the
        // connection itself is still sound.
        f(&mut self.inner.connection())
    }

    /// Runs the read-only `f` on one of the reader connections, in place. It sees what was
    /// committed when it starts — every write whose caller was told it succeeded — and does
    /// not wait for a commit in progress. For the hot path's lookups; a statement that
    /// writes fails here (the connections are read-only).
    pub fn read<T, E>(&self, f: impl FnOnce(&Connection) -> Result<T, E>) -> Result<T, E> {
        let readers = &self.inner.readers;
        let free = readers.iter().find_map(|reader| reader.try_lock().ok());
        let reader = free.unwrap_or_else(|| {
            let index = self.inner.next_reader.fetch_add(1, Ordering::Relaxed) % readers.len();
            readers[index].lock().unwrap_or_else(PoisonError::into_inner)
        });
        f(&reader)
    }

    /// Runs the write `op` in the next group commit (the `state::group_commit` module) and
    /// returns its result once the transaction holding it has committed.
    ///
    /// `op` runs inside a transaction shared with other writers, in its own savepoint: if it
    /// returns `Err` (or panics) its changes are rolled back and the others' are not. It
    /// must not begin or end transactions itself. For writes on the hot path — each
    /// inbound message and each run — where one transaction per write would cap throughput.
    pub async fn write<T, E>(&self, op: impl FnOnce(&Connection) -> Result<T, E> + Send + 'static) -> Result<T, E>
    where
        T: Send + 'static,
        E: From<rusqlite::Error> + Send + 'static,
    {
        group_commit::write(&self.inner, op).await
    }

    /// How many writes went through [`Database::write`] and in how many commits.
    pub fn commit_stats(&self) -> CommitStats {
        self.inner.writes.stats()
    }

    /// A value from `state_meta` (`created_at`, `last_opened_version`, …).
    pub async fn meta(&self, key: &str) -> Result<Option<String>, StateError> {
        self.with_connection(|connection| {
            connection
                .prepare_cached("SELECT value FROM state_meta WHERE key = ?")?
                .query_row([key], |row| row.get(0))
                .optional()
        })
        .map_err(|source| StateError::Query { path: self.inner.path.clone(), source: source.into() })
    }

    /// Closes the connection (checkpointing the WAL) if this is the last handle; otherwise
    /// the last clone to be dropped closes it.
    pub async fn close(self) {
        let Ok(inner) = Arc::try_unwrap(self.inner) else { return };
        let connection = inner.connection.into_inner().unwrap_or_else(PoisonError::into_inner);
        if let Err((_, error)) = connection.close() {
            tracing::warn!(path = %inner.path.display(), %error, "closing the state database failed");
        }
    }
}

fn open_connection(path: &Path) -> rusqlite::Result<Connection> {
    let connection = Connection::open(path)?;
    connection.busy_timeout(BUSY_TIMEOUT)?;
    connection.set_prepared_statement_cache_capacity(STATEMENT_CACHE_CAPACITY);
    let mode: String = connection.pragma_update_and_check(None, "journal_mode", "WAL", |row| row.get(0))?;
    if !mode.eq_ignore_ascii_case("wal") {
        tracing::warn!(path = %path.display(), mode, "the state database is not in WAL mode");
    }
    // With WAL, NORMAL is durable across application crashes; only a power loss can lose the
    // last commits, and it never corrupts the database.
    connection.pragma_update(None, "synchronous", "NORMAL")?;
    connection.pragma_update(None, "foreign_keys", true)?;
    // Group commit runs each write in a savepoint; its statement journal stays in memory
    // instead of spilling to a temporary file.
    connection.pragma_update(None, "temp_store", "MEMORY")?;
    // Every run reads its session's transcript and updates its row. With SQLite's default
    // 2 MiB page cache a busy database's pages are read again from the OS for nearly every
    // run (~5% of the inbound benchmark's CPU in `pread`); 16 MiB keeps the hot pages. The
    // cache grows only as pages are read, so a small database stays small in memory.
    connection.pragma_update(None, "cache_size", -16 * 1024)?;
    // Checkpoints run on their own thread (see `spawn_checkpointer`): done inside a commit,
    // one fsyncs the database file and stalls whichever message happened to cross the WAL
    // threshold — a p99 of ~4 ms instead of ~0.5 ms for the inbound path here.
    connection.pragma_update(None, "wal_autocheckpoint", 0)?;
    Ok(connection)
}

/// Reader connections per database: one per core this machine class has; more would only
/// take turns on the same cores.
const READERS: usize = 2;

fn open_reader(path: &Path) -> rusqlite::Result<Connection> {
    let connection = Connection::open_with_flags(
        path,
        OpenFlags::SQLITE_OPEN_READ_ONLY | OpenFlags::SQLITE_OPEN_NO_MUTEX | OpenFlags::SQLITE_OPEN_URI,
    )?;
    connection.busy_timeout(BUSY_TIMEOUT)?;
    connection.set_prepared_statement_cache_capacity(STATEMENT_CACHE_CAPACITY);
    Ok(connection)
}

/// How often the background checkpointer moves WAL frames into the database file.
const CHECKPOINT_INTERVAL: Duration = Duration::from_millis(50);

/// Name of the checkpointer thread, one per open database.
pub(crate) const CHECKPOINT_THREAD: &str = "ferry-wal-ckpt";

/// The WAL file size past which the checkpointer empties it (`TRUNCATE`: it waits for
/// readers and holds new writers back while it finishes). A `PASSIVE` checkpoint copies
/// frames but never shrinks the file, and the WAL only starts over when a write finds no
/// reader on an older snapshot: under steady writes (a `ferry memory import` of thousands of
/// documents) it grew to gigabytes, 160 KB per document, and stayed that size.
const WAL_TRUNCATE_BYTES: u64 = 64 << 20;

/// Starts the thread that checkpoints the WAL with its own connection, `PASSIVE` (it never
/// blocks the main connection's writers), until the last handle on the database is gone.
fn spawn_checkpointer(path: &Path, alive: Weak<Inner>) -> rusqlite::Result<()> {
    let connection = Connection::open(path)?;
    connection.busy_timeout(BUSY_TIMEOUT)?;
    let path = path.to_owned();
    let mut wal = path.clone().into_os_string();
    wal.push("-wal");
    let wal = PathBuf::from(wal);
    let spawned = std::thread::Builder::new().name(CHECKPOINT_THREAD.to_owned()).spawn(move || {
        loop {
            std::thread::sleep(CHECKPOINT_INTERVAL);
            if alive.strong_count() == 0 {
                break;
            }
            let oversized = std::fs::metadata(&wal).is_ok_and(|wal| wal.len() > WAL_TRUNCATE_BYTES);
            let mode = if oversized { "TRUNCATE" } else { "PASSIVE" };
            if let Err(error) = connection.query_row(&format!("PRAGMA wal_checkpoint({mode})"), [], |_| Ok(())) {
                tracing::warn!(path = %path.display(), %error, mode, "a WAL checkpoint failed; the next one retries");
            }
        }
    });
    if let Err(error) = spawned {
        // Without the thread the WAL still works; it only grows until SQLite checkpoints on close.
        tracing::error!(%error, "cannot start the WAL checkpoint thread");
    }
    Ok(())
}

fn record_open(connection: &mut Connection) -> rusqlite::Result<()> {
    let now = Utc::now().to_rfc3339();
    let transaction = connection.transaction()?;
    transaction.execute("INSERT OR IGNORE INTO state_meta (key, value) VALUES ('created_at', ?)", [&now])?;
    for (key, value) in [("last_opened_at", now.as_str()), ("last_opened_version", env!("CARGO_PKG_VERSION"))] {
        transaction.execute(
            "INSERT INTO state_meta (key, value) VALUES (?, ?) ON CONFLICT(key) DO UPDATE SET value = excluded.value",
            params![key, value],
        )?;
    }
    transaction.commit()
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

    fn pragma<T: rusqlite::types::FromSql>(database: &Database, name: &str) -> T {
        database.with_connection(|c| c.query_row(&format!("PRAGMA {name}"), [], |row| row.get(0))).unwrap()
    }

    #[tokio::test]
    async fn the_wal_is_checkpointed_in_the_background_not_in_commits() {
        let dir = tempfile::tempdir().unwrap();
        let database = Database::open(dir.path()).await.unwrap();
        assert_eq!(pragma::<i64>(&database, "wal_autocheckpoint"), 0, "commits never checkpoint");
        let file = dir.path().join(DATABASE_FILE_NAME);
        let before = std::fs::metadata(&file).unwrap().len();
        database
            .with_connection(|c| {
                c.execute_batch("CREATE TABLE blobs (data BLOB)")?;
                c.execute("INSERT INTO blobs (data) VALUES (?)", [vec![7u8; 1 << 20]])
            })
            .unwrap();
        // Only the checkpointer thread can move the blob from the WAL into the file.
        let deadline = std::time::Instant::now() + Duration::from_secs(20);
        while std::fs::metadata(&file).unwrap().len() < before + (1 << 20) {
            assert!(std::time::Instant::now() < deadline, "no background checkpoint happened");
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }

    /// A WAL that outgrew [`WAL_TRUNCATE_BYTES`] while a reader kept an old snapshot (so it
    /// could not start over) is emptied once the reader is done.
    #[tokio::test]
    async fn an_oversized_wal_is_emptied() {
        let dir = tempfile::tempdir().unwrap();
        let database = Database::open(dir.path()).await.unwrap();
        database.with_connection(|c| c.execute_batch("CREATE TABLE blobs (data BLOB)")).unwrap();
        let reader = Connection::open(dir.path().join(DATABASE_FILE_NAME)).unwrap();
        reader.execute_batch("BEGIN; SELECT count(*) FROM blobs;").unwrap();
        let wal = dir.path().join(format!("{DATABASE_FILE_NAME}-wal"));
        let blob = vec![7u8; 1 << 20];
        while std::fs::metadata(&wal).unwrap().len() <= WAL_TRUNCATE_BYTES + (4 << 20) {
            let blob = blob.clone();
            database.write(move |c| c.execute("INSERT INTO blobs (data) VALUES (?)", [blob]).map(drop)).await.unwrap();
        }
        reader.execute_batch("COMMIT").unwrap();
        let deadline = std::time::Instant::now() + Duration::from_secs(20);
        while std::fs::metadata(&wal).unwrap().len() > WAL_TRUNCATE_BYTES {
            assert!(std::time::Instant::now() < deadline, "the WAL was never emptied");
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        let rows: i64 = database.read(|c| c.query_row("SELECT count(*) FROM blobs", [], |row| row.get(0))).unwrap();
        assert!(rows > 64, "nothing was lost: {rows}");
    }

    #[tokio::test]
    async fn opening_creates_the_directory_and_a_wal_database() {
        let root = tempfile::tempdir().unwrap();
        let dir = root.path().join("nested/state");
        let database = Database::open(&dir).await.unwrap();
        assert!(dir.join(DATABASE_FILE_NAME).is_file());
        assert_eq!(pragma::<String>(&database, "journal_mode"), "wal");
        assert_eq!(pragma::<i64>(&database, "foreign_keys"), 1);
        assert_eq!(pragma::<i64>(&database, "synchronous"), 1, "NORMAL");
        assert_eq!(pragma::<i64>(&database, "busy_timeout"), 5000);
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
        assert_eq!(pragma::<i64>(&second, "user_version"), migrations::latest_version());
    }

    #[tokio::test]
    async fn a_database_from_a_newer_ferry_is_refused_with_a_clear_error() {
        let dir = tempfile::tempdir().unwrap();
        let database = Database::open(dir.path()).await.unwrap();
        let future = migrations::latest_version() + 1;
        database.with_connection(|c| c.pragma_update(None, "user_version", future)).unwrap();
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
