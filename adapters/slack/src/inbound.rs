//! The path every Slack event takes to the core, whichever transport brought it.
//!
//! Socket Mode envelopes and Events API requests both end in [`Inbound::receive`]:
//!
//! 1. an `event_id` already accepted is a redelivery (Slack retries an unanswered request with
//!    `X-Slack-Retry-Num`, and redelivers an unacknowledged envelope after a reconnect): it is
//!    confirmed again without reaching the core;
//! 2. the event is normalized; skipped events (edits, joins, the bot's own posts) are
//!    confirmed at once;
//! 3. the message goes to the core with an [`Ack`], and the transport confirms it to Slack
//!    (envelope ack, HTTP 200) only once the core has durably accepted it, within
//!    [`ACK_TIMEOUT`] — inside Slack's 3-second limit. A message not accepted in time is not
//!    confirmed, so Slack delivers it again; the core's dedupe (channel + chat + thread +
//!    `ts`) makes sure a message that did get recorded still runs once.
//!
//! The same message arriving as both `message` and `app_mention` (two event ids) has the
//! same channel and `ts`, so the core's dedupe runs it once too.
//!
//! Messages Socket Mode never pushed, read back from history after a reconnect
//! (`catch_up.rs`), take [`Inbound::deliver_missed`]: the same normalization and the same
//! way to the core, without an event id or Slack's deadline. Every message the core accepts
//! moves its conversation's position (the last `ts` seen there), which is where the next
//! catch-up starts.

use std::collections::{HashMap, HashSet, VecDeque};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::time::Duration;

use ferry_channel::catch_up::PositionKeeper;
use ferry_channel::{Ack, AckOutcome, AckReceiver, ChatKind, InboundDelivery};
use slack_morphism::api::SlackApiConversationsInfoRequest;
use slack_morphism::events::{SlackEventCallbackBody, SlackMessageEvent, SlackPushEventCallback};
use slack_morphism::{SlackApiToken, SlackChannelId};
use tokio::sync::mpsc;
use tokio::time::Instant;
use tracing::{debug, warn};

use crate::CHANNEL_NAME;
use crate::catch_up::written_ms;
use crate::client::Client;
use crate::normalize::{BotIdentity, Normalized, Skip, normalize};

/// How long a delivery waits for the core's accept before it is left unconfirmed. Slack
/// wants an answer within 3 seconds; the rest is margin for the network.
pub const ACK_TIMEOUT: Duration = Duration::from_millis(2500);

/// How long a `conversations.info` lookup (for an `app_mention` in a `G…` conversation) may
/// take out of the ack budget before the conversation is taken for a channel.
const LOOKUP_TIMEOUT: Duration = Duration::from_millis(800);

/// Accepted event ids remembered for answering redeliveries without the core. Slack retries
/// within minutes; the core's persisted dedupe covers anything older.
const RECENT_EVENTS: usize = 2048;

/// What became of one event, and so what the transport answers Slack.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Received {
    /// The core recorded the message.
    Accepted,
    /// An event id accepted before: a retry or redelivery.
    Duplicate,
    /// Not a message for the core.
    Skipped(Skip),
    /// The core did not accept it in time (or is gone): Slack must deliver it again.
    NotAccepted,
}

impl Received {
    /// Whether Slack may be told the event was received.
    pub(crate) fn confirm(self) -> bool {
        !matches!(self, Received::NotAccepted)
    }
}

/// What became of one message read back in a catch-up.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Delivered {
    /// Handed to the core.
    Sent,
    /// Not a message for the core (the bot's own, an edit…); its position moved past it.
    Skipped,
    /// The core dropped the inbound stream.
    CoreGone,
}

/// Shared by the transports: who the bot is, where messages go, and what was seen.
pub(crate) struct Inbound {
    pub(crate) account_id: String,
    pub(crate) bot: BotIdentity,
    /// The core's side of the inbound stream; closed when the core drops the stream.
    pub(crate) tx: mpsc::Sender<InboundDelivery>,
    pub(crate) client: Arc<Client>,
    /// The bot token: `conversations.info` and `conversations.history`.
    pub(crate) token: SlackApiToken,
    recent: Mutex<RecentEvents>,
    /// Conversation kinds learnt from `conversations.info`, by channel id.
    kinds: Mutex<HashMap<String, ChatKind>>,
    /// The last message the core accepted in each recently active conversation: where a
    /// catch-up after a reconnect starts reading (`catch_up.rs`).
    pub(crate) positions: PositionKeeper,
    /// Held by the catch-up that runs, so two reconnects in a row do not read the same
    /// history side by side.
    pub(crate) catching_up: tokio::sync::Mutex<()>,
}

