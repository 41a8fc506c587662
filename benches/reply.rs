//! Reply-pipeline benchmarks: the block chunker (SPEC §7) on a ~100 KB markdown reply —
//! paragraphs, lists, sentences in several scripts and a few code blocks, some longer than
//! a block — cut whole with `chunk_text` (target ≥ 50 MB/s), and streamed in model-sized
//! deltas through a `BlockChunker`.
//!
//! The `ledger` group streams block messages under the delivery ledger, over a store whose
//! every write costs a database round trip (1 ms, `state::intercept`), on a platform that cannot settle a
//! repeated send (Telegram) and on one that can (Slack): the time per block message is the
//! ledger writes its send waits for. It also prints how many records each message wrote.
//!
//! Run with `cargo bench --bench reply`; results go in BENCHMARKS.md.

use std::hint::black_box;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use async_trait::async_trait;
use criterion::{Criterion, Throughput, criterion_group, criterion_main};

use ferry::channel::memory::MemoryChannel;
use ferry::channel::{ChannelCapabilities, ChatKind, ChatRef, MarkupDialect, SendReconciliation, Target};
use ferry::config::HumanDelay;
use ferry::reply::chunker::{BlockChunker, BreakMode, ChunkLimits, chunk_text};
use ferry::reply::coalesce::{BlockFormat, Coalescer};
use ferry::reply::ledger::{DeliveryLedger, RecoveredSends};
use ferry::reply::outbound::OutboundScheduler;
use ferry::state::StorageError;
use ferry::state::intercept::{BeforeWrite, Intercepted};
use ferry::state::sqlite::inbound_log::InboundLog;

/// A markdown reply of about `target` bytes, the way a model writes one.
fn markdown_reply(target: usize) -> String {
    let sentences = [
        "The gateway keeps one lane per session, so messages from the same chat never race.",
        "Each run streams its text back as it is written!",
        "Why does the queue journal every message before it runs?",
        "Ünïcödé and emoji 🦀 count as one character each, not as bytes.",
        "日本語の文章も同じように数えます。",
    ];
    let mut reply = String::new();
    let mut section = 0;
    while reply.len() < target {
        section += 1;
        reply.push_str(&format!("## Part {section}\n\n"));
        for paragraph in 0..3 {
            for i in 0..6 {
                reply.push_str(sentences[(section + paragraph + i) % sentences.len()]);
                reply.push(' ');
            }
            reply.push_str("\n\n");
        }
        for item in 0..5 {
            reply.push_str(&format!("- item {item}: **{}**\n", sentences[item % sentences.len()]));
        }
        reply.push('\n');
        if section % 3 == 0 {
            // Every third section has a code block; every sixth one is longer than a block.
            let lines = if section % 6 == 0 { 60 } else { 15 };
            reply.push_str("```rust\n");
            for line in 0..lines {
                reply.push_str(&format!("    let value_{line} = lanes.admit(session_key, {line}).await?;\n"));
            }
            reply.push_str("```\n\n");
        }
    }
    reply
}

fn block_chunker(c: &mut Criterion) {
    let reply = markdown_reply(100_000);
    let limits = ChunkLimits::default();
    let mut group = c.benchmark_group("chunker");
    group.throughput(Throughput::Bytes(reply.len() as u64));
    group.bench_function("chunk_text_100kb_markdown", |b| b.iter(|| chunk_text(black_box(&reply), &limits).len()));
    // Models stream a few characters per delta; 16 bytes (at a character boundary) is typical.
    let deltas: Vec<&str> = {
        let (mut deltas, mut rest) = (Vec::new(), reply.as_str());
        while !rest.is_empty() {
            let at = rest.char_indices().nth(16).map_or(rest.len(), |(i, _)| i);
            deltas.push(&rest[..at]);
            rest = &rest[at..];
        }
        deltas
    };
    group.bench_function("streamed_100kb_markdown_16_char_deltas", |b| {
        b.iter(|| {
            let mut chunker = BlockChunker::new(limits, BreakMode::MessageEnd);
            let blocks: usize = deltas.iter().map(|delta| chunker.push(black_box(delta)).len()).sum();
            blocks + chunker.message_end().len()
        })
    });
    group.finish();
}

