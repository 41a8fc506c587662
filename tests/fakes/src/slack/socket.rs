//! The Socket Mode WebSocket at the URL `apps.connections.open` hands out.
//!
//! A connection gets `hello`, then every `events_api` envelope that is not acknowledged and
//! not already in flight on another live connection. The client acknowledges with
//! `{"envelope_id": …}`. An envelope written to a connection that closes unacknowledged is
//! written again (with `retry_attempt` raised) to the next connection, as Slack does.
//! Tests can make the fake send `disconnect` (e.g. `refresh_requested`), drop the socket
//! without a close frame, lose acks on the wire, or close Socket Mode for a while (sockets
//! dropped, upgrades answered 503), so that messages written meanwhile reach the app only
//! through `conversations.history`.

use std::sync::Arc;

use axum::extract::State as AxumState;
use axum::extract::ws::{Message, WebSocket, WebSocketUpgrade};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use serde_json::{Value, json};
use tokio::sync::broadcast;

use super::{APP_ID, Shared, SocketControl, lock};

pub(crate) async fn upgrade(AxumState(shared): AxumState<Arc<Shared>>, ws: WebSocketUpgrade) -> Response {
    if lock(&shared.state).sockets_closed {
        return StatusCode::SERVICE_UNAVAILABLE.into_response();
    }
    ws.on_upgrade(move |socket| serve(shared, socket))
}

async fn serve(shared: Arc<Shared>, mut socket: WebSocket) {
    let mut control = shared.control.subscribe();
    let mut changed = shared.changed.subscribe();
    let connection = {
        let mut state = lock(&shared.state);
        state.next_connection += 1;
        state.connections_opened += 1;
        let id = state.next_connection;
        state.active_connections.insert(id);
        id
    };
    shared.bump();
    let hello = json!({
        "type": "hello", "num_connections": 1,
        "debug_info": {"host": "fake-slack", "approximate_connection_time": 3600},
        "connection_info": {"app_id": APP_ID},
    });
    if send(&mut socket, &hello).await {
        loop {
            let due = lock(&shared.state).due_for(connection);
            let mut failed = false;
            for frame in &due {
                if !send(&mut socket, frame).await {
                    failed = true;
                    break;
                }
            }
            if failed {
                break;
            }
            tokio::select! {
                frame = socket.recv() => match frame {
                    Some(Ok(Message::Text(text))) => acknowledge(&shared, text.as_str()),
                    Some(Ok(Message::Close(_)) | Err(_)) | None => break,
                    Some(Ok(_)) => {}
                },
                result = changed.changed() => if result.is_err() { break },
                command = control.recv() => match command {
                    Ok(SocketControl::Disconnect(reason)) => {
                        let frame = json!({"type": "disconnect", "reason": reason, "debug_info": {"host": "fake-slack"}});
                        let _ = send(&mut socket, &frame).await;
                        // Slack closes the socket a little after `disconnect`; the client
                        // is expected to have opened a new one by then.
                        let _ = socket.send(Message::Close(None)).await;
                        break;
                    }
                    Ok(SocketControl::Drop) => break,
                    Err(broadcast::error::RecvError::Lagged(_)) => {}
                    Err(broadcast::error::RecvError::Closed) => break,
                },
            }
        }
    }
    lock(&shared.state).active_connections.remove(&connection);
    shared.bump();
}

async fn send(socket: &mut WebSocket, frame: &Value) -> bool {
    socket.send(Message::Text(frame.to_string().into())).await.is_ok()
}

fn acknowledge(shared: &Shared, text: &str) {
    let Ok(frame) = serde_json::from_str::<Value>(text) else { return };
    let Some(envelope_id) = frame["envelope_id"].as_str() else { return };
    let mut state = lock(&shared.state);
    if state.acks_to_lose > 0 {
        state.acks_to_lose -= 1;
        state.lost_acks += 1;
        drop(state);
        shared.bump();
        return;
    }
    if let Some(envelope) = state.envelopes.iter_mut().find(|e| e.envelope_id == envelope_id) {
        envelope.acked = true;
    }
    drop(state);
    shared.bump();
}
