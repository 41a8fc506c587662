//! Which tools a chat may use: `[tools] profile`, then `allow`/`deny` lists set globally, per
//! channel (`[channels.P.tools]`) and per group (`tools` in a group's, guild's or Slack
//! channel's table). A tool a chat may not use is not offered to the model at all, and a
//! call to it anyway (a model guessing a name) gets an error result.
//!
//! The lists name tools or groups of tools (`group:fs`, `group:runtime`, `group:web`). An
//! `allow` adds to the profile; a `deny` at any level wins over every `allow`, so an
//! operator can take `exec` away from one noisy group whatever the profile says.

use std::collections::{BTreeMap, BTreeSet, HashMap};

use serde::{Deserialize, Serialize};

use crate::config::{Config, GroupConfig};

/// The tools of the `chat` profile: the built-ins, none of which touches the host.
const CHAT_TOOLS: &[&str] = &["current_time", "sessions_list", "message", "skill_read"];

/// The named groups of tools.
const GROUPS: &[(&str, &[&str])] = &[
    ("group:fs", &["read", "write", "edit"]),
    ("group:runtime", &["exec", "process"]),
    ("group:web", &["web_fetch", "web_search"]),
];

/// Every tool a list may name: the built-ins and the host tools of SPEC §6.8 (the groups').
fn known_tools() -> impl Iterator<Item = &'static &'static str> {
    CHAT_TOOLS.iter().chain(GROUPS.iter().flat_map(|(_, tools)| tools.iter()))
}

/// `[tools] profile`: the tools offered before `allow`/`deny`.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Deserialize, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum ToolProfile {
    /// The built-ins only (`message`, `sessions_list`, `current_time`, `skill_read`).
    #[default]
    Chat,
    /// Chat, plus files, commands and the web (`group:fs`, `group:runtime`, `group:web`).
    Coding,
    /// Every tool there is.
    Full,
}

/// One level's `allow` and `deny` lists: tool names or groups.
#[derive(Debug, Clone, Default, PartialEq, Eq, Deserialize, Serialize)]
#[serde(default, deny_unknown_fields)]
pub struct ToolLists {
    pub allow: Vec<String>,
    pub deny: Vec<String>,
}

impl ToolLists {
    pub fn is_empty(&self) -> bool {
        self.allow.is_empty() && self.deny.is_empty()
    }

    /// Why an entry of `allow` or `deny` names nothing, keyed by its list (`allow`, `deny`).
    pub fn check(&self) -> Result<(), (&'static str, String)> {
        for (list, entries) in [("allow", &self.allow), ("deny", &self.deny)] {
            if let Some(unknown) = entries.iter().find(|entry| expand(entry).is_none()) {
                let groups: Vec<&str> = GROUPS.iter().map(|(name, _)| *name).collect();
                return Err((
                    list,
                    format!(
                        "`{unknown}` is not a tool or a group of tools; tools: {}; groups: {}",
                        known_tools().copied().collect::<Vec<_>>().join(", "),
                        groups.join(", ")
                    ),
                ));
            }
        }
        Ok(())
    }
}

/// The tools one entry names, or `None` if it names none.
fn expand(entry: &str) -> Option<&'static [&'static str]> {
    if let Some((_, tools)) = GROUPS.iter().find(|(name, _)| *name == entry) {
        return Some(tools);
    }
    known_tools().find(|tool| **tool == entry).map(std::slice::from_ref)
}

/// The tools one run may use.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ToolFilter {
    /// `None`: every tool (the `full` profile, and runs outside any chat) but `denied`.
    offered: Option<BTreeSet<&'static str>>,
    denied: BTreeSet<&'static str>,
}

impl ToolFilter {
    /// Every tool: for runs that no chat's policy applies to (embedding, tests).
    pub fn everything() -> Self {
        Self::default()
    }

    pub fn allows(&self, tool: &str) -> bool {
        !self.denied.contains(tool) && self.offered.as_ref().is_none_or(|offered| offered.contains(tool))
    }

    /// The same, with `tools` taken away.
    pub fn without(mut self, tools: &[&'static str]) -> Self {
        self.denied.extend(tools.iter().copied());
        self
    }

    fn new(profile: ToolProfile, levels: &[&ToolLists]) -> Self {
        let mut offered = match profile {
            ToolProfile::Full => None,
            ToolProfile::Chat => Some(CHAT_TOOLS.iter().copied().collect::<BTreeSet<_>>()),
            ToolProfile::Coding => Some(known_tools().copied().collect()),
        };
        let mut denied = BTreeSet::new();
        for lists in levels {
            if let Some(offered) = &mut offered {
                offered.extend(lists.allow.iter().filter_map(|entry| expand(entry)).flatten().copied());
            }
            denied.extend(lists.deny.iter().filter_map(|entry| expand(entry)).flatten().copied());
        }
        Self { offered, denied }
    }
}

/// The policy of every chat, from the config; see the module doc.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ToolPolicy {
    profile: ToolProfile,
    global: ToolLists,
    /// Channel name → its lists and its groups' lists (by chat id, guild or workspace id).
    channels: HashMap<String, (ToolLists, BTreeMap<String, ToolLists>)>,
}

