//! Carrying out chat commands (SPEC §3.6).

use chrono::Utc;
use ferry_channel::{ChatKind, InboundMessage};

use super::Dispatcher;
use crate::agent::compaction::{CompactRequest, CompactionError, Compactor, ContextBudget};
use crate::config::DmScope;
use crate::control::{ControlCommand, QueueCommand, VerboseCommand};
use crate::gateway::webchat::CHANNEL_NAME as WEBCHAT;
use crate::queue::journal::ReplyPlace;
use crate::queue::{QueueSettings, StopScope};
use crate::session::SessionOverrides;
use crate::session::compaction::SessionCompactor;

impl Dispatcher {
    pub(super) async fn control(&self, command: ControlCommand, session_key: &str, message: &InboundMessage) {
        tracing::info!(session_key, ?command, "chat command");
        let hook = self.command_hook(&command, session_key, message).await;
        let reply = match command {
            ControlCommand::Stop => {
                let scope = self.stop_scope(session_key, message);
                let stopped = self.inner.scheduler.stop(session_key, &scope).await;
                match (stopped.aborted_run, stopped.cleared, scope) {
                    (false, 0, StopScope::Session) => "Nothing is running.".to_owned(),
                    (false, 0, StopScope::Place(_)) => "Nothing of yours is running.".to_owned(),
                    (true, 0, _) => "⏹️ Stopped.".to_owned(),
                    (_, cleared, _) => format!("⏹️ Stopped, and cleared {cleared} waiting message(s)."),
                }
            }
            ControlCommand::New | ControlCommand::Reset if !self.may_control_everyone(session_key, message) => {
                tracing::info!(session_key, channel = %message.channel, "reset of a shared conversation refused: not an operator");
                "🔒 Only the operator can start a new conversation here: everyone who writes to me shares this one. \
                 /stop still stops what I am doing for you."
                    .to_owned()
            }
            ref command @ (ControlCommand::New | ControlCommand::Reset) => {
                self.inner.scheduler.stop(session_key, &StopScope::Session).await;
                // `/stop` leaves background commands running; a new conversation does not.
                self.runner_for(session_key).tools().session_ended(session_key);
                match self.inner.store.reset(session_key, Utc::now()).await {
                    Ok(resolved) => {
                        self.session_reset(command, session_key, &resolved);
                        "🆕 Started a new conversation.".to_owned()
                    }
                    Err(error) => {
                        tracing::error!(session_key, %error, "cannot reset the session");
                        "⚠️ I could not start a new conversation just now. Please try again.".to_owned()
                    }
                }
            }
            ControlCommand::Queue(queue) => self.queue_command(queue, session_key, message).await,
            ControlCommand::Status => self.status(session_key, message).await,
            ControlCommand::Verbose(verbose) => self.verbose_command(verbose, session_key).await,
            ControlCommand::Compact(instructions) => self.compact_command(session_key, instructions.as_deref()).await,
            ControlCommand::Model(model) => self.model_command(model, session_key).await,
            ControlCommand::Think(think) => self.think_command(think, session_key).await,
            ControlCommand::Reasoning(reasoning) => self.reasoning_command(reasoning, session_key).await,
            ControlCommand::Approve(id) => self.approval_command(&id, true, session_key, message),
            ControlCommand::Deny(id) => self.approval_command(&id, false, session_key, message),
            ControlCommand::Remind(remind) => self.remind_command(remind, session_key, message).await,
            ControlCommand::Jobs(jobs) => self.jobs_command(jobs, message).await,
            ControlCommand::Remember(text) => self.remember_command(&text, session_key, message).await,
            ControlCommand::Memory => self.memory_command(session_key, message).await,
            ControlCommand::Forget(text) => self.forget_command(&text, session_key, message).await,
        };
        self.reply(message, &reply).await;
        self.run_command_hook(hook, message);
    }

    /// Whose work `/stop` from `message`'s sender ends: everything in the session, unless
    /// the session is shared by people who are not its operators.
    fn stop_scope(&self, session_key: &str, message: &InboundMessage) -> StopScope {
        if self.may_control_everyone(session_key, message) {
            StopScope::Session
        } else {
            StopScope::Place(ReplyPlace::of_inbound(message))
        }
    }

