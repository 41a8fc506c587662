use std::sync::Mutex;

use async_trait::async_trait;

use super::*;
use crate::config::InternalHookConfig;

/// Appends its tag to the prompt's context; misbehaves as told.
struct Tagger {
    tag: &'static str,
    behaviour: Behaviour,
}

#[derive(Clone, Copy, PartialEq)]
enum Behaviour {
    Fine,
    Fails,
    Panics,
    Sleeps,
}

impl Tagger {
    fn new(tag: &'static str, behaviour: Behaviour) -> Self {
        Self { tag, behaviour }
    }

    async fn misbehave(&self) -> HookResult<()> {
        match self.behaviour {
            Behaviour::Fine => Ok(()),
            Behaviour::Fails => Err(HookError::new("no")),
            Behaviour::Panics => panic!("a hook panicked on purpose"),
            Behaviour::Sleeps => {
                tokio::time::sleep(Duration::from_secs(3600)).await;
                Ok(())
            }
        }
    }
}

#[async_trait]
impl Plugin for Tagger {
    fn name(&self) -> &str {
        self.tag
    }

    async fn before_agent_start(&self, _event: &BeforeAgentStart) -> HookResult<Option<AgentStartChange>> {
        self.misbehave().await?;
        Ok(Some(AgentStartChange { system_prompt: None, context: Some(self.tag.to_owned()) }))
    }

    async fn before_tool_call(&self, event: &BeforeToolCall) -> HookResult<Option<ToolCallDecision>> {
        self.misbehave().await?;
        let mut params = event.params.clone();
        params[self.tag] = true.into();
        Ok(Some(ToolCallDecision::Rewrite(params)))
    }

    fn tool_result_persist(&self, event: &ToolResultPersist<'_>) -> Option<String> {
        if self.behaviour == Behaviour::Panics {
            panic!("a hook panicked on purpose");
        }
        Some(format!("{}+{}", event.content, self.tag))
    }
}

async fn start(hooks: &Hooks, prompt: &str) -> String {
    hooks.before_agent_start("r", "s", "hi", prompt.to_owned()).await
}

async fn tool_call(hooks: &Hooks) -> Result<Option<serde_json::Value>, String> {
    let call = ToolCall { id: "c".into(), name: "current_time".into(), arguments: "{}".into() };
    hooks.before_tool_call("r", "s", &call).await
}

#[tokio::test]
async fn modifying_handlers_run_highest_priority_first_and_merge() {
    let hooks = Hooks::builder()
        .register(1, Tagger::new("low", Behaviour::Fine))
        .register(10, Tagger::new("high", Behaviour::Fine))
        .register(5, Tagger::new("mid", Behaviour::Fine))
        .build();
    assert_eq!(start(&hooks, "base").await, "base\n\nhigh\n\nmid\n\nlow");
}

#[tokio::test(start_paused = true)]
async fn a_failing_panicking_or_slow_handler_is_skipped() {
    let hooks = Hooks::builder()
        .timeout(Duration::from_millis(50))
        .register(4, Tagger::new("fails", Behaviour::Fails))
        .register(3, Tagger::new("panics", Behaviour::Panics))
        .register(2, Tagger::new("sleeps", Behaviour::Sleeps))
        .register(1, Tagger::new("fine", Behaviour::Fine))
        .build();
    assert_eq!(start(&hooks, "base").await, "base\n\nfine");
}

#[tokio::test(start_paused = true)]
async fn before_tool_call_fails_closed() {
    for behaviour in [Behaviour::Fails, Behaviour::Panics, Behaviour::Sleeps] {
        let hooks = Hooks::builder()
            .timeout(Duration::from_millis(50))
            .register(2, Tagger::new("first", Behaviour::Fine))
            .register(1, Tagger::new("broken", behaviour))
            .build();
        let blocked = tool_call(&hooks).await.unwrap_err();
        assert!(blocked.contains("broken"), "{blocked}");
    }
    let hooks = Hooks::builder()
        .register(2, Tagger::new("a", Behaviour::Fine))
        .register(1, Tagger::new("b", Behaviour::Fine))
        .build();
    assert_eq!(tool_call(&hooks).await.unwrap(), Some(serde_json::json!({ "a": true, "b": true })));
}

