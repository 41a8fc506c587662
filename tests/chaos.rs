//! The chaos test (SPEC §11, issue 17): the real `ferry gateway` against each platform's
//! fake and a fake model, killed with SIGKILL at random moments and at the worst ones
//! (right after a reply's finals are recorded, while they are being sent), while the fakes
//! answer with 429 storms longer than their `retry_after`, drop connections, and the model
//! stalls or breaks off mid-stream.
//!
//! Every user message carries a unique token and the model's reply names the tokens it
//! answers, ending with `done.`. At the end every chat must show each token exactly once,
//! in order, in a whole reply: nothing lost, nothing answered twice, no half-written
//! preview, no `NO_REPLY` leak. The one exception is Telegram's documented at-least-once
//! case (a fresh send whose outcome was unknown, which Telegram cannot deduplicate): a
//! repeat of the very same message, counted and reported.
//!
//! A second run per platform ([`Mode::Sends`]) answers through what happens while a run goes
//! on: each message's first token is sent by the `message` tool with a file (a document, a
//! photo or a voice note), its second in a reply streamed in blocks, and messages arriving
//! mid-run are steered into it. Killed at the worst moment there, a send was just recorded
//! and the next is under way. It holds the gateway to the same: nothing lost or sent twice,
//! answers in order, every file shown once.
//!
//! Seeded and bounded: `FERRY_CHAOS_SEED` replays a run (the seed is printed, and named in
//! every failure); `FERRY_CHAOS_SECONDS` sets how long faults are injected (default 40, 25 in
//! the sends mode). `FERRY_CHAOS_KEEP=<dir>` keeps the gateway's state, the model's requests
//! and the chats of a run there, for looking into one.

#[path = "common/daemon.rs"]
mod daemon;

#[allow(dead_code, unused_imports)]
#[path = "conformance/mod.rs"]
mod conformance;

#[path = "common/chaos_oracle.rs"]
mod oracle;

use std::collections::BTreeMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::Duration;

use ferry_fakes::{RecordedRequest, Reply, Turn};
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};

use conformance::discord::Discord;
use conformance::slack::Slack;
use conformance::telegram::Telegram;
use conformance::{Harness, Platform, Shown};
use daemon::{PATIENCE, wait_for_inbound};
use oracle::{Verdict, answer, asked_about, check_chat, check_chat_of, duration_from_env, is_whole, seed};

const USERS: u64 = 5;

/// Faults a platform's fake can inject, beyond the conformance suite's.
trait ChaosPlatform: Platform {
    /// Whether messages sent while the gateway is down reach it after the restart (the
    /// platform keeps them: Telegram's update queue, Slack's unacknowledged envelopes).
    /// Discord does not redeliver, so the test sends only while the gateway is up.
    const REDELIVERS: bool;
    /// A 429 storm on the bot's calls to `user`'s chat, lasting longer than the
    /// `retry_after` each answer announces.
    fn storm(&self, user: u64, rng: &mut StdRng);
    /// The next send or edit is applied by the platform but its answer is lost, or the
    /// connection drops before it is applied.
    fn drop_connection(&self, rng: &mut StdRng);
    /// Trouble on the receiving side: a gateway or socket dropped, a poll failing.
    fn inbound_fault(&self, rng: &mut StdRng);
    /// The id of the DM chat with `user`, as Ferry records it.
    fn dm_chat_id(&self, user: u64) -> String;
}

impl ChaosPlatform for Telegram {
    const REDELIVERS: bool = true;

    fn storm(&self, _user: u64, rng: &mut StdRng) {
        let method = if rng.random_bool(0.5) { "sendMessage" } else { "editMessageText" };
        self.fake().rate_limit_storm(method, Duration::from_millis(rng.random_range(1500..5000)), 1);
    }

    fn drop_connection(&self, rng: &mut StdRng) {
        let method = ["sendMessage", "editMessageText", "deleteMessage"][rng.random_range(0..3)];
        if rng.random_bool(0.5) {
            self.fake().apply_then_drop_next(method);
        } else {
            self.fake().drop_next_connection(method);
        }
    }

    fn inbound_fault(&self, rng: &mut StdRng) {
        // teloxide waits 10 s after any 5xx before it reads the answer: one failed poll.
        self.fake().server_error_storm("getUpdates", Duration::from_millis(rng.random_range(500..1500)));
    }

