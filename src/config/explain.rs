//! Operator sentences for what the parsers report.
//!
//! serde, the `config` crate and the TOML parser describe problems in their own terms:
//! "enum QueueMode does not have variant constructor colect", "invalid type: 64-bit
//! unsigned integer `70000`, expected an unsigned 16 bit integer", "duplicate key". Loading
//! turns each into what the operator needs to fix it: the valid values (and the nearest one
//! when the value looks like a typo), the range a number must be in, the key that is set
//! twice and where it was set first.

use std::ops::Range;

use serde_path_to_error::Segment;

use super::error::one_line;
use super::schema::Config;
use super::{ranges, variants};

/// Why deserializing the key at `path` failed: the reason alone, without the `config`
/// crate's "for key … in …" suffix (the key and origin are reported separately, and more
/// precisely).
pub(crate) fn deserialize_error(error: &config::ConfigError, path: &[Segment]) -> String {
    match error {
        config::ConfigError::At { error, .. } => deserialize_error(error, path),
        config::ConfigError::Type { unexpected, expected, .. } => {
            let unexpected = unexpected.to_string();
            // A number that does not fit the key's integer type ("… `70000`, expected an
            // unsigned 16 bit integer", "… `-1`, expected an unsigned 64 bit or less integer").
            if expected.contains(" bit ")
                && let Some(number) = backticked(&unexpected).filter(|text| text.parse::<i128>().is_ok())
                && let Some(range) = ranges::for_path(path)
            {
                return range.explain(number);
            }
            format!("invalid type: {unexpected}, expected {expected}")
        }
        config::ConfigError::Message(message) => message_error(message, path),
        other => one_line(&other.to_string()),
    }
}

fn message_error(message: &str, path: &[Segment]) -> String {
    // The config crate's word for an unknown enum value: "enum QueueMode does not have
    // variant constructor colect". The valid values come from the enum's derive.
    if let Some((_, value)) =
        message.strip_prefix("enum ").and_then(|rest| rest.split_once(" does not have variant constructor "))
    {
        return match variants::enum_values::<Config>(path) {
            Some(valid) => not_one_of(value, valid),
            None => format!("{value:?} is not a valid value here"),
        };
    }
    // …and for a number, list or table where an enum's string belongs.
    if message.starts_with("value of enum ")
        && let Some(valid) = variants::enum_values::<Config>(path)
    {
        return format!("expected one of {}", quoted_list(valid));
    }
    // serde's own wording, for enums read by a serde deserializer and for unknown keys.
    if let Some((value, valid)) = serde_unknown(message, "unknown variant `") {
        return not_one_of(&value, &valid);
    }
    if let Some((key, valid)) = serde_unknown(message, "unknown field `") {
        return unknown_key(&key, &valid);
    }
    one_line(message)
}

/// Reads serde's "unknown variant `x`, expected one of `a`, `b`, `c`" (and its shorter
/// forms "expected `a` or `b`", "expected `a`", "there are no variants") as the value and
/// the valid names. `prefix` is "unknown variant `" or "unknown field `".
fn serde_unknown(message: &str, prefix: &str) -> Option<(String, Vec<String>)> {
    let (value, rest) = message.strip_prefix(prefix)?.split_once("`, ")?;
    let valid = match rest.strip_prefix("expected ") {
        Some(list) => list.split('`').skip(1).step_by(2).map(str::to_owned).collect(),
        None if rest.starts_with("there are no ") => Vec::new(),
        None => return None,
    };
    Some((value.to_owned(), valid))
}

/// `"gemini" is not one of "openai", "anthropic", "echo"`, with the nearest valid value
/// when `value` looks like a typo of it.
pub(crate) fn not_one_of(value: &str, valid: &[impl AsRef<str>]) -> String {
    let mut text = format!("{value:?} is not one of {}", quoted_list(valid));
    if let Some(near) = did_you_mean(value, valid) {
        text.push_str(&format!("; did you mean {near:?}?"));
    }
    text
}

fn unknown_key(key: &str, valid: &[impl AsRef<str>]) -> String {
    if valid.is_empty() {
        return "unknown key: this table takes no keys".to_owned();
    }
    let mut text = format!("unknown key, expected one of {}", quoted_list(valid));
    if let Some(near) = did_you_mean(key, valid) {
        text.push_str(&format!("; did you mean {near:?}?"));
    }
    text
}

fn quoted_list(values: &[impl AsRef<str>]) -> String {
    values.iter().map(|value| format!("{:?}", value.as_ref())).collect::<Vec<_>>().join(", ")
}

