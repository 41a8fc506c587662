//! The block layout shared by the dialects that cannot show markdown's block syntax
//! (Telegram HTML, Slack mrkdwn, plain text): paragraphs separated by a blank line, headings
//! as bold lines, list items as `• item` / `1. item` lines indented under their marker, quotes,
//! code blocks and tables as preformatted blocks, images as links.
//!
//! [`render`] walks the parser's events once and asks a [`Markup`] only for what differs: how
//! to escape text, which markers or tags mean bold, how a link, a code block and a quote look.

use pulldown_cmark::{CodeBlockKind, CowStr, Event, LinkType, Tag, TagEnd};

use super::table::TableBuilder;

/// Marks an unordered list item.
pub(super) const BULLET: &str = "• ";
/// Stands for a thematic break (`---`).
pub(super) const RULE: &str = "──────────";

/// The inline styles markdown has; `Bold` also marks headings.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Style {
    Bold,
    Italic,
    Strike,
}

/// How a dialect marks a block quote.
pub(super) enum QuoteStyle {
    /// A marker at the start of every quoted line (`> `).
    LinePrefix(&'static str),
    /// One tag pair around the quote (Telegram's `<blockquote>`); a nested quote is merged
    /// into the outer one, since Telegram does not nest them.
    Tags(&'static str, &'static str),
}

/// A link or an image, as the dialect needs it.
pub(super) struct Link {
    /// The target; an e-mail autolink already has its `mailto:`.
    pub(super) url: String,
    /// Written as `<https://…>` by the model: the label is the URL itself.
    pub(super) autolink: bool,
}

/// What one dialect decides; the layout does the rest.
pub(super) trait Markup {
    /// The marker or tag that opens (`open`) or closes a style.
    fn style(&self, style: Style, open: bool) -> &'static str;
    /// Appends text the model wrote, escaped as the dialect needs.
    fn text(&self, text: &str, out: &mut String);
    fn inline_code(&self, code: &str, out: &mut String);
    /// Appends a preformatted block (a code block, or a table with `lang` empty) starting at
    /// the current position; a new line must start with `line_prefix` if the dialect shows
    /// quotes and list indentation as line prefixes.
    fn code_block(&self, lang: &str, code: &str, line_prefix: &str, out: &mut String);
    /// Appends a link whose label was already rendered (escaped, maybe styled).
    fn link(&self, link: &Link, label: &str, out: &mut String);
    fn quote(&self) -> QuoteStyle;
    /// Whether bold and italic markers may appear inside a link's label.
    fn styles_in_links(&self) -> bool {
        true
    }
}

/// Renders `markdown` with `markup`'s choices.
pub(super) fn render<M: Markup>(markdown: &str, markup: &M) -> String {
    let mut layout = Layout::new(markup, markdown.len());
    for event in super::parser(markdown) {
        layout.event(event);
    }
    layout.flush_text();
    layout.out
}

/// What separates the next block from what came before. Breaks are written lazily, when the
/// next content arrives, so a reply never ends in blank lines.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
enum Break {
    None,
    Line,
    Paragraph,
}

/// A link whose label is being rendered into `out` from `start`.
struct Capture {
    start: usize,
    /// `None` for an image inside a link: links do not nest, so it shows as its alt text.
    link: Option<Link>,
}

struct Layout<'m, M> {
    markup: &'m M,
    out: String,
    /// Text not yet escaped. Consecutive text events are escaped together so that a token the
    /// parser split in pieces (Slack's `<@U123>`) is seen whole.
    text: String,
    /// Written after every newline: quote markers and list indentation.
    prefix: String,
    prefix_marks: Vec<usize>,
    pending: Break,
    /// A quote or list item was just opened: its first block continues the marker's line.
    fresh: bool,
    /// How deep each [`Style`] is open; a marker is written only on the outermost.
    styles: [u32; 3],
    quote_depth: usize,
    /// Open lists, with the next number of an ordered one.
    lists: Vec<Option<u64>>,
    links: Vec<Capture>,
    /// Inside a code block: its language and its text so far.
    code: Option<(String, String)>,
    table: Option<TableBuilder>,
}

impl<'m, M: Markup> Layout<'m, M> {
    fn new(markup: &'m M, capacity: usize) -> Self {
        Self {
            markup,
            out: String::with_capacity(capacity + capacity / 8),
            text: String::new(),
            prefix: String::new(),
            prefix_marks: Vec::new(),
            pending: Break::None,
            fresh: false,
            styles: [0; 3],
            quote_depth: 0,
            lists: Vec::new(),
            links: Vec::new(),
            code: None,
            table: None,
        }
    }

