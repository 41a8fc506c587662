//! `ferry agents list`: the agents of the config, their models and workspaces, and which
//! bindings route chats to them — what an operator checks before pointing chats at them.

use std::fmt::Write as _;

use ferry::config::{Environment, ResolvedAgent};
use ferry::models::ModelCatalog;
use ferry::state;

use crate::cli::GlobalArgs;
use crate::commands::load_config;

pub fn list(global: &GlobalArgs, env: &Environment) -> anyhow::Result<()> {
    let loaded = load_config(global, env)?;
    let config = &loaded.config;
    let state_dir = state::resolve_state_dir(config, env)?;
    let default = config.agents.default_id();
    let mut text = String::new();
    for agent in config.agents.resolved(&state_dir) {
        let _ = writeln!(text, "{}", heading(&agent, agent.id == default));
        // As configured (no key needed to list it); unset, the model the environment gives.
        let chain: Vec<String> = match &agent.settings.model {
            Some(setting) => setting.chain().map(str::to_owned).collect(),
            None => {
                let catalog = ModelCatalog::resolve_agent(config, "agents.defaults", &agent.settings, env)?;
                catalog.chain.iter().map(|candidate| candidate.label()).collect()
            }
        };
        let _ = writeln!(text, "  model: {}", chain.join(" → "));
        let _ = writeln!(text, "  workspace: {}", agent.workspace.display());
        let bindings: Vec<String> = config
            .bindings
            .iter()
            .enumerate()
            .filter(|(_, binding)| binding.agent == agent.id)
            .map(|(index, binding)| format!("bindings[{index}]: {}", binding.matches.describe()))
            .collect();
        for binding in &bindings {
            let _ = writeln!(text, "  {binding}");
        }
        if agent.id == default {
            let _ = writeln!(text, "  and every chat no binding matches");
        } else if bindings.is_empty() {
            let _ = writeln!(text, "  no binding routes chats here (gateway clients may still name it)");
        }
    }
    print!("{text}");
    Ok(())
}

fn heading(agent: &ResolvedAgent, is_default: bool) -> String {
    let mut heading = agent.id.clone();
    if let Some(name) = &agent.settings.name {
        heading.push_str(&format!(" ({name})"));
    }
    if is_default {
        heading.push_str(" [default]");
    }
    heading
}
