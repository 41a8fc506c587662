//! [`JobStore`] on the SQLite state database: `scheduled_jobs` and `scheduled_runs`.
//!
//! One process owns the database, so a claim is a plain update of the due rows. The fire's
//! inbound message goes to the inbound log, a second write: the claim is made first (the
//! job's `running_slot_ms`, and its run's row), then the message is journaled, then its
//! journal id is kept on the run's row (`scheduled_runs.seq`, read back as the job's
//! `running_seq`). A crash between the two leaves a claimed fire without an id, which
//! `cron` finds at start and completes through [`JobStore::journal_claimed`]; a fire cannot
//! run before its id is kept, so it is never journaled twice.
//!
//! The id goes on the run's row, not the job's, because a claim's runs are consecutive rows
//! of one or two pages while its jobs are scattered over as many pages as there are fires:
//! keeping it there halves the pages a claim writes (`benches/cron.rs`).

use std::sync::Arc;

use async_trait::async_trait;
use chrono::Utc;
use rusqlite::{Connection, OptionalExtension, Row, params};
use tokio::sync::Notify;

use super::Database;
use crate::state::inbound::{DEDUPE_WINDOW, MessageKey, SeenKey};
use crate::state::jobs::{
    AddJobError, CLAIM_BATCH, ChatScope, ClaimedFire, FireOutcome, FirePlan, FirePlanner, Job, JobChange, JobFilter,
    JobLimits, JobPayload, JobRun, JobState, JobStats, JobStore, JobTarget, KEEP_RUNS_PER_JOB, PlannedFire,
    RunningFire, StoredSchedule, skip_note,
};
use crate::state::{InboundStore, StorageError};

/// Every column of `scheduled_jobs`, in the order [`job_of`] reads them (to write a job;
/// read one with [`read_columns`]).
pub(crate) const JOB_COLUMNS: &str = "id, agent_id, name, owner, created_by, scope_channel, scope_account, \
    scope_chat, target_channel, target_account, target_chat, target_chat_kind, target_thread, schedule_kind, at_ms, \
    every_secs, anchor_ms, cron_expr, tz, payload_kind, payload, session_key, missed, grace_secs, state, \
    next_run_ms, running_slot_ms, running_seq, running_claimed_ms, failures, last_error, last_alert_hash, \
    last_alert_ms, created_ms";

/// The journal id of a job's fire in flight: on its run's row (see the module docs). The
/// `scheduled_jobs.running_seq` column of schema versions before 9 is no longer written.
const RUNNING_SEQ: &str = "CASE WHEN running_slot_ms IS NULL THEN NULL ELSE (SELECT r.seq FROM scheduled_runs r \
    WHERE r.job_id = scheduled_jobs.id AND r.slot_ms = scheduled_jobs.running_slot_ms AND r.status = 'running' \
    ORDER BY r.id DESC LIMIT 1) END";

/// How a `SELECT … FROM scheduled_jobs` reads a job's `running_seq`.
pub fn running_seq_expression() -> &'static str {
    RUNNING_SEQ
}

/// [`JOB_COLUMNS`] as a `SELECT … FROM scheduled_jobs` reads them.
pub(crate) fn read_columns() -> &'static str {
    static COLUMNS: std::sync::LazyLock<String> =
        std::sync::LazyLock::new(|| JOB_COLUMNS.replacen("running_seq", RUNNING_SEQ, 1));
    &COLUMNS
}

impl From<rusqlite::Error> for AddJobError {
    fn from(error: rusqlite::Error) -> Self {
        AddJobError::Storage(error.into())
    }
}

/// Scheduled jobs in `ferry.db`; their fires are journaled in the inbound log.
#[derive(Clone)]
pub struct SqliteJobs {
    database: Database,
    inbound: Arc<dyn InboundStore>,
    changes: Arc<Notify>,
}

impl std::fmt::Debug for SqliteJobs {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SqliteJobs").finish_non_exhaustive()
    }
}

impl SqliteJobs {
    pub fn new(database: Database) -> Self {
        let inbound = database.inbound_store();
        Self { database, inbound, changes: Arc::default() }
    }

    /// Journals `fire` in the inbound log and keeps its id on the job.
    async fn journal(&self, job_id: &str, fire: &PlannedFire) -> Result<Option<i64>, StorageError> {
        let Some(seq) = self.accept(job_id, fire).await? else { return Ok(None) };
        self.mark_journaled(vec![(job_id.to_owned(), fire.slot_ms, seq)]).await?;
        Ok(Some(seq))
    }

