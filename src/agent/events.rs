//! The events a run emits while it works (SPEC §6.3), and how they reach listeners.
//!
//! Each run has a [`RunEvents`] emitter. It numbers events (`seq` strictly increases per
//! run), forwards each one losslessly to the run's own consumer (the caller that replies to
//! the user) and, best effort, to the process-wide [`EventBus`] (observers such as
//! WebSocket clients, which may lag and lose events rather than slow a run down). It also
//! guarantees exactly one terminal lifecycle event: if the run ends without emitting one —
//! it panicked, or its future was dropped — the emitter's `Drop` emits it.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};

use chrono::{DateTime, Utc};
use serde::Serialize;
use tokio::sync::{broadcast, mpsc};

use crate::media::FileInfo;
use crate::models::{ModelUsed, ReasoningDisplay};
use crate::types::conversation::ImagePart;

/// How many events the bus buffers for a slow observer before it starts losing the oldest.
pub const BUS_CAPACITY: usize = 4096;

/// Text blocks in tool events are cut to this many characters (SPEC §6.3), so a tool that
/// returns a megabyte does not flood every listener and log.
pub const TOOL_TEXT_EVENT_LIMIT: usize = 8_000;

/// One event of one run.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct AgentEvent {
    pub run_id: String,
    pub seq: u64,
    pub session_key: String,
    pub ts: DateTime<Utc>,
    #[serde(flatten)]
    pub stream: AgentStream,
}

/// The streams of SPEC §6.3, each with typed payloads.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(tag = "stream", content = "data", rename_all = "snake_case")]
pub enum AgentStream {
    Lifecycle(LifecycleEvent),
    Assistant(AssistantEvent),
    Tool(ToolEvent),
    Compaction(CompactionEvent),
}

#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(tag = "phase", rename_all = "snake_case")]
pub enum LifecycleEvent {
    Start {
        #[serde(rename = "startedAt")]
        started_at: DateTime<Utc>,
        /// Client run ids this run answers too: requests the queue collected into it
        /// (`collect` mode), whose waiters wait for this run.
        #[serde(rename = "mergedRunIds", skip_serializing_if = "Vec::is_empty")]
        merged_run_ids: Vec<String>,
        /// The model the run asks first (failover may end with another; see `End`).
        #[serde(skip_serializing_if = "Option::is_none")]
        model: Option<ModelUsed>,
        /// How the session shows the model's reasoning (`/reasoning`); listeners that
        /// render reasoning (the web chat) follow it.
        #[serde(skip_serializing_if = "ReasoningDisplay::is_off")]
        reasoning: ReasoningDisplay,
    },
    End {
        #[serde(rename = "endedAt")]
        ended_at: DateTime<Utc>,
        aborted: bool,
        /// Client run ids whose messages this run took while it ran (steering).
        #[serde(rename = "mergedRunIds", skip_serializing_if = "Vec::is_empty")]
        merged_run_ids: Vec<String>,
        /// The model that answered last, when one did.
        #[serde(skip_serializing_if = "Option::is_none")]
        model: Option<ModelUsed>,
        /// Lines for the user that are not the answer ("this model cannot think"), shown
        /// after it; a silent run shows none.
        #[serde(skip_serializing_if = "Vec::is_empty")]
        notices: Vec<String>,
        /// The files the reply attaches (its `MEDIA:` lines), stored and sent after its
        /// text; clients that show replies themselves (the web chat) show them from here.
        #[serde(skip_serializing_if = "Vec::is_empty")]
        files: Vec<FileInfo>,
    },
    Error {
        error: String,
        #[serde(rename = "endedAt")]
        ended_at: DateTime<Utc>,
        /// As for `End`.
        #[serde(rename = "mergedRunIds", skip_serializing_if = "Vec::is_empty")]
        merged_run_ids: Vec<String>,
        /// As for `End`.
        #[serde(skip_serializing_if = "Option::is_none")]
        model: Option<ModelUsed>,
    },
}

impl LifecycleEvent {
    pub fn is_terminal(&self) -> bool {
        !matches!(self, LifecycleEvent::Start { .. })
    }
}

