//! The gateway's event fan-out: every run's events from the bus, turned into `agent` and
//! `chat` events for the connections that follow the run's session, changes of requests to
//! approve a command as `approval` events for the same, and replies the web chat channel
//! sends, for the connections of that chat.
//!
//! ```text
//! EventBus ─► Hub::run ─► RunRegistry (agent.wait)
//!                      └► ChatEvents per run ─► Outbox of each subscribed connection
//! Approvals ─► Hub::run ─► Outbox of each connection following the request's session
//! WebChat::send ─► Hub::notice ─► Outbox of each connection of that chat
//! ```

use std::collections::{HashMap, HashSet};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};

use serde_json::Value;
use tokio::sync::broadcast;
use tokio::sync::broadcast::error::RecvError;
use tokio::time::sleep_until;
use tokio_util::sync::CancellationToken;

use super::outbox::{Delivery, Outbox};
use super::runs::RunRegistry;
use crate::agent::tools::exec::{Approval, Approvals};
use crate::agent::{AgentEvent, AgentStream, AssistantEvent, EventBus};
use crate::media::FileInfo;
use crate::reply::chat_events::{ChatEvent, ChatEvents, ChatState, ChatText};

/// A connection's id within the hub.
pub type ConnectionId = u64;

/// Who is on the other end of a connection, once its handshake passed: what the RPC
/// methods answer for.
#[derive(Debug, Clone)]
pub struct Client {
    pub connection: ConnectionId,
    /// The client's stable id; its web chat messages come from, and go to, this chat.
    pub id: String,
    /// Where `chat.*` calls without a `sessionKey` go.
    pub session_key: String,
}

#[derive(Default)]
pub struct Hub {
    state: Mutex<State>,
    next_id: AtomicU64,
    pub runs: RunRegistry,
}

#[derive(Default)]
struct State {
    outboxes: HashMap<ConnectionId, Arc<Outbox>>,
    by_session: HashMap<String, HashSet<ConnectionId>>,
    /// Web chat chat id → its connections and the session its replies belong to.
    by_chat: HashMap<String, (HashSet<ConnectionId>, String)>,
    /// What each connection subscribed to, to clean up after it.
    subscriptions: HashMap<ConnectionId, (Vec<String>, Vec<String>)>,
}

impl Hub {
    /// Registers a connection's outbox.
    pub fn connect(&self, outbox: Arc<Outbox>) -> ConnectionId {
        let id = self.next_id.fetch_add(1, Ordering::Relaxed);
        let mut state = self.lock();
        state.outboxes.insert(id, outbox);
        state.subscriptions.insert(id, (Vec::new(), Vec::new()));
        id
    }

    pub fn disconnect(&self, id: ConnectionId) {
        let mut state = self.lock();
        state.outboxes.remove(&id);
        let Some((sessions, chats)) = state.subscriptions.remove(&id) else { return };
        for session in sessions {
            if let Some(ids) = state.by_session.get_mut(&session) {
                ids.remove(&id);
                if ids.is_empty() {
                    state.by_session.remove(&session);
                }
            }
        }
        for chat in chats {
            if let Some((ids, _)) = state.by_chat.get_mut(&chat) {
                ids.remove(&id);
                if ids.is_empty() {
                    state.by_chat.remove(&chat);
                }
            }
        }
    }

    /// The connection gets the `agent` and `chat` events of `session_key` from now on.
    pub fn follow_session(&self, id: ConnectionId, session_key: &str) {
        let mut state = self.lock();
        if !state.outboxes.contains_key(&id) {
            return;
        }
        if state.by_session.entry(session_key.to_owned()).or_default().insert(id)
            && let Some((sessions, _)) = state.subscriptions.get_mut(&id)
        {
            sessions.push(session_key.to_owned());
        }
    }

    /// The connection gets what the web chat channel sends to `chat_id`, as `chat` events
    /// of `session_key`.
    pub fn follow_chat(&self, id: ConnectionId, chat_id: &str, session_key: &str) {
        let mut state = self.lock();
        if !state.outboxes.contains_key(&id) {
            return;
        }
        let entry = state.by_chat.entry(chat_id.to_owned()).or_insert_with(|| (HashSet::new(), session_key.to_owned()));
        if entry.0.insert(id)
            && let Some((_, chats)) = state.subscriptions.get_mut(&id)
        {
            chats.push(chat_id.to_owned());
        }
    }

