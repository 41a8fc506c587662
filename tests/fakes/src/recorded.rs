//! The request log of a fake model server: each request as it arrived, with helpers that read
//! what tests usually assert on (the user's words, the key used, the thinking knobs) from
//! either provider's body.

use std::collections::BTreeMap;

use serde_json::Value;

use crate::images::{ReceivedImage, find_images, read};

/// One request as the fake received it, recorded before any check so rejected requests show up
/// too.
#[derive(Clone, Debug)]
pub struct RecordedRequest {
    /// The request path, e.g. `/v1/chat/completions`.
    pub path: String,
    /// Headers by lowercase name; repeated headers are joined with `", "`.
    pub headers: BTreeMap<String, String>,
    /// The parsed JSON body, or `Value::Null` when the body was not valid JSON.
    pub body: Value,
}

impl RecordedRequest {
    /// The value of a header, by case-insensitive name.
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers.get(&name.to_ascii_lowercase()).map(String::as_str)
    }

    /// The API key the request presented: the `Authorization: Bearer` token (OpenAI), else the
    /// `x-api-key` header (Anthropic). Lets a failover test see which auth profile was used.
    pub fn api_key(&self) -> Option<String> {
        let bearer = self.header("authorization").and_then(|value| value.strip_prefix("Bearer "));
        bearer.or_else(|| self.header("x-api-key")).map(str::to_owned)
    }

    /// The OpenAI-compatible `reasoning_effort` the request asked for (`"low"`, `"high"`, …).
    pub fn reasoning_effort(&self) -> Option<String> {
        self.body.get("reasoning_effort").and_then(Value::as_str).map(str::to_owned)
    }

    /// Anthropic extended thinking's `budget_tokens`, when the request enabled thinking with
    /// `"thinking": {"type": "enabled", "budget_tokens": N}`; `None` when thinking is off.
    pub fn thinking_budget(&self) -> Option<u64> {
        let thinking = self.body.get("thinking")?;
        if thinking.get("type").and_then(Value::as_str) != Some("enabled") {
            return None;
        }
        thinking.get("budget_tokens").and_then(Value::as_u64)
    }

    /// The output cap: `max_tokens` (Anthropic, older OpenAI clients), else OpenAI's newer
    /// `max_completion_tokens`, which reasoning models require instead.
    pub fn max_tokens(&self) -> Option<u64> {
        self.body.get("max_tokens").or_else(|| self.body.get("max_completion_tokens")).and_then(Value::as_u64)
    }

    /// The text of every `user` message in the body's `messages`, in order. Works for both
    /// OpenAI Chat Completions and Anthropic Messages bodies: `content` is either a string or
    /// an array of parts whose `{"type":"text","text":…}` parts are joined with `\n` (other
    /// parts, such as images or Anthropic `tool_result` blocks, are ignored; see
    /// [`RecordedRequest::images`]). A user message
    /// with no text part at all (an Anthropic turn carrying only tool results) is skipped;
    /// OpenAI tool results have their own `tool` role and never count.
    pub fn user_texts(&self) -> Vec<String> {
        let Some(messages) = self.body.get("messages").and_then(Value::as_array) else { return Vec::new() };
        messages
            .iter()
            .filter(|message| message.get("role").and_then(Value::as_str) == Some("user"))
            .filter_map(|message| content_text(message.get("content")?))
            .collect()
    }

    /// Every image the request carried, in order: Anthropic `image` blocks (in a user turn or
    /// inside a `tool_result`, with its `tool_use_id`) and OpenAI `image_url` parts with a
    /// data URL (with the text part before them, e.g. "Images returned by tool …"). Each with
    /// its media type, byte length and, when it decodes, pixel size. Listed for refused
    /// requests too.
    pub fn images(&self) -> Vec<ReceivedImage> {
        let Some(messages) = self.body.get("messages").and_then(Value::as_array) else { return Vec::new() };
        find_images(messages).iter().map(read).collect()
    }

    /// The text of the last `user` message that has text (see [`RecordedRequest::user_texts`]):
    /// what a responder usually answers. Note that Anthropic bodies merge consecutive user
    /// messages into one, while OpenAI bodies keep them apart.
    pub fn last_user_text(&self) -> Option<String> {
        self.user_texts().pop()
    }
}

/// The text of a message `content`: the string itself, or its text parts joined by newlines;
/// `None` when it has no text part.
fn content_text(content: &Value) -> Option<String> {
    match content {
        Value::String(text) => Some(text.clone()),
        Value::Array(parts) => {
            let texts: Vec<&str> = parts
                .iter()
                .filter(|part| part.get("type").and_then(Value::as_str) == Some("text"))
                .filter_map(|part| part.get("text").and_then(Value::as_str))
                .collect();
            (!texts.is_empty()).then(|| texts.join("\n"))
        }
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    fn request(headers: &[(&str, &str)], body: Value) -> RecordedRequest {
        let headers = headers.iter().map(|(name, value)| ((*name).to_owned(), (*value).to_owned())).collect();
        RecordedRequest { path: "/v1/messages".into(), headers, body }
    }

    #[test]
    fn api_key_reads_bearer_then_x_api_key() {
        assert_eq!(request(&[("authorization", "Bearer sk-1")], Value::Null).api_key().as_deref(), Some("sk-1"));
        assert_eq!(request(&[("x-api-key", "sk-ant-1")], Value::Null).api_key().as_deref(), Some("sk-ant-1"));
        assert_eq!(request(&[("authorization", "Basic xyz")], Value::Null).api_key(), None);
    }

    #[test]
    fn thinking_knobs_are_read_from_either_body() {
        let openai = request(&[], json!({ "reasoning_effort": "high", "max_completion_tokens": 900 }));
        assert_eq!(openai.reasoning_effort().as_deref(), Some("high"));
        assert_eq!(openai.max_tokens(), Some(900));
        assert_eq!(openai.thinking_budget(), None);

        let anthropic =
            request(&[], json!({ "max_tokens": 8000, "thinking": { "type": "enabled", "budget_tokens": 4096 } }));
        assert_eq!(anthropic.thinking_budget(), Some(4096));
        assert_eq!(anthropic.max_tokens(), Some(8000));
        assert_eq!(anthropic.reasoning_effort(), None);

        let disabled = request(&[], json!({ "thinking": { "type": "disabled", "budget_tokens": 4096 } }));
        assert_eq!(disabled.thinking_budget(), None);
    }
}