/// The candidate nearest to `value` when it is near enough to be a typo of it: at most a
/// third of the characters differ (counting a swap of neighbours as one difference), case
/// ignored. Ties go to the candidate listed first.
pub(crate) fn did_you_mean<'c>(value: &str, candidates: &'c [impl AsRef<str>]) -> Option<&'c str> {
    let value = value.to_lowercase();
    candidates
        .iter()
        .map(|candidate| (strsim::osa_distance(&value, candidate.as_ref()), candidate.as_ref()))
        .filter(|(distance, candidate)| distance * 3 <= value.chars().count().max(candidate.chars().count()))
        .min_by_key(|(distance, _)| *distance)
        .map(|(_, candidate)| candidate)
}

/// Why a required key (`models.providers.x.kind`) is refused when it is absent; `table` is the
/// path of the table it belongs in.
pub(crate) fn missing_key(table: &[Segment], key: &str) -> String {
    let mut path = table.to_vec();
    path.push(Segment::Map { key: key.to_owned() });
    match variants::enum_values::<Config>(&path) {
        Some(valid) => format!("missing, and required: set it to one of {}", quoted_list(valid)),
        None => "missing, and required".to_owned(),
    }
}

/// What the TOML parser reports, for the operator: `span` is where it found the problem.
pub(crate) fn toml_error(text: &str, message: &str, span: Range<usize>) -> String {
    if message == "duplicate key" {
        return duplicate_key(text, span);
    }
    // An integer past 64 bits: "invalid type: integer `99999999999999999999` as i128, …".
    if message.starts_with("invalid type: integer `")
        && message.contains("` as i128")
        && let Some(number) = backticked(message)
    {
        return format!("{number} is too large for a TOML integer (at most {})", i64::MAX);
    }
    one_line(message)
}

/// The text between the first pair of backticks.
fn backticked(text: &str) -> Option<&str> {
    text.split('`').nth(1)
}

/// A bare key no config uses, put where the repeated key was to find that key's table.
const PROBE_KEY: &str = "ferry_repeated_key_probe";

/// The TOML parser says only "duplicate key" and where: `span` covers the repeated key.
/// This names it by its full path (`gateway.port`) and gives the line it was first set on.
fn duplicate_key(text: &str, span: Range<usize>) -> String {
    let Some(raw) = text.get(span.clone()) else {
        return "duplicate key".to_owned();
    };
    let name = unquote(raw.trim());
    let in_header = text[..span.start].rsplit('\n').next().is_some_and(|line| line.trim_start().starts_with('['));
    match first_definition(text, span, name) {
        Some((path, line)) if in_header => format!("table [{path}] is defined twice (first on line {line})"),
        Some((path, line)) => format!("duplicate key {path} (first set on line {line})"),
        None => format!("duplicate key {name}"),
    }
}

/// Parses the text with the repeat renamed to [`PROBE_KEY`]: the probe then sits in the
/// table the repeat was meant for, next to the first definition.
fn first_definition(text: &str, span: Range<usize>, name: &str) -> Option<(String, usize)> {
    let probe = format!("{}{PROBE_KEY}{}", &text[..span.start], &text[span.end..]);
    let (document, _) = toml::de::DeTable::parse_recoverable(&probe);
    let (mut path, table) = table_holding(document.get_ref(), PROBE_KEY)?;
    let (first, _) = table.iter().find(|(key, _)| key.get_ref().as_ref() == name)?;
    // The span is in `probe`, which is longer or shorter than `text` after the repeat; the
    // probe key has no newline, so line numbers are the same in both.
    let line = probe.get(..first.span().start)?.matches('\n').count() + 1;
    path.push(name.to_owned());
    Some((path.join("."), line))
}

/// The path of the table that has `key`, and the table.
fn table_holding<'t, 'i>(
    table: &'t toml::de::DeTable<'i>,
    key: &str,
) -> Option<(Vec<String>, &'t toml::de::DeTable<'i>)> {
    if table.iter().any(|(name, _)| name.get_ref().as_ref() == key) {
        return Some((Vec::new(), table));
    }
    table.iter().find_map(|(name, value)| {
        let tables: Vec<&toml::de::DeTable<'i>> = match value.get_ref() {
            toml::de::DeValue::Table(child) => vec![child],
            toml::de::DeValue::Array(items) => items
                .iter()
                .filter_map(|item| match item.get_ref() {
                    toml::de::DeValue::Table(child) => Some(child),
                    _ => None,
                })
                .collect(),
            _ => Vec::new(),
        };
        tables.into_iter().find_map(|child| {
            let (mut path, found) = table_holding(child, key)?;
            path.insert(0, name.get_ref().to_string());
            Some((path, found))
        })
    })
}

