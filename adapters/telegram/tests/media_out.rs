//! Outbound files against the fake Bot API: each kind of attachment arrives through the
//! method that shows it best, with the message's text as its caption; caption markup that
//! Telegram refuses comes back as `MarkupRejected` (the core then resends plain); flood
//! control and dropped uploads are classified like text sends.

use std::path::PathBuf;
use std::time::Duration;

use ferry_channel::{
    Attachment, AttachmentKind, Channel, ChannelError, ChatKind, ChatRef, OutboundMessage, Target, TextFormat,
};
use ferry_fakes::{FakeTelegram, SentMessage, TgUser, sample_jpeg};
use ferry_telegram::{TelegramChannel, TelegramConfig};
use serde_json::Value;

const TOKEN: &str = "123456:TEST-TOKEN";
const ADA: i64 = 42;
const FORUM: i64 = -100777;

struct Setup {
    telegram: FakeTelegram,
    channel: TelegramChannel,
    /// Where the test's files live (Ferry's media store, in production).
    dir: tempfile::TempDir,
}

async fn setup() -> Setup {
    let telegram = FakeTelegram::start(TOKEN).await.expect("fake Telegram").without_rate_limits();
    telegram.private_message(ADA, "Ada", "hi");
    telegram.topic_message(FORUM, 50, TgUser::new(5, "Bob"), "hi");
    let mut config = TelegramConfig::new(telegram.token());
    config.api_url = telegram.url();
    let channel = TelegramChannel::connect(config).await.expect("connect");
    Setup { telegram, channel, dir: tempfile::tempdir().expect("a temporary directory") }
}

impl Setup {
    /// A file in the store, named like a content hash (no extension), as the core's are.
    fn file(&self, name: &str, bytes: &[u8]) -> PathBuf {
        let path = self.dir.path().join(name);
        std::fs::write(&path, bytes).expect("write a test file");
        path
    }

    /// A message to Ada carrying the file at `path` as `attachment`, with `text` as caption.
    fn message(&self, text: &str, attachment: Attachment) -> OutboundMessage {
        let target = Target { chat: ChatRef::new(ChatKind::Direct, ADA.to_string()), thread_id: None };
        OutboundMessage { attachments: vec![attachment], ..OutboundMessage::text(target, text) }
    }

    /// The message the fake shows for a send's returned id.
    fn shown(&self, chat_id: i64, message_id: &str) -> SentMessage {
        let found = self.telegram.messages_in(chat_id).into_iter().find(|m| m.message_id.to_string() == message_id);
        found.unwrap_or_else(|| panic!("message {message_id} is not in chat {chat_id}"))
    }

    fn last_params(&self, method: &str) -> Value {
        self.telegram.calls_to(method).last().unwrap_or_else(|| panic!("no {method} call")).params.clone()
    }
}

/// An outbound attachment as the core builds it: a file in the store, type and size measured.
fn outbound(kind: AttachmentKind, mime: &str, path: &std::path::Path) -> Attachment {
    Attachment {
        mime_type: Some(mime.to_owned()),
        size_bytes: std::fs::metadata(path).ok().map(|m| m.len()),
        path: Some(path.to_owned()),
        ..Attachment::remote(kind, "media/test")
    }
}

#[tokio::test]
async fn an_image_arrives_as_a_photo_with_its_caption() {
    let setup = setup().await;
    let jpeg = sample_jpeg(640, 480);
    let path = setup.file("3f9a1c", &jpeg);
    let attachment =
        Attachment { dimensions: Some((640, 480)), ..outbound(AttachmentKind::Image, "image/jpeg", &path) };
    let sent = setup.channel.send(setup.message("a cat", attachment)).await.expect("sendPhoto");
    let shown = setup.shown(ADA, &sent.message_id);
    let media = shown.media.expect("a file");
    assert_eq!(media.method, "sendPhoto");
    assert_eq!((shown.visible_text.as_str(), shown.parse_mode), ("a cat", None));
    assert_eq!((&media.bytes[..], media.dimensions), (&jpeg[..], Some((640, 480))));
    assert!(setup.telegram.calls_to("sendMessage").is_empty(), "one request: the file with its caption");
}

