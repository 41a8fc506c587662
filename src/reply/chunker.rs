//! Block streaming (SPEC §7): the chunker that cuts a reply into chat messages of
//! `min_chars..=max_chars` characters while the model is still writing it.
//!
//! The growing assistant text is [pushed](BlockChunker::push) in whatever pieces the model
//! streams; a [`Block`] comes out as soon as its end is certain. A block ends at the first
//! break of the preferred kind once it has `min_chars`; if none comes before `max_chars`,
//! at the best break in the window — paragraph, then newline, then sentence end, then
//! whitespace — and failing all of them, at `max_chars`. Breaks are ASCII whitespace only
//! (a no-break space is not one; text without spaces, such as Chinese, is cut hard).
//!
//! A fenced code block (` ``` ` or `~~~`) is never split if it can be kept whole, even if
//! that leaves the block before it shorter than `min_chars`. When it cannot (it is longer
//! than a block), the cut goes at a line end inside it: the block closes the fence and the
//! next one reopens it with the same info string, so every message renders as code. The
//! break whitespace at a cut is dropped; nothing else is changed, and each block says what
//! it added, so the text can always be rebuilt.
//!
//! ```
//! use ferry::reply::chunker::{BlockChunker, BreakMode, ChunkLimits};
//!
//! let mut chunker = BlockChunker::new(ChunkLimits::default(), BreakMode::TextEnd);
//! let mut sent = Vec::new();
//! for delta in ["First paragraph. ".repeat(50).as_str(), "\n\n", "Second ", "paragraph."] {
//!     sent.extend(chunker.push(delta)); // blocks whose end is certain
//! }
//! sent.extend(chunker.text_end()); // the rest, at the end of the text
//! assert_eq!(sent.len(), 2);
//! assert_eq!(sent[1].text, "Second paragraph.");
//! ```
//!
//! Whether to flush at every text end or only when the assistant message ends is the
//! caller's [`BreakMode`]; the chunker offers [`text_end`](BlockChunker::text_end) and
//! [`message_end`](BlockChunker::message_end) and does the right thing for its mode.

#[cfg(any(test, feature = "fuzzing"))]
#[doc(hidden)]
pub mod invariants;
mod plan;
mod scan;

use std::ops::Range;

use crate::config::{BlockStreamingChunk, BreakPreference};

use plan::{Cut, Limits, Planner, Step};
use scan::Scan;

/// When buffered text is flushed as a block even if it is short (SPEC §7
/// `block_streaming_break`): `TextEnd` at every end of a text run (before a tool call,
/// say), `MessageEnd` only once the whole assistant message is done. The same type as the
/// config key, so a configured value is used as is.
pub type BreakMode = crate::config::BlockStreamingBreak;

/// How long blocks are and where they prefer to end (SPEC §7, `block_streaming_chunk`).
///
/// Lengths are in Unicode characters. Inconsistent values are made usable rather than
/// rejected (config validation reports them to the operator): `max_chars` is at least 1
/// and `min_chars` is between 1 and `max_chars`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ChunkLimits {
    /// A block is not cut before this many characters, unless the text ends or a code
    /// block is kept whole.
    pub min_chars: usize,
    /// No block is longer than this, counting the fence lines the chunker adds.
    pub max_chars: usize,
    /// The coarsest break looked for first; finer ones are the fallback.
    pub break_preference: BreakPreference,
}

impl Default for ChunkLimits {
    /// The spec's defaults: 800..1200 characters, paragraph breaks first.
    fn default() -> Self {
        Self::from(&BlockStreamingChunk::default())
    }
}

impl From<&BlockStreamingChunk> for ChunkLimits {
    fn from(config: &BlockStreamingChunk) -> Self {
        Self { min_chars: config.min_chars, max_chars: config.max_chars, break_preference: config.break_preference }
    }
}

impl ChunkLimits {
    fn normalized(&self) -> Limits {
        let max = self.max_chars.max(1);
        let preferred = match self.break_preference {
            BreakPreference::Paragraph => 3,
            BreakPreference::Newline => 2,
            BreakPreference::Sentence => 1,
        };
        Limits { min: self.min_chars.clamp(1, max), max, preferred }
    }
}

/// One message's worth of reply text.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Block {
    /// What to send: at most `max_chars` characters, with balanced code fences.
    pub text: String,
    /// Where the block's own text (`text` without the added fence lines) lies in the text
    /// pushed into the chunker: byte offsets counted from its creation. What lies between
    /// two blocks' sources is the break whitespace that was dropped.
    pub source: Range<usize>,
    /// Bytes at the start of `text` the chunker added: the fence line (and its newline)
    /// reopening a code block the previous block had to close.
    pub reopened: usize,
    /// Bytes at the end of `text` the chunker added: a newline and the fence line closing a
    /// code block that continues in the next block.
    pub closed: usize,
}

impl Block {
    /// The block's text as the model wrote it, without the fence lines the chunker added.
    pub fn original(&self) -> &str {
        &self.text[self.reopened..self.text.len() - self.closed]
    }
}

impl From<Block> for String {
    fn from(block: Block) -> Self {
        block.text
    }
}

