//! `chat` events for web and RPC clients (SPEC §7, §8): a run's agent events condensed
//! into what a chat window needs — the text so far, then how the run ended.
//!
//! A `delta` carries the full visible text so far (after the silent-token hold-back), at
//! most one per [`DELTA_INTERVAL`] per run; text held back by that throttle is always sent
//! as a last delta before a tool starts and before the `final`. A run whose reply is
//! `NO_REPLY` ends with a `final` that has no message — as does a run whose `message` tool
//! already answered in the chat the run came from (messaging-tool dedup, SPEC §7). Reply
//! directives are taken out of deltas and finals as from any reply ([`super::directive`]).

use serde::Serialize;
use tokio::time::{Duration, Instant};

use super::directive;
use super::media_lines;
use super::silent::{shape_final, visible_while_streaming};
use crate::agent::{AgentEvent, AgentStream, AssistantEvent, LifecycleEvent, ToolEvent};
use crate::media::FileInfo;

/// The tool whose sends to the run's own chat replace the final reply.
const MESSAGE_TOOL: &str = "message";

/// The shortest gap between two deltas of one run: a chat window redrawing faster than
/// this gains nothing.
pub const DELTA_INTERVAL: Duration = Duration::from_millis(150);

/// One `chat` event.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct ChatEvent {
    pub run_id: String,
    pub session_key: String,
    /// Counts this run's chat events from 1, so a client can spot a gap.
    pub seq: u64,
    pub state: ChatState,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub message: Option<ChatText>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub error_message: Option<String>,
    /// The model's reasoning so far, apart from the answer, when the session shows it
    /// (`/reasoning on|stream`); never on a final without a message (a silent reply).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub reasoning: Option<String>,
    /// Lines for the user that are not the answer ("this model cannot think"), on a final
    /// with a message only: shown after it.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub notices: Vec<String>,
    /// Files for the chat window to show (inline images, download links): on a `final`, the
    /// reply's `MEDIA:` files, or those of a message sent to the chat. A `final` may carry
    /// files and no message.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub files: Vec<FileInfo>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum ChatState {
    Delta,
    Final,
    Aborted,
    Error,
}

/// The assistant's text as a chat window shows it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct ChatText {
    pub role: &'static str,
    pub text: String,
}

/// Turns one run's agent events into `chat` events. Feed every event to
/// [`ChatEvents::on_event`]; when [`ChatEvents::due`] passes, call [`ChatEvents::tick`].
pub struct ChatEvents {
    run_id: String,
    session_key: String,
    seq: u64,
    /// The assistant text of the current message, as streamed.
    text: String,
    /// The visible text last sent in a delta.
    sent: String,
    /// `text` changed since the last delta: whether one may be due, known without
    /// rendering the text (the hub asks at every event, for every run).
    changed: bool,
    /// The last assistant message ended: the next delta begins a new text.
    message_ended: bool,
    last_delta: Option<Instant>,
    ended: bool,
    /// `message` tool calls aimed at the run's own chat (no `channel` / `to`), by call id.
    local_sends: Vec<String>,
    /// One of them succeeded: the tool's message is the answer.
    answered_by_tool: bool,
    /// The session shows reasoning (from the run's start event).
    show_reasoning: bool,
    reasoning: String,
    /// How much of `reasoning` the last delta carried.
    sent_reasoning: usize,
}

impl ChatEvents {
    pub fn new(run_id: &str, session_key: &str) -> Self {
        Self {
            run_id: run_id.to_owned(),
            session_key: session_key.to_owned(),
            seq: 0,
            text: String::new(),
            sent: String::new(),
            changed: false,
            message_ended: false,
            last_delta: None,
            ended: false,
            local_sends: Vec::new(),
            answered_by_tool: false,
            show_reasoning: false,
            reasoning: String::new(),
            sent_reasoning: 0,
        }
    }

