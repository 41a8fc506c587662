//! What to do about slots that passed while Ferry was down, and how long to wait after a
//! failed fire. Nothing is missed silently: a slot is fired (late, and said to be), or
//! skipped and counted, and the caller keeps every skip in the job's run history.

use std::time::Duration;

use chrono::{DateTime, TimeDelta, Utc};
use chrono_tz::Tz;

use crate::types::schedule::{Schedule, local_label};

/// A fire counts as late when it starts more than this after its slot.
pub const LATE_AFTER: TimeDelta = TimeDelta::seconds(30);

/// After this many failures in a row a job is paused and its owner told why.
pub const PAUSE_AFTER_FAILURES: u32 = 10;

/// The most slots walked one by one when counting a cron job's missed slots; beyond it the
/// count says "at least".
const MAX_WALK: u64 = 10_000;

/// A job's policy for slots missed while Ferry was down.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Missed {
    /// Fire once, late, for the latest missed slot; the earlier ones collapse into it.
    #[default]
    RunOnce,
    /// Fire none of the late slots.
    Skip,
}

/// Slots not fired: how many (at least, past [`MAX_WALK`]), the first and the last.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Skipped {
    pub count: u64,
    pub first: DateTime<Utc>,
    pub last: DateTime<Utc>,
}

/// What a due job does now.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CatchUp {
    /// The slot to fire, if any: the latest one due.
    pub fire: Option<DateTime<Utc>>,
    /// It fires more than [`LATE_AFTER`] after its slot.
    pub late: bool,
    pub skipped: Option<Skipped>,
    /// When the job is due next; `None`: a one-shot that is done.
    pub next_run: Option<DateTime<Utc>>,
}

/// The slots from `due` (the job's stored next run, at or before `now`) up to `now`: how
/// many, the latest, and the one before it.
fn due_slots(
    schedule: &Schedule,
    tz: Tz,
    due: DateTime<Utc>,
    now: DateTime<Utc>,
) -> (u64, DateTime<Utc>, Option<DateTime<Utc>>) {
    match schedule {
        Schedule::At { .. } => (1, due, None),
        Schedule::Every { every_secs, .. } => {
            let every = i64::try_from(*every_secs).unwrap_or(i64::MAX).max(1);
            let k = (now - due).num_seconds().max(0) / every;
            let step = |n: i64| due + TimeDelta::seconds(n.saturating_mul(every));
            (u64::try_from(k).unwrap_or(0) + 1, step(k), (k > 0).then(|| step(k - 1)))
        }
        Schedule::Cron { .. } => {
            let (mut count, mut latest, mut before) = (1, due, None);
            while let Some(next) = schedule.next_after(tz, latest).filter(|next| *next <= now) {
                count += 1;
                before = Some(latest);
                latest = next;
                if count >= MAX_WALK {
                    // Down for longer than the walk: jump to the last match before now.
                    let (last, previous) = last_two_before(schedule, tz, now).unwrap_or((latest, before));
                    return (count, last, previous);
                }
            }
            (count, latest, before)
        }
    }
}

/// The last cron match at or before `now` and the one before it, found by walking from
/// ever further back.
fn last_two_before(schedule: &Schedule, tz: Tz, now: DateTime<Utc>) -> Option<(DateTime<Utc>, Option<DateTime<Utc>>)> {
    for back in [TimeDelta::hours(1), TimeDelta::days(1), TimeDelta::days(40), TimeDelta::days(400)] {
        let mut cursor = now - back;
        let mut found: Option<(DateTime<Utc>, Option<DateTime<Utc>>)> = None;
        let mut steps = 0;
        while let Some(next) = schedule.next_after(tz, cursor).filter(|next| *next <= now) {
            found = Some((next, found.map(|(last, _)| last)));
            cursor = next;
            steps += 1;
            if steps > MAX_WALK {
                break;
            }
        }
        if found.is_some() {
            return found;
        }
    }
    None
}

/// Decides a due job's fire. `RunOnce`: the latest due slot fires (late if it is), the
/// earlier ones are skipped into it — unless the latest is older than `grace`, when all
/// are skipped. `Skip`: a slot on time fires; late ones are all skipped. A one-shot under
/// `RunOnce` always fires, late, unless past its grace.
pub fn catch_up(
    schedule: &Schedule,
    tz: Tz,
    due: DateTime<Utc>,
    now: DateTime<Utc>,
    missed: Missed,
    grace: Option<Duration>,
) -> CatchUp {
    let next_run = schedule.next_after(tz, now);
    if due > now {
        return CatchUp { fire: None, late: false, skipped: None, next_run: Some(due) };
    }
    let (count, latest, before) = due_slots(schedule, tz, due, now);
    let late = now - latest > LATE_AFTER;
    let past_grace = grace.and_then(|grace| TimeDelta::from_std(grace).ok()).is_some_and(|grace| now - latest > grace);
    let skip_all = late && (missed == Missed::Skip || past_grace);
    if skip_all {
        let skipped = Skipped { count, first: due, last: latest };
        return CatchUp { fire: None, late: false, skipped: Some(skipped), next_run };
    }
    let skipped = before.map(|before| Skipped { count: count - 1, first: due, last: before });
    CatchUp { fire: Some(latest), late, skipped, next_run }
}

