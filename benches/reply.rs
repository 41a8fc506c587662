//! Reply-pipeline benchmarks: the block chunker (SPEC §7) on a ~100 KB markdown reply —
//! paragraphs, lists, sentences in several scripts and a few code blocks, some longer than
//! a block — cut whole with `chunk_text` (target ≥ 50 MB/s), and streamed in model-sized
//! deltas through a `BlockChunker`.
//!
//! Run with `cargo bench --bench reply`; results go in BENCHMARKS.md.

use std::hint::black_box;

use criterion::{Criterion, Throughput, criterion_group, criterion_main};

use ferry::reply::chunker::{BlockChunker, BreakMode, ChunkLimits, chunk_text};

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

criterion_group!(benches, block_chunker);
criterion_main!(benches);
