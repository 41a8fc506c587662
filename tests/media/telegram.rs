//! Telegram: photos, documents and voice notes in.

use ferry_fakes::{FakeOpenAi, FakeTelegram, TgMedia, ToolCall, Turn};

use super::daemon::{Daemon, daemon_in};
use super::{model_tables, photo_in, request};

const TOKEN: &str = "123456:TEST-token";
const ADA: i64 = 42;

async fn fakes() -> (FakeTelegram, FakeOpenAi) {
    let telegram = FakeTelegram::start(TOKEN).await.expect("fake Telegram").without_rate_limits();
    (telegram, FakeOpenAi::start().await.expect("fake OpenAI"))
}

/// The daemon, and the agent's workspace.
async fn daemon(telegram: &FakeTelegram, openai: &FakeOpenAi, vision: bool) -> (Daemon, tempfile::TempDir) {
    let workspace = tempfile::tempdir().expect("workspace");
    let config = format!(
        "[channels.telegram]\nenabled = true\nbot_token = \"{TOKEN}\"\napi_url = \"{}\"\n\
         dm_policy = \"open\"\nallow_from = [\"*\"]\n\n{}",
        telegram.url(),
        model_tables(openai, vision, workspace.path())
    );
    (daemon_in(tempfile::tempdir().expect("home"), &config, openai, "telegram").await, workspace)
}

/// The bot's messages in Ada's chat once there are `count`.
async fn shown(telegram: &FakeTelegram, count: usize) -> Vec<String> {
    tokio::time::timeout(super::daemon::PATIENCE, async {
        loop {
            let shown = telegram.messages_in(ADA);
            if shown.len() >= count {
                return shown.into_iter().map(|message| message.visible_text).collect();
            }
            tokio::time::sleep(std::time::Duration::from_millis(20)).await;
        }
    })
    .await
    .unwrap_or_else(|_| panic!("expected {count} messages, got {:?}", telegram.messages_in(ADA)))
}

#[tokio::test]
async fn a_photo_without_caption_reaches_the_model_as_a_downscaled_image() {
    let (telegram, openai) = fakes().await;
    openai.push(Turn::text(["a gradient"]));
    let _daemon = daemon(&telegram, &openai, true).await;
    telegram.media_message(ADA, (ADA, "Ada"), TgMedia::Photo(vec![(320, 240), (2400, 1800)]), None);
    let asked = request(&openai, 1).await;
    let images = asked.images();
    assert_eq!(images.len(), 1, "{images:?}");
    assert_eq!(images[0].pixels, Some((1568, 1176)), "the largest size, downscaled to 1568 px");
    assert_eq!(images[0].media_type, "image/jpeg");
    assert_eq!(shown(&telegram, 1).await, ["a gradient"]);
}

#[tokio::test]
async fn a_model_without_image_input_gets_a_note_instead() {
    let (telegram, openai) = fakes().await;
    openai.push(Turn::text(["I cannot see it"]));
    let _daemon = daemon(&telegram, &openai, false).await;
    telegram.media_message(ADA, (ADA, "Ada"), TgMedia::Photo(vec![(1280, 960)]), Some("what is this?"));
    let asked = request(&openai, 1).await;
    assert!(asked.images().is_empty());
    assert_eq!(
        asked.last_user_text().as_deref(),
        Some("what is this?\n[photo 1280×960 not shown: this model has no image input]")
    );
}

