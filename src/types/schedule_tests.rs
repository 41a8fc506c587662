use chrono_tz::America::New_York;
use chrono_tz::Europe::Berlin;

use super::*;

fn at(text: &str) -> DateTime<Utc> {
    DateTime::parse_from_rfc3339(text).unwrap().to_utc()
}

fn resolve(when: When, tz: Tz, now: &str) -> Result<Schedule, ScheduleError> {
    Schedule::resolve(&when, tz, at(now))
}

/// The next `count` slots of `schedule` after `from`.
fn slots(schedule: &Schedule, tz: Tz, from: &str, count: usize) -> Vec<String> {
    let mut cursor = at(from);
    (0..count)
        .map(|_| {
            cursor = schedule.next_after(tz, cursor).unwrap();
            cursor.to_rfc3339()
        })
        .collect()
}

#[test]
fn durations_read_units_alone_and_combined() {
    let secs = |text: &str| parse_duration(text).map(|duration| duration.as_secs());
    assert_eq!(secs("90s"), Ok(90));
    assert_eq!(secs("20m"), Ok(1_200));
    assert_eq!(secs("2h"), Ok(7_200));
    assert_eq!(secs("1h30m"), Ok(5_400));
    assert_eq!(secs("1d"), Ok(86_400));
    assert_eq!(secs(" 2 H "), Ok(7_200));
    assert_eq!(secs("10 minutes"), Ok(600));
    assert_eq!(secs("1w"), Ok(604_800));
    for bad in ["", "90", "m", "20x", "0s", "-5m", "1.5h", "h2", "99999999999999999999h", "999999999999d", "3m4"] {
        assert_eq!(secs(bad), Err(ScheduleError::InvalidDuration(bad.into())), "{bad:?}");
    }
}

#[test]
fn every_needs_at_least_ten_seconds_and_counts_from_its_creation() {
    assert_eq!(resolve(When::Every("9s".into()), Berlin, "2026-11-28T12:00:00Z"), Err(ScheduleError::TooOften));
    let every = resolve(When::Every("10s".into()), Berlin, "2026-11-28T12:00:00Z").unwrap();
    assert_eq!(every, Schedule::Every { every_secs: 10, anchor: at("2026-11-28T12:00:00Z") });
    assert_eq!(every.first_run(Berlin, at("2026-11-28T12:00:00Z")), Some(at("2026-11-28T12:00:10Z")));
    // Off the grid, the next slot is still on it.
    assert_eq!(every.next_after(Berlin, at("2026-11-28T12:00:25Z")), Some(at("2026-11-28T12:00:30Z")));
    assert_eq!(every.next_after(Berlin, at("2026-11-28T12:00:30Z")), Some(at("2026-11-28T12:00:40Z")));
}

#[test]
fn at_reads_offsets_and_local_times_in_the_zone() {
    let now = "2026-11-28T12:00:00Z";
    let once = |text: &str, tz| resolve(When::At(text.into()), tz, now);
    let expected = Schedule::At { at: at("2026-11-29T08:00:00Z") };
    assert_eq!(once("2026-11-29T09:00:00+01:00", New_York), Ok(expected.clone()));
    assert_eq!(once("2026-11-29T08:00:00Z", Berlin), Ok(expected.clone()));
    assert_eq!(once("2026-11-29T09:00", Berlin), Ok(expected.clone()));
    assert_eq!(once("2026-11-29T09:00:00", Berlin), Ok(expected.clone()));
    assert_eq!(once("2026-11-29 09:00", Berlin), Ok(expected));
    assert_eq!(once("2026-11-29 09:00", New_York), Ok(Schedule::At { at: at("2026-11-29T14:00:00Z") }));
    assert!(matches!(once("tomorrow at nine", Berlin), Err(ScheduleError::InvalidTime(_))));
    assert_eq!(once("2026-11-28T09:00", Berlin), Err(ScheduleError::Past("09:00 Europe/Berlin".into())));
    let after = resolve(When::In("20m".into()), Berlin, now).unwrap();
    assert_eq!(after, Schedule::At { at: at("2026-11-28T12:20:00Z") });
}

