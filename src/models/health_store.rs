//! Auth profiles' cooldowns in the state database, so a restart inside a cooldown does not
//! try a dead or rate-limited key again.

use chrono::{DateTime, Utc};
use rusqlite::params;

use super::profiles::{FailoverReason, ProfileHealth};
use crate::state::Database;

/// The `auth_profile_health` table.
#[derive(Clone)]
pub struct HealthStore {
    database: Database,
}

#[derive(Debug, thiserror::Error)]
#[error("auth profile health: {0}")]
pub struct HealthStoreError(#[from] rusqlite::Error);

impl HealthStore {
    pub fn new(database: Database) -> Self {
        Self { database }
    }

    /// Every profile's last recorded health.
    pub async fn load(&self) -> Result<Vec<ProfileHealth>, HealthStoreError> {
        self.database.read(|connection| {
            let mut statement = connection.prepare(
                "SELECT provider, profile, cooling_until, reason, error_count, last_used FROM auth_profile_health",
            )?;
            let rows = statement.query_map([], |row| {
                Ok(ProfileHealth {
                    provider: row.get(0)?,
                    profile: row.get(1)?,
                    cooling_until: time(row.get(2)?),
                    reason: row.get::<_, Option<String>>(3)?.as_deref().and_then(reason),
                    error_count: row.get(4)?,
                    last_used: time(row.get(5)?),
                })
            })?;
            Ok(rows.collect::<Result<Vec<_>, _>>()?)
        })
    }

    /// Records one profile's health, replacing what was there.
    pub async fn save(&self, health: ProfileHealth) -> Result<(), HealthStoreError> {
        self.database
            .write(move |connection| {
                connection.execute(
                    "INSERT INTO auth_profile_health (provider, profile, cooling_until, reason, error_count, last_used)
                     VALUES (?1, ?2, ?3, ?4, ?5, ?6)
                     ON CONFLICT (provider, profile) DO UPDATE SET cooling_until = excluded.cooling_until,
                         reason = excluded.reason, error_count = excluded.error_count, last_used = excluded.last_used",
                    params![
                        health.provider,
                        health.profile,
                        health.cooling_until.map(|at| at.to_rfc3339()),
                        health.reason.map(FailoverReason::as_str),
                        health.error_count,
                        health.last_used.map(|at| at.to_rfc3339()),
                    ],
                )?;
                Ok(())
            })
            .await
    }
}

/// A stored time; an unreadable one counts as none (the profile is then simply ready).
fn time(text: Option<String>) -> Option<DateTime<Utc>> {
    text.and_then(|text| DateTime::parse_from_rfc3339(&text).ok()).map(|at| at.with_timezone(&Utc))
}

fn reason(text: &str) -> Option<FailoverReason> {
    FailoverReason::ALL.into_iter().find(|reason| reason.as_str() == text)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn health_round_trips_and_a_save_replaces_the_row() {
        let dir = tempfile::tempdir().unwrap();
        let database = Database::open(dir.path()).await.unwrap();
        let store = HealthStore::new(database.clone());
        let until = Utc::now() + chrono::Duration::minutes(5);
        let row = ProfileHealth {
            provider: "openai".into(),
            profile: "a".into(),
            cooling_until: Some(until),
            reason: Some(FailoverReason::RateLimit),
            error_count: 2,
            last_used: None,
        };
        store.save(row.clone()).await.unwrap();
        let loaded = store.load().await.unwrap().pop().unwrap();
        assert_eq!(loaded.reason, Some(FailoverReason::RateLimit));
        assert_eq!(loaded.cooling_until.map(|at| at.timestamp_millis()), Some(until.timestamp_millis()));
        store.save(ProfileHealth { cooling_until: None, reason: None, error_count: 0, ..row }).await.unwrap();
        let cleared = store.load().await.unwrap();
        assert_eq!(cleared.len(), 1);
        assert_eq!(cleared[0].cooling_until, None);
        database.close().await;
    }
}
