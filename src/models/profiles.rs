//! Auth profiles: which of a provider's credentials a model call tries first, and how long a
//! failing one rests (issue 20).
//!
//! With one key per provider, one 429 or one revoked key was an outage for every chat. An
//! operator can now give a provider several credentials ("profiles", each with an id such as
//! `default` or `backup`, in config order). The [`ProfileBook`] is the bookkeeping behind
//! rotating among them: every run asks it for the [order](ProfileBook::order) to try the
//! provider's profiles in, reports which one it used, and reports how the call ended. A
//! failure worth switching credentials for ([`FailoverReason`]) puts the profile on a
//! [`cooldown`], so the next call goes to another key instead of hammering the failing one.
//!
//! ```
//! use chrono::{TimeDelta, Utc};
//! use ferry::models::profiles::{Availability, FailoverReason, ProfileBook};
//!
//! let book = ProfileBook::new();
//! let profiles = ["default".to_owned(), "backup".to_owned()];
//! let now = Utc::now();
//!
//! // The first call goes to `default`, which answers 429.
//! let (profile, _) = book.order("anthropic", &profiles, None, now)[0];
//! book.mark_used("anthropic", profile, now);
//! let row = book.mark_failure("anthropic", profile, FailoverReason::RateLimit, None, now);
//! assert_eq!(row.cooling_until, Some(now + TimeDelta::minutes(1))); // the caller persists `row`
//!
//! // The retry goes to `backup`; `default` comes last until its minute is over.
//! let order = book.order("anthropic", &profiles, None, now);
//! assert_eq!(order[0], ("backup", Availability::Ready));
//! assert!(matches!(order[1], ("default", Availability::Cooling { reason: FailoverReason::RateLimit, .. })));
//! ```
//!
//! The book does no I/O. Cooldowns must outlive a restart (or the restart hammers a dead
//! key), so every call that changes them hands back the [`ProfileHealth`] row to persist,
//! and [`ProfileBook::restore`] loads the rows at start-up. The happy path (a success on a
//! healthy profile) changes nothing worth persisting and returns nothing, so it writes
//! nothing. `last_used` rides along in the rows that are written; after a restart the
//! least-recently-used order is therefore approximate, which only affects which healthy key
//! goes first.
//!
//! Whether to wait for [`ProfileBook::soonest_ready`] or try a cooling profile anyway when
//! all are cooling is the caller's decision; [`ProfileBook::order`] lists cooling profiles
//! last rather than leaving them out so that it can.

use std::collections::HashMap;
use std::sync::{Mutex, MutexGuard, PoisonError};
use std::time::Duration;

pub use crate::state::health::{FailoverReason, ProfileHealth};
use chrono::{DateTime, TimeDelta, Utc};

/// First wait of the exponential backoff for rate limits, overload and timeouts (issue 20).
pub const BACKOFF_FIRST: Duration = Duration::from_secs(60);
/// Each consecutive failure multiplies the backoff by this: 1 min → 5 min → 25 min (issue 20).
pub const BACKOFF_FACTOR: u32 = 5;
/// The backoff never exceeds an hour (issue 20): a rate limit rarely lasts longer.
pub const BACKOFF_CAP: Duration = Duration::from_secs(60 * 60);
/// A rejected credential (401/403) rests an hour each time (issue 20): long enough not to
/// hammer a revoked key, short enough that a fixed one comes back without a restart.
pub const AUTH_COOLDOWN: Duration = Duration::from_secs(60 * 60);
/// First wait after a billing failure (402, `insufficient_quota`), doubling per consecutive
/// failure (issue 20): quota rarely comes back within minutes.
pub const BILLING_FIRST: Duration = Duration::from_secs(5 * 60 * 60);
/// The billing wait never exceeds a day (issue 20).
pub const BILLING_CAP: Duration = Duration::from_secs(24 * 60 * 60);
/// The longest `retry-after` that is honoured (issue 20): a garbage header must not disable
/// a key for ever.
pub const RETRY_AFTER_CAP: Duration = Duration::from_secs(24 * 60 * 60);

/// Whether a profile may be tried now.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Availability {
    Ready,
    Cooling { until: DateTime<Utc>, reason: FailoverReason },
}

/// The health of every provider's profiles, shared by every run (the caller wraps it in an
/// `Arc`). Each call holds one short lock and never panics; a lock poisoned by a panic
/// elsewhere is used as is, since every update here is a few plain field writes.
#[derive(Debug, Default)]
pub struct ProfileBook {
    /// provider → profile → health. Two levels keyed by `String` so that lookups borrow
    /// `&str`: the per-call path (`order`, `mark_used` on a known profile, `mark_success`)
    /// allocates no strings.
    table: Mutex<Table>,
}

type Table = HashMap<String, HashMap<String, Entry>>;