    fn event(&mut self, event: Event<'_>) {
        if let Some(table) = self.table.as_mut() {
            if matches!(event, Event::End(TagEnd::Table)) {
                let layout = table.layout();
                self.table = None;
                self.preformatted("", &layout);
            } else {
                table.event(&event);
            }
            return;
        }
        if let Some((_, code)) = self.code.as_mut() {
            match event {
                Event::Text(text) => code.push_str(&text),
                Event::End(TagEnd::CodeBlock) => {
                    if let Some((lang, code)) = self.code.take() {
                        self.preformatted(&lang, code.strip_suffix('\n').unwrap_or(&code));
                    }
                }
                _ => {}
            }
            return;
        }
        match event {
            Event::Text(text)
            | Event::InlineHtml(text)
            | Event::Html(text)
            | Event::InlineMath(text)
            | Event::DisplayMath(text) => self.push_text(&text),
            Event::Code(code) => {
                self.start_inline();
                self.markup.inline_code(&code, &mut self.out);
            }
            Event::SoftBreak if !self.links.is_empty() => self.push_text(" "),
            Event::SoftBreak | Event::HardBreak => {
                self.start_inline();
                self.newline();
            }
            Event::Rule => {
                self.flush_text();
                self.block(Break::Paragraph);
                self.flush_break();
                self.out.push_str(RULE);
                self.pending = Break::Paragraph;
            }
            Event::TaskListMarker(done) => self.push_text(if done { "☑ " } else { "☐ " }),
            Event::FootnoteReference(name) => self.push_text(&format!("[{name}]")),
            Event::Start(tag) => {
                self.flush_text();
                self.start(tag);
            }
            Event::End(tag) => {
                self.flush_text();
                self.end(tag);
            }
        }
    }

    fn start(&mut self, tag: Tag<'_>) {
        match tag {
            Tag::Paragraph | Tag::HtmlBlock => self.block(Break::Paragraph),
            Tag::Heading { .. } => {
                self.block(Break::Paragraph);
                self.open_style(Style::Bold);
            }
            Tag::BlockQuote(_) => {
                self.block(Break::Paragraph);
                self.flush_break();
                match self.markup.quote() {
                    QuoteStyle::LinePrefix(marker) => {
                        self.out.push_str(marker);
                        self.push_prefix(marker);
                    }
                    QuoteStyle::Tags(open, _) if self.quote_depth == 0 => self.out.push_str(open),
                    QuoteStyle::Tags(..) => {}
                }
                self.quote_depth += 1;
                self.fresh = true;
            }
            Tag::CodeBlock(kind) => {
                self.block(Break::Paragraph);
                let lang = match kind {
                    CodeBlockKind::Fenced(info) => info.split_whitespace().next().unwrap_or_default().to_owned(),
                    CodeBlockKind::Indented => String::new(),
                };
                self.code = Some((lang, String::new()));
            }
            Tag::List(start) => {
                self.block(if self.lists.is_empty() { Break::Paragraph } else { Break::Line });
                self.lists.push(start);
            }
            Tag::Item => {
                self.block(Break::Line);
                self.flush_break();
                let marker = match self.lists.last_mut() {
                    Some(Some(number)) => {
                        *number += 1;
                        format!("{}. ", *number - 1)
                    }
                    _ => BULLET.to_owned(),
                };
                self.out.push_str(&marker);
                self.push_prefix(&" ".repeat(marker.chars().count()));
                self.fresh = true;
            }
            Tag::Table(alignments) => {
                self.block(Break::Paragraph);
                self.table = Some(TableBuilder::new(alignments));
            }
            Tag::Emphasis => self.open_style(Style::Italic),
            Tag::Strong => self.open_style(Style::Bold),
            Tag::Strikethrough => self.open_style(Style::Strike),
            Tag::Link { link_type, dest_url, .. } => self.open_link(link_type, dest_url, false),
            Tag::Image { link_type, dest_url, .. } => self.open_link(link_type, dest_url, true),
            // Footnotes, definition lists, metadata, super/subscript: not enabled in the parser.
            _ => {}
        }
    }

