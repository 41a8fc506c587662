//! The shape of `ferry.toml`: every key, its type and its default (SPEC §2).
//!
//! Key names are a contract with operators and tools, so they are spelled here exactly as
//! in the spec, and every struct rejects keys it does not know: a typo is an error, never a
//! silently ignored setting. `config/default.toml` documents the same keys for people.

use std::collections::BTreeMap;
use std::path::PathBuf;

use indexmap::IndexMap;
use serde::{Deserialize, Serialize};

use super::Secret;
pub use super::agents_schema::{
    AgentSettings, AgentToolsConfig, AgentsConfig, BindingConfig, BindingMatch, BlockStreamingBreak,
    BlockStreamingChunk, BlockStreamingCoalesce, BreakPreference, CompactionConfig, ResolvedAgent, SessionsVisibility,
};
pub use super::channels_schema::{
    ChannelsConfig, DEFAULT_HISTORY_LIMIT, DiscordConfig, DmPolicy, GroupConfig, GroupPolicy, GuildConfig, SlackConfig,
    SlackMode, StreamingMode, TelegramConfig, TelegramMode, WebchatConfig,
};
pub use super::cron_schema::CronConfig;
pub use super::mcp_schema::{McpConfig, McpServerConfig};
pub use super::media_schema::{MediaConfig, TranscriptionConfig};
pub use super::memory_schema::{EmbeddingsConfig, MemoryConfig};
pub use super::state_schema::{DATABASE_URL_VAR, StateBackendKind, StateConfig};
pub use super::tool_lists::{ToolLists, ToolProfile};
pub use super::tools_schema::{ExecAsk, ExecConfig, SandboxConfig, SandboxMode, SandboxScope};
pub use crate::types::ThinkingLevel;

/// The whole configuration.
#[derive(Debug, Clone, Default, PartialEq, Deserialize, Serialize)]
#[serde(default, deny_unknown_fields)]
pub struct Config {
    /// Where SQLite state and transcripts live; see [`crate::state::resolve_state_dir`].
    pub state_dir: Option<PathBuf>,
    /// Which database keeps sessions, the inbound journal and pairing (`[state]`).
    pub state: StateConfig,
    pub gateway: GatewayConfig,
    pub models: ModelsConfig,
    pub agents: AgentsConfig,
    pub messages: MessagesConfig,
    pub session: SessionConfig,
    pub channels: ChannelsConfig,
    pub hooks: HooksConfig,
    pub tools: ToolsConfig,
    /// Model Context Protocol servers whose tools the agent is offered (`[mcp.servers.NAME]`).
    pub mcp: McpConfig,
    /// Files users send and the agent sends back (`[media]`, `[media.transcription]`).
    pub media: MediaConfig,
    /// Scheduled jobs: reminders, recurring tasks (`[cron]`).
    pub cron: CronConfig,
    /// Long-term memory (`[memory]`, `[memory.embeddings]`).
    pub memory: MemoryConfig,
    /// Which agent answers where (`[[bindings]]`); unmatched chats go to the default agent.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub bindings: Vec<BindingConfig>,
}

/// The agent's tools.
#[derive(Debug, Clone, PartialEq, Deserialize, Serialize)]
#[serde(default, deny_unknown_fields)]
pub struct ToolsConfig {
    /// The tools offered before `allow` / `deny`; `chat` (the built-ins) by default.
    pub profile: ToolProfile,
    /// Tools or groups (`group:fs`, `group:runtime`, `group:web`) added to the profile
    /// everywhere; channels and groups may add more with `tools.allow` of their own.
    pub allow: Vec<String>,
    /// Tools or groups never offered; a deny at any level wins over every allow.
    pub deny: Vec<String>,
    /// The longest tool result the model gets, in characters; a longer one keeps its head
    /// and tail around a marker saying how much was cut.
    pub max_result_chars: usize,
    pub sandbox: SandboxConfig,
    pub exec: ExecConfig,
    /// `web_fetch` and `web_search` (`[tools.web]`).
    pub web: WebToolsConfig,
}

/// `tools.max_result_chars` when the config does not say.
pub const DEFAULT_MAX_RESULT_CHARS: usize = 50_000;

impl ToolsConfig {
    /// The global `allow` and `deny` lists.
    pub fn lists(&self) -> ToolLists {
        ToolLists { allow: self.allow.clone(), deny: self.deny.clone() }
    }
}

