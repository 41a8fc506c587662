//! Where the next block ends: the decision behind [`super::BlockChunker`], made on the text
//! buffered so far.
//!
//! A decision is only taken once no later text could change it, which is what makes
//! streaming in any pieces agree with chunking the whole text at once: the first
//! preferred break in the window is taken as soon as it is certain; any other cut waits
//! until the buffer holds more than `max_chars`, and until every whitespace run that could
//! end the block has ended.

use super::scan::{Fence, LineEnd, Scan, is_space};

/// The chunk limits, made consistent: `1 <= min <= max`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) struct Limits {
    pub min: usize,
    pub max: usize,
    /// The coarsest break looked for first, as a break rank (`WHITESPACE`..=`PARAGRAPH`).
    pub preferred: usize,
}

/// Break strengths, finest first; a break also counts as every finer kind.
const WHITESPACE: usize = 0;
const SENTENCE: usize = 1;
const NEWLINE: usize = 2;
const PARAGRAPH: usize = 3;

/// The next thing to do with the buffer.
#[derive(Debug)]
pub(super) enum Step {
    /// Nothing is certain yet: wait for more text.
    Wait,
    /// The buffer starts with break whitespace: drop `to` bytes of it.
    Skip { to: usize, scan: Scan },
    /// Send `text[..end]` as a block.
    Emit(Cut),
    /// Only whitespace is left, and no more text is coming.
    Done,
}

#[derive(Debug, Clone, Copy)]
pub(super) struct Cut {
    /// The block is `text[..end]` (plus the fence lines the chunker adds).
    pub end: usize,
    /// The fence open at `end`, which the block closes and the next one reopens.
    pub close: Option<Fence>,
    /// Where the rest of the text starts, and the scan state there.
    pub next: usize,
    pub scan: Scan,
    /// Whether the rest starts with the break's whitespace, to be dropped.
    pub skip: bool,
}

/// A maximal run of whitespace bytes.
#[derive(Debug, Clone, Copy)]
struct Run {
    start: usize,
    /// Characters before the run.
    chars: usize,
    scan: Scan,
    class: Class,
    newlines: usize,
    /// The run follows `.`, `!` or `?`.
    sentence: bool,
}

impl Run {
    fn rank(&self) -> usize {
        match self.newlines {
            0 if self.sentence => SENTENCE,
            0 => WHITESPACE,
            1 => NEWLINE,
            _ => PARAGRAPH,
        }
    }

    /// Cutting here ends the block before the run and drops the run's break whitespace.
    fn cut(&self) -> Cut {
        Cut { end: self.start, close: None, next: self.start, scan: self.scan, skip: true }
    }
}

/// Whether a whitespace run is a place to cut.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Class {
    /// Outside code: a break.
    Break,
    /// Inside a fenced block, or inside a fence line: never a break (newlines inside a
    /// fenced block are candidates of their own).
    Inside,
    /// After a marker inside a fence: a break if the line turns out to close the fence.
    Closer,
    /// On a line that may open a fence: a break only if it does not.
    Opener,
}

/// One decision over `text`, the buffer from stream offset `base` on, starting in `scan`.
pub(super) struct Planner<'a> {
    text: &'a str,
    base: usize,
    limits: Limits,
    /// The state at the start of the block.
    start: Scan,
    /// Characters of the fence line the block starts with when it reopens a fence.
    prefix: usize,
    scan: Scan,
    /// Characters of `text[..i]` at the walk's position `i`.
    chars: usize,
    /// The end of the last non-whitespace byte, and the characters up to it.
    trimmed: (usize, usize),
    run: Option<Run>,
    /// Whether `finish` has run.
    finished: bool,
    /// Characters before the current line, and the break that ended the line before it.
    line_chars: usize,
    line_break: Option<Run>,
    /// While a carried fence opened in this block is open: the break before its opening
    /// line, and the characters before that line.
    before_fence: Option<(Run, usize)>,
    /// The first break of the preferred kind in the window.
    eager: Option<Run>,
    /// The latest break of each rank in the window.
    best: [Option<Run>; 4],
    /// The latest newline inside a carried fence in the window.
    fence_newline: Option<Cut>,
    /// The latest break that has ended, in the window or not, and where it ended.
    last_break: Option<(Run, usize)>,
}

