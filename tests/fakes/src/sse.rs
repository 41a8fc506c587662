//! Turning a provider's rendered SSE events into a response body that can also stall or break.
//!
//! The body is a stream polled by hyper rather than a task pushing into a channel: hyper only
//! flushes what it has buffered when the body returns `Pending`, so owning the polling is what
//! makes "send K events, then cut" deliver exactly K events before the connection drops.

use std::collections::VecDeque;
use std::io;
use std::sync::Arc;
use std::time::Duration;

use axum::body::{Body, Bytes};
use axum::http::{HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use tokio::sync::watch;

/// What role an event plays, which decides where a stall or cut happens.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum EventKind {
    /// Framing before or between content: role chunk, `message_start`, block start/stop, ping.
    Framing,
    /// A piece of content the client assembles (text, thinking, tool-call arguments).
    Delta,
    /// The end of the message: finish reason, usage, `[DONE]`, `message_delta`, `message_stop`.
    Finish,
}

/// One complete SSE event, already framed (`data: ...\n\n` or `event: ...\ndata: ...\n\n`).
#[derive(Clone, Debug)]
pub(crate) struct Event {
    pub(crate) kind: EventKind,
    pub(crate) text: String,
}

impl Event {
    pub(crate) fn new(kind: EventKind, text: String) -> Self {
        Self { kind, text }
    }
}

/// How the stream ends after the events that are sent.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Ending {
    /// Send everything, then end the body properly.
    Complete,
    /// Send up to the K-th delta, then stay silent with the connection open.
    Stall { after_deltas: usize },
    /// Send up to the K-th delta, then abort the connection.
    Cut { after_deltas: usize },
}

/// The events sent before a stall or cut: everything up to (not including) the event after the
/// `after_deltas`-th delta, and never the finishing events.
fn truncate(events: Vec<Event>, after_deltas: usize) -> Vec<Event> {
    let mut seen = 0;
    let mut kept = Vec::new();
    for event in events {
        match event.kind {
            EventKind::Finish => break,
            EventKind::Delta if seen == after_deltas => break,
            EventKind::Delta => seen += 1,
            EventKind::Framing => {}
        }
        kept.push(event);
    }
    kept
}

/// Counts one streamed body as open for as long as it lives. hyper drops a body when it has
/// been sent, when the client goes away (hyper notices the closed socket even while the body is
/// pending, e.g. stalled) and when the server stops, so the count going down is the signal that
/// a stream is really over.
pub(crate) struct OpenStream {
    count: Arc<watch::Sender<usize>>,
    group: Option<(Arc<GroupCounts>, String)>,
}

impl OpenStream {
    pub(crate) fn new(count: Arc<watch::Sender<usize>>, group: Option<(Arc<GroupCounts>, String)>) -> Self {
        count.send_modify(|open| *open += 1);
        if let Some((counts, name)) = &group {
            counts.open(name);
        }
        Self { count, group }
    }
}

impl Drop for OpenStream {
    fn drop(&mut self) {
        self.count.send_modify(|open| *open = open.saturating_sub(1));
        if let Some((counts, name)) = &self.group {
            counts.close(name);
        }
    }
}

/// Streams open at once per group (a test's grouping of requests, e.g. by chat session):
/// now, and the most ever.
#[derive(Default)]
pub(crate) struct GroupCounts {
    counts: std::sync::Mutex<std::collections::HashMap<String, (usize, usize)>>,
}

impl GroupCounts {
    fn lock(&self) -> std::sync::MutexGuard<'_, std::collections::HashMap<String, (usize, usize)>> {
        self.counts.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    fn open(&self, group: &str) {
        let mut counts = self.lock();
        let (open, peak) = counts.entry(group.to_owned()).or_default();
        *open += 1;
        *peak = (*peak).max(*open);
    }

    fn close(&self, group: &str) {
        if let Some((open, _)) = self.lock().get_mut(group) {
            *open = open.saturating_sub(1);
        }
    }

