//! Dropping redelivered messages (SPEC §3.4): a platform that sends the same update twice
//! (a Telegram poll retried after a timeout, a Slack event retried, a reconnect that
//! replays) must never start a second run.
//!
//! A message is identified by channel + account + chat + thread + message id. A sighting is
//! recorded in the inbound store (`state::inbound`: the inbound log on SQLite, a table on
//! PostgreSQL) and remembered for [`DEDUPE_WINDOW`], so a restart does not replay what was
//! already taken. The store decides and records in one step, so two deliveries racing each
//! other (on one replica or two) cannot both be "first"; a message that runs is recorded
//! together with its queue journal entry, so both persist or neither does.

use std::sync::Arc;

use chrono::{DateTime, Utc};
use ferry_channel::InboundMessage;

use super::clock::Clock;
use crate::state::inbound::{Accepted, MessageKey};
use crate::state::{InboundStore, StorageError};

pub use crate::state::inbound::DEDUPE_WINDOW;

/// The dedupe record could not be written, or what was to be written with it failed.
/// Nothing was recorded; the caller should not acknowledge the message to the platform (it
/// will be redelivered, and routed afresh).
#[derive(Debug, thiserror::Error)]
#[error("dedupe store failed while {action}: {source}")]
pub struct DedupeError {
    action: &'static str,
    source: StorageError,
}

impl DedupeError {
    /// The store could not be reached: the same write may succeed later.
    pub fn is_unavailable(&self) -> bool {
        self.source.is_unavailable()
    }
}

/// A message that runs, as admitted: its id in the queue journal and when it was taken.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Admitted {
    pub id: i64,
    pub enqueued_at: DateTime<Utc>,
}

/// Recently seen inbound messages, in the inbound store.
#[derive(Debug)]
pub struct DedupeStore {
    log: Arc<dyn InboundStore>,
    clock: Arc<dyn Clock>,
}

fn key_of(message: &InboundMessage) -> MessageKey<'_> {
    MessageKey {
        channel: &message.channel,
        account_id: &message.account_id,
        chat_id: &message.chat.id,
        thread_id: message.thread_id.as_deref().unwrap_or(""),
        message_id: &message.message_id,
    }
}

impl DedupeStore {
    pub fn new(log: Arc<dyn InboundStore>, clock: Arc<dyn Clock>) -> Self {
        Self { log, clock }
    }

    /// Now, and the time at or before which a sighting no longer counts (unix ms).
    fn window(&self) -> (DateTime<Utc>, i64) {
        let now = self.clock.now();
        (now, (now - DEDUPE_WINDOW).timestamp_millis())
    }

    /// Whether `message` was already recorded within the window. Reads only: deciding about
    /// a message does not record it (see [`DedupeStore::admit`]).
    pub async fn seen(&self, message: &InboundMessage) -> Result<bool, DedupeError> {
        self.log
            .seen(&key_of(message), self.window().1)
            .await
            .map_err(|source| DedupeError { action: "looking up an inbound message", source })
    }

    /// Records the message and says whether this is its first sighting within the window.
    /// `false` means a redelivery: drop it.
    pub async fn first_sighting(&self, message: &InboundMessage) -> Result<bool, DedupeError> {
        let (now, cutoff) = self.window();
        self.log
            .record_seen(&key_of(message), now.timestamp_millis(), cutoff)
            .await
            .map_err(|source| DedupeError { action: "recording an inbound message", source })
    }

    /// Records the message and, if this is its first sighting, journals it to run in
    /// `session_key` with `prompt`, in the same record: both are written or neither is.
    /// `encoded` is the message as JSON (encoded by the caller, outside the write). `None`
    /// means a redelivery, and nothing was written.
    pub async fn admit(
        &self,
        message: &InboundMessage,
        session_key: &str,
        prompt: &str,
        encoded: String,
    ) -> Result<Option<Admitted>, DedupeError> {
        let (now, cutoff) = self.window();
        let at = now.timestamp_millis();
        let entry = Accepted {
            session_key: session_key.to_owned(),
            prompt: prompt.to_owned(),
            message: encoded,
            enqueued_at: at,
        };
        let id = self
            .log
            .accept(&key_of(message), at, cutoff, &entry)
            .await
            .map_err(|source| DedupeError { action: "recording and journaling an inbound message", source })?;
        Ok(id.map(|id| Admitted { id, enqueued_at: now }))
    }
}

