//! What an adapter hands the core: one normalized shape for every platform's message.

use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};

use crate::Ack;

/// The kind of conversation a message belongs to. Access policies and session keys differ
/// per kind (DM policy vs group policy; `direct:<peer>` vs `group:<id>` keys).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum ChatKind {
    /// A one-to-one conversation with the bot.
    Direct,
    /// A multi-person chat: Telegram groups and supergroups, Slack MPIMs, Discord group DMs.
    Group,
    /// A named room in a workspace: Discord guild channels, Slack channels, Telegram channels.
    Channel,
}

impl ChatKind {
    /// The lowercase name used in session keys and logs.
    pub fn as_str(self) -> &'static str {
        match self {
            ChatKind::Direct => "direct",
            ChatKind::Group => "group",
            ChatKind::Channel => "channel",
        }
    }
}

/// A conversation on one platform account, by the platform's own id.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct ChatRef {
    pub kind: ChatKind,
    /// The platform's chat id as text (Telegram ids are signed integers, Slack ids are
    /// strings such as `C0123ABC`); the core never interprets it.
    pub id: String,
}

impl ChatRef {
    pub fn new(kind: ChatKind, id: impl Into<String>) -> Self {
        Self { kind, id: id.into() }
    }
}

/// Who wrote a message.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Sender {
    /// The platform's user id; allowlists and pairing match on it.
    pub id: String,
    /// A display name for prompts and logs, when the platform gives one.
    pub name: Option<String>,
    /// Bot senders are ignored unless the operator allows them, to stop bot loops.
    pub is_bot: bool,
}

impl Sender {
    pub fn user(id: impl Into<String>) -> Self {
        Self { id: id.into(), name: None, is_bot: false }
    }
}

/// What kind of file came with a message.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum AttachmentKind {
    Image,
    Audio,
    Video,
    Document,
    Other,
}

impl AttachmentKind {
    /// The kind a MIME type's top-level type names (`image/png` → image); any other type is a
    /// document, and no type at all is other. For platforms that label files by MIME type.
    pub fn from_mime(mime_type: Option<&str>) -> Self {
        match mime_type.and_then(|mime| mime.split('/').next()) {
            Some("image") => Self::Image,
            Some("audio") => Self::Audio,
            Some("video") => Self::Video,
            Some(_) => Self::Document,
            None => Self::Other,
        }
    }
}

/// A file attached to a message, inbound or outbound.
///
/// - **Inbound**, the bytes stay on the platform until the core asks for them with
///   [`Channel::download`](crate::Channel::download); `reference` is whatever the adapter
///   needs for that (a URL, a Telegram file id). An upload that is already on this machine
///   (the web chat's) has `path` set instead, and the core reads the file.
/// - **Outbound**, `path` names the file to upload (in Ferry's media store: immutable, named
///   by its content, so a retried or resumed send uploads the same bytes), and `reference`
///   is a name for logs. `mime_type` and `size_bytes` are always set by the core, sniffed and
///   measured, never guessed from a name.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Attachment {
    pub kind: AttachmentKind,
    pub reference: String,
    pub mime_type: Option<String>,
    pub file_name: Option<String>,
    pub size_bytes: Option<u64>,
    /// The file on this machine: the bytes to upload (outbound) or an upload already
    /// received (inbound web chat). `None` for platform files.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub path: Option<std::path::PathBuf>,
    /// Pixel size, for images and videos, when known (platforms announce it; the core
    /// measures what it sends).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub dimensions: Option<(u32, u32)>,
    /// Outbound, where the platform uploads a file and shares it in a message as separate
    /// steps (Slack): the platform's id of the file once uploaded
    /// ([`Channel::upload_ahead`](crate::Channel::upload_ahead)). A send of it shares that
    /// file rather than uploading the bytes again.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub uploaded: Option<String>,
}

impl Attachment {
    /// A platform file known by `reference`, with nothing else known yet.
    pub fn remote(kind: AttachmentKind, reference: impl Into<String>) -> Self {
        Self {
            kind,
            reference: reference.into(),
            mime_type: None,
            file_name: None,
            size_bytes: None,
            path: None,
            dimensions: None,
            uploaded: None,
        }
    }
}

