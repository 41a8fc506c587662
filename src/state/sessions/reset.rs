//! When a session is stale and starts afresh (SPEC §4): daily at `at_hour` local time,
//! after `idle_minutes` without messages, or only by hand. Evaluated lazily when the next
//! message arrives, so an idle gateway does no work for it.

use chrono::{DateTime, Duration, NaiveTime, TimeZone, Utc};

use crate::config::{ResetConfig, ResetMode};

/// Why a session got a new session id.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ResetReason {
    /// The key had no session yet.
    New,
    /// `/new` or `/reset`.
    Manual,
    /// The daily reset hour passed since the last message.
    Daily,
    /// No message for `idle_minutes`.
    Idle,
}

impl ResetReason {
    pub fn as_str(self) -> &'static str {
        match self {
            ResetReason::New => "new",
            ResetReason::Manual => "reset",
            ResetReason::Daily => "daily",
            ResetReason::Idle => "idle",
        }
    }
}

/// Whether a session last updated at `updated` is stale at `now`, judged in time zone `tz`.
pub fn staleness<Tz: TimeZone>(
    updated: DateTime<Utc>,
    now: DateTime<Utc>,
    policy: &ResetConfig,
    tz: &Tz,
) -> Option<ResetReason> {
    if policy.mode == ResetMode::Daily && updated < last_daily_boundary(now, policy.at_hour, tz) {
        return Some(ResetReason::Daily);
    }
    let idle_applies = matches!(policy.mode, ResetMode::Daily | ResetMode::Idle) && policy.idle_minutes > 0;
    let idle_limit = Duration::minutes(i64::try_from(policy.idle_minutes).unwrap_or(i64::MAX / 60_000));
    if idle_applies && now - updated > idle_limit {
        return Some(ResetReason::Idle);
    }
    None
}

/// The most recent `at_hour:00` in `tz` that is not after `now`.
pub fn last_daily_boundary<Tz: TimeZone>(now: DateTime<Utc>, at_hour: u8, tz: &Tz) -> DateTime<Utc> {
    let local_now = now.with_timezone(tz);
    let at = NaiveTime::from_hms_opt(u32::from(at_hour.min(23)), 0, 0).unwrap_or(NaiveTime::MIN);
    let mut day = local_now.date_naive();
    loop {
        let naive = day.and_time(at);
        // At a DST gap the hour does not exist; the first instant after it stands in.
        let boundary = tz
            .from_local_datetime(&naive)
            .earliest()
            .or_else(|| tz.from_local_datetime(&(naive + Duration::hours(1))).earliest())
            .map(|boundary| boundary.with_timezone(&Utc));
        match boundary {
            Some(boundary) if boundary <= now => return boundary,
            _ => match day.pred_opt() {
                Some(previous) => day = previous,
                None => return DateTime::<Utc>::MIN_UTC,
            },
        }
    }
}

#[cfg(test)]
mod tests {
    use chrono::FixedOffset;

    use super::*;

    fn at(text: &str) -> DateTime<Utc> {
        DateTime::parse_from_rfc3339(text).unwrap().with_timezone(&Utc)
    }

    fn daily(at_hour: u8, idle_minutes: u64) -> ResetConfig {
        ResetConfig { mode: ResetMode::Daily, at_hour, idle_minutes }
    }

    #[test]
    fn the_daily_boundary_splits_03_59_from_04_01() {
        let policy = daily(4, 0);
        let last_message = at("2026-11-21T22:00:00Z");
        assert_eq!(staleness(last_message, at("2026-11-22T03:59:00Z"), &policy, &Utc), None);
        assert_eq!(staleness(last_message, at("2026-11-22T04:01:00Z"), &policy, &Utc), Some(ResetReason::Daily));
        // A message after today's boundary keeps the session until tomorrow's.
        assert_eq!(staleness(at("2026-11-22T04:01:00Z"), at("2026-11-23T03:59:00Z"), &policy, &Utc), None);
    }

    #[test]
    fn the_boundary_is_local_time() {
        let tz = FixedOffset::east_opt(2 * 3600).unwrap();
        // 04:00 at UTC+2 is 02:00 UTC.
        assert_eq!(last_daily_boundary(at("2026-11-22T02:30:00Z"), 4, &tz), at("2026-11-22T02:00:00Z"));
        assert_eq!(last_daily_boundary(at("2026-11-22T01:30:00Z"), 4, &tz), at("2026-11-21T02:00:00Z"));
    }

    #[test]
    fn idle_resets_follow_idle_minutes() {
        let policy = ResetConfig { mode: ResetMode::Idle, at_hour: 4, idle_minutes: 30 };
        let last = at("2026-11-22T10:00:00Z");
        assert_eq!(staleness(last, at("2026-11-22T10:29:00Z"), &policy, &Utc), None);
        assert_eq!(staleness(last, at("2026-11-22T10:31:00Z"), &policy, &Utc), Some(ResetReason::Idle));
        // Idle mode ignores the daily hour.
        assert_eq!(staleness(at("2026-11-22T03:50:00Z"), at("2026-11-22T04:10:00Z"), &policy, &Utc), None);
        assert_eq!(staleness(last, at("2026-11-22T10:31:00Z"), &daily(4, 30), &Utc), Some(ResetReason::Idle));
    }

    #[test]
    fn manual_mode_never_resets_by_itself() {
        let policy = ResetConfig { mode: ResetMode::Manual, at_hour: 4, idle_minutes: 5 };
        assert_eq!(staleness(at("2020-01-01T00:00:00Z"), at("2026-11-22T10:00:00Z"), &policy, &Utc), None);
    }
}
