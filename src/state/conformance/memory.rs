//! Long-term memory documents: versions, caps, scopes kept apart, keyword search and
//! embeddings, the same on both backends.

use std::sync::Arc;

use super::{Harness, conformance};
use crate::state::memory::{DocChunk, KEEP_VERSIONS, KeywordQuery, MemoryLimits, MemoryScope, MemoryStore, PutError};

const LIMITS: MemoryLimits = MemoryLimits { doc_bytes: 50_000, scope_bytes: 5_000_000 };

fn alice() -> MemoryScope {
    MemoryScope::new("main", "private:telegram:alice")
}

fn bob() -> MemoryScope {
    MemoryScope::new("main", "private:telegram:bob")
}

/// One chunk per line: enough for the store, which keeps what it is given.
fn chunks(content: &str) -> Vec<DocChunk> {
    content
        .lines()
        .enumerate()
        .filter(|(_, line)| !line.trim().is_empty())
        .map(|(index, line)| DocChunk {
            start_line: index as u32 + 1,
            end_line: index as u32 + 1,
            text: line.to_owned(),
            index_text: line.to_lowercase(),
            hash: format!("h:{line}"),
        })
        .collect()
}

/// Any of `words`, for both backends.
fn any_of(words: &[&str]) -> KeywordQuery {
    KeywordQuery {
        fts5: words.iter().map(|word| format!("\"{word}\"")).collect::<Vec<_>>().join(" OR "),
        tsquery: words.iter().map(|word| format!("'{word}'")).collect::<Vec<_>>().join(" | "),
    }
}

async fn write(store: &dyn MemoryStore, scope: &MemoryScope, path: &str, content: &str) -> i64 {
    let expected = store.get(scope, path).await.unwrap().map(|doc| doc.version);
    store.put(scope, path, content, &chunks(content), expected, LIMITS).await.unwrap()
}

async fn a_write_keeps_the_version_it_replaces(harness: &Harness) {
    let store = harness.stores.memory.as_ref();
    assert_eq!(store.get(&alice(), "MEMORY.md").await.unwrap(), None, "never written");
    assert_eq!(store.put(&alice(), "MEMORY.md", "likes tea", &chunks("likes tea"), None, LIMITS).await.unwrap(), 1);
    assert_eq!(write(store, &alice(), "MEMORY.md", "likes tea\nlives in Lisbon").await, 2);
    let doc = store.get(&alice(), "MEMORY.md").await.unwrap().expect("written");
    assert_eq!((doc.content.as_str(), doc.version), ("likes tea\nlives in Lisbon", 2));
    let versions = store.versions(&alice(), "MEMORY.md", 10).await.unwrap();
    assert_eq!(versions.iter().map(|v| (v.version, v.content.as_str())).collect::<Vec<_>>(), [(1, "likes tea")]);
    write(store, &alice(), "memory/2026-11-28.md", "met Bob").await;
    let listed = harness.reopen().await.memory.list(&alice()).await.unwrap();
    let listed: Vec<_> = listed.iter().map(|doc| (doc.path.as_str(), doc.bytes, doc.version)).collect();
    assert_eq!(listed, [("MEMORY.md", 25, 2), ("memory/2026-11-28.md", 7, 1)]);
}

async fn only_the_newest_versions_are_kept(harness: &Harness) {
    let store = harness.stores.memory.as_ref();
    for n in 0..KEEP_VERSIONS + 5 {
        write(store, &alice(), "MEMORY.md", &format!("fact {n}")).await;
    }
    let versions = store.versions(&alice(), "MEMORY.md", 1000).await.unwrap();
    assert_eq!(versions.len() as i64, KEEP_VERSIONS);
    assert_eq!(versions[0].content, format!("fact {}", KEEP_VERSIONS + 3), "newest first");
}