    /// Journals `fire` in the inbound log; `None` if it was journaled already (a claim
    /// completed twice: the journal runs that one).
    async fn accept(&self, job_id: &str, fire: &PlannedFire) -> Result<Option<i64>, StorageError> {
        let SeenKey([channel, account_id, chat_id, thread_id, message_id]) = &fire.key;
        let key = MessageKey { channel, account_id, chat_id, thread_id, message_id };
        let at = fire.accepted.enqueued_at;
        let seq = self.inbound.accept(&key, at, at - DEDUPE_WINDOW.num_milliseconds(), &fire.accepted).await?;
        if seq.is_none() {
            tracing::warn!(job_id, slot_ms = fire.slot_ms, "a scheduled fire was journaled already");
        }
        Ok(seq)
    }

    /// Keeps each fire's journal id on its job, `(job id, slot, id)`, in one write; how
    /// many were still in flight.
    async fn mark_journaled(&self, marks: Vec<(String, i64, i64)>) -> Result<usize, StorageError> {
        if marks.is_empty() {
            // A tick with nothing due writes nothing.
            return Ok(0);
        }
        self.database
            .write(move |connection| {
                let mut statement = connection.prepare_cached(
                    "UPDATE scheduled_runs SET seq = ?3 WHERE job_id = ?1 AND slot_ms = ?2 AND status = 'running'",
                )?;
                let mut changed = 0;
                for (job_id, slot_ms, seq) in &marks {
                    changed += statement.execute(params![job_id, slot_ms, seq])?;
                }
                Ok(changed)
            })
            .await
    }
}

/// Reads a row of [`JOB_COLUMNS`].
pub(crate) fn job_of(row: &Row<'_>) -> rusqlite::Result<Job> {
    let scope = match (row.get::<_, Option<String>>(5)?, row.get::<_, Option<String>>(6)?, row.get(7)?) {
        (Some(channel), Some(account_id), Some(chat_id)) => Some(ChatScope { channel, account_id, chat_id }),
        _ => None,
    };
    let payload_kind: String = row.get(19)?;
    let payload = JobPayload::from_parts(&payload_kind, row.get(20)?)
        .ok_or_else(|| rusqlite::Error::InvalidColumnType(19, payload_kind, rusqlite::types::Type::Text))?;
    let state: String = row.get(24)?;
    let state = JobState::parse(&state)
        .ok_or_else(|| rusqlite::Error::InvalidColumnType(24, state, rusqlite::types::Type::Text))?;
    let running = row
        .get::<_, Option<i64>>(26)?
        .map(|slot_ms| -> rusqlite::Result<RunningFire> {
            Ok(RunningFire { slot_ms, seq: row.get(27)?, claimed_ms: row.get::<_, Option<i64>>(28)?.unwrap_or(0) })
        })
        .transpose()?;
    let alert = match (row.get::<_, Option<String>>(31)?, row.get::<_, Option<i64>>(32)?) {
        (Some(hash), Some(at)) => Some((hash, at)),
        _ => None,
    };
    Ok(Job {
        id: row.get(0)?,
        agent_id: row.get(1)?,
        name: row.get(2)?,
        owner: row.get(3)?,
        created_by: row.get(4)?,
        scope,
        target: JobTarget {
            channel: row.get(8)?,
            account_id: row.get(9)?,
            chat_id: row.get(10)?,
            chat_kind: row.get(11)?,
            thread_id: row.get(12)?,
        },
        schedule: StoredSchedule {
            kind: row.get(13)?,
            at_ms: row.get(14)?,
            every_secs: row.get(15)?,
            anchor_ms: row.get(16)?,
            cron: row.get(17)?,
            tz: row.get(18)?,
        },
        payload,
        session_key: row.get(21)?,
        missed: row.get(22)?,
        grace_secs: row.get(23)?,
        state,
        next_run_ms: row.get(25)?,
        running,
        failures: row.get(29)?,
        last_error: row.get(30)?,
        last_alert: alert,
        created_ms: row.get(33)?,
    })
}