    fn dm_chat_id(&self, user: u64) -> String {
        user.to_string()
    }
}

impl ChaosPlatform for Discord {
    const REDELIVERS: bool = false;

    fn storm(&self, user: u64, rng: &mut StdRng) {
        let channel = self.fake().dm_channel(user);
        self.fake().rate_limit_storm(channel, Duration::from_millis(rng.random_range(1500..5000)));
    }

    fn drop_connection(&self, rng: &mut StdRng) {
        let channel = self.fake().dm_channel(rng.random_range(1..=USERS));
        if rng.random_bool(0.5) {
            self.fake().apply_then_drop_next(channel);
        } else {
            self.fake().drop_next_before_apply(channel);
        }
    }

    fn inbound_fault(&self, _rng: &mut StdRng) {
        // A resumable close: the adapter resumes and the fake replays what was missed.
        self.fake().disconnect();
    }

    fn dm_chat_id(&self, user: u64) -> String {
        self.fake().dm_channel(user).to_string()
    }
}

impl ChaosPlatform for Slack {
    const REDELIVERS: bool = true;

    fn storm(&self, _user: u64, rng: &mut StdRng) {
        let method = if rng.random_bool(0.5) { "chat.postMessage" } else { "chat.update" };
        self.fake().rate_limit_next(method, rng.random_range(2..5), 1);
    }

    fn drop_connection(&self, rng: &mut StdRng) {
        let method = ["chat.postMessage", "chat.update", "chat.delete"][rng.random_range(0..3)];
        if rng.random_bool(0.5) {
            self.fake().apply_then_drop_next(method);
        } else {
            self.fake().drop_next_before_apply(method);
        }
    }

    fn inbound_fault(&self, _rng: &mut StdRng) {
        self.fake().drop_sockets();
    }

    fn dm_chat_id(&self, user: u64) -> String {
        conformance::slack::dm_channel(user)
    }
}

/// Model faults the next requests get, set by the chaos loop and taken by the responder.
#[derive(Default)]
struct ModelFaults {
    stalls: AtomicU32,
    cuts: AtomicU32,
}

/// The model: answers `ack#<request> <tokens> done.` in a few streamed pieces, `NO_REPLY`
/// to a message without tokens, and stalls or breaks off when the chaos loop says so.
fn responder(faults: Arc<ModelFaults>, counter: Arc<AtomicU32>) -> impl Fn(&RecordedRequest) -> Turn + Send + Sync {
    move |request| {
        let Some(reply) = answer(request, &counter) else { return Turn::text(["NO_", "REPLY"]) };
        if take(&faults.stalls) {
            Turn::stall(reply, 2)
        } else if take(&faults.cuts) {
            Turn::cut(reply, 2)
        } else {
            Turn::Reply(reply)
        }
    }
}

/// What the chaos loop sends and how the model answers it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Mode {
    /// Each message names one token, answered in a streamed (previewed) reply.
    Replies,
    /// Each message names two tokens: the even one is sent with the `message` tool, the
    /// odd one in a reply streamed in blocks; steer mode.
    Sends,
}

impl Mode {
    /// The ledger records a worst-moment kill waits for: finals recorded and being sent; a
    /// block message recorded before it is sent, or a send recorded once sent (Telegram).
    fn worst_moments(self) -> &'static [&'static str] {
        match self {
            Self::Replies => &["\"event\":\"finals\""],
            Self::Sends => &["\"event\":\"sent\"", "\"event\":\"block_message\""],
        }
    }
}

