//! [`FileCursor`]: an [`IngressCursor`] in a file, for a process that owns its state
//! directory alone (one machine on SQLite), where there is no lease to keep a position under.

use std::path::PathBuf;

use async_trait::async_trait;

use crate::singleton::{CursorError, IngressCursor};

/// A position kept in one file, replaced whole on each save (written beside it, then
/// renamed over it), so a crash mid-save leaves the previous position, never half of one.
#[derive(Debug, Clone)]
pub struct FileCursor {
    path: PathBuf,
}

impl FileCursor {
    /// A cursor in `path`; its directory is created on the first save.
    pub fn new(path: impl Into<PathBuf>) -> Self {
        Self { path: path.into() }
    }
}

#[async_trait]
impl IngressCursor for FileCursor {
    async fn load(&self) -> Result<Option<String>, CursorError> {
        match tokio::fs::read_to_string(&self.path).await {
            Ok(text) => Ok(Some(text)),
            Err(error) if error.kind() == std::io::ErrorKind::NotFound => Ok(None),
            Err(error) => Err(CursorError::Unavailable(format!("reading {}: {error}", self.path.display()))),
        }
    }

    async fn save(&self, position: &str) -> Result<(), CursorError> {
        let unavailable =
            |error: std::io::Error| CursorError::Unavailable(format!("writing {}: {error}", self.path.display()));
        if let Some(dir) = self.path.parent() {
            tokio::fs::create_dir_all(dir).await.map_err(unavailable)?;
        }
        let mut partial = self.path.clone().into_os_string();
        partial.push(".partial");
        tokio::fs::write(&partial, position).await.map_err(unavailable)?;
        tokio::fs::rename(&partial, &self.path).await.map_err(unavailable)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn a_file_cursor_is_empty_until_saved_and_then_reads_the_last_save() {
        let dir = tempfile::tempdir().unwrap();
        let cursor = FileCursor::new(dir.path().join("channels").join("discord.default.json"));
        assert_eq!(cursor.load().await.unwrap(), None);
        cursor.save("first").await.unwrap();
        cursor.save("second").await.unwrap();
        assert_eq!(cursor.load().await.unwrap().as_deref(), Some("second"));
    }
}
