//! Reading what the gateway never delivered: messages written while Ferry was not connected
//! (the process was down, the connection was dropped, a replica was taking the shard over)
//! are not sent again by Discord's gateway, but they are in each channel's history. After
//! every READY or RESUMED, the forwarder (`gateway.rs`) asks for each recently active
//! channel's messages since the last one it saw there (positions: `ferry_channel::catch_up`)
//! and forwards them, oldest first, exactly as if the gateway had delivered them: the same
//! normalization, the same replay set, so the core's dedupe (by message id) drops whatever it
//! had taken already.
//!
//! Bounded as `ferry_channel::catch_up` says: channels active within 24 h, messages of the
//! last 24 h, 100 per channel. Channels are read one at a time; a 429 is waited out as
//! Discord asks (up to [`MAX_RETRY_WAIT`], [`ATTEMPTS`] times), and a channel whose history
//! cannot be read is skipped with a warning — the gateway keeps running either way.

use std::cmp::Ordering;
use std::time::Duration;

use ferry_channel::catch_up::{CATCH_UP_LIMIT, window_start_ms};
use serde_json::Value;
use serenity::all::Message;
use serenity::model::id::{ChannelId, MessageId};

use crate::rest::{CallError, Rest};

/// Attempts at reading one channel's history when Discord answers 429.
pub(crate) const ATTEMPTS: u32 = 3;

/// The longest `retry_after` waited out during a catch-up; a longer one skips the channel.
pub(crate) const MAX_RETRY_WAIT: Duration = Duration::from_secs(10);

/// How long to wait after a 429 that names no `retry_after`.
const DEFAULT_RETRY_WAIT: Duration = Duration::from_secs(1);

/// Discord ids by age: snowflakes grow with creation time.
pub(crate) fn snowflake_order(a: &str, b: &str) -> Ordering {
    a.parse::<u64>().unwrap_or(0).cmp(&b.parse::<u64>().unwrap_or(0))
}

/// When a message was written, unix milliseconds.
pub(crate) fn written_ms(message: &Message) -> i64 {
    message.timestamp.unix_timestamp().saturating_mul(1000)
}

/// The messages of `channel` written after `after` and within the window before `now_ms`,
/// oldest first, at most [`CATCH_UP_LIMIT`].
pub(crate) async fn missed(
    rest: &Rest,
    channel: ChannelId,
    after: MessageId,
    now_ms: i64,
) -> Result<Vec<Message>, CallError> {
    let mut attempt = 1;
    let page = loop {
        match rest.messages_after(channel, after, CATCH_UP_LIMIT).await {
            Ok(page) => break page,
            Err(CallError::Status(failure)) if failure.status == 429 && attempt < ATTEMPTS => {
                let wait = failure.retry_after().unwrap_or(DEFAULT_RETRY_WAIT);
                if wait > MAX_RETRY_WAIT {
                    return Err(CallError::Status(failure));
                }
                tokio::time::sleep(wait).await;
                attempt += 1;
            }
            Err(error) => return Err(error),
        }
    };
    Ok(oldest_first(page, window_start_ms(now_ms)))
}

/// A history page as messages written at or after `oldest_ms`, oldest first. An entry that
/// is not a message Ferry can read is left out (logged), not the page.
fn oldest_first(page: Value, oldest_ms: i64) -> Vec<Message> {
    let entries = match page {
        Value::Array(entries) => entries,
        _ => return Vec::new(),
    };
    let mut messages: Vec<Message> = entries
        .into_iter()
        .filter_map(|entry| match serde_json::from_value::<Message>(entry) {
            Ok(message) => Some(message),
            Err(error) => {
                tracing::debug!(channel = crate::CHANNEL_NAME, %error, "a history entry is not a readable message; left out");
                None
            }
        })
        .filter(|message| written_ms(message) >= oldest_ms)
        .collect();
    messages.sort_by_key(|message| message.id.get());
    messages.truncate(CATCH_UP_LIMIT);
    messages
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    fn entry(id: u64, timestamp: &str) -> Value {
        json!({
            "id": id.to_string(), "channel_id": "10", "content": format!("m{id}"),
            "author": {"id": "42", "username": "ada", "discriminator": "0", "avatar": null},
            "timestamp": timestamp, "edited_timestamp": null, "tts": false,
            "mention_everyone": false, "mentions": [], "mention_roles": [], "attachments": [], "embeds": [],
            "pinned": false, "type": 0,
        })
    }

    #[test]
    fn a_page_listed_newest_first_is_forwarded_oldest_first_without_what_is_too_old() {
        let now = "2026-01-02T03:04:05+00:00";
        let page = json!([entry(30, now), entry(20, now), entry(10, "2025-12-31T00:00:00+00:00"), {"id": "x"}]);
        let oldest_ms = chrono::DateTime::parse_from_rfc3339(now).unwrap().timestamp_millis() - 24 * 3_600_000;
        let ids: Vec<u64> = oldest_first(page, oldest_ms).iter().map(|message| message.id.get()).collect();
        assert_eq!(ids, [20, 30], "oldest first, the 2-day-old one and the unreadable entry left out");
    }

    #[test]
    fn snowflakes_compare_as_numbers() {
        assert_eq!(snowflake_order("900", "1000"), Ordering::Less);
        assert_eq!(snowflake_order("1000", "1000"), Ordering::Equal);
    }
}
