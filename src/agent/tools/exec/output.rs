//! A command's output as kept in memory: its head and its tail, whatever it prints.

use std::collections::VecDeque;

/// The first `head` and the last `tail` bytes of everything written, and how much that was.
#[derive(Debug)]
pub struct Output {
    head: Vec<u8>,
    tail: VecDeque<u8>,
    head_max: usize,
    tail_max: usize,
    total: u64,
}

impl Output {
    /// Keeps up to `max` bytes in all, half at each end.
    pub fn new(max: usize) -> Self {
        let head_max = max / 2;
        Self { head: Vec::new(), tail: VecDeque::new(), head_max, tail_max: max - head_max, total: 0 }
    }

    pub fn push(&mut self, bytes: &[u8]) {
        self.total += bytes.len() as u64;
        let room = self.head_max.saturating_sub(self.head.len());
        let (to_head, rest) = bytes.split_at(room.min(bytes.len()));
        self.head.extend_from_slice(to_head);
        self.tail.extend(rest);
        let excess = self.tail.len().saturating_sub(self.tail_max);
        self.tail.drain(..excess);
    }

    /// Everything kept, as text, with a line where bytes were dropped.
    pub fn render(&self) -> String {
        let head = String::from_utf8_lossy(&self.head);
        let (front, back) = self.tail.as_slices();
        let tail = String::from_utf8_lossy(&[front, back].concat()).into_owned();
        let kept = (self.head.len() + self.tail.len()) as u64;
        if kept == self.total {
            return format!("{head}{tail}");
        }
        let cut = self.total - kept;
        // The tail starts mid-line (and maybe mid-character): begin it at the next line.
        let tail = tail.split_once('\n').map_or(tail.as_str(), |(_, rest)| rest);
        format!("{}\n[… {cut} of {} bytes of output cut here …]\n{tail}", head.trim_end_matches('\n'), self.total)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn short_output_is_kept_whole() {
        let mut output = Output::new(100);
        output.push(b"hello\n");
        output.push(b"world\n");
        assert_eq!(output.render(), "hello\nworld\n");
    }

    #[test]
    fn long_output_keeps_head_and_tail_and_says_how_much_went() {
        let mut output = Output::new(40);
        for n in 0..1000 {
            output.push(format!("line {n}\n").as_bytes());
        }
        let shown = output.render();
        assert!(shown.starts_with("line 0\nline 1\n"), "{shown}");
        assert!(shown.ends_with("line 999\n"), "{shown}");
        assert!(shown.contains("bytes of output cut here"), "{shown}");
        assert!(shown.len() < 200);
    }
}
