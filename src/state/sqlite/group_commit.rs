//! Group commit: many tasks' writes committed in one SQLite transaction.
//!
//! In WAL mode every commit appends a full 4 KiB image of each page it touched, and takes
//! and releases the file locks. When each message is its own transaction, a flood of
//! messages rewrites the same few table and index pages once per message (~69 KiB written
//! per message, measured in `benches/inbound.rs`). Committing the writes that are ready
//! together in one transaction writes each page once per batch instead.
//!
//! A write is queued and its caller waits. The first write into an empty queue spawns a
//! flush task, which yields once so that every task ready to run in this scheduling round
//! can queue its write too, then applies the whole batch in one `BEGIN IMMEDIATE` … `COMMIT`.
//! Each write runs inside its own savepoint: a write that fails (or panics) is rolled back
//! alone, and its caller gets its own error; the others still commit. Callers hear back
//! only after the commit, so "written" still means durable. With one writer there is no
//! one to wait for and the cost is one task spawn and one yield.

use std::any::Any;
use std::panic::{AssertUnwindSafe, catch_unwind};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};

use rusqlite::Connection;
use tokio::sync::oneshot;

/// Writes applied in one transaction at most. Bounds how long the connection is held (and
/// readers wait) by one commit; what is left goes into the next.
const MAX_BATCH: usize = 512;

/// A queued write, type-erased so writes returning different types share one queue.
trait PendingWrite: Send {
    /// Applies the write inside the open batch transaction, in its own savepoint. Returns
    /// what to tell the caller once the batch's fate is known, or `Err` if the savepoint
    /// machinery itself failed and the whole batch must be rolled back.
    fn apply(self: Box<Self>, connection: &Connection) -> Result<Box<dyn Settle>, Box<dyn Settle>>;

    /// The batch could not start: tell the caller why.
    fn abandon(self: Box<Self>, error: &rusqlite::Error);
}

/// Delivers a write's outcome once its batch committed (`Ok`) or did not (`Err`).
trait Settle: Send {
    fn settle(self: Box<Self>, commit: Result<(), &rusqlite::Error>);
}

type Outcome<T, E> = Result<Result<T, E>, Box<dyn Any + Send>>;

struct Write<F, T, E> {
    op: F,
    reply: oneshot::Sender<Outcome<T, E>>,
}

struct Applied<T, E> {
    outcome: Outcome<T, E>,
    reply: oneshot::Sender<Outcome<T, E>>,
}

impl<F, T, E> PendingWrite for Write<F, T, E>
where
    F: FnOnce(&Connection) -> Result<T, E> + Send + 'static,
    T: Send + 'static,
    E: From<rusqlite::Error> + Send + 'static,
{
    fn apply(self: Box<Self>, connection: &Connection) -> Result<Box<dyn Settle>, Box<dyn Settle>> {
        let Write { op, reply } = *self;
        if let Err(error) = run(connection, "SAVEPOINT ferry_write") {
            return Err(Box::new(Applied { outcome: Ok(Err(E::from(error))), reply }));
        }
        let outcome = catch_unwind(AssertUnwindSafe(|| op(connection)));
        let closed = match &outcome {
            Ok(Ok(_)) => run(connection, "RELEASE ferry_write"),
            Ok(Err(_)) | Err(_) => {
                run(connection, "ROLLBACK TO ferry_write").and_then(|()| run(connection, "RELEASE ferry_write"))
            }
        };
        let applied = Box::new(Applied { outcome, reply });
        match closed {
            Ok(()) => Ok(applied),
            Err(error) => {
                tracing::error!(%error, "cannot close a write's savepoint; rolling back its whole batch");
                Err(applied)
            }
        }
    }

    fn abandon(self: Box<Self>, error: &rusqlite::Error) {
        let _ = self.reply.send(Ok(Err(E::from(copy_error(error)))));
    }
}

impl<T, E> Settle for Applied<T, E>
where
    T: Send + 'static,
    E: From<rusqlite::Error> + Send + 'static,
{
    fn settle(self: Box<Self>, commit: Result<(), &rusqlite::Error>) {
        let outcome = match (commit, self.outcome) {
            (Err(error), Ok(Ok(_))) => Ok(Err(E::from(copy_error(error)))),
            // A write that failed on its own reports its own failure either way.
            (_, outcome) => outcome,
        };
        // The caller may have stopped waiting; the write stands regardless.
        let _ = self.reply.send(outcome);
    }
}

/// The writes waiting for the next commit.
#[derive(Default)]
pub(super) struct WriteQueue {
    state: Mutex<QueueState>,
    stats: Mutex<CommitStats>,
}

