//! Auth profiles' cooldowns.

use chrono::{DateTime, TimeDelta, Utc};

use super::{Harness, conformance};
use crate::state::health::{FailoverReason, ProfileHealth};

fn start() -> DateTime<Utc> {
    DateTime::from_timestamp(1_750_000_000, 0).unwrap()
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

conformance!(cooldowns_round_trip_and_a_save_replaces_the_row);
