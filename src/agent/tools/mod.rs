//! Tools the model can call: typed arguments, a JSON schema generated from the type, and
//! a registry that turns every failure into a result the model can read.
//!
//! A tool's arguments are a Rust type; the model sees its JSON schema and Ferry
//! deserializes what the model sends into it. Arguments that are not valid JSON, do not
//! fit the type, name an unknown tool — or a tool that panics — all come back to the model
//! as an error result, so it can correct itself; none of them ends the run.

mod cron;
mod current_time;
pub mod exec;
pub mod fs;
mod host;
mod memory;
mod message;
mod policy;
mod result_cap;
mod sessions_list;
mod skill_read;
mod source;
pub mod web;

use std::collections::BTreeMap;
use std::panic::AssertUnwindSafe;
use std::sync::{Arc, Mutex};

use async_trait::async_trait;
use futures::FutureExt;
use schemars::JsonSchema;
use serde::de::DeserializeOwned;
use serde_json::Value;

pub use cron::CronTool;
pub use current_time::CurrentTime;
pub use host::{COMMAND_TOOLS, HostTools};
pub use memory::{MEMORY_TOOLS, MemoryGet, MemorySearch, MemoryWrite};
pub(crate) use message::parse_chat;
pub use message::{MessageTool, ToolSend};
pub use policy::{AgentToolPolicies, MCP_SEPARATOR, ToolFilter, ToolLists, ToolPolicy, ToolProfile, mcp_server_of};
pub use result_cap::{DEFAULT_MAX_RESULT_CHARS, cap_result};
pub use sessions_list::{RecentSessions, SessionCatalog, SessionSummary, SessionsList};
pub use skill_read::SkillRead;
pub use source::ToolSource;

use super::providers::ToolSpec;
use super::skills::SkillsSnapshot;
use crate::channels::ChannelRegistry;
use crate::types::conversation::{ImagePart, ToolCall};
use ferry_channel::Target;

/// How the result of a tool call a hook blocked begins.
pub const BLOCKED: &str = "blocked by a hook";

/// Where the run's triggering message came from: the `message` tool's default target.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Origin {
    pub channel: String,
    pub account_id: String,
    pub target: Target,
}

/// What a tool can see of the run that called it.
#[derive(Clone)]
pub struct ToolContext {
    pub run_id: String,
    pub session_key: String,
    /// The id of the call being executed.
    pub call_id: String,
    pub origin: Option<Origin>,
    /// Who sent the message the run answers (a job it schedules is theirs).
    pub sender_id: Option<String>,
    /// Whose memory the memory tools work in (`memory::scope`); `None`: memory is not
    /// available in this run.
    pub memory_scope: Option<crate::state::memory::MemoryScope>,
    pub channels: ChannelRegistry,
    pub sessions: Arc<dyn SessionCatalog>,
    pub skills: Arc<SkillsSnapshot>,
    /// Messages the `message` tool delivered during this run, for reply dedup.
    pub sends: Arc<Mutex<Vec<ToolSend>>>,
    /// Where a tool streams partial output (`exec`), shown as `tool` `update` events.
    pub updates: Option<tokio::sync::mpsc::UnboundedSender<String>>,
    /// Files the agent sends (`message`'s `media`); `None`: it cannot send files.
    pub outgoing: Option<crate::media::Outgoing>,
    /// The outbound schedulers (rate limits, 429s) `message` sends through, shared with the
    /// replies; `None` (embedders, tests): straight to the channel.
    pub schedulers: Option<crate::reply::outbound::Schedulers>,
    /// The delivery ledger's record of the reply's sends (`message` sends go under it, so
    /// a run re-done after a crash does not repeat them); `None` where no reply is
    /// recorded (the web chat, scheduled runs without a chat, tests).
    pub send_ledger: Option<crate::reply::ledger::RunSends>,
}

/// A tool failure, worded for the model.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{0}")]
pub struct ToolError(pub String);

impl ToolError {
    pub fn new(message: impl Into<String>) -> Self {
        Self(message.into())
    }
}

/// What a tool returns: text for the model, and the images it produced, if any (a
/// screenshot, an image file it read). Tools that only return text build it from their
/// `String` with `.into()`.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ToolOutput {
    pub text: String,
    /// Prepared for models ([`crate::media::prepare_image`]); the text cap does not apply.
    pub images: Vec<ImagePart>,
}

