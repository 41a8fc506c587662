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

/// Makes `turn` stream its text in blocks (any length, no idle wait); returns their style.
fn stream_blocks(turn: &mut ReplyTurn) -> BlockStyle {
    let limits = ChunkLimits { min_chars: 1, ..ChunkLimits::default() };
    let style = BlockStyle { limits, mode: BreakMode::TextEnd, idle: Duration::ZERO, delay: HumanDelay::Off };
    let format = BlockFormat { text_limit: 4000, markup: MarkupDialect::TelegramHtml, max_lines: None };
    let coalescer =
        Coalescer::new(turn.scheduler.clone(), turn.origin.target.clone(), "run-1", style.idle, format, style.delay);
    turn.blocks = Some((BlockChunker::new(style.limits, style.mode), coalescer));
    style
}

fn turn(channel: &Arc<MemoryChannel>) -> ReplyTurn {
    turn_answering(channel, None, |_| {})
}

/// A turn answering message `answering`, its style changed by `adjust`.
fn turn_answering(
    channel: &Arc<MemoryChannel>,
    answering: Option<&str>,
    adjust: impl FnOnce(&mut TurnStyle),
) -> ReplyTurn {
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
        files: FileLimits::default(),
        max_lines: None,
        blocks: None,
        verbose: false,
        reasoning: ReasoningDisplay::Off,
    };
    let mut style = style;
    adjust(&mut style);
    ReplyTurn::new(OutboundScheduler::new(channel.clone()), origin, "run-1", answering.map(str::to_owned), style)
}

/// Each message sent: its text and the message it is threaded to.
fn sent_threaded(channel: &MemoryChannel) -> Vec<(String, Option<String>)> {
    channel
        .operations()
        .into_iter()
        .filter_map(|op| match op {
            Operation::Sent { message, .. } => Some((message.text, message.reply_to_message_id)),
            _ => None,
        })
        .collect()
}

/// Follows a run that streams `texts` (each the whole text so far, so each extends the
/// one before), then delivers `final_text`.
async fn stream_then_deliver(mut turn: ReplyTurn, texts: &[&str], final_text: &str) {
    let (events, followed) = mpsc::unbounded_channel();
    let mut so_far = "";
    for text in texts {
        let delta = text.strip_prefix(so_far).expect("each text extends the one before").to_owned();
        so_far = text;
        events.send(event(AgentStream::Assistant(AssistantEvent::Delta { delta }))).unwrap();
    }
    drop(events);
    turn.follow(followed).await;
    turn.deliver(&outcome(final_text)).await;
}

#[tokio::test]
async fn a_reply_directive_threads_the_reply_where_the_channel_can() {
    let channel = telegram_like();
    turn_answering(&channel, Some("5"), |_| {}).deliver(&outcome("[[ reply_to : 77 ]] That one.")).await;
    turn_answering(&channel, Some("5"), |_| {}).deliver(&outcome("[[Reply_To_Current]] This one.")).await;
    turn_answering(&channel, Some("5"), |_| {}).deliver(&outcome("No tag, [[tts]] no thread.")).await;
    turn_answering(&channel, Some("5"), |style| style.supports_reply_to = false)
        .deliver(&outcome("[[reply_to: 77]] Cannot thread here."))
        .await;
    assert_eq!(
        sent_threaded(&channel),
        [
            ("That one.".to_owned(), Some("77".to_owned())),
            ("This one.".to_owned(), Some("5".to_owned())),
            ("No tag, no thread.".to_owned(), None),
            ("Cannot thread here.".to_owned(), None),
        ]
    );
}

#[tokio::test]
async fn a_message_named_by_the_model_replaces_the_one_answered_for_every_threaded_part() {
    let channel = telegram_like();
    let all = |style: &mut TurnStyle| {
        style.reply_to = ReplyToMode::All;
        style.text_limit = 12;
    };
    turn_answering(&channel, Some("5"), all).deliver(&outcome("[[reply_to: 9]] First part. Second part.")).await;
    turn_answering(&channel, Some("5"), all).deliver(&outcome("Third part. Fourth part.")).await;
    let threads: Vec<Option<String>> = sent_threaded(&channel).into_iter().map(|(_, thread)| thread).collect();
    assert_eq!(threads, [Some("9"), Some("9"), Some("5"), Some("5")].map(|id| id.map(str::to_owned)));
}

