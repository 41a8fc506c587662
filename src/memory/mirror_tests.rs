//! The file mirror on both backends, one round at a time ([`Mirror::poll_once`]) in a temp
//! workspace: each direction, deletions both ways, a conflict (the store wins, the file's
//! text kept aside), a restart reading back an offline edit, a first start, files that
//! cannot be documents, two replicas on one directory, and logs that never carry text.

use std::io::Write as _;
use std::sync::{Arc, Mutex};
use std::time::SystemTime;

use chrono::NaiveDate;
use tracing_subscriber::fmt::MakeWriter;

use super::*;
use crate::config::MemoryConfig;
use crate::memory::WriteMode;
use crate::state::conformance::{Harness, conformance};

fn scope() -> MemoryScope {
    MemoryScope::new("main", "private:telegram:42")
}

fn today() -> NaiveDate {
    NaiveDate::from_ymd_opt(2026, 11, 28).unwrap()
}

/// A memory on the harness's store and an agent workspace to mirror it into.
struct Fixture {
    memory: Memory,
    workspace: tempfile::TempDir,
}

impl Fixture {
    fn new(harness: &Harness) -> Self {
        Self::with(harness, MemoryConfig::default())
    }

    fn with(harness: &Harness, config: MemoryConfig) -> Self {
        Self { memory: Memory::new(harness.stores.memory.clone(), config), workspace: tempfile::tempdir().unwrap() }
    }

    fn mirror(&self) -> Mirror {
        Mirror::open(self.memory.clone(), scope(), self.workspace.path().to_path_buf()).unwrap()
    }

    fn path(&self, path: &str) -> PathBuf {
        self.workspace.path().join(path)
    }

    fn file(&self, path: &str) -> Option<String> {
        std::fs::read_to_string(self.path(path)).ok()
    }

    fn write_file(&self, path: &str, text: impl AsRef<[u8]>) {
        std::fs::create_dir_all(self.path(path).parent().unwrap()).unwrap();
        std::fs::write(self.path(path), text).unwrap();
    }

    async fn doc(&self, path: &str) -> Option<MemoryDoc> {
        self.memory.store.get(&scope(), path).await.unwrap()
    }

    async fn text(&self, path: &str) -> Option<String> {
        self.doc(path).await.map(|doc| doc.content)
    }

    async fn write_doc(&self, path: &str, text: &str) {
        self.memory.write(&scope(), Some(path), text, &WriteMode::Replace, today()).await.unwrap();
    }

    async fn listed(&self) -> Vec<String> {
        self.memory.list(&scope()).await.unwrap().into_iter().map(|doc| doc.path).collect()
    }

    /// Every kept-aside text, by its path under the conflicts folder.
    fn conflicts(&self) -> Vec<(String, String)> {
        let mut found = Vec::new();
        let mut dirs = vec![self.path(CONFLICTS_DIR)];
        while let Some(dir) = dirs.pop() {
            for entry in std::fs::read_dir(&dir).into_iter().flatten().flatten() {
                if entry.path().is_dir() {
                    dirs.push(entry.path());
                    continue;
                }
                let name = entry.path().strip_prefix(self.path(CONFLICTS_DIR)).unwrap().display().to_string();
                found.push((name, std::fs::read_to_string(entry.path()).unwrap()));
            }
        }
        found.sort();
        found
    }
}

/// The log lines of the current thread while the guard lives.
#[derive(Clone, Default)]
struct Logs(Arc<Mutex<Vec<u8>>>);

impl Logs {
    fn capture() -> (Self, tracing::subscriber::DefaultGuard) {
        let logs = Self::default();
        let subscriber = tracing_subscriber::fmt().with_writer(logs.clone()).with_ansi(false).finish();
        (logs.clone(), tracing::subscriber::set_default(subscriber))
    }

    fn text(&self) -> String {
        String::from_utf8_lossy(&self.0.lock().unwrap()).into_owned()
    }
}

impl std::io::Write for Logs {
    fn write(&mut self, bytes: &[u8]) -> io::Result<usize> {
        self.0.lock().unwrap().extend_from_slice(bytes);
        Ok(bytes.len())
    }

    fn flush(&mut self) -> io::Result<()> {
        Ok(())
    }
}

impl<'a> MakeWriter<'a> for Logs {
    type Writer = Logs;

    fn make_writer(&'a self) -> Logs {
        self.clone()
    }
}

