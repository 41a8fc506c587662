//! Hooks (SPEC §9) on the inbound path: plugins that block tools, rewrite or cancel
//! replies, rewrite stored tool results or misbehave, and the operator's executables on
//! `agent:bootstrap` and `command:new`.

use std::path::Path;
use std::time::Duration;

use async_trait::async_trait;
use ferry::agent::ChatMessage;
use ferry::config::InternalHookConfig;
use ferry::hooks::{
    AgentStartChange, BeforeAgentStart, BeforeToolCall, HookResult, MessageSending, Plugin, SendingDecision,
    SessionEvent, ToolCallDecision, ToolResultPersist,
};

use super::{World, open_dms};
use ferry_fakes::{ToolCall, Turn};

/// Blocks the `message` tool, rewrites replies to upper case and cancels those that say
/// "secret", and redacts `current_time` results in the transcript.
struct Guard;

#[async_trait]
impl Plugin for Guard {
    fn name(&self) -> &str {
        "guard"
    }

    async fn before_tool_call(&self, call: &BeforeToolCall) -> HookResult<Option<ToolCallDecision>> {
        Ok((call.tool_name == "message").then(|| ToolCallDecision::Block { reason: "no side messages".into() }))
    }

    async fn message_sending(&self, event: &MessageSending) -> HookResult<Option<SendingDecision>> {
        Ok(Some(if event.text.contains("secret") {
            SendingDecision::Cancel
        } else {
            SendingDecision::Rewrite(event.text.to_uppercase())
        }))
    }

    fn tool_result_persist(&self, event: &ToolResultPersist<'_>) -> Option<String> {
        (event.tool_name == "current_time").then(|| "[redacted]".to_owned())
    }
}

/// Panics in one hook and outlives the timeout in another.
struct Unruly;

#[async_trait]
impl Plugin for Unruly {
    fn name(&self) -> &str {
        "unruly"
    }

    async fn before_agent_start(&self, _event: &BeforeAgentStart) -> HookResult<Option<AgentStartChange>> {
        tokio::time::sleep(Duration::from_secs(3600)).await;
        Ok(None)
    }

    async fn message_sending(&self, _event: &MessageSending) -> HookResult<Option<SendingDecision>> {
        panic!("a plugin panicked on purpose");
    }
}

fn tool_results(body: &serde_json::Value) -> Vec<String> {
    body["messages"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|m| m["role"] == "tool")
        .map(|m| m["content"].as_str().unwrap().to_owned())
        .collect()
}

