//! Which tools a chat may use: `[tools] profile`, then `allow`/`deny` lists set globally, per
//! channel (`[channels.P.tools]`) and per group (`tools` in a group's, guild's or Slack
//! channel's table). A tool a chat may not use is not offered to the model at all, and a
//! call to it anyway (a model guessing a name) gets an error result.
//!
//! The lists name tools or groups of tools (`group:fs`, `group:runtime`, `group:web`). An
//! `allow` adds to the profile; a `deny` at any level wins over every `allow`, so an
//! operator can take `exec` away from one noisy group whatever the profile says.
//!
//! Tools of MCP servers (`<server>__<tool>`) are offered in every profile: configuring a
//! server is the operator's choice to offer it (its own `allow`/`deny` pick its tools). The
//! lists take them away by name, a whole server (`group:mcp:<server>`) or all of them
//! (`group:mcp`).

use std::collections::{BTreeMap, BTreeSet, HashMap};

use crate::config::tool_lists::{CHAT_TOOLS, MCP_GROUP, expand, known_tools, mcp_entry};
pub use crate::config::tool_lists::{MCP_SEPARATOR, ToolLists, ToolProfile, mcp_server_of};
use crate::config::{Accounts, AgentSettings, Config, DEFAULT_ACCOUNT, GroupConfig};

/// The tools one run may use.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ToolFilter {
    /// `None`: every tool (the `full` profile, and runs outside any chat) but `denied`.
    offered: Option<BTreeSet<&'static str>>,
    denied: BTreeSet<&'static str>,
    /// Denied MCP entries as written: `group:mcp`, `group:mcp:<server>`, `<server>__<tool>`.
    denied_mcp: BTreeSet<String>,
}

impl ToolFilter {
    /// Every tool: for runs that no chat's policy applies to (embedding, tests).
    pub fn everything() -> Self {
        Self::default()
    }

    pub fn allows(&self, tool: &str) -> bool {
        if let Some(server) = mcp_server_of(tool) {
            let names_it = |entry: &String| {
                entry == tool || entry == MCP_GROUP || entry.strip_prefix("group:mcp:") == Some(server)
            };
            return !self.denied_mcp.iter().any(names_it);
        }
        !self.denied.contains(tool) && self.offered.as_ref().is_none_or(|offered| offered.contains(tool))
    }

    /// The same, with `tools` taken away.
    pub fn without(mut self, tools: &[&'static str]) -> Self {
        self.denied.extend(tools.iter().copied());
        self
    }

    /// The same, narrowed to `tools` (those of them it allows): no other tool, and no MCP
    /// tool. For a turn with one purpose, such as saving memories before a compaction.
    pub fn only(mut self, tools: &[&'static str]) -> Self {
        let kept: BTreeSet<&'static str> = tools.iter().copied().filter(|tool| self.allows(tool)).collect();
        self.offered = Some(kept);
        self.denied_mcp.insert(MCP_GROUP.to_owned());
        self
    }

    fn new(profile: ToolProfile, levels: &[&ToolLists]) -> Self {
        let mut offered = match profile {
            ToolProfile::Full => None,
            ToolProfile::Chat => Some(CHAT_TOOLS.iter().copied().collect::<BTreeSet<_>>()),
            ToolProfile::Coding => Some(known_tools().copied().collect()),
        };
        let mut denied = BTreeSet::new();
        let mut denied_mcp = BTreeSet::new();
        for lists in levels {
            if let Some(offered) = &mut offered {
                offered.extend(lists.allow.iter().filter_map(|entry| expand(entry)).flatten().copied());
            }
            denied.extend(lists.deny.iter().filter_map(|entry| expand(entry)).flatten().copied());
            denied_mcp.extend(lists.deny.iter().filter(|entry| mcp_entry(entry).is_some()).cloned());
        }
        Self { offered, denied, denied_mcp }
    }
}

/// One account's lists and its groups' lists.
type ChannelLists = (ToolLists, BTreeMap<String, ToolLists>);

/// The policy of every chat, from the config; see the module doc.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ToolPolicy {
    profile: ToolProfile,
    global: ToolLists,
    /// The agent's own lists (`[agents.list.<id>.tools]`), after the global ones.
    agent: ToolLists,
    /// Channel name → account id → its lists and its groups' lists (by chat id, guild or
    /// workspace id).
    channels: HashMap<String, HashMap<String, ChannelLists>>,
}

impl ToolPolicy {
    /// `[tools]`, and the `tools` lists of every account of every channel and its groups.
    pub fn from_config(config: &Config) -> Self {
        let channels = &config.channels;
        let groups = |table: &BTreeMap<String, GroupConfig>| {
            table.iter().map(|(id, group)| (id.clone(), group.tools.clone())).collect::<BTreeMap<_, _>>()
        };
        let mut policy = Self::new(config.tools.profile, config.tools.lists()).with_channel(
            "webchat",
            channels.webchat.tools.clone(),
            BTreeMap::new(),
        );
        for (account, telegram) in channels.telegram.each_account() {
            policy = policy.with_account("telegram", account, telegram.tools.clone(), groups(&telegram.groups));
        }
        for (account, discord) in channels.discord.each_account() {
            let guilds = discord.guilds.iter().map(|(id, guild)| (id.clone(), guild.tools.clone())).collect();
            policy = policy.with_account("discord", account, discord.tools.clone(), guilds);
        }
        for (account, slack) in channels.slack.each_account() {
            policy = policy.with_account("slack", account, slack.tools.clone(), groups(&slack.channels));
        }
        policy
    }

