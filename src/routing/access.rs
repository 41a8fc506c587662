//! Who may talk to the bot, and where (SPEC §3.2).
//!
//! Each channel's config table (`[channels.telegram]`, …) is normalized once into a
//! [`ChannelAccess`]; deciding about a message is then a pure lookup with no I/O. Whether a
//! DM sender was approved through pairing is the [`super::PairingStore`]'s to say: this
//! module answers [`Access::NeedsPairing`] and the router asks the store.
//!
//! - Messages from bots are ignored unless the channel sets `allow_bots = true` (two bots
//!   answering each other would loop forever).
//! - DMs follow `dm_policy`: `pairing` (senders in `allow_from` or approved by pairing),
//!   `allowlist` (only `allow_from`), `open` (anyone) or `disabled`. An `allow_from` entry of
//!   `"*"` matches everyone.
//! - Groups and channels follow `group_policy`: `allowlist` (only chats listed in the
//!   channel's group table), `open` or `disabled`. A listed chat may override the channel's
//!   `require_mention`.
//! - The web chat has no access settings: it is the operator's own page, so it is open.

use std::collections::HashMap;
use std::fmt;

use ferry_channel::{ChatKind, InboundMessage};

use crate::config::{Accounts, Config, DEFAULT_ACCOUNT, DiscordConfig, DmPolicy, GroupConfig, GroupPolicy};

/// The `allow_from` entry that matches every sender.
pub const ANY_SENDER: &str = "*";

/// What access control says about one message.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Access {
    /// The message may run; in a group, only if it addresses the bot when `require_mention`.
    Allowed {
        require_mention: bool,
    },
    /// A DM from a sender not on the allowlist under `dm_policy = "pairing"`: allowed if the
    /// pairing store has approved them, otherwise they get a pairing code.
    NeedsPairing,
    Denied(DenyReason),
    /// Sent by a bot on a channel without `allow_bots`.
    IgnoredBot,
}

/// Why a message may not run. Shown in logs; users are told only where it helps them.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum DenyReason {
    /// The message came from a channel, or an account of it, Ferry has no settings for.
    UnknownChannel,
    /// `dm_policy = "disabled"`.
    DmsDisabled,
    /// `dm_policy = "allowlist"` and the sender is not in `allow_from`.
    SenderNotAllowed,
    /// `group_policy = "disabled"`.
    GroupsDisabled,
    /// `group_policy = "allowlist"` and the chat is not in the channel's group table.
    GroupNotAllowed,
    /// The sender needs pairing, but the channel already has the most pending codes.
    PairingBusy,
}

impl fmt::Display for DenyReason {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            DenyReason::UnknownChannel => "no access settings for this channel",
            DenyReason::DmsDisabled => "direct messages are disabled (dm_policy = \"disabled\")",
            DenyReason::SenderNotAllowed => "the sender is not in allow_from",
            DenyReason::GroupsDisabled => "groups are disabled (group_policy = \"disabled\")",
            DenyReason::GroupNotAllowed => "the group is not in the channel's allowlist",
            DenyReason::PairingBusy => "too many pairing requests are pending on this channel",
        })
    }
}

/// One channel's access settings, normalized from its config table.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ChannelAccess {
    pub dm_policy: DmPolicy,
    pub allow_from: Vec<String>,
    pub group_policy: GroupPolicy,
    /// Allowlisted chat ids, each with its own `require_mention` if it sets one.
    pub groups: HashMap<String, Option<bool>>,
    /// Whether group messages must address the bot, unless the group says otherwise.
    pub require_mention: bool,
    pub allow_bots: bool,
}

impl ChannelAccess {
    /// The web chat: the operator's own page, open to whoever can reach it, never gated.
    pub fn webchat() -> Self {
        Self {
            dm_policy: DmPolicy::Open,
            allow_from: vec![ANY_SENDER.to_owned()],
            group_policy: GroupPolicy::Open,
            groups: HashMap::new(),
            require_mention: false,
            allow_bots: false,
        }
    }

    /// Decides about one message of this channel.
    pub fn decide(&self, message: &InboundMessage) -> Access {
        if message.sender.is_bot && !self.allow_bots {
            return Access::IgnoredBot;
        }
        match message.chat.kind {
            ChatKind::Direct => self.decide_direct(&message.sender.id),
            ChatKind::Group | ChatKind::Channel => self.decide_group(&message.chat.id, message.space_id.as_deref()),
        }
    }

    /// The sender is in `allow_from`, or `allow_from` admits everyone.
    pub fn allows_sender(&self, sender_id: &str) -> bool {
        self.allow_from.iter().any(|entry| entry == ANY_SENDER || entry == sender_id)
    }

    fn decide_direct(&self, sender_id: &str) -> Access {
        let allowed = Access::Allowed { require_mention: false };
        match self.dm_policy {
            DmPolicy::Disabled => Access::Denied(DenyReason::DmsDisabled),
            DmPolicy::Open => allowed,
            DmPolicy::Allowlist if self.allows_sender(sender_id) => allowed,
            DmPolicy::Allowlist => Access::Denied(DenyReason::SenderNotAllowed),
            DmPolicy::Pairing if self.allows_sender(sender_id) => allowed,
            DmPolicy::Pairing => Access::NeedsPairing,
        }
    }

