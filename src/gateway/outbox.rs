//! One connection's frames waiting to be written. Runs and the event hub never wait for a
//! client: they put frames here and go on; the connection's writer takes them out at
//! whatever pace the client reads.
//!
//! A slow client loses detail, never outcomes: a newer `chat` delta of a run replaces the
//! one still waiting (a delta carries the whole text, so nothing is lost), raw `agent`
//! events are dropped once the backlog is long, and responses and finals always stay. A
//! client that lets even those pile up is disconnected.

use std::collections::VecDeque;
use std::sync::{Mutex, MutexGuard, PoisonError};

use tokio::sync::Notify;

/// Frames waiting beyond which droppable ones (raw agent events) are dropped.
pub const DROPPABLE_BACKLOG: usize = 256;
/// Frames waiting beyond which the client is considered gone.
pub const MAX_BACKLOG: usize = 8_192;

#[derive(Default)]
pub struct Outbox {
    state: Mutex<State>,
    ready: Notify,
}

#[derive(Default)]
struct State {
    frames: VecDeque<Frame>,
    /// Sequence number of the last event frame.
    seq: u64,
    dropped: u64,
    closed: bool,
    /// The close code and reason the writer ends the socket with, if not a plain close.
    close_frame: Option<(u16, String)>,
}

struct Frame {
    text: String,
    /// The run whose delta this is, so a newer one can take its place.
    delta_of: Option<String>,
}

/// How a frame may be treated when the client is slow.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Delivery {
    /// Responses, finals, notices: always delivered.
    Reliable,
    /// A `chat` delta of this run: a newer one replaces it while it waits.
    DeltaOf(String),
    /// Raw agent events: dropped when the backlog is long.
    Droppable,
}

impl Outbox {
    /// Queues a response frame.
    pub fn push_response(&self, text: String) {
        let mut state = self.lock();
        self.enqueue(&mut state, Frame { text, delta_of: None });
    }

    /// Queues an event, numbering it. `payload` is already JSON.
    pub fn push_event(&self, event: &str, payload: &str, delivery: Delivery) {
        let mut state = self.lock();
        if state.closed {
            return;
        }
        match &delivery {
            Delivery::Droppable if state.frames.len() >= DROPPABLE_BACKLOG => {
                state.dropped += 1;
                return;
            }
            Delivery::DeltaOf(run_id) => {
                let waiting = state.frames.iter_mut().find(|frame| frame.delta_of.as_deref() == Some(run_id.as_str()));
                if let Some(frame) = waiting {
                    // Same place in the order, same number, newer text.
                    let seq = seq_of(&frame.text);
                    frame.text = event_frame(event, payload, seq);
                    return;
                }
            }
            _ => {}
        }
        state.seq += 1;
        let text = event_frame(event, payload, state.seq);
        let delta_of = match delivery {
            Delivery::DeltaOf(run_id) => Some(run_id),
            _ => None,
        };
        self.enqueue(&mut state, Frame { text, delta_of });
    }

    /// The next frame to write; `None` once the outbox is closed and empty.
    pub async fn next(&self) -> Option<String> {
        loop {
            let notified = self.ready.notified();
            {
                let mut state = self.lock();
                if let Some(frame) = state.frames.pop_front() {
                    return Some(frame.text);
                }
                if state.closed {
                    return None;
                }
            }
            notified.await;
        }
    }

    /// No more frames are taken; the writer finishes what is queued.
    pub fn close(&self) {
        self.lock().closed = true;
        self.ready.notify_waiters();
    }

    /// Like [`Outbox::close`], and the socket is closed with `code` and `reason` (RFC 6455
    /// §7.4), so the client learns why.
    pub fn close_with(&self, code: u16, reason: impl Into<String>) {
        let mut state = self.lock();
        state.close_frame.get_or_insert_with(|| (code, reason.into()));
        state.closed = true;
        drop(state);
        self.ready.notify_waiters();
    }

