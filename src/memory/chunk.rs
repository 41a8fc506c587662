//! Cuts a memory document into overlapping chunks of whole lines, each with its line range,
//! for keyword search and embeddings: a search result points at lines `memory_get` can read
//! back, and a chunk's hash decides whether it needs embedding again.
//!
//! A chunk holds whole lines up to [`CHUNK_TOKENS`] (estimated, not a model's tokenizer) and
//! the next one repeats its last lines up to [`CHUNK_OVERLAP_TOKENS`], so a fact written across
//! a boundary is still found whole in one of them. A markdown heading starts a new chunk, with
//! no overlap, once the current one is half full: sections stay together. A line too long for
//! one chunk is cut into pieces that all carry its line number.

use sha2::{Digest, Sha256};

use super::terms::is_cjk;

/// About how many tokens a chunk holds: small enough for a precise match and any embedding
/// model's input, large enough to carry a few facts with their context (issue 40).
pub const CHUNK_TOKENS: usize = 400;

/// About how many tokens a chunk repeats from the end of the one before it (issue 40).
pub const CHUNK_OVERLAP_TOKENS: usize = 80;

/// A piece of a document: lines `start_line..=end_line` (1-based).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Chunk {
    pub start_line: u32,
    /// Inclusive; equal to `start_line` for a piece of a long line.
    pub end_line: u32,
    /// Exactly those lines joined with `'\n'` (or a piece of the one long line).
    pub text: String,
    /// Lowercase hex SHA-256 of `text`: embeddings are kept per hash, so unchanged text is
    /// never embedded twice.
    pub hash: String,
}

/// A cheap estimate of how many tokens `text` is to a model: about four characters a token
/// for alphabetic scripts, one token per CJK character (Han, kana, Hangul syllables), which
/// tokenizers rarely merge.
pub fn estimate_tokens(text: &str) -> usize {
    let (cjk, other) = count_chars(text);
    cjk + other.div_ceil(4)
}

/// `document` as chunks of whole lines of at most `max_tokens` each (a `max_tokens` of 0 is
/// taken as 1), the next starting with the previous one's last lines that fit in
/// `overlap_tokens`. Every line costs its newline too, so the estimate of a chunk's text never
/// exceeds `max_tokens` and blank lines cannot pile up into an endless chunk.
///
/// Guarantees: each chunk starts at a later line than the one before and holds a line it did
/// not (the overlap is never the whole chunk), except that the pieces of one long line follow
/// each other on that line, with no overlap; chunks that would hold only whitespace are left
/// out, so an empty or blank document has none.
pub fn chunk(document: &str, max_tokens: usize, overlap_tokens: usize) -> Vec<Chunk> {
    let max_tokens = max_tokens.max(1);
    let lines: Vec<&str> = document.lines().collect();
    let costs: Vec<usize> = lines.iter().map(|line| line_tokens(line)).collect();
    let mut chunks = Vec::new();
    let mut start = 0;
    while start < lines.len() {
        if costs[start] > max_tokens {
            for piece in split_line(lines[start], max_tokens) {
                push_chunk(&mut chunks, start, start, piece.to_owned());
            }
            start += 1;
            continue;
        }
        let mut end = start;
        let mut total = 0;
        while end < lines.len() && total + costs[end] <= max_tokens {
            if end > start && total >= max_tokens / 2 && is_heading(lines[end]) {
                break;
            }
            total += costs[end];
            end += 1;
        }
        push_chunk(&mut chunks, start, end - 1, lines[start..end].join("\n"));
        if end == lines.len() || costs[end] > max_tokens {
            start = end;
            continue;
        }
        // The next chunk repeats this one's last lines within the overlap, leaving room for
        // line `end`, so it always holds a line this one did not. A heading at `end` gets no
        // overlap, and the overlap reaches back at most to a heading: no heading inside it can
        // end the next chunk before line `end`.
        let mut next = end;
        if !is_heading(lines[end]) {
            let budget = overlap_tokens.min(max_tokens - costs[end]);
            let mut overlap = 0;
            while next - 1 > start && overlap + costs[next - 1] <= budget {
                overlap += costs[next - 1];
                next -= 1;
                if is_heading(lines[next]) {
                    break;
                }
            }
        }
        start = next;
    }
    chunks
}

/// Lines `from..from + count` of `document` (1-based, `from` 0 read as 1; all the rest when
/// `count` is `None`), joined with `'\n'`, as `memory_get` returns them; empty past the end.
pub fn lines(document: &str, from: u32, count: Option<u32>) -> String {
    let skip = from.max(1) as usize - 1;
    let take = count.map_or(usize::MAX, |count| count as usize);
    document.lines().skip(skip).take(take).collect::<Vec<_>>().join("\n")
}

/// How many characters of `text` are CJK and how many are not.
fn count_chars(text: &str) -> (usize, usize) {
    text.chars().fold((0, 0), |(cjk, other), c| if is_cjk(c) { (cjk + 1, other) } else { (cjk, other + 1) })
}

/// A line's cost in a chunk: its tokens with its newline, at least 1.
fn line_tokens(line: &str) -> usize {
    let (cjk, other) = count_chars(line);
    cjk + (other + 1).div_ceil(4)
}

/// A markdown ATX heading: up to six `#` after optional indentation, then a space or the end.
fn is_heading(line: &str) -> bool {
    let rest = line.trim_start().trim_start_matches('#');
    let hashes = line.trim_start().len() - rest.len();
    (1..=6).contains(&hashes) && (rest.is_empty() || rest.starts_with([' ', '\t']))
}

/// `line` cut on character boundaries into pieces of at most `max_tokens`, each cut made after
/// the last whitespace in the second half of a piece when there is one, so words are rarely
/// split (a cut word would be found by neither piece).
fn split_line(line: &str, max_tokens: usize) -> Vec<&str> {
    let mut pieces = Vec::new();
    let mut rest = line;
    while !rest.is_empty() {
        let mut cut = rest.len();
        let mut last_space = None;
        let (mut cjk, mut other) = (0usize, 0usize);
        for (at, c) in rest.char_indices() {
            if is_cjk(c) {
                cjk += 1;
            } else {
                other += 1;
            }
            if at > 0 && cjk + other.div_ceil(4) > max_tokens {
                cut = at;
                break;
            }
            if c.is_whitespace() {
                last_space = Some(at + c.len_utf8());
            }
        }
        if cut < rest.len()
            && let Some(space) = last_space.filter(|&space| space >= cut / 2 && space < cut)
        {
            cut = space;
        }
        let (piece, tail) = rest.split_at(cut);
        pieces.push(piece);
        rest = tail;
    }
    pieces
}

/// Adds the chunk of lines `first..=last` (0-based) holding `text`, unless it is only
/// whitespace.
fn push_chunk(chunks: &mut Vec<Chunk>, first: usize, last: usize, text: String) {
    if text.trim().is_empty() {
        return;
    }
    let hash = Sha256::digest(text.as_bytes()).iter().map(|byte| format!("{byte:02x}")).collect();
    chunks.push(Chunk { start_line: line_number(first), end_line: line_number(last), text, hash });
}

/// The 1-based number of the line at `index`, saturating far beyond any document's length.
fn line_number(index: usize) -> u32 {
    u32::try_from(index + 1).unwrap_or(u32::MAX)
}

#[cfg(test)]
#[path = "chunk_tests.rs"]
mod tests;
