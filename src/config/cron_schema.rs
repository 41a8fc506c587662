//! `[cron]` (scheduled jobs: how many, and who may make them) and
//! `[agents.defaults.heartbeat]` (the agent speaking first when `HEARTBEAT.md` asks it to),
//! with their checks. What a schedule means is `types::schedule`'s.

use serde::{Deserialize, Serialize};

use super::Violation;
use crate::types::schedule::{MIN_EVERY, parse_clock, parse_duration, parse_zone};

/// `[cron]`: scheduled jobs (reminders, recurring tasks).
#[derive(Debug, Clone, PartialEq, Deserialize, Serialize)]
#[serde(default, deny_unknown_fields)]
pub struct CronConfig {
    /// Fire jobs at all. Off: jobs are kept, and fire once it is on again (late, or skipped
    /// past their grace).
    pub enabled: bool,
    /// Jobs one chat may have (active or paused).
    pub max_jobs_per_chat: usize,
    /// Jobs one agent may have, over all its chats.
    pub max_jobs_per_agent: usize,
    /// A scheduled run may create jobs itself (the `cron` tool inside a fire). Off by
    /// default: a job that schedules jobs is a runaway loop waiting to happen.
    pub scheduled_runs_may_schedule: bool,
}

impl Default for CronConfig {
    fn default() -> Self {
        Self { enabled: true, max_jobs_per_chat: 50, max_jobs_per_agent: 10_000, scheduled_runs_may_schedule: false }
    }
}

/// `[agents.defaults.heartbeat]`: a system job per agent that reads `HEARTBEAT.md` from the
/// workspace every `every` and tells `target` what needs attention. No model call is made
/// while the file is missing, empty or only headings.
#[derive(Debug, Clone, Default, PartialEq, Deserialize, Serialize)]
#[serde(default, deny_unknown_fields)]
pub struct HeartbeatConfig {
    /// How often (`"30m"`); unset: no heartbeat.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub every: Option<String>,
    /// `"<channel>:<chat id>"`, e.g. `"telegram:42"`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub target: Option<String>,
    /// The target's bot account, when the channel has several.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub account: Option<String>,
    /// A thread (a Telegram forum topic, a Slack thread) in the target chat.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub thread: Option<String>,
    /// Beats only inside these hours; unset: around the clock.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub active_hours: Option<ActiveHours>,
    /// What the agent is asked each beat; unset: the built-in prompt.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub prompt: Option<String>,
    /// `PROVIDER/MODEL` for the beats (a cheaper one); unset: the agent's.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub model: Option<String>,
}

impl HeartbeatConfig {
    /// Nothing set: no heartbeat (and nothing to show in `ferry config show`).
    pub fn is_off(&self) -> bool {
        *self == Self::default()
    }
}

/// Local hours the heartbeat may beat in: from `start` to `end` (`"08:00"`, `"22:00"`; an
/// `end` before `start` spans midnight), in `tz` (else the agent's `user_timezone`).
#[derive(Debug, Clone, Default, PartialEq, Deserialize, Serialize)]
#[serde(default, deny_unknown_fields)]
pub struct ActiveHours {
    pub start: String,
    pub end: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub tz: Option<String>,
}

/// Checks an agent's `user_timezone` and `heartbeat` (`prefix` is its table's path).
pub(super) fn validate_agent(
    prefix: &str,
    user_timezone: Option<&str>,
    heartbeat: &HeartbeatConfig,
) -> Result<(), Violation> {
    if let Some(zone) = user_timezone {
        parse_zone(zone).map_err(|error| Violation::new(format!("{prefix}.user_timezone"), error.to_string()))?;
    }
    let key = |name: &str| format!("{prefix}.heartbeat.{name}");
    let Some(every) = &heartbeat.every else { return Ok(()) };
    let interval = parse_duration(every).map_err(|error| Violation::new(key("every"), error.to_string()))?;
    if interval < MIN_EVERY {
        return Err(Violation::new(key("every"), format!("must be at least {} seconds", MIN_EVERY.as_secs())));
    }
    match heartbeat.target.as_deref().and_then(|target| target.split_once(':')) {
        Some((channel, chat)) if !channel.is_empty() && !chat.is_empty() => {}
        _ => {
            return Err(Violation::new(
                key("target"),
                "the heartbeat needs a target chat, \"<channel>:<chat id>\" (e.g. \"telegram:42\")",
            ));
        }
    }
    if let Some(hours) = &heartbeat.active_hours {
        for (name, value) in [("start", &hours.start), ("end", &hours.end)] {
            parse_clock(value)
                .map_err(|error| Violation::new(key(&format!("active_hours.{name}")), error.to_string()))?;
        }
        if let Some(zone) = &hours.tz {
            parse_zone(zone).map_err(|error| Violation::new(key("active_hours.tz"), error.to_string()))?;
        }
    }
    Ok(())
}