#[tokio::test(start_paused = true)]
async fn streamed_blocks_are_threaded_as_the_finals_would_be() {
    let channel = telegram_like();
    let mut turn = turn_answering(&channel, Some("5"), |_| {});
    let style = stream_blocks(&mut turn);
    turn.style.blocks = Some(style);
    let (events, followed) = mpsc::unbounded_channel();
    let first = "[[ reply_to : 9 ]] First block.";
    let second = format!("{first} Second block.");
    for stream in [
        AssistantEvent::Delta { delta: first.into() },
        AssistantEvent::TextEnd { text: first.into() },
        AssistantEvent::Delta { delta: " Second block.".into() },
        AssistantEvent::TextEnd { text: second.clone() },
    ] {
        events.send(event(AgentStream::Assistant(stream))).unwrap();
    }
    drop(events);
    turn.follow(followed).await;
    turn.deliver(&outcome(&second)).await;
    assert_eq!(
        sent_threaded(&channel),
        [("First block.".to_owned(), Some("9".to_owned())), ("Second block.".to_owned(), None)],
        "the first message threaded where the directive says, as a final would be; no final after the blocks"
    );
}

#[tokio::test(start_paused = true)]
async fn a_streamed_reply_with_a_directive_is_previewed_in_its_thread_and_finished_in_place() {
    let channel = telegram_like();
    let turn = turn_answering(&channel, Some("5"), |style| style.preview = true);
    let texts = [
        "[[ reply",
        "[[ reply_to : 77 ]] The answer, streaming in slowly",
        "[[ reply_to : 77 ]] The answer, streaming in slowly, word by word",
    ];
    stream_then_deliver(turn, &texts, "[[ reply_to : 77 ]] The answer, streamed in full.").await;
    assert_eq!(
        sent_threaded(&channel),
        [("The answer, streaming in slowly".to_owned(), Some("77".to_owned()))],
        "the preview went out threaded, without the tag, and nothing else was sent"
    );
    assert_eq!(channel.visible_messages()[0].text, "The answer, streamed in full.");
}

#[tokio::test(start_paused = true)]
async fn a_directive_after_the_preview_started_sends_the_final_fresh_in_its_thread() {
    let channel = telegram_like();
    let turn = turn_answering(&channel, Some("5"), |style| style.preview = true);
    let texts = ["Looking into it, one moment please", "Looking into it, one moment please. [[reply_to_current]]"];
    stream_then_deliver(turn, &texts, "Looking into it: found it. [[reply_to_current]]").await;
    assert_eq!(
        sent_threaded(&channel),
        [
            ("Looking into it, one moment please".to_owned(), None),
            ("Looking into it: found it.".to_owned(), Some("5".to_owned()))
        ]
    );
    let visible: Vec<String> = channel.visible_messages().into_iter().map(|message| message.text).collect();
    assert_eq!(visible, ["Looking into it: found it."], "the unthreaded preview was deleted");
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
        model: None,
        notices: Vec::new(),
        attachments: Vec::new(),
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
    event(AgentStream::Assistant(AssistantEvent::Delta { delta: text.into() }))
}

#[tokio::test(start_paused = true)]
async fn with_block_streaming_a_verbose_tool_line_goes_out_between_the_text_around_it() {
    let channel = telegram_like();
    let mut turn = turn(&channel);
    turn.style.verbose = true;
    turn.tools = Some(ToolSummaries::default());
    stream_blocks(&mut turn);
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

#[tokio::test(start_paused = true)]
async fn a_failed_runs_notice_follows_its_streamed_blocks() {
    let channel = telegram_like();
    let mut turn = turn(&channel);
    stream_blocks(&mut turn);
    let (events, followed) = mpsc::unbounded_channel();
    events.send(delta("A first part.")).unwrap();
    events.send(event(AgentStream::Assistant(AssistantEvent::TextEnd { text: "A first part.".into() }))).unwrap();
    drop(events);
    turn.follow(followed).await;
    let mut failed = outcome("A first part.");
    failed.payloads.push(Payload { text: "⚠️ The model is busy. I kept your message.".into(), is_error: true });
    turn.deliver(&failed).await;
    let texts: Vec<String> = sent(&channel).into_iter().map(|(text, _)| text).collect();
    assert_eq!(texts, ["A first part.", "⚠️ The model is busy. I kept your message."], "the user is told");
}
