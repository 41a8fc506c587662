//! Group commit for PostgreSQL: the writes that many tasks make at once are handed to one
//! flush, which runs them as a few set-based statements in one transaction.
//!
//! The first write into an empty queue spawns the flush; the flush yields once (so every
//! task that is ready this round can queue its write), takes up to [`MAX_BATCH`] writes,
//! commits them, answers their callers, and repeats until the queue is empty. A batch that
//! fails fails for each of its writes: nothing of it was committed.

use std::sync::{Arc, Mutex, MutexGuard, PoisonError};

use futures::future::BoxFuture;
use tokio::sync::oneshot;

use crate::state::StorageError;

/// Writes committed in one transaction at most; the rest go in the next.
pub(super) const MAX_BATCH: usize = 1024;

/// Commits a batch: one answer per write, in order.
pub(super) type Flush<Op, Out> =
    Arc<dyn Fn(Vec<Op>) -> BoxFuture<'static, Result<Vec<Out>, StorageError>> + Send + Sync>;

/// A queue of writes of type `Op`, each answered with an `Out`.
pub(super) struct GroupCommit<Op, Out> {
    queue: Mutex<Queue<Op, Out>>,
    flush: Flush<Op, Out>,
}

struct Queue<Op, Out> {
    waiting: Vec<(Op, oneshot::Sender<Result<Out, StorageError>>)>,
    flushing: bool,
}

impl<Op: Send + 'static, Out: Send + 'static> GroupCommit<Op, Out> {
    pub(super) fn new(flush: Flush<Op, Out>) -> Arc<Self> {
        Arc::new(Self { queue: Mutex::new(Queue { waiting: Vec::new(), flushing: false }), flush })
    }

    /// Queues `op` and waits for the commit of the batch that holds it.
    pub(super) async fn submit(self: &Arc<Self>, op: Op) -> Result<Out, StorageError> {
        let (reply, answer) = oneshot::channel();
        let spawn_flush = {
            let mut queue = self.lock();
            queue.waiting.push((op, reply));
            !std::mem::replace(&mut queue.flushing, true)
        };
        if spawn_flush {
            tokio::spawn(self.clone().drain());
        }
        answer.await.unwrap_or_else(|_| Err(abandoned()))
    }

    async fn drain(self: Arc<Self>) {
        tokio::task::yield_now().await;
        loop {
            let batch = {
                let mut queue = self.lock();
                if queue.waiting.is_empty() {
                    queue.flushing = false;
                    return;
                }
                let take = queue.waiting.len().min(MAX_BATCH);
                queue.waiting.drain(..take).collect::<Vec<_>>()
            };
            let (ops, replies): (Vec<Op>, Vec<_>) = batch.into_iter().unzip();
            let count = ops.len();
            match (self.flush)(ops).await {
                Ok(outs) if outs.len() == count => {
                    for (reply, out) in replies.into_iter().zip(outs) {
                        let _ = reply.send(Ok(out));
                    }
                }
                Ok(outs) => {
                    tracing::error!(
                        writes = count,
                        answers = outs.len(),
                        "a PostgreSQL batch answered the wrong count"
                    );
                    for reply in replies {
                        let _ = reply.send(Err(StorageError::new(
                            crate::state::StorageErrorKind::Failed,
                            super::BACKEND,
                            "a batch answered the wrong number of writes",
                        )));
                    }
                }
                Err(error) => {
                    for reply in replies {
                        let _ = reply.send(Err(error.duplicate()));
                    }
                }
            }
        }
    }

    fn lock(&self) -> MutexGuard<'_, Queue<Op, Out>> {
        self.queue.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

fn abandoned() -> StorageError {
    StorageError::new(
        crate::state::StorageErrorKind::Unavailable,
        super::BACKEND,
        "the write was abandoned (the process is shutting down)",
    )
}
