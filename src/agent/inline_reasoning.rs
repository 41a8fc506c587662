//! Inline reasoning: `<think>…</think>` blocks written into a model's answer text.
//!
//! Many models served over the OpenAI-compatible API (DeepSeek-R1 style, Qwen, local
//! llama.cpp models) do not return their reasoning in a separate field: they write it into
//! the answer as `<think>…</think>` (or `<thinking>`, `<thought>`, in any case, sometimes with
//! attributes such as `<think time="3s">`). Ferry streams text deltas into chat previews that
//! are edited in place, so the reasoning has to be taken out *while* the text streams: once a
//! fragment of a tag or of the reasoning reached a preview, the user has seen it.
//!
//! [`InlineReasoning`] is a small character-driven state machine fed one delta at a time. It
//! holds back only what may still turn into a tag (a trailing `<`, `<th`, `<think ty…`) and
//! releases everything else at once, so previews stay live. Because every decision depends
//! only on the characters seen so far, never on where the deltas were split, any split of a
//! text sorts into the same answer and reasoning as the whole text in one delta.
//!
//! Two details keep replies clean:
//! - Leading whitespace of the answer is held until real text arrives, and dropped when a tag
//!   came first: `<think>x</think>\n\nNO_REPLY` answers exactly `NO_REPLY`, and a reply that is
//!   only reasoning answers nothing.
//! - Tags inside the answer's Markdown code (fenced blocks and inline code spans) are text: a
//!   model explaining the `<think>` tag keeps its example.
//!
//! A closing tag outside any block (models whose chat template pre-fills the opening tag
//! start straight with the reasoning) is dropped: the text before it already went out as
//! answer, but the tag itself never shows.

/// Longest opening tag held back, attributes included, in chars: past it, the text cannot be
/// one of our tags, and holding it longer would freeze the preview.
const MAX_TAG_CHARS: usize = 256;

/// Tag names that mark inline reasoning, lowercase.
const NAMES: [&str; 3] = ["think", "thinking", "thought"];

/// A piece of a model's text, sorted.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Piece {
    Answer(String),
    Reasoning(String),
}

/// Separates inline reasoning blocks from the answer as text streams in.
#[derive(Debug, Default, Clone)]
pub struct InlineReasoning {
    /// The name of the open reasoning block (`think` for `<think>`), if inside one: only the
    /// closing tag of that name ends it.
    block: Option<&'static str>,
    /// Text held back because it may still become a tag.
    candidate: Option<Candidate>,
    /// Leading whitespace of the answer, held until it is known whether real text follows.
    lead: String,
    /// Answer text other than whitespace has been released.
    answer_started: bool,
    /// A tag came before any answer text: leading whitespace of the answer is dropped.
    trim_lead: bool,
    /// Markdown code state of the released answer, so tags in code stay text.
    code: CodeTracker,
    saw_reasoning: bool,
}

impl InlineReasoning {
    pub fn new() -> Self {
        Self::default()
    }

    /// Feeds one delta; returns what can be released now (adjacent pieces of one kind merged,
    /// no empty pieces).
    pub fn push(&mut self, delta: &str) -> Vec<Piece> {
        let mut out = Pieces::default();
        for c in delta.chars() {
            self.step(c, &mut out);
        }
        out.0
    }

    /// The stream ended: releases whatever was held back (a held partial tag that never
    /// completed is answer text; an unclosed reasoning block's content is reasoning).
    ///
    /// Leading whitespace that no answer text followed is dropped. The sorter is then ready for
    /// a new stream; [`InlineReasoning::saw_reasoning`] still reports this one.
    pub fn finish(&mut self) -> Vec<Piece> {
        let mut out = Pieces::default();
        if let Some(candidate) = self.candidate.take() {
            self.release(&candidate.text, &mut out);
        }
        *self = Self { saw_reasoning: self.saw_reasoning, ..Self::default() };
        out.0
    }

