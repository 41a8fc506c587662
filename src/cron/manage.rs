//! Making and changing jobs, for the `cron` tool, the chat commands and `ferry cron`: the
//! schedule checked and its zone chosen, limits enforced by the store, and a chat kept to
//! its own jobs. Every change wakes the ticker (the store's [`JobStore::changes`]), so a job
//! due sooner than it was sleeping for fires on time.

use std::sync::Arc;

use chrono::{DateTime, Utc};
use chrono_tz::Tz;
use rand::Rng;

use super::stored;
use crate::config::Config;
use crate::state::StorageError;
use crate::state::jobs::{
    AddJobError, ChatScope, Job, JobChange, JobFilter, JobLimits, JobPayload, JobRun, JobState, JobStore, JobTarget,
};
use crate::types::schedule::{Schedule, ScheduleError, When, host_zone, local_label, local_rfc3339, parse_zone};

/// Why a job could not be made or found; worded for the person (or model) who asked.
#[derive(Debug, thiserror::Error)]
pub enum CronError {
    #[error("{0}")]
    Schedule(#[from] ScheduleError),
    #[error("{0}")]
    Add(#[from] AddJobError),
    #[error("there is no job `{0}` here")]
    NotFound(String),
    #[error("job `{0}` has already fired and is done")]
    Done(String),
    #[error("scheduled jobs cannot be read right now: {0}")]
    Storage(#[from] StorageError),
}

/// Where a job's zone came from, so the model can say so.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ZoneSource {
    /// The request named it.
    Asked,
    /// The agent's `user_timezone`.
    Agent,
    /// Neither: the host's.
    Host,
}

impl ZoneSource {
    pub fn as_str(self) -> &'static str {
        match self {
            ZoneSource::Asked => "asked",
            ZoneSource::Agent => "user_timezone",
            ZoneSource::Host => "host",
        }
    }
}

/// A job to make.
#[derive(Debug, Clone)]
pub struct NewJob {
    pub agent_id: String,
    pub when: When,
    /// An IANA zone the request named.
    pub tz: Option<String>,
    pub payload: JobPayload,
    pub name: Option<String>,
    /// Who asks: a sender id, or `operator`.
    pub owner: String,
    /// `user`, `agent` or `operator`.
    pub created_by: &'static str,
    /// The chat it belongs to (`None`: the operator's).
    pub scope: Option<ChatScope>,
    pub target: JobTarget,
    /// The session a task runs in (`None`: its own).
    pub session_key: Option<String>,
}

/// A job made: it, and when it runs, said both ways.
#[derive(Debug, Clone)]
pub struct Created {
    pub job: Job,
    pub next_run: DateTime<Utc>,
    pub tz: Tz,
    pub tz_source: ZoneSource,
}

impl Created {
    /// The next run in the job's zone, RFC 3339.
    pub fn next_run_local(&self) -> String {
        local_rfc3339(self.next_run, self.tz)
    }
}

/// Jobs as people and the operator see them: the store and the limits.
#[derive(Clone)]
pub struct CronJobs {
    store: Arc<dyn JobStore>,
    config: Arc<Config>,
}

impl std::fmt::Debug for CronJobs {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("CronJobs").finish_non_exhaustive()
    }
}

impl CronJobs {
    pub fn new(store: Arc<dyn JobStore>, config: Arc<Config>) -> Self {
        Self { store, config }
    }

    pub fn store(&self) -> &Arc<dyn JobStore> {
        &self.store
    }

    /// The zone a job of `agent_id` is read in: the one asked for, else the agent's
    /// `user_timezone`, else the host's.
    pub fn zone(&self, agent_id: &str, asked: Option<&str>) -> Result<(Tz, ZoneSource), ScheduleError> {
        if let Some(asked) = asked.map(str::trim).filter(|asked| !asked.is_empty()) {
            return Ok((parse_zone(asked)?, ZoneSource::Asked));
        }
        match self.config.agents.settings_of(agent_id).user_timezone.as_deref().map(parse_zone) {
            Some(Ok(zone)) => Ok((zone, ZoneSource::Agent)),
            _ => Ok((host_zone(), ZoneSource::Host)),
        }
    }

    fn limits(&self) -> JobLimits {
        JobLimits { per_chat: self.config.cron.max_jobs_per_chat, per_agent: self.config.cron.max_jobs_per_agent }
    }

