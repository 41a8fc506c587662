//! One agent run: a message in, model inference and tool calls, a reply out (SPEC §6.2).
//!
//! [`AgentRunner::run`] drives the loop: stream the model, execute the tool calls it
//! makes (in order), feed the results back, until the model answers without tools. Around
//! it: the run timeout and an external cancellation abort it; the idle watchdog ends a
//! stream that goes silent; a transient failure is retried only while nothing was shown.
//! Whatever happens, the run's events end with exactly one terminal lifecycle event and
//! the caller gets a [`RunOutcome`] with the reply payloads, usage and new transcript.
//! When the context outgrows the model, [`compact`] shortens it between calls.

mod compact;
mod images;
mod memory_flush;
mod resume;

use std::path::PathBuf;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use chrono::{DateTime, Utc};
use futures::StreamExt;
use tokio::sync::mpsc;
use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;
use tracing::Instrument;

use self::images::load_recent_images;
pub use self::resume::Resumption;
use self::resume::saved_already;
use super::compaction::Compactor;
use super::events::{
    AgentEvent, AssistantEvent, EventBus, LifecycleEvent, RunEvents, ToolEvent, tool_result_for_event,
};
use super::prompt::{BootstrapCache, system_prompt};
use super::providers::{ModelProvider, ModelRequest, ProviderError, RetryPolicy};
use super::skills::{SkillsCache, SkillsSnapshot};
use super::steer::SteerInbox;
use super::tools::{Origin, SessionCatalog, ToolContext, ToolFilter, ToolRegistry, ToolSend, parse_arguments};
use super::turn::{AssistantTurn, TextLimit, TurnAccumulator};
use crate::channels::ChannelRegistry;
use crate::config::AgentSettings;
use crate::hooks::{AgentEnd, Hooks};
use crate::media::{FileInfo, Media, Outgoing};
use crate::metrics::{ModelCall, RunEnd, metrics};
use crate::models::{Attempt, Candidate, FailoverReason, ModelRouter, ModelUsed, ReasoningDisplay, ThinkingLevel};
use crate::reply::media_lines;
use crate::reply::outbound::Schedulers;
use crate::types::conversation::{ChatMessage, MediaRef, ToolCall, Usage, answer_open_tool_calls};
use ferry_channel::Attachment;

/// What a tool call gets when a queued user message arrived before it started (steering).
pub const SKIPPED_FOR_STEER: &str = "skipped due to queued user message";

/// Limits every run of a runner obeys.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RunSettings {
    pub timeout: Duration,
    /// A model stream that sends nothing for this long is aborted.
    pub idle_timeout: Duration,
    /// Model ↔ tool rounds before the model must answer without tools.
    pub max_tool_rounds: u32,
    /// The most assistant text one run may produce (`agents.defaults.max_reply_chars`).
    pub max_reply_chars: usize,
    pub retry: RetryPolicy,
    /// Retries of a model call that failed transiently after part of its reply was shown
    /// (a stall, a cut stream, a 5xx): the reply is streamed again from the start into the
    /// same place (issue 17).
    pub retry_after_output: RetryPolicy,
    /// Tokens kept free below the model's context window (`agents.defaults.compaction`).
    pub compaction_reserve_tokens: u32,
    /// `agents.defaults.thinking`: how hard models think unless a session chose otherwise.
    pub thinking: ThinkingLevel,
}

impl RunSettings {
    pub fn from_config(defaults: &AgentSettings) -> Self {
        Self {
            timeout: Duration::from_secs(defaults.timeout_seconds),
            idle_timeout: Duration::from_secs(defaults.model_idle_timeout_seconds),
            max_tool_rounds: defaults.max_tool_rounds,
            max_reply_chars: defaults.max_reply_chars,
            retry: RetryPolicy::default(),
            retry_after_output: RetryPolicy::after_output(Duration::from_millis(defaults.model_retry_after_output_ms)),
            compaction_reserve_tokens: defaults.compaction.reserve_tokens,
            thinking: defaults.thinking,
        }
    }
}

/// Everything a runner needs, assembled by whoever embeds Ferry (the gateway, the CLI).
pub struct RunnerParts {
    /// The models and credentials runs may use; `ResolvedModel::into()` for one client.
    pub model: ModelRouter,
    pub tools: ToolRegistry,
    pub bus: EventBus,
    pub settings: RunSettings,
    /// The agent workspace: bootstrap files and skills.
    pub workspace: PathBuf,
    pub channels: ChannelRegistry,
    pub sessions: Arc<dyn SessionCatalog>,
    /// Plugin and internal hooks (SPEC §9); `Hooks::default()` for none. The dispatcher
    /// built on this runner uses the same ones.
    pub hooks: Hooks,
    /// Users' files: the dispatcher takes them in through it, and runs load the images of
    /// the latest turns from its store. `None`: files are not taken (embedders, tests).
    pub media: Option<Arc<Media>>,
    /// Long-term memory: what a private conversation's prompt shows of it. `None`: none
    /// (embedders, tests); the memory tools are registered with `tools` on their own.
    pub memory: Option<crate::memory::AgentMemory>,
}