impl<'a> Planner<'a> {
    pub fn new(text: &'a str, base: usize, scan: Scan, limits: Limits) -> Self {
        Self {
            text,
            base,
            limits,
            start: scan,
            prefix: scan.carried().map_or(0, |fence| fence.reopen_chars),
            scan,
            chars: 0,
            trimmed: (0, 0),
            run: None,
            finished: false,
            line_chars: 0,
            line_break: None,
            before_fence: None,
            eager: None,
            best: [None; 4],
            fence_newline: None,
            last_break: None,
        }
    }

    /// Drops the break whitespace at the start of the text: up to and including its last
    /// newline (the next line's indent stays), or all of it if it has no newline and does
    /// not begin a line. `last`: no more text will come.
    pub fn skip_break(mut self, last: bool) -> Step {
        let at_line_start = self.scan.at_line_start();
        let mut keep = None;
        for (i, byte) in self.text.bytes().enumerate() {
            if !is_space(byte) {
                return match keep {
                    Some((to, scan)) => Step::Skip { to, scan },
                    None if at_line_start => Step::Skip { to: 0, scan: self.start },
                    None => Step::Skip { to: i, scan: self.scan },
                };
            }
            if byte == b'\n' {
                self.scan.end_line(self.base + i, self.text, self.base, self.limits.max);
                keep = Some((i + 1, self.scan));
            } else {
                self.scan.byte(byte);
            }
        }
        if last { Step::Skip { to: self.text.len(), scan: self.scan } } else { Step::Wait }
    }

    /// Decides where the block starting the text ends. `last`: no more text will come.
    pub fn plan(mut self, last: bool) -> Step {
        let bytes = self.text.as_bytes();
        if bytes.is_empty() {
            return if last { Step::Done } else { Step::Wait };
        }
        // Fewer bytes than the window needs characters: nothing can be decided yet.
        if !last && self.prefix + bytes.len() < self.limits.min {
            return Step::Wait;
        }
        let mut over = None;
        for (i, &byte) in bytes.iter().enumerate() {
            if is_space(byte) {
                self.feed_space(i, byte);
            } else {
                self.end_run(i, byte);
                if let Some(run) = self.eager {
                    return Step::Emit(run.cut());
                }
                if byte & 0xC0 != 0x80 && self.prefix + self.chars >= self.limits.max {
                    over = Some(i);
                    break;
                }
                self.feed_text(i, byte);
            }
            if let Some(run) = self.eager {
                return Step::Emit(run.cut());
            }
        }
        if let Some(over) = over {
            return self.fallback(over, last);
        }
        if !last {
            return Step::Wait;
        }
        self.finish();
        if let Some(run) = self.eager {
            return Step::Emit(run.cut());
        }
        let (end, chars) = self.trimmed;
        if end == 0 {
            return Step::Done;
        }
        let close = self.scan.carried();
        if self.prefix + chars + close.map_or(0, |fence| fence.close_chars()) <= self.limits.max {
            let next = bytes.len();
            return Step::Emit(Cut { end, close, next, scan: Scan::new(self.base + next), skip: false });
        }
        self.fallback(bytes.len(), last)
    }

    /// The block must be cut at or before `max_chars`, and the window holds no break of the
    /// preferred kind; the walk has reached `walked`.
    fn fallback(mut self, walked: usize, last: bool) -> Step {
        for rank in (WHITESPACE..self.limits.preferred).rev() {
            if let Some(run) = self.best[rank..].iter().flatten().max_by_key(|run| run.start) {
                return Step::Emit(run.cut());
            }
        }
        // A break with nothing before it (the block starts with it) is no place to cut.
        if let Some((run, chars)) = self.before_fence.filter(|(run, _)| run.chars > 0) {
            // The window is inside a code block that opened in this block: cut before the
            // block if it fits in one of its own, so it is not split at all.
            match self.fence_fits(walked, chars, last) {
                None => return Step::Wait,
                Some(true) => return Step::Emit(run.cut()),
                Some(false) => {}
            }
        }
        if let Some(cut) = self.fence_newline {
            return Step::Emit(cut);
        }
        let hard = hard_cut(self.text, self.base, self.start, self.limits.max, self.prefix);
        // A hard cut inside a break that starts before the window (or just after it) would
        // leave whitespace at the cut: better a short block ending at that break.
        match self.last_break {
            Some((run, end)) if run.chars > 0 && (run.start + 1..=end).contains(&hard.end) => Step::Emit(run.cut()),
            _ => Step::Emit(hard),
        }
    }

