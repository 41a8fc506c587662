use proptest::prelude::*;

use super::invariants::{fences_balanced, rebuild};
use super::*;

fn limits(min_chars: usize, max_chars: usize, break_preference: BreakPreference) -> ChunkLimits {
    ChunkLimits { min_chars, max_chars, break_preference }
}

/// The blocks a chunker sends for `deltas` pushed in turn and flushed at the end.
fn stream(deltas: &[&str], limits: ChunkLimits) -> Vec<Block> {
    let mut chunker = BlockChunker::new(limits, BreakMode::TextEnd);
    let mut blocks: Vec<Block> = deltas.iter().flat_map(|delta| chunker.push(delta)).collect();
    blocks.extend(chunker.text_end());
    blocks
}

fn texts(blocks: &[Block]) -> Vec<&str> {
    blocks.iter().map(|block| block.text.as_str()).collect()
}

fn chars(text: &str) -> usize {
    text.chars().count()
}

fn words(count: usize) -> String {
    (0..count).map(|i| ["alpha", "beta", "gamma", "delta"][i % 4]).collect::<Vec<_>>().join(" ")
}

/// A paragraph of exactly `len` characters, without sentence ends.
fn paragraph(len: usize) -> String {
    let mut text = words(len / 4);
    text.truncate(len - 1);
    let text = text.trim_end().to_owned();
    format!("{text}{}", "x".repeat(len - text.len()))
}

#[test]
fn three_paragraphs_of_900_chars_are_cut_at_the_paragraph_breaks() {
    let paragraphs = [paragraph(900), paragraph(900), paragraph(900)];
    let input = paragraphs.join("\n\n");
    let blocks = stream(&[&input], ChunkLimits::default());
    assert_eq!(texts(&blocks), paragraphs.iter().map(String::as_str).collect::<Vec<_>>());
    assert_eq!(rebuild(&blocks, &input).as_deref(), Ok(input.as_str()));
}

#[test]
fn a_code_block_longer_than_a_block_is_closed_and_reopened_with_its_info_string() {
    let code: String = (0..40).map(|i| format!("    let value_{i:02} = compute({i}) + offset;\n")).collect();
    let input = format!("{}\n\n```rust\n{code}```\n\n{}", paragraph(600), paragraph(700));
    assert!((2900..3100).contains(&chars(&input)));
    let blocks = stream(&[&input], ChunkLimits::default());
    assert_eq!(blocks.len(), 3, "{:#?}", texts(&blocks));
    assert!(blocks[0].text.starts_with(&paragraph(600)));
    assert!(blocks[0].text.ends_with(";\n```"), "closed at a line end: {:?}", blocks[0].text);
    assert_eq!(blocks[0].closed, "\n```".len());
    assert!(blocks[1].text.starts_with("```rust\n    let value_"));
    assert_eq!(blocks[1].reopened, "```rust\n".len());
    assert!(blocks[1].text.ends_with("offset;\n```"));
    assert_eq!(blocks[1].closed, 0, "the block's own closing fence");
    assert_eq!(blocks[2].text, paragraph(700));
    for block in &blocks {
        assert!(chars(&block.text) <= 1200 && fences_balanced(&block.text), "{:?}", block.text);
    }
    assert_eq!(rebuild(&blocks, &input).as_deref(), Ok(input.as_str()));
}

#[test]
fn a_code_block_that_fits_in_a_block_is_moved_whole_to_the_next() {
    let code: String = (0..30).map(|i| format!("print({i})  # step {i}\n")).collect();
    let input = format!("{}\n\n~~~python\n{code}~~~\nDone.", paragraph(700));
    let blocks = stream(&[&input], ChunkLimits::default());
    assert_eq!(texts(&blocks), [paragraph(700), format!("~~~python\n{code}~~~\nDone.")]);
}

#[test]
fn a_line_without_whitespace_is_cut_hard_at_max_chars() {
    let input = "é".repeat(1000) + &"x".repeat(1500);
    let blocks = stream(&[&input], ChunkLimits::default());
    assert_eq!(blocks.iter().map(|block| chars(&block.text)).collect::<Vec<_>>(), [1200, 1200, 100]);
    assert_eq!(texts(&blocks).concat(), input);
}

