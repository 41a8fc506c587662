//! Reply directives (SPEC §7): tags a model writes into its reply to say how the reply is
//! to be delivered, never to be read by the person it is for.
//!
//! ```
//! use ferry::reply::directive::{self, ReplyTarget};
//!
//! let stripped = directive::strip("[[ Reply_To : 4711 ]] That one, yes.");
//! assert_eq!(stripped.text, "That one, yes.");
//! assert_eq!(stripped.directives.reply_to, Some(ReplyTarget::Message("4711".into())));
//! ```
//!
//! The syntax is `[[name]]` or `[[name: value]]` on one line, read tolerantly because
//! models write it loosely: spaces or tabs may stand around the name, the colon and the
//! value, and the names Ferry knows are matched in any case. Known directives:
//! - `[[reply_to_current]]`: thread the reply to the message it answers;
//! - `[[reply_to: <message id>]]`: thread it to that message of the chat;
//! - `[[audio_as_voice]]`: recognised and removed. Outbound media has not landed yet, so it
//!   changes nothing for now; once replies carry attachments it asks for their audio to go
//!   as a voice note.
//!
//! Any other `[[name]]` or `[[name: value]]` whose name is `[a-z_]+` is removed as well: a
//! tag meant for the machine never reaches a person, even one this version does not know.
//! Everything else stays as written — `[[not a directive]]` (a space inside the name),
//! `[[Wiki Page]]`, `[[1]]` — and so does every `[[` inside a fenced code block or inline
//! code.
//!
//! Which directives are honoured, and how, is the turn's business ([`super::turn`]): a
//! reply is threaded only where the channel can thread replies.
//!
//! While a reply streams, [`strip_streaming`] also holds back a directive still being
//! written at the end of the text (`… [[reply_to: 12`, or a lone trailing `[`) until it
//! closes or can no longer become one, so no preview ever flashes part of a tag.

use std::borrow::Cow;
use std::ops::Range;

/// `[[reply_to_current]]`: thread the reply to the message it answers.
pub const REPLY_TO_CURRENT: &str = "reply_to_current";
/// `[[reply_to: <message id>]]`: thread the reply to that message.
pub const REPLY_TO: &str = "reply_to";
/// `[[audio_as_voice]]`: send the reply's audio as a voice note (once media lands).
pub const AUDIO_AS_VOICE: &str = "audio_as_voice";

/// A directive longer than this (from `[[` to `]]`) is text that happens to start with
/// `[[`: it bounds how much a preview holds back and how far a candidate is read.
const MAX_DIRECTIVE_BYTES: usize = 200;

/// Longest message id a `[[reply_to: …]]` may name. Platform ids are far shorter
/// (Telegram and Discord: decimal integers; Slack: `1700000000.123456`).
const MAX_MESSAGE_ID_BYTES: usize = 100;

/// The message a reply directive threads the reply to.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ReplyTarget {
    /// The message the reply answers (`[[reply_to_current]]`).
    Current,
    /// A message of the chat, by the platform's id (`[[reply_to: <id>]]`).
    Message(String),
}

/// What a reply's directives ask for.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Directives {
    /// Where to thread the reply: the first reply directive with a usable target wins.
    pub reply_to: Option<ReplyTarget>,
    /// `[[audio_as_voice]]` was given. Nothing acts on it until outbound media lands.
    pub audio_as_voice: bool,
}

/// A text with its directives taken out.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Stripped<'a> {
    /// The text as it may be shown: borrowed when nothing was taken out.
    pub text: Cow<'a, str>,
    pub directives: Directives,
}

/// A final text without its directives (a directive alone on its line takes the line with
/// it), and what they asked for. An unclosed `[[…` at the end is text: the reply is over.
pub fn strip(text: &str) -> Stripped<'_> {
    strip_until_clean(text, false)
}

