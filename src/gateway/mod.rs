//! The gateway: the daemon's front door (SPEC §8). One port serves the WebSocket RPC at
//! `/ws`, the web chat page at `/`, `/healthz` and `/metrics`.
//!
//! - [`protocol`]: the frames;
//! - [`connection`]: one client — handshake, requests, events;
//! - [`methods`]: what each RPC method does;
//! - [`hub`]: run events fanned out to the connections that follow them;
//! - [`outbox`]: a connection's queue, where a slow client loses deltas, never finals;
//! - [`runs`]: idempotency answers and terminal snapshots for `agent.wait`;
//! - [`client`]: the other end, for `ferry agent` and benches;
//! - [`webchat`]: the web chat channel, its page, and its files (uploads in, downloads
//!   out: [`webchat::files`]);
//! - [`approvals`]: requests to approve a command, with their state, for clients that
//!   offer Approve / Deny.
//!
//! Everything a client sends to the agent enters through the [`webchat::WebChat`] channel,
//! so it takes the same path as a platform message: routing, commands, queue, lanes.

pub mod approvals;
pub mod client;
pub mod connection;
pub mod hub;
mod late_route;
mod methods;
pub mod outbox;
pub mod protocol;
pub mod runs;
pub mod webchat;

pub use late_route::LateRoutes;

use std::future::IntoFuture;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::{Duration, Instant};

use axum::Router;
use axum::extract::{State, WebSocketUpgrade};
use axum::http::{HeaderMap, StatusCode, header};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use axum::serve::ListenerExt;
use ferry_channel::{ChatKind, ChatRef, ClientRequest, InboundMessage, Sender};
use serde_json::{Value, json};
use tokio::net::TcpListener;
use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;

use crate::agent::EventBus;
use crate::agent::tools::exec::Approvals;
use crate::channels::{ChannelHealth, ChannelRegistry, ChannelState};
use crate::config::Config;
use crate::dispatch::Dispatcher;
use crate::media::Media;
use hub::Hub;
use webchat::WebChat;

/// The smallest limit on a WebSocket frame: room for any request with a message of up to
/// 245,760 characters, so a client cannot make the gateway buffer more than this.
pub const MIN_FRAME_BYTES: usize = 1024 * 1024;

/// The largest frame a client may send: [`MIN_FRAME_BYTES`], or more when
/// `messages.max_inbound_chars` needs it (4 bytes a character plus 64 KiB for the rest of the
/// request). A larger frame closes the connection with 1009 (message too big).
pub fn max_frame_bytes(max_inbound_chars: usize) -> usize {
    max_inbound_chars.saturating_mul(4).saturating_add(64 * 1024).max(MIN_FRAME_BYTES)
}

/// An agent as gateway clients see it (`hello-ok`'s `agents`).
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct AgentInfo {
    pub id: String,
    pub name: String,
    /// Answers where nothing else is named: the web chat preselects it.
    pub default: bool,
}

impl AgentInfo {
    fn of(config: &Config) -> Vec<Self> {
        let default = config.agents.default_id();
        let info = |id: &str| {
            let name = config.agents.settings_of(id).name.clone().unwrap_or_else(|| id.to_owned());
            Self { id: id.to_owned(), name, default: id == default }
        };
        config.agents.ids().into_iter().map(info).collect()
    }
}

/// What the gateway is built from.
pub struct GatewayParts {
    pub config: Arc<Config>,
    pub dispatcher: Dispatcher,
    /// The runner's event bus, which the gateway follows.
    pub bus: EventBus,
    pub channels: ChannelRegistry,
    /// The MCP servers, for `/healthz`; `None` when none is configured.
    #[cfg(feature = "mcp")]
    pub mcp: Option<Arc<crate::mcp::McpTools>>,
}

/// The state every connection and handler shares.
pub struct GatewayState {
    pub(crate) dispatcher: Dispatcher,
    pub(crate) hub: Arc<Hub>,
    pub(crate) webchat: Arc<WebChat>,
    pub(crate) channels: ChannelRegistry,
    /// Commands waiting for approval and those recently settled; `None` without the
    /// command tools.
    pub(crate) approvals: Option<Arc<Approvals>>,
    /// The agents clients may name (`agentId`), the default first.
    pub(crate) agents: Vec<AgentInfo>,
    pub(crate) auth_token: Option<String>,
    webchat_page: bool,
    /// Where web chat uploads go and downloads come from: the runner's media, while the web
    /// chat is enabled; `None` otherwise (then there is no upload or download endpoint).
    pub(crate) media: Option<Arc<Media>>,
    started: Instant,
    /// Cancelled at the end of a shutdown, once runs are done: connections close.
    pub(crate) closing: CancellationToken,
    /// The open client connections, so a shutdown can wait for them to say goodbye.
    connections: TaskTracker,
    /// See [`max_frame_bytes`].
    pub(crate) max_frame_bytes: usize,
    #[cfg(feature = "mcp")]
    mcp: Option<Arc<crate::mcp::McpTools>>,
}

