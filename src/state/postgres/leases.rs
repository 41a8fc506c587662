//! Session leases on PostgreSQL (see `state::leases` for the protocol).
//!
//! The book ([`LeaseBook`]) is this replica's view of what it holds: the session, the epoch
//! it took it at, and until when (on this machine's monotonic clock) it may still act on it.
//! The session and inbound stores consult it to fence their writes; the database has the
//! last word, in the same transaction as the write.

use std::collections::{HashMap, HashSet};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::time::{Duration, Instant};

use async_trait::async_trait;
use futures::StreamExt;
use tokio::sync::Notify;
use tokio_postgres::AsyncMessage;

use super::batch::{Flush, GroupCommit};
use super::inbound::read_unanswered;
use super::{BACKEND, PgBackend, pg_error};
use crate::metrics::{LeaseEvent, metrics};
use crate::state::StorageError;
use crate::state::inbound::Unanswered;
use crate::state::leases::{HeldLease, Hold, LeaseStore, LeaseTiming, Renewed};

/// The channel replicas notify each other on: the payload is a session key.
const CHANNEL: &str = "ferry_sessions";

/// Sessions claimed in one poll at most.
const CLAIM_BATCH: usize = 64;

/// What this replica holds, and whether its writes are fenced at all (a gateway on
/// PostgreSQL; not `ferry state copy`).
#[derive(Debug, Default)]
pub struct LeaseBook {
    fencing: AtomicBool,
    owner: Mutex<String>,
    held: Mutex<HashMap<String, Held>>,
    ingress: Mutex<HashMap<String, Held>>,
}

#[derive(Debug, Clone, Copy)]
struct Held {
    epoch: i64,
    /// This replica acts on the lease until then.
    valid_until: Instant,
}

impl LeaseBook {
    fn held(&self) -> MutexGuard<'_, HashMap<String, Held>> {
        self.held.lock().unwrap_or_else(PoisonError::into_inner)
    }

    fn ingress(&self) -> MutexGuard<'_, HashMap<String, Held>> {
        self.ingress.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// The replica id and epoch a write for `key` is fenced by; `Ok(None)` when writes are
    /// not fenced. `Err` when this replica does not hold `key` (any more).
    pub(crate) fn fence(&self, key: &str) -> Result<Option<(String, i64)>, StorageError> {
        if !self.fencing.load(Ordering::Acquire) {
            return Ok(None);
        }
        let held = self.held().get(key).copied();
        match held {
            Some(held) if held.valid_until > Instant::now() => Ok(Some((self.owner(), held.epoch))),
            _ => {
                metrics().lease(LeaseEvent::FencedWrite);
                Err(StorageError::fenced(BACKEND, format!("this replica does not hold the lease of session {key}")))
            }
        }
    }

    /// The replica id writes are fenced by, when they are.
    pub(crate) fn owner_if_fencing(&self) -> Option<String> {
        self.fencing.load(Ordering::Acquire).then(|| self.owner())
    }

    fn owner(&self) -> String {
        self.owner.lock().unwrap_or_else(PoisonError::into_inner).clone()
    }
}

/// Checks the fence of a write for `key` inside its transaction: the lease row is locked
/// (`FOR SHARE`), so a replica taking the session over waits for this transaction, and the
/// write is refused if the lease is no longer this replica's at that epoch.
pub(crate) async fn check_fence(
    transaction: &deadpool_postgres::Transaction<'_>,
    book: &LeaseBook,
    key: &str,
) -> Result<(), StorageError> {
    let Some((owner, epoch)) = book.fence(key)? else { return Ok(()) };
    let statement = transaction
        .prepare_cached(
            "SELECT 1 FROM session_leases WHERE key = $1 AND owner = $2 AND epoch = $3 AND expires_at > now() \
             FOR SHARE",
        )
        .await
        .map_err(pg_error)?;
    if transaction.query_opt(&statement, &[&key, &owner, &epoch]).await.map_err(pg_error)?.is_none() {
        metrics().lease(LeaseEvent::FencedWrite);
        return Err(StorageError::fenced(BACKEND, format!("the lease of session {key} passed to another replica")));
    }
    Ok(())
}

