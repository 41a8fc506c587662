//! Parsing a fetched page into a DOM whose depth is bounded.
//!
//! html5ever builds whatever tree the markup asks for, and a page of a million nested `<div>`s
//! (five megabytes) asks for a million levels. Its tree builder scans the stack of open
//! elements on many start tags, so such a page takes time quadratic in its depth (minutes),
//! and htmd's converter recurses once per level. Browsers bound this (Blink stops nesting at
//! 512 levels); so does this parser: [`DepthLimiter`] sits between html5ever's tokenizer and
//! its tree builder and, past [`MAX_OPEN_ELEMENTS`] open elements, drops further start tags
//! (and their end tags) while passing all text through. The content of a too-deep part of a
//! page lands, flattened, in its deepest kept element. The same sink keeps one html5ever bug
//! away from the tree builder ([`defuse_meta`]).

use std::cell::RefCell;
use std::collections::HashMap;
use std::rc::Rc;

use html5ever::tendril::StrTendril;
use html5ever::tokenizer::{
    BufferQueue, CharacterTokens, EndTag, StartTag, Tag, TagToken, Token, TokenSink, TokenSinkResult, Tokenizer,
    TokenizerOpts,
};
use html5ever::tree_builder::{TreeBuilder, TreeBuilderOpts};
use html5ever::{LocalName, TokenizerResult};
use markup5ever_rcdom::{Handle, Node, RcDom};

/// Open elements (of those [`DepthLimiter`] counts) past which start tags are dropped. Real
/// pages stay far below it; a deep one reaches about 100.
pub const MAX_OPEN_ELEMENTS: usize = 200;

/// Parses `html` as a document, nesting at most [`MAX_OPEN_ELEMENTS`] counted elements deep.
pub fn parse_bounded(html: &str) -> Rc<Node> {
    parse_with_limit(html, MAX_OPEN_ELEMENTS)
}

fn parse_with_limit(html: &str, max_open: usize) -> Rc<Node> {
    let builder = TreeBuilder::new(RcDom::default(), TreeBuilderOpts::default());
    let tokenizer = Tokenizer::new(DepthLimiter::new(builder, max_open), TokenizerOpts::default());
    let input = BufferQueue::default();
    input.push_back(StrTendril::from(html));
    // `Script` results (a `</script>` seen) only ask a browser to run it; go on until done.
    while !matches!(tokenizer.feed(&input), TokenizerResult::Done) {}
    tokenizer.end();
    Rc::clone(&tokenizer.sink.inner.sink.document)
}

/// A token sink that forwards to `inner` (the tree builder), keeping a shadow of the open
/// elements it counts and dropping start tags past `max_open` (see the module doc).
struct DepthLimiter<S> {
    inner: S,
    max_open: usize,
    /// The counted elements open now, innermost last.
    open: RefCell<Vec<LocalName>>,
    /// Start tags dropped, by name, whose end tags are still to come (and to be dropped).
    dropped: RefCell<HashMap<LocalName, usize>>,
}

impl<S> DepthLimiter<S> {
    fn new(inner: S, max_open: usize) -> Self {
        Self { inner, max_open, open: RefCell::default(), dropped: RefCell::default() }
    }

    /// Whether the token goes on to the tree builder; tracks the open elements as it goes.
    fn keep(&self, token: &Token) -> bool {
        let TagToken(tag) = token else { return true };
        let name = &tag.name;
        if !counted(name) {
            return true;
        }
        let mut open = self.open.borrow_mut();
        let mut dropped = self.dropped.borrow_mut();
        match tag.kind {
            StartTag if open.len() >= self.max_open => {
                *dropped.entry(name.clone()).or_default() += 1;
                false
            }
            StartTag => {
                // A self-closing `<div/>` still opens a div in HTML (only foreign elements such
                // as SVG's close); counting it errs on the side of a shallower tree.
                open.push(name.clone());
                true
            }
            EndTag => {
                if let Some(count) = dropped.get_mut(name).filter(|count| **count > 0) {
                    *count -= 1;
                    return false;
                }
                // Like the tree builder's generic end tag: close up to the matching element.
                if let Some(at) = open.iter().rposition(|open_name| open_name == name) {
                    open.truncate(at);
                }
                true
            }
        }
    }
}

impl<S: TokenSink> TokenSink for DepthLimiter<S> {
    type Handle = S::Handle;

