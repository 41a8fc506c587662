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
use super::shaping::{ShapedReply, hide_reply_tag_while_streaming, shape_reply};
use super::split::split_text;
use crate::agent::tools::Origin;
use crate::agent::{AgentEvent, AgentStream, AssistantEvent, RunOutcome, RunStatus};
use crate::config::ReplyToMode;

/// How a turn's reply is to be shown.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TurnStyle {
    /// Stream a preview message that is edited in place.
    pub preview: bool,
    /// Characters per message (the channel's limit, or the operator's lower chunk limit).
    pub text_limit: usize,
    /// The channel's shortest interval between two edits of one message.
    pub edit_interval: Duration,
    /// Which messages are threaded to the one they answer (`messages.reply_to_mode`).
    pub reply_to: ReplyToMode,
    /// The channel can thread a reply to a message (Slack cannot: `[[reply_to_current]]`
    /// is ignored there).
    pub supports_reply_to: bool,
    /// `messages.response_prefix`.
    pub prefix: Option<String>,
}

pub struct ReplyTurn {
    scheduler: OutboundScheduler,
    origin: Origin,
    run_id: String,
    /// The platform id of the message this turn answers, for threading.
    answering: Option<String>,
    style: TurnStyle,
    preview: Option<PreviewStream>,
}

impl ReplyTurn {
    pub fn new(
        scheduler: OutboundScheduler,
        origin: Origin,
        run_id: &str,
        answering: Option<String>,
        mut style: TurnStyle,
    ) -> Self {
        style.text_limit = style.text_limit.max(1);
        let preview = style.preview.then(|| {
            PreviewStream::new(scheduler.clone(), origin.target.clone(), style.edit_interval, style.text_limit)
        });
        Self { scheduler, origin, run_id: run_id.to_owned(), answering, style, preview }
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
                preview.update(&hide_reply_tag_while_streaming(text)).await;
            }
        }
    }

    /// Delivers the run's reply: shaped finals, split to the channel's limit, edited into the
    /// preview or sent. An aborted run sends nothing (its preview, if any, stays as it was).
    pub async fn deliver(mut self, outcome: &RunOutcome) {
        if matches!(outcome.status, RunStatus::Aborted(_)) {
            return;
        }
        let shaped = shape_reply(
            &outcome.payloads,
            &outcome.tool_failures,
            &self.origin,
            &outcome.tool_sends,
            self.style.prefix.as_deref(),
        );
        let messages = self.messages(&shaped);
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

    /// The platform messages of a shaped reply, each with its idempotency key (run id +
    /// index) and, per `reply_to_mode` or the model's tag, threaded to the message answered.
    fn messages(&self, shaped: &ShapedReply) -> Vec<OutboundMessage> {
        let thread = |index: usize| match self.style.reply_to {
            _ if !self.style.supports_reply_to => false,
            ReplyToMode::All => true,
            ReplyToMode::First => index == 0,
            ReplyToMode::Off => shaped.thread_to_current && index == 0,
        };
        shaped
            .texts
            .iter()
            .flat_map(|text| split_text(text, self.style.text_limit))
            .enumerate()
            .map(|(index, text)| {
                let mut message = OutboundMessage::text(self.origin.target.clone(), text);
                message.idempotency_key = Some(format!("{}:{index}", self.run_id));
                if thread(index) {
                    message.reply_to_message_id.clone_from(&self.answering);
                }
                message
            })
            .collect()
    }
}
