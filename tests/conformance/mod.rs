//! The conformance suite: the channel-independent behaviour every chat adapter must show,
//! end to end — the real `ferry gateway` binary, the adapter, and the platform's fake.
//!
//! A platform joins the suite by implementing [`Platform`] over its fake and adding one line
//! to `tests/conformance.rs`:
//!
//! ```ignore
//! conformance_suite!(slack, crate::conformance::slack::Slack);
//! ```
//!
//! which instantiates every scenario below as a `#[tokio::test]` in a module named after the
//! platform (`cargo nextest run --test conformance slack::`).
//!
//! What an implementation provides, all in terms of the platform's fake:
//! - [`Platform::NAME`] (the `[channels.NAME]` table and the `/healthz` name), the limits a
//!   reply must be cut to ([`Platform::MAX_CHARS`], [`Platform::MAX_LINES`]) and how to tell
//!   a cut-up code block from an intact one in the raw text it sent
//!   ([`Platform::fences_balanced`]);
//! - [`Platform::start`]: start the fake; [`Platform::channel_config`]: the keys that point
//!   the adapter at it (enabled, token, URL overrides) — the suite adds the access keys
//!   (`dm_policy`, `group_policy`, …) to the same table;
//! - [`Platform::connected`]: wait until the adapter is receiving (a gateway session, a
//!   socket) after `/healthz` lists the channel;
//! - input: [`Platform::dm`] (a direct message from user `user`; returns its message id),
//!   [`Platform::group`] (a
//!   message in group/channel `group`, with or without a native mention of the bot), and
//!   [`Platform::taken`] (wait until the adapter has taken everything injected so far, where
//!   the platform can tell; a no-op where delivery order already guarantees it);
//! - output: [`Platform::dm_messages`] / [`Platform::group_messages`] — the bot's messages
//!   that still exist in that chat, in order ([`Shown`]: raw and as a user sees them, the
//!   message each replies to, how often it was edited);
//! - faults: [`Platform::rate_limit_storm`] (the next sends to user's DM are answered 429 with
//!   a `retry_after`, at most twice in a row: the core tries a send three times) and
//!   [`Platform::rate_limited_count`].
//!
//! Users and groups are small numbers; each platform maps them to ids of its own kind.
//! Scenarios never sleep to let things settle: "nothing else was sent" is proven by a later
//! message's answer arriving behind it (sends to one chat are FIFO).

pub mod accounts;
pub mod delivery;
pub mod discord;
pub mod exec;
pub mod memory;
pub mod scheduled;
pub mod slack;
pub mod telegram;
pub mod web_fetch;

pub use delivery::*;
pub use exec::*;
pub use web_fetch::*;

use std::future::Future;
use std::time::Duration;

use ferry_fakes::{FakeOpenAi, RecordedRequest, Reply, Turn};
use serde_json::Value;

use crate::daemon::{Daemon, PATIENCE, daemon_in, wait_for_inbound};

/// A bot message in a chat, as sent and as seen.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Shown {
    /// The platform's id of the message.
    pub message_id: String,
    /// The text as the bot sent it, markup included.
    pub raw: String,
    /// What a user sees.
    pub visible: String,
    /// The message it replies to (the platform's id), if it is threaded to one.
    pub reply_to: Option<String>,
    /// How many edits changed it after it was sent.
    pub edits: u32,
    /// How many files it carries.
    pub files: usize,
}

/// A chat platform's fake, as the suite drives it. See the [module docs](self).
pub trait Platform: Sized + Send + Sync + 'static {
    const NAME: &'static str;
    /// The most characters one message may have on this platform (after Ferry's chunking).
    const MAX_CHARS: usize;
    /// The most lines one message may have, if the platform limits them.
    const MAX_LINES: Option<usize>;
    /// Whether `[[reply_to_current]]` threads the answer to the question (SPEC §7: on
    /// Telegram and Discord; Slack ignores the tag and keeps a top-level reply top-level).
    const HONOURS_REPLY_TAG: bool = true;

    fn start() -> impl Future<Output = Self> + Send;
    /// Another bot of the platform, with credentials of its own: a second account.
    fn start_second() -> impl Future<Output = Self> + Send;
    /// Lines for `[channels.NAME]` (or an account's table) that connect the adapter to this
    /// fake.
    fn channel_config(&self) -> String;
    fn connected(&self) -> impl Future<Output = ()> + Send;
    /// Returns the platform's id of the injected message.
    fn dm(&self, user: u64, text: &str) -> impl Future<Output = String> + Send;
    fn group(&self, group: u64, user: u64, text: &str, mention: bool) -> impl Future<Output = ()> + Send;
    fn taken(&self) -> impl Future<Output = ()> + Send;
    fn dm_messages(&self, user: u64) -> Vec<Shown>;
    fn group_messages(&self, group: u64) -> Vec<Shown>;
    fn rate_limit_storm(&self, user: u64);
    fn rate_limited_count(&self) -> usize;
    /// No code block in `raw` is left open (or closed without opening).
    fn fences_balanced(raw: &str) -> bool;
}

