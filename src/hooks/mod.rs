//! Hooks (SPEC §9): code that watches or changes what Ferry does at fixed points.
//!
//! Two kinds:
//!
//! - **Plugin hooks**: Rust objects implementing [`Plugin`], registered at start-up with a
//!   priority. One trait with a default no-op method per hook point, rather than one trait
//!   per family: a real plugin usually spans families (an audit plugin watches messages
//!   *and* tools), and one object with one priority and one name is what an operator
//!   reasons about. Handlers run highest priority first (equal priorities: registration
//!   order).
//! - **Internal hooks**: the operator's executables from `[hooks.internal]`
//!   ([`internal`]), run on `agent:bootstrap`, `command:*` and `message:*` events.
//!
//! ```
//! use ferry::hooks::{BeforeToolCall, HookResult, Hooks, Plugin, ToolCallDecision};
//!
//! struct NoShell;
//!
//! #[async_trait::async_trait]
//! impl Plugin for NoShell {
//!     fn name(&self) -> &str {
//!         "no-shell"
//!     }
//!
//!     async fn before_tool_call(&self, call: &BeforeToolCall) -> HookResult<Option<ToolCallDecision>> {
//!         Ok((call.tool_name == "shell").then(|| ToolCallDecision::Block { reason: "no shell here".into() }))
//!     }
//! }
//!
//! let hooks = Hooks::builder().register(10, NoShell).build();
//! // RunnerParts { hooks, .. }: the runner and the dispatcher built on it share them.
//! # let _ = hooks;
//! ```
//!
//! How handlers run:
//!
//! - **Modifying** hooks (`before_agent_start`, `before_tool_call`, `tool_result_persist`,
//!   `message_sending`) are awaited one after the other; each sees the event as the
//!   handlers before it left it, so their changes merge in priority order. A block or a
//!   cancel is final: later handlers are not asked.
//! - **Observing** hooks (the others) get the event on one spawned task, all handlers side
//!   by side: they never delay a run or a reply.
//! - A handler that returns an error, panics or exceeds the timeout (`hooks.timeout_ms`,
//!   default 15 s) is logged and skipped — except `before_tool_call`, which fails closed:
//!   the tool does not run and the model is told it was blocked.
//!
//! Where each hook is called: `before_agent_start`, `before_tool_call`, `after_tool_call`,
//! `tool_result_persist`, `agent_end` and `agent:bootstrap` in [`crate::agent::run`];
//! `message_received`, `command:*` and notices' `message_sending` / `message_sent` in
//! [`crate::dispatch`]; replies' `message_sending` / `message_sent` in
//! [`crate::reply::turn`]; `session_start` / `session_end` in [`crate::session::run_in_session`]
//! and the `/new` / `/reset` commands; `gateway_start` / `gateway_stop` in `ferry gateway`.
//! `before_compaction` / `after_compaction` are defined for compaction to call.

mod events;
pub mod internal;
mod plugin;

use std::panic::AssertUnwindSafe;
use std::sync::Arc;
use std::time::Duration;

use futures::FutureExt;
use futures::future::{BoxFuture, join_all};
use tokio::task::JoinHandle;

pub use events::*;
pub use internal::InternalHooks;
pub use plugin::{HookError, HookResult, Plugin};

use crate::agent::prompt::{BootstrapCache, BootstrapFile, load_bootstrap_files};
use crate::agent::tools::{ToolOutcome, parse_arguments};
use crate::agent::{ChatMessage, ToolCall};
use crate::config::HooksConfig;
use crate::session::{ResetReason, Resolved};

/// A handler slower than this is skipped, unless `hooks.timeout_ms` says otherwise.
pub const DEFAULT_HOOK_TIMEOUT: Duration = Duration::from_secs(15);

/// The registered hooks. Cheap to clone; empty by default, and then every hook point
/// returns at once.
#[derive(Clone, Default)]
pub struct Hooks {
    inner: Arc<Inner>,
}

struct Inner {
    /// Highest priority first.
    plugins: Vec<Registered>,
    timeout: Duration,
    internal: InternalHooks,
}

impl Default for Inner {
    fn default() -> Self {
        Self { plugins: Vec::new(), timeout: DEFAULT_HOOK_TIMEOUT, internal: InternalHooks::default() }
    }
}

