//! Cutting a rendered reply into messages that fit a channel (SPEC §7 "Outbound", §10): at
//! most `text_limit` characters and, where the platform has one, `max_lines` lines (Discord
//! collapses messages over 17 lines).
//!
//! Each part ends at the best break that fits: a paragraph break, else a line break, else a
//! space — the first of those that keeps the part at least half as long as the longest cut
//! possible — and only then anywhere. The whitespace of the break itself is dropped; blank parts
//! are never produced. Every part is well formed on its own (see `structure`): a code fence
//! cut in two is closed at the cut and reopened with the same language in the next part, and
//! Telegram HTML tags open at the cut are closed and reopened. The closing and reopening text
//! counts toward the limits.

use ferry_channel::MarkupDialect;

use super::structure::{Fences, Flat, Structure, Tags};

/// Splits `rendered` (the output of [`render`](super::render) for `dialect`) into messages of
/// at most `text_limit` characters and `max_lines` lines.
///
/// Characters are counted as Unicode scalar values, except for
/// [`MarkupDialect::TelegramHtml`]: Telegram counts UTF-16 code units (an emoji outside the
/// Basic Multilingual Plane is two) and counts them after parsing the entities; here the raw
/// HTML, tags included, is counted in UTF-16 units, which can only over-count, so a part never
/// exceeds Telegram's limit.
///
/// A limit too small for the fence or tags that must be reopened (under ~100 characters, or
/// `max_lines` under 4 inside a fence) cannot always be met; the text is still split, with
/// parts as small as the structure allows.
pub fn split(rendered: &str, dialect: MarkupDialect, text_limit: usize, max_lines: Option<usize>) -> Vec<String> {
    let limits = Limits {
        chars: text_limit.max(1),
        lines: max_lines.unwrap_or(usize::MAX).max(1),
        utf16: dialect == MarkupDialect::TelegramHtml,
    };
    match dialect {
        MarkupDialect::Plain => split_with::<Flat>(rendered, limits),
        MarkupDialect::TelegramHtml => split_with::<Tags>(rendered, limits),
        MarkupDialect::Markdown | MarkupDialect::DiscordMarkdown | MarkupDialect::SlackMrkdwn => {
            split_with::<Fences>(rendered, limits)
        }
    }
}

/// The size of a message as [`split`] counts it against `text_limit`: UTF-16 code units for
/// Telegram HTML, Unicode scalar values otherwise.
pub fn measure(text: &str, dialect: MarkupDialect) -> usize {
    if dialect == MarkupDialect::TelegramHtml { text.encode_utf16().count() } else { text.chars().count() }
}

#[derive(Debug, Clone, Copy)]
struct Limits {
    chars: usize,
    lines: usize,
    /// Count UTF-16 code units instead of chars (Telegram).
    utf16: bool,
}

impl Limits {
    fn measure(&self, token: &str) -> usize {
        match token.len() {
            1 => 1,
            _ => self.measure_bytes(token.as_bytes()),
        }
    }

    /// The measure of whole UTF-8 characters: one per leading byte, and in UTF-16 one more
    /// for a four-byte character (a surrogate pair).
    fn measure_bytes(&self, bytes: &[u8]) -> usize {
        let leading = |b: &u8| usize::from(*b & 0xC0 != 0x80);
        match self.utf16 {
            true => bytes.iter().map(|b| leading(b) + usize::from(*b >= 0xF0)).sum(),
            false => bytes.iter().map(leading).sum(),
        }
    }
}

/// Where a part ends and the next one starts (after the break's whitespace).
#[derive(Debug, Clone, Copy)]
struct Cut {
    end: usize,
    resume: usize,
}

impl Cut {
    fn at(end: usize) -> Self {
        Self { end, resume: end }
    }
}

fn split_with<S: Structure>(text: &str, limits: Limits) -> Vec<String> {
    let mut parts = Vec::new();
    let mut position = 0;
    let mut state = S::State::default();
    let mut reopen = String::new();
    while position < text.len() {
        reopen.clear();
        S::reopen(text, &state, &mut reopen);
        let (cut, state_at_cut) = find_cut::<S>(text, position, state, &reopen, limits);
        state = state_at_cut;
        let body = &text[position..cut.end];
        if !body.trim().is_empty() {
            let mut part = String::with_capacity(reopen.len() + body.len() + 32);
            part.push_str(&reopen);
            part.push_str(body);
            S::close(text, &state, &mut part);
            parts.push(part);
        }
        position = cut.resume;
    }
    parts
}

