//! The host tools as one unit: the file tools, `exec` and `process`, the sandbox they run
//! in and the approvals they wait for. Built when Ferry starts a daemon or a run, and kept by
//! the [`ToolRegistry`](super::ToolRegistry) so the loop and the chat commands reach them.

use std::sync::Arc;

use super::exec::{Approvals, Exec, Process, Runtime};
use super::fs::{EditFile, ReadFile, WriteFile};
use super::{ToolFilter, ToolPolicy, ToolRegistry};
use crate::config::{Config, SandboxMode};
use crate::sandbox::{Sandbox, SandboxPaths};

/// The tools that start commands: sandboxed sessions get them only when the sandbox works.
pub const COMMAND_TOOLS: &[&str] = &["exec", "process"];

/// The sandbox, and what `exec` and `process` share.
pub struct HostTools {
    sandbox: Arc<Sandbox>,
    runtime: Arc<Runtime>,
}

impl HostTools {
    pub fn new(config: &Config, paths: SandboxPaths) -> Arc<Self> {
        Self::sharing(config, paths, Arc::new(Approvals::new(&config.tools.exec)))
    }

    /// [`HostTools::new`] with the approvals several agents share (each agent has its own
    /// sandbox root and background jobs, but one gateway answers their approvals).
    pub fn sharing(config: &Config, paths: SandboxPaths, approvals: Arc<Approvals>) -> Arc<Self> {
        let sandbox = Arc::new(Sandbox::new(config.tools.sandbox.clone(), paths));
        let runtime =
            Runtime::with_approvals(sandbox.clone(), &config.tools.exec, config.tools.max_result_chars, approvals);
        Arc::new(Self { sandbox, runtime })
    }

    /// The registry of a daemon or an embedded run: the built-ins, the web tools and the
    /// host tools, results capped at `tools.max_result_chars`.
    pub fn registry(config: &Config, paths: SandboxPaths) -> Result<ToolRegistry, super::web::WebToolsError> {
        Self::registry_with(Self::new(config, paths), config)
    }

    /// The registry of one agent of several: `host` from [`HostTools::sharing`].
    pub fn registry_with(host: Arc<Self>, config: &Config) -> Result<ToolRegistry, super::web::WebToolsError> {
        let mut registry = ToolRegistry::with_builtins().with_result_limit(config.tools.max_result_chars);
        super::web::register(&mut registry, &config.tools.web)?;
        Ok(registry.with_host_tools(host))
    }

    pub fn sandbox(&self) -> &Arc<Sandbox> {
        &self.sandbox
    }

    /// Pending approvals, for `/approve` and `/deny`.
    pub fn approvals(&self) -> &Arc<Approvals> {
        &self.runtime.approvals
    }

    /// Adds `read`, `write`, `edit`, `exec` and `process` to `registry`.
    pub fn register(self: &Arc<Self>, registry: &mut ToolRegistry) {
        registry.register(ReadFile::new(self.sandbox.clone()));
        registry.register(WriteFile::new(self.sandbox.clone()));
        registry.register(EditFile::new(self.sandbox.clone()));
        registry.register(Exec::new(self.runtime.clone()));
        registry.register(Process::new(self.runtime.clone()));
    }

    /// `filter` for `session_key`, without the command tools when that session must be
    /// sandboxed and the sandbox cannot be used.
    pub fn restrict(&self, session_key: &str, filter: &ToolFilter) -> Option<ToolFilter> {
        (!self.sandbox.can_run_commands(session_key)).then(|| filter.clone().without(COMMAND_TOOLS))
    }

    /// Runs the sandbox's start-up probe when some session could be offered commands in a
    /// sandbox, and says on one line what came of it.
    pub async fn check_sandbox(&self, policy: &ToolPolicy) {
        if self.sandbox.config().mode == SandboxMode::Off {
            if COMMAND_TOOLS.iter().any(|tool| policy.could_offer(tool)) {
                tracing::warn!(
                    "tools.sandbox.mode = \"off\": commands from every chat run on this host as Ferry's user"
                );
            }
            return;
        }
        if !COMMAND_TOOLS.iter().any(|tool| policy.could_offer(tool)) {
            return;
        }
        match self.sandbox.probe().await {
            Ok(took) => tracing::info!(took_ms = took.as_millis() as u64, "sandbox ready for exec and process"),
            Err(why) => {
                tracing::warn!("sandbox unavailable, so sandboxed chats are not offered exec and process: {why}")
            }
        }
    }
}
