//! What the fake Discord keeps: channels, messages, recorded calls, scripted faults, the
//! outbound limits, the gateway session's event log, and the CDN's files.

use std::collections::{BTreeMap, HashMap, VecDeque};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use serde_json::{Value, json};
use tokio::time::Instant;

use super::media::Cdn;
use super::{Call, DiscordUser, NONCE_WINDOW, NonceReplay, SentMessage};

/// Discord channel types used by the fake (API docs, "Channel Types").
pub(crate) const GUILD_TEXT: u8 = 0;
pub(crate) const DM: u8 = 1;
pub(crate) const GROUP_DM: u8 = 3;
pub(crate) const PUBLIC_THREAD: u8 = 11;

/// Discord's per-channel message limit the fake enforces: 5 per 5 s.
pub(crate) const CHANNEL_BUDGET: usize = 5;
pub(crate) const CHANNEL_WINDOW: Duration = Duration::from_secs(5);

/// A channel the fake knows.
#[derive(Clone, Debug)]
pub(crate) struct ChannelInfo {
    pub(crate) kind: u8,
    pub(crate) guild_id: Option<u64>,
    pub(crate) parent_id: Option<u64>,
}

impl ChannelInfo {
    pub(crate) fn to_json(&self, id: u64) -> Value {
        let mut channel = json!({ "id": id.to_string(), "type": self.kind, "name": format!("channel-{id}") });
        if let Some(guild) = self.guild_id {
            channel["guild_id"] = guild.to_string().into();
        }
        if let Some(parent) = self.parent_id {
            channel["parent_id"] = parent.to_string().into();
        }
        channel
    }
}

/// A message in a channel: a user's (injected) or the bot's (sent through REST).
#[derive(Clone, Debug)]
pub(crate) struct StoredMessage {
    pub(crate) json: Value,
    /// For the bot's messages: how they read now.
    pub(crate) sent: Option<SentMessage>,
}

/// A scripted answer for the next REST call to a channel.
#[derive(Clone, Debug)]
pub(crate) enum Fault {
    /// 429 with this `retry_after` (seconds).
    RateLimited(f64),
    /// This status with a Discord JSON error body.
    Status(u16),
    /// Close the connection without an answer, before the call does anything.
    DropBeforeApply,
    /// Run the call (its effects stay), then close the connection without the answer.
    ApplyThenDrop,
}

/// A window during which every message call to one channel is answered 429.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Storm {
    pub(crate) until: Instant,
    /// The `retry_after` every answer announces (seconds); may be far shorter than the storm.
    pub(crate) retry_after: f64,
}

/// A nonce a create used, for `enforce_nonce` deduplication.
#[derive(Clone, Copy, Debug)]
pub(crate) struct NonceUse {
    pub(crate) message_id: u64,
    pub(crate) at: Instant,
}

pub(crate) struct State {
    pub(crate) bot: DiscordUser,
    pub(crate) channels: HashMap<u64, ChannelInfo>,
    /// Every message by id (ids are unique across channels, like snowflakes).
    pub(crate) messages: BTreeMap<u64, StoredMessage>,
    pub(crate) next_id: u64,
    pub(crate) calls: Vec<Call>,
    pub(crate) typing: Vec<u64>,
    pub(crate) faults: HashMap<u64, VecDeque<Fault>>,
    /// Scripted 429s (`retry_after` in seconds) for the next history reads of a channel.
    pub(crate) history_faults: HashMap<u64, VecDeque<f64>>,
    /// History reads answered with a page.
    pub(crate) history_reads: usize,
    /// Channels answering every message call with 429 until the storm ends.
    pub(crate) storms: HashMap<u64, Storm>,
    /// The nonces of the bot's creates, by (channel, nonce): what `enforce_nonce` checks.
    pub(crate) nonces: HashMap<(u64, String), NonceUse>,
    /// Creates answered with an existing message because their nonce repeated.
    pub(crate) nonce_replays: Vec<NonceReplay>,
    pub(crate) enforce_limits: bool,
    pub(crate) windows: HashMap<u64, VecDeque<Instant>>,
    pub(crate) rate_limited: usize,
    pub(crate) gateway: Session,
    /// The files the CDN serves (`media.rs`).
    pub(crate) cdn: Cdn,
}

