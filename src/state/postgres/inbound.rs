//! The inbound store on PostgreSQL: `inbound_seen` (dedupe), `inbound_journal` (accepted
//! messages until answered) and `delivery_records` (the ledger), written by group commit.
//!
//! A batch of sightings is one upsert: a key not seen inside the window is inserted, or its
//! expired sighting renewed, and the statement returns exactly those keys. The unique key
//! makes the decision on the server, so two replicas receiving one platform event cannot
//! both take it. Within a batch the first sighting of a key wins before anything is sent.
//! The fresh keys' accepted messages are journaled in the same transaction, in the order
//! they were submitted, so their ids grow in that order.

use std::collections::{HashMap, HashSet};
use std::sync::{Arc, Weak};
use std::time::Duration;

use async_trait::async_trait;
use chrono::Utc;
use deadpool_postgres::Transaction;

use super::batch::{Flush, GroupCommit};
use super::{PgBackend, pg_error};
use crate::metrics::{LeaseEvent, metrics};
use crate::state::inbound::{Accepted, DEDUPE_WINDOW, LoggedDelivery, LoggedMessage, MessageKey, Unanswered};
use crate::state::{InboundStore, StorageError};

/// How often old sightings, answered messages and their delivery records are deleted.
const PRUNE_INTERVAL: Duration = Duration::from_secs(60);

/// How long an answered message stays in the journal (for an operator looking into it).
const KEEP_ANSWERED_MS: i64 = 10 * 60 * 1000;

/// A message key, owned, as a batch holds it.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
struct Key {
    channel: String,
    account_id: String,
    chat_id: String,
    thread_id: String,
    message_id: String,
}

impl From<&MessageKey<'_>> for Key {
    fn from(key: &MessageKey<'_>) -> Self {
        Self {
            channel: key.channel.to_owned(),
            account_id: key.account_id.to_owned(),
            chat_id: key.chat_id.to_owned(),
            thread_id: key.thread_id.to_owned(),
            message_id: key.message_id.to_owned(),
        }
    }
}

enum Op {
    Sighting { key: Key, at: i64, cutoff: i64, accepted: Option<Accepted> },
    Answered { ids: Vec<i64> },
    Delivery { ids: Vec<i64>, body: String, answered: bool },
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Outcome {
    Duplicate,
    /// Recorded; an accepted message's id.
    Recorded(Option<i64>),
}

/// [`InboundStore`] on PostgreSQL.
pub struct PgInbound {
    backend: PgBackend,
    writes: Arc<GroupCommit<Op, Outcome>>,
}

impl std::fmt::Debug for PgInbound {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PgInbound").finish_non_exhaustive()
    }
}

impl PgInbound {
    /// The store, with its pruning task (which ends when the store is dropped).
    pub fn start(backend: PgBackend) -> Arc<Self> {
        let committer = backend.clone();
        let flush: Flush<Op, Outcome> = Arc::new(move |ops| {
            let backend = committer.clone();
            Box::pin(async move { commit(&backend, ops).await })
        });
        let store = Arc::new(Self { backend, writes: GroupCommit::new(flush) });
        tokio::spawn(prune_periodically(Arc::downgrade(&store)));
        store
    }

    /// Deletes sightings outside the dedupe window, messages answered a while ago and the
    /// delivery records no unanswered message needs.
    pub async fn prune(&self) -> Result<u64, StorageError> {
        let now = Utc::now().timestamp_millis();
        let client = self.backend.client().await?;
        let seen = client
            .execute("DELETE FROM inbound_seen WHERE seen_at <= $1", &[&(now - DEDUPE_WINDOW.num_milliseconds())])
            .await
            .map_err(pg_error)?;
        let answered = client
            .execute("DELETE FROM inbound_journal WHERE answered_at <= $1", &[&(now - KEEP_ANSWERED_MS)])
            .await
            .map_err(pg_error)?;
        let records = client
            .execute(
                "DELETE FROM delivery_records d WHERE NOT EXISTS (SELECT 1 FROM inbound_journal j \
                 WHERE j.id = ANY(d.message_ids) AND j.answered_at IS NULL)",
                &[],
            )
            .await
            .map_err(pg_error)?;
        Ok(seen + answered + records)
    }
}