/// [`LeaseStore`] on PostgreSQL.
pub struct PgLeases {
    backend: PgBackend,
    replica: String,
    timing: LeaseTiming,
    holds: Arc<GroupCommit<String, HoldOutcome>>,
    wake: Arc<Notify>,
}

#[derive(Debug, Clone, Copy)]
enum HoldOutcome {
    Taken(i64),
    Kept(i64),
    Elsewhere,
}

impl PgLeases {
    /// Turns fencing on for `backend`'s stores and starts listening for other replicas'
    /// wake-ups.
    pub fn start(backend: PgBackend, timing: LeaseTiming) -> Arc<Self> {
        let replica = replica_id();
        *backend.book.owner.lock().unwrap_or_else(PoisonError::into_inner) = replica.clone();
        backend.book.fencing.store(true, Ordering::Release);
        let flush_backend = backend.clone();
        let flush_replica = replica.clone();
        let flush: Flush<String, HoldOutcome> = Arc::new(move |keys| {
            let (backend, replica) = (flush_backend.clone(), flush_replica.clone());
            Box::pin(async move { hold_batch(&backend, &replica, timing, keys).await })
        });
        let wake = Arc::new(Notify::new());
        tokio::spawn(listen(backend.clone(), Arc::downgrade(&wake)));
        Arc::new(Self { backend, replica, timing, holds: GroupCommit::new(flush), wake })
    }

    fn book(&self) -> &LeaseBook {
        &self.backend.book
    }

    /// Counts `key` as held at `epoch` from `sent` on. A lease of the same epoch that lapsed
    /// here is not revived (`false`): the next renewal reports it lost, and it is taken over
    /// as a lapsed lease is.
    fn record(&self, key: String, epoch: i64, sent: Instant) -> bool {
        let valid_until = sent + self.timing.local_validity();
        let mut book = self.book().held();
        if book.get(&key).is_some_and(|held| held.epoch == epoch && held.valid_until <= Instant::now()) {
            return false;
        }
        book.insert(key, Held { epoch, valid_until });
        true
    }

    /// Whether this replica's lease of `key` lapsed by its own reckoning and waits for the
    /// next renewal to be reported lost.
    fn lapsed_here(&self, key: &str) -> bool {
        self.book().held().get(key).is_some_and(|held| held.valid_until <= Instant::now())
    }

    /// Lets the leases `held` (still this replica's in the database) lapse now. Best effort:
    /// if it fails, they lapse at their expiry.
    async fn give_back(&self, client: &deadpool_postgres::Client, held: &[(String, i64)]) {
        let keys: Vec<&str> = held.iter().map(|(key, _)| key.as_str()).collect();
        let epochs: Vec<i64> = held.iter().map(|(_, epoch)| *epoch).collect();
        let given = client
            .execute(
                "UPDATE session_leases l SET expires_at = now() \
                 FROM unnest($2::text[], $3::bigint[]) AS h(key, epoch) \
                 WHERE l.key = h.key AND l.owner = $1 AND l.epoch = h.epoch",
                &[&self.replica, &keys, &epochs],
            )
            .await;
        if let Err(error) = given {
            tracing::debug!(error = %pg_error(error), "cannot give back lapsed leases; they lapse at their expiry");
        }
    }
}

