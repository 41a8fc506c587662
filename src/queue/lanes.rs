//! The global lane: at most `max_concurrent` runs at once across all sessions, first come
//! first served. (The per-session lane — one run at a time per session — is the
//! scheduler's: a session has at most one active run.)

use std::sync::Arc;
use std::time::{Duration, Instant};

use tokio::sync::{OwnedSemaphorePermit, Semaphore};

use crate::metrics::{LaneKind, metrics};

/// A wait longer than this in a lane is logged (SPEC §5).
pub const SLOW_LANE_WAIT: Duration = Duration::from_secs(2);

#[derive(Clone)]
pub struct GlobalLane {
    permits: Arc<Semaphore>,
}

impl GlobalLane {
    pub fn new(max_concurrent: usize) -> Self {
        Self { permits: Arc::new(Semaphore::new(max_concurrent.max(1))) }
    }

    /// Waits for a slot (FIFO: tokio's semaphore is fair). The slot is held until the
    /// permit drops. The wait is `ferry_lane_wait_seconds{lane="global"}`.
    pub async fn enter(&self, session_key: &str) -> OwnedSemaphorePermit {
        let started = Instant::now();
        let permit = self.permits.clone().acquire_owned().await.expect("the global lane's semaphore is never closed");
        let waited = started.elapsed();
        metrics().lane_waited(LaneKind::Global, waited);
        if waited > SLOW_LANE_WAIT {
            tracing::warn!(session_key, waited_ms = waited.as_millis() as u64, "a run waited long for the global lane");
        }
        permit
    }

    /// Slots free right now.
    pub fn available(&self) -> usize {
        self.permits.available_permits()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn at_most_max_concurrent_permits_are_out() {
        let lane = GlobalLane::new(2);
        let a = lane.enter("a").await;
        let _b = lane.enter("b").await;
        assert_eq!(lane.available(), 0);
        let waiting = tokio::spawn({
            let lane = lane.clone();
            async move { lane.enter("c").await }
        });
        tokio::task::yield_now().await;
        assert!(!waiting.is_finished());
        drop(a);
        let _c = waiting.await.unwrap();
        assert_eq!(lane.available(), 0);
    }

    #[tokio::test]
    async fn every_entry_records_its_wait() {
        // Other tests in this process enter global lanes too: at least ours are counted.
        let entries = || crate::metrics::sample(r#"ferry_lane_wait_seconds_count{lane="global"}"#);
        let before = entries();
        let lane = GlobalLane::new(1);
        drop(lane.enter("a").await);
        drop(lane.enter("b").await);
        assert!(entries() - before >= 2.0);
    }
}