/// The gateway session: its id, its event log (the index + 1 is the sequence number) and
/// what the connected client has seen.
#[derive(Default)]
pub(crate) struct Session {
    pub(crate) id: Option<String>,
    pub(crate) sessions_started: u64,
    /// Dispatches of the current session (`READY` first), each with its `s`.
    pub(crate) log: Vec<Value>,
    /// Events injected while no session existed, dispatched after the next `READY`.
    pub(crate) waiting: Vec<(String, Value)>,
    pub(crate) identifies: usize,
    pub(crate) resumes: usize,
    pub(crate) heartbeats: usize,
    /// The next resume replays the whole log instead of what the client missed.
    pub(crate) replay_all_on_resume: bool,
    /// A client is connected and its session live (after READY or RESUMED).
    pub(crate) live: bool,
    /// The connection the session is live on, of those opened so far (numbered from 1).
    pub(crate) live_on: u64,
    pub(crate) connections_opened: u64,
}

impl State {
    pub(crate) fn new(bot: DiscordUser) -> Self {
        Self {
            bot,
            channels: HashMap::new(),
            messages: BTreeMap::new(),
            // Snowflake-sized, increasing like real ids.
            next_id: 1_300_000_000_000_000_000,
            calls: Vec::new(),
            typing: Vec::new(),
            faults: HashMap::new(),
            history_faults: HashMap::new(),
            history_reads: 0,
            storms: HashMap::new(),
            nonces: HashMap::new(),
            nonce_replays: Vec::new(),
            enforce_limits: true,
            windows: HashMap::new(),
            rate_limited: 0,
            gateway: Session::default(),
            cdn: Cdn::default(),
        }
    }

    pub(crate) fn next_id(&mut self) -> u64 {
        self.next_id += 1;
        self.next_id
    }

    /// A `Message` object as Discord sends it in `MESSAGE_CREATE` and REST answers.
    pub(crate) fn message_json(
        &self,
        id: u64,
        channel_id: u64,
        author: &DiscordUser,
        content: &str,
        reply_to: Option<u64>,
    ) -> Value {
        let guild_id = self.channels.get(&channel_id).and_then(|channel| channel.guild_id);
        let mentions: Vec<Value> =
            mentioned_ids(content).into_iter().filter(|id| *id == self.bot.id).map(|_| self.bot.to_json()).collect();
        let mut message = json!({
            "id": id.to_string(),
            "channel_id": channel_id.to_string(),
            "author": author.to_json(),
            "content": content,
            "timestamp": timestamp(),
            "edited_timestamp": null,
            "tts": false,
            "mention_everyone": false,
            "mentions": mentions,
            "mention_roles": [],
            "attachments": [],
            "embeds": [],
            "pinned": false,
            "type": if reply_to.is_some() { 19 } else { 0 },
        });
        if let Some(guild) = guild_id {
            message["guild_id"] = guild.to_string().into();
        }
        if let Some(reply_to) = reply_to {
            message["message_reference"] =
                json!({ "message_id": reply_to.to_string(), "channel_id": channel_id.to_string() });
            if let Some(replied) = self.messages.get(&reply_to) {
                message["referenced_message"] = replied.json.clone();
            }
        }
        message
    }

    /// Counts a message call to `channel` against its budget, or says how long to wait.
    pub(crate) fn admit(&mut self, channel: u64, now: Instant) -> Result<(), Duration> {
        if !self.enforce_limits {
            return Ok(());
        }
        let window = self.windows.entry(channel).or_default();
        while window.front().is_some_and(|at| now.duration_since(*at) >= CHANNEL_WINDOW) {
            window.pop_front();
        }
        if window.len() >= CHANNEL_BUDGET
            && let Some(oldest) = window.front()
        {
            return Err(CHANNEL_WINDOW.saturating_sub(now.duration_since(*oldest)));
        }
        window.push_back(now);
        Ok(())
    }

