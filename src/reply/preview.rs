//! Preview streaming (`streaming = "partial"`, SPEC §7): one message per turn that grows
//! in place as the model writes, then becomes the final reply.
//!
//! The first send waits for [`PREVIEW_MIN_CHARS`] of visible text (after the silent-token
//! hold-back, so a `NO_REPLY` never flashes); after that the message is edited at most once
//! per the channel's `min_edit_interval`, the newest text winning. At the end the preview
//! becomes the final reply ([`super::finals`]): a single final that fits is edited in (no
//! second message); anything else is sent normally and the preview deleted.
//!
//! The preview's message id goes into the delivery ledger the moment the platform gives it
//! ([`PreviewStream::with_recorder`]), and a run retried after a restart streams into the
//! preview its killed attempt left ([`PreviewStream::adopt`]): no fragment stays frozen.
//! The first send carries an idempotency key that survives a restart, so a platform that
//! deduplicates sends (Discord) hands back the preview an unrecorded send created.
//!
//! A reply threaded to a message (`reply_to_mode`, or the model's reply directive) has its
//! preview sent threaded there ([`PreviewStream::thread_to`]): an edit cannot thread a
//! message later, so a final threaded elsewhere than its preview is sent fresh instead of
//! edited in.

use ferry_channel::{ChannelError, MarkupDialect, MessageRef, OutboundMessage, Target, TextFormat};
use tokio::time::{Duration, Instant};

use super::finals::{FinalsOutcome, FinalsPlan};
use super::ledger::{LedgerEvent, Recorder};
use super::outbound::{OutboundScheduler, Priority};
use super::silent::visible_while_streaming;

/// Visible characters before a preview is first sent: a message that would say only
/// "Sure" a moment before the real answer is noise.
pub const PREVIEW_MIN_CHARS: usize = 30;

/// One turn's preview in one chat. Driven by a single task: feed it the growing text with
/// [`PreviewStream::update`], call [`PreviewStream::tick`] when [`PreviewStream::due`]
/// passes, and end with [`PreviewStream::finish`].
pub struct PreviewStream {
    scheduler: OutboundScheduler,
    target: Target,
    interval: Duration,
    text_limit: usize,
    /// The channel's markup, for the plain-text resend of a rejected final.
    markup: MarkupDialect,
    /// The preview on the platform, once sent.
    message: Option<MessageRef>,
    /// The message the first send is to be threaded to.
    reply_to: Option<String>,
    /// What the sent preview is threaded to; `None` while unknown (a preview adopted from a
    /// killed process).
    threaded_to: Option<Option<String>>,
    /// The message the platform refused to thread the first send to: the preview goes
    /// unthreaded, and so do finals threaded there.
    refused_thread: Option<String>,
    /// What the platform shows now.
    shown: String,
    /// The newest visible text, possibly not shown yet.
    latest: String,
    last_call: Option<Instant>,
    /// Where the preview's message id is recorded, with the channel it is on.
    recorder: Option<(Recorder, String, String)>,
}

/// What [`PreviewStream::finish`] did with the final texts.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Finished {
    /// The preview (this message) now shows the reply; nothing else needs sending.
    EditedInPlace { message_id: String },
    /// There was no preview; the caller sends the finals as usual.
    NoPreview,
    /// The finals were sent as new messages (and the preview removed), or there were none
    /// and the preview was removed. `sent`: the index of each final delivered, and its id.
    SentFresh { sent: Vec<(usize, String)> },
}

impl PreviewStream {
    pub fn new(
        scheduler: OutboundScheduler,
        target: Target,
        interval: Duration,
        text_limit: usize,
        markup: MarkupDialect,
    ) -> Self {
        Self {
            scheduler,
            target,
            interval,
            text_limit,
            markup,
            message: None,
            reply_to: None,
            threaded_to: None,
            refused_thread: None,
            shown: String::new(),
            latest: String::new(),
            last_call: None,
            recorder: None,
        }
    }

    /// Records the preview's message id in the delivery ledger as soon as it is known
    /// (`channel` and `account_id` say where it is).
    pub fn with_recorder(mut self, recorder: Recorder, channel: &str, account_id: &str) -> Self {
        self.recorder = Some((recorder, channel.to_owned(), account_id.to_owned()));
        self
    }

    /// Streams into `message`, a preview an earlier attempt of this reply left (a killed
    /// process), instead of sending a new one. What it shows is unknown, so the first text
    /// ready is edited in at once.
    pub fn adopt(&mut self, message: MessageRef) {
        self.message = Some(message);
        self.threaded_to = None;
        // What it shows is unknown: the first non-empty text is shown.
        self.shown.clear();
    }

    /// Threads the preview to `message` when it is first sent (no effect once it is out,
    /// or after the platform refused a threaded preview).
    pub fn thread_to(&mut self, message: Option<String>) {
        if self.refused_thread.is_none() {
            self.reply_to = message;
        }
    }

    /// The preview message, once sent (or adopted).
    pub fn message(&self) -> Option<&MessageRef> {
        self.message.as_ref()
    }

    /// Ends streaming: the preview message, for the finals to replace.
    pub fn into_message(self) -> Option<MessageRef> {
        self.message
    }

