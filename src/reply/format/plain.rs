//! Plain text: markdown syntax stripped, the structure kept readable. For channels without
//! markup and for the Telegram resend when the platform rejects the HTML.
//!
//! Emphasis markers disappear, headings become their own line, list items `•` / `1.` lines,
//! quotes `> ` lines, code blocks and tables their text (tables with aligned columns), and a
//! link `label (url)`. Nothing is escaped: the platform shows the text as is.

use super::layout::{self, Link, Markup, QuoteStyle, Style};

/// Renders markdown as plain text.
pub fn render(markdown: &str) -> String {
    layout::render(markdown, &Plain)
}

struct Plain;

impl Markup for Plain {
    fn style(&self, _style: Style, _open: bool) -> &'static str {
        ""
    }

    fn text(&self, text: &str, out: &mut String) {
        out.push_str(text);
    }

    fn inline_code(&self, code: &str, out: &mut String) {
        out.push_str(code);
    }

    fn code_block(&self, _lang: &str, code: &str, line_prefix: &str, out: &mut String) {
        for (index, line) in code.split('\n').enumerate() {
            if index > 0 {
                out.push('\n');
                out.push_str(line_prefix);
            }
            out.push_str(line);
        }
    }

    fn link(&self, link: &Link, label: &str, out: &mut String) {
        let shown_url = link.url.strip_prefix("mailto:").unwrap_or(&link.url);
        let label = label.trim();
        if label.is_empty() || label == shown_url || link.autolink {
            out.push_str(shown_url);
        } else {
            out.push_str(label);
            out.push_str(" (");
            out.push_str(shown_url);
            out.push(')');
        }
    }

    fn quote(&self) -> QuoteStyle {
        QuoteStyle::LinePrefix("> ")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn emphasis_and_code_markers_are_removed() {
        assert_eq!(render("**bold** _it_ ~~gone~~ `code` \\*literal\\*"), "bold it gone code *literal*");
        assert_eq!(render("a <b> & c"), "a <b> & c");
    }

    #[test]
    fn links_show_their_label_and_target() {
        assert_eq!(
            render("[docs](https://x.io) <https://y.io> [https://z.io](https://z.io) ![logo](https://x.io/l.png)"),
            "docs (https://x.io) https://y.io https://z.io logo (https://x.io/l.png)"
        );
        assert_eq!(render("[![badge](https://b.io/i.svg)](https://b.io) <me@x.io>"), "badge (https://b.io) me@x.io");
    }

    #[test]
    fn blocks_keep_their_shape() {
        let markdown = "## Steps\n\n1. one\n   continued\n2. two\n   - sub\n\n> quote\n>\n> more\n\n```sh\nls -la\n  cd /\n```\n\n- [x] done\n- [ ] todo";
        assert_eq!(
            render(markdown),
            "Steps\n\n1. one\n   continued\n2. two\n   • sub\n\n> quote\n>\n> more\n\nls -la\n  cd /\n\n• ☑ done\n• ☐ todo"
        );
    }

    #[test]
    fn loose_lists_keep_blank_lines_between_items() {
        assert_eq!(render("- one\n\n  two\n\n- three"), "• one\n\n  two\n\n• three");
    }

    #[test]
    fn code_inside_a_list_item_is_indented_with_it() {
        assert_eq!(render("- run:\n\n  ```\n  make\n  make test\n  ```"), "• run:\n\n  make\n  make test");
    }

    #[test]
    fn hard_and_soft_breaks_become_newlines() {
        assert_eq!(render("line one\nline two  \nline three"), "line one\nline two\nline three");
    }
}
