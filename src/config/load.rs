//! Finding, reading and layering the configuration (SPEC §2).
//!
//! Lookup order for the file: `--config`, `FERRY_CONFIG`, `./ferry.toml`,
//! `$XDG_CONFIG_HOME/ferry/ferry.toml`. No file is fine: the built-in defaults apply. On top
//! of the file, every key can be overridden from the environment as `FERRY__` + the key
//! path in capitals with `__` between parts (`FERRY__CHANNELS__TELEGRAM__API_URL`).

use std::path::{Path, PathBuf};

use super::environment::Environment;
use super::error::{ConfigError, ConfigWarning, Violation};
use super::inherit::DEFAULT_ACCOUNT;
use super::schema::{Config, WebSearchProvider};
use super::{Secret, explain, inherit, validate};

/// Prefix of environment overrides: `FERRY__GATEWAY__PORT` sets `gateway.port`.
pub const ENV_PREFIX: &str = "FERRY";
/// Separator between the prefix and the key, and between the parts of a key path.
pub const ENV_SEPARATOR: &str = "__";
/// Names a config file, after `--config` and before the default locations.
pub const CONFIG_FILE_VAR: &str = "FERRY_CONFIG";
/// The file name looked for in the working directory and under `$XDG_CONFIG_HOME/ferry/`.
pub const CONFIG_FILE_NAME: &str = "ferry.toml";

/// List-valued keys that an environment override gives as comma-separated text.
const ENV_LIST_KEYS: [&str; 3] =
    ["channels.telegram.allow_from", "channels.discord.allow_from", "channels.slack.allow_from"];

/// Credentials that may come from the conventional variables of each platform instead of
/// the config file, so a token need not be written to disk.
const TOKEN_FALLBACKS: [(&str, &str); 5] = [
    ("channels.telegram.bot_token", "TELEGRAM_BOT_TOKEN"),
    ("channels.discord.bot_token", "DISCORD_BOT_TOKEN"),
    ("channels.slack.bot_token", "SLACK_BOT_TOKEN"),
    ("channels.slack.app_token", "SLACK_APP_TOKEN"),
    ("channels.slack.signing_secret", "SLACK_SIGNING_SECRET"),
];

/// Where the configuration came from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ConfigSource {
    File(PathBuf),
    /// No file was found; built-in defaults (and any environment overrides) apply.
    Defaults,
}

/// A validated configuration and where it came from.
#[derive(Debug, Clone)]
pub struct LoadedConfig {
    pub config: Config,
    pub source: ConfigSource,
    /// Settings that are valid but look like mistakes, each attributed to its origin.
    pub warnings: Vec<ConfigWarning>,
    /// Kept to attribute later findings (e.g. adapter limits) to their origin.
    environment: Environment,
}

impl LoadedConfig {
    /// Turns a problem found after loading into an error that says where the key was set.
    pub fn error_at(&self, violation: Violation) -> ConfigError {
        attribute(violation, &self.source, &self.environment)
    }

    /// Says at INFO which file was loaded, or that none was found, where Ferry looked, and
    /// that the built-in defaults apply.
    pub fn log_source(&self) {
        match &self.source {
            ConfigSource::File(path) => tracing::info!(path = %path.display(), "config file loaded"),
            ConfigSource::Defaults => tracing::info!(
                searched = ?default_locations(&self.environment),
                "no config file found; using the built-in defaults"
            ),
        }
    }
}

/// The places looked in when neither `--config` nor `FERRY_CONFIG` names a file, in order.
pub fn default_locations(env: &Environment) -> Vec<PathBuf> {
    let xdg = env.xdg_dir("XDG_CONFIG_HOME", ".config").map(|dir| dir.join("ferry").join(CONFIG_FILE_NAME));
    std::iter::once(env.cwd().join(CONFIG_FILE_NAME)).chain(xdg).collect()
}

/// The environment variable that overrides `key`: `gateway.port` → `FERRY__GATEWAY__PORT`.
pub fn env_var_for(key: &str) -> String {
    let parts: Vec<&str> = key.split(['.', '[']).map(|part| part.trim_end_matches(']')).collect();
    format!("{ENV_PREFIX}{ENV_SEPARATOR}{}", parts.join(ENV_SEPARATOR).to_uppercase())
}

