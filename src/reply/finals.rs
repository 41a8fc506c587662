//! Delivering a reply's final messages: edited into the turn's preview when the reply is
//! one message that fits, otherwise sent as messages of their own and the preview deleted
//! (SPEC §7). Each step is written to the delivery ledger ([`super::ledger`]) as it
//! completes, so a restart can finish a reply a killed process started: a resumed plan
//! skips what was delivered and reconciles the send that may have been in flight.
//!
//! A truncated preview is never the answer: a final edit that cannot land (after the
//! scheduler waited out every 429 within the delivery deadline) falls back to a fresh send,
//! after which the preview is deleted.

use std::collections::BTreeMap;

use ferry_channel::{ChannelError, MarkupDialect, MessageRef, OutboundMessage, TextFormat};

use super::format::part_as_plain;
use super::ledger::uploads::{UploadedFiles, uploaded_ahead};
use super::ledger::{LedgerEvent, RecordedFinals, Recorder, RecoveredReply};
use super::outbound::{OutboundScheduler, Priority};

/// How a reply's finals are to be delivered, and how far that got.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FinalsPlan {
    pub messages: Vec<OutboundMessage>,
    /// The turn's preview, which the finals replace.
    pub preview: Option<MessageRef>,
    /// The single final is edited into the preview.
    pub edit_in_place: bool,
    /// The channel's markup, for the plain-text resend of a rejected final.
    pub markup: MarkupDialect,
    /// Finals already on the platform: index → message id.
    pub delivered: BTreeMap<usize, String>,
    /// A previous process was delivering this plan when it stopped: the first final not
    /// known to be delivered may have landed, and is reconciled before it is sent.
    pub resumed: bool,
    /// Files of finals uploaded ahead of their send ([`super::ledger::uploads`]).
    pub uploads: UploadedFiles,
}

/// What [`FinalsPlan::deliver`] did.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct FinalsOutcome {
    /// Each final this call put on the platform: its index and message id (the preview's
    /// id when it was edited in place).
    pub sent: Vec<(usize, String)>,
    /// The ledger record completing the reply, which also answers its messages, was
    /// written: the caller need not answer them again.
    pub answered: bool,
}

impl FinalsPlan {
    /// A fresh plan for `messages`, replacing `preview` if there is one.
    pub fn new(
        messages: Vec<OutboundMessage>,
        preview: Option<MessageRef>,
        text_limit: usize,
        markup: MarkupDialect,
    ) -> Self {
        let edit_in_place = preview.is_some()
            && matches!(messages.as_slice(), [only] if only.attachments.is_empty() && only.text.chars().count() <= text_limit);
        Self {
            messages,
            preview,
            edit_in_place,
            markup,
            delivered: BTreeMap::new(),
            resumed: false,
            uploads: UploadedFiles::new(),
        }
    }

    /// The plan a killed process recorded for `reply`, resumed where it stopped.
    pub fn resume(reply: &RecoveredReply, finals: &RecordedFinals) -> Self {
        Self {
            messages: finals.messages.clone(),
            preview: reply.preview.clone(),
            edit_in_place: finals.edit_in_place,
            markup: finals.markup,
            delivered: reply.delivered.clone(),
            resumed: true,
            uploads: reply.uploads.clone(),
        }
    }

    /// The ledger record of this plan, written before anything is delivered; `joined`: the
    /// messages steered into the run ([`Recorder::joined`]).
    pub fn event(&self, channel: &str, account_id: &str, joined: Vec<i64>) -> LedgerEvent {
        LedgerEvent::Finals {
            channel: channel.to_owned(),
            account_id: account_id.to_owned(),
            messages: self.messages.clone(),
            preview: self.preview.clone(),
            edit_in_place: self.edit_in_place,
            markup: self.markup,
            joined,
        }
    }

    /// Whether there is anything to deliver or clean up.
    pub fn is_empty(&self) -> bool {
        self.messages.is_empty() && self.preview.is_none()
    }

    /// Delivers what is not delivered yet, recording each step with `recorder`.
    pub async fn deliver(mut self, scheduler: &OutboundScheduler, recorder: Option<&Recorder>) -> FinalsOutcome {
        let mut outcome = FinalsOutcome::default();
        let count = self.messages.len();
        if self.edit_in_place
            && let (Some(preview), Some(only)) = (self.preview.clone(), self.messages.first())
            && !self.delivered.contains_key(&0)
        {
            if edit_final(scheduler, &preview, only, self.markup).await {
                let message_id = preview.message_id.clone();
                outcome.answered =
                    record(recorder, &LedgerEvent::Delivered { index: 0, message_id: message_id.clone() }, true).await;
                outcome.sent.push((0, message_id));
                return outcome;
            }
            tracing::info!("the final edit of a preview did not land; sending the reply as a new message");
        }
        let mut first_pending = true;
        for (index, message) in self.messages.iter().enumerate() {
            if self.delivered.contains_key(&index) {
                continue;
            }
            let maybe_sent = self.resumed && std::mem::take(&mut first_pending);
            let message = uploaded_ahead(scheduler, recorder, &self.uploads, message.clone()).await;
            let result = if maybe_sent {
                scheduler.send_or_plain_after_unknown_outcome(message, self.markup).await
            } else {
                scheduler.send_or_plain(message, self.markup).await
            };
            match result {
                Ok(sent) => {
                    self.delivered.insert(index, sent.message_id.clone());
                    let done = self.delivered.len() == count && self.preview.is_none();
                    let event = LedgerEvent::Delivered { index, message_id: sent.message_id.clone() };
                    outcome.answered |= record(recorder, &event, done).await && done;
                    outcome.sent.push((index, sent.message_id));
                }
                Err(error) => tracing::error!(index, %error, "sending a final reply failed"),
            }
        }
        if let Some(preview) = self.preview.take() {
            match scheduler.delete(preview).await {
                // Refused: it is gone already (deleted by a user, or by an earlier attempt).
                Ok(_) | Err(ChannelError::Rejected { .. }) => {
                    let done = self.delivered.len() == count;
                    outcome.answered |= record(recorder, &LedgerEvent::PreviewGone, done).await && done;
                }
                Err(error) => tracing::warn!(%error, "deleting a superseded preview failed"),
            }
        }
        outcome
    }
}