/// `"command:new"` or `'x'` as the key it names; a bare key as it is.
fn unquote(raw: &str) -> &str {
    for quote in ['"', '\''] {
        if let Some(inner) = raw.strip_prefix(quote).and_then(|rest| rest.strip_suffix(quote)) {
            return inner;
        }
    }
    raw
}

#[cfg(test)]
mod tests {
    use serde::de::Error as _;
    use serde::de::value::Error as SerdeError;

    use super::*;

    #[test]
    fn a_typo_gets_the_nearest_value_and_a_different_word_gets_none() {
        let modes = ["collect", "steer", "followup", "steer-backlog", "interrupt"];
        assert_eq!(did_you_mean("colect", &modes), Some("collect"));
        assert_eq!(did_you_mean("Collect", &modes), Some("collect"));
        assert_eq!(did_you_mean("stere", &modes), Some("steer"));
        assert_eq!(did_you_mean("steer_backlog", &modes), Some("steer-backlog"));
        assert_eq!(did_you_mean("batch", &modes), None);
        assert_eq!(did_you_mean("gemini", &["openai", "anthropic", "echo"]), None);
        assert_eq!(did_you_mean("of", &["off", "first", "all"]), Some("off"));
    }

    #[test]
    fn serde_unknown_variant_and_field_messages_in_every_form_are_read() {
        let cases: [(SerdeError, &str, &[&str]); 5] = [
            (SerdeError::unknown_variant("x", &["a", "b", "c"]), "x", &["a", "b", "c"]),
            (SerdeError::unknown_variant("x", &["a", "b"]), "x", &["a", "b"]),
            (SerdeError::unknown_variant("x", &["a"]), "x", &["a"]),
            (SerdeError::unknown_variant("x", &[]), "x", &[]),
            (SerdeError::unknown_field("prot", &["bind", "port"]), "prot", &["bind", "port"]),
        ];
        for (error, value, valid) in cases {
            let message = error.to_string();
            let prefix = if message.starts_with("unknown field") { "unknown field `" } else { "unknown variant `" };
            let (found_value, found_valid) = serde_unknown(&message, prefix).unwrap_or_else(|| panic!("{message}"));
            assert_eq!(found_value, value, "{message}");
            assert_eq!(found_valid, valid, "{message}");
        }
    }

    #[test]
    fn serde_messages_are_rewritten_with_the_valid_values() {
        let message = SerdeError::unknown_variant("stere", &["collect", "steer"]).to_string();
        assert_eq!(message_error(&message, &[]), r#""stere" is not one of "collect", "steer"; did you mean "steer"?"#);
        let message = SerdeError::unknown_field("prot", &["bind", "port", "auth_token"]).to_string();
        assert_eq!(
            message_error(&message, &[]),
            r#"unknown key, expected one of "bind", "port", "auth_token"; did you mean "port"?"#
        );
        assert_eq!(message_error("something else\n  entirely", &[]), "something else entirely");
    }

    #[test]
    fn a_repeated_key_is_named_by_its_path_and_first_line() {
        let text = "[gateway]\nport = 1\nbind = \"::1\"\nport = 2\n";
        let start = text.rfind("port").unwrap();
        assert_eq!(duplicate_key(text, start..start + 4), "duplicate key gateway.port (first set on line 2)");

        let text = "[hooks.internal.\"command:new\"]\npath = \"/a\"\npath = \"/b\"\n";
        let start = text.rfind("path").unwrap();
        assert_eq!(
            duplicate_key(text, start..start + 4),
            "duplicate key hooks.internal.command:new.path (first set on line 2)"
        );
    }

    /// Found by fuzzing (fuzz/seeds/config_load/regression-duplicate-table): the first
    /// definition's position was read in the probed text but used in the original, past its
    /// end here, and loading the file panicked.
    #[test]
    fn a_definition_found_after_the_repeat_does_not_panic() {
        let text = "[c]\n[c]\n =\n[c]\n[c]\n =\n  =";
        let error = text.parse::<toml::Table>().unwrap_err();
        let message = toml_error(text, error.message(), error.span().unwrap_or(0..0));
        assert!(message.starts_with("table [c] is defined twice"), "{message}");
    }

    #[test]
    fn a_repeated_table_header_is_named_as_a_table() {
        let text = "[gateway]\nport = 1\n\n[channels.telegram]\nenabled = true\n[channels.telegram]\n";
        let start = text.rfind("telegram").unwrap();
        assert_eq!(
            duplicate_key(text, start..start + "telegram".len()),
            "table [channels.telegram] is defined twice (first on line 4)"
        );
    }
}