impl ToolOutput {
    /// Text and images together.
    pub fn with_images(text: impl Into<String>, images: Vec<ImagePart>) -> Self {
        Self { text: text.into(), images }
    }
}

impl From<String> for ToolOutput {
    fn from(text: String) -> Self {
        Self { text, images: Vec::new() }
    }
}

impl From<&str> for ToolOutput {
    fn from(text: &str) -> Self {
        text.to_owned().into()
    }
}

/// A tool as the registry runs it. Implement [`TypedTool`] instead: it derives this.
#[async_trait]
pub trait Tool: Send + Sync + 'static {
    fn name(&self) -> &'static str;
    fn description(&self) -> &'static str;
    fn parameters(&self) -> Value;
    /// Whether calling it changes something outside the conversation (sends a message,
    /// writes a file). A failed mutating tool is always reported to the user.
    fn mutates(&self) -> bool;
    async fn call(&self, arguments: Value, context: &ToolContext) -> Result<ToolOutput, ToolError>;
    /// The session ended (`/reset`, `/new`, an idle or daily reset): drop what the tool
    /// keeps for it, such as background commands.
    fn session_ended(&self, _session_key: &str) {}
    /// Ferry is shutting down.
    fn shutdown(&self) {}
}

/// A tool with typed arguments. The result is text for the model (usually JSON), with
/// images when the tool has some.
#[async_trait]
pub trait TypedTool: Send + Sync + 'static {
    type Args: DeserializeOwned + JsonSchema + Send;
    const NAME: &'static str;
    const DESCRIPTION: &'static str;
    const MUTATES: bool = false;

    async fn run(&self, args: Self::Args, context: &ToolContext) -> Result<ToolOutput, ToolError>;
    /// See [`Tool::session_ended`].
    fn session_ended(&self, _session_key: &str) {}
    /// See [`Tool::shutdown`].
    fn shutdown(&self) {}
}

#[async_trait]
impl<T: TypedTool> Tool for T {
    fn name(&self) -> &'static str {
        T::NAME
    }

    fn description(&self) -> &'static str {
        T::DESCRIPTION
    }

    fn parameters(&self) -> Value {
        let mut schema = schemars::schema_for!(T::Args).to_value();
        if let Some(object) = schema.as_object_mut() {
            // Metadata the model does not need; some APIs reject `$schema`.
            object.remove("$schema");
            object.remove("title");
        }
        schema
    }

    fn mutates(&self) -> bool {
        T::MUTATES
    }

    async fn call(&self, arguments: Value, context: &ToolContext) -> Result<ToolOutput, ToolError> {
        let args: T::Args =
            serde_json::from_value(arguments).map_err(|error| ToolError::new(format!("invalid arguments: {error}")))?;
        self.run(args, context).await
    }

    fn session_ended(&self, session_key: &str) {
        TypedTool::session_ended(self, session_key);
    }

    fn shutdown(&self) {
        TypedTool::shutdown(self);
    }
}

/// A tool call's outcome, as fed back to the model.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ToolOutcome {
    pub content: String,
    pub is_error: bool,
    pub mutates: bool,
    /// The tool's images (none for an error); they go to the model with `content`.
    pub images: Vec<ImagePart>,
}

impl ToolOutcome {
    /// A failed call: `content` says why, for the model.
    pub fn error(content: impl Into<String>, mutates: bool) -> Self {
        Self { content: content.into(), is_error: true, mutates, images: Vec::new() }
    }
}

/// The tools available to runs, by name.
#[derive(Clone)]
pub struct ToolRegistry {
    tools: BTreeMap<&'static str, Arc<dyn Tool>>,
    /// Built once at registration: generating schemas is not free, and every model call
    /// sends them.
    specs: BTreeMap<&'static str, ToolSpec>,
    /// `tools.max_result_chars`: longer results keep their head and tail ([`cap_result`]).
    max_result_chars: usize,
    /// The file and command tools, when registered.
    host: Option<Arc<HostTools>>,
    /// Tools listed at run time (MCP servers'), asked for their tools on every model call.
    sources: Vec<Arc<dyn ToolSource>>,
}

