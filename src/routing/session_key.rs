//! Which conversation a message belongs to, as a session key (SPEC §3.5).
//!
//! The key decides what the model remembers: everything with the same key shares one
//! transcript and one lane (one run at a time). Its shape is a contract with operators and
//! tools (`ferry agent --session`, `sessions.list`), so it is spelled exactly as the spec says:
//!
//! | conversation | key |
//! |---|---|
//! | DM, `dm_scope = "main"` | `agent:<a>:main` |
//! | DM, `per-peer` | `agent:<a>:direct:<peer>` |
//! | DM, `per-channel-peer` | `agent:<a>:<channel>:direct:<peer>` |
//! | DM, `per-account-channel-peer` | `agent:<a>:<channel>:<account>:direct:<peer>` |
//! | group | `agent:<a>:<channel>:group:<id>` |
//! | channel (a named room) | `agent:<a>:<channel>:channel:<id>` |
//! | any of the above in a thread | `…:thread:<id>` (or `…:topic:<id>`, see [`ThreadLabel`]) |
//!
//! ```
//! use ferry::channel::{ChatKind, ChatRef, InboundMessage, Sender};
//! use ferry::config::DmScope;
//! use ferry::routing::{ThreadLabel, session_key};
//!
//! let chat = ChatRef::new(ChatKind::Channel, "C0123ABCD");
//! let mut message = InboundMessage::new("slack", "default", chat, Sender::user("U42"), "1712345679.000200", "hi");
//! message.thread_id = Some("1712345678.000100".into());
//! let key = session_key("main", DmScope::Main, &message, ThreadLabel::Thread);
//! assert_eq!(key.as_str(), "agent:main:slack:channel:c0123abcd:thread:1712345678.000100");
//! ```
//!
//! Every part is lowercased (the spec wants lowercase keys; platform ids that differ only in
//! case are treated as one). So that an id can never forge another key's shape, the
//! characters that structure a key are percent-encoded inside a part: `:` → `%3a`, `%` →
//! `%25`, whitespace and control characters → their UTF-8 bytes as `%xx`, and an empty id →
//! `%`. Real platform ids contain none of these, so in practice keys read exactly as above.

use std::collections::HashMap;
use std::fmt;
use std::fmt::Write as _;

use ferry_channel::{ChatKind, InboundMessage};
use serde::{Deserialize, Serialize};

use crate::config::DmScope;

/// The longest session key a client may name.
const MAX_KEY_LEN: usize = 512;

/// Why a session key someone wrote was refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{0}")]
pub struct InvalidSessionKey(String);

/// A session key: lowercase, `:`-separated, built only by [`session_key`] (or parsed from an
/// operator's `--session`). Equal keys mean one shared conversation.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(transparent)]
pub struct SessionKey(String);

impl SessionKey {
    pub fn as_str(&self) -> &str {
        &self.0
    }

    pub fn into_string(self) -> String {
        self.0
    }

    /// A key a client or an operator wrote (`agent:<agent id>:<more parts>`), lowercased.
    /// Parts must be non-empty and free of whitespace and control characters.
    pub fn parse(text: &str) -> Result<Self, InvalidSessionKey> {
        let key = text.trim().to_lowercase();
        let invalid = |why: &str| Err(InvalidSessionKey(format!("session key `{}`: {why}", text.trim())));
        if key.len() > MAX_KEY_LEN {
            return invalid(&format!("longer than {MAX_KEY_LEN} bytes"));
        }
        let parts: Vec<&str> = key.split(':').collect();
        if parts.len() < 3 || parts[0] != "agent" {
            return invalid("must look like agent:<agent id>:<name>, e.g. agent:main:main");
        }
        if parts.iter().any(|part| part.is_empty()) {
            return invalid("has an empty part");
        }
        if key.chars().any(|c| c.is_whitespace() || c.is_control()) {
            return invalid("must not contain spaces or control characters");
        }
        Ok(Self(key))
    }

    /// The agent the session belongs to (its second part).
    pub fn agent_id(&self) -> &str {
        self.0.split(':').nth(1).unwrap_or_default()
    }

    /// A key from raw text, for tests of code that only stores keys.
    #[cfg(test)]
    pub(crate) fn from_raw(key: &str) -> Self {
        Self(key.to_owned())
    }
}

impl fmt::Display for SessionKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl AsRef<str> for SessionKey {
    fn as_ref(&self) -> &str {
        &self.0
    }
}

