//! File uploads: `multipart/form-data` bodies read as the Bot API reads them, and the methods
//! that send a file — `sendPhoto`, `sendDocument`, `sendVoice`, `sendAudio`, `sendVideo`.
//!
//! A file arrives either as a part named after the method's field (`photo`, as `curl -F
//! photo=@cat.jpg` sends it) or as a part with any name that the field points to with
//! `attach://<name>` (as teloxide sends it). A known `file_id` re-sends a stored file; URLs are
//! refused, since the fake fetches nothing.
//!
//! Telegram's limits and error texts: a body over 50 MB is answered `413 Request Entity Too
//! Large`; a photo must be at most 10 MB (`PHOTO_SAVE_FILE_INVALID`), decode as an image
//! (`IMAGE_PROCESS_FAILED`), have width + height ≤ 10000 and a side ratio ≤ 20
//! (`PHOTO_INVALID_DIMENSIONS`); a caption is at most 1024 characters after entity parsing
//! ("message caption is too long") and is parsed with `parse_mode` like a message's text.

use std::io::Cursor;

use axum::body::Bytes;
use serde_json::{Map, Value};

use super::SentMessage;
use super::files::{PHOTO_UPLOAD_LIMIT, TgFile, UPLOAD_LIMIT};
use super::html;
use super::methods::{ApiError, MethodResult, placement, render, store_bot_message};
use super::params::Params;
use super::state::State;

/// The most the fake reads of one request body: the 50 MB file limit plus room for the
/// other fields. Larger bodies get the 413 that Telegram's front end answers.
pub(crate) const BODY_LIMIT: usize = UPLOAD_LIMIT as usize + (1 << 20);

/// A caption's limit after entity parsing, in UTF-16 units like every Bot API length.
const CAPTION_LIMIT: usize = 1024;

/// The longest side of a sent photo Telegram keeps; larger photos are scaled down to it.
const PHOTO_MAX_SIDE: u32 = 2560;

/// `photo`: "width and height must not exceed 10000 in total" (Bot API, sendPhoto).
const PHOTO_MAX_SIDES_SUM: u32 = 10_000;

/// `photo`: "Width and height ratio must be at most 20" (Bot API, sendPhoto).
const PHOTO_MAX_RATIO: u32 = 20;

/// One file part of a multipart body.
#[derive(Debug, Clone)]
pub(crate) struct Upload {
    /// The part's name: the method's field (`photo`) or an `attach://` name.
    pub(crate) name: String,
    pub(crate) file_name: String,
    /// The part's `Content-Type`, if the client gave one.
    pub(crate) content_type: Option<String>,
    pub(crate) bytes: Bytes,
}

/// The file a message the bot sent carries, as it arrived.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SentMedia {
    /// The method that sent it (`sendPhoto`, `sendDocument`, …): how it is shown.
    pub method: String,
    /// The stored file; download it like a user's file.
    pub file: TgFile,
    /// The upload's file name (empty when the client gave none).
    pub file_name: String,
    /// The type Telegram gives it: the part's `Content-Type`, else guessed from the file
    /// name's extension, else the method's default (`audio/ogg` for voice notes). For photos,
    /// the decoded image format.
    pub mime_type: String,
    /// The bytes as uploaded.
    pub bytes: Bytes,
    /// Pixel size, for photos.
    pub dimensions: Option<(u32, u32)>,
}

pub(crate) fn is_multipart(content_type: Option<&str>) -> bool {
    content_type.is_some_and(|value| value.to_ascii_lowercase().starts_with("multipart/form-data"))
}

