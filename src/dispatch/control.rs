//! Carrying out chat commands (SPEC §3.6).

use chrono::Utc;
use ferry_channel::InboundMessage;

use super::Dispatcher;
use crate::control::{ControlCommand, QueueCommand, VerboseCommand};
use crate::queue::QueueSettings;
use crate::session::SessionOverrides;

impl Dispatcher {
    pub(super) async fn control(&self, command: ControlCommand, session_key: &str, message: &InboundMessage) {
        tracing::info!(session_key, ?command, "chat command");
        let hook = self.command_hook(&command, session_key, message).await;
        let reply = match command {
            ControlCommand::Stop => {
                let stopped = self.inner.scheduler.stop(session_key).await;
                match (stopped.aborted_run, stopped.cleared) {
                    (false, 0) => "Nothing is running.".to_owned(),
                    (true, 0) => "⏹️ Stopped.".to_owned(),
                    (_, cleared) => format!("⏹️ Stopped, and cleared {cleared} waiting message(s)."),
                }
            }
            ref command @ (ControlCommand::New | ControlCommand::Reset) => {
                self.inner.scheduler.stop(session_key).await;
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
        };
        self.reply(message, &reply).await;
        self.run_command_hook(hook, message);
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
            QueueCommand::Reset => SessionOverrides::default(),
            QueueCommand::Set { mode, debounce, cap, drop } => SessionOverrides {
                queue_mode: Some(mode),
                debounce_ms: debounce.map(|d| d.as_millis() as u64),
                cap,
                drop,
                verbose: None,
            },
        };
        let overrides = SessionOverrides { verbose: current.verbose, ..queue };
        if !self.save_overrides(session_key, overrides).await {
            return "⚠️ I could not change the queue settings just now. Please try again.".to_owned();
        }
        format!("Queue for this conversation: {}", describe(&self.settings_for(session_key, &message.channel).await))
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
    async fn save_overrides(&self, session_key: &str, overrides: SessionOverrides) -> bool {
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
        format!(
            "Session: {session_key}\nModel: {}\nQueue: {}\nTokens: {usage}\nRunning: {}\nWaiting: {}",
            self.inner.runner.model().label(),
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
