//! What reading a PDF out of process costs (issue 41): a normal PDF's text read in the
//! daemon's process (as before: `pdf_text` on a blocking thread) against through a
//! [`FileReader`] (a confined child of the `ferry` binary, as the daemon does now). The timer
//! runs from the call to the text. Interleaved, so load on the machine hits both alike.
//! Prints p50/p99 per variant and the difference.
//!
//! `cargo bench --bench pdf_reader` (`PDF_BENCH_N` sets the rounds; default 100).

use std::time::{Duration, Instant};

use ferry::media::{FileReader, ReaderLimits, pdf_text};

#[path = "common/interleaved.rs"]
mod interleaved;

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

#[tokio::main]
async fn main() {
    let rounds = interleaved::rounds("PDF_BENCH_N", 100);
    let limits = ReaderLimits { timeout: Duration::from_secs(20), memory_bytes: 512 << 20 };
    let reader = FileReader::new(env!("CARGO_BIN_EXE_ferry").into(), limits);
    let bytes = normal_pdf();
    let (inside, outside) =
        interleaved::interleaved(5, rounds, || in_process(&bytes), || in_child(&reader, &bytes)).await;
    println!("a {}-byte PDF's text, {rounds} rounds each, interleaved (ms)", bytes.len());
    interleaved::report(("in the daemon's process", &inside), ("in a confined child", &outside), "added by the child");
}
