//! The fake's gateway WebSocket at `/gateway` (serenity appends `?v=10`).
//!
//! One session at a time, as one shard; a connection that identifies or resumes takes it
//! over, and a connection whose session was taken over gets nothing more: Hello (op 10) on connect; Identify (op 2) starts
//! a new session (READY, then any events injected before there was one); Resume (op 6) with
//! the current session id replays the dispatches after the client's `seq` (or all of them,
//! if the test asked for that), then RESUMED; a resume of an unknown session gets Invalid
//! Session (op 9). Heartbeats (op 1) are ACKed (op 11) and counted. Dispatches carry
//! increasing `s`. A test can close the connection with code 4000 or drop it without a close
//! frame; the session survives for a resume. Only text frames are sent.

use std::sync::Arc;

use axum::extract::State as AxumState;
use axum::extract::ws::{CloseFrame, Message, WebSocket, WebSocketUpgrade};
use axum::response::Response;
use serde_json::{Value, json};

use super::{Kick, Shared, lock};

pub(crate) async fn upgrade(AxumState(shared): AxumState<Arc<Shared>>, ws: WebSocketUpgrade) -> Response {
    ws.on_upgrade(move |socket| async move {
        let id = {
            let mut state = lock(&shared.state);
            state.gateway.connections_opened += 1;
            state.gateway.connections_opened
        };
        Connection { shared: Arc::clone(&shared), id, next: None }.serve(socket).await;
        let mut state = lock(&shared.state);
        if state.gateway.live_on == id {
            state.gateway.live = false;
        }
        drop(state);
        shared.notify();
    })
}

/// One client connection.
struct Connection {
    shared: Arc<Shared>,
    /// Which connection this is, in opening order.
    id: u64,
    /// The index in the session log of the next dispatch to send; `None` until the session
    /// is live on this connection.
    next: Option<usize>,
}

fn text(value: &Value) -> Message {
    Message::Text(value.to_string().into())
}

impl Connection {
    async fn serve(mut self, mut socket: WebSocket) {
        let mut changed = self.shared.changed.subscribe();
        let mut kicks = self.shared.kick.subscribe();
        kicks.mark_unchanged();
        let interval = self.shared.heartbeat_interval.as_millis() as u64;
        if socket.send(text(&json!({ "op": 10, "d": { "heartbeat_interval": interval } }))).await.is_err() {
            return;
        }
        loop {
            if !self.flush(&mut socket).await {
                return;
            }
            tokio::select! {
                frame = socket.recv() => {
                    let Some(Ok(frame)) = frame else { return };
                    let payload = match frame {
                        Message::Text(body) => serde_json::from_str::<Value>(body.as_str()).unwrap_or(Value::Null),
                        Message::Close(_) => return,
                        _ => continue,
                    };
                    if !self.handle(&mut socket, &payload).await {
                        return;
                    }
                }
                _ = changed.changed() => {}
                kick = kicks.changed() => {
                    if kick.is_err() {
                        return;
                    }
                    let how = *kicks.borrow_and_update();
                    if let Kick::Close(code) = how {
                        let frame = CloseFrame { code, reason: "fake Discord: disconnect".into() };
                        let _ = socket.send(Message::Close(Some(frame))).await;
                    }
                    // Kick::Drop: return without a close frame; the TCP connection just ends.
                    return;
                }
            }
        }
    }

    /// Sends the session's dispatches this connection has not sent yet.
    async fn flush(&mut self, socket: &mut WebSocket) -> bool {
        let Some(next) = self.next else { return true };
        let pending: Vec<Value> = {
            let state = lock(&self.shared.state);
            if state.gateway.live_on != self.id {
                // Another connection took the session over.
                self.next = None;
                return true;
            }
            state.gateway.log.get(next..).map(<[Value]>::to_vec).unwrap_or_default()
        };
        for event in &pending {
            if socket.send(text(event)).await.is_err() {
                return false;
            }
        }
        self.next = Some(next + pending.len());
        true
    }

    /// Answers one client payload; `false` to end the connection.
    async fn handle(&mut self, socket: &mut WebSocket, payload: &Value) -> bool {
        match payload.get("op").and_then(Value::as_u64) {
            Some(1) => {
                lock(&self.shared.state).gateway.heartbeats += 1;
                self.shared.notify();
                socket.send(text(&json!({ "op": 11 }))).await.is_ok()
            }
            Some(2) => self.identify(socket, &payload["d"]).await,
            Some(6) => self.resume(socket, &payload["d"]).await,
            // Presence updates, request guild members…: accepted silently.
            _ => true,
        }
    }

    fn token_ok(&self, data: &Value) -> bool {
        let token = data.get("token").and_then(Value::as_str).unwrap_or_default();
        self.shared.accepts(token.strip_prefix("Bot ").unwrap_or(token))
    }

    async fn identify(&mut self, socket: &mut WebSocket, data: &Value) -> bool {
        if !self.token_ok(data) {
            let frame = CloseFrame { code: 4004, reason: "Authentication failed.".into() };
            let _ = socket.send(Message::Close(Some(frame))).await;
            return false;
        }
        {
            let mut state = lock(&self.shared.state);
            let gateway = &mut state.gateway;
            gateway.identifies += 1;
            gateway.sessions_started += 1;
            let session_id = format!("fake-session-{}", gateway.sessions_started);
            gateway.id = Some(session_id.clone());
            gateway.log.clear();
            gateway.live = true;
            gateway.live_on = self.id;
            let waiting = std::mem::take(&mut gateway.waiting);
            let ready = json!({
                "v": 10,
                "user": state.bot.to_json(),
                "guilds": [],
                "session_id": session_id,
                "resume_gateway_url": self.shared.gateway_url(),
                "shard": [0, 1],
                "application": { "id": state.bot.id.to_string(), "flags": 0 },
            });
            state.dispatch("READY", ready);
            for (event, data) in waiting {
                state.dispatch(&event, data);
            }
        }
        self.next = Some(0);
        self.shared.notify();
        true
    }

    async fn resume(&mut self, socket: &mut WebSocket, data: &Value) -> bool {
        let session = data.get("session_id").and_then(Value::as_str);
        let seq = data.get("seq").and_then(Value::as_u64).unwrap_or(0) as usize;
        let resumed = {
            let mut state = lock(&self.shared.state);
            let valid = self.token_ok(data) && session.is_some() && state.gateway.id.as_deref() == session;
            if valid {
                let gateway = &mut state.gateway;
                gateway.resumes += 1;
                gateway.live = true;
                gateway.live_on = self.id;
                // Replay from just after READY when asked, else what the client missed.
                let from =
                    if std::mem::take(&mut gateway.replay_all_on_resume) { 1 } else { seq.min(gateway.log.len()) };
                state.dispatch("RESUMED", json!({}));
                Some(from)
            } else {
                None
            }
        };
        self.shared.notify();
        match resumed {
            Some(from) => {
                self.next = Some(from);
                true
            }
            // Invalid Session, not resumable: the client identifies anew.
            None => socket.send(text(&json!({ "op": 9, "d": false }))).await.is_ok(),
        }
    }
}
