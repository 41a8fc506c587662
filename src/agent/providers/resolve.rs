//! A provider and a model, ready to call (SPEC §2).

use std::sync::Arc;

use super::ModelProvider;
use crate::config::{Config, Environment};
use crate::models::catalog::ModelCatalog;
pub use crate::models::catalog::ResolveError;

/// A provider ready to call, with the model name to ask it for.
#[derive(Clone)]
pub struct ResolvedModel {
    pub provider: Arc<dyn ModelProvider>,
    pub model: String,
    pub context_window: Option<u32>,
    /// Whether the model takes image input (`models.providers.<name>.vision`).
    pub vision: bool,
    /// The offline echo provider stands in because nothing was configured; callers warn
    /// loudly about it at start-up.
    pub is_fallback_echo: bool,
}

impl std::fmt::Debug for ResolvedModel {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ResolvedModel")
            .field("provider", &self.provider.name())
            .field("model", &self.model)
            .field("context_window", &self.context_window)
            .field("vision", &self.vision)
            .finish()
    }
}

impl ResolvedModel {
    /// The context window in tokens: the configured one, else the provider's assumption.
    pub fn effective_context_window(&self) -> u32 {
        self.context_window.unwrap_or_else(|| self.provider.default_context_window())
    }

    /// `provider/model`, for logs and `/status`.
    pub fn label(&self) -> String {
        format!("{}/{}", self.provider.name(), self.model)
    }
}

/// The primary model of `agents.defaults.model` as one client; see
/// [`ModelCatalog::resolve`] for the whole chain with its credentials.
pub fn resolve_model(config: &Config, env: &Environment) -> Result<ResolvedModel, ResolveError> {
    ModelCatalog::resolve(config, env).map(|catalog| catalog.primary())
}