async fn prune_periodically(store: Weak<PgInbound>) {
    let mut ticks = tokio::time::interval(PRUNE_INTERVAL);
    ticks.tick().await;
    loop {
        ticks.tick().await;
        let Some(store) = store.upgrade() else { return };
        if let Err(error) = store.prune().await {
            tracing::warn!(%error, "pruning the inbound tables failed; the next round retries");
        }
    }
}

/// Commits one batch (see the module's docs).
async fn commit(backend: &PgBackend, ops: Vec<Op>) -> Result<Vec<Outcome>, StorageError> {
    let mut outcomes = vec![Outcome::Recorded(None); ops.len()];
    // The first sighting of each key in the batch goes to the server; later ones are
    // redeliveries of it.
    let mut batch_keys = HashSet::new();
    let mut sightings = Vec::new();
    let mut answered = Vec::new();
    let mut deliveries = Vec::new();
    for (index, op) in ops.iter().enumerate() {
        match op {
            Op::Sighting { key, .. } => {
                if batch_keys.insert(key) {
                    sightings.push(index);
                } else {
                    outcomes[index] = Outcome::Duplicate;
                }
            }
            Op::Answered { ids } => answered.extend_from_slice(ids),
            Op::Delivery { ids, body, answered: done } => {
                deliveries.push((ids, body));
                if *done {
                    answered.extend_from_slice(ids);
                }
            }
        }
    }
    let fencing = backend.book().owner_if_fencing();
    let mut fenced = 0;
    let mut client = backend.client().await?;
    let transaction = client.transaction().await.map_err(pg_error)?;
    if !sightings.is_empty() {
        let fresh = record_sightings(&transaction, &ops, &sightings).await?;
        let accepted: Vec<usize> = sightings
            .iter()
            .copied()
            .filter(|&index| match &ops[index] {
                Op::Sighting { key, .. } => fresh.contains(key),
                _ => false,
            })
            .collect();
        for &index in &sightings {
            if let Op::Sighting { key, .. } = &ops[index]
                && !fresh.contains(key)
            {
                outcomes[index] = Outcome::Duplicate;
            }
        }
        for (index, id) in journal(&transaction, &ops, &accepted).await? {
            outcomes[index] = Outcome::Recorded(Some(id));
        }
        // Every session with a message waiting has a lease row, free until someone holds it,
        // so a replica looking for lapsed sessions finds it even if the one that took the
        // message in died before holding it.
        // Sorted: batches inserting the same keys in one order cannot deadlock.
        let sessions: std::collections::BTreeSet<&str> = accepted
            .iter()
            .filter_map(|&index| match &ops[index] {
                Op::Sighting { accepted: Some(entry), .. } => Some(entry.session_key.as_str()),
                _ => None,
            })
            .collect();
        if !sessions.is_empty() {
            let sessions: Vec<&str> = sessions.into_iter().collect();
            let statement = transaction
                .prepare_cached(
                    "INSERT INTO session_leases (key) SELECT k FROM unnest($1::text[]) AS k ON CONFLICT (key) DO NOTHING",
                )
                .await
                .map_err(pg_error)?;
            transaction.execute(&statement, &[&sessions]).await.map_err(pg_error)?;
        }
    }
    if !deliveries.is_empty() {
        let ids: Vec<String> =
            deliveries.iter().map(|(ids, _)| ids.iter().map(i64::to_string).collect::<Vec<_>>().join(",")).collect();
        let bodies: Vec<&str> = deliveries.iter().map(|(_, body)| body.as_str()).collect();
        // Fenced: a record about messages of a session this replica no longer holds is not
        // written (its new holder decides what the reply becomes).
        let statement = transaction
            .prepare_cached(
                "INSERT INTO delivery_records (message_ids, body) \
                 SELECT ids, body FROM ( \
                     SELECT COALESCE(string_to_array(NULLIF(ids, ''), ',')::bigint[], '{}') AS ids, body, ord \
                     FROM unnest($1::text[], $2::text[]) WITH ORDINALITY AS d(ids, body, ord)) AS d \
                 WHERE $3::text IS NULL OR NOT EXISTS ( \
                     SELECT 1 FROM inbound_journal j WHERE j.id = ANY(d.ids) AND NOT EXISTS ( \
                         SELECT 1 FROM session_leases l WHERE l.key = j.session_key AND l.owner = $3 \
                         AND l.expires_at > now())) \
                 ORDER BY ord",
            )
            .await
            .map_err(pg_error)?;
        let written = transaction.execute(&statement, &[&ids, &bodies, &fencing]).await.map_err(pg_error)?;
        fenced += deliveries.len().saturating_sub(usize::try_from(written).unwrap_or(0));
    }
    if !answered.is_empty() {
        // Fenced as above: only the holder of a message's session marks it answered.
        let statement = transaction
            .prepare_cached(
                "UPDATE inbound_journal j SET answered_at = $2 WHERE j.id = ANY($1) AND j.answered_at IS NULL \
                 AND ($3::text IS NULL OR EXISTS (SELECT 1 FROM session_leases l WHERE l.key = j.session_key \
                     AND l.owner = $3 AND l.expires_at > now()))",
            )
            .await
            .map_err(pg_error)?;
        transaction
            .execute(&statement, &[&answered, &Utc::now().timestamp_millis(), &fencing])
            .await
            .map_err(pg_error)?;
    }
    transaction.commit().await.map_err(pg_error)?;
    if fenced > 0 {
        metrics().lease_count(LeaseEvent::FencedWrite, fenced);
        tracing::warn!(records = fenced, "delivery records refused: their session's lease passed to another replica");
    }
    Ok(outcomes)
}

