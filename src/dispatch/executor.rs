//! Running one batch of queued messages: the session (with its lazy reset), the agent run,
//! the transcript, and the reply.

use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use ferry_channel::{Channel, OutboundMessage, Target};
use tokio::sync::mpsc;

use super::models::chosen_model;
use super::overrides::OverridesCache;
use super::recovered::{self, Settled, delete_orphan};
use crate::agent::tools::{AgentToolPolicies, Origin};
use crate::agent::{Agents, Resumption, RunRequest, RunStatus};
use crate::channels::ChannelRegistry;
use crate::config::{Config, StreamingMode};
use crate::metrics::{PreviewAction, metrics};
use crate::models::ReasoningDisplay;
use crate::queue::prompt::follow_up_prompt;
use crate::queue::{QueuedMessage, RunExecutor, RunJob, RunReport};
use crate::reply::attachments::FileLimits;
use crate::reply::chunker::ChunkLimits;
use crate::reply::ledger::{DeliveryLedger, OrphanPreview};
use crate::reply::outbound::{OutboundScheduler, Schedulers, WriteGuard};
use crate::reply::turn::{BlockStyle, ReplyTurn, TurnStyle};
use crate::reply::typing::Typing;
use crate::session::{SessionStore, run_in_session};
use crate::state::jobs::JobStore;
use crate::state::leases::LeaseStore;
use crate::types::conversation::MediaRef;

/// Told to the user when their conversation cannot be loaded or saved.
const STORE_TROUBLE: &str =
    "⚠️ I could not load this conversation just now. Please send your message again in a moment.";

pub(super) struct AgentExecutor {
    pub(super) agents: Agents,
    pub(super) store: Arc<dyn SessionStore>,
    pub(super) channels: ChannelRegistry,
    pub(super) schedulers: Schedulers,
    pub(super) config: Arc<Config>,
    /// Shared with the dispatcher's commands: `/verbose` shows in the next reply.
    pub(super) overrides: Arc<OverridesCache>,
    /// Where each reply's delivery is recorded, and what the last shutdown left unfinished.
    pub(super) ledger: DeliveryLedger,
    /// Which tools each agent's chats may use (`[tools]`, the agent's own lists, and the
    /// channels' and groups'), by agent id.
    pub(super) tool_policies: AgentToolPolicies,
    /// Session leases when replicas share the state: a run writes to the platform only
    /// while this replica holds its session.
    pub(super) leases: Option<Arc<dyn LeaseStore>>,
    /// Where scheduled fires report how they ended.
    pub(super) jobs: Arc<dyn JobStore>,
}

/// Where a reply to a message goes.
struct Destination<'a> {
    channel: &'a str,
    /// The account, when named (a gateway client may leave it to the channel's only one).
    account_id: Option<&'a str>,
    target: Target,
    /// The message the reply answers, when it goes back where that message came from.
    answering: Option<String>,
}

/// The scheduled fires among a batch's messages (`cron`): run by `super::scheduled`.
fn fires_of(messages: &[QueuedMessage]) -> Vec<ferry_channel::ScheduledFire> {
    fires_by_id(messages).into_iter().map(|(_, fire)| fire).collect()
}

/// [`fires_of`], each with the id of the message that carries it.
fn fires_by_id(messages: &[QueuedMessage]) -> Vec<(i64, ferry_channel::ScheduledFire)> {
    messages
        .iter()
        .filter_map(|queued| Some((queued.id, queued.message.request.as_ref()?.scheduled.clone()?)))
        .collect()
}

/// Back where `message` came from, or where a gateway client asked for the reply to be
/// delivered.
fn destination(message: &QueuedMessage) -> Destination<'_> {
    let inbound = &message.message;
    match inbound.request.as_ref().and_then(|client| client.deliver.as_ref()) {
        Some(delivery) => Destination {
            channel: &delivery.channel,
            account_id: delivery.account_id.as_deref(),
            target: delivery.target.clone(),
            answering: None,
        },
        None => Destination {
            channel: &inbound.channel,
            account_id: Some(&inbound.account_id),
            target: Target::of(inbound),
            answering: Some(inbound.message_id.clone()),
        },
    }
}

