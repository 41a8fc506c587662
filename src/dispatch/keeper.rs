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

use rand::Rng;
use tokio::sync::mpsc;

use super::{Dispatcher, Inner};
use crate::queue::journal::decode;
use crate::state::inbound::Unanswered;
use crate::state::leases::{Hold, LeaseStore};

/// The keeper of one dispatcher.
pub(super) struct LaneKeeper {
    leases: Arc<dyn LeaseStore>,
    /// Per held session, the journal ids already handed to the scheduler.
    known: Mutex<HashMap<String, HashSet<i64>>>,
    /// Sessions whose waiting messages are to be read and handed over, with whether they
    /// were just taken over from another holder. One task does it for all of them, a batch
    /// at a time: one query for every session that got a message meanwhile, and one
    /// session's messages never interleave with themselves.
    due: Mutex<HashMap<String, bool>>,
    /// Wakes the hand-over task.
    hand_over: tokio::sync::Notify,
    /// Sessions to give back, retried until the release goes through.
    idle: Mutex<HashSet<String>>,
    /// Whether the database answered the last renewal (for `/healthz`).
    reachable: std::sync::atomic::AtomicBool,
    /// Sessions whose leases this replica dropped while the database was unreachable (they
    /// may still be its own there): taking one again, even under the same epoch, is a
    /// takeover, so what its runs here began is completed from the ledger.
    lapsed: Mutex<HashSet<String>>,
}

impl LaneKeeper {
    pub(super) fn new(leases: Arc<dyn LeaseStore>) -> Arc<Self> {
        Arc::new(Self {
            leases,
            known: Mutex::default(),
            due: Mutex::default(),
            hand_over: tokio::sync::Notify::new(),
            idle: Mutex::default(),
            reachable: std::sync::atomic::AtomicBool::new(true),
            lapsed: Mutex::default(),
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
        tokio::spawn(hand_over(self.clone(), inner.clone()));
        tokio::spawn(renew(self.clone(), inner.clone()));
        tokio::spawn(release(self.clone(), inner, idle_keys));
    }

    /// A message for `key` was journaled here: its waiting messages are handed over if
    /// this replica holds the session (or can take it); otherwise its holder was told.
    pub(super) async fn arrived(&self, key: &str) {
        match self.leases.hold(key).await {
            Ok(Hold::Kept) => self.due(key.to_owned(), false),
            Ok(Hold::Taken { epoch }) => {
                tracing::debug!(session_key = %key, epoch, "took a session's lease");
                let lapsed_here = self.lapsed().remove(key);
                self.due(key.to_owned(), epoch > 1 || lapsed_here);
            }
            Ok(Hold::Elsewhere) => tracing::debug!(session_key = %key, "another replica runs this session"),
            Err(error) => {
                tracing::warn!(session_key = %key, %error, "cannot hold a session's lease; the message waits in the journal")
            }
        }
    }

    /// Marks `key`'s waiting messages for handing over (see [`LaneKeeper::due`]).
    fn due(&self, key: String, taken_over: bool) {
        *self.due.lock().unwrap_or_else(PoisonError::into_inner).entry(key).or_default() |= taken_over;
        self.hand_over.notify_one();
    }

    /// Reads the waiting messages of the due sessions this replica holds and hands those not
    /// handed over yet to the scheduler, each session's in id order. For a session just taken
    /// over, the ledger adopts what its previous holder recorded of their replies.
    async fn hand_over_due(&self, dispatcher: &Dispatcher) {
        let due: HashMap<String, bool> = {
            let mut due = self.due.lock().unwrap_or_else(PoisonError::into_inner);
            let keys: Vec<String> = due.keys().take(HAND_OVER_BATCH).cloned().collect();
            keys.into_iter().filter_map(|key| due.remove_entry(&key)).collect()
        };
        let keys: Vec<String> = due.keys().filter(|key| self.leases.holds(key)).cloned().collect();
        if keys.is_empty() {
            return;
        }
        let Unanswered { messages, deliveries } = match self.leases.waiting(&keys).await {
            Ok(waiting) => waiting,
            Err(error) => {
                tracing::warn!(%error, "cannot read sessions' waiting messages; the next poll retries");
                return;
            }
        };
        let fresh: Vec<_> = {
            let mut known = self.known();
            // Answered messages leave the journal: what was handed over and is no longer
            // waiting need not be remembered.
            let waiting: HashSet<i64> = messages.iter().map(|message| message.seq).collect();
            for key in &keys {
                if let Some(ids) = known.get_mut(key) {
                    ids.retain(|id| waiting.contains(id));
                }
            }
            messages
                .into_iter()
                .filter(|message| self.leases.holds(&message.entry.session_key))
                .filter(|message| known.entry(message.entry.session_key.clone()).or_default().insert(message.seq))
                .collect()
        };
        let adopted: Vec<i64> = fresh
            .iter()
            .filter(|message| due.get(&message.entry.session_key).copied().unwrap_or(false))
            .map(|message| message.seq)
            .collect();
        if tracing::enabled!(tracing::Level::DEBUG) {
            log_hand_over(&keys, &fresh, &due);
        }
        if !adopted.is_empty() {
            let orphans = dispatcher.inner.ledger.adopt(&adopted, deliveries);
            dispatcher.delete_orphans(orphans);
        }
        for message in decode(fresh) {
            dispatcher.submit_locally(message).await;
        }
    }

    fn known(&self) -> MutexGuard<'_, HashMap<String, HashSet<i64>>> {
        self.known.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Forgets a session given back.
    fn let_go(&self, key: &str) {
        self.known().remove(key);
    }

    /// Abandons the lane of a session this replica lost (or let lapse): its run is
    /// cancelled and what it had handed over is forgotten, so that whoever takes the session
    /// next, this replica included, reads its waiting messages afresh.
    fn lose(&self, scheduler: &crate::queue::Scheduler, key: &str) {
        scheduler.abandon(key);
        self.let_go(key);
    }

    fn lapsed(&self) -> MutexGuard<'_, HashSet<String>> {
        self.lapsed.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

/// Says, per session, which waiting messages go to its lane (a post-mortem of a replica's
/// takeovers reads it).
fn log_hand_over(keys: &[String], fresh: &[crate::state::inbound::LoggedMessage], due: &HashMap<String, bool>) {
    for key in keys {
        let seqs: Vec<i64> =
            fresh.iter().filter(|message| message.entry.session_key == *key).map(|message| message.seq).collect();
        if !seqs.is_empty() {
            let taken_over = due.get(key).copied().unwrap_or(false);
            tracing::debug!(session_key = %key, ?seqs, taken_over, "handing a session's waiting messages to its lane");
        }
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
                    // The holder may have been this replica, its lease lapsed before a renewal
                    // could report it lost: that tenure's lane ends here.
                    keeper.lose(&dispatcher.inner.scheduler, &key);
                    keeper.lapsed().remove(&key);
                    keeper.due(key, true);
                }
            }
            Err(error) => tracing::debug!(%error, "cannot look for lapsed sessions"),
        }
        for lease in keeper.leases.held() {
            keeper.due(lease.key, false);
        }
        retry_releases(&keeper, &dispatcher).await;
    }
}

