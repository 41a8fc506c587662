//! Why a platform call failed, classified so the core knows whether to retry.

use std::time::Duration;

/// A failed platform call. The variants are what the outbound scheduler and the preview
/// stream decide on: wait and retry, resend as plain text, give up, or keep what is there.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ChannelError {
    /// The platform asked us to slow down (HTTP 429). Retried after `retry_after`.
    #[error("rate limited by the platform{}", retry_after.map(|d| format!(" (retry after {} ms)", d.as_millis())).unwrap_or_default())]
    RateLimited { retry_after: Option<Duration> },
    /// A timeout, a 5xx or a dropped connection: the message may or may not have landed.
    /// Retried for sends; a preview edit that fails this way keeps the preview rather than
    /// risk a duplicate.
    #[error("delivery failed and may or may not have happened: {reason}")]
    Transient { reason: String },
    /// The platform refused the markup (e.g. Telegram "can't parse entities"); the same text
    /// as plain text may go through.
    #[error("the platform rejected the message markup: {reason}")]
    MarkupRejected { reason: String },
    /// The text is over the platform's limit. The core splits before sending, so this
    /// signals a capability that understates the real limit.
    #[error("message of {len} characters is over the platform limit of {limit}")]
    TooLong { len: usize, limit: usize },
    /// The bot's credentials were refused. Not retried; the channel needs operator action.
    #[error("the platform refused the bot's credentials: {reason}")]
    Unauthorized { reason: String },
    /// Any other refusal (a 4xx other than 429): not retried.
    #[error("the platform rejected the request: {reason}")]
    Rejected { reason: String },
    /// The channel does not offer this operation (see its capabilities).
    #[error("{operation} is not supported by this channel")]
    Unsupported { operation: &'static str },
    /// The channel was stopped or never started.
    #[error("the channel is closed")]
    Closed,
}

impl ChannelError {
    /// Whether trying the same call again later can succeed.
    pub fn is_retryable(&self) -> bool {
        matches!(self, ChannelError::RateLimited { .. } | ChannelError::Transient { .. })
    }

    /// How long the platform asked us to wait, if it said.
    pub fn retry_after(&self) -> Option<Duration> {
        match self {
            ChannelError::RateLimited { retry_after } => *retry_after,
            _ => None,
        }
    }
}