    /// Whether any reasoning was seen.
    pub fn saw_reasoning(&self) -> bool {
        self.saw_reasoning
    }

    /// Takes one char: it extends a held candidate tag, or is sorted on its own.
    fn step(&mut self, c: char, out: &mut Pieces) {
        if let Some(mut candidate) = self.candidate.take() {
            match candidate.accept(c, self.expect()) {
                Verdict::More => {
                    self.candidate = Some(candidate);
                    return;
                }
                Verdict::Open(name) => return self.open_block(name),
                Verdict::Close => return self.close_block(),
                // The held text is settled; `c` was not taken and may start a tag itself.
                Verdict::NotATag => self.release(&candidate.text, out),
            }
        }
        self.free_char(c, out);
    }

    /// Sorts a char that is not part of a candidate tag.
    fn free_char(&mut self, c: char, out: &mut Pieces) {
        if c == '<' && (self.block.is_some() || !self.code.in_code()) {
            self.candidate = Some(Candidate::new());
        } else if self.block.is_some() {
            out.reasoning(c.encode_utf8(&mut [0; 4]));
        } else {
            self.answer_char(c, out);
        }
    }

    /// Which tags may complete now: any of ours in the answer, only the matching closing tag
    /// inside a block.
    fn expect(&self) -> Expect {
        self.block.map_or(Expect::Any, Expect::Close)
    }

    fn open_block(&mut self, name: &'static str) {
        self.block = Some(name);
        self.saw_reasoning = true;
        self.tag_taken();
    }

    /// Ends the open block; outside one, a stray closing tag is simply dropped.
    fn close_block(&mut self) {
        self.block = None;
        self.tag_taken();
    }

    /// A tag before any answer text means the whitespace around it separates reasoning from
    /// the answer: it is not part of the answer.
    fn tag_taken(&mut self) {
        if !self.answer_started {
            self.lead.clear();
            self.trim_lead = true;
        }
    }

    /// Releases held text that turned out not to be a tag, as the kind of text around it.
    fn release(&mut self, text: &str, out: &mut Pieces) {
        if self.block.is_some() {
            out.reasoning(text);
        } else {
            for c in text.chars() {
                self.answer_char(c, out);
            }
        }
    }

    /// Emits one char of answer, holding or dropping leading whitespace.
    fn answer_char(&mut self, c: char, out: &mut Pieces) {
        if !self.answer_started {
            if c.is_whitespace() {
                if !self.trim_lead {
                    self.lead.push(c);
                }
                return;
            }
            self.answer_started = true;
            let lead = std::mem::take(&mut self.lead);
            lead.chars().for_each(|w| self.code.feed(w));
            out.answer(&lead);
        }
        self.code.feed(c);
        out.answer(c.encode_utf8(&mut [0; 4]));
    }
}

/// What a push releases, with adjacent pieces of one kind merged.
#[derive(Debug, Default)]
struct Pieces(Vec<Piece>);

impl Pieces {
    fn answer(&mut self, text: &str) {
        match self.0.last_mut() {
            _ if text.is_empty() => {}
            Some(Piece::Answer(last)) => last.push_str(text),
            _ => self.0.push(Piece::Answer(text.to_owned())),
        }
    }

    fn reasoning(&mut self, text: &str) {
        match self.0.last_mut() {
            _ if text.is_empty() => {}
            Some(Piece::Reasoning(last)) => last.push_str(text),
            _ => self.0.push(Piece::Reasoning(text.to_owned())),
        }
    }
}

/// The tags a candidate may complete as.
#[derive(Debug, Clone, Copy)]
enum Expect {
    /// In the answer: an opening tag of any of our names, or a stray closing one.
    Any,
    /// In a block: only the closing tag of this name.
    Close(&'static str),
}

impl Expect {
    /// Whether `partial` (lowercase) can still grow into an expected name.
    fn could_become(self, partial: &str) -> bool {
        match self {
            Expect::Any => NAMES.iter().any(|name| name.starts_with(partial)),
            Expect::Close(name) => name.starts_with(partial),
        }
    }

