//! When a scheduled job runs: once `at` a time or `in` a while, `every` so long, or on a
//! 5-field `cron` expression, always read in an IANA time zone. The config checks its keys
//! with it and `cron` fires by it, so both read "20m" and "0 8 * * 1-5" the same way.
//!
//! The promise: a schedule that cannot fire is refused when it is made, with a reason a
//! person (or a model passing it on) can act on: a time already past, a local time that
//! does not exist or happens twice on a daylight-saving change, an expression that never
//! matches, an unknown zone, an interval under [`MIN_EVERY`]. Recurring cron schedules
//! cross daylight-saving changes the way croner defines it: a fixed time in a skipped hour
//! is skipped that day, and one in a repeated hour fires once.

use std::collections::HashMap;
use std::str::FromStr;
use std::sync::{LazyLock, Mutex, PoisonError};
use std::time::Duration;

use chrono::{DateTime, LocalResult, NaiveDate, NaiveDateTime, NaiveTime, TimeDelta, TimeZone, Utc};
use chrono_tz::Tz;
use croner::Cron;

/// The shortest interval an `every` job may have.
pub const MIN_EVERY: Duration = Duration::from_secs(10);

/// What a user or the model asked for, before it is checked.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum When {
    /// ISO-8601, with an offset, or a local time read in the zone.
    At(String),
    /// A duration from now: `90s`, `20m`, `2h`, `1h30m`, `1d`.
    In(String),
    /// A duration, at least [`MIN_EVERY`].
    Every(String),
    /// A 5-field cron expression.
    Cron(String),
}

/// A checked schedule, as it is kept (with its zone beside it).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Schedule {
    /// Once.
    At { at: DateTime<Utc> },
    /// At `anchor + k × every_secs` for k ≥ 1: pure UTC intervals, untouched by DST.
    Every { every_secs: u64, anchor: DateTime<Utc> },
    /// On the expression, in the job's zone.
    Cron { expr: String },
}

/// Why a schedule was refused; worded for the person who asked.
#[derive(Debug, Clone, thiserror::Error, PartialEq, Eq)]
pub enum ScheduleError {
    #[error("that time has already passed ({0})")]
    Past(String),
    #[error(
        "`{0}` is not a time I can read: use ISO-8601, like 2026-11-29T09:00 (in the zone) or \
         2026-11-29T09:00:00+01:00"
    )]
    InvalidTime(String),
    #[error(
        "{time} does not exist in {zone}: the clocks skip that hour for daylight saving time. Pick another time, or \
         give an offset"
    )]
    NonexistentLocal { time: String, zone: String },
    #[error(
        "{time} happens twice in {zone}: the clocks go back that night. Give an offset (like +01:00 or +02:00) to \
         say which"
    )]
    AmbiguousLocal { time: String, zone: String },
    #[error("a cron expression has 5 fields (minute hour day-of-month month day-of-week); `{expr}` has {fields}")]
    CronFields { expr: String, fields: usize },
    #[error("`{expr}` is not a cron expression I can read: {reason}")]
    InvalidCron { expr: String, reason: String },
    #[error("that schedule can never fire (no date matches it)")]
    NeverFires,
    #[error("`{0}` is not an IANA time zone (like Europe/Berlin or America/New_York)")]
    UnknownZone(String),
    #[error("`{0}` is not a duration: use a number and a unit, like 90s, 20m, 2h, 1h30m or 1d")]
    InvalidDuration(String),
    #[error("repeating more often than every {}s is not allowed", MIN_EVERY.as_secs())]
    TooOften,
    #[error("`{0}` is not a time of day: use 24-hour HH:MM (09:00, 21:30) or 9am / 9:30pm")]
    InvalidClock(String),
}

