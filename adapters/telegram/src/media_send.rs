//! Outbound files: one [`OutboundMessage`] with an attachment becomes one `sendPhoto`,
//! `sendVoice`, `sendAudio`, `sendVideo` or `sendDocument`, with the message's text as the
//! caption.
//!
//! How a file is shown is chosen from its kind, MIME type, size and pixel size, by the Bot
//! API's rules ([`Method::for_attachment`]):
//! - a JPEG, PNG or WebP image within `sendPhoto`'s limits (10 MB, width + height ≤ 10000,
//!   sides at most 20:1) is a photo; any other image (a GIF, a huge scan) a document, so it
//!   arrives unaltered;
//! - OGG/Opus audio is a voice note; MP3 and M4A are music (`sendAudio` takes only those);
//! - an MPEG-4 video is a video (Telegram clients play only MPEG-4);
//! - everything else is a document, under its file name.
//!
//! A photo Telegram still refuses for its pixels (`PHOTO_INVALID_DIMENSIONS`, …) is sent again
//! as a document: the refusal means nothing was shown, so this cannot duplicate it. Every
//! other failure is classified like a text send's ([`crate::error`]), so a rejected caption
//! markup comes back as `MarkupRejected` and the core resends the file with a plain caption.

use std::path::Path;

use ferry_channel::{Attachment, AttachmentKind, ChannelError, OutboundMessage, TextFormat};
use teloxide::payloads::{SendAudioSetters, SendDocumentSetters, SendPhotoSetters, SendVideoSetters, SendVoiceSetters};
use teloxide::requests::Requester;
use teloxide::types::{InputFile, Message, ParseMode, Recipient, ReplyParameters, ThreadId};
use teloxide::{ApiError, Bot, RequestError};
use tracing::{debug, info};

use crate::CHANNEL_NAME;
use crate::error::redact;

/// `sendPhoto`: "The photo must be at most 10 MB in size" (Bot API). Counted in decimal
/// megabytes, the stricter reading.
pub(crate) const PHOTO_LIMIT: u64 = 10 * 1000 * 1000;

/// `sendPhoto`: "The photo's width and height must not exceed 10000 in total" (Bot API).
const PHOTO_MAX_SIDES_SUM: u64 = 10_000;

/// `sendPhoto`: "Width and height ratio must be at most 20" (Bot API).
const PHOTO_MAX_RATIO: u64 = 20;

/// Image types Telegram shows as photos (it re-encodes them as JPEG). GIFs are left out:
/// as a photo they would lose their animation.
const PHOTO_TYPES: [&str; 3] = ["image/jpeg", "image/png", "image/webp"];

/// Audio `sendVoice` plays as a voice note: OGG with Opus.
const VOICE_TYPES: [&str; 2] = ["audio/ogg", "audio/opus"];

/// Audio `sendAudio` shows in the music player: "must be in the .MP3 or .M4A format".
const MUSIC_TYPES: [&str; 5] = ["audio/mpeg", "audio/mp3", "audio/mp4", "audio/x-m4a", "audio/m4a"];

/// Video `sendVideo` takes: "Telegram clients support MPEG4 videos (other formats may be
/// sent as Document)".
const VIDEO_TYPES: [&str; 1] = ["video/mp4"];

/// Photo refusals that mean "this file cannot be a photo": retried once as a document.
const PHOTO_REFUSALS: [&str; 3] = ["PHOTO_INVALID_DIMENSIONS", "PHOTO_SAVE_FILE_INVALID", "IMAGE_PROCESS_FAILED"];

/// The Bot API method a file goes out with.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Method {
    Photo,
    Voice,
    Audio,
    Video,
    Document,
}

impl Method {
    /// How `attachment`, `size` bytes long, is best shown (see the module docs).
    pub(crate) fn for_attachment(attachment: &Attachment, size: u64) -> Self {
        let mime = attachment.mime_type.as_deref().map(|mime| essence(mime).to_ascii_lowercase()).unwrap_or_default();
        let is = |types: &[&str]| types.contains(&mime.as_str());
        match attachment.kind {
            AttachmentKind::Image
                if is(&PHOTO_TYPES) && size <= PHOTO_LIMIT && photo_shape_ok(attachment.dimensions) =>
            {
                Self::Photo
            }
            AttachmentKind::Audio if is(&VOICE_TYPES) => Self::Voice,
            AttachmentKind::Audio if is(&MUSIC_TYPES) => Self::Audio,
            AttachmentKind::Video if is(&VIDEO_TYPES) => Self::Video,
            _ => Self::Document,
        }
    }