/// The best cut for a part starting at `start` in `state`, behind `reopen`, and the state
/// there: the break that fits, or, when the part holds no break at all (one long word), the
/// furthest position.
fn find_cut<S: Structure>(text: &str, start: usize, state: S::State, reopen: &str, limits: Limits) -> (Cut, S::State) {
    let bytes = text.as_bytes();
    let mut walk = Walk::<S>::new(start, state, reopen, limits);
    // The last paragraph break, line break and space where the part may end.
    let mut breaks: [Option<(Cut, S::State)>; 3] = [None; 3];
    let mut reach = start;
    loop {
        let at = walk.at;
        if at > start {
            if at == text.len() {
                if walk.fits(text, limits) {
                    return (Cut::at(at), walk.state);
                }
            } else if !walk.after_space
                && bytes[at].is_ascii_whitespace()
                && walk.fits(text, limits)
                && S::can_cut(text, at, &walk.state)
            {
                let (newlines_in_run, resume) = whitespace_run(bytes, at);
                breaks[2 - newlines_in_run.min(2)] = Some((Cut { end: at, resume }, walk.state));
            }
            if !walk.over(limits) {
                reach = at;
            }
        }
        if at == text.len() || walk.over(limits) {
            break;
        }
        walk.advance(text, limits, true);
    }
    let half = start + (reach - start) / 2;
    let preferred = breaks.iter().flatten().find(|(cut, _)| cut.end >= half);
    match preferred.or_else(|| breaks.iter().flatten().max_by_key(|(cut, _)| cut.end)) {
        Some(found) => *found,
        None => hard_cut::<S>(text, start, state, reopen, limits),
    }
}

/// The furthest position where the part may end, breaks or not. Checked only when there is
/// no break, since [`Structure::can_cut`] at every position would slow every scan.
fn hard_cut<S: Structure>(text: &str, start: usize, state: S::State, reopen: &str, limits: Limits) -> (Cut, S::State) {
    let mut walk = Walk::<S>::new(start, state, reopen, limits);
    let mut best = None;
    loop {
        if walk.at > start && walk.fits(text, limits) && S::can_cut(text, walk.at, &walk.state) {
            best = Some((Cut::at(walk.at), walk.state));
        }
        if walk.at == text.len() || walk.over(limits) {
            break;
        }
        walk.advance(text, limits, false);
    }
    best.unwrap_or_else(|| {
        // Nothing fits (a limit below what the structure needs): take one token to progress.
        let mut state = state;
        (Cut::at(S::step(text, start, &mut state)), state)
    })
}

/// A walk through a part, token by token, keeping its size.
struct Walk<S: Structure> {
    at: usize,
    state: S::State,
    chars: usize,
    newlines: usize,
    /// The last token was whitespace: a break is taken at the start of a whitespace run.
    after_space: bool,
}

impl<S: Structure> Walk<S> {
    fn new(start: usize, state: S::State, reopen: &str, limits: Limits) -> Self {
        Self {
            at: start,
            state,
            chars: limits.measure(reopen),
            newlines: reopen.bytes().filter(|&b| b == b'\n').count(),
            after_space: true,
        }
    }

    /// Takes the next token. With `whole_words`, the rest of a word goes in one go when it
    /// surely fits: it changes no state and holds no break, so no position inside it matters
    /// to [`find_cut`] (only to [`hard_cut`]).
    #[inline]
    fn advance(&mut self, text: &str, limits: Limits, whole_words: bool) {
        let bytes = text.as_bytes();
        let byte = bytes[self.at];
        let next = S::step(text, self.at, &mut self.state);
        let token = &bytes[self.at..next];
        if token.len() == 1 {
            self.chars += 1;
            self.newlines += usize::from(byte == b'\n');
        } else {
            self.chars += limits.measure_bytes(token);
            self.newlines += token.iter().filter(|&&b| b == b'\n').count();
        }
        self.after_space = byte.is_ascii_whitespace();
        self.at = next;
        if whole_words && S::ordinary(byte) {
            let run = bytes[next..].iter().take_while(|&&b| S::ordinary(b)).count();
            // Bytes never undercount characters or UTF-16 units.
            if run > 0 && self.chars + run <= limits.chars {
                self.chars += limits.measure_bytes(&bytes[next..next + run]);
                self.at = next + run;
            }
        }
    }

    /// The part so far is already too big, closing aside: no later cut can fit.
    fn over(&self, limits: Limits) -> bool {
        self.chars > limits.chars || self.newlines >= limits.lines
    }

    /// The part ending here, with what closes it, fits.
    fn fits(&self, text: &str, limits: Limits) -> bool {
        let (chars, newlines) = S::closing_cost(text, &self.state);
        self.chars + chars <= limits.chars && self.newlines + newlines < limits.lines
    }
}