#[test]
fn a_local_time_a_dst_change_skips_or_repeats_is_refused_in_both_zones() {
    let now = "2027-01-01T00:00:00Z";
    let once = |text: &str, tz| resolve(When::At(text.into()), tz, now);
    // Berlin springs forward 02:00 → 03:00 on 2027-03-28 and falls back 03:00 → 02:00 on 2027-10-31.
    assert!(matches!(once("2027-03-28T02:30", Berlin), Err(ScheduleError::NonexistentLocal { .. })));
    assert!(matches!(once("2027-10-31T02:30", Berlin), Err(ScheduleError::AmbiguousLocal { .. })));
    // New York: 2027-03-14 02:00 → 03:00, 2027-11-07 02:00 → 01:00.
    assert!(matches!(once("2027-03-14T02:30", New_York), Err(ScheduleError::NonexistentLocal { .. })));
    assert!(matches!(once("2027-11-07T01:30", New_York), Err(ScheduleError::AmbiguousLocal { .. })));
    // With an offset there is no doubt.
    assert_eq!(once("2027-11-07T01:30:00-05:00", New_York), Ok(Schedule::At { at: at("2027-11-07T06:30:00Z") }));
    let error = once("2027-10-31T02:30", Berlin).unwrap_err().to_string();
    assert!(error.contains("happens twice in Europe/Berlin") && error.contains("offset"), "{error}");
}

#[test]
fn cron_takes_five_fields_weekday_names_sunday_as_0_or_7_and_l() {
    let now = "2026-11-28T12:00:00Z"; // a Saturday
    let cron = |expr: &str| resolve(When::Cron(expr.into()), chrono_tz::UTC, now);
    let sunday = |expr: &str| cron(expr).unwrap().first_run(chrono_tz::UTC, at(now));
    assert_eq!(sunday("0 9 * * 0"), Some(at("2026-11-29T09:00:00Z")));
    assert_eq!(sunday("0 9 * * 7"), Some(at("2026-11-29T09:00:00Z")));
    assert_eq!(sunday("0 9 * * SUN"), Some(at("2026-11-29T09:00:00Z")));
    assert_eq!(sunday("0 8 * * MON-FRI"), Some(at("2026-11-30T08:00:00Z")));
    assert_eq!(sunday("0 12 L * *"), Some(at("2026-11-30T12:00:00Z")), "the last day of November");
    assert_eq!(cron("0 0 29 2 *").unwrap().first_run(chrono_tz::UTC, at(now)), Some(at("2028-02-29T00:00:00Z")));
    assert_eq!(cron("0 0 31 2 *"), Err(ScheduleError::NeverFires));
    assert_eq!(cron("0 0 9 * * *"), Err(ScheduleError::CronFields { expr: "0 0 9 * * *".into(), fields: 6 }));
    assert_eq!(cron("31 2 *"), Err(ScheduleError::CronFields { expr: "31 2 *".into(), fields: 3 }));
    assert!(matches!(cron("61 * * * *"), Err(ScheduleError::InvalidCron { .. })));
    assert!(matches!(cron("* * * * FOO"), Err(ScheduleError::InvalidCron { .. })));
}

#[test]
fn cron_crosses_dst_in_berlin_skipping_a_skipped_hour_and_firing_a_repeated_one_once() {
    let nightly = Schedule::Cron { expr: "30 2 * * *".into() };
    // Spring: 02:30 does not exist on 2027-03-28, so that night has no run.
    assert_eq!(
        slots(&nightly, Berlin, "2027-03-26T12:00:00Z", 3),
        [
            "2027-03-27T01:30:00+00:00", // 02:30 CET
            "2027-03-29T00:30:00+00:00", // 02:30 CEST
            "2027-03-30T00:30:00+00:00",
        ]
    );
    // Autumn: 02:30 happens twice on 2027-10-31; it runs once.
    assert_eq!(
        slots(&nightly, Berlin, "2027-10-29T12:00:00Z", 3),
        [
            "2027-10-30T00:30:00+00:00", // 02:30 CEST
            "2027-10-31T00:30:00+00:00", // the first 02:30
            "2027-11-01T01:30:00+00:00", // 02:30 CET
        ]
    );
    // Hourly runs follow real hours: none in the skipped hour, two in the repeated one.
    let hourly = Schedule::Cron { expr: "0 * * * *".into() };
    assert_eq!(
        slots(&hourly, Berlin, "2027-03-28T00:30:00Z", 2),
        ["2027-03-28T01:00:00+00:00", "2027-03-28T02:00:00+00:00"]
    );
    assert_eq!(
        slots(&hourly, Berlin, "2027-10-31T00:30:00Z", 2),
        ["2027-10-31T01:00:00+00:00", "2027-10-31T02:00:00+00:00"]
    );
}

