//! Slack mrkdwn: `*bold*`, `_italic_`, `~strike~`, `` `code` ``, ```` ``` ```` blocks (Slack
//! shows no language, so none is written), `<url|label>` links, `>` quotes; headings become bold
//! lines and list items `•` lines.
//!
//! Slack wants `&`, `<` and `>` escaped as `&amp;`, `&lt;`, `&gt;` — except in its own special
//! tokens: a mention the model wrote on purpose (`<@U123>`, `<#C123|general>`, `<!here>`,
//! `<!subteam^S1>`) passes through untouched so it still notifies.

use super::layout::{self, Link, Markup, QuoteStyle, Style};

/// Renders markdown as Slack mrkdwn.
pub fn render(markdown: &str) -> String {
    layout::render(markdown, &Slack)
}

/// Longest special token recognized; anything longer is escaped as text.
const MAX_TOKEN_LEN: usize = 256;

/// The length of the Slack special token `text` starts with, if any: `<` then `@`, `#` or `!`,
/// an alphanumeric, and up to the next `>` on the same line.
fn special_token_len(text: &str) -> Option<usize> {
    let bytes = text.as_bytes();
    if bytes.first() != Some(&b'<')
        || !matches!(bytes.get(1), Some(b'@' | b'#' | b'!'))
        || !bytes.get(2).is_some_and(u8::is_ascii_alphanumeric)
    {
        return None;
    }
    let end = bytes.iter().take(MAX_TOKEN_LEN).position(|&b| b == b'>')?;
    (!bytes[1..end].iter().any(|&b| b == b'<' || b == b'\n')).then_some(end + 1)
}

/// Appends `text` escaped for mrkdwn, leaving the special tokens in it as they are.
pub fn escape(text: &str, out: &mut String) {
    escape_with(text, out, true);
}

fn escape_with(text: &str, out: &mut String, keep_tokens: bool) {
    let mut copied = 0;
    let mut index = 0;
    let bytes = text.as_bytes();
    while index < bytes.len() {
        let entity = match bytes[index] {
            b'&' => "&amp;",
            b'<' if keep_tokens => match special_token_len(&text[index..]) {
                Some(len) => {
                    index += len;
                    continue;
                }
                None => "&lt;",
            },
            b'<' => "&lt;",
            b'>' => "&gt;",
            _ => {
                index += 1;
                continue;
            }
        };
        out.push_str(&text[copied..index]);
        out.push_str(entity);
        index += 1;
        copied = index;
    }
    out.push_str(&text[copied..]);
}

/// Appends a link target: `&` escaped, and the characters that would end the `<…|…>` early
/// (and spaces) percent-encoded. An autolink keeps its `|`: `<https://x|label>` written by the model is
/// already a Slack link.
fn push_url(url: &str, autolink: bool, out: &mut String) {
    for ch in url.chars() {
        match ch {
            '&' => out.push_str("&amp;"),
            '<' => out.push_str("%3C"),
            '>' => out.push_str("%3E"),
            '|' if !autolink => out.push_str("%7C"),
            ' ' => out.push_str("%20"),
            ch => out.push(ch),
        }
    }
}

struct Slack;

impl Markup for Slack {
    fn style(&self, style: Style, _open: bool) -> &'static str {
        match style {
            Style::Bold => "*",
            Style::Italic => "_",
            Style::Strike => "~",
        }
    }

    fn text(&self, text: &str, out: &mut String) {
        escape(text, out);
    }

    fn inline_code(&self, code: &str, out: &mut String) {
        out.push('`');
        escape_with(code, out, false);
        out.push('`');
    }

    fn code_block(&self, _lang: &str, code: &str, line_prefix: &str, out: &mut String) {
        out.push_str("```");
        for line in code.split('\n') {
            out.push('\n');
            out.push_str(line_prefix);
            escape_with(line, out, false);
        }
        out.push('\n');
        out.push_str(line_prefix);
        out.push_str("```");
    }

    fn link(&self, link: &Link, label: &str, out: &mut String) {
        out.push('<');
        push_url(&link.url, link.autolink, out);
        let label = label.trim();
        if !label.is_empty() && label != link.url {
            out.push('|');
            out.push_str(&label.replace('\n', " "));
        }
        out.push('>');
    }

    fn quote(&self) -> QuoteStyle {
        QuoteStyle::LinePrefix("> ")
    }

    /// Slack shows a link label as written, so markers inside it would show as asterisks.
    fn styles_in_links(&self) -> bool {
        false
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn special_tokens_pass_through_and_other_angle_brackets_are_escaped() {
        assert_eq!(
            render("Hey <@U123> and <#C42|general>, <!here>: a < b && c > d <notatoken> <@ x>"),
            "Hey <@U123> and <#C42|general>, <!here>: a &lt; b &amp;&amp; c &gt; d &lt;notatoken&gt; &lt;@ x&gt;"
        );
        assert_eq!(render("<!channel> at the start of a line"), "<!channel> at the start of a line");
        assert_eq!(render("`<@U1>` is how"), "`&lt;@U1&gt;` is how");
    }

    #[test]
    fn inline_styles_become_mrkdwn_markers() {
        assert_eq!(render("**bold** *it* ~~gone~~ `x & y`"), "*bold* _it_ ~gone~ `x &amp; y`");
        assert_eq!(render("# Title\n\ntext"), "*Title*\n\ntext");
        assert_eq!(render("## **Already bold**"), "*Already bold*");
    }

    #[test]
    fn links_use_angle_brackets_and_a_pipe() {
        assert_eq!(render("[label](https://x)"), "<https://x|label>");
        assert_eq!(render("[**bold** label](https://x/?a=1&b=|2)"), "<https://x/?a=1&amp;b=%7C2|bold label>");
        assert_eq!(render("<https://x> and <https://x|label>"), "<https://x> and <https://x|label>");
        assert_eq!(render("[spaced](<https://x/a b>)"), "<https://x/a%20b|spaced>");
        assert_eq!(
            render("![diagram](https://x/d.png) <me@x.io>"),
            "<https://x/d.png|diagram> <mailto:me@x.io|me@x.io>"
        );
    }

    #[test]
    fn blocks_use_bullets_quote_markers_and_bare_fences() {
        assert_eq!(
            render("- one\n- two\n\n> said\n> it\n\n```python\nprint(1 < 2)\n```"),
            "• one\n• two\n\n> said\n> it\n\n```\nprint(1 &lt; 2)\n```"
        );
        assert_eq!(render("| a | b |\n|---|---|\n| 1 | 2 |"), "```\na | b\n--|--\n1 | 2\n```");
    }
}
