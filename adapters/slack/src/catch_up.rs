//! Reading what Socket Mode never delivered: a message written while no socket was open (the
//! process was down, the socket was reconnecting, Slack was refreshing it) is not pushed
//! later, but it is in its conversation's history. After every `hello` (each (re)connect),
//! `socket.rs` takes the conversations the adapter saw messages in lately (positions:
//! `ferry_channel::catch_up`, kept by [`Inbound`]) and [`run`] reads each one's
//! `conversations.history` since the last message seen there, then hands what it finds to
//! [`Inbound::deliver_missed`], oldest first: the same normalization as a pushed `message`
//! event (the bot's own posts skipped, other bots' flagged, mentions read from the text), so
//! the core's dedupe (by conversation, thread and `ts`) drops whatever it had taken already.
//!
//! Bounded as `ferry_channel::catch_up` says: conversations active within 24 h, messages of
//! the last 24 h, one page of 100 per conversation. Slack lists a page newest first, so when
//! more than 100 were missed the newest 100 are read. Only top-level messages (and replies
//! also sent to the channel) are in `conversations.history`: a thread reply written while
//! the socket was closed is not read. Conversations are read one at a time; a 429 is waited
//! out as its `Retry-After` asks (up to [`MAX_RETRY_WAIT`], [`ATTEMPTS`] times), and a
//! conversation whose history cannot be read is skipped with a warning — the socket keeps
//! running either way.

use std::cmp::Ordering;
use std::sync::Arc;
use std::time::Duration;

use ferry_channel::catch_up::{CATCH_UP_LIMIT, Seen, window_start_ms};
use serde_json::Value;
use slack_morphism::SlackApiToken;
use slack_morphism::errors::SlackClientError;
use slack_morphism::events::SlackMessageEvent;
use tracing::{debug, info, warn};

use crate::CHANNEL_NAME;
use crate::client::Client;
use crate::inbound::{Delivered, Inbound};

/// Attempts at reading one conversation's history when Slack answers 429.
pub(crate) const ATTEMPTS: u32 = 3;

/// The longest `Retry-After` waited out during a catch-up; a longer one skips the
/// conversation (`conversations.history` is Tier 3, ~50 a minute: a long wait means the app
/// is far over its budget, and live messages matter more).
pub(crate) const MAX_RETRY_WAIT: Duration = Duration::from_secs(10);

/// How long to wait after a 429 that names no `Retry-After`.
const DEFAULT_RETRY_WAIT: Duration = Duration::from_secs(1);

/// Slack `ts` values by age: `<unix seconds>.<microseconds>`, compared as the decimal they
/// are (seconds first, then the fraction), not as text. Unreadable values sort oldest.
pub(crate) fn ts_order(a: &str, b: &str) -> Ordering {
    ts_key(a).cmp(&ts_key(b))
}

/// A `ts` as (seconds, microseconds); `(0, 0)` if it is not one.
fn ts_key(ts: &str) -> (u64, u64) {
    let (secs, fraction) = ts.split_once('.').unwrap_or((ts, ""));
    let Ok(secs) = secs.parse::<u64>() else { return (0, 0) };
    // "5" after the point is half a second: pad to six digits before reading it.
    let digits: String = fraction.chars().chain(std::iter::repeat('0')).take(6).collect();
    (secs, digits.parse().unwrap_or(0))
}

/// When a message was written, unix milliseconds, from its `ts`.
pub(crate) fn written_ms(ts: &str) -> i64 {
    let (secs, micros) = ts_key(ts);
    i64::try_from(secs.saturating_mul(1000).saturating_add(micros / 1000)).unwrap_or(i64::MAX)
}

/// Unix milliseconds as a `ts`, for `oldest`.
fn ts_at(ms: i64) -> String {
    let ms = ms.max(0);
    format!("{}.{:06}", ms / 1000, (ms % 1000) * 1000)
}

/// Reads each of `conversations` (from where it was last seen) and delivers what Socket Mode
/// missed, oldest first; ends early if the core's side is gone. One catch-up at a time: a
/// second reconnect's catch-up waits for the first (and then finds most of it delivered).
pub(crate) async fn run(inbound: Arc<Inbound>, conversations: Vec<(String, Seen)>) {
    if conversations.is_empty() {
        return;
    }
    let _one_at_a_time = inbound.catching_up.lock().await;
    let now_ms = now_ms();
    let (mut read, mut delivered, mut failed) = (0usize, 0usize, 0usize);
    for (conversation, seen) in &conversations {
        let messages = match missed(&inbound.client, &inbound.token, conversation, &seen.last, now_ms).await {
            Ok(messages) => messages,
            Err(error) => {
                failed += 1;
                warn!(
                    channel = CHANNEL_NAME,
                    account_id = %inbound.account_id,
                    chat_id = %conversation,
                    %error,
                    "reading a Slack conversation's history after a (re)connect failed; what it missed is not answered"
                );
                continue;
            }
        };
        read += messages.len();
        for message in messages {
            match inbound.deliver_missed(message).await {
                Delivered::Sent => delivered += 1,
                Delivered::Skipped => {}
                Delivered::CoreGone => return,
            }
        }
    }
    info!(
        channel = CHANNEL_NAME,
        account_id = %inbound.account_id,
        conversations = conversations.len(),
        read,
        delivered,
        failed,
        "caught up on Slack history after a (re)connect"
    );
}