fn insert_job(connection: &Connection, job: &Job, now: i64) -> rusqlite::Result<usize> {
    let scope = job.scope.as_ref();
    connection.execute(
        &format!(
            "INSERT INTO scheduled_jobs ({JOB_COLUMNS}, updated_ms) VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, \
             ?10, ?11, ?12, ?13, ?14, ?15, ?16, ?17, ?18, ?19, ?20, ?21, ?22, ?23, ?24, ?25, ?26, NULL, NULL, \
             NULL, 0, NULL, NULL, NULL, ?27, ?28) ON CONFLICT (id) DO NOTHING"
        ),
        params![
            job.id,
            job.agent_id,
            job.name,
            job.owner,
            job.created_by,
            scope.map(|scope| &scope.channel),
            scope.map(|scope| &scope.account_id),
            scope.map(|scope| &scope.chat_id),
            job.target.channel,
            job.target.account_id,
            job.target.chat_id,
            job.target.chat_kind,
            job.target.thread_id,
            job.schedule.kind,
            job.schedule.at_ms,
            job.schedule.every_secs,
            job.schedule.anchor_ms,
            job.schedule.cron,
            job.schedule.tz,
            job.payload.kind(),
            job.payload.text(),
            job.session_key,
            job.missed,
            job.grace_secs,
            job.state.as_str(),
            job.next_run_ms,
            job.created_ms,
            now,
        ],
    )
}

/// Claims the due jobs and records what `planner` made of them; the fires to journal.
fn claim(
    connection: &mut Connection,
    planner: &dyn FirePlanner,
    now: i64,
) -> rusqlite::Result<Vec<(Job, PlannedFire)>> {
    let transaction = connection.transaction()?;
    // The batch size is written into the statement: SQLite plans with a LIMIT's value, so
    // a bound one has the statement compiled again at every claim.
    let due: Vec<Job> = transaction
        .prepare_cached(&format!(
            "SELECT {} FROM scheduled_jobs WHERE state = 'active' AND running_slot_ms IS NULL \
             AND next_run_ms <= ?1 ORDER BY next_run_ms LIMIT {CLAIM_BATCH}",
            read_columns()
        ))?
        .query_map(params![now], job_of)?
        .collect::<rusqlite::Result<_>>()?;
    let mut fires = Vec::new();
    for job in due {
        let FirePlan { fire, skipped, next_run_ms } = planner.plan(&job, now);
        if let Some(skipped) = skipped {
            transaction
                .prepare_cached(
                    "INSERT INTO scheduled_runs (job_id, slot_ms, status, started_ms, finished_ms, note) \
                     VALUES (?1, ?2, 'skipped', ?3, ?3, ?4)",
                )?
                .execute(params![
                    job.id,
                    skipped.last_ms,
                    now,
                    skip_note(skipped.count, skipped.first_ms, skipped.last_ms)
                ])?;
        }
        let slot = fire.as_ref().map(|fire| fire.slot_ms);
        let done = fire.is_none() && next_run_ms.is_none();
        // Cached: a claim runs these once per due job, and compiling them cost more than
        // running them (`benches/cron.rs`).
        transaction
            .prepare_cached(
                "UPDATE scheduled_jobs SET next_run_ms = ?2, running_slot_ms = ?3, running_seq = NULL, \
                 running_claimed_ms = CASE WHEN ?3 IS NULL THEN NULL ELSE ?4 END, \
                 state = CASE WHEN ?5 THEN 'done' ELSE state END, updated_ms = ?4 WHERE id = ?1",
            )?
            .execute(params![job.id, next_run_ms, slot, now, done])?;
        if let Some(fire) = fire {
            transaction
                .prepare_cached(
                    "INSERT INTO scheduled_runs (job_id, slot_ms, status, started_ms, late) \
                     VALUES (?1, ?2, 'running', ?3, ?4)",
                )?
                .execute(params![job.id, fire.slot_ms, now, fire.late])?;
            fires.push((job, fire));
        }
    }
    transaction.commit()?;
    Ok(fires)
}

fn run_of(row: &Row<'_>) -> rusqlite::Result<JobRun> {
    Ok(JobRun {
        slot_ms: row.get(0)?,
        status: row.get(1)?,
        started_ms: row.get(2)?,
        finished_ms: row.get(3)?,
        delivered: row.get(4)?,
        late: row.get(5)?,
        error: row.get(6)?,
        note: row.get(7)?,
    })
}

