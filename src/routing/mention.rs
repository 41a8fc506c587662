//! Mention gating in groups (SPEC §3.3): the bot answers a group only when addressed, but
//! still hears what was said in between.
//!
//! A group message triggers a run when the bot is mentioned natively (`mentions_bot`), when
//! it replies to one of the bot's messages (`reply_to_bot`), or when one of the channel's
//! `mention_patterns` (case-insensitive regexes) matches its text. Any other message is held
//! in the group's pending history (the last `history_limit` of them), and the next
//! triggering message carries that history to the model:
//!
//! ```text
//! [Chat messages since your last reply - for context]
//! alice: has anyone tried the new build?
//! bob: yes, it crashes on start
//! [Current message - respond to this]
//! alice: @ferry can you look at the logs?
//! ```
//!
//! Histories are kept in memory per session key (a group, or a thread inside one), created
//! on the first held message and dropped as soon as they are used, so idle groups cost
//! nothing.

use std::collections::{HashMap, VecDeque};
use std::sync::{Mutex, PoisonError};

use ferry_channel::InboundMessage;
use regex::Regex;

use super::SessionKey;
use crate::config::{Accounts, Config, DEFAULT_HISTORY_LIMIT, compile_mention_pattern};

/// The line before the held messages in a prompt (SPEC §3.3).
pub const HISTORY_HEADER: &str = "[Chat messages since your last reply - for context]";

/// The line before the triggering message in a prompt (SPEC §3.3).
pub const CURRENT_HEADER: &str = "[Current message - respond to this]";

/// A `mention_patterns` entry that does not compile. `ferry config check` reports the same.
#[derive(Debug, thiserror::Error)]
#[error("{key}: {pattern:?} is not a valid regular expression: {source}")]
pub struct InvalidMentionPattern {
    /// `channels.<name>.mention_patterns[<i>]`.
    pub key: String,
    pub pattern: String,
    pub source: regex::Error,
}

/// One channel's mention settings.
#[derive(Debug, Clone)]
pub struct MentionRules {
    patterns: Vec<Regex>,
    history_limit: usize,
}

impl MentionRules {
    /// Compiles a channel's `mention_patterns`; `channel` names it in the error.
    pub fn compile(channel: &str, patterns: &[String], history_limit: usize) -> Result<Self, InvalidMentionPattern> {
        let patterns = patterns
            .iter()
            .enumerate()
            .map(|(index, pattern)| {
                compile_mention_pattern(pattern).map_err(|source| InvalidMentionPattern {
                    key: format!("channels.{channel}.mention_patterns[{index}]"),
                    pattern: pattern.clone(),
                    source,
                })
            })
            .collect::<Result<_, _>>()?;
        Ok(Self { patterns, history_limit })
    }

    /// Whether the message addresses the bot.
    pub fn triggers(&self, message: &InboundMessage) -> bool {
        message.mentions_bot || message.reply_to_bot || self.patterns.iter().any(|re| re.is_match(&message.text))
    }
}

impl Default for MentionRules {
    fn default() -> Self {
        Self { patterns: Vec::new(), history_limit: DEFAULT_HISTORY_LIMIT }
    }
}

/// What the gate says about one message.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Gate {
    /// Run with this prompt: the message text, wrapped with the held history if any.
    Run { prompt: String },
    /// Not addressed to the bot: kept as context for later.
    Held,
}

/// A held group message, as it will appear in the prompt.
#[derive(Debug, Clone, PartialEq, Eq)]
struct HeldLine {
    sender: String,
    text: String,
}

/// Mention rules per channel plus the pending histories of every group.
#[derive(Debug, Default)]
pub struct MentionGate {
    /// By channel name, then account id.
    rules: HashMap<String, HashMap<String, MentionRules>>,
    pending: Mutex<HashMap<SessionKey, VecDeque<HeldLine>>>,
}

