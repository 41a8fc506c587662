//! The file mirror (`[memory] mirror_files`): one scope's documents kept as files in each
//! agent's workspace, `<workspace>/MEMORY.md` and `<workspace>/memory/*.md`, for the
//! operator to edit by hand, and those edits read back into the store.
//!
//! Every [`MIRROR_INTERVAL`] a [`Mirror`] looks at each path three ways: the file, the
//! document in the store, and what it last mirrored (kept in [`STATE_FILE`] in the workspace,
//! so an edit made while the gateway was down is read back at the next start). The side that
//! moved on is copied to the other: an edited file becomes the document (a whole-document
//! replace on the version last mirrored, chunked and indexed like any write), a changed
//! document is written to its file (a temp file renamed into place). When both moved on, the
//! store wins and the file's text is kept in [`CONFLICTS_DIR`]`/<path>.<unix-ms>`, so no edit
//! is lost silently; every store write is compare-and-swap, so replicas mirroring one shared
//! directory converge. A file that cannot be a document (a name the path rules refuse, over
//! `max_document_bytes`, not UTF-8) is left alone with one warning and never stops the rest.
//! Logs name paths, never text.

use std::collections::{BTreeMap, BTreeSet, HashMap, HashSet};
use std::io;
use std::path::{Path, PathBuf};
use std::time::Duration;

use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};
use tokio_util::sync::CancellationToken;

use super::Memory;
pub use super::mirror_disk::CONFLICTS_DIR;
use super::mirror_disk::{NOTES, Skip, Stamp, keep_aside, on_disk, read_text, remove_unchanged, replace, scan};
use crate::config::ResolvedAgent;
use crate::state::StorageError;
use crate::state::memory::{MemoryDoc, MemoryScope, PutError};

/// How often files and store are compared: soon enough that an edit is in the next answer,
/// rare enough that an idle mirror costs a listing and a few `stat`s.
pub const MIRROR_INTERVAL: Duration = Duration::from_secs(2);
/// What was last mirrored, by path, in the workspace (hidden: never a document).
pub const STATE_FILE: &str = ".memory-mirror.json";

/// Why a workspace cannot be mirrored, or a round failed.
#[derive(Debug, thiserror::Error)]
pub enum MirrorError {
    #[error("cannot {action} {}: {source}", path.display())]
    Io { action: &'static str, path: PathBuf, source: io::Error },
    #[error(
        "{} mirrors {found}, not {wanted}: move MEMORY.md, memory/ and .memory-mirror.json out of the workspace to \
         mirror another scope there",
        path.display()
    )]
    OtherScope { path: PathBuf, found: String, wanted: String },
    #[error(transparent)]
    Storage(#[from] StorageError),
}

/// The state file: whose memory the workspace mirrors, and each path as last mirrored.
#[derive(Debug, Default, Serialize, Deserialize)]
struct MirrorState {
    agent: String,
    scope: String,
    documents: BTreeMap<String, Mirrored>,
}

/// A path as last mirrored: file and document both held this text at this version.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
struct Mirrored {
    version: i64,
    sha256: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    stamp: Option<Stamp>,
}

/// A file as seen in this round.
enum Seen {
    Absent,
    /// Size and mtime as last mirrored: taken to hold the mirrored text, not read.
    AsMirrored(Stamp),
    Read {
        stamp: Stamp,
        text: String,
    },
}

impl Seen {
    fn stamp(&self) -> Option<Stamp> {
        match self {
            Seen::Absent => None,
            Seen::AsMirrored(stamp) | Seen::Read { stamp, .. } => Some(*stamp),
        }
    }
}

/// One agent's workspace mirroring one scope.
pub struct Mirror {
    memory: Memory,
    scope: MemoryScope,
    workspace: PathBuf,
    state: MirrorState,
    /// `state` changed since it was saved.
    dirty: bool,
    /// The last warning by path (or round): said again only when it changes.
    warned: HashMap<String, String>,
}