/// Finds the config file by the lookup order. An explicitly named file (flag or
/// `FERRY_CONFIG`) must exist; the default locations are optional.
pub fn locate(explicit: Option<&Path>, env: &Environment) -> Result<Option<PathBuf>, ConfigError> {
    let named = explicit.map(Path::to_path_buf).or_else(|| env.var(CONFIG_FILE_VAR).map(PathBuf::from));
    if let Some(path) = named {
        let path = if path.is_absolute() { path } else { env.cwd().join(path) };
        if !path.is_file() {
            let reason = if path.exists() { "not a regular file" } else { "no such file" };
            return Err(ConfigError::Read { path, reason: reason.to_owned() });
        }
        return Ok(Some(path));
    }
    Ok(default_locations(env).into_iter().find(|path| path.is_file()))
}

/// Locates, reads, layers, deserializes and validates the configuration.
pub fn load(explicit: Option<&Path>, env: &Environment) -> Result<LoadedConfig, ConfigError> {
    match locate(explicit, env)? {
        Some(path) => {
            let text = std::fs::read_to_string(&path)
                .map_err(|error| ConfigError::Read { path: path.clone(), reason: error.to_string() })?;
            load_text(&text, &path, env)
        }
        None => layer(None, ConfigSource::Defaults, env),
    }
}

/// [`load`] for a file already read: checks `text` is TOML, then layers, deserializes and
/// validates it as the contents of `path`, which errors name. Public so that the config
/// loader can be fuzzed without the file system (`fuzz/fuzz_targets/config_load.rs`); any
/// text gives a config or an error, never a panic.
pub fn load_text(text: &str, path: &Path, env: &Environment) -> Result<LoadedConfig, ConfigError> {
    check_toml(text, path)?;
    layer(Some(text), ConfigSource::File(path.to_owned()), env)
}

/// Layers the file's text (if any) and the environment, then deserializes and validates.
fn layer(file_text: Option<&str>, source: ConfigSource, env: &Environment) -> Result<LoadedConfig, ConfigError> {
    let mut builder = config::Config::builder();
    if let Some(text) = file_text {
        builder = builder.add_source(config::File::from_str(text, config::FileFormat::Toml));
    }
    let mut overrides = config::Environment::with_prefix(ENV_PREFIX)
        .prefix_separator(ENV_SEPARATOR)
        .separator(ENV_SEPARATOR)
        .try_parsing(true)
        .list_separator(",")
        .source(Some(env.vars().iter().map(|(k, v)| (k.clone(), v.clone())).collect()));
    for key in ENV_LIST_KEYS {
        overrides = overrides.with_list_parse_key(key);
    }
    let layered = builder.add_source(overrides).build().map_err(|error| {
        attribute(Violation::new("(top level)", explain::deserialize_error(&error, &[])), &source, env)
    })?;

    let mut tree = layered.cache;
    inherit::apply(&mut tree);
    let mut config: Config = serde_path_to_error::deserialize(tree).map_err(|error| {
        let key = match error.path().to_string() {
            path if path == "." || path.is_empty() => "(top level)".to_owned(),
            path => path,
        };
        // An inherited entry's keys are described as its parent's (their ranges, their values).
        let segments = inherit::canonical(&error.path().iter().cloned().collect::<Vec<_>>());
        let violation = match error.inner() {
            // Named by its full path (`models.providers.x.kind`), not by the table it is missing from.
            config::ConfigError::NotFound(missing) => {
                let field = missing.rsplit('.').next().unwrap_or(missing);
                Violation::new(missing.clone(), explain::missing_key(&segments, field))
            }
            other => Violation::new(key, explain::deserialize_error(other, &segments)),
        };
        attribute(violation, &source, env)
    })?;

    apply_token_fallbacks(&mut config, env);
    apply_web_search_key_fallback(&mut config, env);
    fill(&mut config.state.postgres_url, super::DATABASE_URL_VAR, env);
    validate::validate(&config).map_err(|violation| attribute(violation, &source, env))?;
    let warnings = validate::warnings(&config)
        .into_iter()
        .map(|violation| ConfigWarning {
            origin: origin_of(&violation.key, &source, env),
            key: violation.key,
            reason: violation.reason,
        })
        .collect();
    Ok(LoadedConfig { config, source, warnings, environment: env.clone() })
}