impl PgLeases {
    /// Renews the ingress singletons held; returns the ones lost.
    async fn renew_ingress(&self) -> Result<Vec<String>, StorageError> {
        let held: Vec<(String, i64)> =
            self.book().ingress().iter().map(|(name, held)| (name.clone(), held.epoch)).collect();
        if held.is_empty() {
            return Ok(Vec::new());
        }
        let sent = Instant::now();
        let names: Vec<&str> = held.iter().map(|(name, _)| name.as_str()).collect();
        let epochs: Vec<i64> = held.iter().map(|(_, epoch)| *epoch).collect();
        let client = self.backend.client().await?;
        let statement = client
            .prepare_cached(
                "UPDATE ingress_leases l SET expires_at = now() + $4::bigint * interval '1 millisecond' \
                 FROM unnest($2::text[], $3::bigint[]) AS h(name, epoch) \
                 WHERE l.name = h.name AND l.owner = $1 AND l.epoch = h.epoch AND l.expires_at > now() \
                 RETURNING l.name",
            )
            .await
            .map_err(pg_error)?;
        let rows = client
            .query(&statement, &[&self.replica, &names, &epochs, &millis(self.timing.lease)])
            .await
            .map_err(pg_error)?;
        let renewed: HashSet<String> = rows.iter().map(|row| row.get(0)).collect();
        let valid_until = sent + self.timing.local_validity();
        let mut book = self.book().ingress();
        let mut lost = Vec::new();
        for (name, epoch) in held {
            if renewed.contains(&name) {
                if let Some(entry) = book.get_mut(&name).filter(|entry| entry.epoch == epoch) {
                    entry.valid_until = valid_until;
                }
            } else if book.get(&name).is_some_and(|entry| entry.epoch == epoch) {
                book.remove(&name);
                lost.push(name);
            }
        }
        metrics().lease_count(LeaseEvent::Renewed, renewed.len());
        metrics().lease_count(LeaseEvent::Lost, lost.len());
        Ok(lost)
    }
}

/// `<host>-<pid>-<random>`: readable in `/healthz` and the database, and never reused by a
/// restarted process (whose predecessor's leases must lapse, not carry over).
fn replica_id() -> String {
    let host = std::fs::read_to_string("/proc/sys/kernel/hostname")
        .ok()
        .map(|name| name.trim().to_owned())
        .filter(|name| !name.is_empty())
        .unwrap_or_else(|| "ferry".to_owned());
    let random: u32 = rand::random();
    format!("{host}-{}-{random:08x}", std::process::id())
}

fn millis(duration: Duration) -> i64 {
    i64::try_from(duration.as_millis()).unwrap_or(i64::MAX)
}

/// Holds every key of a batch in one statement; tells the holders of the others.
async fn hold_batch(
    backend: &PgBackend,
    replica: &str,
    timing: LeaseTiming,
    keys: Vec<String>,
) -> Result<Vec<HoldOutcome>, StorageError> {
    // Sorted, so two replicas' batches over the same keys cannot deadlock.
    let unique: Vec<&str> =
        keys.iter().map(String::as_str).collect::<std::collections::BTreeSet<_>>().into_iter().collect();
    let mut client = backend.client().await?;
    let transaction = client.transaction().await.map_err(pg_error)?;
    let statement = transaction
        .prepare_cached(
            "INSERT INTO session_leases AS l (key, owner, epoch, expires_at) \
             SELECT k, $1, 1, now() + $3::bigint * interval '1 millisecond' FROM unnest($2::text[]) AS k \
             ON CONFLICT (key) DO UPDATE SET owner = excluded.owner, \
                 epoch = CASE WHEN l.owner = excluded.owner AND l.expires_at > now() THEN l.epoch ELSE l.epoch + 1 END, \
                 expires_at = excluded.expires_at \
             WHERE l.owner IS NULL OR l.expires_at <= now() OR l.owner = excluded.owner \
             RETURNING key, epoch, (xmax = 0) AS inserted",
        )
        .await
        .map_err(pg_error)?;
    let rows = transaction.query(&statement, &[&replica, &unique, &millis(timing.lease)]).await.map_err(pg_error)?;
    let ours: HashMap<String, i64> = rows.iter().map(|row| (row.get::<_, String>(0), row.get::<_, i64>(1))).collect();
    let elsewhere: Vec<&str> = unique.iter().copied().filter(|key| !ours.contains_key(*key)).collect();
    if !elsewhere.is_empty() {
        let notify = transaction
            .prepare_cached("SELECT pg_notify($1, k) FROM unnest($2::text[]) AS k")
            .await
            .map_err(pg_error)?;
        transaction.execute(&notify, &[&CHANNEL, &elsewhere]).await.map_err(pg_error)?;
    }
    transaction.commit().await.map_err(pg_error)?;
    let held = backend.book.held();
    Ok(keys
        .iter()
        .map(|key| match ours.get(key) {
            Some(&epoch) if held.get(key).is_some_and(|known| known.epoch == epoch) => HoldOutcome::Kept(epoch),
            Some(&epoch) => HoldOutcome::Taken(epoch),
            None => HoldOutcome::Elsewhere,
        })
        .collect())
}