impl Default for ToolsConfig {
    fn default() -> Self {
        Self {
            profile: ToolProfile::Chat,
            allow: Vec::new(),
            deny: Vec::new(),
            max_result_chars: DEFAULT_MAX_RESULT_CHARS,
            sandbox: SandboxConfig::default(),
            exec: ExecConfig::default(),
            web: WebToolsConfig::default(),
        }
    }
}

/// `[tools.web]`: how far `web_fetch` may reach and how much it may read, and the search
/// provider behind `web_search`. The limits bound what one call can cost (time, memory); the
/// address rule is the SSRF guard (see `agent::tools::web`).
#[derive(Debug, Clone, PartialEq, Deserialize, Serialize)]
#[serde(default, deny_unknown_fields)]
pub struct WebToolsConfig {
    /// Let `web_fetch` reach loopback, private, link-local (cloud metadata) and other
    /// non-public addresses. Off: a model talked into fetching `http://169.254.169.254/` or
    /// the gateway's own port is refused.
    pub allow_private: bool,
    /// The most one `web_fetch` (every redirect and the body) or `web_search` call may take.
    pub timeout_seconds: u64,
    /// The most of a response body `web_fetch` reads; the rest is left unread and the model
    /// told the page was cut.
    pub max_bytes: u64,
    /// Redirects `web_fetch` follows before giving up; each hop is checked like the first URL.
    pub max_redirects: u32,
    /// The provider behind `web_search`; absent, the tool does not exist.
    pub search: Option<WebSearchConfig>,
}

impl Default for WebToolsConfig {
    fn default() -> Self {
        Self { allow_private: false, timeout_seconds: 30, max_bytes: 5_000_000, max_redirects: 5, search: None }
    }
}

/// `[tools.web.search]`: where `web_search` sends queries.
#[derive(Debug, Clone, PartialEq, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct WebSearchConfig {
    pub provider: WebSearchProvider,
    /// SearXNG: its base URL (required). Brave: an override of the API root, for tests and
    /// proxies; `https://api.search.brave.com` when unset.
    #[serde(default)]
    pub url: Option<String>,
    /// Brave's subscription token; `BRAVE_API_KEY` is used when unset.
    #[serde(default)]
    pub api_key: Option<Secret>,
}

/// The search engines `web_search` can ask.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum WebSearchProvider {
    /// A SearXNG instance's JSON API (`/search?format=json`), often self-hosted.
    Searxng,
    /// The Brave Search API (needs a subscription token).
    Brave,
}

/// The daemon's WebSocket RPC and HTTP listener.
#[derive(Debug, Clone, PartialEq, Deserialize, Serialize)]
#[serde(default, deny_unknown_fields)]
pub struct GatewayConfig {
    /// An IP address, or `localhost`. Anything but loopback requires `auth_token`.
    pub bind: String,
    pub port: u16,
    /// Clients must present this in their `connect` frame when set.
    pub auth_token: Option<Secret>,
}

impl Default for GatewayConfig {
    fn default() -> Self {
        Self { bind: "127.0.0.1".to_owned(), port: 18789, auth_token: None }
    }
}

/// Model providers by the name `agents.defaults.model` refers to them with.
#[derive(Debug, Clone, Default, PartialEq, Deserialize, Serialize)]
#[serde(default, deny_unknown_fields)]
pub struct ModelsConfig {
    pub providers: BTreeMap<String, ProviderConfig>,
}

/// One model endpoint.
#[derive(Debug, Clone, PartialEq, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct ProviderConfig {
    pub kind: ProviderKind,
    /// The API root; defaults to the vendor's public endpoint for `openai` / `anthropic`.
    pub base_url: Option<String>,
    /// The key of the profile named `default`; `profiles` adds more.
    pub api_key: Option<Secret>,
    /// The model's context window in tokens; compaction keeps prompts below it.
    pub context_window: Option<u32>,
    /// Which of the provider's models take image input (SPEC §2, `vision`): all (`true`),
    /// none (`false`, the default, because a text-only model refuses a request with an
    /// image in it: images then reach the model as a one-line note with their size), or
    /// those a list names (`["gpt-4o", "claude-*"]`).
    #[serde(default)]
    pub vision: Vision,
    /// Credentials by id, tried in this order (then least recently used); a failing one
    /// cools down while the others answer (issue 20).
    #[serde(default, skip_serializing_if = "IndexMap::is_empty")]
    pub profiles: IndexMap<String, ProfileConfig>,
}

