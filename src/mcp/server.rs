//! One configured server: its supervisor keeps a connection open (restarting a local server
//! that exits, reconnecting a remote one, with backoff), keeps its tool list current, and
//! answers calls while it is up. Calls made while it is down are told so at once.

use std::collections::BTreeMap;
use std::sync::{Arc, RwLock};
use std::time::{Duration, Instant};

use rmcp::model::{CallToolRequestParams, Tool};
use rmcp::service::{QuitReason, ServiceError};
use rmcp::{Peer, RoleClient};
use serde_json::Value;
use tokio::sync::Notify;
use tokio_util::sync::CancellationToken;

use super::connect::{Connection, connect};
use super::names::offered_name;
use super::{results, schema};
use crate::agent::providers::ToolSpec;
use crate::agent::tools::{ToolError, ToolOutput};
use crate::config::{Environment, McpServerConfig};
use crate::metrics::{McpMetrics, metrics};

/// The first wait before a server is started again; it doubles up to [`MAX_BACKOFF`].
const FIRST_BACKOFF: Duration = Duration::from_secs(1);
const MAX_BACKOFF: Duration = Duration::from_secs(60);
/// A connection that lasted this long was healthy: the next failure starts the backoff
/// from the beginning.
const HEALTHY_FOR: Duration = Duration::from_secs(60);
/// How long `tools/list` may take.
const LIST_TIMEOUT: Duration = Duration::from_secs(30);
/// How long a server gets to close before it is killed.
const CLOSE_PATIENCE: Duration = Duration::from_secs(5);

/// Where a server's connection stands.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Phase {
    /// Connecting for the first time.
    Starting,
    /// Connected, its tools listed.
    Ready,
    /// It failed or exited; the next attempt is at `next_attempt`.
    Retrying { last_error: String, attempts: u32, next_attempt: Instant },
    /// Ferry is shutting down.
    Stopped,
}

impl Phase {
    pub fn label(&self) -> &'static str {
        match self {
            Phase::Starting => "starting",
            Phase::Ready => "ready",
            Phase::Retrying { .. } => "retrying",
            Phase::Stopped => "stopped",
        }
    }
}

/// One of a server's tools as offered.
#[derive(Debug, Clone)]
struct OfferedTool {
    /// The server's own name for it.
    original: String,
    mutates: bool,
    spec: ToolSpec,
}

#[derive(Debug)]
struct Shared {
    phase: Phase,
    peer: Option<Peer<RoleClient>>,
    /// By offered name.
    tools: Arc<BTreeMap<String, OfferedTool>>,
    /// Times the connection was lost after it had been ready.
    restarts: u64,
    protocol: Option<String>,
    /// Cancelled by a call that found the current connection broken. A remote server that
    /// went away does not end the connection by itself (rmcp keeps trying to send), so the
    /// supervisor reconnects from scratch when told. One per connection: a signal about an
    /// old one must not end the next.
    broken: CancellationToken,
}

/// One configured server and its live state.
pub struct Server {
    name: String,
    config: McpServerConfig,
    shared: RwLock<Shared>,
    metrics: McpMetrics,
    /// Told whenever the phase changes, so runs waiting for the servers to start wake up.
    phase_changed: Arc<Notify>,
}

/// A server's state as `/healthz` and `ferry mcp list` show it.
#[derive(Debug, Clone)]
pub struct ServerStatus {
    pub name: String,
    /// `stdio` or `http`.
    pub transport: &'static str,
    pub phase: Phase,
    /// Offered tool names, sorted.
    pub tools: Vec<String>,
    pub restarts: u64,
    pub protocol: Option<String>,
}

/// How a connection ended.
enum Ended {
    Lost(String),
    Stopped,
}

impl Server {
    pub fn new(name: &str, config: McpServerConfig, phase_changed: Arc<Notify>) -> Arc<Self> {
        let shared = Shared {
            phase: Phase::Starting,
            peer: None,
            tools: Arc::default(),
            restarts: 0,
            protocol: None,
            broken: CancellationToken::new(),
        };
        let metrics = metrics().mcp(name);
        Arc::new(Self { name: name.to_owned(), config, shared: RwLock::new(shared), metrics, phase_changed })
    }

    pub fn name(&self) -> &str {
        &self.name
    }

    fn read(&self) -> std::sync::RwLockReadGuard<'_, Shared> {
        self.shared.read().unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    fn write(&self) -> std::sync::RwLockWriteGuard<'_, Shared> {
        self.shared.write().unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    pub fn status(&self) -> ServerStatus {
        let shared = self.read();
        ServerStatus {
            name: self.name.clone(),
            transport: if self.config.command.is_some() { "stdio" } else { "http" },
            phase: shared.phase.clone(),
            tools: shared.tools.keys().cloned().collect(),
            restarts: shared.restarts,
            protocol: shared.protocol.clone(),
        }
    }