impl Mirror {
    /// The mirror of `scope` in `workspace`, from its state file when there is one. A state
    /// file naming another agent or scope is refused: its files are someone else's memory.
    pub fn open(memory: Memory, scope: MemoryScope, workspace: PathBuf) -> Result<Self, MirrorError> {
        let path = workspace.join(STATE_FILE);
        let fresh = MirrorState { agent: scope.agent_id.clone(), scope: scope.scope.clone(), ..MirrorState::default() };
        let state = match std::fs::read(&path) {
            Ok(bytes) => match serde_json::from_slice::<MirrorState>(&bytes) {
                Ok(state) if state.agent == scope.agent_id && state.scope == scope.scope => state,
                Ok(state) => {
                    let (found, wanted) =
                        (format!("{} {}", state.agent, state.scope), format!("{} {}", fresh.agent, fresh.scope));
                    return Err(MirrorError::OtherScope { path, found, wanted });
                }
                Err(error) => {
                    tracing::warn!(path = %path.display(), %error, "unreadable memory mirror state: starting as if new \
                        (a file that differs from its document is kept in {CONFLICTS_DIR})");
                    fresh
                }
            },
            Err(error) if error.kind() == io::ErrorKind::NotFound => fresh,
            Err(source) => return Err(MirrorError::Io { action: "read", path, source }),
        };
        Ok(Self { memory, scope, workspace, state, dirty: false, warned: HashMap::new() })
    }

    /// One round: every path with a file, a document or a record is brought in line, and
    /// the state saved. A storage error ends the round (the next one tries again); a file
    /// that cannot be read or written is warned about and the round goes on.
    pub async fn poll_once(&mut self) -> Result<(), MirrorError> {
        let docs: BTreeMap<String, i64> =
            self.memory.store.list(&self.scope).await?.into_iter().map(|doc| (doc.path, doc.version)).collect();
        let workspace = self.workspace.clone();
        let (files, refused) =
            on_disk(move || scan(&workspace)).await.map_err(io_error("list", &self.workspace.join(NOTES)))?;
        for (shown, skip) in refused {
            if self.first_time(&shown, &skip) {
                tracing::warn!(agent = %self.scope.agent_id, path = shown.as_str(), "memory mirror leaves this file alone: {}", skip.why);
            }
        }
        let mut paths: BTreeSet<String> = docs.keys().cloned().collect();
        paths.extend(files.keys().cloned());
        paths.extend(self.state.documents.keys().cloned());
        for path in paths {
            let skip = match self.sync(&path, docs.get(&path).copied(), files.get(&path).copied()).await {
                Ok(skip) => skip,
                Err(MirrorError::Storage(error)) => {
                    self.save().await?;
                    return Err(error.into());
                }
                Err(error) => Some(Skip { why: error.to_string(), stamp: None }),
            };
            match skip {
                None => drop(self.warned.remove(&path)),
                Some(skip) if self.first_time(&path, &skip) => {
                    tracing::warn!(agent = %self.scope.agent_id, path = path.as_str(), "memory mirror leaves this file alone: {}", skip.why);
                }
                Some(_) => {}
            }
        }
        self.save().await
    }

    /// Brings one path in line; `Some` when it was left alone.
    async fn sync(
        &mut self,
        path: &str,
        listed: Option<i64>,
        found: Option<Stamp>,
    ) -> Result<Option<Skip>, MirrorError> {
        let record = self.state.documents.get(path).cloned();
        let seen = match found {
            None => Seen::Absent,
            Some(stamp) if record.as_ref().and_then(|record| record.stamp) == Some(stamp) => Seen::AsMirrored(stamp),
            Some(stamp) => {
                let (workspace, name) = (self.workspace.clone(), path.to_owned());
                let limit = self.memory.config.max_document_bytes;
                match on_disk(move || read_text(&workspace, &name, stamp, limit)).await {
                    Ok(Ok(text)) => Seen::Read { stamp, text },
                    Ok(Err(why)) => return Ok(Some(Skip { why, stamp: Some(stamp) })),
                    // Gone since the listing: the next round sees it gone.
                    Err(error) if error.kind() == io::ErrorKind::NotFound => return Ok(None),
                    Err(error) => return Err(io_error("read", &self.workspace.join(path))(error)),
                }
            }
        };
        // The text the file stands for; `None` for no document (absent, or emptied).
        let file_sha = match &seen {
            Seen::Absent => None,
            Seen::AsMirrored(_) => record.as_ref().map(|record| record.sha256.clone()),
            Seen::Read { text, .. } => (!text.is_empty()).then(|| sha(text)),
        };
        let file_moved = file_sha.as_ref() != record.as_ref().map(|record| &record.sha256);
        let store_moved = listed != record.as_ref().map(|record| record.version);
        match (file_moved, store_moved) {
            (false, false) => {
                if let (Some(record), Seen::Read { stamp, .. }) = (record, &seen) {
                    self.remember(path, record.version, record.sha256, Some(*stamp));
                }
                Ok(None)
            }
            (false, true) => {
                let doc = self.memory.store.get(&self.scope, path).await?;
                self.place(path, doc, seen.stamp()).await
            }
            (true, false) => self.read_back(path, seen, file_sha, record.map(|record| record.version)).await,
            (true, true) => self.settle(path, seen, file_sha).await,
        }
    }

