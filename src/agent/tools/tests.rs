//! The registry's failure handling and the built-in tools.

use std::sync::Arc;

use async_trait::async_trait;
use ferry_channel::memory::{MemoryChannel, Operation, OperationKind};
use ferry_channel::{ChannelError, ChatKind, ChatRef, OutboundMessage};
use schemars::JsonSchema;
use serde::Deserialize;

use super::*;
use crate::agent::skills::SkillsCache;

pub(crate) fn context(origin: Option<Origin>, channels: ChannelRegistry) -> ToolContext {
    ToolContext {
        sender_id: None,
        memory_scope: None,
        run_id: "run-1".into(),
        session_key: "agent:main:main".into(),
        call_id: "call-1".into(),
        origin,
        channels,
        sessions: Arc::new(RecentSessions::default()),
        skills: Arc::new(SkillsSnapshot::default()),
        sends: Arc::new(Mutex::new(Vec::new())),
        updates: None,
        outgoing: None,
        schedulers: None,
        send_ledger: None,
    }
}

fn call(name: &str, arguments: &str) -> ToolCall {
    ToolCall { id: "call-1".into(), name: name.into(), arguments: arguments.into() }
}

fn telegram_dm() -> Origin {
    Origin {
        channel: "telegram".into(),
        account_id: "default".into(),
        target: Target { chat: ChatRef::new(ChatKind::Direct, "42"), thread_id: None },
    }
}

#[derive(Deserialize, JsonSchema)]
struct Nothing {}

struct Exploding;

#[async_trait]
impl TypedTool for Exploding {
    type Args = Nothing;
    const NAME: &'static str = "exploding";
    const DESCRIPTION: &'static str = "panics";

    async fn run(&self, _args: Nothing, _context: &ToolContext) -> Result<ToolOutput, ToolError> {
        panic!("boom")
    }
}

/// Answers with `0`, `1`, … one number a line, this many lines (an error when negative).
struct Counting(i64);

#[async_trait]
impl TypedTool for Counting {
    type Args = Nothing;
    const NAME: &'static str = "counting";
    const DESCRIPTION: &'static str = "counts";

    async fn run(&self, _args: Nothing, _context: &ToolContext) -> Result<ToolOutput, ToolError> {
        let text: Vec<String> = (0..self.0.unsigned_abs()).map(|n| n.to_string()).collect();
        if self.0 < 0 { Err(ToolError::new(text.join("\n"))) } else { Ok(text.join("\n").into()) }
    }
}

/// Returns a long text and one image, as a screenshot tool would.
struct Snapshot;

#[async_trait]
impl TypedTool for Snapshot {
    type Args = Nothing;
    const NAME: &'static str = "snapshot";
    const DESCRIPTION: &'static str = "takes a picture";

    async fn run(&self, _args: Nothing, _context: &ToolContext) -> Result<ToolOutput, ToolError> {
        let image = ImagePart { media_type: "image/png".into(), data: "A".repeat(40_000), width: 640, height: 480 };
        Ok(ToolOutput::with_images("x".repeat(10_000), vec![image]))
    }
}

#[tokio::test]
async fn images_pass_through_the_registry_and_only_the_text_is_capped() {
    let mut registry = ToolRegistry::new().with_result_limit(1_000);
    registry.register(Snapshot);
    let outcome = registry.execute(&call("snapshot", "{}"), context(None, ChannelRegistry::new())).await;
    assert!(!outcome.is_error);
    assert!(outcome.content.chars().count() <= 1_000);
    assert_eq!(outcome.images.len(), 1);
    assert_eq!(outcome.images[0].data.len(), 40_000, "the image is not cut");
}

#[tokio::test]
async fn every_result_is_capped_at_max_result_chars_keeping_head_and_tail() {
    for lines in [50_000, -50_000] {
        let mut registry = ToolRegistry::new().with_result_limit(5_000);
        registry.register(Counting(lines));
        let outcome = registry.execute(&call("counting", "{}"), context(None, ChannelRegistry::new())).await;
        assert_eq!(outcome.is_error, lines < 0);
        assert!(outcome.content.chars().count() <= 5_000, "{}", outcome.content.len());
        assert!(outcome.content.starts_with("0\n1\n2\n"));
        assert!(outcome.content.ends_with("49998\n49999"));
        assert!(outcome.content.contains("characters cut here"));
    }
    let mut registry = ToolRegistry::new();
    registry.register(Counting(100));
    let short = registry.execute(&call("counting", "{}"), context(None, ChannelRegistry::new())).await;
    assert!(!short.content.contains("cut here"), "within the default cap, whole");
}

