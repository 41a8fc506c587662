//! HTML to readable markdown, for `web_fetch`.
//!
//! The page is parsed by html5ever (the WHATWG parser, so broken markup comes out as a browser
//! would see it) and converted by `htmd`, a port of turndown.js. Before converting, one pass
//! over the tree prepares it for a model:
//!
//! - links and images point to absolute URLs (resolved against the page's URL or its
//!   `<base href>`), so the model can fetch what a page links to;
//! - `javascript:` links and `data:` images (kilobytes of base64) are dropped;
//! - the `<title>` is taken out, to head the result;
//! - anything nested deeper than [`MAX_DEPTH`] levels is flattened to its text: the converter
//!   recurses once per level, and no page may overflow its stack. The parser has already
//!   bounded most nesting ([`super::parse`]); this catches what it does not count (tables in
//!   tables add four levels per counted one).
//!
//! Scripts, styles, forms' controls, frames and embedded objects say nothing a reader would
//! read, so they are skipped. Conversion runs on a thread of its own ([`convert`]): a page of
//! megabytes takes tens of milliseconds, too long to hold an async worker.

use std::cell::RefCell;
use std::rc::Rc;

use htmd::HtmlToMarkdown;
use markup5ever_rcdom::{Node, NodeData};
use url::Url;

use super::parse;

/// Nodes nested deeper than this are flattened to their text before conversion. Real pages
/// stay far below it (a deep one reaches ~100).
pub const MAX_DEPTH: usize = 512;

/// The conversion thread's stack: room for [`MAX_DEPTH`] levels of the converter's recursion,
/// with a wide margin (2 MiB sufficed for tables nested past it, in a debug build). Only the
/// pages touched are committed.
const CONVERSION_STACK_BYTES: usize = 32 * 1024 * 1024;

/// Elements whose content is not text a reader would read.
const SKIPPED_TAGS: &[&str] = &[
    "head", "script", "style", "noscript", "template", "iframe", "frame", "svg", "canvas", "object", "embed", "button",
    "input", "select", "textarea",
];

/// URL schemes a link or image may keep: the ones a model can fetch or a person can follow.
const KEPT_SCHEMES: &[&str] = &["http", "https", "mailto", "tel", "ftp"];

/// A page as the model reads it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Page {
    /// The `<title>`, whitespace collapsed; `None` when the page has none.
    pub title: Option<String>,
    pub markdown: String,
}

/// Converts `html` (fetched from `url`) on a thread of its own; see the module doc. `None` if
/// that thread could not be started or died, which the caller reports as a failed fetch.
pub async fn convert(html: String, url: Url) -> Option<Page> {
    let (done, result) = tokio::sync::oneshot::channel();
    let spawned = std::thread::Builder::new()
        .name("web-fetch-html".to_owned())
        .stack_size(CONVERSION_STACK_BYTES)
        .spawn(move || {
            let _ = done.send(html_to_markdown(&html, &url));
        });
    if let Err(error) = spawned {
        tracing::error!(%error, "could not start a thread to convert a fetched page; the fetch fails");
        return None;
    }
    result.await.ok()
}

/// `html`, fetched from `url`, as markdown with its title; see the module doc.
pub fn html_to_markdown(html: &str, url: &Url) -> Page {
    let converter = HtmlToMarkdown::builder().skip_tags(SKIPPED_TAGS.to_vec()).build();
    let tree = parse::parse_bounded(html);
    let title = prepare(&tree, url);
    let markdown = tidy(&converter.tree_to_markdown(&tree));
    Page { title, markdown }
}

/// The pass described in the module doc: absolute links, dropped scripts' URLs, the depth
/// bound. Returns the title. Iterative, so it has no depth limit of its own.
fn prepare(root: &Rc<Node>, url: &Url) -> Option<String> {
    let mut base = url.clone();
    let mut seen_base = false;
    let mut title = None;
    let mut stack = vec![(Rc::clone(root), 0usize)];
    while let Some((node, depth)) = stack.pop() {
        if let NodeData::Element { name, attrs, .. } = &node.data {
            let tag = &*name.local;
            if tag == "base" && !seen_base {
                // Only the first <base href> counts (HTML spec), and it applies to the whole page.
                let href =
                    attrs.borrow().iter().find(|attr| &*attr.name.local == "href").map(|attr| attr.value.to_string());
                if let Some(href) = href.and_then(|href| url.join(href.trim()).ok()) {
                    base = href;
                    seen_base = true;
                }
            }
            if tag == "title" && title.is_none() && parent_is(&node, "head") {
                title = Some(collapse_whitespace(&text_of(&node))).filter(|title| !title.is_empty());
            }
            let link_attribute = match tag {
                "a" | "area" => Some("href"),
                "img" => Some("src"),
                _ => None,
            };
            if let Some(link_attribute) = link_attribute {
                let mut attrs = attrs.borrow_mut();
                if let Some(index) = attrs.iter().position(|attr| &*attr.name.local == link_attribute) {
                    match resolve_link(&attrs[index].value, &base) {
                        Link::Keep => {}
                        Link::Absolute(absolute) => attrs[index].value = absolute.as_str().into(),
                        Link::Drop => {
                            attrs.remove(index);
                        }
                    }
                }
            }
            if depth >= MAX_DEPTH {
                flatten(&node);
                continue;
            }
        }
        let children = node.children.borrow();
        stack.extend(children.iter().rev().map(|child| (Rc::clone(child), depth + 1)));
    }
    title
}