#[test]
fn tool_result_persist_rewrites_only_tool_results_and_survives_a_panic() {
    let hooks = Hooks::builder()
        .register(3, Tagger::new("one", Behaviour::Fine))
        .register(2, Tagger::new("boom", Behaviour::Panics))
        .register(1, Tagger::new("two", Behaviour::Fine))
        .build();
    let image = crate::types::conversation::ImagePart {
        media_type: "image/png".into(),
        data: "iVBORw0KGgo=".into(),
        width: 8,
        height: 8,
    };
    let mut transcript = vec![
        ChatMessage::user("hi"),
        ChatMessage::ToolResult {
            call_id: "c".into(),
            name: "t".into(),
            content: "raw".into(),
            is_error: false,
            images: vec![image.clone()],
        },
    ];
    hooks.tool_result_persist("s", &mut transcript);
    assert_eq!(transcript[0], ChatMessage::user("hi"));
    assert!(
        matches!(&transcript[1], ChatMessage::ToolResult { content, images, .. } if content == "raw+one+two" && *images == [image]),
        "the text is rewritten, the images are kept: {:?}",
        transcript[1]
    );
}

struct Recorder(Arc<Mutex<Vec<String>>>);

#[async_trait]
impl Plugin for Recorder {
    fn name(&self) -> &str {
        "recorder"
    }

    async fn message_sending(&self, event: &MessageSending) -> HookResult<Option<SendingDecision>> {
        self.0.lock().unwrap().push(event.text.clone());
        Ok(None)
    }
}

struct Censor;

#[async_trait]
impl Plugin for Censor {
    fn name(&self) -> &str {
        "censor"
    }

    async fn message_sending(&self, event: &MessageSending) -> HookResult<Option<SendingDecision>> {
        Ok(Some(if event.text.contains("secret") {
            SendingDecision::Cancel
        } else {
            SendingDecision::Rewrite(event.text.to_uppercase())
        }))
    }
}

fn sending(text: &str) -> MessageSending {
    MessageSending { channel: "memory".into(), account_id: "a".into(), chat_id: "1".into(), text: text.into() }
}

#[tokio::test]
async fn a_cancel_is_final_and_a_rewrite_is_seen_by_later_handlers() {
    let seen = Arc::new(Mutex::new(Vec::new()));
    let hooks = Hooks::builder().register(2, Censor).register(1, Recorder(seen.clone())).build();
    assert_eq!(hooks.message_sending(sending("the secret")).await, None);
    assert_eq!(hooks.message_sending(sending("hello")).await.as_deref(), Some("HELLO"));
    assert_eq!(*seen.lock().unwrap(), ["HELLO"], "the recorder never saw the cancelled message");
}

fn script(dir: &std::path::Path, body: &str) -> InternalHookConfig {
    let path = dir.join("hook.sh");
    std::fs::write(&path, format!("#!/bin/sh\n{body}\n")).unwrap();
    InternalHookConfig { path: "/bin/sh".into(), args: vec![path.display().to_string()] }
}

fn internal(hook: InternalHookConfig, timeout_ms: u64) -> InternalHooks {
    let config = HooksConfig { timeout_ms, internal: [("command:new".to_owned(), hook)].into() };
    InternalHooks::from_config(&config)
}

#[tokio::test]
async fn an_internal_hook_reads_the_event_and_answers_json() {
    let dir = tempfile::tempdir().unwrap();
    // Echoes the event's command back as a reply line.
    let hook = script(
        dir.path(),
        r#"read -r input; case "$input" in *'"event":"command:new"'*) echo '{"replies":["saw new"]}';; esac"#,
    );
    let answer: Option<internal::CommandAnswer> =
        internal(hook, 5_000).call("command:new", &serde_json::json!({ "session_key": "s" })).await;
    assert_eq!(answer.unwrap().replies, ["saw new"]);
}

#[tokio::test]
async fn an_internal_hook_that_fails_times_out_or_talks_nonsense_is_ignored() {
    let dir = tempfile::tempdir().unwrap();
    for (body, timeout_ms) in
        [("echo '{\"replies\":[\"x\"]}'; exit 3", 5_000), ("sleep 5", 100), ("echo 'not json'", 5_000)]
    {
        let answer: Option<internal::CommandAnswer> =
            internal(script(dir.path(), body), timeout_ms).call("command:new", &serde_json::json!({})).await;
        assert!(answer.is_none(), "{body}");
    }
}