    /// The tools it offers now: none while it is down.
    pub fn specs(&self) -> Vec<ToolSpec> {
        let shared = self.read();
        if shared.phase != Phase::Ready {
            return Vec::new();
        }
        shared.tools.values().map(|tool| tool.spec.clone()).collect()
    }

    /// Whether its tool `offered` may change things; a tool it no longer lists is taken as
    /// one that may.
    pub fn mutates(&self, offered: &str) -> bool {
        self.read().tools.get(offered).is_none_or(|tool| tool.mutates)
    }

    /// Keeps the server connected until `stop`: connect, serve, and after a failure wait
    /// and try again.
    pub async fn supervise(self: Arc<Self>, env: Environment, stop: CancellationToken) {
        let mut attempts: u32 = 0;
        loop {
            let started = Instant::now();
            let error = tokio::select! {
                () = stop.cancelled() => break,
                connected = connect(&self.name, &self.config, &env) => match connected {
                    Ok(connection) => match self.serve(connection, &stop).await {
                        Ended::Stopped => break,
                        Ended::Lost(why) => why,
                    },
                    Err(error) => error.to_string(),
                },
            };
            if started.elapsed() >= HEALTHY_FOR {
                attempts = 0;
            }
            attempts = attempts.saturating_add(1);
            let delay = backoff(attempts);
            tracing::warn!(server = %self.name, error = %error, retry_in_ms = delay.as_millis() as u64, "MCP server unavailable; its tools are not offered until it is back");
            {
                let mut shared = self.write();
                shared.peer = None;
                shared.phase = Phase::Retrying { last_error: error, attempts, next_attempt: Instant::now() + delay };
            }
            self.phase_changed.notify_waiters();
            tokio::select! {
                () = stop.cancelled() => break,
                () = tokio::time::sleep(delay) => {}
            }
        }
        {
            let mut shared = self.write();
            shared.phase = Phase::Stopped;
            shared.peer = None;
        }
        self.phase_changed.notify_waiters();
    }

    /// Lists the tools, then answers list changes until the connection ends or `stop`.
    async fn serve(&self, connection: Connection, stop: &CancellationToken) -> Ended {
        let Connection { peer, mut ended, cancel, tools_changed, pid } = connection;
        let tools = match self.list(&peer).await {
            Ok(tools) => tools,
            Err(error) => {
                cancel.cancel();
                return Ended::Lost(error);
            }
        };
        let protocol = peer.peer_info().map(|info| info.protocol_version.to_string());
        tracing::info!(server = %self.name, tools = tools.len(), protocol = protocol.as_deref().unwrap_or("?"), pid, "MCP server ready");
        let broken = CancellationToken::new();
        {
            let mut shared = self.write();
            shared.broken = broken.clone();
            shared.tools = Arc::new(tools);
            shared.peer = Some(peer.clone());
            shared.protocol = protocol;
            shared.phase = Phase::Ready;
        }
        self.phase_changed.notify_waiters();
        loop {
            tokio::select! {
                reason = &mut ended => {
                    self.write().restarts += 1;
                    return Ended::Lost(describe_end(reason.ok()));
                }
                () = broken.cancelled() => {
                    self.write().restarts += 1;
                    cancel.cancel();
                    let _ = tokio::time::timeout(CLOSE_PATIENCE, &mut ended).await;
                    return Ended::Lost("a call found the connection broken".into());
                }
                () = tools_changed.notified() => match self.list(&peer).await {
                    Ok(tools) => {
                        tracing::info!(server = %self.name, tools = tools.len(), "MCP server's tools changed");
                        self.write().tools = Arc::new(tools);
                    }
                    Err(error) => tracing::warn!(server = %self.name, %error, "listing the MCP server's changed tools failed; keeping the old list"),
                },
                () = stop.cancelled() => {
                    cancel.cancel();
                    if tokio::time::timeout(CLOSE_PATIENCE, &mut ended).await.is_err() {
                        tracing::warn!(server = %self.name, "MCP server did not close in time");
                    }
                    return Ended::Stopped;
                }
            }
        }
    }

    /// Every page of `tools/list`, as offered: named for providers, filtered by the
    /// server's `allow`/`deny`.
    async fn list(&self, peer: &Peer<RoleClient>) -> Result<BTreeMap<String, OfferedTool>, String> {
        let listed = match tokio::time::timeout(LIST_TIMEOUT, peer.list_all_tools()).await {
            Err(_) => return Err(format!("tools/list took longer than {}s", LIST_TIMEOUT.as_secs())),
            Ok(Err(error)) => return Err(format!("tools/list failed: {error}")),
            Ok(Ok(listed)) => listed,
        };
        let mut offered = BTreeMap::new();
        for tool in listed.into_iter().filter(|tool| self.config.offers(&tool.name)) {
            let name = offered_name(&self.name, &tool.name, &offered);
            let entry = self.offer(&name, tool);
            offered.insert(name, entry);
        }
        Ok(offered)
    }

