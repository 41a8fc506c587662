//! Where Ferry keeps what must survive a restart: the state directory, and the stores on
//! one of two backends, SQLite in that directory (one process) or PostgreSQL (several
//! replicas sharing one database).
//!
//! State lives in one directory (SPEC §2): `FERRY_STATE_DIR` if set, else the config's
//! `state_dir`, else `$XDG_DATA_HOME/ferry` (`~/.local/share/ferry`). `[state] backend`
//! chooses where the stores are: `ferry.db` and the append-only `inbound.log` in that
//! directory, or a PostgreSQL database. [`Stores`] opens the chosen one and hands each store
//! to the rest of Ferry as a trait object.
//!
//! # One pattern for every store
//!
//! A store is one interface with two implementations, laid out the same way each time:
//!
//! - `state/<store>.rs` (or `state/<store>/mod.rs`): the trait and its value types, and
//!   whatever both backends must agree on (the dedupe window, what a pairing code looks
//!   like, when a session resets, how a transcript is kept as rows). Neither backend owns it;
//!   it imports nothing above `state` but `config`, `metrics` and `types`.
//! - `state/sqlite/<store>.rs` and `state/postgres/<store>.rs`: the two implementations, side
//!   by side, each using only its own backend's handle ([`Database`], [`postgres::PgBackend`])
//!   and the store's module.
//! - `state/conformance/<store>.rs`: the same tests run on both backends.
//! - Each backend's migrations (`migrations/*.sql` for SQLite, `migrations/postgres/*.sql`),
//!   and the store's rows in [`copy`] (`ferry state copy --from sqlite --to postgres`).
//!
//! The stores today: [`sessions`] (sessions and transcripts), [`inbound`] (dedupe, the queue
//! journal and the delivery ledger's records; on SQLite the [`sqlite::inbound_log`]),
//! [`pairing`] (codes and approved senders), [`health`] (auth profiles' cooldowns), [`jobs`]
//! (scheduled jobs and their runs), and
//! [`leases`] (which replica runs which session: PostgreSQL only, since one process on
//! SQLite owns every session). Domain code (routing, sessions, models, the ledger) calls only
//! the traits; `CONTRIBUTING.md` walks through adding a store.
//!
//! Failures are one [`StorageError`] whatever the backend, and [`outage`] rides out a
//! passing loss of the database.

#[cfg(test)]
pub(crate) mod conformance;
#[cfg(feature = "postgres")]
pub mod copy;
mod error;
pub mod health;
pub mod inbound;
pub mod intercept;
pub mod jobs;
pub mod leases;
pub mod memory;
pub mod outage;
pub mod pairing;
#[cfg(feature = "postgres")]
pub mod postgres;
pub mod sessions;
pub mod sqlite;
mod stores;

use std::path::PathBuf;

pub use error::{StateError, StorageError, StorageErrorKind};
pub use inbound::InboundStore;
pub use sqlite::{CommitStats, DATABASE_FILE_NAME, Database};
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
