//! What a run does while it goes on — the `message` tool's sends, streamed blocks, the
//! steps of its tool loop — under the delivery ledger, so a run re-done after a crash
//! neither sends anything twice nor loses what it had done.
//!
//! A finished run's finals are recorded before they are sent; these happen while the
//! model is still answering:
//! - before each tool call that changes something (a `message` send, a memory write, a
//!   scheduled job), the run's new messages — the model's turn that makes the call, the
//!   results before it — are recorded as a [`LedgerEvent::Step`]. A run re-done after a
//!   restart resumes from its last step: the model sees what it had already done instead
//!   of doing it again, and a recorded call no result answers is made again with the same
//!   call id;
//! - each `message` send is named by the reply and the call id, so a send made again is
//!   reconciled under the same key — Discord's nonce, Slack's metadata lookup. Telegram has
//!   neither: there each send is recorded once sent ([`LedgerEvent::Sent`]), and only one in
//!   flight at the kill is repeated blind (`ferry_outbound_unknown_outcome_total`);
//! - a run that ends records its last step before its transcript is saved: a run re-done
//!   for its messages after a crash knows what it said (and whether the session has it),
//!   and delivers that instead of asking the model again;
//! - a block message is recorded before it is sent ([`LedgerEvent::BlockMessage`]: its
//!   rendered parts and the digests of the blocks it carries), and a resumed run first sends
//!   those very messages again — reconciled by key on Discord and Slack; on Telegram, which
//!   cannot settle a repeat, each part is also recorded once sent ([`LedgerEvent::Sent`]),
//!   and only one whose send was in flight at the kill is repeated, as the same message. It
//!   then streams its recorded text again, and a block those messages carried is not sent
//!   again (a model asked again that words a block differently sends it: a repeat in other
//!   words rather than a lost block). Without the record before, a block sent unrecorded
//!   would come back merged with the next one, under another key;
//!
//! That is one ledger write per send that the send waits for — on Discord and Slack a
//! `message` send's is the step before its call (which any tool call that changes
//! something has), a block message's the record before it, for all its parts — and one per
//! run (its last step), sharing the log's group commit. On Telegram each send is also
//! recorded once sent, a second record the send does not wait for: it is written behind
//! it, in the group commit of whatever else is written then, and the reply's next step and
//! the end of its block streaming wait for it ([`RunSends::settle`]), so it lands within
//! one write's time of the send, as before, without adding that time to every send.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::{Arc, Mutex, PoisonError};

use ferry_channel::{ChannelError, MarkupDialect, OutboundMessage, SentMessage};
use tokio::task::JoinHandle;

use super::uploads::{UploadedFiles, uploaded_ahead};
use super::{LedgerEvent, Recorder, RecoveredReply};
use crate::reply::outbound::OutboundScheduler;
use crate::types::conversation::ChatMessage;

/// What a killed attempt at a reply had sent while it ran: key → platform message id.
pub type SentKeys = BTreeMap<String, String>;

/// The sends of one reply's run. Cheap to clone.
#[derive(Clone)]
pub struct RunSends {
    recorder: Recorder,
    inner: Arc<Inner>,
}

struct Inner {
    /// What every key starts with: the reply's key, and the generation when earlier runs
    /// for its messages were kept for later.
    prefix: String,
    /// What a killed attempt at this reply recorded; its `blocks` also hold those of its
    /// recorded block messages.
    recovered: Recovered,
    /// The killed attempt's recorded block messages, until they are sent again
    /// ([`RunSends::replay_block_messages`]).
    to_replay: Mutex<Vec<BlockMessage>>,
    /// Records being written behind their sends ([`RunSends::settle`]).
    behind: Mutex<Vec<JoinHandle<()>>>,
}

/// What a killed attempt at a reply recorded while it ran.
#[derive(Debug, Clone, Default)]
pub struct Recovered {
    /// Its sends, by key.
    pub sent: SentKeys,
    /// Digests of the streamed blocks its block messages carried.
    pub blocks: BTreeSet<String>,
    /// Its block messages recorded before they were sent, in order
    /// ([`LedgerEvent::BlockMessage`]).
    pub block_messages: Vec<BlockMessage>,
    /// The files it uploaded ahead of its sends ([`super::uploads`]).
    pub uploads: UploadedFiles,
}

impl Recovered {
    /// Adds what a killed attempt at these messages recorded while it ran.
    pub fn absorb(&mut self, reply: &RecoveredReply) {
        self.sent.extend(reply.sent.iter().map(|(key, id)| (key.clone(), id.clone())));
        self.blocks.extend(reply.blocks.iter().cloned());
        self.uploads.extend(reply.uploads.iter().map(|(key, files)| (key.clone(), files.clone())));
        add_block_messages(&mut self.block_messages, reply.block_messages.iter().cloned());
    }
}

/// Appends to `known` the block messages of `more` it does not hold yet (by key), in order.
pub(super) fn add_block_messages(known: &mut Vec<BlockMessage>, more: impl IntoIterator<Item = BlockMessage>) {
    for message in more {
        if !known.iter().any(|held| held.key() == message.key()) {
            known.push(message);
        }
    }
}