    /// [`ToolPolicy::from_config`] for one agent: its profile, if it sets one, replaces
    /// `tools.profile`, and its lists apply after `[tools]`' (a deny anywhere still wins).
    pub fn for_agent(config: &Config, agent: &AgentSettings) -> Self {
        let mut policy = Self::from_config(config);
        if let Some(tools) = &agent.tools {
            policy.profile = tools.profile.unwrap_or(policy.profile);
            policy.agent = tools.lists();
        }
        policy
    }

    pub fn new(profile: ToolProfile, global: ToolLists) -> Self {
        Self { profile, global, agent: ToolLists::default(), channels: HashMap::new() }
    }

    /// Adds a channel's lists and its groups' (keyed as the channel's group table is), for
    /// its account `default`.
    pub fn with_channel(self, channel: &str, lists: ToolLists, groups: BTreeMap<String, ToolLists>) -> Self {
        self.with_account(channel, DEFAULT_ACCOUNT, lists, groups)
    }

    /// Adds the lists of one account of a channel, and its groups'.
    pub fn with_account(
        mut self,
        channel: &str,
        account: &str,
        lists: ToolLists,
        groups: BTreeMap<String, ToolLists>,
    ) -> Self {
        self.channels.entry(channel.to_owned()).or_default().insert(account.to_owned(), (lists, groups));
        self
    }

    /// Whether any chat could be offered `tool`: its profile, or an `allow` somewhere.
    pub fn could_offer(&self, tool: &str) -> bool {
        let allowed =
            |lists: &ToolLists| lists.allow.iter().filter_map(|entry| expand(entry)).flatten().any(|t| *t == tool);
        self.profile != ToolProfile::Chat
            || allowed(&self.global)
            || allowed(&self.agent)
            || self
                .channels
                .values()
                .flat_map(HashMap::values)
                .any(|(lists, groups)| allowed(lists) || groups.values().any(allowed))
    }

    /// The tools of a run outside any chat (`ferry agent` run in-process): `[tools]` alone.
    pub fn outside_chats(&self) -> ToolFilter {
        ToolFilter::new(self.profile, &[&self.global, &self.agent])
    }

    /// The tools a run answering `chat_id` (in workspace `space_id`, if any) on `channel`
    /// may use. A group listed by its own id takes its lists from there, else from its
    /// workspace's entry (a Discord guild).
    pub fn for_chat(&self, channel: &str, chat_id: &str, space_id: Option<&str>) -> ToolFilter {
        self.for_account_chat(channel, DEFAULT_ACCOUNT, chat_id, space_id)
    }

