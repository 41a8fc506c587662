//! What [`split`](super::split) keeps well formed across a cut, one [`Structure`] per kind of
//! markup: nothing in plain text ([`Flat`]), code fences in markdown and mrkdwn ([`Fences`]),
//! open tags in Telegram HTML ([`Tags`]).
//!
//! The splitter walks the text token by token ([`Structure::step`]): a character, or for
//! Telegram a whole tag or entity, so a cut can never fall inside `<a href="…">` or `&amp;`.

/// A kind of markup whose open constructs must be closed at the end of a part and reopened at
/// the start of the next.
pub(super) trait Structure {
    /// What is open at a position. `Default` is the start of the text; `Copy` so the splitter
    /// can keep the state at every candidate cut instead of walking the part again.
    type State: Copy + Default;

    /// Whether `byte` is plain text to [`step`](Self::step) (taken as one character, changing
    /// nothing) wherever it appears except at the start of a line. Never whitespace, so a run of
    /// such bytes holds no break and ends on a character boundary.
    fn ordinary(byte: u8) -> bool {
        !byte.is_ascii_whitespace()
    }

    /// Consumes the token at `at` (a char boundary), updates `state`, and returns where the next
    /// token starts.
    fn step(text: &str, at: usize, state: &mut Self::State) -> usize;

    /// Whether a part may end right before `at`, given the state there. Cuts that would leave
    /// an empty construct behind (`<b></b>`, a fence with no code) are refused.
    fn can_cut(text: &str, at: usize, state: &Self::State) -> bool;

    /// The size of what [`close`](Self::close) appends: characters (all ASCII, so the same in
    /// UTF-16) and newlines.
    fn closing_cost(text: &str, state: &Self::State) -> (usize, usize);

    /// Appends what closes everything open.
    fn close(text: &str, state: &Self::State, out: &mut String);

    /// Appends what reopens everything open, to start the next part.
    fn reopen(text: &str, state: &Self::State, out: &mut String);
}

/// The length of the UTF-8 character starting at `at`, read from its first byte.
#[inline]
fn char_len(text: &str, at: usize) -> usize {
    match text.as_bytes()[at] {
        0..0xC0 => 1,
        0xC0..0xE0 => 2,
        0xE0..0xF0 => 3,
        _ => 4,
    }
}

/// How far [`Structure::can_cut`] looks past whitespace for what follows the cut.
const LOOKAHEAD: usize = 256;

/// Skips ASCII whitespace from `at` (at most [`LOOKAHEAD`] bytes). Returns where it stopped and
/// the start of the line it stopped on, if only whitespace lies between that and the stop.
fn skip_whitespace(bytes: &[u8], at: usize) -> (usize, Option<usize>) {
    let mut line_start = (at == 0 || bytes[at - 1] == b'\n').then_some(at);
    let mut index = at;
    while index < bytes.len() && index - at < LOOKAHEAD && bytes[index].is_ascii_whitespace() {
        if bytes[index] == b'\n' {
            line_start = Some(index + 1);
        }
        index += 1;
    }
    (index, line_start)
}

/// Plain text: nothing to keep balanced.
pub(super) struct Flat;

impl Structure for Flat {
    type State = ();

    #[inline]
    fn step(text: &str, at: usize, _state: &mut ()) -> usize {
        at + char_len(text, at)
    }

    fn can_cut(_text: &str, _at: usize, _state: &()) -> bool {
        true
    }

    fn closing_cost(_text: &str, _state: &()) -> (usize, usize) {
        (0, 0)
    }

    fn close(_text: &str, _state: &(), _out: &mut String) {}

    fn reopen(_text: &str, _state: &(), _out: &mut String) {}
}

/// Code fences (```` ``` ```` or `~~~`, optionally behind `>` quote markers, indentation or a
/// list marker). A cut inside one closes it with the same fence and reopens it with the
/// opening line (same info string, so the same language) in the next part.
pub(super) struct Fences;

#[derive(Debug, Clone, Copy, Default)]
pub(super) struct FenceState {
    open: Option<OpenFence>,
    /// Cuts before this position are refused: inside a fence line, or before a fence's first
    /// line of code.
    no_cut_before: usize,
}

#[derive(Debug, Clone, Copy)]
struct OpenFence {
    line_start: usize,
    line_end: usize,
    /// Where the backticks or tildes start; what precedes them is the container's prefix.
    marker_start: usize,
    marker: u8,
    marker_len: usize,
}

