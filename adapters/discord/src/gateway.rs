//! The gateway side: serenity's event handler and the task that turns its messages into
//! deliveries for the core.
//!
//! The handler does nothing but put the message on an unbounded queue and return, so the
//! shard runner (which also sends heartbeats) is never held up — not by the core, not by a
//! REST lookup, and never by a run (SPEC §10: "the gateway handler never blocks on a run").
//! The queue is unbounded on purpose: if the core falls behind, messages wait in memory
//! rather than stalling the connection until Discord drops it.
//!
//! The [`Forwarder`] task works that queue in order:
//! 1. serenity runs each handler call in its own task, so two messages that arrive together
//!    can reach the queue swapped; the forwarder takes what is queued together and orders it
//!    by message id (Discord ids are snowflakes, increasing with creation time);
//! 2. messages already forwarded are dropped (a resumed session that replays events);
//! 3. the message's channel is resolved once per channel over REST (DM or group DM; guild
//!    channel or thread, and a thread's parent) and cached;
//! 4. the normalized message goes to the core with an [`Ack`]. Discord has no delivery
//!    confirmation to hold back, so an abandoned ack is only logged; the core's persisted
//!    dedupe (by channel, account, chat, thread and message id) is what keeps a replayed
//!    message from running twice across restarts.
//!
//! READY and RESUMED are queued too, as [`GatewayEvent::Connected`]: after each, the
//! forwarder first reads what the channels it saw lately missed (`catch_up.rs`), then goes
//! on with what the gateway delivers. It keeps the last message it saw per channel in a
//! [`PositionKeeper`], moved only past what the core accepted (or the adapter skipped).

use std::collections::{HashMap, HashSet, VecDeque};
use std::num::NonZeroU64;
use std::sync::Arc;
use std::time::Duration;

use ferry_channel::catch_up::PositionKeeper;
use ferry_channel::{Ack, AckOutcome, InboundDelivery, IngressCursor};
use serde_json::Value;
use serenity::all::{Context, EventHandler, Message, Ready, ResumedEvent};
use serenity::model::id::{ChannelId, MessageId};
use tokio::sync::{mpsc, oneshot};
use tracing::{debug, info, warn};

use crate::CHANNEL_NAME;
use crate::catch_up::{missed, snowflake_order, written_ms};
use crate::normalize::{BotIdentity, Place, normalize};
use crate::rest::{CallError, Rest};

/// Message ids remembered for dropping replays. A resume replays at most the events the
/// gateway buffered for the session, far fewer than this.
const REMEMBERED_MESSAGES: usize = 4096;

/// Attempts at resolving a channel before it is taken to be a plain channel (or a DM).
const LOOKUP_ATTEMPTS: u32 = 3;

/// Discord channel types (API docs, "Channel Types").
const DM: u64 = 1;
const GROUP_DM: u64 = 3;
const THREAD_TYPES: [u64; 3] = [10, 11, 12];

/// What the handler queues for the forwarder.
#[derive(Debug)]
pub(crate) enum GatewayEvent {
    /// A `MESSAGE_CREATE`.
    Message(Box<Message>),
    /// The session is live again (READY or RESUMED): time to catch up on history.
    Connected,
}

/// Serenity's event handler: hands messages over and returns at once.
pub(crate) struct Handler {
    pub(crate) tx: mpsc::UnboundedSender<GatewayEvent>,
    pub(crate) account_id: String,
    /// READYs seen: a second one means the session was lost and a new one started.
    pub(crate) sessions: std::sync::atomic::AtomicU32,
}

impl Handler {
    pub(crate) fn new(tx: mpsc::UnboundedSender<GatewayEvent>, account_id: &str) -> Self {
        Self { tx, account_id: account_id.to_owned(), sessions: std::sync::atomic::AtomicU32::new(0) }
    }
}

#[serenity::async_trait]
impl EventHandler for Handler {
    async fn message(&self, _ctx: Context, message: Message) {
        // Never awaits: the forwarder does the rest on its own task.
        if self.tx.send(GatewayEvent::Message(Box::new(message))).is_err() {
            debug!(channel = CHANNEL_NAME, account_id = %self.account_id, "message after the channel stopped; dropped");
        }
    }

    async fn ready(&self, _ctx: Context, ready: Ready) {
        let before = self.sessions.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        if before == 0 {
            info!(channel = CHANNEL_NAME, account_id = %self.account_id, guilds = ready.guilds.len(), "Discord gateway session ready");
        } else {
            // Serenity logs only "Error heartbeating" (or nothing) when it drops a session.
            warn!(
                channel = CHANNEL_NAME,
                account_id = %self.account_id,
                sessions = before + 1,
                "Discord gateway session started anew: the previous one could not be resumed (serenity restarts a shard whose last heartbeat was not acknowledged within one heartbeat interval, as on a loaded host or a stalled network, or after Discord invalidated the session); messages sent in between are read back from channel history"
            );
        }
        let _ = self.tx.send(GatewayEvent::Connected);
    }

