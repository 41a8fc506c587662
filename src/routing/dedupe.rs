//! Dropping redelivered messages (SPEC §3.4): a platform that sends the same update twice
//! (a Telegram poll retried after a timeout, a Slack event retried, a reconnect that
//! replays) must never start a second run.
//!
//! A message is identified by channel + account + chat + thread + message id. A sighting is
//! recorded in the state database and remembered for [`DEDUPE_WINDOW`], so a restart does
//! not replay what was already taken. One upsert both records and answers, so two
//! deliveries racing each other cannot both be "first". The record is written through the
//! database's group commit, optionally together with what the message leads to (its queue
//! journal entry), so that both persist or neither does. Records older than the window are
//! pruned as messages arrive, at most once per [`PRUNE_INTERVAL`].

use std::sync::{Arc, Mutex, PoisonError};

use chrono::{DateTime, TimeDelta, Utc};
use ferry_channel::InboundMessage;
use rusqlite::{Connection, OptionalExtension, params};

use super::clock::Clock;
use crate::state::Database;

/// How long a message id is remembered (SPEC §3.4: 20 min). Redeliveries come within
/// seconds to minutes; this leaves a wide margin.
pub const DEDUPE_WINDOW: TimeDelta = TimeDelta::minutes(20);

/// Expired records are deleted at most this often, so pruning costs one write per minute
/// rather than one per message.
pub const PRUNE_INTERVAL: TimeDelta = TimeDelta::minutes(1);

/// The dedupe record could not be read or written, or what was to be written with it
/// failed. Nothing was recorded; the caller should not acknowledge the message to the
/// platform (it will be redelivered, and routed afresh).
#[derive(Debug, thiserror::Error)]
#[error("dedupe store failed while {action}: {source}")]
pub struct DedupeError {
    action: &'static str,
    source: rusqlite::Error,
}

/// Recently seen inbound messages, in the state database.
#[derive(Debug)]
pub struct DedupeStore {
    database: Database,
    clock: Arc<dyn Clock>,
    /// When expired records were last deleted; `None` until the first message.
    last_prune: Mutex<Option<DateTime<Utc>>>,
}

/// A message's identity in `inbound_seen`, owned so the write can wait for group commit.
struct SeenKey {
    channel: String,
    account_id: String,
    chat_id: String,
    /// Outside a thread: ''. No platform uses an empty thread id.
    thread_id: String,
    message_id: String,
}

impl SeenKey {
    fn of(message: &InboundMessage) -> Self {
        Self {
            channel: message.channel.clone(),
            account_id: message.account_id.clone(),
            chat_id: message.chat.id.clone(),
            thread_id: message.thread_id.clone().unwrap_or_default(),
            message_id: message.message_id.clone(),
        }
    }
}

/// Why a combined write failed: the record itself, or what was written with it.
enum RecordFailure {
    Record(rusqlite::Error),
    Then(rusqlite::Error),
}

impl From<rusqlite::Error> for RecordFailure {
    fn from(error: rusqlite::Error) -> Self {
        Self::Record(error)
    }
}

impl DedupeStore {
    pub fn new(database: &Database, clock: Arc<dyn Clock>) -> Self {
        Self { database: database.clone(), clock, last_prune: Mutex::new(None) }
    }

    /// Whether `message` was already recorded within the window. Reads only: deciding about
    /// a message does not record it (see [`DedupeStore::record_then`]).
    pub async fn seen(&self, message: &InboundMessage) -> Result<bool, DedupeError> {
        let cutoff = (self.clock.now() - DEDUPE_WINDOW).timestamp_millis();
        let key = SeenKey::of(message);
        self.database
            .read(|connection| {
                connection
                    .prepare_cached(
                        "SELECT 1 FROM inbound_seen WHERE channel = ? AND account_id = ? AND chat_id = ? \
                         AND thread_id = ? AND message_id = ? AND seen_at > ?",
                    )?
                    .query_row(
                        params![key.channel, key.account_id, key.chat_id, key.thread_id, key.message_id, cutoff],
                        |_| Ok(()),
                    )
                    .optional()
            })
            .map(|row| row.is_some())
            .map_err(|source| DedupeError { action: "looking up an inbound message", source })
    }

    /// Records the message and says whether this is its first sighting within the window.
    /// `false` means a redelivery: drop it.
    pub async fn first_sighting(&self, message: &InboundMessage) -> Result<bool, DedupeError> {
        Ok(self.record_then(message, |_| Ok(())).await?.is_some())
    }