impl GatewayState {
    /// The session of a web chat client with id `client_id`: where its messages are routed
    /// when it names none, with the agent `agent` (else the one bindings choose).
    pub(crate) fn webchat_session(&self, client_id: &str, agent: Option<&str>) -> String {
        let mut message = InboundMessage::new(
            webchat::CHANNEL_NAME,
            webchat::ACCOUNT_ID,
            ChatRef::new(ChatKind::Direct, client_id),
            Sender::user(client_id),
            "",
            "",
        );
        message.request = agent.map(|agent| ClientRequest { agent_id: Some(agent.to_owned()), ..Default::default() });
        self.dispatcher.session_key_of(&message).into_string()
    }

    /// The agent `id` names (case ignored), if the config has it.
    pub(crate) fn agent(&self, id: &str) -> Option<&AgentInfo> {
        self.agents.iter().find(|agent| agent.id.eq_ignore_ascii_case(id))
    }

    /// Whether an HTTP request carries `Authorization: Bearer <gateway.auth_token>`; always
    /// true when no token is set (then the gateway listens on loopback only).
    fn presents_token(&self, headers: &HeaderMap) -> bool {
        let Some(expected) = &self.auth_token else { return true };
        let presented = headers.get(header::AUTHORIZATION).and_then(|value| value.to_str().ok());
        presented
            .and_then(|value| value.strip_prefix("Bearer "))
            .is_some_and(|token| connection::constant_time_eq(token.trim().as_bytes(), expected.as_bytes()))
    }

    /// `/healthz` and the `health` method.
    pub(crate) fn health(&self) -> Value {
        let states = self.channels.states();
        // Not ok while any channel is not running: its users' messages go unanswered.
        let ok = states.iter().all(|state| state.health == ChannelHealth::Running);
        let channels: Vec<Value> = states.into_iter().map(channel_health).collect();
        let mut health =
            json!({ "ok": ok, "channels": channels, "uptimeMs": self.started.elapsed().as_millis() as u64 });
        // Several replicas on one database: which one this is, whether it reaches the
        // database (it claims nothing while it cannot), and the sessions it runs.
        if let Some(replica) = self.dispatcher.replica_health() {
            if replica["database"] != "reachable" {
                health["ok"] = json!(false);
            }
            health["replica"] = replica;
        }
        // Nor do the scheduler and memory: a failing job, or an embeddings endpoint that
        // cannot be reached, says so in its own entry.
        for (name, entry) in self.dispatcher.health_entries() {
            health[name] = entry;
        }
        // MCP servers do not count against `ok`: without one, the bot still answers.
        #[cfg(feature = "mcp")]
        if let Some(mcp) = self.mcp.as_ref().filter(|mcp| !mcp.is_empty()) {
            health["mcp"] = mcp.health();
        }
        health
    }
}

/// One channel's entry in `/healthz`: its state, and for a channel that is not running, why.
fn channel_health(state: ChannelState) -> Value {
    let mut entry = json!({ "name": state.name, "account": state.account_id, "state": state.health.label() });
    match state.health {
        ChannelHealth::Retrying { last_error, attempts, next_attempt_in_ms } => {
            entry["lastError"] = json!(last_error);
            entry["attempts"] = json!(attempts);
            entry["nextAttemptInMs"] = json!(next_attempt_in_ms);
        }
        ChannelHealth::Stopped { reason } => entry["reason"] = json!(reason),
        ChannelHealth::Starting | ChannelHealth::Running => {}
    }
    entry
}

/// A started gateway: its event hub runs and its web chat channel is attached.
pub struct Gateway {
    state: Arc<GatewayState>,
    /// Stops the hub that forwards run events to clients.
    stop: CancellationToken,
    hub: JoinHandle<()>,
    /// Routes adapters serve on the gateway's port (webhooks).
    extra: Router,
}

