//! Structured logs on stderr, filtered like `RUST_LOG`.
//!
//! Stdout belongs to command output (`ferry config show`, `ferry agent --json`), so logs
//! always go to stderr. Secrets cannot reach a log line through the config: every
//! credential is a [`Secret`](crate::config::Secret), which prints as `***`.

use std::str::FromStr;

use tracing_subscriber::EnvFilter;

/// The filter used when `RUST_LOG` is unset.
pub const DEFAULT_FILTER: &str = "info";

/// How log lines look.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum LogFormat {
    /// Human-readable, coloured when stderr is a terminal.
    #[default]
    Pretty,
    /// One JSON object per line, for log shippers.
    Json,
}

impl FromStr for LogFormat {
    type Err = String;

    fn from_str(value: &str) -> Result<Self, Self::Err> {
        match value {
            "pretty" => Ok(LogFormat::Pretty),
            "json" => Ok(LogFormat::Json),
            other => Err(format!("unknown log format {other:?} (expected \"pretty\" or \"json\")")),
        }
    }
}

/// Installs the global subscriber. `filter` is a `RUST_LOG`-style directive string; when
/// it does not parse, the default is used and a warning says so (a typo in `RUST_LOG`
/// must not silence the daemon).
pub fn init(format: LogFormat, filter: Option<&str>) {
    let (env_filter, rejected) = match filter.map(EnvFilter::try_new) {
        Some(Ok(parsed)) => (parsed, None),
        Some(Err(error)) => (EnvFilter::new(DEFAULT_FILTER), Some(error.to_string())),
        None => (EnvFilter::new(DEFAULT_FILTER), None),
    };
    let builder = tracing_subscriber::fmt().with_env_filter(env_filter).with_writer(std::io::stderr);
    let installed = match format {
        LogFormat::Pretty => builder.with_ansi(std::io::IsTerminal::is_terminal(&std::io::stderr())).try_init(),
        LogFormat::Json => builder.json().flatten_event(true).try_init(),
    };
    if installed.is_err() {
        // Already installed (tests, or an embedding application): keep theirs.
        return;
    }
    if let Some(error) = rejected {
        tracing::warn!(%error, default = DEFAULT_FILTER, "RUST_LOG does not parse; using the default filter");
    }
}
