//! Properties of render + split over generated replies: every part fits the limits and is
//! well formed on its own, and splitting loses nothing but the whitespace at the breaks.

use ferry_channel::MarkupDialect;
use proptest::prelude::*;

use super::split::measure;
use super::{render, split};

const DIALECTS: [MarkupDialect; 5] = [
    MarkupDialect::Plain,
    MarkupDialect::Markdown,
    MarkupDialect::TelegramHtml,
    MarkupDialect::DiscordMarkdown,
    MarkupDialect::SlackMrkdwn,
];

const CODE_BLOCK: &str = "\n```rust\nfn main() {\n    println!(\"<hi> & bye\");\n\n    let x = 1;\n}\n```\n";

/// Pieces of a model reply: words, breaks, inline markup, blocks, and what needs escaping.
const FRAGMENTS: &[&str] = &[
    "word",
    "text",
    "longerword",
    " ",
    " ",
    " ",
    "\n",
    "\n\n",
    "**bold words**",
    "*it*",
    "~~gone~~",
    "`a < b`",
    "<script>",
    "&",
    "AT&T",
    "é",
    "😀",
    "日本語",
    "<@U123>",
    "[a link](https://example.com/a?b=1&c=2)",
    "\n| a | b |\n|---|--:|\n| 1 | 22 |\n\n",
    "\n- item\n- **item** two\n  - nested\n",
    "\n1. first\n2. second\n",
    "\n> quoted *text*\n> more\n",
    "\n# Heading\n",
    "averyveryveryverylongwordwithoutanybreaksatallinsideitwhatsoeverreally",
    CODE_BLOCK,
];

fn reply(with_code: bool) -> impl Strategy<Value = String> {
    let fragments: Vec<&str> = FRAGMENTS.iter().copied().filter(|f| with_code || *f != CODE_BLOCK).collect();
    proptest::collection::vec(proptest::sample::select(fragments), 0..150).prop_map(|pieces| pieces.concat())
}

fn dialect() -> impl Strategy<Value = MarkupDialect> {
    proptest::sample::select(DIALECTS.to_vec())
}

/// Fence lines toggle; a part must end with every fence closed.
fn fences_balanced(part: &str) -> bool {
    let mut open: Option<usize> = None;
    for line in part.lines() {
        let line = line.trim_start_matches([' ', '>', '\t']);
        let ticks = line.chars().take_while(|&c| c == '`').count();
        if ticks < 3 {
            continue;
        }
        let rest = &line[ticks..];
        match open {
            Some(len) if ticks >= len && rest.trim().is_empty() => open = None,
            None if !rest.contains('`') => open = Some(ticks),
            _ => {}
        }
    }
    open.is_none()
}

const TELEGRAM_TAGS: [&str; 7] = ["b", "i", "s", "code", "pre", "a", "blockquote"];
const TELEGRAM_ENTITIES: [&str; 4] = ["&amp;", "&lt;", "&gt;", "&quot;"];

/// Only Telegram's tags, properly nested and all closed; `&` only in whole entities.
fn telegram_well_formed(part: &str) -> Result<(), String> {
    let mut open: Vec<&str> = Vec::new();
    let mut rest = part;
    while let Some(index) = rest.find(['<', '&']) {
        rest = &rest[index..];
        if rest.starts_with('&') {
            let entity =
                TELEGRAM_ENTITIES.iter().find(|e| rest.starts_with(**e)).ok_or(format!("bare & in {part:?}"))?;
            rest = &rest[entity.len()..];
            continue;
        }
        let end = rest.find('>').ok_or(format!("unclosed tag in {part:?}"))?;
        let tag = &rest[1..end];
        rest = &rest[end + 1..];
        if let Some(name) = tag.strip_prefix('/') {
            if open.pop() != Some(name) {
                return Err(format!("</{name}> does not match in {part:?}"));
            }
        } else {
            let name = tag.split(' ').next().unwrap_or_default();
            if !TELEGRAM_TAGS.contains(&name) {
                return Err(format!("<{tag}> is not a Telegram tag in {part:?}"));
            }
            open.push(name);
        }
    }
    if open.is_empty() { Ok(()) } else { Err(format!("{open:?} left open in {part:?}")) }
}

/// `parts` are `input` in order, with only whitespace between them and around them.
fn rejoins(input: &str, parts: &[String]) -> Result<(), String> {
    let mut cursor = 0;
    for part in parts {
        let rest = &input[cursor..];
        let offset = rest.find(part.as_str()).ok_or(format!("{part:?} not found after {cursor}"))?;
        if !rest[..offset].trim().is_empty() {
            return Err(format!("{:?} lost before {part:?}", &rest[..offset]));
        }
        cursor += offset + part.len();
    }
    if input[cursor..].trim().is_empty() { Ok(()) } else { Err(format!("{:?} lost at the end", &input[cursor..])) }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(256))]

    #[test]
    fn every_part_fits_and_is_well_formed(
        markdown in reply(true), dialect in dialect(), limit in 100usize..700, max_lines in proptest::option::of(4usize..30),
    ) {
        let rendered = render(&markdown, dialect);
        let parts = split(&rendered, dialect, limit, max_lines);
        for part in &parts {
            prop_assert!(measure(part, dialect) <= limit, "{} > {limit}: {part:?}", measure(part, dialect));
            prop_assert!(part.split('\n').count() <= max_lines.unwrap_or(usize::MAX), "too many lines: {part:?}");
            prop_assert!(!part.trim().is_empty());
            match dialect {
                MarkupDialect::TelegramHtml => {
                    if let Err(problem) = telegram_well_formed(part) {
                        prop_assert!(false, "{}", problem);
                    }
                }
                MarkupDialect::Plain => {}
                _ => prop_assert!(fences_balanced(part), "unbalanced fence: {part:?}"),
            }
        }
        if !rendered.trim().is_empty() {
            prop_assert!(!parts.is_empty());
        }
    }

    #[test]
    fn plain_and_markdown_parts_rejoin_to_the_input(
        markdown in reply(false), limit in 20usize..400, max_lines in proptest::option::of(1usize..20),
    ) {
        for dialect in [MarkupDialect::Plain, MarkupDialect::Markdown] {
            let rendered = render(&markdown, dialect);
            let parts = split(&rendered, dialect, limit, max_lines);
            if let Err(problem) = rejoins(&rendered, &parts) {
                prop_assert!(false, "{:?}: {}", dialect, problem);
            }
        }
    }

    #[test]
    fn plain_parts_rejoin_even_with_code(markdown in reply(true), limit in 20usize..400) {
        let rendered = render(&markdown, MarkupDialect::Plain);
        if let Err(problem) = rejoins(&rendered, &split(&rendered, MarkupDialect::Plain, limit, None)) {
            prop_assert!(false, "{}", problem);
        }
    }

    #[test]
    fn any_text_renders_and_splits_without_panicking(text in "\\PC{0,300}", dialect in dialect(), limit in 1usize..200) {
        let rendered = render(&text, dialect);
        let parts = split(&rendered, dialect, limit, Some(17));
        if dialect == MarkupDialect::TelegramHtml && limit >= 100 {
            for part in &parts {
                if let Err(problem) = telegram_well_formed(part) {
                    prop_assert!(false, "{}", problem);
                }
            }
        }
    }
}
