//! Files of every kind through [`Media::receive`], served by a memory channel.

use std::io::Cursor;

use ferry_channel::memory::MemoryChannel;
use image::{ImageFormat, Rgb, RgbImage};

use super::*;

fn media(config: MediaConfig) -> (tempfile::TempDir, Arc<Media>) {
    let dir = tempfile::tempdir().expect("temp dir");
    let media = Media::open(&dir.path().join("media"), &config, &Environment::from_process()).expect("media opens");
    (dir, Arc::new(media))
}

/// A 3000×2000 JPEG photo (a smooth gradient, like a real one).
fn photo_jpeg() -> Vec<u8> {
    let image = RgbImage::from_fn(3000, 2000, |x, y| Rgb([(x / 12) as u8, (y / 8) as u8, 90]));
    let mut bytes = Cursor::new(Vec::new());
    image.write_to(&mut bytes, ImageFormat::Jpeg).expect("encode");
    bytes.into_inner()
}

fn served(reference: &str, bytes: Vec<u8>) -> MemoryChannel {
    let channel = MemoryChannel::new("memory", "default");
    channel.serve_file(reference, bytes);
    channel
}

fn file(kind: AttachmentKind, reference: &str, name: Option<&str>) -> Attachment {
    Attachment { file_name: name.map(str::to_owned), ..Attachment::remote(kind, reference) }
}

#[cfg(feature = "media")]
#[tokio::test]
async fn a_photo_becomes_a_downscaled_image_kept_in_the_store() {
    let (_dir, media) = media(MediaConfig::default());
    let channel = served("p1", photo_jpeg());
    let received = media.receive(&channel, &[file(AttachmentKind::Image, "p1", None)]).await;
    assert!(received.refusals.is_empty() && received.text.is_empty(), "{received:?}");
    let [photo] = received.media.as_slice() else { panic!("one media reference: {received:?}") };
    assert_eq!((photo.width, photo.height), (Some(1568), Some(1045)));
    assert_eq!(photo.mime_type, "image/jpeg");
    let part = photo.image.as_ref().expect("the image is loaded for this turn");
    assert_eq!((part.width, part.height), (1568, 1045));
    // What the store holds is exactly what the model was sent, so history replays it.
    let replayed = media.load_image(&MediaRef { image: None, ..photo.clone() }).await.expect("stored");
    assert_eq!(replayed, *part);
    assert_eq!(photo.size_bytes as usize, part.encoded_len());
}

#[tokio::test]
async fn a_file_over_the_limit_is_refused_and_noted_without_being_downloaded() {
    let (_dir, media) = media(MediaConfig::default());
    let channel = MemoryChannel::new("memory", "default");
    let big = Attachment { size_bytes: Some(30 << 20), ..file(AttachmentKind::Document, "big", Some("dump.zip")) };
    let received = media.receive(&channel, &[big]).await;
    assert_eq!(received.refusals, ["📎 \"dump.zip\" is 30 MB, over the 20 MB limit here, so I did not open it."]);
    assert_eq!(received.text, ["[\"dump.zip\" (30 MB) not opened: over the 20 MB limit]"]);
    assert!(received.media.is_empty());
}

#[tokio::test]
async fn the_channel_limit_overrides_the_default() {
    let mut config = MediaConfig::default();
    config.channel_max_mb.insert("memory".into(), 1);
    let (_dir, media) = media(config);
    let channel = served("t", vec![b'a'; 2 << 20]);
    let received = media.receive(&channel, &[file(AttachmentKind::Document, "t", Some("a.txt"))]).await;
    assert_eq!(received.refusals.len(), 1, "{received:?}");
    assert!(received.refusals[0].contains("over the 1 MB limit"), "{received:?}");
}

#[tokio::test]
async fn a_program_is_refused_by_its_bytes_whatever_its_name() {
    let (_dir, media) = media(MediaConfig::default());
    let mut elf = b"\x7fELF\x02\x01\x01\x00".to_vec();
    elf.resize(4096, 0);
    let channel = served("x", elf);
    let received = media.receive(&channel, &[file(AttachmentKind::Image, "x", Some("cat.jpg"))]).await;
    assert_eq!(received.refusals, ["📎 \"cat.jpg\" is a kind of file I do not accept (application/x-executable)."]);
    assert!(received.media.is_empty());
    assert_eq!(media.store().sweep(std::time::SystemTime::now() + Duration::from_secs(30 * 86_400)).files, 0);
}