    fn name(self) -> &'static str {
        match self {
            Self::Photo => "sendPhoto",
            Self::Voice => "sendVoice",
            Self::Audio => "sendAudio",
            Self::Video => "sendVideo",
            Self::Document => "sendDocument",
        }
    }
}

/// `image/jpeg; charset=…` → `image/jpeg`.
fn essence(mime: &str) -> &str {
    mime.split(';').next().unwrap_or_default().trim()
}

/// Whether a photo's pixel size is within `sendPhoto`'s rules; an unknown size is tried.
fn photo_shape_ok(dimensions: Option<(u32, u32)>) -> bool {
    let Some((width, height)) = dimensions else { return true };
    let (width, height) = (u64::from(width), u64::from(height));
    let (long, short) = (width.max(height), width.min(height));
    short > 0 && width + height <= PHOTO_MAX_SIDES_SUM && long <= short * PHOTO_MAX_RATIO
}

/// Where the file goes and what comes with it: the same for every method.
pub(crate) struct Envelope<'a> {
    pub(crate) recipient: Recipient,
    pub(crate) thread: Option<ThreadId>,
    pub(crate) reply: Option<ReplyParameters>,
    pub(crate) message: &'a OutboundMessage,
}

/// Uploads the file at `path` as `message`'s attachment. Errors are Telegram's, for the
/// caller to classify; a file that cannot be read is [`ChannelError::Rejected`] (retrying
/// will not make it appear).
pub(crate) async fn send_file(
    bot: &Bot,
    envelope: &Envelope<'_>,
    attachment: &Attachment,
    path: &Path,
) -> Result<Result<Message, RequestError>, ChannelError> {
    let metadata = tokio::fs::metadata(path).await.map_err(|error| ChannelError::Rejected {
        reason: format!("cannot read the file to upload ({}): {error}", attachment.reference),
    })?;
    let method = Method::for_attachment(attachment, metadata.len());
    let file_name = upload_name(attachment, path);
    debug!(
        channel = CHANNEL_NAME,
        chat_id = %envelope.message.target.chat.id,
        method = method.name(),
        bytes = metadata.len(),
        "uploading a file"
    );
    let sent = send_as(bot, envelope, method, attachment, path, &file_name).await;
    match sent {
        Err(error) if method == Method::Photo && is_photo_refusal(&error) => {
            info!(
                channel = CHANNEL_NAME,
                chat_id = %envelope.message.target.chat.id,
                reason = %redact(&error.to_string(), bot.token()),
                "Telegram refused the image as a photo; sending it as a document instead"
            );
            Ok(send_as(bot, envelope, Method::Document, attachment, path, &file_name).await)
        }
        other => Ok(other),
    }
}

/// The caption options every `send<Media>` payload has, set the same way on each.
macro_rules! send_with_caption {
    ($request:expr, $envelope:expr) => {{
        let envelope: &Envelope<'_> = $envelope;
        let mut request = $request;
        if !envelope.message.text.is_empty() {
            request = request.caption(envelope.message.text.clone());
            if envelope.message.format == TextFormat::Markup {
                request = request.parse_mode(ParseMode::Html);
            }
        }
        if let Some(thread) = envelope.thread {
            request = request.message_thread_id(thread);
        }
        if let Some(reply) = &envelope.reply {
            request = request.reply_parameters(reply.clone());
        }
        request.await
    }};
}

async fn send_as(
    bot: &Bot,
    envelope: &Envelope<'_>,
    method: Method,
    attachment: &Attachment,
    path: &Path,
    file_name: &str,
) -> Result<Message, RequestError> {
    // Read as the request goes out (the file is immutable in the media store), never whole.
    let file = InputFile::file(path.to_owned()).file_name(file_name.to_owned());
    let chat = envelope.recipient.clone();
    match method {
        Method::Photo => send_with_caption!(bot.send_photo(chat, file), envelope),
        Method::Voice => send_with_caption!(bot.send_voice(chat, file), envelope),
        Method::Audio => send_with_caption!(bot.send_audio(chat, file), envelope),
        Method::Video => {
            let mut request = bot.send_video(chat, file).supports_streaming(true);
            if let Some((width, height)) = attachment.dimensions {
                request = request.width(width).height(height);
            }
            send_with_caption!(request, envelope)
        }
        Method::Document => send_with_caption!(bot.send_document(chat, file), envelope),
    }
}

