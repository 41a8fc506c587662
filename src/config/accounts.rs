//! Several bots of one platform (`[channels.<platform>.accounts.<id>]`): each account is a
//! full copy of its channel's settings (see `config::inherit`), so everything that reads a
//! channel's settings reads one account's.

use super::inherit::DEFAULT_ACCOUNT;
use super::schema::{ChannelsConfig, DiscordConfig, SlackConfig, TelegramConfig};

/// A platform table that may list accounts.
pub trait Accounts: Sized {
    /// The listed accounts (empty in the single-account form).
    fn listed(&self) -> &indexmap::IndexMap<String, Self>;

    /// Every account with its settings: the listed ones, or the table itself as `default`.
    fn each_account(&self) -> Vec<(&str, &Self)> {
        let listed = self.listed();
        if listed.is_empty() {
            return vec![(DEFAULT_ACCOUNT, self)];
        }
        listed.iter().map(|(id, account)| (id.as_str(), account)).collect()
    }

    /// One account's settings.
    fn account(&self, id: &str) -> Option<&Self> {
        let listed = self.listed();
        if listed.is_empty() { (id == DEFAULT_ACCOUNT).then_some(self) } else { listed.get(id) }
    }
}

impl Accounts for TelegramConfig {
    fn listed(&self) -> &indexmap::IndexMap<String, Self> {
        &self.accounts
    }
}

impl Accounts for DiscordConfig {
    fn listed(&self) -> &indexmap::IndexMap<String, Self> {
        &self.accounts
    }
}

impl Accounts for SlackConfig {
    fn listed(&self) -> &indexmap::IndexMap<String, Self> {
        &self.accounts
    }
}

impl ChannelsConfig {
    /// The account ids of a channel by name; the web chat has the one account `default`,
    /// and an unknown channel none.
    pub fn account_ids(&self, channel: &str) -> Vec<&str> {
        fn ids<A: Accounts>(table: &A) -> Vec<&str> {
            table.each_account().into_iter().map(|(id, _)| id).collect()
        }
        match channel {
            "telegram" => ids(&self.telegram),
            "discord" => ids(&self.discord),
            "slack" => ids(&self.slack),
            "webchat" => vec![DEFAULT_ACCOUNT],
            _ => Vec::new(),
        }
    }
}
