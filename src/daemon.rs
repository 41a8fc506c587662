//! `ferry gateway`: builds the daemon from the config — model, state, dispatcher, channels,
//! gateway — serves until SIGINT/SIGTERM, then shuts down in order: stop taking
//! connections, let running replies finish (up to [`SHUTDOWN_GRACE`]), abort the rest.

use std::sync::Arc;
use std::time::Duration;

use anyhow::Context;
use std::path::Path;

use ferry::agent::tools::exec::Approvals;
use ferry::agent::tools::web::{FetchSettings, WebFetch};
use ferry::agent::tools::{CronTool, HostTools, MemoryGet, MemorySearch, MemoryWrite, ToolPolicy, ToolRegistry};
use ferry::agent::{AgentRunner, Agents, EventBus, RunSettings, RunnerParts};
use ferry::channels::ChannelRegistry;
use ferry::config::{self, Config, ConfigSource, Environment, ResolvedAgent};
use ferry::cron::CronJobs;
use ferry::cron::ticker::Ticker;
use ferry::dispatch::{Dispatcher, DispatcherParts};
use ferry::gateway::{Gateway, GatewayError, GatewayParts};
use ferry::hooks::{GatewayEvent, Hooks};
#[cfg(feature = "mcp")]
use ferry::mcp::McpTools;
use ferry::media::Media;
use ferry::memory::MemoryService;
use ferry::models::{ModelCatalog, ModelRouter};
use ferry::routing::SystemClock;
use ferry::session::catalog_for;
use ferry::state;
use ferry::types::schedule::{host_zone, parse_zone};
use tokio_util::sync::CancellationToken;

use crate::cli::GlobalArgs;
use crate::commands::{ECHO_WARNING, load_config, sandbox_paths};
use crate::wiring;

/// How long running replies may take to finish once a shutdown begins.
pub const SHUTDOWN_GRACE: Duration = Duration::from_secs(30);
/// How long gateway clients get to receive their last frames once runs are done.
const CONNECTION_CLOSE_PATIENCE: Duration = Duration::from_secs(5);
/// How often expired media is swept from the store: files live for days, so hourly keeps
/// the disk bounded without the sweep ever mattering to load.
const MEDIA_SWEEP_INTERVAL: Duration = Duration::from_secs(60 * 60);

