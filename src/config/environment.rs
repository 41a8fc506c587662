//! The process environment and working directory, captured once.
//!
//! Loading reads several variables (`FERRY_CONFIG`, `FERRY__…` overrides, token fallbacks,
//! XDG paths). Taking them from a snapshot makes loading a pure function of its inputs, so
//! tests describe an environment instead of mutating the real one.

use std::collections::HashMap;
use std::path::{Path, PathBuf};

#[derive(Debug, Clone, Default)]
pub struct Environment {
    vars: HashMap<String, String>,
    cwd: PathBuf,
}

impl Environment {
    /// The real process environment (variables that are not valid UTF-8 are skipped).
    pub fn from_process() -> Self {
        Self {
            vars: std::env::vars_os()
                .filter_map(|(name, value)| Some((name.into_string().ok()?, value.into_string().ok()?)))
                .collect(),
            cwd: std::env::current_dir().unwrap_or_default(),
        }
    }

    /// A made-up environment, for tests and embedding.
    pub fn new<K: Into<String>, V: Into<String>>(
        vars: impl IntoIterator<Item = (K, V)>,
        cwd: impl Into<PathBuf>,
    ) -> Self {
        Self { vars: vars.into_iter().map(|(k, v)| (k.into(), v.into())).collect(), cwd: cwd.into() }
    }

    /// A variable's value; an empty value counts as unset.
    pub fn var(&self, name: &str) -> Option<&str> {
        self.vars.get(name).map(String::as_str).filter(|value| !value.is_empty())
    }

    pub fn cwd(&self) -> &Path {
        &self.cwd
    }

    pub fn vars(&self) -> &HashMap<String, String> {
        &self.vars
    }

    /// An XDG base directory: `$<var>` when set and absolute, else `$HOME/<fallback>`.
    pub fn xdg_dir(&self, var: &str, fallback_under_home: &str) -> Option<PathBuf> {
        if let Some(dir) = self.var(var).map(PathBuf::from).filter(|dir| dir.is_absolute()) {
            return Some(dir);
        }
        self.var("HOME").map(|home| Path::new(home).join(fallback_under_home))
    }
}