    /// The `chat` events `event` calls for now.
    pub fn on_event(&mut self, event: &AgentEvent) -> Vec<ChatEvent> {
        let mut out = Vec::new();
        if self.ended {
            return out;
        }
        match &event.stream {
            AgentStream::Assistant(AssistantEvent::Delta { delta }) => {
                if std::mem::take(&mut self.message_ended) {
                    self.text.clear();
                }
                self.text.push_str(delta);
                self.changed = true;
                if self.throttle_passed() {
                    out.extend(self.delta());
                }
            }
            AgentStream::Assistant(AssistantEvent::MessageEnd { text } | AssistantEvent::TextEnd { text }) => {
                self.message_ended |= matches!(event.stream, AgentStream::Assistant(AssistantEvent::MessageEnd { .. }));
                if *text != self.text {
                    text.clone_into(&mut self.text);
                    self.changed = true;
                }
            }
            AgentStream::Assistant(AssistantEvent::Reasoning { delta }) => {
                if self.show_reasoning {
                    self.reasoning.push_str(delta);
                    if self.throttle_passed() {
                        out.extend(self.delta());
                    }
                }
            }
            // The message starts over; the next delta's text replaces what was shown.
            AgentStream::Assistant(AssistantEvent::Restart { .. }) => {
                self.text.clear();
                self.message_ended = false;
                self.changed = true;
                self.reasoning.clear();
                self.sent_reasoning = 0;
            }
            AgentStream::Lifecycle(LifecycleEvent::Start { reasoning, .. }) => {
                self.show_reasoning = !reasoning.is_off();
            }
            AgentStream::Tool(ToolEvent::Start { name, tool_call_id, args }) => {
                let elsewhere = ["channel", "to"].iter().any(|key| args.get(key).is_some_and(|v| !v.is_null()));
                if name == MESSAGE_TOOL && !elsewhere {
                    self.local_sends.push(tool_call_id.clone());
                }
                out.extend(self.delta());
            }
            AgentStream::Tool(ToolEvent::Result { tool_call_id, is_error: false, .. }) => {
                self.answered_by_tool |= self.local_sends.contains(tool_call_id);
            }
            // A compaction retries only a call that showed nothing: the text so far stands.
            AgentStream::Tool(_) | AgentStream::Compaction(_) => {}
            AgentStream::Lifecycle(LifecycleEvent::End { aborted, notices, files, .. }) => {
                self.ended = true;
                if *aborted {
                    out.push(self.event(ChatState::Aborted, None, None));
                } else {
                    out.extend(self.delta());
                    let message = shape_final(&media_lines::split(&directive::strip(&self.text).text).text)
                        .filter(|_| !self.answered_by_tool)
                        .map(|text| ChatText { role: "assistant", text });
                    let reasoning = message.as_ref().and_then(|_| self.reasoning_so_far());
                    let notices = if message.is_some() { notices.clone() } else { Vec::new() };
                    let mut last = self.event(ChatState::Final, message, None);
                    last.reasoning = reasoning;
                    last.notices = notices;
                    // The files go out whatever the text: they were attached on purpose.
                    last.files.clone_from(files);
                    out.push(last);
                }
            }
            AgentStream::Lifecycle(LifecycleEvent::Error { error, .. }) => {
                self.ended = true;
                out.extend(self.delta());
                out.push(self.event(ChatState::Error, None, Some(error.clone())));
            }
        }
        out
    }

    /// The assistant text of the current message so far, as streamed (directives and all).
    pub fn text(&self) -> &str {
        &self.text
    }

    /// When held-back text may go out as a delta, if some waits.
    pub fn due(&self) -> Option<Instant> {
        let waiting = !self.ended && (self.changed || self.reasoning.len() != self.sent_reasoning);
        waiting.then(|| self.last_delta.map_or_else(Instant::now, |last| last + DELTA_INTERVAL))
    }

    /// The held-back delta, if the throttle allows it now.
    pub fn tick(&mut self) -> Option<ChatEvent> {
        if self.ended || !self.throttle_passed() {
            return None;
        }
        self.delta()
    }

    /// A delta with the visible text (and the reasoning so far, where shown), unless
    /// nothing new is visible.
    fn delta(&mut self) -> Option<ChatEvent> {
        self.changed = false;
        let stripped = directive::strip_streaming(&self.text);
        let shown = media_lines::strip_streaming(&stripped.text);
        let visible = visible_while_streaming(&shown);
        let new_text = !visible.is_empty() && visible != self.sent;
        let new_reasoning = self.reasoning.len() != self.sent_reasoning;
        if !new_text && !new_reasoning {
            return None;
        }
        visible.clone_into(&mut self.sent);
        self.sent_reasoning = self.reasoning.len();
        self.last_delta = Some(Instant::now());
        let message = (!self.sent.is_empty()).then(|| ChatText { role: "assistant", text: self.sent.clone() });
        let reasoning = self.reasoning_so_far();
        let mut event = self.event(ChatState::Delta, message, None);
        event.reasoning = reasoning;
        Some(event)
    }

