//! Session leases with several replicas in one process, each with a pool of its own on one
//! real PostgreSQL database: who may hold a session, how it passes on when a holder stops
//! renewing, and that the old holder's writes are refused from then on.

use std::collections::HashSet;
use std::sync::Arc;
use std::time::Duration;

use chrono::Utc;

use super::PgBackend;
use crate::config::ResetConfig;
use crate::state::Stores;
use crate::state::inbound::{Accepted, MessageKey};
use crate::state::leases::{Hold, LeaseTiming};
use crate::types::{ChatMessage, Usage};

/// Short leases, so a lapse takes a second or two.
const TIMING: LeaseTiming = LeaseTiming { lease: Duration::from_millis(1500), renew: Duration::from_millis(500) };

async fn replica(url: &str) -> Stores {
    let backend = PgBackend::connect(url, 4).await.expect("connect");
    backend.migrate().await.expect("migrate");
    let mut stores = Stores::postgres(&backend);
    stores.start_leases(TIMING);
    stores
}

fn leases(stores: &Stores) -> &Arc<dyn crate::state::leases::LeaseStore> {
    stores.leases.as_ref().expect("leases started")
}

fn key(message_id: &str) -> MessageKey<'_> {
    MessageKey { channel: "slack", account_id: "default", chat_id: "C1", thread_id: "", message_id }
}

fn entry(session: &str) -> Accepted {
    Accepted { session_key: session.into(), prompt: "p".into(), message: "{}".into(), enqueued_at: 0 }
}

/// Waits out the lease of a replica that stopped renewing, by the database's clock.
async fn lapse() {
    tokio::time::sleep(TIMING.lease + Duration::from_millis(300)).await;
}

#[tokio::test]
async fn one_replica_at_a_time_holds_a_session_and_a_lapse_passes_it_on_with_a_new_epoch() {
    let Some(database) = ferry_fakes::test_database().await else { return };
    let (a, b) = (replica(database.url()).await, replica(database.url()).await);
    assert_ne!(leases(&a).replica_id(), leases(&b).replica_id());
    assert_eq!(leases(&a).hold("s").await.unwrap(), Hold::Taken { epoch: 1 });
    assert_eq!(leases(&a).hold("s").await.unwrap(), Hold::Kept);
    assert_eq!(leases(&b).hold("s").await.unwrap(), Hold::Elsewhere);
    // Renewed, A keeps it past the lease's length.
    for _ in 0..4 {
        tokio::time::sleep(TIMING.renew).await;
        assert_eq!(leases(&a).renew().await.unwrap().lost, Vec::<String>::new());
    }
    assert_eq!(leases(&b).hold("s").await.unwrap(), Hold::Elsewhere);
    // A stops renewing (paused, cut off): it stops counting itself the holder before the
    // database lets B take over.
    tokio::time::sleep(TIMING.local_validity()).await;
    assert!(!leases(&a).holds("s"), "A gave up on its own first");
    assert!(leases(&a).expired_locally());
    lapse().await;
    assert_eq!(leases(&b).hold("s").await.unwrap(), Hold::Taken { epoch: 2 });
    let renewed = leases(&a).renew().await.unwrap();
    assert_eq!(renewed.lost, ["s"], "A learns it lost the session");
}

#[tokio::test]
async fn a_replica_that_lost_a_session_cannot_write_its_transcript_journal_or_ledger() {
    let Some(database) = ferry_fakes::test_database().await else { return };
    let (a, b) = (replica(database.url()).await, replica(database.url()).await);
    let session = "agent:main:slack:channel:c1";
    let id = a.inbound.accept(&key("m1"), 10, 0, &entry(session)).await.unwrap().unwrap();
    assert!(matches!(leases(&a).hold(session).await.unwrap(), Hold::Taken { .. }));
    let reset = ResetConfig::default();
    a.sessions.open_run(session, Utc::now(), &reset, "run-a").await.expect("A runs the session");
    // B may not touch a session A holds.
    let refused = b.sessions.open_run(session, Utc::now(), &reset, "run-b").await.unwrap_err();
    assert!(refused.is_fenced(), "{refused}");

    lapse().await;
    assert!(matches!(leases(&b).hold(session).await.unwrap(), Hold::Taken { epoch: 2 }));
    b.sessions.open_run(session, Utc::now(), &reset, "run-b").await.expect("B runs it now");
    // A, the zombie, finishes its run: nothing it writes lands.
    let said = [ChatMessage::user("q"), ChatMessage::assistant("from a zombie", vec![])];
    let error = a.sessions.close_run(session, "run-a", &said, Usage::default()).await.unwrap_err();
    assert!(error.is_fenced(), "{error}");
    a.inbound.record_delivery(&[id], "{\"zombie\":true}".into(), true).await.unwrap();
    a.inbound.answered(&[id]).await.unwrap();
    let left = b.inbound.unanswered().await.unwrap();
    assert_eq!(left.messages.iter().map(|m| m.seq).collect::<Vec<_>>(), [id], "still waiting for B");
    assert!(left.deliveries.is_empty(), "the zombie's record was refused");
    // B's own writes go through.
    b.sessions.close_run(session, "run-b", &[ChatMessage::user("q")], Usage::default()).await.unwrap();
    b.inbound.record_delivery(&[id], "{\"done\":true}".into(), true).await.unwrap();
    assert!(b.inbound.unanswered().await.unwrap().messages.is_empty());
}

