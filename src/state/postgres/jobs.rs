//! [`JobStore`] on PostgreSQL: `scheduled_jobs` and `scheduled_runs`, shared by every
//! replica.
//!
//! Every replica runs the claim; `FOR UPDATE SKIP LOCKED` hands each due row to one of them,
//! and in the same transaction the fire is recorded as seen and journaled as an inbound
//! message (and its session given a lease row, as any accepted message's is), so a fire is
//! claimed and journaled together or not at all. Due means due by the database's clock.

use async_trait::async_trait;
use deadpool_postgres::Transaction;
use tokio::sync::Notify;
use tokio_postgres::Row;

use super::{PgBackend, pg_error};
use crate::state::StorageError;
use crate::state::inbound::{DEDUPE_WINDOW, SeenKey};
use crate::state::jobs::{
    AddJobError, CLAIM_BATCH, ChatScope, ClaimedFire, FireOutcome, FirePlan, FirePlanner, Job, JobChange, JobFilter,
    JobLimits, JobPayload, JobRun, JobState, JobStats, JobStore, JobTarget, KEEP_RUNS_PER_JOB, PlannedFire,
    RunningFire, StoredSchedule, skip_note,
};

/// Every column of `scheduled_jobs`, in the order [`job_of`] reads them.
const JOB_COLUMNS: &str = "id, agent_id, name, owner, created_by, scope_channel, scope_account, \
    scope_chat, target_channel, target_account, target_chat, target_chat_kind, target_thread, schedule_kind, at_ms, \
    every_secs, anchor_ms, cron_expr, tz, payload_kind, payload, session_key, missed, grace_secs, state, \
    next_run_ms, running_slot_ms, running_seq, running_claimed_ms, failures, last_error, last_alert_hash, \
    last_alert_ms, created_ms";

/// The database's clock, in unix milliseconds.
const NOW_MS: &str = "(extract(epoch from clock_timestamp()) * 1000)::bigint";

/// Scheduled jobs in PostgreSQL.
#[derive(Debug, Clone)]
pub struct PgJobs {
    backend: PgBackend,
    changes: std::sync::Arc<Notify>,
}

impl PgJobs {
    pub fn new(backend: PgBackend) -> Self {
        Self { backend, changes: Default::default() }
    }
}

/// A row of [`JOB_COLUMNS`]; `None` for one this version cannot read (a payload or state
/// of a newer version), which is skipped.
fn job_of(row: &Row) -> Option<Job> {
    let scope = match (row.get::<_, Option<String>>(5), row.get::<_, Option<String>>(6), row.get(7)) {
        (Some(channel), Some(account_id), Some(chat_id)) => Some(ChatScope { channel, account_id, chat_id }),
        _ => None,
    };
    let running = row.get::<_, Option<i64>>(26).map(|slot_ms| RunningFire {
        slot_ms,
        seq: row.get(27),
        claimed_ms: row.get::<_, Option<i64>>(28).unwrap_or(0),
    });
    let alert = match (row.get::<_, Option<String>>(31), row.get::<_, Option<i64>>(32)) {
        (Some(hash), Some(at)) => Some((hash, at)),
        _ => None,
    };
    Some(Job {
        id: row.get(0),
        agent_id: row.get(1),
        name: row.get(2),
        owner: row.get(3),
        created_by: row.get(4),
        scope,
        target: JobTarget {
            channel: row.get(8),
            account_id: row.get(9),
            chat_id: row.get(10),
            chat_kind: row.get(11),
            thread_id: row.get(12),
        },
        schedule: StoredSchedule {
            kind: row.get(13),
            at_ms: row.get(14),
            every_secs: row.get(15),
            anchor_ms: row.get(16),
            cron: row.get(17),
            tz: row.get(18),
        },
        payload: JobPayload::from_parts(row.get(19), row.get(20))?,
        session_key: row.get(21),
        missed: row.get(22),
        grace_secs: row.get(23),
        state: JobState::parse(row.get(24))?,
        next_run_ms: row.get(25),
        running,
        failures: u32::try_from(row.get::<_, i64>(29)).unwrap_or(u32::MAX),
        last_error: row.get(30),
        last_alert: alert,
        created_ms: row.get(33),
    })
}

