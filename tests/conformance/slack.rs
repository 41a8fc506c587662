//! Slack in the conformance suite: [`FakeSlack`] in Socket Mode. A mention in a channel
//! arrives as Slack sends it when the app subscribes to both: a `message` and an
//! `app_mention` event for the same `ts`.

use std::sync::atomic::{AtomicU64, Ordering};

use ferry_fakes::{FakeSlack, PostedMessage};

use super::{Platform, Shown};
use crate::daemon::PATIENCE;

pub struct Slack {
    fake: FakeSlack,
    /// Sockets seen by the last [`Platform::connected`], so a restart waits for a new one.
    sockets_seen: AtomicU64,
}

pub fn dm_channel(user: u64) -> String {
    format!("DU{user}")
}

fn channel(group: u64) -> String {
    format!("C{group}")
}

/// What a Slack client shows for mrkdwn text: the three escaped characters decoded. A reply
/// "to" a message is one posted in the thread under it.
fn shown(messages: Vec<PostedMessage>) -> Vec<Shown> {
    messages
        .into_iter()
        .map(|m| Shown {
            message_id: m.ts.clone(),
            visible: m.text.replace("&lt;", "<").replace("&gt;", ">").replace("&amp;", "&"),
            raw: m.text,
            reply_to: m.thread_ts,
            edits: m.edits,
            files: m.files.len(),
        })
        .collect()
}

impl Slack {
    /// The fake itself, for faults beyond the suite's (the chaos test).
    #[allow(dead_code, reason = "used by tests/chaos.rs, which includes the suite")]
    pub fn fake(&self) -> &FakeSlack {
        &self.fake
    }
}

impl Platform for Slack {
    const NAME: &'static str = "slack";
    // `text_chunk_limit` defaults to 4000, under chat.postMessage's 40,000.
    const MAX_CHARS: usize = 4000;
    const MAX_LINES: Option<usize> = None;
    // SPEC §7: `[[reply_to_current]]` is ignored on Slack; top-level stays top-level.
    const HONOURS_REPLY_TAG: bool = false;

    async fn start() -> Self {
        Self { fake: FakeSlack::start().await.expect("fake Slack"), sockets_seen: AtomicU64::new(0) }
    }

    async fn start_second() -> Self {
        let fake = FakeSlack::start_with_tokens("xoxb-ferry-second", "xapp-ferry-second").await.expect("fake Slack");
        Self { fake, sockets_seen: AtomicU64::new(0) }
    }

    fn channel_config(&self) -> String {
        format!(
            "enabled = true\nbot_token = \"{}\"\napp_token = \"{}\"\napi_url = \"{}\"",
            self.fake.bot_token(),
            self.fake.app_token(),
            self.fake.api_url()
        )
    }

    async fn connected(&self) {
        // Socket Mode: a new socket that got `hello` means the adapter is receiving.
        let seen = self.sockets_seen.load(Ordering::SeqCst);
        self.fake.wait_for_connections(seen + 1).await;
        self.sockets_seen.store(self.fake.connections().0, Ordering::SeqCst);
    }

    async fn dm(&self, user: u64, text: &str) -> String {
        self.fake.dm(&format!("U{user}"), text).ts
    }

    async fn group(&self, group: u64, user: u64, text: &str, mention: bool) {
        let user = format!("U{user}");
        if mention {
            self.fake.mention(&channel(group), &user, text);
        } else {
            self.fake.channel_message(&channel(group), &user, text);
        }
    }

    async fn taken(&self) {
        tokio::time::timeout(PATIENCE, self.fake.wait_for_all_acked()).await.expect("envelopes acknowledged");
    }

    fn dm_messages(&self, user: u64) -> Vec<Shown> {
        shown(self.fake.messages_in(&dm_channel(user)))
    }

    fn group_messages(&self, group: u64) -> Vec<Shown> {
        shown(self.fake.messages_in(&channel(group)))
    }

    fn rate_limit_storm(&self, _user: u64) {
        // 429 with Retry-After: 1 on chat.postMessage, twice in a row (the third attempt
        // goes through).
        self.fake.rate_limit_next("chat.postMessage", 2, 1);
    }

    fn rate_limited_count(&self) -> usize {
        self.fake.rate_limited_count()
    }

    fn fences_balanced(raw: &str) -> bool {
        raw.matches("```").count().is_multiple_of(2)
    }
}
