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

use crate::config::BindingConfig;
pub use crate::config::binding_keys::BindingConflict;
use crate::config::binding_keys::{BindingKeys, BindingTier, TIERS_MOST_SPECIFIC_FIRST, check_bindings};

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

    fn value(&self, tier: BindingTier) -> Option<&str> {
        match tier {
            BindingTier::Peer => Some(&self.peer),
            BindingTier::Thread => self.thread.as_deref(),
            BindingTier::Space => self.space.as_deref(),
            BindingTier::Account => Some(&self.account),
            BindingTier::Channel => Some(&self.channel),
        }
    }

    /// Whether every key the binding sets has this message's value.
    fn matches(&self, keys: &BindingKeys) -> bool {
        keys.matches(&self.peer, self.thread.as_deref(), self.space.as_deref(), &self.account, &self.channel)
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
    keys: BindingKeys,
    /// How many keys it has: the tie-break within a tier.
    count: usize,
}

/// Per tier (by `BindingTier as usize`), entries by the value of their most specific key.
type Filed<T> = [HashMap<Box<str>, Vec<T>>; 5];

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
        let keys = check_bindings(bindings)?;
        let mut filed: Filed<Binding> = Default::default();
        let mut agents: HashMap<&str, Arc<str>> = HashMap::new();
        for (binding, keys) in bindings.iter().zip(keys) {
            let Some((tier, value)) = keys.primary() else { continue };
            let bucket = filed[tier as usize].entry(value.into()).or_default();
            let count = keys.count();
            let agent = agents.entry(binding.agent.as_str()).or_insert_with(|| Arc::from(binding.agent.as_str()));
            bucket.push(Binding { agent: agent.clone(), keys, count });
        }
        for tier in &mut filed {
            for bucket in tier.values_mut() {
                bucket.sort_by_key(|binding| std::cmp::Reverse(binding.count));
            }
        }
        let buckets = filed;
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
            if let Some(binding) = bucket.iter().find(|binding| subject.matches(&binding.keys)) {
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

    use crate::config::BindingMatch;

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
