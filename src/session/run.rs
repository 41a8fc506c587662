//! Running the agent inside a session: the lazy reset, run ownership, history in, fenced
//! transcript and usage out. The dispatcher's executor and `ferry agent` share it.

use chrono::Utc;
use tokio::sync::mpsc;

use super::compaction::SessionCompactor;
use crate::agent::{AgentEvent, AgentRunner, ChatMessage, RunOutcome, RunRequest, Usage};
use crate::config::ResetConfig;
use crate::state::outage::through_outages;
use crate::state::sessions::{OpenedRun, SessionStore, StoreError, TranscriptSaved};

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
