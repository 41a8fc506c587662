//! Several agents in one gateway (`[agents.list.<id>]`) and the bindings that say which
//! agent answers where (`[[bindings]]`).
//!
//! Without a list there is one agent, `main`, with `[agents.defaults]`: exactly the
//! single-agent configuration of before, whose session keys (`agent:main:…`) and workspace
//! (`<state_dir>/workspace`) stay where they were.

use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

use super::error::Violation;
use super::schema::{AgentSettings, AgentsConfig, Config};
use crate::agent::tools::{ToolLists, ToolProfile};

/// The agent of a configuration without `[agents.list]`, and the one a list falls back to.
pub const MAIN_AGENT: &str = "main";

/// The longest agent or account id: they are parts of session keys and of URL paths.
pub const MAX_ID_CHARS: usize = 64;

/// `[agents.list.<id>.tools]`: the agent's own tool profile and lists. The profile replaces
/// `tools.profile`; `allow` / `deny` apply after `[tools]`'s, before the channel's.
#[derive(Debug, Clone, Default, PartialEq, Deserialize, Serialize)]
#[serde(default, deny_unknown_fields)]
pub struct AgentToolsConfig {
    #[serde(skip_serializing_if = "Option::is_none")]
    pub profile: Option<ToolProfile>,
    pub allow: Vec<String>,
    pub deny: Vec<String>,
}

impl AgentToolsConfig {
    pub fn lists(&self) -> ToolLists {
        ToolLists { allow: self.allow.clone(), deny: self.deny.clone() }
    }
}

/// Which sessions the `sessions_list` tool shows an agent.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Deserialize, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum SessionsVisibility {
    /// Only its own: another agent's conversations are another team's business.
    #[default]
    Agent,
    /// Every agent's.
    All,
}

/// One `[[bindings]]` entry: chats that `match` are answered by `agent`.
#[derive(Debug, Clone, PartialEq, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct BindingConfig {
    pub agent: String,
    #[serde(rename = "match")]
    pub matches: BindingMatch,
}

/// What a binding matches; every key given must match. The most specific binding wins:
/// `peer` > `thread`/`topic` > `guild`/`team` > `account` > `channel`.
#[derive(Debug, Clone, Default, PartialEq, Eq, Hash, Deserialize, Serialize)]
#[serde(default, deny_unknown_fields)]
pub struct BindingMatch {
    /// `telegram`, `discord`, `slack` or `webchat`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub channel: Option<String>,
    /// An account id of the channel (`default` for the single-account form).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub account: Option<String>,
    /// A DM sender's id, or a group's or channel's id.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub peer: Option<String>,
    /// A Discord guild id.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub guild: Option<String>,
    /// A Slack team (workspace) id.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub team: Option<String>,
    /// A Discord or Slack thread id.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub thread: Option<String>,
    /// A Telegram forum topic id.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub topic: Option<String>,
}

impl BindingMatch {
    /// The guild or team: both name the chat's workspace.
    pub fn space(&self) -> Option<&str> {
        self.guild.as_deref().or(self.team.as_deref())
    }

    /// The thread or topic: both name a conversation inside a chat.
    pub fn thread(&self) -> Option<&str> {
        self.thread.as_deref().or(self.topic.as_deref())
    }

    /// The keys set, as `channel = "slack", peer = "C1"`, for messages about the binding.
    pub fn describe(&self) -> String {
        let keys = [
            ("channel", &self.channel),
            ("account", &self.account),
            ("peer", &self.peer),
            ("guild", &self.guild),
            ("team", &self.team),
            ("thread", &self.thread),
            ("topic", &self.topic),
        ];
        let set: Vec<String> =
            keys.iter().filter_map(|(key, value)| value.as_ref().map(|value| format!("{key} = {value:?}"))).collect();
        set.join(", ")
    }
}

/// One agent as it runs: its id and its settings, with the workspace worked out.
#[derive(Debug, Clone, PartialEq)]
pub struct ResolvedAgent {
    pub id: String,
    pub settings: AgentSettings,
    /// `workspace` as set, else the agent's default place (see [`AgentSettings::workspace`]).
    pub workspace: PathBuf,
}

impl ResolvedAgent {
    /// What people call the agent: its `name`, else its id.
    pub fn display_name(&self) -> &str {
        self.settings.name.as_deref().unwrap_or(&self.id)
    }
}

impl AgentsConfig {
    /// Every agent, the default one first; the workspaces are under `state_dir` unless set.
    pub fn resolved(&self, state_dir: &Path) -> Vec<ResolvedAgent> {
        let default = self.default_id();
        if self.list.is_empty() {
            let workspace = self.defaults.workspace.clone().unwrap_or_else(|| default_workspace(state_dir, MAIN_AGENT));
            return vec![ResolvedAgent { id: MAIN_AGENT.to_owned(), settings: self.defaults.clone(), workspace }];
        }
        let mut agents: Vec<ResolvedAgent> = self
            .list
            .iter()
            .map(|(id, settings)| {
                // `main` keeps the single-agent workspace, wherever the defaults put it.
                let inherited = if id == MAIN_AGENT { self.defaults.workspace.clone() } else { None };
                let workspace = settings.workspace.clone().or(inherited);
                ResolvedAgent {
                    id: id.clone(),
                    settings: settings.clone(),
                    workspace: workspace.unwrap_or_else(|| default_workspace(state_dir, id)),
                }
            })
            .collect();
        agents.sort_by_key(|agent| agent.id != default);
        agents
    }

