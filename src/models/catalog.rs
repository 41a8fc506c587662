//! The models a deployment may use, resolved from the config and the environment once at
//! start-up: each provider with its credentials (auth profiles) as ready clients, the
//! primary model with its fallbacks, and the models `/model` may choose.

use std::collections::BTreeMap;
use std::sync::Arc;

use crate::agent::providers::anthropic::{self, AnthropicProvider};
use crate::agent::providers::echo::EchoProvider;
use crate::agent::providers::openai::{self, OpenAiProvider};
use crate::agent::providers::{ModelProvider, ResolvedModel};
use crate::config::{
    AgentSettings, Config, DEFAULT_PROFILE, Environment, ModelSetting, ProviderConfig, ProviderKind, Secret, Vision,
};

/// The model used when `OPENAI_API_KEY` / `OPENAI_BASE_URL` configure the provider and no
/// model is named. `OPENAI_MODEL` overrides it.
pub const DEFAULT_OPENAI_MODEL: &str = "gpt-4o-mini";
/// The same for `ANTHROPIC_API_KEY`; `ANTHROPIC_MODEL` overrides it.
pub const DEFAULT_ANTHROPIC_MODEL: &str = "claude-sonnet-4-5";

/// One credential of a provider, as a client ready to call.
#[derive(Clone)]
pub struct Profile {
    /// The operator's name for it (`default`, `backup`): what logs and `/status` show.
    pub id: String,
    pub client: Arc<dyn ModelProvider>,
}

/// A provider with its credentials, in the order the config lists them.
pub struct ProviderEntry {
    pub name: String,
    pub kind: ProviderKind,
    pub profiles: Vec<Profile>,
    /// The profile ids, in order (what the profile book orders).
    pub profile_ids: Vec<String>,
    pub context_window: Option<u32>,
    /// `models.providers.<name>.vision`: which of its models take image input.
    pub vision: Vision,
}

impl ProviderEntry {
    pub fn profile(&self, id: &str) -> Option<&Profile> {
        self.profiles.iter().find(|profile| profile.id == id)
    }

    /// Whether the provider has a knob for thinking at all. OpenAI-compatible servers are
    /// assumed to until one refuses it.
    pub fn can_think(&self) -> bool {
        self.kind != ProviderKind::Echo
    }
}

/// A model of a provider: one step of the fallback chain or one `/model` choice.
#[derive(Clone)]
pub struct Candidate {
    pub provider: Arc<ProviderEntry>,
    pub model: String,
}

impl Candidate {
    /// `provider/model`.
    pub fn label(&self) -> String {
        format!("{}/{}", self.provider.name, self.model)
    }

    /// Whether this model takes image input (`models.providers.<name>.vision`, for all its
    /// models or a list): what decides if images in the conversation are sent as images or
    /// described in a line of text.
    pub fn accepts_images(&self) -> bool {
        self.provider.vision.covers(&self.model)
    }

    pub fn is(&self, reference: &str) -> bool {
        reference.split_once('/').is_some_and(|(provider, model)| provider == self.provider.name && model == self.model)
    }

    /// The candidate as one client (its first profile), for callers outside the failover
    /// loop (compaction's summary, `/status`).
    pub fn resolved(&self, is_fallback_echo: bool) -> ResolvedModel {
        let client = match self.provider.profiles.first() {
            Some(profile) => profile.client.clone(),
            None => Arc::new(EchoProvider),
        };
        ResolvedModel {
            provider: client,
            model: self.model.clone(),
            context_window: self.provider.context_window,
            vision: self.accepts_images(),
            is_fallback_echo,
        }
    }
}

impl std::fmt::Debug for Candidate {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Candidate").field("model", &self.label()).field("profiles", &self.provider.profile_ids).finish()
    }
}

/// Why the models could not be resolved; names the config key.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{key}: {reason}")]
pub struct ResolveError {
    pub key: String,
    pub reason: String,
}

impl ResolveError {
    fn new(key: impl Into<String>, reason: impl Into<String>) -> Self {
        Self { key: key.into(), reason: reason.into() }
    }
}

/// Every model this deployment may use.
pub struct ModelCatalog {
    /// The primary model, then its fallbacks.
    pub chain: Vec<Candidate>,
    /// What `/model` may choose: `agents.defaults.models`, or the chain when unset.
    pub allowed: Vec<Candidate>,
    /// Nothing was configured: the offline echo provider stands in.
    pub is_fallback_echo: bool,
}