/// Open DMs and groups, no preview streaming: the setting every scenario starts from.
const OPEN: &str = "dm_policy = \"open\"\nallow_from = [\"*\"]\ngroup_policy = \"open\"\nstreaming = \"off\"";

const USER: u64 = 42;
const GROUP: u64 = 500;

/// A platform fake, the model fake and a gateway connected to both.
pub struct Harness<P: Platform> {
    pub platform: P,
    pub openai: FakeOpenAi,
    pub daemon: Option<Daemon>,
    /// Access and reply keys in the channel's table ([`OPEN`] unless a scenario says).
    channel_keys: String,
    /// Tables after the channel's (`[messages.queue]` …).
    tables: String,
}

impl<P: Platform> Harness<P> {
    /// Starts both fakes and the gateway with [`OPEN`] access and `tables` appended to the
    /// config.
    pub async fn start(tables: &str) -> Self {
        Self::start_with(OPEN, tables).await
    }

    /// [`Harness::start`] with `channel_keys` in the channel's table instead of [`OPEN`].
    pub async fn start_with(channel_keys: &str, tables: &str) -> Self {
        let platform = P::start().await;
        let openai = FakeOpenAi::start().await.expect("fake OpenAI");
        let mut harness =
            Self { platform, openai, daemon: None, channel_keys: channel_keys.to_owned(), tables: tables.to_owned() };
        harness.launch(tempfile::tempdir().expect("home")).await;
        harness
    }

    /// The gateway's config; `{openai}` in the tables stands for the model fake's URL.
    fn config(&self) -> String {
        let tables = self.tables.replace("{openai}", &self.openai.url());
        format!("[channels.{}]\n{}\n{}\n\n{}", P::NAME, self.platform.channel_config(), self.channel_keys, tables)
    }

    /// Starts the gateway again on `home` (after [`crate::daemon::Daemon::crash`]).
    pub async fn relaunch(&mut self, home: tempfile::TempDir) {
        self.launch(home).await;
    }

    async fn launch(&mut self, home: tempfile::TempDir) {
        self.daemon = Some(daemon_in(home, &self.config(), &self.openai, P::NAME).await);
        tokio::time::timeout(PATIENCE, self.platform.connected()).await.expect("the adapter is receiving");
    }

    /// Kills the gateway (SIGKILL) and starts a new one on the same state.
    pub async fn crash_and_restart(&mut self) {
        let home = self.daemon.take().expect("a running gateway").crash();
        self.launch(home).await;
    }

    /// Restarts the gateway (as [`Harness::crash_and_restart`]) on the same state, with
    /// `tables` in place of the tables it was started with: a config change, which the gateway
    /// reads at start-up. Wait for [`Harness::taken`] first, so that nothing sent before is
    /// delivered again.
    pub async fn restart_with(&mut self, tables: &str) {
        self.tables = tables.to_owned();
        self.crash_and_restart().await;
    }

    /// Waits until the platform has its delivery of what was sent confirmed ([`Platform::taken`])
    /// and the gateway has handled `count` messages from it since it started.
    pub async fn taken(&self, count: u64) {
        self.platform.taken().await;
        let port = self.daemon.as_ref().expect("a running gateway").port;
        wait_for_inbound(port, P::NAME, count).await;
    }

    /// Waits until `read` returns something `done` accepts, and returns it.
    pub async fn until<T: std::fmt::Debug>(&self, read: impl Fn(&P) -> T, done: impl Fn(&T) -> bool) -> T {
        let waited = tokio::time::timeout(PATIENCE, async {
            loop {
                let value = read(&self.platform);
                if done(&value) {
                    return value;
                }
                tokio::time::sleep(Duration::from_millis(20)).await;
            }
        })
        .await;
        waited.unwrap_or_else(|_| panic!("{}: condition not met in time; last: {:?}", P::NAME, read(&self.platform)))
    }