#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(tag = "type", rename_all = "snake_case")]
pub enum AssistantEvent {
    /// New text, only what came since the last event: a listener that needs the text so
    /// far keeps it, so a long reply costs its listeners O(n), not a copy per delta. (On the
    /// gateway's `agent` events the hub adds `text`, the text so far, as SPEC §6.3 shows it.)
    Delta { delta: String },
    /// Reasoning ("thinking") text, when the model exposes it.
    Reasoning { delta: String },
    /// A run of text ended (before a tool call, or at the end of the message).
    TextEnd { text: String },
    /// The assistant message is complete.
    MessageEnd { text: String },
    /// The model failed after part of this message was shown and is asked again: the
    /// message starts over: listeners drop the text so far, and the next `delta` begins anew.
    Restart { attempt: u32 },
}

#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(tag = "phase", rename_all = "snake_case")]
pub enum ToolEvent {
    Start {
        name: String,
        #[serde(rename = "toolCallId")]
        tool_call_id: String,
        args: serde_json::Value,
    },
    Update {
        #[serde(rename = "toolCallId")]
        tool_call_id: String,
        partial: String,
    },
    Result {
        name: String,
        #[serde(rename = "toolCallId")]
        tool_call_id: String,
        #[serde(rename = "isError")]
        is_error: bool,
        result: String,
    },
}

/// The run is shortening its context (SPEC §6.9): the older transcript is being summarized.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(tag = "phase", rename_all = "snake_case")]
pub enum CompactionEvent {
    Start,
    /// `will_retry`: the model call that overflowed is sent again with the compacted context.
    /// Nothing of the failed call was shown, so listeners keep what they have.
    End {
        #[serde(rename = "willRetry")]
        will_retry: bool,
    },
}

/// The process-wide broadcast of every run's events, for observers.
#[derive(Debug, Clone)]
pub struct EventBus {
    sender: broadcast::Sender<Arc<AgentEvent>>,
}

impl Default for EventBus {
    fn default() -> Self {
        Self::new()
    }
}

impl EventBus {
    pub fn new() -> Self {
        Self { sender: broadcast::channel(BUS_CAPACITY).0 }
    }

    /// Events from now on. A receiver that falls more than [`BUS_CAPACITY`] behind gets
    /// `Lagged` and skips ahead; runs never wait for it.
    pub fn subscribe(&self) -> broadcast::Receiver<Arc<AgentEvent>> {
        self.sender.subscribe()
    }

    fn publish(&self, event: Arc<AgentEvent>) {
        // No observer is not an error.
        let _ = self.sender.send(event);
    }
}

/// The emitter of one run. See the [module documentation](self).
pub struct RunEvents {
    run_id: String,
    session_key: String,
    seq: AtomicU64,
    terminal_sent: AtomicBool,
    consumer: Option<mpsc::UnboundedSender<AgentEvent>>,
    bus: EventBus,
}

impl RunEvents {
    /// `consumer` receives every event of this run, in order, without loss.
    pub fn new(
        run_id: impl Into<String>,
        session_key: impl Into<String>,
        bus: EventBus,
        consumer: Option<mpsc::UnboundedSender<AgentEvent>>,
    ) -> Self {
        Self {
            run_id: run_id.into(),
            session_key: session_key.into(),
            seq: AtomicU64::new(0),
            terminal_sent: AtomicBool::new(false),
            consumer,
            bus,
        }
    }

    pub fn run_id(&self) -> &str {
        &self.run_id
    }

    pub fn session_key(&self) -> &str {
        &self.session_key
    }

    /// Emits an event. After the terminal lifecycle event nothing more is emitted: a late
    /// event from a run that already ended would confuse every listener.
    pub fn emit(&self, stream: AgentStream) {
        let terminal = matches!(&stream, AgentStream::Lifecycle(lifecycle) if lifecycle.is_terminal());
        if terminal {
            if self.terminal_sent.swap(true, Ordering::SeqCst) {
                return;
            }
        } else if self.terminal_sent.load(Ordering::SeqCst) {
            return;
        }
        let event = AgentEvent {
            run_id: self.run_id.clone(),
            seq: self.seq.fetch_add(1, Ordering::SeqCst) + 1,
            session_key: self.session_key.clone(),
            ts: Utc::now(),
            stream,
        };
        if let Some(consumer) = &self.consumer {
            let _ = consumer.send(event.clone());
        }
        self.bus.publish(Arc::new(event));
    }