impl ModelCatalog {
    /// Resolves `agents.defaults.model` (and `models`). Unset: a provider from `OPENAI_*` or
    /// `ANTHROPIC_*` variables, else the offline echo provider.
    pub fn resolve(config: &Config, env: &Environment) -> Result<Self, ResolveError> {
        Self::resolve_agent(config, "agents.defaults", &config.agents.defaults, env)
    }

    /// [`ModelCatalog::resolve`] for one agent's settings (`table` names them in errors:
    /// `agents.list.coder`).
    pub fn resolve_agent(
        config: &Config,
        table: &str,
        agent: &AgentSettings,
        env: &Environment,
    ) -> Result<Self, ResolveError> {
        let mut providers = BTreeMap::new();
        let Some(setting) = &agent.model else {
            let (setting, is_fallback_echo) = implicit_setting(env);
            let mut catalog = Self::from_setting(table, &setting, &agent.models, config, env, &mut providers)?;
            catalog.is_fallback_echo = is_fallback_echo;
            return Ok(catalog);
        };
        Self::from_setting(table, setting, &agent.models, config, env, &mut providers)
    }

    fn from_setting(
        table: &str,
        setting: &ModelSetting,
        allowlist: &[String],
        config: &Config,
        env: &Environment,
        providers: &mut BTreeMap<String, Arc<ProviderEntry>>,
    ) -> Result<Self, ResolveError> {
        let key = format!("{table}.model");
        let chain = setting
            .chain()
            .map(|reference| candidate(&key, reference, config, env, providers))
            .collect::<Result<Vec<_>, _>>()?;
        let allowed = if allowlist.is_empty() {
            chain.clone()
        } else {
            let key = format!("{table}.models");
            allowlist
                .iter()
                .map(|reference| candidate(&key, reference, config, env, providers))
                .collect::<Result<Vec<_>, _>>()?
        };
        Ok(Self { chain, allowed, is_fallback_echo: false })
    }

    /// The primary model as one client.
    pub fn primary(&self) -> ResolvedModel {
        match self.chain.first() {
            Some(candidate) => candidate.resolved(self.is_fallback_echo),
            None => echo_model(true),
        }
    }

    /// A `/model` choice by `provider/model`, by the model's name alone when that is
    /// unambiguous, or by its number in the list (from 1).
    pub fn find_allowed(&self, wanted: &str) -> Option<&Candidate> {
        let wanted = wanted.trim();
        if let Some(found) = self.allowed.iter().find(|candidate| candidate.is(wanted)) {
            return Some(found);
        }
        if let Ok(number) = wanted.parse::<usize>() {
            return number.checked_sub(1).and_then(|index| self.allowed.get(index));
        }
        let mut by_name = self.allowed.iter().filter(|candidate| candidate.model.eq_ignore_ascii_case(wanted));
        match (by_name.next(), by_name.next()) {
            (Some(only), None) => Some(only),
            _ => None,
        }
    }

    /// A single-model catalog around one client (tests, embedders with their own provider).
    pub fn single(model: ResolvedModel) -> Self {
        let entry = ProviderEntry {
            name: model.provider.name().to_owned(),
            kind: ProviderKind::Openai,
            profiles: vec![Profile { id: DEFAULT_PROFILE.to_owned(), client: model.provider.clone() }],
            profile_ids: vec![DEFAULT_PROFILE.to_owned()],
            context_window: model.context_window,
            vision: Vision::All(model.vision),
        };
        let candidate = Candidate { provider: Arc::new(entry), model: model.model };
        Self { chain: vec![candidate.clone()], allowed: vec![candidate], is_fallback_echo: model.is_fallback_echo }
    }
}

/// The model setting the environment implies when the config names none.
fn implicit_setting(env: &Environment) -> (ModelSetting, bool) {
    if env.var("OPENAI_API_KEY").is_some() || env.var("OPENAI_BASE_URL").is_some() {
        let model = env.var("OPENAI_MODEL").unwrap_or(DEFAULT_OPENAI_MODEL);
        return (ModelSetting::one(format!("openai/{model}")), false);
    }
    if env.var("ANTHROPIC_API_KEY").is_some() {
        let model = env.var("ANTHROPIC_MODEL").unwrap_or(DEFAULT_ANTHROPIC_MODEL);
        return (ModelSetting::one(format!("anthropic/{model}")), false);
    }
    (ModelSetting::one("echo/echo"), true)
}

