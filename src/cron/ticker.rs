//! The ticker: one task per process that fires due jobs. It sleeps until the next job is
//! due, or until a change wakes it ([`JobStore::changes`]), or at most [`MAX_SLEEP`]
//! (another process — `ferry cron add`, another replica — may have changed the jobs), so it
//! does no busy polling. Each tick claims the due fires ([`JobStore::claim_due`]) and hands
//! each to the dispatcher like an accepted message.
//!
//! It also keeps the jobs honest: at start and every [`SWEEP_EVERY`] it completes a claim a
//! crash or a failed write left half done (SQLite), and it finishes fires whose journal
//! entry was answered without a report (a crash between the reply and the report, a
//! `/stop`), so no job is stuck "running" forever.

use std::collections::HashSet;
use std::sync::Arc;
use std::time::Duration;

use chrono::Utc;
use ferry_channel::InboundMessage;
use tokio::task::JoinHandle;

use super::fire::{Planner, planned};
use super::heartbeat;
use super::outcome::{Ended, record};
use super::stored;
use crate::config::Config;
use crate::dispatch::Dispatcher;
use crate::queue::QueuedMessage;
use crate::state::InboundStore;
use crate::state::inbound::LoggedMessage;
use crate::state::jobs::{ClaimedFire, JobStore, KEEP_RUNS_MS};

/// The longest the ticker sleeps without looking at the store.
pub const MAX_SLEEP: Duration = Duration::from_secs(30);
/// How often fires that ended without a report are looked for.
pub const SWEEP_EVERY: Duration = Duration::from_secs(60);
/// A fire younger than this is not swept (its report may be on its way).
const SWEEP_AFTER_MS: i64 = 60_000;
/// How often the `/healthz` summary is refreshed (it counts every job).
const HEALTH_EVERY: Duration = Duration::from_secs(10);
/// How often old runs and done jobs are pruned.
const PRUNE_EVERY: Duration = Duration::from_secs(3600);
/// The wait after the store failed, before trying again.
const RETRY_AFTER_ERROR: Duration = Duration::from_secs(5);

/// What the ticker works with.
pub struct Ticker {
    pub jobs: Arc<dyn JobStore>,
    pub inbound: Arc<dyn InboundStore>,
    pub dispatcher: Dispatcher,
    pub config: Arc<Config>,
}

impl Ticker {
    /// Starts the ticker; call it once the dispatcher has read what the last process left
    /// over ([`Dispatcher::left_over`]), so a fire journaled now is not taken for one of those.
    pub fn start(self) -> JoinHandle<()> {
        tokio::spawn(self.run())
    }

    async fn run(self) {
        self.keep_system_jobs().await;
        if let Err(error) = self.complete_half_claims(i64::MAX).await {
            tracing::warn!(%error, "cannot look for scheduled fires a crash left half claimed");
        }
        let mut last_sweep = tokio::time::Instant::now();
        let mut last_prune = tokio::time::Instant::now() - PRUNE_EVERY;
        let mut last_health: Option<tokio::time::Instant> = None;
        loop {
            let sleep = match self.tick().await {
                Ok(sleep) => sleep,
                Err(error) => {
                    tracing::warn!(%error, "the scheduler cannot reach the jobs store; trying again shortly");
                    RETRY_AFTER_ERROR
                }
            };
            if last_sweep.elapsed() >= SWEEP_EVERY {
                last_sweep = tokio::time::Instant::now();
                if let Err(error) = self.sweep().await {
                    tracing::warn!(%error, "cannot look for scheduled fires that ended unrecorded");
                }
            }
            if last_health.is_none_or(|at| at.elapsed() >= HEALTH_EVERY) {
                last_health = Some(tokio::time::Instant::now());
                self.refresh_health().await;
            }
            if last_prune.elapsed() >= PRUNE_EVERY {
                last_prune = tokio::time::Instant::now();
                let before = Utc::now().timestamp_millis() - KEEP_RUNS_MS;
                if let Err(error) = self.jobs.prune(before).await {
                    tracing::warn!(%error, "cannot prune old scheduled runs");
                }
            }
            tokio::select! {
                () = tokio::time::sleep(sleep) => {}
                () = self.jobs.changes().notified() => {}
            }
        }
    }

    /// Fires what is due; returns how long to sleep until the next job is.
    async fn tick(&self) -> Result<Duration, crate::state::StorageError> {
        if self.config.cron.enabled {
            loop {
                let claimed = self.jobs.claim_due(&Planner).await?;
                let full = claimed.len() >= crate::state::jobs::CLAIM_BATCH;
                for fire in claimed {
                    self.submit(fire).await;
                }
                if !full {
                    break;
                }
            }
        }
        let now = Utc::now().timestamp_millis();
        Ok(match self.jobs.next_due().await? {
            Some(due) if due <= now => Duration::from_millis(10),
            Some(due) => Duration::from_millis(u64::try_from(due - now).unwrap_or(0)).min(MAX_SLEEP),
            None => MAX_SLEEP,
        })
    }

    /// Refreshes the scheduler's `/healthz` entry: how many jobs, when the next is due,
    /// and the last error a fire reported.
    async fn refresh_health(&self) {
        let health = match self.jobs.stats().await {
            Ok(stats) => serde_json::json!({
                "enabled": self.config.cron.enabled,
                "activeJobs": stats.active,
                "pausedJobs": stats.paused,
                "running": stats.running,
                "nextDue": stats.next_due_ms.and_then(stored::instant).map(|at| at.to_rfc3339()),
                "lastError": stats.last_error.map(|(job, error)| serde_json::json!({ "job": job, "error": error })),
            }),
            Err(error) => serde_json::json!({ "enabled": self.config.cron.enabled, "error": error.to_string() }),
        };
        self.dispatcher.set_health_entry("scheduler", health);
    }

