//! Finding a message the bot already sent by its idempotency key ([`Channel::find_sent`]), so
//! that a send whose outcome was unknown (a timeout, a dropped connection, a restart
//! mid-send) is adopted instead of repeated: Slack has no idempotency key of its own, so the
//! adapter declares `SendReconciliation::Lookup`.
//!
//! `send` posts every message that has a key with Slack message metadata
//! `{"event_type": "ferry_reply", "event_payload": {"idempotency_key": "<key>"}}` (see
//! [`metadata`]). The lookup reads the conversation back with `include_all_metadata=true`:
//! - a target in a thread: `conversations.replies` of that thread, from [`LOOKBACK`] ago
//!   (`oldest`, so the recent end of a long thread is on the first page);
//! - a top-level target: `conversations.history`, the newest [`PAGE_LIMIT`] top-level
//!   messages.
//!
//! The thread is the one `send` posted in: the target's, or the one under the message a
//! reply answers (`reply_to_mode` first or all).
//!
//! Only the bot's own messages count: another Ferry bot in the same channel may use the same
//! keys. The calls need the `channels:history`, `groups:history`, `im:history` and
//! `mpim:history` scopes, which the `message.*` event subscriptions need anyway.
//!
//! The calls go through slack-morphism's generic `http_get` (same client, same error
//! classification as every other call) into the few fields read here: its typed
//! `conversations.replies` request has no `include_all_metadata`, and its typed messages
//! would fail a whole page on another app's metadata whose payload values are not strings.
//!
//! [`Channel::find_sent`]: ferry_channel::Channel::find_sent

use std::collections::HashMap;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use serde::Deserialize;
use serde_json::Value;
use slack_morphism::SlackMessageMetadata;
use slack_morphism::errors::SlackClientError;
use slack_morphism::hyper_tokio::SlackClientHyperHttpsConnector;

use crate::normalize::BotIdentity;

/// The metadata `event_type` of every keyed message Ferry posts.
pub(crate) const EVENT_TYPE: &str = "ferry_reply";

/// The `event_payload` field holding the idempotency key.
pub(crate) const KEY_FIELD: &str = "idempotency_key";

/// Messages read per call. The core looks within a reply's delivery deadline (minutes), so
/// the message sought is among the newest; Slack allows up to 999 (history) or 1000.
pub(crate) const PAGE_LIMIT: u16 = 200;

/// How far back thread replies are read. Well beyond
/// the core's delivery deadline (10 minutes by default), with room for clock skew.
pub(crate) const LOOKBACK: Duration = Duration::from_secs(60 * 60);

type Session<'a> = slack_morphism::SlackClientSession<'a, SlackClientHyperHttpsConnector>;

/// The metadata a message with this idempotency key is posted with.
pub(crate) fn metadata(idempotency_key: &str) -> SlackMessageMetadata {
    SlackMessageMetadata::new(EVENT_TYPE.to_owned())
        .with_event_payload(HashMap::from([(KEY_FIELD.to_owned(), idempotency_key.to_owned())]))
}

/// One page of `conversations.history` or `conversations.replies`, as far as it is read.
#[derive(Debug, Deserialize)]
struct Page {
    #[serde(default)]
    messages: Vec<Listed>,
}

/// A message in a page: who posted it, and its metadata.
#[derive(Debug, Deserialize)]
struct Listed {
    ts: String,
    user: Option<String>,
    bot_id: Option<String>,
    metadata: Option<Metadata>,
}

/// Message metadata as any app may have posted it.
#[derive(Debug, Deserialize)]
struct Metadata {
    #[serde(default)]
    event_type: String,
    event_payload: Option<Value>,
}

impl Listed {
    /// Posted by this bot with this idempotency key.
    fn carries(&self, key: &str, bot: &BotIdentity) -> bool {
        let ours = self.user.as_deref() == Some(bot.user_id.as_str())
            || (bot.bot_id.is_some() && self.bot_id.as_deref() == bot.bot_id.as_deref());
        let keyed = self.metadata.as_ref().is_some_and(|metadata| {
            metadata.event_type == EVENT_TYPE
                && metadata.event_payload.as_ref().and_then(|payload| payload.get(KEY_FIELD)).and_then(Value::as_str)
                    == Some(key)
        });
        ours && keyed
    }
}

/// Where to look, and for what.
pub(crate) struct Query<'a> {
    pub(crate) channel: &'a str,
    /// The thread's parent `ts`, for a target in a thread.
    pub(crate) thread: Option<&'a str>,
    pub(crate) key: &'a str,
}

