//! Telegram in the conformance suite: [`FakeTelegram`] with its flood limits on.

use ferry_fakes::{FakeTelegram, TgUser};

use super::{Platform, Shown};
use crate::daemon::PATIENCE;

const TOKEN: &str = "123456:TEST-token";

pub struct Telegram {
    fake: FakeTelegram,
}

/// Groups are supergroups: `-100…` ids.
fn group_id(group: u64) -> i64 {
    -(1_000_000_000_000 + group as i64)
}

fn shown(messages: Vec<ferry_fakes::SentMessage>) -> Vec<Shown> {
    messages
        .into_iter()
        .map(|m| Shown {
            message_id: m.message_id.to_string(),
            raw: m.text,
            visible: m.visible_text,
            reply_to: m.reply_to.map(|id| id.to_string()),
            edits: m.edits,
            files: usize::from(m.media.is_some()),
        })
        .collect()
}

impl Telegram {
    /// The fake itself, for faults beyond the suite's (the chaos test).
    #[allow(dead_code, reason = "used by tests/chaos.rs, which includes the suite")]
    pub fn fake(&self) -> &FakeTelegram {
        &self.fake
    }
}

impl Platform for Telegram {
    const NAME: &'static str = "telegram";
    // `text_chunk_limit` defaults to 4000, under the platform's 4096.
    const MAX_CHARS: usize = 4000;
    const MAX_LINES: Option<usize> = None;

    async fn start() -> Self {
        Self { fake: FakeTelegram::start(TOKEN).await.expect("fake Telegram") }
    }

    async fn start_second() -> Self {
        Self { fake: FakeTelegram::start("654321:SECOND-token").await.expect("fake Telegram") }
    }

    fn channel_config(&self) -> String {
        format!("enabled = true\nbot_token = \"{}\"\napi_url = \"{}\"", self.fake.token(), self.fake.url())
    }

    async fn connected(&self) {
        // Long polling: the first getUpdates means the adapter is receiving.
        self.fake.wait_for_arrivals("getUpdates", 1).await;
    }

    async fn dm(&self, user: u64, text: &str) -> String {
        // Message ids count up per chat from 1.
        let id = self.fake.next_message_id(user as i64).unwrap_or(1);
        self.fake.private_message(user as i64, "Ada", text);
        id.to_string()
    }

    async fn group(&self, group: u64, user: u64, text: &str, mention: bool) {
        self.fake.group_message(group_id(group), TgUser::new(user as i64, "Bea"), text, mention);
    }

    async fn taken(&self) {
        let offset = self.fake.current_offset() + self.fake.pending_updates() as i64;
        tokio::time::timeout(PATIENCE, self.fake.wait_for_offset(offset)).await.expect("updates confirmed");
    }

    fn dm_messages(&self, user: u64) -> Vec<Shown> {
        shown(self.fake.messages_in(user as i64))
    }

    fn group_messages(&self, group: u64) -> Vec<Shown> {
        shown(self.fake.messages_in(group_id(group)))
    }

    fn rate_limit_storm(&self, _user: u64) {
        // Flood control on sendMessage, twice in a row (the third attempt goes through).
        self.fake.fail_next_with_retry_after("sendMessage", 1);
        self.fake.fail_next_with_retry_after("sendMessage", 1);
    }

    fn rate_limited_count(&self) -> usize {
        self.fake.rate_limited_count()
    }

    fn fences_balanced(raw: &str) -> bool {
        raw.matches("<pre").count() == raw.matches("</pre>").count()
    }
}
