//! The journal of accepted messages that have not been answered yet.
//!
//! A message is recorded before the platform is told it was received, and removed only
//! after the run that answers it finished. After a crash or restart, whatever is still in
//! the journal runs again: nothing accepted is lost.

use std::sync::Arc;

use async_trait::async_trait;
use chrono::{DateTime, Utc};
use ferry_channel::InboundMessage;

use crate::state::inbound::{LoggedDelivery, LoggedMessage};
use crate::state::outage::through_outages;
use crate::state::{InboundStore, StorageError};

/// An accepted message waiting for (or in) its run.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct QueuedMessage {
    pub id: i64,
    pub session_key: String,
    pub message: InboundMessage,
    /// What the model is asked (the message text, wrapped with group context if any).
    pub prompt: String,
    pub enqueued_at: DateTime<Utc>,
}

impl QueuedMessage {
    /// Where a reply to it goes: the same channel, account, chat and thread.
    pub fn reply_place(&self) -> (&str, &str, &str, Option<&str>) {
        let m = &self.message;
        (&m.channel, &m.account_id, &m.chat.id, m.thread_id.as_deref())
    }

    /// Whether a reply to it and a reply to `other` go to the same place. Messages from
    /// different places never share a run: its reply would reach only one of them.
    pub fn same_place(&self, other: &QueuedMessage) -> bool {
        self.reply_place() == other.reply_place()
    }
}

/// Where a run's reply goes, kept while the run is active: messages from elsewhere are not
/// handed to it (steered) and do not interrupt it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ReplyPlace {
    channel: String,
    account_id: String,
    chat_id: String,
    thread_id: Option<String>,
}

impl ReplyPlace {
    pub fn of(message: &QueuedMessage) -> Self {
        Self::of_inbound(&message.message)
    }

    /// Where a reply to `message` goes, before it is queued (a chat command's place).
    pub fn of_inbound(message: &ferry_channel::InboundMessage) -> Self {
        Self {
            channel: message.channel.clone(),
            account_id: message.account_id.clone(),
            chat_id: message.chat.id.clone(),
            thread_id: message.thread_id.clone(),
        }
    }

    /// Whether a reply to `message` goes here.
    pub fn holds(&self, message: &QueuedMessage) -> bool {
        (self.channel.as_str(), self.account_id.as_str(), self.chat_id.as_str(), self.thread_id.as_deref())
            == message.reply_place()
    }
}

#[derive(Debug, thiserror::Error)]
pub enum JournalError {
    #[error("queue journal: {0}")]
    Store(#[from] StorageError),
    #[error("queue journal: cannot encode a message: {0}")]
    Encode(#[from] serde_json::Error),
}

/// What the scheduler needs of the journal: forgetting messages once answered or dropped.
#[async_trait]
pub trait AnsweredLog: Send + Sync + 'static {
    async fn forget(&self, ids: &[i64]) -> Result<(), JournalError>;
}

#[async_trait]
impl AnsweredLog for QueueJournal {
    async fn forget(&self, ids: &[i64]) -> Result<(), JournalError> {
        self.remove(ids).await
    }
}

/// The journal's records live in the state directory's inbound log, in the same record
/// that marks a message as seen (see `routing::dedupe`); this is the queue's view of them.
#[derive(Clone)]
pub struct QueueJournal {
    log: Arc<dyn InboundStore>,
}

impl QueueJournal {
    pub fn new(log: Arc<dyn InboundStore>) -> Self {
        Self { log }
    }

    /// Encodes `message` for the journal, here, outside the write that accepts it.
    pub fn encode(message: &InboundMessage) -> Result<String, JournalError> {
        Ok(serde_json::to_string(message)?)
    }

    /// Forgets answered (or deliberately dropped) messages, trying again while the store is
    /// unreachable (`state::outage`): left unmarked, they would be answered again by
    /// whoever runs the session next.
    pub async fn remove(&self, ids: &[i64]) -> Result<(), JournalError> {
        Ok(through_outages("marking messages answered", None, StorageError::is_unavailable, || self.log.answered(ids))
            .await?)
    }

    /// How many accepted messages wait for their answer.
    pub async fn len(&self) -> Result<usize, JournalError> {
        Ok(self.log.pending_count().await?)
    }

    pub async fn is_empty(&self) -> Result<bool, JournalError> {
        Ok(self.len().await? == 0)
    }

    /// Everything still unanswered, oldest first. Records that no longer decode are logged
    /// and skipped (and left in the log for an operator to inspect).
    pub async fn pending(&self) -> Result<Vec<QueuedMessage>, JournalError> {
        Ok(decode(self.log.unanswered().await?.messages))
    }

    /// [`QueueJournal::pending`] and the delivery records of their replies, in one read of
    /// the log: what start-up recovers.
    pub async fn left_over(&self) -> Result<(Vec<QueuedMessage>, Vec<LoggedDelivery>), JournalError> {
        let unanswered = self.log.unanswered().await?;
        Ok((decode(unanswered.messages), unanswered.deliveries))
    }
}

/// The journal's messages as the queue takes them; a record that no longer decodes is
/// logged and skipped.
pub(crate) fn decode(logged: Vec<LoggedMessage>) -> Vec<QueuedMessage> {
    let mut pending = Vec::with_capacity(logged.len());
    for LoggedMessage { seq, entry } in logged {
        match serde_json::from_str::<InboundMessage>(&entry.message) {
            Ok(message) => pending.push(QueuedMessage {
                id: seq,
                session_key: entry.session_key,
                message,
                prompt: entry.prompt,
                enqueued_at: DateTime::from_timestamp_millis(entry.enqueued_at).unwrap_or_default(),
            }),
            Err(error) => tracing::error!(id = seq, %error, "a queued message does not decode; skipping it"),
        }
    }
    pending
}

#[cfg(test)]
mod tests {
    use std::sync::atomic::Ordering;

    use super::*;
    use crate::state::inbound::{Accepted, MessageKey};
    use crate::state::intercept::{Intercepted, Outage};
    use crate::state::sqlite::inbound_log::InboundLog;

    /// Messages answered while the store restarts are marked once it is back, so they do not
    /// run again.
    #[tokio::test(start_paused = true)]
    async fn messages_answered_during_an_outage_are_marked_once_the_store_is_back() {
        let dir = tempfile::tempdir().unwrap();
        let log = InboundLog::open(&dir.path().join("inbound.log")).unwrap();
        let key =
            MessageKey { channel: "memory", account_id: "default", chat_id: "42", thread_id: "", message_id: "1" };
        let entry = Accepted { session_key: "s".into(), prompt: "q".into(), message: "{}".into(), enqueued_at: 0 };
        let seq = log.accept(&key, 1, 0, &entry).await.unwrap().unwrap();
        let store = Arc::new(Intercepted { log: log.clone(), hook: Outage::new(2) });
        let journal = QueueJournal::new(store.clone());
        journal.remove(&[seq]).await.expect("marked in the end");
        assert_eq!(store.hook.writes.load(Ordering::SeqCst), 3, "two refusals, then the write");
        assert_eq!(log.pending_count(), 0);
    }
}
