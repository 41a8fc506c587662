//! The `ferry` binary: parses the command line, loads the config, and hands off to the
//! library. Adapters are wired in by [`wiring`], the only place that names them.

mod cli;
mod wiring;

use std::process::ExitCode;

use anyhow::{Context, bail};
use clap::Parser;

use cli::{Cli, Command, ConfigCommand, LogFormatArg};
use ferry::config::{self, ConfigSource, Environment, LoadedConfig};
use ferry::logging::{self, LogFormat};
use ferry::state;

fn main() -> ExitCode {
    let cli = Cli::parse();
    let format = match cli.global.log_format {
        LogFormatArg::Pretty => LogFormat::Pretty,
        LogFormatArg::Json => LogFormat::Json,
    };
    let env = Environment::from_process();
    logging::init(format, env.var("RUST_LOG"));

    match run(cli, &env) {
        Ok(()) => ExitCode::SUCCESS,
        Err(error) => {
            eprintln!("error: {error:#}");
            ExitCode::FAILURE
        }
    }
}

fn run(cli: Cli, env: &Environment) -> anyhow::Result<()> {
    match cli.command {
        Command::Config(ConfigCommand::Check) => {
            let loaded = load_config(&cli.global, env)?;
            let state_dir = state::resolve_state_dir(&loaded.config, env)?;
            println!("config OK: {}", describe_source(&loaded.source));
            println!("state_dir: {}", state_dir.display());
            println!("channels enabled: {}", wiring::enabled_channels(&loaded.config).join(", "));
            Ok(())
        }
        Command::Config(ConfigCommand::Show) => {
            let mut loaded = load_config(&cli.global, env)?;
            // Show what will actually be used, including derived paths.
            let state_dir = state::resolve_state_dir(&loaded.config, env)?;
            let defaults = &mut loaded.config.agents.defaults;
            defaults.workspace.get_or_insert_with(|| state_dir.join("workspace"));
            loaded.config.state_dir = Some(state_dir);
            let rendered = config::render_redacted(&loaded.config).context("rendering the effective config")?;
            println!("# effective ferry config from {} (secrets shown as ***)", describe_source(&loaded.source));
            print!("{rendered}");
            Ok(())
        }
        Command::Gateway => not_yet("ferry gateway", "the gateway (WebSocket RPC, HTTP and channels)"),
        Command::Agent(_) => not_yet("ferry agent", "the agent loop"),
        Command::Pairing(_) => not_yet("ferry pairing", "DM pairing"),
        Command::Sessions(_) => not_yet("ferry sessions", "the session store"),
    }
}

/// Loads and validates the config, including the checks that depend on compiled adapters.
fn load_config(global: &cli::GlobalArgs, env: &Environment) -> anyhow::Result<LoadedConfig> {
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

fn not_yet(command: &str, capability: &str) -> anyhow::Result<()> {
    bail!("`{command}` is not available yet: this build of Ferry does not include {capability}")
}