#[derive(Debug, thiserror::Error)]
pub enum GatewayError {
    #[error("cannot listen on {address}: {source}")]
    Bind { address: String, source: std::io::Error },
    #[error("the web chat channel could not start: {0}")]
    WebChat(#[from] ferry_channel::ChannelError),
    #[error("the gateway server failed: {0}")]
    Serve(std::io::Error),
}

impl Gateway {
    /// Follows the event bus and attaches the web chat channel to the dispatcher. Call it
    /// before the dispatcher restores queued messages, so their runs' events are seen.
    pub async fn start(parts: GatewayParts) -> Result<Self, GatewayError> {
        let hub = Arc::new(Hub::default());
        let stop = CancellationToken::new();
        let approvals = parts.dispatcher.runner().tools().host().map(|host| host.approvals().clone());
        let hub_task = tokio::spawn(hub.clone().run(&parts.bus, approvals.as_deref(), stop.clone()));
        let webchat = Arc::new(WebChat::new(hub.clone(), approvals.clone()));
        parts.dispatcher.attach(webchat.clone()).await?;
        let media = parts.dispatcher.runner().media().filter(|_| parts.config.channels.webchat.enabled).cloned();
        let state = GatewayState {
            dispatcher: parts.dispatcher,
            hub,
            webchat,
            channels: parts.channels,
            approvals,
            agents: AgentInfo::of(&parts.config),
            auth_token: parts.config.gateway.auth_token.as_ref().map(|token| token.expose().to_owned()),
            webchat_page: parts.config.channels.webchat.enabled,
            media,
            started: Instant::now(),
            closing: CancellationToken::new(),
            connections: TaskTracker::new(),
            max_frame_bytes: max_frame_bytes(parts.config.messages.max_inbound_chars),
            #[cfg(feature = "mcp")]
            mcp: parts.mcp,
        };
        Ok(Self { state: Arc::new(state), stop, hub: hub_task, extra: Router::new() })
    }

    /// Adds routes an adapter serves on the gateway's port, such as a platform's webhook.
    pub fn with_routes(mut self, routes: Router) -> Self {
        self.extra = std::mem::take(&mut self.extra).merge(routes);
        self
    }

    /// The HTTP routes: `/ws`, `/`, `/app.js`, `/markdown.js`, `/media.js`, `/style.css`,
    /// `/vendor/…`, `/healthz`, `/metrics`, and with media, `/webchat/upload` and
    /// `/webchat/media/{id}` ([`webchat::files`]).
    pub fn router(&self) -> Router {
        let mut router = Router::new();
        if self.state.media.is_some() {
            router = router
                .route("/webchat/upload", post(webchat::files::upload))
                .route("/webchat/media/{id}", get(webchat::files::download));
        }
        router
            .route("/ws", get(upgrade))
            .route("/", get(index))
            .route("/app.js", get(app_js))
            .route("/markdown.js", get(markdown_js))
            .route("/media.js", get(media_js))
            .route("/style.css", get(style_css))
            .route("/vendor/{file}", get(webchat::vendor_file))
            .route("/healthz", get(healthz))
            .route("/metrics", get(metrics))
            .with_state(self.state.clone())
            .merge(self.extra.clone())
    }

    /// Serves until `shutdown` resolves, then stops taking connections (new clients are
    /// refused) and returns. Open connections stay: clients following a run keep receiving
    /// its events while the daemon lets runs finish; [`Draining::close`] ends them.
    pub async fn serve(
        self,
        listener: TcpListener,
        shutdown: impl Future<Output = ()> + Send + 'static,
    ) -> Result<Draining, GatewayError> {
        let router = self.router();
        let (signalled, on_signal) = tokio::sync::oneshot::channel::<()>();
        let shutdown = async move {
            shutdown.await;
            let _ = signalled.send(());
        };
        // Small frames (a response, a delta) must not wait for a delayed ACK (Nagle).
        let listener = listener.tap_io(|stream| {
            if let Err(error) = stream.set_nodelay(true) {
                tracing::debug!(%error, "cannot set TCP_NODELAY on a gateway connection");
            }
        });
        let mut server = tokio::spawn(axum::serve(listener, router).with_graceful_shutdown(shutdown).into_future());
        let draining = |server| Draining { state: self.state.clone(), stop: self.stop.clone(), hub: self.hub, server };
        tokio::select! {
            _ = on_signal => Ok(draining(Some(server))),
            served = &mut server => match served {
                Ok(Err(error)) => Err(GatewayError::Serve(error)),
                // The server ended without a signal (it cannot, short of an error); drain anyway.
                Ok(Ok(())) | Err(_) => Ok(draining(None)),
            },
        }
    }

