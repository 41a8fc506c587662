//! `ferry agent`: one agent turn, its reply streamed to stdout. It goes through a running
//! gateway when one answers at the configured address (so the run joins the daemon's
//! lanes and sessions), and runs embedded in this process otherwise. Stderr carries
//! warnings and errors (and says when a gateway is used); `-v` adds INFO lines, among them
//! that the run is embedded.

use std::io::Write;
use std::path::Path;
use std::time::Duration;

use anyhow::{Context, bail};
use ferry::agent::tools::{HostTools, ToolPolicy};
use ferry::agent::{AbortReason, AgentRunner, EventBus, RunRequest, RunSettings, RunStatus, RunnerParts};
use ferry::channels::ChannelRegistry;
use ferry::config::{Config, Environment, LoadedConfig, ResolvedAgent};
use ferry::gateway::client::{ClientError, GatewayClient};
#[cfg(feature = "mcp")]
use ferry::mcp::McpTools;
use ferry::models::{ModelCatalog, ModelRouter};
use ferry::session::{catalog_for, run_in_session};
use ferry::state;
use serde_json::{Value, json};
use tokio::sync::mpsc;

use crate::cli::{AgentArgs, GlobalArgs};
use crate::commands::{ECHO_WARNING, load_config, sandbox_paths};

/// How long to look for a running gateway before running embedded.
const GATEWAY_CONNECT_TIMEOUT: Duration = Duration::from_secs(2);

pub async fn agent(global: &GlobalArgs, args: AgentArgs, env: &Environment) -> anyhow::Result<()> {
    let loaded = load_config(global, env)?;
    loaded.log_source();
    if args.timeout == Some(0) {
        bail!("--timeout must be at least 1 second");
    }
    let config = &loaded.config;
    let limit = config.messages.max_inbound_chars;
    if let Some(chars) = ferry::routing::too_long(&args.message, limit) {
        bail!("the message is {chars} characters; messages.max_inbound_chars allows {limit}");
    }
    let url = gateway_url(config);
    let token = config.gateway.auth_token.as_ref().map(|token| token.expose().to_owned());
    let client_id = format!("cli-{}", uuid::Uuid::new_v4());
    let connected =
        tokio::time::timeout(GATEWAY_CONNECT_TIMEOUT, GatewayClient::connect(&url, token.as_deref(), &client_id));
    match connected.await {
        Ok(Ok(client)) => {
            eprintln!("ferry: using the gateway at {url}");
            via_gateway(client, args).await
        }
        Ok(Err(ClientError::Refused { code, message })) => {
            bail!("the gateway at {url} refused the connection ({code}: {message}); check gateway.auth_token")
        }
        Ok(Err(error)) => {
            tracing::debug!(%error, "no gateway answered");
            tracing::info!(%url, "no gateway running; running the agent embedded");
            embedded(&loaded, args, env).await
        }
        Err(_) => {
            tracing::warn!(%url, "the gateway did not answer in time; running the agent embedded");
            embedded(&loaded, args, env).await
        }
    }
}

/// Where a local gateway listens, per the config.
fn gateway_url(config: &Config) -> String {
    let host = match config.gateway.bind.as_str() {
        "0.0.0.0" | "localhost" => "127.0.0.1".to_owned(),
        "::" => "[::1]".to_owned(),
        other if other.contains(':') => format!("[{other}]"),
        other => other.to_owned(),
    };
    format!("ws://{host}:{}/ws", config.gateway.port)
}

