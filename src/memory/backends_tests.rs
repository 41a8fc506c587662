//! The memory room on both state backends, through the store's trait: its own chunking
//! and queries finding notes in any script (punctuation that is syntax to FTS5 or tsquery
//! included), one replica's writes found and built on by another, and no query, however
//! odd, making a malformed full-text expression.

use chrono::NaiveDate;
use proptest::prelude::*;

use super::{Memory, WriteMode};
use crate::config::MemoryConfig;
use crate::state::Stores;
use crate::state::conformance::{Harness, conformance};
use crate::state::memory::MemoryScope;
use crate::state::sqlite::Database;

fn alice() -> MemoryScope {
    MemoryScope::new("main", "private:telegram:alice")
}

fn bob() -> MemoryScope {
    MemoryScope::new("main", "private:telegram:bob")
}

fn today() -> NaiveDate {
    NaiveDate::from_ymd_opt(2026, 11, 28).unwrap()
}

/// Through the memory room's own chunking and queries: words in any script, and
/// punctuation that would be syntax to either backend's full-text search, find their note
/// and no other.
async fn every_script_is_found_with_the_memory_room_s_queries(harness: &Harness) {
    let memory = Memory::new(harness.stores.memory.clone(), MemoryConfig::default());
    let today = today();
    let notes = [
        ("memory/latin.md", "Alice met O'Brien at the café (NEAR the park)."),
        ("memory/cyrillic.md", "Встреча в МОСКВЕ, столица."),
        ("memory/japanese.md", "昨日東京タワーに行った。"),
        ("memory/korean.md", "서울에서 친구를 만났다"),
        ("memory/paths.md", r"mail bob@example.com, path C:\Users\bob"),
    ];
    for (path, text) in notes {
        memory.write(&alice(), Some(path), text, &WriteMode::Replace, today).await.unwrap();
    }
    for (query, path) in [
        ("москве", "memory/cyrillic.md"),
        ("東京タワーに行きたい", "memory/japanese.md"),
        ("서울", "memory/korean.md"),
        ("O'Brien", "memory/latin.md"),
        ("bob@example.com", "memory/paths.md"),
        (r"C:\Users", "memory/paths.md"),
        (r#""park" AND (near) NOT -x*"#, "memory/latin.md"),
    ] {
        let found = memory.search(&alice(), query, 5, 0.0, None, today).await.unwrap();
        let paths: Vec<&str> = found.iter().map(|found| found.path.as_str()).collect();
        assert_eq!(paths, [path], "{query}");
    }
    assert!(memory.search(&alice(), "😀 ^*", 5, 0.0, None, today).await.unwrap().is_empty());
    assert!(memory.search(&bob(), "москве", 5, 0.0, None, today).await.unwrap().is_empty(), "Bob's scope is his");
}

/// What one replica writes, another (its own connections: [`Harness::reopen`]) finds and
/// builds on: shared state, not a per-process copy.
async fn a_memory_written_through_one_replica_is_found_through_another(harness: &Harness) {
    let today = today();
    let first = Memory::new(harness.stores.memory.clone(), MemoryConfig::default());
    let other = harness.reopen().await;
    let second = Memory::new(other.memory.clone(), MemoryConfig::default());
    first.write(&alice(), None, "parked on level 3", &WriteMode::Append, today).await.unwrap();
    let found = second.search(&alice(), "parked", 5, 0.0, None, today).await.unwrap();
    assert_eq!(found.iter().map(|found| found.path.as_str()).collect::<Vec<_>>(), ["memory/2026-11-28.md"]);
    second.write(&alice(), None, "near the blue door", &WriteMode::Append, today).await.unwrap();
    let note = first.read(&alice(), "memory/2026-11-28.md", None, None).await.unwrap();
    assert_eq!(note, "parked on level 3\nnear the blue door\n", "the second replica appended to the first's note");
}

conformance!(
    a_memory_written_through_one_replica_is_found_through_another,
    every_script_is_found_with_the_memory_room_s_queries
);

/// Any text at all, as a query, searches without error (SQLite's FTS5 refuses a malformed
/// `MATCH` with an error, not an empty result).
#[test]
fn no_query_makes_a_malformed_full_text_expression() {
    let runtime = tokio::runtime::Builder::new_multi_thread().worker_threads(1).enable_all().build().unwrap();
    let dir = tempfile::tempdir().unwrap();
    let memory = runtime.block_on(async {
        let stores = Stores::sqlite(&Database::open(dir.path()).await.unwrap());
        let memory = Memory::new(stores.memory.clone(), MemoryConfig::default());
        memory.write(&alice(), None, "some text 東京 and \"quotes\"", &WriteMode::Append, today()).await.unwrap();
        memory
    });
    let mut runner = proptest::test_runner::TestRunner::new(ProptestConfig::with_cases(300));
    runner
        .run(&any::<String>(), |query| {
            let searched = runtime.block_on(memory.search(&alice(), &query, 5, 0.0, None, today()));
            prop_assert!(searched.is_ok(), "{query:?}: {searched:?}");
            Ok(())
        })
        .unwrap();
}