/// A block message recorded before it was sent ([`LedgerEvent::BlockMessage`]).
#[derive(Debug, Clone, PartialEq)]
pub struct BlockMessage {
    /// Its parts, rendered and keyed.
    pub parts: Vec<OutboundMessage>,
    /// The digests of the streamed blocks it carries.
    pub blocks: Vec<String>,
}

impl BlockMessage {
    /// Its first part's key, which names it.
    pub fn key(&self) -> Option<&str> {
        self.parts.first().and_then(|part| part.idempotency_key.as_deref())
    }
}

impl std::fmt::Debug for RunSends {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RunSends").field("recorder", &self.recorder).finish_non_exhaustive()
    }
}

/// What a step holds beyond the messages since the last one.
#[derive(Debug, Clone, Copy, Default)]
pub struct StepKind {
    /// The run is over: these are the last of what it said.
    pub ended: bool,
    /// The messages are the run's from its start ([`LedgerEvent::Step`]'s `whole`).
    pub whole: bool,
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
    /// recorded; `generation`: how many runs for its messages were kept for later (their
    /// transcripts were saved, so this run's sends are new ones, under keys of their own).
    pub fn new(recorder: Recorder, mut recovered: Recovered, generation: u32) -> Self {
        let prefix = match generation {
            0 => recorder.reply_key(),
            generation => format!("{}.{generation}", recorder.reply_key()),
        };
        // A recorded block message is sent again before anything is streamed: its blocks
        // count as sent from the start.
        let to_replay = std::mem::take(&mut recovered.block_messages);
        recovered.blocks.extend(to_replay.iter().flat_map(|message| message.blocks.iter().cloned()));
        let inner = Inner { prefix, recovered, to_replay: Mutex::new(to_replay), behind: Mutex::default() };
        Self { recorder, inner: Arc::new(inner) }
    }

    /// The key of the `message` tool send of the model's call `call_id` (its caption's rest
    /// adds a suffix). The call is recorded before it is made ([`RunSends::step`]): a run
    /// resumed after a crash makes it again with the same id, and its send is reconciled.
    pub fn message_key(&self, call_id: &str) -> String {
        format!("{}:message:{call_id}", self.inner.prefix)
    }

    /// Whether a killed attempt at this reply sent the streamed block with `digest`
    /// ([`block_digest`]).
    pub fn block_was_sent(&self, digest: &str) -> bool {
        self.inner.recovered.blocks.contains(digest)
    }

    /// Records the run's messages since its last step (and the messages steered into it so
    /// far), written by run `run_id`: a run re-done after a crash resumes from here.
    pub async fn step(&self, messages: Vec<ChatMessage>, joined: Vec<i64>, run_id: &str, how: StepKind) {
        self.settle().await;
        self.recorder.join(&joined);
        // Every message the reply answers beyond its own: also those a resumed attempt had
        // answered in another batch ([`Recorder::join`]).
        let joined = self.recorder.joined();
        let StepKind { ended, whole } = how;
        let event = LedgerEvent::Step { messages, joined, run_id: Some(run_id.to_owned()), ended, whole };
        self.recorder.record(&event, false).await;
    }

    /// Sends `message` (its idempotency key made by [`RunSends::message_key`]) unless a
    /// killed attempt at the reply sent it. The step before the model's call names it; where
    /// the platform cannot settle a repeated send (Telegram) it is also recorded once sent
    /// (behind the send: [`RunSends::settle`]), so a run resumed from that step does not
    /// send it again blind. A send repeated within this process returns the first delivery
    /// (the outbound scheduler remembers delivered keys).
    pub async fn send(&self, scheduler: &OutboundScheduler, message: OutboundMessage) -> Result<Outcome, ChannelError> {
        let message = uploaded_ahead(scheduler, Some(&self.recorder), &self.inner.recovered.uploads, message).await;
        self.send_with(message, !scheduler.reconciles_sends(), |message, inherited| async move {
            if inherited { scheduler.send_after_unknown_outcome(message).await } else { scheduler.send(message).await }
        })
        .await
    }

    /// Names the parts of the block message carrying the streamed blocks `blocks` (their
    /// digests; a message over the platform's limit goes in parts) and records it before
    /// any part is sent: a resumed run sends this very message again
    /// ([`RunSends::replay_block_messages`]) rather than one its own stream merges otherwise.
    pub async fn prepare_block_message(&self, parts: &mut [OutboundMessage], blocks: &[String]) {
        // Named by every block it carries: a message that merged blocks is another message
        // than one that carried the first of them alone, and the platform's reconciliation
        // must not answer for one with the other.
        let name = match blocks {
            [] => String::new(),
            [only] => only.clone(),
            several => block_digest(&several.join("+")),
        };
        for (index, part) in parts.iter_mut().enumerate() {
            part.idempotency_key = Some(format!("{}:block:{name}:{index}", self.inner.prefix));
        }
        let event = LedgerEvent::BlockMessage { parts: parts.to_vec(), blocks: blocks.to_vec() };
        self.recorder.record(&event, false).await;
    }