/// A document is written out; the file edited by hand becomes the document (found by
/// search); the agent's next write reaches the file again.
async fn a_document_reaches_its_file_and_an_edited_file_is_read_back_and_found(harness: &Harness) {
    let f = Fixture::new(harness);
    let mut mirror = f.mirror();
    f.write_doc("MEMORY.md", "- likes tea\n").await;
    f.memory.write(&scope(), None, "met Bob", &WriteMode::Append, today()).await.unwrap();
    mirror.poll_once().await.unwrap();
    assert_eq!(f.file("MEMORY.md").as_deref(), Some("- likes tea\n"));
    assert_eq!(f.file("memory/2026-11-28.md").as_deref(), Some("met Bob\n"));
    assert!(f.path(STATE_FILE).is_file(), "the state is kept");

    f.write_file("MEMORY.md", "- likes tea\n- plays the theremin\n");
    mirror.poll_once().await.unwrap();
    let doc = f.doc("MEMORY.md").await.unwrap();
    assert_eq!((doc.content.as_str(), doc.version), ("- likes tea\n- plays the theremin\n", 2));
    let found = f.memory.search(&scope(), "theremin", 5, 0.0, None, today()).await.unwrap();
    assert_eq!(found.iter().map(|found| found.path.as_str()).collect::<Vec<_>>(), ["MEMORY.md"], "indexed");
    mirror.poll_once().await.unwrap();
    assert_eq!(f.doc("MEMORY.md").await.unwrap().version, 2, "a file read back is not written again");

    f.memory.write(&scope(), Some("MEMORY.md"), "- owns a cat", &WriteMode::Append, today()).await.unwrap();
    mirror.poll_once().await.unwrap();
    assert_eq!(f.file("MEMORY.md").as_deref(), Some("- likes tea\n- plays the theremin\n- owns a cat\n"));
    assert_eq!(f.conflicts(), []);
}

/// A new file under `memory/` becomes a document; deleting a file removes its document;
/// a document removed from the store (`/forget`) removes its file.
async fn files_and_documents_come_and_go_together(harness: &Harness) {
    let f = Fixture::new(harness);
    let mut mirror = f.mirror();
    f.write_file("memory/projects.md", "- the boat\n");
    f.write_doc("MEMORY.md", "PIN is 1234\n").await;
    mirror.poll_once().await.unwrap();
    assert_eq!(f.text("memory/projects.md").await.as_deref(), Some("- the boat\n"), "a new file is a document");
    assert_eq!(f.file("MEMORY.md").as_deref(), Some("PIN is 1234\n"));

    std::fs::remove_file(f.path("memory/projects.md")).unwrap();
    f.memory.forget(&scope(), "pin is 1234").await.unwrap();
    mirror.poll_once().await.unwrap();
    assert_eq!(f.listed().await, Vec::<String>::new(), "the deleted file's document is gone");
    assert_eq!(f.file("MEMORY.md"), None, "the forgotten document's file is gone");
    mirror.poll_once().await.unwrap();
    assert_eq!((f.listed().await.len(), f.file("memory/projects.md")), (0, None), "and stay gone");
}

/// File and document both changed: the store wins, the file's text is kept aside (once),
/// and a document removed while its file was edited stays removed, the edit kept aside.
async fn when_both_changed_the_store_wins_and_the_file_s_text_is_kept_aside(harness: &Harness) {
    let f = Fixture::new(harness);
    let mut mirror = f.mirror();
    f.write_doc("MEMORY.md", "first\n").await;
    f.write_doc("memory/gone.md", "soon forgotten\n").await;
    mirror.poll_once().await.unwrap();
    f.write_file("MEMORY.md", "my hand edit\n");
    f.write_doc("MEMORY.md", "the agent's write\n").await;
    f.write_file("memory/gone.md", "soon forgotten, edited\n");
    f.memory.forget(&scope(), "soon forgotten").await.unwrap();
    let (logs, _guard) = Logs::capture();
    mirror.poll_once().await.unwrap();
    mirror.poll_once().await.unwrap();
    assert_eq!(f.file("MEMORY.md").as_deref(), Some("the agent's write\n"));
    assert_eq!(f.text("MEMORY.md").await.as_deref(), Some("the agent's write\n"));
    assert_eq!((f.file("memory/gone.md"), f.text("memory/gone.md").await), (None, None));
    let kept = f.conflicts();
    assert_eq!(kept.len(), 2, "{kept:?}");
    assert!(kept[0].0.starts_with("MEMORY.md.") && kept[0].1 == "my hand edit\n", "{kept:?}");
    assert!(kept[1].0.starts_with("memory/gone.md.") && kept[1].1 == "soon forgotten, edited\n", "{kept:?}");
    let logs = logs.text();
    assert!(logs.contains("WARN") && logs.contains("the stored document wins"), "{logs}");
    assert!(!logs.contains("hand edit") && !logs.contains("agent's write"), "logs name paths, never text: {logs}");
}

