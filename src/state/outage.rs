//! Riding out a passing store outage (a PostgreSQL restart, a replica's connection cut).
//!
//! The writes exactly-once rests on (admitting a message, opening its run, recording a
//! reply's finals and completion, marking messages answered) are retried while the store is
//! unreachable, for up to [`OUTAGE_PATIENCE`], instead of being given up at the first
//! failure: given up, a message would be refused (and, on a platform that does not deliver
//! it again, lost) or a reply would stay unrecorded and be sent again by whoever runs its
//! messages next. A write refused for any other reason (fenced by a lease, a constraint) is
//! not retried.

use std::future::Future;
use std::time::Duration;

use tokio_util::sync::CancellationToken;

/// How long a write waits for an unreachable store before it is given up.
pub const OUTAGE_PATIENCE: Duration = Duration::from_secs(60);
/// The first pause before trying again; doubled each time up to [`RETRY_MAX`].
const RETRY_FIRST: Duration = Duration::from_millis(250);
const RETRY_MAX: Duration = Duration::from_secs(4);

/// Runs `attempt` until it succeeds, fails for a reason `unavailable` does not accept, or
/// [`OUTAGE_PATIENCE`] has passed (or `cancel` fires); returns its last result. Each retry is
/// logged at `warn` with `what` names the write.
pub async fn through_outages<T, E, F, Fut>(
    what: &str,
    cancel: Option<&CancellationToken>,
    unavailable: impl Fn(&E) -> bool,
    mut attempt: F,
) -> Result<T, E>
where
    E: std::fmt::Display,
    F: FnMut() -> Fut,
    Fut: Future<Output = Result<T, E>>,
{
    let started = tokio::time::Instant::now();
    let mut pause = RETRY_FIRST;
    loop {
        match attempt().await {
            Err(error) if unavailable(&error) && started.elapsed() + pause < OUTAGE_PATIENCE => {
                tracing::warn!(%error, retry_in_ms = pause.as_millis() as u64, "the state store is unreachable; {what} waits for it");
                let cancelled = async {
                    match cancel {
                        Some(cancel) => cancel.cancelled().await,
                        None => std::future::pending().await,
                    }
                };
                tokio::select! {
                    () = tokio::time::sleep(pause) => {}
                    () = cancelled => return Err(error),
                }
                pause = (pause * 2).min(RETRY_MAX);
            }
            result => return result,
        }
    }
}

#[cfg(test)]
mod tests {
    use std::sync::atomic::{AtomicU32, Ordering};

    use super::*;

    #[derive(Debug, PartialEq)]
    enum Failure {
        Unreachable,
        Refused,
    }

    impl std::fmt::Display for Failure {
        fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
            write!(f, "{self:?}")
        }
    }

    #[tokio::test(start_paused = true)]
    async fn an_unreachable_store_is_tried_again_until_it_answers() {
        let calls = AtomicU32::new(0);
        let result = through_outages(
            "a test write",
            None,
            |e| *e == Failure::Unreachable,
            || async { if calls.fetch_add(1, Ordering::SeqCst) < 3 { Err(Failure::Unreachable) } else { Ok(7) } },
        )
        .await;
        assert_eq!(result, Ok(7));
        assert_eq!(calls.load(Ordering::SeqCst), 4);
    }

    #[tokio::test(start_paused = true)]
    async fn any_other_failure_is_returned_at_once() {
        let calls = AtomicU32::new(0);
        let result: Result<(), Failure> = through_outages(
            "a test write",
            None,
            |e| *e == Failure::Unreachable,
            || {
                calls.fetch_add(1, Ordering::SeqCst);
                async { Err(Failure::Refused) }
            },
        )
        .await;
        assert_eq!(result, Err(Failure::Refused));
        assert_eq!(calls.load(Ordering::SeqCst), 1);
    }

    #[tokio::test(start_paused = true)]
    async fn an_outage_longer_than_the_patience_is_given_up() {
        let started = tokio::time::Instant::now();
        let result: Result<(), Failure> = through_outages(
            "a test write",
            None,
            |e| *e == Failure::Unreachable,
            || async { Err(Failure::Unreachable) },
        )
        .await;
        assert_eq!(result, Err(Failure::Unreachable));
        assert!(started.elapsed() <= OUTAGE_PATIENCE, "gave up within the patience: {:?}", started.elapsed());
        assert!(started.elapsed() >= OUTAGE_PATIENCE - RETRY_MAX, "waited most of it: {:?}", started.elapsed());
    }

    #[tokio::test(start_paused = true)]
    async fn a_cancelled_wait_gives_up_at_once() {
        let cancel = CancellationToken::new();
        cancel.cancel();
        let calls = AtomicU32::new(0);
        let result: Result<(), Failure> = through_outages(
            "a test write",
            Some(&cancel),
            |e| *e == Failure::Unreachable,
            || {
                calls.fetch_add(1, Ordering::SeqCst);
                async { Err(Failure::Unreachable) }
            },
        )
        .await;
        assert_eq!(result, Err(Failure::Unreachable));
        assert_eq!(calls.load(Ordering::SeqCst), 1);
    }
}