    fn reasoning_so_far(&self) -> Option<String> {
        (self.show_reasoning && !self.reasoning.trim().is_empty()).then(|| self.reasoning.trim().to_owned())
    }

    fn throttle_passed(&self) -> bool {
        self.last_delta.is_none_or(|last| last.elapsed() >= DELTA_INTERVAL)
    }

    fn event(&mut self, state: ChatState, message: Option<ChatText>, error_message: Option<String>) -> ChatEvent {
        self.seq += 1;
        ChatEvent {
            run_id: self.run_id.clone(),
            session_key: self.session_key.clone(),
            seq: self.seq,
            state,
            message,
            error_message,
            reasoning: None,
            notices: Vec::new(),
            files: Vec::new(),
        }
    }
}

#[cfg(test)]
mod tests {
    use chrono::Utc;

    use super::*;

    fn event(stream: AgentStream) -> AgentEvent {
        AgentEvent { run_id: "r1".into(), seq: 0, session_key: "agent:main:main".into(), ts: Utc::now(), stream }
    }

    fn start(reasoning: crate::models::ReasoningDisplay) -> AgentEvent {
        event(AgentStream::Lifecycle(LifecycleEvent::Start {
            started_at: Utc::now(),
            merged_run_ids: Vec::new(),
            model: None,
            reasoning,
        }))
    }

    fn reasoning(text: &str) -> AgentEvent {
        event(AgentStream::Assistant(AssistantEvent::Reasoning { delta: text.into() }))
    }

    #[test]
    fn reasoning_travels_apart_from_the_answer_only_where_the_session_shows_it() {
        use crate::models::ReasoningDisplay;
        let mut chat = ChatEvents::new("r1", "k");
        chat.on_event(&start(ReasoningDisplay::On));
        let first = chat.on_event(&reasoning("Let me think."));
        assert_eq!(first[0].reasoning.as_deref(), Some("Let me think."));
        assert_eq!(first[0].message, None, "no answer text yet");
        std::thread::sleep(DELTA_INTERVAL);
        chat.on_event(&delta("Hello"));
        let last = chat.on_event(&end(false));
        let last = last.last().unwrap();
        assert_eq!(last.message.as_ref().map(|m| m.text.as_str()), Some("Hello"));
        assert_eq!(last.reasoning.as_deref(), Some("Let me think."));

        let mut hidden = ChatEvents::new("r2", "k");
        hidden.on_event(&start(ReasoningDisplay::Off));
        assert!(hidden.on_event(&reasoning("secret thoughts")).is_empty());

        let mut silent = ChatEvents::new("r3", "k");
        silent.on_event(&start(ReasoningDisplay::On));
        silent.on_event(&reasoning("Nothing to add."));
        silent.on_event(&delta("NO_REPLY"));
        let last = silent.on_event(&end(false));
        let last = last.last().unwrap();
        assert_eq!((last.message.clone(), last.reasoning.clone()), (None, None), "a silent reply shows no reasoning");
    }

    #[test]
    fn notices_ride_on_a_final_with_an_answer_only() {
        let end_with = |notice: &str| {
            event(AgentStream::Lifecycle(LifecycleEvent::End {
                ended_at: Utc::now(),
                aborted: false,
                merged_run_ids: Vec::new(),
                model: None,
                notices: vec![notice.to_owned()],
                files: Vec::new(),
            }))
        };
        let mut chat = ChatEvents::new("r1", "k");
        chat.on_event(&delta("Hello"));
        let last = chat.on_event(&end_with("ℹ️ cannot think"));
        assert_eq!(last.last().unwrap().notices, ["ℹ️ cannot think"]);
        let json = serde_json::to_value(last.last().unwrap()).unwrap();
        assert_eq!(json["notices"][0], "ℹ️ cannot think");

        let mut silent = ChatEvents::new("r2", "k");
        silent.on_event(&delta("NO_REPLY"));
        let last = silent.on_event(&end_with("ℹ️ cannot think"));
        assert!(last.last().unwrap().notices.is_empty(), "a silent reply stays silent");
    }

