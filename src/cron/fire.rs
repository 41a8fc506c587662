//! What a due job becomes: the fire the jobs store journals as an inbound message. The
//! message carries everything its run needs ([`ScheduledFire`], where the reply goes, the
//! scheduled-run note with the local time), so a fire journaled before a crash runs the
//! same after it.

use std::time::Duration;

use chrono::{DateTime, Utc};
use chrono_tz::Tz;
use ferry_channel::{ChatKind, ChatRef, ClientRequest, Delivery, InboundMessage, ScheduledFire, Sender, Target};

use super::plan::{Missed, catch_up, late_note};
use super::stored;
use crate::metrics::metrics;
use crate::state::inbound::{Accepted, SeenKey};
use crate::state::jobs::{FirePlan, FirePlanner, Job, JobPayload, PlannedFire, SkippedSlots};
use crate::types::schedule::Schedule;

/// Decides each due job's fire (see [`FirePlanner`]): the slot it fires for, the slots
/// downtime made it miss (collapsed into one late fire, or skipped), and its next run.
#[derive(Debug, Clone, Copy, Default)]
pub struct Planner;

impl FirePlanner for Planner {
    fn plan(&self, job: &Job, now_ms: i64) -> FirePlan {
        let (Some((schedule, tz)), Some(due), Some(now)) =
            (stored::load(&job.schedule), job.next_run_ms.and_then(stored::instant), stored::instant(now_ms))
        else {
            tracing::error!(job_id = %job.id, "a scheduled job this version cannot read is not fired");
            return FirePlan { fire: None, skipped: None, next_run_ms: None };
        };
        let (slot, late, skipped, next) = if job.failures > 0 {
            // A retry: it fires now, and the schedule carries on after it.
            (Some(due), false, None, schedule.next_after(tz, now))
        } else {
            let missed = if job.missed == "skip" { Missed::Skip } else { Missed::RunOnce };
            let grace = job.grace_secs.and_then(|secs| u64::try_from(secs).ok()).map(Duration::from_secs);
            let catch = catch_up(&schedule, tz, due, now, missed, grace);
            // A run asked for now, or a retry, is due off the schedule's slots: it fires as
            // itself. Slots only grow, so no two fires of a job share one.
            (catch.fire.map(|slot| slot.max(due)), catch.late, catch.skipped, catch.next_run)
        };
        let skipped = skipped.map(|skipped| SkippedSlots {
            count: skipped.count,
            first_ms: skipped.first.timestamp_millis(),
            last_ms: skipped.last.timestamp_millis(),
        });
        if let Some(skipped) = &skipped {
            metrics().cron_skipped(skipped.count);
        }
        let fire = slot.map(|slot| {
            metrics().cron_fired(late);
            let note = late.then(|| late_note(slot, tz, now));
            planned(job, &schedule, tz, slot, now, note)
        });
        FirePlan { fire, skipped, next_run_ms: next.map(|at| at.timestamp_millis()) }
    }
}

/// The session a job's fires run in: the heartbeat's own, a task's chosen one, else the
/// job's own (`cron:<job id>`), which a reminder uses only as its lane.
pub fn session_of(job: &Job) -> String {
    match (&job.payload, &job.session_key) {
        (JobPayload::Heartbeat(_), _) => format!("agent:{}:heartbeat", job.agent_id),
        (JobPayload::Task(_), Some(session)) => session.clone(),
        _ => format!("agent:{}:cron:{}", job.agent_id, job.id),
    }
}

/// The fire of `job` for `slot`, as the inbound message it is journaled as.
pub fn planned(
    job: &Job,
    schedule: &Schedule,
    tz: Tz,
    slot: DateTime<Utc>,
    now: DateTime<Utc>,
    late: Option<String>,
) -> PlannedFire {
    let slot_ms = slot.timestamp_millis();
    let message_id = format!("cron:{}:{slot_ms}", job.id);
    let target = &job.target;
    let chat = ChatRef::new(chat_kind(&target.chat_kind), target.chat_id.clone());
    let text = match (&job.payload, &late) {
        (JobPayload::Text(text), Some(note)) => format!("{text}\n\n{note}"),
        (payload, _) => payload.text().to_owned(),
    };
    let mut message = InboundMessage::new(
        target.channel.clone(),
        target.account_id.clone(),
        chat.clone(),
        Sender::user(job.owner.clone()),
        message_id.clone(),
        text.clone(),
    );
    message.thread_id.clone_from(&target.thread_id);
    message.received_at = now;
    let session_key = session_of(job);
    message.request = Some(ClientRequest {
        run_id: message_id.clone(),
        session_key: Some(session_key.clone()),
        agent_id: Some(job.agent_id.clone()),
        extra_system_prompt: Some(scheduled_note(job, schedule, tz, now, late.as_deref())),
        timeout_seconds: None,
        deliver: Some(Delivery {
            channel: target.channel.clone(),
            account_id: Some(target.account_id.clone()),
            target: Target { chat, thread_id: target.thread_id.clone() },
        }),
        scheduled: Some(ScheduledFire {
            job_id: job.id.clone(),
            slot_ms,
            kind: job.payload.kind().to_owned(),
            name: job.name.clone(),
        }),
    });
    // An InboundMessage always serializes (strings, numbers and options only).
    let encoded = serde_json::to_string(&message).unwrap_or_default();
    PlannedFire {
        slot_ms,
        key: SeenKey([
            target.channel.clone(),
            target.account_id.clone(),
            target.chat_id.clone(),
            target.thread_id.clone().unwrap_or_default(),
            message_id,
        ]),
        accepted: Accepted { session_key, prompt: text, message: encoded, enqueued_at: now.timestamp_millis() },
        late: late.is_some(),
    }
}

/// What a scheduled run is told besides its task: that it is one, and what time it is where
/// its user lives (models otherwise guess the date).
fn scheduled_note(job: &Job, schedule: &Schedule, tz: Tz, now: DateTime<Utc>, late: Option<&str>) -> String {
    let local = now.with_timezone(&tz).format("%A %Y-%m-%d %H:%M");
    let mut note = format!(
        "This is a scheduled run of the job \"{}\" (id {}, {}), not a message someone just sent. It is now {local} \
         ({}). Your final reply is delivered to the chat as it is.",
        job.name,
        job.id,
        schedule.describe(tz),
        tz.name()
    );
    if let Some(late) = late {
        note.push_str(&format!(" This run is late {late}: Ferry was down when it was due."));
    }
    note
}

fn chat_kind(name: &str) -> ChatKind {
    match name {
        "group" => ChatKind::Group,
        "channel" => ChatKind::Channel,
        _ => ChatKind::Direct,
    }
}