#[tokio::test]
async fn a_gif_and_an_image_outside_the_photo_rules_arrive_as_documents() {
    let setup = setup().await;
    let gif = setup.file("gif", b"GIF89a tiny animation");
    let sent = setup.channel.send(setup.message("", outbound(AttachmentKind::Image, "image/gif", &gif))).await.unwrap();
    let media = setup.shown(ADA, &sent.message_id).media.expect("a file");
    assert_eq!((media.method.as_str(), media.file_name.as_str()), ("sendDocument", "gif.gif"));

    // Known to be 21:1: never tried as a photo.
    let strip = setup.file("strip", &sample_jpeg(2100, 100));
    let attachment =
        Attachment { dimensions: Some((2100, 100)), ..outbound(AttachmentKind::Image, "image/jpeg", &strip) };
    let sent = setup.channel.send(setup.message("", attachment)).await.unwrap();
    assert_eq!(setup.shown(ADA, &sent.message_id).media.expect("a file").method, "sendDocument");
    assert!(setup.telegram.calls_to("sendPhoto").is_empty());
}

#[tokio::test]
async fn a_photo_telegram_refuses_for_its_shape_is_resent_as_a_document() {
    let setup = setup().await;
    // The core did not measure it; Telegram refuses it as a photo, nothing was shown.
    let strip = setup.file("strip", &sample_jpeg(2100, 100));
    let attachment = outbound(AttachmentKind::Image, "image/jpeg", &strip);
    let sent = setup.channel.send(setup.message("wide", attachment)).await.expect("sent as a document");
    let photo_calls = setup.telegram.calls_to("sendPhoto");
    assert_eq!(photo_calls.len(), 1);
    assert_eq!(photo_calls[0].status(), Some(400));
    let shown = setup.shown(ADA, &sent.message_id);
    assert_eq!((shown.media.expect("a file").method.as_str(), shown.visible_text.as_str()), ("sendDocument", "wide"));
    assert_eq!(setup.telegram.messages_in(ADA).len(), 1, "shown once");
}

#[tokio::test]
async fn opus_arrives_as_a_voice_note_mp3_as_audio_and_mp4_as_video() {
    let setup = setup().await;
    let cases = [
        (AttachmentKind::Audio, "audio/ogg", "sendVoice"),
        (AttachmentKind::Audio, "audio/mpeg", "sendAudio"),
        (AttachmentKind::Video, "video/mp4", "sendVideo"),
        (AttachmentKind::Audio, "audio/wav", "sendDocument"),
    ];
    for (index, (kind, mime, method)) in cases.into_iter().enumerate() {
        let bytes = format!("{mime} bytes").into_bytes();
        let path = setup.file(&format!("file{index}"), &bytes);
        let caption = format!("as {method}");
        let sent = setup.channel.send(setup.message(&caption, outbound(kind, mime, &path))).await.unwrap();
        let shown = setup.shown(ADA, &sent.message_id);
        let media = shown.media.expect("a file");
        assert_eq!((media.method.as_str(), shown.visible_text.as_str()), (method, caption.as_str()), "{mime}");
        assert_eq!(&media.bytes[..], &bytes[..], "{mime}");
    }
}

#[tokio::test]
async fn a_document_keeps_its_name_and_an_empty_text_sends_no_caption() {
    let setup = setup().await;
    let path = setup.file("a1b2c3", b"%PDF-1.4 report");
    let attachment = Attachment {
        file_name: Some("report.pdf".into()),
        ..outbound(AttachmentKind::Document, "application/pdf", &path)
    };
    let sent = setup.channel.send(setup.message("", attachment)).await.unwrap();
    let shown = setup.shown(ADA, &sent.message_id);
    let media = shown.media.expect("a file");
    assert_eq!((media.method.as_str(), media.file_name.as_str()), ("sendDocument", "report.pdf"));
    assert_eq!(media.mime_type, "application/pdf");
    assert!(setup.last_params("sendDocument").get("caption").is_none());
    assert_eq!(shown.visible_text, "");
}

#[tokio::test]
async fn caption_markup_goes_as_html_and_a_refused_one_is_markup_rejected_then_sent_plain() {
    let setup = setup().await;
    let path = setup.file("photo", &sample_jpeg(64, 64));
    let photo = || Attachment { dimensions: Some((64, 64)), ..outbound(AttachmentKind::Image, "image/jpeg", &path) };

    let styled = OutboundMessage { format: TextFormat::Markup, ..setup.message("<b>bold</b> cat", photo()) };
    let sent = setup.channel.send(styled).await.expect("HTML caption");
    assert_eq!(setup.last_params("sendPhoto")["parse_mode"], "HTML");
    assert_eq!(setup.shown(ADA, &sent.message_id).visible_text, "bold cat");

    let broken = OutboundMessage { format: TextFormat::Markup, ..setup.message("<b>open cat", photo()) };
    let error = setup.channel.send(broken.clone()).await.expect_err("Telegram refuses the markup");
    assert!(matches!(error, ChannelError::MarkupRejected { .. }), "{error:?}");
    assert_eq!(setup.telegram.messages_in(ADA).len(), 1, "the refused photo was not shown");
    // What the core does next: the same message as plain text.
    let plain = OutboundMessage { format: TextFormat::Plain, ..broken };
    let sent = setup.channel.send(plain).await.expect("plain caption");
    assert_eq!(setup.shown(ADA, &sent.message_id).visible_text, "<b>open cat");
    assert!(setup.last_params("sendPhoto").get("parse_mode").is_none());
}