struct Registered {
    priority: i32,
    plugin: Arc<dyn Plugin>,
}

/// Collects plugins and settings; [`HooksBuilder::build`] fixes their order.
#[derive(Default)]
pub struct HooksBuilder {
    inner: Inner,
}

impl HooksBuilder {
    /// Adds a plugin; a higher `priority` runs earlier.
    pub fn register(mut self, priority: i32, plugin: impl Plugin) -> Self {
        self.inner.plugins.push(Registered { priority, plugin: Arc::new(plugin) });
        self
    }

    /// How long one handler may take.
    pub fn timeout(mut self, timeout: Duration) -> Self {
        self.inner.timeout = timeout;
        self
    }

    pub fn internal(mut self, internal: InternalHooks) -> Self {
        self.inner.internal = internal;
        self
    }

    pub fn build(mut self) -> Hooks {
        // Stable: equal priorities keep their registration order.
        self.inner.plugins.sort_by_key(|registered| std::cmp::Reverse(registered.priority));
        Hooks { inner: Arc::new(self.inner) }
    }
}

/// A plugin's method for one observing hook point.
type Observer<E> = for<'a> fn(&'a dyn Plugin, &'a E) -> BoxFuture<'a, HookResult<()>>;

impl Hooks {
    pub fn builder() -> HooksBuilder {
        HooksBuilder::default()
    }

    /// The timeout and internal hooks of `[hooks]`; register plugins on the builder.
    pub fn from_config(config: &HooksConfig) -> HooksBuilder {
        Self::builder().timeout(Duration::from_millis(config.timeout_ms)).internal(InternalHooks::from_config(config))
    }

    /// Whether any plugin is registered (callers skip building costly events if not).
    pub fn has_plugins(&self) -> bool {
        !self.inner.plugins.is_empty()
    }

    pub fn internal(&self) -> &InternalHooks {
        &self.inner.internal
    }

    /// Runs one handler under the timeout, catching a panic. `Err` says what went wrong
    /// (already logged).
    async fn guarded<T>(
        &self,
        registered: &Registered,
        hook: &'static str,
        call: BoxFuture<'_, HookResult<T>>,
    ) -> Result<T, String> {
        let problem = match tokio::time::timeout(self.inner.timeout, AssertUnwindSafe(call).catch_unwind()).await {
            Ok(Ok(Ok(value))) => return Ok(value),
            Ok(Ok(Err(error))) => format!("failed: {error}"),
            Ok(Err(_)) => "panicked".to_owned(),
            Err(_) => format!("took longer than {} ms", self.inner.timeout.as_millis()),
        };
        let plugin = registered.plugin.name();
        if hook == "before_tool_call" {
            tracing::warn!(plugin, hook, %problem, "a plugin hook failed; blocking the tool call (fails closed)");
        } else {
            tracing::warn!(plugin, hook, %problem, "a plugin hook failed; skipping it");
        }
        Err(problem)
    }

