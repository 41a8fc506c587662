//! Which provider and model a run uses, from the config and the environment (SPEC §2).

use std::sync::Arc;

use super::ModelProvider;
use super::anthropic::{self, AnthropicProvider};
use super::echo::EchoProvider;
use super::openai::{self, OpenAiProvider};
use crate::config::{Config, Environment, ProviderConfig, ProviderKind, Secret};

/// The model used when `OPENAI_API_KEY` / `OPENAI_BASE_URL` configure the provider and no
/// model is named. `OPENAI_MODEL` overrides it.
pub const DEFAULT_OPENAI_MODEL: &str = "gpt-4o-mini";
/// The same for `ANTHROPIC_API_KEY`; `ANTHROPIC_MODEL` overrides it.
pub const DEFAULT_ANTHROPIC_MODEL: &str = "claude-sonnet-4-5";

/// A provider ready to call, with the model name to ask it for.
#[derive(Clone)]
pub struct ResolvedModel {
    pub provider: Arc<dyn ModelProvider>,
    pub model: String,
    pub context_window: Option<u32>,
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

/// Why no provider could be built.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("agents.defaults.model: {0}")]
pub struct ResolveError(String);

/// Resolves `agents.defaults.model`. Unset: a provider from `OPENAI_*` or `ANTHROPIC_*`
/// variables, else the offline echo provider.
pub fn resolve_model(config: &Config, env: &Environment) -> Result<ResolvedModel, ResolveError> {
    let Some(reference) = config.agents.defaults.model.as_deref() else {
        if env.var("OPENAI_API_KEY").is_some() || env.var("OPENAI_BASE_URL").is_some() {
            let model = env.var("OPENAI_MODEL").unwrap_or(DEFAULT_OPENAI_MODEL);
            return Ok(from_environment(ProviderKind::Openai, "openai", model, env));
        }
        if env.var("ANTHROPIC_API_KEY").is_some() {
            let model = env.var("ANTHROPIC_MODEL").unwrap_or(DEFAULT_ANTHROPIC_MODEL);
            return Ok(from_environment(ProviderKind::Anthropic, "anthropic", model, env));
        }
        return Ok(ResolvedModel {
            provider: Arc::new(EchoProvider),
            model: "echo".to_owned(),
            context_window: None,
            is_fallback_echo: true,
        });
    };
    // Validation already checked the PROVIDER/MODEL shape.
    let (name, model) =
        reference.split_once('/').ok_or_else(|| ResolveError(format!("{reference:?} is not PROVIDER/MODEL")))?;
    if let Some(provider) = config.models.providers.get(name) {
        return Ok(from_config(name, model, provider, env));
    }
    match name {
        "echo" => Ok(ResolvedModel {
            provider: Arc::new(EchoProvider),
            model: model.to_owned(),
            context_window: None,
            is_fallback_echo: false,
        }),
        "openai" if env.var("OPENAI_API_KEY").is_some() || env.var("OPENAI_BASE_URL").is_some() => {
            Ok(from_environment(ProviderKind::Openai, name, model, env))
        }
        "anthropic" if env.var("ANTHROPIC_API_KEY").is_some() || env.var("ANTHROPIC_BASE_URL").is_some() => {
            Ok(from_environment(ProviderKind::Anthropic, name, model, env))
        }
        "openai" => Err(ResolveError(format!(
            "{reference:?} needs [models.providers.openai] or the OPENAI_API_KEY environment variable"
        ))),
        "anthropic" => Err(ResolveError(format!(
            "{reference:?} needs [models.providers.anthropic] or the ANTHROPIC_API_KEY environment variable"
        ))),
        _ => Err(ResolveError(format!("no provider named {name:?} in [models.providers]"))),
    }
}

fn from_config(name: &str, model: &str, provider: &ProviderConfig, env: &Environment) -> ResolvedModel {
    // A provider pointed at its vendor's real endpoint may take the vendor's key from the
    // environment; one with its own base_url (Ollama, a proxy) never receives it.
    let env_key = |var: &str| provider.base_url.is_none().then(|| env.var(var).map(Secret::new)).flatten();
    let built: Arc<dyn ModelProvider> = match provider.kind {
        ProviderKind::Openai => Arc::new(OpenAiProvider::new(
            name,
            provider.base_url.as_deref().unwrap_or(openai::DEFAULT_BASE_URL),
            provider.api_key.clone().or_else(|| env_key("OPENAI_API_KEY")),
        )),
        ProviderKind::Anthropic => Arc::new(AnthropicProvider::new(
            name,
            provider.base_url.as_deref().unwrap_or(anthropic::DEFAULT_BASE_URL),
            provider.api_key.clone().or_else(|| env_key("ANTHROPIC_API_KEY")),
        )),
        ProviderKind::Echo => Arc::new(EchoProvider),
    };
    ResolvedModel {
        provider: built,
        model: model.to_owned(),
        context_window: provider.context_window,
        is_fallback_echo: false,
    }
}

fn from_environment(kind: ProviderKind, name: &str, model: &str, env: &Environment) -> ResolvedModel {
    let provider: Arc<dyn ModelProvider> = match kind {
        ProviderKind::Anthropic => Arc::new(AnthropicProvider::new(
            name,
            env.var("ANTHROPIC_BASE_URL").unwrap_or(anthropic::DEFAULT_BASE_URL),
            env.var("ANTHROPIC_API_KEY").map(Secret::new),
        )),
        _ => Arc::new(OpenAiProvider::new(
            name,
            env.var("OPENAI_BASE_URL").unwrap_or(openai::DEFAULT_BASE_URL),
            env.var("OPENAI_API_KEY").map(Secret::new),
        )),
    };
    ResolvedModel { provider, model: model.to_owned(), context_window: None, is_fallback_echo: false }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn env(vars: &[(&str, &str)]) -> Environment {
        Environment::new(vars.iter().copied(), "/")
    }

    fn with_model(model: &str) -> Config {
        let mut config = Config::default();
        config.agents.defaults.model = Some(model.to_owned());
        config
    }

    #[test]
    fn nothing_configured_means_the_echo_fallback() {
        let resolved = resolve_model(&Config::default(), &env(&[])).unwrap();
        assert!(resolved.is_fallback_echo);
        assert_eq!(resolved.label(), "echo/echo");
    }

    #[test]
    fn environment_keys_pick_a_provider_when_no_model_is_named() {
        let openai = resolve_model(&Config::default(), &env(&[("OPENAI_BASE_URL", "http://127.0.0.1:9/v1")])).unwrap();
        assert_eq!(openai.label(), "openai/gpt-4o-mini");
        let anthropic =
            resolve_model(&Config::default(), &env(&[("ANTHROPIC_API_KEY", "k"), ("ANTHROPIC_MODEL", "claude-x")]))
                .unwrap();
        assert_eq!(anthropic.label(), "anthropic/claude-x");
    }

    #[test]
    fn a_configured_provider_is_used_by_name() {
        let mut config = with_model("local/llama3");
        config.models.providers.insert(
            "local".into(),
            ProviderConfig {
                kind: ProviderKind::Openai,
                base_url: Some("http://127.0.0.1:11434/v1".into()),
                api_key: None,
                context_window: Some(8192),
            },
        );
        let resolved = resolve_model(&config, &env(&[("OPENAI_API_KEY", "sk-real")])).unwrap();
        assert_eq!((resolved.label().as_str(), resolved.context_window), ("local/llama3", Some(8192)));
    }

    #[test]
    fn implicit_vendor_providers_need_their_environment() {
        let error = resolve_model(&with_model("openai/gpt-4o"), &env(&[])).unwrap_err();
        assert!(error.to_string().contains("OPENAI_API_KEY"), "{error}");
        assert!(resolve_model(&with_model("openai/gpt-4o"), &env(&[("OPENAI_API_KEY", "k")])).is_ok());
        assert_eq!(resolve_model(&with_model("echo/parrot"), &env(&[])).unwrap().label(), "echo/parrot");
    }
}
