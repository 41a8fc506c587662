//! `MEDIA:` lines: how a model attaches a file to its reply in plain text. A line
//! `MEDIA: <path-or-url>` (a path in the agent's workspace, or an http(s) URL) asks for the
//! file to go with the reply; the line itself is never shown.
//!
//! ```
//! use ferry::reply::media_lines;
//!
//! let split = media_lines::split("Here is the chart.\nMEDIA: out/chart.png\n");
//! assert_eq!(split.text, "Here is the chart.\n");
//! assert_eq!(split.media, ["out/chart.png"]);
//! ```
//!
//! Only a line that starts with `MEDIA:` (after indentation) counts, and never one inside a
//! fenced code block, where a model may be showing the syntax itself. While a reply streams,
//! [`strip_streaming`] also holds back a last line that may still become one (`MED`), so a
//! preview never flashes part of it.

use std::borrow::Cow;

/// The marker that starts a media line.
pub const MARKER: &str = "MEDIA:";

/// A text with its media lines taken out.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Split<'a> {
    /// The text as it may be shown: borrowed when there was no media line.
    pub text: Cow<'a, str>,
    /// What the lines named, in order, trimmed.
    pub media: Vec<String>,
}

/// Takes the media lines out of a final text.
pub fn split(text: &str) -> Split<'_> {
    split_lines(text, false)
}

/// [`split`] for a reply still streaming: a last, unfinished line that is or may become a
/// media line is held back as well.
pub fn strip_streaming(text: &str) -> Cow<'_, str> {
    split_lines(text, true).text
}

fn split_lines(text: &str, streaming: bool) -> Split<'_> {
    if !(text.contains(MARKER) || streaming && may_become_marker(last_line(text))) {
        return Split { text: Cow::Borrowed(text), media: Vec::new() };
    }
    let mut kept = String::with_capacity(text.len());
    let mut media = Vec::new();
    let mut fenced = false;
    let mut rest = text;
    while !rest.is_empty() {
        let (line, next) = match rest.find('\n') {
            Some(end) => (&rest[..=end], &rest[end + 1..]),
            None => (rest, ""),
        };
        rest = next;
        let content = line.trim_start();
        if content.starts_with("```") || content.starts_with("~~~") {
            fenced = !fenced;
        }
        let unfinished = streaming && !line.ends_with('\n');
        if !fenced && unfinished && may_become_marker(content) {
            break;
        }
        match content.strip_prefix(MARKER) {
            Some(named) if !fenced => {
                let named = named.trim();
                if !named.is_empty() && !unfinished {
                    media.push(named.to_owned());
                }
            }
            _ => kept.push_str(line),
        }
    }
    Split { text: Cow::Owned(kept), media }
}

fn last_line(text: &str) -> &str {
    text.rsplit('\n').next().unwrap_or(text).trim_start()
}

/// A line that is the marker's beginning, or already a media line.
fn may_become_marker(line: &str) -> bool {
    !line.is_empty() && (MARKER.starts_with(line) || line.starts_with(MARKER))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn media_lines_are_taken_out_in_order() {
        let split = split("One.\nMEDIA: a.png\n  MEDIA:https://example.com/b.pdf\nTwo.");
        assert_eq!(split.text, "One.\nTwo.");
        assert_eq!(split.media, ["a.png", "https://example.com/b.pdf"]);
    }

    #[test]
    fn text_without_a_media_line_is_borrowed() {
        let split = split("Plain text that mentions MEDIA lines in passing: MEDIA: x");
        assert_eq!(split.media, Vec::<String>::new());
        assert_eq!(split.text, "Plain text that mentions MEDIA lines in passing: MEDIA: x");
        assert!(matches!(super::split("no marker").text, Cow::Borrowed(_)));
    }

    #[test]
    fn a_fenced_block_shows_the_syntax_as_written() {
        let text = "Write it like this:\n```\nMEDIA: path/to/file.png\n```\n";
        let split = split(text);
        assert_eq!(split.text, text);
        assert!(split.media.is_empty());
    }

    #[test]
    fn an_empty_media_line_is_dropped_without_naming_anything() {
        let split = split("Hi\nMEDIA:   \n");
        assert_eq!((split.text.as_ref(), split.media.len()), ("Hi\n", 0));
    }

    #[test]
    fn streaming_holds_back_a_line_that_may_become_a_media_line() {
        assert_eq!(strip_streaming("Here it is.\nMED"), "Here it is.\n");
        assert_eq!(strip_streaming("Here it is.\nMEDIA: out/ch"), "Here it is.\n");
        assert_eq!(strip_streaming("Here it is.\nMEDIA: out/chart.png\nAnd"), "Here it is.\nAnd");
        assert_eq!(strip_streaming("Here it is.\nMore"), "Here it is.\nMore");
        assert_eq!(strip_streaming("M"), "");
    }
}
