//! The file reader with the real `ferry` binary as its child: PDFs read out of process,
//! and hostile ones ended by the deadline or the memory limit, their processes gone.

use std::time::Duration;

use ferry::media::{FileReader, PdfError, PdfText, ReaderLimits};
use ferry_fakes::pdfs::{cmap_bomb_pdf, endless_pdf, text_pdf};

use super::daemon::PATIENCE;

/// A reader with `timeout` and `memory_mb`; a `memory_mb` of its own also marks the test's
/// children, whose command line carries it (see [`children_marked`]).
fn reader(timeout: Duration, memory_mb: u64) -> FileReader {
    FileReader::new(env!("CARGO_BIN_EXE_ferry").into(), ReaderLimits { timeout, memory_bytes: memory_mb << 20 })
}

/// Processes whose command line holds `"data_bytes":<memory_mb in bytes>`: this test's
/// parsers, wherever the kernel has put them.
fn children_marked(memory_mb: u64) -> Vec<u32> {
    let marker = format!("\"data_bytes\":{}", memory_mb << 20);
    let Ok(entries) = std::fs::read_dir("/proc") else { return Vec::new() };
    entries
        .filter_map(|entry| entry.ok()?.file_name().to_str()?.parse::<u32>().ok())
        .filter(|pid| {
            std::fs::read(format!("/proc/{pid}/cmdline"))
                .is_ok_and(|cmdline| String::from_utf8_lossy(&cmdline).contains(&marker))
        })
        .collect()
}

#[tokio::test]
async fn a_pdf_is_read_in_a_child_and_its_text_cut_where_asked() {
    let reader = reader(PATIENCE, 512);
    let bytes = text_pdf(&["Quarterly report", "Revenue grew."]);
    let read = reader.pdf_text(bytes.clone(), 100).await;
    assert_eq!(read, Ok(PdfText { text: "Quarterly report\nRevenue grew.".into(), more_chars: 0 }));
    let cut = reader.pdf_text(bytes, 9).await;
    assert_eq!(cut, Ok(PdfText { text: "Quarterly".into(), more_chars: 21 }));
}

#[tokio::test]
async fn what_the_parser_finds_comes_back_as_its_error() {
    let reader = reader(PATIENCE, 512);
    let garbage = reader.pdf_text(b"not a pdf at all".to_vec(), 100).await;
    assert!(matches!(garbage, Err(PdfError::Unreadable(_))), "{garbage:?}");
    let no_text = ferry_fakes::pdfs::text_pdf(&[]);
    assert_eq!(reader.pdf_text(no_text, 100).await, Err(PdfError::NoText));
}

#[tokio::test]
async fn a_pdf_that_makes_the_parser_loop_is_too_slow_and_its_processes_are_killed() {
    const MARK_MB: u64 = 519;
    let deadline = Duration::from_secs(2);
    let read = tokio::time::timeout(PATIENCE, reader(deadline, MARK_MB).pdf_text(endless_pdf(), 100)).await;
    assert_eq!(read.expect("the reader answers"), Err(PdfError::TooSlow(deadline)));
    tokio::time::timeout(PATIENCE, async {
        while !children_marked(MARK_MB).is_empty() {
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    })
    .await
    .unwrap_or_else(|_| panic!("the parser's processes are still there: {:?}", children_marked(MARK_MB)));
}

#[tokio::test]
async fn a_pdf_that_eats_memory_ends_at_the_memory_limit() {
    let read = tokio::time::timeout(PATIENCE, reader(PATIENCE, 256).pdf_text(cmap_bomb_pdf(), 100)).await;
    assert_eq!(read.expect("the reader answers"), Err(PdfError::OutOfMemory(256)));
}

/// Process groups of the processes [`children_marked`] finds: one per parser running.
fn parsers_marked(memory_mb: u64) -> std::collections::HashSet<String> {
    children_marked(memory_mb)
        .into_iter()
        .filter_map(|pid| {
            let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
            // After the command name in parentheses: state, parent, process group.
            let after_name = stat.rsplit_once(") ")?.1.to_owned();
            after_name.split(' ').nth(2).map(str::to_owned)
        })
        .collect()
}

#[tokio::test]
async fn files_sent_at_once_are_parsed_one_at_a_time_when_one_parser_may_run() {
    const MARK_MB: u64 = 521;
    let deadline = Duration::from_secs(2);
    let reader = reader(deadline, MARK_MB).at_most(1);
    let both = async { tokio::join!(reader.pdf_text(endless_pdf(), 100), reader.pdf_text(endless_pdf(), 100)) };
    let watch = async {
        let mut most = 0;
        loop {
            most = most.max(parsers_marked(MARK_MB).len());
            tokio::time::sleep(Duration::from_millis(20)).await;
            if most > 1 {
                return most;
            }
        }
    };
    let (first, second) = tokio::select! {
        reads = tokio::time::timeout(PATIENCE, both) => reads.expect("the reader answers"),
        most = watch => panic!("{most} parsers ran at once"),
    };
    assert_eq!((first, second), (Err(PdfError::TooSlow(deadline)), Err(PdfError::TooSlow(deadline))));
}