/// An edit made while the gateway was down is read back at the next start, and a document
/// written meanwhile is written out; nothing conflicts.
async fn an_edit_made_while_stopped_is_read_back_at_the_next_start(harness: &Harness) {
    let f = Fixture::new(harness);
    f.write_doc("MEMORY.md", "before\n").await;
    f.mirror().poll_once().await.unwrap();
    f.write_file("MEMORY.md", "edited offline\n");
    f.write_doc("memory/new.md", "written meanwhile\n").await;
    f.mirror().poll_once().await.unwrap();
    assert_eq!(f.text("MEMORY.md").await.as_deref(), Some("edited offline\n"));
    assert_eq!(f.file("memory/new.md").as_deref(), Some("written meanwhile\n"));
    assert_eq!(f.conflicts(), []);
}

/// With no state file: documents are written out, files without a document imported, a
/// file equal to its document left as is and one that differs kept aside (the store wins).
async fn a_first_start_imports_files_and_keeps_a_differing_one_aside(harness: &Harness) {
    let f = Fixture::new(harness);
    f.write_doc("MEMORY.md", "stored\n").await;
    f.write_doc("memory/same.md", "same\n").await;
    f.write_doc("memory/only-stored.md", "only stored\n").await;
    f.write_file("MEMORY.md", "on disk\n");
    f.write_file("memory/same.md", "same\n");
    f.write_file("memory/only-a-file.md", "only a file\n");
    f.mirror().poll_once().await.unwrap();
    assert_eq!(f.file("MEMORY.md").as_deref(), Some("stored\n"));
    assert_eq!(f.file("memory/only-stored.md").as_deref(), Some("only stored\n"));
    assert_eq!(f.text("memory/only-a-file.md").await.as_deref(), Some("only a file\n"));
    assert_eq!(f.doc("memory/same.md").await.unwrap().version, 1);
    let kept = f.conflicts();
    assert!(kept.len() == 1 && kept[0].1 == "on disk\n", "{kept:?}");
}

/// Oversized, badly named, non-UTF-8 files, folders and symbolic links (which could lead
/// out of the workspace) are left alone, warned about once (again when they change); the
/// rest still mirrors.
async fn files_that_cannot_be_documents_are_left_alone_and_the_rest_still_mirrors(harness: &Harness) {
    let config = MemoryConfig { max_document_bytes: 1_000, ..MemoryConfig::default() };
    let f = Fixture::with(harness, config);
    let mut mirror = f.mirror();
    let big = "x".repeat(1_001);
    f.write_file("memory/big.md", &big);
    f.write_file("memory/notes.txt", "not markdown");
    f.write_file("memory/a b.md", "a space");
    f.write_file("memory/latin1.md", [0x63, 0x61, 0x66, 0xe9]);
    f.write_file("memory/sub/x.md", "nested");
    f.write_file("memory/.x.md.swp", "an editor's");
    f.write_file("memory/good.md", "fine\n");
    let outside = tempfile::NamedTempFile::new().unwrap();
    std::fs::write(outside.path(), "a secret outside the workspace").unwrap();
    std::os::unix::fs::symlink(outside.path(), f.path("memory/link.md")).unwrap();
    f.write_doc("memory/stored.md", "from the store\n").await;
    let (logs, _guard) = Logs::capture();
    mirror.poll_once().await.unwrap();
    mirror.poll_once().await.unwrap();
    assert_eq!(f.listed().await, ["memory/good.md", "memory/stored.md"]);
    assert_eq!(f.file("memory/stored.md").as_deref(), Some("from the store\n"));
    assert_eq!(f.file("memory/big.md"), Some(big), "left as it was");
    let text = logs.text();
    for name in
        ["memory/big.md", "memory/notes.txt", "memory/a b.md", "memory/latin1.md", "memory/sub", "memory/link.md"]
    {
        assert_eq!(text.matches(&format!("path=\"{name}\"")).count(), 1, "{name} warned once in two rounds: {text}");
    }
    assert!(text.contains("over memory.max_document_bytes") && text.contains("not UTF-8"), "{text}");
    assert!(text.contains("symbolic link is not mirrored") && !text.contains("secret"), "{text}");
    assert!(!text.contains(".swp"), "hidden files are not ours: {text}");
    f.write_file("memory/latin1.md", [0xe9, 0xe9]);
    mirror.poll_once().await.unwrap();
    assert_eq!(logs.text().matches("path=\"memory/latin1.md\"").count(), 2, "warned again once it changed");
}

/// One round of each replica, run together.
async fn round_of_both(first: &mut Mirror, second: &mut Mirror) {
    let (a, b) = tokio::join!(first.poll_once(), second.poll_once());
    a.unwrap();
    b.unwrap();
}

