//! Server-sent events from a streamed HTTP body, via `eventsource-stream`.
//!
//! Generic over the byte stream so the same parser serves reqwest bodies and recorded
//! streams in benchmarks.

use std::collections::VecDeque;
use std::fmt::Display;

use eventsource_stream::{EventStreamError, Eventsource};
use futures::{Stream, StreamExt};

use super::{ModelEvent, ModelStream, ProviderError};

/// One SSE event: its `event:` name (`message` when unnamed) and its `data:`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SseEvent {
    pub event: String,
    pub data: String,
}

/// Parses a byte stream into SSE events. A transport failure mid-body becomes
/// [`ProviderError::Stream`]; bytes that are not valid SSE become
/// [`ProviderError::Malformed`].
pub fn sse_events<S, B, E>(bytes: S) -> impl Stream<Item = Result<SseEvent, ProviderError>> + Send
where
    S: Stream<Item = Result<B, E>> + Send,
    B: AsRef<[u8]> + Send,
    E: Display + Send,
{
    bytes.eventsource().map(|item| match item {
        Ok(event) => Ok(SseEvent { event: event.event, data: event.data }),
        Err(EventStreamError::Transport(error)) => Err(ProviderError::Stream { message: error.to_string() }),
        Err(EventStreamError::Utf8(error)) => {
            Err(ProviderError::Malformed { message: format!("invalid UTF-8: {error}") })
        }
        Err(EventStreamError::Parser(error)) => {
            Err(ProviderError::Malformed { message: format!("invalid SSE: {error}") })
        }
    })
}

/// A vendor's translation from SSE events to model events.
pub trait StreamDecoder: Send + 'static {
    /// Model events for one SSE event (often none, e.g. for keep-alive pings).
    fn decode(&mut self, event: SseEvent) -> Result<Vec<ModelEvent>, ProviderError>;

    /// Whether the vendor's end-of-reply marker was seen. A body that ends before it was
    /// cut off, and is reported as [`ProviderError::Stream`].
    fn is_complete(&self) -> bool;
}

/// Runs a decoder over an SSE stream. After the first error the stream ends.
pub fn decode_stream<S, D>(events: S, decoder: D) -> ModelStream
where
    S: Stream<Item = Result<SseEvent, ProviderError>> + Send + 'static,
    D: StreamDecoder,
{
    struct State<S, D> {
        events: std::pin::Pin<Box<S>>,
        decoder: D,
        pending: VecDeque<ModelEvent>,
        finished: bool,
    }
    let state = State { events: Box::pin(events), decoder, pending: VecDeque::new(), finished: false };
    futures::stream::unfold(state, |mut state| async move {
        loop {
            if let Some(event) = state.pending.pop_front() {
                return Some((Ok(event), state));
            }
            if state.finished {
                return None;
            }
            match state.events.next().await {
                Some(Ok(sse)) => match state.decoder.decode(sse) {
                    Ok(decoded) => state.pending.extend(decoded),
                    Err(error) => {
                        state.finished = true;
                        return Some((Err(error), state));
                    }
                },
                Some(Err(error)) => {
                    state.finished = true;
                    return Some((Err(error), state));
                }
                None => {
                    state.finished = true;
                    if !state.decoder.is_complete() {
                        let error =
                            ProviderError::Stream { message: "the reply ended before it was complete".to_owned() };
                        return Some((Err(error), state));
                    }
                }
            }
        }
    })
    .boxed()
}

#[cfg(test)]
mod tests {
    use super::*;

    async fn parse(chunks: &[&str]) -> Vec<Result<SseEvent, ProviderError>> {
        let owned: Vec<Result<Vec<u8>, String>> = chunks.iter().map(|c| Ok(c.as_bytes().to_vec())).collect();
        sse_events(futures::stream::iter(owned)).collect().await
    }

    #[tokio::test]
    async fn events_split_across_chunks_are_reassembled() {
        let events = parse(&["event: ping\ndata: {\"a\"", ":1}\n\ndata: [DONE]\n\n"]).await;
        assert_eq!(
            events,
            [
                Ok(SseEvent { event: "ping".into(), data: "{\"a\":1}".into() }),
                Ok(SseEvent { event: "message".into(), data: "[DONE]".into() }),
            ]
        );
    }

    #[tokio::test]
    async fn comments_and_crlf_line_ends_are_handled() {
        let events = parse(&[": keep-alive\r\n\r\ndata: x\r\n\r\n"]).await;
        assert_eq!(events, [Ok(SseEvent { event: "message".into(), data: "x".into() })]);
    }

    #[tokio::test]
    async fn a_transport_failure_is_a_stream_error() {
        let chunks: Vec<Result<Vec<u8>, String>> = vec![Ok(b"data: a\n\n".to_vec()), Err("connection reset".into())];
        let events: Vec<_> = sse_events(futures::stream::iter(chunks)).collect().await;
        assert_eq!(events[1], Err(ProviderError::Stream { message: "connection reset".into() }));
    }
}
