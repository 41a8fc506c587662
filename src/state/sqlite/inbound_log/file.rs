//! The log file itself: replay on open, appends, compaction and the background sync.

use std::collections::HashSet;
use std::fs::{File, OpenOptions};
use std::io::Write;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, PoisonError, Weak};
use std::time::Duration;

use super::LogError;
use super::frame::{self, FrameError, MessageKey, Record};
use super::index::{Fingerprinter, SeenIndex};

/// Below this size the log is never compacted: rewriting a few megabytes buys nothing.
pub const MIN_COMPACT_LEN: u64 = 64 << 20;

/// How often appended records are forced to the disk (`fdatasync`) by the sync thread.
/// Appends themselves only reach the OS: a crash of the process loses nothing, a power
/// loss at most this much — the same promise as the SQLite database's WAL with
/// `synchronous = NORMAL`.
pub const SYNC_INTERVAL: Duration = Duration::from_secs(1);

/// Name of the thread that syncs the log, one per open log.
pub const SYNC_THREAD: &str = "ferry-log-sync";

/// The open file and what replay and the appends since know about it.
pub struct LogFile {
    pub path: PathBuf,
    /// Shared with the sync thread, which syncs whichever file is current.
    pub file: Arc<File>,
    pub len: u64,
    /// Accepted messages not yet answered.
    pub pending: HashSet<i64>,
    pub next_seq: i64,
    /// Compact once the file grows past this.
    pub compact_at: u64,
    /// A failed append could not be undone: the file may end in a torn record, so nothing
    /// more is appended until a restart replays (and trims) it.
    pub broken: bool,
    /// Appended since the last sync.
    pub dirty: bool,
    /// The latest dedupe cutoff callers asked with (unix ms): sightings at or before it are
    /// forgotten.
    pub cutoff: i64,
    /// The batch write buffer, kept between batches.
    pub buffer: Vec<u8>,
}

/// What replay found.
pub struct Replayed {
    pub file: LogFile,
    pub index: SeenIndex,
}

/// Opens (creating if needed) the log at `path` and replays it. A torn or damaged tail is
/// cut off with a warning: it is the end of a write that never completed.
pub fn open(path: &Path, fingerprints: &Fingerprinter) -> Result<Replayed, LogError> {
    let io = |action: &'static str| move |source| LogError::Io { path: path.to_owned(), action, source };
    let leftover = compaction_path(path);
    if leftover.exists() {
        // A compaction that did not finish; the log itself is still whole.
        std::fs::remove_file(&leftover).map_err(io("removing an unfinished compaction"))?;
    }
    let bytes = match std::fs::read(path) {
        Ok(bytes) => bytes,
        Err(error) if error.kind() == std::io::ErrorKind::NotFound => Vec::new(),
        Err(error) => return Err(io("reading")(error)),
    };
    let mut index = SeenIndex::default();
    let mut pending = HashSet::new();
    let mut next_seq = 1;
    let whole = scan(&bytes, |record| match record {
        Record::Sequence { next } => next_seq = next_seq.max(next),
        Record::Accepted { seq, seen_at, key, .. } => {
            index.insert(fingerprints.of(&key), seen_at);
            pending.insert(seq);
            next_seq = next_seq.max(seq + 1);
        }
        Record::Seen { seen_at, key } => index.insert(fingerprints.of(&key), seen_at),
        Record::Answered { seqs } => {
            for seq in seqs {
                pending.remove(&seq);
            }
        }
        // Read back by the delivery ledger when it recovers (`InboundLog::deliveries`).
        Record::Delivery { .. } => {}
    });
    let file = OpenOptions::new().create(true).append(true).open(path).map_err(io("opening"))?;
    if let Err((offset, error)) = whole {
        tracing::warn!(
            path = %path.display(),
            offset,
            dropped_bytes = bytes.len() - offset,
            %error,
            "the inbound log ends in an incomplete record (a write cut short); dropping it"
        );
        file.set_len(offset as u64).map_err(io("trimming an incomplete record"))?;
    }
    let len = file.metadata().map_err(io("reading the size of"))?.len();
    Ok(Replayed {
        file: LogFile {
            path: path.to_owned(),
            file: Arc::new(file),
            len,
            pending,
            next_seq,
            compact_at: MIN_COMPACT_LEN.max(2 * len),
            broken: false,
            dirty: false,
            cutoff: i64::MIN,
            buffer: Vec::new(),
        },
        index,
    })
}

/// Calls `each` for every whole record from the start of `bytes`; `Err` gives the offset
/// where the records stop making sense.
pub fn scan<'a>(bytes: &'a [u8], mut each: impl FnMut(Record<'a>)) -> Result<(), (usize, FrameError)> {
    let mut offset = 0;
    while offset < bytes.len() {
        let (record, len) = frame::read(&bytes[offset..]).map_err(|error| (offset, error))?;
        each(record);
        offset += len;
    }
    Ok(())
}

impl LogFile {
    /// Appends `bytes` whole or not at all: a failed write is cut back off.
    pub fn append(&mut self, bytes: &[u8]) -> Result<(), LogError> {
        if self.broken {
            return Err(LogError::Broken { path: self.path.clone() });
        }
        if let Err(source) = (&*self.file).write_all(bytes) {
            if let Err(error) = self.file.set_len(self.len) {
                tracing::error!(path = %self.path.display(), %error, "cannot undo a failed append; the inbound log takes no more writes until a restart");
                self.broken = true;
            }
            return Err(LogError::Io { path: self.path.clone(), action: "appending to", source });
        }
        self.len += bytes.len() as u64;
        self.dirty = true;
        Ok(())
    }