#[async_trait]
impl JobStore for SqliteJobs {
    async fn add(&self, job: &Job, limits: JobLimits) -> Result<(), AddJobError> {
        let result = async {
            let job = job.clone();
            self.database
                .write(move |connection| {
                    if let Some(scope) = &job.scope {
                        let in_chat: i64 = connection.query_row(
                            "SELECT count(*) FROM scheduled_jobs WHERE scope_channel = ?1 AND scope_account = ?2 \
                             AND scope_chat = ?3 AND state != 'done'",
                            params![scope.channel, scope.account_id, scope.chat_id],
                            |row| row.get(0),
                        )?;
                        if in_chat as usize >= limits.per_chat {
                            return Err(AddJobError::ChatFull { limit: limits.per_chat });
                        }
                    }
                    let of_agent: i64 = connection.query_row(
                        "SELECT count(*) FROM scheduled_jobs WHERE agent_id = ?1 AND state != 'done'",
                        [&job.agent_id],
                        |row| row.get(0),
                    )?;
                    if of_agent as usize >= limits.per_agent {
                        return Err(AddJobError::AgentFull { limit: limits.per_agent });
                    }
                    match insert_job(connection, &job, Utc::now().timestamp_millis())? {
                        0 => Err(AddJobError::Exists(job.id.clone())),
                        _ => Ok(()),
                    }
                })
                .await
        }
        .await;
        self.changes.notify_one();
        result
    }

    async fn upsert_system(&self, job: &Job) -> Result<(), StorageError> {
        let result = async {
            let job = job.clone();
            self.database
                .write(move |connection| {
                    let now = Utc::now().timestamp_millis();
                    if insert_job(connection, &job, now)? == 0 {
                        connection.execute(
                            "UPDATE scheduled_jobs SET name = ?2, target_channel = ?3, target_account = ?4, \
                             target_chat = ?5, target_chat_kind = ?6, target_thread = ?7, schedule_kind = ?8, \
                             at_ms = ?9, every_secs = ?10, anchor_ms = ?11, cron_expr = ?12, tz = ?13, \
                             payload_kind = ?14, payload = ?15, session_key = ?16, state = 'active', \
                             next_run_ms = CASE WHEN every_secs IS ?10 AND tz = ?13 AND next_run_ms IS NOT NULL \
                                 THEN next_run_ms ELSE ?17 END, updated_ms = ?18 WHERE id = ?1",
                            params![
                                job.id,
                                job.name,
                                job.target.channel,
                                job.target.account_id,
                                job.target.chat_id,
                                job.target.chat_kind,
                                job.target.thread_id,
                                job.schedule.kind,
                                job.schedule.at_ms,
                                job.schedule.every_secs,
                                job.schedule.anchor_ms,
                                job.schedule.cron,
                                job.schedule.tz,
                                job.payload.kind(),
                                job.payload.text(),
                                job.session_key,
                                job.next_run_ms,
                                now,
                            ],
                        )?;
                    }
                    Ok::<_, StorageError>(())
                })
                .await
        }
        .await;
        self.changes.notify_one();
        result
    }

    async fn get(&self, id: &str) -> Result<Option<Job>, StorageError> {
        Ok(self.database.read(|connection| {
            connection
                .prepare_cached(&format!("SELECT {} FROM scheduled_jobs WHERE id = ?1", read_columns()))?
                .query_row([id], job_of)
                .optional()
        })?)
    }

    async fn list(&self, filter: &JobFilter) -> Result<Vec<Job>, StorageError> {
        let scope = filter.scope.as_ref();
        Ok(self.database.read(|connection| {
            connection
                .prepare_cached(&format!(
                    "SELECT {} FROM scheduled_jobs WHERE (?1 IS NULL OR agent_id = ?1) \
                     AND (?2 IS NULL OR (scope_channel = ?2 AND scope_account = ?3 AND scope_chat = ?4)) \
                     AND (?5 OR state != 'done') ORDER BY next_run_ms IS NULL, next_run_ms, id",
                    read_columns()
                ))?
                .query_map(
                    params![
                        filter.agent_id,
                        scope.map(|scope| &scope.channel),
                        scope.map(|scope| &scope.account_id),
                        scope.map(|scope| &scope.chat_id),
                        filter.include_done,
                    ],
                    job_of,
                )?
                .collect::<rusqlite::Result<Vec<_>>>()
        })?)
    }