    /// The expected name `name` (lowercase) is, if any.
    fn complete(self, name: &str) -> Option<&'static str> {
        match self {
            Expect::Any => NAMES.into_iter().find(|known| *known == name),
            Expect::Close(known) => (known == name).then_some(known),
        }
    }
}

/// What a candidate made of the next char.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Verdict {
    /// Taken: the candidate may still become a tag.
    More,
    /// An opening tag of this name is complete.
    Open(&'static str),
    /// A closing tag is complete.
    Close,
    /// Not taken: the held text is not a tag.
    NotATag,
}

/// Where a candidate is in the tag grammar: `<` `/`? name, then attributes (opening tags)
/// or whitespace (closing tags), then `>`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Stage {
    /// Right after `<`.
    Start,
    Name,
    Attributes,
    Space,
}

/// Text held back because it may still become one of our tags.
#[derive(Debug, Clone)]
struct Candidate {
    /// The held text as written, from `<`.
    text: String,
    /// Length of `text` in chars, for the cap.
    chars: usize,
    closing: bool,
    /// The tag name so far, lowercase.
    name: String,
    stage: Stage,
}

impl Candidate {
    fn new() -> Self {
        Self { text: String::from('<'), chars: 1, closing: false, name: String::new(), stage: Stage::Start }
    }

    /// Decides on the next char; a taken char joins the held text.
    fn accept(&mut self, c: char, expect: Expect) -> Verdict {
        if self.chars >= MAX_TAG_CHARS {
            return Verdict::NotATag;
        }
        let verdict = match self.stage {
            Stage::Start if c == '/' => {
                self.closing = true;
                self.stage = Stage::Name;
                Verdict::More
            }
            // Inside a block only a closing tag counts.
            Stage::Start if matches!(expect, Expect::Close(_)) => Verdict::NotATag,
            Stage::Start | Stage::Name => self.name_char(c, expect),
            Stage::Attributes => match c {
                '>' => self.complete(expect),
                // A tag fits on one line; a new `<` may start the real one.
                '<' | '\n' => Verdict::NotATag,
                _ => Verdict::More,
            },
            Stage::Space => match c {
                '>' => self.complete(expect),
                c if c.is_whitespace() => Verdict::More,
                _ => Verdict::NotATag,
            },
        };
        if verdict == Verdict::More {
            self.text.push(c);
            self.chars += 1;
        }
        verdict
    }

    /// A char while reading the name: it extends the name, or ends a complete one.
    fn name_char(&mut self, c: char, expect: Expect) -> Verdict {
        if c.is_ascii_alphabetic() {
            self.name.push(c.to_ascii_lowercase());
            self.stage = Stage::Name;
            return if expect.could_become(&self.name) { Verdict::More } else { Verdict::NotATag };
        }
        if expect.complete(&self.name).is_none() {
            return Verdict::NotATag;
        }
        match c {
            '>' => self.complete(expect),
            c if c.is_whitespace() => {
                self.stage = if self.closing { Stage::Space } else { Stage::Attributes };
                Verdict::More
            }
            _ => Verdict::NotATag,
        }
    }

    /// The tag a `>` completes.
    fn complete(&self, expect: Expect) -> Verdict {
        match expect.complete(&self.name) {
            None => Verdict::NotATag,
            Some(_) if self.closing => Verdict::Close,
            Some(name) => Verdict::Open(name),
        }
    }
}

/// A run of backticks or tildes being read: its meaning depends on its full length.
#[derive(Debug, Default, Clone, Copy)]
struct Run {
    mark: char,
    len: usize,
    at_line_start: bool,
}

/// An open fenced code block: closed by a line starting with at least as many of its marks.
#[derive(Debug, Clone, Copy)]
struct Fence {
    mark: char,
    len: usize,
}

