//! Scheduled jobs: adding within limits, listing by chat, claiming a due fire exactly once
//! (journaled with it, also when claims race), finishing, retries and pauses, skipped slots
//! in the history, pruning.

use std::sync::Arc;

use chrono::Utc;

use super::{Harness, conformance};
use crate::state::inbound::{Accepted, SeenKey};
use crate::state::jobs::{
    AddJobError, ChatScope, FireOutcome, FirePlan, FirePlanner, Job, JobChange, JobFilter, JobLimits, JobPayload,
    JobState, JobTarget, PlannedFire, SkippedSlots, StoredSchedule,
};

const LIMITS: JobLimits = JobLimits { per_chat: 50, per_agent: 10_000 };
const MINUTE: i64 = 60_000;

fn now() -> i64 {
    Utc::now().timestamp_millis()
}

fn job(id: &str, chat: &str, next_run_ms: Option<i64>) -> Job {
    Job {
        id: id.into(),
        agent_id: "main".into(),
        name: format!("job {id}"),
        owner: "u1".into(),
        created_by: "agent".into(),
        scope: Some(ChatScope { channel: "telegram".into(), account_id: "default".into(), chat_id: chat.into() }),
        target: JobTarget {
            channel: "telegram".into(),
            account_id: "default".into(),
            chat_id: chat.into(),
            chat_kind: "direct".into(),
            thread_id: None,
        },
        schedule: StoredSchedule {
            kind: "every".into(),
            at_ms: None,
            every_secs: Some(60),
            anchor_ms: Some(0),
            cron: None,
            tz: "Europe/Berlin".into(),
        },
        payload: JobPayload::Text("stretch".into()),
        session_key: None,
        missed: "run_once".into(),
        grace_secs: None,
        state: JobState::Active,
        next_run_ms,
        running: None,
        failures: 0,
        last_error: None,
        last_alert: None,
        created_ms: 1_000,
    }
}

/// Fires the due slot and schedules the next a minute after now; `skip` skips instead.
struct Planner {
    skip: bool,
}

impl FirePlanner for Planner {
    fn plan(&self, job: &Job, now_ms: i64) -> FirePlan {
        let slot_ms = job.next_run_ms.unwrap_or(now_ms);
        let next_run_ms = (job.schedule.kind != "at").then_some(now_ms + MINUTE);
        if self.skip {
            let skipped = SkippedSlots { count: 3, first_ms: slot_ms - 2 * MINUTE, last_ms: slot_ms };
            return FirePlan { fire: None, skipped: Some(skipped), next_run_ms };
        }
        let message_id = format!("cron:{}:{slot_ms}", job.id);
        let fire = PlannedFire {
            slot_ms,
            key: SeenKey([
                job.target.channel.clone(),
                job.target.account_id.clone(),
                job.target.chat_id.clone(),
                String::new(),
                message_id.clone(),
            ]),
            accepted: Accepted {
                session_key: format!("agent:main:cron:{}", job.id),
                prompt: job.payload.text().into(),
                message: format!("{{\"message_id\":\"{message_id}\"}}"),
                enqueued_at: now_ms,
            },
            late: now_ms - slot_ms > MINUTE,
        };
        FirePlan { fire: Some(fire), skipped: None, next_run_ms }
    }
}

fn outcome(status: &str) -> FireOutcome {
    FireOutcome {
        status: status.into(),
        delivered: status == "ok",
        error: (status == "failed").then(|| "the model failed".to_owned()),
        finished_ms: now(),
        retry_at_ms: None,
        pause: false,
        alert: None,
    }
}

