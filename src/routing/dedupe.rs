//! Dropping redelivered messages (SPEC §3.4): a platform that sends the same update twice
//! (a Telegram poll retried after a timeout, a Slack event retried, a reconnect that
//! replays) must never start a second run.
//!
//! A message is identified by channel + account + chat + thread + message id. The first
//! sighting is recorded in the state database and remembered for [`DEDUPE_WINDOW`], so a
//! restart does not replay what was already taken. One upsert both records and answers, so
//! two deliveries racing each other cannot both be "first". Records older than the window
//! are pruned as messages arrive, at most once per [`PRUNE_INTERVAL`].

use std::sync::{Arc, Mutex, PoisonError};

use chrono::{DateTime, TimeDelta, Utc};
use ferry_channel::InboundMessage;
use rusqlite::params;

use super::clock::Clock;
use crate::state::Database;

/// How long a message id is remembered (SPEC §3.4: 20 min). Redeliveries come within
/// seconds to minutes; this leaves a wide margin.
pub const DEDUPE_WINDOW: TimeDelta = TimeDelta::minutes(20);

/// Expired records are deleted at most this often, so pruning costs one write per minute
/// rather than one per message.
pub const PRUNE_INTERVAL: TimeDelta = TimeDelta::minutes(1);

/// The dedupe record could not be read or written. The message's fate is then unknown, so
/// the caller should not acknowledge it to the platform (it will be redelivered).
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

impl DedupeStore {
    pub fn new(database: &Database, clock: Arc<dyn Clock>) -> Self {
        Self { database: database.clone(), clock, last_prune: Mutex::new(None) }
    }

    /// Records the message and says whether this is its first sighting within the window.
    /// `false` means a redelivery: drop it.
    pub async fn first_sighting(&self, message: &InboundMessage) -> Result<bool, DedupeError> {
        let now = self.clock.now();
        let cutoff = (now - DEDUPE_WINDOW).timestamp_millis();
        self.prune_if_due(now, cutoff).await?;
        // Inserts a new record, or renews one that has expired; a live record is left as it
        // is and nothing changes, which is how a duplicate shows.
        let thread_id = message.thread_id.as_deref().unwrap_or("");
        let changed = self
            .database
            .with_connection(|connection| {
                connection
                    .prepare_cached(
                        "INSERT INTO inbound_seen (channel, account_id, chat_id, thread_id, message_id, seen_at) \
                         VALUES (?, ?, ?, ?, ?, ?) \
                         ON CONFLICT (channel, account_id, chat_id, thread_id, message_id) \
                         DO UPDATE SET seen_at = excluded.seen_at WHERE inbound_seen.seen_at <= ?",
                    )?
                    // Outside a thread: ''. No platform uses an empty thread id.
                    .execute(params![
                        message.channel,
                        message.account_id,
                        message.chat.id,
                        thread_id,
                        message.message_id,
                        now.timestamp_millis(),
                        cutoff
                    ])
            })
            .map_err(|source| DedupeError { action: "recording an inbound message", source })?;
        Ok(changed == 1)
    }

    /// Forgets a message recorded by [`DedupeStore::first_sighting`], so its redelivery counts
    /// as new. For when handling it failed after it was recorded: the platform will deliver
    /// it again, and that delivery must not be dropped as a duplicate.
    pub async fn forget(&self, message: &InboundMessage) -> Result<(), DedupeError> {
        self.database
            .with_connection(|connection| {
                connection
                    .prepare_cached(
                        "DELETE FROM inbound_seen WHERE channel = ? AND account_id = ? AND chat_id = ? \
                         AND thread_id = ? AND message_id = ?",
                    )?
                    .execute(params![
                        message.channel,
                        message.account_id,
                        message.chat.id,
                        message.thread_id.as_deref().unwrap_or(""),
                        message.message_id
                    ])
            })
            .map_err(|source| DedupeError { action: "forgetting an inbound message", source })?;
        Ok(())
    }

    /// Deletes records older than the window; returns how many.
    pub async fn prune(&self) -> Result<u64, DedupeError> {
        let now = self.clock.now();
        self.prune_before((now - DEDUPE_WINDOW).timestamp_millis()).await
    }

    async fn prune_if_due(&self, now: DateTime<Utc>, cutoff: i64) -> Result<(), DedupeError> {
        {
            let mut last = self.last_prune.lock().unwrap_or_else(PoisonError::into_inner);
            if last.is_some_and(|last| now - last < PRUNE_INTERVAL) {
                return Ok(());
            }
            *last = Some(now);
        }
        let pruned = self.prune_before(cutoff).await?;
        if pruned > 0 {
            tracing::debug!(pruned, "pruned expired inbound dedupe records");
        }
        Ok(())
    }

    async fn prune_before(&self, cutoff: i64) -> Result<u64, DedupeError> {
        let deleted = self
            .database
            .with_connection(|connection| {
                connection.prepare_cached("DELETE FROM inbound_seen WHERE seen_at <= ?")?.execute([cutoff])
            })
            .map_err(|source| DedupeError { action: "pruning expired records", source })?;
        Ok(deleted as u64)
    }
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
    async fn a_forgotten_message_is_new_again() {
        let dir = tempfile::tempdir().unwrap();
        let database = Database::open(dir.path()).await.unwrap();
        let store = DedupeStore::new(&database, Arc::new(clock()));
        let seen = message("C1", Some("t"), "m1");
        assert!(store.first_sighting(&seen).await.unwrap());
        store.forget(&seen).await.unwrap();
        assert!(store.first_sighting(&seen).await.unwrap());
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