/// Runs agent turns. Cheap to clone; clones share the model client, tools and caches.
#[derive(Clone)]
pub struct AgentRunner {
    inner: Arc<Inner>,
}

struct Inner {
    parts: RunnerParts,
    skills: SkillsCache,
    bootstrap: BootstrapCache,
}

/// One run's input.
pub struct RunRequest {
    pub run_id: String,
    pub session_key: String,
    pub message: String,
    /// The files that came with the message ([`Media::receive`]), images loaded.
    pub media: Vec<MediaRef>,
    /// The conversation so far, oldest first.
    pub history: Vec<ChatMessage>,
    pub extra_system_prompt: Option<String>,
    /// Overrides the runner's timeout for this run.
    pub timeout: Option<Duration>,
    /// Cancelling it aborts the run (`/stop`, interrupt mode, `chat.abort`).
    pub cancel: CancellationToken,
    /// The chat the message came from, if any.
    pub origin: Option<Origin>,
    /// Who sent the message the run answers, for the tools (the `cron` tool's job owner).
    pub sender_id: Option<String>,
    /// Whose long-term memory the run works in: its tools', and the `MEMORY.md` its prompt
    /// shows (a private scope's only). `None`: no memory.
    pub memory_scope: Option<crate::state::memory::MemoryScope>,
    /// Whether, when the context is about to be compacted, the agent first gets one silent
    /// turn to save what matters to memory (`memory_scope`'s): for conversations with
    /// people, never for the heartbeat or scheduled jobs. Off unless the caller says.
    pub memory_flush: bool,
    /// User messages injected into the running turn at its next boundary (steering).
    pub steer: Option<SteerInbox>,
    /// Other client run ids this run answers (see [`LifecycleEvent::Start`]).
    pub merged_run_ids: Vec<String>,
    /// The model the session chose with `/model`: the only one tried (no fallbacks).
    pub model: Option<Candidate>,
    /// The session's `/think` level; `None` for `agents.defaults.thinking`.
    pub thinking: Option<ThinkingLevel>,
    /// The session's `/reasoning`, announced in the start event for listeners.
    pub reasoning: ReasoningDisplay,
    /// The tools this run may use (the chat's `[tools]` policy); others are not offered.
    pub tools: ToolFilter,
    /// The outbound schedulers the `message` tool sends through (the dispatcher's).
    pub schedulers: Option<Schedulers>,
    /// The delivery ledger's record of the reply's sends while the run goes on (see
    /// [`crate::reply::ledger::sends`]); `None` where the reply is not recorded.
    pub send_ledger: Option<crate::reply::ledger::RunSends>,
    /// What a killed attempt at this run recorded ([`Resumption`]): the run resumes from it,
    /// and `message` (when not empty) follows as messages that arrived since.
    pub resume: Resumption,
    /// Whether this process still holds the run's session, by its own reckoning (replicas
    /// sharing PostgreSQL; `None`: always). Asked before each model call: a replica paused
    /// past its lease asks the model nothing more for a session another replica has taken
    /// over; the run ends as cancelled, as the renewal that reports the loss would end it.
    pub still_held: Option<Arc<dyn Fn() -> bool + Send + Sync>>,
}

impl RunRequest {
    /// A run with a fresh id and no history, overrides or origin.
    pub fn new(session_key: impl Into<String>, message: impl Into<String>) -> Self {
        Self {
            run_id: uuid::Uuid::new_v4().to_string(),
            session_key: session_key.into(),
            message: message.into(),
            media: Vec::new(),
            history: Vec::new(),
            extra_system_prompt: None,
            timeout: None,
            cancel: CancellationToken::new(),
            origin: None,
            sender_id: None,
            memory_scope: None,
            memory_flush: false,
            steer: None,
            merged_run_ids: Vec::new(),
            model: None,
            thinking: None,
            reasoning: ReasoningDisplay::Off,
            tools: ToolFilter::everything(),
            schedulers: None,
            send_ledger: None,
            resume: Resumption::default(),
            still_held: None,
        }
    }
}

/// How a run ended.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum RunStatus {
    Completed,
    Aborted(AbortReason),
    /// The model call failed; `error` is for logs, the user sees an error payload.
    Failed {
        error: ProviderError,
    },
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum AbortReason {
    Timeout,
    Cancelled,
}

/// Something to show the user: assistant text, or an error message.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Payload {
    pub text: String,
    pub is_error: bool,
}

/// A tool call that failed, for the reply pipeline's fallback message.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ToolFailure {
    pub name: String,
    pub error: String,
    pub mutates: bool,
}

