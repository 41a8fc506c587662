use proptest::prelude::*;

use super::*;

fn sha256_hex(text: &str) -> String {
    Sha256::digest(text.as_bytes()).iter().map(|byte| format!("{byte:02x}")).collect()
}

/// The promises of `chunk` for any document: line ranges and texts agree with the document,
/// no chunk is over budget, hashes are of the text, every chunk brings a line (or a piece of
/// one) its predecessor did not, and every non-blank line is somewhere.
fn check(document: &str, chunks: &[Chunk], max_tokens: usize) {
    let max_tokens = max_tokens.max(1);
    let all: Vec<&str> = document.lines().collect();
    let mut covered = vec![false; all.len()];
    for (index, chunk) in chunks.iter().enumerate() {
        let (start, end) = (chunk.start_line as usize, chunk.end_line as usize);
        assert!(1 <= start && start <= end && end <= all.len(), "{chunk:?}");
        assert_eq!(chunk.hash, sha256_hex(&chunk.text));
        assert!(!chunk.text.trim().is_empty(), "{chunk:?}");
        assert!(estimate_tokens(&chunk.text) <= max_tokens, "{chunk:?} is over {max_tokens}");
        if chunk.text == lines(document, chunk.start_line, Some(chunk.end_line - chunk.start_line + 1)) {
            covered[start - 1..end].iter_mut().for_each(|line| *line = true);
        } else {
            assert_eq!(start, end, "only a long line's pieces differ from their lines: {chunk:?}");
            assert!(all[start - 1].contains(&chunk.text), "{chunk:?}");
        }
        if let Some(before) = index.checked_sub(1).map(|before| &chunks[before]) {
            let piece_after_piece = before.start_line == before.end_line
                && (chunk.start_line, chunk.end_line) == (before.end_line, before.end_line);
            assert!(chunk.start_line > before.start_line || piece_after_piece, "{before:?} then {chunk:?}");
            assert!(chunk.end_line > before.end_line || piece_after_piece, "{before:?} then {chunk:?}");
        }
    }
    for (index, line) in all.iter().enumerate() {
        let pieced =
            chunks.iter().any(|chunk| chunk.start_line as usize == index + 1 && chunk.end_line == chunk.start_line);
        assert!(line.trim().is_empty() || covered[index] || pieced, "line {} is in no chunk", index + 1);
    }
}

/// `count` lines of about 10 estimated tokens each.
fn numbered_lines(count: usize) -> String {
    (1..=count).map(|n| format!("line {n:03}: the quick brown fox jumped")).collect::<Vec<_>>().join("\n")
}

#[test]
fn tokens_are_estimated_by_script() {
    assert_eq!(estimate_tokens(""), 0);
    assert_eq!(estimate_tokens("abcd"), 1);
    assert_eq!(estimate_tokens("abcde"), 2);
    assert_eq!(estimate_tokens("Привет"), 2, "Cyrillic like Latin");
    assert_eq!(estimate_tokens("東京タワー"), 5, "one token per CJK character");
    assert_eq!(estimate_tokens("서울 tower"), 2 + 2);
}

#[test]
fn empty_and_blank_documents_have_no_chunks() {
    for document in ["", "\n", "\n\n  \n\t\n", "   "] {
        assert_eq!(chunk(document, CHUNK_TOKENS, CHUNK_OVERLAP_TOKENS), [], "{document:?}");
    }
}

#[test]
fn a_one_line_document_is_one_chunk_with_the_sha256_of_its_text() {
    let hello = "2cf24dba5fb0a30e26e83b2ac5b9e29e1b161e5c1fa7425e73043362938b9824";
    let chunks = chunk("hello", CHUNK_TOKENS, CHUNK_OVERLAP_TOKENS);
    assert_eq!(chunks, [Chunk { start_line: 1, end_line: 1, text: "hello".into(), hash: hello.into() }]);
    let trailing = chunk("hello\n\n\n", CHUNK_TOKENS, CHUNK_OVERLAP_TOKENS);
    assert_eq!((trailing.len(), trailing[0].end_line, trailing[0].text.as_str()), (1, 3, "hello\n\n"));
}

#[test]
fn chunks_hold_whole_lines_and_repeat_a_bounded_overlap() {
    let document = numbered_lines(100);
    let costs: Vec<usize> = document.lines().map(line_tokens).collect();
    assert_eq!(costs[0], 10);
    let chunks = chunk(&document, 100, 25);
    check(&document, &chunks, 100);
    assert!(chunks.len() > 10, "{}", chunks.len());
    assert_eq!((chunks[0].start_line, chunks[0].end_line), (1, 10));
    for pair in chunks.windows(2) {
        let repeated = (pair[1].start_line..=pair[0].end_line).map(|line| costs[line as usize - 1]).sum::<usize>();
        assert_eq!(pair[1].start_line, pair[0].end_line - 1, "two lines of 10 fit in 25: {pair:?}");
        assert!(repeated <= 25);
    }
    assert_eq!(chunks.last().map(|c| c.end_line), Some(100));
}