    /// Checks the schedule and adds the job.
    pub async fn create(&self, new: NewJob, now: DateTime<Utc>) -> Result<Created, CronError> {
        let (tz, tz_source) = self.zone(&new.agent_id, new.tz.as_deref())?;
        let schedule = Schedule::resolve(&new.when, tz, now)?;
        let next_run = schedule.first_run(tz, now).ok_or(ScheduleError::NeverFires)?;
        let id = new_id();
        let name = new.name.map(|name| name.trim().to_owned()).filter(|name| !name.is_empty());
        let name = name.unwrap_or_else(|| default_name(&new.payload));
        let job = Job {
            id,
            agent_id: new.agent_id,
            name,
            owner: new.owner,
            created_by: new.created_by.to_owned(),
            scope: new.scope,
            target: new.target,
            schedule: stored::store(&schedule, tz),
            payload: new.payload,
            session_key: new.session_key,
            missed: "run_once".to_owned(),
            grace_secs: None,
            state: JobState::Active,
            next_run_ms: Some(next_run.timestamp_millis()),
            running: None,
            failures: 0,
            last_error: None,
            last_alert: None,
            created_ms: now.timestamp_millis(),
        };
        self.store.add(&job, self.limits()).await?;
        Ok(Created { job, next_run, tz, tz_source })
    }

    /// The jobs of a chat (`scope`), or every job (`None`, the operator).
    pub async fn list(&self, scope: Option<&ChatScope>) -> Result<Vec<Job>, CronError> {
        Ok(self.store.list(&JobFilter { scope: scope.cloned(), ..JobFilter::default() }).await?)
    }

    /// The job `id`, if `scope` may see it (`None`: the operator sees every job).
    pub async fn find(&self, id: &str, scope: Option<&ChatScope>) -> Result<Job, CronError> {
        let id = id.trim();
        match self.store.get(id).await? {
            Some(job) if scope.is_none() || job.scope.as_ref() == scope => Ok(job),
            _ => Err(CronError::NotFound(id.to_owned())),
        }
    }

    pub async fn remove(&self, id: &str, scope: Option<&ChatScope>) -> Result<Job, CronError> {
        let job = self.find(id, scope).await?;
        self.store.remove(&job.id).await?;
        Ok(job)
    }

    pub async fn pause(&self, id: &str, scope: Option<&ChatScope>) -> Result<Job, CronError> {
        let job = self.find(id, scope).await?;
        if !self.store.change(&job.id, JobChange::Pause).await? {
            return Err(CronError::Done(job.id));
        }
        Ok(job)
    }

    /// Active again, due at its next slot from now (a one-shot whose time passed: now).
    pub async fn resume(&self, id: &str, scope: Option<&ChatScope>, now: DateTime<Utc>) -> Result<Created, CronError> {
        let job = self.find(id, scope).await?;
        let (schedule, tz) = stored::load(&job.schedule).ok_or(ScheduleError::NeverFires)?;
        let next_run = schedule.first_run(tz, now).unwrap_or(now).max(now);
        if !self.store.change(&job.id, JobChange::Resume { next_run_ms: next_run.timestamp_millis() }).await? {
            return Err(CronError::Done(job.id));
        }
        Ok(Created { job, next_run, tz, tz_source: ZoneSource::Asked })
    }

    /// Fires the job at the next tick (its schedule carries on after).
    pub async fn run_now(&self, id: &str, scope: Option<&ChatScope>, now: DateTime<Utc>) -> Result<Job, CronError> {
        let job = self.find(id, scope).await?;
        if !self.store.change(&job.id, JobChange::RunAt { at_ms: now.timestamp_millis() }).await? {
            return Err(CronError::Done(job.id));
        }
        Ok(job)
    }

    pub async fn runs(&self, id: &str, scope: Option<&ChatScope>, limit: usize) -> Result<Vec<JobRun>, CronError> {
        let job = self.find(id, scope).await?;
        Ok(self.store.runs(&job.id, limit).await?)
    }
}

/// How a job reads in a listing: id, name, state, schedule and next run in its zone.
pub fn describe(job: &Job, now: DateTime<Utc>) -> String {
    let Some((schedule, tz)) = stored::load(&job.schedule) else {
        return format!("{} \"{}\": a schedule this version cannot read", job.id, job.name);
    };
    let next = match (job.state, job.next_run_ms.and_then(stored::instant)) {
        (JobState::Paused, _) => "paused".to_owned(),
        (JobState::Done, _) | (_, None) => "done".to_owned(),
        (JobState::Active, Some(next)) => format!("next {}", local_label(next, tz, now)),
    };
    format!("{} \"{}\": {} ({next})", job.id, job.name, schedule.describe(tz))
}

/// A job id: short enough to type in `/jobs rm <id>`, random enough never to repeat.
fn new_id() -> String {
    const ALPHABET: &[u8] = b"abcdefghjkmnpqrstuvwxyz23456789";
    let mut rng = rand::rng();
    (0..8).map(|_| char::from(ALPHABET[rng.random_range(0..ALPHABET.len())])).collect()
}

/// A name from what the job does: its first words.
fn default_name(payload: &JobPayload) -> String {
    let words: Vec<&str> = payload.text().split_whitespace().take(6).collect();
    let name = words.join(" ");
    if name.chars().count() > 48 { name.chars().take(47).chain(['…']).collect() } else { name }
}
