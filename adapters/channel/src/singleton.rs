//! Inbound that only one process may run at a time, for a core that runs as several
//! replicas: a Telegram bot's `getUpdates` long poll (a second poller gets `409 Conflict`), a
//! Discord gateway shard. Such a channel names its singleton
//! ([`Channel::singleton_ingress`](crate::Channel::singleton_ingress)); the core starts its
//! inbound only on the replica holding that name's lease, and may start it again on another
//! replica (or later on this one) after the lease moved.
//!
//! The channel keeps its position in the platform's stream (a Telegram offset) in an
//! [`IngressCursor`] the core gives it, written only under the lease: a replica that lost
//! the lease finds its writes refused and stops, so it cannot confirm to the platform what
//! the core has not recorded.

use async_trait::async_trait;

/// Why a cursor could not be saved.
#[derive(Debug, thiserror::Error)]
pub enum CursorError {
    /// The lease passed to another process: stop receiving now.
    #[error("the ingress lease passed to another replica")]
    LeaseLost,
    /// The store could not be reached: retry, or stop if it lasts.
    #[error("cannot save the ingress position: {0}")]
    Unavailable(String),
}

/// Where a singleton channel keeps its position, under the lease of its singleton.
#[async_trait]
pub trait IngressCursor: Send + Sync {
    /// The position the previous holder saved; `None` before any.
    async fn load(&self) -> Result<Option<String>, CursorError>;

    /// Saves the position past everything the core has accepted, before the channel tells
    /// the platform (Telegram confirms updates when polled with a higher offset).
    async fn save(&self, position: &str) -> Result<(), CursorError>;
}