/// A [`ProfileHealth`] without its key.
#[derive(Debug, Clone, Copy, Default)]
struct Entry {
    cooling_until: Option<DateTime<Utc>>,
    reason: Option<FailoverReason>,
    error_count: u32,
    last_used: Option<DateTime<Utc>>,
}

/// Where a profile goes in [`ProfileBook::order`]: the variant first, then its time (with
/// config order, added by the caller, breaking ties).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
enum Rank {
    /// The session's current profile, while it is ready.
    Sticky,
    /// Ready and never used: config order.
    Fresh,
    /// Ready and used before: least recently used first.
    Rested(DateTime<Utc>),
    /// Cooling: soonest expiry first.
    Cooling(DateTime<Utc>),
}

impl ProfileBook {
    pub fn new() -> Self {
        Self::default()
    }

    /// Loads persisted health at start-up. A row replaces what the book knew about its
    /// profile. Rows for providers or profiles the config no longer names are kept: they cost
    /// nothing, and a config that adds the key back finds it still cooling.
    pub fn restore(&self, rows: impl IntoIterator<Item = ProfileHealth>) {
        // Collected first so that the caller's iterator (which may read a database) runs
        // outside the lock.
        let rows: Vec<ProfileHealth> = rows.into_iter().collect();
        let mut table = self.lock();
        for row in rows {
            let entry = Entry {
                cooling_until: row.cooling_until,
                reason: row.reason,
                error_count: row.error_count,
                last_used: row.last_used,
            };
            table.entry(row.provider).or_default().insert(row.profile, entry);
        }
    }

    /// The order to try `provider`'s `profiles` (in config order) in, at `now`:
    ///
    /// 1. `sticky` (the session's current profile), if it is among `profiles` and ready, so a
    ///    conversation keeps its key (and the provider's prompt cache) while it works;
    /// 2. ready profiles never used, in config order;
    /// 3. ready profiles used before, least recently used first (ties: config order);
    /// 4. cooling profiles, soonest expiry first (ties: config order).
    ///
    /// Every entry of `profiles` appears once per occurrence; a profile the book has never
    /// heard of is ready and never used.
    pub fn order<'a>(
        &self,
        provider: &str,
        profiles: &'a [String],
        sticky: Option<&str>,
        now: DateTime<Utc>,
    ) -> Vec<(&'a str, Availability)> {
        let mut ranked = Vec::with_capacity(profiles.len());
        {
            let table = self.lock();
            let known = table.get(provider);
            for (index, profile) in profiles.iter().enumerate() {
                let entry = known.and_then(|entries| entries.get(profile.as_str()));
                let availability = entry.map_or(Availability::Ready, |entry| entry.availability(now));
                let rank = match availability {
                    Availability::Ready if sticky == Some(profile.as_str()) => Rank::Sticky,
                    Availability::Ready => entry.and_then(|entry| entry.last_used).map_or(Rank::Fresh, Rank::Rested),
                    Availability::Cooling { until, .. } => Rank::Cooling(until),
                };
                ranked.push(((rank, index), profile.as_str(), availability));
            }
        }
        // The index makes every key distinct, so an unstable sort keeps config order on ties.
        ranked.sort_unstable_by_key(|(key, ..)| *key);
        ranked.into_iter().map(|(_, profile, availability)| (profile, availability)).collect()
    }

    /// Records that a run picked `profile`, for least-recently-used rotation. Not persisted
    /// on its own (see the module doc).
    pub fn mark_used(&self, provider: &str, profile: &str, now: DateTime<Utc>) {
        with_entry(&mut self.lock(), provider, profile, |entry| entry.last_used = Some(now));
    }

    /// A success: the error count goes back to zero and any cooldown ends. Returns the row
    /// to persist if that changed anything, `None` on the common path where the profile was
    /// already healthy (so the happy path writes nothing).
    pub fn mark_success(&self, provider: &str, profile: &str) -> Option<ProfileHealth> {
        let mut table = self.lock();
        let entry = table.get_mut(provider)?.get_mut(profile)?;
        if entry.error_count == 0 && entry.cooling_until.is_none() && entry.reason.is_none() {
            return None;
        }
        entry.error_count = 0;
        entry.cooling_until = None;
        entry.reason = None;
        Some(entry.to_health(provider, profile))
    }

    /// Records a failure worth switching credentials for and puts the profile on a
    /// [`cooldown`]; returns the row to persist.
    ///
    /// The consecutive count is per profile, whatever the class: a key flapping between 429
    /// and 529 still backs off, and only a success resets it. A failure that arrives while
    /// the profile is already cooling (a run that picked it before the cooldown began) is
    /// part of the same incident: it does not raise the count, so a burst of parallel runs
    /// hitting one 429 does not escalate to the hour cap; it can only extend the cooldown,
    /// to the later of the existing expiry and its own (its class or `retry_after` may ask
    /// for longer). `reason` becomes that of whichever expiry wins.
    pub fn mark_failure(
        &self,
        provider: &str,
        profile: &str,
        reason: FailoverReason,
        retry_after: Option<Duration>,
        now: DateTime<Utc>,
    ) -> ProfileHealth {
        with_entry(&mut self.lock(), provider, profile, |entry| {
            let (consecutive, current) = match entry.availability(now) {
                Availability::Cooling { until, reason } => (entry.error_count.max(1), Some((until, reason))),
                Availability::Ready => (entry.error_count.saturating_add(1), None),
            };
            let until = later_by(now, cooldown(reason, consecutive, retry_after));
            let (until, reason) = match current {
                Some((current_until, current_reason)) if current_until > until => (current_until, current_reason),
                _ => (until, reason),
            };
            entry.error_count = consecutive;
            entry.cooling_until = Some(until);
            entry.reason = Some(reason);
            entry.to_health(provider, profile)
        })
    }

    /// The soonest time one of `profiles` is ready again: `None` if one is ready now (or
    /// `profiles` is empty, so there is nothing to wait for).
    pub fn soonest_ready(&self, provider: &str, profiles: &[String], now: DateTime<Utc>) -> Option<DateTime<Utc>> {
        let table = self.lock();
        let known = table.get(provider)?;
        let mut soonest: Option<DateTime<Utc>> = None;
        for profile in profiles {
            match known.get(profile.as_str()).map_or(Availability::Ready, |entry| entry.availability(now)) {
                Availability::Ready => return None,
                Availability::Cooling { until, .. } => {
                    soonest = Some(soonest.map_or(until, |soonest| soonest.min(until)))
                }
            }
        }
        soonest
    }

    /// How many profiles, across all providers, are cooling at `now` (for a gauge). Counts
    /// restored profiles the config no longer names too.
    pub fn cooling_count(&self, now: DateTime<Utc>) -> usize {
        let table = self.lock();
        table
            .values()
            .flat_map(HashMap::values)
            .filter(|entry| matches!(entry.availability(now), Availability::Cooling { .. }))
            .count()
    }

    /// Whether `profile` may be tried at `now` (a profile the book does not know is).
    pub fn is_ready(&self, provider: &str, profile: &str, now: DateTime<Utc>) -> bool {
        let table = self.lock();
        let entry = table.get(provider).and_then(|entries| entries.get(profile));
        entry.is_none_or(|entry| matches!(entry.availability(now), Availability::Ready))
    }

    /// A profile's health (for `/status`), or `None` if the book has no record of it.
    pub fn health(&self, provider: &str, profile: &str) -> Option<ProfileHealth> {
        let table = self.lock();
        table.get(provider)?.get(profile).map(|entry| entry.to_health(provider, profile))
    }

    fn lock(&self) -> MutexGuard<'_, Table> {
        self.table.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