pub async fn gateway(global: &GlobalArgs, env: &Environment) -> anyhow::Result<()> {
    let loaded = load_config(global, env)?;
    loaded.log_source();
    for warning in &loaded.warnings {
        tracing::warn!("{warning}");
    }
    let loaded_source = loaded.source.clone();
    let config = Arc::new(loaded.config);
    // First, so a port another process holds stops the start before anything is opened.
    let listener = Gateway::bind(&config).await.map_err(bind_failure)?;
    let address = listener.local_addr().context("reading the gateway's address")?;
    let state_dir = state::resolve_state_dir(&config, env)?;
    // In the background: a slow server holds up neither the start nor the channels.
    #[cfg(feature = "mcp")]
    let mcp = McpTools::start(&config.mcp, env);
    let mut stores = state::Stores::open(&config, &state_dir).await?;
    stores.start_leases(state::leases::LeaseTiming {
        lease: Duration::from_secs(config.state.lease_seconds),
        renew: Duration::from_secs(config.state.renew_seconds),
    });
    // The agent's files may come from URLs, fetched under web_fetch's rules and guard.
    let web = WebFetch::new(FetchSettings::from_config(&config.tools.web)).context("setting up the URL fetcher")?;
    let media = Media::open(&state_dir.join("media"), &config.media, env).context("setting up [media]")?.with_web(web);
    let media = Arc::new(media);
    let sweeping = CancellationToken::new();
    let sweeper = media.store().spawn_sweeper(MEDIA_SWEEP_INTERVAL, sweeping.clone());
    let mut memory = MemoryService::start(&config, stores.memory.clone(), env).context("setting up [memory]")?;
    let channels = ChannelRegistry::new();
    let bus = EventBus::new();
    let shared = SharedParts {
        config: &config,
        env,
        source: &loaded_source,
        state_dir: &state_dir,
        #[cfg(feature = "mcp")]
        mcp: &mcp,
        bus: &bus,
        channels: &channels,
        stores: &stores,
        // Plugins compiled into this binary would be registered here.
        hooks: Hooks::from_config(&config.hooks).build(),
        media: &media,
        memory: memory.as_ref(),
        approvals: Arc::new(Approvals::new(&config.tools.exec)),
    };
    let mut agents: Option<Agents> = None;
    let mut registries = Vec::new();
    for agent in config.agents.resolved(&state_dir) {
        let first = agents.as_ref().map(Agents::default_runner);
        let (runner, tools) = agent_runner(&shared, &agent, first).await?;
        registries.push(tools);
        agents = Some(match agents {
            None => Agents::new(agent.id.clone(), runner),
            Some(agents) => agents.with(agent.id.clone(), runner),
        });
    }
    let agents = agents.context("the config has no agent")?;
    if let Some(memory) = memory.as_mut() {
        memory.start_mirror(&config.agents.resolved(&state_dir));
    }
    let runner = agents.default_runner().clone();
    tracing::info!(
        model = %runner.router().catalog().primary().label(),
        agents = registries.len(),
        state = config.state.backend.as_str(),
        state_dir = %state_dir.display(),
        "starting the gateway"
    );
    let hooks = runner.hooks().clone();
    let dispatcher = Dispatcher::new(DispatcherParts {
        config: config.clone(),
        stores: stores.clone(),
        agents,
        channels: channels.clone(),
        clock: Arc::new(SystemClock),
        thread_labels: wiring::thread_labels(),
    })
    .context("setting up message routing")?;
    let gateway = Gateway::start(GatewayParts {
        config: config.clone(),
        dispatcher: dispatcher.clone(),
        bus,
        channels: channels.clone(),
        #[cfg(feature = "mcp")]
        mcp: Some(mcp.clone()),
    })
    .await?;
    let registry = channels;
    // Read before the channels start, run after: what they deliver meanwhile is journaled too
    // and must not be taken for a left-over and answered twice.
    let left_over = dispatcher.left_over().await.context("reading the queue journal")?;
    let routes = wiring::start_channels(&config, &dispatcher, &registry, &state_dir).await;
    let gateway = routes.into_iter().fold(gateway, Gateway::with_routes);
    dispatcher.resume(left_over).await;
    // Fires journaled from now on are new: the ticker starts after the left-overs were read.
    let ticker = Ticker {
        jobs: stores.jobs.clone(),
        inbound: stores.inbound.clone(),
        dispatcher: dispatcher.clone(),
        config: config.clone(),
    }
    .start();
    let memory_health = memory.as_ref().map(|memory| {
        let dispatcher = dispatcher.clone();
        memory.report_health(move |health| dispatcher.set_health_entry("memory", health))
    });
    if config.channels.webchat.enabled {
        tracing::info!("web chat: http://{address}/");
    }
    tracing::info!("gateway listening: ws://{address}/ws, health at http://{address}/healthz");
    hooks.gateway_start(GatewayEvent { address: address.to_string() });

    let draining = gateway.serve(listener, shutdown_signal()).await?;
    tracing::info!(running = dispatcher.scheduler().running(), "shutting down: no new connections");
    // Clients following a run stay connected until it finishes (or the grace period ends).
    let aborted = dispatcher.scheduler().shut_down(SHUTDOWN_GRACE).await;
    if aborted > 0 {
        tracing::warn!(aborted, "aborted runs that did not finish in time; their messages are answered on restart");
    }
    ticker.abort();
    if let Some(reporting) = memory_health {
        reporting.abort();
    }
    if let Some(memory) = memory {
        memory.stop().await;
    }
    // Background commands and MCP servers end with the daemon.
    registries.iter().for_each(ToolRegistry::shutdown);
    #[cfg(feature = "mcp")]
    mcp.shutdown().await;
    sweeping.cancel();
    let _ = sweeper.await;
    draining.close(CONNECTION_CLOSE_PATIENCE).await;
    hooks.gateway_stop(GatewayEvent { address: address.to_string() }).await;
    stores.close().await;
    tracing::info!("gateway stopped");
    Ok(())
}

/// What every agent's runner shares.
struct SharedParts<'a> {
    config: &'a Arc<Config>,
    env: &'a Environment,
    source: &'a ConfigSource,
    state_dir: &'a Path,
    #[cfg(feature = "mcp")]
    mcp: &'a Arc<McpTools>,
    bus: &'a EventBus,
    channels: &'a ChannelRegistry,
    stores: &'a state::Stores,
    hooks: Hooks,
    media: &'a Arc<Media>,
    /// Long-term memory, shared by every agent; `None` when `memory.enabled` is off.
    memory: Option<&'a MemoryService>,
    /// One place answers every agent's command approvals.
    approvals: Arc<Approvals>,
}