    async fn resume(&self, _ctx: Context, _resumed: ResumedEvent) {
        info!(channel = CHANNEL_NAME, account_id = %self.account_id, "Discord gateway session resumed");
        let _ = self.tx.send(GatewayEvent::Connected);
    }
}

/// Turns the handler's messages into deliveries for the core. See the module docs.
pub(crate) struct Forwarder {
    pub(crate) rest: Rest,
    pub(crate) bot: BotIdentity,
    pub(crate) account_id: String,
    pub(crate) group_dms: bool,
    places: HashMap<ChannelId, Place>,
    seen: HashSet<u64>,
    seen_order: VecDeque<u64>,
    /// The last message seen per channel, for catching up after a reconnect; loaded from
    /// the cursor [`Forwarder::run`] is given.
    positions: PositionKeeper,
}

/// What became of one message the forwarder was given.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Forwarded {
    /// Handed to the core.
    Delivered,
    /// Seen before, or not for the core (skipped).
    Dropped,
    /// The core's side is gone: stop.
    CoreGone,
}

impl Forwarder {
    pub(crate) fn new(rest: Rest, bot: BotIdentity, account_id: String, group_dms: bool) -> Self {
        Self {
            rest,
            bot,
            account_id,
            group_dms,
            places: HashMap::new(),
            seen: HashSet::new(),
            seen_order: VecDeque::new(),
            positions: PositionKeeper::in_memory(snowflake_order),
        }
    }

    /// Runs until the handler's queue or the core's side closes, or the gateway client gave
    /// up (`client_gone` fires): then what is queued is forwarded and the core's stream ends,
    /// which tells the core this channel no longer receives. (serenity keeps the handler, and
    /// with it the queue's sender, alive after its client stopped.) Catch-up positions are
    /// loaded from `cursor` and saved there; without one they last as long as the process.
    pub(crate) async fn run(
        mut self,
        mut rx: mpsc::UnboundedReceiver<GatewayEvent>,
        core: mpsc::Sender<InboundDelivery>,
        mut client_gone: oneshot::Receiver<()>,
        cursor: Option<Arc<dyn IngressCursor>>,
    ) {
        if let Some(cursor) = cursor {
            self.positions = PositionKeeper::load(cursor, snowflake_order, CHANNEL_NAME).await;
        }
        loop {
            let first = tokio::select! {
                message = rx.recv() => match message {
                    Some(message) => message,
                    None => return,
                },
                _ = &mut client_gone => {
                    let mut rest = Vec::new();
                    while let Ok(next) = rx.try_recv() {
                        rest.push(next);
                    }
                    self.forward_batch(rest, &core).await;
                    return;
                }
            };
            // Let handler tasks spawned in the same instant enqueue too, then order them.
            tokio::task::yield_now().await;
            let mut batch = vec![first];
            while let Ok(next) = rx.try_recv() {
                batch.push(next);
            }
            if !self.forward_batch(batch, &core).await {
                return;
            }
        }
    }

    /// Catches up if the batch holds a (re)connect, then forwards its messages in id order;
    /// `false` once the core's side is gone.
    async fn forward_batch(&mut self, batch: Vec<GatewayEvent>, core: &mpsc::Sender<InboundDelivery>) -> bool {
        let mut connected = false;
        let mut messages = Vec::with_capacity(batch.len());
        for event in batch {
            match event {
                GatewayEvent::Message(message) => messages.push(message),
                GatewayEvent::Connected => connected = true,
            }
        }
        if connected && !self.catch_up(core).await {
            return false;
        }
        messages.sort_by_key(|message| message.id.get());
        for message in messages {
            if self.forward(*message, core).await == Forwarded::CoreGone {
                return false;
            }
        }
        true
    }

    /// Reads each recently active channel's history since the last message seen there and
    /// forwards what the gateway did not deliver, oldest first (see `catch_up.rs`); `false`
    /// once the core's side is gone. A channel whose history cannot be read is skipped.
    async fn catch_up(&mut self, core: &mpsc::Sender<InboundDelivery>) -> bool {
        let now_ms = chrono::Utc::now().timestamp_millis();
        let channels = self.positions.recent(now_ms);
        if channels.is_empty() {
            return true;
        }
        let (mut read, mut delivered, mut failed) = (0usize, 0usize, 0usize);
        for (channel, seen) in &channels {
            let (Ok(channel_id), Ok(after)) = (channel.parse::<NonZeroU64>(), seen.last.parse::<NonZeroU64>()) else {
                continue;
            };
            let messages = match missed(&self.rest, ChannelId::from(channel_id), MessageId::from(after), now_ms).await {
                Ok(messages) => messages,
                Err(error) => {
                    failed += 1;
                    warn!(
                        channel = CHANNEL_NAME,
                        account_id = %self.account_id,
                        chat_id = %channel,
                        %error,
                        "reading a Discord channel's history after a reconnect failed; what it missed is not answered"
                    );
                    continue;
                }
            };
            read += messages.len();
            for message in messages {
                match self.forward(message, core).await {
                    Forwarded::Delivered => delivered += 1,
                    Forwarded::Dropped => {}
                    Forwarded::CoreGone => return false,
                }
            }
        }
        info!(
            channel = CHANNEL_NAME,
            account_id = %self.account_id,
            channels = channels.len(),
            read,
            delivered,
            failed,
            "caught up on Discord history after a (re)connect"
        );
        true
    }

