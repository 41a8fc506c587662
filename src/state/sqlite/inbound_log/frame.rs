//! The inbound log's records on disk.
//!
//! A frame is `len: u32 LE`, `crc32(body): u32 LE`, then `body` (`len` bytes). The checksum
//! tells a frame torn by a crash (or a damaged file) from a whole one: replay stops at the
//! first frame that does not check out. Bodies are binary so that replay and compaction read
//! a record's identity without parsing the message inside it.
//!
//! Body layouts (integers little-endian, strings as `u32` length + UTF-8 bytes):
//! - `Sequence`: kind 0, `next: i64` — written first in a compacted file, so ids never go back.
//! - `Accepted`: kind 1, `seq: i64`, `seen_at: i64` (unix ms), the key's five strings, then
//!   `session_key`, `prompt`, `message` (JSON), `enqueued_at: i64`.
//! - `Seen`: kind 2, `seen_at: i64`, the key's five strings.
//! - `Answered`: kind 3, `count: u32`, `count × seq: i64`.
//! - `Delivery`: kind 4, `count: u32`, `count × seq: i64` (the messages a run answers), then
//!   `body` (a string the delivery ledger writes and reads; this layer does not interpret it).

pub use crate::state::inbound::{Accepted, MessageKey};

/// Bytes before a frame's body: its length and checksum.
pub const HEADER_LEN: usize = 8;

/// A body longer than this is taken for damage, not a record: platform messages are far
/// smaller (the gateway caps a client frame at 25 MiB).
pub const MAX_BODY_LEN: usize = 64 << 20;

const SEQUENCE: u8 = 0;
const ACCEPTED: u8 = 1;
const SEEN: u8 = 2;
const ANSWERED: u8 = 3;
const DELIVERY: u8 = 4;

/// One decoded record, borrowing from the bytes it was read from.
#[derive(Debug, PartialEq, Eq)]
pub enum Record<'a> {
    Sequence {
        next: i64,
    },
    Accepted {
        seq: i64,
        seen_at: i64,
        key: MessageKey<'a>,
        entry: AcceptedRef<'a>,
    },
    Seen {
        seen_at: i64,
        key: MessageKey<'a>,
    },
    Answered {
        seqs: Vec<i64>,
    },
    /// What became of a run's reply so far (see `crate::delivery`).
    Delivery {
        seqs: Vec<i64>,
        body: &'a str,
    },
}

/// [`Accepted`], borrowed.
#[derive(Debug, PartialEq, Eq)]
pub struct AcceptedRef<'a> {
    pub session_key: &'a str,
    pub prompt: &'a str,
    pub message: &'a str,
    pub enqueued_at: i64,
}

impl AcceptedRef<'_> {
    pub fn to_owned(&self) -> Accepted {
        Accepted {
            session_key: self.session_key.to_owned(),
            prompt: self.prompt.to_owned(),
            message: self.message.to_owned(),
            enqueued_at: self.enqueued_at,
        }
    }
}

/// Appends a `Sequence` frame.
pub fn sequence(out: &mut Vec<u8>, next: i64) {
    frame(out, |body| {
        body.push(SEQUENCE);
        body.extend_from_slice(&next.to_le_bytes());
    });
}

/// Appends an `Accepted` frame.
pub fn accepted(out: &mut Vec<u8>, seq: i64, seen_at: i64, key: &MessageKey<'_>, entry: &Accepted) {
    frame(out, |body| {
        body.push(ACCEPTED);
        body.extend_from_slice(&seq.to_le_bytes());
        body.extend_from_slice(&seen_at.to_le_bytes());
        put_key(body, key);
        for text in [&entry.session_key, &entry.prompt, &entry.message] {
            put_str(body, text);
        }
        body.extend_from_slice(&entry.enqueued_at.to_le_bytes());
    });
}

/// Where an `Accepted` frame keeps its seq: after the header and the kind byte.
const SEQ_OFFSET: usize = HEADER_LEN + 1;

/// Gives the `Accepted` frame in `frame` (encoded with any seq) its seq, re-sealing its
/// checksum: frames are encoded by the tasks that accept messages, side by side, and
/// numbered by the one that writes them, in the order written.
pub fn set_seq(frame: &mut [u8], seq: i64) {
    frame[SEQ_OFFSET..SEQ_OFFSET + 8].copy_from_slice(&seq.to_le_bytes());
    let crc = crc32fast::hash(&frame[HEADER_LEN..]);
    frame[4..HEADER_LEN].copy_from_slice(&crc.to_le_bytes());
}

