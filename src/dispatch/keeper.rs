//! The lane keeper: session lanes across replicas that share one PostgreSQL (`state::leases`).
//!
//! A replica runs a session's messages only while it holds the session's lease, and then it
//! runs all of them, wherever they came in. So every message goes through the journal: the
//! replica that took it in journals it, then holds the session if it can. Its holder reads
//! the session's waiting messages from the journal, in id order, and hands each one it has
//! not seen yet to its scheduler, where the queue modes apply as on one machine (a steer or
//! an interrupt that came in on another replica reaches the run here).
//!
//! Three tasks keep it going:
//! - a poll, every second (jittered) and whenever another replica notifies: takes sessions
//!   whose holder's lease lapsed with messages waiting, and picks up messages that other
//!   replicas took in for the sessions held here;
//! - a renewal, every `state.renew_seconds`: a lease that could not be renewed is lost, and
//!   its lane is abandoned (the run is cancelled; its messages stay journaled for the new
//!   holder). When renewals fail for longer than the lease, every lane is abandoned;
//! - the release of each session whose lane goes idle, unless messages are waiting.

use std::collections::{HashMap, HashSet};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError, Weak};

use rand::RngExt;
use tokio::sync::mpsc;

use super::{Dispatcher, Inner};
use crate::queue::journal::decode;
use crate::state::inbound_log::Unanswered;
use crate::state::leases::{Hold, LeaseStore};

/// The keeper of one dispatcher.
pub(super) struct LaneKeeper {
    leases: Arc<dyn LeaseStore>,
    /// Per held session, the journal ids already handed to the scheduler.
    known: Mutex<HashMap<String, HashSet<i64>>>,
    /// Per session, held while its waiting messages are handed over, so two pickups
    /// cannot interleave their messages.
    handing: Mutex<HashMap<String, Arc<tokio::sync::Mutex<()>>>>,
    /// Sessions to give back, retried until the release goes through.
    idle: Mutex<HashSet<String>>,
    /// Whether the database answered the last renewal (for `/healthz`).
    reachable: std::sync::atomic::AtomicBool,
}

impl LaneKeeper {
    pub(super) fn new(leases: Arc<dyn LeaseStore>) -> Arc<Self> {
        Arc::new(Self {
            leases,
            known: Mutex::default(),
            handing: Mutex::default(),
            idle: Mutex::default(),
            reachable: std::sync::atomic::AtomicBool::new(true),
        })
    }

    pub(super) fn leases(&self) -> &Arc<dyn LeaseStore> {
        &self.leases
    }

    /// Whether the last renewal reached the database.
    pub(super) fn database_reachable(&self) -> bool {
        self.reachable.load(std::sync::atomic::Ordering::Acquire)
    }

    /// Starts the poll, the renewal and the releases for `dispatcher`. They end when the
    /// dispatcher is dropped.
    pub(super) fn start(self: &Arc<Self>, dispatcher: &Dispatcher) {
        let (idle, idle_keys) = mpsc::unbounded_channel();
        dispatcher.inner.scheduler.notify_idle(idle);
        let inner = Arc::downgrade(&dispatcher.inner);
        tokio::spawn(poll(self.clone(), inner.clone()));
        tokio::spawn(renew(self.clone(), inner.clone()));
        tokio::spawn(release(self.clone(), inner, idle_keys));
    }

    /// A message for `key` was journaled here: hand the session's waiting messages over if
    /// this replica holds it (or can take it); otherwise its holder was told.
    pub(super) async fn arrived(&self, dispatcher: &Dispatcher, key: &str) {
        match self.leases.hold(key).await {
            Ok(Hold::Kept) => self.hand_over(dispatcher, &[key.to_owned()], false).await,
            Ok(Hold::Taken { epoch }) => {
                tracing::debug!(session_key = %key, epoch, "took a session's lease");
                self.hand_over(dispatcher, &[key.to_owned()], epoch > 1).await
            }
            Ok(Hold::Elsewhere) => tracing::debug!(session_key = %key, "another replica runs this session"),
            Err(error) => {
                tracing::warn!(session_key = %key, %error, "cannot hold a session's lease; the message waits in the journal")
            }
        }
    }

    /// Reads the waiting messages of the held sessions `keys` and hands those not handed
    /// over yet to the scheduler, each session's in id order. With `taken_over`, a previous
    /// holder may have begun replying: the ledger adopts their delivery records.
    async fn hand_over(&self, dispatcher: &Dispatcher, keys: &[String], taken_over: bool) {
        let locks: Vec<_> = keys.iter().map(|key| self.handing_lock(key)).collect();
        let mut guards = Vec::with_capacity(locks.len());
        for lock in &locks {
            guards.push(lock.lock().await);
        }
        let Unanswered { messages, deliveries } = match self.leases.waiting(keys).await {
            Ok(waiting) => waiting,
            Err(error) => {
                tracing::warn!(%error, "cannot read a session's waiting messages; the next poll retries");
                return;
            }
        };
        let fresh: Vec<_> = {
            let mut known = self.known();
            messages
                .into_iter()
                .filter(|message| self.leases.holds(&message.entry.session_key))
                .filter(|message| known.entry(message.entry.session_key.clone()).or_default().insert(message.seq))
                .collect()
        };
        if fresh.is_empty() {
            return;
        }
        if taken_over {
            let ids: Vec<i64> = fresh.iter().map(|message| message.seq).collect();
            let orphans = dispatcher.inner.ledger.adopt(&ids, deliveries);
            dispatcher.delete_orphans(orphans);
        }
        for message in decode(fresh) {
            dispatcher.submit_locally(message).await;
        }
        drop(guards);
    }