/// What a channel's `thread_id` means, which decides the word before it in the key.
///
/// This is a platform fact (a Telegram `message_thread_id` is a forum topic; a Slack
/// `thread_ts` or a Discord thread is a thread), so the core does not guess it from the
/// channel's name: whoever builds the [`crate::routing::Router`] says it per channel through
/// [`ThreadLabels`], next to where the adapters are wired in.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash)]
pub enum ThreadLabel {
    /// `:thread:<id>`: Slack `thread_ts`, Discord threads. The default.
    #[default]
    Thread,
    /// `:topic:<id>`: Telegram forum topics.
    Topic,
}

impl ThreadLabel {
    pub fn as_str(self) -> &'static str {
        match self {
            ThreadLabel::Thread => "thread",
            ThreadLabel::Topic => "topic",
        }
    }
}

/// The [`ThreadLabel`] of each channel, by channel name. A channel not listed uses
/// [`ThreadLabel::Thread`].
///
/// The table the binary's wiring (`src/wiring.rs`, which may name adapters) is to pass when
/// it builds the router for the gateway:
///
/// | channel | `thread_id` is | label |
/// |---|---|---|
/// | telegram | a forum topic (`message_thread_id`) | `topic` |
/// | discord | a thread channel | `thread` |
/// | slack | a `thread_ts` | `thread` |
/// | webchat | (no threads) | `thread` |
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ThreadLabels {
    by_channel: HashMap<String, ThreadLabel>,
}

impl ThreadLabels {
    /// Every channel uses [`ThreadLabel::Thread`].
    pub fn new() -> Self {
        Self::default()
    }

    /// Sets the label for one channel.
    pub fn with(mut self, channel: impl Into<String>, label: ThreadLabel) -> Self {
        self.by_channel.insert(channel.into(), label);
        self
    }

    pub fn for_channel(&self, channel: &str) -> ThreadLabel {
        self.by_channel.get(channel).copied().unwrap_or_default()
    }
}

/// Whether `key` is an agent's main session, `agent:<a>:main`: the operator's own (gateway
/// clients, `ferry agent`, and DMs under `dm_scope = "main"`).
pub fn is_main_session(key: &str) -> bool {
    let mut parts = key.split(':');
    matches!((parts.next(), parts.next(), parts.next(), parts.next()), (Some("agent"), Some(_), Some("main"), None))
}

/// The session a message belongs to, for agent `agent_id`. Deterministic: the same message
/// fields always give the same key.
pub fn session_key(
    agent_id: &str,
    dm_scope: DmScope,
    message: &InboundMessage,
    thread_label: ThreadLabel,
) -> SessionKey {
    let mut key = String::from("agent:");
    push_part(&mut key, agent_id);
    let peer = &message.sender.id;
    match (message.chat.kind, dm_scope) {
        (ChatKind::Direct, DmScope::Main) => key.push_str(":main"),
        (ChatKind::Direct, DmScope::PerPeer) => {
            key.push_str(":direct:");
            push_part(&mut key, peer);
        }
        (ChatKind::Direct, DmScope::PerChannelPeer) => {
            key.push(':');
            push_part(&mut key, &message.channel);
            key.push_str(":direct:");
            push_part(&mut key, peer);
        }
        (ChatKind::Direct, DmScope::PerAccountChannelPeer) => {
            key.push(':');
            push_part(&mut key, &message.channel);
            key.push(':');
            push_part(&mut key, &message.account_id);
            key.push_str(":direct:");
            push_part(&mut key, peer);
        }
        (kind @ (ChatKind::Group | ChatKind::Channel), _) => {
            key.push(':');
            push_part(&mut key, &message.channel);
            key.push(':');
            key.push_str(kind.as_str());
            key.push(':');
            push_part(&mut key, &message.chat.id);
        }
    }
    if let Some(thread_id) = &message.thread_id {
        key.push(':');
        key.push_str(thread_label.as_str());
        key.push(':');
        push_part(&mut key, thread_id);
    }
    SessionKey(key)
}

/// Appends one id, lowercased, with the characters that would change the key's shape
/// percent-encoded (see the module docs).
pub(crate) fn push_part(key: &mut String, raw: &str) {
    if raw.is_empty() {
        key.push('%');
        return;
    }
    for lower in raw.chars().flat_map(char::to_lowercase) {
        if lower == ':' || lower == '%' || lower.is_whitespace() || lower.is_control() {
            let mut bytes = [0; 4];
            for byte in lower.encode_utf8(&mut bytes).bytes() {
                // Writing to a String cannot fail.
                let _ = write!(key, "%{byte:02x}");
            }
        } else {
            key.push(lower);
        }
    }
}

