//! What makes two `[[bindings]]` entries ambiguous, decided where the config is checked:
//! each binding's keys (lowercased, as ids are compared), how specific its most specific
//! key is, and whether one message could match two bindings of equal specificity. Routing
//! (`routing::bindings`) files bindings by the same keys to answer which agent a message
//! goes to.

use std::collections::HashMap;

use super::{BindingConfig, BindingMatch};

/// How specific a binding's most specific key is; higher wins.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum BindingTier {
    Channel = 0,
    Account = 1,
    Space = 2,
    Thread = 3,
    Peer = 4,
}

pub const TIERS_MOST_SPECIFIC_FIRST: [BindingTier; 5] =
    [BindingTier::Peer, BindingTier::Thread, BindingTier::Space, BindingTier::Account, BindingTier::Channel];

/// A binding's keys, lowercased.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct BindingKeys {
    channel: Option<Box<str>>,
    account: Option<Box<str>>,
    peer: Option<Box<str>>,
    space: Option<Box<str>>,
    thread: Option<Box<str>>,
}

impl BindingKeys {
    pub fn of(matches: &BindingMatch) -> Self {
        let lower = |value: Option<&str>| value.map(|value| value.to_lowercase().into_boxed_str());
        Self {
            channel: lower(matches.channel.as_deref()),
            account: lower(matches.account.as_deref()),
            peer: lower(matches.peer.as_deref()),
            space: lower(matches.space()),
            thread: lower(matches.thread()),
        }
    }

    fn slots(&self) -> [(BindingTier, Option<&str>); 5] {
        [
            (BindingTier::Peer, self.peer.as_deref()),
            (BindingTier::Thread, self.thread.as_deref()),
            (BindingTier::Space, self.space.as_deref()),
            (BindingTier::Account, self.account.as_deref()),
            (BindingTier::Channel, self.channel.as_deref()),
        ]
    }

    /// The most specific key set, and its value: where the binding is filed.
    pub fn primary(&self) -> Option<(BindingTier, &str)> {
        self.slots().into_iter().find_map(|(tier, value)| value.map(|value| (tier, value)))
    }

    pub fn count(&self) -> usize {
        self.slots().iter().filter(|(_, value)| value.is_some()).count()
    }

    /// Whether one message could match both: no key both set to different values.
    pub fn overlaps(&self, other: &BindingKeys) -> bool {
        self.slots().iter().zip(other.slots()).all(|((_, mine), (_, theirs))| match (mine, theirs) {
            (Some(mine), Some(theirs)) => *mine == theirs,
            _ => true,
        })
    }

    /// Whether a message with these values (lowercased) has every key this binding sets.
    /// Field by field, most specific first: it runs for each binding a message is compared
    /// with (`routing::bindings`).
    pub fn matches(&self, peer: &str, thread: Option<&str>, space: Option<&str>, account: &str, channel: &str) -> bool {
        fn key_matches(key: &Option<Box<str>>, value: Option<&str>) -> bool {
            match key {
                None => true,
                Some(key) => value == Some(&**key),
            }
        }
        key_matches(&self.peer, Some(peer))
            && key_matches(&self.thread, thread)
            && key_matches(&self.space, space)
            && key_matches(&self.account, Some(account))
            && key_matches(&self.channel, Some(channel))
    }
}

/// Two bindings the table cannot choose between (see the module docs). Indexes are
/// positions in `[[bindings]]`.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error(
    "bindings[{first}] and bindings[{second}] both match {shared} with the same specificity; make one more specific or remove one"
)]
pub struct BindingConflict {
    pub first: usize,
    pub second: usize,
    /// The keys of the later one, as written.
    pub shared: String,
}

/// Each binding's keys, in order, unless two of `bindings` are ambiguous: of the same tier
/// and key count, filed under the same value, and one message could match both (the first
/// such pair is the error). A binding with an empty `match` has no primary key and is never
/// ambiguous (validation refuses it on its own). Routing files the keys it returns.
pub fn check_bindings(bindings: &[BindingConfig]) -> Result<Vec<BindingKeys>, BindingConflict> {
    let keys: Vec<BindingKeys> = bindings.iter().map(|binding| BindingKeys::of(&binding.matches)).collect();
    let mut filed: HashMap<(BindingTier, &str), Vec<(usize, &BindingKeys)>> = HashMap::new();
    for (index, (binding, mine)) in bindings.iter().zip(&keys).enumerate() {
        let Some((tier, value)) = mine.primary() else { continue };
        let bucket = filed.entry((tier, value)).or_default();
        let count = mine.count();
        if let Some((first, _)) = bucket.iter().find(|(_, other)| other.count() == count && other.overlaps(mine)) {
            return Err(BindingConflict { first: *first, second: index, shared: binding.matches.describe() });
        }
        bucket.push((index, mine));
    }
    drop(filed);
    Ok(keys)
}