impl MentionGate {
    /// Compiles every account's patterns. The web chat is never gated, so it has none.
    pub fn from_config(config: &Config) -> Result<Self, InvalidMentionPattern> {
        fn compile<A: Accounts>(
            name: &str,
            table: &A,
            rules: impl Fn(&A) -> (&[String], usize),
        ) -> Result<HashMap<String, MentionRules>, InvalidMentionPattern> {
            table
                .each_account()
                .into_iter()
                .map(|(id, account)| {
                    let (patterns, history_limit) = rules(account);
                    Ok((id.to_owned(), MentionRules::compile(name, patterns, history_limit)?))
                })
                .collect()
        }
        let channels = &config.channels;
        let rules = HashMap::from([
            (
                "telegram".to_owned(),
                compile("telegram", &channels.telegram, |t| (&t.mention_patterns, t.history_limit))?,
            ),
            ("discord".to_owned(), compile("discord", &channels.discord, |d| (&d.mention_patterns, d.history_limit))?),
            ("slack".to_owned(), compile("slack", &channels.slack, |s| (&s.mention_patterns, s.history_limit))?),
        ]);
        Ok(Self { rules, pending: Mutex::default() })
    }

    /// The rules of the account `message` came through.
    fn rules_of(&self, message: &InboundMessage) -> Option<&MentionRules> {
        self.rules.get(&message.channel)?.get(&message.account_id)
    }

    /// Lets `message` run or holds it. `history_key` names the group's history (its session
    /// key); `require_mention` comes from access control.
    pub fn admit(&self, history_key: &SessionKey, message: &InboundMessage, require_mention: bool) -> Gate {
        let default_rules = MentionRules::default();
        let rules = self.rules_of(message).unwrap_or(&default_rules);
        let mut pending = self.pending.lock().unwrap_or_else(PoisonError::into_inner);
        if !require_mention || rules.triggers(message) {
            let history = pending.remove(history_key).unwrap_or_default();
            return Gate::Run { prompt: prompt(history, message) };
        }
        if rules.history_limit > 0 {
            let history = pending.entry(history_key.clone()).or_default();
            if history.len() == rules.history_limit {
                history.pop_front();
            }
            history.push_back(HeldLine { sender: sender_label(message), text: message.text.clone() });
        }
        Gate::Held
    }

    /// Whether `message` would run rather than be held, without holding it.
    pub fn addresses_bot(&self, message: &InboundMessage, require_mention: bool) -> bool {
        let default_rules = MentionRules::default();
        !require_mention || self.rules_of(message).unwrap_or(&default_rules).triggers(message)
    }

    /// How many messages are held for a group.
    pub fn held(&self, history_key: &SessionKey) -> usize {
        self.pending.lock().unwrap_or_else(PoisonError::into_inner).get(history_key).map_or(0, VecDeque::len)
    }
}

/// The message text alone, or wrapped with the held history (SPEC §3.3).
fn prompt(history: VecDeque<HeldLine>, message: &InboundMessage) -> String {
    if history.is_empty() {
        return message.text.clone();
    }
    let mut prompt = String::from(HISTORY_HEADER);
    for line in history {
        prompt.push('\n');
        prompt.push_str(&line.sender);
        prompt.push_str(": ");
        prompt.push_str(&line.text);
    }
    prompt.push('\n');
    prompt.push_str(CURRENT_HEADER);
    prompt.push('\n');
    prompt.push_str(&sender_label(message));
    prompt.push_str(": ");
    prompt.push_str(&message.text);
    prompt
}

/// The sender's display name, or their id when the platform gave none.
fn sender_label(message: &InboundMessage) -> String {
    match &message.sender.name {
        Some(name) if !name.trim().is_empty() => name.clone(),
        _ => message.sender.id.clone(),
    }
}

#[cfg(test)]
mod tests {
    use ferry_channel::{ChatKind, ChatRef, Sender};

    use super::*;
    use crate::config::Config;

    fn message(sender: &str, name: Option<&str>, text: &str) -> InboundMessage {
        let sender = Sender { id: sender.into(), name: name.map(str::to_owned), is_bot: false };
        InboundMessage::new("telegram", "default", ChatRef::new(ChatKind::Group, "-100"), sender, "1", text)
    }

    fn mentioned(mut message: InboundMessage) -> InboundMessage {
        message.mentions_bot = true;
        message
    }