/// Reads a `multipart/form-data` body: text parts become parameters (merged over the query
/// string's), parts with a file name are uploads. `Err` is the description to answer.
pub(crate) async fn parse(
    query: Option<&str>,
    content_type: &str,
    body: Bytes,
) -> Result<(Params, Vec<Upload>), String> {
    let mut params = Params::parse(query, None, b"")?;
    let boundary = multer::parse_boundary(content_type).map_err(|_| "Bad Request: can't parse multipart body")?;
    let stream = futures::stream::once(async move { Ok::<Bytes, std::io::Error>(body) });
    let mut multipart = multer::Multipart::new(stream, boundary);
    let mut uploads = Vec::new();
    let malformed = |_| "Bad Request: can't parse multipart body".to_owned();
    while let Some(field) = multipart.next_field().await.map_err(malformed)? {
        let name = field.name().unwrap_or_default().to_owned();
        let file_name = field.file_name().map(str::to_owned);
        let content_type = field.content_type().map(ToString::to_string);
        let bytes = field.bytes().await.map_err(malformed)?;
        match file_name {
            Some(file_name) => uploads.push(Upload { name, file_name, content_type, bytes }),
            None => {
                params.0.insert(name, Value::String(String::from_utf8_lossy(&bytes).into_owned()));
            }
        }
    }
    Ok((params, uploads))
}

/// What a sent file is, per method.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Kind {
    Photo,
    Document,
    Voice,
    Audio,
    Video,
}

impl Kind {
    fn of(key: &str) -> Option<Self> {
        Some(match key {
            "sendphoto" => Self::Photo,
            "senddocument" => Self::Document,
            "sendvoice" => Self::Voice,
            "sendaudio" => Self::Audio,
            "sendvideo" => Self::Video,
            _ => return None,
        })
    }

    /// The parameter that carries the file, and the message field that shows it.
    fn field(self) -> &'static str {
        match self {
            Self::Photo => "photo",
            Self::Document => "document",
            Self::Voice => "voice",
            Self::Audio => "audio",
            Self::Video => "video",
        }
    }

    fn method(self) -> &'static str {
        match self {
            Self::Photo => "sendPhoto",
            Self::Document => "sendDocument",
            Self::Voice => "sendVoice",
            Self::Audio => "sendAudio",
            Self::Video => "sendVideo",
        }
    }

    /// Telegram's folder for files of this kind (`file_path` prefix).
    fn folder(self) -> &'static str {
        match self {
            Self::Photo => "photos",
            Self::Document => "documents",
            Self::Voice => "voice",
            Self::Audio => "music",
            Self::Video => "videos",
        }
    }

    fn default_mime(self) -> &'static str {
        match self {
            Self::Photo => "image/jpeg",
            Self::Document => "application/octet-stream",
            Self::Voice => "audio/ogg",
            Self::Audio => "audio/mpeg",
            Self::Video => "video/mp4",
        }
    }
}

/// A file a send names: an upload, or a stored file re-sent by `file_id`.
struct Incoming {
    file_name: String,
    content_type: Option<String>,
    bytes: Bytes,
}

fn incoming(state: &State, kind: Kind, params: &Params, uploads: &[Upload]) -> Result<Incoming, ApiError> {
    let field = kind.field();
    let from_upload = |upload: &Upload| Incoming {
        file_name: upload.file_name.clone(),
        content_type: upload.content_type.clone(),
        bytes: upload.bytes.clone(),
    };
    match params.str(field) {
        Some(value) => {
            if let Some(name) = value.strip_prefix("attach://") {
                let upload = uploads.iter().find(|upload| upload.name == name);
                return upload
                    .map(from_upload)
                    .ok_or_else(|| ApiError::bad_request("wrong file identifier/HTTP URL specified"));
            }
            let stored = state
                .files
                .get(value)
                .ok_or_else(|| ApiError::bad_request("wrong file identifier/HTTP URL specified"))?;
            let extension = stored.file.file_path.rsplit_once('.').map(|(_, ext)| ext).unwrap_or_default();
            Ok(Incoming { file_name: format!("file.{extension}"), content_type: None, bytes: stored.bytes.clone() })
        }
        None => uploads
            .iter()
            .find(|upload| upload.name == field)
            .map(from_upload)
            .ok_or_else(|| ApiError::bad_request(&format!("there is no {field} in the request"))),
    }
}

