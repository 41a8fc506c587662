//! Pairing codes and approvals, and auth profiles' cooldowns.

use std::sync::Arc;

use chrono::{DateTime, TimeDelta, Utc};

use super::{Harness, conformance};
use crate::state::health::{FailoverReason, ProfileHealth};
use crate::routing::clock::ManualClock;
use crate::routing::pairing::{MAX_PENDING_PER_CHANNEL, PairingError, PairingRequest, PairingStore, PendingPairing};

fn start() -> DateTime<Utc> {
    DateTime::from_timestamp(1_750_000_000, 0).unwrap()
}

fn issued(request: PairingRequest) -> PendingPairing {
    match request {
        PairingRequest::Issued(pending) => pending,
        other => panic!("expected a new code, got {other:?}"),
    }
}

async fn codes_are_issued_once_capped_per_channel_and_approved_once(harness: &Harness) {
    let clock = ManualClock::new(start());
    let store = PairingStore::new(harness.stores.pairing.clone(), Arc::new(clock.clone()));
    let first = issued(store.request("telegram", "1", Some("Ann")).await.unwrap());
    assert_eq!(first.expires_at - first.created_at, TimeDelta::hours(1));
    clock.advance(TimeDelta::minutes(1));
    assert_eq!(store.request("telegram", "1", None).await.unwrap(), PairingRequest::Existing(first.clone()));
    for sender in 2..=MAX_PENDING_PER_CHANNEL {
        issued(store.request("telegram", &sender.to_string(), None).await.unwrap());
    }
    assert_eq!(store.request("telegram", "99", None).await.unwrap(), PairingRequest::TooManyPending);
    issued(store.request("telegram:work", "99", None).await.unwrap());
    assert_eq!(store.list().await.unwrap().len(), 4);

    let approved = store.approve("telegram", &first.code.to_lowercase()).await.unwrap();
    assert_eq!((approved.sender_id.as_str(), approved.sender_name.as_deref()), ("1", Some("Ann")));
    assert!(store.is_approved("telegram", "1").await.unwrap());
    assert!(!store.is_approved("telegram:work", "1").await.unwrap(), "approvals are per scope");
    let again = store.approve("telegram", &first.code).await.unwrap_err();
    assert!(matches!(again, PairingError::UnknownCode { .. }), "{again}");
    // The approval is shared state: another process sees it.
    let reopened = harness.reopen().await;
    assert!(PairingStore::new(reopened.pairing, Arc::new(clock)).is_approved("telegram", "1").await.unwrap());
}

async fn an_expired_code_is_refused_and_makes_room(harness: &Harness) {
    let clock = ManualClock::new(start());
    let store = PairingStore::new(harness.stores.pairing.clone(), Arc::new(clock.clone()));
    let old = issued(store.request("discord", "42", None).await.unwrap());
    clock.advance(TimeDelta::hours(1));
    let error = store.approve("discord", &old.code).await.unwrap_err();
    assert!(matches!(error, PairingError::Expired { .. }), "{error}");
    assert!(store.list().await.unwrap().is_empty());
    let renewed = issued(store.request("discord", "42", None).await.unwrap());
    assert_eq!(renewed.created_at, start() + TimeDelta::hours(1));
}

async fn cooldowns_round_trip_and_a_save_replaces_the_row(harness: &Harness) {
    let health = &harness.stores.health;
    let until = start() + TimeDelta::minutes(5);
    let row = ProfileHealth {
        provider: "openai".into(),
        profile: "a".into(),
        cooling_until: Some(until),
        reason: Some(FailoverReason::RateLimit),
        error_count: 2,
        last_used: Some(start()),
    };
    health.save(row.clone()).await.unwrap();
    let loaded = health.load().await.unwrap();
    assert_eq!(loaded.len(), 1);
    assert_eq!((loaded[0].reason, loaded[0].error_count), (Some(FailoverReason::RateLimit), 2));
    assert_eq!(loaded[0].cooling_until, Some(until));
    health.save(ProfileHealth { cooling_until: None, reason: None, error_count: 0, ..row }).await.unwrap();
    let reopened = harness.reopen().await;
    let cleared = reopened.health.load().await.unwrap();
    assert_eq!((cleared.len(), cleared[0].cooling_until, cleared[0].last_used), (1, None, Some(start())));
}

conformance!(
    codes_are_issued_once_capped_per_channel_and_approved_once,
    an_expired_code_is_refused_and_makes_room,
    cooldowns_round_trip_and_a_save_replaces_the_row,
);