    async fn remove(&self, id: &str) -> Result<bool, StorageError> {
        let result = async {
            let id = id.to_owned();
            self.database
                .write(move |connection| {
                    connection.execute("DELETE FROM scheduled_runs WHERE job_id = ?1", [&id])?;
                    Ok::<_, StorageError>(connection.execute("DELETE FROM scheduled_jobs WHERE id = ?1", [&id])? > 0)
                })
                .await
        }
        .await;
        self.changes.notify_one();
        result
    }

    async fn change(&self, id: &str, change: JobChange) -> Result<bool, StorageError> {
        let result = async {
            let id = id.to_owned();
            let now = Utc::now().timestamp_millis();
            self.database
                .write(move |connection| {
                    let changed = match change {
                        JobChange::Pause => connection.execute(
                            "UPDATE scheduled_jobs SET state = 'paused', updated_ms = ?2 WHERE id = ?1 AND state != 'done'",
                            params![id, now],
                        )?,
                        JobChange::Resume { next_run_ms } => connection.execute(
                            "UPDATE scheduled_jobs SET state = 'active', next_run_ms = ?2, failures = 0, \
                             updated_ms = ?3 WHERE id = ?1 AND state != 'done'",
                            params![id, next_run_ms, now],
                        )?,
                        JobChange::RunAt { at_ms } => connection.execute(
                            "UPDATE scheduled_jobs SET next_run_ms = ?2, updated_ms = ?3 WHERE id = ?1 \
                             AND state = 'active'",
                            params![id, at_ms, now],
                        )?,
                    };
                    Ok::<_, StorageError>(changed > 0)
                })
                .await
        }
        .await;
        self.changes.notify_one();
        result
    }

    async fn next_due(&self) -> Result<Option<i64>, StorageError> {
        Ok(self.database.read(|connection| {
            connection
                .prepare_cached(
                    "SELECT min(next_run_ms) FROM scheduled_jobs WHERE state = 'active' AND running_slot_ms IS NULL",
                )?
                .query_row([], |row| row.get(0))
        })?)
    }

    async fn claim_due(&self, planner: &dyn FirePlanner) -> Result<Vec<ClaimedFire>, StorageError> {
        let now = Utc::now().timestamp_millis();
        let planned = self.database.with_connection(|connection| claim(connection, planner, now))?;
        // Journaled side by side, so the log commits the batch in one write, then every id
        // kept in one more: no fire runs before its id is kept.
        let accepted = futures::future::join_all(planned.iter().map(|(job, fire)| self.accept(&job.id, fire))).await;
        let mut marks = Vec::with_capacity(planned.len());
        let mut claimed = Vec::with_capacity(planned.len());
        let mut failed = None;
        for ((job, fire), seq) in planned.into_iter().zip(accepted) {
            match seq {
                Ok(Some(seq)) => {
                    marks.push((job.id.clone(), fire.slot_ms, seq));
                    claimed.push(ClaimedFire { job, slot_ms: fire.slot_ms, seq, accepted: fire.accepted });
                }
                Ok(None) => {}
                // Left claimed without an id: the ticker completes it (`journal_claimed`).
                Err(error) => failed = Some(error),
            }
        }
        self.mark_journaled(marks).await?;
        match failed {
            // What was journaled is kept and runs (from the journal after a restart).
            Some(error) if claimed.is_empty() => Err(error),
            _ => Ok(claimed),
        }
    }

    async fn journal_claimed(
        &self,
        job_id: &str,
        fire: &PlannedFire,
        journaled: Option<i64>,
    ) -> Result<Option<i64>, StorageError> {
        match journaled {
            Some(seq) => {
                Ok((self.mark_journaled(vec![(job_id.to_owned(), fire.slot_ms, seq)]).await? > 0).then_some(seq))
            }
            None => self.journal(job_id, fire).await,
        }
    }