    fn offer(&self, name: &str, tool: Tool) -> OfferedTool {
        let description = tool
            .description
            .as_deref()
            .or(tool.title.as_deref())
            .map(str::to_owned)
            .unwrap_or_else(|| format!("`{}` of the MCP server `{}`", tool.name, self.name));
        let mutates = !tool.annotations.as_ref().and_then(|annotations| annotations.read_only_hint).unwrap_or(false);
        let spec =
            ToolSpec { name: name.to_owned(), description, parameters: Arc::new(schema::sanitize(&tool.input_schema)) };
        OfferedTool { original: tool.name.into_owned(), mutates, spec }
    }

    /// Runs the server's tool `offered`, within the server's `timeout`.
    pub async fn call(&self, offered: &str, arguments: Value) -> Result<ToolOutput, ToolError> {
        let (peer, original, broken) = {
            let shared = self.read();
            match (&shared.phase, &shared.peer) {
                (Phase::Ready, Some(peer)) => {
                    let Some(tool) = shared.tools.get(offered) else {
                        return Err(ToolError::new(format!(
                            "the MCP server `{}` no longer has the tool `{offered}`; its tools are: {}",
                            self.name,
                            shared.tools.keys().cloned().collect::<Vec<_>>().join(", ")
                        )));
                    };
                    (peer.clone(), tool.original.clone(), shared.broken.clone())
                }
                (phase, _) => return Err(self.unavailable(phase)),
            }
        };
        let Value::Object(arguments) = arguments else {
            return Err(ToolError::new("the arguments must be a JSON object"));
        };
        let params = CallToolRequestParams::new(original).with_arguments(arguments);
        let timeout = Duration::from_secs(self.config.timeout);
        let timer = self.metrics.call();
        // Dropping the request (a timeout, or the run being stopped) tells the server to
        // cancel it.
        let answer = tokio::time::timeout(timeout, peer.call_tool(params)).await;
        let result = match answer {
            Err(_) => Err(ToolError::new(format!(
                "the MCP server `{}` did not answer within {}s; the call was cancelled",
                self.name,
                timeout.as_secs()
            ))),
            Ok(Err(error)) => Err(self.failed(&error, &broken)),
            Ok(Ok(result)) => results::convert(result).await,
        };
        timer.ended(result.is_ok());
        result
    }

    fn unavailable(&self, phase: &Phase) -> ToolError {
        let name = &self.name;
        ToolError::new(match phase {
            Phase::Starting => format!("the MCP server `{name}` is still starting; try again shortly"),
            Phase::Retrying { last_error, next_attempt, .. } => {
                let wait = next_attempt.saturating_duration_since(Instant::now()).as_secs();
                format!(
                    "the MCP server `{name}` is not running ({last_error}); Ferry tries it again in {wait}s, so its \
                     tools are unavailable until then"
                )
            }
            Phase::Stopped | Phase::Ready => format!("the MCP server `{name}` is shut down"),
        })
    }

    fn failed(&self, error: &ServiceError, broken: &CancellationToken) -> ToolError {
        let name = &self.name;
        ToolError::new(match error {
            ServiceError::McpError(error) => format!("the MCP server `{name}` refused the call: {}", error.message),
            ServiceError::TransportClosed | ServiceError::TransportSend(_) => {
                broken.cancel();
                format!(
                    "the connection to the MCP server `{name}` was lost during the call (Ferry restarts it); the call \
                 may or may not have taken effect"
                )
            }
            other => format!("the call to the MCP server `{name}` failed: {other}"),
        })
    }
}

/// The wait before attempt `attempts + 1`: 1 s, 2 s, 4 s… up to a minute.
fn backoff(attempts: u32) -> Duration {
    FIRST_BACKOFF.saturating_mul(1 << attempts.saturating_sub(1).min(6)).min(MAX_BACKOFF)
}

fn describe_end(reason: Option<QuitReason>) -> String {
    match reason {
        Some(QuitReason::Closed) | None => "the server closed the connection (it exited)".into(),
        Some(QuitReason::Cancelled) => "the connection was closed".into(),
        Some(QuitReason::JoinError(error)) => format!("the connection's task failed: {error}"),
        Some(other) => format!("the connection ended: {other:?}"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn backoff_doubles_to_a_minute() {
        let waits: Vec<u64> = (1..=9).map(|attempt| backoff(attempt).as_secs()).collect();
        assert_eq!(waits, [1, 2, 4, 8, 16, 32, 60, 60, 60]);
    }
}
