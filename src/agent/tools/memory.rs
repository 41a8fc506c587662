//! `memory_search`, `memory_get` and `memory_write`: the agent's long-term memory of the
//! person (in a DM) or the chat (in a group) it is talking with.
//!
//! Every call works in the run's memory scope, decided by the dispatcher from where the
//! message came from (`memory::scope`); a run without one (the heartbeat, an operator's
//! `ferry agent` run) is told memory is not available. Nothing here takes a scope from the
//! model, so no argument can reach another person's memory.

use async_trait::async_trait;
use schemars::JsonSchema;
use serde::Deserialize;
use serde_json::json;

use super::{ToolContext, ToolError, ToolOutput, TypedTool};
use crate::memory::search::DEFAULT_RESULTS;
use crate::memory::{AgentMemory, WriteMode};
use crate::state::memory::MemoryScope;

/// The memory tools' names: what a turn that only saves memories may call.
pub const MEMORY_TOOLS: &[&str] = &[MemorySearch::NAME, MemoryGet::NAME, MemoryWrite::NAME];

fn scope_of(context: &ToolContext) -> Result<&MemoryScope, ToolError> {
    context
        .memory_scope
        .as_ref()
        .ok_or_else(|| ToolError::new("memory is not available in this conversation (it belongs to no person or chat)"))
}

fn fail(error: impl std::fmt::Display) -> ToolError {
    ToolError::new(error.to_string())
}

#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct SearchArgs {
    /// What to look for, in words (a question or keywords).
    pub query: String,
    /// At most this many results (default 6, at most 20).
    pub max_results: Option<usize>,
    /// Leave out results scoring under this (0 to 1; default 0).
    pub min_score: Option<f64>,
}

/// `memory_search`.
pub struct MemorySearch(pub AgentMemory);

#[async_trait]
impl TypedTool for MemorySearch {
    type Args = SearchArgs;
    const NAME: &'static str = "memory_search";
    const DESCRIPTION: &'static str = "Search your long-term memory of this person (or this group): MEMORY.md and the \
         notes in memory/. Returns the best matching passages with their path and line range; read more of one with \
         memory_get. Search before answering about anything the user told you in an earlier conversation.";

    async fn run(&self, args: SearchArgs, context: &ToolContext) -> Result<ToolOutput, ToolError> {
        let scope = scope_of(context)?;
        let tools = &self.0;
        let max = args.max_results.unwrap_or(DEFAULT_RESULTS);
        let found = tools
            .memory
            .search(scope, &args.query, max, args.min_score.unwrap_or(0.0), tools.embedder.as_ref(), tools.today())
            .await
            .map_err(fail)?;
        let results: Vec<_> = found
            .into_iter()
            .map(|found| {
                json!({
                    "path": found.path,
                    "start_line": found.start_line,
                    "end_line": found.end_line,
                    "snippet": found.snippet,
                    "score": (found.score * 1000.0).round() / 1000.0,
                })
            })
            .collect();
        Ok(ToolOutput::from(json!({ "results": results }).to_string()))
    }
}

#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct GetArgs {
    /// `MEMORY.md`, `memory/YYYY-MM-DD.md` or `memory/<name>.md`.
    pub path: String,
    /// The first line to read (1-based; default 1).
    pub from: Option<u32>,
    /// How many lines (default: to the end).
    pub lines: Option<u32>,
}

/// `memory_get`.
pub struct MemoryGet(pub AgentMemory);

#[async_trait]
impl TypedTool for MemoryGet {
    type Args = GetArgs;
    const NAME: &'static str = "memory_get";
    const DESCRIPTION: &'static str = "Read one of your memory documents (MEMORY.md, memory/YYYY-MM-DD.md, \
         memory/<name>.md), whole or some lines of it. A document never written reads as empty text.";

    async fn run(&self, args: GetArgs, context: &ToolContext) -> Result<ToolOutput, ToolError> {
        let scope = scope_of(context)?;
        let text = self.0.memory.read(scope, &args.path, args.from, args.lines).await.map_err(fail)?;
        Ok(ToolOutput::from(json!({ "path": args.path.trim(), "text": text }).to_string()))
    }
}

#[derive(Debug, Clone, Copy, Deserialize, JsonSchema, PartialEq, Eq)]
#[serde(rename_all = "lowercase")]
pub enum Mode {
    Append,
    Replace,
}

#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct WriteArgs {
    /// `MEMORY.md` (lasting facts about the person or chat), `memory/<name>.md`, or a dated
    /// note `memory/YYYY-MM-DD.md`. Default: today's note.
    pub path: Option<String>,
    /// The text to add, or the new text.
    pub content: String,
    /// `append` (add at the end) or `replace`: the whole document becomes `content`, or,
    /// with `old_text`, exactly that text (found once) becomes `content`.
    pub mode: Mode,
    /// `replace` only: the exact text to change.
    pub old_text: Option<String>,
}

/// `memory_write`.
pub struct MemoryWrite(pub AgentMemory);

#[async_trait]
impl TypedTool for MemoryWrite {
    type Args = WriteArgs;
    const NAME: &'static str = "memory_write";
    const DESCRIPTION: &'static str = "Remember something for later conversations with this person (or this group). \
         Put lasting facts and preferences in MEMORY.md; notes about today in today's note (the default). Write \
         only what the user would want kept; never secrets like passwords. Fix a fact with mode `replace` and \
         `old_text`.";
    const MUTATES: bool = true;

    async fn run(&self, args: WriteArgs, context: &ToolContext) -> Result<ToolOutput, ToolError> {
        let scope = scope_of(context)?;
        let mode = match (args.mode, args.old_text) {
            (Mode::Append, None) => WriteMode::Append,
            (Mode::Append, Some(_)) => return Err(ToolError::new("`old_text` goes with mode `replace`")),
            (Mode::Replace, None) => WriteMode::Replace,
            (Mode::Replace, Some(old_text)) => WriteMode::Edit { old_text },
        };
        let tools = &self.0;
        let written =
            tools.memory.write(scope, args.path.as_deref(), &args.content, &mode, tools.today()).await.map_err(fail)?;
        let status = if written.unchanged { "already there: nothing written" } else { "written" };
        Ok(ToolOutput::from(
            json!({ "path": written.path, "status": status, "version": written.version, "bytes": written.bytes })
                .to_string(),
        ))
    }
}
