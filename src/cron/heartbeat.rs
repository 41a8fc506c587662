//! The heartbeat: a system job per agent (`[agents.defaults.heartbeat]`) that lets the agent
//! speak first when something needs attention, without burning tokens when nothing does.
//!
//! - It reads `HEARTBEAT.md` from the agent's workspace at each beat and makes no model call
//!   while the file is missing, empty or only headings ([`gate`]); nor outside its active
//!   hours.
//! - A beat is skipped while the target chat's session is busy ([`busy`]).
//! - A reply that is only `HEARTBEAT_OK` (or `NO_REPLY`) sends nothing ([`strip_ok`]), and
//!   the same alert is not sent twice within a day ([`ALERT_DEDUPE_MS`]).
//! - It runs in a session of its own (`agent:<id>:heartbeat`), so it never keeps the target
//!   chat's session from expiring.

use std::hash::{Hash, Hasher};
use std::path::Path;

use chrono::{DateTime, NaiveTime, Utc};
use ferry_channel::{ClientRequest, InboundMessage};

use super::stored;
use crate::config::{ActiveHours, Config};
use crate::dispatch::Dispatcher;
use crate::state::jobs::{Job, JobPayload, JobState, JobTarget};
use crate::types::schedule::{Schedule, host_zone, parse_clock, parse_duration, parse_zone};

/// The file the heartbeat reads, in the agent's workspace.
pub const HEARTBEAT_FILE: &str = "HEARTBEAT.md";
/// The answer that means "nothing needs attention": it sends nothing.
pub const HEARTBEAT_OK: &str = "HEARTBEAT_OK";
/// The same alert is not sent again within this long.
pub const ALERT_DEDUPE_MS: i64 = 24 * 60 * 60 * 1000;

/// What a beat asks when the operator set no `prompt`.
pub const DEFAULT_PROMPT: &str = "Heartbeat. Read the HEARTBEAT.md checklist below and follow it. Only if something \
     there needs the user's attention now, write them a short message about it. Otherwise reply with exactly \
     HEARTBEAT_OK.";

/// The heartbeat job's id for an agent.
pub fn job_id(agent_id: &str) -> String {
    format!("heartbeat:{agent_id}")
}

/// Each agent's heartbeat job as the config asks for it: `Ok` to keep, `Err(id)` to remove
/// (its heartbeat is off).
pub fn jobs(config: &Config, now: DateTime<Utc>) -> Vec<Result<Job, String>> {
    config
        .agents
        .ids()
        .into_iter()
        .map(|agent| {
            let settings = config.agents.settings_of(agent);
            let beat = &settings.heartbeat;
            let id = job_id(agent);
            let (Some(every), Some((channel, chat))) =
                (beat.every.as_deref(), beat.target.as_deref().and_then(|target| target.split_once(':')))
            else {
                return Err(id);
            };
            // The config's checks passed these already.
            let Ok(every) = parse_duration(every) else { return Err(id) };
            let tz = settings.user_timezone.as_deref().and_then(|zone| parse_zone(zone).ok()).unwrap_or_else(host_zone);
            let schedule = Schedule::Every { every_secs: every.as_secs(), anchor: now };
            let next = schedule.first_run(tz, now);
            let channel = channel.to_lowercase();
            let account_id = beat.account.clone().unwrap_or_else(|| crate::config::DEFAULT_ACCOUNT.to_owned());
            Ok(Job {
                id,
                agent_id: agent.to_owned(),
                name: "heartbeat".to_owned(),
                owner: "system".to_owned(),
                created_by: "system".to_owned(),
                scope: None,
                target: JobTarget {
                    channel,
                    account_id,
                    chat_id: chat.to_owned(),
                    chat_kind: "direct".to_owned(),
                    thread_id: beat.thread.clone(),
                },
                schedule: stored::store(&schedule, tz),
                payload: JobPayload::Heartbeat(beat.prompt.clone().unwrap_or_else(|| DEFAULT_PROMPT.to_owned())),
                session_key: None,
                // A beat missed while down is not worth catching up.
                missed: "skip".to_owned(),
                grace_secs: None,
                state: JobState::Active,
                next_run_ms: next.map(|at| at.timestamp_millis()),
                running: None,
                failures: 0,
                last_error: None,
                last_alert: None,
                created_ms: now.timestamp_millis(),
            })
        })
        .collect()
}

/// Why a heartbeat fire should not run now: its target chat's session is busy (a run or
/// messages waiting in this process). `None` for any other job, or a free chat.
pub fn busy(dispatcher: &Dispatcher, job: &Job, message: &InboundMessage) -> Option<String> {
    if !matches!(job.payload, JobPayload::Heartbeat(_)) {
        return None;
    }
    let mut chat_message = message.clone();
    chat_message.request = Some(ClientRequest { agent_id: Some(job.agent_id.clone()), ..ClientRequest::default() });
    let key = dispatcher.session_key_of(&chat_message);
    let status = dispatcher.scheduler().status(key.as_str());
    (status.running || status.queued > 0).then(|| "the target chat was busy".to_owned())
}

