//! The inbound log: which messages were seen (dedupe) and which accepted messages still
//! wait for their answer (the queue journal), in one append-only file.
//!
//! Every inbound message costs one durable write before the platform is told it arrived,
//! and every run one more when it is answered. In SQLite each of those touched a few random
//! B-tree pages that no other message shared (its dedupe key, its journal row), so even
//! group-committed they cost ~25 KiB of page writes a message and capped the inbound path
//! near 10,000 messages a second (`BENCHMARKS.md`, issue 4). Here a message is one
//! sequential record of a few hundred bytes:
//! - `Accepted` (a message that will run: its identity, session, prompt and the message) or
//!   `Seen` (one that will not: only its identity), and later
//! - `Answered` (the ids of messages whose run finished or that were dropped).
//!
//! Writes are group-committed like the database's: the first append into an empty queue
//! spawns a flush that yields once, then writes everything queued with one `write`, and
//! only then answers the callers. A duplicate is decided inside that flush, against what is
//! already written and what comes earlier in the batch, so two deliveries racing each other
//! cannot both be first, and a message whose write failed is not remembered as seen.
//!
//! What is kept in memory: a 32-byte fingerprint and time per message seen within the
//! dedupe window (`index`), and the ids of unanswered messages. Replay on open rebuilds
//! both; a torn last record (a crash mid-write) is cut off. The file is compacted when it
//! has doubled since the last compaction (and passed 64 MiB), keeping only unanswered
//! messages and sightings still inside the window. Durability: see [`SYNC_INTERVAL`].

mod file;
mod frame;
mod index;

use std::collections::HashSet;
use std::hash::BuildHasherDefault;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};

use tokio::sync::oneshot;

pub use crate::state::inbound::{Accepted, LoggedDelivery, LoggedMessage, MessageKey, SeenKey, Unanswered};
pub use file::{MIN_COMPACT_LEN, SYNC_INTERVAL, SYNC_THREAD};

use file::LogFile;
use index::{Fingerprint, Fingerprinter, PassThrough, SeenIndex};

/// The log's file name inside the state directory.
pub const INBOUND_LOG_FILE_NAME: &str = "inbound.log";

/// Appends written with one `write` at most; the rest go in the next.
const MAX_BATCH: usize = 1024;

/// The write buffer is kept for the next batch up to this size (a batch of large messages
/// does not pin its memory).
const MAX_KEPT_BUFFER: usize = 1 << 20;

#[derive(Debug, thiserror::Error)]
pub enum LogError {
    #[error("inbound log {}: {action} failed: {source}", path.display())]
    Io { path: PathBuf, action: &'static str, source: std::io::Error },
    #[error(
        "inbound log {}: an earlier failed write could not be undone, so no more are taken until ferry restarts",
        path.display()
    )]
    Broken { path: PathBuf },
    #[error("inbound log: the write was abandoned (the process is shutting down)")]
    Abandoned,
}

impl LogError {
    /// The same error again, for every caller of a failed batch.
    fn duplicate(&self) -> Self {
        match self {
            Self::Io { path, action, source } => {
                Self::Io { path: path.clone(), action, source: std::io::Error::new(source.kind(), source.to_string()) }
            }
            Self::Broken { path } => Self::Broken { path: path.clone() },
            Self::Abandoned => Self::Abandoned,
        }
    }
}

/// How well appends were grouped, for benchmarks.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct LogStats {
    pub appends: u64,
    pub writes: u64,
    pub bytes: u64,
}

/// A handle on the inbound log. Cheap to clone.
#[derive(Clone)]
pub struct InboundLog {
    shared: Arc<Shared>,
}

impl std::fmt::Debug for InboundLog {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("InboundLog").field("path", &self.shared.path).finish_non_exhaustive()
    }
}

struct Shared {
    path: PathBuf,
    fingerprints: Fingerprinter,
    /// Taken after `writer` when both are needed.
    index: Mutex<SeenIndex>,
    writer: Arc<Mutex<LogFile>>,
    queue: Mutex<Queue>,
    stats: Mutex<LogStats>,
    /// Test hook: appends that fail as if the disk were full.
    failures_to_inject: AtomicUsize,
}

#[derive(Default)]
struct Queue {
    requests: Vec<Request>,
    /// A flush task exists and will take everything queued.
    flushing: bool,
}

struct Request {
    op: Op,
    reply: oneshot::Sender<Result<Outcome, LogError>>,
}