/// Cuts streamed assistant text into [`Block`]s (see the module docs). Every pushed byte
/// ends up in exactly one block or in dropped break whitespace, so no text is ever sent
/// twice; pushing in any pieces gives the same blocks as [`chunk_text`] on the whole.
#[derive(Debug, Clone)]
pub struct BlockChunker {
    limits: Limits,
    mode: BreakMode,
    /// Text pushed and not yet sent; the live part is `buffer[start..]`.
    buffer: String,
    start: usize,
    /// Stream offset of `buffer[0]`.
    offset: usize,
    /// The fence and line state at `start`.
    scan: Scan,
    /// The live text starts with break whitespace still to drop (after a cut at a break,
    /// and at the start of a text).
    skip: bool,
    /// The opening line of the fence `scan` is inside, when the next block reopens it.
    reopen: String,
}

impl BlockChunker {
    /// A chunker for one run's assistant text.
    pub fn new(limits: ChunkLimits, mode: BreakMode) -> Self {
        Self {
            limits: limits.normalized(),
            mode,
            buffer: String::new(),
            start: 0,
            offset: 0,
            scan: Scan::new(0),
            skip: true,
            reopen: String::new(),
        }
    }

    /// The break mode this chunker was made for.
    pub fn mode(&self) -> BreakMode {
        self.mode
    }

    /// Whether text is buffered that has not been sent yet.
    pub fn has_pending(&self) -> bool {
        self.buffer[self.start..].bytes().any(|byte| !scan::is_space(byte))
    }

    /// Adds the next piece of assistant text; returns the blocks whose end is now certain.
    pub fn push(&mut self, delta: &str) -> Vec<Block> {
        self.buffer.push_str(delta);
        self.drain(false)
    }

    /// A run of text ended (SPEC §6.3 `text_end`): in [`BreakMode::TextEnd`] everything
    /// buffered is sent; in [`BreakMode::MessageEnd`] nothing happens yet.
    pub fn text_end(&mut self) -> Vec<Block> {
        match self.mode {
            BreakMode::TextEnd => self.flush(),
            BreakMode::MessageEnd => Vec::new(),
        }
    }

    /// The assistant message ended: everything buffered is sent, in either mode.
    pub fn message_end(&mut self) -> Vec<Block> {
        self.flush()
    }

    /// Sends everything buffered, even if shorter than `min_chars` (still at most
    /// `max_chars` per block, closing a code block left open), and starts afresh: text
    /// pushed afterwards is a new text.
    pub fn flush(&mut self) -> Vec<Block> {
        let blocks = self.drain(true);
        self.restart();
        blocks
    }

    /// Forgets buffered text without sending it: for a run that is retried after
    /// compaction (SPEC §6.9), so nothing is sent twice.
    pub fn reset(&mut self) {
        self.restart();
    }

    fn restart(&mut self) {
        self.offset += self.buffer.len();
        self.buffer.clear();
        self.start = 0;
        self.scan = Scan::new(self.offset);
        self.skip = true;
        self.reopen.clear();
    }

    fn drain(&mut self, last: bool) -> Vec<Block> {
        let mut blocks = Vec::new();
        loop {
            let base = self.offset + self.start;
            let planner = Planner::new(&self.buffer[self.start..], base, self.scan, self.limits);
            let step = if self.skip { planner.skip_break(last) } else { planner.plan(last) };
            match step {
                Step::Wait => break,
                Step::Done => {
                    self.start = self.buffer.len();
                    break;
                }
                Step::Skip { to, scan } => {
                    self.start += to;
                    self.scan = scan;
                    self.skip = false;
                }
                Step::Emit(cut) if cut.next > 0 => blocks.push(self.emit(cut)),
                Step::Emit(cut) => {
                    debug_assert!(false, "every block consumes text: {cut:?}");
                    tracing::error!(offset = base, "block chunker planned an empty block; cutting at the limit");
                    let planner = Planner::new(&self.buffer[self.start..], base, self.scan, self.limits);
                    blocks.push(self.emit(planner.hard_cut()));
                }
            }
        }
        // Keep the buffer small: drop what has been sent, once per call.
        if self.start > 0 {
            self.buffer.drain(..self.start);
            self.offset += self.start;
            self.start = 0;
        }
        blocks
    }

    fn emit(&mut self, cut: Cut) -> Block {
        let base = self.offset + self.start;
        let live = &self.buffer[self.start..];
        let content = &live[..cut.end];
        let mut text = String::with_capacity(content.len() + self.reopen.len() + 16);
        let reopened = match self.scan.carried() {
            Some(_) => {
                text.push_str(&self.reopen);
                text.push('\n');
                text.len()
            }
            None => 0,
        };
        text.push_str(content);
        let closed = match cut.close {
            Some(fence) => {
                let before = text.len();
                fence.push_close(&mut text);
                text.len() - before
            }
            None => 0,
        };
        // A fence opened in this block and still open: the next block reopens it.
        if let Some(fence) = cut.scan.carried()
            && fence.line.0 >= base
        {
            self.reopen.clear();
            self.reopen.push_str(&live[fence.line.0 - base..fence.line.1 - base]);
        }
        self.start += cut.next;
        self.scan = cut.scan;
        self.skip = cut.skip;
        Block { text, source: base..base + cut.end, reopened, closed }
    }
}

/// Cuts a whole text into block texts at once: the same blocks a [`BlockChunker`] sends
/// for it, pushed in any pieces and flushed at the end.
pub fn chunk_text(text: &str, limits: &ChunkLimits) -> Vec<String> {
    let mut chunker = BlockChunker::new(*limits, BreakMode::MessageEnd);
    let mut blocks = chunker.push(text);
    blocks.extend(chunker.flush());
    blocks.into_iter().map(String::from).collect()
}

#[cfg(test)]
mod tests;