impl Inbound {
    pub(crate) fn new(
        account_id: String,
        bot: BotIdentity,
        tx: mpsc::Sender<InboundDelivery>,
        client: Arc<Client>,
        token: SlackApiToken,
        positions: PositionKeeper,
    ) -> Self {
        Self {
            account_id,
            bot,
            tx,
            client,
            token,
            recent: Mutex::new(RecentEvents::default()),
            kinds: Mutex::new(HashMap::new()),
            positions,
            catching_up: tokio::sync::Mutex::new(()),
        }
    }

    /// Takes one event to the core and reports whether Slack may be told it arrived.
    pub(crate) async fn receive(&self, callback: &SlackPushEventCallback) -> Received {
        // One budget for the whole way, lookup included: Slack's 3 s count from its send.
        let deadline = Instant::now() + ACK_TIMEOUT;
        let event_id = callback.event_id.0.as_str();
        if lock(&self.recent).contains(event_id) {
            debug!(channel = CHANNEL_NAME, account_id = %self.account_id, event_id, "event redelivered; already accepted");
            return Received::Duplicate;
        }
        let normalized = match normalize(&callback.event, &self.bot, &self.account_id) {
            Ok(normalized) => normalized,
            Err(skip) => {
                debug!(channel = CHANNEL_NAME, account_id = %self.account_id, event_id, reason = skip, "event skipped");
                lock(&self.recent).insert(event_id);
                return Received::Skipped(skip);
            }
        };
        debug!(
            channel = CHANNEL_NAME,
            account_id = %self.account_id,
            chat_id = %normalized.message.chat.id,
            event_id,
            ts = %normalized.message.message_id,
            "message received"
        );
        let position = Position::of(&normalized);
        let decided = tokio::time::timeout_at(deadline, async {
            let receiver = self.send(normalized, deadline).await?;
            Some(receiver.outcome().await)
        })
        .await;
        if let Ok(Some(AckOutcome::Accepted)) = decided {
            lock(&self.recent).insert(event_id);
            position.record(&self.positions);
            Received::Accepted
        } else {
            debug!(channel = CHANNEL_NAME, account_id = %self.account_id, event_id, "event not accepted by the core in time; Slack will deliver it again");
            Received::NotAccepted
        }
    }

    /// Takes one message read back from history to the core, as a pushed `message` event
    /// would go; its conversation's position moves once the core accepts it (or at once if
    /// it is skipped). No event id (history has none): the core's dedupe by `ts` keeps a
    /// message it already took from running twice.
    pub(crate) async fn deliver_missed(&self, event: SlackMessageEvent) -> Delivered {
        let (conversation, ts) = (event.origin.channel.as_ref().map(|c| c.0.clone()), event.origin.ts.0.clone());
        let normalized = match normalize(&SlackEventCallbackBody::Message(event), &self.bot, &self.account_id) {
            Ok(normalized) => normalized,
            Err(skip) => {
                debug!(channel = CHANNEL_NAME, account_id = %self.account_id, chat_id = ?conversation, %ts, reason = skip, "missed message skipped");
                if let Some(conversation) = conversation {
                    self.positions.seen(&conversation, &ts, written_ms(&ts));
                }
                return Delivered::Skipped;
            }
        };
        debug!(channel = CHANNEL_NAME, account_id = %self.account_id, chat_id = %normalized.message.chat.id, %ts, "missed message read from history");
        let position = Position::of(&normalized);
        let Some(receiver) = self.send(normalized, Instant::now() + ACK_TIMEOUT).await else {
            return Delivered::CoreGone;
        };
        let (positions, account_id) = (self.positions.clone(), self.account_id.clone());
        tokio::spawn(async move {
            match receiver.outcome().await {
                AckOutcome::Accepted => position.record(&positions),
                AckOutcome::Abandoned => warn!(
                    channel = CHANNEL_NAME,
                    %account_id,
                    chat_id = %position.conversation,
                    ts = %position.ts,
                    "the core let go of a missed Slack message without recording it; the next catch-up reads it again"
                ),
            }
        });
        Delivered::Sent
    }