/// `models.providers.<name>.vision`: `true`, `false`, or the models that take images, by
/// name or glob (`*` for any run of characters).
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(untagged)]
pub enum Vision {
    All(bool),
    Models(Vec<String>),
}

impl<'de> Deserialize<'de> for Vision {
    fn deserialize<D: serde::Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        struct VisionVisitor;

        impl<'de> serde::de::Visitor<'de> for VisionVisitor {
            type Value = Vision;

            fn expecting(&self, formatter: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                formatter.write_str("true, false, or a list of model names (globs with *)")
            }

            fn visit_bool<E: serde::de::Error>(self, all: bool) -> Result<Vision, E> {
                Ok(Vision::All(all))
            }

            fn visit_str<E: serde::de::Error>(self, text: &str) -> Result<Vision, E> {
                match text {
                    "true" => Ok(Vision::All(true)),
                    "false" => Ok(Vision::All(false)),
                    _ => Err(E::invalid_value(serde::de::Unexpected::Str(text), &self)),
                }
            }

            fn visit_seq<A: serde::de::SeqAccess<'de>>(self, mut seq: A) -> Result<Vision, A::Error> {
                let mut models = Vec::new();
                while let Some(model) = seq.next_element::<String>()? {
                    models.push(model);
                }
                Ok(Vision::Models(models))
            }
        }

        deserializer.deserialize_any(VisionVisitor)
    }
}

impl Default for Vision {
    fn default() -> Self {
        Vision::All(false)
    }
}

impl Vision {
    /// Whether `model` takes image input.
    pub fn covers(&self, model: &str) -> bool {
        match self {
            Vision::All(all) => *all,
            Vision::Models(patterns) => patterns.iter().any(|pattern| super::mcp_schema::glob_matches(pattern, model)),
        }
    }
}

/// The id of the profile a provider's bare `api_key` (or its vendor's environment key) is.
pub const DEFAULT_PROFILE: &str = "default";

/// One credential of a provider: the key itself, or the environment variable holding it.
#[derive(Debug, Clone, Default, PartialEq, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct ProfileConfig {
    // Exactly one of the two is set, so the other is left out when the config is shown.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub api_key: Option<Secret>,
    /// Read at start-up, so the key need not be written in the config file.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub api_key_env: Option<String>,
}

/// The wire protocol a provider speaks.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum ProviderKind {
    /// OpenAI-compatible Chat Completions: OpenAI, Ollama, vLLM, llama.cpp, OpenRouter.
    Openai,
    /// Anthropic Messages.
    Anthropic,
    /// Offline: streams the user's text back. The default when nothing is configured.
    Echo,
}

#[derive(Debug, Clone, PartialEq, Deserialize, Serialize)]
#[serde(default, deny_unknown_fields)]
pub struct MessagesConfig {
    pub queue: QueueConfig,
    /// Which reply messages are threaded to the message they answer (SPEC §7).
    pub reply_to_mode: ReplyToMode,
    /// Put in front of every reply, once (e.g. "🤖").
    pub response_prefix: Option<String>,
    /// How long a reply's final messages keep being retried through 429s, timeouts and
    /// 5xx before Ferry gives up on them (SPEC §11).
    pub delivery_deadline_seconds: u64,
    /// The longest message a user may send, in characters, on every channel and through
    /// the gateway's `agent` and `chat.send`. A longer one is refused and its sender told.
    pub max_inbound_chars: usize,
}

impl Default for MessagesConfig {
    fn default() -> Self {
        Self {
            queue: QueueConfig::default(),
            reply_to_mode: ReplyToMode::default(),
            response_prefix: None,
            delivery_deadline_seconds: 600,
            max_inbound_chars: 100_000,
        }
    }
}

/// Threading replies to the message they answer, where the platform can.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Deserialize, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum ReplyToMode {
    /// Never, unless the model asks with a reply directive (`[[reply_to_current]]`,
    /// `[[reply_to: <id>]]`; see `reply::directive`).
    #[default]
    Off,
    /// The first message of a reply.
    First,
    /// Every message of a reply.
    All,
}

/// What happens to a message that arrives while its session is busy (SPEC §5).
#[derive(Debug, Clone, PartialEq, Deserialize, Serialize)]
#[serde(default, deny_unknown_fields)]
pub struct QueueConfig {
    pub mode: QueueMode,
    /// Quiet time after a run before queued messages are run.
    pub debounce_ms: u64,
    /// Most messages queued per session.
    pub cap: usize,
    pub drop: DropPolicy,
    /// A mode per channel name (`telegram = "steer"`), overriding `mode`.
    pub by_channel: BTreeMap<String, QueueMode>,
}