/// The model in [`Mode::Sends`]: sends the even tokens of the conversation that no
/// `message` call of its own named yet with the `message` tool, with a file it writes in
/// the agent's `workspace` first ([`file_for`] the first of them), then answers the odd ones
/// no text of its own named yet in two paragraphs (block streaming sends them apart or
/// merged), and `NO_REPLY` when nothing is left. Like a real model, it sees in its
/// transcript what it already sent; a send it made in a run killed before it was saved it
/// makes again, which the ledger must not repeat.
fn sends_responder(
    faults: Arc<ModelFaults>,
    counter: Arc<AtomicU32>,
    workspace: std::path::PathBuf,
) -> impl Fn(&RecordedRequest) -> Turn + Send + Sync {
    move |request| {
        let (said_by_tool, said_in_text) = said(request);
        let asked: Vec<String> = request.user_texts().iter().flat_map(|text| oracle::tokens(text)).collect();
        let pending = |even: bool, said: &[String]| -> Vec<String> {
            let mut pending: Vec<String> = Vec::new();
            for token in &asked {
                if is_even(token) == even && !said.contains(token) && !pending.contains(token) {
                    pending.push(token.clone());
                }
            }
            pending
        };
        // The same request gets the same answer (no counter in the text): a block a resumed
        // run streams again is recognized.
        let number = counter.fetch_add(1, Ordering::SeqCst);
        let to_send = pending(true, &said_by_tool);
        if !to_send.is_empty() {
            let text = format!("{}tool {} done.", oracle::PREAMBLE, to_send.join(" "));
            let (file, bytes) = file_for(&to_send[0]);
            let written = std::fs::write(workspace.join(&file), bytes);
            assert!(written.is_ok(), "writing {file} in the agent's workspace: {written:?}");
            let arguments = serde_json::json!({ "text": text, "media": file }).to_string();
            return Turn::tool_calls([ferry_fakes::ToolCall::new(format!("call-{number}"), "message", arguments)]);
        }
        let to_answer = pending(false, &said_in_text);
        if to_answer.is_empty() {
            return Turn::text(["NO_", "REPLY"]);
        }
        let text = format!(
            "{preamble}first part for {first} done.\n\n{preamble}ack {} done.",
            to_answer.join(" "),
            first = to_answer[0].replace("tok-", "t").replace("end-", "e"),
            preamble = oracle::PREAMBLE,
        );
        let reply = ferry_fakes::Reply::text(oracle::split_in_four(&text)).with_chunk_delay(Duration::from_millis(150));
        if take(&faults.stalls) {
            Turn::stall(reply, 2)
        } else if take(&faults.cuts) {
            Turn::cut(reply, 2)
        } else {
            Turn::Reply(reply)
        }
    }
}

/// The tokens the assistant's `message` calls and its texts named in the request. A call
/// that steering skipped (its result says so: a message arrived while the run worked) sent
/// nothing, and a model reading its transcript knows it: its tokens are still to send.
fn said(request: &RecordedRequest) -> (Vec<String>, Vec<String>) {
    let (mut by_tool, mut in_text) = (Vec::new(), Vec::new());
    let messages = request.body.get("messages").and_then(serde_json::Value::as_array).cloned().unwrap_or_default();
    let skipped: Vec<&str> = messages
        .iter()
        .filter(|message| message["role"] == "tool" && message["content"] == SKIPPED_FOR_STEER)
        .filter_map(|message| message["tool_call_id"].as_str())
        .collect();
    for message in messages.iter().filter(|message| message["role"] == "assistant") {
        if let Some(text) = message["content"].as_str() {
            in_text.extend(oracle::tokens(text));
        }
        for call in message["tool_calls"].as_array().into_iter().flatten() {
            if call["id"].as_str().is_some_and(|id| skipped.contains(&id)) {
                continue;
            }
            by_tool.extend(oracle::tokens(call["function"]["arguments"].as_str().unwrap_or_default()));
        }
    }
    (by_tool, in_text)
}

/// What a tool call skipped by steering gets for its result (`agent::run::SKIPPED_FOR_STEER`).
const SKIPPED_FOR_STEER: &str = "skipped due to queued user message";

/// The file the sends mode's model sends with the tool send naming `token` first, and its
/// bytes: a document, a photo or a voice note in turn, as the platforms upload each their
/// own way (Telegram's `sendDocument`, `sendPhoto`, `sendVoice`).
fn file_for(token: &str) -> (String, Vec<u8>) {
    let number = token.rsplit('-').next().and_then(|n| n.parse::<u32>().ok()).unwrap_or_default();
    match number / 2 % 3 {
        0 => (format!("{token}.txt"), format!("the file for {token}\n").into_bytes()),
        1 => (format!("{token}.jpg"), ferry_fakes::sample_jpeg(64, 48)),
        _ => {
            // An Ogg stream's magic, then filler: a voice note as the platforms send it.
            let mut voice = b"OggS\x00\x02".to_vec();
            voice.resize(2048, 3);
            (format!("{token}.ogg"), voice)
        }
    }
}

/// The token of `user`'s last message.
fn end_token(mode: Mode, user: u64) -> String {
    match mode {
        Mode::Replies => format!("end-{user}"),
        Mode::Sends => format!("end-{user}1"),
    }
}

