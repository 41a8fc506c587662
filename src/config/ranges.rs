//! The numeric keys and the values that make sense for them.
//!
//! A number of the right type can still be meaningless: port 0, a timeout of 0 that aborts
//! every run at once, an `idle_minutes` so large that date arithmetic overflows. [`RANGES`]
//! lists every numeric key with its inclusive range (a test fails when a numeric key is
//! missing from it, or an entry names no key); loading checks them all. A number that does
//! not even fit its key's Rust type (negative, or 70000 for a port) is reported with the
//! same range, not with the integer type it missed.

use serde_json::Value;
use serde_path_to_error::Segment;

use super::error::Violation;
use super::schema::Config;

/// One numeric key (`*` stands for any one table key) and the values it accepts.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct NumericRange {
    pub pattern: &'static str,
    pub min: u64,
    pub max: u64,
    /// What the number is, where a noun says it better than "must be between": "a port".
    pub noun: Option<&'static str>,
}

impl NumericRange {
    const fn new(pattern: &'static str, min: u64, max: u64) -> Self {
        Self { pattern, min, max, noun: None }
    }

    const fn named(pattern: &'static str, min: u64, max: u64, noun: &'static str) -> Self {
        Self { pattern, min, max, noun: Some(noun) }
    }

    /// Why `shown` (the value as written) is refused.
    pub fn explain(&self, shown: &str) -> String {
        match self.noun {
            Some(noun) => format!("{shown} is not {noun} ({}-{})", self.min, self.max),
            None => format!("must be between {} and {}, got {shown}", self.min, self.max),
        }
    }
}

/// A day, in seconds: longer than any one run or delivery attempt may sensibly take.
const DAY_SECONDS: u64 = 86_400;
/// A year, in minutes: the longest idle time after which a session resetting still means
/// something (and far below where chrono's date arithmetic overflows).
const YEAR_MINUTES: u64 = 525_600;
/// Ten million tokens: above every context window offered today; a bigger number is a typo.
const MAX_TOKENS: u64 = 10_000_000;

/// Every numeric key, in the order of `config/default.toml`.
pub(crate) const RANGES: &[NumericRange] = &[
    NumericRange::named("gateway.port", 1, 65_535, "a port"),
    NumericRange::new("models.providers.*.context_window", 1, MAX_TOKENS),
    NumericRange::new("agents.defaults.timeout_seconds", 1, DAY_SECONDS),
    NumericRange::new("agents.defaults.model_idle_timeout_seconds", 1, 3_600),
    NumericRange::new("agents.defaults.model_retry_after_output_ms", 0, 300_000),
    NumericRange::new("agents.defaults.max_tool_rounds", 1, 1_000),
    NumericRange::new("agents.defaults.max_reply_chars", 1_000, 10_000_000),
    NumericRange::new("agents.defaults.max_concurrent", 1, 1_000),
    NumericRange::new("cron.max_jobs_per_chat", 1, 10_000),
    NumericRange::new("cron.max_jobs_per_agent", 1, 10_000_000),
    NumericRange::new("agents.defaults.human_delay.min_ms", 0, 60_000),
    NumericRange::new("agents.defaults.human_delay.max_ms", 0, 60_000),
    NumericRange::new("agents.defaults.block_streaming_chunk.min_chars", 1, 100_000),
    NumericRange::new("agents.defaults.block_streaming_chunk.max_chars", 1, 100_000),
    NumericRange::new("agents.defaults.block_streaming_coalesce.idle_ms", 0, 60_000),
    NumericRange::new("agents.defaults.compaction.reserve_tokens", 1, MAX_TOKENS),
    NumericRange::new("messages.delivery_deadline_seconds", 1, DAY_SECONDS),
    NumericRange::new("messages.max_inbound_chars", 1, 1_000_000),
    NumericRange::new("messages.queue.debounce_ms", 0, 600_000),
    NumericRange::new("messages.queue.cap", 1, 1_000),
    NumericRange::named("session.reset.at_hour", 0, 23, "an hour of the day"),
    NumericRange::new("session.reset.idle_minutes", 0, YEAR_MINUTES),
    NumericRange::new("hooks.timeout_ms", 1, 600_000),
    NumericRange::new("tools.max_result_chars", 1_000, 10_000_000),
    NumericRange::new("tools.sandbox.cpu_seconds", 1, DAY_SECONDS),
    NumericRange::new("tools.sandbox.memory_mb", 64, 1_048_576),
    NumericRange::new("tools.sandbox.max_processes", 16, 65_536),
    NumericRange::new("tools.sandbox.max_file_mb", 1, 1_048_576),
    NumericRange::new("tools.exec.approval_timeout", 10, DAY_SECONDS),
    NumericRange::new("tools.exec.max_timeout", 1, DAY_SECONDS),
    NumericRange::new("tools.exec.max_background", 1, 64),
    NumericRange::new("tools.web.timeout_seconds", 1, 3_600),
    NumericRange::new("tools.web.max_bytes", 1_000, 100_000_000),
    NumericRange::new("tools.web.max_redirects", 0, 20),
    NumericRange::new("mcp.servers.*.timeout", 1, DAY_SECONDS),
    NumericRange::new("mcp.startup_wait_seconds", 0, 600),
    NumericRange::new("state.pool_size", 1, 64),
    NumericRange::new("state.lease_seconds", 3, 3_600),
    NumericRange::new("state.renew_seconds", 1, 1_200),
    NumericRange::new("media.max_mb", 1, 2_048),
    NumericRange::new("media.channel_max_mb.*", 1, 2_048),
    NumericRange::new("media.ttl_days", 1, 3_650),
    NumericRange::new("media.history_images", 0, 100),
    NumericRange::new("media.inline_text_chars", 0, 1_000_000),
    NumericRange::new("media.parse_timeout_seconds", 1, 600),
    NumericRange::new("media.parse_memory_mb", 64, 65_536),
    NumericRange::new("media.transcription.timeout", 1, 3_600),
    NumericRange::new("memory.max_document_bytes", 1_000, 10_000_000),
    NumericRange::new("memory.max_scope_bytes", 1_000, 10_000_000_000),
    NumericRange::new("memory.prompt_bytes", 0, 100_000),
    NumericRange::new("memory.recall_bytes", 0, 100_000),
    NumericRange::new("channels.*.history_limit", 0, 1_000),
    NumericRange::new("channels.*.text_chunk_limit", 1, 100_000),
    NumericRange::new("channels.discord.max_lines_per_message", 1, 1_000),
];

