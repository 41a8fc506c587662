//! Files through the Discord adapter against the fake Discord: inbound attachments are
//! normalized and downloaded from their signed CDN links (and fail as they should when a
//! link expired or the CDN pushes back); outbound files are uploaded as multipart creates
//! with their text, reply reference and nonce, and Discord's refusals are classified.

use std::io::Write;
use std::path::Path;
use std::time::Duration;

use ferry_channel::{Attachment, AttachmentKind, Channel, ChannelError, ChatKind, ChatRef, OutboundMessage, Target};
use ferry_discord::DiscordChannel;
use ferry_fakes::{DISCORD_UPLOAD_LIMIT, DiscordFile, DiscordUser, FakeDiscord};
use futures::StreamExt;

mod common;
use common::{PATIENCE, TOKEN, config, started};

/// A connected channel that only sends (no gateway session), and a guild channel 10.
async fn sender(discord: &FakeDiscord) -> (DiscordChannel, Target) {
    let channel = DiscordChannel::connect(config(discord)).await.expect("connect");
    discord.add_guild_channel(1, 10);
    (channel, Target { chat: ChatRef::new(ChatKind::Channel, "10"), thread_id: None })
}

fn ada() -> DiscordUser {
    DiscordUser::new(4242, "ada")
}

/// A PNG of `width` × `height` pixels.
fn png(width: u32, height: u32) -> Vec<u8> {
    let mut bytes = Vec::new();
    image::RgbImage::new(width, height)
        .write_to(&mut std::io::Cursor::new(&mut bytes), image::ImageFormat::Png)
        .expect("encoding a PNG in memory");
    bytes
}

/// `bytes` in a file of the test's temporary directory.
fn stored(dir: &Path, name: &str, bytes: &[u8]) -> std::path::PathBuf {
    let path = dir.join(name);
    std::fs::File::create(&path).and_then(|mut file| file.write_all(bytes)).expect("writing a test file");
    path
}

/// An outbound attachment as the core hands it over: a stored file, sniffed and measured.
fn outbound(path: &Path, kind: AttachmentKind, mime: &str, name: Option<&str>) -> Attachment {
    let mut attachment = Attachment::remote(kind, "media store");
    attachment.path = Some(path.to_owned());
    attachment.mime_type = Some(mime.to_owned());
    attachment.file_name = name.map(str::to_owned);
    attachment.size_bytes = std::fs::metadata(path).ok().map(|meta| meta.len());
    attachment
}

fn with_file(target: &Target, text: &str, attachment: Attachment) -> OutboundMessage {
    let mut message = OutboundMessage::text(target.clone(), text);
    message.attachments = vec![attachment];
    message
}

async fn downloaded(channel: &DiscordChannel, attachment: &Attachment) -> Result<(Option<u64>, Vec<u8>), ChannelError> {
    let download = channel.download(attachment).await?;
    let mut bytes = Vec::new();
    let mut body = download.body;
    while let Some(chunk) = body.next().await {
        bytes.extend_from_slice(&chunk?);
    }
    Ok((download.declared_len, bytes))
}

#[tokio::test]
async fn an_inbound_attachment_is_normalized_and_downloads_to_the_same_bytes() {
    let discord = FakeDiscord::start(TOKEN).await.unwrap();
    let (channel, mut inbound) = started(&discord).await;
    let image = png(3, 2);
    let notes = b"line one\nline two\n".to_vec();
    let files = vec![
        DiscordFile::new("cat.png", Some("image/png"), image.clone()),
        DiscordFile::new("notes", None, notes.clone()),
    ];
    discord.dm_with_files(&ada(), "look", files);
    let delivery = tokio::time::timeout(PATIENCE, inbound.next()).await.expect("in time").expect("open");
    delivery.ack.accept();
    let message = delivery.message;
    assert_eq!(message.text, "look");
    let [cat, bare] = message.attachments.as_slice() else { panic!("{:?}", message.attachments) };
    assert_eq!(
        (cat.kind, cat.mime_type.as_deref(), cat.file_name.as_deref()),
        (AttachmentKind::Image, Some("image/png"), Some("cat.png"))
    );
    assert_eq!((cat.size_bytes, cat.dimensions), (Some(image.len() as u64), Some((3, 2))));
    assert!(cat.reference.starts_with(&discord.url()) && cat.reference.contains("hm="), "{}", cat.reference);
    assert_eq!((bare.kind, bare.dimensions, bare.size_bytes), (AttachmentKind::Other, None, Some(notes.len() as u64)));

    assert_eq!(downloaded(&channel, cat).await.unwrap(), (Some(image.len() as u64), image));
    assert_eq!(downloaded(&channel, bare).await.unwrap().1, notes);
    let requests = discord.cdn_requests();
    assert_eq!(requests.len(), 2);
    assert!(requests.iter().all(|request| request.status == 200 && !request.authorization), "{requests:?}");
}

