//! Pairing codes and approvals, through [`PairingBackend`](crate::state::pairing::PairingBackend)
//! itself: the clock and the code's lifetime are the caller's (`routing::pairing` adds them).

use chrono::{DateTime, TimeDelta, Utc};

use super::{Harness, conformance};
use crate::state::pairing::{CODE_LENGTH, MAX_PENDING_PER_CHANNEL, PairingError, PairingRequest, PendingPairing};

fn start() -> DateTime<Utc> {
    DateTime::from_timestamp(1_750_000_000, 0).unwrap()
}

/// What a caller asks for at `at`: a code valid for an hour.
fn wanted(channel: &str, sender: &str, name: Option<&str>, at: DateTime<Utc>) -> PendingPairing {
    PendingPairing {
        channel: channel.to_owned(),
        sender_id: sender.to_owned(),
        sender_name: name.map(str::to_owned),
        code: String::new(),
        created_at: at,
        expires_at: at + TimeDelta::hours(1),
    }
}

fn issued(request: PairingRequest) -> PendingPairing {
    match request {
        PairingRequest::Issued(pending) => pending,
        other => panic!("expected a new code, got {other:?}"),
    }
}

async fn codes_are_issued_once_capped_per_channel_and_approved_once(harness: &Harness) {
    let pairing = &harness.stores.pairing;
    let first = issued(pairing.request(wanted("telegram", "1", Some("Ann"), start())).await.unwrap());
    assert_eq!(first.code.len(), CODE_LENGTH);
    assert_eq!(first.expires_at - first.created_at, TimeDelta::hours(1));
    let later = start() + TimeDelta::minutes(1);
    assert_eq!(
        pairing.request(wanted("telegram", "1", None, later)).await.unwrap(),
        PairingRequest::Existing(first.clone())
    );
    for sender in 2..=MAX_PENDING_PER_CHANNEL {
        issued(pairing.request(wanted("telegram", &sender.to_string(), None, later)).await.unwrap());
    }
    assert_eq!(pairing.request(wanted("telegram", "99", None, later)).await.unwrap(), PairingRequest::TooManyPending);
    issued(pairing.request(wanted("telegram:work", "99", None, later)).await.unwrap());
    assert_eq!(pairing.pending(later).await.unwrap().len(), 4);

    let approved = pairing.approve("telegram", &first.code, later).await.unwrap();
    assert_eq!((approved.sender_id.as_str(), approved.sender_name.as_deref()), ("1", Some("Ann")));
    assert!(pairing.is_approved("telegram", "1").await.unwrap());
    assert!(!pairing.is_approved("telegram:work", "1").await.unwrap(), "approvals are per scope");
    let again = pairing.approve("telegram", &first.code, later).await.unwrap_err();
    assert!(matches!(again, PairingError::UnknownCode { .. }), "{again}");
    // The approval is shared state: another process sees it.
    assert!(harness.reopen().await.pairing.is_approved("telegram", "1").await.unwrap());
}

async fn an_expired_code_is_refused_and_makes_room(harness: &Harness) {
    let pairing = &harness.stores.pairing;
    let old = issued(pairing.request(wanted("discord", "42", None, start())).await.unwrap());
    let expired = start() + TimeDelta::hours(1);
    let error = pairing.approve("discord", &old.code, expired).await.unwrap_err();
    assert!(matches!(error, PairingError::Expired { .. }), "{error}");
    assert!(pairing.pending(expired).await.unwrap().is_empty());
    let renewed = issued(pairing.request(wanted("discord", "42", None, expired)).await.unwrap());
    assert_eq!(renewed.created_at, expired);
}

conformance!(codes_are_issued_once_capped_per_channel_and_approved_once, an_expired_code_is_refused_and_makes_room);
