//! Discord end to end: the real `ferry gateway` binary with the Discord adapter, against the
//! fake Discord (REST + gateway) and the fake OpenAI server. The checks every adapter must
//! pass live in the conformance suite (`tests/conformance/`); these are the Discord-specific
//! ones: threads, the nickname mention form, the 17-line limit, gateway resumes, per-channel
//! 429s and a gateway that stays responsive during a long run.

use std::process::{Command, Stdio};
use std::time::Duration;

use ferry_fakes::{DiscordSentMessage, DiscordUser, FakeDiscord, FakeOpenAi, Mention, Reply, Turn};
use serde_json::json;

#[path = "common/daemon.rs"]
mod daemon;

use daemon::{Daemon, PATIENCE, daemon_in, spawn_gateway, wait_for_inbound};

const TOKEN: &str = "fake.discord.token";
const GUILD: u64 = 1;
/// Open DMs, and guild 1's channels 10 and 30 allowlisted (mention required by default).
const ACCESS: &str =
    "dm_policy = \"open\"\nallow_from = [\"*\"]\n\n[channels.discord.guilds.\"1\"]\nchannels = [\"10\", \"30\"]";

fn config(token: &str, discord: &FakeDiscord, access: &str) -> String {
    format!("[channels.discord]\nenabled = true\nbot_token = \"{token}\"\napi_url = \"{}\"\n{access}\n", discord.url())
}

async fn fakes() -> (FakeDiscord, FakeOpenAi) {
    (FakeDiscord::start(TOKEN).await.unwrap(), FakeOpenAi::start().await.unwrap())
}

async fn daemon(discord: &FakeDiscord, openai: &FakeOpenAi, access: &str) -> Daemon {
    let daemon = daemon_in(tempfile::tempdir().unwrap(), &config(TOKEN, discord, access), openai, "discord").await;
    tokio::time::timeout(PATIENCE, discord.wait_for_session()).await.expect("the gateway session is live");
    daemon
}