    fn gate(edit: impl FnOnce(&mut Config)) -> MentionGate {
        let mut config = Config::default();
        edit(&mut config);
        MentionGate::from_config(&config).unwrap()
    }

    fn key(name: &str) -> SessionKey {
        SessionKey::from_raw(name)
    }

    #[test]
    fn a_mention_runs_the_message_as_is_when_nothing_was_held() {
        let gate = gate(|_| {});
        let gated = gate.admit(&key("g"), &mentioned(message("1", Some("Alice"), "@bot hi")), true);
        assert_eq!(gated, Gate::Run { prompt: "@bot hi".into() });
    }

    #[test]
    fn held_messages_are_wrapped_before_the_next_mention_then_forgotten() {
        let gate = gate(|_| {});
        let group = key("g");
        assert_eq!(gate.admit(&group, &message("1", Some("Alice"), "anyone here?"), true), Gate::Held);
        assert_eq!(gate.admit(&group, &message("2", None, "yes"), true), Gate::Held);
        let gated = gate.admit(&group, &mentioned(message("1", Some("Alice"), "@bot summarize")), true);
        let expected = "[Chat messages since your last reply - for context]\n\
                        Alice: anyone here?\n\
                        2: yes\n\
                        [Current message - respond to this]\n\
                        Alice: @bot summarize";
        assert_eq!(gated, Gate::Run { prompt: expected.into() });
        assert_eq!(gate.held(&group), 0);
        let next = gate.admit(&group, &mentioned(message("1", None, "again")), true);
        assert_eq!(next, Gate::Run { prompt: "again".into() });
    }

    #[test]
    fn replies_to_the_bot_and_mention_patterns_trigger_case_insensitively() {
        let gate = gate(|c| c.channels.telegram.mention_patterns = vec![r"^hey ferry\b".into()]);
        let mut reply = message("1", None, "thanks");
        reply.reply_to_bot = true;
        assert!(matches!(gate.admit(&key("g"), &reply, true), Gate::Run { .. }));
        assert!(matches!(gate.admit(&key("g"), &message("1", None, "HEY Ferry, help"), true), Gate::Run { .. }));
        assert_eq!(gate.admit(&key("g"), &message("1", None, "hey ferryman"), true), Gate::Held);
    }

    #[test]
    fn history_keeps_only_the_last_history_limit_messages_per_group() {
        let gate = gate(|c| c.channels.telegram.history_limit = 2);
        for text in ["one", "two", "three"] {
            gate.admit(&key("a"), &message("u", None, text), true);
        }
        gate.admit(&key("b"), &message("u", None, "elsewhere"), true);
        assert_eq!((gate.held(&key("a")), gate.held(&key("b"))), (2, 1));
        let Gate::Run { prompt } = gate.admit(&key("a"), &mentioned(message("u", None, "go")), true) else {
            panic!("a mention must run");
        };
        assert!(!prompt.contains("one") && prompt.contains("u: two\nu: three\n"), "{prompt}");
    }

    #[test]
    fn without_require_mention_everything_runs_and_nothing_is_held() {
        let gate = gate(|_| {});
        assert_eq!(gate.admit(&key("g"), &message("1", None, "hi"), false), Gate::Run { prompt: "hi".into() });
        assert_eq!(gate.held(&key("g")), 0);
    }

    #[test]
    fn a_zero_history_limit_holds_nothing() {
        let gate = gate(|c| c.channels.telegram.history_limit = 0);
        assert_eq!(gate.admit(&key("g"), &message("1", None, "hi"), true), Gate::Held);
        assert_eq!(gate.held(&key("g")), 0);
    }

    #[test]
    fn an_idle_gate_allocates_no_history() {
        let gate = gate(|_| {});
        assert_eq!(gate.pending.lock().unwrap().capacity(), 0);
    }

    #[test]
    fn an_invalid_pattern_names_its_key() {
        let mut config = Config::default();
        config.channels.slack.mention_patterns = vec!["ok".into(), "(".into()];
        let error = MentionGate::from_config(&config).unwrap_err();
        assert_eq!(error.key, "channels.slack.mention_patterns[1]");
    }
}