    /// The file changed, the store did not: the file's text becomes the document (none, if
    /// the file was deleted or emptied), on the version last mirrored.
    async fn read_back(
        &mut self,
        path: &str,
        seen: Seen,
        file_sha: Option<String>,
        expected: Option<i64>,
    ) -> Result<Option<Skip>, MirrorError> {
        let text = if let Seen::Read { text, .. } = &seen { text.as_str() } else { "" };
        let agent = &self.scope.agent_id;
        match self.memory.put_whole(&self.scope, path, text, expected).await {
            Ok(0) => {
                tracing::info!(%agent, path, "memory mirror: the file was deleted or emptied, and so is its document");
                self.forget(path);
            }
            Ok(version) => {
                tracing::info!(%agent, path, version, "memory mirror: read back the edited file");
                self.remember(path, version, file_sha.unwrap_or_default(), seen.stamp());
            }
            Err(PutError::Conflict { .. }) => return self.settle(path, seen, file_sha).await,
            Err(PutError::Storage(error)) => return Err(error.into()),
            Err(refused) => return Ok(Some(Skip { why: refused.to_string(), stamp: seen.stamp() })),
        }
        Ok(None)
    }

    /// Both sides moved on. The same text on both is no conflict; otherwise the store
    /// wins, and the file's text is kept aside first.
    async fn settle(&mut self, path: &str, seen: Seen, file_sha: Option<String>) -> Result<Option<Skip>, MirrorError> {
        let doc = self.memory.store.get(&self.scope, path).await?;
        if let Some(doc) = &doc
            && Some(sha(&doc.content)) == file_sha
        {
            self.remember(path, doc.version, sha(&doc.content), seen.stamp());
            return Ok(None);
        }
        if doc.is_none() && file_sha.is_none() {
            self.forget(path);
            return Ok(None);
        }
        let agent = &self.scope.agent_id;
        match &seen {
            Seen::Read { text, .. } if !text.is_empty() => {
                let (workspace, text, name) = (self.workspace.clone(), text.clone(), path.to_owned());
                let kept = on_disk(move || keep_aside(&workspace, &name, &text))
                    .await
                    .map_err(io_error("keep aside", &self.workspace.join(CONFLICTS_DIR)))?;
                tracing::warn!(%agent, path, kept = %kept.display(), "memory mirror: the file and its document both \
                    changed; the stored document wins, the file's text is kept aside");
            }
            _ => tracing::info!(%agent, path, "memory mirror: the deleted file's document changed; written out again"),
        }
        self.place(path, doc, seen.stamp()).await
    }

    /// Makes the file hold `doc` (or removes it), unless it changed since it was seen as
    /// `expect` (then the next round sees the change).
    async fn place(
        &mut self,
        path: &str,
        doc: Option<MemoryDoc>,
        expect: Option<Stamp>,
    ) -> Result<Option<Skip>, MirrorError> {
        let file = self.workspace.join(path);
        let target = file.clone();
        let Some(doc) = doc else {
            if on_disk(move || remove_unchanged(&target, expect)).await.map_err(io_error("remove", &file))? {
                self.forget(path);
            }
            return Ok(None);
        };
        let text = doc.content.clone();
        let written = on_disk(move || replace(&target, text.as_bytes(), Some(expect))).await;
        if let Some(stamp) = written.map_err(io_error("write", &file))? {
            tracing::debug!(agent = %self.scope.agent_id, path, version = doc.version, "memory mirror: wrote the file");
            self.remember(path, doc.version, sha(&doc.content), Some(stamp));
        }
        Ok(None)
    }