#[async_trait]
impl LeaseStore for PgLeases {
    fn replica_id(&self) -> &str {
        &self.replica
    }

    fn timing(&self) -> LeaseTiming {
        self.timing
    }

    async fn hold(&self, key: &str) -> Result<Hold, StorageError> {
        if self.holds(key) {
            return Ok(Hold::Kept);
        }
        if self.lapsed_here(key) {
            // Its runs were fenced meanwhile: the session is taken over once the next
            // renewal reports the lease lost, never carried on under the same epoch.
            return Ok(Hold::Elsewhere);
        }
        let sent = Instant::now();
        match self.holds.submit(key.to_owned()).await? {
            HoldOutcome::Kept(epoch) if self.record(key.to_owned(), epoch, sent) => Ok(Hold::Kept),
            HoldOutcome::Taken(epoch) if self.record(key.to_owned(), epoch, sent) => {
                metrics().lease(LeaseEvent::Claimed);
                Ok(Hold::Taken { epoch })
            }
            HoldOutcome::Kept(_) | HoldOutcome::Taken(_) | HoldOutcome::Elsewhere => Ok(Hold::Elsewhere),
        }
    }

    async fn claim_waiting(&self, limit: usize) -> Result<Vec<(String, i64)>, StorageError> {
        let sent = Instant::now();
        let client = self.backend.client().await?;
        let statement = client
            .prepare_cached(
                "WITH waiting AS ( \
                     SELECT session_key, MIN(id) AS first FROM inbound_journal WHERE answered_at IS NULL \
                     GROUP BY session_key), \
                 candidates AS ( \
                     SELECT l.key FROM session_leases l JOIN waiting w ON w.session_key = l.key \
                     WHERE l.owner IS NULL OR l.expires_at <= now() \
                     ORDER BY w.first LIMIT $2 FOR UPDATE OF l SKIP LOCKED) \
                 UPDATE session_leases l SET owner = $1, epoch = l.epoch + 1, \
                     expires_at = now() + $3::bigint * interval '1 millisecond' \
                 FROM candidates c WHERE l.key = c.key RETURNING l.key, l.epoch",
            )
            .await
            .map_err(pg_error)?;
        let limit = i64::try_from(limit.min(CLAIM_BATCH)).unwrap_or(1);
        let rows =
            client.query(&statement, &[&self.replica, &limit, &millis(self.timing.lease)]).await.map_err(pg_error)?;
        let claimed: Vec<(String, i64)> = rows.iter().map(|row| (row.get(0), row.get(1))).collect();
        for (key, epoch) in &claimed {
            // A new epoch: never a lapsed lease revived.
            self.record(key.clone(), *epoch, sent);
            metrics().lease(LeaseEvent::Claimed);
        }
        Ok(claimed)
    }

    async fn waiting(&self, keys: &[String]) -> Result<Unanswered, StorageError> {
        if keys.is_empty() {
            return Ok(Unanswered::default());
        }
        read_unanswered(&self.backend, Some(keys)).await
    }