/// Reads a duration: one or more `<number><unit>` parts, units `s`, `m`, `h`, `d`, `w`
/// (`90s`, `1h30m`). Refuses zero, overflow and anything else.
pub fn parse_duration(text: &str) -> Result<Duration, ScheduleError> {
    let invalid = || ScheduleError::InvalidDuration(text.to_owned());
    let compact: String = text.trim().to_lowercase().chars().filter(|c| !c.is_whitespace()).collect();
    if compact.is_empty() {
        return Err(invalid());
    }
    let mut total: u64 = 0;
    let mut number = String::new();
    let mut chars = compact.chars().peekable();
    while let Some(c) = chars.next() {
        if c.is_ascii_digit() {
            number.push(c);
            continue;
        }
        // A unit, spelled short or long (`m`, `min`, `mins`, `minutes`).
        let mut unit = c.to_string();
        while let Some(next) = chars.peek().copied().filter(char::is_ascii_alphabetic) {
            unit.push(next);
            chars.next();
        }
        let seconds: u64 = match unit.as_str() {
            "s" | "sec" | "secs" | "second" | "seconds" => 1,
            "m" | "min" | "mins" | "minute" | "minutes" => 60,
            "h" | "hr" | "hrs" | "hour" | "hours" => 3_600,
            "d" | "day" | "days" => 86_400,
            "w" | "week" | "weeks" => 604_800,
            _ => return Err(invalid()),
        };
        let count: u64 = number.parse().map_err(|_| invalid())?;
        number.clear();
        total = count.checked_mul(seconds).and_then(|part| total.checked_add(part)).ok_or_else(invalid)?;
    }
    // A bare number, or a trailing one without its unit.
    if !number.is_empty() || total == 0 {
        return Err(invalid());
    }
    // Beyond a century is a typo, and keeps every later addition to an instant in range.
    if total > 100 * 365 * 86_400 {
        return Err(invalid());
    }
    Ok(Duration::from_secs(total))
}

/// Reads an IANA zone name (`Europe/Berlin`, `UTC`).
pub fn parse_zone(name: &str) -> Result<Tz, ScheduleError> {
    Tz::from_str(name.trim()).map_err(|_| ScheduleError::UnknownZone(name.trim().to_owned()))
}

/// The host's zone: `TZ`, else `/etc/timezone`, else where `/etc/localtime` links to, else
/// UTC.
pub fn host_zone() -> Tz {
    zone_of_host(std::env::var("TZ").ok().as_deref(), std::path::Path::new("/"))
}

/// [`host_zone`] from a `TZ` value and a root directory (for tests).
pub fn zone_of_host(tz_var: Option<&str>, root: &std::path::Path) -> Tz {
    let from_var = tz_var.map(|value| value.trim_start_matches(':')).and_then(|name| parse_zone(name).ok());
    let from_file =
        || std::fs::read_to_string(root.join("etc/timezone")).ok().and_then(|text| parse_zone(text.trim()).ok());
    let from_link = || {
        let target = std::fs::read_link(root.join("etc/localtime")).ok()?;
        let target = target.to_string_lossy();
        let (_, name) = target.split_once("zoneinfo/")?;
        parse_zone(name).ok()
    };
    from_var.or_else(from_file).or_else(from_link).unwrap_or(Tz::UTC)
}

/// Reads a time of day: `09:00`, `9:00`, `21:30`, `9am`, `9:30pm`, `12am` (midnight).
pub fn parse_clock(text: &str) -> Result<NaiveTime, ScheduleError> {
    let invalid = || ScheduleError::InvalidClock(text.to_owned());
    let lower = text.trim().to_lowercase();
    let (body, half) = match (lower.strip_suffix("am"), lower.strip_suffix("pm")) {
        (Some(body), _) => (body.trim(), Some(0)),
        (_, Some(body)) => (body.trim(), Some(12)),
        _ => (lower.as_str(), None),
    };
    let (hour, minute) = match body.split_once(':') {
        Some((hour, minute)) if minute.len() == 2 => (hour, minute),
        None if half.is_some() => (body, "0"),
        _ => return Err(invalid()),
    };
    let (hour, minute): (u32, u32) = (hour.parse().map_err(|_| invalid())?, minute.parse().map_err(|_| invalid())?);
    let hour = match half {
        Some(offset) if (1..=12).contains(&hour) => hour % 12 + offset,
        Some(_) => return Err(invalid()),
        None => hour,
    };
    NaiveTime::from_hms_opt(hour, minute, 0).ok_or_else(invalid)
}

/// The next time the clock in `tz` shows `text` (`09:00`): today if that is still ahead,
/// else tomorrow. A time a DST change skips that day becomes the first instant after the
/// gap; one it repeats, the earlier of the two.
pub fn clock_time(text: &str, tz: Tz, now: DateTime<Utc>) -> Result<DateTime<Utc>, ScheduleError> {
    let time = parse_clock(text)?;
    let today = now.with_timezone(&tz).date_naive();
    for day in [today, today.succ_opt().unwrap_or(today)] {
        let at = first_instant(day.and_time(time), tz);
        if at > now {
            return Ok(at);
        }
    }
    Err(ScheduleError::InvalidClock(text.to_owned()))
}

