//! The little markdown the block chunker needs to understand: which lines open and close
//! fenced code blocks (` ``` ` or `~~~`, CommonMark rules) and what a whitespace byte is.
//!
//! [`Scan`] is fed the text byte by byte and is small and `Copy`, so the chunker can keep
//! the state at any point it might cut and resume from there in the next block.

/// Bytes the chunker may break at. ASCII only: a no-break space must not become a break,
/// and every structural byte being ASCII lets the scan work on bytes without splitting a
/// character.
pub(super) fn is_space(byte: u8) -> bool {
    matches!(byte, b' ' | b'\t' | b'\n' | b'\r' | 0x0b | 0x0c)
}

/// An open fenced code block.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) struct Fence {
    /// `` ` `` or `~`.
    pub ch: u8,
    /// Length of the opening marker; a closing one must be at least as long.
    pub len: usize,
    /// Spaces before the opening marker (0–3), repeated on the closing line we add.
    pub indent: u8,
    /// Stream offsets of the opening line, without trailing whitespace: the text a block
    /// that starts inside this fence is reopened with.
    pub line: (usize, usize),
    /// Characters of the reopening prefix: the opening line and its newline.
    pub reopen_chars: usize,
    /// Whether a cut inside this fence closes it and reopens it in the next block. False
    /// only when those two added lines would take more than half of `max_chars`; the fence
    /// is then cut like plain text.
    pub carried: bool,
}

impl Fence {
    /// The fence an opening line (`line`, at stream offset `start`; `None` if it is not at
    /// hand) opens.
    fn new(ch: u8, len: usize, indent: u8, start: usize, line: Option<&str>, max_chars: usize) -> Self {
        let line = line.map(str::trim_end);
        let reopen_chars = line.map_or(usize::MAX / 4, |line| line.chars().count() + 1);
        let close_chars = 1 + usize::from(indent) + len;
        Self {
            ch,
            len,
            indent,
            line: (start, start + line.map_or(0, str::len)),
            reopen_chars,
            carried: line.is_some() && reopen_chars + close_chars <= max_chars / 2,
        }
    }

    /// Characters of the closing suffix: a newline, the indent and the marker.
    pub fn close_chars(&self) -> usize {
        1 + usize::from(self.indent) + self.len
    }

    /// Appends the closing suffix to `block`.
    pub fn push_close(&self, block: &mut String) {
        block.push('\n');
        block.extend(std::iter::repeat_n(' ', usize::from(self.indent)));
        block.extend(std::iter::repeat_n(char::from(self.ch), self.len));
    }
}

/// How the current line has started, as far as fences care.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Line {
    /// Only spaces so far (at most 3): a fence line may still follow.
    Indent(u8),
    /// Indent then `len` marker characters; the marker may still grow.
    Marker { ch: u8, len: usize, indent: u8 },
    /// A complete marker followed by text that still allows a fence line: an info string
    /// (outside a fence) or only whitespace (a closing line inside one).
    AfterMarker { ch: u8, len: usize, indent: u8 },
    /// An ordinary line.
    Text,
}

/// What the end of a line did to the fence state.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum LineEnd {
    Opened,
    Closed,
    Plain,
}

/// The fence state at one point of the stream.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) struct Scan {
    /// The fenced block the point is inside, if any.
    pub fence: Option<Fence>,
    line: Line,
    /// Stream offset where the current line starts.
    line_start: usize,
}

impl Scan {
    /// The state at the start of a text, `at` being its stream offset.
    pub fn new(at: usize) -> Self {
        Self { fence: None, line: Line::Indent(0), line_start: at }
    }

    /// The fence a cut here would have to close and reopen.
    pub fn carried(&self) -> Option<Fence> {
        self.fence.filter(|fence| fence.carried)
    }

    /// Whether nothing of the current line has been seen yet.
    pub fn at_line_start(&self) -> bool {
        self.line == Line::Indent(0)
    }

    /// Whether the current line so far could still be a fence line (or its indent), so
    /// that cutting here would tear a fence marker or info string apart.
    pub fn in_fence_line(&self) -> bool {
        !matches!(self.line, Line::Text | Line::Indent(0))
    }

    /// Whether the current line so far is a marker that can open or close a fence.
    pub fn on_fence_marker(&self) -> bool {
        match self.line {
            Line::Marker { ch, len, .. } | Line::AfterMarker { ch, len, .. } => self.valid_marker(ch, len),
            Line::Indent(_) | Line::Text => false,
        }
    }

    /// Forgets the current line's start: used when a block had to be cut inside a fence
    /// line, so the rest of it is read as text.
    pub fn forget_line(&mut self) {
        self.line = Line::Text;
    }