fn jobs_of(rows: &[Row]) -> Vec<Job> {
    rows.iter().filter_map(job_of).collect()
}

async fn insert_job(transaction: &Transaction<'_>, job: &Job) -> Result<u64, StorageError> {
    let scope = job.scope.as_ref();
    let statement = format!(
        "INSERT INTO scheduled_jobs ({JOB_COLUMNS}, updated_ms) VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, \
         $11, $12, $13, $14, $15, $16, $17, $18, $19, $20, $21, $22, $23, $24, $25, $26, NULL, NULL, NULL, 0, NULL, \
         NULL, NULL, $27, {NOW_MS}) ON CONFLICT (id) DO NOTHING"
    );
    transaction
        .execute(
            &statement,
            &[
                &job.id,
                &job.agent_id,
                &job.name,
                &job.owner,
                &job.created_by,
                &scope.map(|scope| &scope.channel),
                &scope.map(|scope| &scope.account_id),
                &scope.map(|scope| &scope.chat_id),
                &job.target.channel,
                &job.target.account_id,
                &job.target.chat_id,
                &job.target.chat_kind,
                &job.target.thread_id,
                &job.schedule.kind,
                &job.schedule.at_ms,
                &job.schedule.every_secs,
                &job.schedule.anchor_ms,
                &job.schedule.cron,
                &job.schedule.tz,
                &job.payload.kind(),
                &job.payload.text(),
                &job.session_key,
                &job.missed,
                &job.grace_secs,
                &job.state.as_str(),
                &job.next_run_ms,
                &job.created_ms,
            ],
        )
        .await
        .map_err(pg_error)
}

/// Records `fire` as seen and journals it, in `transaction`; its journal id, or `None` if
/// the same fire was seen already (then nothing is journaled).
async fn journal(transaction: &Transaction<'_>, fire: &PlannedFire) -> Result<Option<i64>, StorageError> {
    let SeenKey([channel, account_id, chat_id, thread_id, message_id]) = &fire.key;
    let at = fire.accepted.enqueued_at;
    let cutoff = at - DEDUPE_WINDOW.num_milliseconds();
    let fresh = transaction
        .query_opt(
            "INSERT INTO inbound_seen AS s (channel, account_id, chat_id, thread_id, message_id, seen_at) \
             VALUES ($1, $2, $3, $4, $5, $6) ON CONFLICT (channel, account_id, chat_id, thread_id, message_id) \
             DO UPDATE SET seen_at = excluded.seen_at WHERE s.seen_at <= $7 RETURNING 1",
            &[channel, account_id, chat_id, thread_id, message_id, &at, &cutoff],
        )
        .await
        .map_err(pg_error)?;
    if fresh.is_none() {
        return Ok(None);
    }
    let entry = &fire.accepted;
    let row = transaction
        .query_one(
            "INSERT INTO inbound_journal \
             (channel, account_id, chat_id, thread_id, message_id, session_key, prompt, message, enqueued_at) \
             VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9) RETURNING id",
            &[
                channel,
                account_id,
                chat_id,
                thread_id,
                message_id,
                &entry.session_key,
                &entry.prompt,
                &entry.message,
                &at,
            ],
        )
        .await
        .map_err(pg_error)?;
    // As for any accepted message: its session has a lease row for the replicas to find.
    transaction
        .execute("INSERT INTO session_leases (key) VALUES ($1) ON CONFLICT (key) DO NOTHING", &[&entry.session_key])
        .await
        .map_err(pg_error)?;
    Ok(Some(row.get(0)))
}

