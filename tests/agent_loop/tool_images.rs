//! Tool images end to end: a tool returns an image made ready by `media::prepare_image`, and
//! the real providers send it to the fake servers as image content when the model has vision,
//! or as a one-line note when it has not. The fakes decode what they receive, so the tests
//! assert the size the model would see.

use std::io::Cursor;
use std::sync::{Arc, OnceLock};

use async_trait::async_trait;
use ferry::agent::providers::{ModelProvider, ResolvedModel};
use ferry::agent::tools::{RecentSessions, ToolContext, ToolError, ToolOutput, ToolRegistry, TypedTool};
use ferry::agent::{AgentRunner, AgentStream, ChatMessage, EventBus, RunRequest, RunStatus, RunnerParts, ToolEvent};
use ferry::channels::ChannelRegistry;
use ferry_fakes::{FakeAnthropic, FakeOpenAi, RecordedRequest, Reply, ToolCall, Turn};

use super::{anthropic, openai, run, settings};

/// What the model sees of the 2000×500 test image: its longest side at 1,568 px.
const SEEN: (u32, u32) = (1568, 392);

const NOTE: &str = "[image 1568×392 not shown: this model has no image input]";

/// A 2000×500 PNG, made once for every test.
fn wide_png() -> &'static [u8] {
    static PNG: OnceLock<Vec<u8>> = OnceLock::new();
    PNG.get_or_init(|| {
        let pixels = image::RgbImage::from_fn(2000, 500, |x, y| image::Rgb([(x / 8) as u8, (y / 2) as u8, 90]));
        let mut bytes = Cursor::new(Vec::new());
        pixels.write_to(&mut bytes, image::ImageFormat::Png).expect("encode the test image");
        bytes.into_inner()
    })
}

#[derive(serde::Deserialize, schemars::JsonSchema)]
struct NoArgs {}

/// A screenshot tool, as `read` will be for image files: text and one prepared image.
struct Snapshot;

#[async_trait]
impl TypedTool for Snapshot {
    type Args = NoArgs;
    const NAME: &'static str = "snapshot";
    const DESCRIPTION: &'static str = "Takes a screenshot.";

    async fn run(&self, _args: NoArgs, _context: &ToolContext) -> Result<ToolOutput, ToolError> {
        let image = ferry::media::prepare_image(wide_png()).map_err(|error| ToolError::new(error.to_string()))?;
        Ok(ToolOutput::with_images("screenshot.png", vec![image]))
    }
}

fn runner(provider: Arc<dyn ModelProvider>, vision: bool) -> (AgentRunner, tempfile::TempDir) {
    let workspace = tempfile::tempdir().expect("workspace");
    let mut tools = ToolRegistry::with_builtins();
    tools.register(Snapshot);
    let model =
        ResolvedModel { provider, model: "test-model".into(), context_window: None, vision, is_fallback_echo: false };
    let runner = AgentRunner::new(RunnerParts {
        model: model.into(),
        tools,
        bus: EventBus::new(),
        settings: settings(),
        workspace: workspace.path().to_owned(),
        channels: ChannelRegistry::new(),
        sessions: Arc::new(RecentSessions::default()),
        hooks: Default::default(),
        media: None,
        memory: None,
    });
    (runner, workspace)
}

/// Runs "take a screenshot" through one snapshot call and returns the request that carried
/// the result, checking what every run shows: the event and the transcript.
async fn snapshot_round(runner: &AgentRunner, requests: impl Fn() -> Vec<RecordedRequest>) -> RecordedRequest {
    let (outcome, events) = run(runner, RunRequest::new("k", "take a screenshot")).await;
    assert_eq!(outcome.status, RunStatus::Completed);
    assert_eq!(outcome.payloads.last().map(|p| p.text.as_str()), Some("A gradient."));

    // Events show the image's size, never its bytes (SPEC §6.3).
    let result = events
        .iter()
        .find_map(|event| match &event.stream {
            AgentStream::Tool(ToolEvent::Result { result, .. }) => Some(result.clone()),
            _ => None,
        })
        .expect("a tool result event");
    assert!(result.starts_with("screenshot.png\n[image: image/png 1568×392, "), "{result}");
    assert!(result.len() < 200, "no image data in the event: {result}");

    // The transcript keeps the image, for the next turns.
    let images = outcome.transcript.iter().find_map(|message| match message {
        ChatMessage::ToolResult { images, .. } => Some(images.clone()),
        _ => None,
    });
    let images = images.expect("a tool result");
    assert_eq!(images.len(), 1);
    assert_eq!((images[0].width, images[0].height), SEEN);

    let mut sent = requests();
    assert_eq!(sent.len(), 2, "one request per round");
    sent.pop().expect("the second request")
}