    /// Records the message and, if this is its first sighting, runs `then` in the same
    /// transaction: both are written or neither is. `None` means a redelivery (and `then`
    /// did not run).
    pub async fn record_then<T: Send + 'static>(
        &self,
        message: &InboundMessage,
        then: impl FnOnce(&Connection) -> rusqlite::Result<T> + Send + 'static,
    ) -> Result<Option<T>, DedupeError> {
        let now = self.clock.now();
        let cutoff = (now - DEDUPE_WINDOW).timestamp_millis();
        let prune = self.prune_due(now);
        let key = SeenKey::of(message);
        let recorded = self
            .database
            .write(move |connection| -> Result<Option<T>, RecordFailure> {
                if prune {
                    let pruned = delete_expired(connection, cutoff)?;
                    if pruned > 0 {
                        tracing::debug!(pruned, "pruned expired inbound dedupe records");
                    }
                }
                if !record(connection, &key, now.timestamp_millis(), cutoff)? {
                    return Ok(None);
                }
                then(connection).map(Some).map_err(RecordFailure::Then)
            })
            .await;
        recorded.map_err(|failure| match failure {
            RecordFailure::Record(source) => DedupeError { action: "recording an inbound message", source },
            RecordFailure::Then(source) => DedupeError { action: "recording what an inbound message leads to", source },
        })
    }

    /// Whether the next record should prune first; claims the prune if so.
    fn prune_due(&self, now: DateTime<Utc>) -> bool {
        let mut last = self.last_prune.lock().unwrap_or_else(PoisonError::into_inner);
        if last.is_some_and(|last| now - last < PRUNE_INTERVAL) {
            return false;
        }
        *last = Some(now);
        true
    }
}

/// Inserts a new record, or renews one that has expired; a live record is left as it is
/// and nothing changes, which is how a duplicate shows. Returns whether it was new.
fn record(connection: &Connection, key: &SeenKey, now: i64, cutoff: i64) -> rusqlite::Result<bool> {
    let changed = connection
        .prepare_cached(
            "INSERT INTO inbound_seen (channel, account_id, chat_id, thread_id, message_id, seen_at) \
             VALUES (?, ?, ?, ?, ?, ?) \
             ON CONFLICT (channel, account_id, chat_id, thread_id, message_id) \
             DO UPDATE SET seen_at = excluded.seen_at WHERE inbound_seen.seen_at <= ?",
        )?
        .execute(params![key.channel, key.account_id, key.chat_id, key.thread_id, key.message_id, now, cutoff])?;
    Ok(changed == 1)
}

fn delete_expired(connection: &Connection, cutoff: i64) -> rusqlite::Result<u64> {
    let deleted = connection.prepare_cached("DELETE FROM inbound_seen WHERE seen_at <= ?")?.execute([cutoff])?;
    Ok(deleted as u64)
}

#[cfg(test)]
mod tests {
    use ferry_channel::{ChatKind, ChatRef, Sender};

    use super::*;
    use crate::routing::clock::ManualClock;

    fn message(chat: &str, thread: Option<&str>, id: &str) -> InboundMessage {
        InboundMessage {
            thread_id: thread.map(str::to_owned),
            mentions_bot: true,
            ..InboundMessage::new(
                "slack",
                "default",
                ChatRef::new(ChatKind::Channel, chat),
                Sender::user("U1"),
                id,
                "hi",
            )
        }
    }

    fn clock() -> ManualClock {
        ManualClock::new(DateTime::from_timestamp(1_750_000_000, 0).unwrap())
    }

    async fn rows(database: &Database) -> i64 {
        database.with_connection(|c| c.query_row("SELECT COUNT(*) FROM inbound_seen", [], |row| row.get(0))).unwrap()
    }

    #[tokio::test]
    async fn a_redelivery_is_not_a_first_sighting() {
        let dir = tempfile::tempdir().unwrap();
        let database = Database::open(dir.path()).await.unwrap();
        let store = DedupeStore::new(&database, Arc::new(clock()));
        assert!(store.first_sighting(&message("C1", None, "m1")).await.unwrap());
        assert!(!store.first_sighting(&message("C1", None, "m1")).await.unwrap());
    }