    fn process_token(&self, mut token: Token, line_number: u64) -> TokenSinkResult<S::Handle> {
        if !self.keep(&token) {
            return TokenSinkResult::Continue;
        }
        if let TagToken(tag) = &mut token {
            defuse_meta(tag);
        }
        self.inner.process_token(token, line_number)
    }

    fn end(&self) {
        self.inner.end();
    }

    fn adjusted_current_node_present_but_not_in_html_namespace(&self) -> bool {
        self.inner.adjusted_current_node_present_but_not_in_html_namespace()
    }
}

/// Takes `http-equiv="Content-Type"` off a `<meta>` start tag before the tree builder sees it.
///
/// html5ever 0.38's tree builder, on such a meta, reads the charset from its `content` ("extract
/// a character encoding from a meta element", `html5ever/src/encoding.rs`) and indexes past the
/// end of the value when it ends in the word `charset` (and whitespace): `content="text/html;
/// charset"` panics, so any page could make the conversion fail. html5ever 0.40 checks the
/// bound, but htmd 0.5 (the newest) is built on 0.38. The attribute only tells the tree builder
/// the page's encoding, which [`super::charset`] settled before parsing, and a meta is not
/// converted to markdown, so nothing is lost without it. Remove this when htmd moves on.
fn defuse_meta(tag: &mut Tag) {
    if tag.kind == StartTag && &*tag.name == "meta" {
        tag.attrs.retain(|attr| &*attr.name.local != "http-equiv" || !attr.value.eq_ignore_ascii_case("content-type"));
    }
}

/// Whether a start tag of `name` nests what follows it until its end tag. Not counted: void
/// elements (they hold nothing), elements whose end tag is optional (a new `<p>`, `<li>` or
/// `<td>` closes the previous one, so they do not nest by themselves), raw-text elements
/// (their start tag switches the tokenizer's state, so it must reach the tree builder) and
/// the document's own `html`, `head` and `body`.
fn counted(name: &str) -> bool {
    !matches!(
        name,
        // Void.
        "area" | "base" | "br" | "col" | "embed" | "hr" | "img" | "input" | "link" | "meta" | "source" | "track"
            | "wbr" | "param" | "keygen" | "basefont" | "bgsound" | "frame"
            // Optional end tag.
            | "p" | "li" | "dt" | "dd" | "option" | "optgroup" | "tr" | "td" | "th" | "thead" | "tbody"
            | "tfoot" | "colgroup" | "caption" | "rb" | "rt" | "rtc" | "rp"
            // Raw text, RCDATA, plaintext.
            | "script" | "style" | "textarea" | "title" | "xmp" | "iframe" | "noembed" | "noframes"
            | "noscript" | "plaintext"
            // The document.
            | "html" | "head" | "body"
    )
}

/// The text of a small HTML fragment, such as a search snippet: entities decoded, tags dropped
/// but `<strong>` / `<b>` kept as markdown bold, whitespace collapsed. Tokenized only, with no
/// tree, so there is no depth to bound.
pub fn fragment_text(html: &str) -> String {
    let tokenizer = Tokenizer::new(TextCollector::default(), TokenizerOpts::default());
    let input = BufferQueue::default();
    input.push_back(StrTendril::from(html));
    while !matches!(tokenizer.feed(&input), TokenizerResult::Done) {}
    tokenizer.end();
    let text = tokenizer.sink.text.borrow();
    text.split_whitespace().collect::<Vec<_>>().join(" ")
}

/// A token sink that keeps the text (see [`fragment_text`]).
#[derive(Default)]
struct TextCollector {
    text: RefCell<String>,
}

impl TokenSink for TextCollector {
    type Handle = ();

    fn process_token(&self, token: Token, _line_number: u64) -> TokenSinkResult<()> {
        let mut text = self.text.borrow_mut();
        match token {
            CharacterTokens(characters) => text.push_str(&characters),
            TagToken(tag) if matches!(&*tag.name, "strong" | "b") => text.push_str("**"),
            TagToken(tag) if matches!(&*tag.name, "br" | "p" | "div" | "li") => text.push(' '),
            _ => {}
        }
        TokenSinkResult::Continue
    }
}

/// The depth of the deepest element under `root`, without recursion. For tests and the
/// converter's own bound.
pub fn depth(root: &Handle) -> usize {
    let mut deepest = 0;
    let mut stack = vec![(Rc::clone(root), 0usize)];
    while let Some((node, level)) = stack.pop() {
        deepest = deepest.max(level);
        stack.extend(node.children.borrow().iter().map(|child| (Rc::clone(child), level + 1)));
    }
    deepest
}

