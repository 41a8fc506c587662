//! Properties of render + split over generated replies: every part fits the limits and is
//! well formed on its own, and splitting loses nothing but the whitespace at the breaks. The
//! checks themselves are in `invariants`, shared with the fuzz targets.

use ferry_channel::MarkupDialect;
use proptest::prelude::*;

use super::invariants::{DIALECTS, fences_balanced, rejoins, telegram_well_formed};
use super::split::measure;
use super::{render, split};

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
