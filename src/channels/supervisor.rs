//! Starting a channel until it runs, and again whenever it stops: a platform that is
//! unreachable when the gateway starts (the network is not up yet, the API has an outage), or
//! a channel whose inbound ends later (a poller task that ended, a socket closed for good, a
//! panic), must not leave the channel dead until someone restarts ferry. The supervisor
//! retries with exponential backoff, from [`Backoff::first`] up to [`Backoff::max`], and keeps
//! the channel's state in the registry, where `/healthz` shows it. Only a failure retrying
//! cannot fix (the platform refused the token, the config cannot work) stops it, with the
//! reason on record: a channel that stopped is started as at start-up, so a revoked token is
//! found out by the reconnect.
//!
//! It logs once per outage (the first failure, with its error) and once on recovery; the
//! attempts in between are debug lines, so an outage of hours does not flood the log.
//!
//! The first attempt is awaited, as a plain start-up would be: messages a previous process
//! left unanswered are restored only after it, so their replies find their channel.

use std::future::Future;
use std::time::Duration;

use futures::FutureExt;
use futures::future::BoxFuture;
use rand::Rng;
use tokio::task::JoinHandle;

use super::{ChannelHealth, ChannelRegistry};

/// Why a channel did not start.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum StartFailure {
    /// Retrying cannot help: the platform refused the credentials (401), or the settings
    /// cannot work. The operator must fix the config.
    #[error("{0}")]
    Permanent(String),
    /// It may pass: the platform was unreachable or answered with a server error.
    #[error("{0}")]
    Transient(String),
}

/// How long to wait between attempts: doubling from `first`, never more than `max`, with
/// up to a tenth added at random so several channels do not retry in lockstep.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Backoff {
    pub first: Duration,
    pub max: Duration,
}

impl Default for Backoff {
    fn default() -> Self {
        Self { first: Duration::from_secs(1), max: Duration::from_secs(300) }
    }
}

/// A channel that runs ran this long before stopping counts as healthy: its next restart
/// starts the backoff over. One that stops sooner backs off further each time, so a channel
/// that starts and stops at once is not restarted in a tight loop.
pub const HEALTHY_FOR: Duration = Duration::from_secs(60);