/// What a run produced.
#[derive(Debug, Clone)]
pub struct RunOutcome {
    pub run_id: String,
    pub status: RunStatus,
    pub payloads: Vec<Payload>,
    pub usage: Usage,
    /// The entries this run added to the conversation, starting with the user's message.
    pub transcript: Vec<ChatMessage>,
    pub tool_sends: Vec<ToolSend>,
    pub tool_failures: Vec<ToolFailure>,
    /// Steering messages that arrived too late for the run to take; they need their own run.
    pub unconsumed_steer: Vec<String>,
    pub started_at: DateTime<Utc>,
    pub ended_at: DateTime<Utc>,
    /// The model and profile that answered the run's last model call, if one did.
    pub model: Option<ModelUsed>,
    /// Told to the user beside the answer, once (e.g. that the model cannot think).
    pub notices: Vec<String>,
    /// Files the reply attaches (its `MEDIA:` lines), sent after its text.
    pub attachments: Vec<Attachment>,
}

/// A run started in the background.
pub struct RunHandle {
    pub run_id: String,
    /// Every event of the run, in order, ending with its terminal lifecycle event.
    pub events: mpsc::UnboundedReceiver<AgentEvent>,
    task: JoinHandle<RunOutcome>,
}

impl RunHandle {
    /// Waits for the outcome. A run task that panicked reports as failed.
    pub async fn outcome(self) -> Result<RunOutcome, tokio::task::JoinError> {
        self.task.await
    }
}

/// Mutable state of a run, kept outside the loop's future so an abort keeps its progress.
struct RunState {
    messages: Vec<ChatMessage>,
    first_new: usize,
    payloads: Vec<Payload>,
    usage: Usage,
    failures: Vec<ToolFailure>,
    sends: Arc<Mutex<Vec<ToolSend>>>,
    /// Token accounting and overflow retries, for compaction.
    context: compact::ContextState,
    /// Assistant text produced so far, in characters, against `max_reply_chars`.
    reply_chars: usize,
    /// The model and profile that answered the last call.
    answered: Option<ModelUsed>,
    /// Notices for the user beside the answer (a model that cannot think).
    notices: Vec<String>,
    /// Files the reply's `MEDIA:` lines attached.
    attachments: Vec<Attachment>,
    /// Messages up to here are in the delivery ledger ([`resume`]): recorded by a killed
    /// attempt this run resumes, or by this run's last step.
    recorded: usize,
}

impl RunState {
    /// A run's state over `messages`, of which those from `first_new` on are the run's own.
    fn new(messages: Vec<ChatMessage>, first_new: usize) -> Self {
        Self {
            messages,
            first_new,
            payloads: Vec::new(),
            usage: Usage::default(),
            failures: Vec::new(),
            sends: Arc::new(Mutex::new(Vec::new())),
            context: compact::ContextState::default(),
            reply_chars: 0,
            answered: None,
            notices: Vec::new(),
            attachments: Vec::new(),
            recorded: first_new,
        }
    }
}

impl AgentRunner {
    pub fn new(parts: RunnerParts) -> Self {
        let skills = SkillsCache::new(&parts.workspace);
        let bootstrap = BootstrapCache::new(&parts.workspace);
        Self { inner: Arc::new(Inner { parts, skills, bootstrap }) }
    }

    /// Which model and credentials answer each call.
    pub fn router(&self) -> &ModelRouter {
        &self.inner.parts.model
    }

    pub fn settings(&self) -> &RunSettings {
        &self.inner.parts.settings
    }

    pub fn bus(&self) -> &EventBus {
        &self.inner.parts.bus
    }

    /// The tools runs may use; the chat commands reach the host tools through it.
    pub fn tools(&self) -> &ToolRegistry {
        &self.inner.parts.tools
    }

    pub fn hooks(&self) -> &Hooks {
        &self.inner.parts.hooks
    }

    /// The agent's long-term memory; `None` when it has none (`memory.enabled` off).
    pub fn memory(&self) -> Option<&crate::memory::AgentMemory> {
        self.inner.parts.memory.as_ref()
    }

    /// What the agent's files are sent with: `None` without media.
    fn outgoing(&self) -> Option<Outgoing> {
        let parts = &self.inner.parts;
        let sandbox = parts.tools.host().map(|host| host.sandbox().clone());
        parts.media.clone().map(|media| Outgoing::new(media, sandbox))
    }

    /// `text` without its `MEDIA:` lines, whose files join the reply's attachments; a file
    /// that cannot be attached is said in the text instead, so the user learns of it.
    async fn attach_media_lines(&self, text: &str, session_key: &str, state: &mut RunState) -> String {
        let split = media_lines::split(text);
        if split.media.is_empty() {
            return text.to_owned();
        }
        let mut shown = split.text.trim_end().to_owned();
        for named in &split.media {
            let attached = match self.outgoing() {
                Some(outgoing) => outgoing.attach(named, session_key).await,
                None => Err(super::tools::ToolError::new("this agent cannot send files")),
            };
            match attached {
                Ok(attachment) => state.attachments.push(attachment),
                Err(error) => {
                    tracing::info!(%error, "a MEDIA: line names a file that cannot be attached");
                    if !shown.is_empty() {
                        shown.push_str("\n\n");
                    }
                    shown.push_str(&format!("(I could not attach {named}: {error})"));
                }
            }
        }
        shown
    }