fn echo_model(is_fallback_echo: bool) -> ResolvedModel {
    ResolvedModel {
        provider: Arc::new(EchoProvider),
        model: "echo".to_owned(),
        context_window: None,
        vision: false,
        is_fallback_echo,
    }
}

/// `reference` (`provider/model`) as a candidate, building its provider once.
fn candidate(
    key: &str,
    reference: &str,
    config: &Config,
    env: &Environment,
    providers: &mut BTreeMap<String, Arc<ProviderEntry>>,
) -> Result<Candidate, ResolveError> {
    // Validation already checked the PROVIDER/MODEL shape.
    let (name, model) = reference
        .split_once('/')
        .ok_or_else(|| ResolveError::new(key, format!("{reference:?} is not PROVIDER/MODEL")))?;
    let provider = match providers.get(name) {
        Some(provider) => provider.clone(),
        None => {
            let built = Arc::new(provider_entry(key, reference, name, config, env)?);
            providers.insert(name.to_owned(), built.clone());
            built
        }
    };
    Ok(Candidate { provider, model: model.to_owned() })
}

fn provider_entry(
    key: &str,
    reference: &str,
    name: &str,
    config: &Config,
    env: &Environment,
) -> Result<ProviderEntry, ResolveError> {
    if let Some(provider) = config.models.providers.get(name) {
        return configured(name, provider, env);
    }
    let implicit = |kind: ProviderKind, base_var: &str, key_var: &str, default_url: &str| {
        let key = env.var(key_var).map(Secret::new);
        let base = env.var(base_var).unwrap_or(default_url);
        entry(name, kind, EntryLimits::default(), vec![(DEFAULT_PROFILE.to_owned(), key)], base)
    };
    match name {
        "echo" => {
            Ok(entry(name, ProviderKind::Echo, EntryLimits::default(), vec![(DEFAULT_PROFILE.to_owned(), None)], ""))
        }
        "openai" if env.var("OPENAI_API_KEY").is_some() || env.var("OPENAI_BASE_URL").is_some() => {
            Ok(implicit(ProviderKind::Openai, "OPENAI_BASE_URL", "OPENAI_API_KEY", openai::DEFAULT_BASE_URL))
        }
        "anthropic" if env.var("ANTHROPIC_API_KEY").is_some() || env.var("ANTHROPIC_BASE_URL").is_some() => Ok(
            implicit(ProviderKind::Anthropic, "ANTHROPIC_BASE_URL", "ANTHROPIC_API_KEY", anthropic::DEFAULT_BASE_URL),
        ),
        "openai" => Err(ResolveError::new(
            key,
            format!("{reference:?} needs [models.providers.openai] or the OPENAI_API_KEY environment variable"),
        )),
        "anthropic" => Err(ResolveError::new(
            key,
            format!("{reference:?} needs [models.providers.anthropic] or the ANTHROPIC_API_KEY environment variable"),
        )),
        _ => Err(ResolveError::new(key, format!("no provider named {name:?} in [models.providers]"))),
    }
}

/// A provider from its `[models.providers.NAME]` table: the bare `api_key` (or, pointed at
/// the vendor's own endpoint, the vendor's environment key) is the profile `default`, then
/// the `profiles` in config order.
fn configured(name: &str, provider: &ProviderConfig, env: &Environment) -> Result<ProviderEntry, ResolveError> {
    // A provider with its own base_url (Ollama, a proxy) never receives the vendor's key.
    let vendor_var = match provider.kind {
        ProviderKind::Openai => Some("OPENAI_API_KEY"),
        ProviderKind::Anthropic => Some("ANTHROPIC_API_KEY"),
        ProviderKind::Echo => None,
    };
    let env_key = vendor_var.filter(|_| provider.base_url.is_none()).and_then(|var| env.var(var)).map(Secret::new);
    let mut keys = Vec::new();
    if let Some(key) = provider.api_key.clone().or(env_key) {
        keys.push((DEFAULT_PROFILE.to_owned(), Some(key)));
    }
    for (id, profile) in &provider.profiles {
        let key = match (&profile.api_key, &profile.api_key_env) {
            (Some(key), _) => key.clone(),
            (None, Some(var)) => env.var(var).map(Secret::new).ok_or_else(|| {
                ResolveError::new(
                    format!("models.providers.{name}.profiles.{id}.api_key_env"),
                    format!("the environment variable {var} is not set"),
                )
            })?,
            (None, None) => {
                return Err(ResolveError::new(
                    format!("models.providers.{name}.profiles.{id}"),
                    "needs api_key or api_key_env",
                ));
            }
        };
        keys.push((id.clone(), Some(key)));
    }
    if keys.is_empty() {
        // A local server that needs no key.
        keys.push((DEFAULT_PROFILE.to_owned(), None));
    }
    let default_url = match provider.kind {
        ProviderKind::Anthropic => anthropic::DEFAULT_BASE_URL,
        _ => openai::DEFAULT_BASE_URL,
    };
    let base = provider.base_url.as_deref().unwrap_or(default_url);
    let limits = EntryLimits { context_window: provider.context_window, vision: provider.vision.clone() };
    Ok(entry(name, provider.kind, limits, keys, base))
}

