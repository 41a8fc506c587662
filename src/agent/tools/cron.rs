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
        let follows_events = context
            .channels
            .get(&target.channel, Some(&target.account_id))
            .is_some_and(|channel| channel.capabilities().replies_via_chat_events);
        if follows_events {
            return Err(ToolError::new(format!(
                "`{}` cannot be sent to when no one is connected; deliver to a chat app with `deliver_to`",
                target.channel
            )));
        }
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

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use chrono::DateTime;
    use ferry_channel::{ChatKind, ChatRef, Target};

    use super::*;
    use crate::agent::tools::Origin;
    use crate::agent::tools::tests::context;
    use crate::channels::ChannelRegistry;
    use crate::config::Config;
    use crate::state::Stores;
    use crate::state::sqlite::Database;

    fn dm(chat: &str) -> Origin {
        Origin {
            channel: "telegram".into(),
            account_id: "default".into(),
            target: Target { chat: ChatRef::new(ChatKind::Direct, chat), thread_id: None },
        }
    }

    async fn cron_tool(config: Config) -> (CronTool, tempfile::TempDir) {
        let dir = tempfile::tempdir().unwrap();
        let stores = Stores::sqlite(&Database::open(dir.path()).await.unwrap());
        let allowed = config.cron.scheduled_runs_may_schedule;
        (CronTool::new(CronJobs::new(stores.jobs.clone(), Arc::new(config)), "main", allowed), dir)
    }

    async fn call(tool: &CronTool, chat: &str, run_id: &str, args: Value) -> Result<Value, String> {
        let mut context = context(Some(dm(chat)), ChannelRegistry::new());
        context.run_id = run_id.into();
        context.sender_id = Some("u1".into());
        let args: CronArgs = serde_json::from_value(args).map_err(|error| error.to_string())?;
        match tool.run(args, &context).await {
            Ok(output) => Ok(serde_json::from_str(&output.text).unwrap()),
            Err(error) => Err(error.0),
        }
    }

    fn add_reminder() -> Value {
        json!({ "action": "add", "schedule": { "in": "20m", "tz": "Europe/Berlin" }, "text": "stretch" })
    }

    #[tokio::test]
    async fn add_answers_the_next_run_in_utc_and_in_the_zone_it_used() {
        let (tool, _dir) = cron_tool(Config::default()).await;
        let added = call(&tool, "42", "run-1", add_reminder()).await.unwrap();
        assert_eq!(added["tz"], "Europe/Berlin");
        assert_eq!(added["tz_from"], "asked");
        let utc = DateTime::parse_from_rfc3339(added["next_run_utc"].as_str().unwrap()).unwrap();
        let local = DateTime::parse_from_rfc3339(added["next_run_local"].as_str().unwrap()).unwrap();
        assert_eq!(utc, local, "the same instant");
        assert!(matches!(local.offset().local_minus_utc(), 3600 | 7200), "Berlin's offset: {local}");
        let listed = call(&tool, "42", "run-2", json!({ "action": "list" })).await.unwrap();
        assert_eq!(listed["jobs"][0]["id"], added["id"]);
        assert_eq!(listed["jobs"][0]["kind"], "text");
    }

    #[tokio::test]
    async fn a_chat_sees_and_changes_only_its_own_jobs() {
        let (tool, _dir) = cron_tool(Config::default()).await;
        let added = call(&tool, "42", "run-1", add_reminder()).await.unwrap();
        let id = added["id"].as_str().unwrap();
        let other = call(&tool, "77", "run-2", json!({ "action": "list" })).await.unwrap();
        assert_eq!(other["jobs"], json!([]), "another chat lists none");
        for action in ["remove", "pause", "resume", "run", "runs"] {
            let refused = call(&tool, "77", "run-3", json!({ "action": action, "id": id })).await.unwrap_err();
            assert!(refused.contains("there is no job"), "{action}: {refused}");
        }
        let paused = call(&tool, "42", "run-4", json!({ "action": "pause", "id": id })).await.unwrap();
        assert_eq!(paused["paused"], id);
        let listed = call(&tool, "42", "run-5", json!({ "action": "list" })).await.unwrap();
        assert_eq!(listed["jobs"][0]["state"], "paused");
    }

    #[tokio::test]
    async fn a_scheduled_run_cannot_create_jobs_unless_the_operator_allows_it() {
        let (tool, _dir) = cron_tool(Config::default()).await;
        let refused = call(&tool, "42", "cron:abc:1750000000000", add_reminder()).await.unwrap_err();
        assert!(refused.contains("scheduled run cannot create jobs"), "{refused}");
        let listed = call(&tool, "42", "cron:abc:1750000000000", json!({ "action": "list" })).await.unwrap();
        assert_eq!(listed["jobs"], json!([]), "listing is fine, and nothing was added");
        let mut config = Config::default();
        config.cron.scheduled_runs_may_schedule = true;
        let (allowed, _dir) = cron_tool(config).await;
        assert!(call(&allowed, "42", "cron:abc:1750000000000", add_reminder()).await.is_ok());
    }

    #[tokio::test]
    async fn bad_requests_are_refused_with_a_reason_the_model_can_pass_on() {
        let mut config = Config::default();
        config.cron.max_jobs_per_chat = 1;
        let (tool, _dir) = cron_tool(config).await;
        let both = json!({ "action": "add", "schedule": { "in": "1m", "every": "1h" }, "text": "x" });
        assert!(
            call(&tool, "42", "r", both).await.unwrap_err().contains("exactly one of `at`, `in`, `every` or `cron`")
        );
        let neither = json!({ "action": "add", "schedule": { "in": "1m" } });
        assert!(call(&tool, "42", "r", neither).await.unwrap_err().contains("`text` (a reminder) or `task`"));
        let gap =
            json!({ "action": "add", "schedule": { "at": "2030-03-31T02:30", "tz": "Europe/Berlin" }, "text": "x" });
        assert!(call(&tool, "42", "r", gap).await.unwrap_err().contains("does not exist in Europe/Berlin"));
        let current_reminder =
            json!({ "action": "add", "schedule": { "in": "1m" }, "text": "x", "session": "current" });
        assert!(call(&tool, "42", "r", current_reminder).await.unwrap_err().contains("only a task runs in a session"));
        call(&tool, "42", "r", add_reminder()).await.unwrap();
        let full = call(&tool, "42", "r", add_reminder()).await.unwrap_err();
        assert!(full.contains("already has 1 scheduled jobs"), "{full}");
        let elsewhere = json!({
            "action": "add", "schedule": { "in": "1m" }, "text": "x",
            "deliver_to": { "channel": "discord", "chat": "5" }
        });
        assert!(call(&tool, "42", "r", elsewhere).await.unwrap_err().contains("`discord` is not connected"));
    }
}
