//! The dispatcher's hook points (SPEC §9): `message_received`, the `command:*` internal
//! hooks, and `message_sending` / `message_sent` for notices. See [`crate::hooks`].

use ferry_channel::InboundMessage;

use super::Dispatcher;
use crate::agent::ChatMessage;
use crate::control::ControlCommand;
use crate::hooks::internal::{CommandAnswer, CommandEvent, TranscriptLine};
use crate::hooks::{MessageReceived, MessageSending, MessageSent, SessionReason};
use crate::session::Resolved;

/// Transcript entries a command hook gets: the session's last ones.
const COMMAND_HOOK_MESSAGES: usize = 20;

impl Dispatcher {
    /// `message_received` / `message:received` for a message routed to `session_key`.
    pub(super) fn received(&self, message: &InboundMessage, session_key: &str) {
        let hooks = self.inner.agents.default_runner().hooks();
        if !hooks.has_plugins() && !hooks.internal().has("message:received") {
            return;
        }
        hooks.message_received(MessageReceived {
            session_key: session_key.to_owned(),
            channel: message.channel.clone(),
            account_id: message.account_id.clone(),
            chat_id: message.chat.id.clone(),
            message_id: message.message_id.clone(),
            sender_id: message.sender.id.clone(),
            text: message.text.clone(),
        });
    }

    /// The `command:*` event for `command`, if an executable is attached to it. Read before
    /// the command runs: `/new` and `/reset` hooks get the messages of the session that ends.
    pub(super) async fn command_hook(
        &self,
        command: &ControlCommand,
        session_key: &str,
        message: &InboundMessage,
    ) -> Option<CommandEvent> {
        let name = match command {
            ControlCommand::New => "new",
            ControlCommand::Reset => "reset",
            ControlCommand::Stop => "stop",
            _ => return None,
        };
        if !self.inner.agents.default_runner().hooks().internal().has(&format!("command:{name}")) {
            return None;
        }
        let session = self.inner.store.get(session_key).await.ok().flatten();
        let mut messages = Vec::new();
        if let (Some(session), true) = (&session, name != "stop") {
            match self.inner.store.history(&session.session_id).await {
                Ok(history) => {
                    let skip = history.len().saturating_sub(COMMAND_HOOK_MESSAGES);
                    messages = history.into_iter().skip(skip).map(transcript_line).collect();
                }
                Err(error) => tracing::warn!(session_key, %error, "cannot read the transcript for a command hook"),
            }
        }
        Some(CommandEvent {
            command: name,
            session_key: session_key.to_owned(),
            session_id: session.map(|session| session.session_id),
            channel: message.channel.clone(),
            chat_id: message.chat.id.clone(),
            sender_id: message.sender.id.clone(),
            workspace: self.runner_for(session_key).workspace().to_owned(),
            messages,
        })
    }

    /// Runs a command hook on its own task and sends the lines it answers to the user.
    pub(super) fn run_command_hook(&self, event: Option<CommandEvent>, message: &InboundMessage) {
        let Some(event) = event else { return };
        let (dispatcher, message) = (self.clone(), message.clone());
        tokio::spawn(async move {
            let name = format!("command:{}", event.command);
            let hooks = dispatcher.inner.agents.default_runner().hooks();
            let answer: Option<CommandAnswer> = hooks.internal().call(&name, &event).await;
            for line in answer.map(|answer| answer.replies).unwrap_or_default() {
                if !line.trim().is_empty() {
                    dispatcher.reply(&message, &line).await;
                }
            }
        });
    }

    /// `session_end` / `session_start` around a `/new` or `/reset`.
    pub(super) fn session_reset(&self, command: &ControlCommand, session_key: &str, resolved: &Resolved) {
        let reason = if *command == ControlCommand::Reset { SessionReason::Reset } else { SessionReason::New };
        self.inner.agents.default_runner().hooks().session_changed(session_key, resolved, Some(reason));
    }

    /// `message_sending` for a notice: the text to send, or `None` if a plugin cancelled it.
    pub(super) async fn sending(&self, message: &InboundMessage, text: &str) -> Option<String> {
        let hooks = self.inner.agents.default_runner().hooks();
        if !hooks.has_plugins() {
            return Some(text.to_owned());
        }
        let event = MessageSending {
            channel: message.channel.clone(),
            account_id: message.account_id.clone(),
            chat_id: message.chat.id.clone(),
            text: text.to_owned(),
        };
        hooks.message_sending(event).await
    }

    /// `message_sent` / `message:sent` for a notice that went out.
    pub(super) fn sent(&self, message: &InboundMessage, message_id: &str, text: &str) {
        let hooks = self.inner.agents.default_runner().hooks();
        if !hooks.has_plugins() && !hooks.internal().has("message:sent") {
            return;
        }
        hooks.message_sent(MessageSent {
            channel: message.channel.clone(),
            account_id: message.account_id.clone(),
            chat_id: message.chat.id.clone(),
            message_id: message_id.to_owned(),
            text: text.to_owned(),
        });
    }
}

fn transcript_line(message: ChatMessage) -> TranscriptLine {
    match message {
        ChatMessage::User { text, .. } => TranscriptLine { role: "user", text },
        ChatMessage::Assistant { text, .. } => TranscriptLine { role: "assistant", text },
        ChatMessage::ToolResult { name, content, images, .. } => {
            // Scripts get the images' sizes, never their bytes (SPEC §6.3).
            let mut text = format!("{name}: {content}");
            for image in &images {
                text.push_str(&format!("\n[image: {}]", image.describe()));
            }
            TranscriptLine { role: "tool", text }
        }
    }
}