    /// A chat is listed by its own id, or by its workspace's id (a Discord guild listed
    /// without a channel list admits all its channels).
    fn decide_group(&self, chat_id: &str, space_id: Option<&str>) -> Access {
        let listed = self.groups.get(chat_id).or_else(|| space_id.and_then(|space| self.groups.get(space)));
        let require_mention = listed.copied().flatten().unwrap_or(self.require_mention);
        match (self.group_policy, listed) {
            (GroupPolicy::Disabled, _) => Access::Denied(DenyReason::GroupsDisabled),
            (GroupPolicy::Allowlist, None) => Access::Denied(DenyReason::GroupNotAllowed),
            (GroupPolicy::Allowlist | GroupPolicy::Open, _) => Access::Allowed { require_mention },
        }
    }
}

/// Every account's [`ChannelAccess`], by channel name and account id: each bot of a
/// platform has its own allowlists and policies (`[channels.<p>.accounts.<id>]`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AccessRules {
    by_channel: HashMap<String, HashMap<String, ChannelAccess>>,
}

impl AccessRules {
    pub fn from_config(config: &Config) -> Self {
        let channels = &config.channels;
        let telegram = per_account(&channels.telegram, |telegram| ChannelAccess {
            dm_policy: telegram.dm_policy,
            allow_from: telegram.allow_from.clone(),
            group_policy: telegram.group_policy,
            groups: group_table(&telegram.groups),
            require_mention: telegram.require_mention,
            allow_bots: telegram.allow_bots,
        });
        let slack = per_account(&channels.slack, |slack| ChannelAccess {
            dm_policy: slack.dm_policy,
            allow_from: slack.allow_from.clone(),
            group_policy: slack.group_policy,
            groups: group_table(&slack.channels),
            require_mention: slack.require_mention,
            allow_bots: slack.allow_bots,
        });
        let webchat = HashMap::from([(DEFAULT_ACCOUNT.to_owned(), ChannelAccess::webchat())]);
        let by_channel = HashMap::from([
            ("telegram".to_owned(), telegram),
            ("discord".to_owned(), per_account(&channels.discord, discord_access)),
            ("slack".to_owned(), slack),
            ("webchat".to_owned(), webchat),
        ]);
        Self { by_channel }
    }

    /// The rules of one account of a channel.
    pub fn account(&self, channel: &str, account: &str) -> Option<&ChannelAccess> {
        self.by_channel.get(channel)?.get(account)
    }

    /// Decides about one message; a channel or account without settings is denied.
    pub fn decide(&self, message: &InboundMessage) -> Access {
        match self.account(&message.channel, &message.account_id) {
            Some(access) => access.decide(message),
            None => Access::Denied(DenyReason::UnknownChannel),
        }
    }
}

/// `rules` of each account of a platform table, by account id.
pub(crate) fn per_account<A: Accounts, T>(table: &A, rules: impl Fn(&A) -> T) -> HashMap<String, T> {
    table.each_account().into_iter().map(|(id, account)| (id.to_owned(), rules(account))).collect()
}

fn group_table(groups: &std::collections::BTreeMap<String, GroupConfig>) -> HashMap<String, Option<bool>> {
    groups.iter().map(|(id, group)| (id.clone(), group.require_mention)).collect()
}

/// Discord allowlists guilds: the adapter puts the channel id in `chat.id` (a thread's
/// parent channel for a thread) and the guild id in `space_id`. A guild with a `channels`
/// list admits those channels; a guild without one admits every channel of the guild
/// (matched by `space_id`). Either way with the guild's `require_mention`.
fn discord_access(discord: &DiscordConfig) -> ChannelAccess {
    let mut groups = HashMap::new();
    for (guild_id, guild) in &discord.guilds {
        if guild.channels.is_empty() {
            groups.entry(guild_id.clone()).or_insert(guild.require_mention);
        }
        for channel_id in &guild.channels {
            groups.entry(channel_id.clone()).or_insert(guild.require_mention);
        }
    }
    ChannelAccess {
        dm_policy: discord.dm_policy,
        allow_from: discord.allow_from.clone(),
        group_policy: discord.group_policy,
        groups,
        require_mention: discord.require_mention,
        allow_bots: discord.allow_bots,
    }
}

#[cfg(test)]
mod tests {
    use ferry_channel::{ChatRef, Sender};

    use super::*;
    use crate::config::GuildConfig;

    fn message(channel: &str, kind: ChatKind, chat: &str, sender: &str) -> InboundMessage {
        InboundMessage::new(channel, "default", ChatRef::new(kind, chat), Sender::user(sender), "1", "hi")
    }

    fn dm(channel: &str, sender: &str) -> InboundMessage {
        message(channel, ChatKind::Direct, sender, sender)
    }

    fn rules(edit: impl FnOnce(&mut Config)) -> AccessRules {
        let mut config = Config::default();
        edit(&mut config);
        AccessRules::from_config(&config)
    }