    /// Sends a part of a block message [`RunSends::prepare_block_message`] named, as plain
    /// text again if the platform rejects its markup ([`OutboundScheduler::send_or_plain`]).
    /// Where the platform cannot settle a repeated send (Telegram), the part is also recorded
    /// once sent, behind the send (its blocks are in the record made before).
    pub async fn send_block(
        &self,
        scheduler: &OutboundScheduler,
        message: OutboundMessage,
        markup: MarkupDialect,
    ) -> Result<Outcome, ChannelError> {
        self.send_with(message, !scheduler.reconciles_sends(), |message, inherited| async move {
            if inherited {
                scheduler.send_or_plain_after_unknown_outcome(message, markup).await
            } else {
                scheduler.send_or_plain(message, markup).await
            }
        })
        .await
    }

    /// Sends again the block messages a killed attempt at this reply recorded before sending
    /// them (it may have sent them, or some of their parts), once per run, before anything
    /// it streams: reconciled by key where the platform can; on Telegram a part recorded as
    /// sent is skipped, and one that is not is sent again, the very same message at worst
    /// (its outcome is unknown). Returns how many parts are on the platform.
    pub async fn replay_block_messages(
        &self,
        scheduler: &OutboundScheduler,
        markup: MarkupDialect,
    ) -> Result<usize, ChannelError> {
        let messages = std::mem::take(&mut *self.inner.to_replay.lock().unwrap_or_else(PoisonError::into_inner));
        let mut parts = 0;
        for part in messages.into_iter().flat_map(|message| message.parts) {
            let key = part.idempotency_key.clone();
            let recorded = key.as_ref().is_some_and(|key| self.inner.recovered.sent.contains_key(key));
            if !recorded {
                let sent = scheduler.send_or_plain_after_unknown_outcome(part, markup).await?;
                // Where a repeat is not settled by key, a second kill must not repeat it again.
                if let Some(key) = key.filter(|_| !scheduler.reconciles_sends()) {
                    self.record_behind(LedgerEvent::Sent { key, message_id: sent.message_id, blocks: Vec::new() });
                }
            }
            parts += 1;
        }
        Ok(parts)
    }

    /// Waits until the records written behind their sends are written (or failed: each
    /// logs its own failure). The reply's next step waits for them, and so does the end of
    /// its block streaming, before the record that completes the reply: the reply's records
    /// stay in the order of what they say.
    pub async fn settle(&self) {
        let behind = std::mem::take(&mut *self.inner.behind.lock().unwrap_or_else(PoisonError::into_inner));
        for record in behind {
            if let Err(error) = record.await {
                tracing::warn!(%error, "a send's ledger record was not written; a restart now may repeat that send");
            }
        }
    }

    /// Writes `event` without waiting for it ([`RunSends::settle`] does).
    fn record_behind(&self, event: LedgerEvent) {
        let recorder = self.recorder.clone();
        let record = tokio::spawn(async move {
            recorder.record(&event, false).await;
        });
        let mut behind = self.inner.behind.lock().unwrap_or_else(PoisonError::into_inner);
        behind.retain(|written| !written.is_finished());
        behind.push(record);
    }

    async fn send_with<F, Fut>(
        &self,
        message: OutboundMessage,
        // Also recorded once sent: where the platform cannot settle a repeat, what the
        // ledger holds already (the block message recorded before it, the step naming the
        // `message` call) does not say whether it went out.
        record_once_sent: bool,
        send: F,
    ) -> Result<Outcome, ChannelError>
    where
        F: FnOnce(OutboundMessage, bool) -> Fut,
        Fut: Future<Output = Result<SentMessage, ChannelError>>,
    {
        let Some(key) = message.idempotency_key.clone() else {
            // Nothing names it across a restart: an ordinary send.
            return send(message, false).await.map(Outcome::Sent);
        };
        if let Some(message_id) = self.inner.recovered.sent.get(&key) {
            tracing::info!(key, message_id, "a killed attempt at this reply sent this already; not sending it again");
            return Ok(Outcome::Recorded(SentMessage { message_id: message_id.clone() }));
        }
        // A reply an earlier process began may have sent it without recording it.
        let sent = send(message, self.recorder.inherited()).await?;
        if record_once_sent {
            self.record_behind(LedgerEvent::Sent { key, message_id: sent.message_id.clone(), blocks: Vec::new() });
        }
        Ok(Outcome::Sent(sent))
    }
}

/// A streamed block's name across a restart: the first 16 hex digits of its text's
/// SHA-256 (stable across versions and processes, unlike the standard library's hasher).
pub fn block_digest(text: &str) -> String {
    use sha2::{Digest, Sha256};
    Sha256::digest(text.as_bytes()).iter().take(8).map(|byte| format!("{byte:02x}")).collect()
}

#[cfg(test)]
mod tests;
