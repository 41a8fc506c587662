//! `ferry mcp list`: connects to every configured MCP server, as the gateway would, and
//! prints each one's state and tools. It starts its own connections, so it works whether a
//! gateway runs or not, and shows what a fresh start would see.

#[cfg(feature = "mcp")]
use std::io::Write;

#[cfg(not(feature = "mcp"))]
use ferry::config::Environment;
#[cfg(feature = "mcp")]
use ferry::{
    config::{Environment, McpConfig},
    mcp::{CONNECT_TIMEOUT, McpTools, Phase},
};

use crate::cli::GlobalArgs;
use crate::commands::load_config;

#[cfg(feature = "mcp")]
pub async fn list(global: &GlobalArgs, env: &Environment) -> anyhow::Result<()> {
    let loaded = load_config(global, env)?;
    let config: &McpConfig = &loaded.config.mcp;
    if config.servers.is_empty() {
        println!("no MCP servers configured (add [mcp.servers.NAME] to the config)");
        return Ok(());
    }
    let mcp = McpTools::start(config, env);
    mcp.settled(CONNECT_TIMEOUT).await;
    let statuses = mcp.status();
    mcp.shutdown().await;
    let mut stdout = std::io::stdout().lock();
    let mut failed = 0;
    for status in statuses {
        let server = &config.servers[&status.name];
        let target = match (&server.command, &server.url) {
            (Some(command), _) => std::iter::once(command.as_str())
                .chain(server.args.iter().map(String::as_str))
                .collect::<Vec<_>>()
                .join(" "),
            (None, Some(url)) => url.clone(),
            (None, None) => String::new(),
        };
        match &status.phase {
            Phase::Ready => {
                let protocol = status.protocol.as_deref().unwrap_or("?");
                writeln!(
                    stdout,
                    "{}: ready, {} tools ({}, protocol {protocol}): {target}",
                    status.name,
                    status.tools.len(),
                    status.transport
                )?;
                for tool in &status.tools {
                    writeln!(stdout, "  {tool}")?;
                }
            }
            Phase::Retrying { last_error, .. } => {
                failed += 1;
                writeln!(stdout, "{}: failed ({}): {target}: {last_error}", status.name, status.transport)?;
            }
            Phase::Starting | Phase::Stopped => {
                failed += 1;
                writeln!(
                    stdout,
                    "{}: no answer within {}s ({}): {target}",
                    status.name,
                    CONNECT_TIMEOUT.as_secs(),
                    status.transport
                )?;
            }
        }
    }
    stdout.flush()?;
    if failed > 0 {
        anyhow::bail!("{failed} MCP server(s) could not be reached");
    }
    Ok(())
}

/// A build without MCP has no servers to list: the config could not name one (it is refused
/// at load, `config::features`), and this says why.
#[cfg(not(feature = "mcp"))]
pub async fn list(global: &GlobalArgs, env: &Environment) -> anyhow::Result<()> {
    load_config(global, env)?;
    println!("no MCP servers: MCP {}", ferry::config::features::needs("mcp"));
    Ok(())
}