#[tokio::test]
async fn openai_with_vision_gets_the_tool_image_in_a_user_message_after_the_tool_message() {
    let fake = FakeOpenAi::start().await.unwrap().with_api_key("sk-test");
    fake.push(Turn::tool_calls([ToolCall::new("call_snap", "snapshot", "{}")]));
    fake.push(Turn::text(["A gradient."]));
    let (runner, _workspace) = runner(openai(&fake), true);

    let second = snapshot_round(&runner, || fake.requests()).await;
    let messages = second.body["messages"].as_array().expect("messages");
    let roles: Vec<_> = messages.iter().filter_map(|m| m["role"].as_str()).collect();
    assert_eq!(roles, ["system", "user", "assistant", "tool", "user"]);
    assert_eq!(messages[3]["content"], "screenshot.png");
    let images = second.images();
    assert_eq!(images.len(), 1);
    assert_eq!((images[0].role.as_str(), images[0].media_type.as_str()), ("user", "image/png"));
    assert_eq!(images[0].pixels, Some(SEEN), "the fake decoded the downscaled image");
    assert_eq!(images[0].caption.as_deref(), Some("Images returned by tool snapshot (call call_snap):"));
}

#[tokio::test]
async fn openai_without_vision_gets_a_note_in_the_tool_message() {
    let fake = FakeOpenAi::start().await.unwrap().with_api_key("sk-test");
    fake.push(Turn::tool_calls([ToolCall::new("call_snap", "snapshot", "{}")]));
    fake.push(Turn::text(["A gradient."]));
    let (runner, _workspace) = runner(openai(&fake), false);

    let second = snapshot_round(&runner, || fake.requests()).await;
    assert!(second.images().is_empty());
    let messages = second.body["messages"].as_array().expect("messages");
    assert_eq!(messages.len(), 4, "no message for images");
    assert_eq!(messages[3]["content"], format!("screenshot.png\n{NOTE}"));
}

#[tokio::test]
async fn anthropic_with_vision_gets_the_tool_image_inside_the_tool_result() {
    let fake = FakeAnthropic::start().await.unwrap().with_api_key("ant-test");
    fake.push(Reply::tool_calls([ToolCall::new("call_snap", "snapshot", "{}")]));
    fake.push(Turn::text(["A gradient."]));
    let (runner, _workspace) = runner(anthropic(&fake), true);

    let second = snapshot_round(&runner, || fake.requests()).await;
    let images = second.images();
    assert_eq!(images.len(), 1);
    assert_eq!(images[0].tool_use_id.as_deref(), Some("call_snap"));
    assert_eq!((images[0].media_type.as_str(), images[0].pixels), ("image/png", Some(SEEN)));
    assert_eq!(images[0].caption.as_deref(), Some("screenshot.png"), "the text block comes first");
}

#[tokio::test]
async fn anthropic_without_vision_gets_a_note_in_the_tool_result() {
    let fake = FakeAnthropic::start().await.unwrap().with_api_key("ant-test");
    fake.push(Reply::tool_calls([ToolCall::new("call_snap", "snapshot", "{}")]));
    fake.push(Turn::text(["A gradient."]));
    let (runner, _workspace) = runner(anthropic(&fake), false);

    let second = snapshot_round(&runner, || fake.requests()).await;
    assert!(second.images().is_empty());
    let result = &second.body["messages"][2]["content"][0];
    assert_eq!(result["type"], "tool_result");
    assert_eq!(result["content"], format!("screenshot.png\n{NOTE}"));
}
