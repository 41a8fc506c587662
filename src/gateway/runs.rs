//! What the gateway remembers about runs its clients started: the answer to each
//! idempotency key (5 minutes, so a retried `agent` call starts nothing new) and each run's
//! terminal snapshot (10 minutes, so an `agent.wait` that comes late still gets it).

use std::collections::{HashMap, VecDeque};
use std::sync::{Mutex, MutexGuard, PoisonError};

use chrono::{DateTime, Utc};
use serde::Serialize;
use serde_json::Value;
use tokio::sync::watch;
use tokio::time::{Duration, Instant};

use crate::agent::{AgentEvent, AgentStream, LifecycleEvent};

/// How long a repeated idempotency key gets the first answer back.
pub const IDEMPOTENCY_WINDOW: Duration = Duration::from_secs(5 * 60);
/// How long a finished run's snapshot is kept for late waiters.
pub const SNAPSHOT_RETENTION: Duration = Duration::from_secs(10 * 60);

/// How a run ended, as `agent.wait` reports it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Snapshot {
    pub status: WaitStatus,
    pub started_at: Option<DateTime<Utc>>,
    pub ended_at: DateTime<Utc>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum WaitStatus {
    Ok,
    Error,
    /// The run did not end in time — or was aborted, which a waiter cannot tell apart.
    Timeout,
}

/// What a wait found.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Waited {
    Ended(Snapshot),
    /// Known (accepted or running) but not ended within the wait.
    StillRunning {
        started_at: Option<DateTime<Utc>>,
    },
    /// Never heard of.
    Unknown,
}

/// Whether an idempotency key is new.
pub enum Claim {
    /// First use: the caller starts the work and then calls [`RunRegistry::answered`] (or
    /// [`RunRegistry::release`] if it failed).
    New,
    /// The answer given the first time.
    Answered(Value),
    /// Another call with the same key is still being answered.
    InFlight,
}

#[derive(Default)]
pub struct RunRegistry {
    state: Mutex<State>,
}

#[derive(Default)]
struct State {
    /// Idempotency key → the first answer (`None` while it is being worked out).
    answers: HashMap<String, Option<Value>>,
    answer_expiry: VecDeque<(Instant, String)>,
    runs: HashMap<String, RunEntry>,
    run_expiry: VecDeque<(Instant, String)>,
}

struct RunEntry {
    started_at: Option<DateTime<Utc>>,
    /// Run ids that end with this one (requests collected into it).
    aliases: Vec<String>,
    ended: watch::Sender<Option<Snapshot>>,
    /// Only waiters have asked about it so far: forgotten when they stop waiting.
    speculative: bool,
    /// When it may be forgotten: 10 minutes after it was accepted (if it never started) or
    /// after it ended. A run still going is never forgotten.
    expires_at: Instant,
}

impl RunEntry {
    fn new(speculative: bool) -> Self {
        Self {
            started_at: None,
            aliases: Vec::new(),
            ended: watch::channel(None).0,
            speculative,
            expires_at: Instant::now() + SNAPSHOT_RETENTION,
        }
    }
}

impl RunRegistry {
    /// Claims an idempotency key.
    pub fn claim(&self, key: &str) -> Claim {
        let mut state = self.lock();
        state.expire(Instant::now());
        match state.answers.get(key) {
            Some(Some(answer)) => Claim::Answered(answer.clone()),
            Some(None) => Claim::InFlight,
            None => {
                state.answers.insert(key.to_owned(), None);
                state.answer_expiry.push_back((Instant::now() + IDEMPOTENCY_WINDOW, key.to_owned()));
                Claim::New
            }
        }
    }

    /// The claimed key's answer, and its run accepted: waiters may wait for it.
    pub fn answered(&self, key: &str, answer: Value, run_id: &str) {
        let mut state = self.lock();
        state.answers.insert(key.to_owned(), Some(answer));
        state.known(run_id);
    }

    /// The claimed key's work failed: the next call with it starts afresh.
    pub fn release(&self, key: &str) {
        self.lock().answers.remove(key);
    }

