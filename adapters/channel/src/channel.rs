//! The trait every chat platform implements.

use async_trait::async_trait;
use futures::stream::BoxStream;

use crate::outbound::TextFormat;
use crate::singleton::IngressCursor;
use crate::{
    Attachment, ChannelCapabilities, ChannelError, InboundDelivery, MessageRef, OutboundMessage, SentMessage, Target,
};

/// The inbound side of a started channel. It ends when the channel stops.
pub type InboundStream = BoxStream<'static, InboundDelivery>;

/// The bytes of an inbound attachment as they arrive ([`Channel::download`]). A stream, not
/// a buffer, so the core can stop a download the moment it passes the size limit instead of
/// holding a file of any size in memory.
pub struct Download {
    /// The size the platform announced for the body (its `Content-Length`), when it did: a
    /// download announced over the limit is refused before its first byte.
    pub declared_len: Option<u64>,
    pub body: BoxStream<'static, Result<bytes::Bytes, ChannelError>>,
}

impl std::fmt::Debug for Download {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Download").field("declared_len", &self.declared_len).finish_non_exhaustive()
    }
}

/// The account of a platform configured with one bot: its id in session keys, health
/// entries and routes when no `[channels.<platform>.accounts]` are listed.
pub const DEFAULT_ACCOUNT_ID: &str = "default";

/// A chat platform account, as the core sees it.
///
/// Implementations translate between the platform's API and these calls and nothing more:
/// they know nothing of sessions, queues or agents. Each outbound call is one platform
/// request; retries, rate budgets and splitting are the core's job, driven by
/// [`ChannelCapabilities`] and the [`ChannelError`] classification.
#[async_trait]
pub trait Channel: Send + Sync + 'static {
    /// The channel's name as used in config and session keys (`telegram`, `discord`, …).
    fn name(&self) -> &str;

    /// Which account of the platform this is; `default` when only one is configured.
    fn account_id(&self) -> &str;

    fn capabilities(&self) -> &ChannelCapabilities;

    /// Connects to the platform and starts receiving. Fails if the platform refuses the
    /// credentials or cannot be reached, so the caller can report it for this channel alone.
    async fn start(&self) -> Result<InboundStream, ChannelError>;

    /// The name of this channel's inbound singleton when only one process may receive for
    /// it at a time (`telegram:<bot id>` for a polling bot), `None` when every replica may
    /// (webhooks, Slack's Socket Mode). See [`IngressCursor`].
    fn singleton_ingress(&self) -> Option<String> {
        None
    }

    /// [`Channel::start`] for the holder of this channel's singleton lease, keeping its
    /// position in `cursor`. A singleton channel can be started again once the stream of
    /// its previous start was dropped. The default ignores the cursor.
    async fn start_singleton(&self, cursor: std::sync::Arc<dyn IngressCursor>) -> Result<InboundStream, ChannelError> {
        let _ = cursor;
        self.start().await
    }

    /// Sends one message and returns the platform's id for it.
    ///
    /// A message with an attachment (the core sends at most one per message) uploads the
    /// file at its `path` with `text` as the caption, which the core has kept within
    /// [`ChannelCapabilities::caption_limit`]; `text` may then be empty. The file is within
    /// [`ChannelCapabilities::max_upload_bytes`]: the core sends a note instead of a file
    /// the platform would refuse. How it is shown (a photo, a voice note, a document) is
    /// the adapter's choice, from the attachment's kind and MIME type.
    async fn send(&self, message: OutboundMessage) -> Result<SentMessage, ChannelError>;

    /// Starts downloading an inbound attachment this channel delivered, by its `reference`,
    /// with whatever credentials the platform wants (Slack's bearer token, Telegram's
    /// `getFile`). The core enforces size limits as the bytes arrive and sniffs their type.
    async fn download(&self, attachment: &Attachment) -> Result<Download, ChannelError> {
        let _ = attachment;
        Err(ChannelError::Unsupported { operation: "download" })
    }

    /// Replaces the text of a message the bot sent. A platform's "not modified" answer is
    /// success: the message already shows this text.
    async fn edit(&self, message: &MessageRef, text: &str, format: TextFormat) -> Result<(), ChannelError> {
        let _ = (message, text, format);
        Err(ChannelError::Unsupported { operation: "edit" })
    }

    /// Deletes a message the bot sent (a superseded preview, for one).
    async fn delete(&self, message: &MessageRef) -> Result<(), ChannelError> {
        let _ = message;
        Err(ChannelError::Unsupported { operation: "delete" })
    }

    /// Uploads `message`'s files ahead of its send where the platform uploads a file and
    /// shares it in a message as separate steps (Slack), and returns it with each
    /// attachment's [`uploaded`](crate::Attachment::uploaded) id set: [`Channel::send`] then
    /// shares those files instead of uploading them. The core records the ids before the
    /// send, so a send repeated after a restart shares the same files (and
    /// [`Channel::find_sent`] can find their share) rather than uploading them twice. By
    /// default there is nothing to do ahead: the files go with the send.
    async fn upload_ahead(&self, message: OutboundMessage) -> Result<OutboundMessage, ChannelError> {
        Ok(message)
    }

    /// Looks for `message` (by its idempotency key) where [`Channel::send`] would have put
    /// it (see [`SendReconciliation::Lookup`](crate::SendReconciliation::Lookup)), so a send
    /// whose outcome is unknown is adopted instead of repeated. `Ok(None)`: it is not there,
    /// and sending is safe; also for a message without a key. Only recent messages need to
    /// be searched: the core asks within the reply's delivery deadline.
    async fn find_sent(&self, message: &OutboundMessage) -> Result<Option<SentMessage>, ChannelError> {
        let _ = message;
        Err(ChannelError::Unsupported { operation: "find_sent" })
    }

    /// Shows "typing…" in the target for the platform's usual few seconds.
    async fn typing(&self, target: &Target) -> Result<(), ChannelError> {
        let _ = target;
        Err(ChannelError::Unsupported { operation: "typing" })
    }
}
