//! The memory room on both state backends, through the store's trait: its own chunking
//! and queries finding notes in any script (punctuation that is syntax to FTS5 or tsquery
//! included), one replica's writes found and built on by another, and no query, however
//! odd, making a malformed full-text expression.

use chrono::NaiveDate;
use proptest::prelude::*;

use super::vectors::VectorCache;
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
        ("cafe", "memory/latin.md"),
        ("CAFÉ", "memory/latin.md"),
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

/// Vectors kept between searches follow the store: another replica's write, new vectors
/// and a removed document are all seen by the next search, and an unchanged scope is not
/// read again.
async fn kept_vectors_follow_every_change_to_their_scope(harness: &Harness) {
    let today = today();
    let store = harness.stores.memory.clone();
    let memory = Memory::new(store.clone(), MemoryConfig::default());
    let other = harness.reopen().await;
    let elsewhere = Memory::new(other.memory.clone(), MemoryConfig::default());
    let embed_all = |store: std::sync::Arc<dyn crate::state::memory::MemoryStore>| async move {
        let todo = store.unembedded("m", 100).await.unwrap();
        let vectors: Vec<(String, Vec<f32>)> = todo.iter().map(|item| (item.hash.clone(), vec![1.0, 0.5])).collect();
        store.put_embeddings("m", &vectors).await.unwrap();
    };
    let cache = VectorCache::default();
    let count = |cache: &VectorCache| {
        let (cache, store) = (cache.clone(), store.clone());
        async move { cache.of(store.as_ref(), &alice(), "m").await.unwrap().nearest(&[1.0, 0.5], 10).len() }
    };
    memory.write(&alice(), Some("MEMORY.md"), "likes tea", &WriteMode::Replace, today).await.unwrap();
    assert_eq!(count(&cache).await, 0, "nothing embedded yet");
    embed_all(store.clone()).await;
    assert_eq!(count(&cache).await, 1, "new vectors are seen");
    let first = cache.of(store.as_ref(), &alice(), "m").await.unwrap();
    assert!(std::sync::Arc::ptr_eq(&first, &cache.of(store.as_ref(), &alice(), "m").await.unwrap()), "kept");

    elsewhere.write(&alice(), Some("memory/trips.md"), "went to Porto", &WriteMode::Replace, today).await.unwrap();
    embed_all(other.memory.clone()).await;
    assert_eq!(count(&cache).await, 2, "another replica's write and vectors are seen");
    let limits = crate::state::memory::MemoryLimits { doc_bytes: 1_000, scope_bytes: 1_000 };
    other.memory.put(&alice(), "memory/trips.md", "", &[], Some(1), limits).await.unwrap();
    assert_eq!(count(&cache).await, 1, "a removed document's vectors are gone");
}

/// A chunk with every word of the query comes before chunks with only some, however often
/// those repeat theirs, and those still follow it.
async fn chunks_with_every_word_come_first(harness: &Harness) {
    let memory = Memory::new(harness.stores.memory.clone(), MemoryConfig::default());
    let today = today();
    let long = format!("{} my car is red {}", "and then we went on ".repeat(20), "before going home ".repeat(20));
    let notes = [("memory/cars.md", "car car car"), ("memory/colours.md", "red red red"), ("memory/mine.md", &long)];
    for (path, text) in notes {
        memory.write(&alice(), Some(path), text, &WriteMode::Replace, today).await.unwrap();
    }
    let found = memory.search(&alice(), "red car", 5, 0.0, None, today).await.unwrap();
    let paths: Vec<&str> = found.iter().map(|found| found.path.as_str()).collect();
    assert_eq!(paths.first(), Some(&"memory/mine.md"), "{paths:?}");
    assert_eq!(paths.len(), 3, "the partial matches follow: {paths:?}");
}

/// A note an older build stored, its accents kept in the index (as version 1 did), is
/// found without them once memory has indexed it again as this build does: on PostgreSQL,
/// whose `simple` configuration folds nothing, it is not found before.
async fn a_note_indexed_by_an_older_build_is_found_without_its_accents(harness: &Harness) {
    use crate::state::memory::{DocChunk, MemoryLimits};

    let store = harness.stores.memory.clone();
    let text = "Crème brûlée at the Café Ågren";
    let old_chunk =
        DocChunk { start_line: 1, end_line: 1, text: text.into(), index_text: text.to_lowercase(), hash: "h".into() };
    let limits = MemoryLimits { doc_bytes: 50_000, scope_bytes: 5_000_000 };
    store.put(&alice(), "MEMORY.md", text, &[old_chunk], None, limits).await.unwrap();
    let memory = Memory::new(store, MemoryConfig::default());
    assert_eq!(memory.index_as_this_version().await.unwrap(), 1);
    assert_eq!(memory.index_as_this_version().await.unwrap(), 0, "once");
    let found = memory.search(&alice(), "creme brulee cafe agren", 5, 0.0, None, today()).await.unwrap();
    assert_eq!(found.iter().map(|found| found.path.as_str()).collect::<Vec<_>>(), ["MEMORY.md"]);
}

conformance!(
    a_note_indexed_by_an_older_build_is_found_without_its_accents,
    chunks_with_every_word_come_first,
    a_memory_written_through_one_replica_is_found_through_another,
    every_script_is_found_with_the_memory_room_s_queries,
    kept_vectors_follow_every_change_to_their_scope
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