    /// [`ToolPolicy::for_chat`] on the account `account` of `channel`, with its own lists.
    pub fn for_account_chat(&self, channel: &str, account: &str, chat_id: &str, space_id: Option<&str>) -> ToolFilter {
        let mut levels = vec![&self.global, &self.agent];
        if let Some((lists, groups)) = self.channels.get(channel).and_then(|accounts| accounts.get(account)) {
            levels.push(lists);
            let group = groups.get(chat_id).or_else(|| space_id.and_then(|space| groups.get(space)));
            levels.extend(group);
        }
        ToolFilter::new(self.profile, &levels)
    }
}

/// Every agent's [`ToolPolicy`], by id.
#[derive(Debug, Clone)]
pub struct AgentToolPolicies {
    by_agent: HashMap<String, ToolPolicy>,
    /// The default agent's: for a session of an agent the config no longer has.
    default: ToolPolicy,
}

impl AgentToolPolicies {
    pub fn from_config(config: &Config) -> Self {
        let agents = &config.agents;
        let by_agent: HashMap<String, ToolPolicy> = agents
            .ids()
            .into_iter()
            .map(|id| (id.to_owned(), ToolPolicy::for_agent(config, agents.settings_of(id))))
            .collect();
        let default = ToolPolicy::for_agent(config, agents.settings_of(agents.default_id()));
        Self { by_agent, default }
    }

    /// The policy of the agent `id`.
    pub fn of(&self, id: &str) -> &ToolPolicy {
        self.by_agent.get(id).unwrap_or(&self.default)
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
        let chat_tools = [
            "current_time",
            "sessions_list",
            "message",
            "skill_read",
            "cron",
            "memory_search",
            "memory_get",
            "memory_write",
        ];
        assert_eq!(offered(&chat), chat_tools);
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
        let memory = ["memory_search", "memory_get", "memory_write"];
        let dm_tools =
            [&["current_time", "message", "skill_read", "cron"][..], &memory, &["read", "web_fetch", "web_search"]];
        assert_eq!(offered(&dm), dm_tools.concat());
        let group = policy.for_chat("telegram", "-100", None);
        assert_eq!(
            offered(&group),
            [&["current_time", "message", "skill_read", "cron"][..], &memory, &["read", "exec"]].concat()
        );
        // Discord: the guild's entry applies to its channels; the channel's deny beats the
        // group's allow of `exec`.
        let in_guild = policy.for_chat("discord", "chan-9", Some("guild-1"));
        let guild_tools = [&["current_time", "skill_read", "cron"][..], &memory, &["web_fetch", "web_search"]];
        assert_eq!(offered(&in_guild), guild_tools.concat());
        let exec_group = policy.for_chat("discord", "-100", None);
        assert!(!exec_group.allows("exec"), "the channel's deny wins over the group's allow");
        assert_eq!(offered(&policy.for_chat("slack", "C1", None)), offered(&policy.for_chat("webchat", "x", None)));
        // Outside any chat only [tools] applies.
        let operator = policy.outside_chats();
        let operator_tools =
            [&["current_time", "message", "skill_read", "cron"][..], &memory, &["web_fetch", "web_search"]];
        assert_eq!(offered(&operator), operator_tools.concat());
    }

    #[test]
    fn narrowing_keeps_only_the_named_tools_the_chat_allows() {
        let policy = ToolPolicy::new(ToolProfile::Full, lists(&[], &["memory_get"]));
        let narrowed = policy.for_chat("telegram", "42", None).only(&["memory_search", "memory_get", "memory_write"]);
        assert_eq!(offered(&narrowed), ["memory_search", "memory_write"], "a denied tool stays denied");
        assert!(!narrowed.allows("github__create_issue"), "no MCP tool");
        assert!(!narrowed.allows("exec"));
    }