/// Hands the due sessions' messages over, a batch at a time, whenever some are due.
async fn hand_over(keeper: Arc<LaneKeeper>, inner: Weak<Inner>) {
    loop {
        keeper.hand_over.notified().await;
        loop {
            let Some(inner) = inner.upgrade() else { return };
            keeper.hand_over_due(&Dispatcher { inner }).await;
            if keeper.due.lock().unwrap_or_else(PoisonError::into_inner).is_empty() {
                break;
            }
        }
    }
}

/// Renews the held leases; abandons the lanes of the lost ones.
///
/// Each renewal is bounded by the renewal period, so a database that stops answering (a
/// connection black-holed, not refused) cannot hold the loop. While renewals fail, it looks
/// again every half margin, so the runs of leases that may have lapsed are stopped before
/// another replica can take them over ([`margin`](crate::state::leases::LeaseTiming::margin)), not at the next period.
async fn renew(keeper: Arc<LaneKeeper>, inner: Weak<Inner>) {
    let timing = keeper.leases.timing();
    let failing_pause = (timing.margin() / 2).min(timing.renew);
    let mut pause = timing.renew;
    loop {
        tokio::time::sleep(pause).await;
        let Some(inner) = inner.upgrade() else { return };
        let scheduler = inner.scheduler.clone();
        drop(inner);
        let renewed = match tokio::time::timeout(timing.renew, keeper.leases.renew()).await {
            Ok(result) => result.map_err(|error| error.to_string()),
            Err(_) => Err(format!("no answer within {:?}", timing.renew)),
        };
        match renewed {
            Ok(renewed) => {
                pause = timing.renew;
                if !keeper.reachable.swap(true, std::sync::atomic::Ordering::AcqRel) {
                    tracing::info!("the state database answers again; leases renewed");
                }
                for key in renewed.lost {
                    tracing::warn!(session_key = %key, "lost a session's lease; its run stops here");
                    keeper.lose(&scheduler, &key);
                }
                for name in renewed.lost_ingress {
                    tracing::warn!(ingress = %name, "lost an ingress lease; receiving stops here");
                }
            }
            Err(error) => {
                pause = failing_pause;
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
                        keeper.leases.forget(&lease.key);
                        keeper.lose(&scheduler, &lease.key);
                        keeper.lapsed().insert(lease.key);
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
            Ok(false) => keeper.due(key, false),
            Err(error) => {
                tracing::debug!(session_key = %key, %error, "cannot give a session back yet; retrying");
                keeper.idle.lock().unwrap_or_else(PoisonError::into_inner).insert(key);
            }
        }
    }
}

/// Sessions whose waiting messages are read in one query at most.
const HAND_OVER_BATCH: usize = 512;

/// How long `/healthz` lists held leases for at most.
pub(super) const HEALTH_LEASES: usize = 50;
