//! Configuration errors, worded for the operator who has to fix them.

use std::path::PathBuf;

/// Why the configuration cannot be used. Every variant prints as one line naming where the
/// problem is (file, or environment variable), the key path and what is wrong.
#[derive(Debug, thiserror::Error)]
pub enum ConfigError {
    /// The file named by `--config` or `FERRY_CONFIG` (or found on the lookup path) cannot
    /// be read.
    #[error("cannot read config file {}: {reason}", path.display())]
    Read { path: PathBuf, reason: String },
    /// The file is not valid TOML.
    #[error("{}:{line}:{column}: invalid TOML: {message}", path.display())]
    Syntax { path: PathBuf, line: usize, column: usize, message: String },
    /// A key has a wrong name, type or value.
    #[error("invalid config ({origin}): {key}: {reason}")]
    Invalid { origin: String, key: String, reason: String },
}

/// A setting that is valid but almost certainly a mistake (a provider no model uses).
/// `ferry config check` and the gateway's start-up report it; it never stops anything.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ConfigWarning {
    /// The file or environment variable the key was set in.
    pub origin: String,
    pub key: String,
    pub reason: String,
}

impl std::fmt::Display for ConfigWarning {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}: {}: {}", self.origin, self.key, self.reason)
    }
}

/// A rule a loaded config breaks, before it is attributed to a file or variable.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Violation {
    /// Dotted key path, e.g. `channels.telegram.allow_from`.
    pub key: String,
    pub reason: String,
}

impl Violation {
    pub fn new(key: impl Into<String>, reason: impl Into<String>) -> Self {
        Self { key: key.into(), reason: reason.into() }
    }
}

/// Error text from parsers can span lines (snippets, carets); an operator's terminal and a
/// log line want one.
pub(crate) fn one_line(text: &str) -> String {
    text.split_whitespace().collect::<Vec<_>>().join(" ")
}