fn is_even(token: &str) -> bool {
    token.rsplit('-').next().and_then(|n| n.parse::<u32>().ok()).is_some_and(|n| n % 2 == 0)
}

fn take(counter: &AtomicU32) -> bool {
    counter.fetch_update(Ordering::SeqCst, Ordering::SeqCst, |n| n.checked_sub(1)).is_ok()
}

/// What a run did, for its report.
#[derive(Debug, Default)]
struct Tally {
    messages: usize,
    kills: usize,
    worst_moment_kills: usize,
    storms: usize,
    dropped_connections: usize,
    inbound_faults: usize,
    model_stalls: usize,
    model_cuts: usize,
}

async fn chaos<P: ChaosPlatform>(mode: Mode) {
    let seed = seed();
    println!("chaos seed for {} ({mode:?}): {seed} (FERRY_CHAOS_SEED={seed} replays it)", P::NAME);
    let mut rng = StdRng::seed_from_u64(seed);
    let keys = "dm_policy = \"open\"\nallow_from = [\"*\"]\nstreaming = \"partial\"";
    // The agent's workspace (every session's: `tools.sandbox.scope = "agent"`), where the
    // sends mode's model writes the files it sends.
    let workspace = tempfile::tempdir().expect("a workspace");
    let (agent_keys, queue_keys) = match mode {
        Mode::Replies => (String::new(), ""),
        Mode::Sends => (
            format!(
                "block_streaming = true\nblock_streaming_chunk = {{ min_chars = 20, max_chars = 400 }}\n\
                 block_streaming_coalesce = {{ idle_ms = 100 }}\nworkspace = \"{}\"\n\n[tools.sandbox]\nscope = \"agent\"\n",
                workspace.path().display()
            ),
            "mode = \"steer\"\n",
        ),
    };
    let tables = format!(
        "[agents.defaults]\nmodel_idle_timeout_seconds = 1\nmodel_retry_after_output_ms = 200\n{agent_keys}\n\
         [messages]\ndelivery_deadline_seconds = 120\n\n[messages.queue]\ndebounce_ms = 200\n{queue_keys}\n\
         [session]\ndm_scope = \"per-channel-peer\""
    );
    let mut h = Harness::<P>::start_with(keys, &tables).await;
    let faults = Arc::new(ModelFaults::default());
    match mode {
        Mode::Replies => h.openai.set_responder(responder(faults.clone(), Arc::new(AtomicU32::new(0)))),
        Mode::Sends => h.openai.set_responder(sends_responder(
            faults.clone(),
            Arc::new(AtomicU32::new(0)),
            workspace.path().to_owned(),
        )),
    }

    let mut tally = Tally::default();
    let mut sent: BTreeMap<u64, Vec<String>> = (1..=USERS).map(|user| (user, Vec::new())).collect();
    let mut handled_since_start = 0;
    // The sends mode's runs are longer (a tool round, then a reply): fewer seconds of faults
    // give it about as many kills and messages.
    let default_seconds = if mode == Mode::Sends { 25 } else { 40 };
    let deadline = tokio::time::Instant::now() + duration_from_env("FERRY_CHAOS_SECONDS", default_seconds);
    let mut next_kill = tokio::time::Instant::now() + Duration::from_millis(rng.random_range(1500..4000));
    while tokio::time::Instant::now() < deadline {
        let user = rng.random_range(1..=USERS);
        if rng.random_bool(0.1) {
            h.platform.dm(user, "shh, nothing to answer here").await;
        } else if mode == Mode::Sends {
            let tokens = [format!("tok-{}", 2 * tally.messages), format!("tok-{}", 2 * tally.messages + 1)];
            h.platform.dm(user, &format!("{} {} what do you think?", tokens[0], tokens[1])).await;
            sent.entry(user).or_default().extend(tokens);
        } else {
            let token = format!("tok-{}", tally.messages);
            h.platform.dm(user, &format!("{token} what do you think?")).await;
            sent.entry(user).or_default().push(token);
        }
        tally.messages += 1;
        handled_since_start += 1;
        match rng.random_range(0..100) {
            0..6 => {
                h.platform.storm(user, &mut rng);
                tally.storms += 1;
            }
            6..12 => {
                h.platform.drop_connection(&mut rng);
                tally.dropped_connections += 1;
            }
            12..15 => {
                h.platform.inbound_fault(&mut rng);
                tally.inbound_faults += 1;
            }
            15..19 => {
                faults.stalls.fetch_add(1, Ordering::SeqCst);
                tally.model_stalls += 1;
            }
            19..23 => {
                faults.cuts.fetch_add(1, Ordering::SeqCst);
                tally.model_cuts += 1;
            }
            _ => {}
        }
        if tokio::time::Instant::now() >= next_kill {
            if !P::REDELIVERS {
                // Discord keeps nothing for a bot that is down: only kill once what was
                // sent reached the gateway.
                let port = h.daemon.as_ref().expect("running").port;
                wait_for_inbound(port, P::NAME, handled_since_start).await;
            }
            if rng.random_bool(0.4) {
                // The worst moment: a reply's finals were just recorded and are being sent,
                // or a send was recorded and the run goes on.
                let count = || mode.worst_moments().iter().map(|record| h.ledger_count(record)).sum::<usize>();
                let before = count();
                let recorded = tokio::time::timeout(Duration::from_secs(3), async {
                    while count() <= before {
                        tokio::time::sleep(Duration::from_millis(5)).await;
                    }
                })
                .await;
                tally.worst_moment_kills += usize::from(recorded.is_ok());
            }
            h.crash_and_restart_after(Duration::from_millis(rng.random_range(300..2000))).await;
            handled_since_start = 0;
            tally.kills += 1;
            next_kill = tokio::time::Instant::now() + Duration::from_millis(rng.random_range(1500..5000));
        }
        tokio::time::sleep(Duration::from_millis(rng.random_range(20..250))).await;
    }

    // Faults off; one more clean restart runs whatever was kept for later.
    faults.stalls.store(0, Ordering::SeqCst);
    faults.cuts.store(0, Ordering::SeqCst);
    if !P::REDELIVERS {
        let port = h.daemon.as_ref().expect("running").port;
        wait_for_inbound(port, P::NAME, handled_since_start).await;
    }
    h.crash_and_restart_after(Duration::from_millis(500)).await;
    // A last message per user: once it is answered, everything before it in that chat is.
    for user in 1..=USERS {
        // In the sends mode an odd one (`end-11`, `end-21`…): answered in the reply's text,
        // which comes after every tool send a run makes, so once it shows, all has.
        let token = end_token(mode, user);
        h.platform.dm(user, &format!("{token} that is all")).await;
        sent.entry(user).or_default().push(token);
    }
    for user in 1..=USERS {
        let end = format!("{} done.", end_token(mode, user));
        let waited = tokio::time::timeout(PATIENCE * 3, async {
            while !h.platform.dm_messages(user).iter().any(|m| m.visible.trim().ends_with(&end)) {
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
        })
        .await;
        if waited.is_err() {
            keep_for_inspection(&h, seed);
            panic!(
                "{} (seed {seed}): user {user}'s last message was never answered; the chat shows {:?}",
                P::NAME,
                h.platform.dm_messages(user).iter().map(|m| m.visible.clone()).collect::<Vec<_>>()
            );
        }
    }

    let mut verdict = Verdict::default();
    for (user, tokens) in &sent {
        let shown = h.platform.dm_messages(*user);
        // A preview Ferry knew of is in its ledger; one it never learned the id of is not.
        let chat = h.platform.dm_chat_id(*user);
        let (unknown, known): (Vec<Shown>, Vec<Shown>) = shown.into_iter().partition(|message| {
            let recorded =
                format!("\"id\":\"{chat}\"}},\"thread_id\":null}},\"message_id\":\"{}\"", message.message_id);
            !is_whole(message.visible.trim()) && h.ledger_count(&recorded) == 0
        });
        verdict.unknown_previews.extend(unknown.into_iter().map(|message| message.visible));
        match mode {
            Mode::Replies => check_chat(&known, tokens, &mut verdict),
            // Steering interleaves one message's tool send with another's reply: each kind
            // keeps its own order.
            Mode::Sends => {
                let (even, odd): (Vec<String>, Vec<String>) = tokens.iter().cloned().partition(|t| is_even(t));
                check_chat_of(&known, &even, is_even, &mut verdict);
                check_chat_of(&known, &odd, |token| !is_even(token), &mut verdict);
                // Each tool send carries its file, once: a repeated upload would show its
                // caption's tokens twice, a lost one a caption alone.
                let tool_send = format!("{}tool ", oracle::PREAMBLE);
                verdict.without_file.extend(
                    known
                        .iter()
                        .filter(|message| message.visible.starts_with(&tool_send) && message.files != 1)
                        .map(|message| format!("{} ({} files)", message.visible, message.files)),
                );
            }
        }
    }
    println!("{} (seed {seed}): {tally:?}", P::NAME);
    println!("{} (seed {seed}): {verdict}", P::NAME);
    // Where each lost message got to: how often the model was asked about it.
    for token in &verdict.lost {
        let asked = asked_about(&h.openai.requests(), token);
        let user = sent.iter().find(|(_, sent)| sent.contains(token)).map(|(user, _)| *user).unwrap_or_default();
        let chat: Vec<String> = h.platform.dm_messages(user).into_iter().map(|m| m.visible).collect();
        println!("lost {token} (user {user}): the model was asked about it {asked} times; the chat shows {chat:?}");
    }
    keep_for_inspection(&h, seed);
    let context = format!("{} (seed {seed}): {verdict:?}", P::NAME);
    assert!(verdict.lost.is_empty(), "lost: {context}");
    assert!(verdict.out_of_order.is_empty(), "out of order: {context}");
    assert!(verdict.duplicated.is_empty(), "answered twice: {context}");
    assert!(verdict.half_written.is_empty(), "half-written or frozen: {context}");
    assert!(verdict.leaks.is_empty(), "NO_REPLY leaked: {context}");
    assert!(verdict.without_file.is_empty(), "a tool send without its file: {context}");
    if P::NAME != "telegram" {
        assert!(verdict.repeated_sends.is_empty(), "only Telegram may repeat a send: {context}");
        assert!(verdict.unknown_previews.is_empty(), "only Telegram may lose track of a preview: {context}");
    }
}

/// With `FERRY_CHAOS_KEEP=<dir>`, copies the gateway's state (journal, ledger, transcripts)
/// and the model's requests there: what a failure's seed alone does not show.
fn keep_for_inspection<P: ChaosPlatform>(h: &Harness<P>, seed: u64) {
    let Ok(dir) = std::env::var("FERRY_CHAOS_KEEP") else { return };
    let dir = std::path::Path::new(&dir).join(format!("{}-{seed}", P::NAME));
    let home = h.daemon.as_ref().and_then(|daemon| daemon.home.as_ref()).expect("a running gateway");
    std::fs::create_dir_all(&dir).expect("keep dir");
    let copied = std::process::Command::new("cp").arg("-r").arg(home.path()).arg(dir.join("home")).status();
    assert!(copied.is_ok_and(|status| status.success()), "copying the gateway's home to {}", dir.display());
    let all = h.openai.requests();
    let requests: Vec<&serde_json::Value> = all.iter().map(|request| &request.body).collect();
    std::fs::write(dir.join("requests.json"), serde_json::to_vec_pretty(&requests).expect("json")).expect("write");
    let chats: BTreeMap<u64, Vec<String>> = (1..=USERS)
        .map(|user| (user, h.platform.dm_messages(user).into_iter().map(|message| message.visible).collect()))
        .collect();
    std::fs::write(dir.join("chats.json"), serde_json::to_vec_pretty(&chats).expect("json")).expect("write");
    println!("kept the gateway's state and the model's requests in {}", dir.display());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn telegram_answers_every_message_exactly_once_through_kills_and_faults() {
    chaos::<Telegram>(Mode::Replies).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn discord_answers_every_message_exactly_once_through_kills_and_faults() {
    chaos::<Discord>(Mode::Replies).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn slack_answers_every_message_exactly_once_through_kills_and_faults() {
    chaos::<Slack>(Mode::Replies).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn telegram_sends_tool_messages_and_blocks_exactly_once_through_kills_and_faults() {
    chaos::<Telegram>(Mode::Sends).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn discord_sends_tool_messages_and_blocks_exactly_once_through_kills_and_faults() {
    chaos::<Discord>(Mode::Sends).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn slack_sends_tool_messages_and_blocks_exactly_once_through_kills_and_faults() {
    chaos::<Slack>(Mode::Sends).await;
}

/// A run killed once its `message` call was recorded (written before the call is made; the
/// send may be done or under way), while the model writes the answer, resumes after the
/// restart from that call: it makes the call again under the same id, whose send Discord
/// recognizes by its nonce, the message is in the chat once and the answer follows it.
/// Re-run from the start instead, the model would send the message again (a new call, a
/// new key).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_run_killed_after_a_message_send_resumes_from_it_without_sending_it_again() {
    // The answer streams in a preview: a final reply after a `message` send to the same chat
    // is left out (the tool answered there).
    let keys = "dm_policy = \"open\"\nallow_from = [\"*\"]\nstreaming = \"partial\"";
    let mut h = Harness::<Discord>::start_with(keys, "").await;
    h.openai.set_responder(|request: &RecordedRequest| {
        let messages = request.body["messages"].as_array().cloned().unwrap_or_default();
        if messages.iter().any(|message| message["role"] == "tool") {
            // Slow enough to be killed in the middle of.
            let pieces = ["The answer ", "comes ", "after ", "the note."];
            return Turn::Reply(ferry_fakes::Reply::text(pieces).with_chunk_delay(Duration::from_millis(700)));
        }
        let arguments = serde_json::json!({ "text": "A note sent by the tool." }).to_string();
        Turn::tool_calls([ferry_fakes::ToolCall::new(format!("call-{}", messages.len()), "message", arguments)])
    });
    h.platform.dm(1, "please send me a note, then answer").await;
    tokio::time::timeout(PATIENCE, async {
        while h.ledger_count("\"event\":\"step\"") == 0 {
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
    })
    .await
    .expect("the message call is recorded as a step");
    h.crash_and_restart().await;
    let shown = || h.platform.dm_messages(1).into_iter().map(|message| message.visible).collect::<Vec<_>>();
    tokio::time::timeout(PATIENCE, async {
        while !shown().iter().any(|text| text.contains("after the note.")) {
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    })
    .await
    .unwrap_or_else(|_| panic!("the resumed run answered: {:?}", shown()));
    tokio::time::sleep(Duration::from_millis(500)).await;
    let notes = shown().iter().filter(|text| text.contains("A note sent by the tool.")).count();
    assert_eq!(notes, 1, "the note once: {:?}", shown());
    let answers = shown().iter().filter(|text| text.contains("after the note.")).count();
    assert_eq!(answers, 1, "{:?}", shown());
    let message_calls = h
        .openai
        .requests()
        .iter()
        .filter(|request| !request.body["messages"].as_array().is_some_and(|m| m.iter().any(|m| m["role"] == "tool")))
        .count();
    assert_eq!(message_calls, 1, "the model was not asked to send the note again");
}

/// A run that ended, its transcript saved, and was killed while its streamed blocks waited
/// out a 429 storm: after the restart what it said is delivered, each block once, without
/// asking the model again, and the session remembers the answer once. Re-run from the
/// start instead, the model would be asked again with its own answer already in the
/// history (told twice what it said, a model that sees it answered says nothing more, and
/// the blocks not yet sent are lost).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_run_killed_after_it_ended_delivers_what_it_said_without_asking_the_model_again() {
    let keys = "dm_policy = \"open\"\nallow_from = [\"*\"]";
    let tables = "[agents.defaults]\nblock_streaming = true\n\
                  block_streaming_chunk = { min_chars = 20, max_chars = 400 }\n\
                  block_streaming_coalesce = { idle_ms = 50 }";
    let mut h = Harness::<Telegram>::start_with(keys, tables).await;
    h.openai.set_responder(|request: &RecordedRequest| {
        if request.last_user_text().is_some_and(|text| text.contains("and now")) {
            return Turn::text(["Nothing more."]);
        }
        Turn::text(["The first block of the answer.", "\n\n", "The second block of the answer."])
    });
    // Every send waits out a storm: the run ends long before its blocks are on the platform.
    h.platform.fake().rate_limit_storm("sendMessage", Duration::from_secs(4), 1);
    h.platform.dm(1, "tell me two things").await;
    tokio::time::timeout(PATIENCE, async {
        while h.openai.requests().is_empty() {
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
    })
    .await
    .expect("the model is asked");
    // Killed once the run has ended (its end recorded; the storm holds its blocks for a
    // while longer).
    let _ = tokio::time::timeout(Duration::from_secs(2), async {
        while h.ledger_count("\"ended\":true") == 0 {
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
    })
    .await;
    h.crash_and_restart().await;
    let shown = || h.platform.dm_messages(1).into_iter().map(|message| message.visible).collect::<Vec<_>>();
    tokio::time::timeout(PATIENCE, async {
        while !shown().iter().any(|text| text.contains("second block")) {
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    })
    .await
    .unwrap_or_else(|_| panic!("the answer was delivered after the restart: {:?}", shown()));
    tokio::time::sleep(Duration::from_millis(500)).await;
    for block in ["first block", "second block"] {
        assert_eq!(shown().iter().filter(|text| text.contains(block)).count(), 1, "{block} once: {:?}", shown());
    }
    assert_eq!(h.openai.requests().len(), 1, "the model was not asked again");

    h.platform.dm(1, "and now?").await;
    h.until(|platform| platform.dm_messages(1), |shown| shown.iter().any(|m| m.visible.contains("Nothing more"))).await;
    let requests = h.openai.requests();
    let history = serde_json::to_string(&requests.last().expect("a second request").body["messages"]).unwrap();
    assert_eq!(history.matches("The first block").count(), 1, "the session has the answer once: {history}");
    assert_eq!(history.matches("tell me two things").count(), 1, "and the question once: {history}");
}

/// A scheduled task's reply was recorded but not yet on the platform (a 429 storm held it)
/// when the gateway was killed. The restart delivers it from the record, once, and records
/// how the fire ended: the job fires again on schedule, rather than only after the sweep of
/// fires that ended unreported (a minute or more) lets it.
#[tokio::test]
async fn a_scheduled_fire_killed_before_its_reply_landed_is_delivered_once_and_the_job_fires_again() {
    let keys = "dm_policy = \"open\"\nallow_from = [\"*\"]\nstreaming = \"off\"";
    let mut h = Harness::<Telegram>::start_with(keys, "").await;
    let forecasts = Arc::new(AtomicU32::new(0));
    let counter = forecasts.clone();
    h.openai.set_responder(move |request: &RecordedRequest| {
        let last_is_result = request.body["messages"]
            .as_array()
            .and_then(|messages| messages.last())
            .is_some_and(|message| message["role"] == "tool");
        if last_is_result {
            return Turn::text(["Noted."]);
        }
        if request.last_user_text().is_some_and(|text| text.contains("every 10 seconds")) {
            let arguments =
                serde_json::json!({ "action": "add", "schedule": { "every": "10s" }, "task": "Check the weather" });
            return Turn::tool_calls([ferry_fakes::ToolCall::new("call-cron", "cron", arguments.to_string())]);
        }
        // Slow enough to start a storm before the reply is sent.
        let forecast = format!("Forecast {}.", counter.fetch_add(1, Ordering::SeqCst));
        Turn::Reply(Reply::text(["", &forecast]).with_chunk_delay(Duration::from_millis(500)))
    });
    h.platform.dm(1, "check the weather every 10 seconds").await;
    h.until(|platform| platform.dm_messages(1), |shown| shown.iter().any(|m| m.visible == "Noted.")).await;
    // The first fire's reply is recorded, then held by a storm; the gateway dies under it.
    let asked = tokio::time::timeout(PATIENCE, async {
        while h.openai.requests().len() < 3 {
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
    })
    .await;
    assert!(asked.is_ok(), "the job fired");
    h.platform.fake().rate_limit_storm("sendMessage", Duration::from_secs(4), 1);
    let recorded = tokio::time::timeout(PATIENCE, async {
        while h.ledger_count("Forecast 0.") == 0 {
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
    })
    .await;
    assert!(recorded.is_ok(), "the first fire's reply was recorded");
    assert!(!h.platform.dm_messages(1).iter().any(|m| m.visible.contains("Forecast")), "and not delivered yet");
    h.crash_and_restart().await;

    let fired_again = tokio::time::timeout(Duration::from_secs(25), async {
        while !h.platform.dm_messages(1).iter().any(|m| m.visible == "Forecast 1.") {
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    })
    .await;
    let shown: Vec<String> = h.platform.dm_messages(1).into_iter().map(|m| m.visible).collect();
    assert!(fired_again.is_ok(), "the job fired again on schedule after the restart: {shown:?}");
    assert_eq!(shown.iter().filter(|text| *text == "Forecast 0.").count(), 1, "the recorded reply once: {shown:?}");
}
