//! Ferry's configuration: one TOML file plus `FERRY__` environment overrides, typed and
//! validated before anything starts.
//!
//! ```no_run
//! use ferry::config::{Environment, load};
//!
//! let loaded = load(None, &Environment::from_process())?;
//! println!("gateway on port {}", loaded.config.gateway.port);
//! # Ok::<(), ferry::config::ConfigError>(())
//! ```
//!
//! Loading fails with one [`ConfigError`] that names the file or environment variable, the
//! key path and what is wrong (the valid values of an enum, the range of a number, where a
//! repeated key was first set); nothing half-valid is ever returned. Settings that are valid
//! but look like mistakes come back as [`ConfigWarning`]s.

mod accounts;
mod agents_schema;
pub mod binding_keys;
mod channels_schema;
mod cron_schema;
mod endpoint;
mod environment;
mod error;
mod explain;
pub mod features;
mod human_delay;
mod inherit;
mod load;
mod mcp_schema;
mod media_schema;
mod memory_schema;
mod model_choice;
mod ranges;
mod schema;
mod secret;
mod state_schema;
pub mod tool_lists;
mod tools_schema;
mod validate;
mod variants;

pub use accounts::Accounts;
pub use agents_schema::{ID_RULE, MAIN_AGENT, MAX_ID_CHARS, default_workspace, valid_id};
pub use cron_schema::{ActiveHours, HeartbeatConfig};
pub use environment::Environment;
pub use error::{ConfigError, ConfigWarning, Violation};
pub use human_delay::{HumanDelay, NATURAL_DELAY_MS};
pub use inherit::{ACCOUNT_CHANNELS, DEFAULT_ACCOUNT};
pub use load::{
    CONFIG_FILE_NAME, CONFIG_FILE_VAR, ConfigSource, ENV_PREFIX, ENV_SEPARATOR, LoadedConfig, default_locations,
    env_var_for, load, load_text, locate,
};
pub use mcp_schema::{MAX_SERVER_NAME_CHARS, valid_server_name};
pub use model_choice::ModelSetting;
pub use schema::*;
pub use secret::{REDACTED, Secret};
pub use validate::{CHANNEL_NAMES, IMPLICIT_PROVIDERS, INTERNAL_HOOK_EVENTS, compile_mention_pattern};

/// The effective configuration as TOML, with every secret shown as `***`.
pub fn render_redacted(config: &Config) -> Result<String, toml::ser::Error> {
    toml::to_string_pretty(config)
}

#[cfg(test)]
mod tests;
