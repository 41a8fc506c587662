//! Extended thinking as the Anthropic Messages API enforces it, so a client that mangles a
//! continuation fails against the fake exactly as it would in production.
//!
//! The real API signs every `thinking` block it sends, and when thinking is enabled it checks
//! the history a client sends back: each `thinking` block must carry the signature issued for
//! exactly its text, each `redacted_thinking` block must carry data the API issued, and when
//! the request continues a tool call (its last message is a user turn with `tool_result`
//! blocks) the assistant message before it must start with one of those blocks. It also bounds
//! `budget_tokens`. When thinking is not enabled none of this is checked: the real API ignores
//! thinking blocks of earlier turns then.
//!
//! The fake's signature is an HMAC-SHA256 of the block's full text under a key drawn when the
//! fake starts, so it is deterministic within one fake, cannot be guessed by a client, and
//! verifying it needs no record of what was sent. Redacted data is scripted by the test, so the
//! fake remembers which data it has sent instead.

use std::collections::HashSet;
use std::io;
use std::sync::Mutex;

use axum::http::HeaderMap;
use ring::hmac;
use ring::rand::SystemRandom;
use serde_json::{Map, Value};

use super::invalid_request;
use crate::model_server::{Rejection, header_str, lock};

/// The smallest `budget_tokens` the API accepts
/// (<https://docs.claude.com/en/docs/build-with-claude/extended-thinking>).
const MIN_BUDGET_TOKENS: u64 = 1024;

/// With this beta, thinking may span several blocks between tool calls, and `budget_tokens`
/// may exceed `max_tokens`.
const INTERLEAVED_THINKING_BETA: &str = "interleaved-thinking-2025-05-14";

const DOCS: &str = "https://docs.claude.com/en/docs/build-with-claude/extended-thinking";

/// What a fake Anthropic remembers to validate thinking: its signing key and the redacted data
/// it has sent.
pub(crate) struct ThinkingLedger {
    key: hmac::Key,
    issued_redacted: Mutex<HashSet<String>>,
}

/// The request's `thinking` setting.
#[derive(Debug, PartialEq, Eq)]
enum Mode {
    Off,
    Enabled {
        budget_tokens: u64,
    },
    /// The model decides how much to think; thinking is on, with no budget to check.
    Adaptive,
}

impl ThinkingLedger {
    pub(crate) fn new() -> io::Result<Self> {
        let key = hmac::Key::generate(hmac::HMAC_SHA256, &SystemRandom::new())
            .map_err(|_| io::Error::other("no OS randomness for the fake's thinking-signature key"))?;
        Ok(Self { key, issued_redacted: Mutex::new(HashSet::new()) })
    }

    /// The signature of a thinking block with this full text.
    pub(crate) fn sign(&self, thinking: &str) -> String {
        base64(hmac::sign(&self.key, thinking.as_bytes()).as_ref())
    }

    /// Notes that a `redacted_thinking` block with this data was sent, so it is accepted back.
    pub(crate) fn issue_redacted(&self, data: &str) {
        lock(&self.issued_redacted).insert(data.to_owned());
    }

    fn was_issued(&self, data: &str) -> bool {
        lock(&self.issued_redacted).contains(data)
    }

    /// The API's thinking checks on a request whose required fields are already checked.
    pub(crate) fn check(&self, headers: &HeaderMap, body: &Map<String, Value>) -> Result<(), Rejection> {
        let mode = mode(body.get("thinking"))?;
        if let Mode::Enabled { budget_tokens } = mode {
            let interleaved = header_str(headers, "anthropic-beta")
                .is_some_and(|betas| betas.split(',').any(|beta| beta.trim() == INTERLEAVED_THINKING_BETA));
            let max_tokens = body.get("max_tokens").and_then(Value::as_u64).unwrap_or_default();
            if !interleaved && max_tokens <= budget_tokens {
                return Err(invalid_request(&format!(
                    "`max_tokens` must be greater than `thinking.budget_tokens`. Please consult our documentation \
                     at {DOCS}#max-tokens-and-context-window-size"
                )));
            }
        }
        if mode == Mode::Off {
            return Ok(());
        }
        let messages = body.get("messages").and_then(Value::as_array).map(Vec::as_slice).unwrap_or_default();
        check_continuation(messages)?;
        for (index, message) in messages.iter().enumerate() {
            if role(message) == Some("assistant") {
                self.check_blocks(index, blocks(message))?;
            }
        }
        Ok(())
    }