    #[test]
    fn a_replys_files_ride_on_its_final_even_without_text() {
        let file = FileInfo {
            id: "ab".repeat(32),
            name: Some("chart.png".into()),
            mime_type: "image/png".into(),
            size: 10,
            width: Some(2),
            height: Some(2),
        };
        let end_with_file = || {
            event(AgentStream::Lifecycle(LifecycleEvent::End {
                ended_at: Utc::now(),
                aborted: false,
                merged_run_ids: Vec::new(),
                model: None,
                notices: Vec::new(),
                files: vec![file.clone()],
            }))
        };
        let mut chat = ChatEvents::new("r1", "k");
        chat.on_event(&delta("Here it is.\nMEDIA: chart.png"));
        let last = chat.on_event(&end_with_file()).pop().unwrap();
        assert_eq!(last.message.map(|m| m.text).as_deref(), Some("Here it is."));
        assert_eq!(last.files, std::slice::from_ref(&file));

        let mut bare = ChatEvents::new("r2", "k");
        bare.on_event(&delta("MEDIA: chart.png"));
        let last = bare.on_event(&end_with_file()).pop().unwrap();
        assert_eq!((last.state, last.message), (ChatState::Final, None));
        let json = serde_json::to_value(&last.files).unwrap();
        assert_eq!(json[0]["mimeType"], "image/png", "{json}");
    }

    fn delta(text: &str) -> AgentEvent {
        event(AgentStream::Assistant(AssistantEvent::Delta { delta: text.into() }))
    }

    fn end(aborted: bool) -> AgentEvent {
        event(AgentStream::Lifecycle(LifecycleEvent::End {
            ended_at: Utc::now(),
            aborted,
            merged_run_ids: Vec::new(),
            model: None,
            notices: Vec::new(),
            files: Vec::new(),
        }))
    }

    fn texts(events: &[ChatEvent]) -> Vec<(ChatState, Option<String>)> {
        events.iter().map(|e| (e.state, e.message.as_ref().map(|m| m.text.clone()))).collect()
    }

    #[tokio::test(start_paused = true)]
    async fn deltas_come_at_most_every_150_ms_and_the_rest_is_flushed_before_the_final() {
        let mut chat = ChatEvents::new("r1", "agent:main:main");
        let mut emitted = chat.on_event(&delta("Hel"));
        for text in ["l", "o", " w", "o"] {
            tokio::time::advance(Duration::from_millis(50)).await;
            emitted.extend(chat.on_event(&delta(text)));
        }
        // 0 ms and 150 ms.
        assert_eq!(
            texts(&emitted),
            [(ChatState::Delta, Some("Hel".into())), (ChatState::Delta, Some("Hello w".into()))]
        );
        emitted.extend(chat.on_event(&delta("rld")));
        emitted.extend(chat.on_event(&end(false)));
        let tail = texts(&emitted[2..]);
        assert_eq!(
            tail,
            [(ChatState::Delta, Some("Hello world".into())), (ChatState::Final, Some("Hello world".into()))]
        );
        assert_eq!(emitted.iter().map(|e| e.seq).collect::<Vec<_>>(), [1, 2, 3, 4]);
    }

    #[tokio::test(start_paused = true)]
    async fn held_back_text_goes_out_when_due_and_before_a_tool_starts() {
        let mut chat = ChatEvents::new("r1", "k");
        chat.on_event(&delta("Let me check"));
        assert!(chat.on_event(&delta(" the logs")).is_empty(), "throttled");
        let due = chat.due().expect("text waits");
        tokio::time::sleep_until(due).await;
        assert_eq!(chat.tick().and_then(|e| e.message).map(|m| m.text).as_deref(), Some("Let me check the logs"));

        chat.on_event(&delta(" now."));
        let tool = event(AgentStream::Tool(ToolEvent::Start {
            name: "read".into(),
            tool_call_id: "c1".into(),
            args: serde_json::json!({}),
        }));
        assert_eq!(texts(&chat.on_event(&tool)), [(ChatState::Delta, Some("Let me check the logs now.".into()))]);
    }

    #[tokio::test(start_paused = true)]
    async fn a_silent_run_ends_with_a_final_without_message_and_never_a_delta() {
        let mut chat = ChatEvents::new("r1", "k");
        let mut emitted = Vec::new();
        for text in ["NO", "_RE", "PLY"] {
            tokio::time::advance(DELTA_INTERVAL).await;
            emitted.extend(chat.on_event(&delta(text)));
        }
        emitted.extend(chat.on_event(&end(false)));
        assert_eq!(texts(&emitted), [(ChatState::Final, None)]);
        let json = serde_json::to_value(&emitted[0]).unwrap();
        assert_eq!(json, serde_json::json!({"runId": "r1", "sessionKey": "k", "seq": 1, "state": "final"}));
    }