/// A database's round trip: every write waits `delay` first; delivery records are counted.
#[derive(Debug)]
struct RoundTrip {
    delay: Duration,
    records: AtomicU64,
}

#[async_trait]
impl BeforeWrite for RoundTrip {
    async fn before_write(&self, body: Option<&str>) -> Result<(), StorageError> {
        tokio::time::sleep(self.delay).await;
        if body.is_some() {
            self.records.fetch_add(1, Ordering::Relaxed);
        }
        Ok(())
    }
}

/// Block messages a reply streams in one iteration.
const BLOCK_MESSAGES: u64 = 20;

/// Streams [`BLOCK_MESSAGES`] block messages of one reply (each block alone: no idle wait
/// merges them) under the ledger, on a channel that settles repeats as `reconciliation`
/// says. Returns the time taken.
async fn stream_blocks(
    store: &Arc<Intercepted<RoundTrip>>,
    reconciliation: SendReconciliation,
    reply: u64,
) -> Duration {
    let capabilities =
        ChannelCapabilities { send_reconciliation: reconciliation, ..ChannelCapabilities::unrestricted() };
    let channel = Arc::new(MemoryChannel::with_capabilities("memory", "default", capabilities));
    let target = Target { chat: ChatRef::new(ChatKind::Direct, "42"), thread_id: None };
    let ledger = DeliveryLedger::new(store.clone());
    let format = BlockFormat { text_limit: 4000, markup: MarkupDialect::Plain, max_lines: None };
    let scheduler = OutboundScheduler::new(channel);
    let mut coalescer = Coalescer::new(scheduler, target, "run", Duration::ZERO, format, HumanDelay::Off);
    coalescer.record_with(ledger.sends(ledger.recorder(vec![1]), RecoveredSends::default()));
    let start = Instant::now();
    for block in 0..BLOCK_MESSAGES {
        coalescer.push(format!("Reply {reply}, block {block}: the lanes keep each chat in order."), "\n\n").await;
    }
    black_box(coalescer.finish().await);
    start.elapsed()
}

fn ledger_block_messages(c: &mut Criterion) {
    let runtime = tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build().unwrap();
    let dir = tempfile::tempdir().unwrap();
    let log = InboundLog::open(&dir.path().join("inbound.log")).unwrap();
    let mut group = c.benchmark_group("ledger");
    group.throughput(Throughput::Elements(BLOCK_MESSAGES));
    for (name, reconciliation) in
        [("telegram_block_messages", SendReconciliation::None), ("slack_block_messages", SendReconciliation::Lookup)]
    {
        let hook = RoundTrip { delay: Duration::from_millis(1), records: AtomicU64::new(0) };
        let store = Arc::new(Intercepted { log: log.clone(), hook });
        let replies = AtomicU64::new(0);
        group.bench_function(name, |b| {
            b.to_async(&runtime).iter_custom(|iterations| {
                let (store, replies) = (&store, &replies);
                async move {
                    let mut total = Duration::ZERO;
                    for _ in 0..iterations {
                        total += stream_blocks(store, reconciliation, replies.fetch_add(1, Ordering::Relaxed)).await;
                    }
                    total
                }
            })
        });
        let (records, replies) = (store.hook.records.load(Ordering::Relaxed), replies.load(Ordering::Relaxed));
        eprintln!("{name}: {:.2} ledger records per block message", records as f64 / (replies * BLOCK_MESSAGES) as f64);
    }
    group.finish();
}

criterion_group!(benches, block_chunker, ledger_block_messages);
criterion_main!(benches);