    /// Ends streaming: the plan delivering `finals` in place of the preview. A final that
    /// is to be threaded other than the preview was is sent fresh (the preview deleted):
    /// an edit cannot move a message into a thread. An adopted preview, threaded by a
    /// killed process by the same rules, is taken to match. Finals threaded to a message the
    /// platform refused to thread the preview to go unthreaded as the preview did.
    pub fn into_plan(self, mut finals: Vec<OutboundMessage>) -> FinalsPlan {
        if let Some(refused) = &self.refused_thread {
            for message in finals.iter_mut().filter(|message| message.reply_to_message_id.as_ref() == Some(refused)) {
                message.reply_to_message_id = None;
            }
        }
        let (text_limit, markup, threaded_to) = (self.text_limit, self.markup, self.threaded_to.clone());
        let mut plan = FinalsPlan::new(finals, self.into_message(), text_limit, markup);
        if let (Some(threaded_to), Some(first)) = (threaded_to, plan.messages.first())
            && first.reply_to_message_id != threaded_to
        {
            plan.edit_in_place = false;
        }
        plan
    }

    /// The model's text so far. Sends or edits the preview if the throttle allows;
    /// otherwise remembers the text for [`PreviewStream::tick`]. Returns `false` once the
    /// text is too long for one message: the preview stops growing (the final will be sent
    /// in parts), so a caller need not render longer texts of the same message for it.
    pub async fn update(&mut self, text_so_far: &str) -> bool {
        let visible = visible_while_streaming(text_so_far);
        if visible.chars().count() > self.text_limit {
            return false;
        }
        visible.clone_into(&mut self.latest);
        self.tick().await;
        true
    }

    /// When a remembered text is next allowed out, if one waits.
    pub fn due(&self) -> Option<Instant> {
        // An empty text is never shown (an adopted preview waits for the new text).
        let waiting =
            !self.latest.is_empty() && self.latest != self.shown && (self.message.is_some() || self.ready_to_start());
        waiting.then(|| self.last_call.map_or_else(Instant::now, |last| last + self.interval))
    }

    /// Shows the newest text if the throttle allows now.
    pub async fn tick(&mut self) {
        match &self.message {
            None if self.ready_to_start() => {
                let mut message = OutboundMessage::text(self.target.clone(), self.latest.clone());
                message.idempotency_key =
                    self.recorder.as_ref().map(|(recorder, ..)| format!("{}:preview", recorder.reply_key()));
                message.reply_to_message_id.clone_from(&self.reply_to);
                self.last_call = Some(Instant::now());
                // A killed process may have sent this preview without recording it.
                let inherited = self.recorder.as_ref().is_some_and(|(recorder, ..)| recorder.inherited());
                let sent = if inherited {
                    self.scheduler.send_after_unknown_outcome(message).await
                } else {
                    self.scheduler.send(message).await
                };
                match sent {
                    Ok(sent) => {
                        let message = MessageRef { target: self.target.clone(), message_id: sent.message_id };
                        if let Some((recorder, channel, account_id)) = &self.recorder {
                            let event = LedgerEvent::Preview {
                                channel: channel.clone(),
                                account_id: account_id.clone(),
                                message: message.clone(),
                            };
                            recorder.record(&event, false).await;
                        }
                        self.message = Some(message);
                        // A message the killed process sent is threaded as it chose.
                        self.threaded_to = (!inherited).then(|| self.reply_to.clone());
                        if inherited {
                            // It may be the killed process's message (found by its key, or
                            // handed back by a platform that deduplicates): what it shows is
                            // unknown, so the next tick edits the text in.
                            self.shown.clear();
                        } else {
                            self.shown.clone_from(&self.latest);
                        }
                    }
                    Err(ChannelError::Rejected { reason }) if self.reply_to.is_some() => {
                        // The platform refused the thread (a message id it does not know):
                        // the next update sends the preview unthreaded.
                        tracing::info!(%reason, "a threaded preview was refused; streaming it unthreaded");
                        self.refused_thread = self.reply_to.take();
                    }
                    Err(error) => tracing::debug!(%error, "sending a preview failed; the final will be sent normally"),
                }
            }
            Some(message) if !self.latest.is_empty() && self.latest != self.shown && self.throttle_passed() => {
                let (message, text) = (message.clone(), self.latest.clone());
                self.last_call = Some(Instant::now());
                match self.scheduler.edit(message, text.clone(), TextFormat::Plain, Priority::Preview).await {
                    Ok(_) => self.shown = text,
                    Err(error) => tracing::debug!(%error, "editing a preview failed; the next update tries again"),
                }
            }
            _ => {}
        }
    }

    /// Makes the preview the final reply (see [`super::finals`]), without recording it in
    /// a ledger. `finals` are the reply's messages, shaped, rendered and split, in order.
    pub async fn finish(self, finals: &[OutboundMessage]) -> Finished {
        let scheduler = self.scheduler.clone();
        let Some(message) = self.message.clone() else { return Finished::NoPreview };
        let plan = self.into_plan(finals.to_vec());
        let edit_in_place = plan.edit_in_place;
        let FinalsOutcome { sent, .. } = plan.deliver(&scheduler, None).await;
        match sent.as_slice() {
            [(0, id)] if edit_in_place && *id == message.message_id => {
                Finished::EditedInPlace { message_id: id.clone() }
            }
            _ => Finished::SentFresh { sent },
        }
    }

    fn ready_to_start(&self) -> bool {
        self.latest.chars().count() >= PREVIEW_MIN_CHARS
    }

    fn throttle_passed(&self) -> bool {
        self.last_call.is_none_or(|last| last.elapsed() >= self.interval)
    }
}

#[cfg(test)]
mod tests;