#[test]
fn the_overlap_is_never_the_whole_chunk() {
    let document = numbered_lines(30);
    for (max_tokens, overlap_tokens) in [(30, 1000), (10, 10), (25, 24), (0, 0), (1, usize::MAX)] {
        let chunks = chunk(&document, max_tokens, overlap_tokens);
        check(&document, &chunks, max_tokens);
        assert!(chunks.len() <= 30 * 50, "{max_tokens}/{overlap_tokens}: {}", chunks.len());
    }
}

#[test]
fn a_long_line_is_cut_on_char_boundaries_keeping_its_line_number() {
    for long in
        ["Привет, мир! ".repeat(200), "東京タワーに行った。".repeat(100), "😀🎉👍🏽".repeat(300), "x".repeat(3000)]
    {
        let document = format!("before\n{long}\nafter");
        let chunks = chunk(&document, 50, 10);
        check(&document, &chunks, 50);
        let pieces: Vec<&Chunk> = chunks.iter().filter(|c| (c.start_line, c.end_line) == (2, 2)).collect();
        assert!(pieces.len() > 3, "{long:.20}");
        assert_eq!(pieces.iter().map(|c| c.text.as_str()).collect::<String>(), long, "nothing lost or doubled");
        assert_eq!((chunks[0].start_line, chunks[0].end_line), (1, 1), "the line before stands alone");
        assert_eq!(chunks.last().map(|c| (c.start_line, c.end_line)), Some((3, 3)));
    }
}

#[test]
fn a_long_line_is_cut_after_a_space_when_there_is_one() {
    let long = "word ".repeat(500);
    let chunks = chunk(&long, 40, 0);
    check(&long, &chunks, 40);
    for piece in &chunks[..chunks.len() - 1] {
        assert!(piece.text.ends_with(' ') && piece.text.starts_with('w'), "{:?}", piece.text);
    }
}

#[test]
fn a_heading_starts_a_new_chunk_once_the_chunk_is_half_full() {
    let section = |title: &str| format!("## {title}\n{}", numbered_lines(6));
    let document = [section("One"), section("Two"), section("Three")].join("\n");
    let chunks = chunk(&document, 100, 30);
    check(&document, &chunks, 100);
    let spans: Vec<(u32, u32)> = chunks.iter().map(|c| (c.start_line, c.end_line)).collect();
    assert_eq!(spans, [(1, 7), (8, 14), (15, 21)], "one chunk per section, no overlap across headings");
    assert!(chunks[1].text.starts_with("## Two"));
}

#[test]
fn a_heading_in_a_chunk_under_half_full_does_not_end_it() {
    let document = "# Title\nshort intro\n## Part\nline one\nline two";
    let chunks = chunk(document, 100, 30);
    assert_eq!(chunks.len(), 1);
    assert_eq!(chunks[0].text, document);
}

#[test]
fn hashtags_and_deep_hashes_are_not_headings() {
    assert!(is_heading("# Title") && is_heading("###### Six") && is_heading("  ## indented") && is_heading("#"));
    assert!(!is_heading("#hashtag") && !is_heading("####### seven") && !is_heading("text # not"));
}

#[test]
fn hashes_are_deterministic_and_change_only_with_their_text() {
    let document = numbered_lines(60);
    let first = chunk(&document, 100, 20);
    assert_eq!(first, chunk(&document, 100, 20));
    let edited = document.replacen("line 055", "line fifty-five", 1);
    let second = chunk(&edited, 100, 20);
    let unchanged = first.iter().zip(&second).take_while(|(a, b)| a.hash == b.hash).count();
    assert!(unchanged >= 6, "chunks before the edit keep their hashes: {unchanged}");
    let with_edit: Vec<&Chunk> = second.iter().filter(|c| c.text.contains("fifty-five")).collect();
    assert!(!with_edit.is_empty() && with_edit.iter().all(|c| first.iter().all(|f| f.hash != c.hash)));
}

#[test]
fn lines_reads_a_range_of_lines() {
    let document = "one\ntwo\r\nthree\n";
    assert_eq!(lines(document, 1, None), "one\ntwo\nthree");
    assert_eq!(lines(document, 0, Some(1)), "one", "0 is read as 1");
    assert_eq!(lines(document, 2, Some(1)), "two", "\\r\\n is a line end");
    assert_eq!(lines(document, 2, Some(10)), "two\nthree");
    assert_eq!(lines(document, 3, Some(0)), "");
    assert_eq!(lines(document, 4, None), "", "past the end");
    assert_eq!(lines(document, u32::MAX, Some(u32::MAX)), "");
    assert_eq!(lines("", 1, None), "");
    assert_eq!(lines("a\n\nb", 2, Some(2)), "\nb", "blank lines count");
}

fn any_document() -> impl Strategy<Value = String> {
    let piece = prop_oneof![
        Just("\n".to_owned()),
        Just("# Heading\n".to_owned()),
        "[a-z ]{0,30}",
        "[а-яА-Я ]{0,30}",
        "[ぁ-んァ-ン一-龥]{0,40}",
        "[😀-🙏 ]{0,20}",
        Just("\r\n".to_owned()),
    ];
    prop::collection::vec(piece, 0..40).prop_map(|pieces| pieces.concat())
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(300))]

    #[test]
    fn any_document_chunks_within_its_promises(document in any_document(), max_tokens in 0usize..60, overlap_tokens in 0usize..80) {
        let chunks = chunk(&document, max_tokens, overlap_tokens);
        check(&document, &chunks, max_tokens);
    }
}