#[async_trait]
impl JobStore for PgJobs {
    async fn add(&self, job: &Job, limits: JobLimits) -> Result<(), AddJobError> {
        let result = async {
            let mut client = self.backend.client().await?;
            let transaction = client.transaction().await.map_err(pg_error)?;
            // One add at a time per agent, so two racing for the last place cannot both pass.
            transaction
                .execute("SELECT pg_advisory_xact_lock(hashtext('scheduled_jobs:' || $1))", &[&job.agent_id])
                .await
                .map_err(pg_error)?;
            if let Some(scope) = &job.scope {
                let row = transaction
                    .query_one(
                        "SELECT count(*) FROM scheduled_jobs WHERE scope_channel = $1 AND scope_account = $2 \
                         AND scope_chat = $3 AND state != 'done'",
                        &[&scope.channel, &scope.account_id, &scope.chat_id],
                    )
                    .await
                    .map_err(pg_error)?;
                if row.get::<_, i64>(0) as usize >= limits.per_chat {
                    return Err(AddJobError::ChatFull { limit: limits.per_chat });
                }
            }
            let row = transaction
                .query_one(
                    "SELECT count(*) FROM scheduled_jobs WHERE agent_id = $1 AND state != 'done'",
                    &[&job.agent_id],
                )
                .await
                .map_err(pg_error)?;
            if row.get::<_, i64>(0) as usize >= limits.per_agent {
                return Err(AddJobError::AgentFull { limit: limits.per_agent });
            }
            if insert_job(&transaction, job).await? == 0 {
                return Err(AddJobError::Exists(job.id.clone()));
            }
            transaction.commit().await.map_err(pg_error)?;
            Ok(())
        }
        .await;
        self.changes.notify_one();
        result
    }

    async fn upsert_system(&self, job: &Job) -> Result<(), StorageError> {
        let result = async {
            let mut client = self.backend.client().await?;
            let transaction = client.transaction().await.map_err(pg_error)?;
            if insert_job(&transaction, job).await? == 0 {
                transaction
                    .execute(
                        &format!(
                            "UPDATE scheduled_jobs SET name = $2, target_channel = $3, target_account = $4, \
                             target_chat = $5, target_chat_kind = $6, target_thread = $7, schedule_kind = $8, \
                             at_ms = $9, every_secs = $10, anchor_ms = $11, cron_expr = $12, tz = $13, \
                             payload_kind = $14, payload = $15, session_key = $16, state = 'active', \
                             next_run_ms = CASE WHEN every_secs IS NOT DISTINCT FROM $10 AND tz = $13 \
                                 AND next_run_ms IS NOT NULL THEN next_run_ms ELSE $17 END, \
                             updated_ms = {NOW_MS} WHERE id = $1"
                        ),
                        &[
                            &job.id,
                            &job.name,
                            &job.target.channel,
                            &job.target.account_id,
                            &job.target.chat_id,
                            &job.target.chat_kind,
                            &job.target.thread_id,
                            &job.schedule.kind,
                            &job.schedule.at_ms,
                            &job.schedule.every_secs,
                            &job.schedule.anchor_ms,
                            &job.schedule.cron,
                            &job.schedule.tz,
                            &job.payload.kind(),
                            &job.payload.text(),
                            &job.session_key,
                            &job.next_run_ms,
                        ],
                    )
                    .await
                    .map_err(pg_error)?;
            }
            transaction.commit().await.map_err(pg_error)
        }
        .await;
        self.changes.notify_one();
        result
    }

    async fn get(&self, id: &str) -> Result<Option<Job>, StorageError> {
        let client = self.backend.client().await?;
        let row = client
            .query_opt(&format!("SELECT {JOB_COLUMNS} FROM scheduled_jobs WHERE id = $1"), &[&id])
            .await
            .map_err(pg_error)?;
        Ok(row.as_ref().and_then(job_of))
    }