#[tokio::test]
async fn an_expired_link_is_rejected_and_the_error_names_the_file_not_the_link() {
    let discord = FakeDiscord::start(TOKEN).await.unwrap();
    let (channel, mut inbound) = started(&discord).await;
    discord.dm_with_files(&ada(), "", vec![DiscordFile::new("cat.png", Some("image/png"), png(1, 1))]);
    let message = tokio::time::timeout(PATIENCE, inbound.next()).await.expect("in time").expect("open").message;
    assert_eq!(message.text, "", "a bare attachment is a message");
    discord.expire_attachment_links();
    let error = downloaded(&channel, &message.attachments[0]).await.unwrap_err();
    let ChannelError::Rejected { reason } = &error else { panic!("{error:?}") };
    assert!(reason.contains("cat.png") && reason.contains("404"), "{reason}");
    assert!(!reason.contains("hm=") && !reason.contains(&discord.url()), "the signed link stays out: {reason}");
    assert!(!error.is_retryable());
}

#[tokio::test]
async fn a_rate_limited_or_failing_cdn_makes_a_download_retryable() {
    let discord = FakeDiscord::start(TOKEN).await.unwrap();
    let (channel, mut inbound) = started(&discord).await;
    discord.dm_with_files(&ada(), "x", vec![DiscordFile::new("a.bin", None, vec![7; 100])]);
    let message = tokio::time::timeout(PATIENCE, inbound.next()).await.expect("in time").expect("open").message;
    let attachment = &message.attachments[0];
    discord.fail_next_download(429);
    discord.fail_next_download(503);
    assert_eq!(
        downloaded(&channel, attachment).await.unwrap_err(),
        ChannelError::RateLimited { retry_after: Some(Duration::from_secs(3)) }
    );
    assert!(matches!(downloaded(&channel, attachment).await, Err(ChannelError::Transient { .. })));
    assert_eq!(downloaded(&channel, attachment).await.unwrap().1, vec![7; 100], "the third try gets the file");
}

#[tokio::test]
async fn an_image_is_uploaded_with_its_text_its_type_and_the_reply_reference() {
    let discord = FakeDiscord::start(TOKEN).await.unwrap().without_rate_limits();
    let (channel, target) = sender(&discord).await;
    let question = discord.inject_message(10, &ada(), "draw me something");
    let dir = tempfile::tempdir().unwrap();
    let image = png(4, 3);
    let path = stored(dir.path(), "5f2b9c", &image);
    let mut reply =
        with_file(&target, "here it is", outbound(&path, AttachmentKind::Image, "image/png", Some("chart")));
    reply.reply_to_message_id = Some(question.to_string());
    reply.idempotency_key = Some("d9:0".to_owned());
    let sent = channel.send(reply).await.unwrap();

    let shown = discord.messages_in(10);
    assert_eq!(shown.len(), 1);
    let message = &shown[0];
    assert_eq!((message.message_id.to_string(), message.content.as_str()), (sent.message_id, "here it is"));
    assert_eq!(message.reply_to, Some(question), "threaded to the question");
    let [file] = message.attachments.as_slice() else { panic!("{:?}", message.attachments) };
    assert_eq!((file.filename.as_str(), file.content_type.as_deref()), ("chart.png", Some("image/png")));
    assert_eq!(file.bytes, image);

    let create = discord.calls().into_iter().rfind(|call| call.is_create_message()).unwrap();
    assert_eq!(create.body["attachments"], serde_json::json!([{"id": 0, "filename": "chart.png"}]));
    assert_eq!(create.body["enforce_nonce"], true);
    assert!(create.body["nonce"].is_string());
    assert_eq!(create.body["allowed_mentions"]["parse"], serde_json::json!(["users"]));
    assert_eq!((create.files.len(), create.files[0].size), (1, image.len()));
}

