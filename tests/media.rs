//! Media end to end (issue 23): the real `ferry gateway` binary against the fake platforms
//! and the fake model. Users' photos, documents and voice notes reach the model as images,
//! text and transcripts; files over the limit are refused with a message while their
//! caption still runs; the agent's own images go back to the chat; PDFs are read in a child
//! process, so one that makes the parser loop or eat memory costs that child alone.

use std::path::Path;
use std::time::Duration;

use ferry_fakes::{FakeOpenAi, RecordedRequest};

#[path = "common/daemon.rs"]
mod daemon;

#[path = "media/discord.rs"]
mod discord;
#[path = "media/reader.rs"]
mod reader;
#[path = "media/slack.rs"]
mod slack;
#[path = "media/telegram.rs"]
mod telegram;

use daemon::PATIENCE;

/// The model tables: the fake OpenAI as provider `fake`, its model `gpt-test` taking images
/// when `vision`; the agent's workspace (shared by every session) at `workspace`, and voice
/// notes transcribed by the fake OpenAI.
fn model_tables(openai: &FakeOpenAi, vision: bool, workspace: &Path) -> String {
    format!(
        "[agents.defaults]\nmodel = \"fake/gpt-test\"\nworkspace = \"{}\"\n\n\
         [tools.sandbox]\nscope = \"agent\"\n\n\
         [media.transcription]\nbase_url = \"{url}\"\napi_key = \"sk-voice\"\nlanguage = \"en\"\n\n\
         [models.providers.fake]\nkind = \"openai\"\nbase_url = \"{url}\"\napi_key = \"sk-test\"\nvision = {vision}\n",
        workspace.display(),
        url = openai.url()
    )
}

/// A JPEG of this size in `workspace` under `name`, for the agent to send.
fn photo_in(workspace: &Path, name: &str, width: u32, height: u32) {
    std::fs::write(workspace.join(name), ferry_fakes::sample_jpeg(width, height)).expect("write the photo");
}

/// Waits for the model's `count`th request and returns it.
async fn request(openai: &FakeOpenAi, count: usize) -> RecordedRequest {
    tokio::time::timeout(PATIENCE, async {
        loop {
            if let Some(request) = openai.requests().into_iter().nth(count - 1) {
                return request;
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    })
    .await
    .unwrap_or_else(|_| panic!("the model got {} requests, not {count}", openai.requests().len()))
}

/// An Ogg file of `len` bytes (its magic, then filler): a voice note as the platforms send it.
fn ogg(len: usize) -> Vec<u8> {
    let mut bytes = b"OggS\x00\x02".to_vec();
    bytes.resize(len, 3);
    bytes
}

/// Waits until `done` holds.
async fn eventually(done: impl Fn() -> bool) {
    tokio::time::timeout(PATIENCE, async {
        while !done() {
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    })
    .await
    .expect("the condition holds in time");
}