    /// Each thinking block's signature and each redacted block's data, in one assistant message.
    fn check_blocks(&self, message: usize, blocks: &[Value]) -> Result<(), Rejection> {
        for (position, block) in blocks.iter().enumerate() {
            let path = format!("messages.{message}.content.{position}");
            match block.get("type").and_then(Value::as_str) {
                Some("thinking") => {
                    let Some(text) = block.get("thinking").and_then(Value::as_str) else {
                        return Err(invalid_request(&format!("{path}.thinking.thinking: Field required")));
                    };
                    let Some(signature) = block.get("signature").and_then(Value::as_str) else {
                        return Err(invalid_request(&format!("{path}.thinking.signature: Field required")));
                    };
                    if signature != self.sign(text) {
                        return Err(invalid_request(&format!("{path}: Invalid `signature` in `thinking` block")));
                    }
                }
                Some("redacted_thinking") => {
                    let Some(data) = block.get("data").and_then(Value::as_str) else {
                        return Err(invalid_request(&format!("{path}.redacted_thinking.data: Field required")));
                    };
                    if !self.was_issued(data) {
                        return Err(invalid_request(&format!("{path}: Invalid `data` in `redacted_thinking` block")));
                    }
                }
                _ => {}
            }
        }
        Ok(())
    }
}

/// Reads `thinking`, checking `budget_tokens` the way the API's schema does.
fn mode(thinking: Option<&Value>) -> Result<Mode, Rejection> {
    let Some(thinking) = thinking.filter(|thinking| !thinking.is_null()) else { return Ok(Mode::Off) };
    match thinking.get("type").and_then(Value::as_str) {
        Some("disabled") => Ok(Mode::Off),
        Some("adaptive") => Ok(Mode::Adaptive),
        Some("enabled") => match thinking.get("budget_tokens") {
            None => Err(invalid_request("thinking.enabled.budget_tokens: Field required")),
            Some(budget) if !(budget.is_u64() || budget.is_i64()) => {
                Err(invalid_request("thinking.enabled.budget_tokens: Input should be a valid integer"))
            }
            Some(budget) => match budget.as_u64().filter(|budget| *budget >= MIN_BUDGET_TOKENS) {
                Some(budget_tokens) => Ok(Mode::Enabled { budget_tokens }),
                None => Err(invalid_request(&format!(
                    "thinking.enabled.budget_tokens: Input should be greater than or equal to {MIN_BUDGET_TOKENS}"
                ))),
            },
        },
        Some(other) => Err(invalid_request(&format!(
            "thinking: Input tag '{other}' found using 'type' does not match any of the expected tags: \
             'disabled', 'enabled', 'adaptive'"
        ))),
        None => Err(invalid_request("thinking: Unable to extract tag using discriminator 'type'")),
    }
}

/// When the request answers tool calls, the assistant message that made them must start with
/// its thinking: the API resumes that message's reasoning, so it needs it back.
fn check_continuation(messages: &[Value]) -> Result<(), Rejection> {
    let [.., assistant, last] = messages else { return Ok(()) };
    let answers_tools = role(last) == Some("user")
        && blocks(last).iter().any(|block| block.get("type").and_then(Value::as_str) == Some("tool_result"));
    if !answers_tools || role(assistant) != Some("assistant") {
        return Ok(());
    }
    let first = match assistant.get("content") {
        Some(Value::String(_)) => "text",
        _ => blocks(assistant).first().and_then(|block| block.get("type")).and_then(Value::as_str).unwrap_or("none"),
    };
    if first == "thinking" || first == "redacted_thinking" {
        return Ok(());
    }
    let index = messages.len() - 2;
    Err(invalid_request(&format!(
        "messages.{index}.content.0.type: Expected `thinking` or `redacted_thinking`, but found `{first}`. When \
         `thinking` is enabled, a final `assistant` message must start with a thinking block (preceeding the \
         lastmost set of `tool_use` and `tool_result` blocks). We recommend you include thinking blocks from \
         previous turns. To avoid this requirement, disable `thinking`. Please consult our documentation at {DOCS}"
    )))
}