    /// Sends a sentinel DM and waits for its answer `pong` (one more than the DM showed
    /// before): everything the bot was going to send the user before it has been sent.
    /// Returns the DM's messages.
    pub async fn after_sentinel(&self, user: u64) -> Vec<Shown> {
        let pongs = |shown: &Vec<Shown>| shown.iter().filter(|m| m.visible.trim() == "pong").count();
        let before = pongs(&self.platform.dm_messages(user));
        self.openai.push(Turn::text(["pong"]));
        self.platform.dm(user, "ping").await;
        self.until(|p| p.dm_messages(user), |shown| pongs(shown) > before).await
    }

    /// Waits until request `index` reaches the model; returns it.
    pub async fn request(&self, index: usize) -> RecordedRequest {
        let waited = tokio::time::timeout(PATIENCE, self.openai.wait_for_request(index)).await;
        waited.unwrap_or_else(|_| panic!("{}: the model never got request {index}", P::NAME))
    }

    /// Waits until the bot's messages in the group include one whose text contains `needle`;
    /// returns that message.
    pub async fn group_message_containing(&self, needle: &str) -> Shown {
        let shown =
            self.until(|p| p.group_messages(GROUP), |shown| shown.iter().any(|m| m.visible.contains(needle))).await;
        shown.into_iter().find(|m| m.visible.contains(needle)).expect("found above")
    }

    /// The text of the last user message the model was sent in request `index`.
    pub fn prompt(&self, index: usize) -> String {
        let body = &self.openai.requests()[index].body;
        let last = body["messages"].as_array().and_then(|m| m.last()).map(|m| m["content"].clone());
        last.map(|content| content.as_str().map(str::to_owned).unwrap_or_else(|| content.to_string()))
            .unwrap_or_default()
    }
}

/// The tool results (OpenAI `tool` messages) the model was sent in `request`, in order.
fn tool_results(request: &RecordedRequest) -> Vec<String> {
    let messages = request.body["messages"].as_array().cloned().unwrap_or_default();
    messages
        .iter()
        .filter(|message| message["role"] == "tool")
        .map(|message| match &message["content"] {
            Value::String(text) => text.clone(),
            other => other.to_string(),
        })
        .collect()
}

/// The last tool result in `request`.
fn last_tool_result(request: &RecordedRequest) -> String {
    tool_results(request).pop().unwrap_or_else(|| panic!("no tool result in {}", request.body))
}

fn visible(shown: &[Shown]) -> Vec<String> {
    shown.iter().map(|m| m.visible.trim().to_owned()).collect()
}

/// A DM is answered with exactly one message, and nothing else follows it.
pub async fn a_dm_is_answered_exactly_once<P: Platform>() {
    let h = Harness::<P>::start("").await;
    h.openai.push(Turn::text(["Hello there."]));
    h.platform.dm(USER, "hi").await;
    h.until(|p| p.dm_messages(USER), |shown| !shown.is_empty()).await;
    let shown = h.after_sentinel(USER).await;
    assert_eq!(visible(&shown), ["Hello there.", "pong"], "{}", P::NAME);
    assert_eq!(h.openai.requests().len(), 2);
}

