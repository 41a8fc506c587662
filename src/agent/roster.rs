//! The agents one gateway runs, by id: each with its own runner (model, tools and sandbox
//! root, workspace with its bootstrap files and skills), sharing the event bus, the session
//! store, the hooks and the media store.

use std::sync::Arc;

use super::AgentRunner;
use crate::config::MAIN_AGENT;

/// The agents by id, and which answers by default. Cheap to clone.
#[derive(Clone)]
pub struct Agents {
    inner: Arc<Inner>,
}

struct Inner {
    /// In the config's order, the default first.
    runners: Vec<(String, AgentRunner)>,
}

impl Agents {
    /// The default agent, `id`; [`Agents::with`] adds the others.
    pub fn new(id: impl Into<String>, runner: AgentRunner) -> Self {
        Self { inner: Arc::new(Inner { runners: vec![(id.into(), runner)] }) }
    }

    /// Adds the agent `id`.
    pub fn with(self, id: impl Into<String>, runner: AgentRunner) -> Self {
        let mut runners = self.inner.runners.clone();
        runners.push((id.into(), runner));
        Self { inner: Arc::new(Inner { runners }) }
    }

    /// The default agent's runner.
    pub fn default_runner(&self) -> &AgentRunner {
        &self.inner.runners[0].1
    }

    /// The id of the agent that answers where no binding matches.
    pub fn default_id(&self) -> &str {
        &self.inner.runners[0].0
    }

    pub fn get(&self, id: &str) -> Option<&AgentRunner> {
        self.inner.runners.iter().find(|(agent, _)| agent == id).map(|(_, runner)| runner)
    }

    /// The runner of the agent a session key names (`agent:<id>:…`). A key of an agent
    /// the config no longer has (a message journaled before the agent was removed) runs
    /// with the default agent, in its own session still.
    pub fn for_session(&self, session_key: &str) -> &AgentRunner {
        let id = session_key.split(':').nth(1).unwrap_or_default();
        self.get(id).unwrap_or_else(|| {
            tracing::warn!(session_key, "the session's agent is not configured; the default agent answers");
            self.default_runner()
        })
    }

    /// Every agent, the default first.
    pub fn iter(&self) -> impl Iterator<Item = (&str, &AgentRunner)> {
        self.inner.runners.iter().map(|(id, runner)| (id.as_str(), runner))
    }
}

/// One agent, `main`: embedders and tests with a single runner.
impl From<AgentRunner> for Agents {
    fn from(runner: AgentRunner) -> Self {
        Self::new(MAIN_AGENT, runner)
    }
}