    /// Users' files (`None` when this runner takes none).
    pub fn media(&self) -> Option<&Arc<Media>> {
        self.inner.parts.media.as_ref()
    }

    /// The agent workspace (bootstrap files, skills; hooks may keep files there).
    pub fn workspace(&self) -> &std::path::Path {
        &self.inner.parts.workspace
    }

    /// Starts a run on its own task; its events arrive on the handle as they happen.
    pub fn start(&self, request: RunRequest) -> RunHandle {
        let (sender, events) = mpsc::unbounded_channel();
        let run_id = request.run_id.clone();
        let runner = self.clone();
        let task = tokio::spawn(async move { runner.run(request, Some(sender)).await });
        RunHandle { run_id, events, task }
    }

    /// Runs to the end. `consumer` receives every event of the run in order.
    pub async fn run(&self, request: RunRequest, consumer: Option<mpsc::UnboundedSender<AgentEvent>>) -> RunOutcome {
        self.run_then(request, consumer, |_, _| async {}).await
    }

    /// [`AgentRunner::run`], with `persist` given the run's new transcript entries and usage
    /// before the terminal lifecycle event: whoever hears that a run ended (an
    /// `agent.wait`) can then read its transcript.
    pub async fn run_then<P, F>(
        &self,
        request: RunRequest,
        consumer: Option<mpsc::UnboundedSender<AgentEvent>>,
        persist: P,
    ) -> RunOutcome
    where
        P: FnOnce(Vec<ChatMessage>, Usage) -> F,
        F: Future<Output = ()>,
    {
        self.run_with(request, consumer, None, persist).await
    }

    /// [`AgentRunner::run_then`] in a session whose context `compactor` can shorten when it
    /// outgrows the model (SPEC §6.9). Without one, a context overflow fails the run.
    pub async fn run_with<P, F>(
        &self,
        mut request: RunRequest,
        consumer: Option<mpsc::UnboundedSender<AgentEvent>>,
        compactor: Option<&dyn Compactor>,
        persist: P,
    ) -> RunOutcome
    where
        P: FnOnce(Vec<ChatMessage>, Usage) -> F,
        F: Future<Output = ()>,
    {
        let parts = &self.inner.parts;
        let events = RunEvents::new(&request.run_id, &request.session_key, parts.bus.clone(), consumer);
        let span = tracing::info_span!("run", run_id = %request.run_id, session_key = %request.session_key);
        let started_at = Utc::now();
        let merged_run_ids = std::mem::take(&mut request.merged_run_ids);
        // Once per run: a session that must be sandboxed loses the command tools when the
        // sandbox cannot be used.
        request.tools = parts.tools.filter_for(&request.session_key, &request.tools);
        let first = parts.model.route(&request.session_key, request.model.as_ref()).next_attempt();
        events.lifecycle(LifecycleEvent::Start {
            started_at,
            merged_run_ids,
            model: first.as_ref().map(Attempt::used),
            reasoning: request.reasoning,
        });
        let run_metrics = metrics().run_started();

        let mut history = std::mem::take(&mut request.history);
        // A transcript saved before stopped runs were repaired may hold unanswered calls.
        answer_open_tool_calls(&mut history, 0, INTERRUPTED_TOOL);
        // A run a crash cut short resumes from what it recorded ([`resume`]); what of that
        // the session saved already (an attempt that ended) is taken out of the history and
        // not saved again.
        let saved = saved_already(&history, &request.resume.messages);
        history.truncate(history.len() - saved);
        let first_new = history.len();
        history.append(&mut request.resume.messages);
        let recorded = history.len();
        let saved_from = first_new + saved;
        if recorded == first_new || !request.message.is_empty() {
            let media = std::mem::take(&mut request.media);
            history.push(ChatMessage::User { text: request.message.clone(), media });
        }
        if let Some(media) = &parts.media {
            load_recent_images(media, &mut history, first_new, media.config().history_images).await;
        }
        let mut state = RunState::new(history, first_new);
        state.recorded = recorded;
        let timeout = request.timeout.unwrap_or(parts.settings.timeout);
        let cancel = request.cancel.clone();
        let result = tokio::select! {
            biased;
            _ = cancel.cancelled() => Err(AbortReason::Cancelled),
            _ = tokio::time::sleep(timeout) => Err(AbortReason::Timeout),
            result = self.turns(&mut state, &mut request, &events, compactor).instrument(span.clone()) => Ok(result),
        };

        let completed = matches!(result, Ok(Ok(())));
        let ended_at = Utc::now();
        let unconsumed_steer = request.steer.as_ref().map(SteerInbox::close).unwrap_or_default();
        let merged_run_ids = request.steer.as_ref().map(SteerInbox::taken_run_ids).unwrap_or_default();
        let model = state.answered.clone();
        let (status, terminal, end) = match result {
            Ok(Ok(())) => {
                let notices = state.notices.clone();
                let files = state.attachments.iter().filter_map(FileInfo::of_attachment).collect();
                let terminal = LifecycleEvent::End { ended_at, aborted: false, merged_run_ids, model, notices, files };
                (RunStatus::Completed, terminal, RunEnd::Ok)
            }
            Ok(Err(error)) => {
                span.in_scope(|| tracing::warn!(%error, "the model call failed; the user gets an error reply"));
                state.payloads.push(Payload { text: error.user_message(), is_error: true });
                let terminal = LifecycleEvent::Error { error: error.to_string(), ended_at, merged_run_ids, model };
                (RunStatus::Failed { error }, terminal, RunEnd::Error)
            }
            Err(reason) => {
                span.in_scope(|| tracing::info!(?reason, "run aborted"));
                // Stopped mid-tool: the calls still running get a result, so the session's
                // conversation stays one every provider accepts.
                answer_open_tool_calls(&mut state.messages, state.first_new, INTERRUPTED_TOOL);
                let terminal = LifecycleEvent::End {
                    ended_at,
                    aborted: true,
                    merged_run_ids,
                    model,
                    notices: Vec::new(),
                    files: Vec::new(),
                };
                (RunStatus::Aborted(reason), terminal, RunEnd::Aborted)
            }
        };
        let tool_sends = std::mem::take(&mut *state.sends.lock().unwrap_or_else(|poisoned| poisoned.into_inner()));
        parts.hooks.tool_result_persist(&request.session_key, &mut state.messages[state.first_new..]);
        if completed {
            // Before its transcript is saved: a crash from now on finds what it said.
            self.record_end(&mut state, &request, saved_from).await;
        }
        let agent_end = parts.hooks.has_plugins().then(|| agent_end(&request, &state, &status, started_at, ended_at));
        let outcome = RunOutcome {
            run_id: request.run_id,
            status,
            payloads: state.payloads,
            usage: state.usage,
            transcript: state.messages.split_off(state.first_new),
            tool_sends,
            tool_failures: state.failures,
            unconsumed_steer,
            started_at,
            ended_at,
            model: state.answered,
            notices: state.notices,
            attachments: state.attachments,
        };
        let unsaved = outcome.transcript.get(saved_from - first_new..).unwrap_or_default();
        persist(unsaved.to_vec(), outcome.usage).await;
        events.lifecycle(terminal);
        run_metrics.finish(end);
        if let Some(event) = agent_end {
            parts.hooks.agent_end(event);
        }
        outcome
    }