#[tokio::test]
async fn a_text_document_is_inlined_with_its_name_up_to_the_cap() {
    let config = MediaConfig { inline_text_chars: 12, ..MediaConfig::default() };
    let (_dir, media) = media(config);
    let channel = served("d", "# Notes\nline two is long\n".as_bytes().to_vec());
    let received = media.receive(&channel, &[file(AttachmentKind::Document, "d", Some("notes.md"))]).await;
    assert_eq!(
        received.text,
        ["[file \"notes.md\" (text/markdown, 1 KB)]\n# Notes\nline\n[… 13 more characters not shown]\n[end of file]"]
    );
    let [doc] = received.media.as_slice() else { panic!("{received:?}") };
    assert_eq!((doc.kind, doc.mime_type.as_str(), doc.size_bytes), (AttachmentKind::Document, "text/markdown", 25));
    assert!(doc.image.is_none());
    assert_eq!(received.prompt_with("see file"), format!("see file\n\n{}", received.text[0]));
}

#[tokio::test]
async fn a_voice_note_without_a_transcription_service_becomes_a_note() {
    let (_dir, media) = media(MediaConfig::default());
    let mut ogg = b"OggS\x00\x02".to_vec();
    ogg.resize(2048, 7);
    let channel = served("v", ogg);
    let received = media.receive(&channel, &[file(AttachmentKind::Audio, "v", None)]).await;
    assert_eq!(
        received.text,
        ["[the voice note (audio/ogg, 2 KB) not transcribed: no transcription service is configured]"]
    );
    assert_eq!(received.media[0].kind, AttachmentKind::Audio);
    assert!(received.refusals.is_empty());
}

#[tokio::test]
async fn a_lost_download_tells_the_sender_and_the_model() {
    let (_dir, media) = media(MediaConfig::default());
    let channel = MemoryChannel::new("memory", "default");
    let received = media.receive(&channel, &[file(AttachmentKind::Image, "gone", None)]).await;
    assert_eq!(received.refusals, ["📎 I could not download the photo. Please send it again."]);
    assert_eq!(received.text, ["[the photo could not be downloaded]"]);
}

#[tokio::test]
async fn an_image_that_does_not_decode_becomes_a_note() {
    let (_dir, media) = media(MediaConfig::default());
    let mut broken = photo_jpeg();
    broken.truncate(600);
    let channel = served("b", broken);
    let received = media.receive(&channel, &[file(AttachmentKind::Image, "b", Some("b.jpg"))]).await;
    assert!(received.media.is_empty(), "{received:?}");
    assert!(received.text[0].starts_with("[\"b.jpg\" (image/jpeg, 1 KB) could not be shown: "), "{received:?}");
}

#[test]
fn sizes_read_as_people_say_them() {
    use super::megabytes;
    assert_eq!(megabytes(30 << 20), "30 MB");
    assert_eq!(megabytes(1_572_864), "1.5 MB");
    assert_eq!(megabytes(2048), "2 KB");
    assert_eq!(megabytes(1), "1 KB");
}

#[tokio::test]
async fn a_voice_note_is_transcribed_by_the_configured_service() {
    let openai = ferry_fakes::FakeOpenAi::start().await.expect("fake OpenAI");
    openai.set_transcript("Buy milk on the way home.");
    let transcription = crate::config::TranscriptionConfig {
        base_url: openai.url(),
        api_key: Some(crate::config::Secret::new("sk-voice")),
        language: Some("en".into()),
        ..Default::default()
    };
    let (_dir, media) = media(MediaConfig { transcription: Some(transcription), ..MediaConfig::default() });
    let mut ogg = b"OggS\x00\x02".to_vec();
    ogg.resize(2048, 7);
    let channel = served("v", ogg);
    let received = media.receive(&channel, &[file(AttachmentKind::Audio, "v", None)]).await;
    assert_eq!(received.text, ["[voice note transcript] Buy milk on the way home."]);
    let [asked] = openai.transcriptions().try_into().expect("one transcription");
    assert_eq!(
        (asked.file_name.as_deref(), asked.file_len, asked.language.as_deref()),
        (Some("voice.ogg"), 2048, Some("en"))
    );
}

#[tokio::test]
async fn a_failed_transcription_becomes_a_note() {
    let openai = ferry_fakes::FakeOpenAi::start().await.expect("fake OpenAI");
    openai.push_transcription_error(ferry_fakes::HttpError::new(500, "The server had an error"));
    let transcription = crate::config::TranscriptionConfig {
        base_url: openai.url(),
        api_key: Some(crate::config::Secret::new("sk-voice")),
        ..Default::default()
    };
    let (_dir, media) = media(MediaConfig { transcription: Some(transcription), ..MediaConfig::default() });
    let channel = served("v", b"OggS\x00\x02 some opus".to_vec());
    let received = media.receive(&channel, &[file(AttachmentKind::Audio, "v", None)]).await;
    assert!(
        received.text[0].starts_with("[the voice note (audio/ogg, 1 KB) could not be transcribed: "),
        "{received:?}"
    );
    assert!(!received.text[0].contains("sk-voice"));
}
