//! One run's reply in one chat: follows the run's events while it streams (the preview),
//! then shapes the finals and delivers them through the account's outbound scheduler.
//!
//! ```text
//! run events ──► ReplyTurn::follow ──► PreviewStream (streaming = "partial")
//! outcome    ──► ReplyTurn::deliver ──► shaping ─► format (render + split) ─► preview finish / sends
//! ```

use ferry_channel::{MarkupDialect, MessageRef, OutboundMessage, TextFormat};
use tokio::sync::mpsc;
use tokio::time::{Duration, sleep_until};

use super::chunker::{BlockChunker, BreakMode, ChunkLimits};
use super::coalesce::{BlockFormat, BlocksOutcome, Coalescer};
use super::finals::{FinalsOutcome, FinalsPlan};
use super::format;
use super::ledger::Recorder;
use super::outbound::OutboundScheduler;
use super::preview::PreviewStream;
use super::shaping::{ShapedReply, hide_reply_tag_while_streaming, shape_reply, strip_heartbeat, take_reply_tag};
use super::silent::shape_final;
use super::tool_summary::ToolSummaries;
use crate::agent::tools::Origin;
use crate::agent::{AgentEvent, AgentStream, AssistantEvent, RunOutcome, RunStatus, ToolEvent};
use crate::config::{HumanDelay, ReplyToMode};
use crate::hooks::{Hooks, MessageSending, MessageSent};

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
    /// The markup the channel renders, and its lines-per-message limit (Discord: 17).
    pub markup: MarkupDialect,
    pub max_lines: Option<usize>,
    /// Block streaming (`agents.defaults.block_streaming`), when on.
    pub blocks: Option<BlockStyle>,
    /// One line per tool call in the reply (`/verbose on`).
    pub verbose: bool,
}

/// How a reply is cut into messages while it streams.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct BlockStyle {
    pub limits: ChunkLimits,
    pub mode: BreakMode,
    /// Blocks closer together than this are merged into one message.
    pub idle: Duration,
    pub delay: HumanDelay,
}