/// The run through the gateway: `agent`, then its events until it ends. Ctrl-C asks the
/// gateway to stop it.
async fn via_gateway(mut client: GatewayClient, args: AgentArgs) -> anyhow::Result<()> {
    let run_id = uuid::Uuid::new_v4().to_string();
    // The operator's own session, as in embedded mode; not the per-client session a web chat
    // browser gets (a fresh client id each time would start a new conversation every call).
    // Without --session, the gateway picks the agent's main session (the default agent's
    // when --agent is not given either).
    let mut params = json!({"message": args.message, "idempotencyKey": run_id});
    if let Some(session) = &args.session {
        params["sessionKey"] = json!(session);
    }
    if let Some(agent) = &args.agent {
        params["agentId"] = json!(agent);
    }
    if let Some(timeout) = args.timeout {
        params["timeout"] = json!(timeout);
    }
    let accepted = client.call("agent", params).await.context("starting the run on the gateway")?;
    let session_key =
        accepted["sessionKey"].as_str().map(str::to_owned).context("the gateway accepted the run without a session")?;
    let mut printer = Printer::new(args.json);
    // The run that answers: ours, or one our message was collected into.
    let mut answering = run_id.clone();
    let mut stopping = false;
    loop {
        let event = tokio::select! {
            event = client.next_event() => event.context("following the run")?,
            _ = tokio::signal::ctrl_c(), if !stopping => {
                stopping = true;
                eprintln!("ferry: stopping the run");
                client.call("chat.abort", json!({"sessionKey": session_key})).await.context("stopping the run")?;
                continue;
            }
        };
        if event["event"] != "agent" {
            continue;
        }
        let payload = &event["payload"];
        let merged =
            payload["data"]["mergedRunIds"].as_array().is_some_and(|ids| ids.iter().any(|id| *id == run_id.as_str()));
        if merged {
            answering = payload["runId"].as_str().unwrap_or_default().to_owned();
        }
        if payload["runId"] != answering.as_str() {
            continue;
        }
        printer.print(payload)?;
        if payload["stream"] == "lifecycle" {
            match payload["data"]["phase"].as_str() {
                Some("end") if payload["data"]["aborted"] == true => {
                    bail!("the run was aborted (stopped or timed out)")
                }
                Some("end") => return Ok(()),
                Some("error") => {
                    bail!("the run failed: {}", payload["data"]["error"].as_str().unwrap_or("unknown error"))
                }
                _ => {}
            }
        }
    }
}

/// Prints a run's events: the reply text to stdout, tool activity to stderr — or every
/// event as a JSON line.
struct Printer {
    json: bool,
    ended_with_newline: bool,
}

impl Printer {
    fn new(json: bool) -> Self {
        Self { json, ended_with_newline: true }
    }

    /// `event` in the shape of SPEC §6.3 (`{runId, seq, stream, ts, data, sessionKey}`).
    fn print(&mut self, event: &Value) -> anyhow::Result<()> {
        let mut stdout = std::io::stdout().lock();
        if self.json {
            writeln!(stdout, "{event}")?;
            return Ok(());
        }
        let data = &event["data"];
        match (event["stream"].as_str(), data["type"].as_str(), data["phase"].as_str()) {
            (Some("assistant"), Some("delta"), _) => {
                let delta = data["delta"].as_str().unwrap_or_default();
                write!(stdout, "{delta}")?;
                self.ended_with_newline = delta.ends_with('\n');
            }
            (Some("assistant"), Some("message_end"), _)
                if !data["text"].as_str().unwrap_or_default().is_empty() && !self.ended_with_newline =>
            {
                writeln!(stdout)?;
                self.ended_with_newline = true;
            }
            (Some("tool"), _, Some("start")) => eprintln!("[tool {}]", data["name"].as_str().unwrap_or_default()),
            (Some("tool"), _, Some("result")) if data["isError"] == true => {
                let first_line = data["result"].as_str().unwrap_or_default().lines().next().unwrap_or_default();
                eprintln!("[tool {} failed: {first_line}]", data["name"].as_str().unwrap_or_default());
            }
            _ => {}
        }
        stdout.flush()?;
        Ok(())
    }
}