    #[test]
    fn unknown_dm_senders_need_pairing_by_default_and_allow_from_skips_it() {
        let rules = rules(|c| c.channels.telegram.allow_from = vec!["42".into()]);
        assert_eq!(rules.decide(&dm("telegram", "7")), Access::NeedsPairing);
        assert_eq!(rules.decide(&dm("telegram", "42")), Access::Allowed { require_mention: false });
    }

    #[test]
    fn allowlisted_dms_admit_only_listed_senders() {
        let rules = rules(|c| {
            c.channels.slack.dm_policy = DmPolicy::Allowlist;
            c.channels.slack.allow_from = vec!["U1".into()];
        });
        assert_eq!(rules.decide(&dm("slack", "U1")), Access::Allowed { require_mention: false });
        assert_eq!(rules.decide(&dm("slack", "U2")), Access::Denied(DenyReason::SenderNotAllowed));
    }

    #[test]
    fn open_dms_admit_anyone_and_disabled_dms_no_one() {
        let rules = rules(|c| {
            c.channels.discord.dm_policy = DmPolicy::Open;
            c.channels.discord.allow_from = vec![ANY_SENDER.into()];
            c.channels.telegram.dm_policy = DmPolicy::Disabled;
            c.channels.telegram.allow_from = vec!["42".into()];
        });
        assert_eq!(rules.decide(&dm("discord", "anyone")), Access::Allowed { require_mention: false });
        assert_eq!(rules.decide(&dm("telegram", "42")), Access::Denied(DenyReason::DmsDisabled));
    }

    #[test]
    fn allowlisted_groups_run_with_their_own_require_mention() {
        let rules = rules(|c| {
            c.channels
                .telegram
                .groups
                .insert("-100".into(), GroupConfig { require_mention: Some(false), ..Default::default() });
            c.channels.telegram.groups.insert("-200".into(), GroupConfig::default());
        });
        let group = |id| message("telegram", ChatKind::Group, id, "7");
        assert_eq!(rules.decide(&group("-100")), Access::Allowed { require_mention: false });
        assert_eq!(rules.decide(&group("-200")), Access::Allowed { require_mention: true });
        assert_eq!(rules.decide(&group("-300")), Access::Denied(DenyReason::GroupNotAllowed));
    }

    #[test]
    fn open_groups_use_the_channel_require_mention_and_disabled_groups_deny_even_listed_ones() {
        let rules = rules(|c| {
            c.channels.slack.group_policy = GroupPolicy::Open;
            c.channels.slack.require_mention = false;
            c.channels.telegram.group_policy = GroupPolicy::Disabled;
            c.channels.telegram.groups.insert("-100".into(), GroupConfig::default());
        });
        assert_eq!(
            rules.decide(&message("slack", ChatKind::Channel, "C1", "U1")),
            Access::Allowed { require_mention: false }
        );
        assert_eq!(
            rules.decide(&message("telegram", ChatKind::Group, "-100", "7")),
            Access::Denied(DenyReason::GroupsDisabled)
        );
    }

    #[test]
    fn discord_channels_are_allowed_by_a_guild_channel_list_or_a_whole_guild() {
        let rules = rules(|c| {
            c.channels.discord.guilds.insert(
                "G1".into(),
                GuildConfig {
                    channels: vec!["C1".into(), "C2".into()],
                    require_mention: Some(false),
                    ..Default::default()
                },
            );
            c.channels
                .discord
                .guilds
                .insert("G2".into(), GuildConfig { channels: vec![], require_mention: None, ..Default::default() });
        });
        let channel = |id, guild: &str| InboundMessage {
            space_id: Some(guild.to_owned()),
            ..message("discord", ChatKind::Channel, id, "u")
        };
        assert_eq!(rules.decide(&channel("C2", "G1")), Access::Allowed { require_mention: false });
        assert_eq!(
            rules.decide(&channel("C9", "G1")),
            Access::Denied(DenyReason::GroupNotAllowed),
            "a guild with a channel list admits only those"
        );
        assert_eq!(rules.decide(&channel("C7", "G2")), Access::Allowed { require_mention: true }, "every channel");
        assert_eq!(rules.decide(&channel("C8", "G3")), Access::Denied(DenyReason::GroupNotAllowed));
    }

    #[test]
    fn bots_are_ignored_unless_the_channel_allows_them() {
        let mut from_bot = dm("telegram", "42");
        from_bot.sender.is_bot = true;
        let strict = rules(|c| c.channels.telegram.allow_from = vec!["42".into()]);
        assert_eq!(strict.decide(&from_bot), Access::IgnoredBot);
        let lenient = rules(|c| {
            c.channels.telegram.allow_from = vec!["42".into()];
            c.channels.telegram.allow_bots = true;
        });
        assert_eq!(lenient.decide(&from_bot), Access::Allowed { require_mention: false });
    }

    #[test]
    fn the_web_chat_is_open_and_unknown_channels_are_denied() {
        let rules = rules(|_| {});
        assert_eq!(rules.decide(&dm("webchat", "browser-1")), Access::Allowed { require_mention: false });
        assert_eq!(rules.decide(&dm("irc", "nick")), Access::Denied(DenyReason::UnknownChannel));
    }
}
