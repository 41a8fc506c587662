//! The router end to end on a real state database: pairing, DM and group policies, mention
//! gating with held history, bots, redeliveries (also across a restart) and session keys.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use chrono::{DateTime, TimeDelta, Utc};
use ferry::channel::{ChatKind, ChatRef, InboundMessage, Sender};
use ferry::config::{AgentSettings, BindingConfig, BindingMatch, Config, DmPolicy, DmScope, GroupConfig, GroupPolicy};
use ferry::routing::{
    DenyReason, IgnoreReason, ManualClock, PairingStore, RouteDecision, Router, ThreadLabel, ThreadLabels,
};
use ferry::state::{Database, Stores};

static NEXT_MESSAGE_ID: AtomicU64 = AtomicU64::new(1);

fn start() -> DateTime<Utc> {
    DateTime::from_timestamp(1_750_000_000, 0).expect("valid time")
}

fn message(channel: &str, kind: ChatKind, chat: &str, sender: &str, text: &str) -> InboundMessage {
    let id = NEXT_MESSAGE_ID.fetch_add(1, Ordering::Relaxed).to_string();
    InboundMessage::new(channel, "default", ChatRef::new(kind, chat), Sender::user(sender), id, text)
}

fn dm(channel: &str, sender: &str, text: &str) -> InboundMessage {
    message(channel, ChatKind::Direct, sender, sender, text)
}

fn group(chat: &str, sender: &str, text: &str) -> InboundMessage {
    message("telegram", ChatKind::Group, chat, sender, text)
}

/// A router on a fresh state directory, with a clock the test moves.
struct Harness {
    dir: tempfile::TempDir,
    database: Database,
    clock: ManualClock,
    router: Router,
}

impl Harness {
    async fn new(edit: impl FnOnce(&mut Config)) -> Self {
        let mut config = Config::default();
        edit(&mut config);
        let dir = tempfile::tempdir().expect("temp dir");
        let database = Database::open(dir.path()).await.expect("open state");
        let clock = ManualClock::new(start());
        let router = Router::new(&config, &Stores::sqlite(&database), Arc::new(clock.clone())).expect("router");
        Self { dir, database, clock, router }
    }

    async fn route(&self, message: &InboundMessage) -> RouteDecision {
        self.router.route(message).await.expect("routing succeeds")
    }

    fn pairing(&self) -> PairingStore {
        PairingStore::new(Stores::sqlite(&self.database).pairing, Arc::new(self.clock.clone()))
    }
}

fn run(decision: RouteDecision) -> (String, String, bool) {
    match decision {
        RouteDecision::Run { session_key, prompt, is_group } => (session_key.into_string(), prompt, is_group),
        other => panic!("expected a run, got {other:?}"),
    }
}

fn pairing_reply(decision: RouteDecision) -> String {
    match decision {
        RouteDecision::Pairing { reply } => reply,
        other => panic!("expected a pairing reply, got {other:?}"),
    }
}

#[tokio::test]
async fn an_unknown_dm_sender_gets_a_code_and_runs_once_approved() {
    let harness = Harness::new(|_| {}).await;
    let reply = pairing_reply(harness.route(&dm("telegram", "42", "hello?")).await);
    let pending = harness.pairing().list().await.unwrap();
    assert_eq!(pending.len(), 1);
    let code = &pending[0].code;
    assert!(reply.contains(code.as_str()), "{reply}");
    assert!(reply.contains(&format!("ferry pairing approve telegram {code}")), "{reply}");

    // Asking again gives the same code, not a new one.
    assert_eq!(pairing_reply(harness.route(&dm("telegram", "42", "please?")).await), reply);

    harness.clock.advance(TimeDelta::minutes(10));
    harness.pairing().approve("telegram", code).await.unwrap();
    let (key, prompt, is_group) = run(harness.route(&dm("telegram", "42", "hi again")).await);
    assert_eq!((key.as_str(), prompt.as_str(), is_group), ("agent:main:telegram:direct:42", "hi again", false));
    // Approval is per channel.
    pairing_reply(harness.route(&dm("discord", "42", "hi")).await);
}

