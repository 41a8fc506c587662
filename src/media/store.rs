//! Where media lives on this machine: files named by the SHA-256 of their bytes under
//! `<state_dir>/media`, kept for a time-to-live and swept in the background.
//!
//! Content addressing is what makes the rest simple:
//! - a transcript keeps a file's hash, never its bytes (a photo stays a 64-character
//!   reference however often the history is loaded);
//! - a photo sent twice, or downloaded again after a restart, is stored once;
//! - a reply that carries a file records its path in the delivery ledger, and a resumed
//!   delivery uploads exactly the bytes the killed process meant to send: a stored file
//!   never changes.
//!
//! A file's modification time is its last use: storing the same bytes again refreshes it,
//! and the sweeper deletes files unused for longer than the TTL (default 7 days). A
//! reference to a swept file still loads; its reader learns the file is gone
//! ([`MediaStoreError::Missing`]) and shows a note instead.
//!
//! ```
//! # fn demo() -> Result<(), ferry::media::MediaStoreError> {
//! let dir = tempfile::tempdir().unwrap();
//! let store = ferry::media::MediaStore::open(dir.path(), std::time::Duration::from_secs(3600))?;
//! let stored = store.put(b"hello")?;
//! assert_eq!(store.read(&stored.sha256)?, b"hello");
//! # Ok(()) }
//! ```

use std::fs::{self, File, FileTimes};
use std::io::{self, Write};
use std::path::{Path, PathBuf};
use std::time::{Duration, SystemTime};

use sha2::{Digest, Sha256};

/// Temporary files older than this are left from a crash mid-write and are removed.
const STALE_TEMP: Duration = Duration::from_secs(3600);

/// The media directory of one state directory.
#[derive(Debug, Clone)]
pub struct MediaStore {
    root: PathBuf,
    ttl: Duration,
}

/// A file in the store.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StoredMedia {
    /// Lowercase hex SHA-256 of the bytes: the file's name and its reference.
    pub sha256: String,
    pub path: PathBuf,
    pub size_bytes: u64,
}

/// What a sweep removed.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Swept {
    pub files: usize,
    pub bytes: u64,
}

#[derive(Debug, thiserror::Error)]
pub enum MediaStoreError {
    #[error("cannot use the media directory {path}: {source}")]
    Io { path: PathBuf, source: io::Error },
    #[error("the stored file {sha256} is no longer kept (media expires after its time-to-live)")]
    Missing { sha256: String },
    #[error("{0:?} is not a media reference (64 hex digits)")]
    BadReference(String),
}

impl MediaStore {
    /// The store under `root`, created if needed. Files unused for `ttl` are swept.
    pub fn open(root: impl Into<PathBuf>, ttl: Duration) -> Result<Self, MediaStoreError> {
        let root = root.into();
        let temp = root.join("tmp");
        fs::create_dir_all(&temp).map_err(|source| MediaStoreError::Io { path: temp, source })?;
        Ok(Self { root, ttl })
    }

    /// The directory files are stored in.
    pub fn root(&self) -> &Path {
        &self.root
    }

    /// Stores `bytes` and returns their reference. Storing bytes already present refreshes
    /// their time-to-live. Written to a temporary file and renamed into place, so a reader
    /// (or a crash) never sees half a file. Blocking: async callers use a blocking thread.
    pub fn put(&self, bytes: &[u8]) -> Result<StoredMedia, MediaStoreError> {
        let sha256 = hex_digest(bytes);
        let path = self.path_for(&sha256);
        let stored = StoredMedia { sha256, path: path.clone(), size_bytes: bytes.len() as u64 };
        if touch(&path).is_ok() {
            return Ok(stored);
        }
        let io_error = |source| MediaStoreError::Io { path: path.clone(), source };
        if let Some(parent) = path.parent() {
            fs::create_dir_all(parent).map_err(io_error)?;
        }
        let mut temp = tempfile::NamedTempFile::new_in(self.root.join("tmp")).map_err(io_error)?;
        temp.write_all(bytes).map_err(io_error)?;
        temp.as_file().sync_data().map_err(io_error)?;
        temp.persist(&path).map_err(|error| io_error(error.error))?;
        Ok(stored)
    }

    /// Where the file with this reference is (or would be).
    pub fn path_of(&self, sha256: &str) -> Result<PathBuf, MediaStoreError> {
        if !super::is_reference(sha256) {
            return Err(MediaStoreError::BadReference(sha256.chars().take(80).collect()));
        }
        Ok(self.path_for(sha256))
    }

    /// The bytes of a stored file. Blocking.
    pub fn read(&self, sha256: &str) -> Result<Vec<u8>, MediaStoreError> {
        let path = self.path_of(sha256)?;
        fs::read(&path).map_err(|source| match source.kind() {
            io::ErrorKind::NotFound => MediaStoreError::Missing { sha256: sha256.to_owned() },
            _ => MediaStoreError::Io { path, source },
        })
    }

    /// Deletes files unused for longer than the TTL, and temporary files a crash left.
    /// Blocking. A file that cannot be inspected or removed is logged and skipped.
    pub fn sweep(&self, now: SystemTime) -> Swept {
        let mut swept = Swept::default();
        let Ok(shards) = fs::read_dir(&self.root) else { return swept };
        for shard in shards.flatten() {
            let is_temp = shard.file_name() == "tmp";
            let max_age = if is_temp { STALE_TEMP } else { self.ttl };
            let Ok(files) = fs::read_dir(shard.path()) else { continue };
            for file in files.flatten() {
                let Ok(metadata) = file.metadata() else { continue };
                let age = metadata.modified().ok().and_then(|modified| now.duration_since(modified).ok());
                if !metadata.is_file() || age.is_none_or(|age| age <= max_age) {
                    continue;
                }
                match fs::remove_file(file.path()) {
                    Ok(()) => {
                        swept.files += 1;
                        swept.bytes += metadata.len();
                    }
                    Err(error) => tracing::warn!(path = %file.path().display(), %error, "cannot remove expired media"),
                }
            }
            if !is_temp {
                // Empty shard directories go too; a non-empty one refuses, which is fine.
                let _ = fs::remove_dir(shard.path());
            }
        }
        swept
    }

