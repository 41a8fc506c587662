//! What each `ferry` subcommand does, once the command line is parsed.

use std::io::Write;
use std::sync::Arc;

use anyhow::{Context, bail};
use ferry::config::{self, Config, ConfigSource, DEFAULT_ACCOUNT, Environment, LoadedConfig};
use ferry::routing::{PairingStore, SystemClock};
use ferry::state;

use crate::cli::{GlobalArgs, PairingCommand};
use crate::wiring;

/// Said at start-up when no model is configured.
pub const ECHO_WARNING: &str = "no model is configured: using the offline echo provider, which repeats your message. \
     Set OPENAI_API_KEY (and OPENAI_BASE_URL for a compatible server) or ANTHROPIC_API_KEY, or configure \
     [models.providers] and agents.defaults.model";

/// Channels whose DMs can be paired; the web chat is open and has no pairing.
const PAIRING_CHANNELS: [&str; 3] = ["telegram", "discord", "slack"];

/// `ferry config check`: the config's source and what it enables on stdout; warnings (valid
/// settings that look like mistakes) on stderr, without failing the check.
pub fn config_check(global: &GlobalArgs, env: &Environment) -> anyhow::Result<()> {
    let loaded = load_config(global, env)?;
    let state_dir = state::resolve_state_dir(&loaded.config, env)?;
    println!("config OK: {}", describe_source(&loaded.source));
    println!("state_dir: {}", state_dir.display());
    println!("channels enabled: {}", wiring::enabled_channels(&loaded.config).join(", "));
    println!("{}", built_features());
    #[cfg(feature = "mcp")]
    check_mcp_programs(&loaded, env)?;
    if !loaded.config.mcp.servers.is_empty() {
        let names: Vec<&str> = loaded.config.mcp.servers.keys().map(String::as_str).collect();
        println!("mcp servers: {}", names.join(", "));
    }
    for warning in &loaded.warnings {
        eprintln!("warning: {warning}");
    }
    Ok(())
}

/// "features: telegram, …; not built: postgres (--features NAME to add)": what this binary
/// can do, so an operator sees before start-up which capability a build left out.
fn built_features() -> String {
    let (built, missing): (Vec<_>, Vec<_>) = config::features::FEATURES.iter().partition(|feature| feature.built);
    let names = |features: Vec<&config::features::Feature>| {
        features.iter().map(|feature| feature.name).collect::<Vec<_>>().join(", ")
    };
    if missing.is_empty() {
        format!("features: {}", names(built))
    } else {
        format!("features: {}; not built: {} (build with --features NAME to add one)", names(built), names(missing))
    }
}

/// Every local MCP server's program exists where starting it would look (its `PATH` is
/// Ferry's): a typo fails the check instead of a server that never starts.
#[cfg(feature = "mcp")]
fn check_mcp_programs(loaded: &LoadedConfig, env: &Environment) -> anyhow::Result<()> {
    for (name, server) in &loaded.config.mcp.servers {
        let Some(command) = &server.command else { continue };
        if let Err(why) = ferry::mcp::find_program(command, server.cwd.as_deref(), env.var("PATH")) {
            let violation = config::Violation::new(format!("mcp.servers.{name}.command"), why);
            return Err(loaded.error_at(violation).into());
        }
    }
    Ok(())
}

pub fn config_show(global: &GlobalArgs, env: &Environment) -> anyhow::Result<()> {
    let mut loaded = load_config(global, env)?;
    // Show what will actually be used, including derived paths.
    let state_dir = state::resolve_state_dir(&loaded.config, env)?;
    let agents = &mut loaded.config.agents;
    if agents.list.is_empty() {
        agents.defaults.workspace.get_or_insert_with(|| state_dir.join("workspace"));
    }
    for agent in agents.resolved(&state_dir) {
        if let Some(entry) = agents.list.get_mut(&agent.id) {
            entry.workspace = Some(agent.workspace);
        }
    }
    loaded.config.state_dir = Some(state_dir);
    let rendered = config::render_redacted(&loaded.config).context("rendering the effective config")?;
    println!("# effective ferry config from {} (secrets shown as ***)", describe_source(&loaded.source));
    print!("{rendered}");
    Ok(())
}

/// `ferry sessions list`: every session, most recent first, from the state database.
pub async fn sessions_list(global: &GlobalArgs, env: &Environment) -> anyhow::Result<()> {
    let loaded = load_config(global, env)?;
    let state_dir = state::resolve_state_dir(&loaded.config, env)?;
    let stores = state::Stores::open(&loaded.config, &state_dir).await?;
    let sessions = stores.sessions.list(usize::MAX).await;
    stores.close().await;
    let sessions = sessions?;
    if sessions.is_empty() {
        println!("no sessions yet");
        return Ok(());
    }
    let width = sessions.iter().map(|s| s.key.len()).max().unwrap_or(0).max("KEY".len());
    println!("{:<width$}  {:<20}  {:>10}  {:>10}", "KEY", "UPDATED (UTC)", "TOKENS IN", "TOKENS OUT");
    for session in sessions {
        println!(
            "{:<width$}  {:<20}  {:>10}  {:>10}",
            session.key,
            session.updated_at.format("%Y-%m-%d %H:%M:%S"),
            session.usage.input_tokens,
            session.usage.output_tokens,
        );
    }
    Ok(())
}