/// What becomes of a link or an image's URL.
enum Link {
    /// A fragment of this page (`#top`): useful as it is.
    Keep,
    Absolute(Url),
    /// Not one a reader could follow (`javascript:`, `data:`, unparsable): the attribute goes.
    Drop,
}

fn resolve_link(value: &str, base: &Url) -> Link {
    let value = value.trim();
    if value.starts_with('#') {
        return Link::Keep;
    }
    match base.join(value) {
        Ok(absolute) if KEPT_SCHEMES.contains(&absolute.scheme()) => Link::Absolute(absolute),
        _ => Link::Drop,
    }
}

fn parent_is(node: &Node, tag: &str) -> bool {
    let parent = node.parent.take();
    let matches = parent
        .as_ref()
        .and_then(std::rc::Weak::upgrade)
        .is_some_and(|parent| matches!(&parent.data, NodeData::Element { name, .. } if &*name.local == tag));
    node.parent.set(parent);
    matches
}

/// Replaces the children of `node` with one text node holding all their text.
fn flatten(node: &Rc<Node>) {
    let text = text_of(node);
    let flat = Node::new(NodeData::Text { contents: RefCell::new(text.into()) });
    flat.parent.set(Some(Rc::downgrade(node)));
    *node.children.borrow_mut() = vec![flat];
}

/// The text under `node`, in document order, without recursion.
fn text_of(node: &Rc<Node>) -> String {
    let mut text = String::new();
    let mut stack: Vec<Rc<Node>> = node.children.borrow().iter().rev().cloned().collect();
    while let Some(next) = stack.pop() {
        if let NodeData::Text { contents } = &next.data {
            text.push_str(&contents.borrow());
        }
        stack.extend(next.children.borrow().iter().rev().cloned());
    }
    text
}

fn collapse_whitespace(text: &str) -> String {
    text.split_whitespace().collect::<Vec<_>>().join(" ")
}

/// The converter's output with runs of blank lines (left by skipped elements) cut to one and
/// trailing spaces removed.
fn tidy(markdown: &str) -> String {
    let mut out = String::with_capacity(markdown.len());
    let mut blank_run = 0;
    for line in markdown.lines() {
        let line = line.trim_end();
        if line.is_empty() {
            blank_run += 1;
            if blank_run > 1 {
                continue;
            }
        } else {
            blank_run = 0;
        }
        out.push_str(line);
        out.push('\n');
    }
    out.trim().to_owned()
}

#[cfg(test)]
mod tests {
    use proptest::prelude::*;

    use super::*;

    fn page(html: &str) -> Page {
        html_to_markdown(html, &Url::parse("https://example.com/docs/intro.html").unwrap())
    }

    #[test]
    fn web_headings_lists_links_and_emphasis_become_markdown() {
        let converted = page(
            "<html><head><title> Ferry \n docs </title><style>h1{color:red}</style></head><body>\
             <h1>Getting started</h1><p>Read <a href=\"guide.html\">the guide</a> and \
             <strong>run</strong> it.</p><ul><li>one</li><li>two</li></ul>\
             <h2>Code</h2><pre><code>cargo run</code></pre></body></html>",
        );
        assert_eq!(converted.title.as_deref(), Some("Ferry docs"));
        let markdown = converted.markdown;
        assert!(markdown.starts_with("# Getting started"), "{markdown}");
        assert!(
            markdown.contains("Read [the guide](https://example.com/docs/guide.html) and **run** it."),
            "{markdown}"
        );
        assert!(markdown.contains("*   one\n*   two") || markdown.contains("- one\n- two"), "{markdown}");
        assert!(markdown.contains("## Code"), "{markdown}");
        assert!(markdown.contains("```\ncargo run\n```") || markdown.contains("    cargo run"), "{markdown}");
        assert!(!markdown.contains("color:red") && !markdown.contains("Ferry docs"), "{markdown}");
    }