    /// Whether the fence open at `walked`, whose opening line starts after `start_chars`
    /// characters, fits in a block of its own; `None` while that is not known yet.
    fn fence_fits(&mut self, walked: usize, start_chars: usize, last: bool) -> Option<bool> {
        let fits = |planner: &Self, extra: usize| {
            (planner.trimmed.1 + extra).saturating_sub(start_chars) <= planner.limits.max
        };
        let bytes = self.text.as_bytes();
        for (i, &byte) in bytes.iter().enumerate().skip(walked) {
            if is_space(byte) {
                self.feed_space(i, byte);
            } else {
                self.end_run(i, byte);
                self.feed_text(i, byte);
            }
            if self.before_fence.is_none() || !fits(self, 0) {
                return Some(self.before_fence.is_none() && fits(self, 0));
            }
        }
        if !last {
            return None;
        }
        self.finish();
        let close = if self.before_fence.is_some() { self.scan.carried().map_or(0, |f| f.close_chars()) } else { 0 };
        Some(fits(self, close))
    }

    fn feed_text(&mut self, i: usize, byte: u8) {
        self.scan.byte(byte);
        if byte & 0xC0 != 0x80 {
            self.chars += 1;
        }
        self.trimmed = (i + 1, self.chars);
    }

    fn feed_space(&mut self, i: usize, byte: u8) {
        if self.run.is_none() {
            self.start_run(i);
        }
        if byte == b'\n' {
            self.newline(i);
        } else {
            self.scan.byte(byte);
        }
        self.chars += 1;
    }

    fn start_run(&mut self, i: usize) {
        let class = match (self.scan.fence, self.scan.carried()) {
            (_, Some(_)) if self.scan.on_fence_marker() => Class::Closer,
            (_, Some(_)) => Class::Inside,
            (None, None) if self.scan.on_fence_marker() => Class::Opener,
            _ => Class::Break,
        };
        let sentence = i > 0 && matches!(self.text.as_bytes()[i - 1], b'.' | b'!' | b'?');
        self.run = Some(Run { start: i, chars: self.chars, scan: self.scan, class, newlines: 0, sentence });
    }

    fn newline(&mut self, i: usize) {
        let inside = self.scan.carried();
        let ended = self.scan.end_line(self.base + i, self.text, self.base, self.limits.max);
        if let Some(fence) = inside
            && ended != LineEnd::Closed
            && self.chars > 0
            && self.in_window(self.chars + fence.close_chars())
        {
            self.fence_newline = Some(Cut { end: i, close: Some(fence), next: i + 1, scan: self.scan, skip: false });
        }
        self.line_ended(ended);
        self.line_chars = self.chars + 1;
        let Some(mut run) = self.run else { return };
        run.newlines += 1;
        run.class = self.resolve(run.class, ended);
        self.run = Some(run);
        self.line_break = (run.class == Class::Break).then_some(run);
        if run.class == Class::Break {
            self.consider(run);
        }
    }

    /// Tracks the break before a carried fence opened in this block while it is open.
    fn line_ended(&mut self, ended: LineEnd) {
        match ended {
            LineEnd::Opened if self.scan.carried().is_some() => {
                self.before_fence = self.line_break.map(|run| (run, self.line_chars));
            }
            LineEnd::Closed => self.before_fence = None,
            _ => {}
        }
    }

    /// A pending run's class, once its line has ended.
    fn resolve(&self, class: Class, ended: LineEnd) -> Class {
        match (class, ended) {
            (Class::Closer, LineEnd::Closed) => Class::Break,
            (Class::Closer, _) => Class::Inside,
            (Class::Opener, LineEnd::Opened) if self.scan.carried().is_some() => Class::Inside,
            (Class::Opener, _) => Class::Break,
            (class, _) => class,
        }
    }

