//! Discord in the conformance suite: [`FakeDiscord`] with its per-channel limit on.

use std::time::Duration;

use ferry_fakes::{DiscordUser, FakeDiscord, Mention};

use super::{Platform, Shown};

const TOKEN: &str = "fake.discord.token";
const GUILD: u64 = 1;

pub struct Discord {
    fake: FakeDiscord,
}

fn shown(messages: Vec<ferry_fakes::DiscordSentMessage>) -> Vec<Shown> {
    messages
        .into_iter()
        .map(|m| Shown {
            message_id: m.message_id.to_string(),
            visible: m.content.clone(),
            raw: m.content,
            reply_to: m.reply_to.map(|id| id.to_string()),
            edits: m.edits,
            files: m.attachments.len(),
        })
        .collect()
}

impl Discord {
    /// The fake itself, for faults beyond the suite's (the chaos test).
    #[allow(dead_code, reason = "used by tests/chaos.rs, which includes the suite")]
    pub fn fake(&self) -> &FakeDiscord {
        &self.fake
    }
}

impl Platform for Discord {
    const NAME: &'static str = "discord";
    const MAX_CHARS: usize = 2000;
    const MAX_LINES: Option<usize> = Some(17);

    async fn start() -> Self {
        Self { fake: FakeDiscord::start(TOKEN).await.expect("fake Discord") }
    }

    async fn start_second() -> Self {
        Self { fake: FakeDiscord::start("fake.discord.second").await.expect("fake Discord") }
    }

    fn channel_config(&self) -> String {
        format!("enabled = true\nbot_token = \"{}\"\napi_url = \"{}\"", self.fake.token(), self.fake.url())
    }

    async fn connected(&self) {
        self.fake.wait_for_session().await;
    }

    async fn dm(&self, user: u64, text: &str) -> String {
        self.fake.dm(&DiscordUser::new(user, "ada"), text).1.to_string()
    }

    async fn group(&self, group: u64, user: u64, text: &str, mention: bool) {
        let mention = if mention { Mention::Plain } else { Mention::None };
        self.fake.guild_message(GUILD, group, &DiscordUser::new(user, "bea"), text, mention);
    }

    async fn taken(&self) {
        // Discord confirms nothing: `Harness::taken` waits on the gateway's own count.
    }

    fn dm_messages(&self, user: u64) -> Vec<Shown> {
        shown(self.fake.messages_in(self.fake.dm_channel(user)))
    }

    fn group_messages(&self, group: u64) -> Vec<Shown> {
        shown(self.fake.messages_in(group))
    }

    fn rate_limit_storm(&self, user: u64) {
        // Every message call to the DM is refused for 1.5 s, each 429 announcing a 1 s retry_after.
        self.fake.rate_limit_storm(self.fake.dm_channel(user), Duration::from_millis(1500));
    }

    fn rate_limited_count(&self) -> usize {
        self.fake.rate_limited_count()
    }

    fn fences_balanced(raw: &str) -> bool {
        raw.lines().filter(|line| line.trim_start().starts_with("```")).count() % 2 == 0
    }
}