/// The MIME type Telegram would record for a file name's extension (the common ones).
fn mime_from_name(file_name: &str) -> Option<&'static str> {
    let (_, extension) = file_name.rsplit_once('.')?;
    Some(match extension.to_ascii_lowercase().as_str() {
        "jpg" | "jpeg" => "image/jpeg",
        "png" => "image/png",
        "webp" => "image/webp",
        "gif" => "image/gif",
        "pdf" => "application/pdf",
        "txt" => "text/plain",
        "md" => "text/markdown",
        "csv" => "text/csv",
        "json" => "application/json",
        "zip" => "application/zip",
        "ogg" | "oga" | "opus" => "audio/ogg",
        "mp3" => "audio/mpeg",
        "m4a" => "audio/mp4",
        "wav" => "audio/wav",
        "mp4" => "video/mp4",
        "webm" => "video/webm",
        "mov" => "video/quicktime",
        _ => return None,
    })
}

/// Checks a photo as Telegram does; its pixel size and image type when it passes.
fn check_photo(bytes: &[u8]) -> Result<((u32, u32), &'static str), ApiError> {
    if bytes.len() as u64 > PHOTO_UPLOAD_LIMIT {
        return Err(ApiError::bad_request("PHOTO_SAVE_FILE_INVALID"));
    }
    let failed = || ApiError::bad_request("IMAGE_PROCESS_FAILED");
    let format = image::guess_format(bytes).map_err(|_| failed())?;
    let mime = match format {
        image::ImageFormat::Jpeg => "image/jpeg",
        image::ImageFormat::Png => "image/png",
        image::ImageFormat::WebP => "image/webp",
        image::ImageFormat::Gif => "image/gif",
        _ => return Err(failed()),
    };
    let reader = image::ImageReader::with_format(Cursor::new(bytes), format);
    let (width, height) = reader.into_dimensions().map_err(|_| failed())?;
    let (long, short) = (width.max(height), width.min(height).max(1));
    if width + height > PHOTO_MAX_SIDES_SUM || long > short * PHOTO_MAX_RATIO {
        return Err(ApiError::bad_request("PHOTO_INVALID_DIMENSIONS"));
    }
    Ok(((width, height), mime))
}

/// `send<Media>`: checks the file and caption, stores the file and the message, and answers
/// the `Message` with its `photo` / `document` / `voice` / `audio` / `video` object.
pub(crate) fn send_media(state: &mut State, key: &str, params: &Params, uploads: &[Upload]) -> MethodResult {
    let kind = Kind::of(key).ok_or_else(|| ApiError::new(404, "Not Found"))?;
    let chat_id = super::methods::chat_id(params)?;
    if !state.chats.contains_key(&chat_id) {
        return Err(ApiError::bad_request("chat not found"));
    }
    let file = incoming(state, kind, params, uploads)?;
    if file.bytes.len() as u64 > UPLOAD_LIMIT {
        return Err(ApiError::entity_too_large());
    }
    if file.bytes.is_empty() {
        return Err(ApiError::bad_request("file must be non-empty"));
    }
    let photo = if kind == Kind::Photo { Some(check_photo(&file.bytes)?) } else { None };

    let caption = params.str("caption").unwrap_or_default();
    let rendered = render(caption, params, "caption_entities")?;
    if html::utf16_len(&rendered.visible) > CAPTION_LIMIT {
        return Err(ApiError::bad_request("message caption is too long"));
    }
    let placement = placement(state, params)?;

    let named = file.content_type.as_deref().filter(|mime| *mime != "application/octet-stream");
    let mime_type = match photo {
        Some((_, mime)) => mime.to_owned(),
        None => named.or_else(|| mime_from_name(&file.file_name)).unwrap_or(kind.default_mime()).to_owned(),
    };
    let extension = file.file_name.rsplit_once('.').map_or("bin", |(_, ext)| ext);
    // Telegram re-encodes photos as JPEG; the fake keeps the bytes and only names them so.
    let extension = if kind == Kind::Photo { "jpg" } else { extension };
    let stored = state.files.store(kind.folder(), extension, file.bytes.clone());

    let media_json = media_json(kind, &stored, &file.file_name, &mime_type, photo.map(|(size, _)| size), params);
    let visible = rendered.visible.clone();
    let entities = rendered.entities;
    let fill = |message: &mut Map<String, Value>| {
        message.insert(kind.field().into(), media_json);
        if !visible.is_empty() {
            message.insert("caption".into(), visible.into());
        }
        if !entities.is_empty() {
            message.insert("caption_entities".into(), entities.into());
        }
    };
    let sent = SentMessage {
        chat_id,
        message_id: 0,
        thread_id: None,
        reply_to: None,
        text: caption.to_owned(),
        visible_text: rendered.visible,
        parse_mode: rendered.parse_mode,
        edits: 0,
        media: Some(SentMedia {
            method: kind.method().to_owned(),
            file: stored,
            file_name: file.file_name,
            mime_type,
            bytes: file.bytes,
            dimensions: photo.map(|(size, _)| size),
        }),
    };
    store_bot_message(state, placement, params, fill, sent)
}