async fn wait_for(
    discord: &FakeDiscord,
    channel: u64,
    done: impl Fn(&[DiscordSentMessage]) -> bool,
) -> Vec<DiscordSentMessage> {
    tokio::time::timeout(PATIENCE, async {
        loop {
            let shown = discord.messages_in(channel);
            if done(&shown) {
                return shown;
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    })
    .await
    .unwrap_or_else(|_| panic!("channel {channel} shows {:?}", discord.messages_in(channel)))
}

/// The DM with [`user`], once a first message there was answered (the session is live).
async fn warmed_up_dm(discord: &FakeDiscord, openai: &FakeOpenAi) -> u64 {
    let (dm, _) = discord.dm(&user(), "warm-up");
    openai.push(Turn::text(["warm"]));
    wait_for(discord, dm, |shown| !shown.is_empty()).await;
    dm
}

fn user() -> DiscordUser {
    DiscordUser::new(4242, "ada")
}

/// A mentioned message in channel 30 answered `pong`: what came before it in the pipeline
/// has been handled.
async fn sentinel(discord: &FakeDiscord, openai: &FakeOpenAi) {
    openai.push(Turn::text(["pong"]));
    discord.guild_message(GUILD, 30, &user(), "ping", Mention::Plain);
    wait_for(discord, 30, |shown| shown.iter().any(|m| m.content == "pong")).await;
}

#[tokio::test]
async fn a_thread_message_is_answered_in_the_thread_and_unlisted_channels_are_ignored() {
    let (discord, openai) = fakes().await;
    openai.push(Turn::text(["Answered in the thread."]));
    let daemon = daemon(&discord, &openai, ACCESS).await;
    discord.guild_message(GUILD, 20, &user(), "not an allowlisted channel", Mention::Plain);
    discord.thread_message(GUILD, 10, 11, &user(), "where am I?", Mention::Plain);
    let shown = wait_for(&discord, 11, |shown| !shown.is_empty()).await;
    assert_eq!(shown[0].content, "Answered in the thread.");
    sentinel(&discord, &openai).await;
    assert!(discord.messages_in(10).is_empty() && discord.messages_in(20).is_empty());
    assert_eq!(openai.requests().len(), 2, "the unlisted channel did not run");
    let home = daemon.home.as_ref().expect("home").path();
    let listed = Command::new(env!("CARGO_BIN_EXE_ferry"))
        .args(["sessions", "list"])
        .env_clear()
        .env("HOME", home)
        .current_dir(home)
        .output()
        .unwrap();
    let listed = String::from_utf8_lossy(&listed.stdout);
    assert!(listed.contains("agent:main:discord:channel:10:thread:11"), "a thread session: {listed}");
    assert!(listed.contains("agent:main:discord:channel:30"), "{listed}");
}

#[tokio::test]
async fn nickname_mentions_count_and_unmentioned_messages_wait_as_context() {
    let (discord, openai) = fakes().await;
    openai.push(Turn::text(["Heard you."]));
    let daemon = daemon(&discord, &openai, ACCESS).await;
    discord.guild_message(GUILD, 10, &user(), "talking among ourselves", Mention::None);
    // Taken before the mention is sent (two sent in the same instant may arrive swapped).
    wait_for_inbound(daemon.port, "discord", 1).await;
    discord.guild_message(GUILD, 10, &user(), "what do you say?", Mention::Nickname);
    let shown = wait_for(&discord, 10, |shown| !shown.is_empty()).await;
    assert_eq!(shown[0].content, "Heard you.");
    let prompt = openai.requests()[0].body["messages"].to_string();
    assert!(prompt.contains("talking among ourselves") && prompt.contains("what do you say?"), "{prompt}");
    assert!(!prompt.contains(&format!("<@!{}>", discord.bot_id())), "the mention markup is not shown to the model");
    assert_eq!(openai.requests().len(), 1);
}

#[tokio::test]
async fn a_3000_character_reply_of_40_lines_arrives_within_2000_characters_and_17_lines_per_message() {
    let (discord, openai) = fakes().await;
    let lines: Vec<String> = (0..40).map(|i| format!("{i:02} {}", "word ".repeat(14).trim_end())).collect();
    let reply = lines.join("\n");
    assert!((2_900..3_200).contains(&reply.chars().count()), "{}", reply.chars().count());
    openai.push(Turn::text([reply]));
    let _daemon = daemon(&discord, &openai, ACCESS).await;
    let (dm, _) = discord.dm(&user(), "forty lines please");
    let shown = wait_for(&discord, dm, |shown| shown.iter().any(|m| m.content.contains("39 word"))).await;
    assert!(shown.len() >= 3, "40 lines need at least 3 messages of 17: {}", shown.len());
    for message in &shown {
        assert!(message.content.chars().count() <= 2000);
        assert!(message.content.lines().count() <= 17, "{} lines", message.content.lines().count());
    }
    let all: Vec<&str> = shown.iter().flat_map(|m| m.content.lines()).filter(|l| !l.trim().is_empty()).collect();
    assert_eq!(all, lines.iter().map(String::as_str).collect::<Vec<_>>(), "every line once, in order");
}

#[tokio::test]
async fn a_gateway_disconnect_mid_run_resumes_and_the_reply_arrives_exactly_once() {
    let (discord, openai) = fakes().await;
    let slow = Reply::text(["Still ", "here ", "after the resume."]).with_chunk_delay(Duration::from_millis(600));
    openai.push(Turn::Reply(slow));
    let _daemon = daemon(&discord, &openai, ACCESS).await;
    let (dm, _) = discord.dm(&user(), "a question before the network blips");
    tokio::time::timeout(PATIENCE, openai.wait_for_request(0)).await.expect("the run started");
    // Discord replays the whole session on resume, the answered message included.
    discord.replay_all_on_next_resume();
    discord.disconnect();
    tokio::time::timeout(PATIENCE, discord.wait_for_resumes(1)).await.expect("serenity resumed");
    let shown = wait_for(&discord, dm, |shown| !shown.is_empty()).await;
    assert_eq!(shown[0].content, "Still here after the resume.");
    sentinel(&discord, &openai).await;
    assert_eq!(discord.messages_in(dm).len(), 1, "answered once");
    assert_eq!(openai.requests().len(), 2, "the replayed message did not run again");
    assert_eq!(discord.identify_count(), 1, "resumed, not re-identified");
}

#[tokio::test]
async fn a_429_storm_on_one_channel_delays_it_but_loses_nothing_and_other_channels_go_on() {
    let (discord, openai) = fakes().await;
    let access = "dm_policy = \"open\"\nallow_from = [\"*\"]\n\n[channels.discord.guilds.\"1\"]\nchannels = [\"10\", \"30\"]\nrequire_mention = false\n\n[messages.queue]\nmode = \"followup\"\ndebounce_ms = 0";
    let _daemon = daemon(&discord, &openai, access).await;
    discord.add_guild_channel(GUILD, 10);
    discord.rate_limit_storm(10, Duration::from_millis(2000));
    for i in 0..3 {
        openai.push(Turn::text([format!("stormy {i}")]));
        discord.guild_message(GUILD, 10, &user(), &format!("question {i}"), Mention::None);
        tokio::time::timeout(PATIENCE, openai.wait_for_request(i)).await.expect("each question runs");
    }
    openai.push(Turn::text(["calm"]));
    discord.guild_message(GUILD, 30, &user(), "and here?", Mention::None);
    let calm = wait_for(&discord, 30, |shown| !shown.is_empty()).await;
    assert_eq!(calm[0].content, "calm");
    let stormy = wait_for(&discord, 10, |shown| shown.len() >= 3).await;
    let mut texts: Vec<_> = stormy.iter().map(|m| m.content.clone()).collect();
    texts.sort();
    assert_eq!(texts, ["stormy 0", "stormy 1", "stormy 2"], "each exactly once");
    assert!(discord.rate_limited_count() >= 1, "the storm was hit");
}

#[tokio::test]
async fn the_gateway_stays_responsive_while_a_long_run_proceeds() {
    let (discord, openai) = fakes().await;
    // The first run stalls after one delta and does not finish during the test.
    openai.push(Turn::stall(Reply::text(["Thinking", " for a long time"]), 1));
    openai.push(Turn::text(["Meanwhile, hello."]));
    let _daemon = daemon(&discord, &openai, ACCESS).await;
    let (long_dm, _) = discord.dm(&user(), "a question that takes long");
    tokio::time::timeout(PATIENCE, openai.wait_for_request(0)).await.expect("the long run started");
    let heartbeats = discord.heartbeat_count();
    // Another session (DMs share the main session by default): a guild channel.
    discord.guild_message(GUILD, 30, &DiscordUser::new(777, "bea"), "quick one", Mention::Plain);
    let shown = wait_for(&discord, 30, |shown| !shown.is_empty()).await;
    assert_eq!(shown[0].content, "Meanwhile, hello.");
    tokio::time::timeout(PATIENCE, discord.wait_for_heartbeats(heartbeats + 2)).await.expect("heartbeats go on");
    assert!(discord.messages_in(long_dm).is_empty(), "the long run is still going");
    assert_eq!(discord.identify_count(), 1, "the session was never lost");
}

#[tokio::test]
async fn a_wrong_token_is_a_clear_error_and_the_gateway_serves_on() {
    let (discord, openai) = fakes().await;
    let home = tempfile::tempdir().unwrap();
    let (child, port) = spawn_gateway(home.path(), &config("WRONG.token", &discord, ""), &openai, Stdio::piped());
    // Stopped for good (a refused token is not retried), with the reason for the operator.
    let health = daemon::channel_in_state(port, "discord", "stopped").await;
    let reason = daemon::channel_entry(&health, "discord").unwrap()["reason"].as_str().unwrap_or_default().to_owned();
    assert!(reason.contains("bot_token"), "{health}");
    assert_eq!(health["ok"], false, "an enabled channel is not running: {health}");
    assert_eq!(daemon::channel_entry(&health, "webchat").unwrap()["state"], "running", "the web chat still is");
    Command::new("kill").args(["-TERM", &child.id().to_string()]).status().unwrap();
    let output = child.wait_with_output().unwrap();
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(stderr.contains("discord channel did not start") && stderr.contains("bot_token"), "{stderr}");
    assert!(!stderr.contains("WRONG.token"), "the token is not logged");
}

#[tokio::test]
async fn a_session_closed_for_good_shows_the_channel_stopped_in_healthz() {
    let (discord, openai) = fakes().await;
    let gateway = daemon(&discord, &openai, "").await;
    let discord_state = |health: &serde_json::Value| {
        health["channels"].as_array().unwrap().iter().find(|c| c["name"] == "discord").map(|c| c["state"].clone())
    };
    assert_eq!(discord_state(&daemon::health(gateway.port).await), Some(serde_json::json!("running")));

    // Discord closes the session with 4004: the token was revoked. The supervisor starts the
    // channel again, as it does whatever stopped it, and the platform refusing the token then
    // stops it for good.
    discord.revoke_session();
    let health = daemon::channel_in_state(gateway.port, "discord", "stopped").await;
    assert_eq!(health["ok"], false, "{health}");
    let identifies = discord.identify_count();
    tokio::time::sleep(Duration::from_secs(3)).await;
    assert_eq!(discord.identify_count(), identifies, "a refused token is not tried again");
    assert_eq!(discord_state(&daemon::health(gateway.port).await), Some(serde_json::json!("stopped")));
}

#[tokio::test]
async fn a_gateway_closed_with_a_code_that_is_not_resumed_comes_back_by_itself() {
    let (discord, openai) = fakes().await;
    let gateway = daemon(&discord, &openai, ACCESS).await;
    let dm = warmed_up_dm(&discord, &openai).await;
    let identifies = discord.identify_count();

    // 4014 (disallowed intents, say while the operator toggles the Message Content intent):
    // serenity gives the session up for good, and the channel's inbound ends.
    discord.close_with(4014);
    let health = daemon::channel_in_state(gateway.port, "discord", "retrying").await;
    let entry = daemon::channel_entry(&health, "discord").unwrap().clone();
    assert!(entry["lastError"].as_str().is_some_and(|error| !error.is_empty()), "{health}");
    daemon::channel_in_state(gateway.port, "discord", "running").await;
    tokio::time::timeout(PATIENCE, async {
        while discord.identify_count() == identifies {
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    })
    .await
    .expect("a new session");

    openai.push(Turn::text(["Back again."]));
    discord.dm(&user(), "are you there?");
    let shown = wait_for(&discord, dm, |shown| shown.iter().any(|m| m.content == "Back again.")).await;
    assert_eq!(shown.iter().filter(|m| m.content == "Back again.").count(), 1);
}

#[tokio::test]
async fn with_previews_on_one_message_is_edited_at_most_every_1_2_seconds_into_the_final() {
    let (discord, openai) = fakes().await;
    let pieces = ["The deploy finished ", "at 10:02 and every ", "check passed; ", "nothing else ", "to do today."];
    openai.push(Turn::Reply(Reply::text(pieces).with_chunk_delay(Duration::from_millis(500))));
    let _daemon = daemon(&discord, &openai, &format!("streaming = \"partial\"\n{ACCESS}")).await;
    let (dm, _) = discord.dm(&user(), "status?");
    let full = pieces.concat();
    let shown = wait_for(&discord, dm, |shown| shown.first().is_some_and(|m| m.content.trim() == full)).await;
    assert_eq!(shown.len(), 1, "one message, edited in place: {shown:?}");
    assert!(shown[0].edits >= 1, "the preview was edited into the final");
    let calls: Vec<_> = discord
        .calls()
        .into_iter()
        .filter(|call| call.channel_id == Some(dm) && (call.is_create_message() || call.is_edit_message()))
        .map(|call| call.at)
        .collect();
    for pair in calls.windows(2) {
        assert!(pair[1] - pair[0] >= Duration::from_millis(1150), "at most one edit every 1.2 s: {calls:?}");
    }
    assert!(discord.typing().contains(&dm), "typing was shown");
}

#[tokio::test]
async fn reply_to_current_threads_the_answer_to_the_triggering_message() {
    let (discord, openai) = fakes().await;
    openai.push(Turn::text(["[[reply_to_current]] Yes, that one."]));
    let _daemon = daemon(&discord, &openai, ACCESS).await;
    let question = discord.guild_message(GUILD, 10, &user(), "is this the right channel?", Mention::Plain);
    let shown = wait_for(&discord, 10, |shown| !shown.is_empty()).await;
    assert_eq!(shown[0].content.trim(), "Yes, that one.");
    assert_eq!(shown[0].reply_to, Some(question), "sent with a message_reference to the question");
}

#[tokio::test]
async fn a_guild_listed_without_channels_admits_every_channel_of_that_guild_only() {
    let (discord, openai) = fakes().await;
    openai.push(Turn::text(["Any channel of guild 2."]));
    let access = "[channels.discord.guilds.\"2\"]\nrequire_mention = false\n\n[channels.discord.guilds.\"1\"]\nchannels = [\"30\"]";
    let _daemon = daemon(&discord, &openai, access).await;
    discord.guild_message(3, 40, &user(), "another guild", Mention::Plain);
    discord.guild_message(2, 50, &user(), "no mention needed here", Mention::None);
    let shown = wait_for(&discord, 50, |shown| !shown.is_empty()).await;
    assert_eq!(shown[0].content, "Any channel of guild 2.");
    sentinel(&discord, &openai).await;
    assert!(discord.messages_in(40).is_empty());
    assert_eq!(openai.requests().len(), 2, "the unlisted guild did not run");
}

#[tokio::test]
async fn an_unknown_dm_gets_a_pairing_code_and_other_bots_are_ignored() {
    let (discord, openai) = fakes().await;
    let access = "[channels.discord.guilds.\"1\"]\nchannels = [\"30\"]";
    let _daemon = daemon(&discord, &openai, access).await;
    discord.guild_message(GUILD, 30, &DiscordUser::bot(99, "otherbot"), "beep boop", Mention::Plain);
    let (dm, _) = discord.dm(&DiscordUser::new(5150, "stranger"), "hello?");
    let shown = wait_for(&discord, dm, |shown| !shown.is_empty()).await;
    assert!(shown[0].content.contains("ferry pairing approve discord"), "{}", shown[0].content);
    sentinel(&discord, &openai).await;
    assert_eq!(discord.messages_in(30).len(), 1, "only the sentinel's answer, nothing for the bot");
    assert_eq!(openai.requests().len(), 1, "no run for the stranger or the bot");
}

#[tokio::test]
async fn malformed_gateway_events_are_skipped_and_the_channel_keeps_answering() {
    let (discord, openai) = fakes().await;
    let gateway = daemon(&discord, &openai, ACCESS).await;
    let dm = warmed_up_dm(&discord, &openai).await;
    let author = user().to_json();
    for data in [
        json!({"id": "not-a-snowflake", "channel_id": dm.to_string(), "author": author, "content": "x"}),
        json!({"id": "77", "channel_id": dm.to_string(), "author": author, "content": 42}),
        json!({"id": "78", "channel_id": dm.to_string(), "content": "no author"}),
        json!({"id": "79", "channel_id": dm.to_string(), "author": author, "content": "x", "type": 123456,
               "timestamp": "yesterday", "mentions": "everyone", "attachments": [{"id": []}]}),
        json!(null),
        json!("a string"),
    ] {
        discord.inject_raw("MESSAGE_CREATE", data);
    }
    discord.inject_raw("GUILD_CREATE", json!({"id": {"nested": true}}));
    discord.inject_raw("NOT_AN_EVENT_DISCORD_HAS", json!([1, 2, 3]));
    openai.push(Turn::text(["still here"]));
    discord.inject_message(dm, &user(), "are you there?");
    let shown = wait_for(&discord, dm, |shown| shown.iter().any(|m| m.content == "still here")).await;
    assert_eq!(shown.len(), 2, "nothing was answered for the malformed events: {shown:?}");
    daemon::assert_running(gateway.port, "discord").await;
}

#[tokio::test]
async fn no_log_level_writes_the_bot_token_or_the_model_key() {
    let (discord, openai) = fakes().await;
    openai.push(Turn::text(["hi"]));
    let gateway = daemon::gateway_at_trace(&config(TOKEN, &discord, ACCESS), &openai, "discord").await;
    let (dm, _) = discord.dm(&user(), "hello");
    wait_for(&discord, dm, |shown| !shown.is_empty()).await;
    daemon::assert_log_free_of(&gateway, &[TOKEN, "sk-test"]);
}

#[tokio::test]
async fn a_gateway_event_that_panics_serenity_restarts_the_shard_and_later_messages_are_answered() {
    let (discord, openai) = fakes().await;
    let gateway = daemon(&discord, &openai, ACCESS).await;
    let dm = warmed_up_dm(&discord, &openai).await;
    // serenity 0.12.5's ImageHash parser slices this 32-byte avatar inside a character and
    // panics in the shard runner, which then stops for good unless Ferry restarts it.
    let mut author = user().to_json();
    author["avatar"] = json!(format!("a{}a", "é".repeat(15)));
    discord.inject_raw(
        "MESSAGE_CREATE",
        json!({"id": "77", "channel_id": dm.to_string(), "author": author, "content": "poison",
               "timestamp": "2024-01-01T00:00:00+00:00", "type": 0, "tts": false, "mention_everyone": false,
               "mentions": [], "mention_roles": [], "attachments": [], "embeds": [], "pinned": false}),
    );
    tokio::time::timeout(PATIENCE, async {
        while discord.identify_count() < 2 {
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    })
    .await
    .expect("the shard identifies again");
    tokio::time::timeout(PATIENCE, discord.wait_for_session()).await.expect("a live session");
    openai.push(Turn::text(["still here"]));
    discord.inject_message(dm, &user(), "are you there?");
    let shown = wait_for(&discord, dm, |shown| shown.iter().any(|m| m.content == "still here")).await;
    assert_eq!(shown.len(), 2, "the poisoned event was not answered: {shown:?}");
    daemon::assert_running(gateway.port, "discord").await;
}

/// The catch-up positions the gateway saved in `home` (one machine: a file in the state
/// directory), once they name `message` as the last seen in `channel`.
async fn positions_saved(home: &std::path::Path, channel: u64, message: u64) {
    let file = home.join(".local/share/ferry/channels/discord.default.positions.json");
    let expected = format!("\"{channel}\":{{\"last\":\"{message}\"");
    tokio::time::timeout(PATIENCE, async {
        loop {
            if std::fs::read_to_string(&file).is_ok_and(|saved| saved.contains(&expected)) {
                return;
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    })
    .await
    .unwrap_or_else(|_| panic!("{} never named {message} in {channel}", file.display()));
}

/// The text of the last message of a model request: the one it answers.
fn asked(request: &ferry_fakes::RecordedRequest) -> String {
    request.body["messages"].as_array().and_then(|messages| messages.last()).map(|m| m.to_string()).unwrap_or_default()
}

#[tokio::test]
async fn messages_written_while_the_gateway_was_down_are_answered_once_each_in_order_after_it_starts() {
    let (discord, openai) = fakes().await;
    // One run per message, so each is answered on its own and in order.
    let access = format!("{ACCESS}\n\n[messages.queue]\nmode = \"followup\"\ndebounce_ms = 0");
    let first = daemon(&discord, &openai, &access).await;
    let dm = warmed_up_dm(&discord, &openai).await;
    sentinel(&discord, &openai).await;
    let home = first.home.as_ref().expect("home").path().to_owned();
    let ping = discord.calls().len(); // nothing read back yet: no history call before the crash
    let last_in_30 = discord.guild_message(GUILD, 30, &user(), "one more", Mention::None);
    wait_for_inbound(first.port, "discord", 3).await;
    positions_saved(&home, 30, last_in_30).await;
    let home = first.crash(); // SIGKILL: the gateway is down until the next start

    // Only the channels' history has these: Discord's gateway never delivers them.
    let bot = discord.bot_id();
    let while_down = [
        (dm, discord.history_only_message(dm, &user(), "first while down")),
        (dm, discord.history_only_message(dm, &user(), "second while down")),
        (30, discord.history_only_message(30, &user(), &format!("<@{bot}> third while down"))),
        (30, discord.history_only_message(30, &DiscordUser::bot(555, "another-bot"), &format!("<@{bot}> a bot"))),
    ];
    assert!(while_down.iter().all(|(_, id)| *id > last_in_30));
    // Discord asks for patience on the first read: it is waited out, not skipped.
    discord.fail_next_history_read(dm, Duration::from_millis(200));
    for answer in ["answer A", "answer B", "answer C"] {
        openai.push(Turn::text([answer]));
    }
    let second = daemon_in(home, &config(TOKEN, &discord, &access), &openai, "discord").await;
    wait_for(&discord, dm, |shown| shown.len() >= 3).await;
    wait_for(&discord, 30, |shown| shown.len() >= 2).await;
    // A message after the catch-up: anything run twice would have shown by its answer.
    openai.push(Turn::text(["after"]));
    discord.guild_message(GUILD, 30, &user(), "and now?", Mention::Plain);
    wait_for(&discord, 30, |shown| shown.iter().any(|m| m.content == "after")).await;

    let questions: Vec<String> = openai.requests().iter().map(asked).collect();
    let position = |text: &str| {
        let found: Vec<usize> = (0..questions.len()).filter(|&i| questions[i].contains(text)).collect();
        assert_eq!(found.len(), 1, "{text:?} answered once: {questions:#?}");
        found[0]
    };
    assert!(position("first while down") < position("second while down"), "in order: {questions:#?}");
    position("third while down");
    // Another bot's message (also missed) is ignored as on the gateway: no seventh run.
    assert_eq!(questions.len(), 6, "warm-up, ping, three missed messages, and now: {questions:#?}");
    assert_eq!(discord.messages_in(dm).len(), 3);
    assert!(discord.rate_limited_count() >= 1, "the 429 was met");
    assert!(discord.calls()[..ping].iter().all(|call| call.method != "GET" || !call.path.ends_with("/messages")));
    drop(second);
}

#[tokio::test]
async fn a_session_that_starts_anew_says_why_in_the_log_at_warn() {
    let (discord, openai) = fakes().await;
    let daemon = daemon::gateway_at_trace(&config(TOKEN, &discord, ACCESS), &openai, "discord").await;
    tokio::time::timeout(PATIENCE, discord.wait_for_session()).await.expect("the gateway session is live");
    // 4009 (session timed out): serenity cannot resume and identifies again, as after a
    // heartbeat that was not acknowledged in time.
    discord.close_with(4009);
    tokio::time::timeout(PATIENCE, async {
        while discord.identify_count() < 2 {
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    })
    .await
    .expect("a second session");
    let log_path = daemon.home.as_ref().unwrap().path().join("stderr.log");
    let warned = |needle: &str| {
        let log = std::fs::read_to_string(&log_path).unwrap_or_default();
        log.lines().any(|line| line.contains("WARN") && line.contains(needle))
    };
    tokio::time::timeout(PATIENCE, async {
        while !warned("session started anew") {
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    })
    .await
    .expect("a WARN line for the new session");
}
