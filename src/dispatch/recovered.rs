//! A run whose messages a killed process was already answering (SPEC §11): its reply is
//! finished from the delivery ledger instead of being answered again.
//!
//! Before a run's agent starts, [`settle`] takes the recovered replies of its messages
//! ([`DeliveryLedger::take`]):
//! - a reply whose finals were recorded is delivered from the record (what is missing
//!   only, the send that may have been in flight reconciled), and its messages are not run
//!   again;
//! - a reply that was still streaming leaves its preview, which the new run streams into
//!   ([`Settled::preview`]) rather than leaving it frozen beside a second reply, and what
//!   it did while it ran ([`Settled::resumed`]): the new run resumes from its last step
//!   and does not send again what it sent.
//!
//! It runs inside the session's lane, so the recovered reply keeps its place in the chat's
//! order.

use std::sync::Arc;

use ferry_channel::MessageRef;

use crate::channels::ChannelRegistry;
use crate::metrics::{PreviewAction, metrics};
use crate::queue::QueuedMessage;
use crate::reply::finals::FinalsPlan;
use crate::reply::ledger::{DeliveryLedger, OrphanPreview, RecoveredReply, RecoveredSends};
use crate::reply::outbound::Schedulers;
use crate::types::conversation::ChatMessage;

/// What is left of a run after its recovered replies were dealt with.
pub(super) struct Settled {
    /// The messages still to answer, oldest first.
    pub messages: Vec<QueuedMessage>,
    /// A preview a killed attempt at these messages left, to stream into.
    pub preview: Option<Recovered>,
    /// Every recovered reply delivered also answered its messages in the ledger.
    pub answered: bool,
    /// What a killed attempt at these messages did while it ran: the new run resumes it.
    pub resumed: Resumed,
}

/// What a killed attempt at a run did while it ran, for the run that takes it up again.
#[derive(Default)]
pub(super) struct Resumed {
    /// Its sends (`message` tool sends, block messages): not sent again.
    pub sends: RecoveredSends,
    /// Its own messages as far as its last step: the new run starts from them.
    pub steps: Vec<ChatMessage>,
    /// The messages it answered (those it was started for, and those steered into it
    /// before its last step), when it has steps.
    pub seqs: Vec<i64>,
    /// Messages it answered that this run's batch does not hold: steered into it before
    /// its last step, or batched with this run's messages by the killed attempt. They are
    /// in `steps` already; this run answers them, and a later batch does not run them.
    pub joined: Vec<i64>,
    /// The killed attempt had ended: `steps` is all it said.
    pub ended: bool,
}

/// A recovered preview and where it is.
pub(super) struct Recovered {
    pub channel: String,
    pub account_id: String,
    pub message: MessageRef,
    /// The messages the reply that streamed it answered.
    pub seqs: Vec<i64>,
}

pub(super) async fn settle(
    ledger: &DeliveryLedger,
    channels: &ChannelRegistry,
    schedulers: &Schedulers,
    messages: Vec<QueuedMessage>,
) -> Settled {
    let ids: Vec<i64> = messages.iter().map(|message| message.id).collect();
    let recovered = ledger.take(&ids);
    let mut answered = true;
    let mut preview = None;
    let mut resumed = Resumed::default();
    for reply in &recovered {
        if reply.finals.is_none() {
            resumed.sends.absorb(reply);
            // One run resumes; a second reply's steps (its messages batched with the
            // first's after the restart) are answered anew.
            if resumed.steps.is_empty() && !reply.steps.is_empty() {
                resumed.steps.clone_from(&reply.steps);
                // The killed attempt may have answered messages this batch does not hold
                // (a replica taking a session over hands its messages on one at a time):
                // its recorded messages answer them already, so they join this run as
                // steered ones do, and are not run again in a later batch.
                let batched_apart = reply.stepped.iter().filter(|seq| !ids.contains(seq));
                resumed.joined = reply.joined.iter().chain(batched_apart).copied().collect();
                resumed.ended = reply.ended;
                resumed.seqs = reply.stepped.iter().chain(&reply.joined).copied().collect();
            }
        }
        match (&reply.finals, &reply.preview) {
            (Some(_), _) => answered &= finish(ledger, channels, schedulers, reply).await,
            (None, Some(message)) if preview.is_none() => {
                preview = Some(Recovered {
                    channel: reply.channel.clone(),
                    account_id: reply.account_id.clone(),
                    message: message.clone(),
                    seqs: reply.seqs.to_vec(),
                });
            }
            (None, Some(message)) => {
                let orphan = OrphanPreview {
                    channel: reply.channel.clone(),
                    account_id: reply.account_id.clone(),
                    message: message.clone(),
                };
                delete_orphan(channels, schedulers, &orphan).await;
            }
            (None, None) => {}
        }
    }
    let messages: Vec<QueuedMessage> = messages.into_iter().filter(|message| !ledger.is_finished(message.id)).collect();
    Settled { messages, preview, answered, resumed }
}