enum Op {
    /// A sighting, with its frame encoded by the caller (`Accepted` frames get their seq
    /// when written).
    Sighting {
        fingerprint: Fingerprint,
        at: i64,
        cutoff: i64,
        frame: Vec<u8>,
        accepted: bool,
    },
    Answered {
        seqs: Vec<i64>,
    },
    /// A delivery ledger record; with `answered`, the same write also answers `seqs`.
    Delivery {
        seqs: Vec<i64>,
        body: String,
        answered: bool,
    },
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Outcome {
    Duplicate,
    /// Written; an accepted message's seq.
    Recorded(Option<i64>),
}

impl InboundLog {
    /// Opens the log at `path`, replaying it, and starts its sync thread.
    pub fn open(path: &Path) -> Result<Self, LogError> {
        let fingerprints = Fingerprinter::default();
        let replayed = file::open(path, &fingerprints)?;
        let writer = Arc::new(Mutex::new(replayed.file));
        file::spawn_syncer(Arc::downgrade(&writer));
        Ok(Self {
            shared: Arc::new(Shared {
                path: path.to_owned(),
                fingerprints,
                index: Mutex::new(replayed.index),
                writer,
                queue: Mutex::new(Queue::default()),
                stats: Mutex::new(LogStats::default()),
                failures_to_inject: AtomicUsize::new(0),
            }),
        })
    }

    pub fn path(&self) -> &Path {
        &self.shared.path
    }

    /// Whether `key` was recorded as seen after `cutoff` (unix ms). Only what is written
    /// counts: a sighting still on its way to the file is not seen yet.
    pub fn seen(&self, key: &MessageKey<'_>, cutoff: i64) -> bool {
        let fingerprint = self.shared.fingerprints.of(key);
        lock(&self.shared.index).contains(fingerprint, cutoff)
    }

    /// Records a sighting of `key` at `at` for a message that will not run. `false`: it was
    /// already seen after `cutoff` (a redelivery), and nothing was written.
    pub async fn record_seen(&self, key: &MessageKey<'_>, at: i64, cutoff: i64) -> Result<bool, LogError> {
        let mut frame = Vec::with_capacity(64);
        frame::seen(&mut frame, at, key);
        let fingerprint = self.shared.fingerprints.of(key);
        let outcome = self.submit(Op::Sighting { fingerprint, at, cutoff, frame, accepted: false }).await?;
        Ok(outcome != Outcome::Duplicate)
    }

    /// Records a sighting of `key` together with the message it accepts, in one record.
    /// Returns the message's id in the log, or `None` for a redelivery (nothing written).
    pub async fn accept(
        &self,
        key: &MessageKey<'_>,
        at: i64,
        cutoff: i64,
        entry: &Accepted,
    ) -> Result<Option<i64>, LogError> {
        let mut frame = Vec::with_capacity(128 + entry.message.len() + entry.prompt.len());
        frame::accepted(&mut frame, 0, at, key, entry);
        let fingerprint = self.shared.fingerprints.of(key);
        match self.submit(Op::Sighting { fingerprint, at, cutoff, frame, accepted: true }).await? {
            Outcome::Recorded(seq) => Ok(seq),
            Outcome::Duplicate => Ok(None),
        }
    }

    /// Records that the accepted messages `seqs` were answered (or dropped): they will not
    /// run again after a restart.
    pub async fn answered(&self, seqs: &[i64]) -> Result<(), LogError> {
        if seqs.is_empty() {
            return Ok(());
        }
        self.submit(Op::Answered { seqs: seqs.to_vec() }).await.map(|_| ())
    }

    /// Appends a delivery ledger record about the run answering `seqs` (`body` is the
    /// ledger's, not interpreted here). With `answered`, the same write records the
    /// messages as answered: what the record says and their being done cannot be torn
    /// apart by a crash.
    pub async fn record_delivery(&self, seqs: &[i64], body: String, answered: bool) -> Result<(), LogError> {
        self.submit(Op::Delivery { seqs: seqs.to_vec(), body, answered }).await.map(|_| ())
    }

    /// The accepted messages not answered yet, oldest first (read back from the file).
    pub fn pending(&self) -> Result<Vec<LoggedMessage>, LogError> {
        Ok(self.unanswered()?.messages)
    }

    /// What a previous process left unanswered, in one read of the file: the accepted
    /// messages (oldest first) and the delivery records of their replies (in the order
    /// written), for the delivery ledger to recover.
    pub fn unanswered(&self) -> Result<Unanswered, LogError> {
        let log = lock(&self.shared.writer);
        let bytes = log.read_all()?;
        let mut unanswered = Unanswered { messages: Vec::with_capacity(log.pending.len()), deliveries: Vec::new() };
        // The file is whole up to `log.len` (appends are whole or cut back).
        let whole = &bytes[..bytes.len().min(log.len as usize)];
        let scanned = file::scan(whole, |record| match record {
            frame::Record::Accepted { seq, entry, .. } if log.pending.contains(&seq) => {
                unanswered.messages.push(LoggedMessage { seq, entry: entry.to_owned() });
            }
            frame::Record::Delivery { seqs, body } if seqs.iter().any(|seq| log.pending.contains(seq)) => {
                unanswered.deliveries.push(LoggedDelivery { seqs, body: body.to_owned() });
            }
            _ => {}
        });
        if let Err((offset, error)) = scanned {
            tracing::error!(path = %log.path.display(), offset, %error, "the inbound log is damaged past this point");
        }
        unanswered.messages.sort_by_key(|message| message.seq);
        Ok(unanswered)
    }

