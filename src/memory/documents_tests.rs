use chrono::NaiveDate;

use super::*;
use crate::state::Stores;
use crate::state::sqlite::Database;

async fn memory(config: MemoryConfig) -> (Memory, tempfile::TempDir) {
    let dir = tempfile::tempdir().unwrap();
    let stores = Stores::sqlite(&Database::open(dir.path()).await.unwrap());
    (Memory::new(stores.memory.clone(), config), dir)
}

fn alice() -> MemoryScope {
    MemoryScope::new("main", "private:telegram:alice")
}

fn today() -> NaiveDate {
    NaiveDate::from_ymd_opt(2026, 11, 28).unwrap()
}

#[tokio::test]
async fn an_append_goes_to_today_s_note_on_a_line_of_its_own_and_is_not_kept_twice() {
    let (memory, _dir) = memory(MemoryConfig::default()).await;
    let first = memory.write(&alice(), None, "Met Bob at the café", &WriteMode::Append, today()).await.unwrap();
    assert_eq!((first.path.as_str(), first.version, first.unchanged), ("memory/2026-11-28.md", 1, false));
    memory.write(&alice(), None, "Bob likes chess\n", &WriteMode::Append, today()).await.unwrap();
    let again = memory.write(&alice(), None, "Bob likes chess", &WriteMode::Append, today()).await.unwrap();
    assert!(again.unchanged, "the same fact is not written twice");
    let shorter = memory.write(&alice(), None, "Bob likes", &WriteMode::Append, today()).await.unwrap();
    assert!(!shorter.unchanged, "a line that is only part of another is a fact of its own");
    let text = memory.read(&alice(), "memory/2026-11-28.md", None, None).await.unwrap();
    assert_eq!(text, "Met Bob at the café\nBob likes chess\nBob likes\n");
    assert_eq!(memory.read(&alice(), "memory/2026-11-28.md", Some(2), Some(1)).await.unwrap(), "Bob likes chess");
    assert_eq!(memory.read(&alice(), "MEMORY.md", None, None).await.unwrap(), "", "never written: empty, no error");
}

#[tokio::test]
async fn an_edit_replaces_exactly_the_text_found_once() {
    let (memory, _dir) = memory(MemoryConfig::default()).await;
    let path = Some("MEMORY.md");
    memory.write(&alice(), path, "- lives in Lisbon\n- works at Acme\n", &WriteMode::Replace, today()).await.unwrap();
    let edit = |old: &str| WriteMode::Edit { old_text: old.to_owned() };
    memory.write(&alice(), path, "Porto", &edit("Lisbon"), today()).await.unwrap();
    let missing = memory.write(&alice(), path, "x", &edit("Madrid"), today()).await.unwrap_err();
    assert!(missing.to_string().contains("was not found in MEMORY.md"), "{missing}");
    let twice = memory.write(&alice(), path, "x", &edit("- "), today()).await.unwrap_err();
    assert!(twice.to_string().contains("appears 2 times"), "{twice}");
    memory.write(&alice(), path, "", &edit("- works at Acme\n"), today()).await.unwrap();
    assert_eq!(memory.read(&alice(), "MEMORY.md", None, None).await.unwrap(), "- lives in Porto\n");
}

#[tokio::test]
async fn refusals_say_what_to_do() {
    let config = MemoryConfig { max_document_bytes: 1_000, max_scope_bytes: 1_500, ..MemoryConfig::default() };
    let (memory, _dir) = memory(config).await;
    let outside = memory.write(&alice(), Some("../etc/passwd"), "x", &WriteMode::Append, today()).await.unwrap_err();
    assert!(outside.to_string().contains("memory/<name>.md"), "{outside}");
    let empty = memory.write(&alice(), None, "  \n", &WriteMode::Append, today()).await.unwrap_err();
    assert!(matches!(empty, MemoryError::Empty), "{empty}");
    let big = "x".repeat(1_001);
    let refused = memory.write(&alice(), Some("MEMORY.md"), &big, &WriteMode::Replace, today()).await.unwrap_err();
    assert!(refused.to_string().contains("over the limit of 1000 bytes"), "{refused}");
    memory.write(&alice(), Some("memory/a.md"), &"a".repeat(900), &WriteMode::Replace, today()).await.unwrap();
    let full = memory.write(&alice(), Some("memory/b.md"), &"b".repeat(900), &WriteMode::Replace, today()).await;
    let full = full.unwrap_err().to_string();
    assert!(full.contains("over its limit of 1500 bytes") && full.contains("remove or shorten"), "{full}");
}

#[tokio::test]
async fn concurrent_appends_through_memory_all_land() {
    let (memory, _dir) = memory(MemoryConfig::default()).await;
    let writes = (0..12).map(|n| {
        let memory = memory.clone();
        tokio::spawn(
            async move { memory.write(&alice(), None, &format!("note {n}"), &WriteMode::Append, today()).await },
        )
    });
    for write in writes.collect::<Vec<_>>() {
        write.await.unwrap().unwrap();
    }
    let text = memory.read(&alice(), "memory/2026-11-28.md", None, None).await.unwrap();
    assert_eq!(text.lines().count(), 12, "{text}");
}

#[tokio::test]
async fn forget_removes_matching_lines_everywhere_in_the_scope_and_nowhere_else() {
    let (memory, _dir) = memory(MemoryConfig::default()).await;
    let bob = MemoryScope::new("main", "private:telegram:bob");
    let note = |scope: MemoryScope, path: &'static str, text: &'static str| {
        let memory = memory.clone();
        async move { memory.write(&scope, Some(path), text, &WriteMode::Replace, today()).await.unwrap() }
    };
    note(alice(), "MEMORY.md", "likes tea\nPIN is 1234\n").await;
    note(alice(), "memory/2026-11-27.md", "told me her pin is 1234\n").await;
    note(alice(), "memory/x.md", "pin 1234\n").await;
    note(bob.clone(), "MEMORY.md", "pin is 1234\n").await;
    let removed = memory.forget(&alice(), "PIN IS 1234").await.unwrap();
    assert_eq!(removed, [("MEMORY.md".to_owned(), 1), ("memory/2026-11-27.md".to_owned(), 1)]);
    assert_eq!(memory.read(&alice(), "MEMORY.md", None, None).await.unwrap(), "likes tea\n");
    let listed: Vec<_> = memory.list(&alice()).await.unwrap().into_iter().map(|doc| doc.path).collect();
    assert_eq!(listed, ["MEMORY.md", "memory/x.md"], "an emptied note is gone");
    assert_eq!(
        memory.read(&bob, "MEMORY.md", None, None).await.unwrap(),
        "pin is 1234\n",
        "another scope keeps its own"
    );
}
