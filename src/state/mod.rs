//! Where Ferry keeps what must survive a restart, and the SQLite database inside it.
//!
//! State lives in one directory (SPEC §2): `FERRY_STATE_DIR` if set, else the config's
//! `state_dir`, else `$XDG_DATA_HOME/ferry` (`~/.local/share/ferry`). Sessions,
//! transcripts and pairing go in its `ferry.db`; which inbound messages were seen and which
//! still wait for their answer go in its append-only `inbound.log` ([`inbound_log`]).

#[cfg(test)]
mod conformance;
pub mod copy;
mod database;
mod error;
#[cfg(test)]
pub(crate) mod flaky;
mod group_commit;
mod inbound;
pub mod inbound_log;
pub mod leases;
mod legacy;
mod migrations;
pub mod outage;
pub mod postgres;
mod stores;

use std::path::PathBuf;

pub use database::{DATABASE_FILE_NAME, Database, StateError};
pub use error::{StorageError, StorageErrorKind};
pub use group_commit::CommitStats;
pub use inbound::InboundStore;
pub use stores::Stores;

use crate::config::{Config, Environment};

/// Overrides the state directory over the config file.
pub const STATE_DIR_VAR: &str = "FERRY_STATE_DIR";

/// The state directory for this process, by the precedence above. A relative path is taken
/// from the working directory. Errors only when no candidate exists at all (no `HOME`).
pub fn resolve_state_dir(config: &Config, env: &Environment) -> Result<PathBuf, StateError> {
    let chosen = env
        .var(STATE_DIR_VAR)
        .map(PathBuf::from)
        .or_else(|| config.state_dir.clone())
        .or_else(|| env.xdg_dir("XDG_DATA_HOME", ".local/share").map(|dir| dir.join("ferry")))
        .ok_or(StateError::NoStateDir)?;
    Ok(if chosen.is_absolute() { chosen } else { env.cwd().join(chosen) })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn env(vars: &[(&str, &str)]) -> Environment {
        Environment::new(vars.iter().copied(), "/work")
    }

    #[test]
    fn the_environment_variable_wins_over_the_config() {
        let config = Config { state_dir: Some("/from/config".into()), ..Config::default() };
        let dir = resolve_state_dir(&config, &env(&[(STATE_DIR_VAR, "/from/env"), ("HOME", "/home/u")])).unwrap();
        assert_eq!(dir, PathBuf::from("/from/env"));
    }

    #[test]
    fn the_config_wins_over_xdg() {
        let config = Config { state_dir: Some("/from/config".into()), ..Config::default() };
        let dir = resolve_state_dir(&config, &env(&[("XDG_DATA_HOME", "/xdg")])).unwrap();
        assert_eq!(dir, PathBuf::from("/from/config"));
    }

    #[test]
    fn xdg_data_home_then_home_are_the_defaults() {
        let config = Config::default();
        assert_eq!(
            resolve_state_dir(&config, &env(&[("XDG_DATA_HOME", "/xdg"), ("HOME", "/home/u")])).unwrap(),
            PathBuf::from("/xdg/ferry")
        );
        assert_eq!(
            resolve_state_dir(&config, &env(&[("HOME", "/home/u")])).unwrap(),
            PathBuf::from("/home/u/.local/share/ferry")
        );
        // A relative XDG_DATA_HOME is invalid by the XDG spec and ignored.
        assert_eq!(
            resolve_state_dir(&config, &env(&[("XDG_DATA_HOME", "rel"), ("HOME", "/home/u")])).unwrap(),
            PathBuf::from("/home/u/.local/share/ferry")
        );
    }

    #[test]
    fn relative_paths_are_taken_from_the_working_directory() {
        let config = Config { state_dir: Some("state".into()), ..Config::default() };
        assert_eq!(resolve_state_dir(&config, &env(&[])).unwrap(), PathBuf::from("/work/state"));
    }

    #[test]
    fn without_any_candidate_the_error_says_what_to_set() {
        let error = resolve_state_dir(&Config::default(), &env(&[])).unwrap_err();
        assert!(error.to_string().contains(STATE_DIR_VAR), "{error}");
    }
}
