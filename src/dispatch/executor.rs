//! Running one batch of queued messages: the session (with its lazy reset), the agent run,
//! the transcript, and the reply.

use std::sync::Arc;

use async_trait::async_trait;
use chrono::Utc;
use ferry_channel::{OutboundMessage, Target};

use super::delivery::deliver_text;
use crate::agent::tools::Origin;
use crate::agent::{AgentRunner, RunRequest, RunStatus};
use crate::channels::ChannelRegistry;
use crate::config::ResetConfig;
use crate::queue::{RunExecutor, RunJob, RunReport};
use crate::session::{SessionStore, StoreError};

/// Told to the user when their conversation cannot be loaded or saved.
const STORE_TROUBLE: &str =
    "⚠️ I could not load this conversation just now. Please send your message again in a moment.";

pub struct AgentExecutor {
    pub runner: AgentRunner,
    pub store: Arc<dyn SessionStore>,
    pub channels: ChannelRegistry,
    pub reset: ResetConfig,
}

#[async_trait]
impl RunExecutor for AgentExecutor {
    async fn execute(&self, job: RunJob) -> RunReport {
        let Some(last) = job.messages.last() else { return RunReport::default() };
        let inbound = &last.message;
        let target = Target::of(inbound);
        let channel = self.channels.get(&inbound.channel, Some(&inbound.account_id));
        let key = job.session_key.as_str();

        let resolved = match self.store.resolve(key, Utc::now(), &self.reset).await {
            Ok(resolved) => resolved,
            Err(error) => {
                tracing::error!(session_key = key, %error, "cannot resolve the session; telling the user");
                if let Some(channel) = &channel {
                    let _ = channel.send(OutboundMessage::text(target, STORE_TROUBLE)).await;
                }
                return RunReport::default();
            }
        };
        if let Some(reason) = resolved.started {
            tracing::info!(session_key = key, reason = reason.as_str(), session_id = %resolved.session.session_id, "session started");
        }
        let mut request = RunRequest::new(key, job.prompt);
        if let Err(error) = self.store.begin_run(key, &resolved.session.session_id, &request.run_id).await {
            tracing::warn!(session_key = key, %error, "cannot take ownership of the session; running without a saved transcript");
        }
        request.history = match self.store.history(&resolved.session.session_id).await {
            Ok(history) => history,
            Err(error) => {
                tracing::error!(session_key = key, %error, "cannot read the transcript; answering without history");
                Vec::new()
            }
        };
        request.cancel = job.cancel;
        request.steer = Some(job.steer);
        request.origin = Some(Origin {
            channel: inbound.channel.clone(),
            account_id: inbound.account_id.clone(),
            target: target.clone(),
        });
        let run_id = request.run_id.clone();

        let outcome = self.runner.run(request, None).await;

        match self.store.append(key, &run_id, &outcome.transcript).await {
            Ok(()) => {}
            Err(StoreError::Superseded { .. }) => {
                tracing::info!(
                    session_key = key,
                    run_id,
                    "the session was reset or taken over during the run; its transcript is not saved"
                )
            }
            Err(error) => tracing::error!(session_key = key, run_id, %error, "cannot save the run's transcript"),
        }
        if let Err(error) = self.store.finish_run(key, &run_id, outcome.usage).await {
            tracing::error!(session_key = key, run_id, %error, "cannot record the run's token usage");
        }

        if !matches!(outcome.status, RunStatus::Aborted(_)) {
            match &channel {
                Some(channel) => {
                    for payload in &outcome.payloads {
                        deliver_text(channel.as_ref(), &target, &payload.text, &run_id).await;
                    }
                }
                None => tracing::error!(
                    channel = %inbound.channel,
                    account = %inbound.account_id,
                    "the reply's channel is not connected; the reply is lost"
                ),
            }
        }
        RunReport { unconsumed_steer: outcome.unconsumed_steer }
    }
}
