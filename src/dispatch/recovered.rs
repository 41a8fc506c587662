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
    /// Messages steered into it before its last step: they are in `steps` already.
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
            let sends = &mut resumed.sends;
            sends.sent.extend(reply.sent.iter().map(|(key, id)| (key.clone(), id.clone())));
            sends.blocks.extend(reply.blocks.iter().cloned());
            // One run resumes; a second reply's steps (its messages batched with the
            // first's after the restart) are answered anew.
            if resumed.steps.is_empty() && !reply.steps.is_empty() {
                resumed.steps.clone_from(&reply.steps);
                resumed.joined.clone_from(&reply.joined);
                resumed.ended = reply.ended;
                resumed.seqs = reply.seqs.iter().chain(&reply.joined).copied().collect();
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
