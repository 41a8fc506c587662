//! Reading a `getUpdates` batch that teloxide could not read as a whole.
//!
//! teloxide parses a batch in one go, so a single update it cannot read (nested deeper than
//! serde_json allows, say) fails the whole batch. Fetched again, the same batch fails again:
//! the poller would be stuck behind that update for good, and every message after it lost.
//! Here the batch's text is cut into its updates without parsing them (a scan that follows
//! strings and brackets), each update is read on its own, and those that still cannot be
//! read are named by their `update_id`, so they can be skipped and their offset confirmed.

use teloxide::types::{Update, UpdateId};

/// One update of a salvaged batch, in the batch's order.
#[derive(Debug)]
pub(crate) enum Fetched {
    Read(Box<Update>),
    /// An update that cannot be read; only its id is known.
    Unreadable(UpdateId),
}

/// The updates of a `getUpdates` response body, each read on its own; `None` when the body
/// is not a response holding update objects or an unreadable update has no readable id.
pub(crate) fn salvage(raw: &str) -> Option<Vec<Fetched>> {
    let spans = objects_at_depth(raw, 2)?;
    if spans.is_empty() {
        return None;
    }
    spans
        .into_iter()
        .map(|span| match serde_json::from_str::<Update>(span) {
            Ok(update) => Some(Fetched::Read(Box::new(update))),
            Err(_) => update_id(span).map(Fetched::Unreadable),
        })
        .collect()
}

/// The `update_id` of one update's text, read from its own top level only (a key of that
/// name nested inside the message does not count).
fn update_id(update: &str) -> Option<UpdateId> {
    let mut scan = Scanner::default();
    let bytes = update.as_bytes();
    let mut at = 0;
    while at < bytes.len() {
        if scan.depth == 1 && !scan.in_string && update[at..].starts_with("\"update_id\"") {
            let rest = update[at + "\"update_id\"".len()..].trim_start().strip_prefix(':')?.trim_start();
            let digits: String = rest.chars().take_while(char::is_ascii_digit).collect();
            return digits.parse().ok().map(UpdateId);
        }
        scan.step(bytes[at]);
        at += 1;
    }
    None
}

/// The text of every object that opens at bracket depth `depth` (2: the updates inside
/// `{"ok":true,"result":[…]}`); `None` if the brackets do not balance.
fn objects_at_depth(text: &str, depth: usize) -> Option<Vec<&str>> {
    let mut scan = Scanner::default();
    let mut spans = Vec::new();
    let mut start = None;
    for (at, byte) in text.bytes().enumerate() {
        let opening = !scan.in_string && byte == b'{' && scan.depth == depth;
        scan.step(byte);
        if opening {
            start = Some(at);
        } else if !scan.in_string && byte == b'}' && scan.depth == depth {
            spans.push(&text[start.take()?..=at]);
        }
        if scan.broken {
            return None;
        }
    }
    (scan.depth == 0 && !scan.in_string).then_some(spans)
}

/// Where a byte-by-byte walk through JSON text is: inside a string or not, and how many
/// brackets are open.
#[derive(Debug, Default)]
struct Scanner {
    depth: usize,
    in_string: bool,
    escaped: bool,
    /// A closing bracket with none open.
    broken: bool,
}

impl Scanner {
    fn step(&mut self, byte: u8) {
        if self.in_string {
            match (self.escaped, byte) {
                (true, _) => self.escaped = false,
                (false, b'\\') => self.escaped = true,
                (false, b'"') => self.in_string = false,
                _ => {}
            }
            return;
        }
        match byte {
            b'"' => self.in_string = true,
            b'{' | b'[' => self.depth += 1,
            b'}' | b']' => match self.depth.checked_sub(1) {
                Some(depth) => self.depth = depth,
                None => self.broken = true,
            },
            _ => {}
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn message(update_id: u32, text: &str) -> String {
        format!(
            r#"{{"update_id":{update_id},"message":{{"message_id":1,"date":0,"chat":{{"id":42,"type":"private","first_name":"Ada"}},"from":{{"id":42,"is_bot":false,"first_name":"Ada"}},"text":{text:?}}}}}"#
        )
    }

    fn too_deep(update_id: u32) -> String {
        let chat = r#""chat":{"id":42,"type":"private","first_name":"Ada"}"#;
        let mut nested = format!(r#"{{"message_id":1,"date":0,{chat},"text":"leaf"}}"#);
        for id in 0..130 {
            nested = format!(r#"{{"message_id":{},"date":0,{chat},"text":"n","reply_to_message":{nested}}}"#, id + 2);
        }
        // A decoy `update_id` inside the message must not be taken for the update's.
        format!(r#"{{"message":{nested},"decoy":{{"update_id":1}},"update_id":{update_id}}}"#)
    }

    #[test]
    fn a_batch_with_one_unreadable_update_keeps_the_others_in_order() {
        let raw =
            format!(r#"{{"ok":true,"result":[{},{},{}]}}"#, message(10, "a } ] \" {"), too_deep(11), message(12, "c"));
        assert!(serde_json::from_str::<serde_json::Value>(&raw).is_err(), "too deep for serde_json as a whole");
        let fetched = salvage(&raw).expect("salvaged");
        assert_eq!(fetched.len(), 3);
        assert!(matches!(&fetched[0], Fetched::Read(update) if update.id == UpdateId(10)));
        assert!(matches!(&fetched[1], Fetched::Unreadable(UpdateId(11))), "{:?}", fetched[1]);
        assert!(matches!(&fetched[2], Fetched::Read(update) if update.id == UpdateId(12)));
    }

    #[test]
    fn text_that_is_not_a_batch_of_updates_is_not_salvaged() {
        for raw in ["", "{}", r#"{"ok":true,"result":[]}"#, r#"{"ok":true,"result":[{"no_id":1}]}"#, "}{", "[[[", "\"{"]
        {
            assert!(salvage(raw).is_none(), "{raw:?}");
        }
    }
}