impl Default for QueueConfig {
    fn default() -> Self {
        Self {
            mode: QueueMode::Collect,
            debounce_ms: 1000,
            cap: 20,
            drop: DropPolicy::Summarize,
            by_channel: BTreeMap::new(),
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum QueueMode {
    /// Batch everything that arrived during the run into one follow-up.
    Collect,
    /// Inject into the running turn at the next model or tool boundary.
    Steer,
    /// Run each queued message on its own after the current run.
    Followup,
    /// Steer now and also queue a follow-up.
    SteerBacklog,
    /// Abort the running turn and run the newest message.
    Interrupt,
}

/// What gives way when a session's queue is full.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum DropPolicy {
    /// Drop the oldest queued message.
    Old,
    /// Reject the incoming message (its sender is told).
    New,
    /// Drop the oldest but keep a one-line summary for the next follow-up.
    Summarize,
}

#[derive(Debug, Clone, Default, PartialEq, Deserialize, Serialize)]
#[serde(default, deny_unknown_fields)]
pub struct SessionConfig {
    pub dm_scope: DmScope,
    pub reset: ResetConfig,
    /// Who may control a conversation other people share (`dm_scope = "main"`), as
    /// `<channel>:<sender id>` (`telegram:12345`): their `/stop` ends any run there and
    /// clears every waiting message, and only they may `/reset` it. Everyone else's `/stop`
    /// ends only the run answering them and their own waiting messages. The web chat is
    /// the operator's own page and always counts.
    pub operators: Vec<String>,
}

impl SessionConfig {
    /// Whether `sender` on `channel` is one of [`SessionConfig::operators`].
    pub fn is_operator(&self, channel: &str, sender: &str) -> bool {
        self.operators.iter().any(|entry| entry.split_once(':') == Some((channel, sender)))
    }
}

/// How direct messages map to sessions (SPEC §3.5).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Deserialize, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum DmScope {
    /// Every DM, on every channel, shares the agent's main session: only for a personal,
    /// single-user bot, since every user who writes sees the others' conversation.
    Main,
    /// One session per person, across channels.
    PerPeer,
    /// One session per person per channel: private DMs, the default.
    #[default]
    PerChannelPeer,
    PerAccountChannelPeer,
}

/// When a session starts afresh on its own (manual `/new` and `/reset` always work).
#[derive(Debug, Clone, PartialEq, Deserialize, Serialize)]
#[serde(default, deny_unknown_fields)]
pub struct ResetConfig {
    pub mode: ResetMode,
    /// Local hour (0–23) of the daily reset.
    pub at_hour: u8,
    /// Reset after this many minutes without messages; 0 turns idle resets off.
    pub idle_minutes: u64,
}

impl Default for ResetConfig {
    fn default() -> Self {
        Self { mode: ResetMode::Daily, at_hour: 4, idle_minutes: 0 }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum ResetMode {
    /// At `at_hour` every day (and after `idle_minutes`, if set).
    Daily,
    /// Only after `idle_minutes` without messages.
    Idle,
    /// Only on `/new` or `/reset`.
    Manual,
}

/// Hooks (SPEC §9): how long a hook may take, and the operator's executables run on events.
#[derive(Debug, Clone, PartialEq, Deserialize, Serialize)]
#[serde(default, deny_unknown_fields)]
pub struct HooksConfig {
    /// A plugin hook or internal hook executable that takes longer is logged and skipped
    /// (a `before_tool_call` plugin hook then blocks its tool).
    pub timeout_ms: u64,
    /// Executables run on events, by event name (`agent:bootstrap`, `command:new`,
    /// `command:reset`, `command:stop`, `message:received`, `message:sent`).
    pub internal: BTreeMap<String, InternalHookConfig>,
}

impl Default for HooksConfig {
    fn default() -> Self {
        Self { timeout_ms: 15_000, internal: BTreeMap::new() }
    }
}

/// One operator executable: it reads the event as JSON on stdin and may answer JSON on stdout.
#[derive(Debug, Clone, PartialEq, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct InternalHookConfig {
    pub path: PathBuf,
    #[serde(default)]
    pub args: Vec<String>,
}