    /// Forwards one message.
    async fn forward(&mut self, message: Message, core: &mpsc::Sender<InboundDelivery>) -> Forwarded {
        let id = message.id.get();
        if self.seen.contains(&id) {
            debug!(
                channel = CHANNEL_NAME,
                message_id = id,
                "message seen before (a replay, or read in a catch-up); skipped"
            );
            return Forwarded::Dropped;
        }
        let (conversation, written) = (message.channel_id.to_string(), written_ms(&message));
        let place = self.place(&message).await;
        let inbound = match normalize(&message, &place, &self.bot, &self.account_id, self.group_dms) {
            Ok(inbound) => inbound,
            Err(reason) => {
                debug!(channel = CHANNEL_NAME, message_id = id, chat_id = %message.channel_id, reason, "message skipped");
                self.remember(id);
                self.positions.seen(&conversation, &id.to_string(), written);
                return Forwarded::Dropped;
            }
        };
        let (ack, receiver) = Ack::pair();
        if core.send(InboundDelivery { message: inbound, ack }).await.is_err() {
            return Forwarded::CoreGone;
        }
        self.remember(id);
        let account_id = self.account_id.clone();
        let positions = self.positions.clone();
        tokio::spawn(async move {
            match receiver.outcome().await {
                AckOutcome::Accepted => positions.seen(&conversation, &id.to_string(), written),
                AckOutcome::Abandoned => warn!(
                    channel = CHANNEL_NAME,
                    %account_id,
                    message_id = id,
                    "the core let go of a Discord message without recording it; the next catch-up reads it again"
                ),
            }
        });
        Forwarded::Delivered
    }

    fn remember(&mut self, id: u64) {
        if self.seen.insert(id) {
            self.seen_order.push_back(id);
        }
        while self.seen_order.len() > REMEMBERED_MESSAGES {
            if let Some(oldest) = self.seen_order.pop_front() {
                self.seen.remove(&oldest);
            }
        }
    }

    /// Where the message was written: from the cache, else `GET /channels/{id}`.
    async fn place(&mut self, message: &Message) -> Place {
        if let Some(place) = self.places.get(&message.channel_id) {
            return place.clone();
        }
        let in_guild = message.guild_id.is_some();
        let fallback = || match in_guild {
            true => Place::Guild { channel: message.channel_id.to_string(), thread: None },
            false => Place::Direct,
        };
        for attempt in 1..=LOOKUP_ATTEMPTS {
            match self.rest.channel(message.channel_id).await {
                Ok(channel) => {
                    let place = place_of(&channel, message.channel_id).unwrap_or_else(fallback);
                    self.places.insert(message.channel_id, place.clone());
                    return place;
                }
                Err(error) => {
                    warn!(
                        channel = CHANNEL_NAME,
                        chat_id = %message.channel_id,
                        attempt,
                        %error,
                        "looking up a Discord channel failed; retrying, then treating it as a plain channel"
                    );
                    if matches!(error, CallError::Status(ref failure) if failure.status < 500 && failure.status != 429)
                    {
                        break;
                    }
                    tokio::time::sleep(Duration::from_millis(250 * u64::from(attempt))).await;
                }
            }
        }
        // Not cached: a later message in this channel tries the lookup again.
        fallback()
    }
}

/// A channel object's meaning for routing, or `None` if it is not one Ferry understands.
pub(crate) fn place_of(channel: &Value, id: ChannelId) -> Option<Place> {
    let kind = channel.get("type").and_then(Value::as_u64)?;
    if kind == DM {
        return Some(Place::Direct);
    }
    if kind == GROUP_DM {
        return Some(Place::GroupDm);
    }
    let parent = channel.get("parent_id").and_then(Value::as_str).filter(|p| p.parse::<NonZeroU64>().is_ok());
    match parent {
        Some(parent) if THREAD_TYPES.contains(&kind) => {
            Some(Place::Guild { channel: parent.to_owned(), thread: Some(id.to_string()) })
        }
        _ => Some(Place::Guild { channel: id.to_string(), thread: None }),
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    #[test]
    fn channels_resolve_to_dms_guild_channels_and_threads_under_their_parent() {
        let id = ChannelId::new(900);
        assert_eq!(place_of(&json!({"id": "900", "type": 1}), id), Some(Place::Direct));
        assert_eq!(place_of(&json!({"id": "900", "type": 3}), id), Some(Place::GroupDm));
        assert_eq!(
            place_of(&json!({"id": "900", "type": 0, "guild_id": "1", "parent_id": "55"}), id),
            Some(Place::Guild { channel: "900".into(), thread: None }),
            "a category parent does not make a text channel a thread"
        );
        assert_eq!(
            place_of(&json!({"id": "900", "type": 11, "guild_id": "1", "parent_id": "800"}), id),
            Some(Place::Guild { channel: "800".into(), thread: Some("900".into()) })
        );
        assert_eq!(place_of(&json!({"id": "900"}), id), None);
    }
}
