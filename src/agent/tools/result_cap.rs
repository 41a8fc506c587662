//! The cap on one tool result's text. A tool may produce far more than a model can use (a
//! build log, a large file, a web page): past `tools.max_result_chars` the result keeps its
//! head and its tail, where the useful parts of such output usually are (what ran, how it
//! ended), with a marker in between saying how much was cut, so the model knows it saw a
//! part and can ask for the rest (a `read` with an offset, a narrower command).

pub use crate::config::DEFAULT_MAX_RESULT_CHARS;

/// Room kept for the marker, so the capped text with it stays within the cap.
const MARKER_ROOM: usize = 80;

/// How far a cut may move to land on a line break, so that neither side ends mid-line.
const LINE_SNAP: usize = 200;

/// `text` as it goes to the model: unchanged within `max_chars` characters, else its head
/// and tail around a marker, `max_chars` characters at most in all.
pub fn cap_result(text: String, max_chars: usize) -> String {
    let total = text.chars().count();
    if total <= max_chars {
        return text;
    }
    let kept = max_chars.saturating_sub(MARKER_ROOM);
    let head_chars = kept / 2;
    let tail_chars = kept - head_chars;
    let head_end = snap_back_to_line(&text, byte_at(&text, head_chars));
    let tail_start = snap_forward_to_line(&text, byte_at(&text, total - tail_chars), head_end);
    let omitted = text[head_end..tail_start].chars().count();
    format!(
        "{}\n[… {omitted} of {total} characters cut here …]\n{}",
        text[..head_end].trim_end_matches('\n'),
        text[tail_start..].trim_start_matches('\n'),
    )
}

/// The byte index of character `index` (the end when there are fewer).
fn byte_at(text: &str, index: usize) -> usize {
    text.char_indices().nth(index).map_or(text.len(), |(at, _)| at)
}

/// `end`, moved back to just after a line break when one is near.
fn snap_back_to_line(text: &str, end: usize) -> usize {
    let window_start = text.floor_char_boundary(end.saturating_sub(LINE_SNAP));
    match text[window_start..end].rfind('\n') {
        Some(at) => window_start + at + 1,
        None => end,
    }
}

/// `start`, moved forward to just after a line break when one is near; never before `floor`.
fn snap_forward_to_line(text: &str, start: usize, floor: usize) -> usize {
    let start = start.max(floor);
    let window_end = text.ceil_char_boundary((start + LINE_SNAP).min(text.len()));
    match text[start..window_end].find('\n') {
        Some(at) => start + at + 1,
        None => start,
    }
}

#[cfg(test)]
mod tests {
    use proptest::prelude::*;

    use super::*;

    #[test]
    fn a_result_within_the_cap_is_left_alone() {
        let text = "x".repeat(1_000);
        assert_eq!(cap_result(text.clone(), 1_000), text);
    }

    #[test]
    fn a_long_result_keeps_its_head_and_tail_and_says_how_much_was_cut() {
        let lines: Vec<String> = (0..10_000).map(|n| format!("line {n}")).collect();
        let text = lines.join("\n");
        let total = text.chars().count();
        let capped = cap_result(text, 2_000);
        assert!(capped.chars().count() <= 2_000, "{}", capped.chars().count());
        assert!(capped.starts_with("line 0\nline 1\n"));
        assert!(capped.ends_with("line 9998\nline 9999"));
        let marker = capped.lines().find(|line| line.starts_with("[…")).expect("a marker");
        assert!(marker.contains(&format!("of {total} characters cut here")), "{marker}");
        // Whole lines on both sides of the marker.
        let around: Vec<&str> = capped.lines().filter(|line| !line.starts_with("[…")).collect();
        assert!(around.iter().all(|line| line.starts_with("line ")), "{around:?}");
    }

    #[test]
    fn the_count_cut_is_exact() {
        let text = "é".repeat(10_000);
        let capped = cap_result(text, 1_000);
        let (head, rest) = capped.split_once("\n[… ").unwrap();
        let (count, tail) = rest.split_once(" of 10000 characters cut here …]\n").unwrap();
        let omitted: usize = count.parse().unwrap();
        assert_eq!(head.chars().count() + omitted + tail.chars().count(), 10_000);
    }

    proptest! {
        #[test]
        fn never_over_the_cap_and_never_panics(text in "(?s).{0,3000}", cap in 100usize..2_000) {
            let capped = cap_result(text.clone(), cap);
            if text.chars().count() <= cap {
                prop_assert_eq!(capped, text);
            } else {
                prop_assert!(capped.chars().count() <= cap);
                prop_assert!(capped.contains("characters cut here"));
            }
        }
    }
}
