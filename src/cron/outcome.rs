//! How a fire ended, recorded on its job: due again at its next slot, retried with
//! backoff after a failure (30 s, 1 m, 5 m, 15 m, then hourly), or paused after ten
//! failures in a row, when its owner is told why.

use chrono::Utc;
use ferry_channel::ScheduledFire;

use super::plan::{PAUSE_AFTER_FAILURES, retry_delay};
use crate::metrics::metrics;
use crate::state::jobs::{FireOutcome, JobStore};

/// What became of a fire's run.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Ended {
    /// It ran; `delivered`: something was sent to the chat.
    Ok {
        delivered: bool,
        alert: Option<String>,
    },
    /// It did not run: nothing to do (the heartbeat), or its chat was busy.
    Skipped {
        why: String,
    },
    Failed {
        error: String,
    },
}

/// Records how `fire` ended (which wakes the ticker: its job may be due again). Returns the notice for the job's owner
/// when the job was just paused for failing too often.
pub async fn record(jobs: &dyn JobStore, fire: &ScheduledFire, ended: Ended) -> Option<String> {
    let now = Utc::now();
    let failures = match &ended {
        Ended::Failed { .. } => match jobs.get(&fire.job_id).await {
            Ok(Some(job)) => job.failures + 1,
            Ok(None) => return None,
            Err(error) => {
                tracing::warn!(job_id = %fire.job_id, %error, "cannot read a job to record its failure");
                1
            }
        },
        _ => 0,
    };
    let pause = failures >= PAUSE_AFTER_FAILURES;
    let outcome = match &ended {
        Ended::Ok { delivered, alert } => FireOutcome {
            status: "ok".into(),
            delivered: *delivered,
            error: None,
            finished_ms: now.timestamp_millis(),
            retry_at_ms: None,
            pause: false,
            alert: alert.clone(),
        },
        Ended::Skipped { why } => FireOutcome {
            status: "skipped".into(),
            delivered: false,
            error: Some(why.clone()),
            finished_ms: now.timestamp_millis(),
            retry_at_ms: None,
            pause: false,
            alert: None,
        },
        Ended::Failed { error } => {
            let retry = (!pause).then(|| now + retry_delay(failures));
            FireOutcome {
                status: "failed".into(),
                delivered: false,
                error: Some(error.clone()),
                finished_ms: now.timestamp_millis(),
                retry_at_ms: retry.map(|at| at.timestamp_millis()),
                pause,
                alert: None,
            }
        }
    };
    let status = outcome.status.clone();
    metrics().cron_fire_ended(&status);
    match jobs.finish(&fire.job_id, fire.slot_ms, &outcome).await {
        Ok(true) => {}
        Ok(false) => tracing::info!(job_id = %fire.job_id, "a scheduled fire was recorded as finished already"),
        Err(error) => {
            // The sweep finds it finished from the journal and records it then.
            tracing::warn!(job_id = %fire.job_id, %error, "cannot record how a scheduled fire ended");
        }
    }
    match ended {
        Ended::Failed { error } if pause => Some(format!(
            "⚠️ I paused the scheduled job \"{}\" ({}) after {failures} failures in a row. The last one: {error}. \
             Resume it with /jobs resume {} once that is fixed.",
            fire.name, fire.job_id, fire.job_id
        )),
        _ => None,
    }
}
