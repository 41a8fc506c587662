//! Telegram's HTML parse mode. Chosen over MarkdownV2 because HTML needs only `<`, `>` and
//! `&` escaped, where MarkdownV2 rejects a message over any of 18 unescaped characters.
//!
//! Only tags Telegram supports are written: `<b>`, `<i>`, `<s>`, `<code>`,
//! `<pre><code class="language-…">`, `<a href>` and `<blockquote>` (markdown has no underline,
//! so `<u>` never appears). Headings become bold lines, lists `•` / `1.` lines, tables a `<pre>`
//! block with aligned columns, images links to the image. Everything the model wrote is
//! escaped, raw HTML included, so the only tags in the output are the renderer's own.
//!
//! If Telegram still rejects a message, resend [`plain_fallback`](super::plain_fallback).

use super::layout::{self, Link, Markup, QuoteStyle, Style};

/// Renders markdown for Telegram's `parse_mode = "HTML"`.
pub fn render(markdown: &str) -> String {
    layout::render(markdown, &Telegram)
}

/// Appends `text` with `&`, `<` and `>` escaped: the three characters Telegram's HTML
/// parser requires escaped in text.
pub fn escape(text: &str, out: &mut String) {
    escape_with(text, out, false);
}

/// Appends `text` escaped for a double-quoted attribute value (also `"`).
pub fn escape_attribute(text: &str, out: &mut String) {
    escape_with(text, out, true);
}

fn escape_with(text: &str, out: &mut String, attribute: bool) {
    let mut copied = 0;
    for (index, byte) in text.bytes().enumerate() {
        let entity = match byte {
            b'&' => "&amp;",
            b'<' => "&lt;",
            b'>' => "&gt;",
            b'"' if attribute => "&quot;",
            _ => continue,
        };
        out.push_str(&text[copied..index]);
        out.push_str(entity);
        copied = index + 1;
    }
    out.push_str(&text[copied..]);
}

/// Telegram makes links only of absolute URLs; anything else is shown as text.
fn linkable(url: &str) -> bool {
    url.contains("://") || url.starts_with("mailto:") || url.starts_with("tg:")
}

struct Telegram;

impl Markup for Telegram {
    fn style(&self, style: Style, open: bool) -> &'static str {
        match (style, open) {
            (Style::Bold, true) => "<b>",
            (Style::Bold, false) => "</b>",
            (Style::Italic, true) => "<i>",
            (Style::Italic, false) => "</i>",
            (Style::Strike, true) => "<s>",
            (Style::Strike, false) => "</s>",
        }
    }

    fn text(&self, text: &str, out: &mut String) {
        escape(text, out);
    }

    fn inline_code(&self, code: &str, out: &mut String) {
        out.push_str("<code>");
        escape(code, out);
        out.push_str("</code>");
    }

    /// Lines inside `<pre>` are not prefixed: indentation would become part of the code.
    fn code_block(&self, lang: &str, code: &str, _line_prefix: &str, out: &mut String) {
        if lang.is_empty() {
            out.push_str("<pre>");
            escape(code, out);
            out.push_str("</pre>");
        } else {
            out.push_str("<pre><code class=\"language-");
            escape_attribute(lang, out);
            out.push_str("\">");
            escape(code, out);
            out.push_str("</code></pre>");
        }
    }

    fn link(&self, link: &Link, label: &str, out: &mut String) {
        let url = link.url.as_str();
        if !linkable(url) {
            out.push_str(label);
            if !url.is_empty() && !link.autolink {
                out.push_str(" (");
                escape(url, out);
                out.push(')');
            }
            return;
        }
        out.push_str("<a href=\"");
        escape_attribute(url, out);
        out.push_str("\">");
        if label.trim().is_empty() {
            escape(url.strip_prefix("mailto:").unwrap_or(url), out);
        } else {
            out.push_str(label);
        }
        out.push_str("</a>");
    }

    fn quote(&self) -> QuoteStyle {
        QuoteStyle::Tags("<blockquote>", "</blockquote>")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn model_written_html_and_ampersands_are_escaped() {
        assert_eq!(
            render("<script>alert('x')</script> & a < b > c"),
            "&lt;script&gt;alert('x')&lt;/script&gt; &amp; a &lt; b &gt; c"
        );
        assert_eq!(render("<div>\nraw *block*\n</div>"), "&lt;div&gt;\nraw *block*\n&lt;/div&gt;");
        assert_eq!(render("AT&amp;T &copy;"), "AT&amp;T ©");
    }

    #[test]
    fn inline_styles_become_telegram_tags() {
        assert_eq!(
            render("**bold** *it* ~~gone~~ `a<b>` ***both***"),
            "<b>bold</b> <i>it</i> <s>gone</s> <code>a&lt;b&gt;</code> <i><b>both</b></i>"
        );
    }

    #[test]
    fn links_escape_their_target_and_images_become_links() {
        assert_eq!(
            render(r#"[a & b](https://x.io/?q="1"&r=2) ![chart](https://x.io/c.png) <https://x.io>"#),
            r#"<a href="https://x.io/?q=&quot;1&quot;&amp;r=2">a &amp; b</a> <a href="https://x.io/c.png">chart</a> <a href="https://x.io">https://x.io</a>"#
        );
        assert_eq!(
            render("[docs](./README.md) <me@x.io>"),
            r#"docs (./README.md) <a href="mailto:me@x.io">me@x.io</a>"#
        );
    }

    #[test]
    fn code_blocks_keep_their_language() {
        assert_eq!(
            render("```rust title=x\nif a < b && c {}\n```\n\n```\nplain\n```"),
            "<pre><code class=\"language-rust\">if a &lt; b &amp;&amp; c {}</code></pre>\n\n<pre>plain</pre>"
        );
    }

    #[test]
    fn headings_lists_and_quotes_use_lines_and_supported_tags() {
        let markdown = "# Plan\n\n1. first\n2. **second**\n   - nested\n\n> quoted\n>\n> > deeper\n\n---\n\nend";
        assert_eq!(
            render(markdown),
            "<b>Plan</b>\n\n1. first\n2. <b>second</b>\n   • nested\n\n<blockquote>quoted\n\ndeeper</blockquote>\n\n──────────\n\nend"
        );
    }

    #[test]
    fn tables_become_aligned_pre_blocks() {
        assert_eq!(render("| a | b |\n|---|--:|\n| <x> | 10 |"), "<pre>a   |  b\n----|---\n&lt;x&gt; | 10</pre>");
    }
}