    /// Whether `message`'s sender may stop or reset what others in the session asked for:
    /// anyone in a conversation of their own or a group's; in the one DM conversation
    /// everybody shares (`dm_scope = "main"`), only an operator (`session.operators`, or
    /// the web chat, the operator's own page).
    fn may_control_everyone(&self, session_key: &str, message: &InboundMessage) -> bool {
        let session = &self.inner.config.session;
        let shared = session.dm_scope == DmScope::Main
            && message.chat.kind == ChatKind::Direct
            && crate::routing::is_main_session(session_key);
        !shared || message.channel == WEBCHAT || session.is_operator(&message.channel, &message.sender.id)
    }

    async fn queue_command(&self, command: QueueCommand, session_key: &str, message: &InboundMessage) -> String {
        let current = self.inner.overrides.get(self.inner.store.as_ref(), session_key).await;
        let queue = match command {
            QueueCommand::Show => return describe(&self.settings_for(session_key, &message.channel).await),
            QueueCommand::Invalid(problem) => {
                return format!(
                    "{problem}. Usage: /queue collect|steer|followup|steer-backlog|interrupt [debounce:2s] [cap:N] \
                     [drop:old|new|summarize], or /queue reset."
                );
            }
            QueueCommand::Reset => {
                SessionOverrides { queue_mode: None, debounce_ms: None, cap: None, drop: None, ..current }
            }
            QueueCommand::Set { mode, debounce, cap, drop } => SessionOverrides {
                queue_mode: Some(mode),
                debounce_ms: debounce.map(|d| d.as_millis() as u64),
                cap,
                drop,
                ..current
            },
        };
        let overrides = queue;
        if !self.save_overrides(session_key, overrides).await {
            return "⚠️ I could not change the queue settings just now. Please try again.".to_owned();
        }
        format!("Queue for this conversation: {}", describe(&self.settings_for(session_key, &message.channel).await))
    }

    /// `/compact`: summarizes the session's older transcript now, as a run would when its
    /// context outgrows the model. Not while a run owns the session: it would fence it out.
    async fn compact_command(&self, session_key: &str, instructions: Option<&str>) -> String {
        if self.inner.scheduler.status(session_key).running {
            return "⏳ I am still replying. Send /compact again when I am done.".to_owned();
        }
        let store = self.inner.store.as_ref();
        let session = match store.get(session_key).await {
            Ok(Some(session)) => session,
            Ok(None) => return "Nothing to compact yet.".to_owned(),
            Err(error) => {
                tracing::error!(session_key, %error, "cannot load the session to compact it");
                return "⚠️ I could not compact the conversation: the session could not be read.".to_owned();
            }
        };
        // Owning the session like a run does fences the compaction: a run that starts
        // meanwhile takes over, and this compaction then writes nothing. It never takes the
        // session from a run that owns it already (one that started since the check above).
        let run_id = format!("compact-{}", uuid::Uuid::new_v4());
        let history = match store.begin_run_if_idle(session_key, &session.session_id, &run_id).await {
            Ok(true) => store.history(&session.session_id).await,
            Ok(false) => return "⏳ I am still replying. Send /compact again when I am done.".to_owned(),
            Err(error) => Err(error),
        };
        let result = match history {
            Ok(history) => {
                let runner = self.runner_for(session_key);
                let overrides = self.inner.overrides.get(store, session_key).await;
                let chosen = super::models::chosen_model(runner.router(), &overrides);
                let model = runner.router().first_choice(session_key, chosen.as_ref());
                let budget = ContextBudget::for_model(&model, runner.settings().compaction_reserve_tokens);
                let request = CompactRequest {
                    model: &model,
                    budget,
                    messages: &history,
                    compactable: history.len(),
                    instructions,
                };
                SessionCompactor::new(store, session_key, &run_id).compact(request).await
            }
            Err(error) => Err(CompactionError::Store(error.to_string())),
        };
        let usage = result.as_ref().map(|compacted| compacted.usage).unwrap_or_default();
        if let Err(error) = store.finish_run(session_key, &run_id, usage).await {
            tracing::warn!(session_key, %error, "cannot record the compaction's usage");
        }
        match result {
            Ok(compacted) => {
                tracing::info!(session_key, summarized = compacted.summarized, "compacted the session on request");
                format!("🧹 Compacted: {} messages summarized.", compacted.summarized)
            }
            Err(CompactionError::NothingToCompact) => "Nothing to compact yet: the conversation is short.".to_owned(),
            Err(error) => {
                tracing::warn!(session_key, %error, "compacting the session on request failed; its transcript is unchanged");
                format!("⚠️ I could not compact the conversation: {error}. It is unchanged.")
            }
        }
    }