impl ToolPolicy {
    /// `[tools]`, and the `tools` lists of every channel and its groups.
    pub fn from_config(config: &Config) -> Self {
        let channels = &config.channels;
        let groups = |table: &BTreeMap<String, GroupConfig>| {
            table.iter().map(|(id, group)| (id.clone(), group.tools.clone())).collect::<BTreeMap<_, _>>()
        };
        let guilds = channels.discord.guilds.iter().map(|(id, guild)| (id.clone(), guild.tools.clone())).collect();
        Self::new(config.tools.profile, config.tools.lists())
            .with_channel("telegram", channels.telegram.tools.clone(), groups(&channels.telegram.groups))
            .with_channel("discord", channels.discord.tools.clone(), guilds)
            .with_channel("slack", channels.slack.tools.clone(), groups(&channels.slack.channels))
            .with_channel("webchat", channels.webchat.tools.clone(), BTreeMap::new())
    }

    pub fn new(profile: ToolProfile, global: ToolLists) -> Self {
        Self { profile, global, channels: HashMap::new() }
    }

    /// Adds a channel's lists and its groups' (keyed as the channel's group table is).
    pub fn with_channel(mut self, channel: &str, lists: ToolLists, groups: BTreeMap<String, ToolLists>) -> Self {
        self.channels.insert(channel.to_owned(), (lists, groups));
        self
    }

    /// Whether any chat could be offered `tool`: its profile, or an `allow` somewhere.
    pub fn could_offer(&self, tool: &str) -> bool {
        let allowed =
            |lists: &ToolLists| lists.allow.iter().filter_map(|entry| expand(entry)).flatten().any(|t| *t == tool);
        self.profile != ToolProfile::Chat
            || allowed(&self.global)
            || self.channels.values().any(|(lists, groups)| allowed(lists) || groups.values().any(allowed))
    }

    /// The tools of a run outside any chat (`ferry agent` run in-process): `[tools]` alone.
    pub fn outside_chats(&self) -> ToolFilter {
        ToolFilter::new(self.profile, &[&self.global])
    }

    /// The tools a run answering `chat_id` (in workspace `space_id`, if any) on `channel`
    /// may use. A group listed by its own id takes its lists from there, else from its
    /// workspace's entry (a Discord guild).
    pub fn for_chat(&self, channel: &str, chat_id: &str, space_id: Option<&str>) -> ToolFilter {
        let mut levels = vec![&self.global];
        if let Some((lists, groups)) = self.channels.get(channel) {
            levels.push(lists);
            let group = groups.get(chat_id).or_else(|| space_id.and_then(|space| groups.get(space)));
            levels.extend(group);
        }
        ToolFilter::new(self.profile, &levels)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn lists(allow: &[&str], deny: &[&str]) -> ToolLists {
        ToolLists {
            allow: allow.iter().map(|entry| (*entry).to_owned()).collect(),
            deny: deny.iter().map(|entry| (*entry).to_owned()).collect(),
        }
    }

    fn offered(filter: &ToolFilter) -> Vec<&'static str> {
        known_tools().copied().filter(|tool| filter.allows(tool)).collect()
    }

    #[test]
    fn profiles_offer_their_tools() {
        let chat = ToolPolicy::default().for_chat("telegram", "42", None);
        assert_eq!(offered(&chat), ["current_time", "sessions_list", "message", "skill_read"]);
        let coding = ToolPolicy::new(ToolProfile::Coding, ToolLists::default()).for_chat("telegram", "42", None);
        assert_eq!(offered(&coding), known_tools().copied().collect::<Vec<_>>());
        let full = ToolPolicy::new(ToolProfile::Full, ToolLists::default()).for_chat("telegram", "42", None);
        assert!(full.allows("mcp_any_server_tool"), "full offers tools no list knows");
    }

    #[test]
    fn allow_adds_and_a_deny_at_any_level_wins() {
        let groups = BTreeMap::from([
            ("-100".to_owned(), lists(&["exec"], &["group:web"])),
            ("guild-1".to_owned(), lists(&[], &["message"])),
        ]);
        let policy = ToolPolicy::new(ToolProfile::Chat, lists(&["group:web"], &["sessions_list"]))
            .with_channel("telegram", lists(&["read"], &[]), groups.clone())
            .with_channel("discord", lists(&[], &["exec"]), groups);

        let dm = policy.for_chat("telegram", "42", None);
        assert_eq!(offered(&dm), ["current_time", "message", "skill_read", "read", "web_fetch", "web_search"]);
        let group = policy.for_chat("telegram", "-100", None);
        assert_eq!(offered(&group), ["current_time", "message", "skill_read", "read", "exec"]);
        // Discord: the guild's entry applies to its channels; the channel's deny beats the
        // group's allow of `exec`.
        let in_guild = policy.for_chat("discord", "chan-9", Some("guild-1"));
        assert_eq!(offered(&in_guild), ["current_time", "skill_read", "web_fetch", "web_search"]);
        let exec_group = policy.for_chat("discord", "-100", None);
        assert!(!exec_group.allows("exec"), "the channel's deny wins over the group's allow");
        assert_eq!(offered(&policy.for_chat("slack", "C1", None)), offered(&policy.for_chat("webchat", "x", None)));
        // Outside any chat only [tools] applies.
        let operator = policy.outside_chats();
        assert_eq!(offered(&operator), ["current_time", "message", "skill_read", "web_fetch", "web_search"]);
    }

    #[test]
    fn unknown_names_are_refused_with_the_choices() {
        assert_eq!(lists(&["group:fs", "exec"], &["web_search"]).check(), Ok(()));
        let (list, why) = lists(&[], &["group:shell"]).check().unwrap_err();
        assert_eq!(list, "deny");
        assert!(why.contains("`group:shell` is not a tool") && why.contains("group:runtime"), "{why}");
        assert_eq!(lists(&["exce"], &[]).check().unwrap_err().0, "allow");
    }
}
