//! When a failed model call is sent again, and after how long.

use std::time::Duration;

/// Retries for transient failures (429, 5xx, connection errors, a stream cut before any
/// output). The agent loop only retries while nothing was shown to the user, so a retry
/// can never repeat or contradict visible text.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RetryPolicy {
    /// Attempts after the first. SPEC §6.6 allows one.
    pub max_retries: u32,
    /// The first backoff; each further retry doubles it.
    pub base_delay: Duration,
    /// The longest wait. A provider that asks for more (`retry-after`) is not retried: the
    /// user is told to try later instead of watching a run hang.
    pub max_delay: Duration,
}

impl Default for RetryPolicy {
    fn default() -> Self {
        Self { max_retries: 1, base_delay: Duration::from_millis(500), max_delay: Duration::from_secs(30) }
    }
}

impl RetryPolicy {
    /// After part of a reply was shown (issue 17): two more attempts, after `first` and then
    /// twice that (by default 10 s and 20 s: about a minute with the failed calls), so a
    /// provider's brief outage does not cost the user their answer; a longer one ends with
    /// a notice and the message kept for later.
    pub fn after_output(first: Duration) -> Self {
        Self { max_retries: 2, base_delay: first, max_delay: first.saturating_mul(2).max(Duration::from_secs(60)) }
    }

    /// How long to wait before retry number `attempt` (0-based), or `None` to give up.
    /// The provider's `retry-after` wins over the computed backoff.
    pub fn delay(&self, attempt: u32, retry_after: Option<Duration>) -> Option<Duration> {
        if attempt >= self.max_retries {
            return None;
        }
        let backoff = self.base_delay.saturating_mul(2u32.saturating_pow(attempt)).min(self.max_delay);
        match retry_after {
            Some(asked) if asked > self.max_delay => None,
            Some(asked) => Some(asked),
            None => Some(backoff),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn backoff_doubles_up_to_the_retry_limit() {
        let policy = RetryPolicy { max_retries: 3, ..RetryPolicy::default() };
        let delays: Vec<_> = (0..4).map(|attempt| policy.delay(attempt, None)).collect();
        assert_eq!(
            delays,
            [Some(Duration::from_millis(500)), Some(Duration::from_secs(1)), Some(Duration::from_secs(2)), None]
        );
    }

    #[test]
    fn retry_after_is_honoured_unless_it_is_too_long() {
        let policy = RetryPolicy::default();
        assert_eq!(policy.delay(0, Some(Duration::from_millis(1200))), Some(Duration::from_millis(1200)));
        assert_eq!(policy.delay(0, Some(Duration::from_secs(120))), None);
    }

    #[test]
    fn the_default_allows_exactly_one_retry() {
        let policy = RetryPolicy::default();
        assert!(policy.delay(0, None).is_some());
        assert!(policy.delay(1, None).is_none());
    }
}