    /// Learns the conversation's kind if the message did not tell (within `deadline`), then
    /// hands the message to the core; its ack's receiver, or `None` if the core is gone.
    async fn send(&self, normalized: Normalized, deadline: Instant) -> Option<AckReceiver> {
        let mut message = normalized.message;
        if normalized.kind_unknown {
            message.chat.kind = self.kind_of(&message.chat.id, deadline).await;
        }
        let (ack, receiver) = Ack::pair();
        self.tx.send(InboundDelivery { message, ack }).await.ok()?;
        Some(receiver)
    }

    /// A private channel or a group DM, by `conversations.info`; a channel if Slack does not
    /// say in time (the safer reading: group policy and mention gating apply).
    async fn kind_of(&self, channel: &str, deadline: Instant) -> ChatKind {
        if let Some(kind) = lock(&self.kinds).get(channel) {
            return *kind;
        }
        let request = SlackApiConversationsInfoRequest::new(SlackChannelId(channel.to_owned()));
        let session = self.client.open_session(&self.token);
        let lookup_deadline = deadline.min(Instant::now() + LOOKUP_TIMEOUT);
        match tokio::time::timeout_at(lookup_deadline, session.conversations_info(&request)).await {
            Ok(Ok(info)) => {
                let flags = &info.channel.flags;
                let kind = if flags.is_im == Some(true) {
                    ChatKind::Direct
                } else if flags.is_mpim == Some(true) {
                    ChatKind::Group
                } else {
                    ChatKind::Channel
                };
                lock(&self.kinds).insert(channel.to_owned(), kind);
                kind
            }
            Ok(Err(error)) => {
                warn!(channel = CHANNEL_NAME, account_id = %self.account_id, chat_id = channel, %error, "conversations.info failed; treating the conversation as a channel");
                ChatKind::Channel
            }
            Err(_) => {
                warn!(channel = CHANNEL_NAME, account_id = %self.account_id, chat_id = channel, "conversations.info timed out; treating the conversation as a channel");
                ChatKind::Channel
            }
        }
    }
}

/// Where a message sits in its conversation: what its acceptance records.
struct Position {
    conversation: String,
    ts: String,
}

impl Position {
    fn of(normalized: &Normalized) -> Self {
        Self { conversation: normalized.message.chat.id.clone(), ts: normalized.message.message_id.clone() }
    }

    fn record(&self, positions: &PositionKeeper) {
        positions.seen(&self.conversation, &self.ts, written_ms(&self.ts));
    }
}

fn lock<T>(mutex: &Mutex<T>) -> MutexGuard<'_, T> {
    mutex.lock().unwrap_or_else(PoisonError::into_inner)
}

/// A bounded set of event ids, oldest forgotten first.
#[derive(Default)]
struct RecentEvents {
    ids: HashSet<String>,
    order: VecDeque<String>,
}

impl RecentEvents {
    fn contains(&self, id: &str) -> bool {
        self.ids.contains(id)
    }

    fn insert(&mut self, id: &str) {
        if !self.ids.insert(id.to_owned()) {
            return;
        }
        self.order.push_back(id.to_owned());
        if self.order.len() > RECENT_EVENTS
            && let Some(oldest) = self.order.pop_front()
        {
            self.ids.remove(&oldest);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn recent_events_forget_the_oldest_beyond_the_bound() {
        let mut recent = RecentEvents::default();
        for i in 0..=RECENT_EVENTS {
            recent.insert(&format!("Ev{i}"));
        }
        recent.insert("Ev5");
        assert!(!recent.contains("Ev0"));
        assert!(recent.contains("Ev1") && recent.contains(&format!("Ev{RECENT_EVENTS}")));
        assert_eq!(recent.order.len(), RECENT_EVENTS);
    }

    #[test]
    fn only_an_unaccepted_event_is_left_unconfirmed() {
        assert!(Received::Accepted.confirm() && Received::Duplicate.confirm() && Received::Skipped("x").confirm());
        assert!(!Received::NotAccepted.confirm());
    }
}
