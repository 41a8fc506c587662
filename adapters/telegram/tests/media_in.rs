//! Inbound files against the fake Bot API: each kind of media a user sends is normalized
//! into an attachment and downloads byte for byte through `getFile` and the file URL; a file
//! over the download limit is refused before any byte moves; a failed download is classified
//! and never shows the bot token.

use std::future::Future;
use std::time::Duration;

use ferry_channel::{Attachment, AttachmentKind, Channel, ChannelError, InboundStream};
use ferry_fakes::{DOWNLOAD_LIMIT, FakeTelegram, StickerFormat, TgMedia, TgUser};
use ferry_telegram::{TelegramChannel, TelegramConfig};
use futures::StreamExt;

const TOKEN: &str = "123456:TEST-TOKEN";
const SECRET: &str = "TEST-TOKEN";
const ADA: i64 = 42;

/// Upper bound for anything a test waits for; never a sleep that passes a test by itself.
const PATIENCE: Duration = Duration::from_secs(15);

async fn within<T>(what: &str, future: impl Future<Output = T>) -> T {
    tokio::time::timeout(PATIENCE, future).await.unwrap_or_else(|_| panic!("timed out waiting for {what}"))
}

async fn setup() -> (FakeTelegram, TelegramChannel) {
    let telegram = FakeTelegram::start(TOKEN).await.expect("fake Telegram").without_rate_limits();
    let mut config = TelegramConfig::new(telegram.token());
    config.api_url = telegram.url();
    config.poll_timeout = Duration::from_secs(5);
    let channel = TelegramChannel::connect(config).await.expect("connect");
    (telegram, channel)
}

fn ada() -> TgUser {
    TgUser::new(ADA, "Ada")
}

/// The attachments of the next inbound message, acked.
async fn next_attachments(inbound: &mut InboundStream) -> (String, Vec<Attachment>) {
    let delivery = within("an inbound message", inbound.next()).await.expect("the inbound stream ended");
    delivery.ack.accept();
    (delivery.message.text, delivery.message.attachments)
}

/// Downloads an attachment whole, checking the declared length against what arrived.
async fn download(channel: &TelegramChannel, attachment: &Attachment) -> Result<Vec<u8>, ChannelError> {
    let download = channel.download(attachment).await?;
    let declared = download.declared_len;
    let mut body = download.body;
    let mut bytes = Vec::new();
    while let Some(chunk) = within("a download chunk", body.next()).await {
        bytes.extend_from_slice(&chunk?);
    }
    assert_eq!(declared, Some(bytes.len() as u64), "Content-Length is the declared length");
    Ok(bytes)
}

#[tokio::test]
async fn each_inbound_kind_is_normalized_and_downloads_byte_for_byte() {
    let (telegram, channel) = setup().await;
    let mut inbound = channel.start().await.unwrap();
    let from_fake = |file_id: &str| telegram.file_bytes(file_id).expect("the fake holds the file").to_vec();

    // A photo in three sizes with a caption: the largest size, its pixels, the caption as text.
    let photo =
        telegram.media_message(ADA, ada(), TgMedia::Photo(vec![(90, 60), (320, 213), (800, 533)]), Some("look"));
    let (text, attachments) = next_attachments(&mut inbound).await;
    assert_eq!(text, "look");
    let [image] = attachments.as_slice() else { panic!("one attachment: {attachments:?}") };
    assert_eq!((image.kind, image.mime_type.as_deref()), (AttachmentKind::Image, Some("image/jpeg")));
    assert_eq!((image.reference.as_str(), image.dimensions), (photo.files[2].file_id.as_str(), Some((800, 533))));
    assert_eq!(image.size_bytes, Some(photo.files[2].file_size));
    assert_eq!(download(&channel, image).await.unwrap(), from_fake(&photo.files[2].file_id));

    let pdf = b"%PDF-1.4 a small report".to_vec();
    let document =
        TgMedia::Document { file_name: "report.pdf".into(), mime_type: "application/pdf".into(), bytes: pdf.clone() };
    telegram.media_message(ADA, ada(), document, None);
    let (text, attachments) = next_attachments(&mut inbound).await;
    assert_eq!(text, "");
    let document = &attachments[0];
    assert_eq!(document.kind, AttachmentKind::Document);
    assert_eq!(
        (document.file_name.as_deref(), document.mime_type.as_deref()),
        (Some("report.pdf"), Some("application/pdf"))
    );
    assert_eq!(download(&channel, document).await.unwrap(), pdf);

    let opus = b"OggS\0voice note bytes".to_vec();
    telegram.media_message(ADA, ada(), TgMedia::Voice { bytes: opus.clone(), duration: 3 }, None);
    let (_, attachments) = next_attachments(&mut inbound).await;
    let voice = &attachments[0];
    assert_eq!((voice.kind, voice.mime_type.as_deref()), (AttachmentKind::Audio, Some("audio/ogg")));
    assert_eq!(voice.size_bytes, Some(opus.len() as u64));
    assert_eq!(download(&channel, voice).await.unwrap(), opus);

    let webp = b"RIFF\0\0\0\0WEBPVP8 sticker".to_vec();
    telegram.media_message(ADA, ada(), TgMedia::Sticker { format: StickerFormat::Static, bytes: webp.clone() }, None);
    let (_, attachments) = next_attachments(&mut inbound).await;
    let sticker = &attachments[0];
    assert_eq!((sticker.kind, sticker.mime_type.as_deref()), (AttachmentKind::Image, Some("image/webp")));
    assert_eq!(sticker.dimensions, Some((512, 512)));
    assert_eq!(download(&channel, sticker).await.unwrap(), webp);

    let tgs = vec![0x1f, 0x8b, 8, 0, 1, 2, 3];
    telegram.media_message(ADA, ada(), TgMedia::Sticker { format: StickerFormat::Animated, bytes: tgs.clone() }, None);
    let (_, attachments) = next_attachments(&mut inbound).await;
    let animated = &attachments[0];
    assert_eq!(
        (animated.kind, animated.mime_type.as_deref()),
        (AttachmentKind::Other, Some("application/x-tgsticker"))
    );
    assert_eq!(animated.file_name.as_deref(), Some("sticker.tgs"));
    assert_eq!(download(&channel, animated).await.unwrap(), tgs);

    let mp4 = b"\0\0\0\x18ftypmp42 round video".to_vec();
    telegram.media_message(ADA, ada(), TgMedia::VideoNote { length: 240, bytes: mp4.clone() }, None);
    let (_, attachments) = next_attachments(&mut inbound).await;
    let note = &attachments[0];
    assert_eq!(
        (note.kind, note.mime_type.as_deref(), note.dimensions),
        (AttachmentKind::Video, Some("video/mp4"), Some((240, 240)))
    );
    assert_eq!(download(&channel, note).await.unwrap(), mp4);
}