    async fn list(&self, filter: &JobFilter) -> Result<Vec<Job>, StorageError> {
        let scope = filter.scope.as_ref();
        let client = self.backend.client().await?;
        let rows = client
            .query(
                &format!(
                    "SELECT {JOB_COLUMNS} FROM scheduled_jobs WHERE ($1::text IS NULL OR agent_id = $1) \
                     AND ($2::text IS NULL OR (scope_channel = $2 AND scope_account = $3 AND scope_chat = $4)) \
                     AND ($5 OR state != 'done') ORDER BY next_run_ms IS NULL, next_run_ms, id"
                ),
                &[
                    &filter.agent_id,
                    &scope.map(|scope| &scope.channel),
                    &scope.map(|scope| &scope.account_id),
                    &scope.map(|scope| &scope.chat_id),
                    &filter.include_done,
                ],
            )
            .await
            .map_err(pg_error)?;
        Ok(jobs_of(&rows))
    }

    async fn remove(&self, id: &str) -> Result<bool, StorageError> {
        let result = async {
            let mut client = self.backend.client().await?;
            let transaction = client.transaction().await.map_err(pg_error)?;
            transaction.execute("DELETE FROM scheduled_runs WHERE job_id = $1", &[&id]).await.map_err(pg_error)?;
            let removed =
                transaction.execute("DELETE FROM scheduled_jobs WHERE id = $1", &[&id]).await.map_err(pg_error)?;
            transaction.commit().await.map_err(pg_error)?;
            Ok(removed > 0)
        }
        .await;
        self.changes.notify_one();
        result
    }

    async fn change(&self, id: &str, change: JobChange) -> Result<bool, StorageError> {
        let result = async {
            let client = self.backend.client().await?;
            let changed = match change {
                JobChange::Pause => {
                    let statement = format!(
                        "UPDATE scheduled_jobs SET state = 'paused', updated_ms = {NOW_MS} WHERE id = $1 AND state != 'done'"
                    );
                    client.execute(&statement, &[&id]).await
                }
                JobChange::Resume { next_run_ms } => {
                    let statement = format!(
                        "UPDATE scheduled_jobs SET state = 'active', next_run_ms = $2, failures = 0, \
                         updated_ms = {NOW_MS} WHERE id = $1 AND state != 'done'"
                    );
                    client.execute(&statement, &[&id, &next_run_ms]).await
                }
                JobChange::RunAt { at_ms } => {
                    let statement = format!(
                        "UPDATE scheduled_jobs SET next_run_ms = $2, updated_ms = {NOW_MS} WHERE id = $1 AND state = 'active'"
                    );
                    client.execute(&statement, &[&id, &at_ms]).await
                }
            }
            .map_err(pg_error)?;
            Ok(changed > 0)
        }
        .await;
        self.changes.notify_one();
        result
    }

    async fn next_due(&self) -> Result<Option<i64>, StorageError> {
        let client = self.backend.client().await?;
        let row = client
            .query_one(
                "SELECT min(next_run_ms) FROM scheduled_jobs WHERE state = 'active' AND running_slot_ms IS NULL",
                &[],
            )
            .await
            .map_err(pg_error)?;
        Ok(row.get(0))
    }

