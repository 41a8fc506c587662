//! The trait every chat platform implements.

use async_trait::async_trait;
use futures::stream::BoxStream;

use crate::outbound::TextFormat;
use crate::{ChannelCapabilities, ChannelError, InboundDelivery, MessageRef, OutboundMessage, SentMessage, Target};

/// The inbound side of a started channel. It ends when the channel stops.
pub type InboundStream = BoxStream<'static, InboundDelivery>;

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

    /// Sends one message and returns the platform's id for it.
    async fn send(&self, message: OutboundMessage) -> Result<SentMessage, ChannelError>;

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