/// `/model`, `/think` and `/reasoning` answer in the chat, are checked against what is
/// allowed, and shape the next run: the chosen model is asked, with the chosen thinking
/// level, and the reasoning arrives as its own marked message before the answer.
pub async fn model_think_and_reasoning_commands_shape_the_next_run<P: Platform>() {
    let h = Harness::<P>::start("[agents.defaults]\nmodels = [\"openai/gpt-4o-mini\", \"openai/gpt-4o\"]").await;
    let answers = |count: usize| h.until(|p| p.dm_messages(USER), move |shown| shown.len() >= count);
    h.platform.dm(USER, "/model").await;
    let listed = answers(1).await;
    assert!(listed[0].visible.contains("2. openai/gpt-4o"), "{}: {}", P::NAME, listed[0].visible);
    h.platform.dm(USER, "/model nonsense/model").await;
    let refused = answers(2).await;
    assert!(refused[1].visible.contains("not a model you can choose"), "{}: {}", P::NAME, refused[1].visible);
    assert!(refused[1].visible.contains("openai/gpt-4o-mini"), "{}: the choices are listed", P::NAME);
    h.platform.dm(USER, "/model gpt-4o").await;
    let chosen = answers(3).await;
    assert!(chosen[2].visible.contains("now uses openai/gpt-4o"), "{}: {}", P::NAME, chosen[2].visible);
    h.platform.dm(USER, "/think high").await;
    let thinking = answers(4).await;
    assert!(thinking[3].visible.contains("Thinking: high"), "{}: {}", P::NAME, thinking[3].visible);
    h.platform.dm(USER, "/reasoning on").await;
    let reasoning = answers(5).await;
    assert!(reasoning[4].visible.contains("Reasoning is shown"), "{}: {}", P::NAME, reasoning[4].visible);

    h.openai.push(Turn::Reply(Reply::text(["Hi there!"]).with_thinking(["The user greets me. ", "Greet back."])));
    h.platform.dm(USER, "hello").await;
    let request = tokio::time::timeout(PATIENCE, h.openai.wait_for_request(0)).await.expect("the run started");
    assert_eq!(request.body["model"], "gpt-4o", "{}: the chosen model is asked", P::NAME);
    assert_eq!(request.reasoning_effort().as_deref(), Some("high"), "{}", P::NAME);
    let shown = h.after_sentinel(USER).await;
    let after_commands: Vec<String> = visible(&shown[5..]);
    assert_eq!(after_commands.len(), 3, "{}: reasoning, answer, pong: {after_commands:?}", P::NAME);
    assert!(
        after_commands[0].contains("Reasoning") && after_commands[0].contains("Greet back."),
        "{}: {after_commands:?}",
        P::NAME
    );
    assert!(!after_commands[0].contains("Hi there!"), "{}: the answer is apart", P::NAME);
    assert_eq!(after_commands[1], "Hi there!", "{}", P::NAME);
    assert!(!after_commands[1].contains("Greet back"), "{}: no reasoning in the answer", P::NAME);

    // A silent answer stays silent: its reasoning is not shown either.
    h.openai.push(Turn::Reply(Reply::text(["NO_REPLY"]).with_thinking(["Nothing to add."])));
    let asked = h.openai.requests().len();
    h.platform.dm(USER, "ok thanks").await;
    // Its run has started before the sentinel is sent: one run for both would answer the
    // sentinel with the silent turn too, and no `pong` would come.
    h.request(asked).await;
    let shown = h.after_sentinel(USER).await;
    assert!(visible(&shown).iter().all(|text| !text.contains("Nothing to add.")), "{}: {:?}", P::NAME, visible(&shown));
}

/// A reply that is only the silent token sends nothing at all.
pub async fn no_reply_stays_silent<P: Platform>() {
    let h = Harness::<P>::start("").await;
    h.openai.push(Turn::text(["NO_", "REPLY"]));
    h.platform.dm(USER, "just so you know").await;
    tokio::time::timeout(PATIENCE, h.openai.wait_for_request(0)).await.expect("the run started");
    let shown = h.after_sentinel(USER).await;
    assert_eq!(visible(&shown), ["pong"], "{}: the silent reply sent nothing", P::NAME);
}

/// A reply over the platform's limits arrives cut into messages within them, with every
/// code block intact (closed at a cut, reopened after it), and nothing lost.
pub async fn a_long_reply_is_split_within_limits_with_intact_fences<P: Platform>() {
    let h = Harness::<P>::start("").await;
    let target = P::MAX_CHARS * 2 + P::MAX_CHARS / 5;
    let mut reply = String::new();
    while reply.len() < target / 3 {
        reply.push_str("Some prose before the code, explaining what it does in detail.\n\n");
    }
    reply.push_str("```rust\n");
    let mut code_lines = 0;
    while reply.len() < target * 3 / 4 {
        reply.push_str("let value = compute(42); // a line of code\n");
        code_lines += 1;
    }
    reply.push_str("```\n\n");
    while reply.len() < target {
        reply.push_str("And a closing paragraph after the code.\n\n");
    }
    reply.push_str("THE END");
    h.openai.push(Turn::text([reply]));
    h.platform.dm(USER, "explain").await;
    let shown = h.until(|p| p.dm_messages(USER), |shown| shown.iter().any(|m| m.visible.contains("THE END"))).await;
    assert!(shown.len() >= 3, "{}: {} messages", P::NAME, shown.len());
    for message in &shown {
        assert!(message.visible.chars().count() <= P::MAX_CHARS, "{}: {} chars", P::NAME, message.visible.len());
        if let Some(max_lines) = P::MAX_LINES {
            assert!(message.raw.lines().count() <= max_lines, "{}: {} lines", P::NAME, message.raw.lines().count());
        }
        assert!(P::fences_balanced(&message.raw), "{}: a code block was broken: {}", P::NAME, message.raw);
    }
    let all: String = shown.iter().map(|m| m.visible.as_str()).collect();
    assert_eq!(all.matches("let value = compute(42); // a line of code").count(), code_lines, "no code line lost");
}