/// Follows just enough Markdown in the released answer to know whether the next char is in
/// code: fenced blocks (a line starting with ``` or ~~~, up to three spaces in) and inline
/// code spans (a run of backticks, closed by a run of the same length, or by a blank line).
///
/// It sees each char once, in order, so it stays linear and split-independent; a run of
/// marks is only settled when the next char (or a query) shows where it ends.
#[derive(Debug, Default, Clone)]
struct CodeTracker {
    /// The line is past its start: a run now cannot open or close a fence.
    mid_line: bool,
    /// Spaces at the start of the line so far.
    indent: u8,
    /// The line has had something other than whitespace: if not, a newline ends a paragraph.
    line_has_text: bool,
    run: Run,
    fence: Option<Fence>,
    /// The length of the backtick run that opened the current inline code span, or 0.
    inline: usize,
}

impl CodeTracker {
    /// Whether a char following the text so far would be in code.
    fn in_code(&mut self) -> bool {
        self.end_run();
        self.fence.is_some() || self.inline > 0
    }

    fn feed(&mut self, c: char) {
        if c == '`' || c == '~' {
            return self.mark(c);
        }
        self.end_run();
        match c {
            '\n' => {
                if !self.line_has_text {
                    self.inline = 0;
                }
                self.mid_line = false;
                self.indent = 0;
                self.line_has_text = false;
            }
            ' ' if !self.mid_line && self.indent < 3 => self.indent += 1,
            c => {
                self.mid_line = true;
                self.line_has_text |= !c.is_whitespace();
            }
        }
    }

    /// A backtick or tilde: extends the current run or starts a new one.
    fn mark(&mut self, c: char) {
        if self.run.len > 0 && self.run.mark == c {
            self.run.len += 1;
            return;
        }
        self.end_run();
        self.run = Run { mark: c, len: 1, at_line_start: !self.mid_line };
        self.mid_line = true;
        self.line_has_text = true;
    }

