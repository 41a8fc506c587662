//! Session leases: which replica runs each session's lane when several share one database.
//!
//! A replica runs a session's messages only while it holds that session's lease. The lease
//! is a database row (owner, epoch, expiry by the database's clock); a replica takes it when
//! a message for an idle session arrives or when its holder's lease lapsed with messages
//! still waiting, renews everything it holds on a short period, and gives a session back
//! when its lane goes idle. Every write a run makes is fenced by the lease: a replica that
//! lost it (killed, paused, cut off from the database) cannot write any more, and it stops
//! sending to platforms on its own before the lease can lapse ([`LeaseStore::expired_locally`]).
//!
//! One process on SQLite needs none of this: it owns every session, and `Stores::leases` is
//! `None`.

use std::time::Duration;

use async_trait::async_trait;

use super::StorageError;
use crate::state::inbound::Unanswered;

/// How leases are timed (`state.lease_seconds`, `state.renew_seconds`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct LeaseTiming {
    /// How long a lease lasts after each renewal, by the database's clock.
    pub lease: Duration,
    /// How often held leases are renewed.
    pub renew: Duration,
}

impl LeaseTiming {
    /// How long after sending a renewal that succeeded this replica still counts its leases
    /// as held: the lease, less a margin. The database stamps the renewal when it runs it,
    /// never before it was sent, so this replica stops at least `margin` before another can
    /// take over, even with no clock shared between them.
    pub fn local_validity(&self) -> Duration {
        self.lease.saturating_sub(self.margin())
    }

    /// A sixth of the lease, at least one renewal period's worth of slack below it.
    pub fn margin(&self) -> Duration {
        (self.lease / 6).max(Duration::from_millis(500))
    }

    /// How often the replica looks for sessions whose holder's lease lapsed with messages
    /// waiting, and for messages other replicas took in for sessions it holds: a second,
    /// spread by the caller's jitter. `LISTEN/NOTIFY` wakes it sooner; this backs it up.
    pub fn claim_poll(&self) -> Duration {
        Duration::from_secs(1).min(self.renew)
    }
}

/// What holding a session came to.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Hold {
    /// This replica already held it.
    Kept,
    /// This replica has just taken it (free, or its holder's lease lapsed): messages another
    /// replica took in may be waiting, and a previous holder may have begun replying.
    Taken { epoch: i64 },
    /// Another replica holds it; that replica was told a message arrived.
    Elsewhere,
}

/// What renewing the held leases came to.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct Renewed {
    pub renewed: usize,
    /// Sessions whose lease this replica no longer holds: their runs must stop.
    pub lost: Vec<String>,
    /// Ingress singletons this replica no longer holds: their inbound must stop.
    pub lost_ingress: Vec<String>,
}

/// A lease this replica holds, for `/healthz`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HeldLease {
    pub key: String,
    pub epoch: i64,
}

/// Session leases in the shared database.
#[async_trait]
pub trait LeaseStore: Send + Sync {
    /// This replica's id, unique to this process's lifetime.
    fn replica_id(&self) -> &str;

    fn timing(&self) -> LeaseTiming;

    /// Takes `key` for this replica if it is free, lapsed or already ours.
    async fn hold(&self, key: &str) -> Result<Hold, StorageError>;

    /// Takes up to `limit` sessions with messages waiting whose lease is free or lapsed
    /// (`FOR UPDATE SKIP LOCKED`: replicas polling at once take different ones).
    async fn claim_waiting(&self, limit: usize) -> Result<Vec<(String, i64)>, StorageError>;

    /// The unanswered messages of the sessions `keys`, oldest first, and the delivery
    /// records of their replies.
    async fn waiting(&self, keys: &[String]) -> Result<Unanswered, StorageError>;

    /// Renews every lease held. A lease that could not be renewed is lost.
    async fn renew(&self) -> Result<Renewed, StorageError>;

    /// Gives `key` back, unless messages for it are waiting (then it stays held: `false`).
    async fn release(&self, key: &str) -> Result<bool, StorageError>;

    /// Forgets `key` locally: a run found it was fenced out.
    fn forget(&self, key: &str);

    /// Whether this replica holds `key` now, by its own reckoning.
    fn holds(&self, key: &str) -> bool;

    /// The leases held now.
    fn held(&self) -> Vec<HeldLease>;

    /// No renewal succeeded within [`LeaseTiming::local_validity`]: every lease may have
    /// lapsed in the database, so nothing may be sent on their behalf.
    fn expired_locally(&self) -> bool;

    /// Takes the ingress singleton `name` (`telegram:<bot id>`) if it is free, lapsed or
    /// already this replica's; its epoch when held here. Renewed with the sessions.
    async fn take_ingress(&self, name: &str) -> Result<Option<i64>, StorageError>;

    /// Whether this replica holds the ingress singleton `name` now, by its own reckoning.
    fn holds_ingress(&self, name: &str) -> bool;

    /// The ingress singletons held now (whose lease is still good by this replica's reckoning).
    fn held_ingress(&self) -> Vec<HeldLease>;

    /// The position the singleton's holders saved.
    async fn ingress_cursor(&self, name: &str) -> Result<Option<String>, StorageError>;

    /// Saves the singleton's position if this replica still holds it at `epoch`; `false`
    /// (nothing saved) when it does not.
    async fn save_ingress_cursor(&self, name: &str, epoch: i64, cursor: &str) -> Result<bool, StorageError>;

    /// Resolves when another replica says a message arrived for a session held here, or a
    /// session's lease was given back with messages waiting. May also resolve spuriously.
    async fn woken(&self);
}