/// In a group only a message that mentions the bot runs, and it sees what was said before.
pub async fn in_a_group_only_a_mention_runs_with_the_earlier_messages_as_context<P: Platform>() {
    let h = Harness::<P>::start("").await;
    h.openai.push(Turn::text(["Tuesday works for everyone."]));
    h.platform.group(GROUP, 7, "shall we meet tuesday?", false).await;
    h.platform.group(GROUP, 8, "tuesday is fine by me", false).await;
    h.taken(2).await;
    h.platform.group(GROUP, 7, "what do you think?", true).await;
    let shown = h.until(|p| p.group_messages(GROUP), |shown| !shown.is_empty()).await;
    assert_eq!(visible(&shown), ["Tuesday works for everyone."], "{}", P::NAME);
    let prompt = h.prompt(0);
    assert!(prompt.contains("shall we meet tuesday?") && prompt.contains("tuesday is fine by me"), "{prompt}");
    assert!(prompt.contains("what do you think?"), "{prompt}");
    assert_eq!(h.openai.requests().len(), 1, "{}: the messages without a mention did not run", P::NAME);
}

/// Messages that arrive while a run is busy are answered together by one follow-up run
/// (queue mode `collect`, the default).
pub async fn messages_during_a_run_are_collected_into_one_follow_up<P: Platform>() {
    let h = Harness::<P>::start("").await;
    let slow = Reply::text(["Working ", "on the ", "first one."]).with_chunk_delay(Duration::from_millis(700));
    h.openai.push(Turn::Reply(slow));
    h.openai.push(Turn::text(["Both noted."]));
    h.platform.dm(USER, "first question").await;
    tokio::time::timeout(PATIENCE, h.openai.wait_for_request(0)).await.expect("the first run started");
    h.platform.dm(USER, "second thing").await;
    h.platform.dm(USER, "third thing").await;
    let shown = h.until(|p| p.dm_messages(USER), |shown| shown.iter().any(|m| m.visible.contains("Both noted."))).await;
    assert_eq!(visible(&shown), ["Working on the first one.", "Both noted."], "{}", P::NAME);
    assert_eq!(h.openai.requests().len(), 2, "{}: one follow-up run for both", P::NAME);
    let prompt = h.prompt(1);
    assert!(prompt.contains("second thing") && prompt.contains("third thing"), "{prompt}");
}

/// A crash mid-run neither loses the message nor answers it twice after the restart.
pub async fn a_crash_mid_run_neither_loses_the_message_nor_answers_twice<P: Platform>() {
    let mut h = Harness::<P>::start("").await;
    h.openai.push(Turn::stall(Reply::text(["I was about to", " answer"]), 1));
    h.openai.push(Turn::text(["Here is your answer."]));
    h.platform.dm(USER, "an important question").await;
    tokio::time::timeout(PATIENCE, h.openai.wait_for_request(0)).await.expect("the run started");
    h.taken(1).await;
    h.crash_and_restart().await;
    h.until(|p| p.dm_messages(USER), |shown| !shown.is_empty()).await;
    let shown = h.after_sentinel(USER).await;
    assert_eq!(visible(&shown), ["Here is your answer.", "pong"], "{}: answered once", P::NAME);
    assert!(h.prompt(1).contains("an important question"), "the recorded message ran again: {}", h.prompt(1));
}

/// While the platform answers 429, replies wait out `retry_after` and every one arrives,
/// exactly once.
pub async fn a_rate_limit_storm_delays_but_loses_nothing<P: Platform>() {
    let h = Harness::<P>::start("[messages.queue]\nmode = \"followup\"\ndebounce_ms = 0").await;
    for i in 0..3 {
        h.openai.push(Turn::text([format!("answer {i}")]));
    }
    h.platform.rate_limit_storm(USER);
    for i in 0..3 {
        h.platform.dm(USER, &format!("question {i}")).await;
    }
    let shown = h.until(|p| p.dm_messages(USER), |shown| shown.len() >= 3).await;
    let mut texts = visible(&shown);
    texts.sort();
    assert_eq!(texts, ["answer 0", "answer 1", "answer 2"], "{}: each exactly once", P::NAME);
    assert!(h.platform.rate_limited_count() >= 1, "{}: the storm was hit", P::NAME);
    let shown = h.after_sentinel(USER).await;
    assert_eq!(shown.len(), 4, "{}: nothing sent twice: {shown:?}", P::NAME);
}