    /// The bot's message created in `channel` under `nonce` within [`NONCE_WINDOW`] before
    /// `now`, if it still exists (the fake's choice for a deleted one: a repeat creates anew).
    pub(crate) fn created_under(&self, channel: u64, nonce: &str, now: Instant) -> Option<u64> {
        let earlier = self.nonces.get(&(channel, nonce.to_owned()))?;
        let open = now.saturating_duration_since(earlier.at) < NONCE_WINDOW;
        (open && self.messages.contains_key(&earlier.message_id)).then_some(earlier.message_id)
    }

    /// Appends a dispatch to the session log (or the waiting list when there is no session).
    pub(crate) fn dispatch(&mut self, event: &str, data: Value) {
        if self.gateway.id.is_none() {
            self.gateway.waiting.push((event.to_owned(), data));
            return;
        }
        let seq = self.gateway.log.len() + 1;
        self.gateway.log.push(json!({ "op": 0, "t": event, "s": seq, "d": data }));
    }
}

/// The user ids in `<@id>` / `<@!id>` mentions in a text.
pub(crate) fn mentioned_ids(content: &str) -> Vec<u64> {
    content
        .split("<@")
        .skip(1)
        .filter_map(|rest| rest.trim_start_matches('!').split('>').next()?.parse().ok())
        .collect()
}

/// Now as an ISO 8601 timestamp, as Discord writes them.
pub(crate) fn timestamp() -> String {
    let secs = unix_seconds();
    let (days, rem) = (secs / 86_400, secs % 86_400);
    let (year, month, day) = civil_from_days(days as i64);
    format!("{year:04}-{month:02}-{day:02}T{:02}:{:02}:{:02}.000000+00:00", rem / 3600, rem % 3600 / 60, rem % 60)
}

/// Seconds since 1970-01-01, by the system clock.
pub(crate) fn unix_seconds() -> u64 {
    SystemTime::now().duration_since(UNIX_EPOCH).map(|d| d.as_secs()).unwrap_or(0)
}

/// Days since 1970-01-01 → (year, month, day), Howard Hinnant's algorithm.
fn civil_from_days(days: i64) -> (i64, u32, u32) {
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097);
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let day = (doy - (153 * mp + 2) / 5 + 1) as u32;
    let month = if mp < 10 { mp + 3 } else { mp - 9 } as u32;
    let year = yoe + era * 400 + i64::from(month <= 2);
    (year, month, day)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn dates_convert_like_the_calendar() {
        assert_eq!(civil_from_days(0), (1970, 1, 1));
        assert_eq!(civil_from_days(19_723), (2024, 1, 1));
    }

    #[test]
    fn a_nonce_repeats_only_within_the_window_and_while_its_message_exists() {
        let mut state = State::new(DiscordUser::bot(1, "bot"));
        let at = Instant::now();
        state.messages.insert(7, StoredMessage { json: Value::Null, sent: None });
        state.nonces.insert((10, "n".to_owned()), NonceUse { message_id: 7, at });
        let just_inside = at + NONCE_WINDOW - Duration::from_millis(1);
        assert_eq!(state.created_under(10, "n", just_inside), Some(7));
        assert_eq!(state.created_under(10, "n", at + NONCE_WINDOW), None, "the window has closed");
        assert_eq!(state.created_under(11, "n", at), None, "another channel");
        assert_eq!(state.created_under(10, "m", at), None, "another nonce");
        state.messages.remove(&7);
        assert_eq!(state.created_under(10, "n", at), None, "deleted since");
    }

    #[test]
    fn mentions_are_found_in_both_forms() {
        assert_eq!(mentioned_ids("<@12> hi <@!34> and <#5>"), vec![12, 34]);
    }
}