#[tokio::test]
async fn unknown_tools_malformed_json_and_wrong_types_become_error_results() {
    let registry = ToolRegistry::with_builtins();
    let ctx = || context(None, ChannelRegistry::new());

    let unknown = registry.execute(&call("web_search", "{}"), ctx()).await;
    assert!(unknown.is_error);
    assert!(
        unknown.content.contains("unknown tool `web_search`") && unknown.content.contains("current_time"),
        "{}",
        unknown.content
    );

    let truncated = registry.execute(&call("message", "{\"text\": \"hel"), ctx()).await;
    assert!(truncated.is_error);
    assert!(truncated.content.contains("not valid JSON"), "{}", truncated.content);

    let wrong = registry.execute(&call("message", "{\"txt\": \"hello\"}"), ctx()).await;
    assert!(wrong.is_error);
    assert!(wrong.content.starts_with("invalid arguments:"), "{}", wrong.content);
}

#[tokio::test]
async fn a_panicking_tool_is_reported_not_fatal() {
    let mut registry = ToolRegistry::new();
    registry.register(Exploding);
    let outcome = registry.execute(&call("exploding", ""), context(None, ChannelRegistry::new())).await;
    assert_eq!(outcome.content, "the tool `exploding` crashed");
    assert!(outcome.is_error);
}

#[tokio::test]
async fn current_time_reports_utc_and_local_time() {
    let registry = ToolRegistry::with_builtins();
    let outcome = registry.execute(&call("current_time", ""), context(None, ChannelRegistry::new())).await;
    assert!(!outcome.is_error, "{}", outcome.content);
    let value: Value = serde_json::from_str(&outcome.content).unwrap();
    assert!(value["utc"].as_str().unwrap().ends_with('Z'));
    assert!(value["unix"].as_i64().unwrap() > 1_700_000_000);
}