    /// The model ↔ tool loop.
    async fn turns(
        &self,
        state: &mut RunState,
        request: &mut RunRequest,
        events: &RunEvents,
        compactor: Option<&dyn Compactor>,
    ) -> Result<(), ProviderError> {
        let parts = &self.inner.parts;
        // Inside the run's timeout and cancel: a /stop still stops a run that waits here.
        parts.tools.sources_ready().await;
        let skills = self.inner.skills.snapshot();
        let files =
            parts.hooks.bootstrap_files(&self.inner.bootstrap, &parts.workspace, &request.run_id, &request.session_key);
        let mut system = system_prompt(&skills, &files.await, request.extra_system_prompt.as_deref());
        let mut memory_sections = self.memory_sections(request).await;
        if let Some(sections) = &memory_sections {
            system.push_str("\n\n");
            system.push_str(sections);
        }
        let mut system =
            parts.hooks.before_agent_start(&request.run_id, &request.session_key, &request.message, system).await;
        let mut rounds = self.resume(state, request, events, &skills).await;
        if request.resume.ended && state.messages.len() == state.recorded {
            // The killed attempt had ended and nothing arrived since: what it said is the
            // answer, and the model is not asked again.
            return Ok(());
        }
        // This run's first step records what it resumed again, whole: its reply may answer
        // a different batch than the killed attempt's, under which that was recorded.
        state.recorded = state.first_new;
        loop {
            if request.memory_flush
                && let Some(compactor) = compactor
                && self.flush_memory_before_compaction(state, request, compactor, &skills, &system).await
            {
                // What the agent saved shows in the prompt from now on, as the summary
                // replaces what it was saved from.
                let sections = self.memory_sections(request).await;
                system = super::prompt::replace_section(&system, memory_sections.as_deref(), sections.as_deref());
                memory_sections = sections;
            }
            let tools_allowed = rounds < parts.settings.max_tool_rounds;
            // Listed anew each round: an MCP server's tools change while a run goes on.
            let tool_specs = if tools_allowed { parts.tools.specs(&skills, &request.tools) } else { Vec::new() };
            let model_request = ModelRequest {
                // Each attempt names its own model (see `call_model`).
                model: String::new(),
                system: system.clone(),
                messages: state.messages.clone(),
                tools: tool_specs,
                max_output_tokens: None,
                thinking: request.thinking.unwrap_or(parts.settings.thinking),
                // Each attempt says whether its own model takes images (see `call_model`).
                vision: false,
            };
            let limit = TextLimit {
                chars_left: parts.settings.max_reply_chars.saturating_sub(state.reply_chars),
                run_limit: parts.settings.max_reply_chars,
            };
            if request.still_held.as_ref().is_some_and(|held| !held()) {
                // Cancelled: the run's select ends it before this future is polled again.
                request.cancel.cancel();
                std::future::pending::<()>().await;
            }
            let call = CallContext {
                session_key: &request.session_key,
                chosen: request.model.as_ref(),
                steer: request.steer.as_ref(),
            };
            let turn = self.call_compacting(model_request, state, events, &call, compactor, limit).await?;
            state.usage.add(turn.usage);
            state.reply_chars += turn.text.chars().count();
            state.messages.push(ChatMessage::Assistant {
                text: turn.text.clone(),
                tool_calls: turn.tool_calls.clone(),
                thinking: turn.thinking.clone(),
            });
            if !turn.text.trim().is_empty() {
                let text = self.attach_media_lines(&turn.text, &request.session_key, state).await;
                state.payloads.push(Payload { text, is_error: false });
            }
            if turn.cut {
                tracing::warn!(
                    limit = parts.settings.max_reply_chars,
                    "the reply reached its length limit; the run ends"
                );
                return Ok(());
            }
            let mut steered = drain(&mut request.steer);
            if turn.tool_calls.is_empty() {
                if steered.is_empty() {
                    return Ok(());
                }
                // A message arrived while the model was answering: it gets its own answer
                // in this run.
                state.messages.extend(steered.into_iter().map(ChatMessage::user));
                continue;
            }
            if !tools_allowed {
                tracing::warn!(rounds, "the model still called tools after the round limit; ending the run");
                for call in &turn.tool_calls {
                    let content = format!("not run: the limit of {rounds} tool rounds for one message was reached");
                    state.messages.push(tool_result(call, content, true));
                }
                return Ok(());
            }
            rounds += 1;
            for call in &turn.tool_calls {
                if steered.is_empty() {
                    steered = drain(&mut request.steer);
                }
                if steered.is_empty() {
                    if parts.tools.mutates(&call.name) {
                        // Written ahead of a call that changes something (a message sent, a
                        // job scheduled): a crash during or after it makes this same call
                        // again, its send reconciled by its key, instead of asking the model
                        // anew (which would make it again under a new id, or differently).
                        self.record_step(state, request).await;
                    }
                    self.execute_tool(call, state, request, events, &skills).await;
                } else {
                    events.tool(ToolEvent::Result {
                        name: call.name.clone(),
                        tool_call_id: call.id.clone(),
                        is_error: true,
                        result: SKIPPED_FOR_STEER.to_owned(),
                    });
                    state.messages.push(tool_result(call, SKIPPED_FOR_STEER.to_owned(), true));
                }
            }
            steered.extend(drain(&mut request.steer));
            state.messages.extend(steered.into_iter().map(ChatMessage::user));
        }
    }