async fn jobs_round_trip_and_a_chat_lists_only_its_own(harness: &Harness) {
    let jobs = &harness.stores.jobs;
    let first = job("j1", "42", Some(now() + MINUTE));
    jobs.add(&first, LIMITS).await.unwrap();
    jobs.add(&job("j2", "43", Some(now() + 2 * MINUTE)), LIMITS).await.unwrap();
    assert!(matches!(jobs.add(&first, LIMITS).await, Err(AddJobError::Exists(id)) if id == "j1"));
    let reopened = harness.reopen().await;
    assert_eq!(reopened.jobs.get("j1").await.unwrap(), Some(first.clone()));
    let scope = first.scope.clone();
    let of_chat = reopened.jobs.list(&JobFilter { scope, ..JobFilter::default() }).await.unwrap();
    assert_eq!(of_chat.iter().map(|job| job.id.as_str()).collect::<Vec<_>>(), ["j1"]);
    let all = reopened.jobs.list(&JobFilter::default()).await.unwrap();
    assert_eq!(all.iter().map(|job| job.id.as_str()).collect::<Vec<_>>(), ["j1", "j2"], "by next run");
    assert!(reopened.jobs.remove("j1").await.unwrap());
    assert!(!reopened.jobs.remove("j1").await.unwrap());
    assert_eq!(reopened.jobs.get("j1").await.unwrap(), None);
}

async fn the_limits_per_chat_and_per_agent_are_enforced(harness: &Harness) {
    let jobs = &harness.stores.jobs;
    let limits = JobLimits { per_chat: 2, per_agent: 3 };
    jobs.add(&job("a", "1", Some(now() + MINUTE)), limits).await.unwrap();
    jobs.add(&job("b", "1", Some(now() + MINUTE)), limits).await.unwrap();
    let refused = jobs.add(&job("c", "1", Some(now() + MINUTE)), limits).await;
    assert!(matches!(refused, Err(AddJobError::ChatFull { limit: 2 })), "{refused:?}");
    jobs.add(&job("d", "2", Some(now() + MINUTE)), limits).await.unwrap();
    let refused = jobs.add(&job("e", "3", Some(now() + MINUTE)), limits).await;
    assert!(matches!(refused, Err(AddJobError::AgentFull { limit: 3 })), "{refused:?}");
}

async fn a_due_fire_is_claimed_once_journaled_and_due_again_once_finished(harness: &Harness) {
    let jobs = &harness.stores.jobs;
    let slot = now() - 1_000;
    jobs.add(&job("j1", "42", Some(slot)), LIMITS).await.unwrap();
    jobs.add(&job("later", "42", Some(now() + 60 * MINUTE)), LIMITS).await.unwrap();
    let claimed = jobs.claim_due(&Planner { skip: false }).await.unwrap();
    assert_eq!(claimed.len(), 1);
    let fire = &claimed[0];
    assert_eq!((fire.job.id.as_str(), fire.slot_ms), ("j1", slot));
    let pending = harness.stores.inbound.unanswered().await.unwrap();
    assert_eq!(pending.messages.len(), 1, "the fire is journaled with its claim");
    assert_eq!((pending.messages[0].seq, &pending.messages[0].entry), (fire.seq, &fire.accepted));
    // In flight: not due again, whatever its next run says.
    assert!(jobs.claim_due(&Planner { skip: false }).await.unwrap().is_empty());
    let running = jobs.get("j1").await.unwrap().unwrap().running.unwrap();
    assert_eq!((running.slot_ms, running.seq), (slot, Some(fire.seq)));
    assert_eq!(jobs.running().await.unwrap().len(), 1);
    assert!(jobs.next_due().await.unwrap().unwrap() > now() + 30 * MINUTE, "only `later` counts");
    assert!(jobs.finish("j1", slot, &outcome("ok")).await.unwrap());
    assert!(!jobs.finish("j1", slot, &outcome("ok")).await.unwrap(), "finished once");
    let after = jobs.get("j1").await.unwrap().unwrap();
    assert_eq!((after.running, after.state), (None, JobState::Active));
    assert!(after.next_run_ms.unwrap() > slot);
    let runs = jobs.runs("j1", 10).await.unwrap();
    assert_eq!(runs.len(), 1);
    assert_eq!((runs[0].slot_ms, runs[0].status.as_str(), runs[0].delivered), (slot, "ok", true));
    let stats = jobs.stats().await.unwrap();
    assert_eq!((stats.active, stats.running), (2, 0));
}