/// [`strip`] for a reply still streaming (`text` is everything so far): a directive still
/// being written at the end is held back as well.
pub fn strip_streaming(text: &str) -> Stripped<'_> {
    strip_until_clean(text, true)
}

/// Strips until a pass finds nothing: taking a directive out can bring the text around it
/// together into a new one (`[[a[[b]]]]` → `[[a]]`).
fn strip_until_clean(text: &str, streaming: bool) -> Stripped<'_> {
    let mut stripped = strip_once(text, streaming);
    while let Cow::Owned(current) = &stripped.text {
        let again = strip_once(current, streaming);
        // Every change shortens the text: the same length is the same text.
        if again.text.len() == current.len() {
            break;
        }
        let next = again.text.into_owned();
        stripped.directives.merge(again.directives);
        stripped.text = Cow::Owned(next);
    }
    stripped
}

impl Directives {
    /// Adds what a later pass over the same reply found; the first reply target stays.
    fn merge(&mut self, later: Directives) {
        if self.reply_to.is_none() {
            self.reply_to = later.reply_to;
        }
        self.audio_as_voice |= later.audio_as_voice;
    }

    fn apply(&mut self, directive: Known) {
        match directive {
            Known::ReplyToCurrent if self.reply_to.is_none() => self.reply_to = Some(ReplyTarget::Current),
            Known::ReplyTo(Some(id)) if self.reply_to.is_none() => self.reply_to = Some(ReplyTarget::Message(id)),
            Known::AudioAsVoice => self.audio_as_voice = true,
            _ => {}
        }
    }
}

/// One pass: `Cow::Owned` exactly when something was taken out or held back.
fn strip_once(text: &str, streaming: bool) -> Stripped<'_> {
    let mut directives = Directives::default();
    let candidate = text.contains("[[") || (streaming && text.ends_with('['));
    if !candidate {
        return Stripped { text: Cow::Borrowed(text), directives };
    }
    let code = code_spans(text);
    let mut code = code.iter().peekable();
    let mut cuts: Vec<Range<usize>> = Vec::new();
    let mut kept_end = text.len();
    let mut at = 0;
    while let Some(found) = text[at..].find('[') {
        let start = at + found;
        while code.next_if(|span| span.end <= start).is_some() {}
        if let Some(span) = code.peek().filter(|span| span.start <= start) {
            at = span.end;
            continue;
        }
        match parse_at(&text[start..]) {
            Parse::Directive { len, name, value } => {
                if let Some(known) = classify(name, value) {
                    directives.apply(known);
                    let end = start + len;
                    let spaces = text[end..].len() - text[end..].trim_start_matches([' ', '\t']).len();
                    cuts.push(start..end + spaces);
                    at = end;
                    continue;
                }
            }
            Parse::Unfinished if streaming => {
                kept_end = start;
                break;
            }
            Parse::Unfinished | Parse::Not => {}
        }
        at = start + 1;
    }
    if cuts.is_empty() && kept_end == text.len() {
        return Stripped { text: Cow::Borrowed(text), directives };
    }
    let text = if cuts.is_empty() {
        Cow::Borrowed(text[..kept_end].trim_end())
    } else {
        Cow::Owned(trim_blank_lines(&cut(&text[..kept_end], &cuts)).to_owned())
    };
    Stripped { text, directives }
}

/// `text` without `cuts` (sorted, within single lines). A line that had a directive and
/// is left blank is dropped with its line break; a line left with text loses the spaces
/// the directive leaves at its end.
fn cut(text: &str, cuts: &[Range<usize>]) -> String {
    let mut out = String::with_capacity(text.len());
    let mut cuts = cuts.iter().peekable();
    let mut line_start = 0;
    for line in text.split_inclusive('\n') {
        let line_end = line_start + line.len();
        if cuts.peek().is_none_or(|cut| cut.start >= line_end) {
            out.push_str(line);
            line_start = line_end;
            continue;
        }
        let mut kept = String::with_capacity(line.len());
        let mut from = line_start;
        while let Some(cut) = cuts.next_if(|cut| cut.start < line_end) {
            kept.push_str(&text[from..cut.start]);
            from = cut.end.min(line_end);
        }
        kept.push_str(&text[from..line_end]);
        let body = kept.trim_end_matches(['\n', '\r']);
        let line_break = &kept[body.len()..];
        if !body.trim().is_empty() {
            out.push_str(body.trim_end_matches([' ', '\t']));
            out.push_str(line_break);
        }
        line_start = line_end;
    }
    out
}