/// The wait after `failures` failed fires in a row (1-based): 30 s, 1 m, 5 m, 15 m, then
/// 60 m.
pub fn retry_delay(failures: u32) -> Duration {
    const STEPS: [u64; 5] = [30, 60, 300, 900, 3600];
    let index = usize::try_from(failures.max(1) - 1).unwrap_or(usize::MAX).min(STEPS.len() - 1);
    Duration::from_secs(STEPS[index])
}

/// What a late fire says of itself: `(late: was due 09:00 Europe/Berlin)`.
pub fn late_note(slot: DateTime<Utc>, tz: Tz, now: DateTime<Utc>) -> String {
    format!("(late: was due {})", local_label(slot, tz, now))
}

#[cfg(test)]
mod tests {
    use chrono_tz::Europe::Berlin;

    use super::*;

    fn at(text: &str) -> DateTime<Utc> {
        DateTime::parse_from_rfc3339(text).unwrap().to_utc()
    }

    #[test]
    fn several_missed_slots_collapse_into_one_late_fire_of_the_latest() {
        let hourly = Schedule::Every { every_secs: 3600, anchor: at("2026-11-28T00:00:00Z") };
        let due = at("2026-11-28T09:00:00Z");
        let now = at("2026-11-28T12:30:00Z");
        let catch = catch_up(&hourly, Berlin, due, now, Missed::RunOnce, None);
        assert_eq!(catch.fire, Some(at("2026-11-28T12:00:00Z")));
        assert!(catch.late);
        let skipped = catch.skipped.unwrap();
        assert_eq!((skipped.count, skipped.first, skipped.last), (3, due, at("2026-11-28T11:00:00Z")));
        assert_eq!(catch.next_run, Some(at("2026-11-28T13:00:00Z")));
    }

    #[test]
    fn cron_slots_are_counted_in_the_zone() {
        // 08:00 Berlin on weekdays = 07:00 UTC in winter. Down from Friday 06:00 UTC to
        // Tuesday 12:00 UTC: Friday, Monday and Tuesday were due.
        let weekdays = Schedule::Cron { expr: "0 8 * * 1-5".into() };
        let due = at("2026-11-27T07:00:00Z");
        let now = at("2026-12-01T12:00:00Z");
        let catch = catch_up(&weekdays, Berlin, due, now, Missed::RunOnce, None);
        assert_eq!(catch.fire, Some(at("2026-12-01T07:00:00Z")));
        let skipped = catch.skipped.unwrap();
        assert_eq!((skipped.count, skipped.last), (2, at("2026-11-30T07:00:00Z")));
        assert_eq!(catch.next_run, Some(at("2026-12-02T07:00:00Z")));
    }

    #[test]
    fn past_its_grace_or_with_skip_every_late_slot_is_skipped_and_counted() {
        let hourly = Schedule::Every { every_secs: 3600, anchor: at("2026-11-28T00:00:00Z") };
        let due = at("2026-11-28T09:00:00Z");
        let now = at("2026-11-28T12:30:00Z");
        let graced = catch_up(&hourly, Berlin, due, now, Missed::RunOnce, Some(Duration::from_secs(600)));
        assert_eq!((graced.fire, graced.skipped.map(|skipped| skipped.count)), (None, Some(4)));
        let skip = catch_up(&hourly, Berlin, due, now, Missed::Skip, None);
        assert_eq!((skip.fire, skip.skipped.map(|skipped| skipped.count)), (None, Some(4)));
        assert_eq!(skip.next_run, Some(at("2026-11-28T13:00:00Z")));
        // On time, `skip` fires as usual.
        let on_time = catch_up(&hourly, Berlin, due, due + TimeDelta::seconds(2), Missed::Skip, None);
        assert_eq!((on_time.fire, on_time.late, on_time.skipped), (Some(due), false, None));
    }

    #[test]
    fn a_missed_one_shot_fires_late_once_and_is_done() {
        let once = Schedule::At { at: at("2026-11-28T09:00:00Z") };
        let now = at("2026-11-28T11:00:00Z");
        let catch = catch_up(&once, Berlin, at("2026-11-28T09:00:00Z"), now, Missed::RunOnce, None);
        assert_eq!(
            (catch.fire, catch.late, catch.skipped, catch.next_run),
            (Some(at("2026-11-28T09:00:00Z")), true, None, None)
        );
        assert_eq!(late_note(at("2026-11-28T09:00:00Z"), Berlin, now), "(late: was due 10:00 Europe/Berlin)");
    }

    #[test]
    fn a_long_outage_of_a_minutely_cron_is_bounded_and_fires_the_latest_slot() {
        let minutely = Schedule::Cron { expr: "* * * * *".into() };
        let due = at("2026-01-01T00:00:00Z");
        let now = at("2026-11-28T12:30:20Z");
        let catch = catch_up(&minutely, Berlin, due, now, Missed::RunOnce, None);
        assert_eq!(catch.fire, Some(at("2026-11-28T12:30:00Z")));
        assert!(catch.skipped.unwrap().count >= MAX_WALK - 1);
        assert!(!catch.late, "half a minute after its slot is on time");
    }

    #[test]
    fn failures_back_off_then_hold_at_an_hour() {
        let delays: Vec<u64> = (1..=7).map(|failures| retry_delay(failures).as_secs()).collect();
        assert_eq!(delays, [30, 60, 300, 900, 3600, 3600, 3600]);
        assert_eq!(retry_delay(0).as_secs(), 30);
    }
}