    /// Sweeps now and then every `interval` until `shutdown` is cancelled.
    pub fn spawn_sweeper(
        &self,
        interval: Duration,
        shutdown: tokio_util::sync::CancellationToken,
    ) -> tokio::task::JoinHandle<()> {
        let store = self.clone();
        tokio::spawn(async move {
            loop {
                let sweeping = store.clone();
                match tokio::task::spawn_blocking(move || sweeping.sweep(SystemTime::now())).await {
                    Ok(swept) if swept.files > 0 => {
                        tracing::info!(files = swept.files, bytes = swept.bytes, "expired media removed")
                    }
                    Ok(_) => {}
                    Err(error) => tracing::error!(%error, "the media sweep failed"),
                }
                tokio::select! {
                    () = shutdown.cancelled() => return,
                    () = tokio::time::sleep(interval) => {}
                }
            }
        })
    }

    fn path_for(&self, sha256: &str) -> PathBuf {
        // Two-character shards keep any one directory small.
        self.root.join(&sha256[..2]).join(sha256)
    }
}

/// Lowercase hex SHA-256 of `bytes`.
pub fn hex_digest(bytes: &[u8]) -> String {
    let digest = Sha256::digest(bytes);
    let mut hex = String::with_capacity(64);
    for byte in digest {
        hex.push_str(&format!("{byte:02x}"));
    }
    hex
}

/// Marks an existing file as used now; fails if it does not exist.
fn touch(path: &Path) -> io::Result<()> {
    let file = File::options().append(true).open(path)?;
    file.set_times(FileTimes::new().set_modified(SystemTime::now()))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn store(ttl: Duration) -> (tempfile::TempDir, MediaStore) {
        let dir = tempfile::tempdir().expect("temp dir");
        let store = MediaStore::open(dir.path(), ttl).expect("store");
        (dir, store)
    }

    fn last_used_two_hours_ago(path: &Path) {
        let two_hours_ago = SystemTime::now() - Duration::from_secs(7200);
        File::options()
            .append(true)
            .open(path)
            .and_then(|file| file.set_times(FileTimes::new().set_modified(two_hours_ago)))
            .expect("age the file");
    }

    #[test]
    fn the_same_bytes_are_stored_once_under_their_hash() {
        let (_dir, store) = store(Duration::from_secs(60));
        let first = store.put(b"photo").expect("put");
        let second = store.put(b"photo").expect("put again");
        assert_eq!(first, second);
        assert_eq!(first.sha256, "55c64d0fcd6f9d5f7c828093857e3fdfda68478bb4e9bd24d481ef391c7804e8");
        assert_eq!(first.path, store.root().join("55").join(&first.sha256));
        assert_eq!(store.read(&first.sha256).expect("read"), b"photo");
        assert_eq!(fs::read_dir(store.root().join("tmp")).expect("tmp").count(), 0, "no temporary file left");
    }

    #[test]
    fn references_are_checked_before_they_become_paths() {
        let (_dir, store) = store(Duration::from_secs(60));
        for bad in ["../../etc/passwd", "ABC", &"g".repeat(64), &"A".repeat(64)] {
            assert!(matches!(store.path_of(bad), Err(MediaStoreError::BadReference(_))), "{bad}");
        }
        assert!(matches!(store.read(&"0".repeat(64)), Err(MediaStoreError::Missing { .. })));
    }

    #[test]
    fn a_sweep_removes_only_what_outlived_the_ttl() {
        let (_dir, store) = store(Duration::from_secs(3600));
        let old = store.put(b"old").expect("put");
        let fresh = store.put(b"fresh").expect("put");
        last_used_two_hours_ago(&old.path);
        let swept = store.sweep(SystemTime::now());
        assert_eq!(swept, Swept { files: 1, bytes: 3 });
        assert!(matches!(store.read(&old.sha256), Err(MediaStoreError::Missing { .. })));
        assert_eq!(store.read(&fresh.sha256).expect("kept"), b"fresh");
    }

    #[tokio::test]
    async fn the_sweeper_sweeps_at_once_and_stops_when_told() {
        let (_dir, store) = store(Duration::from_secs(3600));
        let old = store.put(b"old").expect("put");
        last_used_two_hours_ago(&old.path);
        let shutdown = tokio_util::sync::CancellationToken::new();
        let sweeper = store.spawn_sweeper(Duration::from_secs(3600), shutdown.clone());
        let swept = async {
            while old.path.exists() {
                tokio::time::sleep(Duration::from_millis(10)).await;
            }
        };
        tokio::time::timeout(Duration::from_secs(30), swept).await.expect("the first sweep runs at start");
        shutdown.cancel();
        tokio::time::timeout(Duration::from_secs(30), sweeper).await.expect("stops").expect("no panic");
    }

    #[test]
    fn storing_again_refreshes_the_time_to_live() {
        let (_dir, store) = store(Duration::from_secs(3600));
        let stored = store.put(b"again").expect("put");
        last_used_two_hours_ago(&stored.path);
        store.put(b"again").expect("put again");
        assert_eq!(store.sweep(SystemTime::now()), Swept::default());
    }
}
