//! Running a scheduled job's fire (`cron`): a reminder's text sent as it is, once, through
//! the delivery ledger and with no model call; a heartbeat gated on `HEARTBEAT.md` before
//! any model call, its `HEARTBEAT_OK` kept silent and a repeated alert not sent; and every
//! fire's end reported back to its job, so it is due again, retried, or paused.

use chrono::Utc;
use ferry_channel::{OutboundMessage, ScheduledFire, Target};

use super::executor::AgentExecutor;
use crate::agent::{Payload, RunOutcome, RunStatus};
use crate::cron::heartbeat;
use crate::cron::outcome::{Ended, record};
use crate::queue::{QueuedMessage, RunJob, RunReport};
use crate::reply::outbound::OutboundScheduler;
use crate::reply::turn::ReplyTurn;
use crate::state::jobs::Job;

/// A reply of `text`, as a run would have made it.
pub(super) fn outcome_of(run_id: &str, text: String) -> RunOutcome {
    let now = Utc::now();
    RunOutcome {
        run_id: run_id.to_owned(),
        status: RunStatus::Completed,
        payloads: vec![Payload { text, is_error: false }],
        usage: Default::default(),
        transcript: Vec::new(),
        tool_sends: Vec::new(),
        tool_failures: Vec::new(),
        unconsumed_steer: Vec::new(),
        started_at: now,
        ended_at: now,
        model: None,
        notices: Vec::new(),
        attachments: Vec::new(),
    }
}

impl AgentExecutor {
    /// Reports each fire's end; tells the owner when one paused its job.
    pub(super) async fn report(
        &self,
        fires: &[ScheduledFire],
        ended: Ended,
        scheduler: Option<(&OutboundScheduler, &Target)>,
    ) {
        for fire in fires {
            let notice = record(self.jobs.as_ref(), fire, ended.clone()).await;
            if let (Some(notice), Some((scheduler, target))) = (notice, scheduler) {
                let mut message = OutboundMessage::text(target.clone(), notice);
                message.idempotency_key = Some(format!("cron-paused:{}:{}", fire.job_id, fire.slot_ms));
                if let Err(error) = scheduler.send(message).await {
                    tracing::warn!(%error, "telling a job's owner it was paused failed");
                }
            }
        }
    }

    /// Records how the fires among `fired` (message id, fire) that are not `left` ended: a
    /// killed attempt had recorded their reply, which [`super::recovered::settle`] delivered
    /// from the record (`answered`: and recorded), so no run reports them. Unreported, their
    /// jobs would not fire again until the minute-long sweep of fires that ended unreported.
    pub(super) async fn report_settled(
        &self,
        fired: Vec<(i64, ScheduledFire)>,
        left: &[QueuedMessage],
        answered: bool,
    ) {
        let settled: Vec<ScheduledFire> = fired
            .into_iter()
            .filter(|(id, _)| !left.iter().any(|queued| queued.id == *id))
            .map(|(_, fire)| fire)
            .collect();
        if !settled.is_empty() {
            self.report(&settled, Ended::Ok { delivered: answered, alert: None }, None).await;
        }
    }

    /// Whether a heartbeat has something to do: its job as kept, and the prompt with
    /// `HEARTBEAT.md` in it; or the report of a beat that makes no model call.
    pub(super) async fn heartbeat_gate(
        &self,
        job: &mut RunJob,
        fire: &ScheduledFire,
    ) -> Result<Option<Job>, RunReport> {
        let stored = match self.jobs.get(&fire.job_id).await {
            Ok(stored) => stored,
            Err(error) => {
                tracing::warn!(%error, "cannot read the heartbeat job; this beat is skipped");
                None
            }
        };
        let Some(stored) = stored else {
            self.report(std::slice::from_ref(fire), Ended::Skipped { why: "the job is gone".into() }, None).await;
            return Err(RunReport::default());
        };
        let settings = self.config.agents.settings_of(&stored.agent_id);
        let workspace = self.agents.for_session(&job.session_key).workspace().to_owned();
        let hours = settings.heartbeat.active_hours.clone();
        let zone = settings.user_timezone.clone();
        let gated = tokio::task::spawn_blocking(move || {
            heartbeat::gate(&workspace, hours.as_ref(), zone.as_deref(), Utc::now())
        })
        .await
        .unwrap_or_else(|_| Err("HEARTBEAT.md could not be read".to_owned()));
        match gated {
            Ok(checklist) => {
                job.prompt = format!("{}\n\n{}:\n{checklist}", job.prompt, heartbeat::HEARTBEAT_FILE);
                Ok(Some(stored))
            }
            Err(why) => {
                tracing::debug!(job_id = %fire.job_id, %why, "no heartbeat this time");
                self.report(std::slice::from_ref(fire), Ended::Skipped { why }, None).await;
                Err(RunReport::default())
            }
        }
    }

    /// Delivers a scheduled run's reply (a failed one is retried by its job, not shown)
    /// and reports how each fire ended.
    pub(super) async fn deliver_scheduled(
        &self,
        turn: ReplyTurn,
        mut outcome: RunOutcome,
        fires: &[ScheduledFire],
        beat: Option<&Job>,
        scheduler: &OutboundScheduler,
        target: &Target,
    ) -> RunReport {
        let error = match &outcome.status {
            RunStatus::Completed => None,
            RunStatus::Failed { error } => Some(error.problem().to_owned()),
            RunStatus::Aborted(reason) => Some(format!("the run was stopped ({reason:?})")),
        };
        if let Some(error) = error {
            self.report(fires, Ended::Failed { error }, Some((scheduler, target))).await;
            return RunReport::default();
        }
        let mut alert = None;
        if let Some(beat) = beat {
            for payload in &mut outcome.payloads {
                payload.text = heartbeat::strip_ok(&payload.text);
            }
            outcome.payloads.retain(|payload| !payload.text.trim().is_empty());
            let text: Vec<&str> = outcome.payloads.iter().map(|payload| payload.text.as_str()).collect();
            let text = text.join("\n");
            if outcome.payloads.is_empty() || heartbeat::repeats(beat, &text, Utc::now().timestamp_millis()) {
                let ended = Ended::Ok { delivered: false, alert: None };
                self.report(fires, ended, None).await;
                return RunReport { unconsumed_steer: outcome.unconsumed_steer, ..RunReport::default() };
            }
            alert = Some(heartbeat::alert_hash(&text));
        }
        let answered = turn.deliver(&outcome).await;
        // An alert counts as sent (for the day-long dedupe) only once it was.
        let alert = alert.filter(|_| answered);
        self.report(fires, Ended::Ok { delivered: answered, alert }, None).await;
        RunReport { unconsumed_steer: outcome.unconsumed_steer, answered, ..RunReport::default() }
    }

    /// A reminder: its text (with the late note it was journaled with) sent as it is, once.
    pub(super) async fn remind(
        &self,
        turn: ReplyTurn,
        messages: &[QueuedMessage],
        fires: &[ScheduledFire],
    ) -> RunReport {
        let text = messages.iter().map(|queued| queued.message.text.as_str()).collect::<Vec<_>>().join("\n\n");
        let run_id = fires.first().map(|fire| format!("cron:{}:{}", fire.job_id, fire.slot_ms)).unwrap_or_default();
        let answered = turn.deliver(&outcome_of(&run_id, text)).await;
        self.report(fires, Ended::Ok { delivered: answered, alert: None }, None).await;
        RunReport { answered, ..RunReport::default() }
    }
}