    /// Settles the finished run: it may open or close a fence or an inline code span.
    fn end_run(&mut self) {
        let run = std::mem::take(&mut self.run);
        if run.len == 0 {
            return;
        }
        if let Some(fence) = self.fence {
            if run.at_line_start && run.mark == fence.mark && run.len >= fence.len {
                self.fence = None;
            }
        } else if run.at_line_start && run.len >= 3 {
            self.fence = Some(Fence { mark: run.mark, len: run.len });
            self.inline = 0;
        } else if run.mark == '`' {
            if self.inline == 0 {
                self.inline = run.len;
            } else if self.inline == run.len {
                self.inline = 0;
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    /// Sorted text: the answer and the reasoning, each concatenated.
    #[derive(Debug, Default, PartialEq, Eq)]
    struct Sorted {
        answer: String,
        reasoning: String,
    }

    impl Sorted {
        fn add(&mut self, pieces: Vec<Piece>) {
            for piece in pieces {
                match piece {
                    Piece::Answer(text) => self.answer.push_str(&text),
                    Piece::Reasoning(text) => self.reasoning.push_str(&text),
                }
            }
        }
    }

    /// Feeds `deltas` in order and finishes.
    fn feed(deltas: &[&str]) -> Sorted {
        let mut sorter = InlineReasoning::new();
        let mut sorted = Sorted::default();
        for delta in deltas {
            sorted.add(sorter.push(delta));
        }
        sorted.add(sorter.finish());
        sorted
    }

    fn whole(text: &str) -> Sorted {
        feed(&[text])
    }

    fn sorted(answer: &str, reasoning: &str) -> Sorted {
        Sorted { answer: answer.to_owned(), reasoning: reasoning.to_owned() }
    }

    fn answer(text: &str) -> Piece {
        Piece::Answer(text.to_owned())
    }

    fn reasoning(text: &str) -> Piece {
        Piece::Reasoning(text.to_owned())
    }

    /// Splits `text` before the given char positions (taken modulo its length).
    fn split_at_chars(text: &str, cuts: &[usize]) -> Vec<String> {
        let bounds: Vec<usize> = text.char_indices().map(|(at, _)| at).chain([text.len()]).collect();
        let mut at: Vec<usize> = cuts.iter().filter_map(|cut| bounds.get(cut % bounds.len()).copied()).collect();
        at.extend([0, text.len()]);
        at.sort_unstable();
        at.dedup();
        at.windows(2)
            .filter_map(|pair| text.get(pair.first().copied()?..pair.get(1).copied()?))
            .map(String::from)
            .collect()
    }

    fn has_tag_text(text: &str) -> bool {
        let lower = text.to_lowercase();
        ["<think", "</think", "<thinking", "</thinking", "<thought", "</thought"].iter().any(|tag| lower.contains(tag))
    }

    #[test]
    fn basic_block() {
        let mut sorter = InlineReasoning::new();
        assert_eq!(sorter.push("<think>pondering</think>Answer"), vec![reasoning("pondering"), answer("Answer")]);
        assert!(sorter.finish().is_empty());
        assert!(sorter.saw_reasoning());
    }

    #[test]
    fn no_reasoning_seen() {
        let mut sorter = InlineReasoning::new();
        assert_eq!(sorter.push("Hello"), vec![answer("Hello")]);
        assert!(!sorter.saw_reasoning());
    }

    #[test]
    fn split_at_every_position() {
        let text = "<think>x</think>Answer";
        let expected = sorted("Answer", "x");
        let len = text.len();
        for first in 0..=len {
            for second in first..=len {
                let parts = [&text[..first], &text[first..second], &text[second..]];
                assert_eq!(feed(&parts), expected, "split {parts:?}");
            }
        }
        let chars: Vec<String> = text.chars().map(String::from).collect();
        assert_eq!(feed(&chars.iter().map(String::as_str).collect::<Vec<_>>()), expected);
    }

    #[test]
    fn never_emits_a_fragment_while_streaming() {
        let mut sorter = InlineReasoning::new();
        assert_eq!(sorter.push("Hi <"), vec![answer("Hi ")]);
        assert!(sorter.push("th").is_empty());
        assert!(sorter.push("ink ty").is_empty());
        assert_eq!(sorter.push("pe=\"a\">deep"), vec![reasoning("deep")]);
        assert_eq!(sorter.push(" thought</th"), vec![reasoning(" thought")]);
        assert_eq!(sorter.push("ink>!"), vec![answer("!")]);
    }

    #[test]
    fn attributes() {
        assert_eq!(whole("<think time=\"3s\">x</think>A"), sorted("A", "x"));
        assert_eq!(whole("<thinking type='summary' id=2>x</thinking>A"), sorted("A", "x"));
        assert_eq!(whole("<think\ttime=1>x</think >A"), sorted("A", "x"));
    }

    #[test]
    fn any_case() {
        assert_eq!(whole("<THINK>x</Think>A"), sorted("A", "x"));
        assert_eq!(whole("<ThInKiNg>x</THINKING\n>A"), sorted("A", "x"));
    }

    #[test]
    fn thinking_and_thought() {
        assert_eq!(whole("<thinking>x</thinking>A"), sorted("A", "x"));
        assert_eq!(whole("<thought>x</thought>A"), sorted("A", "x"));
    }

    #[test]
    fn closing_tag_must_match_its_opener() {
        assert_eq!(whole("<think>a</thinking>b</think>c"), sorted("c", "a</thinking>b"));
        assert_eq!(whole("<thinking>a</think>b</thinking>c"), sorted("c", "a</think>b"));
        assert_eq!(whole("<think>a<think>b</think>c"), sorted("c", "a<think>b"));
    }

    #[test]
    fn unclosed_block_is_reasoning() {
        let mut sorter = InlineReasoning::new();
        assert_eq!(sorter.push("<think>still going</thi"), vec![reasoning("still going")]);
        assert_eq!(sorter.finish(), vec![reasoning("</thi")]);
        assert!(sorter.saw_reasoning());
    }

    #[test]
    fn lone_angle_brackets_are_released_once_decided() {
        let mut sorter = InlineReasoning::new();
        assert_eq!(sorter.push("if a <"), vec![answer("if a ")]);
        assert_eq!(sorter.push(" b then"), vec![answer("< b then")]);
        assert_eq!(sorter.push(" x<"), vec![answer(" x")]);
        assert_eq!(sorter.push("=y"), vec![answer("<=y")]);
        assert_eq!(sorter.push(" <"), vec![answer(" ")]);
        assert_eq!(sorter.finish(), vec![answer("<")]);
        assert_eq!(whole("a < b > c <<think>x</think>"), sorted("a < b > c <", "x"));
    }

    #[test]
    fn other_tags_are_text() {
        assert_eq!(whole("<thinker>hm</thinker>"), sorted("<thinker>hm</thinker>", ""));
        assert_eq!(whole("<th>cell</th>"), sorted("<th>cell</th>", ""));
        assert_eq!(whole("<b>bold</b> <think/>"), sorted("<b>bold</b> <think/>", ""));
        let mut sorter = InlineReasoning::new();
        assert!(sorter.push("<thin").is_empty());
        assert_eq!(sorter.push("g>"), vec![answer("<thing>")]);
    }

    #[test]
    fn overlong_tag_is_text() {
        let longest = format!("<think {}", "a".repeat(MAX_TAG_CHARS - 7));
        let mut sorter = InlineReasoning::new();
        assert!(sorter.push(&longest).is_empty());
        assert_eq!(sorter.push("a>x"), vec![answer(&format!("{longest}a>x"))]);
        assert_eq!(whole("<think note\n>x"), sorted("<think note\n>x", ""));
    }

    #[test]
    fn tags_in_a_code_fence_are_text() {
        let text = "Use it like this:\n```xml\n<think>plan</think>\n```\n<think>real</think>Done";
        assert_eq!(whole(text), sorted("Use it like this:\n```xml\n<think>plan</think>\n```\nDone", "real"));
        // Closed only by a line starting with at least as many of the same marks.
        let tilde = "~~~~\n<think>a</think>\n~~~\n``` </think>~~~~\n~~~~~\n<think>b</think>";
        assert_eq!(whole(tilde), sorted("~~~~\n<think>a</think>\n~~~\n``` </think>~~~~\n~~~~~\n", "b"));
    }

    #[test]
    fn tags_in_inline_code_are_text() {
        assert_eq!(whole("Wrap it in `<think>` tags"), sorted("Wrap it in `<think>` tags", ""));
        assert_eq!(whole("``a ` <think>`` <think>b</think>"), sorted("``a ` <think>`` ", "b"));
        // A blank line ends an unclosed span.
        assert_eq!(whole("a ` b\n\n<think>c</think>d"), sorted("a ` b\n\nd", "c"));
    }

    #[test]
    fn no_reply_after_a_block() {
        assert_eq!(whole("<think>nothing to say</think>\n\nNO_REPLY"), sorted("NO_REPLY", "nothing to say"));
        assert_eq!(feed(&["<think>x</think>", "\n", " \n", "NO_", "REPLY"]), sorted("NO_REPLY", "x"));
        assert_eq!(whole("\n<think>x</think>Hi"), sorted("Hi", "x"));
        assert_eq!(whole(" \n <think>x</think>\n"), sorted("", "x"));
    }

    #[test]
    fn leading_whitespace_without_tags_is_kept() {
        let mut sorter = InlineReasoning::new();
        assert!(sorter.push("\n  ").is_empty());
        assert_eq!(sorter.push("Hi"), vec![answer("\n  Hi")]);
        assert_eq!(whole(" \n\t"), sorted("", ""));
    }

    #[test]
    fn two_blocks() {
        let mut sorter = InlineReasoning::new();
        assert_eq!(sorter.push("<think>a</think><think>b</think>"), vec![reasoning("ab")]);
        assert_eq!(whole("<think>a</think>\n<thought>b</thought>\nX"), sorted("X", "ab"));
    }

    #[test]
    fn reasoning_between_answer_parts() {
        let mut sorter = InlineReasoning::new();
        let pieces = sorter.push("Let me check. <think>is it 4?</think>\nIt is 4.");
        assert_eq!(pieces, vec![answer("Let me check. "), reasoning("is it 4?"), answer("\nIt is 4.")]);
    }

    #[test]
    fn stray_closing_tag_is_dropped() {
        assert_eq!(whole("pondering</think>\n\nAnswer"), sorted("pondering\n\nAnswer", ""));
        assert_eq!(whole("\n</think>\n\nAnswer"), sorted("Answer", ""));
    }

    #[test]
    fn multibyte_text_around_tags() {
        assert_eq!(whole("é<think>日本</think>🙂"), sorted("é🙂", "日本"));
        assert_eq!(whole("<thínk>x</thínk>"), sorted("<thínk>x</thínk>", ""));
        assert_eq!(whole("<\u{212A}>"), sorted("<\u{212A}>", ""));
    }

    #[test]
    fn finish_starts_a_new_stream() {
        let mut sorter = InlineReasoning::new();
        sorter.push("<think>a");
        sorter.finish();
        assert_eq!(sorter.push("b"), vec![answer("b")]);
        assert!(sorter.saw_reasoning());
    }

    /// Text built from fragments that often meet at tag boundaries.
    fn fragments() -> impl Strategy<Value = String> {
        let fragment = prop::sample::select(vec![
            "<think>",
            "</think>",
            "<thinking>",
            "</thinking>",
            "<THOUGHT>",
            "</Thought >",
            "<think time=\"3s\">",
            "<th>",
            "<",
            "</",
            ">",
            "/",
            " ",
            "\n",
            "\n\n",
            "a",
            "b c",
            "NO_REPLY",
            "é",
            "🙂",
            "`",
            "```",
            "~~~",
        ]);
        prop::collection::vec(fragment, 0..40).prop_map(|parts| parts.concat())
    }

    /// Like [`fragments`], without Markdown code marks: every tag is outside code.
    fn fragments_outside_code() -> impl Strategy<Value = String> {
        fragments().prop_filter("no code marks", |text| !text.contains(['`', '~']))
    }

    /// One segment of a structured reply: answer text, or a reasoning block.
    #[derive(Debug, Clone)]
    enum Segment {
        Answer(String),
        Block { open: String, content: String, close: String },
    }

    fn segments() -> impl Strategy<Value = Vec<Segment>> {
        // No `t` or `/`: a `<` in the answer text can never grow into a tag.
        let answer = "[a-su-z <>=\n]{0,12}";
        let name = prop::sample::select(vec!["think", "THINK", "Thinking", "thought"]);
        let attributes = prop::sample::select(vec!["", " time=\"3s\"", " a b"]);
        let block = (name, attributes, "[a-z <>\n]{0,12}").prop_map(|(name, attributes, content)| Segment::Block {
            open: format!("<{name}{attributes}>"),
            content,
            close: format!("</{} >", name.to_uppercase()),
        });
        prop::collection::vec(prop_oneof![answer.prop_map(Segment::Answer), block], 0..6)
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(1000))]

        #[test]
        fn any_split_sorts_like_the_whole_text(text in fragments(), cuts in prop::collection::vec(any::<usize>(), 0..8)) {
            let parts = split_at_chars(&text, &cuts);
            prop_assert_eq!(parts.concat(), text.clone());
            let deltas: Vec<&str> = parts.iter().map(String::as_str).collect();
            prop_assert_eq!(feed(&deltas), whole(&text));
        }

        #[test]
        fn char_by_char_sorts_like_the_whole_text(text in fragments()) {
            let chars: Vec<String> = text.chars().map(String::from).collect();
            let deltas: Vec<&str> = chars.iter().map(String::as_str).collect();
            prop_assert_eq!(feed(&deltas), whole(&text));
        }

        #[test]
        fn no_tag_reaches_the_answer(text in fragments_outside_code(), cuts in prop::collection::vec(any::<usize>(), 0..8)) {
            let parts = split_at_chars(&text, &cuts);
            let mut sorter = InlineReasoning::new();
            let mut answer_so_far = String::new();
            let mut releases: Vec<Vec<Piece>> = parts.iter().map(|part| sorter.push(part)).collect();
            releases.push(sorter.finish());
            for pieces in releases {
                prop_assert!(pieces.iter().all(|piece| !matches!(piece, Piece::Answer(t) | Piece::Reasoning(t) if t.is_empty())));
                prop_assert!(pieces.windows(2).all(|pair| std::mem::discriminant(&pair[0]) != std::mem::discriminant(&pair[1])));
                for piece in pieces {
                    if let Piece::Answer(text) = piece {
                        prop_assert!(!has_tag_text(&text), "answer piece {:?}", text);
                        answer_so_far.push_str(&text);
                    }
                }
                prop_assert!(!has_tag_text(&answer_so_far), "answer {:?}", answer_so_far);
            }
        }

        #[test]
        fn text_without_angle_brackets_passes_through(
            text in "[a-z `~\n\t>é🙂]{0,60}",
            cuts in prop::collection::vec(any::<usize>(), 0..8),
        ) {
            let mut sorter = InlineReasoning::new();
            let mut seen = String::new();
            let mut answer = String::new();
            for part in split_at_chars(&text, &cuts) {
                seen.push_str(&part);
                for piece in sorter.push(&part) {
                    match piece {
                        Piece::Answer(text) => answer.push_str(&text),
                        Piece::Reasoning(text) => prop_assert!(false, "reasoning {:?}", text),
                    }
                }
                let expected = if seen.trim().is_empty() { "" } else { seen.as_str() };
                prop_assert_eq!(&answer, expected);
            }
            prop_assert!(sorter.finish().is_empty());
            prop_assert!(!sorter.saw_reasoning());
        }

        #[test]
        fn structured_replies_sort_into_their_parts(
            segments in segments(),
            cuts in prop::collection::vec(any::<usize>(), 0..8),
        ) {
            let mut text = String::new();
            let mut expected = Sorted::default();
            let mut tag_before_answer = false;
            for segment in &segments {
                match segment {
                    Segment::Answer(answer) => {
                        text.push_str(answer);
                        expected.answer.push_str(answer);
                    }
                    Segment::Block { open, content, close } => {
                        text.push_str(&format!("{open}{content}{close}"));
                        expected.reasoning.push_str(content);
                        tag_before_answer |= expected.answer.trim().is_empty();
                    }
                }
            }
            if tag_before_answer || expected.answer.trim().is_empty() {
                expected.answer = expected.answer.trim_start().to_owned();
            }
            let parts = split_at_chars(&text, &cuts);
            let deltas: Vec<&str> = parts.iter().map(String::as_str).collect();
            prop_assert_eq!(feed(&deltas), expected);
        }

        #[test]
        fn never_panics(text in any::<String>(), cuts in prop::collection::vec(any::<usize>(), 0..8)) {
            let parts = split_at_chars(&text, &cuts);
            let deltas: Vec<&str> = parts.iter().map(String::as_str).collect();
            prop_assert_eq!(feed(&deltas), whole(&text));
        }
    }
}
