//! The health store: auth profiles' cooldowns, kept so a restart inside a cooldown does not
//! try a dead or rate-limited key again, and replicas on one database share them. What a
//! cooldown is and when one starts is `models::profiles`'s; this is only what is kept.

use std::fmt;
use std::sync::Arc;

use async_trait::async_trait;
use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};

use super::StorageError;

/// Where profiles' health is kept: one row per provider and profile.
#[async_trait]
pub trait HealthBackend: Send + Sync {
    /// Every profile's last recorded health.
    async fn load(&self) -> Result<Vec<ProfileHealth>, HealthStoreError>;

    /// Records one profile's health, replacing what was there.
    async fn save(&self, health: ProfileHealth) -> Result<(), HealthStoreError>;
}

/// The health store a model router reads at start and writes on failover.
pub type HealthStore = Arc<dyn HealthBackend>;

#[derive(Debug, thiserror::Error)]
#[error("auth profile health: {0}")]
pub struct HealthStoreError(#[from] StorageError);

/// A stored time; an unreadable one counts as none (the profile is then simply ready).
pub fn time(text: Option<String>) -> Option<DateTime<Utc>> {
    text.and_then(|text| DateTime::parse_from_rfc3339(&text).ok()).map(|at| at.with_timezone(&Utc))
}

pub fn reason(text: &str) -> Option<FailoverReason> {
    FailoverReason::ALL.into_iter().find(|reason| reason.as_str() == text)
}

/// Why a profile failed in a way worth switching credentials for. Other failures (a bad
/// request, a refused prompt) would fail the same way with any key and are not recorded.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum FailoverReason {
    /// 429: the key's rate limit.
    RateLimit,
    /// 529 or an `overloaded` error: the provider is busy.
    Overloaded,
    /// 401/403: the key is rejected.
    Auth,
    /// 402 or `insufficient_quota`: the account behind the key cannot pay.
    Billing,
    /// A stall, a connection failure or a 5xx.
    Timeout,
}

impl FailoverReason {
    pub const ALL: [FailoverReason; 5] = [
        FailoverReason::RateLimit,
        FailoverReason::Overloaded,
        FailoverReason::Auth,
        FailoverReason::Billing,
        FailoverReason::Timeout,
    ];

    /// The name used in persisted rows, logs and metrics labels (the serde name).
    pub fn as_str(self) -> &'static str {
        match self {
            FailoverReason::RateLimit => "rate_limit",
            FailoverReason::Overloaded => "overloaded",
            FailoverReason::Auth => "auth",
            FailoverReason::Billing => "billing",
            FailoverReason::Timeout => "timeout",
        }
    }
}

impl fmt::Display for FailoverReason {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// One profile's health, as persisted: the row [`ProfileBook::mark_failure`] and
/// [`ProfileBook::mark_success`] hand back and [`ProfileBook::restore`] takes.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ProfileHealth {
    pub provider: String,
    /// The operator's id for the credential, never key material.
    pub profile: String,
    /// The profile is not tried before this (unless every profile is cooling and the caller
    /// chooses to). `None`, or a time in the past, means ready.
    pub cooling_until: Option<DateTime<Utc>>,
    /// The failure behind the cooldown; kept after the cooldown ends (for `/status`) until a
    /// success. A cooldown without a reason is not honoured: it cannot come from this module.
    pub reason: Option<FailoverReason>,
    /// Consecutive failure incidents since the last success; sets the next cooldown's length.
    pub error_count: u32,
    /// When a run last picked this profile, for least-recently-used rotation.
    pub last_used: Option<DateTime<Utc>>,
}