    fn handing_lock(&self, key: &str) -> Arc<tokio::sync::Mutex<()>> {
        self.handing.lock().unwrap_or_else(PoisonError::into_inner).entry(key.to_owned()).or_default().clone()
    }

    fn known(&self) -> MutexGuard<'_, HashMap<String, HashSet<i64>>> {
        self.known.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Forgets a session given back or lost.
    fn let_go(&self, key: &str) {
        self.known().remove(key);
        self.handing.lock().unwrap_or_else(PoisonError::into_inner).remove(key);
    }
}

/// Takes lapsed sessions and picks up messages for held ones, every second or so.
async fn poll(keeper: Arc<LaneKeeper>, inner: Weak<Inner>) {
    let period = keeper.leases.timing().claim_poll();
    loop {
        let jitter = rand::rng().random_range(0.5..1.5);
        tokio::select! {
            () = tokio::time::sleep(period.mul_f64(jitter)) => {}
            () = keeper.leases.woken() => {}
        }
        let Some(inner) = inner.upgrade() else { return };
        let dispatcher = Dispatcher { inner };
        match keeper.leases.claim_waiting(64).await {
            Ok(claimed) => {
                for (key, epoch) in claimed {
                    tracing::info!(session_key = %key, epoch, "took over a session whose holder's lease lapsed");
                    keeper.hand_over(&dispatcher, &[key], true).await;
                }
            }
            Err(error) => tracing::debug!(%error, "cannot look for lapsed sessions"),
        }
        let held: Vec<String> = keeper.leases.held().into_iter().map(|lease| lease.key).collect();
        if !held.is_empty() {
            keeper.hand_over(&dispatcher, &held, false).await;
        }
        retry_releases(&keeper, &dispatcher).await;
    }
}

/// Renews the held leases; abandons the lanes of the lost ones.
async fn renew(keeper: Arc<LaneKeeper>, inner: Weak<Inner>) {
    let timing = keeper.leases.timing();
    let mut ticks = tokio::time::interval(timing.renew);
    ticks.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        ticks.tick().await;
        let Some(inner) = inner.upgrade() else { return };
        let scheduler = inner.scheduler.clone();
        drop(inner);
        match keeper.leases.renew().await {
            Ok(renewed) => {
                if !keeper.reachable.swap(true, std::sync::atomic::Ordering::AcqRel) {
                    tracing::info!("the state database answers again; leases renewed");
                }
                for key in renewed.lost {
                    tracing::warn!(session_key = %key, "lost a session's lease; its run stops here");
                    scheduler.abandon(&key);
                    keeper.let_go(&key);
                }
                for name in renewed.lost_ingress {
                    tracing::warn!(ingress = %name, "lost an ingress lease; receiving stops here");
                }
            }
            Err(error) => {
                if keeper.reachable.swap(false, std::sync::atomic::Ordering::AcqRel) {
                    tracing::error!(%error, "cannot renew session leases; retrying");
                }
                if keeper.leases.expired_locally() {
                    let held = keeper.leases.held();
                    if !held.is_empty() {
                        tracing::error!(
                            sessions = held.len(),
                            "session leases may have lapsed while the database was unreachable; stopping their runs"
                        );
                    }
                    for lease in held {
                        scheduler.abandon(&lease.key);
                        keeper.leases.forget(&lease.key);
                        keeper.let_go(&lease.key);
                    }
                }
            }
        }
    }
}

/// Gives back each session whose lane went idle.
async fn release(keeper: Arc<LaneKeeper>, inner: Weak<Inner>, mut idle: mpsc::UnboundedReceiver<String>) {
    while let Some(key) = idle.recv().await {
        let Some(inner) = inner.upgrade() else { return };
        let dispatcher = Dispatcher { inner };
        keeper.idle.lock().unwrap_or_else(PoisonError::into_inner).insert(key);
        retry_releases(&keeper, &dispatcher).await;
    }
}

async fn retry_releases(keeper: &LaneKeeper, dispatcher: &Dispatcher) {
    let keys: Vec<String> = keeper.idle.lock().unwrap_or_else(PoisonError::into_inner).drain().collect();
    for key in keys {
        if dispatcher.inner.scheduler.status(&key) != Default::default() {
            // Busy again: released when it goes idle next.
            continue;
        }
        match keeper.leases.release(&key).await {
            Ok(true) => keeper.let_go(&key),
            // Messages came in meanwhile: run them.
            Ok(false) => keeper.hand_over(dispatcher, std::slice::from_ref(&key), false).await,
            Err(error) => {
                tracing::debug!(session_key = %key, %error, "cannot give a session back yet; retrying");
                keeper.idle.lock().unwrap_or_else(PoisonError::into_inner).insert(key);
            }
        }
    }
}

/// How long `/healthz` lists held leases for at most.
pub(super) const HEALTH_LEASES: usize = 50;