#[tokio::test]
async fn a_fourth_unknown_sender_is_told_to_try_later() {
    let harness = Harness::new(|_| {}).await;
    for sender in ["1", "2", "3"] {
        pairing_reply(harness.route(&dm("slack", sender, "hi")).await);
    }
    match harness.route(&dm("slack", "4", "hi")).await {
        RouteDecision::Denied { reason: DenyReason::PairingBusy, reply: Some(reply) } => {
            assert!(reply.contains("try again later"), "{reply}")
        }
        other => panic!("expected a try-later denial, got {other:?}"),
    }
}

#[tokio::test]
async fn allowlisted_open_and_disabled_dms() {
    let harness = Harness::new(|config| {
        let channels = &mut config.channels;
        channels.telegram.dm_policy = DmPolicy::Allowlist;
        channels.telegram.allow_from = vec!["42".into()];
        channels.discord.dm_policy = DmPolicy::Open;
        channels.discord.allow_from = vec!["*".into()];
        channels.slack.dm_policy = DmPolicy::Disabled;
    })
    .await;
    run(harness.route(&dm("telegram", "42", "hi")).await);
    assert_eq!(
        harness.route(&dm("telegram", "7", "hi")).await,
        RouteDecision::Denied { reason: DenyReason::SenderNotAllowed, reply: None }
    );
    run(harness.route(&dm("discord", "anyone", "hi")).await);
    assert_eq!(
        harness.route(&dm("slack", "U1", "hi")).await,
        RouteDecision::Denied { reason: DenyReason::DmsDisabled, reply: None }
    );
    run(harness.route(&dm("webchat", "browser", "hi")).await);
    assert!(harness.pairing().list().await.unwrap().is_empty(), "no code is issued outside pairing");
}

#[tokio::test]
async fn allowlisted_groups_hold_unmentioned_messages_and_show_them_with_the_next_mention() {
    let harness = Harness::new(|config| {
        let telegram = &mut config.channels.telegram;
        telegram.groups.insert("-100".into(), GroupConfig::default());
        telegram.groups.insert("-200".into(), GroupConfig { require_mention: Some(false), ..Default::default() });
        telegram.mention_patterns = vec![r"\bferry\b".into()];
    })
    .await;
    assert_eq!(
        harness.route(&group("-999", "1", "hi")).await,
        RouteDecision::Denied { reason: DenyReason::GroupNotAllowed, reply: None }
    );

    let mut first = group("-100", "1", "the deploy failed");
    first.sender.name = Some("Alice".into());
    let not_mentioned = RouteDecision::Ignored(IgnoreReason::NotMentioned);
    assert_eq!(harness.route(&first).await, not_mentioned);
    assert_eq!(harness.route(&first).await, RouteDecision::Duplicate, "a redelivery is not held twice");
    assert_eq!(harness.route(&group("-100", "2", "again?")).await, not_mentioned);

    let mut mention = group("-100", "1", "@ferry_bot what happened?");
    mention.sender.name = Some("Alice".into());
    mention.mentions_bot = true;
    let (key, prompt, is_group) = run(harness.route(&mention).await);
    assert_eq!(harness.route(&mention).await, RouteDecision::Duplicate);
    assert_eq!(key, "agent:main:telegram:group:-100");
    assert!(is_group);
    assert_eq!(
        prompt,
        "[Chat messages since your last reply - for context]\n\
         Alice: the deploy failed\n\
         2: again?\n\
         [Current message - respond to this]\n\
         Alice: @ferry_bot what happened?"
    );

    // The history was used up; a pattern match triggers too.
    let (_, prompt, _) = run(harness.route(&group("-100", "2", "Ferry, thanks")).await);
    assert_eq!(prompt, "Ferry, thanks");

    // A group that does not require a mention runs everything.
    let (key, prompt, _) = run(harness.route(&group("-200", "3", "status?")).await);
    assert_eq!((key.as_str(), prompt.as_str()), ("agent:main:telegram:group:-200", "status?"));
}

