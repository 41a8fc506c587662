//! Block streaming's chunker (`src/reply/chunker.rs`): the model's text cut into messages
//! while it streams.
//!
//! The first bytes of the input choose the limits (`max_chars` 40 to 1063, `min_chars` a
//! fraction of it, the break preference) and the sizes of the pieces the text is pushed
//! in; the rest, as UTF-8 (lossy), is the text. Asserts, as the unit and property tests do
//! (`reply::chunker::invariants`): the blocks rebuild the input with only break whitespace
//! dropped; no block is longer than `max_chars` characters, counting the fence lines it
//! adds; every block's code
//! fences are balanced, unless the text has a fence whose opening line is too long to
//! reopen in a block or a run of fence characters half a block long (what the chunker
//! documents it cannot keep balanced);
//! streaming in any pieces gives the same blocks as the whole text.
#![no_main]

use ferry::config::BreakPreference;
use ferry::reply::chunker::invariants::{fences_balanced, rebuild};
use ferry::reply::chunker::{Block, BlockChunker, BreakMode, ChunkLimits, chunk_text};
use libfuzzer_sys::fuzz_target;

const PREFERENCES: [BreakPreference; 3] =
    [BreakPreference::Paragraph, BreakPreference::Newline, BreakPreference::Sentence];

/// `text` cut at character boundaries into pieces of the sizes `sizes` cycles through.
fn pieces<'a>(text: &'a str, sizes: &[usize]) -> Vec<&'a str> {
    let mut pieces = Vec::new();
    let mut rest = text;
    for &size in sizes.iter().cycle() {
        if rest.is_empty() {
            break;
        }
        let at = rest.char_indices().nth(size.max(1)).map_or(rest.len(), |(i, _)| i);
        pieces.push(&rest[..at]);
        rest = &rest[at..];
    }
    pieces
}

/// Whether `text` has what the chunker documents it cannot keep balanced, counted
/// generously: a line that could open a fence whose opening and closing lines would take more
/// than half of `max_chars` (such a fence is cut like plain text, without closing and
/// reopening it: `Fence::carried` in `src/reply/chunker/scan.rs`), or a run of backticks and
/// tildes, mixed or not, as long as half a block (a hard cut inside it cannot avoid leaving the rest to
/// start with a fence marker: `hard_cut` in `plan.rs` then takes the plain longest cut).
fn has_uncarried_fence(text: &str, max_chars: usize) -> bool {
    // Backticks and tildes together: a hard cut finds no clean point in a window of fence
    // characters of either kind (`looks_like_fence` in `plan.rs` takes both).
    let longest_run = text.split(|c| c != '`' && c != '~').map(str::len).max().unwrap_or(0);
    if longest_run >= max_chars / 2 {
        return true;
    }
    text.split('\n').any(|line| {
        let marker = line.trim_start_matches(' ');
        let indent = line.len() - marker.len();
        let len =
            marker.chars().take_while(|&c| c == '`').count().max(marker.chars().take_while(|&c| c == '~').count());
        // The whole line, trailing whitespace included: a cut inside it is refused as well.
        indent <= 3 && len >= 3 && line.chars().count() + 1 + (1 + indent + len) > max_chars / 2
    })
}

fn stream(deltas: &[&str], limits: ChunkLimits) -> Vec<Block> {
    let mut chunker = BlockChunker::new(limits, BreakMode::TextEnd);
    let mut blocks: Vec<Block> = deltas.iter().flat_map(|delta| chunker.push(delta)).collect();
    blocks.extend(chunker.text_end());
    blocks
}

fuzz_target!(|data: &[u8]| {
    let [low, high, ratio, preference, size_a, size_b, text @ ..] = data else { return };
    let max_chars = 40 + usize::from(u16::from_le_bytes([*low, *high]) % 1024);
    let min_chars = max_chars * usize::from(*ratio) / 255;
    let limits = ChunkLimits {
        min_chars,
        max_chars,
        break_preference: PREFERENCES[usize::from(*preference) % PREFERENCES.len()],
    };
    let text = String::from_utf8_lossy(text);

    let blocks = stream(&[&text], limits);
    if let Err(problem) = rebuild(&blocks, &text) {
        panic!("{problem}");
    }
    let fences_carried = !has_uncarried_fence(&text, max_chars);
    for block in &blocks {
        assert!(!block.original().is_empty(), "an empty block");
        assert!(!fences_carried || fences_balanced(&block.text), "unbalanced fences: {:?}", block.text);
        let chars = block.text.chars().count();
        assert!(chars <= max_chars, "{chars} > {max_chars} characters: {:?}", block.text);
    }
    let sizes = [usize::from(*size_a % 64), usize::from(*size_b % 64)];
    let streamed: Vec<String> = stream(&pieces(&text, &sizes), limits).into_iter().map(String::from).collect();
    assert_eq!(streamed, chunk_text(&text, &limits), "streaming in pieces changed the blocks");
});
