//! What every run of the chunker must satisfy, as checks: the unit and property tests
//! (`tests`) and the fuzz target (`fuzz/fuzz_targets/chunker.rs`) assert the same things.
//! Compiled for tests and with the `fuzzing` feature only.

use super::{Block, scan};

/// Whether `text` is only the whitespace the chunker drops at a break.
pub fn is_break_space(text: &str) -> bool {
    text.bytes().all(scan::is_space)
}

/// Rebuilds the input from the blocks: each block's own text (added fence lines removed)
/// is where its `source` says, and only break whitespace lies between them.
pub fn rebuild(blocks: &[Block], input: &str) -> Result<String, String> {
    let mut rebuilt = String::new();
    let mut at = 0;
    for block in blocks {
        let gap = input.get(at..block.source.start).ok_or(format!("{:?} goes back before {at}", block.source))?;
        if !is_break_space(gap) {
            return Err(format!("dropped {gap:?}, which is not break whitespace"));
        }
        if input.get(block.source.clone()) != Some(block.original()) {
            return Err(format!("block {:?} is not the input at {:?}", block.text, block.source));
        }
        rebuilt.push_str(gap);
        rebuilt.push_str(block.original());
        at = block.source.end;
    }
    let tail = input.get(at..).ok_or(format!("the last block ends inside a character, at {at}"))?;
    if !is_break_space(tail) {
        return Err(format!("the end {tail:?} was never sent"));
    }
    rebuilt.push_str(tail);
    Ok(rebuilt)
}

/// Whether every fenced code block in `text` is closed, by CommonMark's fence rules;
/// written independently of the scanner.
pub fn fences_balanced(text: &str) -> bool {
    let mut open: Option<(char, usize)> = None;
    for line in text.split('\n') {
        let indent = line.len() - line.trim_start_matches(' ').len();
        let rest = &line[indent..];
        let Some(ch) = rest.chars().next().filter(|&ch| indent <= 3 && (ch == '`' || ch == '~')) else { continue };
        let len = rest.chars().take_while(|&c| c == ch).count();
        let after = &rest[len..];
        match open {
            None if len >= 3 && !(ch == '`' && after.contains('`')) => open = Some((ch, len)),
            Some((open_ch, open_len)) if ch == open_ch && len >= open_len && is_break_space(after) => open = None,
            _ => {}
        }
    }
    open.is_none()
}