    #[tokio::test(start_paused = true)]
    async fn reply_directives_never_reach_a_chat_window() {
        let mut chat = ChatEvents::new("r1", "k");
        let mut emitted = Vec::new();
        for text in ["[[ reply", "_to : 12", " ]] Yes", ", [[tts]]that"] {
            tokio::time::advance(DELTA_INTERVAL).await;
            emitted.extend(chat.on_event(&delta(text)));
        }
        emitted.extend(chat.on_event(&end(false)));
        assert_eq!(
            texts(&emitted),
            [
                (ChatState::Delta, Some("Yes".into())),
                (ChatState::Delta, Some("Yes, that".into())),
                (ChatState::Final, Some("Yes, that".into()))
            ]
        );
    }

    #[tokio::test(start_paused = true)]
    async fn a_message_after_a_tool_round_starts_a_new_text() {
        let mut chat = ChatEvents::new("r1", "k");
        chat.on_event(&delta("Let me look."));
        let ended = AssistantEvent::MessageEnd { text: "Let me look.".into() };
        chat.on_event(&event(AgentStream::Assistant(ended)));
        tokio::time::advance(DELTA_INTERVAL).await;
        let emitted = chat.on_event(&delta("Found it."));
        assert_eq!(texts(&emitted), [(ChatState::Delta, Some("Found it.".into()))]);
        assert_eq!(texts(&chat.on_event(&end(false))), [(ChatState::Final, Some("Found it.".into()))]);
    }

    #[tokio::test(start_paused = true)]
    async fn aborted_and_failed_runs_say_so() {
        let mut chat = ChatEvents::new("r1", "k");
        assert_eq!(texts(&chat.on_event(&end(true))), [(ChatState::Aborted, None)]);
        assert!(chat.on_event(&delta("late")).is_empty(), "nothing after the end");

        let mut chat = ChatEvents::new("r2", "k");
        let failed = event(AgentStream::Lifecycle(LifecycleEvent::Error {
            error: "The model provider is unavailable.".into(),
            ended_at: Utc::now(),
            merged_run_ids: Vec::new(),
            model: None,
        }));
        let events = chat.on_event(&failed);
        assert_eq!(events[0].state, ChatState::Error);
        assert_eq!(events[0].error_message.as_deref(), Some("The model provider is unavailable."));
    }

    #[tokio::test(start_paused = true)]
    async fn a_message_tool_send_to_this_chat_leaves_the_final_without_message() {
        let tool = |id: &str, args: serde_json::Value| {
            event(AgentStream::Tool(ToolEvent::Start { name: "message".into(), tool_call_id: id.into(), args }))
        };
        let done = |id: &str, is_error: bool| {
            event(AgentStream::Tool(ToolEvent::Result {
                name: "message".into(),
                tool_call_id: id.into(),
                is_error,
                result: String::new(),
            }))
        };
        let mut here = ChatEvents::new("r1", "k");
        here.on_event(&tool("a", serde_json::json!({"text": "Here is the report."})));
        here.on_event(&done("a", false));
        here.on_event(&delta("Sent it to you!"));
        assert_eq!(texts(&here.on_event(&end(false))).last().unwrap(), &(ChatState::Final, None));

        let mut elsewhere = ChatEvents::new("r2", "k");
        elsewhere.on_event(&tool("b", serde_json::json!({"text": "hi", "to": "direct:7"})));
        elsewhere.on_event(&done("b", false));
        elsewhere.on_event(&delta("I told Bob."));
        let last = texts(&elsewhere.on_event(&end(false))).pop().unwrap();
        assert_eq!(last, (ChatState::Final, Some("I told Bob.".into())), "a send elsewhere never silences the reply");

        let mut failed = ChatEvents::new("r3", "k");
        failed.on_event(&tool("c", serde_json::json!({"text": "hi"})));
        failed.on_event(&done("c", true));
        failed.on_event(&delta("Could not send it; here: hi"));
        assert!(texts(&failed.on_event(&end(false))).pop().unwrap().1.is_some(), "a failed send leaves the reply");
    }
}
