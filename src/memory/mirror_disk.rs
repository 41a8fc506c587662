//! The file side of the memory mirror (`super::mirror`): which files are there and whether
//! they changed (size and mtime, [`Stamp`]), reading one as a document's text, and the
//! writes that must never leave half a file or overwrite an edit they did not see.

use std::collections::BTreeMap;
use std::io::{self, Read, Write};
use std::path::{Path, PathBuf};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use rustix::fs::{Mode, OFlags, ResolveFlags};
use rustix::io::Errno;
use serde::{Deserialize, Serialize};

use super::paths::{self, LONG_TERM};

/// Where a file's text goes when the store won a conflict (outside `memory/`: never read back).
pub const CONFLICTS_DIR: &str = ".memory-conflicts";
/// A file modified this recently may change again within its mtime's granularity (2 s on
/// FAT) keeping its size: its size and mtime are not trusted to mean "unchanged" until then.
const RACY: Duration = Duration::from_secs(2);
/// The folder of dated and named notes.
pub(super) const NOTES: &str = "memory";

/// A file's size and modification time: equal to the ones last mirrored, it is not read.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub(super) struct Stamp {
    pub(super) size: u64,
    pub(super) mtime_ns: u64,
}

impl Stamp {
    pub(super) fn of(meta: &std::fs::Metadata) -> Self {
        let since_epoch = meta.modified().ok().and_then(|at| at.duration_since(UNIX_EPOCH).ok());
        Self { size: meta.len(), mtime_ns: since_epoch.map_or(0, nanos) }
    }

    /// The stamp, if old enough to vouch for the content ([`RACY`]).
    pub(super) fn trusted(self) -> Option<Self> {
        let now = SystemTime::now().duration_since(UNIX_EPOCH).map_or(0, nanos);
        (self.mtime_ns > 0 && self.mtime_ns.saturating_add(nanos(RACY)) <= now).then_some(self)
    }
}

fn nanos(duration: Duration) -> u64 {
    u64::try_from(duration.as_nanos()).unwrap_or(u64::MAX)
}

/// A path left alone this round, and why (warned about once until it changes).
pub(super) struct Skip {
    pub(super) why: String,
    pub(super) stamp: Option<Stamp>,
}

/// Runs file work on a blocking thread, so a slow disk holds up no other task.
pub(super) async fn on_disk<T: Send + 'static>(work: impl FnOnce() -> io::Result<T> + Send + 'static) -> io::Result<T> {
    tokio::task::spawn_blocking(work).await.unwrap_or_else(|error| Err(io::Error::other(error)))
}

/// The mirrored files by document path, and the files under `memory/` that cannot be
/// documents with why.
pub(super) type Scanned = (BTreeMap<String, Stamp>, Vec<(String, Skip)>);

/// The workspace's `MEMORY.md` and `memory/*` (hidden ones, such as editors' swap files and
/// the mirror's own temp files, are skipped). Symbolic links are never followed: a command
/// that may write the workspace must not make the mirror read a file it cannot.
pub(super) fn scan(workspace: &Path) -> io::Result<Scanned> {
    let (mut files, mut refused) = (BTreeMap::new(), Vec::new());
    let mut entries = Vec::new();
    for (path, dir) in [(LONG_TERM.to_owned(), None), (NOTES.to_owned(), Some(workspace.join(NOTES)))] {
        let meta = match std::fs::symlink_metadata(workspace.join(&path)) {
            Ok(meta) => meta,
            Err(error) if error.kind() == io::ErrorKind::NotFound => continue,
            Err(error) => return Err(error),
        };
        match dir {
            Some(dir) if meta.is_dir() => {
                for entry in std::fs::read_dir(dir)? {
                    let name = entry?.file_name().to_string_lossy().into_owned();
                    if !name.starts_with('.') {
                        entries.push(format!("{NOTES}/{name}"));
                    }
                }
            }
            _ => entries.push(path),
        }
    }
    for path in entries {
        // Gone since the listing: not there.
        let Ok(meta) = std::fs::symlink_metadata(workspace.join(&path)) else { continue };
        let stamp = Stamp::of(&meta);
        let why = match paths::check(&path) {
            Ok(checked) if checked == path && meta.is_file() => {
                files.insert(path, stamp);
                continue;
            }
            Ok(_) | Err(_) if meta.is_symlink() => SYMLINK.to_owned(),
            Ok(checked) if checked == path => "not a file".to_owned(),
            Ok(_) => paths::PathError(path.clone()).to_string(),
            Err(error) => error.to_string(),
        };
        refused.push((path, Skip { why, stamp: Some(stamp) }));
    }
    Ok((files, refused))
}

