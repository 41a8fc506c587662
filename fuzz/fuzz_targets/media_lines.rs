//! `MEDIA:` lines in a model's reply (`src/reply/media_lines.rs`): what a reply attaches, and
//! the text without them, whole and while it streams.
//!
//! Asserts: never panics; every named file is non-empty and trimmed; the shown text has no
//! media line outside a fenced block and is made of the input's own lines, in order; text
//! without the marker is shown as it is; a reply that ends with a line break streams to
//! exactly what it shows when final; the streaming text is a prefix of the input's lines
//! with only media lines and an unfinished last line left out.
#![no_main]

use ferry::reply::media_lines::{MARKER, split, strip_streaming};
use libfuzzer_sys::fuzz_target;

/// Whether `line` (of `text`'s lines, in order) is shown outside a fenced block and starts
/// with the marker.
fn unfenced_media_lines(text: &str) -> usize {
    let mut fenced = false;
    let mut found = 0;
    for line in text.split_inclusive('\n') {
        let content = line.trim_start();
        if content.starts_with("```") || content.starts_with("~~~") {
            fenced = !fenced;
        }
        if !fenced && content.starts_with(MARKER) {
            found += 1;
        }
    }
    found
}

/// Whether `shown`'s lines are a subsequence of `text`'s lines.
fn lines_from(shown: &str, text: &str) -> bool {
    let mut source = text.split_inclusive('\n');
    shown.split_inclusive('\n').all(|line| source.any(|candidate| candidate == line || candidate.starts_with(line)))
}

fuzz_target!(|data: &[u8]| {
    let text = String::from_utf8_lossy(data);
    let final_split = split(&text);
    for named in &final_split.media {
        assert!(!named.is_empty() && named.trim() == named, "{named:?}");
    }
    assert_eq!(unfenced_media_lines(&final_split.text), 0, "a media line is shown: {:?}", final_split.text);
    assert!(lines_from(&final_split.text, &text), "{:?} is not made of {:?}'s lines", final_split.text, text);
    if !text.contains(MARKER) {
        assert_eq!(final_split.text, text);
    }
    let streaming = strip_streaming(&text);
    assert!(lines_from(&streaming, &text));
    if text.ends_with('\n') {
        assert_eq!(streaming, final_split.text, "streaming and final disagree on a finished text");
    }
});
