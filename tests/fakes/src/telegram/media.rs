//! Users' files, injected as Telegram delivers them: a message whose `photo` (every size),
//! `document`, `voice`, `audio`, `video`, `video_note` or `sticker` field points at files the
//! fake holds, so a client can `getFile` and download each one.
//!
//! ```no_run
//! # async fn demo() -> std::io::Result<()> {
//! use ferry_fakes::{FakeTelegram, TgMedia, TgUser};
//! let telegram = FakeTelegram::start("123:TEST").await?;
//! let photo = telegram.media_message(42, TgUser::new(42, "Ada"), TgMedia::Photo(vec![(90, 60), (800, 600)]), Some("look"));
//! let largest = &photo.files[1];
//! assert_eq!(telegram.file_bytes(&largest.file_id).map(|b| b.len() as u64), Some(largest.file_size));
//! # Ok(()) }
//! ```

use std::io::Cursor;

use axum::body::Bytes;
use serde_json::{Map, Value, json};

use super::files::TgFile;
use super::state::detect_entities;
use super::{FakeTelegram, TgUser, lock};

/// How a sticker is encoded (`is_animated` / `is_video` on the wire).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum StickerFormat {
    /// A `.webp` image.
    Static,
    /// A Lottie animation, `.tgs` (gzipped JSON).
    Animated,
    /// A `.webm` video.
    Video,
}

/// What a user's media message carries.
#[derive(Clone, Debug)]
pub enum TgMedia {
    /// A photo, in these `(width, height)` sizes, smallest first, as Telegram sends every
    /// photo; the fake makes a JPEG of each size.
    Photo(Vec<(u32, u32)>),
    Document {
        file_name: String,
        mime_type: String,
        bytes: Vec<u8>,
    },
    /// A voice note (`audio/ogg`, Opus).
    Voice {
        bytes: Vec<u8>,
        duration: u32,
    },
    Audio {
        file_name: String,
        mime_type: String,
        bytes: Vec<u8>,
    },
    /// A video (`video/mp4`) of this pixel size.
    Video {
        width: u32,
        height: u32,
        bytes: Vec<u8>,
    },
    /// A round video note: square, `length` pixels a side, always MPEG-4.
    VideoNote {
        length: u32,
        bytes: Vec<u8>,
    },
    /// A 512 × 512 sticker.
    Sticker {
        format: StickerFormat,
        bytes: Vec<u8>,
    },
}

/// A media message as injected: its update and the files it points at, in the order of the
/// message's fields (for a photo, smallest size first).
#[derive(Clone, Debug)]
pub struct InjectedMedia {
    pub update_id: i64,
    pub message_id: i64,
    pub files: Vec<TgFile>,
}

/// A JPEG of this size (a gradient, so sizes differ in bytes too): photos for tests.
pub fn sample_jpeg(width: u32, height: u32) -> Vec<u8> {
    let image = image::RgbImage::from_fn(width, height, |x, y| {
        image::Rgb([(x % 256) as u8, (y % 256) as u8, ((x + y) % 256) as u8])
    });
    let mut out = Cursor::new(Vec::new());
    // Encoding an in-memory RGB image as JPEG only fails on a zero-sized one.
    if image.write_to(&mut out, image::ImageFormat::Jpeg).is_err() {
        return Vec::new();
    }
    out.into_inner()
}

impl FakeTelegram {
    /// A message from `from` in `chat_id` carrying `media`, with an optional caption (and its
    /// mention and command entities). The files are stored, so `getFile` and the download
    /// route serve them.
    pub fn media_message(
        &self,
        chat_id: i64,
        from: impl Into<TgUser>,
        media: TgMedia,
        caption: Option<&str>,
    ) -> InjectedMedia {
        let from = from.into();
        let mut state = lock(&self.shared.state);
        let mut files = Vec::new();
        let mut store = |folder: &str, extension: &str, bytes: Vec<u8>| {
            let file = state.files.store(folder, extension, Bytes::from(bytes));
            files.push(file.clone());
            file.meta_json()
        };
        let (field, value) = match media {
            TgMedia::Photo(sizes) => {
                let sizes: Vec<Value> = sizes
                    .into_iter()
                    .map(|(width, height)| {
                        let mut size = store("photos", "jpg", sample_jpeg(width, height));
                        size.insert("width".into(), width.into());
                        size.insert("height".into(), height.into());
                        Value::Object(size)
                    })
                    .collect();
                ("photo", Value::Array(sizes))
            }
            TgMedia::Document { file_name, mime_type, bytes } => {
                let extension = file_name.rsplit_once('.').map_or("bin", |(_, ext)| ext).to_owned();
                let document = with(
                    store("documents", &extension, bytes),
                    json!({ "file_name": file_name, "mime_type": mime_type }),
                );
                ("document", document)
            }
            TgMedia::Voice { bytes, duration } => {
                ("voice", with(store("voice", "oga", bytes), json!({ "duration": duration, "mime_type": "audio/ogg" })))
            }
            TgMedia::Audio { file_name, mime_type, bytes } => {
                let extension = file_name.rsplit_once('.').map_or("mp3", |(_, ext)| ext).to_owned();
                let extra = json!({ "duration": 1, "file_name": file_name, "mime_type": mime_type });
                ("audio", with(store("music", &extension, bytes), extra))
            }
            TgMedia::Video { width, height, bytes } => {
                let extra = json!({ "width": width, "height": height, "duration": 1, "mime_type": "video/mp4" });
                ("video", with(store("videos", "mp4", bytes), extra))
            }
            TgMedia::VideoNote { length, bytes } => {
                ("video_note", with(store("video_notes", "mp4", bytes), json!({ "length": length, "duration": 1 })))
            }
            TgMedia::Sticker { format, bytes } => {
                let (extension, animated, video) = match format {
                    StickerFormat::Static => ("webp", false, false),
                    StickerFormat::Animated => ("tgs", true, false),
                    StickerFormat::Video => ("webm", false, true),
                };
                let extra = json!({
                    "type": "regular", "width": 512, "height": 512, "is_animated": animated,
                    "is_video": video, "emoji": "🙂", "set_name": "FerryTest",
                });
                ("sticker", with(store("stickers", extension, bytes), extra))
            }
        };
        let caption = caption.map(str::to_owned);
        let message = state.new_message(chat_id, &from, |_, message| {
            message.insert(field.into(), value);
            if let Some(caption) = caption {
                let entities = detect_entities(&caption);
                message.insert("caption".into(), caption.into());
                if !entities.is_empty() {
                    message.insert("caption_entities".into(), entities.into());
                }
            }
        });
        drop(state);
        let message_id = message["message_id"].as_i64().unwrap_or_default();
        let update_id = self.inject_update(json!({ "message": message }));
        InjectedMedia { update_id, message_id, files }
    }

    /// The bytes of a stored file (a user's or one the bot sent).
    pub fn file_bytes(&self, file_id: &str) -> Option<Bytes> {
        lock(&self.shared.state).files.get(file_id).map(|stored| stored.bytes.clone())
    }
}

/// A file object's fields plus `extra`'s.
fn with(mut meta: Map<String, Value>, extra: Value) -> Value {
    if let Value::Object(extra) = extra {
        meta.extend(extra);
    }
    Value::Object(meta)
}
