//! Telegram's flood limits on outgoing messages, answered the way Telegram answers them: a 429
//! `Too Many Requests: retry after N` with `parameters.retry_after`.
//!
//! Telegram publishes rough numbers, not an algorithm: about one message per second into one
//! chat (short bursts pass), at most 20 messages per minute into one group, and about 30
//! messages per second overall. The fake enforces those numbers with a token bucket per chat and
//! sliding windows for groups and the whole bot. Time is `tokio::time::Instant`, so a test on a
//! paused clock can step through the limits without sleeping.

use std::collections::{HashMap, VecDeque};
use std::time::Duration;

use tokio::time::Instant;

/// Flood limits applied to `sendMessage` and `editMessageText` (Telegram counts edits too).
///
/// `FakeTelegram` starts with [`RateLimits::telegram`]; tests that do not study flood control
/// can call `FakeTelegram::without_rate_limits` so that fast sends never see a 429.
#[derive(Clone, Debug, PartialEq)]
pub struct RateLimits {
    /// Sustained messages per second into one chat. Telegram: "avoid sending more than one
    /// message per second" per chat.
    pub per_chat_per_second: f64,
    /// How many messages may go to one chat at once before the per-second rate applies.
    pub per_chat_burst: u32,
    /// Messages per minute into one group or supergroup (negative chat id). Telegram: 20.
    pub group_per_minute: u32,
    /// Messages per second across all chats. Telegram: about 30.
    pub global_per_second: u32,
}

impl RateLimits {
    /// Telegram's published limits: 1 msg/s per chat with a burst of 3, 20/min per group,
    /// 30/s overall.
    pub fn telegram() -> Self {
        Self { per_chat_per_second: 1.0, per_chat_burst: 3, group_per_minute: 20, global_per_second: 30 }
    }
}

impl Default for RateLimits {
    fn default() -> Self {
        Self::telegram()
    }
}

/// A token bucket for one chat.
struct Bucket {
    tokens: f64,
    updated: Instant,
}

/// The flood-control state of one fake bot.
#[derive(Default)]
pub(crate) struct Limiter {
    chats: HashMap<i64, Bucket>,
    groups: HashMap<i64, VecDeque<Instant>>,
    global: VecDeque<Instant>,
}

/// Whole seconds until `wait` has passed, at least 1, as Telegram's `retry_after` is.
fn retry_after(wait: Duration) -> u64 {
    let secs = wait.as_secs_f64().ceil() as u64;
    secs.max(1)
}

/// How long until the oldest entry leaves a window of `span` that holds `limit` entries, or
/// `None` if there is room.
fn window_wait(window: &mut VecDeque<Instant>, span: Duration, limit: u32, now: Instant) -> Option<Duration> {
    while window.front().is_some_and(|at| now.duration_since(*at) >= span) {
        window.pop_front();
    }
    if window.len() < limit as usize {
        return None;
    }
    let oldest = *window.front()?;
    Some(span.saturating_sub(now.duration_since(oldest)))
}

impl Limiter {
    /// Counts one message to `chat_id` if every limit allows it; otherwise counts nothing and
    /// returns the `retry_after` seconds to answer with.
    pub(crate) fn admit(&mut self, limits: &RateLimits, chat_id: i64, now: Instant) -> Result<(), u64> {
        if let Some(wait) = window_wait(&mut self.global, Duration::from_secs(1), limits.global_per_second, now) {
            return Err(retry_after(wait));
        }
        let group = self.groups.entry(chat_id).or_default();
        if chat_id < 0
            && let Some(wait) = window_wait(group, Duration::from_secs(60), limits.group_per_minute, now)
        {
            return Err(retry_after(wait));
        }
        let burst = f64::from(limits.per_chat_burst.max(1));
        let bucket = self.chats.entry(chat_id).or_insert(Bucket { tokens: burst, updated: now });
        let elapsed = now.duration_since(bucket.updated).as_secs_f64();
        bucket.tokens = (bucket.tokens + elapsed * limits.per_chat_per_second).min(burst);
        bucket.updated = now;
        if bucket.tokens < 1.0 {
            let rate = limits.per_chat_per_second.max(f64::MIN_POSITIVE);
            return Err(retry_after(Duration::from_secs_f64((1.0 - bucket.tokens) / rate)));
        }
        bucket.tokens -= 1.0;
        if chat_id < 0 {
            group.push_back(now);
        }
        self.global.push_back(now);
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_chat_gets_its_burst_then_one_per_second() {
        let limits = RateLimits::telegram();
        let mut limiter = Limiter::default();
        let start = Instant::now();
        for _ in 0..3 {
            assert_eq!(limiter.admit(&limits, 5, start), Ok(()));
        }
        assert_eq!(limiter.admit(&limits, 5, start), Err(1));
        // Another chat is not affected.
        assert_eq!(limiter.admit(&limits, 6, start), Ok(()));
        assert_eq!(limiter.admit(&limits, 5, start + Duration::from_millis(1000)), Ok(()));
        assert_eq!(limiter.admit(&limits, 5, start + Duration::from_millis(1100)), Err(1));
    }

    #[test]
    fn a_group_gets_twenty_a_minute() {
        let limits = RateLimits { per_chat_burst: 100, ..RateLimits::telegram() };
        let mut limiter = Limiter::default();
        let start = Instant::now();
        for second in 0..20 {
            assert_eq!(limiter.admit(&limits, -42, start + Duration::from_secs(second)), Ok(()));
        }
        assert_eq!(limiter.admit(&limits, -42, start + Duration::from_secs(20)), Err(40));
        assert_eq!(limiter.admit(&limits, -42, start + Duration::from_secs(60)), Ok(()));
    }

    #[test]
    fn the_whole_bot_gets_thirty_a_second() {
        let limits = RateLimits::telegram();
        let mut limiter = Limiter::default();
        let start = Instant::now();
        for chat in 0..30 {
            assert_eq!(limiter.admit(&limits, chat, start), Ok(()));
        }
        assert_eq!(limiter.admit(&limits, 99, start), Err(1));
    }
}