/// `[[reply_to_current]]` in the model's text threads the answer to the question, where
/// the platform honours the tag ([`Platform::HONOURS_REPLY_TAG`]); elsewhere the tag is
/// dropped and the answer stays where the question was. Either way the tag is never shown.
pub async fn reply_to_current_threads_the_answer_to_the_question<P: Platform>() {
    let h = Harness::<P>::start("").await;
    h.openai.push(Turn::text(["[[reply_to_current]] Yes, exactly that."]));
    let question = h.platform.dm(USER, "is this the one?").await;
    let shown = h.until(|p| p.dm_messages(USER), |shown| !shown.is_empty()).await;
    assert_eq!(visible(&shown), ["Yes, exactly that."], "{}: the tag is not shown", P::NAME);
    let expected = P::HONOURS_REPLY_TAG.then_some(question.as_str());
    assert_eq!(shown[0].reply_to.as_deref(), expected, "{}: threaded to the question only if honoured", P::NAME);
}

/// With preview streaming on, one message grows by edits into the final reply.
pub async fn a_preview_is_edited_in_place_into_the_final_reply<P: Platform>() {
    let keys = "dm_policy = \"open\"\nallow_from = [\"*\"]\nstreaming = \"partial\"";
    let h = Harness::<P>::start_with(keys, "").await;
    let pieces = ["The deploy finished ", "at 10:02 and every ", "check passed; ", "nothing else ", "to do today."];
    h.openai.push(Turn::Reply(Reply::text(pieces).with_chunk_delay(Duration::from_millis(500))));
    h.platform.dm(USER, "status?").await;
    let full = pieces.concat();
    let shown = h.until(|p| p.dm_messages(USER), |shown| shown.iter().any(|m| m.visible.trim() == full)).await;
    assert_eq!(shown.len(), 1, "{}: one message, edited in place: {shown:?}", P::NAME);
    assert!(shown[0].edits >= 1, "{}: the preview was edited into the final", P::NAME);
}

/// The `[tools]` policy and the channel's own `tools` lists decide what the model is
/// offered: a denied tool is not in the request at all.
pub async fn the_tool_policy_decides_what_the_model_is_offered<P: Platform>() {
    let keys = format!("{OPEN}\ntools = {{ deny = [\"current_time\"] }}");
    let h = Harness::<P>::start_with(&keys, "[tools]\ndeny = [\"sessions_list\"]").await;
    h.openai.push(Turn::text(["Hello."]));
    h.platform.dm(USER, "hi").await;
    let request = tokio::time::timeout(PATIENCE, h.openai.wait_for_request(0)).await.expect("the run started");
    let tools = request.body["tools"].as_array().cloned().unwrap_or_default();
    let offered: Vec<&str> = tools.iter().filter_map(|tool| tool["function"]["name"].as_str()).collect();
    assert_eq!(
        offered,
        ["cron", "memory_get", "memory_search", "memory_write", "message"],
        "{}: only what neither list denies",
        P::NAME
    );
    h.until(|p| p.dm_messages(USER), |shown| !shown.is_empty()).await;
}