#[tokio::test]
async fn a_plugin_that_blocks_a_tool_keeps_it_from_running_and_the_model_is_told() {
    let world = World::hooked(open_dms(), |hooks| hooks.register(1, Guard)).await;
    let call = ToolCall::new("call_1", "message", r#"{"text":"Side message."}"#);
    world.fake.push(Turn::tool_calls([call])).push(Turn::text(["done"]));
    world.send(world.dm("42", "go"));
    assert_eq!(world.replies(1).await, ["DONE"]);
    let results = tool_results(&world.request(1).await);
    assert_eq!(results.len(), 1);
    assert!(results[0].starts_with("blocked by a hook: no side messages"), "{results:?}");
    assert!(!world.channel.sent_texts().iter().any(|text| text.contains("Side message")), "the tool never ran");
}

#[tokio::test]
async fn message_sending_cancels_or_rewrites_a_reply() {
    let world = World::hooked(open_dms(), |hooks| hooks.register(1, Guard)).await;
    world.fake.push(Turn::text(["the secret is 42"])).push(Turn::text(["hello there"]));
    world.send(world.dm("42", "first"));
    world.request(0).await;
    world.send(world.dm("42", "second"));
    // One chat's replies go out in order: once the second is there, the first was dropped.
    assert_eq!(world.replies(1).await, ["HELLO THERE"]);
    assert_eq!(world.fake.requests().len(), 2);
}

#[tokio::test]
async fn tool_result_persist_rewrites_what_the_transcript_keeps() {
    let world = World::hooked(open_dms(), |hooks| hooks.register(1, Guard)).await;
    world.fake.push(Turn::tool_calls([ToolCall::new("call_1", "current_time", "{}")])).push(Turn::text(["noon"]));
    let message = world.dm("42", "time?");
    let key = world.dispatcher.session_key_of(&message);
    world.send(message);
    world.replies(1).await;
    assert!(!tool_results(&world.request(1).await)[0].contains("redacted"), "the model saw the real result");
    let store = world.dispatcher.store();
    let session = store.get(key.as_str()).await.unwrap().unwrap();
    let stored: Vec<_> = store
        .history(&session.session_id)
        .await
        .unwrap()
        .into_iter()
        .filter_map(|entry| match entry {
            ChatMessage::ToolResult { content, .. } => Some(content),
            _ => None,
        })
        .collect();
    assert_eq!(stored, ["[redacted]"]);
}

#[tokio::test]
async fn a_plugin_that_panics_or_hangs_does_not_stop_the_reply() {
    let mut config = open_dms();
    config.hooks.timeout_ms = 200;
    let world = World::hooked(config, |hooks| hooks.register(1, Unruly)).await;
    world.fake.push(Turn::text(["still here"]));
    world.send(world.dm("42", "hi"));
    assert_eq!(world.replies(1).await, ["still here"]);
}

/// An executable hook: `/bin/sh` running `body`.
fn shell_hook(dir: &Path, body: &str) -> InternalHookConfig {
    let script = dir.join("hook.sh");
    std::fs::write(&script, format!("#!/bin/sh\n{body}\n")).unwrap();
    InternalHookConfig { path: "/bin/sh".into(), args: vec![script.display().to_string()] }
}

#[tokio::test]
async fn an_agent_bootstrap_hook_adds_a_file_the_model_sees() {
    let dir = tempfile::tempdir().unwrap();
    let extra = dir.path().join("HOOKED.md");
    std::fs::write(&extra, "The password of the day is swordfish.").unwrap();
    let mut config = open_dms();
    let body = format!(r#"cat > /dev/null; echo '{{"files": ["{}"]}}'"#, extra.display());
    config.hooks.internal.insert("agent:bootstrap".into(), shell_hook(dir.path(), &body));
    let world = World::hooked(config, |hooks| hooks).await;
    world.fake.push(Turn::text(["ok"]));
    world.send(world.dm("42", "hi"));
    world.replies(1).await;
    let system = world.request(0).await["messages"][0]["content"].as_str().unwrap().to_owned();
    assert!(system.contains("The password of the day is swordfish."), "{system}");
}

#[tokio::test]
async fn a_command_new_hook_answers_lines_sent_to_the_user() {
    let dir = tempfile::tempdir().unwrap();
    let mut config = open_dms();
    let body = r#"input=$(cat); case "$input" in *'"command":"new"'*'"text":"remember me"'*) echo '{"replies": ["saved 1", "saved 2"]}';; esac"#;
    config.hooks.internal.insert("command:new".into(), shell_hook(dir.path(), body));
    let world = World::hooked(config, |hooks| hooks).await;
    world.fake.push(Turn::text(["noted"]));
    world.send(world.dm("42", "remember me"));
    world.replies(1).await;
    world.send(world.dm("42", "/new"));
    let replies = world.replies(4).await;
    assert_eq!(replies[1..], ["🆕 Started a new conversation.", "saved 1", "saved 2"]);
}

#[tokio::test]
async fn the_example_save_session_hook_writes_the_conversation_to_the_workspace() {
    if std::process::Command::new("python3").arg("--version").output().is_err() {
        eprintln!("python3 is not installed; skipping the example hook");
        return;
    }
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("config/hooks/save-session.py");
    let mut config = open_dms();
    let hook =
        InternalHookConfig { path: "/usr/bin/env".into(), args: vec!["python3".into(), script.display().to_string()] };
    config.hooks.internal.insert("command:new".into(), hook);
    let world = World::hooked(config, |hooks| hooks).await;
    world.fake.push(Turn::text(["Paris."]));
    world.send(world.dm("42", "capital of France?"));
    world.replies(1).await;
    world.send(world.dm("42", "/new"));
    let replies = world.replies(3).await;
    assert!(replies[2].starts_with("📝 Saved the last 2 messages to sessions/"), "{replies:?}");
    let sessions = world.workspace().join("sessions");
    let file = std::fs::read_dir(&sessions).unwrap().next().unwrap().unwrap().path();
    let saved = std::fs::read_to_string(file).unwrap();
    assert!(saved.contains("**user**: capital of France?") && saved.contains("**assistant**: Paris."), "{saved}");
}

/// Reports the sessions it sees start and end.
struct Sessions(tokio::sync::mpsc::UnboundedSender<String>);

#[async_trait]
impl Plugin for Sessions {
    fn name(&self) -> &str {
        "sessions"
    }

    async fn session_start(&self, event: &SessionEvent) -> HookResult<()> {
        let _ = self.0.send(format!("start {:?}", event.reason));
        Ok(())
    }

    async fn session_end(&self, event: &SessionEvent) -> HookResult<()> {
        let _ = self.0.send(format!("end {:?}", event.reason));
        Ok(())
    }
}

#[tokio::test]
async fn sessions_start_on_the_first_message_and_end_and_start_again_on_reset() {
    let (seen, mut observed) = tokio::sync::mpsc::unbounded_channel();
    let world = World::hooked(open_dms(), |hooks| hooks.register(0, Sessions(seen))).await;
    world.fake.push(Turn::text(["hi"]));
    world.send(world.dm("42", "hello"));
    world.replies(1).await;
    world.send(world.dm("42", "/reset"));
    world.replies(2).await;
    let mut lines = Vec::new();
    while lines.len() < 3 {
        lines.push(tokio::time::timeout(super::PATIENCE, observed.recv()).await.unwrap().unwrap());
    }
    // The end and the new start of a reset are observed side by side: either order.
    assert_eq!(lines[0], "start New");
    lines[1..].sort();
    assert_eq!(lines[1..], ["end Reset", "start Reset"]);
}

/// Reports what `message_sent` saw.
struct Sent(tokio::sync::mpsc::UnboundedSender<String>);

#[async_trait]
impl Plugin for Sent {
    fn name(&self) -> &str {
        "sent"
    }

    async fn message_sent(&self, event: &ferry::hooks::MessageSent) -> HookResult<()> {
        let _ = self.0.send(format!("{}: {}", event.message_id, event.text));
        Ok(())
    }
}

#[tokio::test]
async fn message_sent_is_heard_for_a_reply_that_a_preview_became() {
    let (seen, mut observed) = tokio::sync::mpsc::unbounded_channel();
    let world = World::hooked(open_dms(), |hooks| hooks.register(0, Sent(seen))).await;
    let pieces = ["The deploy finished ", "at 10:02 and every ", "check passed."];
    world.fake.push(ferry_fakes::Reply::text(pieces).with_chunk_delay(Duration::from_millis(40)));
    world.send(world.dm("42", "status?"));
    let heard = tokio::time::timeout(super::PATIENCE, observed.recv()).await.unwrap().unwrap();
    let shown = world.channel.visible_messages();
    assert_eq!(shown.len(), 1, "the preview became the reply: {shown:?}");
    assert!(heard.ends_with(&pieces.concat()), "{heard}");
}
