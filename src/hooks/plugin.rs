//! The [`Plugin`] trait: one object per plugin, one default no-op method per hook point.

use async_trait::async_trait;

use super::events::{
    AfterCompaction, AfterToolCall, AgentEnd, AgentStartChange, BeforeAgentStart, BeforeCompaction, BeforeToolCall,
    GatewayEvent, MessageReceived, MessageSending, MessageSent, SendingDecision, SessionEvent, ToolCallDecision,
    ToolResultPersist,
};

/// A hook handler's failure. It is logged with the plugin's name and the handler skipped
/// (a `before_tool_call` failure blocks the tool).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{0}")]
pub struct HookError(pub String);

impl HookError {
    pub fn new(message: impl Into<String>) -> Self {
        Self(message.into())
    }
}

pub type HookResult<T> = Result<T, HookError>;

/// A plugin: Rust code registered at start-up that hooks into the agent loop and the
/// message pipeline (SPEC §9). Override the hooks you need; the others do nothing.
///
/// Modifying hooks (`before_agent_start`, `before_tool_call`, `message_sending`,
/// `tool_result_persist`) are awaited in priority order and see what the handlers before
/// them made of the event. Observing hooks (all the others) run on a spawned task, side by
/// side, and never delay the run or the reply; their event is shared, so they get `&`.
#[async_trait]
pub trait Plugin: Send + Sync + 'static {
    /// For logs: which plugin a failing handler belongs to.
    fn name(&self) -> &str;

    /// Replace the system prompt or add context to it, before the run's first model call.
    async fn before_agent_start(&self, _event: &BeforeAgentStart) -> HookResult<Option<AgentStartChange>> {
        Ok(None)
    }

    async fn agent_end(&self, _event: &AgentEnd) -> HookResult<()> {
        Ok(())
    }

    /// Rewrite a tool call's arguments or block it. Fails closed: an error, a panic or a
    /// timeout blocks the tool.
    async fn before_tool_call(&self, _event: &BeforeToolCall) -> HookResult<Option<ToolCallDecision>> {
        Ok(None)
    }

    async fn after_tool_call(&self, _event: &AfterToolCall) -> HookResult<()> {
        Ok(())
    }

    /// The text to store instead of a tool result in the session transcript. Synchronous:
    /// it runs on the run's task just before the transcript is written, so keep it cheap.
    /// The model saw the original during the run; later runs see what is stored.
    fn tool_result_persist(&self, _event: &ToolResultPersist<'_>) -> Option<String> {
        None
    }

    async fn message_received(&self, _event: &MessageReceived) -> HookResult<()> {
        Ok(())
    }

    /// Rewrite or cancel a reply message (or notice) before it is sent.
    async fn message_sending(&self, _event: &MessageSending) -> HookResult<Option<SendingDecision>> {
        Ok(None)
    }

    async fn message_sent(&self, _event: &MessageSent) -> HookResult<()> {
        Ok(())
    }

    async fn session_start(&self, _event: &SessionEvent) -> HookResult<()> {
        Ok(())
    }

    async fn session_end(&self, _event: &SessionEvent) -> HookResult<()> {
        Ok(())
    }

    async fn gateway_start(&self, _event: &GatewayEvent) -> HookResult<()> {
        Ok(())
    }

    async fn gateway_stop(&self, _event: &GatewayEvent) -> HookResult<()> {
        Ok(())
    }

    async fn before_compaction(&self, _event: &BeforeCompaction) -> HookResult<()> {
        Ok(())
    }

    async fn after_compaction(&self, _event: &AfterCompaction) -> HookResult<()> {
        Ok(())
    }
}