#[cfg(test)]
mod tests {
    use std::time::Instant;

    use super::*;

    fn text(root: &Handle) -> String {
        let mut out = String::new();
        let mut stack = vec![Rc::clone(root)];
        while let Some(node) = stack.pop() {
            if let markup5ever_rcdom::NodeData::Text { contents } = &node.data {
                out.push_str(&contents.borrow());
            }
            stack.extend(node.children.borrow().iter().rev().cloned());
        }
        out
    }

    #[test]
    fn web_a_page_of_normal_depth_parses_as_html5ever_would() {
        let html = "<!doctype html><title>t</title><div><ul><li>a<li>b</ul><p>one<p>two<table><tr><td>x</table></div>";
        let bounded = parse_bounded(html);
        let plain = html5ever::parse_document(RcDom::default(), Default::default());
        let plain = html5ever::tendril::TendrilSink::one(plain, html);
        assert_eq!(depth(&bounded), depth(&plain.document));
        assert_eq!(text(&bounded), text(&plain.document));
    }

    #[test]
    fn web_nesting_past_the_limit_is_flattened_and_keeps_its_text() {
        let html = format!("{}<b>deep</b> text{}", "<div>".repeat(50), "</div>".repeat(50));
        let root = parse_with_limit(&html, 10);
        // document > html > body > 10 divs > text (the <b> was dropped too).
        assert_eq!(depth(&root), 13);
        assert_eq!(text(&root), "deep text");
        // After the deep part, the page goes on at its own depth.
        let html = format!("{}x{}<div><span>after</span></div>", "<div>".repeat(50), "</div>".repeat(50));
        let root = parse_with_limit(&html, 10);
        assert_eq!(text(&root), "xafter");
        let html_element = Rc::clone(&root.children.borrow()[0]);
        let body = Rc::clone(&html_element.children.borrow()[1]);
        assert_eq!(body.children.borrow().len(), 2, "the second div is the body's child again");
    }

    #[test]
    fn web_a_meta_whose_content_ends_in_the_word_charset_does_not_panic_the_tree_builder() {
        // html5ever 0.38 indexes past the end of these `content` values (found by the
        // `web_page` fuzz target; see `defuse_meta`).
        for content in ["text/html; charset", "text/html; CHARSET \t", "charset"] {
            let html =
                format!("<html><head><meta http-equiv=\"Content-Type\" content=\"{content}\"></head><p>after</p>");
            assert_eq!(text(&parse_bounded(&html)), "after", "{content}");
        }
        // Other metas keep their attributes.
        let root = parse_bounded("<meta http-equiv=\"refresh\" content=\"5\"><meta charset=\"utf-8\"><p>x</p>");
        let head = Rc::clone(&root.children.borrow()[0].children.borrow()[0]);
        let attributes: Vec<Vec<(String, String)>> = head
            .children
            .borrow()
            .iter()
            .map(|meta| match &meta.data {
                markup5ever_rcdom::NodeData::Element { attrs, .. } => {
                    attrs.borrow().iter().map(|attr| (attr.name.local.to_string(), attr.value.to_string())).collect()
                }
                _ => Vec::new(),
            })
            .collect();
        let pair = |name: &str, value: &str| (name.to_owned(), value.to_owned());
        assert_eq!(
            attributes,
            [vec![pair("http-equiv", "refresh"), pair("content", "5")], vec![pair("charset", "utf-8")]]
        );
    }

    #[test]
    fn web_a_fragment_is_its_text_with_bold_kept() {
        assert_eq!(
            fragment_text("Run <strong>chat</strong> agents &#x27;anywhere&#x27;."),
            "Run **chat** agents 'anywhere'."
        );
        assert_eq!(fragment_text("Ferry &amp; friends"), "Ferry & friends");
        assert_eq!(fragment_text("one<br>two  \n three"), "one two three");
        assert_eq!(fragment_text(&"<span>".repeat(100_000)), "", "no tree, no depth");
    }

    #[test]
    fn web_a_hostile_page_parses_in_bounded_time() {
        // Five megabytes of unclosed <div>: a million levels, minutes for html5ever alone.
        let html = "<div>".repeat(1_000_000);
        let started = Instant::now();
        let root = parse_bounded(&html);
        assert!(depth(&root) <= MAX_OPEN_ELEMENTS + 3, "{}", depth(&root));
        assert!(started.elapsed().as_secs() < 30, "took {:?}", started.elapsed());
    }
}