fn role(message: &Value) -> Option<&str> {
    message.get("role").and_then(Value::as_str)
}

/// A message's content blocks; none when `content` is a plain string.
fn blocks(message: &Value) -> &[Value] {
    message.get("content").and_then(Value::as_array).map(Vec::as_slice).unwrap_or_default()
}

/// Standard base64 with padding, which is what real signatures look like.
fn base64(bytes: &[u8]) -> String {
    const ALPHABET: &[u8; 64] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    let mut out = String::with_capacity(bytes.len().div_ceil(3) * 4);
    for chunk in bytes.chunks(3) {
        let byte = |i: usize| u32::from(chunk.get(i).copied().unwrap_or_default());
        let triple = (byte(0) << 16) | (byte(1) << 8) | byte(2);
        for sextet in 0..4 {
            if sextet <= chunk.len() {
                let index = (triple >> (18 - 6 * sextet)) & 0x3f;
                out.push(char::from(ALPHABET[index as usize]));
            } else {
                out.push('=');
            }
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    #[test]
    fn base64_matches_the_standard_alphabet_and_padding() {
        assert_eq!(base64(b""), "");
        assert_eq!(base64(b"f"), "Zg==");
        assert_eq!(base64(b"fo"), "Zm8=");
        assert_eq!(base64(b"foo"), "Zm9v");
        assert_eq!(base64(b"foobar"), "Zm9vYmFy");
        assert_eq!(base64(&[0xfb, 0xff]), "+/8=");
    }

    #[test]
    fn signatures_depend_on_the_text_and_the_fake() {
        let ledger = ThinkingLedger::new().unwrap();
        assert_eq!(ledger.sign("a"), ledger.sign("a"));
        assert_ne!(ledger.sign("a"), ledger.sign("b"));
        assert_ne!(ledger.sign("a"), ThinkingLedger::new().unwrap().sign("a"));
    }

    #[test]
    fn budget_is_bounded_below_and_by_max_tokens() {
        assert_eq!(mode(None).ok(), Some(Mode::Off));
        assert_eq!(mode(Some(&json!({ "type": "disabled" }))).ok(), Some(Mode::Off));
        let enabled = json!({ "type": "enabled", "budget_tokens": 1024 });
        assert_eq!(mode(Some(&enabled)).ok(), Some(Mode::Enabled { budget_tokens: 1024 }));
        for bad in
            [json!({ "type": "enabled", "budget_tokens": 1023 }), json!({ "type": "enabled", "budget_tokens": -5 })]
        {
            assert!(mode(Some(&bad)).is_err(), "{bad}");
        }
        assert!(mode(Some(&json!({ "type": "enabled" }))).is_err());
        assert!(mode(Some(&json!({ "type": "sometimes" }))).is_err());
    }

    #[test]
    fn only_a_tool_result_continuation_needs_a_leading_thinking_block() {
        let assistant = json!({ "role": "assistant", "content": [{ "type": "text", "text": "hi" }] });
        let plain_user = json!({ "role": "user", "content": "and now?" });
        let tool_result =
            json!({ "role": "user", "content": [{ "type": "tool_result", "tool_use_id": "t", "content": "ok" }] });
        assert!(check_continuation(&[assistant.clone(), plain_user]).is_ok());
        assert!(check_continuation(&[assistant, tool_result.clone()]).is_err());
        let thought = json!({ "role": "assistant", "content": [{ "type": "redacted_thinking", "data": "x" }] });
        assert!(check_continuation(&[thought, tool_result]).is_ok());
    }
}