/// Appends a `Seen` frame.
pub fn seen(out: &mut Vec<u8>, seen_at: i64, key: &MessageKey<'_>) {
    frame(out, |body| {
        body.push(SEEN);
        body.extend_from_slice(&seen_at.to_le_bytes());
        put_key(body, key);
    });
}

/// Appends an `Answered` frame.
pub fn answered(out: &mut Vec<u8>, seqs: &[i64]) {
    frame(out, |body| {
        body.push(ANSWERED);
        put_seqs(body, seqs);
    });
}

/// Appends a `Delivery` frame.
pub fn delivery(out: &mut Vec<u8>, seqs: &[i64], body: &str) {
    frame(out, |body_out| {
        body_out.push(DELIVERY);
        put_seqs(body_out, seqs);
        put_str(body_out, body);
    });
}

fn put_seqs(body: &mut Vec<u8>, seqs: &[i64]) {
    body.extend_from_slice(&(seqs.len() as u32).to_le_bytes());
    for seq in seqs {
        body.extend_from_slice(&seq.to_le_bytes());
    }
}

/// Writes the header around what `fill` appends, in place (no intermediate buffer).
fn frame(out: &mut Vec<u8>, fill: impl FnOnce(&mut Vec<u8>)) {
    let start = out.len();
    out.extend_from_slice(&[0; HEADER_LEN]);
    fill(out);
    let body = &out[start + HEADER_LEN..];
    let len = body.len() as u32;
    let crc = crc32fast::hash(body);
    out[start..start + 4].copy_from_slice(&len.to_le_bytes());
    out[start + 4..start + HEADER_LEN].copy_from_slice(&crc.to_le_bytes());
}

fn put_key(body: &mut Vec<u8>, key: &MessageKey<'_>) {
    for part in [key.channel, key.account_id, key.chat_id, key.thread_id, key.message_id] {
        put_str(body, part);
    }
}

fn put_str(body: &mut Vec<u8>, text: &str) {
    body.extend_from_slice(&(text.len() as u32).to_le_bytes());
    body.extend_from_slice(text.as_bytes());
}

/// Why the bytes at some offset are not a whole frame.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum FrameError {
    /// The file ends inside the frame: the last write was cut short.
    #[error("the log ends inside a record")]
    Truncated,
    #[error("a record fails its checksum")]
    Checksum,
    #[error("a record is malformed")]
    Malformed,
}

/// Reads the frame at the start of `bytes`: the record and the frame's whole length.
pub fn read(bytes: &[u8]) -> Result<(Record<'_>, usize), FrameError> {
    let header = bytes.get(..HEADER_LEN).ok_or(FrameError::Truncated)?;
    let len = u32::from_le_bytes([header[0], header[1], header[2], header[3]]) as usize;
    let crc = u32::from_le_bytes([header[4], header[5], header[6], header[7]]);
    if len > MAX_BODY_LEN {
        return Err(FrameError::Malformed);
    }
    let body = bytes.get(HEADER_LEN..HEADER_LEN + len).ok_or(FrameError::Truncated)?;
    if crc32fast::hash(body) != crc {
        return Err(FrameError::Checksum);
    }
    let record = decode(body).ok_or(FrameError::Malformed)?;
    Ok((record, HEADER_LEN + len))
}

fn decode(body: &[u8]) -> Option<Record<'_>> {
    let (&kind, rest) = body.split_first()?;
    let mut reader = Reader(rest);
    let record = match kind {
        SEQUENCE => Record::Sequence { next: reader.i64()? },
        ACCEPTED => {
            let seq = reader.i64()?;
            let seen_at = reader.i64()?;
            let key = reader.key()?;
            let entry = AcceptedRef {
                session_key: reader.str()?,
                prompt: reader.str()?,
                message: reader.str()?,
                enqueued_at: reader.i64()?,
            };
            Record::Accepted { seq, seen_at, key, entry }
        }
        SEEN => Record::Seen { seen_at: reader.i64()?, key: reader.key()? },
        ANSWERED => Record::Answered { seqs: reader.seqs()? },
        DELIVERY => Record::Delivery { seqs: reader.seqs()?, body: reader.str()? },
        _ => return None,
    };
    reader.0.is_empty().then_some(record)
}

struct Reader<'a>(&'a [u8]);