/// How well writes were grouped: `writes / commits` is the average batch.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct CommitStats {
    /// Writes applied (committed or rolled back).
    pub writes: u64,
    /// Batch transactions committed.
    pub commits: u64,
    /// Time spent applying and committing batches (the connection held).
    pub busy: std::time::Duration,
}

impl WriteQueue {
    pub(super) fn stats(&self) -> CommitStats {
        *self.stats.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

#[derive(Default)]
struct QueueState {
    writes: Vec<Box<dyn PendingWrite>>,
    /// A flush task exists and will take everything queued.
    flushing: bool,
}

/// What the queue needs from the database: a connection to commit on.
pub(super) trait CommitTarget: Send + Sync + 'static {
    fn queue(&self) -> &WriteQueue;
    fn connection(&self) -> MutexGuard<'_, Connection>;
}

/// Queues `op` for the next group commit on `target` and waits for the commit.
///
/// A panic inside `op` is resumed in the caller, after the other writes committed.
pub(super) async fn write<D, F, T, E>(target: &Arc<D>, op: F) -> Result<T, E>
where
    D: CommitTarget,
    F: FnOnce(&Connection) -> Result<T, E> + Send + 'static,
    T: Send + 'static,
    E: From<rusqlite::Error> + Send + 'static,
{
    let (reply, outcome) = oneshot::channel();
    let start_flush = {
        let mut state = target.queue().state.lock().unwrap_or_else(PoisonError::into_inner);
        state.writes.push(Box::new(Write { op, reply }));
        !std::mem::replace(&mut state.flushing, true)
    };
    if start_flush {
        tokio::spawn(flush(target.clone()));
    }
    match outcome.await {
        Ok(Ok(result)) => result,
        Ok(Err(panic)) => std::panic::resume_unwind(panic),
        // The runtime shut down before the flush ran: nothing was written.
        Err(_) => Err(E::from(rusqlite::Error::SqliteFailure(
            rusqlite::ffi::Error::new(rusqlite::ffi::SQLITE_ABORT),
            Some("the database writer stopped before this write was committed".to_owned()),
        ))),
    }
}

/// Commits batches until the queue is empty, yielding between them so that writers woken
/// by one commit can join the next.
async fn flush<D: CommitTarget>(target: Arc<D>) {
    loop {
        tokio::task::yield_now().await;
        let batch = {
            let mut state = target.queue().state.lock().unwrap_or_else(PoisonError::into_inner);
            if state.writes.is_empty() {
                state.flushing = false;
                return;
            }
            let take = state.writes.len().min(MAX_BATCH);
            state.writes.drain(..take).collect::<Vec<_>>()
        };
        let size = batch.len() as u64;
        let started = std::time::Instant::now();
        let committed = commit_batch(&mut target.connection(), batch);
        let busy = started.elapsed();
        let mut stats = target.queue().stats.lock().unwrap_or_else(PoisonError::into_inner);
        stats.writes += size;
        stats.commits += u64::from(committed);
        stats.busy += busy;
    }
}

/// Applies `batch` in one transaction and tells every writer how it ended. Returns whether
/// it committed.
fn commit_batch(connection: &mut Connection, batch: Vec<Box<dyn PendingWrite>>) -> bool {
    if let Err(error) = run(connection, "BEGIN IMMEDIATE") {
        for write in batch {
            write.abandon(&error);
        }
        return false;
    }
    let mut settled = Vec::with_capacity(batch.len());
    let mut broken = false;
    for write in batch {
        if broken {
            // The transaction is being rolled back; do not touch it further.
            write.abandon(&batch_broken());
            continue;
        }
        match write.apply(connection) {
            Ok(applied) => settled.push(applied),
            Err(applied) => {
                settled.push(applied);
                broken = true;
            }
        }
    }
    let commit = if broken { Err(batch_broken()) } else { run(connection, "COMMIT") };
    if commit.is_err()
        && !connection.is_autocommit()
        && let Err(error) = run(connection, "ROLLBACK")
    {
        tracing::error!(%error, "cannot roll back a failed batch");
    }
    for applied in settled {
        applied.settle(commit.as_ref().map(|_| ()));
    }
    commit.is_ok()
}

fn run(connection: &Connection, sql: &str) -> rusqlite::Result<()> {
    connection.prepare_cached(sql)?.execute([]).map(drop)
}

fn batch_broken() -> rusqlite::Error {
    rusqlite::Error::SqliteFailure(
        rusqlite::ffi::Error::new(rusqlite::ffi::SQLITE_ABORT),
        Some("another write in the same batch broke its transaction; nothing was written".to_owned()),
    )
}

/// One commit error told to many writers; `rusqlite::Error` is not `Clone`.
fn copy_error(error: &rusqlite::Error) -> rusqlite::Error {
    match error {
        rusqlite::Error::SqliteFailure(code, message) => rusqlite::Error::SqliteFailure(*code, message.clone()),
        other => rusqlite::Error::SqliteFailure(
            rusqlite::ffi::Error::new(rusqlite::ffi::SQLITE_ERROR),
            Some(other.to_string()),
        ),
    }
}

#[cfg(test)]
mod tests {
    use crate::state::Database;