async fn a_write_on_a_stale_version_is_refused(harness: &Harness) {
    let store = harness.stores.memory.as_ref();
    write(store, &alice(), "MEMORY.md", "one").await;
    let refused = store.put(&alice(), "MEMORY.md", "two", &chunks("two"), Some(7), LIMITS).await;
    assert!(matches!(refused, Err(PutError::Conflict { current: 1, .. })), "{refused:?}");
    let refused = store.put(&alice(), "MEMORY.md", "two", &chunks("two"), None, LIMITS).await;
    assert!(matches!(refused, Err(PutError::Conflict { current: 1, .. })), "a first write when one exists");
    assert_eq!(store.get(&alice(), "MEMORY.md").await.unwrap().unwrap().content, "one");
}

/// Sixteen writers append at once, each redoing its change on a conflict: none is lost.
async fn racing_appends_all_land(harness: &Harness) {
    let store: Arc<dyn MemoryStore> = harness.stores.memory.clone();
    let writers = (0..16).map(|n| {
        let store = store.clone();
        tokio::spawn(async move {
            loop {
                let doc = store.get(&alice(), "memory/2026-11-28.md").await.unwrap();
                let content = match &doc {
                    Some(doc) => format!("{}\nline {n}", doc.content),
                    None => format!("line {n}"),
                };
                let expected = doc.map(|doc| doc.version);
                match store.put(&alice(), "memory/2026-11-28.md", &content, &chunks(&content), expected, LIMITS).await {
                    Ok(_) => break,
                    Err(PutError::Conflict { .. }) => tokio::task::yield_now().await,
                    Err(error) => panic!("{error}"),
                }
            }
        })
    });
    for writer in writers.collect::<Vec<_>>() {
        writer.await.unwrap();
    }
    let doc = store.get(&alice(), "memory/2026-11-28.md").await.unwrap().unwrap();
    let mut lines: Vec<_> = doc.content.lines().collect();
    lines.sort();
    let mut wanted: Vec<String> = (0..16).map(|n| format!("line {n}")).collect();
    wanted.sort();
    assert_eq!(lines, wanted);
    assert_eq!(doc.version, 16);
}

async fn writes_past_a_cap_are_refused_and_shrinking_is_not(harness: &Harness) {
    let store = harness.stores.memory.as_ref();
    let limits = MemoryLimits { doc_bytes: 100, scope_bytes: 150 };
    let long = "x".repeat(101);
    let refused = store.put(&alice(), "MEMORY.md", &long, &[], None, limits).await;
    assert!(matches!(refused, Err(PutError::DocTooLarge { bytes: 101, limit: 100, .. })), "{refused:?}");
    store.put(&alice(), "MEMORY.md", &"a".repeat(100), &[], None, limits).await.unwrap();
    let refused = store.put(&alice(), "memory/a.md", &"b".repeat(51), &[], None, limits).await;
    assert!(matches!(refused, Err(PutError::ScopeFull { bytes: 151, limit: 150 })), "{refused:?}");
    store.put(&alice(), "memory/a.md", &"b".repeat(50), &[], None, limits).await.unwrap();
    // Another scope has room of its own.
    store.put(&bob(), "memory/a.md", &"c".repeat(100), &[], None, limits).await.unwrap();
    // Full: a shorter version still goes in, and frees room.
    let limits = MemoryLimits { scope_bytes: 80, ..limits };
    store.put(&alice(), "MEMORY.md", &"a".repeat(40), &[], Some(1), limits).await.unwrap();
    let summary = store.scopes(Some("main")).await.unwrap();
    let totals: Vec<_> = summary.iter().map(|s| (s.scope.scope.as_str(), s.docs, s.bytes)).collect();
    assert_eq!(totals, [("private:telegram:alice", 2, 90), ("private:telegram:bob", 1, 100)]);
}