#[tokio::test]
async fn a_file_over_the_download_limit_is_refused_before_any_byte_moves() {
    let (telegram, channel) = setup().await;
    let big = vec![0u8; DOWNLOAD_LIMIT as usize + 1];
    let document =
        TgMedia::Document { file_name: "big.bin".into(), mime_type: "application/octet-stream".into(), bytes: big };
    let injected = telegram.media_message(ADA, ada(), document, None);
    let attachment = Attachment::remote(AttachmentKind::Document, injected.files[0].file_id.clone());
    let error = channel.download(&attachment).await.expect_err("getFile refuses files over 20 MB");
    assert!(matches!(&error, ChannelError::Rejected { reason } if reason.contains("file is too big")), "{error:?}");
    assert!(telegram.calls_to("file").is_empty(), "no download was attempted");
}

#[tokio::test]
async fn a_failed_download_is_classified_and_never_shows_the_token() {
    let (telegram, channel) = setup().await;
    let bytes = b"some bytes".to_vec();
    let document = TgMedia::Document { file_name: "a.txt".into(), mime_type: "text/plain".into(), bytes };
    let injected = telegram.media_message(ADA, ada(), document, None);
    let attachment = Attachment::remote(AttachmentKind::Document, injected.files[0].file_id.clone());
    let shows_token =
        |error: &ChannelError| error.to_string().contains(SECRET) || format!("{error:?}").contains(SECRET);

    // The connection closes without an answer (the URL with the token is in reqwest's error).
    telegram.drop_next_connection("file");
    let error = match channel.download(&attachment).await {
        Err(error) => error,
        // The headers may have arrived before the body broke off: then the stream fails.
        Ok(download) => {
            let chunks: Vec<_> = within("the broken body", download.body.collect()).await;
            chunks.into_iter().find_map(Result::err).expect("a body error")
        }
    };
    assert!(matches!(error, ChannelError::Transient { .. }), "{error:?}");
    assert!(!shows_token(&error), "{error}");

    telegram.fail_next("file", 502, "Bad Gateway");
    let error = channel.download(&attachment).await.expect_err("a 5xx");
    assert!(matches!(error, ChannelError::Transient { .. }) && !shows_token(&error), "{error:?}");

    telegram.fail_next_with_retry_after("file", 4);
    let error = channel.download(&attachment).await.expect_err("a 429");
    assert_eq!(error, ChannelError::RateLimited { retry_after: Some(Duration::from_secs(4)) });

    // An unknown file id is refused by getFile, with Telegram's reason.
    let unknown = Attachment::remote(AttachmentKind::Document, "no-such-file");
    let error = channel.download(&unknown).await.expect_err("unknown file id");
    assert!(matches!(error, ChannelError::Rejected { .. }) && !shows_token(&error), "{error:?}");

    // And after all that, the file still downloads.
    let download = channel.download(&attachment).await.expect("a download");
    let chunks: Vec<_> = download.body.collect().await;
    assert!(chunks.iter().all(Result::is_ok));
}