#[async_trait]
impl RunExecutor for AgentExecutor {
    async fn execute(&self, mut job: RunJob) -> RunReport {
        // Messages left from before a restart whose channel is still connecting (its
        // platform was down at start-up) wait, journaled, instead of being answered nowhere;
        // they run again once it connects (`Scheduler::resume_kept`).
        if let Some(last) = job.messages.last() {
            let Destination { channel, account_id: account, .. } = destination(last);
            if self.channels.get(channel, account).is_none() && self.channels.is_starting(channel, account) {
                tracing::info!(%channel, session_key = %job.session_key, "the reply's channel is still connecting; its messages wait for it");
                return RunReport { retry_later: job.messages, ..RunReport::default() };
            }
        }
        // Replies a killed process left unfinished are completed first, in this lane.
        let count = job.messages.len();
        let fired = fires_by_id(&job.messages);
        let Settled { messages, preview: left_preview, answered, resumed } =
            recovered::settle(&self.ledger, &self.channels, &self.schedulers, std::mem::take(&mut job.messages)).await;
        self.report_settled(fired, &messages, answered).await;
        tracing::debug!(
            session_key = %job.session_key,
            seqs = ?messages.iter().map(|message| message.id).collect::<Vec<_>>(),
            resumed = ?resumed.seqs,
            joined = ?resumed.joined,
            ended = resumed.ended,
            answered,
            "a batch's recovered replies settled"
        );
        if messages.is_empty() {
            return RunReport { answered, ..RunReport::default() };
        }
        job.messages = messages;
        // Messages steered into a resumed run (or batched with its messages) are in its
        // recorded messages already; one that waits in a later batch is answered by this
        // run, and is not run again once this run's reply is delivered.
        let (joined, own): (Vec<QueuedMessage>, Vec<QueuedMessage>) =
            job.messages.into_iter().partition(|message| resumed.joined.contains(&message.id));
        job.messages = own;
        let Some(_) = job.messages.first() else { return RunReport { answered, ..RunReport::default() } };
        // What arrived since the resumed run began follows its recorded messages.
        let arrived: Vec<QueuedMessage> =
            job.messages.iter().filter(|message| !resumed.seqs.contains(&message.id)).cloned().collect();
        let resuming = !resumed.steps.is_empty();
        // The messages a killed attempt's whole reply (recorded before the kill) answers,
        // when this run also answers messages that came since.
        let answered_by_record: Vec<i64> = if resuming && resumed.ended && !arrived.is_empty() {
            job.messages.iter().map(|message| message.id).filter(|id| resumed.seqs.contains(id)).collect()
        } else {
            Vec::new()
        };
        if resuming {
            job.prompt = if arrived.is_empty() && job.summaries.is_empty() {
                String::new()
            } else {
                follow_up_prompt(&arrived, &job.summaries)
            };
        }
        let media = self.take_in_files(&mut job.messages).await;
        if !resuming && (job.messages.len() != count || !media.is_empty()) {
            job.prompt = follow_up_prompt(&job.messages, &job.summaries);
        }
        let fires = fires_of(&job.messages);
        let beat = match fires.iter().find(|fire| fire.kind == "heartbeat") {
            Some(fire) => match self.heartbeat_gate(&mut job, fire).await {
                Ok(beat) => beat,
                Err(report) => return report,
            },
            None => None,
        };
        let Some(last) = job.messages.last() else { return RunReport::default() };
        let inbound = &last.message;
        let key = job.session_key.as_str();
        let runner = self.agents.for_session(key);
        let Destination { channel: channel_name, account_id, target, answering } = destination(last);
        let Some(channel) = self.channels.get(channel_name, account_id) else {
            tracing::error!(channel = %channel_name, account = ?account_id, "the reply's channel is not connected; it cannot be answered");
            return RunReport::default();
        };
        let still_held: Option<WriteGuard> = self.leases.as_ref().map(|leases| {
            let (leases, session) = (leases.clone(), key.to_owned());
            Arc::new(move || leases.holds(&session)) as WriteGuard
        });
        let scheduler = match &still_held {
            None => self.schedulers.for_channel(&channel),
            Some(held) => self.schedulers.for_channel(&channel).guarded(held.clone()),
        };

        let mut request = RunRequest::new(key, job.prompt);
        request.media = media.files;
        request.resume = Resumption { messages: resumed.steps, ended: resumed.ended };
        request.still_held = still_held;
        request.schedulers = Some(self.schedulers.clone());
        // Kept to tell a run stopped while it waited for the store (its lease lost, or
        // `/stop`) from one the store refused.
        let stopped = job.cancel.clone();
        request.cancel = job.cancel;
        // Kept to tell the ledger which steered messages the reply answers.
        let steer = job.steer.clone();
        request.steer = Some(job.steer);
        // A gateway client names its run (and waits on that name); requests collected
        // into this run are answered by it too.
        if let Some(client) = inbound.request.as_ref() {
            request.run_id.clone_from(&client.run_id);
            request.extra_system_prompt.clone_from(&client.extra_system_prompt);
            request.timeout = client.timeout_seconds.map(Duration::from_secs);
        }
        request.merged_run_ids = job
            .messages
            .iter()
            .filter_map(|queued| queued.message.request.as_ref().map(|client| client.run_id.clone()))
            .filter(|run_id| *run_id != request.run_id)
            .collect();
        let origin = Origin {
            channel: channel.name().to_owned(),
            account_id: channel.account_id().to_owned(),
            target: target.clone(),
        };
        request.origin = Some(origin.clone());
        request.sender_id = Some(inbound.sender.id.clone());
        if self.config.memory.enabled {
            request.memory_scope = crate::memory::scope::scope_of(inbound, self.config.session.dm_scope)
                .map(|scope| crate::state::memory::MemoryScope::new(agent_of(key), scope));
            // A conversation with people saves its memories before compaction; the heartbeat
            // and scheduled jobs do not (nobody told them anything to keep).
            request.memory_flush = request.memory_scope.is_some() && fires.is_empty();
        }
        let run_id = request.run_id.clone();
        let overrides = self.overrides.get(self.store.as_ref(), key).await;
        request.model = chosen_model(runner.router(), &overrides);
        if let Some(beat) = &beat
            && let Some(model) = &self.config.agents.settings_of(&beat.agent_id).heartbeat.model
        {
            match runner.router().catalog().find_allowed(model) {
                Some(candidate) => request.model = Some(candidate.clone()),
                None => tracing::warn!(%model, "the heartbeat's model is not one of the agent's; using the agent's"),
            }
        }
        request.thinking = overrides.thinking;
        request.reasoning = overrides.reasoning.unwrap_or_default();
        request.tools = self.tool_policies.of(agent_of(key)).for_account_chat(
            channel_name,
            channel.account_id(),
            &target.chat.id,
            inbound.space_id.as_deref(),
        );
        if channel.capabilities().replies_via_chat_events && !fires.is_empty() {
            tracing::warn!(channel = %channel_name, "a scheduled job cannot deliver to a chat that only follows run events");
            self.report(
                &fires,
                crate::cron::outcome::Ended::Skipped { why: "its chat cannot be sent to".into() },
                None,
            )
            .await;
            return RunReport::default();
        }
        if channel.capabilities().replies_via_chat_events {
            // Its clients follow the run's own events; nothing is sent to the channel.
            let slot = job.global.enter(key);
            let reset = &self.config.session.reset;
            return match run_in_session(runner, self.store.as_ref(), reset, request, None, slot).await {
                Ok(outcome) => RunReport { unconsumed_steer: outcome.unconsumed_steer, ..RunReport::default() },
                Err(error) if error.is_fenced() => fenced_out(key),
                Err(_) if stopped.is_cancelled() => stopped_waiting(key),
                Err(error) => {
                    tracing::error!(session_key = key, %error, "cannot resolve the session; telling the user");
                    store_trouble(&scheduler, target, &run_id).await;
                    RunReport::default()
                }
            };
        }
        let mut style = self.style(&channel, key);
        style.verbose = overrides.verbose.unwrap_or(false);
        style.reasoning = request.reasoning;
        // The reply answers the summarized messages too: its completing record marks them.
        let answers: Vec<i64> =
            job.messages.iter().map(|message| message.id).chain(job.summarized.iter().copied()).collect();
        let recorder = self.ledger.recorder(answers.clone());
        recorder.join(&resumed.joined);
        let sends = self.ledger.sends(recorder.clone(), resumed.sends);
        request.send_ledger = Some(sends.clone());
        let mut turn = ReplyTurn::new(scheduler.clone(), origin, &run_id, answering, style)
            .with_hooks(runner.hooks().clone())
            .with_recorder(recorder.clone())
            .with_sends(sends.clone());
        if let Some(left) = left_preview {
            if left.channel == channel.name()
                && left.account_id == channel.account_id()
                && turn.adopt_preview(left.message.clone())
            {
                metrics().preview_recovered(&left.channel, PreviewAction::Reused);
                self.ledger
                    .hand_over_preview(&left.seqs, &answers, &left.channel, &left.account_id, &left.message)
                    .await;
            } else {
                let orphan =
                    OrphanPreview { channel: left.channel, account_id: left.account_id, message: left.message };
                delete_orphan(&self.channels, &self.schedulers, &orphan).await;
            }
        }
        if fires.iter().any(|fire| fire.kind == "text") {
            return self.remind(turn, &job.messages, &fires).await;
        }
        // On from when the run gets its slot in the global lane (a run waiting for one
        // shows nothing) until the reply is sent (dropped at the end of this function).
        let typing: Arc<std::sync::Mutex<Option<Typing>>> = Arc::default();
        let slot = {
            let (typing, scheduler, target) = (typing.clone(), scheduler.clone(), target.clone());
            let permit = job.global.enter(key);
            async move {
                let permit = permit.await;
                *typing.lock().unwrap_or_else(std::sync::PoisonError::into_inner) =
                    Some(Typing::start(scheduler, target));
                permit
            }
        };
        let (events, followed) = mpsc::unbounded_channel();
        let reset = &self.config.session.reset;
        let (outcome, ()) = tokio::join!(
            run_in_session(runner, self.store.as_ref(), reset, request, Some(events), slot),
            turn.follow(followed)
        );
        let mut outcome = match outcome {
            Ok(outcome) => outcome,
            Err(error) if error.is_fenced() => return fenced_out(key),
            Err(_) if stopped.is_cancelled() => return stopped_waiting(key),
            Err(error) => {
                tracing::error!(session_key = key, %error, "cannot resolve the session; telling the user");
                store_trouble(&scheduler, target, &run_id).await;
                return RunReport::default();
            }
        };
        if !fires.is_empty() {
            return self.deliver_scheduled(turn, outcome, &fires, beat.as_ref(), &scheduler, &target).await;
        }
        // The model failed for a passing reason even after its retries: the messages are
        // kept for later rather than dropped, and the user is told so. The notice is not the
        // answer, so it is not recorded as one.
        let kept = match &outcome.status {
            RunStatus::Failed { error } if error.is_transient() => {
                Some(format!("{} {KEPT_FOR_LATER}", error.problem()))
            }
            _ => None,
        };
        let keep = kept.is_some();
        if let Some(kept) = kept {
            if let Some(notice) = outcome.payloads.iter_mut().rev().find(|payload| payload.is_error) {
                notice.text = kept;
            }
            // What the run sent is recorded before the record that ends its generation.
            sends.settle().await;
            self.ledger.kept(&recorder).await;
            turn = if answered_by_record.is_empty() {
                turn.without_recorder()
            } else {
                // The killed attempt's reply is among the payloads: delivered now, it is
                // recorded as the answer to its own messages, which are not asked about again
                // (its text may be on screen already, from a send the kill left unknown).
                let earlier = self.ledger.recorder(answered_by_record.clone());
                earlier.join(&resumed.joined);
                if let Some(preview) = turn.preview_message() {
                    // The preview becomes that reply's: the messages kept for later must not
                    // stream into it (and over it) when they run.
                    let (channel, account) = (channel.name(), channel.account_id());
                    self.ledger.hand_over_preview(&answers, &answered_by_record, channel, account, &preview).await;
                }
                turn.with_recorder(earlier)
            };
        }
        // Messages steered into the run are answered by its reply: the record that completes
        // it marks them, so a restart does not run them again.
        recorder.join(&steer.taken_seqs());
        let delivered = turn.deliver(&outcome).await;
        tracing::debug!(session_key = %key, seqs = ?answers, joined = ?recorder.joined(), delivered, keep, "a run's reply ended");
        // Kept for later, only what the killed attempt's reply answered is answered.
        let earlier_answered = keep && delivered && !answered_by_record.is_empty();
        if delivered && (!keep || earlier_answered) {
            // Not before, and not when it was not delivered: a run stopped (its lease lost)
            // or kept for later leaves them to run in their own batch rather than lost.
            self.ledger.finished(&resumed.joined);
        }
        // A reply withheld because this replica stopped holding the session (lost, or lapsed
        // while the database was out of reach) is the next holder's to give.
        let fenced = !delivered && self.leases.as_ref().is_some_and(|leases| !leases.holds(key));
        // Kept for later, the run answered nothing but what the killed attempt's reply
        // answered: what joined it waits with its own messages.
        let retry_later = if !keep {
            Vec::new()
        } else if earlier_answered {
            job.messages.into_iter().filter(|message| !answered_by_record.contains(&message.id)).collect()
        } else {
            let mut kept: Vec<QueuedMessage> = job.messages.into_iter().chain(joined).collect();
            kept.sort_by_key(|message| message.id);
            kept
        };
        RunReport {
            unconsumed_steer: outcome.unconsumed_steer,
            answered: delivered && answered && !keep,
            retry_later,
            fenced,
        }
    }
}