/// Delivers a recovered reply's recorded finals. Returns whether the record completing it
/// was written.
async fn finish(
    ledger: &DeliveryLedger,
    channels: &ChannelRegistry,
    schedulers: &Schedulers,
    reply: &Arc<RecoveredReply>,
) -> bool {
    let Some(finals) = &reply.finals else { return false };
    // Delivered or not, these messages (and those steered into the run) are not run
    // again: their answer was written.
    ledger.finished(&reply.seqs);
    ledger.finished(&finals.joined);
    let Some(channel) = channels.get(&reply.channel, Some(&reply.account_id)) else {
        tracing::warn!(channel = %reply.channel, account = %reply.account_id, "a reply left unfinished cannot be completed: its channel is not connected");
        return false;
    };
    let plan = FinalsPlan::resume(reply, finals);
    let action = plan
        .preview
        .as_ref()
        .map(|_| if plan.edit_in_place { PreviewAction::Finalized } else { PreviewAction::Deleted });
    tracing::info!(channel = %reply.channel, seqs = ?reply.seqs, delivered = reply.delivered.len(), of = finals.messages.len(), "completing a reply left unfinished by the last shutdown");
    let recorder = ledger.recorder(reply.seqs.clone());
    recorder.join(&finals.joined);
    let outcome = plan.deliver(&schedulers.for_channel(&channel), Some(&recorder)).await;
    if let Some(action) = action {
        metrics().preview_recovered(&reply.channel, action);
    }
    outcome.answered
}

/// Deletes a preview nothing will stream into any more.
pub(super) async fn delete_orphan(channels: &ChannelRegistry, schedulers: &Schedulers, orphan: &OrphanPreview) {
    let Some(channel) = channels.get(&orphan.channel, Some(&orphan.account_id)) else { return };
    match schedulers.for_channel(&channel).delete(orphan.message.clone()).await {
        Ok(_) => metrics().preview_recovered(&orphan.channel, PreviewAction::Deleted),
        Err(error) => {
            tracing::warn!(channel = %orphan.channel, %error, "cannot delete a preview left by the last shutdown")
        }
    }
}

#[cfg(test)]
mod tests {
    use ferry_channel::{ChatKind, ChatRef, InboundMessage, Sender};

    use super::*;
    use crate::reply::ledger::testing::accept;
    use crate::reply::ledger::{RunSends, StepKind};
    use crate::state::sqlite::inbound_log::InboundLog;

    fn queued(id: i64) -> QueuedMessage {
        let chat = ChatRef::new(ChatKind::Direct, "42");
        let message = InboundMessage::new("memory", "default", chat, Sender::user("42"), "q", "q");
        QueuedMessage { id, session_key: "s".into(), message, prompt: "q".into(), enqueued_at: chrono::Utc::now() }
    }

    /// A replica taking a session over hands its messages on one at a time. A killed
    /// attempt had answered two of them in one run: the run resuming it, for the first,
    /// answers the second too (it is in the resumed messages), so a later batch does not
    /// ask the model about it again.
    #[tokio::test]
    async fn a_resumed_attempt_answers_the_messages_it_batched_that_this_batch_does_not_hold() {
        let dir = tempfile::tempdir().unwrap();
        let log = InboundLog::open(&dir.path().join("inbound.log")).unwrap();
        let (first, second) = (accept(&log, "1").await, accept(&log, "2").await);
        let killed = DeliveryLedger::new(Arc::new(log.clone()));
        let sends = RunSends::new(killed.recorder(vec![first, second]), RecoveredSends::default(), 0);
        let said = vec![ChatMessage::user("one\ntwo"), ChatMessage::assistant("both answered", Vec::new())];
        sends.step(said, Vec::new(), "run-1", StepKind { ended: true, whole: true }).await;

        let ledger = DeliveryLedger::new(Arc::new(log.clone()));
        let orphans = ledger.adopt(&[first, second], log.unanswered().unwrap().deliveries);
        assert!(orphans.is_empty());
        let settled = settle(&ledger, &ChannelRegistry::new(), &Schedulers::default(), vec![queued(first)]).await;

        let left: Vec<i64> = settled.messages.iter().map(|message| message.id).collect();
        assert_eq!(left, [first], "the batch's own message is still to answer");
        assert!(settled.resumed.ended && settled.resumed.steps.len() == 2);
        assert_eq!(settled.resumed.joined, [second], "the resumed run answers the other message");
        assert_eq!(settled.resumed.seqs, [first, second]);
    }
}
