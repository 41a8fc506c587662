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

use super::attachments::{self, FileLimits};
use super::chunker::{BlockChunker, BreakMode, ChunkLimits};
use super::coalesce::{BlockFormat, BlocksOutcome, Coalescer};
use super::directive::{self, ReplyTarget};
use super::finals::{FinalsOutcome, FinalsPlan};
use super::format;
use super::ledger::{LedgerEvent, Recorder, RunSends};
use super::media_lines;
use super::outbound::OutboundScheduler;
use super::preview::PreviewStream;
use super::reasoning::reasoning_message;
use super::shaping::{ShapedReply, shape_reply, strip_heartbeat};
use super::silent::shape_final;
use super::tool_summary::ToolSummaries;
use crate::agent::tools::Origin;
use crate::agent::{AgentEvent, AgentStream, AssistantEvent, RunOutcome, RunStatus, ToolEvent};
use crate::config::{HumanDelay, ReplyToMode};
use crate::hooks::{Hooks, MessageSending, MessageSent};
use crate::models::ReasoningDisplay;

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
    /// The channel can thread a reply to a message. Where it cannot (Slack with
    /// `reply_to_mode` off), reply directives are removed and change nothing.
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
    /// How the model's reasoning is shown (`/reasoning`).
    pub reasoning: ReasoningDisplay,
    /// What the channel takes with a file (caption length, upload size).
    pub files: FileLimits,
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
    /// The current message's reasoning, when it is shown.
    reasoning: String,
    /// The answer has begun streaming into the preview (it replaces streamed reasoning).
    answer_streaming: bool,
    /// The current assistant message's text so far (events carry only the new text).
    answer: String,
    /// The next delta begins a new assistant message (the last one ended).
    answer_ended: bool,
    /// The answer outgrew the preview, which stops growing: later deltas of the same
    /// message skip it instead of rendering a longer and longer text for nothing.
    preview_full: bool,
    /// The answer holds a `[[`, so a `]]` may complete a directive that threads blocks.
    answer_has_directive_start: bool,
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
            reasoning: String::new(),
            answer_streaming: false,
            answer: String::new(),
            answer_ended: false,
            preview_full: false,
            answer_has_directive_start: false,
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

    /// Sends the streamed blocks under the delivery ledger ([`RunSends`]): each recorded
    /// once sent, and those a killed attempt at this reply sent are not sent again.
    pub fn with_sends(mut self, sends: RunSends) -> Self {
        if let Some((_, coalescer)) = &mut self.blocks {
            coalescer.record_with(sends);
        }
        self
    }

    /// Stops recording in the ledger: what is delivered next is not the reply (a notice
    /// that the run failed and its messages are kept for later).
    pub fn without_recorder(mut self) -> Self {
        self.recorder = None;
        self
    }

    /// The preview this turn streams into, once sent (or adopted).
    pub fn preview_message(&self) -> Option<MessageRef> {
        self.preview.as_ref().and_then(PreviewStream::message).cloned()
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
            self.follow_reasoning(assistant).await;
            let threads_may_change = self.follow_answer(assistant);
            if let AssistantEvent::Delta { .. } = assistant
                && self.preview.is_some()
                && !self.preview_full
                && !self.preview_keeps_reasoning()
            {
                self.answer_streaming = true;
                let stripped = directive::strip_streaming(&self.answer);
                let thread = self.thread_for(0, stripped.directives.reply_to.as_ref());
                if let Some(preview) = &mut self.preview {
                    preview.thread_to(thread);
                    self.preview_full = !preview.update(&media_lines::strip_streaming(&stripped.text)).await;
                }
            }
            if let Some((chunker, _)) = &mut self.blocks {
                let ready = match assistant {
                    AssistantEvent::Delta { delta } => {
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
                // Blocks are the reply's messages: threaded as its finals would be, as soon as
                // the text so far says how. Only a new block or a directive that may have just
                // closed can change that, so the text is not read again at every delta.
                if threads_may_change || !ready.is_empty() {
                    let target = directive::strip(&self.answer).directives.reply_to;
                    let (first, rest) = (self.thread_for(0, target.as_ref()), self.thread_for(1, target.as_ref()));
                    if let Some((_, coalescer)) = &mut self.blocks {
                        coalescer.thread_to(first, rest);
                    }
                }
                let Some((_, coalescer)) = &mut self.blocks else { continue };
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
                    // token or a reply directive out of the chat.
                    let block = String::from(block);
                    if let Some(text) = shape_block(&block) {
                        coalescer.push(text, joiner).await;
                    }
                }
            }
        }
    }

    /// Keeps the current assistant message's text from its deltas. Returns whether a reply
    /// directive may have just closed: a `]` arrived in a message that holds a `[[`.
    fn follow_answer(&mut self, event: &AssistantEvent) -> bool {
        match event {
            AssistantEvent::Delta { delta } => {
                if std::mem::take(&mut self.answer_ended) {
                    self.restart_answer();
                }
                // A `[[` may be split across two deltas.
                let from = self.answer.len().saturating_sub(1);
                self.answer.push_str(delta);
                self.answer_has_directive_start |= self.answer.as_bytes()[from..].windows(2).any(|pair| pair == b"[[");
                self.answer_has_directive_start && delta.contains(']')
            }
            AssistantEvent::MessageEnd { .. } => {
                self.answer_ended = true;
                false
            }
            AssistantEvent::Restart { .. } => {
                self.restart_answer();
                false
            }
            AssistantEvent::TextEnd { .. } | AssistantEvent::Reasoning { .. } => false,
        }
    }

    fn restart_answer(&mut self) {
        self.answer.clear();
        self.answer_ended = false;
        self.preview_full = false;
        self.answer_has_directive_start = false;
    }

    /// Keeps the reasoning that is to be shown, and streams it into the preview until the
    /// answer begins. With `/reasoning stream` the answer then replaces it there.
    async fn follow_reasoning(&mut self, event: &AssistantEvent) {
        if self.style.reasoning.is_off() {
            return;
        }
        match event {
            AssistantEvent::Reasoning { delta } => {
                self.reasoning.push_str(delta);
                if !self.answer_streaming
                    && let Some(preview) = &mut self.preview
                {
                    preview.update(&reasoning_message(&self.reasoning)).await;
                }
            }
            AssistantEvent::Restart { .. } => {
                self.reasoning.clear();
                self.answer_streaming = false;
            }
            _ => {}
        }
    }

    /// With `/reasoning on`, reasoning streamed into the preview stays there: the preview
    /// becomes the reasoning's own message, and the answer is sent below it when complete
    /// (streaming the answer into the preview would show it where the reasoning then goes).
    fn preview_keeps_reasoning(&self) -> bool {
        self.style.reasoning == ReasoningDisplay::On && !self.answer_streaming && !self.reasoning.trim().is_empty()
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
            let block = String::from(block);
            if let Some(text) = shape_block(&block) {
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
            // The blocks were the reply; sending the finals too would say it twice. Its files
            // and a failed run's notice (its messages kept for later, or the error) still go,
            // as finals: a restart sends only those not delivered yet.
            let notices = outcome
                .payloads
                .iter()
                .filter(|payload| payload.is_error)
                .enumerate()
                .map(|(index, payload)| {
                    let mut notice = OutboundMessage::text(self.origin.target.clone(), payload.text.clone());
                    notice.idempotency_key = Some(format!("{}:notice:{index}", self.run_id));
                    notice
                })
                .collect();
            let files = self.with_files(notices, outcome);
            let Some(recorder) = &self.recorder else {
                if !files.is_empty() {
                    let plan = FinalsPlan::new(files, None, self.style.text_limit, self.style.markup);
                    plan.deliver(&self.scheduler, None).await;
                }
                return false;
            };
            if files.is_empty() {
                return recorder.record(&LedgerEvent::Completed, true).await;
            }
            let plan = FinalsPlan::new(files, None, self.style.text_limit, self.style.markup);
            recorder.record(&plan.event(&self.origin.channel, &self.origin.account_id, recorder.joined()), false).await;
            return plan.deliver(&self.scheduler, Some(recorder)).await.answered;
        }
        let mut shaped = shape_reply(
            &outcome.payloads,
            &outcome.tool_failures,
            &self.origin,
            &outcome.tool_sends,
            self.style.prefix.as_deref(),
            &self.tool_lines,
        );
        // Reasoning goes before an answer, never instead of one: a silent reply stays silent.
        // With `on`, a preview showing the reasoning becomes its message. With `stream`, the
        // answer replaced the reasoning in the preview; where no preview streams, `stream`
        // shows it as `on` does.
        let shown_before = match self.style.reasoning {
            ReasoningDisplay::Off => false,
            ReasoningDisplay::On => true,
            ReasoningDisplay::Stream => self.preview.is_none(),
        };
        if !shaped.texts.is_empty() {
            if shown_before && !self.reasoning.trim().is_empty() {
                shaped.texts.insert(0, reasoning_message(&self.reasoning));
            }
            shaped.texts.extend(outcome.notices.iter().cloned());
        }
        let messages = self.hooked(self.messages(&shaped)).await;
        let messages = self.with_files(messages, outcome);
        let plan = match self.preview.take() {
            Some(preview) => preview.into_plan(messages),
            None => FinalsPlan::new(messages, None, self.style.text_limit, self.style.markup),
        };
        if plan.is_empty() {
            return false;
        }
        if let Some(recorder) = &self.recorder {
            let event = plan.event(&self.origin.channel, &self.origin.account_id, recorder.joined());
            recorder.record(&event, false).await;
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

    /// The message the reply's message `index` is threaded to, if any: with `reply_to_mode`
    /// `all` every message, with `first` the first, with `off` the first only when the model
    /// asked with a reply directive. The directive's message, if it names one, replaces the
    /// message answered. Nothing where the channel cannot thread replies.
    fn thread_for(&self, index: usize, directive: Option<&ReplyTarget>) -> Option<String> {
        let threaded = match self.style.reply_to {
            _ if !self.style.supports_reply_to => false,
            ReplyToMode::All => true,
            ReplyToMode::First => index == 0,
            ReplyToMode::Off => directive.is_some() && index == 0,
        };
        match directive {
            _ if !threaded => None,
            Some(ReplyTarget::Message(id)) => Some(id.clone()),
            Some(ReplyTarget::Current) | None => self.answering.clone(),
        }
    }

    /// The platform messages of a shaped reply, each with its idempotency key (run id +
    /// index) and threaded as [`ReplyTurn::thread_for`] says.
    /// `messages` with the reply's files joined to them ([`attachments::attach`]).
    fn with_files(&self, messages: Vec<OutboundMessage>, outcome: &RunOutcome) -> Vec<OutboundMessage> {
        if outcome.attachments.is_empty() {
            return messages;
        }
        attachments::attach(messages, &outcome.attachments, self.style.files, &self.origin.target, &self.run_id)
    }

    fn messages(&self, shaped: &ShapedReply) -> Vec<OutboundMessage> {
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
                message.reply_to_message_id = self.thread_for(index, shaped.reply_to.as_ref());
                message
            })
            .collect()
    }
}

/// A streamed block as it may be shown: the same rules as a final keep a silent token, a
/// reply directive or a `MEDIA:` line out of the chat.
fn shape_block(block: &str) -> Option<String> {
    shape_final(&media_lines::split(&directive::strip(block).text).text).and_then(|text| strip_heartbeat(&text))
}

#[cfg(test)]
mod tests;
