//! Tables that start as a copy of another: each `[agents.list.<id>]` inherits
//! `[agents.defaults]`, and each `[channels.<platform>.accounts.<id>]` its channel's table.
//!
//! The inheritance is done on the layered tree, before it is typed: the entry's own keys are
//! merged over a copy of its parent (tables key by key, everything else replaced), so an
//! agent that sets only `model` keeps every other default, and a key error in an entry is
//! reported at the entry's own path (`agents.list.coder.timeout_seconds`). Numeric ranges,
//! enum values and the like are looked up at the parent's path ([`canonical`]).

use config::{Map, Value, ValueKind};
use serde_path_to_error::Segment;

/// Platforms whose tables may list accounts.
pub const ACCOUNT_CHANNELS: [&str; 3] = ["telegram", "discord", "slack"];

/// Keys an agent never inherits from `agents.defaults`: two agents must not share a
/// workspace (see `AgentSettings::workspace`).
const NOT_INHERITED_BY_AGENTS: [&str; 1] = ["workspace"];

/// Keys only account `default` inherits from its channel's table: two bots cannot share a
/// token, so another account names its own (a channel-level token, or one from
/// `TELEGRAM_BOT_TOKEN` and the like, is the `default` account's).
pub const ACCOUNT_CREDENTIALS: [&str; 3] = ["bot_token", "app_token", "signing_secret"];

/// The account of a channel configured without `accounts`.
pub const DEFAULT_ACCOUNT: &str = ferry_channel::DEFAULT_ACCOUNT_ID;

/// Fills every agent and account entry of `root` with what it inherits.
pub(super) fn apply(root: &mut Value) {
    let ValueKind::Table(top) = &mut root.kind else { return };
    if let Some(Value { kind: ValueKind::Table(agents), .. }) = top.get_mut("agents") {
        let defaults = match agents.get("defaults") {
            Some(Value { kind: ValueKind::Table(defaults), .. }) => defaults.clone(),
            _ => Map::new(),
        };
        let base = without(&defaults, &NOT_INHERITED_BY_AGENTS);
        if let Some(Value { kind: ValueKind::Table(list), .. }) = agents.get_mut("list") {
            inherit_all(list, |_| base.clone());
        }
    }
    if let Some(Value { kind: ValueKind::Table(channels), .. }) = top.get_mut("channels") {
        for name in ACCOUNT_CHANNELS {
            let Some(Value { kind: ValueKind::Table(channel), .. }) = channels.get_mut(name) else { continue };
            let base = without(channel, &["accounts"]);
            let without_credentials = without(&base, &ACCOUNT_CREDENTIALS);
            if let Some(Value { kind: ValueKind::Table(accounts), .. }) = channel.get_mut("accounts") {
                inherit_all(
                    accounts,
                    |id| {
                        if id == DEFAULT_ACCOUNT { base.clone() } else { without_credentials.clone() }
                    },
                );
            }
        }
    }
}

/// Replaces each table entry of `entries` by its parent (`base_for(id)`) with the entry
/// merged over it. An entry that is not a table is left for typing to refuse.
fn inherit_all(entries: &mut Map<String, Value>, base_for: impl Fn(&str) -> Map<String, Value>) {
    for (id, entry) in entries.iter_mut() {
        if let ValueKind::Table(own) = &mut entry.kind {
            let mut merged = base_for(id);
            merge_into(&mut merged, std::mem::take(own));
            *own = merged;
        }
    }
}

fn without(table: &Map<String, Value>, keys: &[&str]) -> Map<String, Value> {
    table
        .iter()
        .filter(|(key, _)| !keys.contains(&key.as_str()))
        .map(|(key, value)| (key.clone(), value.clone()))
        .collect()
}

/// `own` over `base`: tables merge key by key, any other value replaces the parent's.
fn merge_into(base: &mut Map<String, Value>, own: Map<String, Value>) {
    for (key, value) in own {
        match (base.get_mut(&key), value) {
            (Some(Value { kind: ValueKind::Table(parent), .. }), Value { kind: ValueKind::Table(child), .. }) => {
                merge_into(parent, child);
            }
            (_, value) => {
                base.insert(key, value);
            }
        }
    }
}

/// The path a key of an inherited entry has in its parent: `agents.list.<id>.x` is
/// `agents.defaults.x`, `channels.<p>.accounts.<id>.x` is `channels.<p>.x`. What is known
/// about a key by its path (its range, its enum values) is known there.
pub(crate) fn canonical(path: &[Segment]) -> Vec<Segment> {
    fn key(segment: &Segment) -> Option<&str> {
        match segment {
            Segment::Map { key } => Some(key.as_str()),
            _ => None,
        }
    }
    let keys: Vec<Option<&str>> = path.iter().map(key).collect();
    match keys.as_slice() {
        [Some("agents"), Some("list"), Some(_), ..] => {
            let mut canonical = vec![Segment::Map { key: "agents".into() }, Segment::Map { key: "defaults".into() }];
            canonical.extend(path[3..].iter().cloned());
            canonical
        }
        [Some("channels"), Some(_), Some("accounts"), Some(_), ..] => {
            let mut canonical = path[..2].to_vec();
            canonical.extend(path[4..].iter().cloned());
            canonical
        }
        _ => path.to_vec(),
    }
}
