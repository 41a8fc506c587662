//! A schedule as the jobs store keeps it, and back: the one place that knows which columns
//! a kind of schedule fills.

use chrono::{DateTime, Utc};
use chrono_tz::Tz;

use crate::state::jobs::StoredSchedule;
use crate::types::schedule::{Schedule, parse_zone};

/// `schedule` in `tz`, as kept.
pub fn store(schedule: &Schedule, tz: Tz) -> StoredSchedule {
    let mut stored = StoredSchedule {
        kind: schedule.kind().to_owned(),
        at_ms: None,
        every_secs: None,
        anchor_ms: None,
        cron: None,
        tz: tz.name().to_owned(),
    };
    match schedule {
        Schedule::At { at } => stored.at_ms = Some(at.timestamp_millis()),
        Schedule::Every { every_secs, anchor } => {
            stored.every_secs = i64::try_from(*every_secs).ok();
            stored.anchor_ms = Some(anchor.timestamp_millis());
        }
        Schedule::Cron { expr } => stored.cron = Some(expr.clone()),
    }
    stored
}

/// A kept schedule and its zone; `None` for one this version cannot read (a newer kind, a
/// zone this build's database lacks), which is then never fired rather than misfired.
pub fn load(stored: &StoredSchedule) -> Option<(Schedule, Tz)> {
    let tz = parse_zone(&stored.tz).ok()?;
    let schedule = match stored.kind.as_str() {
        "at" => Schedule::At { at: instant(stored.at_ms?)? },
        "every" => {
            Schedule::Every { every_secs: u64::try_from(stored.every_secs?).ok()?, anchor: instant(stored.anchor_ms?)? }
        }
        "cron" => Schedule::Cron { expr: stored.cron.clone()? },
        _ => return None,
    };
    Some((schedule, tz))
}

/// Unix milliseconds as an instant.
pub fn instant(ms: i64) -> Option<DateTime<Utc>> {
    DateTime::from_timestamp_millis(ms)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_kind_round_trips() {
        let anchor = instant(1_750_000_000_000).unwrap();
        for schedule in [
            Schedule::At { at: anchor },
            Schedule::Every { every_secs: 90, anchor },
            Schedule::Cron { expr: "0 8 * * 1-5".into() },
        ] {
            let stored = store(&schedule, chrono_tz::Europe::Berlin);
            assert_eq!(stored.tz, "Europe/Berlin");
            assert_eq!(load(&stored), Some((schedule, chrono_tz::Europe::Berlin)));
        }
    }

    #[test]
    fn an_unknown_kind_or_zone_is_not_read() {
        let stored = store(&Schedule::Cron { expr: "* * * * *".into() }, chrono_tz::UTC);
        assert_eq!(load(&StoredSchedule { kind: "lunar".into(), ..stored.clone() }), None);
        assert_eq!(load(&StoredSchedule { tz: "Mars/Olympus".into(), ..stored }), None);
    }
}