#[test]
fn a_sentence_end_is_preferred_over_plain_whitespace() {
    let first = format!("{}.", paragraph(899));
    let input = format!("{first} {}", words(100));
    let blocks = stream(&[&input], ChunkLimits::default());
    assert_eq!(blocks[0].text, first, "not at the last space before 1200");
    let lines = format!("{}\n{}. {}", paragraph(850), paragraph(99), words(100));
    let blocks = stream(&[&lines], ChunkLimits::default());
    assert_eq!(blocks[0].text, paragraph(850), "a newline beats a later sentence end");
}

#[test]
fn the_preferred_break_ends_a_block_as_soon_as_min_chars_are_reached() {
    let input = format!("{}. {}. {}", paragraph(500), paragraph(400), words(200));
    let sentence = limits(800, 1200, BreakPreference::Sentence);
    let blocks = stream(&[&input], sentence);
    assert_eq!(blocks[0].text, format!("{}. {}.", paragraph(500), paragraph(400)));
    // Paragraph preference: the same sentence end is only a fallback, taken at 1200 at most.
    let mut chunker = BlockChunker::new(ChunkLimits::default(), BreakMode::TextEnd);
    assert!(chunker.push(&input[..1100]).is_empty(), "waits for a paragraph break");
    assert_eq!(chunker.push(&input[1100..])[0].text, blocks[0].text);
}

#[test]
fn break_whitespace_is_dropped_and_everything_else_kept() {
    let small = limits(10, 20, BreakPreference::Paragraph);
    let blocks = stream(&["  Hello there  \n\n\n    indented code line\nend  \n"], small);
    assert_eq!(texts(&blocks), ["  Hello there", "    indented code", "line\nend"]);
}

#[test]
fn characters_are_counted_not_bytes() {
    let input = "日本語のテキスト🦀".repeat(200);
    let blocks = stream(&[&input], limits(100, 150, BreakPreference::Paragraph));
    assert_eq!(blocks.len(), 12);
    assert!(blocks.iter().all(|block| chars(&block.text) == 150));
    assert_eq!(texts(&blocks).concat(), input);
}

#[test]
fn short_text_waits_for_the_end_of_the_text() {
    let mut chunker = BlockChunker::new(ChunkLimits::default(), BreakMode::TextEnd);
    assert!(chunker.push("Short answer.\n\nSecond line.").is_empty());
    assert!(chunker.has_pending());
    assert_eq!(texts(&chunker.text_end()), ["Short answer.\n\nSecond line."]);
    assert!(!chunker.has_pending());
}

#[test]
fn text_end_flushes_never_send_a_block_twice() {
    let text = format!("{}\n\n{}", paragraph(900), paragraph(300));
    let mut chunker = BlockChunker::new(ChunkLimits::default(), BreakMode::TextEnd);
    let mut sent = chunker.push(&text);
    sent.extend(chunker.text_end());
    sent.extend(chunker.text_end());
    sent.extend(chunker.push("After the tool call."));
    sent.extend(chunker.text_end());
    sent.extend(chunker.message_end());
    sent.extend(chunker.message_end());
    assert_eq!(texts(&sent), [paragraph(900).as_str(), &paragraph(300), "After the tool call."]);
    let after_tool = text.len().."After the tool call.".len() + text.len();
    assert_eq!(sent[2].source, after_tool, "sources keep counting across flushes");
}

#[test]
fn message_end_mode_buffers_across_text_ends() {
    let mut chunker = BlockChunker::new(ChunkLimits::default(), BreakMode::MessageEnd);
    assert!(chunker.push("Let me check. ").is_empty());
    assert!(chunker.text_end().is_empty());
    assert!(chunker.push("Found it.").is_empty());
    assert!(chunker.text_end().is_empty());
    assert_eq!(texts(&chunker.message_end()), ["Let me check. Found it."]);
    assert!(chunker.message_end().is_empty());
}

#[test]
fn a_flush_closes_a_code_block_the_text_left_open() {
    let blocks = stream(&["Here:\n```sh\nls -la\n"], ChunkLimits::default());
    assert_eq!(texts(&blocks), ["Here:\n```sh\nls -la\n```"]);
    assert_eq!(blocks[0].closed, 4);
}