    /// The memory sections of the run's prompt (`MEMORY.md` of its scope, recollections).
    async fn memory_sections(&self, request: &RunRequest) -> Option<String> {
        let (memory, scope) = (self.inner.parts.memory.as_ref()?, request.memory_scope.as_ref()?);
        memory.prompt_sections(scope, &request.message).await
    }

    /// One model call with the idle watchdog. Before anything was shown, a failure worth
    /// switching for moves to the next profile or model (issue 20); the last one left is
    /// retried as before. After output (in any attempt of this call), a passing failure is
    /// asked again of the same model and key, into the same place.
    async fn call_model(
        &self,
        request: &ModelRequest,
        state: &mut RunState,
        events: &RunEvents,
        call: &CallContext<'_>,
        limit: &TextLimit,
    ) -> Result<AssistantTurn, ProviderError> {
        let settings = &self.inner.parts.settings;
        let router = &self.inner.parts.model;
        let mut route = router.route(call.session_key, call.chosen);
        let Some(mut target) = route.next_attempt() else { return Err(route.unavailable(None)) };
        let mut request = request.clone();
        let wanted = request.thinking;
        let mut attempt = 0;
        let mut shown_retries = 0;
        loop {
            request.model.clone_from(&target.candidate.model);
            request.thinking = self.thinking_for(&target, wanted);
            request.vision = target.candidate.accepts_images();
            let mut turn = TurnAccumulator::with_limit(limit.clone());
            let metrics = router.model_metrics(&target.candidate.provider.name);
            let mut timer = metrics.request();
            let client = target.profile.client.clone();
            let result = self.stream_once(client.as_ref(), &request, events, &mut turn, call.steer, &mut timer).await;
            timer.ended(result.is_ok());
            let error = match result {
                Ok(()) => {
                    router.succeeded(call.session_key, &target);
                    state.answered = Some(target.used());
                    return Ok(turn.finish(events));
                }
                Err(error) => error,
            };
            // Once output was shown, the call stays with this model and key: its retries
            // stream into the same place, even one that fails before showing anything new.
            let shown = turn.has_shown_output() || shown_retries > 0;
            if !shown && !request.thinking.is_off() && refuses_thinking(&error) {
                let model = target.candidate.label();
                tracing::warn!(%model, %error, "the model refused a thinking setting; asking without one");
                if router.mark_cannot_think(&model) {
                    state.notices.push(format!("ℹ️ {model} cannot think, so it answers without thinking."));
                }
                continue;
            }
            let failover = if shown { None } else { error.failover_reason() };
            match error {
                error if let Some(reason) = failover => {
                    router.failed(&target, reason, error.retry_after());
                    if let Some(next) = route.next_attempt() {
                        tracing::warn!(from = %target.label(), to = %next.label(), reason = reason.as_str(), %error, "model call failed; failing over");
                        metrics_failover(&target, &next, reason);
                        target = next;
                        attempt = 0;
                        continue;
                    }
                    // Nothing else may answer: the last one is retried once if it may pass.
                    let delay =
                        error.is_retryable().then(|| settings.retry.delay(attempt, error.retry_after())).flatten();
                    let Some(delay) = delay else { return Err(route.unavailable(Some(&error))) };
                    tracing::warn!(%error, attempt = attempt + 1, delay_ms = delay.as_millis() as u64, "model call failed; retrying");
                    tokio::time::sleep(delay).await;
                    attempt += 1;
                }
                error if !shown && error.is_retryable() => {
                    let Some(delay) = settings.retry.delay(attempt, error.retry_after()) else { return Err(error) };
                    tracing::warn!(%error, attempt = attempt + 1, delay_ms = delay.as_millis() as u64, "model call failed; retrying");
                    tokio::time::sleep(delay).await;
                    attempt += 1;
                }
                // Part of the reply is on screen, but no tool ran from this call (its calls
                // run only once the stream is whole): the reply is asked for again, of the
                // same model, and streamed from the start into the same place.
                error if error.is_transient() && !turn.has_tool_calls() => {
                    let Some(delay) = settings.retry_after_output.delay(shown_retries, error.retry_after()) else {
                        return Err(error);
                    };
                    shown_retries += 1;
                    tracing::warn!(%error, attempt = shown_retries, delay_ms = delay.as_millis() as u64, "the model failed after part of its reply was shown; asking again");
                    tokio::time::sleep(delay).await;
                    events.assistant(AssistantEvent::Restart { attempt: shown_retries });
                }
                // Sent again after a compaction, it would show its output twice.
                ProviderError::ContextOverflow { message } if shown => {
                    return Err(ProviderError::Stream { message: format!("context overflow after output: {message}") });
                }
                error => return Err(error),
            }
        }
    }