    /// A message the web chat channel sends to `chat_id` (a command's answer, a notice, a
    /// `message` tool send, a request to approve a command): one `final` with a run id of
    /// its own, with `approval` (see [`super::approvals::view`]) when it is such a request
    /// and `files` when it carries some (then its text, the caption, may be empty). An
    /// approval request shows in the session of the run that asked; anything else in the
    /// chat's first session. False when no connection has that chat open.
    pub fn notice(
        &self,
        chat_id: &str,
        run_id: &str,
        text: &str,
        files: Vec<FileInfo>,
        approval: Option<Approved>,
    ) -> bool {
        let state = self.lock();
        let Some((ids, first_session)) = state.by_chat.get(chat_id) else { return false };
        let session_key = approval.as_ref().map_or(first_session, |approval| &approval.session_key);
        let message =
            (!text.is_empty() || files.is_empty()).then(|| ChatText { role: "assistant", text: text.to_owned() });
        let event = ChatEvent {
            run_id: run_id.to_owned(),
            session_key: session_key.clone(),
            seq: 1,
            state: ChatState::Final,
            message,
            error_message: None,
            reasoning: None,
            notices: Vec::new(),
            files,
        };
        let payload = match approval {
            Some(approval) => {
                let mut payload = serde_json::to_value(&event).unwrap_or_default();
                payload["approval"] = approval.view;
                to_json(&payload)
            }
            None => to_json(&event),
        };
        for id in ids {
            if let Some(outbox) = state.outboxes.get(id) {
                outbox.push_event("chat", &payload, Delivery::Reliable);
            }
        }
        true
    }

    /// Follows the bus until `stop`: keeps the run registry current and feeds connections;
    /// with `approvals`, tells the connections following a session of each change of its
    /// requests to approve a command. Subscribe before any run starts (the receivers are
    /// taken here, at the call).
    pub fn run(
        self: Arc<Self>,
        bus: &EventBus,
        approvals: Option<&Approvals>,
        stop: CancellationToken,
    ) -> impl Future<Output = ()> + use<> {
        let mut events = bus.subscribe();
        let mut changes = approvals.map(Approvals::subscribe);
        async move {
            let mut chats: HashMap<String, ChatEvents> = HashMap::new();
            loop {
                let due = chats.values().filter_map(ChatEvents::due).min();
                tokio::select! {
                    received = events.recv() => match received {
                        Ok(event) => self.on_event(&event, &mut chats),
                        Err(RecvError::Lagged(missed)) => {
                            tracing::warn!(missed, "the gateway fell behind the event bus; clients miss some events");
                        }
                        Err(RecvError::Closed) => break,
                    },
                    changed = next_change(&mut changes) => match changed {
                        Ok(approval) => self.approval_changed(&approval),
                        Err(RecvError::Lagged(missed)) => {
                            tracing::warn!(missed, "the gateway fell behind the approvals; clients miss some changes");
                        }
                        Err(RecvError::Closed) => changes = None,
                    },
                    () = async { if let Some(due) = due { sleep_until(due).await } }, if due.is_some() => {
                        for chat in chats.values_mut() {
                            if let Some(delta) = chat.tick() {
                                self.publish_chat(&delta);
                            }
                        }
                    }
                    () = stop.cancelled() => {
                        // Forward what runs already published (a final that just came), so
                        // clients see it before their connections close.
                        while let Ok(event) = events.try_recv() {
                            self.on_event(&event, &mut chats);
                        }
                        break;
                    }
                }
            }
        }
    }