#[test]
fn cron_crosses_dst_in_new_york_too() {
    let nightly = Schedule::Cron { expr: "30 2 * * *".into() };
    assert_eq!(
        slots(&nightly, New_York, "2027-03-13T12:00:00Z", 2),
        [
            "2027-03-15T06:30:00+00:00", // 2027-03-14 has no 02:30
            "2027-03-16T06:30:00+00:00",
        ]
    );
    let early = Schedule::Cron { expr: "30 1 * * *".into() };
    // 01:30 happens twice on 2027-11-07; it runs once, at the first.
    assert_eq!(
        slots(&early, New_York, "2027-11-06T12:00:00Z", 2),
        ["2027-11-07T05:30:00+00:00", "2027-11-08T06:30:00+00:00",]
    );
}

#[test]
fn every_is_a_pure_interval_across_dst() {
    let every = Schedule::Every { every_secs: 3600, anchor: at("2027-03-28T00:00:00Z") };
    assert_eq!(
        slots(&every, Berlin, "2027-03-28T00:00:00Z", 3),
        ["2027-03-28T01:00:00+00:00", "2027-03-28T02:00:00+00:00", "2027-03-28T03:00:00+00:00",]
    );
}

#[test]
fn zones_are_iana_names_and_the_host_zone_is_found_in_order() {
    assert_eq!(parse_zone("Europe/Berlin"), Ok(Berlin));
    assert_eq!(parse_zone("Mars/Olympus"), Err(ScheduleError::UnknownZone("Mars/Olympus".into())));
    let root = tempfile::tempdir().unwrap();
    assert_eq!(zone_of_host(None, root.path()), Tz::UTC, "nothing: UTC");
    std::fs::create_dir_all(root.path().join("etc")).unwrap();
    std::os::unix::fs::symlink("/usr/share/zoneinfo/America/New_York", root.path().join("etc/localtime")).unwrap();
    assert_eq!(zone_of_host(None, root.path()), New_York, "the localtime link");
    std::fs::write(root.path().join("etc/timezone"), "Europe/Berlin\n").unwrap();
    assert_eq!(zone_of_host(None, root.path()), Berlin, "/etc/timezone first");
    assert_eq!(zone_of_host(Some(":Asia/Tokyo"), root.path()), chrono_tz::Asia::Tokyo, "TZ first of all");
    assert_eq!(zone_of_host(Some("nonsense"), root.path()), Berlin, "an unknown TZ is passed over");
}

#[test]
fn clock_times_are_today_if_ahead_else_tomorrow() {
    let now = at("2026-11-28T07:30:00Z"); // 08:30 in Berlin
    assert_eq!(clock_time("09:00", Berlin, now), Ok(at("2026-11-28T08:00:00Z")));
    assert_eq!(clock_time("08:00", Berlin, now), Ok(at("2026-11-29T07:00:00Z")));
    assert_eq!(clock_time("9pm", Berlin, now), Ok(at("2026-11-28T20:00:00Z")));
    assert_eq!(clock_time("9:30am", Berlin, now), Ok(at("2026-11-28T08:30:00Z")));
    assert_eq!(clock_time("12am", Berlin, now), Ok(at("2026-11-28T23:00:00Z")));
    for bad in ["25:00", "9", "9:5", "13pm", "noon"] {
        assert!(matches!(clock_time(bad, Berlin, now), Err(ScheduleError::InvalidClock(_))), "{bad}");
    }
    // A time the clocks skip becomes the first instant after the gap.
    let before_spring = at("2027-03-27T12:00:00Z");
    assert_eq!(clock_time("02:30", Berlin, before_spring), Ok(at("2027-03-28T01:00:00Z")));
}

#[test]
fn times_read_in_the_zone_with_their_date_when_not_today() {
    let now = at("2026-11-28T12:00:00Z");
    assert_eq!(local_label(at("2026-11-28T20:00:00Z"), Berlin, now), "21:00 Europe/Berlin");
    assert_eq!(local_label(at("2026-11-29T08:00:00Z"), Berlin, now), "2026-11-29 09:00 Europe/Berlin");
    assert_eq!(local_rfc3339(at("2026-11-29T08:00:00Z"), Berlin), "2026-11-29T09:00:00+01:00");
    assert_eq!(Schedule::Every { every_secs: 5_400, anchor: now }.describe(Berlin), "every 1h30m");
    assert_eq!(Schedule::Cron { expr: "0 8 * * 1-5".into() }.describe(Berlin), "cron 0 8 * * 1-5 (Europe/Berlin)");
    assert_eq!(Schedule::At { at: now }.describe(Berlin), "once at 2026-11-28 13:00 Europe/Berlin");
}