/// The run in this process, on the state directory the daemon would use.
async fn embedded(loaded: &LoadedConfig, args: AgentArgs, env: &Environment) -> anyhow::Result<()> {
    let config = &loaded.config;
    let state_dir = state::resolve_state_dir(config, env)?;
    let agent = chosen_agent(config, &state_dir, &args)?;
    let table =
        if config.agents.list.is_empty() { "agents.defaults".to_owned() } else { format!("agents.list.{}", agent.id) };
    let catalog = ModelCatalog::resolve_agent(config, &table, &agent.settings, env)?;
    let model = catalog.primary();
    if model.is_fallback_echo {
        tracing::warn!("{ECHO_WARNING}");
    }
    let workspace = agent.workspace.clone();
    let session_key = args.session.clone().unwrap_or_else(|| format!("agent:{}:main", agent.id)).to_lowercase();
    let policy = ToolPolicy::for_agent(config, &agent.settings);
    // One turn: its MCP servers' tools must be there before it starts.
    #[cfg(feature = "mcp")]
    let mcp = McpTools::start(&config.mcp, env);
    #[cfg(feature = "mcp")]
    mcp.settled(ferry::mcp::CONNECT_TIMEOUT).await;
    let tools = HostTools::registry(config, sandbox_paths(&loaded.source, &state_dir, &workspace)?)?;
    #[cfg(feature = "mcp")]
    let tools = tools.with_source(mcp.clone());
    if let Some(host) = tools.host() {
        host.check_sandbox(&policy).await;
    }
    let stores = state::Stores::open(config, &state_dir).await?;
    let store = stores.sessions.clone();

    tracing::info!(model = %model.label(), %session_key, "running one agent turn (embedded)");
    let router = ModelRouter::new(catalog).with_health(stores.health.clone()).await;
    let runner = AgentRunner::new(RunnerParts {
        model: router,
        tools: tools.clone(),
        bus: EventBus::new(),
        settings: RunSettings::from_config(&agent.settings),
        workspace,
        channels: ChannelRegistry::new(),
        sessions: catalog_for(store.clone(), &agent.id, agent.settings.sessions_visibility),
        hooks: ferry::hooks::Hooks::from_config(&config.hooks).build(),
        media: None,
        memory: None,
    });
    let mut request = RunRequest::new(session_key, args.message);
    request.timeout = args.timeout.map(Duration::from_secs);
    request.tools = policy.outside_chats();
    let cancel = request.cancel.clone();
    tokio::spawn(async move {
        if tokio::signal::ctrl_c().await.is_ok() {
            cancel.cancel();
        }
    });

    let (sender, mut events) = mpsc::unbounded_channel();
    let reset = config.session.reset.clone();
    let run =
        tokio::spawn(
            async move { run_in_session(&runner, store.as_ref(), &reset, request, Some(sender), async {}).await },
        );
    let mut printer = Printer::new(args.json);
    while let Some(event) = events.recv().await {
        printer.print(&serde_json::to_value(&event)?)?;
    }
    let outcome = run.await.context("the run task failed")?.context("loading the session")?;
    tools.shutdown();
    #[cfg(feature = "mcp")]
    mcp.shutdown().await;
    stores.close().await;
    match outcome.status {
        RunStatus::Completed => Ok(()),
        RunStatus::Aborted(AbortReason::Cancelled) => bail!("the run was cancelled"),
        RunStatus::Aborted(AbortReason::Timeout) => bail!("the run timed out"),
        RunStatus::Failed { error } => {
            let shown = outcome.payloads.iter().find(|p| p.is_error).map(|p| p.text.clone()).unwrap_or_default();
            bail!("{shown} ({error})")
        }
    }
}

/// The agent of an embedded run: `--agent`, else the agent `--session` names, else the
/// default agent; one the config does not have is refused, naming those it has.
fn chosen_agent(config: &Config, state_dir: &Path, args: &AgentArgs) -> anyhow::Result<ResolvedAgent> {
    let from_session = args.session.as_deref().and_then(|key| key.split(':').nth(1));
    let wanted = args.agent.as_deref().or(from_session).unwrap_or(config.agents.default_id()).to_lowercase();
    let agents = config.agents.resolved(state_dir);
    let ids: Vec<&str> = agents.iter().map(|agent| agent.id.as_str()).collect();
    let known = ids.join(", ");
    agents
        .iter()
        .find(|agent| agent.id == wanted)
        .cloned()
        .with_context(|| format!("there is no agent {wanted:?} (agents: {known})"))
}
