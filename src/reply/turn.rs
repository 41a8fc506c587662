//! One run's reply in one chat: follows the run's events while it streams (the preview),
//! then shapes the finals and delivers them through the account's outbound scheduler.
//!
//! ```text
//! run events ──► ReplyTurn::follow ──► PreviewStream (streaming = "partial")
//! outcome    ──► ReplyTurn::deliver ──► shaping ─► split ─► preview finish / sends
//! ```

use ferry_channel::OutboundMessage;
use tokio::sync::mpsc;
use tokio::time::{Duration, sleep_until};

use super::outbound::OutboundScheduler;
use super::preview::{Finished, PreviewStream};
use super::shaping::shape_finals;
use super::split::split_text;
use crate::agent::tools::Origin;
use crate::agent::{AgentEvent, AgentStream, AssistantEvent, RunOutcome, RunStatus};

/// How a turn's reply is to be shown.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TurnStyle {
    /// Stream a preview message that is edited in place.
    pub preview: bool,
    /// Characters per message (the channel's limit, or the operator's lower chunk limit).
    pub text_limit: usize,
    /// The channel's shortest interval between two edits of one message.
    pub edit_interval: Duration,
}

pub struct ReplyTurn {
    scheduler: OutboundScheduler,
    origin: Origin,
    run_id: String,
    text_limit: usize,
    preview: Option<PreviewStream>,
}

impl ReplyTurn {
    pub fn new(scheduler: OutboundScheduler, origin: Origin, run_id: &str, style: TurnStyle) -> Self {
        let text_limit = style.text_limit.max(1);
        let preview = style
            .preview
            .then(|| PreviewStream::new(scheduler.clone(), origin.target.clone(), style.edit_interval, text_limit));
        Self { scheduler, origin, run_id: run_id.to_owned(), text_limit, preview }
    }

    /// Follows the run's events until the run drops its sender, keeping the preview up to
    /// date (throttled edits go out when due even if the model pauses).
    pub async fn follow(&mut self, mut events: mpsc::UnboundedReceiver<AgentEvent>) {
        loop {
            let due = self.preview.as_ref().and_then(PreviewStream::due);
            let event = tokio::select! {
                event = events.recv() => event,
                () = async { if let Some(due) = due { sleep_until(due).await } }, if due.is_some() => {
                    if let Some(preview) = &mut self.preview {
                        preview.tick().await;
                    }
                    continue;
                }
            };
            let Some(event) = event else { break };
            if let (Some(preview), AgentStream::Assistant(AssistantEvent::Delta { text, .. })) =
                (&mut self.preview, &event.stream)
            {
                preview.update(text).await;
            }
        }
    }

    /// Delivers the run's reply: shaped finals, split to the channel's limit, edited into the
    /// preview or sent. An aborted run sends nothing (its preview, if any, stays as it was).
    pub async fn deliver(mut self, outcome: &RunOutcome) {
        if matches!(outcome.status, RunStatus::Aborted(_)) {
            return;
        }
        let finals = shape_finals(&outcome.payloads, &self.origin, &outcome.tool_sends, None);
        let messages: Vec<OutboundMessage> = finals
            .iter()
            .flat_map(|text| split_text(text, self.text_limit))
            .enumerate()
            .map(|(index, text)| {
                let mut message = OutboundMessage::text(self.origin.target.clone(), text);
                message.idempotency_key = Some(format!("{}:{index}", self.run_id));
                message
            })
            .collect();
        if let Some(preview) = self.preview.take()
            && preview.finish(&messages).await != Finished::NoPreview
        {
            return;
        }
        for message in messages {
            if let Err(error) = self.scheduler.send(message).await {
                tracing::error!(channel = %self.origin.channel, chat_id = %self.origin.target.chat.id, %error, "sending a reply failed");
            }
        }
    }
}
