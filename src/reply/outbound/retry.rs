//! When a failed platform call is tried again (SPEC §7, §11): a 429 after the platform's
//! `retry_after`, a timeout, 5xx or dropped connection after a backoff, anything else never.
//!
//! How long a call keeps trying depends on what it carries:
//! - a **final** (a reply's message, its edit into the preview, a preview's deletion) is
//!   what the user is owed, so it is tried again for as long as the reply's delivery
//!   deadline holds (`messages.delivery_deadline_seconds`, 10 minutes by default), with no
//!   cap on attempts: a 429 storm is waited out, never taken for "maybe delivered";
//! - a **preview** edit is superseded by the next one anyway: three attempts in all, and a
//!   platform asking for more than [`RetryPolicy::max_wait`] gets the error instead.

use std::time::Duration;

use ferry_channel::ChannelError;
use rand::Rng;

use super::Priority;

/// The default delivery deadline of a final (SPEC §11, issue 17): long enough to outlast
/// any rate-limit storm a platform imposes on a healthy bot, short enough that a reply
/// never lands hours after the question.
pub const DEFAULT_DELIVERY_DEADLINE: Duration = Duration::from_secs(600);

#[derive(Debug, Clone, Copy, PartialEq)]
pub struct RetryPolicy {
    /// Attempts in all for a preview edit, the first included.
    pub attempts: u32,
    /// No retry comes sooner than this, whatever the platform said.
    pub min_wait: Duration,
    /// The longest wait between two attempts of a preview edit, and the longest backoff
    /// (not `retry_after`) between two attempts of a final.
    pub max_wait: Duration,
    /// Up to this fraction is added to each wait, so many chats that hit a 429 together do
    /// not all come back in the same instant. Only added: never sooner than `retry_after`.
    pub jitter: f64,
    /// How long a final keeps being tried, from its first attempt.
    pub deadline: Duration,
}

impl Default for RetryPolicy {
    fn default() -> Self {
        Self {
            attempts: 3,
            min_wait: Duration::from_millis(400),
            max_wait: Duration::from_secs(30),
            jitter: 0.1,
            deadline: DEFAULT_DELIVERY_DEADLINE,
        }
    }
}

impl RetryPolicy {
    /// The default policy with another delivery deadline.
    pub fn with_deadline(deadline: Duration) -> Self {
        Self { deadline, ..Self::default() }
    }

    /// How long to wait before trying again after `attempt` (1 = the first) failed with
    /// `error`, `elapsed` after the first attempt started; `None` to give up.
    pub fn next_wait(
        &self,
        attempt: u32,
        error: &ChannelError,
        priority: Priority,
        elapsed: Duration,
    ) -> Option<Duration> {
        if !error.is_retryable() {
            return None;
        }
        let backoff = self.min_wait.saturating_mul(1 << (attempt.saturating_sub(1)).min(16)).min(self.max_wait);
        let wanted = error.retry_after().unwrap_or(backoff).max(self.min_wait);
        let wait = wanted.mul_f64(1.0 + rand::rng().random_range(0.0..=self.jitter.max(0.0)));
        match priority {
            Priority::Preview => (attempt < self.attempts && wanted <= self.max_wait).then(|| wait.min(self.max_wait)),
            // The jitter may not carry the retry past the deadline (the wait the platform
            // asked for still fits, or there is no retry).
            Priority::Final => (elapsed.saturating_add(wanted) <= self.deadline)
                .then(|| wait.min(self.deadline.saturating_sub(elapsed))),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn rate_limited(ms: u64) -> ChannelError {
        ChannelError::RateLimited { retry_after: Some(Duration::from_millis(ms)) }
    }

    #[test]
    fn a_429_waits_at_least_retry_after_and_at_most_ten_percent_more() {
        let policy = RetryPolicy::default();
        for priority in [Priority::Preview, Priority::Final] {
            for _ in 0..100 {
                let wait = policy.next_wait(1, &rate_limited(1200), priority, Duration::ZERO).unwrap();
                assert!(wait >= Duration::from_millis(1200) && wait <= Duration::from_millis(1320), "{wait:?}");
            }
            let short = policy.next_wait(1, &rate_limited(10), priority, Duration::ZERO).unwrap();
            assert!(short >= Duration::from_millis(400), "never sooner than the minimum: {short:?}");
        }
    }

    #[test]
    fn a_preview_edit_gets_three_attempts_and_gives_up_on_a_long_retry_after() {
        let policy = RetryPolicy::default();
        let transient = ChannelError::Transient { reason: "502".into() };
        assert!(
            policy.next_wait(1, &transient, Priority::Preview, Duration::ZERO).unwrap() >= Duration::from_millis(400)
        );
        assert!(
            policy.next_wait(2, &transient, Priority::Preview, Duration::ZERO).unwrap() >= Duration::from_millis(800)
        );
        assert_eq!(policy.next_wait(3, &transient, Priority::Preview, Duration::ZERO), None);
        assert_eq!(policy.next_wait(1, &rate_limited(31_000), Priority::Preview, Duration::ZERO), None);
    }

    #[test]
    fn a_final_is_retried_without_an_attempt_cap_until_its_deadline() {
        let policy = RetryPolicy::with_deadline(Duration::from_secs(60));
        let storm = rate_limited(2_000);
        assert!(policy.next_wait(50, &storm, Priority::Final, Duration::from_secs(30)).is_some(), "no attempt cap");
        assert!(
            policy.next_wait(1, &rate_limited(45_000), Priority::Final, Duration::ZERO).is_some(),
            "a retry_after longer than a preview would wait is still waited out"
        );
        assert_eq!(policy.next_wait(3, &storm, Priority::Final, Duration::from_secs(59)), None, "past the deadline");
        for _ in 0..50 {
            let last = policy.next_wait(3, &storm, Priority::Final, Duration::from_secs(58));
            assert_eq!(
                last,
                Some(Duration::from_secs(2)),
                "the jitter does not carry the last retry past the deadline"
            );
        }
        let backoff = policy
            .next_wait(20, &ChannelError::Transient { reason: "timeout".into() }, Priority::Final, Duration::ZERO)
            .unwrap();
        assert!(backoff <= Duration::from_secs(33), "the backoff is capped: {backoff:?}");
    }

    #[test]
    fn refusals_are_never_retried() {
        let policy = RetryPolicy::default();
        for error in [
            ChannelError::Rejected { reason: "chat not found".into() },
            ChannelError::MarkupRejected { reason: "bad entity".into() },
        ] {
            assert_eq!(policy.next_wait(1, &error, Priority::Final, Duration::ZERO), None);
        }
    }
}