#[cfg(test)]
mod tests {
    use ferry_channel::{ChatKind, ChatRef, Sender};

    use super::*;
    use chrono::TimeDelta;

    use crate::routing::clock::ManualClock;
    use crate::state::Database;

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

    #[tokio::test]
    async fn a_redelivery_is_not_a_first_sighting() {
        let dir = tempfile::tempdir().unwrap();
        let database = Database::open(dir.path()).await.unwrap();
        let store = DedupeStore::new(database.inbound_store(), Arc::new(clock()));
        assert!(store.first_sighting(&message("C1", None, "m1")).await.unwrap());
        assert!(!store.first_sighting(&message("C1", None, "m1")).await.unwrap());
    }

    #[tokio::test]
    async fn every_part_of_the_key_tells_messages_apart() {
        let dir = tempfile::tempdir().unwrap();
        let database = Database::open(dir.path()).await.unwrap();
        let store = DedupeStore::new(database.inbound_store(), Arc::new(clock()));
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
    async fn a_message_is_remembered_for_twenty_minutes_then_forgotten() {
        let dir = tempfile::tempdir().unwrap();
        let database = Database::open(dir.path()).await.unwrap();
        let clock = clock();
        let store = DedupeStore::new(database.inbound_store(), Arc::new(clock.clone()));
        assert!(store.first_sighting(&message("C1", None, "m1")).await.unwrap());
        clock.advance(DEDUPE_WINDOW - TimeDelta::seconds(1));
        assert!(!store.first_sighting(&message("C1", None, "m1")).await.unwrap());
        clock.advance(TimeDelta::seconds(1));
        assert!(store.first_sighting(&message("C1", None, "m1")).await.unwrap());
    }

    #[tokio::test]
    async fn looking_up_does_not_record_and_a_failed_write_records_nothing() {
        let dir = tempfile::tempdir().unwrap();
        let database = Database::open(dir.path()).await.unwrap();
        let store = DedupeStore::new(database.inbound_store(), Arc::new(clock()));
        let hello = message("C1", Some("t"), "m1");
        assert!(!store.seen(&hello).await.unwrap());
        assert!(!store.seen(&hello).await.unwrap(), "a lookup is not a sighting");

        database.inbound_log().fail_next_appends(1);
        let failed = store.admit(&hello, "agent:main:main", "hi", "{}".into()).await;
        assert!(failed.unwrap_err().to_string().contains("journaling"));
        assert!(!store.seen(&hello).await.unwrap(), "nothing was recorded");

        let admitted = store.admit(&hello, "agent:main:main", "hi", "{}".into()).await.unwrap();
        assert!(admitted.is_some());
        assert!(store.seen(&hello).await.unwrap());
        assert_eq!(store.admit(&hello, "agent:main:main", "hi", "{}".into()).await.unwrap(), None);
    }

    #[tokio::test]
    async fn a_restart_does_not_replay_a_message_already_seen() {
        let dir = tempfile::tempdir().unwrap();
        let clock = clock();
        let database = Database::open(dir.path()).await.unwrap();
        let store = DedupeStore::new(database.inbound_store(), Arc::new(clock.clone()));
        assert!(store.first_sighting(&message("C1", Some("t"), "m1")).await.unwrap());
        drop(store);
        database.close().await;

        let reopened = Database::open(dir.path()).await.unwrap();
        let store = DedupeStore::new(reopened.inbound_store(), Arc::new(clock));
        assert!(!store.first_sighting(&message("C1", Some("t"), "m1")).await.unwrap());
    }

    #[tokio::test]
    async fn racing_deliveries_have_exactly_one_first_sighting() {
        let dir = tempfile::tempdir().unwrap();
        let database = Database::open(dir.path()).await.unwrap();
        let store = Arc::new(DedupeStore::new(database.inbound_store(), Arc::new(clock())));
        let attempts = (0..8).map(|_| {
            let store = store.clone();
            tokio::spawn(async move { store.first_sighting(&message("C1", None, "m1")).await.unwrap() })
        });
        let firsts = futures::future::join_all(attempts).await.into_iter().filter(|first| *first.as_ref().unwrap());
        assert_eq!(firsts.count(), 1);
    }
}