/// A local time as an instant: the earlier of two, or the first valid minute after a gap.
fn first_instant(local: NaiveDateTime, tz: Tz) -> DateTime<Utc> {
    let mut probe = local;
    for _ in 0..=180 {
        match tz.from_local_datetime(&probe) {
            LocalResult::Single(at) | LocalResult::Ambiguous(at, _) => return at.to_utc(),
            LocalResult::None => probe += TimeDelta::minutes(1),
        }
    }
    // No zone has a gap of three hours; read it as UTC rather than fail.
    local.and_utc()
}

/// `at` as the clock in `tz` shows it: `09:00 Europe/Berlin` on `now`'s local day, else
/// with its date.
pub fn local_label(at: DateTime<Utc>, tz: Tz, now: DateTime<Utc>) -> String {
    let local = at.with_timezone(&tz);
    if local.date_naive() == now.with_timezone(&tz).date_naive() {
        format!("{} {}", local.format("%H:%M"), tz.name())
    } else {
        format!("{} {}", local.format("%Y-%m-%d %H:%M"), tz.name())
    }
}

/// `at` in `tz`, RFC 3339 (`2026-11-29T09:00:00+01:00`).
pub fn local_rfc3339(at: DateTime<Utc>, tz: Tz) -> String {
    at.with_timezone(&tz).to_rfc3339()
}

/// Reads a 5-field expression with croner.
fn parse_cron(expr: &str) -> Result<Cron, ScheduleError> {
    let fields = expr.split_whitespace().count();
    if fields != 5 {
        return Err(ScheduleError::CronFields { expr: expr.to_owned(), fields });
    }
    Cron::from_str(expr)
        .map_err(|error| ScheduleError::InvalidCron { expr: expr.to_owned(), reason: error.to_string() })
}

/// Parsed cron expressions by their text, at most [`PARSED_CRONS`] (then it starts over).
/// Parsing one costs ~20 µs (croner builds every field's bit set from the text): more than
/// all the rest of planning a fire, and every due cron job is read again at each fire
/// (`benches/cron.rs`). Few distinct expressions exist in practice (`0 9 * * *`).
static PARSED: LazyLock<Mutex<HashMap<String, Cron>>> = LazyLock::new(Mutex::default);

/// How many parsed expressions [`PARSED`] keeps.
const PARSED_CRONS: usize = 1_024;

/// `expr` parsed, from [`PARSED`] when it was parsed before.
fn parsed_cron(expr: &str) -> Option<Cron> {
    if let Some(cron) = PARSED.lock().unwrap_or_else(PoisonError::into_inner).get(expr) {
        return Some(cron.clone());
    }
    let cron = parse_cron(expr).ok()?;
    let mut parsed = PARSED.lock().unwrap_or_else(PoisonError::into_inner);
    if parsed.len() >= PARSED_CRONS {
        parsed.clear();
    }
    parsed.insert(expr.to_owned(), cron.clone());
    Some(cron)
}

/// Reads an ISO-8601 time: with an offset as it says, without one in `tz` (refusing a time
/// the zone skips or repeats).
fn parse_at(text: &str, tz: Tz) -> Result<DateTime<Utc>, ScheduleError> {
    let text = text.trim();
    if let Ok(at) = DateTime::parse_from_rfc3339(text) {
        return Ok(at.to_utc());
    }
    let local = ["%Y-%m-%dT%H:%M:%S", "%Y-%m-%dT%H:%M", "%Y-%m-%d %H:%M:%S", "%Y-%m-%d %H:%M"]
        .iter()
        .find_map(|format| NaiveDateTime::parse_from_str(text, format).ok())
        .or_else(|| NaiveDate::parse_from_str(text, "%Y-%m-%d").ok().map(|day| day.and_time(NaiveTime::MIN)))
        .ok_or_else(|| ScheduleError::InvalidTime(text.to_owned()))?;
    match tz.from_local_datetime(&local) {
        LocalResult::Single(at) => Ok(at.to_utc()),
        LocalResult::None => Err(ScheduleError::NonexistentLocal {
            time: local.format("%Y-%m-%d %H:%M").to_string(),
            zone: tz.name().to_owned(),
        }),
        LocalResult::Ambiguous(..) => Err(ScheduleError::AmbiguousLocal {
            time: local.format("%Y-%m-%d %H:%M").to_string(),
            zone: tz.name().to_owned(),
        }),
    }
}