/// How long a profile rests after its `consecutive`-th failure in a row (1-based; 0 counts
/// as 1), per issue 20:
///
/// | reason | wait |
/// |---|---|
/// | `RateLimit`, `Overloaded`, `Timeout` | 1 min × 5ⁿ⁻¹ (1 min → 5 min → 25 min), at most 1 h |
/// | `Auth` | 1 h, each time |
/// | `Billing` | 5 h × 2ⁿ⁻¹, at most 24 h |
///
/// A `retry_after` from the provider that asks for longer is honoured, whatever the reason,
/// up to [`RETRY_AFTER_CAP`]; a shorter one does not cut the schedule short.
pub fn cooldown(reason: FailoverReason, consecutive: u32, retry_after: Option<Duration>) -> Duration {
    let consecutive = consecutive.max(1);
    let scheduled = match reason {
        FailoverReason::RateLimit | FailoverReason::Overloaded | FailoverReason::Timeout => {
            backoff(BACKOFF_FIRST, BACKOFF_FACTOR, consecutive, BACKOFF_CAP)
        }
        FailoverReason::Auth => AUTH_COOLDOWN,
        FailoverReason::Billing => backoff(BILLING_FIRST, 2, consecutive, BILLING_CAP),
    };
    let asked = retry_after.map_or(Duration::ZERO, |asked| asked.min(RETRY_AFTER_CAP));
    scheduled.max(asked)
}

/// `first × factorⁿ⁻¹`, at most `cap`. Stops multiplying once the cap is reached, so it is
/// cheap and cannot overflow for any `n`.
fn backoff(first: Duration, factor: u32, n: u32, cap: Duration) -> Duration {
    let mut wait = first;
    for _ in 1..n {
        if wait >= cap {
            break;
        }
        wait = wait.saturating_mul(factor);
    }
    wait.min(cap)
}

/// `now + wait`, saturating at the end of representable time instead of failing.
fn later_by(now: DateTime<Utc>, wait: Duration) -> DateTime<Utc> {
    TimeDelta::from_std(wait).ok().and_then(|wait| now.checked_add_signed(wait)).unwrap_or(DateTime::<Utc>::MAX_UTC)
}

