//! A model's markdown reply rendered for a channel's markup and split into messages
//! (`src/reply/format`: `render`, `split`, `render_messages`).
//!
//! The first byte of the input chooses the dialect, the next three a text limit (100 to
//! 1123) and a line limit (none, or 4 to 30); the rest, as UTF-8 (lossy), is the reply.
//! Asserts, as the property tests do (`reply::format::invariants`): every part within the
//! limits (Telegram counted in UTF-16 units) and not blank; Telegram HTML parts with only
//! Telegram's tags, balanced, and whole entities; code fences balanced in every markdown part;
//! no text lost in the split; a reply that renders to something gives at least one part. For
//! Telegram, Discord and Slack the same holds with the platform's own limits
//! (`capabilities()`: 4096 UTF-16 units, 2000 characters and 17 lines, 40 000 characters).
//!
//! Skipped where `split` cannot keep them (FUZZING.md): fences and lengths when a fence line
//! is too long to reopen within the limit; lengths when a Telegram tag takes over a quarter of
//! it; fences when a line has a fence marker in its middle (an open bug).
#![no_main]

use ferry::reply::format::invariants::{DIALECTS, fences_balanced, keeps_text, telegram_well_formed};
use ferry::reply::format::split::measure;
use ferry::reply::format::{render, render_messages, split};
use ferry_channel::{ChannelCapabilities, MarkupDialect};
use libfuzzer_sys::fuzz_target;

/// Whether `rendered` has a line that looks like a fence line (a run of three or more
/// backticks or tildes after at most a quote, list marker or indent) and takes more than half
/// of `limit` with its closing line: `split` never cuts inside a fence line and must reopen it
/// in the next part, which such a line does not leave room for (a documented limit of
/// `split`), so neither the fences nor the lengths of its parts are checked then. Counted
/// generously.
fn has_oversized_fence_line(rendered: &str, limit: usize) -> bool {
    rendered.split('\n').any(|line| {
        let start = line.trim_start_matches([
            ' ', '\t', '>', '-', '*', '+', '.', ')', '0', '1', '2', '3', '4', '5', '6', '7', '8', '9',
        ]);
        let marker =
            start.chars().take_while(|&c| c == '`').count().max(start.chars().take_while(|&c| c == '~').count());
        marker >= 3 && line.chars().count() + marker + 2 > limit / 2
    })
}

/// Whether `rendered` has three backticks or tildes in the middle of a line: `split` may cut
/// right before them, and the next part then starts with what reads as a fence (an open bug
/// found by this target, FUZZING.md), so the fences of its parts are not checked then.
fn has_mid_line_fence_marker(rendered: &str) -> bool {
    rendered.split('\n').any(|line| {
        let body = line.trim_start_matches([' ', '\t', '>']);
        body.char_indices().skip(1).any(|(at, _)| body[at..].starts_with("```") || body[at..].starts_with("~~~"))
    })
}

/// Whether a Telegram HTML tag in `rendered` (a link's `href`, a code block's language) takes
/// more than a quarter of `limit`: a tag is never cut, and one that must be closed and
/// reopened around a cut may not fit (the limit `split` documents), so part lengths are not
/// checked then.
fn has_oversized_tag(rendered: &str, dialect: MarkupDialect, limit: usize) -> bool {
    dialect == MarkupDialect::TelegramHtml
        && rendered.split('<').skip(1).any(|tag| tag.split('>').next().map_or(0, str::len) + 2 > limit / 4)
}

fn check(rendered: &str, parts: &[String], dialect: MarkupDialect, limit: usize, max_lines: Option<usize>) {
    let long_fence_line = has_oversized_fence_line(rendered, limit);
    let fences_checked = !long_fence_line && !has_mid_line_fence_marker(rendered);
    let length_checked = !long_fence_line && !has_oversized_tag(rendered, dialect, limit);
    for part in parts {
        let size = measure(part, dialect);
        assert!(!length_checked || size <= limit, "{size} > {limit}: {part:?}");
        let lines = part.split('\n').count();
        assert!(lines <= max_lines.unwrap_or(usize::MAX), "{lines} lines: {part:?}");
        assert!(!part.trim().is_empty(), "a blank part");
        match dialect {
            MarkupDialect::TelegramHtml => {
                if let Err(problem) = telegram_well_formed(part) {
                    panic!("{problem}");
                }
            }
            MarkupDialect::Plain => {}
            _ => assert!(!fences_checked || fences_balanced(part), "unbalanced fence: {part:?}"),
        }
    }
    if let Err(problem) = keeps_text(rendered, parts, dialect) {
        panic!("{dialect:?}: {problem}");
    }
    if !rendered.trim().is_empty() {
        assert!(!parts.is_empty(), "{rendered:?} gave no parts");
    }
}

fn platform(dialect: MarkupDialect) -> Option<ChannelCapabilities> {
    match dialect {
        MarkupDialect::TelegramHtml => Some(ferry_telegram::capabilities()),
        MarkupDialect::DiscordMarkdown => Some(ferry_discord::capabilities()),
        MarkupDialect::SlackMrkdwn => Some(ferry_slack::capabilities()),
        _ => None,
    }
}

fuzz_target!(|data: &[u8]| {
    let [selector, low, high, lines, reply @ ..] = data else { return };
    let dialect = DIALECTS[usize::from(*selector) % DIALECTS.len()];
    let limit = 100 + usize::from(u16::from_le_bytes([*low, *high]) % 1024);
    let max_lines = (*lines >= 27).then(|| 4 + usize::from(lines % 27));
    let markdown = String::from_utf8_lossy(reply);

    let rendered = render(&markdown, dialect);
    check(&rendered, &split(&rendered, dialect, limit, max_lines), dialect, limit, max_lines);
    if let Some(capabilities) = platform(dialect) {
        let parts = render_messages(&markdown, &capabilities);
        check(&rendered, &parts, dialect, capabilities.text_limit, capabilities.max_lines);
    }
});