async fn search_finds_only_the_scope_it_is_asked_in(harness: &Harness) {
    let store = harness.stores.memory.as_ref();
    write(store, &alice(), "MEMORY.md", "# Alice\nfavourite colour: teal\nallergic to peanuts").await;
    write(store, &bob(), "MEMORY.md", "favourite colour: orange").await;
    let other_agent = MemoryScope::new("helper", "private:telegram:alice");
    write(store, &other_agent, "MEMORY.md", "favourite colour: purple").await;

    let hits = store.search(&alice(), &any_of(&["peanuts"]), 10).await.unwrap();
    let found: Vec<_> =
        hits.iter().map(|hit| (hit.path.as_str(), hit.start_line, hit.end_line, hit.text.as_str())).collect();
    assert_eq!(found, [("MEMORY.md", 3, 3, "allergic to peanuts")]);
    for (scope, colour) in [(alice(), "teal"), (bob(), "orange"), (other_agent, "purple")] {
        let hits = store.search(&scope, &any_of(&["colour"]), 10).await.unwrap();
        let texts: Vec<_> = hits.iter().map(|hit| hit.text.clone()).collect();
        assert_eq!(texts, [format!("favourite colour: {colour}")], "{scope:?}");
    }
    assert!(store.search(&bob(), &any_of(&["peanuts", "teal"]), 10).await.unwrap().is_empty());
    let unknown = MemoryScope::new("main", "shared:telegram:-100");
    assert!(store.search(&unknown, &any_of(&["colour"]), 10).await.unwrap().is_empty());
    assert!(store.list(&unknown).await.unwrap().is_empty());
}

async fn search_ranks_better_matches_first_and_forgets_replaced_text(harness: &Harness) {
    let store = harness.stores.memory.as_ref();
    write(store, &alice(), "memory/trips.md", "trip to Porto\ntrip to Porto by train, Porto again\nbought bread").await;
    let hits = store.search(&alice(), &any_of(&["porto", "train"]), 10).await.unwrap();
    assert_eq!(hits.len(), 2);
    assert_eq!(hits[0].start_line, 2, "the line with more matches ranks first: {hits:?}");
    assert!(hits[0].score > hits[1].score);
    assert_eq!(store.search(&alice(), &any_of(&["porto"]), 1).await.unwrap().len(), 1, "the limit holds");

    write(store, &alice(), "memory/trips.md", "bought bread").await;
    assert!(store.search(&alice(), &any_of(&["porto"]), 10).await.unwrap().is_empty(), "old chunks are gone");
    // Empty content removes the document, its chunks and its count.
    write(store, &alice(), "memory/trips.md", "").await;
    assert_eq!(store.get(&alice(), "memory/trips.md").await.unwrap(), None);
    assert!(store.search(&alice(), &any_of(&["bread"]), 10).await.unwrap().is_empty());
    assert!(store.scopes(None).await.unwrap().is_empty(), "an empty scope is not listed");
    assert_eq!(write(store, &alice(), "memory/trips.md", "again").await, 1, "written anew");
}

