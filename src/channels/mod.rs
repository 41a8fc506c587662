//! The chat channels this process is connected to, by name and account, and the health of
//! every channel it is meant to run.
//!
//! The gateway registers each started adapter here; the `message` tool and the reply
//! pipeline look channels up by the name and account an inbound message carried. A channel
//! that is still connecting, or retrying after a failed start ([`supervisor`]), is listed
//! with its state too, so `/healthz` tells an operator about every enabled channel.

pub mod supervisor;

use std::sync::{Arc, RwLock};

use ferry_channel::Channel;

/// A shared, cheap-to-clone directory of connected channels.
#[derive(Clone, Default)]
pub struct ChannelRegistry {
    channels: Arc<RwLock<Vec<Arc<dyn Channel>>>>,
    /// Every channel this process runs or tries to run, in the order it was first seen.
    health: Arc<RwLock<Vec<ChannelState>>>,
}

/// A channel as `/healthz` reports it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ChannelState {
    pub name: String,
    pub account_id: String,
    pub health: ChannelHealth,
}

/// Where a channel is in its life.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ChannelHealth {
    /// Its first connection attempt is under way.
    Starting,
    /// Connecting failed for a reason that may pass (the platform was unreachable); another
    /// attempt follows after a backoff.
    Retrying { last_error: String, attempts: u32, next_attempt_in_ms: u64 },
    /// Connected and delivering inbound messages.
    Running,
    /// Not running, and not retrying: the platform refused the credentials, the config
    /// cannot work, or the platform client gave up. `reason` says which.
    Stopped { reason: String },
}

impl ChannelHealth {
    /// The state's name as `/healthz` shows it.
    pub fn label(&self) -> &'static str {
        match self {
            ChannelHealth::Starting => "starting",
            ChannelHealth::Retrying { .. } => "retrying",
            ChannelHealth::Running => "running",
            ChannelHealth::Stopped { .. } => "stopped",
        }
    }
}

impl ChannelRegistry {
    pub fn new() -> Self {
        Self::default()
    }

    /// Adds a connected channel, replacing one with the same name and account; it is
    /// running from now on.
    pub fn register(&self, channel: Arc<dyn Channel>) {
        let mut channels = self.channels.write().unwrap_or_else(|poisoned| poisoned.into_inner());
        channels
            .retain(|existing| !(existing.name() == channel.name() && existing.account_id() == channel.account_id()));
        self.set_health(channel.name(), channel.account_id(), ChannelHealth::Running);
        channels.push(channel);
    }

    /// Records that the channel `name` on `account_id` stopped delivering messages (its
    /// platform client gave up: a revoked token, a fatal close). It can still send.
    pub fn mark_stopped(&self, name: &str, account_id: &str) {
        let reason = "the platform connection ended and the adapter gave up";
        self.set_health(name, account_id, ChannelHealth::Stopped { reason: reason.to_owned() });
    }

    /// Records where the channel `name` on `account_id` is in its life.
    pub fn set_health(&self, name: &str, account_id: &str, health: ChannelHealth) {
        let mut states = self.health.write().unwrap_or_else(|poisoned| poisoned.into_inner());
        match states.iter_mut().find(|state| state.name == name && state.account_id == account_id) {
            Some(state) => state.health = health,
            None => states.push(ChannelState { name: name.to_owned(), account_id: account_id.to_owned(), health }),
        }
    }

    /// Whether the channel `name` (on `account_id`, or any account) is one this process is
    /// still trying to start: known, but not running yet. Messages for it wait rather than
    /// being answered nowhere.
    pub fn is_starting(&self, name: &str, account_id: Option<&str>) -> bool {
        let states = self.health.read().unwrap_or_else(|poisoned| poisoned.into_inner());
        states.iter().any(|state| {
            state.name == name
                && account_id.is_none_or(|account| state.account_id == account)
                && matches!(state.health, ChannelHealth::Starting | ChannelHealth::Retrying { .. })
        })
    }

    /// Every channel this process runs or tries to run, with its state.
    pub fn states(&self) -> Vec<ChannelState> {
        self.health.read().unwrap_or_else(|poisoned| poisoned.into_inner()).clone()
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
        registry.set_health("discord", "main", ChannelHealth::Starting);
        registry.register(Arc::new(MemoryChannel::new("slack", "main")));
        registry.register(Arc::new(MemoryChannel::new("discord", "main")));
        registry.mark_stopped("discord", "main");
        let labels: Vec<_> = registry.states().into_iter().map(|state| (state.name, state.health.label())).collect();
        assert_eq!(labels, [("discord".to_owned(), "stopped"), ("slack".to_owned(), "running")], "first-seen order");
        registry.register(Arc::new(MemoryChannel::new("discord", "main")));
        assert!(registry.states().iter().all(|state| state.health == ChannelHealth::Running));
    }

    #[test]
    fn a_channel_is_starting_until_it_runs_or_stops() {
        let registry = ChannelRegistry::new();
        assert!(!registry.is_starting("telegram", None), "unknown");
        registry.set_health("telegram", "default", ChannelHealth::Starting);
        assert!(registry.is_starting("telegram", None) && registry.is_starting("telegram", Some("default")));
        assert!(!registry.is_starting("telegram", Some("other")));
        let retrying = ChannelHealth::Retrying { last_error: "down".into(), attempts: 1, next_attempt_in_ms: 1000 };
        registry.set_health("telegram", "default", retrying);
        assert!(registry.is_starting("telegram", None));
        registry.register(Arc::new(MemoryChannel::new("telegram", "default")));
        assert!(!registry.is_starting("telegram", None), "running");
        registry.set_health("slack", "default", ChannelHealth::Stopped { reason: "refused".into() });
        assert!(!registry.is_starting("slack", None), "stopped for good");
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
