//! `[memory]` (long-term memory: what it may hold and what reaches the prompt) and
//! `[memory.embeddings]` (the optional OpenAI-compatible endpoint that makes search find
//! paraphrases, not only words).

use serde::{Deserialize, Serialize};

use super::Secret;
use super::error::Violation;

/// `[memory]`.
#[derive(Debug, Clone, PartialEq, Deserialize, Serialize)]
#[serde(default, deny_unknown_fields)]
pub struct MemoryConfig {
    /// Offer the memory tools and commands at all. Off: nothing is read or written, and
    /// what was stored is kept.
    pub enabled: bool,
    /// Before each run in a private conversation, put up to three snippets that match the
    /// message into the prompt, marked as recollections that may be out of date.
    pub recall: bool,
    /// Keep one scope's documents (`mirror_scope`) as files in every agent's workspace too,
    /// `MEMORY.md` and `memory/*.md`, for hand editing: checked every 2 s both ways, an
    /// edited file read back into the store. When file and document both changed, the
    /// store wins and the file's text is kept in `.memory-conflicts/`; what was mirrored is
    /// kept in `.memory-mirror.json`, so edits made while Ferry was down are read back.
    pub mirror_files: bool,
    /// The scope `mirror_files` mirrors, e.g. `"private:telegram:42"`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub mirror_scope: Option<String>,
    /// The most one document may hold, in bytes.
    pub max_document_bytes: u64,
    /// The most one scope (one person's, or one chat's) may hold over all its documents.
    pub max_scope_bytes: u64,
    /// The most of `MEMORY.md` put into the system prompt, in bytes; the rest is cut with a
    /// note saying so.
    pub prompt_bytes: u64,
    /// The most recalled text (`recall`) put into the prompt, in bytes.
    pub recall_bytes: u64,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub embeddings: Option<EmbeddingsConfig>,
}

impl Default for MemoryConfig {
    fn default() -> Self {
        Self {
            enabled: true,
            recall: false,
            mirror_files: false,
            mirror_scope: None,
            max_document_bytes: 50_000,
            max_scope_bytes: 5_000_000,
            prompt_bytes: 4_096,
            recall_bytes: 2_048,
            embeddings: None,
        }
    }
}

/// `[memory.embeddings]`: an OpenAI-compatible `POST {base_url}/embeddings` (OpenAI,
/// Ollama, vLLM, LM Studio). Without it, search is by keywords alone.
#[derive(Debug, Clone, Default, PartialEq, Deserialize, Serialize)]
#[serde(default, deny_unknown_fields)]
pub struct EmbeddingsConfig {
    /// e.g. `https://api.openai.com/v1`, `http://localhost:11434/v1` (Ollama).
    pub base_url: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub api_key: Option<Secret>,
    /// The environment variable holding the key; `api_key` wins when both are set.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub api_key_env: Option<String>,
    /// e.g. `text-embedding-3-small`, `nomic-embed-text`. Changing it embeds everything
    /// again in the background; search uses keywords alone until that is done.
    pub model: String,
}

/// Load-time checks of `[memory]` beyond the numeric ranges (`super::ranges`).
pub(super) fn validate(memory: &MemoryConfig) -> Result<(), Violation> {
    if memory.max_document_bytes > memory.max_scope_bytes {
        return Err(Violation::new(
            "memory.max_document_bytes",
            format!(
                "{} is more than memory.max_scope_bytes ({}); one document cannot hold more than its scope",
                memory.max_document_bytes, memory.max_scope_bytes
            ),
        ));
    }
    if memory.mirror_files && memory.mirror_scope.as_deref().is_none_or(|scope| scope.trim().is_empty()) {
        return Err(Violation::new(
            "memory.mirror_scope",
            "mirror_files = true needs the scope to mirror, e.g. \"private:telegram:42\" (`ferry memory status` lists them)",
        ));
    }
    if let Some(scope) = &memory.mirror_scope
        && !(scope.starts_with("private:") || scope.starts_with("shared:"))
    {
        return Err(Violation::new(
            "memory.mirror_scope",
            format!("{scope:?} is not a memory scope; write private:<channel>:<person> or shared:<channel>:<chat>"),
        ));
    }
    if let Some(embeddings) = &memory.embeddings {
        let examples = "\"text-embedding-3-small\" or \"nomic-embed-text\"";
        super::endpoint::check("memory.embeddings", &embeddings.base_url, &embeddings.model, examples)?;
    }
    Ok(())
}