    async fn claim_due(&self, planner: &dyn FirePlanner) -> Result<Vec<ClaimedFire>, StorageError> {
        let mut client = self.backend.client().await?;
        let transaction = client.transaction().await.map_err(pg_error)?;
        let now: i64 = transaction.query_one(&format!("SELECT {NOW_MS}"), &[]).await.map_err(pg_error)?.get(0);
        let rows = transaction
            .query(
                &format!(
                    "SELECT {JOB_COLUMNS} FROM scheduled_jobs WHERE state = 'active' AND running_slot_ms IS NULL \
                     AND next_run_ms <= $1 ORDER BY next_run_ms LIMIT $2 FOR UPDATE SKIP LOCKED"
                ),
                &[&now, &(CLAIM_BATCH as i64)],
            )
            .await
            .map_err(pg_error)?;
        let mut claimed = Vec::new();
        for job in jobs_of(&rows) {
            let FirePlan { fire, skipped, next_run_ms } = planner.plan(&job, now);
            if let Some(skipped) = skipped {
                transaction
                    .execute(
                        "INSERT INTO scheduled_runs (job_id, slot_ms, status, started_ms, finished_ms, note) \
                         VALUES ($1, $2, 'skipped', $3, $3, $4)",
                        &[
                            &job.id,
                            &skipped.last_ms,
                            &now,
                            &skip_note(skipped.count, skipped.first_ms, skipped.last_ms),
                        ],
                    )
                    .await
                    .map_err(pg_error)?;
            }
            let seq = match &fire {
                Some(fire) => journal(&transaction, fire).await?,
                None => None,
            };
            if fire.is_some() && seq.is_none() {
                tracing::warn!(job_id = %job.id, "a scheduled fire was journaled already");
            }
            let slot = seq.and(fire.as_ref().map(|fire| fire.slot_ms));
            let done = slot.is_none() && next_run_ms.is_none();
            transaction
                .execute(
                    "UPDATE scheduled_jobs SET next_run_ms = $2, running_slot_ms = $3, running_seq = $4, \
                     running_claimed_ms = CASE WHEN $3::bigint IS NULL THEN NULL ELSE $5::bigint END, \
                     state = CASE WHEN $6 THEN 'done' ELSE state END, updated_ms = $5 WHERE id = $1",
                    &[&job.id, &next_run_ms, &slot, &seq, &now, &done],
                )
                .await
                .map_err(pg_error)?;
            if let (Some(fire), Some(seq)) = (fire, seq) {
                transaction
                    .execute(
                        "INSERT INTO scheduled_runs (job_id, slot_ms, status, started_ms, late) \
                         VALUES ($1, $2, 'running', $3, $4)",
                        &[&job.id, &fire.slot_ms, &now, &fire.late],
                    )
                    .await
                    .map_err(pg_error)?;
                claimed.push(ClaimedFire { job, slot_ms: fire.slot_ms, seq, accepted: fire.accepted });
            }
        }
        transaction.commit().await.map_err(pg_error)?;
        Ok(claimed)
    }

    async fn journal_claimed(
        &self,
        _job_id: &str,
        _fire: &PlannedFire,
        _journaled: Option<i64>,
    ) -> Result<Option<i64>, StorageError> {
        // A claim here is journaled in its own transaction: none is ever left half done.
        Ok(None)
    }

    async fn finish(&self, job_id: &str, slot_ms: i64, outcome: &FireOutcome) -> Result<bool, StorageError> {
        let result = async {
            let mut client = self.backend.client().await?;
            let transaction = client.transaction().await.map_err(pg_error)?;
            let failed = outcome.status == "failed";
            let changed = transaction
                .execute(
                    "UPDATE scheduled_jobs SET running_slot_ms = NULL, running_seq = NULL, running_claimed_ms = NULL, \
                     failures = CASE WHEN $3 THEN failures + 1 WHEN $4 = 'ok' THEN 0 ELSE failures END, \
                     last_error = CASE WHEN $3 THEN $5 ELSE last_error END, \
                     next_run_ms = CASE WHEN $6::bigint IS NOT NULL AND (next_run_ms IS NULL OR $6 < next_run_ms) \
                         THEN $6 ELSE next_run_ms END, \
                     state = CASE WHEN $7 THEN 'paused' \
                         WHEN state = 'active' AND next_run_ms IS NULL AND $6::bigint IS NULL THEN 'done' ELSE state END, \
                     last_alert_hash = COALESCE($8, last_alert_hash), \
                     last_alert_ms = CASE WHEN $8::text IS NULL THEN last_alert_ms ELSE $9::bigint END, updated_ms = $9 \
                     WHERE id = $1 AND running_slot_ms = $2",
                    &[
                        &job_id,
                        &slot_ms,
                        &failed,
                        &outcome.status,
                        &outcome.error,
                        &outcome.retry_at_ms,
                        &outcome.pause,
                        &outcome.alert,
                        &outcome.finished_ms,
                    ],
                )
                .await
                .map_err(pg_error)?;
            transaction
                .execute(
                    "UPDATE scheduled_runs SET status = $3, finished_ms = $4, delivered = $5, error = $6 \
                     WHERE job_id = $1 AND slot_ms = $2 AND status = 'running'",
                    &[&job_id, &slot_ms, &outcome.status, &outcome.finished_ms, &outcome.delivered, &outcome.error],
                )
                .await
                .map_err(pg_error)?;
            transaction.commit().await.map_err(pg_error)?;
            Ok(changed > 0)
        }
        .await;
        self.changes.notify_one();
        result
    }