    fn end(&mut self, tag: TagEnd) {
        match tag {
            TagEnd::Paragraph | TagEnd::HtmlBlock => self.request(Break::Paragraph),
            TagEnd::Heading(_) => {
                self.close_style(Style::Bold);
                self.request(Break::Paragraph);
            }
            TagEnd::BlockQuote(_) => {
                self.quote_depth = self.quote_depth.saturating_sub(1);
                match self.markup.quote() {
                    QuoteStyle::LinePrefix(_) => self.pop_prefix(),
                    QuoteStyle::Tags(_, close) if self.quote_depth == 0 => {
                        self.pending = Break::None;
                        self.out.push_str(close);
                    }
                    QuoteStyle::Tags(..) => {}
                }
                self.fresh = false;
                self.request(Break::Paragraph);
            }
            TagEnd::List(_) => {
                self.lists.pop();
                self.request(if self.lists.is_empty() { Break::Paragraph } else { Break::Line });
            }
            TagEnd::Item => {
                self.pop_prefix();
                self.fresh = false;
                self.request(Break::Line);
            }
            TagEnd::Emphasis => self.close_style(Style::Italic),
            TagEnd::Strong => self.close_style(Style::Bold),
            TagEnd::Strikethrough => self.close_style(Style::Strike),
            TagEnd::Link | TagEnd::Image => self.close_link(),
            _ => {}
        }
    }

    fn open_style(&mut self, style: Style) {
        self.start_inline();
        if !self.links.is_empty() && !self.markup.styles_in_links() {
            return;
        }
        let depth = &mut self.styles[style as usize];
        *depth += 1;
        if *depth == 1 {
            self.out.push_str(self.markup.style(style, true));
        }
    }

    fn close_style(&mut self, style: Style) {
        if !self.links.is_empty() && !self.markup.styles_in_links() {
            return;
        }
        let depth = &mut self.styles[style as usize];
        if *depth == 1 {
            self.out.push_str(self.markup.style(style, false));
        }
        *depth = depth.saturating_sub(1);
    }

    fn open_link(&mut self, link_type: LinkType, url: CowStr<'_>, image: bool) {
        self.start_inline();
        let link = (!image || self.links.is_empty()).then(|| Link {
            url: if link_type == LinkType::Email { format!("mailto:{url}") } else { url.into_string() },
            autolink: matches!(link_type, LinkType::Autolink | LinkType::Email),
        });
        self.links.push(Capture { start: self.out.len(), link });
    }

    fn close_link(&mut self) {
        if let Some(Capture { start, link: Some(link) }) = self.links.pop() {
            let label = self.out.split_off(start);
            self.markup.link(&link, &label, &mut self.out);
        }
    }

    /// A code block or a table.
    fn preformatted(&mut self, lang: &str, code: &str) {
        self.flush_break();
        self.markup.code_block(lang, code, &self.prefix, &mut self.out);
        self.pending = Break::Paragraph;
    }

    /// A block starts: it needs at least `separation` from what came before, unless it is
    /// the first block of a quote or list item just opened.
    fn block(&mut self, separation: Break) {
        if !self.fresh {
            self.request(separation);
        }
    }

    fn request(&mut self, separation: Break) {
        self.pending = self.pending.max(separation);
    }

    fn push_text(&mut self, text: &str) {
        self.flush_break();
        self.text.push_str(text);
    }

    /// Inline markup is about to be written: pending text and breaks go first.
    fn start_inline(&mut self) {
        self.flush_text();
        self.flush_break();
    }

    fn flush_break(&mut self) {
        if self.pending != Break::None && !self.out.is_empty() {
            if self.pending == Break::Paragraph {
                self.out.push('\n');
                self.out.push_str(self.prefix.trim_end());
            }
            self.newline();
        }
        self.pending = Break::None;
        self.fresh = false;
    }

    fn flush_text(&mut self) {
        if self.text.is_empty() {
            return;
        }
        let text = std::mem::take(&mut self.text);
        // Only raw HTML blocks bring newlines; their last one ends the block.
        for (index, line) in text.trim_end_matches('\n').split('\n').enumerate() {
            if index > 0 {
                self.newline();
            }
            self.markup.text(line, &mut self.out);
        }
        self.text = text;
        self.text.clear();
    }

    fn newline(&mut self) {
        self.out.push('\n');
        self.out.push_str(&self.prefix);
    }

    fn push_prefix(&mut self, prefix: &str) {
        self.prefix_marks.push(self.prefix.len());
        self.prefix.push_str(prefix);
    }

    fn pop_prefix(&mut self) {
        if let Some(mark) = self.prefix_marks.pop() {
            self.prefix.truncate(mark);
        }
    }
}