    /// Each group's most streams open at once.
    pub(crate) fn peaks(&self) -> std::collections::BTreeMap<String, usize> {
        self.lock().iter().map(|(group, (_, peak))| (group.clone(), *peak)).collect()
    }
}

struct BodyState {
    events: VecDeque<Event>,
    ending: Ending,
    delay: Option<Duration>,
    sent_any: bool,
    /// Flips to `true` when the fake is dropped, so a stalled body does not keep the server's
    /// graceful shutdown waiting forever.
    closing: watch::Receiver<bool>,
    /// Dropped with the body; see [`OpenStream`].
    _open: OpenStream,
}

/// A 200 `text/event-stream` response that sends `events` and then ends as `ending` says.
pub(crate) fn stream_response(
    events: Vec<Event>,
    ending: Ending,
    delay: Option<Duration>,
    closing: watch::Receiver<bool>,
    open: OpenStream,
) -> Response {
    let events = match ending {
        Ending::Complete => events,
        Ending::Stall { after_deltas } | Ending::Cut { after_deltas } => truncate(events, after_deltas),
    };
    let state = BodyState { events: events.into(), ending, delay, sent_any: false, closing, _open: open };
    let body = futures::stream::unfold(Some(state), |state| async move {
        let mut state = state?;
        if let Some(event) = state.events.pop_front() {
            if let (true, Some(delay)) = (state.sent_any, state.delay) {
                tokio::time::sleep(delay).await;
            }
            state.sent_any = true;
            return Some((Ok(Bytes::from(event.text)), Some(state)));
        }
        match state.ending {
            Ending::Complete => None,
            Ending::Stall { .. } => {
                // Pending until the fake goes away; hyper drops this future if the client leaves.
                let _ = state.closing.wait_for(|closing| *closing).await;
                Some((Err(io::Error::other("fake model server dropped during a scripted stall")), None))
            }
            Ending::Cut { .. } => {
                // Return `Pending` once so hyper flushes the events already written before the
                // error makes it abort the connection.
                tokio::task::yield_now().await;
                Some((Err(io::Error::new(io::ErrorKind::ConnectionAborted, "scripted cut")), None))
            }
        }
    });
    sse_headers(Body::from_stream(body))
}

/// A 200 `text/event-stream` response with this exact body, for raw scripted streams.
pub(crate) fn raw_response(text: String) -> Response {
    sse_headers(Body::from(text))
}

fn sse_headers(body: Body) -> Response {
    let mut response = (StatusCode::OK, body).into_response();
    let headers = response.headers_mut();
    headers.insert(header::CONTENT_TYPE, HeaderValue::from_static("text/event-stream; charset=utf-8"));
    headers.insert(header::CACHE_CONTROL, HeaderValue::from_static("no-cache"));
    response
}

#[cfg(test)]
mod tests {
    use super::*;

    fn events(kinds: &[EventKind]) -> Vec<Event> {
        kinds.iter().enumerate().map(|(i, kind)| Event::new(*kind, i.to_string())).collect()
    }

    fn texts(events: &[Event]) -> Vec<&str> {
        events.iter().map(|event| event.text.as_str()).collect()
    }

    #[test]
    fn truncation_keeps_framing_up_to_the_next_delta_and_never_the_finish() {
        use EventKind::*;
        let all = events(&[Framing, Delta, Delta, Framing, Framing, Delta, Finish, Finish]);
        assert_eq!(texts(&truncate(all.clone(), 0)), ["0"]);
        assert_eq!(texts(&truncate(all.clone(), 1)), ["0", "1"]);
        assert_eq!(texts(&truncate(all.clone(), 2)), ["0", "1", "2", "3", "4"]);
        assert_eq!(texts(&truncate(all.clone(), 3)), ["0", "1", "2", "3", "4", "5"]);
        assert_eq!(texts(&truncate(all, 9)), ["0", "1", "2", "3", "4", "5"]);
    }
}