    /// Follows runs from the event bus: start (and which requests it answers), end.
    pub fn observe(&self, event: &AgentEvent) {
        let AgentStream::Lifecycle(lifecycle) = &event.stream else { return };
        let mut state = self.lock();
        match lifecycle {
            LifecycleEvent::Start { started_at, merged_run_ids, .. } => {
                let entry = state.known(&event.run_id);
                entry.started_at = Some(*started_at);
                entry.aliases.clone_from(merged_run_ids);
                for alias in merged_run_ids {
                    state.known(alias).started_at = Some(*started_at);
                }
            }
            LifecycleEvent::End { ended_at, aborted, merged_run_ids, .. } => {
                let status = if *aborted { WaitStatus::Timeout } else { WaitStatus::Ok };
                state.entry_aliases(&event.run_id, merged_run_ids);
                state.end(&event.run_id, status, *ended_at, None);
            }
            LifecycleEvent::Error { error, ended_at, merged_run_ids, .. } => {
                state.entry_aliases(&event.run_id, merged_run_ids);
                state.end(&event.run_id, WaitStatus::Error, *ended_at, Some(error.clone()));
            }
        }
    }

    /// Waits up to `timeout` for `run_id` to end. It only waits: the run goes on either way.
    pub async fn wait(&self, run_id: &str, timeout: Duration) -> Waited {
        let mut ended = {
            let mut state = self.lock();
            state.expire(Instant::now());
            // Nobody has accepted, or is accepting, a run by that id: waiting could only time
            // out, so the answer is given now.
            if !state.runs.contains_key(run_id) && !state.answers.contains_key(run_id) {
                return Waited::Unknown;
            }
            let entry = state.runs.entry(run_id.to_owned()).or_insert_with(|| RunEntry::new(true));
            entry.ended.subscribe()
        };
        let finished = tokio::time::timeout(timeout, ended.wait_for(Option::is_some)).await;
        if let Ok(Ok(snapshot)) = finished
            && let Some(snapshot) = snapshot.clone()
        {
            return Waited::Ended(snapshot);
        }
        let mut state = self.lock();
        match state.runs.get(run_id) {
            Some(entry) if entry.speculative => {
                if entry.ended.receiver_count() <= 1 {
                    state.runs.remove(run_id);
                }
                Waited::Unknown
            }
            Some(entry) => match entry.ended.borrow().clone() {
                Some(snapshot) => Waited::Ended(snapshot),
                None => Waited::StillRunning { started_at: entry.started_at },
            },
            None => Waited::Unknown,
        }
    }

    fn lock(&self) -> MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

impl State {
    /// The run's entry, now known to exist.
    fn known(&mut self, run_id: &str) -> &mut RunEntry {
        let entry = self.runs.entry(run_id.to_owned()).or_insert_with(|| RunEntry::new(true));
        if entry.speculative {
            entry.speculative = false;
            entry.expires_at = Instant::now() + SNAPSHOT_RETENTION;
            self.run_expiry.push_back((entry.expires_at, run_id.to_owned()));
        }
        entry
    }

    /// Adds requests the run took while it ran (steering) to those that end with it.
    fn entry_aliases(&mut self, run_id: &str, merged_run_ids: &[String]) {
        let started_at = self.known(run_id).started_at;
        for alias in merged_run_ids {
            self.known(alias).started_at = started_at;
        }
        self.known(run_id).aliases.extend(merged_run_ids.iter().cloned());
    }

    fn end(&mut self, run_id: &str, status: WaitStatus, ended_at: DateTime<Utc>, error: Option<String>) {
        let entry = self.known(run_id);
        let snapshot = Snapshot { status, started_at: entry.started_at, ended_at, error };
        let aliases = std::mem::take(&mut entry.aliases);
        for run_id in std::iter::once(run_id.to_owned()).chain(aliases) {
            let entry = self.known(&run_id);
            entry.ended.send_replace(Some(snapshot.clone()));
            // Kept from its end on, not from its start: a long run is still waited for.
            let expires_at = Instant::now() + SNAPSHOT_RETENTION;
            entry.expires_at = expires_at;
            self.run_expiry.push_back((expires_at, run_id));
        }
    }