/// Upserts the sightings `indexes` of `ops`; returns the keys that were not seen inside
/// their window (now recorded).
async fn record_sightings(
    transaction: &Transaction<'_>,
    ops: &[Op],
    indexes: &[usize],
) -> Result<HashSet<Key>, StorageError> {
    // Upserted in key order, so two replicas' batches over the same keys cannot deadlock.
    let mut indexes = indexes.to_vec();
    indexes.sort_by(|a, b| match (&ops[*a], &ops[*b]) {
        (Op::Sighting { key: left, .. }, Op::Sighting { key: right, .. }) => left.cmp(right),
        _ => std::cmp::Ordering::Equal,
    });
    let mut columns: [Vec<&str>; 5] = Default::default();
    let mut seen_at = Vec::with_capacity(indexes.len());
    // One cutoff per batch: the earliest. A sighting between two callers' cutoffs (a
    // microsecond apart) then counts as seen for both.
    let mut cutoff = i64::MAX;
    for &index in &indexes {
        if let Op::Sighting { key, at, cutoff: own, .. } = &ops[index] {
            for (column, value) in
                columns.iter_mut().zip([&key.channel, &key.account_id, &key.chat_id, &key.thread_id, &key.message_id])
            {
                column.push(value.as_str());
            }
            seen_at.push(*at);
            cutoff = cutoff.min(*own);
        }
    }
    let statement = transaction
        .prepare_cached(
            "INSERT INTO inbound_seen AS s (channel, account_id, chat_id, thread_id, message_id, seen_at) \
             SELECT * FROM unnest($1::text[], $2::text[], $3::text[], $4::text[], $5::text[], $6::bigint[]) \
             ON CONFLICT (channel, account_id, chat_id, thread_id, message_id) \
             DO UPDATE SET seen_at = excluded.seen_at WHERE s.seen_at <= $7 \
             RETURNING channel, account_id, chat_id, thread_id, message_id",
        )
        .await
        .map_err(pg_error)?;
    let [channels, accounts, chats, threads, messages] = &columns;
    let rows = transaction
        .query(&statement, &[channels, accounts, chats, threads, messages, &seen_at, &cutoff])
        .await
        .map_err(pg_error)?;
    Ok(rows
        .iter()
        .map(|row| Key {
            channel: row.get(0),
            account_id: row.get(1),
            chat_id: row.get(2),
            thread_id: row.get(3),
            message_id: row.get(4),
        })
        .collect())
}