/// What a provider's models can take, from its config (nothing configured: the defaults).
#[derive(Default)]
struct EntryLimits {
    context_window: Option<u32>,
    vision: Vision,
}

fn entry(
    name: &str,
    kind: ProviderKind,
    limits: EntryLimits,
    keys: Vec<(String, Option<Secret>)>,
    base_url: &str,
) -> ProviderEntry {
    let profiles: Vec<Profile> = keys
        .into_iter()
        .map(|(id, key)| {
            let client: Arc<dyn ModelProvider> = match kind {
                ProviderKind::Openai => Arc::new(OpenAiProvider::new(name, base_url, key)),
                ProviderKind::Anthropic => Arc::new(AnthropicProvider::new(name, base_url, key)),
                ProviderKind::Echo => Arc::new(EchoProvider),
            };
            Profile { id, client }
        })
        .collect();
    let profile_ids = profiles.iter().map(|profile| profile.id.clone()).collect();
    ProviderEntry {
        name: name.to_owned(),
        kind,
        profiles,
        profile_ids,
        context_window: limits.context_window,
        vision: limits.vision,
    }
}

#[cfg(test)]
mod tests {
    use indexmap::IndexMap;

    use super::*;
    use crate::config::ProfileConfig;

    fn env(vars: &[(&str, &str)]) -> Environment {
        Environment::new(vars.iter().copied(), "/")
    }

    fn with_model(model: &str) -> Config {
        let mut config = Config::default();
        config.agents.defaults.model = Some(ModelSetting::one(model));
        config
    }

    fn provider(kind: ProviderKind, api_key: Option<&str>, profiles: &[(&str, ProfileConfig)]) -> ProviderConfig {
        ProviderConfig {
            kind,
            base_url: Some("http://127.0.0.1:9/v1".into()),
            api_key: api_key.map(Secret::new),
            context_window: None,
            vision: Vision::default(),
            profiles: profiles.iter().map(|(id, p)| ((*id).to_owned(), p.clone())).collect::<IndexMap<_, _>>(),
        }
    }

    #[test]
    fn nothing_configured_means_the_echo_fallback() {
        let catalog = ModelCatalog::resolve(&Config::default(), &env(&[])).unwrap();
        assert!(catalog.is_fallback_echo);
        assert_eq!(catalog.primary().label(), "echo/echo");
    }

    #[test]
    fn environment_keys_pick_a_provider_when_no_model_is_named() {
        let openai = ModelCatalog::resolve(&Config::default(), &env(&[("OPENAI_BASE_URL", "http://127.0.0.1:9/v1")]));
        assert_eq!(openai.unwrap().primary().label(), "openai/gpt-4o-mini");
        let vars = env(&[("ANTHROPIC_API_KEY", "k"), ("ANTHROPIC_MODEL", "claude-x")]);
        assert_eq!(ModelCatalog::resolve(&Config::default(), &vars).unwrap().primary().label(), "anthropic/claude-x");
    }