#[test]
fn reset_forgets_buffered_text() {
    let mut chunker = BlockChunker::new(ChunkLimits::default(), BreakMode::TextEnd);
    assert!(chunker.push("draft that compaction will retry").is_empty());
    chunker.reset();
    assert!(!chunker.has_pending());
    assert!(chunker.push("Retried.").is_empty());
    assert_eq!(texts(&chunker.text_end()), ["Retried."]);
}

#[test]
fn no_block_starts_mid_line_with_a_fence_marker() {
    // The only break in the window is followed by a fence marker: cutting there would turn
    // the marker into a fence at the start of the next message.
    let input = format!("{} ```{}", "word ".repeat(20), "y".repeat(80));
    let blocks = stream(&[&input], limits(95, 100, BreakPreference::Paragraph));
    assert!(blocks.len() > 1);
    assert!(blocks.iter().all(|block| !block.text.trim_start().starts_with('`')), "{:#?}", texts(&blocks));
    assert!(blocks.iter().all(|block| fences_balanced(&block.text)));
}

#[test]
fn a_hard_cut_moves_to_a_break_rather_than_leave_whitespace_at_the_edges() {
    // Found by the property tests: the cut at `max_chars` fell in the whitespace after a
    // closing fence, then at the start of a fence line.
    let prose = "00a0a0a0a00000aaaa0aa0aaaa00aaaaa000aaa000aaa000000aaa0aa0000a0aa00aaaaa00aaaaaaa0a0a0aa0aa0aaa0a000a\
                 a00a0aaa00aaaaa0000aaa0a00a0aaa00aa0aa0aaaa00aaa0a0aaaaa0000a0aaa0aaa0a00a0aaaaAaaAaAAaaßß日本語日 a";
    let code = "```rust\n0a0(}0a(a=}0\n0}=.aaa0=a.(;===. ..=a;.a00=00.;=\n";
    for middle in ["\n```rust\n```\n   \n\n \n", "\n```rust\n```\naaa\n\na\n"] {
        let input = format!("{prose}{middle}{code}");
        let blocks = stream(&[&input], limits(50, 54, BreakPreference::Paragraph));
        assert_eq!(rebuild(&blocks, &input).as_deref(), Ok(input.as_str()));
        for block in &blocks {
            assert_eq!(block.text.trim(), block.text, "{:#?}", texts(&blocks));
            assert!(chars(&block.text) <= 54 && fences_balanced(&block.text), "{:?}", block.text);
        }
    }
}

#[test]
fn config_values_convert_and_inconsistent_limits_still_work() {
    let config = BlockStreamingChunk { min_chars: 5, max_chars: 9, break_preference: BreakPreference::Newline };
    assert_eq!(ChunkLimits::from(&config), limits(5, 9, BreakPreference::Newline));
    assert_eq!(ChunkLimits::default(), limits(800, 1200, BreakPreference::Paragraph));
    let blocks = stream(&["abc def"], limits(0, 0, BreakPreference::Sentence));
    assert_eq!(texts(&blocks), ["a", "b", "c", "d", "e", "f"]);
}

/// Markdown-like pieces: words in several scripts, spaces, sentence ends, line and
/// paragraph breaks, long unbroken words, fenced code blocks (closed or not) and markers
/// in the middle of a line.
fn piece() -> impl Strategy<Value = String> {
    let code_line = "[ a-z0-9(){};=.]{0,50}";
    let fence = (
        prop::sample::select(vec!["```", "~~~", "````"]),
        prop::sample::select(vec!["", "rust", "python", " js"]),
        prop::collection::vec(code_line, 0..20),
        any::<bool>(),
    )
        .prop_map(|(marker, info, lines, closed)| {
            let body: String = lines.iter().map(|line| format!("{line}\n")).collect();
            format!("\n{marker}{info}\n{body}{}", if closed { format!("{marker}\n") } else { String::new() })
        });
    prop_oneof![
        6 => "[a-zA-Z]{1,10}",
        5 => Just(" ".to_owned()),
        2 => prop::sample::select(vec![". ", "! ", "? ", ".\n", "  ", "\t", " \n \n"]).prop_map(str::to_owned),
        2 => prop::sample::select(vec!["\n", "\n\n", "\n\n\n"]).prop_map(str::to_owned),
        2 => "[éüß日本語🦀 ]{1,8}",
        1 => "[a-z0-9]{30,200}",
        1 => fence,
        1 => prop::sample::select(vec!["use ``` here", "`inline`", "\n  - item", "~ ~~"]).prop_map(str::to_owned),
    ]
}