    fn remember(&mut self, path: &str, version: i64, sha256: String, stamp: Option<Stamp>) {
        let mirrored = Mirrored { version, sha256, stamp: stamp.and_then(Stamp::trusted) };
        if self.state.documents.get(path) != Some(&mirrored) {
            self.state.documents.insert(path.to_owned(), mirrored);
            self.dirty = true;
        }
    }

    fn forget(&mut self, path: &str) {
        self.dirty |= self.state.documents.remove(path).is_some();
    }

    /// Whether `skip` is news for `key` (and remembers it).
    fn first_time(&mut self, key: &str, skip: &Skip) -> bool {
        let signature = format!("{} {:?}", skip.why, skip.stamp);
        self.warned.insert(key.to_owned(), signature.clone()).as_ref() != Some(&signature)
    }

    async fn save(&mut self) -> Result<(), MirrorError> {
        if !self.dirty {
            return Ok(());
        }
        let target = self.workspace.join(STATE_FILE);
        let json = serde_json::to_vec_pretty(&self.state).map_err(io::Error::other);
        let path = target.clone();
        on_disk(move || replace(&path, &json?, None)).await.map_err(io_error("write", &target))?;
        self.dirty = false;
        Ok(())
    }

    /// A round, its failure warned about once until it changes.
    async fn round(&mut self) {
        match self.poll_once().await {
            Ok(()) => drop(self.warned.remove("")),
            Err(error) => {
                let skip = Skip { why: error.to_string(), stamp: None };
                if self.first_time("", &skip) {
                    tracing::warn!(agent = %self.scope.agent_id, %error, "memory mirror round failed; tried again every {}s", MIRROR_INTERVAL.as_secs());
                }
            }
        }
    }
}

/// A mirror per agent workspace when `mirror_files` is on. A workspace that cannot be
/// mirrored is logged and left out; a workspace two agents share is mirrored for the first.
pub(super) fn open_all(memory: &Memory, agents: &[ResolvedAgent]) -> Vec<Mirror> {
    let config = memory.config();
    let Some(scope) = config.mirror_scope.as_deref().filter(|_| config.mirror_files) else { return Vec::new() };
    let mut workspaces = HashSet::new();
    let mut mirrors = Vec::new();
    for agent in agents {
        let workspace = agent.workspace.display();
        if !workspaces.insert(agent.workspace.clone()) {
            tracing::warn!(agent = %agent.id, %workspace, "memory mirror: an agent before this one mirrors this workspace");
            continue;
        }
        match Mirror::open(memory.clone(), MemoryScope::new(&agent.id, scope), agent.workspace.clone()) {
            Ok(mirror) => {
                tracing::info!(agent = %agent.id, %workspace, scope, "mirroring memory to workspace files");
                mirrors.push(mirror);
            }
            Err(error) => tracing::error!(agent = %agent.id, %error, "memory is not mirrored to this workspace"),
        }
    }
    mirrors
}

/// Runs a round of every mirror each [`MIRROR_INTERVAL`] until `stop` is cancelled (a round
/// cut short is safe: what it did not record is settled again by the next start).
pub(super) async fn keep_mirrored(mut mirrors: Vec<Mirror>, stop: CancellationToken) {
    loop {
        let rounds = async {
            for mirror in &mut mirrors {
                mirror.round().await;
            }
        };
        tokio::select! {
            () = stop.cancelled() => return,
            () = rounds => {}
        }
        tokio::select! {
            () = stop.cancelled() => return,
            () = tokio::time::sleep(MIRROR_INTERVAL) => {}
        }
    }
}

fn sha(text: &str) -> String {
    Sha256::digest(text.as_bytes()).iter().map(|byte| format!("{byte:02x}")).collect()
}

fn io_error(action: &'static str, path: &Path) -> impl FnOnce(io::Error) -> MirrorError {
    let path = path.to_path_buf();
    move |source| MirrorError::Io { action, path, source }
}

#[cfg(test)]
#[path = "mirror_tests.rs"]
mod tests;