#[tokio::test]
async fn message_goes_to_the_current_chat_by_default_and_is_recorded() {
    let telegram = Arc::new(MemoryChannel::new("telegram", "default"));
    let channels = ChannelRegistry::new();
    channels.register(telegram.clone());
    let ctx = context(Some(telegram_dm()), channels);
    let sends = ctx.sends.clone();

    let outcome = ToolRegistry::with_builtins().execute(&call("message", r#"{"text":"hello there"}"#), ctx).await;
    assert!(!outcome.is_error, "{}", outcome.content);
    assert!(outcome.mutates);
    let visible = telegram.visible_messages();
    assert_eq!(visible.len(), 1);
    assert_eq!((visible[0].target.chat.id.as_str(), visible[0].text.as_str()), ("42", "hello there"));
    let recorded = sends.lock().unwrap().clone();
    assert_eq!(recorded.len(), 1);
    assert_eq!((recorded[0].channel.as_str(), recorded[0].text.as_str()), ("telegram", "hello there"));
}

#[tokio::test]
async fn message_never_shows_reply_directives_and_threads_where_one_names_a_message() {
    let telegram = Arc::new(MemoryChannel::new("telegram", "default"));
    let channels = ChannelRegistry::new();
    channels.register(telegram.clone());
    let ctx = context(Some(telegram_dm()), channels);
    let sends = ctx.sends.clone();
    let args = r#"{"text":"[[ reply_to : 77 ]] Here it is. [[audio_as_voice]]"}"#;
    let outcome = ToolRegistry::with_builtins().execute(&call("message", args), ctx.clone()).await;
    assert!(!outcome.is_error, "{}", outcome.content);
    let sent: Vec<OutboundMessage> = telegram
        .operations()
        .into_iter()
        .filter_map(|op| match op {
            Operation::Sent { message, .. } => Some(message),
            _ => None,
        })
        .collect();
    assert_eq!(sent.len(), 1);
    assert_eq!((sent[0].text.as_str(), sent[0].reply_to_message_id.as_deref()), ("Here it is.", Some("77")));
    assert_eq!(sends.lock().unwrap()[0].text, "Here it is.", "recorded as shown, for the reply's dedup");

    let only_tags =
        ToolRegistry::with_builtins().execute(&call("message", r#"{"text":"[[reply_to_current]]"}"#), ctx).await;
    assert!(only_tags.is_error && only_tags.content.contains("only reply directives"), "{}", only_tags.content);
}

#[tokio::test]
async fn message_can_target_another_chat_and_channel() {
    let telegram = Arc::new(MemoryChannel::new("telegram", "default"));
    let slack = Arc::new(MemoryChannel::new("slack", "default"));
    let channels = ChannelRegistry::new();
    channels.register(telegram.clone());
    channels.register(slack.clone());
    let ctx = context(Some(telegram_dm()), channels);

    let args = r#"{"text":"deploy done","channel":"slack","to":"channel:C0123","thread_id":"1700.1"}"#;
    let outcome = ToolRegistry::with_builtins().execute(&call("message", args), ctx).await;
    assert!(!outcome.is_error, "{}", outcome.content);
    assert!(telegram.sent_texts().is_empty());
    let sent = slack.visible_messages();
    assert_eq!(sent[0].target.chat, ChatRef::new(ChatKind::Channel, "C0123"));
    assert_eq!(sent[0].target.thread_id.as_deref(), Some("1700.1"));
}

#[tokio::test]
async fn a_failed_send_is_an_error_and_is_not_recorded() {
    let telegram = Arc::new(MemoryChannel::new("telegram", "default"));
    telegram.fail_next(OperationKind::Send, ChannelError::Rejected { reason: "chat not found".into() });
    let channels = ChannelRegistry::new();
    channels.register(telegram.clone());
    let ctx = context(Some(telegram_dm()), channels);
    let sends = ctx.sends.clone();

    let outcome = ToolRegistry::with_builtins().execute(&call("message", r#"{"text":"hi"}"#), ctx).await;
    assert!(outcome.is_error);
    assert!(outcome.content.contains("chat not found"), "{}", outcome.content);
    assert!(sends.lock().unwrap().is_empty());
}

#[tokio::test]
async fn message_without_a_chat_says_what_is_missing() {
    let outcome = ToolRegistry::with_builtins()
        .execute(&call("message", r#"{"text":"hi"}"#), context(None, ChannelRegistry::new()))
        .await;
    assert!(outcome.is_error);
    assert!(outcome.content.contains("give `channel` and `to`"), "{}", outcome.content);

    let outcome = ToolRegistry::with_builtins()
        .execute(
            &call("message", r#"{"text":"hi","channel":"discord","to":"1"}"#),
            context(None, ChannelRegistry::new()),
        )
        .await;
    assert!(outcome.content.contains("`discord` is not connected"), "{}", outcome.content);
}

#[tokio::test]
async fn sessions_list_reads_the_catalog() {
    let catalog = Arc::new(RecentSessions::default());
    catalog.record("agent:main:main", crate::agent::Usage { input_tokens: 5, output_tokens: 7 });
    let mut ctx = context(None, ChannelRegistry::new());
    ctx.sessions = catalog;
    let outcome = ToolRegistry::with_builtins().execute(&call("sessions_list", r#"{"limit":5}"#), ctx).await;
    let value: Value = serde_json::from_str(&outcome.content).unwrap();
    assert_eq!(value["sessions"][0]["key"], "agent:main:main");
    assert_eq!(value["sessions"][0]["output_tokens"], 7);
}

#[tokio::test]
async fn skill_read_serves_only_listed_skills() {
    let workspace = tempfile::tempdir().unwrap();
    let dir = workspace.path().join("skills/weather");
    std::fs::create_dir_all(&dir).unwrap();
    std::fs::write(dir.join("SKILL.md"), "---\nname: weather\ndescription: forecasts\n---\nUse the API.").unwrap();
    let mut ctx = context(None, ChannelRegistry::new());
    ctx.skills = SkillsCache::new(workspace.path()).snapshot();
    let registry = ToolRegistry::with_builtins();

    let outcome = registry.execute(&call("skill_read", r#"{"name":"weather"}"#), ctx.clone()).await;
    assert_eq!(outcome.content, "Use the API.");
    let outcome = registry.execute(&call("skill_read", r#"{"name":"../../etc/passwd"}"#), ctx).await;
    assert!(outcome.is_error && outcome.content.contains("no skill named"), "{}", outcome.content);
}

#[test]
fn specs_carry_json_schemas_and_hide_skill_read_without_skills() {
    let registry = ToolRegistry::with_builtins();
    let specs = registry.specs(&SkillsSnapshot::default(), &ToolFilter::everything());
    let names: Vec<_> = specs.iter().map(|spec| spec.name.as_str()).collect();
    assert_eq!(names, ["current_time", "message", "sessions_list"]);
    let message = specs.iter().find(|spec| spec.name == "message").unwrap();
    assert_eq!(message.parameters["type"], "object");
    // `text` may be empty when `media` is given: nothing is required.
    assert!(message.parameters.get("required").is_none_or(|required| required == &serde_json::json!([])));
    assert_eq!(message.parameters["properties"]["media"]["type"], serde_json::json!(["string", "null"]));
    assert!(message.parameters.get("$schema").is_none());
}