    #[test]
    fn unknown_names_are_refused_with_the_choices() {
        assert_eq!(lists(&["group:fs", "exec"], &["web_search"]).check(&[]), Ok(()));
        let (list, why) = lists(&[], &["group:shell"]).check(&[]).unwrap_err();
        assert_eq!(list, "deny");
        assert!(why.contains("`group:shell` is not a tool") && why.contains("group:runtime"), "{why}");
        assert_eq!(lists(&["exce"], &[]).check(&[]).unwrap_err().0, "allow");
        let mcp = lists(&[], &["group:mcp", "group:mcp:github", "github__create_issue"]);
        assert_eq!(mcp.check(&["github"]), Ok(()));
        let (list, why) = mcp.check(&["gitlab"]).unwrap_err();
        assert_eq!(list, "deny");
        assert!(why.contains("MCP server `github`, which is not configured; servers: gitlab"), "{why}");
    }

    #[test]
    fn mcp_tools_are_offered_everywhere_unless_denied() {
        let chat = ToolPolicy::default().for_chat("telegram", "42", None);
        assert!(chat.allows("github__create_issue") && chat.allows("db__query"));
        assert!(!chat.allows("exec"), "MCP names do not open Ferry's own tools");
        let groups = BTreeMap::from([("-100".to_owned(), lists(&[], &["group:mcp"]))]);
        let policy = ToolPolicy::new(ToolProfile::Chat, lists(&[], &["github__delete_repo"]))
            .with_channel("telegram", lists(&[], &[]), groups)
            .with_channel("discord", lists(&[], &["group:mcp:db"]), BTreeMap::new());
        let dm = policy.for_chat("telegram", "42", None);
        assert!(dm.allows("github__create_issue") && !dm.allows("github__delete_repo") && dm.allows("db__query"));
        let group = policy.for_chat("telegram", "-100", None);
        assert!(!group.allows("github__create_issue") && !group.allows("db__query"));
        assert!(group.allows("message"), "group:mcp takes only MCP tools away");
        let discord = policy.for_chat("discord", "chan", None);
        assert!(!discord.allows("db__query") && discord.allows("github__create_issue"));
        assert!(discord.allows("dbx__query"), "a server's name is matched whole");
    }

    #[test]
    fn each_agent_has_its_own_profile_and_lists_and_each_account_its_own() {
        use crate::config::{AgentSettings, AgentToolsConfig, TelegramConfig};

        let mut config = Config::default();
        config.tools.deny = vec!["exec".to_owned()];
        let coder = AgentToolsConfig { profile: Some(ToolProfile::Coding), allow: vec![], deny: vec!["write".into()] };
        config.agents.list.insert("main".into(), AgentSettings::default());
        config.agents.list.insert("coder".into(), AgentSettings { tools: Some(coder), ..AgentSettings::default() });
        let work = TelegramConfig { tools: lists(&["group:web"], &[]), ..TelegramConfig::default() };
        config.channels.telegram.accounts.insert("work".into(), work);
        let policies = AgentToolPolicies::from_config(&config);

        let main = offered(&policies.of("main").for_chat("telegram", "42", None));
        assert_eq!(main, offered(&ToolPolicy::from_config(&config).for_chat("telegram", "42", None)));
        let coder = offered(&policies.of("coder").for_chat("telegram", "42", None));
        assert!(coder.contains(&"read") && coder.contains(&"edit"), "the coding profile: {coder:?}");
        assert!(!coder.contains(&"write") && !coder.contains(&"exec"), "its deny and [tools]' both hold: {coder:?}");
        assert_eq!(offered(&policies.of("gone").for_chat("telegram", "42", None)), main, "unknown: the default's");

        let on_work = offered(&policies.of("main").for_account_chat("telegram", "work", "42", None));
        assert!(on_work.contains(&"web_fetch"), "the account's own allow: {on_work:?}");
        let on_default = offered(&policies.of("main").for_account_chat("telegram", "default", "42", None));
        assert!(!on_default.contains(&"web_fetch"), "not another account's: {on_default:?}");
    }
}
