//! `cron`: the agent schedules work — a reminder sent as it is at a time, or a task it runs
//! itself later or again and again — and lists, pauses, resumes, runs and removes the
//! chat's jobs. Each answer says when a job runs next in UTC and in the job's zone, so the
//! model can tell the user "at 09:00 Berlin time" and be right.
//!
//! A chat sees and changes only its own jobs. A scheduled run cannot create jobs unless
//! `cron.scheduled_runs_may_schedule` is on (no runaway loops).

use async_trait::async_trait;
use chrono::Utc;
use ferry_channel::ChatKind;
use schemars::JsonSchema;
use serde::Deserialize;
use serde_json::{Value, json};

use super::{ToolContext, ToolError, ToolOutput, TypedTool, parse_chat};
use crate::cron::manage::{CronJobs, NewJob, describe};
use crate::cron::stored;
use crate::state::jobs::{ChatScope, Job, JobPayload, JobTarget};
use crate::types::schedule::{When, local_rfc3339};

/// Runs `runs` lists at most.
const MAX_RUNS: usize = 50;

#[derive(Debug, Clone, Copy, Deserialize, JsonSchema, PartialEq, Eq)]
#[serde(rename_all = "lowercase")]
pub enum CronAction {
    Add,
    List,
    Remove,
    Pause,
    Resume,
    Run,
    Runs,
}

/// When a job runs: exactly one of `at`, `in`, `every` or `cron`.
#[derive(Debug, Default, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct ScheduleArg {
    /// Once, at this time: ISO-8601, with an offset (`2026-11-29T09:00:00+01:00`) or in the
    /// zone `tz` (`2026-11-29T09:00`).
    pub at: Option<String>,
    /// Once, after this long: `90s`, `20m`, `2h`, `1d`.
    #[serde(rename = "in")]
    pub after: Option<String>,
    /// Again and again, this often (at least `10s`): `30m`, `2h`.
    pub every: Option<String>,
    /// A 5-field cron expression (minute hour day-of-month month day-of-week), read in
    /// `tz`: `0 8 * * 1-5` is 08:00 on weekdays.
    pub cron: Option<String>,
    /// An IANA zone (`Europe/Berlin`); default: the user's configured zone, else the host's.
    pub tz: Option<String>,
}

/// Another chat to deliver to (default: this one).
#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct DeliverTo {
    /// `telegram`, `discord`, `slack`.
    pub channel: String,
    /// The chat id (`group:<id>` / `channel:<id>` for a group or channel).
    pub chat: String,
    pub account: Option<String>,
    pub thread: Option<String>,
}

#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct CronArgs {
    pub action: CronAction,
    /// `add`: when it runs.
    pub schedule: Option<ScheduleArg>,
    /// `add`: a reminder, sent to the chat word for word (no model call). Use this for
    /// "remind me to …".
    pub text: Option<String>,
    /// `add`: a task for you to do when it runs; your final reply then is delivered. Use this
    /// for "every morning, summarize …".
    pub task: Option<String>,
    /// `add`: a short name for the job.
    pub name: Option<String>,
    /// `add`: deliver elsewhere than this chat.
    pub deliver_to: Option<DeliverTo>,
    /// `add`, tasks: `own` (default: a session of the job's own) or `current` (this
    /// conversation, with its history).
    pub session: Option<String>,
    /// `remove`, `pause`, `resume`, `run`, `runs`: the job's id.
    pub id: Option<String>,
}

/// The `cron` tool of one agent.
pub struct CronTool {
    jobs: CronJobs,
    agent_id: String,
    /// `cron.scheduled_runs_may_schedule`.
    scheduled_may_add: bool,
}

impl CronTool {
    pub fn new(jobs: CronJobs, agent_id: impl Into<String>, scheduled_may_add: bool) -> Self {
        Self { jobs, agent_id: agent_id.into(), scheduled_may_add }
    }
}

fn fail(error: impl std::fmt::Display) -> ToolError {
    ToolError::new(error.to_string())
}

fn output(value: Value) -> Result<ToolOutput, ToolError> {
    Ok(ToolOutput::from(value.to_string()))
}

/// The job as the tool shows it.
fn shown(job: &Job) -> Value {
    let (schedule, tz) = match stored::load(&job.schedule) {
        Some((schedule, tz)) => (schedule.describe(tz), Some(tz)),
        None => ("a schedule this version cannot read".to_owned(), None),
    };
    let next = job.next_run_ms.and_then(stored::instant);
    json!({
        "id": job.id,
        "name": job.name,
        "kind": job.payload.kind(),
        "schedule": schedule,
        "state": job.state.as_str(),
        "next_run_utc": next.map(|at| at.to_rfc3339()),
        "next_run_local": next.zip(tz).map(|(at, tz)| local_rfc3339(at, tz)),
        "tz": job.schedule.tz,
        "failures": job.failures,
    })
}

#[async_trait]
impl TypedTool for CronTool {
    type Args = CronArgs;
    const NAME: &'static str = "cron";
    const DESCRIPTION: &'static str = "Schedule work for later in this chat: a reminder (`text`, sent word for word) or \
         a task you do then (`task`, your reply is delivered), once (`at`, `in`) or repeatedly (`every`, `cron`). \
         Actions: add, list, remove, pause, resume, run (now), runs (history). `add` answers when it runs next, in UTC \
         and in the zone it used: tell the user that local time.";
    const MUTATES: bool = true;