/// `text` without blank lines at its start and whitespace at its end: what is left where
/// directives stood at the edges of a reply. Spaces that begin the first line with text
/// stay (an indented code block).
fn trim_blank_lines(text: &str) -> &str {
    let mut start = 0;
    for line in text.split_inclusive('\n') {
        if !line.ends_with('\n') || !line.trim().is_empty() {
            break;
        }
        start += line.len();
    }
    text[start..].trim_end()
}

/// A directive Ferry acts on or removes.
enum Known {
    ReplyToCurrent,
    /// The message id, if the value is one.
    ReplyTo(Option<String>),
    AudioAsVoice,
    /// Follows the syntax, but this version does not know it: removed, nothing else.
    Unknown,
}

/// What a complete `[[name]]` / `[[name: value]]` is; `None` when it is text after all
/// (a name with capitals that Ferry does not know, such as a wiki link).
fn classify(name: &str, value: Option<&str>) -> Option<Known> {
    let known = if name.eq_ignore_ascii_case(REPLY_TO_CURRENT) {
        Known::ReplyToCurrent
    } else if name.eq_ignore_ascii_case(REPLY_TO) {
        Known::ReplyTo(value.and_then(message_id))
    } else if name.eq_ignore_ascii_case(AUDIO_AS_VOICE) {
        Known::AudioAsVoice
    } else if name.bytes().all(|byte| byte.is_ascii_lowercase() || byte == b'_') {
        Known::Unknown
    } else {
        return None;
    };
    Some(known)
}

/// A `[[reply_to: …]]` value that can be a message id: one word of sane length. Whether
/// the platform knows it is the platform's to say (a refused threaded send goes again
/// unthreaded, see the outbound scheduler).
fn message_id(value: &str) -> Option<String> {
    let id = value.trim();
    let plausible = !id.is_empty() && id.len() <= MAX_MESSAGE_ID_BYTES && !id.contains(char::is_whitespace);
    plausible.then(|| id.to_owned())
}

/// What stands at a `[`.
#[derive(Debug, PartialEq, Eq)]
enum Parse<'a> {
    /// A whole `[[name]]` / `[[name: value]]`, `len` bytes long; the value trimmed.
    Directive { len: usize, name: &'a str, value: Option<&'a str> },
    /// The text ends while this could still become a directive.
    Unfinished,
    /// Not a directive.
    Not,
}

/// Reads the directive that `text` (starting with `[`) starts with, if any.
fn parse_at(text: &str) -> Parse<'_> {
    let bytes = text.as_bytes();
    let limit = bytes.len().min(MAX_DIRECTIVE_BYTES);
    // Ran out: unfinished if the text ended, not a directive if it just went on too long.
    let ran_out = || if limit == bytes.len() { Parse::Unfinished } else { Parse::Not };
    let is_space = |byte: u8| byte == b' ' || byte == b'\t';
    let skip = |mut i: usize, pred: &dyn Fn(u8) -> bool| {
        while i < limit && pred(bytes[i]) {
            i += 1;
        }
        i
    };
    match bytes.get(1) {
        None => return Parse::Unfinished,
        Some(b'[') => {}
        Some(_) => return Parse::Not,
    }
    let name_start = skip(2, &is_space);
    let name_end = skip(name_start, &|byte| byte.is_ascii_alphabetic() || byte == b'_');
    let mut i = skip(name_end, &is_space);
    if i == limit {
        return ran_out();
    }
    if name_start == name_end {
        return Parse::Not;
    }
    let mut value = None;
    if bytes[i] == b':' {
        let value_end = skip(i + 1, &|byte| !matches!(byte, b'[' | b']' | b'`' | b'\n' | b'\r'));
        if value_end == limit {
            return ran_out();
        }
        // Only ASCII bytes stop the value, so both ends are character boundaries.
        value = Some(text[i + 1..value_end].trim());
        i = value_end;
    }
    match (bytes[i], bytes.get(i + 1).filter(|_| i + 1 < limit)) {
        (b']', Some(b']')) => Parse::Directive { len: i + 2, name: &text[name_start..name_end], value },
        (b']', None) => ran_out(),
        _ => Parse::Not,
    }
}