/// One agent's runner: its models, its tools (sandbox rooted in its workspace, its tool
/// policy for the start-up probe), its workspace, and the sessions its `sessions_list` sees.
/// Every agent after the first shares `first`'s model cooldowns.
async fn agent_runner(
    shared: &SharedParts<'_>,
    agent: &ResolvedAgent,
    first: Option<&AgentRunner>,
) -> anyhow::Result<(AgentRunner, ToolRegistry)> {
    let config = shared.config;
    let table =
        if config.agents.list.is_empty() { "agents.defaults".to_owned() } else { format!("agents.list.{}", agent.id) };
    let catalog = ModelCatalog::resolve_agent(config, &table, &agent.settings, shared.env)?;
    let model = catalog.primary();
    if model.is_fallback_echo {
        tracing::warn!(agent = %agent.id, "{ECHO_WARNING}");
    }
    let paths = sandbox_paths(shared.source, shared.state_dir, &agent.workspace)?;
    let host = HostTools::sharing(config, paths, shared.approvals.clone());
    let mut tools = HostTools::registry_with(host, config)?;
    let jobs = CronJobs::new(shared.stores.jobs.clone(), config.clone());
    tools.register(CronTool::new(jobs, agent.id.clone(), config.cron.scheduled_runs_may_schedule));
    let memory = shared.memory.map(|memory| {
        let tz =
            agent.settings.user_timezone.as_deref().and_then(|zone| parse_zone(zone).ok()).unwrap_or_else(host_zone);
        memory.for_agent(tz)
    });
    if let Some(memory) = &memory {
        tools.register(MemorySearch(memory.clone()));
        tools.register(MemoryGet(memory.clone()));
        tools.register(MemoryWrite(memory.clone()));
    }
    #[cfg(feature = "mcp")]
    let tools = tools.with_source(shared.mcp.clone());
    if let Some(host) = tools.host() {
        host.check_sandbox(&ToolPolicy::for_agent(config, &agent.settings)).await;
    }
    let sessions = catalog_for(shared.stores.sessions.clone(), &agent.id, agent.settings.sessions_visibility);
    tracing::info!(agent = %agent.id, model = %model.label(), workspace = %agent.workspace.display(), "agent ready");
    let router = match first {
        Some(first) => ModelRouter::new(catalog).sharing_cooldowns(first.router()),
        None => ModelRouter::new(catalog).with_health(shared.stores.health.clone()).await,
    };
    let runner = AgentRunner::new(RunnerParts {
        model: router,
        tools: tools.clone(),
        bus: shared.bus.clone(),
        settings: RunSettings::from_config(&agent.settings),
        workspace: agent.workspace.clone(),
        channels: shared.channels.clone(),
        sessions,
        hooks: shared.hooks.clone(),
        media: Some(shared.media.clone()),
        memory,
    });
    Ok((runner, tools))
}

/// A port that is already taken is the bind failure operators meet most (a second ferry, or
/// another server): said once, with the fix, instead of the OS error.
fn bind_failure(error: GatewayError) -> anyhow::Error {
    match &error {
        GatewayError::Bind { address, source } if source.kind() == std::io::ErrorKind::AddrInUse => anyhow::anyhow!(
            "{address} is in use (another ferry?); set gateway.port or {}",
            config::env_var_for("gateway.port")
        ),
        _ => error.into(),
    }
}

/// Resolves on SIGINT (Ctrl-C) or SIGTERM.
async fn shutdown_signal() {
    let interrupt = async {
        if let Err(error) = tokio::signal::ctrl_c().await {
            tracing::error!(%error, "cannot listen for Ctrl-C");
            std::future::pending::<()>().await;
        }
    };
    #[cfg(unix)]
    let terminate = async {
        match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()) {
            Ok(mut signal) => {
                signal.recv().await;
            }
            Err(error) => {
                tracing::error!(%error, "cannot listen for SIGTERM");
                std::future::pending::<()>().await;
            }
        }
    };
    #[cfg(not(unix))]
    let terminate = std::future::pending::<()>();
    tokio::select! {
        () = interrupt => tracing::info!("interrupted (SIGINT)"),
        () = terminate => tracing::info!("terminated (SIGTERM)"),
    }
}