    pub fn lifecycle(&self, event: LifecycleEvent) {
        self.emit(AgentStream::Lifecycle(event));
    }

    pub fn assistant(&self, event: AssistantEvent) {
        self.emit(AgentStream::Assistant(event));
    }

    pub fn tool(&self, event: ToolEvent) {
        self.emit(AgentStream::Tool(event));
    }

    pub fn compaction(&self, event: CompactionEvent) {
        self.emit(AgentStream::Compaction(event));
    }

    /// Whether the run's terminal event went out.
    pub fn ended(&self) -> bool {
        self.terminal_sent.load(Ordering::SeqCst)
    }
}

impl Drop for RunEvents {
    fn drop(&mut self) {
        if self.ended() {
            return;
        }
        let ended_at = Utc::now();
        if std::thread::panicking() {
            self.lifecycle(LifecycleEvent::Error {
                error: "the run failed unexpectedly".to_owned(),
                ended_at,
                merged_run_ids: Vec::new(),
                model: None,
            });
        } else {
            // The run's future was dropped before it finished: it was aborted from outside.
            self.lifecycle(LifecycleEvent::End {
                ended_at,
                aborted: true,
                merged_run_ids: Vec::new(),
                model: None,
                notices: Vec::new(),
                files: Vec::new(),
            });
        }
    }
}

/// Cuts a tool's text for events and logs, saying how much was left out.
pub fn truncate_for_event(text: &str) -> String {
    match text.char_indices().nth(TOOL_TEXT_EVENT_LIMIT) {
        None => text.to_owned(),
        Some((cut, _)) => {
            let omitted = text[cut..].chars().count();
            format!("{}… [{omitted} more characters truncated]", &text[..cut])
        }
    }
}

/// A tool result as events and logs show it (SPEC §6.3): the text cut as
/// [`truncate_for_event`] does, then one line per image with its size, never its bytes.
pub fn tool_result_for_event(text: &str, images: &[ImagePart]) -> String {
    let mut shown = truncate_for_event(text);
    for image in images {
        if !shown.is_empty() {
            shown.push('\n');
        }
        shown.push_str(&format!("[image: {}]", image.describe()));
    }
    shown
}

#[cfg(test)]
mod tests {
    use super::*;

    fn collect(mut rx: mpsc::UnboundedReceiver<AgentEvent>) -> Vec<AgentEvent> {
        let mut events = Vec::new();
        while let Ok(event) = rx.try_recv() {
            events.push(event);
        }
        events
    }

    fn emitter() -> (RunEvents, mpsc::UnboundedReceiver<AgentEvent>) {
        let (tx, rx) = mpsc::unbounded_channel();
        (RunEvents::new("run-1", "agent:main:main", EventBus::new(), Some(tx)), rx)
    }

    #[test]
    fn seq_strictly_increases_and_only_one_terminal_event_is_sent() {
        let (events, rx) = emitter();
        events.lifecycle(LifecycleEvent::Start {
            started_at: Utc::now(),
            merged_run_ids: Vec::new(),
            model: None,
            reasoning: ReasoningDisplay::Off,
        });
        events.assistant(AssistantEvent::Delta { delta: "hi".into() });
        events.lifecycle(LifecycleEvent::End {
            ended_at: Utc::now(),
            aborted: false,
            merged_run_ids: Vec::new(),
            model: None,
            notices: Vec::new(),
            files: Vec::new(),
        });
        events.lifecycle(LifecycleEvent::Error {
            model: None,
            error: "late".into(),
            ended_at: Utc::now(),
            merged_run_ids: Vec::new(),
        });
        events.assistant(AssistantEvent::Delta { delta: "late".into() });
        drop(events);
        let seen = collect(rx);
        assert_eq!(seen.iter().map(|e| e.seq).collect::<Vec<_>>(), [1, 2, 3]);
        assert!(matches!(seen[2].stream, AgentStream::Lifecycle(LifecycleEvent::End { aborted: false, .. })));
    }