/// Why a symbolic link is left alone.
const SYMLINK: &str = "a symbolic link is not mirrored";

/// The text of the file at `path` in `workspace`, or why it cannot be a document. Opened
/// beneath the workspace with no symbolic link on the way (`openat2`), so a link swapped in
/// after the listing is refused too.
pub(super) fn read_text(workspace: &Path, path: &str, stamp: Stamp, limit: u64) -> io::Result<Result<String, String>> {
    let over = |bytes: u64| format!("{bytes} bytes is over memory.max_document_bytes ({limit})");
    if stamp.size > limit {
        return Ok(Err(over(stamp.size)));
    }
    let dir = rustix::fs::open(workspace, OFlags::PATH | OFlags::DIRECTORY | OFlags::CLOEXEC, Mode::empty())?;
    let resolve = ResolveFlags::BENEATH | ResolveFlags::NO_SYMLINKS;
    let fd = match rustix::fs::openat2(&dir, path, OFlags::RDONLY | OFlags::CLOEXEC, Mode::empty(), resolve) {
        Ok(fd) => fd,
        Err(Errno::LOOP | Errno::XDEV) => return Ok(Err(SYMLINK.to_owned())),
        Err(errno) => return Err(errno.into()),
    };
    let mut bytes = Vec::new();
    std::fs::File::from(fd).take(limit.saturating_add(1)).read_to_end(&mut bytes)?;
    if bytes.len() as u64 > limit {
        return Ok(Err(over(bytes.len() as u64)));
    }
    Ok(String::from_utf8(bytes).map_err(|_| "not UTF-8 text".to_owned()))
}

/// The stamp of `file` now (of a symbolic link itself, not its target), `None` when there
/// is none.
pub(super) fn stamp_now(file: &Path) -> io::Result<Option<Stamp>> {
    match std::fs::symlink_metadata(file) {
        Ok(meta) => Ok(Some(Stamp::of(&meta))),
        Err(error) if error.kind() == io::ErrorKind::NotFound => Ok(None),
        Err(error) => Err(error),
    }
}

/// Writes `bytes` to `file` through a temp file renamed into place (its mode kept), unless
/// `expect` is given and the file no longer matches it. The file's stamp once it holds
/// `bytes` (written here, or by another replica meanwhile), `None` when it does not.
pub(super) fn replace(file: &Path, bytes: &[u8], expect: Option<Option<Stamp>>) -> io::Result<Option<Stamp>> {
    let dir = file.parent().ok_or_else(|| io::Error::other("no parent folder"))?;
    std::fs::create_dir_all(dir)?;
    let mut temp = tempfile::NamedTempFile::new_in(dir)?;
    temp.write_all(bytes)?;
    temp.as_file().sync_data()?;
    let now = stamp_now(file)?;
    if expect.is_some_and(|expect| expect != now) {
        let holds = std::fs::read(file).is_ok_and(|held| held == bytes);
        return Ok(if holds { now } else { None });
    }
    if let Ok(meta) = std::fs::symlink_metadata(file)
        && meta.is_file()
    {
        temp.as_file().set_permissions(meta.permissions())?;
    }
    temp.persist(file).map_err(|error| error.error)?;
    stamp_now(file)
}

/// Removes `file` unless it changed since `expect`; whether it is gone.
pub(super) fn remove_unchanged(file: &Path, expect: Option<Stamp>) -> io::Result<bool> {
    if stamp_now(file)? != expect {
        return Ok(false);
    }
    match std::fs::remove_file(file) {
        Err(error) if error.kind() != io::ErrorKind::NotFound => Err(error),
        _ => Ok(true),
    }
}

/// Keeps `text` (the file at `path` that lost a conflict) as `CONFLICTS_DIR/<path>.<unix-ms>`.
pub(super) fn keep_aside(workspace: &Path, path: &str, text: &str) -> io::Result<PathBuf> {
    let ms = SystemTime::now().duration_since(UNIX_EPOCH).map_or(0, |at| at.as_millis());
    let base = workspace.join(CONFLICTS_DIR).join(format!("{path}.{ms}"));
    std::fs::create_dir_all(base.parent().ok_or_else(|| io::Error::other("no parent folder"))?)?;
    for n in 0..100 {
        let target = if n == 0 { base.clone() } else { PathBuf::from(format!("{}-{n}", base.display())) };
        match std::fs::OpenOptions::new().write(true).create_new(true).open(&target) {
            Ok(mut file) => {
                file.write_all(text.as_bytes())?;
                file.sync_data()?;
                return Ok(target);
            }
            Err(error) if error.kind() == io::ErrorKind::AlreadyExists => {}
            Err(error) => return Err(error),
        }
    }
    Err(io::Error::other("too many conflict copies in the same millisecond"))
}