    /// The thinking level to ask `target` for: none where it cannot think.
    fn thinking_for(&self, target: &Attempt, wanted: ThinkingLevel) -> ThinkingLevel {
        let provider = &target.candidate.provider;
        if wanted.is_off() || !provider.can_think() || self.inner.parts.model.cannot_think(&target.candidate.label()) {
            ThinkingLevel::Off
        } else {
            wanted
        }
    }

    async fn stream_once(
        &self,
        provider: &dyn ModelProvider,
        request: &ModelRequest,
        events: &RunEvents,
        turn: &mut TurnAccumulator,
        steer: Option<&SteerInbox>,
        call: &mut ModelCall<'_>,
    ) -> Result<(), ProviderError> {
        let parts = &self.inner.parts;
        let idle = parts.settings.idle_timeout;
        let mut stream =
            tokio::time::timeout(idle, provider.stream(request)).await.map_err(|_| ProviderError::Idle(idle))??;
        loop {
            match tokio::time::timeout(idle, stream.next()).await {
                Err(_) => return Err(ProviderError::Idle(idle)),
                Ok(None) if turn.is_stopped() => return Ok(()),
                Ok(None) => {
                    return Err(ProviderError::Stream { message: "the reply ended before it was complete".into() });
                }
                Ok(Some(Err(error))) => return Err(error),
                Ok(Some(Ok(event))) => {
                    // The run is streaming: from now on it can take steering messages.
                    if let Some(inbox) = steer {
                        inbox.open();
                    }
                    if event.is_output() {
                        call.output();
                    }
                    turn.apply(event, events);
                    if turn.is_cut() {
                        // Dropping the stream ends the model's request: it stops generating.
                        return Ok(());
                    }
                }
            }
        }
    }