/// Checks every numeric key against its range and reports the first one outside it. The
/// keys of a listed agent or account have their parent's range (see `config::inherit`).
pub(crate) fn check(config: &Config) -> Result<(), Violation> {
    let tree = serde_json::to_value(config).map_err(|error| Violation::new("(top level)", error.to_string()))?;
    let mut leaves = Vec::new();
    numbers(&tree, String::new(), &mut leaves);
    for (key, number) in leaves {
        // Every numeric key is unsigned; deserialization has refused anything else.
        if let (Some(range), Some(number)) = (range_of(&key), number.as_u64())
            && !(range.min..=range.max).contains(&number)
        {
            return Err(Violation::new(key, range.explain(&number.to_string())));
        }
    }
    Ok(())
}

/// Every number in `tree`, with its dotted key.
fn numbers<'t>(tree: &'t Value, key: String, out: &mut Vec<(String, &'t serde_json::Number)>) {
    match tree {
        Value::Object(table) => {
            for (name, child) in table {
                let path = if key.is_empty() { name.clone() } else { format!("{key}.{name}") };
                numbers(child, path, out);
            }
        }
        Value::Number(number) => out.push((key, number)),
        _ => {}
    }
}

/// The range of the numeric key `dotted`, if it has one.
pub(crate) fn range_of(dotted: &str) -> Option<&'static NumericRange> {
    let path: Vec<Segment> = dotted.split('.').map(|part| Segment::Map { key: part.to_owned() }).collect();
    for_path(&path)
}

/// The range of the key at `path` (as serde_path_to_error tracks it), if it is numeric.
pub(crate) fn for_path(path: &[Segment]) -> Option<&'static NumericRange> {
    let path = super::inherit::canonical(path);
    RANGES.iter().find(|range| {
        let parts: Vec<&str> = range.pattern.split('.').collect();
        parts.len() == path.len()
            && parts.iter().zip(&path).all(|(part, segment)| match segment {
                Segment::Map { key } => *part == "*" || part == key,
                _ => false,
            })
    })
}

/// Every `(dotted key, value)` of `tree` that `pattern` names.
#[cfg(test)]
pub(crate) fn matching<'t>(tree: &'t Value, pattern: &str) -> Vec<(String, &'t Value)> {
    let mut found = vec![(String::new(), tree)];
    for part in pattern.split('.') {
        let mut next = Vec::new();
        for (key, value) in found {
            let Value::Object(table) = value else { continue };
            for (name, child) in table {
                if part == "*" || part == name {
                    let path = if key.is_empty() { name.clone() } else { format!("{key}.{name}") };
                    next.push((path, child));
                }
            }
        }
        found = next;
    }
    found
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_noun_reads_better_than_a_bare_range() {
        assert_eq!(RANGES[0].explain("70000"), "70000 is not a port (1-65535)");
        assert_eq!(NumericRange::new("x", 1, 86_400).explain("0"), "must be between 1 and 86400, got 0");
    }

    #[test]
    fn a_wildcard_matches_any_one_table_key() {
        let tree = serde_json::json!({
            "channels": {"telegram": {"history_limit": 5}, "discord": {"history_limit": 7}, "webchat": {}},
        });
        let mut found: Vec<_> =
            matching(&tree, "channels.*.history_limit").into_iter().map(|(key, value)| (key, value.clone())).collect();
        found.sort_by(|a, b| a.0.cmp(&b.0));
        assert_eq!(
            found,
            [
                ("channels.discord.history_limit".to_owned(), serde_json::json!(7)),
                ("channels.telegram.history_limit".to_owned(), serde_json::json!(5)),
            ]
        );
    }

    #[test]
    fn a_path_finds_its_range_through_wildcards() {
        let path = |keys: &[&str]| keys.iter().map(|key| Segment::Map { key: (*key).to_owned() }).collect::<Vec<_>>();
        assert_eq!(for_path(&path(&["gateway", "port"])).map(|r| r.max), Some(65_535));
        assert_eq!(
            for_path(&path(&["models", "providers", "local", "context_window"])).map(|r| r.pattern),
            Some("models.providers.*.context_window")
        );
        assert_eq!(for_path(&path(&["gateway", "bind"])), None);
        assert_eq!(for_path(&path(&["gateway"])), None);
    }

    #[test]
    fn the_first_value_out_of_range_is_reported_with_its_key() {
        let mut config = Config::default();
        config.channels.slack.history_limit = 5_000;
        assert_eq!(
            check(&config),
            Err(Violation::new("channels.slack.history_limit", "must be between 0 and 1000, got 5000"))
        );
        config.channels.slack.history_limit = 1_000;
        assert_eq!(check(&config), Ok(()));
    }
}