    async fn database() -> (Database, tempfile::TempDir) {
        let dir = tempfile::tempdir().unwrap();
        let database = Database::open(dir.path()).await.unwrap();
        database.with_connection(|c| c.execute_batch("CREATE TABLE items (name TEXT PRIMARY KEY)")).unwrap();
        (database, dir)
    }

    fn names(database: &Database) -> Vec<String> {
        database
            .with_connection(|c| {
                c.prepare("SELECT name FROM items ORDER BY name")?.query_map([], |r| r.get(0))?.collect()
            })
            .unwrap()
    }

    async fn insert(database: Database, name: &'static str) -> rusqlite::Result<usize> {
        database.write(move |c| c.execute("INSERT INTO items (name) VALUES (?)", [name])).await
    }

    #[tokio::test]
    async fn writes_ready_together_share_one_commit() {
        let (database, _dir) = database().await;
        let tasks: Vec<_> = (0..50)
            .map(|i| tokio::spawn(insert(database.clone(), Box::leak(format!("n{i:02}").into_boxed_str()))))
            .collect();
        for task in tasks {
            assert_eq!(task.await.unwrap().unwrap(), 1);
        }
        assert_eq!(names(&database).len(), 50);
        let stats = database.commit_stats();
        assert_eq!(stats.writes, 50);
        assert!(stats.commits < 5, "50 writes ready at once took {} commits", stats.commits);
    }

    #[tokio::test]
    async fn a_lone_write_commits_without_waiting_for_company() {
        let (database, _dir) = database().await;
        insert(database.clone(), "alone").await.unwrap();
        assert_eq!(names(&database), ["alone"]);
        let stats = database.commit_stats();
        assert_eq!((stats.writes, stats.commits), (1, 1));
    }

    #[tokio::test]
    async fn a_failing_write_is_rolled_back_alone() {
        let (database, _dir) = database().await;
        let failing = database.write(|c| {
            c.execute("INSERT INTO items (name) VALUES ('half-done')", [])?;
            c.execute("INSERT INTO no_such_table VALUES (1)", [])
        });
        let (first, failed, last) =
            tokio::join!(insert(database.clone(), "first"), failing, insert(database.clone(), "last"));
        assert!(first.is_ok() && last.is_ok());
        assert!(failed.unwrap_err().to_string().contains("no_such_table"));
        assert_eq!(names(&database), ["first", "last"], "the failed write's first insert is undone");
        let stats = database.commit_stats();
        assert_eq!((stats.writes, stats.commits), (3, 1));
    }

    #[tokio::test]
    async fn a_panicking_write_panics_its_caller_and_spares_the_others() {
        let (database, _dir) = database().await;
        let panicking = tokio::spawn({
            let database = database.clone();
            async move {
                database
                    .write(|c| -> rusqlite::Result<()> {
                        c.execute("INSERT INTO items (name) VALUES ('doomed')", [])?;
                        panic!("bug in a write");
                    })
                    .await
            }
        });
        let other = tokio::spawn(insert(database.clone(), "survivor"));
        assert!(panicking.await.unwrap_err().is_panic());
        other.await.unwrap().unwrap();
        assert_eq!(names(&database), ["survivor"]);
    }

    #[tokio::test]
    async fn when_the_commit_fails_every_writer_in_the_batch_hears_it() {
        let (database, _dir) = database().await;
        database
            .with_connection(|c| {
                c.execute_batch(
                    "CREATE TABLE parents (id INTEGER PRIMARY KEY); \
                     CREATE TABLE children (parent INTEGER REFERENCES parents (id) DEFERRABLE INITIALLY DEFERRED);",
                )
            })
            .unwrap();
        // Fine at statement time; the deferred foreign key fails the COMMIT.
        let orphan = database.write(|c| c.execute("INSERT INTO children (parent) VALUES (42)", []));
        let (bystander, orphan) = tokio::join!(insert(database.clone(), "bystander"), orphan);
        assert!(orphan.unwrap_err().to_string().contains("FOREIGN KEY"));
        assert!(bystander.unwrap_err().to_string().contains("FOREIGN KEY"), "its batch did not commit");
        assert!(names(&database).is_empty());
        // The connection is usable again.
        insert(database.clone(), "later").await.unwrap();
        assert_eq!(names(&database), ["later"]);
    }
}
