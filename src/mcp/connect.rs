//! Opening one connection to a server: start a local one with a scrubbed environment and
//! its stderr in Ferry's log, or reach a remote one over streamable HTTP with its headers;
//! then the protocol's initialize handshake, and a subscription to tool-list changes.

use std::collections::HashMap;
use std::process::Stdio;
use std::sync::Arc;
use std::time::Duration;

use reqwest::header::{HeaderName, HeaderValue};
use rmcp::model::{ClientCapabilities, ClientConfig, Implementation, ProtocolVersion, SubscriptionFilter};
use rmcp::service::{NotificationContext, QuitReason, RunningService, RunningServiceCancellationToken};
use rmcp::transport::streamable_http_client::StreamableHttpClientTransportConfig;
use rmcp::transport::{StreamableHttpClientTransport, TokioChildProcess};
use rmcp::{ClientHandler, Peer, RoleClient, ServiceExt};
use tokio::io::{AsyncBufReadExt, BufReader};
use tokio::sync::{Notify, oneshot};

use crate::config::{Environment, McpServerConfig};

/// How long a server may take to start and answer `initialize`.
pub const CONNECT_TIMEOUT: Duration = Duration::from_secs(30);
/// The most of one stderr line of a server that reaches the log.
const MAX_STDERR_LINE: usize = 2_000;
/// Stderr lines per server logged before the rest is only counted: a server printing in a
/// loop must not fill the log.
const MAX_STDERR_LINES: u64 = 1_000;

/// Why a connection could not be opened, worded for `/healthz` and the operator.
#[derive(Debug, Clone, thiserror::Error)]
pub enum ConnectError {
    #[error("cannot start `{command}`: {reason}")]
    Spawn { command: String, reason: String },
    #[error("the server did not complete the handshake within {}s", CONNECT_TIMEOUT.as_secs())]
    Timeout,
    #[error("the handshake failed: {0}")]
    Handshake(String),
    #[error("header {header}: {reason}")]
    Header { header: String, reason: String },
}

/// A live connection: the peer to send requests on, what tells when it ends, and the
/// signal a `notifications/tools/list_changed` raises.
pub struct Connection {
    pub peer: Peer<RoleClient>,
    pub ended: oneshot::Receiver<QuitReason>,
    pub cancel: RunningServiceCancellationToken,
    pub tools_changed: Arc<Notify>,
    /// The process id of a local server.
    pub pid: Option<u32>,
}

/// What Ferry tells servers about itself, and where list changes are raised.
#[derive(Clone)]
struct Handler {
    tools_changed: Arc<Notify>,
}

impl ClientHandler for Handler {
    async fn on_tool_list_changed(&self, _context: NotificationContext<RoleClient>) {
        self.tools_changed.notify_one();
    }

    fn get_info(&self) -> ClientConfig {
        ClientConfig::new(ClientCapabilities::default(), Implementation::new("ferry", env!("CARGO_PKG_VERSION")))
    }
}

/// Opens a connection to `server` (named `name` in the log).
pub async fn connect(name: &str, server: &McpServerConfig, env: &Environment) -> Result<Connection, ConnectError> {
    let tools_changed = Arc::new(Notify::new());
    let handler = Handler { tools_changed: tools_changed.clone() };
    let (service, pid) = match (&server.command, &server.url) {
        (Some(command), _) => {
            let transport = spawn(name, command, server, env)?;
            let pid = transport.id();
            (handshake(handler, transport).await?, pid)
        }
        (None, Some(url)) => (connect_http(handler, url, server, env).await?, None),
        (None, None) => return Err(ConnectError::Handshake("neither `command` nor `url` is set".into())),
    };
    Ok(follow(service, tools_changed, pid).await)
}

async fn handshake<T, E, A>(handler: Handler, transport: T) -> Result<RunningService<RoleClient, Handler>, ConnectError>
where
    T: rmcp::transport::IntoTransport<RoleClient, E, A>,
    E: std::error::Error + Send + Sync + 'static,
{
    match tokio::time::timeout(CONNECT_TIMEOUT, handler.serve(transport)).await {
        Err(_) => Err(ConnectError::Timeout),
        Ok(Err(error)) => Err(ConnectError::Handshake(error.to_string())),
        Ok(Ok(service)) => Ok(service),
    }
}