#[tokio::test]
async fn open_and_disabled_group_policies() {
    let harness = Harness::new(|config| {
        config.channels.slack.group_policy = GroupPolicy::Open;
        config.channels.slack.require_mention = false;
        config.channels.discord.group_policy = GroupPolicy::Disabled;
    })
    .await;
    let (key, _, _) = run(harness.route(&message("slack", ChatKind::Channel, "C0ABC", "U1", "hi")).await);
    assert_eq!(key, "agent:main:slack:channel:c0abc");
    assert_eq!(
        harness.route(&message("discord", ChatKind::Channel, "123", "u", "hi")).await,
        RouteDecision::Denied { reason: DenyReason::GroupsDisabled, reply: None }
    );
}

#[tokio::test]
async fn bots_are_ignored_unless_allowed_and_before_access_is_checked() {
    let harness = Harness::new(|config| {
        config.channels.discord.allow_bots = true;
        config.channels.discord.dm_policy = DmPolicy::Open;
        config.channels.discord.allow_from = vec!["*".into()];
    })
    .await;
    let mut from_bot = dm("telegram", "99", "beep");
    from_bot.sender.is_bot = true;
    assert_eq!(harness.route(&from_bot).await, RouteDecision::Ignored(IgnoreReason::FromBot));
    assert!(harness.pairing().list().await.unwrap().is_empty(), "a bot never gets a pairing code");

    let mut allowed_bot = dm("discord", "98", "boop");
    allowed_bot.sender.is_bot = true;
    run(harness.route(&allowed_bot).await);
}

#[tokio::test]
async fn a_redelivered_message_runs_once_even_after_reopening_the_database() {
    let harness = Harness::new(|config| {
        config.channels.telegram.dm_policy = DmPolicy::Open;
        config.channels.telegram.allow_from = vec!["*".into()];
    })
    .await;
    let hello = dm("telegram", "42", "hello");
    run(harness.route(&hello).await);
    assert_eq!(harness.route(&hello).await, RouteDecision::Duplicate);

    let Harness { dir, database, clock, router } = harness;
    drop(router);
    database.close().await;
    let reopened = Database::open(dir.path()).await.unwrap();
    let mut config = Config::default();
    config.channels.telegram.dm_policy = DmPolicy::Open;
    config.channels.telegram.allow_from = vec!["*".into()];
    let router = Router::new(&config, &Stores::sqlite(&reopened), Arc::new(clock.clone())).unwrap();
    assert_eq!(router.route(&hello).await.unwrap(), RouteDecision::Duplicate);

    clock.advance(TimeDelta::minutes(21));
    assert!(matches!(router.route(&hello).await.unwrap(), RouteDecision::Run { .. }), "forgotten after 20 min");
}

#[tokio::test]
async fn dedupe_comes_before_access_and_pairing() {
    let harness = Harness::new(|_| {}).await;
    let stranger = dm("slack", "U9", "hi");
    pairing_reply(harness.route(&stranger).await);
    assert_eq!(harness.route(&stranger).await, RouteDecision::Duplicate);
    let denied = group("-1", "1", "hi");
    assert!(matches!(harness.route(&denied).await, RouteDecision::Denied { .. }));
    assert_eq!(harness.route(&denied).await, RouteDecision::Duplicate);
}

