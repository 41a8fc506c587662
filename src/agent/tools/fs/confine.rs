//! Paths the model names, resolved by the kernel inside the workspace.
//!
//! Every open goes through `openat2` with `RESOLVE_BENEATH` from a descriptor of the
//! workspace: `..`, absolute paths and symlinks that lead out are refused by the kernel at
//! the moment of opening, so there is no window between checking a path and using it.

use std::fs::File;
use std::io;
use std::os::fd::{AsFd, OwnedFd};
use std::os::unix::fs::MetadataExt;
use std::path::{Component, Path, PathBuf};

use rustix::fs::{Mode, OFlags, ResolveFlags};

/// Why a path cannot be used, worded for the model.
#[derive(Debug, thiserror::Error)]
pub enum PathError {
    #[error("`{0}` is outside the workspace; use a path inside it (relative paths start there)")]
    Outside(String),
    #[error("`{0}` does not exist")]
    NotFound(String),
    #[error("`{path}`: {error}")]
    Io { path: String, error: io::Error },
}

/// The workspace, held open.
pub struct Workspace {
    dir: OwnedFd,
    path: PathBuf,
    /// Who new files belong to: the workspace's owner, when Ferry (root) writes for a
    /// sandboxed session that runs as another user.
    owner: Option<(u32, u32)>,
}

impl Workspace {
    pub fn open(path: &Path) -> io::Result<Self> {
        let dir = rustix::fs::open(path, OFlags::PATH | OFlags::DIRECTORY | OFlags::CLOEXEC, Mode::empty())?;
        let meta = std::fs::metadata(path)?;
        let owner = (crate::sandbox::is_root() && meta.uid() != 0).then(|| (meta.uid(), meta.gid()));
        Ok(Self { dir, path: path.to_path_buf(), owner })
    }

    /// The path relative to the workspace: a relative one as is, an absolute one only when
    /// it lies inside. Whether it escapes through `..` or a symlink is for the kernel to say.
    pub fn relative(&self, shown: &str) -> Result<PathBuf, PathError> {
        let path = Path::new(shown);
        if shown.trim().is_empty() {
            return Err(PathError::Outside(shown.to_owned()));
        }
        if path.is_absolute() {
            return path
                .strip_prefix(&self.path)
                .map(|inside| if inside.as_os_str().is_empty() { PathBuf::from(".") } else { inside.to_path_buf() })
                .map_err(|_| PathError::Outside(shown.to_owned()));
        }
        // `..` above the workspace is refused here too, so a path through a missing
        // directory gets the same answer as one through an existing one.
        let mut depth = 0usize;
        for component in path.components() {
            match component {
                Component::ParentDir if depth == 0 => return Err(PathError::Outside(shown.to_owned())),
                Component::ParentDir => depth -= 1,
                Component::Normal(_) => depth += 1,
                _ => {}
            }
        }
        Ok(path.to_path_buf())
    }

    /// Opens a file for reading.
    pub fn read(&self, shown: &str) -> Result<File, PathError> {
        let relative = self.relative(shown)?;
        self.open_beneath(&relative, OFlags::RDONLY, shown).map(File::from)
    }

    /// Opens a file for writing, truncated, creating it and its parent directories.
    pub fn create(&self, shown: &str) -> Result<File, PathError> {
        let relative = self.relative(shown)?;
        if let Some(parent) = relative.parent().filter(|parent| !parent.as_os_str().is_empty()) {
            self.create_dirs(parent, shown)?;
        }
        let flags = OFlags::WRONLY | OFlags::CREATE | OFlags::TRUNC;
        let fd = self.open_beneath(&relative, flags, shown)?;
        self.give_to_owner(&fd, shown)?;
        Ok(File::from(fd))
    }

    /// Creates each missing directory of `relative`, one component at a time, each inside
    /// a directory that was itself opened beneath the workspace.
    fn create_dirs(&self, relative: &Path, shown: &str) -> Result<(), PathError> {
        let mut done = PathBuf::new();
        for component in relative.components() {
            let Component::Normal(name) = component else {
                // `..` or `.`: let the kernel judge the whole path when it is opened.
                done.push(component);
                continue;
            };
            let parent = if done.as_os_str().is_empty() {
                rustix::fs::openat(&self.dir, ".", OFlags::PATH | OFlags::DIRECTORY | OFlags::CLOEXEC, Mode::empty())
                    .map_err(|error| io_error(shown, error.into()))?
            } else {
                self.open_beneath(&done, OFlags::PATH | OFlags::DIRECTORY, shown)?
            };
            match rustix::fs::mkdirat(&parent, name, Mode::from_raw_mode(0o755)) {
                Ok(()) => {
                    if let Some((uid, gid)) = self.owner {
                        let (uid, gid) = (rustix::fs::Uid::from_raw(uid), rustix::fs::Gid::from_raw(gid));
                        rustix::fs::chownat(&parent, name, Some(uid), Some(gid), rustix::fs::AtFlags::SYMLINK_NOFOLLOW)
                            .map_err(|error| io_error(shown, error.into()))?;
                    }
                }
                Err(rustix::io::Errno::EXIST) => {}
                Err(error) => return Err(io_error(shown, error.into())),
            }
            done.push(name);
        }
        Ok(())
    }

    fn open_beneath(&self, relative: &Path, flags: OFlags, shown: &str) -> Result<OwnedFd, PathError> {
        let resolve = ResolveFlags::BENEATH | ResolveFlags::NO_MAGICLINKS;
        // openat2 refuses a mode unless it creates the file.
        let mode = if flags.contains(OFlags::CREATE) { Mode::from_raw_mode(0o644) } else { Mode::empty() };
        rustix::fs::openat2(&self.dir, relative, flags | OFlags::CLOEXEC, mode, resolve).map_err(|errno| match errno {
            rustix::io::Errno::XDEV => PathError::Outside(shown.to_owned()),
            rustix::io::Errno::NOENT => PathError::NotFound(shown.to_owned()),
            errno => io_error(shown, errno.into()),
        })
    }

    fn give_to_owner(&self, fd: &impl AsFd, shown: &str) -> Result<(), PathError> {
        if let Some((uid, gid)) = self.owner {
            rustix::fs::fchown(fd, Some(rustix::fs::Uid::from_raw(uid)), Some(rustix::fs::Gid::from_raw(gid)))
                .map_err(|error| io_error(shown, error.into()))?;
        }
        Ok(())
    }
}

fn io_error(shown: &str, error: io::Error) -> PathError {
    PathError::Io { path: shown.to_owned(), error }
}