/// The whitespace run at `at`: how many newlines it holds, and where the next part resumes —
/// after the last newline (keeping the next line's indentation), or after the run.
fn whitespace_run(bytes: &[u8], at: usize) -> (usize, usize) {
    let mut newlines = 0;
    let mut resume = at;
    let mut index = at;
    while index < bytes.len() && bytes[index].is_ascii_whitespace() {
        index += 1;
        if bytes[index - 1] == b'\n' {
            newlines += 1;
            resume = index;
        }
    }
    (newlines, if newlines == 0 { index } else { resume })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn assert_fits(parts: &[String], dialect: MarkupDialect, limit: usize, max_lines: Option<usize>) {
        for part in parts {
            assert!(measure(part, dialect) <= limit, "{} > {limit}: {part:?}", measure(part, dialect));
            assert!(part.split('\n').count() <= max_lines.unwrap_or(usize::MAX), "too many lines: {part:?}");
        }
    }

    #[test]
    fn short_text_is_one_part_and_blank_text_none() {
        assert_eq!(split("hello", MarkupDialect::Plain, 10, None), vec!["hello"]);
        assert!(split(" \n\n ", MarkupDialect::Plain, 10, None).is_empty());
    }

    #[test]
    fn paragraph_breaks_are_preferred_then_lines_then_spaces() {
        let text = "aaaa aaaa\nbbbb\n\ncccc dddd\neeee";
        assert_eq!(split(text, MarkupDialect::Plain, 20, None), vec!["aaaa aaaa\nbbbb", "cccc dddd\neeee"]);
        assert_eq!(split("aaaa aaaa\nbbbb bbbb cc", MarkupDialect::Plain, 16, None), vec!["aaaa aaaa", "bbbb bbbb cc"]);
        assert_eq!(split("aaaa bbbb cccc", MarkupDialect::Plain, 10, None), vec!["aaaa bbbb", "cccc"]);
        assert_eq!(split("abcdefghij", MarkupDialect::Plain, 4, None), vec!["abcd", "efgh", "ij"]);
    }

    #[test]
    fn an_early_paragraph_break_loses_to_a_later_line_break() {
        let text = "hi\n\nline one\nline two\nline three";
        assert_eq!(split(text, MarkupDialect::Plain, 24, None), vec!["hi\n\nline one\nline two", "line three"]);
    }

    #[test]
    fn discords_line_limit_is_respected() {
        let text = (1..=50).map(|n| format!("line {n}")).collect::<Vec<_>>().join("\n");
        let parts = split(&text, MarkupDialect::DiscordMarkdown, 2000, Some(17));
        assert_eq!(parts.iter().map(|part| part.lines().count()).collect::<Vec<_>>(), vec![17, 17, 16]);
        assert_eq!(parts.join("\n"), text);
    }

    #[test]
    fn a_code_block_straddling_the_limit_is_closed_and_reopened() {
        let intro = "Here is the fix, explained step by step. ".repeat(5);
        let code = (0..85).map(|n| format!("    let value_{n:03} = compute({n});")).collect::<Vec<_>>().join("\n");
        let text = format!("{intro}\n\n```rust\n{code}\n```\n\nThat is all.");
        assert!(text.chars().count() > 3000);
        let parts = split(&text, MarkupDialect::DiscordMarkdown, 2000, None);
        assert_fits(&parts, MarkupDialect::DiscordMarkdown, 2000, None);
        assert!(parts.len() >= 2);
        assert!(parts[0].starts_with("Here is") && parts[0].ends_with("\n```"), "{}", parts[0]);
        assert!(parts[1].starts_with("```rust\n    let value_"), "{}", parts[1]);
        assert!(parts.last().is_some_and(|part| part.ends_with("```\n\nThat is all.")));
        for part in &parts {
            assert_eq!(part.lines().filter(|line| line.starts_with("```")).count() % 2, 0, "{part}");
        }
        let code_lines: Vec<_> =
            parts.iter().flat_map(|part| part.lines()).filter(|l| l.contains("let value_")).collect();
        assert_eq!(code_lines, code.lines().collect::<Vec<_>>());
    }

    #[test]
    fn a_fence_cut_by_the_line_limit_still_fits_it() {
        let text = format!("```\n{}\n```", (1..=40).map(|n| n.to_string()).collect::<Vec<_>>().join("\n"));
        let parts = split(&text, MarkupDialect::DiscordMarkdown, 2000, Some(17));
        assert_fits(&parts, MarkupDialect::DiscordMarkdown, 2000, Some(17));
        assert_eq!(parts.len(), 3);
        assert!(parts.iter().all(|part| part.starts_with("```\n") && part.ends_with("\n```")));
    }

    #[test]
    fn telegram_parts_close_and_reopen_tags() {
        let text = format!("<b>{}</b>", "word ".repeat(30).trim_end());
        let parts = split(&text, MarkupDialect::TelegramHtml, 64, None);
        assert_fits(&parts, MarkupDialect::TelegramHtml, 64, None);
        assert!(parts.len() > 2);
        assert!(parts.iter().all(|part| part.starts_with("<b>word") && part.ends_with("word</b>")), "{parts:?}");
    }

    #[test]
    fn telegram_cuts_never_fall_inside_an_entity() {
        let text = "&amp;".repeat(30);
        for part in split(&text, MarkupDialect::TelegramHtml, 12, None) {
            assert!(part == "&amp;&amp;" || part == "&amp;", "{part}");
        }
    }

    #[test]
    fn telegram_counts_utf16_units() {
        let text = "😀".repeat(10);
        let parts = split(&text, MarkupDialect::TelegramHtml, 8, None);
        assert_eq!(parts, vec!["😀".repeat(4), "😀".repeat(4), "😀".repeat(2)]);
        assert_eq!(split(&text, MarkupDialect::Plain, 8, None), vec!["😀".repeat(8), "😀".repeat(2)]);
    }
}
