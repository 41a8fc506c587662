//! Slack: shared files in (downloaded with the bot token), the agent's files out through
//! the external upload flow.

use ferry_fakes::{FakeOpenAi, FakeSlack, ToolCall, Turn, sample_jpeg};

use super::daemon::{Daemon, PATIENCE, daemon_in};
use super::{model_tables, ogg, photo_in, request};

async fn setup(vision: bool) -> (FakeSlack, FakeOpenAi, Daemon, tempfile::TempDir) {
    let slack = FakeSlack::start().await.expect("fake Slack");
    let openai = FakeOpenAi::start().await.expect("fake OpenAI");
    let workspace = tempfile::tempdir().expect("workspace");
    let config = format!(
        "[channels.slack]\nenabled = true\nbot_token = \"{}\"\napp_token = \"{}\"\napi_url = \"{}\"\n\
         dm_policy = \"open\"\nallow_from = [\"*\"]\nstreaming = \"off\"\n\n{}",
        FakeSlack::BOT_TOKEN,
        FakeSlack::APP_TOKEN,
        slack.api_url(),
        model_tables(&openai, vision, workspace.path())
    );
    let sockets = slack.connections().0;
    let daemon = daemon_in(tempfile::tempdir().expect("home"), &config, &openai, "slack").await;
    tokio::time::timeout(PATIENCE, slack.wait_for_connections(sockets + 1)).await.expect("Socket Mode");
    (slack, openai, daemon, workspace)
}

#[tokio::test]
async fn a_shared_photo_reaches_the_model_downscaled() {
    let (slack, openai, _daemon, _workspace) = setup(true).await;
    openai.push(Turn::text(["a gradient"]));
    let photo = slack.user_file("U1", "photo.jpg", "image/jpeg", sample_jpeg(2000, 2000), Some((2000, 2000)));
    slack.file_share("DU1", "im", "U1", "", vec![photo]);
    let images = request(&openai, 1).await.images();
    assert_eq!(images.iter().map(|image| image.pixels).collect::<Vec<_>>(), [Some((1568, 1568))]);
    tokio::time::timeout(PATIENCE, slack.wait_for_messages("DU1", 1)).await.expect("the answer");
}

#[tokio::test]
async fn a_model_without_image_input_gets_the_note() {
    let (slack, openai, _daemon, _workspace) = setup(false).await;
    openai.push(Turn::text(["cannot see"]));
    let photo = slack.user_file("U1", "photo.jpg", "image/jpeg", sample_jpeg(800, 600), Some((800, 600)));
    slack.file_share("DU1", "im", "U1", "look", vec![photo]);
    let asked = request(&openai, 1).await;
    assert!(asked.images().is_empty());
    assert_eq!(
        asked.last_user_text().as_deref(),
        Some("look\n[photo 800×600 not shown: this model has no image input]")
    );
}

#[tokio::test]
async fn a_file_over_the_limit_is_refused_and_the_text_runs() {
    let (slack, openai, _daemon, _workspace) = setup(true).await;
    openai.push(Turn::text(["ok"]));
    let big = slack.user_file("U1", "dump.bin", "application/octet-stream", vec![0u8; 30 * 1024 * 1024], None);
    slack.file_share("DU1", "im", "U1", "the dump", vec![big]);
    let asked = request(&openai, 1).await;
    assert_eq!(
        asked.last_user_text().as_deref(),
        Some("the dump\n\n[\"dump.bin\" (30 MB) not opened: over the 20 MB limit]")
    );
    let shown = tokio::time::timeout(PATIENCE, slack.wait_for_messages("DU1", 2)).await.expect("two messages");
    let texts: Vec<&str> = shown.iter().map(|message| message.text.as_str()).collect();
    assert!(texts.contains(&"📎 \"dump.bin\" is 30 MB, over the 20 MB limit here, so I did not open it."), "{texts:?}");
    assert!(texts.contains(&"ok"), "{texts:?}");
}

#[tokio::test]
async fn a_voice_clip_is_transcribed_and_a_text_file_inlined() {
    let (slack, openai, _daemon, _workspace) = setup(true).await;
    openai.set_transcript("Ship it on Friday.");
    openai.push(Turn::text(["noted"]));
    let voice = slack.user_file("U1", "audio_message.ogg", "audio/ogg", ogg(5000), None);
    let csv = slack.user_file("U1", "sales.csv", "text/csv", b"month,total\njan,10\n".to_vec(), None);
    slack.file_share("DU1", "im", "U1", "", vec![voice, csv]);
    let asked = request(&openai, 1).await;
    assert_eq!(
        asked.last_user_text().as_deref(),
        Some(
            "[voice note transcript] Ship it on Friday.\n\n\
             [file \"sales.csv\" (text/csv, 1 KB)]\nmonth,total\njan,10\n[end of file]"
        )
    );
}

#[tokio::test]
async fn the_agent_sends_an_image_through_the_external_upload_flow() {
    let (slack, openai, _daemon, workspace) = setup(true).await;
    photo_in(workspace.path(), "chart.jpg", 300, 200);
    let arguments = r#"{"text": "The chart", "media": "chart.jpg"}"#;
    openai.push(Turn::tool_calls([ToolCall::new("call-1", "message", arguments)]));
    openai.push(Turn::text(["NO_REPLY"]));
    slack.dm("U1", "chart please");
    let uploads = tokio::time::timeout(PATIENCE, slack.wait_for_uploads(1)).await.expect("an upload");
    let [upload] = uploads.as_slice() else { panic!("{uploads:?}") };
    assert_eq!((upload.name.as_str(), upload.channel.as_deref()), ("chart.jpg", Some("DU1")));
    assert_eq!(upload.comment.as_deref(), Some("The chart"));
    assert_eq!(upload.bytes, std::fs::read(workspace.path().join("chart.jpg")).expect("the photo"));
    assert!(slack.calls_to("files.upload").is_empty(), "never the retired files.upload");
}
