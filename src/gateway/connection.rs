//! One WebSocket client: the `connect` handshake, then requests answered side by side (a
//! long `agent.wait` holds up nothing else) and events written as the client reads them.

use std::sync::Arc;

use axum::extract::ws::{CloseFrame, Message, Utf8Bytes, WebSocket, close_code};
use futures::{SinkExt, StreamExt};
use serde::Deserialize;
use serde_json::{Value, json};
use tokio::sync::Semaphore;
use tokio::time::{Duration, interval_at};

use super::GatewayState;
use super::hub::Client;
use super::outbox::{Delivery, Outbox};
use super::protocol::{self, EVENTS, ErrorCode, METHODS, Outgoing, PROTOCOL_VERSION, RpcError};

/// How long a client has to send `connect`.
pub const HANDSHAKE_TIMEOUT: Duration = Duration::from_secs(10);
/// How often an idle connection hears a `tick`.
pub const TICK_INTERVAL: Duration = Duration::from_secs(30);
/// Longest client id accepted; it names the client's web chat.
const MAX_CLIENT_ID: usize = 128;
/// Requests one connection may have unanswered at once (each `agent.wait` holds one).
pub const MAX_IN_FLIGHT: usize = 256;

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct ConnectParams {
    #[serde(default)]
    auth: Auth,
    client: ClientInfo,
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct Auth {
    token: Option<String>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct ClientInfo {
    id: String,
    #[serde(default)]
    version: Option<String>,
}

/// Serves one socket until either side closes it.
pub async fn serve(socket: WebSocket, gateway: Arc<GatewayState>) {
    let (mut sink, mut stream) = socket.split();
    let handshake = tokio::time::timeout(HANDSHAKE_TIMEOUT, stream.next()).await;
    let first = match handshake {
        Ok(Some(Ok(Message::Text(text)))) => text,
        Ok(Some(Ok(_))) => {
            let error = RpcError::invalid("the first frame must be a connect request (JSON text)");
            let _ = sink.send(text(Outgoing::response(Value::Null, Err(error)))).await;
            return;
        }
        Ok(Some(Err(error))) => {
            match refusal(error, gateway.max_frame_bytes) {
                Ok(refusal) => {
                    if let Some(error) = refusal.answer {
                        let _ = sink.send(text(Outgoing::response(Value::Null, Err(error)))).await;
                    }
                    let _ = sink.send(close(refusal.code, refusal.reason)).await;
                }
                Err(error) => tracing::debug!(%error, "a gateway client failed before the handshake"),
            }
            return;
        }
        Ok(None) => return,
        Err(_) => {
            let _ = sink.send(close(close_code::POLICY, "no connect request within 10 s")).await;
            return;
        }
    };
    let (outbox, client) = match handshake_reply(&gateway, &first) {
        Ok(connected) => connected,
        Err((id, error)) => {
            let unauthorized = error.code == ErrorCode::Unauthorized;
            let _ = sink.send(text(Outgoing::response(id, Err(error)))).await;
            if unauthorized {
                let _ = sink.send(close(close_code::POLICY, "unauthorized")).await;
            }
            return;
        }
    };
    tracing::debug!(client = %client.id, "gateway client connected");

    let writer = tokio::spawn(write_frames(sink, outbox.clone()));
    let in_flight = Arc::new(Semaphore::new(MAX_IN_FLIGHT));
    loop {
        let received = tokio::select! {
            received = stream.next() => received,
            () = gateway.closing.cancelled() => break,
        };
        let Some(received) = received else { break };
        let frame = match received {
            Ok(Message::Text(frame)) => frame,
            Ok(Message::Close(_)) => break,
            Ok(Message::Ping(_) | Message::Pong(_)) => continue,
            Ok(Message::Binary(_)) => {
                let error = RpcError::invalid("frames must be JSON text, not binary");
                outbox.push_response(Outgoing::response(Value::Null, Err(error)).to_text());
                continue;
            }
            Err(error) => {
                // A frame that breaks the protocol's rules: the socket cannot go on, but the
                // client is told why with the close code RFC 6455 names for it.
                match refusal(error, gateway.max_frame_bytes) {
                    Ok(refusal) => {
                        tracing::debug!(client = %client.id, code = refusal.code, "refusing a gateway client's frame");
                        if let Some(error) = refusal.answer {
                            outbox.push_response(Outgoing::response(Value::Null, Err(error)).to_text());
                        }
                        outbox.close_with(refusal.code, refusal.reason);
                    }
                    Err(error) => tracing::debug!(client = %client.id, %error, "gateway client socket failed"),
                }
                break;
            }
        };
        if outbox.is_closed() {
            break;
        }
        match protocol::parse_request(&frame) {
            Err((id, error)) => outbox.push_response(Outgoing::response(id, Err(error)).to_text()),
            Ok(request) if request.method == "connect" => {
                let error = RpcError::invalid("already connected");
                outbox.push_response(Outgoing::response(request.id, Err(error)).to_text());
            }
            Ok(request) => {
                let Ok(permit) = in_flight.clone().try_acquire_owned() else {
                    let error = RpcError {
                        retry_after_ms: Some(1000),
                        ..RpcError::unavailable(format!("more than {MAX_IN_FLIGHT} requests in flight"))
                    };
                    outbox.push_response(Outgoing::response(request.id, Err(error)).to_text());
                    continue;
                };
                let (gateway, client, outbox) = (gateway.clone(), client.clone(), outbox.clone());
                tokio::spawn(async move {
                    let result = super::methods::call(&gateway, &client, &request.method, &request.params).await;
                    outbox.push_response(Outgoing::response(request.id, result).to_text());
                    drop(permit);
                });
            }
        }
    }
    gateway.hub.disconnect(client.connection);
    outbox.close();
    let _ = writer.await;
    tracing::debug!(client = %client.id, "gateway client disconnected");
}

/// Checks the `connect` frame; on success the client is registered and `hello-ok` queued.
fn handshake_reply(gateway: &GatewayState, frame: &str) -> Result<(Arc<Outbox>, Client), (Value, RpcError)> {
    let request = protocol::parse_request(frame)?;
    let id = request.id.clone();
    if request.method != "connect" {
        return Err((id, RpcError::invalid(format!("the first request must be connect, not {}", request.method))));
    }
    let params: ConnectParams = protocol::params(&request.params).map_err(|error| (id.clone(), error))?;
    if let Some(expected) = &gateway.auth_token
        && !params.auth.token.as_deref().is_some_and(|token| constant_time_eq(token.as_bytes(), expected.as_bytes()))
    {
        tracing::warn!("a gateway client presented a missing or wrong token");
        return Err((id, RpcError::new(ErrorCode::Unauthorized, "a valid auth.token is required")));
    }
    let client_id = params.client.id.trim().to_owned();
    if client_id.is_empty() || client_id.len() > MAX_CLIENT_ID || client_id.chars().any(char::is_control) {
        return Err((id, RpcError::invalid(format!("client.id must be 1..={MAX_CLIENT_ID} printable characters"))));
    }
    let outbox = Arc::new(Outbox::default());
    let connection = gateway.hub.connect(outbox.clone());
    let session_key = gateway.webchat_session(&client_id, None);
    gateway.hub.follow_session(connection, &session_key);
    gateway.hub.follow_chat(connection, &client_id, &session_key);
    tracing::debug!(client = %client_id, version = ?params.client.version, "gateway handshake");
    let mut features = json!({ "methods": METHODS, "events": EVENTS });
    // Files can be uploaded (`/webchat/upload`) and named in `chat.send`, up to this size.
    if let Some(media) = &gateway.media {
        features["uploads"] = json!({ "maxBytes": media.config().max_bytes(super::webchat::CHANNEL_NAME) });
    }
    let hello = json!({
        "type": "hello-ok",
        "protocol": PROTOCOL_VERSION,
        "server": { "version": env!("CARGO_PKG_VERSION") },
        "sessionKey": session_key,
        // The agents a client may talk to (`agentId`), the default first, each with this
        // client's own session with it; the web chat offers a choice when there are several.
        "agents": gateway.agents.iter().map(|agent| {
            let mut entry = json!(agent);
            entry["sessionKey"] = json!(gateway.webchat_session(&client_id, Some(&agent.id)));
            entry
        }).collect::<Vec<_>>(),
        "features": features,
        "tickIntervalMs": TICK_INTERVAL.as_millis() as u64,
    });
    outbox.push_response(Outgoing::response(id, Ok(hello)).to_text());
    Ok((outbox, Client { connection, id: client_id, session_key }))
}

/// Writes queued frames, and a `tick` every [`TICK_INTERVAL`].
async fn write_frames(mut sink: futures::stream::SplitSink<WebSocket, Message>, outbox: Arc<Outbox>) {
    let mut ticks = interval_at(tokio::time::Instant::now() + TICK_INTERVAL, TICK_INTERVAL);
    loop {
        tokio::select! {
            frame = outbox.next() => {
                let Some(frame) = frame else { break };
                if sink.send(Message::Text(frame.into())).await.is_err() {
                    outbox.close();
                    break;
                }
            }
            _ = ticks.tick() => {
                let now = chrono::Utc::now().timestamp_millis();
                outbox.push_event("tick", &json!({ "ts": now }).to_string(), Delivery::Droppable);
            }
        }
    }
    if let Some((code, reason)) = outbox.close_frame() {
        let _ = sink.send(close(code, reason)).await;
    }
    let _ = sink.close().await;
}

/// Why a client's frame ended its connection, as the client is told.
struct Refusal {
    code: u16,
    reason: String,
    /// An `INVALID_REQUEST` answer, where the protocol promises one.
    answer: Option<RpcError>,
}

/// The refusal for a frame the socket could not read, or the error back if the socket
/// simply failed (the client went away, the connection broke).
fn refusal(error: axum::Error, max_frame_bytes: usize) -> Result<Refusal, axum::Error> {
    use tokio_tungstenite::tungstenite::Error as WsError;
    let error = error.into_inner();
    match error.downcast_ref::<WsError>() {
        Some(WsError::Utf8(_)) => {
            let message = "frames must be valid UTF-8 JSON text";
            Ok(Refusal {
                code: close_code::INVALID,
                reason: message.to_owned(),
                answer: Some(RpcError::invalid(message)),
            })
        }
        Some(WsError::Capacity(_)) => {
            Ok(Refusal { code: close_code::SIZE, reason: format!("frame over {max_frame_bytes} bytes"), answer: None })
        }
        Some(WsError::Protocol(problem)) => {
            Ok(Refusal { code: close_code::PROTOCOL, reason: problem.to_string(), answer: None })
        }
        _ => Err(axum::Error::new(error)),
    }
}

fn text(frame: Outgoing) -> Message {
    Message::Text(frame.to_text().into())
}

fn close(code: u16, reason: impl Into<Utf8Bytes>) -> Message {
    Message::Close(Some(CloseFrame { code, reason: reason.into() }))
}

/// Compares secrets without revealing through timing how much of a guess was right.
pub(crate) fn constant_time_eq(a: &[u8], b: &[u8]) -> bool {
    if a.len() != b.len() {
        return false;
    }
    a.iter().zip(b).fold(0u8, |acc, (x, y)| acc | (x ^ y)) == 0
}