/// A run stopped (its session's lease lost, or `/stop`) while it waited for an unreachable
/// store: nothing is said; its messages are where the stop left them.
fn stopped_waiting(key: &str) -> RunReport {
    tracing::info!(session_key = key, "the run was stopped while it waited for the session store");
    RunReport::default()
}

/// A run that found its session's lease gone to another replica: nothing is said to the
/// user here; the messages stay journaled and the session's new holder answers them.
fn fenced_out(key: &str) -> RunReport {
    tracing::info!(session_key = key, "another replica holds this session now; it answers these messages");
    RunReport { fenced: true, ..RunReport::default() }
}

/// The files of a batch, taken in.
#[derive(Default)]
struct TakenIn {
    /// Some message had files (its prompt now says what they gave).
    any: bool,
    files: Vec<MediaRef>,
}

impl TakenIn {
    fn is_empty(&self) -> bool {
        !self.any
    }
}

/// The agent id a session key names (`agent:<id>:…`).
fn agent_of(session_key: &str) -> &str {
    session_key.split(':').nth(1).unwrap_or_default()
}

/// Added to the notice of a run the model failed for a passing reason.
const KEPT_FOR_LATER: &str = "I kept your message and will answer it together with your next one.";

/// Tells the user their conversation could not be loaded (the run did not start).
async fn store_trouble(scheduler: &OutboundScheduler, target: Target, run_id: &str) {
    let mut notice = OutboundMessage::text(target, STORE_TROUBLE);
    notice.idempotency_key = Some(format!("{run_id}:store-trouble"));
    if let Err(error) = scheduler.send(notice).await {
        tracing::warn!(%error, "telling the user about the session trouble failed");
    }
}