/// A started channel: resolves, with the reason, when it stops delivering messages.
pub struct Running(BoxFuture<'static, String>);

impl Running {
    /// Runs until `inbound`, the task feeding the channel's messages to the core, ends.
    pub fn until(inbound: JoinHandle<()>) -> Self {
        Self(
            inbound
                .map(|ended| match ended {
                    Ok(()) => "its inbound connection ended".to_owned(),
                    Err(error) if error.is_panic() => "its inbound task panicked".to_owned(),
                    Err(_) => "its inbound task was cancelled".to_owned(),
                })
                .boxed(),
        )
    }

    /// Runs until `ended` resolves with the reason.
    pub fn until_ended(ended: impl Future<Output = String> + Send + 'static) -> Self {
        Self(ended.boxed())
    }
}

impl Backoff {
    /// The wait after the `attempts`-th failed attempt (1 = the first), before jitter.
    pub fn delay(&self, attempts: u32) -> Duration {
        let doublings = attempts.saturating_sub(1).min(31);
        self.first.saturating_mul(1 << doublings).min(self.max)
    }
}

/// Runs `connect` until it succeeds or fails for good, recording the channel `name` on
/// `account_id` as starting, retrying or stopped in `registry` (a successful `connect`
/// registers the channel, which makes it running), and starts it again the same way each time
/// it stops running. Returns once the first attempt is over, so a channel that can start has
/// started (and messages left from before a restart find it there); the watching and the
/// retries go on in the returned task, `None` when the first attempt failed for good.
pub async fn supervise<F, Fut>(
    registry: ChannelRegistry,
    name: &str,
    account_id: &str,
    backoff: Backoff,
    mut connect: F,
) -> Option<JoinHandle<()>>
where
    F: FnMut() -> Fut + Send + 'static,
    Fut: Future<Output = Result<Running, StartFailure>> + Send,
{
    let channel = Supervised { registry, name: name.to_owned(), account_id: account_id.to_owned() };
    channel.set(ChannelHealth::Starting);
    // Attempts since the channel last ran healthily.
    let mut attempts = 0u32;
    let mut next = match channel.attempt(connect(), &mut attempts, &backoff).await {
        Attempt::Stopped => return None,
        attempt => attempt,
    };
    Some(tokio::spawn(async move {
        let mut outage_began = tokio::time::Instant::now();
        loop {
            let delay = match next {
                Attempt::Started(running) => {
                    if attempts > 0 {
                        let down_for_s = outage_began.elapsed().as_secs();
                        let name = &channel.name;
                        tracing::info!(channel = %name, account = %channel.account_id, attempts, down_for_s, "the {name} channel is running again");
                    }
                    let started = tokio::time::Instant::now();
                    let why = running.0.await;
                    if started.elapsed() >= HEALTHY_FOR {
                        attempts = 0;
                    }
                    outage_began = tokio::time::Instant::now();
                    let name = &channel.name;
                    tracing::warn!(channel = %name, account = %channel.account_id, "the {name} channel stopped: {why}; starting it again");
                    attempts = attempts.saturating_add(1);
                    channel.retrying(why, attempts, &backoff)
                }
                Attempt::RetryIn(delay) => delay,
                Attempt::Stopped => return,
            };
            tokio::time::sleep(delay).await;
            next = channel.attempt(connect(), &mut attempts, &backoff).await;
        }
    }))
}

/// What one start attempt came to, already recorded in the registry.
enum Attempt {
    /// The channel started and runs.
    Started(Running),
    /// It failed in a way that may pass: the next attempt is due after this long.
    RetryIn(Duration),
    /// It failed for good (see [`StartFailure::Permanent`]).
    Stopped,
}

/// A channel under supervision, as the registry knows it.
struct Supervised {
    registry: ChannelRegistry,
    name: String,
    account_id: String,
}

impl Supervised {
    fn set(&self, health: ChannelHealth) {
        self.registry.set_health(&self.name, &self.account_id, health);
    }

    /// Awaits one start attempt and records what came of it. `attempts` counts the failures
    /// since the channel last ran healthily; a transient failure adds one. The first failure
    /// of an outage is a warning, the ones after it debug lines.
    async fn attempt(
        &self,
        connect: impl Future<Output = Result<Running, StartFailure>>,
        attempts: &mut u32,
        backoff: &Backoff,
    ) -> Attempt {
        match connect.await {
            Ok(running) => {
                self.set(ChannelHealth::Running);
                Attempt::Started(running)
            }
            Err(StartFailure::Permanent(reason)) => {
                self.stop(reason);
                Attempt::Stopped
            }
            Err(StartFailure::Transient(reason)) => {
                let (name, account) = (&self.name, &self.account_id);
                if *attempts == 0 {
                    tracing::warn!(channel = %name, %account, "the {name} channel did not start: {reason}; retrying with backoff (up to every {} s) until it does", backoff.max.as_secs());
                } else {
                    tracing::debug!(channel = %name, %account, attempts = *attempts, "the {name} channel still cannot start: {reason}");
                }
                *attempts = attempts.saturating_add(1);
                Attempt::RetryIn(self.retrying(reason, *attempts, backoff))
            }
        }
    }

    fn stop(&self, reason: String) {
        let name = &self.name;
        tracing::error!(channel = %name, account = %self.account_id, "the {name} channel did not start and will not retry: {reason}");
        self.set(ChannelHealth::Stopped { reason });
    }

    /// Records the failed attempt and returns how long to wait before the next.
    fn retrying(&self, last_error: String, attempts: u32, backoff: &Backoff) -> Duration {
        let delay = backoff.delay(attempts);
        let delay = delay + delay.mul_f64(rand::rng().random_range(0.0..0.1));
        let next_attempt_in_ms = delay.as_millis() as u64;
        self.set(ChannelHealth::Retrying { last_error, attempts, next_attempt_in_ms });
        delay
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;
    use std::sync::atomic::{AtomicU32, Ordering};

    use super::*;

    fn health(registry: &ChannelRegistry) -> ChannelHealth {
        registry.states().into_iter().next().expect("the channel is listed").health
    }

    #[test]
    fn the_backoff_doubles_from_one_second_to_five_minutes() {
        let backoff = Backoff::default();
        let delays: Vec<u64> = (1..=11).map(|attempt| backoff.delay(attempt).as_secs()).collect();
        assert_eq!(delays, [1, 2, 4, 8, 16, 32, 64, 128, 256, 300, 300]);
        assert_eq!(backoff.delay(u32::MAX), Duration::from_secs(300), "no overflow after a long outage");
    }

    #[tokio::test(start_paused = true)]
    async fn a_channel_that_cannot_reach_its_platform_retries_until_it_runs() {
        let registry = ChannelRegistry::new();
        let calls = Arc::new(AtomicU32::new(0));
        let counted = calls.clone();
        let task =
            supervise(registry.clone(), "telegram", "default", Backoff::default(), move || {
                let call = counted.fetch_add(1, Ordering::SeqCst) + 1;
                async move {
                    if call < 4 { Err(StartFailure::Transient(format!("refused #{call}"))) } else { Ok(forever()) }
                }
            })
            .await
            .expect("retries go on in a task");
        match health(&registry) {
            ChannelHealth::Retrying { last_error, attempts: 1, next_attempt_in_ms } => {
                assert_eq!(last_error, "refused #1");
                assert!((1000..1100).contains(&next_attempt_in_ms), "{next_attempt_in_ms}");
            }
            other => panic!("retrying expected, got {other:?}"),
        }
        // 1 s, 2 s and 4 s of backoff (plus at most a tenth) and it connects.
        tokio::time::sleep(Duration::from_millis(7800)).await;
        assert_eq!(calls.load(Ordering::SeqCst), 4);
        assert_eq!(health(&registry), ChannelHealth::Running);
        assert!(!task.is_finished(), "the supervisor watches the running channel");
        task.abort();
    }

    fn forever() -> Running {
        Running::until_ended(std::future::pending())
    }

    #[tokio::test(start_paused = true)]
    async fn a_channel_that_stops_after_running_is_started_again_with_backoff() {
        let registry = ChannelRegistry::new();
        let calls = Arc::new(AtomicU32::new(0));
        let counted = calls.clone();
        // The first two runs end by themselves: one after 5 s, one at once.
        let task = supervise(registry.clone(), "discord", "default", Backoff::default(), move || {
            let call = counted.fetch_add(1, Ordering::SeqCst) + 1;
            async move {
                Ok(match call {
                    1 => Running::until_ended(async {
                        tokio::time::sleep(Duration::from_secs(5)).await;
                        "the socket closed for good".to_owned()
                    }),
                    2 => Running::until(tokio::spawn(async {})),
                    _ => forever(),
                })
            }
        })
        .await
        .expect("the supervisor watches the channel");
        assert_eq!(health(&registry), ChannelHealth::Running);
        tokio::time::sleep(Duration::from_millis(5010)).await;
        match health(&registry) {
            ChannelHealth::Retrying { last_error, attempts: 1, .. } => {
                assert_eq!(last_error, "the socket closed for good")
            }
            other => panic!("retrying expected, got {other:?}"),
        }
        // 1 s later it runs again and stops at once; having run for less than a minute, the
        // next wait is 2 s.
        tokio::time::sleep(Duration::from_millis(1200)).await;
        match health(&registry) {
            ChannelHealth::Retrying { last_error, attempts: 2, next_attempt_in_ms } => {
                assert_eq!(last_error, "its inbound connection ended");
                assert!((2000..2200).contains(&next_attempt_in_ms), "{next_attempt_in_ms}");
            }
            other => panic!("retrying expected, got {other:?}"),
        }
        tokio::time::sleep(Duration::from_millis(2300)).await;
        assert_eq!((calls.load(Ordering::SeqCst), health(&registry)), (3, ChannelHealth::Running));
        task.abort();
    }

    #[tokio::test(start_paused = true)]
    async fn a_channel_that_stops_and_then_has_its_token_refused_stays_stopped() {
        let registry = ChannelRegistry::new();
        let calls = Arc::new(AtomicU32::new(0));
        let counted = calls.clone();
        let task = supervise(registry.clone(), "telegram", "default", Backoff::default(), move || {
            let call = counted.fetch_add(1, Ordering::SeqCst) + 1;
            async move {
                match call {
                    1 => Ok(Running::until(tokio::spawn(async { panic!("a poller bug") }))),
                    _ => Err(StartFailure::Permanent("Telegram refused the bot token".to_owned())),
                }
            }
        })
        .await
        .expect("the supervisor watches the channel");
        tokio::time::sleep(Duration::from_secs(600)).await;
        assert!(task.is_finished(), "nothing more to do");
        assert_eq!(calls.load(Ordering::SeqCst), 2);
        assert_eq!(health(&registry), ChannelHealth::Stopped { reason: "Telegram refused the bot token".to_owned() });
    }

    #[tokio::test(start_paused = true)]
    async fn a_refused_token_stops_the_channel_with_its_reason_and_no_retry() {
        let registry = ChannelRegistry::new();
        let calls = Arc::new(AtomicU32::new(0));
        let counted = calls.clone();
        let task = supervise(registry.clone(), "discord", "default", Backoff::default(), move || {
            counted.fetch_add(1, Ordering::SeqCst);
            async { Err(StartFailure::Permanent("Discord refused the bot token".to_owned())) }
        })
        .await;
        assert!(task.is_none(), "nothing to retry");
        tokio::time::sleep(Duration::from_secs(600)).await;
        assert_eq!(calls.load(Ordering::SeqCst), 1);
        assert_eq!(health(&registry), ChannelHealth::Stopped { reason: "Discord refused the bot token".to_owned() });
    }

    #[tokio::test(start_paused = true)]
    async fn a_channel_is_starting_until_its_first_attempt_ends() {
        let registry = ChannelRegistry::new();
        let (release, released) = tokio::sync::oneshot::channel::<()>();
        let mut released = Some(released);
        let first_attempt =
            tokio::spawn(supervise(registry.clone(), "slack", "default", Backoff::default(), move || {
                let released = released.take();
                async move {
                    if let Some(released) = released {
                        let _ = released.await;
                    }
                    Ok(forever())
                }
            }));
        tokio::task::yield_now().await;
        assert_eq!(health(&registry), ChannelHealth::Starting);
        release.send(()).unwrap();
        let watching = first_attempt.await.unwrap().expect("it returns once the first attempt connected");
        assert_eq!(health(&registry), ChannelHealth::Running);
        watching.abort();
    }
}
