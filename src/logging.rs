//! Structured logs on stderr, filtered like `RUST_LOG`.
//!
//! Stdout belongs to command output (`ferry config show`, `ferry agent --json`), so logs
//! always go to stderr. Secrets cannot reach a log line through the config: every
//! credential is a [`Secret`](crate::config::Secret), which prints as `***`.
//!
//! How much is logged: each command has a default level ([`Verbosity::default`]: INFO for
//! the daemon, WARN for one-shot commands, whose stderr a person reads next to the answer);
//! each `-v` raises it one step; without `-v`, `RUST_LOG` decides when it is set.

use std::str::FromStr;

use tracing::Level;
use tracing_subscriber::EnvFilter;

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

/// Levels from quietest to most detailed: the steps `-v` climbs.
const LEVELS: [Level; 5] = [Level::ERROR, Level::WARN, Level::INFO, Level::DEBUG, Level::TRACE];

/// How much a command logs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Verbosity {
    /// The level when neither `-v` nor `RUST_LOG` says otherwise.
    pub default: Level,
    /// How many `-v` were given; each one is a level more detail.
    pub raised: u8,
}

impl Verbosity {
    /// `default` raised by `raised` steps, at most to TRACE.
    pub fn level(self) -> Level {
        let start = LEVELS.iter().position(|level| *level == self.default).unwrap_or(2);
        LEVELS[(start + usize::from(self.raised)).min(LEVELS.len() - 1)]
    }
}

/// The filter for `verbosity` and the `RUST_LOG` value, and `RUST_LOG`'s parse error when
/// it was set but did not parse (the default level is used then).
fn filter(verbosity: Verbosity, rust_log: Option<&str>) -> (EnvFilter, Option<String>) {
    // A flag typed now wins over the environment, as `--config` wins over FERRY_CONFIG.
    if verbosity.raised > 0 {
        return (EnvFilter::new(verbosity.level().as_str()), None);
    }
    let default = || EnvFilter::new(verbosity.default.as_str());
    match rust_log.map(EnvFilter::try_new) {
        Some(Ok(parsed)) => (parsed, None),
        Some(Err(error)) => (default(), Some(error.to_string())),
        None => (default(), None),
    }
}

/// Crates that log what travels on the wire, whole, at DEBUG or TRACE: a WebSocket frame
/// holds a `connect` request's `auth.token` (or a wrong token a client tried), a Discord
/// IDENTIFY the bot token. Whatever the filter says, they log at INFO at most, so no level
/// ever writes a secret.
const WIRE_LOGGERS: [&str; 2] = ["tungstenite", "tokio_tungstenite"];

/// `filter` with the wire loggers capped at INFO (see [`WIRE_LOGGERS`]), and rmcp, which
/// writes whole JSON-RPC messages at DEBUG (what users told remote servers), at INFO too; at
/// WARN when `quiet_mcp`, since it says INFO on every notification a server sends.
fn without_wire_dumps(filter: EnvFilter, quiet_mcp: bool) -> EnvFilter {
    let rmcp = if quiet_mcp { "rmcp=warn".to_owned() } else { "rmcp=info".to_owned() };
    let caps = WIRE_LOGGERS.iter().map(|target| format!("{target}=info")).chain([rmcp]);
    caps.fold(filter, |filter, cap| match cap.parse() {
        Ok(directive) => filter.add_directive(directive),
        Err(_) => filter,
    })
}

/// Installs the global subscriber. `rust_log` is a `RUST_LOG`-style directive string; when
/// it does not parse, the command's default level is used and a warning says so (a typo in
/// `RUST_LOG` must not silence the daemon).
pub fn init(format: LogFormat, verbosity: Verbosity, rust_log: Option<&str>) {
    let (env_filter, rejected) = filter(verbosity, rust_log);
    // Unless asked for more (-v, RUST_LOG), rmcp's chatter stays out.
    let asked = verbosity.raised > 0 || (rust_log.is_some() && rejected.is_none());
    let env_filter = without_wire_dumps(env_filter, !asked);
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
        tracing::warn!(%error, default = %verbosity.default, "RUST_LOG does not parse; using the default level");
    }
}

#[cfg(test)]
mod tests {
    use tracing_subscriber::filter::LevelFilter;

    use super::*;

    const QUIET: Verbosity = Verbosity { default: Level::WARN, raised: 0 };

    #[test]
    fn each_v_is_one_level_more_up_to_trace() {
        let raised = |raised| Verbosity { raised, ..QUIET }.level();
        assert_eq!(
            [raised(0), raised(1), raised(2), raised(3), raised(9)],
            [Level::WARN, Level::INFO, Level::DEBUG, Level::TRACE, Level::TRACE]
        );
        assert_eq!(Verbosity { default: Level::INFO, raised: 1 }.level(), Level::DEBUG);
    }

    #[test]
    fn v_wins_over_rust_log_which_wins_over_the_default() {
        let hint = |verbosity, rust_log| filter(verbosity, rust_log).0.max_level_hint();
        assert_eq!(hint(QUIET, None), Some(LevelFilter::WARN));
        assert_eq!(hint(QUIET, Some("debug")), Some(LevelFilter::DEBUG));
        assert_eq!(hint(Verbosity { raised: 1, ..QUIET }, Some("error")), Some(LevelFilter::INFO));
    }

    #[test]
    fn a_rust_log_that_does_not_parse_falls_back_to_the_default_and_says_why() {
        let (filter, rejected) = filter(QUIET, Some("ferry=notalevel"));
        assert_eq!(filter.max_level_hint(), Some(LevelFilter::WARN));
        assert!(rejected.is_some());
    }
}