/// With preview streaming, the reasoning streams into the preview while the model thinks.
/// `/reasoning stream`: the answer then replaces it in the same message. `/reasoning on`: the
/// preview stays the reasoning's own message, never showing the answer, which follows below.
pub async fn reasoning_streams_into_the_preview_then_gives_way_or_stays_apart<P: Platform>() {
    let keys = "dm_policy = \"open\"\nallow_from = [\"*\"]\nstreaming = \"partial\"";
    let h = Harness::<P>::start_with(keys, "").await;
    // Long enough to open a preview (30 characters) well before it is whole.
    let pieces = ["The answer is 42, ", "which is what the ", "multiplication table ", "says for this."];
    let answer = pieces.concat();
    let turn = || {
        let reply = Reply::text(pieces).with_thinking(["Six times seven ", "is forty-two; ", "say so."]);
        Turn::Reply(reply.with_chunk_delay(Duration::from_millis(400)))
    };
    // Every text the DM's message `watched` showed until message `last` holds the answer.
    let watch = |watched: usize, last: usize| {
        let seen = std::sync::Mutex::new(Vec::<String>::new());
        let (h, answer) = (&h, answer.as_str());
        async move {
            let read = |p: &P| {
                let shown = p.dm_messages(USER);
                if let Some(message) = shown.get(watched) {
                    let mut seen = seen.lock().unwrap();
                    if seen.last() != Some(&message.visible) {
                        seen.push(message.visible.clone());
                    }
                }
                shown
            };
            h.until(read, |shown| shown.get(last).is_some_and(|m| m.visible.trim() == answer)).await;
            seen.into_inner().unwrap()
        }
    };

    h.platform.dm(USER, "/reasoning stream").await;
    h.until(|p| p.dm_messages(USER), |shown| !shown.is_empty()).await;
    h.openai.push(turn());
    h.platform.dm(USER, "what is it?").await;
    let seen = watch(1, 1).await;
    assert!(seen.iter().any(|text| text.contains("forty-two")), "{}: the reasoning streamed: {seen:?}", P::NAME);
    let shown = h.after_sentinel(USER).await;
    assert_eq!(visible(&shown[1..]), [answer.as_str(), "pong"], "{}: the answer replaced the reasoning", P::NAME);
    assert!(shown[1].edits >= 1, "{}: in the same message, by edits", P::NAME);

    h.platform.dm(USER, "/reasoning on").await;
    h.until(|p| p.dm_messages(USER), |shown| shown.len() >= 4).await;
    h.openai.push(turn());
    h.platform.dm(USER, "and again?").await;
    let seen = watch(4, 5).await;
    assert!(seen.iter().any(|text| text.contains("forty-two")), "{}: the reasoning streamed: {seen:?}", P::NAME);
    let clean = seen.iter().all(|text| !text.contains("The answer"));
    assert!(clean, "{}: the reasoning's message never showed the answer: {seen:?}", P::NAME);
    let shown = h.after_sentinel(USER).await;
    let after: Vec<String> = visible(&shown[4..]);
    assert_eq!(after.len(), 3, "{}: reasoning, answer, pong: {after:?}", P::NAME);
    assert!(after[0].contains("Reasoning") && after[0].contains("say so."), "{}: {after:?}", P::NAME);
    assert_eq!(after[1], answer, "{}: the answer is apart", P::NAME);
}