    #[test]
    fn web_scripts_styles_and_controls_are_left_out() {
        let markdown = page(
            "<p>kept</p><script>alert('gone')</script><noscript>enable js</noscript>\
             <form><input value=\"x\"><button>Click</button><select><option>opt</option></select></form>\
             <svg><text>drawn</text></svg>",
        )
        .markdown;
        assert_eq!(markdown, "kept");
    }

    #[test]
    fn web_links_are_absolute_and_unfollowable_ones_are_dropped() {
        let markdown = page(
            "<a href=\"/root\">root</a> <a href=\"../up\">up</a> <a href=\"#top\">top</a> \
             <a href=\"javascript:void(0)\">js</a> <img src=\"data:image/png;base64,AAAA\" alt=\"pixel\"> \
             <img src=\"pic.png\" alt=\"pic\">",
        )
        .markdown;
        assert!(markdown.contains("[root](https://example.com/root)"), "{markdown}");
        assert!(markdown.contains("[up](https://example.com/up)"), "{markdown}");
        assert!(markdown.contains("[top](#top)"), "{markdown}");
        assert!(markdown.contains("js") && !markdown.contains("javascript:"), "{markdown}");
        assert!(!markdown.contains("base64"), "{markdown}");
        assert!(markdown.contains("![pic](https://example.com/docs/pic.png)"), "{markdown}");
    }

    #[test]
    fn web_base_href_decides_where_relative_links_point() {
        let markdown = page("<head><base href=\"https://cdn.example.org/v2/\"></head><a href=\"page\">p</a>").markdown;
        assert_eq!(markdown, "[p](https://cdn.example.org/v2/page)");
    }

    #[test]
    fn web_a_page_without_markup_or_title_is_its_text() {
        assert_eq!(page("just words").markdown, "just words");
        assert_eq!(page("just words").title, None);
        assert_eq!(page("").markdown, "");
    }

    #[tokio::test]
    async fn web_a_hostile_nesting_depth_is_flattened_not_a_stack_overflow() {
        let url = Url::parse("https://example.com/").unwrap();
        // A million unclosed divs: the parser stops nesting them.
        let html = format!("{}<p>deep text</p>", "<div>".repeat(1_000_000));
        assert_eq!(convert(html, url.clone()).await.expect("converted").markdown, "deep text");
        // Tables in tables nest four levels per counted element, past MAX_DEPTH: the rest is
        // flattened, and the converter's recursion fits its thread's stack.
        let html = format!("{}<b>bottom</b>{}", "<table><tr><td>".repeat(400), "</td></tr></table>".repeat(400));
        assert!(parse::depth(&parse::parse_bounded(&html)) > MAX_DEPTH);
        let converted = convert(html, url.clone()).await.expect("converted");
        assert!(converted.markdown.contains("bottom"), "{}", converted.markdown.len());
    }

    /// Pieces of markup, put together at random: unbalanced, misnested, in odd places.
    fn markup() -> impl Strategy<Value = String> {
        let piece = prop_oneof![
            Just("<div>"),
            Just("</div>"),
            Just("<table>"),
            Just("<tr>"),
            Just("<td>"),
            Just("</table>"),
            Just("<a href=\"x\">"),
            Just("<a href=\"javascript:alert(1)\">"),
            Just("</a>"),
            Just("<img src=\"data:,\">"),
            Just("<pre><code>"),
            Just("</code></pre>"),
            Just("<ul><li>"),
            Just("<ol start=\"-5\"><li>"),
            Just("</li>"),
            Just("<b>"),
            Just("</i>"),
            Just("<h1>"),
            Just("<base href=\"//h/\">"),
            Just("<title>"),
            Just("<svg><g>"),
            Just("<math><mi>"),
            Just("<![CDATA[x]]>"),
            Just("<!--"),
            Just("-->"),
            Just("<script>"),
            Just("</script>"),
            Just("<template>"),
            Just("<select><option>"),
            Just("<br/>"),
            Just("&amp;"),
            Just("&#x0;"),
            Just("&bogus"),
            Just("*_`#[]()|\\"),
            Just("text "),
            Just("\n\n"),
            Just("é🙂"),
            Just("<"),
            Just(">"),
            Just("\""),
        ];
        prop::collection::vec(piece, 0..80).prop_map(|pieces| pieces.concat())
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(200))]

        #[test]
        fn web_any_markup_converts_without_panicking(html in markup()) {
            let converted = html_to_markdown(&html, &Url::parse("https://example.com/a/b").unwrap());
            prop_assert!(converted.title.as_deref().is_none_or(|title| !title.contains('\n')));
            prop_assert!(!converted.markdown.contains("](javascript:"), "{}", converted.markdown);
        }
    }
}