    #[test]
    fn profiles_follow_the_bare_key_in_config_order_and_read_their_variables() {
        let mut config = with_model("local/llama3");
        let from_env = ProfileConfig { api_key: None, api_key_env: Some("KEY_C".into()) };
        let inline = ProfileConfig { api_key: Some(Secret::new("b")), api_key_env: None };
        config.models.providers.insert(
            "local".into(),
            provider(ProviderKind::Openai, Some("a"), &[("zeta", inline), ("alpha", from_env)]),
        );
        let catalog = ModelCatalog::resolve(&config, &env(&[("KEY_C", "c")])).unwrap();
        assert_eq!(catalog.chain[0].provider.profile_ids, ["default", "zeta", "alpha"]);

        let error = ModelCatalog::resolve(&config, &env(&[])).err().unwrap();
        assert_eq!(error.key, "models.providers.local.profiles.alpha.api_key_env");
        assert!(error.reason.contains("KEY_C"), "{error}");
    }

    #[test]
    fn fallbacks_and_the_allowlist_resolve_and_choices_are_found_by_name_or_number() {
        let mut config = Config::default();
        config.agents.defaults.model =
            Some(ModelSetting { primary: "a/one".into(), fallbacks: vec!["b/two".into(), "echo/parrot".into()] });
        config.agents.defaults.models = vec!["a/one".into(), "b/three".into()];
        for name in ["a", "b"] {
            config.models.providers.insert(name.into(), provider(ProviderKind::Openai, None, &[]));
        }
        let catalog = ModelCatalog::resolve(&config, &env(&[])).unwrap();
        let labels: Vec<_> = catalog.chain.iter().map(Candidate::label).collect();
        assert_eq!(labels, ["a/one", "b/two", "echo/parrot"]);
        assert!(Arc::ptr_eq(&catalog.chain[1].provider, &catalog.allowed[1].provider), "one client per provider");
        assert_eq!(catalog.find_allowed("b/three").map(Candidate::label).as_deref(), Some("b/three"));
        assert_eq!(catalog.find_allowed("THREE").map(Candidate::label).as_deref(), Some("b/three"));
        assert_eq!(catalog.find_allowed("1").map(Candidate::label).as_deref(), Some("a/one"));
        assert!(catalog.find_allowed("b/two").is_none(), "a fallback outside the allowlist is not a choice");
        assert!(catalog.find_allowed("0").is_none());
    }

    #[test]
    fn implicit_vendor_providers_need_their_environment() {
        let error = ModelCatalog::resolve(&with_model("openai/gpt-4o"), &env(&[])).err().unwrap();
        assert!(error.to_string().contains("OPENAI_API_KEY"), "{error}");
        assert!(ModelCatalog::resolve(&with_model("openai/gpt-4o"), &env(&[("OPENAI_API_KEY", "k")])).is_ok());
        let parrot = ModelCatalog::resolve(&with_model("echo/parrot"), &env(&[])).unwrap();
        assert_eq!(parrot.primary().label(), "echo/parrot");
    }

    #[test]
    fn vision_comes_from_the_provider_config_and_is_off_by_default() {
        let mut config = Config::default();
        config.agents.defaults.model =
            Some(ModelSetting { primary: "eyes/one".into(), fallbacks: vec!["blind/two".into()] });
        let eyes = ProviderConfig { vision: Vision::All(true), ..provider(ProviderKind::Anthropic, None, &[]) };
        config.models.providers.insert("eyes".into(), eyes);
        config.models.providers.insert("blind".into(), provider(ProviderKind::Openai, None, &[]));
        let catalog = ModelCatalog::resolve(&config, &env(&[])).unwrap();
        assert!(catalog.chain[0].accepts_images());
        assert!(catalog.primary().vision);
        assert!(!catalog.chain[1].accepts_images());
        let implicit = ModelCatalog::resolve(&with_model("echo/parrot"), &env(&[])).unwrap();
        assert!(!implicit.primary().vision);
    }

    #[test]
    fn vision_may_name_the_models_that_take_images() {
        let mut config = Config::default();
        config.agents.defaults.model = Some(ModelSetting {
            primary: "mixed/gpt-4o".into(),
            fallbacks: vec!["mixed/claude-sonnet-4-5".into(), "mixed/llama3".into()],
        });
        let vision = Vision::Models(vec!["gpt-4o".into(), "claude-*".into()]);
        config
            .models
            .providers
            .insert("mixed".into(), ProviderConfig { vision, ..provider(ProviderKind::Openai, None, &[]) });
        let catalog = ModelCatalog::resolve(&config, &env(&[])).unwrap();
        let seeing: Vec<bool> = catalog.chain.iter().map(Candidate::accepts_images).collect();
        assert_eq!(seeing, [true, true, false]);
    }
}