/// A line that is a fence: where its marker starts, which character, how long, and what
/// follows it.
struct FenceLine<'a> {
    marker_start: usize,
    marker: u8,
    marker_len: usize,
    rest: &'a str,
    line_end: usize,
}

impl FenceLine<'_> {
    fn opens(&self) -> bool {
        // A backtick fence's info string cannot hold a backtick (```` ```x``` ```` is inline code).
        self.marker != b'`' || !self.rest.contains('`')
    }

    fn closes(&self, open: &OpenFence) -> bool {
        self.marker == open.marker && self.marker_len >= open.marker_len && self.rest.trim().is_empty()
    }
}

/// Reads the line starting at `line_start` as a fence line, if it is one.
fn fence_line(text: &str, line_start: usize) -> Option<FenceLine<'_>> {
    let bytes = text.as_bytes();
    let mut index = line_start;
    while index < bytes.len() && matches!(bytes[index], b' ' | b'\t' | b'>') {
        index += 1;
    }
    // An optional list marker: `-`, `*`, `+`, or up to nine digits and `.` or `)`, then a space.
    let digits = bytes[index..].iter().take(9).take_while(|b| b.is_ascii_digit()).count();
    let marker_end = match bytes.get(index + digits) {
        Some(b'-' | b'*' | b'+') if digits == 0 => index + 1,
        Some(b'.' | b')') if digits > 0 => index + digits + 1,
        _ => index,
    };
    if marker_end > index && bytes.get(marker_end) == Some(&b' ') {
        index = marker_end;
        while index < bytes.len() && matches!(bytes[index], b' ' | b'\t') {
            index += 1;
        }
    }
    let marker = *bytes.get(index).filter(|&&b| b == b'`' || b == b'~')?;
    let marker_len = bytes[index..].iter().take_while(|&&b| b == marker).count();
    if marker_len < 3 {
        return None;
    }
    let rest_start = index + marker_len;
    let line_end = text[rest_start..].find('\n').map_or(text.len(), |offset| rest_start + offset);
    Some(FenceLine { marker_start: index, marker, marker_len, rest: &text[rest_start..line_end], line_end })
}

impl OpenFence {
    /// The prefix that keeps a fence line in its container: `>` markers kept, the rest
    /// (indentation, a list marker) as spaces.
    fn push_continuation(&self, text: &str, out: &mut String) {
        out.extend(text[self.line_start..self.marker_start].chars().map(|ch| if ch == '>' { '>' } else { ' ' }));
    }
}

impl Structure for Fences {
    type State = FenceState;

    #[inline]
    fn step(text: &str, at: usize, state: &mut FenceState) -> usize {
        let bytes = text.as_bytes();
        if (at == 0 || bytes[at - 1] == b'\n')
            && let Some(line) = fence_line(text, at)
        {
            let line_end = line.line_end;
            match state.open {
                None if line.opens() => {
                    state.open = Some(OpenFence {
                        line_start: at,
                        line_end,
                        marker_start: line.marker_start,
                        marker: line.marker,
                        marker_len: line.marker_len,
                    });
                    // Not before the first character of code: no empty fence in a part.
                    state.no_cut_before = line_end + 2;
                }
                Some(open) if line.closes(&open) => {
                    state.open = None;
                    state.no_cut_before = line_end;
                }
                _ => {}
            }
        }
        at + char_len(text, at)
    }

    fn can_cut(text: &str, at: usize, state: &FenceState) -> bool {
        if at < state.no_cut_before {
            return false;
        }
        let Some(open) = state.open else { return true };
        // Not right before the closing fence: the next part would be an empty fence.
        match skip_whitespace(text.as_bytes(), at) {
            (_, Some(line_start)) => !fence_line(text, line_start).is_some_and(|line| line.closes(&open)),
            (_, None) => true,
        }
    }

    fn closing_cost(_text: &str, state: &FenceState) -> (usize, usize) {
        state.open.map_or((0, 0), |open| (1 + open.marker_start - open.line_start + open.marker_len, 1))
    }

    fn close(text: &str, state: &FenceState, out: &mut String) {
        if let Some(open) = state.open {
            out.push('\n');
            open.push_continuation(text, out);
            out.extend(std::iter::repeat_n(open.marker as char, open.marker_len));
        }
    }

    fn reopen(text: &str, state: &FenceState, out: &mut String) {
        if let Some(open) = state.open {
            open.push_continuation(text, out);
            out.push_str(&text[open.marker_start..open.line_end]);
            out.push('\n');
        }
    }
}

