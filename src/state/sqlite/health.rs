//! [`HealthBackend`] on the SQLite state database: the `auth_profile_health` table.

use async_trait::async_trait;
use rusqlite::params;

use super::Database;
use crate::state::health::{FailoverReason, HealthBackend, HealthStoreError, ProfileHealth, reason, time};

impl From<rusqlite::Error> for HealthStoreError {
    fn from(error: rusqlite::Error) -> Self {
        crate::state::StorageError::from(error).into()
    }
}

/// Auth profiles' health in `ferry.db`.
#[derive(Clone)]
pub struct SqliteHealth {
    database: Database,
}

impl SqliteHealth {
    pub fn new(database: Database) -> Self {
        Self { database }
    }
}

#[async_trait]
impl HealthBackend for SqliteHealth {
    async fn load(&self) -> Result<Vec<ProfileHealth>, HealthStoreError> {
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

    async fn save(&self, health: ProfileHealth) -> Result<(), HealthStoreError> {
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

#[cfg(test)]
mod tests {
    use chrono::Utc;

    use super::*;

    #[tokio::test]
    async fn health_round_trips_and_a_save_replaces_the_row() {
        let dir = tempfile::tempdir().unwrap();
        let database = Database::open(dir.path()).await.unwrap();
        let store = SqliteHealth::new(database.clone());
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
