//! Whose memory a conversation works in: the one rule that keeps a person's memory out of
//! every other conversation.
//!
//! | conversation | scope |
//! |---|---|
//! | DM (any `dm_scope` but `per-peer`) | `private:<channel>:<peer>` |
//! | DM, `dm_scope = "per-peer"` | `private:<peer>` |
//! | group or channel, and any thread in it | `shared:<channel>:<chat>` |
//! | the heartbeat, or a DM whose sender is unknown | none: memory is not offered |
//!
//! A DM under `dm_scope = "main"` shares one session between everyone who writes, but not
//! their memory: it stays per person. The parts are written as in session keys (lowercase,
//! `:` and `%` percent-encoded), so no id can forge another scope. A scheduled run is
//! journaled as a message from the job's owner to the job's chat, so it gets the job's
//! scope from the same rule.

use ferry_channel::{ChatKind, InboundMessage};

use crate::config::DmScope;
use crate::routing::session_key::push_part;

/// The memory scope of `message`'s conversation, `None` if it has no person or chat to
/// belong to (memory is then not offered, never shared by default).
pub fn scope_of(message: &InboundMessage, dm_scope: DmScope) -> Option<String> {
    if message
        .request
        .as_ref()
        .and_then(|request| request.scheduled.as_ref())
        .is_some_and(|fire| fire.kind == "heartbeat")
    {
        return None;
    }
    let mut scope = String::new();
    match message.chat.kind {
        ChatKind::Direct => {
            let peer = message.sender.id.trim();
            if peer.is_empty() {
                return None;
            }
            scope.push_str("private:");
            if dm_scope != DmScope::PerPeer {
                push_part(&mut scope, &message.channel);
                scope.push(':');
            }
            push_part(&mut scope, peer);
        }
        ChatKind::Group | ChatKind::Channel => {
            if message.chat.id.trim().is_empty() {
                return None;
            }
            scope.push_str("shared:");
            push_part(&mut scope, &message.channel);
            scope.push(':');
            push_part(&mut scope, &message.chat.id);
        }
    }
    Some(scope)
}

/// Whether `scope` is one person's: `MEMORY.md` and recall only ever reach those.
pub fn is_private(scope: &str) -> bool {
    scope.starts_with("private:")
}

#[cfg(test)]
mod tests {
    use ferry_channel::{ChatRef, ClientRequest, ScheduledFire, Sender};

    use super::*;

    fn message(kind: ChatKind, chat: &str, peer: &str) -> InboundMessage {
        InboundMessage::new("Telegram", "bot1", ChatRef::new(kind, chat), Sender::user(peer), "1", "hi")
    }

    const EVERY_DM_SCOPE: [DmScope; 4] =
        [DmScope::Main, DmScope::PerPeer, DmScope::PerChannelPeer, DmScope::PerAccountChannelPeer];

    #[test]
    fn a_dm_is_its_person_s_under_every_dm_scope() {
        let dm = message(ChatKind::Direct, "42", "42");
        for dm_scope in EVERY_DM_SCOPE {
            let wanted = if dm_scope == DmScope::PerPeer { "private:42" } else { "private:telegram:42" };
            assert_eq!(scope_of(&dm, dm_scope).as_deref(), Some(wanted), "{dm_scope:?}");
            let other = message(ChatKind::Direct, "43", "43");
            assert_ne!(scope_of(&other, dm_scope), scope_of(&dm, dm_scope), "{dm_scope:?}: two people, two scopes");
        }
    }

    #[test]
    fn a_group_channel_or_thread_shares_the_chat_s_scope_whoever_writes() {
        for dm_scope in EVERY_DM_SCOPE {
            let group = message(ChatKind::Group, "-100", "42");
            assert_eq!(scope_of(&group, dm_scope).as_deref(), Some("shared:telegram:-100"));
            let other_sender = message(ChatKind::Group, "-100", "43");
            assert_eq!(scope_of(&other_sender, dm_scope), scope_of(&group, dm_scope));
            let mut threaded = message(ChatKind::Channel, "C01", "42");
            threaded.thread_id = Some("171.2".into());
            assert_eq!(scope_of(&threaded, dm_scope).as_deref(), Some("shared:telegram:c01"));
            assert!(!is_private("shared:telegram:c01"));
        }
    }

    #[test]
    fn an_id_cannot_forge_another_scope() {
        let forged = message(ChatKind::Direct, "x", "telegram:42");
        let scope = scope_of(&forged, DmScope::PerPeer).unwrap();
        assert_eq!(scope, "private:telegram%3a42");
        assert_ne!(Some(scope), scope_of(&message(ChatKind::Direct, "42", "42"), DmScope::PerChannelPeer));
        assert_eq!(scope_of(&message(ChatKind::Direct, "x", " "), DmScope::Main), None, "no person, no memory");
        assert_eq!(scope_of(&message(ChatKind::Group, "", "42"), DmScope::Main), None);
    }

    #[test]
    fn a_scheduled_run_has_its_job_s_scope_and_the_heartbeat_none() {
        let fire = |kind: &str| {
            let mut fired = message(ChatKind::Direct, "42", "42");
            fired.request = Some(ClientRequest {
                scheduled: Some(ScheduledFire { job_id: "j".into(), slot_ms: 1, kind: kind.into(), name: "n".into() }),
                ..ClientRequest::default()
            });
            fired
        };
        assert_eq!(scope_of(&fire("task"), DmScope::PerChannelPeer).as_deref(), Some("private:telegram:42"));
        assert_eq!(scope_of(&fire("heartbeat"), DmScope::PerChannelPeer), None);
    }
}
