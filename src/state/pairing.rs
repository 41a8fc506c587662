//! The pairing store (SPEC §3.2): pending pairing codes and the senders an operator
//! approved, shared by the daemon and the `ferry pairing` commands (a separate process) and
//! by replicas on one PostgreSQL. What a code looks like and how many may wait are part of
//! the store's contract, since a backend issues codes inside its transaction; when codes are
//! issued, to whom and for how long is `routing::pairing`'s.

use async_trait::async_trait;
use chrono::{DateTime, Utc};
use rand::Rng;

use super::StorageError;

/// Characters in a pairing code.
pub const CODE_LENGTH: usize = 8;

/// What a code is made of: capitals and digits without the look-alikes 0/O and 1/I.
pub const CODE_ALPHABET: &[u8; 32] = b"ABCDEFGHJKLMNPQRSTUVWXYZ23456789";

/// Codes pending per channel at most (SPEC §3.2).
pub const MAX_PENDING_PER_CHANNEL: i64 = 3;

/// A fresh code colliding with a pending one is one in 2^40 per pending code; after this
/// many collisions in a row something else is wrong.
pub(crate) const CODE_ATTEMPTS: usize = 8;

/// A code waiting for an operator.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PendingPairing {
    pub channel: String,
    pub sender_id: String,
    pub sender_name: Option<String>,
    pub code: String,
    pub created_at: DateTime<Utc>,
    pub expires_at: DateTime<Utc>,
}

/// What an unknown sender's request for a code came to.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum PairingRequest {
    /// A new code was issued.
    Issued(PendingPairing),
    /// The sender already had a code that is still valid: the same one again.
    Existing(PendingPairing),
    /// The channel already has [`MAX_PENDING_PER_CHANNEL`] codes pending; try later.
    TooManyPending,
}

/// A sender an operator approved.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ApprovedSender {
    pub channel: String,
    pub sender_id: String,
    pub sender_name: Option<String>,
    pub approved_at: DateTime<Utc>,
}

/// Why a pairing operation failed, worded for the operator running `ferry pairing`.
#[derive(Debug, thiserror::Error)]
pub enum PairingError {
    #[error("{code:?} is not a pairing code: codes are {CODE_LENGTH} characters from A-Z and 2-9 (no I, O, 0 or 1)")]
    MalformedCode { code: String },
    #[error("no pending pairing code {code} on {channel} (see `ferry pairing list`)")]
    UnknownCode { channel: String, code: String },
    #[error(
        "pairing code {code} on {channel} expired at {expired_at} UTC; ask the sender to message the bot again \
         for a new code",
        expired_at = expired_at.format("%Y-%m-%d %H:%M:%S")
    )]
    Expired { channel: String, code: String, expired_at: DateTime<Utc> },
    #[error("could not find a free pairing code on {channel} after {CODE_ATTEMPTS} attempts")]
    NoFreeCode { channel: String },
    #[error("pairing store failed while {action}: {source}")]
    Query { action: &'static str, source: StorageError },
}

/// Where pending codes and approved senders are kept: the state database, shared by the
/// daemon and the `ferry pairing` commands (a separate process). Each call is one
/// transaction; the store above it keeps the clock and the policy.
#[async_trait]
pub trait PairingBackend: Send + Sync + std::fmt::Debug {
    /// Whether an operator approved this sender on this channel.
    async fn is_approved(&self, channel: &str, sender_id: &str) -> Result<bool, StorageError>;

    /// In one transaction: forgets `wanted.channel`'s codes expired at `wanted.created_at`,
    /// then returns the sender's pending code if any, else [`PairingRequest::TooManyPending`]
    /// if the channel has [`MAX_PENDING_PER_CHANNEL`], else saves `wanted` under a fresh
    /// code (from [`generate_code`], retried on a collision).
    async fn request(&self, wanted: PendingPairing) -> Result<PairingRequest, PairingError>;

    /// In one transaction: removes the (well-formed, upper-case) `code` of `channel` and,
    /// unless it expired at `now`, approves its sender.
    async fn approve(&self, channel: &str, code: &str, now: DateTime<Utc>) -> Result<ApprovedSender, PairingError>;

    /// Codes not expired at `now`, oldest first.
    async fn pending(&self, now: DateTime<Utc>) -> Result<Vec<PendingPairing>, StorageError>;
}

/// A new random code. The thread-local generator is a CSPRNG seeded from the OS, so codes
/// cannot be predicted from earlier ones.
pub fn generate_code() -> String {
    let mut rng = rand::rng();
    (0..CODE_LENGTH).map(|_| char::from(CODE_ALPHABET[rng.random_range(0..CODE_ALPHABET.len())])).collect()
}

/// A failed backend call as the operator reads it: what was being done, and why it failed.
pub fn query(action: &'static str) -> impl FnOnce(StorageError) -> PairingError {
    move |source| PairingError::Query { action, source }
}