    async fn finish(&self, job_id: &str, slot_ms: i64, outcome: &FireOutcome) -> Result<bool, StorageError> {
        let result = async {
            let (job_id, outcome) = (job_id.to_owned(), outcome.clone());
            self.database
                .write(move |connection| {
                    let failed = outcome.status == "failed";
                    let changed = connection.execute(
                        "UPDATE scheduled_jobs SET running_slot_ms = NULL, running_seq = NULL, running_claimed_ms = NULL, \
                         failures = CASE WHEN ?3 THEN failures + 1 WHEN ?4 = 'ok' THEN 0 ELSE failures END, \
                         last_error = CASE WHEN ?3 THEN ?5 ELSE last_error END, \
                         next_run_ms = CASE WHEN ?6 IS NOT NULL AND (next_run_ms IS NULL OR ?6 < next_run_ms) \
                             THEN ?6 ELSE next_run_ms END, \
                         state = CASE WHEN ?7 THEN 'paused' \
                             WHEN state = 'active' AND next_run_ms IS NULL AND ?6 IS NULL THEN 'done' ELSE state END, \
                         last_alert_hash = COALESCE(?8, last_alert_hash), \
                         last_alert_ms = CASE WHEN ?8 IS NULL THEN last_alert_ms ELSE ?9 END, updated_ms = ?9 \
                         WHERE id = ?1 AND running_slot_ms = ?2",
                        params![
                            job_id,
                            slot_ms,
                            failed,
                            outcome.status,
                            outcome.error,
                            outcome.retry_at_ms,
                            outcome.pause,
                            outcome.alert,
                            outcome.finished_ms,
                        ],
                    )?;
                    connection.execute(
                        "UPDATE scheduled_runs SET status = ?3, finished_ms = ?4, delivered = ?5, error = ?6 \
                         WHERE job_id = ?1 AND slot_ms = ?2 AND status = 'running'",
                        params![job_id, slot_ms, outcome.status, outcome.finished_ms, outcome.delivered, outcome.error],
                    )?;
                    Ok::<_, StorageError>(changed > 0)
                })
                .await
        }
        .await;
        self.changes.notify_one();
        result
    }

    async fn running(&self) -> Result<Vec<Job>, StorageError> {
        Ok(self.database.read(|connection| {
            connection
                .prepare_cached(&format!(
                    "SELECT {} FROM scheduled_jobs WHERE running_slot_ms IS NOT NULL ORDER BY id",
                    read_columns()
                ))?
                .query_map([], job_of)?
                .collect::<rusqlite::Result<Vec<_>>>()
        })?)
    }

    async fn runs(&self, job_id: &str, limit: usize) -> Result<Vec<JobRun>, StorageError> {
        Ok(self.database.read(|connection| {
            connection
                .prepare_cached(
                    "SELECT slot_ms, status, started_ms, finished_ms, delivered, late, error, note \
                     FROM scheduled_runs WHERE job_id = ?1 ORDER BY id DESC LIMIT ?2",
                )?
                .query_map(params![job_id, limit as i64], run_of)?
                .collect::<rusqlite::Result<Vec<_>>>()
        })?)
    }

    async fn prune(&self, before_ms: i64) -> Result<u64, StorageError> {
        self.database
            .write(move |connection| {
                let mut removed = connection.execute(
                    "DELETE FROM scheduled_runs WHERE (started_ms < ?1 AND status != 'running') OR id IN ( \
                     SELECT id FROM (SELECT id, row_number() OVER (PARTITION BY job_id ORDER BY id DESC) AS n \
                     FROM scheduled_runs) WHERE n > ?2)",
                    params![before_ms, KEEP_RUNS_PER_JOB as i64],
                )?;
                removed += connection
                    .execute("DELETE FROM scheduled_jobs WHERE state = 'done' AND updated_ms < ?1", [before_ms])?;
                Ok::<_, StorageError>(removed as u64)
            })
            .await
    }

    fn changes(&self) -> &Notify {
        &self.changes
    }

    async fn stats(&self) -> Result<JobStats, StorageError> {
        Ok(self.database.read(|connection| {
            let (active, paused, running, next_due_ms) = connection.query_row(
                "SELECT coalesce(sum(state = 'active'), 0), coalesce(sum(state = 'paused'), 0), \
                 coalesce(sum(running_slot_ms IS NOT NULL), 0), \
                 min(CASE WHEN state = 'active' AND running_slot_ms IS NULL THEN next_run_ms END) \
                 FROM scheduled_jobs",
                [],
                |row| Ok((row.get::<_, i64>(0)?, row.get::<_, i64>(1)?, row.get::<_, i64>(2)?, row.get(3)?)),
            )?;
            let last_error = connection
                .query_row(
                    "SELECT job_id, error FROM scheduled_runs WHERE error IS NOT NULL ORDER BY id DESC LIMIT 1",
                    [],
                    |row| Ok((row.get(0)?, row.get(1)?)),
                )
                .optional()?;
            Ok::<_, rusqlite::Error>(JobStats {
                active: active as u64,
                paused: paused as u64,
                running: running as u64,
                next_due_ms,
                last_error,
            })
        })?)
    }
}