    /// Forgets answers and finished runs past their time. Runs still going are kept.
    fn expire(&mut self, now: Instant) {
        while self.answer_expiry.front().is_some_and(|(at, _)| *at <= now) {
            if let Some((_, key)) = self.answer_expiry.pop_front() {
                self.answers.remove(&key);
            }
        }
        while self.run_expiry.front().is_some_and(|(at, _)| *at <= now) {
            let Some((_, run_id)) = self.run_expiry.pop_front() else { break };
            let done = self.runs.get(&run_id).is_some_and(|entry| {
                entry.expires_at <= now && (entry.ended.borrow().is_some() || entry.started_at.is_none())
            });
            if done {
                self.runs.remove(&run_id);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    fn lifecycle(run_id: &str, lifecycle: LifecycleEvent) -> AgentEvent {
        AgentEvent {
            run_id: run_id.into(),
            seq: 1,
            session_key: "agent:main:main".into(),
            ts: Utc::now(),
            stream: AgentStream::Lifecycle(lifecycle),
        }
    }

    fn started(merged_run_ids: Vec<String>) -> LifecycleEvent {
        LifecycleEvent::Start { started_at: Utc::now(), merged_run_ids, model: None, reasoning: Default::default() }
    }

    fn ended(aborted: bool) -> LifecycleEvent {
        LifecycleEvent::End {
            ended_at: Utc::now(),
            aborted,
            merged_run_ids: Vec::new(),
            model: None,
            notices: Vec::new(),
            files: Vec::new(),
        }
    }

    #[test]
    fn a_key_is_answered_once_then_repeated() {
        let registry = RunRegistry::default();
        assert!(matches!(registry.claim("k"), Claim::New));
        assert!(matches!(registry.claim("k"), Claim::InFlight));
        registry.answered("k", json!({"runId": "k"}), "k");
        assert!(matches!(registry.claim("k"), Claim::Answered(answer) if answer == json!({"runId": "k"})));
        assert!(matches!(registry.claim("other"), Claim::New));
        registry.release("other");
        assert!(matches!(registry.claim("other"), Claim::New), "a failed claim can be retried");
    }

    #[tokio::test(start_paused = true)]
    async fn waiters_get_the_end_or_time_out_and_late_ones_get_the_snapshot() {
        let registry = std::sync::Arc::new(RunRegistry::default());
        registry.answered("r1", json!({}), "r1");
        registry.observe(&lifecycle("r1", started(Vec::new())));
        let waited = registry.wait("r1", Duration::from_millis(100)).await;
        assert!(matches!(waited, Waited::StillRunning { started_at: Some(_) }));

        let waiter = {
            let registry = registry.clone();
            tokio::spawn(async move { registry.wait("r1", Duration::from_secs(30)).await })
        };
        tokio::task::yield_now().await;
        registry.observe(&lifecycle("r1", ended(false)));
        assert!(matches!(waiter.await.unwrap(), Waited::Ended(Snapshot { status: WaitStatus::Ok, .. })));

        tokio::time::advance(Duration::from_secs(9 * 60)).await;
        assert!(matches!(registry.wait("r1", Duration::ZERO).await, Waited::Ended(_)), "late waiter");
        tokio::time::advance(Duration::from_secs(2 * 60)).await;
        assert_eq!(registry.wait("r1", Duration::ZERO).await, Waited::Unknown, "forgotten after 10 minutes");
        assert_eq!(registry.wait("never", Duration::from_millis(10)).await, Waited::Unknown);
        assert!(registry.lock().runs.is_empty(), "a waiter for an unknown run leaves nothing behind");
    }

    #[tokio::test(start_paused = true)]
    async fn an_unknown_run_is_not_found_at_once_but_one_being_accepted_is_waited_for() {
        let registry = std::sync::Arc::new(RunRegistry::default());
        let asked = tokio::time::Instant::now();
        assert_eq!(registry.wait("never", Duration::from_secs(600)).await, Waited::Unknown);
        assert_eq!(tokio::time::Instant::now(), asked, "answered without waiting");

        assert!(matches!(registry.claim("k"), Claim::New));
        let waiter = {
            let registry = registry.clone();
            tokio::spawn(async move { registry.wait("k", Duration::from_secs(30)).await })
        };
        tokio::task::yield_now().await;
        registry.answered("k", json!({}), "k");
        registry.observe(&lifecycle("k", started(Vec::new())));
        registry.observe(&lifecycle("k", ended(false)));
        assert!(matches!(waiter.await.unwrap(), Waited::Ended(Snapshot { status: WaitStatus::Ok, .. })));
    }

    #[tokio::test]
    async fn collected_requests_end_with_the_run_that_answered_them() {
        let registry = RunRegistry::default();
        registry.answered("a", json!({}), "a");
        registry.answered("b", json!({}), "b");
        let merged = vec!["a".to_owned()];
        registry.observe(&lifecycle("b", started(merged)));
        registry.observe(&lifecycle(
            "b",
            LifecycleEvent::Error {
                error: "boom".into(),
                ended_at: Utc::now(),
                merged_run_ids: Vec::new(),
                model: None,
            },
        ));
        let Waited::Ended(snapshot) = registry.wait("a", Duration::ZERO).await else { panic!("a ended with b") };
        assert_eq!((snapshot.status, snapshot.error.as_deref()), (WaitStatus::Error, Some("boom")));
        let aborted = lifecycle("c", ended(true));
        registry.observe(&aborted);
        assert!(matches!(
            registry.wait("c", Duration::ZERO).await,
            Waited::Ended(Snapshot { status: WaitStatus::Timeout, .. })
        ));
    }
}