async fn racing_claims_fire_each_slot_once(harness: &Harness) {
    let slot = now() - 1_000;
    for index in 0..20 {
        harness.stores.jobs.add(&job(&format!("j{index}"), &format!("c{index}"), Some(slot)), LIMITS).await.unwrap();
    }
    // Two processes' worth of stores on the same state (on PostgreSQL, two replicas).
    let other = harness.reopen().await;
    let claims = (0..8).map(|round| {
        let jobs = if round % 2 == 0 { harness.stores.jobs.clone() } else { other.jobs.clone() };
        tokio::spawn(async move { jobs.claim_due(&Planner { skip: false }).await.unwrap() })
    });
    let mut fired: Vec<String> = Vec::new();
    for claim in claims {
        fired.extend(claim.await.unwrap().into_iter().map(|fire| fire.job.id));
    }
    fired.sort();
    let mut unique = fired.clone();
    unique.dedup();
    assert_eq!((fired.len(), unique.len()), (20, 20), "{fired:?}");
    assert_eq!(harness.stores.inbound.unanswered().await.unwrap().messages.len(), 20);
}

async fn a_one_shot_is_done_after_its_fire_and_a_failed_one_retries(harness: &Harness) {
    let jobs = &harness.stores.jobs;
    let mut once = job("once", "42", Some(now() - 1_000));
    once.schedule = StoredSchedule { kind: "at".into(), at_ms: once.next_run_ms, ..once.schedule };
    jobs.add(&once, LIMITS).await.unwrap();
    let fire = jobs.claim_due(&Planner { skip: false }).await.unwrap().remove(0);
    let retry_at = now() + MINUTE;
    let failed = FireOutcome { retry_at_ms: Some(retry_at), ..outcome("failed") };
    assert!(jobs.finish("once", fire.slot_ms, &failed).await.unwrap());
    let retrying = jobs.get("once").await.unwrap().unwrap();
    assert_eq!((retrying.state, retrying.next_run_ms, retrying.failures), (JobState::Active, Some(retry_at), 1));
    assert_eq!(retrying.last_error.as_deref(), Some("the model failed"));
    jobs.change("once", JobChange::RunAt { at_ms: now() - 1 }).await.unwrap();
    let fire = jobs.claim_due(&Planner { skip: false }).await.unwrap().remove(0);
    assert!(jobs.finish("once", fire.slot_ms, &outcome("ok")).await.unwrap());
    let done = jobs.get("once").await.unwrap().unwrap();
    assert_eq!((done.state, done.next_run_ms, done.failures), (JobState::Done, None, 0));
    assert!(jobs.list(&JobFilter::default()).await.unwrap().is_empty(), "done jobs are not listed");
    let with_done = JobFilter { include_done: true, ..JobFilter::default() };
    assert_eq!(jobs.list(&with_done).await.unwrap().len(), 1);
    assert_eq!(
        jobs.runs("once", 10).await.unwrap().iter().map(|run| run.status.as_str()).collect::<Vec<_>>(),
        ["ok", "failed"]
    );
}

async fn pausing_stops_fires_and_too_many_failures_pause_the_job(harness: &Harness) {
    let jobs = &harness.stores.jobs;
    jobs.add(&job("j1", "42", Some(now() - 1_000)), LIMITS).await.unwrap();
    assert!(jobs.change("j1", JobChange::Pause).await.unwrap());
    assert!(jobs.claim_due(&Planner { skip: false }).await.unwrap().is_empty());
    assert!(jobs.change("j1", JobChange::Resume { next_run_ms: now() - 1 }).await.unwrap());
    let fire = jobs.claim_due(&Planner { skip: false }).await.unwrap().remove(0);
    let given_up = FireOutcome { pause: true, ..outcome("failed") };
    jobs.finish("j1", fire.slot_ms, &given_up).await.unwrap();
    let paused = jobs.get("j1").await.unwrap().unwrap();
    assert_eq!((paused.state, paused.failures), (JobState::Paused, 1));
    assert!(!jobs.change("missing", JobChange::Pause).await.unwrap());
}