#[tokio::test]
async fn an_overlong_caption_is_too_long_with_the_caption_limit() {
    let setup = setup().await;
    let path = setup.file("doc", b"text");
    let message = setup.message(&"x".repeat(1100), outbound(AttachmentKind::Document, "text/plain", &path));
    let error = setup.channel.send(message).await.expect_err("over 1024");
    assert_eq!(error, ChannelError::TooLong { len: 1100, limit: 1024 });
}

#[tokio::test]
async fn a_file_in_a_topic_replies_like_a_text_send() {
    let setup = setup().await;
    let path = setup.file("doc", b"notes");
    let target = Target { chat: ChatRef::new(ChatKind::Group, FORUM.to_string()), thread_id: Some("50".into()) };
    let message = OutboundMessage {
        target,
        reply_to_message_id: Some("51".into()),
        ..setup.message("here", outbound(AttachmentKind::Document, "text/plain", &path))
    };
    let sent = setup.channel.send(message).await.unwrap();
    let shown = setup.shown(FORUM, &sent.message_id);
    assert_eq!((shown.thread_id, shown.reply_to), (Some(50), Some(51)));
    // Multipart fields are text: structured ones are JSON inside, as the Bot API reads them.
    let params = setup.last_params("sendDocument");
    let reply: Value = serde_json::from_str(params["reply_parameters"].as_str().expect("a JSON field")).unwrap();
    assert_eq!(reply["allow_sending_without_reply"], true);
}

#[tokio::test]
async fn flood_control_on_send_photo_is_rate_limited_with_one_request() {
    let setup = setup().await;
    let path = setup.file("photo", &sample_jpeg(64, 64));
    setup.telegram.fail_next_with_retry_after("sendPhoto", 5);
    let message = setup.message("cat", outbound(AttachmentKind::Image, "image/jpeg", &path));
    let error = setup.channel.send(message).await.expect_err("429");
    assert_eq!(error, ChannelError::RateLimited { retry_after: Some(Duration::from_secs(5)) });
    assert_eq!(setup.telegram.calls_to("sendPhoto").len(), 1, "no hidden retry: the core's scheduler decides");
    assert_eq!(setup.telegram.calls_to("sendDocument").len(), 0, "a 429 is not a reason to try a document");
}

#[tokio::test]
async fn a_dropped_upload_is_transient_and_never_shows_the_token() {
    let setup = setup().await;
    let path = setup.file("doc", b"notes");
    setup.telegram.drop_next_connection("sendDocument");
    let message = setup.message("", outbound(AttachmentKind::Document, "text/plain", &path));
    let error = setup.channel.send(message).await.expect_err("dropped");
    assert!(matches!(error, ChannelError::Transient { .. }), "{error:?}");
    assert!(!error.to_string().contains("TEST-TOKEN"), "{error}");
}

#[tokio::test]
async fn a_missing_file_is_rejected_without_a_request() {
    let setup = setup().await;
    let missing = setup.dir.path().join("gone");
    let message = setup.message("", outbound(AttachmentKind::Document, "text/plain", &missing));
    let error = setup.channel.send(message).await.expect_err("no file");
    assert!(matches!(error, ChannelError::Rejected { .. }), "{error:?}");
    assert!(setup.telegram.calls_to("sendDocument").is_empty());
}

#[tokio::test]
async fn a_file_the_bot_sent_can_be_downloaded_back() {
    let setup = setup().await;
    let bytes = b"round trip".to_vec();
    let path = setup.file("doc", &bytes);
    let sent =
        setup.channel.send(setup.message("", outbound(AttachmentKind::Document, "text/plain", &path))).await.unwrap();
    let file = setup.shown(ADA, &sent.message_id).media.expect("a file").file;
    let download = setup.channel.download(&Attachment::remote(AttachmentKind::Document, file.file_id)).await.unwrap();
    let chunks: Vec<_> = futures::StreamExt::collect::<Vec<_>>(download.body).await;
    let received: Vec<u8> = chunks.into_iter().flat_map(|chunk| chunk.expect("a chunk").to_vec()).collect();
    assert_eq!(received, bytes);
}
