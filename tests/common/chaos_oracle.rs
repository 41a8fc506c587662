//! What the chaos tests (tests/chaos.rs: one gateway; tests/replicas_chaos.rs: several on
//! one PostgreSQL) check a chat against: every user message carries a unique token, the
//! model's reply names the tokens it answers and ends with `done.`, and at the end each chat
//! must show each token exactly once, in order, in a whole reply.

// Each test crate that includes this file uses a different part of it.
#![allow(dead_code)]

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::Duration;

use ferry_fakes::{RecordedRequest, Reply};

use crate::conformance::Shown;

/// What every answer starts with: enough for a preview to be sent before the tokens come.
pub const PREAMBLE: &str = "Working on it, one moment please. ";

/// The tokens a message names: `tok-<n>` and the end-of-run sentinels `end-<user>`.
pub fn tokens(text: &str) -> Vec<String> {
    text.split(|c: char| !(c.is_ascii_alphanumeric() || c == '-'))
        .filter(|word| {
            word.strip_prefix("tok-").or_else(|| word.strip_prefix("end-")).is_some_and(|n| n.parse::<u32>().is_ok())
        })
        .map(str::to_owned)
        .collect()
}

/// The model's answer to `request`: `<preamble> ack#<n> <tokens> done.` in four streamed
/// pieces a little apart (long enough for a preview to be sent first), `n` counting answers;
/// `None` when the latest user message names no token.
pub fn answer(request: &RecordedRequest, counter: &AtomicU32) -> Option<Reply> {
    let tokens = tokens(&request.last_user_text().unwrap_or_default());
    if tokens.is_empty() {
        return None;
    }
    let number = counter.fetch_add(1, Ordering::SeqCst);
    let text = format!("{PREAMBLE}ack#{number} {} done.", tokens.join(" "));
    Some(Reply::text(split_in_four(&text)).with_chunk_delay(Duration::from_millis(150)))
}

/// How many of `requests` asked the model about `token`: where a lost message got to.
pub fn asked_about(requests: &[RecordedRequest], token: &str) -> usize {
    requests
        .iter()
        .filter(|request| tokens(&request.last_user_text().unwrap_or_default()).iter().any(|t| t == token))
        .count()
}

/// How long faults are injected: `var` in seconds, else `default_seconds`.
pub fn duration_from_env(var: &str, default_seconds: u64) -> Duration {
    Duration::from_secs(std::env::var(var).ok().and_then(|s| s.parse().ok()).unwrap_or(default_seconds))
}

pub fn split_in_four(text: &str) -> Vec<String> {
    let chars: Vec<char> = text.chars().collect();
    let size = chars.len().div_ceil(4).max(1);
    chars.chunks(size).map(|chunk| chunk.iter().collect()).collect()
}

/// `FERRY_CHAOS_SEED`, or a fresh one.
pub fn seed() -> u64 {
    std::env::var("FERRY_CHAOS_SEED").ok().and_then(|s| s.parse().ok()).unwrap_or_else(rand::random)
}

/// What the chats show at the end.
#[derive(Debug, Default)]
pub struct Verdict {
    pub lost: Vec<String>,
    pub duplicated: Vec<String>,
    /// The same message shown twice: a send whose outcome was unknown, repeated.
    pub repeated_sends: Vec<String>,
    /// Previews whose first send's outcome Ferry never learned (its answer was lost, or the
    /// process was killed before it arrived): Ferry cannot know they exist.
    pub unknown_previews: Vec<String>,
    pub half_written: Vec<String>,
    pub leaks: Vec<String>,
    pub out_of_order: Vec<String>,
    pub notices: usize,
    /// Messages that should carry a file (the `message` tool's sends in the chaos sends
    /// mode) and show none.
    pub without_file: Vec<String>,
}

impl std::fmt::Display for Verdict {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "lost {}, duplicated {}, repeated unknown-outcome sends {}, unknown-outcome previews {}, half-written {}, \
             NO_REPLY leaks {}, out of order {}, kept-for-later notices {}, sends without their file {}",
            self.lost.len(),
            self.duplicated.len(),
            self.repeated_sends.len(),
            self.unknown_previews.len(),
            self.half_written.len(),
            self.leaks.len(),
            self.out_of_order.len(),
            self.notices,
            self.without_file.len(),
        )
    }
}

/// A whole answer, as opposed to a preview left half-written.
pub fn is_whole(text: &str) -> bool {
    text.contains("kept your message") || (text.starts_with(PREAMBLE.trim_end()) && text.ends_with(" done."))
}

/// Checks one chat's final state against the tokens its user sent, in order.
pub fn check_chat(shown: &[Shown], expected: &[String], verdict: &mut Verdict) {
    check_chat_of(shown, expected, |_| true, verdict);
}

/// [`check_chat`] for the tokens `counted` picks (`expected` are the sent ones of them):
/// the rest of each message is not looked at for order or loss. Several calls over one
/// chat report a half-written message or a leak once.
pub fn check_chat_of(shown: &[Shown], expected: &[String], counted: impl Fn(&str) -> bool, verdict: &mut Verdict) {
    let mut seen: BTreeMap<&str, Vec<&str>> = BTreeMap::new();
    let mut order: Vec<String> = Vec::new();
    for message in shown {
        let text = message.visible.trim();
        if text.contains("NO_") && !verdict.leaks.iter().any(|known| known == text) {
            verdict.leaks.push(text.to_owned());
        }
        if text.contains("kept your message") {
            verdict.notices += 1;
            continue;
        }
        if !is_whole(text) {
            if !verdict.half_written.iter().any(|known| known == text) {
                verdict.half_written.push(text.to_owned());
            }
            continue;
        }
        for token in tokens(text).into_iter().filter(|token| counted(token)) {
            if !order.contains(&token) {
                order.push(token.clone());
            }
            let token = expected.iter().find(|known| **known == token).map_or("unexpected", String::as_str);
            seen.entry(token).or_default().push(text);
        }
    }
    for token in expected {
        match seen.get(token.as_str()).map(Vec::as_slice) {
            None => verdict.lost.push(token.clone()),
            Some([_]) => {}
            Some(texts) if texts.iter().all(|text| *text == texts[0]) => verdict.repeated_sends.push(token.clone()),
            Some(_) => verdict.duplicated.push(token.clone()),
        }
    }
    let position = |token: &String| expected.iter().position(|known| known == token);
    if order.windows(2).any(|pair| position(&pair[0]) > position(&pair[1])) {
        verdict.out_of_order.push(order.join(" "));
    }
}