fn markdown() -> impl Strategy<Value = String> {
    prop::collection::vec(piece(), 0..60).prop_map(|pieces| pieces.concat())
}

fn any_limits() -> impl Strategy<Value = ChunkLimits> {
    let preference =
        prop::sample::select(vec![BreakPreference::Paragraph, BreakPreference::Newline, BreakPreference::Sentence]);
    (40usize..400, 0.0f64..=1.0, preference)
        .prop_map(|(max, ratio, preference)| limits(((max as f64) * ratio) as usize, max, preference))
}

/// `text` cut into pieces at character boundaries, of the sizes `sizes` cycles through;
/// a size of 0 pushes an empty piece before a one-character one.
fn split<'a>(text: &'a str, sizes: &[usize]) -> Vec<&'a str> {
    let mut pieces = Vec::new();
    let mut rest = text;
    for &size in sizes.iter().cycle() {
        if rest.is_empty() {
            break;
        }
        if size == 0 {
            pieces.push("");
        }
        let at = rest.char_indices().nth(size.max(1)).map_or(rest.len(), |(i, _)| i);
        pieces.push(&rest[..at]);
        rest = &rest[at..];
    }
    pieces
}

proptest! {
    #[test]
    fn blocks_rebuild_the_input(text in markdown(), limits in any_limits()) {
        let blocks = stream(&[&text], limits);
        prop_assert_eq!(rebuild(&blocks, &text), Ok(text.clone()));
        for block in &blocks {
            prop_assert!(!block.original().is_empty());
            prop_assert!(!block.text.starts_with('\n') && !block.text.ends_with(char::is_whitespace), "{:?}", block.text);
        }
    }

    #[test]
    fn no_block_is_longer_than_max_chars(text in markdown(), limits in any_limits()) {
        for block in stream(&[&text], limits) {
            prop_assert!(chars(&block.text) <= limits.max_chars, "{} > {}: {:?}", chars(&block.text), limits.max_chars, block.text);
        }
    }

    #[test]
    fn every_block_has_balanced_fences(text in markdown(), limits in any_limits()) {
        for block in stream(&[&text], limits) {
            prop_assert!(fences_balanced(&block.text), "{:?}", block.text);
        }
    }

    #[test]
    fn streaming_in_any_pieces_gives_the_same_blocks(
        text in markdown(),
        limits in any_limits(),
        sizes in prop::collection::vec(0usize..40, 1..8),
    ) {
        let whole = chunk_text(&text, &limits);
        let streamed = stream(&split(&text, &sizes), limits);
        prop_assert_eq!(texts(&streamed), whole.iter().map(String::as_str).collect::<Vec<_>>());
    }
}

/// Found by the fuzzer: a fence line too long to reopen is cut hard just before its
/// trailing whitespace, so the next block starts with a break and then a new fence. The
/// break before that fence has nothing before it in the block; cutting there sent an empty
/// block forever (a panic in debug builds, a loop in release).
#[test]
fn a_block_that_starts_with_a_break_before_a_fence_still_consumes_text() {
    let input = format!(
        "```a{}\n\n```a aaaa aaaaa\naaaaaaaaa  a aaaa aa\naaaaaaaaa  a aaaa aa\naaaaaaaaaa  a aaa",
        " ".repeat(73)
    );
    let blocks = stream(&[&input], limits(80, 80, BreakPreference::Sentence));
    assert_eq!(rebuild(&blocks, &input).as_deref(), Ok(input.as_str()));
    assert!(blocks.len() >= 2, "{:#?}", texts(&blocks));
    for block in &blocks {
        assert!(!block.original().is_empty(), "an empty block in {:#?}", texts(&blocks));
        assert!(chars(&block.text) <= 80, "{:?}", block.text);
    }
}
