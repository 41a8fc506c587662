//! The chat channels this process is connected to, by name and account.
//!
//! The gateway registers each started adapter here; the `message` tool and the reply
//! pipeline look channels up by the name and account an inbound message carried.

use std::collections::HashSet;
use std::sync::{Arc, RwLock};

use ferry_channel::Channel;

/// A shared, cheap-to-clone directory of connected channels.
#[derive(Clone, Default)]
pub struct ChannelRegistry {
    channels: Arc<RwLock<Vec<Arc<dyn Channel>>>>,
    /// `(name, account)` of registered channels that stopped delivering messages (their
    /// platform client gave up: a revoked token, a fatal close). They can still send.
    stopped: Arc<RwLock<HashSet<(String, String)>>>,
}

/// A registered channel as `/healthz` reports it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ChannelState {
    pub name: String,
    pub account_id: String,
    /// Still delivering inbound messages.
    pub receiving: bool,
}

impl ChannelRegistry {
    pub fn new() -> Self {
        Self::default()
    }

    /// Adds a channel, replacing one with the same name and account.
    pub fn register(&self, channel: Arc<dyn Channel>) {
        let mut channels = self.channels.write().unwrap_or_else(|poisoned| poisoned.into_inner());
        channels
            .retain(|existing| !(existing.name() == channel.name() && existing.account_id() == channel.account_id()));
        self.stopped
            .write()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
            .remove(&(channel.name().to_owned(), channel.account_id().to_owned()));
        channels.push(channel);
    }

    /// Records that the channel `name` on `account_id` stopped delivering messages.
    pub fn mark_stopped(&self, name: &str, account_id: &str) {
        self.stopped
            .write()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
            .insert((name.to_owned(), account_id.to_owned()));
    }

    /// Every registered channel and whether it still receives.
    pub fn states(&self) -> Vec<ChannelState> {
        let channels = self.channels.read().unwrap_or_else(|poisoned| poisoned.into_inner());
        let stopped = self.stopped.read().unwrap_or_else(|poisoned| poisoned.into_inner());
        channels
            .iter()
            .map(|channel| {
                let key = (channel.name().to_owned(), channel.account_id().to_owned());
                ChannelState { receiving: !stopped.contains(&key), name: key.0, account_id: key.1 }
            })
            .collect()
    }

    /// The channel `name` on `account_id`, or its only account when none is given.
    pub fn get(&self, name: &str, account_id: Option<&str>) -> Option<Arc<dyn Channel>> {
        let channels = self.channels.read().unwrap_or_else(|poisoned| poisoned.into_inner());
        let mut matching = channels.iter().filter(|channel| channel.name() == name);
        match account_id {
            Some(account) => matching.find(|channel| channel.account_id() == account).cloned(),
            None => {
                let first = matching.next().cloned();
                // Ambiguous without an account: refuse rather than guess.
                if matching.next().is_some() { None } else { first }
            }
        }
    }

    /// `name` or `name:account` of every registered channel, for error messages.
    pub fn describe(&self) -> Vec<String> {
        let channels = self.channels.read().unwrap_or_else(|poisoned| poisoned.into_inner());
        channels.iter().map(|channel| format!("{}:{}", channel.name(), channel.account_id())).collect()
    }
}

#[cfg(test)]
mod tests {
    use ferry_channel::memory::MemoryChannel;

    use super::*;

    #[test]
    fn a_stopped_channel_shows_until_it_registers_again() {
        let registry = ChannelRegistry::new();
        registry.register(Arc::new(MemoryChannel::new("discord", "main")));
        registry.register(Arc::new(MemoryChannel::new("slack", "main")));
        registry.mark_stopped("discord", "main");
        let receiving: Vec<_> = registry.states().into_iter().map(|state| (state.name, state.receiving)).collect();
        assert_eq!(receiving, [("discord".to_owned(), false), ("slack".to_owned(), true)]);
        registry.register(Arc::new(MemoryChannel::new("discord", "main")));
        assert!(registry.states().iter().all(|state| state.receiving));
    }

    #[test]
    fn channels_are_found_by_name_and_account() {
        let registry = ChannelRegistry::new();
        registry.register(Arc::new(MemoryChannel::new("telegram", "main")));
        assert!(registry.get("telegram", None).is_some());
        assert!(registry.get("telegram", Some("main")).is_some());
        assert!(registry.get("telegram", Some("other")).is_none());
        assert!(registry.get("slack", None).is_none());

        registry.register(Arc::new(MemoryChannel::new("telegram", "second")));
        assert!(registry.get("telegram", None).is_none(), "two accounts: the account must be named");
        assert_eq!(registry.describe(), ["telegram:main", "telegram:second"]);
    }
}
