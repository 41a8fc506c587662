//! `ferry cron list | add | remove | pause | resume | run | runs`: the operator's view of
//! every scheduled job, on the state store, with or without a running gateway. The CLI
//! never fires a job itself: `run` makes it due now, and the gateway's ticker (which looks
//! at the store at least every 30 s) fires it.

use std::sync::Arc;

use anyhow::Context;
use chrono::Utc;
use ferry::config::{DEFAULT_ACCOUNT, Environment};
use ferry::cron::manage::{CronJobs, NewJob, describe};
use ferry::cron::stored;
use ferry::state::{self, jobs::ChatScope, jobs::JobPayload, jobs::JobTarget};
use ferry::types::schedule::When;

use crate::cli::{CronAddArgs, CronCommand, GlobalArgs};
use crate::commands::load_config;

pub async fn run(global: &GlobalArgs, command: CronCommand, env: &Environment) -> anyhow::Result<()> {
    let loaded = load_config(global, env)?;
    let config = Arc::new(loaded.config);
    let state_dir = state::resolve_state_dir(&config, env)?;
    let stores = state::Stores::open(&config, &state_dir).await?;
    let jobs = CronJobs::new(stores.jobs.clone(), config.clone());
    let result = execute(&jobs, command, config.agents.default_id()).await;
    stores.close().await;
    result
}

async fn execute(jobs: &CronJobs, command: CronCommand, default_agent: &str) -> anyhow::Result<()> {
    let now = Utc::now();
    match command {
        CronCommand::List => {
            let list = jobs.list(None).await?;
            if list.is_empty() {
                println!("no scheduled jobs");
            }
            for job in list {
                let chat = format!("{}:{}", job.target.channel, job.target.chat_id);
                println!(
                    "{}  [{} → {chat}, agent {}, by {}]",
                    describe(&job, now),
                    job.payload.kind(),
                    job.agent_id,
                    job.created_by
                );
            }
        }
        CronCommand::Add(args) => {
            let created = jobs.create(new_job(*args, default_agent)?, now).await?;
            println!(
                "added {} \"{}\": next run {} ({} UTC)",
                created.job.id,
                created.job.name,
                created.next_run_local(),
                created.next_run.format("%Y-%m-%d %H:%M:%S")
            );
        }
        CronCommand::Remove { id } => println!("removed {}", jobs.remove(&id, None).await?.id),
        CronCommand::Pause { id } => println!("paused {}", jobs.pause(&id, None).await?.id),
        CronCommand::Resume { id } => {
            let resumed = jobs.resume(&id, None, now).await?;
            println!("resumed {}: next run {}", resumed.job.id, resumed.next_run_local());
        }
        CronCommand::Run { id } => {
            let job = jobs.run_now(&id, None, now).await?;
            println!("{} is due now; the gateway fires it within 30 seconds", job.id);
        }
        CronCommand::Runs { id, limit } => {
            let runs = jobs.runs(&id, None, limit).await?;
            if runs.is_empty() {
                println!("no runs yet");
            }
            for run in runs {
                let slot = stored::instant(run.slot_ms).map(|at| at.format("%Y-%m-%d %H:%M:%S").to_string());
                let mut line = format!("{} UTC  {}", slot.unwrap_or_default(), run.status);
                if run.late {
                    line.push_str("  late");
                }
                if run.delivered {
                    line.push_str("  delivered");
                }
                for extra in [run.error, run.note].into_iter().flatten() {
                    line.push_str(&format!("  ({extra})"));
                }
                println!("{line}");
            }
        }
    }
    Ok(())
}

/// The job `ferry cron add` describes; it belongs to its target chat (which then sees it).
fn new_job(args: CronAddArgs, default_agent: &str) -> anyhow::Result<NewJob> {
    let when = match (args.at, args.r#in, args.every, args.cron) {
        (Some(at), None, None, None) => When::At(at),
        (None, Some(after), None, None) => When::In(after),
        (None, None, Some(every), None) => When::Every(every),
        (None, None, None, Some(cron)) => When::Cron(cron),
        _ => anyhow::bail!("give exactly one of --at, --in, --every or --cron"),
    };
    let payload = match (args.text, args.task) {
        (Some(text), None) => JobPayload::Text(text),
        (None, Some(task)) => JobPayload::Task(task),
        _ => anyhow::bail!("give exactly one of --text (a reminder) or --task"),
    };
    let (channel, chat) = args.to.split_once(':').context("--to must be <channel>:<chat id>, e.g. telegram:42")?;
    let (kind, chat_id) = match chat.split_once(':') {
        Some((kind @ ("direct" | "group" | "channel"), id)) => (kind, id),
        _ => ("direct", chat),
    };
    let account_id = args.account.unwrap_or_else(|| DEFAULT_ACCOUNT.to_owned());
    let channel = channel.to_lowercase();
    Ok(NewJob {
        agent_id: args.agent.unwrap_or_else(|| default_agent.to_owned()),
        when,
        tz: args.tz,
        payload,
        name: args.name,
        owner: "operator".to_owned(),
        created_by: "operator",
        scope: Some(ChatScope {
            channel: channel.clone(),
            account_id: account_id.clone(),
            chat_id: chat_id.to_owned(),
        }),
        target: JobTarget {
            channel,
            account_id,
            chat_id: chat_id.to_owned(),
            chat_kind: kind.to_owned(),
            thread_id: args.thread,
        },
        session_key: None,
    })
}