pub struct ReplyTurn {
    scheduler: OutboundScheduler,
    origin: Origin,
    run_id: String,
    /// The platform id of the message this turn answers, for threading.
    answering: Option<String>,
    style: TurnStyle,
    preview: Option<PreviewStream>,
    blocks: Option<(BlockChunker, Coalescer)>,
    /// Everything pushed into the chunker, to see which break it cut at between blocks.
    streamed: String,
    /// Where the last block's text ended in `streamed`.
    last_block_end: usize,
    /// Verbose mode: the run's tool calls, and the summary lines not streamed as blocks.
    tools: Option<ToolSummaries>,
    tool_lines: Vec<String>,
    /// `message_sending` / `message_sent` for the final messages ([`ReplyTurn::with_hooks`]).
    hooks: Hooks,
    /// The delivery ledger's recorder for this reply ([`ReplyTurn::with_recorder`]).
    recorder: Option<Recorder>,
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
            PreviewStream::new(
                scheduler.clone(),
                origin.target.clone(),
                style.edit_interval,
                style.text_limit,
                style.markup,
            )
        });
        let blocks = style.blocks.map(|blocks| {
            let chunker = BlockChunker::new(blocks.limits, blocks.mode);
            let coalescer = Coalescer::new(
                scheduler.clone(),
                origin.target.clone(),
                run_id,
                blocks.idle,
                BlockFormat { text_limit: style.text_limit, markup: style.markup, max_lines: style.max_lines },
                blocks.delay,
            );
            (chunker, coalescer)
        });
        let tools = style.verbose.then(ToolSummaries::default);
        Self {
            scheduler,
            origin,
            run_id: run_id.to_owned(),
            answering,
            style,
            preview,
            blocks,
            streamed: String::new(),
            last_block_end: 0,
            tools,
            tool_lines: Vec::new(),
            hooks: Hooks::default(),
            recorder: None,
        }
    }

    /// Records the reply's delivery in the ledger (SPEC §11): its preview, its finals and
    /// each final delivered, so a restart finishes it instead of answering again.
    pub fn with_recorder(mut self, recorder: Recorder) -> Self {
        self.preview = self
            .preview
            .take()
            .map(|preview| preview.with_recorder(recorder.clone(), &self.origin.channel, &self.origin.account_id));
        self.recorder = Some(recorder);
        self
    }

    /// Stops recording in the ledger: what is delivered next is not the reply (a notice
    /// that the run failed and its messages are kept for later).
    pub fn without_recorder(mut self) -> Self {
        self.recorder = None;
        self
    }

    /// Streams into `preview`, left by an earlier attempt at this reply that a restart cut
    /// short. Returns `false` when this turn streams no preview (the caller deletes it).
    pub fn adopt_preview(&mut self, preview: MessageRef) -> bool {
        match &mut self.preview {
            Some(stream) => {
                stream.adopt(preview);
                true
            }
            None => false,
        }
    }

    /// Final messages go through `hooks`' `message_sending` (rewrite or cancel) and
    /// `message_sent`. Streamed previews and blocks show text before it is final and are
    /// not hooked; a cancelled reply's preview is deleted.
    pub fn with_hooks(mut self, hooks: Hooks) -> Self {
        self.hooks = hooks;
        self
    }

    /// Follows the run's events until the run drops its sender, keeping the preview up to
    /// date or streaming blocks (throttled edits and merged blocks go out when due even if
    /// the model pauses).
    pub async fn follow(&mut self, mut events: mpsc::UnboundedReceiver<AgentEvent>) {
        loop {
            let due = [
                self.preview.as_ref().and_then(PreviewStream::due),
                self.blocks.as_ref().and_then(|(_, coalescer)| coalescer.due()),
            ]
            .into_iter()
            .flatten()
            .min();
            let event = tokio::select! {
                event = events.recv() => event,
                () = async { if let Some(due) = due { sleep_until(due).await } }, if due.is_some() => {
                    if let Some(preview) = &mut self.preview {
                        preview.tick().await;
                    }
                    if let Some((_, coalescer)) = &mut self.blocks {
                        coalescer.tick().await;
                    }
                    continue;
                }
            };
            let Some(event) = event else { break };
            if let AgentStream::Tool(tool) = &event.stream {
                self.tool_finished(tool).await;
                continue;
            }
            let AgentStream::Assistant(assistant) = &event.stream else { continue };
            if let (Some(preview), AssistantEvent::Delta { text, .. }) = (&mut self.preview, assistant) {
                preview.update(&hide_reply_tag_while_streaming(text)).await;
            }
            if let Some((chunker, coalescer)) = &mut self.blocks {
                let ready = match assistant {
                    AssistantEvent::Delta { delta, .. } => {
                        self.streamed.push_str(delta);
                        chunker.push(delta)
                    }
                    AssistantEvent::TextEnd { .. } => chunker.text_end(),
                    AssistantEvent::MessageEnd { .. } => chunker.message_end(),
                    AssistantEvent::Reasoning { .. } => Vec::new(),
                    // The message starts over: what the chunker holds back is dropped. Blocks
                    // already sent stay (a platform message cannot be taken back).
                    AssistantEvent::Restart { .. } => {
                        if let Some(blocks) = self.style.blocks {
                            *chunker = BlockChunker::new(blocks.limits, blocks.mode);
                        }
                        self.streamed.clear();
                        self.last_block_end = 0;
                        Vec::new()
                    }
                };
                for block in ready {
                    let gap = self.streamed.get(self.last_block_end..block.source.start).unwrap_or("\n\n");
                    let joiner = if gap.contains("\n\n") {
                        "\n\n"
                    } else if gap.contains('\n') {
                        "\n"
                    } else {
                        " "
                    };
                    self.last_block_end = block.source.end;
                    // A block is a piece of the final reply: the same rules keep a silent
                    // token or a reply tag out of the chat.
                    let (text, _) = take_reply_tag(&String::from(block));
                    if let Some(text) = shape_final(&text).and_then(|text| strip_heartbeat(&text)) {
                        coalescer.push(text, joiner).await;
                    }
                }
            }
        }
    }

    /// Verbose mode: a finished tool call's summary line. With block streaming it is a block
    /// of its own, after the text streamed before the call; otherwise it waits for the finals.
    async fn tool_finished(&mut self, event: &ToolEvent) {
        let Some(line) = self.tools.as_mut().and_then(|tools| tools.observe(event)) else { return };
        let Some((chunker, coalescer)) = &mut self.blocks else {
            self.tool_lines.push(line);
            return;
        };
        for block in chunker.text_end() {
            self.last_block_end = block.source.end;
            let (text, _) = take_reply_tag(&String::from(block));
            if let Some(text) = shape_final(&text).and_then(|text| strip_heartbeat(&text)) {
                coalescer.push(text, "\n\n").await;
            }
        }
        coalescer.push(line, "\n").await;
    }

    /// Delivers the run's reply: shaped finals, split to the channel's limit, edited into the
    /// preview or sent. An aborted run sends nothing (its preview, if any, stays as it was).
    /// Returns whether the ledger record completing the reply, which also answers the run's
    /// messages, was written.
    pub async fn deliver(mut self, outcome: &RunOutcome) -> bool {
        if matches!(outcome.status, RunStatus::Aborted(_)) {
            return false;
        }
        if let Some((_, coalescer)) = self.blocks.take()
            && coalescer.finish().await == BlocksOutcome::Delivered
        {
            // The blocks were the reply; sending the finals too would say it twice.
            return false;
        }
        let shaped = shape_reply(
            &outcome.payloads,
            &outcome.tool_failures,
            &self.origin,
            &outcome.tool_sends,
            self.style.prefix.as_deref(),
            &self.tool_lines,
        );
        let messages = self.hooked(self.messages(&shaped)).await;
        let preview = self.preview.take().and_then(PreviewStream::into_message);
        let plan = FinalsPlan::new(messages, preview, self.style.text_limit, self.style.markup);
        if plan.is_empty() {
            return false;
        }
        if let Some(recorder) = &self.recorder {
            recorder.record(&plan.event(&self.origin.channel, &self.origin.account_id), false).await;
        }
        // Kept for `message_sent` only when a plugin listens.
        let texts: Vec<String> = if self.hooks.has_plugins() {
            plan.messages.iter().map(|message| message.text.clone()).collect()
        } else {
            Vec::new()
        };
        let FinalsOutcome { sent, answered } = plan.deliver(&self.scheduler, self.recorder.as_ref()).await;
        for (index, message_id) in sent {
            if let Some(text) = texts.get(index) {
                self.announce_sent(text, message_id);
            }
        }
        answered
    }

    /// `message_sent` for a final message now in the chat (sent, or a preview edited into it).
    fn announce_sent(&self, text: &str, message_id: String) {
        if !self.hooks.has_plugins() {
            return;
        }
        self.hooks.message_sent(MessageSent {
            channel: self.origin.channel.clone(),
            account_id: self.origin.account_id.clone(),
            chat_id: self.origin.target.chat.id.clone(),
            message_id,
            text: text.to_owned(),
        });
    }

    /// The final messages as the `message_sending` hooks leave them: rewritten, or left out.
    async fn hooked(&self, messages: Vec<OutboundMessage>) -> Vec<OutboundMessage> {
        if !self.hooks.has_plugins() {
            return messages;
        }
        let mut kept = Vec::with_capacity(messages.len());
        for mut message in messages {
            let event = MessageSending {
                channel: self.origin.channel.clone(),
                account_id: self.origin.account_id.clone(),
                chat_id: self.origin.target.chat.id.clone(),
                text: message.text.clone(),
            };
            if let Some(text) = self.hooks.message_sending(event).await {
                message.text = text;
                kept.push(message);
            }
        }
        kept
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
        let markup = self.style.markup;
        let text_format = if markup == MarkupDialect::Plain { TextFormat::Plain } else { TextFormat::Markup };
        shaped
            .texts
            .iter()
            .flat_map(|text| {
                format::split(&format::render(text, markup), markup, self.style.text_limit, self.style.max_lines)
            })
            .enumerate()
            .map(|(index, text)| {
                let mut message = OutboundMessage::text(self.origin.target.clone(), text);
                message.format = text_format;
                message.idempotency_key = Some(format!("{}:{index}", self.run_id));
                if thread(index) {
                    message.reply_to_message_id.clone_from(&self.answering);
                }
                message
            })
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use chrono::Utc;
    use ferry_channel::memory::{MemoryChannel, Operation, OperationKind};
    use ferry_channel::{ChannelCapabilities, ChannelError, ChatKind, ChatRef, Target};

    use super::*;
    use crate::agent::{Payload, Usage};

    fn telegram_like() -> Arc<MemoryChannel> {
        let capabilities = ChannelCapabilities {
            markup: MarkupDialect::TelegramHtml,
            text_limit: 4096,
            ..ChannelCapabilities::unrestricted()
        };
        Arc::new(MemoryChannel::with_capabilities("memory", "default", capabilities))
    }

    fn turn(channel: &Arc<MemoryChannel>) -> ReplyTurn {
        let origin = Origin {
            channel: "memory".into(),
            account_id: "default".into(),
            target: Target { chat: ChatRef::new(ChatKind::Direct, "42"), thread_id: None },
        };
        let style = TurnStyle {
            preview: false,
            text_limit: 4000,
            edit_interval: Duration::from_secs(1),
            reply_to: ReplyToMode::Off,
            supports_reply_to: true,
            prefix: None,
            markup: MarkupDialect::TelegramHtml,
            max_lines: None,
            blocks: None,
            verbose: false,
        };
        ReplyTurn::new(OutboundScheduler::new(channel.clone()), origin, "run-1", None, style)
    }

    fn outcome(text: &str) -> RunOutcome {
        RunOutcome {
            run_id: "run-1".into(),
            status: RunStatus::Completed,
            payloads: vec![Payload { text: text.into(), is_error: false }],
            usage: Usage::default(),
            transcript: Vec::new(),
            tool_sends: Vec::new(),
            tool_failures: Vec::new(),
            unconsumed_steer: Vec::new(),
            started_at: Utc::now(),
            ended_at: Utc::now(),
        }
    }

    fn sent(channel: &MemoryChannel) -> Vec<(String, TextFormat)> {
        channel
            .operations()
            .into_iter()
            .filter_map(|op| match op {
                Operation::Sent { message, .. } => Some((message.text, message.format)),
                _ => None,
            })
            .collect()
    }

    #[tokio::test]
    async fn the_reply_is_rendered_in_the_channels_markup() {
        let channel = telegram_like();
        turn(&channel).deliver(&outcome("**Done** & dusted <3")).await;
        assert_eq!(sent(&channel), [("<b>Done</b> &amp; dusted &lt;3".to_owned(), TextFormat::Markup)]);
    }

    #[tokio::test]
    async fn markup_the_platform_rejects_is_resent_as_plain_text() {
        let channel = telegram_like();
        channel.fail_next(OperationKind::Send, ChannelError::MarkupRejected { reason: "can't parse entities".into() });
        turn(&channel).deliver(&outcome("**Done** & dusted <3")).await;
        assert_eq!(sent(&channel), [("Done & dusted <3".to_owned(), TextFormat::Plain)]);
    }

    fn event(stream: AgentStream) -> AgentEvent {
        AgentEvent { run_id: "run-1".into(), seq: 0, session_key: "s".into(), ts: Utc::now(), stream }
    }

    fn delta(text: &str) -> AgentEvent {
        event(AgentStream::Assistant(AssistantEvent::Delta { delta: text.into(), text: String::new() }))
    }

    #[tokio::test(start_paused = true)]
    async fn with_block_streaming_a_verbose_tool_line_goes_out_between_the_text_around_it() {
        let channel = telegram_like();
        let mut turn = turn(&channel);
        turn.style.verbose = true;
        turn.tools = Some(ToolSummaries::default());
        let limits = ChunkLimits { min_chars: 1, ..ChunkLimits::default() };
        let style = BlockStyle { limits, mode: BreakMode::TextEnd, idle: Duration::ZERO, delay: HumanDelay::Off };
        turn.blocks = Some((
            BlockChunker::new(style.limits, style.mode),
            Coalescer::new(
                turn.scheduler.clone(),
                turn.origin.target.clone(),
                "run-1",
                style.idle,
                BlockFormat { text_limit: 4000, markup: MarkupDialect::TelegramHtml, max_lines: None },
                style.delay,
            ),
        ));
        let (events, followed) = mpsc::unbounded_channel();
        let args = serde_json::json!({ "zone": "UTC" });
        for stream in [
            delta("Let me check."),
            event(AgentStream::Tool(ToolEvent::Start { name: "current_time".into(), tool_call_id: "a".into(), args })),
            event(AgentStream::Tool(ToolEvent::Result {
                name: "current_time".into(),
                tool_call_id: "a".into(),
                is_error: false,
                result: "12:00".into(),
            })),
            delta("It is noon."),
            event(AgentStream::Assistant(AssistantEvent::TextEnd { text: String::new() })),
        ] {
            events.send(stream).unwrap();
        }
        drop(events);
        turn.follow(followed).await;
        turn.deliver(&outcome("Let me check.It is noon.")).await;
        assert_eq!(
            sent(&channel).into_iter().map(|(text, _)| text).collect::<Vec<_>>(),
            ["Let me check.", "🔧 current_time — zone: UTC", "It is noon."],
            "each block once, in the order it happened, and no final after them"
        );
    }
}