#[tokio::test]
async fn a_file_over_the_limit_is_refused_with_a_message_and_its_caption_still_runs() {
    let (telegram, openai) = fakes().await;
    openai.push(Turn::text(["noted"]));
    let _daemon = daemon(&telegram, &openai, true).await;
    let bytes = vec![b'x'; 30 * 1024 * 1024];
    let document = TgMedia::Document { file_name: "dump.zip".into(), mime_type: "application/zip".into(), bytes };
    telegram.media_message(ADA, (ADA, "Ada"), document, Some("here are the logs"));
    let asked = request(&openai, 1).await;
    assert_eq!(
        asked.last_user_text().as_deref(),
        Some("here are the logs\n\n[\"dump.zip\" (30 MB) not opened: over the 20 MB limit]")
    );
    let shown = shown(&telegram, 2).await;
    assert_eq!(shown[0], "📎 \"dump.zip\" is 30 MB, over the 20 MB limit here, so I did not open it.");
    assert_eq!(shown[1], "noted");
    assert!(telegram.calls_to("getFile").is_empty(), "the announced size refused it before anything was downloaded");
}

#[tokio::test]
async fn a_text_document_is_inlined_with_its_name() {
    let (telegram, openai) = fakes().await;
    openai.push(Turn::text(["two items"]));
    let _daemon = daemon(&telegram, &openai, true).await;
    let bytes = b"milk\neggs\n".to_vec();
    let document = TgMedia::Document { file_name: "list.txt".into(), mime_type: "text/plain".into(), bytes };
    telegram.media_message(ADA, (ADA, "Ada"), document, None);
    let asked = request(&openai, 1).await;
    assert_eq!(
        asked.last_user_text().as_deref(),
        Some("[file \"list.txt\" (text/plain, 1 KB)]\nmilk\neggs\n[end of file]")
    );
}

#[tokio::test]
async fn a_voice_note_is_transcribed_and_the_transcript_is_the_message() {
    let (telegram, openai) = fakes().await;
    openai.set_transcript("Remind me to buy milk.");
    openai.push(Turn::text(["I will."]));
    let _daemon = daemon(&telegram, &openai, true).await;
    let mut ogg = b"OggS\x00\x02".to_vec();
    ogg.resize(4000, 3);
    telegram.media_message(ADA, (ADA, "Ada"), TgMedia::Voice { bytes: ogg, duration: 2 }, None);
    let asked = request(&openai, 1).await;
    assert_eq!(asked.last_user_text().as_deref(), Some("[voice note transcript] Remind me to buy milk."));
    let heard = openai.transcriptions();
    assert_eq!(heard.len(), 1);
    assert_eq!((heard[0].file_len, heard[0].language.as_deref()), (4000, Some("en")));
    assert_eq!(heard[0].api_key.as_deref(), Some("sk-voice"));
    assert_eq!(shown(&telegram, 1).await, ["I will."]);
}

