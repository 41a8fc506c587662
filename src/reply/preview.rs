//! Preview streaming (`streaming = "partial"`, SPEC §7): one message per turn that grows
//! in place as the model writes, then becomes the final reply.
//!
//! The first send waits for [`PREVIEW_MIN_CHARS`] of visible text (after the silent-token
//! hold-back, so a `NO_REPLY` never flashes); after that the message is edited at most once
//! per the channel's `min_edit_interval`, the newest text winning. At the end
//! [`PreviewStream::finish`] turns the preview into the final reply: a single final that
//! fits is edited in (no second message); anything else is sent normally and the preview
//! deleted. An edit that fails ambiguously (timeout, 5xx) keeps the preview rather than risk
//! showing the reply twice; a clear refusal falls back to a fresh send.

use ferry_channel::{ChannelError, MarkupDialect, MessageRef, OutboundMessage, Target, TextFormat};
use tokio::time::{Duration, Instant};

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
    /// What the platform shows now.
    shown: String,
    /// The newest visible text, possibly not shown yet.
    latest: String,
    last_call: Option<Instant>,
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
            shown: String::new(),
            latest: String::new(),
            last_call: None,
        }
    }

    /// The model's text so far. Sends or edits the preview if the throttle allows;
    /// otherwise remembers the text for [`PreviewStream::tick`].
    pub async fn update(&mut self, text_so_far: &str) {
        let visible = visible_while_streaming(text_so_far);
        if visible.chars().count() > self.text_limit {
            // Too long for one message: the final will be sent in parts; stop growing.
            return;
        }
        visible.clone_into(&mut self.latest);
        self.tick().await;
    }

    /// When a remembered text is next allowed out, if one waits.
    pub fn due(&self) -> Option<Instant> {
        let waiting = self.latest != self.shown && (self.message.is_some() || self.ready_to_start());
        waiting.then(|| self.last_call.map_or_else(Instant::now, |last| last + self.interval))
    }

    /// Shows the newest text if the throttle allows now.
    pub async fn tick(&mut self) {
        match &self.message {
            None if self.ready_to_start() => {
                let message = OutboundMessage::text(self.target.clone(), self.latest.clone());
                self.last_call = Some(Instant::now());
                match self.scheduler.send(message).await {
                    Ok(sent) => {
                        self.message = Some(MessageRef { target: self.target.clone(), message_id: sent.message_id });
                        self.shown.clone_from(&self.latest);
                    }
                    Err(error) => tracing::debug!(%error, "sending a preview failed; the final will be sent normally"),
                }
            }
            Some(message) if self.latest != self.shown && self.throttle_passed() => {
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

    /// Makes the preview the final reply. `finals` are the reply's messages, shaped,
    /// rendered and split, in order.
    pub async fn finish(mut self, finals: &[OutboundMessage]) -> Finished {
        let Some(message) = self.message.take() else { return Finished::NoPreview };
        if let [last] = finals
            && last.attachments.is_empty()
            && last.text.chars().count() <= self.text_limit
        {
            let message_id = message.message_id.clone();
            match self.scheduler.edit(message.clone(), last.text.clone(), last.format, Priority::Final).await {
                Ok(_) => return Finished::EditedInPlace { message_id },
                Err(error @ (ChannelError::Transient { .. } | ChannelError::RateLimited { .. })) => {
                    // It may have landed: a fresh send could show the reply twice.
                    tracing::warn!(%error, "the final edit of a preview may not have landed; keeping the preview");
                    return Finished::EditedInPlace { message_id };
                }
                Err(error) => tracing::info!(%error, "the platform refused the final edit; sending the reply fresh"),
            }
        }
        let mut sent = Vec::with_capacity(finals.len());
        for (index, final_message) in finals.iter().enumerate() {
            match self.scheduler.send_or_plain(final_message.clone(), self.markup).await {
                Ok(delivered) => sent.push((index, delivered.message_id)),
                Err(error) => tracing::error!(%error, "sending a final reply failed"),
            }
        }
        if let Err(error) = self.scheduler.delete(message).await {
            tracing::debug!(%error, "deleting a superseded preview failed");
        }
        Finished::SentFresh { sent }
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