    /// The keys of the accepted messages not answered yet, by id.
    pub fn pending_keys(&self) -> Result<std::collections::HashMap<i64, SeenKey>, LogError> {
        let log = lock(&self.shared.writer);
        let bytes = log.read_all()?;
        let whole = &bytes[..bytes.len().min(log.len as usize)];
        let mut keys = std::collections::HashMap::new();
        let scanned = file::scan(whole, |record| {
            if let frame::Record::Accepted { seq, key, .. } = record
                && log.pending.contains(&seq)
            {
                keys.insert(seq, SeenKey::from(&key));
            }
        });
        if let Err((offset, error)) = scanned {
            tracing::error!(path = %log.path.display(), offset, %error, "the inbound log is damaged past this point");
        }
        Ok(keys)
    }

    /// Every message key seen after `cutoff` and when it was last seen, read back from the
    /// file: what `ferry state copy` carries to another backend so dedupe survives the move.
    pub fn sightings(&self, cutoff: i64) -> Result<Vec<(SeenKey, i64)>, LogError> {
        let log = lock(&self.shared.writer);
        let bytes = log.read_all()?;
        let whole = &bytes[..bytes.len().min(log.len as usize)];
        let mut latest: std::collections::HashMap<SeenKey, i64> = std::collections::HashMap::new();
        let mut note = |key: &MessageKey<'_>, at: i64| {
            if at > cutoff {
                let owned = SeenKey::from(key);
                let slot = latest.entry(owned).or_insert(at);
                *slot = (*slot).max(at);
            }
        };
        let scanned = file::scan(whole, |record| match record {
            frame::Record::Accepted { seen_at, key, .. } | frame::Record::Seen { seen_at, key } => note(&key, seen_at),
            _ => {}
        });
        if let Err((offset, error)) = scanned {
            tracing::error!(path = %log.path.display(), offset, %error, "the inbound log is damaged past this point");
        }
        let mut sightings: Vec<(SeenKey, i64)> = latest.into_iter().collect();
        sightings.sort_by_key(|(_, at)| *at);
        Ok(sightings)
    }

    /// The id the next accepted message will get: every message with a smaller id was
    /// accepted before now (at start-up: by an earlier process).
    pub fn next_seq(&self) -> i64 {
        lock(&self.shared.writer).next_seq
    }

    /// How many accepted messages wait for their answer.
    pub fn pending_count(&self) -> usize {
        lock(&self.shared.writer).pending.len()
    }

    pub fn stats(&self) -> LogStats {
        *lock(&self.shared.stats)
    }

    /// Makes the next `count` appends fail as a full disk would, for tests of what a
    /// message that cannot be recorded becomes.
    #[doc(hidden)]
    pub fn fail_next_appends(&self, count: usize) {
        self.shared.failures_to_inject.store(count, Ordering::SeqCst);
    }

    /// Forces what was appended to the disk now (the sync thread otherwise does it within
    /// [`SYNC_INTERVAL`]).
    pub fn sync(&self) -> Result<(), LogError> {
        let log = lock(&self.shared.writer);
        log.file.sync_data().map_err(|source| LogError::Io { path: log.path.clone(), action: "syncing", source })
    }

    /// Compacts the log now, whatever its size.
    #[cfg(test)]
    fn compact_now(&self) -> Result<(), LogError> {
        let mut log = lock(&self.shared.writer);
        let index = lock(&self.shared.index);
        let cutoff = log.cutoff;
        log.compact(&index, &self.shared.fingerprints, cutoff)
    }

    async fn submit(&self, op: Op) -> Result<Outcome, LogError> {
        let (reply, answer) = oneshot::channel();
        let spawn_flush = {
            let mut queue = lock(&self.shared.queue);
            queue.requests.push(Request { op, reply });
            !std::mem::replace(&mut queue.flushing, true)
        };
        if spawn_flush {
            tokio::spawn(flush(self.shared.clone()));
        }
        answer.await.unwrap_or(Err(LogError::Abandoned))
    }
}

/// Writes everything queued, batch by batch, until the queue is empty.
async fn flush(shared: Arc<Shared>) {
    // Let every task that is ready this round queue its append first.
    tokio::task::yield_now().await;
    loop {
        let batch = {
            let mut queue = lock(&shared.queue);
            if queue.requests.is_empty() {
                queue.flushing = false;
                return;
            }
            let take = queue.requests.len().min(MAX_BATCH);
            queue.requests.drain(..take).collect::<Vec<_>>()
        };
        shared.commit(batch);
    }
}

