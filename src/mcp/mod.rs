//! Tools from Model Context Protocol servers (`[mcp.servers.NAME]`), on `rmcp`, the
//! protocol's official Rust SDK.
//!
//! Each server gets a supervisor task ([`server`]) that connects (a local program over
//! stdio, or a remote endpoint over streamable HTTP), lists its tools, follows
//! `notifications/tools/list_changed`, and after the server exits or the connection drops
//! tries again with backoff. [`McpTools`] is the tool source the registry asks on every
//! model call: it offers the tools of the servers that are up, as `<server>__<tool>`, and
//! answers calls to them. Servers start side by side and in the background: a slow or
//! broken one holds up neither the others nor the channels.

mod connect;
mod names;
mod program;
mod results;
mod schema;
mod server;

use std::collections::BTreeMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use async_trait::async_trait;
use serde_json::{Value, json};
use tokio::sync::Notify;
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;

pub use connect::CONNECT_TIMEOUT;
pub use names::{MAX_TOOL_NAME_CHARS, offered_name};
pub use program::find_program;
pub use server::{Phase, ServerStatus};

use crate::agent::providers::ToolSpec;
use crate::agent::tools::{ToolContext, ToolError, ToolOutput, ToolSource, mcp_server_of};
use crate::config::{Environment, McpConfig};
use server::Server;

/// The configured servers, connected in the background.
pub struct McpTools {
    servers: BTreeMap<String, Arc<Server>>,
    stop: CancellationToken,
    tasks: TaskTracker,
    /// Until when runs wait for servers still connecting (`mcp.startup_wait_seconds`
    /// after the start): see [`ToolSource::ready`].
    startup_deadline: Instant,
    /// Every server left `starting` (or the deadline passed): runs no longer wait.
    started: AtomicBool,
    /// Wakes waiting runs when a server leaves `starting`.
    phase_changed: Arc<Notify>,
}

impl McpTools {
    /// Starts a supervisor for every server and returns at once; each server's tools are
    /// offered from the moment it is ready. Call inside a Tokio runtime.
    pub fn start(config: &McpConfig, env: &Environment) -> Arc<Self> {
        let stop = CancellationToken::new();
        let tasks = TaskTracker::new();
        let phase_changed = Arc::new(Notify::new());
        let mut servers = BTreeMap::new();
        for (name, entry) in &config.servers {
            let server = Server::new(name, entry.clone(), phase_changed.clone());
            tasks.spawn(server.clone().supervise(env.clone(), stop.clone()));
            servers.insert(name.clone(), server);
        }
        tasks.close();
        let startup_deadline = Instant::now() + Duration::from_secs(config.startup_wait_seconds);
        Arc::new(Self { servers, stop, tasks, startup_deadline, started: AtomicBool::new(false), phase_changed })
    }

    /// Whether any server is still connecting for the first time.
    fn any_starting(&self) -> bool {
        self.servers.values().any(|server| server.status().phase == Phase::Starting)
    }

    pub fn is_empty(&self) -> bool {
        self.servers.is_empty()
    }

    /// Every server's state, by name.
    pub fn status(&self) -> Vec<ServerStatus> {
        self.servers.values().map(|server| server.status()).collect()
    }

    /// Waits until every server is ready or has failed once, or `timeout` passed.
    pub async fn settled(&self, timeout: Duration) {
        let deadline = Instant::now() + timeout;
        while Instant::now() < deadline && self.status().iter().any(|status| status.phase == Phase::Starting) {
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }

    /// `/healthz`'s `mcp` entries.
    pub fn health(&self) -> Value {
        let entries: Vec<Value> = self.status().into_iter().map(health_entry).collect();
        Value::Array(entries)
    }

    /// Closes every connection and stops every local server (each gets a few seconds to
    /// close before it is killed).
    pub async fn shutdown(&self) {
        self.stop.cancel();
        self.tasks.wait().await;
    }

    fn server_of(&self, tool: &str) -> Option<&Arc<Server>> {
        mcp_server_of(tool).and_then(|server| self.servers.get(server))
    }
}

/// One server in `/healthz`.
fn health_entry(status: ServerStatus) -> Value {
    let mut entry = json!({
        "name": status.name,
        "transport": status.transport,
        "state": status.phase.label(),
        "tools": status.tools.len(),
        "restarts": status.restarts,
    });
    if let Phase::Retrying { last_error, attempts, next_attempt } = &status.phase {
        entry["lastError"] = json!(last_error);
        entry["attempts"] = json!(attempts);
        entry["nextAttemptInMs"] = json!(next_attempt.saturating_duration_since(Instant::now()).as_millis() as u64);
    }
    if let Some(protocol) = status.protocol {
        entry["protocol"] = json!(protocol);
    }
    entry
}

#[async_trait]
impl ToolSource for McpTools {
    fn specs(&self) -> Vec<ToolSpec> {
        self.servers.values().flat_map(|server| server.specs()).collect()
    }

    fn owns(&self, name: &str) -> bool {
        self.server_of(name).is_some()
    }

    fn mutates(&self, name: &str) -> bool {
        self.server_of(name).is_none_or(|server| server.mutates(name))
    }

    async fn call(&self, name: &str, arguments: Value, _context: &ToolContext) -> Result<ToolOutput, ToolError> {
        let Some(server) = self.server_of(name) else {
            return Err(ToolError::new(format!("no MCP server offers `{name}`")));
        };
        server.call(name, arguments).await
    }

    /// Waits while a server is still connecting for the first time, until
    /// `mcp.startup_wait_seconds` after the start; a server that failed once counts as
    /// settled (it retries in the background, and its tools come when it is up).
    async fn ready(&self) {
        if self.started.load(Ordering::Acquire) {
            return;
        }
        let deadline = tokio::time::Instant::from_std(self.startup_deadline);
        loop {
            // Registered before the check, so a change between the two is not missed.
            let changed = self.phase_changed.notified();
            if !self.any_starting() || Instant::now() >= self.startup_deadline {
                break;
            }
            if tokio::time::timeout_at(deadline, changed).await.is_err() {
                break;
            }
        }
        if self.any_starting() {
            let waiting: Vec<&str> = self
                .servers
                .values()
                .filter(|server| server.status().phase == Phase::Starting)
                .map(|server| server.name())
                .collect();
            tracing::warn!(servers = ?waiting, "runs no longer wait for MCP servers still connecting (mcp.startup_wait_seconds)");
        }
        self.started.store(true, Ordering::Release);
    }
}