#[tokio::test]
async fn session_keys_follow_dm_scope_and_thread_labels() {
    let harness = Harness::new(|config| {
        config.session.dm_scope = DmScope::PerAccountChannelPeer;
        config.channels.telegram.dm_policy = DmPolicy::Open;
        config.channels.telegram.allow_from = vec!["*".into()];
        config.channels.telegram.group_policy = GroupPolicy::Open;
        config.channels.telegram.require_mention = false;
    })
    .await;
    let Harness { dir: _dir, database, clock, router } = harness;
    let router = router.with_thread_labels(ThreadLabels::new().with("telegram", ThreadLabel::Topic));

    let (key, _, _) = run(router.route(&dm("telegram", "Peer42", "hi")).await.unwrap());
    assert_eq!(key, "agent:main:telegram:default:direct:peer42");

    let mut in_topic = group("-100", "1", "hi");
    in_topic.thread_id = Some("7".into());
    let (key, _, _) = run(router.route(&in_topic).await.unwrap());
    assert_eq!(key, "agent:main:telegram:group:-100:topic:7");

    // Several agents: the default one answers unless a binding routes the chat elsewhere.
    let mut config = Config::default();
    config.agents.list.insert("helper".into(), AgentSettings { default: true, ..AgentSettings::default() });
    config.agents.list.insert("support".into(), AgentSettings::default());
    let matches = BindingMatch { channel: Some("webchat".into()), peer: Some("tab-2".into()), ..Default::default() };
    config.bindings.push(BindingConfig { agent: "support".into(), matches });
    let agents = Router::new(&config, &Stores::sqlite(&database), Arc::new(clock)).unwrap();
    let (key, _, _) = run(agents.route(&dm("webchat", "tab-1", "hi")).await.unwrap());
    assert_eq!(key, "agent:helper:webchat:direct:tab-1", "by default each DM peer is a session of its own");
    let (key, _, _) = run(agents.route(&dm("webchat", "tab-2", "hi")).await.unwrap());
    assert_eq!(key, "agent:support:webchat:direct:tab-2", "a bound chat is a session of its agent");
}

#[tokio::test]
async fn a_message_whose_routing_failed_is_routed_again_when_redelivered() {
    let harness = Harness::new(|_| {}).await;
    // Break the pairing store so routing an unknown sender fails after dedupe recorded it.
    harness.database.with_connection(|c| c.execute_batch("DROP TABLE pairing_requests")).unwrap();
    let stranger = dm("telegram", "42", "hi");
    assert!(harness.router.route(&stranger).await.is_err());
    let again = harness.router.route(&stranger).await;
    assert!(again.is_err(), "the redelivery must be routed again, not dropped: {again:?}");
}

#[tokio::test]
async fn a_message_over_the_inbound_limit_is_refused_and_never_held_as_context() {
    let harness = Harness::new(|config| {
        config.messages.max_inbound_chars = 10;
        config.channels.telegram.dm_policy = DmPolicy::Open;
        config.channels.telegram.groups.insert("-100".into(), GroupConfig::default());
    })
    .await;
    let too_long = RouteDecision::TooLong { chars: 11, limit: 10 };
    assert_eq!(harness.route(&dm("telegram", "7", "ééééééééééé")).await, too_long, "counted in characters");
    assert!(matches!(harness.route(&dm("telegram", "7", "éééééééééé")).await, RouteDecision::Run { .. }));

    // Not addressed to the bot: ignored like any other, and not kept for the next mention.
    let chatter = group("-100", "1", "a very long aside");
    assert_eq!(harness.route(&chatter).await, RouteDecision::Ignored(IgnoreReason::NotMentioned));
    let mut mention = group("-100", "1", "@ferry hi");
    mention.mentions_bot = true;
    let (_, prompt, _) = run(harness.route(&mention).await);
    assert_eq!(prompt, "@ferry hi", "the oversized aside was not held");
    let mut long_mention = group("-100", "1", "@ferry_bot and more");
    long_mention.mentions_bot = true;
    assert_eq!(harness.route(&long_mention).await, RouteDecision::TooLong { chars: 19, limit: 10 });
}