    /// The code and reason given to [`Outbox::close_with`], if any.
    pub fn close_frame(&self) -> Option<(u16, String)> {
        self.lock().close_frame.clone()
    }

    pub fn is_closed(&self) -> bool {
        self.lock().closed
    }

    /// Droppable frames dropped so far.
    pub fn dropped(&self) -> u64 {
        self.lock().dropped
    }

    fn enqueue(&self, state: &mut State, frame: Frame) {
        if state.closed {
            return;
        }
        if state.frames.len() >= MAX_BACKLOG {
            tracing::warn!(backlog = state.frames.len(), "a gateway client stopped reading; disconnecting it");
            state.closed = true;
            state.frames.clear();
            self.ready.notify_waiters();
            return;
        }
        state.frames.push_back(frame);
        self.ready.notify_one();
    }

    fn lock(&self) -> MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

fn event_frame(event: &str, payload: &str, seq: u64) -> String {
    format!(r#"{{"type":"event","event":"{event}","payload":{payload},"seq":{seq}}}"#)
}

/// The `seq` of a frame made by [`event_frame`].
fn seq_of(frame: &str) -> u64 {
    frame.rsplit_once(r#","seq":"#).and_then(|(_, rest)| rest.trim_end_matches('}').parse().ok()).unwrap_or_default()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn drain(outbox: &Outbox) -> Vec<serde_json::Value> {
        let mut frames = Vec::new();
        let mut state = outbox.lock();
        while let Some(frame) = state.frames.pop_front() {
            frames.push(serde_json::from_str(&frame.text).unwrap());
        }
        frames
    }

    #[test]
    fn a_waiting_delta_is_replaced_by_the_newer_one_in_place() {
        let outbox = Outbox::default();
        outbox.push_event("chat", r#"{"text":"He"}"#, Delivery::DeltaOf("r1".into()));
        outbox.push_event("chat", r#"{"text":"x"}"#, Delivery::DeltaOf("r2".into()));
        outbox.push_event("chat", r#"{"text":"Hello"}"#, Delivery::DeltaOf("r1".into()));
        outbox.push_event("chat", r#"{"text":"Hello!","final":true}"#, Delivery::Reliable);
        let frames = drain(&outbox);
        assert_eq!(frames.len(), 3);
        assert_eq!((frames[0]["payload"]["text"].as_str(), frames[0]["seq"].as_u64()), (Some("Hello"), Some(1)));
        assert_eq!(frames[1]["seq"], 2);
        assert_eq!((frames[2]["payload"]["final"].as_bool(), frames[2]["seq"].as_u64()), (Some(true), Some(3)));
    }

    #[test]
    fn a_slow_client_loses_raw_events_but_never_finals() {
        let outbox = Outbox::default();
        for _ in 0..DROPPABLE_BACKLOG + 10 {
            outbox.push_event("agent", "{}", Delivery::Droppable);
        }
        outbox.push_event("chat", r#"{"state":"final"}"#, Delivery::Reliable);
        assert_eq!(outbox.dropped(), 10);
        let frames = drain(&outbox);
        assert_eq!(frames.len(), DROPPABLE_BACKLOG + 1);
        assert_eq!(frames.last().unwrap()["payload"]["state"], "final");
    }

    #[test]
    fn a_client_that_never_reads_is_cut_off() {
        let outbox = Outbox::default();
        for _ in 0..=MAX_BACKLOG {
            outbox.push_response("{}".into());
        }
        assert!(outbox.is_closed());
    }

    #[tokio::test]
    async fn the_writer_gets_frames_in_order_then_none_after_close() {
        let outbox = std::sync::Arc::new(Outbox::default());
        let writer = {
            let outbox = outbox.clone();
            tokio::spawn(async move {
                let mut got = Vec::new();
                while let Some(frame) = outbox.next().await {
                    got.push(frame);
                }
                got
            })
        };
        outbox.push_response("1".into());
        outbox.push_response("2".into());
        tokio::task::yield_now().await;
        outbox.close();
        assert_eq!(writer.await.unwrap(), ["1", "2"]);
    }
}