impl Default for ToolRegistry {
    fn default() -> Self {
        Self {
            tools: BTreeMap::new(),
            specs: BTreeMap::new(),
            max_result_chars: DEFAULT_MAX_RESULT_CHARS,
            host: None,
            sources: Vec::new(),
        }
    }
}

impl ToolRegistry {
    pub fn new() -> Self {
        Self::default()
    }

    /// Caps every result at `max_chars` characters (`tools.max_result_chars`).
    pub fn with_result_limit(mut self, max_chars: usize) -> Self {
        self.max_result_chars = max_chars;
        self
    }

    /// The built-in tools of SPEC §6.8 (`message`, `sessions_list`, `current_time`) and
    /// `skill_read`. None of them touches the host.
    pub fn with_builtins() -> Self {
        let mut registry = Self::new();
        registry.register(CurrentTime);
        registry.register(SessionsList);
        registry.register(MessageTool);
        registry.register(SkillRead);
        registry
    }

    /// Adds the host tools (files, commands) and keeps them for [`ToolRegistry::host`].
    pub fn with_host_tools(mut self, host: Arc<HostTools>) -> Self {
        host.register(&mut self);
        self.host = Some(host);
        self
    }

    pub fn host(&self) -> Option<&Arc<HostTools>> {
        self.host.as_ref()
    }

    /// Adds tools that are listed at run time (an MCP server's).
    pub fn with_source(mut self, source: Arc<dyn ToolSource>) -> Self {
        self.sources.push(source);
        self
    }

    /// Waits until every source is ready to list its tools ([`ToolSource::ready`]).
    pub async fn sources_ready(&self) {
        futures::future::join_all(self.sources.iter().map(|source| source.ready())).await;
    }

    /// The source that answers calls to `name`, if no tool of Ferry's own has that name.
    fn source_of(&self, name: &str) -> Option<&Arc<dyn ToolSource>> {
        self.sources.iter().find(|source| source.owns(name))
    }

    /// The tools `session_key` may use under `filter`: the command tools go when the
    /// session must be sandboxed and the sandbox cannot be used.
    pub fn filter_for(&self, session_key: &str, filter: &ToolFilter) -> ToolFilter {
        self.host.as_ref().and_then(|host| host.restrict(session_key, filter)).unwrap_or_else(|| filter.clone())
    }

    pub fn register(&mut self, tool: impl Tool) {
        let spec = ToolSpec {
            name: tool.name().to_owned(),
            description: tool.description().to_owned(),
            parameters: Arc::new(tool.parameters()),
        };
        self.specs.insert(tool.name(), spec);
        self.tools.insert(tool.name(), Arc::new(tool));
    }

    /// Tells every tool that `session_key`'s session ended.
    pub fn session_ended(&self, session_key: &str) {
        self.tools.values().for_each(|tool| tool.session_ended(session_key));
    }

    /// Tells every tool that Ferry is shutting down.
    pub fn shutdown(&self) {
        self.tools.values().for_each(|tool| tool.shutdown());
    }

    /// The tools as the model sees them: those `filter` allows (the chat's policy).
    /// `skill_read` is offered only when skills exist.
    pub fn specs(&self, skills: &SkillsSnapshot, filter: &ToolFilter) -> Vec<ToolSpec> {
        let own = self
            .specs
            .iter()
            .filter(|(name, _)| **name != SkillRead::NAME || !skills.is_empty())
            .filter(|(name, _)| filter.allows(name))
            .map(|(_, spec)| spec.clone());
        let listed = self.sources.iter().flat_map(|source| source.specs()).filter(|spec| filter.allows(&spec.name));
        own.chain(listed).collect()
    }

    /// Every tool's name there is now, Ferry's own and the sources'.
    fn names(&self) -> Vec<String> {
        let own = self.tools.keys().map(|name| (*name).to_owned());
        own.chain(self.sources.iter().flat_map(|source| source.specs()).map(|spec| spec.name)).collect()
    }