    /// Listens where the config says.
    pub async fn bind(config: &Config) -> Result<TcpListener, GatewayError> {
        let host = if config.gateway.bind == "localhost" { "127.0.0.1" } else { config.gateway.bind.as_str() };
        let address = match host.parse::<std::net::IpAddr>() {
            Ok(ip) => SocketAddr::new(ip, config.gateway.port),
            Err(_) => SocketAddr::from(([127, 0, 0, 1], config.gateway.port)),
        };
        TcpListener::bind(address).await.map_err(|source| GatewayError::Bind { address: address.to_string(), source })
    }
}

/// A gateway that no longer takes connections, with its open ones still served.
pub struct Draining {
    state: Arc<GatewayState>,
    stop: CancellationToken,
    hub: JoinHandle<()>,
    /// The server still finishing its graceful shutdown, unless it already ended.
    server: Option<JoinHandle<std::io::Result<()>>>,
}

impl Draining {
    /// Ends the open connections: the hub first forwards every event runs have published
    /// (so a client following a run that just ended gets its final), then each connection
    /// sends what it has queued and closes. Waits at most `patience` for them.
    pub async fn close(self, patience: Duration) {
        self.stop.cancel();
        let _ = tokio::time::timeout(patience, self.hub).await;
        self.state.closing.cancel();
        self.state.connections.close();
        if tokio::time::timeout(patience, self.state.connections.wait()).await.is_err() {
            tracing::warn!(open = self.state.connections.len(), "gateway connections did not close in time");
        }
        if let Some(server) = self.server {
            let _ = tokio::time::timeout(patience, server).await;
        }
    }
}

async fn upgrade(ws: WebSocketUpgrade, State(state): State<Arc<GatewayState>>) -> Response {
    let connections = state.connections.clone();
    ws.max_message_size(state.max_frame_bytes)
        .max_frame_size(state.max_frame_bytes)
        .on_upgrade(move |socket| connections.track_future(connection::serve(socket, state)))
}

async fn index(State(state): State<Arc<GatewayState>>) -> Response {
    if !state.webchat_page {
        return (StatusCode::NOT_FOUND, "the web chat is disabled (channels.webchat.enabled = false)").into_response();
    }
    ([(header::CONTENT_TYPE, "text/html; charset=utf-8")], webchat::assets::INDEX_HTML).into_response()
}

async fn app_js() -> Response {
    ([(header::CONTENT_TYPE, "text/javascript; charset=utf-8")], webchat::assets::APP_JS).into_response()
}

async fn markdown_js() -> Response {
    ([(header::CONTENT_TYPE, "text/javascript; charset=utf-8")], webchat::assets::MARKDOWN_JS).into_response()
}

async fn media_js() -> Response {
    ([(header::CONTENT_TYPE, "text/javascript; charset=utf-8")], webchat::assets::MEDIA_JS).into_response()
}

async fn style_css() -> Response {
    ([(header::CONTENT_TYPE, "text/css; charset=utf-8")], webchat::assets::STYLE_CSS).into_response()
}

/// Everything with the token (or when none is set); without it only whether all is well, so
/// a public address does not tell strangers which platforms the bot is on or why one failed.
async fn healthz(State(state): State<Arc<GatewayState>>, headers: HeaderMap) -> Response {
    let health = state.health();
    if state.presents_token(&headers) {
        return axum::Json(health).into_response();
    }
    axum::Json(json!({ "ok": health["ok"] })).into_response()
}

/// Prometheus text; when `gateway.auth_token` is set, only with it as a bearer token.
async fn metrics(State(state): State<Arc<GatewayState>>, headers: HeaderMap) -> Response {
    if !state.presents_token(&headers) {
        let challenge = [(header::WWW_AUTHENTICATE, "Bearer")];
        return (StatusCode::UNAUTHORIZED, challenge, "/metrics needs `Authorization: Bearer <gateway.auth_token>`")
            .into_response();
    }
    ([(header::CONTENT_TYPE, crate::metrics::CONTENT_TYPE)], crate::metrics::render()).into_response()
}