    /// The run before `next`, the non-whitespace byte at `i`, has ended.
    fn end_run(&mut self, i: usize, next: u8) {
        let Some(run) = self.run.take() else { return };
        // A run without a newline leaves the next block starting mid-line; that must not
        // read as a fence there. Runs with newlines were weighed at each newline.
        if run.class == Class::Break && (run.newlines > 0 || !matches!(next, b'`' | b'~')) {
            self.last_break = Some((run, i));
            if run.newlines == 0 {
                self.consider(run);
            }
        }
    }

    /// The end of the text, when no more will come: the last line and run end here.
    fn finish(&mut self) {
        if self.finished {
            return;
        }
        self.finished = true;
        let ended = self.scan.end_line(self.base + self.text.len(), self.text, self.base, self.limits.max);
        self.line_ended(ended);
        if let Some(mut run) = self.run.take() {
            if run.newlines == 0 {
                run.class = self.resolve(run.class, ended);
                if run.class == Class::Break {
                    self.consider(run);
                }
            }
            if run.class == Class::Break {
                self.last_break = Some((run, self.text.len()));
            }
        }
    }

    fn in_window(&self, chars: usize) -> bool {
        (self.limits.min..=self.limits.max).contains(&(self.prefix + chars))
    }

    fn consider(&mut self, run: Run) {
        if run.chars == 0 || !self.in_window(run.chars) {
            return;
        }
        let rank = run.rank();
        if rank >= self.limits.preferred && self.eager.is_none() {
            self.eager = Some(run);
        }
        self.best[rank] = Some(run);
    }
}

impl Planner<'_> {
    /// The longest block that fits, ignoring breaks: what is sent if a plan ever consumed
    /// nothing, so a planning defect costs a clumsy cut instead of a loop that never ends.
    pub fn hard_cut(&self) -> Cut {
        hard_cut(self.text, self.base, self.start, self.limits.max, self.prefix)
    }
}

/// The longest block that fits when no break does: as many characters as `max_chars`
/// allows, not ending inside a fence line and not leaving the rest to start mid-line with
/// what would read as a fence; only if no such point exists, the plain longest cut.
fn hard_cut(text: &str, base: usize, mut scan: Scan, max: usize, prefix: usize) -> Cut {
    let bytes = text.as_bytes();
    let (mut chars, mut clean, mut plain) = (0, None, None);
    for (i, &byte) in bytes.iter().enumerate() {
        if byte & 0xC0 != 0x80 && i > 0 {
            if prefix + chars > max {
                break;
            }
            let close = scan.carried();
            if prefix + chars + close.map_or(0, |fence| fence.close_chars()) <= max {
                let cut = Cut { end: i, close, next: i, scan, skip: false };
                plain = Some(cut);
                let mid_line = !scan.at_line_start();
                if !(scan.in_fence_line() || mid_line && looks_like_fence(&bytes[i..])) {
                    clean = Some(cut);
                }
            }
        }
        if byte == b'\n' {
            scan.end_line(base + i, text, base, max);
        } else {
            scan.byte(byte);
        }
        if byte & 0xC0 != 0x80 {
            chars += 1;
        }
    }
    clean.or_else(|| plain.map(|cut| Cut { scan: forget_line(cut.scan), ..cut })).unwrap_or_else(|| {
        // Unreachable with consistent limits: the first character always fits.
        let end = text.char_indices().nth(1).map_or(text.len(), |(i, _)| i);
        Cut { end, close: None, next: end, scan: Scan::new(base + end), skip: false }
    })
}

fn forget_line(mut scan: Scan) -> Scan {
    scan.forget_line();
    scan
}

/// Whether a line starting with `rest` would be a fence line: up to three spaces, then a
/// fence character. Reads no further than the first non-space byte, which for a hard cut
/// is never past the byte that made the cut necessary, so streaming sees the same bytes.
fn looks_like_fence(rest: &[u8]) -> bool {
    let indent = rest.iter().take(4).take_while(|&&byte| byte == b' ').count();
    indent < 4 && matches!(rest.get(indent), Some(b'`' | b'~'))
}