    async fn run(&self, args: CronArgs, context: &ToolContext) -> Result<ToolOutput, ToolError> {
        let Some(origin) = &context.origin else {
            return Err(ToolError::new("scheduling needs a chat to belong to; this run has none"));
        };
        let scope = ChatScope {
            channel: origin.channel.clone(),
            account_id: origin.account_id.clone(),
            chat_id: origin.target.chat.id.clone(),
        };
        let now = Utc::now();
        let id = || args.id.as_deref().ok_or_else(|| ToolError::new("`id` is required for this action"));
        match args.action {
            CronAction::Add => self.add(&args, context, scope).await,
            CronAction::List => {
                let jobs = self.jobs.list(Some(&scope)).await.map_err(fail)?;
                output(json!({ "jobs": jobs.iter().map(shown).collect::<Vec<_>>() }))
            }
            CronAction::Remove => {
                let job = self.jobs.remove(id()?, Some(&scope)).await.map_err(fail)?;
                output(json!({ "removed": job.id, "name": job.name }))
            }
            CronAction::Pause => {
                let job = self.jobs.pause(id()?, Some(&scope)).await.map_err(fail)?;
                output(json!({ "paused": job.id, "name": job.name }))
            }
            CronAction::Resume => {
                let resumed = self.jobs.resume(id()?, Some(&scope), now).await.map_err(fail)?;
                output(json!({
                    "resumed": resumed.job.id,
                    "next_run_utc": resumed.next_run.to_rfc3339(),
                    "next_run_local": resumed.next_run_local(),
                    "tz": resumed.tz.name(),
                }))
            }
            CronAction::Run => {
                let job = self.jobs.run_now(id()?, Some(&scope), now).await.map_err(fail)?;
                output(json!({ "running": job.id, "name": job.name }))
            }
            CronAction::Runs => {
                let runs = self.jobs.runs(id()?, Some(&scope), MAX_RUNS).await.map_err(fail)?;
                let runs: Vec<Value> = runs
                    .iter()
                    .map(|run| {
                        json!({
                            "slot_utc": stored::instant(run.slot_ms).map(|at| at.to_rfc3339()),
                            "status": run.status,
                            "late": run.late,
                            "delivered": run.delivered,
                            "error": run.error,
                            "note": run.note,
                        })
                    })
                    .collect();
                output(json!({ "runs": runs }))
            }
        }
    }
}

impl CronTool {
    async fn add(&self, args: &CronArgs, context: &ToolContext, scope: ChatScope) -> Result<ToolOutput, ToolError> {
        if context.run_id.starts_with("cron:") && !self.scheduled_may_add {
            return Err(ToolError::new(
                "a scheduled run cannot create jobs (the operator may allow it: cron.scheduled_runs_may_schedule)",
            ));
        }
        let schedule = args.schedule.as_ref().ok_or_else(|| ToolError::new("`add` needs a `schedule`"))?;
        let when = match (&schedule.at, &schedule.after, &schedule.every, &schedule.cron) {
            (Some(at), None, None, None) => When::At(at.clone()),
            (None, Some(after), None, None) => When::In(after.clone()),
            (None, None, Some(every), None) => When::Every(every.clone()),
            (None, None, None, Some(cron)) => When::Cron(cron.clone()),
            _ => return Err(ToolError::new("`schedule` needs exactly one of `at`, `in`, `every` or `cron`")),
        };
        let payload = match (&args.text, &args.task) {
            (Some(text), None) if !text.trim().is_empty() => JobPayload::Text(text.trim().to_owned()),
            (None, Some(task)) if !task.trim().is_empty() => JobPayload::Task(task.trim().to_owned()),
            _ => return Err(ToolError::new("`add` needs exactly one of `text` (a reminder) or `task`")),
        };
        let origin = context.origin.as_ref().ok_or_else(|| ToolError::new("no chat"))?;
        let target = match &args.deliver_to {
            None => JobTarget {
                channel: origin.channel.clone(),
                account_id: origin.account_id.clone(),
                chat_id: origin.target.chat.id.clone(),
                chat_kind: origin.target.chat.kind.as_str().to_owned(),
                thread_id: origin.target.thread_id.clone(),
            },
            Some(to) => {
                let channel = to.channel.trim().to_lowercase();
                let Some(connected) = context.channels.get(&channel, to.account.as_deref()) else {
                    return Err(ToolError::new(format!(
                        "`deliver_to.channel`: `{channel}` is not connected (connected: {})",
                        context.channels.describe().join(", ")
                    )));
                };
                let chat = parse_chat(&to.chat, ChatKind::Direct)?;
                JobTarget {
                    channel,
                    account_id: connected.account_id().to_owned(),
                    chat_id: chat.id,
                    chat_kind: chat.kind.as_str().to_owned(),
                    thread_id: to.thread.clone(),
                }
            }
        };
        let session_key = match (args.session.as_deref().map(str::trim), &payload) {
            (None | Some("own"), _) => None,
            (Some("current"), JobPayload::Task(_)) => Some(context.session_key.clone()),
            (Some("current"), _) => return Err(ToolError::new("`session`: only a task runs in a session")),
            (Some(other), _) => return Err(ToolError::new(format!("`session`: {other:?} is not `own` or `current`"))),
        };
        let new = NewJob {
            agent_id: self.agent_id.clone(),
            when,
            tz: schedule.tz.clone(),
            payload,
            name: args.name.clone(),
            owner: context.sender_id.clone().unwrap_or_else(|| scope.chat_id.clone()),
            created_by: "agent",
            scope: Some(scope),
            target,
            session_key,
        };
        let now = Utc::now();
        let created = self.jobs.create(new, now).await.map_err(fail)?;
        output(json!({
            "id": created.job.id,
            "name": created.job.name,
            "schedule": describe(&created.job, now),
            "next_run_utc": created.next_run.to_rfc3339(),
            "next_run_local": created.next_run_local(),
            "tz": created.tz.name(),
            "tz_from": created.tz_source.as_str(),
        }))
    }
}