/// The media object of a sent message.
fn media_json(
    kind: Kind,
    file: &TgFile,
    file_name: &str,
    mime_type: &str,
    dimensions: Option<(u32, u32)>,
    params: &Params,
) -> Value {
    let mut object = file.meta_json();
    let duration = params.int("duration").unwrap_or(0).max(0);
    match kind {
        Kind::Photo => {
            let (width, height) = dimensions.unwrap_or((1, 1));
            // Scaled to Telegram's largest kept size, as its `photo` array reports it.
            let scale = f64::from(PHOTO_MAX_SIDE) / f64::from(width.max(height));
            let (width, height) = if scale < 1.0 {
                ((f64::from(width) * scale).round() as u32, (f64::from(height) * scale).round() as u32)
            } else {
                (width, height)
            };
            object.insert("width".into(), width.into());
            object.insert("height".into(), height.into());
            return Value::Array(vec![Value::Object(object)]);
        }
        Kind::Document => {}
        Kind::Voice | Kind::Audio => {
            object.insert("duration".into(), duration.into());
        }
        Kind::Video => {
            object.insert("duration".into(), duration.into());
            object.insert("width".into(), params.int("width").unwrap_or(0).max(0).into());
            object.insert("height".into(), params.int("height").unwrap_or(0).max(0).into());
        }
    }
    if kind != Kind::Voice && !file_name.is_empty() {
        object.insert("file_name".into(), file_name.into());
    }
    object.insert("mime_type".into(), mime_type.into());
    Value::Object(object)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn text_parts_are_parameters_and_named_parts_are_files() {
        let body = "--XyZ\r\nContent-Disposition: form-data; name=\"chat_id\"\r\n\r\n42\r\n\
                    --XyZ\r\nContent-Disposition: form-data; name=\"photo\"\r\n\r\nattach://f1\r\n\
                    --XyZ\r\nContent-Disposition: form-data; name=\"f1\"; filename=\"a.jpg\"\r\n\
                    Content-Type: image/jpeg\r\n\r\nJPEGBYTES\r\n--XyZ--\r\n";
        let (params, uploads) =
            parse(Some("caption=hi"), "multipart/form-data; boundary=XyZ", Bytes::from(body)).await.unwrap();
        assert_eq!(params.int("chat_id"), Some(42));
        assert_eq!(params.str("caption"), Some("hi"));
        assert_eq!(params.str("photo"), Some("attach://f1"));
        assert_eq!(uploads.len(), 1);
        assert_eq!((uploads[0].name.as_str(), uploads[0].file_name.as_str()), ("f1", "a.jpg"));
        assert_eq!(uploads[0].content_type.as_deref(), Some("image/jpeg"));
        assert_eq!(&uploads[0].bytes[..], b"JPEGBYTES");
    }

    #[test]
    fn photos_keep_to_telegrams_size_and_shape_rules() {
        let jpeg = |w, h| super::super::media::sample_jpeg(w, h);
        assert_eq!(check_photo(&jpeg(64, 48)).ok().map(|(size, _)| size), Some((64, 48)));
        let refused = |bytes: &[u8]| check_photo(bytes).err().map(|error| error.description);
        assert_eq!(refused(&jpeg(2100, 100)).as_deref(), Some("Bad Request: PHOTO_INVALID_DIMENSIONS"));
        assert_eq!(refused(b"not an image").as_deref(), Some("Bad Request: IMAGE_PROCESS_FAILED"));
    }
}
