//! Running the agent inside a session: the lazy reset, run ownership, history in, fenced
//! transcript and usage out. The dispatcher's executor and `ferry agent` share it.

use chrono::Utc;
use tokio::sync::mpsc;

use super::compaction::SessionCompactor;
use crate::agent::{AgentEvent, AgentRunner, ChatMessage, RunOutcome, RunRequest, Usage};
use crate::config::ResetConfig;
use crate::state::outage::through_outages;
use crate::state::sessions::{OpenedRun, SessionStore, StoreError, TranscriptEntry, TranscriptSaved};

/// Runs `request` in the session named by its `session_key`, whose history it continues;
/// `events` receives the run's events in order. The store is written twice: once to open
/// the run (lazy reset + ownership), once to close it (transcript + usage).
///
/// The transcript is saved before the run's terminal lifecycle event goes out.
///
/// `slot` is awaited after the run is opened and held only while the agent runs: the
/// dispatcher passes its global-lane entry, so the `max_concurrent` limit counts model runs
/// and not the database writes around them. `ferry agent` passes `async {}`.
/// Fails only if the session cannot be resolved; later store trouble is logged and the
/// run's outcome still returned (the user gets their answer, the transcript may miss it).
pub async fn run_in_session(
    runner: &AgentRunner,
    store: &dyn SessionStore,
    reset: &ResetConfig,
    mut request: RunRequest,
    events: Option<mpsc::UnboundedSender<AgentEvent>>,
    slot: impl Future<Output = impl Send> + Send,
) -> Result<RunOutcome, StoreError> {
    let key = request.session_key.clone();
    let OpenedRun { resolved, history } = open_through_outages(store, &key, reset, &request).await?;
    if let Some(reason) = resolved.started {
        tracing::info!(session_key = %key, reason = reason.as_str(), session_id = %resolved.session.session_id, "session started");
    }
    if resolved.ended_session_id.is_some() {
        // An idle or daily reset: what the old session left running goes with it.
        runner.tools().session_ended(&key);
    }
    runner.hooks().session_changed(&key, &resolved, None);
    request.history = history.unwrap_or_else(|error| {
        tracing::error!(session_key = %key, %error, "cannot read the transcript; answering without history");
        Vec::new()
    });
    if !request.resume.runs.is_empty() {
        leave_out_resumed_runs(store, &resolved.session.session_id, &mut request).await;
    }
    let slot = slot.await;
    let run_id = request.run_id.clone();
    // Saved before the run is announced as ended, so whoever hears of the end can read it.
    let persist = |transcript: Vec<ChatMessage>, usage: Usage| {
        // The global lane counts model runs, not the writes around them.
        drop(slot);
        let (key, run_id) = (&key, &run_id);
        async move {
            match store.close_run(key, run_id, &transcript, usage).await {
                Ok(TranscriptSaved::Saved) => {}
                Ok(TranscriptSaved::Superseded) => tracing::info!(
                    session_key = %key, run_id,
                    "the session was reset or taken over during the run; its transcript is not saved"
                ),
                Err(error) => {
                    tracing::error!(session_key = %key, run_id, %error, "cannot save the run's transcript and usage")
                }
            }
        }
    };
    // The run owns the session, so it may compact its context too.
    let compactor = SessionCompactor::new(store, key.clone(), run_id.clone());
    let outcome = runner.run_with(request, events, Some(&compactor), persist).await;
    Ok(outcome)
}

/// A run resumed after a crash ([`crate::agent::Resumption`]): when the session saved the
/// killed attempt's transcript, the history is given without it (the resumed messages hold
/// the same) and the run saves only what it adds; otherwise the history stays as it is.
async fn leave_out_resumed_runs(store: &dyn SessionStore, session_id: &str, request: &mut RunRequest) {
    let entries = match store.transcript(session_id).await {
        Ok(entries) => entries,
        Err(error) => {
            tracing::warn!(session_key = %request.session_key, %error, "cannot read which runs wrote the transcript; a resumed run's history may repeat what it resumes");
            return;
        }
    };
    let runs = &request.resume.runs;
    let resumed = |entry: &TranscriptEntry| entry.run_id.as_ref().is_some_and(|run_id| runs.contains(run_id));
    if !entries.iter().any(resumed) {
        return;
    }
    tracing::info!(session_key = %request.session_key, "the killed attempt's transcript was saved; the resumed run goes on from it");
    request.history = entries.into_iter().filter(|entry| !resumed(entry)).map(|entry| entry.message).collect();
    request.resume.saved = true;
}

/// Opens the run, trying again while the store is unreachable (see `state::outage`) unless
/// the run is cancelled: nothing has happened yet (no model call, no reply), so a passing
/// outage costs the user a delay rather than their message.
async fn open_through_outages(
    store: &dyn SessionStore,
    key: &str,
    reset: &ResetConfig,
    request: &RunRequest,
) -> Result<OpenedRun, StoreError> {
    through_outages("a run", Some(&request.cancel), StoreError::is_unavailable, || {
        store.open_run(key, Utc::now(), reset, &request.run_id)
    })
    .await
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::agent::Resumption;
    use crate::config::{ResetConfig, ResetMode};
    use crate::state::sqlite::{Database, SqliteSessionStore};

    const NEVER: ResetConfig = ResetConfig { mode: ResetMode::Manual, at_hour: 4, idle_minutes: 0 };

    /// Saves `entries` as run `run_id`'s transcript of session `key`; returns its id.
    async fn saved(store: &SqliteSessionStore, key: &str, run_id: &str, entries: &[ChatMessage]) -> String {
        let opened = store.open_run(key, Utc::now(), &NEVER, run_id).await.unwrap();
        store.close_run(key, run_id, entries, Usage::default()).await.unwrap();
        opened.resolved.session.session_id
    }

    #[tokio::test]
    async fn a_resumed_run_is_given_the_history_without_what_the_killed_attempt_saved() {
        let dir = tempfile::tempdir().unwrap();
        let store = SqliteSessionStore::new(Database::open(dir.path()).await.unwrap());
        let earlier = [ChatMessage::user("hello"), ChatMessage::assistant("hi", Vec::new())];
        saved(&store, "s", "earlier", &earlier).await;
        let killed = [ChatMessage::user("tell me"), ChatMessage::assistant("told", Vec::new())];
        let session_id = saved(&store, "s", "killed", &killed).await;

        let mut request = RunRequest::new("s", "");
        request.history = store.history(&session_id).await.unwrap();
        request.resume = Resumption { messages: killed.to_vec(), runs: vec!["killed".into()], ..Resumption::default() };
        leave_out_resumed_runs(&store, &session_id, &mut request).await;
        assert_eq!(request.history, earlier, "the killed attempt's entries are the resumed messages");
        assert!(request.resume.saved, "the run saves only what it adds");

        // A killed attempt whose transcript was never saved: the history stays whole.
        let mut request = RunRequest::new("s", "");
        request.history = store.history(&session_id).await.unwrap();
        request.resume = Resumption { messages: killed.to_vec(), runs: vec!["unsaved".into()], ..Resumption::default() };
        leave_out_resumed_runs(&store, &session_id, &mut request).await;
        assert_eq!(request.history.len(), 4);
        assert!(!request.resume.saved);
    }
}