    async fn renew(&self) -> Result<Renewed, StorageError> {
        let lost_ingress = self.renew_ingress().await?;
        let held: Vec<(String, i64)> = self.book().held().iter().map(|(key, held)| (key.clone(), held.epoch)).collect();
        if held.is_empty() {
            // Nothing to renew; still a heartbeat, so an unreachable database is noticed
            // (and reported) by a replica that holds nothing.
            let client = self.backend.client().await?;
            client.execute("SELECT 1", &[]).await.map_err(pg_error)?;
            return Ok(Renewed { lost_ingress, ..Renewed::default() });
        }
        let sent = Instant::now();
        // A lease this replica stopped counting as held is not renewed: while it had lapsed
        // here, its runs' writes were refused and their sends withheld, so what those runs
        // answered must be taken over afresh, not carried on as if nothing happened.
        let (live, lapsed): (Vec<(String, i64)>, Vec<(String, i64)>) = {
            let book = self.book().held();
            held.into_iter().partition(|(key, _)| book.get(key).is_some_and(|held| held.valid_until > sent))
        };
        let keys: Vec<&str> = live.iter().map(|(key, _)| key.as_str()).collect();
        let epochs: Vec<i64> = live.iter().map(|(_, epoch)| *epoch).collect();
        let client = self.backend.client().await?;
        let statement = client
            .prepare_cached(
                "UPDATE session_leases l SET expires_at = now() + $4::bigint * interval '1 millisecond' \
                 FROM unnest($2::text[], $3::bigint[]) AS h(key, epoch) \
                 WHERE l.key = h.key AND l.owner = $1 AND l.epoch = h.epoch AND l.expires_at > now() \
                 RETURNING l.key",
            )
            .await
            .map_err(pg_error)?;
        let rows = client
            .query(&statement, &[&self.replica, &keys, &epochs, &millis(self.timing.lease)])
            .await
            .map_err(pg_error)?;
        let renewed: HashSet<String> = rows.iter().map(|row| row.get(0)).collect();
        let valid_until = sent + self.timing.local_validity();
        let now = Instant::now();
        let mut lost = Vec::new();
        let mut given_back = Vec::new();
        {
            let mut book = self.book().held();
            for (key, epoch) in live.into_iter().chain(lapsed) {
                let Some(entry) = book.get_mut(&key).filter(|entry| entry.epoch == epoch) else { continue };
                if renewed.contains(&key) && entry.valid_until > now {
                    entry.valid_until = valid_until;
                    continue;
                }
                if renewed.contains(&key) || entry.valid_until <= sent {
                    // Still this replica's in the database: given back below, so that any
                    // replica (this one too) takes it over at once with a new epoch.
                    given_back.push((key.clone(), epoch));
                }
                book.remove(&key);
                lost.push(key);
            }
        }
        if !given_back.is_empty() {
            self.give_back(&client, &given_back).await;
        }
        metrics().lease_count(LeaseEvent::Renewed, renewed.len().saturating_sub(given_back.len()));
        metrics().lease_count(LeaseEvent::Lost, lost.len());
        Ok(Renewed { renewed: renewed.len().saturating_sub(given_back.len()), lost, lost_ingress })
    }

    async fn release(&self, key: &str) -> Result<bool, StorageError> {
        let Some(epoch) = self.book().held().get(key).map(|held| held.epoch) else { return Ok(true) };
        let client = self.backend.client().await?;
        let statement = client
            .prepare_cached(
                "UPDATE session_leases SET owner = NULL, expires_at = '-infinity' \
                 WHERE key = $1 AND owner = $2 AND epoch = $3 \
                 AND NOT EXISTS (SELECT 1 FROM inbound_journal WHERE session_key = $1 AND answered_at IS NULL) \
                 RETURNING key",
            )
            .await
            .map_err(pg_error)?;
        let released = client.query_opt(&statement, &[&key, &self.replica, &epoch]).await.map_err(pg_error)?.is_some();
        if released {
            let mut book = self.book().held();
            if book.get(key).is_some_and(|held| held.epoch == epoch) {
                book.remove(key);
            }
        }
        Ok(released)
    }

    fn forget(&self, key: &str) {
        self.book().held().remove(key);
    }

    fn holds(&self, key: &str) -> bool {
        self.book().held().get(key).is_some_and(|held| held.valid_until > Instant::now())
    }

    fn held(&self) -> Vec<HeldLease> {
        let mut held: Vec<HeldLease> =
            self.book().held().iter().map(|(key, held)| HeldLease { key: key.clone(), epoch: held.epoch }).collect();
        held.sort_by(|a, b| a.key.cmp(&b.key));
        held
    }

    fn expired_locally(&self) -> bool {
        let now = Instant::now();
        self.book().held().values().any(|held| held.valid_until <= now)
    }

