//! `[state]`: where Ferry keeps what survives a restart. SQLite in the state directory for
//! one machine (the default); PostgreSQL for several replicas sharing one database.

use serde::{Deserialize, Serialize};

use super::Secret;
use super::error::Violation;

/// The environment variable `state.postgres_url` is read from when the file leaves it unset,
/// so the password need not be written to disk.
pub const DATABASE_URL_VAR: &str = "FERRY_DATABASE_URL";

/// `[state]`.
#[derive(Debug, Clone, PartialEq, Deserialize, Serialize)]
#[serde(default, deny_unknown_fields)]
pub struct StateConfig {
    pub backend: StateBackendKind,
    /// `postgres://user:password@host:port/database`, with `?sslmode=require` for TLS.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub postgres_url: Option<Secret>,
    /// Connections each process keeps open to PostgreSQL at most.
    pub pool_size: u32,
    /// How long a replica's hold on a session (or a Telegram poller, a Discord shard) lasts
    /// without renewal: after a replica dies, another takes over its sessions this long
    /// after its last renewal.
    pub lease_seconds: u64,
    /// How often a replica renews what it holds; at most a third of `lease_seconds`.
    pub renew_seconds: u64,
}

impl Default for StateConfig {
    fn default() -> Self {
        Self {
            backend: StateBackendKind::Sqlite,
            postgres_url: None,
            pool_size: 8,
            lease_seconds: 30,
            renew_seconds: 10,
        }
    }
}

/// Which database holds the state.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Deserialize, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum StateBackendKind {
    /// `ferry.db` and `inbound.log` in the state directory: one process.
    #[default]
    Sqlite,
    /// One PostgreSQL database, shared by every replica.
    Postgres,
}

impl StateBackendKind {
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Sqlite => "sqlite",
            Self::Postgres => "postgres",
        }
    }
}

/// A PostgreSQL backend needs a URL that parses; the URL itself is never echoed (it may
/// hold a password).
pub fn validate(state: &StateConfig) -> Result<(), Violation> {
    if state.renew_seconds.saturating_mul(3) > state.lease_seconds {
        return Err(Violation::new(
            "state.renew_seconds",
            format!(
                "must be at most a third of state.lease_seconds ({}), so a lease is renewed before it can lapse; got {}",
                state.lease_seconds, state.renew_seconds
            ),
        ));
    }
    let Some(url) = state.postgres_url.as_ref().filter(|url| !url.is_blank()) else {
        if state.backend == StateBackendKind::Postgres {
            return Err(Violation::new(
                "state.postgres_url",
                format!("required when state.backend = \"postgres\" (or set {DATABASE_URL_VAR})"),
            ));
        }
        return Ok(());
    };
    // `***` is what `ferry config show` prints for it: it says nothing about the URL.
    if url.expose() == super::REDACTED {
        return Ok(());
    }
    if !(url.expose().starts_with("postgres://") || url.expose().starts_with("postgresql://")) || !parses(url.expose())
    {
        return Err(Violation::new(
            "state.postgres_url",
            "not a PostgreSQL URL: expected postgres://user:password@host:port/database, optionally with \
             ?sslmode=disable|prefer|require",
        ));
    }
    Ok(())
}

/// Whether the driver reads the URL (its options, port and `sslmode`).
#[cfg(feature = "postgres")]
fn parses(url: &str) -> bool {
    url.parse::<tokio_postgres::Config>().is_ok()
}

/// Without the driver the URL is never used: a build without the feature refuses
/// `backend = "postgres"` instead (`config::features`).
#[cfg(not(feature = "postgres"))]
fn parses(_url: &str) -> bool {
    true
}
