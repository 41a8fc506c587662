//! A minimal SSE reader over reqwest, so the fakes are checked against raw bytes on the wire
//! rather than against a client that might share their assumptions.

use std::time::Duration;

use futures::StreamExt;
use futures::stream::BoxStream;
use reqwest::Response;
use serde_json::Value;

/// How long a read may take before a test calls the stream stalled.
pub const STALL_WINDOW: Duration = Duration::from_millis(300);

/// One SSE event: the optional `event:` name and the `data:` payload.
#[derive(Clone, Debug)]
pub struct SseEvent {
    pub event: Option<String>,
    pub data: String,
}

impl SseEvent {
    /// The payload as JSON; panics with the payload if it is not JSON.
    pub fn json(&self) -> Value {
        serde_json::from_str(&self.data).unwrap_or_else(|error| panic!("not JSON ({error}): {}", self.data))
    }
}

/// How a body ended after the events read.
#[derive(Debug, PartialEq, Eq)]
pub enum BodyEnd {
    /// The server finished the body properly.
    Clean,
    /// The connection broke before the body was complete.
    Broken,
}

pub struct SseReader {
    body: BoxStream<'static, reqwest::Result<axum::body::Bytes>>,
    buffer: String,
}

impl SseReader {
    pub fn new(response: Response) -> Self {
        Self { body: response.bytes_stream().boxed(), buffer: String::new() }
    }

    /// The next event; `Err` when the body ends (cleanly or not) before another full event.
    pub async fn next_event(&mut self) -> Result<SseEvent, BodyEnd> {
        loop {
            if let Some(end) = self.buffer.find("\n\n") {
                let block: String = self.buffer.drain(..end + 2).collect();
                return Ok(parse_block(&block));
            }
            match self.body.next().await {
                Some(Ok(bytes)) => self.buffer.push_str(&String::from_utf8_lossy(&bytes)),
                Some(Err(_)) => return Err(BodyEnd::Broken),
                None => return Err(BodyEnd::Clean),
            }
        }
    }

    /// Every remaining event, and how the body ended.
    pub async fn read_to_end(&mut self) -> (Vec<SseEvent>, BodyEnd) {
        let mut events = Vec::new();
        loop {
            match self.next_event().await {
                Ok(event) => events.push(event),
                Err(end) => return (events, end),
            }
        }
    }

    /// Reads exactly `count` events, panicking if the body ends first.
    pub async fn take(&mut self, count: usize) -> Vec<SseEvent> {
        let mut events = Vec::with_capacity(count);
        for i in 0..count {
            match self.next_event().await {
                Ok(event) => events.push(event),
                Err(end) => panic!("body ended ({end:?}) after {i} of {count} events: {events:?}"),
            }
        }
        events
    }

    /// Whether nothing at all arrives within [`STALL_WINDOW`].
    pub async fn is_silent(&mut self) -> bool {
        tokio::time::timeout(STALL_WINDOW, self.next_event()).await.is_err()
    }
}

fn parse_block(block: &str) -> SseEvent {
    let mut event = None;
    let mut data = Vec::new();
    for line in block.lines() {
        if let Some(name) = line.strip_prefix("event:") {
            event = Some(name.trim_start().to_owned());
        } else if let Some(payload) = line.strip_prefix("data:") {
            data.push(payload.strip_prefix(' ').unwrap_or(payload));
        }
    }
    SseEvent { event, data: data.join("\n") }
}