    /// Hands a journaled fire to its session's lane (here, or the replica holding it).
    async fn submit(&self, fire: ClaimedFire) {
        let message: InboundMessage = match serde_json::from_str(&fire.accepted.message) {
            Ok(message) => message,
            Err(error) => {
                tracing::error!(job_id = %fire.job.id, %error, "a scheduled fire's message cannot be read back");
                return;
            }
        };
        if let Some(scheduled) = message.request.as_ref().and_then(|request| request.scheduled.as_ref())
            && let Some(why) = heartbeat::busy(&self.dispatcher, &fire.job, &message)
        {
            record(self.jobs.as_ref(), scheduled, Ended::Skipped { why }).await;
            if let Err(error) = self.inbound.answered(&[fire.seq]).await {
                tracing::warn!(%error, "cannot drop a skipped heartbeat from the journal");
            }
            return;
        }
        let enqueued_at = stored::instant(fire.accepted.enqueued_at).unwrap_or_else(Utc::now);
        tracing::info!(job_id = %fire.job.id, slot_ms = fire.slot_ms, "a scheduled job fires");
        self.dispatcher
            .submit_scheduled(QueuedMessage {
                id: fire.seq,
                session_key: fire.accepted.session_key,
                message,
                prompt: fire.accepted.prompt,
                enqueued_at,
            })
            .await;
    }

    /// Keeps each agent's heartbeat job in step with the config.
    async fn keep_system_jobs(&self) {
        for job in heartbeat::jobs(&self.config, Utc::now()) {
            match job {
                Ok(job) => {
                    if let Err(error) = self.jobs.upsert_system(&job).await {
                        tracing::warn!(job_id = %job.id, %error, "cannot keep the heartbeat job");
                    }
                }
                Err(id) => {
                    if let Err(error) = self.jobs.remove(&id).await {
                        tracing::warn!(job_id = %id, %error, "cannot remove a heartbeat that is off now");
                    }
                }
            }
        }
    }

    /// Journals the fires a crash left claimed but not journaled (SQLite's two writes), or
    /// records the journal id of those it journaled before it died. Only claims made before
    /// `before_ms` count (the sweep leaves a claim this very tick makes alone).
    async fn complete_half_claims(&self, before_ms: i64) -> Result<(), crate::state::StorageError> {
        let half: Vec<_> = self
            .jobs
            .running()
            .await?
            .into_iter()
            .filter(|job| job.running.is_some_and(|fire| fire.seq.is_none() && fire.claimed_ms < before_ms))
            .collect();
        if half.is_empty() {
            return Ok(());
        }
        let pending = self.inbound.unanswered().await?.messages;
        let now = Utc::now();
        for job in half {
            let (Some(running), Some((schedule, tz)), Some(slot)) =
                (job.running, stored::load(&job.schedule), job.running.and_then(|fire| stored::instant(fire.slot_ms)))
            else {
                continue;
            };
            let fire = planned(&job, &schedule, tz, slot, now, None);
            let message_id = &fire.key.0[4];
            let journaled = pending.iter().find(|logged| message_id_of(logged).as_deref() == Some(message_id.as_str()));
            match self.jobs.journal_claimed(&job.id, &fire, journaled.map(|logged| logged.seq)).await? {
                // Journaled before the crash: the dispatcher's restore runs it.
                Some(_) if journaled.is_some() => {}
                Some(seq) => {
                    let claimed = ClaimedFire { job, slot_ms: running.slot_ms, seq, accepted: fire.accepted };
                    self.submit(claimed).await;
                }
                None => {}
            }
        }
        Ok(())
    }

    /// Finishes fires whose journal entry is gone (answered or dropped) without a report.
    async fn sweep(&self) -> Result<(), crate::state::StorageError> {
        let cutoff = Utc::now().timestamp_millis() - SWEEP_AFTER_MS;
        // A claim whose journaling failed (the log could not be written) is completed here.
        self.complete_half_claims(cutoff).await?;
        let stale: Vec<_> = self
            .jobs
            .running()
            .await?
            .into_iter()
            .filter(|job| job.running.is_some_and(|fire| fire.seq.is_some() && fire.claimed_ms < cutoff))
            .collect();
        if stale.is_empty() {
            return Ok(());
        }
        let pending: HashSet<i64> = self.inbound.unanswered().await?.messages.iter().map(|logged| logged.seq).collect();
        for job in stale {
            let Some(fire) = job.running else { continue };
            if fire.seq.is_some_and(|seq| pending.contains(&seq)) {
                continue;
            }
            let scheduled = ferry_channel::ScheduledFire {
                job_id: job.id.clone(),
                slot_ms: fire.slot_ms,
                kind: job.payload.kind().to_owned(),
                name: job.name.clone(),
            };
            let why = "its run ended without a report (a restart or /stop came between)".to_owned();
            tracing::info!(job_id = %job.id, "a scheduled fire ended unrecorded; recording it");
            record(self.jobs.as_ref(), &scheduled, Ended::Skipped { why }).await;
        }
        Ok(())
    }
}

/// The platform message id a journaled message carries.
fn message_id_of(logged: &LoggedMessage) -> Option<String> {
    let value: serde_json::Value = serde_json::from_str(&logged.entry.message).ok()?;
    value.get("message_id")?.as_str().map(str::to_owned)
}
