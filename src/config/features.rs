//! The cargo features this ferry was built with, and what a config asks of them.
//!
//! Each heavy capability (PostgreSQL, images, PDFs, the web tools, MCP, the sandbox) is a
//! cargo feature, so an operator who needs only Telegram builds a much smaller binary. A
//! config that asks for a capability left out of the build is refused where it says so
//! (`state.backend = "postgres"`, an `[mcp.servers]` entry, `[tools.web.search]`), by
//! `ferry config check` and at start-up alike, naming the feature to build with: the
//! capability is never silently missing. Where the config only implies it (a tools profile
//! that includes the web tools, a model that reads images), a warning says what is not
//! offered and why.

use super::error::Violation;
use super::schema::{Config, SandboxMode, Vision};
use super::tool_lists::ToolProfile;

/// One cargo feature: its name, and whether this build has it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Feature {
    /// The name to pass to `cargo build --features`.
    pub name: &'static str,
    /// Whether this binary was built with it.
    pub built: bool,
}

/// Every optional capability, in the order `ferry config check` lists them (README's table
/// says what each brings).
pub const FEATURES: [Feature; 9] = [
    Feature { name: "telegram", built: cfg!(feature = "telegram") },
    Feature { name: "discord", built: cfg!(feature = "discord") },
    Feature { name: "slack", built: cfg!(feature = "slack") },
    Feature { name: "postgres", built: cfg!(feature = "postgres") },
    Feature { name: "media", built: cfg!(feature = "media") },
    Feature { name: "pdf", built: cfg!(feature = "pdf") },
    Feature { name: "web", built: cfg!(feature = "web") },
    Feature { name: "mcp", built: cfg!(feature = "mcp") },
    Feature { name: "sandbox", built: cfg!(feature = "sandbox") },
];

/// The one line that says a setting needs a feature this build lacks.
pub fn needs(feature: &str) -> String {
    format!("needs a ferry built with --features {feature} (this one was built without it)")
}

/// Whether this build has the named feature; an unknown name is not built.
pub fn built(name: &str) -> bool {
    FEATURES.iter().any(|feature| feature.name == name && feature.built)
}

/// Settings that cannot work without a feature this build lacks: the first is an error.
pub fn validate(config: &Config) -> Result<(), Violation> {
    if !built("postgres") && config.state.backend == super::StateBackendKind::Postgres {
        return Err(Violation::new("state.backend", format!("\"postgres\" {}", needs("postgres"))));
    }
    if !built("mcp")
        && let Some(name) = config.mcp.servers.keys().next()
    {
        return Err(Violation::new(format!("mcp.servers.{name}"), needs("mcp")));
    }
    if !built("web") && config.tools.web.search.is_some() {
        return Err(Violation::new("tools.web.search", needs("web")));
    }
    Ok(())
}

/// Capabilities the config implies but this build lacks: valid, and said once.
pub fn warnings(config: &Config) -> Vec<Violation> {
    let mut found = Vec::new();
    let offers = |names: &[&str]| offered_anywhere(config, names);
    if !built("web") && offers(&["web_fetch", "web_search", "group:web"]) {
        found.push(Violation::new(
            "tools.profile",
            format!("web_fetch and web_search are not offered: the web tools {}", needs("web")),
        ));
    }
    if !built("sandbox")
        && config.tools.sandbox.mode != SandboxMode::Off
        && offers(&["exec", "process", "group:runtime"])
    {
        found.push(Violation::new(
            "tools.sandbox.mode",
            format!("sandboxed sessions are not offered exec and process: the sandbox {}", needs("sandbox")),
        ));
    }
    if !built("media")
        && let Some(name) =
            config.models.providers.iter().find(|(_, provider)| reads_images(&provider.vision)).map(|(name, _)| name)
    {
        found.push(Violation::new(
            format!("models.providers.{name}.vision"),
            format!("images reach the model as one-line notes: decoding and resizing them {}", needs("media")),
        ));
    }
    found
}

/// Whether a tools profile (`[tools]` or an agent's own) that is not `chat`, or an `allow`
/// list, offers one of `names` (tools or groups).
fn offered_anywhere(config: &Config, names: &[&str]) -> bool {
    let agents = std::iter::once(&config.agents.defaults).chain(config.agents.list.values());
    let agent_tools = agents.filter_map(|agent| agent.tools.as_ref());
    let profiles = std::iter::once(config.tools.profile).chain(agent_tools.clone().filter_map(|tools| tools.profile));
    let allows = config.tools.allow.iter().chain(agent_tools.flat_map(|tools| tools.allow.iter()));
    profiles.into_iter().any(|profile| profile != ToolProfile::Chat)
        || allows.into_iter().any(|entry| names.contains(&entry.as_str()))
}

fn reads_images(vision: &Vision) -> bool {
    match vision {
        Vision::All(all) => *all,
        Vision::Models(models) => !models.is_empty(),
    }
}
