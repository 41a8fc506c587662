//! Which agent answers a message: the `[[bindings]]` table, indexed for a lookup that costs
//! a few hash probes however many bindings there are.
//!
//! A binding matches a message when every key of its `match` does (ids compared without
//! regard to case, as in session keys). The most specific matching binding wins, by the
//! most specific key it has — `peer` > `thread`/`topic` > `guild`/`team` > `account` >
//! `channel` — then by how many keys it has. Two bindings equal on both that could match
//! the same message are ambiguous: [`BindingTable::build`] refuses them, naming both.
//!
//! Each binding is filed under the value of its most specific key, so a message looks in at
//! most five buckets (its peer's, thread's, space's, account's and channel's), most specific
//! first, and the first binding there that matches is the answer.

use std::borrow::Cow;
use std::collections::HashMap;
use std::sync::Arc;

use ferry_channel::{ChatKind, InboundMessage};

use crate::config::{BindingConfig, BindingMatch};

/// How specific a binding's most specific key is; higher wins.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
enum Tier {
    Channel = 0,
    Account = 1,
    Space = 2,
    Thread = 3,
    Peer = 4,
}

const TIERS_MOST_SPECIFIC_FIRST: [Tier; 5] = [Tier::Peer, Tier::Thread, Tier::Space, Tier::Account, Tier::Channel];

/// A binding's keys, lowercased.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
struct Keys {
    channel: Option<Box<str>>,
    account: Option<Box<str>>,
    peer: Option<Box<str>>,
    space: Option<Box<str>>,
    thread: Option<Box<str>>,
}

impl Keys {
    fn of(matches: &BindingMatch) -> Self {
        let lower = |value: Option<&str>| value.map(|value| value.to_lowercase().into_boxed_str());
        Self {
            channel: lower(matches.channel.as_deref()),
            account: lower(matches.account.as_deref()),
            peer: lower(matches.peer.as_deref()),
            space: lower(matches.space()),
            thread: lower(matches.thread()),
        }
    }

    fn slots(&self) -> [(Tier, Option<&str>); 5] {
        [
            (Tier::Peer, self.peer.as_deref()),
            (Tier::Thread, self.thread.as_deref()),
            (Tier::Space, self.space.as_deref()),
            (Tier::Account, self.account.as_deref()),
            (Tier::Channel, self.channel.as_deref()),
        ]
    }

    /// The most specific key set, and its value: where the binding is filed.
    fn primary(&self) -> Option<(Tier, &str)> {
        self.slots().into_iter().find_map(|(tier, value)| value.map(|value| (tier, value)))
    }

    fn count(&self) -> usize {
        self.slots().iter().filter(|(_, value)| value.is_some()).count()
    }

    /// Whether one message could match both: no key both set to different values.
    fn overlaps(&self, other: &Keys) -> bool {
        self.slots().iter().zip(other.slots()).all(|((_, mine), (_, theirs))| match (mine, theirs) {
            (Some(mine), Some(theirs)) => *mine == theirs,
            _ => true,
        })
    }

    fn matches(&self, message: &Subject<'_>) -> bool {
        let key_matches = |key: &Option<Box<str>>, value: Option<&str>| match key {
            None => true,
            Some(key) => value == Some(&**key),
        };
        key_matches(&self.peer, Some(&message.peer))
            && key_matches(&self.thread, message.thread.as_deref())
            && key_matches(&self.space, message.space.as_deref())
            && key_matches(&self.account, Some(&message.account))
            && key_matches(&self.channel, Some(&message.channel))
    }
}

/// A message's values for each key, lowercased.
struct Subject<'a> {
    channel: Cow<'a, str>,
    account: Cow<'a, str>,
    peer: Cow<'a, str>,
    space: Option<Cow<'a, str>>,
    thread: Option<Cow<'a, str>>,
}

impl<'a> Subject<'a> {
    fn of(message: &'a InboundMessage) -> Self {
        let peer = match message.chat.kind {
            ChatKind::Direct => &message.sender.id,
            ChatKind::Group | ChatKind::Channel => &message.chat.id,
        };
        Self {
            channel: lowercase(&message.channel),
            account: lowercase(&message.account_id),
            peer: lowercase(peer),
            space: message.space_id.as_deref().map(lowercase),
            thread: message.thread_id.as_deref().map(lowercase),
        }
    }

    fn value(&self, tier: Tier) -> Option<&str> {
        match tier {
            Tier::Peer => Some(&self.peer),
            Tier::Thread => self.thread.as_deref(),
            Tier::Space => self.space.as_deref(),
            Tier::Account => Some(&self.account),
            Tier::Channel => Some(&self.channel),
        }
    }
}