/// Journals the accepted messages of the sightings `indexes`, in that order; returns each
/// one's id by its index in `ops`.
async fn journal(
    transaction: &Transaction<'_>,
    ops: &[Op],
    indexes: &[usize],
) -> Result<Vec<(usize, i64)>, StorageError> {
    let accepted: Vec<(usize, &Key, &Accepted)> = indexes
        .iter()
        .filter_map(|&index| match &ops[index] {
            Op::Sighting { key, accepted: Some(entry), .. } => Some((index, key, entry)),
            _ => None,
        })
        .collect();
    if accepted.is_empty() {
        return Ok(Vec::new());
    }
    fn column<'a>(
        accepted: &[(usize, &'a Key, &'a Accepted)],
        part: fn(&'a Key, &'a Accepted) -> &'a str,
    ) -> Vec<&'a str> {
        accepted.iter().map(|(_, key, entry)| part(key, entry)).collect()
    }
    let channels = column(&accepted, |key, _| &key.channel);
    let accounts = column(&accepted, |key, _| &key.account_id);
    let chats = column(&accepted, |key, _| &key.chat_id);
    let threads = column(&accepted, |key, _| &key.thread_id);
    let messages = column(&accepted, |key, _| &key.message_id);
    let sessions = column(&accepted, |_, entry| &entry.session_key);
    let prompts = column(&accepted, |_, entry| &entry.prompt);
    let bodies = column(&accepted, |_, entry| &entry.message);
    let enqueued: Vec<i64> = accepted.iter().map(|(_, _, entry)| entry.enqueued_at).collect();
    let statement = transaction
        .prepare_cached(
            "INSERT INTO inbound_journal \
             (channel, account_id, chat_id, thread_id, message_id, session_key, prompt, message, enqueued_at) \
             SELECT channel, account_id, chat_id, thread_id, message_id, session_key, prompt, message, enqueued_at \
             FROM unnest($1::text[], $2::text[], $3::text[], $4::text[], $5::text[], $6::text[], $7::text[], \
                         $8::text[], $9::bigint[]) WITH ORDINALITY \
                  AS m(channel, account_id, chat_id, thread_id, message_id, session_key, prompt, message, \
                       enqueued_at, ord) \
             ORDER BY ord \
             RETURNING id, channel, account_id, chat_id, thread_id, message_id",
        )
        .await
        .map_err(pg_error)?;
    let rows = transaction
        .query(
            &statement,
            &[&channels, &accounts, &chats, &threads, &messages, &sessions, &prompts, &bodies, &enqueued],
        )
        .await
        .map_err(pg_error)?;
    let ids: HashMap<Key, i64> = rows
        .iter()
        .map(|row| {
            let key = Key {
                channel: row.get(1),
                account_id: row.get(2),
                chat_id: row.get(3),
                thread_id: row.get(4),
                message_id: row.get(5),
            };
            (key, row.get(0))
        })
        .collect();
    Ok(accepted.iter().filter_map(|(index, key, _)| ids.get(*key).map(|id| (*index, *id))).collect())
}

