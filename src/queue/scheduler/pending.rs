//! A session's waiting messages, counted in `ferry_queue_depth`.

use std::collections::VecDeque;
use std::collections::vec_deque::Drain;
use std::ops::Deref;

use prometheus_client::metrics::gauge::Gauge;

use crate::queue::QueuedMessage;

/// The messages waiting for a session's next run, oldest first.
///
/// Every change goes through here and moves `depth` by as much, and a queue dropped with
/// messages in it takes them off: `depth` is always the sum over every session's queue,
/// without anyone counting. Reading goes through [`Deref`] to the queue.
pub(super) struct Pending {
    items: VecDeque<QueuedMessage>,
    depth: Gauge,
}

impl Pending {
    pub(super) fn new(depth: Gauge) -> Self {
        Self { items: VecDeque::new(), depth }
    }

    pub(super) fn push_back(&mut self, message: QueuedMessage) {
        self.items.push_back(message);
        self.depth.inc();
    }

    pub(super) fn push_front(&mut self, message: QueuedMessage) {
        self.items.push_front(message);
        self.depth.inc();
    }

    pub(super) fn pop_front(&mut self) -> Option<QueuedMessage> {
        let message = self.items.pop_front()?;
        self.depth.dec();
        Some(message)
    }

    /// Takes the `count` oldest messages (all of them, if fewer wait).
    pub(super) fn drain_front(&mut self, count: usize) -> Drain<'_, QueuedMessage> {
        let count = count.min(self.items.len());
        self.depth.dec_by(count as i64);
        self.items.drain(..count)
    }

    pub(super) fn drain_all(&mut self) -> Drain<'_, QueuedMessage> {
        self.drain_front(self.items.len())
    }

    /// Takes the oldest message `keep` holds for, if any.
    pub(super) fn remove_first(&mut self, keep: impl Fn(&QueuedMessage) -> bool) -> Option<QueuedMessage> {
        let index = self.items.iter().position(keep)?;
        let message = self.items.remove(index)?;
        self.depth.dec();
        Some(message)
    }

    /// Takes every message `take` holds for, oldest first; the others keep their order.
    pub(super) fn take_all(&mut self, take: impl Fn(&QueuedMessage) -> bool) -> Vec<QueuedMessage> {
        let (taken, kept): (VecDeque<_>, VecDeque<_>) = self.items.drain(..).partition(|message| take(message));
        self.items = kept;
        self.depth.dec_by(taken.len() as i64);
        taken.into()
    }
}

impl Deref for Pending {
    type Target = VecDeque<QueuedMessage>;

    fn deref(&self) -> &Self::Target {
        &self.items
    }
}

impl Drop for Pending {
    fn drop(&mut self) {
        self.depth.dec_by(self.items.len() as i64);
    }
}