    async fn running(&self) -> Result<Vec<Job>, StorageError> {
        let client = self.backend.client().await?;
        let rows = client
            .query(
                &format!("SELECT {JOB_COLUMNS} FROM scheduled_jobs WHERE running_slot_ms IS NOT NULL ORDER BY id"),
                &[],
            )
            .await
            .map_err(pg_error)?;
        Ok(jobs_of(&rows))
    }

    async fn runs(&self, job_id: &str, limit: usize) -> Result<Vec<JobRun>, StorageError> {
        let client = self.backend.client().await?;
        let rows = client
            .query(
                "SELECT slot_ms, status, started_ms, finished_ms, delivered, late, error, note \
                 FROM scheduled_runs WHERE job_id = $1 ORDER BY id DESC LIMIT $2",
                &[&job_id, &(limit as i64)],
            )
            .await
            .map_err(pg_error)?;
        Ok(rows
            .iter()
            .map(|row| JobRun {
                slot_ms: row.get(0),
                status: row.get(1),
                started_ms: row.get(2),
                finished_ms: row.get(3),
                delivered: row.get(4),
                late: row.get(5),
                error: row.get(6),
                note: row.get(7),
            })
            .collect())
    }

    async fn prune(&self, before_ms: i64) -> Result<u64, StorageError> {
        let client = self.backend.client().await?;
        let runs = client
            .execute(
                "DELETE FROM scheduled_runs WHERE (started_ms < $1 AND status != 'running') OR id IN ( \
                 SELECT id FROM (SELECT id, row_number() OVER (PARTITION BY job_id ORDER BY id DESC) AS n \
                 FROM scheduled_runs) AS ranked WHERE n > $2)",
                &[&before_ms, &(KEEP_RUNS_PER_JOB as i64)],
            )
            .await
            .map_err(pg_error)?;
        let jobs = client
            .execute("DELETE FROM scheduled_jobs WHERE state = 'done' AND updated_ms < $1", &[&before_ms])
            .await
            .map_err(pg_error)?;
        Ok(runs + jobs)
    }

    fn changes(&self) -> &Notify {
        &self.changes
    }

    async fn stats(&self) -> Result<JobStats, StorageError> {
        let client = self.backend.client().await?;
        let row = client
            .query_one(
                "SELECT count(*) FILTER (WHERE state = 'active'), count(*) FILTER (WHERE state = 'paused'), \
                 count(*) FILTER (WHERE running_slot_ms IS NOT NULL), \
                 min(next_run_ms) FILTER (WHERE state = 'active' AND running_slot_ms IS NULL) FROM scheduled_jobs",
                &[],
            )
            .await
            .map_err(pg_error)?;
        let last_error = client
            .query_opt("SELECT job_id, error FROM scheduled_runs WHERE error IS NOT NULL ORDER BY id DESC LIMIT 1", &[])
            .await
            .map_err(pg_error)?
            .map(|row| (row.get(0), row.get(1)));
        Ok(JobStats {
            active: row.get::<_, i64>(0) as u64,
            paused: row.get::<_, i64>(1) as u64,
            running: row.get::<_, i64>(2) as u64,
            next_due_ms: row.get(3),
            last_error,
        })
    }
}
