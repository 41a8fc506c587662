//! `sessions_list`: the conversations this agent has, most recent first.

use std::collections::HashMap;
use std::sync::Mutex;

use async_trait::async_trait;
use chrono::{DateTime, Utc};
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use super::{ToolContext, ToolError, ToolOutput, TypedTool};
use crate::types::conversation::Usage;

/// Most sessions listed at once.
const MAX_LIMIT: usize = 100;

/// One session as the tool reports it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct SessionSummary {
    pub key: String,
    pub updated_at: DateTime<Utc>,
    pub input_tokens: u64,
    pub output_tokens: u64,
}

/// Where sessions are listed from: the session store in the gateway, or the sessions
/// this process ran ([`RecentSessions`]).
#[async_trait]
pub trait SessionCatalog: Send + Sync {
    /// Up to `limit` sessions, most recently updated first.
    async fn list(&self, limit: usize) -> Vec<SessionSummary>;
}

/// The sessions this process ran, in memory.
#[derive(Default)]
pub struct RecentSessions {
    sessions: Mutex<HashMap<String, SessionSummary>>,
}

impl RecentSessions {
    /// Notes that `key` was active now and used `usage` more tokens.
    pub fn record(&self, key: &str, usage: Usage) {
        let mut sessions = self.sessions.lock().unwrap_or_else(|poisoned| poisoned.into_inner());
        let entry = sessions.entry(key.to_owned()).or_insert_with(|| SessionSummary {
            key: key.to_owned(),
            updated_at: Utc::now(),
            input_tokens: 0,
            output_tokens: 0,
        });
        entry.updated_at = Utc::now();
        entry.input_tokens += usage.input_tokens;
        entry.output_tokens += usage.output_tokens;
    }
}

#[async_trait]
impl SessionCatalog for RecentSessions {
    async fn list(&self, limit: usize) -> Vec<SessionSummary> {
        let sessions = self.sessions.lock().unwrap_or_else(|poisoned| poisoned.into_inner());
        let mut all: Vec<_> = sessions.values().cloned().collect();
        all.sort_by(|a, b| b.updated_at.cmp(&a.updated_at).then_with(|| a.key.cmp(&b.key)));
        all.truncate(limit);
        all
    }
}

#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct SessionsListArgs {
    /// How many sessions to list (default 20, at most 100).
    #[serde(default)]
    pub limit: Option<usize>,
}

pub struct SessionsList;

#[async_trait]
impl TypedTool for SessionsList {
    type Args = SessionsListArgs;
    const NAME: &'static str = "sessions_list";
    const DESCRIPTION: &'static str =
        "List this agent's conversation sessions (key, last update, tokens used), most recent first.";

    async fn run(&self, args: SessionsListArgs, context: &ToolContext) -> Result<ToolOutput, ToolError> {
        let limit = args.limit.unwrap_or(20).clamp(1, MAX_LIMIT);
        let sessions = context.sessions.list(limit).await;
        serde_json::to_string(&serde_json::json!({ "sessions": sessions, "current": context.session_key }))
            .map(ToolOutput::from)
            .map_err(|error| ToolError::new(format!("could not encode the session list: {error}")))
    }
}
