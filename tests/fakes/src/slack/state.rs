//! What the fake Slack remembers: recorded calls, the bot's messages and the users' (from the
//! events the fake made), scripted faults, and the Socket Mode envelopes with their ack state.

use std::collections::{HashMap, HashSet, VecDeque};
use std::time::{SystemTime, UNIX_EPOCH};

use serde_json::{Value, json};
use tokio::time::Instant;

use super::{APP_ID, BOT_ID, BOT_USER_ID, Call, PostedMessage};

/// A scripted answer for the next call of a method.
#[derive(Clone, Debug)]
pub(crate) enum Fault {
    /// HTTP 200 with `{"ok": false, "error": code}`.
    Error(String),
    /// HTTP 429 with `Retry-After: secs` and `{"ok": false, "error": "ratelimited"}`.
    RateLimited(u64),
    /// A bare HTTP status (e.g. 500) with `{"ok": false, "error": "internal_error"}`.
    Status(u16),
    /// Close the connection without an answer, before the method runs.
    DropBeforeApply,
    /// Run the method (its effects stay), then close the connection without the answer.
    ApplyThenDrop,
}

/// A user's message, kept from a `message` event the fake made (or written only to the
/// history, [`FakeSlack::history_only_message`](super::FakeSlack::history_only_message)), so
/// that `conversations.history` and `conversations.replies` show the conversation around the
/// bot's messages (thread parents, their reply counts).
#[derive(Clone, Debug)]
pub(crate) struct UserMessage {
    pub(crate) channel: String,
    pub(crate) ts: String,
    pub(crate) thread_ts: Option<String>,
    /// The user's id; for another app's `bot_message`, its bot id.
    pub(crate) user: String,
    pub(crate) text: String,
    /// Another app's message (`subtype: bot_message` with `bot_id`), not a user's.
    pub(crate) from_bot: bool,
}

/// One message of a conversation as `conversations.history` / `.replies` show it.
#[derive(Clone, Debug)]
pub(crate) struct Listed {
    pub(crate) ts: String,
    pub(crate) thread_ts: Option<String>,
    pub(crate) user: String,
    /// The message object without `metadata` and without the thread summary.
    pub(crate) json: Value,
    pub(crate) metadata: Option<Value>,
}

impl Listed {
    /// A reply in a thread (not the thread's parent).
    pub(crate) fn is_reply(&self) -> bool {
        self.thread_ts.as_ref().is_some_and(|thread| *thread != self.ts)
    }
}

/// A Slack `ts` (`<seconds>.<micros>`) as a number pair, for ordering and `oldest`/`latest`.
pub(crate) fn ts_key(ts: &str) -> (u64, u64) {
    let (secs, micros) = ts.split_once('.').unwrap_or((ts, "0"));
    (secs.parse().unwrap_or(0), micros.parse().unwrap_or(0))
}

/// One `events_api` envelope and what became of it.
#[derive(Clone, Debug)]
pub(crate) struct Envelope {
    pub(crate) envelope_id: String,
    pub(crate) event_id: String,
    pub(crate) payload: Value,
    /// How often it was written to a socket.
    pub(crate) deliveries: u32,
    /// The connection it was last written to; redelivered once that connection is gone.
    pub(crate) on_connection: Option<u64>,
    pub(crate) acked: bool,
    /// Written only to the connection of this rank among the open ones (oldest first),
    /// while it is open; `None`: to whichever connection asks first.
    pub(crate) only_on: Option<usize>,
}

/// A per-channel token bucket for `chat.postMessage`, when rate limits are enforced.
#[derive(Clone, Debug)]
pub(crate) struct Bucket {
    pub(crate) tokens: f64,
    pub(crate) at: Instant,
}

#[derive(Default)]
pub(crate) struct State {
    pub(crate) calls: Vec<Call>,
    /// Every message the bot posted that still exists, in posting order.
    pub(crate) messages: Vec<PostedMessage>,
    /// Users' messages from the `message` events the fake made, in order.
    pub(crate) user_messages: Vec<UserMessage>,
    /// Microseconds added to the current second for unique, increasing `ts` values.
    pub(crate) ts_counter: u64,
    pub(crate) events_made: u64,
    pub(crate) faults: HashMap<String, VecDeque<Fault>>,
    pub(crate) rate_limited: usize,
    pub(crate) enforce_rate_limits: bool,
    pub(crate) buckets: HashMap<String, Bucket>,
    pub(crate) envelopes: Vec<Envelope>,
    /// Connections that got `hello` and have not closed.
    pub(crate) active_connections: HashSet<u64>,
    /// Connections that ever got `hello`.
    pub(crate) connections_opened: u64,
    /// Socket Mode is out: open sockets were dropped and new ones are refused (HTTP 503 on
    /// the WebSocket upgrade) until it is back.
    pub(crate) sockets_closed: bool,
    pub(crate) next_connection: u64,
    /// Acks to throw away as if lost on the wire.
    pub(crate) acks_to_lose: usize,
    pub(crate) lost_acks: usize,
    /// `G…` conversations that are group DMs rather than private channels.
    pub(crate) mpims: HashSet<String>,
    /// Users' files and the bot's uploads.
    pub(crate) files: super::files::Files,
}