#[tokio::test]
async fn the_agent_sends_a_photo_with_the_message_tool() {
    let (telegram, openai) = fakes().await;
    let arguments = r#"{"text": "Here is the chart", "media": "chart.jpg"}"#;
    openai.push(Turn::tool_calls([ToolCall::new("call-1", "message", arguments)]));
    openai.push(Turn::text(["NO_REPLY"]));
    let (_daemon, workspace) = daemon(&telegram, &openai, true).await;
    photo_in(workspace.path(), "chart.jpg", 800, 600);
    telegram.private_message(ADA, "Ada", "send me the chart");
    tokio::time::timeout(super::daemon::PATIENCE, async {
        while telegram.messages_in(ADA).iter().all(|message| message.media.is_none()) {
            tokio::time::sleep(std::time::Duration::from_millis(20)).await;
        }
    })
    .await
    .expect("a photo arrives");
    let sent = telegram.messages_in(ADA);
    let photo = sent.iter().find_map(|message| message.media.as_ref().map(|media| (message, media))).expect("photo");
    assert_eq!(photo.1.method, "sendPhoto");
    assert_eq!(photo.1.dimensions, Some((800, 600)));
    assert_eq!(photo.0.visible_text, "Here is the chart");
    let result = request(&openai, 2).await;
    assert!(format!("{:?}", result.body).contains(r#"\"ok\":true"#), "the tool reported the send");
}

#[tokio::test]
async fn a_media_line_in_the_reply_attaches_the_file_and_is_never_shown() {
    let (telegram, openai) = fakes().await;
    openai.push(Turn::text(["Here you go.\n", "MEDIA: plot.jpg\n"]));
    let (_daemon, workspace) = daemon(&telegram, &openai, true).await;
    photo_in(workspace.path(), "plot.jpg", 640, 480);
    telegram.private_message(ADA, "Ada", "plot it");
    let sent = tokio::time::timeout(super::daemon::PATIENCE, async {
        loop {
            let sent = telegram.messages_in(ADA);
            if sent.iter().any(|message| message.media.is_some()) {
                return sent;
            }
            tokio::time::sleep(std::time::Duration::from_millis(20)).await;
        }
    })
    .await
    .expect("a photo arrives");
    assert_eq!(sent.len(), 1, "one captioned photo: {sent:?}");
    assert_eq!(sent[0].visible_text, "Here you go.");
    assert_eq!(sent[0].media.as_ref().map(|media| media.method.as_str()), Some("sendPhoto"));
    assert!(telegram.sent().iter().all(|message| !message.visible_text.contains("MEDIA:")));
}

#[tokio::test]
async fn the_agents_photo_waits_out_a_429_and_arrives_once() {
    let (telegram, openai) = fakes().await;
    let arguments = r#"{"media": "chart.jpg"}"#;
    openai.push(Turn::tool_calls([ToolCall::new("call-1", "message", arguments)]));
    openai.push(Turn::text(["NO_REPLY"]));
    let (_daemon, workspace) = daemon(&telegram, &openai, true).await;
    photo_in(workspace.path(), "chart.jpg", 320, 240);
    telegram.fail_next_with_retry_after("sendPhoto", 1);
    telegram.private_message(ADA, "Ada", "chart");
    let result = request(&openai, 2).await;
    assert!(result.body.to_string().contains(r#"\"ok\":true"#), "the send succeeded after the 429: {}", result.body);
    let photos: Vec<_> = telegram.messages_in(ADA).into_iter().filter(|message| message.media.is_some()).collect();
    assert_eq!(photos.len(), 1, "exactly one photo: {photos:?}");
    assert_eq!(telegram.calls_to("sendPhoto").len(), 2, "refused once, then sent");
}

/// The gateway's threads (`/proc/<pid>/task`).
fn threads(pid: u32) -> usize {
    std::fs::read_dir(format!("/proc/{pid}/task")).map(Iterator::count).unwrap_or(0)
}

/// The gateway's resident memory in KiB (`VmRSS` of `/proc/<pid>/status`).
fn rss_kib(pid: u32) -> u64 {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap_or_default();
    let line = status.lines().find(|line| line.starts_with("VmRSS:")).unwrap_or_default();
    line.split_whitespace().nth(1).and_then(|kib| kib.parse().ok()).unwrap_or(u64::MAX)
}

/// Whether no thread of the gateway is running or waiting to run (state `R` in
/// `/proc/<pid>/task/<tid>/stat`): an idle gateway sleeps; one whose thread is stuck in a
/// parser loop never does.
fn idle(pid: u32) -> bool {
    let Ok(tasks) = std::fs::read_dir(format!("/proc/{pid}/task")) else { return false };
    tasks.filter_map(Result::ok).all(|task| {
        let stat = std::fs::read_to_string(task.path().join("stat")).unwrap_or_default();
        // The state follows the command name, which is in parentheses and may hold spaces.
        stat.rsplit_once(')').and_then(|(_, rest)| rest.split_whitespace().next()) != Some("R")
    })
}

/// Waits until `done` holds, polling; panics with `what` if it never does.
async fn until(what: &str, done: impl Fn() -> bool) {
    tokio::time::timeout(super::daemon::PATIENCE, async {
        while !done() {
            tokio::time::sleep(std::time::Duration::from_millis(50)).await;
        }
    })
    .await
    .unwrap_or_else(|_| panic!("{what}"));
}

/// How much the gateway's resident memory may differ after the hostile files: allocator
/// noise on a loaded machine, far below what one in-process parse of them would hold.
const RSS_TOLERANCE_KIB: u64 = 24 * 1024;

fn pdf(name: &str, bytes: Vec<u8>) -> TgMedia {
    TgMedia::Document { file_name: name.into(), mime_type: "application/pdf".into(), bytes }
}

#[tokio::test]
async fn a_pdf_that_makes_the_parser_loop_is_told_in_seconds_and_costs_the_gateway_nothing() {
    let (telegram, openai) = fakes().await;
    for answer in ["read it", "it loops", "it is too big"] {
        openai.push(Turn::text([answer]));
    }
    let workspace = tempfile::tempdir().expect("workspace");
    let config = format!(
        "[media]\nparse_timeout_seconds = 2\nparse_memory_mb = 256\n\n\
         [channels.telegram]\nenabled = true\nbot_token = \"{TOKEN}\"\napi_url = \"{}\"\n\
         dm_policy = \"open\"\nallow_from = [\"*\"]\n\n{}",
        telegram.url(),
        model_tables(&openai, true, workspace.path())
    );
    let daemon = daemon_in(tempfile::tempdir().expect("home"), &config, &openai, "telegram").await;
    let pid = daemon.child.id();

    // A normal PDF first: its text reaches the model, and the reader's one-time check of
    // the sandbox is behind us before anything is measured.
    let invoice = ferry_fakes::pdfs::text_pdf(&["Invoice 42", "Total: 10 EUR"]);
    telegram.media_message(ADA, (ADA, "Ada"), pdf("invoice.pdf", invoice), None);
    let asked = request(&openai, 1).await;
    assert_eq!(
        asked.last_user_text().as_deref(),
        Some("[file \"invoice.pdf\" (application/pdf, 1 KB), its text]\nInvoice 42\nTotal: 10 EUR\n[end of file]")
    );
    assert_eq!(shown(&telegram, 1).await, ["read it"]);
    until("the gateway goes idle after the first file", || idle(pid)).await;
    let (threads_before, rss_before) = (threads(pid), rss_kib(pid));

    telegram.media_message(ADA, (ADA, "Ada"), pdf("endless.pdf", ferry_fakes::pdfs::endless_pdf()), Some("read this"));
    let told = shown(&telegram, 3).await;
    assert_eq!(told[1], "📎 I could not read \"endless.pdf\": reading the PDF took longer than 2 s.");
    assert_eq!(told[2], "it loops");
    let asked = request(&openai, 2).await;
    let note = "read this\n\n[\"endless.pdf\" (application/pdf, 7 KB) could not be read: reading the PDF took \
                longer than 2 s]";
    assert_eq!(asked.last_user_text().as_deref(), Some(note));

    telegram.media_message(ADA, (ADA, "Ada"), pdf("bomb.pdf", ferry_fakes::pdfs::cmap_bomb_pdf()), None);
    let told = shown(&telegram, 5).await;
    // Whichever limit the child meets first: a debug build fills 256 MB in about 2 s.
    let endings = ["needed more than 256 MB of memory.", "took longer than 2 s."];
    let told_bomb = told[3].strip_prefix("📎 I could not read \"bomb.pdf\": reading the PDF ");
    assert!(told_bomb.is_some_and(|ending| endings.contains(&ending)), "{}", told[3]);

    // Nothing of either parse is left in the gateway: no thread still busy with it, no
    // thread more than before, its memory where it was.
    until("no thread of the gateway stays busy", || idle(pid)).await;
    until("the gateway's threads return to where they were", || threads(pid) <= threads_before).await;
    let rss_after = rss_kib(pid);
    assert!(
        rss_after <= rss_before + RSS_TOLERANCE_KIB,
        "the gateway's memory grew from {rss_before} KiB to {rss_after} KiB"
    );
}
