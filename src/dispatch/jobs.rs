//! `/remind` and `/jobs` (`cron`): a reminder made from the chat, in the user's zone, and
//! the chat's own scheduled jobs listed with their next run in local time, paused,
//! resumed, run or removed.

use chrono::Utc;
use ferry_channel::InboundMessage;

use super::Dispatcher;
use crate::control::{JobsCommand, RemindCommand};
use crate::cron::manage::{CronJobs, NewJob, describe};
use crate::routing::SessionKey;
use crate::state::jobs::{ChatScope, JobPayload, JobTarget};
use crate::types::schedule::{When, clock_time, local_label};

const REMIND_USAGE: &str = "Usage: /remind in 20m stretch, or /remind at 09:00 standup.";
const JOBS_USAGE: &str = "Usage: /jobs, or /jobs pause|resume|run|rm <id>.";

/// The chat a message came from, as jobs are scoped.
fn scope_of(message: &InboundMessage) -> ChatScope {
    ChatScope {
        channel: message.channel.clone(),
        account_id: message.account_id.clone(),
        chat_id: message.chat.id.clone(),
    }
}

impl Dispatcher {
    fn cron_jobs(&self) -> CronJobs {
        CronJobs::new(self.inner.jobs.clone(), self.inner.config.clone())
    }

    pub(super) async fn remind_command(
        &self,
        command: RemindCommand,
        session_key: &str,
        message: &InboundMessage,
    ) -> String {
        let follows_events = self
            .inner
            .channels
            .get(&message.channel, Some(&message.account_id))
            .is_some_and(|channel| channel.capabilities().replies_via_chat_events);
        if follows_events {
            return "⚠️ Reminders are delivered to chat apps (Telegram, Discord, Slack); this chat cannot be sent to                     when you are away."
                .to_owned();
        }
        let jobs = self.cron_jobs();
        let agent = SessionKey::parse(session_key).map(|key| key.agent_id().to_owned()).unwrap_or_default();
        let now = Utc::now();
        let (when, text) = match command {
            RemindCommand::Invalid(problem) => return format!("{problem}. {REMIND_USAGE}"),
            RemindCommand::In { after, text } => (When::In(after), text),
            RemindCommand::At { clock, text } => {
                let zone = match jobs.zone(&agent, None) {
                    Ok((zone, _)) => zone,
                    Err(error) => return format!("⚠️ {error}"),
                };
                match clock_time(&clock, zone, now) {
                    Ok(at) => (When::At(at.to_rfc3339()), text),
                    Err(error) => return format!("⚠️ {error}. {REMIND_USAGE}"),
                }
            }
        };
        let new = NewJob {
            agent_id: agent,
            when,
            tz: None,
            payload: JobPayload::Text(text),
            name: None,
            owner: message.sender.id.clone(),
            created_by: "user",
            scope: Some(scope_of(message)),
            target: JobTarget {
                channel: message.channel.clone(),
                account_id: message.account_id.clone(),
                chat_id: message.chat.id.clone(),
                chat_kind: message.chat.kind.as_str().to_owned(),
                thread_id: message.thread_id.clone(),
            },
            session_key: None,
        };
        match jobs.create(new, now).await {
            Ok(created) => format!(
                "⏰ I'll remind you at {} (job {}; /jobs rm {} to cancel).",
                local_label(created.next_run, created.tz, now),
                created.job.id,
                created.job.id
            ),
            Err(error) => format!("⚠️ {error}"),
        }
    }

    pub(super) async fn jobs_command(&self, command: JobsCommand, message: &InboundMessage) -> String {
        let jobs = self.cron_jobs();
        let scope = scope_of(message);
        let now = Utc::now();
        let done = match command {
            JobsCommand::Invalid(problem) => return format!("{problem}. {JOBS_USAGE}"),
            JobsCommand::List => {
                return match jobs.list(Some(&scope)).await {
                    Ok(list) if list.is_empty() => "No scheduled jobs in this chat. /remind in 20m … makes one.".into(),
                    Ok(list) => {
                        let lines: Vec<String> = list.iter().map(|job| format!("• {}", describe(job, now))).collect();
                        format!("Scheduled jobs here:\n{}", lines.join("\n"))
                    }
                    Err(error) => format!("⚠️ {error}"),
                };
            }
            JobsCommand::Pause(id) => jobs.pause(&id, Some(&scope)).await.map(|job| format!("⏸️ Paused {}.", job.id)),
            JobsCommand::Resume(id) => jobs.resume(&id, Some(&scope), now).await.map(|created| {
                format!("▶️ Resumed {}; next run {}.", created.job.id, local_label(created.next_run, created.tz, now))
            }),
            JobsCommand::Run(id) => {
                jobs.run_now(&id, Some(&scope), now).await.map(|job| format!("▶️ Running {} now.", job.id))
            }
            JobsCommand::Remove(id) => {
                jobs.remove(&id, Some(&scope)).await.map(|job| format!("🗑️ Removed {}.", job.id))
            }
        };
        done.unwrap_or_else(|error| format!("⚠️ {error}"))
    }
}