impl AgentExecutor {
    /// Takes in the files of `messages` ([`Media::receive`](crate::media::Media::receive)): what the model reads of them
    /// joins each message's prompt, the files themselves go to the run, and a sender whose
    /// file was refused is told so (the message's text runs all the same).
    async fn take_in_files(&self, messages: &mut [QueuedMessage]) -> TakenIn {
        let mut taken = TakenIn::default();
        // One media store serves every agent.
        let Some(media) = self.agents.default_runner().media() else { return taken };
        for queued in messages.iter_mut().filter(|queued| !queued.message.attachments.is_empty()) {
            taken.any = true;
            let inbound = &queued.message;
            let Some(channel) = self.channels.get(&inbound.channel, Some(&inbound.account_id)) else {
                tracing::warn!(channel = %inbound.channel, "the files' channel is not connected; they are not taken in");
                continue;
            };
            let received = media.receive(channel.as_ref(), &inbound.attachments).await;
            // A client following the run's events (the web chat) would take a message of
            // the channel for the run's reply; it refuses files at upload already, and the
            // model reads why a file is missing.
            if !received.refusals.is_empty() && !channel.capabilities().replies_via_chat_events {
                let mut notice = OutboundMessage::text(Target::of(inbound), received.refusals.join("\n"));
                notice.reply_to_message_id = Some(inbound.message_id.clone());
                notice.idempotency_key = Some(format!("media-refused:{}", queued.id));
                if let Err(error) = self.schedulers.for_channel(&channel).send(notice).await {
                    tracing::warn!(%error, "telling the sender about a refused file failed");
                }
            }
            queued.prompt = received.prompt_with(&queued.prompt);
            taken.files.extend(received.media);
        }
        taken
    }

