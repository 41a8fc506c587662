//! `config/default.toml` documents every key, and every number has a range: checked on the
//! file with its examples switched on. The examples include MCP servers and web search, so
//! these run in builds with the `mcp` and `web` features (the default set and `full`).

use std::collections::BTreeSet;

use serde_path_to_error::Segment;

use super::*;
use crate::config::ranges;

/// `default.toml` with its `# key = value` examples and `# [table]` headers switched on.
fn default_toml_with_examples() -> String {
    DEFAULT_TOML
        .lines()
        .map(|line| {
            let body = line.strip_prefix("# ").unwrap_or(line);
            let is_setting = body.split_once(" = ").is_some_and(|(key, _)| {
                key.chars().all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '"' || c == '-')
            });
            let is_header = body.starts_with('[') && body.ends_with(']');
            if line.starts_with("# ") && (is_setting || is_header) { body.to_owned() } else { line.to_owned() }
        })
        .collect::<Vec<_>>()
        .join("\n")
}

fn key_paths(value: &serde_json::Value, prefix: &str, out: &mut BTreeSet<String>) {
    if let serde_json::Value::Object(map) = value {
        for (key, child) in map {
            let path = if prefix.is_empty() { key.clone() } else { format!("{prefix}.{key}") };
            key_paths(child, &path, out);
            out.insert(path);
        }
    }
}

// The examples include MCP servers and web search, which a build without them refuses.
#[test]
fn default_toml_documents_every_key_and_nothing_else() {
    let scratch = Scratch::new();
    // Deserializing proves the examples name no unknown key.
    let loaded = scratch.load_text(&default_toml_with_examples(), &[]).unwrap();
    let as_json = serde_json::to_value(&loaded.config).unwrap();

    let mut keys = BTreeSet::new();
    key_paths(&as_json, "", &mut keys);
    let undocumented_options: Vec<_> =
        keys.iter().filter(|key| as_json.pointer(&pointer(key)).unwrap().is_null()).collect();
    assert!(
        undocumented_options.is_empty(),
        "optional keys without an example in default.toml: {undocumented_options:?}"
    );

    let documented: toml::Table = default_toml_with_examples().parse().unwrap();
    let mut documented_keys = BTreeSet::new();
    key_paths(&serde_json::to_value(documented).unwrap(), "", &mut documented_keys);
    // A listed agent's or account's inherited keys are documented where they are inherited from.
    let missing: Vec<_> =
        keys.difference(&documented_keys).filter(|key| !documented_keys.contains(&inherited_from(key))).collect();
    assert!(missing.is_empty(), "keys missing from default.toml: {missing:?}");
}

/// The key `dotted` inherits from: `agents.list.x.model` from `agents.defaults.model`.
fn inherited_from(dotted: &str) -> String {
    let path: Vec<Segment> = dotted.split('.').map(|part| Segment::Map { key: part.to_owned() }).collect();
    let canonical = super::inherit::canonical(&path);
    let parts: Vec<&str> = canonical
        .iter()
        .filter_map(|segment| match segment {
            Segment::Map { key } => Some(key.as_str()),
            _ => None,
        })
        .collect();
    parts.join(".")
}

fn pointer(dotted: &str) -> String {
    dotted.split('.').map(|part| format!("/{part}")).collect()
}

/// `(key, value)` for every number in `tree`.
fn numeric_leaves(tree: &serde_json::Value, prefix: &str, out: &mut Vec<String>) {
    match tree {
        serde_json::Value::Object(map) => {
            for (key, child) in map {
                let path = if prefix.is_empty() { key.clone() } else { format!("{prefix}.{key}") };
                numeric_leaves(child, &path, out);
            }
        }
        serde_json::Value::Number(_) => out.push(prefix.to_owned()),
        _ => {}
    }
}

#[test]
fn every_numeric_key_has_a_range_and_every_range_a_key() {
    let scratch = Scratch::new();
    let mut config = scratch.load_text(&default_toml_with_examples(), &[]).unwrap().config;
    config.agents.defaults.human_delay = HumanDelay::Custom { min_ms: 1, max_ms: 2 };
    let tree = serde_json::to_value(&config).unwrap();

    let mut numeric = Vec::new();
    numeric_leaves(&tree, "", &mut numeric);
    let unranged: Vec<_> = numeric.iter().filter(|key| ranges::range_of(key).is_none()).collect();
    assert!(unranged.is_empty(), "numeric keys without a range in ranges::RANGES: {unranged:?}");
    let stale: Vec<_> =
        ranges::RANGES.iter().filter(|range| ranges::matching(&tree, range.pattern).is_empty()).collect();
    assert!(stale.is_empty(), "ranges naming no key: {stale:?}");
    for range in ranges::RANGES {
        for (key, value) in ranges::matching(&tree, range.pattern) {
            let value = value.as_u64().unwrap();
            assert!((range.min..=range.max).contains(&value), "the default {key} = {value} is out of its own range");
        }
    }
}