    async fn take_ingress(&self, name: &str) -> Result<Option<i64>, StorageError> {
        let sent = Instant::now();
        let client = self.backend.client().await?;
        let statement = client
            .prepare_cached(
                "INSERT INTO ingress_leases AS l (name, owner, epoch, expires_at) \
                 VALUES ($1, $2, 1, now() + $3::bigint * interval '1 millisecond') \
                 ON CONFLICT (name) DO UPDATE SET owner = excluded.owner, \
                     epoch = CASE WHEN l.owner = excluded.owner AND l.expires_at > now() THEN l.epoch ELSE l.epoch + 1 END, \
                     expires_at = excluded.expires_at \
                 WHERE l.owner IS NULL OR l.expires_at <= now() OR l.owner = excluded.owner \
                 RETURNING epoch",
            )
            .await
            .map_err(pg_error)?;
        let row = client
            .query_opt(&statement, &[&name, &self.replica, &millis(self.timing.lease)])
            .await
            .map_err(pg_error)?;
        let Some(epoch) = row.map(|row| row.get::<_, i64>(0)) else { return Ok(None) };
        let valid_until = sent + self.timing.local_validity();
        let previous = self.book().ingress().insert(name.to_owned(), Held { epoch, valid_until });
        if previous.is_none_or(|previous| previous.epoch != epoch) {
            metrics().lease(LeaseEvent::Claimed);
        }
        Ok(Some(epoch))
    }

    fn holds_ingress(&self, name: &str) -> bool {
        self.book().ingress().get(name).is_some_and(|held| held.valid_until > Instant::now())
    }

    fn held_ingress(&self) -> Vec<HeldLease> {
        let now = Instant::now();
        let mut held: Vec<HeldLease> = self
            .book()
            .ingress()
            .iter()
            .filter(|(_, held)| held.valid_until > now)
            .map(|(key, held)| HeldLease { key: key.clone(), epoch: held.epoch })
            .collect();
        held.sort_by(|a, b| a.key.cmp(&b.key));
        held
    }

    async fn ingress_cursor(&self, name: &str) -> Result<Option<String>, StorageError> {
        let client = self.backend.client().await?;
        let row =
            client.query_opt("SELECT cursor FROM ingress_leases WHERE name = $1", &[&name]).await.map_err(pg_error)?;
        Ok(row.and_then(|row| row.get(0)))
    }

    async fn save_ingress_cursor(&self, name: &str, epoch: i64, cursor: &str) -> Result<bool, StorageError> {
        if !self.holds_ingress(name) {
            metrics().lease(LeaseEvent::FencedWrite);
            return Ok(false);
        }
        let client = self.backend.client().await?;
        let statement = client
            .prepare_cached(
                "UPDATE ingress_leases SET cursor = $4 WHERE name = $1 AND owner = $2 AND epoch = $3 \
                 AND expires_at > now()",
            )
            .await
            .map_err(pg_error)?;
        let saved = client.execute(&statement, &[&name, &self.replica, &epoch, &cursor]).await.map_err(pg_error)? == 1;
        if !saved {
            metrics().lease(LeaseEvent::FencedWrite);
        }
        Ok(saved)
    }

    async fn woken(&self) {
        self.wake.notified().await;
    }
}

/// Listens on [`CHANNEL`] on a connection of its own (a pooled one cannot hold a LISTEN),
/// waking the replica for every notification; reconnects with a growing pause when the
/// connection drops. Ends when the replica is gone.
async fn listen(backend: PgBackend, wake: std::sync::Weak<Notify>) {
    let mut pause = Duration::from_millis(250);
    loop {
        if wake.strong_count() == 0 {
            return;
        }
        match backend.dedicated_connection().await {
            Ok((client, mut messages)) => {
                if let Err(error) = client.batch_execute(&format!("LISTEN {CHANNEL}")).await {
                    tracing::warn!(error = %pg_error(error), "cannot listen for other replicas; polling instead");
                } else {
                    pause = Duration::from_millis(250);
                    while let Some(message) = messages.next().await {
                        let Some(wake) = wake.upgrade() else { return };
                        if matches!(message, Ok(AsyncMessage::Notification(_))) {
                            wake.notify_one();
                        }
                        if message.is_err() {
                            break;
                        }
                    }
                }
            }
            Err(error) => {
                tracing::debug!(%error, "cannot open the listening connection; retrying");
            }
        }
        tokio::time::sleep(pause).await;
        pause = (pause * 2).min(Duration::from_secs(5));
    }
}
