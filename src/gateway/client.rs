//! A client of the gateway's WebSocket RPC, for `ferry agent` and the load bench: one
//! socket, requests answered in order of arrival, events kept until asked for.

use std::collections::VecDeque;

use futures::{SinkExt, StreamExt};
use serde_json::{Value, json};
use tokio::net::TcpStream;
use tokio_tungstenite::tungstenite::Message;
use tokio_tungstenite::{MaybeTlsStream, WebSocketStream};

#[derive(Debug, thiserror::Error)]
pub enum ClientError {
    #[error("cannot reach the gateway at {url}: {source}")]
    Unreachable { url: String, source: Box<tokio_tungstenite::tungstenite::Error> },
    #[error("the gateway refused the request: {code}: {message}")]
    Refused { code: String, message: String },
    #[error("the gateway closed the connection")]
    Closed,
    #[error("the gateway sent something unreadable: {0}")]
    Protocol(String),
}

pub struct GatewayClient {
    socket: WebSocketStream<MaybeTlsStream<TcpStream>>,
    next_id: u64,
    events: VecDeque<Value>,
    hello: Value,
}

impl GatewayClient {
    /// Connects to `url` (`ws://host:port/ws`) and passes the handshake.
    pub async fn connect(url: &str, token: Option<&str>, client_id: &str) -> Result<Self, ClientError> {
        // No Nagle: requests are small frames that must not wait for a delayed ACK.
        let (socket, _) = tokio_tungstenite::connect_async_with_config(url, None, true)
            .await
            .map_err(|source| ClientError::Unreachable { url: url.to_owned(), source: Box::new(source) })?;
        let mut client = Self { socket, next_id: 0, events: VecDeque::new(), hello: Value::Null };
        let mut auth = json!({});
        if let Some(token) = token {
            auth["token"] = json!(token);
        }
        let params = json!({"auth": auth, "client": {"id": client_id, "version": env!("CARGO_PKG_VERSION")}});
        client.hello = client.call("connect", params).await?;
        Ok(client)
    }

    /// The `hello-ok` payload.
    pub fn hello(&self) -> &Value {
        &self.hello
    }

    /// Calls `method` and returns its payload (events that arrive meanwhile are kept for
    /// [`GatewayClient::next_event`]).
    pub async fn call(&mut self, method: &str, params: Value) -> Result<Value, ClientError> {
        self.next_id += 1;
        let id = self.next_id.to_string();
        let frame = json!({"type": "req", "id": id, "method": method, "params": params});
        self.socket.send(Message::Text(frame.to_string().into())).await.map_err(|_| ClientError::Closed)?;
        loop {
            let frame = self.frame().await?;
            if frame["type"] == "event" {
                self.events.push_back(frame);
                continue;
            }
            if frame["type"] == "res" && frame["id"] == id.as_str() {
                if frame["ok"] == true {
                    return Ok(frame.get("payload").cloned().unwrap_or(Value::Null));
                }
                let error = &frame["error"];
                return Err(ClientError::Refused {
                    code: error["code"].as_str().unwrap_or("UNKNOWN").to_owned(),
                    message: error["message"].as_str().unwrap_or_default().to_owned(),
                });
            }
        }
    }

    /// The next event frame (`{type:"event", event, payload, seq}`).
    pub async fn next_event(&mut self) -> Result<Value, ClientError> {
        if let Some(event) = self.events.pop_front() {
            return Ok(event);
        }
        loop {
            let frame = self.frame().await?;
            if frame["type"] == "event" {
                return Ok(frame);
            }
        }
    }

    async fn frame(&mut self) -> Result<Value, ClientError> {
        loop {
            match self.socket.next().await {
                Some(Ok(Message::Text(text))) => {
                    return serde_json::from_str(&text).map_err(|error| ClientError::Protocol(error.to_string()));
                }
                Some(Ok(Message::Close(_))) | None | Some(Err(_)) => return Err(ClientError::Closed),
                Some(Ok(_)) => continue,
            }
        }
    }
}