    /// The agent that answers where no binding matches: the one marked `default = true`,
    /// else `main`, else the only one listed (validation refuses any other list).
    pub fn default_id(&self) -> &str {
        if let Some((id, _)) = self.list.iter().find(|(_, agent)| agent.default) {
            return id;
        }
        if self.list.len() == 1
            && let Some((id, _)) = self.list.first()
        {
            return id;
        }
        MAIN_AGENT
    }

    /// The settings of the agent `id`: its entry, or the defaults (for `main` without a
    /// list, or an id the config does not have).
    pub fn settings_of(&self, id: &str) -> &AgentSettings {
        self.list.get(id).unwrap_or(&self.defaults)
    }

    /// Whether `id` names an agent of this configuration.
    pub fn has(&self, id: &str) -> bool {
        if self.list.is_empty() { id == MAIN_AGENT } else { self.list.contains_key(id) }
    }

    /// The agent ids, the default first.
    pub fn ids(&self) -> Vec<&str> {
        if self.list.is_empty() {
            return vec![MAIN_AGENT];
        }
        let default = self.default_id();
        let mut ids: Vec<&str> = self.list.keys().map(String::as_str).collect();
        ids.sort_by_key(|id| *id != default);
        ids
    }
}

/// Where an agent's workspace is unless its config names one: `main` keeps the single-agent
/// place, so an existing install finds its bootstrap files and skills where they were.
pub fn default_workspace(state_dir: &Path, id: &str) -> PathBuf {
    if id == MAIN_AGENT { state_dir.join("workspace") } else { state_dir.join("workspaces").join(id) }
}

/// An agent or account id is a session key part and a URL path segment: lowercase ASCII
/// letters, digits, `-` and `_`.
pub fn valid_id(id: &str) -> bool {
    !id.is_empty()
        && id.len() <= MAX_ID_CHARS
        && id.bytes().all(|byte| byte.is_ascii_lowercase() || byte.is_ascii_digit() || byte == b'-' || byte == b'_')
}

/// The rule [`valid_id`] checks, for error messages.
pub const ID_RULE: &str = "must be 1-64 lowercase letters, digits, '-' or '_'";

/// The agents' own rules: ids, one default, one workspace each, and keys that only mean
/// something in a listed agent.
pub(super) fn validate_agents(config: &Config) -> Result<(), Violation> {
    let agents = &config.agents;
    let defaults = &agents.defaults;
    for (key, set) in
        [("name", defaults.name.is_some()), ("default", defaults.default), ("tools", defaults.tools.is_some())]
    {
        if set {
            return Err(Violation::new(
                format!("agents.defaults.{key}"),
                "belongs in an agent's own table ([agents.list.<id>]), not in the defaults",
            ));
        }
    }
    let marked: Vec<&String> = agents.list.iter().filter(|(_, agent)| agent.default).map(|(id, _)| id).collect();
    if let [first, second, ..] = marked.as_slice() {
        return Err(Violation::new(
            format!("agents.list.{second}.default"),
            format!("only one agent can be the default, and agents.list.{first} already is"),
        ));
    }
    if agents.list.len() > 1 && marked.is_empty() && !agents.list.contains_key(MAIN_AGENT) {
        return Err(Violation::new(
            "agents.list",
            format!(
                "which agent answers where no binding matches? Set default = true on one of {}, or name one \"{MAIN_AGENT}\"",
                agents.list.keys().map(|id| format!("{id:?}")).collect::<Vec<_>>().join(", ")
            ),
        ));
    }
    // One lane of runs serves every agent: a limit of one agent's own would be ignored.
    if let Some((id, agent)) = agents.list.iter().find(|(_, agent)| agent.max_concurrent != defaults.max_concurrent) {
        return Err(Violation::new(
            format!("agents.list.{id}.max_concurrent"),
            format!(
                "is {} but runs share one gateway-wide limit: set agents.defaults.max_concurrent ({})",
                agent.max_concurrent, defaults.max_concurrent
            ),
        ));
    }
    if let Some(id) = agents.list.keys().find(|id| !valid_id(id)) {
        return Err(Violation::new(format!("agents.list.{id}"), format!("the agent id {id:?} {ID_RULE}")));
    }
    // Compared as they will be, under a stand-in for the state directory.
    let resolved = agents.resolved(Path::new("<state_dir>"));
    for (index, agent) in resolved.iter().enumerate() {
        if let Some(other) = resolved[..index].iter().find(|other| other.workspace == agent.workspace) {
            let (first, second) = if agents.list.get_index_of(&other.id) < agents.list.get_index_of(&agent.id) {
                (&other.id, &agent.id)
            } else {
                (&agent.id, &other.id)
            };
            return Err(Violation::new(
                format!("agents.list.{second}.workspace"),
                format!(
                    "{} is agents.list.{first}'s workspace too; each agent needs its own",
                    agent.workspace.display()
                ),
            ));
        }
    }
    Ok(())
}