    /// How replies show on `channel`: its operator settings within its capabilities, and
    /// the streaming settings of the agent `session_key` belongs to.
    fn style(&self, channel: &Arc<dyn Channel>, session_key: &str) -> TurnStyle {
        let capabilities = channel.capabilities();
        let defaults = self.config.agents.settings_of(agent_of(session_key));
        let (streaming, chunk_limit) = self.config.channels.reply_settings(channel.name(), channel.account_id());
        TurnStyle {
            preview: streaming == StreamingMode::Partial && capabilities.supports_edit && !defaults.block_streaming,
            text_limit: chunk_limit.map_or(capabilities.text_limit, |limit| limit.min(capabilities.text_limit)),
            edit_interval: capabilities.min_edit_interval,
            reply_to: self.config.messages.reply_to_mode,
            supports_reply_to: capabilities.supports_reply_to,
            prefix: self.config.messages.response_prefix.clone(),
            markup: capabilities.markup,
            max_lines: capabilities.max_lines,
            files: FileLimits::of(capabilities),
            verbose: false,
            reasoning: ReasoningDisplay::Off,
            blocks: defaults.block_streaming.then(|| BlockStyle {
                limits: ChunkLimits::from(&defaults.block_streaming_chunk),
                mode: defaults.block_streaming_break,
                idle: Duration::from_millis(defaults.block_streaming_coalesce.idle_ms),
                delay: defaults.human_delay,
            }),
        }
    }
}