/// `ferry pairing list` / `ferry pairing approve CHANNEL CODE`, on the state database the
/// daemon uses (SQLite serializes the two processes' writes).
pub async fn pairing(global: &GlobalArgs, command: PairingCommand, env: &Environment) -> anyhow::Result<()> {
    let loaded = load_config(global, env)?;
    let state_dir = state::resolve_state_dir(&loaded.config, env)?;
    let stores = state::Stores::open(&loaded.config, &state_dir).await?;
    let store = PairingStore::new(stores.pairing.clone(), Arc::new(SystemClock));
    let result = match command {
        PairingCommand::List => pairing_list(&store).await,
        PairingCommand::Approve { channel, code } => pairing_approve(&store, &loaded.config, &channel, &code).await,
    };
    stores.close().await;
    result
}

async fn pairing_list(store: &PairingStore) -> anyhow::Result<()> {
    let pending = store.list().await?;
    if pending.is_empty() {
        println!("no pending pairing requests");
        return Ok(());
    }
    let mut stdout = std::io::stdout().lock();
    writeln!(
        stdout,
        "{:<9} {:<8}  {:<20} {:<20} {:<16} EXPIRES (UTC)",
        "CHANNEL", "CODE", "SENDER", "NAME", "REQUESTED (UTC)"
    )?;
    for request in pending {
        writeln!(
            stdout,
            "{:<9} {:<8}  {:<20} {:<20} {:<16} {}",
            request.channel,
            request.code,
            request.sender_id,
            request.sender_name.as_deref().unwrap_or("-"),
            request.created_at.format("%Y-%m-%d %H:%M"),
            request.expires_at.format("%Y-%m-%d %H:%M"),
        )?;
    }
    Ok(())
}

/// `channel` is a platform (`telegram`) for its account `default`, or `telegram:work` for
/// another account: where the code was issued, as `ferry pairing list` shows it.
async fn pairing_approve(store: &PairingStore, config: &Config, channel: &str, code: &str) -> anyhow::Result<()> {
    let channel = channel.to_lowercase();
    let (platform, account) = channel.split_once(':').unwrap_or((&channel, DEFAULT_ACCOUNT));
    if !PAIRING_CHANNELS.contains(&platform) {
        bail!("{channel:?} has no DM pairing: the channel must be one of {}", PAIRING_CHANNELS.join(", "));
    }
    let accounts = config.channels.account_ids(platform);
    if !accounts.contains(&account) {
        bail!("{platform} has no account {account:?} (accounts: {})", accounts.join(", "));
    }
    let channel = ferry::routing::pairing_scope(platform, account).into_owned();
    let approved = store.approve(&channel, code).await?;
    let name = approved.sender_name.map(|name| format!(" ({name})")).unwrap_or_default();
    println!("approved {}{name} on {channel}: they can talk to the bot in direct messages now", approved.sender_id);
    Ok(())
}

/// Loads and validates the config, including the checks that depend on compiled adapters.
pub fn load_config(global: &GlobalArgs, env: &Environment) -> anyhow::Result<LoadedConfig> {
    let loaded = config::load(global.config.as_deref(), env)?;
    wiring::check_against_adapters(&loaded.config).map_err(|violation| loaded.error_at(violation))?;
    tracing::debug!(source = ?loaded.source, config = ?loaded.config, "configuration loaded");
    Ok(loaded)
}

fn describe_source(source: &ConfigSource) -> String {
    match source {
        ConfigSource::File(path) => path.display().to_string(),
        ConfigSource::Defaults => "built-in defaults (no config file found)".to_owned(),
    }
}

/// What the sandbox must know about this installation: where workspaces go, the config
/// file to hide, and this binary, which runs as the sandbox launcher.
pub fn sandbox_paths(
    source: &ConfigSource,
    state_dir: &std::path::Path,
    workspace: &std::path::Path,
) -> anyhow::Result<ferry::sandbox::SandboxPaths> {
    let launcher = std::env::current_exe().context("finding the ferry binary (the sandbox launcher)")?;
    Ok(ferry::sandbox::SandboxPaths {
        state_dir: state_dir.to_path_buf(),
        agent_workspace: workspace.to_path_buf(),
        config_file: match source {
            ConfigSource::File(path) => Some(path.clone()),
            ConfigSource::Defaults => None,
        },
        launcher,
    })
}