/// What a beat gets to work with: `HEARTBEAT.md`'s text, or why it makes no model call.
pub fn gate(
    workspace: &Path,
    hours: Option<&ActiveHours>,
    user_tz: Option<&str>,
    now: DateTime<Utc>,
) -> Result<String, String> {
    if let Some(hours) = hours
        && !within(hours, user_tz, now)
    {
        return Err("outside the heartbeat's active hours".to_owned());
    }
    let text = std::fs::read_to_string(workspace.join(HEARTBEAT_FILE)).unwrap_or_default();
    if has_tasks(&text) { Ok(text) } else { Err(format!("{HEARTBEAT_FILE} has nothing to do")) }
}

/// Whether a checklist has anything in it besides headings and blank lines (and HTML
/// comments, which templates leave).
pub fn has_tasks(text: &str) -> bool {
    let mut in_comment = false;
    text.lines().map(str::trim).any(|line| {
        if in_comment {
            in_comment = !line.contains("-->");
            return false;
        }
        if line.starts_with("<!--") {
            in_comment = !line.contains("-->");
            return false;
        }
        !(line.is_empty() || line.starts_with('#'))
    })
}

/// Whether `now` falls in the active hours (an `end` before `start` spans midnight).
pub fn within(hours: &ActiveHours, user_tz: Option<&str>, now: DateTime<Utc>) -> bool {
    let tz = hours.tz.as_deref().or(user_tz).and_then(|zone| parse_zone(zone).ok()).unwrap_or_else(host_zone);
    let (Ok(start), Ok(end)) = (parse_clock(&hours.start), parse_clock(&hours.end)) else { return true };
    let local: NaiveTime = now.with_timezone(&tz).time();
    if start <= end { local >= start && local < end } else { local >= start || local < end }
}

/// The reply with the `HEARTBEAT_OK` token taken out; empty when that was all of it.
pub fn strip_ok(text: &str) -> String {
    let stripped = text.replace(HEARTBEAT_OK, "");
    let trimmed = stripped.trim_matches(|c: char| c.is_whitespace() || matches!(c, '.' | '*' | '`' | '!'));
    if trimmed.is_empty() { String::new() } else { stripped.trim().to_owned() }
}

/// A short fingerprint of an alert, for the day-long dedupe.
pub fn alert_hash(text: &str) -> String {
    let mut hasher = std::hash::DefaultHasher::new();
    text.trim().hash(&mut hasher);
    format!("{:016x}", hasher.finish())
}

/// Whether `text` repeats the job's last alert within [`ALERT_DEDUPE_MS`].
pub fn repeats(job: &Job, text: &str, now_ms: i64) -> bool {
    job.last_alert.as_ref().is_some_and(|(hash, at)| *hash == alert_hash(text) && now_ms - at < ALERT_DEDUPE_MS)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_headings_blank_lines_and_comments_are_nothing_to_do() {
        assert!(!has_tasks(""));
        assert!(!has_tasks("# Heartbeat\n\n## Checks\n   \n"));
        assert!(!has_tasks("# Heartbeat\n<!-- add tasks\nbelow -->\n"));
        assert!(has_tasks("# Heartbeat\n- check the build\n"));
        assert!(has_tasks("look at the inbox"));
    }

    #[test]
    fn heartbeat_ok_alone_sends_nothing_and_an_alert_keeps_its_words() {
        assert_eq!(strip_ok("HEARTBEAT_OK"), "");
        assert_eq!(strip_ok("  **HEARTBEAT_OK**. "), "");
        assert_eq!(strip_ok("The build is red.\nHEARTBEAT_OK"), "The build is red.");
        assert_eq!(strip_ok("The build is red."), "The build is red.");
    }

    #[test]
    fn active_hours_span_midnight_when_end_comes_first() {
        let at = |hour: u32| DateTime::parse_from_rfc3339(&format!("2026-11-28T{hour:02}:30:00Z")).unwrap().to_utc();
        let day = ActiveHours { start: "08:00".into(), end: "22:00".into(), tz: Some("UTC".into()) };
        assert!(within(&day, None, at(8)) && within(&day, None, at(21)));
        assert!(!within(&day, None, at(22)) && !within(&day, None, at(3)));
        let night = ActiveHours { start: "22:00".into(), end: "06:00".into(), tz: Some("UTC".into()) };
        assert!(within(&night, None, at(23)) && within(&night, None, at(2)));
        assert!(!within(&night, None, at(12)));
        // In Berlin (UTC+1 in November) 07:30 UTC is 08:30.
        let berlin = ActiveHours { tz: None, ..day };
        assert!(within(&berlin, Some("Europe/Berlin"), at(7)));
        assert!(!within(&berlin, Some("UTC"), at(7)));
    }

    #[test]
    fn an_alert_repeats_only_within_a_day() {
        let mut config = Config::default();
        config.agents.defaults.heartbeat.every = Some("30m".into());
        config.agents.defaults.heartbeat.target = Some("telegram:42".into());
        let mut job = jobs(&config, Utc::now()).remove(0).expect("a heartbeat job");
        assert_eq!((job.id.as_str(), job.target.chat_id.as_str()), ("heartbeat:main", "42"));
        assert!(jobs(&Config::default(), Utc::now())[0].is_err(), "off without `every`");
        assert!(!repeats(&job, "The build is red.", 1_000));
        job.last_alert = Some((alert_hash("The build is red."), 1_000));
        assert!(repeats(&job, "The build is red. ", 1_000 + ALERT_DEDUPE_MS - 1));
        assert!(!repeats(&job, "The build is red.", 1_000 + ALERT_DEDUPE_MS));
        assert!(!repeats(&job, "The deploy failed.", 2_000));
    }
}