async fn embeddings_are_kept_per_text_and_model(harness: &Harness) {
    let store = harness.stores.memory.as_ref();
    write(store, &alice(), "MEMORY.md", "likes tea\nlives in Lisbon").await;
    write(store, &bob(), "MEMORY.md", "likes tea").await;
    let mut todo = store.unembedded("small", 100).await.unwrap();
    todo.sort_by(|a, b| a.hash.cmp(&b.hash));
    let texts: Vec<_> = todo.iter().map(|item| item.text.as_str()).collect();
    assert_eq!(texts, ["likes tea", "lives in Lisbon"], "the same text in two scopes is embedded once");
    let vectors: Vec<(String, Vec<f32>)> =
        todo.iter().enumerate().map(|(n, item)| (item.hash.clone(), vec![n as f32, 0.5, -1.0])).collect();
    let revisions = (store.revision(&alice()).await.unwrap(), store.revision(&bob()).await.unwrap());
    store.put_embeddings("small", &vectors).await.unwrap();
    assert!(store.revision(&alice()).await.unwrap() > revisions.0, "new vectors are a new revision");
    assert!(store.revision(&bob()).await.unwrap() > revisions.1, "of every scope holding the text");
    assert!(store.unembedded("small", 100).await.unwrap().is_empty());
    assert_eq!(store.unembedded("large", 100).await.unwrap().len(), 2, "another model embeds anew");

    let mut alices = store.vectors(&alice(), "small").await.unwrap();
    alices.sort_by_key(|chunk| chunk.start_line);
    let got: Vec<_> = alices.iter().map(|chunk| (chunk.start_line, chunk.vector.clone())).collect();
    assert_eq!(got, [(1, vec![0.0, 0.5, -1.0]), (2, vec![1.0, 0.5, -1.0])]);
    let ids: Vec<i64> = alices.iter().map(|chunk| chunk.id).collect();
    let mut texts = store.chunk_texts(&alice(), &ids).await.unwrap();
    texts.sort();
    assert_eq!(texts, [(ids[0], "likes tea".to_owned()), (ids[1], "lives in Lisbon".to_owned())]);
    assert!(store.chunk_texts(&bob(), &ids).await.unwrap().is_empty(), "never another scope's text");
    assert_eq!(store.vectors(&bob(), "small").await.unwrap().len(), 1);
    assert!(store.vectors(&alice(), "large").await.unwrap().is_empty());

    let stats = store.stats(Some("small")).await.unwrap();
    assert_eq!((stats.scopes, stats.docs, stats.chunks, stats.embedded, stats.unembedded), (2, 2, 3, 2, 0));
    let before = store.revision(&alice()).await.unwrap();
    write(store, &alice(), "MEMORY.md", "likes coffee").await;
    assert!(store.revision(&alice()).await.unwrap() > before, "a write is a new revision");
    assert!(store.chunk_texts(&alice(), &ids).await.unwrap().is_empty(), "a rewritten document's chunks are gone");
    assert_eq!(store.revision(&MemoryScope::new("main", "shared:nobody")).await.unwrap(), 0);
    let stats = harness.reopen().await.memory.stats(Some("small")).await.unwrap();
    assert_eq!((stats.chunks, stats.embedded, stats.unembedded), (2, 1, 1), "the new text waits for its vector");
}

/// A newer normalization than the lowercase one [`chunks`] indexes by: it adds a word.
fn with_fruit(text: &str) -> String {
    text.to_lowercase().replace("kiwi", "kiwi fruit")
}

async fn chunks_indexed_by_an_older_normalization_are_indexed_again_once(harness: &Harness) {
    let store = harness.stores.memory.as_ref();
    write(store, &alice(), "MEMORY.md", "likes kiwi\nlives in Lisbon").await;
    write(store, &bob(), "MEMORY.md", "kiwi allergy").await;
    assert!(store.search(&alice(), &any_of(&["fruit"]), 10).await.unwrap().is_empty(), "indexed as written");
    assert_eq!(store.reindex(2, with_fruit).await.unwrap(), 3, "every chunk, of every scope");
    let hits = store.search(&alice(), &any_of(&["fruit"]), 10).await.unwrap();
    assert_eq!(hits.iter().map(|hit| hit.text.as_str()).collect::<Vec<_>>(), ["likes kiwi"], "the text is kept");
    assert_eq!(store.search(&bob(), &any_of(&["fruit"]), 10).await.unwrap().len(), 1);
    assert_eq!(store.search(&alice(), &any_of(&["lisbon"]), 10).await.unwrap().len(), 1, "the rest still found");
    assert_eq!(store.reindex(2, with_fruit).await.unwrap(), 0, "once");
    let reopened = harness.reopen().await;
    assert_eq!(reopened.memory.reindex(2, with_fruit).await.unwrap(), 0, "the version is kept");
    assert_eq!(reopened.memory.reindex(1, with_fruit).await.unwrap(), 0, "never back to an older one");
    assert_eq!(reopened.memory.reindex(3, str::to_lowercase).await.unwrap(), 3, "a newer one indexes again");
    assert!(reopened.memory.search(&alice(), &any_of(&["fruit"]), 10).await.unwrap().is_empty());
}

conformance!(
    a_write_keeps_the_version_it_replaces,
    only_the_newest_versions_are_kept,
    a_write_on_a_stale_version_is_refused,
    racing_appends_all_land,
    writes_past_a_cap_are_refused_and_shrinking_is_not,
    search_finds_only_the_scope_it_is_asked_in,
    search_ranks_better_matches_first_and_forgets_replaced_text,
    embeddings_are_kept_per_text_and_model,
    chunks_indexed_by_an_older_normalization_are_indexed_again_once,
);