    /// Hands `event` to every plugin's `call` on one spawned task, side by side. The handle
    /// resolves when all of them are done (or timed out); nobody has to wait for it.
    fn observe<E: Send + Sync + 'static>(
        &self,
        hook: &'static str,
        event: E,
        call: Observer<E>,
    ) -> Option<JoinHandle<()>> {
        if self.inner.plugins.is_empty() {
            return None;
        }
        let hooks = self.clone();
        Some(tokio::spawn(async move {
            let event = &event;
            let hooks = &hooks;
            join_all(hooks.inner.plugins.iter().map(|registered| async move {
                let _ = hooks.guarded(registered, hook, call(&*registered.plugin, event)).await;
            }))
            .await;
        }))
    }

    // --- the agent run -------------------------------------------------------------------

    /// `agent:bootstrap`: the bootstrap files for a run, as the operator's executable (if
    /// any) changes the list. Without one, the cached defaults.
    pub async fn bootstrap_files(
        &self,
        cache: &BootstrapCache,
        workspace: &std::path::Path,
        run_id: &str,
        session_key: &str,
    ) -> Arc<[BootstrapFile]> {
        let files = cache.files();
        if !self.inner.internal.has("agent:bootstrap") {
            return files;
        }
        let names: Vec<String> = files.iter().map(|file| file.name.clone()).collect();
        let event = internal::AgentBootstrap { run_id, session_key, workspace, files: &names };
        let answer: Option<internal::BootstrapAnswer> = self.inner.internal.call("agent:bootstrap", &event).await;
        match answer.and_then(|answer| answer.files) {
            Some(chosen) if chosen != names => load_bootstrap_files(workspace, &chosen).into(),
            _ => files,
        }
    }

    /// `before_agent_start`: the system prompt the run uses.
    pub async fn before_agent_start(&self, run_id: &str, session_key: &str, message: &str, prompt: String) -> String {
        if self.inner.plugins.is_empty() {
            return prompt;
        }
        let mut event = BeforeAgentStart {
            run_id: run_id.to_owned(),
            session_key: session_key.to_owned(),
            message: message.to_owned(),
            system_prompt: prompt,
        };
        for registered in &self.inner.plugins {
            let call = registered.plugin.before_agent_start(&event);
            let Ok(Some(change)) = self.guarded(registered, "before_agent_start", call).await else { continue };
            if let Some(prompt) = change.system_prompt {
                event.system_prompt = prompt;
            }
            if let Some(context) = change.context.filter(|context| !context.trim().is_empty()) {
                event.system_prompt.push_str("\n\n");
                event.system_prompt.push_str(context.trim());
            }
        }
        event.system_prompt
    }

    /// `before_tool_call`: `Ok(Some(arguments))` if a handler rewrote them, `Ok(None)` to
    /// run the call as the model made it, `Err(reason)` if it must not run.
    pub async fn before_tool_call(
        &self,
        run_id: &str,
        session_key: &str,
        call: &ToolCall,
    ) -> Result<Option<serde_json::Value>, String> {
        if self.inner.plugins.is_empty() {
            return Ok(None);
        }
        let mut event = BeforeToolCall {
            run_id: run_id.to_owned(),
            session_key: session_key.to_owned(),
            tool_name: call.name.clone(),
            call_id: call.id.clone(),
            params: arguments_of(call),
        };
        let mut rewritten = false;
        for registered in &self.inner.plugins {
            let call = registered.plugin.before_tool_call(&event);
            match self.guarded(registered, "before_tool_call", call).await {
                Ok(None) => {}
                Ok(Some(ToolCallDecision::Rewrite(params))) => {
                    event.params = params;
                    rewritten = true;
                }
                Ok(Some(ToolCallDecision::Block { reason })) => {
                    tracing::info!(plugin = registered.plugin.name(), tool = %event.tool_name, %reason, "a plugin blocked a tool call");
                    return Err(reason);
                }
                Err(problem) => return Err(format!("the {} plugin's check {problem}", registered.plugin.name())),
            }
        }
        Ok(rewritten.then_some(event.params))
    }

    pub fn after_tool_call(
        &self,
        run_id: &str,
        session_key: &str,
        call: &ToolCall,
        outcome: &ToolOutcome,
        duration: Duration,
    ) {
        if self.inner.plugins.is_empty() {
            return;
        }
        let event = AfterToolCall {
            run_id: run_id.to_owned(),
            session_key: session_key.to_owned(),
            tool_name: call.name.clone(),
            call_id: call.id.clone(),
            params: arguments_of(call),
            result: outcome.content.clone(),
            is_error: outcome.is_error,
            duration,
        };
        self.observe("after_tool_call", event, |plugin, event| plugin.after_tool_call(event));
    }

    /// `tool_result_persist`: rewrites the tool results among `transcript` in place, just
    /// before it is written to the session. Handlers see and rewrite the text only; a
    /// result's images are kept as they are.
    pub fn tool_result_persist(&self, session_key: &str, transcript: &mut [ChatMessage]) {
        if self.inner.plugins.is_empty() {
            return;
        }
        for message in transcript {
            let ChatMessage::ToolResult { call_id, name, content, is_error, .. } = message else { continue };
            for registered in &self.inner.plugins {
                let event = ToolResultPersist { session_key, tool_name: name, call_id, content, is_error: *is_error };
                let rewrite =
                    std::panic::catch_unwind(AssertUnwindSafe(|| registered.plugin.tool_result_persist(&event)));
                match rewrite {
                    Ok(Some(rewritten)) => *content = rewritten,
                    Ok(None) => {}
                    Err(_) => tracing::warn!(
                        plugin = registered.plugin.name(),
                        hook = "tool_result_persist",
                        "a plugin hook panicked; skipping it"
                    ),
                }
            }
        }
    }

    pub fn agent_end(&self, event: AgentEnd) {
        self.observe("agent_end", event, |plugin, event| plugin.agent_end(event));
    }

    pub fn before_compaction(&self, event: BeforeCompaction) {
        self.observe("before_compaction", event, |plugin, event| plugin.before_compaction(event));
    }

    pub fn after_compaction(&self, event: AfterCompaction) {
        self.observe("after_compaction", event, |plugin, event| plugin.after_compaction(event));
    }

    // --- messages --------------------------------------------------------------------------

    /// `message_received` and the `message:received` internal hook.
    pub fn message_received(&self, event: MessageReceived) {
        if self.inner.internal.has("message:received") {
            let (hooks, event) = (self.clone(), event.clone());
            tokio::spawn(async move {
                let _: Option<serde_json::Value> = hooks.inner.internal.call("message:received", &event).await;
            });
        }
        self.observe("message_received", event, |plugin, event| plugin.message_received(event));
    }

    /// `message_sending`: the text to send, or `None` if a handler cancelled the message.
    pub async fn message_sending(&self, mut event: MessageSending) -> Option<String> {
        for registered in &self.inner.plugins {
            let call = registered.plugin.message_sending(&event);
            match self.guarded(registered, "message_sending", call).await {
                Ok(Some(SendingDecision::Rewrite(text))) => event.text = text,
                Ok(Some(SendingDecision::Cancel)) => {
                    tracing::info!(plugin = registered.plugin.name(), chat_id = %event.chat_id, "a plugin cancelled an outgoing message");
                    return None;
                }
                Ok(None) | Err(_) => {}
            }
        }
        Some(event.text)
    }

    /// `message_sent` and the `message:sent` internal hook.
    pub fn message_sent(&self, event: MessageSent) {
        if self.inner.internal.has("message:sent") {
            let (hooks, event) = (self.clone(), event.clone());
            tokio::spawn(async move {
                let _: Option<serde_json::Value> = hooks.inner.internal.call("message:sent", &event).await;
            });
        }
        self.observe("message_sent", event, |plugin, event| plugin.message_sent(event));
    }

    // --- sessions and the gateway ------------------------------------------------------------

    /// `session_end` for the session a reset replaced (if any) and `session_start` for the
    /// new one, when `resolved` started one. `reason` overrides the store's (`/new` vs
    /// `/reset`, which the store does not tell apart).
    pub fn session_changed(&self, session_key: &str, resolved: &Resolved, reason: Option<SessionReason>) {
        let Some(started) = resolved.started else { return };
        if self.inner.plugins.is_empty() {
            return;
        }
        let reason = reason.unwrap_or(match started {
            ResetReason::New => SessionReason::New,
            ResetReason::Manual => SessionReason::Reset,
            ResetReason::Daily => SessionReason::Daily,
            ResetReason::Idle => SessionReason::Idle,
        });
        if let Some(ended) = &resolved.ended_session_id {
            let event = SessionEvent { session_key: session_key.to_owned(), session_id: ended.clone(), reason };
            self.observe("session_end", event, |plugin, event| plugin.session_end(event));
        }
        let session_id = resolved.session.session_id.clone();
        let event = SessionEvent { session_key: session_key.to_owned(), session_id, reason };
        self.observe("session_start", event, |plugin, event| plugin.session_start(event));
    }

    pub fn gateway_start(&self, event: GatewayEvent) {
        self.observe("gateway_start", event, |plugin, event| plugin.gateway_start(event));
    }

    /// `gateway_stop`, awaited (each handler within the timeout): the process is about to
    /// exit and would drop a spawned handler mid-way.
    pub async fn gateway_stop(&self, event: GatewayEvent) {
        if let Some(handle) = self.observe("gateway_stop", event, |plugin, event| plugin.gateway_stop(event)) {
            let _ = handle.await;
        }
    }
}

/// A call's arguments as JSON; text that is not JSON stays a string.
fn arguments_of(call: &ToolCall) -> serde_json::Value {
    parse_arguments(&call.arguments).unwrap_or_else(|_| serde_json::Value::String(call.arguments.clone()))
}

#[cfg(test)]
mod tests;