/// Edits `message` into the preview, as plain text if the platform refuses its markup.
/// `false`: it did not land (the scheduler already retried what could be retried).
async fn edit_final(
    scheduler: &OutboundScheduler,
    preview: &MessageRef,
    message: &OutboundMessage,
    markup: MarkupDialect,
) -> bool {
    let edited = scheduler.edit(preview.clone(), message.text.clone(), message.format, Priority::Final).await;
    let edited = match edited {
        Err(ChannelError::MarkupRejected { reason }) => {
            tracing::info!(%reason, "the platform rejected a final's markup; editing it in as plain text");
            let plain = part_as_plain(&message.text, markup);
            scheduler.edit(preview.clone(), plain, TextFormat::Plain, Priority::Final).await
        }
        other => other,
    };
    match edited {
        Ok(_) => true,
        Err(error) => {
            tracing::warn!(%error, "the final edit of a preview failed");
            false
        }
    }
}

async fn record(recorder: Option<&Recorder>, event: &LedgerEvent, done: bool) -> bool {
    match recorder {
        Some(recorder) => recorder.record(event, done).await,
        None => false,
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use ferry_channel::memory::MemoryChannel;
    use ferry_channel::{ChannelCapabilities, ChatKind, ChatRef, SendReconciliation, Target};

    use super::*;

    fn target() -> Target {
        Target { chat: ChatRef::new(ChatKind::Direct, "7"), thread_id: None }
    }

    fn part(index: usize, text: &str) -> OutboundMessage {
        let mut message = OutboundMessage::text(target(), text);
        message.idempotency_key = Some(format!("run-1:{index}"));
        message
    }

    #[tokio::test(start_paused = true)]
    async fn a_resumed_plan_sends_only_what_is_missing_and_adopts_the_part_that_had_landed() {
        let capabilities = ChannelCapabilities {
            send_reconciliation: SendReconciliation::Lookup,
            ..ChannelCapabilities::unrestricted()
        };
        let channel = Arc::new(MemoryChannel::with_capabilities("memory", "default", capabilities));
        let scheduler = OutboundScheduler::new(channel.clone());
        // The killed process had sent parts 0 and 1, but recorded only part 0.
        let parts = vec![part(0, "one"), part(1, "two"), part(2, "three")];
        let zero = scheduler.send(parts[0].clone()).await.unwrap();
        scheduler.send(parts[1].clone()).await.unwrap();
        let mut plan = FinalsPlan::new(parts, None, 4096, MarkupDialect::Markdown);
        plan.delivered.insert(0, zero.message_id);
        plan.resumed = true;

        let restarted = OutboundScheduler::new(channel.clone());
        let outcome = plan.deliver(&restarted, None).await;
        assert_eq!(channel.sent_texts(), ["one", "two", "three"], "nothing sent twice");
        assert_eq!(outcome.sent.iter().map(|(index, _)| *index).collect::<Vec<_>>(), [1, 2]);
    }

    #[tokio::test(start_paused = true)]
    async fn a_resumed_edit_in_place_finishes_the_preview_and_a_gone_preview_is_no_error() {
        let channel = Arc::new(MemoryChannel::new("memory", "default"));
        let scheduler = OutboundScheduler::new(channel.clone());
        let preview = scheduler.send(OutboundMessage::text(target(), "half of it")).await.unwrap();
        let preview = MessageRef { target: target(), message_id: preview.message_id };
        let mut plan =
            FinalsPlan::new(vec![part(0, "the whole answer")], Some(preview.clone()), 4096, MarkupDialect::Markdown);
        plan.resumed = true;
        let outcome = plan.deliver(&scheduler, None).await;
        assert_eq!(outcome.sent, [(0, preview.message_id.clone())]);
        let visible: Vec<String> = channel.visible_messages().into_iter().map(|m| m.text).collect();
        assert_eq!(visible, ["the whole answer"]);

        // Two parts: sent fresh, and the preview (deleted already by someone) is let go.
        scheduler.delete(preview.clone()).await.unwrap();
        let plan = FinalsPlan::new(vec![part(0, "a"), part(1, "b")], Some(preview), 4096, MarkupDialect::Markdown);
        assert_eq!(plan.deliver(&scheduler, None).await.sent.len(), 2);
        let visible: Vec<String> = channel.visible_messages().into_iter().map(|m| m.text).collect();
        assert_eq!(visible, ["a", "b"]);
    }
}
