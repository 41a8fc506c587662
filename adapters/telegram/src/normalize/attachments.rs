//! The files of a Telegram message → [`Attachment`]s, each with its `file_id` as
//! `reference` (what [`download`](crate::download) fetches with `getFile`) and the size
//! Telegram announced, so the core can refuse a file over its limit without fetching it.
//!
//! Telegram sends every photo in several sizes; the largest one a bot may download (see
//! [`DOWNLOAD_LIMIT`]) is kept. Stickers are images when static (WebP); animated (`.tgs`,
//! Lottie) and video (`.webm`) stickers are [`AttachmentKind::Other`] with their type and a
//! file name, so the core can say a sticker came without trying to read it.

use ferry_channel::{Attachment, AttachmentKind};
use teloxide::types::{FileMeta, Message, PhotoSize, Sticker};

use crate::download::DOWNLOAD_LIMIT;

/// Telegram re-encodes every photo as JPEG.
const PHOTO_MIME: &str = "image/jpeg";
/// Voice notes are OGG/Opus unless Telegram says otherwise.
const VOICE_MIME: &str = "audio/ogg";
/// Video notes (round videos) are always MPEG-4.
const VIDEO_NOTE_MIME: &str = "video/mp4";
/// Static stickers are WebP images.
const STICKER_MIME: &str = "image/webp";
/// Animated stickers: gzipped Lottie JSON, Telegram's `.tgs`.
const ANIMATED_STICKER_MIME: &str = "application/x-tgsticker";
/// Video stickers: VP9 WebM.
const VIDEO_STICKER_MIME: &str = "video/webm";

/// The files of `message`, in the order Telegram's fields list them. A message carries at
/// most one kind of media, so this is at most one attachment in practice.
pub(super) fn attachments(message: &Message) -> Vec<Attachment> {
    let mut found = Vec::new();
    if let Some(photo) = message.photo().and_then(largest_downloadable) {
        let mut attachment = attachment(AttachmentKind::Image, &photo.file, Some(PHOTO_MIME.to_owned()), None);
        attachment.dimensions = Some((photo.width, photo.height));
        found.push(attachment);
    }
    if let Some(animation) = message.animation() {
        // A GIF or a silent MPEG-4 "GIF": Telegram also fills `document` for these, which
        // teloxide folds into the animation.
        let mime = animation.mime_type.as_ref().map(ToString::to_string);
        let mut attachment = attachment(AttachmentKind::Video, &animation.file, mime, animation.file_name.clone());
        attachment.dimensions = Some((animation.width, animation.height));
        found.push(attachment);
    }
    if let Some(document) = message.document() {
        let mime = document.mime_type.as_ref().map(ToString::to_string);
        found.push(attachment(AttachmentKind::Document, &document.file, mime, document.file_name.clone()));
    }
    if let Some(voice) = message.voice() {
        let mime = voice.mime_type.as_ref().map_or_else(|| VOICE_MIME.to_owned(), ToString::to_string);
        found.push(attachment(AttachmentKind::Audio, &voice.file, Some(mime), None));
    }
    if let Some(audio) = message.audio() {
        let mime = audio.mime_type.as_ref().map(ToString::to_string);
        found.push(attachment(AttachmentKind::Audio, &audio.file, mime, audio.file_name.clone()));
    }
    if let Some(video) = message.video() {
        let mime = video.mime_type.as_ref().map(ToString::to_string);
        let mut attachment = attachment(AttachmentKind::Video, &video.file, mime, video.file_name.clone());
        attachment.dimensions = Some((video.width, video.height));
        found.push(attachment);
    }
    if let Some(note) = message.video_note() {
        let mut attachment = attachment(AttachmentKind::Video, &note.file, Some(VIDEO_NOTE_MIME.to_owned()), None);
        attachment.dimensions = Some((note.length, note.length));
        found.push(attachment);
    }
    if let Some(sticker) = message.sticker() {
        found.push(sticker_attachment(sticker));
    }
    found
}

fn attachment(
    kind: AttachmentKind,
    file: &FileMeta,
    mime_type: Option<String>,
    file_name: Option<String>,
) -> Attachment {
    Attachment {
        mime_type,
        file_name,
        size_bytes: announced_size(file),
        ..Attachment::remote(kind, file.id.to_string())
    }
}

/// The size Telegram announced; teloxide puts `u32::MAX` where Telegram left it out.
fn announced_size(file: &FileMeta) -> Option<u64> {
    (file.size != u32::MAX).then_some(u64::from(file.size))
}

/// The largest size of a photo a bot may download; an unknown size counts as downloadable.
/// If every size is over the limit, the largest, so the core sees its size and refuses it
/// with a note instead of the photo vanishing.
fn largest_downloadable(sizes: &[PhotoSize]) -> Option<&PhotoSize> {
    let area = |size: &&PhotoSize| u64::from(size.width) * u64::from(size.height);
    let fits = |size: &&PhotoSize| announced_size(&size.file).is_none_or(|bytes| bytes <= DOWNLOAD_LIMIT);
    sizes.iter().filter(fits).max_by_key(area).or_else(|| sizes.iter().max_by_key(area))
}

fn sticker_attachment(sticker: &Sticker) -> Attachment {
    let dimensions = Some((u32::from(sticker.width), u32::from(sticker.height)));
    let (kind, mime, file_name) = if sticker.is_animated() {
        (AttachmentKind::Other, ANIMATED_STICKER_MIME, Some("sticker.tgs"))
    } else if sticker.is_video() {
        (AttachmentKind::Other, VIDEO_STICKER_MIME, Some("sticker.webm"))
    } else {
        (AttachmentKind::Image, STICKER_MIME, None)
    };
    let mut attachment = attachment(kind, &sticker.file, Some(mime.to_owned()), file_name.map(str::to_owned));
    attachment.dimensions = dimensions;
    attachment
}