/// Instantiates every scenario for one platform, in a module named `$name`.
#[macro_export]
macro_rules! conformance_suite {
    ($name:ident, $platform:ty) => {
        mod $name {
            #[tokio::test]
            async fn a_reminder_the_tool_made_arrives_once_without_a_model_call() {
                $crate::conformance::scheduled::a_reminder_the_tool_made_arrives_once_without_a_model_call::<$platform>()
                    .await;
            }

            #[tokio::test]
            async fn an_every_job_fires_until_it_is_removed() {
                $crate::conformance::scheduled::an_every_job_fires_until_it_is_removed::<$platform>().await;
            }

            #[tokio::test]
            async fn a_reminder_due_while_the_gateway_was_down_fires_once_late() {
                $crate::conformance::scheduled::a_reminder_due_while_the_gateway_was_down_fires_once_late::<$platform>()
                    .await;
            }

            #[tokio::test]
            async fn a_task_jobs_final_reply_is_delivered_once() {
                $crate::conformance::scheduled::a_task_jobs_final_reply_is_delivered_once::<$platform>().await;
            }

            #[tokio::test]
            async fn a_dm_is_answered_exactly_once() {
                $crate::conformance::a_dm_is_answered_exactly_once::<$platform>().await;
            }

            #[tokio::test]
            async fn a_person_s_memory_is_found_again_and_never_shown_to_anyone_else() {
                $crate::conformance::memory::a_person_s_memory_is_found_again_and_never_shown_to_anyone_else::<
                    $platform,
                >()
                .await;
            }

            #[tokio::test]
            async fn remember_memory_and_forget_commands_work_on_the_user_s_own_memory() {
                $crate::conformance::memory::remember_memory_and_forget_commands_work_on_the_user_s_own_memory::<
                    $platform,
                >()
                .await;
            }

            #[tokio::test]
            async fn two_accounts_each_resume_their_own_connection_after_a_crash() {
                $crate::conformance::accounts::two_accounts_each_resume_their_own_connection_after_a_crash::<$platform>()
                    .await;
            }

            #[tokio::test]
            async fn model_think_and_reasoning_commands_shape_the_next_run() {
                $crate::conformance::model_think_and_reasoning_commands_shape_the_next_run::<$platform>().await;
            }

            #[tokio::test]
            async fn no_reply_stays_silent() {
                $crate::conformance::no_reply_stays_silent::<$platform>().await;
            }

            #[tokio::test]
            async fn a_long_reply_is_split_within_limits_with_intact_fences() {
                $crate::conformance::a_long_reply_is_split_within_limits_with_intact_fences::<$platform>().await;
            }

            #[tokio::test]
            async fn in_a_group_only_a_mention_runs_with_the_earlier_messages_as_context() {
                $crate::conformance::in_a_group_only_a_mention_runs_with_the_earlier_messages_as_context::<$platform>()
                    .await;
            }

            #[tokio::test]
            async fn messages_during_a_run_are_collected_into_one_follow_up() {
                $crate::conformance::messages_during_a_run_are_collected_into_one_follow_up::<$platform>().await;
            }

            #[tokio::test]
            async fn a_crash_mid_run_neither_loses_the_message_nor_answers_twice() {
                $crate::conformance::a_crash_mid_run_neither_loses_the_message_nor_answers_twice::<$platform>().await;
            }

            #[tokio::test]
            async fn reply_to_current_threads_the_answer_to_the_question() {
                $crate::conformance::reply_to_current_threads_the_answer_to_the_question::<$platform>().await;
            }

            #[tokio::test]
            async fn the_tool_policy_decides_what_the_model_is_offered() {
                $crate::conformance::the_tool_policy_decides_what_the_model_is_offered::<$platform>().await;
            }

            #[tokio::test]
            async fn reasoning_streams_into_the_preview_then_gives_way_or_stays_apart() {
                $crate::conformance::reasoning_streams_into_the_preview_then_gives_way_or_stays_apart::<$platform>()
                    .await;
            }

            #[tokio::test]
            async fn a_preview_is_edited_in_place_into_the_final_reply() {
                $crate::conformance::a_preview_is_edited_in_place_into_the_final_reply::<$platform>().await;
            }

            #[tokio::test]
            async fn a_rate_limit_storm_delays_but_loses_nothing() {
                $crate::conformance::a_rate_limit_storm_delays_but_loses_nothing::<$platform>().await;
            }

            #[tokio::test]
            async fn a_crash_mid_stream_streams_the_retry_into_the_same_preview() {
                $crate::conformance::a_crash_mid_stream_streams_the_retry_into_the_same_preview::<$platform>().await;
            }

            #[tokio::test]
            async fn a_preview_left_by_a_crash_is_deleted_when_the_retry_streams_none() {
                use $crate::conformance as c;
                c::a_preview_left_by_a_crash_is_deleted_when_the_retry_streams_none::<$platform>().await;
            }

            #[tokio::test]
            async fn a_reply_recorded_before_a_crash_is_delivered_without_asking_the_model_again() {
                use $crate::conformance as c;
                c::a_reply_recorded_before_a_crash_is_delivered_without_asking_the_model_again::<$platform>().await;
            }

            #[tokio::test]
            async fn a_model_failure_after_visible_output_is_retried_into_the_same_preview() {
                use $crate::conformance as c;
                c::a_model_failure_after_visible_output_is_retried_into_the_same_preview::<$platform>().await;
            }

            #[tokio::test]
            async fn a_command_asked_for_in_a_group_runs_once_a_member_approves_it() {
                $crate::conformance::a_command_asked_for_in_a_group_runs_once_a_member_approves_it::<$platform>().await;
            }

            #[tokio::test]
            async fn a_command_a_member_denies_does_not_run_and_the_model_is_told() {
                $crate::conformance::a_command_a_member_denies_does_not_run_and_the_model_is_told::<$platform>().await;
            }

            #[tokio::test]
            async fn stop_leaves_a_background_command_running_and_reset_kills_it() {
                $crate::conformance::stop_leaves_a_background_command_running_and_reset_kills_it::<$platform>().await;
            }

            #[tokio::test]
            async fn web_fetch_reads_a_local_page_only_when_private_addresses_are_allowed() {
                use $crate::conformance as c;
                c::web_fetch_reads_a_local_page_only_when_private_addresses_are_allowed::<$platform>().await;
            }

            #[tokio::test]
            async fn a_message_the_model_kept_failing_on_is_answered_with_the_next_one() {
                $crate::conformance::a_message_the_model_kept_failing_on_is_answered_with_the_next_one::<$platform>()
                    .await;
            }
        }
    };
}