    fn on_event(&self, event: &AgentEvent, chats: &mut HashMap<String, ChatEvents>) {
        self.runs.observe(event);
        let terminal = matches!(&event.stream, AgentStream::Lifecycle(lifecycle) if lifecycle.is_terminal());
        let chat =
            chats.entry(event.run_id.clone()).or_insert_with(|| ChatEvents::new(&event.run_id, &event.session_key));
        let chat_events = chat.on_event(event);
        let state = self.lock();
        let Some(ids) = state.by_session.get(&event.session_key) else {
            drop(state);
            if terminal {
                chats.remove(&event.run_id);
            }
            return;
        };
        let payload = agent_payload(event, chat.text());
        for id in ids {
            if let Some(outbox) = state.outboxes.get(id) {
                let delivery = if matches!(event.stream, AgentStream::Lifecycle(_)) {
                    Delivery::Reliable
                } else {
                    Delivery::Droppable
                };
                outbox.push_event("agent", &payload, delivery);
            }
        }
        drop(state);
        if terminal {
            chats.remove(&event.run_id);
        }
        for chat_event in &chat_events {
            self.publish_chat(chat_event);
        }
    }

    /// An `approval` event for the connections following the request's session.
    fn approval_changed(&self, approval: &Approval) {
        let state = self.lock();
        let Some(ids) = state.by_session.get(&approval.session_key) else { return };
        let payload = to_json(&super::approvals::event(approval));
        for id in ids {
            if let Some(outbox) = state.outboxes.get(id) {
                outbox.push_event("approval", &payload, Delivery::Reliable);
            }
        }
    }

    fn publish_chat(&self, event: &ChatEvent) {
        let state = self.lock();
        let Some(ids) = state.by_session.get(&event.session_key) else { return };
        let payload = to_json(event);
        let delivery =
            if event.state == ChatState::Delta { Delivery::DeltaOf(event.run_id.clone()) } else { Delivery::Reliable };
        for id in ids {
            if let Some(outbox) = state.outboxes.get(id) {
                outbox.push_event("chat", &payload, delivery.clone());
            }
        }
    }

    fn lock(&self) -> MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

/// The next change of a request to approve a command; never, without approvals to follow.
async fn next_change(changes: &mut Option<broadcast::Receiver<Approval>>) -> Result<Approval, RecvError> {
    match changes {
        Some(changes) => changes.recv().await,
        None => std::future::pending().await,
    }
}

/// Event payloads are plain data; encoding them cannot fail.
/// An `agent` event as clients get it. A text delta also carries `text`, everything the
/// message has said so far (SPEC §6.3): the run's events carry only the new text, so the
/// hub adds it here, and only for runs someone follows.
fn agent_payload(event: &AgentEvent, text_so_far: &str) -> String {
    if !matches!(event.stream, AgentStream::Assistant(AssistantEvent::Delta { .. })) {
        return to_json(event);
    }
    let mut value = serde_json::to_value(event).unwrap_or_default();
    if let Some(data) = value.get_mut("data").and_then(Value::as_object_mut) {
        data.insert("text".to_owned(), Value::String(text_so_far.to_owned()));
    }
    to_json(&value)
}

fn to_json(value: &impl serde::Serialize) -> String {
    serde_json::to_string(value).unwrap_or_else(|_| "null".to_owned())
}

/// An approval request as a notice carries it: its view for the page, and the session of
/// the run that asked, where the page shows it.
pub struct Approved {
    pub view: Value,
    pub session_key: String,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn an_approval_request_shows_in_its_runs_session_and_other_notices_in_the_chats_first() {
        let hub = Hub::default();
        let outbox = Arc::new(Outbox::default());
        let connection = hub.connect(outbox.clone());
        hub.follow_chat(connection, "browser", "agent:main:webchat:direct:browser");
        let session_of = |frame: String| {
            let frame: Value = serde_json::from_str(&frame).unwrap();
            frame["payload"]["sessionKey"].as_str().unwrap().to_owned()
        };
        assert!(hub.notice("browser", "r1", "Started a new conversation.", Vec::new(), None));
        assert_eq!(session_of(outbox.next().await.unwrap()), "agent:main:webchat:direct:browser");
        let approval = Approved {
            view: serde_json::json!({"id": "abc123"}),
            session_key: "agent:support:webchat:direct:browser".to_owned(),
        };
        assert!(hub.notice("browser", "r2", "Run `ls`?", Vec::new(), Some(approval)));
        assert_eq!(session_of(outbox.next().await.unwrap()), "agent:support:webchat:direct:browser");
        assert!(!hub.notice("nobody", "r3", "hi", Vec::new(), None), "no connection has that chat open");
    }
}
