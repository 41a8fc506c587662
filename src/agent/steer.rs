//! Steering: user messages handed to a run that is already going (SPEC §5, `steer` mode).
//!
//! The run takes them at its next model or tool boundary. The inbox accepts messages only
//! while the run can still take them — from its first streamed model output until it ends —
//! so a sender learns at once when it must fall back to a follow-up run instead. Messages
//! that arrived after the run's last boundary are handed back when it closes, never lost.

use std::sync::{Arc, Mutex, MutexGuard};

#[derive(Debug, Default)]
struct Inbox {
    open: bool,
    closed: bool,
    /// The run is compacting its context: it cannot take a message now (SPEC §5).
    paused: bool,
    /// Waiting messages.
    messages: Vec<Steered>,
    /// Client run ids of the messages the run took.
    taken: Vec<String>,
    /// Journal ids of the messages the run took that its reply answers.
    taken_seqs: Vec<i64>,
}

#[derive(Debug)]
struct Steered {
    text: String,
    /// The gateway client's run id, when it has one.
    client_run_id: Option<String>,
    /// The message's journal id, when the run's reply answers it (`steer`, not
    /// `steer-backlog`, whose queued copy gets its own answer).
    seq: Option<i64>,
}

/// A run's steering inbox. Clones share it: the queue keeps one, the run the other.
#[derive(Debug, Clone, Default)]
pub struct SteerInbox {
    inner: Arc<Mutex<Inbox>>,
}

impl SteerInbox {
    /// A closed inbox that opens when its run starts streaming.
    pub fn new() -> Self {
        Self::default()
    }

    /// Offers a message to the run. Refused (the message comes back) when the run is not
    /// streaming yet or has finished.
    pub fn push(&self, message: String) -> Result<(), String> {
        self.push_for(message, None, None)
    }

    /// [`SteerInbox::push`] for a queued message: the run names `client_run_id` (a gateway
    /// client's) among those it answered once it takes the message, and its reply answers
    /// the journal entry `seq` ([`SteerInbox::taken_seqs`]).
    pub fn push_for(&self, message: String, client_run_id: Option<String>, seq: Option<i64>) -> Result<(), String> {
        let mut inbox = self.lock();
        if !inbox.open || inbox.closed || inbox.paused {
            return Err(message);
        }
        inbox.messages.push(Steered { text: message, client_run_id, seq });
        Ok(())
    }

    /// Whether a push would be accepted now.
    pub fn is_accepting(&self) -> bool {
        let inbox = self.lock();
        inbox.open && !inbox.closed && !inbox.paused
    }

    /// Refuses messages while the run compacts its context, or accepts them again.
    pub(crate) fn set_paused(&self, paused: bool) {
        self.lock().paused = paused;
    }

    /// The run is streaming: steering is possible from now on.
    pub(crate) fn open(&self) {
        let mut inbox = self.lock();
        if !inbox.closed {
            inbox.open = true;
        }
    }

    /// Takes the messages waiting now.
    pub(crate) fn drain(&self) -> Vec<String> {
        let mut inbox = self.lock();
        let messages = std::mem::take(&mut inbox.messages);
        let mut texts = Vec::with_capacity(messages.len());
        for Steered { text, client_run_id, seq } in messages {
            inbox.taken.extend(client_run_id);
            inbox.taken_seqs.extend(seq);
            texts.push(text);
        }
        texts
    }

    /// The run is ending: refuse further messages and return those it never took.
    pub(crate) fn close(&self) -> Vec<String> {
        let mut inbox = self.lock();
        inbox.closed = true;
        std::mem::take(&mut inbox.messages).into_iter().map(|steered| steered.text).collect()
    }

    /// Client run ids of the messages the run took.
    pub(crate) fn taken_run_ids(&self) -> Vec<String> {
        self.lock().taken.clone()
    }

    /// Journal ids of the messages the run took whose answer is its reply.
    pub fn taken_seqs(&self) -> Vec<i64> {
        self.lock().taken_seqs.clone()
    }

    fn lock(&self) -> MutexGuard<'_, Inbox> {
        self.inner.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn messages_are_refused_until_the_run_streams_and_after_it_ends() {
        let inbox = SteerInbox::new();
        assert_eq!(inbox.push("too early".into()), Err("too early".into()));
        inbox.open();
        assert!(inbox.is_accepting());
        inbox.push("one".into()).unwrap();
        assert_eq!(inbox.drain(), ["one"]);
        inbox.push("late".into()).unwrap();
        assert_eq!(inbox.close(), ["late"], "unconsumed messages come back");
        assert_eq!(inbox.push("after".into()), Err("after".into()));
        inbox.open();
        assert!(!inbox.is_accepting(), "a closed inbox never reopens");
    }

    #[test]
    fn only_taken_messages_count_as_answered_by_the_run() {
        let inbox = SteerInbox::new();
        inbox.open();
        inbox.push_for("steered".into(), None, Some(7)).unwrap();
        inbox.push_for("backlog copy".into(), None, None).unwrap();
        assert_eq!(inbox.drain().len(), 2);
        inbox.push_for("too late".into(), None, Some(9)).unwrap();
        assert_eq!(inbox.close(), ["too late"]);
        assert_eq!(inbox.taken_seqs(), [7], "a message handed back is not the run's to answer");
    }

    #[test]
    fn messages_are_refused_while_the_run_compacts() {
        let inbox = SteerInbox::new();
        inbox.open();
        inbox.set_paused(true);
        assert_eq!(inbox.push("during".into()), Err("during".into()));
        inbox.set_paused(false);
        inbox.push("after".into()).unwrap();
    }
}