impl State {
    /// A fresh Slack timestamp: `<unix seconds>.<6 digits>`, strictly increasing.
    pub(crate) fn next_ts(&mut self) -> String {
        self.ts_counter += 1;
        let secs = SystemTime::now().duration_since(UNIX_EPOCH).map(|d| d.as_secs()).unwrap_or(0);
        format!("{secs}.{:06}", self.ts_counter % 1_000_000)
    }

    pub(crate) fn next_event_id(&mut self) -> String {
        self.events_made += 1;
        format!("Ev{:08}", self.events_made)
    }

    pub(crate) fn take_fault(&mut self, method: &str) -> Option<Fault> {
        let queue = self.faults.get_mut(method)?;
        let fault = queue.pop_front();
        if queue.is_empty() {
            self.faults.remove(method);
        }
        fault
    }

    /// Every message of `channel`, the users' and the bot's, oldest first.
    pub(crate) fn conversation(&self, channel: &str) -> Vec<Listed> {
        let users = self.user_messages.iter().filter(|m| m.channel == channel).map(|m| {
            let mut json = if m.from_bot {
                json!({"type": "message", "subtype": "bot_message", "bot_id": m.user, "username": "another-bot",
                       "text": m.text, "ts": m.ts})
            } else {
                json!({"type": "message", "user": m.user, "text": m.text, "ts": m.ts})
            };
            if let Some(thread_ts) = &m.thread_ts {
                json["thread_ts"] = thread_ts.clone().into();
            }
            Listed { ts: m.ts.clone(), thread_ts: m.thread_ts.clone(), user: m.user.clone(), json, metadata: None }
        });
        let bot = self.messages.iter().filter(|m| m.channel == channel).map(|m| {
            let mut json = json!({
                "type": "message", "user": BOT_USER_ID, "bot_id": BOT_ID, "app_id": APP_ID, "text": m.text, "ts": m.ts,
            });
            if let Some(thread_ts) = &m.thread_ts {
                json["thread_ts"] = thread_ts.clone().into();
            }
            if !m.files.is_empty() {
                json["files"] = m.files.iter().map(|id| json!({"id": id})).collect::<Vec<_>>().into();
                json["upload"] = false.into();
            }
            Listed {
                ts: m.ts.clone(),
                thread_ts: m.thread_ts.clone(),
                user: BOT_USER_ID.to_owned(),
                json,
                metadata: m.metadata.clone(),
            }
        });
        let mut all: Vec<Listed> = users.chain(bot).collect();
        all.sort_by_key(|m| ts_key(&m.ts));
        all
    }

    /// Envelopes to write to `connection`: unacked, and never written or written to a
    /// connection that is gone.
    pub(crate) fn due_for(&mut self, connection: u64) -> Vec<Value> {
        let active = self.active_connections.clone();
        let mut ranked: Vec<u64> = active.iter().copied().collect();
        ranked.sort_unstable();
        let rank = ranked.iter().position(|open| *open == connection);
        let mut due = Vec::new();
        for envelope in self.envelopes.iter_mut().filter(|e| !e.acked) {
            if let Some(only) = envelope.only_on
                && only < ranked.len()
                && rank != Some(only)
            {
                continue;
            }
            let gone = envelope.on_connection.is_none_or(|on| on != connection && !active.contains(&on));
            if gone {
                let frame = serde_json::json!({
                    "envelope_id": envelope.envelope_id,
                    "type": "events_api",
                    "accepts_response_payload": false,
                    "retry_attempt": envelope.deliveries,
                    "retry_reason": if envelope.deliveries > 0 { "timeout" } else { "" },
                    "payload": envelope.payload,
                });
                envelope.deliveries += 1;
                envelope.on_connection = Some(connection);
                due.push(frame);
            }
        }
        due
    }

    /// Takes a `chat.postMessage` token for `channel`: a burst of 3, then one a second.
    pub(crate) fn take_token(&mut self, channel: &str, now: Instant) -> Result<(), u64> {
        const BURST: f64 = 3.0;
        let bucket = self.buckets.entry(channel.to_owned()).or_insert(Bucket { tokens: BURST, at: now });
        let refill = now.saturating_duration_since(bucket.at).as_secs_f64();
        bucket.tokens = (bucket.tokens + refill).min(BURST);
        bucket.at = now;
        if bucket.tokens >= 1.0 {
            bucket.tokens -= 1.0;
            Ok(())
        } else {
            Err(1)
        }
    }
}
