//! Auth profiles' cooldowns on PostgreSQL: one replica's 429 cools the key for all of them.

use async_trait::async_trait;

use super::{PgBackend, pg_error};
use crate::state::health::{FailoverReason, HealthBackend, HealthStoreError, ProfileHealth, reason, time};

/// [`HealthBackend`] on PostgreSQL: the `auth_profile_health` table.
#[derive(Debug, Clone)]
pub struct PgHealth {
    backend: PgBackend,
}

impl PgHealth {
    pub fn new(backend: PgBackend) -> Self {
        Self { backend }
    }
}

#[async_trait]
impl HealthBackend for PgHealth {
    async fn load(&self) -> Result<Vec<ProfileHealth>, HealthStoreError> {
        let client = self.backend.client().await?;
        let rows = client
            .query(
                "SELECT provider, profile, cooling_until, reason, error_count, last_used FROM auth_profile_health",
                &[],
            )
            .await
            .map_err(pg_error)?;
        Ok(rows
            .iter()
            .map(|row| ProfileHealth {
                provider: row.get(0),
                profile: row.get(1),
                cooling_until: time(row.get(2)),
                reason: row.get::<_, Option<String>>(3).as_deref().and_then(reason),
                error_count: u32::try_from(row.get::<_, i64>(4)).unwrap_or(u32::MAX),
                last_used: time(row.get(5)),
            })
            .collect())
    }

    async fn save(&self, health: ProfileHealth) -> Result<(), HealthStoreError> {
        let client = self.backend.client().await?;
        client
            .execute(
                "INSERT INTO auth_profile_health (provider, profile, cooling_until, reason, error_count, last_used)
                 VALUES ($1, $2, $3, $4, $5, $6)
                 ON CONFLICT (provider, profile) DO UPDATE SET cooling_until = excluded.cooling_until,
                     reason = excluded.reason, error_count = excluded.error_count, last_used = excluded.last_used",
                &[
                    &health.provider,
                    &health.profile,
                    &health.cooling_until.map(|at| at.to_rfc3339()),
                    &health.reason.map(FailoverReason::as_str),
                    &i64::from(health.error_count),
                    &health.last_used.map(|at| at.to_rfc3339()),
                ],
            )
            .await
            .map_err(pg_error)?;
        Ok(())
    }
}