/// Two replicas mirroring one shared directory converge: an edit is written once, an
/// edit racing a write is kept aside, a deletion holds; no edit is lost.
async fn two_replicas_mirroring_one_directory_converge(harness: &Harness) {
    let f = Fixture::new(harness);
    let other = Memory::new(harness.reopen().await.memory.clone(), MemoryConfig::default());
    let mut first = f.mirror();
    let mut second = Mirror::open(other, scope(), f.workspace.path().to_path_buf()).unwrap();
    f.write_doc("MEMORY.md", "one\n").await;
    round_of_both(&mut first, &mut second).await;
    f.write_file("MEMORY.md", "one\ntwo\n");
    round_of_both(&mut first, &mut second).await;
    second.poll_once().await.unwrap();
    first.poll_once().await.unwrap();
    let doc = f.doc("MEMORY.md").await.unwrap();
    assert_eq!((doc.content.as_str(), doc.version), ("one\ntwo\n", 2), "written once");
    assert_eq!(f.conflicts(), []);

    f.write_file("MEMORY.md", "one\ntwo\nthree (by hand)\n");
    f.write_doc("MEMORY.md", "one\ntwo\nfour (the agent)\n").await;
    for _ in 0..2 {
        round_of_both(&mut first, &mut second).await;
    }
    assert_eq!(f.file("MEMORY.md").as_deref(), Some("one\ntwo\nfour (the agent)\n"));
    assert_eq!(f.text("MEMORY.md").await.as_deref(), Some("one\ntwo\nfour (the agent)\n"));
    let kept = f.conflicts();
    assert!(!kept.is_empty() && kept.iter().all(|(_, text)| text.contains("three (by hand)")), "{kept:?}");

    std::fs::remove_file(f.path("MEMORY.md")).unwrap();
    for _ in 0..2 {
        round_of_both(&mut first, &mut second).await;
    }
    assert_eq!((f.file("MEMORY.md"), f.text("MEMORY.md").await), (None, None));
}

/// A workspace that mirrors one scope is not taken over by another: its files are that
/// scope's memory.
async fn a_workspace_mirroring_another_scope_is_refused(harness: &Harness) {
    let f = Fixture::new(harness);
    f.write_doc("MEMORY.md", "alice's\n").await;
    f.mirror().poll_once().await.unwrap();
    let other = MemoryScope::new("main", "private:telegram:43");
    let refused = Mirror::open(f.memory.clone(), other, f.workspace.path().to_path_buf()).err().unwrap();
    assert!(matches!(refused, MirrorError::OtherScope { .. }), "{refused}");
    assert!(
        refused.to_string().contains("mirrors main private:telegram:42, not main private:telegram:43"),
        "{refused}"
    );
}

conformance!(
    a_document_reaches_its_file_and_an_edited_file_is_read_back_and_found,
    files_and_documents_come_and_go_together,
    when_both_changed_the_store_wins_and_the_file_s_text_is_kept_aside,
    an_edit_made_while_stopped_is_read_back_at_the_next_start,
    a_first_start_imports_files_and_keeps_a_differing_one_aside,
    files_that_cannot_be_documents_are_left_alone_and_the_rest_still_mirrors,
    two_replicas_mirroring_one_directory_converge,
    a_workspace_mirroring_another_scope_is_refused,
);

/// A file's size and mtime vouch for its text only once it is older than the racy window:
/// until then it is read again each round.
#[tokio::test]
async fn a_file_is_read_again_until_its_mtime_is_old_enough_to_vouch_for_it() {
    let harness = Harness::sqlite().await;
    let f = Fixture::new(&harness);
    let mut mirror = f.mirror();
    f.write_file("MEMORY.md", "hello\n");
    mirror.poll_once().await.unwrap();
    assert_eq!(mirror.state.documents["MEMORY.md"].stamp, None, "just written: not trusted");
    let old = SystemTime::now() - Duration::from_secs(60);
    std::fs::File::options().write(true).open(f.path("MEMORY.md")).unwrap().set_modified(old).unwrap();
    mirror.poll_once().await.unwrap();
    let stamp = mirror.state.documents["MEMORY.md"].stamp.expect("old enough: trusted");
    assert_eq!(stamp.size, 6);
    let mut file = std::fs::File::options().append(true).open(f.path("MEMORY.md")).unwrap();
    file.write_all(b"world\n").unwrap();
    mirror.poll_once().await.unwrap();
    assert_eq!(f.text("MEMORY.md").await.as_deref(), Some("hello\nworld\n"), "a new size is a new read");
}