#[tokio::test]
async fn a_file_without_text_is_sent_without_content() {
    let discord = FakeDiscord::start(TOKEN).await.unwrap().without_rate_limits();
    let (channel, target) = sender(&discord).await;
    let dir = tempfile::tempdir().unwrap();
    let path = stored(dir.path(), "report.pdf", b"%PDF-1.7 not really");
    let attachment = outbound(&path, AttachmentKind::Document, "application/pdf", None);
    channel.send(with_file(&target, "", attachment)).await.unwrap();
    let shown = discord.messages_in(10);
    assert_eq!((shown[0].content.as_str(), shown[0].attachments[0].filename.as_str()), ("", "report.pdf"));
    let create = discord.calls().into_iter().rfind(|call| call.is_create_message()).unwrap();
    assert!(create.body.get("content").is_none(), "{}", create.body);
}

#[tokio::test]
async fn an_upload_over_discords_limit_is_rejected_and_not_retried() {
    let discord = FakeDiscord::start(TOKEN).await.unwrap().without_rate_limits();
    let (channel, target) = sender(&discord).await;
    let dir = tempfile::tempdir().unwrap();
    let path = stored(dir.path(), "big.bin", &vec![0; DISCORD_UPLOAD_LIMIT + 1]);
    let attachment = outbound(&path, AttachmentKind::Document, "application/octet-stream", Some("big.bin"));
    let error = channel.send(with_file(&target, "too much", attachment)).await.unwrap_err();
    let ChannelError::Rejected { reason } = &error else { panic!("{error:?}") };
    assert!(reason.contains("413") && reason.contains("40005"), "{reason}");
    assert!(discord.messages_in(10).is_empty());
}

#[tokio::test]
async fn a_rate_limited_upload_is_rate_limited_with_retry_after() {
    let discord = FakeDiscord::start(TOKEN).await.unwrap().without_rate_limits();
    let (channel, target) = sender(&discord).await;
    let dir = tempfile::tempdir().unwrap();
    let path = stored(dir.path(), "a.png", &png(1, 1));
    let message = with_file(&target, "x", outbound(&path, AttachmentKind::Image, "image/png", Some("a.png")));
    discord.fail_next_with_429(10, Duration::from_millis(2500));
    let error = channel.send(message.clone()).await.unwrap_err();
    assert_eq!(error, ChannelError::RateLimited { retry_after: Some(Duration::from_millis(2500)) });
    channel.send(message).await.expect("the retry goes through");
    assert_eq!(discord.messages_in(10).len(), 1);
}

#[tokio::test]
async fn a_repeated_upload_whose_answer_was_lost_is_shown_once() {
    let discord = FakeDiscord::start(TOKEN).await.unwrap().without_rate_limits();
    let (channel, target) = sender(&discord).await;
    let dir = tempfile::tempdir().unwrap();
    let path = stored(dir.path(), "a.png", &png(2, 2));
    let mut message = with_file(&target, "once", outbound(&path, AttachmentKind::Image, "image/png", Some("a.png")));
    message.idempotency_key = Some("d3:1".to_owned());
    discord.apply_then_drop_next(10);
    let error = channel.send(message.clone()).await.unwrap_err();
    assert!(matches!(error, ChannelError::Transient { .. }), "{error:?}");
    let retried = channel.send(message).await.unwrap();
    let shown = discord.messages_in(10);
    assert_eq!(shown.len(), 1, "Discord answered the repeat with the message it had created");
    assert_eq!((retried.message_id, shown[0].attachments.len()), (shown[0].message_id.to_string(), 1));
    assert_eq!(discord.nonce_replays().len(), 1);
}
