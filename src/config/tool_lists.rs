//! The tool lists an operator writes (`[tools] profile`, `allow`, `deny`, at every level):
//! the names of Ferry's tools and their groups, and how MCP tools are named. Here, below the
//! agent, so the config can check a list as it loads; the agent's tool policy
//! (`agent::tools::policy`) applies them to a run.

use serde::{Deserialize, Serialize};

/// The tools of the `chat` profile: the built-ins, none of which touches the host.
pub(crate) const CHAT_TOOLS: &[&str] =
    &["current_time", "sessions_list", "message", "skill_read", "cron", "memory_search", "memory_get", "memory_write"];

/// The named groups of tools.
pub(crate) const GROUPS: &[(&str, &[&str])] = &[
    ("group:fs", &["read", "write", "edit"]),
    ("group:runtime", &["exec", "process"]),
    ("group:web", &["web_fetch", "web_search"]),
];

/// What separates server and tool in the name an MCP tool is offered under.
pub const MCP_SEPARATOR: &str = "__";
/// Every MCP server's tools.
pub(crate) const MCP_GROUP: &str = "group:mcp";

/// The server an MCP tool's name (`<server>__<tool>`) belongs to; `None` for Ferry's own
/// tools, none of which has `__` in its name.
pub fn mcp_server_of(tool: &str) -> Option<&str> {
    tool.split_once(MCP_SEPARATOR).map(|(server, _)| server).filter(|server| !server.is_empty())
}

/// Whether a list entry names MCP tools (`group:mcp`, `group:mcp:<server>`,
/// `<server>__<tool>`) and which server, if one.
pub(crate) fn mcp_entry(entry: &str) -> Option<Option<&str>> {
    if entry == MCP_GROUP {
        return Some(None);
    }
    if let Some(server) = entry.strip_prefix("group:mcp:") {
        return Some(Some(server));
    }
    mcp_server_of(entry).map(Some)
}

/// Every tool a list may name: the built-ins and the host tools of SPEC §6.8 (the groups').
pub(crate) fn known_tools() -> impl Iterator<Item = &'static &'static str> {
    CHAT_TOOLS.iter().chain(GROUPS.iter().flat_map(|(_, tools)| tools.iter()))
}

/// `[tools] profile`: the tools offered before `allow`/`deny`.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Deserialize, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum ToolProfile {
    /// The built-ins only (`message`, `sessions_list`, `current_time`, `skill_read`, `cron`, and
    /// the memory tools).
    #[default]
    Chat,
    /// Chat, plus files, commands and the web (`group:fs`, `group:runtime`, `group:web`).
    Coding,
    /// Every tool there is.
    Full,
}

/// One level's `allow` and `deny` lists: tool names or groups.
#[derive(Debug, Clone, Default, PartialEq, Eq, Deserialize, Serialize)]
#[serde(default, deny_unknown_fields)]
pub struct ToolLists {
    pub allow: Vec<String>,
    pub deny: Vec<String>,
}

impl ToolLists {
    pub fn is_empty(&self) -> bool {
        self.allow.is_empty() && self.deny.is_empty()
    }

    /// Why an entry of `allow` or `deny` names nothing, keyed by its list (`allow`, `deny`).
    /// `mcp_servers` are the configured MCP servers, whose tools the lists may name.
    pub fn check(&self, mcp_servers: &[&str]) -> Result<(), (&'static str, String)> {
        for (list, entries) in [("allow", &self.allow), ("deny", &self.deny)] {
            for entry in entries {
                let Some(server) = mcp_entry(entry) else { continue };
                if let Some(server) = server.filter(|server| !mcp_servers.contains(server)) {
                    let servers = if mcp_servers.is_empty() { "none".to_owned() } else { mcp_servers.join(", ") };
                    return Err((
                        list,
                        format!("`{entry}` names MCP server `{server}`, which is not configured; servers: {servers}"),
                    ));
                }
            }
            if let Some(unknown) = entries.iter().find(|entry| expand(entry).is_none() && mcp_entry(entry).is_none()) {
                let groups: Vec<&str> = GROUPS.iter().map(|(name, _)| *name).collect();
                return Err((
                    list,
                    format!(
                        "`{unknown}` is not a tool or a group of tools; tools: {}; groups: {}, group:mcp, \
                         group:mcp:<server>; an MCP server's tools: <server>__<tool>",
                        known_tools().copied().collect::<Vec<_>>().join(", "),
                        groups.join(", ")
                    ),
                ));
            }
        }
        Ok(())
    }
}

/// The tools one entry names, or `None` if it names none.
pub(crate) fn expand(entry: &str) -> Option<&'static [&'static str]> {
    if let Some((_, tools)) = GROUPS.iter().find(|(name, _)| *name == entry) {
        return Some(tools);
    }
    known_tools().find(|tool| **tool == entry).map(std::slice::from_ref)
}