/// The `ts` of the bot's message carrying `query.key`, if there is one. An error is the
/// failed call's, for the adapter's usual classification.
pub(crate) async fn find_sent(
    session: &Session<'_>,
    bot: &BotIdentity,
    query: &Query<'_>,
) -> Result<Option<String>, SlackClientError> {
    if let Some(thread) = query.thread {
        let oldest = oldest_ts(SystemTime::now());
        let replies = match replies(session, query.channel, thread, &oldest).await {
            // No such thread (any more): nothing was posted in it.
            Err(SlackClientError::ApiError(error)) if error.code == "thread_not_found" => return Ok(None),
            other => other?,
        };
        return Ok(find(&replies, query.key, bot));
    }
    Ok(find(&history(session, query.channel).await?, query.key, bot))
}

fn find(messages: &[Listed], key: &str, bot: &BotIdentity) -> Option<String> {
    messages.iter().find(|message| message.carries(key, bot)).map(|message| message.ts.clone())
}

async fn history(session: &Session<'_>, channel: &str) -> Result<Vec<Listed>, SlackClientError> {
    let params = vec![
        ("channel", Some(channel.to_owned())),
        ("limit", Some(PAGE_LIMIT.to_string())),
        ("include_all_metadata", Some("true".to_owned())),
    ];
    let page: Page = session.http_session_api.http_get("conversations.history", &params, None).await?;
    Ok(page.messages)
}

async fn replies(
    session: &Session<'_>,
    channel: &str,
    thread: &str,
    oldest: &str,
) -> Result<Vec<Listed>, SlackClientError> {
    let params = vec![
        ("channel", Some(channel.to_owned())),
        ("ts", Some(thread.to_owned())),
        ("oldest", Some(oldest.to_owned())),
        ("limit", Some(PAGE_LIMIT.to_string())),
        ("include_all_metadata", Some("true".to_owned())),
    ];
    let page: Page = session.http_session_api.http_get("conversations.replies", &params, None).await?;
    Ok(page.messages)
}

/// The Slack `ts` [`LOOKBACK`] before `now`.
fn oldest_ts(now: SystemTime) -> String {
    let since = now.checked_sub(LOOKBACK).unwrap_or(UNIX_EPOCH);
    let seconds = since.duration_since(UNIX_EPOCH).map(|elapsed| elapsed.as_secs()).unwrap_or(0);
    format!("{seconds}.000000")
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    fn bot() -> BotIdentity {
        BotIdentity { user_id: "UBOT".to_owned(), bot_id: Some("BBOT".to_owned()) }
    }

    fn page(messages: Value) -> Vec<Listed> {
        serde_json::from_value::<Page>(json!({"ok": true, "messages": messages})).unwrap().messages
    }

    #[test]
    fn only_the_bots_own_message_with_the_key_matches() {
        let messages = page(json!([
            {"ts": "1.000004", "user": "UOTHER", "bot_id": "BOTHER",
             "metadata": {"event_type": "ferry_reply", "event_payload": {"idempotency_key": "d1:0"}}},
            {"ts": "1.000003", "user": "UBOT", "metadata": {"event_type": "other_app", "event_payload": {"idempotency_key": "d1:0"}}},
            {"ts": "1.000002", "user": "U1", "text": "no metadata"},
            {"ts": "1.000001", "bot_id": "BBOT",
             "metadata": {"event_type": "ferry_reply", "event_payload": {"idempotency_key": "d1:0"}}},
        ]));
        assert_eq!(find(&messages, "d1:0", &bot()).as_deref(), Some("1.000001"));
        assert_eq!(find(&messages, "d1:1", &bot()), None);
    }

    #[test]
    fn another_apps_metadata_of_any_shape_does_not_fail_the_page() {
        let messages = page(json!([
            {"ts": "1.000002", "user": "U2", "metadata": {"event_type": "x", "event_payload": {"n": 1, "deep": {"a": [true]}}}},
            {"ts": "1.000001", "user": "U3", "metadata": {"event_payload": {}}},
        ]));
        assert_eq!(messages.len(), 2);
    }

    #[test]
    fn the_metadata_carries_the_key_under_ferrys_event_type() {
        let value = serde_json::to_value(metadata("d42:preview")).unwrap();
        assert_eq!(value, json!({"event_type": "ferry_reply", "event_payload": {"idempotency_key": "d42:preview"}}));
    }

    #[test]
    fn thread_replies_are_read_from_the_lookback_on() {
        assert_eq!(oldest_ts(UNIX_EPOCH + Duration::from_secs(7200)), "3600.000000");
    }
}