/// Telegram HTML tags. A cut closes the open tags (innermost first) and the next part reopens
/// them with their attributes, so every part is valid on its own. Tags and entities are
/// single tokens, so a cut never falls inside one.
pub(super) struct Tags;

/// Open tags tracked; a rendered reply nests at most six (quote, link, three styles, code).
const MAX_DEPTH: usize = 8;

#[derive(Debug, Clone, Copy, Default)]
pub(super) struct TagState {
    open: [OpenTag; MAX_DEPTH],
    depth: usize,
    /// Tags open beyond [`MAX_DEPTH`]: not reopened, but their closing tags are recognized.
    untracked: usize,
    /// The last token other than whitespace opened a tag: a cut here would leave `<b></b>`.
    after_open_tag: bool,
}

impl TagState {
    fn open(&self) -> &[OpenTag] {
        &self.open[..self.depth]
    }
}

#[derive(Debug, Clone, Copy, Default)]
struct OpenTag {
    start: usize,
    end: usize,
    name_len: usize,
}

/// Tags longer than this (a link to a very long URL) are not recognized as one token.
const MAX_TAG_LEN: usize = 4096;

fn tag_len(bytes: &[u8], at: usize) -> Option<usize> {
    let name_start = at + 1 + usize::from(bytes.get(at + 1) == Some(&b'/'));
    if !bytes.get(name_start).is_some_and(u8::is_ascii_alphabetic) {
        return None;
    }
    bytes[at..].iter().take(MAX_TAG_LEN).position(|&b| b == b'>').map(|end| end + 1)
}

fn entity_len(bytes: &[u8], at: usize) -> Option<usize> {
    let body = bytes[at + 1..].iter().take(10).take_while(|b| b.is_ascii_alphanumeric() || **b == b'#').count();
    (body > 0 && bytes.get(at + 1 + body) == Some(&b';')).then_some(body + 2)
}

fn name_len(tag: &[u8]) -> usize {
    tag.iter().take_while(|b| b.is_ascii_alphanumeric() || **b == b'-').count()
}

impl Structure for Tags {
    type State = TagState;

    fn ordinary(byte: u8) -> bool {
        !byte.is_ascii_whitespace() && byte != b'<' && byte != b'&'
    }

    #[inline]
    fn step(text: &str, at: usize, state: &mut TagState) -> usize {
        let bytes = text.as_bytes();
        match bytes[at] {
            b'<' => {
                if let Some(len) = tag_len(bytes, at) {
                    let tag = &bytes[at..at + len];
                    if let Some(closing) = tag.strip_prefix(b"</") {
                        let name = &closing[..name_len(closing)];
                        if state.untracked > 0 {
                            state.untracked -= 1;
                        } else if let Some(index) =
                            state.open().iter().rposition(|open| &bytes[open.start + 1..][..open.name_len] == name)
                        {
                            state.depth = index;
                        }
                        state.after_open_tag = false;
                    } else if !tag.ends_with(b"/>") {
                        if state.depth < MAX_DEPTH {
                            state.open[state.depth] =
                                OpenTag { start: at, end: at + len, name_len: name_len(&tag[1..]) };
                            state.depth += 1;
                        } else {
                            state.untracked += 1;
                        }
                        state.after_open_tag = true;
                    }
                    return at + len;
                }
            }
            b'&' => {
                if let Some(len) = entity_len(bytes, at) {
                    state.after_open_tag = false;
                    return at + len;
                }
            }
            byte if byte.is_ascii_whitespace() => return at + 1,
            _ => {}
        }
        state.after_open_tag = false;
        at + char_len(text, at)
    }

    fn can_cut(text: &str, at: usize, state: &TagState) -> bool {
        // Nor right before a closing tag: the next part would reopen and at once close it.
        !state.after_open_tag && !text.as_bytes()[skip_whitespace(text.as_bytes(), at).0..].starts_with(b"</")
    }

    fn closing_cost(_text: &str, state: &TagState) -> (usize, usize) {
        (state.open().iter().map(|open| open.name_len + 3).sum(), 0)
    }

    fn close(text: &str, state: &TagState, out: &mut String) {
        for open in state.open().iter().rev() {
            out.push_str("</");
            out.push_str(&text[open.start + 1..][..open.name_len]);
            out.push('>');
        }
    }