/// Byte ranges of `text` that are code, in order: fenced code blocks (to the end of the
/// text while unclosed) and inline code spans (a backtick run up to the next run of the
/// same length; an unmatched run is plain text, as in CommonMark).
fn code_spans(text: &str) -> Vec<Range<usize>> {
    let mut spans = Vec::new();
    // The open fence: its marker byte, marker length and first byte.
    let mut fence: Option<(u8, usize, usize)> = None;
    let mut prose_start = 0;
    let mut line_start = 0;
    for line in text.split_inclusive('\n') {
        let line_end = line_start + line.len();
        match fence {
            None => {
                if let Some((marker, len)) = fence_opening(line) {
                    inline_code_spans(text, prose_start..line_start, &mut spans);
                    fence = Some((marker, len, line_start));
                }
            }
            Some((marker, len, start)) => {
                if fence_closes(line, marker, len) {
                    spans.push(start..line_end);
                    fence = None;
                    prose_start = line_end;
                }
            }
        }
        line_start = line_end;
    }
    match fence {
        Some((_, _, start)) => spans.push(start..text.len()),
        None => inline_code_spans(text, prose_start..text.len(), &mut spans),
    }
    spans
}

/// Up to three spaces of indent, then the run of `marker` that starts `line`, and what
/// follows it.
fn marker_run(line: &str) -> Option<(u8, usize, &str)> {
    let unindented = line.trim_start_matches(' ');
    if line.len() - unindented.len() > 3 {
        return None;
    }
    let marker = *unindented.as_bytes().first().filter(|byte| matches!(byte, b'`' | b'~'))?;
    let rest = unindented.trim_start_matches(char::from(marker));
    Some((marker, unindented.len() - rest.len(), rest))
}

/// The fence `line` opens: three or more backticks (whose info string has none) or tildes.
fn fence_opening(line: &str) -> Option<(u8, usize)> {
    let (marker, len, rest) = marker_run(line)?;
    (len >= 3 && !(marker == b'`' && rest.contains('`'))).then_some((marker, len))
}

/// Whether `line` closes a fence of `len` `marker`s: at least as many, then only spaces.
fn fence_closes(line: &str, marker: u8, len: usize) -> bool {
    marker_run(line).is_some_and(|(found, count, rest)| found == marker && count >= len && rest.trim().is_empty())
}

/// Inline code spans within `range` of `text` (which holds no fenced block).
fn inline_code_spans(text: &str, range: Range<usize>, spans: &mut Vec<Range<usize>>) {
    let bytes = text.as_bytes();
    let run_end = |mut i: usize| {
        while i < range.end && bytes[i] == b'`' {
            i += 1;
        }
        i
    };
    let mut i = range.start;
    while i < range.end {
        if bytes[i] != b'`' {
            i += 1;
            continue;
        }
        let open = i;
        i = run_end(i);
        let len = i - open;
        let mut j = i;
        while j < range.end {
            if bytes[j] != b'`' {
                j += 1;
                continue;
            }
            let close = j;
            j = run_end(j);
            if j - close == len {
                spans.push(open..j);
                i = j;
                break;
            }
        }
    }
}

#[cfg(test)]
mod tests;
