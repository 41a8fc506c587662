//! Tools that come and go while Ferry runs: an MCP server's, listed by the server and
//! changing when it restarts or says its list changed. The registry asks a source for its
//! tools on every model call, and hands it the calls to the names it owns.

use async_trait::async_trait;
use serde_json::Value;

use super::{ToolContext, ToolError, ToolOutput};
use crate::agent::providers::ToolSpec;

/// A set of tools whose membership changes at run time.
#[async_trait]
pub trait ToolSource: Send + Sync + 'static {
    /// The tools it offers now, as the model sees them.
    fn specs(&self) -> Vec<ToolSpec>;
    /// Whether calls to `name` are its to answer, offered now or not: a tool of a server that
    /// is restarting still belongs to it, and the call is told why it cannot run.
    fn owns(&self, name: &str) -> bool;
    /// Whether calling `name` may change something outside the conversation (see
    /// [`super::Tool::mutates`]). Unknown is taken as yes.
    fn mutates(&self, name: &str) -> bool;
    /// Runs one call to a tool it owns.
    async fn call(&self, name: &str, arguments: Value, context: &ToolContext) -> Result<ToolOutput, ToolError>;
    /// Waits, within the source's own bound, until what it offers is worth listing: a run
    /// that starts while MCP servers are still connecting after a restart would otherwise
    /// be offered none of their tools and answer "I have no such tool". Returns at once
    /// once the source has settled.
    async fn ready(&self) {}
}
