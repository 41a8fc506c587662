//! What the inbound benchmarks share: a channel that only counts, and readings of this
//! process's CPU time, memory and writes.

// Each bench uses a different part of it.
#![allow(dead_code)]

use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use async_trait::async_trait;
use futures::StreamExt;

use std::sync::Arc;

use ferry::agent::providers::{
    ModelEvent, ModelProvider, ModelRequest, ModelStream, ProviderError, ResolvedModel, RetryPolicy, StopReason,
};
use ferry::agent::tools::{RecentSessions, ToolRegistry};
use ferry::agent::{AgentRunner, EventBus, RunSettings, RunnerParts};
use ferry::channel::{
    Ack, AckReceiver, Channel, ChannelCapabilities, ChannelError, ChatKind, ChatRef, InboundDelivery, InboundMessage,
    InboundStream, OutboundMessage, Sender, SentMessage,
};
use ferry::channels::ChannelRegistry;
use ferry::types::conversation::Usage;

/// A channel that delivers injected messages and counts what is sent, keeping nothing:
/// the memory figure then shows Ferry's own per-session cost, not a test channel's log.
pub struct CountingChannel {
    inbound: std::sync::Mutex<Option<tokio::sync::mpsc::UnboundedReceiver<InboundDelivery>>>,
    sender: tokio::sync::mpsc::UnboundedSender<InboundDelivery>,
    pub sent: AtomicUsize,
    next_id: AtomicUsize,
    capabilities: ChannelCapabilities,
}

impl CountingChannel {
    pub fn new() -> Self {
        let (sender, receiver) = tokio::sync::mpsc::unbounded_channel();
        Self {
            inbound: std::sync::Mutex::new(Some(receiver)),
            sender,
            sent: AtomicUsize::new(0),
            next_id: AtomicUsize::new(0),
            capabilities: ChannelCapabilities { supports_typing: false, ..ChannelCapabilities::unrestricted() },
        }
    }

    pub fn inject(&self, peer: &str, text: &str) -> AckReceiver {
        let (ack, receiver) = Ack::pair();
        let id = self.next_id.fetch_add(1, Ordering::Relaxed).to_string();
        let message = InboundMessage::new(
            "telegram",
            "default",
            ChatRef::new(ChatKind::Direct, peer),
            Sender::user(peer),
            id,
            text,
        );
        let _ = self.sender.send(InboundDelivery { message, ack });
        receiver
    }
}

#[async_trait]
impl Channel for CountingChannel {
    fn name(&self) -> &str {
        "telegram"
    }

    fn account_id(&self) -> &str {
        "default"
    }

    fn capabilities(&self) -> &ChannelCapabilities {
        &self.capabilities
    }

    async fn start(&self) -> Result<InboundStream, ChannelError> {
        let receiver = self.inbound.lock().ok().and_then(|mut slot| slot.take()).ok_or(ChannelError::Closed)?;
        Ok(futures::stream::unfold(
            receiver,
            |mut receiver| async move { receiver.recv().await.map(|d| (d, receiver)) },
        )
        .boxed())
    }

    async fn send(&self, _message: OutboundMessage) -> Result<SentMessage, ChannelError> {
        let id = self.sent.fetch_add(1, Ordering::Relaxed);
        Ok(SentMessage { message_id: id.to_string() })
    }
}

pub fn rss_kib() -> u64 {
    std::fs::read_to_string("/proc/self/statm")
        .ok()
        .and_then(|statm| statm.split_whitespace().nth(1)?.parse::<u64>().ok())
        .map_or(0, |pages| pages * 4)
}

/// CPU time (user + system) this process has used so far.
pub fn cpu_time() -> Duration {
    let ticks = std::fs::read_to_string("/proc/self/stat")
        .ok()
        .and_then(|stat| {
            let fields: Vec<u64> =
                stat.rsplit_once(')')?.1.split_whitespace().skip(11).take(2).filter_map(|f| f.parse().ok()).collect();
            Some(fields.iter().sum::<u64>())
        })
        .unwrap_or(0);
    // USER_HZ is 100 on every Linux this runs on.
    Duration::from_millis(ticks * 10)
}

/// Bytes this process has written through `write`/`pwrite` so far.
pub fn written_bytes() -> u64 {
    std::fs::read_to_string("/proc/self/io")
        .ok()
        .and_then(|io| io.lines().find_map(|line| line.strip_prefix("wchar:")?.trim().parse().ok()))
        .unwrap_or(0)
}

pub fn percentile(sorted: &[Duration], p: f64) -> Duration {
    if sorted.is_empty() {
        return Duration::ZERO;
    }
    sorted[((sorted.len() as f64 - 1.0) * p).round() as usize]
}

/// A model that answers "ok" at once.
pub struct InstantProvider;

#[async_trait]
impl ModelProvider for InstantProvider {
    fn name(&self) -> &str {
        "instant"
    }

    async fn stream(&self, _request: &ModelRequest) -> Result<ModelStream, ProviderError> {
        Ok(futures::stream::iter([
            Ok(ModelEvent::TextDelta("ok".to_owned())),
            Ok(ModelEvent::Usage(Usage { input_tokens: 1, output_tokens: 1 })),
            Ok(ModelEvent::Stop(StopReason::EndTurn)),
        ])
        .boxed())
    }
}

/// An agent runner on the instant model.
pub fn runner(bus: &EventBus, workspace: &std::path::Path, channels: &ChannelRegistry) -> AgentRunner {
    AgentRunner::new(RunnerParts {
        model: ResolvedModel {
            provider: Arc::new(InstantProvider),
            model: "instant".into(),
            context_window: None,
            vision: false,
            is_fallback_echo: false,
        }
        .into(),
        tools: ToolRegistry::with_builtins(),
        bus: bus.clone(),
        settings: RunSettings {
            timeout: Duration::from_secs(60),
            idle_timeout: Duration::from_secs(60),
            max_tool_rounds: 5,
            max_reply_chars: 200_000,
            retry: RetryPolicy::default(),
            retry_after_output: RetryPolicy::after_output(Duration::from_secs(10)),
            compaction_reserve_tokens: 20_000,
            thinking: Default::default(),
        },
        workspace: workspace.to_owned(),
        channels: channels.clone(),
        sessions: Arc::new(RecentSessions::default()),
        hooks: Default::default(),
        media: None,
        memory: None,
    })
}
