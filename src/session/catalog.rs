//! The sessions an agent's `sessions_list` tool sees, read from the session store.

use std::sync::Arc;

use async_trait::async_trait;

use crate::state::sessions::{Session, SessionStore, StoreError};
use crate::agent::tools::{SessionCatalog, SessionSummary};
use crate::config::SessionsVisibility;

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