impl Schedule {
    /// Checks `when` in `tz` at `now`: an `every` counts from `now`.
    pub fn resolve(when: &When, tz: Tz, now: DateTime<Utc>) -> Result<Schedule, ScheduleError> {
        let schedule = match when {
            When::At(text) => {
                let at = parse_at(text, tz)?;
                if at <= now {
                    return Err(ScheduleError::Past(local_label(at, tz, now)));
                }
                Schedule::At { at }
            }
            When::In(text) => {
                let after = parse_duration(text)?;
                let after = TimeDelta::from_std(after).map_err(|_| ScheduleError::InvalidDuration(text.clone()))?;
                Schedule::At { at: now + after }
            }
            When::Every(text) => {
                let every = parse_duration(text)?;
                if every < MIN_EVERY {
                    return Err(ScheduleError::TooOften);
                }
                Schedule::Every { every_secs: every.as_secs(), anchor: now }
            }
            When::Cron(expr) => {
                let expr = expr.split_whitespace().collect::<Vec<_>>().join(" ");
                parse_cron(&expr)?;
                Schedule::Cron { expr }
            }
        };
        if schedule.first_run(tz, now).is_none() {
            return Err(ScheduleError::NeverFires);
        }
        Ok(schedule)
    }

    /// The first run of a schedule made at `now`: its time, one interval on, or the next
    /// match after now.
    pub fn first_run(&self, tz: Tz, now: DateTime<Utc>) -> Option<DateTime<Utc>> {
        match self {
            Schedule::At { at } => Some(*at),
            Schedule::Every { .. } | Schedule::Cron { .. } => self.next_after(tz, now),
        }
    }

    /// The first slot strictly after `after`; `None` for a one-shot, or an expression with
    /// no match left before croner's search limit.
    pub fn next_after(&self, tz: Tz, after: DateTime<Utc>) -> Option<DateTime<Utc>> {
        match self {
            Schedule::At { .. } => None,
            Schedule::Every { every_secs, anchor } => {
                let every = i64::try_from(*every_secs).ok().filter(|every| *every > 0)?;
                let elapsed = (after - *anchor).num_seconds();
                // The smallest k ≥ 1 with anchor + k·every > after.
                let k = if elapsed < 0 { 1 } else { elapsed / every + 1 };
                anchor.checked_add_signed(TimeDelta::try_seconds(k.checked_mul(every)?)?)
            }
            Schedule::Cron { expr } => {
                let cron = parsed_cron(expr)?;
                let mut cursor = after.with_timezone(&tz);
                // croner moves a fixed time the clocks skip to the end of the gap (02:30 on
                // a spring-forward night becomes 03:00); here a skipped time is skipped, so
                // a match must show the wall clock the pattern names.
                for _ in 0..2 {
                    let next = cron.find_next_occurrence(&cursor, false).ok()?;
                    if cron.is_time_matching(&next).unwrap_or(false) {
                        return Some(next.to_utc());
                    }
                    cursor = next;
                }
                None
            }
        }
    }

    /// `at`, `every` or `cron`: the kind's name as kept.
    pub fn kind(&self) -> &'static str {
        match self {
            Schedule::At { .. } => "at",
            Schedule::Every { .. } => "every",
            Schedule::Cron { .. } => "cron",
        }
    }

    /// How it reads to a person: `once at 2026-11-29 09:00 Europe/Berlin`, `every 2h`,
    /// `cron 0 8 * * 1-5 (Europe/Berlin)`.
    pub fn describe(&self, tz: Tz) -> String {
        match self {
            Schedule::At { at } => {
                format!("once at {} {}", at.with_timezone(&tz).format("%Y-%m-%d %H:%M"), tz.name())
            }
            Schedule::Every { every_secs, .. } => format!("every {}", duration_label(*every_secs)),
            Schedule::Cron { expr } => format!("cron {expr} ({})", tz.name()),
        }
    }
}

/// `90` → `1m30s`, `7200` → `2h`.
pub fn duration_label(secs: u64) -> String {
    let mut label = String::new();
    let mut rest = secs;
    for (unit, size) in [("d", 86_400), ("h", 3_600), ("m", 60), ("s", 1)] {
        if rest >= size {
            label.push_str(&format!("{}{unit}", rest / size));
            rest %= size;
        }
    }
    if label.is_empty() { "0s".to_owned() } else { label }
}

#[cfg(test)]
#[path = "schedule_tests.rs"]
mod tests;