/// What a request in a batch is told, once the batch's write is known.
enum Verdict {
    /// Known without the write: a duplicate of something already written.
    Now(Outcome),
    /// Holds if the batch is written; otherwise the write's error.
    IfWritten(Outcome),
}

impl Shared {
    fn commit(&self, batch: Vec<Request>) {
        let mut log = lock(&self.writer);
        // Reused from batch to batch: a fresh buffer of a few hundred KiB per write is a
        // large allocation and free each time.
        let mut buffer = std::mem::take(&mut log.buffer);
        buffer.clear();
        let mut fresh: Vec<(Fingerprint, i64)> = Vec::new();
        let mut fresh_set: HashSet<Fingerprint, BuildHasherDefault<PassThrough>> = HashSet::default();
        let mut accepted = Vec::new();
        let mut answered = Vec::new();
        let mut cutoff = i64::MIN;
        let mut verdicts = Vec::with_capacity(batch.len());
        {
            let index = lock(&self.index);
            for Request { op, reply } in batch {
                let verdict = match op {
                    Op::Sighting { fingerprint, at, cutoff: fresh_after, mut frame, accepted: is_accepted } => {
                        cutoff = cutoff.max(fresh_after);
                        if index.contains(fingerprint, fresh_after) {
                            Verdict::Now(Outcome::Duplicate)
                        } else if !fresh_set.insert(fingerprint) {
                            // Its first sighting is in this batch and shares its fate.
                            Verdict::IfWritten(Outcome::Duplicate)
                        } else {
                            let seq = is_accepted.then(|| {
                                let seq = log.next_seq;
                                log.next_seq += 1;
                                frame::set_seq(&mut frame, seq);
                                accepted.push(seq);
                                seq
                            });
                            buffer.extend_from_slice(&frame);
                            fresh.push((fingerprint, at));
                            Verdict::IfWritten(Outcome::Recorded(seq))
                        }
                    }
                    Op::Answered { seqs } => {
                        frame::answered(&mut buffer, &seqs);
                        answered.extend(seqs);
                        Verdict::IfWritten(Outcome::Recorded(None))
                    }
                    Op::Delivery { seqs, body, answered: done } => {
                        frame::delivery(&mut buffer, &seqs, &body);
                        if done {
                            frame::answered(&mut buffer, &seqs);
                            answered.extend(seqs);
                        }
                        Verdict::IfWritten(Outcome::Recorded(None))
                    }
                };
                verdicts.push((reply, verdict));
            }
        }
        let written = if buffer.is_empty() {
            Ok(())
        } else if self.take_injected_failure() {
            Err(LogError::Io {
                path: log.path.clone(),
                action: "appending to",
                source: std::io::Error::new(std::io::ErrorKind::StorageFull, "injected failure"),
            })
        } else {
            log.append(&buffer)
        };
        if written.is_ok() {
            let mut index = lock(&self.index);
            for (fingerprint, at) in fresh {
                index.insert(fingerprint, at);
            }
            log.cutoff = log.cutoff.max(cutoff);
            let cutoff = log.cutoff;
            index.prune(cutoff);
            log.pending.extend(accepted);
            for seq in &answered {
                log.pending.remove(seq);
            }
            if log.len > log.compact_at
                && let Err(error) = log.compact(&index, &self.fingerprints, cutoff)
            {
                tracing::error!(%error, "compacting the inbound log failed; it keeps growing until a later try");
                log.compact_at = log.len.saturating_mul(2);
            }
        }
        {
            let mut stats = lock(&self.stats);
            stats.appends += verdicts.len() as u64;
            if !buffer.is_empty() {
                stats.writes += 1;
                stats.bytes += buffer.len() as u64;
            }
        }
        if buffer.capacity() <= MAX_KEPT_BUFFER {
            log.buffer = buffer;
        }
        drop(log);
        for (reply, verdict) in verdicts {
            let answer = match (verdict, &written) {
                (Verdict::Now(outcome), _) | (Verdict::IfWritten(outcome), Ok(())) => Ok(outcome),
                (Verdict::IfWritten(_), Err(error)) => Err(error.duplicate()),
            };
            // A caller that stopped waiting does not undo the write.
            let _ = reply.send(answer);
        }
    }

    fn take_injected_failure(&self) -> bool {
        self.failures_to_inject.fetch_update(Ordering::SeqCst, Ordering::SeqCst, |n| n.checked_sub(1)).is_ok()
    }
}

fn lock<T>(mutex: &Mutex<T>) -> MutexGuard<'_, T> {
    mutex.lock().unwrap_or_else(PoisonError::into_inner)
}

#[cfg(test)]
mod tests;