/// The unanswered messages (of the sessions `keys`, or all), oldest first, and the delivery
/// records of their replies in the order written.
pub(super) async fn read_unanswered(backend: &PgBackend, keys: Option<&[String]>) -> Result<Unanswered, StorageError> {
    let client = backend.client().await?;
    let messages = client
        .query(
            "SELECT id, session_key, prompt, message, enqueued_at FROM inbound_journal \
             WHERE answered_at IS NULL AND ($1::text[] IS NULL OR session_key = ANY($1)) ORDER BY id",
            &[&keys],
        )
        .await
        .map_err(pg_error)?
        .iter()
        .map(|row| LoggedMessage {
            seq: row.get(0),
            entry: Accepted {
                session_key: row.get(1),
                prompt: row.get(2),
                message: row.get(3),
                enqueued_at: row.get(4),
            },
        })
        .collect();
    let deliveries = client
        .query(
            "SELECT message_ids, body FROM delivery_records d WHERE EXISTS (SELECT 1 FROM inbound_journal j \
             WHERE j.id = ANY(d.message_ids) AND j.answered_at IS NULL \
             AND ($1::text[] IS NULL OR j.session_key = ANY($1))) ORDER BY id",
            &[&keys],
        )
        .await
        .map_err(pg_error)?
        .iter()
        .map(|row| LoggedDelivery { seqs: row.get(0), body: row.get(1) })
        .collect();
    Ok(Unanswered { messages, deliveries })
}

#[async_trait]
impl InboundStore for PgInbound {
    async fn seen(&self, key: &MessageKey<'_>, cutoff: i64) -> Result<bool, StorageError> {
        let client = self.backend.client().await?;
        let statement = client
            .prepare_cached(
                "SELECT EXISTS (SELECT 1 FROM inbound_seen WHERE channel = $1 AND account_id = $2 AND chat_id = $3 \
                 AND thread_id = $4 AND message_id = $5 AND seen_at > $6)",
            )
            .await
            .map_err(pg_error)?;
        let row = client
            .query_one(
                &statement,
                &[&key.channel, &key.account_id, &key.chat_id, &key.thread_id, &key.message_id, &cutoff],
            )
            .await
            .map_err(pg_error)?;
        Ok(row.get(0))
    }

    async fn record_seen(&self, key: &MessageKey<'_>, at: i64, cutoff: i64) -> Result<bool, StorageError> {
        let outcome = self.writes.submit(Op::Sighting { key: key.into(), at, cutoff, accepted: None }).await?;
        Ok(outcome != Outcome::Duplicate)
    }

    async fn accept(
        &self,
        key: &MessageKey<'_>,
        at: i64,
        cutoff: i64,
        entry: &Accepted,
    ) -> Result<Option<i64>, StorageError> {
        let op = Op::Sighting { key: key.into(), at, cutoff, accepted: Some(entry.clone()) };
        match self.writes.submit(op).await? {
            Outcome::Recorded(id) => Ok(id),
            Outcome::Duplicate => Ok(None),
        }
    }

    async fn answered(&self, ids: &[i64]) -> Result<(), StorageError> {
        if ids.is_empty() {
            return Ok(());
        }
        self.writes.submit(Op::Answered { ids: ids.to_vec() }).await.map(|_| ())
    }

    async fn record_delivery(&self, ids: &[i64], body: String, answered: bool) -> Result<(), StorageError> {
        self.writes.submit(Op::Delivery { ids: ids.to_vec(), body, answered }).await.map(|_| ())
    }

    async fn unanswered(&self) -> Result<Unanswered, StorageError> {
        read_unanswered(&self.backend, None).await
    }

    async fn pending_count(&self) -> Result<usize, StorageError> {
        let client = self.backend.client().await?;
        let row = client
            .query_one("SELECT COUNT(*) FROM inbound_journal WHERE answered_at IS NULL", &[])
            .await
            .map_err(pg_error)?;
        Ok(usize::try_from(row.get::<_, i64>(0)).unwrap_or(0))
    }

    async fn next_id(&self) -> Result<i64, StorageError> {
        let client = self.backend.client().await?;
        let row =
            client.query_one("SELECT COALESCE(MAX(id), 0) + 1 FROM inbound_journal", &[]).await.map_err(pg_error)?;
        Ok(row.get(0))
    }
}