/// Whether Telegram refused a photo for what it is (pixels, size, format), not for the
/// request: the same file is still fine as a document.
fn is_photo_refusal(error: &RequestError) -> bool {
    match error {
        RequestError::Api(ApiError::ImageProcessFailed) => true,
        RequestError::Api(ApiError::Unknown(text)) => PHOTO_REFUSALS.iter().any(|code| text.contains(code)),
        _ => false,
    }
}

/// The name the reader sees for a document: the attachment's own, else the stored file's
/// name with an extension for its type (media store names are content hashes, often bare).
fn upload_name(attachment: &Attachment, path: &Path) -> String {
    if let Some(name) = attachment.file_name.as_deref().map(str::trim).filter(|name| !name.is_empty()) {
        return name.to_owned();
    }
    let stem = path.file_name().map(|name| name.to_string_lossy().into_owned()).unwrap_or_else(|| "file".to_owned());
    if stem.contains('.') {
        return stem;
    }
    match attachment.mime_type.as_deref().map(essence).and_then(extension_for) {
        Some(extension) => format!("{stem}.{extension}"),
        None => stem,
    }
}

/// A usual extension for a MIME type, so clients open the file with the right program.
fn extension_for(mime: &str) -> Option<&'static str> {
    Some(match mime.to_ascii_lowercase().as_str() {
        "image/jpeg" => "jpg",
        "image/png" => "png",
        "image/webp" => "webp",
        "image/gif" => "gif",
        "application/pdf" => "pdf",
        "text/plain" => "txt",
        "text/markdown" => "md",
        "text/csv" => "csv",
        "text/html" => "html",
        "application/json" => "json",
        "application/zip" => "zip",
        "audio/ogg" | "audio/opus" => "ogg",
        "audio/mpeg" | "audio/mp3" => "mp3",
        "audio/mp4" | "audio/x-m4a" | "audio/m4a" => "m4a",
        "audio/wav" | "audio/x-wav" => "wav",
        "video/mp4" => "mp4",
        "video/webm" => "webm",
        _ => return None,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn outbound(kind: AttachmentKind, mime: &str, dimensions: Option<(u32, u32)>) -> Attachment {
        Attachment { mime_type: Some(mime.to_owned()), dimensions, ..Attachment::remote(kind, "media/abc") }
    }

    #[test]
    fn images_within_the_photo_rules_are_photos_and_the_rest_documents() {
        use AttachmentKind::Image;
        let method = |mime, dimensions, size| Method::for_attachment(&outbound(Image, mime, dimensions), size);
        assert_eq!(method("image/png", Some((800, 600)), 1_000), Method::Photo);
        assert_eq!(method("image/jpeg", None, 1_000), Method::Photo);
        assert_eq!(method("image/gif", Some((200, 200)), 1_000), Method::Document, "animation kept");
        assert_eq!(method("image/png", Some((800, 600)), PHOTO_LIMIT + 1), Method::Document);
        assert_eq!(method("image/png", Some((6000, 4001)), 1_000), Method::Document, "sum over 10000");
        assert_eq!(method("image/png", Some((2100, 100)), 1_000), Method::Document, "ratio over 20");
        assert_eq!(method("image/png", Some((2000, 100)), 1_000), Method::Photo, "ratio of exactly 20");
    }

    #[test]
    fn opus_is_a_voice_note_mp3_is_music_mp4_is_video_and_the_rest_documents() {
        use AttachmentKind::*;
        let method = |kind, mime| Method::for_attachment(&outbound(kind, mime, None), 1_000);
        assert_eq!(method(Audio, "audio/ogg"), Method::Voice);
        assert_eq!(method(Audio, "audio/ogg; codecs=opus"), Method::Voice);
        assert_eq!(method(Audio, "audio/mpeg"), Method::Audio);
        assert_eq!(method(Audio, "audio/wav"), Method::Document);
        assert_eq!(method(Video, "video/mp4"), Method::Video);
        assert_eq!(method(Video, "video/webm"), Method::Document);
        assert_eq!(method(Document, "application/pdf"), Method::Document);
        assert_eq!(method(Other, "application/octet-stream"), Method::Document);
    }

    #[test]
    fn documents_keep_their_name_or_get_an_extension_for_their_type() {
        let path = Path::new("/media/3f9a1c");
        let mut pdf = outbound(AttachmentKind::Document, "application/pdf", None);
        assert_eq!(upload_name(&pdf, path), "3f9a1c.pdf");
        pdf.file_name = Some("report.pdf".to_owned());
        assert_eq!(upload_name(&pdf, path), "report.pdf");
        let unknown = outbound(AttachmentKind::Other, "application/x-unknown", None);
        assert_eq!(upload_name(&unknown, path), "3f9a1c");
    }
}