/// Lowercases without allocating when there is nothing to lower.
fn lowercase(text: &str) -> Cow<'_, str> {
    if text.bytes().any(|byte| byte.is_ascii_uppercase()) || !text.is_ascii() {
        Cow::Owned(text.to_lowercase())
    } else {
        Cow::Borrowed(text)
    }
}

#[derive(Debug)]
struct Binding {
    agent: Arc<str>,
    keys: Keys,
    /// How many keys it has: the tie-break within a tier.
    count: usize,
}

/// Per tier (by `Tier as usize`), entries by the value of their most specific key.
type Filed<T> = [HashMap<Box<str>, Vec<T>>; 5];

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

/// The `[[bindings]]` of a config, ready to answer which agent a message goes to.
#[derive(Debug)]
pub struct BindingTable {
    default_agent: Arc<str>,
    /// Per tier, bindings filed by the value of their most specific key, most keys first.
    buckets: Filed<Binding>,
}

impl BindingTable {
    /// Indexes `bindings`; messages no binding matches go to `default_agent`. A binding
    /// with an empty `match` is skipped (validation refuses it).
    pub fn build(default_agent: &str, bindings: &[BindingConfig]) -> Result<Self, BindingConflict> {
        let mut filed: Filed<(usize, Binding)> = Default::default();
        let mut agents: HashMap<&str, Arc<str>> = HashMap::new();
        for (index, binding) in bindings.iter().enumerate() {
            let keys = Keys::of(&binding.matches);
            let Some((tier, value)) = keys.primary() else { continue };
            let bucket = filed[tier as usize].entry(value.into()).or_default();
            let count = keys.count();
            if let Some((first, _)) =
                bucket.iter().find(|(_, other)| other.count == count && other.keys.overlaps(&keys))
            {
                return Err(BindingConflict { first: *first, second: index, shared: binding.matches.describe() });
            }
            let agent = agents.entry(binding.agent.as_str()).or_insert_with(|| Arc::from(binding.agent.as_str()));
            bucket.push((index, Binding { agent: agent.clone(), keys, count }));
        }
        let buckets = filed.map(|tier| {
            tier.into_iter()
                .map(|(value, mut bucket)| {
                    bucket.sort_by_key(|(_, binding)| std::cmp::Reverse(binding.count));
                    (value, bucket.into_iter().map(|(_, binding)| binding).collect())
                })
                .collect()
        });
        Ok(Self { default_agent: Arc::from(default_agent), buckets })
    }

    /// A table without bindings: every message goes to `default_agent`.
    pub fn only(default_agent: &str) -> Self {
        Self { default_agent: Arc::from(default_agent), buckets: Default::default() }
    }

    /// The agent that answers `message`.
    pub fn agent_for(&self, message: &InboundMessage) -> &str {
        if self.buckets.iter().all(HashMap::is_empty) {
            return &self.default_agent;
        }
        let subject = Subject::of(message);
        for tier in TIERS_MOST_SPECIFIC_FIRST {
            let filed = &self.buckets[tier as usize];
            if filed.is_empty() {
                continue;
            }
            let Some(value) = subject.value(tier) else { continue };
            let Some(bucket) = filed.get(value) else { continue };
            if let Some(binding) = bucket.iter().find(|binding| binding.keys.matches(&subject)) {
                return &binding.agent;
            }
        }
        &self.default_agent
    }

    /// The agent of messages no binding matches.
    pub fn default_agent(&self) -> &str {
        &self.default_agent
    }
}

#[cfg(test)]
mod tests {
    use ferry_channel::{ChatRef, Sender};

    use super::*;

    fn binding(agent: &str, keys: &[(&str, &str)]) -> BindingConfig {
        let mut matches = BindingMatch::default();
        for (key, value) in keys {
            let slot = match *key {
                "channel" => &mut matches.channel,
                "account" => &mut matches.account,
                "peer" => &mut matches.peer,
                "guild" => &mut matches.guild,
                "team" => &mut matches.team,
                "thread" => &mut matches.thread,
                "topic" => &mut matches.topic,
                other => panic!("no key {other}"),
            };
            *slot = Some((*value).to_owned());
        }
        BindingConfig { agent: agent.to_owned(), matches }
    }

    fn dm(channel: &str, account: &str, sender: &str) -> InboundMessage {
        InboundMessage::new(channel, account, ChatRef::new(ChatKind::Direct, sender), Sender::user(sender), "1", "hi")
    }