    /// `/approve ID` or `/deny ID`: answers a command waiting in this chat.
    fn approval_command(&self, id: &str, approve: bool, session_key: &str, message: &InboundMessage) -> String {
        let verb = if approve { "approve" } else { "deny" };
        if id.trim().is_empty() || id.split_whitespace().count() > 1 {
            return format!("Usage: /{verb} ID, with the id from the approval request.");
        }
        let Some(host) = self.runner_for(session_key).tools().host() else {
            return "There are no commands waiting for approval.".to_owned();
        };
        let by = message.sender.name.clone().unwrap_or_else(|| message.sender.id.clone());
        match host.approvals().answer(session_key, id, approve, &by) {
            Ok(command) if approve => format!("✅ Approved: `{command}`"),
            Ok(command) => format!("🚫 Denied: `{command}`"),
            Err(error) => format!("⚠️ I cannot {verb} that: {error}."),
        }
    }

    async fn verbose_command(&self, command: VerboseCommand, session_key: &str) -> String {
        let current = self.inner.overrides.get(self.inner.store.as_ref(), session_key).await;
        let on = match command {
            VerboseCommand::Show => return describe_verbose(current.verbose.unwrap_or(false)).to_owned(),
            VerboseCommand::Invalid(problem) => return format!("{problem}. Usage: /verbose on|off."),
            VerboseCommand::Set(on) => on,
        };
        // Off is the default: store no override rather than an explicit `false`.
        let overrides = SessionOverrides { verbose: on.then_some(true), ..current };
        if !self.save_overrides(session_key, overrides).await {
            return "⚠️ I could not change that setting just now. Please try again.".to_owned();
        }
        describe_verbose(on).to_owned()
    }

    /// Saves a session's settings and updates the in-memory copy; false (logged) when the
    /// store cannot be written.
    pub(super) async fn save_overrides(&self, session_key: &str, overrides: SessionOverrides) -> bool {
        // The session row must exist to hold the settings.
        if let Err(error) = self.inner.store.resolve(session_key, Utc::now(), &self.inner.config.session.reset).await {
            tracing::error!(session_key, %error, "cannot load the session to change its settings");
            return false;
        }
        if let Err(error) = self.inner.store.set_overrides(session_key, &overrides).await {
            tracing::error!(session_key, %error, "cannot save the session's settings");
            return false;
        }
        self.inner.overrides.set(self.inner.store.as_ref(), session_key, overrides).await;
        true
    }

    async fn status(&self, session_key: &str, message: &InboundMessage) -> String {
        let settings = self.settings_for(session_key, &message.channel).await;
        let lane = self.inner.scheduler.status(session_key);
        let usage = match self.inner.store.get(session_key).await {
            Ok(Some(session)) => format!("{} in / {} out", session.usage.input_tokens, session.usage.output_tokens),
            Ok(None) => "none yet".to_owned(),
            Err(_) => "unavailable".to_owned(),
        };
        let overrides = self.inner.overrides.get(self.inner.store.as_ref(), session_key).await;
        format!(
            "Session: {session_key}\n{}\nQueue: {}\nTokens: {usage}\nRunning: {}\nWaiting: {}",
            self.describe_models(session_key, &overrides),
            describe(&settings),
            match (lane.running, lane.streaming) {
                (true, true) => "yes, replying",
                (true, false) => "yes",
                _ => "no",
            },
            lane.queued,
        )
    }
}

fn describe_verbose(on: bool) -> &'static str {
    if on {
        "🔧 Verbose is on: replies list each tool I use. /verbose off to stop."
    } else {
        "Verbose is off: replies do not list the tools I use. /verbose on to see them."
    }
}

fn describe(settings: &QueueSettings) -> String {
    let mode = serde_json::to_value(settings.mode).ok().and_then(|v| v.as_str().map(str::to_owned)).unwrap_or_default();
    let drop = serde_json::to_value(settings.drop).ok().and_then(|v| v.as_str().map(str::to_owned)).unwrap_or_default();
    format!("{mode} (debounce {} ms, cap {}, drop {drop})", settings.debounce.as_millis(), settings.cap)
}