impl<'a> Reader<'a> {
    fn take(&mut self, n: usize) -> Option<&'a [u8]> {
        if self.0.len() < n {
            return None;
        }
        let (taken, rest) = self.0.split_at(n);
        self.0 = rest;
        Some(taken)
    }

    fn u32(&mut self) -> Option<u32> {
        Some(u32::from_le_bytes(self.take(4)?.try_into().ok()?))
    }

    fn i64(&mut self) -> Option<i64> {
        Some(i64::from_le_bytes(self.take(8)?.try_into().ok()?))
    }

    fn seqs(&mut self) -> Option<Vec<i64>> {
        let count = self.u32()? as usize;
        // Each seq takes 8 bytes: a count the body cannot hold is damage, not a record.
        if count > self.0.len() / 8 {
            return None;
        }
        (0..count).map(|_| self.i64()).collect()
    }

    fn str(&mut self) -> Option<&'a str> {
        let len = self.u32()? as usize;
        std::str::from_utf8(self.take(len)?).ok()
    }

    fn key(&mut self) -> Option<MessageKey<'a>> {
        Some(MessageKey {
            channel: self.str()?,
            account_id: self.str()?,
            chat_id: self.str()?,
            thread_id: self.str()?,
            message_id: self.str()?,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const KEY: MessageKey<'static> =
        MessageKey { channel: "telegram", account_id: "default", chat_id: "-100", thread_id: "7", message_id: "42" };

    fn entry() -> Accepted {
        Accepted {
            session_key: "agent:main:telegram:group:-100:topic:7".into(),
            prompt: "hello ✨".into(),
            message: r#"{"text":"hello ✨"}"#.into(),
            enqueued_at: 1_750_000_000_123,
        }
    }

    #[test]
    fn every_record_reads_back_as_written() {
        let mut bytes = Vec::new();
        sequence(&mut bytes, 9);
        accepted(&mut bytes, 9, 1_750_000_000_000, &KEY, &entry());
        seen(&mut bytes, 1_750_000_000_001, &MessageKey { thread_id: "", ..KEY });
        answered(&mut bytes, &[9, 3]);
        delivery(&mut bytes, &[9, 10], r#"{"preview":"1"}"#);
        let mut records = Vec::new();
        let mut rest = &bytes[..];
        while !rest.is_empty() {
            let (record, len) = read(rest).unwrap();
            records.push(record);
            rest = &rest[len..];
        }
        let entry = entry();
        assert_eq!(
            records,
            [
                Record::Sequence { next: 9 },
                Record::Accepted {
                    seq: 9,
                    seen_at: 1_750_000_000_000,
                    key: KEY,
                    entry: AcceptedRef {
                        session_key: &entry.session_key,
                        prompt: &entry.prompt,
                        message: &entry.message,
                        enqueued_at: entry.enqueued_at
                    }
                },
                Record::Seen { seen_at: 1_750_000_000_001, key: MessageKey { thread_id: "", ..KEY } },
                Record::Answered { seqs: vec![9, 3] },
                Record::Delivery { seqs: vec![9, 10], body: r#"{"preview":"1"}"# },
            ]
        );
    }

    #[test]
    fn a_frame_numbered_after_encoding_reads_back_with_its_number() {
        let mut bytes = Vec::new();
        accepted(&mut bytes, 0, 5, &KEY, &entry());
        set_seq(&mut bytes, 77);
        let (record, len) = read(&bytes).unwrap();
        assert_eq!(len, bytes.len());
        assert!(matches!(record, Record::Accepted { seq: 77, seen_at: 5, .. }), "{record:?}");
    }

    #[test]
    fn a_cut_short_or_damaged_frame_is_refused() {
        let mut bytes = Vec::new();
        accepted(&mut bytes, 1, 2, &KEY, &entry());
        for cut in [0, 3, HEADER_LEN, bytes.len() - 1] {
            assert_eq!(read(&bytes[..cut]).unwrap_err(), FrameError::Truncated, "cut at {cut}");
        }
        let mut damaged = bytes.clone();
        let last = damaged.len() - 1;
        damaged[last] ^= 0x40;
        assert_eq!(read(&damaged).unwrap_err(), FrameError::Checksum);
        let mut huge = bytes;
        huge[..4].copy_from_slice(&u32::MAX.to_le_bytes());
        assert_eq!(read(&huge).unwrap_err(), FrameError::Malformed);
    }
}