    #[test]
    fn dropping_an_unfinished_run_emits_an_aborted_end() {
        let (events, rx) = emitter();
        events.lifecycle(LifecycleEvent::Start {
            started_at: Utc::now(),
            merged_run_ids: Vec::new(),
            model: None,
            reasoning: ReasoningDisplay::Off,
        });
        drop(events);
        let seen = collect(rx);
        assert!(matches!(
            seen.last().unwrap().stream,
            AgentStream::Lifecycle(LifecycleEvent::End { aborted: true, .. })
        ));
    }

    #[test]
    fn a_panicking_run_still_emits_a_terminal_error() {
        let (tx, rx) = mpsc::unbounded_channel();
        let result = std::panic::catch_unwind(move || {
            let events = RunEvents::new("run-1", "k", EventBus::new(), Some(tx));
            events.lifecycle(LifecycleEvent::Start {
                started_at: Utc::now(),
                merged_run_ids: Vec::new(),
                model: None,
                reasoning: ReasoningDisplay::Off,
            });
            panic!("tool exploded");
        });
        assert!(result.is_err());
        let seen = collect(rx);
        assert_eq!(seen.len(), 2);
        assert!(matches!(seen[1].stream, AgentStream::Lifecycle(LifecycleEvent::Error { .. })));
    }

    #[tokio::test]
    async fn the_bus_carries_events_of_every_run() {
        let bus = EventBus::new();
        let mut observer = bus.subscribe();
        let events = RunEvents::new("run-9", "k", bus.clone(), None);
        events.lifecycle(LifecycleEvent::Start {
            started_at: Utc::now(),
            merged_run_ids: Vec::new(),
            model: None,
            reasoning: ReasoningDisplay::Off,
        });
        let received = observer.recv().await.unwrap();
        assert_eq!((received.run_id.as_str(), received.seq), ("run-9", 1));
    }

    #[test]
    fn events_serialize_with_the_wire_names() {
        let (events, rx) = emitter();
        events.tool(ToolEvent::Result {
            name: "current_time".into(),
            tool_call_id: "c1".into(),
            is_error: false,
            result: "now".into(),
        });
        let json = serde_json::to_value(&collect(rx)[0]).unwrap();
        assert_eq!(json["runId"], "run-1");
        assert_eq!(json["sessionKey"], "agent:main:main");
        assert_eq!(json["stream"], "tool");
        assert_eq!(json["data"]["phase"], "result");
        assert_eq!(json["data"]["toolCallId"], "c1");
        assert_eq!(json["data"]["isError"], false);
    }

    #[test]
    fn compaction_events_serialize_with_the_wire_names() {
        let (events, rx) = emitter();
        events.compaction(CompactionEvent::Start);
        events.compaction(CompactionEvent::End { will_retry: true });
        let seen = collect(rx);
        let json: Vec<_> = seen.iter().map(|e| serde_json::to_value(e).unwrap()).collect();
        assert_eq!(
            (json[0]["stream"].as_str(), json[0]["data"]["phase"].as_str()),
            (Some("compaction"), Some("start"))
        );
        assert_eq!(json[1]["data"], serde_json::json!({ "phase": "end", "willRetry": true }));
    }

    #[test]
    fn long_tool_text_is_truncated_for_events_and_says_so() {
        let long = "é".repeat(TOOL_TEXT_EVENT_LIMIT + 5);
        let cut = truncate_for_event(&long);
        assert!(cut.starts_with(&"é".repeat(TOOL_TEXT_EVENT_LIMIT)));
        assert!(cut.ends_with("[5 more characters truncated]"), "{}", &cut[cut.len() - 40..]);
        assert_eq!(truncate_for_event("short"), "short");
    }

    #[test]
    fn images_in_tool_results_are_shown_by_size_never_by_bytes() {
        let image = ImagePart { media_type: "image/png".into(), data: "QUJD".repeat(1000), width: 800, height: 600 };
        let shown = tool_result_for_event("saved a.png", std::slice::from_ref(&image));
        assert_eq!(shown, "saved a.png\n[image: image/png 800×600, 3 KB]");
        assert!(!shown.contains("QUJD"));
        assert_eq!(tool_result_for_event("", &[image]), "[image: image/png 800×600, 3 KB]");
    }
}