/// Runs `update` on the entry for `provider`/`profile`, creating it if needed. A known
/// profile is found through borrowed `&str` lookups; only a first sighting allocates keys.
fn with_entry<R>(table: &mut Table, provider: &str, profile: &str, update: impl FnOnce(&mut Entry) -> R) -> R {
    if let Some(entry) = table.get_mut(provider).and_then(|entries| entries.get_mut(profile)) {
        return update(entry);
    }
    update(table.entry(provider.to_owned()).or_default().entry(profile.to_owned()).or_default())
}

impl Entry {
    fn availability(&self, now: DateTime<Utc>) -> Availability {
        match (self.cooling_until, self.reason) {
            (Some(until), Some(reason)) if until > now => Availability::Cooling { until, reason },
            _ => Availability::Ready,
        }
    }

    fn to_health(self, provider: &str, profile: &str) -> ProfileHealth {
        ProfileHealth {
            provider: provider.to_owned(),
            profile: profile.to_owned(),
            cooling_until: self.cooling_until,
            reason: self.reason,
            error_count: self.error_count,
            last_used: self.last_used,
        }
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use chrono::TimeZone;
    use proptest::prelude::*;
    use serde::Deserialize;
    use serde::de::IntoDeserializer;
    use serde::de::value::{Error as ValueError, StrDeserializer};

    use super::*;

    const PROVIDER: &str = "anthropic";

    fn t0() -> DateTime<Utc> {
        Utc.with_ymd_and_hms(2026, 1, 1, 12, 0, 0).unwrap()
    }

    fn secs(n: i64) -> TimeDelta {
        TimeDelta::seconds(n)
    }

    fn names(list: &[&str]) -> Vec<String> {
        list.iter().map(|name| (*name).to_owned()).collect()
    }

    fn ids<'a>(order: &[(&'a str, Availability)]) -> Vec<&'a str> {
        order.iter().map(|(profile, _)| *profile).collect()
    }

    fn minutes(n: u64) -> Duration {
        Duration::from_secs(n * 60)
    }

    fn hours(n: u64) -> Duration {
        Duration::from_secs(n * 60 * 60)
    }

    #[test]
    fn never_used_profiles_go_in_config_order() {
        let book = ProfileBook::new();
        let profiles = names(&["c", "a", "b"]);
        let order = book.order(PROVIDER, &profiles, None, t0());
        assert_eq!(order, vec![("c", Availability::Ready), ("a", Availability::Ready), ("b", Availability::Ready)]);
    }

    #[test]
    fn never_used_profiles_go_before_used_ones_then_least_recently_used_first() {
        let book = ProfileBook::new();
        let profiles = names(&["a", "b", "c", "d"]);
        book.mark_used(PROVIDER, "c", t0());
        book.mark_used(PROVIDER, "a", t0() + secs(1));
        assert_eq!(ids(&book.order(PROVIDER, &profiles, None, t0() + secs(2))), ["b", "d", "c", "a"]);

        book.mark_used(PROVIDER, "b", t0() + secs(3));
        book.mark_used(PROVIDER, "d", t0() + secs(4));
        book.mark_used(PROVIDER, "c", t0() + secs(5));
        assert_eq!(ids(&book.order(PROVIDER, &profiles, None, t0() + secs(6))), ["a", "b", "d", "c"]);
    }

    #[test]
    fn profiles_used_at_the_same_time_keep_config_order() {
        let book = ProfileBook::new();
        let profiles = names(&["a", "b", "c"]);
        for profile in ["c", "b", "a"] {
            book.mark_used(PROVIDER, profile, t0());
        }
        assert_eq!(ids(&book.order(PROVIDER, &profiles, None, t0())), ["a", "b", "c"]);
    }

    #[test]
    fn the_sticky_profile_goes_first_while_it_is_ready() {
        let book = ProfileBook::new();
        let profiles = names(&["a", "b", "c"]);
        book.mark_used(PROVIDER, "a", t0());
        book.mark_used(PROVIDER, "b", t0() + secs(1));
        assert_eq!(ids(&book.order(PROVIDER, &profiles, Some("b"), t0() + secs(2))), ["b", "c", "a"]);

        book.mark_failure(PROVIDER, "b", FailoverReason::RateLimit, None, t0() + secs(2));
        assert_eq!(ids(&book.order(PROVIDER, &profiles, Some("b"), t0() + secs(3))), ["c", "a", "b"]);
        // Ready again: sticky again.
        assert_eq!(ids(&book.order(PROVIDER, &profiles, Some("b"), t0() + secs(62))), ["b", "c", "a"]);
    }

    #[test]
    fn a_sticky_profile_the_config_no_longer_names_is_ignored() {
        let book = ProfileBook::new();
        let profiles = names(&["a", "b"]);
        assert_eq!(ids(&book.order(PROVIDER, &profiles, Some("gone"), t0())), ["a", "b"]);
    }

    #[test]
    fn cooling_profiles_go_last_soonest_expiry_first() {
        let book = ProfileBook::new();
        let profiles = names(&["auth", "rate", "billing", "fresh"]);
        book.mark_failure(PROVIDER, "auth", FailoverReason::Auth, None, t0());
        book.mark_failure(PROVIDER, "rate", FailoverReason::RateLimit, None, t0());
        book.mark_failure(PROVIDER, "billing", FailoverReason::Billing, None, t0());
        let order = book.order(PROVIDER, &profiles, Some("auth"), t0() + secs(1));
        assert_eq!(
            order,
            vec![
                ("fresh", Availability::Ready),
                ("rate", Availability::Cooling { until: t0() + secs(60), reason: FailoverReason::RateLimit }),
                ("auth", Availability::Cooling { until: t0() + secs(3600), reason: FailoverReason::Auth }),
                ("billing", Availability::Cooling { until: t0() + secs(5 * 3600), reason: FailoverReason::Billing }),
            ]
        );
    }

    #[test]
    fn profiles_cooling_until_the_same_time_keep_config_order() {
        let book = ProfileBook::new();
        let profiles = names(&["a", "b"]);
        book.mark_failure(PROVIDER, "b", FailoverReason::Timeout, None, t0());
        book.mark_failure(PROVIDER, "a", FailoverReason::Overloaded, None, t0());
        assert_eq!(ids(&book.order(PROVIDER, &profiles, None, t0())), ["a", "b"]);
    }

    #[test]
    fn a_profile_is_ready_again_once_its_cooldown_has_passed() {
        let book = ProfileBook::new();
        let profiles = names(&["a", "b"]);
        book.mark_used(PROVIDER, "a", t0());
        book.mark_failure(PROVIDER, "a", FailoverReason::RateLimit, None, t0());
        book.mark_used(PROVIDER, "b", t0() + secs(1));
        let until = t0() + secs(60);
        assert_eq!(
            book.order(PROVIDER, &profiles, None, until - secs(1))[1],
            ("a", Availability::Cooling { until, reason: FailoverReason::RateLimit })
        );
        // At the expiry it is ready, and as the least recently used it goes first.
        assert_eq!(
            book.order(PROVIDER, &profiles, None, until),
            vec![("a", Availability::Ready), ("b", Availability::Ready)]
        );
    }

    #[test]
    fn providers_are_kept_apart() {
        let book = ProfileBook::new();
        let profiles = names(&["default"]);
        book.mark_failure("openai", "default", FailoverReason::Auth, None, t0());
        assert_eq!(book.order(PROVIDER, &profiles, None, t0()), vec![("default", Availability::Ready)]);
        assert_eq!(book.soonest_ready(PROVIDER, &profiles, t0()), None);
    }

    #[test]
    fn rate_limits_overload_and_timeouts_back_off_from_a_minute_to_an_hour() {
        for reason in [FailoverReason::RateLimit, FailoverReason::Overloaded, FailoverReason::Timeout] {
            let waits: Vec<Duration> = (1..=6).map(|n| cooldown(reason, n, None)).collect();
            assert_eq!(waits, [minutes(1), minutes(5), minutes(25), hours(1), hours(1), hours(1)], "{reason}");
        }
    }

    #[test]
    fn a_rejected_key_rests_an_hour_each_time() {
        for n in [1, 2, 3, 10] {
            assert_eq!(cooldown(FailoverReason::Auth, n, None), hours(1));
        }
    }

    #[test]
    fn billing_failures_rest_five_hours_doubling_up_to_a_day() {
        let waits: Vec<Duration> = (1..=5).map(|n| cooldown(FailoverReason::Billing, n, None)).collect();
        assert_eq!(waits, [hours(5), hours(10), hours(20), hours(24), hours(24)]);
    }

    #[test]
    fn a_longer_retry_after_is_honoured_a_shorter_one_ignored_and_an_absurd_one_capped() {
        let rate = FailoverReason::RateLimit;
        assert_eq!(cooldown(rate, 1, Some(Duration::from_secs(90))), Duration::from_secs(90));
        assert_eq!(cooldown(rate, 2, Some(Duration::from_secs(90))), minutes(5));
        assert_eq!(cooldown(rate, 1, Some(Duration::ZERO)), minutes(1));
        assert_eq!(cooldown(rate, 1, Some(hours(3))), hours(3), "beyond the backoff cap, still honoured");
        assert_eq!(cooldown(rate, 1, Some(Duration::MAX)), RETRY_AFTER_CAP);
        for reason in FailoverReason::ALL {
            assert_eq!(cooldown(reason, 1, Some(hours(24 * 365))), hours(24), "{reason}");
        }
        assert_eq!(cooldown(FailoverReason::Auth, 1, Some(hours(2))), hours(2));
        assert_eq!(cooldown(FailoverReason::Billing, 1, Some(hours(1))), hours(5));
    }

    #[test]
    fn odd_failure_counts_do_not_panic() {
        for reason in FailoverReason::ALL {
            assert_eq!(cooldown(reason, 0, None), cooldown(reason, 1, None), "{reason}");
            assert!(cooldown(reason, u32::MAX, None) <= hours(24), "{reason}");
        }
    }

    #[test]
    fn marking_a_failure_sets_the_cooldown_and_returns_the_row_to_persist() {
        let book = ProfileBook::new();
        book.mark_used(PROVIDER, "a", t0());
        let row = book.mark_failure(PROVIDER, "a", FailoverReason::RateLimit, Some(Duration::from_secs(120)), t0());
        assert_eq!(
            row,
            ProfileHealth {
                provider: PROVIDER.to_owned(),
                profile: "a".to_owned(),
                cooling_until: Some(t0() + secs(120)),
                reason: Some(FailoverReason::RateLimit),
                error_count: 1,
                last_used: Some(t0()),
            }
        );
        assert_eq!(book.health(PROVIDER, "a"), Some(row));
    }

    #[test]
    fn the_failure_count_continues_across_classes() {
        let book = ProfileBook::new();
        book.mark_failure(PROVIDER, "a", FailoverReason::RateLimit, None, t0());
        let later = t0() + secs(60);
        let row = book.mark_failure(PROVIDER, "a", FailoverReason::Overloaded, None, later);
        assert_eq!((row.error_count, row.cooling_until), (2, Some(later + secs(300))));
        let later = later + secs(300);
        let row = book.mark_failure(PROVIDER, "a", FailoverReason::Timeout, None, later);
        assert_eq!((row.error_count, row.cooling_until), (3, Some(later + secs(1500))));
    }

    #[test]
    fn a_failure_while_cooling_extends_the_cooldown_without_escalating() {
        let book = ProfileBook::new();
        book.mark_failure(PROVIDER, "a", FailoverReason::RateLimit, None, t0());

        // A parallel run's 429 from the same burst: same count, same expiry.
        let row = book.mark_failure(PROVIDER, "a", FailoverReason::RateLimit, None, t0() + secs(1));
        assert_eq!(row.error_count, 1);
        assert_eq!(row.cooling_until, Some(t0() + secs(61)), "its own minute from its own failure");

        // A 401 asks for longer: it wins, with its reason.
        let row = book.mark_failure(PROVIDER, "a", FailoverReason::Auth, None, t0() + secs(2));
        assert_eq!((row.error_count, row.cooling_until), (1, Some(t0() + secs(2 + 3600))));
        assert_eq!(row.reason, Some(FailoverReason::Auth));

        // A 429 that asks for less leaves the longer cooldown and its reason alone.
        let row = book.mark_failure(PROVIDER, "a", FailoverReason::RateLimit, None, t0() + secs(3));
        assert_eq!((row.cooling_until, row.reason), (Some(t0() + secs(2 + 3600)), Some(FailoverReason::Auth)));
    }

    #[test]
    fn a_success_resets_the_count_and_ends_the_cooldown() {
        let book = ProfileBook::new();
        let profiles = names(&["a", "b"]);
        book.mark_failure(PROVIDER, "a", FailoverReason::RateLimit, None, t0());
        book.mark_failure(PROVIDER, "a", FailoverReason::RateLimit, None, t0() + secs(60));
        let row = book.mark_success(PROVIDER, "a").expect("a changed row");
        assert_eq!((row.error_count, row.cooling_until, row.reason), (0, None, None));
        assert_eq!(book.order(PROVIDER, &profiles, None, t0() + secs(61))[0], ("a", Availability::Ready));

        // The backoff starts over.
        let row = book.mark_failure(PROVIDER, "a", FailoverReason::RateLimit, None, t0() + secs(100));
        assert_eq!((row.error_count, row.cooling_until), (1, Some(t0() + secs(160))));
    }

    #[test]
    fn a_success_on_a_healthy_profile_has_nothing_to_persist() {
        let book = ProfileBook::new();
        assert_eq!(book.mark_success(PROVIDER, "never-seen"), None);
        book.mark_used(PROVIDER, "a", t0());
        assert_eq!(book.mark_success(PROVIDER, "a"), None);
        book.mark_failure(PROVIDER, "a", FailoverReason::Timeout, None, t0());
        assert!(book.mark_success(PROVIDER, "a").is_some());
        assert_eq!(book.mark_success(PROVIDER, "a"), None);
    }

    #[test]
    fn a_success_after_the_cooldown_expired_still_clears_the_row() {
        let book = ProfileBook::new();
        book.mark_failure(PROVIDER, "a", FailoverReason::RateLimit, None, t0());
        let row = book.mark_success(PROVIDER, "a").expect("the expired cooldown and count are cleared");
        assert_eq!((row.error_count, row.cooling_until), (0, None));
    }

    #[test]
    fn restored_rows_give_the_same_book() {
        let before = ProfileBook::new();
        let profiles = names(&["a", "b", "c", "d"]);
        before.mark_used(PROVIDER, "a", t0());
        before.mark_used(PROVIDER, "b", t0() + secs(1));
        before.mark_used(PROVIDER, "d", t0() + secs(2));
        let mut rows = vec![
            before.mark_failure(PROVIDER, "a", FailoverReason::Billing, None, t0() + secs(3)),
            before.mark_failure(PROVIDER, "b", FailoverReason::RateLimit, None, t0() + secs(4)),
            before.mark_failure(PROVIDER, "b", FailoverReason::RateLimit, None, t0() + secs(70)),
            before.mark_failure(PROVIDER, "d", FailoverReason::Auth, None, t0() + secs(5)),
        ];
        rows.extend(before.mark_success(PROVIDER, "d"));

        let after = ProfileBook::new();
        after.restore(rows);
        for profile in &profiles {
            assert_eq!(after.health(PROVIDER, profile), before.health(PROVIDER, profile), "{profile}");
        }
        for now in [t0() + secs(80), t0() + secs(500), t0() + secs(6 * 3600)] {
            assert_eq!(after.order(PROVIDER, &profiles, None, now), before.order(PROVIDER, &profiles, None, now));
            assert_eq!(after.cooling_count(now), before.cooling_count(now));
        }
        // The restored count keeps escalating.
        let row = after.mark_failure(PROVIDER, "b", FailoverReason::RateLimit, None, t0() + secs(1000));
        assert_eq!(row.error_count, 3);
    }

    #[test]
    fn restore_keeps_profiles_the_config_no_longer_names() {
        let book = ProfileBook::new();
        book.restore([ProfileHealth {
            provider: "retired".to_owned(),
            profile: "old".to_owned(),
            cooling_until: Some(t0() + secs(60)),
            reason: Some(FailoverReason::Auth),
            error_count: 1,
            last_used: None,
        }]);
        assert_eq!(book.cooling_count(t0()), 1);
        let profiles = names(&["old"]);
        assert_eq!(book.soonest_ready("retired", &profiles, t0()), Some(t0() + secs(60)));
    }

    #[test]
    fn a_restored_cooldown_without_a_reason_is_not_honoured() {
        let book = ProfileBook::new();
        book.restore([ProfileHealth {
            provider: PROVIDER.to_owned(),
            profile: "a".to_owned(),
            cooling_until: Some(t0() + secs(60)),
            reason: None,
            error_count: 1,
            last_used: None,
        }]);
        let profiles = names(&["a"]);
        assert_eq!(book.order(PROVIDER, &profiles, None, t0()), vec![("a", Availability::Ready)]);
        assert_eq!(book.cooling_count(t0()), 0);
        let row = book.mark_failure(PROVIDER, "a", FailoverReason::RateLimit, None, t0());
        assert_eq!((row.error_count, row.cooling_until), (2, Some(t0() + secs(300))));
    }

    #[test]
    fn cooling_count_counts_profiles_cooling_now_across_providers() {
        let book = ProfileBook::new();
        assert_eq!(book.cooling_count(t0()), 0);
        book.mark_used(PROVIDER, "healthy", t0());
        book.mark_failure(PROVIDER, "a", FailoverReason::RateLimit, None, t0());
        book.mark_failure(PROVIDER, "b", FailoverReason::Auth, None, t0());
        book.mark_failure("openai", "a", FailoverReason::Timeout, None, t0());
        assert_eq!(book.cooling_count(t0()), 3);
        assert_eq!(book.cooling_count(t0() + secs(60)), 1);
        assert_eq!(book.cooling_count(t0() + secs(3600)), 0);
    }

    #[test]
    fn soonest_ready_is_none_while_a_profile_is_ready() {
        let book = ProfileBook::new();
        let profiles = names(&["a", "b"]);
        assert_eq!(book.soonest_ready(PROVIDER, &profiles, t0()), None);
        book.mark_failure(PROVIDER, "a", FailoverReason::Auth, None, t0());
        assert_eq!(book.soonest_ready(PROVIDER, &profiles, t0()), None);
        assert_eq!(book.soonest_ready(PROVIDER, &[], t0()), None);
    }

    #[test]
    fn soonest_ready_is_the_earliest_expiry_when_all_are_cooling() {
        let book = ProfileBook::new();
        let profiles = names(&["a", "b"]);
        book.mark_failure(PROVIDER, "a", FailoverReason::Auth, None, t0());
        book.mark_failure(PROVIDER, "b", FailoverReason::RateLimit, None, t0() + secs(10));
        assert_eq!(book.soonest_ready(PROVIDER, &profiles, t0() + secs(10)), Some(t0() + secs(70)));
        assert_eq!(book.soonest_ready(PROVIDER, &profiles, t0() + secs(70)), None);
    }

    #[test]
    fn a_poisoned_lock_does_not_stop_the_book() {
        let book = Arc::new(ProfileBook::new());
        let poisoner = Arc::clone(&book);
        let result = std::thread::spawn(move || {
            let _table = poisoner.lock();
            panic!("a run panicked while holding the book");
        })
        .join();
        assert!(result.is_err());
        let profiles = names(&["a"]);
        let row = book.mark_failure(PROVIDER, "a", FailoverReason::RateLimit, None, t0());
        assert_eq!(row.error_count, 1);
        assert_eq!(book.order(PROVIDER, &profiles, None, t0()).len(), 1);
        assert_eq!(book.cooling_count(t0()), 1);
    }

    #[test]
    fn a_failure_near_the_end_of_time_saturates() {
        let book = ProfileBook::new();
        let row = book.mark_failure(PROVIDER, "a", FailoverReason::Billing, None, DateTime::<Utc>::MAX_UTC);
        assert_eq!(row.cooling_until, Some(DateTime::<Utc>::MAX_UTC));
    }

    #[test]
    fn reasons_are_persisted_under_their_names() {
        for reason in FailoverReason::ALL {
            let name: StrDeserializer<'_, ValueError> = reason.as_str().into_deserializer();
            assert_eq!(FailoverReason::deserialize(name), Ok(reason));
            assert_eq!(reason.to_string(), reason.as_str());
        }
    }

    fn reason() -> impl Strategy<Value = FailoverReason> {
        prop::sample::select(FailoverReason::ALL.to_vec())
    }

    /// A mark on one of four profiles, `at` seconds after `t0`.
    #[derive(Debug, Clone)]
    enum Event {
        Used(usize),
        Failed(usize, FailoverReason, Option<u64>),
        Succeeded(usize),
    }

    fn event() -> impl Strategy<Value = (Event, i64)> {
        let profile = 0..4usize;
        let mark = prop_oneof![
            profile.clone().prop_map(Event::Used),
            (profile.clone(), reason(), prop::option::of(0..200_000u64))
                .prop_map(|(profile, reason, retry)| Event::Failed(profile, reason, retry)),
            profile.prop_map(Event::Succeeded),
        ];
        (mark, 0..7_200i64)
    }

    proptest! {
        #[test]
        fn cooldowns_grow_with_the_count_and_stay_within_a_day(
            reason in reason(),
            n in 1..40u32,
            retry in prop::option::of(any::<u64>()),
        ) {
            let retry = retry.map(Duration::from_secs);
            let wait = cooldown(reason, n, retry);
            prop_assert!(wait >= Duration::from_secs(60) && wait <= hours(24));
            prop_assert!(cooldown(reason, n + 1, retry) >= wait);
            prop_assert!(wait >= cooldown(reason, n, None));
        }

        #[test]
        fn order_lists_every_profile_once_ready_ones_first(
            events in prop::collection::vec(event(), 0..30),
            sticky in prop::option::of(0..5usize),
            at in 0..10_000i64,
        ) {
            let book = ProfileBook::new();
            let profiles = names(&["a", "b", "c", "d"]);
            let mut clock = t0();
            for (event, step) in events {
                clock += secs(step);
                match event {
                    Event::Used(i) => book.mark_used(PROVIDER, &profiles[i], clock),
                    Event::Failed(i, reason, retry) => {
                        let row = book.mark_failure(PROVIDER, &profiles[i], reason, retry.map(Duration::from_secs), clock);
                        prop_assert!(row.cooling_until.is_some_and(|until| until > clock));
                    }
                    Event::Succeeded(i) => {
                        book.mark_success(PROVIDER, &profiles[i]);
                    }
                }
            }
            let sticky = sticky.and_then(|i| profiles.get(i)).map(String::as_str);
            let now = clock + secs(at);
            let order = book.order(PROVIDER, &profiles, sticky, now);
            let mut seen = ids(&order);
            seen.sort_unstable();
            prop_assert_eq!(seen, ["a", "b", "c", "d"]);
            let ready = order.iter().take_while(|(_, availability)| *availability == Availability::Ready).count();
            prop_assert!(order[ready..].iter().all(|(_, availability)| *availability != Availability::Ready));
            prop_assert_eq!(book.cooling_count(now), order.len() - ready);
            if let Some(sticky) = sticky.filter(|_| ready > 0) {
                let sticky_ready = order[..ready].iter().any(|(profile, _)| *profile == sticky);
                prop_assert_eq!(sticky_ready, order[0].0 == sticky);
            }
            let soonest = order.get(ready).and_then(|(_, availability)| match availability {
                Availability::Cooling { until, .. } if ready == 0 => Some(*until),
                _ => None,
            });
            prop_assert_eq!(book.soonest_ready(PROVIDER, &profiles, now), soonest);
        }
    }
}