/// A message from a chat platform, normalized by its adapter (SPEC §3.1).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct InboundMessage {
    /// The channel's name as used in config and session keys: `telegram`, `discord`, …
    pub channel: String,
    /// Which bot account of that channel received it (one process can run several).
    pub account_id: String,
    pub chat: ChatRef,
    /// The workspace the chat belongs to, where the platform has one: a Discord guild id (a
    /// Slack team id). Group allowlists may admit every chat of a workspace by it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub space_id: Option<String>,
    /// Slack `thread_ts`, a Discord thread id or a Telegram forum topic id.
    pub thread_id: Option<String>,
    pub sender: Sender,
    /// The platform's message id; with channel, account, chat and thread it identifies a
    /// message for dedupe of redeliveries.
    pub message_id: String,
    /// The message text, captions included; empty for a bare attachment.
    pub text: String,
    /// The bot was mentioned natively (`@bot`, `<@id>`); the adapter decides what counts.
    pub mentions_bot: bool,
    /// The message replies to one of the bot's own messages.
    pub reply_to_bot: bool,
    pub attachments: Vec<Attachment>,
    pub received_at: DateTime<Utc>,
    /// What a gateway client asked for along with the message (RPC `agent`, `chat.send`);
    /// platform adapters leave it `None`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub request: Option<ClientRequest>,
}

/// A gateway client's wishes for the run that answers its message. Clients name their
/// runs (to wait on them) and may name a session directly instead of having one routed.
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
pub struct ClientRequest {
    /// The run's id: the client's idempotency key.
    pub run_id: String,
    /// A session key the client chose (validated by the gateway).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub session_key: Option<String>,
    /// The agent the client chose (validated by the gateway), when it named no session.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub agent_id: Option<String>,
    /// Added to the system prompt of this run only.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub extra_system_prompt: Option<String>,
    /// Overrides the run timeout, in seconds.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub timeout_seconds: Option<u64>,
    /// Deliver the reply to this chat (on any connected channel) rather than back to the
    /// client: `agent` with `deliver: true`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub deliver: Option<Delivery>,
    /// The message is a scheduled job's fire, made by the daemon itself (never by a client).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub scheduled: Option<ScheduledFire>,
}

/// A scheduled job's fire, carried by the inbound message it is journaled as, so the run
/// knows what to do (send a reminder as it is, run a task, beat the heartbeat) and which
/// fire to report back.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ScheduledFire {
    pub job_id: String,
    /// The slot it fires for, unix milliseconds.
    pub slot_ms: i64,
    /// `text` (sent as it is, no model call), `task` or `heartbeat`.
    pub kind: String,
    /// The job's name, for notices about it.
    pub name: String,
}

/// A chat a client asked the reply to be delivered to.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Delivery {
    pub channel: String,
    /// The bot account, when the channel has several.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub account_id: Option<String>,
    pub target: crate::Target,
}

impl InboundMessage {
    /// A text message as most platforms deliver it: not in a thread, no mention, no reply to
    /// the bot, no attachments, received now. Adapters then set what their platform says.
    pub fn new(
        channel: impl Into<String>,
        account_id: impl Into<String>,
        chat: ChatRef,
        sender: Sender,
        message_id: impl Into<String>,
        text: impl Into<String>,
    ) -> Self {
        Self {
            channel: channel.into(),
            account_id: account_id.into(),
            chat,
            space_id: None,
            thread_id: None,
            sender,
            message_id: message_id.into(),
            text: text.into(),
            mentions_bot: false,
            reply_to_bot: false,
            attachments: Vec::new(),
            received_at: Utc::now(),
            request: None,
        }
    }
}

/// An inbound message plus the acknowledgement the core owes the adapter for it.
///
/// The adapter confirms the message to its platform only once `ack` is accepted; see
/// [`Ack`].
#[derive(Debug)]
pub struct InboundDelivery {
    pub message: InboundMessage,
    pub ack: Ack,
}

#[cfg(test)]
mod tests {
    use super::AttachmentKind;

    #[test]
    fn a_mime_type_names_the_attachment_kind() {
        let kinds = [Some("image/png"), Some("audio/ogg"), Some("video/mp4"), Some("application/pdf"), None]
            .map(AttachmentKind::from_mime);
        use AttachmentKind::*;
        assert_eq!(kinds, [Image, Audio, Video, Document, Other]);
    }
}