    async fn execute_tool(
        &self,
        call: &ToolCall,
        state: &mut RunState,
        request: &RunRequest,
        events: &RunEvents,
        skills: &Arc<SkillsSnapshot>,
    ) {
        let parts = &self.inner.parts;
        let args =
            parse_arguments(&call.arguments).unwrap_or_else(|_| serde_json::Value::String(call.arguments.clone()));
        events.tool(ToolEvent::Start { name: call.name.clone(), tool_call_id: call.id.clone(), args });
        let (updates, mut partial_output) = tokio::sync::mpsc::unbounded_channel();
        let context = ToolContext {
            run_id: request.run_id.clone(),
            session_key: request.session_key.clone(),
            call_id: call.id.clone(),
            origin: request.origin.clone(),
            sender_id: request.sender_id.clone(),
            memory_scope: request.memory_scope.clone(),
            channels: parts.channels.clone(),
            sessions: parts.sessions.clone(),
            // The run's snapshot: the tools see the skills the prompt listed.
            skills: skills.clone(),
            sends: state.sends.clone(),
            updates: Some(updates),
            outgoing: self.outgoing(),
            schedulers: request.schedulers.clone(),
            send_ledger: request.send_ledger.clone(),
        };
        let started = std::time::Instant::now();
        let outcome = match parts.tools.not_offered(call, &request.tools) {
            Some(refused) => refused,
            None => {
                let checked = parts.hooks.before_tool_call(&request.run_id, &request.session_key, call).await;
                let execute = parts.tools.execute_checked(call, checked, context);
                tokio::pin!(execute);
                // Partial output (a command's) goes out as `update` events while it runs.
                let update = |partial: String| {
                    events.tool(ToolEvent::Update { tool_call_id: call.id.clone(), partial });
                };
                let outcome = loop {
                    tokio::select! {
                        outcome = &mut execute => break outcome,
                        Some(partial) = partial_output.recv() => update(partial),
                    }
                };
                while let Ok(partial) = partial_output.try_recv() {
                    update(partial);
                }
                outcome
            }
        };
        parts.hooks.after_tool_call(&request.run_id, &request.session_key, call, &outcome, started.elapsed());
        let shown = tool_result_for_event(&outcome.content, &outcome.images);
        if outcome.is_error {
            tracing::info!(tool = %call.name, error = %shown, "tool call failed");
            state.failures.push(ToolFailure {
                name: call.name.clone(),
                error: outcome.content.clone(),
                mutates: outcome.mutates,
            });
        }
        events.tool(ToolEvent::Result {
            name: call.name.clone(),
            tool_call_id: call.id.clone(),
            is_error: outcome.is_error,
            result: shown,
        });
        state.messages.push(ChatMessage::ToolResult {
            call_id: call.id.clone(),
            name: call.name.clone(),
            content: outcome.content,
            is_error: outcome.is_error,
            images: outcome.images,
        });
    }
}

/// The result of a tool call whose run was stopped before it answered.
const INTERRUPTED_TOOL: &str =
    "interrupted: the run was stopped before this tool call finished; its effects are unknown";

fn tool_result(call: &ToolCall, content: String, is_error: bool) -> ChatMessage {
    ChatMessage::tool_result(call.id.clone(), call.name.clone(), content, is_error)
}

/// What a model call needs to know about its run.
pub(super) struct CallContext<'a> {
    pub(super) session_key: &'a str,
    /// The session's `/model` choice.
    pub(super) chosen: Option<&'a Candidate>,
    pub(super) steer: Option<&'a SteerInbox>,
}

/// Whether a refused request says the model has no thinking knob (an OpenAI-compatible
/// server that does not know `reasoning_effort`, a model without extended thinking).
fn refuses_thinking(error: &ProviderError) -> bool {
    match error {
        ProviderError::Rejected { status: 400 | 422, message } => {
            let message = message.to_lowercase();
            ["reasoning_effort", "reasoning effort", "thinking", "reasoning is not supported"]
                .iter()
                .any(|phrase| message.contains(phrase))
        }
        _ => false,
    }
}

fn metrics_failover(from: &Attempt, to: &Attempt, reason: FailoverReason) {
    metrics().model_failover(&from.label(), &to.label(), reason.as_str());
}

/// Every steering message waiting right now.
fn drain(steer: &mut Option<SteerInbox>) -> Vec<String> {
    steer.as_ref().map(SteerInbox::drain).unwrap_or_default()
}

/// The `agent_end` event of a run that ended with `status`.
fn agent_end(
    request: &RunRequest,
    state: &RunState,
    status: &RunStatus,
    started_at: DateTime<Utc>,
    ended_at: DateTime<Utc>,
) -> AgentEnd {
    let (status, error) = match status {
        RunStatus::Completed => ("completed", None),
        RunStatus::Failed { error } => ("failed", Some(error.to_string())),
        RunStatus::Aborted(_) => ("aborted", None),
    };
    AgentEnd {
        run_id: request.run_id.clone(),
        session_key: request.session_key.clone(),
        messages: state.messages.clone(),
        status,
        error,
        usage: state.usage,
        started_at,
        ended_at,
    }
}