/// Now, unix milliseconds.
pub(crate) fn now_ms() -> i64 {
    let now = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap_or_default();
    i64::try_from(now.as_millis()).unwrap_or(i64::MAX)
}

/// The messages of `conversation` written after `after` and within the window before
/// `now_ms`, oldest first, at most [`CATCH_UP_LIMIT`].
async fn missed(
    client: &Client,
    token: &SlackApiToken,
    conversation: &str,
    after: &str,
    now_ms: i64,
) -> Result<Vec<SlackMessageEvent>, SlackClientError> {
    let window = ts_at(window_start_ms(now_ms));
    // `oldest` is exclusive (no `inclusive`): the message seen last is not read again.
    let oldest = if ts_order(after, &window) == Ordering::Greater { after.to_owned() } else { window };
    let limit = CATCH_UP_LIMIT.to_string();
    let params =
        vec![("channel", Some(conversation)), ("oldest", Some(oldest.as_str())), ("limit", Some(limit.as_str()))];
    let session = client.open_session(token);
    let mut attempt = 1;
    let page = loop {
        // Read as JSON, not slack-morphism's typed page: one entry it cannot type would
        // otherwise lose the whole page.
        match session.http_session_api.http_get::<Value, _, _>("conversations.history", &params, None).await {
            Ok(page) => break page,
            Err(SlackClientError::RateLimitError(limited)) if attempt < ATTEMPTS => {
                let wait = limited.retry_after.unwrap_or(DEFAULT_RETRY_WAIT);
                if wait > MAX_RETRY_WAIT {
                    return Err(SlackClientError::RateLimitError(limited));
                }
                debug!(
                    channel = CHANNEL_NAME,
                    chat_id = conversation,
                    ?wait,
                    "conversations.history rate-limited; waiting"
                );
                tokio::time::sleep(wait).await;
                attempt += 1;
            }
            Err(error) => return Err(error),
        }
    };
    Ok(oldest_first(page, conversation, &oldest))
}

/// A `conversations.history` page as `message` events of `conversation` written after
/// `oldest`, oldest first. An entry that is not a message Ferry can read is left out
/// (logged), not the page.
fn oldest_first(page: Value, conversation: &str, oldest: &str) -> Vec<SlackMessageEvent> {
    let Value::Object(mut page) = page else { return Vec::new() };
    let Some(Value::Array(entries)) = page.remove("messages") else { return Vec::new() };
    let mut messages: Vec<SlackMessageEvent> = entries
        .into_iter()
        .filter_map(|mut entry| {
            // History entries do not name their conversation; the event would.
            entry.as_object_mut()?.insert("channel".to_owned(), conversation.into());
            match serde_json::from_value::<SlackMessageEvent>(entry) {
                Ok(message) => Some(message),
                Err(error) => {
                    debug!(channel = CHANNEL_NAME, chat_id = conversation, %error, "a history entry is not a readable message; left out");
                    None
                }
            }
        })
        .filter(|message| ts_order(&message.origin.ts.0, oldest) == Ordering::Greater)
        .collect();
    messages.sort_by(|a, b| ts_order(&a.origin.ts.0, &b.origin.ts.0));
    messages.truncate(CATCH_UP_LIMIT);
    messages
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    #[test]
    fn ts_values_compare_as_decimals_not_as_text() {
        assert_eq!(ts_order("1700000000.000100", "1700000000.000099"), Ordering::Greater);
        assert_eq!(ts_order("999999999.900000", "1700000000.000001"), Ordering::Less, "fewer digits, older");
        assert_eq!(ts_order("1700000000.5", "1700000000.400000"), Ordering::Greater, "half a second");
        assert_eq!(ts_order("1700000000.000100", "1700000000.000100"), Ordering::Equal);
        assert_eq!(ts_order("nonsense", "1.000001"), Ordering::Less);
    }

    #[test]
    fn a_ts_is_read_as_milliseconds_and_milliseconds_written_as_a_ts() {
        assert_eq!(written_ms("1700000000.123456"), 1_700_000_000_123);
        assert_eq!(ts_at(1_700_000_000_123), "1700000000.123000");
        assert_eq!(ts_order(&ts_at(written_ms("1700000000.123456")), "1700000000.123456"), Ordering::Less);
    }

    #[test]
    fn a_page_listed_newest_first_is_delivered_oldest_first_without_what_is_not_newer() {
        let page = json!({"ok": true, "has_more": false, "messages": [
            {"type": "message", "user": "U1", "text": "third", "ts": "1700000010.000001"},
            {"type": "message", "subtype": "bot_message", "bot_id": "B2", "text": "beep", "ts": "1700000009.000001"},
            {"type": "message", "user": "U1", "text": "no ts, so no message"},
            "not an object",
            {"type": "message", "user": "U1", "text": "first", "ts": "1700000002.000001"},
            {"type": "message", "user": "U1", "text": "seen already", "ts": "1700000001.000001"},
        ]});
        let messages = oldest_first(page, "C1", "1700000001.000001");
        let texts: Vec<_> = messages.iter().map(|m| m.content.as_ref().and_then(|c| c.text.clone())).collect();
        assert_eq!(texts, [Some("first".into()), Some("beep".into()), Some("third".into())]);
        assert!(messages.iter().all(|m| m.origin.channel.as_ref().is_some_and(|c| c.0 == "C1")));
        assert_eq!(oldest_first(json!({"ok": true}), "C1", "1.0"), Vec::new(), "no messages, nothing");
    }
}
