//! Platform formatting (SPEC §7 "Outbound"): the model writes markdown, each platform wants
//! its own markup and has its own size limits.
//!
//! Two steps, kept apart so either can be used alone:
//!
//! 1. [`render`] parses the markdown with a real CommonMark parser (`pulldown-cmark`, with
//!    tables, strikethrough and task lists) and writes it in the channel's
//!    [`MarkupDialect`]. Everything the model wrote is escaped for the dialect, so a
//!    `<script>` or a stray `&` in a reply can never break a Telegram send.
//! 2. [`split()`] cuts the rendered text into messages that fit the channel's `text_limit` and
//!    `max_lines`, preferring paragraph, then line, then word breaks, and keeping every part
//!    well formed on its own: a code fence cut in two is closed and reopened, and Telegram HTML
//!    tags open at a cut are closed and reopened.
//!
//! [`render_messages`] does both for a channel; [`plain_fallback`] is the text to resend when
//! Telegram rejects the markup.
//!
//! ```
//! use ferry::channel::MarkupDialect;
//! use ferry::reply::format::{render, split};
//!
//! let html = render("**Done** — see `x < y`", MarkupDialect::TelegramHtml);
//! assert_eq!(html, "<b>Done</b> — see <code>x &lt; y</code>");
//! assert_eq!(split(&html, MarkupDialect::TelegramHtml, 4000, None), vec![html.clone()]);
//! ```
//!
//! One file per dialect ([`telegram`], [`slack`], [`plain`], [`discord`]); the block layout
//! the first three share (paragraphs, lists, quotes, headings) is in `layout`, tables in
//! `table`, and the cutting in [`split`](mod@split) with the structure it keeps balanced in
//! `structure`.

mod layout;
mod structure;
mod table;

pub mod discord;
pub mod plain;
pub mod slack;
pub mod split;
pub mod telegram;

#[cfg(any(test, feature = "fuzzing"))]
#[doc(hidden)]
pub mod invariants;
#[cfg(test)]
mod properties;

use ferry_channel::{ChannelCapabilities, MarkupDialect};
use pulldown_cmark::{Options, Parser};

pub use split::split;

/// The markdown extensions the model's replies are read with: GitHub-style tables,
/// `~~strikethrough~~` and `- [ ]` task lists. Everything else is plain CommonMark.
fn parser(markdown: &str) -> Parser<'_> {
    Parser::new_ext(markdown, Options::ENABLE_TABLES | Options::ENABLE_STRIKETHROUGH | Options::ENABLE_TASKLISTS)
}

/// Renders the model's markdown in `dialect`.
///
/// - [`MarkupDialect::TelegramHtml`]: Telegram's HTML parse mode, only the tags it supports,
///   all model text escaped;
/// - [`MarkupDialect::DiscordMarkdown`]: the markdown as written, tables turned into code blocks;
/// - [`MarkupDialect::SlackMrkdwn`]: Slack's mrkdwn, with Slack mentions (`<@U123>`, `<!here>`)
///   the model wrote passed through;
/// - [`MarkupDialect::Plain`]: readable text without markup;
/// - [`MarkupDialect::Markdown`]: unchanged (the web chat renders markdown itself).
///
/// Never fails: any input is valid markdown.
pub fn render(markdown: &str, dialect: MarkupDialect) -> String {
    match dialect {
        MarkupDialect::Plain => plain::render(markdown),
        MarkupDialect::Markdown => markdown.to_owned(),
        MarkupDialect::TelegramHtml => telegram::render(markdown),
        MarkupDialect::DiscordMarkdown => discord::render(markdown),
        MarkupDialect::SlackMrkdwn => slack::render(markdown),
    }
}

/// The same reply as plain text, for resending when a platform rejects the markup
/// (Telegram's "can't parse entities"). Split it with [`MarkupDialect::Plain`].
pub fn plain_fallback(markdown: &str) -> String {
    plain::render(markdown)
}

/// One already rendered and split part as plain text, for resending just that part when the
/// platform rejects its markup: Telegram HTML loses its tags and entities are decoded; the
/// other dialects are sent as written, without markup interpretation.
pub fn part_as_plain(part: &str, dialect: MarkupDialect) -> String {
    if dialect != MarkupDialect::TelegramHtml {
        return part.to_owned();
    }
    let mut plain = String::with_capacity(part.len());
    let mut rest = part;
    while let Some(open) = rest.find('<') {
        plain.push_str(&rest[..open]);
        match rest[open..].find('>') {
            Some(close) => rest = &rest[open + close + 1..],
            None => {
                plain.push_str(&rest[open..]);
                rest = "";
            }
        }
    }
    plain.push_str(rest);
    plain.replace("&lt;", "<").replace("&gt;", ">").replace("&quot;", "\"").replace("&amp;", "&")
}

/// The messages to send for one reply on a channel: [`render`] in the channel's markup, then
/// [`split()`] to its `text_limit` and `max_lines`. A blank reply gives no messages.
pub fn render_messages(markdown: &str, capabilities: &ChannelCapabilities) -> Vec<String> {
    let rendered = render(markdown, capabilities.markup);
    split(&rendered, capabilities.markup, capabilities.text_limit, capabilities.max_lines)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_rejected_telegram_part_reads_the_same_as_plain_text() {
        let part = render("**Bold** & <tags> [link](https://x.io)", MarkupDialect::TelegramHtml);
        assert_eq!(part_as_plain(&part, MarkupDialect::TelegramHtml), "Bold & <tags> link");
        assert_eq!(part_as_plain("*bold*", MarkupDialect::SlackMrkdwn), "*bold*");
    }

    #[test]
    fn markdown_passes_through_unchanged() {
        let text = "# Title\n\n| a | b |\n|---|---|\n| 1 | 2 |\n\n<b>kept</b> & **bold**";
        assert_eq!(render(text, MarkupDialect::Markdown), text);
    }

    #[test]
    fn bold_italic_code_and_links_in_every_dialect() {
        let text = "**b** *i* `c` [l](https://x.io)";
        assert_eq!(
            render(text, MarkupDialect::TelegramHtml),
            r#"<b>b</b> <i>i</i> <code>c</code> <a href="https://x.io">l</a>"#
        );
        assert_eq!(render(text, MarkupDialect::SlackMrkdwn), "*b* _i_ `c` <https://x.io|l>");
        assert_eq!(render(text, MarkupDialect::DiscordMarkdown), text);
        assert_eq!(render(text, MarkupDialect::Plain), "b i c l (https://x.io)");
    }

    #[test]
    fn a_long_reply_for_discord_becomes_messages_within_its_limits() {
        let capabilities = ChannelCapabilities {
            text_limit: 2000,
            max_lines: Some(17),
            markup: MarkupDialect::DiscordMarkdown,
            ..ChannelCapabilities::unrestricted()
        };
        let reply = (1..=40).map(|n| format!("- point {n}")).collect::<Vec<_>>().join("\n");
        let messages = render_messages(&reply, &capabilities);
        assert_eq!(messages.len(), 3);
        assert!(messages.iter().all(|m| m.lines().count() <= 17));
        assert_eq!(messages.join("\n"), reply);
    }

    #[test]
    fn a_blank_reply_gives_no_messages() {
        assert!(render_messages("  \n\n ", &ChannelCapabilities::unrestricted()).is_empty());
    }

    #[test]
    fn plain_fallback_strips_the_markup() {
        assert_eq!(plain_fallback("## Hi\n\n**there** <you>"), "Hi\n\nthere <you>");
    }
}