async fn skipped_slots_are_kept_in_the_history(harness: &Harness) {
    let jobs = &harness.stores.jobs;
    let slot = now() - 10 * MINUTE;
    jobs.add(&job("j1", "42", Some(slot)), LIMITS).await.unwrap();
    assert!(jobs.claim_due(&Planner { skip: true }).await.unwrap().is_empty());
    let runs = jobs.runs("j1", 10).await.unwrap();
    assert_eq!(runs.len(), 1);
    assert_eq!((runs[0].status.as_str(), runs[0].slot_ms), ("skipped", slot));
    assert!(runs[0].note.as_deref().unwrap_or_default().contains("3 slots"), "{:?}", runs[0].note);
    let after = jobs.get("j1").await.unwrap().unwrap();
    assert!(after.running.is_none() && after.next_run_ms.unwrap() > now());
    assert!(harness.stores.inbound.unanswered().await.unwrap().messages.is_empty());
}

async fn a_system_job_is_replaced_in_place(harness: &Harness) {
    let jobs = &harness.stores.jobs;
    let mut beat = job("heartbeat:main", "42", Some(now() + MINUTE));
    beat.scope = None;
    beat.created_by = "system".into();
    beat.payload = JobPayload::Heartbeat("check".into());
    jobs.upsert_system(&beat).await.unwrap();
    let kept_next = beat.next_run_ms;
    beat.payload = JobPayload::Heartbeat("check again".into());
    beat.next_run_ms = Some(now() + 5 * MINUTE);
    jobs.upsert_system(&beat).await.unwrap();
    let stored = jobs.get("heartbeat:main").await.unwrap().unwrap();
    assert_eq!(stored.payload, JobPayload::Heartbeat("check again".into()));
    assert_eq!(stored.next_run_ms, kept_next, "the same interval keeps its next beat");
    beat.schedule.every_secs = Some(120);
    jobs.upsert_system(&beat).await.unwrap();
    assert_eq!(jobs.get("heartbeat:main").await.unwrap().unwrap().next_run_ms, beat.next_run_ms);
}

async fn old_runs_and_done_jobs_are_pruned(harness: &Harness) {
    let jobs: Arc<_> = harness.stores.jobs.clone();
    jobs.add(&job("j1", "42", Some(now() - 1_000)), LIMITS).await.unwrap();
    let fire = jobs.claim_due(&Planner { skip: false }).await.unwrap().remove(0);
    jobs.finish("j1", fire.slot_ms, &outcome("ok")).await.unwrap();
    assert_eq!(jobs.prune(now() - MINUTE).await.unwrap(), 0, "recent runs stay");
    assert_eq!(jobs.prune(now() + MINUTE).await.unwrap(), 1);
    assert!(jobs.runs("j1", 10).await.unwrap().is_empty());
    assert!(jobs.get("j1").await.unwrap().is_some(), "an active job stays");
}

conformance!(
    jobs_round_trip_and_a_chat_lists_only_its_own,
    the_limits_per_chat_and_per_agent_are_enforced,
    a_due_fire_is_claimed_once_journaled_and_due_again_once_finished,
    racing_claims_fire_each_slot_once,
    a_one_shot_is_done_after_its_fire_and_a_failed_one_retries,
    pausing_stops_fires_and_too_many_failures_pause_the_job,
    skipped_slots_are_kept_in_the_history,
    a_system_job_is_replaced_in_place,
    old_runs_and_done_jobs_are_pruned,
);