/// Starts a local server: its own process group (a stop reaches what it spawned, as `npx`
/// starts `node`), an environment of `PATH`, `HOME` and its `env` only, stderr to the log.
fn spawn(
    name: &str,
    command: &str,
    server: &McpServerConfig,
    env: &Environment,
) -> Result<TokioChildProcess, ConnectError> {
    let mut process = tokio::process::Command::new(command);
    process.args(&server.args).env_clear().kill_on_drop(true);
    for variable in ["PATH", "HOME"] {
        if let Some(value) = env.var(variable) {
            process.env(variable, value);
        }
    }
    process.envs(server.env.iter().map(|(key, value)| (key, value.expose())));
    if let Some(cwd) = &server.cwd {
        process.current_dir(cwd);
    }
    let mut wrapped = process_wrap::tokio::CommandWrap::from(process);
    wrapped.wrap(process_wrap::tokio::ProcessGroup::leader());
    let (transport, stderr) = TokioChildProcess::builder(wrapped)
        .stderr(Stdio::piped())
        .spawn()
        .map_err(|error| ConnectError::Spawn { command: command.to_owned(), reason: error.to_string() })?;
    if let Some(stderr) = stderr {
        tokio::spawn(log_stderr(name.to_owned(), stderr));
    }
    Ok(transport)
}

/// A server's stderr, line by line, at debug level and tagged with its name; capped.
async fn log_stderr(server: String, stderr: tokio::process::ChildStderr) {
    let mut lines = BufReader::new(stderr).lines();
    let mut logged = 0u64;
    let mut dropped = 0u64;
    loop {
        match lines.next_line().await {
            Ok(Some(line)) if logged < MAX_STDERR_LINES => {
                logged += 1;
                let line: String = line.chars().take(MAX_STDERR_LINE).collect();
                tracing::debug!(target: "ferry::mcp::stderr", server = %server, "{line}");
            }
            Ok(Some(_)) => dropped += 1,
            // Not text: the rest is skipped, the server goes on.
            Err(_) | Ok(None) => break,
        }
    }
    if dropped > 0 {
        tracing::debug!(server = %server, dropped, "MCP server stderr lines over the cap were not logged");
    }
}

/// Reaches a remote server over streamable HTTP, with its headers.
async fn connect_http(
    handler: Handler,
    url: &str,
    server: &McpServerConfig,
    env: &Environment,
) -> Result<RunningService<RoleClient, Handler>, ConnectError> {
    // rmcp's reqwest comes without a TLS provider of its own: it uses the process's, ring,
    // which the rest of Ferry already links. Installing it again is harmless.
    let _ = rustls::crypto::ring::default_provider().install_default();
    let config = StreamableHttpClientTransportConfig::with_uri(url).custom_headers(headers(server, env)?);
    handshake(handler, StreamableHttpClientTransport::from_config(config)).await
}

/// `headers`, and `headers_env` read from the environment, marked sensitive so no debug
/// output shows them.
fn headers(server: &McpServerConfig, env: &Environment) -> Result<HashMap<HeaderName, HeaderValue>, ConnectError> {
    let mut headers = HashMap::new();
    let from_env = server.headers_env.iter().map(|(header, variable)| {
        let value = env.var(variable).ok_or_else(|| ConnectError::Header {
            header: header.clone(),
            reason: format!("the environment variable {variable} is not set"),
        })?;
        Ok((header.clone(), value.to_owned()))
    });
    let given = server.headers.iter().map(|(header, value)| Ok((header.clone(), value.expose().to_owned())));
    for entry in given.chain(from_env) {
        let (header, value): (String, String) = entry?;
        let invalid = |reason: String| ConnectError::Header { header: header.clone(), reason };
        let name = HeaderName::from_bytes(header.as_bytes()).map_err(|error| invalid(error.to_string()))?;
        let mut value =
            HeaderValue::from_str(&value).map_err(|_| invalid("the value is not a valid header value".into()))?;
        value.set_sensitive(true);
        headers.insert(name, value);
    }
    Ok(headers)
}

/// Keeps the service running on its own task and hands back what the supervisor needs. On
/// a connection that negotiated a revision where list changes are subscribed to, it
/// subscribes.
async fn follow(
    service: RunningService<RoleClient, Handler>,
    tools_changed: Arc<Notify>,
    pid: Option<u32>,
) -> Connection {
    let peer = service.peer().clone();
    let cancel = service.cancellation_token();
    let (ended_tx, ended) = oneshot::channel();
    tokio::spawn(async move {
        let reason = service.waiting().await.unwrap_or_else(QuitReason::JoinError);
        let _ = ended_tx.send(reason);
    });
    let info = peer.peer_info();
    let subscribes = info.as_ref().is_some_and(|info| {
        info.protocol_version >= ProtocolVersion::V_2026_07_28
            && info.capabilities.tools.as_ref().and_then(|tools| tools.list_changed) == Some(true)
    });
    if subscribes {
        let filter = SubscriptionFilter::builder().tools_list_changed().build();
        match peer.listen(filter).await {
            Ok(mut subscription) => {
                let changed = tools_changed.clone();
                tokio::spawn(async move {
                    while let Ok(Some(_)) = subscription.next().await {
                        changed.notify_one();
                    }
                });
            }
            Err(error) => tracing::debug!(%error, "the server did not take a tool-list subscription"),
        }
    }
    Connection { peer, ended, cancel, tools_changed, pid }
}