    #[tokio::test]
    async fn every_part_of_the_key_tells_messages_apart() {
        let dir = tempfile::tempdir().unwrap();
        let database = Database::open(dir.path()).await.unwrap();
        let store = DedupeStore::new(&database, Arc::new(clock()));
        let base = message("C1", None, "m1");
        let variants = [
            base.clone(),
            InboundMessage { channel: "discord".into(), ..base.clone() },
            InboundMessage { account_id: "second".into(), ..base.clone() },
            InboundMessage { chat: ChatRef::new(ChatKind::Channel, "C2"), ..base.clone() },
            InboundMessage { thread_id: Some("t1".into()), ..base.clone() },
            InboundMessage { message_id: "m2".into(), ..base.clone() },
        ];
        for variant in &variants {
            assert!(store.first_sighting(variant).await.unwrap(), "{variant:?}");
        }
    }

    #[tokio::test]
    async fn a_message_is_remembered_for_twenty_minutes_then_forgotten_and_pruned() {
        let dir = tempfile::tempdir().unwrap();
        let database = Database::open(dir.path()).await.unwrap();
        let clock = clock();
        let store = DedupeStore::new(&database, Arc::new(clock.clone()));
        assert!(store.first_sighting(&message("C1", None, "m1")).await.unwrap());
        clock.advance(DEDUPE_WINDOW - TimeDelta::seconds(1));
        assert!(!store.first_sighting(&message("C1", None, "m1")).await.unwrap());
        clock.advance(TimeDelta::seconds(1));
        assert!(store.first_sighting(&message("C1", None, "m1")).await.unwrap());

        assert!(store.first_sighting(&message("C1", None, "m2")).await.unwrap());
        clock.advance(DEDUPE_WINDOW + TimeDelta::minutes(1));
        assert_eq!(rows(&database).await, 2);
        // The next message prunes both expired records before recording itself.
        assert!(store.first_sighting(&message("C1", None, "m3")).await.unwrap());
        assert_eq!(rows(&database).await, 1);
    }

    #[tokio::test]
    async fn looking_up_does_not_record_and_a_failed_combined_write_records_nothing() {
        let dir = tempfile::tempdir().unwrap();
        let database = Database::open(dir.path()).await.unwrap();
        let store = DedupeStore::new(&database, Arc::new(clock()));
        let hello = message("C1", Some("t"), "m1");
        assert!(!store.seen(&hello).await.unwrap());
        assert!(!store.seen(&hello).await.unwrap(), "a lookup is not a sighting");

        let failed = store.record_then(&hello, |c| c.execute("INSERT INTO no_such_table VALUES (1)", [])).await;
        assert!(failed.unwrap_err().to_string().contains("leads to"));
        assert!(!store.seen(&hello).await.unwrap(), "the sighting was rolled back with what failed");

        assert_eq!(store.record_then(&hello, |_| Ok("journaled")).await.unwrap(), Some("journaled"));
        assert!(store.seen(&hello).await.unwrap());
        assert_eq!(store.record_then(&hello, |_| Ok("again")).await.unwrap(), None, "a redelivery runs nothing");
    }

    #[tokio::test]
    async fn a_restart_does_not_replay_a_message_already_seen() {
        let dir = tempfile::tempdir().unwrap();
        let clock = clock();
        let database = Database::open(dir.path()).await.unwrap();
        let store = DedupeStore::new(&database, Arc::new(clock.clone()));
        assert!(store.first_sighting(&message("C1", Some("t"), "m1")).await.unwrap());
        drop(store);
        database.close().await;

        let reopened = Database::open(dir.path()).await.unwrap();
        let store = DedupeStore::new(&reopened, Arc::new(clock));
        assert!(!store.first_sighting(&message("C1", Some("t"), "m1")).await.unwrap());
    }

    #[tokio::test]
    async fn racing_deliveries_have_exactly_one_first_sighting() {
        let dir = tempfile::tempdir().unwrap();
        let database = Database::open(dir.path()).await.unwrap();
        let store = Arc::new(DedupeStore::new(&database, Arc::new(clock())));
        let attempts = (0..8).map(|_| {
            let store = store.clone();
            tokio::spawn(async move { store.first_sighting(&message("C1", None, "m1")).await.unwrap() })
        });
        let firsts = futures::future::join_all(attempts).await.into_iter().filter(|first| *first.as_ref().unwrap());
        assert_eq!(firsts.count(), 1);
    }
}
