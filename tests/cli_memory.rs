//! `ferry memory`, run as the real binary on a fresh state directory: documents imported
//! from files, listed by `status`, found by `search` (in their scope only), written back out
//! by `export` as they came in; a file that is no memory document is refused by name.

mod support;

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use support::{error_line, stderr, stdout};

struct Sandbox {
    dir: tempfile::TempDir,
}

impl Sandbox {
    fn new() -> Self {
        Self { dir: tempfile::tempdir().expect("temp dir") }
    }

    fn path(&self, relative: &str) -> PathBuf {
        self.dir.path().join(relative)
    }

    fn run(&self, args: &[&str]) -> Output {
        Command::new(env!("CARGO_BIN_EXE_ferry"))
            .args(args)
            .env_clear()
            .env("HOME", self.dir.path().join("home"))
            .env("FERRY_STATE_DIR", self.dir.path().join("state"))
            .current_dir(self.dir.path())
            .output()
            .expect("run ferry")
    }

    /// Runs `ferry memory <args>`, which must succeed; its stdout.
    fn memory(&self, args: &[&str]) -> String {
        let output = self.run(&[&["memory"], args].concat());
        assert!(output.status.success(), "ferry memory {args:?}: {}", stderr(&output));
        stdout(&output)
    }
}

fn write(path: &Path, text: &str) {
    std::fs::create_dir_all(path.parent().expect("a parent")).expect("mkdir");
    std::fs::write(path, text).expect("write");
}

#[test]
fn documents_are_imported_listed_searched_in_their_scope_and_exported_as_they_came() {
    let sandbox = Sandbox::new();
    let alice = sandbox.path("in/main/private:telegram:42");
    write(&alice.join("MEMORY.md"), "- favourite colour: teal\n- lives in Porto\n");
    write(&alice.join("memory/2026-11-28.md"), "Bought a teal bicycle.\n");
    write(&sandbox.path("in/main/shared:telegram:-100/MEMORY.md"), "The team meets on Mondays.\n");

    assert_eq!(sandbox.memory(&["import", "in"]).trim(), "imported 3 document(s) from in");
    let status = sandbox.memory(&["status"]);
    assert!(status.starts_with("2 scope(s), 3 document(s)"), "{status}");
    assert!(status.contains("embeddings: off (keyword search only)"), "{status}");
    assert!(status.contains("main private:telegram:42: 2 document(s)"), "{status}");

    let found = sandbox.memory(&["search", "teal"]);
    assert_eq!(found.lines().count(), 2, "{found}");
    assert!(found.contains("private:telegram:42 MEMORY.md:1-2") && found.contains("teal bicycle"), "{found}");
    let elsewhere = sandbox.memory(&["search", "teal", "--scope", "shared:telegram:-100"]);
    assert_eq!(elsewhere.trim(), "nothing found");

    let exported = sandbox.memory(&["export", "--to", "out"]);
    assert_eq!(exported.trim(), "exported 3 document(s) to out");
    for file in ["main/private:telegram:42/MEMORY.md", "main/private:telegram:42/memory/2026-11-28.md"] {
        let original = std::fs::read_to_string(sandbox.path(&format!("in/{file}"))).unwrap();
        assert_eq!(std::fs::read_to_string(sandbox.path(&format!("out/{file}"))).unwrap(), original, "{file}");
    }
    let only = sandbox.memory(&["export", "--scope", "shared:telegram:-100", "--to", "team"]);
    assert_eq!(only.trim(), "exported 1 document(s) to team");
}

#[test]
fn a_file_that_is_no_memory_document_is_refused_by_name() {
    let sandbox = Sandbox::new();
    write(&sandbox.path("in/main/private:telegram:42/memory/notes.txt"), "x");
    let refused = error_line(&sandbox.run(&["memory", "import", "in"]));
    assert!(refused.contains("notes.txt"), "{refused}");
    assert!(stderr(&sandbox.run(&["memory", "import", "in"])).contains("memory/<name>.md"));
    assert!(sandbox.memory(&["status"]).starts_with("0 scope(s), 0 document(s)"));
}