#[cfg(test)]
mod tests {
    use ferry_channel::{ChatRef, Sender};
    use proptest::prelude::*;

    use super::*;

    fn message(kind: ChatKind, chat: &str, peer: &str, thread: Option<&str>) -> InboundMessage {
        InboundMessage {
            thread_id: thread.map(str::to_owned),
            ..InboundMessage::new("Telegram", "Bot1", ChatRef::new(kind, chat), Sender::user(peer), "1", "")
        }
    }

    fn key(scope: DmScope, message: &InboundMessage) -> String {
        session_key("Main", scope, message, ThreadLabel::Thread).into_string()
    }

    #[test]
    fn only_an_agents_main_key_is_the_main_session() {
        assert!(is_main_session("agent:main:main"));
        assert!(is_main_session("agent:ops:main"));
        for key in
            ["agent:main:telegram:direct:42", "agent:main:main:thread:1", "agent:main:telegram:group:main", "main"]
        {
            assert!(!is_main_session(key), "{key}");
        }
    }

    #[test]
    fn dm_keys_follow_the_dm_scope_exactly() {
        let dm = message(ChatKind::Direct, "777", "Peer42", None);
        assert_eq!(key(DmScope::Main, &dm), "agent:main:main");
        assert_eq!(key(DmScope::PerPeer, &dm), "agent:main:direct:peer42");
        assert_eq!(key(DmScope::PerChannelPeer, &dm), "agent:main:telegram:direct:peer42");
        assert_eq!(key(DmScope::PerAccountChannelPeer, &dm), "agent:main:telegram:bot1:direct:peer42");
    }

    #[test]
    fn group_and_channel_keys_name_the_chat_whatever_the_dm_scope() {
        for scope in [DmScope::Main, DmScope::PerPeer, DmScope::PerChannelPeer, DmScope::PerAccountChannelPeer] {
            let group = message(ChatKind::Group, "-100123", "u", None);
            assert_eq!(key(scope, &group), "agent:main:telegram:group:-100123");
            let room = message(ChatKind::Channel, "C0ABC", "u", None);
            assert_eq!(key(scope, &room), "agent:main:telegram:channel:c0abc");
        }
    }

    #[test]
    fn threads_and_topics_append_their_label_and_id() {
        let in_thread = message(ChatKind::Channel, "C1", "u", Some("1712.5"));
        assert_eq!(key(DmScope::Main, &in_thread), "agent:main:telegram:channel:c1:thread:1712.5");
        let in_topic = message(ChatKind::Group, "-100", "u", Some("7"));
        assert_eq!(
            session_key("main", DmScope::Main, &in_topic, ThreadLabel::Topic).as_str(),
            "agent:main:telegram:group:-100:topic:7"
        );
    }

    #[test]
    fn ids_cannot_forge_the_shape_of_another_key() {
        let sneaky = message(ChatKind::Direct, "1", "x:group:y", None);
        assert_eq!(key(DmScope::PerPeer, &sneaky), "agent:main:direct:x%3agroup%3ay");
        let spaced = message(ChatKind::Group, "a b%", "u", None);
        assert_eq!(key(DmScope::Main, &spaced), "agent:main:telegram:group:a%20b%25");
        let empty = message(ChatKind::Direct, "1", "", None);
        assert_eq!(key(DmScope::PerPeer, &empty), "agent:main:direct:%");
    }

    #[test]
    fn thread_labels_default_to_thread_for_unlisted_channels() {
        let labels = ThreadLabels::new().with("telegram", ThreadLabel::Topic);
        assert_eq!(labels.for_channel("telegram"), ThreadLabel::Topic);
        assert_eq!(labels.for_channel("slack"), ThreadLabel::Thread);
    }

    const SCOPES: [DmScope; 4] =
        [DmScope::Main, DmScope::PerPeer, DmScope::PerChannelPeer, DmScope::PerAccountChannelPeer];

    /// Ids as platforms send them, plus the characters that structure a key.
    fn id() -> impl Strategy<Value = String> {
        prop_oneof!["[A-Za-z0-9_.-]{1,12}", "[A-Za-z0-9:% \t_.-]{0,12}", any::<String>(),]
    }

    fn scope() -> impl Strategy<Value = DmScope> {
        proptest::sample::select(SCOPES.to_vec())
    }

    fn kind() -> impl Strategy<Value = ChatKind> {
        proptest::sample::select(vec![ChatKind::Direct, ChatKind::Group, ChatKind::Channel])
    }

