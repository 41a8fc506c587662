//! The gateway in process, for the tests that talk to it as a client does: served on a
//! local port, with the dispatcher and agent runs against the fake OpenAI server, and a real
//! WebSocket client (tokio-tungstenite). Include `common/runner.rs` as `runner` beside it.

// Each test crate that includes this file uses a different part of it.
#![allow(dead_code)]

use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use ferry::agent::providers::ResolvedModel;
use ferry::agent::providers::openai::OpenAiProvider;
use ferry::agent::tools::{HostTools, ToolRegistry};
use ferry::agent::{AgentRunner, Agents, EventBus, RunnerParts};
use ferry::channels::ChannelRegistry;
use ferry::config::{Config, Environment};
use ferry::dispatch::{Dispatcher, DispatcherParts};
use ferry::gateway::{Gateway, GatewayParts};
use ferry::media::Media;
use ferry::routing::{SystemClock, ThreadLabels};
use ferry::sandbox::SandboxPaths;
use ferry::state::{Database, Stores};
use ferry_fakes::FakeOpenAi;
use futures::{SinkExt, StreamExt};
use serde_json::{Value, json};
use tokio::net::TcpStream;
use tokio_tungstenite::tungstenite::Message;
use tokio_tungstenite::{MaybeTlsStream, WebSocketStream};

use crate::runner::fake_model_runner;

/// Generous bound for waiting on explicit signals; never a measurement.
pub const PATIENCE: Duration = Duration::from_secs(20);

/// A gateway serving on a local port, and what its runs talk to; stops when dropped.
pub struct Gw {
    pub address: std::net::SocketAddr,
    pub fake: FakeOpenAi,
    pub dispatcher: Dispatcher,
    _shutdown: tokio::sync::oneshot::Sender<()>,
    _state: tempfile::TempDir,
    _workspace: tempfile::TempDir,
}

/// The gateway with the built-in tools, as `config` says.
pub async fn gateway(config: Config) -> Gw {
    start(config, false, false).await
}

/// [`gateway`] with the host tools as the daemon has them (files, `exec`, `process`),
/// sandboxed as `config.tools.sandbox` says, the `ferry` binary as the launcher.
pub async fn gateway_with_commands(config: Config) -> Gw {
    start(config, true, false).await
}

/// [`gateway_with_commands`] with media as the daemon has it (`config.media`, the store
/// under the state directory), and a model that takes images.
pub async fn gateway_with_media(config: Config) -> Gw {
    start(config, true, true).await
}

async fn start(config: Config, commands: bool, with_media: bool) -> Gw {
    let _ = tracing_subscriber::fmt().with_test_writer().with_env_filter("ferry=info").try_init();
    let fake = FakeOpenAi::start().await.unwrap();
    let state = tempfile::tempdir().unwrap();
    let workspace = tempfile::tempdir().unwrap();
    let database = Database::open(state.path()).await.unwrap();
    let channels = ChannelRegistry::new();
    let bus = EventBus::new();
    let mut tools = ToolRegistry::with_builtins();
    if commands {
        let paths = SandboxPaths {
            state_dir: state.path().to_owned(),
            agent_workspace: workspace.path().to_owned(),
            config_file: None,
            launcher: PathBuf::from(env!("CARGO_BIN_EXE_ferry")),
        };
        tools = tools.with_host_tools(HostTools::new(&config, paths));
    }
    let mut parts = fake_model_runner(&fake.url(), workspace.path(), &channels);
    if with_media {
        let env = Environment::new(Vec::<(String, String)>::new(), state.path());
        let media = Media::open(&state.path().join("media"), &config.media, &env).unwrap();
        parts.media = Some(Arc::new(media));
        parts.model = ResolvedModel {
            provider: Arc::new(OpenAiProvider::new("fake", &fake.url(), None)),
            model: "test".into(),
            context_window: None,
            vision: true,
            is_fallback_echo: false,
        }
        .into();
    }
    let runner = AgentRunner::new(RunnerParts { bus: bus.clone(), tools: tools.clone(), ..parts });
    // With [agents.list], every agent but the default gets a runner of its own whose model
    // is named after it, so the fake model sees which agent asks.
    let mut agents = Agents::new(config.agents.default_id(), runner);
    for id in config.agents.ids().into_iter().skip(1) {
        let mut parts = fake_model_runner(&fake.url(), workspace.path(), &channels);
        parts.model = ResolvedModel {
            provider: Arc::new(OpenAiProvider::new("fake", &fake.url(), None)),
            model: id.to_owned(),
            context_window: None,
            vision: false,
            is_fallback_echo: false,
        }
        .into();
        agents = agents.with(id, AgentRunner::new(RunnerParts { bus: bus.clone(), tools: tools.clone(), ..parts }));
    }
    let config = Arc::new(config);
    let dispatcher = Dispatcher::new(DispatcherParts {
        config: config.clone(),
        stores: Stores::sqlite(&database),
        agents,
        channels: channels.clone(),
        clock: Arc::new(SystemClock),
        thread_labels: ThreadLabels::new(),
    })
    .unwrap();
    let parts = GatewayParts {
        config,
        dispatcher: dispatcher.clone(),
        bus,
        channels,
        #[cfg(feature = "mcp")]
        mcp: None,
    };
    // An adapter's webhook would be mounted like this route.
    let extra = axum::Router::new().route("/extra", axum::routing::get(|| async { "mounted" }));
    let gateway = Gateway::start(parts).await.unwrap().with_routes(extra);
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let address = listener.local_addr().unwrap();
    let (shutdown, stop) = tokio::sync::oneshot::channel::<()>();
    tokio::spawn(gateway.serve(listener, async move {
        let _ = stop.await;
    }));
    Gw { address, fake, dispatcher, _shutdown: shutdown, _state: state, _workspace: workspace }
}