/// Checks the file's text is TOML, so a syntax error points at a line and column.
fn check_toml(text: &str, path: &Path) -> Result<(), ConfigError> {
    if let Err(error) = text.parse::<toml::Table>() {
        let span = error.span().unwrap_or(0..0);
        let before = &text[..span.start.min(text.len())];
        let line = before.matches('\n').count() + 1;
        let column = before.rsplit('\n').next().map_or(0, |tail| tail.chars().count()) + 1;
        let message = explain::toml_error(text, error.message(), span);
        return Err(ConfigError::Syntax { path: path.to_owned(), line, column, message });
    }
    Ok(())
}

/// Blames the environment variable that sets the key (or a table above it) if there is
/// one, else the file, else the defaults.
fn attribute(violation: Violation, source: &ConfigSource, env: &Environment) -> ConfigError {
    let origin = origin_of(&violation.key, source, env);
    ConfigError::Invalid { origin, key: violation.key, reason: violation.reason }
}

/// Where `key` was set: the environment variable that sets it (or a table above it), else
/// the file, else the defaults.
fn origin_of(key: &str, source: &ConfigSource, env: &Environment) -> String {
    override_var_for(key, env).map(|var| format!("environment variable {var}")).unwrap_or_else(|| match source {
        ConfigSource::File(path) => path.display().to_string(),
        ConfigSource::Defaults => "built-in defaults, no config file".to_owned(),
    })
}

/// The `FERRY__…` variable that sets `key` or one of its children, if any is set.
fn override_var_for(key: &str, env: &Environment) -> Option<String> {
    let exact = env_var_for(key);
    if env.var(&exact).is_some() {
        return Some(exact);
    }
    let child_prefix = format!("{exact}{ENV_SEPARATOR}");
    let mut children: Vec<&String> = env.vars().keys().filter(|name| name.starts_with(&child_prefix)).collect();
    children.sort();
    children.first().map(|name| (*name).clone())
}

/// Fills missing tokens from the platforms' conventional variables: the single-account
/// table's, or the listed account `default`'s (another account is another bot).
fn apply_token_fallbacks(config: &mut Config, env: &Environment) {
    let [telegram, discord, slack_bot, slack_app, slack_signing] = TOKEN_FALLBACKS.map(|(_, var)| var);
    let channels = &mut config.channels;
    let telegram_default = channels.telegram.accounts.get_mut(DEFAULT_ACCOUNT).map(|account| &mut account.bot_token);
    for slot in std::iter::once(&mut channels.telegram.bot_token).chain(telegram_default) {
        fill(slot, telegram, env);
    }
    let discord_default = channels.discord.accounts.get_mut(DEFAULT_ACCOUNT).map(|account| &mut account.bot_token);
    for slot in std::iter::once(&mut channels.discord.bot_token).chain(discord_default) {
        fill(slot, discord, env);
    }
    let slack = &mut channels.slack;
    for (slot, var) in [
        (&mut slack.bot_token, slack_bot),
        (&mut slack.app_token, slack_app),
        (&mut slack.signing_secret, slack_signing),
    ] {
        fill(slot, var, env);
    }
    if let Some(slack) = slack.accounts.get_mut(DEFAULT_ACCOUNT) {
        for (slot, var) in [
            (&mut slack.bot_token, slack_bot),
            (&mut slack.app_token, slack_app),
            (&mut slack.signing_secret, slack_signing),
        ] {
            fill(slot, var, env);
        }
    }
}

fn fill(slot: &mut Option<Secret>, var: &str, env: &Environment) {
    if slot.as_ref().is_none_or(Secret::is_blank)
        && let Some(value) = env.var(var)
    {
        *slot = Some(Secret::new(value));
    }
}

/// The environment variable Brave's subscription token is read from when
/// `tools.web.search.api_key` is unset and the provider is Brave.
const BRAVE_API_KEY_VAR: &str = "BRAVE_API_KEY";

fn apply_web_search_key_fallback(config: &mut Config, env: &Environment) {
    let Some(search) = &mut config.tools.web.search else { return };
    if search.provider == WebSearchProvider::Brave
        && search.api_key.as_ref().is_none_or(Secret::is_blank)
        && let Some(value) = env.var(BRAVE_API_KEY_VAR)
    {
        search.api_key = Some(Secret::new(value));
    }
}
