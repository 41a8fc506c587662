//! Long-term memory (issue 40) on SQLite: 10,000 documents of about 5 KB (~50 MB of text)
//! in one scope, written through the memory room (chunked and indexed as the agent's writes
//! are), then measured through the same API the tools use:
//!
//! 1. **keyword search**: 300 queries of two or three words, p50 / p99. Target: p50 ≤ 5 ms.
//! 2. **hybrid search**: the same, with every chunk's vector already in the store and the
//!    query embedded by a local fake endpoint (`ferry_fakes::FakeEmbeddings`, 256
//!    dimensions; the HTTP round trip is part of the time). Target: p50 ≤ 20 ms.
//! 3. **a write with re-indexing**: 300 appends to existing documents, p50 / p99. Target:
//!    ≤ 10 ms plus the embedding call (made in the background, so not in this time).
//!
//! Run with `cargo bench --bench memory`; results go in BENCHMARKS.md.

use std::time::{Duration, Instant};

use chrono::NaiveDate;
use ferry::config::{EmbeddingsConfig, Environment, MemoryConfig};
use ferry::memory::embed::Embedder;
use ferry::memory::{Memory, WriteMode};
use ferry::state::memory::MemoryScope;
use ferry::state::{Database, Stores};
use ferry_fakes::FakeEmbeddings;

/// The binary's allocator, so the bench measures what `ferry gateway` runs with.
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

const DOCUMENTS: usize = 10_000;
/// Words per document: ~5 KB of text each.
const WORDS: usize = 800;
const VOCABULARY: usize = 5_000;
const QUERIES: usize = 300;

/// A small deterministic generator (xorshift), so every run measures the same text.
struct Words(u64);

impl Words {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0
    }

    /// A word of the vocabulary, the common ones far more often (roughly Zipf-like).
    fn word(&mut self) -> String {
        let draw = self.next() % (VOCABULARY as u64 * 4);
        let rank = (draw * draw) / (VOCABULARY as u64 * 16);
        format!("w{rank}x")
    }

    fn line(&mut self, words: usize) -> String {
        (0..words).map(|_| self.word()).collect::<Vec<_>>().join(" ")
    }
}

fn main() {
    let runtime = tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build().expect("runtime");
    runtime.block_on(measure());
}

async fn measure() {
    let state = tempfile::tempdir().expect("state dir");
    let database = Database::open(state.path()).await.expect("database");
    let stores = Stores::sqlite(&database);
    let config = MemoryConfig { max_scope_bytes: 1_000_000_000, ..MemoryConfig::default() };
    let memory = Memory::new(stores.memory.clone(), config);
    let scope = MemoryScope::new("main", "private:telegram:42");
    let today = NaiveDate::from_ymd_opt(2026, 11, 28).expect("a date");
    let mut words = Words(0x9e37_79b9_7f4a_7c15);

    let filling = Instant::now();
    let mut bytes = 0;
    for n in 0..DOCUMENTS {
        let text: String = (0..WORDS / 20).map(|_| words.line(20) + "\n").collect();
        bytes += text.len();
        memory
            .write(&scope, Some(&format!("memory/doc-{n:05}.md")), &text, &WriteMode::Replace, today)
            .await
            .expect("write");
    }
    let stats = stores.memory.stats(None).await.expect("stats");
    println!(
        "== memory on SQLite: {DOCUMENTS} documents, {:.1} MB, {} chunks in one scope; written in {:.1} s ==",
        bytes as f64 / 1e6,
        stats.chunks,
        filling.elapsed().as_secs_f64()
    );

    let queries: Vec<String> = (0..QUERIES).map(|n| words.line(2 + n % 2)).collect();
    let mut keyword = Vec::with_capacity(QUERIES);
    for query in &queries {
        let started = Instant::now();
        let found = memory.search(&scope, query, 6, 0.0, None, today).await.expect("search");
        keyword.push(started.elapsed());
        std::hint::black_box(found);
    }
    report("keyword search", &mut keyword, "p50 <= 5 ms");

    let fake = FakeEmbeddings::start().await.expect("fake embeddings");
    let settings = EmbeddingsConfig { base_url: fake.url(), model: "fake-embed".into(), ..EmbeddingsConfig::default() };
    let embedder = Embedder::new(&settings, &Environment::default()).expect("embedder");
    let embedding = Instant::now();
    loop {
        let todo = stores.memory.unembedded("fake-embed", 1_000).await.expect("unembedded");
        if todo.is_empty() {
            break;
        }
        let vectors: Vec<(String, Vec<f32>)> =
            todo.iter().map(|item| (item.hash.clone(), fake.embed(&item.text))).collect();
        stores.memory.put_embeddings("fake-embed", &vectors).await.expect("put embeddings");
    }
    println!("vectors precomputed and stored in {:.1} s", embedding.elapsed().as_secs_f64());
    let mut hybrid = Vec::with_capacity(QUERIES);
    for query in &queries {
        let started = Instant::now();
        let found = memory.search(&scope, query, 6, 0.0, Some(&embedder), today).await.expect("search");
        hybrid.push(started.elapsed());
        std::hint::black_box(found);
    }
    report("hybrid search (vectors precomputed, query embedded over HTTP)", &mut hybrid, "p50 <= 20 ms");

    let mut writes = Vec::with_capacity(QUERIES);
    for n in 0..QUERIES {
        let path = format!("memory/doc-{:05}.md", (n * 31) % DOCUMENTS);
        let line = words.line(20);
        let started = Instant::now();
        memory.write(&scope, Some(&path), &line, &WriteMode::Append, today).await.expect("append");
        writes.push(started.elapsed());
    }
    report("a write (append, re-chunked and re-indexed)", &mut writes, "<= 10 ms");
    drop(stores);
    database.close().await;
}

fn report(what: &str, times: &mut [Duration], target: &str) {
    times.sort();
    let at = |quantile: f64| times[((times.len() as f64 * quantile) as usize).min(times.len() - 1)];
    println!(
        "{what}, {} runs: p50 {:.2} ms, p99 {:.2} ms, max {:.2} ms (target {target})",
        times.len(),
        at(0.5).as_secs_f64() * 1e3,
        at(0.99).as_secs_f64() * 1e3,
        times[times.len() - 1].as_secs_f64() * 1e3
    );
}
