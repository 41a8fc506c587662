//! Discord: attachments in, the agent's files out as multipart attachments.

use ferry_fakes::{DiscordFile, DiscordUser, FakeDiscord, FakeOpenAi, ToolCall, Turn, sample_jpeg};

use super::daemon::{Daemon, PATIENCE, daemon_in};
use super::{eventually, model_tables, ogg, photo_in, request};

const TOKEN: &str = "fake.discord.token";

fn ada() -> DiscordUser {
    DiscordUser::new(4242, "ada")
}

async fn setup(vision: bool) -> (FakeDiscord, FakeOpenAi, Daemon, tempfile::TempDir) {
    let discord = FakeDiscord::start(TOKEN).await.expect("fake Discord");
    let openai = FakeOpenAi::start().await.expect("fake OpenAI");
    let workspace = tempfile::tempdir().expect("workspace");
    let config = format!(
        "[channels.discord]\nenabled = true\nbot_token = \"{TOKEN}\"\napi_url = \"{}\"\n\
         dm_policy = \"open\"\nallow_from = [\"*\"]\n\n{}",
        discord.url(),
        model_tables(&openai, vision, workspace.path())
    );
    let daemon = daemon_in(tempfile::tempdir().expect("home"), &config, &openai, "discord").await;
    tokio::time::timeout(PATIENCE, discord.wait_for_session()).await.expect("the gateway session is live");
    (discord, openai, daemon, workspace)
}

#[tokio::test]
async fn a_photo_without_text_reaches_the_model_downscaled() {
    let (discord, openai, _daemon, _workspace) = setup(true).await;
    openai.push(Turn::text(["a gradient"]));
    let photo = DiscordFile::new("IMG_0001.jpg", Some("image/jpeg"), sample_jpeg(3000, 1500));
    let (dm, _) = discord.dm_with_files(&ada(), "", vec![photo]);
    let images = request(&openai, 1).await.images();
    assert_eq!(images.iter().map(|image| image.pixels).collect::<Vec<_>>(), [Some((1568, 784))]);
    eventually(|| discord.messages_in(dm).iter().any(|message| message.content == "a gradient")).await;
}

#[tokio::test]
async fn a_model_without_image_input_gets_the_note() {
    let (discord, openai, _daemon, _workspace) = setup(false).await;
    openai.push(Turn::text(["cannot see"]));
    let photo = DiscordFile::new("cat.png", Some("image/png"), sample_jpeg(640, 480));
    discord.dm_with_files(&ada(), "what is this?", vec![photo]);
    let asked = request(&openai, 1).await;
    assert!(asked.images().is_empty());
    assert_eq!(
        asked.last_user_text().as_deref(),
        Some("what is this?\n[photo 640×480 not shown: this model has no image input]")
    );
}

#[tokio::test]
async fn a_file_over_the_limit_is_refused_and_the_text_runs() {
    let (discord, openai, _daemon, _workspace) = setup(true).await;
    openai.push(Turn::text(["ok"]));
    let big = DiscordFile::new("backup.tar", Some("application/x-tar"), vec![0u8; 30 * 1024 * 1024]);
    let (dm, _) = discord.dm_with_files(&ada(), "the backup", vec![big]);
    let asked = request(&openai, 1).await;
    assert_eq!(
        asked.last_user_text().as_deref(),
        Some("the backup\n\n[\"backup.tar\" (30 MB) not opened: over the 20 MB limit]")
    );
    eventually(|| discord.messages_in(dm).len() >= 2).await;
    let shown: Vec<String> = discord.messages_in(dm).into_iter().map(|message| message.content).collect();
    assert!(shown.contains(&"📎 \"backup.tar\" is 30 MB, over the 20 MB limit here, so I did not open it.".to_owned()));
    assert!(shown.contains(&"ok".to_owned()), "{shown:?}");
    assert!(discord.cdn_requests().is_empty(), "nothing was downloaded");
}

#[tokio::test]
async fn a_voice_message_is_transcribed_and_a_text_file_inlined() {
    let (discord, openai, _daemon, _workspace) = setup(true).await;
    openai.set_transcript("Call me back.");
    openai.push(Turn::text(["sure"]));
    let voice = DiscordFile::new("voice-message.ogg", Some("audio/ogg"), ogg(3000));
    let notes = DiscordFile::new("notes.md", Some("text/markdown"), b"# Todo\n- ship it\n".to_vec());
    discord.dm_with_files(&ada(), "", vec![voice, notes]);
    let asked = request(&openai, 1).await;
    assert_eq!(
        asked.last_user_text().as_deref(),
        Some(
            "[voice note transcript] Call me back.\n\n\
             [file \"notes.md\" (text/markdown, 1 KB)]\n# Todo\n- ship it\n[end of file]"
        )
    );
    assert_eq!(openai.transcriptions()[0].file_name.as_deref(), Some("voice-message.ogg"));
}

#[tokio::test]
async fn the_agent_sends_an_image_as_an_attachment() {
    let (discord, openai, _daemon, workspace) = setup(true).await;
    photo_in(workspace.path(), "chart.jpg", 500, 400);
    let arguments = r#"{"text": "The chart", "media": "chart.jpg"}"#;
    openai.push(Turn::tool_calls([ToolCall::new("call-1", "message", arguments)]));
    openai.push(Turn::text(["NO_REPLY"]));
    let (dm, _) = discord.dm(&ada(), "chart please");
    eventually(|| discord.messages_in(dm).iter().any(|message| !message.attachments.is_empty())).await;
    let sent = discord.messages_in(dm);
    let message = sent.iter().find(|message| !message.attachments.is_empty()).expect("an attachment");
    assert_eq!(message.content, "The chart");
    let [file] = message.attachments.as_slice() else { panic!("{message:?}") };
    assert_eq!((file.filename.as_str(), file.content_type.as_deref()), ("chart.jpg", Some("image/jpeg")));
    assert_eq!(file.bytes, std::fs::read(workspace.path().join("chart.jpg")).expect("the photo"));
}