#[tokio::test]
async fn lapsed_sessions_with_messages_waiting_are_taken_by_exactly_one_replica() {
    let Some(database) = ferry_fakes::test_database().await else { return };
    let (a, b, c) = (replica(database.url()).await, replica(database.url()).await, replica(database.url()).await);
    let sessions: Vec<String> = (0..12).map(|n| format!("agent:main:s{n}")).collect();
    for (n, session) in sessions.iter().enumerate() {
        let id = format!("m{n}");
        a.inbound.accept(&key(&id), 10, 0, &entry(session)).await.unwrap().unwrap();
    }
    // Nobody holds them yet: every one is up for claiming, and each goes to one replica.
    let (ta, tb, tc) =
        tokio::join!(leases(&a).claim_waiting(64), leases(&b).claim_waiting(64), leases(&c).claim_waiting(64));
    let claimed: Vec<(String, i64)> = [ta.unwrap(), tb.unwrap(), tc.unwrap()].concat();
    let keys: HashSet<&str> = claimed.iter().map(|(key, _)| key.as_str()).collect();
    assert_eq!(claimed.len(), sessions.len(), "{claimed:?}");
    assert_eq!(keys.len(), sessions.len(), "no session claimed twice");
    assert!(leases(&a).claim_waiting(64).await.unwrap().is_empty(), "held sessions are not up for claiming");
    let waiting = leases(&b).waiting(&sessions).await.unwrap();
    assert_eq!(waiting.messages.len(), sessions.len());
}

#[tokio::test]
async fn a_session_is_given_back_only_once_nothing_waits_for_it() {
    let Some(database) = ferry_fakes::test_database().await else { return };
    let (a, b) = (replica(database.url()).await, replica(database.url()).await);
    let session = "agent:main:main";
    let id = a.inbound.accept(&key("m1"), 10, 0, &entry(session)).await.unwrap().unwrap();
    assert!(matches!(leases(&a).hold(session).await.unwrap(), Hold::Taken { epoch: 1 }));
    assert!(!leases(&a).release(session).await.unwrap(), "a message waits: kept");
    a.inbound.answered(&[id]).await.unwrap();
    assert!(leases(&a).release(session).await.unwrap());
    assert!(!leases(&a).holds(session));
    assert_eq!(leases(&b).hold(session).await.unwrap(), Hold::Taken { epoch: 2 }, "epochs never go back");
}

/// Many replicas racing to hold, release and take over a few sessions: every change of
/// hands has an epoch of its own, and they only grow.
#[tokio::test]
async fn racing_replicas_never_share_an_epoch() {
    let Some(database) = ferry_fakes::test_database().await else { return };
    let mut replicas = Vec::new();
    for _ in 0..4 {
        replicas.push(replica(database.url()).await);
    }
    let taken = Arc::new(std::sync::Mutex::new(Vec::new()));
    let tasks = replicas.into_iter().enumerate().map(|(index, stores)| {
        let taken = taken.clone();
        tokio::spawn(async move {
            let leases = stores.leases.clone().expect("leases");
            for round in 0..40 {
                let session = format!("agent:main:s{}", (round + index) % 3);
                if let Hold::Taken { epoch } = leases.hold(&session).await.unwrap() {
                    taken.lock().unwrap().push((session.clone(), epoch, index));
                }
                if round % 2 == 0 {
                    leases.release(&session).await.unwrap();
                }
            }
        })
    });
    for task in futures::future::join_all(tasks).await {
        task.unwrap();
    }
    let taken = taken.lock().unwrap();
    let epochs: HashSet<(&str, i64)> = taken.iter().map(|(key, epoch, _)| (key.as_str(), *epoch)).collect();
    assert_eq!(epochs.len(), taken.len(), "an epoch was handed out twice: {taken:?}");
    assert!(taken.len() > 10, "the sessions changed hands: {taken:?}");
}

/// A replica whose renewals stalled past its own reckoning of the lease (the database out
/// of reach for a moment, shorter than the lease) refused its runs' writes meanwhile: when
/// the database answers again, neither a renewal nor a new message revives the lease under
/// the same epoch. The renewal reports it lost and gives it back, so it is taken over at once
/// (by this replica too) with a new epoch, and what the fenced runs left is picked up.
#[tokio::test]
async fn a_lease_that_lapsed_here_is_not_revived_but_given_back_for_a_takeover() {
    let Some(database) = ferry_fakes::test_database().await else { return };
    let (a, b) = (replica(database.url()).await, replica(database.url()).await);
    let session = "agent:main:telegram:direct:5";
    a.inbound.accept(&key("m1"), 10, 0, &entry(session)).await.unwrap().unwrap();
    assert_eq!(leases(&a).hold(session).await.unwrap(), Hold::Taken { epoch: 1 });
    // No renewal: past A's own reckoning, short of the lease in the database.
    tokio::time::sleep(TIMING.local_validity() + Duration::from_millis(100)).await;
    assert!(!leases(&a).holds(session));
    let refused = a.sessions.open_run(session, Utc::now(), &ResetConfig::default(), "run-a").await.unwrap_err();
    assert!(refused.is_fenced(), "{refused}");
    assert_eq!(leases(&a).hold(session).await.unwrap(), Hold::Elsewhere, "a new message does not revive it");
    assert!(!leases(&a).holds(session));
    let renewed = leases(&a).renew().await.unwrap();
    assert_eq!(renewed.lost, [session], "the renewal reports it lost instead of renewing it");
    assert!(!leases(&a).holds(session));
    // Given back, not left to run out: taken at once, and never under the old epoch.
    let claimed = leases(&b).claim_waiting(64).await.unwrap();
    assert_eq!(claimed, [(session.to_owned(), 2)]);
    assert_eq!(leases(&a).hold(session).await.unwrap(), Hold::Elsewhere);
}
