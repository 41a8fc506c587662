//! What the core hands an adapter to send, and what comes back.

use serde::{Deserialize, Serialize};

use crate::{Attachment, ChatRef, InboundMessage};

/// Where a message goes: a chat, and optionally a thread or forum topic inside it.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct Target {
    pub chat: ChatRef,
    pub thread_id: Option<String>,
}

impl Target {
    /// The conversation an inbound message came from, so a reply lands in the same place.
    pub fn of(message: &InboundMessage) -> Self {
        Self { chat: message.chat.clone(), thread_id: message.thread_id.clone() }
    }
}

/// How the text of an outbound message is to be read by the platform.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum TextFormat {
    /// Send as is; nothing is interpreted as markup.
    #[default]
    Plain,
    /// Already rendered in the channel's [`MarkupDialect`](crate::MarkupDialect). If the
    /// platform rejects it the adapter returns
    /// [`ChannelError::MarkupRejected`](crate::ChannelError::MarkupRejected) and the core
    /// resends as plain text.
    Markup,
}

/// One platform message to send. The core has already shaped, rendered and split the text
/// to the channel's limits: one `OutboundMessage` is one platform message.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct OutboundMessage {
    pub target: Target,
    pub text: String,
    pub format: TextFormat,
    /// Thread the reply to this platform message, where the platform supports it.
    pub reply_to_message_id: Option<String>,
    pub attachments: Vec<Attachment>,
    /// Stable across retries of the same logical send (run id + payload index), so an
    /// adapter or the scheduler can tell a retry from a new message.
    pub idempotency_key: Option<String>,
}

impl OutboundMessage {
    /// Plain text to a target, with nothing else set.
    pub fn text(target: Target, text: impl Into<String>) -> Self {
        Self {
            target,
            text: text.into(),
            format: TextFormat::Plain,
            reply_to_message_id: None,
            attachments: Vec::new(),
            idempotency_key: None,
        }
    }

    /// Plain text to the conversation an inbound message came from (not threaded to it).
    pub fn reply_to(message: &InboundMessage, text: impl Into<String>) -> Self {
        Self::text(Target::of(message), text)
    }
}

/// A message the platform accepted, by the id the platform gave it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct SentMessage {
    pub message_id: String,
}

/// A message already on the platform, for edits and deletes.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct MessageRef {
    pub target: Target,
    pub message_id: String,
}