    fn label() -> impl Strategy<Value = ThreadLabel> {
        proptest::sample::select(vec![ThreadLabel::Thread, ThreadLabel::Topic])
    }

    fn arbitrary_message() -> impl Strategy<Value = InboundMessage> {
        (id(), id(), kind(), id(), id(), proptest::option::of(id())).prop_map(
            |(channel, account, kind, chat, peer, thread)| InboundMessage {
                channel,
                account_id: account,
                thread_id: thread,
                ..message(kind, &chat, &peer, None)
            },
        )
    }

    fn lowercase(text: &str) -> String {
        text.chars().flat_map(char::to_lowercase).collect()
    }

    proptest! {
        #[test]
        fn keys_are_lowercase_deterministic_and_have_no_blank_parts(
            agent in id(), scope in scope(), label in label(), message in arbitrary_message()
        ) {
            let first = session_key(&agent, scope, &message, label);
            let second = session_key(&agent, scope, &message, label);
            prop_assert_eq!(&first, &second);
            let text = first.as_str();
            prop_assert_eq!(text, text.to_lowercase());
            prop_assert!(text.starts_with("agent:"));
            prop_assert!(!text.chars().any(char::is_whitespace), "{text:?}");
            prop_assert!(text.split(':').all(|part| !part.trim().is_empty()), "{text:?}");
        }

        #[test]
        fn dm_keys_never_collide_with_group_or_channel_keys(
            agent in id(), scope in scope(), label in label(),
            dm in arbitrary_message(), group in arbitrary_message(), group_kind in prop_oneof![Just(ChatKind::Group), Just(ChatKind::Channel)],
        ) {
            let dm = InboundMessage { chat: ChatRef::new(ChatKind::Direct, dm.chat.id.clone()), ..dm };
            let group = InboundMessage { chat: ChatRef::new(group_kind, group.chat.id.clone()), ..group };
            prop_assert_ne!(session_key(&agent, scope, &dm, label), session_key(&agent, scope, &group, label));
        }

        #[test]
        fn different_peers_never_share_a_per_peer_key(
            agent in id(), scope in proptest::sample::select(SCOPES[1..].to_vec()), label in label(),
            message in arbitrary_message(), first_peer in id(), second_peer in id(),
        ) {
            prop_assume!(lowercase(&first_peer) != lowercase(&second_peer));
            let direct = |peer: &str| InboundMessage {
                chat: ChatRef::new(ChatKind::Direct, message.chat.id.clone()),
                sender: Sender::user(peer),
                ..message.clone()
            };
            prop_assert_ne!(
                session_key(&agent, scope, &direct(&first_peer), label),
                session_key(&agent, scope, &direct(&second_peer), label)
            );
        }

        #[test]
        fn different_groups_never_share_a_key(
            agent in id(), scope in scope(), label in label(), message in arbitrary_message(),
            first in id(), second in id(),
        ) {
            prop_assume!(message.chat.kind != ChatKind::Direct && lowercase(&first) != lowercase(&second));
            let in_chat = |chat: &str| InboundMessage { chat: ChatRef::new(message.chat.kind, chat), ..message.clone() };
            prop_assert_ne!(
                session_key(&agent, scope, &in_chat(&first), label),
                session_key(&agent, scope, &in_chat(&second), label)
            );
        }

        #[test]
        fn thread_keys_extend_their_parent_key(
            agent in id(), scope in scope(), label in label(), message in arbitrary_message(), thread in id(),
        ) {
            let parent = session_key(&agent, scope, &InboundMessage { thread_id: None, ..message.clone() }, label);
            let child = session_key(&agent, scope, &InboundMessage { thread_id: Some(thread), ..message }, label);
            let prefix = format!("{parent}:{}:", label.as_str());
            prop_assert!(child.as_str().starts_with(&prefix), "{child} does not extend {parent}");
            prop_assert!(child.as_str().len() > prefix.len());
        }
    }

    #[test]
    fn written_keys_are_parsed_lowercased_and_checked() {
        let key = SessionKey::parse(" Agent:Main:WebChat:direct:Ada ").unwrap();
        assert_eq!(key.as_str(), "agent:main:webchat:direct:ada");
        assert_eq!(key.agent_id(), "main");
        for bad in ["", "main", "agent:main", "agent::x", "agent:main:a b", "session:main:x", "agent:main:x\u{7}"] {
            assert!(SessionKey::parse(bad).is_err(), "{bad:?}");
        }
        assert!(SessionKey::parse(&format!("agent:main:{}", "x".repeat(600))).is_err());
    }
}