    /// The error result for a call to a tool `filter` does not allow (one the model was not
    /// offered but named anyway), or `None` when it may run. It lists the tools the model
    /// may call instead, and never the ones it may not.
    pub fn not_offered(&self, call: &ToolCall, filter: &ToolFilter) -> Option<ToolOutcome> {
        if filter.allows(&call.name) {
            return None;
        }
        let available: Vec<String> = self.names().into_iter().filter(|name| filter.allows(name)).collect();
        Some(ToolOutcome::error(
            format!(
                "the tool `{}` is not available in this chat; available tools: {}",
                call.name,
                available.join(", ")
            ),
            false,
        ))
    }

    /// Runs one call as the `before_tool_call` hooks decided ([`crate::hooks`]): as the model
    /// made it (`Ok(None)`), with rewritten arguments, or not at all (`Err(reason)`: the
    /// model gets an error result saying the call was blocked).
    pub async fn execute_checked(
        &self,
        call: &ToolCall,
        checked: Result<Option<Value>, String>,
        context: ToolContext,
    ) -> ToolOutcome {
        match checked {
            Ok(None) => self.execute(call, context).await,
            Ok(Some(arguments)) => {
                let call = ToolCall { arguments: arguments.to_string(), ..call.clone() };
                self.execute(&call, context).await
            }
            Err(reason) => {
                ToolOutcome::error(format!("{BLOCKED}: {reason}. The tool did not run; do not retry it."), false)
            }
        }
    }

    /// Runs one call. Every failure becomes an error outcome; a panicking tool is caught. The
    /// result's text is capped at `tools.max_result_chars`; its images are already bounded
    /// in size ([`crate::media::prepare_image`]) and pass unchanged.
    pub async fn execute(&self, call: &ToolCall, context: ToolContext) -> ToolOutcome {
        let mut outcome = self.execute_uncapped(call, context).await;
        outcome.content = cap_result(outcome.content, self.max_result_chars);
        outcome
    }

    /// Whether a call of the tool `name` changes something outside the run
    /// ([`Tool::mutates`]; a source's tool it cannot vouch for counts as yes). An unknown
    /// tool does not: it is not run.
    pub fn mutates(&self, name: &str) -> bool {
        match self.tools.get(name) {
            Some(tool) => tool.mutates(),
            None => self.source_of(name).is_some_and(|source| source.mutates(name)),
        }
    }

    async fn execute_uncapped(&self, call: &ToolCall, context: ToolContext) -> ToolOutcome {
        let own = self.tools.get(call.name.as_str()).cloned();
        let source = if own.is_none() { self.source_of(&call.name).cloned() } else { None };
        let mutates = match (&own, &source) {
            (Some(tool), _) => tool.mutates(),
            (None, Some(source)) => source.mutates(&call.name),
            (None, None) => {
                return ToolOutcome::error(
                    format!("unknown tool `{}`; available tools: {}", call.name, self.names().join(", ")),
                    false,
                );
            }
        };
        let arguments = match parse_arguments(&call.arguments) {
            Ok(arguments) => arguments,
            Err(error) => return ToolOutcome::error(error, mutates),
        };
        // Caught in place: a panicking tool must not take the run down, and spawning a task
        // for isolation would cost a thread hand-off on every call.
        let name = call.name.as_str();
        let called = AssertUnwindSafe(async move {
            match (own, source) {
                (Some(tool), _) => tool.call(arguments, &context).await,
                (None, Some(source)) => source.call(name, arguments, &context).await,
                (None, None) => Err(ToolError::new("unknown tool")),
            }
        })
        .catch_unwind()
        .await;
        match called {
            Ok(Ok(output)) => ToolOutcome { content: output.text, is_error: false, mutates, images: output.images },
            Ok(Err(error)) => ToolOutcome::error(error.0, mutates),
            Err(_) => {
                tracing::error!(tool = %call.name, "a tool panicked; the model is told it failed");
                ToolOutcome::error(format!("the tool `{}` crashed", call.name), mutates)
            }
        }
    }
}

/// The model's argument text as JSON. Empty means no arguments.
pub fn parse_arguments(text: &str) -> Result<Value, String> {
    if text.trim().is_empty() {
        return Ok(Value::Object(Default::default()));
    }
    serde_json::from_str(text).map_err(|error| {
        format!("the arguments are not valid JSON ({error}); send one JSON object matching the schema")
    })
}

#[cfg(test)]
pub(crate) mod tests;
