//! Several agents in one gateway (`[agents.list.<id>]`) and the bindings that say which
//! agent answers where (`[[bindings]]`).
//!
//! Without a list there is one agent, `main`, with `[agents.defaults]`: exactly the
//! single-agent configuration of before, whose session keys (`agent:main:…`) and workspace
//! (`<state_dir>/workspace`) stay where they were.

use std::path::{Path, PathBuf};

use indexmap::IndexMap;
use serde::{Deserialize, Serialize};

use super::human_delay::HumanDelay;
use super::model_choice::ModelSetting;
use super::tool_lists::{ToolLists, ToolProfile};
use crate::types::ThinkingLevel;

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

#[derive(Debug, Clone, Default, PartialEq, Deserialize, Serialize)]
#[serde(default, deny_unknown_fields)]
pub struct AgentsConfig {
    /// How every agent runs unless its own entry says otherwise.
    pub defaults: AgentSettings,
    /// Agents by id (`[agents.list.<id>]`), each starting from `defaults`. Empty: one agent,
    /// `main`, with the defaults (see [`AgentsConfig::resolved`]).
    #[serde(skip_serializing_if = "IndexMap::is_empty")]
    pub list: IndexMap<String, AgentSettings>,
}

/// How an agent runs: `[agents.defaults]`, and each `[agents.list.<id>]` (which starts as a
/// copy of the defaults, see `config::inherit`). `name`, `default` and `tools` mean something
/// only in a listed agent.
#[derive(Debug, Clone, PartialEq, Deserialize, Serialize)]
#[serde(default, deny_unknown_fields)]
pub struct AgentSettings {
    /// What people call the agent (`ferry agents list`, the web chat's agent picker).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub name: Option<String>,
    /// The agent that answers where no binding matches. At most one; without any, `main`,
    /// or the only agent listed.
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    pub default: bool,
    /// The agent's own tool profile and lists, on top of `[tools]`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub tools: Option<AgentToolsConfig>,
    /// `PROVIDER/MODEL`, e.g. `openai/gpt-4o-mini`, or `{ primary, fallbacks }`. Unset: a
    /// provider from the environment (`OPENAI_API_KEY`, `ANTHROPIC_API_KEY`), else the
    /// offline echo provider.
    pub model: Option<ModelSetting>,
    /// The models `/model` may choose (`PROVIDER/MODEL`); empty means the primary and its
    /// fallbacks.
    pub models: Vec<String>,
    /// How hard models think unless a session chose otherwise (`/think`).
    pub thinking: ThinkingLevel,
    /// A run longer than this is aborted.
    pub timeout_seconds: u64,
    /// A model stream that sends nothing for this long is aborted.
    pub model_idle_timeout_seconds: u64,
    /// A model call that fails for a passing reason after part of its reply was shown is
    /// asked again twice: after this many milliseconds, then after twice as many.
    pub model_retry_after_output_ms: u64,
    /// Model ↔ tool rounds in one run before the model must answer without tools.
    pub max_tool_rounds: u32,
    /// The most assistant text one run may produce; the model is stopped there and the user
    /// told the reply was cut, so a runaway reply cannot fill memory, the transcript or a chat.
    pub max_reply_chars: usize,
    /// Runs in flight at once across all sessions (the global lane).
    pub max_concurrent: u32,
    /// Send the reply in blocks as it streams instead of one message at the end.
    pub block_streaming: bool,
    pub block_streaming_break: BlockStreamingBreak,
    pub block_streaming_chunk: BlockStreamingChunk,
    pub block_streaming_coalesce: BlockStreamingCoalesce,
    /// A pause before each block after the first, so replies read like typing.
    pub human_delay: HumanDelay,
    /// Bootstrap files (AGENTS.md, SOUL.md…), skills and the file tools' root. Default:
    /// `<state_dir>/workspace` for `main`, `<state_dir>/workspaces/<id>` for another agent;
    /// never inherited from `agents.defaults` by a listed agent (two agents never share one).
    pub workspace: Option<PathBuf>,
    pub compaction: CompactionConfig,
    /// Which sessions the `sessions_list` tool shows the agent: its own (`agent`, the
    /// default), or every agent's (`all`).
    pub sessions_visibility: SessionsVisibility,
    /// The IANA zone the agent's users live in (`"Europe/Berlin"`): what "at 9" means to
    /// `/remind` and the `cron` tool, and the zone scheduled prompts tell the time in.
    /// Unset: the host's zone.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub user_timezone: Option<String>,
    /// The agent speaking first when `HEARTBEAT.md` asks it to (off unless `every` is set).
    #[serde(skip_serializing_if = "super::cron_schema::HeartbeatConfig::is_off")]
    pub heartbeat: super::cron_schema::HeartbeatConfig,
}

impl Default for AgentSettings {
    fn default() -> Self {
        Self {
            name: None,
            default: false,
            tools: None,
            model: None,
            models: Vec::new(),
            thinking: ThinkingLevel::Off,
            timeout_seconds: 600,
            model_idle_timeout_seconds: 120,
            model_retry_after_output_ms: 10_000,
            max_tool_rounds: 20,
            max_reply_chars: 200_000,
            max_concurrent: 4,
            block_streaming: false,
            block_streaming_break: BlockStreamingBreak::TextEnd,
            block_streaming_chunk: BlockStreamingChunk::default(),
            block_streaming_coalesce: BlockStreamingCoalesce::default(),
            human_delay: HumanDelay::Off,
            workspace: None,
            compaction: CompactionConfig::default(),
            sessions_visibility: SessionsVisibility::Agent,
            user_timezone: None,
            heartbeat: Default::default(),
        }
    }
}

/// When a streamed block is flushed to the chat.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum BlockStreamingBreak {
    /// At every end of a text part (before a tool call, say).
    TextEnd,
    /// Only when the whole assistant message is done.
    MessageEnd,
}

/// How the growing reply is cut into blocks.
#[derive(Debug, Clone, PartialEq, Deserialize, Serialize)]
#[serde(default, deny_unknown_fields)]
pub struct BlockStreamingChunk {
    pub min_chars: usize,
    pub max_chars: usize,
    /// The first kind of break tried; the chunker falls back through the finer ones.
    pub break_preference: BreakPreference,
}

impl Default for BlockStreamingChunk {
    fn default() -> Self {
        Self { min_chars: 800, max_chars: 1200, break_preference: BreakPreference::Paragraph }
    }
}

/// Where a block may end, coarsest first.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum BreakPreference {
    Paragraph,
    Newline,
    Sentence,
}

#[derive(Debug, Clone, PartialEq, Deserialize, Serialize)]
#[serde(default, deny_unknown_fields)]
pub struct BlockStreamingCoalesce {
    /// Blocks arriving closer together than this are merged into one message.
    pub idle_ms: u64,
}

impl Default for BlockStreamingCoalesce {
    fn default() -> Self {
        Self { idle_ms: 1000 }
    }
}

#[derive(Debug, Clone, PartialEq, Deserialize, Serialize)]
#[serde(default, deny_unknown_fields)]
pub struct CompactionConfig {
    /// Tokens kept free below the context window; crossing the line triggers compaction.
    pub reserve_tokens: u32,
}

impl Default for CompactionConfig {
    fn default() -> Self {
        Self { reserve_tokens: 20_000 }
    }
}