    fn valid_marker(&self, ch: u8, len: usize) -> bool {
        match self.fence {
            Some(fence) => ch == fence.ch && len >= fence.len,
            None => len >= 3,
        }
    }

    /// Feeds one byte that is not `\n`.
    pub fn byte(&mut self, byte: u8) {
        self.line = match self.line {
            Line::Text => Line::Text,
            Line::Indent(n) => match byte {
                b' ' if n < 3 => Line::Indent(n + 1),
                b'`' | b'~' => Line::Marker { ch: byte, len: 1, indent: n },
                _ => Line::Text,
            },
            Line::Marker { ch, len, indent } if byte == ch => Line::Marker { ch, len: len + 1, indent },
            Line::Marker { ch, len, indent } if self.valid_marker(ch, len) => self.after_marker(ch, len, indent, byte),
            Line::Marker { .. } => Line::Text,
            Line::AfterMarker { ch, len, indent } => self.after_marker(ch, len, indent, byte),
        };
    }

    fn after_marker(&self, ch: u8, len: usize, indent: u8, byte: u8) -> Line {
        let still_possible = match self.fence {
            // A closing line has nothing but whitespace after its marker.
            Some(_) => is_space(byte),
            // A backtick fence's info string cannot contain a backtick (CommonMark).
            None => !(ch == b'`' && byte == b'`'),
        };
        if still_possible { Line::AfterMarker { ch, len, indent } } else { Line::Text }
    }

    /// Ends the current line at stream offset `end` (its `\n`, or the end of the text).
    /// `text` holds the stream from offset `base` on; it supplies an opening line's text.
    pub fn end_line(&mut self, end: usize, text: &str, base: usize, max_chars: usize) -> LineEnd {
        let result = match self.line {
            Line::Marker { ch, len, indent } | Line::AfterMarker { ch, len, indent } if self.valid_marker(ch, len) => {
                if self.fence.is_some() {
                    self.fence = None;
                    LineEnd::Closed
                } else {
                    // The line is in `text` whenever a block boundary never falls inside a
                    // fence line, which the chunker ensures; if it did, the fence is simply
                    // not carried.
                    let line = self.line_start.checked_sub(base).and_then(|start| text.get(start..end - base));
                    self.fence = Some(Fence::new(ch, len, indent, self.line_start, line, max_chars));
                    LineEnd::Opened
                }
            }
            _ => LineEnd::Plain,
        };
        self.line = Line::Indent(0);
        self.line_start = end + 1;
        result
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The fence state after each line of `text`.
    fn states(text: &str) -> Vec<bool> {
        let mut scan = Scan::new(0);
        let mut open = Vec::new();
        for (i, byte) in text.bytes().enumerate() {
            if byte == b'\n' {
                scan.end_line(i, text, 0, 1200);
                open.push(scan.fence.is_some());
            } else {
                scan.byte(byte);
            }
        }
        open
    }

    #[test]
    fn fences_open_and_close_by_commonmark_rules() {
        assert_eq!(states("```rust\ncode\n```\n"), [true, true, false]);
        assert_eq!(states("~~~\n```\n~~~~\n"), [true, true, false], "a different marker does not close");
        assert_eq!(states("````\n```\n````\n"), [true, true, false], "a shorter marker does not close");
        assert_eq!(states("```\n``` x\n   ```  \n"), [true, true, false], "a closing line is marker and spaces");
        assert_eq!(states("``\n    ```\n```js `x`\n"), [false, false, false], "not fences");
        assert_eq!(states("text ```\n"), [false]);
    }

    #[test]
    fn an_opening_line_is_kept_for_reopening() {
        let text = "  ```rust  \n";
        let mut scan = Scan::new(100);
        text.bytes().take(11).for_each(|byte| scan.byte(byte));
        assert_eq!(scan.end_line(111, text, 100, 1200), LineEnd::Opened);
        let fence = scan.carried().expect("carried");
        assert_eq!((fence.line, fence.reopen_chars, fence.close_chars()), ((100, 109), 10, 6));
        let mut close = String::new();
        fence.push_close(&mut close);
        assert_eq!(close, "\n  ```");
    }

    #[test]
    fn fences_too_long_for_the_block_size_are_not_carried() {
        let text = "```a-very-long-info-string\n";
        let mut scan = Scan::new(0);
        text.bytes().take(26).for_each(|byte| scan.byte(byte));
        scan.end_line(26, text, 0, 40);
        assert!(scan.fence.is_some());
        assert_eq!(scan.carried(), None);
    }
}
