//! The acknowledgement that ties a platform's delivery guarantee to the core's storage.
//!
//! Platforms redeliver what was not confirmed (Telegram re-serves updates below the offset,
//! Slack retries unacknowledged events). An adapter therefore confirms a message to its
//! platform only after the core says it has durably recorded (or deliberately discarded)
//! it. If the core drops the [`Ack`] without accepting — it crashed mid-way, or shut down —
//! the adapter must not confirm, and the platform delivers the message again.

use tokio::sync::oneshot;

/// The core's side: accept once the message is recorded or deliberately discarded.
#[derive(Debug)]
#[must_use = "an Ack that is dropped unaccepted makes the platform redeliver the message"]
pub struct Ack {
    tx: Option<oneshot::Sender<()>>,
}

/// What became of an inbound message, as the adapter learns it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum AckOutcome {
    /// The core holds the message (or chose to ignore it): confirm it to the platform.
    Accepted,
    /// The core let go of the message without recording it: do not confirm it, so the
    /// platform redelivers.
    Abandoned,
}

/// The adapter's side: resolves once the core has decided.
#[derive(Debug)]
pub struct AckReceiver {
    rx: oneshot::Receiver<()>,
}

impl Ack {
    /// A linked pair: the [`Ack`] travels with the message to the core, the
    /// [`AckReceiver`] stays with the adapter.
    pub fn pair() -> (Ack, AckReceiver) {
        let (tx, rx) = oneshot::channel();
        (Ack { tx: Some(tx) }, AckReceiver { rx })
    }

    /// An acknowledgement nobody waits for, for sources with no redelivery (the web chat).
    pub fn detached() -> Ack {
        Ack { tx: None }
    }

    /// The message is durably recorded, or deliberately ignored: the adapter may confirm it.
    pub fn accept(mut self) {
        if let Some(tx) = self.tx.take() {
            // The adapter may have stopped waiting (shutdown); nothing is owed to it then.
            let _ = tx.send(());
        }
    }
}

impl AckReceiver {
    /// Waits for the core's decision.
    pub async fn outcome(self) -> AckOutcome {
        match self.rx.await {
            Ok(()) => AckOutcome::Accepted,
            Err(_) => AckOutcome::Abandoned,
        }
    }

    /// The decision if it was already made, without waiting.
    pub fn try_outcome(&mut self) -> Option<AckOutcome> {
        match self.rx.try_recv() {
            Ok(()) => Some(AckOutcome::Accepted),
            Err(oneshot::error::TryRecvError::Closed) => Some(AckOutcome::Abandoned),
            Err(oneshot::error::TryRecvError::Empty) => None,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn accepted_ack_reports_accepted() {
        let (ack, rx) = Ack::pair();
        ack.accept();
        assert_eq!(rx.outcome().await, AckOutcome::Accepted);
    }

    #[tokio::test]
    async fn dropped_ack_reports_abandoned_so_the_platform_redelivers() {
        let (ack, rx) = Ack::pair();
        drop(ack);
        assert_eq!(rx.outcome().await, AckOutcome::Abandoned);
    }

    #[test]
    fn undecided_ack_is_pending() {
        let (ack, mut rx) = Ack::pair();
        assert_eq!(rx.try_outcome(), None);
        ack.accept();
        assert_eq!(rx.try_outcome(), Some(AckOutcome::Accepted));
    }
}