impl Gw {
    /// The state directory (the media store is its `media/`).
    pub fn state_dir(&self) -> &std::path::Path {
        self._state.path()
    }

    /// The agent workspace, where the file tools read and write.
    pub fn workspace(&self) -> &std::path::Path {
        self._workspace.path()
    }
}

/// A WebSocket client of the gateway, speaking its frames.
pub struct Client {
    pub ws: WebSocketStream<MaybeTlsStream<TcpStream>>,
    next_id: u64,
    /// Events that arrived while waiting for something else.
    pub events: Vec<Value>,
}

impl Client {
    /// Opens a socket without the handshake.
    pub async fn open(gw: &Gw) -> Self {
        let (ws, _) = tokio_tungstenite::connect_async(format!("ws://{}/ws", gw.address)).await.unwrap();
        Self { ws, next_id: 0, events: Vec::new() }
    }

    /// Opens a socket and passes the handshake as `client_id`.
    pub async fn connect(gw: &Gw, client_id: &str) -> (Self, Value) {
        let mut client = Self::open(gw).await;
        let hello = client.request("connect", json!({"client": {"id": client_id, "version": "test"}})).await;
        assert_eq!(hello["ok"], true, "{hello}");
        (client, hello["payload"].clone())
    }

    pub async fn send_text(&mut self, text: &str) {
        self.ws.send(Message::Text(text.into())).await.unwrap();
    }

    /// Sends a request and returns its response frame (events seen meanwhile are kept).
    pub async fn request(&mut self, method: &str, params: Value) -> Value {
        self.next_id += 1;
        let id = self.next_id.to_string();
        let frame = json!({"type": "req", "id": id, "method": method, "params": params});
        self.send_text(&frame.to_string()).await;
        self.response(&id).await
    }

    pub async fn response(&mut self, id: &str) -> Value {
        loop {
            let frame = self.frame().await.expect("the socket closed before the response");
            if frame["type"] == "res" && frame["id"] == id {
                return frame;
            }
            if frame["type"] == "event" {
                self.events.push(frame);
            }
        }
    }

    /// The next frame, or `None` once the socket closed.
    pub async fn frame(&mut self) -> Option<Value> {
        loop {
            let message = tokio::time::timeout(PATIENCE, self.ws.next()).await.expect("no frame in time")?;
            match message {
                Ok(Message::Text(text)) => return Some(serde_json::from_str(&text).unwrap()),
                Ok(Message::Close(_)) | Err(_) => return None,
                Ok(_) => continue,
            }
        }
    }

    /// Frames up to the gateway's close frame: what it answered, and the close code and
    /// reason (`None` if the socket ended without a close frame).
    pub async fn until_closed(&mut self) -> (Vec<Value>, Option<(u16, String)>) {
        let mut frames = Vec::new();
        loop {
            let message = tokio::time::timeout(PATIENCE, self.ws.next()).await.expect("no frame in time");
            match message {
                Some(Ok(Message::Text(text))) => frames.push(serde_json::from_str(&text).unwrap()),
                Some(Ok(Message::Close(frame))) => {
                    return (frames, frame.map(|frame| (u16::from(frame.code), frame.reason.to_string())));
                }
                Some(Ok(_)) => continue,
                Some(Err(_)) | None => return (frames, None),
            }
        }
    }

    /// The first event frame, among those kept or still to come, that `wanted` accepts;
    /// the others are kept.
    pub async fn event(&mut self, wanted: impl Fn(&Value) -> bool) -> Value {
        if let Some(at) = self.events.iter().position(&wanted) {
            return self.events.remove(at);
        }
        loop {
            let frame = self.frame().await.expect("the socket closed before the event");
            if frame["type"] != "event" {
                continue;
            }
            if wanted(&frame) {
                return frame;
            }
            self.events.push(frame);
        }
    }

    /// `chat` events of `run_id` up to and including its terminal one.
    pub async fn chat_events(&mut self, run_id: &str) -> Vec<Value> {
        let mut seen: Vec<Value> = Vec::new();
        let mut backlog = std::mem::take(&mut self.events).into_iter();
        loop {
            let frame = match backlog.next() {
                Some(frame) => frame,
                None => self.frame().await.expect("the socket closed before the final"),
            };
            if frame["event"] == "chat" && frame["payload"]["runId"] == run_id {
                let state = frame["payload"]["state"].as_str().unwrap_or_default().to_owned();
                seen.push(frame["payload"].clone());
                if state != "delta" {
                    self.events.extend(backlog);
                    return seen;
                }
            } else if frame["type"] == "event" {
                self.events.push(frame);
            }
        }
    }
}
