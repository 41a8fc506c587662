//! Running the agent inside a session: the lazy reset, run ownership, history in, fenced
//! transcript and usage out. The dispatcher's executor and `ferry agent` share it.

use chrono::Utc;
use tokio::sync::mpsc;

use super::store::{SessionStore, StoreError, TranscriptSaved};
use crate::agent::{AgentEvent, AgentRunner, RunOutcome, RunRequest};
use crate::config::ResetConfig;

/// Runs `request` in the session named by its `session_key`, whose history it continues;
/// `events` receives the run's events in order. The store is written twice: once to open
/// the run (lazy reset + ownership), once to close it (transcript + usage).
/// Fails only if the session cannot be resolved; later store trouble is logged and the
/// run's outcome still returned (the user gets their answer, the transcript may miss it).
pub async fn run_in_session(
    runner: &AgentRunner,
    store: &dyn SessionStore,
    reset: &ResetConfig,
    mut request: RunRequest,
    events: Option<mpsc::UnboundedSender<AgentEvent>>,
) -> Result<RunOutcome, StoreError> {
    let key = request.session_key.clone();
    let resolved = store.open_run(&key, Utc::now(), reset, &request.run_id).await?;
    if let Some(reason) = resolved.started {
        tracing::info!(session_key = %key, reason = reason.as_str(), session_id = %resolved.session.session_id, "session started");
    }
    request.history = match store.history(&resolved.session.session_id).await {
        Ok(history) => history,
        Err(error) => {
            tracing::error!(session_key = %key, %error, "cannot read the transcript; answering without history");
            Vec::new()
        }
    };
    let run_id = request.run_id.clone();
    let outcome = runner.run(request, events).await;
    match store.close_run(&key, &run_id, &outcome.transcript, outcome.usage).await {
        Ok(TranscriptSaved::Saved) => {}
        Ok(TranscriptSaved::Superseded) => {
            tracing::info!(session_key = %key, run_id, "the session was reset or taken over during the run; its transcript is not saved")
        }
        Err(error) => tracing::error!(session_key = %key, run_id, %error, "cannot save the run's transcript and usage"),
    }
    Ok(outcome)
}
