//! The inbound store: which messages were seen (dedupe), which accepted messages still wait
//! for their answer (the queue journal), and what became of their replies (the delivery
//! ledger's records). Dedupe, the journal and the ledger are its three views.
//!
//! One machine keeps it in the append-only inbound log beside `ferry.db`
//! (`state::sqlite::inbound_log`); several replicas keep it in PostgreSQL tables, where the
//! same calls are statements. The contract both keep:
//! - a message's first sighting inside the window is decided and recorded in one step, so two
//!   deliveries racing each other (on one replica or two) cannot both be first;
//! - an accepted message is journaled in that same step, so a crash can never leave it seen
//!   but not queued;
//! - the delivery record that completes a reply marks its messages answered in the same write.

use std::fmt::Debug;

use async_trait::async_trait;
use chrono::TimeDelta;

use super::StorageError;

/// How long a sighting counts (SPEC §3.4: 20 min): a delivery of the same message later than
/// this is taken as new. Redeliveries come within seconds to minutes; this leaves a wide
/// margin. Stores keep sightings at least this long; routing (`routing::dedupe`) passes
/// the cutoff it implies to every call.
pub const DEDUPE_WINDOW: TimeDelta = TimeDelta::minutes(20);

/// A message's identity for dedupe (SPEC §3.4): channel + account + chat + thread + message
/// id. Outside a thread, `thread_id` is empty (no platform uses an empty thread id).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct MessageKey<'a> {
    pub channel: &'a str,
    pub account_id: &'a str,
    pub chat_id: &'a str,
    pub thread_id: &'a str,
    pub message_id: &'a str,
}

/// What an accepted message carries besides its identity: enough to run it after a restart.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Accepted {
    pub session_key: String,
    pub prompt: String,
    /// The `InboundMessage`, as JSON (the state layer does not interpret it).
    pub message: String,
    /// Unix milliseconds.
    pub enqueued_at: i64,
}

/// An accepted message still waiting for its answer, as read back from the store.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LoggedMessage {
    pub seq: i64,
    pub entry: Accepted,
}

/// A delivery ledger record, as read back from the store.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LoggedDelivery {
    /// The accepted messages whose reply it is about.
    pub seqs: Vec<i64>,
    pub body: String,
}

/// A message key, owned: channel, account, chat, thread (`""` outside one) and message id.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct SeenKey(pub [String; 5]);

impl From<&MessageKey<'_>> for SeenKey {
    fn from(key: &MessageKey<'_>) -> Self {
        Self([key.channel, key.account_id, key.chat_id, key.thread_id, key.message_id].map(str::to_owned))
    }
}

/// The accepted messages not answered yet (oldest first) and the delivery records of their
/// replies (in the order written): what a restarted process, or a replica taking a session
/// over, runs and recovers.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Unanswered {
    pub messages: Vec<LoggedMessage>,
    pub deliveries: Vec<LoggedDelivery>,
}

/// Where inbound messages are recorded. Times are unix milliseconds; `cutoff` is the time at
/// or before which a sighting no longer counts (the end of the dedupe window).
#[async_trait]
pub trait InboundStore: Send + Sync + Debug {
    /// Whether `key` was recorded as seen after `cutoff`. Only what is durable counts.
    async fn seen(&self, key: &MessageKey<'_>, cutoff: i64) -> Result<bool, StorageError>;

    /// Records a sighting of `key` at `at` for a message that will not run. `false`: it was
    /// already seen after `cutoff` (a redelivery), and nothing was written.
    async fn record_seen(&self, key: &MessageKey<'_>, at: i64, cutoff: i64) -> Result<bool, StorageError>;

    /// Records a sighting of `key` and journals the message it accepts, in one write.
    /// Returns the message's id, or `None` for a redelivery (nothing written). Ids grow in
    /// the order messages are accepted.
    async fn accept(
        &self,
        key: &MessageKey<'_>,
        at: i64,
        cutoff: i64,
        entry: &Accepted,
    ) -> Result<Option<i64>, StorageError>;

    /// Records that the accepted messages `ids` were answered (or dropped): they will not
    /// run again after a restart.
    async fn answered(&self, ids: &[i64]) -> Result<(), StorageError>;

    /// Appends a delivery ledger record about the reply to `ids` (`body` is the ledger's).
    /// With `answered`, the same write marks the messages answered.
    async fn record_delivery(&self, ids: &[i64], body: String, answered: bool) -> Result<(), StorageError>;

    /// The accepted messages not answered yet (oldest first) and the delivery records of
    /// their replies (in the order written).
    async fn unanswered(&self) -> Result<Unanswered, StorageError>;

    /// How many accepted messages wait for their answer.
    async fn pending_count(&self) -> Result<usize, StorageError>;

    /// The id the next accepted message will get: every message with a smaller id was
    /// accepted before now.
    async fn next_id(&self) -> Result<i64, StorageError>;
}
