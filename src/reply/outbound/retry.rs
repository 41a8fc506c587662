//! When a failed platform call is tried again (SPEC §7): a 429 after the platform's
//! `retry_after`, a timeout, 5xx or dropped connection after a short backoff, anything else
//! never. Three attempts in all.

use std::time::Duration;

use ferry_channel::ChannelError;
use rand::RngExt;

#[derive(Debug, Clone, Copy, PartialEq)]
pub struct RetryPolicy {
    /// Attempts in all, the first included.
    pub attempts: u32,
    /// No retry comes sooner than this, whatever the platform said.
    pub min_wait: Duration,
    /// Nor later than this: a platform asking for longer gets the error instead.
    pub max_wait: Duration,
    /// Up to this fraction is added to each wait, so many chats that hit a 429 together do
    /// not all come back in the same instant. Only added: never sooner than `retry_after`.
    pub jitter: f64,
}

impl Default for RetryPolicy {
    fn default() -> Self {
        Self { attempts: 3, min_wait: Duration::from_millis(400), max_wait: Duration::from_secs(30), jitter: 0.1 }
    }
}

impl RetryPolicy {
    /// How long to wait before trying again after `attempt` (1 = the first) failed with
    /// `error`; `None` to give up.
    pub fn next_wait(&self, attempt: u32, error: &ChannelError) -> Option<Duration> {
        if attempt >= self.attempts || !error.is_retryable() {
            return None;
        }
        let backoff = self.min_wait.saturating_mul(1 << (attempt - 1).min(16));
        let wanted = error.retry_after().unwrap_or(backoff);
        if wanted > self.max_wait {
            return None;
        }
        let base = wanted.max(self.min_wait);
        let extra = rand::rng().random_range(0.0..=self.jitter.max(0.0));
        Some(base.mul_f64(1.0 + extra).min(self.max_wait))
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
        for _ in 0..100 {
            let wait = policy.next_wait(1, &rate_limited(1200)).unwrap();
            assert!(wait >= Duration::from_millis(1200) && wait <= Duration::from_millis(1320), "{wait:?}");
        }
        let short = policy.next_wait(1, &rate_limited(10)).unwrap();
        assert!(short >= Duration::from_millis(400), "never sooner than the minimum: {short:?}");
        assert_eq!(policy.next_wait(1, &rate_limited(31_000)), None, "longer than the maximum: give up");
    }

    #[test]
    fn three_attempts_then_the_error_and_only_for_retryable_errors() {
        let policy = RetryPolicy::default();
        let transient = ChannelError::Transient { reason: "502".into() };
        assert!(policy.next_wait(1, &transient).unwrap() >= Duration::from_millis(400));
        assert!(policy.next_wait(2, &transient).unwrap() >= Duration::from_millis(800));
        assert_eq!(policy.next_wait(3, &transient), None);
        assert_eq!(policy.next_wait(1, &ChannelError::Rejected { reason: "chat not found".into() }), None);
        assert_eq!(policy.next_wait(1, &ChannelError::MarkupRejected { reason: "bad entity".into() }), None);
    }
}