    /// Reads the whole file (for compaction and listing pending messages). Appends wait
    /// meanwhile: the caller holds the log's writer lock.
    pub fn read_all(&self) -> Result<Vec<u8>, LogError> {
        std::fs::read(&self.path).map_err(|source| LogError::Io { path: self.path.clone(), action: "reading", source })
    }

    /// Rewrites the log with only what is still needed: unanswered messages whole, the
    /// delivery records of their replies, and the latest sighting of every message still
    /// inside the dedupe window (`cutoff`). Written beside the log, synced, then renamed over
    /// it, so a crash leaves one whole file.
    pub fn compact(&mut self, index: &SeenIndex, fingerprints: &Fingerprinter, cutoff: i64) -> Result<(), LogError> {
        let io = |action: &'static str| {
            let path = self.path.clone();
            move |source| LogError::Io { path, action, source }
        };
        let bytes = self.read_all()?;
        let mut kept = Vec::with_capacity(bytes.len() / 4);
        frame::sequence(&mut kept, self.next_seq);
        let live = |key: &MessageKey<'_>, at: i64| at > cutoff && index.seen_at(fingerprints.of(key)) == Some(at);
        let scanned = scan(&bytes, |record| match record {
            Record::Accepted { seq, seen_at, key, entry } => {
                if self.pending.contains(&seq) {
                    frame::accepted(&mut kept, seq, seen_at, &key, &entry.to_owned());
                } else if live(&key, seen_at) {
                    frame::seen(&mut kept, seen_at, &key);
                }
            }
            Record::Seen { seen_at, key } if live(&key, seen_at) => frame::seen(&mut kept, seen_at, &key),
            // A reply still being delivered keeps its ledger records.
            Record::Delivery { seqs, body } if seqs.iter().any(|seq| self.pending.contains(seq)) => {
                frame::delivery(&mut kept, &seqs, body)
            }
            Record::Sequence { .. } | Record::Seen { .. } | Record::Answered { .. } | Record::Delivery { .. } => {}
        });
        if let Err((offset, error)) = scanned {
            // Appends are whole or cut back, so this is damage from outside; keep the file.
            tracing::error!(path = %self.path.display(), offset, %error, "the inbound log is damaged; not compacting it");
            self.compact_at = self.len.saturating_mul(2);
            return Ok(());
        }
        let staging = compaction_path(&self.path);
        let mut file = File::create(&staging).map_err(io("writing a compacted copy of"))?;
        file.write_all(&kept).and_then(|()| file.sync_all()).map_err(io("writing a compacted copy of"))?;
        std::fs::rename(&staging, &self.path).map_err(io("replacing with its compacted copy"))?;
        sync_dir(&self.path);
        let file = OpenOptions::new().append(true).open(&self.path).map_err(io("reopening"))?;
        tracing::info!(
            path = %self.path.display(),
            before = self.len,
            after = kept.len(),
            pending = self.pending.len(),
            remembered = index.len(),
            "compacted the inbound log"
        );
        self.file = Arc::new(file);
        self.len = kept.len() as u64;
        self.compact_at = MIN_COMPACT_LEN.max(2 * self.len);
        self.dirty = false;
        Ok(())
    }
}

fn compaction_path(path: &Path) -> PathBuf {
    let mut name = path.file_name().unwrap_or_default().to_owned();
    name.push(".compacting");
    path.with_file_name(name)
}

/// Makes a rename durable. Best effort: some file systems cannot sync a directory.
fn sync_dir(path: &Path) {
    if let Some(dir) = path.parent()
        && let Err(error) = File::open(dir).and_then(|dir| dir.sync_all())
    {
        tracing::debug!(dir = %dir.display(), %error, "cannot sync the state directory");
    }
}

/// Starts the thread that forces appended records to disk every [`SYNC_INTERVAL`], until
/// the log is dropped. It takes the writer lock only to see whether there is anything to
/// sync and which file; the sync itself runs without it, so appends never wait on the disk.
pub fn spawn_syncer(writer: Weak<Mutex<LogFile>>) {
    let spawned = std::thread::Builder::new().name(SYNC_THREAD.to_owned()).spawn(move || {
        loop {
            std::thread::sleep(SYNC_INTERVAL);
            let Some(writer) = writer.upgrade() else { break };
            let due = {
                let mut log = writer.lock().unwrap_or_else(PoisonError::into_inner);
                std::mem::take(&mut log.dirty).then(|| (log.file.clone(), log.path.clone()))
            };
            if let Some((file, path)) = due
                && let Err(error) = file.sync_data()
            {
                tracing::warn!(path = %path.display(), %error, "syncing the inbound log failed; the next sync retries");
                writer.lock().unwrap_or_else(PoisonError::into_inner).dirty = true;
            }
        }
    });
    if let Err(error) = spawned {
        // Without it, records still reach the OS at once and the disk when it flushes.
        tracing::error!(%error, "cannot start the inbound log's sync thread");
    }
}
