//! Sends a run makes while it goes on — the `message` tool's, streamed blocks — under the
//! delivery ledger, so a run re-done after a crash does not send them twice.
//!
//! A finished run's finals are recorded before they are sent; these sends happen while the
//! model is still answering, so there is nothing to record ahead. Instead each one is
//! named by the reply and its place in the run (the reply's [`Recorder::reply_key`], what
//! kind of send, and how many of that kind came before it) and recorded as
//! [`LedgerEvent::Sent`] once the platform has it: one ledger write per send, sharing the
//! log's group commit. A run re-done after a restart asks the model again, and its sends
//! come in the same places: one the killed attempt recorded is not sent again (the run
//! gets the recorded message back); one it may have sent without recording it (killed
//! between the platform's answer and the write) is reconciled under the same key —
//! Discord's nonce, Slack's metadata lookup — and only on Telegram, which has neither,
//! repeated blind (`ferry_outbound_unknown_outcome_total`).

use std::collections::BTreeMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use ferry_channel::{ChannelError, MarkupDialect, OutboundMessage, SentMessage};

use super::{LedgerEvent, Recorder};
use crate::reply::outbound::OutboundScheduler;

/// What a killed attempt at a reply had sent while it ran: key → platform message id.
pub type SentKeys = BTreeMap<String, String>;

/// The sends of one reply's run. Cheap to clone; clones share the counter.
#[derive(Clone)]
pub struct RunSends {
    recorder: Recorder,
    inner: Arc<Inner>,
}

struct Inner {
    /// What every key starts with: the reply's key, and the generation when earlier runs
    /// for its messages were kept for later.
    prefix: String,
    /// Sends of a killed attempt at this reply, recorded before it died.
    recovered: SentKeys,
    /// How many `message` tool sends the run made so far.
    messages: AtomicUsize,
}

impl std::fmt::Debug for RunSends {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RunSends").field("recorder", &self.recorder).finish_non_exhaustive()
    }
}

/// How a send under the ledger went.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Outcome {
    /// A killed attempt at the reply had sent it (it was recorded): not sent again.
    Recorded(SentMessage),
    /// Sent now, or found on the platform by its key, and recorded.
    Sent(SentMessage),
}

impl Outcome {
    pub fn message(&self) -> &SentMessage {
        match self {
            Self::Recorded(sent) | Self::Sent(sent) => sent,
        }
    }
}

impl RunSends {
    /// The sends of the reply `recorder` writes; `recovered`: what a killed attempt at it
    /// recorded ([`super::RecoveredReply::sent`]); `generation`: how many runs for its
    /// messages were kept for later (their transcripts show what they sent, so this run's
    /// sends are new ones, under keys of their own).
    pub fn new(recorder: Recorder, recovered: SentKeys, generation: u32) -> Self {
        let prefix = match generation {
            0 => recorder.reply_key(),
            generation => format!("{}.{generation}", recorder.reply_key()),
        };
        Self { recorder, inner: Arc::new(Inner { prefix, recovered, messages: AtomicUsize::new(0) }) }
    }

    /// The key of the run's next `message` tool send (its caption's rest adds a suffix):
    /// the n-th send of the tool in this reply.
    pub fn next_message_key(&self) -> String {
        let index = self.inner.messages.fetch_add(1, Ordering::Relaxed);
        format!("{}:message:{index}", self.inner.prefix)
    }

    /// The key of the reply's `index`-th streamed block message.
    pub fn block_key(&self, index: usize) -> String {
        format!("{}:block:{index}", self.inner.prefix)
    }

    /// Sends `message` (its idempotency key made by [`RunSends::next_message_key`] or
    /// [`RunSends::block_key`]) unless a killed attempt at the reply sent it, and records
    /// it. A send repeated within this process returns the first delivery (the outbound
    /// scheduler remembers delivered keys).
    pub async fn send(&self, scheduler: &OutboundScheduler, message: OutboundMessage) -> Result<Outcome, ChannelError> {
        self.send_with(message, |message, inherited| async move {
            if inherited { scheduler.send_after_unknown_outcome(message).await } else { scheduler.send(message).await }
        })
        .await
    }

    /// [`RunSends::send`] for rendered text, sent again as plain text if the platform
    /// rejects its markup ([`OutboundScheduler::send_or_plain`]).
    pub async fn send_or_plain(
        &self,
        scheduler: &OutboundScheduler,
        message: OutboundMessage,
        markup: MarkupDialect,
    ) -> Result<Outcome, ChannelError> {
        self.send_with(message, |message, inherited| async move {
            if inherited {
                scheduler.send_or_plain_after_unknown_outcome(message, markup).await
            } else {
                scheduler.send_or_plain(message, markup).await
            }
        })
        .await
    }

    async fn send_with<F, Fut>(&self, message: OutboundMessage, send: F) -> Result<Outcome, ChannelError>
    where
        F: FnOnce(OutboundMessage, bool) -> Fut,
        Fut: Future<Output = Result<SentMessage, ChannelError>>,
    {
        let Some(key) = message.idempotency_key.clone() else {
            // Nothing names it across a restart: an ordinary send.
            return send(message, false).await.map(Outcome::Sent);
        };
        if let Some(message_id) = self.inner.recovered.get(&key) {
            tracing::info!(key, message_id, "a killed attempt at this reply sent this already; not sending it again");
            return Ok(Outcome::Recorded(SentMessage { message_id: message_id.clone() }));
        }
        // A reply an earlier process began may have sent it without recording it.
        let sent = send(message, self.recorder.inherited()).await?;
        let event = LedgerEvent::Sent { key, message_id: sent.message_id.clone() };
        self.recorder.record(&event, false).await;
        Ok(Outcome::Sent(sent))
    }
}

#[cfg(test)]
mod tests;