    fn group(channel: &str, chat: &str, space: Option<&str>, thread: Option<&str>) -> InboundMessage {
        let mut message =
            InboundMessage::new(channel, "default", ChatRef::new(ChatKind::Group, chat), Sender::user("u1"), "1", "hi");
        message.space_id = space.map(str::to_owned);
        message.thread_id = thread.map(str::to_owned);
        message
    }

    #[test]
    fn the_most_specific_binding_wins_whatever_the_order() {
        let bindings = [
            binding("by-channel", &[("channel", "discord")]),
            binding("by-guild", &[("guild", "G1")]),
            binding("by-thread", &[("thread", "T1")]),
            binding("by-peer", &[("peer", "C9")]),
            binding("by-account", &[("channel", "telegram"), ("account", "work")]),
        ];
        let table = BindingTable::build("main", &bindings).unwrap();
        assert_eq!(table.agent_for(&group("discord", "C1", None, None)), "by-channel");
        assert_eq!(table.agent_for(&group("discord", "C1", Some("g1"), None)), "by-guild");
        assert_eq!(table.agent_for(&group("discord", "C1", Some("G1"), Some("T1"))), "by-thread");
        assert_eq!(table.agent_for(&group("discord", "c9", Some("G1"), Some("T1"))), "by-peer");
        assert_eq!(table.agent_for(&dm("telegram", "work", "42")), "by-account");
        assert_eq!(table.agent_for(&dm("telegram", "default", "42")), "main");
        assert_eq!(table.agent_for(&dm("slack", "default", "U1")), "main");
    }

    #[test]
    fn a_dm_is_matched_by_its_sender_and_a_group_by_its_chat() {
        let table = BindingTable::build("main", &[binding("owner", &[("peer", "42")])]).unwrap();
        assert_eq!(table.agent_for(&dm("telegram", "default", "42")), "owner");
        let mut from_42_in_a_group = group("telegram", "-100", None, None);
        from_42_in_a_group.sender = Sender::user("42");
        assert_eq!(table.agent_for(&from_42_in_a_group), "main");
    }

    #[test]
    fn every_key_of_a_binding_must_match_and_more_keys_win_within_a_tier() {
        let bindings = [
            binding("telegram-owner", &[("peer", "42"), ("channel", "telegram")]),
            binding("owner", &[("peer", "42")]),
        ];
        let table = BindingTable::build("main", &bindings).unwrap();
        assert_eq!(table.agent_for(&dm("telegram", "default", "42")), "telegram-owner");
        assert_eq!(table.agent_for(&dm("discord", "default", "42")), "owner");
        let topic = [binding("forum", &[("channel", "telegram"), ("topic", "7")])];
        let table = BindingTable::build("main", &topic).unwrap();
        assert_eq!(table.agent_for(&group("telegram", "-100", None, Some("7"))), "forum");
        assert_eq!(table.agent_for(&group("discord", "-100", None, Some("7"))), "main");
    }

    #[test]
    fn bindings_that_could_match_one_message_equally_are_refused_with_both_named() {
        let same = [binding("a", &[("channel", "slack")]), binding("b", &[("channel", "slack")])];
        let error = BindingTable::build("main", &same).unwrap_err();
        assert_eq!((error.first, error.second), (0, 1));
        assert_eq!(
            error.to_string(),
            "bindings[0] and bindings[1] both match channel = \"slack\" with the same specificity; make one more specific or remove one"
        );
        let overlapping = [
            binding("a", &[("peer", "42"), ("channel", "telegram")]),
            binding("b", &[("peer", "42"), ("account", "work")]),
        ];
        assert!(BindingTable::build("main", &overlapping).is_err());
        let case_only = [binding("a", &[("peer", "C1")]), binding("b", &[("peer", "c1")])];
        assert!(BindingTable::build("main", &case_only).is_err());
        let disjoint = [
            binding("a", &[("peer", "42"), ("channel", "telegram")]),
            binding("b", &[("peer", "42"), ("channel", "discord")]),
        ];
        assert!(BindingTable::build("main", &disjoint).is_ok());
    }

    #[test]
    fn guild_and_team_are_one_key_and_thread_and_topic_another() {
        let table = BindingTable::build("main", &[binding("slack-team", &[("team", "T1")])]).unwrap();
        assert_eq!(table.agent_for(&group("slack", "C1", Some("T1"), None)), "slack-team");
        let both = [binding("a", &[("guild", "X")]), binding("b", &[("team", "X")])];
        assert!(BindingTable::build("main", &both).is_err());
    }
}