    fn reopen(text: &str, state: &TagState, out: &mut String) {
        for open in state.open() {
            out.push_str(&text[open.start..open.end]);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn state_at<S: Structure>(text: &str, end: usize) -> S::State {
        let mut state = S::State::default();
        let mut at = 0;
        while at < end {
            at = S::step(text, at, &mut state);
        }
        state
    }

    fn close_and_reopen<S: Structure>(text: &str, end: usize) -> (String, String) {
        let state = state_at::<S>(text, end);
        let (mut close, mut reopen) = (String::new(), String::new());
        S::close(text, &state, &mut close);
        S::reopen(text, &state, &mut reopen);
        assert_eq!(S::closing_cost(text, &state).0, close.chars().count());
        (close, reopen)
    }

    #[test]
    fn a_fence_is_closed_and_reopened_with_its_info_string() {
        let text = "intro\n```rust title\nlet a = 1;\nlet b = 2;\n```\nafter";
        let cut = text.find("\nlet b").unwrap_or_default();
        assert_eq!(close_and_reopen::<Fences>(text, cut), ("\n```".into(), "```rust title\n".into()));
        assert_eq!(close_and_reopen::<Fences>(text, text.len()), (String::new(), String::new()));
    }

    #[test]
    fn fences_in_quotes_and_list_items_keep_their_container() {
        let quoted = "> ````\n> code\n> ````";
        assert_eq!(close_and_reopen::<Fences>(quoted, 12), ("\n> ````".into(), "> ````\n".into()));
        let listed = "1. ~~~sh\n   ls\n   ~~~";
        assert_eq!(close_and_reopen::<Fences>(listed, 14), ("\n   ~~~".into(), "   ~~~sh\n".into()));
    }

    #[test]
    fn no_cut_leaves_an_empty_fence() {
        let text = "```py\nx\n```\ny";
        let state = |end| state_at::<Fences>(text, end);
        assert!(Fences::can_cut(text, 0, &state(0)));
        assert!(!Fences::can_cut(text, 5, &state(5)), "inside the opening line");
        assert!(!Fences::can_cut(text, 6, &state(6)), "before the first line of code");
        assert!(!Fences::can_cut(text, 7, &state(7)), "right before the closing fence");
        assert!(Fences::can_cut(text, 11, &state(11)), "after the closing fence");
    }

    #[test]
    fn inline_triple_backticks_do_not_open_a_fence() {
        let text = "```inline``` text\nmore";
        assert_eq!(close_and_reopen::<Fences>(text, 20), (String::new(), String::new()));
    }

    #[test]
    fn open_tags_are_closed_innermost_first_and_reopened_with_attributes() {
        let text = r#"<blockquote><a href="https://x?a=1&amp;b=2"><b>bold text</b> link</a></blockquote>"#;
        let cut = text.find(" text").unwrap_or_default();
        assert_eq!(
            close_and_reopen::<Tags>(text, cut),
            ("</b></a></blockquote>".into(), r#"<blockquote><a href="https://x?a=1&amp;b=2"><b>"#.into())
        );
    }

    #[test]
    fn tags_and_entities_are_single_tokens() {
        let mut state = TagState::default();
        assert_eq!(Tags::step("<pre>x", 0, &mut state), 5);
        assert_eq!(Tags::step("&amp;x", 0, &mut state), 5);
        assert_eq!(Tags::step("&lonely", 0, &mut state), 1);
    }

    #[test]
    fn tags_nested_deeper_than_tracked_still_close_in_order() {
        let text = format!("{}x{}", "<i>".repeat(MAX_DEPTH + 2), "</i>".repeat(MAX_DEPTH + 2));
        let inside = text.find('x').unwrap_or_default() + 1;
        assert_eq!(state_at::<Tags>(&text, inside).open().len(), MAX_DEPTH);
        assert_eq!(state_at::<Tags>(&text, inside + 2 * 4).open().len(), MAX_DEPTH);
        assert_eq!(state_at::<Tags>(&text, inside + 3 * 4).open().len(), MAX_DEPTH - 1);
        assert!(state_at::<Tags>(&text, text.len()).open().is_empty());
    }

    #[test]
    fn no_cut_right_after_an_open_tag_or_before_a_closing_one() {
        let text = "<b>bold</b> <i>x</i>";
        let state = |end| state_at::<Tags>(text, end);
        assert!(!Tags::can_cut(text, 3, &state(3)));
        assert!(Tags::can_cut(text, 4, &state(4)));
        assert!(!Tags::can_cut(text, 7, &state(7)));
        assert!(Tags::can_cut(text, 11, &state(11)));
    }
}
