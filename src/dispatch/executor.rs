//! Running one batch of queued messages: the session (with its lazy reset), the agent run,
//! the transcript, and the reply.

use std::sync::Arc;

use async_trait::async_trait;
use ferry_channel::{OutboundMessage, Target};

use super::delivery::deliver_text;
use crate::agent::tools::Origin;
use crate::agent::{AgentRunner, RunRequest, RunStatus};
use crate::channels::ChannelRegistry;
use crate::config::ResetConfig;
use crate::queue::{RunExecutor, RunJob, RunReport};
use crate::reply::shaping::shape_finals;
use crate::reply::typing::Typing;
use crate::session::{SessionStore, run_in_session};

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

        let mut request = RunRequest::new(key, job.prompt);
        request.cancel = job.cancel;
        request.steer = Some(job.steer);
        let origin =
            Origin { channel: inbound.channel.clone(), account_id: inbound.account_id.clone(), target: target.clone() };
        request.origin = Some(origin.clone());
        let run_id = request.run_id.clone();
        // On until the reply is sent (dropped at the end of this function).
        let _typing =
            channel.as_ref().map_or_else(Typing::none, |channel| Typing::start(channel.clone(), target.clone()));
        let slot = job.global.enter(key);
        let outcome = match run_in_session(&self.runner, self.store.as_ref(), &self.reset, request, None, slot).await {
            Ok(outcome) => outcome,
            Err(error) => {
                tracing::error!(session_key = key, %error, "cannot resolve the session; telling the user");
                if let Some(channel) = &channel {
                    let _ = channel.send(OutboundMessage::text(target, STORE_TROUBLE)).await;
                }
                return RunReport::default();
            }
        };

        if !matches!(outcome.status, RunStatus::Aborted(_)) {
            match &channel {
                Some(channel) => {
                    let finals = shape_finals(&outcome.payloads, &origin, &outcome.tool_sends, None);
                    for text in &finals {
                        deliver_text(channel.as_ref(), &target, text, &run_id).await;
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
