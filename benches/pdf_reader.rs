//! What reading a PDF out of process costs (issue 41): a normal PDF's text read in the
//! daemon's process (as before: `pdf_text` on a blocking thread) against through a
//! [`FileReader`] (a confined child of the `ferry` binary, as the daemon does now). The timer
//! runs from the call to the text. Interleaved, so load on the machine hits both alike.
//! Prints p50/p99 per variant and the difference.
//!
//! `cargo bench --bench pdf_reader` (`PDF_BENCH_N` sets the rounds; default 100).

use std::time::{Duration, Instant};

use ferry::media::{FileReader, ReaderLimits, pdf_text};

/// A one-page report of 40 lines: a typical invoice or letter.
fn normal_pdf() -> Vec<u8> {
    let lines: Vec<String> = (1..=40).map(|n| format!("Line {n}: revenue grew by {n} percent this quarter.")).collect();
    let lines: Vec<&str> = lines.iter().map(String::as_str).collect();
    ferry_fakes::pdfs::text_pdf(&lines)
}

async fn in_process(bytes: &[u8]) -> Duration {
    let bytes = bytes.to_vec();
    let started = Instant::now();
    let text = tokio::task::spawn_blocking(move || pdf_text(&bytes)).await.expect("joined").expect("text");
    let took = started.elapsed();
    assert!(text.contains("Line 40"));
    took
}

async fn in_child(reader: &FileReader, bytes: &[u8]) -> Duration {
    let started = Instant::now();
    let read = reader.pdf_text(bytes.to_vec(), 20_000).await.expect("text");
    let took = started.elapsed();
    assert!(read.text.contains("Line 40"));
    took
}

fn percentile(sorted: &[Duration], p: f64) -> f64 {
    let index = ((sorted.len() as f64 - 1.0) * p).round() as usize;
    sorted[index].as_secs_f64() * 1000.0
}

#[tokio::main]
async fn main() {
    let rounds: usize = std::env::var("PDF_BENCH_N").ok().and_then(|n| n.parse().ok()).unwrap_or(100);
    let limits = ReaderLimits { timeout: Duration::from_secs(20), memory_bytes: 512 << 20 };
    let reader = FileReader::new(env!("CARGO_BIN_EXE_ferry").into(), limits);
    let bytes = normal_pdf();
    for _ in 0..5 {
        in_process(&bytes).await;
        in_child(&reader, &bytes).await;
    }
    let (mut inside, mut outside) = (Vec::new(), Vec::new());
    for _ in 0..rounds {
        inside.push(in_process(&bytes).await);
        outside.push(in_child(&reader, &bytes).await);
    }
    inside.sort();
    outside.sort();
    println!("a {}-byte PDF's text, {rounds} rounds each, interleaved (ms)", bytes.len());
    for (name, samples) in [("in the daemon's process", &inside), ("in a confined child", &outside)] {
        println!("{name:<26} p50 {:>6.2}  p99 {:>6.2}", percentile(samples, 0.5), percentile(samples, 0.99));
    }
    println!("{:<26} p50 {:>+6.2}", "added by the child", percentile(&outside, 0.5) - percentile(&inside, 0.5));
}
