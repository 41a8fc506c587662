//! The sessions an agent's `sessions_list` tool sees, read from the session store.

use std::sync::Arc;

use async_trait::async_trait;

use crate::agent::tools::{SessionCatalog, SessionSummary};
use crate::config::SessionsVisibility;
use crate::state::sessions::{Session, SessionStore, StoreError};

/// The catalog an agent's `sessions_list` reads under `sessions_visibility`: every agent's
/// sessions, or only its own.
pub fn catalog_for(
    store: Arc<dyn SessionStore>,
    agent: &str,
    visibility: SessionsVisibility,
) -> Arc<dyn SessionCatalog> {
    match visibility {
        SessionsVisibility::All => Arc::new(EverySession { store }),
        SessionsVisibility::Agent => Arc::new(AgentSessions { store, agent: agent.to_owned() }),
    }
}

/// Every agent's sessions (`sessions_visibility = "all"`).
struct EverySession {
    store: Arc<dyn SessionStore>,
}

#[async_trait]
impl SessionCatalog for EverySession {
    async fn list(&self, limit: usize) -> Vec<SessionSummary> {
        summaries(self.store.list(limit).await)
    }
}

/// One agent's sessions (`sessions_visibility = "agent"`).
struct AgentSessions {
    store: Arc<dyn SessionStore>,
    agent: String,
}

#[async_trait]
impl SessionCatalog for AgentSessions {
    async fn list(&self, limit: usize) -> Vec<SessionSummary> {
        summaries(self.store.list_of_agent(&self.agent, limit).await)
    }
}

fn summaries(listed: Result<Vec<Session>, StoreError>) -> Vec<SessionSummary> {
    match listed {
        Ok(sessions) => sessions
            .into_iter()
            .map(|s| SessionSummary {
                key: s.key,
                updated_at: s.updated_at,
                input_tokens: s.usage.input_tokens,
                output_tokens: s.usage.output_tokens,
            })
            .collect(),
        Err(error) => {
            tracing::warn!(%error, "cannot list sessions for the sessions_list tool");
            Vec::new()
        }
    }
}

#[cfg(test)]
mod tests {
    use chrono::Utc;

    use super::*;
    use crate::config::{ResetConfig, ResetMode};
    use crate::state::conformance::{Harness, conformance};

    const DAILY: ResetConfig = ResetConfig { mode: ResetMode::Daily, at_hour: 4, idle_minutes: 0 };

    async fn an_agents_catalog_lists_only_its_own_sessions(harness: &Harness) {
        let store = &harness.stores.sessions;
        let keys = [
            "agent:main:main",
            "agent:helper:main",
            "agent:helper:slack:channel:c1",
            "agent:help:main",
            "agent:helper_x:main",
        ];
        for (offset, key) in keys.iter().enumerate() {
            let at = Utc::now() + chrono::Duration::seconds(offset as i64);
            store.resolve(key, at, &DAILY).await.unwrap();
        }
        let shared = store.clone();
        let helper: Vec<String> = catalog_for(shared.clone(), "helper", SessionsVisibility::Agent)
            .list(10)
            .await
            .into_iter()
            .map(|summary| summary.key)
            .collect();
        assert_eq!(helper, ["agent:helper:slack:channel:c1", "agent:helper:main"], "not help's, not helper_x's");
        assert_eq!(store.list_of_agent("helper", 1).await.unwrap().len(), 1, "the limit holds");
        let every = catalog_for(shared, "helper", SessionsVisibility::All).list(10).await;
        assert_eq!(every.len(), keys.len(), "the whole store sees every agent's");
    }

    conformance!(an_agents_catalog_lists_only_its_own_sessions);
}
